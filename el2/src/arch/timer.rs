//! The EL2 physical timer (CNTHP): the boot-time periodic tick check and,
//! once VMs run, one-shot deadlines (the end of a vCPU's time slice, or the
//! next blocked vCPU's wake-up while the pCPU idles).

use super::regs::{CNTHP_CVAL_EL2, COUNT64};
use aarch64_cpu::registers::CNTHP_CTL_EL2;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tock_registers::interfaces::{Readable, Writeable};

/// Tick period in counter ticks; the same on every CPU.
static PERIOD: AtomicU64 = AtomicU64::new(0);
/// Periodic (boot tick check) or one-shot (scheduling) mode.
static PERIODIC: AtomicBool = AtomicBool::new(true);

pub fn set_period(ticks: u64) {
    PERIOD.store(ticks.max(1), Ordering::Relaxed);
}

/// Switches every CPU's timer handling to one-shot deadlines.
pub fn set_one_shot() {
    PERIODIC.store(false, Ordering::Relaxed);
}

/// Arms the first periodic tick one period from now.
pub fn start() {
    arm_at(super::cpu::counter() + PERIOD.load(Ordering::Relaxed));
}

/// Fires the timer interrupt when the counter reaches `deadline`.
pub fn arm_at(deadline: u64) {
    CNTHP_CVAL_EL2.write(COUNT64::VALUE.val(deadline));
    CNTHP_CTL_EL2.write(CNTHP_CTL_EL2::ENABLE::SET + CNTHP_CTL_EL2::IMASK::CLEAR);
}

pub fn stop() {
    CNTHP_CTL_EL2.write(CNTHP_CTL_EL2::ENABLE::CLEAR + CNTHP_CTL_EL2::IMASK::SET);
}

/// Called on the timer interrupt. Periodic: moves the deadline one period
/// on (or one period past now, if ticks were missed). One-shot: turns the
/// timer off; whoever armed it looks at the counter. Either way the
/// level-sensitive interrupt is lowered before it is ended.
pub fn on_tick() {
    if !PERIODIC.load(Ordering::Relaxed) {
        stop();
        return;
    }
    let period = PERIOD.load(Ordering::Relaxed);
    let now = super::cpu::counter();
    let mut next = CNTHP_CVAL_EL2.read(COUNT64::VALUE).wrapping_add(period);
    if next <= now {
        next = now + period;
    }
    CNTHP_CVAL_EL2.write(COUNT64::VALUE.val(next));
}
