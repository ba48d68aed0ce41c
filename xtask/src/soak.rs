//! `cargo xtask soak --minutes N`: the overcommitted lock benchmark and a
//! stock Linux VM side by side under el2 for N minutes, then a check of
//! every vCPU's forward progress and of the lock guest's data.
//!
//! The machine has 2 pCPUs (`--smp` to change) and two 4-vCPU VMs: vm0
//! runs lockbench's PV queued lock (openEuler PV-lock, so its waiters
//! yield to a preempted holder, sleep and are kicked) for N minutes of
//! timed acquisitions; vm1 runs the Debian kernel with a CPU-bound loop on
//! every vCPU for the same N minutes. It passes when:
//! - lockbench reports exact data (`0 lost updates`), no failed check and
//!   `lockbench: all checks passed` (its timed run fails by itself if a
//!   vCPU never got the lock);
//! - Linux booted, found the hypervisor, showed stolen time, printed no RCU
//!   stall, lockup or clocksource complaint (console and `dmesg`), and
//!   powered off ([`crate::linuxtest::check`]);
//! - el2's summary shows all 8 vCPUs run and, overcommitted, preempted;
//! - nothing printed `EL2 FATAL` or `GUEST FATAL`, and QEMU exited 0.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, ensure};
use guest_driver::lockbench::{self, DataLine, LockKind};
use pvlock_abi::pvlock::Variant;

use crate::Workspace;
use crate::boottest::{BootTest, Check, Kernel, Outcome};
use crate::cli::{SoakOpts, TestOpts};
use crate::linux;
use crate::linuxtest::LinuxExpect;
use crate::qemu::Machine;
use crate::suite;
use crate::vm::{PvLock, VmConfig};

/// vCPUs of each of the two VMs.
pub const VCPUS_PER_VM: u32 = 4;
/// The longest soak: lockbench's `duration-ms` limit.
pub const MAX_MINUTES: u32 = (lockbench::MAX_DURATION_MS / 60_000) as u32;
/// Time for booting, Linux's start and power-off beyond the N minutes.
const MARGIN: Duration = Duration::from_secs(300);

/// Runs the soak; the exit status says whether it passed.
pub fn soak(ws: &Workspace, o: &SoakOpts) -> Result<ExitCode> {
    ensure!(
        (1..=MAX_MINUTES).contains(&o.minutes),
        "--minutes must be between 1 and {MAX_MINUTES}"
    );
    ensure!(o.smp >= 1, "--smp must be at least 1");
    let test = soak_test(&linux::cache_dir(ws)?, o.minutes, o.smp);
    println!(
        "soak: {} minute(s): lockbench (PV queued lock) and Linux, {VCPUS_PER_VM} vCPUs each, on \
         {} pCPUs",
        o.minutes, o.smp
    );
    let opts = TestOpts {
        build: o.build.clone(),
        host: false,
        boot: true,
        filters: Vec::new(),
        list: false,
        timeout: None,
        verbose: o.verbose,
    };
    suite::run_boot_tests(ws, &opts, &[test])
}

/// The soak as a boot test, with the Linux guest cached in `linux_dir`.
pub fn soak_test(linux_dir: &Path, minutes: u32, smp: u32) -> BootTest {
    let seconds = u64::from(minutes) * 60;
    let machine = Machine {
        cpu: crate::qemu::normalize_cpu("max,pauth=off"),
        smp,
        ..Machine::default()
    };
    let settings = lockbench::Settings {
        lock: LockKind::Pv,
        duration_ms: seconds * 1000,
        // vCPU 0 waits this long for the others to finish once its
        // duration is over.
        timeout_secs: 600,
        ..lockbench::Settings::default()
    };
    let lock_vm = VmConfig {
        guest: crate::boottest::LOCK_CHECK.into(),
        pv_lock: Some(PvLock::Variant(Variant::OpenEuler)),
        ..VmConfig::smp_demo(VCPUS_PER_VM, &settings.to_string(), 1)
    };
    let linux_vm = VmConfig {
        guest: linux_dir.join(linux::IMAGE_FILE).display().to_string(),
        initrd: Some(linux_dir.join(linux::INITRD_FILE)),
        memory: linux::VM_MEMORY,
        bootargs: format!("{} lgbusy={seconds}", linux::BOOTARGS),
        ..VmConfig::smp_demo(VCPUS_PER_VM, "", 1)
    };
    let total_vcpus = 2 * VCPUS_PER_VM;
    BootTest {
        name: format!("soak {minutes} min {}", machine.describe()),
        timeout: Duration::from_secs(seconds) + MARGIN,
        outcome: Outcome::CleanExit,
        checks: vec![
            Check::Banner,
            Check::SmpOnline(smp),
            Check::LockSoak {
                vcpus: VCPUS_PER_VM as usize,
            },
            Check::Linux(LinuxExpect {
                vms: 1,
                vcpus: VCPUS_PER_VM as usize,
                overcommitted: total_vcpus > smp,
                reboots: false,
                input: None,
                other_vms: 1,
            }),
            Check::HypervisorSummary {
                vcpus_per_vm: vec![VCPUS_PER_VM as usize; 2],
                time_sliced: total_vcpus > smp,
            },
        ],
        dt_edit: None,
        kernel: Kernel::El2,
        vms: vec![lock_vm, linux_vm],
        machine,
    }
}

/// The lock guest's part of the soak: no failed check, exact data from a
/// timed run (any number of acquisitions, at least one per vCPU, no lost
/// update), and the final verdict.
pub fn check_lock(lines: &[&str], vcpus: usize) -> Result<(), String> {
    let prefix = lockbench::PREFIX;
    if let Some(failed) = lines
        .iter()
        .find(|l| l.contains(prefix) && l.contains(": FAILED"))
    {
        return Err(format!("lockbench failed: {failed:?}"));
    }
    let data: Vec<DataLine> = lines.iter().filter_map(|l| DataLine::parse(l)).collect();
    match data.as_slice() {
        [d] if d.lost_updates == 0 && d.acquisitions >= vcpus as u64 => {}
        [d] => {
            return Err(format!(
                "lockbench: {} acquisitions, {} lost updates (at least {vcpus} and none \
                 expected)",
                d.acquisitions, d.lost_updates
            ));
        }
        other => {
            return Err(format!(
                "{} \"lockbench: data ok\" lines, expected 1",
                other.len()
            ));
        }
    }
    let done = format!("{prefix} all checks passed");
    if lines.iter().filter(|l| l.contains(done.as_str())).count() != 1 {
        return Err(format!("no {done:?} line"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soak_runs_both_guests_overcommitted() {
        let t = soak_test(Path::new("/cache/linux"), 3, 2);
        assert_eq!(t.name, "soak 3 min max,pauth=off smp=2");
        assert_eq!(t.vms.len(), 2);
        assert!(t.vms[0].bootargs.contains("duration-ms=180000"));
        assert!(t.vms[0].bootargs.contains("lock=pv "));
        assert_eq!(t.vms[0].pv_lock, Some(PvLock::Variant(Variant::OpenEuler)));
        assert!(t.vms[1].bootargs.ends_with("lgbusy=180"));
        assert!(crate::linuxtest::needs_guest(&t, Path::new("/cache/linux")));
        assert!(t.timeout >= Duration::from_secs(180));
        assert!(t.checks.contains(&Check::HypervisorSummary {
            vcpus_per_vm: vec![4, 4],
            time_sliced: true,
        }));
        // The settings round-trip through lockbench's own parser.
        let words = guest_driver::bootargs::BootArgs::new(&t.vms[0].bootargs);
        let parsed = lockbench::Settings::from_bootargs(&words).unwrap();
        assert_eq!(parsed.duration_ms, 180_000);
        assert_eq!(MAX_MINUTES, 1440);
    }

    #[test]
    fn the_lock_check_wants_exact_data_and_the_verdict() {
        let good = [
            "[vm0] lockbench: data ok: 123456 acquisitions, 0 lost updates",
            "[vm0] lockbench: all checks passed",
        ];
        assert_eq!(check_lock(&good, 4), Ok(()));
        let lost = [
            "[vm0] lockbench: data ok: 123456 acquisitions, 2 lost updates",
            "[vm0] lockbench: all checks passed",
        ];
        assert!(check_lock(&lost, 4).unwrap_err().contains("lost"));
        let failed = [
            "[vm0] lockbench: vcpu 3 never took the lock: FAILED",
            "[vm0] lockbench: data ok: 123456 acquisitions, 0 lost updates",
        ];
        assert!(check_lock(&failed, 4).is_err());
        assert!(check_lock(&good[..1], 4).is_err());
        assert!(check_lock(&good[1..], 4).is_err());
    }
}
