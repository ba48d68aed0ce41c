//! The `truth` check's verdict: did a worker vCPU make progress while its
//! preempted flag said it was not running?
//!
//! The observer polls repeatedly. A poll reads every worker's counter
//! (`before`), the preempted flags, every counter again (`after`), with
//! CLOCK_MONOTONIC timestamps around it. For each worker, a *window* is a
//! maximal run of consecutive polls whose flag read 1. The first poll's
//! `after` is read after its flag, the last poll's `before` before its
//! flag: if the worker really was off its CPU from the first flag read to
//! the last, those two counter values are equal.
//!
//! Two readings of "1" do not prove that the worker stayed off its CPU in
//! between: if the observer's own vCPU is descheduled between two flag
//! reads, the worker may have been scheduled in, run and been preempted
//! again meanwhile. The observer can be descheduled anywhere, also inside
//! a poll (between its first timestamp and its counter reads, or inside
//! the kernel's read of the flags), so what must stay short is the span
//! that holds both flag reads: from the previous poll's start to this
//! poll's end. A window is split wherever that span exceeds the *gap
//! threshold*: `gap_factor` times the median poll duration so far (from a
//! histogram, to within 1/8 of an octave, rounded down), and at least
//! `min_gap_ns`, at most `max_gap_ns`; the first `calibration_polls`
//! polls only feed the median. A hypervisor's time slice is milliseconds and a poll
//! microseconds, so a worker cannot be scheduled in and out again within
//! that span. Splits are counted as *discarded*: nothing is concluded
//! across them. (Measuring only from one poll's start to the next one's
//! misses an observer descheduled inside a poll: a real Linux guest showed
//! that as counters that moved by a millisecond's work in a 100 us gap.)
//!
//! A (split) window is *judged* when it has at least two polls and its
//! first and last poll starts are at least `min_window_ns` apart; it is a
//! *violation* when the worker's counter moved from the first poll's
//! `after` to the last poll's `before`.
//!
//! [`WindowJudge`] takes polls one at a time in constant memory (the
//! observer runs it live); [`judge`] runs it over a recorded sequence.

/// How windows are split and which are judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JudgeConfig {
    /// A span from one poll's start to the next one's end longer than this
    /// many times the median poll duration splits a window.
    pub gap_factor: u64,
    /// The gap threshold is never below this (ns).
    pub min_gap_ns: u64,
    /// Nor above this (ns): well below a hypervisor's time slice, so that
    /// polls slowed down across the board cannot hide an absence.
    pub max_gap_ns: u64,
    /// The first polls only calibrate the threshold: no window opens
    /// before this many have been seen.
    pub calibration_polls: u64,
    /// A window shorter than this from first to last poll start is not
    /// judged (ns).
    pub min_window_ns: u64,
}

impl Default for JudgeConfig {
    fn default() -> Self {
        Self {
            gap_factor: 10,
            min_gap_ns: 50_000,
            max_gap_ns: 1_000_000,
            calibration_polls: CALIBRATION_POLLS,
            min_window_ns: DEFAULT_MIN_WINDOW_US * 1_000,
        }
    }
}

/// Polls that only calibrate the gap threshold ([`JudgeConfig`]).
pub const CALIBRATION_POLLS: u64 = 64;

/// `truth --min-window-us` unless given.
pub const DEFAULT_MIN_WINDOW_US: u64 = 200;

/// One poll as the observer recorded it; the slices have one entry per
/// worker, in the same order on every poll.
#[derive(Clone, Copy, Debug)]
pub struct Poll<'a> {
    /// CLOCK_MONOTONIC before the first counter read (ns).
    pub start_ns: u64,
    /// CLOCK_MONOTONIC after the last counter read (ns).
    pub end_ns: u64,
    /// Each worker's counter before the flags were read.
    pub before: &'a [u64],
    /// Each worker's preempted flag.
    pub preempted: &'a [bool],
    /// Each worker's counter after the flags were read.
    pub after: &'a [u64],
}

/// What was seen of one worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Polls that saw this worker.
    pub samples: u64,
    /// Of those, polls whose flag read 1.
    pub preempted: u64,
    /// Windows, after splitting at gaps.
    pub windows: u64,
    /// Windows long enough to judge.
    pub judged: u64,
    /// Judged windows in which the counter moved.
    pub violations: u64,
    /// Gaps that split a window.
    pub discarded: u64,
}

/// A judged window in which the worker's counter moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The worker's index in the poll slices.
    pub worker: usize,
    /// Polls in the window.
    pub polls: u64,
    /// From the first poll's start to the last poll's start (ns).
    pub span_ns: u64,
    /// How far the counter moved.
    pub progress: u64,
}

/// The verdict over all polls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Polls pushed.
    pub polls: u64,
    /// The longest span from one poll's start to the next one's end (ns).
    pub max_gap_ns: u64,
    /// Per worker, in the poll slices' order.
    pub workers: Vec<WorkerStats>,
    /// The first [`MAX_VIOLATIONS_KEPT`] violations, for the report.
    pub violations: Vec<Violation>,
}

/// How many violations a [`Report`] describes one by one.
pub const MAX_VIOLATIONS_KEPT: usize = 16;

impl Report {
    /// Windows over every worker.
    pub fn windows(&self) -> u64 {
        self.workers.iter().map(|w| w.windows).sum()
    }

    /// Judged windows over every worker.
    pub fn judged(&self) -> u64 {
        self.workers.iter().map(|w| w.judged).sum()
    }

    /// Violations over every worker.
    pub fn violation_count(&self) -> u64 {
        self.workers.iter().map(|w| w.violations).sum()
    }

    /// Window splits over every worker.
    pub fn discarded(&self) -> u64 {
        self.workers.iter().map(|w| w.discarded).sum()
    }

    /// The fraction of (poll, worker) samples whose flag read 1; 0 with
    /// no samples.
    pub fn preempted_fraction(&self) -> f64 {
        let samples: u64 = self.workers.iter().map(|w| w.samples).sum();
        let preempted: u64 = self.workers.iter().map(|w| w.preempted).sum();
        if samples == 0 {
            0.0
        } else {
            preempted as f64 / samples as f64
        }
    }
}

/// A window still growing.
#[derive(Clone, Copy, Debug)]
struct OpenWindow {
    first_start_ns: u64,
    first_after: u64,
    last_start_ns: u64,
    last_before: u64,
    polls: u64,
}

/// Judges polls as they come.
#[derive(Clone, Debug)]
pub struct WindowJudge {
    config: JudgeConfig,
    durations: DurationHistogram,
    last_start_ns: Option<u64>,
    open: Vec<Option<OpenWindow>>,
    report: Report,
}

impl WindowJudge {
    /// A judge for `workers` workers.
    pub fn new(workers: usize, config: JudgeConfig) -> Self {
        Self {
            config,
            durations: DurationHistogram::default(),
            last_start_ns: None,
            open: vec![None; workers],
            report: Report {
                workers: vec![WorkerStats::default(); workers],
                ..Report::default()
            },
        }
    }

    /// The gap threshold as it stands now (ns).
    pub fn gap_threshold_ns(&self) -> u64 {
        self.durations
            .median()
            .saturating_mul(self.config.gap_factor)
            .clamp(self.config.min_gap_ns, self.config.max_gap_ns)
    }

    /// Takes the next poll: its start must not be before the previous
    /// one's, and its slices must have one entry per worker (extra
    /// entries are ignored, missing ones count as not preempted).
    pub fn push(&mut self, poll: &Poll<'_>) {
        // Both flag reads lie between the previous poll's start and this
        // poll's end.
        let gap_ns = self
            .last_start_ns
            .map(|last| poll.end_ns.saturating_sub(last));
        let split = gap_ns.is_some_and(|gap| gap > self.gap_threshold_ns());
        if let Some(gap) = gap_ns {
            self.report.max_gap_ns = self.report.max_gap_ns.max(gap);
        }
        // Until the median rests on enough polls it can be anything (the
        // very first poll may have been descheduled): nothing is judged.
        let calibrating = self.durations.total < self.config.calibration_polls;
        self.last_start_ns = Some(poll.start_ns);
        self.durations
            .record(poll.end_ns.saturating_sub(poll.start_ns));
        self.report.polls += 1;

        for worker in 0..self.open.len() {
            let preempted = poll.preempted.get(worker).copied().unwrap_or(false);
            let before = poll.before.get(worker).copied().unwrap_or(0);
            let after = poll.after.get(worker).copied().unwrap_or(0);
            let stats = &mut self.report.workers[worker];
            stats.samples += 1;
            if !preempted || calibrating {
                stats.preempted += u64::from(preempted);
                self.close(worker);
                continue;
            }
            stats.preempted += 1;
            match &mut self.open[worker] {
                Some(window) if !split => {
                    window.last_start_ns = poll.start_ns;
                    window.last_before = before;
                    window.polls += 1;
                }
                open => {
                    if open.is_some() {
                        stats.discarded += 1;
                    }
                    self.close(worker);
                    self.open[worker] = Some(OpenWindow {
                        first_start_ns: poll.start_ns,
                        first_after: after,
                        last_start_ns: poll.start_ns,
                        last_before: before,
                        polls: 1,
                    });
                }
            }
        }
    }

    /// Ends `worker`'s open window, if any, and judges it.
    fn close(&mut self, worker: usize) {
        let Some(window) = self.open[worker].take() else {
            return;
        };
        let stats = &mut self.report.workers[worker];
        stats.windows += 1;
        let span_ns = window.last_start_ns - window.first_start_ns;
        if window.polls < 2 || span_ns < self.config.min_window_ns {
            return;
        }
        stats.judged += 1;
        if window.last_before != window.first_after {
            stats.violations += 1;
            if self.report.violations.len() < MAX_VIOLATIONS_KEPT {
                self.report.violations.push(Violation {
                    worker,
                    polls: window.polls,
                    span_ns,
                    progress: window.last_before.wrapping_sub(window.first_after),
                });
            }
        }
    }

    /// Judges the windows still open and returns the verdict.
    /// Violations found so far (windows still open are not judged yet).
    pub fn violations_so_far(&self) -> u64 {
        self.report.violation_count()
    }

    /// Ends every open window and returns the verdict.
    pub fn finish(mut self) -> Report {
        for worker in 0..self.open.len() {
            self.close(worker);
        }
        self.report
    }
}

/// Judges a recorded sequence of polls of `workers` workers.
pub fn judge<'a>(
    polls: impl IntoIterator<Item = Poll<'a>>,
    workers: usize,
    config: JudgeConfig,
) -> Report {
    let mut judge = WindowJudge::new(workers, config);
    for poll in polls {
        judge.push(&poll);
    }
    judge.finish()
}

/// Durations in log-linear buckets: exact below 16 ns, then 8 buckets per
/// power of two. Constant memory however long the observer runs.
#[derive(Clone, Debug)]
struct DurationHistogram {
    counts: [u64; BUCKETS],
    total: u64,
}

const SUB_BUCKET_BITS: u32 = 3;
const EXACT: u64 = 16;
const BUCKETS: usize = EXACT as usize + (64 - 4) * (1 << SUB_BUCKET_BITS);

impl Default for DurationHistogram {
    fn default() -> Self {
        Self {
            counts: [0; BUCKETS],
            total: 0,
        }
    }
}

impl DurationHistogram {
    fn bucket(ns: u64) -> usize {
        if ns < EXACT {
            return ns as usize;
        }
        let octave = 63 - ns.leading_zeros(); // >= 4
        let sub = (ns >> (octave - SUB_BUCKET_BITS)) & ((1 << SUB_BUCKET_BITS) - 1);
        EXACT as usize + ((octave - 4) << SUB_BUCKET_BITS) as usize + sub as usize
    }

    /// The smallest duration that falls in `bucket`.
    fn lower_bound(bucket: usize) -> u64 {
        if bucket < EXACT as usize {
            return bucket as u64;
        }
        let index = bucket - EXACT as usize;
        let octave = (index >> SUB_BUCKET_BITS) as u32 + 4;
        let sub = (index & ((1 << SUB_BUCKET_BITS) - 1)) as u64;
        (1 << octave) | (sub << (octave - SUB_BUCKET_BITS))
    }

    fn record(&mut self, ns: u64) {
        self.counts[Self::bucket(ns)] += 1;
        self.total += 1;
    }

    /// The lower bound of the bucket holding the median; 0 when empty.
    fn median(&self) -> u64 {
        let rank = self.total.div_ceil(2);
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if count > 0 && seen >= rank {
                return Self::lower_bound(bucket);
            }
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic poll, owned.
    #[derive(Clone)]
    struct Recorded {
        start_ns: u64,
        end_ns: u64,
        before: Vec<u64>,
        preempted: Vec<bool>,
        after: Vec<u64>,
    }

    impl Recorded {
        fn poll(&self) -> Poll<'_> {
            Poll {
                start_ns: self.start_ns,
                end_ns: self.end_ns,
                before: &self.before,
                preempted: &self.preempted,
                after: &self.after,
            }
        }
    }

    /// Polls of one worker every `period_ns`, each lasting 5 us: `flags`
    /// gives the flag per poll, `counter(i)` the worker's counter at poll
    /// `i` (the same before and after).
    fn one_worker(period_ns: u64, flags: &[bool], counter: impl Fn(usize) -> u64) -> Vec<Recorded> {
        flags
            .iter()
            .enumerate()
            .map(|(i, &flag)| Recorded {
                start_ns: 1_000_000 + i as u64 * period_ns,
                end_ns: 1_000_000 + i as u64 * period_ns + 5_000,
                before: vec![counter(i)],
                preempted: vec![flag],
                after: vec![counter(i)],
            })
            .collect()
    }

    /// The default configuration without calibration polls, so that short
    /// synthetic sequences are judged from their first poll.
    const UNCALIBRATED: JudgeConfig = JudgeConfig {
        gap_factor: 10,
        min_gap_ns: 50_000,
        max_gap_ns: 1_000_000,
        calibration_polls: 0,
        min_window_ns: DEFAULT_MIN_WINDOW_US * 1_000,
    };

    #[test]
    fn the_uncalibrated_test_configuration_is_the_default_but_for_calibration() {
        assert_eq!(
            JudgeConfig {
                calibration_polls: CALIBRATION_POLLS,
                ..UNCALIBRATED
            },
            JudgeConfig::default()
        );
    }

    #[test]
    fn nothing_is_judged_while_the_threshold_calibrates() {
        // The start of a real guest run: the first poll was descheduled
        // for 6.8 ms, the observer was then away for 19 ms, and the worker
        // ran meanwhile although both polls read its flag as 1. With one
        // long duration as the "median", the threshold would be 68 ms.
        // (start, duration, flag, before, after) of the worker, as printed.
        const REAL: [(u64, u64, bool, u64, u64); 18] = [
            (1259895456, 6760656, true, 1151635, 1943867),
            (1285818560, 640800, true, 3742700, 3742700),
            (1286891472, 40128, true, 3742700, 3742700),
            (1286957616, 31744, true, 3742700, 3742700),
            (1287010928, 91808, true, 3742700, 3742700),
            (1287476592, 37648, true, 3742700, 3742700),
            (1287537328, 29328, true, 3742700, 3742700),
            (1287585728, 28112, true, 3742700, 3742700),
            (1287632800, 30480, true, 3742700, 3742700),
            (1287690096, 27424, true, 3742700, 3742700),
            (1287736320, 27792, true, 3742700, 3742700),
            (1287782240, 27040, true, 3742700, 3742700),
            (1287829552, 27712, true, 3742700, 3742700),
            (1287875472, 27744, true, 3742700, 3742700),
            (1287921408, 27536, true, 3742700, 3742700),
            (1287967168, 27536, true, 3742700, 3742700),
            (1288012624, 27136, true, 3742700, 3742700),
            (1303100176, 141664, true, 5296558, 5296558),
        ];
        let polls: Vec<Recorded> = REAL
            .iter()
            .map(|&(start_ns, duration, flag, before, after)| Recorded {
                start_ns,
                end_ns: start_ns + duration,
                before: vec![before],
                preempted: vec![flag],
                after: vec![after],
            })
            .collect();
        let calibrated = judge(polls.iter().map(Recorded::poll), 1, JudgeConfig::default());
        assert_eq!(
            (calibrated.judged(), calibrated.violation_count()),
            (0, 0),
            "{calibrated:?}"
        );
        // The same polls judged from the first one, without the cap: a
        // false violation (what the first version of this judge reported).
        let hasty = JudgeConfig {
            max_gap_ns: u64::MAX,
            ..UNCALIBRATED
        };
        let hasty = judge(polls.iter().map(Recorded::poll), 1, hasty);
        assert_eq!(hasty.violation_count(), 1, "{hasty:?}");
    }

    #[test]
    fn the_gap_threshold_is_capped() {
        // Every poll takes 300 us (10x = 3 ms): the cap, 1 ms, still splits
        // at a 2.3 ms absence in which the worker ran.
        let flags = vec![true; 40];
        let mut polls: Vec<Recorded> = one_worker(600_000, &flags, |i| if i < 20 { 1 } else { 2 });
        for poll in &mut polls {
            poll.end_ns = poll.start_ns + 300_000;
        }
        for poll in &mut polls[20..] {
            poll.start_ns += 1_400_000;
            poll.end_ns += 1_400_000;
        }
        let report = run(&polls, 1);
        assert_eq!(report.violation_count(), 0, "{report:?}");
        assert_eq!(report.judged(), 2);
    }

    fn run(polls: &[Recorded], workers: usize) -> Report {
        judge(polls.iter().map(Recorded::poll), workers, UNCALIBRATED)
    }

    /// 0 for 5 polls, 1 for `length` polls, 0 for 5 polls.
    fn flags_with_window(length: usize) -> Vec<bool> {
        let mut flags = vec![false; 5];
        flags.extend(std::iter::repeat_n(true, length));
        flags.extend([false; 5]);
        flags
    }

    #[test]
    fn a_clean_window_without_progress_is_judged_and_passes() {
        // 30 polls 10 us apart: 290 us from first to last.
        let flags = flags_with_window(30);
        let polls = one_worker(10_000, &flags, |i| {
            if (5..35).contains(&i) {
                500
            } else {
                i as u64 * 100
            }
        });
        let report = run(&polls, 1);
        assert_eq!(report.polls, 40);
        assert_eq!(report.windows(), 1);
        assert_eq!(report.judged(), 1);
        assert_eq!(report.violation_count(), 0);
        assert_eq!(report.discarded(), 0);
        assert_eq!(report.workers[0].samples, 40);
        assert_eq!(report.workers[0].preempted, 30);
        assert_eq!(report.preempted_fraction(), 0.75);
        assert_eq!(report.max_gap_ns, 15_000);
    }

    #[test]
    fn progress_inside_a_window_is_a_violation() {
        let flags = flags_with_window(30);
        let polls = one_worker(10_000, &flags, |i| i as u64);
        let report = run(&polls, 1);
        assert_eq!(report.judged(), 1);
        assert_eq!(report.violation_count(), 1);
        assert_eq!(
            report.violations,
            [Violation {
                worker: 0,
                polls: 30,
                span_ns: 290_000,
                progress: 29,
            }]
        );
    }

    #[test]
    fn progress_is_measured_from_the_first_after_to_the_last_before() {
        // The counter moves during the first poll (before -> after) and
        // during the last one (before -> after): neither lies between the
        // flag reads, so no violation.
        let mut polls = one_worker(10_000, &flags_with_window(30), |_| 7);
        polls[5].before[0] = 6;
        polls[34].after[0] = 8;
        let report = run(&polls, 1);
        assert_eq!((report.judged(), report.violation_count()), (1, 0));

        // Progress between the first poll's after and the last's before is.
        polls[34].before[0] = 8;
        let report = run(&polls, 1);
        assert_eq!((report.judged(), report.violation_count()), (1, 1));
    }

    #[test]
    fn a_gap_splits_the_window_and_both_parts_are_judged_alone() {
        // 60 polls 10 us apart, preempted throughout; the observer is away
        // for 5 ms after poll 30, and the worker ran meanwhile.
        let flags = vec![true; 60];
        let mut polls = one_worker(10_000, &flags, |i| if i < 30 { 100 } else { 200 });
        for poll in &mut polls[30..] {
            poll.start_ns += 5_000_000;
            poll.end_ns += 5_000_000;
        }
        let report = run(&polls, 1);
        assert_eq!(report.windows(), 2);
        assert_eq!(report.judged(), 2);
        assert_eq!(report.violation_count(), 0, "{report:?}");
        assert_eq!(report.discarded(), 1);
        assert_eq!(report.max_gap_ns, 5_015_000);
    }

    #[test]
    fn an_observer_descheduled_inside_a_poll_splits_the_window() {
        // Poll 30 starts on time but its counter and flag reads come 5 ms
        // later (the observer was descheduled right after its timestamp),
        // and the worker ran meanwhile. The poll starts are 10 us apart
        // throughout; only the poll's end shows the absence.
        let flags = vec![true; 60];
        let mut polls = one_worker(10_000, &flags, |i| if i < 30 { 100 } else { 200 });
        polls[30].end_ns += 5_000_000;
        for poll in &mut polls[31..] {
            poll.start_ns += 5_000_000;
            poll.end_ns += 5_000_000;
        }
        let report = run(&polls, 1);
        assert_eq!(report.violation_count(), 0, "{report:?}");
        // Split before and after the long poll, which is a window alone.
        assert_eq!((report.windows(), report.judged()), (3, 2));
        assert_eq!(report.discarded(), 2);
    }

    #[test]
    fn the_gap_threshold_follows_the_median_poll_duration() {
        let config = UNCALIBRATED;
        let mut judge = WindowJudge::new(1, config);
        assert_eq!(judge.gap_threshold_ns(), config.min_gap_ns);
        // Polls of 20 us: 10x is 200 us, above the 50 us floor.
        for i in 0..9 {
            let start = i * 1_000_000;
            judge.push(&Poll {
                start_ns: start,
                end_ns: start + 20_000,
                before: &[0],
                preempted: &[false],
                after: &[0],
            });
        }
        let threshold = judge.gap_threshold_ns();
        assert!((180_000..=200_000).contains(&threshold), "{threshold}");

        // 150 us gaps with 20 us polls: no split. With 5 us polls the
        // threshold is the 50 us floor: every gap splits.
        for (duration, windows, judged, discarded) in [(20_000, 1, 1, 0), (5_000, 20, 0, 19)] {
            let polls: Vec<Recorded> = (0..20)
                .map(|i| Recorded {
                    start_ns: i * 150_000,
                    end_ns: i * 150_000 + duration,
                    before: vec![1],
                    preempted: vec![true],
                    after: vec![1],
                })
                .collect();
            let report = run(&polls, 1);
            assert_eq!(
                (report.windows(), report.judged(), report.discarded()),
                (windows, judged, discarded),
                "{duration} ns polls"
            );
        }
    }

    #[test]
    fn short_windows_are_not_judged() {
        // One poll: never judged, even with progress around it.
        let polls = one_worker(10_000, &flags_with_window(1), |i| i as u64);
        let report = run(&polls, 1);
        assert_eq!((report.windows(), report.judged()), (1, 0));

        // 20 polls 10 us apart: 190 us < 200 us.
        let polls = one_worker(10_000, &flags_with_window(20), |i| i as u64);
        let report = run(&polls, 1);
        assert_eq!(
            (report.windows(), report.judged(), report.violation_count()),
            (1, 0, 0)
        );

        // 21 polls: 200 us, judged.
        let polls = one_worker(10_000, &flags_with_window(21), |i| i as u64);
        let report = run(&polls, 1);
        assert_eq!(
            (report.windows(), report.judged(), report.violation_count()),
            (1, 1, 1)
        );
    }

    #[test]
    fn a_flag_that_flips_ends_the_window() {
        // 1 x25, 0, 1 x25: two windows; the worker ran at the 0 poll.
        let mut flags = vec![true; 51];
        flags[25] = false;
        let polls = one_worker(10_000, &flags, |i| {
            if i < 25 {
                10
            } else if i == 25 {
                15
            } else {
                20
            }
        });
        let report = run(&polls, 1);
        assert_eq!(report.windows(), 2);
        assert_eq!(report.judged(), 2);
        assert_eq!(report.violation_count(), 0);
        assert_eq!(report.discarded(), 0);

        // Alternating flags: only one-poll windows, nothing judged.
        let flags: Vec<bool> = (0..100).map(|i| i % 2 == 0).collect();
        let polls = one_worker(10_000, &flags, |i| i as u64);
        let report = run(&polls, 1);
        assert_eq!((report.windows(), report.judged()), (50, 0));
        assert_eq!(report.preempted_fraction(), 0.5);
    }

    #[test]
    fn workers_are_judged_independently() {
        // Worker 0 preempted throughout without progress; worker 1 runs.
        let polls: Vec<Recorded> = (0..40u64)
            .map(|i| Recorded {
                start_ns: i * 10_000,
                end_ns: i * 10_000 + 3_000,
                before: vec![5, i * 10],
                preempted: vec![true, false],
                after: vec![5, i * 10 + 3],
            })
            .collect();
        let report = run(&polls, 2);
        assert_eq!(report.workers[0].judged, 1);
        assert_eq!(report.workers[0].violations, 0);
        assert_eq!(
            report.workers[1],
            WorkerStats {
                samples: 40,
                ..WorkerStats::default()
            }
        );
        assert_eq!(report.preempted_fraction(), 0.5);
    }

    #[test]
    fn no_polls_no_verdict() {
        let report = run(&[], 3);
        assert_eq!(report.polls, 0);
        assert_eq!(report.workers.len(), 3);
        assert_eq!(
            (report.windows(), report.judged(), report.violation_count()),
            (0, 0, 0)
        );
        assert_eq!(report.preempted_fraction(), 0.0);
    }

    #[test]
    fn histogram_buckets_round_down_within_an_eighth_octave() {
        for ns in (0..20_000).chain([1 << 20, (1 << 40) + 12345, u64::MAX]) {
            let bucket = DurationHistogram::bucket(ns);
            assert!(bucket < BUCKETS);
            let lower = DurationHistogram::lower_bound(bucket);
            assert!(lower <= ns, "{ns}");
            assert!(ns - lower <= ns / 8, "{ns}: {lower}");
            assert_eq!(DurationHistogram::bucket(lower), bucket);
        }
        let mut histogram = DurationHistogram::default();
        assert_eq!(histogram.median(), 0);
        for ns in [1_000, 1_000, 9_000_000] {
            histogram.record(ns);
        }
        assert_eq!(histogram.median(), 1_000 - 1_000 % 64);
    }
}
