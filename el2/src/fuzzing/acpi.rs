//! The host from ACPI tables: [`Platform::from_acpi`] with a RAM list,
//! reserved regions and an optional VM-description device tree, then
//! [`acpi::numa`] and [`acpi::rescue`] on the same tables.
//!
//! Input layout: chunks split on [`SEPARATOR`] (bytes that occur in no
//! seed table), so that a mutation which inserts or deletes bytes inside
//! one table leaves the others where they were:
//! 1. the first chunk, read as zero-padded values: a byte whose value
//!    modulo `MAX_RAM + 1` is how many RAM ranges follow, each a `u64`
//!    base and a `u64` size (little-endian); then a byte modulo
//!    `MAX_RESERVED + 1` and that many reserved ranges the same way;
//! 2. every further chunk (at most [`MAX_TABLES`] tables) is a control
//!    byte and then the table's bytes. With [`VM_DESCRIPTION`] set in the
//!    control byte the bytes are the VM-description device tree instead
//!    (the first such chunk; later ones are ignored). Otherwise the
//!    control byte first sets the signature ([`SIGNATURES`], picked by
//!    bits 4:2; 0 and 7 keep the table's own), then with
//!    [`FIX_LENGTH`] sets the header's `Length` to the table's size, then
//!    with [`FIX_CHECKSUM`] sets `Checksum` so that the first `Length`
//!    bytes sum to zero. The seeds set both fix bits, so that mutated
//!    tables pass the header checks and reach the structure parsers;
//!    clearing them reaches the header checks.
//!
//! Invariants checked, as `platform::acpi` and [`Platform::from_acpi`]
//! document them:
//! - nothing panics, whatever the tables;
//! - an error's `Display` is not empty and starts with its description:
//!   `ACPI table ` and the table's name (MADT, FADT, GTDT or SPCR: never
//!   the SRAT, which `from_acpi` does not read; MADT or SRAT for
//!   [`acpi::numa`]); `UEFI memory map` naming `ram` (every range empty)
//!   or `ram[i]` (a range that runs past the end of the address space);
//!   or a device-tree node, only when a VM description was given and
//!   exactly as [`platform::vms_from_dt`] fails on it;
//! - `from_acpi` fails when the MADT, GTDT or FADT is absent (an absent
//!   table is `MissingNode` naming it, and only then), when one of the
//!   tables it reads (those and the SPCR) appears twice or fails the
//!   header checks (too short, `Length` outside the header and the bytes
//!   given, a checksum that is not zero), and when no RAM range is
//!   non-empty or one wraps;
//! - a platform that builds has at least one CPU, each named `MADT
//!   GICC[i]` (in MADT order), started with PSCI, with an MPIDR within
//!   [`Mpidr::AFFINITY_MASK`] that no other CPU has; its memory is sorted,
//!   non-empty, neither overlapping nor touching, and exactly the union of
//!   the non-empty RAM ranges given; its reserved regions are the given
//!   ones without the empty ones, in order; its distributor is one 64 KiB
//!   frame and each ITS 128 KiB, none wrapping; its redistributor regions
//!   are non-empty, do not wrap or overlap and have no stride; the
//!   maintenance interrupt and every timer are PPIs (INTIDs 16 to 31)
//!   with binding flags of one trigger, the timers' GSIVs and triggers
//!   those of the GTDT (the secure EL1 timer's 0 becoming INTID 29, the
//!   virtual EL2 timer only from revision 3); the console is a 4 KiB PL011
//!   frame at the SPCR's `Base Address` with no interrupt or an SPI of
//!   INTIDs 32 to 1019, and is there exactly when the SPCR names a PL011
//!   or SBSA UART in memory space at a non-zero address; PSCI is version
//!   1.0; there is no RTC and no timer frequency; the model is the OEM
//!   IDs, printable and trimmed;
//! - a platform that builds builds the same from the tables in reverse
//!   order, each followed by bytes past its `Length`, and the RAM in
//!   reverse order; [`acpi::numa`] answers the same for those tables;
//! - without a VM description there are no bootargs and no VMs; with one,
//!   the bootargs and VMs are those of [`platform::vms_from_dt`], except
//!   that a `cpu-affinity` naming a CPU the MADT does not have is an
//!   error; every VM is an error naming its `/chosen` node and a property
//!   or a configuration within the binding's rules (as the `device_tree`
//!   harness checks them), names unique;
//! - [`acpi::rescue`] reads the SPCR and FADT on their own: it answers the
//!   same for just those tables; a console it finds is the SPCR's, with no
//!   interrupt; when the platform builds, it finds that console (without
//!   its interrupt) and the PSCI conduit;
//! - [`acpi::numa`] is empty without an SRAT and fails with two, or with
//!   one that fails the header checks; when the platform builds it fails
//!   only naming the SRAT; its domains are sorted and unique, their memory
//!   ranges sorted, non-empty and not wrapping, ranges of different
//!   domains do not overlap, no CPU is in two domains, and every CPU is
//!   one of the platform's.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use platform::acpi::{self, MEMORY_MAP_NODE, NODE_PREFIX, NumaNode};
use platform::{
    Conduit, EnableMethod, ErrorKind, ErrorOrigin, Interrupt, MemRange, Mpidr, Platform,
    PlatformError, Rescue, ReservedRegion, Uart, UartKind,
};

use super::device_tree::{check_config, check_error, under_chosen};
use super::input::Input;

/// Splits the input into its chunks.
pub(super) const SEPARATOR: [u8; 4] = *b"\xa5TBL";
/// Most RAM ranges the first chunk gives.
pub(super) const MAX_RAM: usize = 8;
/// Most reserved regions the first chunk gives.
pub(super) const MAX_RESERVED: usize = 4;
/// Most tables one input hands over; further chunks are ignored.
pub(super) const MAX_TABLES: usize = 16;

/// Control byte: set the header's `Length` to the table's size.
pub(super) const FIX_LENGTH: u8 = 1 << 0;
/// Control byte: make the first `Length` bytes sum to zero.
pub(super) const FIX_CHECKSUM: u8 = 1 << 1;
/// Control byte: bits 4:2 pick a signature from [`SIGNATURES`].
pub(super) const SIGNATURE_SHIFT: u8 = 2;
/// Control byte: the chunk is the VM-description device tree.
pub(super) const VM_DESCRIPTION: u8 = 1 << 7;
/// The signatures bits 4:2 of a control byte set (0 and 7 keep the
/// table's own): the tables `platform::acpi` reads and one it ignores.
pub(super) const SIGNATURES: [&[u8; 4]; 6] = [b"APIC", b"FACP", b"GTDT", b"SPCR", b"SRAT", b"DSDT"];

/// Header offsets (ACPI 6.5 §5.2.6).
const HEADER_LEN: usize = 36;
const LENGTH: usize = 4;
const CHECKSUM: usize = 9;
const REVISION: usize = 8;

/// The tables `platform::acpi` reads, by signature, with the name its
/// errors give them.
const MADT: usize = 0;
const FADT: usize = 1;
const GTDT: usize = 2;
const SPCR: usize = 3;
const SRAT: usize = 4;
const READ: [(&[u8; 4], &str); 5] = [
    (b"APIC", "MADT"),
    (b"FACP", "FADT"),
    (b"GTDT", "GTDT"),
    (b"SPCR", "SPCR"),
    (b"SRAT", "SRAT"),
];

/// The binding flags of GTDT timer flags bits 1:0 (bit 0 edge, bit 1
/// active low): level high, edge rising, level low, edge falling.
const ONE_TRIGGER: [u32; 4] = [4, 1, 8, 2];
/// GTDT offsets of the timers' GSIVs, each followed by its flags (ACPI
/// 6.5 §5.2.25).
const SECURE_EL1: usize = 48;
const NON_SECURE_EL1: usize = 56;
const VIRTUAL_EL1: usize = 64;
const NON_SECURE_EL2: usize = 72;
const VIRTUAL_EL2: usize = 96;
/// The secure EL1 timer when the GTDT gives GSIV 0: INTID 29, level high.
const DEFAULT_SECURE_EL1: Interrupt = Interrupt::Ppi {
    number: 13,
    flags: 4,
};
/// Frame sizes `platform::acpi` gives (Arm IHI 0069; PL011 TRM).
const GICD_SIZE: u64 = 0x1_0000;
const ITS_SIZE: u64 = 0x2_0000;
const UART_SIZE: u64 = 0x1000;

/// One input, decoded.
#[derive(Clone, Debug, Default)]
pub(super) struct Decoded<'a> {
    pub(super) ram: Vec<MemRange>,
    pub(super) reserved: Vec<ReservedRegion>,
    pub(super) tables: Vec<Vec<u8>>,
    pub(super) vm_description: Option<&'a [u8]>,
}

impl Decoded<'_> {
    pub(super) fn slices(&self) -> Vec<&[u8]> {
        self.tables.iter().map(Vec::as_slice).collect()
    }
}

/// The parts of `data` between separators (one part, `data`, without).
fn chunks(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut done = false;
    core::iter::from_fn(move || {
        if done {
            return None;
        }
        match data.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
            Some(at) => {
                let chunk = &data[..at];
                data = &data[at + SEPARATOR.len()..];
                Some(chunk)
            }
            None => {
                done = true;
                Some(data)
            }
        }
    })
}

/// Decodes an input (see the module documentation).
pub(super) fn decode(data: &[u8]) -> Decoded<'_> {
    let mut chunks = chunks(data);
    let mut head = Input::new(chunks.next().unwrap_or_default());
    let range = |input: &mut Input<'_>| MemRange::new(input.u64(), input.u64());
    let ram_count = head.below(MAX_RAM + 1);
    let ram = (0..ram_count).map(|_| range(&mut head)).collect();
    let reserved_count = head.below(MAX_RESERVED + 1);
    let reserved = (0..reserved_count)
        .map(|_| ReservedRegion {
            range: range(&mut head),
            name: String::from("fuzz"),
        })
        .collect();
    let mut decoded = Decoded {
        ram,
        reserved,
        ..Decoded::default()
    };
    for chunk in chunks {
        let (control, body) = chunk.split_first().unwrap_or((&0, &[]));
        if control & VM_DESCRIPTION != 0 {
            decoded.vm_description.get_or_insert(body);
            continue;
        }
        if decoded.tables.len() == MAX_TABLES {
            continue;
        }
        decoded.tables.push(table(*control, body));
    }
    decoded
}

/// The table a chunk's control byte and bytes give.
fn table(control: u8, body: &[u8]) -> Vec<u8> {
    let mut table = body.to_vec();
    let choice = usize::from((control >> SIGNATURE_SHIFT) & 7);
    if let (Some(signature), Some(slot)) = (
        choice.checked_sub(1).and_then(|at| SIGNATURES.get(at)),
        table.get_mut(..4),
    ) {
        slot.copy_from_slice(*signature);
    }
    let size = table.len();
    if control & FIX_LENGTH != 0
        && let Some(slot) = table.get_mut(LENGTH..LENGTH + 4)
    {
        let size = u32::try_from(size).unwrap_or(u32::MAX);
        slot.copy_from_slice(&size.to_le_bytes());
    }
    if control & FIX_CHECKSUM != 0 && size > CHECKSUM {
        let length = table_length(&table).map_or(size, |length| length.min(size));
        if length > CHECKSUM {
            table[CHECKSUM] = 0;
            let sum = sum(&table[..length]);
            table[CHECKSUM] = sum.wrapping_neg();
        }
    }
    table
}

/// The header's `Length`, if the bytes hold it.
fn table_length(table: &[u8]) -> Option<usize> {
    let bytes = table.get(LENGTH..LENGTH + 4)?;
    let length = u32::from_le_bytes(bytes.try_into().ok()?);
    Some(usize::try_from(length).unwrap_or(usize::MAX))
}

fn sum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0, |sum, &byte| sum.wrapping_add(byte))
}

/// The tables of each kind `platform::acpi` reads ([`READ`] order).
struct Census<'a> {
    found: [Vec<&'a [u8]>; 5],
}

impl<'a> Census<'a> {
    fn of(tables: &[&'a [u8]]) -> Self {
        let mut found: [Vec<&'a [u8]>; 5] = Default::default();
        for &table in tables {
            if let Some(kind) = READ
                .iter()
                .position(|(signature, _)| table.get(..4) == Some(signature.as_slice()))
            {
                found[kind].push(table);
            }
        }
        Self { found }
    }

    fn count(&self, kind: usize) -> usize {
        self.found[kind].len()
    }

    /// The table of `kind` when there is exactly one.
    fn one(&self, kind: usize) -> Option<&'a [u8]> {
        match self.found[kind].as_slice() {
            [table] => Some(table),
            _ => None,
        }
    }

    /// Whether a table of `kind` is there but fails the header checks
    /// every table read must pass.
    fn broken(&self, kind: usize) -> bool {
        self.found[kind].iter().any(|table| !header_ok(table))
    }
}

/// §5.2.6: the bytes hold the header, `Length` covers at least the
/// header and at most the bytes, and the `Length` bytes sum to zero.
fn header_ok(table: &[u8]) -> bool {
    table.len() >= HEADER_LEN
        && table_length(table).is_some_and(|length| {
            (HEADER_LEN..=table.len()).contains(&length) && sum(&table[..length]) == 0
        })
}

fn u32_at(table: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(table[at..at + 4].try_into().unwrap())
}

fn u64_at(table: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(table[at..at + 8].try_into().unwrap())
}

/// Runs the ACPI harness on one input (see the module documentation).
pub fn acpi(data: &[u8]) {
    let input = decode(data);
    let tables = input.slices();
    let census = Census::of(&tables);
    let parsed = Platform::from_acpi(&tables, &input.ram, &input.reserved, input.vm_description);
    let numa = acpi::numa(&tables);
    let rescue = acpi::rescue(&tables);

    check_rescue(&rescue, &tables, &census);
    match &parsed {
        Ok(platform) => {
            check_platform(platform, &input, &census);
            check_vms(platform, input.vm_description);
            assert_eq!(
                rescue.console,
                platform.uart.clone().map(|uart| Uart { irq: None, ..uart }),
                "rescue found another console"
            );
            assert_eq!(rescue.psci_conduit, Some(platform.psci.conduit));
            check_reordered(&input, &parsed, &numa);
        }
        Err(error) => check_from_acpi_error(error, &input, &census),
    }
    check_numa(&numa, parsed.as_ref().ok(), &census);
}

/// Errors of any entry point: a non-empty `Display` that starts with the
/// description the error names.
fn check_display(error: &PlatformError) {
    let mut text = String::new();
    let _ = write!(text, "{error}");
    assert!(!text.is_empty(), "an empty message for {error:?}");
    match error.origin() {
        ErrorOrigin::Acpi => {
            assert!(text.starts_with(NODE_PREFIX), "{text}");
            assert!(text.starts_with(&error.node), "{text}");
        }
        ErrorOrigin::MemoryMap => assert!(text.starts_with(MEMORY_MAP_NODE), "{text}"),
        ErrorOrigin::DeviceTree => assert!(text.starts_with("device tree node /"), "{text}"),
    }
}

/// An error about one of the tables `kinds` (indices into [`READ`]).
fn check_table_error(error: &PlatformError, kinds: &[usize]) {
    let table = error
        .node
        .strip_prefix(NODE_PREFIX)
        .unwrap_or_else(|| panic!("not an ACPI table error: {error:?}"));
    assert!(
        kinds.iter().any(|&kind| READ[kind].1 == table),
        "an error about table {table:?}: {error}"
    );
}

fn check_from_acpi_error(error: &PlatformError, input: &Decoded<'_>, census: &Census<'_>) {
    check_display(error);
    match error.origin() {
        ErrorOrigin::Acpi => {
            check_table_error(error, &[MADT, FADT, GTDT, SPCR]);
            if error.kind == ErrorKind::MissingNode {
                let kind = READ.iter().position(|(_, name)| error.node.ends_with(name));
                assert!(
                    kind.is_some_and(|kind| census.count(kind) == 0),
                    "{error}, but it is there"
                );
            }
        }
        ErrorOrigin::MemoryMap => {
            assert_eq!(error.node, MEMORY_MAP_NODE);
            match error.property.as_deref() {
                Some("ram") => assert!(
                    input.ram.iter().all(|range| range.size == 0),
                    "{error}, but {:?}",
                    input.ram
                ),
                Some(field) => {
                    let at = field
                        .strip_prefix("ram[")
                        .and_then(|rest| rest.strip_suffix(']'))
                        .and_then(|index| index.parse::<usize>().ok())
                        .unwrap_or_else(|| panic!("{error}: which range?"));
                    let range = input.ram.get(at).unwrap_or_else(|| panic!("{error}"));
                    assert!(
                        range.base.checked_add(range.size).is_none(),
                        "{error}, but {range:?} does not wrap"
                    );
                }
                None => panic!("{error} names no field"),
            }
        }
        ErrorOrigin::DeviceTree => {
            let dtb = input
                .vm_description
                .unwrap_or_else(|| panic!("{error} without a device tree"));
            assert!(error.node.starts_with('/'), "{error:?}");
            assert_eq!(
                platform::vms_from_dt(dtb).err().as_ref(),
                Some(error),
                "from_acpi and vms_from_dt disagree"
            );
        }
    }
}

/// What must fail (checked for a platform that builds).
fn must_fail(input: &Decoded<'_>, census: &Census<'_>) -> Option<&'static str> {
    if [MADT, FADT, GTDT]
        .iter()
        .any(|&kind| census.count(kind) == 0)
    {
        return Some("a required table is absent");
    }
    if [MADT, FADT, GTDT, SPCR]
        .iter()
        .any(|&kind| census.count(kind) > 1)
    {
        return Some("a table is there twice");
    }
    if [MADT, FADT, GTDT, SPCR]
        .iter()
        .any(|&kind| census.broken(kind))
    {
        return Some("a table fails the header checks");
    }
    if input
        .ram
        .iter()
        .any(|range| range.base.checked_add(range.size).is_none())
    {
        return Some("a RAM range wraps");
    }
    if input.ram.iter().all(|range| range.size == 0) {
        return Some("no RAM");
    }
    if let Some(dtb) = input.vm_description
        && platform::vms_from_dt(dtb).is_err()
    {
        return Some("the VM description does not parse");
    }
    None
}

fn check_platform(platform: &Platform, input: &Decoded<'_>, census: &Census<'_>) {
    if let Some(why) = must_fail(input, census) {
        panic!("a platform although {why}: {platform:?}");
    }
    check_cpus(platform);
    check_memory(&platform.memory, &input.ram);
    let given: Vec<&ReservedRegion> = input
        .reserved
        .iter()
        .filter(|region| region.range.size != 0)
        .collect();
    assert!(
        platform.reserved.iter().eq(given.iter().copied()),
        "reserved {:?} from {:?}",
        platform.reserved,
        input.reserved
    );

    let gic = &platform.gic;
    assert_eq!(gic.distributor.size, GICD_SIZE, "{gic:?}");
    assert!(no_wrap(gic.distributor), "{gic:?}");
    assert!(
        gic.its
            .iter()
            .all(|its| its.size == ITS_SIZE && no_wrap(*its)),
        "{gic:?}"
    );
    let regions = &gic.redistributor_regions;
    assert!(!regions.is_empty(), "no redistributors: {gic:?}");
    for (at, region) in regions.iter().enumerate() {
        assert!(
            region.range.size > 0 && no_wrap(region.range) && region.stride.is_none(),
            "{region:?}"
        );
        assert!(
            regions[..at]
                .iter()
                .all(|other| !other.range.overlaps(&region.range)),
            "overlapping redistributors: {regions:?}"
        );
    }
    if let Some(irq) = gic.maintenance_irq {
        assert!(
            matches!(irq, Interrupt::Ppi { flags: 1 | 4, .. }) && ppi(irq),
            "maintenance {irq:?}"
        );
    }

    let gtdt = census.one(GTDT).expect("a platform has one GTDT");
    check_timers(platform, gtdt);
    check_console(platform.uart.as_ref(), census.one(SPCR), true);
    assert!(census.one(FADT).is_some());
    assert_eq!(platform.psci.version, (1, 0));
    assert!(matches!(platform.psci.conduit, Conduit::Smc | Conduit::Hvc));
    assert_eq!(platform.rtc, None);
    let model = &platform.model;
    assert!(
        model.len() <= 6 + 1 + 8
            && model.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
            && model.trim() == model,
        "model {model:?}"
    );
}

fn no_wrap(range: MemRange) -> bool {
    range.base.checked_add(range.size).is_some()
}

fn ppi(irq: Interrupt) -> bool {
    matches!(irq, Interrupt::Ppi { .. }) && (16..32).contains(&irq.intid())
}

fn check_cpus(platform: &Platform) {
    let cpus = &platform.cpus;
    assert!(!cpus.is_empty(), "a platform without CPUs");
    let mut mpidrs: Vec<Mpidr> = cpus.iter().map(|cpu| cpu.mpidr).collect();
    let mut previous: Option<usize> = None;
    for cpu in cpus {
        assert_eq!(
            cpu.mpidr.value() & !Mpidr::AFFINITY_MASK,
            0,
            "{}: MPIDR {:#x}",
            cpu.node,
            cpu.mpidr.value()
        );
        assert_eq!(cpu.enable_method, EnableMethod::Psci, "{}", cpu.node);
        let index = cpu
            .node
            .strip_prefix("MADT GICC[")
            .and_then(|rest| rest.strip_suffix(']'))
            .and_then(|index| index.parse::<usize>().ok());
        // Enabled GICCs in MADT order.
        assert!(
            index.is_some_and(|index| previous.is_none_or(|previous| index > previous)),
            "CPU named {:?} after GICC[{previous:?}]",
            cpu.node
        );
        previous = index;
    }
    mpidrs.sort_unstable();
    assert!(
        mpidrs.windows(2).all(|w| w[0] != w[1]),
        "two CPUs share an MPIDR: {cpus:?}"
    );
}

/// `memory` is the union of the non-empty `ram` ranges: sorted, with no
/// two overlapping or touching, and each covered, from its base to its
/// end, by the given ranges it holds.
fn check_memory(memory: &[MemRange], ram: &[MemRange]) {
    assert!(!memory.is_empty(), "no memory from {ram:?}");
    assert!(
        memory.iter().all(|bank| bank.size > 0 && no_wrap(*bank)),
        "{memory:?}"
    );
    assert!(
        memory.windows(2).all(|w| w[0].end() < w[1].base),
        "memory not sorted and merged: {memory:?}"
    );
    let given: Vec<MemRange> = ram.iter().copied().filter(|r| r.size != 0).collect();
    for range in &given {
        assert!(
            memory
                .iter()
                .any(|bank| bank.base <= range.base && range.end() <= bank.end()),
            "RAM {range:?} lost: {memory:?}"
        );
    }
    for bank in memory {
        let mut inside: Vec<MemRange> = given
            .iter()
            .copied()
            .filter(|range| bank.base <= range.base && range.end() <= bank.end())
            .collect();
        inside.sort();
        let mut reach = bank.base;
        for range in inside {
            assert!(range.base <= reach, "{bank:?} is not all RAM: {ram:?}");
            reach = reach.max(range.end());
        }
        assert_eq!(reach, bank.end(), "{bank:?} is not all RAM: {ram:?}");
    }
}

/// The timers are PPIs with the GTDT's GSIVs and their flags' trigger.
fn check_timers(platform: &Platform, gtdt: &[u8]) {
    let timer = &platform.timer;
    let check = |irq: Interrupt, at: usize| {
        let gsiv = u32_at(gtdt, at);
        let flags = u32_at(gtdt, at + 4);
        let expected = Interrupt::Ppi {
            number: gsiv.wrapping_sub(16),
            flags: ONE_TRIGGER[(flags & 3) as usize],
        };
        assert!(ppi(irq), "{timer:?}");
        assert_eq!(irq, expected, "the timer at GTDT offset {at}: {timer:?}");
    };
    if u32_at(gtdt, SECURE_EL1) == 0 {
        assert_eq!(timer.secure_phys, DEFAULT_SECURE_EL1, "{timer:?}");
    } else {
        check(timer.secure_phys, SECURE_EL1);
    }
    check(timer.nonsecure_phys, NON_SECURE_EL1);
    check(timer.virt, VIRTUAL_EL1);
    check(timer.hyp_phys, NON_SECURE_EL2);
    // The virtual EL2 timer is read from revision 3 on, and has no
    // interrupt with GSIV 0.
    match timer.hyp_virt {
        Some(irq) => {
            assert!(gtdt[REVISION] >= 3, "a virtual EL2 timer in {timer:?}");
            check(irq, VIRTUAL_EL2);
        }
        None => assert!(
            gtdt[REVISION] < 3 || u32_at(gtdt, VIRTUAL_EL2) == 0,
            "{timer:?}"
        ),
    }
    assert_eq!(timer.clock_frequency, None);
}

/// Offsets in the SPCR.
const SPCR_INTERFACE: usize = 36;
const SPCR_SPACE: usize = 40;
const SPCR_ADDRESS: usize = 44;

/// A console the SPCR `spcr` gives: a 4 KiB PL011 frame at its address,
/// with no interrupt or an SPI. With `exact`, a console is there exactly
/// when the SPCR describes one the hypervisor can drive.
fn check_console(uart: Option<&Uart>, spcr: Option<&[u8]>, exact: bool) {
    let drivable = spcr.is_some_and(|spcr| {
        spcr.len() > SPCR_ADDRESS + 8
            && matches!(spcr[SPCR_INTERFACE], 0x03 | 0x0d | 0x0e)
            && spcr[SPCR_SPACE] == 0
            && u64_at(spcr, SPCR_ADDRESS) != 0
    });
    let Some(uart) = uart else {
        assert!(!(exact && drivable), "no console from {spcr:x?}");
        return;
    };
    let spcr = spcr.unwrap_or_else(|| panic!("a console without an SPCR: {uart:?}"));
    assert!(drivable, "{uart:?} from {spcr:x?}");
    assert_eq!(uart.kind, UartKind::Pl011);
    assert_eq!(uart.node, "SPCR");
    assert_eq!(
        uart.range,
        MemRange::new(u64_at(spcr, SPCR_ADDRESS), UART_SIZE)
    );
    assert!(no_wrap(uart.range), "{uart:?}");
    if let Some(irq) = uart.irq {
        assert!(
            matches!(irq, Interrupt::Spi { flags: 4, .. }) && (32..=1019).contains(&irq.intid()),
            "{uart:?}"
        );
    }
}

fn check_rescue(rescue: &Rescue, tables: &[&[u8]], census: &Census<'_>) {
    if let Some(console) = &rescue.console {
        assert_eq!(console.irq, None, "a rescue console with an interrupt");
    }
    check_console(rescue.console.as_ref(), census.one(SPCR), false);
    if rescue.psci_conduit.is_some() {
        assert!(census.one(FADT).is_some(), "a conduit without one FADT");
    }
    let own: Vec<&[u8]> = tables
        .iter()
        .copied()
        .filter(|table| matches!(table.get(..4), Some(b"SPCR" | b"FACP")))
        .collect();
    assert_eq!(
        &acpi::rescue(&own),
        rescue,
        "rescue read more than the SPCR and FADT"
    );
}

/// The VMs of a platform that builds.
fn check_vms(platform: &Platform, vm_description: Option<&[u8]>) {
    let Some(dtb) = vm_description else {
        assert!(platform.bootargs.is_empty() && platform.vms.is_empty());
        return;
    };
    let (bootargs, vms) = platform::vms_from_dt(dtb).expect("vms_from_dt agrees");
    assert_eq!(platform.bootargs, bootargs);
    assert_eq!(platform.vms.len(), vms.len(), "VM counts differ");
    for (at, (vm, alone)) in platform.vms.iter().zip(&vms).enumerate() {
        match vm {
            Ok(config) => {
                assert_eq!(alone.as_ref(), Ok(config), "vms_from_dt disagrees");
                check_config(config, platform);
                assert!(
                    platform.vms[at + 1..]
                        .iter()
                        .flatten()
                        .all(|other| other.name != config.name),
                    "two VMs named {}",
                    config.name
                );
            }
            Err(error) => {
                check_error(error);
                check_display(error);
                assert!(under_chosen(&error.node), "{error}");
                assert!(error.property.is_some(), "{error} names no property");
                // Only the CPU bound tells the two apart.
                if let Ok(config) = alone {
                    assert!(
                        config.cpu_affinity.as_ref().is_some_and(|cpus| cpus
                            .iter()
                            .any(|&cpu| cpu as usize >= platform.cpus.len())),
                        "{error}, but vms_from_dt accepts {config:?}"
                    );
                }
            }
        }
    }
}

/// The same tables in reverse order, each with bytes past its `Length`,
/// and the RAM in reverse order give the same platform and NUMA nodes.
fn check_reordered(
    input: &Decoded<'_>,
    parsed: &Result<Platform, PlatformError>,
    numa: &Result<Vec<NumaNode>, PlatformError>,
) {
    let tables: Vec<Vec<u8>> = input
        .tables
        .iter()
        .rev()
        .map(|table| {
            let mut table = table.clone();
            // A shorter one could become a signature.
            if table.len() >= 4 {
                table.extend_from_slice(&[0xff, 0, 0x5a]);
            }
            table
        })
        .collect();
    let slices: Vec<&[u8]> = tables.iter().map(Vec::as_slice).collect();
    let ram: Vec<MemRange> = input.ram.iter().rev().copied().collect();
    assert_eq!(
        &Platform::from_acpi(&slices, &ram, &input.reserved, input.vm_description),
        parsed,
        "the tables' order or trailing bytes changed the platform"
    );
    if numa.is_ok() {
        assert_eq!(
            &acpi::numa(&slices),
            numa,
            "the tables' order or trailing bytes changed the NUMA nodes"
        );
    }
}

fn check_numa(
    numa: &Result<Vec<NumaNode>, PlatformError>,
    platform: Option<&Platform>,
    census: &Census<'_>,
) {
    let nodes = match numa {
        Ok(nodes) => nodes,
        Err(error) => {
            check_display(error);
            assert!(census.count(SRAT) > 0, "{error} without an SRAT");
            if platform.is_some() {
                check_table_error(error, &[SRAT]);
            } else {
                check_table_error(error, &[MADT, SRAT]);
            }
            return;
        }
    };
    assert!(
        census.count(SRAT) < 2 && !census.broken(SRAT),
        "an SRAT twice or with a broken header accepted"
    );
    if census.count(SRAT) == 1 {
        assert!(
            census.one(MADT).is_some() && !census.broken(MADT),
            "NUMA nodes without a MADT that parses"
        );
    }
    if census.count(SRAT) == 0 {
        assert!(nodes.is_empty(), "NUMA nodes without an SRAT: {nodes:?}");
    }
    assert!(
        nodes
            .windows(2)
            .all(|w| w[0].proximity_domain < w[1].proximity_domain),
        "domains not sorted: {nodes:?}"
    );
    let mut cpus: Vec<Mpidr> = Vec::new();
    for (at, node) in nodes.iter().enumerate() {
        let memory = &node.memory;
        assert!(
            memory.iter().all(|range| range.size > 0 && no_wrap(*range))
                && memory.windows(2).all(|w| w[0] <= w[1]),
            "domain {}: {memory:?}",
            node.proximity_domain
        );
        for other in &nodes[..at] {
            assert!(
                memory
                    .iter()
                    .all(|range| other.memory.iter().all(|o| !o.overlaps(range))),
                "domains {} and {} share memory: {nodes:?}",
                other.proximity_domain,
                node.proximity_domain
            );
        }
        cpus.extend(&node.cpus);
    }
    if let Some(platform) = platform {
        for mpidr in &cpus {
            assert!(
                platform.cpu_by_mpidr(*mpidr).is_some(),
                "NUMA CPU {mpidr} is not the platform's"
            );
        }
    }
    cpus.sort_unstable();
    assert!(
        cpus.windows(2).all(|w| w[0] != w[1]),
        "a CPU in two places: {nodes:?}"
    );
}
