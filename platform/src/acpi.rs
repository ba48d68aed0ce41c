//! The host machine from ACPI tables, for servers that boot through UEFI
//! without a device tree (Arm Base Boot Requirements, "SBBR": ACPI only).
//!
//! [`Platform::from_acpi`] builds the same [`Platform`] the device tree
//! path does, from the tables the UEFI boot code found through the
//! XSDT, the RAM of the UEFI memory map, and optionally a small device
//! tree that carries only `/chosen` (bootargs and the VM nodes of
//! docs/vm-binding.md). [`rescue`] reads the console and PSCI conduit on
//! their own, so that a hypervisor whose tables do not parse can say why.
//! [`numa`] reads the SRAT's proximity domains.
//!
//! # What is read
//!
//! Sections are those of the ACPI Specification 6.5.
//!
//! | table | fields | gives |
//! |---|---|---|
//! | every table read | §5.2.6 header: `Signature`, `Length`, `Checksum`, `Revision` | a table shorter than its header, or than its `Length`, or whose bytes do not sum to 0, is an error naming it |
//! | MADT "APIC" (§5.2.12) | GICD (§5.2.12.15): `Physical Base Address`, `GIC version` | [`GicV3::distributor`](crate::GicV3::distributor) (64 KiB); version 3 and 4 are accepted, 1 and 2 are [`ErrorKind::Unsupported`], 0 ("not given", ACPI 5.1) only when redistributors are described |
//! | | GICC (§5.2.12.14): `Flags`, `MPIDR`, `VGIC Maintenance interrupt`, `GICR Base Address`, `ACPI Processor UID` | [`Platform::cpus`] (enabled ones, in MADT order, PSCI, named `MADT GICC[i]`); [`GicV3::maintenance_irq`](crate::GicV3::maintenance_irq) |
//! | | GICR (§5.2.12.17): discovery range | [`GicV3::redistributor_regions`](crate::GicV3::redistributor_regions) (stride `None`) |
//! | | GIC ITS (§5.2.12.18): `Physical Base Address` | [`GicV3::its`](crate::GicV3::its) (128 KiB each) |
//! | GTDT (§5.2.25) | secure EL1, non-secure EL1, virtual EL1, EL2 timer GSIVs and flags; virtual EL2 from revision 3 | [`Platform::timer`] |
//! | FADT "FACP" (§5.2.9) | `ARM_BOOT_ARCH` (Table 5.11), header OEM IDs | [`Platform::psci`], [`Platform::model`] |
//! | SPCR (Microsoft SPCR spec) | `Interface Type`, `Base Address`, `Interrupt Type`, `GSIV` | [`Platform::uart`] |
//! | SRAT (§5.2.16), by [`numa`] only | Memory Affinity, GICC Affinity | [`NumaNode`]s |
//!
//! Other tables (DSDT, SSDTs, MCFG, IORT, PPTT, DBG2, ...) and other
//! structures (GIC MSI frames, the other architectures' interrupt
//! controllers) are ignored. A table this module reads may appear only
//! once.
//!
//! # Decisions
//!
//! - **CPUs**: only GICCs whose `Enabled` flag is set. An `Online Capable`
//!   GICC (ACPI 6.5) is a CPU the OS may bring up later through ACPI
//!   hot-plug, which needs the AML interpreter the hypervisor does not
//!   have; like a DT CPU whose `status` is not "okay" it is left out.
//!   Only enabled CPUs are checked for duplicate MPIDRs and must agree on
//!   the maintenance interrupt. The MPIDR is masked to its affinity bits
//!   ([`Mpidr::from_raw`]), as Linux does.
//! - **Redistributors without GICR structures**: each enabled GICC's
//!   `GICR Base Address` is a region of one frame: 128 KiB (RD_base and
//!   SGI_base) for a GICv3, 256 KiB (plus VLPI_base and a reserved frame)
//!   for a GICv4, like Linux's ACPI GIC driver (the D05's firmware puts
//!   them 256 KiB apart with version 4); 128 KiB when the version
//!   is not given, which covers the frames every redistributor starts with
//!   and all the hypervisor touches. Redistributor regions may not overlap.
//! - **Maintenance interrupt**: `VGIC Maintenance interrupt` is a PPI GSIV
//!   (or 0: none); flag bit 2 picks edge (binding flags 1) or level (4).
//! - **Timer**: each flags field becomes the binding's flags cell (level
//!   high 4, level low 8, edge rising 1, edge falling 2). A secure EL1
//!   GSIV of 0 (the firmware may hide it) becomes the BSA's recommended
//!   PPI 13 (INTID 29); the non-secure EL1, virtual EL1 and EL2 timers are
//!   required. `clock_frequency` is `None`: CNTFRQ_EL0 is the source.
//! - **Console**: interface types 0x03 (ARM PL011), 0x0D and 0x0E (ARM
//!   SBSA Generic UART) become [`UartKind::Pl011`](crate::UartKind::Pl011): the console driver only
//!   uses UARTDR and UARTFR with 32-bit accesses, which the SBSA UART has.
//!   Other UARTs (16550-style ones, for instance), ports outside memory space,
//!   and address 0 give `uart: None` without an error, as a DT console that
//!   is not a PL011 does: the hypervisor runs headless. The frame is 4 KiB;
//!   an SPI GSIV becomes a level-high [`Interrupt::Spi`](crate::Interrupt::Spi).
//!   The GSIV is taken as a GIC INTID; where the UART is wired through an
//!   interrupt translator (the D05's mbigen, SPCR GSIV 807) it is not one,
//!   but nothing in the hypervisor uses the host console's interrupt.
//! - **PSCI**: `PSCI_COMPLIANT` is required; `PSCI_USE_HVC` picks HVC, else
//!   SMC. The version is recorded as (1, 0) (see `fadt::PSCI_VERSION`).
//! - **Model**: the FADT's `OEMID` and `OEM Table ID` (`BOCHS BXPC` on
//!   QEMU, `HISI HIP08` on a Kunpeng 920). There is no RTC (ACPI has no
//!   PL031 table): `rtc: None`.
//! - **Memory**: the RAM ranges given, empty ones dropped, sorted, and
//!   overlapping or adjacent ones merged; a range that runs past the end
//!   of the address space is an error. `reserved` is kept as given (empty
//!   ones dropped).
//! - **NUMA**: [`Platform`] has no NUMA field: nothing in the hypervisor
//!   places memory or vCPUs by node yet, and the DT path could not fill
//!   one. [`from_acpi`](Platform::from_acpi) does not read the SRAT, so a
//!   broken SRAT never stops a boot; [`numa`] reads and checks it for
//!   whoever needs the domains.
//! - **The `acpi` crate** (rust-osdev, 5.x and 7.0 pre-releases) is not
//!   used: it reaches tables through an `unsafe` physical-memory mapping
//!   handler and reads them by casting packed structs over that memory,
//!   where this crate forbids `unsafe` and parses untrusted byte slices
//!   that host tests and fuzzers can hand it; and it has no GTDT support.
//!   The parser here is small: every read is bounds-checked
//!   (`table::Fields`), every length is checked before use, and
//!   structure walks advance by at least two bytes, so no input panics or
//!   loops.
//!
//! # Errors
//!
//! An error's [`PlatformError::node`] is `ACPI table <name>` ([`NODE_PREFIX`]
//! and the specification's name: MADT, FADT, GTDT, SPCR, SRAT) and its
//! `property` the field, prefixed by the structure that holds it and its
//! index among the structures of its type:
//! `ACPI table MADT, field "GICC[3].MPIDR": bad value: MPIDR 0.0.0.1 also
//! used by GICC[1]`. A required table that is absent is
//! [`ErrorKind::MissingNode`]; errors in the RAM list name
//! [`MEMORY_MAP_NODE`]; errors in the `/chosen` tree are device tree errors.

mod fadt;
mod gtdt;
mod madt;
mod spcr;
mod srat;
mod table;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use table::{Kind, Table};

use crate::{ErrorKind, MemRange, Mpidr, Platform, PlatformError, Rescue, ReservedRegion};

/// How the `node` of an error about an ACPI table starts (`ACPI table
/// MADT`).
pub const NODE_PREFIX: &str = "ACPI table ";

/// The `node` of an error about the RAM ranges given to
/// [`Platform::from_acpi`].
pub const MEMORY_MAP_NODE: &str = "UEFI memory map";

/// Interrupt binding flags (interrupt-controller/irq.h's IRQ_TYPE_*), the
/// second cell of a DT GIC specifier, which [`Interrupt`](crate::Interrupt) keeps.
const EDGE_RISING: u32 = 1;
const EDGE_FALLING: u32 = 2;
const LEVEL_HIGH: u32 = 4;
const LEVEL_LOW: u32 = 8;

/// A NUMA proximity domain from the SRAT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaNode {
    /// The SRAT's proximity domain number.
    pub proximity_domain: u32,
    /// The usable CPUs (MADT GICCs with the Enabled flag) in the domain,
    /// in SRAT order.
    pub cpus: Vec<Mpidr>,
    /// The address ranges in the domain, sorted. They say where memory of
    /// the domain may be, not that it is RAM: intersect them with
    /// [`Platform::memory`].
    pub memory: Vec<MemRange>,
}

/// Builds the platform; see [`Platform::from_acpi`].
pub(crate) fn platform(
    tables: &[&[u8]],
    ram: &[MemRange],
    reserved: &[ReservedRegion],
    vm_description: Option<&[u8]>,
) -> Result<Platform, PlatformError> {
    // The MADT first, so that a GICv2 is rejected before anything else.
    let madt = madt::parse(&required(tables, Kind::Madt)?)?;
    let gtdt = required(tables, Kind::Gtdt)?;
    let fadt = required(tables, Kind::Fadt)?;
    let uart = match find(tables, Kind::Spcr)? {
        Some(spcr) => spcr::console(&spcr, true)?,
        None => None,
    };
    let mut platform = Platform {
        model: fadt.oem(),
        memory: memory(ram)?,
        reserved: reserved
            .iter()
            .filter(|region| region.range.size != 0)
            .cloned()
            .collect(),
        cpus: madt.cpus.into_iter().map(|(cpu, _)| cpu).collect(),
        gic: madt.gic,
        uart,
        timer: gtdt::parse(&gtdt)?,
        psci: fadt::psci(&fadt)?,
        bootargs: String::new(),
        rtc: None,
        vms: Vec::new(),
    };
    if let Some(dtb) = vm_description {
        (platform.bootargs, platform.vms) = crate::chosen(dtb, platform.cpus.len())?;
    }
    Ok(platform)
}

/// What [`rescue`] gets from tables that may not all parse: the console
/// (without its interrupt) from the SPCR and the PSCI conduit from the
/// FADT, each only if that table passes its own checks.
pub fn rescue(tables: &[&[u8]]) -> Rescue {
    let table = |kind| find(tables, kind).ok().flatten();
    Rescue {
        console: table(Kind::Spcr).and_then(|spcr| spcr::console(&spcr, false).ok().flatten()),
        psci_conduit: table(Kind::Fadt)
            .and_then(|fadt| fadt::psci(&fadt).ok())
            .map(|psci| psci.conduit),
    }
}

/// The NUMA proximity domains the SRAT describes, sorted by number, with
/// the MADT's usable CPUs (matched by ACPI Processor UID) and memory
/// ranges of each; empty when there is no SRAT (a single-node machine).
/// The MADT must parse as for [`Platform::from_acpi`].
pub fn numa(tables: &[&[u8]]) -> Result<Vec<NumaNode>, PlatformError> {
    let Some(srat) = find(tables, Kind::Srat)? else {
        return Ok(Vec::new());
    };
    let madt = madt::parse(&required(tables, Kind::Madt)?)?;
    srat::parse(&srat, &madt.cpus)
}

/// The one table of `kind` in `tables`, header-checked, if there is one.
fn find<'a>(tables: &[&'a [u8]], kind: Kind) -> Result<Option<Table<'a>>, PlatformError> {
    let mut found: Option<(usize, &'a [u8])> = None;
    for (at, &bytes) in tables.iter().enumerate() {
        if Kind::of(bytes) != Some(kind) {
            continue;
        }
        if let Some((first, _)) = found {
            return Err(table::bad(
                kind,
                "Signature",
                format!(
                    "tables[{at}] is a second {} (the first is tables[{first}]): a system has one",
                    kind.name()
                ),
            ));
        }
        found = Some((at, bytes));
    }
    found.map(|(_, bytes)| Table::new(kind, bytes)).transpose()
}

/// The one table of `kind`, which must be there.
fn required<'a>(tables: &[&'a [u8]], kind: Kind) -> Result<Table<'a>, PlatformError> {
    find(tables, kind)?.ok_or_else(|| table::error(kind, None, ErrorKind::MissingNode))
}

/// `size` bytes at `base`, which must not run past the end of the address
/// space; errors name `field` of `fields`' structure.
fn checked_range(
    fields: &table::Fields<'_>,
    field: &str,
    base: u64,
    size: u64,
) -> Result<MemRange, PlatformError> {
    match base.checked_add(size) {
        Some(_) => Ok(MemRange::new(base, size)),
        None => Err(fields.bad(
            field,
            format!("{base:#x} + {size:#x} runs past the end of the address space"),
        )),
    }
}

/// The RAM ranges: sorted, empty ones dropped, overlapping and adjacent
/// ones merged (a UEFI memory map lists RAM in many pieces).
fn memory(ram: &[MemRange]) -> Result<Vec<MemRange>, PlatformError> {
    let error = |field: String, why: String| PlatformError {
        node: String::from(MEMORY_MAP_NODE),
        property: Some(field),
        kind: ErrorKind::BadValue(why),
    };
    let mut ranges = Vec::with_capacity(ram.len());
    for (at, range) in ram.iter().enumerate() {
        if range.base.checked_add(range.size).is_none() {
            return Err(error(
                format!("ram[{at}]"),
                format!(
                    "{:#x} + {:#x} runs past the end of the address space",
                    range.base, range.size
                ),
            ));
        }
        if range.size != 0 {
            ranges.push(*range);
        }
    }
    if ranges.is_empty() {
        return Err(error(
            String::from("ram"),
            format!("no RAM: the {} ranges given are all empty", ram.len()),
        ));
    }
    ranges.sort();
    let mut merged: Vec<MemRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if range.base <= last.end() => {
                last.size = last.end().max(range.end()) - last.base;
            }
            _ => merged.push(range),
        }
    }
    Ok(merged)
}
