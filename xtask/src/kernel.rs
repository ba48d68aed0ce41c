//! `cargo xtask linux-build [--stock]`: the project's own Linux guest
//! kernel, built from Debian's `linux-source-6.12` tree with the patch
//! series in `guest-driver/linux/series/` (or, `--stock`, without it: the
//! like-for-like baseline) and the configuration fragment
//! `guest-driver/linux/pvlock-guest.config` applied on top of
//! `allnoconfig`.
//!
//! What it decides:
//! - where things live: each flavour has its own source tree, build
//!   directory and cached Image under `target/xtask/kernel/<flavour>/`;
//! - when to rebuild: the Image is cached under a key made of the source
//!   package's version, the series (patched flavour only), the fragment and
//!   the cross compiler's version; a changed tree key unpacks the tree
//!   again, a changed build key starts from an empty build directory (a
//!   series that changes generated headers would otherwise leave stale
//!   objects behind);
//! - what counts as a good configuration: every option the fragment sets
//!   must come out of `allnoconfig` as asked, except, for the stock
//!   flavour, the options the series itself introduces; anything else is
//!   an error that names the option.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};

use crate::Workspace;
use crate::setup::{self, Tool};

/// The Debian package with the kernel tree, and where it puts the tarball.
pub const SOURCE_PACKAGE: &str = "linux-source-6.12";
pub const SOURCE_TARBALL: &str = "/usr/src/linux-source-6.12.tar.xz";
/// The tarball's top directory.
const TREE_TOP: &str = "linux-source-6.12";
/// The series and the fragment, relative to the workspace root.
pub const SERIES_DIR: &str = "guest-driver/linux/series";
pub const CONFIG_FRAGMENT: &str = "guest-driver/linux/pvlock-guest.config";
/// The cross compiler prefix (Debian's `gcc-aarch64-linux-gnu`).
const CROSS_COMPILE: &str = "aarch64-linux-gnu-";
/// Fixed build metadata, so that the same inputs give the same Image.
const BUILD_USER: &str = "pvlock";
const BUILD_HOST: &str = "xtask";
const BUILD_TIMESTAMP: &str = "Thu Jan  1 00:00:00 UTC 2026";

/// Which kernel to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// The tree with the project's series: the PV-lock guest.
    Patched,
    /// The same tree and configuration without the series.
    Stock,
}

impl Flavor {
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Patched => "patched",
            Flavor::Stock => "stock",
        }
    }
}

/// The kernel's symbol table, kept beside its Image (`cargo xtask run
/// --sample` names guest functions with it).
const SYSTEM_MAP: &str = "System.map";

/// The `System.map` of the last build of `flavor`, if there is one.
pub fn system_map(ws: &Workspace, flavor: Flavor) -> Option<PathBuf> {
    let dir = ws.xtask_dir().ok()?.join("kernel").join(flavor.name());
    [dir.join(SYSTEM_MAP), dir.join("build").join(SYSTEM_MAP)]
        .into_iter()
        .find(|p| p.is_file())
}

/// A built kernel.
#[derive(Clone, Debug)]
pub struct Built {
    /// The arm64 Image.
    pub image: PathBuf,
    /// The source package's version, e.g. `6.12.117-1~deb12u1`.
    pub source_version: String,
}

/// The patches of the series, in order (file names sort as they apply).
pub fn series(ws: &Workspace) -> Result<Vec<PathBuf>> {
    let dir = ws.root.join(SERIES_DIR);
    let mut patches: Vec<PathBuf> = fs::read_dir(&dir)
        .with_context(|| format!("cannot read the series directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "patch"))
        .collect();
    patches.sort();
    ensure!(
        !patches.is_empty(),
        "{} holds no *.patch file",
        dir.display()
    );
    Ok(patches)
}

/// Builds (or finds cached) the kernel of `flavor`; prints its path last.
pub fn build(ws: &Workspace, flavor: Flavor) -> Result<Built> {
    setup::ensure_tools(&[
        Tool::LinuxSource,
        Tool::CrossGcc,
        Tool::Flex,
        Tool::Bison,
        Tool::Bc,
        Tool::Make,
        Tool::Xz,
    ])?;
    let version = source_version()?;
    let patches = match flavor {
        Flavor::Patched => series(ws)?,
        Flavor::Stock => Vec::new(),
    };
    let mut series_text = String::new();
    for p in &patches {
        series_text.push_str(
            &fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?,
        );
    }
    let fragment_path = ws.root.join(CONFIG_FRAGMENT);
    let fragment = fs::read_to_string(&fragment_path)
        .with_context(|| format!("cannot read {}", fragment_path.display()))?;
    let compiler = compiler_version()?;

    let dir = ws.xtask_dir()?.join("kernel").join(flavor.name());
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tree_key = key(&[&version, &series_text]);
    let build_key = key(&[&tree_key, &fragment, &compiler]);
    let image = dir.join("Image");
    let key_file = dir.join("image.key");
    if image.is_file() && fs::read_to_string(&key_file).ok().as_deref() == Some(&build_key) {
        println!("{}", image.display());
        return Ok(Built {
            image,
            source_version: version,
        });
    }

    let tree = prepare_tree(&dir, &tree_key, &patches)?;
    let out = dir.join("build");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out)?;
    let fragment_copy = dir.join("fragment.config");
    fs::write(&fragment_copy, &fragment)?;
    let log = dir.join("build.log");
    let start = Instant::now();
    make(
        &tree,
        &out,
        &[
            &format!("KCONFIG_ALLCONFIG={}", fragment_copy.display()),
            "allnoconfig",
        ],
        &log,
    )?;
    let config = fs::read_to_string(out.join(".config"))?;
    let introduced = introduced_options(&series_text_of(ws)?);
    let skip: &[String] = match flavor {
        Flavor::Patched => &[],
        Flavor::Stock => &introduced,
    };
    check_config(&fragment, &config, skip).map_err(|e| {
        anyhow::anyhow!(
            "{e} (the fragment is {}; the result {})",
            fragment_path.display(),
            out.join(".config").display()
        )
    })?;
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    println!(
        "xtask: building the {} {SOURCE_PACKAGE} ({version}) kernel with {jobs} jobs \
         (1.5 to 4 minutes on 2 cores); log: {}",
        flavor.name(),
        log.display()
    );
    make(&tree, &out, &[&format!("-j{jobs}"), "Image"], &log)?;
    let secs = start.elapsed().as_secs_f64();
    fs::copy(out.join("arch/arm64/boot/Image"), &image)
        .with_context(|| format!("the build left no Image in {}", out.display()))?;
    fs::copy(out.join("System.map"), dir.join(SYSTEM_MAP))
        .with_context(|| format!("the build left no System.map in {}", out.display()))?;
    fs::write(&key_file, &build_key)?;
    println!("xtask: built in {secs:.0} s");
    println!("{}", image.display());
    Ok(Built {
        image,
        source_version: version,
    })
}

/// Runs the base tree's `scripts/checkpatch.pl --strict` over the series
/// (in the patched tree, which [`build`] left in place): every patch must
/// end with `total: 0 errors, 0 warnings, 0 checks`.
pub fn checkpatch(ws: &Workspace) -> Result<()> {
    setup::ensure_tools(&[Tool::CheckpatchPython])?;
    let tree = ws
        .xtask_dir()?
        .join("kernel")
        .join(Flavor::Patched.name())
        .join("src")
        .join(TREE_TOP);
    ensure!(
        tree.join("scripts/checkpatch.pl").is_file(),
        "no patched tree at {} (cargo xtask linux-build makes it)",
        tree.display()
    );
    let patches = series(ws)?;
    // checkpatch starts scripts/spdxcheck.py through `env python3`: the
    // system's, which has the modules, must come first.
    let path = std::env::var("PATH").unwrap_or_default();
    let system_bin = Path::new(setup::SYSTEM_PYTHON)
        .parent()
        .map_or_else(String::new, |d| d.display().to_string());
    let out = Command::new("perl")
        .current_dir(&tree)
        .env("PATH", format!("{system_bin}:{path}"))
        .arg("scripts/checkpatch.pl")
        .args(["--strict", "--color=never"])
        .args(&patches)
        .output()
        .context("cannot run perl scripts/checkpatch.pl")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    checkpatch_verdict(&text, patches.len())
}

/// Judges checkpatch's output for `patches` patches.
fn checkpatch_verdict(text: &str, patches: usize) -> Result<()> {
    let totals: Vec<&str> = text.lines().filter(|l| l.starts_with("total: ")).collect();
    let clean = totals
        .iter()
        .filter(|l| l.starts_with("total: 0 errors, 0 warnings, 0 checks"))
        .count();
    ensure!(
        !text.contains("Traceback"),
        "checkpatch's SPDX check crashed: {}",
        text.lines()
            .find(|l| l.contains("Error"))
            .unwrap_or("see its output")
    );
    ensure!(
        totals.len() == patches && clean == patches,
        "checkpatch --strict is not clean on every patch:\n{}",
        text.lines()
            .filter(|l| {
                l.starts_with("ERROR")
                    || l.starts_with("WARNING")
                    || l.starts_with("CHECK")
                    || l.starts_with("total")
                    || l.starts_with('#')
            })
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(())
}

/// The installed source package's version.
fn source_version() -> Result<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", SOURCE_PACKAGE])
        .output()
        .context("cannot run dpkg-query")?;
    ensure!(
        out.status.success(),
        "dpkg-query does not know {SOURCE_PACKAGE}: is it installed?"
    );
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    ensure!(!v.is_empty(), "{SOURCE_PACKAGE} has no version");
    Ok(v)
}

fn compiler_version() -> Result<String> {
    let gcc = format!("{CROSS_COMPILE}gcc");
    let out = Command::new(&gcc)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {gcc}"))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string())
}

/// The whole series' text, whatever the flavour (to know what it adds).
fn series_text_of(ws: &Workspace) -> Result<String> {
    let mut text = String::new();
    for p in series(ws)? {
        text.push_str(&fs::read_to_string(&p)?);
    }
    Ok(text)
}

/// A short hex digest of `parts` (FNV-1a, 64 bits: a cache key, not a
/// security boundary), each part length-prefixed.
pub fn key(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in (part.len() as u64)
            .to_le_bytes()
            .iter()
            .chain(part.as_bytes())
        {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// The source tree for `tree_key` under `dir`: unpacked (again, if the key
/// changed) and patched.
fn prepare_tree(dir: &Path, tree_key: &str, patches: &[PathBuf]) -> Result<PathBuf> {
    let src = dir.join("src");
    let tree = src.join(TREE_TOP);
    let marker = src.join("tree.key");
    if tree.is_dir() && fs::read_to_string(&marker).ok().as_deref() == Some(tree_key) {
        return Ok(tree);
    }
    let _ = fs::remove_dir_all(&src);
    fs::create_dir_all(&src)?;
    println!("xtask: unpacking {SOURCE_TARBALL} into {}", src.display());
    let status = Command::new("tar")
        .arg("-xf")
        .arg(SOURCE_TARBALL)
        .arg("-C")
        .arg(&src)
        .status()
        .context("cannot run tar")?;
    ensure!(
        status.success(),
        "tar -xf {SOURCE_TARBALL} failed ({status})"
    );
    ensure!(
        tree.is_dir(),
        "{SOURCE_TARBALL} did not unpack into {TREE_TOP}/"
    );
    for patch in patches {
        // The tree sits inside this repository's work tree: without the
        // ceiling, git would apply relative to the repository and ignore
        // every path outside the current directory.
        let out = Command::new("git")
            .current_dir(&tree)
            .env("GIT_CEILING_DIRECTORIES", &src)
            .args(["apply", "--whitespace=error-all"])
            .arg(patch)
            .stderr(Stdio::piped())
            .output()
            .context("cannot run git apply")?;
        ensure!(
            out.status.success(),
            "{} does not apply to {SOURCE_PACKAGE}: {}",
            patch.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    fs::write(&marker, tree_key)?;
    Ok(tree)
}

/// `make` in `tree` with `O=out`, output appended to `log`; on failure the
/// error carries the log's tail.
fn make(tree: &Path, out: &Path, args: &[&str], log: &Path) -> Result<()> {
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    let status = Command::new("make")
        .current_dir(tree)
        .arg(format!("O={}", out.display()))
        .arg("ARCH=arm64")
        .arg(format!("CROSS_COMPILE={CROSS_COMPILE}"))
        .args(args)
        .env("KBUILD_BUILD_USER", BUILD_USER)
        .env("KBUILD_BUILD_HOST", BUILD_HOST)
        .env("KBUILD_BUILD_TIMESTAMP", BUILD_TIMESTAMP)
        .stdout(file.try_clone()?)
        .stderr(file)
        .stdin(Stdio::null())
        .status()
        .context("cannot run make")?;
    if !status.success() {
        let text = fs::read_to_string(log).unwrap_or_default();
        let mut tail = String::new();
        let lines: Vec<&str> = text.lines().collect();
        for l in &lines[lines.len().saturating_sub(30)..] {
            let _ = writeln!(tail, "    | {l}");
        }
        bail!(
            "make {} failed ({status}); the end of {}:\n{tail}",
            args.join(" "),
            log.display()
        );
    }
    Ok(())
}

/// The Kconfig options the series introduces (`+config NAME` lines).
pub fn introduced_options(series: &str) -> Vec<String> {
    series
        .lines()
        .filter_map(|l| l.strip_prefix("+config "))
        .map(|name| name.trim().to_string())
        .collect()
}

/// Checks that every `CONFIG_X=value` of `fragment` came out of the
/// configuration as asked (`=n` meaning "not set"), except the options in
/// `skip`.
pub fn check_config(fragment: &str, config: &str, skip: &[String]) -> Result<(), String> {
    for (number, line) in fragment.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, wanted)) = line
            .strip_prefix("CONFIG_")
            .and_then(|rest| rest.split_once('='))
        else {
            return Err(format!(
                "line {}: {line:?} is not CONFIG_NAME=value",
                number + 1
            ));
        };
        if skip.iter().any(|s| s == name) {
            continue;
        }
        let set = config.lines().find_map(|l| {
            l.strip_prefix("CONFIG_")
                .and_then(|rest| rest.split_once('='))
                .filter(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        });
        let ok = match (wanted, set.as_deref()) {
            ("n", None) => true,
            (w, Some(s)) => w == s,
            (_, None) => false,
        };
        if !ok {
            return Err(format!(
                "CONFIG_{name}: the fragment asks for {wanted}, the configuration has {}",
                set.unwrap_or_else(|| "it unset".to_string())
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpatch_must_be_clean_on_every_patch() {
        let clean = "total: 0 errors, 0 warnings, 0 checks, 96 lines checked\n";
        assert!(checkpatch_verdict(&clean.repeat(2), 2).is_ok());
        assert!(checkpatch_verdict(clean, 2).is_err(), "a patch not checked");
        let warned = format!(
            "{clean}WARNING: line length of 101 exceeds 100 columns\n#5: FILE: a.c:1:\n\
             total: 0 errors, 1 warnings, 0 checks, 9 lines checked\n"
        );
        let why = checkpatch_verdict(&warned, 2).unwrap_err().to_string();
        assert!(
            why.contains("line length") && why.contains("1 warnings"),
            "{why}"
        );
        let crashed = format!("Traceback (most recent call last):\n{}", clean.repeat(2));
        assert!(checkpatch_verdict(&crashed, 2).is_err());
    }

    #[test]
    fn keys_change_with_every_input_and_only_then() {
        let a = key(&["6.12.117-1~deb12u1", "series", "fragment"]);
        assert_eq!(a, key(&["6.12.117-1~deb12u1", "series", "fragment"]));
        assert_ne!(a, key(&["6.12.117-2~deb12u1", "series", "fragment"]));
        assert_ne!(a, key(&["6.12.117-1~deb12u1", "series2", "fragment"]));
        // Length prefixes: moving a byte between parts changes the key.
        assert_ne!(key(&["ab", "c"]), key(&["a", "bc"]));
        assert_eq!(a.len(), 16);
    }

    #[test]
    fn the_options_a_series_introduces_are_found() {
        let series = "+++ b/arch/arm64/Kconfig\n@@ -1 +1 @@\n+config PARAVIRT_SPINLOCKS\n\
                      +\tbool \"x\"\n config PARAVIRT\n-config OLD\n";
        assert_eq!(introduced_options(series), ["PARAVIRT_SPINLOCKS"]);
    }

    #[test]
    fn the_configuration_must_match_the_fragment() {
        let fragment = "# comment\nCONFIG_SMP=y\nCONFIG_NR_CPUS=64\nCONFIG_MODULES=n\n\
                        CONFIG_PARAVIRT_SPINLOCKS=y\n";
        let config = "CONFIG_SMP=y\nCONFIG_NR_CPUS=64\n# CONFIG_MODULES is not set\n\
                      CONFIG_PARAVIRT_SPINLOCKS=y\n";
        assert_eq!(check_config(fragment, config, &[]), Ok(()));
        let stock = "CONFIG_SMP=y\nCONFIG_NR_CPUS=64\n";
        let why = check_config(fragment, stock, &[]).unwrap_err();
        assert!(why.contains("CONFIG_PARAVIRT_SPINLOCKS"), "{why}");
        assert_eq!(
            check_config(fragment, stock, &["PARAVIRT_SPINLOCKS".to_string()]),
            Ok(())
        );
        let wrong = "CONFIG_SMP=y\nCONFIG_NR_CPUS=8\n";
        let why = check_config(fragment, wrong, &[]).unwrap_err();
        assert!(why.contains("CONFIG_NR_CPUS") && why.contains("64") && why.contains('8'));
        let modules = "CONFIG_SMP=y\nCONFIG_NR_CPUS=64\nCONFIG_MODULES=y\n";
        assert!(
            check_config(fragment, modules, &[])
                .unwrap_err()
                .contains("MODULES")
        );
        assert!(
            check_config("SMP=y\n", config, &[])
                .unwrap_err()
                .contains("line 1")
        );
    }

    #[test]
    fn the_checked_in_series_and_fragment_agree() {
        // Every option the series introduces is asked for by the fragment,
        // so the patched kernel really has it; and the fragment parses.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let ws = Workspace {
            root: root.to_path_buf(),
        };
        let text = series_text_of(&ws).unwrap();
        let fragment = fs::read_to_string(root.join(CONFIG_FRAGMENT)).unwrap();
        let introduced = introduced_options(&text);
        assert!(!introduced.is_empty());
        for option in &introduced {
            assert!(
                fragment.contains(&format!("CONFIG_{option}=y")),
                "{option} is not in {CONFIG_FRAGMENT}"
            );
        }
        assert!(check_config(&fragment, "", &[]).is_err());
    }
}
