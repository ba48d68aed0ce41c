//! Interrupts taken at EL2.

use super::regs::{ICC_EOIR1_EL1, ICC_INTID, acknowledge_interrupt};
use core::sync::atomic::{AtomicU32, Ordering};
use tock_registers::interfaces::Writeable;

/// INTIDs 1020..=1023 are special: 1023 means nothing was pending.
const FIRST_SPECIAL_INTID: u32 = 1020;

/// The SGI one pCPU sends another to make it look at the scheduler again
/// (a vCPU became runnable there, or a VM it runs is stopping).
pub const RESCHEDULE_SGI: u8 = 0;

/// The INTID of the EL2 physical timer, from the device tree.
static TICK_INTID: AtomicU32 = AtomicU32::new(u32::MAX);

pub fn set_tick_intid(intid: u32) {
    TICK_INTID.store(intid, Ordering::Relaxed);
}

/// Acknowledges, handles and ends one interrupt.
pub fn handle() {
    let intid = acknowledge_interrupt();
    let cpu = super::cpu::current();
    if intid >= FIRST_SPECIAL_INTID {
        if let Some(cpu) = cpu {
            cpu.count_other_irq();
        }
        return;
    }
    if intid == TICK_INTID.load(Ordering::Relaxed) {
        super::timer::on_tick();
        if let Some(cpu) = cpu {
            cpu.count_tick();
        }
    } else if intid == u32::from(RESCHEDULE_SGI) {
        // Nothing to do here: the run loop re-reads the scheduler after
        // every interrupt.
    } else if let Some(cpu) = cpu {
        cpu.count_other_irq();
    }
    // ICC_CTLR_EL1.EOImode = 0: this write both drops priority and deactivates.
    ICC_EOIR1_EL1.write(ICC_INTID::INTID.val(u64::from(intid)));
}
