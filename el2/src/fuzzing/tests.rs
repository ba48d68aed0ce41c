//! The harnesses under plain `cargo test`: the seed corpus, the corpus
//! files against their generator, a fixed number of deterministic
//! mutations of the seeds per harness, and the inputs that once broke an
//! invariant.
//!
//! CI has no nightly toolchain and no time for coverage-guided fuzzing, so
//! the mutation tests stand in for it: a fixed `prng::Rng` seed drives
//! libFuzzer-style mutations (bit flips, byte and word overwrites with
//! interesting values, inserts, deletes, copies, splices with another
//! seed) of the generated seeds, enough iterations to reach well past
//! them, and each test stays within a few seconds. The boot fixtures of
//! `platform/tests/fixtures` are mutated by `platform/tests/mutation.rs`;
//! the device-tree test here mutates the seeds with VM nodes and guest
//! trees, which those fixtures lack.

extern crate std;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;

use prng::Rng;

use super::seeds::seeds;
use super::{TARGETS, Target};

/// Set to `1` to rewrite `fuzz/corpus/*/seed-*` from the generator
/// instead of comparing them.
const WRITE_CORPUS_VARIABLE: &str = "EL2_WRITE_FUZZ_CORPUS";

/// Longest mutated input, as libFuzzer's default `-max_len`.
const MAX_LEN: usize = 4096;

fn target(name: &str) -> Target {
    *TARGETS
        .iter()
        .find(|t| t.name == name)
        .expect("a harness of that name")
}

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

fn hex(data: &[u8]) -> String {
    let mut text = String::with_capacity(data.len() * 2);
    for byte in data {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

/// Runs `input` through `target`; on a panic, prints the input (as hex,
/// to paste into a regression file) and fails with the panic.
fn run(target: Target, input: &[u8], what: &dyn Fn() -> String) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| (target.run)(input))) {
        std::eprintln!(
            "{} broke on {}: {} bytes: {}",
            target.name,
            what(),
            input.len(),
            hex(input)
        );
        resume_unwind(panic);
    }
}

#[test]
fn every_seed_runs_clean() {
    for target in TARGETS {
        let seeds = seeds(target.name);
        assert!(!seeds.is_empty(), "{} has no seeds", target.name);
        for (name, bytes) in &seeds {
            run(target, bytes, &|| String::from(*name));
        }
    }
}

/// The checked-in seeds are the generator's; with
/// `EL2_WRITE_FUZZ_CORPUS=1` they are rewritten (stale `seed-*` files
/// removed). Other files in the corpus directories (regressions, inputs a
/// fuzzer added) are left alone.
#[test]
fn corpus_files_match_the_generator() {
    let write = std::env::var(WRITE_CORPUS_VARIABLE).is_ok_and(|v| v == "1");
    for target in TARGETS {
        let dir = corpus_dir(target.name);
        let seeds = seeds(target.name);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if name.starts_with("seed-")
                    && !seeds
                        .iter()
                        .any(|(s, _)| name == alloc::format!("seed-{s}"))
                {
                    std::fs::remove_file(&path).unwrap();
                }
            }
        }
        for (name, bytes) in seeds {
            let path = dir.join(alloc::format!("seed-{name}"));
            if write {
                std::fs::write(&path, &bytes).unwrap();
            }
            let on_disk = std::fs::read(&path).unwrap_or_else(|e| {
                panic!(
                    "{}: {e}; regenerate with {WRITE_CORPUS_VARIABLE}=1 cargo test -p el2 fuzzing",
                    path.display()
                )
            });
            assert!(
                on_disk == bytes,
                "{} differs from its generator; regenerate with {WRITE_CORPUS_VARIABLE}=1 cargo test -p el2 fuzzing",
                path.display()
            );
        }
    }
}

/// Every `regression-*` file in the corpus directories: an input that once
/// broke a harness, kept (named after what it broke) so that it never
/// does again. Inputs a fuzzer added are not replayed here; seeds are
/// replayed by [`every_seed_runs_clean`].
#[test]
fn corpus_regressions_stay_fixed() {
    for target in TARGETS {
        let Ok(entries) = std::fs::read_dir(corpus_dir(target.name)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("regression-") {
                let input = std::fs::read(&path).unwrap();
                run(target, &input, &|| name.clone());
            }
        }
    }
}

/// Byte values that tend to sit on boundaries.
const INTERESTING_BYTES: [u8; 10] = [0x00, 0x01, 0x02, 0x03, 0x04, 0x10, 0x7f, 0x80, 0xfe, 0xff];
/// Words for lengths, offsets, counts and selectors.
const INTERESTING_WORDS: [u64; 12] = [
    0,
    1,
    0x40,
    0xff,
    0x100,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    0x8000_0000_0000_0000,
    u64::MAX - 1,
    u64::MAX,
];

/// Whether mutations may change an input's length. A device tree keeps
/// its blocks at offsets its header gives, so inserting or deleting bytes
/// almost always just breaks the header's checks, which
/// `platform/tests/mutation.rs` already sweeps; its mutants keep their
/// length and reach the tree's contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Length {
    Changes,
    Kept,
}

/// One to four libFuzzer-style mutations of `data`, `others` being the
/// rest of the corpus to splice with.
fn mutate(rng: &mut Rng, data: &mut Vec<u8>, others: &[(&'static str, Vec<u8>)], length: Length) {
    for _ in 0..1 + rng.index(4) {
        let len = data.len();
        let at = rng.index(len);
        let kinds = if length == Length::Kept { 5 } else { 9 };
        match rng.index(kinds) {
            0 if len > 0 => data[at] ^= 1 << rng.index(8),
            1 if len > 0 => data[at] = rng.next_u64() as u8,
            2 if len > 0 => data[at] = INTERESTING_BYTES[rng.index(INTERESTING_BYTES.len())],
            3 => {
                // An interesting word, little- or big-endian (FDT fields
                // are big-endian), 2, 4 or 8 bytes wide.
                let word = INTERESTING_WORDS[rng.index(INTERESTING_WORDS.len())];
                let width = [2, 4, 8][rng.index(3)];
                let (little, big) = (word.to_le_bytes(), word.to_be_bytes());
                let bytes = if rng.next_u64() & 1 == 0 {
                    &little[..width]
                } else {
                    &big[8 - width..]
                };
                for (i, byte) in bytes.iter().enumerate() {
                    if let Some(slot) = data.get_mut(at + i) {
                        *slot = *byte;
                    }
                }
            }
            4 if len > 0 => {
                // A chunk copied over another place of the input.
                let count = (1 + rng.index(16)).min(len - at);
                let to = rng.index(len - count + 1);
                data.copy_within(at..at + count, to);
            }
            5 => {
                let count = 1 + rng.index(8);
                let bytes: Vec<u8> = (0..count).map(|_| rng.next_u64() as u8).collect();
                data.splice(at..at, bytes);
            }
            6 if len > 0 => {
                let end = (at + 1 + rng.index(8)).min(len);
                data.drain(at..end);
            }
            7 if !others.is_empty() => {
                let (_, other) = &others[rng.index(others.len())];
                let from = rng.index(other.len());
                data.truncate(at);
                data.extend_from_slice(&other[from..]);
            }
            _ if length == Length::Changes => data.truncate(at),
            _ => {}
        }
    }
    if length == Length::Changes {
        data.truncate(MAX_LEN);
    }
}

/// `iterations` mutations of `target`'s seeds, each derived from a seed
/// (half the time from the previous mutant instead, so mutations stack).
fn mutate_and_run(target_name: &str, iterations: usize, rng_seed: u64, length: Length) {
    let target = target(target_name);
    let corpus = seeds(target_name);
    let mut rng = Rng::new(rng_seed);
    let mut input: Vec<u8> = Vec::new();
    for iteration in 0..iterations {
        if iteration % 2 == 0 || input.is_empty() {
            input = corpus[rng.index(corpus.len())].1.clone();
        }
        mutate(&mut rng, &mut input, &corpus, length);
        run(target, &input, &|| alloc::format!("mutation {iteration}"));
    }
}

#[test]
fn mutated_device_trees_keep_every_invariant() {
    mutate_and_run("device_tree", 40_000, 0x5eed_d7b0, Length::Kept);
}

#[test]
fn mutated_smccc_calls_keep_every_invariant() {
    mutate_and_run("smccc", 4_000, 0x5eed_5cc0, Length::Changes);
}

#[test]
fn mutated_exits_keep_every_invariant() {
    mutate_and_run("exits", 60_000, 0x5eed_e517, Length::Changes);
}

#[test]
fn mutated_pl011_sessions_keep_every_invariant() {
    mutate_and_run("pl011", 40_000, 0x5eed_0011, Length::Changes);
}

#[test]
fn mutated_vgic_sessions_keep_every_invariant() {
    mutate_and_run("vgic", 3_500, 0x5eed_67c3, Length::Changes);
}

#[test]
fn mutated_acpi_tables_keep_every_invariant() {
    mutate_and_run("acpi", 40_000, 0x5eed_ac91, Length::Changes);
}

#[test]
fn the_mutator_stays_within_bounds() {
    let mut rng = Rng::new(1);
    let others = [("other", alloc::vec![7u8; 5000])];
    let mut data = Vec::new();
    for round in 0..10_000 {
        let length = if round % 2 == 0 {
            Length::Changes
        } else {
            Length::Kept
        };
        let before = data.len();
        mutate(&mut rng, &mut data, &others, length);
        if length == Length::Kept {
            assert_eq!(data.len(), before);
        }
        assert!(data.len() <= MAX_LEN);
    }
}

/// The device-tree seeds reach the VM parser: every VM of the good tree
/// is accepted, every one of the bad tree after its first is refused.
#[test]
fn device_tree_seeds_reach_every_vm_outcome() {
    let seeds = seeds("device_tree");
    let tree = |name: &str| {
        let (_, bytes) = seeds
            .iter()
            .find(|(n, _)| *n == name)
            .expect("a seed of that name");
        platform::Platform::parse(bytes).expect("a seed tree parses")
    };
    let good = tree("host-good-vms");
    assert_eq!(good.vms.len(), 5);
    assert!(good.vms.iter().all(Result::is_ok), "{:?}", good.vms);
    let bad = tree("host-bad-vms");
    assert!(bad.vms[0].is_ok());
    assert!(bad.vms[1..].iter().all(Result::is_err), "{:?}", bad.vms);
    assert!(tree("guest-64-vcpus-openeuler").vms.is_empty());
}

/// The ACPI seeds reach what they are named for: the QEMU machines and the
/// built server build, with their VMs and NUMA domains; the others fail
/// where they should.
#[test]
fn acpi_seeds_reach_every_outcome() {
    use platform::acpi::{numa, rescue};
    use platform::{ErrorKind, ErrorOrigin, Platform};

    let seeds = seeds("acpi");
    assert!(seeds.iter().all(|(_, bytes)| bytes.len() <= MAX_LEN));
    let run = |name: &str| {
        let (_, bytes) = seeds
            .iter()
            .find(|(n, _)| *n == name)
            .expect("a seed of that name");
        let input = super::acpi::decode(bytes);
        let tables = input.slices();
        (
            Platform::from_acpi(&tables, &input.ram, &input.reserved, input.vm_description),
            numa(&tables),
            rescue(&tables),
        )
    };
    let ok = |name: &str| {
        let (platform, numa, _) = run(name);
        let platform = platform.unwrap_or_else(|e| panic!("{name}: {e}"));
        (platform, numa.unwrap_or_else(|e| panic!("{name}: {e}")))
    };
    let error = |name: &str| run(name).0.expect_err(name);

    let (four, nodes) = ok("qemu-4cpu-unread-tables-vms");
    assert_eq!((four.cpus.len(), four.model.as_str()), (4, "BOCHS BXPC"));
    assert!(nodes.is_empty());
    assert_eq!(four.vms.len(), 5);
    assert!(four.vms.iter().all(Result::is_ok), "{:?}", four.vms);

    let (eight, nodes) = ok("qemu-8cpu-numa-uefi-ram-pieces");
    assert_eq!(eight.cpus.len(), 8);
    assert_eq!(
        eight.memory,
        [platform::MemRange::new(0x4000_0000, 0x4000_0000)]
    );
    assert_eq!(eight.reserved.len(), 1);
    assert_eq!(nodes.len(), 2);
    assert!(eight.vms[0].is_ok());
    let affinity = eight.vms[1].as_ref().expect_err("CPU 8 of 8");
    assert_eq!(affinity.property.as_deref(), Some("cpu-affinity"));
    assert!(eight.vms[2].is_err());

    let (server, nodes) = ok("server-gicv4-per-cpu-redistributors");
    assert_eq!(server.cpus.len(), 6);
    assert_eq!(server.gic.redistributor_regions.len(), 6);
    assert_eq!(server.gic.its.len(), 2);
    assert!(server.timer.hyp_virt.is_some());
    assert_eq!(server.psci.conduit, platform::Conduit::Hvc);
    assert!(server.uart.as_ref().is_some_and(|uart| uart.irq.is_none()));
    assert_eq!(nodes.len(), 2);
    assert_eq!(
        nodes.iter().map(|n| n.cpus.len()).collect::<Vec<_>>(),
        [4, 1]
    );

    let (old, nodes) = ok("acpi-5.1-gic-version-unspecified");
    assert_eq!(old.gic.redistributor_regions.len(), 2);
    assert!(old.uart.is_none() && old.timer.hyp_virt.is_none() && nodes.is_empty());

    assert!(matches!(
        error("gicv2-refused").kind,
        ErrorKind::Unsupported(_)
    ));
    let (platform, _, rescued) = run("qemu-4cpu-checksums-as-given");
    assert!(platform.is_ok() && rescued.console.is_some());
    let twice = error("duplicate-and-missing-tables");
    assert_eq!(
        (twice.node.as_str(), twice.property.as_deref()),
        ("ACPI table GTDT", Some("Signature"))
    );
    let (_, numa_twice, rescued) = run("duplicate-and-missing-tables");
    assert_eq!(numa_twice.expect_err("two SRATs").node, "ACPI table SRAT");
    assert!(rescued.console.is_some() && rescued.psci_conduit.is_none());
    assert_eq!(
        error("ram-runs-past-the-end").origin(),
        ErrorOrigin::MemoryMap
    );
    assert_eq!(
        error("vm-description-not-a-tree").origin(),
        ErrorOrigin::DeviceTree
    );
}

/// A VM node is under `/chosen` also when `/chosen` has a unit address,
/// which a lookup of `/chosen` ignores (the fuzzer found a tree whose
/// `chosen@` node held the VMs: `regression-chosen-with-unit-address`).
#[test]
fn vm_nodes_may_sit_under_a_chosen_with_a_unit_address() {
    use super::device_tree::under_chosen;
    for node in [
        "/chosen/vm@0",
        "/chosen@/vm@0",
        "/chosen@1/vm",
        "/chosen/a/b",
    ] {
        assert!(under_chosen(node), "{node}");
    }
    for node in [
        "/chosen",
        "/chosen/",
        "/chosen@1",
        "/chosen@1/",
        "/chosenx/vm",
        "/vm@0",
    ] {
        assert!(!under_chosen(node), "{node}");
    }
}
