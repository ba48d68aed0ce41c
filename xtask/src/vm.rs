//! VMs for the hypervisor under QEMU: where the guest images go in host RAM
//! and the `/chosen/vm@N` nodes that describe each VM to el2. The binding
//! is docs/vm-binding.md (parsed by `platform/src/vm.rs`); xtask writes:
//!
//! ```dts
//! vm@0 {
//!     compatible = "pvlock,vm";
//!     label = "vm0";
//!     vcpus = <4>;
//!     memory = <0x0 0x4000000>;                     // u64 bytes, a multiple of 2 MiB
//!     kernel = <0x0 0x7be00000 0x0 0x12820>;        // u64 host physical address, u64 size
//!     initrd = <0x0 0x7bc00000 0x0 0x1000>;         // only with --initrd
//!     bootargs = "rounds=3";
//!     cpu-affinity = <0 1>;                         // only with --affinity
//!     pv-lock = "openeuler";                        // only with --pv-lock
//!     pv-time = "off";                              // only with --pv-time
//! };
//! ```
//!
//! Images ("modules") are loaded by QEMU's loader device
//! (`-device loader,file=F,addr=A,force-raw=on`) high in RAM, from 64 MiB
//! below its top downwards, each 2 MiB aligned; the top 64 MiB stay free
//! because U-Boot (`--uboot`) relocates itself and its device tree there.
//! Every VM gets its own copy of its kernel and initrd, even when several
//! VMs boot the same file: el2 rejects VMs whose modules overlap (it cannot
//! tell a shared module from one the loader wrote over another), and copies
//! are cheap next to a VM's RAM. Modules are not listed in `/memreserve/`:
//! el2 keeps every module out of its allocator itself, and rejects a module
//! that overlaps a reserved region.

use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};

use pvlock_abi::pvlock::Variant;

use crate::guests::{self, Guests};
use crate::image;
use crate::qemu::Machine;

/// The guest used when a run asks for a VM without naming one.
pub const DEFAULT_GUEST: &str = "smp-demo";
/// vCPUs per VM unless `--vcpus` says otherwise.
pub const DEFAULT_VCPUS: u32 = 4;
/// RAM per VM unless `--guest-mem` says otherwise.
pub const DEFAULT_VM_MEMORY: u64 = 64 << 20;
/// The default demo's physical CPUs: fewer than its vCPUs, so that el2 has
/// to time-slice them.
pub const DEMO_SMP: u32 = 2;

/// Where RAM starts on QEMU's `virt` machine.
pub const RAM_BASE: u64 = 0x4000_0000;
/// VM memory and module placement granule.
pub const ALIGN: u64 = 2 << 20;
/// Kept free at the top of RAM (U-Boot relocates itself there).
const TOP_RESERVE: u64 = 64 << 20;
/// What QEMU's `-kernel` loader needs for the device tree it places above
/// the hypervisor (QEMU puts it min(RAM / 2, 128 MiB) into RAM, or right
/// after the kernel if that is higher).
const DTB_ALLOWANCE: u64 = 2 << 20;
/// Where QEMU's loader puts the device tree at most, relative to RAM.
const QEMU_DTB_OFFSET_MAX: u64 = 128 << 20;

/// The PV-lock ABI a VM is given: its node's `pv-lock` property.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PvLock {
    /// One of the variants (`seed-v2`, `seed-v3`, `openeuler`, `anolis`).
    Variant(Variant),
    /// `none`: no PV-lock.
    Off,
}

impl PvLock {
    /// The property's value.
    pub const fn name(self) -> &'static str {
        match self {
            PvLock::Variant(v) => v.name(),
            PvLock::Off => "none",
        }
    }

    /// Parses a property value.
    pub fn parse(s: &str) -> Result<Self> {
        if s == "none" {
            return Ok(PvLock::Off);
        }
        Variant::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .map(PvLock::Variant)
            .with_context(|| {
                let names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
                format!("--pv-lock {s:?}: must be one of {}, none", names.join(", "))
            })
    }

    /// The variant, if any.
    pub const fn variant(self) -> Option<Variant> {
        match self {
            PvLock::Variant(v) => Some(v),
            PvLock::Off => None,
        }
    }
}

/// Parses a `pv-time` value: `on` or `off`.
pub fn parse_on_off(s: &str) -> Result<bool> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => bail!("--pv-time {s:?}: must be on or off"),
    }
}

const fn on_off(on: bool) -> &'static str {
    if on {
        platform::vm::value::ON
    } else {
        platform::vm::value::OFF
    }
}

/// One kind of VM a run or a boot test asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmConfig {
    /// A built guest's name (`smp-demo`) or the path of a raw arm64 Image.
    pub guest: String,
    pub initrd: Option<PathBuf>,
    pub vcpus: u32,
    /// Bytes of RAM, a multiple of 2 MiB.
    pub memory: u64,
    pub bootargs: String,
    /// Physical CPUs the vCPUs may run on; empty = any.
    pub affinity: Vec<u32>,
    /// How many identical VMs (each gets its own copy of the images).
    pub count: u32,
    /// The node's `pv-lock`; not written when `None` (el2's default,
    /// seed-v2).
    pub pv_lock: Option<PvLock>,
    /// The node's `pv-time` (`on`/`off`); not written when `None` (el2's
    /// default, on).
    pub pv_time: Option<bool>,
    /// The node's `boost` (`on`/`off`); not written when `None` (el2's
    /// default, on).
    pub boost: Option<bool>,
    /// The node's `kvm-ptp` (`on`/`off`); not written when `None` (el2's
    /// default, off).
    pub kvm_ptp: Option<bool>,
    /// The node's `control` (`on`/`off`); not written when `None` (el2's
    /// default, off).
    pub control: Option<bool>,
    /// The node's `cpu-weight`; not written when `None` (el2's default,
    /// 100).
    pub cpu_weight: Option<u32>,
    /// The node's `time-slice-us`; not written when `None` (el2's default,
    /// 4000).
    pub time_slice_us: Option<u32>,
}

impl VmConfig {
    /// `count` VMs of smp-demo with `vcpus` vCPUs, default memory.
    pub fn smp_demo(vcpus: u32, bootargs: &str, count: u32) -> Self {
        Self {
            guest: DEFAULT_GUEST.into(),
            initrd: None,
            vcpus,
            memory: DEFAULT_VM_MEMORY,
            bootargs: bootargs.into(),
            affinity: Vec::new(),
            count,
            pv_lock: None,
            pv_time: None,
            boost: None,
            kvm_ptp: None,
            control: None,
            cpu_weight: None,
            time_slice_us: None,
        }
    }

    /// Rejects what el2 would reject less clearly.
    pub fn validate(&self) -> Result<()> {
        ensure!(self.vcpus >= 1, "--vcpus must be at least 1");
        ensure!(self.count >= 1, "--vms must be at least 1");
        ensure!(
            self.memory >= ALIGN && self.memory.is_multiple_of(ALIGN),
            "--guest-mem {} KiB is not a positive multiple of 2 MiB",
            self.memory >> 10
        );
        ensure!(
            !self.bootargs.chars().any(char::is_control),
            "--bootargs must be a single line without control characters"
        );
        Ok(())
    }
}

/// A file QEMU's loader puts in RAM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    pub path: PathBuf,
    pub addr: u64,
    pub size: u64,
}

/// Where a VM node's kernel or initrd is: already in RAM, put there by
/// the loader (`kernel = <addr size>`), or a file on the EFI system
/// partition that el2's EFI stage loads (`kernel-file = "\\EFI\\..."`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// At `addr`, `size` bytes.
    At { addr: u64, size: u64 },
    /// This path on the partition.
    File(String),
}

impl fmt::Display for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Payload::At { addr, size } => write!(f, "{} KiB at {addr:#x}", size.div_ceil(1024)),
            Payload::File(path) => write!(f, "file {path}"),
        }
    }
}

/// One property value of a VM node, as both writers of the binding need
/// it: device tree source for QEMU's `-dtb` ([`Plan::nodes_dts`]) and a
/// blob for the EFI partition (`uefi::vm_description`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Str(&'a str),
    U32(u32),
    U32s(&'a [u32]),
    /// 64-bit numbers, each as two cells (`#address-cells` and
    /// `#size-cells` of `/chosen` are 2).
    U64s(Vec<u64>),
}

/// One `/chosen/vm@N` node (docs/vm-binding.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmNode {
    pub index: usize,
    pub name: String,
    pub vcpus: u32,
    pub memory: u64,
    pub kernel: Payload,
    pub initrd: Option<Payload>,
    pub bootargs: String,
    pub affinity: Vec<u32>,
    pub pv_lock: Option<PvLock>,
    pub pv_time: Option<bool>,
    pub boost: Option<bool>,
    pub kvm_ptp: Option<bool>,
    pub control: Option<bool>,
    pub cpu_weight: Option<u32>,
    pub time_slice_us: Option<u32>,
}

impl VmNode {
    /// The node's properties, in the order they are written: the one place
    /// that spells the binding for xtask.
    pub fn properties(&self) -> Vec<(&'static str, Value<'_>)> {
        fn payload<'p>(
            address: &'static str,
            file: &'static str,
            p: &'p Payload,
        ) -> (&'static str, Value<'p>) {
            match p {
                Payload::At { addr, size } => (address, Value::U64s(vec![*addr, *size])),
                Payload::File(path) => (file, Value::Str(path)),
            }
        }
        use platform::vm::{VM_COMPATIBLE, property};
        let mut props = vec![
            ("compatible", Value::Str(VM_COMPATIBLE)),
            (property::NAME, Value::Str(&self.name)),
            (property::VCPUS, Value::U32(self.vcpus)),
            (property::MEMORY, Value::U64s(vec![self.memory])),
            payload(property::KERNEL, "kernel-file", &self.kernel),
        ];
        if let Some(initrd) = &self.initrd {
            props.push(payload(property::INITRD, "initrd-file", initrd));
        }
        props.push((property::BOOTARGS, Value::Str(&self.bootargs)));
        if !self.affinity.is_empty() {
            props.push((property::CPU_AFFINITY, Value::U32s(&self.affinity)));
        }
        if let Some(lock) = self.pv_lock {
            props.push((property::PV_LOCK, Value::Str(lock.name())));
        }
        for (name, switch) in [
            (property::PV_TIME, self.pv_time),
            (property::BOOST, self.boost),
            (property::KVM_PTP, self.kvm_ptp),
            (property::CONTROL, self.control),
        ] {
            if let Some(on) = switch {
                props.push((name, Value::Str(on_off(on))));
            }
        }
        for (name, value) in [
            (property::CPU_WEIGHT, self.cpu_weight),
            (property::TIME_SLICE_US, self.time_slice_us),
        ] {
            if let Some(value) = value {
                props.push((name, Value::U32(value)));
            }
        }
        props
    }
}

/// Where everything goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub modules: Vec<Module>,
    pub nodes: Vec<VmNode>,
}

/// A VM config with its files resolved and measured.
pub struct Resolved<'a> {
    pub config: &'a VmConfig,
    pub kernel: PathBuf,
    pub kernel_size: u64,
    pub initrd_size: Option<u64>,
}

/// Lays out the modules of `vms` in `ram_size` bytes of RAM above an el2
/// whose image occupies `el2_image_size` bytes, and names the VMs
/// `vm0`, `vm1`, ... in order.
pub fn plan(ram_size: u64, el2_image_size: u64, vms: &[Resolved<'_>]) -> Result<Plan> {
    let el2_end = RAM_BASE + image::TEXT_OFFSET + el2_image_size;
    let dtb_start = (RAM_BASE + (ram_size / 2).min(QEMU_DTB_OFFSET_MAX)).max(el2_end);
    let floor = align_up(dtb_start + DTB_ALLOWANCE, ALIGN);
    let top = (RAM_BASE + ram_size)
        .checked_sub(TOP_RESERVE)
        .filter(|&t| t > floor)
        .with_context(|| {
            format!(
                "--mem {} MiB leaves no room for guest images: el2 and the device tree end at \
                 {floor:#x} and the top {} MiB stay free for U-Boot",
                ram_size >> 20,
                TOP_RESERVE >> 20
            )
        })?;

    let mut modules: Vec<Module> = Vec::new();
    let mut cursor = top;
    let mut place = |path: &Path, size: u64| -> Result<(u64, u64)> {
        let addr = cursor
            .checked_sub(size)
            .map(|a| a & !(ALIGN - 1))
            .filter(|&a| a >= floor)
            .with_context(|| {
                format!(
                    "--mem {} MiB is too small for the guest images: {} ({} KiB) does not fit \
                     between el2's device tree (ends below {floor:#x}) and {cursor:#x}; use a \
                     larger --mem",
                    ram_size >> 20,
                    path.display(),
                    size.div_ceil(1024)
                )
            })?;
        cursor = addr;
        modules.push(Module {
            path: path.to_path_buf(),
            addr,
            size,
        });
        Ok((addr, size))
    };

    let mut nodes = Vec::new();
    for vm in vms {
        vm.config.validate()?;
        for _ in 0..vm.config.count {
            let (addr, size) = place(&vm.kernel, vm.kernel_size)?;
            let kernel = Payload::At { addr, size };
            let initrd = match (&vm.config.initrd, vm.initrd_size) {
                (Some(path), Some(size)) => {
                    let (addr, size) = place(path, size)?;
                    Some(Payload::At { addr, size })
                }
                (None, _) => None,
                (Some(path), None) => bail!("the size of initrd {} is unknown", path.display()),
            };
            let index = nodes.len();
            nodes.push(VmNode {
                index,
                name: format!("vm{index}"),
                vcpus: vm.config.vcpus,
                memory: vm.config.memory,
                kernel,
                initrd,
                bootargs: vm.config.bootargs.clone(),
                affinity: vm.config.affinity.clone(),
                pv_lock: vm.config.pv_lock,
                pv_time: vm.config.pv_time,
                boost: vm.config.boost,
                kvm_ptp: vm.config.kvm_ptp,
                control: vm.config.control,
                cpu_weight: vm.config.cpu_weight,
                time_slice_us: vm.config.time_slice_us,
            });
        }
    }
    let module_bytes: u64 = modules.iter().map(|m| align_up(m.size, ALIGN)).sum();
    let vm_bytes: u64 = nodes.iter().map(|n| n.memory).sum();
    let el2_bytes = el2_end - RAM_BASE;
    let needed = el2_bytes + DTB_ALLOWANCE + module_bytes + vm_bytes;
    ensure!(
        needed <= ram_size,
        "--mem {} MiB is too small: el2 takes {} MiB, its device tree {} MiB, the guest images {} \
         MiB and {} VM(s) {} MiB; use --mem {}M or more",
        ram_size >> 20,
        el2_bytes.div_ceil(1 << 20),
        DTB_ALLOWANCE >> 20,
        module_bytes >> 20,
        nodes.len(),
        vm_bytes >> 20,
        align_up(needed + TOP_RESERVE, 256 << 20) >> 20
    );
    Ok(Plan { modules, nodes })
}

impl Plan {
    /// The QEMU arguments that load the modules.
    pub fn qemu_args(&self) -> Vec<String> {
        self.modules
            .iter()
            .flat_map(|m| {
                [
                    "-device".to_string(),
                    format!(
                        "loader,file={},addr={:#x},force-raw=on",
                        // QEMU's option syntax escapes a comma by doubling it.
                        m.path.display().to_string().replace(',', ",,"),
                        m.addr
                    ),
                ]
            })
            .collect()
    }

    /// The VM nodes as dts source, indented by `indent` tabs (for inside
    /// `/chosen`).
    pub fn nodes_dts(&self, indent: usize) -> String {
        let pad = "\t".repeat(indent);
        let mut s = String::new();
        for n in &self.nodes {
            let _ = writeln!(s, "{pad}vm@{} {{", n.index);
            for (name, value) in n.properties() {
                let value = match value {
                    Value::Str(text) => format!("\"{}\"", dts_string(text)),
                    Value::U32(v) => format!("<{v}>"),
                    Value::U32s(list) => {
                        let list: Vec<String> = list.iter().map(u32::to_string).collect();
                        format!("<{}>", list.join(" "))
                    }
                    Value::U64s(values) => format!("<{}>", cells(&values)),
                };
                let _ = writeln!(s, "{pad}\t{name} = {value};");
            }
            let _ = writeln!(s, "{pad}}};");
        }
        s
    }

    /// One line per VM for the terminal.
    pub fn describe(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| {
                let mut line = format!(
                    "{}: {} vCPUs, {} MiB, kernel {}",
                    n.name,
                    n.vcpus,
                    n.memory >> 20,
                    n.kernel
                );
                if let Some(initrd) = &n.initrd {
                    let _ = write!(line, ", initrd {initrd}");
                }
                if !n.affinity.is_empty() {
                    let _ = write!(line, ", pCPUs {:?}", n.affinity);
                }
                if let Some(lock) = n.pv_lock {
                    let _ = write!(line, ", pv-lock {}", lock.name());
                }
                if let Some(on) = n.pv_time {
                    let _ = write!(line, ", pv-time {}", on_off(on));
                }
                if let Some(on) = n.boost {
                    let _ = write!(line, ", boost {}", on_off(on));
                }
                if let Some(on) = n.kvm_ptp {
                    let _ = write!(line, ", kvm-ptp {}", on_off(on));
                }
                if let Some(on) = n.control {
                    let _ = write!(line, ", control {}", on_off(on));
                }
                if let Some(weight) = n.cpu_weight {
                    let _ = write!(line, ", cpu-weight {weight}");
                }
                if let Some(us) = n.time_slice_us {
                    let _ = write!(line, ", time-slice-us {us}");
                }
                if !n.bootargs.is_empty() {
                    let _ = write!(line, ", bootargs \"{}\"", n.bootargs);
                }
                line
            })
            .collect()
    }
}

/// Resolves each config's guest (a built guest's name or an image path),
/// measures the files and lays them out in `machine`'s RAM above the el2
/// image at `el2_image`.
pub fn plan_for(
    machine: &Machine,
    el2_image: &Path,
    guests: &Guests,
    configs: &[VmConfig],
) -> Result<Plan> {
    let ram_size = parse_size(&machine.mem)?;
    let el2 = image::read_header(el2_image)?;
    let size_of = |path: &Path| -> Result<u64> {
        Ok(std::fs::metadata(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .len())
    };
    let mut resolved = Vec::new();
    for config in configs {
        let kernel = guests::resolve(guests, &config.guest)?;
        let initrd_size = config.initrd.as_deref().map(size_of).transpose()?;
        resolved.push(Resolved {
            config,
            kernel_size: size_of(&kernel)?,
            kernel,
            initrd_size,
        });
    }
    plan(ram_size, el2.image_size, &resolved)
}

/// u64 values as pairs of 32-bit cells.
fn cells(values: &[u64]) -> String {
    values
        .iter()
        .map(|v| format!("{:#x} {:#x}", v >> 32, v & 0xffff_ffff))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Escapes a string for a dts string literal.
fn dts_string(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

const fn align_up(value: u64, align: u64) -> u64 {
    value.div_ceil(align) * align
}

/// Parses a size like QEMU's `-m`: a number with an optional K, M, G or T
/// suffix (powers of 1024); a bare number means MiB.
pub fn parse_size(s: &str) -> Result<u64> {
    let (digits, shift) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => bail!("{s:?}: unknown size suffix {c:?} (K, M, G or T)"),
            };
            (&s[..i], shift)
        }
        _ => (s, 20),
    };
    let n: u64 = digits
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .with_context(|| format!("{s:?} is not a size (e.g. 64M, 1G)"))?;
    n.checked_mul(1 << shift)
        .with_context(|| format!("{s:?} is too large"))
}

/// Parses `0,1,3` into CPU numbers.
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .map(|n| {
            n.trim()
                .parse()
                .with_context(|| format!("--affinity {s:?}: {n:?} is not a CPU number"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const EL2_SIZE: u64 = 31 * MIB;

    fn resolved<'a>(config: &'a VmConfig, kernel: &str, size: u64) -> Resolved<'a> {
        Resolved {
            config,
            kernel: kernel.into(),
            kernel_size: size,
            initrd_size: config.initrd.as_ref().map(|_| 5 * MIB + 1),
        }
    }

    #[test]
    fn modules_go_high_aligned_one_copy_per_vm() {
        let demo = VmConfig::smp_demo(8, "rounds=3", 2);
        let mut other = VmConfig::smp_demo(1, "", 1);
        other.guest = "/tmp/other.bin".into();
        other.initrd = Some("/tmp/initrd.cpio".into());
        let plan = plan(
            1 << 30,
            EL2_SIZE,
            &[
                resolved(&demo, "/t/smp-demo.bin", 0x12820),
                resolved(&other, "/tmp/other.bin", 3 * MIB),
            ],
        )
        .unwrap();
        let top = RAM_BASE + (1 << 30) - 64 * MIB;
        assert_eq!(plan.modules.len(), 4, "smp-demo twice, other, initrd");
        assert_eq!(plan.modules[0].addr, top - 2 * MIB);
        assert_eq!(plan.modules[1].addr, top - 4 * MIB);
        assert_eq!(plan.modules[2].addr, top - 4 * MIB - 4 * MIB);
        assert_eq!(plan.modules[3].addr, top - 8 * MIB - 6 * MIB);
        for m in &plan.modules {
            assert_eq!(m.addr % ALIGN, 0);
        }
        let names: Vec<&str> = plan.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["vm0", "vm1", "vm2"]);
        let at = |addr, size| Payload::At { addr, size };
        assert_eq!(plan.nodes[0].kernel, at(top - 2 * MIB, 0x12820));
        assert_eq!(plan.nodes[1].kernel, at(top - 4 * MIB, 0x12820));
        assert_eq!(plan.nodes[2].initrd, Some(at(top - 14 * MIB, 5 * MIB + 1)));
        assert_eq!(
            plan.qemu_args()[..2],
            [
                "-device".to_string(),
                format!(
                    "loader,file=/t/smp-demo.bin,addr={:#x},force-raw=on",
                    top - 2 * MIB
                )
            ]
        );
    }

    #[test]
    fn too_little_ram_is_an_error_that_says_how_much() {
        let big = VmConfig {
            memory: 512 * MIB,
            ..VmConfig::smp_demo(2, "", 2)
        };
        let err = plan(1 << 30, EL2_SIZE, &[resolved(&big, "/k", MIB)]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("too small") && msg.contains("--mem 1280M"),
            "{msg}"
        );
        // Room for the VMs, but not for a huge image above the device tree.
        let demo = VmConfig::smp_demo(2, "", 1);
        let err = plan(256 * MIB, EL2_SIZE, &[resolved(&demo, "/k", 100 * MIB)]).unwrap_err();
        assert!(err.to_string().contains("does not fit"), "{err}");
        let err = plan(128 * MIB, EL2_SIZE, &[resolved(&demo, "/k", MIB)]).unwrap_err();
        assert!(err.to_string().contains("no room"), "{err}");
    }

    #[test]
    fn bad_configs_are_rejected() {
        for bad in [
            VmConfig {
                memory: 3 * MIB,
                ..VmConfig::smp_demo(1, "", 1)
            },
            VmConfig::smp_demo(0, "", 1),
            VmConfig::smp_demo(1, "", 0),
            VmConfig::smp_demo(1, "a\nb", 1),
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn dts_nodes_follow_the_binding() {
        let plan = Plan {
            modules: vec![Module {
                path: "/k".into(),
                addr: 0x7bc0_0000,
                size: 0x12820,
            }],
            nodes: vec![VmNode {
                index: 1,
                name: "vm1".into(),
                vcpus: 8,
                memory: 0x1_0000_0000,
                kernel: Payload::At {
                    addr: 0x7bc0_0000,
                    size: 0x12820,
                },
                initrd: Some(Payload::At {
                    addr: 0x7ba0_0000,
                    size: 0x1000,
                }),
                bootargs: "say \"hi\" c:\\".into(),
                affinity: vec![0, 1],
                pv_lock: Some(PvLock::Variant(Variant::OpenEuler)),
                pv_time: Some(false),
                boost: Some(false),
                kvm_ptp: Some(true),
                control: Some(true),
                cpu_weight: Some(250),
                time_slice_us: Some(1000),
            }],
        };
        assert_eq!(
            plan.nodes_dts(2),
            "\t\tvm@1 {\n\
             \t\t\tcompatible = \"pvlock,vm\";\n\
             \t\t\tlabel = \"vm1\";\n\
             \t\t\tvcpus = <8>;\n\
             \t\t\tmemory = <0x1 0x0>;\n\
             \t\t\tkernel = <0x0 0x7bc00000 0x0 0x12820>;\n\
             \t\t\tinitrd = <0x0 0x7ba00000 0x0 0x1000>;\n\
             \t\t\tbootargs = \"say \\\"hi\\\" c:\\\\\";\n\
             \t\t\tcpu-affinity = <0 1>;\n\
             \t\t\tpv-lock = \"openeuler\";\n\
             \t\t\tpv-time = \"off\";\n\
             \t\t\tboost = \"off\";\n\
             \t\t\tkvm-ptp = \"on\";\n\
             \t\t\tcontrol = \"on\";\n\
             \t\t\tcpu-weight = <250>;\n\
             \t\t\ttime-slice-us = <1000>;\n\
             \t\t};\n"
        );
        assert!(
            plan.describe()[0].starts_with("vm1: 8 vCPUs, 4096 MiB, kernel 75 KiB at 0x7bc00000")
        );
        assert!(
            plan.describe()[0].contains(
                ", pCPUs [0, 1], pv-lock openeuler, pv-time off, boost off, kvm-ptp on, \
                     control on,"
            ),
            "{}",
            plan.describe()[0]
        );
    }

    #[test]
    fn pv_properties_only_when_set() {
        let demo = VmConfig::smp_demo(2, "", 1);
        let mut pv = VmConfig::smp_demo(2, "", 1);
        pv.pv_lock = Some(PvLock::Off);
        pv.pv_time = Some(true);
        let plan = plan(
            1 << 30,
            EL2_SIZE,
            &[resolved(&demo, "/k", MIB), resolved(&pv, "/k", MIB)],
        )
        .unwrap();
        let dts = plan.nodes_dts(0);
        let (first, second) = dts.split_at(dts.find("vm@1").unwrap());
        assert!(!first.contains("pv-"), "{first}");
        assert!(
            second.contains("\tpv-lock = \"none\";\n\tpv-time = \"on\";\n"),
            "{second}"
        );
    }

    #[test]
    fn pv_lock_names() {
        for v in Variant::ALL {
            assert_eq!(PvLock::parse(v.name()).unwrap(), PvLock::Variant(v));
            assert_eq!(PvLock::Variant(v).variant(), Some(v));
        }
        assert_eq!(PvLock::parse("none").unwrap(), PvLock::Off);
        assert_eq!(PvLock::Off.name(), "none");
        assert_eq!(PvLock::parse("seed-v2").unwrap().name(), "seed-v2");
        let err = PvLock::parse("v4").unwrap_err().to_string();
        assert_eq!(
            err,
            "--pv-lock \"v4\": must be one of seed-v2, seed-v3, openeuler, anolis, none"
        );
        assert!(parse_on_off("on").unwrap() && !parse_on_off("off").unwrap());
        assert!(parse_on_off("yes").is_err());
    }

    #[test]
    fn sizes_and_cpu_lists() {
        assert_eq!(parse_size("64M").unwrap(), 64 * MIB);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("2048").unwrap(), 2048 * MIB);
        assert_eq!(parse_size("512K").unwrap(), 512 << 10);
        for bad in ["", "M", "0", "1.5G", "12Q", "-1M"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_cpu_list("0, 1,3").unwrap(), [0, 1, 3]);
        assert!(parse_cpu_list("0,x").is_err());
    }
}
