//! `cargo xtask`: the host-side build, run and test tool of the el2
//! hypervisor. See `cargo xtask help`.

mod bench;
mod bench_forkexec;
mod bench_linux;
mod bench_linux_report;
mod bench_report;
mod boottest;
mod cli;
mod debugtest;
mod dtedit;
mod gdb;
mod guests;
mod hostiletest;
mod hostprobe;
mod image;
mod irqtest;
mod kernel;
mod leveltest;
mod linux;
mod linuxpv;
mod linuxpvtest;
mod linuxtest;
mod measure;
mod pmutest;
mod profile;
mod ptptest;
mod qemu;
mod sample;
mod setup;
mod sharetest;
mod soak;
mod suite;
mod sys;
mod uefi;
mod vm;

use std::env;
use std::ffi::OsString;
use std::fs;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use cli::{Cmd, RunOpts};
use dtedit::DtEdit;
use qemu::{Console, Echo, Machine, RunSpec};
use setup::Tool;
use vm::VmConfig;

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
            setup::ensure_tools(&[Tool::Qemu, Tool::UBoot, Tool::Uefi, Tool::Gdb])?;
            println!("{}", qemu::check_version()?);
            println!("setup complete");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Build(b) => {
            image::build(&ws, &b.source)?;
            guests::build(&ws)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run(o) => run(&ws, &o),
        Cmd::Gdb(o) => gdb::gdb(&ws, &o),
        Cmd::Test(o) => suite::test(&ws, &o),
        Cmd::Bench(o) if o.linux => bench_linux::bench(&ws, &o),
        Cmd::Bench(o) => bench::bench(&ws, &o),
        Cmd::Soak(o) => soak::soak(&ws, &o),
        Cmd::Profile(o) => profile::profile(&ws, &o),
        Cmd::LinuxBuild(o) => {
            let flavor = if o.stock {
                kernel::Flavor::Stock
            } else {
                kernel::Flavor::Patched
            };
            kernel::build(&ws, flavor)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Tools a boot of `machine` needs.
pub fn tools_for(machine: &qemu::Machine) -> Vec<Tool> {
    if machine.uefi.is_some() {
        vec![Tool::Qemu, Tool::Uefi]
    } else if machine.uboot {
        vec![Tool::Qemu, Tool::UBoot]
    } else {
        vec![Tool::Qemu]
    }
}

/// What `run` and `gdb` boot: the machine (with its loader devices and
/// edited device tree, if any) and the kernel QEMU loads with `-kernel`.
pub struct Launch {
    pub machine: Machine,
    /// el2, or the guest itself for `--bare`.
    pub kernel: image::Artifacts,
    /// What the terminal should be told about the set-up.
    pub notes: Vec<String>,
}

/// Builds what `o` boots and sets up its machine: el2 with VMs (the
/// default demo, or what the guest options say); el2 alone (`--no-vm`); or
/// one guest on a bare machine (`--bare`).
pub fn prepare_launch(ws: &Workspace, o: &RunOpts) -> Result<Launch> {
    let mut machine = o.machine.clone();
    let g = &o.guest;
    if g.no_vm {
        setup::ensure_tools(&tools_for(&machine))?;
        let kernel = image::build(ws, &o.build.source)?;
        let notes = if machine.uefi.is_some() {
            let dir = ws.xtask_dir()?.join("run-uefi");
            uefi::prepare(
                &mut machine,
                &kernel.image,
                &guests::Guests::default(),
                &[],
                &dir,
            )?
        } else {
            Vec::new()
        };
        return Ok(Launch {
            machine,
            kernel,
            notes,
        });
    }
    let guests = guests::build(ws)?;
    let linux = if g.linux || g.linux_pv.is_some() {
        let l = match g.linux_pv {
            Some(flavor) => linuxpv::obtain(ws, flavor)?,
            None => linux::obtain(ws)?,
        };
        eprintln!(
            "xtask: Linux guest {} ({}), initramfs {}",
            l.kernel_package,
            l.image.display(),
            l.initrd.display()
        );
        Some(l)
    } else {
        None
    };
    let guest = match &linux {
        Some(l) => l.image.display().to_string(),
        None => g.guest.clone().unwrap_or_else(|| vm::DEFAULT_GUEST.into()),
    };
    if g.bare {
        setup::ensure_tools(&[Tool::Qemu])?;
        let image = guests::resolve(&guests, &guest)?;
        // A built guest has its ELF for gdb; a given image may not.
        let elf = guests
            .0
            .iter()
            .find(|b| b.image == image)
            .map_or_else(|| image.clone(), |b| b.elf.clone());
        machine.virtualization = false;
        if let Some(mem) = g.mem {
            ensure!(
                mem.is_multiple_of(1 << 20),
                "--guest-mem must be a whole number of MiB"
            );
            machine.mem = format!("{}M", mem >> 20);
        }
        machine.append = g
            .bootargs
            .clone()
            .or_else(|| linux.as_ref().map(|_| linux::BOOTARGS.to_string()));
        if let Some(initrd) = g.initrd.as_ref().or(linux.as_ref().map(|l| &l.initrd)) {
            machine.extra_args.push("-initrd".into());
            machine.extra_args.push(initrd.display().to_string());
        }
        machine.validate()?;
        return Ok(Launch {
            machine,
            kernel: image::Artifacts {
                elf,
                image,
                link_base: 0,
            },
            notes: vec![format!(
                "{guest} directly on QEMU at EL1 (no el2), {} CPUs",
                o.machine.smp
            )],
        });
    }
    let mut tools = tools_for(&machine);
    if machine.uefi.is_none() {
        tools.push(Tool::Dtc);
    }
    setup::ensure_tools(&tools)?;
    let kernel = image::build(ws, &o.build.source)?;
    if !g.any() && !o.smp_given {
        // The default demo: more vCPUs than physical CPUs.
        machine.smp = vm::DEMO_SMP;
    }
    let config = VmConfig {
        guest,
        initrd: linux
            .as_ref()
            .map(|l| l.initrd.clone())
            .or_else(|| g.initrd.clone()),
        vcpus: g.vcpus.unwrap_or(vm::DEFAULT_VCPUS),
        memory: g.mem.unwrap_or(if linux.is_some() {
            linux::VM_MEMORY
        } else {
            vm::DEFAULT_VM_MEMORY
        }),
        bootargs: g.bootargs.clone().unwrap_or_else(|| {
            if linux.is_some() {
                linux::BOOTARGS.into()
            } else {
                String::new()
            }
        }),
        affinity: g.affinity.clone().unwrap_or_default(),
        count: g.vms.unwrap_or(1),
        pv_lock: g.pv_lock,
        pv_time: g.pv_time,
        boost: g.boost,
        kvm_ptp: g.kvm_ptp,
        control: None,
        cpu_weight: None,
        time_slice_us: g.time_slice_us,
    };
    if machine.uefi.is_some() {
        // The VMs and their payloads go on the EFI system partition.
        let dir = ws.xtask_dir()?.join("run-uefi");
        let notes = uefi::prepare(&mut machine, &kernel.image, &guests, &[config], &dir)?;
        return Ok(Launch {
            machine,
            kernel,
            notes,
        });
    }
    let plan = vm::plan_for(&machine, &kernel.image, &guests, &[config])?;
    machine.extra_args.extend(plan.qemu_args());
    let dir = ws.xtask_dir()?.join("run-dt");
    let dtb = dtedit::prepare(
        &machine,
        &[&DtEdit::AddVms(plan.clone())],
        &kernel.image,
        &dir,
    )?;
    let mut notes = plan.describe();
    notes.push(format!("device tree with the VMs: {}", dtb.display()));
    machine.dtb = Some(dtb);
    Ok(Launch {
        machine,
        kernel,
        notes,
    })
}

fn run(ws: &Workspace, o: &RunOpts) -> Result<ExitCode> {
    if is_default_demo(o) {
        return bench::demo(ws, &o.build);
    }
    let Launch {
        mut machine,
        kernel,
        notes,
    } = prepare_launch(ws, o)?;
    let socket = ws.xtask_dir()?.join("sample.sock");
    if o.sample.is_some() {
        setup::ensure_tools(&[Tool::Symbolizer])?;
        let _ = fs::remove_file(&socket);
        machine
            .extra_args
            .extend(sample::Sampler::qemu_args(&socket));
    }
    let cmd = machine.command(&kernel.image, &Console::Stdio, false)?;
    for note in notes {
        eprintln!("xtask: {note}");
    }
    eprintln!("xtask: {}", display_command(&cmd));
    let interactive = std::io::stdin().is_terminal() && !machine.uboot;
    if interactive {
        eprintln!("xtask: console follows; quit QEMU with Ctrl-A X");
    }
    let sampler = o
        .sample
        .map(|interval| sample::Sampler::start(socket.clone(), interval));
    let outcome = qemu::run(
        cmd,
        RunSpec {
            timeout: o.timeout,
            echo: Echo::Terminal,
            inherit_stdin: true,
            script: machine.console_script(),
            fatal_grace: Some(FATAL_GRACE),
            ..RunSpec::default()
        },
    );
    if let Some(sampler) = sampler {
        let polls = sampler.finish();
        let _ = fs::remove_file(&socket);
        report_samples(ws, o, &kernel, &polls)?;
    }
    let outcome = outcome?;
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

/// `run --sample`'s report over `polls`, on stderr; the samples go to
/// `target/xtask/samples.txt`.
fn report_samples(
    ws: &Workspace,
    o: &RunOpts,
    kernel: &image::Artifacts,
    polls: &[Vec<sample::CpuSample>],
) -> Result<()> {
    let raw = ws.xtask_dir()?.join("samples.txt");
    fs::write(&raw, sample::raw(polls))
        .with_context(|| format!("cannot write {}", raw.display()))?;
    let map = match o.guest.linux_pv {
        Some(flavor) => Some(
            kernel::system_map(ws, flavor)
                .context("no System.map of that kernel (cargo xtask linux-build makes it)")?,
        ),
        // Debian's kernel: its symbols come from its -dbg package; without
        // them the report still counts, it only cannot name.
        None if o.guest.linux => linux::debug_system_map(ws)
            .map_err(|e| eprintln!("xtask: guest functions stay unnamed: {e:#}"))
            .ok(),
        None => None,
    };
    let guest = match map {
        Some(map) => {
            let text = fs::read_to_string(&map)
                .with_context(|| format!("cannot read {}", map.display()))?;
            Some(sample::Symbols::from_system_map(&text))
        }
        None => None,
    };
    let el2 = if o.guest.bare {
        sample::El2Names::new()
    } else {
        let offset = image::LOAD_ADDR.wrapping_sub(kernel.link_base);
        sample::el2_names(polls, &kernel.elf, offset)?
    };
    eprint!("{}", sample::report(polls, guest.as_ref(), &el2));
    eprintln!("xtask: samples in {}", raw.display());
    Ok(())
}

/// `cargo xtask run` with nothing that picks a guest or a machine: the lock
/// demo ([`bench::demo`]) rather than one boot.
fn is_default_demo(o: &RunOpts) -> bool {
    !o.guest.any() && !o.smp_given && o.machine == qemu::Machine::default()
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
