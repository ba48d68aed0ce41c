//! Portable core of the hypervisor.
//!
//! Everything here is plain Rust that `cargo test` runs on the host: the
//! decisions the hypervisor makes (how it lays out its own memory, how it
//! brings CPUs up, how it reads its command line, how it names a fault).
//! The code that touches hardware lives in the `el2` binary's `arch`
//! module and calls into this library.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod bootargs;
pub mod efi;
pub mod emul;
pub mod esr;
pub mod exit;
pub mod fault;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod guest;
pub mod heap;
pub mod layout;
pub mod mmio;
pub mod onspin;
pub mod ownership;
pub mod percpu;
pub mod pv;
pub mod run;
pub mod sched;
pub mod smccc;
pub mod smp;
pub mod sysreg;
pub mod vcpu;
pub mod vgic;
pub mod wallclock;

/// Printed at the start of every fatal report; `cargo xtask` treats a console
/// containing it as a failed run whatever QEMU's exit status.
pub const FATAL_MARKER: &str = "EL2 FATAL";

/// The first line the hypervisor prints.
pub const BANNER: &str = concat!("el2: pvlock hypervisor v", env!("CARGO_PKG_VERSION"));
