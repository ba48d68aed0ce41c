//! The guest's per-CPU stacks (`boot::stacks`, as el2's): for each of
//! [`MAX_CPUS`] vCPUs a thread stack (SP_EL0: `main`, `secondary_main` and
//! what they call) and an exception stack (SP_EL1: the fault report runs
//! on it), each above a guard page that the stage-1 map leaves unmapped.
//! A stack that overflows runs into its guard page; the fault is taken on
//! the exception stack and reported as a stack overflow of that vCPU.

use crate::devicetree::MAX_CPUS;

boot::per_cpu_stacks!(cpus: MAX_CPUS, thread: 32 * 1024, exception: 8 * 1024);

/// The guard pages of every slot, for the stage-1 map to leave unmapped.
pub fn guard_pages() -> impl Iterator<Item = u64> {
    let (thread, exception) = (thread_stacks(), exception_stacks());
    (0..MAX_CPUS).flat_map(move |cpu| [thread.guard(cpu).start, exception.guard(cpu).start])
}

/// Whose guard page `address` is in, if any: (vCPU, "thread"/"exception").
pub fn guard_owner(address: u64) -> Option<(usize, &'static str)> {
    let thread = thread_stacks()
        .guard_owner(address)
        .map(|cpu| (cpu, "thread"));
    thread.or_else(|| {
        exception_stacks()
            .guard_owner(address)
            .map(|cpu| (cpu, "exception"))
    })
}
