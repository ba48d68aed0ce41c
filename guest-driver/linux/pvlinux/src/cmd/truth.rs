//! `pvlinux truth`: does the hypervisor's per-vCPU preempted flag tell the
//! truth?
//!
//! One worker thread per CPU but the first, pinned there, counts as fast
//! as it can. The observer, pinned to the first CPU, polls for `--seconds`:
//! every worker's counter, the debugfs file (one `pread` at offset 0 into
//! a reused buffer, only the `preempted` column parsed), every counter
//! again. A worker whose flag read 1 across a window of polls must not
//! have counted meanwhile; [`pvlinux::window`] decides which windows can
//! be judged and judges them, live, in constant memory.
//!
//! The CPUs are those the process may run on (every online CPU in a
//! guest). The check fails if any judged window saw progress, if fewer
//! than `--min-windows` windows could be judged (so that it cannot pass
//! vacuously), or if the file says `interface none` (nothing to check).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use pvlinux::lines::{TruthCpu, TruthSummary, TruthTrace, TruthViolation};
use pvlinux::vcpus::{self, Interface};
use pvlinux::window::{DEFAULT_MIN_WINDOW_US, JudgeConfig, Poll, Report, WindowJudge};

use super::args::{Options, missing_option, unknown_option};
use super::{Failure, Outcome, Verdict, environment, require_vcpus, sys};

/// `--min-windows` unless given.
pub const DEFAULT_MIN_WINDOWS: u64 = 20;

/// The usage line.
pub const USAGE: &str =
    "pvlinux truth --seconds S [--debugfs PATH] [--min-windows N] [--min-window-us U]";

struct Settings {
    seconds: u64,
    debugfs: PathBuf,
    min_windows: u64,
    min_window_us: u64,
}

fn settings(mut options: Options) -> Result<Settings, Failure> {
    let mut seconds = None;
    let mut settings = Settings {
        seconds: 0,
        debugfs: PathBuf::from(vcpus::DEFAULT_PATH),
        min_windows: DEFAULT_MIN_WINDOWS,
        min_window_us: DEFAULT_MIN_WINDOW_US,
    };
    while let Some(option) = options.next_option()? {
        match option.as_str() {
            "--seconds" => seconds = Some(options.positive(&option)?),
            "--debugfs" => settings.debugfs = options.value(&option)?.into(),
            "--min-windows" => {
                settings.min_windows = options.parse(&option, "a non-negative integer")?;
            }
            "--min-window-us" => {
                settings.min_window_us = options.parse(&option, "a non-negative integer")?;
            }
            _ => return Err(unknown_option("truth", &option)),
        }
    }
    settings.seconds = seconds.ok_or_else(|| missing_option("truth", "--seconds S"))?;
    Ok(settings)
}

/// A worker's counter, alone on its cache line (128 bytes: some arm64
/// cores fetch lines in pairs), so that the observer's reads and the other
/// workers' writes do not slow it down.
#[repr(align(128))]
#[derive(Default)]
struct PaddedCounter(AtomicU64);

/// The worker threads; stopped and joined when dropped.
struct Workers {
    stop: Arc<AtomicBool>,
    counters: Arc<Vec<PaddedCounter>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Starts one worker pinned to each of `cpus` and waits until every one
    /// is pinned and counting.
    fn start(cpus: &[usize]) -> Result<Self, Failure> {
        let stop = Arc::new(AtomicBool::new(false));
        let counters: Arc<Vec<PaddedCounter>> =
            Arc::new(cpus.iter().map(|_| PaddedCounter::default()).collect());
        let mut workers = Self {
            stop: Arc::clone(&stop),
            counters: Arc::clone(&counters),
            threads: Vec::with_capacity(cpus.len()),
        };
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        for (index, &cpu) in cpus.iter().enumerate() {
            let stop = Arc::clone(&stop);
            let counters = Arc::clone(&counters);
            let pinned = pinned_tx.clone();
            let thread = thread::Builder::new()
                .name(format!("worker-{cpu}"))
                .spawn(move || {
                    let result = sys::pin_current_thread(cpu);
                    let ok = result.is_ok();
                    // The observer waits for every answer; it cannot be gone.
                    let _ = pinned.send((cpu, result));
                    if ok {
                        count_until_stopped(&counters[index].0, &stop);
                    }
                })
                .map_err(|error| environment(format!("cannot start a worker thread: {error}")))?;
            workers.threads.push(thread);
        }
        for _ in cpus {
            match pinned_rx.recv() {
                Ok((_, Ok(()))) => {}
                Ok((cpu, Err(error))) => {
                    return Err(environment(format!(
                        "cannot pin a worker to CPU {cpu}: {error}"
                    )));
                }
                Err(_) => return Err(environment("a worker thread died before pinning")),
            }
        }
        Ok(workers)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            // A worker only counts; it cannot panic.
            let _ = thread.join();
        }
    }
}

fn count_until_stopped(counter: &AtomicU64, stop: &AtomicBool) {
    // Only this thread writes the counter: a load and a store, not a
    // read-modify-write, keep the loop short.
    let mut count = 0u64;
    while !stop.load(Ordering::Relaxed) {
        count += 1;
        counter.store(count, Ordering::Relaxed);
    }
}

/// Runs `pvlinux truth`.
pub fn run(options: Options) -> Outcome {
    let settings = settings(options)?;
    let file = require_vcpus(&settings.debugfs)?;
    if file.interface == Interface::None {
        eprintln!(
            "pvlinux: truth: {} says interface none: the hypervisor offered no PV-lock \
             interface, so there is no preempted flag to check",
            settings.debugfs.display()
        );
        return Ok(Verdict::Fail);
    }

    let cpus = sys::allowed_cpus().map_err(|error| {
        environment(format!("cannot read this process's CPU affinity: {error}"))
    })?;
    let Some((&observer_cpu, worker_cpus)) = cpus.split_first() else {
        return Err(environment("this process may run on no CPU"));
    };
    for &cpu in &cpus {
        let row = u32::try_from(cpu).ok().and_then(|cpu| file.row(cpu));
        if row.is_none() {
            return Err(environment(format!(
                "{} has no row for CPU {cpu}",
                settings.debugfs.display()
            )));
        }
    }
    sys::pin_current_thread(observer_cpu).map_err(|error| {
        environment(format!(
            "cannot pin the observer to CPU {observer_cpu}: {error}"
        ))
    })?;

    let config = JudgeConfig {
        min_window_ns: settings.min_window_us.saturating_mul(1_000),
        ..JudgeConfig::default()
    };
    let workers = Workers::start(worker_cpus)?;
    let report = observe(&settings, worker_cpus, &workers, config)?;
    drop(workers);

    for (stats, &cpu) in report.workers.iter().zip(worker_cpus) {
        println!(
            "{}",
            TruthCpu {
                cpu: cpu as u32,
                samples: stats.samples,
                preempted: stats.preempted,
                judged: stats.judged,
                violations: stats.violations,
            }
        );
    }
    for violation in &report.violations {
        println!(
            "{}",
            TruthViolation {
                cpu: worker_cpus[violation.worker] as u32,
                polls: violation.polls,
                span_us: violation.span_ns / 1_000,
                progress: violation.progress,
            }
        );
    }
    let summary = TruthSummary {
        cpus: cpus.len() as u32,
        polls: report.polls,
        windows: report.windows(),
        judged: report.judged(),
        violations: report.violation_count(),
        preempted_fraction: report.preempted_fraction(),
        max_gap_us: report.max_gap_ns / 1_000,
        discarded: report.discarded(),
    };
    println!("{summary}");

    if summary.violations > 0 {
        eprintln!(
            "pvlinux: truth: {} windows saw a worker progress while its flag said preempted",
            summary.violations
        );
        Ok(Verdict::Fail)
    } else if summary.judged < settings.min_windows {
        eprintln!(
            "pvlinux: truth: judged {} windows, fewer than --min-windows {}: \
             the check proved nothing",
            summary.judged, settings.min_windows
        );
        Ok(Verdict::Fail)
    } else {
        Ok(Verdict::Pass)
    }
}

/// Polls until `--seconds` have passed and judges the polls.
fn observe(
    settings: &Settings,
    worker_cpus: &[usize],
    workers: &Workers,
    config: JudgeConfig,
) -> Result<Report, Failure> {
    let path = settings.debugfs.display();
    let file = File::open(&settings.debugfs)
        .map_err(|error| environment(format!("cannot open {path}: {error}")))?;
    // Worker index by CPU number, for the rows the scan hands back.
    let mut worker_of_cpu = vec![None; worker_cpus.iter().max().map_or(0, |&cpu| cpu + 1)];
    for (index, &cpu) in worker_cpus.iter().enumerate() {
        worker_of_cpu[cpu] = Some(index);
    }
    let workers_count = worker_cpus.len();
    let mut buffer = vec![0u8; 64 << 10];
    let mut before = vec![0u64; workers_count];
    let mut after = vec![0u64; workers_count];
    let mut preempted = vec![false; workers_count];
    // The poll that last found each worker's row (from 1), so that a row
    // missing from one poll is noticed.
    let mut last_seen = vec![0u64; workers_count];
    let mut polls = 0u64;
    let mut judge = WindowJudge::new(workers_count, config);
    let mut trace = Trace::default();

    let deadline = sys::monotonic_ns() + Duration::from_secs(settings.seconds).as_nanos() as u64;
    loop {
        let start_ns = sys::monotonic_ns();
        for (value, counter) in before.iter_mut().zip(workers.counters.iter()) {
            *value = counter.0.load(Ordering::Relaxed);
        }
        // The counter reads above happen before the kernel reads the flags,
        // and those below after: the fences order this CPU's loads around
        // the kernel's (DMB ISH on arm64).
        fence(Ordering::SeqCst);
        let read = file.read_at(&mut buffer, 0);
        fence(Ordering::SeqCst);
        for (value, counter) in after.iter_mut().zip(workers.counters.iter()) {
            *value = counter.0.load(Ordering::Relaxed);
        }
        let end_ns = sys::monotonic_ns();

        let length = read.map_err(|error| environment(format!("cannot read {path}: {error}")))?;
        if length == buffer.len() {
            return Err(environment(format!(
                "{path} is larger than the {} bytes read at once",
                buffer.len()
            )));
        }
        let text = std::str::from_utf8(&buffer[..length])
            .map_err(|_| environment(format!("{path} is not UTF-8 text")))?;
        polls += 1;
        let mut seen = 0;
        vcpus::scan_preempted(text, |cpu, flag| {
            if let Some(Some(index)) = worker_of_cpu.get(cpu as usize) {
                preempted[*index] = flag;
                if last_seen[*index] != polls {
                    last_seen[*index] = polls;
                    seen += 1;
                }
            }
        })
        .map_err(|error| environment(format!("{path}: {error}")))?;
        if seen != workers_count {
            return Err(environment(format!(
                "{path} lost rows of worker CPUs: {seen} of {workers_count} found"
            )));
        }
        judge.push(&Poll {
            start_ns,
            end_ns,
            before: &before,
            preempted: &preempted,
            after: &after,
        });
        trace.record(start_ns, end_ns, &before, &preempted, &after);
        if judge.violations_so_far() > 0 {
            trace.print_once();
        }
        if end_ns >= deadline {
            return Ok(judge.finish());
        }
    }
}

/// The last [`TRACE_POLLS`] polls, printed once, at the first violation:
/// what a failed check shows of the polls that led to it.
#[derive(Default)]
struct Trace {
    polls: std::collections::VecDeque<TruthTrace>,
    printed: bool,
}

/// How many polls [`Trace`] keeps.
const TRACE_POLLS: usize = 64;

impl Trace {
    fn record(
        &mut self,
        start_ns: u64,
        end_ns: u64,
        before: &[u64],
        preempted: &[bool],
        after: &[u64],
    ) {
        if self.printed {
            return;
        }
        if self.polls.len() == TRACE_POLLS {
            self.polls.pop_front();
        }
        self.polls.push_back(TruthTrace {
            start_ns,
            end_ns,
            before: before.to_vec(),
            preempted: preempted.to_vec(),
            after: after.to_vec(),
        });
    }

    fn print_once(&mut self) {
        if std::mem::replace(&mut self.printed, true) {
            return;
        }
        for poll in &self.polls {
            println!("{poll}");
        }
    }
}
