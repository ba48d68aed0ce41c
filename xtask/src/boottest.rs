//! The QEMU boot tests: one table saying which machines to boot and what the
//! console must show, and the checks that judge a run.
//!
//! To add a test (a guest, a Linux boot, another self-test), add an entry to
//! [`boot_tests`]: a [`Machine`], the expected [`Outcome`] and the
//! [`Check`]s on the console.

use std::time::Duration;

use crate::dtedit::DtEdit;
use crate::qemu::{self, Ending, FATAL_MARKER, Machine};

/// Banner el2 prints near the start.
pub const BANNER: &str = "el2: pvlock hypervisor";
/// Last line of a successful boot without a VM; then PSCI SYSTEM_OFF.
pub const POWER_OFF: &str = "el2: no VM configured, powering off";

/// How a boot must end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// QEMU exits 0 and the crash marker never appears.
    CleanExit,
    /// The crash marker appears and QEMU stops by itself within the timeout
    /// (with any status): a crash self-test.
    Fatal,
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
        machine,
    }
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
    for (smp, clusters) in [(4, None), (8, Some(2))] {
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
            Check::SmpOnline(n) => check_smp(lines, *n),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn run(console: &str, code: i32) -> qemu::Outcome {
        let fatal = console.contains(FATAL_MARKER);
        qemu::Outcome {
            console: console.into(),
            stderr: String::new(),
            ending: Ending::Exited(ExitStatus::from_raw(code << 8)),
            duration: Duration::from_secs(1),
            fatal,
        }
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
        assert_eq!(names.len(), 16, "{names:?}");
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
