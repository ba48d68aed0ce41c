//! Robustness of the ACPI path: corrupted, truncated and mutated tables
//! must give `Ok` or `Err`, never a panic or a hang; and a table whose
//! checksum no longer holds, or that is cut short, must be an `Err`.
//!
//! Deterministic: a fixed-seed `prng::Rng` drives every random choice (as in
//! `mutation.rs`). The inputs are the two QEMU fixture sets and two built
//! ones (a 128-CPU GICv4 server with an SRAT, and a GICC-only one). For
//! each table `from_acpi`, `numa` or `rescue` reads:
//! - every byte changed to 4 other values without fixing the checksum:
//!   always an `Err` naming that table (but a changed signature makes it
//!   an unknown table: a required one is then missing, an optional one
//!   absent; and a changed `Length` may shorten the table to a prefix that
//!   happens to sum to zero, which is then parsed like any other table);
//! - every truncation of its bytes below its `Length`: an `Err`;
//! - every byte changed to 4 other values with the checksum fixed, so the
//!   parser's own checks are reached: no panic;
//! - `Length` set to every value up to the table's size plus 8, with the
//!   bytes cut or zero-extended to match and the checksum fixed: no panic;
//! - `RANDOM_ROUNDS` rounds of 1 to 4 random byte, word and double-word
//!   overwrites (with the checksum fixed in 7 rounds out of 8): no panic.

mod acpi_common;

use std::panic::{AssertUnwindSafe, catch_unwind};

use acpi_common::*;
use platform::{ErrorKind, MemRange, Platform, PlatformError, acpi};
use prng::Rng;

/// Random rounds per input set.
const RANDOM_ROUNDS: usize = 3_000;

const RAM: [MemRange; 2] = [
    MemRange::new(0x4000_0000, 0x4000_0000),
    MemRange::new(0x80_0000_0000, 0x1_0000_0000),
];

/// Byte values near the structure types, lengths and flags the parser
/// looks at.
const INTERESTING_BYTES: [u8; 14] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x08, 0x0b, 0x0c, 0x0e, 0x0f, 0x10, 0x4c, 0x7f, 0xff,
];
/// Values for GSIV, length, address and count fields.
const INTERESTING_WORDS: [u64; 14] = [
    0,
    1,
    15,
    16,
    31,
    32,
    1019,
    1020,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0xffff_ffff_ffff_f000,
    0x8000_0000_0000_0000,
    u64::MAX,
];

/// One input: named tables, all of which `from_acpi` accepts.
struct Input {
    name: &'static str,
    tables: Vec<(String, Vec<u8>)>,
}

/// The signatures whose tables are read (SRAT by `numa` only).
const READ: [&str; 5] = ["APIC", "FACP", "GTDT", "SPCR", "SRAT"];

/// Runs every entry point; panics naming `what` if any panics.
fn run(tables: &[Vec<u8>], what: &dyn Fn() -> String) -> Outcome {
    let slices = slices(tables);
    let outcome = catch_unwind(AssertUnwindSafe(|| Outcome {
        platform: Platform::from_acpi(&slices, &RAM, &[], None),
        numa: acpi::numa(&slices),
        rescue: acpi::rescue(&slices),
    }));
    outcome.unwrap_or_else(|_| panic!("the ACPI path panicked on {}", what()))
}

struct Outcome {
    platform: Result<Platform, PlatformError>,
    numa: Result<Vec<acpi::NumaNode>, PlatformError>,
    rescue: platform::Rescue,
}

impl Input {
    fn fixture(name: &'static str, dir: &str) -> Input {
        Input {
            name,
            tables: fixture_tables(dir),
        }
    }

    fn built(name: &'static str, tables: Vec<Vec<u8>>) -> Input {
        let tables = tables
            .into_iter()
            .map(|t| (String::from_utf8_lossy(&t[..4]).into_owned(), t))
            .collect();
        Input { name, tables }
    }

    fn bytes(&self) -> Vec<Vec<u8>> {
        self.tables.iter().map(|(_, t)| t.clone()).collect()
    }

    /// Indices of the tables the parser reads.
    fn read(&self) -> Vec<usize> {
        (0..self.tables.len())
            .filter(|&i| READ.contains(&self.tables[i].0.as_str()))
            .collect()
    }

    fn check_unmutated(&self) {
        let out = run(&self.bytes(), &|| format!("{} unmutated", self.name));
        if let Err(e) = &out.platform {
            panic!("{}: {e}", self.name);
        }
        if let Err(e) = &out.numa {
            panic!("{}: {e}", self.name);
        }
        assert!(out.rescue.console.is_some() && out.rescue.psci_conduit.is_some());
    }
}

/// The spec's name of a table, as errors give it.
fn table_name(signature: &str) -> &str {
    match signature {
        "APIC" => "MADT",
        "FACP" => "FADT",
        other => other,
    }
}

/// The error a broken `signature` table causes: from `from_acpi`, or from
/// `numa` for the SRAT, which `from_acpi` does not read.
fn broken_table_error<'a>(signature: &str, out: &'a Outcome) -> Option<&'a PlatformError> {
    if signature == "SRAT" {
        out.numa.as_ref().err()
    } else {
        out.platform.as_ref().err()
    }
}

fn sum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |s, &b| s.wrapping_add(b))
}

/// Single-byte corruptions and truncations of each table read, without
/// fixing the checksum: an error naming the table, always.
fn corruptions_are_errors(input: &Input) {
    input.check_unmutated();
    let mut tables = input.bytes();
    for at in input.read() {
        let signature = input.tables[at].0.clone();
        let node = format!("ACPI table {}", table_name(&signature));
        let original = tables[at].clone();
        for offset in 0..original.len() {
            let byte = original[offset];
            for value in [!byte, byte ^ 0x01, byte ^ 0x80, byte.wrapping_add(0x10)] {
                tables[at][offset] = value;
                let what = || format!("{} {signature}[{offset}] = {value:#04x}", input.name);
                let out = run(&tables, &what);
                if offset < 4 {
                    signature_changed(&signature, &out, &what);
                    continue;
                }
                // A Length cut to a prefix that sums to zero is a valid
                // (shorter) table: it is parsed on its own merits.
                let length = u32::from_le_bytes(tables[at][4..8].try_into().unwrap()) as usize;
                let valid_prefix = (4..8).contains(&offset)
                    && (36..=original.len()).contains(&length)
                    && sum(&tables[at][..length]) == 0;
                if !valid_prefix {
                    let e = broken_table_error(&signature, &out)
                        .unwrap_or_else(|| panic!("{} accepted", what()));
                    assert_eq!(e.node, node, "{}: {e}", what());
                    assert!(
                        matches!(e.property.as_deref(), Some("Checksum" | "Length")),
                        "{}: {e}",
                        what()
                    );
                }
            }
            tables[at][offset] = byte;
        }
        for len in 0..original.len() {
            tables[at] = original[..len].to_vec();
            let what = || format!("{} {signature} cut to {len} bytes", input.name);
            let out = run(&tables, &what);
            // Too short for even the signature: not recognised.
            if len < 4 {
                signature_changed(&signature, &out, &what);
                continue;
            }
            let e = broken_table_error(&signature, &out)
                .unwrap_or_else(|| panic!("{} accepted", what()));
            assert_eq!(e.node, node, "{}: {e}", what());
            assert_eq!(e.property.as_deref(), Some("Length"), "{}: {e}", what());
        }
        tables[at] = original;
    }
}

/// With its signature changed the table is not recognised: a required
/// one is missing, an optional one absent.
fn signature_changed(signature: &str, out: &Outcome, what: &dyn Fn() -> String) {
    match signature {
        "SPCR" => {
            let p = out
                .platform
                .as_ref()
                .unwrap_or_else(|e| panic!("{}: {e}", what()));
            assert_eq!(p.uart, None, "{}", what());
        }
        "SRAT" => {
            let nodes = out
                .numa
                .as_ref()
                .unwrap_or_else(|e| panic!("{}: {e}", what()));
            assert!(nodes.is_empty(), "{}", what());
        }
        _ => {
            let e = out
                .platform
                .as_ref()
                .err()
                .unwrap_or_else(|| panic!("{} accepted", what()));
            assert_eq!(
                e.node,
                format!("ACPI table {}", table_name(signature)),
                "{e}"
            );
            assert_eq!(e.kind, ErrorKind::MissingNode, "{}: {e}", what());
        }
    }
}

/// Every byte of each table read changed with the checksum fixed; then
/// every Length.
fn checksummed_mutants_do_not_panic(input: &Input, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut tables = input.bytes();
    for at in input.read() {
        let signature = input.tables[at].0.clone();
        let original = tables[at].clone();
        for offset in (0..original.len()).filter(|&o| o != 9) {
            let byte = original[offset];
            let values = [
                !byte,
                INTERESTING_BYTES[offset % INTERESTING_BYTES.len()],
                INTERESTING_BYTES[(offset / 3 + 5) % INTERESTING_BYTES.len()],
                rng.next_u64() as u8,
            ];
            for value in values {
                tables[at][offset] = value;
                fix_checksum(&mut tables[at]);
                run(&tables, &|| {
                    format!(
                        "{} {signature}[{offset}] = {value:#04x}, re-checksummed",
                        input.name
                    )
                });
            }
            tables[at].copy_from_slice(&original);
        }
        for length in 0..original.len() + 8 {
            let mut t = original.clone();
            t.resize(length.max(10), 0);
            t[4..8].copy_from_slice(&(length as u32).to_le_bytes());
            fix_checksum(&mut t);
            tables[at] = t;
            run(&tables, &|| {
                format!("{} {signature} with Length {length}", input.name)
            });
        }
        tables[at] = original;
    }
}

/// Random multi-field overwrites.
fn random_rounds(input: &Input, seed: u64) {
    let mut rng = Rng::new(seed);
    let read = input.read();
    let original = input.bytes();
    let mut tables = original.clone();
    let mut accepted = 0;
    for round in 0..RANDOM_ROUNDS {
        let mut edits = Vec::new();
        for _ in 0..1 + rng.index(4) {
            let at = read[rng.index(read.len())];
            let table = &mut tables[at];
            let width = [1, 2, 4, 8][rng.index(4)];
            let offset = rng.index(table.len().saturating_sub(width) + 1);
            let value = match rng.index(3) {
                0 => INTERESTING_WORDS[rng.index(INTERESTING_WORDS.len())],
                1 if width == 1 => u64::from(INTERESTING_BYTES[rng.index(INTERESTING_BYTES.len())]),
                _ => rng.next_u64(),
            };
            let end = (offset + width).min(table.len());
            table[offset..end].copy_from_slice(&value.to_le_bytes()[..end - offset]);
            edits.push((input.tables[at].0.clone(), offset, width, value));
        }
        if rng.index(8) != 0 {
            for &at in &read {
                fix_checksum(&mut tables[at]);
            }
        }
        let out = run(&tables, &|| {
            format!("{} random round {round}: {edits:x?}", input.name)
        });
        accepted += usize::from(out.platform.is_ok());
        tables.clone_from(&original);
    }
    // The rounds reach past the checksum: some mutants still parse.
    assert!(
        accepted > 0,
        "{}: no random mutant was accepted",
        input.name
    );
}

/// A 128-CPU GICv4 server with four GICR regions, two ITSes, level-low
/// timers, an SBSA UART and an SRAT over two sockets.
fn server() -> Input {
    let mut structures = vec![gicd(0x4d00_0000, 4)];
    for uid in 0..128u32 {
        let (socket, die, cluster, core) = (uid / 64, uid / 32 % 2, uid / 4 % 8, uid % 4);
        let mpidr = u64::from(socket) << 32
            | u64::from(die * 2 + 1) << 16
            | u64::from(cluster) << 8
            | u64::from(core);
        structures.push(Gicc::new(uid, mpidr).bytes());
    }
    for base in [
        0x4d10_0000,
        0x6d10_0000,
        0x400_4d10_0000,
        0x400_6d10_0000u64,
    ] {
        structures.push(gicr(base, 0x40_0000));
    }
    structures.push(its(0, 0x4c00_0000));
    structures.push(its(1, 0x400_4c00_0000));
    let mut srat_structures = Vec::new();
    for uid in 0..128 {
        srat_structures.push(gicc_affinity(uid / 64, uid, 1));
    }
    srat_structures.push(memory_affinity(0, 0x4000_0000, 0x4000_0000, 1));
    srat_structures.push(memory_affinity(1, 0x80_0000_0000, 0x1_0000_0000, 1));
    let low = TIMER_ACTIVE_LOW;
    Input::built(
        "server",
        vec![
            madt(&structures),
            gtdt(
                [(29, low), (30, low), (27, low), (26, low)],
                Some((28, low)),
            ),
            fadt_with_oem(PSCI_COMPLIANT, b"HISI  ", b"HIP08   "),
            spcr(SPCR_SBSA, 0, 0x9408_0000, 1 << 3, 141),
            srat(&srat_structures),
        ],
    )
}

/// Redistributors from the GICCs, no GICR structure, an HVC conduit.
fn gicc_only() -> Input {
    let mut structures = vec![gicd(0x0800_0000, 3), its(0, 0x0808_0000)];
    for uid in 0..6u32 {
        let mut gicc = Gicc::new(uid, u64::from(uid) << 8);
        gicc.gicr_base = 0x080a_0000 + u64::from(uid) * 0x2_0000;
        gicc.flags |= GICC_MAINTENANCE_EDGE;
        structures.push(gicc.bytes());
    }
    Input::built(
        "gicc-only",
        vec![
            madt(&structures),
            gtdt(QEMU_TIMERS, None),
            fadt(PSCI_COMPLIANT | PSCI_USE_HVC),
            qemu_spcr(),
        ],
    )
}

#[test]
fn qemu_4cpu_corruptions() {
    corruptions_are_errors(&Input::fixture("qemu-4cpu", "qemu-virt-4cpu"));
}

#[test]
fn qemu_8cpu_numa_corruptions() {
    corruptions_are_errors(&Input::fixture("qemu-8cpu", "qemu-virt-8cpu-numa"));
}

#[test]
fn server_corruptions() {
    corruptions_are_errors(&server());
}

#[test]
fn gicc_only_corruptions() {
    corruptions_are_errors(&gicc_only());
}

#[test]
fn qemu_4cpu_checksummed_mutants() {
    checksummed_mutants_do_not_panic(&Input::fixture("qemu-4cpu", "qemu-virt-4cpu"), 0xac91_0001);
}

#[test]
fn qemu_8cpu_numa_checksummed_mutants() {
    checksummed_mutants_do_not_panic(
        &Input::fixture("qemu-8cpu", "qemu-virt-8cpu-numa"),
        0xac91_0002,
    );
}

#[test]
fn server_checksummed_mutants() {
    checksummed_mutants_do_not_panic(&server(), 0xac91_0003);
}

#[test]
fn gicc_only_checksummed_mutants() {
    checksummed_mutants_do_not_panic(&gicc_only(), 0xac91_0004);
}

#[test]
fn qemu_4cpu_random_rounds() {
    random_rounds(&Input::fixture("qemu-4cpu", "qemu-virt-4cpu"), 0xac91_0011);
}

#[test]
fn qemu_8cpu_numa_random_rounds() {
    random_rounds(
        &Input::fixture("qemu-8cpu", "qemu-virt-8cpu-numa"),
        0xac91_0012,
    );
}

#[test]
fn server_random_rounds() {
    random_rounds(&server(), 0xac91_0013);
}

#[test]
fn gicc_only_random_rounds() {
    random_rounds(&gicc_only(), 0xac91_0014);
}
