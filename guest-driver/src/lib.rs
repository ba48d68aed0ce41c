//! The guest side of the pvlock hypervisor.
//!
//! Today this crate holds the bare-metal runtime the project's own test
//! guests are built on (feature `runtime`, module `rt`), the portable
//! pieces of it that the host tests check, and the first guest,
//! `src/bin/smp-demo.rs`. The paravirtual-service driver (SMCCC probing,
//! KVM detection, PV-lock set-up, `vcpu_is_preempted`) comes next and will
//! live beside them.
//!
//! | module | what | where it runs |
//! |---|---|---|
//! | `rt` | entry code, stacks, MMU, console, PSCI, exceptions, panics | guests (`runtime` feature, `target_os = "none"`) |
//! | `devicetree` | what a guest reads from its device tree | guests (`runtime`), host tests |
//! | [`pagetable`] | the stage-1 identity map the runtime turns on | guests, host tests |
//! | [`fault`] | names an exception from ESR/FAR for fault reports | guests, host tests |
//! | [`bootargs`] | `key=value` command lines | guests, host tests |
//! | [`mpidr`] | CPU identities | everywhere |
//! | [`demo`] | smp-demo's workload and console lines (xtask judges by them) | guests, host (xtask) |
#![cfg_attr(not(test), no_std)]

pub mod bootargs;
pub mod demo;
#[cfg(any(test, feature = "runtime"))]
pub mod devicetree;
pub mod fault;
pub mod mpidr;
pub mod pagetable;
#[cfg(all(feature = "runtime", target_os = "none"))]
pub mod rt;

/// Starts every fatal report a guest prints (a panic, an unexpected
/// exception); `cargo xtask` treats a console containing it as a failed
/// guest unless the test expects the crash.
pub const FATAL_MARKER: &str = "GUEST FATAL";
