//! The report of `cargo xtask bench`: turns the measured cells of the lock
//! benchmark matrix into a full JSON results file, a summary JSON with fixed
//! keys, a markdown table, an SVG plot, and the generated section of
//! `docs/benchmarks.md`.
//!
//! Each cell of the matrix is one run of a bare-metal guest in which N vCPUs
//! hammer one shared lock on P physical CPUs. Time is virtual: QEMU runs with
//! icount, so one guest instruction is one nanosecond and the figures do not
//! depend on the host's load.
//!
//! Everything here is a pure function over the measurements, except
//! [`update_generated_section`], which rewrites a document's text (the caller
//! reads and writes the file). Where the matrix holds several cells for the
//! same point (pCPUs, vCPUs, mode, hog), the first one is used.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize, Serializer};

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

/// One matrix cell's measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// Physical CPUs the hypervisor ran on.
    pub pcpus: u32,
    /// vCPUs of the benchmark VM, all contending for the lock.
    pub vcpus: u32,
    /// The lock and hypervisor services used.
    pub mode: Mode,
    /// Whether a CPU-hog neighbour VM ran beside the benchmark VM.
    pub hog: bool,
    /// Total lock acquisitions by all vCPUs.
    pub acquisitions: u64,
    /// Virtual time the run took, in nanoseconds (the guest's counter under
    /// icount: one instruction is one nanosecond).
    pub virtual_ns: u64,
    /// The worst single acquisition latency, in virtual nanoseconds.
    pub worst_wait_ns: u64,
    /// Successful directed yields the guest saw.
    pub yields: u64,
    /// Kicks the guest sent.
    pub kicks: u64,
    /// Whether the guest's lost-update check passed.
    pub data_ok: bool,
}

impl Cell {
    /// vCPUs per physical CPU (0.0 for a cell without physical CPUs).
    pub fn overcommit(&self) -> f64 {
        if self.pcpus == 0 {
            0.0
        } else {
            f64::from(self.vcpus) / f64::from(self.pcpus)
        }
    }

    /// Lock acquisitions per virtual second (0.0 when no virtual time
    /// passed).
    pub fn throughput(&self) -> f64 {
        if self.virtual_ns == 0 {
            0.0
        } else {
            // u64 -> f64 loses precision only above 2^53, far beyond any run.
            self.acquisitions as f64 * 1e9 / self.virtual_ns as f64
        }
    }
}

/// Costs measured in instructions (icount), averaged over many iterations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    /// A hypercall that does nothing, from the guest's `hvc` to its return.
    pub null_hypercall_instructions: f64,
    /// Switching a physical CPU from one vCPU to another.
    pub vcpu_switch_instructions: f64,
}

/// The targets the issue sets for the headline figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Targets {
    /// Least PV+boost speed-up over vanilla at 2x overcommit.
    pub speedup_2x: f64,
    /// Least share of its 1x throughput PV+boost keeps at 2x overcommit.
    pub retention_2x: f64,
    /// Most instructions a null hypercall may cost.
    pub null_hypercall_instructions: f64,
    /// Most instructions a vCPU switch may cost.
    pub vcpu_switch_instructions: f64,
}

impl Default for Targets {
    /// The targets: speed-up >= 4, retention >= 0.8, null hypercall
    /// <= 150 instructions, vCPU switch <= 1000 instructions.
    fn default() -> Self {
        Self {
            speedup_2x: 4.0,
            retention_2x: 0.8,
            null_hypercall_instructions: 150.0,
            vcpu_switch_instructions: 1000.0,
        }
    }
}

/// The physical CPU count the headline figures are measured at.
const HEADLINE_PCPUS: u32 = 2;

/// The headline figures; `None` where the cells or costs they need are
/// missing or a denominator is zero.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// PV+boost throughput / vanilla throughput at 2x overcommit (2 pCPUs, no
    /// hog).
    pub speedup_2x: Option<f64>,
    /// PV+boost throughput at 2x / PV+boost throughput at 1x overcommit
    /// (2 pCPUs, no hog).
    pub retention_2x: Option<f64>,
    /// Instructions a null hypercall costs.
    pub null_hypercall_instructions: Option<f64>,
    /// Instructions a vCPU switch costs.
    pub vcpu_switch_instructions: Option<f64>,
}

/// The first cell measured at this point of the matrix.
fn find(cells: &[Cell], pcpus: u32, vcpus: u32, mode: Mode, hog: bool) -> Option<&Cell> {
    cells
        .iter()
        .find(|c| c.pcpus == pcpus && c.vcpus == vcpus && c.mode == mode && c.hog == hog)
}

/// `num / den`, or `None` when the quotient would not be a finite number.
fn ratio(num: f64, den: f64) -> Option<f64> {
    let q = num / den;
    (den != 0.0 && q.is_finite()).then_some(q)
}

/// Computes the headline figures from the cells and the measured costs.
pub fn summarize(cells: &[Cell], costs: Option<&Costs>) -> Summary {
    let p = HEADLINE_PCPUS;
    let throughput =
        |vcpus: u32, mode: Mode| find(cells, p, vcpus, mode, false).map(Cell::throughput);
    let vanilla_2x = throughput(2 * p, Mode::Vanilla);
    let boost_2x = throughput(2 * p, Mode::PvBoost);
    let boost_1x = throughput(p, Mode::PvBoost);
    let finite = |v: f64| v.is_finite().then_some(v);
    Summary {
        speedup_2x: boost_2x.zip(vanilla_2x).and_then(|(n, d)| ratio(n, d)),
        retention_2x: boost_2x.zip(boost_1x).and_then(|(n, d)| ratio(n, d)),
        null_hypercall_instructions: costs.and_then(|c| finite(c.null_hypercall_instructions)),
        vcpu_switch_instructions: costs.and_then(|c| finite(c.vcpu_switch_instructions)),
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

/// Compares each headline figure with its target, in the order of the
/// summary JSON's keys: `speedup_2x` and `retention_2x` must be `>=` their
/// targets, `null_hypercall_instructions` and `vcpu_switch_instructions`
/// `<=` theirs.
pub fn verdicts(summary: &Summary, targets: &Targets) -> Vec<Verdict> {
    let verdict = |key, value: Option<f64>, target, higher_is_better| Verdict {
        key,
        value,
        target,
        higher_is_better,
        met: value.is_some_and(|v| {
            if higher_is_better {
                v >= target
            } else {
                v <= target
            }
        }),
    };
    vec![
        verdict("speedup_2x", summary.speedup_2x, targets.speedup_2x, true),
        verdict(
            "retention_2x",
            summary.retention_2x,
            targets.retention_2x,
            true,
        ),
        verdict(
            "null_hypercall_instructions",
            summary.null_hypercall_instructions,
            targets.null_hypercall_instructions,
            false,
        ),
        verdict(
            "vcpu_switch_instructions",
            summary.vcpu_switch_instructions,
            targets.vcpu_switch_instructions,
            false,
        ),
    ]
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

/// The summary JSON: an object with exactly the keys `speedup_2x`,
/// `retention_2x`, `null_hypercall_instructions` and
/// `vcpu_switch_instructions`, each a number or `null` when missing;
/// pretty-printed, with a final newline.
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

/// A cell in the results JSON: its fields plus the derived figures.
#[derive(Serialize)]
struct CellRecord<'a> {
    #[serde(flatten)]
    cell: &'a Cell,
    overcommit: f64,
    throughput: f64,
}

/// The results JSON's top-level object.
#[derive(Serialize)]
struct Results<'a> {
    meta: Meta<'a>,
    cells: Vec<CellRecord<'a>>,
    costs: Option<&'a Costs>,
    summary: &'a Summary,
    verdicts: &'a [Verdict],
}

/// The full results JSON:
/// `{"meta": {...}, "cells": [...], "costs": ..., "summary": ..., "verdicts": [...]}`.
///
/// `meta` holds the given pairs in order (the keys should be distinct); each
/// cell carries its fields plus `overcommit` and `throughput`; `costs` is
/// `null` when not measured. Pretty-printed, with a final newline.
pub fn results_json(
    cells: &[Cell],
    costs: Option<&Costs>,
    summary: &Summary,
    verdicts: &[Verdict],
    meta: &[(&str, String)],
) -> String {
    let results = Results {
        meta: Meta(meta),
        cells: cells
            .iter()
            .map(|cell| CellRecord {
                cell,
                overcommit: cell.overcommit(),
                throughput: cell.throughput(),
            })
            .collect(),
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

/// The heading of a (pCPUs, hog) group, as in the plot's title.
fn group_title(pcpus: u32, hog: bool) -> String {
    let hog = if hog { ", with CPU-hog VM" } else { "" };
    format!("{pcpus} pCPUs{hog}")
}

/// The distinct (pCPUs, hog) groups, by pCPUs, then without the hog first.
fn groups(cells: &[Cell]) -> Vec<(u32, bool)> {
    let mut groups: Vec<(u32, bool)> = cells.iter().map(|c| (c.pcpus, c.hog)).collect();
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// The distinct vCPU counts of a group, ascending.
fn vcpu_counts(cells: &[Cell], pcpus: u32, hog: bool) -> Vec<u32> {
    let mut vcpus: Vec<u32> = cells
        .iter()
        .filter(|c| c.pcpus == pcpus && c.hog == hog)
        .map(|c| c.vcpus)
        .collect();
    vcpus.sort_unstable();
    vcpus.dedup();
    vcpus
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

/// Appends one group's table to `out`.
fn group_table(out: &mut String, cells: &[Cell], pcpus: u32, hog: bool) {
    let throughput =
        |vcpus: u32, mode: Mode| find(cells, pcpus, vcpus, mode, hog).map(Cell::throughput);
    let speedup = |vcpus: u32, mode: Mode| {
        let r = throughput(vcpus, mode)
            .zip(throughput(vcpus, Mode::Vanilla))
            .and_then(|(n, d)| ratio(n, d));
        r.map_or_else(|| MISSING.to_string(), |r| format!("{r:.1}x"))
    };
    let boost_1x = throughput(pcpus, Mode::PvBoost);

    // Writing to a String cannot fail.
    let _ = writeln!(out, "### {}\n", group_title(pcpus, hog));
    let _ = writeln!(
        out,
        "| vCPUs | overcommit | vanilla acq/s | pv acq/s | pv+boost acq/s | pv speed-up \
         | pv+boost speed-up | pv+boost retention | worst wait pv+boost (ms) | data |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---|");
    for vcpus in vcpu_counts(cells, pcpus, hog) {
        let acq = |mode| throughput(vcpus, mode).map_or_else(|| MISSING.to_string(), thousands);
        let retention = throughput(vcpus, Mode::PvBoost)
            .zip(boost_1x)
            .and_then(|(n, d)| ratio(n, d))
            .map_or_else(|| MISSING.to_string(), |r| format!("{r:.2}"));
        let worst_wait = find(cells, pcpus, vcpus, Mode::PvBoost, hog).map_or_else(
            || MISSING.to_string(),
            |c| format!("{:.3}", c.worst_wait_ns as f64 / 1e6),
        );
        let data_ok = cells
            .iter()
            .filter(|c| c.pcpus == pcpus && c.hog == hog && c.vcpus == vcpus)
            .all(|c| c.data_ok);
        let row = [
            vcpus.to_string(),
            overcommit_label(vcpus, pcpus),
            acq(Mode::Vanilla),
            acq(Mode::Pv),
            acq(Mode::PvBoost),
            speedup(vcpus, Mode::Pv),
            speedup(vcpus, Mode::PvBoost),
            retention,
            worst_wait,
            (if data_ok { "ok" } else { "LOST UPDATES" }).to_string(),
        ];
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out.push('\n');
}

/// The markdown report: a table per (pCPUs, hog) group, then the costs and
/// the targets.
///
/// Each table has a row per vCPU count with the throughput of each mode in
/// acquisitions per virtual second, the speed-ups over vanilla in the same
/// row, PV+boost's retention of its 1x throughput, PV+boost's worst wait and
/// whether every run of the row kept its data (`ok` or `LOST UPDATES`).
/// Missing figures show `–`.
pub fn markdown(
    cells: &[Cell],
    costs: Option<&Costs>,
    summary: &Summary,
    verdicts: &[Verdict],
) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "Throughput is lock acquisitions per virtual second (QEMU icount: one \
         instruction is one nanosecond). Speed-ups are over vanilla in the same \
         row; retention is PV+boost's throughput relative to its 1x row.\n"
    );
    let speedup = summary
        .speedup_2x
        .map_or_else(|| MISSING.to_string(), |v| format!("{v:.2}x"));
    let retention = figure("retention_2x", summary.retention_2x);
    let _ = writeln!(
        out,
        "Headline ({HEADLINE_PCPUS} pCPUs, no CPU hog, 2x overcommit): PV+boost is \
         **{speedup}** vanilla's throughput and keeps **{retention}** of its 1x \
         throughput.\n"
    );

    let groups = groups(cells);
    if groups.is_empty() {
        out.push_str("_No measurements._\n\n");
    }
    for (pcpus, hog) in groups {
        group_table(&mut out, cells, pcpus, hog);
    }

    if let Some(costs) = costs {
        let _ = writeln!(out, "### Costs\n");
        let _ = writeln!(
            out,
            "- null hypercall: {:.1} instructions",
            costs.null_hypercall_instructions
        );
        let _ = writeln!(
            out,
            "- vCPU switch: {:.1} instructions\n",
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
            figure(v.key, v.value),
            v.target
        );
    }
    out
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
/// (pCPUs, hog) group: one line per mode that has cells, with a legend.
///
/// The x axis places the group's overcommit factors evenly; the y axis starts
/// at 0 and has 4 to 6 round ticks with gridlines.
pub fn svg_plot(cells: &[Cell], pcpus: u32, hog: bool) -> String {
    let selected: Vec<&Cell> = cells
        .iter()
        .filter(|c| c.pcpus == pcpus && c.hog == hog)
        .collect();
    let vcpus = vcpu_counts(cells, pcpus, hog);
    let max = selected
        .iter()
        .map(|c| c.throughput())
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

    let title = format!("Lock throughput vs overcommit, {}", group_title(pcpus, hog));
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
        xml_escape("overcommit (vCPUs / pCPUs)")
    );
    let (yx, yy) = (coord(18.0), coord((PLOT_TOP + PLOT_BOTTOM) / 2.0));
    let _ = writeln!(
        out,
        "<text x=\"{yx}\" y=\"{yy}\" transform=\"rotate(-90 {yx} {yy})\" \
         text-anchor=\"middle\">{}</text>",
        xml_escape("acquisitions per virtual second")
    );
    if selected.is_empty() {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            coord((PLOT_LEFT + PLOT_RIGHT) / 2.0),
            coord((PLOT_TOP + PLOT_BOTTOM) / 2.0),
            xml_escape("no measurements")
        );
    }

    // One line with markers per mode, and its legend entry.
    let mut legend_row = 0;
    for mode in Mode::ALL {
        let points: Vec<(String, String)> = vcpus
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                let t = find(cells, pcpus, *v, mode, hog)?.throughput();
                t.is_finite().then(|| (coord(x_at(i)), coord(y_at(t))))
            })
            .collect();
        if points.is_empty() {
            continue;
        }
        let (name, colour) = (xml_escape(mode.name()), colour(mode));
        let list: Vec<String> = points.iter().map(|(x, y)| format!("{x},{y}")).collect();
        let _ = writeln!(
            out,
            "<polyline data-mode=\"{name}\" fill=\"none\" stroke=\"{colour}\" \
             stroke-width=\"2\" points=\"{}\"/>",
            list.join(" ")
        );
        for (x, y) in &points {
            let _ = writeln!(
                out,
                "<circle cx=\"{x}\" cy=\"{y}\" r=\"3.5\" fill=\"{colour}\"/>"
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

    fn cell(pcpus: u32, vcpus: u32, mode: Mode, acquisitions: u64, virtual_ns: u64) -> Cell {
        Cell {
            pcpus,
            vcpus,
            mode,
            hog: false,
            acquisitions,
            virtual_ns,
            worst_wait_ns: 2_500_000,
            yields: 10,
            kicks: 20,
            data_ok: true,
        }
    }

    /// 2 pCPUs, no hog, at 1x and 2x, all modes.
    fn matrix() -> Vec<Cell> {
        vec![
            cell(2, 2, Mode::Vanilla, 1_000_000, 1_000_000_000),
            cell(2, 2, Mode::Pv, 1_200_000, 1_000_000_000),
            cell(2, 2, Mode::PvBoost, 1_500_000, 1_000_000_000),
            cell(2, 4, Mode::Vanilla, 250_000, 1_000_000_000),
            cell(2, 4, Mode::Pv, 600_000, 1_000_000_000),
            // Half a virtual second: 1,200,000 acquisitions per second.
            cell(2, 4, Mode::PvBoost, 600_000, 500_000_000),
        ]
    }

    fn costs() -> Costs {
        Costs {
            null_hypercall_instructions: 142.34,
            vcpu_switch_instructions: 812.0,
        }
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn mode_names_and_serde_agree() {
        let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(names, ["vanilla", "pv", "pv+boost"]);
        for mode in Mode::ALL {
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.name()));
            assert_eq!(serde_json::from_str::<Mode>(&json).unwrap(), mode);
        }
    }

    #[test]
    fn cell_overcommit_and_throughput() {
        let c = cell(2, 3, Mode::Pv, 750, 500);
        assert_eq!(c.overcommit(), 1.5);
        // 750 acquisitions in 500 ns: 1.5 per ns, 1.5e9 per second.
        assert_eq!(c.throughput(), 1.5e9);
        assert_eq!(cell(2, 3, Mode::Pv, 750, 0).throughput(), 0.0);
        assert_eq!(cell(0, 3, Mode::Pv, 750, 500).overcommit(), 0.0);
    }

    #[test]
    fn summarize_computes_headline_ratios() {
        let s = summarize(&matrix(), Some(&costs()));
        let vanilla_2x = 250_000.0 / 1.0;
        let boost_2x = 600_000.0 / 0.5;
        let boost_1x = 1_500_000.0 / 1.0;
        assert!(close(s.speedup_2x, boost_2x / vanilla_2x), "{s:?}");
        assert!(close(s.speedup_2x, 4.8), "{s:?}");
        assert!(close(s.retention_2x, boost_2x / boost_1x), "{s:?}");
        assert!(close(s.retention_2x, 0.8), "{s:?}");
        assert_eq!(s.null_hypercall_instructions, Some(142.34));
        assert_eq!(s.vcpu_switch_instructions, Some(812.0));
    }

    #[test]
    fn summarize_ignores_other_groups() {
        let mut cells = matrix();
        // A faster vanilla run with the hog, and one on 4 pCPUs, come first
        // but must not be used for the 2-pCPU, no-hog headline.
        let mut hog = cell(2, 4, Mode::Vanilla, 900_000, 1_000_000_000);
        hog.hog = true;
        cells.insert(0, hog);
        cells.insert(0, cell(4, 8, Mode::Vanilla, 900_000, 1_000_000_000));
        assert!(close(summarize(&cells, None).speedup_2x, 4.8));
    }

    #[test]
    fn summarize_missing_cells_or_costs_give_none() {
        let cells: Vec<Cell> = matrix()
            .into_iter()
            .filter(|c| !(c.mode == Mode::Vanilla && c.vcpus == 4))
            .collect();
        let s = summarize(&cells, None);
        assert_eq!(s.speedup_2x, None);
        assert!(close(s.retention_2x, 0.8));
        assert_eq!(s.null_hypercall_instructions, None);
        assert_eq!(s.vcpu_switch_instructions, None);

        let no_1x: Vec<Cell> = matrix().into_iter().filter(|c| c.vcpus == 4).collect();
        assert_eq!(summarize(&no_1x, None).retention_2x, None);
        assert_eq!(summarize(&[], None).speedup_2x, None);
    }

    #[test]
    fn summarize_zero_denominators_give_none() {
        let mut cells = matrix();
        for c in &mut cells {
            if c.mode == Mode::Vanilla && c.vcpus == 4 {
                c.acquisitions = 0;
            }
            if c.mode == Mode::PvBoost && c.vcpus == 2 {
                c.virtual_ns = 0;
            }
        }
        let s = summarize(&cells, None);
        assert_eq!(s.speedup_2x, None);
        assert_eq!(s.retention_2x, None);
    }

    fn summary(speedup: f64, retention: f64, hypercall: f64, switch: f64) -> Summary {
        Summary {
            speedup_2x: Some(speedup),
            retention_2x: Some(retention),
            null_hypercall_instructions: Some(hypercall),
            vcpu_switch_instructions: Some(switch),
        }
    }

    fn met(summary: &Summary) -> Vec<(&'static str, bool)> {
        verdicts(summary, &Targets::default())
            .iter()
            .map(|v| (v.key, v.met))
            .collect()
    }

    #[test]
    fn verdict_directions() {
        assert_eq!(
            met(&summary(3.9, 0.79, 151.0, 1000.5)),
            [
                ("speedup_2x", false),
                ("retention_2x", false),
                ("null_hypercall_instructions", false),
                ("vcpu_switch_instructions", false),
            ]
        );
        assert_eq!(
            met(&summary(4.0, 0.8, 150.0, 1000.0)),
            [
                ("speedup_2x", true),
                ("retention_2x", true),
                ("null_hypercall_instructions", true),
                ("vcpu_switch_instructions", true),
            ]
        );
        let v = verdicts(&summary(4.0, 0.8, 150.0, 1000.0), &Targets::default());
        let directions: Vec<bool> = v.iter().map(|v| v.higher_is_better).collect();
        assert_eq!(directions, [true, true, false, false]);
        assert_eq!(v[2].target, 150.0);
        assert_eq!(v[2].value, Some(150.0));
    }

    #[test]
    fn a_missing_figure_is_not_met() {
        let s = Summary {
            speedup_2x: None,
            ..summary(5.0, 0.9, 100.0, 500.0)
        };
        assert_eq!(met(&s)[0], ("speedup_2x", false));
        assert!(met(&s)[1..].iter().all(|(_, met)| *met));
    }

    #[test]
    fn summary_json_has_the_four_keys_and_null_for_none() {
        let s = Summary {
            retention_2x: None,
            ..summary(4.8, 0.8, 142.25, 812.0)
        };
        let text = summary_json(&s);
        assert!(text.ends_with("}\n"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let object = json.as_object().unwrap();
        let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "null_hypercall_instructions",
                "retention_2x",
                "speedup_2x",
                "vcpu_switch_instructions"
            ]
        );
        assert_eq!(json["speedup_2x"].as_f64(), Some(4.8));
        assert!(json["retention_2x"].is_null());
        assert_eq!(json["null_hypercall_instructions"].as_f64(), Some(142.25));
        assert_eq!(json["vcpu_switch_instructions"].as_f64(), Some(812.0));
        assert_eq!(serde_json::from_value::<Summary>(json).unwrap(), s);
    }

    #[test]
    fn results_json_holds_everything() {
        let cells = matrix();
        let s = summarize(&cells, None);
        let v = verdicts(&s, &Targets::default());
        let meta = [
            ("qemu", "9.2.0".to_string()),
            ("commit", "abc123".to_string()),
        ];
        let text = results_json(&cells, None, &s, &v, &meta);
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["meta"]["qemu"], "9.2.0");
        assert_eq!(json["meta"]["commit"], "abc123");
        // The meta keys keep their order.
        assert!(text.find("\"qemu\"").unwrap() < text.find("\"commit\"").unwrap());
        let first = &json["cells"][0];
        assert_eq!(first["mode"], "vanilla");
        assert_eq!(first["pcpus"], 2);
        assert_eq!(first["acquisitions"], 1_000_000);
        assert_eq!(first["data_ok"], true);
        assert_eq!(first["overcommit"].as_f64(), Some(1.0));
        assert_eq!(first["throughput"].as_f64(), Some(1_000_000.0));
        assert_eq!(json["cells"].as_array().unwrap().len(), cells.len());
        assert_eq!(json["cells"][5]["throughput"].as_f64(), Some(1_200_000.0));
        assert!(json["costs"].is_null());
        assert!(json["summary"]["null_hypercall_instructions"].is_null());
        assert_eq!(json["verdicts"][0]["key"], "speedup_2x");
        assert_eq!(json["verdicts"][0]["met"], true);
        assert_eq!(json["verdicts"][2]["met"], false);

        let with_costs = results_json(&cells, Some(&costs()), &s, &v, &[]);
        let json: serde_json::Value = serde_json::from_str(&with_costs).unwrap();
        assert_eq!(
            json["costs"]["vcpu_switch_instructions"].as_f64(),
            Some(812.0)
        );
        assert_eq!(json["meta"], serde_json::json!({}));
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
    fn markdown_shows_the_figures() {
        let mut cells = matrix();
        let mut bad = cell(4, 8, Mode::Pv, 2_000, 1_000_000);
        bad.hog = true;
        bad.data_ok = false;
        cells.push(bad);
        let s = summarize(&cells, Some(&costs()));
        let v = verdicts(&s, &Targets::default());
        let md = markdown(&cells, Some(&costs()), &s, &v);

        // 2 pCPUs before 4 pCPUs with the hog.
        let plain = md.find("### 2 pCPUs\n").unwrap();
        let hog = md.find("### 4 pCPUs, with CPU-hog VM\n").unwrap();
        assert!(plain < hog);

        // 2x row: vanilla 250,000; pv 600,000 (2.4x); pv+boost 1,200,000
        // (4.8x, retention 1.2e6 / 1.5e6 = 0.80); worst wait 2.5 ms.
        assert!(
            md.contains(
                "| 4 | 2x | 250,000 | 600,000 | 1,200,000 | 2.4x | 4.8x | 0.80 | 2.500 | ok |"
            ),
            "{md}"
        );
        // 1x row: speed-ups 1.2x and 1.5x, retention 1.00.
        assert!(
            md.contains(
                "| 2 | 1x | 1,000,000 | 1,200,000 | 1,500,000 | 1.2x | 1.5x | 1.00 | 2.500 | ok |"
            ),
            "{md}"
        );
        // The hog group has only a pv cell, which lost updates:
        // 2,000 in 1 ms is 2,000,000 per second.
        assert!(
            md.contains("| 8 | 2x | – | 2,000,000 | – | – | – | – | – | LOST UPDATES |"),
            "{md}"
        );
        assert!(md.contains("- null hypercall: 142.3 instructions"), "{md}");
        assert!(md.contains("- vCPU switch: 812.0 instructions"), "{md}");
        assert!(md.contains("| `speedup_2x` | 4.80 | >= 4 | yes |"), "{md}");
        assert!(
            md.contains("| `retention_2x` | 0.80 | >= 0.8 | yes |"),
            "{md}"
        );
        assert!(
            md.contains("| `vcpu_switch_instructions` | 812.0 | <= 1000 | yes |"),
            "{md}"
        );
        assert!(md.contains("**4.80x**"), "{md}");
    }

    #[test]
    fn markdown_marks_missed_targets_and_omits_missing_costs() {
        let s = summarize(&[], None);
        let v = verdicts(&s, &Targets::default());
        let md = markdown(&[], None, &s, &v);
        assert!(md.contains("_No measurements._"), "{md}");
        assert!(!md.contains("### Costs"), "{md}");
        assert!(
            md.contains("| `null_hypercall_instructions` | – | <= 150 | **no** |"),
            "{md}"
        );
        assert_eq!(md.matches("**no**").count(), 4, "{md}");
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
    fn svg_draws_one_line_per_present_mode() {
        let cells: Vec<Cell> = matrix()
            .into_iter()
            .filter(|c| c.mode != Mode::Pv)
            .collect();
        let svg = svg_plot(&cells, 2, false);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"400\" viewBox=\"0 0 640 400\""));
        assert!(svg.contains(">Lock throughput vs overcommit, 2 pCPUs</text>"));
        let elements = balanced_elements(&svg);
        assert_eq!(elements.iter().filter(|e| *e == "svg").count(), 1);

        let lines = polylines(&svg);
        let modes: Vec<&str> = lines.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(modes, ["vanilla", "pv+boost"]);
        assert!(
            !svg.contains(">pv</text>"),
            "pv has no cells: not in the legend"
        );
        assert!(svg.contains(">vanilla</text>") && svg.contains(">pv+boost</text>"));
        for (_, points) in &lines {
            assert_eq!(points.len(), 2);
            for (x, y) in points {
                assert!(x.is_finite() && y.is_finite());
                assert!((0.0..=640.0).contains(x) && (0.0..=400.0).contains(y));
            }
            // 1x left of 2x.
            assert!(points[0].0 < points[1].0);
        }
        // pv+boost at 2x (1.2M) sits higher (smaller y) than vanilla (250k).
        assert!(lines[1].1[1].1 < lines[0].1[1].1);
        assert_eq!(svg.matches("<circle").count(), 4);
        assert!(svg.contains(">1x</text>") && svg.contains(">2x</text>"));
        // The y axis: ticks to 1.5M in steps of 0.5M.
        assert!(svg.contains(">1.5M</text>") && svg.contains(">0</text>"));
    }

    #[test]
    fn svg_of_a_hog_group_and_of_nothing() {
        let mut cells = matrix();
        for c in &mut cells {
            c.hog = true;
        }
        let svg = svg_plot(&cells, 2, true);
        assert!(svg.contains(">Lock throughput vs overcommit, 2 pCPUs, with CPU-hog VM</text>"));
        balanced_elements(&svg);
        assert_eq!(polylines(&svg).len(), 3);

        let empty = svg_plot(&cells, 2, false);
        balanced_elements(&empty);
        assert!(polylines(&empty).is_empty());
        assert!(empty.contains(">no measurements</text>"));
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

    #[test]
    fn update_is_idempotent_with_a_generated_report() {
        let cells = matrix();
        let s = summarize(&cells, Some(&costs()));
        let v = verdicts(&s, &Targets::default());
        let md = markdown(&cells, Some(&costs()), &s, &v);
        let once = update_generated_section("# Benchmarks\n", &md);
        let twice = update_generated_section(&once, &md);
        assert_eq!(once, twice);
        assert_eq!(once.matches(BEGIN_MARKER).count(), 1);
        assert_eq!(once.matches(END_MARKER).count(), 1);
    }
}
