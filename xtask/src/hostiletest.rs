//! The hostile-guest boot test: el2 runs the `hostile` guest
//! (`guest-driver/src/bin/hostile.rs`) as vm0, which attacks it the way
//! docs/security.md's threat model allows and checks every answer, beside a
//! well-behaved smp-demo VM that must finish its work as if nothing
//! happened. What the console must show is in [`check`] and the test's
//! other checks.

use std::time::Duration;

use guest_driver::hostile::{self, ConsoleProblem, Storm};
use pvlock_abi::pvlock::Variant;

use crate::boottest::{self, BootTest, Check, Kernel, Outcome};
use crate::irqtest::parse_vgic_summary;
use crate::qemu::{self, Machine};
use crate::vm::{PvLock, VmConfig};

/// The guest the test boots.
pub const GUEST: &str = "hostile";

/// vCPUs of each VM: the hostile guest's races and cross-vCPU checks have
/// partners, and both VMs' 8 vCPUs overcommit the 2 pCPUs.
const VCPUS: u32 = 4;
/// pCPUs: the 2-core CI machine kind.
const SMP: u32 = 2;
/// Seconds the hostile guest waits for its other vCPUs at each step.
const GUEST_TIMEOUT_SECS: u64 = 30;

/// Hard timeout of the boot. A passing run takes a few seconds; the margin
/// is for slow machines and for a failing guest whose steps time out.
const TIMEOUT: Duration = Duration::from_secs(180);

/// The hostile boot tests.
pub fn tests() -> Vec<BootTest> {
    vec![hostile_beside_smp_demo()]
}

/// vm0: the hostile guest with openEuler's PV-lock (the guest's
/// documented answers are those of `pv-lock = "openeuler"` and el2's other
/// defaults); vm1: smp-demo with the bootargs of the other VM tests.
fn hostile_beside_smp_demo() -> BootTest {
    let machine = Machine {
        cpu: qemu::normalize_cpu("max"),
        smp: SMP,
        ..Machine::default()
    };
    let hostile = VmConfig {
        guest: GUEST.into(),
        pv_lock: Some(PvLock::Variant(Variant::OpenEuler)),
        ..VmConfig::smp_demo(VCPUS, &format!("timeout={GUEST_TIMEOUT_SECS}"), 1)
    };
    let good = VmConfig::smp_demo(VCPUS, boottest::DEMO_BOOTARGS, 1);
    let mut checks = vec![
        Check::Banner,
        Check::SmpOnline(SMP),
        Check::Hostile { vm: 0 },
    ];
    checks.extend(boottest::demo_checks(
        VCPUS as usize,
        boottest::DEMO_ROUNDS,
        1,
    ));
    // Not time-sliced: the hostile guest's vCPUs wait in WFI much of the
    // time rather than compete for the pCPUs.
    checks.push(Check::HypervisorSummary {
        vcpus_per_vm: vec![VCPUS as usize; 2],
        time_sliced: false,
    });
    BootTest {
        name: format!(
            "vm {GUEST} beside smp-demo vcpus={VCPUS} {}",
            machine.describe()
        ),
        timeout: TIMEOUT,
        outcome: Outcome::CleanExit,
        checks,
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![hostile, good],
        machine,
    }
}

/// What el2's end-of-run summary counted for one VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmExits {
    /// HVC exits.
    pub hvc: u64,
    /// WFI exits.
    pub wfi: u64,
    /// ICC_SGI1R_EL1 writes (the `summary:   vgic:` line).
    pub sgis: u64,
}

/// Parses el2's summary of VM `vm` (`summary: vm vmN: ... exits: hvc=H
/// ... wfi=W ...` and the `summary:   vgic: sgis S ...` line after it).
pub fn parse_vm_exits(lines: &[&str], vm: usize) -> Option<VmExits> {
    let header = format!("summary: vm vm{vm}: ");
    let at = lines.iter().position(|l| l.contains(&header))?;
    let exits = &lines[at][lines[at].find("exits:")? + "exits:".len()..];
    let count = |class: &str| -> Option<u64> {
        exits
            .split_whitespace()
            .find_map(|word| word.strip_prefix(class)?.strip_prefix('='))
            .map_or(Some(0), |n| n.parse().ok())
    };
    let vgic = lines[at + 1..]
        .iter()
        .take_while(|l| !l.contains("summary: vm "))
        .find_map(|l| parse_vgic_summary(l))?;
    Some(VmExits {
        hvc: count("hvc")?,
        wfi: count("wfi")?,
        sgis: vgic.sgis,
    })
}

/// The hostile guest in VM `vm` passed, and el2 agrees: no attempt
/// failed, every attempt (`hostile::labels`) answered `ok` exactly once,
/// the final `hostile: all N attempts answered as documented` line with N
/// right ([`hostile::judge_console`]); el2 counted at least the storms'
/// HVCs and WFIs and exactly the SGIs of the SGI storm (the guest sends no
/// other).
pub fn check(lines: &[&str], vm: usize) -> Result<(), String> {
    let mut problems = Vec::new();
    hostile::judge_console(lines, |problem: ConsoleProblem| {
        problems.push(problem.to_string())
    });
    match parse_vm_exits(lines, vm) {
        None => problems.push(format!("no el2 summary (exits and vgic) for vm{vm}")),
        Some(exits) => {
            if exits.hvc < Storm::Hvc.count() {
                problems.push(format!(
                    "el2 counted {} HVC exits of vm{vm}, fewer than the {} of the storm",
                    exits.hvc,
                    Storm::Hvc.count()
                ));
            }
            if exits.wfi < Storm::Wfi.count() {
                problems.push(format!(
                    "el2 counted {} WFI exits of vm{vm}, fewer than the {} of the storm",
                    exits.wfi,
                    Storm::Wfi.count()
                ));
            }
            if exits.sgis != Storm::Sgi.count() {
                problems.push(format!(
                    "el2 counted {} SGIs of vm{vm}, the storm sent {}",
                    exits.sgis,
                    Storm::Sgi.count()
                ));
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
    use crate::qemu::{FATAL_MARKER, GUEST_FATAL_MARKER};
    use guest_driver::demo::{Progress, PsciCheck, PsciResult, Summary};
    use guest_driver::hostile::{AllAnswered, Label, Outcome as Attempt, ResultLine};
    use guest_driver::mpidr::Mpidr;

    fn run(console: &str, code: i32) -> qemu::Outcome {
        crate::boottest::exited(console, code)
    }

    /// What a passing run prints: the hostile guest's lines as vm0, a
    /// passing smp-demo as vm1, and el2's summary with vm0's exits.
    fn console() -> String {
        let mut lines = vec![
            "el2: pvlock hypervisor v0.1.0 at EL2 on linux,dummy-virt".to_string(),
            format!("smp: {SMP} CPUs online"),
            "[vm0] hostile: 4 vCPUs, 64 MiB of RAM at 0x40000000, 114 attempts".into(),
        ];
        let mut attempts = 0;
        for label in hostile::labels() {
            attempts += 1;
            let outcome = Attempt::ok(guest_driver::note!("as documented"));
            lines.push(format!(
                "[vm0] {}",
                ResultLine {
                    label,
                    outcome: &outcome
                }
            ));
        }
        lines.push(format!("[vm0] {}", AllAnswered { attempts }));
        let vcpus = VCPUS as usize;
        lines.push(format!(
            "[vm1] {} (mpidr 0.255.0.0)",
            PsciResult::pass(PsciCheck::UnknownMpidr)
        ));
        lines.push(format!(
            "[vm1] {} (vcpu 0)",
            PsciResult::pass(PsciCheck::BootCpuAlreadyOn)
        ));
        for vcpu in 1..vcpus {
            for check in [
                PsciCheck::RunningCpuAlreadyOn,
                PsciCheck::AffinityOn,
                PsciCheck::AffinityOff,
            ] {
                lines.push(format!("[vm1] {} (vcpu {vcpu})", PsciResult::pass(check)));
            }
        }
        for round in 1..=boottest::DEMO_ROUNDS {
            for vcpu in 0..vcpus {
                let progress = Progress {
                    vcpu,
                    mpidr: Mpidr::from_raw(vcpu as u64),
                    round,
                    rounds: boottest::DEMO_ROUNDS,
                };
                lines.push(format!("[vm1] {progress} at 1.000 ms"));
            }
        }
        lines.push(format!("[vm1] {}", Summary { vcpus }));
        lines.push("el2: vm vm1 powered off".into());
        lines.push("el2: vm vm0 powered off".into());
        lines.push("el2: all VMs powered off".into());
        for vm in 0..2 {
            let (hvc, wfi, sgis) = if vm == 0 {
                (101_095, 11_479, 10_000)
            } else {
                (40, 12, 0)
            };
            lines.push(format!(
                "summary: vm vm{vm}: 4 vCPUs, resets 0, exits: hvc={hvc} smc=5 wfi={wfi} \
                 data-abort=21 sysreg=23 irq=1083"
            ));
            lines.push(
                "summary:   wait/yield: wfi 787 wfit 0 wfe 0 wfet 0 sampled-spins 0 on-spin 0 attempts 0 \
                 yields 0 (round-robin 0 irqs-masked 0 lock-holder 0 pending-irq 0 wait-ended 0) pv-yield \
                 0/1 kicks 2"
                    .into(),
            );
            lines.push(format!(
                "summary:   vgic: sgis {sgis} timer 554 spi 0 maintenance 0"
            ));
            for vcpu in 0..vcpus {
                lines.push(format!(
                    "summary:   vm{vm}/vcpu{vcpu}: run 715.3 ms steal 24.6 ms blocked 757.8 ms \
                     in 156 preempted 6 blocks 148 yields 1 yielded-to 2 migrations 5"
                ));
            }
        }
        lines.push("el2: powering off".into());
        lines.join("\r\n") + "\r\n"
    }

    fn the_test() -> BootTest {
        let mut all = tests();
        assert_eq!(all.len(), 1);
        all.remove(0)
    }

    #[test]
    fn the_test_boots_the_hostile_guest_beside_smp_demo() {
        let t = the_test();
        assert_eq!(
            t.name,
            "vm hostile beside smp-demo vcpus=4 max,pauth=off smp=2"
        );
        assert_eq!(t.kernel, Kernel::El2);
        assert_eq!(t.outcome, Outcome::CleanExit);
        assert_eq!(t.vms.len(), 2);
        assert_eq!(t.vms[0].guest, GUEST);
        assert_eq!(t.vms[0].vcpus, 4);
        assert_eq!(t.vms[0].pv_lock, Some(PvLock::Variant(Variant::OpenEuler)));
        assert_eq!(t.vms[0].bootargs, "timeout=30");
        assert_eq!(t.vms[1].guest, "smp-demo");
        assert_eq!(t.vms[1].bootargs, boottest::DEMO_BOOTARGS);
        assert!(t.checks.contains(&Check::Hostile { vm: 0 }));
        assert!(t.checks.contains(&Check::HypervisorSummary {
            vcpus_per_vm: vec![4, 4],
            time_sliced: false
        }));
        assert!(crate::guests::GUESTS.contains(&GUEST));
        assert!(t.name.contains("hostile"), "--filter hostile selects it");
    }

    #[test]
    fn el2_summaries_parse() {
        let text = console();
        let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
        assert_eq!(
            parse_vm_exits(&lines, 0),
            Some(VmExits {
                hvc: 101_095,
                wfi: 11_479,
                sgis: 10_000
            })
        );
        assert_eq!(
            parse_vm_exits(&lines, 1),
            Some(VmExits {
                hvc: 40,
                wfi: 12,
                sgis: 0
            })
        );
        assert_eq!(parse_vm_exits(&lines, 2), None);
        // A class el2 did not see is not printed: zero.
        let no_wfi = [
            "summary: vm vm0: 1 vCPUs, resets 0, exits: hvc=3",
            "summary:   vgic: sgis 0 timer 0 spi 0 maintenance 0",
        ];
        assert_eq!(
            parse_vm_exits(&no_wfi, 0),
            Some(VmExits {
                hvc: 3,
                wfi: 0,
                sgis: 0
            })
        );
    }

    #[test]
    fn a_passing_console_passes() {
        assert_eq!(judge(&the_test(), &run(&console(), 0)), Ok(()));
    }

    #[test]
    fn broken_consoles_fail_and_say_why() {
        let t = the_test();
        let good = console();
        let fails = |console: &str, code: i32, why: &str| {
            let err = judge(&t, &run(console, code)).unwrap_err();
            assert!(err.contains(why), "{why:?} not in {err:?}");
        };
        // An attempt answered otherwise than documented, and the guest's
        // fatal line that follows.
        let ok = ResultLine {
            label: Label::Storm(Storm::Wfi),
            outcome: &Attempt::ok(guest_driver::note!("as documented")),
        }
        .to_string();
        let failed = ResultLine {
            label: Label::Storm(Storm::Wfi),
            outcome: &Attempt::failed(guest_driver::note!("5 WFIs were still blocked")),
        }
        .to_string();
        let broken = good.replace(&ok, &failed);
        let lines: Vec<&str> = broken.lines().collect();
        let err = check(&lines, 0).unwrap_err();
        assert!(err.contains("an attempt failed"), "{err}");
        assert!(err.contains("\"hostile: 10000 WFIs: ok\" 0 times"), "{err}");
        let crashed = broken.replace(
            &AllAnswered {
                attempts: hostile::labels().count(),
            }
            .to_string(),
            "GUEST FATAL: hostile: 1 of 114 attempts not answered as documented",
        );
        fails(&crashed, 0, GUEST_FATAL_MARKER);
        // An attempt missing, or reported twice.
        fails(
            &good.replace(&ok, ""),
            0,
            "\"hostile: 10000 WFIs: ok\" 0 times",
        );
        fails(
            &good.replace(&ok, &format!("{ok}\r\n{ok}")),
            0,
            "\"hostile: 10000 WFIs: ok\" 2 times",
        );
        // No final line, or a wrong count.
        let all = AllAnswered {
            attempts: hostile::labels().count(),
        }
        .to_string();
        fails(&good.replace(&all, ""), 0, "0 \"hostile: all N attempts");
        fails(
            &good.replace(&all, &AllAnswered { attempts: 3 }.to_string()),
            0,
            "the guest counted 3 attempts",
        );
        // el2 did not count the storms.
        fails(
            &good.replace("sgis 10000", "sgis 9999"),
            0,
            "el2 counted 9999 SGIs of vm0, the storm sent 10000",
        );
        fails(
            &good.replace("hvc=101095", "hvc=99999"),
            0,
            "el2 counted 99999 HVC exits of vm0",
        );
        fails(
            &good.replace("wfi=11479", "wfi=5"),
            0,
            "el2 counted 5 WFI exits of vm0",
        );
        // The well-behaved VM did not finish its work.
        fails(
            &good.replace("vcpu 2 mpidr 0.0.0.2 round 3/3", "vcpu 2 stalled"),
            0,
            "vcpu 2: rounds [3]",
        );
        fails(
            &good.replace(&Summary { vcpus: 4 }.to_string(), "smp-demo: gave up"),
            0,
            "0 lines contain",
        );
        // el2 crashed, printed no summary for a VM, or QEMU failed.
        fails(&format!("{good}EL2 FATAL: oops\r\n"), 0, FATAL_MARKER);
        fails(
            &good.replace("summary:   vm1/vcpu3:", "summary:   vm1/vcpu9:"),
            0,
            "no summary line for vm1/vcpu3",
        );
        fails(&good, 1, "status 1");
    }
}
