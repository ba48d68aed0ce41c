//! The project's own Linux guest: the kernel of [`crate::kernel`] (the
//! PV-lock series, or the same tree without it) with an initramfs of
//! Debian's static busybox ([`crate::linux`]) and the `pvlinux` userland
//! program (guest-driver/linux/pvlinux), built for
//! `aarch64-unknown-linux-musl`.
//!
//! Its `/init` runs the steps the kernel command line names, so that one
//! initramfs serves `cargo xtask run --linux-pv`, the boot tests and the
//! Linux benchmark: `lgpv=STEP,STEP,...` with the steps
//!
//! | step | what | its output |
//! |---|---|---|
//! | `vcpus` | prints `/sys/kernel/debug/pvlock/vcpus` | `linux-guest: vcpus <line>` per line |
//! | `truth` | `pvlinux truth --seconds ${lgtruth:-3}` | `pvlinux: truth ...` |
//! | `stress` | `pvlinux stress --seconds ${lgstress:-10}` | `pvlinux: stress ...` |
//! | `hotplug` | `pvlinux hotplug --cpu 1` | `pvlinux: hotplug ...` |
//! | `bench` | `pvlinux bench [--tests $lgtests] --scale ${lgscale:-1} [--seed $lgseed]` | `pvlinux: bench ...` |
//! | `busy` | a CPU-bound loop on every CPU for `${lgbusy:-1}` s | |
//! | `ptp` | mounts devtmpfs on `/dev` for `/dev/ptp0`, prints `/sys/class/ptp/ptp0/clock_name`, then `pvlinux ptp --reads ${lgptpreads:-10}` | [`PTP_CLOCK_PREFIX`]`<name>`, `pvlinux: ptp ...` |
//! | `kexec` | the first kernel: `pvlinux kexec` into `/boot/Image` with `/boot/initramfs.cpio` and the same command line plus `lgkexeced=1` (only in [`KEXEC_INITRD_FILE`]); the second: a note | `pvlinux: kexec ...`, then `linux-guest: kexec: second kernel` |
//!
//! each followed by `linux-guest: step <step> exit <status>`; then, as the
//! stock guest's `/init` does, the stolen time, the count of kernel
//! complaints in `dmesg` and a clean power-off.

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, ensure};

use crate::Workspace;
use crate::kernel::{self, Flavor};
use crate::linux::{self, LinuxGuest};
#[cfg(test)]
use crate::linux::{INIT_BANNER, INIT_DONE};
use crate::setup;

/// The userland program's package, and the target it is built for.
pub const PVLINUX_PACKAGE: &str = "pvlinux";
pub const USERLAND_TARGET: &str = "aarch64-unknown-linux-musl";
/// Where `/init` finds it.
pub const PVLINUX_PATH: &str = "/bin/pvlinux";

/// What `/init` prints after each step: `<prefix><step> exit <status>`.
pub const STEP_PREFIX: &str = "linux-guest: step ";
/// What `/init` prints before each line of the debugfs file.
pub const VCPUS_PREFIX: &str = "linux-guest: vcpus ";
/// What the ptp step prints before the name of the first PTP clock
/// (`absent` without one).
pub const PTP_CLOCK_PREFIX: &str = "linux-guest: ptp0 clock_name ";
/// What the kexec step prints in the kernel it started.
pub const KEXEC_SECOND: &str = "linux-guest: kexec: second kernel";

/// The initramfs, and the one that also holds the kernel and that
/// initramfs in `/boot`, for the kexec step; both under
/// `target/xtask/linux-pv/`.
pub const INITRD_FILE: &str = "initramfs.cpio";
pub const KEXEC_INITRD_FILE: &str = "initramfs-kexec.cpio";

/// The busybox applets `/init` and the bench's shell script run.
const APPLETS: [&str; 19] = [
    "sh", "mount", "cat", "echo", "tr", "nproc", "sleep", "kill", "awk", "grep", "dmesg",
    "poweroff", "reboot", "sort", "wc", "od", "head", "ls", "uname",
];

/// Builds `pvlinux` for the guest (stripped: the workspace's release
/// profile keeps debug information) and returns its path.
pub fn build_pvlinux(ws: &Workspace) -> Result<PathBuf> {
    setup::ensure_targets(ws, &[USERLAND_TARGET])?;
    let status = Command::new(ws.cargo())
        .current_dir(&ws.root)
        .args([
            "build",
            "--release",
            "-p",
            PVLINUX_PACKAGE,
            "--target",
            USERLAND_TARGET,
        ])
        // The toolchain's own linker links the self-contained musl target.
        .env("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER", "rust-lld")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .status()
        .context("cannot run cargo to build pvlinux")?;
    ensure!(status.success(), "building pvlinux failed ({status})");
    let path = ws
        .target_dir()
        .join(USERLAND_TARGET)
        .join("release")
        .join(PVLINUX_PACKAGE);
    ensure!(path.is_file(), "the build left no {}", path.display());
    Ok(path)
}

/// The userland of this module's initramfs, and the archive written.
struct Userland {
    /// The stock guest, whose busybox it holds.
    stock: LinuxGuest,
    busybox: Vec<u8>,
    program: Vec<u8>,
    /// `target/xtask/linux-pv/`, and the archive written there.
    dir: PathBuf,
    initrd: PathBuf,
    archive: Vec<u8>,
}

/// Builds pvlinux and writes the initramfs of this module (busybox from
/// the stock guest, fetched once with apt-get).
fn userland(ws: &Workspace) -> Result<Userland> {
    let stock = linux::obtain(ws)?;
    let pvlinux = build_pvlinux(ws)?;
    let dir = ws.xtask_dir()?.join("linux-pv");
    fs::create_dir_all(&dir)?;
    let busybox = fs::read(&stock.busybox)
        .with_context(|| format!("cannot read {}", stock.busybox.display()))?;
    let program =
        fs::read(&pvlinux).with_context(|| format!("cannot read {}", pvlinux.display()))?;
    let initrd = dir.join(INITRD_FILE);
    let program_entry = (PVLINUX_PATH.trim_start_matches('/'), program.as_slice());
    let archive = linux::initramfs_with(&busybox, &APPLETS, &init_script(), &[program_entry]);
    fs::write(&initrd, &archive).with_context(|| format!("cannot write {}", initrd.display()))?;
    Ok(Userland {
        stock,
        busybox,
        program,
        dir,
        initrd,
        archive,
    })
}

/// The initramfs of this module alone, for a kernel other than the
/// project's: Debian's stock kernel runs its steps that need pvlinux
/// (`ptp`). Returns its path.
pub fn initramfs(ws: &Workspace) -> Result<PathBuf> {
    Ok(userland(ws)?.initrd)
}

/// The kernel of `flavor` (built or cached) with the initramfs of this
/// module, written under `target/xtask/linux-pv/`.
pub fn obtain(ws: &Workspace, flavor: Flavor) -> Result<LinuxGuest> {
    let u = userland(ws)?;
    let built = kernel::build(ws, flavor)?;
    let program_entry = (PVLINUX_PATH.trim_start_matches('/'), u.program.as_slice());
    // Its flavour's kernel only: the kexec step starts the same kernel.
    let kernel =
        fs::read(&built.image).with_context(|| format!("cannot read {}", built.image.display()))?;
    let kexec_initrd = u.dir.join(format!("{}-{KEXEC_INITRD_FILE}", flavor.name()));
    fs::write(
        &kexec_initrd,
        linux::initramfs_with(
            &u.busybox,
            &APPLETS,
            &init_script(),
            &[
                program_entry,
                ("boot/Image", &kernel),
                ("boot/initramfs.cpio", &u.archive),
            ],
        ),
    )
    .with_context(|| format!("cannot write {}", kexec_initrd.display()))?;
    Ok(LinuxGuest {
        image: built.image,
        initrd: u.initrd,
        kernel_package: format!(
            "{} {} ({})",
            kernel::SOURCE_PACKAGE,
            built.source_version,
            match flavor {
                Flavor::Patched => "with the PV-lock series",
                Flavor::Stock => "without the series",
            }
        ),
        busybox: u.stock.busybox,
    })
}

/// The guest's `/init` (see the module documentation).
pub fn init_script() -> String {
    let mut s = String::from("#!/bin/sh\n");
    linux::write_init_prologue(&mut s);
    let _ = writeln!(s, "mount -t debugfs debugfs /sys/kernel/debug");
    let _ = writeln!(s, "mount -t tmpfs tmpfs /tmp");
    let _ = writeln!(s, "echo \"linux-guest: kernel $(uname -r)\"");
    let _ = writeln!(s, "vcpus=/sys/kernel/debug/pvlock/vcpus");
    let _ = writeln!(
        s,
        "for step in $(echo \"${{lgpv:-vcpus}}\" | tr , ' '); do\n  case \"$step\" in\n    \
         vcpus)\n      if [ -r $vcpus ]; then\n        \
         while read -r line; do echo \"{VCPUS_PREFIX}$line\"; done < $vcpus\n      \
         else\n        echo \"{VCPUS_PREFIX}absent\"\n      fi ;;\n    \
         truth) {PVLINUX_PATH} truth --seconds \"${{lgtruth:-3}}\" ;;\n    \
         stress) {PVLINUX_PATH} stress --seconds \"${{lgstress:-10}}\" ;;\n    \
         hotplug) {PVLINUX_PATH} hotplug --cpu 1 ;;\n    \
         bench) {PVLINUX_PATH} bench ${{lgtests:+--tests \"$lgtests\"}} --scale \
         \"${{lgscale:-1}}\" ${{lgseed:+--seed \"$lgseed\"}} ;;\n    \
         kexec)\n      if grep -q lgkexeced /proc/cmdline; then\n        echo \"{KEXEC_SECOND}\"\n      \
         else\n        {PVLINUX_PATH} kexec --kernel /boot/Image --initrd /boot/initramfs.cpio \
         --append \"$(cat /proc/cmdline) lgkexeced=1\"\n      fi ;;\n    \
         ptp)\n      [ -e /dev/ptp0 ] || mount -t devtmpfs devtmpfs /dev\n      \
         echo \"{PTP_CLOCK_PREFIX}$(cat /sys/class/ptp/ptp0/clock_name 2>/dev/null \
         || echo absent)\"\n      {PVLINUX_PATH} ptp --reads \"${{lgptpreads:-10}}\" ;;\n    \
         busy)\n      pids=\"\"\n      i=0\n      while [ $i -lt $(nproc) ]; do\n        \
         ( while :; do :; done ) &\n        pids=\"$pids $!\"\n        i=$((i + 1))\n      \
         done\n      sleep \"${{lgbusy:-1}}\"\n      kill $pids ;;\n    \
         *) echo \"linux-guest: unknown step $step\"; false ;;\n  esac\n  \
         echo \"{STEP_PREFIX}$step exit $?\"\ndone"
    );
    linux::write_init_epilogue(&mut s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_runs_every_step_and_powers_off() {
        let init = init_script();
        assert!(init.starts_with("#!/bin/sh\n"));
        for step in [
            "vcpus)", "truth)", "stress)", "hotplug)", "bench)", "busy)", "kexec)", "ptp)",
        ] {
            assert!(init.contains(step), "{step}");
        }
        assert!(init.contains("mount -t debugfs debugfs /sys/kernel/debug"));
        assert!(init.contains(&format!("{PVLINUX_PATH} truth --seconds")));
        assert!(init.contains(INIT_BANNER) && init.contains(INIT_DONE));
        assert!(init.trim_end().ends_with("poweroff -f"));
        // Every command /init runs is an applet in the archive.
        for applet in [
            "mount", "cat", "tr", "awk", "grep", "dmesg", "nproc", "uname",
        ] {
            assert!(APPLETS.contains(&applet), "{applet}");
        }
        // The bench's shell script needs these too.
        for applet in ["sh", "echo", "sort", "grep", "wc", "tr", "cat", "od"] {
            assert!(APPLETS.contains(&applet), "{applet}");
        }
    }
}
