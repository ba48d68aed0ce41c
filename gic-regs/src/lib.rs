//! The GICv3 register map, once for the whole workspace (Arm IHI 0069,
//! "GIC architecture specification, GIC architecture version 3 and
//! version 4").
//!
//! Three parts of the project speak to a GICv3 and all three take its
//! layout from here:
//! - el2's driver of the physical GIC (`el2/src/arch/gic.rs`) maps the
//!   frame structures onto the hardware;
//! - el2's virtual GIC (`el2::vgic`) emulates the same frames for its
//!   guests by offset, with the offsets in [`offset`] (taken from the
//!   structures, so the two cannot disagree);
//! - the test guests' driver (`guest_driver::gicv3`, `rt::gic`) maps the
//!   structures onto the frames its VM's device tree names, and its host
//!   tests onto ordinary memory.
//!
//! | item | what |
//! |---|---|
//! | [`DistributorFrame`] | the distributor's 64 KiB frame ("The GIC Distributor register map") |
//! | [`RdFrame`], [`SgiFrame`], [`RedistributorFrames`] | a redistributor's RD_base and SGI_base frames ("The GIC Redistributor register map") |
//! | [`GICD_CTLR`], [`GICD_TYPER`], [`GICD_IROUTER`], [`GICR_CTLR`], [`GICR_TYPER`], [`GICR_WAKER`], [`PIDR2`] | the fields of the memory-mapped registers |
//! | [`icc`] | the fields of the CPU interface's ICC_* system registers |
//! | [`offset`] | every register's offset in its frame, for emulators and tests |
//! | [`SGI_COUNT`], [`PRIVATE_COUNT`], [`FIRST_SPECIAL`], [`SPURIOUS`] | the INTID ranges ("INTIDs") |
//! | [`typer_affinity`], [`find_redistributor`], [`sgi1r_value`] | the values a driver builds from the fields |
//!
//! Nothing here touches hardware: the system-register accessors stay with
//! the code that runs at each exception level (el2's `arch::regs`, the
//! guest runtime's `rt::gic`), which types them with the fields of
//! [`icc`]. The structures hold only what some part of the project reads,
//! writes or emulates; the rest of each frame is padding.
//!
//! # Why not the `arm-gic` crate
//!
//! `arm-gic` (0.10) has the same frames as `#[repr(C)]` structures with
//! public fields, and the tests here check every offset against them. It
//! does not serve as the definition itself:
//! - its `GicV3` driver takes one contiguous redistributor region indexed
//!   by a linear CPU number, with the frame size guessed from
//!   GICR_PIDR2/VLPIS, where el2 must find each CPU's redistributor by
//!   affinity across several regions, with the device tree's
//!   `redistributor-stride`, as on HiSilicon D05;
//! - its distributor and redistributor drivers poll RWP and
//!   ChildrenAsleep forever, where el2 and the guests report a GIC that
//!   never settles as an error; they read an interrupt's enable, pending
//!   state, priority or route back only by saving every register into a
//!   context, where the guest checks read one; and its SGI sender cannot
//!   set ICC_SGI1R_EL1.RS, so it cannot reach a PE whose Aff0 is 16 or
//!   more;
//! - its field types only decode (GICD_TYPER and GICR_TYPER have no
//!   public constructor and no field positions), where the virtual GIC
//!   must build those values; GICD_IROUTER's and the ICC_* registers'
//!   fields are private to it;
//! - its frames are safe-mmio structures, written only through a unique
//!   pointer, where the guest driver shares its distributor between CPUs
//!   and the whole workspace types registers with tock-registers; and it
//!   would bring in arm-sysregs' generated crates for a layout.

#![cfg_attr(not(test), no_std)]

mod dist;
pub mod icc;
pub mod offset;
mod redist;

pub use dist::{DISTRIBUTOR_SIZE, DistributorFrame, GICD_CTLR, GICD_IROUTER, GICD_TYPER, PIDR2};
pub use redist::{
    GICR_CTLR, GICR_TYPER, GICR_WAKER, REDISTRIBUTOR_SIZE, REDISTRIBUTOR_SIZE_VLPIS, RdFrame,
    RedistributorFrames, SGI_FRAME_OFFSET, SgiFrame, find_redistributor, typer_affinity,
};

use tock_registers::LocalRegisterCopy;

/// SGIs are INTIDs `0..SGI_COUNT` (Arm IHI 0069, "INTIDs").
pub const SGI_COUNT: u32 = 16;
/// SGIs and PPIs, the interrupts private to one PE, are INTIDs
/// `0..PRIVATE_COUNT`; the SPIs start here ("INTIDs").
pub const PRIVATE_COUNT: u32 = 32;
/// The first special INTID; the SPIs end just below it ("INTIDs",
/// "Special INTIDs").
pub const FIRST_SPECIAL: u32 = 1020;
/// How many SPIs the architecture numbers: INTIDs 32..=1019.
pub const SPI_COUNT: u32 = FIRST_SPECIAL - PRIVATE_COUNT;
/// What ICC_IAR1_EL1 returns when no interrupt is pending that the CPU
/// interface may signal ("Special INTIDs").
pub const SPURIOUS: u32 = 1023;

/// TargetList has one bit for each of the 16 Aff0 values that
/// ICC_SGI1R_EL1.RS selects.
const SGI_TARGETS_PER_RANGE: u64 = 16;

/// The ICC_SGI1R_EL1 value that sends SGI `sgi` to the one PE whose
/// MPIDR_EL1 is `mpidr` (only its affinity fields count): IRM 0, Aff3,
/// Aff2 and Aff1 from `mpidr`, RS and TargetList from its Aff0 (Arm IHI
/// 0069, "ICC_SGI1R_EL1, Interrupt Controller Software Generated Interrupt
/// Group 1 Register"). `None` if `sgi` is not an SGI.
pub fn sgi1r_value(mpidr: u64, sgi: u32) -> Option<u64> {
    use icc::ICC_SGI1R_EL1 as S;
    if sgi >= SGI_COUNT {
        return None;
    }
    // The affinity fields of MPIDR_EL1 sit where GICD_IROUTER has them.
    let target = LocalRegisterCopy::<u64, GICD_IROUTER::Register>::new(mpidr);
    let aff0 = target.read(GICD_IROUTER::Aff0);
    let value = S::Aff3.val(target.read(GICD_IROUTER::Aff3))
        + S::RS.val(aff0 / SGI_TARGETS_PER_RANGE)
        + S::IRM::CLEAR
        + S::Aff2.val(target.read(GICD_IROUTER::Aff2))
        + S::INTID.val(sgi.into())
        + S::Aff1.val(target.read(GICD_IROUTER::Aff1))
        + S::TargetList.val(1 << (aff0 % SGI_TARGETS_PER_RANGE));
    Some(value.value)
}

#[cfg(test)]
mod tests;
