//! Interrupts taken at EL2.
//!
//! The CPU interface runs with ICC_CTLR_EL1.EOImode = 1: ending an
//! interrupt is a priority drop (ICC_EOIR1_EL1) and a deactivation
//! (ICC_DIR_EL1), and every interrupt gets both at once except the running
//! guest's virtual timer PPI, which stays active after the drop until the
//! guest's hardware list register entry or [`deactivate_vtimer`] ends it
//! (`el2::devices::vtimer`).

use super::regs::{ICC_DIR_EL1, ICC_EOIR1_EL1, acknowledge_interrupt};
use aarch64_cpu::registers::CNTV_CTL_EL0;
use core::sync::atomic::{AtomicU32, Ordering};
use gic_regs::FIRST_SPECIAL;
use tock_registers::interfaces::{Readable, Writeable};

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
/// The INTID of the PMU's overflow interrupt, when guests get the PMU.
static PMU_INTID: AtomicU32 = AtomicU32::new(u32::MAX);

pub fn set_tick_intid(intid: u32) {
    TICK_INTID.store(intid, Ordering::Relaxed);
}

pub fn set_vtimer_intid(intid: u32) {
    VTIMER_INTID.store(intid, Ordering::Relaxed);
}

pub fn set_maintenance_intid(intid: u32) {
    MAINTENANCE_INTID.store(intid, Ordering::Relaxed);
}

pub fn set_pmu_intid(intid: u32) {
    PMU_INTID.store(intid, Ordering::Relaxed);
}

/// Enables the PMU's overflow interrupt on this CPU again.
pub fn enable_pmu_interrupt() {
    if let Some(cpu) = super::cpu::current() {
        super::gic::set_ppi_enabled(cpu.index, PMU_INTID.load(Ordering::Relaxed), true);
    }
}

pub use el2::run::Taken;

/// The INTID of the EL1 virtual timer's PPI at this CPU.
pub fn vtimer_intid() -> u32 {
    VTIMER_INTID.load(Ordering::Relaxed)
}

/// Deactivates the virtual timer's PPI, which [`handle`] left active.
pub fn deactivate_vtimer() {
    deactivate(vtimer_intid());
}

fn drop_priority(intid: u32) {
    ICC_EOIR1_EL1.write(ICC_EOIR1_EL1::INTID.val(u64::from(intid)));
}

fn deactivate(intid: u32) {
    ICC_DIR_EL1.write(ICC_DIR_EL1::INTID.val(u64::from(intid)));
}

/// Acknowledges, handles and ends one interrupt (the running guest's
/// virtual timer PPI: drops its priority and leaves it active).
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
        drop_priority(intid);
        deactivate(intid);
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
        // (`vcpu::save` disables it), so a line that is high now is the
        // running guest's. One that is not was raised for a vCPU since put
        // (the line had not yet dropped when the interrupt was signalled),
        // or dropped by the guest since: nothing to inject, and the PPI is
        // ended like any other.
        if el2::devices::vtimer::line_of(CNTV_CTL_EL0.get()) {
            // Left active: its level line would fire again at once.
            drop_priority(intid);
            return Taken::VirtualTimer;
        }
        if let Some(cpu) = cpu {
            cpu.count_other_irq();
        }
        Taken::Hypervisor
    } else if intid == PMU_INTID.load(Ordering::Relaxed) {
        // Level-sensitive, and high until the guest clears its overflow:
        // disabled before the end of the interrupt, enabled again once
        // the line dropped (the runner samples it).
        if let Some(cpu) = cpu {
            super::gic::set_ppi_enabled(cpu.index, intid, false);
        }
        Taken::PmuOverflow
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
    drop_priority(intid);
    deactivate(intid);
    taken
}
