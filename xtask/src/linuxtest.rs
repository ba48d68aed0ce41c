//! The stock-Linux boot tests: Debian's arm64 cloud kernel with the busybox
//! initramfs of [`crate::linux`], as VMs of the hypervisor on QEMU with
//! `-cpu max,pauth=off`. What a guest must show is in [`LinuxExpect`].

use std::path::Path;
use std::time::Duration;

use pvlinux::lines::PerfResult;

use crate::boottest::{BootTest, Check, Kernel, Outcome};
use crate::linux::{self, INIT_BANNER, INIT_DONE, INIT_PROMPT, INIT_REBOOTING, KERNEL_TROUBLE};
use crate::qemu::{Machine, Script, Step};
use crate::vm::VmConfig;

/// What the kernel prints, once per boot of each VM, when it finds the
/// hypervisor (../shared/docs/ENVIRONMENT.md): PSCI 1.1, SMCCC 1.1, the KVM
/// vendor services and PV stolen time.
pub const KERNEL_LINES: [&str; 4] = [
    "PSCIv1.1 detected in firmware",
    "SMC Calling Convention v1.1",
    "smccc: KVM: hypervisor services detected",
    "arm-pv: using stolen time PV",
];

/// What the kernel prints once per boot when it finds the PMU the VM's
/// device tree describes (el2::trap::pmu): the PMUv3 driver, its name
/// `armv8_pmuv3` followed by `_0` on newer kernels.
pub const PMU_LINE: &str = "hw perfevents: enabled with armv8_pmuv3";

/// Time for one Linux boot test. A guest reaches init in 3-10 s on the
/// 2-core CI machine kind (MTTCG; slower overcommitted and with two VMs);
/// the margin only has to catch hangs.
const TIMEOUT: Duration = Duration::from_secs(240);
/// How long the soak test keeps every vCPU busy (issue: "for a minute").
pub const SOAK_SECS: u32 = 60;

/// What the consoles of a Linux boot test must show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinuxExpect {
    /// How many Linux VMs run.
    pub vms: usize,
    /// vCPUs per VM.
    pub vcpus: usize,
    /// More vCPUs than pCPUs: every VM's `/proc/stat` shows stolen time.
    pub overcommitted: bool,
    /// Each VM reboots once (`reboot -f`) and boots again.
    pub reboots: bool,
    /// The line typed on the console for `/init` to read back
    /// ([`console_script`]).
    pub input: Option<&'static str>,
    /// VMs running something else beside them (they power off too).
    pub other_vms: usize,
}

/// The line the console-input test types.
pub const TYPED_LINE: &str = "hello from the console";

/// The Linux boot tests, for the guest cached in `dir` ([`linux::obtain`]
/// fetches it before they run).
pub fn tests(dir: &Path) -> Vec<BootTest> {
    let image = dir.join(linux::IMAGE_FILE).display().to_string();
    let initrd = dir.join(linux::INITRD_FILE);
    let vm = |vcpus: u32, count: u32, extra: &str| VmConfig {
        guest: image.clone(),
        initrd: Some(initrd.clone()),
        memory: linux::VM_MEMORY,
        bootargs: format!("{} {extra}", linux::BOOTARGS)
            .trim_end()
            .to_string(),
        ..VmConfig::smp_demo(vcpus, "", count)
    };
    let machine = |smp: u32| Machine {
        cpu: crate::qemu::normalize_cpu("max,pauth=off"),
        smp,
        ..Machine::default()
    };
    vec![
        linux_test("vcpus=1", machine(1), vm(1, 1, ""), false),
        linux_test("vcpus=4", machine(2), vm(4, 1, ""), false),
        linux_test("2 VMs vcpus=2", machine(2), vm(2, 2, ""), false),
        linux_test(
            "reboot vcpus=2",
            machine(2),
            vm(2, 1, "lgtest=reboot"),
            true,
        ),
        linux_test(
            "console input vcpus=2",
            machine(2),
            vm(2, 1, "lgtest=input"),
            false,
        ),
        linux_test(
            &format!("soak {SOAK_SECS} s vcpus=4"),
            machine(2),
            vm(4, 1, &format!("lgbusy={SOAK_SECS}")),
            false,
        ),
    ]
}

fn linux_test(name: &str, machine: Machine, vm: VmConfig, reboots: bool) -> BootTest {
    let vms = vm.count as usize;
    let vcpus = vm.vcpus as usize;
    let overcommitted = vms * vcpus > machine.smp as usize;
    let input = vm.bootargs.contains("lgtest=input").then_some(TYPED_LINE);
    BootTest {
        name: format!("linux {name} {}", machine.describe()),
        timeout: TIMEOUT,
        outcome: Outcome::CleanExit,
        checks: vec![
            Check::Banner,
            Check::SmpOnline(machine.smp),
            Check::Linux(LinuxExpect {
                vms,
                vcpus,
                overcommitted,
                reboots,
                input,
                other_vms: 0,
            }),
            Check::HypervisorSummary {
                vcpus_per_vm: vec![vcpus; vms],
                time_sliced: overcommitted,
            },
        ],
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![vm],
        machine,
    }
}

/// What to type on the console of `test`: after `/init`'s prompt, the
/// line of the console-input test (which the guest's tty reads through the
/// UART's receive interrupt).
pub fn console_script(test: &BootTest) -> Option<Script> {
    let expect = test.checks.iter().find_map(|c| match c {
        Check::Linux(expect) => Some(expect),
        _ => None,
    })?;
    let line = expect.input?;
    Some(Script {
        steps: vec![Step {
            wait_for: vec![INIT_PROMPT],
            send: format!("{line}\r"),
        }],
        fail_after: Vec::new(),
    })
}

/// Whether `test` boots the Linux guest (so it must be fetched first).
pub fn needs_guest(test: &BootTest, dir: &Path) -> bool {
    let image = dir.join(linux::IMAGE_FILE).display().to_string();
    test.vms.iter().any(|vm| vm.guest == image)
}

/// Applies [`LinuxExpect`] to the console `lines`.
pub fn check(lines: &[&str], expect: &LinuxExpect) -> Result<(), String> {
    let boots = expect.vms * if expect.reboots { 2 } else { 1 };
    let count = |text: &str| lines.iter().filter(|l| l.contains(text)).count();
    let exactly = |text: &str, n: usize| {
        let seen = count(text);
        if seen == n {
            Ok(())
        } else {
            Err(format!("{seen} lines contain {text:?}, expected {n}"))
        }
    };
    for text in KERNEL_LINES {
        exactly(text, boots)?;
    }
    exactly(PMU_LINE, boots)?;
    exactly(INIT_BANNER, boots)?;
    let online = match expect.vcpus {
        1 => "0".to_string(),
        n => format!("0-{}", n - 1),
    };
    exactly(&format!("linux-guest: cpus online {online}"), boots)?;
    if let Some(trouble) = lines
        .iter()
        .find(|l| KERNEL_TROUBLE.iter().any(|t| l.contains(t)))
    {
        return Err(format!("a kernel complained: {trouble:?}"));
    }
    exactly("linux-guest: kernel warnings 0", expect.vms)?;
    // Stock kernels have no PV-lock driver, whatever el2 offers them.
    exactly(crate::linuxpvtest::PVLOCK_PREFIX, 0)?;
    if let Some(line) = expect.input {
        exactly(&format!("linux-guest: read '{line}'"), expect.vms)?;
    }
    if expect.reboots {
        exactly(INIT_REBOOTING, expect.vms)?;
        exactly("restarting (SYSTEM_RESET)", expect.vms)?;
        exactly("linux-guest: reset count 0x00000000", expect.vms)?;
        exactly("linux-guest: reset count 0x00000001", expect.vms)?;
    } else {
        exactly(INIT_REBOOTING, 0)?;
    }
    let steals: Vec<u64> = lines
        .iter()
        .filter_map(|l| l.split_once("linux-guest: steal ").map(|(_, v)| v))
        .map(|v| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| format!("bad steal value {v:?}"))
        })
        .collect::<Result<_, _>>()?;
    if steals.len() != expect.vms {
        return Err(format!(
            "{} `linux-guest: steal` lines, expected {}",
            steals.len(),
            expect.vms
        ));
    }
    if expect.overcommitted && steals.contains(&0) {
        return Err(format!(
            "overcommitted, yet a guest's /proc/stat shows no stolen time: {steals:?}"
        ));
    }
    // The PMU from user space (`pvlinux perf`): once per VM, advancing.
    let perf: Vec<PerfResult> = lines.iter().filter_map(|l| PerfResult::parse(l)).collect();
    if perf.len() != expect.vms || !perf.iter().all(PerfResult::passed) {
        return Err(format!(
            "`pvlinux: perf` lines {perf:?}, expected {} with the cycle counter advancing",
            expect.vms
        ));
    }
    exactly(INIT_DONE, expect.vms)?;
    exactly("el2: all VMs powered off", 1)?;
    let off = lines
        .iter()
        .filter(|l| l.starts_with("el2: vm ") && l.trim_end().ends_with(" powered off"))
        .count();
    let vms = expect.vms + expect.other_vms;
    if off != vms {
        return Err(format!("{off} VMs powered off, expected {vms}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The console of one VM's boot, as el2 relays it.
    fn boot(prefix: &str, vcpus: usize, reset: u32, steal: u64, last: bool) -> Vec<String> {
        let mut lines: Vec<String> = [
            "[    0.000000] psci: PSCIv1.1 detected in firmware.",
            "[    0.000000] psci: SMC Calling Convention v1.1",
            "[    0.000000] smccc: KVM: hypervisor services detected (0x00010000 0x00000000 \
             0x00000003 0x00000001)",
            "[    0.005348] arm-pv: using stolen time PV",
            "[    0.869763] hw perfevents: enabled with armv8_pmuv3 PMU driver, 7 counters \
             available",
            "[    3.230993] Run /init as init process",
            INIT_BANNER,
        ]
        .iter()
        .map(|l| l.to_string())
        .collect();
        let online = if vcpus == 1 {
            "0".into()
        } else {
            format!("0-{}", vcpus - 1)
        };
        lines.push(format!("linux-guest: cpus online {online}"));
        lines.push(format!("linux-guest: reset count 0x{reset:08x}"));
        if !last {
            lines.push(INIT_REBOOTING.into());
            return lines.into_iter().map(|l| format!("{prefix}{l}")).collect();
        }
        lines.push("pvlinux: perf event=cycles first=2000 second=100002000 ms=100".into());
        lines.push(format!("linux-guest: steal {steal}"));
        lines.push("linux-guest: kernel warnings 0".into());
        lines.push(INIT_DONE.into());
        lines.into_iter().map(|l| format!("{prefix}{l}")).collect()
    }

    fn judge(lines: &[String], expect: &LinuxExpect) -> Result<(), String> {
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        check(&refs, expect)
    }

    fn expect(vms: usize, vcpus: usize, overcommitted: bool, reboots: bool) -> LinuxExpect {
        LinuxExpect {
            vms,
            vcpus,
            overcommitted,
            reboots,
            input: None,
            other_vms: 0,
        }
    }

    #[test]
    fn a_good_overcommitted_boot_passes_and_zero_steal_fails() {
        let mut lines = boot("", 4, 0, 37, true);
        lines.push("el2: vm vm0 powered off".into());
        lines.push("el2: all VMs powered off".into());
        assert_eq!(judge(&lines, &expect(1, 4, true, false)), Ok(()));
        let no_steal: Vec<String> = lines
            .iter()
            .map(|l| l.replace("steal 37", "steal 0"))
            .collect();
        assert!(
            judge(&no_steal, &expect(1, 4, true, false))
                .unwrap_err()
                .contains("no stolen time")
        );
        // Not overcommitted, zero steal is fine.
        assert_eq!(judge(&no_steal, &expect(1, 4, false, false)), Ok(()));
        // Fewer CPUs online than vCPUs fails.
        assert!(judge(&lines, &expect(1, 8, true, false)).is_err());
    }

    #[test]
    fn every_kernel_line_and_the_power_off_are_required() {
        let mut good = boot("", 1, 0, 0, true);
        good.push("el2: vm vm0 powered off".into());
        good.push("el2: all VMs powered off".into());
        for required in KERNEL_LINES.iter().copied().chain([
            PMU_LINE,
            "pvlinux: perf",
            INIT_BANNER,
            INIT_DONE,
            "el2: all VMs powered off",
        ]) {
            let without: Vec<String> = good
                .iter()
                .filter(|l| !l.contains(required))
                .cloned()
                .collect();
            assert!(
                judge(&without, &expect(1, 1, false, false)).is_err(),
                "{required}"
            );
        }
        // A cycle counter that did not advance fails too.
        let stuck: Vec<String> = good
            .iter()
            .map(|l| l.replace("second=100002000", "second=2000"))
            .collect();
        assert!(
            judge(&stuck, &expect(1, 1, false, false))
                .unwrap_err()
                .contains("pvlinux: perf")
        );
    }

    #[test]
    fn kernel_trouble_fails_the_test() {
        let mut lines = boot("", 2, 0, 5, true);
        lines.push("el2: vm vm0 powered off".into());
        lines.push("el2: all VMs powered off".into());
        lines.insert(
            3,
            "[   30.1] rcu: INFO: rcu_sched self-detected stall on CPU".into(),
        );
        let why = judge(&lines, &expect(1, 2, true, false)).unwrap_err();
        assert!(why.contains("self-detected stall"), "{why}");
    }

    #[test]
    fn two_vms_and_a_reboot_are_counted_per_vm() {
        let mut lines = boot("[vm0] ", 2, 0, 3, true);
        lines.extend(boot("[vm1] ", 2, 0, 4, true));
        lines.push("el2: vm vm0 powered off".into());
        lines.push("el2: vm vm1 powered off".into());
        lines.push("el2: all VMs powered off".into());
        assert_eq!(judge(&lines, &expect(2, 2, true, false)), Ok(()));
        // One VM's output missing: fails.
        let one: Vec<String> = lines
            .iter()
            .filter(|l| !l.starts_with("[vm1]"))
            .cloned()
            .collect();
        assert!(judge(&one, &expect(2, 2, true, false)).is_err());

        let mut reboot = boot("", 2, 0, 0, false);
        reboot.push("[INFO  cpu1] vm vm0: restarting (SYSTEM_RESET)".into());
        reboot.extend(boot("", 2, 1, 6, true));
        reboot.push("el2: vm vm0 powered off".into());
        reboot.push("el2: all VMs powered off".into());
        assert_eq!(judge(&reboot, &expect(1, 2, false, true)), Ok(()));
        // Without the second boot the reboot test fails.
        let cut = reboot.len() - 8;
        assert!(judge(&reboot[..cut], &expect(1, 2, false, true)).is_err());
    }

    #[test]
    fn the_tests_cover_the_issue() {
        let dir = Path::new("/cache/linux");
        let all = tests(dir);
        let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "linux vcpus=1 max,pauth=off smp=1",
                "linux vcpus=4 max,pauth=off smp=2",
                "linux 2 VMs vcpus=2 max,pauth=off smp=2",
                "linux reboot vcpus=2 max,pauth=off smp=2",
                "linux console input vcpus=2 max,pauth=off smp=2",
                "linux soak 60 s vcpus=4 max,pauth=off smp=2",
            ]
        );
        assert!(all.iter().all(|t| needs_guest(t, dir)));
        // Only the console-input test types, and it checks the echo.
        let scripted: Vec<bool> = all.iter().map(|t| console_script(t).is_some()).collect();
        assert_eq!(scripted, [false, false, false, false, true, false]);
        let script = console_script(&all[4]).unwrap();
        assert_eq!(script.steps[0].wait_for, [INIT_PROMPT]);
        assert_eq!(script.steps[0].send, format!("{TYPED_LINE}\r"));
        let mut lines = boot("", 2, 0, 0, true);
        lines.push("el2: vm vm0 powered off".into());
        lines.push("el2: all VMs powered off".into());
        let mut with_input = expect(1, 2, false, false);
        with_input.input = Some(TYPED_LINE);
        assert!(judge(&lines, &with_input).is_err());
        lines.push(format!("linux-guest: read '{TYPED_LINE}'"));
        assert_eq!(judge(&lines, &with_input), Ok(()));
        let overcommitted: Vec<bool> = all
            .iter()
            .map(|t| {
                t.checks.iter().any(|c| {
                    matches!(
                        c,
                        Check::Linux(LinuxExpect {
                            overcommitted: true,
                            ..
                        })
                    )
                })
            })
            .collect();
        assert_eq!(overcommitted, [false, true, true, false, false, true]);
        assert!(all[5].vms[0].bootargs.ends_with("lgbusy=60"));
        assert!(all[3].vms[0].bootargs.ends_with("lgtest=reboot"));
    }
}
