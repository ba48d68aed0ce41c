//! The QEMU boot tests: one table saying which machines to boot and what the
//! console must show, and the checks that judge a run.
//!
//! To add a test (a guest, a Linux boot, another self-test), add an entry to
//! [`boot_tests`] (or [`vm_tests`] for VMs under el2): a [`Machine`], the
//! [`Kernel`] it boots, the VMs el2 runs, the expected [`Outcome`] and the
//! [`Check`]s on the console.

use std::time::Duration;

use guest_driver::demo::{Progress, PsciCheck, PsciResult, Summary};
use guest_driver::lockbench::{self, DataLine, LockKind, YieldLine};
use guest_driver::pvcheck::{self, Expect, Steal, TruthCounts};
use pvlock_abi::pvlock::Variant;

use crate::dtedit::DtEdit;
use crate::qemu::{self, Ending, FATAL_MARKER, GUEST_FATAL_MARKER, Machine};
use crate::vm::{self, PvLock, VmConfig};

/// Banner el2 prints near the start.
pub const BANNER: &str = "el2: pvlock hypervisor";
/// Last line of a successful boot without a VM; then PSCI SYSTEM_OFF.
pub const POWER_OFF: &str = "el2: no VM configured, powering off";

/// How a boot must end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// QEMU exits 0 and no crash marker (el2's or a guest's) appears.
    CleanExit,
    /// The crash marker appears and QEMU stops by itself within the timeout
    /// (with any status): a crash self-test.
    Fatal,
    /// A guest prints its crash marker and powers off, and QEMU exits 0
    /// without el2's crash marker: a guest fault self-test.
    GuestFatal,
    /// The console shows this text and xtask stops QEMU there (firmware
    /// that would otherwise wait forever), with no crash marker before.
    StopsAt(&'static str),
    /// el2's crash marker, then this text, where xtask stops QEMU: a
    /// failure el2 reports and hands back to the firmware, which carries on.
    FatalThenStopsAt(&'static str),
}

/// What QEMU loads with `-kernel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// The hypervisor (with the test's VMs, if any).
    El2,
    /// A built guest, directly at EL1 (the machine has no
    /// `virtualization=on`).
    Guest(&'static str),
}

/// One assertion on the console output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// The el2 banner appears before any `smp:` or `tick:` line.
    Banner,
    /// Some line contains this text.
    Line(&'static str),
    /// Some line after the crash marker contains one of these texts.
    AfterFatal(&'static [&'static str]),
    /// `smp: N CPUs online` with N = this, and no other count.
    SmpOnline(u32),
    /// `tick: cpu I mpidr A.B.C.D: T ticks in W ms (expected E)` exactly
    /// once for every I in 0..N, T within the tolerance.
    Ticks(u32, TickTolerance),
    /// The crash report names this device tree node and property.
    DtError {
        node: &'static str,
        property: &'static str,
    },
    /// Exactly `count` lines contain `text`.
    Lines { text: String, count: usize },
    /// smp-demo: every vCPU 0..vcpus printed every round's progress line,
    /// `vms` times (once per VM).
    DemoProgress {
        vcpus: usize,
        rounds: u64,
        vms: usize,
    },
    /// A guest's crash report contains this text.
    GuestFatal(String),
    /// el2's end-of-run summary: `el2: all VMs powered off`, then one
    /// `summary:   vmV/vcpuC: run R ms steal S ms ... preempted P ...` line
    /// per vCPU of each of `vcpus_per_vm`; every vCPU ran (R > 0) and, when
    /// `time_sliced`, every vCPU waited for a pCPU (S > 0) and each VM had
    /// a vCPU preempted at least once: proof that the pCPUs were shared by
    /// time slices. (Not every vCPU: in a short run one that blocks before
    /// each slice ends is never preempted, about one run in fifteen of the
    /// 8-vCPU smp-demo test.)
    HypervisorSummary {
        vcpus_per_vm: Vec<usize>,
        time_sliced: bool,
    },
    /// pv-check, told to expect `expect`, with `vcpus` vCPUs: every check
    /// `pvcheck::labels` lists passed exactly once, no check failed, the
    /// preempted-truth counts show no violation (and, with overcommit, at
    /// least one window with B preempted), and the run ended with
    /// `pv-check: all checks passed`.
    PvServices { expect: Expect, vcpus: usize },
    /// lockbench with `vcpus` vCPUs, each taking `lock` `iterations`
    /// times: no failed check; `lockbench: data ok: N acquisitions, 0 lost
    /// updates` with N = vcpus x iterations; `lockbench: yields: M calls,
    /// K yielded`; `lockbench: all checks passed`. Under el2
    /// (`under_el2`), el2's `summary:   wait/yield: ... pv-yield K/M ...`
    /// agrees exactly, with K > 0 for the PV lock (its waiters did hand
    /// their slice to a preempted vCPU, and el2 did switch to it) and M = 0
    /// for the plain ticket lock; without a hypervisor M = 0.
    LockContention {
        lock: LockKind,
        vcpus: usize,
        iterations: u64,
        under_el2: bool,
    },
    /// Stock Linux VMs booted, found the hypervisor and powered off
    /// ([`crate::linuxtest::LinuxExpect`]).
    Linux(crate::linuxtest::LinuxExpect),
    /// The project's PV-lock Linux guest booted, used (or did not use) the
    /// PV-lock services as offered, and its `/init` steps passed
    /// ([`crate::linuxpvtest::LinuxPvExpect`]).
    LinuxPv(crate::linuxpvtest::LinuxPvExpect),
    /// A timed lockbench run with `vcpus` vCPUs beside other VMs
    /// ([`crate::soak::check_lock`]): exact data, the verdict.
    LockSoak { vcpus: usize },
    /// Debian's kernel registered KVM's PTP clock and each of its `reads`
    /// readings agrees with el2's wall clock ([`crate::ptptest::check`]).
    Ptp { reads: u32 },
    /// irq-check with `vcpus` vCPUs, `rounds` ring rounds and `ping` round
    /// trips of the ping check (0: none) passed every check, the round
    /// trips within their limits, and el2's `summary:   vgic:` line agrees
    /// ([`crate::irqtest::check`]).
    Irq {
        vcpus: usize,
        rounds: u64,
        ping: u64,
    },
    /// level-check passed every check; under el2 (`vcpu0`), vCPU 0's
    /// summary line shows it left its pCPU (and moved between pCPUs) as
    /// the test asks ([`crate::leveltest::check`]).
    Level {
        vcpu0: Option<crate::leveltest::Vcpu0>,
    },
    /// VMs held to their shares of the pCPU time, `owed_percent` per VM
    /// (percent of the machine), while VM `tricky_vm` used every guest hint
    /// ([`crate::sharetest::check`]).
    Shares {
        tricky_vm: usize,
        owed_percent: Vec<u32>,
    },
    /// VM `vm`'s slices ended more often per second of its run time than
    /// el2's default slice allows: its `time-slice-us` took effect
    /// ([`crate::sharetest::check_short_slices`]).
    ShortSlices { vm: usize },
    /// debug-check passed every check on each of its first `vcpus` vCPUs,
    /// which read `features` from ID_AA64DFR0_EL1
    /// ([`crate::debugtest::check`]).
    Debug {
        vcpus: usize,
        features: guest_driver::debugcheck::Features,
    },
    /// pmu-check passed every check on each of its first `vcpus` vCPUs,
    /// which found `expect`'s PMU ([`crate::pmutest::check`]).
    Pmu {
        vcpus: usize,
        expect: crate::pmutest::PmuExpect,
    },
    /// The hostile guest in VM `vm` got every documented answer, and el2's
    /// summary of that VM counted its storms
    /// ([`crate::hostiletest::check`]).
    Hostile { vm: usize },
}

/// A test of one VM running the built guest `guest` (a `rt::pair` guest:
/// debug-check, pmu-check) with `vcpus` vCPUs and `timeout=S` on
/// `machine`, judged by `check`. Its vCPUs wait for each other by
/// spinning, so each is preempted at its slices' ends: el2's summary must
/// show them time-sliced.
pub fn paired_guest_test(
    guest: &str,
    vcpus: u32,
    machine: Machine,
    guest_timeout_secs: u64,
    timeout: Duration,
    check: Check,
) -> BootTest {
    let vm = VmConfig {
        guest: guest.into(),
        ..VmConfig::smp_demo(vcpus, &format!("timeout={guest_timeout_secs}"), 1)
    };
    BootTest {
        name: format!("vm {guest} vcpus={vcpus} {}", machine.describe()),
        timeout,
        outcome: Outcome::CleanExit,
        checks: vec![
            Check::Banner,
            Check::SmpOnline(machine.smp),
            check,
            Check::HypervisorSummary {
                vcpus_per_vm: vec![vcpus as usize],
                time_sliced: true,
            },
        ],
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![vm],
        machine,
    }
}

/// What a check guest's console says overall: its `FAILED` lines (with
/// `prefix`), and how many `all_passed` lines it printed (one is right),
/// as problems added to `problems`.
pub fn guest_verdicts(lines: &[&str], prefix: &str, all_passed: &str, problems: &mut Vec<String>) {
    let failed: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains(prefix) && l.contains(": FAILED"))
        .collect();
    if let Some(first) = failed.first() {
        problems.push(format!("{} failed check(s), first {first:?}", failed.len()));
    }
    let passed = lines.iter().filter(|l| l.contains(all_passed)).count();
    if passed != 1 {
        problems.push(format!("{passed} {all_passed:?} lines, expected 1"));
    }
}

/// How close a CPU's tick count must be to what its period promises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TickTolerance {
    /// Under `-icount` virtual time is exact: E-1 <= T <= E (the last tick
    /// may land on the window's end).
    Exact,
    /// Multi-threaded TCG with more vCPUs than host cores: a vCPU thread can
    /// sleep through several periods (the timer then coalesces them into
    /// one), so only "ticks arrive, and never too fast" holds: 1 <= T <= E+2.
    Loose,
}

/// A boot test: the machine, the kernel command line (in `machine.append`),
/// a hard timeout and the expectations.
#[derive(Clone, Debug)]
pub struct BootTest {
    pub name: String,
    pub machine: Machine,
    pub timeout: Duration,
    pub outcome: Outcome,
    pub checks: Vec<Check>,
    /// Boot with QEMU's device tree changed this way.
    pub dt_edit: Option<DtEdit>,
    pub kernel: Kernel,
    /// VMs for el2 to run (their images are loaded and their
    /// `/chosen/vm@N` nodes added to the device tree).
    pub vms: Vec<VmConfig>,
}

/// CPU models of the boot matrix.
const CPUS: [&str; 3] = ["cortex-a57", "neoverse-n1", "max,pauth=off"];
/// (CPUs, clusters) of the boot matrix.
const TOPOLOGIES: [(u32, Option<u32>); 3] = [(1, None), (4, None), (8, Some(2))];

/// Hard timeout for one boot. Measured on the 2-core CI machine kind with
/// QEMU 7.2 (MTTCG: every vCPU is a host thread, so 8 of them share the 2
/// cores): el2 boots to power-off in 0.2 s with 1 or 4 CPUs, 0.4-0.7 s with
/// 8, 0.7 s through U-Boot; with `--icount` (one thread for all vCPUs) 8 CPUs
/// take ~10 s. The timeout only has to catch hangs, so it leaves a wide
/// margin for slower machines, debug builds and longer self-tests while
/// keeping a fully hung matrix to ~8 minutes.
pub fn timeout_for(machine: &Machine) -> Duration {
    let mut secs = 20 + 5 * u64::from(machine.smp);
    if machine.uboot {
        secs += 10; // U-Boot's own start; the autoboot countdown is skipped
    }
    if machine.icount {
        secs *= 3;
    }
    Duration::from_secs(secs)
}

/// Every check of a boot that brings all CPUs up and powers off.
fn clean_boot_checks(machine: &Machine) -> Vec<Check> {
    let tolerance = if machine.icount {
        TickTolerance::Exact
    } else {
        TickTolerance::Loose
    };
    vec![
        Check::Banner,
        Check::SmpOnline(machine.smp),
        Check::Ticks(machine.smp, tolerance),
        Check::Line(POWER_OFF),
    ]
}

fn boot(machine: Machine) -> BootTest {
    BootTest {
        name: format!("boot {}", machine.describe()),
        timeout: timeout_for(&machine),
        outcome: Outcome::CleanExit,
        checks: clean_boot_checks(&machine),
        dt_edit: None,
        kernel: Kernel::El2,
        vms: Vec::new(),
        machine,
    }
}

fn selftest(which: &'static str, expect: &'static [&'static str]) -> BootTest {
    let machine = Machine {
        append: Some(format!("el2.selftest={which}")),
        ..Machine::default()
    };
    BootTest {
        name: format!("selftest {which} {}", machine.describe()),
        timeout: timeout_for(&machine),
        outcome: Outcome::Fatal,
        checks: vec![Check::Banner, Check::AfterFatal(expect)],
        dt_edit: None,
        kernel: Kernel::El2,
        vms: Vec::new(),
        machine,
    }
}

/// `el2.selftest=panic-all` on 8 CPUs: every CPU panics at about the same
/// moment; exactly one report comes out and the machine stops (the first
/// CPU stops the others; a CPU that fails during the report parks).
fn panic_on_every_cpu() -> BootTest {
    let machine = Machine {
        smp: 8,
        append: Some("el2.selftest=panic-all".into()),
        ..Machine::default()
    };
    BootTest {
        name: format!("selftest panic-all {}", machine.describe()),
        timeout: timeout_for(&machine),
        outcome: Outcome::Fatal,
        checks: vec![
            Check::Banner,
            Check::AfterFatal(&["selftest: panic on every CPU"]),
            Check::Lines {
                text: FATAL_MARKER.to_string(),
                count: 1,
            },
        ],
        dt_edit: None,
        kernel: Kernel::El2,
        vms: Vec::new(),
        machine,
    }
}

/// A device tree the hypervisor cannot use must stop it with a report that
/// names the node and property, on the console it still finds.
fn bad_device_tree() -> BootTest {
    let machine = Machine::default();
    BootTest {
        name: format!("dt gic-without-reg {}", machine.describe()),
        timeout: timeout_for(&machine),
        outcome: Outcome::Fatal,
        checks: vec![
            Check::Banner,
            Check::DtError {
                node: "/intc@8000000",
                property: "reg",
            },
        ],
        dt_edit: Some(DtEdit::RemoveProperty {
            node: "intc@8000000",
            property: "reg",
        }),
        kernel: Kernel::El2,
        vms: Vec::new(),
        machine,
    }
}

/// A CPU in the device tree that the firmware cannot start is reported and
/// left out; the others come up and tick.
fn unstartable_cpu() -> BootTest {
    let machine = Machine::default();
    let mut checks = clean_boot_checks(&machine);
    checks.push(Check::Line(
        "(mpidr 0.0.1.0, /cpus/cpu@100): PSCI CPU_ON failed with -2 (INVALID_PARAMETERS); left out",
    ));
    BootTest {
        name: format!("dt unstartable-cpu {}", machine.describe()),
        timeout: timeout_for(&machine),
        outcome: Outcome::CleanExit,
        checks,
        dt_edit: Some(DtEdit::AddCpu { mpidr: 0x100 }),
        kernel: Kernel::El2,
        vms: Vec::new(),
        machine,
    }
}

/// The guest the guest tests boot.
const DEMO: &str = vm::DEFAULT_GUEST;
/// smp-demo's work in the boot tests: a few rounds, each a fraction of a
/// second per vCPU under TCG.
pub(crate) const DEMO_ROUNDS: u64 = 3;
pub(crate) const DEMO_BOOTARGS: &str = "rounds=3 work=200000";

/// Everything a successful smp-demo run of `count` VMs of `vcpus` vCPUs
/// prints: every vCPU's progress, the PSCI answers it checked, the summary.
pub(crate) fn demo_checks(vcpus: usize, rounds: u64, count: usize) -> Vec<Check> {
    let pass = |check, per_vm| Check::Lines {
        text: PsciResult::pass(check).to_string(),
        count: per_vm * count,
    };
    vec![
        Check::DemoProgress {
            vcpus,
            rounds,
            vms: count,
        },
        pass(PsciCheck::UnknownMpidr, 1),
        pass(PsciCheck::BootCpuAlreadyOn, 1),
        pass(PsciCheck::RunningCpuAlreadyOn, vcpus - 1),
        pass(PsciCheck::AffinityOn, vcpus - 1),
        pass(PsciCheck::AffinityOff, vcpus - 1),
        Check::Lines {
            text: Summary { vcpus }.to_string(),
            count,
        },
    ]
}

/// smp-demo directly on QEMU at EL1, without el2: proves the guest runtime
/// and the guest on their own (PSCI is QEMU's).
fn bare_demo(mut machine: Machine) -> BootTest {
    machine.virtualization = false;
    machine.append = Some(DEMO_BOOTARGS.into());
    BootTest {
        name: format!("guest {DEMO} bare {}", machine.describe()),
        timeout: timeout_for(&machine),
        outcome: Outcome::CleanExit,
        checks: demo_checks(machine.smp as usize, DEMO_ROUNDS, 1),
        dt_edit: None,
        kernel: Kernel::Guest(DEMO),
        vms: Vec::new(),
        machine,
    }
}

/// A guest fault on a bare machine must be reported by the guest runtime.
fn bare_fault(selftest: &str, report: String) -> BootTest {
    let machine = Machine {
        virtualization: false,
        smp: 2,
        append: Some(format!("selftest={selftest}")),
        ..Machine::default()
    };
    BootTest {
        name: format!(
            "guest {DEMO} bare selftest={selftest} {}",
            machine.describe()
        ),
        timeout: timeout_for(&machine),
        outcome: Outcome::GuestFatal,
        checks: vec![Check::GuestFatal(report)],
        dt_edit: None,
        kernel: Kernel::Guest(DEMO),
        vms: Vec::new(),
        machine,
    }
}

/// The address smp-demo's `selftest=abort` reads: the first past its RAM.
fn past_ram(ram: u64) -> String {
    format!(
        "synchronous external abort at {:#x} (data abort, read)",
        vm::RAM_BASE + ram
    )
}

/// Hard timeout of a VM test: el2 time-slices 8 vCPUs on 2 pCPUs under TCG.
const VM_TIMEOUT: Duration = Duration::from_secs(180);

/// el2 running `vms` on `machine`; the guest checks are smp-demo's.
fn vm_test(name: &str, machine: Machine, vms: Vec<VmConfig>) -> BootTest {
    let count: usize = vms.iter().map(|v| v.count as usize).sum();
    let vcpus = vms[0].vcpus as usize;
    let rounds = DEMO_ROUNDS;
    let mut checks = vec![Check::Banner, Check::SmpOnline(machine.smp)];
    checks.extend(demo_checks(vcpus, rounds, count));
    let total_vcpus = vms
        .iter()
        .map(|v| v.vcpus as usize * v.count as usize)
        .sum::<usize>();
    checks.push(Check::HypervisorSummary {
        vcpus_per_vm: vms
            .iter()
            .flat_map(|v| std::iter::repeat_n(v.vcpus as usize, v.count as usize))
            .collect(),
        time_sliced: total_vcpus > machine.smp as usize,
    });
    BootTest {
        name: format!("vm {name} {}", machine.describe()),
        timeout: VM_TIMEOUT,
        outcome: Outcome::CleanExit,
        checks,
        dt_edit: None,
        kernel: Kernel::El2,
        vms,
        machine,
    }
}

/// The paravirtual-services test guest.
const PV_CHECK: &str = "pv-check";

/// pv-check's command line for `expect`.
fn pv_check_bootargs(expect: &Expect) -> String {
    expect.to_string()
}

/// pv-check in one VM of `vcpus` vCPUs on `smp` pCPUs, whose node says
/// `pv_lock` and `pv_time` (el2's defaults when `None`).
fn pv_check_vm(
    vcpus: u32,
    smp: u32,
    pv_lock: Option<PvLock>,
    pv_time: Option<bool>,
    expect: Expect,
) -> BootTest {
    let machine = Machine {
        smp,
        ..Machine::default()
    };
    let vm = VmConfig {
        guest: PV_CHECK.into(),
        pv_lock,
        pv_time,
        ..VmConfig::smp_demo(vcpus, &pv_check_bootargs(&expect), 1)
    };
    let mut name = format!("vm {PV_CHECK}");
    match (pv_lock, pv_time) {
        (None, None) => name += " defaults",
        _ => {
            if let Some(lock) = pv_lock {
                name += &format!(" pv-lock={}", lock.name());
            }
            if let Some(on) = pv_time {
                name += if on { " pv-time=on" } else { " pv-time=off" };
            }
        }
    }
    BootTest {
        name: format!("{name} vcpus={vcpus} {}", machine.describe()),
        timeout: VM_TIMEOUT,
        outcome: Outcome::CleanExit,
        checks: vec![
            Check::Banner,
            Check::SmpOnline(smp),
            Check::PvServices {
                expect,
                vcpus: vcpus as usize,
            },
            Check::HypervisorSummary {
                vcpus_per_vm: vec![vcpus as usize],
                time_sliced: vcpus > smp,
            },
        ],
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![vm],
        machine,
    }
}

/// pv-check under el2: each PV-lock variant, none, no PV time, and a run
/// without overcommit on el2's defaults (seed-v2, PV time on).
fn pv_check_vm_tests() -> Vec<BootTest> {
    let under_el2 = |lock, steal| Expect {
        kvm: Some(true),
        lock,
        steal,
        overcommit: None,
        control: false,
        virtio_version: pvlock_abi::virtio_mmio::VERSION,
    };
    let mut tests: Vec<BootTest> = Variant::ALL
        .into_iter()
        .map(|v| {
            pv_check_vm(
                4,
                2,
                Some(PvLock::Variant(v)),
                None,
                under_el2(Some(v), Steal::Grows),
            )
        })
        .collect();
    tests.push(pv_check_vm(
        4,
        2,
        Some(PvLock::Off),
        None,
        under_el2(None, Steal::Grows),
    ));
    tests.push(pv_check_vm(
        4,
        2,
        Some(PvLock::Off),
        Some(false),
        Expect {
            overcommit: Some(true),
            ..under_el2(None, Steal::Unavailable)
        },
    ));
    tests.push(pv_check_vm(
        2,
        2,
        None,
        None,
        under_el2(Some(Variant::SeedV2), Steal::NearZero),
    ));
    // A control VM: PVLOCK_SET_WFX_POLICY answers it (every other pv-check
    // VM gets NOT_SUPPORTED for the same calls).
    let mut control = pv_check_vm(
        4,
        2,
        None,
        None,
        Expect {
            control: true,
            ..under_el2(Some(Variant::SeedV2), Steal::Grows)
        },
    );
    control.vms[0].control = Some(true);
    control.name = control.name.replace(" defaults ", " control=on ");
    tests.push(control);
    tests
}

/// The lock-contention test guest.
pub const LOCK_CHECK: &str = "lockbench";

/// lockbench's command line: `lock` taken `iterations` times per vCPU;
/// for the PV locks every vCPU's first critical section lasts
/// [`LOCK_CHECK_FIRST_HOLD_MS`]; every other setting spelled out at its
/// default.
fn lockbench_settings(lock: LockKind, iterations: u64) -> lockbench::Settings {
    lockbench::Settings {
        lock,
        iterations,
        first_hold_ms: if lock.is_paravirt() {
            LOCK_CHECK_FIRST_HOLD_MS
        } else {
            0
        },
        // The queued lock's head then only waits by spinning and yielding
        // to a preempted holder; with its default (sleep after 64 looks)
        // every waiter soon sleeps, the holder has a pCPU to itself and
        // is hardly ever preempted: fast, but no yield to show. Waiters
        // behind a preempted predecessor still sleep and are kicked.
        halt_after: if lock == LockKind::Pv {
            u32::MAX
        } else {
            lockbench::Settings::default().halt_after
        },
        long_holds: if lock == LockKind::Pv {
            LOCK_CHECK_QUEUED_LONG_HOLDS
        } else {
            lockbench::Settings::default().long_holds
        },
        ..lockbench::Settings::default()
    }
}

/// How long each vCPU holds the lock in its first critical section in the
/// PV tests: two of el2's 4 ms time slices. With more vCPUs than pCPUs,
/// others always wait for a pCPU, so the holder is certainly preempted
/// inside, and its waiters on the other pCPU find it so and yield to it:
/// K > 0 by construction rather than by the chance that some slice expires
/// while a vCPU holds the lock. (Without it, 1 run in about 180 of the
/// 4-vCPU test finished its 40000 acquisitions in 27 ms, before any
/// vCPU was preempted holding a ticket, and made no yield at all.)
const LOCK_CHECK_FIRST_HOLD_MS: u64 = 10;

/// How many of each vCPU's first critical sections last
/// [`LOCK_CHECK_FIRST_HOLD_MS`] in the queued lock's test. Only the queue
/// head yields to a preempted holder; a waiter further back that finds its
/// predecessor preempted sleeps instead. When the holder is preempted
/// while the head is off its pCPU too, the waiters behind it run, find the
/// head preempted and sleep, the head and the holder then have a pCPU
/// each, and that long hold ends with no yield. One long hold per vCPU
/// (four chances) made no yield in 1 run of 12 (seen in CI); eight per
/// vCPU give 32 chances.
const LOCK_CHECK_QUEUED_LONG_HOLDS: u64 = 8;

/// The PV-lock variant each lock's boot test runs with: the queued lock
/// sleeps until kicked, so it needs a variant with KICK_CPU (openEuler);
/// the PV ticket lock only yields, so el2's default (seed-v2) serves it;
/// the plain lock asks for nothing.
fn lockbench_pv_lock(lock: LockKind) -> Option<PvLock> {
    match lock {
        LockKind::Pv => Some(PvLock::Variant(Variant::OpenEuler)),
        LockKind::PvTicket | LockKind::Ticket => None,
    }
}

/// lockbench in one VM of `vcpus` vCPUs on `smp` pCPUs, with
/// [`lockbench_pv_lock`]'s services.
fn lockbench_vm(vcpus: u32, smp: u32, lock: LockKind, iterations: u64) -> BootTest {
    let machine = Machine {
        smp,
        ..Machine::default()
    };
    let settings = lockbench_settings(lock, iterations);
    let pv_lock = lockbench_pv_lock(lock);
    let vm = VmConfig {
        guest: LOCK_CHECK.into(),
        pv_lock,
        ..VmConfig::smp_demo(vcpus, &settings.to_string(), 1)
    };
    BootTest {
        name: format!(
            "vm {LOCK_CHECK} lock={} pv-lock={} vcpus={vcpus} {}",
            lock.name(),
            pv_lock.map_or("default", PvLock::name),
            machine.describe()
        ),
        timeout: VM_TIMEOUT,
        outcome: Outcome::CleanExit,
        checks: vec![
            Check::Banner,
            Check::SmpOnline(smp),
            Check::LockContention {
                lock,
                vcpus: vcpus as usize,
                iterations,
                under_el2: true,
            },
            // The plain lock's short run may end inside the first time
            // slices, before every vCPU has been preempted (see
            // LOCK_CHECK_TICKET_ITERATIONS): only the PV runs must show
            // time slicing.
            Check::HypervisorSummary {
                vcpus_per_vm: vec![vcpus as usize],
                time_sliced: vcpus > smp && lock.is_paravirt(),
            },
        ],
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![vm],
        machine,
    }
}

/// Acquisitions per vCPU of the PV-lock tests: 40000 in all with 4 or 8
/// vCPUs. Without preemption that is ~40 ms of work on 2 pCPUs under TCG,
/// ten 4 ms time slices, so vCPUs are preempted holding the lock many
/// times over; with the PV locks' directed yields the runs take 2-3 s.
const LOCK_CHECK_PV_ACQUISITIONS: u64 = 40_000;
/// Acquisitions per vCPU of the plain ticket lock's test. Few: once the
/// lock is passed to a preempted vCPU, the plain lock only moves on at the
/// next slice expiry (330-450 acquisitions per second measured), so a
/// run as long as the PV ones would take minutes. 2000 in all take from a
/// few ms (no vCPU preempted while it holds a ticket) to 6.4 s (the
/// collapse from the start, forced with `first-hold-ms=10`). The test
/// proves the lock and the data check, not the speed.
const LOCK_CHECK_TICKET_ITERATIONS: u64 = 500;

/// lockbench under el2, 2 pCPUs: the PV queued lock with 4 and 8 vCPUs
/// (directed yields and kicks must happen), the PV ticket lock with 4
/// (yields must happen), the plain ticket lock with 4 (none may).
fn lockbench_vm_tests() -> Vec<BootTest> {
    let mut tests: Vec<BootTest> = [4, 8]
        .into_iter()
        .map(|vcpus| {
            lockbench_vm(
                vcpus,
                2,
                LockKind::Pv,
                LOCK_CHECK_PV_ACQUISITIONS / u64::from(vcpus),
            )
        })
        .collect();
    tests.push(lockbench_vm(
        4,
        2,
        LockKind::PvTicket,
        LOCK_CHECK_PV_ACQUISITIONS / 4,
    ));
    tests.push(lockbench_vm(
        4,
        2,
        LockKind::Ticket,
        LOCK_CHECK_TICKET_ITERATIONS,
    ));
    tests
}

/// lockbench's PV lock directly on QEMU (SMCCC 1.0, no PV services): it
/// must say it waits like the plain lock, make no yield and keep the data
/// exact. Two CPUs on the 2-core CI machine, so that the host does not
/// time-slice the vCPU threads (which would make the plain wait collapse).
fn bare_lockbench() -> BootTest {
    let iterations = 2_000;
    let machine = Machine {
        virtualization: false,
        smp: 2,
        append: Some(lockbench_settings(LockKind::Pv, iterations).to_string()),
        ..Machine::default()
    };
    BootTest {
        name: format!("guest {LOCK_CHECK} bare lock=pv {}", machine.describe()),
        timeout: timeout_for(&machine),
        outcome: Outcome::CleanExit,
        checks: vec![
            Check::Line(lockbench::PV_UNAVAILABLE),
            Check::LockContention {
                lock: LockKind::Pv,
                vcpus: machine.smp as usize,
                iterations,
                under_el2: false,
            },
        ],
        dt_edit: None,
        kernel: Kernel::Guest(LOCK_CHECK),
        vms: Vec::new(),
        machine,
    }
}

/// pv-check directly on QEMU: SMCCC 1.0, nothing offered, every call
/// answers NOT_SUPPORTED.
fn bare_pv_check() -> BootTest {
    let machine = Machine {
        virtualization: false,
        append: Some(pv_check_bootargs(&BARE_EXPECT)),
        ..Machine::default()
    };
    BootTest {
        name: format!("guest {PV_CHECK} bare {}", machine.describe()),
        timeout: timeout_for(&machine),
        outcome: Outcome::CleanExit,
        checks: vec![
            Check::Line("pv-check: nothing offered"),
            Check::PvServices {
                expect: BARE_EXPECT,
                vcpus: machine.smp as usize,
            },
        ],
        dt_edit: None,
        kernel: Kernel::Guest(PV_CHECK),
        vms: Vec::new(),
        machine,
    }
}

/// The payload without an Image header (`guests::RAW_GUEST`).
const RAW: &str = crate::guests::RAW_GUEST;

/// Where QEMU's `-kernel` and el2 put an image without a header: RAM base
/// + 0x80000, entered at its first byte.
fn raw_entry_line() -> String {
    format!(
        "raw-image: entered at {:#018x}, x0 ",
        vm::RAM_BASE + crate::image::TEXT_OFFSET
    )
}

/// What raw-image prints when the loader kept the boot protocol, and its
/// last line.
fn raw_checks(device_tree: Option<u64>) -> Vec<Check> {
    let magic = match device_tree {
        Some(ipa) => Check::Lines {
            text: format!("{}{ipa:#018x}: device tree magic ok", raw_entry_line()),
            count: 1,
        },
        None => Check::Lines {
            text: ": device tree magic ok".into(),
            count: 1,
        },
    };
    vec![
        Check::Lines {
            text: raw_entry_line(),
            count: 1,
        },
        magic,
        Check::Line("raw-image: powering off"),
    ]
}

/// raw-image directly on QEMU: the reference for what QEMU's `-kernel`
/// does with an image without a header.
fn bare_raw_image() -> BootTest {
    let machine = Machine {
        virtualization: false,
        smp: 1,
        ..Machine::default()
    };
    BootTest {
        name: format!("guest {RAW} bare {}", machine.describe()),
        timeout: timeout_for(&machine),
        outcome: Outcome::CleanExit,
        checks: raw_checks(None),
        dt_edit: None,
        kernel: Kernel::Guest(RAW),
        vms: Vec::new(),
        machine,
    }
}

/// raw-image in a VM: el2 places it as QEMU does and enters it with x0 =
/// the VM's device tree, in the top 2 MiB of its RAM.
fn raw_image_vm() -> BootTest {
    let machine = Machine {
        smp: 1,
        ..Machine::default()
    };
    let vm = VmConfig {
        guest: RAW.into(),
        ..VmConfig::smp_demo(1, "", 1)
    };
    let device_tree = vm::RAM_BASE + vm.memory - (2 << 20);
    let mut checks = vec![Check::Banner];
    checks.extend(raw_checks(Some(device_tree)));
    checks.push(Check::HypervisorSummary {
        vcpus_per_vm: vec![1],
        time_sliced: false,
    });
    BootTest {
        name: format!("vm {RAW} vcpus=1 {}", machine.describe()),
        timeout: VM_TIMEOUT,
        outcome: Outcome::CleanExit,
        checks,
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![vm],
        machine,
    }
}

/// What pv-check finds on a machine without a hypervisor.
const BARE_EXPECT: Expect = Expect {
    kvm: Some(false),
    lock: None,
    steal: Steal::Unavailable,
    overcommit: None,
    control: false,
    // QEMU 7.2's transports are legacy ones (`virtio-mmio.force-legacy`
    // defaults to on); el2's report 2 (pvlock_abi::virtio_mmio::VERSION).
    virtio_version: pvlock_abi::virtio_mmio::VERSION_LEGACY,
};

/// The boot tests of VMs under el2.
pub fn vm_tests() -> Vec<BootTest> {
    let mut tests = Vec::new();
    // One VM with more vCPUs than pCPUs: every vCPU must make progress.
    for smp in [2, 4] {
        tests.push(vm_test(
            &format!("{DEMO} vcpus=8"),
            Machine {
                smp,
                ..Machine::default()
            },
            vec![VmConfig::smp_demo(8, DEMO_BOOTARGS, 1)],
        ));
    }
    // Two VMs sharing the same two pCPUs.
    let shared = VmConfig {
        affinity: vec![0, 1],
        ..VmConfig::smp_demo(4, DEMO_BOOTARGS, 2)
    };
    tests.push(vm_test(
        &format!("{DEMO} 2 VMs vcpus=4 affinity=0,1"),
        Machine {
            smp: 2,
            ..Machine::default()
        },
        vec![shared],
    ));
    // Scale: a VM with the most vCPUs the binding allows (64), time-sliced
    // on 4 pCPUs; and VMs on 64 pCPUs in 4 clusters, where most pCPUs idle
    // and every wake-up and IPI crosses the whole machine. (64 vCPUs
    // spinning on 64 pCPUs would measure only how QEMU's threads share
    // this machine's 2 cores.) Less work per round than the other tests:
    // 64 vCPUs share 4 pCPUs.
    tests.push(vm_test(
        &format!("{DEMO} vcpus=64"),
        Machine {
            smp: 4,
            clusters: Some(2),
            ..Machine::default()
        },
        vec![VmConfig::smp_demo(64, "rounds=3 work=20000", 1)],
    ));
    tests.push(vm_test(
        &format!("{DEMO} 2 VMs vcpus=4"),
        Machine {
            smp: 64,
            clusters: Some(4),
            ..Machine::default()
        },
        vec![VmConfig::smp_demo(4, DEMO_BOOTARGS, 2)],
    ));
    // The PSCI answer only el2 gives (QEMU does not check CPU_ON's entry).
    let mut strict = vm_test(
        &format!("{DEMO} psci-checks=all vcpus=4"),
        Machine {
            smp: 2,
            ..Machine::default()
        },
        vec![VmConfig::smp_demo(
            4,
            &format!("{DEMO_BOOTARGS} psci-checks=all"),
            1,
        )],
    );
    strict.checks.push(Check::Lines {
        text: PsciResult::pass(PsciCheck::EntryOutsideRam).to_string(),
        count: 1,
    });
    tests.push(strict);
    // A VM whose description is bad is reported by node and property, and
    // the VM beside it still runs to completion.
    let mut bad = vm_test(
        &format!("{DEMO} vm@1 without vcpus beside a good VM"),
        Machine {
            smp: 2,
            ..Machine::default()
        },
        vec![VmConfig::smp_demo(2, DEMO_BOOTARGS, 2)],
    );
    bad.dt_edit = Some(DtEdit::RemoveProperty {
        node: "vm@1",
        property: "vcpus",
    });
    // Only vm0 runs: its checks once, and its summary alone.
    bad.checks = vec![Check::Banner, Check::SmpOnline(2)];
    bad.checks.extend(demo_checks(2, DEMO_ROUNDS, 1));
    bad.checks.extend([
        Check::Line(
            "VM not started: device tree node /chosen/vm@1, property \"vcpus\": property missing",
        ),
        Check::HypervisorSummary {
            vcpus_per_vm: vec![2],
            time_sliced: false,
        },
    ]);
    tests.push(bad);
    // Fault injection (`el2.fail-alloc=vm1`): vm1 is created once per heap
    // allocation its creation makes, the n-th time with the n-th refused,
    // then once more per allocation with the heap exhausted from the n-th
    // on. Every attempt must fail with an error and give everything back
    // (el2 checks the heap and the RAM's ownership after each); then vm1
    // is created and both VMs do their work.
    let mut oom = vm_test(
        &format!("{DEMO} fail-alloc=vm1 beside a good VM"),
        Machine {
            smp: 2,
            append: Some("el2.fail-alloc=vm1".into()),
            ..Machine::default()
        },
        vec![VmConfig::smp_demo(2, DEMO_BOOTARGS, 2)],
    );
    oom.checks.extend([
        Check::Line("fail-alloc: vm vm1: "),
        Check::Lines {
            text: "refused one at a time and with the heap exhausted from each".into(),
            count: 1,
        },
        Check::Lines {
            text: "VM not started".into(),
            count: 0,
        },
    ]);
    tests.push(oom);
    // PSCI SYSTEM_RESET restarts the VM from its kernel: the guest boots
    // again (its DT says reset count 1) and then does its work.
    let mut reset = vm_test(
        &format!("{DEMO} selftest=reset vcpus=2"),
        Machine {
            smp: 2,
            ..Machine::default()
        },
        vec![VmConfig::smp_demo(
            2,
            &format!("{DEMO_BOOTARGS} selftest=reset"),
            1,
        )],
    );
    reset.checks.extend([
        Check::Lines {
            text: "smp-demo: selftest: requesting SYSTEM_RESET".into(),
            count: 1,
        },
        Check::Lines {
            text: "smp-demo: selftest: restarted after 1 reset(s)".into(),
            count: 1,
        },
        Check::Line("restarting (SYSTEM_RESET)"),
        Check::Line("summary: vm vm0: 2 vCPUs, resets 1,"),
    ]);
    tests.push(reset);
    // An access outside a VM's RAM must come back as an abort that guest
    // reports, while a well-behaved VM beside it finishes its work.
    let machine = Machine {
        smp: 2,
        ..Machine::default()
    };
    // One vCPU: the guest stops at the abort, before it would start others.
    let abort = VmConfig::smp_demo(1, "selftest=abort", 1);
    let good = VmConfig::smp_demo(4, DEMO_BOOTARGS, 1);
    let mut checks = vec![
        Check::Banner,
        Check::GuestFatal(past_ram(abort.memory)),
        Check::Line("outside its memory; synchronous external abort injected"),
    ];
    checks.extend(demo_checks(4, DEMO_ROUNDS, 1));
    checks.push(Check::HypervisorSummary {
        vcpus_per_vm: vec![1, 4],
        time_sliced: false,
    });
    tests.push(BootTest {
        name: format!(
            "vm {DEMO} selftest=abort beside a good VM {}",
            machine.describe()
        ),
        timeout: VM_TIMEOUT,
        outcome: Outcome::GuestFatal,
        checks,
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![abort, good],
        machine,
    });
    tests.push(raw_image_vm());
    tests.extend(pv_check_vm_tests());
    tests.extend(lockbench_vm_tests());
    tests
}

/// All boot tests, in the order they run.
///
/// The CPU-model x topology matrix runs under `-icount`, where virtual time
/// is exact and the tick counts can be checked strictly; the same machines
/// with real parallel vCPU threads (multi-threaded TCG) exercise SMP
/// bring-up races, with a loose tick check.
pub fn boot_tests() -> Vec<BootTest> {
    let mut tests = Vec::new();
    for cpu in CPUS {
        for (smp, clusters) in TOPOLOGIES {
            tests.push(boot(Machine {
                cpu: cpu.into(),
                smp,
                clusters,
                icount: true,
                ..Machine::default()
            }));
        }
    }
    // 64 pCPUs in 4 clusters: a Kunpeng-class core count (QEMU's virt
    // gives 16 CPUs per Aff1 value: MPIDRs 0.0.0.0 .. 0.0.3.15).
    for (smp, clusters) in [(4, None), (8, Some(2)), (64, Some(4))] {
        tests.push(boot(Machine {
            smp,
            clusters,
            ..Machine::default()
        }));
    }
    tests.push(boot(Machine {
        uboot: true,
        ..Machine::default()
    }));
    tests.push(bad_device_tree());
    tests.push(unstartable_cpu());
    tests.push(selftest(
        "undef",
        &["Unknown reason", "undefined", "Undefined"],
    ));
    tests.push(selftest("stack-overflow", &["stack overflow"]));
    tests.push(panic_on_every_cpu());
    tests.push(bare_demo(Machine::default()));
    tests.push(bare_demo(Machine {
        smp: 1,
        ..Machine::default()
    }));
    tests.push(bare_demo(Machine {
        cpu: "cortex-a57".into(),
        smp: 8,
        clusters: Some(2),
        ..Machine::default()
    }));
    tests.push(bare_demo(Machine {
        cpu: "neoverse-n1".into(),
        smp: 2,
        icount: true,
        ..Machine::default()
    }));
    let ram = vm::parse_size(&Machine::default().mem).expect("the default --mem is a size");
    tests.push(bare_fault("abort", past_ram(ram)));
    tests.push(bare_fault("undef", "undefined instruction".into()));
    tests.push(bare_pv_check());
    tests.push(bare_lockbench());
    tests.push(bare_raw_image());
    tests
}

/// Judges a finished run: Ok, or the first reason it failed.
pub fn judge(test: &BootTest, run: &qemu::Outcome) -> Result<(), String> {
    match test.outcome {
        Outcome::CleanExit => {
            if let Some(why) = run.failure() {
                return Err(why);
            }
        }
        Outcome::Fatal => {
            if !run.fatal {
                return Err(match &run.ending {
                    Ending::Exited(_) => format!(
                        "expected a crash report ({FATAL_MARKER}) but the machine stopped \
                         without one ({})",
                        run.ending
                    ),
                    other => format!("expected a crash report ({FATAL_MARKER}); {other}"),
                });
            }
            if !matches!(run.ending, Ending::Exited(_)) {
                return Err(run.ending.to_string());
            }
        }
        Outcome::FatalThenStopsAt(pattern) => {
            if !run.fatal || run.guest_fatal {
                return Err(format!("expected {FATAL_MARKER} (and no guest crash)"));
            }
            if run.ending != Ending::Stopped(pattern) {
                return Err(format!(
                    "expected the console to show {pattern:?} after the report; {}",
                    run.ending
                ));
            }
        }
        Outcome::StopsAt(pattern) => {
            if run.fatal || run.guest_fatal {
                return Err(format!(
                    "the console shows {FATAL_MARKER} or {GUEST_FATAL_MARKER}"
                ));
            }
            if run.ending != Ending::Stopped(pattern) {
                return Err(format!(
                    "expected the console to show {pattern:?}; {}",
                    run.ending
                ));
            }
        }
        Outcome::GuestFatal => {
            if run.fatal {
                return Err(format!("the console shows {FATAL_MARKER}"));
            }
            if !run.guest_fatal {
                return Err(format!(
                    "expected a guest crash report ({GUEST_FATAL_MARKER}); {}",
                    run.ending
                ));
            }
            if !matches!(&run.ending, Ending::Exited(s) if s.success()) {
                return Err(format!(
                    "the guest reported its crash but the machine did not power off: {}",
                    run.ending
                ));
            }
        }
    }
    let lines: Vec<&str> = run.lines().collect();
    for check in &test.checks {
        check.apply(&lines)?;
    }
    Ok(())
}

impl Check {
    fn apply(&self, lines: &[&str]) -> Result<(), String> {
        match self {
            Check::Banner => {
                let banner = lines.iter().position(|l| l.contains(BANNER));
                let first_report = lines
                    .iter()
                    .position(|l| l.contains("smp: ") || l.contains("tick: cpu "));
                match (banner, first_report) {
                    (None, _) => Err(format!("no banner line ({BANNER:?})")),
                    (Some(b), Some(r)) if r < b => Err(format!(
                        "the banner ({BANNER:?}) appears only after line {:?}",
                        lines[r]
                    )),
                    _ => Ok(()),
                }
            }
            Check::Line(text) => {
                if lines.iter().any(|l| l.contains(text)) {
                    Ok(())
                } else {
                    Err(format!("no line containing {text:?}"))
                }
            }
            Check::AfterFatal(texts) => {
                let Some(at) = lines.iter().position(|l| l.contains(FATAL_MARKER)) else {
                    return Err(format!("no {FATAL_MARKER} line"));
                };
                if lines[at..]
                    .iter()
                    .any(|l| texts.iter().any(|t| l.contains(t)))
                {
                    Ok(())
                } else {
                    Err(format!(
                        "the crash report does not contain any of {texts:?}"
                    ))
                }
            }
            Check::Lines { text, count } => {
                let n = lines.iter().filter(|l| l.contains(text.as_str())).count();
                if n == *count {
                    Ok(())
                } else {
                    Err(format!("{n} lines contain {text:?}, expected {count}"))
                }
            }
            Check::DemoProgress { vcpus, rounds, vms } => {
                check_demo_progress(lines, *vcpus, *rounds, *vms)
            }
            Check::HypervisorSummary {
                vcpus_per_vm,
                time_sliced,
            } => check_summary(lines, vcpus_per_vm, *time_sliced),
            Check::GuestFatal(text) => {
                if lines
                    .iter()
                    .any(|l| l.contains(GUEST_FATAL_MARKER) && l.contains(text.as_str()))
                {
                    Ok(())
                } else {
                    Err(format!("no {GUEST_FATAL_MARKER} line containing {text:?}"))
                }
            }
            Check::SmpOnline(n) => check_smp(lines, *n),
            Check::Linux(expect) => crate::linuxtest::check(lines, expect),
            Check::LinuxPv(expect) => crate::linuxpvtest::check(lines, expect),
            Check::LockSoak { vcpus } => crate::soak::check_lock(lines, *vcpus),
            Check::Ptp { reads } => crate::ptptest::check(lines, *reads),
            Check::Irq {
                vcpus,
                rounds,
                ping,
            } => crate::irqtest::check(lines, *vcpus, *rounds, *ping),
            Check::Level { vcpu0 } => crate::leveltest::check(lines, *vcpu0),
            Check::Hostile { vm } => crate::hostiletest::check(lines, *vm),
            Check::Debug { vcpus, features } => crate::debugtest::check(lines, *vcpus, *features),
            Check::Pmu { vcpus, expect } => crate::pmutest::check(lines, *vcpus, *expect),
            Check::Shares {
                tricky_vm,
                owed_percent,
            } => {
                let owed: Vec<f64> = owed_percent.iter().map(|&p| f64::from(p) / 100.0).collect();
                crate::sharetest::check(lines, *tricky_vm, &owed)
            }
            Check::ShortSlices { vm } => crate::sharetest::check_short_slices(lines, *vm),
            Check::PvServices { expect, vcpus } => check_pv_check(lines, expect, *vcpus),
            Check::LockContention {
                lock,
                vcpus,
                iterations,
                under_el2,
            } => check_lockbench(lines, *lock, *vcpus, *iterations, *under_el2),
            Check::Ticks(n, tolerance) => check_ticks(lines, *n, *tolerance),
            Check::DtError { node, property } => {
                let wanted = format!("device tree node {node}, property \"{property}\"");
                if lines
                    .iter()
                    .any(|l| l.contains(FATAL_MARKER) && l.contains(&wanted))
                {
                    Ok(())
                } else {
                    Err(format!("no {FATAL_MARKER} line naming {wanted:?}"))
                }
            }
        }
    }
}

/// Every vCPU's every round must appear `vms` times (once per VM).
fn check_demo_progress(
    lines: &[&str],
    vcpus: usize,
    rounds: u64,
    vms: usize,
) -> Result<(), String> {
    let mut seen = vec![vec![0usize; rounds as usize]; vcpus];
    let mut problems = Vec::new();
    for p in lines.iter().filter_map(|l| Progress::parse(l)) {
        match seen
            .get_mut(p.vcpu)
            .and_then(|r| r.get_mut((p.round as usize).wrapping_sub(1)))
        {
            Some(n) if p.rounds == rounds => *n += 1,
            _ => problems.push(format!(
                "unexpected progress line for vcpu {} round {}/{}",
                p.vcpu, p.round, p.rounds
            )),
        }
    }
    for (vcpu, per_round) in seen.iter().enumerate() {
        let short: Vec<usize> = (0..per_round.len())
            .filter(|&r| per_round[r] != vms)
            .map(|r| r + 1)
            .collect();
        if !short.is_empty() {
            problems.push(format!(
                "vcpu {vcpu}: rounds {short:?} not reported {vms} time(s)"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// pv-check's console: see [`Check::PvServices`].
fn check_pv_check(lines: &[&str], expect: &Expect, vcpus: usize) -> Result<(), String> {
    let mut problems = Vec::new();
    let failed: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains(pvcheck::PREFIX) && l.contains(": FAILED"))
        .collect();
    if let Some(first) = failed.first() {
        problems.push(format!("{} failed check(s), first {first:?}", failed.len()));
    }
    let mut missing = Vec::new();
    pvcheck::labels(expect, vcpus, |label| {
        let text = format!("{label}: ok");
        let n = lines.iter().filter(|l| l.contains(&text)).count();
        if n != 1 {
            missing.push(format!("{text:?} {n} times"));
        }
    });
    if !missing.is_empty() {
        problems.push(format!(
            "{} check(s) not passed exactly once: {}",
            missing.len(),
            missing.join(", ")
        ));
    }
    let truth: Vec<TruthCounts> = lines.iter().filter_map(|l| TruthCounts::parse(l)).collect();
    if expect.lock.is_some() && vcpus >= 2 {
        match truth.as_slice() {
            [t] if t.violations > 0 => problems.push(format!("{t}")),
            [t] if expect.overcommitted() == Some(true) && t.preempted == 0 => {
                problems.push(format!("the observer never saw B preempted: {t}"))
            }
            [_] => {}
            other => problems.push(format!("{} preempted-truth lines, expected 1", other.len())),
        }
    }
    if !lines.iter().any(|l| l.contains(pvcheck::ALL_PASSED)) {
        problems.push(format!("no {:?} line", pvcheck::ALL_PASSED));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// lockbench's console and el2's directed-yield counters: see
/// [`Check::LockContention`].
fn check_lockbench(
    lines: &[&str],
    lock: LockKind,
    vcpus: usize,
    iterations: u64,
    under_el2: bool,
) -> Result<(), String> {
    let mut problems = Vec::new();
    let failed: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains(lockbench::PREFIX) && l.contains(": FAILED"))
        .collect();
    if let Some(first) = failed.first() {
        problems.push(format!("{} failed check(s), first {first:?}", failed.len()));
    }
    let expected = vcpus as u64 * iterations;
    let data: Vec<DataLine> = lines.iter().filter_map(|l| DataLine::parse(l)).collect();
    match data.as_slice() {
        [d] if d.acquisitions == expected && d.lost_updates == 0 => {}
        [d] => problems.push(format!(
            "{d}: expected {expected} acquisitions ({vcpus} vCPUs x {iterations}) and 0 lost \
             updates"
        )),
        other => problems.push(format!(
            "{} \"lockbench: data ok\" lines, expected 1",
            other.len()
        )),
    }
    let guest: Vec<YieldLine> = lines.iter().filter_map(|l| YieldLine::parse(l)).collect();
    let el2: Vec<WaitYield> = lines.iter().filter_map(|l| parse_wait_yield(l)).collect();
    match (guest.as_slice(), el2.as_slice()) {
        ([g], []) if !under_el2 => {
            if g.calls != 0 || g.yielded != 0 || g.halts != 0 || g.kicks != 0 {
                problems.push(format!(
                    "directed yields or kicks without a hypervisor: {g}"
                ));
            }
        }
        ([g], [h]) if under_el2 => {
            if (g.yielded, g.calls) != (h.pv_yields, h.pv_yield_calls) {
                problems.push(format!(
                    "the guest counted {} directed-yield calls and {} yields, el2 {} and {} \
                     (pv-yield {}/{})",
                    g.calls,
                    g.yielded,
                    h.pv_yield_calls,
                    h.pv_yields,
                    h.pv_yields,
                    h.pv_yield_calls
                ));
            }
            if g.kicks != h.kicks {
                problems.push(format!(
                    "the guest's unlockers sent {} kicks, el2 carried out {}",
                    g.kicks, h.kicks
                ));
            }
            match lock {
                LockKind::Pv | LockKind::PvTicket if h.pv_yields == 0 => problems.push(format!(
                    "no successful directed yield (el2: pv-yield {}/{}): the waiters never \
                     handed a preempted vCPU their slice",
                    h.pv_yields, h.pv_yield_calls
                )),
                LockKind::Pv if g.halts == 0 || h.kicks == 0 => problems.push(format!(
                    "the queued lock's waiters never slept and were kicked ({} halts, el2: \
                     {} kicks)",
                    g.halts, h.kicks
                )),
                LockKind::PvTicket | LockKind::Ticket if g.halts != 0 || h.kicks != 0 => {
                    problems.push(format!("a ticket lock slept or kicked: {g}"))
                }
                LockKind::Ticket if g.calls != 0 || h.pv_yield_calls != 0 => problems.push(
                    format!("the plain ticket lock made directed-yield calls: {g}"),
                ),
                _ => {}
            }
        }
        (g, h) => problems.push(format!(
            "{} \"lockbench: yields\" lines and {} el2 \"wait/yield\" lines, expected 1 and {}",
            g.len(),
            h.len(),
            u8::from(under_el2)
        )),
    }
    if !lines.iter().any(|l| l.contains(lockbench::ALL_PASSED)) {
        problems.push(format!("no {:?} line", lockbench::ALL_PASSED));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// el2's per-VM directed-yield counters: the `pv-yield Y/C kicks K` part of
/// its `summary:   wait/yield:` line (`el2::sched::onspin::SpinStats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitYield {
    /// PV_SCHED_YIELD_TO calls the target took the caller's slice in.
    pub pv_yields: u64,
    /// PV_SCHED_YIELD_TO calls that asked for a yield (a valid sibling).
    pub pv_yield_calls: u64,
    /// KICK_CPU calls carried out.
    pub kicks: u64,
}

/// Parses `summary:   wait/yield: wfi 3 ... pv-yield 5/7 kicks 9` (one
/// line per VM, after the VM's `summary: vm NAME:` line).
pub fn parse_wait_yield(line: &str) -> Option<WaitYield> {
    let rest = line[line.find("summary:")? + 8..].trim_start();
    let rest = rest.strip_prefix("wait/yield:")?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    let after = |key: &str| -> Option<&str> {
        let at = words.iter().position(|w| *w == key)?;
        words.get(at + 1).copied()
    };
    let (yields, calls) = after("pv-yield")?.split_once('/')?;
    Some(WaitYield {
        pv_yields: yields.parse().ok()?,
        pv_yield_calls: calls.parse().ok()?,
        kicks: after("kicks")?.parse().ok()?,
    })
}

/// Parses `smp: N CPUs online` anywhere in a line.
fn parse_smp(line: &str) -> Option<u32> {
    let rest = &line[line.find("smp: ")? + 5..];
    let (n, tail) = rest.split_once(' ')?;
    tail.starts_with("CPUs online").then(|| n.parse().ok())?
}

fn check_smp(lines: &[&str], expected: u32) -> Result<(), String> {
    let counts: Vec<u32> = lines.iter().filter_map(|l| parse_smp(l)).collect();
    match counts.as_slice() {
        [] => Err(format!("no \"smp: {expected} CPUs online\" line")),
        [n] if *n == expected => Ok(()),
        [n] => Err(format!(
            "\"smp: {n} CPUs online\", but QEMU was given {expected} CPUs"
        )),
        many => Err(format!(
            "{} \"smp: N CPUs online\" lines (N = {many:?}); expected one with N = {expected}",
            many.len()
        )),
    }
}

/// One vCPU's line of el2's end-of-run summary.
#[derive(Clone, Debug, PartialEq)]
pub struct VcpuSummary {
    pub vm: usize,
    pub vcpu: usize,
    pub run_ms: f64,
    pub steal_ms: f64,
    pub preempted: u64,
    /// Times it blocked in WFI, if the line says.
    pub blocks: Option<u64>,
    /// Times it was scheduled in on another pCPU than the last, if the
    /// line says.
    pub migrations: Option<u64>,
}

/// Parses `summary:   vm0/vcpu3: run 12.5 ms steal 3.0 ms ... preempted 4 ...`.
pub fn parse_vcpu_summary(line: &str) -> Option<VcpuSummary> {
    let rest = line[line.find("summary:")? + 8..].trim_start();
    let (id, rest) = rest.split_once(": ")?;
    let (vm, vcpu) = id.strip_prefix("vm")?.split_once("/vcpu")?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    let after = |key: &str| -> Option<&str> {
        let at = words.iter().position(|w| *w == key)?;
        words.get(at + 1).copied()
    };
    Some(VcpuSummary {
        vm: vm.parse().ok()?,
        vcpu: vcpu.parse().ok()?,
        run_ms: after("run")?.parse().ok()?,
        steal_ms: after("steal")?.parse().ok()?,
        preempted: after("preempted")?.parse().ok()?,
        blocks: after("blocks").and_then(|w| w.parse().ok()),
        migrations: after("migrations").and_then(|w| w.parse().ok()),
    })
}

fn check_summary(lines: &[&str], vcpus_per_vm: &[usize], time_sliced: bool) -> Result<(), String> {
    if !lines.iter().any(|l| l.contains("el2: all VMs powered off")) {
        return Err("no \"el2: all VMs powered off\" line".into());
    }
    let found: Vec<VcpuSummary> = lines.iter().filter_map(|l| parse_vcpu_summary(l)).collect();
    let mut problems = Vec::new();
    for (vm, &vcpus) in vcpus_per_vm.iter().enumerate() {
        for vcpu in 0..vcpus {
            let Some(s) = found.iter().find(|s| s.vm == vm && s.vcpu == vcpu) else {
                problems.push(format!("no summary line for vm{vm}/vcpu{vcpu}"));
                continue;
            };
            if s.run_ms <= 0.0 {
                problems.push(format!("vm{vm}/vcpu{vcpu} never ran"));
            }
            if time_sliced && s.steal_ms <= 0.0 {
                problems.push(format!(
                    "vm{vm}/vcpu{vcpu} never waited for a pCPU (steal {} ms): the pCPUs \
                     were not shared",
                    s.steal_ms
                ));
            }
        }
        let preempted: u64 = found
            .iter()
            .filter(|s| s.vm == vm)
            .map(|s| s.preempted)
            .sum();
        if time_sliced && preempted == 0 {
            problems.push(format!(
                "no vCPU of vm{vm} was ever preempted: the pCPUs were not time-sliced"
            ));
        }
    }
    let expected: usize = vcpus_per_vm.iter().sum();
    if found.len() != expected {
        problems.push(format!(
            "{} vCPU summary lines, expected {expected}",
            found.len()
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// One `tick:` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tick {
    pub cpu: u32,
    pub mpidr: [u8; 4],
    pub ticks: u64,
    pub ms: u64,
    pub expected: u64,
}

/// Parses `tick: cpu I mpidr A.B.C.D: T ticks in W ms (expected E)`.
pub fn parse_tick(line: &str) -> Option<Tick> {
    let rest = &line[line.find("tick: cpu ")? + 10..];
    let (cpu, rest) = rest.split_once(" mpidr ")?;
    let (mpidr, rest) = rest.split_once(": ")?;
    let (ticks, rest) = rest.split_once(" ticks in ")?;
    let (ms, rest) = rest.split_once(" ms (expected ")?;
    let (expected, _) = rest.split_once(')')?;
    let mut aff = [0u8; 4];
    let mut parts = mpidr.split('.');
    for a in &mut aff {
        *a = parts.next()?.parse().ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(Tick {
        cpu: cpu.parse().ok()?,
        mpidr: aff,
        ticks: ticks.parse().ok()?,
        ms: ms.parse().ok()?,
        expected: expected.parse().ok()?,
    })
}

fn check_ticks(lines: &[&str], cpus: u32, tolerance: TickTolerance) -> Result<(), String> {
    let mut seen = vec![0u32; cpus as usize];
    let mut problems = Vec::new();
    for line in lines.iter().filter(|l| l.contains("tick: cpu ")) {
        let Some(t) = parse_tick(line) else {
            problems.push(format!("malformed tick line {line:?}"));
            continue;
        };
        match seen.get_mut(t.cpu as usize) {
            Some(count) => *count += 1,
            None => problems.push(format!(
                "tick line for cpu {} but QEMU was given {cpus} CPUs",
                t.cpu
            )),
        }
        let (low, high) = match tolerance {
            TickTolerance::Exact => (t.expected.saturating_sub(1), t.expected),
            TickTolerance::Loose => (1, t.expected + 2),
        };
        if !(low..=high).contains(&t.ticks) {
            problems.push(format!(
                "cpu {}: {} ticks in {} ms, expected {} (allowed {low}..={high})",
                t.cpu, t.ticks, t.ms, t.expected,
            ));
        }
    }
    let missing: Vec<usize> = (0..seen.len()).filter(|&i| seen[i] == 0).collect();
    if !missing.is_empty() {
        problems.push(format!("no tick line for cpu {missing:?}"));
    }
    let repeated: Vec<usize> = (0..seen.len()).filter(|&i| seen[i] > 1).collect();
    if !repeated.is_empty() {
        problems.push(format!("more than one tick line for cpu {repeated:?}"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// What a test guest's check lines say is wrong (irq-check, level-check):
/// a line with `prefix` and `: FAILED`; a pass line of `passes` (`<label>:
/// ok`) seen other than exactly once; the final `all_passed` line seen
/// other than exactly once. Empty if nothing is.
pub fn check_verdicts(
    lines: &[&str],
    prefix: &str,
    passes: impl IntoIterator<Item = String>,
    all_passed: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    let failed: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains(prefix) && l.contains(": FAILED"))
        .collect();
    if let Some(first) = failed.first() {
        problems.push(format!("{} failed check(s), first {first:?}", failed.len()));
    }
    let missing: Vec<String> = passes
        .into_iter()
        .filter_map(|text| {
            let n = lines.iter().filter(|l| l.contains(&text)).count();
            (n != 1).then(|| format!("{text:?} {n} times"))
        })
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "check(s) not passed exactly once: {}",
            missing.join(", ")
        ));
    }
    let passed = lines.iter().filter(|l| l.contains(all_passed)).count();
    if passed != 1 {
        problems.push(format!("{passed} {all_passed:?} lines, expected 1"));
    }
    problems
}

/// For the judges' host tests: a QEMU run that printed `console` and
/// exited with `code` after a second.
#[cfg(test)]
pub fn exited(console: &str, code: i32) -> qemu::Outcome {
    use std::os::unix::process::ExitStatusExt;
    qemu::Outcome {
        console: console.into(),
        stderr: String::new(),
        ending: qemu::Ending::Exited(std::process::ExitStatus::from_raw(code << 8)),
        duration: Duration::from_secs(1),
        fatal: console.contains(FATAL_MARKER),
        guest_fatal: console.contains(GUEST_FATAL_MARKER),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(console: &str, code: i32) -> qemu::Outcome {
        exited(console, code)
    }

    /// What smp-demo prints for `vcpus` vCPUs and `rounds` rounds, each
    /// line prefixed with `prefix` (as a hypervisor may).
    fn demo_console(vcpus: usize, rounds: u64, prefix: &str) -> String {
        use guest_driver::mpidr::Mpidr;
        let mut s = String::new();
        let mut line = |l: String| s += &format!("{prefix}{l}\r\n");
        line(PsciResult::pass(PsciCheck::UnknownMpidr).to_string() + " (mpidr 0.255.0.0)");
        line(PsciResult::pass(PsciCheck::BootCpuAlreadyOn).to_string() + " (vcpu 0)");
        for v in 1..vcpus {
            line(format!(
                "{} (vcpu {v})",
                PsciResult::pass(PsciCheck::RunningCpuAlreadyOn)
            ));
            line(format!(
                "{} (vcpu {v})",
                PsciResult::pass(PsciCheck::AffinityOn)
            ));
        }
        for round in 1..=rounds {
            for vcpu in 0..vcpus {
                let p = Progress {
                    vcpu,
                    mpidr: Mpidr::from_raw(vcpu as u64),
                    round,
                    rounds,
                };
                line(format!("{p} at 1.000 ms"));
            }
        }
        for v in 1..vcpus {
            line(format!(
                "{} (vcpu {v})",
                PsciResult::pass(PsciCheck::AffinityOff)
            ));
        }
        line(Summary { vcpus }.to_string());
        s
    }

    /// el2's end-of-run summary for VMs of these vCPU counts, every vCPU
    /// preempted once.
    fn el2_summary(vcpus_per_vm: &[usize]) -> String {
        let mut s = String::from("el2: all VMs powered off\r\n");
        for (vm, &vcpus) in vcpus_per_vm.iter().enumerate() {
            for vcpu in 0..vcpus {
                s += &format!(
                    "summary:   vm{vm}/vcpu{vcpu}: run 9.0 ms steal 3.0 ms blocked 0.0 ms in 2 \
                     preempted 1 blocks 0 yields 0 yielded-to 0 migrations 0\r\n"
                );
            }
        }
        s
    }

    #[test]
    fn bare_demo_passes_and_its_failures_are_explained() {
        let t = boot_tests()
            .into_iter()
            .find(|t| t.name == "guest smp-demo bare max,pauth=off smp=4")
            .unwrap();
        assert_eq!(t.kernel, Kernel::Guest("smp-demo"));
        assert!(!t.machine.virtualization);
        let good = demo_console(4, DEMO_ROUNDS, "");
        assert_eq!(judge(&t, &run(&good, 0)), Ok(()));
        let missing = good.replace("vcpu 2 mpidr 0.0.0.2 round 3/3", "vcpu 2 stalled");
        assert!(
            judge(&t, &run(&missing, 0))
                .unwrap_err()
                .contains("vcpu 2: rounds [3]")
        );
        let no_summary = good.replace("checksums ok", "checksums bad");
        assert!(
            judge(&t, &run(&no_summary, 0))
                .unwrap_err()
                .contains("0 lines")
        );
        let crashed = good + "GUEST FATAL: panic on vcpu 1\r\n";
        assert!(
            judge(&t, &run(&crashed, 0))
                .unwrap_err()
                .contains("GUEST FATAL")
        );
    }

    #[test]
    fn two_vms_must_both_report() {
        let t = vm_tests()
            .into_iter()
            .find(|t| t.name.contains("2 VMs"))
            .unwrap();
        let el2 = "el2: pvlock hypervisor v0.1\r\nsmp: 2 CPUs online\r\n";
        let both = format!(
            "{el2}{}{}{}",
            demo_console(4, 3, "vm0: "),
            demo_console(4, 3, "vm1: "),
            el2_summary(&[4, 4])
        );
        assert_eq!(judge(&t, &run(&both, 0)), Ok(()));
        let unsliced = both.replace("preempted 1", "preempted 0");
        assert!(
            judge(&t, &run(&unsliced, 0))
                .unwrap_err()
                .contains("no vCPU of vm0 was ever preempted")
        );
        let one = format!(
            "{el2}{}{}",
            demo_console(4, 3, "vm0: "),
            el2_summary(&[4, 4])
        );
        let err = judge(&t, &run(&one, 0)).unwrap_err();
        assert!(err.contains("not reported 2 time(s)"), "{err}");
    }

    #[test]
    fn guest_fault_tests_need_the_report_and_a_clean_power_off() {
        let t = boot_tests()
            .into_iter()
            .find(|t| t.name.starts_with("guest smp-demo bare selftest=abort"))
            .unwrap();
        let ok = "smp-demo: selftest\r\nGUEST FATAL: vcpu 0 (mpidr 0.0.0.0): synchronous external \
                  abort at 0x80000000 (data abort, read)\r\n";
        assert_eq!(judge(&t, &run(ok, 0)), Ok(()));
        assert!(
            judge(&t, &run(ok, 1))
                .unwrap_err()
                .contains("did not power off")
        );
        let wrong = ok.replace("0x80000000", "0x90000000");
        assert!(judge(&t, &run(&wrong, 0)).is_err());
        assert!(judge(&t, &run("smp-demo: selftest\r\n", 0)).is_err());
    }

    #[test]
    fn raw_image_must_be_entered_where_qemu_enters_it() {
        let t = raw_image_vm();
        assert_eq!(t.name, "vm raw-image vcpus=1 max,pauth=off smp=1");
        let ok = "el2: pvlock hypervisor v0.1\r\n\
                  raw-image: entered at 0x0000000040080000, x0 0x0000000043e00000: device tree magic ok\r\n\
                  raw-image: powering off\r\n\
                  el2: all VMs powered off\r\n\
                  summary:   vm0/vcpu0: run 3.9 ms steal 1.4 ms blocked 0.0 ms in 1 preempted 0 blocks 0\r\n";
        judge(&t, &run(ok, 0)).unwrap();
        for wrong in [
            ok.replace(
                "entered at 0x0000000040080000",
                "entered at 0x0000000040000000",
            ),
            ok.replace("x0 0x0000000043e00000", "x0 0x0000000048000000"),
            ok.replace("magic ok", "magic 0x0000000000000000: not a device tree"),
            ok.replace("raw-image: powering off\r\n", ""),
        ] {
            assert!(judge(&t, &run(&wrong, 0)).is_err(), "{wrong}");
        }
        let bare = bare_raw_image();
        assert_eq!(bare.kernel, Kernel::Guest("raw-image"));
        assert!(!bare.machine.virtualization);
    }

    #[test]
    fn vm_tests_are_separate_and_describe_their_vms() {
        let vm = vm_tests();
        assert_eq!(vm.len(), 23);
        let names: Vec<&str> = vm.iter().map(|t| t.name.as_str()).collect();
        for name in [
            "vm smp-demo fail-alloc=vm1 beside a good VM max,pauth=off smp=2",
            "vm smp-demo vcpus=64 max,pauth=off smp=4 clusters=2",
            "vm smp-demo 2 VMs vcpus=4 max,pauth=off smp=64 clusters=4",
        ] {
            assert!(names.contains(&name), "{name} missing from {names:?}");
        }
        assert!(vm.iter().all(|t| t.kernel == Kernel::El2));
        assert!(
            vm.iter()
                .all(|t| !t.vms.is_empty() && t.machine.virtualization)
        );
        assert!(boot_tests().iter().all(|t| t.vms.is_empty()));
        let eight = &vm[0];
        assert_eq!(eight.name, "vm smp-demo vcpus=8 max,pauth=off smp=2");
        assert_eq!(eight.vms[0].vcpus, 8);
    }

    fn good_console(n: u32) -> String {
        let mut s = String::from("el2: pvlock hypervisor v0.1\r\n");
        s += &format!("smp: {n} CPUs online\r\n");
        for i in (0..n).rev() {
            s += &format!("tick: cpu {i} mpidr 0.0.0.{i}: 99 ticks in 100 ms (expected 100)\r\n");
        }
        s + "el2: no VM configured, powering off\r\n"
    }

    #[test]
    fn matrix_has_the_required_tests() {
        let names: Vec<String> = boot_tests().into_iter().map(|t| t.name).collect();
        assert_eq!(names.len(), 27, "{names:?}");
        assert!(names.contains(&"guest raw-image bare max,pauth=off smp=1".to_string()));
        assert!(names.contains(&"boot max,pauth=off smp=64 clusters=4".to_string()));
        assert!(names.contains(&"selftest panic-all max,pauth=off smp=8".to_string()));
        assert!(names.contains(&"guest lockbench bare lock=pv max,pauth=off smp=2".to_string()));
        assert!(names.contains(&"guest pv-check bare max,pauth=off smp=4".to_string()));
        assert!(names.contains(&"guest smp-demo bare max,pauth=off smp=4".to_string()));
        assert!(names.contains(&"guest smp-demo bare neoverse-n1 smp=2 icount".to_string()));
        assert!(names.contains(&"boot max,pauth=off smp=8 clusters=2".to_string()));
        assert!(names.contains(&"boot cortex-a57 smp=1 icount".to_string()));
        assert!(names.contains(&"boot neoverse-n1 smp=8 clusters=2 icount".to_string()));
        assert!(names.iter().any(|n| n.starts_with("dt gic-without-reg")));
        assert!(names.iter().any(|n| n.starts_with("dt unstartable-cpu")));
        assert!(names.contains(&"boot max,pauth=off smp=4 uboot".to_string()));
        assert!(names.iter().any(|n| n.starts_with("selftest undef")));
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("selftest stack-overflow"))
        );
    }

    #[test]
    fn clean_boot_passes() {
        let t = &boot_tests()[1]; // cortex-a57 smp=4
        assert_eq!(judge(t, &run(&good_console(4), 0)), Ok(()));
    }

    #[test]
    fn clean_boot_failures_are_explained() {
        let t = &boot_tests()[1];
        let wrong_smp = good_console(4).replace("smp: 4", "smp: 3");
        assert!(
            judge(t, &run(&wrong_smp, 0))
                .unwrap_err()
                .contains("smp: 3")
        );
        let missing = good_console(4).replace("tick: cpu 2 ", "tock: cpu 2 ");
        assert!(judge(t, &run(&missing, 0)).unwrap_err().contains("[2]"));
        let slow = good_console(4).replace("99 ticks", "49 ticks");
        assert!(judge(t, &run(&slow, 0)).unwrap_err().contains("49 ticks"));
        let fatal = good_console(4) + "EL2 FATAL: oops\r\n";
        assert!(judge(t, &run(&fatal, 0)).unwrap_err().contains("EL2 FATAL"));
        assert!(
            judge(t, &run(&good_console(4), 1))
                .unwrap_err()
                .contains("status 1")
        );
    }

    #[test]
    fn loose_ticks_need_at_least_one_and_not_too_many() {
        let t = boot_tests()
            .into_iter()
            .find(|t| t.name == "boot max,pauth=off smp=4")
            .unwrap();
        let few = good_console(4).replace(
            "cpu 2 mpidr 0.0.0.2: 99 ticks",
            "cpu 2 mpidr 0.0.0.2: 3 ticks",
        );
        assert_eq!(judge(&t, &run(&few, 0)), Ok(()));
        let none = good_console(4).replace(
            "cpu 2 mpidr 0.0.0.2: 99 ticks",
            "cpu 2 mpidr 0.0.0.2: 0 ticks",
        );
        assert!(
            judge(&t, &run(&none, 0))
                .unwrap_err()
                .contains("cpu 2: 0 ticks")
        );
        let fast = good_console(4).replace("99 ticks", "103 ticks");
        assert!(judge(&t, &run(&fast, 0)).is_err());
    }

    #[test]
    fn bad_dt_test_needs_the_node_and_property() {
        let t = bad_device_tree();
        let ok = "el2: pvlock hypervisor v0.1.0\r\n*** EL2 FATAL: cannot use the boot device tree: \
                  device tree node /intc@8000000, property \"reg\": property missing ***\r\n";
        assert_eq!(judge(&t, &run(ok, 0)), Ok(()));
        let other = ok.replace("\"reg\"", "\"interrupts\"");
        assert!(judge(&t, &run(&other, 0)).is_err());
    }

    #[test]
    fn selftest_needs_marker_and_text() {
        let t = boot_tests()
            .into_iter()
            .find(|t| t.name.starts_with("selftest undef"))
            .unwrap();
        let ok = "el2: pvlock hypervisor\r\nEL2 FATAL on cpu 0\r\n  EC 0x00 Unknown reason\r\n";
        assert_eq!(judge(&t, &run(ok, 0)), Ok(()));
        let wrong = "el2: pvlock hypervisor\r\nEL2 FATAL on cpu 0\r\n  data abort\r\n";
        assert!(judge(&t, &run(wrong, 0)).is_err());
        assert!(judge(&t, &run(&good_console(4), 0)).is_err());
    }

    #[test]
    fn vcpu_summary_lines_parse_and_judge() {
        let line = "summary:   vm1/vcpu3: run 50.0 ms steal 48.1 ms blocked 0.0 ms in 13 \
                    preempted 12 blocks 0 yields 0 yielded-to 0 migrations 1";
        assert_eq!(
            parse_vcpu_summary(line),
            Some(VcpuSummary {
                vm: 1,
                vcpu: 3,
                run_ms: 50.0,
                steal_ms: 48.1,
                preempted: 12,
                blocks: Some(0),
                migrations: Some(1),
            })
        );
        let lines = [
            "el2: all VMs powered off",
            "summary:   vm0/vcpu0: run 5.0 ms steal 1.0 ms blocked 0.0 ms in 2 preempted 1 blocks 0",
            "summary:   vm0/vcpu1: run 5.0 ms steal 0.0 ms blocked 0.0 ms in 1 preempted 0 blocks 0",
        ];
        assert_eq!(check_summary(&lines, &[2], false), Ok(()));
        let err = check_summary(&lines, &[2], true).unwrap_err();
        assert!(err.contains("vm0/vcpu1 never waited"), "{err}");
        // One vCPU never preempted is a schedule, not a failure; none is.
        let waited: Vec<String> = lines
            .iter()
            .map(|l| l.replace("steal 0.0", "steal 2.0"))
            .collect();
        let waited: Vec<&str> = waited.iter().map(String::as_str).collect();
        assert_eq!(check_summary(&waited, &[2], true), Ok(()));
        let none: Vec<String> = waited
            .iter()
            .map(|l| l.replace("preempted 1", "preempted 0"))
            .collect();
        let none: Vec<&str> = none.iter().map(String::as_str).collect();
        let err = check_summary(&none, &[2], true).unwrap_err();
        assert!(err.contains("no vCPU of vm0 was ever preempted"), "{err}");
        assert!(
            check_summary(&lines, &[3], false)
                .unwrap_err()
                .contains("vm0/vcpu2")
        );
        assert!(check_summary(&lines[1..], &[2], false).is_err());
    }

    /// What a passing pv-check run prints for `expect` and `vcpus`.
    fn pv_console(expect: &Expect, vcpus: usize, prefix: &str) -> String {
        let mut s = String::new();
        pvcheck::labels(expect, vcpus, |l| {
            s += &format!("{prefix}{l}: ok (detail)\r\n")
        });
        if expect.lock.is_some() && vcpus >= 2 {
            let t = TruthCounts {
                windows: 5000,
                preempted: 40,
                violations: 0,
            };
            s += &format!("{prefix}{t}\r\n");
        }
        s + prefix + pvcheck::ALL_PASSED + "\r\n"
    }

    #[test]
    fn pv_check_tests_cover_every_variant() {
        let names: Vec<String> = vm_tests()
            .into_iter()
            .filter(|t| t.name.starts_with("vm pv-check"))
            .map(|t| t.name)
            .collect();
        assert_eq!(
            names,
            [
                "vm pv-check pv-lock=seed-v2 vcpus=4 max,pauth=off smp=2",
                "vm pv-check pv-lock=seed-v3 vcpus=4 max,pauth=off smp=2",
                "vm pv-check pv-lock=openeuler vcpus=4 max,pauth=off smp=2",
                "vm pv-check pv-lock=anolis vcpus=4 max,pauth=off smp=2",
                "vm pv-check pv-lock=none vcpus=4 max,pauth=off smp=2",
                "vm pv-check pv-lock=none pv-time=off vcpus=4 max,pauth=off smp=2",
                "vm pv-check defaults vcpus=2 max,pauth=off smp=2",
                "vm pv-check control=on vcpus=4 max,pauth=off smp=2",
            ]
        );
        // Only the control VM is one, and only it is told to expect it.
        for t in vm_tests()
            .into_iter()
            .filter(|t| t.name.starts_with("vm pv-check"))
        {
            let control = t.name.contains("control=on");
            assert_eq!(t.vms[0].control, control.then_some(true), "{}", t.name);
            assert_eq!(
                t.vms[0].bootargs.contains("expect-control=yes"),
                control,
                "{}",
                t.name
            );
        }
        let t = vm_tests()
            .into_iter()
            .find(|t| t.name.starts_with("vm pv-check pv-lock=anolis"))
            .unwrap();
        assert_eq!(t.vms[0].guest, "pv-check");
        assert_eq!(
            t.vms[0].bootargs,
            "expect-kvm=yes expect-lock=anolis expect-steal=yes"
        );
        assert_eq!(t.vms[0].pv_lock, Some(PvLock::Variant(Variant::Anolis)));
        let defaults = vm_tests()
            .into_iter()
            .find(|t| t.name.starts_with("vm pv-check defaults"))
            .unwrap();
        assert_eq!(
            (defaults.vms[0].pv_lock, defaults.vms[0].pv_time),
            (None, None)
        );
        assert_eq!(
            defaults.vms[0].bootargs,
            "expect-kvm=yes expect-lock=seed-v2 expect-steal=no"
        );
    }

    #[test]
    fn pv_check_judge() {
        let t = vm_tests()
            .into_iter()
            .find(|t| t.name.starts_with("vm pv-check pv-lock=openeuler"))
            .unwrap();
        let Some(Check::PvServices { expect, vcpus }) = t
            .checks
            .iter()
            .find(|c| matches!(c, Check::PvServices { .. }))
            .cloned()
        else {
            panic!("no pv-check check");
        };
        assert_eq!(vcpus, 4);
        let el2 = "el2: pvlock hypervisor v0.1\r\nsmp: 2 CPUs online\r\n";
        let good = format!("{el2}{}{}", pv_console(&expect, 4, ""), el2_summary(&[4]));
        assert_eq!(judge(&t, &run(&good, 0)), Ok(()));

        let missing = good.replace("pv-check: kick wakes a vCPU waiting in WFI: ok", "");
        let err = judge(&t, &run(&missing, 0)).unwrap_err();
        assert!(err.contains("kick wakes a vCPU"), "{err}");

        let failed = good.clone() + "pv-check: vcpu 2: init_cpu: FAILED: PV-lock: refused\r\n";
        assert!(
            judge(&t, &run(&failed, 0))
                .unwrap_err()
                .contains("1 failed check(s)")
        );

        let violated = good.replace("0 violations", "2 violations");
        assert!(
            judge(&t, &run(&violated, 0))
                .unwrap_err()
                .contains("2 violations")
        );

        let never = good.replace("40 with B preempted", "0 with B preempted");
        assert!(
            judge(&t, &run(&never, 0))
                .unwrap_err()
                .contains("never saw B preempted")
        );

        let unfinished = good.replace(pvcheck::ALL_PASSED, "pv-check: 1 check(s) failed");
        assert!(
            judge(&t, &run(&unfinished, 0))
                .unwrap_err()
                .contains("all checks passed")
        );

        // Without overcommit, B need never be seen preempted.
        let t = vm_tests()
            .into_iter()
            .find(|t| t.name.starts_with("vm pv-check defaults"))
            .unwrap();
        let good = format!(
            "{el2}{}{}",
            pv_console(&pvcheck_expect(&t), 2, "").replace("40 with", "0 with"),
            el2_summary(&[2])
        );
        assert_eq!(judge(&t, &run(&good, 0)), Ok(()));
    }

    /// What a passing lockbench run prints, with el2's summary (its
    /// wait/yield line saying `el2_yields`/`el2_calls`); the guest's halts
    /// and kicks and el2's kicks are `(halts, kicks, el2_kicks)`.
    fn lock_console_kicks(
        vcpus: usize,
        acquisitions: u64,
        (calls, yielded): (u64, u64),
        (el2_yields, el2_calls): (u64, u64),
        (halts, kicks, el2_kicks): (u64, u64, u64),
    ) -> String {
        let mut s = String::from("el2: pvlock hypervisor v0.1\r\nsmp: 2 CPUs online\r\n");
        s += "lockbench: 4 vCPUs, 64 MiB of RAM at 0x40000000, counter 62500000 Hz\r\n";
        let data = DataLine {
            acquisitions,
            lost_updates: 0,
        };
        s += &format!(
            "{data}\r\n{}\r\n",
            YieldLine {
                calls,
                yielded,
                halts,
                kicks
            }
        );
        s += &format!("{}\r\n", lockbench::ALL_PASSED);
        let summary = el2_summary(&[vcpus]);
        let (first, rest) = summary.split_once("\r\n").unwrap();
        s += &format!(
            "{first}\r\nsummary: vm vm0: {vcpus} vCPUs, resets 0, exits: hvc=9\r\nsummary:   \
             wait/yield: wfi 0 wfit 0 wfe 0 wfet 0 sampled-spins 0 on-spin 0 attempts 0 yields 0 (round-robin 0 \
             irqs-masked 0 lock-holder 0 pending-irq 0 wait-ended 0) pv-yield {el2_yields}/{el2_calls} kicks \
             {el2_kicks}\r\n{rest}"
        );
        s
    }

    /// [`lock_console_kicks`] without halts and kicks (the ticket locks).
    fn lock_console(vcpus: usize, acquisitions: u64, calls: (u64, u64), el2: (u64, u64)) -> String {
        lock_console_kicks(vcpus, acquisitions, calls, el2, (0, 0, 0))
    }

    #[test]
    fn wait_yield_line_parses() {
        let line = "summary:   wait/yield: wfi 3 wfit 0 wfe 40 wfet 2 sampled-spins 0 on-spin 42 attempts 30 \
                    yields 25 (round-robin 20 irqs-masked 1 lock-holder 4 pending-irq 0 wait-ended 0) \
                    pv-yield 5/7 kicks 9 extensions 2";
        assert_eq!(
            parse_wait_yield(line),
            Some(WaitYield {
                pv_yields: 5,
                pv_yield_calls: 7,
                kicks: 9
            })
        );
        // Prefixed, as a console may show it, with CR LF.
        assert_eq!(
            parse_wait_yield(&format!("[0.5] {line}\r")).map(|w| w.pv_yields),
            Some(5)
        );
        // Not the per-vCPU lines, nor a damaged one.
        assert_eq!(
            parse_wait_yield(
                "summary:   vm0/vcpu0: run 9.0 ms steal 3.0 ms blocked 0.0 ms in 2 preempted 1"
            ),
            None
        );
        assert_eq!(parse_wait_yield(&line.replace("5/7", "5")), None);
        assert_eq!(parse_wait_yield(&line.replace("5/7", "x/7")), None);
        assert_eq!(parse_wait_yield(&line.replace(" kicks 9", "")), None);
        assert_eq!(
            parse_wait_yield(&line.replace(" extensions 2", "")).map(|w| w.kicks),
            Some(9),
            "the extension count is not needed"
        );
        // The real format, from el2's SpinStats Display of zero counters.
        let zero = "summary:   wait/yield: wfi 0 wfit 0 wfe 0 wfet 0 sampled-spins 0 on-spin 0 attempts 0 yields \
                    0 (round-robin 0 irqs-masked 0 lock-holder 0 pending-irq 0 wait-ended 0) pv-yield 0/0 \
                    kicks 0";
        assert_eq!(
            parse_wait_yield(zero),
            Some(WaitYield {
                pv_yields: 0,
                pv_yield_calls: 0,
                kicks: 0
            })
        );
    }

    #[test]
    fn lockbench_tests_and_their_command_lines() {
        let tests: Vec<BootTest> = vm_tests()
            .into_iter()
            .filter(|t| t.name.starts_with("vm lockbench"))
            .collect();
        let names: Vec<&str> = tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "vm lockbench lock=pv pv-lock=openeuler vcpus=4 max,pauth=off smp=2",
                "vm lockbench lock=pv pv-lock=openeuler vcpus=8 max,pauth=off smp=2",
                "vm lockbench lock=pv-ticket pv-lock=default vcpus=4 max,pauth=off smp=2",
                "vm lockbench lock=ticket pv-lock=default vcpus=4 max,pauth=off smp=2",
            ]
        );
        for t in &tests {
            assert_eq!(t.vms[0].guest, "lockbench");
            assert_eq!(t.machine.smp, 2);
            assert_eq!(t.vms[0].pv_time, None);
            let Some(Check::LockContention {
                lock,
                vcpus,
                iterations,
                under_el2: true,
            }) = t
                .checks
                .iter()
                .find(|c| matches!(c, Check::LockContention { .. }))
                .cloned()
            else {
                panic!("{}: no lockbench check", t.name);
            };
            assert_eq!(vcpus, t.vms[0].vcpus as usize);
            // The guest is told exactly what the check expects.
            let args = guest_driver::bootargs::BootArgs::new(&t.vms[0].bootargs);
            let told = lockbench::Settings::from_bootargs(&args).unwrap();
            assert_eq!((told.lock, told.iterations), (lock, iterations));
            assert_eq!(t.vms[0].pv_lock, lockbench_pv_lock(lock));
            assert!(t.checks.contains(&Check::HypervisorSummary {
                vcpus_per_vm: vec![vcpus],
                time_sliced: lock.is_paravirt()
            }));
        }
        // The queued lock needs a kick: openEuler's KICK_CPU.
        assert_eq!(
            tests[0].vms[0].pv_lock,
            Some(PvLock::Variant(Variant::OpenEuler))
        );
        assert_eq!(
            tests[0].vms[0].bootargs,
            "lock=pv iterations=10000 duration-ms=0 min-contended=0 max-duration-ms=0 cs-work=40 \
             private-work=40 spin-limit=128 halt-after=4294967295 steal=on first-hold-ms=10 \
             long-holds=8 costs=0 self-sgi=0 seed=0 timeout=60"
        );
        assert!(
            tests[1].vms[0]
                .bootargs
                .starts_with("lock=pv iterations=5000 ")
        );
        assert!(
            tests[2].vms[0]
                .bootargs
                .starts_with("lock=pv-ticket iterations=10000 ")
        );
        assert!(tests[2].vms[0].bootargs.contains(" halt-after=64 "));
        let ticket = &tests[3].vms[0].bootargs;
        assert!(
            ticket.starts_with("lock=ticket iterations=500 "),
            "{ticket}"
        );
        assert!(
            ticket.contains(" first-hold-ms=0 long-holds=1 "),
            "{ticket}"
        );
        assert!(tests[2].vms[0].bootargs.contains(" long-holds=1 "));
    }

    #[test]
    fn lockbench_judge() {
        let find = |name: &str| {
            vm_tests()
                .into_iter()
                .find(|t| t.name.starts_with(name))
                .unwrap()
        };
        let pv = find("vm lockbench lock=pv pv-lock=openeuler vcpus=4");
        let good = lock_console_kicks(4, 40_000, (120, 97), (97, 120), (40, 38, 38));
        assert_eq!(judge(&pv, &run(&good, 0)), Ok(()));

        let none = lock_console_kicks(4, 40_000, (0, 0), (0, 0), (40, 38, 38));
        let err = judge(&pv, &run(&none, 0)).unwrap_err();
        assert!(err.contains("no successful directed yield"), "{err}");

        let disagree = lock_console_kicks(4, 40_000, (120, 97), (96, 120), (40, 38, 38));
        let err = judge(&pv, &run(&disagree, 0)).unwrap_err();
        assert!(err.contains("el2 120 and 96"), "{err}");

        // The queued lock must sleep and be kicked, and el2 must agree.
        let no_kicks = lock_console(4, 40_000, (120, 97), (97, 120));
        let err = judge(&pv, &run(&no_kicks, 0)).unwrap_err();
        assert!(err.contains("never slept and were kicked"), "{err}");
        let lost_kick = lock_console_kicks(4, 40_000, (120, 97), (97, 120), (40, 38, 37));
        let err = judge(&pv, &run(&lost_kick, 0)).unwrap_err();
        assert!(err.contains("sent 38 kicks, el2 carried out 37"), "{err}");

        let short = lock_console_kicks(4, 39_999, (120, 97), (97, 120), (40, 38, 38));
        let err = judge(&pv, &run(&short, 0)).unwrap_err();
        assert!(err.contains("expected 40000 acquisitions"), "{err}");

        let lost = good.replace("0 lost updates", "2 lost updates");
        assert!(judge(&pv, &run(&lost, 0)).is_err());

        let failed = good.replace(
            lockbench::ALL_PASSED,
            "lockbench: lock count: FAILED: vcpu 1: lock_count 0 inside",
        );
        let err = judge(&pv, &run(&failed, 0)).unwrap_err();
        assert!(err.contains("1 failed check(s)"), "{err}");
        assert!(err.contains("all checks passed"), "{err}");

        let no_el2 = good.replace("summary:   wait/yield:", "summary:   wait:");
        let err = judge(&pv, &run(&no_el2, 0)).unwrap_err();
        assert!(err.contains("0 el2 \"wait/yield\" lines"), "{err}");

        // Eight vCPUs: eight summary lines, 5000 acquisitions each.
        let eight = find("vm lockbench lock=pv pv-lock=openeuler vcpus=8");
        let good8 = lock_console_kicks(8, 40_000, (10, 3), (3, 10), (5, 5, 5));
        assert_eq!(judge(&eight, &run(&good8, 0)), Ok(()));
        assert!(judge(&eight, &run(&good, 0)).is_err(), "4 summary lines");

        // The plain lock must not yield at all.
        let ticket = find("vm lockbench lock=ticket");
        let plain = lock_console(4, 2_000, (0, 0), (0, 0));
        assert_eq!(judge(&ticket, &run(&plain, 0)), Ok(()));
        let yielding = lock_console(4, 2_000, (2, 1), (1, 2));
        let err = judge(&ticket, &run(&yielding, 0)).unwrap_err();
        assert!(err.contains("made directed-yield calls"), "{err}");
    }

    #[test]
    fn bare_lockbench_needs_no_hypervisor_and_no_yield() {
        let t = boot_tests()
            .into_iter()
            .find(|t| t.name.starts_with("guest lockbench bare"))
            .unwrap();
        assert_eq!(t.kernel, Kernel::Guest("lockbench"));
        assert!(!t.machine.virtualization);
        let args = t.machine.append.clone().unwrap();
        assert!(args.starts_with("lock=pv iterations=2000 "), "{args}");
        let good = format!(
            "{}: its waiters spin like the plain ticket lock's\r\n{}\r\n{}\r\n{}\r\n",
            lockbench::PV_UNAVAILABLE,
            DataLine {
                acquisitions: 4000,
                lost_updates: 0
            },
            YieldLine {
                calls: 0,
                yielded: 0,
                halts: 0,
                kicks: 0
            },
            lockbench::ALL_PASSED
        );
        assert_eq!(judge(&t, &run(&good, 0)), Ok(()));
        let yielded = good.replace("0 calls, 0 yielded", "1 calls, 0 yielded");
        let kicked = good.replace("0 halts, 0 kicks", "1 halts, 1 kicks");
        let err = judge(&t, &run(&kicked, 0)).unwrap_err();
        assert!(err.contains("without a hypervisor"), "{err}");
        let err = judge(&t, &run(&yielded, 0)).unwrap_err();
        assert!(err.contains("without a hypervisor"), "{err}");
        let el2 = format!(
            "{}\r\n{}",
            lockbench::PV_UNAVAILABLE,
            lock_console(2, 4000, (0, 0), (0, 0))
        );
        let err = judge(&t, &run(&el2, 0)).unwrap_err();
        assert!(err.contains("expected 1 and 0"), "{err}");
    }

    fn pvcheck_expect(t: &BootTest) -> Expect {
        t.checks
            .iter()
            .find_map(|c| match c {
                Check::PvServices { expect, .. } => Some(*expect),
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn bare_pv_check_needs_nothing_offered() {
        let t = boot_tests()
            .into_iter()
            .find(|t| t.name == "guest pv-check bare max,pauth=off smp=4")
            .unwrap();
        assert_eq!(t.kernel, Kernel::Guest("pv-check"));
        assert_eq!(
            t.machine.append.as_deref(),
            Some("expect-kvm=no expect-lock=none expect-steal=none expect-virtio=1")
        );
        let good = String::from("pv-check: nothing offered: always false\r\n")
            + &pv_console(&BARE_EXPECT, 4, "");
        assert_eq!(judge(&t, &run(&good, 0)), Ok(()));
        assert!(!good.contains("preempted truth"));
        let offered = good.replace("pv-check: nothing offered", "pv-check: offered");
        assert!(judge(&t, &run(&offered, 0)).is_err());
        // QEMU's legacy transports: el2's version would be wrong here.
        let modern = good.replace(", version 1,", ", version 2,");
        assert_ne!(modern, good);
        assert!(judge(&t, &run(&modern, 0)).is_err());
    }

    #[test]
    fn tick_line_parses() {
        let t = parse_tick("[0.1] tick: cpu 7 mpidr 0.0.1.3: 10 ticks in 100 ms (expected 10)");
        assert_eq!(
            t,
            Some(Tick {
                cpu: 7,
                mpidr: [0, 0, 1, 3],
                ticks: 10,
                ms: 100,
                expected: 10
            })
        );
        assert_eq!(
            parse_tick("tick: cpu x mpidr 0.0.0.0: 1 ticks in 1 ms (expected 1)"),
            None
        );
    }
}
