//! `cargo xtask test`: host checks, then the QEMU boot tests, then one
//! summary line.

use std::fmt::Write as _;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::Result;

use crate::boottest::{self, BootTest, Kernel, Outcome};
use crate::cli::TestOpts;
use crate::dtedit::DtEdit;
use crate::guests::{self, Guests};
use crate::qemu::{self, Console, Echo, RunSpec};
use crate::setup::{self, Tool};
use crate::{
    FATAL_GRACE, Workspace, debugtest, display_command, dtedit, hostiletest, image, irqtest,
    kernel, leveltest, linux, linuxpv, linuxpvtest, linuxtest, pmutest, ptptest, uefi, vm,
};

/// The host checks: (name, cargo arguments).
const HOST_CHECKS: [(&str, &[&str]); 7] = [
    ("fmt", &["fmt", "--all", "--check"]),
    (
        "clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    ),
    // The guest runtime and the guests only exist for bare metal
    // (`cfg(target_os = "none")`), so the host clippy above never sees them.
    (
        "clippy guests",
        &[
            "clippy",
            "-p",
            "guest-driver",
            "--features",
            "runtime",
            "--target",
            guests::GUEST_TARGET,
            "--lib",
            "--bins",
            "--",
            "-D",
            "warnings",
        ],
    ),
    // Likewise el2's arch layer (`src/arch`, bare metal only).
    (
        "clippy el2",
        &[
            "clippy",
            "-p",
            "el2",
            "--target",
            image::TARGET,
            "--release",
            "--",
            "-D",
            "warnings",
        ],
    ),
    // And the hardware half of the boot runtime both share (`boot`).
    (
        "clippy boot",
        &[
            "clippy",
            "-p",
            "boot",
            "--target",
            image::TARGET,
            "--",
            "-D",
            "warnings",
        ],
    ),
    // The docs' links and markup (with `RUSTDOCFLAGS`, [`DOC_FLAGS`]).
    ("doc", &["doc", "--workspace", "--no-deps"]),
    ("test", &["test", "--workspace"]),
];

/// What makes rustdoc's warnings (a broken intra-doc link, stray markup)
/// fail the `doc` host check.
const DOC_FLAGS: (&str, &str) = ("RUSTDOCFLAGS", "-D warnings");

/// Lines of console shown under a failed boot test.
const TAIL_LINES: usize = 30;

#[derive(Default)]
struct Tally {
    passed: u32,
    failed: Vec<String>,
}

impl Tally {
    /// Prints the progress line (or its end, if `continued`: the
    /// "name ... " prefix is already on the current line) and counts it.
    fn record(&mut self, name: &str, result: Result<f64, String>, continued: bool) {
        if !continued {
            print!("{name} ... ");
        }
        match result {
            Ok(secs) => {
                println!("ok ({secs:.1} s)");
                self.passed += 1;
            }
            Err(why) => {
                println!("FAILED: {why}");
                self.failed.push(name.to_string());
            }
        }
    }
}

pub fn test(ws: &Workspace, o: &TestOpts) -> Result<ExitCode> {
    let linux_dir = linux::cache_dir(ws)?;
    let mut all = boottest::boot_tests();
    all.extend(boottest::vm_tests());
    all.extend(linuxtest::tests(&linux_dir));
    all.push(ptptest::test(&linux_dir, &ws.xtask_dir()?));
    all.extend(linuxpvtest::tests(&ws.xtask_dir()?));
    all.extend(irqtest::tests());
    all.extend(leveltest::tests());
    all.extend(debugtest::tests());
    all.extend(pmutest::tests());
    all.extend(crate::sharetest::tests());
    all.extend(hostiletest::tests());
    all.extend(uefi::tests());
    let tests: Vec<BootTest> = all
        .into_iter()
        .filter(|t| o.filters.is_empty() || o.filters.iter().any(|f| t.name.contains(f.as_str())))
        .map(|mut t| {
            if let Some(timeout) = o.timeout {
                t.timeout = timeout;
            }
            t
        })
        .collect();
    if o.list {
        for t in &tests {
            println!("{}  (timeout {} s)", t.name, t.timeout.as_secs());
        }
        return Ok(ExitCode::SUCCESS);
    }
    if o.boot && tests.is_empty() {
        anyhow::bail!(
            "no boot test matches --filter {:?}; `cargo xtask test --list` shows their names",
            o.filters
        );
    }
    setup::ensure_rust_target(ws)?;

    let mut tally = Tally::default();
    if o.host {
        for (name, args) in HOST_CHECKS {
            host_check(ws, &mut tally, name, args);
        }
    }
    if o.boot {
        boot_tests(ws, o, &tests, &mut tally);
    }
    Ok(tally.finish())
}

/// Builds what `tests` need and runs them (no host checks), then prints
/// the summary line; for commands that run boot tests of their own making
/// (`cargo xtask soak`).
pub(crate) fn run_boot_tests(ws: &Workspace, o: &TestOpts, tests: &[BootTest]) -> Result<ExitCode> {
    setup::ensure_rust_target(ws)?;
    let mut tally = Tally::default();
    boot_tests(ws, o, tests, &mut tally);
    Ok(tally.finish())
}

impl Tally {
    /// Prints the failures and the counts; the exit status.
    fn finish(self) -> ExitCode {
        if !self.failed.is_empty() {
            println!("failed: {}", self.failed.join(", "));
        }
        println!("{} passed, {} failed", self.passed, self.failed.len());
        if self.failed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
}

fn host_check(ws: &Workspace, tally: &mut Tally, name: &str, args: &[&str]) {
    let name = format!("host {name}");
    let mut cmd = Command::new(ws.cargo());
    cmd.current_dir(&ws.root).args(args);
    if args.first() == Some(&"doc") {
        cmd.env(DOC_FLAGS.0, DOC_FLAGS.1);
        print!("{}={:?} ", DOC_FLAGS.0, DOC_FLAGS.1);
    }
    println!("$ cargo {}", args.join(" "));
    let _ = std::io::stdout().flush();
    let start = Instant::now();
    let result = match cmd.status() {
        Ok(s) if s.success() => Ok(start.elapsed().as_secs_f64()),
        Ok(s) => Err(format!("`cargo {}` failed ({s})", args.join(" "))),
        Err(e) => Err(format!("cannot run cargo: {e}")),
    };
    tally.record(&name, result, false);
}

fn boot_tests(ws: &Workspace, o: &TestOpts, tests: &[BootTest], tally: &mut Tally) {
    // Everything the boot tests share; if it fails, each test fails with
    // the reason (they did not pass, and the count must say so).
    let prepared = setup::ensure_tools(&[Tool::Qemu, Tool::UBoot, Tool::Dtc])
        .and_then(|()| image::build(ws, &o.build.source))
        .and_then(|art| Ok((art, guests::build(ws)?)))
        .and_then(|(art, guests)| Ok(((art, guests), log_dir(ws)?)));
    let ((art, guests), logs) = match prepared {
        Ok(p) => p,
        Err(e) => {
            let mut why = e.to_string();
            for cause in e.chain().skip(1) {
                let _ = write!(why, ": {cause}");
            }
            for t in tests {
                tally.record(&t.name, Err(format!("not run: {why}")), false);
            }
            return;
        }
    };
    // The stock Linux guest is fetched (once; then cached) only if a test
    // that boots it is selected. Without it those tests fail, saying why.
    let linux_dir = linux::cache_dir(ws);
    let needs_linux = |t: &BootTest| {
        linux_dir
            .as_ref()
            .is_ok_and(|dir| linuxtest::needs_guest(t, dir))
    };
    let linux_guest = if tests.iter().any(needs_linux) {
        Some(linux::obtain(ws).map_err(|e| format!("{e:#}")))
    } else {
        None
    };
    // The project's own guest kernel is built (once; then cached) only if
    // a test that boots it is selected; its series is checked with the
    // tree's checkpatch then, as a test of its own.
    let xtask_dir = ws.xtask_dir();
    let needs_pv = |t: &BootTest| {
        xtask_dir
            .as_ref()
            .is_ok_and(|dir| linuxpvtest::needs_guest(t, dir))
    };
    let pv_guest = if tests.iter().any(needs_pv) {
        let guest = linuxpv::obtain(ws, kernel::Flavor::Patched).map_err(|e| format!("{e:#}"));
        let name = "linux series checkpatch --strict";
        print!("{name} ... ");
        let _ = std::io::stdout().flush();
        let start = Instant::now();
        let verdict = match &guest {
            Ok(_) => kernel::checkpatch(ws)
                .map(|()| start.elapsed().as_secs_f64())
                .map_err(|e| format!("{e:#}")),
            Err(why) => Err(format!("not run: no patched tree: {why}")),
        };
        tally.record(name, verdict, true);
        Some(guest)
    } else {
        None
    };
    // The pvlinux initramfs alone, for tests that boot it with Debian's
    // kernel (the PV guest's build above writes it too).
    let needs_initramfs = |t: &BootTest| {
        xtask_dir
            .as_ref()
            .is_ok_and(|dir| ptptest::needs_initramfs(t, dir) && !needs_pv(t))
    };
    let initramfs = if pv_guest.is_none() && tests.iter().any(needs_initramfs) {
        Some(linuxpv::initramfs(ws).map_err(|e| format!("{e:#}")))
    } else {
        None
    };
    // Likewise the UEFI firmware, only for the tests that boot through it.
    let firmware = if tests.iter().any(uefi::needs_firmware) {
        Some(setup::ensure_tools(&[Tool::Uefi]).map_err(|e| format!("{e:#}")))
    } else {
        None
    };
    for t in tests {
        if uefi::needs_firmware(t)
            && let Some(Err(why)) = &firmware
        {
            tally.record(&t.name, Err(format!("not run: {why}")), false);
            continue;
        }
        if needs_pv(t)
            && let Some(Err(why)) = &pv_guest
        {
            tally.record(
                &t.name,
                Err(format!("not run: no PV-lock Linux guest: {why}")),
                false,
            );
            continue;
        }
        if needs_initramfs(t)
            && let Some(Err(why)) = &initramfs
        {
            tally.record(
                &t.name,
                Err(format!("not run: no pvlinux initramfs: {why}")),
                false,
            );
            continue;
        }
        if needs_linux(t)
            && let Some(Err(why)) = &linux_guest
        {
            tally.record(
                &t.name,
                Err(format!("not run: no Linux guest: {why}")),
                false,
            );
            continue;
        }
        run_one(t, &art.image, &guests, &logs, o.verbose, tally);
    }
}

fn log_dir(ws: &Workspace) -> Result<PathBuf> {
    let dir = ws.xtask_dir()?.join("boot-logs");
    fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The machine and kernel image of `t`: its device-tree edits applied, its
/// VMs' images placed and described.
pub(crate) fn prepare(
    t: &BootTest,
    el2_image: &Path,
    guests: &Guests,
    logs: &Path,
) -> Result<(qemu::Machine, PathBuf)> {
    let mut machine = t.machine.clone();
    let image = match t.kernel {
        Kernel::El2 => el2_image.to_path_buf(),
        Kernel::Guest(name) => guests::resolve(guests, name)?,
    };
    if machine.uefi.is_some() {
        // The VMs go in the partition's VM description, not in a tree.
        uefi::prepare(
            &mut machine,
            &image,
            guests,
            &t.vms,
            &uefi::test_dir(logs, &t.name),
        )?;
        return Ok((machine, image));
    }
    // The VM nodes first, so that a test's own edit can break one of them.
    let mut edits: Vec<DtEdit> = Vec::new();
    if !t.vms.is_empty() {
        let plan = vm::plan_for(&machine, el2_image, guests, &t.vms)?;
        machine.extra_args.extend(plan.qemu_args());
        edits.push(DtEdit::AddVms(plan));
    }
    edits.extend(t.dt_edit.iter().cloned());
    if !edits.is_empty() {
        let dir = logs.join(format!("{}.dt", slug(&t.name)));
        let edits: Vec<&DtEdit> = edits.iter().collect();
        machine.dtb = Some(
            dtedit::prepare(&machine, &edits, &image, &dir)
                .map_err(|e| e.context("cannot prepare the device tree"))?,
        );
    }
    Ok((machine, image))
}

fn run_one(
    t: &BootTest,
    el2_image: &Path,
    guests: &Guests,
    logs: &Path,
    verbose: bool,
    tally: &mut Tally,
) {
    // Without --verbose the result completes the "name ... " line; with it,
    // the console comes in between and the result gets a line of its own.
    if verbose {
        println!("{} ...", t.name);
    } else {
        print!("{} ... ", t.name);
    }
    let _ = std::io::stdout().flush();
    let continued = !verbose;
    let (machine, image) = match prepare(t, el2_image, guests, logs) {
        Ok(prepared) => prepared,
        Err(e) => {
            tally.record(&t.name, Err(format!("{e:#}")), continued);
            return;
        }
    };
    let cmd = match machine.command(&image, &Console::Stdio, false) {
        Ok(c) => c,
        Err(e) => {
            let why = format!("bad machine definition: {e}");
            tally.record(&t.name, Err(why), continued);
            return;
        }
    };
    let command_line = display_command(&cmd);
    let spec = RunSpec {
        timeout: Some(t.timeout),
        echo: if verbose { Echo::Terminal } else { Echo::None },
        script: t
            .machine
            .console_script()
            .or_else(|| linuxtest::console_script(t)),
        fatal_grace: Some(FATAL_GRACE),
        stop_on: match t.outcome {
            Outcome::StopsAt(pattern) | Outcome::FatalThenStopsAt(pattern) => Some(pattern),
            _ => None,
        },
        ..RunSpec::default()
    };
    let outcome = match qemu::run(cmd, spec) {
        Ok(o) => o,
        Err(e) => {
            tally.record(&t.name, Err(format!("{e:#}")), continued);
            return;
        }
    };
    let secs = outcome.duration.as_secs_f64();
    let log = logs.join(format!("{}.log", slug(&t.name)));
    let mut text = format!(
        "# {}\n# {command_line}\n# {} after {secs:.1} s\n{}",
        t.name, outcome.ending, outcome.console
    );
    if !outcome.stderr.is_empty() {
        let _ = write!(text, "\n--- QEMU stderr ---\n{}", outcome.stderr);
    }
    let _ = fs::write(&log, text);
    match boottest::judge(t, &outcome) {
        Ok(()) => tally.record(&t.name, Ok(secs), continued),
        Err(why) => {
            tally.record(&t.name, Err(format!("{why} ({secs:.1} s)")), continued);
            if !verbose {
                print!("{}", outcome.tail(TAIL_LINES, "    | "));
            }
            println!("    full console: {}", log.display());
        }
    }
}

/// A file name for a test name.
pub(crate) fn slug(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '=' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
