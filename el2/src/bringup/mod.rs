//! Bringing the hypervisor up: its command line ([`bootargs`]), the order
//! in which CPUs are started and what a failure to start one means
//! ([`smp`]), per-CPU state ([`percpu`]), and the portable parts of its
//! EFI stage ([`efi`]). Decisions only; `arch` starts the CPUs.

pub mod bootargs;
pub mod efi;
pub mod percpu;
pub mod smp;
