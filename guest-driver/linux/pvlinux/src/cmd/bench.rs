//! `pvlinux bench`: a UnixBench-like suite whose throughput can be
//! compared across overcommit ratios.
//!
//! Each test ([`pvlinux::suite`] lists them, their operations and their
//! work per copy) runs `--copies` copies in parallel (default: one per
//! online CPU). The copies are created first (processes, or threads for
//! `mmap` and `filewrite`, see [`super::bench_copy`]) and prepare; when
//! every one has said it is ready, the clock (CLOCK_MONOTONIC, through
//! `Instant`) starts and one start byte per copy releases them; it stops
//! when the last one has finished. The result is total operations over
//! that time.
//!
//! A failing test (a system call error, a copy that exits non-zero) is
//! reported and the next test runs; the exit status is then 1.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use pvlinux::EXIT_FAIL;
use pvlinux::lines::{BenchDone, BenchFailed, BenchResult, BenchStart};
use pvlinux::suite::{BENCH_TESTS, BenchTest, CopyKind, CopyPlan, copy_plan};

use super::args::{Options, unknown_option};
use super::bench_copy::{COPY_COMMAND, CopyContext, CopyEnv, Gate, SELF_EXE, describe, run_copy};
use super::{Failure, Outcome, Verdict, environment, sys};

/// The usage line.
pub const USAGE: &str = "pvlinux bench [--tests LIST] [--copies N] [--scale F] [--seed X] \
                         [--shell PATH] [--dir DIR]";

/// `--shell` unless given.
const DEFAULT_SHELL: &str = "/bin/sh";
/// `--dir` unless given.
const DEFAULT_DIR: &str = "/tmp";

struct Settings {
    tests: Vec<BenchTest>,
    copies: u32,
    scale: f64,
    seed: Option<u64>,
    env: CopyEnv,
}

fn parse_tests(list: &str) -> Result<Vec<BenchTest>, Failure> {
    list.split(',')
        .map(|name| {
            BenchTest::from_name(name).ok_or_else(|| {
                Failure::Usage(format!(
                    "unknown bench test {name:?} (tests: {})",
                    BENCH_TESTS.join(", ")
                ))
            })
        })
        .collect()
}

fn settings(mut options: Options) -> Result<Settings, Failure> {
    let mut tests = BenchTest::ALL.to_vec();
    let mut copies = None;
    let mut scale: f64 = 1.0;
    let mut seed = None;
    let mut shell = PathBuf::from(DEFAULT_SHELL);
    let mut dir = PathBuf::from(DEFAULT_DIR);
    while let Some(option) = options.next_option()? {
        match option.as_str() {
            "--tests" => tests = parse_tests(&options.value(&option)?)?,
            "--copies" => {
                let value = options.positive(&option)?;
                copies = Some(
                    u32::try_from(value)
                        .map_err(|_| Failure::Usage(format!("--copies: {value} is too many")))?,
                );
            }
            "--scale" => {
                scale = options.parse(&option, "a number")?;
                if !(scale.is_finite() && scale > 0.0) {
                    return Err(Failure::Usage(format!(
                        "--scale: must be a positive number, not {scale}"
                    )));
                }
            }
            "--seed" => seed = Some(options.parse(&option, "an unsigned 64-bit integer")?),
            "--shell" => shell = options.value(&option)?.into(),
            "--dir" => dir = options.value(&option)?.into(),
            _ => return Err(unknown_option("bench", &option)),
        }
    }
    let copies = match copies {
        Some(copies) => copies,
        None => {
            let cpus = sys::online_cpus()
                .map_err(|error| environment(format!("cannot count online CPUs: {error}")))?;
            u32::try_from(cpus.max(1)).unwrap_or(u32::MAX)
        }
    };
    if !dir.is_dir() {
        return Err(environment(format!(
            "--dir {} is not a directory",
            dir.display()
        )));
    }
    let needs_shell = tests
        .iter()
        .any(|test| matches!(test, BenchTest::Shell1 | BenchTest::Shell8));
    if needs_shell && !shell.is_file() {
        return Err(environment(format!(
            "--shell {} does not exist (shell1 and shell8 need it)",
            shell.display()
        )));
    }
    Ok(Settings {
        tests,
        copies,
        scale,
        seed,
        env: CopyEnv {
            dir,
            shell,
            scratch: format!("pvlinux-bench-{}", std::process::id()),
        },
    })
}

/// Runs `pvlinux bench`.
pub fn run(options: Options) -> Outcome {
    let settings = settings(options)?;
    println!(
        "{}",
        BenchStart {
            tests: settings.tests.iter().map(|t| t.name().to_owned()).collect(),
            copies: settings.copies,
            scale: settings.scale,
            seed: settings.seed,
        }
    );
    let mut verdict = Verdict::Pass;
    for &test in &settings.tests {
        match run_test(test, &settings) {
            Ok(result) => println!("{result}"),
            Err(error) => {
                verdict = Verdict::Fail;
                println!(
                    "{}",
                    BenchFailed {
                        test: test.name().to_owned(),
                        error,
                    }
                );
            }
        }
    }
    println!("{BenchDone}");
    Ok(verdict)
}

/// Removes a test's scratch files when it ends, however it ends.
struct Scratch<'a> {
    env: &'a CopyEnv,
    copies: u32,
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        // Files a test did not create are simply not there.
        for copy in 0..self.copies {
            let (source, destination) = self.env.fcopy_paths(copy);
            let _ = std::fs::remove_file(source);
            let _ = std::fs::remove_file(destination);
        }
        let _ = std::fs::remove_file(self.env.filewrite_path());
    }
}

fn run_test(test: BenchTest, settings: &Settings) -> Result<BenchResult, String> {
    let plans: Vec<CopyPlan> = (0..settings.copies)
        .map(|copy| copy_plan(test, copy, settings.scale, settings.seed))
        .collect();
    let ops = plans.iter().fold(0u64, |sum, plan| {
        sum.saturating_add(test.ops(plan.iterations))
    });
    let _scratch = Scratch {
        env: &settings.env,
        copies: settings.copies,
    };
    if test == BenchTest::Filewrite {
        let path = settings.env.filewrite_path();
        File::create(&path)
            .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
    }
    let elapsed = match test.copy_kind() {
        CopyKind::Process => run_processes(test, &plans, &settings.env)?,
        CopyKind::Thread => run_threads(test, &plans, &settings.env)?,
    };
    Ok(BenchResult::new(test.name(), settings.copies, ops, elapsed))
}

/// Joins up to a few copy failures into one message.
fn summarize(failures: Vec<String>) -> Result<(), String> {
    const SHOWN: usize = 3;
    match failures.len() {
        0 => Ok(()),
        count if count <= SHOWN => Err(failures.join("; ")),
        count => Err(format!(
            "{}; and {} more copies failed",
            failures[..SHOWN].join("; "),
            count - SHOWN
        )),
    }
}

/// Waits until every copy said it is ready (one byte on its own ready
/// pipe), then starts the clock and releases them (one byte each on the
/// shared start pipe). `Err` if a copy died first: only it held its ready
/// pipe's write end, so the read sees EOF.
fn release(
    ready: Vec<Box<dyn Read + '_>>,
    mut start_writer: io::PipeWriter,
) -> Result<Instant, String> {
    let copies = ready.len();
    for (copy, mut ready) in ready.into_iter().enumerate() {
        ready
            .read_exact(&mut [0])
            .map_err(|error| format!("copy {copy} died before it was ready ({error})"))?;
    }
    let started = Instant::now();
    start_writer
        .write_all(&vec![1u8; copies])
        .map_err(|error| format!("cannot release the copies: {error}"))?;
    Ok(started)
}

fn pipe() -> Result<(io::PipeReader, io::PipeWriter), String> {
    io::pipe().map_err(|error| format!("cannot create a pipe: {error}"))
}

/// Every copy a process of its own.
fn run_processes(test: BenchTest, plans: &[CopyPlan], env: &CopyEnv) -> Result<Duration, String> {
    let (start_reader, start_writer) = pipe()?;
    let mut children = Vec::with_capacity(plans.len());
    let mut failures = Vec::new();
    for (copy, plan) in plans.iter().enumerate() {
        match spawn_copy(test, copy, plan, env, &start_reader) {
            Ok(child) => children.push(child),
            Err(error) => {
                failures.push(format!("copy {copy}: cannot start: {error}"));
                break;
            }
        }
    }
    drop(start_reader);
    let started = if failures.is_empty() {
        let mut ready: Vec<Box<dyn Read + '_>> = Vec::with_capacity(children.len());
        for child in &mut children {
            match child.stdout.as_mut() {
                Some(stdout) => ready.push(Box::new(stdout)),
                None => failures.push("a copy has no ready pipe".into()),
            }
        }
        release(ready, start_writer)
    } else {
        // Closing the start pipe tells the started copies to give up.
        drop(start_writer);
        Err(String::new())
    };
    for (copy, child) in children.into_iter().enumerate() {
        if let Err(error) = reap(child) {
            failures.push(format!("copy {copy}: {error}"));
        }
    }
    let elapsed = started.map(|started| started.elapsed());
    summarize(failures)?;
    elapsed
}

fn spawn_copy(
    test: BenchTest,
    copy: usize,
    plan: &CopyPlan,
    env: &CopyEnv,
    start_reader: &io::PipeReader,
) -> io::Result<Child> {
    Command::new(SELF_EXE)
        .arg(COPY_COMMAND)
        .arg(test.name())
        .arg(copy.to_string())
        .arg(plan.iterations.to_string())
        .arg(plan.start_delay_ns.to_string())
        .arg(&env.dir)
        .arg(&env.shell)
        .arg(&env.scratch)
        .stdin(start_reader.try_clone()?)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

/// Waits for a process copy; `Err` with what it said if it failed.
fn reap(mut child: Child) -> Result<(), String> {
    // Read its errors first: it may block writing them until someone does.
    let mut said = String::new();
    let read = match child.stderr.take() {
        Some(mut stderr) => stderr.read_to_string(&mut said).err(),
        None => None,
    };
    let status = child
        .wait()
        .map_err(|error| format!("cannot wait for it: {error}"))?;
    let said = said.trim();
    match (status.success(), read) {
        (true, None) => Ok(()),
        (true, Some(error)) => Err(format!("cannot read its errors: {error}")),
        (false, _) if said.is_empty() => Err(format!("it {}", describe(status))),
        // A copy that failed cleanly said why, and exited with EXIT_FAIL.
        (false, _) if status.code() == Some(i32::from(EXIT_FAIL)) => Err(said.to_owned()),
        (false, _) => Err(format!("{said} (it {})", describe(status))),
    }
}

/// A thread copy's gate and the parent's end of its ready pipe.
fn thread_gate(start_reader: &io::PipeReader) -> io::Result<(Gate, io::PipeReader)> {
    let (ready_reader, ready_writer) = io::pipe()?;
    let gate = Gate {
        ready: File::from(OwnedFd::from(ready_writer)),
        start: File::from(OwnedFd::from(start_reader.try_clone()?)),
    };
    Ok((gate, ready_reader))
}

/// Every copy a thread of this process.
fn run_threads(test: BenchTest, plans: &[CopyPlan], env: &CopyEnv) -> Result<Duration, String> {
    let (start_reader, start_writer) = pipe()?;
    let mut threads = Vec::with_capacity(plans.len());
    let mut ready = Vec::with_capacity(plans.len());
    let mut failures = Vec::new();
    for (copy, &plan) in plans.iter().enumerate() {
        let (gate, ready_reader) = match thread_gate(&start_reader) {
            Ok(pipes) => pipes,
            Err(error) => {
                failures.push(format!("copy {copy}: cannot create its pipes: {error}"));
                break;
            }
        };
        let env = env.clone();
        let copy = copy as u32;
        let spawned = thread::Builder::new()
            .name(format!("{}-{copy}", test.name()))
            .spawn(move || run_copy(test, copy, plan, &env, CopyContext::Thread, gate));
        match spawned {
            Ok(thread) => {
                threads.push(thread);
                ready.push(ready_reader);
            }
            Err(error) => {
                failures.push(format!("copy {copy}: cannot start a thread: {error}"));
                break;
            }
        }
    }
    drop(start_reader);
    let started = if failures.is_empty() {
        release(
            ready
                .iter_mut()
                .map(|reader| Box::new(reader) as Box<dyn Read + '_>)
                .collect(),
            start_writer,
        )
    } else {
        drop(start_writer);
        Err(String::new())
    };
    for (copy, thread) in threads.into_iter().enumerate() {
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => failures.push(format!("copy {copy}: {error}")),
            Err(_) => failures.push(format!("copy {copy}: its thread panicked")),
        }
    }
    let elapsed = started.map(|started| started.elapsed());
    summarize(failures)?;
    elapsed
}
