//! The register map against `arm-gic`'s independent transcription of it,
//! and the values built from the fields against worked-out examples.

use core::mem::offset_of;

use arm_gic::gicv3::registers::{
    Gicd, GicdCtlr, Gicr, GicrCtlr, GicrSgi, GicrTyper, Pidr2, Sgi, Typer, Waker,
};
use tock_registers::fields::FieldValue;

use crate::offset::*;
use crate::*;

/// Each pair: a field of one of this crate's frames, the field of the
/// same register in `arm-gic`'s frame.
macro_rules! same_offsets {
    ($ours:ty, $theirs:ty: $($mine:ident = $other:ident),* $(,)?) => {
        $(
            assert_eq!(
                offset_of!($ours, $mine),
                offset_of!($theirs, $other),
                concat!(stringify!($ours), ".", stringify!($mine)),
            );
        )*
    };
}

#[test]
fn distributor_layout_matches_arm_gic() {
    same_offsets!(DistributorFrame, Gicd:
        ctlr = ctlr, typer = typer, iidr = iidr, typer2 = typer2, statusr = statusr,
        igroupr = igroupr, isenabler = isenabler, icenabler = icenabler,
        ispendr = ispendr, icpendr = icpendr, isactiver = isactiver,
        icactiver = icactiver, ipriorityr = ipriorityr, itargetsr = itargetsr,
        icfgr = icfgr, igrpmodr = igrpmodr, nsacr = nsacr, sgir = sigr,
        cpendsgir = cpendsgir, spendsgir = spendsgir, irouter = irouter,
        id_registers = id_registers0, pidr2 = pidr2, id_registers_end = id_registers7,
    );
    assert_eq!(size_of::<DistributorFrame>(), size_of::<Gicd>());
}

#[test]
fn redistributor_layout_matches_arm_gic() {
    same_offsets!(RdFrame, Gicr:
        ctlr = ctlr, iidr = iidr, typer = typer, statusr = statusr, waker = waker,
        id_registers = id_registers0, pidr2 = pidr2, id_registers_end = id_registers7,
    );
    same_offsets!(SgiFrame, Sgi:
        igroupr0 = igroupr, isenabler0 = isenabler, icenabler0 = icenabler,
        ispendr0 = ispendr, icpendr0 = icpendr, isactiver0 = isactiver,
        icactiver0 = icactiver, ipriorityr = ipriorityr, icfgr0 = icfgr,
        igrpmodr0 = igrpmodr, nsacr = nsacr,
    );
    same_offsets!(RedistributorFrames, GicrSgi: rd = gicr, sgi = sgi);
    assert_eq!(size_of::<RdFrame>(), size_of::<Gicr>());
    assert_eq!(size_of::<SgiFrame>(), size_of::<Sgi>());
    assert_eq!(REDISTRIBUTOR_SIZE, size_of::<GicrSgi>() as u64);
    // GICR_ICFGR1 is the register after GICR_ICFGR0.
    assert_eq!(GICR_ICFGR1, GICR_ICFGR0 + 4);
}

/// The offsets as Arm IHI 0069's register maps list them.
#[test]
fn offsets_are_the_spec_s() {
    assert_eq!(
        [GICD_CTLR, GICD_TYPER, GICD_IIDR, GICD_TYPER2, GICD_STATUSR],
        [0x0000, 0x0004, 0x0008, 0x000c, 0x0010]
    );
    assert_eq!(
        [GICD_IGROUPR, GICD_ISENABLER, GICD_ICENABLER, GICD_ISPENDR],
        [0x0080, 0x0100, 0x0180, 0x0200]
    );
    assert_eq!(
        [
            GICD_ICPENDR,
            GICD_ISACTIVER,
            GICD_ICACTIVER,
            GICD_IPRIORITYR
        ],
        [0x0280, 0x0300, 0x0380, 0x0400]
    );
    assert_eq!(
        [
            GICD_ITARGETSR,
            GICD_ICFGR,
            GICD_IGRPMODR,
            GICD_NSACR,
            GICD_SGIR
        ],
        [0x0800, 0x0c00, 0x0d00, 0x0e00, 0x0f00]
    );
    assert_eq!([GICD_IGRPMODR_END, GICD_CPENDSGIR], [0x0d80, 0x0f10]);
    assert_eq!([GICD_SPENDSGIR, GICD_SPENDSGIR_END], [0x0f20, 0x0f30]);
    assert_eq!([GICD_IROUTER_BASE, GICD_IROUTER], [0x6000, 0x6100]);
    assert_eq!([ID_REGISTERS, GICD_PIDR2], [0xffd0, 0xffe8]);
    assert_eq!(
        [
            GICR_CTLR,
            GICR_IIDR,
            GICR_TYPER,
            GICR_STATUSR,
            GICR_WAKER,
            GICR_PIDR2
        ],
        [0x0000, 0x0004, 0x0008, 0x0010, 0x0014, 0xffe8]
    );
    assert_eq!(
        [
            GICR_IGROUPR0,
            GICR_ISENABLER0,
            GICR_ICENABLER0,
            GICR_ISPENDR0
        ],
        [0x0080, 0x0100, 0x0180, 0x0200]
    );
    assert_eq!(
        [
            GICR_ICPENDR0,
            GICR_ISACTIVER0,
            GICR_ICACTIVER0,
            GICR_IPRIORITYR
        ],
        [0x0280, 0x0300, 0x0380, 0x0400]
    );
    assert_eq!(
        [
            GICR_IPRIORITYR_END,
            GICR_ICFGR0,
            GICR_ICFGR1,
            GICR_IGRPMODR0,
            GICR_NSACR
        ],
        [0x0420, 0x0c00, 0x0c04, 0x0d00, 0x0e00]
    );
    assert_eq!(
        [
            DISTRIBUTOR_SIZE,
            SGI_FRAME_OFFSET,
            REDISTRIBUTOR_SIZE,
            REDISTRIBUTOR_SIZE_VLPIS
        ],
        [0x1_0000, 0x1_0000, 0x2_0000, 0x4_0000]
    );
}

fn bits<R: tock_registers::RegisterLongName>(field: FieldValue<u32, R>) -> u32 {
    field.value
}

#[test]
fn control_and_wake_bits_match_arm_gic() {
    assert_eq!(bits(GICD_CTLR::RWP::SET), GicdCtlr::RWP.bits());
    assert_eq!(bits(GICD_CTLR::DS::SET), GicdCtlr::DS.bits());
    // arm-gic names the bits after the Secure view of a GIC with two
    // Security states; a single Security state has its own fields there.
    assert_eq!(bits(GICD_CTLR::ARE::SET), GicdCtlr::ARE_S.bits());
    assert_eq!(
        bits(GICD_CTLR::EnableGrp1::SET),
        GicdCtlr::EnableGrp1NS.bits()
    );
    assert_eq!(
        bits(GICD_CTLR::EnableGrp0::SET),
        GicdCtlr::EnableGrp0.bits()
    );
    assert_eq!(bits(GICR_CTLR::RWP::SET), GicrCtlr::RWP.bits());
    assert_eq!(bits(GICR_CTLR::UWP::SET), GicrCtlr::UWP.bits());
    assert_eq!(
        bits(GICR_CTLR::EnableLPIs::SET),
        GicrCtlr::EnableLPIs.bits()
    );
    assert_eq!(
        bits(GICR_WAKER::ChildrenAsleep::SET),
        Waker::CHILDREN_ASLEEP.bits()
    );
    assert_eq!(
        bits(GICR_WAKER::ProcessorSleep::SET),
        Waker::PROCESSOR_SLEEP.bits()
    );
}

#[test]
fn type_fields_decode_as_arm_gic_decodes_them() {
    use GICD_TYPER as T;
    let typer = (T::ITLinesNumber.val(30)
        + T::IDbits.val(15)
        + T::A3V::SET
        + T::LPIS::SET
        + T::MBIS::SET
        + T::SecurityExtn::SET
        + T::No1N::SET
        + T::RSS::SET)
        .value;
    let theirs: Typer = zerocopy::transmute!(typer);
    assert_eq!(theirs.num_spis(), 30 * 32);
    assert_eq!(theirs.id_bits(), 16);
    assert!(theirs.affinity_3_supported() && theirs.lpis_supported());
    assert!(theirs.mpis_supported() && theirs.has_security_extension());
    assert!(!theirs.one_of_n_supported());
    assert_eq!(
        theirs.range_selector_support(),
        arm_gic::gicv3::registers::RangeSelectorSupport::AffZero256
    );

    use GICR_TYPER as R;
    let typer = (R::Affinity_Value.val(u64::from(typer_affinity(0x12_0034_5678)))
        + R::Processor_Number.val(0x1234)
        + R::Last::SET
        + R::DirectLPI::SET
        + R::VLPIS::SET
        + R::PLPIS::SET)
        .value;
    let theirs: GicrTyper = zerocopy::transmute!(typer);
    assert_eq!(theirs.core_mpidr(), 0x12_0034_5678);
    assert_eq!(theirs.processor_number(), 0x1234);
    assert!(theirs.last_redistributor() && theirs.direct_lpis_supported());
    assert!(theirs.virtual_lpis_supported() && theirs.physical_lpis_supported());

    let pidr2: Pidr2 = zerocopy::transmute!(PIDR2::ArchRev.val(3).value);
    assert_eq!(pidr2.arch_rev(), 3);
}

#[test]
fn typer_affinity_packs_mpidr_s_affinity() {
    assert_eq!(typer_affinity(0x01_0002_0304), 0x0102_0304);
    assert_eq!(typer_affinity(7), 7);
    // MPIDR_EL1's U and MT bits (30, 24) are not affinity and never get in.
    assert_eq!(typer_affinity(0x4100_0002), 2);
}

/// ICC_SGI1R_EL1 values worked out by hand from the field layout in Arm
/// IHI 0069 (TargetList 15:0, Aff1 23:16, INTID 27:24, Aff2 39:32, IRM 40,
/// RS 47:44, Aff3 55:48).
#[test]
fn sgi1r_values_match_the_field_layout() {
    // SGI 0 to 0.0.0.0: TargetList bit 0.
    assert_eq!(sgi1r_value(0, 0), Some(0x1));
    // SGI 1 to 0.0.0.3: INTID 1 << 24, TargetList bit 3.
    assert_eq!(sgi1r_value(3, 1), Some(0x0000_0000_0100_0008));
    // SGI 11 to 0.0.0.7.
    assert_eq!(sgi1r_value(7, 11), Some(0x0000_0000_0b00_0080));
    // SGI 5 to 0.0.0.17: RS 1 (Aff0 16..=31), TargetList bit 1.
    assert_eq!(sgi1r_value(17, 5), Some(0x0000_1000_0500_0002));
    // SGI 15 to 1.2.3.4: Aff3 1 << 48, Aff2 2 << 32, INTID 15 << 24, Aff1
    // 3 << 16, TargetList bit 4.
    assert_eq!(sgi1r_value(0x01_0002_0304, 15), Some(0x0001_0002_0f03_0010));
    // Aff0 255: RS 15, TargetList bit 15.
    assert_eq!(sgi1r_value(255, 2), Some(0x0000_f000_0200_8000));
    assert_eq!(sgi1r_value(0, 16), None);
}

/// GICR_TYPER of a redistributor for `aff0` (Aff1..Aff3 0), Last if
/// `last`, VLPIS if `vlpis`.
fn typer(aff0: u8, last: bool, vlpis: bool) -> u64 {
    u64::from(aff0) << 32 | u64::from(last) << 4 | u64::from(vlpis) << 1
}

#[test]
fn redistributors_are_found_by_affinity() {
    // Four redistributors of 128 KiB, for 0.0.0.0..=0.0.0.3.
    let frames = [
        typer(0, false, false),
        typer(1, false, false),
        typer(2, false, false),
        typer(3, true, false),
    ];
    let mut reads = std::vec::Vec::new();
    let at = |offset: u64| frames[(offset / REDISTRIBUTOR_SIZE) as usize];
    let region = 4 * REDISTRIBUTOR_SIZE;
    assert_eq!(
        find_redistributor(region, None, 2, |o| {
            reads.push(o);
            at(o)
        }),
        Some(0x4_0000)
    );
    assert_eq!(reads, [0, 0x2_0000, 0x4_0000]);
    assert_eq!(find_redistributor(region, None, 3, at), Some(0x6_0000));
    // Not there: the scan stops at Last, without reading past it.
    assert_eq!(find_redistributor(16 << 20, None, 9, at), None);
    // A region too small for the match.
    assert_eq!(
        find_redistributor(2 * REDISTRIBUTOR_SIZE, None, 2, at),
        None
    );
    // GICv4 redistributors are 256 KiB apart.
    let v4 = [typer(0, false, true), typer(1, true, true)];
    let at_v4 = |o: u64| v4[(o / REDISTRIBUTOR_SIZE_VLPIS) as usize];
    assert_eq!(
        find_redistributor(1 << 20, None, 1, at_v4),
        Some(REDISTRIBUTOR_SIZE_VLPIS)
    );
    // A firmware stride wins over both; zero counts as none.
    let strided = |o: u64| frames[(o / 0x8_0000) as usize];
    assert_eq!(
        find_redistributor(2 << 20, Some(0x8_0000), 3, strided),
        Some(0x18_0000)
    );
    assert_eq!(find_redistributor(region, Some(0), 3, at), Some(0x6_0000));
    // A stride that would step past the end of the address space.
    assert_eq!(find_redistributor(u64::MAX, Some(u64::MAX), 9, |_| 0), None);
}
