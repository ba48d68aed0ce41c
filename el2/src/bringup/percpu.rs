//! Per-CPU state shared between a CPU and the rest of the hypervisor.
//!
//! One [`PerCpu`] exists for each CPU that the hypervisor tries to start,
//! indexed by logical CPU number (0 is the boot CPU). The arch layer keeps a
//! pointer to the running CPU's entry in TPIDR_EL2; fields that other CPUs
//! read are atomics.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use platform::Mpidr;

#[derive(Debug)]
pub struct PerCpu {
    /// Logical CPU number.
    pub index: usize,
    pub mpidr: Mpidr,
    /// Set by the CPU itself once it runs hypervisor code with its MMU on.
    online: AtomicBool,
    /// EL2 physical timer interrupts taken.
    ticks: AtomicU64,
    /// Interrupts acknowledged that were not for this CPU's tick (spurious included).
    other_irqs: AtomicU32,
}

impl PerCpu {
    pub const fn new(index: usize, mpidr: Mpidr) -> Self {
        Self {
            index,
            mpidr,
            online: AtomicBool::new(false),
            ticks: AtomicU64::new(0),
            other_irqs: AtomicU32::new(0),
        }
    }

    pub fn mark_online(&self) {
        self.online.store(true, Ordering::Release);
    }

    pub fn is_online(&self) -> bool {
        self.online.load(Ordering::Acquire)
    }

    /// Called from this CPU's timer interrupt handler only.
    pub fn count_tick(&self) {
        self.ticks.fetch_add(1, Ordering::Relaxed);
    }

    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    pub fn count_other_irq(&self) {
        self.other_irqs.fetch_add(1, Ordering::Relaxed);
    }

    pub fn other_irqs(&self) -> u32 {
        self.other_irqs.load(Ordering::Relaxed)
    }
}
