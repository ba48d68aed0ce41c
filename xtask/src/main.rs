//! `cargo xtask`: the host-side build, run and test tool of the el2
//! hypervisor. See `cargo xtask help`.

mod boottest;
mod cli;
mod dtedit;
mod gdb;
mod image;
mod qemu;
mod setup;
mod suite;
mod sys;

use std::env;
use std::ffi::OsString;
use std::fs;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, Result};

use cli::{Cmd, RunOpts};
use qemu::{Console, Echo, RunSpec};
use setup::Tool;

/// How long a crashed machine may take to stop after printing the marker.
pub const FATAL_GRACE: Duration = Duration::from_secs(10);

/// The cargo workspace xtask belongs to.
pub struct Workspace {
    pub root: PathBuf,
}

impl Workspace {
    fn locate() -> Self {
        let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let root = manifest_dir
            .parent()
            .map_or_else(|| manifest_dir.clone(), PathBuf::from);
        Self { root }
    }

    /// The workspace's own target directory (never `CARGO_TARGET_DIR`), so
    /// the image is always at the same place.
    pub fn target_dir(&self) -> PathBuf {
        self.root.join("target")
    }

    /// Scratch space for logs and prebuilt-ELF images.
    pub fn xtask_dir(&self) -> Result<PathBuf> {
        let dir = self.target_dir().join("xtask");
        fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create directory {}", dir.display()))?;
        Ok(dir)
    }

    /// The cargo that runs us (as `cargo xtask`), else the one on PATH.
    pub fn cargo(&self) -> OsString {
        env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    match cli::parse(args).and_then(dispatch) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cmd: Cmd) -> Result<ExitCode> {
    let ws = Workspace::locate();
    match cmd {
        Cmd::Help => {
            print!("{}", cli::HELP);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Setup => {
            setup::ensure_rust_target(&ws)?;
            setup::ensure_tools(&[Tool::Qemu, Tool::UBoot, Tool::Gdb])?;
            println!("{}", qemu::check_version()?);
            println!("setup complete");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Build(b) => {
            image::build(&ws, &b.source)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run(o) => run(&ws, &o),
        Cmd::Gdb(o) => gdb::gdb(&ws, &o),
        Cmd::Test(o) => suite::test(&ws, &o),
    }
}

/// Tools a boot of `machine` needs.
pub fn tools_for(machine: &qemu::Machine) -> Vec<Tool> {
    if machine.uboot {
        vec![Tool::Qemu, Tool::UBoot]
    } else {
        vec![Tool::Qemu]
    }
}

fn run(ws: &Workspace, o: &RunOpts) -> Result<ExitCode> {
    setup::ensure_tools(&tools_for(&o.machine))?;
    let art = image::build(ws, &o.build.source)?;
    let cmd = o.machine.command(&art.image, &Console::Stdio, false)?;
    eprintln!("xtask: {}", display_command(&cmd));
    let interactive = std::io::stdin().is_terminal() && !o.machine.uboot;
    if interactive {
        eprintln!("xtask: console follows; quit QEMU with Ctrl-A X");
    }
    let outcome = qemu::run(
        cmd,
        RunSpec {
            timeout: o.timeout,
            echo: Echo::Terminal,
            inherit_stdin: true,
            script: o.machine.console_script(),
            fatal_grace: Some(FATAL_GRACE),
            ..RunSpec::default()
        },
    )?;
    let log = ws.xtask_dir()?.join("console.log");
    let saved = fs::write(&log, &outcome.console);
    if !outcome.console.ends_with('\n') && !outcome.console.is_empty() {
        println!();
    }
    let secs = outcome.duration.as_secs_f64();
    match outcome.failure() {
        None => {
            eprintln!("xtask: QEMU exited normally after {secs:.1} s");
            Ok(ExitCode::SUCCESS)
        }
        Some(why) => {
            eprintln!("xtask: FAILED after {secs:.1} s: {why}");
            if saved.is_ok() {
                eprintln!("xtask: console saved to {}", log.display());
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// A command line as one could paste it into a shell.
pub fn display_command(cmd: &Command) -> String {
    let quote = |s: &str| {
        if !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.,=/:+@%".contains(&b))
        {
            s.to_string()
        } else {
            format!("'{}'", s.replace('\'', r"'\''"))
        }
    };
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}
