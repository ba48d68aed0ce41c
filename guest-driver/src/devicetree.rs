//! What a guest learns from the device tree it boots with: its RAM (and
//! which parts of it are reserved), its CPUs (by MPIDR), the console UART,
//! the PSCI conduit, the command line, and its GICv3 with the interrupts
//! of the virtual timer and the console.
//!
//! The runtime parses the tree once, before its MMU is on, so this module
//! neither allocates nor uses atomics: everything lands in fixed-size
//! arrays. The hypervisor's generated trees and QEMU's `virt` trees both
//! keep these nodes directly under the root, which is all this reader
//! supports (no `ranges` translation).

use crate::gicv3::IntId;
use crate::mpidr::Mpidr;
use core::fmt;
use fdt::Fdt;
use fdt::node::FdtNode;

/// Most CPUs a guest uses; further CPU nodes are ignored (and counted).
pub const MAX_CPUS: usize = 64;
/// Most RAM banks a guest maps; further banks are ignored (and counted).
pub const MAX_MEMORY_BANKS: usize = 8;
/// Most reserved regions a guest records; further ones are ignored (and
/// counted).
pub const MAX_RESERVED: usize = 16;
const _: () = assert!(
    MAX_RESERVED <= u16::BITS as usize,
    "GuestMachine::no_map is a u16"
);

/// Most GICv3 redistributor regions a guest records; further ones are
/// ignored (a VM of the hypervisor has one, QEMU's `virt` one or two).
pub const MAX_REDISTRIBUTOR_REGIONS: usize = 4;

/// A range of physical (for a guest: intermediate physical) addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MemRange {
    pub start: u64,
    pub size: u64,
}

impl MemRange {
    pub const fn new(start: u64, size: u64) -> Self {
        Self { start, size }
    }

    /// One past the last byte (saturating).
    pub const fn end(&self) -> u64 {
        self.start.saturating_add(self.size)
    }

    pub const fn contains(&self, address: u64) -> bool {
        address >= self.start && address < self.end()
    }

    /// Whether `other` lies entirely inside this range.
    pub const fn covers(&self, other: &MemRange) -> bool {
        other.start >= self.start && other.end() <= self.end()
    }
}

/// How PSCI is called: the `method` of the device tree's `/psci` node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conduit {
    Hvc,
    Smc,
}

impl Conduit {
    pub const fn name(self) -> &'static str {
        match self {
            Conduit::Hvc => "hvc",
            Conduit::Smc => "smc",
        }
    }
}

/// Why the tree cannot be used. Each names the node and property.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DtError<'dt> {
    /// Not a flattened device tree (bad magic or truncated).
    NotADeviceTree,
    /// A required node is missing.
    MissingNode(&'static str),
    /// A property is missing or malformed.
    BadProperty {
        node: &'dt str,
        property: &'static str,
        problem: &'static str,
    },
    /// No `memory` node with a usable `reg`.
    NoMemory,
    /// The CPU we run on (by MPIDR_EL1) is not among the CPU nodes.
    BootCpuNotListed(Mpidr),
}

impl fmt::Display for DtError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DtError::NotADeviceTree => write!(f, "not a flattened device tree"),
            DtError::MissingNode(path) => write!(f, "no {path} node"),
            DtError::BadProperty {
                node,
                property,
                problem,
            } => write!(
                f,
                "device tree node {node}, property \"{property}\": {problem}"
            ),
            DtError::NoMemory => write!(f, "no memory node with a reg"),
            DtError::BootCpuNotListed(m) => {
                write!(f, "the boot CPU (mpidr {m}) has no node under /cpus")
            }
        }
    }
}

/// A GICv3 as its device-tree node describes it
/// (interrupt-controller/arm,gic-v3.yaml): `reg` holds the distributor,
/// then `#redistributor-regions` redistributor regions (then, optionally,
/// GICv2-compatibility frames, which this reader leaves out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GicV3 {
    pub distributor: MemRange,
    redistributors: [MemRange; MAX_REDISTRIBUTOR_REGIONS],
    region_count: usize,
}

impl GicV3 {
    /// The redistributor regions, in tree order.
    pub fn redistributor_regions(&self) -> &[MemRange] {
        &self.redistributors[..self.region_count]
    }
}

/// The machine a guest runs on.
#[derive(Clone, Copy, Debug)]
pub struct GuestMachine<'dt> {
    cpus: [Mpidr; MAX_CPUS],
    cpu_count: usize,
    /// CPU nodes beyond [`MAX_CPUS`] or without `enable-method = "psci"`.
    pub ignored_cpus: usize,
    memory: [MemRange; MAX_MEMORY_BANKS],
    bank_count: usize,
    /// RAM banks beyond [`MAX_MEMORY_BANKS`].
    pub ignored_banks: usize,
    reserved: [MemRange; MAX_RESERVED],
    reserved_count: usize,
    /// Bit i: `reserved[i]` has `no-map`.
    no_map: u16,
    /// Reserved regions beyond [`MAX_RESERVED`].
    pub ignored_reserved: usize,
    /// The PL011 that `/chosen/stdout-path` names, else the first PL011.
    pub uart: Option<MemRange>,
    /// The PSCI conduit, if the tree has a `/psci` node.
    pub psci: Option<Conduit>,
    /// `/chosen/bootargs`, or "".
    pub bootargs: &'dt str,
    /// How often the hypervisor restarted this VM
    /// (`/chosen/pvlock,reset-count`); 0 when absent (first boot, or not
    /// under this hypervisor).
    pub resets: u32,
    /// The tree itself (its header's `totalsize`).
    pub dtb: MemRange,
    /// The GICv3 (`compatible = "arm,gic-v3"`), if the tree has one.
    pub gic: Option<GicV3>,
    /// The virtual timer's interrupt: the third entry of the `/timer`
    /// node's `interrupts` (arm,arch_timer.yaml: secure physical,
    /// non-secure physical, virtual, hypervisor), if the GICv3 is its
    /// interrupt parent.
    pub virtual_timer_irq: Option<IntId>,
    /// The console UART's interrupt, if the GICv3 is its interrupt parent.
    pub uart_irq: Option<IntId>,
    /// The PMU's overflow interrupt: the `arm,armv8-pmuv3` node's first
    /// `interrupts` entry (perf/arm,pmu.yaml), if the GICv3 is its
    /// interrupt parent.
    pub pmu_irq: Option<IntId>,
}

impl<'dt> GuestMachine<'dt> {
    /// Reads `dtb`, which is at address `dtb_address`, as seen from the CPU
    /// whose MPIDR is `boot_mpidr`. The CPU list is in logical order: the
    /// boot CPU first, then the others in tree order.
    pub fn parse(
        dtb: &'dt [u8],
        dtb_address: u64,
        boot_mpidr: Mpidr,
    ) -> Result<Self, DtError<'dt>> {
        let fdt = Fdt::new(dtb).map_err(|_| DtError::NotADeviceTree)?;
        let mut machine = GuestMachine {
            cpus: [Mpidr::default(); MAX_CPUS],
            cpu_count: 0,
            ignored_cpus: 0,
            memory: [MemRange::default(); MAX_MEMORY_BANKS],
            bank_count: 0,
            ignored_banks: 0,
            reserved: [MemRange::default(); MAX_RESERVED],
            reserved_count: 0,
            no_map: 0,
            ignored_reserved: 0,
            uart: None,
            psci: None,
            bootargs: "",
            resets: 0,
            dtb: MemRange::new(dtb_address, fdt.total_size() as u64),
            gic: None,
            virtual_timer_irq: None,
            uart_irq: None,
            pmu_irq: None,
        };
        machine.read_memory(&fdt)?;
        machine.read_reserved(&fdt)?;
        machine.read_cpus(&fdt, boot_mpidr)?;
        machine.read_psci(&fdt)?;
        machine.read_chosen(&fdt)?;
        machine.read_interrupts(&fdt)?;
        Ok(machine)
    }

    /// CPUs in logical order (index 0 is the boot CPU).
    pub fn cpus(&self) -> &[Mpidr] {
        &self.cpus[..self.cpu_count]
    }

    /// RAM banks in tree order.
    pub fn memory(&self) -> &[MemRange] {
        &self.memory[..self.bank_count]
    }

    /// Reserved memory, which the guest must leave alone: the header's
    /// memory reservation block (`/memreserve/`) and the static regions
    /// (`reg`) of `/reserved-memory`, in that order. A hypervisor keeps
    /// what it shares with the guest there.
    pub fn reserved(&self) -> &[MemRange] {
        &self.reserved[..self.reserved_count]
    }

    /// The reserved regions marked `no-map`, which the guest must not map
    /// as ordinary memory (a hypervisor's PV area is one): the runtime
    /// leaves them out of its map until something maps part of them on
    /// purpose.
    pub fn no_map(&self) -> impl Iterator<Item = MemRange> + '_ {
        self.reserved()
            .iter()
            .enumerate()
            .filter(|(i, _)| self.no_map & 1 << i != 0)
            .map(|(_, r)| *r)
    }

    /// Whether `range` lies entirely inside one reserved region.
    pub fn is_reserved(&self, range: &MemRange) -> bool {
        self.reserved().iter().any(|r| r.covers(range))
    }

    /// Whether `range` lies entirely inside one RAM bank.
    pub fn is_ram(&self, range: &MemRange) -> bool {
        self.memory().iter().any(|r| r.covers(range))
    }

    /// Total RAM.
    pub fn memory_size(&self) -> u64 {
        self.memory().iter().map(|m| m.size).sum()
    }

    /// One past the highest RAM address.
    pub fn memory_end(&self) -> u64 {
        self.memory().iter().map(MemRange::end).max().unwrap_or(0)
    }

    /// The logical index of the CPU with this MPIDR.
    pub fn cpu_index(&self, mpidr: Mpidr) -> Option<usize> {
        self.cpus().iter().position(|&m| m == mpidr)
    }

    fn read_memory(&mut self, fdt: &Fdt<'dt>) -> Result<(), DtError<'dt>> {
        for node in fdt.all_nodes() {
            if string_property(&node, "device_type") != Some("memory") {
                continue;
            }
            let Some(regions) = node.reg() else {
                return Err(DtError::BadProperty {
                    node: node.name,
                    property: "reg",
                    problem: "missing, or wider than 2 cells",
                });
            };
            for region in regions {
                let size = region.size.unwrap_or(0) as u64;
                if size == 0 {
                    continue;
                }
                if self.bank_count == MAX_MEMORY_BANKS {
                    self.ignored_banks += 1;
                    continue;
                }
                self.memory[self.bank_count] =
                    MemRange::new(region.starting_address as usize as u64, size);
                self.bank_count += 1;
            }
        }
        if self.bank_count == 0 {
            return Err(DtError::NoMemory);
        }
        Ok(())
    }

    fn add_reserved(&mut self, range: MemRange, no_map: bool) {
        if range.size == 0 {
            return;
        }
        if self.reserved_count == MAX_RESERVED {
            self.ignored_reserved += 1;
            return;
        }
        self.reserved[self.reserved_count] = range;
        if no_map {
            self.no_map |= 1 << self.reserved_count;
        }
        self.reserved_count += 1;
    }

    fn read_reserved(&mut self, fdt: &Fdt<'dt>) -> Result<(), DtError<'dt>> {
        for entry in fdt.memory_reservations() {
            self.add_reserved(
                MemRange::new(entry.address() as usize as u64, entry.size() as u64),
                false,
            );
        }
        let Some(node) = fdt.find_node("/reserved-memory") else {
            return Ok(());
        };
        for child in node.children() {
            // Regions without `reg` are allocated by the OS (`size`,
            // `alignment`): nothing to leave alone yet.
            if child.property("reg").is_none() {
                continue;
            }
            let regions = child.reg().ok_or(DtError::BadProperty {
                node: child.name,
                property: "reg",
                problem: "wider than 2 cells",
            })?;
            let no_map = child.property("no-map").is_some();
            for region in regions {
                self.add_reserved(
                    MemRange::new(
                        region.starting_address as usize as u64,
                        region.size.unwrap_or(0) as u64,
                    ),
                    no_map,
                );
            }
        }
        Ok(())
    }

    fn read_cpus(&mut self, fdt: &Fdt<'dt>, boot_mpidr: Mpidr) -> Result<(), DtError<'dt>> {
        let cpus = fdt
            .find_node("/cpus")
            .ok_or(DtError::MissingNode("/cpus"))?;
        let address_cells = cell_count(&cpus, "#address-cells")?.unwrap_or(1);
        let mut boot_seen = false;
        // The boot CPU takes slot 0; the others follow in tree order.
        self.cpus[0] = boot_mpidr;
        self.cpu_count = 1;
        for node in cpus.children() {
            if string_property(&node, "device_type") != Some("cpu") {
                continue; // cpu-map, l2-cache, ...
            }
            if string_property(&node, "status").is_some_and(|s| s != "okay" && s != "ok") {
                continue;
            }
            let reg = node.property("reg").ok_or(DtError::BadProperty {
                node: node.name,
                property: "reg",
                problem: "missing",
            })?;
            let mpidr = Mpidr::from_raw(read_cells(reg.value, address_cells).ok_or(
                DtError::BadProperty {
                    node: node.name,
                    property: "reg",
                    problem: "shorter than #address-cells of /cpus",
                },
            )?);
            if mpidr == boot_mpidr {
                boot_seen = true;
                continue;
            }
            let psci = string_property(&node, "enable-method").is_none_or(|m| m == "psci");
            if !psci || self.cpu_count == MAX_CPUS {
                self.ignored_cpus += 1;
                continue;
            }
            self.cpus[self.cpu_count] = mpidr;
            self.cpu_count += 1;
        }
        if boot_seen {
            Ok(())
        } else {
            Err(DtError::BootCpuNotListed(boot_mpidr))
        }
    }

    fn read_psci(&mut self, fdt: &Fdt<'dt>) -> Result<(), DtError<'dt>> {
        let Some(node) = fdt.find_compatible(&["arm,psci-1.0", "arm,psci-0.2", "arm,psci"]) else {
            return Ok(());
        };
        self.psci = Some(match string_property(&node, "method") {
            Some("hvc") => Conduit::Hvc,
            Some("smc") => Conduit::Smc,
            _ => {
                return Err(DtError::BadProperty {
                    node: node.name,
                    property: "method",
                    problem: "not \"hvc\" or \"smc\"",
                });
            }
        });
        Ok(())
    }

    fn read_chosen(&mut self, fdt: &Fdt<'dt>) -> Result<(), DtError<'dt>> {
        if let Some(chosen) = fdt.find_node("/chosen") {
            self.bootargs = string_property(&chosen, "bootargs").unwrap_or("");
            self.resets = chosen
                .property(pvlock_abi::dt::RESET_COUNT)
                .and_then(|p| <[u8; 4]>::try_from(p.value).ok())
                .map_or(0, u32::from_be_bytes);
        }
        self.uart = console_in(fdt)?;
        Ok(())
    }

    /// The GICv3 and, with it as their interrupt parent, the interrupts of
    /// the virtual timer and of the console UART.
    fn read_interrupts(&mut self, fdt: &Fdt<'dt>) -> Result<(), DtError<'dt>> {
        let Some(node) = fdt.find_compatible(&["arm,gic-v3"]) else {
            return Ok(());
        };
        let bad = |problem| DtError::BadProperty {
            node: node.name,
            property: "reg",
            problem,
        };
        let regions = match node.property("#redistributor-regions") {
            None => 1,
            Some(p) => read_cells(p.value, 1).ok_or(DtError::BadProperty {
                node: node.name,
                property: "#redistributor-regions",
                problem: "not a cell",
            })? as usize,
        };
        let mut reg = node
            .reg()
            .ok_or(bad("missing, or wider than 2 cells"))?
            .map(|r| {
                MemRange::new(
                    r.starting_address as usize as u64,
                    r.size.unwrap_or(0) as u64,
                )
            });
        let distributor = reg.next().ok_or(bad("no distributor frame"))?;
        let mut gic = GicV3 {
            distributor,
            redistributors: [MemRange::default(); MAX_REDISTRIBUTOR_REGIONS],
            region_count: 0,
        };
        for region in reg.take(regions.min(MAX_REDISTRIBUTOR_REGIONS)) {
            gic.redistributors[gic.region_count] = region;
            gic.region_count += 1;
        }
        if gic.region_count == 0 {
            return Err(bad("no redistributor region"));
        }
        self.gic = Some(gic);
        // Only the binding's three-cell specifiers <type number flags> are
        // read, and only for nodes whose interrupt parent is this GIC.
        let interrupt_cells = node
            .property("#interrupt-cells")
            .and_then(|p| read_cells(p.value, 1));
        if interrupt_cells != Some(GIC_INTERRUPT_CELLS) {
            return Ok(());
        }
        let gic_phandle = node
            .property("phandle")
            .and_then(|p| read_cells(p.value, 1));
        let root_parent = fdt
            .find_node("/")
            .and_then(|root| root.property("interrupt-parent"))
            .and_then(|p| read_cells(p.value, 1));
        let interrupt = |node: &FdtNode<'_, 'dt>, index: usize| -> Option<IntId> {
            let parent = node
                .property("interrupt-parent")
                .and_then(|p| read_cells(p.value, 1))
                .or(root_parent);
            if let (Some(parent), Some(gic)) = (parent, gic_phandle)
                && parent != gic
            {
                return None;
            }
            let cells = node.property("interrupts")?.value;
            let specifier =
                cells.get(index * GIC_SPECIFIER_BYTES..(index + 1) * GIC_SPECIFIER_BYTES)?;
            let (type_cell, number_cell) = specifier.split_at_checked(CELL_BYTES)?;
            let kind = read_cells(type_cell, 1)?;
            let number = read_cells(number_cell, 1)?;
            IntId::from_dt(kind as u32, number as u32)
        };
        self.virtual_timer_irq = fdt
            .find_compatible(&["arm,armv8-timer", "arm,armv7-timer"])
            .and_then(|timer| interrupt(&timer, TIMER_VIRTUAL_INDEX));
        self.uart_irq = console_node(fdt).and_then(|uart| interrupt(&uart, 0));
        self.pmu_irq = fdt
            .find_compatible(&["arm,armv8-pmuv3"])
            .and_then(|pmu| interrupt(&pmu, 0));
        Ok(())
    }
}

/// Bytes of a device-tree cell (a big-endian u32; Devicetree
/// Specification, "Property values").
const CELL_BYTES: usize = 4;
/// `#interrupt-cells` of the GICv3 binding: type, number, flags.
const GIC_INTERRUPT_CELLS: u64 = 3;
/// Bytes of one such specifier.
const GIC_SPECIFIER_BYTES: usize = GIC_INTERRUPT_CELLS as usize * CELL_BYTES;
/// The virtual timer's entry in the timer node's `interrupts`
/// (timer/arm,arch_timer.yaml: secure physical, non-secure physical,
/// virtual, hypervisor physical).
const TIMER_VIRTUAL_INDEX: usize = 2;

/// Only the console: the PL011 that `/chosen/stdout-path` names, else the
/// first PL011. Lets the runtime report a tree it cannot otherwise use.
pub fn find_console(dtb: &[u8]) -> Option<MemRange> {
    let fdt = Fdt::new(dtb).ok()?;
    console_in(&fdt).ok().flatten()
}

/// The console's node: the PL011 that `/chosen/stdout-path` names, else
/// the first PL011.
fn console_node<'b, 'dt>(fdt: &'b Fdt<'dt>) -> Option<FdtNode<'b, 'dt>> {
    // stdout-path may carry options ("serial0:115200n8") and may be an
    // alias, which find_node resolves.
    let stdout = fdt
        .find_node("/chosen")
        .and_then(|c| string_property(&c, "stdout-path"))
        .map(|path| path.split(':').next().unwrap_or(path))
        .and_then(|path| fdt.find_node(path))
        .filter(is_pl011);
    stdout.or_else(|| fdt.all_nodes().find(is_pl011))
}

fn console_in<'dt>(fdt: &Fdt<'dt>) -> Result<Option<MemRange>, DtError<'dt>> {
    let Some(node) = console_node(fdt) else {
        return Ok(None);
    };
    let region = node
        .reg()
        .and_then(|mut r| r.next())
        .ok_or(DtError::BadProperty {
            node: node.name,
            property: "reg",
            problem: "missing or malformed",
        })?;
    Ok(Some(MemRange::new(
        region.starting_address as usize as u64,
        region.size.unwrap_or(0) as u64,
    )))
}

fn is_pl011(node: &FdtNode<'_, '_>) -> bool {
    node.compatible()
        .is_some_and(|c| c.all().any(|s| s == "arm,pl011"))
}

/// A string property without its terminating NUL(s); `None` if absent or
/// not UTF-8.
fn string_property<'dt>(node: &FdtNode<'_, 'dt>, name: &str) -> Option<&'dt str> {
    let value = node.property(name)?.value;
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    core::str::from_utf8(&value[..end]).ok()
}

/// A one-cell `#...-cells` property.
fn cell_count<'dt>(
    node: &FdtNode<'_, 'dt>,
    name: &'static str,
) -> Result<Option<usize>, DtError<'dt>> {
    let Some(prop) = node.property(name) else {
        return Ok(None);
    };
    match read_cells(prop.value, 1) {
        Some(n @ 1..=2) => Ok(Some(n as usize)),
        _ => Err(DtError::BadProperty {
            node: node.name,
            property: name,
            problem: "not 1 or 2",
        }),
    }
}

/// The first `cells` big-endian 32-bit cells of `bytes` as one number.
fn read_cells(bytes: &[u8], cells: usize) -> Option<u64> {
    let bytes = bytes.get(..cells * 4)?;
    Some(bytes.chunks_exact(4).fold(0, |acc, c| {
        (acc << 32) | u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU 7.2 `virt` at EL1 (see tests/fixtures/README.md).
    const QEMU_EL1: &[u8] = include_bytes!("../tests/fixtures/qemu-virt-el1-4cpu.dtb");
    /// A tree shaped like the one the hypervisor generates for a VM.
    const VM: &[u8] = include_bytes!("../tests/fixtures/vm-8vcpu.dtb");
    /// A VM tree with reserved memory.
    const RESERVED: &[u8] = include_bytes!("../tests/fixtures/vm-pv-reserved.dtb");

    #[test]
    fn qemu_el1_machine() {
        let m = GuestMachine::parse(QEMU_EL1, 0x4000_0000, Mpidr::from_raw(0)).unwrap();
        let mpidrs: Vec<u64> = m.cpus().iter().map(|c| c.raw()).collect();
        assert_eq!(mpidrs, [0, 1, 2, 3]);
        assert_eq!(m.memory(), [MemRange::new(0x4000_0000, 256 << 20)]);
        assert_eq!(m.memory_end(), 0x5000_0000);
        assert_eq!(m.uart, Some(MemRange::new(0x0900_0000, 0x1000)));
        assert_eq!(m.psci, Some(Conduit::Hvc));
        assert_eq!(m.bootargs, "rounds=2 work=1000");
        assert_eq!(m.dtb.start, 0x4000_0000);
        assert_eq!(m.dtb.size, QEMU_EL1.len() as u64);
        assert_eq!((m.ignored_cpus, m.ignored_banks), (0, 0));
        assert_eq!(find_console(QEMU_EL1), m.uart);
        assert_eq!(find_console(&[0; 16]), None);
    }

    #[test]
    fn vm_machine_with_two_affinity_levels() {
        let m = GuestMachine::parse(VM, 0x4400_0000, Mpidr::from_raw(0)).unwrap();
        assert_eq!(m.cpus().len(), 8);
        assert_eq!(m.cpus()[7], Mpidr::from_affinity(0, 0, 0, 7));
        assert_eq!(m.memory(), [MemRange::new(0x4000_0000, 64 << 20)]);
        assert_eq!(m.uart.map(|u| u.start), Some(0x0900_0000));
        assert_eq!(m.psci, Some(Conduit::Hvc));
        assert_eq!(m.bootargs, "rounds=3");
    }

    #[test]
    fn reserved_memory_from_memreserve_and_reserved_memory() {
        let m = GuestMachine::parse(RESERVED, 0x4400_0000, Mpidr::from_raw(0)).unwrap();
        assert_eq!(
            m.reserved(),
            [
                MemRange::new(0x43ff_0000, 0x1000),
                MemRange::new(0x43ff_e000, 0x2000)
            ]
        );
        assert!(m.is_reserved(&MemRange::new(0x43ff_e040, 64)));
        assert!(m.is_reserved(&MemRange::new(0x43ff_ffc0, 64)));
        assert!(!m.is_reserved(&MemRange::new(0x43ff_ffc0, 65)));
        assert!(!m.is_reserved(&MemRange::new(0x4000_0000, 64)));
        assert!(m.is_ram(&MemRange::new(0x43ff_ffc0, 64)));
        assert!(!m.is_ram(&MemRange::new(0x4400_0000, 64)));
        assert_eq!(m.ignored_reserved, 0);
        let no_map: Vec<MemRange> = m.no_map().collect();
        assert_eq!(no_map, [MemRange::new(0x43ff_e000, 0x2000)]);
        assert_eq!(m.cpus().len(), 2);
        // The other trees reserve nothing.
        let vm = GuestMachine::parse(VM, 0x4400_0000, Mpidr::from_raw(0)).unwrap();
        assert!(vm.reserved().is_empty());
        let qemu = GuestMachine::parse(QEMU_EL1, 0x4000_0000, Mpidr::from_raw(0)).unwrap();
        assert!(qemu.reserved().is_empty());
    }

    #[test]
    fn boot_cpu_comes_first() {
        let m = GuestMachine::parse(QEMU_EL1, 0, Mpidr::from_raw(2)).unwrap();
        let mpidrs: Vec<u64> = m.cpus().iter().map(|c| c.raw()).collect();
        assert_eq!(mpidrs, [2, 0, 1, 3]);
        assert_eq!(m.cpu_index(Mpidr::from_raw(3)), Some(3));
        assert_eq!(
            GuestMachine::parse(QEMU_EL1, 0, Mpidr::from_raw(9)).unwrap_err(),
            DtError::BootCpuNotListed(Mpidr::from_raw(9))
        );
    }

    #[test]
    fn gic_timer_and_uart_interrupts() {
        let qemu = GuestMachine::parse(QEMU_EL1, 0, Mpidr::from_raw(0)).unwrap();
        let gic = qemu.gic.unwrap();
        assert_eq!(gic.distributor, MemRange::new(0x0800_0000, 0x1_0000));
        assert_eq!(
            gic.redistributor_regions(),
            [MemRange::new(0x080a_0000, 0xf6_0000)]
        );
        assert_eq!(qemu.virtual_timer_irq, Some(IntId::from_raw(27)));
        assert_eq!(qemu.uart_irq, Some(IntId::from_raw(33)));
        assert_eq!(qemu.pmu_irq, Some(IntId::from_raw(23)));
        let vm = GuestMachine::parse(VM, 0, Mpidr::from_raw(0)).unwrap();
        // A tree el2 wrote before it offered the PMU.
        assert_eq!(vm.pmu_irq, None);
        assert_eq!(
            vm.gic.unwrap().redistributor_regions(),
            [MemRange::new(0x080a_0000, 8 * 0x2_0000)]
        );
        assert_eq!(vm.virtual_timer_irq, Some(IntId::from_raw(27)));
        assert_eq!(vm.uart_irq, Some(IntId::from_raw(33)));
        // No GIC node: nothing.
        let none = GuestMachine::parse(RESERVED, 0, Mpidr::from_raw(0)).unwrap();
        assert_eq!(
            (none.gic, none.virtual_timer_irq, none.uart_irq),
            (None, None, None)
        );
    }

    /// A tree with a GICv3 of `regions` redistributor regions (phandle 1)
    /// and a timer and UART whose interrupt parent is `parent`.
    fn tree_with_gic(regions: u32, reg: &[u64], parent: u32) -> Vec<u8> {
        let mut w = vm_fdt::FdtWriter::new().unwrap();
        let root = w.begin_node("").unwrap();
        w.property_u32("#address-cells", 2).unwrap();
        w.property_u32("#size-cells", 2).unwrap();
        w.property_u32("interrupt-parent", parent).unwrap();
        let memory = w.begin_node("memory@40000000").unwrap();
        w.property_string("device_type", "memory").unwrap();
        w.property_array_u64("reg", &[0x4000_0000, 0x100_0000])
            .unwrap();
        w.end_node(memory).unwrap();
        let cpus = w.begin_node("cpus").unwrap();
        w.property_u32("#address-cells", 1).unwrap();
        w.property_u32("#size-cells", 0).unwrap();
        let cpu = w.begin_node("cpu@0").unwrap();
        w.property_string("device_type", "cpu").unwrap();
        w.property_u32("reg", 0).unwrap();
        w.end_node(cpu).unwrap();
        w.end_node(cpus).unwrap();
        let gic = w.begin_node("intc@8000000").unwrap();
        w.property_string("compatible", "arm,gic-v3").unwrap();
        w.property_u32("#interrupt-cells", 3).unwrap();
        w.property_null("interrupt-controller").unwrap();
        w.property_u32("#redistributor-regions", regions).unwrap();
        w.property_array_u64("reg", reg).unwrap();
        w.property_phandle(1).unwrap();
        w.end_node(gic).unwrap();
        let timer = w.begin_node("timer").unwrap();
        w.property_string("compatible", "arm,armv8-timer").unwrap();
        w.property_array_u32("interrupts", &[1, 13, 4, 1, 14, 4, 1, 11, 4, 1, 10, 4])
            .unwrap();
        w.end_node(timer).unwrap();
        let uart = w.begin_node("pl011@9000000").unwrap();
        w.property_string("compatible", "arm,pl011").unwrap();
        w.property_array_u64("reg", &[0x900_0000, 0x1000]).unwrap();
        w.property_array_u32("interrupts", &[0, 1, 4]).unwrap();
        w.end_node(uart).unwrap();
        w.end_node(root).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn gic_regions_and_interrupt_parents() {
        // Two redistributor regions (as on a two-socket server), then a
        // GICv2-compatibility frame, which is not a redistributor region.
        let reg = [
            0x800_0000,
            0x1_0000,
            0x80a_0000,
            0x4_0000,
            0x1000_0000,
            0x8_0000,
            0x801_0000,
            0x2000,
        ];
        let dtb = tree_with_gic(2, &reg, 1);
        let m = GuestMachine::parse(&dtb, 0, Mpidr::from_raw(0)).unwrap();
        assert_eq!(
            m.gic.unwrap().redistributor_regions(),
            [
                MemRange::new(0x80a_0000, 0x4_0000),
                MemRange::new(0x1000_0000, 0x8_0000)
            ]
        );
        assert_eq!(m.virtual_timer_irq, Some(IntId::from_raw(27)));
        assert_eq!(m.uart_irq, Some(IntId::from_raw(33)));
        // The timer and UART report to another controller: their
        // interrupts are not the GIC's to name.
        let other = tree_with_gic(1, &reg[..4], 7);
        let m = GuestMachine::parse(&other, 0, Mpidr::from_raw(0)).unwrap();
        assert!(m.gic.is_some());
        assert_eq!((m.virtual_timer_irq, m.uart_irq), (None, None));
        // A GIC without redistributors cannot be used.
        let bare = tree_with_gic(1, &reg[..2], 1);
        assert_eq!(
            GuestMachine::parse(&bare, 0, Mpidr::from_raw(0)).unwrap_err(),
            DtError::BadProperty {
                node: "intc@8000000",
                property: "reg",
                problem: "no redistributor region"
            }
        );
    }

    #[test]
    fn garbage_is_an_error() {
        assert_eq!(
            GuestMachine::parse(&[0u8; 64], 0, Mpidr::default()).unwrap_err(),
            DtError::NotADeviceTree
        );
        let mut truncated = QEMU_EL1.to_vec();
        truncated.truncate(100);
        assert!(GuestMachine::parse(&truncated, 0, Mpidr::default()).is_err());
    }

    #[test]
    fn ranges() {
        let r = MemRange::new(0x1000, 0x1000);
        assert!(r.contains(0x1fff) && !r.contains(0x2000));
        assert!(r.covers(&MemRange::new(0x1800, 0x800)));
        assert!(!r.covers(&MemRange::new(0x1800, 0x801)));
        assert_eq!(
            read_cells(&[0, 0, 0, 1, 0, 0, 0, 2], 2),
            Some(0x1_0000_0002)
        );
        assert_eq!(read_cells(&[0, 0, 0], 1), None);
    }
}
