//! Making a fresh machine able to build and boot el2: the Rust target and
//! the Debian packages for QEMU, U-Boot and gdb. Every check is cheap when
//! everything is already there, so each command runs what it needs.
//!
//! apt-get installs without recommends and never removes a package: each
//! install is simulated first, a package apt would remove is asked for in
//! the archive's version instead, the install runs with `--no-remove`,
//! and what it installs (names, versions, download size) is printed.

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
    eprintln!("xtask: {what} missing; running `apt-get update && {command}`");
    apt_get(&["update", "-q"])?;
    let mut wanted: Vec<String> = packages.iter().map(|p| p.to_string()).collect();
    let plan = keep_what_apt_would_remove(&mut wanted)?;
    let downloads = apt_output(&install_args(&wanted, &["--print-uris", "-qq"]))?;
    let (files, bytes) = download_size(&downloads);
    eprintln!(
        "xtask: apt-get installs {} package(s), {files} to download ({:.1} MB): {}",
        plan.installs.len(),
        bytes as f64 / 1e6,
        plan.installs
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );
    // `--no-remove`: should apt still want to remove a package, it stops
    // instead of doing it.
    let args = install_args(&wanted, &["-y", "-q", "--no-remove"]);
    apt_get(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
    for (name, version) in &plan.installs {
        eprintln!("xtask: installed {name} {version}");
    }
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

/// `apt-get install` arguments for `packages`: never the recommends, a
/// downgrade allowed only where a package is named with `=version` (what
/// [`keep_what_apt_would_remove`] adds), `extra` first.
fn install_args(packages: &[String], extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["install", "--no-install-recommends"]
        .iter()
        .chain(extra)
        .map(|a| a.to_string())
        .collect();
    if packages.iter().any(|p| p.contains('=')) {
        args.push("--allow-downgrades".into());
    }
    args.extend(packages.iter().cloned());
    args
}

/// Simulates installing `packages` and, for every installed package apt
/// would remove to make room (an incompatible version from elsewhere: the
/// image's `qemu-utils` 10.0 from bookworm-backports declares `Breaks:
/// qemu-system-common (<< 1:8.0+dfsg-5~)`, and el2 is tested on Debian 12's
/// QEMU 7.2), asks for the archive's newest version of that package
/// instead, so it stays installed. Returns what apt will then install;
/// refuses when a removal remains.
fn keep_what_apt_would_remove(packages: &mut Vec<String>) -> Result<AptPlan> {
    let plan = AptPlan::parse(&apt_output(&install_args(packages, &["-s"]))?);
    if plan.removals.is_empty() {
        return Ok(plan);
    }
    for (name, installed) in &plan.removals {
        let archive = output_of("apt-cache", &["madison".into(), name.clone()]);
        let Some(version) = archive.ok().as_deref().and_then(newest_in_archive) else {
            bail!(
                "installing {} would remove {name} {installed}, which no configured archive \
                 has in another version; xtask removes nothing: install them yourself",
                packages.join(" ")
            );
        };
        eprintln!(
            "xtask: {name} {installed} cannot stay beside these packages (apt would remove \
             it); installing {name} {version} from the archive in its place"
        );
        packages.push(format!("{name}={version}"));
    }
    let plan = AptPlan::parse(&apt_output(&install_args(packages, &["-s"]))?);
    if let Some((name, version)) = plan.removals.first() {
        bail!(
            "installing {} would still remove {name} {version}; xtask removes nothing: \
             install them yourself",
            packages.join(" ")
        );
    }
    Ok(plan)
}

/// What `apt-get install -s` says it would do.
#[derive(Debug, Default, PartialEq, Eq)]
struct AptPlan {
    /// Packages installed, upgraded or downgraded, with the new version.
    installs: Vec<(String, String)>,
    /// Packages removed, with the installed version.
    removals: Vec<(String, String)>,
}

impl AptPlan {
    /// Reads the simulation's `Inst NAME [OLD] (NEW ...)` and `Remv NAME
    /// [OLD]` lines.
    fn parse(simulation: &str) -> Self {
        let mut plan = AptPlan::default();
        for line in simulation.lines() {
            let mut words = line.split_whitespace();
            let (Some(action), Some(name)) = (words.next(), words.next()) else {
                continue;
            };
            let rest: Vec<&str> = words.collect();
            let bracketed = rest
                .iter()
                .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')));
            let parenthesised = rest.iter().find_map(|w| w.strip_prefix('('));
            match action {
                "Inst" => plan.installs.push((
                    name.to_string(),
                    parenthesised.unwrap_or_default().to_string(),
                )),
                "Remv" => plan
                    .removals
                    .push((name.to_string(), bracketed.unwrap_or_default().to_string())),
                _ => {}
            }
        }
        plan
    }
}

/// The number of files and the bytes `apt-get install --print-uris`
/// lists (`'URI' FILE SIZE HASH` per file).
fn download_size(uris: &str) -> (usize, u64) {
    uris.lines()
        .filter(|l| l.starts_with('\''))
        .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
        .fold((0, 0), |(files, bytes), size| (files + 1, bytes + size))
}

/// The first version `apt-cache madison` lists (`NAME | VERSION | SOURCE`),
/// the archive's newest.
fn newest_in_archive(madison: &str) -> Option<String> {
    let line = madison.lines().next()?;
    Some(line.split('|').nth(1)?.trim().to_string()).filter(|v| !v.is_empty())
}

/// Runs `apt-get ARGS` and returns its standard output.
fn apt_output(args: &[String]) -> Result<String> {
    output_of("apt-get", args)
}

/// Runs `program ARGS` (an apt tool, non-interactive) and returns its
/// standard output.
fn output_of(program: &str, args: &[String]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    ensure!(
        out.status.success(),
        "`{program} {}` failed ({}); see its output above",
        args.join(" "),
        out.status
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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

    /// What apt 2.6 (Debian 12) printed for `apt-get install -s
    /// --no-install-recommends qemu-system-arm` on this project's machine
    /// image, whose qemu-utils 10.0 (bookworm-backports) breaks Debian 12's
    /// qemu-system-common (shortened).
    const SIMULATION: &str = "\
NOTE: This is only a simulation!
The following packages will be REMOVED:
  qemu-utils
The following NEW packages will be installed:
  libfdt1 qemu-system-arm qemu-system-common
Remv qemu-utils [1:10.0.2+ds-2+deb13u1~bpo12+1]
Inst libfdt1 (1.6.1-4+b1 Debian:12.15/oldstable [amd64])
Inst qemu-system-common (1:7.2+dfsg-7+deb12u18+b3 Debian:12.15/oldstable [amd64])
Inst qemu-system-arm (1:7.2+dfsg-7+deb12u18+b3 Debian:12.15/oldstable [amd64])
Conf libfdt1 (1.6.1-4+b1 Debian:12.15/oldstable [amd64])
";

    #[test]
    fn the_simulation_says_what_apt_would_install_and_remove() {
        let plan = AptPlan::parse(SIMULATION);
        assert_eq!(
            plan.removals,
            [(
                "qemu-utils".to_string(),
                "1:10.0.2+ds-2+deb13u1~bpo12+1".to_string()
            )]
        );
        let names: Vec<&str> = plan.installs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["libfdt1", "qemu-system-common", "qemu-system-arm"]);
        assert_eq!(plan.installs[2].1, "1:7.2+dfsg-7+deb12u18+b3");
        // A downgrade is an install of the archive's version.
        let downgrade = AptPlan::parse(
            "Inst qemu-utils [1:10.0.2+ds-2+deb13u1~bpo12+1] (1:7.2+dfsg-7+deb12u18+b3 \
             Debian:12.15/oldstable [amd64])",
        );
        assert_eq!(
            downgrade.installs,
            [(
                "qemu-utils".to_string(),
                "1:7.2+dfsg-7+deb12u18+b3".to_string()
            )]
        );
        assert!(downgrade.removals.is_empty());
        assert_eq!(AptPlan::parse(""), AptPlan::default());
    }

    #[test]
    fn download_size_and_archive_version() {
        let uris = "'http://deb.debian.org/debian/pool/main/b/brltty/libbrlapi0.8_6.5-7%2bdeb12u1_amd64.deb' libbrlapi0.8_6.5-7+deb12u1_amd64.deb 90456 MD5Sum:32c7c6938327d4e6b942a0071cc13a51
'http://deb.debian.org/debian/pool/main/c/capstone/libcapstone4_4.0.2-5_amd64.deb' libcapstone4_4.0.2-5_amd64.deb 569084 MD5Sum:3655102beca8e708cb31dea7a3d190af
W: a warning line
";
        assert_eq!(download_size(uris), (2, 90_456 + 569_084));
        assert_eq!(download_size(""), (0, 0));
        let madison = "qemu-utils | 1:7.2+dfsg-7+deb12u18+b3 | http://deb.debian.org/debian bookworm/main amd64 Packages
qemu-utils | 1:7.2+dfsg-7+deb12u15 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
";
        assert_eq!(
            newest_in_archive(madison).as_deref(),
            Some("1:7.2+dfsg-7+deb12u18+b3")
        );
        assert_eq!(newest_in_archive(""), None);
        // Only a `NAME=version` request allows a downgrade.
        let plain = install_args(&["qemu-system-arm".into()], &["-s"]);
        assert_eq!(
            plain,
            [
                "install",
                "--no-install-recommends",
                "-s",
                "qemu-system-arm"
            ]
        );
        let pinned = install_args(
            &["qemu-system-arm".into(), "qemu-utils=1:7.2".into()],
            &["-y"],
        );
        assert!(pinned.contains(&"--allow-downgrades".to_string()));
    }

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
