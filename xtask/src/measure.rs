//! What every benchmark report shares: the timing modes QEMU keeps time
//! by, and the median-and-range summary of repeated runs. A figure here
//! is never one run: a chaotic system gives a different answer each time,
//! so a cell is its median with the smallest and largest run beside it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

/// How QEMU kept time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Timing {
    /// Multi-threaded TCG: the pCPUs run in parallel, as on hardware.
    #[serde(rename = "mttcg")]
    Mttcg,
    /// `-accel tcg,thread=single -icount shift=0,sleep=off`: deterministic.
    #[serde(rename = "icount")]
    Icount,
}

impl Timing {
    pub fn name(self) -> &'static str {
        match self {
            Timing::Mttcg => "mttcg",
            Timing::Icount => "icount",
        }
    }
}

/// Median, minimum and maximum of some values.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Range {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Range {
    /// `None` for no (finite) values; the median of an even count is the
    /// mean of the middle two.
    pub fn of(values: &[f64]) -> Option<Range> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Range {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }
}

/// A ratio by rounds: each numerator sample `(round, value)` divided by
/// the denominator sample of the same round, summarised. The benchmarks
/// run their multi-threaded cells in rounds (every cell once, then again),
/// so the two runs a ratio pairs are seconds apart and see one state of a
/// host whose speed moves between minutes, where a ratio of two medians
/// could divide a run of the fast state by one of the slow. A sample whose
/// round has no denominator, or no positive one, is left out; `None` when
/// nothing pairs.
pub fn paired_by_round(
    num: impl IntoIterator<Item = (u32, f64)>,
    den: impl IntoIterator<Item = (u32, f64)>,
) -> Option<Range> {
    let den: Vec<(u32, f64)> = den.into_iter().collect();
    let ratios: Vec<f64> = num
        .into_iter()
        .filter_map(|(round, n)| {
            let &(_, d) = den.iter().find(|(r, _)| *r == round)?;
            (d > 0.0).then(|| n / d)
        })
        .collect();
    Range::of(&ratios)
}

/// Makes every run of `plans` (a benchmark's matrix, `timing` telling each
/// run's mode) and returns the outcomes in `plans`' order; `report` sees
/// each outcome as its run ends, with its plan's index and how many runs
/// have ended. The icount runs go first, `cores` at a time: each is one
/// single-threaded QEMU whose figures count instructions, not host time
/// (`-icount shift=0,sleep=off`), and `cores` of them take a `cores`-th
/// of the wall time; whether a neighbour moves a benchmark's icount runs
/// is that benchmark's to check (the lock benchmark's do not move,
/// docs/benchmarks.md, its opening section; the Linux benchmark's do, so
/// it passes 1). The multi-threaded runs measure the host's parallelism,
/// so they go one at a time after them, in order.
/// `None` only for a run that never ended (a worker panicked).
pub fn run_side_by_side<P: Sync, R: Send>(
    plans: &[P],
    cores: u32,
    timing: impl Fn(&P) -> Timing,
    run: impl Fn(&P) -> R + Sync,
    report: impl Fn(usize, &R, usize) + Sync,
) -> Vec<Option<R>> {
    let outcomes: Vec<Mutex<Option<R>>> = plans.iter().map(|_| Mutex::new(None)).collect();
    let ended = AtomicUsize::new(0);
    let make = |index: usize| {
        let outcome = run(&plans[index]);
        report(index, &outcome, ended.fetch_add(1, Ordering::Relaxed) + 1);
        *outcomes[index].lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
    };
    let icount: Vec<usize> = (0..plans.len())
        .filter(|&i| timing(&plans[i]) == Timing::Icount)
        .collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..cores.max(1) {
            scope.spawn(|| {
                while let Some(&index) = icount.get(next.fetch_add(1, Ordering::Relaxed)) {
                    make(index);
                }
            });
        }
    });
    for (index, plan) in plans.iter().enumerate() {
        if timing(plan) != Timing::Icount {
            make(index);
        }
    }
    outcomes
        .into_iter()
        .map(|slot| slot.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn icount_runs_go_side_by_side_and_multithreaded_runs_alone_after_them() {
        use std::sync::atomic::AtomicU32;
        use std::time::Duration;
        // Modes interleaved: the runner, not the plans' order, puts the
        // icount runs first.
        let plans: Vec<(usize, Timing)> = (0..12)
            .map(|i| {
                (
                    i,
                    if i % 3 == 0 {
                        Timing::Mttcg
                    } else {
                        Timing::Icount
                    },
                )
            })
            .collect();
        let running = AtomicU32::new(0);
        let most = AtomicU32::new(0);
        let made = Mutex::new(Vec::new());
        let reported = Mutex::new(Vec::new());
        let outcomes = run_side_by_side(
            &plans,
            2,
            |p| p.1,
            |&(i, timing)| {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                if timing == Timing::Mttcg {
                    assert_eq!(now, 1, "multi-threaded run {i} ran beside another");
                }
                std::thread::sleep(Duration::from_millis(5));
                made.lock().unwrap().push((i, timing));
                running.fetch_sub(1, Ordering::SeqCst);
                i * 10
            },
            |index, &outcome, ended| {
                assert_eq!(outcome, index * 10, "reported with its own plan");
                reported.lock().unwrap().push(ended);
            },
        );
        assert_eq!(most.load(Ordering::SeqCst), 2, "two icount runs at once");
        let made = made.into_inner().unwrap();
        let first_mttcg = made.iter().position(|m| m.1 == Timing::Mttcg).unwrap();
        assert_eq!(
            first_mttcg, 8,
            "every icount run before the first multi-threaded"
        );
        let mttcg: Vec<usize> = made[first_mttcg..].iter().map(|m| m.0).collect();
        assert_eq!(mttcg, [0, 3, 6, 9], "multi-threaded runs in order");
        // Counted once each (two runs may report out of order).
        let mut reported = reported.into_inner().unwrap();
        reported.sort_unstable();
        assert_eq!(reported, (1..=12).collect::<Vec<_>>());
        let expected: Vec<Option<usize>> = (0..12).map(|i| Some(i * 10)).collect();
        assert_eq!(outcomes, expected, "outcomes in the plans' order");
    }

    #[test]
    fn ratios_by_round_pair_samples_of_one_round() {
        // Rounds 0 and 1 pair; round 2 has no denominator, round 3 a zero
        // one: left out.
        let num = [(0, 9.0), (1, 3.0), (2, 5.0), (3, 1.0)];
        let den = [(1, 4.0), (0, 10.0), (3, 0.0)];
        let r = paired_by_round(num, den).unwrap();
        assert_eq!((r.n, r.min, r.max), (2, 0.75, 0.9));
        assert_eq!(paired_by_round(num, []), None);
    }

    #[test]
    fn ranges_take_the_median_of_odd_and_even_counts() {
        assert_eq!(Range::of(&[]), None);
        let r = Range::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((r.median, r.min, r.max, r.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(Range::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(Range::of(&[f64::NAN, 1.0]).unwrap().n, 1);
    }
}
