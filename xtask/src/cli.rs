//! Command-line parsing (hand-written: a handful of options, no
//! dependencies).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use crate::image::{Profile, Source};
use crate::qemu::{Machine, Uefi, normalize_cpu};
use crate::vm;

pub const HELP: &str = "\
cargo xtask: build, run and test the el2 hypervisor

USAGE:
    cargo xtask <COMMAND> [OPTIONS]

COMMANDS:
    build     Build el2 and the guests and make their raw images (paths printed)
    run       Build, then boot under QEMU with the console on this terminal
    test      Host checks (fmt, clippy, doc, tests), then the QEMU boot-test matrix
    bench     The lock benchmark matrix under deterministic QEMU (-icount), with a JSON
              file, a table in docs/benchmarks.md and an SVG plot
    soak      The PV lock benchmark and a stock Linux VM side by side for N minutes,
              then checks of every vCPU's progress and the lock's data
    profile   Where the cost run's instructions go: the null hypercall and the directed
              yield + vCPU switch traced under icount, el2's share per source function
    gdb       Build, start QEMU halted with a gdb stub and attach gdb-multiarch
    linux-build
              Build the project's Linux guest kernel: Debian's linux-source-6.12 with the
              PV-lock series of guest-driver/linux/ (--stock: without it); prints the
              Image's path last
    setup     Install everything the other commands need (Rust target, QEMU, U-Boot,
              UEFI firmware, gdb)
    help      Print this help

BUILD OPTIONS (build, run, test, bench, soak, profile, gdb):
    --debug            Build the debug profile instead of release
    --elf PATH         Use this prebuilt el2 ELF instead of building

RUN OPTIONS (run, gdb):
    --cpu MODEL        QEMU CPU model: max (= max,pauth=off), cortex-a57, neoverse-n1, ...
                       [default: max]
    --smp N            Number of CPUs [default: 4]
    --clusters C       Spread the N CPUs over C clusters (C must divide N)
    --mem SIZE         RAM size, e.g. 1G, 512M [default: 1G]
    --uboot            Boot through U-Boot (booti) instead of QEMU's -kernel loader
    --uefi             Boot through UEFI firmware (AAVMF, package qemu-efi-aarch64): el2 is
                       \\EFI\\BOOT\\BOOTAA64.EFI on a FAT disk made from target/xtask/run-uefi/esp
                       and reads its VMs from \\EFI\\pvlock\\vms.dtb there; the firmware hands
                       over ACPI tables (run only)
    --uefi-dt          As --uefi with -machine acpi=off: the firmware hands over its device tree
    --append STR       Kernel command line (/chosen/bootargs), e.g. el2.selftest=undef
    --icount           Deterministic timing: -accel tcg,thread=single -icount shift=0,sleep=off
    --qemu-arg ARG     Pass ARG to QEMU (repeatable)
    --timeout SECS     Kill QEMU and fail after SECS seconds; 0 = never [default: 120]
                       (run only; gdb sessions have no timeout)
    --sample MS        Sample every physical CPU's PC through QEMU's monitor every MS
                       milliseconds and report where the time went: el2, guest kernel, guest
                       user space; guest-kernel functions for --linux-pv/--linux-baseline and
                       --linux (Debian's symbols: its -dbg package, about 260 MB, fetched
                       once as root) and the callers of their spinlock slow paths; el2's
                       functions (run only; installs llvm; samples in
                       target/xtask/samples.txt)

GUEST OPTIONS (run, gdb):
    --guest GUEST      Boot el2 with VMs running GUEST: a built guest (smp-demo, pv-check,
                       lockbench, irq-check, hostile, raw-image) or the path of a kernel: an
                       arm64 Image, or a raw image without the header (placed at RAM base +
                       0x80000 and entered at its first byte, as QEMU's -kernel does). Any
                       guest option below without --guest means --guest smp-demo.
    --vcpus N          vCPUs per VM [default: 4]
    --guest-mem SIZE   RAM per VM, a multiple of 2 MiB, e.g. 64M [default: 64M]
    --initrd FILE      Initrd for each VM
    --bootargs STR     The guest's command line, e.g. 'rounds=3 work=100000'
    --vms N            N identical VMs, each with its own copy of the images [default: 1]
    --affinity LIST    Physical CPUs the VMs' vCPUs may run on, e.g. 0,1 [default: any]
    --pv-lock V        The VMs' PV-lock ABI: seed-v2, seed-v3, openeuler, anolis or none
                       (the node's pv-lock; without it el2's default, seed-v2)
    --pv-time on|off   Offer the VMs stolen time (the node's pv-time; el2's default: on)
    --boost on|off     The VMs' on-spin boosts and slice extension (the node's boost;
                       el2's default: on)
    --kvm-ptp on|off   Offer the VMs KVM's PTP call, Linux's ptp_kvm clock (the node's
                       kvm-ptp; el2's default: off)
    --time-slice-us N  The VMs' vCPU time slice in microseconds, 250 to 100000 (the
                       node's time-slice-us; el2's default: 4000)
    --bare             Boot the guest directly on QEMU at EL1, without el2: --vcpus (or
                       --smp) is its CPU count, --guest-mem its RAM, --bootargs its command
                       line
    --no-vm            Boot el2 alone, with no VM (it reports the machine, ticks on every
                       CPU and powers off)
    --linux            Boot VMs running Debian 12's arm64 cloud kernel with a busybox
                       initramfs (fetched with apt-get into target/xtask/linux/ the first
                       time: needs root and the network; 256 MiB per VM unless --guest-mem).
                       The kernel runs its /init on the virtual GICv3 and timer, with
                       PV stolen time, and powers off (docs/linux-guests.md).
    --linux-pv         Boot VMs running the project's Linux 6.12 guest kernel with the PV-lock
                       series (built by `cargo xtask linux-build` if needed), busybox and
                       pvlinux; /init runs the steps its command line names, e.g.
                       --bootargs 'console=ttyAMA0 lgpv=vcpus,truth,stress' (default: vcpus).
                       Pick the VMs' ABI with --pv-lock; with --bare, on QEMU without el2.
    --linux-baseline   The same with the kernel built without the series (linux-build --stock)

    VMs are described to el2 by /chosen/vm@N nodes in QEMU's device tree (compiled to
    target/xtask/run-dt/edited.dtb); their images are loaded high in RAM, so --mem must
    leave room (xtask says how much is missing).

    `run` exits non-zero if QEMU exits non-zero, on timeout, or if the console shows
    `EL2 FATAL` or `GUEST FATAL`. Quit QEMU with Ctrl-A X. The console is also saved to
    target/xtask/console.log.

    `gdb` starts QEMU with -s -S (stub on :1234, CPUs halted), writes the console to
    target/xtask/gdb-console.log, loads el2's symbols at the address it runs at
    (0x40080000) and stops QEMU when gdb exits.

TEST OPTIONS:
    --host-only        Only the host checks
    --boot-only        Only build the images and run the boot tests
    --filter STR       Only boot tests whose name contains STR (repeatable: any matches)
    --list             List the boot tests and exit
    --timeout SECS     Override every boot test's timeout
    -v, --verbose      Stream each boot test's console

    Consoles of boot tests are saved in target/xtask/boot-logs/.

BENCH OPTIONS:
    --linux            The Linux workload benchmark instead of the lock benchmark: the
                       project's 6.12 kernel with and without the PV-lock series, 2 pCPUs,
                       2/4/8 vCPUs, alone and beside a CPU-hog VM, multi-threaded TCG (5 runs
                       per cell) and icount (3 seeds); bare QEMU as the reference; then
                       Debian's stock 6.1 kernel's fork+exec loop at 2/4/8 vCPUs (9 runs).
                       Writes target/xtask/bench-linux/results.json and
                       docs/benchmarks-linux.md (about 40-60 minutes; --quick: 1x and 2x, no
                       hog, 3 runs: 3-4)
    --quick            A reduced matrix (2 pCPUs; 1x and 2x overcommit; shorter runs): minutes
    --scale F          With --linux: the multi-threaded runs' work per test (pvlinux bench
                       --scale); by default one calibration run sizes it so that each test
                       takes about 0.25 s of guest time at 1x on this host
    --hog              Also run every cell beside a VM of CPU hogs (the seed 000 set-up)
    --json FILE        Also write the summary (speedup_2x, retention_2x,
                       null_hypercall_instructions, vcpu_switch_instructions) to FILE
    --steal on|off     The PV queued lock may steal past a waiter that does not run (lockbench
                       steal=; default: the lock's own, on)
    --cells STR        Only the runs whose name contains STR, e.g. 'icount pcpus=2 vcpus=2
                       mode=pv+boost hog', with --linux 'icount patched 2x' or 'forkexec 8
                       vCPUs' (repeatable; implies --no-docs)
    --no-docs          Do not rewrite docs/benchmarks.md and docs/benchmarks.svg
    Results go to target/xtask/bench/results.json (every cell), the table and plot to
    docs/benchmarks.md and docs/benchmarks*.svg; consoles to target/xtask/bench/logs/.
    Exits non-zero if a run fails or loses data; missed targets are reported, not fatal.

LINUX-BUILD OPTIONS:
    --stock            The same tree and configuration without the series (the baseline)
    Installs linux-source-6.12, gcc-aarch64-linux-gnu, flex, bison, bc, make and xz-utils
    with apt-get as root; caches each kernel in target/xtask/kernel/ by source version,
    series and configuration.

PROFILE OPTIONS:
    --rounds N         Operations of each kind in the traced cost run [default: 200]
    --depth D          Inlined frames shown per row, outermost first [default: 3]
    --min X            Hide rows below X instructions per operation [default: 2]
    Installs llvm (llvm-symbolizer, llvm-nm) with apt-get as root. The report is exact
    (icount) and goes to target/xtask/profile/report.txt; every executed el2 instruction,
    with its count per operation and its source line, to target/xtask/profile/listing.txt.

SOAK OPTIONS:
    --minutes N        How long both guests run (1..=1440) [default: 5]
    --smp N            Physical CPUs; the two VMs have 4 vCPUs each [default: 2]
    -v, --verbose      Stream the console
    Needs the Linux guest (fetched with apt-get as root the first time, like run --linux).
";

/// A parsed command line.
#[derive(Debug)]
pub enum Cmd {
    Help,
    Setup,
    Build(BuildOpts),
    Run(RunOpts),
    Gdb(RunOpts),
    Test(TestOpts),
    Bench(BenchOpts),
    Soak(SoakOpts),
    Profile(ProfileOpts),
    LinuxBuild(LinuxBuildOpts),
}

/// `cargo xtask profile`'s options.
#[derive(Debug)]
pub struct ProfileOpts {
    pub build: BuildOpts,
    /// Operations of each kind the cost run makes.
    pub rounds: u64,
    /// Inlined frames shown, outermost first.
    pub depth: usize,
    /// The fewest instructions per operation a row needs to be shown.
    pub min: f64,
}

/// `cargo xtask linux-build`'s options.
#[derive(Debug, PartialEq, Eq)]
pub struct LinuxBuildOpts {
    /// `--stock`: without the series.
    pub stock: bool,
}

/// `cargo xtask soak`'s options.
#[derive(Debug)]
pub struct SoakOpts {
    pub build: BuildOpts,
    pub minutes: u32,
    pub smp: u32,
    pub verbose: bool,
}

/// `cargo xtask bench`'s options.
#[derive(Debug)]
pub struct BenchOpts {
    pub build: BuildOpts,
    /// `--linux`: the Linux workload benchmark instead of the lock one.
    pub linux: bool,
    pub quick: bool,
    pub hog: bool,
    pub json: Option<PathBuf>,
    pub docs: bool,
    /// `--scale F` (`--linux` only): the multi-threaded runs' work per test,
    /// instead of the scale calibrated on this host.
    pub scale: Option<f64>,
    /// `--steal on|off` (the lock benchmark only): whether the PV queued
    /// lock may steal past a waiter that does not run (lockbench
    /// `steal=`); the lock's own default when absent.
    pub steal: Option<bool>,
    /// `--cells STR` (repeatable): only the runs whose name contains one
    /// of these, for an A/B on a few cells; the docs are then left alone.
    pub cells: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct BuildOpts {
    pub source: Source,
}

#[derive(Debug)]
pub struct RunOpts {
    pub build: BuildOpts,
    pub machine: Machine,
    /// `--smp` was given (the default demo otherwise picks its own).
    pub smp_given: bool,
    pub guest: GuestOpts,
    /// None = no timeout.
    pub timeout: Option<Duration>,
    /// `--sample MS`: sample the physical CPUs' PCs at this interval.
    pub sample: Option<Duration>,
}

/// The guest options of `run` and `gdb`; all `None`/false when not given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuestOpts {
    pub guest: Option<String>,
    pub vcpus: Option<u32>,
    /// Bytes.
    pub mem: Option<u64>,
    pub initrd: Option<PathBuf>,
    pub bootargs: Option<String>,
    pub vms: Option<u32>,
    pub affinity: Option<Vec<u32>>,
    pub pv_lock: Option<vm::PvLock>,
    pub pv_time: Option<bool>,
    /// `--boost on|off`: the node's `boost` (on-spin boosts and the slice
    /// extension).
    pub boost: Option<bool>,
    /// `--kvm-ptp on|off`: the node's `kvm-ptp` (KVM's PTP call).
    pub kvm_ptp: Option<bool>,
    /// `--time-slice-us N`: the node's `time-slice-us`.
    pub time_slice_us: Option<u32>,
    pub bare: bool,
    pub no_vm: bool,
    /// `--linux`: the stock Debian arm64 kernel with a busybox initramfs.
    pub linux: bool,
    /// `--linux-pv` / `--linux-baseline`: the project's 6.12 kernel with or
    /// without the PV-lock series, with busybox and pvlinux.
    pub linux_pv: Option<crate::kernel::Flavor>,
}

impl GuestOpts {
    /// Whether any guest option was given.
    pub fn any(&self) -> bool {
        *self != GuestOpts::default()
    }
}

#[derive(Debug)]
pub struct TestOpts {
    pub build: BuildOpts,
    pub host: bool,
    pub boot: bool,
    pub filters: Vec<String>,
    pub list: bool,
    pub timeout: Option<Duration>,
    pub verbose: bool,
}

/// One `--name` or `--name=value` argument.
struct Opt {
    name: String,
    inline: Option<String>,
}

struct Parser {
    args: std::vec::IntoIter<String>,
    cmd: &'static str,
}

impl Parser {
    fn next(&mut self) -> Result<Option<Opt>> {
        let Some(arg) = self.args.next() else {
            return Ok(None);
        };
        if !arg.starts_with('-') || arg == "-" {
            bail!(
                "unexpected argument {arg:?} for `cargo xtask {}`; options start with -- \
                 (see `cargo xtask help`)",
                self.cmd
            );
        }
        Ok(Some(match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => Opt {
                name: name.into(),
                inline: Some(value.into()),
            },
            _ => Opt {
                name: arg,
                inline: None,
            },
        }))
    }

    fn value(&mut self, opt: &mut Opt) -> Result<String> {
        if let Some(v) = opt.inline.take() {
            return Ok(v);
        }
        self.args
            .next()
            .with_context(|| format!("{} needs a value (see `cargo xtask help`)", opt.name))
    }

    fn number<T: std::str::FromStr>(&mut self, opt: &mut Opt) -> Result<T> {
        let v = self.value(opt)?;
        v.parse()
            .ok()
            .with_context(|| format!("{} {v:?}: expected a non-negative integer", opt.name))
    }

    fn flag(&self, opt: &Opt) -> Result<()> {
        if opt.inline.is_some() {
            bail!("{} takes no value", opt.name);
        }
        Ok(())
    }

    fn unknown(&self, opt: &Opt) -> anyhow::Error {
        anyhow::anyhow!(
            "unknown option {} for `cargo xtask {}` (see `cargo xtask help`)",
            opt.name,
            self.cmd
        )
    }

    /// Handles a build option; false if `opt` is not one.
    fn build_opt(&mut self, opt: &mut Opt, build: &mut BuildOpts) -> Result<bool> {
        match opt.name.as_str() {
            "--debug" => {
                self.flag(opt)?;
                build.source = Source::Build(Profile::Debug);
            }
            "--elf" => build.source = Source::Elf(PathBuf::from(self.value(opt)?)),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn default_build() -> BuildOpts {
    BuildOpts {
        source: Source::Build(Profile::Release),
    }
}

/// Parses the arguments after `cargo xtask`.
pub fn parse(args: Vec<String>) -> Result<Cmd> {
    let mut args = args.into_iter();
    let Some(cmd) = args.next() else {
        return Ok(Cmd::Help);
    };
    let cmd: &'static str = match cmd.as_str() {
        "help" | "-h" | "--help" => return Ok(Cmd::Help),
        "setup" => "setup",
        "build" => "build",
        "run" => "run",
        "gdb" => "gdb",
        "test" => "test",
        "bench" => "bench",
        "soak" => "soak",
        "profile" => "profile",
        "linux-build" => "linux-build",
        other => bail!(
            "unknown command {other:?}; the commands are build, run, test, bench, soak, profile, \
             gdb, linux-build, setup (see `cargo xtask help`)"
        ),
    };
    let mut p = Parser { args, cmd };
    match cmd {
        "setup" => {
            if let Some(opt) = p.next()? {
                return Err(p.unknown(&opt));
            }
            Ok(Cmd::Setup)
        }
        "build" => {
            let mut build = default_build();
            while let Some(mut opt) = p.next()? {
                if is_help(&opt) {
                    return Ok(Cmd::Help);
                }
                if !p.build_opt(&mut opt, &mut build)? {
                    return Err(p.unknown(&opt));
                }
            }
            Ok(Cmd::Build(build))
        }
        "run" | "gdb" => {
            let opts = parse_run(&mut p)?;
            match opts {
                None => Ok(Cmd::Help),
                Some(o) if cmd == "run" => Ok(Cmd::Run(o)),
                Some(o) => Ok(Cmd::Gdb(o)),
            }
        }
        "bench" => parse_bench(&mut p),
        "soak" => parse_soak(&mut p),
        "profile" => parse_profile(&mut p),
        "linux-build" => {
            let mut o = LinuxBuildOpts { stock: false };
            while let Some(opt) = p.next()? {
                match opt.name.as_str() {
                    "--help" | "-h" => return Ok(Cmd::Help),
                    "--stock" => {
                        p.flag(&opt)?;
                        o.stock = true;
                    }
                    _ => return Err(p.unknown(&opt)),
                }
            }
            Ok(Cmd::LinuxBuild(o))
        }
        _ => parse_test(&mut p),
    }
}

fn parse_bench(p: &mut Parser) -> Result<Cmd> {
    let mut o = BenchOpts {
        build: default_build(),
        linux: false,
        quick: false,
        hog: false,
        json: None,
        docs: true,
        scale: None,
        steal: None,
        cells: Vec::new(),
    };
    while let Some(mut opt) = p.next()? {
        if p.build_opt(&mut opt, &mut o.build)? {
            continue;
        }
        match opt.name.as_str() {
            "--help" | "-h" => return Ok(Cmd::Help),
            "--scale" => {
                let value = p.value(&mut opt)?;
                let scale: f64 = value
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0 && *s <= 1000.0)
                    .with_context(|| format!("--scale: {value:?} is not a number in (0, 1000]"))?;
                o.scale = Some(scale);
            }
            "--quick" => {
                p.flag(&opt)?;
                o.quick = true;
            }
            "--linux" => {
                p.flag(&opt)?;
                o.linux = true;
            }
            "--hog" => {
                p.flag(&opt)?;
                o.hog = true;
            }
            "--no-docs" => {
                p.flag(&opt)?;
                o.docs = false;
            }
            "--json" => o.json = Some(PathBuf::from(p.value(&mut opt)?)),
            "--steal" => {
                o.steal = Some(match p.value(&mut opt)?.as_str() {
                    "on" => true,
                    "off" => false,
                    other => bail!("--steal: {other:?} is neither on nor off"),
                });
            }
            "--cells" => o.cells.push(p.value(&mut opt)?),
            _ => return Err(p.unknown(&opt)),
        }
    }
    // A partial matrix must not overwrite the full run's docs.
    o.docs &= o.cells.is_empty();
    ensure!(
        !(o.linux && o.steal.is_some()),
        "--steal sets the lock benchmark's PV lock: it does not apply to --linux"
    );
    ensure!(
        o.linux || o.scale.is_none(),
        "--scale sets the Linux benchmark's work per test: it needs --linux"
    );
    ensure!(
        !(o.linux && o.hog),
        "bench --linux runs beside the hog anyway (every cell but --quick's): drop --hog"
    );
    Ok(Cmd::Bench(o))
}

fn parse_profile(p: &mut Parser) -> Result<Cmd> {
    let mut o = ProfileOpts {
        build: default_build(),
        rounds: 200,
        depth: 3,
        min: 2.0,
    };
    while let Some(mut opt) = p.next()? {
        if p.build_opt(&mut opt, &mut o.build)? {
            continue;
        }
        match opt.name.as_str() {
            "--help" | "-h" => return Ok(Cmd::Help),
            "--rounds" => o.rounds = p.number(&mut opt)?,
            "--depth" => o.depth = p.number(&mut opt)?,
            "--min" => {
                let v = p.value(&mut opt)?;
                o.min = v
                    .parse()
                    .ok()
                    .filter(|m: &f64| m.is_finite() && *m >= 0.0)
                    .with_context(|| format!("--min {v:?}: expected a non-negative number"))?;
            }
            _ => return Err(p.unknown(&opt)),
        }
    }
    ensure!(
        (3..=10_000).contains(&o.rounds),
        "--rounds {}: the window needs at least 3 and the trace grows by about 3 MB per round \
         (at most 10000)",
        o.rounds
    );
    ensure!(o.depth >= 1, "--depth 0 shows nothing");
    Ok(Cmd::Profile(o))
}

fn parse_soak(p: &mut Parser) -> Result<Cmd> {
    let mut o = SoakOpts {
        build: default_build(),
        minutes: 5,
        smp: 2,
        verbose: false,
    };
    while let Some(mut opt) = p.next()? {
        if p.build_opt(&mut opt, &mut o.build)? {
            continue;
        }
        match opt.name.as_str() {
            "--help" | "-h" => return Ok(Cmd::Help),
            "--minutes" => o.minutes = p.number(&mut opt)?,
            "--smp" => o.smp = p.number(&mut opt)?,
            "-v" | "--verbose" => {
                p.flag(&opt)?;
                o.verbose = true;
            }
            _ => return Err(p.unknown(&opt)),
        }
    }
    Ok(Cmd::Soak(o))
}

fn is_help(opt: &Opt) -> bool {
    opt.name == "--help" || opt.name == "-h"
}

fn parse_run(p: &mut Parser) -> Result<Option<RunOpts>> {
    let mut build = default_build();
    let mut m = Machine::default();
    let mut smp_given = false;
    let mut g = GuestOpts::default();
    let mut timeout = Some(Duration::from_secs(120));
    let mut sample = None;
    while let Some(mut opt) = p.next()? {
        if p.build_opt(&mut opt, &mut build)? {
            continue;
        }
        match opt.name.as_str() {
            "--help" | "-h" => return Ok(None),
            "--cpu" => m.cpu = normalize_cpu(&p.value(&mut opt)?),
            "--smp" => {
                m.smp = p.number(&mut opt)?;
                smp_given = true;
            }
            "--clusters" => m.clusters = Some(p.number(&mut opt)?),
            "--mem" => m.mem = p.value(&mut opt)?,
            "--uboot" => {
                p.flag(&opt)?;
                m.uboot = true;
            }
            "--uefi" | "--uefi-dt" => {
                p.flag(&opt)?;
                ensure!(
                    p.cmd == "run",
                    "{} is for `cargo xtask run` (gdb loads el2's symbols at the -kernel address)",
                    opt.name
                );
                m.uefi = Some(Uefi {
                    device_tree: opt.name == "--uefi-dt",
                    ..Uefi::default()
                });
            }
            "--append" => m.append = Some(p.value(&mut opt)?),
            "--icount" => {
                p.flag(&opt)?;
                m.icount = true;
            }
            "--qemu-arg" => m.extra_args.push(p.value(&mut opt)?),
            "--timeout" => {
                let secs: u64 = p.number(&mut opt)?;
                timeout = (secs > 0).then(|| Duration::from_secs(secs));
            }
            "--sample" => {
                ensure!(
                    p.cmd == "run",
                    "--sample is for `cargo xtask run` (gdb stops the CPUs itself)"
                );
                let ms: u64 = p.number(&mut opt)?;
                ensure!(ms > 0, "--sample: the interval must be at least 1 ms");
                sample = Some(Duration::from_millis(ms));
            }
            "--guest" => g.guest = Some(p.value(&mut opt)?),
            "--vcpus" => g.vcpus = Some(p.number(&mut opt)?),
            "--guest-mem" => g.mem = Some(vm::parse_size(&p.value(&mut opt)?)?),
            "--initrd" => g.initrd = Some(PathBuf::from(p.value(&mut opt)?)),
            "--bootargs" => g.bootargs = Some(p.value(&mut opt)?),
            "--vms" => g.vms = Some(p.number(&mut opt)?),
            "--affinity" => g.affinity = Some(vm::parse_cpu_list(&p.value(&mut opt)?)?),
            "--pv-lock" => g.pv_lock = Some(vm::PvLock::parse(&p.value(&mut opt)?)?),
            "--pv-time" => g.pv_time = Some(vm::parse_on_off(&p.value(&mut opt)?)?),
            "--boost" => g.boost = Some(vm::parse_on_off(&p.value(&mut opt)?)?),
            "--kvm-ptp" => g.kvm_ptp = Some(vm::parse_on_off(&p.value(&mut opt)?)?),
            "--time-slice-us" => {
                let us: u32 = p.number(&mut opt)?;
                let range = platform::vm::MIN_TIME_SLICE_US..=platform::vm::MAX_TIME_SLICE_US;
                ensure!(
                    range.contains(&us),
                    "--time-slice-us {us}: el2 takes {} to {} microseconds",
                    range.start(),
                    range.end()
                );
                g.time_slice_us = Some(us);
            }
            "--bare" => {
                p.flag(&opt)?;
                g.bare = true;
            }
            "--no-vm" => {
                p.flag(&opt)?;
                g.no_vm = true;
            }
            "--linux" => {
                p.flag(&opt)?;
                g.linux = true;
            }
            "--linux-pv" | "--linux-baseline" => {
                p.flag(&opt)?;
                g.linux_pv = Some(if opt.name == "--linux-pv" {
                    crate::kernel::Flavor::Patched
                } else {
                    crate::kernel::Flavor::Stock
                });
            }
            _ => return Err(p.unknown(&opt)),
        }
    }
    ensure!(
        !g.no_vm
            || GuestOpts {
                no_vm: false,
                ..g.clone()
            } == GuestOpts::default(),
        "--no-vm boots el2 alone: it takes no guest options"
    );
    if g.bare {
        ensure!(
            g.vms.is_none_or(|n| n == 1)
                && g.affinity.is_none()
                && g.pv_lock.is_none()
                && g.pv_time.is_none()
                && g.boost.is_none()
                && g.kvm_ptp.is_none()
                && g.time_slice_us.is_none(),
            "--bare boots one guest without el2: --vms, --affinity, --pv-lock, --pv-time, \
             --boost, --kvm-ptp and --time-slice-us need el2"
        );
        ensure!(
            !m.uboot && m.uefi.is_none() && m.append.is_none(),
            "--bare boots the guest without el2: --uboot, --uefi and --append (el2's command \
             line) do not apply; give the guest's command line with --bootargs"
        );
        if let Some(n) = g.vcpus {
            ensure!(
                !smp_given || n == m.smp,
                "--bare: --vcpus {n} and --smp {} disagree (both are the guest's CPU count)",
                m.smp
            );
            m.smp = n;
        }
    }
    ensure!(
        !g.linux || (g.guest.is_none() && g.initrd.is_none() && !g.bare && g.linux_pv.is_none()),
        "--linux picks the guest and its initrd itself: it does not go with --guest, --initrd, \
         --bare or --linux-pv"
    );
    ensure!(
        g.linux_pv.is_none() || (g.guest.is_none() && g.initrd.is_none()),
        "--linux-pv and --linux-baseline pick the guest and its initrd themselves: they do not \
         go with --guest or --initrd"
    );
    m.validate()?;
    Ok(Some(RunOpts {
        build,
        machine: m,
        smp_given,
        guest: g,
        timeout,
        sample,
    }))
}

fn parse_test(p: &mut Parser) -> Result<Cmd> {
    let mut o = TestOpts {
        build: default_build(),
        host: true,
        boot: true,
        filters: Vec::new(),
        list: false,
        timeout: None,
        verbose: false,
    };
    let (mut host_only, mut boot_only) = (false, false);
    while let Some(mut opt) = p.next()? {
        if p.build_opt(&mut opt, &mut o.build)? {
            continue;
        }
        match opt.name.as_str() {
            "--help" | "-h" => return Ok(Cmd::Help),
            "--host-only" => {
                p.flag(&opt)?;
                host_only = true;
            }
            "--boot-only" => {
                p.flag(&opt)?;
                boot_only = true;
            }
            "--filter" => o.filters.push(p.value(&mut opt)?),
            "--list" => {
                p.flag(&opt)?;
                o.list = true;
            }
            "--timeout" => {
                let secs: u64 = p.number(&mut opt)?;
                if secs == 0 {
                    bail!("--timeout 0: boot tests always need a timeout");
                }
                o.timeout = Some(Duration::from_secs(secs));
            }
            "-v" | "--verbose" => {
                p.flag(&opt)?;
                o.verbose = true;
            }
            _ => return Err(p.unknown(&opt)),
        }
    }
    if host_only && boot_only {
        bail!("--host-only and --boot-only exclude each other; give neither to run both");
    }
    o.host = !boot_only;
    o.boot = !host_only;
    Ok(Cmd::Test(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<Cmd> {
        parse(s.split_whitespace().map(String::from).collect())
    }

    #[test]
    fn run_options() {
        let Cmd::Run(o) = parse_str(
            "run --cpu max --smp=8 --clusters 2 --mem 2G --append el2.selftest=undef \
             --qemu-arg -d --qemu-arg int --timeout 0 --icount",
        )
        .unwrap() else {
            panic!("not run");
        };
        assert_eq!(o.machine.cpu, "max,pauth=off");
        assert_eq!(o.machine.smp, 8);
        assert_eq!(o.machine.clusters, Some(2));
        assert_eq!(o.machine.mem, "2G");
        assert_eq!(o.machine.append.as_deref(), Some("el2.selftest=undef"));
        assert_eq!(o.machine.extra_args, ["-d", "int"]);
        assert!(o.machine.icount);
        assert_eq!(o.timeout, None);
    }

    #[test]
    fn bench_cells_pick_runs_and_leave_the_docs_alone() {
        let Cmd::Bench(o) = parse_str("bench --hog --cells mode=pv+boost --cells vanilla").unwrap()
        else {
            panic!("not bench");
        };
        assert_eq!(o.cells, ["mode=pv+boost", "vanilla"]);
        assert!(!o.docs, "a partial matrix must not rewrite the docs");
        let Cmd::Bench(o) = parse_str("bench --hog").unwrap() else {
            panic!("not bench");
        };
        assert!(o.cells.is_empty() && o.docs);
        let Cmd::Bench(o) = parse_str("bench --linux --cells icount").unwrap() else {
            panic!("not bench");
        };
        assert!(o.linux && !o.docs);
        assert!(parse_str("bench --cells").is_err());
    }

    #[test]
    fn the_lock_bench_takes_a_steal_setting() {
        let steal = |args: &str| match parse_str(args).unwrap() {
            Cmd::Bench(o) => o.steal,
            _ => panic!("not bench"),
        };
        assert_eq!(steal("bench"), None);
        assert_eq!(steal("bench --hog --steal off"), Some(false));
        assert_eq!(steal("bench --steal on"), Some(true));
        for bad in [
            "bench --steal",
            "bench --steal maybe",
            "bench --linux --steal off",
        ] {
            assert!(parse_str(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_linux_bench_takes_a_scale() {
        let Cmd::Bench(o) = parse_str("bench --linux --quick --scale 2.5").unwrap() else {
            panic!("not bench")
        };
        assert!(o.linux && o.quick);
        assert_eq!(o.scale, Some(2.5));
        let Cmd::Bench(o) = parse_str("bench --linux").unwrap() else {
            panic!("not bench")
        };
        assert_eq!(o.scale, None);
        for bad in [
            "bench --scale 2",
            "bench --linux --scale 0",
            "bench --linux --scale -1",
            "bench --linux --scale NaN",
            "bench --linux --scale lots",
            "bench --linux --scale",
        ] {
            assert!(parse_str(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn soak_takes_minutes_and_pcpus() {
        let Cmd::Profile(o) = parse_str("profile --rounds 50 --depth 5 --min 0.5").unwrap() else {
            panic!("not profile")
        };
        assert_eq!((o.rounds, o.depth, o.min), (50, 5, 0.5));
        assert!(parse_str("profile --rounds 2").is_err());
        assert!(parse_str("profile --min -1").is_err());
        let Cmd::Soak(o) = parse_str("soak").unwrap() else {
            panic!("not soak")
        };
        assert_eq!((o.minutes, o.smp, o.verbose), (5, 2, false));
        let Cmd::Soak(o) = parse_str("soak --minutes 30 --smp 4 -v --debug").unwrap() else {
            panic!("not soak")
        };
        assert_eq!((o.minutes, o.smp, o.verbose), (30, 4, true));
        assert!(parse_str("soak --minutes").is_err());
        assert!(parse_str("soak --minutes ten").is_err());
        assert!(parse_str("soak --vcpus 4").is_err());
    }

    #[test]
    fn user_errors_are_errors() {
        for bad in [
            "frobnicate",
            "run --smp",
            "run --smp many",
            "run --smp 6 --clusters 4",
            "run --uboot=yes",
            "run extra",
            "test --host-only --boot-only",
            "build --cpu max",
            "run --guest-mem lots",
            "run --affinity 0,x",
            "run --bare --vms 2",
            "run --bare --pv-lock none",
            "run --bare --boost off",
            "run --boost maybe",
            "run --bare --kvm-ptp on",
            "run --kvm-ptp yes",
            "run --bare --time-slice-us 1000",
            "run --time-slice-us 249",
            "run --time-slice-us 100001",
            "run --time-slice-us 1ms",
            "run --pv-lock v4",
            "run --pv-time maybe",
            "run --bare --append x",
            "run --bare --smp 2 --vcpus 4",
            "run --bare=yes",
            "run --uefi --uboot",
            "run --uefi --bare",
            "run --uefi=yes",
            "gdb --uefi",
        ] {
            assert!(parse_str(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn guest_options() {
        let Cmd::Run(o) = parse_str(
            "run --guest smp-demo --vcpus 8 --guest-mem 128M --vms 2 --affinity 0,1 \
             --bootargs rounds=3 --initrd /tmp/i.cpio --smp 2 --pv-lock anolis --pv-time off \
             --boost off --kvm-ptp on --time-slice-us 1000",
        )
        .unwrap() else {
            panic!("not run");
        };
        assert!(o.smp_given && o.guest.any());
        assert_eq!(
            o.guest,
            GuestOpts {
                guest: Some("smp-demo".into()),
                vcpus: Some(8),
                mem: Some(128 << 20),
                initrd: Some("/tmp/i.cpio".into()),
                bootargs: Some("rounds=3".into()),
                vms: Some(2),
                affinity: Some(vec![0, 1]),
                pv_lock: Some(vm::PvLock::Variant(pvlock_abi::pvlock::Variant::Anolis)),
                pv_time: Some(false),
                boost: Some(false),
                kvm_ptp: Some(true),
                time_slice_us: Some(1000),
                bare: false,
                no_vm: false,
                linux: false,
                linux_pv: None,
            }
        );
        let Cmd::Run(pv) = parse_str("run --linux-pv --vcpus 4 --pv-lock openeuler").unwrap()
        else {
            panic!("not run");
        };
        assert_eq!(pv.guest.linux_pv, Some(crate::kernel::Flavor::Patched));
        let Cmd::Run(base) = parse_str("run --linux-baseline").unwrap() else {
            panic!("not run");
        };
        assert_eq!(base.guest.linux_pv, Some(crate::kernel::Flavor::Stock));
        assert!(parse_str("run --linux-pv --guest smp-demo").is_err());
        assert!(parse_str("run --linux --linux-pv").is_err());
        let Cmd::LinuxBuild(b) = parse_str("linux-build --stock").unwrap() else {
            panic!("not linux-build");
        };
        assert_eq!(b, LinuxBuildOpts { stock: true });
        assert!(parse_str("linux-build --nosuch").is_err());
        let Cmd::Run(linux) = parse_str("run --linux --vcpus 4 --vms 2").unwrap() else {
            panic!("not run");
        };
        assert!(linux.guest.linux && linux.guest.vcpus == Some(4));
        assert!(parse_str("run --linux --guest smp-demo").is_err());
        assert!(parse_str("run --linux --bare").is_err());
        let Cmd::Run(alone) = parse_str("run --no-vm").unwrap() else {
            panic!("not run");
        };
        assert!(alone.guest.no_vm);
        assert!(parse_str("run --no-vm --vcpus 2").is_err());
        let Cmd::Run(bare) = parse_str("run --bare --vcpus 3").unwrap() else {
            panic!("not run");
        };
        assert_eq!(bare.machine.smp, 3, "--bare: the guest's CPUs are QEMU's");
        let Cmd::Run(plain) = parse_str("run").unwrap() else {
            panic!("not run");
        };
        assert!(!plain.guest.any() && !plain.smp_given);
    }

    #[test]
    fn uefi_options() {
        let Cmd::Run(acpi) = parse_str("run --uefi --guest smp-demo").unwrap() else {
            panic!("not run");
        };
        assert_eq!(acpi.machine.uefi, Some(Uefi::default()));
        let Cmd::Run(dt) = parse_str("run --uefi-dt --append loglevel=debug").unwrap() else {
            panic!("not run");
        };
        assert!(dt.machine.uefi.as_ref().is_some_and(|u| u.device_tree));
        assert_eq!(dt.machine.append.as_deref(), Some("loglevel=debug"));
    }

    #[test]
    fn test_options() {
        let Cmd::Test(o) = parse_str("test --boot-only --filter smp=8 --filter uboot").unwrap()
        else {
            panic!("not test");
        };
        assert!(o.boot && !o.host);
        assert_eq!(o.filters, ["smp=8", "uboot"]);
    }
}
