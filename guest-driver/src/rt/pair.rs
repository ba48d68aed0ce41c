//! The same checks on a guest's first two vCPUs at once, each checking
//! what it set up only after the other one ran: on one physical CPU, after
//! being descheduled and loaded again. debug-check and pmu-check are built
//! on it:
//!
//! ```ignore
//! fn main() { rt::pair::main("x-check:", "x-check: all checks passed", checks) }
//! fn secondary_main(cpu: usize) { rt::pair::secondary(cpu, checks) }
//! fn checks(me: usize, vcpus: usize) {
//!     // set up, then:
//!     if !rt::pair::wait_for_other(me, vcpus) { rt::pair::failed(); }
//!     // check ...
//! }
//! ```
//!
//! The command line's `timeout=S` (1..=3600, default 30) bounds every
//! wait. [`main`] prints `<prefix> checks on N vCPU(s), timeout=S`, starts
//! vCPU 1, runs the checks on vCPU 0, waits for vCPU 1 and ends with the
//! guest's all-passed line, or a fatal report counting the failures
//! ([`failed`]). Each vCPU keeps its heartbeat going after its checks
//! until the other one is done too, whose last waits need it.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use core::time::Duration;

use spin::Once;

use super::{bootargs, fatal, smp, time};
use crate::println;

/// How many vCPUs run the checks.
pub const VCPUS: usize = 2;

/// Seconds each wait may take (`timeout=`).
static TIMEOUT: Once<Duration> = Once::new();
/// Checks that failed so far.
static FAILURES: AtomicUsize = AtomicUsize::new(0);
/// Per vCPU: its checks are over.
static DONE: [AtomicBool; VCPUS] = [const { AtomicBool::new(false) }; VCPUS];

/// The longest any wait may take.
pub fn timeout() -> Duration {
    *TIMEOUT
        .get()
        .expect("rt::pair::main reads the timeout first")
}

/// Counts a failed check.
pub fn failed() {
    FAILURES.fetch_add(1, Ordering::Relaxed);
}

/// Waits until the other vCPU has run since this call (or finished its
/// checks); true at once with one vCPU. With both on one physical CPU,
/// true means `me` was descheduled and loaded again. False on a timeout.
pub fn wait_for_other(me: usize, vcpus: usize) -> bool {
    if vcpus < 2 {
        return true;
    }
    let other = 1 - me;
    smp::wait_until_ran(other, timeout(), || DONE[other].load(Ordering::Acquire))
}

/// The boot vCPU's part (see the module documentation).
pub fn main(prefix: &str, all_passed: &str, checks: fn(usize, usize)) {
    let args = bootargs();
    let timeout = match args.number("timeout", 30, 1, 3600) {
        Ok(s) => Duration::from_secs(s),
        Err(e) => fatal(format_args!(
            "{prefix} bad bootargs \"{}\": {e}",
            args.as_str()
        )),
    };
    TIMEOUT.call_once(|| timeout);
    let vcpus = smp::count().min(VCPUS);
    println!(
        "{prefix} checks on {vcpus} vCPU(s), timeout={}",
        timeout.as_secs()
    );
    if vcpus > 1 {
        match smp::start(1) {
            Ok(started) if started.wait_entered(timeout) => {}
            Ok(_) => fatal(format_args!("{prefix} vcpu 1 did not start")),
            Err(e) => fatal(format_args!("{prefix} CPU_ON of vcpu 1: {e}")),
        }
    }
    run(0, vcpus, checks);
    if !time::wait_until(timeout, || {
        (0..vcpus).all(|v| DONE[v].load(Ordering::Acquire))
    }) {
        println!(
            "{prefix} vcpu 1 did not finish within {} s",
            timeout.as_secs()
        );
        failed();
    }
    let failures = FAILURES.load(Ordering::Relaxed);
    if failures > 0 {
        fatal(format_args!(
            "{prefix} {failures} check(s) failed, see above"
        ));
    }
    println!("{all_passed}");
}

/// A secondary vCPU's part: vCPU 1 runs the checks.
pub fn secondary(cpu: usize, checks: fn(usize, usize)) {
    if cpu < VCPUS {
        run(cpu, smp::count().min(VCPUS), checks);
    }
}

fn run(me: usize, vcpus: usize, checks: fn(usize, usize)) {
    checks(me, vcpus);
    DONE[me].store(true, Ordering::Release);
    if vcpus > 1 {
        let other = 1 - me;
        smp::beat_until(timeout(), || DONE[other].load(Ordering::Acquire));
    }
}
