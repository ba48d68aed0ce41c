//! Portable core of the hypervisor.
//!
//! Everything here is plain Rust that `cargo test` runs on the host: the
//! decisions the hypervisor makes. The folders follow the spine:
//!
//! | folder | decides |
//! |---|---|
//! | [`run`] | the per-pCPU loop over the `Machine` trait: pick, load, enter, decode, handle, decide, put; VM reset and stop |
//! | [`trap`] | what an exit was (ESR, data-abort access, system register) and the exception injected back |
//! | [`services`] | the answers to a guest's calls: SMCCC, PSCI, KVM vendor services, PV records, PTP time |
//! | [`sched`] | which vCPU runs where and when, and directed yield on a spin (`sched::onspin`) |
//! | [`devices`] | the emulated devices: virtual GICv3, PL011, the virtual timer's interrupt line |
//! | [`guest`] | what each VM is given: placement in host RAM, IPA layout, device tree |
//! | [`memory`] | the EL2 memory map, the heap, page ownership |
//! | [`bringup`] | the command line, CPU start order, per-CPU state, the EFI stage |
//! | [`vcpu`] | vCPU identities and guest registers, shared by all |
//!
//! The code that touches hardware lives in the `el2` binary's `arch`
//! module and calls into this library.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod bringup;
pub mod devices;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod guest;
pub mod memory;
pub mod run;
pub mod sched;
pub mod services;
pub mod trap;
pub mod vcpu;

/// Printed at the start of every fatal report; `cargo xtask` treats a console
/// containing it as a failed run whatever QEMU's exit status.
pub const FATAL_MARKER: &str = "EL2 FATAL";

/// The first line the hypervisor prints.
pub const BANNER: &str = concat!("el2: pvlock hypervisor v", env!("CARGO_PKG_VERSION"));
