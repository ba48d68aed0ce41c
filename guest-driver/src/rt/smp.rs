//! Starting the other CPUs: PSCI CPU_ON into the runtime's secondary entry,
//! each on its own stacks, ending in the guest's `secondary_main(cpu)`.

use super::psci::{self, PsciError};
use super::{head, machine, percpu, time};
use crate::devicetree::MAX_CPUS;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

/// The physical address CPU_ON starts secondaries at (the runtime's
/// `secondary_entry`; the image is identity-mapped).
pub fn entry_point() -> u64 {
    head::secondary_entry as *const () as u64
}

/// The running CPU's logical number (0 = the boot CPU, then the others in
/// device tree order).
pub fn current() -> usize {
    percpu::current()
}

/// How many CPUs the guest has (its device tree's, at most
/// [`MAX_CPUS`](crate::devicetree::MAX_CPUS)).
pub fn count() -> usize {
    machine().cpus().len()
}

/// A CPU that PSCI agreed to start.
#[derive(Clone, Copy, Debug)]
pub struct Started {
    cpu: usize,
    entries_before: u32,
}

impl Started {
    /// Whether the CPU has entered the runtime since CPU_ON (it may have
    /// finished and powered off again since).
    pub fn has_entered(&self) -> bool {
        entries(self.cpu) > self.entries_before
    }

    /// Waits up to `timeout` for the CPU to enter the runtime.
    pub fn wait_entered(&self, timeout: Duration) -> bool {
        time::wait_until(timeout, || self.has_entered())
    }
}

/// Starts logical CPU `cpu` with PSCI CPU_ON; it runs `secondary_main(cpu)`.
/// Returns PSCI's error as is (ALREADY_ON for a running CPU, ...).
///
/// # Panics
/// If `cpu` is not a CPU of this machine.
pub fn start(cpu: usize) -> Result<Started, PsciError> {
    let mpidr = machine().cpus()[cpu];
    let entries_before = entries(cpu);
    psci::cpu_on(mpidr, entry_point(), cpu as u64)?;
    Ok(Started {
        cpu,
        entries_before,
    })
}

fn entries(cpu: usize) -> u32 {
    percpu::PERCPU
        .get(cpu)
        .map_or(0, |p| p.entries.load(Ordering::Acquire))
}

/// Whether `cpu` is running: it has entered the runtime and not yet
/// returned from `secondary_main` (the boot CPU always is).
pub fn is_running(cpu: usize) -> bool {
    percpu::PERCPU
        .get(cpu)
        .is_some_and(|p| p.running.load(Ordering::Acquire))
}

/// Records that the running CPU entered the runtime.
pub(super) fn mark_entered() {
    let cpu = percpu::this_cpu();
    cpu.running.store(true, Ordering::Release);
    cpu.entries.fetch_add(1, Ordering::AcqRel);
}

/// Records that the running CPU is about to call CPU_OFF.
pub(super) fn mark_leaving() {
    percpu::this_cpu().running.store(false, Ordering::Release);
}

/// Per CPU: bumped by [`wait_until_ran`] and [`beat_until`] while it
/// waits, so that another CPU can tell that it ran.
static HEARTBEATS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// Waits up to `timeout` until CPU `other` has run since this call (its
/// heartbeat moved) or `other_done()`, beating meanwhile so that `other`
/// can wait for this CPU the same way. With both on one physical CPU,
/// `true` means this CPU was descheduled and loaded again in between.
/// `false` on a timeout.
pub fn wait_until_ran(other: usize, timeout: Duration, other_done: impl Fn() -> bool) -> bool {
    let me = current();
    let Some(theirs) = HEARTBEATS.get(other) else {
        return false;
    };
    let seen = theirs.load(Ordering::Acquire);
    time::wait_until(timeout, || {
        beat(me);
        theirs.load(Ordering::Acquire) != seen || other_done()
    })
}

/// Keeps this CPU's heartbeat going until `until()` or `timeout`, so that
/// another CPU's [`wait_until_ran`] ends. `false` on a timeout.
pub fn beat_until(timeout: Duration, until: impl Fn() -> bool) -> bool {
    let me = current();
    time::wait_until(timeout, || {
        beat(me);
        until()
    })
}

fn beat(cpu: usize) {
    if let Some(heartbeat) = HEARTBEATS.get(cpu) {
        heartbeat.fetch_add(1, Ordering::AcqRel);
    }
    crate::lock::cpu_relax();
}
