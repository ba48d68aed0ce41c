//! EL2's spin locks: `spin`'s mutex whose waiters execute the YIELD hint
//! between two looks at the lock, as Linux's `cpu_relax()` does on arm64.
//!
//! On hardware YIELD is a hint with no architectural effect (Arm ARM C6.2
//! "YIELD": it tells an SMT core that the thread could give way). Under
//! QEMU's single-threaded TCG (`-accel tcg,thread=single`, the
//! deterministic `-icount` benchmarks) it matters: QEMU runs the emulated
//! CPUs round robin and switches to the next one at a YIELD, whereas a
//! waiter that spins on ISB keeps the emulator for its whole time budget
//! while the CPU that holds the lock cannot run to release it.

use spin::RelaxStrategy;

/// The relax strategy: one YIELD per look at a busy lock.
pub struct Yield;

impl RelaxStrategy for Yield {
    #[inline(always)]
    fn relax() {
        // SAFETY: YIELD is a hint: no memory, register or flag effect.
        unsafe { core::arch::asm!("yield", options(nomem, nostack, preserves_flags)) };
    }
}

/// A spin lock whose waiters yield ([`Yield`]).
pub type Mutex<T> = spin::mutex::SpinMutex<T, Yield>;
