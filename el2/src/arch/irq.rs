//! Interrupts taken at EL2.

use super::regs::{ICC_EOIR1_EL1, acknowledge_interrupt};
use aarch64_cpu::registers::CNTV_CTL_EL0;
use core::sync::atomic::{AtomicU32, Ordering};
use gic_regs::FIRST_SPECIAL;
use tock_registers::interfaces::{ReadWriteable, Readable, Writeable};

/// The SGI one pCPU sends another to make it look at the scheduler again
/// (a vCPU became runnable there, a vCPU running there has a new virtual
/// interrupt, or a VM it runs is stopping).
pub const RESCHEDULE_SGI: u8 = 0;

/// The SGI the CPU reporting a fatal error sends every other CPU, which
/// parks: nothing runs on after the hypervisor has failed.
pub const STOP_SGI: u8 = 1;

/// The INTID of the EL2 physical timer, from the device tree.
static TICK_INTID: AtomicU32 = AtomicU32::new(u32::MAX);
/// The INTID of the EL1 virtual timer (the running guest's), from the
/// device tree.
static VTIMER_INTID: AtomicU32 = AtomicU32::new(u32::MAX);
/// The INTID of the GIC's virtual CPU interface maintenance interrupt.
static MAINTENANCE_INTID: AtomicU32 = AtomicU32::new(u32::MAX);

pub fn set_tick_intid(intid: u32) {
    TICK_INTID.store(intid, Ordering::Relaxed);
}

pub fn set_vtimer_intid(intid: u32) {
    VTIMER_INTID.store(intid, Ordering::Relaxed);
}

pub fn set_maintenance_intid(intid: u32) {
    MAINTENANCE_INTID.store(intid, Ordering::Relaxed);
}

pub use el2::run::Taken;

/// Acknowledges, handles and ends one interrupt.
pub fn handle() -> Taken {
    let intid = acknowledge_interrupt();
    let cpu = super::cpu::current();
    // INTIDs from 1020 are special: 1023 means nothing was pending.
    if intid >= FIRST_SPECIAL {
        if let Some(cpu) = cpu {
            cpu.count_other_irq();
        }
        return Taken::Hypervisor;
    }
    if intid == u32::from(STOP_SGI) && super::exceptions::fatal_in_progress() {
        ICC_EOIR1_EL1.write(ICC_EOIR1_EL1::INTID.val(u64::from(intid)));
        super::psci::park();
    }
    let taken = if intid == TICK_INTID.load(Ordering::Relaxed) {
        super::timer::on_tick();
        if let Some(cpu) = cpu {
            cpu.count_tick();
        }
        Taken::Hypervisor
    } else if intid == VTIMER_INTID.load(Ordering::Relaxed) {
        // Only a loaded vCPU has its virtual timer enabled in hardware
        // (`VtimerContext::save` disables it), so a timer whose condition
        // holds now is the running guest's. One that does not was raised
        // for a vCPU since put (the line had not yet dropped when the
        // interrupt was signalled): nothing to inject, and masking would
        // silence the current guest's timer.
        let ctl = CNTV_CTL_EL0.extract();
        if ctl.is_set(CNTV_CTL_EL0::ENABLE) && ctl.is_set(CNTV_CTL_EL0::ISTATUS) {
            // Masked before the end of the interrupt, or the
            // level-sensitive line would fire again at once.
            CNTV_CTL_EL0.modify(CNTV_CTL_EL0::IMASK::SET);
            Taken::VirtualTimer
        } else {
            if let Some(cpu) = cpu {
                cpu.count_other_irq();
            }
            Taken::Hypervisor
        }
    } else if intid == MAINTENANCE_INTID.load(Ordering::Relaxed) {
        // The line stays high until the list registers are rewritten, which
        // the run loop does before the next guest entry (IRQs stay masked
        // at EL2 until then).
        Taken::Maintenance
    } else {
        // RESCHEDULE_SGI needs nothing here: the run loop re-reads the
        // scheduler after every interrupt.
        if intid != u32::from(RESCHEDULE_SGI)
            && let Some(cpu) = cpu
        {
            cpu.count_other_irq();
        }
        Taken::Hypervisor
    };
    // ICC_CTLR_EL1.EOImode = 0: this write both drops priority and deactivates.
    ICC_EOIR1_EL1.write(ICC_EOIR1_EL1::INTID.val(u64::from(intid)));
    taken
}
