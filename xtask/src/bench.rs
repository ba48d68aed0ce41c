//! `cargo xtask bench`: the lock benchmark of docs/benchmarks.md, in two
//! timing modes (`bench_report` says what each can show):
//! deterministic QEMU (`-accel tcg,thread=single -icount
//! shift=0,sleep=off`: one instruction is one nanosecond of virtual time),
//! each run perturbed by a recorded seed (lockbench `seed=`: start offsets
//! and private work within +-10%), and multi-threaded TCG, the pCPUs in
//! parallel on the host's cores, each run a plain repeat.
//!
//! Each run is one QEMU boot of el2 with a `lockbench` VM whose vCPUs
//! hammer one lock for a fixed span of counter time:
//!
//! | mode | guest lock | VM services |
//! |---|---|---|
//! | vanilla | plain ticket lock | no PV-lock, no PV time |
//! | pv | PV queued lock (yield to a preempted holder, sleep until kicked) | openEuler PV-lock (preempted flag, KICK_CPU), directed yield, `boost = "off"` |
//! | pv+boost | the same | the same with `boost = "on"`: el2's critical-section heuristics |
//!
//! Every point of the matrix runs [`RUNS`] times ([`QUICK_RUNS`] with
//! `--quick`). With `--hog` every point also runs beside a second VM whose
//! vCPUs (one per pCPU) never stop computing. One more run measures the
//! costs under icount, exactly: a null hypercall (SMCCC_VERSION) and a
//! directed yield between two vCPUs of one pCPU, in instructions
//! (`lockbench costs=N`).
//!
//! The results (every run, every point's statistics) go to
//! `target/xtask/bench/results.json`; the tables, the headline figures
//! against the targets, and an SVG plot per group go to
//! `docs/benchmarks.md` and `docs/benchmarks-*.svg` ([`crate::bench_report`]).

use std::fmt::Write as _;
use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use guest_driver::lockbench::{
    self, CostLine, DataLine, LockKind, ResultLine, VcpuLine, YieldLine,
};
use pvlock_abi::pvlock::Variant;

use crate::bench_report::{self, Cell, Costs, MIN_CONTENDED, Mode, Point, Range, TARGETS, Timing};
use crate::boottest::{BootTest, Check, Kernel, Outcome as Expected};
use crate::cli::BenchOpts;
use crate::guests::{self, Guests};
use crate::measure;
use crate::qemu::{self, Console, Echo, Machine, RunSpec};
use crate::setup::{self, Tool};
use crate::vm::{PvLock, VmConfig};
use crate::{FATAL_GRACE, Workspace, image, suite};

/// The guest every run boots.
pub(crate) const GUEST: &str = "lockbench";

/// Virtual time each cell's vCPUs hammer the lock: long enough for dozens
/// of 4 ms time slices, so that preemption, not start-up, sets the figure.
const DURATION_MS: u64 = 400;
const QUICK_DURATION_MS: u64 = 200;

/// Rounds of the cost measurement (null hypercalls, and yield round trips).
const COST_ROUNDS: u64 = 20_000;

/// How many of el2's default slices the cost run's lock run lasts: two
/// vCPUs on one pCPU each get one, with room for the first one's slice
/// extension.
const COST_RUN_SLICES: u64 = 3;

/// Real-time limit per run: a cell that takes longer is broken.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// The critical section and the private work per acquisition (lockbench's
/// defaults: a few hundred instructions each), spelled out so that the
/// benchmark does not change when the guest's defaults do.
const CS_WORK: u64 = 40;
const PRIVATE_WORK: u64 = 40;

/// Runs per point of the full matrix, and of `--quick`.
pub const RUNS: u32 = 5;
pub const QUICK_RUNS: u32 = 3;

/// One run to make: a point of the matrix, and which of its runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub point: Point,
    pub run: u32,
}

impl Plan {
    /// The perturbation seed: icount runs are exact, so each of a point's
    /// runs is made different by its own seed (1, 2, ...); a
    /// multi-threaded run differs by itself.
    pub fn seed(&self) -> Option<u64> {
        (self.point.timing == Timing::Icount).then_some(u64::from(self.run) + 1)
    }
}

/// The matrix: both timing modes; pCPUs 2 and 4, vCPUs 1x, 2x and 4x the
/// pCPUs, every mode; `quick`: 2 pCPUs, 1x and 2x; `hog`: every point
/// again beside the hogs. Each point [`RUNS`] times ([`QUICK_RUNS`]),
/// the runs of a timing mode in rounds over its points, so that a host
/// disturbance spreads over the points rather than sinking one.
pub fn matrix(quick: bool, hog: bool) -> Vec<Plan> {
    let (pcpus, ratios, runs): (&[u32], &[u32], u32) = if quick {
        (&[2], &[1, 2], QUICK_RUNS)
    } else {
        (&[2, 4], &[1, 2, 4], RUNS)
    };
    let hogs: &[bool] = if hog { &[false, true] } else { &[false] };
    let mut plans = Vec::new();
    for timing in [Timing::Icount, Timing::Mttcg] {
        for run in 0..runs {
            for &hog in hogs {
                for &p in pcpus {
                    for &ratio in ratios {
                        for mode in Mode::ALL {
                            let point = Point {
                                timing,
                                pcpus: p,
                                hog,
                                vcpus: p * ratio,
                                mode,
                            };
                            plans.push(Plan { point, run });
                        }
                    }
                }
            }
        }
    }
    plans
}

/// The guest lock a mode uses.
fn lock_of(mode: Mode) -> LockKind {
    match mode {
        Mode::Vanilla => LockKind::Ticket,
        Mode::Pv | Mode::PvBoost => LockKind::Pv,
    }
}

/// How much longer than its duration a run may go on to make its
/// [`MIN_CONTENDED`] hand-offs (`min-contended`): the slowest vanilla
/// cells make about half of them in the duration.
const MAX_DURATION_FACTOR: u64 = 3;

/// lockbench's command line for a run: `duration_ms`, and on from there
/// until the run has made [`MIN_CONTENDED`] contended acquisitions (at
/// most [`MAX_DURATION_FACTOR`] times as long), so that no figure rests on
/// a handful of hand-offs. Lock stealing is `steal` (`bench --steal`),
/// or the lock's default.
fn settings(
    mode: Mode,
    duration_ms: u64,
    seed: Option<u64>,
    steal: Option<bool>,
) -> lockbench::Settings {
    let default = lockbench::Settings::default();
    lockbench::Settings {
        steal: steal.unwrap_or(default.steal),
        lock: lock_of(mode),
        duration_ms,
        min_contended: MIN_CONTENDED,
        max_duration_ms: duration_ms * MAX_DURATION_FACTOR,
        cs_work: CS_WORK,
        private_work: PRIVATE_WORK,
        seed: seed.unwrap_or(0),
        timeout_secs: 600,
        ..default
    }
}

/// The benchmarked VM of a run.
fn bench_vm(plan: &Plan, duration_ms: u64, steal: Option<bool>) -> VmConfig {
    let point = &plan.point;
    let args = settings(point.mode, duration_ms, plan.seed(), steal);
    let mut vm = VmConfig {
        guest: GUEST.into(),
        ..VmConfig::smp_demo(point.vcpus, &args.to_string(), 1)
    };
    match point.mode {
        Mode::Vanilla => {
            vm.pv_lock = Some(PvLock::Off);
            vm.pv_time = Some(false);
            vm.boost = Some(false);
        }
        Mode::Pv | Mode::PvBoost => {
            vm.pv_lock = Some(PvLock::Variant(Variant::OpenEuler));
            vm.boost = Some(point.mode == Mode::PvBoost);
        }
    }
    vm
}

/// The CPU-hog neighbour: one vCPU per pCPU, each computing without a
/// break (lockbench's private work, one acquisition of its own lock per
/// million rounds) for `duration_ms`: give it longer than the VMs beside
/// it may run.
pub(crate) fn hog_vm(pcpus: u32, duration_ms: u64) -> VmConfig {
    let args = lockbench::Settings {
        lock: LockKind::Ticket,
        duration_ms,
        cs_work: 1,
        private_work: lockbench::MAX_WORK,
        timeout_secs: 600,
        ..lockbench::Settings::default()
    };
    VmConfig {
        guest: GUEST.into(),
        pv_lock: Some(PvLock::Off),
        pv_time: Some(false),
        ..VmConfig::smp_demo(pcpus, &args.to_string(), 1)
    }
}

/// The runs of `plans` whose name contains one of `cells` (`--cells`).
pub fn pick_cells(plans: Vec<Plan>, cells: &[String]) -> Vec<Plan> {
    plans
        .into_iter()
        .filter(|plan| cells.iter().any(|c| plan.name().contains(c.as_str())))
        .collect()
}

/// The boot "test" a run is: el2 with the run's VMs, under icount or
/// multi-threaded TCG.
fn boot(name: String, smp: u32, vms: Vec<VmConfig>, timing: Timing) -> BootTest {
    BootTest {
        name,
        timeout: RUN_TIMEOUT,
        outcome: Expected::CleanExit,
        checks: vec![Check::Banner],
        dt_edit: None,
        kernel: Kernel::El2,
        vms,
        machine: Machine {
            smp,
            icount: timing == Timing::Icount,
            ..Machine::default()
        },
    }
}

impl Plan {
    fn name(&self) -> String {
        let p = &self.point;
        format!(
            "{} pcpus={} vcpus={} mode={}{} run={}",
            p.timing.name(),
            p.pcpus,
            p.vcpus,
            p.mode.name(),
            if p.hog { " hog" } else { "" },
            self.run
        )
    }
}

/// What one run's console says about the benchmarked VM (`vm0`).
/// `wall_secs` is how long the run took.
pub fn parse_cell(plan: &Plan, console: &str, wall_secs: f64) -> Result<Cell, String> {
    let point = plan.point;
    // With two VMs every guest line is prefixed with its VM's name.
    let ours = |line: &&str| !point.hog || line.starts_with("[vm0]");
    let lines: Vec<&str> = console
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(ours)
        .collect();
    let result = lines
        .iter()
        .find_map(|l| ResultLine::parse(l))
        .ok_or("no \"lockbench: result:\" line")?;
    let yields = lines
        .iter()
        .find_map(|l| YieldLine::parse(l))
        .ok_or("no \"lockbench: yields:\" line")?;
    let data_ok = lines
        .iter()
        .filter_map(|l| DataLine::parse(l))
        .any(|d| d.acquisitions == result.acquisitions && d.lost_updates == 0);
    if result.lock != lock_of(point.mode) || result.vcpus != u64::from(point.vcpus) {
        return Err(format!(
            "the guest ran lock={} with {} vCPUs, not lock={} with {}",
            result.lock.name(),
            result.vcpus,
            lock_of(point.mode).name(),
            point.vcpus
        ));
    }
    let mut per_vcpu = vec![None; point.vcpus as usize];
    for line in lines.iter().filter_map(|l| VcpuLine::parse(l)) {
        if let Some(slot) = usize::try_from(line.cpu)
            .ok()
            .and_then(|i| per_vcpu.get_mut(i))
        {
            *slot = Some(line.acquisitions);
        }
    }
    let per_vcpu: Vec<u64> = per_vcpu
        .iter()
        .enumerate()
        .map(|(cpu, n)| n.ok_or(format!("no \"lockbench: vcpu {cpu}:\" line")))
        .collect::<Result<_, _>>()?;
    if per_vcpu.iter().sum::<u64>() != result.acquisitions {
        return Err(format!(
            "the vCPUs' lines add up to {} acquisitions, the result line says {}",
            per_vcpu.iter().sum::<u64>(),
            result.acquisitions
        ));
    }
    Ok(Cell {
        point,
        run: plan.run,
        seed: plan.seed(),
        acquisitions: result.acquisitions,
        contended: result.contended,
        per_vcpu,
        virtual_ns: result.elapsed_ns,
        worst_wait_ns: result.worst_wait_ns,
        yields: yields.yielded,
        kicks: yields.kicks,
        data_ok,
        wall_secs,
        host_round_trip_ns: None,
    })
}

/// The costs from the cost run's console: nanoseconds of counter time
/// under `-icount shift=0` are instructions.
pub fn parse_costs(console: &str) -> Result<Costs, String> {
    let line = console
        .lines()
        .find_map(CostLine::parse)
        .ok_or("no \"lockbench: cost:\" line")?;
    Ok(Costs {
        null_hypercall_instructions: line
            .per_hypercall_ns()
            .ok_or("no null hypercall was timed")?,
        vcpu_switch_instructions: line
            .per_switch_ns()
            .ok_or("no directed yield switched vCPUs")?,
    })
}

/// Everything the runs share.
pub(crate) struct Bench {
    el2_image: PathBuf,
    el2_elf: PathBuf,
    el2_link_base: u64,
    guests: Guests,
    logs: PathBuf,
    /// Show each run's console on the terminal (the `cargo xtask run` demo).
    echo: bool,
}

impl Bench {
    /// Installs what is missing, builds el2 and the guests, and makes the
    /// log directory `logs`.
    pub(crate) fn prepare(
        ws: &Workspace,
        build: &crate::cli::BuildOpts,
        logs: PathBuf,
        echo: bool,
    ) -> Result<Self> {
        setup::ensure_rust_target(ws)?;
        setup::ensure_tools(&[Tool::Qemu, Tool::Dtc])?;
        let art = image::build(ws, &build.source)?;
        let guests = guests::build(ws)?;
        fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
        Ok(Self {
            el2_image: art.image,
            el2_elf: art.elf,
            el2_link_base: art.link_base,
            guests,
            logs,
            echo,
        })
    }

    /// The el2 ELF the runs boot (its symbols).
    pub(crate) fn el2_elf(&self) -> &std::path::Path {
        &self.el2_elf
    }

    /// The address el2's ELF is linked at.
    pub(crate) fn el2_link_base(&self) -> u64 {
        self.el2_link_base
    }

    /// The machine and image of `t`, its VMs placed and described.
    pub(crate) fn prepare_test(&self, t: &BootTest) -> Result<(Machine, PathBuf)> {
        suite::prepare(t, &self.el2_image, &self.guests, &self.logs)
    }

    /// Boots `t` and returns its console, or why the run failed.
    pub(crate) fn run(&self, t: &BootTest) -> Result<String, String> {
        let (machine, image) = suite::prepare(t, &self.el2_image, &self.guests, &self.logs)
            .map_err(|e| format!("{e:#}"))?;
        self.run_machine(&t.name, &machine, &image, t.timeout, None)
    }

    /// Boots `image` on `machine` (el2 with its VMs, or a guest on bare
    /// QEMU); with `stop_on`, stops QEMU once the console shows it, which
    /// then counts as success (a run whose other VM computes for ever).
    pub(crate) fn run_machine(
        &self,
        name: &str,
        machine: &Machine,
        image: &std::path::Path,
        timeout: Duration,
        stop_on: Option<&'static str>,
    ) -> Result<String, String> {
        let cmd = machine
            .command(image, &Console::Stdio, false)
            .map_err(|e| format!("bad machine definition: {e}"))?;
        let spec = RunSpec {
            timeout: Some(timeout),
            echo: if self.echo {
                Echo::Terminal
            } else {
                Echo::None
            },
            fatal_grace: Some(FATAL_GRACE),
            stop_on,
            ..RunSpec::default()
        };
        let outcome = qemu::run(cmd, spec).map_err(|e| format!("{e:#}"))?;
        let log = self.logs.join(format!("{}.log", suite::slug(name)));
        let _ = fs::write(&log, &outcome.console);
        let stopped = matches!(outcome.ending, qemu::Ending::Stopped(_))
            && !outcome.fatal
            && !outcome.guest_fatal;
        match outcome.failure() {
            None => Ok(outcome.console),
            Some(_) if stopped => Ok(outcome.console),
            Some(why) => Err(format!("{why} (console: {})", log.display())),
        }
    }
}

/// The host's cores: a multi-threaded group with more pCPUs is marked.
pub(crate) fn host_cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// One line of progress for a finished run.
fn run_line(cell: &Cell) -> String {
    format!(
        "{:>12} acq/s  {:>7} contended  fairness {}  worst wait {:>8.3} ms  {} yields  {} kicks  \
         data {}  ({:.1} s){}",
        group_thousands(cell.throughput()),
        cell.contended,
        cell.fairness()
            .map_or_else(|| "-".to_string(), |f| format!("{f:.2}")),
        cell.worst_wait_ns as f64 / 1e6,
        cell.yields,
        cell.kicks,
        if cell.data_ok { "ok" } else { "LOST UPDATES" },
        cell.wall_secs,
        cell.host_round_trip_ns
            .map_or_else(String::new, |ns| format!("  host round trip {ns:.0} ns"))
    )
}

/// Makes every run of `plans`, printing a line as each ends; the
/// outcomes in `plans`' order. The icount runs go `cores` at a time, the
/// multi-threaded runs one at a time after them
/// ([`measure::run_side_by_side`]).
fn run_plans(
    b: &Bench,
    plans: &[Plan],
    duration_ms: u64,
    steal: Option<bool>,
    cores: u32,
) -> Vec<Result<Cell, String>> {
    run_plans_with(plans, cores, |plan| run_plan(b, plan, duration_ms, steal))
}

/// [`run_plans`] with `run` making each run.
fn run_plans_with(
    plans: &[Plan],
    cores: u32,
    run: impl Fn(&Plan) -> Result<Cell, String> + Sync,
) -> Vec<Result<Cell, String>> {
    let report = |index: usize, outcome: &Result<Cell, String>, ended: usize| {
        let line = match outcome {
            Ok(cell) => run_line(cell),
            Err(why) => format!("FAILED: {why}"),
        };
        println!(
            "[{ended:>3}/{}] {:<48} {line}",
            plans.len(),
            plans[index].name()
        );
    };
    measure::run_side_by_side(plans, cores, |plan| plan.point.timing, run, report)
        .into_iter()
        .map(|outcome| outcome.unwrap_or_else(|| Err("not run".into())))
        .collect()
}

/// Makes one run of `plan`.
fn run_plan(b: &Bench, plan: &Plan, duration_ms: u64, steal: Option<bool>) -> Result<Cell, String> {
    // What the host's cores did, beside each multi-threaded run
    // (`crate::hostprobe`; icount runs do not depend on it).
    let host_round_trip_ns =
        (plan.point.timing == Timing::Mttcg).then(crate::hostprobe::core_round_trip_ns);
    let start = Instant::now();
    let mut vms = vec![bench_vm(plan, duration_ms, steal)];
    if plan.point.hog {
        // Until after the benchmarked VM's latest end.
        vms.push(hog_vm(
            plan.point.pcpus,
            duration_ms * (MAX_DURATION_FACTOR + 1),
        ));
    }
    let t = boot(
        format!("bench {}", plan.name()),
        plan.point.pcpus,
        vms,
        plan.point.timing,
    );
    let cell = b
        .run(&t)
        .and_then(|console| parse_cell(plan, &console, start.elapsed().as_secs_f64()))?;
    Ok(Cell {
        host_round_trip_ns,
        ..cell
    })
}

/// The cost run: null hypercalls and directed yields between two vCPUs
/// of one pCPU, under icount (exact).
fn run_costs(b: &Bench) -> Result<Costs, String> {
    b.run(&cost_test(COST_ROUNDS))
        .and_then(|console| parse_costs(&console))
}

/// The cost run with `rounds` of each operation: 2 vCPUs of one VM on 1
/// pCPU, under icount (also what `cargo xtask profile` traces).
pub(crate) fn cost_test(rounds: u64) -> BootTest {
    // The lock run after the costs needs both vCPUs, which share one
    // pCPU: it must outlast the first one's slice. (It did in 1 ms only
    // while the spin sampler misread a vCPU the emulator did not run as
    // spinning and gave its slice away: b3b93c4.)
    let run_ms = COST_RUN_SLICES * u64::from(platform::vm::DEFAULT_TIME_SLICE_US) / 1000;
    let cost_args = lockbench::Settings {
        costs: rounds,
        ..settings(Mode::Pv, run_ms, None, None)
    };
    let cost_vm = VmConfig {
        guest: GUEST.into(),
        pv_lock: Some(PvLock::Variant(Variant::OpenEuler)),
        ..VmConfig::smp_demo(2, &cost_args.to_string(), 1)
    };
    boot("bench costs".into(), 1, vec![cost_vm], Timing::Icount)
}

pub fn bench(ws: &Workspace, o: &BenchOpts) -> Result<ExitCode> {
    let dir = ws.xtask_dir()?.join("bench");
    let b = Bench::prepare(ws, &o.build, dir.join("logs"), false)?;
    let duration_ms = if o.quick {
        QUICK_DURATION_MS
    } else {
        DURATION_MS
    };
    let mut plans = matrix(o.quick, o.hog);
    if !o.cells.is_empty() {
        plans = pick_cells(plans, &o.cells);
        anyhow::ensure!(
            !plans.is_empty(),
            "--cells {:?}: no run of the matrix has such a name (names look like \
             \"icount pcpus=2 vcpus=4 mode=pv+boost hog run=0\")",
            o.cells
        );
    }
    let cores = host_cores();
    println!(
        "bench: {} runs of {duration_ms} ms of counter time each ({} per point), under -icount \
         shift=0 (1 instruction = 1 ns, perturbed by seeds) and multi-threaded TCG ({cores} host \
         cores), plus the cost run",
        plans.len(),
        if o.quick { QUICK_RUNS } else { RUNS }
    );
    let wall = Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let mut cells: Vec<Cell> = Vec::new();
    for (plan, outcome) in plans
        .iter()
        .zip(run_plans(&b, &plans, duration_ms, o.steal, cores))
    {
        let name = plan.name();
        match outcome {
            Ok(cell) => {
                if !cell.data_ok {
                    failures.push(format!("{name}: lost updates"));
                }
                cells.push(cell);
            }
            Err(why) => failures.push(format!("{name}: {why}")),
        }
    }
    print!("[cost] null hypercall and directed yield, 2 vCPUs on 1 pCPU ");
    let _ = std::io::stdout().flush();
    let costs = match run_costs(&b) {
        Ok(c) => {
            println!(
                "{:.1} and {:.1} instructions",
                c.null_hypercall_instructions, c.vcpu_switch_instructions
            );
            Some(c)
        }
        Err(why) => {
            println!("FAILED: {why}");
            failures.push(format!("costs: {why}"));
            None
        }
    };

    let summary = bench_report::summarize(&cells, costs.as_ref());
    let verdicts = bench_report::verdicts(&summary, &TARGETS);
    let meta = [
        (
            "command",
            format!(
                "cargo xtask bench{}{}{}",
                if o.quick { " --quick" } else { "" },
                if o.hog { " --hog" } else { "" },
                match o.steal {
                    None => "",
                    Some(true) => " --steal on",
                    Some(false) => " --steal off",
                }
            ),
        ),
        ("duration_ms", duration_ms.to_string()),
        (
            "runs_per_point",
            (if o.quick { QUICK_RUNS } else { RUNS }).to_string(),
        ),
        (
            "qemu",
            qemu::check_version().unwrap_or_else(|e| format!("unknown: {e}")),
        ),
        (
            "accel_icount",
            "-accel tcg,thread=single -icount shift=0,sleep=off".into(),
        ),
        ("accel_mttcg", "-accel tcg (multi-threaded)".into()),
        ("host_cores", cores.to_string()),
        ("cs_work", CS_WORK.to_string()),
        ("private_work", PRIVATE_WORK.to_string()),
        (
            "runs",
            format!("{} of {} completed", cells.len(), plans.len()),
        ),
        (
            "wall_minutes",
            format!("{:.1}", wall.elapsed().as_secs_f64() / 60.0),
        ),
    ];
    let results = dir.join("results.json");
    fs::write(
        &results,
        bench_report::results_json(&cells, costs.as_ref(), &summary, &verdicts, &meta),
    )
    .with_context(|| format!("cannot write {}", results.display()))?;
    println!("results: {}", results.display());
    if let Some(path) = &o.json {
        fs::write(path, bench_report::summary_json(&summary))
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("summary: {}", path.display());
    }
    if o.docs {
        let command = &meta[0].1;
        write_docs(
            ws,
            &cells,
            costs.as_ref(),
            &summary,
            &verdicts,
            command,
            cores,
        )?;
    }
    for v in &verdicts {
        println!(
            "target {}: {} (target {} {}): {}",
            v.key,
            if v.value.is_some() {
                bench_report::verdict_figure(v)
            } else {
                "not measured".into()
            },
            if v.higher_is_better { ">=" } else { "<=" },
            v.target,
            if v.met { "met" } else { "MISSED" }
        );
    }
    println!(
        "bench: {:.1} minutes of wall time",
        wall.elapsed().as_secs_f64() / 60.0
    );
    if failures.is_empty() {
        println!(
            "bench: {} runs, all completed with exact data",
            plans.len() + 1
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!("bench: {} failed: {}", failures.len(), failures.join("; "));
        Ok(ExitCode::FAILURE)
    }
}

/// Virtual time each run of the `cargo xtask run` demo lasts: the bench's
/// own, so that the demo shows the matrix's 2x cell. (At 100 ms the plain
/// lock had not yet met a preempted holder often enough to show its
/// collapse: the demo said 1.3x where the bench said 13x.)
const DEMO_DURATION_MS: u64 = DURATION_MS;

/// Runs per mode of the demo: enough for a median and a range.
const DEMO_RUNS: u32 = 3;

/// The default `cargo xtask run`: the point of the project in one screen.
/// Lockbench with 4 vCPUs on 2 pCPUs (2x overcommit) under -icount, each
/// mode [`DEMO_RUNS`] times with its own perturbation seed (the first
/// run's console shown): the plain ticket lock without PV services, then
/// the PV queued lock with every service and the boosts; then the
/// comparison, medians with their ranges.
pub fn demo(ws: &Workspace, build: &crate::cli::BuildOpts) -> Result<ExitCode> {
    let mut b = Bench::prepare(ws, build, ws.xtask_dir()?.join("demo"), true)?;
    let mut cells = Vec::new();
    for mode in [Mode::Vanilla, Mode::PvBoost] {
        for run in 0..DEMO_RUNS {
            let plan = Plan {
                point: Point {
                    timing: Timing::Icount,
                    pcpus: 2,
                    hog: false,
                    vcpus: 4,
                    mode,
                },
                run,
            };
            b.echo = run == 0;
            eprintln!(
                "xtask: demo run {} {}/{DEMO_RUNS}: lockbench, 4 vCPUs on 2 pCPUs, lock={}, \
                 {DEMO_DURATION_MS} ms of virtual time (-icount, seed {}){}",
                mode.name(),
                run + 1,
                lock_of(mode).name(),
                plan.seed().unwrap_or(0),
                if run == 0 { "" } else { ", console not shown" }
            );
            match run_plan(&b, &plan, DEMO_DURATION_MS, None) {
                Ok(cell) => {
                    eprintln!("xtask: {}", run_line(&cell));
                    cells.push(cell);
                }
                Err(why) => {
                    eprintln!("xtask: FAILED: demo run {}: {why}", plan.name());
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
    }
    println!();
    print!("{}", comparison(&cells));
    let all_ok = cells.iter().all(|c| c.data_ok);
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The demo's table: one row per mode, medians with their ranges over the
/// runs, and the speed-up of the last mode over the first.
pub fn comparison(cells: &[Cell]) -> String {
    let mut out = String::from(
        "lock benchmark, 4 vCPUs on 2 pCPUs (2x overcommit), virtual time under -icount, \
         median [smallest-largest] of each mode's runs:\n\n\
         | mode     | lock          | runs |                      acquisitions/s | worst wait | fairness | data |\n\
         |----------|---------------|-----:|------------------------------------:|-----------:|---------:|------|\n",
    );
    let mut modes: Vec<Mode> = cells.iter().map(|c| c.point.mode).collect();
    modes.dedup();
    let range = |mode: Mode, f: &dyn Fn(&Cell) -> f64| {
        let values: Vec<f64> = cells
            .iter()
            .filter(|c| c.point.mode == mode)
            .map(f)
            .collect();
        Range::of(&values)
    };
    for &mode in &modes {
        let Some(acq) = range(mode, &Cell::throughput) else {
            continue;
        };
        let worst = range(mode, &|c| c.worst_wait_ns as f64 / 1e6);
        let fair = range(mode, &|c| c.fairness().unwrap_or(f64::NAN));
        let ok = cells
            .iter()
            .filter(|c| c.point.mode == mode)
            .all(|c| c.data_ok);
        let _ = writeln!(
            out,
            "| {:<8} | {:<13} | {:>4} | {:>35} | {:>10} | {:>8} | {:<4} |",
            mode.name(),
            match lock_of(mode) {
                LockKind::Ticket => "plain ticket",
                LockKind::Pv => "PV queued",
                LockKind::PvTicket => "PV ticket",
            },
            acq.n,
            format!(
                "{} [{}-{}]",
                group_thousands(acq.median),
                group_thousands(acq.min),
                group_thousands(acq.max)
            ),
            worst.map_or_else(|| "-".into(), |w| format!("{:.3} ms", w.max)),
            fair.map_or_else(|| "-".into(), |f| format!("{:.2}", f.min)),
            if ok { "ok" } else { "LOST UPDATES" }
        );
    }
    if let [first, .., last] = modes.as_slice()
        && let (Some(a), Some(b)) = (
            range(*first, &Cell::throughput),
            range(*last, &Cell::throughput),
        )
        && a.median > 0.0
        && a.max > 0.0
        && a.min > 0.0
    {
        let _ = writeln!(
            out,
            "\n{} is {:.1}x {} at 2x overcommit (runs against each other: {:.1}x to {:.1}x; \
             `cargo xtask bench` runs the whole matrix).",
            last.name(),
            b.median / a.median,
            first.name(),
            b.min / a.max,
            b.max / a.min
        );
    }
    out
}

/// The generated section of docs/benchmarks.md and its plots.
fn write_docs(
    ws: &Workspace,
    cells: &[Cell],
    costs: Option<&Costs>,
    summary: &bench_report::Summary,
    verdicts: &[bench_report::Verdict],
    command: &str,
    host_cores: u32,
) -> Result<()> {
    let docs = ws.root.join("docs");
    let mut generated = String::new();
    let _ = writeln!(
        generated,
        "_Generated by `{command}`; do not edit between the markers._\n"
    );
    generated += &bench_report::markdown(cells, costs, summary, verdicts, host_cores);
    let mut groups: Vec<(Timing, u32, bool)> = cells
        .iter()
        .map(|c| (c.point.timing, c.point.pcpus, c.point.hog))
        .collect();
    groups.sort_unstable_by_key(|&(t, p, h)| (t != Timing::Icount, p, h));
    groups.dedup();
    for (timing, pcpus, hog) in groups {
        let file = format!(
            "benchmarks-{pcpus}pcpus{}{}.svg",
            if hog { "-hog" } else { "" },
            if timing == Timing::Mttcg {
                "-mttcg"
            } else {
                ""
            }
        );
        let path = docs.join(&file);
        fs::write(&path, bench_report::svg_plot(cells, timing, pcpus, hog))
            .with_context(|| format!("cannot write {}", path.display()))?;
        let _ = writeln!(
            generated,
            "\n![Lock throughput against overcommit, {pcpus} pCPUs{}, {}]({file})",
            if hog { ", with CPU hogs" } else { "" },
            timing.name()
        );
    }
    let md = docs.join("benchmarks.md");
    let old = fs::read_to_string(&md).unwrap_or_default();
    fs::write(
        &md,
        bench_report::update_generated_section(&old, generated.trim_end()),
    )
    .with_context(|| format!("cannot write {}", md.display()))?;
    println!("docs: {}", md.display());
    Ok(())
}

/// `12345.6` as `12,346`.
fn group_thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use guest_driver::bootargs::BootArgs;

    /// The lock benchmark's part of the side-by-side runner (whose order
    /// and concurrency `measure`'s test checks): every run of the matrix
    /// is made once and each outcome comes back with its own plan,
    /// failures included.
    #[test]
    fn every_run_comes_back_with_its_plan_failures_included() {
        let plans = matrix(true, false);
        assert!(
            plans.iter().any(|p| p.point.timing == Timing::Icount)
                && plans.iter().any(|p| p.point.timing == Timing::Mttcg),
            "both modes in the matrix"
        );
        let made = std::sync::atomic::AtomicUsize::new(0);
        let outcomes = run_plans_with(&plans, 2, |plan| {
            made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if plan.run == 1 {
                return Err(format!("failed {}", plan.name()));
            }
            Ok(Cell {
                point: plan.point,
                run: plan.run,
                seed: plan.seed(),
                acquisitions: 1,
                contended: 0,
                per_vcpu: vec![1],
                virtual_ns: 1,
                worst_wait_ns: 0,
                yields: 0,
                kicks: 0,
                data_ok: true,
                wall_secs: 0.0,
                host_round_trip_ns: None,
            })
        });
        assert_eq!(made.into_inner(), plans.len());
        assert_eq!(outcomes.len(), plans.len());
        for (plan, outcome) in plans.iter().zip(&outcomes) {
            match outcome {
                Ok(cell) => assert_eq!((cell.point, cell.run), (plan.point, plan.run)),
                Err(why) => assert_eq!(why, &format!("failed {}", plan.name())),
            }
        }
        assert!(outcomes.iter().any(Result::is_err) && outcomes.iter().any(Result::is_ok));
    }

    fn point(timing: Timing, vcpus: u32, mode: Mode) -> Point {
        Point {
            timing,
            pcpus: 2,
            hog: false,
            vcpus,
            mode,
        }
    }

    #[test]
    fn the_matrices() {
        let full = matrix(false, false);
        // 2 timings x 2 pCPU counts x 3 ratios x 3 modes, each RUNS times.
        assert_eq!(full.len(), 2 * 2 * 3 * 3 * RUNS as usize);
        assert!(full.iter().all(|p| !p.point.hog));
        let mut points: Vec<(Timing, u32, u32)> = full
            .iter()
            .filter(|p| p.point.mode == Mode::Vanilla && p.run == 0)
            .map(|p| (p.point.timing, p.point.pcpus, p.point.vcpus))
            .collect();
        points.dedup();
        let sizes = [(2, 2), (2, 4), (2, 8), (4, 4), (4, 8), (4, 16)];
        let expected: Vec<(Timing, u32, u32)> = [Timing::Icount, Timing::Mttcg]
            .iter()
            .flat_map(|&t| sizes.map(|(p, v)| (t, p, v)))
            .collect();
        assert_eq!(points, expected);
        // Every point runs RUNS times, with runs 0.. in rounds.
        for plan in &full {
            let runs: Vec<u32> = full
                .iter()
                .filter(|p| p.point == plan.point)
                .map(|p| p.run)
                .collect();
            assert_eq!(runs, (0..RUNS).collect::<Vec<_>>());
        }
        // Icount runs are perturbed by their own seeds, multi-threaded ones
        // are plain repeats.
        for plan in &full {
            match plan.point.timing {
                Timing::Icount => assert_eq!(plan.seed(), Some(u64::from(plan.run) + 1)),
                Timing::Mttcg => assert_eq!(plan.seed(), None),
            }
        }
        let quick = matrix(true, false);
        assert_eq!(quick.len(), 2 * 2 * 3 * QUICK_RUNS as usize);
        // The quick matrix still has what the summary needs: 2 pCPUs at
        // 1x and 2x, vanilla and PV+boost, in both timings.
        for timing in [Timing::Icount, Timing::Mttcg] {
            for (vcpus, mode) in [
                (2, Mode::Vanilla),
                (4, Mode::Vanilla),
                (2, Mode::PvBoost),
                (4, Mode::PvBoost),
            ] {
                assert!(quick.iter().any(|p| p.point == point(timing, vcpus, mode)));
            }
        }
        let with_hog = matrix(true, true);
        assert_eq!(with_hog.len(), 2 * quick.len());
        assert_eq!(with_hog.iter().filter(|p| p.point.hog).count(), quick.len());
    }

    #[test]
    fn modes_configure_guest_and_vm() {
        let plan = |mode, run| Plan {
            point: point(Timing::Icount, 4, mode),
            run,
        };
        let vanilla = bench_vm(&plan(Mode::Vanilla, 0), 200, None);
        assert_eq!(
            (vanilla.pv_lock, vanilla.pv_time, vanilla.boost),
            (Some(PvLock::Off), Some(false), Some(false))
        );
        let told = lockbench::Settings::from_bootargs(&BootArgs::new(&vanilla.bootargs)).unwrap();
        assert_eq!((told.lock, told.duration_ms), (LockKind::Ticket, 200));
        assert_eq!(
            (told.min_contended, told.max_duration_ms),
            (200, 600),
            "on past the duration until the run has its hand-offs"
        );
        assert_eq!((told.cs_work, told.private_work), (CS_WORK, PRIVATE_WORK));
        assert_eq!(told.seed, 1);
        let pv = bench_vm(&plan(Mode::Pv, 2), 200, None);
        let boost = bench_vm(&plan(Mode::PvBoost, 0), 200, None);
        for (vm, on, seed) in [(&pv, false, 3), (&boost, true, 1)] {
            assert_eq!(vm.pv_lock, Some(PvLock::Variant(Variant::OpenEuler)));
            assert_eq!(vm.boost, Some(on));
            let told = lockbench::Settings::from_bootargs(&BootArgs::new(&vm.bootargs)).unwrap();
            assert_eq!((told.lock, told.seed), (LockKind::Pv, seed));
            assert_eq!(vm.vcpus, 4);
            assert!(told.steal, "the lock's default");
        }
        // `bench --steal off` reaches the guest and changes nothing else.
        let no_steal = bench_vm(&plan(Mode::PvBoost, 0), 200, Some(false));
        let told = lockbench::Settings::from_bootargs(&BootArgs::new(&no_steal.bootargs)).unwrap();
        assert!(!told.steal);
        assert_eq!(
            no_steal.bootargs.replace("steal=off", "steal=on"),
            boost.bootargs
        );
        let mt = bench_vm(
            &Plan {
                point: point(Timing::Mttcg, 4, Mode::PvBoost),
                run: 4,
            },
            200,
            None,
        );
        let told = lockbench::Settings::from_bootargs(&BootArgs::new(&mt.bootargs)).unwrap();
        assert_eq!(told.seed, 0, "multi-threaded runs are not perturbed");
        let hog = hog_vm(2, 800);
        let told = lockbench::Settings::from_bootargs(&BootArgs::new(&hog.bootargs)).unwrap();
        assert_eq!((hog.vcpus, told.duration_ms), (2, 800));
        let t = boot("x".into(), 2, vec![pv.clone()], Timing::Icount);
        assert!(t.machine.icount && t.machine.virtualization);
        assert_eq!(t.machine.smp, 2);
        assert!(!boot("x".into(), 2, vec![pv], Timing::Mttcg).machine.icount);
    }

    /// A run's console: `per_vcpu` acquisitions, `lost` lost updates.
    fn console(vm: &str, lock: LockKind, per_vcpu: &[u64], lost: u64) -> String {
        let acquisitions = per_vcpu.iter().sum();
        let result = ResultLine {
            lock,
            vcpus: per_vcpu.len() as u64,
            acquisitions,
            contended: 250,
            elapsed_ns: 200_000_000,
            worst_wait_ns: 1_500_000,
        };
        let data = if lost == 0 {
            DataLine {
                acquisitions,
                lost_updates: 0,
            }
            .to_string()
        } else {
            format!("lockbench: data: FAILED: {lost} lost updates")
        };
        let yields = YieldLine {
            calls: 10,
            yielded: 7,
            halts: 30,
            kicks: 25,
        };
        let mut out = String::from("el2: banner\r\n");
        for (cpu, &n) in per_vcpu.iter().enumerate() {
            let line = VcpuLine {
                cpu: cpu as u64,
                acquisitions: n,
                contended: n / 2,
            };
            out += &format!("{vm}{line}, 3 looks (0 owner unknown, 1 preempted)\r\n");
        }
        out + &format!("{vm}{data}\r\n{vm}{yields}\r\n{vm}{result}\r\n")
    }

    #[test]
    fn runs_come_from_the_guests_lines() {
        let plan = Plan {
            point: point(Timing::Icount, 4, Mode::PvBoost),
            run: 1,
        };
        let per_vcpu = [1_000, 4_000, 2_000, 3_000];
        let cell = parse_cell(&plan, &console("", LockKind::Pv, &per_vcpu, 0), 2.5).unwrap();
        assert_eq!(
            (cell.acquisitions, cell.virtual_ns, cell.worst_wait_ns),
            (10_000, 200_000_000, 1_500_000)
        );
        assert_eq!((cell.yields, cell.kicks, cell.data_ok), (7, 25, true));
        assert_eq!((cell.contended, cell.run, cell.seed), (250, 1, Some(2)));
        assert_eq!(cell.per_vcpu, per_vcpu);
        assert_eq!((cell.fairness(), cell.wall_secs), (Some(0.25), 2.5));
        assert_eq!(cell.throughput(), 50_000.0);
        let lost = parse_cell(&plan, &console("", LockKind::Pv, &per_vcpu, 3), 1.0).unwrap();
        assert!(!lost.data_ok);
        // The wrong lock or vCPU count is an error, not a figure.
        assert!(parse_cell(&plan, &console("", LockKind::Ticket, &per_vcpu, 0), 1.0).is_err());
        assert!(parse_cell(&plan, &console("", LockKind::Pv, &[1; 8], 0), 1.0).is_err());
        assert!(parse_cell(&plan, "el2: nothing\r\n", 1.0).is_err());
        // So is a missing vCPU line, or lines that do not add up.
        let full = console("", LockKind::Pv, &per_vcpu, 0);
        let without = full.replace("lockbench: vcpu 2: 2000", "lockbench: vcpu 9: 2000");
        let err = parse_cell(&plan, &without, 1.0).unwrap_err();
        assert!(err.contains("no \"lockbench: vcpu 2:\" line"), "{err}");
        let wrong = full.replace("vcpu 3: 3000", "vcpu 3: 3001");
        assert!(
            parse_cell(&plan, &wrong, 1.0)
                .unwrap_err()
                .contains("add up")
        );
        // Beside the hogs only vm0's lines count.
        let hog = Plan {
            point: Point {
                hog: true,
                ..plan.point
            },
            ..plan
        };
        let both = console("[vm1] ", LockKind::Ticket, &[99, 1], 0)
            + &console("[vm0] ", LockKind::Pv, &per_vcpu, 0);
        assert_eq!(parse_cell(&hog, &both, 1.0).unwrap().acquisitions, 10_000);
    }

    #[test]
    fn costs_are_instructions_per_operation() {
        let line = CostLine {
            rounds: 20_000,
            null_hypercall_ns: 2_400_000,
            yield_round_trip_ns: 24_000_000,
            yields: 40_000,
        };
        let costs = parse_costs(&format!("boot\r\n{line}\r\n")).unwrap();
        assert_eq!(costs.null_hypercall_instructions, 120.0);
        assert_eq!(costs.vcpu_switch_instructions, 600.0);
        let none = CostLine { yields: 0, ..line };
        assert!(parse_costs(&none.to_string()).is_err());
        assert!(parse_costs("nothing").is_err());
    }

    #[test]
    fn cells_pick_runs_by_name() {
        let picked = pick_cells(
            matrix(false, true),
            &["icount pcpus=2 vcpus=2 mode=pv+boost hog".to_string()],
        );
        assert_eq!(picked.len(), RUNS as usize);
        assert!(
            picked
                .iter()
                .all(|p| p.point.hog && p.point.timing == Timing::Icount)
        );
        let two = pick_cells(
            matrix(true, false),
            &[
                "mode=vanilla run=0".to_string(),
                "mode=pv run=0".to_string(),
            ],
        );
        // Both timings, 1x and 2x: 4 points of each mode, run 0 only.
        assert_eq!(
            two.len(),
            8,
            "{:?}",
            two.iter().map(Plan::name).collect::<Vec<_>>()
        );
        assert!(pick_cells(matrix(true, false), &["no such".to_string()]).is_empty());
    }

    #[test]
    fn the_demo_table_gives_medians_and_ranges() {
        let cell = |mode, run, acquisitions| Cell {
            point: point(Timing::Icount, 4, mode),
            run,
            seed: Some(u64::from(run) + 1),
            acquisitions,
            contended: 300,
            per_vcpu: vec![acquisitions / 4; 4],
            virtual_ns: 100_000_000,
            worst_wait_ns: 2_500_000 + u64::from(run),
            yields: 3,
            kicks: 40,
            data_ok: true,
            wall_secs: 1.0,
            host_round_trip_ns: None,
        };
        let cells = [
            cell(Mode::Vanilla, 0, 10_000),
            cell(Mode::Vanilla, 1, 8_000),
            cell(Mode::Vanilla, 2, 12_000),
            cell(Mode::PvBoost, 0, 65_000),
            cell(Mode::PvBoost, 1, 60_000),
            cell(Mode::PvBoost, 2, 70_000),
        ];
        let table = comparison(&cells);
        // Every row as wide as the header, so the columns line up.
        let widths: Vec<usize> = table
            .lines()
            .filter(|l| l.starts_with('|'))
            .map(str::len)
            .collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{table}");
        assert!(
            table.contains(
                "| vanilla  | plain ticket  |    3 |            100,000 [80,000-120,000] |   2.500 ms |     1.00 | ok   |"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "| pv+boost | PV queued     |    3 |           650,000 [600,000-700,000] |"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "pv+boost is 6.5x vanilla at 2x overcommit (runs against each other: 5.0x to 8.8x"
            ),
            "{table}"
        );
    }

    #[test]
    fn thousands() {
        assert_eq!(group_thousands(0.0), "0");
        assert_eq!(group_thousands(999.4), "999");
        assert_eq!(group_thousands(12_345.6), "12,346");
        assert_eq!(group_thousands(1_234_567.0), "1,234,567");
    }
}
