//! One VM as the runner sees it: its configuration and layout, its vCPUs'
//! saved contexts, its services (SMCCC dispatcher, PV records, virtual
//! GIC, emulated UART, directed-yield state) and its life-cycle state.
//! This module decides what a VM's memory holds at (re)start and what its
//! vCPUs' PV records say; the [`Machine`] performs the stores.

use super::machine::{Allocations, Machine, Refusal, VcpuContext, VmRegisters};
use crate::devices::emul::ConsoleSink;
use crate::devices::emul::pl011::Pl011;
use crate::devices::vgic::VGic;
use crate::devices::vtimer;
use crate::guest::layout::{self, EmulatedDevice, GuestLayout, RAM_BASE};
use crate::guest::placement::VmPlacement;
use crate::guest::{VmError, dt};
use crate::sched::onspin::{VmSpin, WfxPolicies};
use crate::services::pv::{HostWindow, PvRegistry};
use crate::services::smccc::{CpuVulnerabilities, Dispatcher, VmServices};
use crate::trap::debug::{DebugFeatures, ID_AA64DFR0_CRM_OP2};
use crate::trap::exit::{EXIT_CLASSES, Exit};
use crate::trap::fault;
use crate::trap::mmio::MmioMap;
use crate::trap::pmu::PmuFeatures;
use crate::vcpu::VmId;
use aarch64_cpu::registers::HCR_EL2;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use boot::sync::SpinMutex as Mutex;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use platform::VmConfig;

/// SPIs each VM's virtual GIC has: enough for every emulated device's
/// interrupt, the PL011's SPI 1 up to the last virtio-mmio transport's
/// INTID 79, in whole groups of 32 as GICD_TYPER.ITLinesNumber counts
/// them: 64 (INTIDs 32..96).
const VGIC_SPIS: u32 = (pvlock_abi::virtio_mmio::LAST_INTID + 1
    - crate::devices::vgic::PRIVATE_COUNT)
    .next_multiple_of(32);
const _: () = assert!(VGIC_SPIS == 64);

/// MPIDR_EL1 bit 31 is RES1 (Arm ARM D24.2.114 "MPIDR_EL1").
const MPIDR_RES1: u64 = 1 << 31;

/// A VM's life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum VmState {
    Running = 0,
    /// Every vCPU is being stopped; the VM then powers off.
    Stopping = 1,
    /// Every vCPU is being stopped; the VM then restarts from its kernel.
    Resetting = 2,
    Off = 3,
}

impl VmState {
    fn from_u8(value: u8) -> Self {
        match value {
            0 => Self::Running,
            1 => Self::Stopping,
            2 => Self::Resetting,
            _ => Self::Off,
        }
    }
}

/// The counters behind `el2::devices::vgic::DeliveryStats`, bumped where the
/// events happen.
#[derive(Default)]
pub(super) struct VgicCounters {
    pub(super) sgis: AtomicU64,
    pub(super) timer: AtomicU64,
    pub(super) spi: AtomicU64,
    pub(super) maintenance: AtomicU64,
}

impl VgicCounters {
    pub(super) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> crate::devices::vgic::DeliveryStats {
        crate::devices::vgic::DeliveryStats {
            sgis: self.sgis.load(Ordering::Relaxed),
            timer: self.timer.load(Ordering::Relaxed),
            spi: self.spi.load(Ordering::Relaxed),
            maintenance: self.maintenance.load(Ordering::Relaxed),
        }
    }
}

/// The hypervisor's console, as the sink of every VM's emulated UART.
pub(super) struct MachineConsole<'a, M>(pub(super) &'a M);

impl<M: Machine> ConsoleSink for MachineConsole<'_, M> {
    fn emit_line(&mut self, vm_name: Option<&str>, line: &[u8]) {
        // Without allocating: a guest's output must not cost heap.
        let text = Lossy(line);
        match vm_name {
            Some(name) => self.0.console_line(format_args!("[{name}] {text}")),
            None => self.0.console_line(format_args!("{text}")),
        }
    }
}

/// Bytes shown as UTF-8, each invalid sequence as U+FFFD (as
/// `String::from_utf8_lossy` would, but without a copy).
struct Lossy<'a>(&'a [u8]);

impl core::fmt::Display for Lossy<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_str(char::REPLACEMENT_CHARACTER.encode_utf8(&mut [0; 4]))?;
            }
        }
        Ok(())
    }
}

/// A vCPU's saved context, or `None` while a pCPU runs it: the context
/// moves to the runner at load and back at put, so no two pCPUs can hold
/// the same vCPU.
pub(super) type VcpuSlot<S> = Mutex<Option<Box<VcpuContext<S>>>>;

/// One VM.
pub struct Vm<M: Machine> {
    pub id: VmId,
    pub name: String,
    pub config: VmConfig,
    pub placement: VmPlacement,
    pub layout: GuestLayout,
    /// Kept alive for as long as the VM exists; VTTBR_EL2 points into it.
    _stage2: M::Stage2,
    pub(super) registers: VmRegisters,
    pub(super) vcpus: Vec<VcpuSlot<M::Saved>>,
    /// The VM's SMCCC service table (architecture, PSCI, KVM vendor
    /// services and the PV services it has enabled).
    pub(super) dispatcher: Dispatcher,
    /// Where its vCPUs' PV-lock and stolen-time records are.
    pub(super) pv: Arc<PvRegistry>,
    /// The emulated devices' frames, which every trapped access is routed
    /// through.
    pub(super) devices: MmioMap<EmulatedDevice>,
    pub(super) console: Mutex<Pl011>,
    /// The level of the UART's interrupt line as the virtual GIC last saw
    /// it (changed only under the `console` lock).
    pub(super) uart_line: AtomicBool,
    /// The virtual GICv3 (`el2::devices::vgic`): a leaf lock, never held while
    /// taking another.
    pub(super) vgic: Mutex<VGic>,
    /// vCPUs whose list registers are out of date: something was injected
    /// for them, or their virtual CPU interface asked for maintenance. Set
    /// after the `vgic` change it announces; cleared by the vCPU's next
    /// refill.
    pub(super) irq_attention: AtomicU64,
    /// What the virtual GIC delivered (`el2::devices::vgic::DeliveryStats`).
    pub(super) vgic_stats: VgicCounters,
    /// Per vCPU, the physical counter value at which its virtual timer
    /// fires, as of its last put (`u64::MAX`: not armed): a descheduled
    /// vCPU whose timer is due has an interrupt to take, which the
    /// directed-yield decision reads without taking the vCPU's context
    /// (KVM's `kvm_timer_is_pending`).
    vtimer_due: Vec<AtomicU64>,
    exits: [AtomicU64; EXIT_CLASSES.len()],
    /// Aborts injected so far (for `el2::trap::fault::worth_logging`).
    faults: AtomicU64,
    /// Directed-yield state (`el2::sched::onspin`): a leaf lock, taken under the
    /// scheduler lock for every decision.
    pub(super) spin: Mutex<VmSpin>,
    /// WFE policy per vCPU and the WFI switch (`el2::sched::onspin::WfxPolicies`),
    /// from the VM's description; a control VM's PVLOCK_SET_WFX_POLICY
    /// changes it. Atomic per vCPU, read at every guest entry without a lock.
    pub(super) wfx: WfxPolicies,
    state: AtomicU8,
    pub(super) resets: AtomicU32,
    /// The breakpoints and watchpoints each vCPU has: the CPU's.
    pub(super) debug: DebugFeatures,
    /// The PMU each vCPU has, if the CPU has one to offer.
    pub(super) pmu: Option<PmuFeatures>,
}

/// What the hardware layer built for a VM before its services exist.
pub struct VmParts<M: Machine> {
    pub id: VmId,
    pub config: VmConfig,
    pub placement: VmPlacement,
    pub layout: GuestLayout,
    pub stage2: M::Stage2,
    pub vttbr: u64,
    /// Several VMs share the console: prefix each one's output with its
    /// name.
    pub several: bool,
    pub vulnerabilities: CpuVulnerabilities,
}

impl<M: Machine> Vm<M> {
    /// Builds the VM's services on `parts` and loads its memory.
    /// `checkpoint(what)` fails once the heap has refused an allocation
    /// (`el2::memory::heap`), naming what was being built.
    pub fn build(
        machine: &M,
        parts: VmParts<M>,
        checkpoint: &dyn Fn(&str) -> Result<(), VmError>,
    ) -> Result<Self, VmError> {
        let VmParts {
            id,
            config,
            placement,
            layout,
            stage2,
            vttbr,
            several,
            vulnerabilities,
        } = parts;
        let fail = |property: &'static str, why: String| VmError::new(&config.node, property, why);
        let services = VmServices::from_config(&config);
        let vcpu_count =
            u16::try_from(layout.vcpus).map_err(|_| fail("vcpus", "too many vCPUs".into()))?;
        let registry = PvRegistry::new(vcpu_count, services.pv, layout.pv_area)
            .map_err(|e| fail("pv-lock", alloc::format!("{e}")))?
            .backed_by(ram_window(&placement), machine.counter_frequency());
        let pv = Arc::new(registry);
        let dispatcher =
            crate::services::smccc::dispatcher_for(services, pv.clone(), vulnerabilities)
                .map_err(|e| fail("pv-lock", alloc::format!("{e}")))?;
        checkpoint("its hypercall services")?;
        let mut vgic = VGic::new(vcpu_count, VGIC_SPIS, |index| {
            layout::vcpu_mpidr(index).value()
        })
        .map_err(|e| fail("vcpus", alloc::format!("virtual GIC: {e}")))?;
        // The virtual timer's physical PPI reaches the guest through
        // hardware list register entries (`el2::devices::vtimer`).
        vgic.set_hardware_line(layout::TIMER.virt.intid())
            .map_err(|e| fail("vcpus", alloc::format!("virtual GIC: {e}")))?;
        checkpoint("its virtual GIC")?;
        let name = config.name.clone();
        let dfr0 = machine.read_id_register(ID_AA64DFR0_CRM_OP2.0, ID_AA64DFR0_CRM_OP2.1);
        let pmu = PmuFeatures::from_cpu(dfr0, machine.pmu_counters());
        let vm = Vm {
            id,
            devices: layout::device_map(layout.vcpus),
            console: Mutex::new(Pl011::new(several.then_some(name.as_str()))),
            uart_line: AtomicBool::new(false),
            vgic: Mutex::new(vgic),
            irq_attention: AtomicU64::new(0),
            vgic_stats: VgicCounters::default(),
            vtimer_due: (0..layout.vcpus)
                .map(|_| AtomicU64::new(u64::MAX))
                .collect(),
            name,
            spin: Mutex::new({
                let mut spin = VmSpin::new(vcpu_count);
                spin.set_boost(config.boost);
                spin
            }),
            wfx: WfxPolicies::from_config(&config),
            config,
            placement,
            layout,
            _stage2: stage2,
            registers: VmRegisters { vttbr, cntvoff: 0 },
            vcpus: (0..layout.vcpus)
                .map(|_| Mutex::new(Some(Box::default())))
                .collect(),
            dispatcher,
            pv,
            exits: [const { AtomicU64::new(0) }; EXIT_CLASSES.len()],
            faults: AtomicU64::new(0),
            state: AtomicU8::new(VmState::Running as u8),
            resets: AtomicU32::new(0),
            debug: DebugFeatures::from_dfr0(dfr0),
            pmu,
        };
        checkpoint("its vCPUs")?;
        vm.load(machine)?;
        Ok(vm)
    }

    /// How many vCPUs it has.
    pub fn vcpu_count(&self) -> u16 {
        self.vcpus.len() as u16
    }

    pub fn state(&self) -> VmState {
        VmState::from_u8(self.state.load(Ordering::Acquire))
    }

    pub(super) fn set_state(&self, state: VmState) {
        self.state.store(state as u8, Ordering::Release);
    }

    /// Moves the VM from Running to `to`; false if it was not running.
    pub(super) fn leave_running(&self, to: VmState) -> bool {
        self.state
            .compare_exchange(
                VmState::Running as u8,
                to as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    fn host_pa(&self, ipa: u64) -> u64 {
        self.placement
            .host_pa(ipa)
            .unwrap_or(self.placement.ram.base)
    }

    /// Writes the VM's initial memory: zeroes, the kernel, the initrd and
    /// the DT (with the current reset count); resets every vCPU (vCPU 0 to
    /// the kernel entry). Only called while no vCPU of the VM runs.
    pub(super) fn load(&self, machine: &M) -> Result<(), VmError> {
        // At a reset this is the one allocation a guest's action causes:
        // a heap that refuses it stops this VM, not the machine.
        let txn = machine.allocations(Refusal::None);
        let dtb = dt::build(
            &self.config,
            &self.layout,
            self.resets.load(Ordering::Relaxed),
            self.pmu.is_some(),
        )?;
        txn.check()
            .map_err(|_| VmError::out_of_memory(&self.config.node, "its device tree"))?;
        drop(txn);
        let ram = self.placement.ram;
        machine.zero(ram);
        machine.copy(self.host_pa(self.layout.kernel_ipa), self.config.kernel);
        if let (Some(module), Some(slot)) = (self.config.initrd, self.layout.initrd) {
            machine.copy(self.host_pa(slot.base), module);
        }
        machine.write(self.host_pa(self.layout.dtb_ipa), &dtb);
        // The guest starts with its MMU off: its accesses go to memory, not
        // to the caches this was written through.
        machine.sync_for_guest(ram);
        for (index, slot) in self.vcpus.iter().enumerate() {
            let mut slot = slot.lock();
            let Some(ctx) = slot.as_mut() else {
                // Unreachable: every vCPU is off. Leave that one alone.
                log::error!("vm {}: vCPU {index} still loaded at reset", self.name);
                continue;
            };
            reset_context(ctx, index as u16);
            if index == 0 {
                ctx.regs = self.layout.boot_regs();
            }
            self.note_vtimer(index as u16, ctx);
        }
        Ok(())
    }

    /// Stores `value` in vCPU `index`'s PV-lock "preempted" field, if it
    /// has a record: little-endian, single-copy atomic, release-ordered
    /// against the guest's plain load (docs/abi.md §3). Nothing the guest
    /// wrote there is read.
    pub(super) fn write_preempted(&self, machine: &M, index: u16, value: u64) {
        if let Some(pa) = self.pv.lock_record_pa(index) {
            machine.store_preempted(pa, self.pv.lock_width(), value);
        }
    }

    /// The host address of the `len` bytes of the VM's RAM at `ipa`,
    /// `None` unless all of them are in its RAM.
    pub(super) fn ram_host_address(&self, ipa: u64, len: u64) -> Option<u64> {
        ram_window(&self.placement).host_address(ipa, len)
    }

    /// The `lock_count` hint in vCPU `index`'s PV-lock record (0 without
    /// one); untrusted, `el2::sched::onspin` sanitises it.
    pub(super) fn lock_count_hint(&self, machine: &M, index: u16) -> u32 {
        self.pv
            .lock_record_pa(index)
            .map_or(0, |pa| machine.lock_count_hint(pa, self.pv.lock_width()))
    }

    /// Stores vCPU `index`'s stolen time (ns) in its PV-time record, if it
    /// has one (docs/abi.md §4: `le64 stolen_time` at offset 8).
    pub(super) fn write_stolen_time(&self, machine: &M, index: u16, steal_ticks: u64) {
        if let Some((pa, ns)) = self.pv.stolen_time_record(index, steal_ticks) {
            machine.store_stolen_time(pa, ns);
        }
    }

    /// Records when the saved virtual timer of vCPU `index` raises its
    /// line (`el2::devices::vtimer::rises_at`).
    pub(super) fn note_vtimer(&self, index: u16, ctx: &VcpuContext<M::Saved>) {
        let due = vtimer::rises_at(ctx.vtimer.ctl, ctx.vtimer.cval, self.registers.cntvoff)
            .unwrap_or(u64::MAX);
        if let Some(slot) = self.vtimer_due.get(usize::from(index)) {
            slot.store(due, Ordering::Relaxed);
        }
    }

    /// Whether vCPU `index`, off its pCPU, has its virtual timer due.
    pub(super) fn vtimer_is_due(&self, index: u16, now: u64) -> bool {
        self.vtimer_due
            .get(usize::from(index))
            .is_some_and(|due| due.load(Ordering::Relaxed) <= now)
    }

    /// Counts an injected abort; whether to log it, and its number.
    pub(super) fn fault_to_log(&self) -> Option<u64> {
        let nth = self.faults.fetch_add(1, Ordering::Relaxed) + 1;
        fault::worth_logging(nth).then_some(nth)
    }

    pub(super) fn count_exit(&self, exit: &Exit) {
        self.exits[exit.class_index()].fetch_add(1, Ordering::Relaxed);
    }

    /// How many exits of each class of `EXIT_CLASSES` it made: those the
    /// runner saw, and the hypercalls the exit fast path answered (each
    /// counted once, in its caller's row of the call counters).
    pub(super) fn exit_counts(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        let hvc = Exit::Hvc { imm: 0 }.class_index();
        let fast = self.dispatcher.counters().per_vcpu_total();
        EXIT_CLASSES
            .iter()
            .zip(&self.exits)
            .enumerate()
            .map(move |(class, (name, count))| {
                let fast = if class == hvc { fast } else { 0 };
                (*name, count.load(Ordering::Relaxed) + fast)
            })
    }
}

/// `ctx` as a vCPU is after reset, before CPU_ON gives it an entry point
/// (the hardware layer's `Saved::default()` is its EL1 reset state).
pub(super) fn reset_context<S: Default>(ctx: &mut VcpuContext<S>, index: u16) {
    *ctx = VcpuContext::default();
    ctx.vmpidr = layout::vcpu_mpidr(index).value() | MPIDR_RES1;
}

/// HCR_EL2 while a guest runs: stage 2 on, EL1 is AArch64, physical
/// interrupts to EL2, guest SMC and WFI trapped, ID registers trapped,
/// TLB and cache maintenance broadcast inner-shareable (vCPUs migrate
/// between pCPUs). Arm ARM D24.2.48 "HCR_EL2".
pub fn guest_hcr() -> u64 {
    (HCR_EL2::VM::Enable
        + HCR_EL2::SWIO::SET
        + HCR_EL2::RW::EL1IsAarch64
        + HCR_EL2::IMO::EnableVirtualIRQ
        + HCR_EL2::FMO::EnableVirtualFIQ
        + HCR_EL2::AMO::SET
        + HCR_EL2::TSC::EnableTrapEl1SmcToEl2
        + HCR_EL2::TWI::SET
        // ID registers: answered with el2::trap::sysreg::sanitize_id.
        + HCR_EL2::TID3::SET
        + HCR_EL2::FB::SET
        + HCR_EL2::BSU::InnerShareable)
        .value
}

/// Where a VM placed at `placement` has its RAM on the host: guest RAM
/// from IPA `RAM_BASE` is its placement's RAM block.
fn ram_window(placement: &VmPlacement) -> HostWindow {
    HostWindow {
        ipa_base: RAM_BASE,
        host: placement.ram,
    }
}
