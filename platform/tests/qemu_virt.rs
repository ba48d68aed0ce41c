//! QEMU 7.2 `virt` (gic-version=3, virtualization=on) DTB dumps; see
//! fixtures/README.md for the commands.

mod common;

use common::fixture;
use platform::{
    Conduit, EnableMethod, Interrupt, MemRange, Mpidr, Platform, RedistributorRegion, blob_size,
};

/// QEMU pads its dumps: totalsize is 1 MiB.
const QEMU_TOTALSIZE: usize = 0x10_0000;

fn parse(name: &str) -> Platform {
    let blob = fixture(name);
    assert_eq!(blob_size(&blob).unwrap(), QEMU_TOTALSIZE, "{name}");
    Platform::parse(&blob).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// QEMU's virt board numbers CPU `i` as Aff1 = i / 16, Aff0 = i % 16 with
/// a GICv3 (hw/arm/virt.c virt_cpu_mp_affinity); `-smp clusters=` only
/// shows in cpu-map, not in the MPIDR.
fn qemu_mpidrs(count: u64) -> Vec<u64> {
    (0..count).map(|i| ((i / 16) << 8) | (i % 16)).collect()
}

/// What every virt dump here shares.
fn check_common(p: &Platform) {
    assert_eq!(p.model, "linux,dummy-virt");
    assert_eq!(p.memory, [MemRange::new(0x4000_0000, 0x4000_0000)]);
    assert!(p.reserved.is_empty());

    assert_eq!(p.gic.distributor, MemRange::new(0x0800_0000, 0x1_0000));
    assert_eq!(
        p.gic.redistributor_regions[0],
        RedistributorRegion {
            range: MemRange::new(0x080a_0000, 0xf6_0000),
            stride: None
        }
    );
    assert_eq!(p.gic.its, [MemRange::new(0x0808_0000, 0x2_0000)]);
    assert_eq!(
        p.gic.maintenance_irq,
        Some(Interrupt::Ppi {
            number: 9,
            flags: 4
        })
    );

    let uart = p.uart.as_ref().expect("console");
    assert_eq!(uart.node, "/pl011@9000000");
    assert_eq!(uart.range, MemRange::new(0x0900_0000, 0x1000));
    assert_eq!(
        uart.irq,
        Some(Interrupt::Spi {
            number: 1,
            flags: 4
        })
    );
    assert_eq!(uart.irq.unwrap().intid(), 33);
    // QEMU virt's PL031 (hw/arm/virt.c VIRT_RTC).
    assert_eq!(p.rtc, Some(MemRange::new(0x0901_0000, 0x1000)));

    // interrupts = <1 13 4>, <1 14 4>, <1 11 4>, <1 10 4>.
    let t = &p.timer;
    let intids = [t.secure_phys, t.nonsecure_phys, t.virt, t.hyp_phys].map(|i| i.intid());
    assert_eq!(intids, [29, 30, 27, 26]);
    assert_eq!(
        t.hyp_phys,
        Interrupt::Ppi {
            number: 10,
            flags: 4
        }
    );
    assert_eq!(t.hyp_virt, None);
    assert_eq!(t.clock_frequency, None);

    // virtualization=on puts PSCI at EL3: smc.
    assert_eq!(p.psci.conduit, Conduit::Smc);
    assert_eq!(p.psci.version, (1, 0));
}

fn check_cpus(p: &Platform, count: u64) {
    let mpidrs: Vec<u64> = p.cpus.iter().map(|c| c.mpidr.value()).collect();
    assert_eq!(mpidrs, qemu_mpidrs(count));
    // With a single CPU QEMU writes no enable-method (nothing to start).
    let method = if count == 1 {
        EnableMethod::None
    } else {
        EnableMethod::Psci
    };
    for (i, cpu) in p.cpus.iter().enumerate() {
        assert_eq!(cpu.enable_method, method);
        // QEMU names CPU nodes by decimal index.
        assert_eq!(cpu.node, format!("/cpus/cpu@{i}"));
    }
}

#[test]
fn cortex_a57_one_cpu() {
    let p = parse("qemu-virt-a57-1cpu.dtb");
    check_common(&p);
    check_cpus(&p, 1);
    assert_eq!(p.gic.redistributor_regions.len(), 1);
    assert_eq!(p.bootargs, "");
}

#[test]
fn neoverse_n1_four_cpus() {
    let p = parse("qemu-virt-n1-4cpu.dtb");
    check_common(&p);
    check_cpus(&p, 4);
    assert_eq!(p.gic.redistributor_regions.len(), 1);
}

#[test]
fn max_eight_cpus_in_two_clusters() {
    // -smp 8,clusters=2: cpu-map gets socket0/cluster0..1 with 4 cores
    // each, the MPIDRs stay 0..7; cpu-map itself is not a CPU.
    let p = parse("qemu-virt-max-8cpu-2clusters.dtb");
    check_common(&p);
    check_cpus(&p, 8);
}

#[test]
fn cortex_a57_sixty_four_cpus() {
    let p = parse("qemu-virt-a57-64cpu.dtb");
    check_common(&p);
    check_cpus(&p, 64);
    assert_eq!(p.cpus[63].mpidr, Mpidr::from_affinity(0, 0, 3, 15));
    // 64 redistributors of 0x20000 fit the first region.
    assert_eq!(p.gic.redistributor_regions.len(), 1);
}

#[test]
fn neoverse_n1_128_cpus_use_a_second_redistributor_region() {
    // The low region holds 0xf60000 / 0x20000 = 123 frames; QEMU adds a
    // second region above 4 GiB for the rest.
    let p = parse("qemu-virt-n1-128cpu.dtb");
    check_common(&p);
    check_cpus(&p, 128);
    assert_eq!(
        p.gic.redistributor_regions,
        [
            RedistributorRegion {
                range: MemRange::new(0x080a_0000, 0xf6_0000),
                stride: None
            },
            RedistributorRegion {
                range: MemRange::new(0x40_0000_0000, 0x400_0000),
                stride: None
            },
        ]
    );
}

#[test]
fn bootargs_from_append() {
    let p = parse("qemu-virt-a57-2cpu-bootargs.dtb");
    check_common(&p);
    check_cpus(&p, 2);
    assert_eq!(p.bootargs, "loglevel=debug");
}

#[test]
fn blob_may_be_longer_than_totalsize_but_not_shorter() {
    let mut blob = fixture("qemu-virt-a57-1cpu.dtb");
    let expected = Platform::parse(&blob).unwrap();
    blob.extend_from_slice(&[0xff; 64]);
    assert_eq!(Platform::parse(&blob).unwrap(), expected);
    blob.truncate(QEMU_TOTALSIZE - 1);
    let err = Platform::parse(&blob).unwrap_err();
    assert_eq!(err.node, "/");
    assert!(matches!(err.kind, platform::ErrorKind::BadBlob(_)), "{err}");
    // blob_size only needs the header.
    assert_eq!(blob_size(&blob[..40]).unwrap(), QEMU_TOTALSIZE);
}
