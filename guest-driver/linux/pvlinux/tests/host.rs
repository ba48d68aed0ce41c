//! The pvlinux program run on the host: every bench test does real work
//! and prints lines the library parses; bad arguments exit 2; `truth`
//! refuses a kernel without a PV-lock interface and will not pass
//! vacuously; `stress` runs without the debugfs file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use pvlinux::lines::{
    BenchDone, BenchFailed, BenchResult, BenchStart, StressSummary, TruthCpu, TruthSummary,
};
use pvlinux::suite::BENCH_TESTS;
use pvlinux::{EXIT_FAIL, EXIT_PASS, EXIT_USAGE};

/// A directory of its own for one test, removed afterwards.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("pvlinux-host-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn pvlinux(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pvlinux"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

fn status(output: &Output) -> u8 {
    output.status.code().unwrap() as u8
}

/// Every line pvlinux prints carries the prefix.
fn assert_prefixed(output: &Output) {
    for line in stdout(output).lines().chain(stderr(output).lines()) {
        assert!(line.starts_with("pvlinux: "), "{line:?}");
    }
}

#[test]
fn every_bench_test_runs_on_the_host() {
    let dir = TempDir::new("bench");
    let dir_arg = dir.path().to_str().unwrap();
    let output = pvlinux(&[
        "bench", "--scale", "0.05", "--copies", "2", "--dir", dir_arg,
    ]);
    let text = stdout(&output);
    assert_eq!(status(&output), EXIT_PASS, "{text}{}", stderr(&output));
    assert_prefixed(&output);

    let lines: Vec<&str> = text.lines().collect();
    let start = BenchStart::parse(lines[0]).expect(lines[0]);
    assert_eq!(start.tests, BENCH_TESTS);
    assert_eq!((start.copies, start.scale, start.seed), (2, 0.05, None));
    assert_eq!(
        lines.last().copied().and_then(BenchDone::parse),
        Some(BenchDone)
    );
    assert!(
        lines.iter().all(|line| BenchFailed::parse(line).is_none()),
        "{text}"
    );

    let results: Vec<BenchResult> = lines
        .iter()
        .filter_map(|line| BenchResult::parse(line))
        .collect();
    let names: Vec<&str> = results.iter().map(|result| result.test.as_str()).collect();
    assert_eq!(names, BENCH_TESTS);
    for result in &results {
        assert_eq!(result.copies, 2, "{result:?}");
        assert!(result.ops > 0, "{result:?}");
        assert!(result.seconds > 0.0, "{result:?}");
        assert!(result.ops_per_sec > 0.0, "{result:?}");
    }
    // The file tests cleaned up after themselves.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_seed_names_the_same_work() {
    let dir = TempDir::new("seed");
    let dir_arg = dir.path().to_str().unwrap();
    let run = |seed: &str| -> Vec<u64> {
        let output = pvlinux(&[
            "bench",
            "--tests",
            "pipe,syscall,mmap",
            "--copies",
            "3",
            "--scale",
            "0.05",
            "--seed",
            seed,
            "--dir",
            dir_arg,
        ]);
        assert_eq!(status(&output), EXIT_PASS, "{}", stderr(&output));
        let text = stdout(&output);
        assert!(text.starts_with(&format!(
            "pvlinux: bench start tests=pipe,syscall,mmap copies=3 scale=0.05 seed={seed}\n"
        )));
        text.lines()
            .filter_map(BenchResult::parse)
            .map(|result| result.ops)
            .collect()
    };
    let first = run("7");
    assert_eq!(first.len(), 3);
    assert_eq!(run("7"), first);
    assert_ne!(run("8"), first);
}

#[test]
fn an_unknown_bench_test_is_a_usage_error() {
    let output = pvlinux(&["bench", "--tests", "pipe,nosuch"]);
    assert_eq!(status(&output), EXIT_USAGE);
    assert!(
        stderr(&output).contains("\"nosuch\""),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("pvlinux: usage: pvlinux bench"),
        "{}",
        stderr(&output)
    );
    assert!(stdout(&output).is_empty());
    assert_prefixed(&output);
}

#[test]
fn bad_arguments_are_usage_errors() {
    for args in [
        &[][..],
        &["nosuch"],
        &["truth"],
        &["truth", "--seconds", "0"],
        &["truth", "--seconds", "1", "--nosuch", "1"],
        &["stress", "--seconds", "x"],
        &["hotplug"],
        &["hotplug", "--cpu", "-1"],
        &["bench", "--copies", "0"],
        &["bench", "--scale", "-1"],
        &["bench", "--scale", "inf"],
        &["bench", "--seed"],
        &["bench", "extra"],
        &["bench", "--dir", "/nonexistent/pvlinux"],
    ] {
        let output = pvlinux(args);
        assert_eq!(status(&output), EXIT_USAGE, "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).starts_with("pvlinux: error: "), "{args:?}");
        assert_prefixed(&output);
    }
}

const HEADER: &str = "cpu online registered preempted waits kicks";

/// A debugfs file with rows for CPUs 0 to 1023, every flag 0.
fn static_vcpus_file(interface: &str) -> String {
    let mut text = format!("interface {interface}\nqspinlock pv\n{HEADER}\n");
    for cpu in 0..1024 {
        text.push_str(&format!("{cpu} 1 1 0 0 0\n"));
    }
    text
}

#[test]
fn truth_refuses_a_kernel_without_a_pv_lock_interface() {
    let dir = TempDir::new("truth-none");
    let file = dir.file("vcpus", &static_vcpus_file("none"));
    let started = Instant::now();
    let output = pvlinux(&[
        "truth",
        "--seconds",
        "1",
        "--debugfs",
        file.to_str().unwrap(),
    ]);
    assert_eq!(status(&output), EXIT_FAIL, "{}", stderr(&output));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "it ran the check anyway"
    );
    assert!(
        stderr(&output).contains("interface none"),
        "{}",
        stderr(&output)
    );
    assert_prefixed(&output);
}

#[test]
fn truth_does_not_pass_vacuously() {
    let dir = TempDir::new("truth-static");
    let file = dir.file("vcpus", &static_vcpus_file("openeuler"));
    let output = pvlinux(&[
        "truth",
        "--seconds",
        "1",
        "--debugfs",
        file.to_str().unwrap(),
    ]);
    assert_eq!(
        status(&output),
        EXIT_FAIL,
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    assert_prefixed(&output);
    let text = stdout(&output);
    let summary = text.lines().find_map(TruthSummary::parse).expect(&text);
    assert!(summary.polls > 0, "{summary:?}");
    assert_eq!(
        (
            summary.windows,
            summary.judged,
            summary.violations,
            summary.discarded
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(summary.preempted_fraction, 0.0);
    let workers: Vec<TruthCpu> = text.lines().filter_map(TruthCpu::parse).collect();
    assert_eq!(workers.len() as u32, summary.cpus - 1);
    for worker in workers {
        assert_eq!(worker.samples, summary.polls);
        assert_eq!(
            (worker.preempted, worker.judged, worker.violations),
            (0, 0, 0)
        );
    }
    assert!(
        stderr(&output).contains("--min-windows"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn truth_and_hotplug_need_the_debugfs_file() {
    let dir = TempDir::new("absent");
    let absent = dir.path().join("vcpus");
    let absent = absent.to_str().unwrap();
    for args in [
        &["truth", "--seconds", "1", "--debugfs", absent][..],
        &["hotplug", "--cpu", "1", "--debugfs", absent],
    ] {
        let output = pvlinux(args);
        assert_eq!(status(&output), EXIT_USAGE, "{args:?}");
        assert!(stderr(&output).contains(absent), "{}", stderr(&output));
        assert_prefixed(&output);
    }
    let malformed = dir.file(
        "malformed",
        "interface openeuler\nqspinlock pv\ncpu online\n",
    );
    let output = pvlinux(&[
        "truth",
        "--seconds",
        "1",
        "--debugfs",
        malformed.to_str().unwrap(),
    ]);
    assert_eq!(status(&output), EXIT_USAGE);
    assert!(
        stderr(&output).contains("line 3: no column `registered`"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn stress_runs_without_the_debugfs_file() {
    let dir = TempDir::new("stress");
    let absent = dir.path().join("vcpus");
    let output = pvlinux(&[
        "stress",
        "--seconds",
        "1",
        "--threads",
        "4",
        "--debugfs",
        absent.to_str().unwrap(),
    ]);
    assert_eq!(
        status(&output),
        EXIT_PASS,
        "{}{}",
        stdout(&output),
        stderr(&output)
    );
    assert_prefixed(&output);
    let text = stdout(&output);
    let summary = text.lines().find_map(StressSummary::parse).expect(&text);
    assert_eq!((summary.threads, summary.seconds, summary.stuck), (4, 1, 0));
    assert_eq!((summary.pv_waits, summary.pv_kicks), (None, None));
    assert!(text.contains(" pv_waits=-1 pv_kicks=-1 "), "{text}");
    assert!(summary.min_thread_ops > 0 && summary.min_thread_ops <= summary.max_thread_ops);
    assert!(summary.ops >= summary.max_thread_ops);
}

#[test]
fn stress_reports_the_pv_counters_it_finds() {
    let dir = TempDir::new("stress-pv");
    let file = dir.file(
        "vcpus",
        &format!("interface seed-v2\nqspinlock pv\n{HEADER}\n0 1 1 0 10 20\n1 1 1 0 1 2\n"),
    );
    let output = pvlinux(&[
        "stress",
        "--seconds",
        "1",
        "--threads",
        "2",
        "--debugfs",
        file.to_str().unwrap(),
    ]);
    assert_eq!(status(&output), EXIT_PASS, "{}", stderr(&output));
    let summary = stdout(&output)
        .lines()
        .find_map(StressSummary::parse)
        .unwrap();
    // A static file: nothing happened between the two reads.
    assert_eq!((summary.pv_waits, summary.pv_kicks), (Some(0), Some(0)));
}
