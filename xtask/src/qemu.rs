//! The QEMU machine el2 boots on, and a runner that boots it with a hard
//! timeout while streaming and capturing the serial console.

use std::ffi::OsString;
use std::fmt::{self, Write as _};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use crate::setup::{AAVMF_CODE, QEMU, UBOOT_BIN};

/// First line of every el2 crash report.
pub const FATAL_MARKER: &str = "EL2 FATAL";
/// Starts every line of a guest's crash report (panic, unexpected
/// exception, failed self-check): `guest_driver::FATAL_MARKER`.
pub const GUEST_FATAL_MARKER: &str = guest_driver::FATAL_MARKER;

/// Where U-Boot finds the image QEMU's loader device put in RAM. `booti`
/// moves it to RAM base + text_offset (0x40080000) before entering it.
pub const UBOOT_LOAD_ADDR: u64 = 0x4400_0000;

/// Largest `-smp` QEMU's virt machine accepts with GICv3.
const MAX_CPUS: u32 = 512;

/// The emulated machine: everything `cargo xtask run` lets one choose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// QEMU `-cpu` model, already normalised (see [`normalize_cpu`]).
    pub cpu: String,
    pub smp: u32,
    /// Spread the CPUs over this many clusters (QEMU's `-smp ...,clusters=`).
    pub clusters: Option<u32>,
    /// QEMU `-m` size, e.g. `1G`.
    pub mem: String,
    /// Boot through U-Boot's `booti` instead of QEMU's `-kernel` loader.
    pub uboot: bool,
    /// Kernel command line (the DT's /chosen/bootargs).
    pub append: Option<String>,
    /// Deterministic single-threaded TCG with `-icount`.
    pub icount: bool,
    /// Extra arguments passed to QEMU verbatim.
    pub extra_args: Vec<String>,
    /// Boot with this device tree instead of QEMU's own (`-dtb`).
    pub dtb: Option<PathBuf>,
    /// Only write QEMU's device tree for this machine to this file and exit
    /// (`-machine dumpdtb=`).
    pub dump_dtb: Option<PathBuf>,
    /// Start the CPUs at EL2 (`virtualization=on`), as el2 needs; without
    /// it they start at EL1 and a guest can boot directly.
    pub virtualization: bool,
    /// Boot through UEFI firmware (AAVMF) from an EFI system partition
    /// instead of QEMU's `-kernel` loader.
    pub uefi: Option<Uefi>,
}

/// A boot through UEFI: QEMU's AAVMF firmware (edk2 for `virt`) in the two
/// flash banks, starting `\EFI\BOOT\BOOTAA64.EFI` (el2's image, which is
/// also an EFI application) from a FAT disk made from a directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Uefi {
    /// `-machine acpi=off`: the firmware then installs QEMU's device tree
    /// instead of ACPI tables (with ACPI on, edk2 hands over ACPI only).
    pub device_tree: bool,
    /// The partition's directory and the writable copy of the variable
    /// store, once [`crate::uefi::prepare`] has made them.
    pub esp: Option<PathBuf>,
    pub vars: Option<PathBuf>,
    /// Boot-test fault: the VM description names the first VM's kernel
    /// file, but the file is left off the partition.
    pub missing_kernel: bool,
    /// Start el2 from the UEFI Shell with these arguments (its load
    /// options) instead of as the partition's default boot file.
    pub shell_args: Option<String>,
}

impl Default for Machine {
    fn default() -> Self {
        Self {
            cpu: normalize_cpu("max"),
            smp: 4,
            clusters: None,
            mem: "1G".into(),
            uboot: false,
            append: None,
            icount: false,
            extra_args: Vec::new(),
            dtb: None,
            dump_dtb: None,
            virtualization: true,
            uefi: None,
        }
    }
}

/// `max` alone means `max,pauth=off`: emulating pointer authentication
/// makes `-cpu max` several times slower, and el2 does not use it.
pub fn normalize_cpu(cpu: &str) -> String {
    if cpu == "max" {
        "max,pauth=off".into()
    } else {
        cpu.into()
    }
}

/// Where the serial console goes.
#[derive(Clone, Debug)]
pub enum Console {
    /// QEMU's stdin/stdout (multiplexed with the monitor: Ctrl-A C, Ctrl-A X).
    Stdio,
    /// A file; QEMU's stdin is then unused.
    File(PathBuf),
}

impl Machine {
    /// Rejects option combinations QEMU would reject less clearly.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            !self.cpu.is_empty(),
            "--cpu needs a CPU model, e.g. max or cortex-a57"
        );
        ensure!(
            (1..=MAX_CPUS).contains(&self.smp),
            "--smp {} is out of range: QEMU's virt machine with GICv3 takes 1 to {MAX_CPUS} CPUs",
            self.smp
        );
        if let Some(c) = self.clusters {
            ensure!(
                c >= 1 && self.smp.is_multiple_of(c),
                "--clusters {c} does not divide --smp {}: every cluster must have the same \
                 number of CPUs",
                self.smp
            );
        }
        ensure!(
            is_mem_size(&self.mem),
            "--mem {:?} is not a size; use a number with an optional K, M, G or T suffix \
             (e.g. 1G, 512M)",
            self.mem
        );
        if self.uefi.is_some() {
            ensure!(
                !self.uboot,
                "--uefi and --uboot are two different firmwares: give one of them"
            );
            ensure!(
                self.dtb.is_none() && self.virtualization,
                "--uefi boots el2 at EL2 with the firmware's own description of the machine"
            );
        }
        if let Some(append) = &self.append {
            ensure!(
                !append.chars().any(char::is_control),
                "--append must be a single line without control characters"
            );
            if self.uboot {
                ensure!(
                    !append.contains('\''),
                    "--append cannot contain single quotes with --uboot (it is passed to \
                     U-Boot as setenv bootargs '...')"
                );
                ensure!(
                    append.len() <= 800,
                    "--append is too long for U-Boot's command line (at most 800 characters)"
                );
            }
        }
        Ok(())
    }

    /// Short human-readable description, as used in boot test names:
    /// `max,pauth=off smp=8 clusters=2 uboot`.
    pub fn describe(&self) -> String {
        let mut s = format!("{} smp={}", self.cpu, self.smp);
        if let Some(c) = self.clusters {
            let _ = write!(s, " clusters={c}");
        }
        if self.mem != Machine::default().mem {
            let _ = write!(s, " mem={}", self.mem);
        }
        if self.uboot {
            s += " uboot";
        }
        if let Some(uefi) = &self.uefi {
            s += if uefi.device_tree {
                " uefi-dt"
            } else {
                " uefi"
            };
        }
        if self.icount {
            s += " icount";
        }
        s
    }

    /// The `-smp` argument. With clusters, QEMU 7.2 wants the whole topology
    /// spelled out; it then describes it in the DT's /cpus/cpu-map
    /// (socket0/clusterN/coreM). MPIDRs stay 0..N-1 in Aff0 regardless.
    fn smp_arg(&self) -> String {
        match self.clusters {
            Some(c) => format!(
                "{},sockets=1,clusters={c},cores={},threads=1",
                self.smp,
                self.smp / c
            ),
            None => self.smp.to_string(),
        }
    }

    /// The QEMU command line booting `image`.
    pub fn command(&self, image: &Path, console: &Console, gdb: bool) -> Result<Command> {
        self.validate()?;
        let mut args: Vec<OsString> = Vec::new();
        args.push("-M".into());
        let mut machine = OsString::from(if self.virtualization {
            "virt,virtualization=on,gic-version=3"
        } else {
            "virt,gic-version=3"
        });
        if self.uefi.as_ref().is_some_and(|u| u.device_tree) {
            machine.push(",acpi=off");
        }
        if let Some(path) = &self.dump_dtb {
            machine.push(",dumpdtb=");
            machine.push(path);
        }
        args.push(machine);
        let mut push = |a: &str| args.push(a.into());
        push("-cpu");
        push(&self.cpu);
        push("-smp");
        push(&self.smp_arg());
        push("-m");
        push(&self.mem);
        // No display, no default NIC (U-Boot would try to netboot from it);
        // a reset (e.g. from a crashed boot) ends QEMU instead of rebooting.
        push("-nographic");
        push("-nic");
        push("none");
        push("-no-reboot");
        match console {
            Console::Stdio => {
                push("-serial");
                push("mon:stdio");
            }
            Console::File(_) => {
                push("-monitor");
                push("none");
            }
        }
        if self.icount {
            push("-accel");
            push("tcg,thread=single");
            push("-icount");
            push("shift=0,sleep=off");
        }
        if gdb {
            push("-s");
            push("-S");
        }
        if let Console::File(path) = console {
            args.push("-serial".into());
            let mut a = OsString::from("file:");
            a.push(path);
            args.push(a);
        }
        if let Some(uefi) = &self.uefi {
            let (Some(esp), Some(vars)) = (&uefi.esp, &uefi.vars) else {
                bail!("internal error: the EFI system partition was not prepared");
            };
            args.extend(uefi_args(esp, vars));
        } else if self.uboot {
            args.push("-bios".into());
            args.push(UBOOT_BIN.into());
            args.push("-device".into());
            let mut a = OsString::from("loader,file=");
            a.push(image);
            a.push(format!(",addr={UBOOT_LOAD_ADDR:#x},force-raw=on"));
            args.push(a);
        } else {
            args.push("-kernel".into());
            args.push(image.into());
            if let Some(append) = &self.append {
                args.push("-append".into());
                args.push(append.into());
            }
        }
        if let Some(dtb) = &self.dtb {
            args.push("-dtb".into());
            args.push(dtb.into());
        }
        args.extend(self.extra_args.iter().map(OsString::from));
        let mut cmd = Command::new(QEMU);
        cmd.args(args);
        Ok(cmd)
    }

    /// How the console must be driven for this machine to boot el2: U-Boot
    /// needs its autoboot interrupted and `booti` typed.
    pub fn console_script(&self) -> Option<Script> {
        if !self.uboot {
            return None;
        }
        // The prompt is always printed at the start of a line; requiring the
        // newline keeps the echo of our own commands from matching.
        const PROMPT: &str = "\n=> ";
        let mut steps = vec![Step {
            // An autoboot key press is consumed by U-Boot; at a prompt the
            // carriage return merely prints a new prompt.
            wait_for: vec!["Hit any key to stop autoboot", PROMPT],
            send: "\r".into(),
        }];
        if let Some(append) = &self.append {
            steps.push(Step {
                wait_for: vec![PROMPT],
                send: format!("setenv bootargs '{append}'\r"),
            });
        }
        steps.push(Step {
            wait_for: vec![PROMPT],
            send: format!("booti {UBOOT_LOAD_ADDR:#x} - ${{fdtcontroladdr}}\r"),
        });
        Some(Script {
            steps,
            fail_after: vec![(
                PROMPT,
                "U-Boot returned to its prompt after booti: it refused the image (see the \
                 console above)",
            )],
        })
    }
}

/// The firmware's flash banks (code read-only, a private copy of the
/// variable store) and the partition: a read-only FAT disk QEMU makes
/// from `esp` (vvfat), on virtio-mmio, which the firmware boots from when
/// its variables name no boot option (`\EFI\BOOT\BOOTAA64.EFI`, UEFI
/// 2.10 section 3.5.1.1).
fn uefi_args(esp: &Path, vars: &Path) -> Vec<OsString> {
    let mut code = OsString::from("if=pflash,format=raw,readonly=on,file=");
    code.push(AAVMF_CODE);
    let mut vars_drive = OsString::from("if=pflash,format=raw,file=");
    vars_drive.push(vars);
    let mut disk = OsString::from("file=fat:");
    disk.push(esp);
    disk.push(",format=raw,if=none,id=esp,readonly=on");
    vec![
        "-drive".into(),
        code,
        "-drive".into(),
        vars_drive,
        "-drive".into(),
        disk,
        "-device".into(),
        "virtio-blk-device,drive=esp".into(),
    ]
}

fn is_mem_size(s: &str) -> bool {
    let digits = s.trim_end_matches(['k', 'K', 'm', 'M', 'g', 'G', 't', 'T']);
    s.len() - digits.len() <= 1
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && digits.parse::<u64>().is_ok_and(|n| n > 0)
}

/// Input typed on the console when some output appears.
#[derive(Clone, Debug)]
pub struct Step {
    /// Send once any of these has appeared (after the previous step's match).
    pub wait_for: Vec<&'static str>,
    pub send: String,
}

/// A console conversation: steps in order, then patterns that mean failure.
#[derive(Clone, Debug)]
pub struct Script {
    pub steps: Vec<Step>,
    /// (pattern, explanation): after the last step, this output is an error.
    pub fail_after: Vec<(&'static str, &'static str)>,
}

/// Live copy of the console.
#[derive(Debug, Default)]
pub enum Echo {
    #[default]
    None,
    /// Console to our stdout, QEMU's stderr to our stderr.
    Terminal,
    /// Both to this file (e.g. while gdb owns the terminal).
    File(std::fs::File),
}

impl Echo {
    fn console(&mut self, bytes: &[u8]) {
        match self {
            Echo::None => {}
            Echo::Terminal => {
                let mut out = io::stdout().lock();
                let _ = out.write_all(bytes).and_then(|()| out.flush());
            }
            Echo::File(f) => {
                let _ = f.write_all(bytes);
            }
        }
    }

    /// A handle for the stderr thread.
    fn for_stderr(&self) -> Echo {
        match self {
            Echo::None => Echo::None,
            Echo::Terminal => Echo::Terminal,
            Echo::File(f) => f.try_clone().map_or(Echo::None, Echo::File),
        }
    }

    fn stderr(&mut self, bytes: &[u8]) {
        match self {
            Echo::Terminal => {
                let mut err = io::stderr().lock();
                let _ = err.write_all(bytes).and_then(|()| err.flush());
            }
            other => other.console(bytes),
        }
    }
}

/// How a QEMU run is supervised.
#[derive(Default)]
pub struct RunSpec {
    /// Kill QEMU after this long.
    pub timeout: Option<Duration>,
    /// Where to copy the console (and QEMU's stderr) live.
    pub echo: Echo,
    /// Give QEMU our stdin (interactive runs). Ignored when a script drives
    /// the console.
    pub inherit_stdin: bool,
    pub script: Option<Script>,
    /// After the crash marker, give QEMU this long to stop by itself.
    pub fatal_grace: Option<Duration>,
    /// Set from another thread to stop QEMU.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Put QEMU in its own process group, out of reach of the terminal's
    /// Ctrl-C (used while gdb owns the terminal).
    pub own_process_group: bool,
    /// Stop QEMU once the console shows this (a machine that would not
    /// stop by itself, such as firmware back at its boot menu).
    pub stop_on: Option<&'static str>,
}

/// Why a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// QEMU exited by itself.
    Exited(ExitStatus),
    /// Killed at the timeout.
    TimedOut(Duration),
    /// Killed: still running `grace` after printing the crash marker.
    HungAfterFatal(Duration),
    /// Killed: the console script failed (message says why).
    ConsoleError(String),
    /// Killed on request.
    Cancelled,
    /// Killed once the console showed [`RunSpec::stop_on`].
    Stopped(&'static str),
}

/// What a run produced.
#[derive(Debug)]
pub struct Outcome {
    pub console: String,
    pub stderr: String,
    pub ending: Ending,
    pub duration: Duration,
    /// The console showed [`FATAL_MARKER`].
    pub fatal: bool,
    /// The console showed [`GUEST_FATAL_MARKER`].
    pub guest_fatal: bool,
}

impl Outcome {
    /// The console's lines without their CR/LF endings.
    pub fn lines(&self) -> impl Iterator<Item = &str> {
        self.console.lines().map(|l| l.trim_end_matches('\r'))
    }

    /// Why this run counts as a failed boot of a machine that is expected
    /// to stop cleanly, or None: QEMU exited 0 without a crash marker.
    pub fn failure(&self) -> Option<String> {
        if self.fatal && !matches!(self.ending, Ending::HungAfterFatal(_)) {
            return Some(format!("the console shows {FATAL_MARKER}"));
        }
        if self.guest_fatal {
            return Some(format!(
                "the console shows {GUEST_FATAL_MARKER} (a guest crashed or failed a check)"
            ));
        }
        match &self.ending {
            Ending::Exited(s) if s.success() => None,
            other => Some(other.to_string()),
        }
    }

    /// The last `n` console lines, plus QEMU's stderr if it said anything,
    /// each prefixed with `prefix`.
    pub fn tail(&self, n: usize, prefix: &str) -> String {
        let lines: Vec<&str> = self.lines().collect();
        let mut out = String::new();
        if lines.len() > n {
            let _ = writeln!(out, "{prefix}[... {} earlier lines ...]", lines.len() - n);
        }
        for l in &lines[lines.len().saturating_sub(n)..] {
            let _ = writeln!(out, "{prefix}{l}");
        }
        if lines.is_empty() {
            let _ = writeln!(out, "{prefix}(no console output)");
        }
        let err: Vec<&str> = self.stderr.lines().collect();
        if !err.is_empty() {
            let _ = writeln!(out, "{prefix}--- QEMU stderr ---");
            for l in &err[err.len().saturating_sub(10)..] {
                let _ = writeln!(out, "{prefix}{l}");
            }
        }
        out
    }
}

impl fmt::Display for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ending::Exited(s) => match s.code() {
                Some(0) => write!(f, "QEMU exited normally"),
                Some(c) => write!(f, "QEMU exited with status {c}"),
                None => write!(f, "QEMU was killed by a signal ({s})"),
            },
            Ending::TimedOut(t) => {
                write!(
                    f,
                    "timed out after {} s; QEMU killed",
                    t.as_secs_f64().round()
                )
            }
            Ending::HungAfterFatal(g) => write!(
                f,
                "{FATAL_MARKER} printed but the machine did not stop within {} s; QEMU killed",
                g.as_secs()
            ),
            Ending::ConsoleError(m) => write!(f, "{m}; QEMU killed"),
            Ending::Cancelled => write!(f, "QEMU stopped by xtask"),
            Ending::Stopped(what) => write!(f, "QEMU stopped once the console showed {what:?}"),
        }
    }
}

/// Kills the child (SIGTERM, then SIGKILL) unless it has been reaped.
struct Supervised {
    child: Child,
    reaped: Option<ExitStatus>,
}

impl Supervised {
    fn stop(&mut self) {
        if self.reaped.is_some() {
            return;
        }
        // SIGTERM lets QEMU restore the terminal if it put it in raw mode.
        let _ = crate::sys::terminate(self.child.id());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.reaped = Some(s);
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.reaped = self.child.wait().ok();
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Captured console bytes, bounded so a runaway guest cannot exhaust memory.
/// Whether `buf` holds a whole line containing `pattern` (its newline
/// arrived): stopping on the pattern alone cut lines that later checks
/// read in half.
fn completes_a_line_with(buf: &[u8], pattern: &str) -> bool {
    find(buf, pattern.as_bytes()).is_some_and(|at| buf[at..].contains(&b'\n'))
}

struct Capture {
    buf: Vec<u8>,
    dropped: usize,
    /// Recent bytes for spotting the markers across chunk boundaries even
    /// after the capture limit.
    window: Vec<u8>,
    fatal: bool,
    guest_fatal: bool,
}

const CAPTURE_LIMIT: usize = 16 << 20;

impl Capture {
    fn new() -> Self {
        Self {
            buf: Vec::new(),
            dropped: 0,
            window: Vec::new(),
            fatal: false,
            guest_fatal: false,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        let room = CAPTURE_LIMIT.saturating_sub(self.buf.len());
        self.buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        self.dropped += chunk.len().saturating_sub(room);
        if !(self.fatal && self.guest_fatal) {
            self.window.extend_from_slice(chunk);
            self.fatal |= find(&self.window, FATAL_MARKER.as_bytes()).is_some();
            self.guest_fatal |= find(&self.window, GUEST_FATAL_MARKER.as_bytes()).is_some();
            let keep = FATAL_MARKER.len().max(GUEST_FATAL_MARKER.len());
            if self.window.len() > keep {
                self.window.drain(..self.window.len() - keep);
            }
        }
    }

    fn into_string(self) -> String {
        let mut s = String::from_utf8_lossy(&self.buf).into_owned();
        if self.dropped > 0 {
            let _ = writeln!(
                s,
                "\n[xtask: console capture limit reached; {} later bytes not captured]",
                self.dropped
            );
        }
        s
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Drives a [`Script`] over the captured output.
struct Driver {
    script: Script,
    next: usize,
    /// Output before this index has been consumed by earlier matches.
    pos: usize,
    stdin: Option<ChildStdin>,
}

impl Driver {
    /// Advances as far as the output allows; Err(message) on a failure
    /// pattern.
    fn advance(&mut self, out: &[u8]) -> Result<(), String> {
        loop {
            let rest = &out[self.pos.min(out.len())..];
            if let Some(step) = self.script.steps.get(self.next) {
                let hit = step
                    .wait_for
                    .iter()
                    .filter_map(|p| find(rest, p.as_bytes()).map(|i| i + p.len()))
                    .min();
                let Some(end) = hit else { return Ok(()) };
                self.pos += end;
                if let Some(stdin) = &mut self.stdin {
                    // QEMU takes console input only as fast as the UART's
                    // FIFO drains, so a write may block briefly; an error
                    // means QEMU is gone, which the run loop notices.
                    let _ = stdin
                        .write_all(step.send.as_bytes())
                        .and_then(|()| stdin.flush());
                }
                self.next += 1;
            } else {
                for (pattern, message) in &self.script.fail_after {
                    if find(rest, pattern.as_bytes()).is_some() {
                        return Err((*message).to_string());
                    }
                }
                return Ok(());
            }
        }
    }
}

/// Spawns `cmd` (a QEMU command line) and supervises it per `spec` until it
/// exits or is killed. Errors only if QEMU cannot be started at all.
pub fn run(mut cmd: Command, spec: RunSpec) -> Result<Outcome> {
    let scripted = spec.script.is_some();
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if scripted {
        Stdio::piped()
    } else if spec.inherit_stdin {
        Stdio::inherit()
    } else {
        Stdio::null()
    });
    if spec.own_process_group {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {QEMU}"))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let stdin = child.stdin.take();
    let mut qemu = Supervised {
        child,
        reaped: None,
    };

    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let reader = thread::spawn(move || {
        let mut stdout = stdout;
        let mut buf = [0u8; 4096];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    });
    let mut echo = spec.echo;
    let mut err_echo = echo.for_stderr();
    let err_reader: JoinHandle<Vec<u8>> = thread::spawn(move || {
        let mut stderr = stderr;
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match stderr.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    err_echo.stderr(&buf[..n]);
                    if all.len() < CAPTURE_LIMIT {
                        all.extend_from_slice(&buf[..n]);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        all
    });

    let mut capture = Capture::new();
    let mut driver = spec.script.map(|script| Driver {
        script,
        next: 0,
        pos: 0,
        stdin,
    });
    let deadline = spec.timeout.map(|t| start + t);
    let mut fatal_deadline: Option<Instant> = None;
    let tick = Duration::from_millis(100);
    let mut stdout_open = true;

    let ending = loop {
        let now = Instant::now();
        if spec
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            qemu.stop();
            break Ending::Cancelled;
        }
        if let (Some(d), Some(t)) = (deadline, spec.timeout)
            && now >= d
        {
            qemu.stop();
            break Ending::TimedOut(t);
        }
        if let (Some(d), Some(g)) = (fatal_deadline, spec.fatal_grace)
            && now >= d
        {
            qemu.stop();
            break Ending::HungAfterFatal(g);
        }
        if !stdout_open {
            // QEMU closed its stdout: it is exiting. Reap it.
            match qemu.child.try_wait() {
                Ok(Some(status)) => {
                    qemu.reaped = Some(status);
                    break Ending::Exited(status);
                }
                Ok(None) => thread::sleep(Duration::from_millis(20)),
                Err(e) => {
                    qemu.stop();
                    break Ending::ConsoleError(format!("cannot wait for QEMU: {e}"));
                }
            }
            continue;
        }
        let wait = [deadline, fatal_deadline]
            .into_iter()
            .flatten()
            .map(|d| d.saturating_duration_since(now))
            .fold(tick, Duration::min);
        match rx.recv_timeout(wait) {
            Ok(chunk) => {
                echo.console(&chunk);
                capture.push(&chunk);
                if capture.fatal && fatal_deadline.is_none() {
                    fatal_deadline = spec.fatal_grace.map(|g| Instant::now() + g);
                }
                if let Some(d) = &mut driver
                    && let Err(message) = d.advance(&capture.buf)
                {
                    qemu.stop();
                    break Ending::ConsoleError(message);
                }
                if let Some(pattern) = spec.stop_on
                    && completes_a_line_with(&capture.buf, pattern)
                {
                    qemu.stop();
                    break Ending::Stopped(pattern);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => stdout_open = false,
        }
    };
    drop(driver); // closes QEMU's stdin
    drop(qemu);
    // Collect what was still in flight when QEMU stopped.
    let _ = reader.join();
    while let Ok(chunk) = rx.try_recv() {
        echo.console(&chunk);
        capture.push(&chunk);
    }
    let stderr = err_reader.join().unwrap_or_default();
    let (fatal, guest_fatal) = (capture.fatal, capture.guest_fatal);
    Ok(Outcome {
        console: capture.into_string(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        ending,
        duration: start.elapsed(),
        fatal,
        guest_fatal,
    })
}

/// Checks that QEMU can be started at all, with a clear message otherwise.
pub fn check_version() -> Result<String> {
    let out = Command::new(QEMU)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {QEMU}"))?;
    if !out.status.success() {
        bail!("`{QEMU} --version` failed ({})", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string())
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_stop_pattern_counts_once_its_line_is_complete() {
        let pattern = "BdsDxe: failed to start Boot";
        assert!(!completes_a_line_with(
            b"x\nBdsDxe: failed to start Boot",
            pattern
        ));
        assert!(!completes_a_line_with(
            b"BdsDxe: failed to start Boot0001 \"UEFI",
            pattern
        ));
        assert!(completes_a_line_with(
            b"BdsDxe: failed to start Boot0001 (...): Not Found\r\n",
            pattern
        ));
        assert!(!completes_a_line_with(b"something else\n", pattern));
    }
    use super::*;

    #[test]
    fn cluster_topology_is_spelled_out() {
        let m = Machine {
            smp: 8,
            clusters: Some(2),
            ..Machine::default()
        };
        assert_eq!(m.smp_arg(), "8,sockets=1,clusters=2,cores=4,threads=1");
        assert_eq!(m.describe(), "max,pauth=off smp=8 clusters=2");
        let bad = Machine {
            smp: 6,
            clusters: Some(4),
            ..Machine::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn mem_sizes() {
        for ok in ["1G", "512M", "2048", "4g"] {
            assert!(is_mem_size(ok), "{ok}");
        }
        for bad in ["", "G", "1GG", "-1G", "1.5G", "0"] {
            assert!(!is_mem_size(bad), "{bad}");
        }
    }

    #[test]
    fn uboot_script_types_bootargs_and_booti() {
        let m = Machine {
            uboot: true,
            append: Some("loglevel=debug".into()),
            ..Machine::default()
        };
        let s = m.console_script().unwrap();
        let sent: Vec<&str> = s.steps.iter().map(|s| s.send.as_str()).collect();
        assert_eq!(
            sent,
            [
                "\r",
                "setenv bootargs 'loglevel=debug'\r",
                "booti 0x44000000 - ${fdtcontroladdr}\r"
            ]
        );
        let quoted = Machine {
            append: Some("a='b'".into()),
            ..m
        };
        assert!(quoted.validate().is_err());
    }

    #[test]
    fn driver_matches_in_order_and_reports_failure() {
        let m = Machine {
            uboot: true,
            ..Machine::default()
        };
        let mut d = Driver {
            script: m.console_script().unwrap(),
            next: 0,
            pos: 0,
            stdin: None,
        };
        let mut out = b"U-Boot\r\nHit any key to stop autoboot:  2 ".to_vec();
        d.advance(&out).unwrap();
        assert_eq!(d.next, 1);
        out.extend_from_slice(b"\x08\x08\x08 0 \r\n=> ");
        d.advance(&out).unwrap();
        assert_eq!(d.next, 2);
        out.extend_from_slice(b"booti 0x44000000 - ${fdtcontroladdr}\r\nBad magic\r\n=> ");
        assert!(d.advance(&out).is_err());
    }

    #[test]
    fn marker_found_across_chunks() {
        let mut c = Capture::new();
        c.push(b"boot ok\r\nEL2 FA");
        assert!(!c.fatal);
        c.push(b"TAL: oops\r\n");
        assert!(c.fatal && !c.guest_fatal);
        let mut g = Capture::new();
        g.push(b"smp-demo: hi\r\nGUEST F");
        g.push(b"ATAL: vcpu 0: undefined instruction\r\n");
        assert!(g.guest_fatal && !g.fatal);
    }

    #[test]
    fn uefi_machines_boot_from_flash_and_a_fat_disk() {
        let m = Machine {
            uefi: Some(Uefi {
                device_tree: true,
                esp: Some("/t/esp".into()),
                vars: Some("/t/vars.fd".into()),
                missing_kernel: false,
                shell_args: None,
            }),
            append: Some("loglevel=debug".into()),
            ..Machine::default()
        };
        let args: Vec<String> = m
            .command(Path::new("el2.bin"), &Console::Stdio, false)
            .unwrap()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(args[1], "virt,virtualization=on,gic-version=3,acpi=off");
        let joined = args.join(" ");
        assert!(joined.contains(&format!(
            "-drive if=pflash,format=raw,readonly=on,file={AAVMF_CODE} \
             -drive if=pflash,format=raw,file=/t/vars.fd \
             -drive file=fat:/t/esp,format=raw,if=none,id=esp,readonly=on \
             -device virtio-blk-device,drive=esp"
        )));
        assert!(!joined.contains("-kernel") && !joined.contains("-append"));
        assert_eq!(m.describe(), "max,pauth=off smp=4 uefi-dt");
        // Not prepared yet, or with another firmware: refused.
        let unprepared = Machine {
            uefi: Some(Uefi::default()),
            ..Machine::default()
        };
        assert!(
            unprepared
                .command(Path::new("el2.bin"), &Console::Stdio, false)
                .is_err()
        );
        let both = Machine {
            uboot: true,
            ..unprepared
        };
        assert!(both.validate().is_err());
    }

    #[test]
    fn bare_machines_start_at_el1() {
        let m = Machine {
            virtualization: false,
            ..Machine::default()
        };
        let cmd = m
            .command(Path::new("guest.bin"), &Console::Stdio, false)
            .unwrap();
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(args[..2], ["-M", "virt,gic-version=3"]);
    }
}
