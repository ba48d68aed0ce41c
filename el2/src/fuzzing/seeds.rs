//! The seed corpus of every harness, generated: the inputs in
//! `fuzz/corpus/<target>/seed-*` are exactly what this module builds
//! (`tests::corpus_files_match_the_generator` checks it and rewrites them
//! when asked).
//!
//! Each seed is written with small encoders that mirror the harness's
//! input layout, so it reaches the interesting paths at once: every named
//! SMCCC function in every service configuration, the ESR values of the
//! decoder tests, Linux's PL011 and GIC probe sequences, and boot device
//! trees with VM nodes that are good and bad in every documented way.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use platform::vm::VmConfig;
use platform::{MemRange, Mpidr};
use pvlock_abi::pvlock::{Variant, anolis, openeuler, seed_v2, seed_v3};
use pvlock_abi::smccc::FunctionId;
use pvlock_abi::{arch, catalog, control, directed_yield, kvm, psci, pvtime};
use vm_fdt::{FdtReserveEntry, FdtWriter};

use super::{acpi, exits, pl011, smccc, vgic};
use crate::devices::emul::pl011::{bits as uart_bits, offset as uart};
use crate::devices::vgic::LrState;
use crate::devices::vgic::regs::*;
use crate::guest::layout::{ImageHeader, plan};

/// One seed: a file name (without the `seed-` prefix) and its bytes.
pub(super) type Seed = (&'static str, Vec<u8>);

/// The seeds of the harness named `target` (one of [`super::TARGETS`]).
pub(super) fn seeds(target: &str) -> Vec<Seed> {
    match target {
        "device_tree" => device_tree_seeds(),
        "smccc" => smccc_seeds(),
        "exits" => exits_seeds(),
        "pl011" => pl011_seeds(),
        "vgic" => vgic_seeds(),
        "acpi" => acpi_seeds(),
        _ => Vec::new(),
    }
}

// ---- device trees ---------------------------------------------------------

/// A property value of a hand-built node.
#[derive(Clone, Debug)]
enum Value {
    U32(u32),
    U32s(Vec<u32>),
    U64(u64),
    U64s(Vec<u64>),
    Str(&'static str),
    Strs(Vec<&'static str>),
    /// Exactly these bytes (strings without their NUL, several strings,
    /// empty values).
    Raw(Vec<u8>),
}

/// A VM node under `/chosen`: its name and properties, in order.
struct VmNode {
    name: &'static str,
    properties: Vec<(&'static str, Value)>,
}

impl VmNode {
    /// A node with the required properties: 2 vCPUs, 64 MiB, a kernel of
    /// 1 MiB at `kernel`.
    fn minimal(name: &'static str, kernel: u64) -> Self {
        Self {
            name,
            properties: vec![
                ("compatible", Value::Str("pvlock,vm")),
                ("vcpus", Value::U32(2)),
                ("memory", Value::U64(64 << 20)),
                ("kernel", Value::U64s(vec![kernel, 1 << 20])),
            ],
        }
    }

    /// Sets `property`, replacing an earlier value.
    fn with(mut self, property: &'static str, value: Value) -> Self {
        self.properties.retain(|(name, _)| *name != property);
        self.properties.push((property, value));
        self
    }

    /// Drops `property`.
    fn without(mut self, property: &str) -> Self {
        self.properties.retain(|(name, _)| *name != property);
        self
    }
}

/// A QEMU-`virt`-like host with 1 GiB of RAM, four CPUs, a GICv3, a
/// PL011, a PL031, a `/memreserve/` entry and a `/reserved-memory` region,
/// and `vms` under `/chosen`.
fn host_tree(vms: &[VmNode]) -> Vec<u8> {
    write_host_tree(vms).expect("the seed tree is well-formed")
}

fn write_host_tree(vms: &[VmNode]) -> Result<Vec<u8>, vm_fdt::Error> {
    const GIC: u32 = 1;
    const CLOCK: u32 = 2;
    let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    let mut fdt = FdtWriter::new_with_mem_reserv(&[FdtReserveEntry::new(0x4800_0000, 0x1000)?])?;
    let root = fdt.begin_node("")?;
    fdt.property_u32("#address-cells", 2)?;
    fdt.property_u32("#size-cells", 2)?;
    fdt.property_string("compatible", "linux,dummy-virt")?;
    fdt.property_string("model", "fuzz seed host")?;
    fdt.property_u32("interrupt-parent", GIC)?;

    let chosen = fdt.begin_node("chosen")?;
    fdt.property_string("bootargs", "loglevel=info")?;
    fdt.property_string("stdout-path", "/pl011@9000000")?;
    write_vm_nodes(&mut fdt, vms)?;
    fdt.end_node(chosen)?;

    let memory = fdt.begin_node("memory@40000000")?;
    fdt.property_string("device_type", "memory")?;
    fdt.property_array_u64("reg", &[0x4000_0000, 0x4000_0000])?;
    fdt.end_node(memory)?;

    let reserved = fdt.begin_node("reserved-memory")?;
    fdt.property_u32("#address-cells", 2)?;
    fdt.property_u32("#size-cells", 2)?;
    fdt.property_null("ranges")?;
    let firmware = fdt.begin_node("firmware@4fe00000")?;
    fdt.property_array_u64("reg", &[0x4fe0_0000, 0x20_0000])?;
    fdt.property_null("no-map")?;
    fdt.end_node(firmware)?;
    fdt.end_node(reserved)?;

    let cpus = fdt.begin_node("cpus")?;
    fdt.property_u32("#address-cells", 1)?;
    fdt.property_u32("#size-cells", 0)?;
    for index in 0..4u32 {
        let cpu = fdt.begin_node(&alloc::format!("cpu@{index}"))?;
        fdt.property_string("device_type", "cpu")?;
        fdt.property_string("compatible", "arm,cortex-a57")?;
        fdt.property_u32("reg", index)?;
        fdt.property_string("enable-method", "psci")?;
        fdt.end_node(cpu)?;
    }
    fdt.end_node(cpus)?;

    let psci = fdt.begin_node("psci")?;
    fdt.property_string_list(
        "compatible",
        strings(&["arm,psci-1.0", "arm,psci-0.2", "arm,psci"]),
    )?;
    fdt.property_string("method", "smc")?;
    fdt.end_node(psci)?;

    let gic = fdt.begin_node("intc@8000000")?;
    fdt.property_string("compatible", "arm,gic-v3")?;
    fdt.property_u32("#interrupt-cells", 3)?;
    fdt.property_null("interrupt-controller")?;
    fdt.property_u32("#redistributor-regions", 1)?;
    fdt.property_array_u64("reg", &[0x0800_0000, 0x1_0000, 0x080a_0000, 0xf6_0000])?;
    fdt.property_array_u32("interrupts", &[1, 9, 4])?;
    fdt.property_phandle(GIC)?;
    fdt.end_node(gic)?;

    let timer = fdt.begin_node("timer")?;
    fdt.property_string("compatible", "arm,armv8-timer")?;
    fdt.property_array_u32("interrupts", &[1, 13, 4, 1, 14, 4, 1, 11, 4, 1, 10, 4])?;
    fdt.property_null("always-on")?;
    fdt.end_node(timer)?;

    let clock = fdt.begin_node("apb-pclk")?;
    fdt.property_string("compatible", "fixed-clock")?;
    fdt.property_u32("#clock-cells", 0)?;
    fdt.property_u32("clock-frequency", 24_000_000)?;
    fdt.property_phandle(CLOCK)?;
    fdt.end_node(clock)?;

    let uart = fdt.begin_node("pl011@9000000")?;
    fdt.property_string_list("compatible", strings(&["arm,pl011", "arm,primecell"]))?;
    fdt.property_array_u64("reg", &[0x0900_0000, 0x1000])?;
    fdt.property_array_u32("interrupts", &[0, 1, 4])?;
    fdt.property_array_u32("clocks", &[CLOCK, CLOCK])?;
    fdt.property_string_list("clock-names", strings(&["uartclk", "apb_pclk"]))?;
    fdt.end_node(uart)?;

    let rtc = fdt.begin_node("pl031@9010000")?;
    fdt.property_string_list("compatible", strings(&["arm,pl031", "arm,primecell"]))?;
    fdt.property_array_u64("reg", &[0x0901_0000, 0x1000])?;
    fdt.property_array_u32("interrupts", &[0, 2, 4])?;
    fdt.end_node(rtc)?;

    fdt.end_node(root)?;
    fdt.finish()
}

/// `vms`, each a node of the open node (`/chosen`).
fn write_vm_nodes(fdt: &mut FdtWriter, vms: &[VmNode]) -> Result<(), vm_fdt::Error> {
    let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    for vm in vms {
        let node = fdt.begin_node(vm.name)?;
        for (name, value) in &vm.properties {
            match value {
                Value::U32(v) => fdt.property_u32(name, *v)?,
                Value::U32s(v) => fdt.property_array_u32(name, v)?,
                Value::U64(v) => fdt.property_u64(name, *v)?,
                Value::U64s(v) => fdt.property_array_u64(name, v)?,
                Value::Str(v) => fdt.property_string(name, v)?,
                Value::Strs(v) => fdt.property_string_list(name, strings(v))?,
                Value::Raw(v) => fdt.property(name, v)?,
            }
        }
        fdt.end_node(node)?;
    }
    Ok(())
}

/// An arm64 Image header with `text_offset` and `image_size`, as the
/// harness reads it from the input's last 64 bytes.
fn image_header(text_offset: u64, image_size: u64) -> Vec<u8> {
    let mut header = vec![0; ImageHeader::SIZE];
    header[8..16].copy_from_slice(&text_offset.to_le_bytes());
    header[16..24].copy_from_slice(&image_size.to_le_bytes());
    header[0x38..0x3c].copy_from_slice(&ImageHeader::MAGIC.to_le_bytes());
    header
}

/// Host RAM addresses for the seed VMs' kernels and initrds.
const KERNELS: u64 = 0x4400_0000;

fn good_vms() -> Vec<VmNode> {
    let full = VmNode::minimal("vm@0", KERNELS)
        .with("label", Value::Str("linux0"))
        .with("vcpus", Value::U32(4))
        .with("memory", Value::U64(512 << 20))
        .with("initrd", Value::U64s(vec![KERNELS + (4 << 20), 4 << 20]))
        .with(
            "bootargs",
            Value::Str("console=ttyAMA0 earlycon rdinit=/init"),
        )
        .with("cpu-affinity", Value::U32s(vec![0, 1]))
        .with("pv-lock", Value::Str("seed-v2"))
        .with("pv-time", Value::Str("on"))
        .with("kvm-ptp", Value::Str("on"))
        .with("wfe-trap", Value::Str("auto"))
        .with("wfe-trap-vcpus", Value::Strs(vec!["0:trap", "3:notrap"]))
        .with("wfi-trap", Value::Str("trap"))
        .with("control", Value::Str("on"))
        .with("boost", Value::Str("on"));
    let openeuler = VmNode::minimal("vm@1", KERNELS + (16 << 20))
        .with("vcpus", Value::U32(8))
        .with("pv-lock", Value::Str("openeuler"))
        .with("pv-time", Value::Str("off"))
        .with("wfe-trap", Value::Str("notrap"))
        .with("wfi-trap", Value::Str("notrap"))
        .with("boost", Value::Str("off"));
    let anolis = VmNode::minimal("guest", KERNELS + (32 << 20))
        .with("vcpus", Value::U32(64))
        .with("memory", Value::U64(256 << 20))
        .with("pv-lock", Value::Str("anolis"))
        .with("cpu-affinity", Value::U32s(vec![3]));
    let seed_v3 = VmNode::minimal("vm@3", KERNELS + (48 << 20))
        .with("pv-lock", Value::Str("seed-v3"))
        .with("kvm-ptp", Value::Str("off"))
        .with("control", Value::Str("off"));
    let bare = VmNode::minimal("vm@4", KERNELS + (64 << 20))
        .with("vcpus", Value::U32(1))
        .with("memory", Value::U64(4 << 20))
        .with("pv-lock", Value::Str("none"))
        .with("pv-time", Value::Str("off"));
    let disabled = VmNode::minimal("vm@5", KERNELS).with("status", Value::Str("disabled"));
    let not_a_vm = VmNode::minimal("vm@6", KERNELS).with("compatible", Value::Str("acme,other"));
    vec![full, openeuler, anolis, seed_v3, bare, disabled, not_a_vm]
}

/// One VM node per documented error, each after a good node it must not
/// disturb.
fn bad_vms() -> Vec<VmNode> {
    let base = |name| VmNode::minimal(name, KERNELS);
    vec![
        base("vm@0").with("label", Value::Str("web")),
        base("vm@1").with("vcpus", Value::U32(0)),
        base("vm@2").without("kernel"),
        base("vm@3").with("label", Value::Str("web")),
        base("vm@4").with("pv-lock", Value::Str("v2")),
        base("vm@5").with("pv-time", Value::Str("yes")),
        base("vm@6").with("wfe-trap", Value::Str("never")),
        base("vm@7").with("wfe-trap-vcpus", Value::Strs(vec!["4:trap"])),
        base("vm@8").with("wfe-trap-vcpus", Value::Strs(vec!["1:trap", "1:auto"])),
        base("vm@9")
            .with("pv-lock", Value::Str("seed-v3"))
            .with("kvm-ptp", Value::Str("on")),
        base("vm@10").with("vcpus", Value::U32(65)),
        base("vm@11").with("memory", Value::U64((2 << 20) + 1)),
        base("vm@12").with("kernel", Value::U64s(vec![u64::MAX - 4, 16])),
        base("vm@13").with("kernel", Value::U64s(vec![KERNELS, 0])),
        base("vm@14").with("initrd", Value::U32s(vec![1, 2, 3])),
        base("vm@15").with("cpu-affinity", Value::Raw(Vec::new())),
        base("vm@16").with("cpu-affinity", Value::U32s(vec![0, 4])),
        base("vm@17").with("cpu-affinity", Value::U32s(vec![1, 1])),
        base("vm@18").with("label", Value::Str("has space")),
        base("vm@19").with("label", Value::Str("a-name-far-too-long")),
        base("vm@20").with("wfe-trap-vcpus", Value::Raw(Vec::new())),
        base("vm@21").with("wfe-trap-vcpus", Value::Strs(vec!["x:trap"])),
        base("vm@22").with("wfe-trap-vcpus", Value::Strs(vec!["0-trap"])),
        base("vm@23").with("wfe-trap-vcpus", Value::Strs(vec!["0:sometimes"])),
        base("vm@24").with("control", Value::Raw(b"on".to_vec())),
        base("vm@25").with("boost", Value::Raw(b"on\0off\0".to_vec())),
        base("vm@26").with("wfi-trap", Value::Raw(Vec::new())),
        base("vm@27").with("memory", Value::U32(64 << 20)),
        base("vm@28").with("bootargs", Value::Raw(vec![0xff, 0xfe, 0])),
        base("vm@29").without("vcpus"),
        base("vm@30").without("memory"),
        base("vm@31").with("label", Value::Raw(Vec::new())),
    ]
}

/// A guest device tree as el2 writes it, for a VM with `vcpus` vCPUs and
/// `lock`.
fn guest_tree(vcpus: u32, lock: Option<Variant>, initrd: bool) -> Vec<u8> {
    let mut config = VmConfig::new(
        "/chosen/vm@0",
        "seed",
        vcpus,
        512 << 20,
        MemRange::new(KERNELS, 1 << 20),
    );
    config.pv_lock = lock;
    config.bootargs = String::from("console=ttyAMA0 earlycon");
    if initrd {
        config.initrd = Some(MemRange::new(KERNELS + (4 << 20), 1 << 20));
    }
    let layout = plan(&config, &[]).expect("a seed VM fits");
    crate::guest::dt::build(&config, &layout, 1, true).expect("a seed VM's tree")
}

fn device_tree_seeds() -> Vec<Seed> {
    let with_header = |mut tree: Vec<u8>, header: Vec<u8>| {
        tree.extend(header);
        tree
    };
    vec![
        ("host-good-vms", host_tree(&good_vms())),
        (
            "host-good-vms-image-header",
            with_header(host_tree(&good_vms()), image_header(0x8_0000, 0x200_0000)),
        ),
        (
            "host-image-header-unaligned",
            with_header(host_tree(&good_vms()[..1]), image_header(0x8_0002, 0x1000)),
        ),
        ("host-bad-vms", host_tree(&bad_vms())),
        ("host-no-vms", host_tree(&[])),
        ("guest-1-vcpu", guest_tree(1, None, false)),
        (
            "guest-4-vcpus-seed-v2-initrd",
            guest_tree(4, Some(Variant::SeedV2), true),
        ),
        (
            "guest-64-vcpus-openeuler",
            guest_tree(64, Some(Variant::OpenEuler), false),
        ),
    ]
}

// ---- SMCCC ----------------------------------------------------------------

/// An SMCCC argument, as [`smccc::Arg`] reads it.
#[derive(Clone, Copy, Debug)]
enum A {
    Raw(u64),
    Small(u8),
    RamRecord(u16),
    RamTopRecord(u8),
    RamEdge(u8),
    Vcpu(u8),
    Mpidr(u8),
    Fid(FunctionId),
    PvArea(u8),
    NearMax(u8),
    High(u32),
}

/// Writes an SMCCC harness input.
struct SmcccSeed(Vec<u8>);

impl SmcccSeed {
    /// `services` and `vulnerable` as the first two bytes, `vcpus` vCPUs
    /// (1..=64), 64 MiB of RAM, two other VMs of 1 and 8 vCPUs (the
    /// caller's VM first), vCPU 0 on and the others off.
    fn new(services: u8, vulnerable: u8, vcpus: u8) -> Self {
        let mut bytes = vec![services, vulnerable, vcpus - 1, 30, 2, 0, 7];
        for first in (0..vcpus).step_by(4) {
            // Two bits per vCPU: 0 on, 1 off.
            let byte = (0..4).fold(0u8, |b, i| b | u8::from(first + i != 0) << (2 * i));
            bytes.push(byte);
        }
        Self(bytes)
    }

    fn arg(&mut self, arg: A) {
        let kind = |k: smccc::Arg| k as u8;
        match arg {
            A::Raw(v) => {
                self.0.push(kind(smccc::Arg::Raw));
                self.0.extend(v.to_le_bytes());
            }
            A::Small(v) => self.0.extend([kind(smccc::Arg::Small), v]),
            A::RamRecord(v) => {
                self.0.push(kind(smccc::Arg::RamRecord));
                self.0.extend(v.to_le_bytes());
            }
            A::RamTopRecord(v) => self.0.extend([kind(smccc::Arg::RamTopRecord), v]),
            A::RamEdge(v) => self.0.extend([kind(smccc::Arg::RamEdge), v]),
            A::Vcpu(v) => self.0.extend([kind(smccc::Arg::VcpuIndex), v]),
            A::Mpidr(v) => self.0.extend([kind(smccc::Arg::VcpuMpidr), v]),
            A::Fid(fid) => {
                let index = catalog::index_of(fid).expect("a named id") as u8;
                self.0.extend([kind(smccc::Arg::FunctionId), index]);
            }
            A::PvArea(v) => self.0.extend([kind(smccc::Arg::PvAreaRecord), v]),
            A::NearMax(v) => self.0.extend([kind(smccc::Arg::NearMax), v]),
            A::High(v) => {
                self.0.push(kind(smccc::Arg::HighGarbage));
                self.0.extend(v.to_le_bytes());
            }
        }
    }

    /// A call of the named `fid` from vCPU `caller` with X1..X3 = `args`
    /// (missing ones small zeros).
    fn call(&mut self, caller: u8, fid: FunctionId, args: &[A]) -> &mut Self {
        let index = catalog::index_of(fid).expect("a named id") as u16;
        self.0.push(caller);
        let selector = index * smccc::FUNCTION_SELECTOR_STEP + 1;
        self.0.extend(selector.to_le_bytes());
        self.0.push(0);
        for n in 0..3 {
            self.arg(args.get(n).copied().unwrap_or(A::Small(0)));
        }
        self
    }

    /// A call with a raw X0.
    fn raw_call(&mut self, caller: u8, x0: u64, args: &[A]) -> &mut Self {
        self.0.push(caller);
        self.0.extend(0u16.to_le_bytes());
        self.0.extend(x0.to_le_bytes());
        for n in 0..3 {
            self.arg(args.get(n).copied().unwrap_or(A::Small(0)));
        }
        self
    }

    /// A named call with the SVE hint and bits 63:32 of X0 set.
    fn noisy_call(&mut self, caller: u8, fid: FunctionId) -> &mut Self {
        let index = catalog::index_of(fid).expect("a named id") as u16;
        self.0.push(caller);
        self.0
            .extend((index * smccc::FUNCTION_SELECTOR_STEP + 1).to_le_bytes());
        self.0.push(smccc::NOISE_SVE_HINT | smccc::NOISE_HIGH_BITS);
        self.0.extend(0xdead_beef_u32.to_le_bytes());
        for _ in 0..3 {
            self.arg(A::High(7));
        }
        self
    }

    fn set_power_state(&mut self, vcpu: u8, state: u8) -> &mut Self {
        self.0.extend([smccc::SET_POWER_STATE, vcpu, state]);
        self
    }

    /// Every named id once from vCPU 1, with arguments that make sense for
    /// most: a sibling's MPIDR, a record in RAM, a small selector.
    fn every_named_id(&mut self) -> &mut Self {
        for entry in catalog::entries() {
            self.call(1, entry.id, &[A::Mpidr(2), A::RamRecord(0x40), A::Small(1)]);
        }
        self
    }

    fn finish(&mut self) -> Vec<u8> {
        core::mem::take(&mut self.0)
    }
}

/// Calls every service answers, whatever the configuration.
fn standard_calls(seed: &mut SmcccSeed) {
    use psci::*;
    seed.call(0, PSCI_VERSION, &[])
        .call(0, arch::SMCCC_VERSION, &[])
        .call(0, PSCI_FEATURES, &[A::Fid(arch::SMCCC_VERSION)])
        .call(0, PSCI_FEATURES, &[A::Fid(CPU_SUSPEND)])
        .call(0, PSCI_FEATURES, &[A::Fid(MIGRATE)])
        .call(
            0,
            arch::SMCCC_ARCH_FEATURES,
            &[A::Fid(arch::SMCCC_ARCH_WORKAROUND_1)],
        )
        .call(
            0,
            arch::SMCCC_ARCH_FEATURES,
            &[A::Fid(arch::SMCCC_ARCH_WORKAROUND_2)],
        )
        .call(
            0,
            arch::SMCCC_ARCH_FEATURES,
            &[A::Fid(arch::SMCCC_ARCH_WORKAROUND_3)],
        )
        .call(0, arch::SMCCC_ARCH_WORKAROUND_1, &[])
        .call(0, arch::SMCCC_ARCH_SOC_ID, &[])
        .call(0, kvm::CALL_UID, &[])
        .call(0, kvm::FEATURES, &[])
        .call(0, kvm::PTP, &[A::Small(0)])
        .call(0, kvm::PTP, &[A::Small(1)])
        .call(0, kvm::PTP, &[A::High(1)])
        // CPU_ON: a good one, then the same target again, itself, an
        // unknown MPIDR, non-affinity bits, an entry outside RAM.
        .call(0, CPU_ON, &[A::Mpidr(1), A::RamRecord(0x100), A::Small(7)])
        .call(0, CPU_ON, &[A::Mpidr(1), A::RamRecord(0x100), A::Small(7)])
        .call(0, CPU_ON, &[A::Mpidr(0), A::RamRecord(0x100)])
        .call(0, CPU_ON64, &[A::Mpidr(70), A::RamRecord(0x100)])
        .call(0, CPU_ON64, &[A::Raw(1 << 31 | 2), A::RamRecord(0x100)])
        .call(0, CPU_ON64, &[A::Mpidr(2), A::NearMax(3)])
        .call(0, CPU_ON64, &[A::Mpidr(2), A::RamEdge(2)])
        .call(0, CPU_ON, &[A::High(2), A::High(0x4000_0000)])
        // AFFINITY_INFO at every level, and past the last.
        .call(0, AFFINITY_INFO, &[A::Mpidr(1), A::Small(0)])
        .call(0, AFFINITY_INFO64, &[A::Mpidr(3), A::Small(1)])
        .call(0, AFFINITY_INFO64, &[A::Mpidr(17), A::Small(2)])
        .call(0, AFFINITY_INFO64, &[A::Small(0), A::Small(3)])
        .call(0, AFFINITY_INFO64, &[A::Small(0), A::Small(4)])
        .call(0, MIGRATE_INFO_TYPE, &[])
        .call(0, MIGRATE, &[])
        .call(1, CPU_SUSPEND64, &[A::Small(0), A::RamRecord(8)])
        .call(1, CPU_OFF, &[])
        .set_power_state(2, 2)
        .call(0, AFFINITY_INFO, &[A::Mpidr(2), A::Small(0)])
        .call(0, CPU_ON, &[A::Mpidr(2), A::RamRecord(0x100)])
        .call(0, SYSTEM_RESET2, &[A::Small(0)])
        .call(0, SYSTEM_RESET2_64, &[A::Raw(1 << 32)])
        .call(0, SYSTEM_RESET2, &[A::High(0x8000_0001)])
        .call(0, SYSTEM_RESET2, &[A::Small(1)])
        .call(0, SYSTEM_RESET, &[])
        .call(0, SYSTEM_OFF, &[])
        .noisy_call(0, PSCI_VERSION)
        .noisy_call(0, AFFINITY_INFO)
        .raw_call(0, 0, &[])
        .raw_call(0, 0x0400_0000, &[])
        .raw_call(0, 0x8402_0000, &[])
        .raw_call(0, 0x8400_0020, &[])
        .raw_call(0, 0xc600_0002, &[])
        .raw_call(0, 0xbf00_0000, &[])
        .raw_call(0, u64::MAX, &[]);
    // A caller outside the VM.
    seed.0.extend([smccc::RAW_CALLER, 0x40, 0x00]);
    seed.0.extend([1, 0]); // SMCCC_VERSION is catalog entry 0.
    seed.0.push(0);
    for _ in 0..3 {
        seed.arg(A::Small(0));
    }
}

/// The calls of one PV-lock variant, and the directed yield.
fn lock_calls(seed: &mut SmcccSeed, variant: Variant) {
    for fid in variant.function_ids() {
        seed.call(0, arch::SMCCC_ARCH_FEATURES, &[A::Fid(*fid)]);
    }
    match variant {
        Variant::SeedV2 => {
            seed.call(
                0,
                seed_v2::PV_LOCK_FEATURES,
                &[A::Fid(seed_v2::PV_LOCK_PREEMPTED)],
            )
            .call(0, seed_v2::PV_LOCK_FEATURES, &[A::Fid(psci::CPU_ON)])
            .call(1, seed_v2::PV_LOCK_PREEMPTED, &[])
            .call(3, seed_v2::PV_LOCK_PREEMPTED, &[]);
        }
        Variant::SeedV3 => {
            seed.call(0, seed_v3::PV_LOCK, &[A::Small(0)])
                .call(1, seed_v3::PV_LOCK, &[A::Small(1)])
                .call(1, seed_v3::PV_LOCK, &[A::High(1)])
                .call(1, seed_v3::PV_LOCK, &[A::Small(2)]);
        }
        Variant::OpenEuler => {
            use openeuler::*;
            seed.call(0, PV_SCHED_FEATURES, &[A::Fid(PV_SCHED_KICK_CPU)])
                .call(0, PV_SCHED_FEATURES, &[A::Fid(anolis::PV_LOCK_FEATURES)])
                .call(0, PV_SCHED_IPA_INIT, &[A::RamRecord(0x200)])
                .call(1, PV_SCHED_IPA_INIT, &[A::RamTopRecord(40)])
                .call(1, PV_SCHED_IPA_INIT, &[A::RamTopRecord(0)])
                .call(2, PV_SCHED_IPA_INIT, &[A::PvArea(1)])
                .call(2, PV_SCHED_IPA_INIT, &[A::RamEdge(3)])
                .call(2, PV_SCHED_IPA_INIT, &[A::NearMax(63)])
                .call(0, PV_SCHED_IPA_RELEASE, &[])
                .call(0, PV_SCHED_KICK_CPU, &[A::Vcpu(1)])
                .call(0, PV_SCHED_KICK_CPU, &[A::Vcpu(0)])
                .call(0, PV_SCHED_KICK_CPU, &[A::Vcpu(200)])
                .call(0, PV_SCHED_KICK_CPU, &[A::High(1)]);
        }
        Variant::Anolis => {
            use anolis::*;
            seed.call(0, PV_LOCK_FEATURES, &[A::Fid(PV_QSPINLOCK_KICK_CPU)])
                .call(0, PV_QSPINLOCK_FEATURES, &[A::Fid(PV_LOCK_PREEMPTED)])
                .call(
                    0,
                    PV_QSPINLOCK_FEATURES,
                    &[A::Fid(seed_v2::PV_LOCK_FEATURES)],
                )
                .call(0, PV_LOCK_PREEMPTED, &[A::RamRecord(0x300)])
                .call(1, PV_LOCK_PREEMPTED, &[A::RamRecord(0x301)])
                .call(1, PV_LOCK_PREEMPTED, &[A::PvArea(0)])
                .call(1, PV_LOCK_PREEMPTED, &[A::Raw(0x40)])
                .call(0, PV_QSPINLOCK_KICK_CPU, &[A::Vcpu(2)])
                .call(0, PV_QSPINLOCK_KICK_CPU, &[A::Raw(1 << 16)]);
        }
    }
    use directed_yield::{PV_SCHED_KICK_LEND, PV_SCHED_YIELD_TO};
    seed.call(0, arch::SMCCC_ARCH_FEATURES, &[A::Fid(PV_SCHED_YIELD_TO)])
        .call(0, PV_SCHED_YIELD_TO, &[A::Vcpu(1)])
        .call(1, PV_SCHED_YIELD_TO, &[A::Vcpu(1)])
        .call(1, PV_SCHED_YIELD_TO, &[A::Vcpu(9)])
        .call(1, PV_SCHED_YIELD_TO, &[A::Raw(1 << 40)])
        .call(0, arch::SMCCC_ARCH_FEATURES, &[A::Fid(PV_SCHED_KICK_LEND)])
        .call(0, PV_SCHED_KICK_LEND, &[A::Vcpu(1)])
        .call(1, PV_SCHED_KICK_LEND, &[A::Vcpu(1)])
        .call(1, PV_SCHED_KICK_LEND, &[A::Raw(1 << 40)]);
}

fn time_and_control_calls(seed: &mut SmcccSeed) {
    use pvtime::*;
    seed.call(0, arch::SMCCC_ARCH_FEATURES, &[A::Fid(PV_TIME_FEATURES)])
        .call(0, PV_TIME_FEATURES, &[A::Fid(PV_TIME_ST)])
        .call(0, PV_TIME_FEATURES, &[A::Fid(kvm::PTP)])
        .call(2, PV_TIME_ST, &[])
        .call(
            0,
            control::PVLOCK_SET_WFX_POLICY,
            &[A::Small(0), A::Vcpu(1), A::Small(1)],
        )
        .call(
            0,
            control::PVLOCK_SET_WFX_POLICY,
            &[A::Small(1), A::NearMax(0), A::Small(2)],
        )
        .call(
            0,
            control::PVLOCK_SET_WFX_POLICY,
            &[A::Small(2), A::Vcpu(7), A::Small(0)],
        )
        .call(
            0,
            control::PVLOCK_SET_WFX_POLICY,
            &[A::Small(2), A::Vcpu(8), A::Small(0)],
        )
        .call(
            0,
            control::PVLOCK_SET_WFX_POLICY,
            &[A::Small(3), A::Small(0), A::Small(0)],
        )
        .call(
            0,
            control::PVLOCK_SET_WFX_POLICY,
            &[A::Small(0), A::Small(0), A::Small(3)],
        )
        .call(
            0,
            control::PVLOCK_SET_WFX_POLICY,
            &[A::Raw(1 << 16), A::Small(0), A::Small(0)],
        );
}

fn smccc_seeds() -> Vec<Seed> {
    use smccc::{SERVICE_CONTROL, SERVICE_PTP, SERVICE_PV_TIME, SERVICE_WALL_CLOCK};
    let everything = SERVICE_PV_TIME | SERVICE_CONTROL | SERVICE_WALL_CLOCK;
    // The services byte's bits 2:0 for each variant (smccc::VARIANT_CHOICES).
    let variant_bits = |variant: Variant| {
        smccc::VARIANT_CHOICES
            .iter()
            .position(|&choice| choice == Some(variant))
            .expect("every variant can be chosen") as u8
    };
    let mut seeds = Vec::new();
    let names = [
        (Variant::SeedV2, "seed-v2-pv-time-control"),
        (Variant::SeedV3, "seed-v3-pv-time-control"),
        (Variant::OpenEuler, "openeuler-pv-time-control"),
        (Variant::Anolis, "anolis-pv-time-control"),
    ];
    for (variant, name) in names {
        let mut seed = SmcccSeed::new(variant_bits(variant) | everything, 0, 4);
        standard_calls(&mut seed);
        lock_calls(&mut seed, variant);
        time_and_control_calls(&mut seed);
        seed.every_named_id();
        seeds.push((name, seed.finish()));
    }
    let mut seed = SmcccSeed::new(SERVICE_PTP | SERVICE_WALL_CLOCK, 0, 1);
    standard_calls(&mut seed);
    time_and_control_calls(&mut seed);
    seeds.push(("no-pv-lock-ptp-1-vcpu", seed.every_named_id().finish()));

    let mut seed = SmcccSeed::new(SERVICE_PTP, 0b111, 64);
    standard_calls(&mut seed);
    seeds.push((
        "ptp-without-clock-vulnerable-64-vcpus",
        seed.every_named_id().finish(),
    ));

    // KVM_PTP with seed-v3 must be refused; the harness then carries on
    // without PTP.
    let mut seed = SmcccSeed::new(variant_bits(Variant::SeedV3) | SERVICE_PTP, 0, 2);
    lock_calls(&mut seed, Variant::SeedV3);
    seeds.push(("seed-v3-with-ptp-refused", seed.finish()));
    seeds
}

// ---- exits ----------------------------------------------------------------

/// Writes an exit-decoder harness input.
#[derive(Default)]
struct ExitsSeed(Vec<u8>);

impl ExitsSeed {
    fn exit(&mut self, vector: u64, esr: u64) -> &mut Self {
        self.0.push(exits::Op::Exit as u8);
        if (8..16).contains(&vector) {
            self.0.push((vector - 8) as u8);
        } else {
            self.0.push(exits::VECTOR_RAW);
            self.0.extend(vector.to_le_bytes());
        }
        self.0.push(exits::RAW_SYNDROME);
        self.0.extend(esr.to_le_bytes());
        self
    }

    /// A trapped access at `ipa` with `esr`; `regs_seed` fills the
    /// registers, `pstate` is the guest's PSTATE.
    fn mmio(&mut self, esr: u64, ipa: u64, pstate: u64, loaded: u64) -> &mut Self {
        let far = 0xffff_8000_1000_0000 | (ipa & 0xfff);
        let hpfar = (ipa >> 12) << 4;
        self.0.extend([exits::Op::Mmio as u8, exits::RAW_SYNDROME]);
        for word in [esr, far, hpfar, 0x5eed ^ ipa, pstate, loaded] {
            self.0.extend(word.to_le_bytes());
        }
        self
    }

    /// A syndrome that does not decode, then the raw access the register
    /// helpers get instead.
    fn raw_access(
        &mut self,
        esr: u64,
        size: u8,
        register: u8,
        flags: u8,
        len: u8,
        pstate: u64,
    ) -> &mut Self {
        self.0.extend([exits::Op::Mmio as u8, exits::RAW_SYNDROME]);
        for word in [esr, 0x18, 0x0900_0000 >> 8, 0x1234, pstate, u64::MAX] {
            self.0.extend(word.to_le_bytes());
        }
        self.0.extend(0x0900_0018_u64.to_le_bytes());
        self.0.extend([size, register, flags, len]);
        self
    }

    fn sysreg(&mut self, iss: u32, value: u64, crm: u8, op2: u8, hardware: u64) -> &mut Self {
        self.0.push(exits::Op::Sysreg as u8);
        self.0.extend(iss.to_le_bytes());
        self.0.extend(value.to_le_bytes());
        self.0.extend([crm, op2]);
        self.0.extend(hardware.to_le_bytes());
        self
    }

    fn finish(&mut self) -> Vec<u8> {
        core::mem::take(&mut self.0)
    }
}

/// An ISS for `MSR/MRS S<op0>_<op1>_C<crn>_C<crm>_<op2>, x<rt>`.
const fn sysreg_iss(op0: u32, op1: u32, crn: u32, crm: u32, op2: u32, rt: u32, write: bool) -> u32 {
    op0 << 20 | op2 << 17 | op1 << 14 | crn << 10 | rt << 5 | crm << 1 | !write as u32
}

fn exits_seeds() -> Vec<Seed> {
    const SYNC: u64 = 8;
    const WFX: u64 = 0x07e0_0000;
    const RV: u64 = 1 << 2;
    let mut decoder = ExitsSeed::default();
    decoder
        .exit(SYNC, 0x5a00_0000)
        .exit(SYNC, 0x5a00_0001)
        .exit(SYNC, 0x5e00_1234)
        .exit(SYNC, 0x0600_0000)
        .exit(SYNC, WFX | 1)
        .exit(SYNC, WFX | 2 | RV | 30 << 5)
        .exit(SYNC, WFX | 3 | RV | 31 << 5)
        .exit(SYNC, WFX | 3)
        .exit(SYNC, 0x9200_0046)
        .exit(SYNC, 0x8200_0006)
        .exit(SYNC, 0x6200_0000)
        .exit(SYNC, 0x1e00_0000)
        .exit(SYNC, 0x6600_0000)
        .exit(SYNC, 0x5600_0000)
        .exit(SYNC, 0x3f << 26)
        .exit(
            SYNC,
            0x9600_0000 | 1 << 24 | 3 << 22 | 1 << 16 | 1 << 6 | 0b111,
        )
        .exit(SYNC, (0x21 << 26) | 1 << 25 | 1 << 6 | 0b1111)
        .exit(SYNC, 0x0200_0000)
        .exit(9, 0)
        .exit(10, 0)
        .exit(11, 0)
        .exit(13, 0x5a00_0000)
        .exit(12, 0x5a00_0000)
        .exit(0, 0x5a00_0000)
        .exit(200, 0x5a00_0000);

    const UART_FR: u64 = 0x0900_0018;
    const UART_DR: u64 = 0x0900_0000;
    const AARCH64_EL1H: u64 = 0x3c5;
    const BTYPE_SS: u64 = 0b11 << 10 | 1 << 21;
    // AArch32 T32 inside an IT block: ITSTATE 0b0001_1011, IT[1:0] in
    // bits 26:25 and IT[7:2] in bits 15:10; and A32.
    const T32_IT: u64 = 0x10 | 1 << 5 | 0b11 << 25 | 0b00_0110 << 10;
    const A32: u64 = 0x10;
    let mut mmio = ExitsSeed::default();
    mmio.mmio(
        0x9381_0007,
        UART_FR,
        AARCH64_EL1H | BTYPE_SS,
        0xdead_beef_0000_0090,
    )
    .mmio(
        0x93c0_8007,
        0x0800_0008,
        AARCH64_EL1H,
        0x8000_0000_0000_0001,
    )
    .mmio(0x9302_0047, UART_DR, AARCH64_EL1H, 0)
    .mmio(0x9363_8007, UART_DR, AARCH64_EL1H, 0xffff_8001)
    .mmio(0x9363_0007, UART_DR, T32_IT, 0x8001)
    .mmio(0x9324_0007, UART_DR, A32, 0x80)
    .mmio(0x93c0_8007, 0xdead, AARCH64_EL1H, 1)
    .mmio(0x9381_0007 & !(1 << 25), UART_FR, T32_IT, 0)
    .mmio(0x93c0_8007, 0x080a_fff8, AARCH64_EL1H, 0)
    .mmio(0x93c0_8007, 0x0900_0ffc, AARCH64_EL1H, 0)
    // A permission fault, a stage-1 walk, FAR not valid, a cache
    // maintenance instruction, no instruction syndrome.
    .mmio(0x9381_000f, UART_FR, AARCH64_EL1H, 0)
    .mmio(0x9381_0087, UART_FR, AARCH64_EL1H, 0)
    .mmio(0x9381_0407, UART_FR, AARCH64_EL1H, 0)
    .mmio(0x9381_0107, UART_FR, AARCH64_EL1H, 0)
    .mmio(0x9200_0007, UART_FR, AARCH64_EL1H, 0)
    .raw_access(0x5a00_0000, 3, 7, 0b111, 4, AARCH64_EL1H)
    .raw_access(0x5a00_0000, 0, 31, 0b011, 2, T32_IT)
    .raw_access(0x5a00_0000, 200, 40, 0b110, 255, A32);

    let mut sysreg = ExitsSeed::default();
    sysreg
        .sysreg(
            sysreg_iss(2, 0, 0, 2, 2, 1, true),
            0x8000,
            4,
            0,
            0x0000_0001_0100_2222,
        )
        .sysreg(
            sysreg_iss(2, 0, 0, 2, 2, 1, false),
            0,
            4,
            1,
            0x0000_0001_0100_0320,
        )
        .sysreg(sysreg_iss(2, 0, 1, 0, 4, 0, true), 0, 4, 4, u64::MAX)
        .sysreg(sysreg_iss(2, 0, 1, 1, 4, 0, false), 0, 4, 5, u64::MAX)
        .sysreg(
            sysreg_iss(2, 0, 1, 0, 4, 0, true),
            1,
            5,
            0,
            0x0000_0001_f010_5f09,
        )
        .sysreg(sysreg_iss(2, 0, 1, 1, 4, 0, true), 0, 1, 2, u64::MAX)
        .sysreg(sysreg_iss(2, 0, 1, 0, 4, 0, false), 0, 6, 0, 0x1234_5678)
        .sysreg(sysreg_iss(2, 0, 1, 3, 4, 2, false), 0, 0, 0, 0)
        .sysreg(sysreg_iss(2, 0, 0, 15, 7, 2, true), u64::MAX, 0, 0, 0)
        .sysreg(sysreg_iss(3, 3, 9, 12, 0, 2, false), 0, 0, 0, 0)
        .sysreg(sysreg_iss(3, 3, 14, 15, 7, 2, true), 5, 0, 0, 0)
        .sysreg(sysreg_iss(3, 0, 9, 14, 1, 2, true), 5, 0, 0, 0)
        .sysreg(0x623a_3016 & 0x1ff_ffff, 1, 0, 0, 0)
        .sysreg(sysreg_iss(3, 0, 12, 11, 6, 2, true), 1, 0, 0, 0)
        .sysreg(sysreg_iss(3, 0, 12, 11, 7, 2, true), 1, 0, 0, 0)
        .sysreg(sysreg_iss(3, 0, 12, 11, 5, 2, false), 1, 0, 0, 0)
        .sysreg(sysreg_iss(3, 0, 0, 4, 0, 1, false), 0, 0, 0, 0)
        .sysreg(sysreg_iss(3, 0, 1, 0, 0, 0, true), 0, 0, 0, 0)
        .sysreg(u32::MAX, u64::MAX, 255, 255, u64::MAX);
    vec![
        ("decoder-syndromes", decoder.finish()),
        ("mmio-accesses", mmio.finish()),
        ("sysreg-accesses", sysreg.finish()),
    ]
}

// ---- PL011 ----------------------------------------------------------------

/// Writes a PL011 harness input.
struct Pl011Seed(Vec<u8>);

impl Pl011Seed {
    fn new(named: bool) -> Self {
        Self(vec![u8::from(named)])
    }

    /// The offset byte of register `offset` (one of `pl011::REGISTERS`).
    fn register(offset: u64) -> u8 {
        let index = pl011::REGISTERS
            .iter()
            .position(|&r| r == offset)
            .expect("a PL011 register") as u8;
        pl011::offset_byte(pl011::OffsetKind::Register, index)
    }

    /// The size byte of `size`.
    fn size(size: u8) -> u8 {
        pl011::SIZES
            .iter()
            .position(|&s| s == size)
            .map_or(size, |at| at as u8)
    }

    fn read(&mut self, offset: u64, size: u8) -> &mut Self {
        self.0.extend([
            pl011::Op::Read as u8,
            Self::register(offset),
            Self::size(size),
        ]);
        self
    }

    fn write(&mut self, offset: u64, size: u8, value: u64) -> &mut Self {
        self.0.extend([
            pl011::Op::Write as u8,
            Self::register(offset),
            Self::size(size),
        ]);
        self.0.extend(value.to_le_bytes());
        self
    }

    /// A read or write at any offset (raw 8-byte offset).
    fn access_anywhere(&mut self, write: bool, offset: u64, size: u8) -> &mut Self {
        let op = if write {
            pl011::Op::Write
        } else {
            pl011::Op::Read
        };
        self.0
            .extend([op as u8, pl011::offset_byte(pl011::OffsetKind::Raw, 0)]);
        self.0.extend(offset.to_le_bytes());
        self.0.push(Self::size(size));
        if write {
            self.0.extend(u64::MAX.to_le_bytes());
        }
        self
    }

    fn push(&mut self, bytes: &[u8]) -> &mut Self {
        self.0
            .extend([pl011::Op::PushBurst as u8, bytes.len() as u8]);
        self.0.extend(bytes);
        self
    }

    fn transmit(&mut self, bytes: &[u8]) -> &mut Self {
        self.0
            .extend([pl011::Op::TransmitBurst as u8, bytes.len() as u8]);
        self.0.extend(bytes);
        self
    }

    fn op(&mut self, op: pl011::Op) -> &mut Self {
        self.0.push(op as u8);
        self
    }

    fn finish(&mut self) -> Vec<u8> {
        core::mem::take(&mut self.0)
    }
}

fn pl011_seeds() -> Vec<Seed> {
    use uart_bits::*;
    let mut linux = Pl011Seed::new(true);
    for id in 0..8 {
        linux.read(uart::PERIPH_ID0 + 4 * id, 4);
    }
    linux
        .write(uart::CR, 2, 0)
        .write(uart::IMSC, 2, 0)
        .write(uart::ICR, 2, 0x7ff)
        .write(uart::IBRD, 2, 13)
        .write(uart::FBRD, 2, 1)
        .write(uart::LCR_H, 2, u64::from(LCR_H_FEN | LCR_H_WLEN_8))
        .write(uart::IFLS, 2, 0x12)
        .write(uart::IMSC, 2, u64::from(INT_RX | INT_RT | INT_TX))
        .write(uart::CR, 2, u64::from(CR_UARTEN | CR_TXE | CR_RXE))
        .read(uart::FR, 2)
        .transmit(b"hello\r\nworld\n\rprogress\r50%\r\n")
        .write(uart::ICR, 2, u64::from(INT_TX))
        .push(b"0123456789abcdefXYZ")
        .read(uart::MIS, 2)
        .read(uart::DR, 2)
        .read(uart::RSR_ECR, 2)
        .read(uart::DR, 2)
        .write(uart::RSR_ECR, 2, 0)
        .write(uart::IFLS, 2, 0b100 << 3)
        .write(uart::IFLS, 2, 0b000 << 3)
        .write(uart::IFLS, 2, 0b111 << 3);
    for _ in 0..16 {
        linux.read(uart::DR, 4);
    }
    linux
        .write(uart::CR, 4, u64::from(CR_UARTEN | CR_TXE | CR_RXE | CR_LBE))
        .transmit(b"loop")
        .push(b"ignored")
        .read(uart::DR, 1)
        .write(uart::CR, 4, u64::from(CR_UARTEN | CR_TXE | CR_RXE))
        .write(uart::DMACR, 4, 7)
        .transmit(b"partial line")
        .op(pl011::Op::Flush)
        .op(pl011::Op::Reset)
        .read(uart::CR, 4);

    let mut odd = Pl011Seed::new(false);
    odd.read(uart::DR, 8)
        .read(uart::FR, 3)
        .write(uart::DR, 16, 0x41)
        .read(uart::ICR, 4)
        .write(uart::FR, 4, 0)
        .write(uart::RIS, 4, u64::MAX)
        .write(uart::PERIPH_ID0, 1, 0)
        .access_anywhere(false, 0x100, 4)
        .access_anywhere(true, 0x100, 4)
        .access_anywhere(false, 0x19, 1)
        .access_anywhere(true, 0x1a, 2)
        .access_anywhere(false, 0x1000, 4)
        .access_anywhere(false, u64::MAX - 2, 4)
        .access_anywhere(true, 0xffd, 1)
        // Character mode: the second byte overruns.
        .push(b"ab")
        .read(uart::RSR_ECR, 4)
        .read(uart::DR, 4)
        .op(pl011::Op::Check);

    let mut long = Pl011Seed::new(true);
    long.write(uart::CR, 4, 0);
    let line = [b'x'; 255];
    long.transmit(&line).transmit(&line).transmit(b"\r\r\n");
    vec![
        ("linux-driver", linux.finish()),
        ("odd-accesses", odd.finish()),
        ("long-line", long.finish()),
    ]
}

// ---- vGIC -----------------------------------------------------------------

/// Writes a vGIC harness input.
struct VgicSeed(Vec<u8>);

impl VgicSeed {
    /// A vGIC of `vcpus` vCPUs (1..=64) and `spis` SPIs (a valid count).
    fn new(vcpus: u8, spis: u32, options: &[u8]) -> Self {
        let spi_byte = if spis == crate::devices::vgic::MAX_SPIS {
            0xff
        } else {
            (spis / 32) as u8
        };
        let mut bytes = vec![0x80 | (vcpus - 1), spi_byte];
        bytes.extend(options);
        Self(bytes)
    }

    fn op(&mut self, op: vgic::Op) -> &mut Self {
        self.0.push(op as u8);
        self
    }

    /// The offset bytes of distributor offset `offset`: a block and an
    /// index when it is a register's, else the raw offset.
    fn dist_offset(&mut self, offset: u64) {
        let block = vgic::DIST_BLOCKS.iter().position(|&(base, stride)| {
            offset >= base
                && (offset - base).is_multiple_of(stride)
                && (offset - base) / stride < 256
        });
        match block {
            Some(block) => {
                let (base, stride) = vgic::DIST_BLOCKS[block];
                let byte = vgic::offset_byte(vgic::OffsetKind::Register, block as u8);
                self.0.extend([byte, ((offset - base) / stride) as u8]);
            }
            None => {
                self.0.push(vgic::offset_byte(vgic::OffsetKind::Raw, 0));
                self.0.extend(offset.to_le_bytes());
            }
        }
    }

    /// The offset bytes of `register` in vCPU `vcpu`'s redistributor.
    fn redist_offset(&mut self, vcpu: u8, register: u64) {
        self.0.push(vcpu);
        match vgic::REDIST_REGISTERS.iter().position(|&r| r == register) {
            Some(index) => self
                .0
                .push(vgic::offset_byte(vgic::OffsetKind::Register, index as u8)),
            None => {
                self.0.push(vgic::offset_byte(vgic::OffsetKind::InFrame, 0));
                self.0.extend((register as u32).to_le_bytes());
            }
        }
    }

    fn size(&mut self, size: u8) {
        let byte = vgic::SIZES
            .iter()
            .position(|&s| s == size)
            .map_or(size, |at| at as u8);
        self.0.push(byte);
    }

    /// A raw 8-byte value.
    fn value(&mut self, value: u64) {
        self.0.push(0);
        self.0.extend(value.to_le_bytes());
    }

    fn dist_read(&mut self, offset: u64, size: u8) -> &mut Self {
        self.op(vgic::Op::DistRead).dist_offset(offset);
        self.size(size);
        self
    }

    fn dist_write(&mut self, offset: u64, size: u8, value: u64) -> &mut Self {
        self.op(vgic::Op::DistWrite).dist_offset(offset);
        self.size(size);
        self.value(value);
        self
    }

    fn redist_read(&mut self, vcpu: u8, register: u64, size: u8) -> &mut Self {
        self.op(vgic::Op::RedistRead).redist_offset(vcpu, register);
        self.size(size);
        self
    }

    fn redist_write(&mut self, vcpu: u8, register: u64, size: u8, value: u64) -> &mut Self {
        self.op(vgic::Op::RedistWrite).redist_offset(vcpu, register);
        self.size(size);
        self.value(value);
        self
    }

    /// An SGI from `from` to the Aff0 values in `targets` of cluster
    /// `aff1` (or to everyone else with `irm`).
    fn sgi(&mut self, from: u8, intid: u8, targets: u16, aff1: u8, irm: bool) -> &mut Self {
        self.op(vgic::Op::SendSgi)
            .0
            .extend([from, intid << 4 | u8::from(irm)]);
        self.0.extend(targets.to_le_bytes());
        self.0.extend([aff1, 0]);
        self
    }

    fn intid(&mut self, intid: u16) {
        self.0.extend(intid.to_le_bytes());
    }

    fn set_level(&mut self, intid: u16, vcpu: u8, level: bool) -> &mut Self {
        self.op(vgic::Op::SetLevel).intid(intid);
        self.0.extend([vcpu, u8::from(level)]);
        self
    }

    fn raise_edge(&mut self, intid: u16, vcpu: u8) -> &mut Self {
        self.op(vgic::Op::RaiseEdge).intid(intid);
        self.0.push(vcpu);
        self
    }

    fn fill(&mut self, vcpu: u8, count: u8) -> &mut Self {
        self.op(vgic::Op::Fill).0.extend([vcpu, count]);
        self
    }

    /// The guest ran: the filled list registers come back in `states`
    /// (one per entry, two bits each), plus one garbage list register.
    fn sync_back(&mut self, vcpu: u8, states: &[LrState], garbage: Option<u64>) -> &mut Self {
        self.op(vgic::Op::SyncBack).0.push(vcpu);
        match garbage {
            Some(value) => {
                self.0.push(1);
                self.0.extend(value.to_le_bytes());
            }
            None => self.0.push(0),
        }
        self.0.extend(states.iter().map(|s| s.bits() as u8));
        self
    }

    fn finish(&mut self) -> Vec<u8> {
        core::mem::take(&mut self.0)
    }
}

fn vgic_seeds() -> Vec<Seed> {
    use LrState::{Active, Invalid, Pending, PendingActive};
    let spi_bank = |intid: u64| (intid / 32) * 4;
    let spi_bit = |intid: u64| 1u64 << (intid % 32);

    // Linux's probe of a 4-vCPU VM, then its first interrupts.
    let mut linux = VgicSeed::new(4, 96, &[0]);
    linux
        .dist_read(GICD_PIDR2, 4)
        .dist_read(GICD_TYPER, 4)
        .dist_read(GICD_IIDR, 4)
        .dist_write(GICD_CTLR, 4, 0)
        .dist_read(GICD_CTLR, 4);
    for bank in 1..4 {
        linux
            .dist_write(GICD_IGROUPR + 4 * bank, 4, u64::from(u32::MAX))
            .dist_write(GICD_ICENABLER + 4 * bank, 4, u64::from(u32::MAX))
            .dist_write(GICD_ICACTIVER + 4 * bank, 4, u64::from(u32::MAX));
    }
    linux
        .dist_write(GICD_IPRIORITYR + 32, 4, 0xa0a0_a0a0)
        .dist_write(GICD_ICFGR + 8, 4, 0)
        .dist_write(
            GICD_CTLR,
            4,
            u64::from(GICD_CTLR::EnableGrp1::SET.value | GICD_CTLR::ARE::SET.value),
        )
        .dist_write(GICD_IROUTER + 8, 8, 1)
        .dist_write(GICD_IROUTER + 12, 4, 0)
        .dist_read(GICD_IROUTER + 8, 8);
    for vcpu in 0..4 {
        linux
            .redist_read(vcpu, GICR_TYPER, 8)
            .redist_read(vcpu, GICR_TYPER + 4, 4)
            .redist_read(vcpu, GICR_PIDR2, 4)
            .redist_write(vcpu, GICR_WAKER, 4, 0)
            .redist_read(vcpu, GICR_WAKER, 4)
            .redist_write(
                vcpu,
                SGI_FRAME_OFFSET + GICR_IGROUPR0,
                4,
                u64::from(u32::MAX),
            )
            .redist_write(vcpu, SGI_FRAME_OFFSET + GICR_ICENABLER0, 4, 0xffff_0000)
            .redist_write(vcpu, SGI_FRAME_OFFSET + GICR_ISENABLER0, 4, 0x0800_ffff)
            .redist_write(vcpu, SGI_FRAME_OFFSET + GICR_IPRIORITYR, 4, 0x8080_8080)
            .redist_write(vcpu, SGI_FRAME_OFFSET + GICR_IPRIORITYR + 0x10, 1, 0x40)
            .redist_write(vcpu, SGI_FRAME_OFFSET + GICR_ICFGR1, 4, 0);
    }
    linux
        .dist_write(GICD_ISENABLER + spi_bank(33), 4, spi_bit(33))
        .set_level(33, 0, true)
        .op(vgic::Op::TakeWakeups)
        .fill(1, 4)
        .sync_back(1, &[Active], None)
        .set_level(33, 0, false)
        .fill(1, 4)
        .sync_back(1, &[Invalid], None)
        .raise_edge(27, 0)
        .sgi(0, 1, 0b1110, 0, false)
        .sgi(2, 2, 0, 0, true)
        .fill(0, 4)
        .fill(2, 1)
        .sync_back(0, &[Active, Pending], Some(0xa0a0_0000_0000_0001 | 1 << 62))
        .sync_back(2, &[PendingActive], None)
        .fill(0, 16)
        .fill(2, 16)
        .sync_back(0, &[Invalid, Invalid], None)
        .sync_back(2, &[Invalid], None)
        .dist_write(GICD_ICFGR + 8, 4, 0b10 << 2)
        .dist_write(GICD_IROUTER + 8 * 2, 8, u64::from(u32::MAX))
        .dist_write(GICD_IROUTER + 8 * 2, 8, 1 << 31)
        .dist_write(GICD_ISENABLER + spi_bank(34), 4, spi_bit(34))
        .dist_write(GICD_ISPENDR + spi_bank(34), 4, spi_bit(34))
        .redist_write(
            3,
            GICR_WAKER,
            4,
            u64::from(GICR_WAKER::ProcessorSleep::SET.value),
        )
        .op(vgic::Op::TakeWakeups)
        .fill(3, 2)
        .dist_write(GICD_ICPENDR + spi_bank(34), 4, spi_bit(34))
        .dist_write(GICD_ISACTIVER + spi_bank(34), 4, spi_bit(34))
        .dist_write(GICD_ICACTIVER + spi_bank(34), 4, spi_bit(34))
        .sync_back(3, &[Pending, Pending], None)
        .op(vgic::Op::Inspect)
        .op(vgic::Op::Reset);

    // Accesses the model refuses, or ignores.
    let mut odd = VgicSeed::new(2, 32, &[0]);
    odd.dist_read(GICD_CTLR, 8)
        .dist_write(GICD_CTLR, 2, 3)
        .dist_write(GICD_TYPER, 4, 0)
        .dist_read(GICD_IPRIORITYR + 33, 1)
        .dist_read(GICD_IPRIORITYR + 34, 2)
        .dist_write(GICD_IROUTER + 4, 4, 1)
        .dist_read(GICD_IROUTER + 2, 2)
        .dist_read(GICD_SGIR, 4)
        .dist_read(GICD_IGROUPR, 4)
        .dist_write(GICD_ITARGETSR + 33, 1, 1)
        .dist_read(0x1_0000, 4)
        .dist_read(u64::MAX - 3, 4)
        .dist_read(GICD_CTLR, 16)
        .dist_read(GICD_CTLR, 0)
        .redist_read(2, GICR_CTLR, 4)
        .redist_read(0, GICR_TYPER + 1, 1)
        .redist_write(0, GICR_TYPER, 8, 0)
        .redist_write(1, SGI_FRAME_OFFSET + GICR_ICFGR0, 4, 0)
        .redist_read(1, 0x0070, 4)
        .redist_read(0, SGI_FRAME_OFFSET + 0x0f00, 4)
        .set_level(3, 0, true)
        .set_level(20, 9, true)
        .raise_edge(5000, 0)
        .sgi(7, 0, 1, 0, false)
        .fill(5, 4)
        .sync_back(5, &[], Some(u64::MAX));

    // The largest VM: 64 vCPUs in four clusters and every SPI, with
    // MPIDRs from the input (the hypervisor's own numbering).
    let mut mpidrs = vec![vgic::OPTION_MPIDRS | vgic::OPTION_RAW_CONFIG];
    for index in 0..64u16 {
        mpidrs.extend(
            crate::guest::layout::vcpu_mpidr(index)
                .value()
                .to_le_bytes(),
        );
    }
    mpidrs.extend(65u16.to_le_bytes());
    mpidrs.extend(100u32.to_le_bytes());
    let mut big = VgicSeed::new(64, crate::devices::vgic::MAX_SPIS, &mpidrs);
    big.dist_write(
        GICD_CTLR,
        4,
        u64::from(GICD_CTLR::EnableGrp0::SET.value | GICD_CTLR::EnableGrp1::SET.value),
    )
    .sgi(0, 3, 0xffff, 3, false)
    .sgi(63, 4, 0, 0, true)
    .dist_write(
        GICD_IROUTER + 8 * 987,
        8,
        Mpidr::from_affinity(0, 0, 3, 15).value(),
    )
    .dist_write(GICD_ISENABLER + spi_bank(1019), 4, u64::from(u32::MAX))
    .raise_edge(1019, 0)
    .fill(63, 16)
    .sync_back(63, &[Active; 3], None)
    .redist_write(63, SGI_FRAME_OFFSET + GICR_ICPENDR0, 4, u64::from(u32::MAX))
    .dist_read(GICD_TYPER, 4);

    // Duplicate MPIDRs must be refused; the harness then uses its own.
    let mut duplicates = vec![vgic::OPTION_MPIDRS];
    for mpidr in [0x100u64, 0x1_0000_0100, 0x100] {
        duplicates.extend(mpidr.to_le_bytes());
    }
    let mut duplicate = VgicSeed::new(3, 0, &duplicates);
    duplicate.redist_read(2, GICR_TYPER, 8).op(vgic::Op::Reset);

    vec![
        ("linux-probe-and-interrupts", linux.finish()),
        ("refused-and-ignored-accesses", odd.finish()),
        ("64-vcpus-every-spi", big.finish()),
        ("duplicate-mpidrs", duplicate.finish()),
    ]
}

// ---- ACPI -----------------------------------------------------------------

/// A table of the QEMU dumps in `platform/tests/fixtures/acpi/<machine>/`
/// (see its PROVENANCE.md).
macro_rules! acpi_fixture {
    ($machine:literal, $table:literal) => {
        include_bytes!(concat!(
            "../../../platform/tests/fixtures/acpi/",
            $machine,
            "/",
            $table,
            ".bin"
        ))
        .as_slice()
    };
}

/// QEMU 7.2 `virt`, 4 CPUs: the tables `platform::acpi` reads, then ones
/// it ignores (all but the 5 KiB DSDT, which would not leave the
/// mutations room).
const QEMU_4CPU: [&[u8]; 4] = [
    acpi_fixture!("qemu-virt-4cpu", "APIC"),
    acpi_fixture!("qemu-virt-4cpu", "FACP"),
    acpi_fixture!("qemu-virt-4cpu", "GTDT"),
    acpi_fixture!("qemu-virt-4cpu", "SPCR"),
];
const QEMU_4CPU_UNREAD: [&[u8]; 4] = [
    acpi_fixture!("qemu-virt-4cpu", "DBG2"),
    acpi_fixture!("qemu-virt-4cpu", "IORT"),
    acpi_fixture!("qemu-virt-4cpu", "MCFG"),
    acpi_fixture!("qemu-virt-4cpu", "PPTT"),
];
/// QEMU 7.2 `virt`, 8 CPUs in two NUMA nodes.
const QEMU_8CPU_NUMA: [&[u8]; 5] = [
    acpi_fixture!("qemu-virt-8cpu-numa", "APIC"),
    acpi_fixture!("qemu-virt-8cpu-numa", "FACP"),
    acpi_fixture!("qemu-virt-8cpu-numa", "GTDT"),
    acpi_fixture!("qemu-virt-8cpu-numa", "SPCR"),
    acpi_fixture!("qemu-virt-8cpu-numa", "SRAT"),
];

/// QEMU's `-m 1G`.
const QEMU_RAM: (u64, u64) = (0x4000_0000, 0x4000_0000);

/// Writes an ACPI harness input.
struct AcpiSeed(Vec<u8>);

impl AcpiSeed {
    /// The first chunk: `ram` and `reserved` as (base, size).
    fn new(ram: &[(u64, u64)], reserved: &[(u64, u64)]) -> Self {
        assert!(ram.len() <= acpi::MAX_RAM && reserved.len() <= acpi::MAX_RESERVED);
        let mut bytes = Vec::new();
        for list in [ram, reserved] {
            bytes.push(list.len() as u8);
            for (base, size) in list {
                bytes.extend(base.to_le_bytes());
                bytes.extend(size.to_le_bytes());
            }
        }
        assert!(!bytes.windows(4).any(|w| w == acpi::SEPARATOR));
        Self(bytes)
    }

    fn chunk(&mut self, control: u8, bytes: &[u8]) -> &mut Self {
        self.0.extend(acpi::SEPARATOR);
        let start = self.0.len();
        self.0.push(control);
        self.0.extend(bytes);
        // The separator has no border, so only a chunk can hold one.
        assert!(
            !self.0[start..].windows(4).any(|w| w == acpi::SEPARATOR),
            "a seed chunk holds the separator"
        );
        self
    }

    /// A table whose length and checksum the harness keeps right.
    fn table(&mut self, table: &[u8]) -> &mut Self {
        self.chunk(acpi::FIX_LENGTH | acpi::FIX_CHECKSUM, table)
    }

    fn tables(&mut self, tables: &[&[u8]]) -> &mut Self {
        for table in tables {
            self.table(table);
        }
        self
    }

    fn vm_description(&mut self, dtb: &[u8]) -> &mut Self {
        self.chunk(acpi::VM_DESCRIPTION, dtb)
    }

    fn finish(&mut self) -> Vec<u8> {
        core::mem::take(&mut self.0)
    }
}

/// Little-endian fields of a table or structure.
#[derive(Default)]
struct Le(Vec<u8>);

impl Le {
    fn u8(mut self, value: u8) -> Self {
        self.0.push(value);
        self
    }

    fn u16(mut self, value: u16) -> Self {
        self.0.extend(value.to_le_bytes());
        self
    }

    fn u32(mut self, value: u32) -> Self {
        self.0.extend(value.to_le_bytes());
        self
    }

    fn u64(mut self, value: u64) -> Self {
        self.0.extend(value.to_le_bytes());
        self
    }

    /// Zeros up to `len` bytes in all.
    fn to(mut self, len: usize) -> Vec<u8> {
        assert!(self.0.len() <= len);
        self.0.resize(len, 0);
        self.0
    }
}

/// OEM ID and OEM Table ID of a built table.
type Oem = (&'static [u8; 6], &'static [u8; 8]);

/// A table: the System Description Table header (ACPI 6.5 §5.2.6) with
/// its `Length` and `Checksum` right, then `body`.
fn acpi_table(signature: &[u8; 4], revision: u8, (oem_id, table_id): Oem, body: &[u8]) -> Vec<u8> {
    let mut table = Le::default()
        .u32(u32::from_le_bytes(*signature))
        .u32((36 + body.len()) as u32)
        .u8(revision)
        .u8(0)
        .0;
    table.extend(oem_id);
    table.extend(table_id);
    table.extend(1u32.to_le_bytes()); // OEM Revision
    table.extend(b"FUZZ"); // Creator ID
    table.extend(1u32.to_le_bytes()); // Creator Revision
    table.extend(body);
    let sum = table.iter().fold(0u8, |sum, &b| sum.wrapping_add(b));
    table[9] = sum.wrapping_neg();
    table
}

/// MADT GICC flags (Table 5.38).
const GICC_ENABLED: u32 = 1 << 0;
const GICC_MAINTENANCE_EDGE: u32 = 1 << 2;
const GICC_ONLINE_CAPABLE: u32 = 1 << 3;

/// A GICC structure (§5.2.12.14) of `len` bytes: 76 (ACPI 5.1) or 82
/// (ACPI 6.5).
fn gicc(len: u8, uid: u32, flags: u32, mpidr: u64, gicr_base: u64) -> Vec<u8> {
    Le::default()
        .u8(0x0b)
        .u8(len)
        .u16(0)
        .u32(uid) // CPU Interface Number
        .u32(uid)
        .u32(flags)
        .u32(0) // Parking Protocol Version
        .u32(23) // Performance Interrupt GSIV
        .u64(0) // Parked Address
        .u64(0) // GICC
        .u64(0) // GICV
        .u64(0) // GICH
        .u32(25) // VGIC Maintenance interrupt
        .u64(gicr_base)
        .u64(mpidr)
        .to(usize::from(len))
}

/// A GICD structure (§5.2.12.15).
fn gicd(base: u64, version: u8) -> Vec<u8> {
    Le::default()
        .u8(0x0c)
        .u8(24)
        .u16(0)
        .u32(0)
        .u64(base)
        .u32(0)
        .u8(version)
        .to(24)
}

/// A GIC ITS structure (§5.2.12.18).
fn gic_its(id: u32, base: u64) -> Vec<u8> {
    Le::default()
        .u8(0x0f)
        .u8(20)
        .u16(0)
        .u32(id)
        .u64(base)
        .to(20)
}

fn madt(revision: u8, oem: Oem, structures: &[Vec<u8>]) -> Vec<u8> {
    let mut body = Le::default().u32(0).u32(0).0; // LIC address, Flags
    body.extend(structures.concat());
    acpi_table(b"APIC", revision, oem, &body)
}

/// GTDT timer flags (Table 5.122).
const TIMER_EDGE: u32 = 1 << 0;
const TIMER_ACTIVE_LOW: u32 = 1 << 1;
const TIMER_ALWAYS_ON: u32 = 1 << 2;

/// A GTDT (§5.2.25) with (GSIV, flags) of the secure EL1, non-secure
/// EL1, virtual EL1 and EL2 timers: revision 1, 80 bytes, or with a
/// virtual EL2 timer revision 3, 104 bytes.
fn gtdt(oem: Oem, timers: [(u32, u32); 4], virtual_el2: Option<(u32, u32)>) -> Vec<u8> {
    let mut body = Le::default().u64(u64::MAX).u32(0); // CntControlBase
    for (gsiv, flags) in timers {
        body = body.u32(gsiv).u32(flags);
    }
    match virtual_el2 {
        None => acpi_table(b"GTDT", 1, oem, &body.0),
        Some((gsiv, flags)) => {
            let body = body.u64(u64::MAX).u32(0).u32(0).u32(gsiv).u32(flags);
            acpi_table(b"GTDT", 3, oem, &body.0)
        }
    }
}

/// A hardware-reduced FADT (§5.2.9) of `len` bytes with `arm_boot_arch`.
fn fadt(oem: Oem, revision: u8, len: usize, arm_boot_arch: u16) -> Vec<u8> {
    let mut body = vec![0u8; len - 36];
    body[112 - 36..116 - 36].copy_from_slice(&(1u32 << 20).to_le_bytes());
    body[129 - 36..131 - 36].copy_from_slice(&arm_boot_arch.to_le_bytes());
    body[131 - 36] = 1; // FADT Minor Version
    acpi_table(b"FACP", revision, oem, &body)
}

/// An 80-byte revision 2 SPCR: `interface` in memory space at `base`,
/// with `gsiv` as a GIC interrupt when given.
fn spcr(oem: Oem, interface: u8, base: u64, gsiv: Option<u32>) -> Vec<u8> {
    let body = Le::default()
        .u8(interface)
        .u8(0)
        .u16(0)
        .u8(0) // Generic Address Structure: system memory,
        .u8(32) // 32-bit registers,
        .u8(0)
        .u8(3) // dword accesses
        .u64(base)
        .u8(if gsiv.is_some() { 1 << 3 } else { 0 })
        .u8(0)
        .u32(gsiv.unwrap_or(0))
        .u8(7) // 115200 baud
        .to(80 - 36);
    acpi_table(b"SPCR", 2, oem, &body)
}

/// An SRAT (§5.2.16) holding `structures`.
fn srat(oem: Oem, structures: &[Vec<u8>]) -> Vec<u8> {
    let mut body = Le::default().u32(1).u64(0).0;
    body.extend(structures.concat());
    acpi_table(b"SRAT", 3, oem, &body)
}

/// A Memory Affinity structure (§5.2.16.2); `enabled` is flag bit 0.
fn memory_affinity(domain: u32, base: u64, length: u64, enabled: bool) -> Vec<u8> {
    Le::default()
        .u8(1)
        .u8(40)
        .u32(domain)
        .u16(0)
        .u64(base)
        .u64(length)
        .u32(0)
        .u32(u32::from(enabled))
        .to(40)
}

/// A GICC Affinity structure (§5.2.16.4).
fn gicc_affinity(domain: u32, uid: u32, enabled: bool) -> Vec<u8> {
    Le::default()
        .u8(3)
        .u8(18)
        .u32(domain)
        .u32(uid)
        .u32(u32::from(enabled))
        .to(18)
}

/// A device tree with only `/chosen`: `bootargs` and `vms`.
fn chosen_tree(bootargs: &str, vms: &[VmNode]) -> Vec<u8> {
    let write = || -> Result<Vec<u8>, vm_fdt::Error> {
        let mut fdt = FdtWriter::new()?;
        let root = fdt.begin_node("")?;
        fdt.property_u32("#address-cells", 2)?;
        fdt.property_u32("#size-cells", 2)?;
        let chosen = fdt.begin_node("chosen")?;
        fdt.property_string("bootargs", bootargs)?;
        write_vm_nodes(&mut fdt, vms)?;
        fdt.end_node(chosen)?;
        fdt.end_node(root)?;
        fdt.finish()
    };
    write().expect("the seed tree is well-formed")
}

/// A many-core server's tables, built: a GICv4 whose redistributors only
/// the GICCs give, CPUs in clusters with MPIDR bit 31 (RES1) set, one
/// disabled and one online-capable GICC, two ITSes and structures the
/// parser skips; a revision 3 GTDT with every trigger and a virtual EL2
/// timer; PSCI over HVC; an SBSA UART without an interrupt; an SRAT of
/// two domains with a disabled and an empty range, a GICC Affinity for
/// the disabled CPU and a structure the parser skips.
fn server_tables() -> Vec<Vec<u8>> {
    const OEM: Oem = (b"HISI  ", b"HIP08   ");
    let mut structures = vec![
        // A GIC MSI Frame (§5.2.12.16): skipped.
        Le::default().u8(0x0d).u8(24).to(24),
        gicd(0xae00_0000, 4),
    ];
    for index in 0..8u32 {
        let flags = match index {
            6 => 0,
            7 => GICC_ONLINE_CAPABLE,
            _ => GICC_ENABLED | GICC_MAINTENANCE_EDGE,
        };
        let mpidr = 1 << 31 | u64::from(index / 4) << 16 | u64::from(index % 4) << 8;
        let gicr = 0xae10_0000 + u64::from(index) * 0x4_0000;
        structures.push(gicc(82, index, flags, mpidr, gicr));
    }
    structures.push(gic_its(0, 0xa020_0000));
    structures.push(gic_its(1, 0xc620_0000));
    let memory = [
        memory_affinity(0, 0, 0x7fe0_0000, true),
        memory_affinity(0, 0x20_0000_0000, 0x10_0000_0000, true),
        memory_affinity(1, 0x30_0000_0000, 0x10_0000_0000, true),
        memory_affinity(2, 0x20_0000_0000, 0x20_0000_0000, false),
        memory_affinity(3, 0x40_0000_0000, 0, true),
    ];
    let mut affinity: Vec<Vec<u8>> = memory.to_vec();
    // An x2APIC Affinity structure (§5.2.16.3): skipped.
    affinity.push(Le::default().u8(2).u8(24).to(24));
    affinity.extend((0..8).map(|uid| gicc_affinity(uid / 4, uid, uid != 5)));
    affinity.push(gicc_affinity(1, 9, true));
    vec![
        madt(6, OEM, &structures),
        gtdt(
            OEM,
            [
                (0, 0),
                (30, TIMER_ACTIVE_LOW | TIMER_ALWAYS_ON),
                (27, TIMER_ACTIVE_LOW),
                (26, TIMER_EDGE),
            ],
            Some((28, TIMER_EDGE | TIMER_ACTIVE_LOW)),
        ),
        fadt(OEM, 6, 276, 0b11),
        spcr(OEM, 0x0e, 0x9408_0000, None),
        srat(OEM, &affinity),
    ]
}

/// ACPI 5.1-era tables: a GICD whose version is not given, 76-byte
/// GICCs whose redistributors their `GICR Base Address` gives, an
/// 80-byte revision 1 GTDT, a 268-byte FADT, and an SPCR for a 16550
/// (no console).
fn acpi_5_1_tables() -> Vec<Vec<u8>> {
    const OEM: Oem = (b"ARMLTD", b"ARM-JUNO");
    let mut structures = vec![gicd(0x2c01_0000, 0)];
    for index in 0..2u32 {
        let gicr = 0x2c02_0000 + u64::from(index) * 0x2_0000;
        structures.push(gicc(76, index, GICC_ENABLED, u64::from(index) << 8, gicr));
    }
    vec![
        madt(3, OEM, &structures),
        gtdt(OEM, [(29, 0), (30, 0), (27, 0), (26, 0)], None),
        fadt(OEM, 5, 268, 0b01),
        spcr(OEM, 0x00, 0x7ff8_0000, Some(115)),
    ]
}

fn acpi_seeds() -> Vec<Seed> {
    let mut qemu_4cpu = AcpiSeed::new(&[QEMU_RAM], &[]);
    qemu_4cpu
        .tables(&QEMU_4CPU)
        .tables(&QEMU_4CPU_UNREAD)
        .vm_description(&chosen_tree("console=ttyAMA0", &good_vms()));

    // UEFI's map lists RAM in pieces: out of order, touching, nested,
    // empty.
    let mut qemu_8cpu = AcpiSeed::new(
        &[
            (0x6000_0000, 0x2000_0000),
            (0x4000_0000, 0x1000_0000),
            (0x5000_0000, 0x1000_0000),
            (0x4800_0000, 0x100_0000),
            (0x1_0000_0000, 0),
        ],
        &[(0x5fe0_0000, 0x20_0000), (0x4000_0000, 0)],
    );
    let vms = [
        VmNode::minimal("vm@0", KERNELS)
            .with("vcpus", Value::U32(4))
            .with("cpu-affinity", Value::U32s(vec![4, 5, 6, 7])),
        // Only the MADT's 8 CPUs make this one wrong.
        VmNode::minimal("vm@1", KERNELS).with("cpu-affinity", Value::U32s(vec![8])),
        VmNode::minimal("vm@2", KERNELS).with("cpu-affinity", Value::U32s(vec![0, 0])),
    ];
    qemu_8cpu
        .tables(&QEMU_8CPU_NUMA)
        .vm_description(&chosen_tree("", &vms));

    let mut server = AcpiSeed::new(
        &[
            (0, 0x7fe0_0000),
            (0x20_0000_0000, 0x10_0000_0000),
            (0x30_0000_0000, 0x10_0000_0000),
        ],
        &[(0x7fe0_0000, 0x20_0000)],
    );
    for table in server_tables() {
        server.table(&table);
    }

    let mut old = AcpiSeed::new(&[(0x8000_0000, 0x8000_0000)], &[]);
    for table in acpi_5_1_tables() {
        old.table(&table);
    }

    let oem: Oem = (b"BOCHS ", b"BXPC    ");
    let gicv2 = madt(
        4,
        oem,
        &[gicd(0x0800_0000, 2), gicc(80, 0, GICC_ENABLED, 0, 0)],
    );
    let mut refused = AcpiSeed::new(&[QEMU_RAM], &[]);
    refused.table(&gicv2).tables(&QEMU_4CPU[1..]);

    // Tables as given, without the harness's fixes: a mutation breaks
    // their checksums.
    let mut as_given = AcpiSeed::new(&[QEMU_RAM], &[]);
    for table in QEMU_4CPU {
        as_given.chunk(0, table);
    }

    // Two GTDTs and two SRATs, no FADT.
    let [madt_8, _, gtdt_8, spcr_8, srat_8] = QEMU_8CPU_NUMA;
    let mut twice = AcpiSeed::new(&[QEMU_RAM], &[]);
    twice.tables(&[madt_8, gtdt_8, spcr_8, srat_8, gtdt_8, srat_8]);

    let mut wraps = AcpiSeed::new(&[QEMU_RAM, (u64::MAX - 0xfff, 0x2000)], &[]);
    wraps.tables(&QEMU_4CPU);

    let mut not_a_tree = AcpiSeed::new(&[QEMU_RAM], &[]);
    not_a_tree
        .tables(&QEMU_4CPU)
        .vm_description(b"\xd0\x0d\xfe\xed not a device tree");

    vec![
        ("qemu-4cpu-unread-tables-vms", qemu_4cpu.finish()),
        ("qemu-8cpu-numa-uefi-ram-pieces", qemu_8cpu.finish()),
        ("server-gicv4-per-cpu-redistributors", server.finish()),
        ("acpi-5.1-gic-version-unspecified", old.finish()),
        ("gicv2-refused", refused.finish()),
        ("qemu-4cpu-checksums-as-given", as_given.finish()),
        ("duplicate-and-missing-tables", twice.finish()),
        ("ram-runs-past-the-end", wraps.finish()),
        ("vm-description-not-a-tree", not_a_tree.finish()),
    ]
}
