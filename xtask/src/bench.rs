//! `cargo xtask bench`: the lock benchmark of docs/benchmarks.md, run
//! under deterministic QEMU (`-accel tcg,thread=single -icount
//! shift=0,sleep=off`: every instruction is one nanosecond of virtual
//! time, so a configuration gives the same figures in every run).
//!
//! Each matrix cell is one QEMU run of el2 with a `lockbench` VM whose
//! vCPUs hammer one lock for a fixed span of virtual time:
//!
//! | mode | guest lock | VM services |
//! |---|---|---|
//! | vanilla | plain ticket lock | no PV-lock, no PV time |
//! | pv | PV queued lock (yield to a preempted holder, sleep until kicked) | openEuler PV-lock (preempted flag, KICK_CPU), directed yield, `boost = "off"` |
//! | pv+boost | the same | the same with `boost = "on"`: el2's critical-section heuristics |
//!
//! With `--hog` every cell also runs beside a second VM whose vCPUs (one
//! per pCPU) never stop computing. One more run measures the costs: a
//! null hypercall (SMCCC_VERSION) and a directed yield between two vCPUs
//! of one pCPU, in instructions (`lockbench costs=N`).
//!
//! The results (every cell) go to `target/xtask/bench/results.json`; the
//! table, the headline figures against the targets, and an SVG plot per
//! pCPU count go to `docs/benchmarks.md` and `docs/benchmarks-*.svg`
//! ([`crate::bench_report`]).

use std::fmt::Write as _;
use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use guest_driver::lockbench::{self, CostLine, DataLine, LockKind, ResultLine, YieldLine};
use pvlock_abi::pvlock::Variant;

use crate::bench_report::{self, Cell, Costs, Mode, Targets};
use crate::boottest::{BootTest, Check, Kernel, Outcome as Expected};
use crate::cli::BenchOpts;
use crate::guests::{self, Guests};
use crate::qemu::{self, Console, Echo, Machine, RunSpec};
use crate::setup::{self, Tool};
use crate::vm::{PvLock, VmConfig};
use crate::{FATAL_GRACE, Workspace, image, suite};

/// The guest every run boots.
const GUEST: &str = "lockbench";

/// Virtual time each cell's vCPUs hammer the lock: long enough for dozens
/// of 4 ms time slices, so that preemption, not start-up, sets the figure.
const DURATION_MS: u64 = 400;
const QUICK_DURATION_MS: u64 = 200;

/// Rounds of the cost measurement (null hypercalls, and yield round trips).
const COST_ROUNDS: u64 = 20_000;

/// Real-time limit per run: a cell that takes longer is broken.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// The critical section and the private work per acquisition (lockbench's
/// defaults: a few hundred instructions each), spelled out so that the
/// benchmark does not change when the guest's defaults do.
const CS_WORK: u64 = 40;
const PRIVATE_WORK: u64 = 40;

/// One run to make: a matrix cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub pcpus: u32,
    pub vcpus: u32,
    pub mode: Mode,
    pub hog: bool,
}

/// The matrix: pCPUs 2 and 4, vCPUs 1x, 2x and 4x the pCPUs, every mode;
/// `quick`: 2 pCPUs, 1x and 2x; `hog`: every cell again beside the hogs.
pub fn matrix(quick: bool, hog: bool) -> Vec<Plan> {
    let (pcpus, ratios): (&[u32], &[u32]) = if quick {
        (&[2], &[1, 2])
    } else {
        (&[2, 4], &[1, 2, 4])
    };
    let hogs: &[bool] = if hog { &[false, true] } else { &[false] };
    let mut plans = Vec::new();
    for &hog in hogs {
        for &p in pcpus {
            for &ratio in ratios {
                for mode in Mode::ALL {
                    plans.push(Plan {
                        pcpus: p,
                        vcpus: p * ratio,
                        mode,
                        hog,
                    });
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

/// lockbench's command line for a cell.
fn settings(mode: Mode, duration_ms: u64) -> lockbench::Settings {
    lockbench::Settings {
        lock: lock_of(mode),
        duration_ms,
        cs_work: CS_WORK,
        private_work: PRIVATE_WORK,
        timeout_secs: 600,
        ..lockbench::Settings::default()
    }
}

/// The benchmarked VM of a cell.
fn bench_vm(plan: &Plan, duration_ms: u64) -> VmConfig {
    let mut vm = VmConfig {
        guest: GUEST.into(),
        ..VmConfig::smp_demo(plan.vcpus, &settings(plan.mode, duration_ms).to_string(), 1)
    };
    match plan.mode {
        Mode::Vanilla => {
            vm.pv_lock = Some(PvLock::Off);
            vm.pv_time = Some(false);
            vm.boost = Some(false);
        }
        Mode::Pv | Mode::PvBoost => {
            vm.pv_lock = Some(PvLock::Variant(Variant::OpenEuler));
            vm.boost = Some(plan.mode == Mode::PvBoost);
        }
    }
    vm
}

/// The CPU-hog neighbour: one vCPU per pCPU, each computing without a
/// break (lockbench's private work, one acquisition of its own lock per
/// million rounds) for longer than the benchmarked VM runs.
pub(crate) fn hog_vm(pcpus: u32, duration_ms: u64) -> VmConfig {
    let args = lockbench::Settings {
        lock: LockKind::Ticket,
        duration_ms: duration_ms * 2,
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

/// The boot "test" a run is: el2 under icount with the cell's VMs.
fn boot(name: String, smp: u32, vms: Vec<VmConfig>) -> BootTest {
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
            icount: true,
            ..Machine::default()
        },
    }
}

impl Plan {
    fn name(&self) -> String {
        format!(
            "pcpus={} vcpus={} mode={}{}",
            self.pcpus,
            self.vcpus,
            self.mode.name(),
            if self.hog { " hog" } else { "" }
        )
    }
}

/// What one cell's console says about the benchmarked VM (`vm0`).
pub fn parse_cell(plan: &Plan, console: &str) -> Result<Cell, String> {
    // With two VMs every guest line is prefixed with its VM's name.
    let ours = |line: &&str| !plan.hog || line.starts_with("[vm0]");
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
    if result.lock != lock_of(plan.mode) || result.vcpus != u64::from(plan.vcpus) {
        return Err(format!(
            "the guest ran lock={} with {} vCPUs, not lock={} with {}",
            result.lock.name(),
            result.vcpus,
            lock_of(plan.mode).name(),
            plan.vcpus
        ));
    }
    Ok(Cell {
        pcpus: plan.pcpus,
        vcpus: plan.vcpus,
        mode: plan.mode,
        hog: plan.hog,
        acquisitions: result.acquisitions,
        virtual_ns: result.elapsed_ns,
        worst_wait_ns: result.worst_wait_ns,
        yields: yields.yielded,
        kicks: yields.kicks,
        data_ok,
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
            guests,
            logs,
            echo,
        })
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

pub fn bench(ws: &Workspace, o: &BenchOpts) -> Result<ExitCode> {
    let dir = ws.xtask_dir()?.join("bench");
    let b = Bench::prepare(ws, &o.build, dir.join("logs"), false)?;
    let duration_ms = if o.quick {
        QUICK_DURATION_MS
    } else {
        DURATION_MS
    };
    let plans = matrix(o.quick, o.hog);
    println!(
        "bench: {} runs of {duration_ms} ms of virtual time each, plus the cost run, under \
         -icount shift=0 (1 instruction = 1 ns)",
        plans.len()
    );
    let mut failures: Vec<String> = Vec::new();
    let mut cells: Vec<Cell> = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        let name = plan.name();
        print!("[{:>2}/{}] {name:<34} ", i + 1, plans.len());
        let _ = std::io::stdout().flush();
        let start = Instant::now();
        let mut vms = vec![bench_vm(plan, duration_ms)];
        if plan.hog {
            vms.push(hog_vm(plan.pcpus, duration_ms));
        }
        let t = boot(format!("bench {name}"), plan.pcpus, vms);
        let secs = || start.elapsed().as_secs_f64();
        match b.run(&t).and_then(|console| parse_cell(plan, &console)) {
            Ok(cell) => {
                println!(
                    "{:>12} acq/s  worst wait {:>8.3} ms  {} yields  {} kicks  data {}  ({:.1} s)",
                    group_thousands(cell.throughput()),
                    cell.worst_wait_ns as f64 / 1e6,
                    cell.yields,
                    cell.kicks,
                    if cell.data_ok { "ok" } else { "LOST UPDATES" },
                    secs()
                );
                if !cell.data_ok {
                    failures.push(format!("{name}: lost updates"));
                }
                cells.push(cell);
            }
            Err(why) => {
                println!("FAILED: {why} ({:.1} s)", secs());
                failures.push(format!("{name}: {why}"));
            }
        }
    }
    print!("[cost] null hypercall and directed yield, 2 vCPUs on 1 pCPU ");
    let _ = std::io::stdout().flush();
    let cost_args = lockbench::Settings {
        costs: COST_ROUNDS,
        duration_ms: 1,
        ..settings(Mode::Pv, 1)
    };
    let cost_vm = VmConfig {
        guest: GUEST.into(),
        pv_lock: Some(PvLock::Variant(Variant::OpenEuler)),
        ..VmConfig::smp_demo(2, &cost_args.to_string(), 1)
    };
    let costs = match b
        .run(&boot("bench costs".into(), 1, vec![cost_vm]))
        .and_then(|console| parse_costs(&console))
    {
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
    let verdicts = bench_report::verdicts(&summary, &Targets::default());
    let meta = [
        (
            "command",
            format!("cargo xtask bench{}", if o.quick { " --quick" } else { "" }),
        ),
        ("duration_ms", duration_ms.to_string()),
        (
            "qemu",
            qemu::check_version().unwrap_or_else(|e| format!("unknown: {e}")),
        ),
        (
            "accel",
            "-accel tcg,thread=single -icount shift=0,sleep=off".into(),
        ),
        ("cs_work", CS_WORK.to_string()),
        ("private_work", PRIVATE_WORK.to_string()),
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
        write_docs(ws, &cells, costs.as_ref(), &summary, &verdicts, o.quick)?;
    }
    for v in &verdicts {
        println!(
            "target {}: {} (target {} {}): {}",
            v.key,
            v.value.map_or("not measured".into(), |x| format!("{x:.2}")),
            if v.higher_is_better { ">=" } else { "<=" },
            v.target,
            if v.met { "met" } else { "MISSED" }
        );
    }
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

/// The default `cargo xtask run`: the point of the project in one screen.
/// Two runs of lockbench with 4 vCPUs on 2 pCPUs (2x overcommit)
/// under -icount, consoles shown: the plain ticket lock without PV
/// services, then the PV queued lock with every service and the boosts;
/// then the comparison.
pub fn demo(ws: &Workspace, build: &crate::cli::BuildOpts) -> Result<ExitCode> {
    let b = Bench::prepare(ws, build, ws.xtask_dir()?.join("demo"), true)?;
    let plans = [Mode::Vanilla, Mode::PvBoost].map(|mode| Plan {
        pcpus: 2,
        vcpus: 4,
        mode,
        hog: false,
    });
    let mut cells = Vec::new();
    for plan in &plans {
        eprintln!(
            "xtask: demo run {}: lockbench, 4 vCPUs on 2 pCPUs, lock={}, {DEMO_DURATION_MS} ms of \
             virtual time (-icount)",
            plan.mode.name(),
            lock_of(plan.mode).name()
        );
        let t = boot(
            format!("demo {}", plan.name()),
            plan.pcpus,
            vec![bench_vm(plan, DEMO_DURATION_MS)],
        );
        match b.run(&t).and_then(|console| parse_cell(plan, &console)) {
            Ok(cell) => cells.push(cell),
            Err(why) => {
                eprintln!("xtask: FAILED: demo run {}: {why}", plan.mode.name());
                return Ok(ExitCode::FAILURE);
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

/// The demo's table: one row per run, and the speed-up of the last over
/// the first.
pub fn comparison(cells: &[Cell]) -> String {
    let mut out = String::from(
        "lock benchmark, 4 vCPUs on 2 pCPUs (2x overcommit), virtual time under -icount:\n\n\
         | mode     | lock          | acquisitions/s | worst wait | directed yields | kicks | data |\n\
         |----------|---------------|---------------:|-----------:|----------------:|------:|------|\n",
    );
    for c in cells {
        let _ = writeln!(
            out,
            "| {:<8} | {:<13} | {:>14} | {:>7.3} ms | {:>15} | {:>5} | {} |",
            c.mode.name(),
            match lock_of(c.mode) {
                LockKind::Ticket => "plain ticket",
                LockKind::Pv => "PV queued",
                LockKind::PvTicket => "PV ticket",
            },
            group_thousands(c.throughput()),
            c.worst_wait_ns as f64 / 1e6,
            c.yields,
            c.kicks,
            if c.data_ok { "ok" } else { "LOST UPDATES" }
        );
    }
    if let [first, .., last] = cells
        && first.throughput() > 0.0
    {
        let _ = writeln!(
            out,
            "\n{} is {:.1}x {} at 2x overcommit (`cargo xtask bench` runs the whole matrix).",
            last.mode.name(),
            last.throughput() / first.throughput(),
            first.mode.name()
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
    quick: bool,
) -> Result<()> {
    let docs = ws.root.join("docs");
    let mut generated = String::new();
    let _ = writeln!(
        generated,
        "_Generated by `cargo xtask bench{}`; do not edit between the markers._\n",
        if quick { " --quick" } else { "" }
    );
    generated += &bench_report::markdown(cells, costs, summary, verdicts);
    let mut groups: Vec<(u32, bool)> = cells.iter().map(|c| (c.pcpus, c.hog)).collect();
    groups.sort_unstable();
    groups.dedup();
    for (pcpus, hog) in groups {
        let file = format!(
            "benchmarks-{pcpus}pcpus{}.svg",
            if hog { "-hog" } else { "" }
        );
        let path = docs.join(&file);
        fs::write(&path, bench_report::svg_plot(cells, pcpus, hog))
            .with_context(|| format!("cannot write {}", path.display()))?;
        let _ = writeln!(
            generated,
            "\n![Lock throughput against overcommit, {pcpus} pCPUs{}]({file})",
            if hog { ", with CPU hogs" } else { "" }
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

    #[test]
    fn the_matrices() {
        let full = matrix(false, false);
        assert_eq!(full.len(), 2 * 3 * 3);
        assert!(full.iter().all(|p| !p.hog));
        let cells: Vec<(u32, u32)> = full
            .iter()
            .filter(|p| p.mode == Mode::Vanilla)
            .map(|p| (p.pcpus, p.vcpus))
            .collect();
        assert_eq!(cells, [(2, 2), (2, 4), (2, 8), (4, 4), (4, 8), (4, 16)]);
        let quick = matrix(true, false);
        assert_eq!(quick.len(), 6);
        // The quick matrix still has what the summary needs: 2 pCPUs at
        // 1x and 2x, vanilla and PV+boost.
        for (vcpus, mode) in [
            (2, Mode::Vanilla),
            (4, Mode::Vanilla),
            (2, Mode::PvBoost),
            (4, Mode::PvBoost),
        ] {
            assert!(
                quick
                    .iter()
                    .any(|p| p.pcpus == 2 && p.vcpus == vcpus && p.mode == mode)
            );
        }
        let with_hog = matrix(true, true);
        assert_eq!(with_hog.len(), 12);
        assert_eq!(with_hog.iter().filter(|p| p.hog).count(), 6);
    }

    #[test]
    fn modes_configure_guest_and_vm() {
        let plan = |mode| Plan {
            pcpus: 2,
            vcpus: 4,
            mode,
            hog: false,
        };
        let vanilla = bench_vm(&plan(Mode::Vanilla), 200);
        assert_eq!(
            (vanilla.pv_lock, vanilla.pv_time, vanilla.boost),
            (Some(PvLock::Off), Some(false), Some(false))
        );
        let told = lockbench::Settings::from_bootargs(&BootArgs::new(&vanilla.bootargs)).unwrap();
        assert_eq!((told.lock, told.duration_ms), (LockKind::Ticket, 200));
        assert_eq!((told.cs_work, told.private_work), (CS_WORK, PRIVATE_WORK));
        let pv = bench_vm(&plan(Mode::Pv), 200);
        let boost = bench_vm(&plan(Mode::PvBoost), 200);
        for (vm, on) in [(&pv, false), (&boost, true)] {
            assert_eq!(vm.pv_lock, Some(PvLock::Variant(Variant::OpenEuler)));
            assert_eq!(vm.boost, Some(on));
            let told = lockbench::Settings::from_bootargs(&BootArgs::new(&vm.bootargs)).unwrap();
            assert_eq!(told.lock, LockKind::Pv);
            assert_eq!(vm.vcpus, 4);
        }
        let hog = hog_vm(2, 200);
        let told = lockbench::Settings::from_bootargs(&BootArgs::new(&hog.bootargs)).unwrap();
        assert_eq!(
            (hog.vcpus, told.duration_ms),
            (2, 400),
            "outlives the benchmark"
        );
        let t = boot("x".into(), 2, vec![pv]);
        assert!(t.machine.icount && t.machine.virtualization);
        assert_eq!(t.machine.smp, 2);
    }

    fn console(vm: &str, lock: LockKind, vcpus: u64, acquisitions: u64, lost: u64) -> String {
        let result = ResultLine {
            lock,
            vcpus,
            acquisitions,
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
        format!("el2: banner\r\n{vm}{data}\r\n{vm}{yields}\r\n{vm}{result}\r\n")
    }

    #[test]
    fn cells_come_from_the_guests_lines() {
        let plan = Plan {
            pcpus: 2,
            vcpus: 4,
            mode: Mode::PvBoost,
            hog: false,
        };
        let cell = parse_cell(&plan, &console("", LockKind::Pv, 4, 10_000, 0)).unwrap();
        assert_eq!(
            (cell.acquisitions, cell.virtual_ns, cell.worst_wait_ns),
            (10_000, 200_000_000, 1_500_000)
        );
        assert_eq!((cell.yields, cell.kicks, cell.data_ok), (7, 25, true));
        assert_eq!(cell.throughput(), 50_000.0);
        let lost = parse_cell(&plan, &console("", LockKind::Pv, 4, 10_000, 3)).unwrap();
        assert!(!lost.data_ok);
        // The wrong lock or vCPU count is an error, not a figure.
        assert!(parse_cell(&plan, &console("", LockKind::Ticket, 4, 1, 0)).is_err());
        assert!(parse_cell(&plan, &console("", LockKind::Pv, 8, 1, 0)).is_err());
        assert!(parse_cell(&plan, "el2: nothing\r\n").is_err());
        // Beside the hogs only vm0's lines count.
        let hog = Plan { hog: true, ..plan };
        let both = console("[vm1] ", LockKind::Ticket, 2, 99, 0)
            + &console("[vm0] ", LockKind::Pv, 4, 10_000, 0);
        assert_eq!(parse_cell(&hog, &both).unwrap().acquisitions, 10_000);
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
    fn the_demo_table() {
        let cell = |mode, acquisitions| Cell {
            pcpus: 2,
            vcpus: 4,
            mode,
            hog: false,
            acquisitions,
            virtual_ns: 100_000_000,
            worst_wait_ns: 2_500_000,
            yields: 3,
            kicks: 40,
            data_ok: true,
        };
        let table = comparison(&[cell(Mode::Vanilla, 10_000), cell(Mode::PvBoost, 65_000)]);
        assert!(
            table.contains("| vanilla  | plain ticket  |        100,000 |   2.500 ms |"),
            "{table}"
        );
        assert!(
            table.contains("| pv+boost | PV queued     |        650,000 |"),
            "{table}"
        );
        assert!(table.contains("pv+boost is 6.5x vanilla"), "{table}");
    }

    #[test]
    fn thousands() {
        assert_eq!(group_thousands(0.0), "0");
        assert_eq!(group_thousands(999.4), "999");
        assert_eq!(group_thousands(12_345.6), "12,346");
        assert_eq!(group_thousands(1_234_567.0), "1,234,567");
    }
}
