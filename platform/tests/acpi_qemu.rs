//! The ACPI tables QEMU 7.2's `virt` machine gives UEFI (AAVMF) and Linux,
//! dumped from a running guest (fixtures/acpi/PROVENANCE.md), against the
//! values of QEMU's board (hw/arm/virt.c, hw/arm/virt-acpi-build.c) and
//! against `Platform::parse` of the device tree QEMU dumps for the same
//! command line.

mod acpi_common;

use acpi_common::{fixture_dtb, fixture_tables};
use platform::acpi::{self, NumaNode};
use platform::{
    Conduit, EnableMethod, Interrupt, MemRange, Mpidr, Platform, RedistributorRegion, UartKind,
    vms_from_dt,
};

const FOUR_CPUS: &str = "qemu-virt-4cpu";
const EIGHT_CPUS_NUMA: &str = "qemu-virt-8cpu-numa";

/// Every table of the fixture, in file-name order.
fn tables(dir: &str) -> Vec<Vec<u8>> {
    fixture_tables(dir).into_iter().map(|(_, t)| t).collect()
}

/// `from_acpi` over every table of `dir`, with the RAM and reserved
/// regions of QEMU's DT for the same command line (what its UEFI memory
/// map covers) and no VM description.
fn from_acpi(dir: &str) -> (Platform, Platform) {
    let tables = tables(dir);
    let slices = acpi_common::slices(&tables);
    let dt = Platform::parse(&fixture_dtb(dir)).unwrap_or_else(|e| panic!("{dir} DT: {e}"));
    let p = Platform::from_acpi(&slices, &dt.memory, &dt.reserved, None)
        .unwrap_or_else(|e| panic!("{dir}: {e}"));
    (p, dt)
}

/// What QEMU's virt board has with gic-version=3, virtualization=on.
fn check_virt(p: &Platform, cpus: u64) {
    // QEMU's FADT, MADT, ... carry OEM ID "BOCHS " and table ID "BXPC    ".
    assert_eq!(p.model, "BOCHS BXPC");
    assert_eq!(p.memory, [MemRange::new(0x4000_0000, 0x4000_0000)]);
    assert!(p.reserved.is_empty());

    // virt_cpu_mp_affinity with a GICv3: Aff1 = i / 16, Aff0 = i % 16.
    let mpidrs: Vec<u64> = p.cpus.iter().map(|c| c.mpidr.value()).collect();
    let expected: Vec<u64> = (0..cpus).map(|i| ((i / 16) << 8) | (i % 16)).collect();
    assert_eq!(mpidrs, expected);
    for (i, cpu) in p.cpus.iter().enumerate() {
        assert_eq!(cpu.enable_method, EnableMethod::Psci);
        assert_eq!(cpu.node, format!("MADT GICC[{i}]"));
    }

    // VIRT_GIC_DIST, VIRT_GIC_REDIST, VIRT_GIC_ITS.
    assert_eq!(p.gic.distributor, MemRange::new(0x0800_0000, 0x1_0000));
    assert_eq!(
        p.gic.redistributor_regions,
        [RedistributorRegion {
            range: MemRange::new(0x080a_0000, 0xf6_0000),
            stride: None,
        }]
    );
    assert_eq!(p.gic.its, [MemRange::new(0x0808_0000, 0x2_0000)]);
    // ARCH_GIC_MAINT_IRQ 9 -> GSIV 25, level.
    assert_eq!(
        p.gic.maintenance_irq,
        Some(Interrupt::Ppi {
            number: 9,
            flags: 4
        })
    );

    // VIRT_UART at 0x09000000, SPI 1 (INTID 33).
    let uart = p.uart.as_ref().expect("SPCR console");
    assert_eq!(uart.kind, UartKind::Pl011);
    assert_eq!(uart.range, MemRange::new(0x0900_0000, 0x1000));
    assert_eq!(
        uart.irq,
        Some(Interrupt::Spi {
            number: 1,
            flags: 4
        })
    );
    assert_eq!(uart.irq.unwrap().intid(), 33);
    assert_eq!(uart.node, "SPCR");

    // ARCH_TIMER_{S_EL1,NS_EL1,VIRT,NS_EL2}_IRQ 13, 14, 11, 10 (+16), level
    // high; QEMU 7.2's GTDT is revision 2: no virtual EL2 timer.
    let t = &p.timer;
    let intids = [t.secure_phys, t.nonsecure_phys, t.virt, t.hyp_phys].map(|i| i.intid());
    assert_eq!(intids, [29, 30, 27, 26]);
    for irq in [t.secure_phys, t.nonsecure_phys, t.virt, t.hyp_phys] {
        assert!(matches!(irq, Interrupt::Ppi { flags: 4, .. }), "{irq:?}");
    }
    assert_eq!(t.hyp_virt, None);
    assert_eq!(t.clock_frequency, None);

    // virtualization=on puts PSCI at EL3: ARM_BOOT_ARCH = PSCI_COMPLIANT.
    assert_eq!(p.psci.conduit, Conduit::Smc);
    assert_eq!(p.psci.version, (1, 0));

    assert_eq!(p.rtc, None);
    assert_eq!(p.bootargs, "");
    assert!(p.vms.is_empty());
}

/// The ACPI platform and the DT platform of the same QEMU command line
/// agree on everything both describe.
fn check_same_as_dt(p: &Platform, dt: &Platform) {
    let mpidrs = |p: &Platform| p.cpus.iter().map(|c| c.mpidr).collect::<Vec<Mpidr>>();
    assert_eq!(mpidrs(p), mpidrs(dt));
    for (a, d) in p.cpus.iter().zip(&dt.cpus) {
        assert_eq!(a.enable_method, d.enable_method, "{} / {}", a.node, d.node);
    }
    assert_eq!(p.gic, dt.gic);
    let (a, d) = (p.uart.as_ref().unwrap(), dt.uart.as_ref().unwrap());
    assert_eq!((a.kind, a.range, a.irq), (d.kind, d.range, d.irq));
    assert_eq!(p.timer, dt.timer);
    assert_eq!(p.psci, dt.psci);
}

#[test]
fn four_cpus() {
    let (p, dt) = from_acpi(FOUR_CPUS);
    check_virt(&p, 4);
    check_same_as_dt(&p, &dt);
    assert_eq!(p.memory, dt.memory);
}

#[test]
fn eight_cpus_in_two_clusters_and_two_numa_nodes() {
    let (p, dt) = from_acpi(EIGHT_CPUS_NUMA);
    // The DT lists the two nodes' memory as two banks; from_acpi merges
    // adjacent RAM into one range.
    assert_eq!(
        dt.memory,
        [
            MemRange::new(0x4000_0000, 0x2000_0000),
            MemRange::new(0x6000_0000, 0x2000_0000)
        ]
    );
    check_virt(&p, 8);
    check_same_as_dt(&p, &dt);
}

#[test]
fn numa_nodes_from_the_srat() {
    // -numa node,nodeid=0,cpus=0-3,memdev=m0 -numa node,nodeid=1,cpus=4-7,memdev=m1
    // with 512 MiB each: QEMU places node 0's memory first.
    let eight = tables(EIGHT_CPUS_NUMA);
    let nodes = acpi::numa(&acpi_common::slices(&eight)).unwrap();
    let cpus = |range: std::ops::Range<u64>| range.map(Mpidr::from_raw).collect::<Vec<_>>();
    assert_eq!(
        nodes,
        [
            NumaNode {
                proximity_domain: 0,
                cpus: cpus(0..4),
                memory: vec![MemRange::new(0x4000_0000, 0x2000_0000)],
            },
            NumaNode {
                proximity_domain: 1,
                cpus: cpus(4..8),
                memory: vec![MemRange::new(0x6000_0000, 0x2000_0000)],
            },
        ]
    );
    // The same banks as the DT's memory nodes.
    let dt = Platform::parse(&fixture_dtb(EIGHT_CPUS_NUMA)).unwrap();
    let banks: Vec<MemRange> = nodes.iter().flat_map(|n| n.memory.clone()).collect();
    assert_eq!(banks, dt.memory);

    // Without -numa QEMU writes no SRAT.
    let four = tables(FOUR_CPUS);
    assert_eq!(acpi::numa(&acpi_common::slices(&four)).unwrap(), []);
}

#[test]
fn the_tables_read_are_those_expected_and_others_are_ignored() {
    let names: Vec<String> = fixture_tables(FOUR_CPUS)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        names,
        [
            "APIC", "DBG2", "DSDT", "FACP", "GTDT", "IORT", "MCFG", "PPTT", "SPCR"
        ]
    );
    // Only the four tables read make a difference; the order does not.
    let all = tables(FOUR_CPUS);
    let (p, dt) = from_acpi(FOUR_CPUS);
    let read: Vec<&[u8]> = all
        .iter()
        .filter(|t| [b"SPCR", b"GTDT", b"FACP", b"APIC"].contains(&&t[..4].try_into().unwrap()))
        .map(Vec::as_slice)
        .rev()
        .collect();
    assert_eq!(read.len(), 4);
    assert_eq!(
        Platform::from_acpi(&read, &dt.memory, &[], None).unwrap(),
        p
    );
}

#[test]
fn rescue_reads_console_and_conduit() {
    let tables = tables(FOUR_CPUS);
    let rescue = acpi::rescue(&acpi_common::slices(&tables));
    let console = rescue.console.expect("console");
    assert_eq!(console.range, MemRange::new(0x0900_0000, 0x1000));
    assert_eq!(console.irq, None);
    assert_eq!(rescue.psci_conduit, Some(Conduit::Smc));
}

#[test]
fn the_qemu_device_tree_as_a_vm_description() {
    // QEMU's own tree has a /chosen without bootargs (nothing was appended)
    // and no VM nodes: accepted, empty.
    let dtb = fixture_dtb(FOUR_CPUS);
    let (bootargs, vms) = vms_from_dt(&dtb).unwrap();
    assert_eq!(bootargs, "");
    assert!(vms.is_empty());
    let tables = tables(FOUR_CPUS);
    let dt = Platform::parse(&dtb).unwrap();
    let p =
        Platform::from_acpi(&acpi_common::slices(&tables), &dt.memory, &[], Some(&dtb)).unwrap();
    assert_eq!(p.bootargs, "");
    assert!(p.vms.is_empty());
}
