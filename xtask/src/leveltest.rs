//! The level-sensitive interrupt boot tests: the `level-check` guest
//! (`guest-driver/src/bin/level-check.rs`) under el2 with two vCPUs on one
//! pCPU (vCPU 0's waits leave the pCPU to vCPU 1) and three on two (vCPU
//! 0 comes back from its waits on either pCPU), and directly on QEMU,
//! whose own GICv3 is the reference. What the console must show is in
//! [`check`].

use std::time::Duration;

use guest_driver::levelcheck::{ALL_PASSED, Label, PREFIX, Settings};

use crate::boottest::{BootTest, Check, Kernel, Outcome, check_verdicts, parse_vcpu_summary};
use crate::qemu::{self, Machine};
use crate::vm::VmConfig;

/// The guest these tests boot.
pub const GUEST: &str = "level-check";

/// Seconds each guest wait may take before it reports a failure: far
/// above the milliseconds a wait takes, short enough that a stuck check
/// leaves the guest time to report the rest before [`TIMEOUT`].
const GUEST_TIMEOUT_SECS: u64 = 10;

/// Hard timeout of one boot. A passing run takes about a second.
const TIMEOUT: Duration = Duration::from_secs(180);

/// (vCPUs, pCPUs) of the tests under el2: two vCPUs on one pCPU, where
/// vCPU 0 is descheduled whenever it waits and vCPU 1 runs; three on
/// two, where the woken vCPU 0 runs on whichever pCPU switches first.
const SHAPES: [(u32, u32); 2] = [(2, 1), (3, 2)];

/// CPUs of the bare test: vCPU 0 and its helper.
const BARE_SMP: u32 = 2;

/// What a test expects of el2's summary line for vCPU 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vcpu0 {
    /// It blocked in WFI at least this many times.
    pub min_blocks: u64,
    /// It moved to another pCPU at least once.
    pub migrated: bool,
}

/// The level-check boot tests.
pub fn tests() -> Vec<BootTest> {
    let mut tests: Vec<BootTest> = SHAPES
        .into_iter()
        .map(|(vcpus, smp)| el2_test(vcpus, smp))
        .collect();
    tests.push(bare_test());
    tests
}

fn settings() -> Settings {
    Settings {
        timeout_secs: GUEST_TIMEOUT_SECS,
        ..Settings::default()
    }
}

fn machine(smp: u32, virtualization: bool) -> Machine {
    Machine {
        cpu: qemu::normalize_cpu("max,pauth=off"),
        smp,
        virtualization,
        ..Machine::default()
    }
}

fn el2_test(vcpus: u32, smp: u32) -> BootTest {
    let machine = machine(smp, true);
    let settings = settings();
    let vm = VmConfig {
        guest: GUEST.into(),
        ..VmConfig::smp_demo(vcpus, &settings.to_string(), 1)
    };
    // Each descheduled round waits twice; the wait after the line went
    // down can only end with vCPU 1's SGI, so it blocks at least once.
    let vcpu0 = Vcpu0 {
        min_blocks: Label::ALL
            .iter()
            .filter(|l| matches!(l, Label::Descheduled(_)))
            .count() as u64
            * settings.rounds,
        migrated: smp > 1,
    };
    BootTest {
        name: format!("vm {GUEST} vcpus={vcpus} {}", machine.describe()),
        timeout: TIMEOUT,
        outcome: Outcome::CleanExit,
        checks: vec![
            Check::Banner,
            Check::SmpOnline(smp),
            Check::Level { vcpu0: Some(vcpu0) },
            Check::HypervisorSummary {
                vcpus_per_vm: vec![vcpus as usize],
                time_sliced: false,
            },
        ],
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![vm],
        machine,
    }
}

fn bare_test() -> BootTest {
    let machine = Machine {
        append: Some(settings().to_string()),
        ..machine(BARE_SMP, false)
    };
    BootTest {
        name: format!("guest {GUEST} bare {}", machine.describe()),
        timeout: TIMEOUT,
        outcome: Outcome::CleanExit,
        checks: vec![Check::Level { vcpu0: None }],
        dt_edit: None,
        kernel: Kernel::Guest(GUEST),
        vms: Vec::new(),
        machine,
    }
}

/// level-check passed: no `FAILED` line, every [`Label`] `ok` exactly
/// once, `level-check: all checks passed` once. Under el2 (`vcpu0`), its
/// summary line for vCPU 0 shows it blocked at least `min_blocks` times
/// (it did leave its pCPU in the descheduled checks) and, if `migrated`,
/// moved between pCPUs at least once.
pub fn check(lines: &[&str], vcpu0: Option<Vcpu0>) -> Result<(), String> {
    let mut problems = check_verdicts(
        lines,
        PREFIX,
        Label::ALL.iter().map(|label| format!("{label}: ok")),
        ALL_PASSED,
    );
    if let Some(expect) = vcpu0 {
        match lines
            .iter()
            .filter_map(|l| parse_vcpu_summary(l))
            .find(|s| s.vm == 0 && s.vcpu == 0)
        {
            None => problems.push("no el2 summary line for vm0/vcpu0".into()),
            Some(s) => {
                match s.blocks {
                    Some(b) if b >= expect.min_blocks => {}
                    other => problems.push(format!(
                        "vcpu 0 blocked {other:?} times, expected at least {} (one per \
                         descheduled round)",
                        expect.min_blocks
                    )),
                }
                if expect.migrated && s.migrations.is_none_or(|m| m == 0) {
                    problems.push(format!(
                        "vcpu 0 never moved to another pCPU (migrations {:?})",
                        s.migrations
                    ));
                }
            }
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
    use crate::boottest::judge;

    fn run(console: &str, code: i32) -> qemu::Outcome {
        crate::boottest::exited(console, code)
    }

    /// What a passing boot of `vcpus` vCPUs on `smp` pCPUs prints, vCPU 0
    /// blocked `blocks` times and migrated `migrations` times.
    fn console(vcpus: usize, smp: u32, blocks: u64, migrations: u64) -> String {
        let mut lines = vec![
            "el2: pvlock hypervisor v0.1.0 at EL2 on linux,dummy-virt".to_string(),
            format!("smp: {smp} CPUs online"),
            format!(
                "{PREFIX} {vcpus} vCPUs, virtual timer INTID 27, UART INTID 33, counter \
                 62500000 Hz"
            ),
        ];
        for label in Label::ALL {
            lines.push(format!("{label}: ok (fine)"));
        }
        lines.push(ALL_PASSED.into());
        lines.push("el2: vm vm0 powered off".into());
        lines.push("el2: all VMs powered off".into());
        for vcpu in 0..vcpus {
            let (blocks, migrations) = if vcpu == 0 {
                (blocks, migrations)
            } else {
                (0, 0)
            };
            lines.push(format!(
                "summary:   vm0/vcpu{vcpu}: run 88.7 ms steal 45.8 ms blocked 59.3 ms in 206 \
                 preempted 4 blocks {blocks} yields 0 yielded-to 0 migrations {migrations} \
                 extended 2"
            ));
        }
        lines.push("el2: powering off".into());
        lines.join("\r\n") + "\r\n"
    }

    fn test_named(name: &str) -> BootTest {
        tests()
            .into_iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no test {name:?}"))
    }

    const DESCHEDULED: &str = "vm level-check vcpus=2 max,pauth=off smp=1";
    const MIGRATED: &str = "vm level-check vcpus=3 max,pauth=off smp=2";
    const BARE: &str = "guest level-check bare max,pauth=off smp=2";

    #[test]
    fn the_tests_are_the_two_shapes_and_bare_qemu() {
        let all = tests();
        let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, [DESCHEDULED, MIGRATED, BARE]);
        for t in &all[..2] {
            assert_eq!(t.kernel, Kernel::El2);
            assert_eq!(t.vms.len(), 1);
            assert_eq!(t.vms[0].guest, GUEST);
            assert_eq!(t.vms[0].bootargs, "rounds=4 timeout=10");
            assert!(t.machine.virtualization);
        }
        let bare = &all[2];
        assert_eq!(bare.kernel, Kernel::Guest(GUEST));
        assert!(!bare.machine.virtualization);
        assert_eq!(bare.machine.append.as_deref(), Some("rounds=4 timeout=10"));
        assert!(all.iter().all(|t| t.outcome == Outcome::CleanExit));
    }

    #[test]
    fn a_passing_run_passes() {
        let t = test_named(DESCHEDULED);
        assert_eq!(judge(&t, &run(&console(2, 1, 12, 0), 0)), Ok(()));
        let t = test_named(MIGRATED);
        assert_eq!(judge(&t, &run(&console(3, 2, 40, 3), 0)), Ok(()));
        let t = test_named(BARE);
        let bare: String = console(2, 2, 0, 0)
            .lines()
            .filter(|l| l.starts_with(PREFIX))
            .map(|l| format!("{l}\r\n"))
            .collect();
        assert_eq!(judge(&t, &run(&bare, 0)), Ok(()));
    }

    #[test]
    fn every_failure_is_caught() {
        let t = test_named(MIGRATED);
        let good = console(3, 2, 40, 3);
        // A check that failed (main before the fix).
        let failed = good.replace(
            "level-check: disable: ok (fine)",
            "level-check: disable: FAILED: GICR_ISPENDR0 reads 1 after the line went down",
        );
        let why = check(&failed.lines().collect::<Vec<_>>(), Some(expect(&t))).unwrap_err();
        assert!(why.contains("1 failed check(s)"), "{why}");
        assert!(
            why.contains("\"level-check: disable: ok\" 0 times"),
            "{why}"
        );
        // A check missing, or passed twice.
        let missing = good.replace("level-check: uart: ok (fine)\r\n", "");
        assert!(judge(&t, &run(&missing, 0)).is_err());
        let twice = good.replace(
            "level-check: again: ok (fine)",
            "level-check: again: ok (fine)\r\nlevel-check: again: ok (fine)",
        );
        assert!(judge(&t, &run(&twice, 0)).is_err());
        // No final line.
        assert!(judge(&t, &run(&good.replace(ALL_PASSED, "bye"), 0)).is_err());
        // vCPU 0 never left its pCPU, or never moved.
        let why = check(
            &console(3, 2, 5, 3).lines().collect::<Vec<_>>(),
            Some(expect(&t)),
        )
        .unwrap_err();
        assert!(why.contains("vcpu 0 blocked Some(5) times"), "{why}");
        let why = check(
            &console(3, 2, 40, 0).lines().collect::<Vec<_>>(),
            Some(expect(&t)),
        )
        .unwrap_err();
        assert!(why.contains("never moved"), "{why}");
        // One pCPU: no migration asked for.
        let t = test_named(DESCHEDULED);
        assert_eq!(judge(&t, &run(&console(2, 1, 12, 0), 0)), Ok(()));
        // A guest that crashed.
        let crashed = good.replace(ALL_PASSED, "GUEST FATAL: level-check: 1 check(s) failed");
        assert!(judge(&t, &run(&crashed, 0)).is_err());
    }

    /// The vCPU 0 expectation of an el2 test.
    fn expect(t: &BootTest) -> Vcpu0 {
        t.checks
            .iter()
            .find_map(|c| match c {
                Check::Level { vcpu0 } => *vcpu0,
                _ => None,
            })
            .expect("an el2 test judges vCPU 0")
    }

    #[test]
    fn vcpu0_must_block_once_per_descheduled_round() {
        let t = test_named(DESCHEDULED);
        assert_eq!(
            expect(&t),
            Vcpu0 {
                min_blocks: 3 * guest_driver::levelcheck::DEFAULT_ROUNDS,
                migrated: false
            }
        );
        assert!(expect(&test_named(MIGRATED)).migrated);
    }
}
