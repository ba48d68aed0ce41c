//! The hypervisor's per-CPU stacks (`boot::stacks`): for each of
//! `el2::bringup::smp::MAX_CPUS` CPUs a thread stack (SP_EL0, where hypervisor code
//! runs) and an exception stack (SP_EL2), each above a guard page that the
//! stage-1 map leaves unmapped (`el2::memory::layout`). The entry code
//! (`head.rs`) points each CPU at its own with `boot_set_stacks`.

use el2::bringup::smp::MAX_CPUS;

boot::per_cpu_stacks!(cpus: MAX_CPUS, thread: 32 * 1024, exception: 16 * 1024);
