//! The guest-PMU boot test: el2 with one `pmu-check` VM
//! (`guest-driver/src/bin/pmu-check.rs`) of two vCPUs on one pCPU under
//! `-icount`, where each vCPU's counters must stop while the other runs
//! and QEMU counts instructions exactly. What the console must show is in
//! [`check`].

use std::time::Duration;

use guest_driver::pmucheck::{
    ALL_PASSED, CYCLE_WINDOW, FeaturesLine, Label, MAX_VCPUS, NOT_IMPLEMENTED, PREFIX, event,
    implements,
};

use crate::boottest::{self, BootTest, Check};
use crate::qemu::{self, Machine};

/// The guest this test boots.
pub const GUEST: &str = "pmu-check";

/// What QEMU 7.2's `-cpu max` PMU is, seen from a VM: PMUv3p5 (PMUVer 6),
/// 6 event counters, its interrupt `virt`'s PPI 7 (INTID 23), which el2's
/// VMs have too.
pub const QEMU_MAX_PMU: PmuExpect = PmuExpect {
    version: 6,
    counters: 6,
    intid: pvlock_abi::virt::PMU_INTID,
};

/// What the guest must find.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmuExpect {
    /// ID_AA64DFR0_EL1.PMUVer.
    pub version: u64,
    /// PMCR_EL0.N.
    pub counters: usize,
    /// The DT's PMU interrupt.
    pub intid: u32,
}

/// Two vCPUs on one pCPU, under icount.
const VCPUS: u32 = 2;
const SMP: u32 = 1;

/// Seconds the guest waits for its other vCPU at each check.
const GUEST_TIMEOUT_SECS: u64 = 20;

/// Hard timeout of the boot: a passing run takes about a second.
const TIMEOUT: Duration = Duration::from_secs(180);

/// The PMU boot tests.
pub fn tests() -> Vec<BootTest> {
    let machine = Machine {
        cpu: qemu::normalize_cpu("max,pauth=off"),
        smp: SMP,
        icount: true,
        ..Machine::default()
    };
    vec![boottest::paired_guest_test(
        GUEST,
        VCPUS,
        machine,
        GUEST_TIMEOUT_SECS,
        TIMEOUT,
        Check::Pmu {
            vcpus: VCPUS as usize,
            expect: QEMU_MAX_PMU,
        },
    )]
}

/// pmu-check passed on each of its first `vcpus` vCPUs (at most
/// [`MAX_VCPUS`]): each found `expect`'s PMU and INST_RETIRED in
/// PMCEID0_EL0 (the test runs under icount); every [`Label`] whose event
/// PMCEID0_EL0 has says `ok` exactly once, every other `not implemented`
/// exactly once (QEMU 7.2: chain); the cycle check judged a window with
/// the vCPU descheduled (its `cycle window` line); no check failed; the
/// run ended with [`ALL_PASSED`].
pub fn check(lines: &[&str], vcpus: usize, expect: PmuExpect) -> Result<(), String> {
    let mut problems = Vec::new();
    boottest::guest_verdicts(lines, PREFIX, ALL_PASSED, &mut problems);
    let found: Vec<FeaturesLine> = lines
        .iter()
        .filter_map(|l| FeaturesLine::parse(l))
        .collect();
    for vcpu in 0..vcpus.min(MAX_VCPUS) {
        let features = match found
            .iter()
            .filter(|f| f.vcpu == vcpu)
            .collect::<Vec<_>>()
            .as_slice()
        {
            [line] => **line,
            other => {
                problems.push(format!(
                    "{} feature lines for vcpu {vcpu}, expected 1",
                    other.len()
                ));
                continue;
            }
        };
        let seen = PmuExpect {
            version: features.version,
            counters: features.counters,
            intid: features.intid,
        };
        if seen != expect {
            problems.push(format!("vcpu {vcpu} found {seen:?}, expected {expect:?}"));
        }
        if !implements(features.pmceid0, event::INST_RETIRED) {
            problems.push(format!(
                "vcpu {vcpu}: PMCEID0_EL0 {:#x} has no INST_RETIRED: not under icount?",
                features.pmceid0
            ));
        }
        let count = |text: &str| lines.iter().filter(|l| l.contains(text)).count();
        for label in Label::ALL {
            let implemented = label
                .event()
                .is_none_or(|event| implements(features.pmceid0, event));
            let verdict = if implemented { "ok" } else { NOT_IMPLEMENTED };
            let text = format!("{PREFIX} vcpu {vcpu}: {label}: {verdict}");
            let n = count(&text);
            if n != 1 {
                problems.push(format!("{text:?} {n} times, expected once"));
            }
        }
        let window = format!("{PREFIX} vcpu {vcpu}: {CYCLE_WINDOW}");
        if count(&window) != 1 {
            problems.push(format!(
                "no {window:?} line: the descheduled time went unjudged"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU 7.2 under icount: SW_INCR, INST_RETIRED, CPU_CYCLES.
    const PMCEID0: u64 = 0x2_0101;

    fn passing(vcpus: usize) -> Vec<String> {
        let mut lines = vec![format!("{PREFIX} checks on {vcpus} vCPU(s), timeout=20")];
        for vcpu in 0..vcpus {
            lines.push(
                FeaturesLine {
                    vcpu,
                    version: 6,
                    counters: 6,
                    pmceid0: PMCEID0,
                    intid: 23,
                }
                .to_string(),
            );
            lines.push(format!(
                "{PREFIX} vcpu {vcpu}: {CYCLE_WINDOW} 3141175 cycles in 7721 us, 4548 us of it \
                 descheduled, 1.000 cycles/ns when alone"
            ));
            for label in Label::ALL {
                let verdict = if label == Label::Chain {
                    format!("{NOT_IMPLEMENTED} (no CHAIN)")
                } else {
                    "ok (fine)".into()
                };
                lines.push(format!("{PREFIX} vcpu {vcpu}: {label}: {verdict}"));
            }
        }
        lines.push(ALL_PASSED.into());
        lines
    }

    fn judge(lines: &[String]) -> Result<(), String> {
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        check(&lines, 2, QEMU_MAX_PMU)
    }

    #[test]
    fn a_passing_run_passes() {
        assert_eq!(judge(&passing(2)), Ok(()));
    }

    #[test]
    fn what_fails() {
        // A check not passed, or failed.
        let mut lines = passing(2);
        lines.retain(|l| !l.contains("vcpu 1: overflow interrupt: ok"));
        assert!(judge(&lines).unwrap_err().contains("overflow interrupt"));
        let mut lines = passing(2);
        lines.push(format!("{PREFIX} vcpu 0: cycle counter: FAILED: counted"));
        assert!(judge(&lines).unwrap_err().contains("failed check"));
        // Not under icount: instructions "not implemented" is not enough.
        let lines: Vec<String> = passing(2)
            .into_iter()
            .map(|l| l.replace("0x20101", "0x20001"))
            .collect();
        assert!(judge(&lines).unwrap_err().contains("INST_RETIRED"));
        // A chain that claims to pass on a CPU without CHAIN.
        let lines: Vec<String> = passing(2)
            .into_iter()
            .map(|l| l.replace("chain: not implemented (no CHAIN)", "chain: ok"))
            .collect();
        assert!(
            judge(&lines)
                .unwrap_err()
                .contains("chain: not implemented")
        );
        // Another PMU, the cycle window unjudged, no final line.
        let lines: Vec<String> = passing(2)
            .into_iter()
            .map(|l| l.replace("6 event counters", "4 event counters"))
            .collect();
        assert!(judge(&lines).unwrap_err().contains("expected PmuExpect"));
        let mut lines = passing(2);
        lines.retain(|l| !l.contains("vcpu 0: cycle window"));
        assert!(judge(&lines).unwrap_err().contains("unjudged"));
        let mut lines = passing(2);
        lines.pop();
        assert!(judge(&lines).unwrap_err().contains("all checks passed"));
    }
}
