//! `pvlinux ptp`: reads a PTP clock (Linux's `ptp_kvm`, whose time is the
//! hypervisor's wall clock at the moment of its hypercall) between two
//! reads of the virtual counter, so that a test can compute what the
//! hypervisor's clock said at those counter values and compare.
//!
//! Prints one [`PtpRead`] per reading. Fails if the clock goes backwards
//! or a reading's counter interval is empty.

use std::fs::File;
use std::path::PathBuf;
use std::time::Duration;

use pvlinux::lines::PtpRead;

use super::args::{Options, unknown_option};
use super::{Failure, Outcome, Verdict, environment, sys};

/// The usage line.
pub const USAGE: &str = "pvlinux ptp [--device /dev/ptp0] [--reads N] [--interval-ms MS]";

struct Settings {
    device: PathBuf,
    reads: u32,
    interval: Duration,
}

fn settings(mut options: Options) -> Result<Settings, Failure> {
    let mut settings = Settings {
        device: PathBuf::from("/dev/ptp0"),
        reads: 10,
        interval: Duration::from_millis(100),
    };
    while let Some(option) = options.next_option()? {
        match option.as_str() {
            "--device" => settings.device = options.value(&option)?.into(),
            "--reads" => settings.reads = options.parse(&option, "a count")?,
            "--interval-ms" => {
                settings.interval = Duration::from_millis(options.parse(&option, "milliseconds")?);
            }
            _ => return Err(unknown_option("ptp", &option)),
        }
    }
    if settings.reads == 0 {
        return Err(Failure::Usage("--reads must be at least 1".into()));
    }
    Ok(settings)
}

/// Runs `pvlinux ptp`.
pub fn run(options: Options) -> Outcome {
    let settings = settings(options)?;
    let device = File::open(&settings.device).map_err(|error| {
        environment(format!(
            "cannot open {}: {error} (no PTP clock registered?)",
            settings.device.display()
        ))
    })?;
    let counter =
        || sys::virtual_counter().ok_or_else(|| environment("no virtual counter off arm64"));
    let mut verdict = Verdict::Pass;
    let mut last_ns = 0;
    for read in 1..=settings.reads {
        if read > 1 {
            std::thread::sleep(settings.interval);
        }
        let counter_before = counter()?;
        let clock_ns = sys::device_clock_ns(&device).map_err(|error| {
            environment(format!(
                "clock_gettime on {}: {error}",
                settings.device.display()
            ))
        })?;
        let counter_after = counter()?;
        println!(
            "{}",
            PtpRead {
                read,
                counter_before,
                counter_after,
                clock_ns,
            }
        );
        if clock_ns < last_ns || counter_after < counter_before {
            verdict = Verdict::Fail;
        }
        last_ns = clock_ns;
    }
    Ok(verdict)
}
