//! The stock Linux guest of `cargo xtask run --linux`: Debian 12's cloud
//! arm64 kernel and a busybox initramfs, fetched with apt and cached under
//! `target/xtask/linux/` (docs/ENVIRONMENT.md of the project's shared
//! notes says where they come from).
//!
//! - the kernel: the newest `linux-image-6.1.0-N-cloud-arm64` that
//!   `apt-cache` lists for arm64 (Debian 12's own 6.1 series), downloaded
//!   with `apt-get download` and unpacked with `dpkg-deb -x`; its
//!   `/boot/vmlinuz-*` is already an uncompressed arm64 Image;
//! - the userland: `busybox-static:arm64` and the project's `pvlinux`
//!   (guest-driver/linux/pvlinux, built for `aarch64-unknown-linux-musl`),
//!   put into a `newc` cpio archive written here (no external `cpio`),
//!   whose `/init` prints what the boot tests check and powers off.
//!
//! Fetching needs root (to add the arm64 architecture to dpkg and run
//! `apt-get update` once) and the network; without them, and without a
//! cache, the error says what is missing.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use crate::Workspace;

/// What `/init` prints first, so that a test knows userspace was reached.
pub const INIT_BANNER: &str = "linux-guest: init started";
/// What `/init` prints last, before `poweroff -f`.
pub const INIT_DONE: &str = "linux-guest: powering off";

/// The kernel command line the guest gets: the PL011 console, early
/// output on it (at `pvlock_abi::virt::UART_BASE`: a test holds the two
/// equal), and the initramfs's `/init`.
pub const BOOTARGS: &str = "console=ttyAMA0 earlycon=pl011,0x09000000 rdinit=/init";

/// RAM per Linux VM: the 27 MiB kernel, its initramfs and room to run.
pub const VM_MEMORY: u64 = 256 << 20;

/// The cached guest: the kernel Image and the initramfs.
pub struct LinuxGuest {
    pub image: PathBuf,
    pub initrd: PathBuf,
    /// Where the kernel came from (the Debian package, or the project's
    /// own build).
    pub kernel_package: String,
    /// The static busybox the initramfs is built around.
    pub busybox: PathBuf,
}

/// The kernel Image's file name in the cache.
pub const IMAGE_FILE: &str = "Image";
/// The initramfs's file name in the cache.
pub const INITRD_FILE: &str = "initramfs.cpio";

/// Where the guest is cached: `target/xtask/linux/`.
pub fn cache_dir(ws: &Workspace) -> Result<PathBuf> {
    Ok(ws.xtask_dir()?.join("linux"))
}

/// The guest, from the cache or fetched.
pub fn obtain(ws: &Workspace) -> Result<LinuxGuest> {
    let dir = cache_dir(ws)?;
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let image = dir.join(IMAGE_FILE);
    let busybox = dir.join("busybox");
    let package_file = dir.join("kernel-package");
    if !image.exists() || !busybox.exists() || !package_file.exists() {
        fetch(&dir, &image, &busybox, &package_file)?;
    }
    let initrd = dir.join(INITRD_FILE);
    let busybox_bytes =
        fs::read(&busybox).with_context(|| format!("cannot read {}", busybox.display()))?;
    let pvlinux = crate::linuxpv::build_pvlinux(ws)?;
    let pvlinux_bytes =
        fs::read(&pvlinux).with_context(|| format!("cannot read {}", pvlinux.display()))?;
    fs::write(&initrd, initramfs(&busybox_bytes, &pvlinux_bytes))
        .with_context(|| format!("cannot write {}", initrd.display()))?;
    Ok(LinuxGuest {
        image,
        initrd,
        kernel_package: fs::read_to_string(&package_file)?.trim().to_string(),
        busybox,
    })
}

/// Downloads and unpacks the two packages into `dir`.
fn fetch(dir: &Path, image: &Path, busybox: &Path, package_file: &Path) -> Result<()> {
    let root = nix_is_root();
    if !root {
        bail!(
            "the Linux guest is not cached in {} and fetching it needs root: run `sudo dpkg \
             --add-architecture arm64 && sudo apt-get update`, then `apt-get download \
             linux-image-6.1.0-<N>-cloud-arm64 busybox-static:arm64` and unpack them (see \
             xtask/src/linux.rs), or run this command as root",
            dir.display()
        );
    }
    let foreign = output(Command::new("dpkg").arg("--print-foreign-architectures"))?;
    if !foreign.split_whitespace().any(|a| a == "arm64") {
        run(Command::new("dpkg").args(["--add-architecture", "arm64"]))?;
        run(Command::new("apt-get").args(["update", "-qq"]))?;
    }
    let mut package = newest_kernel()?;
    if package.is_none() {
        run(Command::new("apt-get").args(["update", "-qq"]))?;
        package = newest_kernel()?;
    }
    let Some(package) = package else {
        bail!(
            "apt-cache lists no linux-image-6.1.0-<N>-cloud-arm64 package even after apt-get \
             update: is the network reachable?"
        );
    };
    println!("xtask: fetching {package} and busybox-static:arm64 (about 22 MB)");
    let debs = dir.join("debs");
    let _ = fs::remove_dir_all(&debs);
    fs::create_dir_all(&debs)?;
    run(Command::new("apt-get").current_dir(&debs).args([
        "download",
        &format!("{package}:arm64"),
        "busybox-static:arm64",
    ]))
    .context("apt-get download failed: is the network reachable?")?;
    let unpacked = dir.join("unpacked");
    let _ = fs::remove_dir_all(&unpacked);
    for entry in fs::read_dir(&debs)? {
        let deb = entry?.path();
        run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
    }
    let boot = unpacked.join("boot");
    let vmlinuz = fs::read_dir(&boot)
        .with_context(|| format!("{} has no boot/ directory", package))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .with_context(|| format!("{package} has no /boot/vmlinuz-*"))?;
    let kernel = fs::read(&vmlinuz)?;
    ensure!(
        kernel.get(56..60) == Some(b"ARM\x64".as_slice()),
        "{} is not an uncompressed arm64 Image (no ARM\\x64 magic at offset 56)",
        vmlinuz.display()
    );
    fs::write(image, kernel)?;
    fs::copy(unpacked.join("bin/busybox"), busybox)
        .context("busybox-static has no /bin/busybox")?;
    fs::write(package_file, &package)?;
    let _ = fs::remove_dir_all(&unpacked);
    let _ = fs::remove_dir_all(&debs);
    Ok(())
}

/// The cached Debian kernel's symbols, for `cargo xtask run --linux
/// --sample`. The `linux-image` package's own `/boot/System.map-*` is a
/// one-line stub that points at the `linux-image-<version>-dbg` package,
/// so the first call for a kernel downloads that package (about 260 MB;
/// needs root and the network), keeps its `System.map-<version>` in the
/// cache (named by version, so a newer kernel fetched later is never
/// named with an older kernel's symbols) and drops the rest.
pub fn debug_system_map(ws: &Workspace) -> Result<PathBuf> {
    let dir = cache_dir(ws)?;
    let package_file = dir.join("kernel-package");
    let package = fs::read_to_string(&package_file)
        .with_context(|| format!("cannot read {}", package_file.display()))?
        .trim()
        .to_string();
    let version = package.strip_prefix("linux-image-").with_context(|| {
        format!(
            "{}: {package:?} is not a linux-image package",
            package_file.display()
        )
    })?;
    let map = dir.join(format!("System.map-{version}"));
    if map.is_file() {
        return Ok(map);
    }
    let debug_package = format!("{package}-dbg");
    if !nix_is_root() {
        bail!(
            "naming the Debian kernel's functions needs its symbols from {debug_package} \
             (about 260 MB); fetching it needs root: run this command as root, or run \
             `apt-get download {debug_package}:arm64` and extract \
             ./usr/lib/debug/boot/System.map-{version} to {}",
            map.display()
        );
    }
    println!("xtask: fetching {debug_package} (about 260 MB) for the kernel's symbols");
    let work = dir.join("dbg");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work)?;
    run(Command::new("apt-get")
        .current_dir(&work)
        .args(["download", &format!("{debug_package}:arm64")]))
    .context("apt-get download failed: is the network reachable?")?;
    let deb = fs::read_dir(&work)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .with_context(|| format!("apt-get download left no .deb in {}", work.display()))?;
    let member = format!("./usr/lib/debug/boot/System.map-{version}");
    let mut unpack = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(&deb)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot run dpkg-deb")?;
    let tarfile = unpack.stdout.take().context("dpkg-deb gave no output")?;
    let extracted = Command::new("tar")
        .current_dir(&work)
        .args(["-x", &member])
        .stdin(tarfile)
        .status()
        .context("cannot run tar");
    let unpacked = unpack.wait().context("dpkg-deb failed")?;
    ensure!(
        extracted?.success() && unpacked.success(),
        "{} has no {member}",
        deb.display()
    );
    let text = fs::read_to_string(work.join(&member))?;
    ensure!(
        text.lines().any(|line| line.ends_with(" T _text")),
        "{member} of {} names no _text: not a kernel's System.map",
        deb.display()
    );
    fs::write(&map, text).with_context(|| format!("cannot write {}", map.display()))?;
    let _ = fs::remove_dir_all(&work);
    Ok(map)
}

/// The newest `linux-image-6.1.0-N-cloud-arm64` apt knows, if any.
fn newest_kernel() -> Result<Option<String>> {
    let list = output(Command::new("apt-cache").args([
        "search",
        "--names-only",
        r"^linux-image-6\.1\.0-[0-9]+-cloud-arm64$",
    ]))?;
    Ok(pick_kernel(&list))
}

/// From `apt-cache search` lines, the package with the highest ABI number.
pub fn pick_kernel(list: &str) -> Option<String> {
    list.lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(|name| {
            let abi = name
                .strip_prefix("linux-image-6.1.0-")?
                .strip_suffix("-cloud-arm64")?;
            Some((abi.parse::<u32>().ok()?, name.to_string()))
        })
        .max()
        .map(|(_, name)| name)
}

fn nix_is_root() -> bool {
    output(Command::new("id").arg("-u")).is_ok_and(|uid| uid.trim() == "0")
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} failed ({status})");
    Ok(())
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    ensure!(out.status.success(), "{cmd:?} failed ({})", out.status);
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What `/init` prints when told to reboot (`lgtest=reboot` on the kernel
/// command line, which Linux hands to init as an environment variable)
/// on the VM's first boot; it then runs `reboot -f` (PSCI SYSTEM_RESET).
pub const INIT_REBOOTING: &str = "linux-guest: rebooting";

/// What `/init` prints before it reads a line from its console
/// (`lgtest=input`); it then prints `linux-guest: read '<line>'`.
pub const INIT_PROMPT: &str = "linux-guest: type a line";

/// What `/init` prints after `lgtest=forkexec`, followed by `cpus=N
/// each=M seconds=S`: N CPUs ran M fork+execs of `/bin/true` each, all at
/// once, in S seconds of guest time (`/proc/uptime`, 10 ms resolution).
pub const FORKEXEC_PREFIX: &str = "linux-guest: forkexec";

/// Kernel messages that mean a guest suffered from how it was scheduled
/// (RCU stalls, soft and hard lockups, a clocksource judged unstable) or
/// broke: the Linux boot tests fail if any console line contains one, and
/// `/init` counts them in `dmesg` (`linux-guest: kernel warnings N`).
pub const KERNEL_TROUBLE: [&str; 10] = [
    "self-detected stall",
    "detected stalls",
    "soft lockup",
    "hard LOCKUP",
    "as unstable",
    "timekeeping watchdog",
    "BUG:",
    "Oops",
    "WARNING: CPU",
    "Kernel panic",
];

/// The guest's `/init`: what the boot tests check (the kernel's own lines
/// come from its log), then a clean power-off. Environment variables from
/// the kernel command line steer it: `lgtest=reboot` restarts the VM once
/// (the device tree's `/chosen/pvlock,reset-count` tells the first boot
/// from the second), `lgbusy=S` keeps every CPU busy with a CPU-bound
/// loop for S seconds (default 1) before the stolen time is read,
/// `lgtest=input` reads a line from the console and prints it,
/// `lgtest=forkexec` runs `${lgforks:-200}` fork+execs of `/bin/true` on
/// every CPU at once and prints [`FORKEXEC_PREFIX`] with the time they
/// took (issue 17's fork+exec loop: its throughput at k-times overcommit
/// over that at 1x is the stock kernel's retention). Every boot
/// runs `pvlinux perf` (its `pvlinux: perf ...` line).
pub fn init_script() -> String {
    let mut s = String::from("#!/bin/sh\n");
    write_init_prologue(&mut s);
    let _ = writeln!(
        s,
        "reset=$(od -An -tx1 /proc/device-tree/chosen/{} | tr -d ' \\n')",
        pvlock_abi::dt::RESET_COUNT
    );
    let _ = writeln!(s, "echo \"linux-guest: reset count 0x$reset\"");
    let _ = writeln!(
        s,
        "if [ \"$lgtest\" = reboot ] && [ \"$reset\" = 00000000 ]; then\n  \
         echo \"{INIT_REBOOTING}\"\n  reboot -f\nfi"
    );
    let _ = writeln!(
        s,
        "if [ \"$lgtest\" = input ]; then\n  echo \"{INIT_PROMPT}\"\n  read -r line\n  \
         echo \"linux-guest: read '$line'\"\nfi"
    );
    let _ = writeln!(
        s,
        "if [ \"$lgtest\" = forkexec ]; then\n  n=${{lgforks:-200}}\n  cpus=$(nproc)\n  \
         read t0 rest < /proc/uptime\n  pids=\"\"\n  i=0\n  \
         while [ $i -lt $cpus ]; do\n    \
         ( j=0; while [ $j -lt $n ]; do /bin/true; j=$((j + 1)); done ) &\n    \
         pids=\"$pids $!\"\n    i=$((i + 1))\n  done\n  wait $pids\n  \
         read t1 rest < /proc/uptime\n  \
         echo \"{FORKEXEC_PREFIX} cpus=$cpus each=$n seconds=$(awk \"BEGIN {{ print $t1 - $t0 }}\")\"\n\
         fi"
    );
    let _ = writeln!(s, "busy=${{lgbusy:-1}}");
    let _ = writeln!(s, "cpus=$(nproc)");
    let _ = writeln!(s, "echo \"linux-guest: busy for $busy s on $cpus cpus\"");
    let _ = writeln!(
        s,
        "pids=\"\"\ni=0\nwhile [ $i -lt $cpus ]; do\n  \
         ( while :; do :; done ) &\n  pids=\"$pids $!\"\n  i=$((i + 1))\ndone"
    );
    let _ = writeln!(s, "sleep $busy\nkill $pids");
    // The PMU from user space: a perf_event_open cycle counter advances.
    let _ = writeln!(s, "{} perf --ms {PERF_MS}", crate::linuxpv::PVLINUX_PATH);
    write_init_epilogue(&mut s);
    s
}

/// How long `/init`'s `pvlinux perf` computes between its two reads.
pub const PERF_MS: u64 = 100;

/// The first lines of every guest `/init`: /proc and /sys mounted, the
/// banner, the CPUs online.
pub fn write_init_prologue(s: &mut String) {
    let _ = writeln!(s, "mount -t proc proc /proc");
    let _ = writeln!(s, "mount -t sysfs sys /sys");
    let _ = writeln!(s, "echo \"{INIT_BANNER}\"");
    let _ = writeln!(
        s,
        "echo \"linux-guest: cpus online $(cat /sys/devices/system/cpu/online)\""
    );
}

/// The last lines of every guest `/init`: the stolen time, the kernel's
/// complaints counted in `dmesg`, a clean power-off.
pub fn write_init_epilogue(s: &mut String) {
    // /proc/stat's first line: cpu user nice system idle iowait irq softirq steal ...
    let _ = writeln!(
        s,
        "echo \"linux-guest: steal $(awk '/^cpu / {{ print $9 }}' /proc/stat)\""
    );
    let _ = writeln!(
        s,
        "echo \"linux-guest: kernel warnings $(dmesg | grep -c -e '{}')\"",
        KERNEL_TROUBLE.join("' -e '")
    );
    let _ = writeln!(s, "echo \"{INIT_DONE}\"");
    let _ = writeln!(s, "poweroff -f");
}

/// The busybox applets `/init` runs, linked into `/bin`.
const INIT_APPLETS: [&str; 18] = [
    "sh", "mount", "cat", "echo", "od", "tr", "nproc", "sleep", "kill", "awk", "grep", "dmesg",
    "poweroff", "reboot", "ls", "head", "uptime", "true",
];

/// A `newc` cpio archive (the format Linux unpacks as an initramfs;
/// Documentation/driver-api/early-userspace/buffer-format.rst): the
/// directories, `/dev/console`, busybox with its applet links, pvlinux,
/// `/init`.
pub fn initramfs(busybox: &[u8], pvlinux: &[u8]) -> Vec<u8> {
    let program = (
        crate::linuxpv::PVLINUX_PATH.trim_start_matches('/'),
        pvlinux,
    );
    initramfs_with(busybox, &INIT_APPLETS, &init_script(), &[program])
}

/// An initramfs like [`initramfs`]'s with `applets` linked to busybox,
/// `init` as `/init` and `extra` executables (path in the archive, bytes).
pub fn initramfs_with(
    busybox: &[u8],
    applets: &[&str],
    init: &str,
    extra: &[(&str, &[u8])],
) -> Vec<u8> {
    let mut cpio = Cpio::default();
    for dir in ["bin", "boot", "dev", "proc", "sys", "etc", "tmp"] {
        cpio.entry(dir, 0o040_755, &[], 0);
    }
    // The console the kernel opens for init: character device 5:1.
    cpio.entry("dev/console", 0o020_600, &[], (5 << 8) | 1);
    // The shell gives background jobs /dev/null as stdin: 1:3.
    cpio.entry("dev/null", 0o020_666, &[], (1 << 8) | 3);
    cpio.entry("bin/busybox", 0o100_755, busybox, 0);
    for applet in applets {
        cpio.entry(&format!("bin/{applet}"), 0o120_777, b"busybox", 0);
    }
    for (path, bytes) in extra {
        cpio.entry(path, 0o100_755, bytes, 0);
    }
    cpio.entry("init", 0o100_755, init.as_bytes(), 0);
    cpio.finish()
}

/// A writer of `newc` archives.
#[derive(Default)]
struct Cpio {
    out: Vec<u8>,
    inode: u32,
}

impl Cpio {
    /// One entry; `rdev` is `major << 8 | minor` for device nodes.
    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: u32) {
        self.inode += 1;
        let name_size = name.len() + 1;
        let fields = [
            self.inode,
            mode,
            0,
            0,
            1,
            0,
            data.len() as u32,
            0,
            0,
            rdev >> 8,
            rdev & 0xff,
            name_size as u32,
            0,
        ];
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08X}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    /// Header plus name, and data, are each padded to 4 bytes.
    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], 0);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn early_output_goes_to_the_vms_uart() {
        let earlycon = format!("earlycon=pl011,{:#010x}", pvlock_abi::virt::UART_BASE);
        assert!(
            BOOTARGS.split_whitespace().any(|arg| arg == earlycon),
            "{BOOTARGS:?} lacks {earlycon:?}"
        );
    }

    #[test]
    fn the_newest_6_1_kernel_is_picked() {
        let list = "linux-image-6.1.0-47-cloud-arm64 - Linux 6.1 for arm64 cloud (signed)\n\
                    linux-image-6.1.0-57-cloud-arm64 - Linux 6.1 for arm64 cloud (signed)\n\
                    linux-image-6.1.0-9-cloud-arm64 - Linux 6.1 for arm64 cloud (signed)\n\
                    linux-image-6.12.117+deb12-cloud-arm64 - Linux 6.12 (signed)\n";
        assert_eq!(
            pick_kernel(list).as_deref(),
            Some("linux-image-6.1.0-57-cloud-arm64")
        );
        assert_eq!(pick_kernel(""), None);
        assert_eq!(pick_kernel("linux-image-6.12-cloud-arm64 - meta\n"), None);
    }

    /// Reads a newc archive back: (name, mode, rdev, data) per entry.
    fn entries(cpio: &[u8]) -> Vec<(String, u32, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0;
        let field = |at: usize, i: usize| {
            u32::from_str_radix(
                std::str::from_utf8(&cpio[at + 6 + 8 * i..at + 14 + 8 * i]).unwrap(),
                16,
            )
            .unwrap()
        };
        loop {
            assert_eq!(&cpio[at..at + 6], b"070701", "magic at {at}");
            let (mode, size, rmaj, rmin, name_size) = (
                field(at, 1),
                field(at, 6),
                field(at, 9),
                field(at, 10),
                field(at, 11),
            );
            let name_at = at + 110;
            let name = String::from_utf8(cpio[name_at..name_at + name_size as usize - 1].to_vec())
                .unwrap();
            assert_eq!(cpio[name_at + name_size as usize - 1], 0);
            let data_at = (name_at + name_size as usize).next_multiple_of(4);
            let data = cpio[data_at..data_at + size as usize].to_vec();
            at = (data_at + size as usize).next_multiple_of(4);
            if name == "TRAILER!!!" {
                assert_eq!(at, cpio.len());
                return out;
            }
            out.push((name, mode, rmaj << 8 | rmin, data));
        }
    }

    #[test]
    fn the_initramfs_has_init_busybox_and_a_console() {
        let cpio = initramfs(b"\x7fELF fake busybox", b"\x7fELF fake pvlinux");
        let all = entries(&cpio);
        let find = |n: &str| all.iter().find(|e| e.0 == n).unwrap();
        assert_eq!(find("init").1, 0o100_755);
        let init = String::from_utf8(find("init").3.clone()).unwrap();
        assert!(init.starts_with("#!/bin/sh\n"));
        assert!(init.contains(INIT_BANNER) && init.contains(INIT_DONE));
        assert!(init.trim_end().ends_with("poweroff -f"));
        assert_eq!(find("bin/busybox").3, b"\x7fELF fake busybox");
        assert_eq!(find("bin/pvlinux").3, b"\x7fELF fake pvlinux");
        assert_eq!(find("bin/pvlinux").1, 0o100_755);
        assert!(init.contains("/bin/pvlinux perf --ms 100\n"));
        assert_eq!(find("bin/sh").1, 0o120_777);
        assert_eq!(find("bin/sh").3, b"busybox");
        assert_eq!(
            (find("dev/console").1, find("dev/console").2),
            (0o020_600, 0x501)
        );
        assert_eq!(find("proc").1, 0o040_755);
        // Every inode differs.
        assert!(cpio.len().is_multiple_of(4));
    }
}
