//! `pvlinux hotplug`: a CPU taken offline must unregister its PV-lock
//! record (so that the hypervisor stops writing a page the kernel may
//! reuse), and register it again when it comes back.
//!
//! Writes 0, then 1, to `/sys/devices/system/cpu/cpuK/online`, reading
//! the debugfs file before, while offline and after.

use std::path::PathBuf;

use pvlinux::lines::HotplugResult;
use pvlinux::vcpus::{self, VcpuRow};

use super::args::{Options, missing_option, unknown_option};
use super::{Failure, Outcome, Verdict, environment, require_vcpus};

/// The usage line.
pub const USAGE: &str = "pvlinux hotplug --cpu K [--debugfs PATH]";

struct Settings {
    cpu: u32,
    debugfs: PathBuf,
}

fn settings(mut options: Options) -> Result<Settings, Failure> {
    let mut cpu = None;
    let mut debugfs = PathBuf::from(vcpus::DEFAULT_PATH);
    while let Some(option) = options.next_option()? {
        match option.as_str() {
            "--cpu" => cpu = Some(options.parse(&option, "a CPU number")?),
            "--debugfs" => debugfs = options.value(&option)?.into(),
            _ => return Err(unknown_option("hotplug", &option)),
        }
    }
    Ok(Settings {
        cpu: cpu.ok_or_else(|| missing_option("hotplug", "--cpu K"))?,
        debugfs,
    })
}

/// The CPU's row in the debugfs file now.
fn row(settings: &Settings) -> Result<VcpuRow, Failure> {
    let file = require_vcpus(&settings.debugfs)?;
    file.row(settings.cpu).copied().ok_or_else(|| {
        environment(format!(
            "{} has no row for CPU {}",
            settings.debugfs.display(),
            settings.cpu
        ))
    })
}

/// Writes `value` to the CPU's sysfs `online` file.
fn set_online(settings: &Settings, online: bool) -> Result<(), Failure> {
    let path = format!("/sys/devices/system/cpu/cpu{}/online", settings.cpu);
    let value = if online { "1\n" } else { "0\n" };
    std::fs::write(&path, value).map_err(|error| {
        let hint = match error.kind() {
            std::io::ErrorKind::NotFound => {
                " (no such CPU, or one the kernel cannot take offline, such as the boot CPU)"
            }
            std::io::ErrorKind::PermissionDenied => " (run as root)",
            _ => "",
        };
        environment(format!(
            "cannot write {} to {path}: {error}{hint}",
            value.trim_end()
        ))
    })
}

/// Runs `pvlinux hotplug`.
pub fn run(options: Options) -> Outcome {
    let settings = settings(options)?;
    let before = row(&settings)?;
    set_online(&settings, false)?;
    // If reading fails while the CPU is offline, still bring it back.
    let offline = row(&settings);
    let back = set_online(&settings, true);
    let offline = offline?;
    back?;
    let after = row(&settings)?;

    let result = HotplugResult {
        cpu: settings.cpu,
        before_registered: before.registered,
        offline_online: offline.online,
        offline_registered: offline.registered,
        after_online: after.online,
        after_registered: after.registered,
    };
    println!("{result}");
    if result.passed() {
        Ok(Verdict::Pass)
    } else {
        eprintln!(
            "pvlinux: hotplug: expected before=1 offline=0/0 after=1/1 \
             (offline = online/registered)"
        );
        Ok(Verdict::Fail)
    }
}
