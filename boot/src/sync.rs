//! The spin lock of both images: `spin`'s mutex whose waiters execute the
//! YIELD hint between two looks at the lock, as Linux's `cpu_relax()`
//! does on arm64.
//!
//! On hardware YIELD is a hint with no architectural effect (Arm ARM C6.2
//! "YIELD": it tells an SMT core that the thread could give way). Under
//! QEMU's single-threaded TCG (`-accel tcg,thread=single`, the
//! deterministic `-icount` benchmarks) it matters: QEMU runs the emulated
//! CPUs round robin and switches to the next one at a YIELD, whereas a
//! waiter that spins on anything else keeps the emulator for its whole
//! time budget while the CPU that holds the lock cannot run to release it.

use spin::RelaxStrategy;

/// One pause in a spin-wait loop: YIELD on arm64 (on the host, where the
/// portable code is tested, the standard spin hint).
#[inline(always)]
pub fn cpu_relax() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: YIELD is a hint: no memory, register or flag effect.
    unsafe {
        core::arch::asm!("yield", options(nomem, nostack, preserves_flags))
    };
    #[cfg(not(target_arch = "aarch64"))]
    core::hint::spin_loop();
}

/// The relax strategy: one [`cpu_relax`] per look at a busy lock.
pub struct Yield;

impl RelaxStrategy for Yield {
    #[inline(always)]
    fn relax() {
        cpu_relax();
    }
}

/// A spin lock whose waiters yield ([`Yield`]).
pub type SpinMutex<T> = spin::mutex::SpinMutex<T, Yield>;
