//! The fork+exec loop of Debian's stock 6.1 cloud kernel, part of
//! `cargo xtask bench --linux` (issue 17: "and so does Debian's stock 6.1
//! cloud kernel running a fork+exec loop"): the kernel a user would boot
//! unchanged, with no PV-lock driver, so that what it keeps under
//! overcommit is what el2's scheduler alone gives a stock guest.
//!
//! Each run boots el2 with one VM of `vcpus` vCPUs on [`PCPUS`] pCPUs
//! (multi-threaded TCG) whose `/init` runs `lgtest=forkexec`: every CPU
//! runs [`FORKS_PER_CPU`] fork+execs of `/bin/true` at once and prints
//! the guest time they took ([`crate::linux::FORKEXEC_PREFIX`]). A run's
//! throughput is execs per second of guest time. The runs go in rounds
//! (every overcommit once, then again), and retention at k-times
//! overcommit is the median over the rounds of the round's k-times run
//! over its 1x run, seconds apart on a host whose speed moves between
//! minutes (as `bench_linux_report`'s keys); its `_min` is the smallest
//! run there over the largest at 1x.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::bench::Bench;
use crate::bench_linux_report::{PCPUS, Summary};
use crate::boottest::{BootTest, Check, Kernel as BootKernel, Outcome};
use crate::linux::{self, FORKEXEC_PREFIX, INIT_DONE, KERNEL_TROUBLE, LinuxGuest};
use crate::measure::Range;
use crate::qemu::{self, Machine};
use crate::vm::VmConfig;

/// fork+execs per CPU: about a second of guest time at 1x on the 2-core
/// machine kind (some 250 slices), some 15 s at 4x.
pub const FORKS_PER_CPU: u32 = 300;
/// Runs per overcommit, and the overcommits, of the full and the quick
/// benchmark. Nine rounds, not the five: five runs of one el2
/// put the 2x median anywhere in 0.46-0.84 across runs minutes apart.
const RUNS: u32 = 9;
const QUICK_RUNS: u32 = 3;
const RATIOS: [u32; 3] = [1, 2, 4];
const QUICK_RATIOS: [u32; 2] = [1, 2];
/// A 4x run takes some 15 s, a convoy can stretch it severalfold.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// One run to make: `vcpus` vCPUs, repetition `run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub vcpus: u32,
    pub run: u32,
}

impl Plan {
    /// The run's name in progress lines and for `--cells`.
    pub fn name(&self) -> String {
        format!("debian-6.1 forkexec {} vCPUs run {}", self.vcpus, self.run)
    }
}

/// The runs, repetition by repetition (every overcommit once, then again),
/// so that a slow spell of the host spreads over the overcommits.
pub fn plans(quick: bool) -> Vec<Plan> {
    let (runs, ratios): (u32, &[u32]) = if quick {
        (QUICK_RUNS, &QUICK_RATIOS)
    } else {
        (RUNS, &RATIOS)
    };
    (0..runs)
        .flat_map(|run| {
            ratios.iter().map(move |r| Plan {
                vcpus: PCPUS * r,
                run,
            })
        })
        .collect()
}

/// A run's result.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ForkExecRun {
    pub vcpus: u32,
    pub run: u32,
    /// fork+execs over all CPUs.
    pub execs: u64,
    /// Guest seconds they took.
    pub seconds: f64,
    /// `execs / seconds`.
    pub execs_per_sec: f64,
}

/// Reads a run's console: the `/init` line for `plan.vcpus` CPUs, no
/// kernel complaint, `/init` finished.
pub fn parse(plan: &Plan, console: &str) -> Result<ForkExecRun, String> {
    let lines: Vec<&str> = console.lines().map(|l| l.trim_end_matches('\r')).collect();
    if let Some(trouble) = lines
        .iter()
        .find(|l| KERNEL_TROUBLE.iter().any(|t| l.contains(t)))
    {
        return Err(format!("the kernel complained: {trouble:?}"));
    }
    let line = lines
        .iter()
        .find_map(|l| {
            l.find(FORKEXEC_PREFIX)
                .map(|at| &l[at + FORKEXEC_PREFIX.len()..])
        })
        .ok_or_else(|| format!("no `{FORKEXEC_PREFIX}` line"))?;
    let field = |key: &str| -> Result<f64, String> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("no number {key}= in {line:?}"))
    };
    let (cpus, each, seconds) = (field("cpus")?, field("each")?, field("seconds")?);
    if cpus != f64::from(plan.vcpus) {
        return Err(format!("{cpus} CPUs ran the loop, not {}", plan.vcpus));
    }
    if seconds <= 0.0 {
        return Err(format!("the loop took {seconds} s"));
    }
    if !lines.iter().any(|l| l.contains(INIT_DONE)) {
        return Err(format!("no {INIT_DONE:?} line"));
    }
    let execs = (cpus * each) as u64;
    Ok(ForkExecRun {
        vcpus: plan.vcpus,
        run: plan.run,
        execs,
        seconds,
        execs_per_sec: execs as f64 / seconds,
    })
}

/// Throughput per vCPU count.
pub fn ranges(runs: &[ForkExecRun]) -> BTreeMap<u32, Range> {
    let mut by: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for r in runs {
        by.entry(r.vcpus).or_default().push(r.execs_per_sec);
    }
    by.into_iter()
        .filter_map(|(v, x)| Some((v, Range::of(&x)?)))
        .collect()
}

/// Retention at `ratio` times overcommit by rounds: each round's run
/// there over the same round's 1x run, summarised.
pub fn retention(runs: &[ForkExecRun], ratio: u32) -> Option<Range> {
    let at = |vcpus: u32| {
        runs.iter()
            .filter(move |r| r.vcpus == vcpus)
            .map(|r| (r.run, r.execs_per_sec))
    };
    crate::measure::paired_by_round(at(PCPUS * ratio), at(PCPUS))
}

/// Fills the summary's `debian_forkexec_*` keys from the runs.
pub fn summarize(runs: &[ForkExecRun], summary: &mut Summary) {
    let ranges = ranges(runs);
    let worst = |ratio: u32| {
        let (k, one) = (ranges.get(&(PCPUS * ratio))?, ranges.get(&PCPUS)?);
        Some(k.min / one.max)
    };
    let median = |ratio| retention(runs, ratio).map(|r| r.median);
    summary.debian_forkexec_retention_2x = median(2);
    summary.debian_forkexec_retention_2x_min = worst(2);
    summary.debian_forkexec_retention_4x = median(4);
    summary.debian_forkexec_retention_4x_min = worst(4);
}

/// The doc's table: throughput per overcommit, and retention by rounds.
pub fn markdown(runs: &[ForkExecRun]) -> String {
    let mut out = format!(
        "\nDebian's stock 6.1 cloud kernel, `lgtest=forkexec lgforks={FORKS_PER_CPU}`, \
         multi-threaded TCG: fork+execs per second of guest time, median [min-max] (runs), \
         and over 1x by rounds (each round's run over its 1x run): median [min-max] \
         (rounds)\n\n\
         | vCPUs | execs/s | over 1x by rounds |\n|---|---|---|\n"
    );
    for (vcpus, r) in ranges(runs) {
        let over = retention(runs, vcpus / PCPUS).map_or("-".to_string(), |o| {
            format!("{:.2} [{:.2}-{:.2}] ({})", o.median, o.min, o.max, o.n)
        });
        out.push_str(&format!(
            "| {vcpus} | {:.0} [{:.0}-{:.0}] ({}) | {over} |\n",
            r.median, r.min, r.max, r.n
        ));
    }
    out
}

/// Boots `plan` with the Debian guest and measures it.
pub fn run(b: &Bench, guest: &LinuxGuest, plan: &Plan) -> Result<ForkExecRun, String> {
    let name = format!(
        "bench-linux debian-6.1 forkexec {} vCPUs run {}",
        plan.vcpus, plan.run
    );
    let t = BootTest {
        name: name.clone(),
        timeout: RUN_TIMEOUT,
        outcome: Outcome::CleanExit,
        checks: vec![Check::Banner],
        dt_edit: None,
        kernel: BootKernel::El2,
        vms: vec![VmConfig {
            guest: guest.image.display().to_string(),
            initrd: Some(guest.initrd.clone()),
            memory: linux::VM_MEMORY,
            bootargs: format!(
                "{} lgtest=forkexec lgforks={FORKS_PER_CPU}",
                linux::BOOTARGS
            ),
            ..VmConfig::smp_demo(plan.vcpus, "", 1)
        }],
        machine: Machine {
            cpu: qemu::normalize_cpu("max,pauth=off"),
            smp: PCPUS,
            ..Machine::default()
        },
    };
    let (machine, image) = b.prepare_test(&t).map_err(|e| format!("{e:#}"))?;
    let console = b.run_machine(&name, &machine, &image, RUN_TIMEOUT, None)?;
    parse(plan, &console)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plans_go_repetition_by_repetition() {
        let full = plans(false);
        assert_eq!(full.len(), 27);
        assert_eq!(
            full[..3]
                .iter()
                .map(|p| (p.vcpus, p.run))
                .collect::<Vec<_>>(),
            [(2, 0), (4, 0), (8, 0)]
        );
        let quick = plans(true);
        assert_eq!(quick.len(), 6);
        assert!(quick.iter().all(|p| p.vcpus <= 4));
    }

    fn console(cpus: u32, seconds: &str) -> String {
        format!(
            "[    1.0] Run /init as init process\r\n{FORKEXEC_PREFIX} cpus={cpus} \
             each={FORKS_PER_CPU} seconds={seconds}\r\n{INIT_DONE}\r\n"
        )
    }

    #[test]
    fn a_run_is_its_execs_over_its_guest_time() {
        let plan = Plan { vcpus: 4, run: 0 };
        let run = parse(&plan, &console(4, "2.5")).unwrap();
        assert_eq!(run.execs, 1200);
        assert_eq!(run.execs_per_sec, 480.0);
        assert!(
            parse(&plan, &console(2, "2.5"))
                .unwrap_err()
                .contains("not 4")
        );
        assert!(parse(&plan, &console(4, "0")).is_err());
        assert!(parse(&plan, &console(4, "x")).is_err());
        let unfinished = console(4, "2.5").replace(INIT_DONE, "");
        assert!(parse(&plan, &unfinished).is_err());
        let stalled = format!(
            "{}rcu: INFO: rcu_sched self-detected stall on CPU\n",
            console(4, "1")
        );
        assert!(parse(&plan, &stalled).unwrap_err().contains("complained"));
        assert!(parse(&plan, "nothing").unwrap_err().contains("no `"));
    }

    #[test]
    fn retention_pairs_the_runs_of_a_round_and_its_min_the_worst_pairing() {
        let run = |vcpus, run, execs_per_sec| ForkExecRun {
            vcpus,
            run,
            execs: 0,
            seconds: 1.0,
            execs_per_sec,
        };
        // The host slowed down after round 0: each round's 4x run is
        // divided by the 1x run it ran beside.
        let runs = [
            run(2, 0, 600.0),
            run(4, 0, 300.0),
            run(2, 1, 400.0),
            run(4, 1, 200.0),
            run(2, 2, 500.0),
            run(4, 2, 200.0),
            // A 4x run whose round has no 1x run pairs with nothing.
            run(4, 3, 50.0),
        ];
        let mut summary = Summary::default();
        summarize(&runs, &mut summary);
        assert_eq!(summary.debian_forkexec_retention_2x, Some(0.5));
        assert_eq!(summary.debian_forkexec_retention_2x_min, Some(50.0 / 600.0));
        assert_eq!(summary.debian_forkexec_retention_4x, None);
        let r = retention(&runs, 2).unwrap();
        assert_eq!((r.min, r.max, r.n), (0.4, 0.5, 3));
        let table = markdown(&runs);
        assert!(
            table.contains("| 4 | 200 [50-300] (4) | 0.50 [0.40-0.50] (3) |"),
            "{table}"
        );
    }
}
