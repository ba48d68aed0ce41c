//! Data cache maintenance by virtual address (Arm ARM D7.5.9).

use aarch64_cpu::asm::barrier;

/// Smallest D-cache line size of any cache in the system, from CTR_EL0.DminLine.
fn dcache_line_size() -> u64 {
    let ctr: u64;
    // SAFETY: CTR_EL0 is a read-only identification register.
    unsafe {
        core::arch::asm!("mrs {0}, ctr_el0", out(reg) ctr, options(nomem, nostack, preserves_flags))
    };
    4 << ((ctr >> 16) & 0xf)
}

/// Cleans `[base, base + size)` to the point of coherency, so that an
/// observer with its caches off (a CPU before its MMU is on) sees it.
pub fn clean_to_poc(base: u64, size: u64) {
    let line = dcache_line_size();
    let mut addr = base & !(line - 1);
    while addr < base + size {
        // SAFETY: cleaning a line writes back dirty data and never changes
        // what the program observes.
        unsafe {
            core::arch::asm!("dc cvac, {0}", in(reg) addr, options(nostack, preserves_flags))
        };
        addr += line;
    }
    barrier::dsb(barrier::SY);
}

/// Invalidates all instruction caches to the point of unification, inner
/// shareable: code just written (a guest kernel) is fetched fresh.
pub fn invalidate_icache() {
    // SAFETY: invalidating instruction caches only costs refetches.
    unsafe { core::arch::asm!("ic ialluis", options(nostack, preserves_flags)) };
    barrier::dsb(barrier::ISH);
    barrier::isb(barrier::SY);
}
