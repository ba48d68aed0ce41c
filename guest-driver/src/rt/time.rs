//! Time from the generic timer's virtual counter (CNTVCT_EL0, at CNTFRQ_EL0
//! ticks per second). Under the hypervisor the counter keeps running while
//! a vCPU is descheduled, so it measures wall time, not the vCPU's own.

use aarch64_cpu::asm::barrier;
use aarch64_cpu::registers::{CNTFRQ_EL0, CNTV_CTL_EL0, CNTV_CVAL_EL0, CNTVCT_EL0};
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use tock_registers::interfaces::{Readable, Writeable};

/// The counter when the boot CPU entered Rust.
static BOOT_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Records the boot time (the runtime calls this first thing).
pub(super) fn mark_boot() {
    BOOT_COUNTER.store(counter(), Ordering::Relaxed);
}

/// The virtual counter, read after an ISB so it is not read early.
pub fn counter() -> u64 {
    barrier::isb(barrier::SY);
    CNTVCT_EL0.get()
}

/// Counter ticks per second (CNTFRQ_EL0; 62.5 MHz on QEMU 7.2, 1 GHz on
/// QEMU 10: always read it). Never 0.
pub fn frequency() -> u64 {
    CNTFRQ_EL0.get().max(1)
}

/// `ticks` of the counter as a duration.
pub fn to_duration(ticks: u64) -> Duration {
    let freq = frequency();
    let secs = ticks / freq;
    let nanos = (ticks % freq) * 1_000_000_000 / freq;
    Duration::new(secs, nanos as u32)
}

/// A duration in counter ticks (saturating).
pub fn to_ticks(duration: Duration) -> u64 {
    let ticks = duration.as_nanos() * u128::from(frequency()) / 1_000_000_000;
    u64::try_from(ticks).unwrap_or(u64::MAX)
}

/// Time since the runtime started.
pub fn since_boot() -> Duration {
    to_duration(counter().wrapping_sub(BOOT_COUNTER.load(Ordering::Relaxed)))
}

/// A point in time at which a bounded wait gives up.
#[derive(Clone, Copy, Debug)]
pub struct Deadline(u64);

impl Deadline {
    /// `timeout` from now.
    pub fn after(timeout: Duration) -> Self {
        Self(counter().saturating_add(to_ticks(timeout)))
    }

    pub fn passed(&self) -> bool {
        counter() >= self.0
    }
}

/// Spins until `condition` holds or `timeout` passes; true if it held.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Deadline::after(timeout);
    loop {
        if condition() {
            return true;
        }
        if deadline.passed() {
            return condition();
        }
        crate::lock::cpu_relax();
    }
}

/// Waits in WFI until the counter reaches `deadline`, or earlier: the
/// virtual timer is armed for `deadline` so that the hypervisor, which
/// traps WFI, wakes the vCPU then at the latest; a kick (or any other
/// wake-up) ends the wait sooner. The timer is disarmed again on return.
/// Callers check their condition afterwards: the wait may end early.
pub fn wfi_until(deadline: u64) {
    with_virtual_timer(deadline, aarch64_cpu::asm::wfi);
}

/// Runs `f` with the virtual timer armed (and its interrupt unmasked at
/// the timer) for `deadline`, in counter ticks, and disarms it after:
/// whatever waits for an interrupt inside `f` (WFI, PSCI CPU_SUSPEND) ends
/// then at the latest.
pub fn with_virtual_timer<R>(deadline: u64, f: impl FnOnce() -> R) -> R {
    CNTV_CVAL_EL0.set(deadline);
    CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::SET + CNTV_CTL_EL0::IMASK::CLEAR);
    let result = f();
    CNTV_CTL_EL0.set(0);
    result
}
