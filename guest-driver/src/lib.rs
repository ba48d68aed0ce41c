//! The guest side of the pvlock hypervisor.
//!
//! This crate holds the paravirtual-service driver ([`pv`]: SMCCC probing,
//! KVM detection, PV-lock and stolen-time set-up, `vcpu_is_preempted`),
//! usable by any Rust guest kernel; the bare-metal runtime the project's
//! own test guests are built on (feature `runtime`, module `rt`) and the
//! portable pieces of it that the host tests check; a PV-aware lock
//! ([`lock`]); a polling GICv3 driver ([`gicv3`]); and the test guests,
//! `src/bin/smp-demo.rs`, `src/bin/pv-check.rs`, `src/bin/lockbench.rs`,
//! `src/bin/irq-check.rs`, `src/bin/level-check.rs`,
//! `src/bin/debug-check.rs`, `src/bin/pmu-check.rs` and `src/bin/hostile.rs`.
//!
//! | module | what | where it runs |
//! |---|---|---|
//! | [`pv`] | the paravirtual driver: probe, per-CPU records, preempted flag, stolen time, kick, directed yield | any guest (`rt::pv` on the runtime), host tests with a fake hypervisor |
//! | [`lock`] | a fair ticket lock whose waiters yield to a preempted holder (PV), and the plain one | any guest (`rt::pv::RtParavirt` on the runtime), host tests with threads and a fake backend |
//! | `rt` | the guests' side of the boot runtime they share with el2 (`boot`: header, relocation, stacks, exception frames, console), the MMU map, PSCI, exception reports, panics, the GIC's frames and CPU interface (`rt::gic`) | guests (`runtime` feature, `target_os = "none"`) |
//! | [`gicv3`] | distributor and redistributor set-up on `gic_regs`' frames, INTIDs, priorities, SGI and routing values | guests (`rt::gic` on the runtime), host tests on in-memory frames |
//! | `devicetree` | what a guest reads from its device tree | guests (`runtime`), host tests |
//! | [`pagetable`] | the stage-1 identity map the runtime turns on | guests, host tests |
//! | [`fault`] | names an exception from ESR/FAR for fault reports | guests, host tests |
//! | [`bootargs`] | `key=value` command lines | guests, host tests |
//! | [`mpidr`] | CPU identities | everywhere |
//! | [`demo`] | smp-demo's workload and console lines (xtask judges by them) | guests, host (xtask) |
//! | [`pvcheck`] | pv-check's expectations, documented answers and console lines (xtask judges by them) | guests, host (xtask) |
//! | [`lockbench`] | lockbench's settings, workload and console lines (xtask judges by them) | guests, host (xtask) |
//! | [`debugcheck`] | debug-check's breakpoint, watchpoint and step register values, syndrome judges and console lines (xtask judges by them) | guests, host (xtask) |
//! | [`pmucheck`] | pmu-check's counters, event types, cycle judge and console lines (xtask judges by them) | guests, host (xtask) |
//! | [`irqcheck`] | irq-check's settings, burst priorities and order, console lines (xtask judges by them) | guests, host (xtask) |
//! | [`levelcheck`] | level-check's settings, checks and console lines (xtask judges by them) | guests, host (xtask) |
//! | [`hostile`] | the hostile guest's attempts, their documented answers, its console lines and their judge | guests, host (xtask) |
//! | [`virtiocheck`] | pv-check's check of QEMU `virt`'s virtio-mmio window: empty transports, QEMU's device-tree nodes | guests, host tests |
#![cfg_attr(not(test), no_std)]

pub mod bootargs;
pub mod debugcheck;
pub mod demo;
#[cfg(any(test, feature = "runtime"))]
pub mod devicetree;
pub mod fault;
pub mod gicv3;
pub mod hostile;
pub mod irqcheck;
pub mod levelcheck;
pub mod lock;
pub mod lockbench;
pub mod mpidr;
pub mod pagetable;
pub mod pmucheck;
pub mod pv;
pub mod pvcheck;
#[cfg(all(feature = "runtime", target_os = "none"))]
pub mod rt;
pub mod virtiocheck;

/// `print!` and `println!` on the guest console (`boot::console`, which
/// the runtime sets up): each `println!` is one whole line, never
/// interleaved with another CPU's.
#[cfg(all(feature = "runtime", target_os = "none"))]
pub use boot::{print, println};

/// Starts every fatal report a guest prints (a panic, an unexpected
/// exception); `cargo xtask` treats a console containing it as a failed
/// guest unless the test expects the crash.
pub const FATAL_MARKER: &str = "GUEST FATAL";
