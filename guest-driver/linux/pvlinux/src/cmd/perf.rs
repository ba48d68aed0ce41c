//! `pvlinux perf`: the PMU reaches user space through perf_event_open(2):
//! a cycle counter opened for this thread advances while it computes.
//!
//! Opens the generic CPU-cycles event (which the kernel's PMU driver maps
//! to the PMU's cycle counter), reads it, computes for `--ms` milliseconds
//! of CLOCK_MONOTONIC, reads it again, and prints one
//! [`PerfResult`] line. Passes when the second value is larger.

use std::io::Read;

use pvlinux::lines::PerfResult;

use super::args::{Options, unknown_option};
use super::sys::{self, HardwareEvent};
use super::{Failure, Outcome, Verdict, environment};

/// The usage line.
pub const USAGE: &str = "pvlinux perf [--ms N]";

fn settings(mut options: Options) -> Result<u64, Failure> {
    let mut ms = 100;
    while let Some(option) = options.next_option()? {
        match option.as_str() {
            "--ms" => ms = options.parse(&option, "milliseconds")?,
            _ => return Err(unknown_option("perf", &option)),
        }
    }
    Ok(ms)
}

/// Reads the counter's 8-byte value.
fn value(counter: &mut std::fs::File) -> Result<u64, Failure> {
    let mut bytes = [0; 8];
    counter
        .read_exact(&mut bytes)
        .map_err(|error| environment(format!("cannot read the cycle counter: {error}")))?;
    Ok(u64::from_ne_bytes(bytes))
}

pub fn run(options: Options) -> Outcome {
    let ms = settings(options)?;
    let mut counter = sys::perf_event_open(HardwareEvent::CpuCycles).map_err(|error| {
        environment(format!(
            "perf_event_open of the CPU cycles: {error} (no PMU, or perf_event_paranoid)"
        ))
    })?;
    let first = value(&mut counter)?;
    let end = sys::monotonic_ns() + ms * 1_000_000;
    let mut spins = 0u64;
    while sys::monotonic_ns() < end {
        spins = std::hint::black_box(spins + 1);
    }
    let second = value(&mut counter)?;
    let result = PerfResult {
        event: "cycles".into(),
        first,
        second,
        ms,
    };
    println!("{result}");
    Ok(if result.passed() {
        Verdict::Pass
    } else {
        Verdict::Fail
    })
}
