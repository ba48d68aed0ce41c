//! The host machine as plain data, parsed from the device tree the boot
//! loader hands the hypervisor, or built from the firmware's ACPI tables
//! and UEFI memory map on servers that boot without one ([`acpi`],
//! [`Platform::from_acpi`]).
//!
//! Everything the hypervisor needs to know about the board comes from here:
//! memory banks and reserved regions, the CPUs by MPIDR, the GICv3
//! distributor and redistributor regions, the console UART, the
//! architected timer's interrupts and the PSCI conduit; and the VMs it is
//! to run ([`vm`]). Parsing never
//! panics: a malformed or truncated tree yields a [`PlatformError`] that
//! names the node and property at fault.
//!
//! [`blob_size`] reads just the header, so boot code can size the slice it
//! hands to [`Platform::parse`].
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

pub mod acpi;
mod fdt;
mod parse;
pub mod vm;

pub use vm::{TrapPolicy, VmConfig};

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// A physical address range `[base, base + size)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MemRange {
    /// First byte.
    pub base: u64,
    /// Length in bytes.
    pub size: u64,
}

impl MemRange {
    /// The range `[base, base + size)`.
    pub const fn new(base: u64, size: u64) -> Self {
        Self { base, size }
    }

    /// One past the last byte; saturates at `u64::MAX`.
    pub const fn end(&self) -> u64 {
        self.base.saturating_add(self.size)
    }

    /// Whether `addr` lies inside the range.
    pub const fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr < self.end()
    }

    /// Whether the two ranges share at least one byte.
    pub const fn overlaps(&self, other: &MemRange) -> bool {
        self.base < other.end() && other.base < self.end()
    }
}

/// A region that must not be used as general memory, from `/memreserve/`
/// entries or `/reserved-memory` children with a `reg`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservedRegion {
    /// The reserved bytes.
    pub range: MemRange,
    /// Node name, or `"/memreserve/"` for header entries.
    pub name: String,
}

/// The affinity fields of an MPIDR_EL1 value (Arm ARM D23.2 "MPIDR_EL1"):
/// Aff3 in bits 39:32, Aff2..Aff0 in bits 23:0. Other bits are dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mpidr(u64);

impl Mpidr {
    /// Bits of MPIDR_EL1 that hold affinity (Aff3 and Aff2..Aff0).
    pub const AFFINITY_MASK: u64 = 0xff_00ff_ffff;

    /// Keeps only the affinity bits of `raw`.
    pub const fn from_raw(raw: u64) -> Self {
        Self(raw & Self::AFFINITY_MASK)
    }

    /// Builds an MPIDR from its four affinity fields.
    pub const fn from_affinity(aff3: u8, aff2: u8, aff1: u8, aff0: u8) -> Self {
        Self(((aff3 as u64) << 32) | ((aff2 as u64) << 16) | ((aff1 as u64) << 8) | aff0 as u64)
    }

    /// The affinity bits, as PSCI CPU_ON and GICR_TYPER expect them.
    pub const fn value(self) -> u64 {
        self.0
    }

    /// Affinity level `level` (0..=3).
    pub const fn aff(self, level: u8) -> u8 {
        match level {
            0 => self.0 as u8,
            1 => (self.0 >> 8) as u8,
            2 => (self.0 >> 16) as u8,
            _ => (self.0 >> 32) as u8,
        }
    }
}

impl fmt::Display for Mpidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}.{}.{}",
            self.aff(3),
            self.aff(2),
            self.aff(1),
            self.aff(0)
        )
    }
}

/// How a CPU node says it is started (`enable-method`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnableMethod {
    /// `enable-method = "psci"`: started with PSCI CPU_ON.
    Psci,
    /// `enable-method = "spin-table"`: released by writing its entry point
    /// to `cpu-release-addr`.
    SpinTable {
        /// `cpu-release-addr`, a physical address.
        release_addr: u64,
    },
    /// Absent: only valid for the boot CPU.
    None,
}

/// One CPU node under `/cpus`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cpu {
    /// The CPU's affinity, from its `reg`.
    pub mpidr: Mpidr,
    /// How the CPU is brought up.
    pub enable_method: EnableMethod,
    /// Node path, for messages (`/cpus/cpu@10000`); from ACPI, the MADT
    /// structure (`MADT GICC[3]`).
    pub node: String,
}

/// An interrupt as the GIC binding describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupt {
    /// Shared peripheral interrupt; `number` is the binding's cell (INTID - 32).
    Spi {
        /// Binding cell 1: INTID - 32.
        number: u32,
        /// Binding cell 2: trigger type and level flags.
        flags: u32,
    },
    /// Private peripheral interrupt; `number` is the binding's cell (INTID - 16).
    Ppi {
        /// Binding cell 1: INTID - 16.
        number: u32,
        /// Binding cell 2: trigger type and level flags (plus the GICv2
        /// CPU mask in bits 15:8, which GICv3 ignores).
        flags: u32,
    },
}

impl Interrupt {
    /// The GIC interrupt ID (Arm IHI 0069 "INTIDs": PPIs 16..31, SPIs 32..).
    pub const fn intid(self) -> u32 {
        match self {
            Interrupt::Spi { number, .. } => number + 32,
            Interrupt::Ppi { number, .. } => number + 16,
        }
    }
}

/// A GICv3 redistributor region: `size` bytes of consecutive
/// redistributor frames, one per CPU, `stride` apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedistributorRegion {
    /// Where the region's frames are.
    pub range: MemRange,
    /// `redistributor-stride` when the DT gives one; `None` means the
    /// architectural layout (GICR_TYPER.VLPIS decides 0x20000 or 0x40000).
    pub stride: Option<u64>,
}

/// The GICv3 interrupt controller (`arm,gic-v3`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GicV3 {
    /// GICD frame, `reg[0]`.
    pub distributor: MemRange,
    /// `reg[1..=#redistributor-regions]`, in DT order.
    pub redistributor_regions: Vec<RedistributorRegion>,
    /// `arm,gic-v3-its` children.
    pub its: Vec<MemRange>,
    /// The virtual CPU interface maintenance interrupt (`interrupts` of the GIC node).
    pub maintenance_irq: Option<Interrupt>,
}

/// The UART programming model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UartKind {
    /// `arm,pl011`
    Pl011,
}

/// The console UART.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uart {
    /// Programming model.
    pub kind: UartKind,
    /// Register frame, `reg[0]` translated to a physical address.
    pub range: MemRange,
    /// Its interrupt, when it has one routed to the GICv3.
    pub irq: Option<Interrupt>,
    /// Node path, for messages; `SPCR` from ACPI.
    pub node: String,
}

/// The architected timer's PPIs (binding `arm,armv8-timer`, in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchTimer {
    /// Secure EL1 physical timer (CNTPS).
    pub secure_phys: Interrupt,
    /// Non-secure EL1 physical timer (CNTP).
    pub nonsecure_phys: Interrupt,
    /// EL1 virtual timer (CNTV): the guest's tick.
    pub virt: Interrupt,
    /// EL2 physical timer (CNTHP): the hypervisor's own tick.
    pub hyp_phys: Interrupt,
    /// EL2 virtual timer (ARMv8.1 VHE), when listed.
    pub hyp_virt: Option<Interrupt>,
    /// `clock-frequency`, when the firmware failed to program CNTFRQ_EL0.
    pub clock_frequency: Option<u32>,
}

/// The SMCCC conduit through which PSCI is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conduit {
    /// `method = "smc"`: firmware at EL3.
    Smc,
    /// `method = "hvc"`: PSCI is provided by whatever runs at EL2.
    Hvc,
}

/// PSCI as the `psci` node describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Psci {
    /// How PSCI calls are made.
    pub conduit: Conduit,
    /// Highest version the node's `compatible` claims, `(major, minor)`:
    /// `arm,psci-1.0` -> (1, 0), `arm,psci-0.2` -> (0, 2), `arm,psci` -> (0, 1).
    pub version: (u16, u16),
}

/// The host machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    /// Root `model`, or the first root `compatible`, or empty. From ACPI:
    /// the FADT's OEM ID and OEM Table ID (`HISI HIP08`).
    pub model: String,
    /// `/memory` banks (`device_type = "memory"`), sorted by base. From
    /// ACPI: the UEFI RAM ranges, sorted, with touching ones merged.
    pub memory: Vec<MemRange>,
    /// `/memreserve/` entries, then `/reserved-memory` children with `reg`.
    pub reserved: Vec<ReservedRegion>,
    /// CPUs in DT order; the boot CPU is among them. From ACPI: the
    /// enabled MADT GICCs, in MADT order.
    pub cpus: Vec<Cpu>,
    /// The interrupt controller.
    pub gic: GicV3,
    /// The console: `/chosen/stdout-path` if it names a supported UART,
    /// else the first enabled `arm,pl011`.
    pub uart: Option<Uart>,
    /// The architected timer.
    pub timer: ArchTimer,
    /// The PSCI firmware interface.
    pub psci: Psci,
    /// `/chosen/bootargs`, empty when absent.
    pub bootargs: String,
    /// A real-time clock the hypervisor can read its wall-clock time from:
    /// the first enabled `arm,pl031` (ARM DDI 0224), if any.
    pub rtc: Option<MemRange>,
    /// The VMs described under `/chosen` (docs/vm-binding.md), in DT order;
    /// each is parsed on its own, so a bad VM node is an `Err` here that
    /// names the node and property, and never makes [`Platform::parse`] fail.
    pub vms: Vec<Result<VmConfig, PlatformError>>,
}

/// What is wrong, for [`PlatformError`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The blob is not a flattened device tree or is structurally broken.
    BadBlob(&'static str),
    /// A required node is absent.
    MissingNode,
    /// A required property is absent.
    MissingProperty,
    /// A property has the wrong length or an impossible value.
    BadValue(String),
    /// The board has hardware this hypervisor does not support.
    Unsupported(String),
}

/// A parse failure, naming where in the firmware's description it happened.
///
/// `node` says which description, by its first characters (see
/// [`PlatformError::origin`]):
/// - a device tree node path, which always starts with `/`
///   (`/intc@8000000`, or `/` for header-level faults); `property` is
///   then a property name;
/// - [`acpi::NODE_PREFIX`] followed by the ACPI specification's name for
///   the table (`ACPI table MADT`, `ACPI table FADT`; the signature for
///   tables the specification names by it, `ACPI table GTDT`); `property`
///   is then the field, prefixed with the structure that holds it
///   and its index among the structures of its type (`GICC[3].MPIDR`,
///   `GICD[0].GIC version`), or is a field of the table itself
///   (`ARM_BOOT_ARCH`, `Checksum`);
/// - [`acpi::MEMORY_MAP_NODE`] for the RAM ranges handed to
///   [`Platform::from_acpi`]; `property` is then `ram[i]` (or `ram`).
///
/// [`fmt::Display`] words each kind: `device tree node /intc@8000000,
/// property "reg": property missing`, `ACPI table MADT, field
/// "GICC[3].MPIDR": bad value: ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlatformError {
    /// Node path, ACPI table, or memory map; see the type's documentation.
    pub node: String,
    /// The property or field at fault, when one is.
    pub property: Option<String>,
    /// What is wrong.
    pub kind: ErrorKind,
}

/// Which firmware description a [`PlatformError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorOrigin {
    /// A device tree node (`node` starts with `/`).
    DeviceTree,
    /// An ACPI table (`node` starts with [`acpi::NODE_PREFIX`]).
    Acpi,
    /// The RAM list from the UEFI memory map ([`acpi::MEMORY_MAP_NODE`]).
    MemoryMap,
}

impl PlatformError {
    /// Which description the error is about, read from [`Self::node`].
    /// Anything that is neither an ACPI table nor the memory map counts
    /// as a device tree node.
    pub fn origin(&self) -> ErrorOrigin {
        if self.node.starts_with(acpi::NODE_PREFIX) {
            ErrorOrigin::Acpi
        } else if self.node == acpi::MEMORY_MAP_NODE {
            ErrorOrigin::MemoryMap
        } else {
            ErrorOrigin::DeviceTree
        }
    }
}

impl fmt::Display for PlatformError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.origin() != ErrorOrigin::DeviceTree {
            // `ACPI table MADT, field "GICC[3].MPIDR": bad value: ...`
            write!(f, "{}", self.node)?;
            if let Some(p) = &self.property {
                write!(f, ", field \"{p}\"")?;
            }
            return match &self.kind {
                ErrorKind::BadBlob(why) => write!(f, ": malformed table: {why}"),
                ErrorKind::MissingNode => write!(f, ": table missing"),
                ErrorKind::MissingProperty => write!(f, ": missing"),
                ErrorKind::BadValue(why) => write!(f, ": bad value: {why}"),
                ErrorKind::Unsupported(why) => write!(f, ": unsupported: {why}"),
            };
        }
        write!(f, "device tree node {}", self.node)?;
        if let Some(p) = &self.property {
            write!(f, ", property \"{p}\"")?;
        }
        match &self.kind {
            ErrorKind::BadBlob(why) => write!(f, ": malformed blob: {why}"),
            ErrorKind::MissingNode => write!(f, ": node missing"),
            ErrorKind::MissingProperty => write!(f, ": property missing"),
            ErrorKind::BadValue(why) => write!(f, ": bad value: {why}"),
            ErrorKind::Unsupported(why) => write!(f, ": unsupported: {why}"),
        }
    }
}

impl Platform {
    /// Parses a flattened device tree blob. `dtb` may be longer than the
    /// tree (its header's `totalsize` bounds what is read).
    ///
    /// Mandatory parts (memory, `/cpus` with at least one CPU, a GICv3,
    /// the architected timer, PSCI) that are absent yield
    /// [`ErrorKind::MissingNode`] naming their conventional path
    /// (`/memory`, `/cpus`, `/cpus/cpu`, `/interrupt-controller`, `/timer`,
    /// `/psci`); a GICv2-only board yields [`ErrorKind::Unsupported`] naming
    /// its GIC node. CPU nodes whose `status` is not "okay" are left out.
    /// Unknown nodes are ignored.
    pub fn parse(dtb: &[u8]) -> Result<Platform, PlatformError> {
        let tree = fdt::Fdt::new(dtb)?;
        parse::parse(&tree)
    }

    /// Builds the platform from the firmware's ACPI tables (each slice one
    /// complete table starting with its 36-byte System Description Table
    /// header, in any order, e.g. "APIC", "SPCR", "GTDT", "FACP", "SRAT",
    /// "DSDT" ... unknown signatures ignored), the RAM the UEFI memory map
    /// gives (`ram`, sorted or not), the regions of it that must not be used
    /// (`reserved`), and optionally a device tree blob whose /chosen holds
    /// the bootargs and the `pvlock,vm` VM nodes (docs/vm-binding.md).
    ///
    /// [`acpi`] says which tables and fields are read and what is rejected.
    /// The MADT, GTDT and FADT are required (absent: [`ErrorKind::MissingNode`]
    /// naming the table), the SPCR is optional, the SRAT is not read (see
    /// [`acpi::numa`]); a GICv1/v2 is [`ErrorKind::Unsupported`]. Errors in
    /// the tables name the table and field ([`PlatformError`]); the VM
    /// description is read as [`vms_from_dt`] reads it, with `cpu-affinity`
    /// bounded by the MADT's usable CPUs, and only a blob that is not a
    /// device tree fails the call. `rtc` is `None` and `timer.clock_frequency`
    /// `None`; `model` is the FADT's OEM ID and OEM Table ID.
    pub fn from_acpi(
        tables: &[&[u8]],
        ram: &[MemRange],
        reserved: &[ReservedRegion],
        vm_description: Option<&[u8]>,
    ) -> Result<Platform, PlatformError> {
        acpi::platform(tables, ram, reserved, vm_description)
    }

    /// The CPU whose affinity is `mpidr`.
    pub fn cpu_by_mpidr(&self, mpidr: Mpidr) -> Option<(usize, &Cpu)> {
        self.cpus.iter().enumerate().find(|(_, c)| c.mpidr == mpidr)
    }
}

/// What the hypervisor can still use from a device tree that
/// [`Platform::parse`] rejects, so that it can say why before it stops
/// (or from ACPI tables [`Platform::from_acpi`] rejects: [`acpi::rescue`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rescue {
    /// The console UART (without its interrupt), if its node is readable.
    pub console: Option<Uart>,
    /// The PSCI conduit, if the PSCI node is readable (to power off).
    pub psci_conduit: Option<Conduit>,
}

/// Reads, each on its own, the console and the PSCI conduit from `dtb`;
/// never fails: whatever cannot be read is `None`.
pub fn rescue(dtb: &[u8]) -> Rescue {
    match fdt::Fdt::new(dtb) {
        Ok(tree) => parse::rescue(&tree),
        Err(_) => Rescue::default(),
    }
}

/// The bootargs and VMs of a device tree's `/chosen`, for a machine whose
/// hardware is described elsewhere (ACPI): `/chosen/bootargs` (empty when
/// absent) and every `pvlock,vm` node, each parsed on its own as
/// [`Platform::parse`] does (docs/vm-binding.md). The tree needs nothing
/// but a `/chosen` (which may be absent too: no bootargs, no VMs).
///
/// Only a blob that is not a well-formed FDT, or a `bootargs` that is not
/// a string, is an `Err`. The tree does not say how many CPUs the host
/// has, so `cpu-affinity` indices are not bounded here (only checked for
/// duplicates); [`Platform::from_acpi`] checks them against the MADT's
/// CPUs.
pub fn vms_from_dt(
    dtb: &[u8],
) -> Result<(String, Vec<Result<VmConfig, PlatformError>>), PlatformError> {
    chosen(dtb, usize::MAX)
}

/// [`vms_from_dt`] with `cpu-affinity` bounded by `cpu_count`.
pub(crate) fn chosen(
    dtb: &[u8],
    cpu_count: usize,
) -> Result<(String, Vec<Result<VmConfig, PlatformError>>), PlatformError> {
    let fdt = fdt::Fdt::new(dtb)?;
    let tree = parse::Tree { fdt: &fdt };
    let bootargs = match fdt.find_path("/chosen") {
        Some(chosen) => tree.string(chosen, "bootargs")?.unwrap_or_default().into(),
        None => String::new(),
    };
    Ok((bootargs, vm::parse_vms(&tree, cpu_count)))
}

/// Checks the FDT header at the start of `header` (at least its first 40
/// bytes: magic 0xd00dfeed, version 17 compatible, every block inside
/// `totalsize`) and returns the blob's `totalsize`, so boot code knows how
/// many bytes to hand to [`Platform::parse`].
pub fn blob_size(header: &[u8]) -> Result<usize, PlatformError> {
    let header = fdt::Header::parse(header)?;
    Ok(header.totalsize as usize)
}
