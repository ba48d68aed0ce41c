//! VM descriptions in the boot device tree (the `pvlock,vm` binding).
//!
//! VMs are described dom0less-style, as children of `/chosen` compatible
//! with [`VM_COMPATIBLE`]; docs/vm-binding.md is the binding and gives an
//! example. Each VM node is read on its own: a bad node yields an `Err`
//! entry naming the node and property, and the other VMs still parse.
//!
//! Only what one node says is checked here. Whether the kernel and initrd
//! lie in host RAM clear of everything else, and whether there is memory
//! for the VM, depends on the whole machine and is decided by the
//! hypervisor's placement (el2 `guest::placement`).
//!
//! Adding a property: add its name to [`property`], a field to
//! [`VmConfig`] with its default in [`VmConfig::new`], and one line in
//! `VmNode::config` that reads it.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use pvlock_abi::control;
use pvlock_abi::pvlock::Variant;

use crate::fdt::NodeId;
use crate::parse::Tree;
use crate::{MemRange, PlatformError};

/// The `compatible` that marks a `/chosen` child as a VM description.
pub const VM_COMPATIBLE: &str = "pvlock,vm";

/// Most vCPUs one VM may have. The guest's redistributor window
/// (el2 `guest::layout`) and its MPIDR scheme (16 vCPUs per Aff1 cluster)
/// are sized for this.
pub const MAX_VCPUS: u32 = 64;

/// Longest VM name, in bytes (all ASCII).
pub const MAX_NAME_LEN: usize = 16;

/// VM memory comes in multiples of this (2 MiB): the stage-2 tables map
/// guest RAM with 2 MiB blocks, and an arm64 kernel is placed at a 2 MiB
/// aligned base (Linux Documentation/arch/arm64/booting.rst).
pub const MEMORY_GRANULE: u64 = 2 << 20;

/// The binding's property names, as they are spelled in the tree and in
/// error messages.
pub mod property {
    /// `label`: the VM's name (string). Not `name`: the DT spec reserves
    /// that for the (deprecated) copy of the node name, and dtc rejects it.
    pub const NAME: &str = "label";
    /// `vcpus`: the number of vCPUs (u32).
    pub const VCPUS: &str = "vcpus";
    /// `memory`: RAM size in bytes (u64, two cells).
    pub const MEMORY: &str = "memory";
    /// `kernel`: where the kernel image lies in host RAM (u64 address, u64 size).
    pub const KERNEL: &str = "kernel";
    /// `initrd`: where the initial ramdisk lies in host RAM (u64 address, u64 size).
    pub const INITRD: &str = "initrd";
    /// `bootargs`: the VM's kernel command line (string).
    pub const BOOTARGS: &str = "bootargs";
    /// `cpu-affinity`: logical physical CPUs the VM's vCPUs may run on (u32 list).
    pub const CPU_AFFINITY: &str = "cpu-affinity";
    /// `pv-lock`: which PV-lock ("vCPU preempted") interface the VM gets
    /// (string: a [`Variant::name`](pvlock_abi::pvlock::Variant::name) or
    /// [`value::NONE`](super::value::NONE)).
    pub const PV_LOCK: &str = "pv-lock";
    /// `pv-time`: whether the VM gets Arm PV time / stolen time, DEN0057A
    /// (string: [`value::ON`](super::value::ON) or [`value::OFF`](super::value::OFF)).
    pub const PV_TIME: &str = "pv-time";
    /// `kvm-ptp`: whether the VM gets KVM's PTP call, `0x86000001`
    /// (string: [`value::ON`](super::value::ON) or [`value::OFF`](super::value::OFF)).
    pub const KVM_PTP: &str = "kvm-ptp";
    /// `wfe-trap`: the VM's WFE trap policy (string: a
    /// [`TrapPolicy::name`](super::TrapPolicy::name)).
    pub const WFE_TRAP: &str = "wfe-trap";
    /// `wfe-trap-vcpus`: per-vCPU exceptions to `wfe-trap` (string list,
    /// each `"<vcpu>:<policy>"`, e.g. `"3:notrap"`).
    pub const WFE_TRAP_VCPUS: &str = "wfe-trap-vcpus";
    /// `wfi-trap`: whether WFI traps (string:
    /// [`TrapPolicy::Trap`](super::TrapPolicy::Trap) or
    /// [`TrapPolicy::NoTrap`](super::TrapPolicy::NoTrap) by name).
    pub const WFI_TRAP: &str = "wfi-trap";
    /// `control`: whether the VM may change other VMs' WFE trap policies
    /// (string: [`value::ON`](super::value::ON) or [`value::OFF`](super::value::OFF)).
    pub const CONTROL: &str = "control";
    /// `boost`: whether the hypervisor's critical-section heuristics run
    /// for the VM (string: [`value::ON`](super::value::ON) or
    /// [`value::OFF`](super::value::OFF)).
    pub const BOOST: &str = "boost";
    /// `cpu-weight`: the VM's share of CPU time relative to the other VMs
    /// (u32, [`MIN_CPU_WEIGHT`](super::MIN_CPU_WEIGHT) to
    /// [`MAX_CPU_WEIGHT`](super::MAX_CPU_WEIGHT)).
    pub const CPU_WEIGHT: &str = "cpu-weight";
    /// `time-slice-us`: how long the VM's vCPUs run before the scheduler
    /// looks again, in microseconds (u32,
    /// [`MIN_TIME_SLICE_US`](super::MIN_TIME_SLICE_US) to
    /// [`MAX_TIME_SLICE_US`](super::MAX_TIME_SLICE_US)).
    pub const TIME_SLICE_US: &str = "time-slice-us";
}

/// The words the binding's string-valued switches take, besides the
/// PV-lock variant names, which are [`Variant::name`]'s.
pub mod value {
    /// A switch that is on (`pv-time`, `kvm-ptp`).
    pub const ON: &str = "on";
    /// A switch that is off (`pv-time`, `kvm-ptp`).
    pub const OFF: &str = "off";
    /// `pv-lock = "none"`: no PV-lock interface at all.
    pub const NONE: &str = "none";
    /// Between the vCPU index and the policy in a `wfe-trap-vcpus` entry
    /// (`"3:notrap"`).
    pub const VCPU_POLICY_SEPARATOR: char = ':';
}

/// `pv-lock` when the node does not say: seed v2, whose two SMC64 calls
/// are probed with SMCCC_ARCH_FEATURES (and advertised as KVM_FEATURES
/// bits 32 and 33) and clash with nothing mainline KVM offers, and whose
/// records the hypervisor places (docs/vm-binding.md explains the choice).
pub const DEFAULT_PV_LOCK: Option<Variant> = Some(Variant::SeedV2);

/// `pv-time` when the node does not say: on (stock Linux uses it).
pub const DEFAULT_PV_TIME: bool = true;

/// `kvm-ptp` when the node does not say: off, so that a VM switched to
/// `pv-lock = "seed-v3"` needs no second change to avoid the clash.
pub const DEFAULT_KVM_PTP: bool = false;

/// `wfe-trap` when the node does not say: [`TrapPolicy::Auto`], KVM's
/// default.
pub const DEFAULT_WFE_TRAP: TrapPolicy = TrapPolicy::Auto;

/// `wfi-trap` when the node does not say: trap (`"trap"`), so that an idle
/// vCPU gives its physical CPU back.
pub const DEFAULT_WFI_TRAP: bool = true;

/// `control` when the node does not say: off.
pub const DEFAULT_CONTROL: bool = false;

/// `boost` when the node does not say: on.
pub const DEFAULT_BOOST: bool = true;

/// `cpu-weight` when the node does not say, and the range it may take:
/// cgroup v2's `cpu.weight` scale (default 100, 1 to 10000), so a VM of
/// weight 200 is owed twice the CPU time of a VM of weight 100 while both
/// want more than they get.
pub const DEFAULT_CPU_WEIGHT: u32 = 100;
/// The smallest `cpu-weight`.
pub const MIN_CPU_WEIGHT: u32 = 1;
/// The largest `cpu-weight`.
pub const MAX_CPU_WEIGHT: u32 = 10_000;

/// `time-slice-us` when the node does not say: 4 ms, el2's slice before
/// the property existed, and the unit its scheduler's wake-up granularity
/// and fairness margin are measured in (docs/vms.md).
pub const DEFAULT_TIME_SLICE_US: u32 = 4_000;
/// The shortest `time-slice-us`: 250 µs, a quarter of the wake-up
/// granularity at the default slice. Shorter slices cost more switches
/// for less: Debian's fork+exec loop at 2x already does worse at 250 µs
/// than at 1 ms (docs/benchmarks-linux.md).
pub const MIN_TIME_SLICE_US: u32 = 250;
/// The longest `time-slice-us`: 100 ms.
pub const MAX_TIME_SLICE_US: u32 = 100_000;

/// When a vCPU's WFE traps to the hypervisor (HCR_EL2.TWE): KVM's
/// `kvm-arm.wfe_trap_policy`, per VM (`wfe-trap`) and per vCPU
/// (`wfe-trap-vcpus`, and the control VMs' PVLOCK_SET_WFX_POLICY,
/// [`pvlock_abi::control`]).
///
/// Plain data, here so that both the binding and the hypervisor (el2
/// `onspin`, which decides TWE from it) can name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TrapPolicy {
    /// KVM's default: trap only while the physical CPU has more than one
    /// runnable vCPU (`kvm_vcpu_should_clear_twe`: clear while
    /// `single_task_running()`).
    #[default]
    Auto,
    /// Always trap (`wfe_trap_policy=trap`).
    Trap,
    /// Never trap (`wfe_trap_policy=notrap`): spinning guests spin.
    NoTrap,
}

impl TrapPolicy {
    /// Every policy, in [`Self::abi_code`] order.
    pub const ALL: [Self; 3] = [Self::Auto, Self::Trap, Self::NoTrap];

    /// From KVM's option spelling, which is also the binding's: `trap`,
    /// `notrap`, or `auto` (this hypervisor's name for KVM's unset
    /// default). Exact, lower case.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == s)
    }

    /// The spelling [`Self::parse`] accepts.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Trap => "trap",
            Self::NoTrap => "notrap",
        }
    }

    /// The policy code of PVLOCK_SET_WFX_POLICY's X3
    /// ([`control::WFE_AUTO`], [`control::WFE_TRAP`],
    /// [`control::WFE_NOTRAP`]).
    pub const fn abi_code(self) -> u64 {
        match self {
            Self::Auto => control::WFE_AUTO,
            Self::Trap => control::WFE_TRAP,
            Self::NoTrap => control::WFE_NOTRAP,
        }
    }

    /// The policy a PVLOCK_SET_WFX_POLICY code names (all 64 bits count),
    /// `None` for an unknown code.
    pub const fn from_abi(code: u64) -> Option<Self> {
        match code {
            control::WFE_AUTO => Some(Self::Auto),
            control::WFE_TRAP => Some(Self::Trap),
            control::WFE_NOTRAP => Some(Self::NoTrap),
            _ => None,
        }
    }
}

impl fmt::Display for TrapPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The binding's spelling of a `pv-lock` choice: the variant's
/// [`Variant::name`], or [`value::NONE`].
pub const fn pv_lock_name(pv_lock: Option<Variant>) -> &'static str {
    match pv_lock {
        Some(variant) => variant.name(),
        None => value::NONE,
    }
}

/// One VM, as its `/chosen` node describes it.
///
/// `#[non_exhaustive]` because later properties add fields: build one
/// outside this crate with [`VmConfig::new`] and set the optional fields.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VmConfig {
    /// Node path, for messages (`/chosen/vm@0`).
    pub node: String,
    /// `label`, or the node name without its `@` (`vm@0` -> `vm0`); unique
    /// among the VMs, 1 to [`MAX_NAME_LEN`] printable ASCII characters
    /// other than space.
    pub name: String,
    /// `vcpus`: 1 to [`MAX_VCPUS`].
    pub vcpus: u32,
    /// `memory`: bytes of guest RAM, a non-zero multiple of [`MEMORY_GRANULE`].
    pub memory_size: u64,
    /// `kernel`: the kernel image in host RAM, where the loader put it.
    pub kernel: MemRange,
    /// `initrd`: the initial ramdisk in host RAM, if any.
    pub initrd: Option<MemRange>,
    /// `bootargs`: the guest kernel's command line; empty when absent.
    pub bootargs: String,
    /// `cpu-affinity`: the logical numbers of the physical CPUs the VM's
    /// vCPUs may run on (the hypervisor numbers CPUs with the boot CPU 0,
    /// then the others in `/cpus` order); `None` means any CPU. Each is
    /// below the number of CPUs in `/cpus`, none repeats, DT order kept.
    pub cpu_affinity: Option<Vec<u32>>,
    /// `pv-lock`: the PV-lock interface the VM is offered, `None` for
    /// none; [`DEFAULT_PV_LOCK`] when absent.
    pub pv_lock: Option<Variant>,
    /// `pv-time`: whether the VM is offered PV time (stolen time);
    /// [`DEFAULT_PV_TIME`] when absent.
    pub pv_time: bool,
    /// `kvm-ptp`: whether the VM is offered KVM_PTP; [`DEFAULT_KVM_PTP`]
    /// when absent. Never true together with a `pv_lock` whose
    /// [`Variant::clashes_with_kvm_ptp`].
    pub kvm_ptp: bool,
    /// `wfe-trap`: when the VM's vCPUs trap WFE, unless
    /// [`Self::wfe_trap_vcpus`] says otherwise for a vCPU;
    /// [`DEFAULT_WFE_TRAP`] when absent.
    pub wfe_trap: TrapPolicy,
    /// `wfe-trap-vcpus`: `(vCPU index, policy)` exceptions to
    /// [`Self::wfe_trap`], in DT order; each index below [`Self::vcpus`],
    /// none twice. Empty when absent. [`Self::wfe_trap_of`] combines the
    /// two.
    pub wfe_trap_vcpus: Vec<(u32, TrapPolicy)>,
    /// `wfi-trap`: whether WFI traps (HCR_EL2.TWI); with `false` a vCPU's
    /// WFI runs natively and the vCPU keeps its physical CPU while it
    /// idles. [`DEFAULT_WFI_TRAP`] when absent.
    pub wfi_trap: bool,
    /// `control`: the VM is a control VM, offered PVLOCK_SET_WFX_POLICY
    /// ([`pvlock_abi::control`]) to change any VM's WFE trap policy at run
    /// time; [`DEFAULT_CONTROL`] when absent.
    pub control: bool,
    /// `boost`: the hypervisor's critical-section heuristics for this VM:
    /// on-spin prefers siblings that hold a lock, were descheduled with
    /// IRQs masked or have an interrupt pending (seeds 000 and 003), and a
    /// vCPU whose slice ends inside a critical section gets a short
    /// extension when only its own VM's vCPUs wait for the pCPU. With
    /// `false`, on-spin is KVM's plain round robin and slices end on time.
    /// [`DEFAULT_BOOST`] when absent.
    pub boost: bool,
    /// `cpu-weight`: the VM's CPU weight, [`MIN_CPU_WEIGHT`] to
    /// [`MAX_CPU_WEIGHT`]. VMs that all want more CPU time than they get
    /// receive it in proportion to their weights, and a VM's share is
    /// divided equally among its runnable vCPUs. [`DEFAULT_CPU_WEIGHT`]
    /// when absent.
    pub cpu_weight: u32,
    /// `time-slice-us`: the slice each of the VM's vCPUs gets when it is
    /// scheduled in, [`MIN_TIME_SLICE_US`] to [`MAX_TIME_SLICE_US`]. A
    /// shorter slice bounds how long a guest lock holder that the
    /// hypervisor cannot see (a guest without PV spinlocks) stays
    /// preempted while its siblings spin; the VM's share of CPU time does
    /// not depend on it. [`DEFAULT_TIME_SLICE_US`] when absent.
    pub time_slice_us: u32,
}

impl VmConfig {
    /// A VM with the required properties set and every optional one at its
    /// default (no initrd, empty bootargs, any CPU, [`DEFAULT_PV_LOCK`],
    /// [`DEFAULT_PV_TIME`], [`DEFAULT_KVM_PTP`], [`DEFAULT_WFE_TRAP`] with
    /// no per-vCPU exception, [`DEFAULT_WFI_TRAP`], [`DEFAULT_CONTROL`],
    /// [`DEFAULT_BOOST`], [`DEFAULT_CPU_WEIGHT`], [`DEFAULT_TIME_SLICE_US`]).
    /// Does not check the values: that is the parser's job.
    pub fn new(node: &str, name: &str, vcpus: u32, memory_size: u64, kernel: MemRange) -> Self {
        VmConfig {
            node: node.to_string(),
            name: name.to_string(),
            vcpus,
            memory_size,
            kernel,
            initrd: None,
            bootargs: String::new(),
            cpu_affinity: None,
            pv_lock: DEFAULT_PV_LOCK,
            pv_time: DEFAULT_PV_TIME,
            kvm_ptp: DEFAULT_KVM_PTP,
            wfe_trap: DEFAULT_WFE_TRAP,
            wfe_trap_vcpus: Vec::new(),
            wfi_trap: DEFAULT_WFI_TRAP,
            control: DEFAULT_CONTROL,
            boost: DEFAULT_BOOST,
            cpu_weight: DEFAULT_CPU_WEIGHT,
            time_slice_us: DEFAULT_TIME_SLICE_US,
        }
    }

    /// The WFE trap policy vCPU `vcpu` starts with: its `wfe-trap-vcpus`
    /// entry if it has one, else the VM's `wfe-trap`.
    pub fn wfe_trap_of(&self, vcpu: u32) -> TrapPolicy {
        self.wfe_trap_vcpus
            .iter()
            .find(|&&(index, _)| index == vcpu)
            .map_or(self.wfe_trap, |&(_, policy)| policy)
    }
}

/// Every enabled `/chosen` child compatible with [`VM_COMPATIBLE`], in DT
/// order, each parsed on its own. `cpu_count` is the number of usable CPUs
/// in `/cpus`, which bounds `cpu-affinity`.
///
/// Names must be unique: a name belongs to the first VM node that gives
/// it (even if that VM is bad for another reason, so that fixing it later
/// does not turn a good VM bad), and a later node with the same name is
/// an error on its `name`.
pub(crate) fn parse_vms(
    tree: &Tree<'_, '_>,
    cpu_count: usize,
) -> Vec<Result<VmConfig, PlatformError>> {
    let Some(chosen) = tree.fdt.find_path("/chosen") else {
        return Vec::new();
    };
    // (name, node path) of every VM whose name could be read.
    let mut claimed: Vec<(String, String)> = Vec::new();
    let mut vms = Vec::new();
    for node in tree.fdt.children(chosen) {
        if !tree.is_compatible(node, VM_COMPATIBLE) || !tree.is_enabled(node) {
            continue;
        }
        let vm = VmNode {
            tree,
            node,
            cpu_count,
        };
        let result = vm.name().and_then(|name| {
            if let Some((_, first)) = claimed.iter().find(|(claimed, _)| *claimed == name) {
                return Err(tree.bad(
                    node,
                    property::NAME,
                    format!("\"{name}\" is also the name of {first}"),
                ));
            }
            claimed.push((name.clone(), tree.fdt.path(node)));
            vm.config(name)
        });
        vms.push(result);
    }
    vms
}

/// One VM node and the readers for its properties; every error names the
/// node and the property.
struct VmNode<'t, 'f, 'a> {
    tree: &'t Tree<'f, 'a>,
    node: NodeId,
    cpu_count: usize,
}

impl VmNode<'_, '_, '_> {
    /// Everything but the name, which [`parse_vms`] has read and checked
    /// for uniqueness.
    fn config(&self, name: String) -> Result<VmConfig, PlatformError> {
        // Read in binding order, so the first bad property is the one named.
        let vcpus = self.vcpus()?;
        let memory_size = self.memory()?;
        let kernel = self
            .module(property::KERNEL)?
            .ok_or_else(|| self.tree.missing(self.node, property::KERNEL))?;
        let mut config = VmConfig::new(
            &self.tree.fdt.path(self.node),
            &name,
            vcpus,
            memory_size,
            kernel,
        );
        config.initrd = self.module(property::INITRD)?;
        config.bootargs = self
            .tree
            .string(self.node, property::BOOTARGS)?
            .unwrap_or_default()
            .to_string();
        config.cpu_affinity = self.cpu_affinity()?;
        config.pv_lock = self.pv_lock()?;
        config.pv_time = self.switch(property::PV_TIME)?.unwrap_or(DEFAULT_PV_TIME);
        // After `pv-lock`: whether it may be on depends on it.
        config.kvm_ptp = self.kvm_ptp(config.pv_lock)?;
        config.wfe_trap = self
            .choice(property::WFE_TRAP, &trap_policies())?
            .unwrap_or(DEFAULT_WFE_TRAP);
        config.wfe_trap_vcpus = self.wfe_trap_vcpus(config.vcpus)?;
        config.wfi_trap = self
            .choice(
                property::WFI_TRAP,
                &[
                    (TrapPolicy::Trap.name(), true),
                    (TrapPolicy::NoTrap.name(), false),
                ],
            )?
            .unwrap_or(DEFAULT_WFI_TRAP);
        config.control = self.switch(property::CONTROL)?.unwrap_or(DEFAULT_CONTROL);
        config.boost = self.switch(property::BOOST)?.unwrap_or(DEFAULT_BOOST);
        config.cpu_weight = self.bounded_u32(
            property::CPU_WEIGHT,
            MIN_CPU_WEIGHT..=MAX_CPU_WEIGHT,
            DEFAULT_CPU_WEIGHT,
        )?;
        config.time_slice_us = self.bounded_u32(
            property::TIME_SLICE_US,
            MIN_TIME_SLICE_US..=MAX_TIME_SLICE_US,
            DEFAULT_TIME_SLICE_US,
        )?;
        Ok(config)
    }

    /// A `<u32>` property that must lie in `range`; `default` when absent.
    fn bounded_u32(
        &self,
        name: &str,
        range: core::ops::RangeInclusive<u32>,
        default: u32,
    ) -> Result<u32, PlatformError> {
        let Some(value) = self.tree.u32_prop(self.node, name)? else {
            return Ok(default);
        };
        if !range.contains(&value) {
            return Err(self.tree.bad(
                self.node,
                name,
                format!("{value}, expected {} to {}", range.start(), range.end()),
            ));
        }
        Ok(value)
    }

    /// `label`, or the node name without its `@`.
    fn name(&self) -> Result<String, PlatformError> {
        let (name, given) = match self.tree.string(self.node, property::NAME)? {
            Some(name) => (name.to_string(), true),
            None => (self.tree.fdt.name(self.node).replace('@', ""), false),
        };
        let problem = if name.is_empty() {
            Some(String::from("is empty"))
        } else if name.len() > MAX_NAME_LEN {
            Some(format!("is longer than {MAX_NAME_LEN} characters"))
        } else if !name.bytes().all(|b| b.is_ascii_graphic()) {
            Some(String::from(
                "may only hold printable ASCII characters other than space",
            ))
        } else {
            None
        };
        match problem {
            None => Ok(name),
            Some(why) if given => {
                Err(self
                    .tree
                    .bad(self.node, property::NAME, format!("\"{name}\" {why}")))
            }
            Some(why) => Err(self.tree.bad(
                self.node,
                property::NAME,
                format!("absent, and the default taken from the node name, \"{name}\", {why}"),
            )),
        }
    }

    fn vcpus(&self) -> Result<u32, PlatformError> {
        let vcpus = self
            .tree
            .u32_prop(self.node, property::VCPUS)?
            .ok_or_else(|| self.tree.missing(self.node, property::VCPUS))?;
        if !(1..=MAX_VCPUS).contains(&vcpus) {
            return Err(self.tree.bad(
                self.node,
                property::VCPUS,
                format!("{vcpus}, expected 1 to {MAX_VCPUS}"),
            ));
        }
        Ok(vcpus)
    }

    fn memory(&self) -> Result<u64, PlatformError> {
        let size = self
            .tree
            .u64_prop(self.node, property::MEMORY)?
            .ok_or_else(|| self.tree.missing(self.node, property::MEMORY))?;
        if size == 0 || !size.is_multiple_of(MEMORY_GRANULE) {
            return Err(self.tree.bad(
                self.node,
                property::MEMORY,
                format!("{size:#x} bytes is not a non-zero multiple of 2 MiB"),
            ));
        }
        Ok(size)
    }

    /// A `<u64 address, u64 size>` pair (four cells, whatever the
    /// `#address-cells` of `/chosen`) naming a non-empty range that does
    /// not wrap.
    fn module(&self, property: &str) -> Result<Option<MemRange>, PlatformError> {
        let Some(cells) = self.tree.cells(self.node, property)? else {
            return Ok(None);
        };
        let &[base_high, base_low, size_high, size_low] = cells.as_slice() else {
            return Err(self.tree.bad(
                self.node,
                property,
                format!(
                    "{} cells, expected 4: <address-high address-low size-high size-low>",
                    cells.len()
                ),
            ));
        };
        let base = (u64::from(base_high) << 32) | u64::from(base_low);
        let size = (u64::from(size_high) << 32) | u64::from(size_low);
        if size == 0 {
            return Err(self.tree.bad(self.node, property, "size is 0"));
        }
        if base.checked_add(size).is_none() {
            return Err(self.tree.bad(
                self.node,
                property,
                format!("{base:#x} + {size:#x} runs past the end of the address space"),
            ));
        }
        Ok(Some(MemRange::new(base, size)))
    }

    fn cpu_affinity(&self) -> Result<Option<Vec<u32>>, PlatformError> {
        let Some(cpus) = self.tree.cells(self.node, property::CPU_AFFINITY)? else {
            return Ok(None);
        };
        if cpus.is_empty() {
            return Err(self.tree.bad(
                self.node,
                property::CPU_AFFINITY,
                "empty (leave the property out to allow any CPU)",
            ));
        }
        for (at, &cpu) in cpus.iter().enumerate() {
            if usize::try_from(cpu).map_or(true, |cpu| cpu >= self.cpu_count) {
                return Err(self.tree.bad(
                    self.node,
                    property::CPU_AFFINITY,
                    format!(
                        "CPU {cpu} does not exist: the host has {} CPUs, numbered from 0",
                        self.cpu_count
                    ),
                ));
            }
            if cpus.get(..at).is_some_and(|earlier| earlier.contains(&cpu)) {
                return Err(self.tree.bad(
                    self.node,
                    property::CPU_AFFINITY,
                    format!("CPU {cpu} is listed twice"),
                ));
            }
        }
        Ok(Some(cpus))
    }

    /// `pv-lock`: a [`Variant::name`] or [`value::NONE`].
    fn pv_lock(&self) -> Result<Option<Variant>, PlatformError> {
        let choices: Vec<(&str, Option<Variant>)> = Variant::ALL
            .iter()
            .map(|&variant| (variant.name(), Some(variant)))
            .chain([(value::NONE, None)])
            .collect();
        Ok(self
            .choice(property::PV_LOCK, &choices)?
            .unwrap_or(DEFAULT_PV_LOCK))
    }

    /// `kvm-ptp`, which must stay off when `pv_lock` uses KVM_PTP's
    /// function id (seed v3's PV_LOCK is `0x86000001` too; docs/abi.md §3).
    fn kvm_ptp(&self, pv_lock: Option<Variant>) -> Result<bool, PlatformError> {
        let kvm_ptp = self.switch(property::KVM_PTP)?.unwrap_or(DEFAULT_KVM_PTP);
        if let Some(variant) = pv_lock.filter(|v| kvm_ptp && v.clashes_with_kvm_ptp()) {
            return Err(self.tree.bad(
                self.node,
                property::KVM_PTP,
                format!(
                    "\"{on}\" conflicts with {pv_lock} = \"{name}\": both use function id {id:#x}; \
                     set {kvm_ptp} = \"{off}\" or choose another {pv_lock}",
                    on = value::ON,
                    off = value::OFF,
                    pv_lock = property::PV_LOCK,
                    kvm_ptp = property::KVM_PTP,
                    name = variant.name(),
                    id = pvlock_abi::kvm::PTP.raw(),
                ),
            ));
        }
        Ok(kvm_ptp)
    }

    /// `wfe-trap-vcpus`: a string list of `"<vcpu>:<policy>"` entries, the
    /// vCPU a decimal index below `vcpus`, the policy a
    /// [`TrapPolicy::name`]; no vCPU twice. Empty when absent.
    fn wfe_trap_vcpus(&self, vcpus: u32) -> Result<Vec<(u32, TrapPolicy)>, PlatformError> {
        const PROPERTY: &str = property::WFE_TRAP_VCPUS;
        let bad = |why: String| self.tree.bad(self.node, PROPERTY, why);
        if self
            .tree
            .fdt
            .prop(self.node, PROPERTY)
            .is_some_and(<[u8]>::is_empty)
        {
            return Err(bad(String::from(
                "empty (leave the property out for no per-vCPU policies)",
            )));
        }
        let Some(entries) = self.tree.strings(self.node, PROPERTY)? else {
            return Ok(Vec::new());
        };
        let policies = one_of(TrapPolicy::ALL.iter().map(|p| p.name()));
        let mut overrides: Vec<(u32, TrapPolicy)> = Vec::with_capacity(entries.len());
        for entry in entries {
            let Some((index, policy)) = entry.split_once(value::VCPU_POLICY_SEPARATOR) else {
                return Err(bad(format!(
                    "\"{entry}\" is not <vcpu>{sep}<policy>, e.g. \"1{sep}{example}\"",
                    sep = value::VCPU_POLICY_SEPARATOR,
                    example = TrapPolicy::NoTrap.name(),
                )));
            };
            if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(format!(
                    "\"{entry}\": \"{index}\" is not a vCPU index (a decimal number)"
                )));
            }
            let Some(policy) = TrapPolicy::parse(policy) else {
                return Err(bad(format!(
                    "\"{entry}\": policy \"{policy}\", expected {policies}"
                )));
            };
            let Some(vcpu) = index.parse::<u32>().ok().filter(|&v| v < vcpus) else {
                return Err(bad(format!(
                    "\"{entry}\": vCPU {index} does not exist: the VM has {vcpus} vCPUs, \
                     numbered from 0"
                )));
            };
            if overrides.iter().any(|&(earlier, _)| earlier == vcpu) {
                return Err(bad(format!("vCPU {vcpu} is listed twice")));
            }
            overrides.push((vcpu, policy));
        }
        Ok(overrides)
    }

    /// An on/off switch ([`value::ON`], [`value::OFF`]); `None` when absent.
    fn switch(&self, property: &str) -> Result<Option<bool>, PlatformError> {
        self.choice(property, &[(value::ON, true), (value::OFF, false)])
    }

    /// A property that holds exactly one string, which must be one of the
    /// spellings in `choices`; the value paired with it, or `None` when
    /// the property is absent. Anything else (empty, not a string, several
    /// strings, an unknown word) is a bad value that lists the choices.
    fn choice<T: Copy>(
        &self,
        property: &str,
        choices: &[(&str, T)],
    ) -> Result<Option<T>, PlatformError> {
        let Some(raw) = self.tree.fdt.prop(self.node, property) else {
            return Ok(None);
        };
        let expected = one_of(choices.iter().map(|&(name, _)| name));
        if raw.is_empty() {
            return Err(self
                .tree
                .bad(self.node, property, format!("empty, expected {expected}")));
        }
        let word = self.tree.string(self.node, property)?.unwrap_or_default();
        if raw.len() != word.len() + 1 {
            return Err(self.tree.bad(
                self.node,
                property,
                format!("not a single string, expected {expected}"),
            ));
        }
        match choices.iter().find(|&&(name, _)| name == word) {
            Some(&(_, value)) => Ok(Some(value)),
            None => Err(self.tree.bad(
                self.node,
                property,
                format!("\"{word}\", expected {expected}"),
            )),
        }
    }
}

/// Every [`TrapPolicy`] with its binding spelling, for [`VmNode::choice`].
fn trap_policies() -> [(&'static str, TrapPolicy); 3] {
    TrapPolicy::ALL.map(|p| (p.name(), p))
}

/// `"a", "b" or "c"`.
fn one_of<'n>(names: impl ExactSizeIterator<Item = &'n str>) -> String {
    let count = names.len();
    let mut list = String::new();
    for (at, name) in names.enumerate() {
        if at > 0 {
            list += if at + 1 == count { " or " } else { ", " };
        }
        list += &format!("\"{name}\"");
    }
    list
}
