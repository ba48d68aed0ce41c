//! The fair-share boot test: two VMs of different vCPU counts on the same
//! two pCPUs, one of them playing every hint el2 takes from a guest, and
//! el2's end-of-run summary must show each VM held to its share of pCPU
//! time (el2 `sched`, "Fair share"; docs/vms.md).
//!
//! - vm0: lockbench with 6 vCPUs, the PV queued lock over openEuler's
//!   PV-lock interface with el2's boosts on, so its waiters yield to
//!   preempted holders (directed yields), sleep and are kicked, its
//!   holders get slice extensions, and every 16th acquisition each vCPU
//!   sends itself an SGI and waits for it (`self-sgi`). Its private work
//!   keeps every vCPU wanting a pCPU most of the time.
//! - vm1: the lock benchmark's CPU hog, one always-busy vCPU per pCPU.
//!
//! Both run for the same time and have the default weight, so each is
//! owed half of the machine: up to the first VM's power-off (el2 prints
//! every VM's run time there), vm1 must get at least half less the
//! tolerance and vm0 at most half plus it. Without per-VM shares (a
//! share per vCPU, as before) vm0's 6 vCPUs would take up to 3/4.
//!
//! The test runs twice: with every slice at el2's default, and with the
//! tricky VM on 500 µs slices (`time-slice-us`), which bring it to the
//! scheduler up to eight times as often as the hog. Its share must not
//! grow with its slices (el2 `sched`, "Time slice"), its slices must have
//! run out more often than 4 ms slices can, and el2's log must show the
//! slice each VM was given.

use std::time::Duration;

use guest_driver::lockbench::{self, LockKind};
use pvlock_abi::pvlock::Variant;

use crate::bench::hog_vm;
use crate::boottest::{BootTest, Check, Kernel, Outcome, parse_vcpu_summary};
use crate::irqtest::parse_vgic_summary;
use crate::qemu::Machine;
use crate::vm::{PvLock, VmConfig};

/// vCPUs of the tricky VM; the hog VM has one per pCPU.
const TRICKY_VCPUS: u32 = 6;
/// pCPUs of the machine.
const PCPUS: u32 = 2;
/// How long both VMs run: long enough that the hints count in the
/// hundreds (a 1.5 s run once made only 75 directed yields).
const DURATION_MS: u64 = 3_000;
/// How far a VM's share of the pCPU time, up to the first power-off, may
/// lie beyond what it is owed (a fraction of the machine). Covers
/// multi-threaded TCG's jitter: runs read 0.500-0.501.
pub const TOLERANCE: f64 = 0.02;
/// Each of these counts must be at least this over the run: the hints
/// were used heavily, not once.
const HEAVY_USE: u64 = 100;

/// The tricky VM's `time-slice-us` in the second run: an eighth of el2's
/// default.
const SHORT_SLICE_US: u32 = 500;

/// The tests: default slices, then the tricky VM on short ones.
pub fn tests() -> Vec<BootTest> {
    vec![share_test(None), share_test(Some(SHORT_SLICE_US))]
}

/// The test with the tricky VM's `time-slice-us` at `tricky_slice_us`
/// (el2's default when `None`).
fn share_test(tricky_slice_us: Option<u32>) -> BootTest {
    let machine = Machine {
        smp: PCPUS,
        ..Machine::default()
    };
    let settings = lockbench::Settings {
        lock: LockKind::Pv,
        duration_ms: DURATION_MS,
        private_work: 200,
        self_sgi: 16,
        // A strictly FIFO lock: with stealing its waiters seldom need the
        // directed yields and kicks whose time moves between vCPUs, which
        // are what the fair share must hold through (a run with stealing
        // made 59 yields and 36 kicks).
        steal: false,
        ..lockbench::Settings::default()
    };
    let tricky = VmConfig {
        guest: crate::bench::GUEST.into(),
        pv_lock: Some(PvLock::Variant(Variant::OpenEuler)),
        boost: Some(true),
        time_slice_us: tricky_slice_us,
        ..VmConfig::smp_demo(TRICKY_VCPUS, &settings.to_string(), 1)
    };
    let hog = hog_vm(PCPUS, DURATION_MS);
    let slice = tricky_slice_us.map_or(String::new(), |us| format!(" time-slice-us={us}"));
    let mut checks = vec![
        Check::Banner,
        Check::HypervisorSummary {
            vcpus_per_vm: vec![TRICKY_VCPUS as usize, PCPUS as usize],
            time_sliced: true,
        },
        Check::Shares {
            tricky_vm: 0,
            owed_percent: vec![50, 50],
        },
    ];
    if tricky_slice_us.is_some() {
        checks.push(Check::ShortSlices { vm: 0 });
    }
    // el2's creation line for each VM names its slice.
    for (vm, vcpus, us) in [
        (
            0,
            TRICKY_VCPUS,
            tricky_slice_us.unwrap_or(platform::vm::DEFAULT_TIME_SLICE_US),
        ),
        (1, PCPUS, platform::vm::DEFAULT_TIME_SLICE_US),
    ] {
        checks.push(Check::Lines {
            text: format!("vm vm{vm}: {vcpus} vCPUs, {us} us slices,"),
            count: 1,
        });
    }
    BootTest {
        name: format!(
            "shares lockbench vcpus={TRICKY_VCPUS} tricky{slice} + hog vcpus={PCPUS} {}",
            machine.describe()
        ),
        timeout: Duration::from_secs(300),
        outcome: Outcome::CleanExit,
        checks,
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![tricky, hog],
        machine,
    }
}

/// Each VM's share of the pCPU time up to the first VM's power-off, from
/// the run times el2 prints there (`el2: run time at vm V's power-off:
/// vm0 X ms vm1 Y ms`, VMs in id order): until then every VM competed
/// for the pCPUs; after it the last VMs run alone, which the end-of-run
/// summary includes.
fn shares(lines: &[&str]) -> Result<Vec<f64>, String> {
    let line = lines
        .iter()
        .find_map(|l| l.split_once("el2: run time at vm ").map(|(_, rest)| rest))
        .ok_or("no \"el2: run time at vm ...'s power-off\" line")?;
    let (_, times) = line
        .split_once("power-off:")
        .ok_or_else(|| format!("unreadable run-time line: {line}"))?;
    let words: Vec<&str> = times.split_whitespace().collect();
    let run_ms = words
        .chunks(3)
        .map(|w| match w {
            [_, ms, "ms"] => ms.parse::<f64>().ok(),
            _ => None,
        })
        .collect::<Option<Vec<f64>>>()
        .ok_or_else(|| format!("unreadable run-time line: {line}"))?;
    let total: f64 = run_ms.iter().sum();
    Ok(run_ms
        .iter()
        .map(|r| r / total.max(f64::MIN_POSITIVE))
        .collect())
}

/// The number after `key` in a `summary:   vmV/vcpuC: ...` line.
fn count_after(line: &str, key: &str) -> Option<u64> {
    let mut words = line.split_whitespace();
    words.find(|w| *w == key)?;
    words.next()?.parse().ok()
}

/// [`Check::ShortSlices`]: VM `vm`'s slices that ran out (`preempted`,
/// less the `wakeup-preemptions` that cut a slice short) number more per
/// second of the VM's run time than slices of el2's default length can:
/// each such end takes a whole slice of the VM's run time on its pCPU (a
/// directed yield hands the rest of a slice on within the VM, an
/// extension only lengthens it), so default slices end at most
/// 1 / 4 ms = 250 times per second of run time.
pub fn check_short_slices(lines: &[&str], vm: usize) -> Result<(), String> {
    let prefix = format!("summary:   vm{vm}/");
    let (mut ends, mut run_ms) = (0u64, 0.0);
    for line in lines.iter().filter(|l| l.contains(&prefix)) {
        let summary = parse_vcpu_summary(line).ok_or_else(|| format!("unreadable: {line}"))?;
        let cut = count_after(line, "wakeup-preemptions").unwrap_or(0);
        ends += summary.preempted.saturating_sub(cut);
        run_ms += summary.run_ms;
    }
    if run_ms <= 0.0 {
        return Err(format!("no run time for vm{vm} in el2's summary"));
    }
    let per_second = ends as f64 / (run_ms / 1000.0);
    let default_most = 1e6 / f64::from(platform::vm::DEFAULT_TIME_SLICE_US);
    println!("slices: vm{vm} {ends} ran out in {run_ms:.1} ms of run, {per_second:.0}/s");
    if per_second > default_most {
        Ok(())
    } else {
        Err(format!(
            "vm{vm}'s slices ran out {per_second:.0} times per second of run time, no more \
             than the default slice allows ({default_most:.0}): its time-slice-us was not used"
        ))
    }
}

/// [`Check::Shares`]: every VM got its owed share of the pCPU time within
/// [`TOLERANCE`] (the tricky VM no more, the others no less), and the
/// tricky VM used directed yields, slice extensions, kicks and SGIs
/// heavily.
pub fn check(lines: &[&str], tricky_vm: usize, owed: &[f64]) -> Result<(), String> {
    let mut problems = Vec::new();
    let got = shares(lines)?;
    if got.len() != owed.len() {
        return Err(format!(
            "run times for {} VM(s) at the first power-off, expected {}",
            got.len(),
            owed.len()
        ));
    }
    for (vm, (&got, &owed)) in got.iter().zip(owed).enumerate() {
        let fair = if vm == tricky_vm {
            got <= owed + TOLERANCE
        } else {
            got >= owed - TOLERANCE
        };
        if !fair {
            problems.push(format!(
                "vm{vm} got {got:.3} of the pCPU time, owed {owed:.3} (tolerance {TOLERANCE})"
            ));
        }
    }
    let prefix = format!("summary:   vm{tricky_vm}/");
    let total = |key: &str| -> u64 {
        lines
            .iter()
            .filter(|l| l.contains(&prefix))
            .filter_map(|l| count_after(l, key))
            .sum()
    };
    let kicks = lines
        .iter()
        .filter(|l| l.contains("lockbench: yields:"))
        .filter_map(|l| {
            let before = l.split(" kicks").next()?;
            before.rsplit(' ').next()?.parse::<u64>().ok()
        })
        .sum::<u64>();
    let sgis = lines
        .iter()
        .filter_map(|l| parse_vgic_summary(l))
        .map(|v| v.sgis)
        .sum::<u64>();
    for (what, n) in [
        ("directed yields (yielded-to)", total("yielded-to")),
        ("slice extensions", total("extended")),
        ("kicks", kicks),
        ("SGIs", sgis),
    ] {
        if n < HEAVY_USE {
            problems.push(format!("vm{tricky_vm} made only {n} {what}"));
        }
    }
    if !lines.iter().any(|l| l.contains(lockbench::ALL_PASSED)) {
        problems.push(format!("no {:?} line", lockbench::ALL_PASSED));
    }
    println!(
        "shares: {}",
        got.iter()
            .enumerate()
            .map(|(vm, s)| format!("vm{vm} {s:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(vm: usize, vcpu: usize, run_ms: f64, yielded_to: u64, extended: u64) -> String {
        format!(
            "summary:   vm{vm}/vcpu{vcpu}: run {run_ms:.1} ms steal 1.0 ms blocked 0.0 ms in 9 \
             preempted 3 blocks 0 yields 4 yielded-to {yielded_to} migrations 0 extended \
             {extended} wakeup-preemptions 0"
        )
    }

    fn console(tricky_ms: f64, hog_ms: f64) -> Vec<String> {
        let mut lines = vec![
            "[vm0] lockbench: yields: 900 calls, 400 yielded, 300 halts, 250 kicks".to_string(),
            format!("[vm0] {}", lockbench::ALL_PASSED),
            "summary:   vgic: sgis 5000 timer 10 spi 0 maintenance 0".to_string(),
        ];
        lines.push("el2: vm vm1 powered off".into());
        lines.push(format!(
            "el2: run time at vm vm1's power-off: vm0 {tricky_ms:.1} ms vm1 {hog_ms:.1} ms"
        ));
        lines.push("el2: vm vm0 powered off".into());
        // vm0 ran alone on both pCPUs for 300 ms after vm1's power-off:
        // the second line and the summary include that time.
        lines.push(format!(
            "el2: run time at vm vm0's power-off: vm0 {:.1} ms vm1 {hog_ms:.1} ms",
            tricky_ms + 600.0
        ));
        for vcpu in 0..6 {
            lines.push(summary(0, vcpu, (tricky_ms + 600.0) / 6.0, 50, 40));
        }
        for vcpu in 0..2 {
            lines.push(summary(1, vcpu, hog_ms / 2.0, 0, 0));
        }
        lines
    }

    fn run(lines: &[String]) -> Result<(), String> {
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        check(&lines, 0, &[0.5, 0.5])
    }

    #[test]
    fn equal_shares_pass_and_per_vcpu_shares_fail() {
        assert_eq!(run(&console(1000.0, 1000.0)), Ok(()));
        assert_eq!(run(&console(900.0, 1100.0)), Ok(()));
        // A share per vCPU: 6 of 8.
        let why = run(&console(1500.0, 500.0)).unwrap_err();
        assert!(why.contains("vm0 got 0.750"), "{why}");
        assert!(why.contains("vm1 got 0.250"), "{why}");
        // Shares come from the first power-off only.
        let mut lines = console(1000.0, 1000.0);
        lines.retain(|l| !l.contains("vm1's power-off"));
        let why = run(&lines).unwrap_err();
        assert!(why.contains("vm0 got 0.615"), "{why}");
        let mut one_vm = lines.clone();
        for line in &mut one_vm {
            if line.contains("vm0's power-off") {
                *line = "el2: run time at vm vm0's power-off: vm0 1600.0 ms".into();
            }
        }
        let why = run(&one_vm).unwrap_err();
        assert!(why.contains("run times for 1 VM(s)"), "{why}");
        lines.retain(|l| !l.contains("run time at"));
        let why = run(&lines).unwrap_err();
        assert!(why.contains("no \"el2: run time at vm"), "{why}");
    }

    #[test]
    fn short_slices_must_end_more_often_than_default_ones_can() {
        // 6 vCPUs of 250 ms each: 1.5 s of run time.
        let console = |preempted: u64, cut: u64| -> Vec<String> {
            (0..6)
                .map(|vcpu| {
                    summary(0, vcpu, 250.0, 0, 0)
                        .replace("preempted 3", &format!("preempted {preempted}"))
                        .replace("wakeup-preemptions 0", &format!("wakeup-preemptions {cut}"))
                })
                .collect()
        };
        let check = |lines: Vec<String>| {
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            check_short_slices(&lines, 0)
        };
        // 6 x 230 in 1.5 s: 920/s, as a 500 us run gives.
        assert_eq!(check(console(230, 0)), Ok(()));
        // 6 x 60 in 1.5 s: 240/s, what 4 ms slices can give.
        let why = check(console(60, 0)).unwrap_err();
        assert!(why.contains("240 times per second"), "{why}");
        // Slices cut short by wake-ups do not count.
        assert!(check(console(230, 200)).is_err());
        assert!(check(Vec::new()).unwrap_err().contains("no run time"));
    }

    #[test]
    fn the_tricks_must_be_used() {
        let mut lines = console(1000.0, 1000.0);
        lines[0] = "[vm0] lockbench: yields: 900 calls, 400 yielded, 300 halts, 3 kicks".into();
        let why = run(&lines).unwrap_err();
        assert_eq!(why, "vm0 made only 3 kicks");
        let mut lines = console(1000.0, 1000.0);
        lines.retain(|l| !l.contains("vgic"));
        assert!(run(&lines).unwrap_err().contains("0 SGIs"));
        let lines: Vec<String> = console(1000.0, 1000.0)
            .into_iter()
            .map(|l| l.replace("extended 40", "extended 0"))
            .collect();
        assert!(run(&lines).unwrap_err().contains("0 slice extensions"));
    }
}
