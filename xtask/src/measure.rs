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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_take_the_median_of_odd_and_even_counts() {
        assert_eq!(Range::of(&[]), None);
        let r = Range::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((r.median, r.min, r.max, r.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(Range::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(Range::of(&[f64::NAN, 1.0]).unwrap().n, 1);
    }
}
