//! The runtime's GICv3 driver: [`crate::gicv3`]'s operations on the
//! frames the device tree names, mapped as device memory, and the CPU
//! interface's system registers, typed with `gic_regs::icc`'s fields.
//!
//! It polls: PSTATE.I stays masked and the runtime has no IRQ vector, so a
//! guest waits with WFI (which wakes for a pending interrupt whatever
//! PSTATE.I says), takes the most urgent pending interrupt with
//! [`acknowledge`] and completes it with [`end_of_interrupt`].
//!
//! ```ignore
//! let distributor = rt::gic::init()?;   // boot CPU, once: maps the frames, enables Group 1
//! let cpu = rt::gic::init_cpu()?;       // every CPU: its redistributor and CPU interface
//! cpu.redistributor.configure(sgi, 0x80)?;
//! cpu.redistributor.set_enabled(sgi, true)?;
//! rt::gic::send_sgi(target, sgi)?;
//! ```

use aarch64_cpu::asm::barrier;
use aarch64_cpu::registers::MPIDR_EL1;
use core::arch::asm;
use spin::Once;
use tock_registers::interfaces::{ReadWriteable, Readable, Writeable};

use super::{machine, mmu};
use crate::devicetree::GicV3;
use crate::gicv3::{self, Distributor, GicError, IntId, PRIORITY_MASK_OPEN, Redistributor};
use crate::mpidr::Mpidr;
use gic_regs::icc::{
    ICC_CTLR_EL1, ICC_EOIR1_EL1, ICC_IAR1_EL1, ICC_IGRPEN1_EL1, ICC_PMR_EL1, ICC_SGI1R_EL1,
    ICC_SRE_EL1,
};
use gic_regs::{RdFrame, SGI_FRAME_OFFSET, SgiFrame};

// ---- The CPU interface's system registers ------------------------------------

/// Defines a zero-sized handle for one ICC_* system register with
/// tock-registers' `Readable` and/or `Writeable` over MRS/MSR. The
/// registers are reached through the system-register interface, which
/// [`init_cpu`] enables (ICC_SRE_EL1.SRE) before any other is used; none
/// of them touches memory, but the accesses are not marked `nomem`, so the
/// compiler keeps them in program order with the guest's memory accesses.
macro_rules! icc_register {
    (@read $handle:ident, $fields:ident, $name:literal) => {
        impl Readable for $handle {
            type T = u64;
            type R = $fields::Register;
            #[inline]
            fn get(&self) -> u64 {
                let value;
                // SAFETY: MRS of a GIC CPU interface register, accessible
                // at EL1 (see the macro's comment); it reads no memory and
                // has no effect beyond the interface's own state.
                unsafe {
                    asm!(concat!("mrs {}, ", $name), out(reg) value,
                         options(nostack, preserves_flags))
                };
                value
            }
        }
    };
    (@write $handle:ident, $fields:ident, $name:literal) => {
        impl Writeable for $handle {
            type T = u64;
            type R = $fields::Register;
            #[inline]
            fn set(&self, value: u64) {
                // SAFETY: MSR of a GIC CPU interface register, accessible
                // at EL1 (see the macro's comment); it writes no memory and
                // changes only the interrupt controller's state.
                unsafe {
                    asm!(concat!("msr ", $name, ", {}"), in(reg) value,
                         options(nostack, preserves_flags))
                };
            }
        }
    };
    ($(#[$doc:meta])* $handle:ident, $fields:ident, $name:literal, $($access:ident)+) => {
        $(#[$doc])*
        struct $handle;
        $(icc_register!(@$access $handle, $fields, $name);)+
    };
}

icc_register!(
    /// ICC_IAR1_EL1: a read acknowledges the most urgent pending Group 1
    /// interrupt and returns it (1023 if none).
    IccIar1, ICC_IAR1_EL1, "icc_iar1_el1", read
);
icc_register!(
    /// ICC_EOIR1_EL1: a write completes an acknowledged interrupt.
    IccEoir1, ICC_EOIR1_EL1, "icc_eoir1_el1", write
);
icc_register!(
    /// ICC_PMR_EL1: the priority mask.
    IccPmr, ICC_PMR_EL1, "icc_pmr_el1", read write
);
icc_register!(
    /// ICC_IGRPEN1_EL1: the Group 1 enable.
    IccIgrpen1, ICC_IGRPEN1_EL1, "icc_igrpen1_el1", read write
);
icc_register!(
    /// ICC_SRE_EL1: the system-register interface enable.
    IccSre, ICC_SRE_EL1, "icc_sre_el1", read write
);
icc_register!(
    /// ICC_CTLR_EL1: EOImode and the implemented priority bits.
    IccCtlr, ICC_CTLR_EL1, "icc_ctlr_el1", read write
);
icc_register!(
    /// ICC_SGI1R_EL1: a write sends a Group 1 SGI (under a hypervisor it
    /// traps and the hypervisor sends it).
    IccSgi1r, ICC_SGI1R_EL1, "icc_sgi1r_el1", write
);

// ---- The frames --------------------------------------------------------------

/// The GIC the device tree names, once [`init`] mapped its frames and set
/// up the distributor. (Addresses, not register references: those are not
/// `Sync`, and each CPU makes its own.)
static FRAMES: Once<GicV3> = Once::new();

/// The distributor at `base`.
///
/// # Safety
/// `base` must be the distributor frame, mapped as device memory for the
/// rest of the guest's life.
unsafe fn distributor_at(base: u64) -> &'static Distributor {
    // SAFETY: per the caller, the frame is mapped and stays so; the
    // register block's cells are accessed volatile only.
    unsafe { &*(base as *const Distributor) }
}

/// The RD_base frame of the redistributor at `base`.
///
/// # Safety
/// As [`distributor_at`], for a redistributor.
unsafe fn rd_frame_at(base: u64) -> &'static RdFrame {
    // SAFETY: per the caller, the frame is mapped and stays so.
    unsafe { &*(base as *const RdFrame) }
}

/// The SGI_base frame of the redistributor whose RD_base is at `base`.
///
/// # Safety
/// As [`distributor_at`], for a redistributor.
unsafe fn sgi_frame_at(base: u64) -> &'static SgiFrame {
    // SAFETY: per the caller, the redistributor (both its frames) is
    // mapped and stays so.
    unsafe { &*((base + SGI_FRAME_OFFSET) as *const SgiFrame) }
}

/// Maps the GIC's frames as device memory and turns on affinity routing
/// and Group 1 in the distributor. The boot CPU calls it once, before it
/// starts the others (which share its map); later calls return the same
/// distributor.
pub fn init() -> Result<&'static Distributor, GicError> {
    let gic = FRAMES.try_call_once(|| {
        let gic = machine().gic.ok_or(GicError::NotInDeviceTree)?;
        let frames =
            core::iter::once(gic.distributor).chain(gic.redistributor_regions().iter().copied());
        for frame in frames {
            mmu::map_device(frame.start, frame.size).map_err(|_| GicError::Map)?;
        }
        // SAFETY: mapped as device memory just above, for good.
        unsafe { distributor_at(gic.distributor.start) }.enable_group1()?;
        Ok(gic)
    })?;
    // SAFETY: the call that filled FRAMES mapped the distributor for good.
    Ok(unsafe { distributor_at(gic.distributor.start) })
}

/// This CPU's view of the GIC after [`init_cpu`].
#[derive(Clone, Copy)]
pub struct CpuInterface {
    /// The CPU's redistributor (its SGIs and PPIs).
    pub redistributor: Redistributor<'static>,
    /// Where the redistributor's RD_base frame is.
    pub redistributor_base: u64,
    /// Priority bits the CPU interface implements (ICC_CTLR_EL1.PRIbits +
    /// 1; under a hypervisor the virtual interface's).
    pub priority_bits: u32,
}

/// Sets up the calling CPU: wakes its redistributor, enables the
/// system-register interface, opens the priority mask, selects EOImode 0
/// (an EOI also deactivates) and enables Group 1. Every CPU calls it once
/// after [`init`].
pub fn init_cpu() -> Result<CpuInterface, GicError> {
    let mpidr = Mpidr::from_raw(MPIDR_EL1.get());
    let (redistributor, base) = find_redistributor(mpidr)?;
    redistributor.wake()?;
    IccSre.modify(ICC_SRE_EL1::SRE::SET);
    barrier::isb(barrier::SY);
    if !IccSre.is_set(ICC_SRE_EL1::SRE) {
        return Err(GicError::SystemRegistersDisabled);
    }
    IccPmr.write(ICC_PMR_EL1::Priority.val(PRIORITY_MASK_OPEN.into()));
    if IccCtlr.matches_all(ICC_CTLR_EL1::EOImode::DropOnly) {
        IccCtlr.modify(ICC_CTLR_EL1::EOImode::DropAndDeactivate);
    }
    IccIgrpen1.write(ICC_IGRPEN1_EL1::Enable::SET);
    barrier::isb(barrier::SY);
    Ok(CpuInterface {
        redistributor,
        redistributor_base: base,
        priority_bits: IccCtlr.read(ICC_CTLR_EL1::PRIbits) as u32 + 1,
    })
}

/// The redistributor of the PE `mpidr` (any PE's: a GIC lets every PE
/// read every redistributor), after [`init`].
pub fn redistributor_of(mpidr: Mpidr) -> Result<Redistributor<'static>, GicError> {
    find_redistributor(mpidr).map(|(redistributor, _)| redistributor)
}

/// The redistributor of `mpidr` and the address of its RD_base frame.
fn find_redistributor(mpidr: Mpidr) -> Result<(Redistributor<'static>, u64), GicError> {
    let gic = FRAMES.get().ok_or(GicError::NotInDeviceTree)?;
    let base = gic
        .redistributor_regions()
        .iter()
        .find_map(|region| {
            let offset = gic_regs::find_redistributor(region.size, None, mpidr.raw(), |offset| {
                // SAFETY: init mapped every redistributor region, and the
                // scan stays inside this one.
                unsafe { rd_frame_at(region.start + offset) }.typer.get()
            })?;
            Some(region.start + offset)
        })
        .ok_or(GicError::NoRedistributor(mpidr))?;
    // SAFETY: `base` is a redistributor inside a region init mapped.
    let redistributor = unsafe { Redistributor::new(rd_frame_at(base), sgi_frame_at(base)) };
    Ok((redistributor, base))
}

/// Acknowledges the most urgent pending Group 1 interrupt (it becomes
/// active) and returns it; `None` if nothing is pending that the priority
/// mask and the running priority let through. Works with PSTATE.I masked.
pub fn acknowledge() -> Option<IntId> {
    let intid = IntId::from_raw(IccIar1.read(ICC_IAR1_EL1::INTID) as u32);
    (intid != IntId::SPURIOUS).then_some(intid)
}

/// Completes `intid`, which [`acknowledge`] returned: priority drop and
/// deactivation (EOImode 0).
pub fn end_of_interrupt(intid: IntId) {
    IccEoir1.write(ICC_EOIR1_EL1::INTID.val(intid.raw().into()));
    barrier::isb(barrier::SY);
}

/// Sends SGI `sgi` to the CPU `target`. Memory writes before the call are
/// visible to the target when it takes the SGI.
pub fn send_sgi(target: Mpidr, sgi: IntId) -> Result<(), GicError> {
    let value = gicv3::sgi1r_value(target, sgi)?;
    // The target may read what this CPU wrote as soon as it takes the SGI:
    // the writes must be visible before the SGI is generated.
    barrier::dsb(barrier::ISHST);
    IccSgi1r.set(value);
    barrier::isb(barrier::SY);
    Ok(())
}
