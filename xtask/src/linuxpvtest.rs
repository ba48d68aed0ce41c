//! The boot tests of the project's own Linux guest ([`crate::linuxpv`]):
//! the 6.12 kernel with the PV-lock series, 4 vCPUs on 2 pCPUs, with each
//! PV-lock ABI el2 can offer and with the guest told `pvlock=off`. What a
//! guest must show is in [`LinuxPvExpect`]; the stock kernels' tests
//! ([`crate::linuxtest`]) check that they print no `pvlock:` line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pvlinux::lines::{HotplugResult, KexecLoaded, StressSummary, TruthSummary};
use pvlinux::vcpus::{Interface, Qspinlock, VcpusFile};
use pvlock_abi::pvlock::Variant;

use crate::boottest::{BootTest, Check, Kernel, Outcome, parse_wait_yield};
use crate::kernel::Flavor;
use crate::linux::{self, INIT_BANNER, INIT_DONE, KERNEL_TROUBLE};
use crate::linuxpv::{self, KEXEC_SECOND, STEP_PREFIX, VCPUS_PREFIX};
use crate::linuxtest::KERNEL_LINES;
use crate::qemu::Machine;
use crate::vm::{PvLock, VmConfig};

/// What every kernel line of the series starts with (`pr_fmt`).
pub const PVLOCK_PREFIX: &str = "pvlock: ";
/// The line PV qspinlock prints when it is in use.
pub const QSPINLOCK_LINE: &str = "pvlock: PV qspinlock (kick)";

/// vCPUs and pCPUs of every test: 2x overcommit, so vCPUs are preempted.
const VCPUS: usize = 4;
const PCPUS: u32 = 2;
/// Seconds of the truth test and of the lock stress.
const TRUTH_SECS: u32 = 4;
const STRESS_SECS: u32 = 10;
/// Time for one test: a boot of ~5 s, up to ~20 s of steps, margin for
/// hangs only.
const TIMEOUT: Duration = Duration::from_secs(240);
/// The CPU the hotplug step takes offline and back.
const HOTPLUG_CPU: usize = 1;

/// A step of the guest's `/init` ([`crate::linuxpv`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Vcpus,
    Truth,
    Stress,
    Hotplug,
    /// Kexec into the same kernel, whose `/init` runs the other steps
    /// again.
    Kexec,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Vcpus => "vcpus",
            Step::Truth => "truth",
            Step::Stress => "stress",
            Step::Hotplug => "hotplug",
            Step::Kexec => "kexec",
        }
    }
}

/// What the console of a PV Linux boot test must show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinuxPvExpect {
    /// The PV-lock ABI el2 offers the VM, if any.
    pub offered: Option<Variant>,
    /// The guest's command line says `pvlock=off`.
    pub guest_off: bool,
    /// vCPUs of the VM.
    pub vcpus: usize,
    /// The steps `/init` runs, in order.
    pub steps: Vec<Step>,
}

impl LinuxPvExpect {
    /// Kernels booted: two when the guest kexecs.
    fn boots(&self) -> usize {
        1 + usize::from(self.steps.contains(&Step::Kexec))
    }
}

impl LinuxPvExpect {
    /// The interface the guest should be using.
    fn interface(&self) -> Interface {
        match self.offered {
            _ if self.guest_off => Interface::None,
            Some(Variant::OpenEuler) => Interface::OpenEuler,
            Some(Variant::SeedV2) => Interface::SeedV2,
            _ => Interface::None,
        }
    }

    /// The `pvlock:` lines the kernel must print, and no other.
    fn kernel_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.interface() == Interface::OpenEuler {
            lines.push(QSPINLOCK_LINE.to_string());
        }
        if self.interface() != Interface::None {
            lines.push(format!(
                "{PVLOCK_PREFIX}{} preempted records on {} CPUs",
                self.interface().name(),
                self.vcpus
            ));
        }
        lines
    }
}

/// Where [`crate::linuxpv::obtain`] puts the patched guest: its Image,
/// the initramfs, and the one the kexec test boots.
pub fn guest_paths(xtask_dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let dir = xtask_dir.join("linux-pv");
    (
        xtask_dir
            .join("kernel")
            .join(Flavor::Patched.name())
            .join("Image"),
        dir.join(linuxpv::INITRD_FILE),
        dir.join(format!(
            "{}-{}",
            Flavor::Patched.name(),
            linuxpv::KEXEC_INITRD_FILE
        )),
    )
}

/// The PV Linux boot tests, for the guest [`guest_paths`] names.
pub fn tests(xtask_dir: &Path) -> Vec<BootTest> {
    let (image, initrd, kexec_initrd) = guest_paths(xtask_dir);
    let all = [Step::Vcpus, Step::Truth, Step::Stress, Step::Hotplug];
    [
        (Some(Variant::OpenEuler), false, &all[..]),
        (
            Some(Variant::OpenEuler),
            false,
            &[Step::Vcpus, Step::Kexec][..],
        ),
        (
            Some(Variant::SeedV2),
            false,
            &[Step::Vcpus, Step::Truth, Step::Hotplug][..],
        ),
        (None, false, &[Step::Vcpus, Step::Stress][..]),
        (Some(Variant::OpenEuler), true, &[Step::Vcpus][..]),
    ]
    .into_iter()
    .map(|(offered, guest_off, steps)| {
        let initrd = if steps.contains(&Step::Kexec) {
            &kexec_initrd
        } else {
            &initrd
        };
        test(
            &image,
            initrd,
            LinuxPvExpect {
                offered,
                guest_off,
                vcpus: VCPUS,
                steps: steps.to_vec(),
            },
        )
    })
    .collect()
}

fn test(image: &Path, initrd: &Path, expect: LinuxPvExpect) -> BootTest {
    let steps: Vec<&str> = expect.steps.iter().map(|s| s.name()).collect();
    let mut bootargs = format!(
        "{} lgpv={} lgtruth={TRUTH_SECS} lgstress={STRESS_SECS}",
        linux::BOOTARGS,
        steps.join(",")
    );
    if expect.guest_off {
        bootargs.push_str(" pvlock=off");
    }
    let machine = Machine {
        cpu: crate::qemu::normalize_cpu("max,pauth=off"),
        smp: PCPUS,
        ..Machine::default()
    };
    let offered = expect
        .offered
        .map_or("pv-lock=none".to_string(), |v| v.name().to_string());
    let name = format!(
        "linux-pv {offered}{}{} vcpus={} {}",
        if expect.guest_off { " pvlock=off" } else { "" },
        if expect.steps.contains(&Step::Kexec) {
            " kexec"
        } else {
            ""
        },
        expect.vcpus,
        machine.describe()
    );
    let vm = VmConfig {
        guest: image.display().to_string(),
        initrd: Some(initrd.to_path_buf()),
        memory: linux::VM_MEMORY,
        bootargs,
        pv_lock: Some(match expect.offered {
            Some(v) => PvLock::Variant(v),
            None => PvLock::Off,
        }),
        ..VmConfig::smp_demo(expect.vcpus as u32, "", 1)
    };
    BootTest {
        name,
        timeout: TIMEOUT,
        outcome: Outcome::CleanExit,
        checks: vec![
            Check::Banner,
            Check::SmpOnline(machine.smp),
            Check::LinuxPv(expect.clone()),
            Check::HypervisorSummary {
                vcpus_per_vm: vec![expect.vcpus],
                time_sliced: true,
            },
        ],
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![vm],
        machine,
    }
}

/// Whether `test` boots the patched guest (so it must be built first).
pub fn needs_guest(test: &BootTest, xtask_dir: &Path) -> bool {
    let (image, _, _) = guest_paths(xtask_dir);
    let image = image.display().to_string();
    test.vms.iter().any(|vm| vm.guest == image)
}

/// Applies `expect` to the console `lines`.
pub fn check(lines: &[&str], expect: &LinuxPvExpect) -> Result<(), String> {
    let count = |text: &str| lines.iter().filter(|l| l.contains(text)).count();
    let exactly = |text: &str, n: usize| match count(text) {
        seen if seen == n => Ok(()),
        seen => Err(format!("{seen} lines contain {text:?}, expected {n}")),
    };
    let boots = expect.boots();
    for text in KERNEL_LINES {
        exactly(text, boots)?;
    }
    exactly(INIT_BANNER, boots)?;
    exactly(
        &format!("linux-guest: cpus online 0-{}", expect.vcpus - 1),
        boots,
    )?;
    // Exactly the series' lines for what is in use, and no other, at every
    // boot.
    let printed: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.find(PVLOCK_PREFIX).map(|at| l[at..].trim_end()))
        .collect();
    let wanted: Vec<String> = (0..boots).flat_map(|_| expect.kernel_lines()).collect();
    if printed != wanted {
        return Err(format!(
            "the kernel printed the pvlock lines {printed:?}, expected {wanted:?}"
        ));
    }
    if let Some(trouble) = lines
        .iter()
        .find(|l| KERNEL_TROUBLE.iter().any(|t| l.contains(t)))
    {
        return Err(format!("a kernel complained: {trouble:?}"));
    }
    for step in &expect.steps {
        // Every step runs in each kernel; the first kernel's kexec step
        // does not come back.
        let runs = if *step == Step::Kexec { 1 } else { boots };
        exactly(&format!("{STEP_PREFIX}{} exit 0", step.name()), runs)
            .map_err(|e| format!("step {}: {e}", step.name()))?;
    }
    if expect.steps.contains(&Step::Kexec) {
        if !lines.iter().any(|l| KexecLoaded::parse(l).is_some()) {
            return Err(
                "no `pvlinux: kexec` line: the first kernel did not load the second".into(),
            );
        }
        exactly(KEXEC_SECOND, 1)?;
    }
    if expect.steps.contains(&Step::Vcpus) {
        check_vcpus(lines, expect)?;
    }
    if expect.steps.contains(&Step::Truth) {
        check_truth(lines)?;
    }
    if expect.steps.contains(&Step::Stress) {
        check_stress(lines, expect)?;
    }
    if expect.steps.contains(&Step::Hotplug) {
        let result = lines
            .iter()
            .find_map(|l| HotplugResult::parse(l))
            .ok_or("no `pvlinux: hotplug` line")?;
        if !result.passed() || result.cpu as usize != HOTPLUG_CPU {
            return Err(format!("CPU hotplug: {result}"));
        }
    }
    check_records(lines, expect)?;
    // Only the last kernel reaches the end of /init.
    exactly("linux-guest: kernel warnings 0", 1)?;
    exactly(INIT_DONE, 1)?;
    Ok(())
}

/// The first debugfs dump: the interface in use, whether spinlocks are
/// paravirtual, every CPU online and registered as the interface says.
fn check_vcpus(lines: &[&str], expect: &LinuxPvExpect) -> Result<(), String> {
    let mut text = String::new();
    for line in lines {
        let Some(at) = line.find(VCPUS_PREFIX) else {
            continue;
        };
        let rest = line[at + VCPUS_PREFIX.len()..].trim_end();
        // The first dump only: it starts again at its `interface` line.
        if rest.starts_with("interface") && !text.is_empty() {
            break;
        }
        text.push_str(rest);
        text.push('\n');
    }
    let file = VcpusFile::parse(&text).map_err(|e| format!("the debugfs file: {e}"))?;
    let interface = expect.interface();
    let qspinlock = if interface == Interface::OpenEuler {
        Qspinlock::Pv
    } else {
        Qspinlock::Native
    };
    if file.interface != interface || file.qspinlock != qspinlock {
        return Err(format!(
            "debugfs says interface {} qspinlock {}, expected {} and {}",
            file.interface.name(),
            file.qspinlock.name(),
            interface.name(),
            qspinlock.name()
        ));
    }
    let registered = interface != Interface::None;
    for cpu in 0..expect.vcpus as u32 {
        let row = file
            .row(cpu)
            .ok_or_else(|| format!("debugfs has no row for CPU {cpu}"))?;
        if !row.online || row.registered != registered {
            return Err(format!(
                "debugfs: CPU {cpu} online {} registered {}, expected registered {registered}",
                row.online, row.registered
            ));
        }
    }
    Ok(())
}

/// The preempted flag told the truth, and the check judged enough windows
/// to mean something (`pvlinux truth` itself fails below its minimum).
fn check_truth(lines: &[&str]) -> Result<(), String> {
    let summary = lines
        .iter()
        .find_map(|l| TruthSummary::parse(l))
        .ok_or("no `pvlinux: truth` summary line")?;
    if summary.violations > 0 || summary.judged == 0 {
        return Err(format!("the preempted flag: {summary}"));
    }
    Ok(())
}

/// The lock stress ended with every thread done; with PV qspinlock the
/// guest halted and kicked, and el2 carried the kicks out.
fn check_stress(lines: &[&str], expect: &LinuxPvExpect) -> Result<(), String> {
    let summary = lines
        .iter()
        .find_map(|l| StressSummary::parse(l))
        .ok_or("no `pvlinux: stress` summary line")?;
    if summary.stuck > 0 || summary.min_thread_ops == 0 {
        return Err(format!("lock stress: {summary}"));
    }
    let el2_kicks = lines
        .iter()
        .find_map(|l| parse_wait_yield(l))
        .ok_or("no el2 `summary:   wait/yield:` line")?
        .kicks;
    if expect.interface() == Interface::OpenEuler {
        let (waits, kicks) = (summary.pv_waits.unwrap_or(0), summary.pv_kicks.unwrap_or(0));
        if waits == 0 || kicks == 0 || el2_kicks == 0 {
            return Err(format!(
                "PV qspinlock never halted and kicked under stress: guest waits {waits} kicks \
                 {kicks}, el2 kicks {el2_kicks}"
            ));
        }
    } else if el2_kicks != 0 || summary.pv_kicks.is_some_and(|k| k != 0) {
        return Err(format!(
            "kicks without PV qspinlock: el2 {el2_kicks}, {summary}"
        ));
    }
    Ok(())
}

/// el2's count of what the guest did with its records: set up on every
/// CPU, again for the CPU that came back online, and (guest-owned ones)
/// released for the CPU that went offline and on every CPU at power-off.
fn check_records(lines: &[&str], expect: &LinuxPvExpect) -> Result<(), String> {
    let Some(variant) = expect.offered else {
        return match lines.iter().find(|l| l.contains("summary:   pv-lock ")) {
            Some(line) => Err(format!("no PV lock offered, yet el2 says {line:?}")),
            None => Ok(()),
        };
    };
    let prefix = format!("summary:   pv-lock {}: ", variant.name());
    let line = lines
        .iter()
        .find_map(|l| l.find(&prefix).map(|at| &l[at + prefix.len()..]))
        .ok_or_else(|| format!("no el2 {prefix:?} line"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let value = |key: &str| -> Result<u32, String> {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|at| words.get(at + 1))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("el2's pv-lock line has no {key}: {line:?}"))
    };
    let (handed_out, registered, refused, released) = (
        value("handed-out")?,
        value("registered")?,
        value("refused")?,
        value("released")?,
    );
    // Each kernel sets up every CPU's record, the hotplugged CPU's twice,
    // and (guest-owned records) releases them all when it goes down: the
    // first kernel at kexec, the last one at power-off.
    let per_boot = expect.vcpus as u32 + u32::from(expect.steps.contains(&Step::Hotplug));
    let set_up = per_boot * expect.boots() as u32;
    let wanted = match expect.interface() {
        Interface::None => (0, 0, 0, 0),
        Interface::SeedV2 => (set_up, 0, 0, 0),
        Interface::OpenEuler => (0, set_up, 0, set_up),
    };
    if (handed_out, registered, refused, released) != wanted {
        return Err(format!(
            "el2 counted records handed-out {handed_out} registered {registered} refused \
             {refused} released {released}; expected {wanted:?} (handed-out, registered, \
             refused, released)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(offered: Option<Variant>, guest_off: bool, steps: &[Step]) -> LinuxPvExpect {
        LinuxPvExpect {
            offered,
            guest_off,
            vcpus: 4,
            steps: steps.to_vec(),
        }
    }

    /// The console of a good openEuler run with every step.
    fn good_openeuler() -> Vec<String> {
        let mut lines: Vec<String> = [
            "[    0.000000] psci: PSCIv1.1 detected in firmware.",
            "[    0.000000] psci: SMC Calling Convention v1.1",
            "[    0.000000] smccc: KVM: hypervisor services detected (10000 0 0 1)",
            "[    0.000000] pvlock: PV qspinlock (kick)",
            "[    0.004161] arm-pv: using stolen time PV",
            "[    0.474541] pvlock: openeuler preempted records on 4 CPUs",
            INIT_BANNER,
            "linux-guest: cpus online 0-3",
            "linux-guest: vcpus interface openeuler",
            "linux-guest: vcpus qspinlock pv",
            "linux-guest: vcpus cpu online registered preempted waits kicks",
            "linux-guest: vcpus 0 1 1 0 0 0",
            "linux-guest: vcpus 1 1 1 0 0 1",
            "linux-guest: vcpus 2 1 1 1 1 0",
            "linux-guest: vcpus 3 1 1 0 0 0",
            "linux-guest: step vcpus exit 0",
            "pvlinux: truth cpus=4 polls=45254 windows=2497 judged=1399 violations=0 \
             preempted_fraction=0.667 max_gap_us=16742 discarded=2026",
            "linux-guest: step truth exit 0",
            "pvlinux: stress threads=16 seconds=10 ops=133356 min_thread_ops=7776 \
             max_thread_ops=8766 pv_waits=45 pv_kicks=24 stuck=0",
            "linux-guest: step stress exit 0",
            "pvlinux: hotplug cpu=1 before=1 offline=0/0 after=1/1",
            "linux-guest: step hotplug exit 0",
            "linux-guest: steal 1447",
            "linux-guest: kernel warnings 0",
            INIT_DONE,
            "summary:   wait/yield: wfi 21015 wfit 0 wfe 0 wfet 0 sampled-spins 0 on-spin 0 attempts 0 yields 0 \
             (round-robin 0 irqs-masked 0 lock-holder 0 pending-irq 0 wait-ended 0) pv-yield 0/0 kicks 26 \
             extensions 176",
            "summary:   pv-lock openeuler: handed-out 0 registered 5 refused 0 released 5",
        ]
        .iter()
        .map(|l| l.to_string())
        .collect();
        lines.push("el2: all VMs powered off".into());
        lines
    }

    fn judge(lines: &[String], expect: &LinuxPvExpect) -> Result<(), String> {
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        check(&refs, expect)
    }

    const ALL: [Step; 4] = [Step::Vcpus, Step::Truth, Step::Stress, Step::Hotplug];

    #[test]
    fn a_good_openeuler_run_passes_and_each_fault_fails() {
        let good = good_openeuler();
        let e = expect(Some(Variant::OpenEuler), false, &ALL);
        assert_eq!(judge(&good, &e), Ok(()));
        let with = |from: &str, to: &str| -> Vec<String> {
            good.iter().map(|l| l.replace(from, to)).collect()
        };
        for (from, to, why) in [
            ("violations=0", "violations=1", "preempted flag"),
            ("stuck=0", "stuck=1", "lock stress"),
            ("pv_kicks=24", "pv_kicks=0", "never halted and kicked"),
            ("kicks 26", "kicks 0", "never halted and kicked"),
            ("after=1/1", "after=1/0", "CPU hotplug"),
            ("released 5", "released 4", "el2 counted"),
            ("registered 5", "registered 4", "el2 counted"),
            (
                "kernel warnings 0",
                "kernel warnings 1",
                "kernel warnings 0",
            ),
            ("step truth exit 0", "step truth exit 1", "step truth"),
            ("vcpus 2 1 1 1", "vcpus 2 1 0 1", "registered"),
            (
                "vcpus qspinlock pv",
                "vcpus qspinlock native",
                "debugfs says",
            ),
            ("(kick)", "(kicked)", "pvlock lines"),
            ("on 4 CPUs", "on 3 CPUs", "pvlock lines"),
        ] {
            let why_failed = judge(&with(from, to), &e).unwrap_err();
            assert!(why_failed.contains(why), "{from} -> {to}: {why_failed}");
        }
        let mut stall = good.clone();
        stall.insert(
            8,
            "[   30.1] rcu: INFO: rcu_sched self-detected stall on CPU".into(),
        );
        assert!(judge(&stall, &e).unwrap_err().contains("complained"));
        let mut extra = good.clone();
        extra.insert(
            8,
            "[    1.0] pvlock: CPU2: the hypervisor refused a preempted record".into(),
        );
        assert!(judge(&extra, &e).unwrap_err().contains("pvlock lines"));
    }

    #[test]
    fn seed_v2_needs_native_spinlocks_and_hypervisor_placed_records() {
        let steps = [Step::Vcpus, Step::Truth, Step::Hotplug];
        let lines: Vec<String> = good_openeuler()
            .into_iter()
            .filter(|l| !l.contains("PV qspinlock") && !l.contains("pvlinux: stress"))
            .filter(|l| !l.contains("step stress"))
            .map(|l| {
                l.replace("openeuler preempted", "seed-v2 preempted")
                    .replace("vcpus interface openeuler", "vcpus interface seed-v2")
                    .replace("qspinlock pv", "qspinlock native")
                    .replace("kicks 26", "kicks 0")
                    .replace(
                        "pv-lock openeuler: handed-out 0 registered 5 refused 0 released 5",
                        "pv-lock seed-v2: handed-out 5 registered 0 refused 0 released 0",
                    )
            })
            .collect();
        let e = expect(Some(Variant::SeedV2), false, &steps);
        assert_eq!(judge(&lines, &e), Ok(()));
        // A PV qspinlock line under seed-v2 is wrong.
        let mut qspin = lines.clone();
        qspin.insert(3, QSPINLOCK_LINE.into());
        assert!(judge(&qspin, &e).is_err());
    }

    #[test]
    fn without_the_service_or_with_pvlock_off_nothing_is_printed() {
        let e = expect(None, false, &[Step::Vcpus]);
        let lines: Vec<String> = good_openeuler()
            .into_iter()
            .filter(|l| !l.contains("pvlock: ") && !l.contains("pv-lock openeuler"))
            .filter(|l| !l.contains("pvlinux:") && !l.contains("step truth"))
            .filter(|l| !l.contains("step stress") && !l.contains("step hotplug"))
            .map(|l| {
                l.replace("interface openeuler", "interface none")
                    .replace("qspinlock pv", "qspinlock native")
                    .replace(" 1 1 0 0 0", " 1 0 0 0 0")
                    .replace(" 1 1 0 0 1", " 1 0 0 0 1")
                    .replace(" 1 1 1 1 0", " 1 0 1 1 0")
            })
            .collect();
        assert_eq!(judge(&lines, &e), Ok(()));
        let off = expect(Some(Variant::OpenEuler), true, &[Step::Vcpus]);
        let mut with_summary = lines.clone();
        with_summary.push(
            "summary:   pv-lock openeuler: handed-out 0 registered 0 refused 0 released 0".into(),
        );
        assert_eq!(judge(&with_summary, &off), Ok(()));
        // pvlock=off, yet a CPU registered: el2 saw it.
        let registered: Vec<String> = with_summary
            .iter()
            .map(|l| l.replace("registered 0", "registered 1"))
            .collect();
        assert!(
            judge(&registered, &off)
                .unwrap_err()
                .contains("el2 counted")
        );
        // No PV lock offered, yet el2 reports one.
        assert!(judge(&with_summary, &e).is_err());
    }

    #[test]
    fn a_kexec_boots_twice_and_releases_every_record_in_between() {
        let steps = [Step::Vcpus, Step::Kexec];
        let e = expect(Some(Variant::OpenEuler), false, &steps);
        let good = good_openeuler();
        let boot = |last: bool| -> Vec<String> {
            let mut lines: Vec<String> = good
                .iter()
                .take_while(|l| !l.contains("pvlinux: truth"))
                .cloned()
                .collect();
            if last {
                lines.push(KEXEC_SECOND.into());
                lines.push("linux-guest: step kexec exit 0".into());
                lines.push("linux-guest: steal 12".into());
                lines.push("linux-guest: kernel warnings 0".into());
                lines.push(INIT_DONE.into());
            } else {
                lines.push("pvlinux: kexec kernel=/boot/Image initrd=/boot/initramfs.cpio".into());
                lines.push("[    9.1] kexec_core: Starting new kernel".into());
            }
            lines
        };
        let mut lines = boot(false);
        lines.extend(boot(true));
        lines.push(good[good.len() - 3].clone());
        lines.push(
            "summary:   pv-lock openeuler: handed-out 0 registered 8 refused 0 released 8".into(),
        );
        lines.push("el2: all VMs powered off".into());
        assert_eq!(judge(&lines, &e), Ok(()));
        // The first kernel's records not all released before the second
        // registered its own: el2 counts fewer releases.
        let leaked: Vec<String> = lines
            .iter()
            .map(|l| l.replace("released 8", "released 5"))
            .collect();
        assert!(judge(&leaked, &e).unwrap_err().contains("el2 counted"));
        // The second kernel never came up.
        let one: Vec<String> = boot(false)
            .into_iter()
            .chain(lines[lines.len() - 3..].iter().cloned())
            .collect();
        assert!(judge(&one, &e).is_err());
    }

    #[test]
    fn the_tests_cover_each_abi_and_pvlock_off() {
        let dir = Path::new("/x/target/xtask");
        let all = tests(dir);
        let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "linux-pv openeuler vcpus=4 max,pauth=off smp=2",
                "linux-pv openeuler kexec vcpus=4 max,pauth=off smp=2",
                "linux-pv seed-v2 vcpus=4 max,pauth=off smp=2",
                "linux-pv pv-lock=none vcpus=4 max,pauth=off smp=2",
                "linux-pv openeuler pvlock=off vcpus=4 max,pauth=off smp=2",
            ]
        );
        assert!(all.iter().all(|t| needs_guest(t, dir)));
        assert!(all[4].vms[0].bootargs.ends_with(" pvlock=off"));
        assert!(
            all[0].vms[0]
                .bootargs
                .contains("lgpv=vcpus,truth,stress,hotplug")
        );
        assert!(all[1].vms[0].bootargs.contains("lgpv=vcpus,kexec"));
        let initrd = |t: &BootTest| t.vms[0].initrd.clone().unwrap();
        assert!(initrd(&all[1]).ends_with("linux-pv/patched-initramfs-kexec.cpio"));
        assert!(initrd(&all[0]).ends_with("linux-pv/initramfs.cpio"));
        assert_eq!(all[3].vms[0].pv_lock, Some(PvLock::Off));
    }
}
