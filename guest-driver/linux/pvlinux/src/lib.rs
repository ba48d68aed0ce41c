//! pvlinux: checks and benchmarks that run as a static program inside the
//! hypervisor's Linux guests, and what `cargo xtask` needs to read their
//! results.
//!
//! The program (`src/main.rs`) has these subcommands:
//!
//! | subcommand | checks |
//! |---|---|
//! | `truth` | a worker vCPU whose preempted flag reads 1 makes no progress ([`window`]) |
//! | `stress` | the guest kernel's PV qspinlock slow path (halt and kick) loses no wake-up under contention |
//! | `hotplug` | a CPU taken offline unregisters its PV-lock record and registers it again when back |
//! | `bench` | UnixBench-like throughput under overcommit ([`suite`]) |
//! | `kexec` | reboots into another kernel without the hypervisor, for the release checks |
//! | `ptp` | reads a PTP clock (`ptp_kvm`) between two reads of the virtual counter |
//! | `perf` | a perf_event_open(2) cycle counter advances: the PMU reaches user space (the stock Linux guest's `/init` runs it) |
//!
//! Every line it prints starts with [`lines::PREFIX`]; the result lines
//! are typed in [`lines`]. It exits with [`EXIT_PASS`], [`EXIT_FAIL`]
//! (the check failed) or [`EXIT_USAGE`] (bad arguments, or an environment
//! the check cannot run in).
//!
//! | module | what |
//! |---|---|
//! | [`vcpus`] | the guest kernel's PV-lock debugfs file and its parser |
//! | [`window`] | the `truth` verdict over a sequence of polls |
//! | [`lines`] | every result line: format and parse |
//! | [`suite`] | the `bench` tests, their work per copy and seeded perturbations |

pub mod lines;
pub mod suite;
pub mod vcpus;
pub mod window;

/// The check passed.
pub const EXIT_PASS: u8 = 0;
/// The check failed.
pub const EXIT_FAIL: u8 = 1;
/// Bad arguments, or an environment the check cannot run in.
pub const EXIT_USAGE: u8 = 2;
