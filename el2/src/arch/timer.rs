//! The EL2 physical timer (CNTHP): the hypervisor's periodic tick, which
//! later becomes the vCPU time slice.

use super::regs::{CNTHP_CVAL_EL2, COUNT64};
use aarch64_cpu::registers::CNTHP_CTL_EL2;
use core::sync::atomic::{AtomicU64, Ordering};
use tock_registers::interfaces::{Readable, Writeable};

/// Tick period in counter ticks; the same on every CPU.
static PERIOD: AtomicU64 = AtomicU64::new(0);

pub fn set_period(ticks: u64) {
    PERIOD.store(ticks.max(1), Ordering::Relaxed);
}

/// Arms the first tick one period from now.
pub fn start() {
    let now = super::cpu::counter();
    CNTHP_CVAL_EL2.write(COUNT64::VALUE.val(now + PERIOD.load(Ordering::Relaxed)));
    CNTHP_CTL_EL2.write(CNTHP_CTL_EL2::ENABLE::SET + CNTHP_CTL_EL2::IMASK::CLEAR);
}

pub fn stop() {
    CNTHP_CTL_EL2.write(CNTHP_CTL_EL2::ENABLE::CLEAR + CNTHP_CTL_EL2::IMASK::SET);
}

/// Called on the tick interrupt: moves the deadline one period on (or one
/// period past now, if ticks were missed), which lowers the level-sensitive
/// interrupt before it is ended.
pub fn on_tick() {
    let period = PERIOD.load(Ordering::Relaxed);
    let now = super::cpu::counter();
    let mut next = CNTHP_CVAL_EL2.read(COUNT64::VALUE).wrapping_add(period);
    if next <= now {
        next = now + period;
    }
    CNTHP_CVAL_EL2.write(COUNT64::VALUE.val(next));
}
