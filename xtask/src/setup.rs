//! Making a fresh machine able to build and boot el2: the Rust target and
//! the Debian packages for QEMU, U-Boot and gdb. Every check is cheap when
//! everything is already there, so each command runs what it needs.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};

use crate::image::TARGET;
use crate::{Workspace, sys};

pub const QEMU: &str = "qemu-system-aarch64";
pub const GDB: &str = "gdb-multiarch";
/// The system's Python, where Debian's `python3-*` packages are (another
/// `python3` may come first on PATH, e.g. pyenv's).
pub const SYSTEM_PYTHON: &str = "/usr/bin/python3";
/// The arm64 cross compiler's driver (Debian's `gcc-aarch64-linux-gnu`).
pub const CROSS_GCC: &str = "aarch64-linux-gnu-gcc";
pub const UBOOT_BIN: &str = "/usr/lib/u-boot/qemu_arm64/u-boot.bin";
/// QEMU's UEFI firmware for `virt` (edk2's ArmVirtQemu, Debian's AAVMF):
/// the code, and the variable store each boot gets a copy of.
pub const AAVMF_CODE: &str = "/usr/share/AAVMF/AAVMF_CODE.fd";
pub const AAVMF_VARS: &str = "/usr/share/AAVMF/AAVMF_VARS.fd";

/// A host tool xtask needs, and the Debian package that provides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    Qemu,
    UBoot,
    Gdb,
    /// The device tree compiler, for boot tests with edited trees.
    Dtc,
    /// UEFI firmware for QEMU's `virt` machine (`--uefi`).
    Uefi,
    /// The Linux 6.12 tree the project's guest kernel is built from.
    LinuxSource,
    /// The arm64 cross compiler that builds it, and the host tools its
    /// build runs.
    CrossGcc,
    Flex,
    Bison,
    Bc,
    Make,
    Xz,
    /// The Python modules `scripts/checkpatch.pl` runs its SPDX check with.
    CheckpatchPython,
    /// `llvm-symbolizer` and `llvm-nm`, for `cargo xtask profile`.
    Symbolizer,
}

impl Tool {
    fn package(self) -> &'static str {
        match self {
            Tool::Qemu => "qemu-system-arm",
            Tool::UBoot => "u-boot-qemu",
            Tool::Gdb => "gdb-multiarch",
            Tool::Dtc => "device-tree-compiler",
            Tool::Uefi => "qemu-efi-aarch64",
            Tool::LinuxSource => crate::kernel::SOURCE_PACKAGE,
            Tool::CrossGcc => "gcc-aarch64-linux-gnu",
            Tool::Flex => "flex",
            Tool::Bison => "bison",
            Tool::Bc => "bc",
            Tool::Make => "make",
            Tool::Xz => "xz-utils",
            Tool::CheckpatchPython => "python3-ply python3-git",
            Tool::Symbolizer => "llvm",
        }
    }

    fn what(self) -> String {
        match self {
            Tool::Qemu => QEMU.to_string(),
            Tool::UBoot => UBOOT_BIN.to_string(),
            Tool::Gdb => GDB.to_string(),
            Tool::Dtc => crate::dtedit::DTC.to_string(),
            Tool::Uefi => format!("{AAVMF_CODE} and {AAVMF_VARS}"),
            Tool::LinuxSource => crate::kernel::SOURCE_TARBALL.to_string(),
            Tool::CrossGcc => CROSS_GCC.to_string(),
            Tool::Flex => "flex".to_string(),
            Tool::Bison => "bison".to_string(),
            Tool::Bc => "bc".to_string(),
            Tool::Make => "make".to_string(),
            Tool::Xz => "xz".to_string(),
            Tool::CheckpatchPython => format!("the Python modules ply and git for {SYSTEM_PYTHON}"),
            Tool::Symbolizer => {
                format!("{} and {}", crate::profile::SYMBOLIZER, crate::profile::NM)
            }
        }
    }

    fn present(self) -> bool {
        match self {
            Tool::Qemu => find_in_path(QEMU).is_some(),
            Tool::UBoot => Path::new(UBOOT_BIN).is_file(),
            Tool::Gdb => find_in_path(GDB).is_some(),
            Tool::Dtc => find_in_path(crate::dtedit::DTC).is_some(),
            Tool::Uefi => Path::new(AAVMF_CODE).is_file() && Path::new(AAVMF_VARS).is_file(),
            Tool::LinuxSource => Path::new(crate::kernel::SOURCE_TARBALL).is_file(),
            Tool::CrossGcc => find_in_path(CROSS_GCC).is_some(),
            Tool::Flex => find_in_path("flex").is_some(),
            Tool::Bison => find_in_path("bison").is_some(),
            Tool::Bc => find_in_path("bc").is_some(),
            Tool::Make => find_in_path("make").is_some(),
            Tool::Xz => find_in_path("xz").is_some(),
            Tool::CheckpatchPython => Command::new(SYSTEM_PYTHON)
                .args(["-c", "import ply, git"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
            Tool::Symbolizer => {
                find_in_path(crate::profile::SYMBOLIZER).is_some()
                    && find_in_path(crate::profile::NM).is_some()
            }
        }
    }
}

/// The full path of `program` if it is an executable file on `PATH`.
pub fn find_in_path(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The targets rust-toolchain.toml asks for, plus the one el2 is built for.
fn wanted_targets(ws: &Workspace) -> Vec<String> {
    parse_targets(&fs::read_to_string(ws.root.join("rust-toolchain.toml")).unwrap_or_default())
}

fn parse_targets(toml: &str) -> Vec<String> {
    let mut targets = vec![TARGET.to_string()];
    // A single-line `targets = ["a", "b"]`; anything fancier is ignored (the
    // el2 target is always included anyway).
    if let Some(list) = toml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("targets"))
        .find_map(|rest| rest.trim_start().strip_prefix('='))
    {
        for t in list.split('"').skip(1).step_by(2) {
            if !t.is_empty() && !targets.iter().any(|x| x == t) {
                targets.push(t.to_string());
            }
        }
    }
    targets
}

/// Makes sure the pinned toolchain has the bare-metal targets. (The
/// toolchain file lists them, but with RUSTUP_AUTO_INSTALL=0 rustup does not
/// act on that by itself.)
pub fn ensure_rust_target(ws: &Workspace) -> Result<()> {
    let wanted = wanted_targets(ws);
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    ensure_targets(ws, &wanted)
}

/// Makes sure the pinned toolchain has `targets` (with rustup: adds the
/// missing ones).
pub fn ensure_targets(ws: &Workspace, targets: &[&str]) -> Result<()> {
    if find_in_path("rustup").is_none() {
        // Not a rustup toolchain: all we can do is check the sysroot.
        let out = Command::new("rustc")
            .current_dir(&ws.root)
            .args(["--print", "sysroot"])
            .output()
            .context("cannot run rustc to find the sysroot")?;
        let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
        for target in targets {
            let lib = Path::new(&sysroot).join("lib/rustlib").join(target);
            ensure!(
                lib.is_dir(),
                "the Rust toolchain at {sysroot} has no {target} target and rustup is not \
                 installed; install rustup, or add the target's standard library to this \
                 toolchain"
            );
        }
        return Ok(());
    }
    let out = Command::new("rustup")
        .current_dir(&ws.root)
        .args(["target", "list", "--installed"])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run `rustup target list --installed`")?;
    ensure!(
        out.status.success(),
        "`rustup target list --installed` failed ({}) in {}; is the toolchain pinned in \
         rust-toolchain.toml installed? (`rustup toolchain install` in that directory)",
        out.status,
        ws.root.display()
    );
    let installed = String::from_utf8_lossy(&out.stdout);
    let missing: Vec<&str> = targets
        .iter()
        .copied()
        .filter(|t| !installed.lines().any(|l| l.trim() == *t))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let list = missing.join(" ");
    eprintln!("xtask: installing Rust target(s) {list} (rustup target add)");
    let status = Command::new("rustup")
        .current_dir(&ws.root)
        .args(["target", "add"])
        .args(&missing)
        .status()
        .context("cannot run `rustup target add`")?;
    ensure!(
        status.success(),
        "`rustup target add {list}` failed ({status}); run it yourself in {}",
        ws.root.display()
    );
    Ok(())
}

/// Makes sure the given tools are installed, installing the missing ones
/// with apt-get when running as root on a Debian-like system, and otherwise
/// stopping with the command to run.
pub fn ensure_tools(tools: &[Tool]) -> Result<()> {
    let missing: Vec<Tool> = tools.iter().copied().filter(|t| !t.present()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut packages: Vec<&str> = missing
        .iter()
        .flat_map(|t| t.package().split_whitespace())
        .collect();
    // U-Boot is small and the boot tests need it: fetch it along with QEMU.
    if missing.contains(&Tool::Qemu) && !Tool::UBoot.present() {
        packages.push(Tool::UBoot.package());
    }
    packages.dedup();
    let what = missing
        .iter()
        .map(|t| t.what())
        .collect::<Vec<_>>()
        .join(", ");
    let command = format!(
        "apt-get install -y --no-install-recommends {}",
        packages.join(" ")
    );
    if !sys::is_root() {
        bail!(
            "{what} not found; install it with `sudo {command}` (Debian/Ubuntu package names) \
             and run xtask again"
        );
    }
    if find_in_path("apt-get").is_none() {
        bail!(
            "{what} not found and this system has no apt-get; install the equivalent of the \
             Debian packages {} with your package manager",
            packages.join(", ")
        );
    }
    eprintln!("xtask: {what} missing; running `apt-get update && {command}` (takes ~30 s)");
    apt_get(&["update", "-q"])?;
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend(&packages);
    apt_get(&args)?;
    eprintln!("xtask: installed {}", packages.join(" "));
    let still: Vec<String> = missing
        .iter()
        .filter(|t| !t.present())
        .map(|t| t.what())
        .collect();
    ensure!(
        still.is_empty(),
        "`{command}` succeeded but {} is still missing",
        still.join(", ")
    );
    Ok(())
}

fn apt_get(args: &[&str]) -> Result<()> {
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .status()
        .context("cannot run apt-get")?;
    ensure!(
        status.success(),
        "`apt-get {}` failed ({status}); see its output above",
        args.join(" ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toolchain_targets() {
        let toml = "[toolchain]\nchannel = \"1.95.0\"\n\
                    targets = [\"aarch64-unknown-none\", \"aarch64-unknown-none-softfloat\"]\n";
        // The el2 target first, then the file's others in order.
        assert_eq!(
            parse_targets(toml),
            ["aarch64-unknown-none-softfloat", "aarch64-unknown-none"]
        );
        assert_eq!(parse_targets(""), [TARGET]);
    }
}
