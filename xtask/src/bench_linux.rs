//! `cargo xtask bench --linux`: the Linux workload benchmark of
//! docs/benchmarks-linux.md. Each run boots el2 with one Linux VM (the
//! project's 6.12 kernel, with or without the PV-lock series, same tree and
//! configuration, and the same VM description: openEuler PV lock and PV
//! time offered to both) whose `/init` runs `pvlinux bench`; or, as the
//! no-hypervisor reference, the stock kernel on bare QEMU.
//!
//! The matrix ([`matrix`]), 2 pCPUs throughout:
//!
//! | timing | kernels | vCPUs | hog | runs per cell |
//! |---|---|---|---|---|
//! | multi-threaded TCG (the headline) | stock, patched | 2, 4, 8 (1x, 2x, 4x) | without and beside a CPU-hog VM | 5 |
//! | multi-threaded TCG | stock on bare QEMU, 2 CPUs | - | - | 5 |
//! | icount (deterministic) | stock, patched | 2, 4 | without | 3 perturbations (seeds 1, 2, 3) |
//! | multi-threaded TCG | Debian's stock 6.1 cloud kernel, fork+exec loop ([`bench_forkexec`]) | 2, 4, 8 | without | 5 |
//!
//! `--quick`: multi-threaded TCG, 1x and 2x, without the hog, 3 runs per
//! cell (the Debian loop too). Runs go repetition by repetition (every cell once, then again),
//! so that a slow spell of the host spreads over the cells instead of
//! sinking one. Under icount a seed shifts each test's iteration count
//! (within +-10%) and each copy's start (`pvlinux bench --seed`).
//!
//! What the runs mean and the statistics are in [`crate::bench_linux_report`].

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use pvlinux::lines::{BenchDone, BenchFailed, BenchResult};
use pvlinux::suite::BENCH_TESTS;
use pvlock_abi::pvlock::Variant;

use crate::bench::{self, Bench};
use crate::bench_linux_report::{
    self as report, CellKey, Kernel, PCPUS, Run, Timing, cell_stats, summarize, verdicts,
};
use crate::bench_report::update_generated_section;
use crate::boottest::{BootTest, Check, Kernel as BootKernel, Outcome};
use crate::cli::BenchOpts;
use crate::kernel::Flavor;
use crate::linux::{self, INIT_DONE, KERNEL_TROUBLE, LinuxGuest};
use crate::linuxpvtest::{PVLOCK_PREFIX, QSPINLOCK_LINE};
use crate::measure::{self, Range};
use crate::qemu::{self, Machine};
use crate::vm::{PvLock, VmConfig};
use crate::{Workspace, bench_forkexec, linuxpv};

/// `pvlinux bench --scale` under icount, where one instruction is one
/// nanosecond whatever the host: the guest runs some ten times more work
/// per second of its time than under multi-threaded TCG, and this keeps
/// each test at tens of time slices.
const ICOUNT_SCALE: f64 = 3.0;

/// Guest time each test should take at 1x under multi-threaded TCG: some
/// sixty 4 ms slices, so that within one run the host's scheduling of
/// QEMU's threads averages out, while the full matrix, whose stock-kernel
/// cells at 4x take ten times longer, stays within 90 minutes. The work
/// per test is fixed (the same in
/// every cell of one benchmark), so the scale that gives this time is
/// found once per benchmark, on the host at hand ([`calibrated_scale`]):
/// the 2-core machines of the same kind have run the suite at speeds 4x
/// apart.
const MTTCG_TEST_SECONDS: f64 = 0.25;
/// The calibrated scale stays within these bounds, and is rounded up to a
/// multiple of the step.
const MTTCG_SCALE_MIN: f64 = 1.0;
const MTTCG_SCALE_MAX: f64 = 32.0;
const MTTCG_SCALE_STEP: f64 = 0.25;

/// Runs per cell.
const MTTCG_RUNS: u32 = 5;
const ICOUNT_RUNS: u32 = 3;
const QUICK_RUNS: u32 = 3;

/// Wall-clock limit of one run: the slowest cell (8 vCPUs beside the hog)
/// takes about two minutes.
const RUN_TIMEOUT: Duration = Duration::from_secs(900);

/// How long the hog VM would compute (it is stopped with the run).
const HOG_MS: u64 = 3_600_000;

/// The start of the patched kernel's records line (the CPU count follows).
const PATCHED_RECORDS_LINE: &str = "pvlock: openeuler preempted records on ";

/// One run to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub cell: CellKey,
    pub run: u32,
    pub seed: Option<u64>,
}

impl Plan {
    pub fn name(&self) -> String {
        format!(
            "{} run {}{}",
            self.cell.describe(),
            self.run,
            self.seed.map_or(String::new(), |s| format!(" seed {s}"))
        )
    }
}

/// How many icount runs go at once: one. This benchmark's icount runs
/// do not repeat exactly even one at a time (the same seed and build read
/// `context1` 22,806 and 25,170 ops/s in consecutive runs), so the lock
/// benchmark's check that a neighbour does not move them cannot be made
/// here, and two at a time read `context1` at 1x about 1.7 times higher
/// in four runs of six (docs/benchmarks-linux.md, "The matrix").
const LINUX_ICOUNT_AT_ONCE: u32 = 1;

/// The matrix, repetition by repetition (module documentation).
pub fn matrix(quick: bool) -> Vec<Plan> {
    let key = |timing, kernel, ratio: u32, hog| CellKey {
        timing,
        kernel,
        vcpus: PCPUS * ratio,
        hog,
    };
    let mut mt: Vec<CellKey> = Vec::new();
    let ratios: &[u32] = if quick { &[1, 2] } else { &[1, 2, 4] };
    let hogs: &[bool] = if quick { &[false] } else { &[false, true] };
    for &hog in hogs {
        for &ratio in ratios {
            for kernel in [Kernel::Stock, Kernel::Patched] {
                mt.push(key(Timing::Mttcg, kernel, ratio, hog));
            }
        }
    }
    if !quick {
        mt.push(key(Timing::Mttcg, Kernel::Bare, 1, false));
    }
    let runs = if quick { QUICK_RUNS } else { MTTCG_RUNS };
    let mut plans = Vec::new();
    for run in 0..runs {
        plans.extend(mt.iter().map(|&cell| Plan {
            cell,
            run,
            seed: None,
        }));
    }
    if !quick {
        let icount: Vec<CellKey> = [1, 2]
            .into_iter()
            .flat_map(|r| {
                [Kernel::Stock, Kernel::Patched].map(|k| key(Timing::Icount, k, r, false))
            })
            .collect();
        for run in 0..ICOUNT_RUNS {
            plans.extend(icount.iter().map(|&cell| Plan {
                cell,
                run,
                seed: Some(u64::from(run) + 1),
            }));
        }
    }
    plans
}

/// The multi-threaded scale at which the median test of a run at scale 1,
/// which took `seconds` each, takes about [`MTTCG_TEST_SECONDS`]; `None`
/// without a usable time.
pub fn calibrated_scale(seconds: &[f64]) -> Option<f64> {
    let valid: Vec<f64> = seconds.iter().copied().filter(|s| *s > 0.0).collect();
    let median = Range::of(&valid)?.median;
    let scale = (MTTCG_TEST_SECONDS / median / MTTCG_SCALE_STEP).ceil() * MTTCG_SCALE_STEP;
    Some(scale.clamp(MTTCG_SCALE_MIN, MTTCG_SCALE_MAX))
}

/// The guest's command line for `plan`; `mttcg_scale` is the work per test
/// of the multi-threaded runs.
fn bootargs(plan: &Plan, mttcg_scale: f64) -> String {
    let scale = match plan.cell.timing {
        Timing::Mttcg => mttcg_scale,
        Timing::Icount => ICOUNT_SCALE,
    };
    let mut args = format!("{} lgpv=bench lgscale={scale}", linux::BOOTARGS);
    if let Some(seed) = plan.seed {
        args.push_str(&format!(" lgseed={seed}"));
    }
    args
}

/// The results of one run's console: every test's ops/s, or why the run
/// does not count.
pub fn parse_run(plan: &Plan, console: &str, wall_secs: f64) -> Result<Run, String> {
    // Beside the hog every guest line carries its VM's prefix.
    let lines: Vec<&str> = console
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !plan.cell.hog || l.starts_with("[vm0]"))
        .collect();
    if let Some(trouble) = lines
        .iter()
        .find(|l| KERNEL_TROUBLE.iter().any(|t| l.contains(t)))
    {
        return Err(format!("the kernel complained: {trouble:?}"));
    }
    // The stock kernel has no PV-lock driver; the patched one, offered
    // openEuler's interface, uses both of its features.
    let pvlock: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.find(PVLOCK_PREFIX).map(|at| l[at..].trim_end()))
        .collect();
    let wanted: Vec<String> = match plan.cell.kernel {
        Kernel::Patched => vec![
            QSPINLOCK_LINE.to_string(),
            format!("{PATCHED_RECORDS_LINE}{} CPUs", plan.cell.vcpus),
        ],
        Kernel::Stock | Kernel::Bare => Vec::new(),
    };
    if pvlock != wanted {
        return Err(format!(
            "the {} kernel printed the pvlock lines {pvlock:?}, expected {wanted:?}",
            plan.cell.kernel.name()
        ));
    }
    if let Some(failed) = lines.iter().find_map(|l| BenchFailed::parse(l)) {
        return Err(format!("a test failed: {failed}"));
    }
    if !lines.iter().any(|l| BenchDone::parse(l).is_some()) {
        return Err("no `pvlinux: bench done` line".into());
    }
    let mut ops_per_sec = BTreeMap::new();
    for result in lines.iter().filter_map(|l| BenchResult::parse(l)) {
        if result.copies != plan.cell.vcpus {
            return Err(format!(
                "{} ran {} copies, not {}",
                result.test, result.copies, plan.cell.vcpus
            ));
        }
        ops_per_sec.insert(result.test.clone(), result.ops_per_sec);
    }
    if let Some(missing) = BENCH_TESTS.iter().find(|t| !ops_per_sec.contains_key(**t)) {
        return Err(format!("no result for {missing}"));
    }
    Ok(Run {
        cell: plan.cell,
        run: plan.run,
        seed: plan.seed,
        ops_per_sec,
        wall_secs,
    })
}

/// The two guests: (stock, patched), each with the initramfs.
struct Guests {
    stock: LinuxGuest,
    patched: LinuxGuest,
}

impl Guests {
    fn of(&self, kernel: Kernel) -> &LinuxGuest {
        match kernel {
            Kernel::Patched => &self.patched,
            Kernel::Stock | Kernel::Bare => &self.stock,
        }
    }
}

/// Boots `plan` and measures it.
fn run_plan(b: &Bench, guests: &Guests, plan: &Plan, mttcg_scale: f64) -> Result<Run, String> {
    let start = Instant::now();
    let console = boot_plan(b, guests, plan, mttcg_scale)?;
    parse_run(plan, &console, start.elapsed().as_secs_f64())
}

/// The scale of the multi-threaded runs: `given`, or found by one run of
/// the stock kernel at 1x and scale 1 (its results count nowhere else).
fn mttcg_scale(b: &Bench, guests: &Guests, given: Option<f64>) -> Result<f64> {
    if let Some(scale) = given {
        return Ok(scale);
    }
    let plan = Plan {
        cell: CellKey {
            timing: Timing::Mttcg,
            kernel: Kernel::Stock,
            vcpus: PCPUS,
            hog: false,
        },
        run: 0,
        seed: None,
    };
    print!("bench --linux: calibrating the multi-threaded scale ... ");
    let _ = std::io::stdout().flush();
    let console = boot_plan(b, guests, &plan, 1.0)
        .map_err(|why| anyhow::anyhow!("the calibration run failed: {why}"))?;
    parse_run(&plan, &console, 0.0)
        .map_err(|why| anyhow::anyhow!("the calibration run does not count: {why}"))?;
    let seconds: Vec<f64> = console
        .lines()
        .filter_map(|l| BenchResult::parse(l.trim_end_matches('\r')))
        .map(|r| r.seconds)
        .collect();
    let scale = calibrated_scale(&seconds).context("the calibration run reported no test time")?;
    println!(
        "median test {:.3} s at scale 1: scale {scale}",
        Range::of(&seconds).map_or(0.0, |r| r.median)
    );
    Ok(scale)
}

/// Boots `plan` and returns its console.
fn boot_plan(b: &Bench, guests: &Guests, plan: &Plan, mttcg_scale: f64) -> Result<String, String> {
    let guest = guests.of(plan.cell.kernel);
    let name = format!("bench-linux {}", plan.name());
    let console = if plan.cell.kernel == Kernel::Bare {
        let mut machine = Machine {
            cpu: qemu::normalize_cpu("max,pauth=off"),
            smp: plan.cell.vcpus,
            virtualization: false,
            mem: format!("{}M", linux::VM_MEMORY >> 20),
            append: Some(bootargs(plan, mttcg_scale)),
            ..Machine::default()
        };
        machine.icount = plan.cell.timing == Timing::Icount;
        machine.extra_args.push("-initrd".into());
        machine.extra_args.push(guest.initrd.display().to_string());
        b.run_machine(&name, &machine, &guest.image, RUN_TIMEOUT, None)?
    } else {
        let mut vms = vec![VmConfig {
            guest: guest.image.display().to_string(),
            initrd: Some(guest.initrd.clone()),
            memory: linux::VM_MEMORY,
            bootargs: bootargs(plan, mttcg_scale),
            pv_lock: Some(PvLock::Variant(Variant::OpenEuler)),
            ..VmConfig::smp_demo(plan.cell.vcpus, "", 1)
        }];
        if plan.cell.hog {
            vms.push(bench::hog_vm(PCPUS, HOG_MS));
        }
        let t = BootTest {
            name: name.clone(),
            timeout: RUN_TIMEOUT,
            outcome: Outcome::CleanExit,
            checks: vec![Check::Banner],
            dt_edit: None,
            kernel: BootKernel::El2,
            vms,
            machine: Machine {
                cpu: qemu::normalize_cpu("max,pauth=off"),
                smp: PCPUS,
                icount: plan.cell.timing == Timing::Icount,
                ..Machine::default()
            },
        };
        let (machine, image) = b.prepare_test(&t).map_err(|e| format!("{e:#}"))?;
        // The hog computes for an hour: the run ends with the Linux VM.
        let stop_on = plan.cell.hog.then_some(INIT_DONE);
        b.run_machine(&name, &machine, &image, RUN_TIMEOUT, stop_on)?
    };
    Ok(console)
}

pub fn bench(ws: &Workspace, o: &BenchOpts) -> Result<ExitCode> {
    let dir = ws.xtask_dir()?.join("bench-linux");
    let b = Bench::prepare(ws, &o.build, dir.join("logs"), false)?;
    let guests = Guests {
        stock: linuxpv::obtain(ws, Flavor::Stock)?,
        patched: linuxpv::obtain(ws, Flavor::Patched)?,
    };
    let debian = linux::obtain(ws)?;
    let picked = |name: String| o.cells.is_empty() || o.cells.iter().any(|c| name.contains(c));
    let plans: Vec<Plan> = matrix(o.quick)
        .into_iter()
        .filter(|plan| picked(plan.name()))
        .collect();
    let forkexec_plans: Vec<bench_forkexec::Plan> = bench_forkexec::plans(o.quick)
        .into_iter()
        .filter(|plan| picked(plan.name()))
        .collect();
    anyhow::ensure!(
        !plans.is_empty() || !forkexec_plans.is_empty(),
        "--cells {:?}: no run has such a name (names look like \"icount patched 2x run 0 \
         seed 1\" or \"debian-6.1 forkexec 4 vCPUs run 0\")",
        o.cells
    );
    let started = Instant::now();
    // Only multi-threaded runs need the calibration.
    let calibrate = o.scale.is_none() && plans.iter().any(|p| p.cell.timing == Timing::Mttcg);
    let mttcg_scale = if calibrate {
        mttcg_scale(&b, &guests, None)?
    } else {
        o.scale.unwrap_or(1.0)
    };
    println!(
        "bench --linux: {} runs, 2 pCPUs; multi-threaded TCG (scale {mttcg_scale}){}; then {} \
         runs of Debian's 6.1 kernel's fork+exec loop",
        plans.len(),
        if o.quick {
            String::new()
        } else {
            format!(" and -icount shift=0,sleep=off (scale {ICOUNT_SCALE}, seeded)")
        },
        forkexec_plans.len()
    );
    // Each run's progress line gives its index against the runs that ended
    // before it (the reference a cell's median will use).
    let ended: Mutex<Vec<Run>> = Mutex::new(Vec::new());
    let report = |i: usize, outcome: &(Result<Run, String>, f64), count: usize| {
        let plan = &plans[i];
        let (outcome, wall) = outcome;
        let line = match outcome {
            Ok(run) => {
                let mut ended = ended.lock().unwrap_or_else(|e| e.into_inner());
                let reference = report::reference(&ended, plan.cell.timing);
                let index = report::index(run, &reference)
                    .map_or("   -".to_string(), |x| format!("{x:.3}"));
                ended.push(run.clone());
                format!(
                    "index {index}  {} tests  ({wall:.1} s)",
                    run.ops_per_sec.len()
                )
            }
            Err(why) => format!("FAILED: {why} ({wall:.1} s)"),
        };
        println!("[{count:>2}/{}] {:<34} {line}", plans.len(), plan.name());
    };
    let outcomes = measure::run_side_by_side(
        &plans,
        LINUX_ICOUNT_AT_ONCE,
        |plan| plan.cell.timing,
        |plan| {
            let start = Instant::now();
            let outcome = run_plan(&b, &guests, plan, mttcg_scale);
            (outcome, start.elapsed().as_secs_f64())
        },
        report,
    );
    let mut runs: Vec<Run> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for (plan, outcome) in plans.iter().zip(outcomes) {
        match outcome.map(|(outcome, _)| outcome) {
            Some(Ok(run)) => runs.push(run),
            Some(Err(why)) => failures.push(format!("{}: {why}", plan.name())),
            None => failures.push(format!("{}: not run", plan.name())),
        }
    }
    let mut forkexec_runs = Vec::new();
    for (i, plan) in forkexec_plans.iter().enumerate() {
        print!(
            "[{:>2}/{}] {:<39} ",
            i + 1,
            forkexec_plans.len(),
            plan.name()
        );
        let _ = std::io::stdout().flush();
        let start = Instant::now();
        match bench_forkexec::run(&b, &debian, plan) {
            Ok(run) => {
                println!(
                    "{:.0} execs/s  ({:.1} s)",
                    run.execs_per_sec,
                    start.elapsed().as_secs_f64()
                );
                forkexec_runs.push(run);
            }
            Err(why) => {
                println!("FAILED: {why} ({:.1} s)", start.elapsed().as_secs_f64());
                failures.push(format!("{}: {why}", plan.name()));
            }
        }
    }
    let stats = cell_stats(&runs);
    let mut summary = summarize(&runs, &stats);
    bench_forkexec::summarize(&forkexec_runs, &mut summary);
    let verdicts = verdicts(&summary);
    let wall = started.elapsed().as_secs_f64();
    let meta = [
        (
            "command",
            format!(
                "cargo xtask bench --linux{}{}",
                if o.quick { " --quick" } else { "" },
                o.scale.map_or(String::new(), |s| format!(" --scale {s}"))
            ),
        ),
        ("kernel", guests.patched.kernel_package.clone()),
        ("debian_kernel", debian.kernel_package.clone()),
        (
            "qemu",
            qemu::check_version().unwrap_or_else(|e| format!("unknown: {e}")),
        ),
        ("pcpus", PCPUS.to_string()),
        (
            "scale",
            format!(
                "mttcg {mttcg_scale} ({}), icount {ICOUNT_SCALE}",
                match (o.scale.is_some(), calibrate) {
                    (true, _) => "given",
                    (false, true) => "calibrated",
                    (false, false) => "unused: no multi-threaded run",
                }
            ),
        ),
        (
            "runs",
            format!("{} of {} completed", runs.len(), plans.len()),
        ),
        ("wall_minutes", format!("{:.1}", wall / 60.0)),
    ];
    fs::create_dir_all(&dir)?;
    let results = dir.join("results.json");
    fs::write(
        &results,
        report::results_json(&runs, &stats, &summary, &verdicts, &meta),
    )
    .with_context(|| format!("cannot write {}", results.display()))?;
    println!("results: {}", results.display());
    let forkexec_results = dir.join("forkexec.json");
    fs::write(
        &forkexec_results,
        serde_json::to_string_pretty(&forkexec_runs)?,
    )
    .with_context(|| format!("cannot write {}", forkexec_results.display()))?;
    if let Some(path) = &o.json {
        fs::write(path, report::summary_json(&summary))
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("summary: {}", path.display());
    }
    if o.docs {
        write_docs(
            ws,
            &runs,
            &stats,
            &summary,
            &verdicts,
            &meta,
            &forkexec_runs,
        )?;
    }
    for v in &verdicts {
        println!(
            "target {}: {} (>= {}): {}",
            v.key,
            v.value
                .map_or("not measured".to_string(), |x| format!("{x:.2}")),
            v.at_least,
            match v.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "not measured",
            }
        );
    }
    println!("bench --linux: {:.1} minutes", wall / 60.0);
    if failures.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "bench --linux: {} runs failed: {}",
            failures.len(),
            failures.join("; ")
        );
        Ok(ExitCode::FAILURE)
    }
}

/// The doc and its plots.
const DOC: &str = "docs/benchmarks-linux.md";

fn write_docs(
    ws: &Workspace,
    runs: &[Run],
    stats: &BTreeMap<CellKey, report::CellStats>,
    summary: &report::Summary,
    verdicts: &[report::Verdict],
    meta: &[(&str, String)],
    forkexec: &[bench_forkexec::ForkExecRun],
) -> Result<()> {
    let doc_path = ws.root.join(DOC);
    let doc = fs::read_to_string(&doc_path).unwrap_or_else(|_| {
        "# The Linux workload benchmark\n\nGenerated by `cargo xtask bench --linux`.\n".to_string()
    });
    let mut generated = report::markdown(runs, stats, summary, verdicts, meta);
    if !forkexec.is_empty() {
        generated.push_str(&bench_forkexec::markdown(forkexec));
    }
    for timing in [Timing::Mttcg, Timing::Icount] {
        if !stats.keys().any(|k| k.timing == timing) {
            continue;
        }
        let file = format!("benchmarks-linux-{}.svg", timing.name());
        let path = ws.root.join("docs").join(&file);
        fs::write(&path, report::svg_plot(stats, timing))
            .with_context(|| format!("cannot write {}", path.display()))?;
        generated.push_str(&format!("\n![index, {}]({file})\n", timing.name()));
    }
    fs::write(
        &doc_path,
        update_generated_section(&doc, generated.trim_end()),
    )
    .with_context(|| format!("cannot write {}", doc_path.display()))?;
    println!("docs: {}", doc_path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_has_every_cell_and_repetition() {
        let full = matrix(false);
        // MT: 2 kernels x 3 ratios x 2 hog settings + bare = 13 cells x 5;
        // icount: 2 kernels x 2 ratios x 3 seeds.
        assert_eq!(full.len(), 13 * 5 + 4 * 3);
        // Repetition by repetition: the first 13 are run 0 of every MT cell.
        assert!(
            full[..13]
                .iter()
                .all(|p| p.run == 0 && p.cell.timing == Timing::Mttcg)
        );
        assert_eq!(full[0].cell.kernel, Kernel::Stock);
        assert_eq!(full[0].cell.vcpus, 2);
        let icount: Vec<&Plan> = full
            .iter()
            .filter(|p| p.cell.timing == Timing::Icount)
            .collect();
        assert!(icount.iter().all(|p| p.seed == Some(u64::from(p.run) + 1)));
        assert!(icount.iter().all(|p| p.cell.vcpus <= 4 && !p.cell.hog));
        let quick = matrix(true);
        assert_eq!(quick.len(), 4 * 3);
        assert!(
            quick
                .iter()
                .all(|p| p.cell.timing == Timing::Mttcg && !p.cell.hog)
        );
        assert!(quick.iter().all(|p| p.cell.vcpus <= 4));
    }

    #[test]
    fn a_run_counts_only_with_every_test_and_no_complaint() {
        let plan = Plan {
            cell: CellKey {
                timing: Timing::Mttcg,
                kernel: Kernel::Patched,
                vcpus: 4,
                hog: true,
            },
            run: 0,
            seed: None,
        };
        let mut console = String::from(
            "[vm1] lockbench: started\n[vm0] [    0.0] pvlock: PV qspinlock (kick)\n\
             [vm0] [    0.5] pvlock: openeuler preempted records on 4 CPUs\n",
        );
        for test in BENCH_TESTS {
            console.push_str(&format!(
                "[vm0] pvlinux: bench test={test} copies=4 ops=100 seconds=1.000000 \
                 ops_per_sec=100.0\r\n"
            ));
        }
        let done = format!("{console}[vm0] pvlinux: bench done\n");
        let run = parse_run(&plan, &done, 3.0).unwrap();
        assert_eq!(run.ops_per_sec.len(), BENCH_TESTS.len());
        assert!(
            parse_run(&plan, &console, 3.0)
                .unwrap_err()
                .contains("bench done")
        );
        let stall = format!("{done}[vm0] rcu: INFO: rcu_sched self-detected stall on CPU\n");
        assert!(
            parse_run(&plan, &stall, 3.0)
                .unwrap_err()
                .contains("complained")
        );
        let failed = format!("{done}[vm0] pvlinux: bench failed test=spawn error=fork: ENOMEM\n");
        assert!(
            parse_run(&plan, &failed, 3.0)
                .unwrap_err()
                .contains("failed")
        );
        let short = done.replace("test=mmap", "test=other");
        assert!(parse_run(&plan, &short, 3.0).unwrap_err().contains("mmap"));
        let copies = done.replace("copies=4", "copies=2");
        assert!(
            parse_run(&plan, &copies, 3.0)
                .unwrap_err()
                .contains("copies")
        );
        // A patched kernel without its lines, or a stock kernel with them.
        let quiet = done.replace("pvlock: PV qspinlock (kick)", "nothing");
        assert!(
            parse_run(&plan, &quiet, 3.0)
                .unwrap_err()
                .contains("pvlock lines")
        );
        let stock = Plan {
            cell: CellKey {
                kernel: Kernel::Stock,
                ..plan.cell
            },
            ..plan
        };
        assert!(
            parse_run(&stock, &done, 3.0)
                .unwrap_err()
                .contains("pvlock lines")
        );
        let stock_console: String = done
            .lines()
            .filter(|l| !l.contains("pvlock: "))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(parse_run(&stock, &stock_console, 3.0).is_ok());
        // The hog VM's lines do not count, even if they look like results.
        let hog_line = done.replace(
            "[vm1] lockbench: started",
            "[vm1] pvlinux: bench failed test=x error=y",
        );
        assert!(parse_run(&plan, &hog_line, 3.0).is_ok());
    }

    #[test]
    fn bootargs_carry_the_scale_and_the_seed() {
        let mut plan = matrix(false)[0];
        assert!(bootargs(&plan, 1.0).ends_with("lgpv=bench lgscale=1"));
        assert!(bootargs(&plan, 4.25).ends_with("lgpv=bench lgscale=4.25"));
        plan.cell.timing = Timing::Icount;
        plan.seed = Some(2);
        assert!(bootargs(&plan, 4.25).ends_with("lgpv=bench lgscale=3 lgseed=2"));
    }

    #[test]
    fn the_scale_makes_the_median_test_take_its_time() {
        // 0.05 s at scale 1 -> 5; the median, not the mean, decides.
        assert_eq!(calibrated_scale(&[0.05, 0.04, 0.06, 2.0, 0.05]), Some(5.0));
        // Rounded up to a quarter: 0.25 / 0.09 = 2.78 -> 3.
        assert_eq!(calibrated_scale(&[0.09]), Some(3.0));
        // Never below 1 (a slow host runs the bases as they are) nor above 32.
        assert_eq!(calibrated_scale(&[1.0, 2.0]), Some(1.0));
        assert_eq!(calibrated_scale(&[0.0001]), Some(32.0));
        // No usable time, no scale.
        assert_eq!(calibrated_scale(&[]), None);
        assert_eq!(calibrated_scale(&[0.0, f64::NAN, -1.0]), None);
    }
}
