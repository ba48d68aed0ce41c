//! The KVM PTP boot test: Debian's stock cloud kernel (which has
//! `CONFIG_PTP_1588_CLOCK_KVM=y`) in a VM offered `kvm-ptp`, with the
//! initramfs of [`crate::linuxpv`] so that `/init` can run `pvlinux ptp`.
//!
//! What it shows end to end: el2 advertises KVM_PTP in KVM_FEATURES, the
//! guest's `ptp_kvm` finds it and registers `/dev/ptp0` named
//! [`CLOCK_NAME`], and every reading of that clock is el2's wall clock at
//! the counter value of the hypercall. el2 prints, at boot, the RTC
//! reading its wall clock starts from ([`WallClock`]); the guest prints
//! each reading between two reads of the virtual counter (the VM's
//! CNTVOFF is 0: virtual = physical); the reading must lie within
//! [`TOLERANCE_NS`] of what that boot line gives for the two counter
//! values.

use std::path::Path;
use std::time::Duration;

use pvlinux::lines::PtpRead;

use crate::boottest::{BootTest, Check, Kernel, Outcome};
use crate::linux::{self, INIT_DONE, KERNEL_TROUBLE};
use crate::linuxpv::{self, PTP_CLOCK_PREFIX, STEP_PREFIX};
use crate::qemu::Machine;
use crate::vm::VmConfig;

/// The name Linux's `ptp_kvm` gives its clock
/// (`/sys/class/ptp/ptp0/clock_name`).
pub const CLOCK_NAME: &str = "KVM virtual PTP";
/// How far a reading may be from el2's clock at the counter values around
/// it (issue 18: "within 1 ms").
pub const TOLERANCE_NS: u64 = 1_000_000;
/// Readings the guest takes, 100 ms apart.
pub const READS: u32 = 10;
/// What el2 prints at boot (`el2::services::wallclock::WallClock`'s
/// `Display`), up to the seconds.
const WALL_CLOCK_PREFIX: &str = "wall clock: ";

/// The time for the test: one boot of a few seconds and a second of reads.
const TIMEOUT: Duration = Duration::from_secs(240);

/// el2's wall clock as its boot line states it: `secs` since the epoch at
/// counter `counter_at`, `hz` ticks per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WallClock {
    pub secs: u64,
    pub counter_at: u64,
    pub hz: u64,
}

impl WallClock {
    /// Reads `wall clock: <secs> s since the Unix epoch at counter <ticks>
    /// (<hz> Hz)`, with anything before it.
    pub fn parse(line: &str) -> Option<Self> {
        let rest = &line[line.find(WALL_CLOCK_PREFIX)? + WALL_CLOCK_PREFIX.len()..];
        let (secs, rest) = rest.split_once(" s since the Unix epoch at counter ")?;
        let (counter_at, rest) = rest.split_once(" (")?;
        let hz = rest.trim_end().strip_suffix(" Hz)")?;
        let clock = Self {
            secs: secs.parse().ok()?,
            counter_at: counter_at.parse().ok()?,
            hz: hz.parse().ok()?,
        };
        (clock.hz > 0).then_some(clock)
    }

    /// Nanoseconds since the epoch at counter value `counter`, computed
    /// here from the boot line, not by el2's code.
    pub fn ns_at(&self, counter: u64) -> u128 {
        let elapsed = u128::from(counter.saturating_sub(self.counter_at));
        u128::from(self.secs) * 1_000_000_000 + elapsed * 1_000_000_000 / u128::from(self.hz)
    }
}

/// The test, for the Debian guest cached in `linux_dir` and the pvlinux
/// initramfs under `xtask_dir`.
pub fn test(linux_dir: &Path, xtask_dir: &Path) -> BootTest {
    let machine = Machine {
        cpu: crate::qemu::normalize_cpu("max,pauth=off"),
        smp: 2,
        ..Machine::default()
    };
    let vm = VmConfig {
        guest: linux_dir.join(linux::IMAGE_FILE).display().to_string(),
        initrd: Some(initramfs_path(xtask_dir)),
        memory: linux::VM_MEMORY,
        bootargs: format!("{} lgpv=ptp lgptpreads={READS}", linux::BOOTARGS),
        kvm_ptp: Some(true),
        ..VmConfig::smp_demo(2, "", 1)
    };
    BootTest {
        name: format!("linux kvm-ptp vcpus=2 {}", machine.describe()),
        timeout: TIMEOUT,
        outcome: Outcome::CleanExit,
        checks: vec![
            Check::Banner,
            Check::SmpOnline(machine.smp),
            Check::Ptp { reads: READS },
            Check::HypervisorSummary {
                vcpus_per_vm: vec![2],
                time_sliced: false,
            },
        ],
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![vm],
        machine,
    }
}

/// The pvlinux initramfs the test boots ([`linuxpv::initramfs`] writes it).
pub fn initramfs_path(xtask_dir: &Path) -> std::path::PathBuf {
    xtask_dir.join("linux-pv").join(linuxpv::INITRD_FILE)
}

/// Whether `test` boots the pvlinux initramfs with a kernel other than
/// the project's (so that it must be written first).
pub fn needs_initramfs(test: &BootTest, xtask_dir: &Path) -> bool {
    let initrd = initramfs_path(xtask_dir);
    test.vms
        .iter()
        .any(|vm| vm.initrd.as_deref() == Some(initrd.as_path()))
}

/// Judges the console `lines`: `reads` readings of [`CLOCK_NAME`], each
/// within [`TOLERANCE_NS`] of el2's clock.
pub fn check(lines: &[&str], reads: u32) -> Result<(), String> {
    if let Some(trouble) = lines
        .iter()
        .find(|l| KERNEL_TROUBLE.iter().any(|t| l.contains(t)))
    {
        return Err(format!("a kernel complained: {trouble:?}"));
    }
    let clock = lines
        .iter()
        .find_map(|l| WallClock::parse(l))
        .ok_or("el2 printed no `wall clock:` line (no RTC?)")?;
    let name = lines
        .iter()
        .find_map(|l| {
            l.find(PTP_CLOCK_PREFIX)
                .map(|at| &l[at + PTP_CLOCK_PREFIX.len()..])
        })
        .ok_or("no `ptp0 clock_name` line: /init did not run the ptp step")?
        .trim_end();
    if name != CLOCK_NAME {
        return Err(format!(
            "/sys/class/ptp/ptp0/clock_name is {name:?}, expected {CLOCK_NAME:?}"
        ));
    }
    let readings: Vec<PtpRead> = lines.iter().filter_map(|l| PtpRead::parse(l)).collect();
    if readings.len() != reads as usize {
        return Err(format!(
            "{} `pvlinux: ptp` readings, expected {reads}",
            readings.len()
        ));
    }
    for r in &readings {
        let earliest = clock.ns_at(r.counter_before);
        let latest = clock.ns_at(r.counter_after);
        let tolerance = u128::from(TOLERANCE_NS);
        let read = u128::from(r.clock_ns);
        if read + tolerance < earliest || read > latest + tolerance {
            return Err(format!(
                "reading {}: the PTP clock said {} ns, el2's clock {earliest}..={latest} ns at \
                 counter {}..={} (more than {TOLERANCE_NS} ns apart)",
                r.read, r.clock_ns, r.counter_before, r.counter_after
            ));
        }
    }
    let step_ok = format!("{STEP_PREFIX}ptp exit 0");
    if !lines.iter().any(|l| l.contains(&step_ok)) {
        return Err(format!("no {step_ok:?} line: pvlinux ptp failed"));
    }
    if !lines.iter().any(|l| l.contains(INIT_DONE)) {
        return Err(format!("no {INIT_DONE:?} line"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOCK: &str = "wall clock: 1796515200 s since the Unix epoch at counter 625000 \
                         (62500000 Hz)";

    /// A console of the test: the reading at `offset_ns` from el2's clock
    /// at the middle of its counter interval.
    fn console(offset_ns: i64, name: &str) -> Vec<String> {
        let clock = WallClock::parse(CLOCK).unwrap();
        let mut lines = vec![CLOCK.to_string(), format!("{PTP_CLOCK_PREFIX}{name}\r")];
        for read in 1..=READS {
            let before = 62_500_000 * u64::from(read);
            let after = before + 1_000;
            let middle = clock.ns_at(before + 500) as i64 + offset_ns;
            lines.push(
                PtpRead {
                    read,
                    counter_before: before,
                    counter_after: after,
                    clock_ns: middle as u64,
                }
                .to_string(),
            );
        }
        lines.push(format!("{STEP_PREFIX}ptp exit 0"));
        lines.push(INIT_DONE.to_string());
        lines
    }

    fn judge(lines: &[String]) -> Result<(), String> {
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        check(&lines, READS)
    }

    #[test]
    fn the_boot_line_parses_as_el2_prints_it() {
        let clock = WallClock::parse(&format!("[el2] {CLOCK}\r")).unwrap();
        assert_eq!(
            clock,
            WallClock {
                secs: 1_796_515_200,
                counter_at: 625_000,
                hz: 62_500_000
            }
        );
        // 16 ns per tick at 62.5 MHz.
        assert_eq!(clock.ns_at(625_001) - clock.ns_at(625_000), 16);
        assert_eq!(clock.ns_at(0), clock.ns_at(625_000));
        assert_eq!(
            WallClock::parse("wall clock: 1 s since the Unix epoch at counter 2 (0 Hz)"),
            None
        );
    }

    #[test]
    fn readings_within_a_millisecond_pass_and_others_fail() {
        assert_eq!(judge(&console(0, CLOCK_NAME)), Ok(()));
        assert_eq!(judge(&console(900_000, CLOCK_NAME)), Ok(()));
        assert_eq!(judge(&console(-900_000, CLOCK_NAME)), Ok(()));
        let late = judge(&console(1_100_000, CLOCK_NAME)).unwrap_err();
        assert!(late.contains("more than 1000000 ns apart"), "{late}");
        assert!(judge(&console(-1_100_000, CLOCK_NAME)).is_err());
    }

    #[test]
    fn the_clock_must_be_kvms_and_every_reading_there() {
        assert!(
            judge(&console(0, "absent"))
                .unwrap_err()
                .contains("clock_name is \"absent\"")
        );
        let mut short = console(0, CLOCK_NAME);
        short.remove(3);
        assert!(
            judge(&short)
                .unwrap_err()
                .contains("9 `pvlinux: ptp` readings")
        );
        let no_clock: Vec<String> = console(0, CLOCK_NAME).into_iter().skip(1).collect();
        assert!(judge(&no_clock).unwrap_err().contains("wall clock"));
        let failed: Vec<String> = console(0, CLOCK_NAME)
            .into_iter()
            .map(|l| l.replace("exit 0", "exit 1"))
            .collect();
        assert!(judge(&failed).unwrap_err().contains("pvlinux ptp failed"));
    }
}
