//! `cargo xtask gdb`: QEMU halted at the first instruction with its gdb stub
//! on :1234, the console in a file, and gdb-multiarch on the terminal.

use std::ffi::OsString;
use std::fs::File;
use std::net::TcpListener;
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cli::RunOpts;
use crate::qemu::{self, Console, Echo, RunSpec};
use crate::setup::{self, GDB, Tool};
use crate::{Launch, Workspace, display_command, image, prepare_launch, sys};

const GDB_PORT: u16 = 1234;

/// Where the kernel runs (the symbols of guests in VMs are not loaded).
const LOAD_ADDR: u64 = image::LOAD_ADDR;

pub fn gdb(ws: &Workspace, o: &RunOpts) -> Result<ExitCode> {
    setup::ensure_tools(&[Tool::Gdb])?;
    let Launch {
        machine,
        kernel: art,
        notes,
    } = prepare_launch(ws, o)?;
    for note in notes {
        eprintln!("xtask: {note}");
    }

    // QEMU's -s listens on tcp::1234; say so clearly if it cannot.
    drop(TcpListener::bind(("0.0.0.0", GDB_PORT)).with_context(|| {
        format!(
            "TCP port {GDB_PORT} (QEMU's gdb stub) is in use; is another `cargo xtask gdb` \
             or QEMU -s running?"
        )
    })?);

    let log = ws.xtask_dir()?.join("gdb-console.log");
    let file = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
    // The console goes through xtask (so U-Boot can be driven) into the file.
    let cmd = machine.command(&art.image, &Console::Stdio, true)?;
    eprintln!("xtask: {}", display_command(&cmd));
    eprintln!(
        "xtask: console in {} (follow it with `tail -f {}`)",
        log.display(),
        log.display()
    );
    let cancel = Arc::new(AtomicBool::new(false));
    let spec = RunSpec {
        timeout: None,
        echo: Echo::File(file),
        script: machine.console_script(),
        cancel: Some(cancel.clone()),
        own_process_group: true,
        ..RunSpec::default()
    };
    let runner = thread::spawn(move || qemu::run(cmd, spec));

    // Give QEMU a moment to fail on a bad option before handing over.
    thread::sleep(Duration::from_millis(500));
    if runner.is_finished() {
        let outcome = runner
            .join()
            .map_err(|_| anyhow::anyhow!("the QEMU supervisor thread panicked"))??;
        bail!(
            "QEMU stopped before gdb could attach ({}):\n{}",
            outcome.ending,
            outcome.tail(10, "    ")
        );
    }

    let mut gdb = Command::new(GDB);
    gdb.arg("-q");
    if art.link_base == LOAD_ADDR {
        gdb.arg(&art.elf);
    } else {
        // A position-independent kernel (linked at 0) runs where the loader
        // put it: tell gdb, or no symbol would match a PC.
        let offset = LOAD_ADDR.wrapping_sub(art.link_base);
        eprintln!(
            "xtask: {} is linked at {:#x} and runs at {LOAD_ADDR:#x}; \
             loading its symbols with offset {offset:#x}",
            art.elf.display(),
            art.link_base
        );
        let mut cmd = OsString::from(format!("symbol-file -o {offset:#x} "));
        cmd.push(&art.elf);
        gdb.arg("-ex").arg(cmd);
    }
    gdb.arg("-ex").arg(format!("target remote :{GDB_PORT}"));
    let status = {
        // Ctrl-C belongs to gdb (it interrupts the target); QEMU is in its
        // own process group and we must survive to stop it afterwards.
        let _guard = sys::IgnoreSigint::new();
        gdb.status()
    };
    cancel.store(true, Ordering::Relaxed);
    let outcome = runner
        .join()
        .map_err(|_| anyhow::anyhow!("the QEMU supervisor thread panicked"))??;
    eprintln!("xtask: {}; console in {}", outcome.ending, log.display());
    let status = status.with_context(|| format!("cannot run {GDB}"))?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
