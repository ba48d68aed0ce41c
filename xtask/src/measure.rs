//! What every benchmark report shares: the timing modes QEMU keeps time
//! by, and the median-and-range summary of repeated runs. A figure here
//! is never one run: a chaotic system gives a different answer each time,
//! so a cell is its median with the smallest and largest run beside it.

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

#[cfg(test)]
mod tests {
    use super::*;

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
