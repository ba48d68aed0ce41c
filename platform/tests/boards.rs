//! Real board device trees (Debian's linux-image-6.1 arm64 DTBs): the
//! values asserted here are the ones `dtc -I dtb -O dts` shows.

mod common;

use common::fixture;
use platform::{
    Conduit, EnableMethod, ErrorKind, Interrupt, MemRange, Mpidr, Platform, RedistributorRegion,
    blob_size,
};

fn parse(name: &str) -> Platform {
    let blob = fixture(name);
    assert_eq!(blob_size(&blob).unwrap(), blob.len(), "{name}: totalsize");
    Platform::parse(&blob).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn mpidrs(platform: &Platform) -> Vec<u64> {
    platform.cpus.iter().map(|c| c.mpidr.value()).collect()
}

const fn ppi(number: u32, flags: u32) -> Interrupt {
    Interrupt::Ppi { number, flags }
}

const fn region(base: u64, size: u64, stride: Option<u64>) -> RedistributorRegion {
    RedistributorRegion {
        range: MemRange::new(base, size),
        stride,
    }
}

#[test]
fn hip07_d05() {
    let p = parse("hip07-d05.dtb");
    assert_eq!(p.model, "Hisilicon Hip07 D05 Development Board");

    // Every cpu@ node's reg, in DT order, as dtc prints them: four
    // clusters of four cores in each of Aff2 = 1, 3, 5, 7.
    #[rustfmt::skip]
    let expected: [u64; 64] = [
        0x10000, 0x10001, 0x10002, 0x10003, 0x10100, 0x10101, 0x10102, 0x10103,
        0x10200, 0x10201, 0x10202, 0x10203, 0x10300, 0x10301, 0x10302, 0x10303,
        0x30000, 0x30001, 0x30002, 0x30003, 0x30100, 0x30101, 0x30102, 0x30103,
        0x30200, 0x30201, 0x30202, 0x30203, 0x30300, 0x30301, 0x30302, 0x30303,
        0x50000, 0x50001, 0x50002, 0x50003, 0x50100, 0x50101, 0x50102, 0x50103,
        0x50200, 0x50201, 0x50202, 0x50203, 0x50300, 0x50301, 0x50302, 0x50303,
        0x70000, 0x70001, 0x70002, 0x70003, 0x70100, 0x70101, 0x70102, 0x70103,
        0x70200, 0x70201, 0x70202, 0x70203, 0x70300, 0x70301, 0x70302, 0x70303,
    ];
    assert_eq!(p.cpus.len(), 64);
    assert_eq!(mpidrs(&p), expected);
    for cpu in &p.cpus {
        assert_eq!(cpu.enable_method, EnableMethod::Psci, "{}", cpu.node);
        assert_eq!(cpu.node, format!("/cpus/cpu@{:x}", cpu.mpidr.value()));
    }
    let last = p.cpus[63].mpidr;
    assert_eq!(
        (last.aff(3), last.aff(2), last.aff(1), last.aff(0)),
        (0, 7, 3, 3)
    );
    assert_eq!(
        p.cpu_by_mpidr(Mpidr::from_affinity(0, 3, 2, 1))
            .map(|(i, _)| i),
        Some(25)
    );

    assert_eq!(p.gic.distributor, MemRange::new(0x4d00_0000, 0x1_0000));
    assert_eq!(
        p.gic.redistributor_regions,
        [
            region(0x4d10_0000, 0x40_0000, Some(0x4_0000)),
            region(0x6d10_0000, 0x40_0000, Some(0x4_0000)),
            region(0x400_4d10_0000, 0x40_0000, Some(0x4_0000)),
            region(0x400_6d10_0000, 0x40_0000, Some(0x4_0000)),
        ]
    );
    let its: Vec<u64> = p.gic.its.iter().map(|r| r.base).collect();
    assert_eq!(
        its,
        [
            0x4c00_0000,
            0x6c00_0000,
            0xc600_0000,
            0x8_c600_0000,
            0x400_4c00_0000,
            0x400_6c00_0000,
            0x400_c600_0000,
            0x408_c600_0000
        ]
    );
    assert!(p.gic.its.iter().all(|r| r.size == 0x4_0000));
    assert_eq!(p.gic.maintenance_irq, Some(ppi(9, 4)));

    // interrupts = <1 13 8>, <1 14 8>, <1 11 8>, <1 10 8>.
    assert_eq!(p.timer.secure_phys, ppi(13, 8));
    assert_eq!(p.timer.nonsecure_phys, ppi(14, 8));
    assert_eq!(p.timer.virt, ppi(11, 8));
    assert_eq!(p.timer.hyp_phys, ppi(10, 8));
    assert_eq!(p.timer.hyp_phys.intid(), 26);
    assert_eq!(p.timer.hyp_virt, None);
    assert_eq!(p.timer.clock_frequency, None);

    assert_eq!(p.psci.conduit, Conduit::Smc);
    assert_eq!(p.psci.version, (0, 2));
    assert_eq!(p.memory, [MemRange::new(0, 0x4000_0000)]);
    assert!(p.reserved.is_empty());
    // The console is an "arm,sbsa-uart" behind an mbigen, not a PL011.
    assert_eq!(p.uart, None);
    assert_eq!(p.bootargs, "");
}

#[test]
fn hip06_d03() {
    let p = parse("hip06-d03.dtb");
    assert_eq!(p.model, "Hisilicon Hip06 D03 Development Board");
    #[rustfmt::skip]
    let expected: [u64; 16] = [
        0x10000, 0x10001, 0x10002, 0x10003, 0x10100, 0x10101, 0x10102, 0x10103,
        0x10200, 0x10201, 0x10202, 0x10203, 0x10300, 0x10301, 0x10302, 0x10303,
    ];
    assert_eq!(mpidrs(&p), expected);
    assert_eq!(p.gic.distributor, MemRange::new(0x4d00_0000, 0x1_0000));
    assert_eq!(
        p.gic.redistributor_regions,
        [region(0x4d10_0000, 0x30_0000, Some(0x3_0000))]
    );
    assert_eq!(p.gic.its, [MemRange::new(0xc600_0000, 0x4_0000)]);
    assert_eq!(p.gic.maintenance_irq, Some(ppi(9, 4)));
    assert_eq!(p.timer.hyp_phys, ppi(10, 8));
    assert_eq!(p.psci.conduit, Conduit::Smc);
    assert_eq!(p.psci.version, (0, 2));
    assert_eq!(p.memory, [MemRange::new(0, 0x4000_0000)]);
    // Only an ns16550a on the LPC bus: no PL011.
    assert_eq!(p.uart, None);
}

#[test]
fn thunder2_99xx() {
    let p = parse("thunder2-99xx.dtb");
    assert_eq!(p.model, "Cavium ThunderX2 CN99XX");
    assert_eq!(mpidrs(&p), [0, 1, 2, 3]);
    assert_eq!(p.gic.distributor, MemRange::new(0x4_0008_0000, 0x2_0000));
    assert_eq!(
        p.gic.redistributor_regions,
        [region(0x4_0100_0000, 0x100_0000, None)]
    );
    assert_eq!(p.gic.its, [MemRange::new(0x4_0010_0000, 0x2_0000)]);
    assert_eq!(
        p.memory,
        [
            MemRange::new(0x8000_0000, 0x8000_0000),
            MemRange::new(0x8_8000_0000, 0x8000_0000)
        ]
    );
    assert_eq!(p.timer.nonsecure_phys, ppi(14, 4));
    assert_eq!(p.timer.hyp_phys, ppi(10, 4));
    assert_eq!((p.psci.conduit, p.psci.version), (Conduit::Smc, (0, 2)));
    // stdout-path = "serial0:115200n8", serial0 = "/soc/serial@402020000".
    let uart = p.uart.expect("console");
    assert_eq!(uart.node, "/soc/serial@402020000");
    assert_eq!(uart.range, MemRange::new(0x4_0202_0000, 0x1000));
    assert_eq!(
        uart.irq,
        Some(Interrupt::Spi {
            number: 0x31,
            flags: 4
        })
    );
    assert_eq!(uart.irq.unwrap().intid(), 81);
}

#[test]
fn fvp_base_revc() {
    let p = parse("fvp-base-revc.dtb");
    assert_eq!(p.model, "FVP Base RevC");
    assert_eq!(
        mpidrs(&p),
        [
            0, 0x100, 0x200, 0x300, 0x1_0000, 0x1_0100, 0x1_0200, 0x1_0300
        ]
    );
    assert_eq!(p.gic.distributor, MemRange::new(0x2f00_0000, 0x1_0000));
    assert_eq!(
        p.gic.redistributor_regions,
        [region(0x2f10_0000, 0x20_0000, None)]
    );
    assert_eq!(p.gic.its, [MemRange::new(0x2f02_0000, 0x2_0000)]);
    assert_eq!(
        p.memory,
        [
            MemRange::new(0x8000_0000, 0x8000_0000),
            MemRange::new(0x8_8000_0000, 0x8000_0000)
        ]
    );
    let reserved: Vec<(MemRange, &str)> = p
        .reserved
        .iter()
        .map(|r| (r.range, r.name.as_str()))
        .collect();
    assert_eq!(
        reserved,
        [
            (MemRange::new(0x8000_0000, 0x1_0000), "/memreserve/"),
            (MemRange::new(0x1800_0000, 0x80_0000), "vram@18000000"),
        ]
    );
    // Empty /chosen: the first PL011, three buses deep. Its address goes
    // through three `ranges` (0x90000 -> 3:0x90000 -> 0x1c090000) and its
    // interrupt <5> through bus@8000000's interrupt-map to GIC SPI 5.
    let uart = p.uart.expect("console");
    assert_eq!(
        uart.node,
        "/bus@8000000/motherboard-bus@8000000/iofpga-bus@300000000/serial@90000"
    );
    assert_eq!(uart.range, MemRange::new(0x1c09_0000, 0x1000));
    assert_eq!(
        uart.irq,
        Some(Interrupt::Spi {
            number: 5,
            flags: 4
        })
    );
    assert_eq!(p.timer.hyp_phys, ppi(10, 8));
    assert_eq!((p.psci.conduit, p.psci.version), (Conduit::Smc, (0, 2)));
}

#[test]
fn juno_r2_is_rejected_as_gicv2() {
    let blob = fixture("juno-r2.dtb");
    assert_eq!(blob_size(&blob).unwrap(), blob.len());
    let err = Platform::parse(&blob).unwrap_err();
    assert_eq!(err.node, "/interrupt-controller@2c010000");
    assert_eq!(err.property.as_deref(), Some("compatible"));
    let ErrorKind::Unsupported(why) = &err.kind else {
        panic!("expected Unsupported, got {err}");
    };
    assert!(why.contains("\"arm,gic-400\""), "{why}");
    assert!(why.contains("requires a GICv3"), "{why}");
    let text = err.to_string();
    assert!(
        text.starts_with("device tree node /interrupt-controller@2c010000"),
        "{text}"
    );
}
