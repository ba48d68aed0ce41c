//! vGIC tests: register behaviour against Arm IHI 0069, interrupt
//! lifecycles through the list registers, and robustness against any
//! guest access.

use super::*;
use crate::guest::layout::vcpu_mpidr;
use alloc::string::ToString;

/// A vGIC with this hypervisor's MPIDR numbering (Aff1 = i / 16, Aff0 = i % 16).
fn gic(vcpus: u16, spis: u32) -> VGic {
    VGic::new(vcpus, spis, |i| vcpu_mpidr(i).value()).unwrap()
}

/// vCPU `vcpu`'s RD_base, from the first redistributor.
fn rd_base(vcpu: u16) -> u64 {
    u64::from(vcpu) * REDISTRIBUTOR_SIZE
}

/// vCPU `vcpu`'s SGI_base, from the first redistributor.
fn sgi_base(vcpu: u16) -> u64 {
    rd_base(vcpu) + SGI_FRAME_OFFSET
}

fn dr(g: &VGic, offset: u64) -> u32 {
    g.dist_read(offset, 4).unwrap() as u32
}

fn dw(g: &mut VGic, offset: u64, value: u32) {
    g.dist_write(offset, 4, value.into()).unwrap();
}

fn rr(g: &VGic, offset: u64) -> u32 {
    g.redist_read(offset, 4).unwrap() as u32
}

fn rw(g: &mut VGic, offset: u64, value: u32) {
    g.redist_write(offset, 4, value.into()).unwrap();
}

/// The one-bit register of `block` holding SPI `intid`, and its bit.
fn spi_bit(block: u64, intid: u32) -> (u64, u32) {
    (block + u64::from(intid / 32) * 4, 1 << (intid % 32))
}

/// Enables both groups in GICD_CTLR, then `intid` (of `vcpu` if private).
fn enable(g: &mut VGic, intid: u32, vcpu: u16) {
    dw(
        g,
        GICD_CTLR,
        GICD_CTLR::EnableGrp0::SET.value | GICD_CTLR::EnableGrp1::SET.value,
    );
    if intid < PRIVATE_COUNT {
        rw(g, sgi_base(vcpu) + GICR_ISENABLER0, 1 << intid);
    } else {
        let (offset, bit) = spi_bit(GICD_ISENABLER, intid);
        dw(g, offset, bit);
    }
}

/// What the hardware list registers hold after the guest ran: each filled
/// entry with its state replaced by `state(intid)`.
fn after_run(lrs: &ListRegisters, state: impl Fn(u32) -> LrState) -> Vec<Lr> {
    lrs.iter()
        .map(|lr| Lr {
            state: state(lr.intid),
            ..*lr
        })
        .collect()
}

fn intids(lrs: &ListRegisters) -> Vec<u32> {
    lrs.iter().map(|lr| lr.intid).collect()
}

fn pending_intids(g: &VGic, vcpu: u16) -> Vec<u32> {
    g.pending_for(vcpu).iter().map(|p| p.intid).collect()
}

fn status(g: &VGic, intid: u32, vcpu: u16) -> IrqStatus {
    g.irq_status(intid, vcpu).unwrap()
}

#[test]
fn reset_values_and_identification() {
    let g = gic(4, 64);
    // DS and ARE read one, the group enables and RWP zero.
    assert_eq!(
        dr(&g, GICD_CTLR),
        GICD_CTLR::ARE::SET.value | GICD_CTLR::DS::SET.value
    );
    assert_eq!(dr(&g, GICD_CTLR), 0x50);
    assert_eq!(dr(&g, GICD_IIDR), IIDR);
    assert_eq!(dr(&g, GICD_TYPER2), 0);
    assert_eq!(dr(&g, GICD_STATUSR), 0);
    // PIDR2.ArchRev = 3 in the distributor and in every redistributor, as
    // Linux checks (GIC_PIDR2_ARCH_MASK 0xf0 == 0x30).
    assert_eq!(dr(&g, GICD_PIDR2) & 0xf0, 0x30);
    for vcpu in 0..4 {
        assert_eq!(rr(&g, rd_base(vcpu) + GICR_PIDR2) & 0xf0, 0x30);
        assert_eq!(rr(&g, rd_base(vcpu) + GICR_IIDR), IIDR);
        assert_eq!(rr(&g, rd_base(vcpu) + GICR_CTLR), 0);
        // Asleep until the guest wakes it.
        assert_eq!(rr(&g, rd_base(vcpu) + GICR_WAKER), 0b110);
        // SGIs edge (read-only), PPIs level, all Group 1, disabled, priority 0.
        assert_eq!(rr(&g, sgi_base(vcpu) + GICR_ICFGR0), 0xaaaa_aaaa);
        assert_eq!(rr(&g, sgi_base(vcpu) + GICR_ICFGR1), 0);
        assert_eq!(rr(&g, sgi_base(vcpu) + GICR_IGROUPR0), u32::MAX);
        assert_eq!(rr(&g, sgi_base(vcpu) + GICR_ISENABLER0), 0);
        assert_eq!(rr(&g, sgi_base(vcpu) + GICR_ISPENDR0), 0);
        assert_eq!(rr(&g, sgi_base(vcpu) + GICR_ISACTIVER0), 0);
        assert_eq!(rr(&g, sgi_base(vcpu) + GICR_IGRPMODR0), 0);
        for i in 0..8 {
            assert_eq!(rr(&g, sgi_base(vcpu) + GICR_IPRIORITYR + 4 * i), 0);
        }
    }
    // The CoreSight component ID.
    let cidr: u32 = (0..4).fold(0, |v, i| v | (dr(&g, 0xfff0 + 4 * i) & 0xff) << (8 * i));
    assert_eq!(cidr, 0xb105_f00d);
    // SPIs 32..=95: Group 1, level, disabled, routed to 0.0.0.0.
    for n in 1..3 {
        assert_eq!(dr(&g, GICD_IGROUPR + 4 * n), u32::MAX);
        assert_eq!(dr(&g, GICD_ISENABLER + 4 * n), 0);
        assert_eq!(dr(&g, GICD_ICENABLER + 4 * n), 0);
        assert_eq!(dr(&g, GICD_ISPENDR + 4 * n), 0);
        assert_eq!(dr(&g, GICD_ISACTIVER + 4 * n), 0);
    }
    for n in 2..6 {
        assert_eq!(dr(&g, GICD_ICFGR + 4 * n), 0);
    }
    assert_eq!(g.dist_read(GICD_IROUTER, 8), Ok(0));
    assert_eq!(g.spi_targets(32), Some(VcpuMask::single(0)));
    // Beyond the implemented SPIs: RAZ/WI.
    assert_eq!(dr(&g, GICD_IGROUPR + 4 * 3), 0);
    assert_eq!(g.dist_read(GICD_IROUTER_BASE + 8 * 96, 8), Ok(0));
    assert!(!g.has_pending(0));
    assert!(g.pending_for(0).is_empty());
}

#[test]
fn read_only_registers_ignore_writes_and_say_so() {
    let mut g = gic(2, 32);
    let before = g.clone();
    for offset in [GICD_TYPER, GICD_IIDR, GICD_TYPER2, GICD_PIDR2] {
        let err = g.dist_write(offset, 4, 0xffff_ffff).unwrap_err();
        assert_eq!(
            err,
            VgicError::Ignored {
                offset,
                size: 4,
                write: true
            }
        );
        assert!(!err.aborts());
    }
    for offset in [GICR_IIDR, GICR_TYPER, GICR_TYPER + 4, GICR_PIDR2] {
        let offset = rd_base(1) + offset;
        assert!(matches!(
            g.redist_write(offset, 4, 0xffff_ffff),
            Err(VgicError::Ignored { write: true, .. })
        ));
    }
    assert_eq!(
        g.redist_write(rd_base(0) + GICR_TYPER, 8, u64::MAX),
        Err(VgicError::Ignored {
            offset: GICR_TYPER,
            size: 8,
            write: true
        })
    );
    // Architecturally RAZ/WI registers take writes quietly.
    assert_eq!(g.dist_write(GICD_STATUSR, 4, 0xffff_ffff), Ok(()));
    assert_eq!(g.dist_write(GICD_IGRPMODR + 4, 4, 0xffff_ffff), Ok(()));
    assert_eq!(g.dist_write(GICD_NSACR + 8, 4, 0xffff_ffff), Ok(()));
    assert_eq!(
        g.redist_write(rd_base(0) + GICR_CTLR, 4, 0xffff_ffff),
        Ok(())
    );
    assert_eq!(
        g.redist_write(sgi_base(0) + GICR_IGRPMODR0, 4, 0xffff_ffff),
        Ok(())
    );
    assert_eq!(g, before);
    assert_eq!(dr(&g, GICD_IGRPMODR + 4), 0);
    assert_eq!(rr(&g, rd_base(0) + GICR_CTLR), 0);
}

#[test]
fn gicd_ctlr_only_the_group_enables_are_writable() {
    let mut g = gic(1, 32);
    dw(&mut g, GICD_CTLR, u32::MAX);
    // EnableGrp0, EnableGrp1; ARE and DS stay one; RWP, E1NWF stay zero.
    assert_eq!(dr(&g, GICD_CTLR), 0x53);
    dw(&mut g, GICD_CTLR, GICD_CTLR::EnableGrp1::SET.value);
    assert_eq!(dr(&g, GICD_CTLR), 0x52);
    // What Linux writes (ARE_NS | ENABLE_G1A | ENABLE_G1): bit 0 is
    // EnableGrp0 with DS = 1, harmless.
    dw(&mut g, GICD_CTLR, (1 << 4) | (1 << 1) | 1);
    assert_eq!(dr(&g, GICD_CTLR), 0x53);
    dw(&mut g, GICD_CTLR, 0);
    assert_eq!(dr(&g, GICD_CTLR), 0x50);
    assert_eq!(dr(&g, GICD_CTLR) & GICD_CTLR::RWP::SET.value, 0);
}

#[test]
fn gicd_typer_itlinesnumber_follows_the_spi_count() {
    for (spis, itlines) in [(0, 0), (32, 1), (64, 2), (96, 3), (960, 30), (988, 31)] {
        let g = gic(1, spis);
        let typer = dr(&g, GICD_TYPER);
        assert_eq!(
            GICD_TYPER::ITLinesNumber.read(typer),
            itlines,
            "{spis} SPIs"
        );
        // The last SPI INTID is within 32 * (ITLinesNumber + 1) - 1.
        assert!(31 + spis < 32 * (itlines + 1));
        assert_eq!(GICD_TYPER::IDbits.read(typer), 15);
        assert_ne!(typer & GICD_TYPER::A3V::SET.value, 0);
        for absent in [
            GICD_TYPER::LPIS::SET.value,
            GICD_TYPER::MBIS::SET.value,
            GICD_TYPER::SecurityExtn::SET.value,
            GICD_TYPER::No1N::SET.value,
            GICD_TYPER::RSS::SET.value,
        ] {
            assert_eq!(typer & absent, 0);
        }
        // CPUNumber is 0 with affinity routing.
        assert_eq!(typer & 0xe0, 0);
    }
    // 988 SPIs: INTID 1019 is the last, 1020..=1023 are RAZ/WI.
    let mut g = gic(1, 988);
    let (offset, _) = spi_bit(GICD_ISENABLER, 1019);
    dw(&mut g, offset, u32::MAX);
    assert_eq!(dr(&g, offset), 0x0fff_ffff);
    assert_eq!(g.dist_write(GICD_IROUTER_BASE + 8 * 1019, 8, 1), Ok(()));
    assert_eq!(g.dist_read(GICD_IROUTER_BASE + 8 * 1019, 8), Ok(1));
    assert!(matches!(
        g.dist_read(GICD_IROUTER_BASE + 8 * 1020, 8),
        Err(VgicError::Ignored { .. })
    ));
}

#[test]
fn configuration_is_validated() {
    let mpidr = |i: u16| vcpu_mpidr(i).value();
    for spis in [0, 32, 64, 960, 988] {
        assert!(VGic::new(1, spis, mpidr).is_ok(), "{spis}");
    }
    for spis in [1, 100, 992, 1024] {
        assert_eq!(
            VGic::new(1, spis, mpidr).unwrap_err(),
            VgicConfigError::Spis(spis)
        );
    }
    assert_eq!(
        VGic::new(0, 32, mpidr).unwrap_err(),
        VgicConfigError::Vcpus(0)
    );
    assert_eq!(
        VGic::new(65, 32, mpidr).unwrap_err(),
        VgicConfigError::Vcpus(65)
    );
    assert!(VGic::new(64, 32, mpidr).is_ok());
    // Bits outside the affinity fields (MPIDR.U, MT, bit 31) do not count.
    let err = VGic::new(3, 32, |i| if i == 2 { 0x8000_0001 } else { u64::from(i) }).unwrap_err();
    assert_eq!(
        err,
        VgicConfigError::DuplicateMpidr {
            mpidr: 1,
            first: 1,
            second: 2
        }
    );
    assert!(err.to_string().contains("vCPUs 1 and 2"));
}

#[test]
fn set_and_clear_enable_act_on_ones_only() {
    let mut g = gic(2, 64);
    let set = GICD_ISENABLER + 4;
    let clear = GICD_ICENABLER + 4;
    dw(&mut g, set, 0x0000_00f0);
    dw(&mut g, set, 0x0000_0003);
    // Zeros in a set register change nothing.
    assert_eq!(dr(&g, set), 0xf3);
    assert_eq!(dr(&g, clear), 0xf3);
    dw(&mut g, clear, 0x0000_0011);
    assert_eq!(dr(&g, set), 0xe2);
    dw(&mut g, clear, 0);
    assert_eq!(dr(&g, set), 0xe2);
    assert!(status(&g, 33, 0).enabled);
    assert!(!status(&g, 32, 0).enabled);
    // The redistributors' registers are per vCPU.
    rw(&mut g, sgi_base(1) + GICR_ISENABLER0, 0x0800_0001);
    assert_eq!(rr(&g, sgi_base(1) + GICR_ISENABLER0), 0x0800_0001);
    assert_eq!(rr(&g, sgi_base(0) + GICR_ISENABLER0), 0);
    rw(&mut g, sgi_base(1) + GICR_ICENABLER0, 1);
    assert_eq!(rr(&g, sgi_base(1) + GICR_ICENABLER0), 0x0800_0000);
    assert!(status(&g, 27, 1).enabled && !status(&g, 27, 0).enabled);
}

#[test]
fn set_and_clear_pending_and_active() {
    let mut g = gic(2, 64);
    let (ispendr, bit) = spi_bit(GICD_ISPENDR, 40);
    let (icpendr, _) = spi_bit(GICD_ICPENDR, 40);
    dw(&mut g, ispendr, bit);
    assert_eq!(dr(&g, ispendr), bit);
    assert_eq!(dr(&g, icpendr), bit);
    dw(&mut g, icpendr, 0);
    assert_eq!(dr(&g, ispendr), bit);
    dw(&mut g, icpendr, bit);
    assert_eq!(dr(&g, ispendr), 0);

    // SGIs and PPIs through the redistributor, vCPU by vCPU.
    rw(&mut g, sgi_base(1) + GICR_ISPENDR0, 0x0001_0004);
    assert_eq!(rr(&g, sgi_base(1) + GICR_ISPENDR0), 0x0001_0004);
    assert_eq!(rr(&g, sgi_base(0) + GICR_ISPENDR0), 0);
    rw(&mut g, sgi_base(1) + GICR_ICPENDR0, 0x0000_0004);
    assert_eq!(rr(&g, sgi_base(1) + GICR_ICPENDR0), 0x0001_0000);

    let (isactiver, bit) = spi_bit(GICD_ISACTIVER, 63);
    let (icactiver, _) = spi_bit(GICD_ICACTIVER, 63);
    dw(&mut g, isactiver, bit);
    assert_eq!(dr(&g, icactiver), bit);
    assert!(status(&g, 63, 0).active);
    dw(&mut g, icactiver, bit);
    assert_eq!(dr(&g, isactiver), 0);
    rw(&mut g, sgi_base(0) + GICR_ISACTIVER0, 1 << 27);
    assert_eq!(rr(&g, sgi_base(0) + GICR_ICACTIVER0), 1 << 27);
    rw(&mut g, sgi_base(0) + GICR_ICACTIVER0, 1 << 27);
    assert_eq!(rr(&g, sgi_base(0) + GICR_ISACTIVER0), 0);
}

#[test]
fn clear_pending_does_not_clear_a_high_level_line() {
    // GICD_ICPENDR<n>: a level-sensitive interrupt stays pending while its
    // input is asserted; only the latch an ISPENDR write set goes.
    let mut g = gic(1, 32);
    let (ispendr, bit) = spi_bit(GICD_ISPENDR, 33);
    let (icpendr, _) = spi_bit(GICD_ICPENDR, 33);
    g.set_level(33, 0, true).unwrap();
    dw(&mut g, ispendr, bit);
    dw(&mut g, icpendr, bit);
    assert_eq!(dr(&g, ispendr), bit);
    g.set_level(33, 0, false).unwrap();
    assert_eq!(dr(&g, ispendr), 0);
    // Set-pending without a line: pending until cleared.
    dw(&mut g, ispendr, bit);
    assert_eq!(dr(&g, ispendr), bit);
    dw(&mut g, icpendr, bit);
    assert_eq!(dr(&g, ispendr), 0);
}

#[test]
fn priorities_by_byte_and_by_word() {
    let mut g = gic(2, 64);
    // INTID 33 is byte 1 of GICD_IPRIORITYR8 (offset 0x420).
    g.dist_write(GICD_IPRIORITYR + 33, 1, 0x80).unwrap();
    assert_eq!(dr(&g, GICD_IPRIORITYR + 32), 0x0000_8000);
    assert_eq!(g.dist_read(GICD_IPRIORITYR + 33, 1), Ok(0x80));
    assert_eq!(g.dist_read(GICD_IPRIORITYR + 34, 1), Ok(0));
    dw(&mut g, GICD_IPRIORITYR + 36, 0xa0b0_c0d0);
    assert_eq!(status(&g, 36, 0).priority, 0xd0);
    assert_eq!(status(&g, 39, 0).priority, 0xa0);
    assert_eq!(g.dist_read(GICD_IPRIORITYR + 38, 1), Ok(0xb0));
    // Only the byte written changes.
    g.dist_write(GICD_IPRIORITYR + 37, 1, 0x11).unwrap();
    assert_eq!(dr(&g, GICD_IPRIORITYR + 36), 0xa0b0_11d0);
    // SGIs and PPIs in the redistributor; Linux's default 0xa0 on PPI 27.
    g.redist_write(sgi_base(1) + GICR_IPRIORITYR + 27, 1, 0xa0)
        .unwrap();
    assert_eq!(rr(&g, sgi_base(1) + GICR_IPRIORITYR + 24), 0xa000_0000);
    assert_eq!(rr(&g, sgi_base(0) + GICR_IPRIORITYR + 24), 0);
    assert_eq!(status(&g, 27, 1).priority, 0xa0);
    rw(&mut g, sgi_base(0) + GICR_IPRIORITYR, 0x0302_0100);
    assert_eq!(
        g.redist_read(sgi_base(0) + GICR_IPRIORITYR + 3, 1),
        Ok(0x03)
    );
    // Halfword and doubleword accesses are not among the allowed ones.
    assert!(matches!(
        g.dist_read(GICD_IPRIORITYR + 32, 2),
        Err(VgicError::UnsupportedSize { .. })
    ));
    assert!(matches!(
        g.dist_write(GICD_IPRIORITYR + 32, 8, 0),
        Err(VgicError::UnsupportedSize { .. })
    ));
}

#[test]
fn icfgr_configures_spis_and_ppis_but_sgis_are_always_edge() {
    let mut g = gic(1, 32);
    // GICD_ICFGR2 covers INTIDs 32..=47: only the odd (Int_config) bits
    // exist.
    dw(&mut g, GICD_ICFGR + 8, u32::MAX);
    assert_eq!(dr(&g, GICD_ICFGR + 8), 0xaaaa_aaaa);
    assert!(status(&g, 40, 0).edge);
    dw(&mut g, GICD_ICFGR + 8, 0x0000_0008);
    assert_eq!(dr(&g, GICD_ICFGR + 8), 0x0000_0008);
    assert!(status(&g, 33, 0).edge && !status(&g, 32, 0).edge);
    // PPIs: GICR_ICFGR1, PPI 29 (INTID 29) at bit 2 * 13 + 1.
    rw(&mut g, sgi_base(0) + GICR_ICFGR1, 1 << 27);
    assert_eq!(rr(&g, sgi_base(0) + GICR_ICFGR1), 1 << 27);
    assert!(status(&g, 29, 0).edge && !status(&g, 27, 0).edge);
    // SGIs: read-only edge.
    rw(&mut g, sgi_base(0) + GICR_ICFGR0, 0);
    assert_eq!(rr(&g, sgi_base(0) + GICR_ICFGR0), 0xaaaa_aaaa);
    assert!(status(&g, 3, 0).edge);
    // The distributor's ICFGR0/1 are RAZ/WI with affinity routing.
    dw(&mut g, GICD_ICFGR, u32::MAX);
    dw(&mut g, GICD_ICFGR + 4, u32::MAX);
    assert_eq!(dr(&g, GICD_ICFGR), 0);
    assert_eq!(dr(&g, GICD_ICFGR + 4), 0);
    assert!(!status(&g, 27, 0).edge);
}

#[test]
fn distributor_registers_of_private_interrupts_are_raz_wi() {
    let mut g = gic(2, 32);
    let before = g.clone();
    for offset in [
        GICD_IGROUPR,
        GICD_ISENABLER,
        GICD_ICENABLER,
        GICD_ISPENDR,
        GICD_ICPENDR,
        GICD_ISACTIVER,
        GICD_ICACTIVER,
        GICD_IPRIORITYR,
        GICD_IPRIORITYR + 0x1c,
        GICD_ITARGETSR,
        GICD_ITARGETSR + 0x20,
        GICD_CPENDSGIR,
        GICD_SPENDSGIR + 0xc,
    ] {
        dw(&mut g, offset, u32::MAX);
        assert_eq!(dr(&g, offset), 0, "{offset:#x}");
    }
    // ITARGETSR is byte-accessible, and RAZ/WI.
    assert_eq!(g.dist_write(GICD_ITARGETSR + 33, 1, 0xff), Ok(()));
    assert_eq!(g.dist_read(GICD_ITARGETSR + 33, 1), Ok(0));
    assert_eq!(g, before);
}

#[test]
fn groups_are_stored_and_gated_by_the_group_enables() {
    let mut g = gic(1, 32);
    // Move SPI 33 to Group 0 and PPI 27 to Group 0.
    dw(&mut g, GICD_IGROUPR + 4, !(1 << 1));
    assert_eq!(dr(&g, GICD_IGROUPR + 4), !(1 << 1));
    rw(&mut g, sgi_base(0) + GICR_IGROUPR0, !(1 << 27));
    assert!(!status(&g, 33, 0).group1 && !status(&g, 27, 0).group1);
    enable(&mut g, 33, 0);
    enable(&mut g, 27, 0);
    enable(&mut g, 34, 0);
    dw(&mut g, GICD_CTLR, GICD_CTLR::EnableGrp1::SET.value);
    g.raise_edge(33, 0).unwrap();
    g.raise_edge(34, 0).unwrap();
    g.set_level(27, 0, true).unwrap();
    // Only Group 1 is forwarded.
    assert_eq!(pending_intids(&g, 0), [34]);
    dw(
        &mut g,
        GICD_CTLR,
        GICD_CTLR::EnableGrp0::SET.value | GICD_CTLR::EnableGrp1::SET.value,
    );
    assert_eq!(g.take_wakeups(), VcpuMask::single(0));
    assert_eq!(pending_intids(&g, 0), [27, 33, 34]);
    // The list register says which group: a virtual FIQ for Group 0.
    let lrs = g.fill(0, 4);
    let groups: Vec<(u32, bool)> = lrs.iter().map(|lr| (lr.intid, lr.group1)).collect();
    assert_eq!(groups, [(27, false), (33, false), (34, true)]);
}

#[test]
fn irouter_routes_spis_by_affinity() {
    let mut g = gic(20, 32);
    let router = GICD_IROUTER_BASE + 8 * 40;
    assert_eq!(router, 0x6140);
    // vCPU 17 is Aff1 = 1, Aff0 = 1.
    g.dist_write(router, 8, 0x101).unwrap();
    assert_eq!(g.spi_targets(40), Some(VcpuMask::single(17)));
    enable(&mut g, 40, 0);
    assert_eq!(g.raise_edge(40, 0), Ok(VcpuMask::single(17)));
    assert_eq!(pending_intids(&g, 17), [40]);
    assert!(g.pending_for(1).is_empty() && !g.has_pending(0));
    // The low half alone (AArch32 guests write halves): vCPU 2.
    g.dist_write(router, 4, 0x0000_0002).unwrap();
    assert_eq!(g.dist_read(router, 8), Ok(0x2));
    assert_eq!(g.take_wakeups(), VcpuMask::single(2));
    assert_eq!(pending_intids(&g, 2), [40]);
    assert!(g.pending_for(17).is_empty());
    // Aff3 = 1 in the high half: no vCPU has that affinity, the SPI stays
    // pending with nowhere to go.
    g.dist_write(router + 4, 4, 1).unwrap();
    assert_eq!(g.dist_read(router, 8), Ok(0x1_0000_0002));
    assert_eq!(g.dist_read(router + 4, 4), Ok(1));
    assert_eq!(g.spi_targets(40), Some(VcpuMask::EMPTY));
    assert!((0..20).all(|v| !g.has_pending(v)));
    assert!(status(&g, 40, 0).pending);
    // RES0 bits are not stored.
    g.dist_write(router, 8, u64::MAX).unwrap();
    assert_eq!(g.dist_read(router, 8), Ok(0xff_80ff_ffff));
    // Back to vCPU 0.
    g.dist_write(router, 8, 0).unwrap();
    assert_eq!(pending_intids(&g, 0), [40]);
}

#[test]
fn irouter_irm_goes_to_one_of_the_awake_vcpus() {
    let mut g = gic(4, 32);
    let router = GICD_IROUTER_BASE + 8 * 45;
    g.dist_write(
        router,
        8,
        GICD_IROUTER::Interrupt_Routing_Mode::SET.value | 0x3,
    )
    .unwrap();
    // Every redistributor is asleep at reset: nobody participates.
    assert_eq!(g.spi_targets(45), Some(VcpuMask::EMPTY));
    enable(&mut g, 45, 0);
    assert_eq!(g.raise_edge(45, 0), Ok(VcpuMask::EMPTY));
    // vCPUs 1 and 3 wake up (ProcessorSleep = 0) and can both take it.
    rw(&mut g, rd_base(1) + GICR_WAKER, 0);
    assert_eq!(g.take_wakeups(), VcpuMask::single(1));
    rw(&mut g, rd_base(3) + GICR_WAKER, 0);
    assert_eq!(g.take_wakeups(), VcpuMask::single(3));
    assert_eq!(g.spi_targets(45), Some(VcpuMask::from_bits(0b1010)));
    assert_eq!(pending_intids(&g, 1), [45]);
    assert_eq!(pending_intids(&g, 3), [45]);
    // The first to take it into a list register has it alone.
    let lrs = g.fill(3, 4);
    assert_eq!(intids(&lrs), [45]);
    assert!(g.pending_for(1).is_empty());
    assert!(g.fill(1, 4).is_empty());
    // Acknowledged on vCPU 3: active there, and there only.
    g.sync_back(3, &after_run(&lrs, |_| LrState::Active));
    assert_eq!(intids(&g.fill(3, 4)), [45]);
    assert!(g.fill(1, 4).is_empty());
}

#[test]
fn gicr_typer_affinity_processor_number_and_last() {
    let g = gic(18, 32);
    for vcpu in 0..18 {
        let typer = g.redist_read(rd_base(vcpu) + GICR_TYPER, 8).unwrap();
        let mpidr = vcpu_mpidr(vcpu);
        let affinity = u64::from(mpidr.aff(3)) << 24
            | u64::from(mpidr.aff(2)) << 16
            | u64::from(mpidr.aff(1)) << 8
            | u64::from(mpidr.aff(0));
        assert_eq!(typer >> 32, affinity);
        assert_eq!((typer >> 8) & 0xffff, u64::from(vcpu));
        assert_eq!(typer & GICR_TYPER::Last::SET.value != 0, vcpu == 17);
        // No PLPIS, VLPIS, Dirty, DirectLPI, DPGS, MPAM, RVPEID; no
        // CommonLPIAff, VSGI, PPInum (bits 31:24).
        assert_eq!(typer & 0xef, 0);
        assert_eq!(typer & 0xff00_0000, 0);
        // 32-bit halves.
        assert_eq!(
            g.redist_read(rd_base(vcpu) + GICR_TYPER, 4),
            Ok(typer & 0xffff_ffff)
        );
        assert_eq!(
            g.redist_read(rd_base(vcpu) + GICR_TYPER + 4, 4),
            Ok(typer >> 32)
        );
    }
    // vCPU 17: Aff1 = 1, Aff0 = 1, i.e. affinity 0x0000_0101, last.
    assert_eq!(
        g.redist_read(rd_base(17) + GICR_TYPER, 8),
        Ok(0x0000_0101_0000_1110)
    );
    // Aff3 goes to bits 63:56.
    let g = VGic::new(2, 0, |i| 0x12_0034_5600 | u64::from(i)).unwrap();
    assert_eq!(
        g.redist_read(rd_base(1) + GICR_TYPER, 8),
        Ok(0x1234_5601_0000_0110)
    );
}

#[test]
fn gicr_waker_handshake() {
    let mut g = gic(2, 32);
    let waker = rd_base(1) + GICR_WAKER;
    assert_eq!(
        rr(&g, waker),
        GICR_WAKER::ProcessorSleep::SET.value | GICR_WAKER::ChildrenAsleep::SET.value
    );
    // Linux's gic_enable_redist: clear ProcessorSleep, poll until
    // ChildrenAsleep reads 0.
    let value = rr(&g, waker) & !GICR_WAKER::ProcessorSleep::SET.value;
    rw(&mut g, waker, value);
    assert_eq!(rr(&g, waker) & GICR_WAKER::ChildrenAsleep::SET.value, 0);
    assert_eq!(rr(&g, waker), 0);
    // vCPU 0's redistributor is separate.
    assert_eq!(rr(&g, rd_base(0) + GICR_WAKER), 0b110);
    // Going to sleep: ProcessorSleep set, ChildrenAsleep follows.
    rw(&mut g, waker, GICR_WAKER::ProcessorSleep::SET.value);
    assert_eq!(rr(&g, waker), 0b110);
    // ChildrenAsleep is read-only and the IMPLEMENTATION DEFINED bits RAZ/WI.
    rw(
        &mut g,
        waker,
        GICR_WAKER::ChildrenAsleep::SET.value | 1 | 1 << 31,
    );
    assert_eq!(rr(&g, waker), 0);
}

#[test]
fn redistributor_frames_are_found_by_offset() {
    let mut g = gic(3, 32);
    // 0x20000 per vCPU; SGI_base 0x10000 into each.
    rw(&mut g, 2 * 0x2_0000 + 0x1_0000 + 0x100, 1 << 5);
    assert!(status(&g, 5, 2).enabled);
    assert!(!status(&g, 5, 1).enabled && !status(&g, 5, 0).enabled);
    assert_eq!(rr(&g, 0x4_0000 + GICR_TYPER) & 0xff_ff00, 2 << 8);
    // Past the last vCPU's frame: no redistributor, RAZ/WI.
    let before = g.clone();
    assert_eq!(
        g.redist_read(3 * REDISTRIBUTOR_SIZE + GICR_PIDR2, 4),
        Err(VgicError::Ignored {
            offset: 3 * REDISTRIBUTOR_SIZE + GICR_PIDR2,
            size: 4,
            write: false
        })
    );
    assert!(matches!(
        g.redist_write(3 * REDISTRIBUTOR_SIZE + SGI_FRAME_OFFSET + 0x100, 4, 1),
        Err(VgicError::Ignored { .. })
    ));
    assert!(g.redist_read(!7, 8).is_err());
    assert_eq!(g, before);
}

#[test]
fn sgi1r_target_list_reaches_several_vcpus() {
    let mut g = gic(20, 32);
    for vcpu in [0, 1, 3, 18] {
        enable(&mut g, 5, vcpu);
        enable(&mut g, 3, vcpu);
    }
    // INTID 5 to Aff0 0, 1 and 3 of cluster 0.0.0 (ICC_SGI1R_EL1 =
    // 0x0500_000b); the sender may name itself.
    let woken = g.send_sgi(0, 0x0500_000b).unwrap();
    assert_eq!(woken, VcpuMask::from_bits(0b1011));
    for vcpu in 0..20 {
        assert_eq!(status(&g, 5, vcpu).pending, [0, 1, 3].contains(&vcpu));
    }
    // INTID 3 to Aff1 = 1, Aff0 = 2: vCPU 18.
    let woken = g.send_sgi(4, 3 << 24 | 1 << 16 | 1 << 2).unwrap();
    assert_eq!(woken, VcpuMask::single(18));
    assert_eq!(pending_intids(&g, 18), [3]);
    // Already pending: nothing new to wake for.
    assert_eq!(g.send_sgi(0, 0x0500_000b), Ok(VcpuMask::EMPTY));
    // Not enabled at the target: pending, but nobody to wake.
    assert_eq!(g.send_sgi(0, 7 << 24 | 1 << 2), Ok(VcpuMask::EMPTY));
    assert!(status(&g, 7, 2).pending);
}

#[test]
fn sgi1r_irm_targets_everyone_but_the_sender() {
    let mut g = gic(4, 32);
    for vcpu in 0..4 {
        enable(&mut g, 1, vcpu);
    }
    // IRM = 1: the target list and affinity fields are ignored.
    let woken = g
        .send_sgi(
            2,
            ICC_SGI1R_EL1::IRM::SET.value | 1 << 24 | 0xffff | 0xff << 16,
        )
        .unwrap();
    assert_eq!(woken, VcpuMask::from_bits(0b1011));
    assert!(!status(&g, 1, 2).pending);
    assert!([0, 1, 3].iter().all(|&v| status(&g, 1, v).pending));
    assert_eq!(
        g.send_sgi(4, ICC_SGI1R_EL1::IRM::SET.value),
        Err(InjectError::NoSuchVcpu { vcpu: 4 })
    );
}

#[test]
fn sgi1r_affinity_mismatch_reaches_nobody() {
    let mut g = gic(20, 32);
    for vcpu in 0..20 {
        enable(&mut g, 9, vcpu);
    }
    let before = g.clone();
    for sgi1r in [
        // Cluster Aff1 = 5 does not exist.
        9 << 24 | 5 << 16 | 1,
        // Aff1 = 1 exists, Aff0 = 15 (vCPU 31) does not.
        9 << 24 | 1 << 16 | 1 << 15,
        // Aff2 = 1, Aff3 = 1.
        9 << 24 | 1 << 32 | 1,
        9 << 24 | 1 << 48 | 1,
        // RS = 1: Aff0 16..=31, nobody in this numbering.
        9 << 24 | 1 << 44 | 1,
        // An empty target list.
        9 << 24,
    ] {
        assert_eq!(g.send_sgi(0, sgi1r), Ok(VcpuMask::EMPTY), "{sgi1r:#x}");
    }
    assert_eq!(g, before);
    // A target whose SGI 9 is Group 0 does not get a Group 1 SGI.
    rw(&mut g, sgi_base(1) + GICR_IGROUPR0, !(1 << 9));
    assert_eq!(g.send_sgi(0, 9 << 24 | 0b110), Ok(VcpuMask::single(2)));
    assert!(!status(&g, 9, 1).pending && status(&g, 9, 2).pending);
}

#[test]
fn level_interrupt_is_pending_again_after_eoi_while_its_line_is_high() {
    // The PL011's SPI 1 (INTID 33), level-sensitive, routed to vCPU 0.
    let mut g = gic(2, 64);
    enable(&mut g, 33, 0);
    assert_eq!(g.set_level(33, 0, true), Ok(VcpuMask::single(0)));
    assert!(g.has_pending(0));
    let lrs = g.fill(0, 4);
    assert_eq!(
        lrs.get(0),
        Some(Lr {
            intid: 33,
            state: LrState::Pending,
            priority: 0,
            group1: true,
            physical: None,
            eoi_maintenance: true,
        })
    );
    assert_eq!(lrs.len(), 1);
    // In flight: not offered again, but still reads pending.
    assert!(g.pending_for(0).is_empty());
    assert!(!g.underflow_needed(0));
    assert!(status(&g, 33, 0).pending);
    // The guest acknowledged and deactivated it without silencing the UART
    // (the EOI maintenance interrupt brings it out): the line is still
    // high, so it is pending again.
    assert_eq!(
        g.sync_back(0, &after_run(&lrs, |_| LrState::Invalid)),
        VcpuMask::EMPTY
    );
    assert_eq!(pending_intids(&g, 0), [33]);
    assert!(!status(&g, 33, 0).active);
    let lrs = g.fill(0, 4);
    assert_eq!(intids(&lrs), [33]);
    // This time it acknowledges, silences the UART (an exit for the MMIO
    // access), then deactivates.
    g.sync_back(0, &after_run(&lrs, |_| LrState::Active));
    assert!(status(&g, 33, 0).active && status(&g, 33, 0).pending);
    g.set_level(33, 0, false).unwrap();
    let lrs = g.fill(0, 4);
    // Active only: nothing to re-pend, so no EOI maintenance needed.
    assert_eq!(
        lrs.get(0).map(|lr| (lr.state, lr.eoi_maintenance)),
        Some((LrState::Active, false))
    );
    g.sync_back(0, &after_run(&lrs, |_| LrState::Invalid));
    let s = status(&g, 33, 0);
    assert!(!s.pending && !s.active);
    assert!(!g.has_pending(0));
    assert!(g.fill(0, 4).is_empty());
}

#[test]
fn level_interrupt_is_not_pending_after_its_line_drops() {
    // The virtual timer, PPI 27 of vCPU 1.
    let mut g = gic(2, 32);
    enable(&mut g, 27, 1);
    assert_eq!(g.set_level(27, 1, true), Ok(VcpuMask::single(1)));
    assert!(!g.has_pending(0));
    let lrs = g.fill(1, 4);
    assert_eq!(intids(&lrs), [27]);
    // The line drops before the guest took it (the hypervisor re-sampled
    // the timer on exit): the entry comes back Pending, but the interrupt
    // is no longer pending.
    g.set_level(27, 1, false).unwrap();
    g.sync_back(1, &after_run(&lrs, |_| LrState::Pending));
    assert!(!status(&g, 27, 1).pending);
    assert!(!g.has_pending(1));
    assert!(g.fill(1, 4).is_empty());
    // Up again, taken, down again before EOI: done after EOI.
    g.set_level(27, 1, true).unwrap();
    let lrs = g.fill(1, 4);
    g.set_level(27, 1, false).unwrap();
    g.sync_back(1, &after_run(&lrs, |_| LrState::Invalid));
    assert!(!g.has_pending(1) && !status(&g, 27, 1).active);
}

#[test]
fn edge_raised_twice_while_in_a_list_register_is_pending_once() {
    let mut g = gic(1, 32);
    dw(&mut g, GICD_ICFGR + 8, 1 << 5); // INTID 34: edge.
    enable(&mut g, 34, 0);
    assert_eq!(g.raise_edge(34, 0), Ok(VcpuMask::single(0)));
    let lrs = g.fill(0, 4);
    assert_eq!(lrs.get(0).map(|lr| lr.eoi_maintenance), Some(false));
    // Raised again while the vCPU runs with it in a list register: the
    // vCPU may be kicked to see it sooner; a third edge changes nothing.
    assert_eq!(g.raise_edge(34, 0), Ok(VcpuMask::single(0)));
    assert_eq!(g.set_level(34, 0, true), Ok(VcpuMask::EMPTY));
    assert_eq!(g.raise_edge(34, 0), Ok(VcpuMask::EMPTY));
    // The guest had not acknowledged it: pending once, one entry.
    g.sync_back(0, &after_run(&lrs, |_| LrState::Pending));
    assert_eq!(pending_intids(&g, 0), [34]);
    let lrs = g.fill(0, 4);
    assert_eq!(intids(&lrs), [34]);
    assert_eq!(lrs.get(0).map(|lr| lr.state), Some(LrState::Pending));
    // Acknowledged and deactivated: done.
    g.sync_back(0, &after_run(&lrs, |_| LrState::Invalid));
    assert!(!status(&g, 34, 0).pending);
    assert!(g.fill(0, 4).is_empty());
}

#[test]
fn edge_raised_while_active_becomes_pending_and_active() {
    let mut g = gic(1, 32);
    dw(&mut g, GICD_ICFGR + 8, 1 << 5); // INTID 34: edge.
    enable(&mut g, 34, 0);
    g.raise_edge(34, 0).unwrap();
    let lrs = g.fill(0, 4);
    // The guest acknowledged it; a new edge arrives while it handles it.
    g.raise_edge(34, 0).unwrap();
    g.sync_back(0, &after_run(&lrs, |_| LrState::Active));
    let s = status(&g, 34, 0);
    assert!(s.active && s.pending);
    // Not deliverable while active, but back in the list register as
    // pending and active, so the guest takes it again after deactivating.
    assert!(g.pending_for(0).is_empty());
    let lrs = g.fill(0, 4);
    assert_eq!(lrs.get(0).map(|lr| lr.state), Some(LrState::PendingActive));
    g.sync_back(0, &after_run(&lrs, |_| LrState::Pending));
    let s = status(&g, 34, 0);
    assert!(!s.active && s.pending);
    assert_eq!(pending_intids(&g, 0), [34]);
}

#[test]
fn fill_orders_by_priority_then_intid_and_asks_for_underflow() {
    let mut g = gic(2, 32);
    let priorities = [
        (33, 0x80),
        (34, 0x40),
        (35, 0x40),
        (36, 0xa0),
        (37, 0x10),
        (38, 0xf0),
    ];
    for (intid, priority) in priorities {
        g.dist_write(GICD_IPRIORITYR + u64::from(intid), 1, priority)
            .unwrap();
        enable(&mut g, intid, 0);
        g.raise_edge(intid, 0).unwrap();
    }
    g.redist_write(sgi_base(0) + GICR_IPRIORITYR + 27, 1, 0x40)
        .unwrap();
    enable(&mut g, 27, 0);
    g.set_level(27, 0, true).unwrap();
    let order = [37, 27, 34, 35, 33, 36, 38];
    assert_eq!(pending_intids(&g, 0), order);
    let priorities: Vec<u8> = g.pending_for(0).iter().map(|p| p.priority).collect();
    assert_eq!(priorities, [0x10, 0x40, 0x40, 0x40, 0x80, 0xa0, 0xf0]);
    // QEMU's CPU interface has four list registers.
    let lrs = g.fill(0, 4);
    assert_eq!(intids(&lrs), order[..4]);
    assert_eq!(lrs.len(), 4);
    assert_eq!(lrs.values()[4..], [0; MAX_LIST_REGISTERS - 4]);
    assert!(g.underflow_needed(0));
    assert!(!g.underflow_needed(1));
    assert_eq!(pending_intids(&g, 0), order[4..]);
    // All four taken and completed; the PPI's line went down meanwhile.
    g.set_level(27, 0, false).unwrap();
    g.sync_back(0, &after_run(&lrs, |_| LrState::Invalid));
    let lrs = g.fill(0, 4);
    assert_eq!(intids(&lrs), order[4..]);
    assert!(!g.underflow_needed(0));
    // More list registers than interrupts; more asked than exist.
    g.sync_back(0, &after_run(&lrs, |_| LrState::Pending));
    assert_eq!(intids(&g.fill(0, 64)), order[4..]);
    assert!(g.fill(0, 0).is_empty());
    assert_eq!(pending_intids(&g, 0), order[4..]);
}

#[test]
fn fill_puts_active_interrupts_first() {
    let mut g = gic(1, 32);
    for intid in [40, 41] {
        enable(&mut g, intid, 0);
    }
    g.dist_write(GICD_IPRIORITYR + 40, 1, 0xf0).unwrap();
    g.raise_edge(40, 0).unwrap();
    let lrs = g.fill(0, 1);
    g.sync_back(0, &after_run(&lrs, |_| LrState::Active));
    // A more urgent interrupt arrives; with one list register, the active
    // one still goes first (the guest must be able to deactivate it).
    g.raise_edge(41, 0).unwrap();
    let lrs = g.fill(0, 1);
    assert_eq!(
        lrs.get(0).map(|lr| (lr.intid, lr.state)),
        Some((40, LrState::Active))
    );
    assert!(g.underflow_needed(0));
    let lrs = g.fill(0, 2);
    assert_eq!(intids(&lrs), [40, 41]);
}

#[test]
fn sync_back_transitions() {
    for (read_back, pending, active) in [
        (LrState::Pending, true, false),
        (LrState::Active, false, true),
        (LrState::PendingActive, true, true),
        (LrState::Invalid, false, false),
    ] {
        let mut g = gic(2, 32);
        enable(&mut g, 50, 0);
        g.raise_edge(50, 0).unwrap();
        let lrs = g.fill(0, 4);
        assert_eq!(status(&g, 50, 0).in_lr, Some(0));
        g.sync_back(0, &after_run(&lrs, |_| read_back));
        let s = status(&g, 50, 0);
        assert_eq!(
            (s.pending, s.active, s.in_lr),
            (pending, active, None),
            "{read_back:?}"
        );
        // What goes back into the list registers.
        let expected = match (pending, active) {
            (false, false) => None,
            (p, a) => Some(LrState::new(p, a)),
        };
        assert_eq!(
            g.fill(0, 4).get(0).map(|lr| lr.state),
            expected,
            "{read_back:?}"
        );
        // An active SPI stays with the vCPU that acknowledged it.
        if active {
            g.dist_write(GICD_IROUTER_BASE + 8 * 50, 8, 1).unwrap();
            g.sync_back(0, &[]);
            assert!(g.fill(1, 4).is_empty());
            assert_eq!(intids(&g.fill(0, 4)), [50]);
        }
    }
}

#[test]
fn sync_back_ignores_entries_it_did_not_fill() {
    let mut g = gic(2, 32);
    enable(&mut g, 0, 0);
    enable(&mut g, 40, 0);
    g.dist_write(GICD_IPRIORITYR + 40, 1, 0x10).unwrap();
    g.redist_write(sgi_base(0) + GICR_IPRIORITYR, 1, 0x20)
        .unwrap();
    g.raise_edge(0, 0).unwrap();
    g.raise_edge(40, 0).unwrap();
    let lrs = g.fill(0, 1);
    assert_eq!(intids(&lrs), [40]);
    // The hardware's other list registers were written as 0, which decodes
    // as an Invalid entry for INTID 0: SGI 0 was not in one, so it stays
    // pending.
    let mut read_back = after_run(&lrs, |_| LrState::Invalid);
    read_back.extend([Lr::decode(0); 3]);
    // Entries naming INTIDs never filled, or a vCPU's that is not this one.
    read_back.push(Lr::decode(0x4000_0000_0000_0021));
    read_back.push(Lr::decode(0x4000_0000_0000_0400));
    assert_eq!(g.sync_back(0, &read_back), VcpuMask::EMPTY);
    assert!(status(&g, 0, 0).pending);
    assert!(!status(&g, 40, 0).pending);
    // vCPU 1 cannot complete vCPU 0's interrupt.
    let lrs = g.fill(0, 1);
    assert_eq!(intids(&lrs), [0]);
    g.sync_back(1, &after_run(&lrs, |_| LrState::Invalid));
    assert_eq!(status(&g, 0, 0).in_lr, Some(0));
    // Missing entries count as unchanged.
    g.sync_back(0, &[]);
    assert!(status(&g, 0, 0).pending && status(&g, 0, 0).in_lr.is_none());
    // Filling twice without syncing takes the first fill back.
    let first = g.fill(0, 4);
    assert_eq!(g.fill(0, 4), first);
    assert_eq!(g.sync_back(7, &[]), VcpuMask::EMPTY);
}

#[test]
fn spi_left_pending_goes_where_it_is_routed_now() {
    let mut g = gic(2, 32);
    enable(&mut g, 44, 0);
    g.raise_edge(44, 0).unwrap();
    let lrs = g.fill(0, 4);
    // While it is in vCPU 0's list register, the guest moves it to vCPU 1
    // (on another vCPU); vCPU 1 cannot have it yet.
    g.dist_write(GICD_IROUTER_BASE + 8 * 44, 8, 1).unwrap();
    assert!(g.pending_for(1).is_empty());
    // vCPU 0 exits without having taken it: vCPU 1 is to be woken.
    assert_eq!(
        g.sync_back(0, &after_run(&lrs, |_| LrState::Pending)),
        VcpuMask::single(1)
    );
    assert_eq!(pending_intids(&g, 1), [44]);
    assert!(g.pending_for(0).is_empty());
}

#[test]
fn list_register_encodings() {
    // vINTID 27, priority 0xa0, Group 1, pending: what a hypervisor writes
    // for a software-injected virtual timer interrupt.
    let timer = Lr {
        intid: 27,
        state: LrState::Pending,
        priority: 0xa0,
        group1: true,
        physical: None,
        eoi_maintenance: false,
    };
    assert_eq!(timer.encode(), 0x50a0_0000_0000_001b);
    assert_eq!(Lr::decode(0x50a0_0000_0000_001b), timer);
    // A level SPI asking for EOI maintenance (bit 41).
    let uart = Lr {
        intid: 33,
        eoi_maintenance: true,
        ..timer
    };
    assert_eq!(uart.encode(), 0x50a0_0200_0000_0021);
    assert_eq!(Lr::decode(0x50a0_0200_0000_0021), uart);
    // The timer mapped to its physical PPI 27: HW (bit 61), pINTID 44:32.
    let hw = Lr {
        physical: Some(27),
        ..timer
    };
    assert_eq!(hw.encode(), 0x70a0_001b_0000_001b);
    assert_eq!(Lr::decode(0x70a0_001b_0000_001b), hw);
    // With HW, bit 41 is pINTID's, not EOI.
    let decoded = Lr::decode(0x70a0_0200_0000_001b);
    assert_eq!(decoded.physical, Some(0x200));
    assert!(!decoded.eoi_maintenance);
    // Active SGI 1, priority 0: 0b10 in 63:62, Group 1.
    assert_eq!(
        Lr {
            intid: 1,
            state: LrState::Active,
            priority: 0,
            ..timer
        }
        .encode(),
        0x9000_0000_0000_0001
    );
    // Pending and active Group 0 SPI 1019.
    let lr = Lr::decode(0xc0f0_0000_0000_03fb);
    assert_eq!(
        (lr.intid, lr.state, lr.priority, lr.group1),
        (1019, LrState::PendingActive, 0xf0, false)
    );
    // A list register the guest emptied keeps its vINTID.
    let done = Lr::decode(0x10a0_0000_0000_0021);
    assert_eq!((done.intid, done.state), (33, LrState::Invalid));
    assert_eq!(Lr::decode(0), Lr::default());
    for bits in 0..4 {
        assert_eq!(LrState::from_bits(bits).bits(), bits);
    }
    // Round trips through every state and both groups.
    for value in [
        0u64,
        0x4000_0000_0000_0010,
        0xb0ff_0200_ffff_ffff,
        0xe000_1fff_0000_0020,
    ] {
        assert_eq!(Lr::decode(value).encode(), value);
    }
}

#[test]
fn fill_writes_the_list_register_values() {
    let mut g = gic(1, 32);
    enable(&mut g, 27, 0);
    g.redist_write(sgi_base(0) + GICR_IPRIORITYR + 27, 1, 0xa0)
        .unwrap();
    g.set_level(27, 0, true).unwrap();
    let values = g.fill(0, 4).values();
    // Level-sensitive PPI 27: pending, Group 1, priority 0xa0, EOI.
    assert_eq!(values[0], 0x50a0_0200_0000_001b);
    assert_eq!(values[1..], [0; MAX_LIST_REGISTERS - 1]);
}

#[test]
fn reserved_offsets_read_as_zero_and_ignore_writes() {
    let mut g = gic(2, 32);
    let before = g.clone();
    for offset in [
        0x0014, // reserved
        0x0040, // GICD_SETSPI_NSR: no message-based SPIs
        0x0058, // GICD_CLRSPI_SR
        GICD_SGIR,
        0x0f80, // GICD_INMIR: no NMIs
        0x1000, // extended SPI range
        0x5ffc,
        GICD_IROUTER_BASE, // IROUTER<0>: no routing for SGIs
        GICD_IROUTER_BASE + 8 * 31,
        GICD_IROUTER_BASE + 8 * 1020,
        0x8000, // IROUTER<n>E
        0xc000, // IMPLEMENTATION DEFINED
        0xffcc,
        0x1_0000, // outside the frame
    ] {
        for size in [1, 2, 4, 8] {
            if !offset.is_multiple_of(u64::from(size)) {
                continue;
            }
            let read = g.dist_read(offset, size);
            let write = g.dist_write(offset, size, u64::MAX);
            for (result, write) in [(read.map(|_| ()), false), (write, true)] {
                let err = result.unwrap_err();
                assert_eq!(
                    err,
                    VgicError::Ignored {
                        offset,
                        size,
                        write
                    },
                    "{offset:#x}/{size}"
                );
                assert!(!err.aborts());
                assert_eq!(err.offset(), offset);
            }
        }
    }
    for offset in [
        0x0018,   // GICR_MPAMIDR
        0x0040,   // GICR_SETLPIR: no LPIs
        0x0070,   // GICR_PROPBASER
        0x0078,   // GICR_PENDBASER
        0x00c0,   // GICR_SYNCR
        0x8000,   // IMPLEMENTATION DEFINED
        0x1_0000, // SGI_base + 0: reserved
        0x1_0084, // GICR_IGROUPR1E: no extended PPIs
        0x1_0104, 0x1_0420, // past IPRIORITYR7
        0x1_0c08, // GICR_ICFGR2
        0x1_0f80, // GICR_INMIR0
        0x1_fffc,
    ] {
        for vcpu in 0..2 {
            let offset = rd_base(vcpu) + offset;
            assert!(matches!(
                g.redist_read(offset, 4),
                Err(VgicError::Ignored { write: false, .. })
            ));
            assert!(matches!(
                g.redist_write(offset, 4, u64::from(u32::MAX)),
                Err(VgicError::Ignored { write: true, .. })
            ));
        }
    }
    assert_eq!(g, before);
    let err = g.dist_read(GICD_SGIR, 4).unwrap_err();
    assert_eq!(
        err.to_string(),
        "4-byte read at offset 0xf00 ignored (RAZ/WI)"
    );
}

#[test]
fn misaligned_and_odd_sized_accesses_are_reported_for_an_abort() {
    let mut g = gic(2, 32);
    enable(&mut g, 33, 0);
    let before = g.clone();
    let unsupported = |offset, size, write| VgicError::UnsupportedSize {
        offset,
        size,
        write,
    };
    let misaligned = |offset, size, write| VgicError::Misaligned {
        offset,
        size,
        write,
    };
    let dist = [
        (GICD_CTLR, 0, unsupported(GICD_CTLR, 0, false)),
        (GICD_CTLR, 3, unsupported(GICD_CTLR, 3, false)),
        (GICD_CTLR, 16, unsupported(GICD_CTLR, 16, false)),
        // Narrower or wider than a 32-bit register.
        (GICD_CTLR, 1, unsupported(GICD_CTLR, 1, false)),
        (GICD_CTLR + 1, 1, unsupported(GICD_CTLR + 1, 1, false)),
        (GICD_TYPER, 2, unsupported(GICD_TYPER, 2, false)),
        (
            GICD_ISENABLER + 8,
            8,
            unsupported(GICD_ISENABLER + 8, 8, false),
        ),
        (GICD_ICFGR + 9, 1, unsupported(GICD_ICFGR + 9, 1, false)),
        (GICD_PIDR2, 8, unsupported(GICD_PIDR2, 8, false)),
        (
            GICD_ITARGETSR + 32,
            8,
            unsupported(GICD_ITARGETSR + 32, 8, false),
        ),
        // Not aligned to the access size.
        (GICD_CTLR + 2, 4, misaligned(GICD_CTLR + 2, 4, false)),
        (
            GICD_ISENABLER + 5,
            2,
            misaligned(GICD_ISENABLER + 5, 2, false),
        ),
        (
            GICD_IPRIORITYR + 33,
            4,
            misaligned(GICD_IPRIORITYR + 33, 4, false),
        ),
        (GICD_IROUTER + 4, 8, misaligned(GICD_IROUTER + 4, 8, false)),
    ];
    for (offset, size, expected) in dist {
        assert_eq!(g.dist_read(offset, size), Err(expected));
        let write = g.dist_write(offset, size, u64::MAX).unwrap_err();
        assert!(write.aborts());
        assert_eq!(write.offset(), offset);
        assert!(matches!(
            write,
            VgicError::UnsupportedSize { write: true, .. }
                | VgicError::Misaligned { write: true, .. }
        ));
    }
    let redist = [
        (GICR_CTLR, 8, unsupported(GICR_CTLR, 8, false)),
        (GICR_WAKER, 1, unsupported(GICR_WAKER, 1, false)),
        (GICR_WAKER, 8, misaligned(GICR_WAKER, 8, false)),
        (GICR_TYPER + 2, 2, unsupported(GICR_TYPER + 2, 2, false)),
        (GICR_TYPER + 4, 8, misaligned(GICR_TYPER + 4, 8, false)),
        (
            SGI_FRAME_OFFSET + GICR_ISENABLER0,
            2,
            unsupported(SGI_FRAME_OFFSET + GICR_ISENABLER0, 2, false),
        ),
        (
            REDISTRIBUTOR_SIZE + SGI_FRAME_OFFSET + GICR_IPRIORITYR + 1,
            2,
            misaligned(
                REDISTRIBUTOR_SIZE + SGI_FRAME_OFFSET + GICR_IPRIORITYR + 1,
                2,
                false,
            ),
        ),
    ];
    for (offset, size, expected) in redist {
        assert_eq!(g.redist_read(offset, size), Err(expected));
        assert!(g.redist_write(offset, size, u64::MAX).unwrap_err().aborts());
    }
    assert_eq!(g, before);
    assert_eq!(
        misaligned(0x102, 4, true).to_string(),
        "4-byte write at offset 0x102 misaligned"
    );
    // The allowed 64-bit and 32-bit accesses to 64-bit registers.
    assert!(g.dist_read(GICD_IROUTER, 8).is_ok());
    assert!(g.dist_read(GICD_IROUTER + 4, 4).is_ok());
    assert!(g.redist_read(GICR_TYPER, 8).is_ok());
    assert!(g.redist_read(GICR_TYPER + 4, 4).is_ok());
}

#[test]
fn wakeups_from_register_writes() {
    let mut g = gic(4, 32);
    dw(&mut g, GICD_CTLR, GICD_CTLR::EnableGrp1::SET.value);
    // SPI 50 routed to vCPU 2, pending but disabled: nobody to wake yet.
    g.dist_write(GICD_IROUTER_BASE + 8 * 50, 8, 2).unwrap();
    let (ispendr, bit) = spi_bit(GICD_ISPENDR, 50);
    dw(&mut g, ispendr, bit);
    assert_eq!(g.take_wakeups(), VcpuMask::EMPTY);
    assert!(!g.has_pending(2));
    // Enabling it (from vCPU 0, say) makes it deliverable to vCPU 2.
    let (isenabler, _) = spi_bit(GICD_ISENABLER, 50);
    dw(&mut g, isenabler, bit);
    assert_eq!(g.take_wakeups(), VcpuMask::single(2));
    assert_eq!(g.take_wakeups(), VcpuMask::EMPTY);
    assert!(g.has_pending(2));
    // Disabling the group and enabling it again.
    dw(&mut g, GICD_CTLR, 0);
    assert!(!g.has_pending(2));
    assert_eq!(g.take_wakeups(), VcpuMask::EMPTY);
    dw(&mut g, GICD_CTLR, GICD_CTLR::EnableGrp1::SET.value);
    assert_eq!(g.take_wakeups(), VcpuMask::single(2));
    // An SGI made pending through vCPU 3's redistributor.
    rw(&mut g, sgi_base(3) + GICR_ISENABLER0, 1 << 4);
    rw(&mut g, sgi_base(3) + GICR_ISPENDR0, 1 << 4);
    assert_eq!(g.take_wakeups(), VcpuMask::single(3));
    // Priority changes wake nobody.
    dw(&mut g, GICD_IPRIORITYR + 48, u32::MAX);
    assert_eq!(g.take_wakeups(), VcpuMask::EMPTY);
}

#[test]
fn injection_is_checked_and_private_interrupts_are_per_vcpu() {
    let mut g = gic(2, 32);
    enable(&mut g, 27, 0);
    enable(&mut g, 27, 1);
    assert_eq!(g.set_level(27, 1, true), Ok(VcpuMask::single(1)));
    assert!(g.has_pending(1) && !g.has_pending(0));
    assert_eq!(g.set_level(27, 1, true), Ok(VcpuMask::EMPTY));
    assert_eq!(
        g.set_level(27, 2, true),
        Err(InjectError::NoSuchVcpu { vcpu: 2 })
    );
    assert_eq!(
        g.set_level(64, 0, true),
        Err(InjectError::NoSuchInterrupt { intid: 64 })
    );
    assert_eq!(
        g.raise_edge(1020, 0),
        Err(InjectError::NoSuchInterrupt { intid: 1020 })
    );
    assert_eq!(
        g.set_level(3, 0, true),
        Err(InjectError::NoLine { intid: 3 })
    );
    // An SPI ignores the vCPU argument.
    assert_eq!(g.raise_edge(63, 9), Ok(VcpuMask::EMPTY));
    assert!(status(&g, 63, 0).pending);
    // An SGI raised directly, as GICR_ISPENDR0 would.
    enable(&mut g, 2, 0);
    assert_eq!(g.raise_edge(2, 0), Ok(VcpuMask::single(0)));
    assert_eq!(
        InjectError::NoLine { intid: 3 }.to_string(),
        "SGI 3 has no input line"
    );
    assert!(g.irq_status(64, 0).is_none() && g.irq_status(5, 2).is_none());
    assert!(g.spi_targets(31).is_none());
}

#[test]
fn an_edge_triggered_line_latches_rising_edges() {
    let mut g = gic(1, 32);
    rw(&mut g, sgi_base(0) + GICR_ICFGR1, 1 << 27); // PPI 29: edge.
    enable(&mut g, 29, 0);
    assert_eq!(g.set_level(29, 0, true), Ok(VcpuMask::single(0)));
    g.set_level(29, 0, false).unwrap();
    // The pulse is latched.
    assert_eq!(pending_intids(&g, 0), [29]);
    let lrs = g.fill(0, 4);
    g.sync_back(0, &after_run(&lrs, |_| LrState::Invalid));
    // A line held high is one edge, not a stream.
    g.set_level(29, 0, true).unwrap();
    let lrs = g.fill(0, 4);
    g.sync_back(0, &after_run(&lrs, |_| LrState::Invalid));
    assert!(!g.has_pending(0));
    g.set_level(29, 0, true).unwrap();
    assert!(!g.has_pending(0));
}

#[test]
fn linux_probe_and_first_interrupt() {
    // The sequence of drivers/irqchip/irq-gic-v3.c, then one UART
    // interrupt on vCPU 1.
    let vcpus = 2;
    let mut g = gic(vcpus, 64);
    assert_eq!(dr(&g, GICD_PIDR2) & 0xf0, 0x30);
    let typer = dr(&g, GICD_TYPER);
    let lines = 32 * ((typer & 0x1f) + 1);
    assert_eq!(lines, 96);
    // gic_dist_init.
    dw(&mut g, GICD_CTLR, 0);
    assert_eq!(dr(&g, GICD_CTLR) & GICD_CTLR::RWP::SET.value, 0);
    for i in (32..lines).step_by(32) {
        dw(&mut g, GICD_IGROUPR + u64::from(i / 8), u32::MAX);
    }
    for i in (32..lines).step_by(16) {
        dw(&mut g, GICD_ICFGR + u64::from(i / 4), 0);
    }
    for i in (32..lines).step_by(4) {
        dw(&mut g, GICD_IPRIORITYR + u64::from(i), 0xa0a0_a0a0);
    }
    for i in (32..lines).step_by(32) {
        dw(&mut g, GICD_ICACTIVER + u64::from(i / 8), u32::MAX);
        dw(&mut g, GICD_ICENABLER + u64::from(i / 8), u32::MAX);
    }
    dw(&mut g, GICD_CTLR, (1 << 4) | (1 << 1) | 1);
    let boot_mpidr = vcpu_mpidr(0).value();
    for i in 32..lines {
        g.dist_write(GICD_IROUTER_BASE + 8 * u64::from(i), 8, boot_mpidr)
            .unwrap();
    }
    // gic_populate_rdist for each CPU: scan frames until Last.
    for vcpu in 0..vcpus {
        let mut frame = 0;
        loop {
            assert_eq!(rr(&g, frame + GICR_PIDR2) & 0xf0, 0x30);
            let typer = g.redist_read(frame + GICR_TYPER, 8).unwrap();
            if typer >> 32 == vcpu_mpidr(vcpu).value() {
                break;
            }
            assert_eq!(
                typer & GICR_TYPER::Last::SET.value,
                0,
                "scanned past the last frame"
            );
            frame += REDISTRIBUTOR_SIZE;
        }
        assert_eq!(frame, rd_base(vcpu));
        // gic_enable_redist.
        let waker = rr(&g, frame + GICR_WAKER);
        rw(
            &mut g,
            frame + GICR_WAKER,
            waker & !GICR_WAKER::ProcessorSleep::SET.value,
        );
        assert_eq!(
            rr(&g, frame + GICR_WAKER) & GICR_WAKER::ChildrenAsleep::SET.value,
            0
        );
        // gic_cpu_init.
        let sgi = frame + SGI_FRAME_OFFSET;
        rw(&mut g, sgi + GICR_IGROUPR0, u32::MAX);
        rw(&mut g, sgi + GICR_ICACTIVER0, u32::MAX);
        rw(&mut g, sgi + GICR_ICENABLER0, u32::MAX);
        for i in (0..32).step_by(4) {
            rw(&mut g, sgi + GICR_IPRIORITYR + i, 0xa0a0_a0a0);
        }
        assert_eq!(rr(&g, rd_base(vcpu) + GICR_CTLR) & (1 << 3), 0);
    }
    assert_eq!(g.take_wakeups(), VcpuMask::EMPTY);
    // The PL011 driver requests its IRQ with affinity to CPU 1.
    g.dist_write(GICD_IROUTER_BASE + 8 * 33, 8, vcpu_mpidr(1).value())
        .unwrap();
    dw(&mut g, GICD_ISENABLER + 4, 1 << 1);
    assert_eq!(g.set_level(33, 0, true), Ok(VcpuMask::single(1)));
    let lrs = g.fill(1, 4);
    assert_eq!(lrs.values()[0], 0x50a0_0200_0000_0021);
    assert!(g.fill(0, 4).is_empty());
}

#[test]
fn reset_restores_the_reset_state() {
    let fresh = gic(3, 64);
    let mut g = fresh.clone();
    enable(&mut g, 40, 0);
    g.raise_edge(40, 0).unwrap();
    g.set_level(27, 2, true).unwrap();
    rw(&mut g, rd_base(1) + GICR_WAKER, 0);
    g.dist_write(GICD_IROUTER_BASE + 8 * 40, 8, 2).unwrap();
    let _ = g.fill(2, 4);
    g.reset();
    assert_eq!(g, fresh);
    assert_eq!((g.vcpus(), g.spis()), (3, 64));
    assert_eq!(g.mpidr(2), Some(2));
    assert_eq!(g.mpidr(3), None);
}

#[test]
fn vcpu_masks() {
    let mut m = VcpuMask::EMPTY;
    assert!(m.is_empty());
    m.insert(0);
    m.insert(63);
    m.insert(64);
    assert_eq!(m.len(), 2);
    assert!(m.contains(63) && !m.contains(64) && !m.contains(1));
    assert_eq!(m.iter().collect::<Vec<_>>(), [0, 63]);
    assert_eq!(m.without(0), VcpuMask::single(63));
    assert_eq!(VcpuMask::first_n(3).bits(), 0b111);
    assert_eq!(VcpuMask::first_n(64).bits(), u64::MAX);
    assert_eq!(VcpuMask::first_n(100).bits(), u64::MAX);
    assert_eq!(
        VcpuMask::single(1) | VcpuMask::single(2),
        VcpuMask::from_bits(6)
    );
    assert_eq!(
        VcpuMask::from_bits(6).difference(VcpuMask::single(1)),
        VcpuMask::single(2)
    );
    assert_eq!(alloc::format!("{:?}", VcpuMask::from_bits(5)), "{0, 2}");
}

#[test]
fn random_accesses_never_panic_and_keep_the_model_consistent() {
    let mut rng = prng::Rng::new(0x9e37_79b9_7f4a_7c15);
    let vcpus = 5u16;
    let mut g = gic(vcpus, 96);
    let mut filled: Vec<Option<ListRegisters>> = vec![None; usize::from(vcpus)];
    for _ in 0..100_000 {
        let r = rng.next_u64();
        // Mostly the defined registers, sometimes anywhere.
        let dist_offset = match r & 7 {
            0 => rng.below(0x1_0000),
            1 => rng.next_u64(),
            2 => GICD_IROUTER_BASE + rng.below(0x2000),
            3 => ID_REGISTERS + rng.below(0x30),
            _ => rng.below(0x1000),
        };
        let frame = rng.below(u64::from(vcpus) + 1) * REDISTRIBUTOR_SIZE;
        let redist_offset = match (r >> 3) & 3 {
            0 => rng.next_u64(),
            1 => frame + rng.below(0x20),
            _ => frame + SGI_FRAME_OFFSET + rng.below(0x1000),
        };
        let size = [1, 2, 4, 8, 4, 4, 0, 3, 16, 255][rng.below(10) as usize];
        let value = if r & (1 << 20) != 0 {
            u64::MAX
        } else {
            rng.next_u64()
        };
        let vcpu = rng.below(u64::from(vcpus) + 1) as u16;
        let intid = rng.below(140) as u32;
        match (r >> 8) % 12 {
            0 | 1 => {
                // A read returns no more than its size.
                if let Ok(value) = g.dist_read(dist_offset, size) {
                    assert!(size >= 8 || value >> (8 * u32::from(size)) == 0);
                }
            }
            2 | 3 => {
                let _ = g.dist_write(dist_offset, size, value);
            }
            4 => {
                if let Ok(value) = g.redist_read(redist_offset, size) {
                    assert!(size >= 8 || value >> (8 * u32::from(size)) == 0);
                }
            }
            5 | 6 => {
                let _ = g.redist_write(redist_offset, size, value);
            }
            7 => {
                let _ = g.set_level(intid, vcpu, value & 1 != 0);
            }
            8 => {
                let _ = g.raise_edge(intid, vcpu);
            }
            9 => {
                let _ = g.send_sgi(vcpu, value);
            }
            10 => {
                let n = rng.below(20) as usize;
                let lrs = g.fill(vcpu, n);
                assert!(lrs.len() <= n.min(MAX_LIST_REGISTERS));
                let mut seen: Vec<u32> = lrs.iter().map(|lr| lr.intid).collect();
                seen.sort_unstable();
                seen.dedup();
                assert_eq!(
                    seen.len(),
                    lrs.len(),
                    "an interrupt twice in the list registers"
                );
                if let Some(slot) = filled.get_mut(usize::from(vcpu)) {
                    *slot = Some(lrs);
                }
            }
            _ => {
                // The guest ran: random outcomes, sometimes garbage.
                let Some(lrs) = filled.get_mut(usize::from(vcpu)).and_then(Option::take) else {
                    let _ = g.sync_back(vcpu, &[Lr::decode(rng.next_u64())]);
                    continue;
                };
                let mut read_back: Vec<Lr> = lrs
                    .iter()
                    .map(|lr| Lr {
                        state: LrState::from_bits(rng.next_u64()),
                        ..*lr
                    })
                    .collect();
                if rng.next_u64() & 1 == 0 {
                    read_back.push(Lr::decode(rng.next_u64()));
                }
                let woken = g.sync_back(vcpu, &read_back);
                assert!(!woken.contains(vcpu));
            }
        }
        let _ = g.take_wakeups();
        let ctlr = dr(&g, GICD_CTLR);
        assert_eq!(
            ctlr & (GICD_CTLR::ARE::SET.value | GICD_CTLR::DS::SET.value),
            GICD_CTLR::ARE::SET.value | GICD_CTLR::DS::SET.value
        );
        assert_eq!(ctlr & GICD_CTLR::RWP::SET.value, 0);
        assert_eq!(rr(&g, SGI_FRAME_OFFSET + GICR_ICFGR0), 0xaaaa_aaaa);
        let v = (r >> 32) as u16 % vcpus;
        let pending = g.pending_for(v);
        assert!(
            pending
                .windows(2)
                .all(|w| (w[0].priority, w[0].intid) < (w[1].priority, w[1].intid))
        );
        assert_eq!(
            g.has_pending(v),
            !pending.is_empty()
                || g.irqs.iter().any(
                    |irq| matches!(irq.in_lr, Some(InLr { vcpu, pending: true, .. }) if vcpu == v)
                )
        );
    }
    // Whatever happened, syncing every vCPU leaves nothing in flight.
    for vcpu in 0..vcpus {
        g.sync_back(vcpu, &[]);
    }
    assert!(g.irqs.iter().all(|irq| irq.in_lr.is_none()));
}

#[test]
fn delivery_stats_print_as_the_summary_reads_them() {
    let stats = DeliveryStats {
        sgis: 12,
        timer: 3,
        spi: 1,
        maintenance: 4,
    };
    assert_eq!(
        alloc::format!("{stats}"),
        "sgis 12 timer 3 spi 1 maintenance 4"
    );
}

/// A level-sensitive PPI's pending state is its latch or its line at
/// every point the guest can look (issue 18): GICR_ISPENDR0 and
/// GICR_ICPENDR0 reads, GICR_ISACTIVER0, enabling it, the refill. The
/// sequence of the issue: disabled, its line up (pending), down (not
/// pending), enabled: nothing to deliver, nobody woken, nothing filled.
#[test]
fn a_disabled_level_ppi_reads_and_delivers_as_its_line_says() {
    let mut g = gic(2, 32);
    let (ispendr, icpendr) = (sgi_base(1) + GICR_ISPENDR0, sgi_base(1) + GICR_ICPENDR0);
    let pending = |g: &VGic| {
        let (set, clear) = (rr(g, ispendr) & 1 << 27, rr(g, icpendr) & 1 << 27);
        assert_eq!(set, clear, "GICR_ISPENDR0 and GICR_ICPENDR0 disagree");
        set != 0
    };
    dw(&mut g, GICD_CTLR, GICD_CTLR::EnableGrp1::SET.value);
    assert_eq!(g.set_level(27, 1, true), Ok(VcpuMask::EMPTY), "disabled");
    assert!(pending(&g));
    assert_eq!(rr(&g, sgi_base(1) + GICR_ISACTIVER0) & 1 << 27, 0);
    g.set_level(27, 1, false).unwrap();
    assert!(!pending(&g));
    rw(&mut g, sgi_base(1) + GICR_ISENABLER0, 1 << 27);
    assert_eq!(g.take_wakeups(), VcpuMask::EMPTY);
    assert!(!g.has_pending(1));
    assert!(g.fill(1, 4).is_empty());
    // Up while enabled: delivered; a GICR_ISPENDR0 write latches it, so
    // it stays pending when the line goes down, until GICR_ICPENDR0.
    assert_eq!(g.set_level(27, 1, true), Ok(VcpuMask::single(1)));
    rw(&mut g, sgi_base(1) + GICR_ICENABLER0, 1 << 27);
    rw(&mut g, ispendr, 1 << 27);
    g.set_level(27, 1, false).unwrap();
    assert!(pending(&g), "latched");
    rw(&mut g, icpendr, 1 << 27);
    assert!(!pending(&g));
    // ICPENDR0 clears the latch only: a line that is up keeps it pending.
    g.set_level(27, 1, true).unwrap();
    rw(&mut g, icpendr, 1 << 27);
    assert!(pending(&g));
}

/// A level interrupt the guest acknowledged reads active and, while its
/// line is up, pending too; it is refilled pending and active, which a
/// hardware entry cannot carry, and, once its line is down, active
/// alone, which one can.
#[test]
fn an_acknowledged_level_interrupt_is_active_and_pending_while_its_line_is_up() {
    let mut g = gic(1, 32);
    enable(&mut g, 27, 0);
    g.set_level(27, 0, true).unwrap();
    let lrs = g.fill(0, 4);
    assert_eq!(lrs.state_of(27), Some(LrState::Pending));
    g.sync_back(0, &after_run(&lrs, |_| LrState::Active));
    assert_ne!(rr(&g, sgi_base(0) + GICR_ISACTIVER0) & 1 << 27, 0);
    assert_ne!(rr(&g, sgi_base(0) + GICR_ISPENDR0) & 1 << 27, 0);
    let mut lrs = g.fill(0, 4);
    assert_eq!(lrs.state_of(27), Some(LrState::PendingActive));
    assert!(!lrs.map_hardware(27, 27), "pending and active");
    assert_eq!(lrs.get(0).and_then(|lr| lr.physical), None);
    g.set_level(27, 0, false).unwrap();
    g.sync_back(0, &after_run(&lrs, |_| LrState::PendingActive));
    assert_eq!(rr(&g, sgi_base(0) + GICR_ISPENDR0) & 1 << 27, 0);
    let mut lrs = g.fill(0, 4);
    assert_eq!(lrs.state_of(27), Some(LrState::Active));
    assert!(lrs.map_hardware(27, 27));
    // The guest's deactivation (which ends the physical PPI too) folds
    // back like any other.
    let back: Vec<Lr> = lrs
        .iter()
        .map(|lr| {
            Lr::decode(
                Lr {
                    state: LrState::Invalid,
                    ..*lr
                }
                .encode(),
            )
        })
        .collect();
    assert_eq!(back[0].physical, Some(27));
    g.sync_back(0, &back);
    let s = status(&g, 27, 0);
    assert!(!s.active && !s.pending && s.in_lr.is_none());
}

#[test]
fn hardware_entries_carry_a_physical_intid_and_no_eoi_maintenance() {
    let mut g = gic(1, 32);
    enable(&mut g, 27, 0);
    enable(&mut g, 33, 0);
    g.set_level(27, 0, true).unwrap();
    g.set_level(33, 0, true).unwrap();
    let mut lrs = g.fill(0, 4);
    let timer = lrs.iter().find(|lr| lr.intid == 27).copied().unwrap();
    assert!(timer.eoi_maintenance, "a level entry asks for one");
    assert_eq!(lrs.state_of(40), None);
    assert!(!lrs.map_hardware(40, 27), "no such entry");
    assert!(lrs.map_hardware(27, 30));
    let timer = lrs.iter().find(|lr| lr.intid == 27).copied().unwrap();
    assert_eq!((timer.physical, timer.eoi_maintenance), (Some(30), false));
    // HW (bit 61) and pINTID (bits 44:32) in the register value.
    let value = timer.encode();
    assert_ne!(value & 1 << 61, 0);
    assert_eq!((value >> 32) & 0x1fff, 30);
    assert_eq!(Lr::decode(value), timer);
    // The other entry is untouched.
    let uart = lrs.iter().find(|lr| lr.intid == 33).unwrap();
    assert_eq!((uart.physical, uart.eoi_maintenance), (None, true));
    assert!(LrState::Pending.may_be_hardware() && LrState::Active.may_be_hardware());
    assert!(!LrState::PendingActive.may_be_hardware() && !LrState::Invalid.may_be_hardware());
}

#[test]
fn a_redistributor_offset_names_its_vcpu() {
    let g = gic(3, 32);
    assert_eq!(g.redistributor_vcpu(0), Some(0));
    assert_eq!(g.redistributor_vcpu(sgi_base(1) + GICR_ISPENDR0), Some(1));
    assert_eq!(
        g.redistributor_vcpu(rd_base(2) + REDISTRIBUTOR_SIZE - 4),
        Some(2)
    );
    assert_eq!(g.redistributor_vcpu(rd_base(3)), None);
    assert_eq!(g.redistributor_vcpu(u64::MAX), None);
}

/// A PPI whose line a physical interrupt backs (the virtual timer's) is
/// refilled active only while active with its line up: the physical
/// interrupt brings the pending state back. A latched pending state still
/// goes in; other PPIs and SPIs are untouched; a reset keeps the mark.
#[test]
fn an_active_ppi_with_a_hardware_line_is_refilled_active_only() {
    let mut g = gic(2, 32);
    assert_eq!(g.set_hardware_line(27), Ok(()));
    for intid in [3, 32, 1020] {
        assert_eq!(
            g.set_hardware_line(intid),
            Err(InjectError::NoSuchInterrupt { intid })
        );
    }
    let acknowledged_with_line_up = |g: &mut VGic, intid: u32| {
        enable(g, intid, 1);
        g.set_level(intid, 1, true).unwrap();
        let lrs = g.fill(1, 4);
        g.sync_back(1, &after_run(&lrs, |_| LrState::Active));
        let s = status(g, intid, 1);
        assert!(
            s.active && s.pending,
            "INTID {intid} reads active and pending"
        );
        g.fill(1, 4).state_of(intid)
    };
    assert_eq!(acknowledged_with_line_up(&mut g, 27), Some(LrState::Active));
    assert_eq!(
        acknowledged_with_line_up(&mut g, 26),
        Some(LrState::PendingActive),
        "a PPI without a hardware line"
    );
    // Latched while active: pending and active after all.
    rw(&mut g, sgi_base(1) + GICR_ISPENDR0, 1 << 27);
    assert_eq!(g.fill(1, 4).state_of(27), Some(LrState::PendingActive));
    g.reset();
    assert_eq!(acknowledged_with_line_up(&mut g, 27), Some(LrState::Active));
}
