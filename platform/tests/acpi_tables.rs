//! `Platform::from_acpi` on tables built from the ACPI 6.5 layouts
//! (`acpi_common`): a Kunpeng-920-sized server, the redistributor and
//! console variants, every rejection and how errors read.

mod acpi_common;
mod common;

use acpi_common::*;
use common::{Node, cells, string};
use platform::acpi::{self, NumaNode};
use platform::vm::VM_COMPATIBLE;
use platform::{
    Conduit, ErrorKind, ErrorOrigin, Interrupt, MemRange, Mpidr, Platform, PlatformError,
    RedistributorRegion, ReservedRegion, UartKind, vms_from_dt,
};

const GIB: u64 = 1 << 30;
const RAM: [MemRange; 1] = [MemRange::new(0x4000_0000, GIB)];

fn build(tables: &[Vec<u8>]) -> Result<Platform, PlatformError> {
    Platform::from_acpi(&slices(tables), &RAM, &[], None)
}

fn ok(tables: &[Vec<u8>]) -> Platform {
    build(tables).unwrap_or_else(|e| panic!("{e}"))
}

fn err(tables: &[Vec<u8>]) -> PlatformError {
    match build(tables) {
        Ok(p) => panic!("expected an error, built {p:#?}"),
        Err(e) => e,
    }
}

/// The error is about `table`'s `field`; returns its text.
fn assert_acpi_error(e: &PlatformError, table: &str, field: Option<&str>) -> String {
    assert_eq!(e.node, format!("ACPI table {table}"), "{e}");
    assert_eq!(e.property.as_deref(), field, "{e}");
    assert_eq!(e.origin(), ErrorOrigin::Acpi, "{e}");
    e.to_string()
}

fn bad_value(e: &PlatformError) -> &str {
    match &e.kind {
        ErrorKind::BadValue(why) => why,
        other => panic!("expected BadValue, got {other:?} ({e})"),
    }
}

fn unsupported(e: &PlatformError) -> &str {
    match &e.kind {
        ErrorKind::Unsupported(why) => why,
        other => panic!("expected Unsupported, got {other:?} ({e})"),
    }
}

/// QEMU-like tables with the MADT replaced by one holding `structures`.
fn with_madt(structures: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut tables = qemu_like(0);
    tables[0] = madt(structures);
    tables
}

fn cpus(count: u32) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| Gicc::new(i, u64::from(i)).bytes())
        .collect()
}

// ---- a Kunpeng-class server ---------------------------------------------------

/// 128 CPUs with the D05's sparse MPIDRs (read from its DT: Aff2 = 1, 3,
/// 5, 7, four clusters of four in each) on socket 0 and the same pattern
/// with Aff3 = 1 on socket 1; GICv4 with the D05's four redistributor
/// regions (two above 4 GiB) and its eight ITSes; level-low timers.
#[test]
fn kunpeng_class_server_with_d05_mpidrs() {
    let d05 = Platform::parse(&common::fixture("hip07-d05.dtb")).unwrap();
    assert_eq!(d05.cpus.len(), 64);
    let mut mpidrs: Vec<u64> = d05.cpus.iter().map(|c| c.mpidr.value()).collect();
    mpidrs.extend(mpidrs.clone().iter().map(|m| m | 1 << 32));

    let mut structures = vec![gicd(d05.gic.distributor.base, 4)];
    for (uid, &mpidr) in mpidrs.iter().enumerate() {
        // Firmware may set bits outside the affinity fields (here the
        // MT bit 24 and RES1 bit 31 of MPIDR_EL1): they are masked off.
        structures.push(Gicc::new(uid as u32, mpidr | 1 << 31 | 1 << 24).bytes());
    }
    assert_eq!(d05.gic.redistributor_regions.len(), 4);
    for region in &d05.gic.redistributor_regions {
        structures.push(gicr(region.range.base, region.range.size as u32));
    }
    assert_eq!(d05.gic.its.len(), 8);
    for (id, its_range) in d05.gic.its.iter().enumerate() {
        structures.push(its(id as u32, its_range.base));
    }
    let low = TIMER_ACTIVE_LOW;
    let tables = vec![
        madt(&structures),
        gtdt(
            [(29, low), (30, low | TIMER_ALWAYS_ON), (27, low), (26, low)],
            None,
        ),
        fadt_with_oem(PSCI_COMPLIANT, b"HISI  ", b"HIP08   "),
        spcr(SPCR_16550, 0, 0x9408_0000, 1 << 3, 141),
    ];
    let ram = [
        MemRange::new(0x20_0000_0000, 64 * GIB),
        MemRange::new(0x0, 0x3000_0000),
        MemRange::new(0x2000_0000, 0x2000_0000), // overlaps the one above
        MemRange::new(0x10_0000_0000, 0),        // empty
    ];
    let reserved = [ReservedRegion {
        range: MemRange::new(0x3000_0000, 0x10_0000),
        name: String::from("EfiRuntimeServicesData"),
    }];
    let p = Platform::from_acpi(&slices(&tables), &ram, &reserved, None).unwrap();

    assert_eq!(p.model, "HISI HIP08");
    let got: Vec<u64> = p.cpus.iter().map(|c| c.mpidr.value()).collect();
    assert_eq!(got, mpidrs);
    // The ACPI path maps the D05's MPIDRs to the same values as its DT.
    let d05_mpidrs: Vec<Mpidr> = d05.cpus.iter().map(|c| c.mpidr).collect();
    let first: Vec<Mpidr> = p.cpus[..64].iter().map(|c| c.mpidr).collect();
    assert_eq!(first, d05_mpidrs);
    assert_eq!(p.cpus[127].mpidr, Mpidr::from_affinity(1, 7, 3, 3));
    assert_eq!(p.cpus[127].node, "MADT GICC[127]");

    assert_eq!(p.gic.distributor, d05.gic.distributor);
    // Same regions as the DT; ACPI has no stride, so the architectural
    // one (GICR_TYPER.VLPIS) applies, which is the DT's 0x40000 on a GICv4.
    let ranges = |p: &Platform| {
        p.gic
            .redistributor_regions
            .iter()
            .map(|r| r.range)
            .collect::<Vec<_>>()
    };
    assert_eq!(ranges(&p), ranges(&d05));
    assert!(
        p.gic
            .redistributor_regions
            .iter()
            .all(|r| r.stride.is_none())
    );
    assert_eq!(
        p.gic.redistributor_regions[3].range,
        MemRange::new(0x400_6d10_0000, 0x40_0000)
    );
    let bases = |its: &[MemRange]| its.iter().map(|r| r.base).collect::<Vec<_>>();
    assert_eq!(bases(&p.gic.its), bases(&d05.gic.its));
    assert!(p.gic.its.iter().all(|r| r.size == 0x2_0000));
    assert_eq!(p.gic.maintenance_irq, d05.gic.maintenance_irq);
    // Level-low timers, flags cell 8 as in the D05's DT.
    assert_eq!(p.timer, d05.timer);
    assert_eq!(p.psci.conduit, Conduit::Smc);

    // A 16550 console: headless, no error.
    assert_eq!(p.uart, None);
    assert_eq!(
        p.memory,
        [
            MemRange::new(0, 0x4000_0000),
            MemRange::new(0x20_0000_0000, 64 * GIB)
        ]
    );
    assert_eq!(p.reserved, reserved);
}

/// The D05's own firmware (edk2-platforms Hi1616 MadtHi1616.aslc and
/// D05Spcr.aslc) describes its redistributors with no GICR structure: GIC
/// version 4 and each GICC's GICR Base Address, 256 KiB apart within the
/// four regions its DT lists; its console is a PL011-type SPCR entry with
/// GSIV 807.
#[test]
fn d05_style_gicc_redistributors() {
    let d05 = Platform::parse(&common::fixture("hip07-d05.dtb")).unwrap();
    let mut structures = vec![gicd(0x4d00_0000, 4)];
    for (uid, cpu) in d05.cpus.iter().enumerate() {
        let m = cpu.mpidr;
        let chip_base: u64 = match m.aff(2) {
            1 => 0x4d10_0000,
            3 => 0x6d10_0000,
            5 => 0x400_4d10_0000,
            _ => 0x400_6d10_0000,
        };
        let mut gicc = Gicc::new(uid as u32, m.value());
        gicc.gicr_base = chip_base + (u64::from(m.aff(1)) * 4 + u64::from(m.aff(0))) * 0x4_0000;
        structures.push(gicc.bytes());
    }
    let mut tables = with_madt(&structures);
    tables[3] = spcr(SPCR_PL011, 0, 0x602b_0000, 1 << 3, 807);
    let p = ok(&tables);
    assert_eq!(p.cpus.len(), 64);
    assert_eq!(p.gic.redistributor_regions.len(), 64);
    // One 256 KiB frame per CPU, each inside one of the DT's regions,
    // together tiling them exactly.
    let mut covered = 0;
    for region in &p.gic.redistributor_regions {
        assert_eq!(region.range.size, 0x4_0000);
        assert!(
            d05.gic
                .redistributor_regions
                .iter()
                .any(|r| r.range.base <= region.range.base && region.range.end() <= r.range.end()),
            "{region:x?}"
        );
        covered += region.range.size;
    }
    let dt_total: u64 = d05
        .gic
        .redistributor_regions
        .iter()
        .map(|r| r.range.size)
        .sum();
    assert_eq!(covered, dt_total);
    // The SPCR's GSIV is taken as a GIC INTID (on the D05 it is really an
    // mbigen input; nothing uses the host console's interrupt).
    let uart = p.uart.unwrap();
    assert_eq!(uart.range, MemRange::new(0x602b_0000, 0x1000));
    assert_eq!(uart.irq.unwrap().intid(), 807);
}

#[test]
fn online_capable_and_disabled_cpus_are_left_out() {
    let mut structures = vec![gicd(0x0800_0000, 3), gicr(0x080a_0000, 0xf6_0000)];
    for (uid, flags) in [
        GICC_ENABLED,
        GICC_ONLINE_CAPABLE,
        0,
        GICC_ENABLED | GICC_MAINTENANCE_EDGE,
    ]
    .into_iter()
    .enumerate()
    {
        let mut gicc = Gicc::new(uid as u32, 0x100 + uid as u64);
        gicc.flags = flags;
        if flags & GICC_ENABLED == 0 {
            // Disabled entries are not checked against the others.
            gicc.mpidr = 0x100;
            gicc.maintenance_gsiv = 0;
        }
        structures.push(gicc.bytes());
    }
    let e = err(&with_madt(&structures));
    // The enabled ones must agree on the maintenance interrupt's mode.
    let text = assert_acpi_error(&e, "MADT", Some("GICC[3].VGIC Maintenance interrupt"));
    assert!(text.contains("GICC[0]"), "{text}");

    structures[5] = {
        let mut gicc = Gicc::new(3, 0x103);
        gicc.flags = GICC_ENABLED;
        gicc.bytes()
    };
    let p = ok(&with_madt(&structures));
    let nodes: Vec<&str> = p.cpus.iter().map(|c| c.node.as_str()).collect();
    assert_eq!(nodes, ["MADT GICC[0]", "MADT GICC[3]"]);
    assert_eq!(p.cpus[1].mpidr, Mpidr::from_raw(0x103));
}

// ---- redistributors -----------------------------------------------------------

/// Without GICR structures each GICC names its redistributor: one frame
/// per CPU, 128 KiB on a GICv3, 256 KiB on a GICv4.
#[test]
fn gicc_only_redistributors() {
    for (version, frame) in [(3, 0x2_0000), (4, 0x4_0000), (0, 0x2_0000)] {
        let mut structures = vec![gicd(0x0800_0000, version)];
        for i in 0..4u64 {
            let mut gicc = Gicc::new(i as u32, 0x1_0000 * i);
            gicc.gicr_base = 0x1000_0000 + i * 0x10_0000;
            structures.push(gicc.bytes());
        }
        let p = ok(&with_madt(&structures));
        let regions: Vec<RedistributorRegion> = (0..4u64)
            .map(|i| RedistributorRegion {
                range: MemRange::new(0x1000_0000 + i * 0x10_0000, frame),
                stride: None,
            })
            .collect();
        assert_eq!(p.gic.redistributor_regions, regions, "version {version}");
    }
}

#[test]
fn gicc_redistributors_must_be_given_and_disjoint() {
    let mut structures = vec![gicd(0x0800_0000, 3)];
    for i in 0..3u64 {
        let mut gicc = Gicc::new(i as u32, i);
        gicc.gicr_base = 0x1000_0000 + i * 0x2_0000;
        structures.push(gicc.bytes());
    }
    ok(&with_madt(&structures));

    // GICv4 frames are twice as large: neighbours now overlap.
    structures[0] = gicd(0x0800_0000, 4);
    let e = err(&with_madt(&structures));
    let text = assert_acpi_error(&e, "MADT", Some("GICC[1].GICR Base Address"));
    assert!(
        text.contains("overlap") && text.contains("GICC[0]"),
        "{text}"
    );

    structures[0] = gicd(0x0800_0000, 3);
    let mut gicc = Gicc::new(2, 2);
    gicc.gicr_base = 0;
    structures[3] = gicc.bytes();
    let e = err(&with_madt(&structures));
    assert_acpi_error(&e, "MADT", Some("GICC[2].GICR Base Address"));
    assert!(bad_value(&e).contains("no GICR structure"), "{e}");
}

#[test]
fn gicr_structures_are_checked() {
    let mut structures = vec![gicd(0x0800_0000, 3), gicr(0x080a_0000, 0)];
    structures.extend(cpus(2));
    let e = err(&with_madt(&structures));
    assert_acpi_error(&e, "MADT", Some("GICR[0].Discovery Range Length"));

    structures[1] = gicr(u64::MAX - 0xffff, 0x2_0000);
    let e = err(&with_madt(&structures));
    assert_acpi_error(&e, "MADT", Some("GICR[0].Discovery Range Base Address"));
    assert!(bad_value(&e).contains("address space"), "{e}");

    structures[1] = gicr(0x080a_0000, 0x40_0000);
    structures.push(gicr(0x084a_0000 - 0x2_0000, 0x2_0000));
    let e = err(&with_madt(&structures));
    assert_acpi_error(&e, "MADT", Some("GICR[1].Discovery Range Base Address"));
}

// ---- GIC versions ---------------------------------------------------------------

#[test]
fn gicv2_is_unsupported() {
    for version in [1, 2] {
        let mut structures = vec![gicd(0x0800_0000, version)];
        structures.extend(cpus(2));
        let e = err(&with_madt(&structures));
        let text = assert_acpi_error(&e, "MADT", Some("GICD[0].GIC version"));
        assert_eq!(
            unsupported(&e),
            format!("GICv{version}: this hypervisor needs a GICv3 or GICv4")
        );
        assert_eq!(
            text,
            format!(
                "ACPI table MADT, field \"GICD[0].GIC version\": unsupported: \
                 GICv{version}: this hypervisor needs a GICv3 or GICv4"
            )
        );
    }
    // The rejection comes first, even with a bad CPU list.
    let mut bad_cpu = Gicc::new(0, 0);
    bad_cpu.maintenance_gsiv = 99;
    let e = err(&with_madt(&[gicd(0x0800_0000, 2), bad_cpu.bytes()]));
    unsupported(&e);

    // Version 0 (ACPI 5.1, "not given") without any redistributor is a GICv2.
    let mut structures = vec![gicd(0x0800_0000, 0)];
    structures.extend(cpus(2));
    let e = err(&with_madt(&structures));
    assert_acpi_error(&e, "MADT", Some("GICD[0].GIC version"));
    assert!(unsupported(&e).contains("GICv2"), "{e}");
    // With a GICR structure it is a GICv3.
    structures.push(gicr(0x080a_0000, 0xf6_0000));
    ok(&with_madt(&structures));

    structures[0] = gicd(0x0800_0000, 5);
    let e = err(&with_madt(&structures));
    assert!(unsupported(&e).contains("unknown GIC version 5"), "{e}");
}

#[test]
fn exactly_one_distributor() {
    let mut structures = cpus(2);
    structures.push(gicr(0x080a_0000, 0xf6_0000));
    let e = err(&with_madt(&structures));
    assert_acpi_error(&e, "MADT", Some("GICD"));
    assert_eq!(e.kind, ErrorKind::MissingProperty);
    assert_eq!(e.to_string(), "ACPI table MADT, field \"GICD\": missing");

    structures.push(gicd(0x0800_0000, 3));
    structures.push(gicd(0x0900_0000, 3));
    let e = err(&with_madt(&structures));
    assert_acpi_error(&e, "MADT", Some("GICD[1].Type"));
}

// ---- CPUs -------------------------------------------------------------------------

#[test]
fn duplicate_mpidrs_name_both_gicc_structures() {
    let mut structures = vec![gicd(0x0800_0000, 3), gicr(0x080a_0000, 0xf6_0000)];
    for (uid, mpidr) in [0x0, 0x1, 0x1_0001, 0x3, 0x1_0001].into_iter().enumerate() {
        structures.push(Gicc::new(uid as u32, mpidr).bytes());
    }
    let e = err(&with_madt(&structures));
    let text = assert_acpi_error(&e, "MADT", Some("GICC[4].MPIDR"));
    assert_eq!(
        text,
        "ACPI table MADT, field \"GICC[4].MPIDR\": bad value: MPIDR 0.1.0.1 also used by GICC[2]"
    );
    // Bits outside the affinity fields do not make two MPIDRs different.
    structures[6] = Gicc::new(4, 0x1_0001 | 1 << 31).bytes();
    let e = err(&with_madt(&structures));
    assert_acpi_error(&e, "MADT", Some("GICC[4].MPIDR"));
}

#[test]
fn no_usable_cpu() {
    let base = vec![gicd(0x0800_0000, 3), gicr(0x080a_0000, 0xf6_0000)];
    let e = err(&with_madt(&base));
    assert_acpi_error(&e, "MADT", Some("GICC"));
    assert_eq!(e.kind, ErrorKind::MissingProperty);

    let mut structures = base.clone();
    let mut gicc = Gicc::new(0, 0);
    gicc.flags = GICC_ONLINE_CAPABLE;
    structures.push(gicc.bytes());
    let e = err(&with_madt(&structures));
    assert_acpi_error(&e, "MADT", Some("GICC"));
    assert!(bad_value(&e).contains("Enabled"), "{e}");
}

#[test]
fn the_maintenance_interrupt_is_one_ppi() {
    // Edge mode gives binding flags 1.
    let mut structures = vec![gicd(0x0800_0000, 3), gicr(0x080a_0000, 0xf6_0000)];
    for i in 0..2 {
        let mut gicc = Gicc::new(i, u64::from(i));
        gicc.flags |= GICC_MAINTENANCE_EDGE;
        structures.push(gicc.bytes());
    }
    let p = ok(&with_madt(&structures));
    assert_eq!(
        p.gic.maintenance_irq,
        Some(Interrupt::Ppi {
            number: 9,
            flags: 1
        })
    );

    // None when no CPU gives one.
    let mut quiet = structures.clone();
    for i in 0..2 {
        let mut gicc = Gicc::new(i, u64::from(i));
        gicc.maintenance_gsiv = 0;
        quiet[2 + i as usize] = gicc.bytes();
    }
    assert_eq!(ok(&with_madt(&quiet)).gic.maintenance_irq, None);

    // Another PPI on one CPU.
    let mut gicc = Gicc::new(1, 1);
    gicc.maintenance_gsiv = 26;
    structures[3] = gicc.bytes();
    let e = err(&with_madt(&structures));
    assert_acpi_error(&e, "MADT", Some("GICC[1].VGIC Maintenance interrupt"));
    assert!(bad_value(&e).contains("GSIV 26"), "{e}");

    // An SPI is not a maintenance interrupt.
    for gsiv in [15, 32, 1000] {
        let mut gicc = Gicc::new(0, 0);
        gicc.maintenance_gsiv = gsiv;
        let e = err(&with_madt(&[
            gicd(0x0800_0000, 3),
            gicr(0x080a_0000, 0xf6_0000),
            gicc.bytes(),
        ]));
        assert_acpi_error(&e, "MADT", Some("GICC[0].VGIC Maintenance interrupt"));
        assert!(bad_value(&e).contains("not a PPI"), "{e}");
    }
}

#[test]
fn short_gicc_structures_are_rejected() {
    // An ACPI 5.0 GICC (40 bytes) has no MPIDR.
    let mut short = Gicc::new(0, 0).bytes();
    short.truncate(40);
    short[1] = 40;
    let e = err(&with_madt(&[gicd(0x0800_0000, 3), short]));
    let text = assert_acpi_error(&e, "MADT", Some("GICC[0].Length"));
    assert!(text.contains("MPIDR"), "{text}");
    // The ACPI 5.1 76-byte structure is enough.
    let mut old = Gicc::new(0, 0x1234).bytes();
    old.truncate(76);
    old[1] = 76;
    let p = ok(&with_madt(&[
        gicd(0x0800_0000, 3),
        gicr(0x080a_0000, 0xf6_0000),
        old,
    ]));
    assert_eq!(p.cpus[0].mpidr, Mpidr::from_raw(0x1234));
}

#[test]
fn structures_must_fit_the_table() {
    let mut structures = vec![gicd(0x0800_0000, 3), gicr(0x080a_0000, 0xf6_0000)];
    structures.extend(cpus(1));
    // A zero Length would never advance (the GICD, GICR and GICC fill
    // 0x2c..0xa6).
    structures.push(vec![0x0b, 0]);
    let e = err(&with_madt(&structures));
    let text = assert_acpi_error(&e, "MADT", Some("structure at offset 0xa6"));
    assert!(text.contains("Length 0"), "{text}");
    // A Length past the table's end.
    *structures.last_mut().unwrap() = vec![0x0b, 82, 0, 0];
    let e = err(&with_madt(&structures));
    assert!(bad_value(&e).contains("runs past the end"), "{e}");
    // A lone Type byte at the end.
    *structures.last_mut().unwrap() = vec![0x0b];
    let e = err(&with_madt(&structures));
    assert!(bad_value(&e).contains("ends inside"), "{e}");
}

// ---- timer ------------------------------------------------------------------------

#[test]
fn timer_flags_and_revisions() {
    let ppi = |number, flags| Interrupt::Ppi { number, flags };
    let mut tables = qemu_like(1);
    tables[1] = gtdt(
        [
            (0, 0),
            (30, TIMER_EDGE),
            (27, TIMER_EDGE | TIMER_ACTIVE_LOW),
            (26, TIMER_ACTIVE_LOW | TIMER_ALWAYS_ON),
        ],
        Some((28, 0)),
    );
    let t = ok(&tables).timer;
    // Secure EL1 not given: the BSA's PPI 13 (INTID 29).
    assert_eq!(t.secure_phys, ppi(13, 4));
    assert_eq!(t.nonsecure_phys, ppi(14, 1));
    assert_eq!(t.virt, ppi(11, 2));
    assert_eq!(t.hyp_phys, ppi(10, 8));
    assert_eq!(t.hyp_virt, Some(ppi(12, 4)));
    assert_eq!(t.clock_frequency, None);

    // Revision 3 with the virtual EL2 timer left out.
    tables[1] = gtdt(QEMU_TIMERS, Some((0, 0)));
    assert_eq!(ok(&tables).timer.hyp_virt, None);

    // Revision 3 that stops before the virtual EL2 timer.
    let mut short = gtdt(QEMU_TIMERS, None);
    short[8] = 3;
    fix_checksum(&mut short);
    tables[1] = short;
    let e = err(&tables);
    let text = assert_acpi_error(&e, "GTDT", Some("Length"));
    assert!(text.contains("Virtual EL2 Timer Flags"), "{text}");
}

#[test]
fn timer_interrupts_must_be_ppis() {
    let mut tables = qemu_like(1);
    for (at, field) in [
        (1, "Non-Secure EL1 Timer GSIV"),
        (2, "Virtual EL1 Timer GSIV"),
        (3, "EL2 Timer GSIV"),
    ] {
        let mut timers = QEMU_TIMERS;
        timers[at] = (0, 0);
        tables[1] = gtdt(timers, None);
        let e = err(&tables);
        assert_acpi_error(&e, "GTDT", Some(field));
        assert!(bad_value(&e).contains("no interrupt"), "{e}");
        timers[at] = (40, 0);
        tables[1] = gtdt(timers, None);
        let e = err(&tables);
        assert_acpi_error(&e, "GTDT", Some(field));
        assert!(bad_value(&e).contains("GSIV 40 is not a PPI"), "{e}");
    }
    let mut timers = QEMU_TIMERS;
    timers[0] = (12, 0);
    tables[1] = gtdt(timers, None);
    let e = err(&tables);
    assert_acpi_error(&e, "GTDT", Some("Secure EL1 Timer GSIV"));
}

// ---- console --------------------------------------------------------------------

#[test]
fn console_interface_types() {
    let mut tables = qemu_like(1);
    for interface in [SPCR_PL011, SPCR_SBSA_32BIT, SPCR_SBSA] {
        tables[3] = spcr(interface, 0, 0x6000_0000, 1 << 3, 32 + 100);
        let uart = ok(&tables).uart.expect("a PL011-compatible console");
        assert_eq!(uart.kind, UartKind::Pl011);
        assert_eq!(uart.range, MemRange::new(0x6000_0000, 0x1000));
        assert_eq!(
            uart.irq,
            Some(Interrupt::Spi {
                number: 100,
                flags: 4
            })
        );
    }
    // Consoles the hypervisor cannot drive: headless, no error.
    for table in [
        spcr(SPCR_16550, 0, 0x6000_0000, 1 << 3, 33), // 16550
        spcr(0x12, 0, 0x6000_0000, 1 << 3, 33),       // 16550 via GAS
        spcr(SPCR_PL011, 1, 0x3f8, 1 << 3, 33),       // I/O port space
        spcr(SPCR_PL011, 0, 0, 1 << 3, 33),           // redirection off
    ] {
        tables[3] = table;
        assert_eq!(ok(&tables).uart, None);
    }
    // No SPCR at all.
    tables.remove(3);
    assert_eq!(ok(&tables).uart, None);
}

#[test]
fn console_interrupts() {
    let mut tables = qemu_like(1);
    // Polled (GSIV 0), or not a GIC interrupt.
    for table in [
        spcr(SPCR_PL011, 0, 0x0900_0000, 1 << 3, 0),
        spcr(SPCR_PL011, 0, 0x0900_0000, 1 << 0, 33),
    ] {
        tables[3] = table;
        let uart = ok(&tables).uart.unwrap();
        assert_eq!(uart.irq, None);
    }
    for gsiv in [16, 31, 1020, 5000] {
        tables[3] = spcr(SPCR_PL011, 0, 0x0900_0000, 1 << 3, gsiv);
        let e = err(&tables);
        let text = assert_acpi_error(&e, "SPCR", Some("GSIV"));
        assert!(text.contains("not a shared peripheral interrupt"), "{text}");
    }
    tables[3] = spcr(SPCR_PL011, 0, u64::MAX - 0x10, 1 << 3, 33);
    let e = err(&tables);
    assert_acpi_error(&e, "SPCR", Some("Base Address"));
}

// ---- PSCI -------------------------------------------------------------------------

#[test]
fn psci_conduit_from_the_fadt() {
    let mut tables = qemu_like(1);
    tables[2] = fadt(PSCI_COMPLIANT | PSCI_USE_HVC);
    let psci = ok(&tables).psci;
    assert_eq!(psci.conduit, Conduit::Hvc);
    assert_eq!(psci.version, (1, 0));

    tables[2] = fadt(PSCI_USE_HVC);
    let e = err(&tables);
    let text = assert_acpi_error(&e, "FADT", Some("ARM_BOOT_ARCH"));
    assert!(unsupported(&e).contains("PSCI_COMPLIANT"), "{e}");
    assert!(text.starts_with("ACPI table FADT, field \"ARM_BOOT_ARCH\": unsupported:"));

    // An FADT too short to have ARM_BOOT_ARCH (before ACPI 5.1: 116 bytes).
    tables[2] = table(b"FACP", 3, &[0; 116 - 36]);
    let e = err(&tables);
    assert_acpi_error(&e, "FADT", Some("ARM_BOOT_ARCH"));
    assert_eq!(e.kind, ErrorKind::MissingProperty);
}

#[test]
fn model_from_the_fadt_oem_ids() {
    let mut tables = qemu_like(1);
    tables[2] = fadt_with_oem(PSCI_COMPLIANT, b"HISI  ", b"HIP08   ");
    assert_eq!(ok(&tables).model, "HISI HIP08");
    tables[2] = fadt_with_oem(PSCI_COMPLIANT, b"AB\0\0\0\0", b"\x01xy\0\0\0\0\0");
    assert_eq!(ok(&tables).model, "AB ?xy");
    tables[2] = fadt_with_oem(PSCI_COMPLIANT, b"      ", b"        ");
    assert_eq!(ok(&tables).model, "");
}

// ---- tables -----------------------------------------------------------------------

#[test]
fn required_tables() {
    for (at, name) in [(0, "MADT"), (1, "GTDT"), (2, "FADT")] {
        let mut tables = qemu_like(2);
        tables.remove(at);
        let e = err(&tables);
        let text = assert_acpi_error(&e, name, None);
        assert_eq!(e.kind, ErrorKind::MissingNode);
        assert_eq!(text, format!("ACPI table {name}: table missing"));
    }
    let e = Platform::from_acpi(&[], &RAM, &[], None).unwrap_err();
    assert_acpi_error(&e, "MADT", None);
}

#[test]
fn header_checks_name_the_table() {
    let tables = qemu_like(2);
    ok(&tables);

    // Checksum.
    let mut bad = tables.clone();
    bad[1][40] ^= 0x10; // 0xff -> 0xef
    let e = err(&bad);
    let text = assert_acpi_error(&e, "GTDT", Some("Checksum"));
    assert_eq!(
        text,
        "ACPI table GTDT, field \"Checksum\": bad value: the table's 96 bytes sum to 0xf0, \
         not 0: the table is corrupt"
    );

    // Truncated: fewer bytes than Length.
    let mut bad = tables.clone();
    bad[0].pop();
    let e = err(&bad);
    assert_acpi_error(&e, "MADT", Some("Length"));
    assert!(bad_value(&e).contains("truncated"), "{e}");

    // Length shorter than the header.
    let mut bad = tables.clone();
    bad[3][4..8].copy_from_slice(&35u32.to_le_bytes());
    let e = err(&bad);
    assert_acpi_error(&e, "SPCR", Some("Length"));

    // Fewer bytes than the header.
    let mut bad = tables.clone();
    bad[2].truncate(20);
    let e = err(&bad);
    assert_acpi_error(&e, "FADT", Some("Length"));

    // Bytes past Length are not part of the table.
    let mut longer = tables.clone();
    longer[0].extend_from_slice(&[0xff; 7]);
    assert_eq!(ok(&longer), ok(&tables));
}

#[test]
fn tables_read_appear_once_and_others_are_ignored() {
    let mut tables = qemu_like(2);
    tables.push(qemu_madt(3));
    let e = err(&tables);
    let text = assert_acpi_error(&e, "MADT", Some("Signature"));
    assert!(
        text.contains("tables[4]") && text.contains("tables[0]"),
        "{text}"
    );

    let mut tables = qemu_like(2);
    let expected = ok(&tables);
    // Unknown signatures, however broken, and slices too short to have one.
    tables.insert(0, b"DSDT\x01".to_vec());
    tables.push(table(b"SSDT", 2, &[1, 2, 3]));
    tables.push(table(b"SSDT", 2, &[4, 5, 6]));
    tables.push(vec![]);
    tables.push(b"AP".to_vec());
    assert_eq!(ok(&tables), expected);
}

// ---- memory ---------------------------------------------------------------------------

#[test]
fn ram_is_sorted_and_merged() {
    let tables = qemu_like(1);
    let ram = [
        MemRange::new(0x8000_0000, 0x1000),
        MemRange::new(0x4000_0000, 0x1000_0000),
        MemRange::new(0x5000_0000, 0x1000_0000), // adjacent
        MemRange::new(0x4800_0000, 0x100),       // inside
        MemRange::new(0x9000_0000, 0),
    ];
    let p = Platform::from_acpi(&slices(&tables), &ram, &[], None).unwrap();
    assert_eq!(
        p.memory,
        [
            MemRange::new(0x4000_0000, 0x2000_0000),
            MemRange::new(0x8000_0000, 0x1000)
        ]
    );

    let e = Platform::from_acpi(&slices(&tables), &[MemRange::new(0, 0)], &[], None).unwrap_err();
    assert_eq!(e.node, "UEFI memory map");
    assert_eq!(e.property.as_deref(), Some("ram"));
    assert_eq!(e.origin(), ErrorOrigin::MemoryMap);
    assert_eq!(
        e.to_string(),
        "UEFI memory map, field \"ram\": bad value: no RAM: the 1 ranges given are all empty"
    );

    let ram = [RAM[0], MemRange::new(u64::MAX - 0xfff, 0x2000)];
    let e = Platform::from_acpi(&slices(&tables), &ram, &[], None).unwrap_err();
    assert_eq!(e.property.as_deref(), Some("ram[1]"));
    assert!(bad_value(&e).contains("address space"), "{e}");
}

// ---- the VM description ---------------------------------------------------------------

/// A device tree with nothing but `/chosen`: bootargs and VM nodes.
fn chosen_only(vms: Vec<Node>) -> Vec<u8> {
    let mut chosen = Node::new("chosen").prop("bootargs", string("loglevel=debug"));
    chosen.children = vms;
    Node::new("")
        .prop("#address-cells", cells(&[2]))
        .prop("#size-cells", cells(&[2]))
        .child(chosen)
        .to_dtb(&[])
}

fn vm_node(name: &str, affinity: &[u32]) -> Node {
    let pair = |a: u64, b: u64| [a, b].iter().flat_map(|v| v.to_be_bytes()).collect();
    Node::new(&format!("vm@{name}"))
        .prop("compatible", string(VM_COMPATIBLE))
        .prop("vcpus", cells(&[4]))
        .prop("memory", (256u64 << 20).to_be_bytes().to_vec())
        .prop("kernel", pair(0x4800_0000, 0x80_0000))
        .prop("cpu-affinity", cells(affinity))
}

#[test]
fn vm_description_from_a_chosen_only_tree() {
    let dtb = chosen_only(vec![vm_node("0", &[0, 1]), vm_node("1", &[0, 5])]);

    // On its own the tree does not know the host's CPUs.
    let (bootargs, vms) = vms_from_dt(&dtb).unwrap();
    assert_eq!(bootargs, "loglevel=debug");
    assert_eq!(vms.len(), 2);
    assert!(vms.iter().all(Result::is_ok), "{vms:?}");
    assert_eq!(vms[0].as_ref().unwrap().name, "vm0");

    // from_acpi bounds cpu-affinity by the MADT's 2 CPUs.
    let tables = qemu_like(2);
    let p = Platform::from_acpi(&slices(&tables), &RAM, &[], Some(&dtb)).unwrap();
    assert_eq!(p.bootargs, "loglevel=debug");
    assert_eq!(p.vms.len(), 2);
    let vm0 = p.vms[0].as_ref().unwrap();
    assert_eq!(vm0.cpu_affinity.as_deref(), Some(&[0, 1][..]));
    let e = p.vms[1].as_ref().unwrap_err();
    assert_eq!(e.node, "/chosen/vm@1");
    assert_eq!(e.property.as_deref(), Some("cpu-affinity"));
    assert_eq!(e.origin(), ErrorOrigin::DeviceTree);
    assert!(
        e.to_string().starts_with("device tree node /chosen/vm@1"),
        "{e}"
    );

    // A tree without /chosen: no bootargs, no VMs.
    let empty = Node::new("").to_dtb(&[]);
    assert_eq!(vms_from_dt(&empty).unwrap(), (String::new(), vec![]));

    // Not a device tree at all: the whole call fails, naming the blob.
    let e = Platform::from_acpi(&slices(&tables), &RAM, &[], Some(b"not a dtb")).unwrap_err();
    assert_eq!(e.node, "/");
    assert!(matches!(e.kind, ErrorKind::BadBlob(_)), "{e}");
    assert!(vms_from_dt(b"not a dtb").is_err());
}

// ---- rescue -----------------------------------------------------------------------------

#[test]
fn rescue_reads_each_table_on_its_own() {
    let mut tables = qemu_like(2);
    tables[0][50] ^= 1; // MADT checksum broken
    tables[2] = fadt(PSCI_COMPLIANT | PSCI_USE_HVC);
    assert!(build(&tables).is_err());
    let r = acpi::rescue(&slices(&tables));
    let console = r.console.unwrap();
    assert_eq!(console.range, MemRange::new(0x0900_0000, 0x1000));
    assert_eq!(console.irq, None);
    assert_eq!(r.psci_conduit, Some(Conduit::Hvc));

    // A broken SPCR loses the console only.
    tables[3][60] ^= 1;
    let r = acpi::rescue(&slices(&tables));
    assert_eq!(r.console, None);
    assert_eq!(r.psci_conduit, Some(Conduit::Hvc));

    // An FADT without PSCI loses the conduit only.
    let mut tables = qemu_like(2);
    tables[2] = fadt(0);
    let r = acpi::rescue(&slices(&tables));
    assert!(r.console.is_some());
    assert_eq!(r.psci_conduit, None);

    assert_eq!(acpi::rescue(&[]), platform::Rescue::default());
}

// ---- NUMA -------------------------------------------------------------------------------

#[test]
fn numa_from_a_built_srat() {
    let mut tables = qemu_like(4);
    tables.push(srat(&[
        gicc_affinity(7, 0, 1),
        gicc_affinity(7, 1, 1),
        gicc_affinity(2, 2, 1),
        gicc_affinity(2, 3, 0),  // disabled: ignored
        gicc_affinity(2, 99, 1), // no such CPU: ignored
        memory_affinity(7, 0x8000_0000, GIB, 1),
        memory_affinity(2, 0x4000_0000, GIB, 1),
        memory_affinity(7, 0x4000_0000, GIB, 0), // disabled: ignored
        memory_affinity(7, 0x10_0000_0000, 0, 1), // empty: ignored
        memory_affinity(7, 0x8000_0000, 0x1000, 1), // same domain: may overlap
        vec![0x04, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], // GIC ITS affinity: ignored
    ]));
    // from_acpi does not read the SRAT.
    let p = ok(&tables);
    assert_eq!(p.cpus.len(), 4);

    let nodes = acpi::numa(&slices(&tables)).unwrap();
    assert_eq!(
        nodes,
        [
            NumaNode {
                proximity_domain: 2,
                cpus: vec![Mpidr::from_raw(2)],
                memory: vec![MemRange::new(0x4000_0000, GIB)],
            },
            NumaNode {
                proximity_domain: 7,
                cpus: vec![Mpidr::from_raw(0), Mpidr::from_raw(1)],
                memory: vec![
                    MemRange::new(0x8000_0000, 0x1000),
                    MemRange::new(0x8000_0000, GIB)
                ],
            },
        ]
    );
}

#[test]
fn numa_errors() {
    let with_srat = |structures: &[Vec<u8>]| {
        let mut tables = qemu_like(4);
        tables.push(srat(structures));
        acpi::numa(&slices(&tables))
    };
    let e = with_srat(&[gicc_affinity(0, 1, 1), gicc_affinity(1, 1, 1)]).unwrap_err();
    let text = assert_acpi_error(&e, "SRAT", Some("GICC Affinity[1].ACPI Processor UID"));
    assert!(text.contains("GICC Affinity[0]"), "{text}");

    // Memory of two domains overlapping, found however the ranges nest.
    let e = with_srat(&[
        memory_affinity(0, 0x4000_0000, 4 * GIB, 1),
        memory_affinity(0, 0x5000_0000, 0x1000, 1),
        memory_affinity(1, 0x1_0000_0000, 0x1000, 1),
    ])
    .unwrap_err();
    let text = assert_acpi_error(&e, "SRAT", Some("Memory Affinity[2].Base Address"));
    assert!(text.contains("Memory Affinity[0]"), "{text}");

    let mut short = memory_affinity(0, 0, GIB, 1);
    short.truncate(24);
    short[1] = 24;
    let e = with_srat(&[short]).unwrap_err();
    assert_acpi_error(&e, "SRAT", Some("Memory Affinity[0].Length"));

    // The MADT is needed to know the CPUs.
    let mut tables = qemu_like(4);
    tables.push(srat(&[gicc_affinity(0, 0, 1)]));
    tables.remove(0);
    let e = acpi::numa(&slices(&tables)).unwrap_err();
    assert_acpi_error(&e, "MADT", None);
}

// ---- error display ---------------------------------------------------------------------

#[test]
fn error_origin_and_display() {
    let dt = PlatformError {
        node: String::from("/intc@8000000"),
        property: Some(String::from("reg")),
        kind: ErrorKind::MissingProperty,
    };
    assert_eq!(dt.origin(), ErrorOrigin::DeviceTree);
    assert_eq!(
        dt.to_string(),
        "device tree node /intc@8000000, property \"reg\": property missing"
    );
    let acpi = PlatformError {
        node: format!("{}MADT", acpi::NODE_PREFIX),
        property: Some(String::from("GICC[3].MPIDR")),
        kind: ErrorKind::BadValue(String::from("x")),
    };
    assert_eq!(acpi.origin(), ErrorOrigin::Acpi);
    assert_eq!(
        acpi.to_string(),
        "ACPI table MADT, field \"GICC[3].MPIDR\": bad value: x"
    );
    let map = PlatformError {
        node: String::from(acpi::MEMORY_MAP_NODE),
        property: None,
        kind: ErrorKind::Unsupported(String::from("y")),
    };
    assert_eq!(map.origin(), ErrorOrigin::MemoryMap);
    assert_eq!(map.to_string(), "UEFI memory map: unsupported: y");
}
