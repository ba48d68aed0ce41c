//! `pvlinux kexec`: reboots the guest into another kernel without going
//! through the hypervisor (kexec_file_load(2), then
//! `reboot(LINUX_REBOOT_CMD_KEXEC)`), so that a test can check that the
//! old kernel left nothing registered with the hypervisor: a record the
//! hypervisor kept writing would land in memory the new kernel owns.

use std::ffi::CString;
use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;

use pvlinux::lines::KexecLoaded;

use super::args::{Options, missing_option, unknown_option};
use super::{Failure, Outcome, environment, sys};

/// The usage line.
pub const USAGE: &str = "pvlinux kexec --kernel PATH --initrd PATH --append CMDLINE";

struct Settings {
    kernel: PathBuf,
    initrd: PathBuf,
    append: String,
}

fn settings(mut options: Options) -> Result<Settings, Failure> {
    let (mut kernel, mut initrd, mut append) = (None, None, None);
    while let Some(option) = options.next_option()? {
        match option.as_str() {
            "--kernel" => kernel = Some(PathBuf::from(options.value(&option)?)),
            "--initrd" => initrd = Some(PathBuf::from(options.value(&option)?)),
            "--append" => append = Some(options.value(&option)?),
            _ => return Err(unknown_option("kexec", &option)),
        }
    }
    Ok(Settings {
        kernel: kernel.ok_or_else(|| missing_option("kexec", "--kernel PATH"))?,
        initrd: initrd.ok_or_else(|| missing_option("kexec", "--initrd PATH"))?,
        append: append.ok_or_else(|| missing_option("kexec", "--append CMDLINE"))?,
    })
}

/// Runs `pvlinux kexec`: returns only if the kernel could not be loaded
/// or started.
pub fn run(options: Options) -> Outcome {
    let settings = settings(options)?;
    let open = |path: &PathBuf| {
        File::open(path)
            .map_err(|error| environment(format!("cannot open {}: {error}", path.display())))
    };
    let kernel = open(&settings.kernel)?;
    let initrd = open(&settings.initrd)?;
    let cmdline = CString::new(settings.append.as_str())
        .map_err(|_| Failure::Usage("--append holds a NUL byte".into()))?;
    sys::kexec_file_load(&kernel, &initrd, &cmdline)
        .map_err(|error| environment(format!("kexec_file_load: {error}")))?;
    println!(
        "{}",
        KexecLoaded {
            kernel: settings.kernel.display().to_string(),
            initrd: settings.initrd.display().to_string(),
        }
    );
    let _ = std::io::stdout().flush();
    let error = sys::reboot_into_loaded_kernel();
    Err(environment(format!(
        "reboot(LINUX_REBOOT_CMD_KEXEC): {error}"
    )))
}
