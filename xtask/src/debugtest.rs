//! The guest-debug boot test: el2 with one `debug-check` VM
//! (`guest-driver/src/bin/debug-check.rs`) of two vCPUs on one pCPU, so
//! that each vCPU's breakpoints, watchpoints and step state must follow
//! it through every switch. What the console must show is in [`check`].

use std::time::Duration;

use guest_driver::debugcheck::{ALL_PASSED, Features, FeaturesLine, Label, MAX_VCPUS, PREFIX};

use crate::boottest::{self, BootTest, Check};
use crate::qemu::{self, Machine};

/// The guest this test boots.
pub const GUEST: &str = "debug-check";

/// The CPU model: QEMU 7.2's `max` has [`QEMU_MAX_DEBUG`].
const CPU: &str = "max,pauth=off";

/// What QEMU 7.2's `-cpu max` ID_AA64DFR0_EL1 says (the Cortex-A57's
/// comparators, Armv8.4 debug): what the guest must read, unchanged.
pub const QEMU_MAX_DEBUG: Features = Features {
    breakpoints: 6,
    watchpoints: 4,
    version: 9,
};

/// Two vCPUs (each with its own addresses), one pCPU (so a vCPU's check
/// after the other ran is a check after a switch): each is preempted at
/// its slices' ends.
const VCPUS: u32 = 2;
const SMP: u32 = 1;

/// Seconds the guest waits for its other vCPU at each check.
const GUEST_TIMEOUT_SECS: u64 = 20;

/// Hard timeout of the boot: a passing run takes under a second.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The debug boot tests.
pub fn tests() -> Vec<BootTest> {
    let machine = Machine {
        cpu: qemu::normalize_cpu(CPU),
        smp: SMP,
        ..Machine::default()
    };
    vec![boottest::paired_guest_test(
        GUEST,
        VCPUS,
        machine,
        GUEST_TIMEOUT_SECS,
        TIMEOUT,
        Check::Debug {
            vcpus: VCPUS as usize,
            features: QEMU_MAX_DEBUG,
        },
    )]
}

/// debug-check passed on each of its first `vcpus` vCPUs (at most
/// [`MAX_VCPUS`]): each read `features` from ID_AA64DFR0_EL1, and every
/// check [`Label::all`] lists for them says `ok` exactly once for it; no
/// check failed; the run ended with [`ALL_PASSED`].
pub fn check(lines: &[&str], vcpus: usize, features: Features) -> Result<(), String> {
    let mut problems = Vec::new();
    boottest::guest_verdicts(lines, PREFIX, ALL_PASSED, &mut problems);
    let found: Vec<FeaturesLine> = lines
        .iter()
        .filter_map(|l| FeaturesLine::parse(l))
        .collect();
    for vcpu in 0..vcpus.min(MAX_VCPUS) {
        match found
            .iter()
            .filter(|f| f.vcpu == vcpu)
            .collect::<Vec<_>>()
            .as_slice()
        {
            [line] if line.features == features => {}
            [line] => problems.push(format!(
                "vcpu {vcpu} read {:?} from ID_AA64DFR0_EL1, expected {features:?}",
                line.features
            )),
            other => problems.push(format!(
                "{} feature lines for vcpu {vcpu}, expected 1",
                other.len()
            )),
        }
        let missing: Vec<String> = Label::all(features)
            .filter_map(|label| {
                let text = format!("{PREFIX} vcpu {vcpu}: {label}: ok");
                let n = lines.iter().filter(|l| l.contains(&text)).count();
                (n != 1).then(|| format!("{label:} ({n} times)"))
            })
            .collect();
        if !missing.is_empty() {
            problems.push(format!(
                "vcpu {vcpu}: check(s) not passed exactly once: {}",
                missing.join(", ")
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

    /// The console of a passing run, as the guest prints it.
    fn passing(vcpus: usize) -> Vec<String> {
        let mut lines = vec![format!("{PREFIX} checks on {vcpus} vCPU(s), timeout=20")];
        for vcpu in 0..vcpus {
            lines.push(
                FeaturesLine {
                    vcpu,
                    features: QEMU_MAX_DEBUG,
                }
                .to_string(),
            );
            for label in Label::all(QEMU_MAX_DEBUG) {
                lines.push(format!("{PREFIX} vcpu {vcpu}: {label}: ok (checked)"));
            }
        }
        lines.push(ALL_PASSED.into());
        lines
    }

    fn judge(lines: &[String]) -> Result<(), String> {
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        check(&lines, 2, QEMU_MAX_DEBUG)
    }

    #[test]
    fn a_passing_run_passes() {
        assert_eq!(judge(&passing(2)), Ok(()));
    }

    #[test]
    fn a_missing_failed_or_doubled_check_fails() {
        let mut lines = passing(2);
        lines.retain(|l| !l.contains("vcpu 1: watchpoint 3: ok"));
        let why = judge(&lines).unwrap_err();
        assert!(
            why.contains("vcpu 1") && why.contains("watchpoint 3"),
            "{why}"
        );

        let mut lines = passing(2);
        lines.push(format!(
            "{PREFIX} vcpu 0: step hvc: FAILED: no software step exception"
        ));
        assert!(judge(&lines).unwrap_err().contains("failed check"));

        let mut lines = passing(2);
        lines.push(format!("{PREFIX} vcpu 0: breakpoint 2: ok (again)"));
        assert!(
            judge(&lines)
                .unwrap_err()
                .contains("breakpoint 2 (2 times)")
        );

        // A guest that saw other counts, or only one vCPU.
        let lines: Vec<String> = passing(2)
            .into_iter()
            .map(|l| l.replace("6 breakpoints", "2 breakpoints"))
            .collect();
        assert!(judge(&lines).unwrap_err().contains("vcpu 0 read"));
        assert!(judge(&passing(1)).is_err());
        let mut lines = passing(2);
        lines.pop();
        assert!(judge(&lines).unwrap_err().contains("all checks passed"));
    }
}
