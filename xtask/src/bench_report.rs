//! The report of `cargo xtask bench`: turns the runs of the lock benchmark
//! matrix into a full JSON results file, a summary JSON with fixed keys, a
//! markdown table per group, an SVG plot per group, and the generated
//! section of `docs/benchmarks.md`.
//!
//! A run ([`Cell`]) is one boot of a bare-metal guest in which N vCPUs
//! hammer one shared lock on P physical CPUs. Each point of the matrix
//! (timing, pCPUs, hog, vCPUs, mode: a [`Point`]) runs several times, and
//! a figure is never one run: a point is reported as the median of its
//! runs with the smallest and largest beside it ([`Range`]), a speed-up as
//! the ratio of medians, and a `_min` figure as the worst case the ranges
//! allow (the smallest run of the numerator over the largest of the
//! denominator). Two timing modes ([`Timing`]):
//! - icount: QEMU runs the pCPUs round robin on one thread, one
//!   instruction per nanosecond of virtual time. The machine's total
//!   instruction rate is fixed and a spin that executes YIELD or WFE hands
//!   the emulator over at once, so it shows exact costs and regressions,
//!   not what parallel hardware sees. Its runs are perturbed by a
//!   recorded seed (lockbench `seed=`), or every run would be the same.
//! - multi-threaded TCG: the pCPUs run in parallel on the host's cores,
//!   as on hardware, with the host's noise; its runs are plain repeats. A
//!   group with more pCPUs than the host has cores is marked: its pCPUs
//!   share cores.
//!
//! Fairness is per run: the smallest per-vCPU acquisition count over the
//! largest (1.0: every vCPU got the lock equally often).
//!
//! Everything here is a pure function over the measurements, except
//! [`update_generated_section`], which rewrites a document's text (the
//! caller reads and writes the file).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize, Serializer};

pub use crate::measure::{Range, Timing};

/// Which lock and which hypervisor services a run used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Mode {
    /// The guest's ordinary lock, without help from the hypervisor.
    #[serde(rename = "vanilla")]
    Vanilla,
    /// The paravirtual lock, using the hypervisor's PV-lock services
    /// (directed yields and kicks).
    #[serde(rename = "pv")]
    Pv,
    /// The paravirtual lock with the hypervisor's boost as well.
    #[serde(rename = "pv+boost")]
    PvBoost,
}

impl Mode {
    /// Every mode, in the order the report lists them.
    pub const ALL: [Mode; 3] = [Mode::Vanilla, Mode::Pv, Mode::PvBoost];

    /// The mode's name in reports and JSON: `vanilla`, `pv` or `pv+boost`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Vanilla => "vanilla",
            Mode::Pv => "pv",
            Mode::PvBoost => "pv+boost",
        }
    }
}

/// Where in the matrix a run belongs; its runs are summarised together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Point {
    pub timing: Timing,
    /// Physical CPUs the hypervisor ran on.
    pub pcpus: u32,
    /// Whether a CPU-hog neighbour VM ran beside the benchmark VM.
    pub hog: bool,
    /// vCPUs of the benchmark VM, all contending for the lock.
    pub vcpus: u32,
    /// The lock and hypervisor services used.
    pub mode: Mode,
}

impl Point {
    /// vCPUs per physical CPU (0.0 without physical CPUs).
    pub fn overcommit(&self) -> f64 {
        if self.pcpus == 0 {
            0.0
        } else {
            f64::from(self.vcpus) / f64::from(self.pcpus)
        }
    }

    /// The same point in another mode.
    fn with_mode(self, mode: Mode) -> Self {
        Self { mode, ..self }
    }
}

/// One run's measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    #[serde(flatten)]
    pub point: Point,
    /// Its number among its point's runs (0, 1, ...).
    pub run: u32,
    /// The perturbation seed it ran with (icount runs).
    pub seed: Option<u64>,
    /// Total lock acquisitions by all vCPUs.
    pub acquisitions: u64,
    /// Acquisitions that found the lock taken: the hand-offs between vCPUs
    /// that decide a contended figure.
    pub contended: u64,
    /// Each vCPU's acquisitions, by vCPU number.
    pub per_vcpu: Vec<u64>,
    /// The run's length in counter time, in nanoseconds (under icount one
    /// instruction is one nanosecond).
    pub virtual_ns: u64,
    /// The worst single acquisition latency, in counter nanoseconds.
    pub worst_wait_ns: u64,
    /// Successful directed yields the guest saw.
    pub yields: u64,
    /// Kicks the guest sent.
    pub kicks: u64,
    /// Whether the guest's lost-update check passed.
    pub data_ok: bool,
    /// Wall-clock seconds the run took, boot included.
    pub wall_secs: f64,
    /// The host's core-to-core round trip measured just before the run, in
    /// nanoseconds (`crate::hostprobe`): multi-threaded runs only.
    #[serde(default)]
    pub host_round_trip_ns: Option<f64>,
}

impl Cell {
    /// Lock acquisitions per second of counter time (0.0 when no time
    /// passed).
    pub fn throughput(&self) -> f64 {
        if self.virtual_ns == 0 {
            0.0
        } else {
            // u64 -> f64 loses precision only above 2^53, far beyond any run.
            self.acquisitions as f64 * 1e9 / self.virtual_ns as f64
        }
    }

    /// The smallest and largest per-vCPU acquisition counts.
    pub fn vcpu_extremes(&self) -> Option<(u64, u64)> {
        let min = *self.per_vcpu.iter().min()?;
        let max = *self.per_vcpu.iter().max()?;
        Some((min, max))
    }

    /// Fairness: the smallest per-vCPU count over the largest; `None`
    /// without counts or acquisitions.
    pub fn fairness(&self) -> Option<f64> {
        let (min, max) = self.vcpu_extremes()?;
        (max > 0).then(|| min as f64 / max as f64)
    }
}

/// A point's runs, summarised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointStats {
    pub point: Point,
    /// Throughput: median, smallest and largest run.
    pub throughput: Range,
    /// Fairness over the runs.
    pub fairness: Option<Range>,
    /// The per-vCPU counts of the least fair run: (smallest, largest).
    pub least_fair: Option<(u64, u64)>,
    /// The fewest contended acquisitions of a run.
    pub contended_min: u64,
    /// The worst wait of any run, in counter nanoseconds.
    pub worst_wait_ns: u64,
    /// Whether every run kept its data.
    pub data_ok: bool,
}

/// The runs at `point`, summarised; `None` if it has none.
pub fn stats(cells: &[Cell], point: Point) -> Option<PointStats> {
    let runs: Vec<&Cell> = cells.iter().filter(|c| c.point == point).collect();
    let throughput = Range::of(&runs.iter().map(|c| c.throughput()).collect::<Vec<_>>())?;
    let fairness: Vec<f64> = runs.iter().filter_map(|c| c.fairness()).collect();
    let least_fair = runs
        .iter()
        .filter(|c| c.fairness().is_some())
        .min_by(|a, b| {
            a.fairness()
                .unwrap_or(1.0)
                .total_cmp(&b.fairness().unwrap_or(1.0))
        })
        .and_then(|c| c.vcpu_extremes());
    Some(PointStats {
        point,
        throughput,
        fairness: Range::of(&fairness),
        least_fair,
        contended_min: runs.iter().map(|c| c.contended).min().unwrap_or(0),
        worst_wait_ns: runs.iter().map(|c| c.worst_wait_ns).max().unwrap_or(0),
        data_ok: runs.iter().all(|c| c.data_ok),
    })
}

/// Every point that has runs, in order, summarised.
pub fn all_stats(cells: &[Cell]) -> Vec<PointStats> {
    let mut points: Vec<Point> = cells.iter().map(|c| c.point).collect();
    points.sort_unstable();
    points.dedup();
    points.into_iter().filter_map(|p| stats(cells, p)).collect()
}

/// Costs measured in instructions (icount), averaged over many iterations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    /// A hypercall that does nothing, from the guest's `hvc` to its return.
    pub null_hypercall_instructions: f64,
    /// Switching a physical CPU from one vCPU to another.
    pub vcpu_switch_instructions: f64,
}

/// The physical CPU count the headline figures are measured at.
pub const HEADLINE_PCPUS: u32 = 2;

/// The headline figures; `None` where the runs or costs they need are
/// missing or a denominator is zero. Icount medians at
/// [`HEADLINE_PCPUS`] without a hog unless the name says otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// PV+boost throughput / vanilla throughput at 2x overcommit.
    pub speedup_2x: Option<f64>,
    /// PV+boost throughput at 2x / PV+boost throughput at 1x.
    pub retention_2x: Option<f64>,
    /// Instructions a null hypercall costs.
    pub null_hypercall_instructions: Option<f64>,
    /// Instructions a vCPU switch (directed yield) costs.
    pub vcpu_switch_instructions: Option<f64>,
    /// The smallest PV+boost run at 2x over the largest vanilla run.
    pub speedup_2x_min: Option<f64>,
    /// The smallest PV+boost run at 2x over its largest at 1x.
    pub retention_2x_min: Option<f64>,
    /// PV+boost over vanilla at 1x: what the PV lock costs without
    /// overcommit.
    pub pv_1x_ratio: Option<f64>,
    /// The smallest PV+boost / vanilla median over every overcommitted
    /// icount cell (2x and 4x, both pCPU counts, beside a hog or not).
    pub worst_cell_ratio: Option<f64>,
    /// The smallest fairness of a PV+boost run at 2x.
    pub fairness_2x_min: Option<f64>,
    /// PV+boost over vanilla at 2x beside a CPU-hog VM.
    pub hog_speedup_2x: Option<f64>,
    /// PV+boost throughput at 4x / at 1x.
    pub retention_4x: Option<f64>,
    /// `speedup_2x` under multi-threaded TCG: the median of the rounds'
    /// ratios ([`paired_ratios`]), not the ratio of two medians.
    pub mt_speedup_2x: Option<f64>,
    /// `retention_2x` under multi-threaded TCG, likewise by rounds.
    pub mt_retention_2x: Option<f64>,
}

impl Summary {
    /// Each figure by its JSON key, in the JSON's order.
    pub fn figures(&self) -> [(&'static str, Option<f64>); 13] {
        [
            ("speedup_2x", self.speedup_2x),
            ("retention_2x", self.retention_2x),
            (
                "null_hypercall_instructions",
                self.null_hypercall_instructions,
            ),
            ("vcpu_switch_instructions", self.vcpu_switch_instructions),
            ("speedup_2x_min", self.speedup_2x_min),
            ("retention_2x_min", self.retention_2x_min),
            ("pv_1x_ratio", self.pv_1x_ratio),
            ("worst_cell_ratio", self.worst_cell_ratio),
            ("fairness_2x_min", self.fairness_2x_min),
            ("hog_speedup_2x", self.hog_speedup_2x),
            ("retention_4x", self.retention_4x),
            ("mt_speedup_2x", self.mt_speedup_2x),
            ("mt_retention_2x", self.mt_retention_2x),
        ]
    }
}

/// `num / den`, or `None` when the quotient would not be a finite number.
fn ratio(num: f64, den: f64) -> Option<f64> {
    let q = num / den;
    (den != 0.0 && q.is_finite()).then_some(q)
}

/// Computes the headline figures from the runs and the measured costs.
pub fn summarize(cells: &[Cell], costs: Option<&Costs>) -> Summary {
    let p = HEADLINE_PCPUS;
    let at = |timing, vcpus, mode, hog| Point {
        timing,
        pcpus: p,
        hog,
        vcpus,
        mode,
    };
    let range = |point: Point| stats(cells, point).map(|s| s.throughput);
    let medians = |num: Point, den: Point| {
        range(num)
            .zip(range(den))
            .and_then(|(n, d)| ratio(n.median, d.median))
    };
    let paired = |num: Point, den: Point| paired_ratios(cells, num, den).map(|r| r.median);
    let worst = |num: Point, den: Point| {
        range(num)
            .zip(range(den))
            .and_then(|(n, d)| ratio(n.min, d.max))
    };
    let icount = |vcpus, mode| at(Timing::Icount, vcpus, mode, false);
    let mt = |vcpus, mode| at(Timing::Mttcg, vcpus, mode, false);
    let boost_2x = icount(2 * p, Mode::PvBoost);
    let boost_1x = icount(p, Mode::PvBoost);
    let worst_cell_ratio = all_stats(cells)
        .iter()
        .filter(|s| {
            s.point.timing == Timing::Icount
                && s.point.mode == Mode::PvBoost
                && s.point.vcpus > s.point.pcpus
        })
        .filter_map(|s| medians(s.point, s.point.with_mode(Mode::Vanilla)))
        .min_by(f64::total_cmp);
    let fairness_2x_min = cells
        .iter()
        .filter(|c| c.point == boost_2x)
        .filter_map(Cell::fairness)
        .min_by(f64::total_cmp);
    let finite = |v: f64| v.is_finite().then_some(v);
    Summary {
        speedup_2x: medians(boost_2x, icount(2 * p, Mode::Vanilla)),
        retention_2x: medians(boost_2x, boost_1x),
        null_hypercall_instructions: costs.and_then(|c| finite(c.null_hypercall_instructions)),
        vcpu_switch_instructions: costs.and_then(|c| finite(c.vcpu_switch_instructions)),
        speedup_2x_min: worst(boost_2x, icount(2 * p, Mode::Vanilla)),
        retention_2x_min: worst(boost_2x, boost_1x),
        pv_1x_ratio: medians(boost_1x, icount(p, Mode::Vanilla)),
        worst_cell_ratio,
        fairness_2x_min,
        hog_speedup_2x: medians(
            at(Timing::Icount, 2 * p, Mode::PvBoost, true),
            at(Timing::Icount, 2 * p, Mode::Vanilla, true),
        ),
        retention_4x: medians(icount(4 * p, Mode::PvBoost), boost_1x),
        mt_speedup_2x: paired(mt(2 * p, Mode::PvBoost), mt(2 * p, Mode::Vanilla)),
        mt_retention_2x: paired(mt(2 * p, Mode::PvBoost), mt(p, Mode::PvBoost)),
    }
}

/// `num`'s run over `den`'s run of the same round (the same run number),
/// for every round that has both, summarised. The multi-threaded runs go
/// in rounds over the points, so a round's two runs are seconds apart and
/// see one state of the host, whose speed moves between minutes (the
/// same cell at 1.3 and at 3.4 million acquisitions/s, with as many
/// contended hand-offs, in one full run: docs/benchmarks.md, "Reading the
/// figures"); the ratio of two medians could pair runs from different
/// states.
pub fn paired_ratios(cells: &[Cell], num: Point, den: Point) -> Option<Range> {
    let runs = |point: Point| {
        cells
            .iter()
            .filter(move |c| c.point == point)
            .map(|c| (c.run, c.throughput()))
    };
    crate::measure::paired_by_round(runs(num), runs(den))
}

/// A target: the figure's key, the bound, and whether the figure must
/// reach it (`>=`) rather than stay within it (`<=`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    pub key: &'static str,
    pub bound: f64,
    pub higher_is_better: bool,
}

/// The targets of issue 17, in the summary's order (`retention_2x_min`
/// and `hog_speedup_2x` are reported without one: `worst_cell_ratio`
/// covers the hog cells).
pub const TARGETS: [Target; 11] = [
    Target::at_least("speedup_2x", 5.0),
    Target::at_least("retention_2x", 0.95),
    Target::at_most("null_hypercall_instructions", 100.0),
    Target::at_most("vcpu_switch_instructions", 600.0),
    Target::at_least("speedup_2x_min", 3.0),
    Target::at_least("pv_1x_ratio", 0.97),
    Target::at_least("worst_cell_ratio", 1.0),
    Target::at_least("fairness_2x_min", 0.5),
    Target::at_least("retention_4x", 0.9),
    Target::at_least("mt_speedup_2x", 3.0),
    Target::at_least("mt_retention_2x", 0.9),
];

impl Target {
    const fn at_least(key: &'static str, bound: f64) -> Self {
        Self {
            key,
            bound,
            higher_is_better: true,
        }
    }

    const fn at_most(key: &'static str, bound: f64) -> Self {
        Self {
            key,
            bound,
            higher_is_better: false,
        }
    }
}

/// How one headline figure compares with its target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// The figure's key, as in the summary JSON.
    pub key: &'static str,
    /// The measured figure, if any.
    pub value: Option<f64>,
    /// The target.
    pub target: f64,
    /// Whether the figure must reach the target (`>=`) rather than stay
    /// within it (`<=`).
    pub higher_is_better: bool,
    /// Whether the target is met; a missing figure never meets it.
    pub met: bool,
}

/// Compares each headline figure that has a target with it, in the order
/// of `targets`.
pub fn verdicts(summary: &Summary, targets: &[Target]) -> Vec<Verdict> {
    let figures = summary.figures();
    targets
        .iter()
        .map(|t| {
            let value = figures
                .iter()
                .find(|(key, _)| *key == t.key)
                .and_then(|(_, v)| *v);
            Verdict {
                key: t.key,
                value,
                target: t.bound,
                higher_is_better: t.higher_is_better,
                met: value.is_some_and(|v| {
                    if t.higher_is_better {
                        v >= t.bound
                    } else {
                        v <= t.bound
                    }
                }),
            }
        })
        .collect()
}

/// Pretty-prints a value as JSON, with a final newline.
pub(crate) fn to_pretty_json<T: Serialize>(value: &T) -> String {
    // Cannot fail: serde_json only fails on maps with non-string keys and on
    // errors a `Serialize` impl raises itself; every type this module
    // serialises has string keys and derived (or infallible) impls, and a
    // non-finite f64 is written as null rather than rejected.
    let mut json =
        serde_json::to_string_pretty(value).expect("the report's types always serialise to JSON");
    json.push('\n');
    json
}

/// The summary JSON: an object with exactly the [`Summary`] keys, each a
/// number or `null` when missing; pretty-printed, with a final newline.
pub fn summary_json(summary: &Summary) -> String {
    to_pretty_json(summary)
}

/// The `meta` object of the results JSON, in the order given.
struct Meta<'a>(&'a [(&'a str, String)]);

impl Serialize for Meta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (*k, v)))
    }
}

/// A run in the results JSON: its fields plus the derived figures.
#[derive(Serialize)]
struct CellRecord<'a> {
    #[serde(flatten)]
    cell: &'a Cell,
    overcommit: f64,
    throughput: f64,
    fairness: Option<f64>,
}

/// The results JSON's top-level object.
#[derive(Serialize)]
struct Results<'a> {
    meta: Meta<'a>,
    runs: Vec<CellRecord<'a>>,
    points: Vec<PointStats>,
    costs: Option<&'a Costs>,
    summary: &'a Summary,
    verdicts: &'a [Verdict],
}

/// The full results JSON: `{"meta": {...}, "runs": [...], "points":
/// [...], "costs": ..., "summary": ..., "verdicts": [...]}`.
///
/// `meta` holds the given pairs in order (the keys should be distinct);
/// each run carries its fields plus `overcommit`, `throughput` and
/// `fairness`; each point its statistics; `costs` is `null` when not
/// measured. Pretty-printed, with a final newline.
pub fn results_json(
    cells: &[Cell],
    costs: Option<&Costs>,
    summary: &Summary,
    verdicts: &[Verdict],
    meta: &[(&str, String)],
) -> String {
    let results = Results {
        meta: Meta(meta),
        runs: cells
            .iter()
            .map(|cell| CellRecord {
                cell,
                overcommit: cell.point.overcommit(),
                throughput: cell.throughput(),
                fairness: cell.fairness(),
            })
            .collect(),
        points: all_stats(cells),
        costs,
        summary,
        verdicts,
    };
    to_pretty_json(&results)
}

/// What the tables print for a missing figure.
const MISSING: &str = "–";

/// A non-negative number rounded to an integer, with thousands separators:
/// `12,345`.
fn thousands(v: f64) -> String {
    if !v.is_finite() {
        return MISSING.to_string();
    }
    // The cast saturates; throughputs are far below u64::MAX.
    let digits = (v.max(0.0).round() as u64).to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The overcommit factor as a label: `1x`, `2x`, or `1.5x` when vCPUs are
/// not a multiple of pCPUs.
fn overcommit_label(vcpus: u32, pcpus: u32) -> String {
    if pcpus == 0 {
        MISSING.to_string()
    } else if vcpus.is_multiple_of(pcpus) {
        format!("{}x", vcpus / pcpus)
    } else {
        format!("{:.1}x", f64::from(vcpus) / f64::from(pcpus))
    }
}

/// The heading of a group, as in the plot's title.
fn group_title(timing: Timing, pcpus: u32, hog: bool) -> String {
    let hog = if hog { ", with CPU-hog VM" } else { "" };
    let timing = match timing {
        Timing::Icount => "icount",
        Timing::Mttcg => "multi-threaded TCG",
    };
    format!("{pcpus} pCPUs{hog}, {timing}")
}

/// The distinct (timing, pCPUs, hog) groups: icount first, then by pCPUs,
/// then without the hog first.
fn groups(cells: &[Cell]) -> Vec<(Timing, u32, bool)> {
    let mut groups: Vec<(Timing, u32, bool)> = cells
        .iter()
        .map(|c| (c.point.timing, c.point.pcpus, c.point.hog))
        .collect();
    groups.sort_unstable_by_key(|&(t, p, h)| (t != Timing::Icount, p, h));
    groups.dedup();
    groups
}

/// The statistics of the point of a (timing, pCPUs, hog) group with
/// `vcpus` and `mode`.
fn group_stats(
    cells: &[Cell],
    (timing, pcpus, hog): (Timing, u32, bool),
    vcpus: u32,
    mode: Mode,
) -> Option<PointStats> {
    let point = Point {
        timing,
        pcpus,
        hog,
        vcpus,
        mode,
    };
    stats(cells, point)
}

/// The distinct vCPU counts of a group, ascending.
fn vcpu_counts(cells: &[Cell], timing: Timing, pcpus: u32, hog: bool) -> Vec<u32> {
    let mut vcpus: Vec<u32> = cells
        .iter()
        .filter(|c| c.point.timing == timing && c.point.pcpus == pcpus && c.point.hog == hog)
        .map(|c| c.point.vcpus)
        .collect();
    vcpus.sort_unstable();
    vcpus.dedup();
    vcpus
}

/// A verdict's figure as [`figure`] shows it, with four decimals where two
/// would read as the target itself although the verdict says otherwise
/// (0.9494 against ">= 0.95" reads "0.95 ... MISSED").
pub fn verdict_figure(v: &Verdict) -> String {
    let shown = figure(v.key, v.value);
    match v.value {
        Some(x) if shown.parse::<f64>().ok() == Some(v.target) && x != v.target => {
            format!("{x:.4}")
        }
        _ => shown,
    }
}

/// A headline figure for the targets table: ratios with two decimals,
/// instruction counts with one.
fn figure(key: &str, value: Option<f64>) -> String {
    match value {
        None => MISSING.to_string(),
        Some(v) if key.ends_with("_instructions") => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// A throughput range: `1,234,567 [1,100,000–1,300,000]`, or the median
/// alone for one run.
fn throughput_text(range: &Range) -> String {
    if range.n == 1 {
        thousands(range.median)
    } else {
        format!(
            "{} [{}–{}]",
            thousands(range.median),
            thousands(range.min),
            thousands(range.max)
        )
    }
}

/// The ratio of two points' medians with the range their runs allow:
/// `5.2x [3.1–7.4]`.
fn ratio_text(num: &Range, den: &Range, suffix: &str) -> String {
    match ratio(num.median, den.median) {
        None => MISSING.to_string(),
        Some(r) if num.n == 1 && den.n == 1 => format!("{r:.2}{suffix}"),
        Some(r) => {
            let low = ratio(num.min, den.max).map_or_else(|| MISSING.into(), |v| format!("{v:.2}"));
            let high =
                ratio(num.max, den.min).map_or_else(|| MISSING.into(), |v| format!("{v:.2}"));
            format!("{r:.2}{suffix} [{low}–{high}]")
        }
    }
}

/// The least fair run of a point: `0.14 (4,924 / 34,360)`.
fn fairness_text(stats: &PointStats) -> String {
    match (stats.fairness, stats.least_fair) {
        (Some(f), Some((low, high))) => format!(
            "{:.2} ({} / {})",
            f.min,
            thousands(low as f64),
            thousands(high as f64)
        ),
        _ => MISSING.to_string(),
    }
}

/// The contended hand-offs a figure needs before it means anything: with
/// fewer, a handful of slice-long waits decide it.
pub const MIN_CONTENDED: u64 = 200;

/// Appends one group's table to `out`.
fn group_table(out: &mut String, cells: &[Cell], group: (Timing, u32, bool), host_cores: u32) {
    let (timing, pcpus, hog) = group;
    let at = |vcpus, mode| group_stats(cells, group, vcpus, mode);
    // Writing to a String cannot fail.
    let _ = writeln!(out, "### {}\n", group_title(timing, pcpus, hog));
    if timing == Timing::Mttcg && pcpus > host_cores {
        let _ = writeln!(
            out,
            "_{pcpus} pCPUs on a host with {host_cores} cores: the pCPUs share cores, so this \
             group is not parallel hardware._\n"
        );
    }
    let _ = writeln!(
        out,
        "| vCPUs | overcommit | vanilla acq/s | pv acq/s | pv+boost acq/s | pv+boost speed-up \
         | pv+boost retention | fairness vanilla | fairness pv+boost | vanilla contended | \
         worst wait pv+boost (ms) | data |"
    );
    let _ = writeln!(
        out,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---|"
    );
    let boost_1x = at(pcpus, Mode::PvBoost);
    for vcpus in vcpu_counts(cells, timing, pcpus, hog) {
        let [vanilla, pv, boost] = Mode::ALL.map(|mode| at(vcpus, mode));
        let acq = |s: &Option<PointStats>| {
            s.as_ref()
                .map_or_else(|| MISSING.to_string(), |s| throughput_text(&s.throughput))
        };
        let pair =
            |num: &Option<PointStats>, den: &Option<PointStats>, suffix: &str| match (num, den) {
                (Some(n), Some(d)) => ratio_text(&n.throughput, &d.throughput, suffix),
                _ => MISSING.to_string(),
            };
        let fair =
            |s: &Option<PointStats>| s.as_ref().map_or_else(|| MISSING.into(), fairness_text);
        let contended = vanilla.as_ref().map_or_else(
            || MISSING.to_string(),
            |s| {
                let few = if s.contended_min < MIN_CONTENDED {
                    " (few)"
                } else {
                    ""
                };
                format!("{}{few}", thousands(s.contended_min as f64))
            },
        );
        let worst_wait = boost.as_ref().map_or_else(
            || MISSING.to_string(),
            |s| format!("{:.3}", s.worst_wait_ns as f64 / 1e6),
        );
        let data_ok = [&vanilla, &pv, &boost]
            .iter()
            .all(|s| s.as_ref().is_none_or(|s| s.data_ok));
        let row = [
            vcpus.to_string(),
            overcommit_label(vcpus, pcpus),
            acq(&vanilla),
            acq(&pv),
            acq(&boost),
            pair(&boost, &vanilla, "x"),
            pair(&boost, &boost_1x, ""),
            fair(&vanilla),
            fair(&boost),
            contended,
            worst_wait,
            (if data_ok { "ok" } else { "LOST UPDATES" }).to_string(),
        ];
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out.push('\n');
}

/// The markdown report: a table per (timing, pCPUs, hog) group, then the
/// costs and the targets. `host_cores` is the machine's core count (a
/// multi-threaded group with more pCPUs is marked).
///
/// Each table has a row per vCPU count: the throughput of each mode in
/// acquisitions per second of counter time, as median [smallest–largest
/// run]; PV+boost's speed-up over vanilla and its retention of its 1x
/// throughput, as the ratio of medians [worst–best the runs allow]; the
/// least fair run of vanilla and of PV+boost (smallest over largest
/// per-vCPU count, with the counts); the fewest contended hand-offs of a
/// vanilla run (marked when under [`MIN_CONTENDED`]); PV+boost's worst
/// wait; whether every run kept its data. Missing figures show `–`.
pub fn markdown(
    cells: &[Cell],
    costs: Option<&Costs>,
    summary: &Summary,
    verdicts: &[Verdict],
    host_cores: u32,
) -> String {
    let mut out = String::new();
    let runs = |timing| {
        let mut per_point: Vec<usize> = all_stats(cells)
            .iter()
            .filter(|s| s.point.timing == timing)
            .map(|s| s.throughput.n)
            .collect();
        per_point.sort_unstable();
        per_point.first().copied().unwrap_or(0)
    };
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "Throughput is lock acquisitions per second of the guest's counter: \
         under icount one instruction is one nanosecond, each cell's runs are \
         perturbed by a recorded seed (at least {} runs per cell); under \
         multi-threaded TCG the pCPUs run in parallel on the host's cores and \
         the runs are plain repeats (at least {} per cell). Each figure is the \
         median with the smallest and largest run in brackets; a ratio's \
         brackets are the worst and best its runs allow. Speed-ups are over \
         vanilla in the same row; retention is PV+boost's throughput relative \
         to its 1x row.\n",
        runs(Timing::Icount),
        runs(Timing::Mttcg)
    );
    let speedup = summary
        .speedup_2x
        .map_or_else(|| MISSING.to_string(), |v| format!("{v:.2}x"));
    let retention = figure("retention_2x", summary.retention_2x);
    let mt = summary
        .mt_speedup_2x
        .map_or_else(|| MISSING.to_string(), |v| format!("{v:.2}x"));
    let _ = writeln!(
        out,
        "Headline ({HEADLINE_PCPUS} pCPUs, no CPU hog, 2x overcommit, icount medians): \
         PV+boost is **{speedup}** vanilla's throughput (worst run against best: {}) and \
         keeps **{retention}** of its 1x throughput; under multi-threaded TCG it is \
         **{mt}** vanilla's.\n",
        figure("speedup_2x_min", summary.speedup_2x_min)
    );

    let groups = groups(cells);
    if groups.is_empty() {
        out.push_str("_No measurements._\n\n");
    }
    for group in groups {
        group_table(&mut out, cells, group, host_cores);
    }

    if let Some(costs) = costs {
        let _ = writeln!(out, "### Costs (icount, exact)\n");
        let _ = writeln!(
            out,
            "- null hypercall: {:.1} instructions",
            costs.null_hypercall_instructions
        );
        let _ = writeln!(
            out,
            "- directed yield and vCPU switch: {:.1} instructions\n",
            costs.vcpu_switch_instructions
        );
    }

    let _ = writeln!(out, "### Targets\n");
    let _ = writeln!(out, "| figure | measured | target | met |");
    let _ = writeln!(out, "|:---|---:|---:|:---|");
    for v in verdicts {
        let direction = if v.higher_is_better { ">=" } else { "<=" };
        let met = if v.met { "yes" } else { "**no**" };
        let _ = writeln!(
            out,
            "| `{}` | {} | {direction} {} | {met} |",
            v.key,
            verdict_figure(v),
            v.target
        );
    }
    let untargeted: Vec<String> = summary
        .figures()
        .iter()
        .filter(|(key, _)| !verdicts.iter().any(|v| v.key == *key))
        .map(|(key, value)| format!("`{key}` {}", figure(key, *value)))
        .collect();
    if !untargeted.is_empty() {
        let _ = writeln!(out, "\nWithout a target: {}.", untargeted.join(", "));
    }
    if let Some(rounds) = mt_rounds(cells) {
        let _ = writeln!(out, "\n{rounds}");
    }
    out
}

/// The multi-threaded figures round by round, and the host's
/// core-to-core round trip beside the runs; `None` without
/// multi-threaded runs at [`HEADLINE_PCPUS`].
fn mt_rounds(cells: &[Cell]) -> Option<String> {
    let p = HEADLINE_PCPUS;
    let mt = |vcpus, mode| Point {
        timing: Timing::Mttcg,
        pcpus: p,
        hog: false,
        vcpus,
        mode,
    };
    let range = |r: Range| format!("{:.2} [{:.2}–{:.2}]", r.median, r.min, r.max);
    let retention = paired_ratios(cells, mt(2 * p, Mode::PvBoost), mt(p, Mode::PvBoost))?;
    let mut text = format!(
        "Multi-threaded, round by round (each ratio from two runs of one round, \
         seconds apart; the median is the figure above): `mt_retention_2x` {} over \
         {} rounds",
        range(retention),
        retention.n
    );
    if let Some(speedup) = paired_ratios(cells, mt(2 * p, Mode::PvBoost), mt(2 * p, Mode::Vanilla))
    {
        text.push_str(&format!(", `mt_speedup_2x` {}", range(speedup)));
    }
    text.push('.');
    let probes: Vec<f64> = cells
        .iter()
        .filter(|c| c.point.timing == Timing::Mttcg)
        .filter_map(|c| c.host_round_trip_ns)
        .collect();
    if let Some(rt) = Range::of(&probes) {
        text.push_str(&format!(
            " The host's core-to-core round trip before each multi-threaded run: \
             {:.0} ns [{:.0}–{:.0}] over {} runs.",
            rt.median, rt.min, rt.max, rt.n
        ));
    }
    Some(text)
}

/// Tick values for an axis from 0 up to at least `max`: 4 to 6 values, evenly
/// spaced by 1, 2, 2.5 or 5 times a power of ten.
pub(crate) fn nice_ticks(max: f64) -> Vec<f64> {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    // Start a decade below the largest power of ten not above `max`, where
    // every step needs more than 5 intervals, and take the first step that
    // needs at most 5. The steps grow by at most 2x each, so the chosen step
    // needs more than 5 / 2, hence at least 3 intervals: 4 to 6 ticks.
    let mut exp = max.log10().floor() as i32 - 1;
    loop {
        for mult in [1.0, 2.0, 2.5, 5.0] {
            let step = mult * 10f64.powi(exp);
            // The tolerance keeps rounding noise from adding an interval.
            let intervals = (max / step - 1e-9).ceil().max(1.0) as u32;
            if intervals <= 5 {
                // Multiplying or dividing integers by an exact power of ten
                // gives the closest f64 to the decimal value (0.3, not
                // 0.30000000000000004), so the labels print cleanly.
                return (0..=intervals)
                    .map(|i| {
                        let units = f64::from(i) * mult;
                        if exp >= 0 {
                            units * 10f64.powi(exp)
                        } else {
                            units / 10f64.powi(-exp)
                        }
                    })
                    .collect();
            }
        }
        exp += 1;
    }
}

/// Labels for the ticks, shortened with k, M or G after the largest tick:
/// `0`, `2.5M`, `5M`.
pub(crate) fn tick_labels(ticks: &[f64]) -> Vec<String> {
    let top = ticks.iter().copied().fold(0.0, f64::max);
    let (unit, suffix) = if top >= 1e9 {
        (1e9, "G")
    } else if top >= 1e6 {
        (1e6, "M")
    } else if top >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    ticks
        .iter()
        .map(|t| {
            if *t == 0.0 {
                "0".to_string()
            } else {
                format!("{}{suffix}", t / unit)
            }
        })
        .collect()
}

/// Escapes text for an XML text node or attribute value.
pub(crate) fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(ch),
        }
    }
    out
}

/// A coordinate with at most one decimal: `12`, `12.5`.
pub(crate) fn coord(v: f64) -> String {
    let s = format!("{v:.1}");
    match s.strip_suffix(".0") {
        Some("-0") => "0".to_string(),
        Some(int) => int.to_string(),
        None => s,
    }
}

/// The colour of a mode's line in the plot.
fn colour(mode: Mode) -> &'static str {
    match mode {
        Mode::Vanilla => "#d62728",
        Mode::Pv => "#1f77b4",
        Mode::PvBoost => "#2ca02c",
    }
}

/// The plot's size and the plot area inside it.
const SVG_WIDTH: f64 = 640.0;
const SVG_HEIGHT: f64 = 400.0;
const PLOT_LEFT: f64 = 70.0;
const PLOT_RIGHT: f64 = 500.0;
const PLOT_TOP: f64 = 50.0;
const PLOT_BOTTOM: f64 = 330.0;

/// A self-contained SVG plot of throughput against overcommit for one
/// (timing, pCPUs, hog) group: per mode with runs, a line through the
/// medians, a marker at each, and a bar from the smallest to the largest
/// run (`data-range` elements); a legend.
///
/// The x axis places the group's overcommit factors evenly; the y axis
/// starts at 0 and has 4 to 6 round ticks with gridlines.
pub fn svg_plot(cells: &[Cell], timing: Timing, pcpus: u32, hog: bool) -> String {
    let vcpus = vcpu_counts(cells, timing, pcpus, hog);
    let at = |vcpus, mode| group_stats(cells, (timing, pcpus, hog), vcpus, mode);
    let max = vcpus
        .iter()
        .flat_map(|&v| Mode::ALL.map(|m| at(v, m)))
        .flatten()
        .map(|s| s.throughput.max)
        .filter(|t| t.is_finite())
        .fold(0.0, f64::max);
    let ticks = nice_ticks(max);
    // nice_ticks never returns fewer than 4 ticks; the fallback is not used.
    let top_tick = ticks.last().copied().unwrap_or(1.0);
    let x_at = |i: usize| {
        let slot = (PLOT_RIGHT - PLOT_LEFT) / vcpus.len().max(1) as f64;
        PLOT_LEFT + (i as f64 + 0.5) * slot
    };
    let y_at = |v: f64| PLOT_BOTTOM - v / top_tick * (PLOT_BOTTOM - PLOT_TOP);
    let (left, right) = (coord(PLOT_LEFT), coord(PLOT_RIGHT));
    let (top, bottom) = (coord(PLOT_TOP), coord(PLOT_BOTTOM));

    let title = format!(
        "Lock throughput vs overcommit, {}",
        group_title(timing, pcpus, hog)
    );
    let mut out = svg_open(SVG_WIDTH, SVG_HEIGHT, &title);
    svg_y_grid(&mut out, &ticks, y_at, PLOT_LEFT, PLOT_RIGHT);

    // Axes and x labels.
    let _ = writeln!(
        out,
        "<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{bottom}\" stroke=\"#333333\"/>"
    );
    let _ = writeln!(
        out,
        "<line x1=\"{left}\" y1=\"{bottom}\" x2=\"{right}\" y2=\"{bottom}\" stroke=\"#333333\"/>"
    );
    for (i, v) in vcpus.iter().enumerate() {
        let x = coord(x_at(i));
        let _ = writeln!(
            out,
            "<line x1=\"{x}\" y1=\"{bottom}\" x2=\"{x}\" y2=\"{}\" stroke=\"#333333\"/>",
            coord(PLOT_BOTTOM + 5.0)
        );
        let _ = writeln!(
            out,
            "<text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            coord(PLOT_BOTTOM + 20.0),
            xml_escape(&overcommit_label(*v, pcpus))
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
        coord((PLOT_LEFT + PLOT_RIGHT) / 2.0),
        coord(PLOT_BOTTOM + 45.0),
        xml_escape("overcommit (vCPUs / pCPUs); bars: smallest to largest run")
    );
    let (yx, yy) = (coord(18.0), coord((PLOT_TOP + PLOT_BOTTOM) / 2.0));
    let _ = writeln!(
        out,
        "<text x=\"{yx}\" y=\"{yy}\" transform=\"rotate(-90 {yx} {yy})\" \
         text-anchor=\"middle\">{}</text>",
        xml_escape("acquisitions per second, median")
    );
    if vcpus.is_empty() {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            coord((PLOT_LEFT + PLOT_RIGHT) / 2.0),
            coord((PLOT_TOP + PLOT_BOTTOM) / 2.0),
            xml_escape("no measurements")
        );
    }

    // Per mode: the range bars, the median line and markers, the legend.
    let mut legend_row = 0;
    for (k, mode) in Mode::ALL.into_iter().enumerate() {
        // Each mode's bars a little apart, so that they do not hide each
        // other.
        let nudge = (k as f64 - 1.0) * 4.0;
        let points: Vec<(f64, Range)> = vcpus
            .iter()
            .enumerate()
            .filter_map(|(i, v)| Some((x_at(i) + nudge, at(*v, mode)?.throughput)))
            .collect();
        if points.is_empty() {
            continue;
        }
        let (name, colour) = (xml_escape(mode.name()), colour(mode));
        for (x, r) in &points {
            let _ = writeln!(
                out,
                "<line data-range=\"{name}\" x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" \
                 stroke=\"{colour}\" stroke-width=\"1.5\" opacity=\"0.6\"/>",
                coord(y_at(r.min)),
                coord(y_at(r.max)),
                x = coord(*x)
            );
        }
        let list: Vec<String> = points
            .iter()
            .map(|(x, r)| format!("{},{}", coord(*x), coord(y_at(r.median))))
            .collect();
        let _ = writeln!(
            out,
            "<polyline data-mode=\"{name}\" fill=\"none\" stroke=\"{colour}\" \
             stroke-width=\"2\" points=\"{}\"/>",
            list.join(" ")
        );
        for (x, r) in &points {
            let _ = writeln!(
                out,
                "<circle cx=\"{}\" cy=\"{}\" r=\"3.5\" fill=\"{colour}\"/>",
                coord(*x),
                coord(y_at(r.median))
            );
        }
        let y = PLOT_TOP + 10.0 + 20.0 * f64::from(legend_row);
        let _ = writeln!(
            out,
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{colour}\" \
             stroke-width=\"2\"/>",
            coord(PLOT_RIGHT + 20.0),
            coord(PLOT_RIGHT + 44.0),
            y = coord(y)
        );
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\">{name}</text>",
            coord(PLOT_RIGHT + 50.0),
            coord(y + 4.0)
        );
        legend_row += 1;
    }
    out.push_str("</svg>\n");
    out
}

/// The start of a plot: the `svg` element, a white background and the
/// title, centred at the top.
pub(crate) fn svg_open(width: f64, height: f64, title: &str) -> String {
    let (w, h) = (coord(width), coord(height));
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(out, "<rect width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>");
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">{}</text>",
        coord(width / 2.0),
        xml_escape(title)
    );
    out
}

/// A horizontal gridline from `left` to `right` at each tick, labelled on
/// the left.
pub(crate) fn svg_y_grid(
    out: &mut String,
    ticks: &[f64],
    y_at: impl Fn(f64) -> f64,
    left: f64,
    right: f64,
) {
    for (tick, label) in ticks.iter().zip(tick_labels(ticks)) {
        let y = y_at(*tick);
        let _ = writeln!(
            out,
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#dddddd\"/>",
            coord(left),
            coord(right),
            y = coord(y)
        );
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            coord(left - 8.0),
            coord(y + 4.0),
            xml_escape(&label)
        );
    }
}

/// The line that opens the generated section of `docs/benchmarks.md`.
pub const BEGIN_MARKER: &str = "<!-- bench:begin -->";
/// The line that closes the generated section of `docs/benchmarks.md`.
pub const END_MARKER: &str = "<!-- bench:end -->";

/// Replaces the text between [`BEGIN_MARKER`] and [`END_MARKER`] in `doc`
/// with `generated`, surrounded by a newline on each side; the markers and
/// everything outside them stay. The section runs from the last begin marker
/// to the first end marker after it; when no end marker follows the last
/// begin marker, a new section (markers included) is appended at the end.
/// Applying the same text again changes nothing.
pub fn update_generated_section(doc: &str, generated: &str) -> String {
    if let Some(begin) = doc.rfind(BEGIN_MARKER) {
        let inner_start = begin + BEGIN_MARKER.len();
        if let Some(len) = doc[inner_start..].find(END_MARKER) {
            let inner_end = inner_start + len;
            return format!(
                "{}\n{generated}\n{}",
                &doc[..inner_start],
                &doc[inner_end..]
            );
        }
    }
    format!("{doc}\n{BEGIN_MARKER}\n{generated}\n{END_MARKER}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One run of 100 ms of counter time with `per_vcpu` acquisitions.
    fn run(
        timing: Timing,
        pcpus: u32,
        vcpus: u32,
        mode: Mode,
        hog: bool,
        per_vcpu: &[u64],
    ) -> Cell {
        Cell {
            point: Point {
                timing,
                pcpus,
                hog,
                vcpus,
                mode,
            },
            run: 0,
            seed: (timing == Timing::Icount).then_some(1),
            acquisitions: per_vcpu.iter().sum(),
            contended: 300,
            per_vcpu: per_vcpu.to_vec(),
            virtual_ns: 100_000_000,
            worst_wait_ns: 2_500_000,
            yields: 10,
            kicks: 20,
            data_ok: true,
            wall_secs: 1.0,
            host_round_trip_ns: (timing == Timing::Mttcg).then_some(400.0),
        }
    }

    /// Three runs of a point whose totals (per 100 ms) are `totals`, split
    /// evenly over two vCPUs but for the last run's, split 1:3.
    fn runs(
        timing: Timing,
        pcpus: u32,
        vcpus: u32,
        mode: Mode,
        hog: bool,
        totals: [u64; 3],
    ) -> Vec<Cell> {
        totals
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let split = if i == 2 {
                    [t / 4, t - t / 4]
                } else {
                    [t / 2, t / 2]
                };
                Cell {
                    run: i as u32,
                    ..run(timing, pcpus, vcpus, mode, hog, &split)
                }
            })
            .collect()
    }

    /// Icount and multi-threaded runs at 2 pCPUs, 1x and 2x, vanilla and
    /// PV+boost (throughput = totals x 10 per second); icount hog and
    /// 4-pCPU cells at 2x.
    fn matrix() -> Vec<Cell> {
        use Mode::{PvBoost, Vanilla};
        use Timing::{Icount, Mttcg};
        [
            runs(Icount, 2, 2, Vanilla, false, [100_000, 120_000, 110_000]),
            runs(Icount, 2, 2, PvBoost, false, [90_000, 100_000, 95_000]),
            runs(Icount, 2, 4, Vanilla, false, [10_000, 30_000, 20_000]),
            runs(Icount, 2, 4, PvBoost, false, [80_000, 100_000, 90_000]),
            runs(Icount, 2, 8, PvBoost, false, [60_000, 70_000, 80_000]),
            runs(Icount, 2, 4, Vanilla, true, [5_000, 5_000, 5_000]),
            runs(Icount, 2, 4, PvBoost, true, [4_000, 4_000, 4_000]),
            runs(Icount, 4, 8, Vanilla, false, [20_000, 20_000, 20_000]),
            runs(Icount, 4, 8, PvBoost, false, [60_000, 60_000, 60_000]),
            runs(Mttcg, 2, 2, PvBoost, false, [100_000, 100_000, 100_000]),
            runs(Mttcg, 2, 4, Vanilla, false, [20_000, 25_000, 30_000]),
            runs(Mttcg, 2, 4, PvBoost, false, [80_000, 90_000, 100_000]),
        ]
        .concat()
    }

    fn costs() -> Costs {
        Costs {
            null_hypercall_instructions: 127.0,
            vcpu_switch_instructions: 1364.3,
        }
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn mode_and_timing_names_and_serde_agree() {
        for mode in Mode::ALL {
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.name()));
            assert_eq!(serde_json::from_str::<Mode>(&json).unwrap(), mode);
        }
        let cell = &matrix()[0];
        let json = serde_json::to_value(cell).unwrap();
        assert_eq!(json["timing"], "icount");
        assert_eq!(json["mode"], "vanilla");
        assert_eq!(json["per_vcpu"], serde_json::json!([50_000, 50_000]));
        assert_eq!(serde_json::from_value::<Cell>(json).unwrap(), *cell);
    }

    #[test]
    fn a_run_has_throughput_and_fairness() {
        let c = run(Timing::Icount, 2, 4, Mode::Pv, false, &[10, 30, 20, 40]);
        assert_eq!(c.point.overcommit(), 2.0);
        assert_eq!(c.throughput(), 1_000.0);
        assert_eq!(c.vcpu_extremes(), Some((10, 40)));
        assert_eq!(c.fairness(), Some(0.25));
        assert_eq!(
            run(Timing::Icount, 2, 4, Mode::Pv, false, &[]).fairness(),
            None
        );
        assert_eq!(
            run(Timing::Icount, 2, 4, Mode::Pv, false, &[0, 0]).fairness(),
            None
        );
        let idle = Cell { virtual_ns: 0, ..c };
        assert_eq!(idle.throughput(), 0.0);
    }

    #[test]
    fn a_point_is_its_runs_median_and_range() {
        let cells = matrix();
        let point = cells[6].point; // icount 2x vanilla
        let s = stats(&cells, point).unwrap();
        assert_eq!(
            (
                s.throughput.median,
                s.throughput.min,
                s.throughput.max,
                s.throughput.n
            ),
            (200_000.0, 100_000.0, 300_000.0, 3)
        );
        // The third run split 1:3 is the least fair.
        let f = s.fairness.unwrap();
        assert_eq!((f.min, f.max), (1.0 / 3.0, 1.0));
        assert_eq!(s.least_fair, Some((5_000, 15_000)));
        assert_eq!(
            (s.contended_min, s.worst_wait_ns, s.data_ok),
            (300, 2_500_000, true)
        );
        let mut lost = cells.clone();
        lost[7].data_ok = false;
        assert!(!stats(&lost, point).unwrap().data_ok);
        let nowhere = Point { pcpus: 3, ..point };
        assert_eq!(stats(&cells, nowhere), None);
        assert_eq!(all_stats(&cells).len(), 12);
    }

    #[test]
    fn summarize_takes_medians_and_worst_cases() {
        let s = summarize(&matrix(), Some(&costs()));
        // 2x: PV+boost median 900k over vanilla 200k.
        assert!(close(s.speedup_2x, 4.5));
        // Smallest PV+boost run 800k over largest vanilla 300k.
        assert!(close(s.speedup_2x_min, 800.0 / 300.0));
        // PV+boost 2x over 1x: 900k / 950k; worst 800k / 1M.
        assert!(close(s.retention_2x, 900.0 / 950.0));
        assert!(close(s.retention_2x_min, 0.8));
        assert!(close(s.retention_4x, 700.0 / 950.0));
        // 1x: 950k over 1.1M.
        assert!(close(s.pv_1x_ratio, 950.0 / 1100.0));
        // Overcommitted cells: 2x 4.5, hog 0.8, 4 pCPUs 3.0; not 1x.
        assert!(close(s.worst_cell_ratio, 0.8));
        assert!(close(s.hog_speedup_2x, 0.8));
        // The 1:3 runs of PV+boost at 2x.
        assert!(close(s.fairness_2x_min, 1.0 / 3.0));
        assert!(close(s.mt_speedup_2x, 900.0 / 250.0));
        assert!(close(s.mt_retention_2x, 0.9));
        assert!(close(s.null_hypercall_instructions, 127.0));
        assert!(close(s.vcpu_switch_instructions, 1364.3));
    }

    #[test]
    fn multi_threaded_ratios_pair_the_runs_of_a_round() {
        use Mode::PvBoost;
        use Timing::Mttcg;
        // The host is 2.5x faster in rounds 1 and 2 of the 1x cell but only
        // in round 2 of the 2x cell: the medians (1x 250k, 2x 90k) would
        // say 0.36; each round says 0.9 but for the one that straddles the
        // change.
        let mut cells = runs(Mttcg, 2, 2, PvBoost, false, [100_000, 250_000, 250_000]);
        cells.extend(runs(Mttcg, 2, 4, PvBoost, false, [90_000, 90_000, 225_000]));
        let r = paired_ratios(&cells, cells[3].point, cells[0].point).unwrap();
        assert!((r.median - 0.9).abs() < 1e-9, "{r:?}");
        assert!(
            (r.min - 0.36).abs() < 1e-9 && (r.max - 0.9).abs() < 1e-9,
            "{r:?}"
        );
        assert_eq!(r.n, 3);
        assert!(close(summarize(&cells, None).mt_retention_2x, 0.9));
        // A round without its partner is left out, not paired elsewhere.
        let partial: Vec<Cell> = cells.iter().filter(|c| c.run != 0).cloned().collect();
        assert_eq!(
            paired_ratios(&partial, cells[3].point, cells[0].point).map(|r| r.n),
            Some(2)
        );
        let text = mt_rounds(&cells).unwrap();
        assert!(
            text.contains("`mt_retention_2x` 0.90 [0.36–0.90] over 3 rounds"),
            "{text}"
        );
        assert!(
            text.contains(
                "round trip before each multi-threaded run: 400 ns [400–400] over 6 runs"
            ),
            "{text}"
        );
        assert_eq!(mt_rounds(&cells[..3]), None);
    }

    #[test]
    fn summarize_missing_runs_or_costs_give_none() {
        let s = summarize(&[], None);
        assert!(s.figures().iter().all(|(_, v)| v.is_none()), "{s:?}");
        // Without the multi-threaded runs only the mt keys are missing.
        let icount: Vec<Cell> = matrix()
            .into_iter()
            .filter(|c| c.point.timing == Timing::Icount)
            .collect();
        let s = summarize(&icount, None);
        assert!(s.mt_speedup_2x.is_none() && s.mt_retention_2x.is_none());
        assert!(s.speedup_2x.is_some() && s.null_hypercall_instructions.is_none());
        // A zero denominator is no figure.
        let mut zero = matrix();
        for c in zero.iter_mut().filter(|c| c.point.mode == Mode::Vanilla) {
            c.acquisitions = 0;
        }
        let s = summarize(&zero, None);
        assert!(s.speedup_2x.is_none() && s.pv_1x_ratio.is_none());
    }

    #[test]
    fn verdicts_follow_the_targets() {
        let s = summarize(&matrix(), Some(&costs()));
        let v = verdicts(&s, &TARGETS);
        let keys: Vec<&str> = v.iter().map(|v| v.key).collect();
        assert_eq!(
            keys,
            [
                "speedup_2x",
                "retention_2x",
                "null_hypercall_instructions",
                "vcpu_switch_instructions",
                "speedup_2x_min",
                "pv_1x_ratio",
                "worst_cell_ratio",
                "fairness_2x_min",
                "retention_4x",
                "mt_speedup_2x",
                "mt_retention_2x",
            ]
        );
        let met = |key| v.iter().find(|v| v.key == key).unwrap().met;
        // 4.5 < 5; 127 > 100; mt 3.6 >= 3; mt retention 0.9 >= 0.9.
        assert!(!met("speedup_2x") && !met("null_hypercall_instructions"));
        assert!(met("mt_speedup_2x") && met("mt_retention_2x"));
        let none = verdicts(&summarize(&[], None), &TARGETS);
        assert!(none.iter().all(|v| !v.met && v.value.is_none()));
        let within = verdicts(
            &Summary {
                null_hypercall_instructions: Some(100.0),
                ..summarize(&[], None)
            },
            &TARGETS,
        );
        assert!(within[2].met, "<= includes the bound");
        // A figure just short of its target is not shown as the target.
        let verdict = |value| Verdict {
            key: "retention_2x",
            value: Some(value),
            target: 0.95,
            higher_is_better: true,
            met: value >= 0.95,
        };
        assert_eq!(verdict_figure(&verdict(0.94936)), "0.9494");
        assert_eq!(verdict_figure(&verdict(0.95)), "0.95");
        assert_eq!(verdict_figure(&verdict(0.9812)), "0.98");
        assert_eq!(verdict_figure(&verdict(0.9441)), "0.94");
    }

    #[test]
    fn the_summary_json_has_every_key() {
        let text = summary_json(&summarize(&matrix(), None));
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json.as_object().unwrap().len(), 13);
        // In the order of `Summary::figures`.
        let at: Vec<usize> = Summary::figures(&summarize(&[], None))
            .iter()
            .map(|(k, _)| text.find(&format!("\"{k}\":")).unwrap())
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert!(json["null_hypercall_instructions"].is_null());
        assert!(json["speedup_2x"].is_number());
    }

    #[test]
    fn the_results_json_holds_runs_and_points() {
        let cells = matrix();
        let s = summarize(&cells, Some(&costs()));
        let v = verdicts(&s, &TARGETS);
        let json: serde_json::Value = serde_json::from_str(&results_json(
            &cells,
            Some(&costs()),
            &s,
            &v,
            &[("command", "cargo xtask bench".into())],
        ))
        .unwrap();
        assert_eq!(json["meta"]["command"], "cargo xtask bench");
        assert_eq!(json["runs"].as_array().unwrap().len(), cells.len());
        assert_eq!(json["runs"][0]["throughput"], 1_000_000.0);
        assert_eq!(json["runs"][0]["fairness"], 1.0);
        assert_eq!(json["runs"][0]["seed"], 1);
        assert_eq!(json["points"].as_array().unwrap().len(), 12);
        assert_eq!(json["points"][0]["throughput"]["n"], 3);
        assert_eq!(json["costs"]["vcpu_switch_instructions"], 1364.3);
        assert_eq!(json["verdicts"].as_array().unwrap().len(), TARGETS.len());
    }

    #[test]
    fn the_markdown_gives_ranges_fairness_and_targets() {
        let cells = matrix();
        let s = summarize(&cells, Some(&costs()));
        let v = verdicts(&s, &TARGETS);
        let md = markdown(&cells, Some(&costs()), &s, &v, 2);
        assert!(md.contains("### 2 pCPUs, icount\n"), "{md}");
        assert!(md.contains("### 2 pCPUs, with CPU-hog VM, icount\n"));
        assert!(md.contains("### 2 pCPUs, multi-threaded TCG\n"));
        // Icount groups first.
        assert!(md.find("icount\n").unwrap() < md.find("multi-threaded TCG\n").unwrap());
        // The 2x row: vanilla 200k [100k–300k], PV+boost 900k [800k–1M],
        // speed-up 4.5x [800/300–1000/100], retention, fairness.
        assert!(
            md.contains(
                "| 4 | 2x | 200,000 [100,000–300,000] | – | 900,000 [800,000–1,000,000] | \
                 4.50x [2.67–10.00] | 0.95 [0.80–1.11] | 0.33 (5,000 / 15,000) | \
                 0.33 (22,500 / 67,500) | 300 | 2.500 | ok |"
            ),
            "{md}"
        );
        assert!(md.contains("**4.50x**") && md.contains("worst run against best: 2.67"));
        assert!(md.contains("- null hypercall: 127.0 instructions"));
        assert!(md.contains("| `speedup_2x` | 4.50 | >= 5 | **no** |"));
        assert!(md.contains("| `mt_speedup_2x` | 3.60 | >= 3 | yes |"));
        assert!(md.contains("Without a target: `retention_2x_min` 0.80, `hog_speedup_2x` 0.80."));
        assert!(md.contains("at least 3 runs per cell"));
        // Few contended hand-offs are marked; a group with more pCPUs than
        // host cores under multi-threaded TCG too.
        let mut few = cells.clone();
        for c in few.iter_mut() {
            c.contended = 150;
            c.point.pcpus = 4;
            c.point.vcpus *= 2;
        }
        let md = markdown(&few, None, &summarize(&few, None), &[], 2);
        assert!(md.contains(" | 150 (few) | "), "{md}");
        assert!(md.contains("_4 pCPUs on a host with 2 cores"));
        assert!(!md.contains("### Costs"));
        assert!(markdown(&[], None, &summarize(&[], None), &[], 2).contains("_No measurements._"));
    }

    #[test]
    fn the_plot_draws_medians_and_ranges() {
        let cells = matrix();
        let svg = svg_plot(&cells, Timing::Icount, 2, false);
        balanced_elements(&svg);
        assert!(svg.contains(">Lock throughput vs overcommit, 2 pCPUs, icount</text>"));
        let lines = polylines(&svg);
        let modes: Vec<&str> = lines.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(modes, ["vanilla", "pv+boost"]);
        // Vanilla at 1x and 2x; PV+boost at 1x, 2x, 4x.
        assert_eq!((lines[0].1.len(), lines[1].1.len()), (2, 3));
        assert_eq!(svg.matches("data-range=\"vanilla\"").count(), 2);
        assert_eq!(svg.matches("data-range=\"pv+boost\"").count(), 3);
        assert_eq!(svg.matches("<circle").count(), 5);
        // PV+boost's 2x median (900k) above vanilla's (200k).
        assert!(lines[1].1[1].1 < lines[0].1[1].1);
        // The y axis reaches the largest run (1.1M): ticks to 1.25M.
        assert!(svg.contains(">1.25M</text>"), "{svg}");
        let mt = svg_plot(&cells, Timing::Mttcg, 2, false);
        assert!(mt.contains("multi-threaded TCG</text>"));
        let empty = svg_plot(&cells, Timing::Mttcg, 4, true);
        balanced_elements(&empty);
        assert!(polylines(&empty).is_empty() && empty.contains(">no measurements</text>"));
    }

    #[test]
    fn update_is_idempotent_with_a_generated_report() {
        let cells = matrix();
        let s = summarize(&cells, Some(&costs()));
        let v = verdicts(&s, &TARGETS);
        let md = markdown(&cells, Some(&costs()), &s, &v, 2);
        let once = update_generated_section("# Benchmarks\n", &md);
        let twice = update_generated_section(&once, &md);
        assert_eq!(once, twice);
        assert_eq!(once.matches(BEGIN_MARKER).count(), 1);
        assert_eq!(once.matches(END_MARKER).count(), 1);
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(12_345.0), "12,345");
        assert_eq!(thousands(1_234_567.6), "1,234,568");
        assert_eq!(thousands(f64::NAN), "–");
    }

    #[test]
    fn overcommit_labels() {
        assert_eq!(overcommit_label(2, 2), "1x");
        assert_eq!(overcommit_label(8, 2), "4x");
        assert_eq!(overcommit_label(3, 2), "1.5x");
        assert_eq!(overcommit_label(3, 0), "–");
    }

    #[test]
    fn nice_ticks_on_various_ranges() {
        assert_eq!(
            nice_ticks(12_345.0),
            [0.0, 2500.0, 5000.0, 7500.0, 10_000.0, 12_500.0]
        );
        assert_eq!(
            nice_ticks(10_000.0),
            [0.0, 2000.0, 4000.0, 6000.0, 8000.0, 10_000.0]
        );
        assert_eq!(nice_ticks(3.0), [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(nice_ticks(0.3), [0.0, 0.1, 0.2, 0.3]);
        assert_eq!(nice_ticks(7.2e6), [0.0, 2e6, 4e6, 6e6, 8e6]);
        assert_eq!(nice_ticks(101.0), [0.0, 25.0, 50.0, 75.0, 100.0, 125.0]);
        // Nothing to show: a unit axis.
        assert_eq!(nice_ticks(0.0), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(nice_ticks(f64::NAN), nice_ticks(1.0));
        for max in [0.0013, 0.7, 1.0, 9.99, 42.0, 555.5, 1e5, 3.3e7, 8.1e9] {
            let ticks = nice_ticks(max);
            assert!((4..=6).contains(&ticks.len()), "{max}: {ticks:?}");
            assert_eq!(ticks[0], 0.0);
            assert!(*ticks.last().unwrap() >= max, "{max}: {ticks:?}");
            assert!(ticks[ticks.len() - 2] < max, "{max}: {ticks:?}");
            let step = ticks[1];
            let mantissa = step / 10f64.powf(step.log10().floor());
            assert!(
                [1.0, 2.0, 2.5, 5.0]
                    .iter()
                    .any(|m| (m - mantissa).abs() < 1e-9),
                "{max}: {ticks:?}"
            );
        }
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(
            tick_labels(&nice_ticks(12_345.0)),
            ["0", "2.5k", "5k", "7.5k", "10k", "12.5k"]
        );
        assert_eq!(
            tick_labels(&nice_ticks(7.2e6)),
            ["0", "2M", "4M", "6M", "8M"]
        );
        assert_eq!(tick_labels(&nice_ticks(0.3)), ["0", "0.1", "0.2", "0.3"]);
    }

    #[test]
    fn coordinates_have_at_most_one_decimal() {
        assert_eq!(coord(12.0), "12");
        assert_eq!(coord(12.25), "12.2");
        assert_eq!(coord(12.26), "12.3");
        assert_eq!(coord(-0.01), "0");
    }

    #[test]
    fn xml_escape_escapes_markup() {
        assert_eq!(
            xml_escape("a & b < c > \"d\" 'e'"),
            "a &amp; b &lt; c &gt; &quot;d&quot; &apos;e&apos;"
        );
        assert_eq!(xml_escape("pv+boost"), "pv+boost");
    }

    /// Checks that every element opened is closed in order, and returns the
    /// element names seen.
    fn balanced_elements(svg: &str) -> Vec<String> {
        let mut stack = Vec::new();
        let mut seen = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').unwrap() + start;
            let tag = &rest[start + 1..end];
            assert!(!tag.contains('<'), "unterminated tag before {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
            } else {
                let name = tag.split_whitespace().next().unwrap().trim_end_matches('/');
                seen.push(name.to_string());
                if !tag.ends_with('/') {
                    stack.push(name.to_string());
                }
            }
            // Text between tags must not hold a raw '&' that starts no entity.
            let text_end = rest[end..].find('<').map_or(rest.len(), |i| i + end);
            for (i, _) in rest[end..text_end].match_indices('&') {
                let entity = &rest[end + i..];
                assert!(
                    ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                        .iter()
                        .any(|e| entity.starts_with(e)),
                    "raw & in {entity}"
                );
            }
            rest = &rest[end + 1..];
        }
        assert!(stack.is_empty(), "unclosed {stack:?}");
        seen
    }

    /// The `points` of each polyline, by its `data-mode`.
    fn polylines(svg: &str) -> Vec<(String, Vec<(f64, f64)>)> {
        svg.lines()
            .filter(|l| l.starts_with("<polyline"))
            .map(|l| {
                let attr = |name: &str| {
                    let start = l.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
                    let len = l[start..].find('"').unwrap();
                    l[start..start + len].to_string()
                };
                let points = attr("points")
                    .split(' ')
                    .map(|p| {
                        let (x, y) = p.split_once(',').unwrap();
                        for n in [x, y] {
                            assert!(n.split('.').nth(1).is_none_or(|d| d.len() <= 1), "{n}");
                        }
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect();
                (attr("data-mode"), points)
            })
            .collect()
    }

    #[test]
    fn update_replaces_between_markers() {
        let doc = "# Benchmarks\n\nIntro.\n\n<!-- bench:begin -->\nold table\n<!-- bench:end -->\n\nOutro.\n";
        let updated = update_generated_section(doc, "new table");
        assert_eq!(
            updated,
            "# Benchmarks\n\nIntro.\n\n<!-- bench:begin -->\nnew table\n<!-- bench:end -->\n\nOutro.\n"
        );
        assert_eq!(update_generated_section(&updated, "new table"), updated);
        // Markers on one line, nothing between them.
        assert_eq!(
            update_generated_section("a <!-- bench:begin --><!-- bench:end --> b", "x"),
            "a <!-- bench:begin -->\nx\n<!-- bench:end --> b"
        );
    }

    #[test]
    fn update_appends_without_markers() {
        let doc = "# Benchmarks\n";
        let updated = update_generated_section(doc, "table");
        assert_eq!(
            updated,
            "# Benchmarks\n\n<!-- bench:begin -->\ntable\n<!-- bench:end -->\n"
        );
        assert_eq!(update_generated_section(&updated, "table"), updated);
        let other = update_generated_section(&updated, "other");
        assert_eq!(
            other,
            "# Benchmarks\n\n<!-- bench:begin -->\nother\n<!-- bench:end -->\n"
        );
        // An end marker alone is no section.
        let lone = "text\n<!-- bench:end -->\n";
        assert_eq!(
            update_generated_section(lone, "t"),
            format!("{lone}\n{BEGIN_MARKER}\nt\n{END_MARKER}\n")
        );
    }
}
