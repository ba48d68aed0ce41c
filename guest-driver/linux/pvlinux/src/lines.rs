//! Every result line pvlinux prints, and the parser xtask reads it back
//! with: the one place their format is defined.
//!
//! A line is [`PREFIX`], a tag (`truth`, `bench start`, ...), then
//! `key=value` fields separated by single spaces; values never contain
//! spaces, except [`BenchFailed`]'s `error`, which is the rest of the line.
//! Each line type's `Display` writes it (without the newline) and its
//! `parse` reads it back. Parsing tolerates what a guest console does to a
//! line: any text before the prefix (a kernel message that interleaved), a
//! trailing `\r`, and fields added after the ones a type knows; it returns
//! `None` for any other line.
//!
//! | line | type |
//! |---|---|
//! | `pvlinux: truth cpus=2 polls=100 windows=3 judged=2 violations=0 preempted_fraction=0.125 max_gap_us=40 discarded=1` | [`TruthSummary`] |
//! | `pvlinux: truth-cpu cpu=1 samples=100 preempted=25 judged=2 violations=0` | [`TruthCpu`] |
//! | `pvlinux: truth-violation cpu=1 polls=12 span_us=300 progress=7` | [`TruthViolation`] |
//! | `pvlinux: stress stuck thread=3` | [`StressStuck`] |
//! | `pvlinux: stress threads=8 seconds=10 ops=123 min_thread_ops=10 max_thread_ops=20 pv_waits=5 pv_kicks=5 stuck=0` | [`StressSummary`] |
//! | `pvlinux: hotplug cpu=1 before=1 offline=0/0 after=1/1` | [`HotplugResult`] |
//! | `pvlinux: perf event=cycles first=1234 second=100001234 ms=100` | [`PerfResult`] |
//! | `pvlinux: bench start tests=execl,spawn copies=2 scale=0.5 seed=none` | [`BenchStart`] |
//! | `pvlinux: bench test=spawn copies=2 ops=1000 seconds=0.100000 ops_per_sec=10000.0` | [`BenchResult`] |
//! | `pvlinux: bench failed test=spawn error=fork: Resource temporarily unavailable` | [`BenchFailed`] |
//! | `pvlinux: bench done` | [`BenchDone`] |
//! | `pvlinux: ptp read=1 counter_before=1000 counter_after=1100 clock_ns=1795996800000016000` | [`PtpRead`] |

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Every line pvlinux prints starts with this.
pub const PREFIX: &str = "pvlinux: ";

/// The line's text after [`PREFIX`], without a trailing `\r`/`\n`.
fn body(line: &str) -> Option<&str> {
    let start = line.find(PREFIX)? + PREFIX.len();
    Some(line[start..].trim_end_matches(['\r', '\n']))
}

/// The `key=value` fields after `tag`.
struct Fields<'a> {
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn of(line: &'a str, tag: &str) -> Option<Self> {
        let rest = body(line)?.strip_prefix(tag)?;
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return None;
        }
        let pairs = rest
            .split_whitespace()
            .map(|field| field.split_once('='))
            .collect::<Option<Vec<_>>>()?;
        Some(Self { pairs })
    }

    fn text(&self, key: &str) -> Option<&'a str> {
        self.pairs
            .iter()
            .find(|(name, _)| *name == key)
            .map(|(_, value)| *value)
    }

    fn get<T: FromStr>(&self, key: &str) -> Option<T> {
        self.text(key)?.parse().ok()
    }

    /// A finite decimal number.
    fn real(&self, key: &str) -> Option<f64> {
        let value: f64 = self.get(key)?;
        value.is_finite().then_some(value)
    }

    /// `0` or `1`.
    fn flag(&self, key: &str) -> Option<bool> {
        parse_flag(self.text(key)?)
    }

    /// `a/b`, each `0` or `1`.
    fn flag_pair(&self, key: &str) -> Option<(bool, bool)> {
        let (a, b) = self.text(key)?.split_once('/')?;
        Some((parse_flag(a)?, parse_flag(b)?))
    }
}

fn parse_flag(text: &str) -> Option<bool> {
    match text {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

fn flag(value: bool) -> u8 {
    u8::from(value)
}

/// `truth`'s verdict over all workers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TruthSummary {
    /// CPUs taking part: the observer's and the workers'.
    pub cpus: u32,
    /// Polls of the debugfs file.
    pub polls: u64,
    /// Preempted windows, after splitting at gaps.
    pub windows: u64,
    /// Windows long enough to judge.
    pub judged: u64,
    /// Judged windows in which the worker made progress.
    pub violations: u64,
    /// Fraction of (poll, worker) samples whose flag read 1.
    pub preempted_fraction: f64,
    /// The longest time between two poll starts (us).
    pub max_gap_us: u64,
    /// Gaps that split a window (nothing concluded across them).
    pub discarded: u64,
}

impl fmt::Display for TruthSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}truth cpus={} polls={} windows={} judged={} violations={} \
             preempted_fraction={:.3} max_gap_us={} discarded={}",
            self.cpus,
            self.polls,
            self.windows,
            self.judged,
            self.violations,
            self.preempted_fraction,
            self.max_gap_us,
            self.discarded
        )
    }
}

impl TruthSummary {
    /// Reads a line this type wrote.
    pub fn parse(line: &str) -> Option<Self> {
        let fields = Fields::of(line, "truth")?;
        Some(Self {
            cpus: fields.get("cpus")?,
            polls: fields.get("polls")?,
            windows: fields.get("windows")?,
            judged: fields.get("judged")?,
            violations: fields.get("violations")?,
            preempted_fraction: fields.real("preempted_fraction")?,
            max_gap_us: fields.get("max_gap_us")?,
            discarded: fields.get("discarded")?,
        })
    }
}

/// `truth`'s findings for one worker CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TruthCpu {
    /// The worker's CPU.
    pub cpu: u32,
    /// Polls that read its flag.
    pub samples: u64,
    /// Of those, polls whose flag read 1.
    pub preempted: u64,
    /// Its judged windows.
    pub judged: u64,
    /// Its judged windows with progress.
    pub violations: u64,
}

impl fmt::Display for TruthCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}truth-cpu cpu={} samples={} preempted={} judged={} violations={}",
            self.cpu, self.samples, self.preempted, self.judged, self.violations
        )
    }
}

impl TruthCpu {
    /// Reads a line this type wrote.
    pub fn parse(line: &str) -> Option<Self> {
        let fields = Fields::of(line, "truth-cpu")?;
        Some(Self {
            cpu: fields.get("cpu")?,
            samples: fields.get("samples")?,
            preempted: fields.get("preempted")?,
            judged: fields.get("judged")?,
            violations: fields.get("violations")?,
        })
    }
}

/// One window in which a worker whose flag said "preempted" made
/// progress (`truth` prints the first few).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TruthViolation {
    /// The worker's CPU.
    pub cpu: u32,
    /// Polls in the window.
    pub polls: u64,
    /// From its first poll's start to its last poll's start (us).
    pub span_us: u64,
    /// How far the worker's counter moved.
    pub progress: u64,
}

impl fmt::Display for TruthViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}truth-violation cpu={} polls={} span_us={} progress={}",
            self.cpu, self.polls, self.span_us, self.progress
        )
    }
}

impl TruthViolation {
    /// Reads a line this type wrote.
    pub fn parse(line: &str) -> Option<Self> {
        let fields = Fields::of(line, "truth-violation")?;
        Some(Self {
            cpu: fields.get("cpu")?,
            polls: fields.get("polls")?,
            span_us: fields.get("span_us")?,
            progress: fields.get("progress")?,
        })
    }
}

/// A `stress` thread that stopped making progress or did not stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StressStuck {
    /// The thread's index, from 0.
    pub thread: u32,
}

impl fmt::Display for StressStuck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}stress stuck thread={}", self.thread)
    }
}

impl StressStuck {
    /// Reads a line this type wrote.
    pub fn parse(line: &str) -> Option<Self> {
        let fields = Fields::of(line, "stress stuck")?;
        Some(Self {
            thread: fields.get("thread")?,
        })
    }
}

/// One poll of `truth`, printed for the polls before the first violation:
/// for people reading a failed check, not parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TruthTrace {
    /// CLOCK_MONOTONIC at the poll's start and end (ns).
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
    /// Each worker's counter before the flags were read.
    pub before: Vec<u64>,
    /// Each worker's flag.
    pub preempted: Vec<bool>,
    /// Each worker's counter after the flags were read.
    pub after: Vec<u64>,
}

impl fmt::Display for TruthTrace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flags: String = self
            .preempted
            .iter()
            .map(|&p| if p { '1' } else { '0' })
            .collect();
        let list = |values: &[u64]| {
            values
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        write!(
            f,
            "{PREFIX}truth-trace start_ns={} duration_ns={} flags={flags} before={} after={}",
            self.start_ns,
            self.end_ns.saturating_sub(self.start_ns),
            list(&self.before),
            list(&self.after)
        )
    }
}

/// `stress`'s summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StressSummary {
    /// Threads run.
    pub threads: u32,
    /// Seconds they ran.
    pub seconds: u64,
    /// Operations over all threads.
    pub ops: u64,
    /// The fewest operations a thread did.
    pub min_thread_ops: u64,
    /// The most operations a thread did.
    pub max_thread_ops: u64,
    /// PV qspinlock halts during the run over all CPUs; `None` (printed
    /// `-1`) without the debugfs file.
    pub pv_waits: Option<u64>,
    /// PV qspinlock kicks during the run, likewise.
    pub pv_kicks: Option<u64>,
    /// Threads reported stuck.
    pub stuck: u32,
}

/// Writes an optional count, `-1` for none.
struct Count(Option<u64>);

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(count) => write!(f, "{count}"),
            None => f.write_str("-1"),
        }
    }
}

fn parse_count(text: &str) -> Option<Option<u64>> {
    if text == "-1" {
        Some(None)
    } else {
        text.parse().ok().map(Some)
    }
}

impl fmt::Display for StressSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}stress threads={} seconds={} ops={} min_thread_ops={} max_thread_ops={} \
             pv_waits={} pv_kicks={} stuck={}",
            self.threads,
            self.seconds,
            self.ops,
            self.min_thread_ops,
            self.max_thread_ops,
            Count(self.pv_waits),
            Count(self.pv_kicks),
            self.stuck
        )
    }
}

impl StressSummary {
    /// Reads a line this type wrote.
    pub fn parse(line: &str) -> Option<Self> {
        let fields = Fields::of(line, "stress")?;
        Some(Self {
            threads: fields.get("threads")?,
            seconds: fields.get("seconds")?,
            ops: fields.get("ops")?,
            min_thread_ops: fields.get("min_thread_ops")?,
            max_thread_ops: fields.get("max_thread_ops")?,
            pv_waits: parse_count(fields.text("pv_waits")?)?,
            pv_kicks: parse_count(fields.text("pv_kicks")?)?,
            stuck: fields.get("stuck")?,
        })
    }
}

/// What the debugfs file said about a CPU around taking it offline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HotplugResult {
    /// The CPU.
    pub cpu: u32,
    /// `registered` before.
    pub before_registered: bool,
    /// `online` while offline.
    pub offline_online: bool,
    /// `registered` while offline.
    pub offline_registered: bool,
    /// `online` after bringing it back.
    pub after_online: bool,
    /// `registered` after bringing it back.
    pub after_registered: bool,
}

impl HotplugResult {
    /// Registered before, neither online nor registered while offline,
    /// both after.
    pub fn passed(&self) -> bool {
        self.before_registered
            && !self.offline_online
            && !self.offline_registered
            && self.after_online
            && self.after_registered
    }

    /// Reads a line this type wrote.
    pub fn parse(line: &str) -> Option<Self> {
        let fields = Fields::of(line, "hotplug")?;
        let (offline_online, offline_registered) = fields.flag_pair("offline")?;
        let (after_online, after_registered) = fields.flag_pair("after")?;
        Some(Self {
            cpu: fields.get("cpu")?,
            before_registered: fields.flag("before")?,
            offline_online,
            offline_registered,
            after_online,
            after_registered,
        })
    }
}

impl fmt::Display for HotplugResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}hotplug cpu={} before={} offline={}/{} after={}/{}",
            self.cpu,
            flag(self.before_registered),
            flag(self.offline_online),
            flag(self.offline_registered),
            flag(self.after_online),
            flag(self.after_registered)
        )
    }
}

/// `perf`'s result: a perf_event_open(2) counter read before and after
/// `ms` milliseconds of computing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfResult {
    /// The generic event counted (`cycles`).
    pub event: String,
    /// The counter's value first read.
    pub first: u64,
    /// Its value after computing.
    pub second: u64,
    /// How long it computed in between.
    pub ms: u64,
}

impl PerfResult {
    /// The counter advanced.
    pub fn passed(&self) -> bool {
        self.second > self.first
    }

    /// Reads a line this type wrote.
    pub fn parse(line: &str) -> Option<Self> {
        let fields = Fields::of(line, "perf")?;
        Some(Self {
            event: fields.text("event")?.to_string(),
            first: fields.get("first")?,
            second: fields.get("second")?,
            ms: fields.get("ms")?,
        })
    }
}

impl fmt::Display for PerfResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}perf event={} first={} second={} ms={}",
            self.event, self.first, self.second, self.ms
        )
    }
}

/// `kexec`'s line just before it reboots into the loaded kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KexecLoaded {
    /// The kernel image loaded.
    pub kernel: String,
    /// The initramfs loaded with it.
    pub initrd: String,
}

impl KexecLoaded {
    /// Reads a line this type wrote.
    pub fn parse(line: &str) -> Option<Self> {
        let fields = Fields::of(line, "kexec")?;
        Some(Self {
            kernel: fields.text("kernel")?.to_owned(),
            initrd: fields.text("initrd")?.to_owned(),
        })
    }
}

impl fmt::Display for KexecLoaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}kexec kernel={} initrd={}",
            self.kernel, self.initrd
        )
    }
}

/// `bench`'s first line.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchStart {
    /// The tests to run, in order.
    pub tests: Vec<String>,
    /// Copies of each test.
    pub copies: u32,
    /// The work scale.
    pub scale: f64,
    /// The perturbation seed, if any.
    pub seed: Option<u64>,
}

impl fmt::Display for BenchStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}bench start tests={} copies={} scale={} seed=",
            self.tests.join(","),
            self.copies,
            self.scale
        )?;
        match self.seed {
            Some(seed) => write!(f, "{seed}"),
            None => f.write_str("none"),
        }
    }
}

impl BenchStart {
    /// Reads a line this type wrote.
    pub fn parse(line: &str) -> Option<Self> {
        let fields = Fields::of(line, "bench start")?;
        let tests: Vec<String> = fields
            .text("tests")?
            .split(',')
            .map(str::to_owned)
            .collect();
        if tests.iter().any(String::is_empty) {
            return None;
        }
        let seed = match fields.text("seed")? {
            "none" => None,
            seed => Some(seed.parse().ok()?),
        };
        Some(Self {
            tests,
            copies: fields.get("copies")?,
            scale: fields.real("scale")?,
            seed,
        })
    }
}

/// One bench test's throughput.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchResult {
    /// The test's name (one of [`crate::suite::BENCH_TESTS`]).
    pub test: String,
    /// Copies run in parallel.
    pub copies: u32,
    /// Operations over all copies.
    pub ops: u64,
    /// From releasing the copies to the last one finishing (printed to the
    /// microsecond).
    pub seconds: f64,
    /// `ops / seconds` (printed to 0.1).
    pub ops_per_sec: f64,
}

impl BenchResult {
    /// The result of `ops` operations in `elapsed`.
    pub fn new(test: &str, copies: u32, ops: u64, elapsed: Duration) -> Self {
        let seconds = elapsed.as_secs_f64();
        Self {
            test: test.to_owned(),
            copies,
            ops,
            seconds,
            ops_per_sec: if seconds > 0.0 {
                ops as f64 / seconds
            } else {
                0.0
            },
        }
    }

    /// Reads a line this type wrote.
    pub fn parse(line: &str) -> Option<Self> {
        let fields = Fields::of(line, "bench")?;
        Some(Self {
            test: fields.text("test")?.to_owned(),
            copies: fields.get("copies")?,
            ops: fields.get("ops")?,
            seconds: fields.real("seconds")?,
            ops_per_sec: fields.real("ops_per_sec")?,
        })
    }
}

impl fmt::Display for BenchResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}bench test={} copies={} ops={} seconds={:.6} ops_per_sec={:.1}",
            self.test, self.copies, self.ops, self.seconds, self.ops_per_sec
        )
    }
}

/// A bench test that failed; `bench` goes on with the next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchFailed {
    /// The test's name.
    pub test: String,
    /// Why, on one line (line breaks are printed as spaces).
    pub error: String,
}

impl fmt::Display for BenchFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}bench failed test={} error=", self.test)?;
        for c in self.error.chars() {
            let c = if c == '\n' || c == '\r' { ' ' } else { c };
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

impl BenchFailed {
    /// Reads a line this type wrote.
    pub fn parse(line: &str) -> Option<Self> {
        let rest = body(line)?.strip_prefix("bench failed test=")?;
        let (test, error) = rest.split_once(" error=")?;
        if test.is_empty() || test.contains(' ') {
            return None;
        }
        Some(Self {
            test: test.to_owned(),
            error: error.to_owned(),
        })
    }
}

/// `bench`'s last line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchDone;

impl fmt::Display for BenchDone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}bench done")
    }
}

impl BenchDone {
    /// Reads a line this type wrote.
    pub fn parse(line: &str) -> Option<Self> {
        (body(line)?.trim_end() == "bench done").then_some(Self)
    }
}

/// One reading of a PTP clock by `ptp`, between two reads of the virtual
/// counter (CNTVCT_EL0): the clock's time belongs to a counter value in
/// `counter_before..=counter_after`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtpRead {
    /// The reading's number, from 1.
    pub read: u32,
    /// The virtual counter just before the clock was read.
    pub counter_before: u64,
    /// The virtual counter just after.
    pub counter_after: u64,
    /// The clock's time, in nanoseconds since the Unix epoch.
    pub clock_ns: u64,
}

impl fmt::Display for PtpRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}ptp read={} counter_before={} counter_after={} clock_ns={}",
            self.read, self.counter_before, self.counter_after, self.clock_ns
        )
    }
}

impl PtpRead {
    /// Reads a line this type wrote.
    pub fn parse(line: &str) -> Option<Self> {
        let fields = Fields::of(line, "ptp")?;
        Some(Self {
            read: fields.get("read")?,
            counter_before: fields.get("counter_before")?,
            counter_after: fields.get("counter_after")?,
            clock_ns: fields.get("clock_ns")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `value` prints as `line`, `line` parses back to `value`, and so do
    /// the line with console noise around it; no other line type takes it.
    fn round_trip<T: fmt::Display + fmt::Debug + PartialEq>(
        value: T,
        line: &str,
        parse: fn(&str) -> Option<T>,
    ) {
        assert_eq!(value.to_string(), line);
        assert_eq!(parse(line).as_ref(), Some(&value), "{line}");
        let noisy = format!("[   12.345678] random: crng init done{line}\r");
        assert_eq!(parse(&noisy).as_ref(), Some(&value), "{noisy:?}");
        let extended = format!("{line} added_later=1");
        if !line.contains("error=") && !line.ends_with("bench done") {
            assert_eq!(parse(&extended).as_ref(), Some(&value), "{extended}");
        }
        let others: usize = [
            TruthSummary::parse(line).is_some(),
            TruthCpu::parse(line).is_some(),
            TruthViolation::parse(line).is_some(),
            StressStuck::parse(line).is_some(),
            StressSummary::parse(line).is_some(),
            HotplugResult::parse(line).is_some(),
            KexecLoaded::parse(line).is_some(),
            BenchStart::parse(line).is_some(),
            BenchResult::parse(line).is_some(),
            BenchFailed::parse(line).is_some(),
            BenchDone::parse(line).is_some(),
            PtpRead::parse(line).is_some(),
            PerfResult::parse(line).is_some(),
        ]
        .into_iter()
        .filter(|parsed| *parsed)
        .count();
        assert_eq!(others, 1, "{line} parses as exactly one line type");
    }

    #[test]
    fn truth_lines() {
        round_trip(
            TruthSummary {
                cpus: 4,
                polls: 123_456,
                windows: 40,
                judged: 31,
                violations: 0,
                preempted_fraction: 0.125,
                max_gap_us: 5_012,
                discarded: 3,
            },
            "pvlinux: truth cpus=4 polls=123456 windows=40 judged=31 violations=0 \
             preempted_fraction=0.125 max_gap_us=5012 discarded=3",
            TruthSummary::parse,
        );
        round_trip(
            TruthCpu {
                cpu: 3,
                samples: 123_456,
                preempted: 1_000,
                judged: 9,
                violations: 1,
            },
            "pvlinux: truth-cpu cpu=3 samples=123456 preempted=1000 judged=9 violations=1",
            TruthCpu::parse,
        );
        round_trip(
            TruthViolation {
                cpu: 2,
                polls: 14,
                span_us: 310,
                progress: 99,
            },
            "pvlinux: truth-violation cpu=2 polls=14 span_us=310 progress=99",
            TruthViolation::parse,
        );
    }

    #[test]
    fn the_fraction_is_printed_to_three_decimals() {
        let summary = TruthSummary {
            cpus: 2,
            polls: 3,
            windows: 0,
            judged: 0,
            violations: 0,
            preempted_fraction: 2.0 / 3.0,
            max_gap_us: 0,
            discarded: 0,
        };
        let line = summary.to_string();
        assert!(line.contains(" preempted_fraction=0.667 "), "{line}");
        assert_eq!(
            TruthSummary::parse(&line).unwrap().preempted_fraction,
            0.667
        );
    }

    #[test]
    fn stress_lines() {
        round_trip(
            StressSummary {
                threads: 8,
                seconds: 10,
                ops: 1_000_000,
                min_thread_ops: 100_000,
                max_thread_ops: 150_000,
                pv_waits: Some(17),
                pv_kicks: Some(0),
                stuck: 0,
            },
            "pvlinux: stress threads=8 seconds=10 ops=1000000 min_thread_ops=100000 \
             max_thread_ops=150000 pv_waits=17 pv_kicks=0 stuck=0",
            StressSummary::parse,
        );
        round_trip(
            StressSummary {
                threads: 4,
                seconds: 1,
                ops: 0,
                min_thread_ops: 0,
                max_thread_ops: 0,
                pv_waits: None,
                pv_kicks: None,
                stuck: 4,
            },
            "pvlinux: stress threads=4 seconds=1 ops=0 min_thread_ops=0 max_thread_ops=0 \
             pv_waits=-1 pv_kicks=-1 stuck=4",
            StressSummary::parse,
        );
        round_trip(
            StressStuck { thread: 7 },
            "pvlinux: stress stuck thread=7",
            StressStuck::parse,
        );
        assert_eq!(
            StressSummary::parse(
                "pvlinux: stress threads=4 seconds=1 ops=0 min_thread_ops=0 \
                 max_thread_ops=0 pv_waits=-2 pv_kicks=-1 stuck=0"
            ),
            None
        );
    }

    #[test]
    fn kexec_lines() {
        round_trip(
            KexecLoaded {
                kernel: "/boot/Image".into(),
                initrd: "/boot/initramfs.cpio".into(),
            },
            "pvlinux: kexec kernel=/boot/Image initrd=/boot/initramfs.cpio",
            KexecLoaded::parse,
        );
        assert_eq!(
            KexecLoaded::parse("pvlinux: kexec kernel=/boot/Image"),
            None
        );
    }

    #[test]
    fn hotplug_lines() {
        let passed = HotplugResult {
            cpu: 1,
            before_registered: true,
            offline_online: false,
            offline_registered: false,
            after_online: true,
            after_registered: true,
        };
        assert!(passed.passed());
        round_trip(
            passed,
            "pvlinux: hotplug cpu=1 before=1 offline=0/0 after=1/1",
            HotplugResult::parse,
        );
        let still_registered = HotplugResult {
            offline_registered: true,
            ..passed
        };
        assert!(!still_registered.passed());
        round_trip(
            still_registered,
            "pvlinux: hotplug cpu=1 before=1 offline=0/1 after=1/1",
            HotplugResult::parse,
        );
        assert_eq!(
            HotplugResult::parse("pvlinux: hotplug cpu=1 before=1 offline=0 after=1/1"),
            None
        );
        assert_eq!(
            HotplugResult::parse("pvlinux: hotplug cpu=1 before=2 offline=0/0 after=1/1"),
            None
        );
    }

    #[test]
    fn perf_lines() {
        let advanced = PerfResult {
            event: "cycles".into(),
            first: 1234,
            second: 100_001_234,
            ms: 100,
        };
        assert!(advanced.passed());
        round_trip(
            advanced.clone(),
            "pvlinux: perf event=cycles first=1234 second=100001234 ms=100",
            PerfResult::parse,
        );
        let stuck = PerfResult {
            second: 1234,
            ..advanced
        };
        assert!(!stuck.passed());
        assert_eq!(
            PerfResult::parse("pvlinux: perf event=cycles first=1"),
            None
        );
    }

    #[test]
    fn bench_lines() {
        round_trip(
            BenchStart {
                tests: vec!["execl".into(), "fcopy-256".into()],
                copies: 4,
                scale: 0.05,
                seed: None,
            },
            "pvlinux: bench start tests=execl,fcopy-256 copies=4 scale=0.05 seed=none",
            BenchStart::parse,
        );
        round_trip(
            BenchStart {
                tests: vec!["mmap".into()],
                copies: 1,
                scale: 20.0,
                seed: Some(18_446_744_073_709_551_615),
            },
            "pvlinux: bench start tests=mmap copies=1 scale=20 seed=18446744073709551615",
            BenchStart::parse,
        );
        round_trip(
            BenchResult {
                test: "context1".into(),
                copies: 2,
                ops: 20_000,
                seconds: 0.25,
                ops_per_sec: 80_000.0,
            },
            "pvlinux: bench test=context1 copies=2 ops=20000 seconds=0.250000 \
             ops_per_sec=80000.0",
            BenchResult::parse,
        );
        round_trip(
            BenchFailed {
                test: "shell8".into(),
                error: "copy 3: sh exited with status 127 (sh: sort: not found)".into(),
            },
            "pvlinux: bench failed test=shell8 error=copy 3: sh exited with status 127 \
             (sh: sort: not found)",
            BenchFailed::parse,
        );
        round_trip(BenchDone, "pvlinux: bench done", BenchDone::parse);
    }

    #[test]
    fn bench_results_round_to_the_printed_precision() {
        let result = BenchResult::new("pipe", 2, 1_000, Duration::from_nanos(333_333_333));
        let line = result.to_string();
        assert_eq!(
            line,
            "pvlinux: bench test=pipe copies=2 ops=1000 seconds=0.333333 ops_per_sec=3000.0"
        );
        let parsed = BenchResult::parse(&line).unwrap();
        assert_eq!(parsed.to_string(), line);
        assert_eq!(parsed.seconds, 0.333333);
    }

    #[test]
    fn failure_messages_stay_on_one_line() {
        let failed = BenchFailed {
            test: "execl".into(),
            error: "first\nsecond\r\nthird".into(),
        };
        let line = failed.to_string();
        assert_eq!(
            line,
            "pvlinux: bench failed test=execl error=first second  third"
        );
        assert_eq!(
            BenchFailed::parse(&line).unwrap().error,
            "first second  third"
        );
    }

    #[test]
    fn other_lines_are_not_results() {
        for line in [
            "",
            "pvlinux:",
            "pvlinux: ",
            "pvlinux: truth",
            "pvlinux: truthy cpus=1",
            "pvlinux: truth cpus=x polls=1 windows=1 judged=1 violations=0 \
             preempted_fraction=0.1 max_gap_us=1 discarded=0",
            "pvlinux: truth cpus=1 polls=1 windows=1 judged=1 violations=0 \
             preempted_fraction=NaN max_gap_us=1 discarded=0",
            "pvlinux: truth: judged 3 windows, fewer than --min-windows 20",
            "truth cpus=1 polls=1 windows=1 judged=1 violations=0 \
             preempted_fraction=0.1 max_gap_us=1 discarded=0",
            "pvlinux: bench start tests= copies=1 scale=1 seed=none",
            "pvlinux: bench start tests=a,,b copies=1 scale=1 seed=none",
            "pvlinux: bench start tests=a copies=1 scale=1 seed=-3",
            "pvlinux: bench test=pipe copies=2 ops=-1 seconds=1.0 ops_per_sec=1.0",
            "pvlinux: bench failed test= error=x",
            "pvlinux: bench failed test=pipe",
            "pvlinux: bench done now",
            "pvlinux: error: unknown bench test \"nosuch\"",
        ] {
            assert_eq!(TruthSummary::parse(line), None, "{line}");
            assert_eq!(BenchStart::parse(line), None, "{line}");
            assert_eq!(BenchResult::parse(line), None, "{line}");
            assert_eq!(BenchFailed::parse(line), None, "{line}");
            assert_eq!(BenchDone::parse(line), None, "{line}");
            assert_eq!(StressSummary::parse(line), None, "{line}");
        }
    }

    #[test]
    fn ptp_lines() {
        round_trip(
            PtpRead {
                read: 3,
                counter_before: 123_456_789,
                counter_after: 123_457_000,
                clock_ns: 1_795_996_800_000_016_000,
            },
            "pvlinux: ptp read=3 counter_before=123456789 counter_after=123457000 \
             clock_ns=1795996800000016000",
            PtpRead::parse,
        );
    }
}
