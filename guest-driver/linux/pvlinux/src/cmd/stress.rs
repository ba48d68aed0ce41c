//! `pvlinux stress`: contends kernel spinlocks from userland so that the
//! guest kernel's PV qspinlock slow path (a waiter halts, the unlocker
//! kicks it) runs often, and checks that no thread is ever left waiting.
//!
//! `--threads` unpinned threads (4 per online CPU by default) loop over
//! operations on objects they all share, each taking a kernel lock:
//!
//! | operation | kernel lock |
//! |---|---|
//! | write 1 to a non-blocking eventfd, read it | the eventfd's wait-queue spinlock |
//! | FUTEX_WAIT with a stale value (returns EAGAIN), FUTEX_WAKE | the futex hash bucket's spinlock (a wake with no waiter skips it, a wait always takes it) |
//! | `sched_yield` | the run queue's lock |
//! | open and close one file in /tmp | the dentry's lockref |
//! | mmap 64 KiB, touch a page, munmap | mmap_lock, the page-table lock |
//! | write a byte to a pipe they all share, read a byte | the pipe's mutex and wait-queue spinlock |
//!
//! The pipe is blocking: a reader with nothing to read sleeps until some
//! writer wakes it. There is always a byte for every reader (each thread
//! writes before it reads), so a thread that never comes back is a lost
//! wake-up. The main thread samples every thread's operation count each
//! second and reports a thread whose count stayed put for
//! [`STALL_SECONDS`] consecutive samples; after `--seconds` it stops the
//! threads and gives them [`JOIN_DEADLINE`] to finish. Before and after,
//! it reads the debugfs file (if present) for the PV halts and kicks done
//! meanwhile.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use pvlinux::lines::{StressStuck, StressSummary};
use pvlinux::suite::MMAP_BYTES;
use pvlinux::vcpus;

use super::args::{Options, missing_option, unknown_option};
use super::{Failure, Outcome, Verdict, environment, read_vcpus, sys};

/// The usage line.
pub const USAGE: &str = "pvlinux stress --seconds S [--threads T] [--debugfs PATH]";

/// A thread whose count did not move for this many consecutive 1-second
/// samples is stuck.
pub const STALL_SECONDS: u32 = 5;

/// How long stopped threads have to finish.
pub const JOIN_DEADLINE: Duration = Duration::from_secs(10);

/// Default threads per online CPU.
const THREADS_PER_CPU: u64 = 4;

struct Settings {
    seconds: u64,
    threads: Option<u64>,
    debugfs: PathBuf,
}

fn settings(mut options: Options) -> Result<Settings, Failure> {
    let mut seconds = None;
    let mut settings = Settings {
        seconds: 0,
        threads: None,
        debugfs: PathBuf::from(vcpus::DEFAULT_PATH),
    };
    while let Some(option) = options.next_option()? {
        match option.as_str() {
            "--seconds" => seconds = Some(options.positive(&option)?),
            "--threads" => settings.threads = Some(options.positive(&option)?),
            "--debugfs" => settings.debugfs = options.value(&option)?.into(),
            _ => return Err(unknown_option("stress", &option)),
        }
    }
    settings.seconds = seconds.ok_or_else(|| missing_option("stress", "--seconds S"))?;
    Ok(settings)
}

/// The kernel objects every thread works on.
struct SharedObjects {
    eventfd: File,
    futex: AtomicU32,
    pipe_reader: io::PipeReader,
    pipe_writer: io::PipeWriter,
    file: PathBuf,
    stop: AtomicBool,
}

/// One thread's progress, alone on its cache line(s).
#[repr(align(128))]
#[derive(Default)]
struct ThreadState {
    ops: AtomicU64,
    finished: AtomicBool,
    error: Mutex<Option<String>>,
}

/// Removes the scratch file when the run ends, however it ends.
struct ScratchFile(PathBuf);

impl Drop for ScratchFile {
    fn drop(&mut self) {
        // Nothing useful to do if it is already gone.
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs `pvlinux stress`.
pub fn run(options: Options) -> Outcome {
    let settings = settings(options)?;
    let threads = match settings.threads {
        Some(threads) => threads,
        None => {
            let cpus = sys::online_cpus()
                .map_err(|error| environment(format!("cannot count online CPUs: {error}")))?;
            cpus as u64 * THREADS_PER_CPU
        }
    };
    let threads = u32::try_from(threads)
        .map_err(|_| Failure::Usage(format!("--threads: {threads} is too many")))?
        as usize;

    let scratch = ScratchFile(PathBuf::from(format!(
        "/tmp/pvlinux-stress-{}",
        std::process::id()
    )));
    File::create(&scratch.0)
        .map_err(|error| environment(format!("cannot create {}: {error}", scratch.0.display())))?;
    let (pipe_reader, pipe_writer) =
        io::pipe().map_err(|error| environment(format!("cannot create a pipe: {error}")))?;
    let shared = Arc::new(SharedObjects {
        eventfd: sys::eventfd_nonblocking()
            .map_err(|error| environment(format!("cannot create an eventfd: {error}")))?,
        futex: AtomicU32::new(0),
        pipe_reader,
        pipe_writer,
        file: scratch.0.clone(),
        stop: AtomicBool::new(false),
    });

    let pv_before = read_vcpus(&settings.debugfs)?;
    let states: Arc<Vec<ThreadState>> =
        Arc::new((0..threads).map(|_| ThreadState::default()).collect());
    let handles = start_threads(&shared, &states)?;
    let mut stuck = vec![false; threads];
    watch(&states, settings.seconds, &mut stuck);
    shared.stop.store(true, Ordering::Relaxed);
    let errors = join_by_deadline(&states, handles, &mut stuck);

    let pv_after = read_vcpus(&settings.debugfs)?;
    let (pv_waits, pv_kicks) = match (&pv_before, &pv_after) {
        (Some(before), Some(after)) => (
            Some(after.total_waits().saturating_sub(before.total_waits())),
            Some(after.total_kicks().saturating_sub(before.total_kicks())),
        ),
        _ => (None, None),
    };
    let counts: Vec<u64> = states
        .iter()
        .map(|s| s.ops.load(Ordering::Relaxed))
        .collect();
    let summary = StressSummary {
        threads: threads as u32,
        seconds: settings.seconds,
        ops: counts.iter().sum(),
        min_thread_ops: counts.iter().copied().min().unwrap_or(0),
        max_thread_ops: counts.iter().copied().max().unwrap_or(0),
        pv_waits,
        pv_kicks,
        stuck: stuck.iter().filter(|&&stuck| stuck).count() as u32,
    };
    for error in &errors {
        eprintln!("pvlinux: stress error {error}");
    }
    println!("{summary}");
    // Threads left behind end with the process.
    if summary.stuck > 0 || summary.min_thread_ops == 0 || !errors.is_empty() {
        Ok(Verdict::Fail)
    } else {
        Ok(Verdict::Pass)
    }
}

/// Sets a thread's `finished` however the thread ends.
struct FinishedOnDrop<'a>(&'a AtomicBool);

impl Drop for FinishedOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Starts one hammering thread per state.
fn start_threads(
    shared: &Arc<SharedObjects>,
    states: &Arc<Vec<ThreadState>>,
) -> Result<Vec<JoinHandle<()>>, Failure> {
    let mut handles = Vec::with_capacity(states.len());
    for index in 0..states.len() {
        let objects = Arc::clone(shared);
        let states = Arc::clone(states);
        let spawned = thread::Builder::new()
            .name(format!("stress-{index}"))
            .spawn(move || {
                let state = &states[index];
                let _finished = FinishedOnDrop(&state.finished);
                if let Err(error) = hammer(&objects, &state.ops)
                    && let Ok(mut slot) = state.error.lock()
                {
                    *slot = Some(error);
                }
            });
        match spawned {
            Ok(handle) => handles.push(handle),
            Err(error) => {
                // The threads already started stop and end with the process.
                shared.stop.store(true, Ordering::Relaxed);
                return Err(environment(format!(
                    "cannot start stress thread {index}: {error}"
                )));
            }
        }
    }
    Ok(handles)
}

fn report_stuck(index: usize, stuck: &mut [bool]) {
    if !stuck[index] {
        stuck[index] = true;
        println!(
            "{}",
            StressStuck {
                thread: index as u32
            }
        );
    }
}

/// Samples every thread's count once a second for `seconds` seconds and
/// reports a thread whose count stayed put for [`STALL_SECONDS`] samples.
fn watch(states: &[ThreadState], seconds: u64, stuck: &mut [bool]) {
    let mut last = vec![0u64; states.len()];
    let mut unchanged = vec![0u32; states.len()];
    let start = Instant::now();
    for second in 1..=seconds {
        let wake = start + Duration::from_secs(second);
        thread::sleep(wake.saturating_duration_since(Instant::now()));
        for (index, state) in states.iter().enumerate() {
            let ops = state.ops.load(Ordering::Relaxed);
            // A thread that ended on an error is reported as such.
            if ops == last[index] && !state.finished.load(Ordering::Acquire) {
                unchanged[index] += 1;
            } else {
                unchanged[index] = 0;
            }
            last[index] = ops;
            if unchanged[index] >= STALL_SECONDS {
                report_stuck(index, stuck);
            }
        }
    }
}

/// Waits up to [`JOIN_DEADLINE`] for the stopped threads, joins the ones
/// that finished, reports the others stuck (std cannot join with a
/// timeout; they end with the process). Returns the threads' errors.
fn join_by_deadline(
    states: &[ThreadState],
    handles: Vec<JoinHandle<()>>,
    stuck: &mut [bool],
) -> Vec<String> {
    let deadline = Instant::now() + JOIN_DEADLINE;
    let all_finished = || {
        states
            .iter()
            .all(|state| state.finished.load(Ordering::Acquire))
    };
    while !all_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    let mut errors = Vec::new();
    for (index, (state, handle)) in states.iter().zip(handles).enumerate() {
        if !state.finished.load(Ordering::Acquire) {
            report_stuck(index, stuck);
            continue;
        }
        if handle.join().is_err() {
            errors.push(format!("thread {index} panicked"));
        }
        if let Some(error) = state.error.lock().ok().and_then(|mut slot| slot.take()) {
            errors.push(format!("thread {index}: {error}"));
        }
    }
    errors
}

/// One operation on the shared objects.
type Operation = fn(&SharedObjects) -> io::Result<()>;

/// The operations, in the order each thread runs them, with their names
/// for error messages.
const OPERATIONS: [(&str, Operation); 6] = [
    ("eventfd", eventfd_round),
    ("futex", futex_round),
    ("sched_yield", yield_round),
    ("open/close", open_close_round),
    ("mmap/munmap", mmap_round),
    ("pipe", pipe_round),
];

/// One thread's loop until `stop`; counts every operation.
fn hammer(shared: &SharedObjects, ops: &AtomicU64) -> Result<(), String> {
    while !shared.stop.load(Ordering::Relaxed) {
        for (name, operation) in OPERATIONS {
            operation(shared).map_err(|error| format!("{name}: {error}"))?;
            ops.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// `Ok` for an operation that would have blocked or was interrupted: the
/// lock was taken all the same.
fn tolerate_would_block(result: io::Result<usize>) -> io::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(())
        }
        Err(error) => Err(error),
    }
}

fn eventfd_round(shared: &SharedObjects) -> io::Result<()> {
    tolerate_would_block((&shared.eventfd).write(&1u64.to_ne_bytes()))?;
    // Another thread may have drained the counter first.
    tolerate_would_block((&shared.eventfd).read(&mut [0; 8]))
}

fn futex_round(shared: &SharedObjects) -> io::Result<()> {
    let current = shared.futex.load(Ordering::Relaxed);
    // A stale expected value: the kernel locks the bucket, compares, and
    // returns EAGAIN. The 1 ms timeout only guards against a value that
    // matches after all.
    match sys::futex_wait(&shared.futex, current.wrapping_add(1), 1_000_000) {
        Ok(()) => {}
        Err(error)
            if matches!(
                error.raw_os_error(),
                Some(libc::EAGAIN | libc::EINTR | libc::ETIMEDOUT)
            ) => {}
        Err(error) => return Err(error),
    }
    sys::futex_wake(&shared.futex, 1).map(drop)
}

fn yield_round(_: &SharedObjects) -> io::Result<()> {
    thread::yield_now();
    Ok(())
}

fn open_close_round(shared: &SharedObjects) -> io::Result<()> {
    File::open(&shared.file).map(drop)
}

fn mmap_round(_: &SharedObjects) -> io::Result<()> {
    let mut mapping = sys::AnonymousMapping::new(MMAP_BYTES)?;
    mapping.touch_first_page(1);
    mapping.unmap()
}

fn pipe_round(shared: &SharedObjects) -> io::Result<()> {
    (&shared.pipe_writer).write_all(&[1])?;
    // Blocks until some thread's byte is there; one always comes.
    (&shared.pipe_reader).read_exact(&mut [0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_succeeds_on_its_own() {
        let (pipe_reader, pipe_writer) = io::pipe().unwrap();
        let file = std::env::temp_dir().join(format!("pvlinux-stress-test-{}", std::process::id()));
        File::create(&file).unwrap();
        let shared = SharedObjects {
            eventfd: sys::eventfd_nonblocking().unwrap(),
            futex: AtomicU32::new(0),
            pipe_reader,
            pipe_writer,
            file: file.clone(),
            stop: AtomicBool::new(false),
        };
        for (name, operation) in OPERATIONS {
            for _ in 0..3 {
                operation(&shared).unwrap_or_else(|error| panic!("{name}: {error}"));
            }
        }
        std::fs::remove_file(file).unwrap();
    }
}
