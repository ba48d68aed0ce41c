//! VMs as the hypervisor runs them: creation from the boot DT, loading,
//! the per-pCPU run loop, trap handling and the end-of-run summary.
//!
//! Decisions are made by the portable core (placement, guest layout and
//! DT, scheduler, SMCCC/PSCI dispatch, MMIO decode, PL011 model); this
//! module applies them to hardware.
//!
//! Locking. `SCHED` guards every vCPU's scheduling and power state. Each
//! vCPU's register context has its own lock, held by the pCPU running it
//! from `vcpu_load` to `vcpu_put`. Lock order is context -> `SCHED`,
//! except that a pCPU holding `SCHED` may lock the context of a vCPU that
//! is Off; a vCPU is therefore always saved and its context released
//! *before* the scheduler is told it is off.

use super::cpu;
use super::irq::Taken;
use super::regs::{COUNT64, CPACR_EL1_RESET, SCTLR_EL1_RESET, VPIDR_EL2};
use super::stage2::{self, Stage2Tables};
use super::sync::Mutex;
use super::vcpu::{VcpuContext, enter_guest};
use super::{cache, gic, gicv, heap, irq, mmu, psci, timer};
use crate::println;
use aarch64_cpu::registers::*;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use el2::emul::ConsoleSink;
use el2::emul::pl011::Pl011;
use el2::exit::{DataAbort, EXIT_CLASSES, Exit, Syndrome, WfxKind};
use el2::fault::{self, GuestFault};
use el2::guest::layout::{self, EmulatedDevice, GuestLayout, ImageHeader};
use el2::guest::placement::{self, HostMemory, OwnedRange, VmPlacement};
use el2::guest::{VmError, dt};
use el2::layout::{MapKind, page_cover};
use el2::mmio::{MmioAccess, MmioMap};
use el2::onspin::{self, Spinner, VmSpin, WfxPolicies};
use el2::ownership::{Owner, OwnershipMap};
use el2::pv::{self, PvRegistry};
use el2::sched::{CpuSet, InitialState, PutOutcome, PutReason, Scheduler, Wakeup};
use el2::smccc::{Action, Dispatcher, PowerState, VmServices, VmView};
use el2::vcpu::{VcpuId, VmId};
use el2::vgic::{VGic, VcpuMask};
use platform::{MemRange, Mpidr, Platform, VmConfig};
use spin::Once;
use tock_registers::interfaces::{Readable, Writeable};

/// A VM's life cycle.
const VM_RUNNING: u8 = 0;
/// Every vCPU is being stopped; the VM then powers off.
const VM_STOPPING: u8 = 1;
/// Every vCPU is being stopped; the VM then restarts from its kernel.
const VM_RESETTING: u8 = 2;
const VM_OFF: u8 = 3;

/// One VM.
pub struct Vm {
    pub id: VmId,
    pub name: String,
    pub config: VmConfig,
    pub placement: VmPlacement,
    pub layout: GuestLayout,
    /// Kept alive for as long as the VM exists; VTTBR_EL2 points into it.
    _stage2: Stage2Tables,
    vttbr: u64,
    /// CNTVOFF_EL2 of every vCPU: virtual time = physical time - this.
    /// Zero (a VM's virtual counter starts where the host's is), switched
    /// per VM so that a future VM migration or pause can offset it.
    cntvoff: u64,
    vcpus: Vec<Mutex<VcpuContext>>,
    /// The VM's SMCCC service table (architecture, PSCI, KVM vendor
    /// services and the PV services it has enabled).
    dispatcher: Dispatcher,
    /// Where its vCPUs' PV-lock and stolen-time records are.
    pv: Arc<PvRegistry>,
    /// The emulated devices' frames, which every trapped access is routed
    /// through.
    devices: MmioMap<EmulatedDevice>,
    console: Mutex<Pl011>,
    /// The level of the UART's interrupt line as the virtual GIC last saw
    /// it (changed only under the `console` lock).
    uart_line: AtomicBool,
    /// The virtual GICv3 (`el2::vgic`): a leaf lock, never held while
    /// taking another.
    vgic: Mutex<VGic>,
    /// vCPUs whose list registers are out of date: something was injected
    /// for them, or their virtual CPU interface asked for maintenance. Set
    /// after the `vgic` change it announces; cleared by the vCPU's next
    /// refill ([`vgic_refresh`]).
    irq_attention: AtomicU64,
    /// What the virtual GIC delivered (`el2::vgic::DeliveryStats`).
    vgic_stats: VgicCounters,
    /// Per vCPU, the physical counter value at which its virtual timer
    /// fires, as of its last put (`u64::MAX`: not armed): a descheduled
    /// vCPU whose timer is due has an interrupt to take, which the
    /// directed-yield decision reads without taking the vCPU's context
    /// (KVM's `kvm_timer_is_pending`).
    vtimer_due: Vec<AtomicU64>,
    exits: [AtomicU64; EXIT_CLASSES.len()],
    /// Aborts injected so far (for `el2::fault::worth_logging`).
    faults: AtomicU64,
    /// Directed-yield state (`el2::onspin`): a leaf lock, taken under
    /// `SCHED` for every decision.
    spin: Mutex<VmSpin>,
    /// WFE policy per vCPU and the WFI switch (`el2::onspin::WfxPolicies`),
    /// from the VM's description; a control VM's PVLOCK_SET_WFX_POLICY
    /// changes it. A leaf lock, read at every guest entry.
    wfx: Mutex<WfxPolicies>,
    state: AtomicU8,
    resets: AtomicU32,
}

static VMS: Once<Vec<Vm>> = Once::new();
static SCHED: Once<Mutex<Scheduler>> = Once::new();
static OWNERSHIP: Once<Mutex<OwnershipMap>> = Once::new();
/// The pCPUs running the run loop (logical index -> MPIDR), for IPIs.
static PCPU_MPIDRS: Once<Vec<Mpidr>> = Once::new();
/// The time of day, when the board has an RTC (for KVM PTP).
static WALL_CLOCK: Once<el2::wallclock::WallClock> = Once::new();

/// Records the RTC reading taken at boot.
pub fn set_wall_clock(epoch_secs: u64, counter: u64, hz: u64) {
    if let Some(clock) = el2::wallclock::WallClock::new(epoch_secs, counter, hz) {
        WALL_CLOCK.call_once(|| clock);
    }
}

/// When the boot CPU next looks for console input (counter ticks).
static NEXT_INPUT_POLL: AtomicU64 = AtomicU64::new(0);

/// Set when the last VM has powered off.
static ALL_OFF: AtomicBool = AtomicBool::new(false);

/// SPIs each VM's virtual GIC has (INTIDs 32..64): room for the emulated
/// devices (the PL011 is SPI 1), the least GICD_TYPER can say.
const VGIC_SPIS: u32 = 32;

/// Default vCPU time slice.
const SLICE_MS: u64 = 4;
/// An idle pCPU looks at the scheduler at least this often even if nobody
/// sends it an IPI (a safety net, not the mechanism).
const IDLE_RECHECK_MS: u64 = 50;

fn ms_to_ticks(ms: u64) -> u64 {
    cpu::counter_frequency() * ms / 1000
}

/// The hypervisor's console, as the sink of every VM's emulated UART.
struct HypervisorConsole;

impl ConsoleSink for HypervisorConsole {
    fn emit_line(&mut self, vm_name: Option<&str>, line: &[u8]) {
        // Without allocating: a guest's output must not cost heap.
        let text = Lossy(line);
        match vm_name {
            Some(name) => println!("[{name}] {text}"),
            None => println!("{text}"),
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

/// Creates every VM the boot DT describes that can be placed and loaded;
/// reports the others (naming node and property) and leaves them out.
/// `fail_alloc` names a VM to create under fault injection
/// (`el2.fail-alloc=`, [`create_failing_each_allocation`]). Returns how
/// many VMs were created.
pub fn create_vms(
    platform: &Platform,
    hypervisor: &[OwnedRange],
    pcpus: &[(usize, Mpidr)],
    fail_alloc: Option<&str>,
) -> usize {
    let mut configs = Vec::new();
    for result in &platform.vms {
        match result {
            Ok(config) => configs.push(config),
            Err(error) => log::error!("VM not started: {error}"),
        }
    }
    if configs.is_empty() {
        return 0;
    }
    let host = HostMemory {
        ram: &platform.memory,
        reserved: &platform.reserved,
        hypervisor,
    };
    let placements = placement::place(&host, &configs);

    let mut ownership = OwnershipMap::from_platform(platform);
    for owned in hypervisor {
        let range = page_cover(owned.range);
        if let Err(e) = ownership.claim(range, Owner::Free, Owner::Hypervisor) {
            log::warn!("ownership: {} {range:x?}: {e}", owned.what);
        }
    }
    let mut online = CpuSet::default();
    for &(index, _) in pcpus {
        online.insert(index);
    }
    let mut sched = Scheduler::new(online, ms_to_ticks(SLICE_MS));
    let several = configs.len() > 1;
    let mut built = Vec::new();
    for (config, placed) in configs.iter().zip(placements) {
        let created = placed.and_then(|placement| {
            let id = VmId(u16::try_from(built.len()).unwrap_or(u16::MAX));
            if fail_alloc == Some(config.name.as_str()) {
                create_failing_each_allocation(id, config, placement, &mut ownership, several)
            } else {
                create_vm(
                    id,
                    config,
                    placement,
                    &mut ownership,
                    several,
                    &heap::transaction(),
                )
            }
        });
        let created = created.and_then(|vm| {
            // Room in the scheduler now, so registering cannot fail later.
            match sched.reserve_vm(vm.vcpus.len()) {
                Ok(()) => Ok(vm),
                Err(_) => {
                    release_ram(&mut ownership, vm.id, vm.placement.ram);
                    Err(VmError::out_of_memory(
                        &config.node,
                        "its scheduler entries",
                    ))
                }
            }
        });
        match created {
            Ok(vm) => built.push(vm),
            Err(error) => log::error!("VM not started: {error}"),
        }
    }
    // The vCPUs' clocks (run, steal) start once every VM is loaded: loading
    // (zeroing and copying hundreds of MiB) is not time a vCPU waited for a
    // pCPU, and it would show in its guest as stolen time.
    let now = cpu::counter();
    let mut vms = Vec::new();
    for vm in built {
        match register_vcpus(&mut sched, &vm, now) {
            Ok(()) => vms.push(vm),
            Err(why) => log::error!("VM {} not started: {why}", vm.config.name),
        }
    }
    for vm in &vms {
        log::info!(
            "vm {}: {} vCPUs, {} MiB at host {:#x}, kernel at IPA {:#x}, DT at IPA {:#x}",
            vm.name,
            vm.vcpus.len(),
            vm.placement.ram.size >> 20,
            vm.placement.ram.base,
            vm.layout.kernel_entry,
            vm.layout.dtb_ipa
        );
    }
    let count = vms.len();
    PCPU_MPIDRS.call_once(|| {
        let mut mpidrs = Vec::new();
        for &(index, mpidr) in pcpus {
            if mpidrs.len() <= index {
                mpidrs.resize(index + 1, Mpidr::from_raw(0));
            }
            mpidrs[index] = mpidr;
        }
        mpidrs
    });
    OWNERSHIP.call_once(|| Mutex::new(ownership));
    SCHED.call_once(|| Mutex::new(sched));
    VMS.call_once(|| vms);
    count
}

fn register_vcpus(sched: &mut Scheduler, vm: &Vm, now: u64) -> Result<(), String> {
    let id = sched.add_vm().map_err(|e| alloc::format!("{e}"))?;
    if id != vm.id {
        return Err(alloc::format!(
            "scheduler numbered the VM {} instead of {}",
            id.0,
            vm.id.0
        ));
    }
    let affinity = vm.config.cpu_affinity.as_ref().map(|cpus| {
        let mut set = CpuSet::default();
        for &c in cpus {
            set.insert(c as usize);
        }
        set
    });
    for index in 0..vm.vcpus.len() {
        let initial = if index == 0 {
            InitialState::Runnable
        } else {
            InitialState::Off
        };
        sched
            .add_vcpu(vm.id, affinity, initial, now)
            .map_err(|e| alloc::format!("{e}"))?;
    }
    Ok(())
}

/// Claims the VM's RAM and builds it inside the allocation transaction
/// `txn` (`el2::heap`): if the heap refuses any of its allocations, the VM
/// is dropped, its RAM given back, and the error says it ran out of
/// hypervisor memory and while building what.
fn create_vm(
    id: VmId,
    config: &VmConfig,
    placement: VmPlacement,
    ownership: &mut OwnershipMap,
    several: bool,
    txn: &heap::Txn,
) -> Result<Vm, VmError> {
    let ram = placement.ram;
    ownership
        .claim(ram, Owner::Free, Owner::Vm(id))
        .map_err(|e| {
            VmError::new(
                &config.node,
                "memory",
                alloc::format!("host memory {ram:x?}: {e}"),
            )
        })?;
    for module in [Some(config.kernel), config.initrd].into_iter().flatten() {
        // A module may share pages with another VM's; claim what is still free.
        let _ = ownership.claim(page_cover(module), Owner::Free, Owner::Module);
    }
    let checkpoint = |what: &str| {
        txn.check()
            .map_err(|_| VmError::out_of_memory(&config.node, what))
    };
    let result = match build_vm(id, config, placement, several, &checkpoint) {
        Ok(vm) => match checkpoint("the VM") {
            Ok(()) => return Ok(vm),
            Err(error) => Err(error),
        },
        // An allocation refused deep inside a step can surface as that
        // step's own error (a stage-2 map failure, say): the refusal is
        // the cause to report.
        Err(error) => checkpoint("the VM").and(Err(error)),
    };
    release_ram(ownership, id, ram);
    result
}

/// Gives a VM's RAM back after a failed creation step.
fn release_ram(ownership: &mut OwnershipMap, id: VmId, ram: MemRange) {
    if let Err(e) = ownership.claim(ram, Owner::Vm(id), Owner::Free) {
        log::warn!("ownership: giving back {ram:x?}: {e}");
    }
}

/// `el2.fail-alloc=`: creates the VM once per heap allocation its creation
/// makes, the n-th time with the n-th allocation refused; then again once
/// per allocation with the heap exhausted from the n-th on (every later
/// allocation refused too, so the reserve carries the rest). Every such
/// attempt must end in an out-of-memory error that gives back everything:
/// the heap as after the first attempt (which may leave the hypervisor's
/// own map grown), and the VM's RAM free again. The first attempt of the
/// second sweep in which nothing is refused creates the VM. A violation is
/// this VM's error.
fn create_failing_each_allocation(
    id: VmId,
    config: &VmConfig,
    placement: VmPlacement,
    ownership: &mut OwnershipMap,
    several: bool,
) -> Result<Vm, VmError> {
    let broken =
        |why: String| VmError::new(&config.node, "name", alloc::format!("fail-alloc: {why}"));
    let mut settled: Option<usize> = None;
    let mut failures = 0;
    for exhausted in [false, true] {
        for n in 0.. {
            let txn = if exhausted {
                heap::transaction_exhausted_at(n)
            } else {
                heap::transaction_failing_at(n)
            };
            let result = create_vm(id, config, placement, ownership, several, &txn);
            let refused = txn.failed();
            drop(txn);
            let error = match result {
                Ok(vm) if !refused => {
                    if !exhausted {
                        // The first sweep is over; the second creates it.
                        drop(vm);
                        release_ram(ownership, id, placement.ram);
                        break;
                    }
                    log::info!(
                        "fail-alloc: vm {}: {n} allocations, refused one at a time and with the heap exhausted from each: {failures} clean failures, heap back to {} bytes each time; created",
                        config.name,
                        settled.unwrap_or(0),
                    );
                    return Ok(vm);
                }
                Ok(_) => {
                    return Err(broken(alloc::format!(
                        "attempt {n}: created although allocation {n} was refused"
                    )));
                }
                Err(error) if error.is_out_of_memory() => error,
                Err(error) => return Err(broken(alloc::format!("attempt {n}: {error}"))),
            };
            log::debug!("fail-alloc: attempt {n}: {error}");
            drop(error);
            failures += 1;
            let in_use = heap::usage();
            let total = in_use.main + in_use.reserve;
            let first = *settled.get_or_insert(total);
            if first != total {
                return Err(broken(alloc::format!(
                    "attempt {n} left {total} bytes of heap in use, the first {first}"
                )));
            }
            if ownership.owner_of(placement.ram.base) != Some(Owner::Free) {
                return Err(broken(alloc::format!("attempt {n} kept the VM's RAM")));
            }
        }
    }
    Err(broken("the last sweep never completed".into()))
}

/// Maps, builds and loads one VM whose RAM the caller has claimed.
/// `checkpoint(what)` fails once the heap has refused an allocation.
fn build_vm(
    id: VmId,
    config: &VmConfig,
    placement: VmPlacement,
    several: bool,
    checkpoint: &dyn Fn(&str) -> Result<(), VmError>,
) -> Result<Vm, VmError> {
    let fail = |property: &'static str, why: String| VmError::new(&config.node, property, why);
    let ram = placement.ram;
    for module in [Some(config.kernel), config.initrd].into_iter().flatten() {
        let range = page_cover(module);
        mmu::map_more(range, MapKind::ReadOnly).map_err(|e| {
            fail(
                "kernel",
                alloc::format!("cannot map the module at {range:x?}: {e}"),
            )
        })?;
    }
    mmu::map_more(ram, MapKind::ReadWrite)
        .map_err(|e| fail("memory", alloc::format!("cannot map the VM's memory: {e}")))?;
    checkpoint("the hypervisor's map of its memory")?;
    // SAFETY: the kernel module was just mapped read-only; its size was
    // checked by placement to be non-zero and inside host RAM.
    let header = unsafe {
        host_bytes(
            config.kernel.base,
            config.kernel.size.min(ImageHeader::SIZE as u64),
        )
    };
    let layout = layout::plan(config, header)?;
    // Written now only to report errors before the VM exists; `load`
    // writes it again with the reset count.
    dt::build(config, &layout, 0)?;
    checkpoint("its device tree")?;
    let mut stage2 =
        Stage2Tables::new(u8::try_from(id.0 + 1).map_err(|_| fail("name", "too many VMs".into()))?);
    stage2
        .map_ram(layout.ram, ram.base)
        .map_err(|e| fail("memory", alloc::format!("stage 2: {e}")))?;
    checkpoint("its stage-2 tables")?;
    let vttbr = stage2.vttbr();
    let services = VmServices::from_config(config);
    let pv_config = services.pv;
    let vcpu_count =
        u16::try_from(layout.vcpus).map_err(|_| fail("vcpus", "too many vCPUs".into()))?;
    let registry = PvRegistry::new(vcpu_count, pv_config, layout.pv_area)
        .map_err(|e| fail("pv-lock", alloc::format!("{e}")))?;
    let pv = Arc::new(registry);
    let dispatcher = el2::smccc::dispatcher_for(services, pv.clone(), cpu_vulnerabilities())
        .map_err(|e| fail("pv-lock", alloc::format!("{e}")))?;
    checkpoint("its hypercall services")?;
    let vgic = VGic::new(vcpu_count, VGIC_SPIS, |index| {
        layout::vcpu_mpidr(index).value()
    })
    .map_err(|e| fail("vcpus", alloc::format!("virtual GIC: {e}")))?;
    checkpoint("its virtual GIC")?;
    let name = config.name.clone();
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
        config: config.clone(),
        placement,
        layout,
        _stage2: stage2,
        vttbr,
        cntvoff: 0,
        vcpus: (0..layout.vcpus)
            .map(|_| Mutex::new(VcpuContext::default()))
            .collect(),
        dispatcher,
        pv,
        exits: [const { AtomicU64::new(0) }; EXIT_CLASSES.len()],
        faults: AtomicU64::new(0),
        spin: Mutex::new({
            let mut spin = VmSpin::new(vcpu_count);
            spin.set_boost(config.boost);
            spin
        }),
        wfx: Mutex::new(WfxPolicies::from_config(config)),
        state: AtomicU8::new(VM_RUNNING),
        resets: AtomicU32::new(0),
    };
    checkpoint("its vCPUs")?;
    vm.load()?;
    Ok(vm)
}

/// The counters behind `el2::vgic::DeliveryStats`, bumped where the
/// events happen.
#[derive(Default)]
struct VgicCounters {
    sgis: AtomicU64,
    timer: AtomicU64,
    spi: AtomicU64,
    maintenance: AtomicU64,
}

impl VgicCounters {
    fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> el2::vgic::DeliveryStats {
        el2::vgic::DeliveryStats {
            sgis: self.sgis.load(Ordering::Relaxed),
            timer: self.timer.load(Ordering::Relaxed),
            spi: self.spi.load(Ordering::Relaxed),
            maintenance: self.maintenance.load(Ordering::Relaxed),
        }
    }
}

/// `len` bytes of host memory at `pa`.
///
/// # Safety
/// `[pa, pa + len)` must be mapped in the EL2 map and not written while the
/// slice lives.
unsafe fn host_bytes<'a>(pa: u64, len: u64) -> &'a [u8] {
    // SAFETY: per the caller.
    unsafe { core::slice::from_raw_parts(pa as *const u8, len as usize) }
}

impl Vm {
    fn host_pa(&self, ipa: u64) -> u64 {
        self.placement
            .host_pa(ipa)
            .unwrap_or(self.placement.ram.base)
    }

    /// Writes the VM's initial memory: zeroes, the kernel, the initrd and
    /// the DT (with the current reset count); resets every vCPU (vCPU 0 to
    /// the kernel entry). Only called while no vCPU of the VM runs.
    fn load(&self) -> Result<(), VmError> {
        // At a reset this is the one allocation a guest's action causes:
        // a heap that refuses it stops this VM, not the machine.
        let txn = heap::transaction();
        let dtb = dt::build(
            &self.config,
            &self.layout,
            self.resets.load(Ordering::Relaxed),
        )?;
        txn.check()
            .map_err(|_| VmError::out_of_memory(&self.config.node, "its device tree"))?;
        drop(txn);
        let ram = self.placement.ram;
        // SAFETY: the VM's RAM is mapped read-write at EL2 and owned by this
        // VM, none of whose vCPUs runs; the modules are mapped read-only and
        // lie outside every VM's RAM (placement guarantees it).
        unsafe {
            core::ptr::write_bytes(ram.base as *mut u8, 0, ram.size as usize);
            copy_to(self.host_pa(self.layout.kernel_ipa), self.config.kernel);
            if let (Some(module), Some(slot)) = (self.config.initrd, self.layout.initrd) {
                copy_to(self.host_pa(slot.base), module);
            }
            let dst = self.host_pa(self.layout.dtb_ipa) as *mut u8;
            core::ptr::copy_nonoverlapping(dtb.as_ptr(), dst, dtb.len());
        }
        // The guest starts with its MMU off: its accesses go to memory, not
        // to the caches this was written through.
        cache::clean_to_poc(ram.base, ram.size);
        cache::invalidate_icache();
        for (index, slot) in self.vcpus.iter().enumerate() {
            let mut ctx = slot.lock();
            *ctx = reset_context(index as u16);
            if index == 0 {
                ctx.regs = self.layout.boot_regs();
            }
        }
        Ok(())
    }

    fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Stores `value` in vCPU `index`'s PV-lock "preempted" field, if it
    /// has a record: little-endian, single-copy atomic, release-ordered
    /// against the guest's plain load (docs/abi.md §3). Nothing the guest
    /// wrote there is read.
    fn write_preempted(&self, index: u16, value: u64) {
        let Some(record) = self.pv.lock_record(index) else {
            return;
        };
        let Some(pa) = self.placement.host_pa(record.ipa) else {
            return;
        };
        // SAFETY: the record's IPA was checked to be 64-byte aligned and
        // inside this VM's RAM (hypervisor-placed, or validated at
        // registration), so `pa` is an aligned address in the VM's RAM,
        // which is mapped read-write at EL2 for the VM's lifetime. Only
        // atomics touch it, so concurrent guest writes are harmless.
        unsafe {
            if record.width == 8 {
                let state = &*(pa as *const pvlock_abi::pvlock::VcpuState64);
                state.store_preempted(value, Ordering::Release);
            } else {
                let state = &*(pa as *const pvlock_abi::pvlock::VcpuState32);
                state.store_preempted(value as u32, Ordering::Release);
            }
        }
    }

    /// The `lock_count` hint in vCPU `index`'s PV-lock record (0 without
    /// one); untrusted, `el2::onspin` sanitises it.
    fn lock_count_hint(&self, index: u16) -> u32 {
        let Some(record) = self.pv.lock_record(index) else {
            return 0;
        };
        let Some(pa) = self.placement.host_pa(record.ipa) else {
            return 0;
        };
        // SAFETY: as in `write_preempted`: an aligned record in this VM's
        // RAM, mapped at EL2; read with an atomic load only.
        unsafe {
            if record.width == 8 {
                (*(pa as *const pvlock_abi::pvlock::VcpuState64)).lock_count_hint()
            } else {
                (*(pa as *const pvlock_abi::pvlock::VcpuState32)).lock_count_hint()
            }
        }
    }

    /// Stores vCPU `index`'s stolen time (ns) in its PV-time record, if it
    /// has one (docs/abi.md §4: `le64 stolen_time` at offset 8).
    fn write_stolen_time(&self, index: u16, steal_ticks: u64) {
        let Some(ipa) = self.pv.steal_record(index) else {
            return;
        };
        let Some(pa) = self.placement.host_pa(ipa) else {
            return;
        };
        let ns = self
            .pv
            .stolen_time_ns(index, steal_ticks, cpu::counter_frequency());
        // SAFETY: as in `write_preempted`: an aligned, hypervisor-placed
        // record in this VM's RAM, mapped at EL2; accessed atomically.
        unsafe {
            let record = &*(pa as *const pvlock_abi::pvtime::StolenTime);
            record.store_stolen_time(ns, Ordering::Release);
        }
    }

    /// Records when the saved virtual timer of vCPU `index` fires.
    fn note_vtimer(&self, index: u16, ctx: &VcpuContext) {
        let ctl = ctx.vtimer.ctl;
        let armed =
            ctl & CNTV_CTL_EL0::ENABLE::SET.value != 0 && ctl & CNTV_CTL_EL0::IMASK::SET.value == 0;
        let due = if armed {
            ctx.vtimer.cval.wrapping_add(self.cntvoff)
        } else {
            u64::MAX
        };
        if let Some(slot) = self.vtimer_due.get(usize::from(index)) {
            slot.store(due, Ordering::Relaxed);
        }
    }

    /// Whether vCPU `index`, off its pCPU, has its virtual timer due.
    fn vtimer_is_due(&self, index: u16, now: u64) -> bool {
        self.vtimer_due
            .get(usize::from(index))
            .is_some_and(|due| due.load(Ordering::Relaxed) <= now)
    }

    /// Counts an injected abort; whether to log it, and its number.
    fn fault_to_log(&self) -> Option<u64> {
        let nth = self.faults.fetch_add(1, Ordering::Relaxed) + 1;
        fault::worth_logging(nth).then_some(nth)
    }

    fn count_exit(&self, exit: &Exit) {
        self.exits[exit.class_index()].fetch_add(1, Ordering::Relaxed);
    }
}

/// Copies `module` from host memory to host address `dst`.
///
/// # Safety
/// Both ranges must be mapped at EL2, `dst` writable, and not overlap.
unsafe fn copy_to(dst: u64, module: MemRange) {
    // SAFETY: per the caller.
    unsafe {
        core::ptr::copy_nonoverlapping(
            module.base as *const u8,
            dst as *mut u8,
            module.size as usize,
        )
    };
}

/// A vCPU as it is after reset, before CPU_ON gives it an entry point.
fn reset_context(index: u16) -> VcpuContext {
    let mut ctx = VcpuContext::default();
    ctx.el1.sctlr = SCTLR_EL1_RESET;
    ctx.el1.cpacr = CPACR_EL1_RESET;
    ctx.debug = el2::sysreg::DebugState::reset();
    // MPIDR_EL1 bit 31 is RES1.
    ctx.vmpidr = layout::vcpu_mpidr(index).value() | (1 << 31);
    ctx
}

/// What the guests are told about this CPU's speculation bugs, from its
/// ID registers; what the ID registers do not clear stays "vulnerable"
/// (the hypervisor applies no firmware mitigation on a guest's behalf).
fn cpu_vulnerabilities() -> el2::smccc::CpuVulnerabilities {
    use super::regs::ID_AA64PFR0_CSV as Csv;
    use el2::smccc::Exposure;
    let pfr0 = super::regs::id_aa64pfr0();
    let csv2 = pfr0.read(Csv::CSV2);
    let safe = |yes: bool| {
        if yes {
            Exposure::Unaffected
        } else {
            Exposure::Vulnerable
        }
    };
    el2::smccc::CpuVulnerabilities {
        spectre_v2: safe(csv2 >= 1),
        spectre_v4: Exposure::Vulnerable,
        spectre_bhb: safe(csv2 >= 3),
    }
}

/// HCR_EL2 while a guest runs: stage 2 on, EL1 is AArch64, physical
/// interrupts to EL2, guest SMC and WFI trapped, TLB and cache maintenance
/// broadcast inner-shareable (vCPUs migrate between pCPUs).
fn guest_hcr() -> u64 {
    (HCR_EL2::VM::Enable
        + HCR_EL2::SWIO::SET
        + HCR_EL2::RW::EL1IsAarch64
        + HCR_EL2::IMO::EnableVirtualIRQ
        + HCR_EL2::FMO::EnableVirtualFIQ
        + HCR_EL2::AMO::SET
        + HCR_EL2::TSC::EnableTrapEl1SmcToEl2
        + HCR_EL2::TWI::SET
        // ID registers: answered with el2::sysreg::sanitize_id.
        + HCR_EL2::TID3::SET
        + HCR_EL2::FB::SET
        + HCR_EL2::BSU::InnerShareable)
        .value
}

/// Per-pCPU set-up for running guests, once before the run loop.
pub fn init_pcpu_for_guests() {
    VTCR_EL2.set(stage2::vtcr_value());
    VPIDR_EL2.write(COUNT64::VALUE.val(MIDR_EL1.get()));
    // Guests use FP/SIMD and manage their own CPACR_EL1; the hypervisor
    // itself never uses FP/SIMD (soft-float).
    super::regs::CPTR_EL2
        .modify(super::regs::CPTR_EL2_NVHE::TFP::CLEAR + super::regs::CPTR_EL2_NVHE::TCPAC::CLEAR);
    // EL1 may read the physical counter but not use the physical timer:
    // guests get the virtual timer (their DT names it).
    CNTHCTL_EL2.write(CNTHCTL_EL2::EL1PCTEN::SET + CNTHCTL_EL2::EL1PCEN::CLEAR);
    timer::set_one_shot();
    gicv::init_pcpu();
}

/// The run loop of pCPU `pcpu`: picks vCPUs and runs them until every VM
/// has powered off. The boot CPU then prints the summary and powers off.
pub fn run(pcpu: usize) -> ! {
    let (Some(vms), Some(sched)) = (VMS.get(), SCHED.get()) else {
        psci::park()
    };
    loop {
        if ALL_OFF.load(Ordering::Acquire) {
            if pcpu == 0 {
                finish(vms, sched);
            }
            psci::park();
        }
        let now = cpu::counter();
        let next = {
            let mut s = sched.lock();
            s.expire_timers_on(pcpu, now, |vcpu, wakeup| woken(pcpu, vms, vcpu, wakeup));
            s.pick_next(pcpu, now)
                .map(|vcpu| (vcpu, Picked::read(&s, vcpu, pcpu, now)))
        };
        match next {
            Some((vcpu, picked)) => {
                run_vcpu(pcpu, &vms[usize::from(vcpu.vm.0)], vcpu, picked, sched)
            }
            None => {
                idle(pcpu, sched);
                forward_console_input(pcpu, vms, None, sched);
            }
        }
    }
}

/// Interactive input: when a single VM runs, it owns the console, and the
/// bytes typed on it go to that VM's UART (raising its receive interrupt).
/// The boot CPU polls the console's receive FIFO at its hypervisor
/// interrupts (the slice tick, at least once a slice, while it runs a
/// vCPU) and whenever it wakes from idle (at least every
/// `IDLE_RECHECK_MS`), at most once a millisecond; bytes the guest's FIFO has no room
/// for wait in the console's own FIFO. With several VMs, input is ignored
/// (their output shares the console, prefixed with each VM's name).
/// `running` is the vCPU this pCPU runs, if any.
fn forward_console_input(
    pcpu: usize,
    vms: &[Vm],
    running: Option<VcpuId>,
    sched: &Mutex<Scheduler>,
) {
    let [vm] = vms else {
        return;
    };
    if pcpu != 0 || vm.state() != VM_RUNNING {
        return;
    }
    // At most once per millisecond: faster than anyone types (and than a
    // 115200-baud line fills a 16-byte FIFO), and off the vCPU-switch path.
    let now = cpu::counter();
    if now < NEXT_INPUT_POLL.load(Ordering::Relaxed) {
        return;
    }
    NEXT_INPUT_POLL.store(now + ms_to_ticks(1), Ordering::Relaxed);
    let targets = {
        let mut uart = vm.console.lock();
        while uart.rx_space() > 0 {
            let Some(byte) = super::console::read_byte() else {
                break;
            };
            uart.push_input(byte);
        }
        uart_line_follow(vm, &uart)
    };
    let running = running.filter(|v| v.vm == vm.id).map(|v| v.index);
    deliver(pcpu, vm, running, targets, sched);
}

/// After the scheduler woke `vcpu` (caller holds the scheduler lock):
/// updates its PV "preempted" flag and pokes the pCPU it was queued on.
fn woken(this_pcpu: usize, vms: &[Vm], vcpu: VcpuId, wakeup: Wakeup) {
    if let (Some(vm), Some(value)) = (
        vms.get(usize::from(vcpu.vm.0)),
        pv::preempted_on_wake(wakeup),
    ) {
        vm.write_preempted(vcpu.index, value);
    }
    poke(this_pcpu, wakeup);
}

/// Sends the reschedule SGI where a wake-up needs it.
fn poke(this_pcpu: usize, wakeup: Wakeup) {
    if let Wakeup::Queued { pcpu, ipi: true } = wakeup
        && pcpu != this_pcpu
    {
        send_reschedule(pcpu);
    }
}

fn send_reschedule(pcpu: usize) {
    if let Some(mpidr) = PCPU_MPIDRS.get().and_then(|m| m.get(pcpu)) {
        gic::send_sgi(*mpidr, irq::RESCHEDULE_SGI);
    }
}

/// Waits with interrupts enabled until a timer deadline of this pCPU, an
/// IPI, or the safety-net recheck.
fn idle(pcpu: usize, sched: &Mutex<Scheduler>) {
    let now = cpu::counter();
    let recheck = now + ms_to_ticks(IDLE_RECHECK_MS);
    let deadline = sched
        .lock()
        .next_deadline_on(pcpu)
        .map_or(recheck, |d| d.min(recheck));
    timer::arm_at(deadline);
    // WFI with IRQs still masked: an interrupt pending now or later wakes it
    // whatever PSTATE.I says (Arm ARM D1.6.2, "Wait for Interrupt"), and is
    // taken only once they are unmasked after it. Unmasking first would let
    // a timer that is already due (the deadline passed since it was read,
    // or a tick still pending) be taken and stopped *before* the WFI, which
    // would then sleep until some other interrupt: a lost wake-up that left
    // the boot CPU asleep for good.
    // SAFETY: unmasking IRQs lets the EL2 IRQ handler run here; it touches
    // nothing this code holds (no lock is held here).
    unsafe {
        core::arch::asm!(
            "wfi",
            "msr daifclr, #2",
            "isb",
            "msr daifset, #2",
            options(nomem, nostack)
        )
    };
}

/// What to do after one exit.
enum Next {
    /// Enter the guest again.
    Resume,
    /// Leave the pCPU for this reason.
    Put(PutReason),
    /// The scheduler has already taken the vCPU off this pCPU (a directed
    /// yield handed the rest of its slice to a sibling): save it and go.
    Yielded,
}

/// What the scheduler says about a vCPU it just picked, read under the
/// same lock as the pick: one lock round trip less on every switch.
struct Picked {
    /// Its steal time so far (published at load).
    steal_ticks: u64,
    /// The end of the slice it was given.
    slice_end: Option<u64>,
    /// vCPUs that want this pCPU (the `auto` WFE trap policy).
    runnable: usize,
    /// The earliest WFI deadline of a vCPU blocked on this pCPU.
    next_deadline: Option<u64>,
}

impl Picked {
    fn read(s: &Scheduler, vcpu: VcpuId, pcpu: usize, now: u64) -> Self {
        Self {
            steal_ticks: s.steal_ticks(vcpu, now).unwrap_or(0),
            slice_end: s.slice_end(vcpu),
            runnable: s.runnable_on(pcpu),
            next_deadline: s.next_deadline_on(pcpu),
        }
    }
}

/// Runs `vcpu` on this pCPU until the scheduler takes it off. `picked` is
/// what the scheduler said when it picked it: the vCPU is Running here,
/// so nothing but this pCPU changes its slice meanwhile.
fn run_vcpu(pcpu: usize, vm: &Vm, vcpu: VcpuId, picked: Picked, sched: &Mutex<Scheduler>) {
    let mut ctx = vm.vcpus[usize::from(vcpu.index)].lock();
    vcpu_load(vm, vcpu, &mut ctx, picked.steal_ticks);
    vm.spin.lock().resumed(vcpu.index);
    let mut first = Some((picked.slice_end, picked.runnable, picked.next_deadline));
    let vms = VMS.get().map_or(&[][..], |v| v.as_slice());
    let reason = loop {
        if vm.state() != VM_RUNNING {
            break PutReason::PowerOff;
        }
        let (slice_end, runnable, next_deadline) = first.take().unwrap_or_else(|| {
            // The WFI deadlines of vCPUs blocked on this pCPU fall due while
            // it runs this one, not only when it passes through the
            // scheduler: wake them now (they queue for a pCPU), or a vCPU
            // that never yields would keep them asleep past their timers.
            let now = cpu::counter();
            let mut s = sched.lock();
            s.expire_timers_on(pcpu, now, |v, wakeup| woken(pcpu, vms, v, wakeup));
            (
                s.slice_end(vcpu),
                s.runnable_on(pcpu),
                s.next_deadline_on(pcpu),
            )
        });
        let Some(slice_end) = slice_end else {
            break PutReason::Yield;
        };
        HCR_EL2.set(vm.wfx.lock().hcr_for(guest_hcr(), vcpu.index, runnable));
        // The slice's end, or the next blocked vCPU's wake-up if earlier:
        // its interrupt exits the guest to the expiry above.
        timer::arm_at(next_deadline.map_or(slice_end, |d| d.min(slice_end)));
        let attention = 1u64 << vcpu.index;
        let next = loop {
            // New interrupts for this vCPU (or a maintenance request) since
            // its list registers were last written: one load when there
            // are none.
            if vm.irq_attention.load(Ordering::Acquire) & attention != 0 {
                refresh_and_deliver(pcpu, vm, vcpu, &mut ctx, sched);
            }
            // SAFETY: the context is loaded and stage 2 active (vcpu_load),
            // and `ctx.regs` outlives the call.
            let vector = unsafe { enter_guest(&mut ctx.regs) };
            let esr = ESR_EL2.get();
            // The shortest path: a call whose reply is fixed for the VM
            // (SMCCC_VERSION, PSCI_VERSION, the vendor UID, KVM_FEATURES)
            // is answered from the dispatcher's precomputed replies.
            if el2::exit::is_hvc_call(vector, esr)
                && let Some(reply) = vm.dispatcher.constant_reply(ctx.regs.x[0])
            {
                ctx.regs.x[..reply.len()].copy_from_slice(reply);
                vm.count_exit(&Exit::Hvc { imm: 0 });
                // No look at the clock: the slice timer is armed, so a
                // slice that ended meanwhile exits again at once as an
                // interrupt, which takes the full path.
                continue;
            }
            let exit = Exit::decode(capture_syndrome(vector, esr));
            vm.count_exit(&exit);
            let next = handle_exit(pcpu, vm, vcpu, &mut ctx, exit, sched);
            // The fast path: a hypercall or an emulated access that leaves
            // the vCPU running inside its slice changes nothing the checks
            // above read, so the guest goes straight back in. Interrupts
            // (a slice tick, a reschedule IPI, a VM stopping) always take
            // the full path, and the armed slice timer ends the slice.
            if matches!(next, Next::Resume) && resumes_in_place(&exit) {
                continue;
            }
            break next;
        };
        let reason = match next {
            Next::Resume => {
                if cpu::counter() < slice_end || extend_slice(pcpu, vm, vcpu, &ctx, sched) {
                    continue;
                }
                PutReason::SliceExpired
            }
            Next::Put(reason) => reason,
            Next::Yielded => {
                vcpu_put(pcpu, vm, vcpu, &mut ctx, sched);
                return;
            }
        };
        if reason == PutReason::PowerOff {
            break reason;
        }
        let now = cpu::counter();
        let mut s = sched.lock();
        let outcome = s.put(vcpu, pcpu, now, reason);
        // Written under the scheduler lock: once it is released another
        // pCPU may pick the vCPU and write 0, which must not be overtaken.
        if let Some(value) = outcome.ok().and_then(pv::preempted_on_put) {
            vm.write_preempted(vcpu.index, value);
        }
        if let Ok(outcome) = outcome {
            vm.spin
                .lock()
                .record_put(vcpu.index, ctx.regs.pstate, outcome);
        }
        drop(s);
        match outcome {
            Ok(PutOutcome::KeepRunning) => continue,
            Ok(_) => {
                vcpu_put(pcpu, vm, vcpu, &mut ctx, sched);
                return;
            }
            Err(e) => {
                log::error!("{vcpu}: scheduler refused put: {e}");
                vcpu_put(pcpu, vm, vcpu, &mut ctx, sched);
                return;
            }
        }
    };
    // Powering off: save and release the context before the scheduler
    // marks the vCPU Off (see the module docs on lock order).
    vcpu_put(pcpu, vm, vcpu, &mut ctx, sched);
    drop(ctx);
    let now = cpu::counter();
    let mut s = sched.lock();
    match s.put(vcpu, pcpu, now, reason) {
        Ok(outcome) => {
            if let Some(value) = pv::preempted_on_put(outcome) {
                vm.write_preempted(vcpu.index, value);
            }
        }
        Err(e) => log::error!("{vcpu}: scheduler refused power-off: {e}"),
    }
    let all_off = s
        .vcpus(vm.id)
        .all(|v| s.power_state(v) == Some(PowerState::Off));
    drop(s);
    if all_off {
        vm_stopped(vm, sched);
    }
}

/// Whether the guest may be re-entered at once after `exit` was handled
/// with [`Next::Resume`]: the exits a guest makes on its own (hypercalls,
/// emulated MMIO and system registers, aborts injected back) change neither
/// the VM's state nor this vCPU's slice, so the VM state, the slice end, the
/// trap configuration and the slice timer stay as the last full pass set
/// them. A policy change (PVLOCK_SET_WFX_POLICY) or a vCPU queued here by a
/// kick reaches HCR_EL2 at the next interrupt exit (the slice tick at the
/// latest), as KVM applies its WFx traps at vcpu_load.
fn resumes_in_place(exit: &Exit) -> bool {
    matches!(
        exit,
        Exit::Hvc { .. }
            | Exit::Smc { .. }
            | Exit::DataAbort(_)
            | Exit::InstructionAbort { .. }
            | Exit::SystemRegister(_)
            | Exit::FpAccess
    )
}

/// The running vCPU's slice has ended: if it is inside a critical section
/// (boosts on, its guest declares a lock or it runs with IRQs masked) and
/// only its own VM's vCPUs wait, let it run `onspin::SLICE_EXTENSION_US`
/// longer.
fn extend_slice(
    pcpu: usize,
    vm: &Vm,
    vcpu: VcpuId,
    ctx: &VcpuContext,
    sched: &Mutex<Scheduler>,
) -> bool {
    // The spin state is a leaf lock: never held while taking SCHED.
    let reason = vm
        .spin
        .lock()
        .extension_reason(vm.lock_count_hint(vcpu.index), ctx.regs.pstate);
    if reason.is_none() {
        return false;
    }
    let now = cpu::counter();
    let ticks = cpu::counter_frequency() * onspin::SLICE_EXTENSION_US / 1_000_000;
    let extended = sched.lock().extend_slice(vcpu, pcpu, now, ticks).is_some();
    if extended {
        vm.spin.lock().record_extension();
    }
    extended
}

/// Loads a vCPU onto this pCPU: its VM's stage 2, the vCPU's system
/// registers and virtual CPU interface, and its PV records: "not
/// preempted" and the stolen time it has accumulated (`steal_ticks`), both
/// before it runs.
fn vcpu_load(vm: &Vm, vcpu: VcpuId, ctx: &mut VcpuContext, steal_ticks: u64) {
    vm.write_preempted(vcpu.index, pv::preempted_on_load());
    vm.write_stolen_time(vcpu.index, steal_ticks);
    HCR_EL2.set(guest_hcr());
    VTTBR_EL2.set(vm.vttbr);
    CNTVOFF_EL2.set(vm.cntvoff);
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
    ctx.load();
    // The list registers are empty now; whatever waits for this vCPU has
    // its `irq_attention` bit set (see `vcpu_put`), so the run loop's
    // check before the first entry fills them.
}

/// Saves the running vCPU: what the guest did with its list registers goes
/// back into the virtual GIC (an interrupt it left pending may now go to
/// another vCPU), then its system registers. (Its PV "preempted" flag was
/// written with the scheduler's decision, under the scheduler lock.) Takes
/// the scheduler lock: call it without.
fn vcpu_put(pcpu: usize, vm: &Vm, vcpu: VcpuId, ctx: &mut VcpuContext, sched: &Mutex<Scheduler>) {
    if ctx.gic.lrs_used == 0 && !ctx.gic.underflow {
        // Nothing of the virtual GIC's is in this pCPU's list registers:
        // the common case of a vCPU switch, kept to the register save.
        ctx.save();
        vm.note_vtimer(vcpu.index, ctx);
        return;
    }
    let (read_back, used) = ctx.gic.read_lrs();
    let woken = vm.vgic.lock().sync_back(vcpu.index, &read_back[..used]);
    // Anything the guest had not finished with (pending or active), or
    // that did not fit, is back in the model: the vCPU's next load must
    // fill its list registers again. Without it, the empty list registers
    // it will be loaded with are all it is owed — the cheap vCPU switch.
    let unfinished = read_back[..used]
        .iter()
        .any(|lr| lr.state != el2::vgic::LrState::Invalid);
    if unfinished || ctx.gic.underflow {
        // Marked, not woken: a wake-up is owed only for a new interrupt,
        // and WFI has already looked at these.
        vm.irq_attention
            .fetch_or(1u64 << vcpu.index, Ordering::AcqRel);
    }
    ctx.save();
    vm.note_vtimer(vcpu.index, ctx);
    deliver(pcpu, vm, None, woken.without(vcpu.index), sched);
}

/// Brings the running `vcpu`'s list registers up to date: what the guest
/// did with the current ones goes back into the virtual GIC, and its most
/// urgent deliverable interrupts go in (with the underflow maintenance
/// interrupt if more wait than fit). Returns the other vCPUs the change
/// made something deliverable to, and whether `vcpu` itself has an
/// interrupt to take (what ends a WFI).
fn vgic_refresh(vm: &Vm, vcpu: u16, ctx: &mut VcpuContext) -> (VcpuMask, bool) {
    // Cleared before the virtual GIC is read: an injection after this
    // point sets it again and is picked up at the next entry.
    vm.irq_attention
        .fetch_and(!(1u64 << vcpu), Ordering::AcqRel);
    let (read_back, used) = ctx.gic.read_lrs();
    let mut gic = vm.vgic.lock();
    let mut woken = gic.sync_back(vcpu, &read_back[..used]);
    let lrs = gic.fill(vcpu, gicv::list_registers());
    let underflow = gic.underflow_needed(vcpu);
    // `VGic::has_pending`, walking the interrupts a third time only when
    // some did not fit: otherwise whatever is deliverable is in the list
    // registers just filled.
    let pending =
        lrs.iter().any(|lr| lr.state.is_pending()) || (underflow && gic.has_pending(vcpu));
    woken |= gic.take_wakeups();
    drop(gic);
    ctx.gic.load_lrs(&lrs.values(), lrs.len(), underflow);
    (woken.without(vcpu), pending)
}

/// [`vgic_refresh`], then wakes whom it names. Returns whether `vcpu` has
/// an interrupt to take.
fn refresh_and_deliver(
    pcpu: usize,
    vm: &Vm,
    vcpu: VcpuId,
    ctx: &mut VcpuContext,
    sched: &Mutex<Scheduler>,
) -> bool {
    let (woken, pending) = vgic_refresh(vm, vcpu.index, ctx);
    deliver(pcpu, vm, Some(vcpu.index), woken, sched);
    pending
}

/// After a virtual GIC change made an interrupt deliverable to `targets`:
/// marks their list registers out of date and gets each to look — a
/// blocked one is woken, one running on another pCPU gets the reschedule
/// SGI, which exits it to refill. `running` is the vCPU this pCPU runs,
/// which needs no more than the mark. Call without the scheduler lock.
fn deliver(
    pcpu: usize,
    vm: &Vm,
    running: Option<u16>,
    targets: VcpuMask,
    sched: &Mutex<Scheduler>,
) {
    if targets.is_empty() {
        return;
    }
    // After the vGIC change (the caller has released its lock), before the
    // wake-up: the target's next entry sees the mark.
    vm.irq_attention.fetch_or(targets.bits(), Ordering::AcqRel);
    let others = match running {
        Some(index) => targets.without(index),
        None => targets,
    };
    if others.is_empty() {
        return;
    }
    let now = cpu::counter();
    let mut s = sched.lock();
    for index in others.iter() {
        let target = VcpuId { vm: vm.id, index };
        match s.wake(target, now) {
            Ok(Wakeup::Kicked {
                running_on: Some(other),
            }) => {
                if other != pcpu {
                    send_reschedule(other);
                }
            }
            Ok(wakeup) => {
                if let Some(value) = pv::preempted_on_wake(wakeup) {
                    vm.write_preempted(index, value);
                }
                poke(pcpu, wakeup);
            }
            Err(_) => {}
        }
    }
}

/// The syndrome of the exit just taken through `vector` with `esr`: the
/// fault address registers are read only for the exits they describe.
fn capture_syndrome(vector: u64, esr: u64) -> Syndrome {
    let (far, hpfar) = if Syndrome::has_fault_address(vector, esr) {
        (FAR_EL2.get(), HPFAR_EL2.get())
    } else {
        (0, 0)
    };
    Syndrome {
        vector,
        esr,
        far,
        hpfar,
    }
}

fn handle_exit(
    pcpu: usize,
    vm: &Vm,
    vcpu: VcpuId,
    ctx: &mut VcpuContext,
    exit: Exit,
    sched: &Mutex<Scheduler>,
) -> Next {
    match exit {
        Exit::Irq => {
            match irq::handle() {
                Taken::VirtualTimer => {
                    ctx.vtimer.fired = true;
                    VgicCounters::count(&vm.vgic_stats.timer);
                    // Latched rather than driven as a level: the hardware
                    // timer is masked now, and the guest's handler reprograms
                    // (and so unmasks) it, which fires again if due.
                    let intid = layout::TIMER.virt.intid();
                    let woken = vm.vgic.lock().raise_edge(intid, vcpu.index);
                    if let Ok(woken) = woken {
                        deliver(pcpu, vm, Some(vcpu.index), woken, sched);
                    }
                }
                Taken::Maintenance => {
                    VgicCounters::count(&vm.vgic_stats.maintenance);
                    vm.irq_attention
                        .fetch_or(1u64 << vcpu.index, Ordering::AcqRel);
                }
                Taken::Hypervisor => {
                    // The slice tick or an IPI: also when the boot CPU
                    // looks for console input while it runs a vCPU.
                    let vms = VMS.get().map_or(&[][..], |v| v.as_slice());
                    forward_console_input(pcpu, vms, Some(vcpu), sched);
                }
            }
            Next::Resume
        }
        Exit::Hvc { imm } => hypercall(pcpu, vm, vcpu, ctx, imm, sched),
        Exit::Smc { imm } => {
            // ELR points at the trapped SMC (Arm ARM D1.10.2): step over it.
            ctx.regs.pc += 4;
            hypercall(pcpu, vm, vcpu, ctx, imm, sched)
        }
        Exit::Wfx {
            kind,
            deadline_register,
        } => {
            ctx.regs.pc += 4;
            vm.spin.lock().stats_mut().record_wfx(&exit);
            match kind {
                // WFI blocks until the virtual timer fires or a wake-up;
                // WFIT also until its own deadline (Rt, in virtual counter
                // ticks; Arm ARM C6.2.397 "WFIT").
                WfxKind::Wfi => {
                    // WFI completes at once if an interrupt is pending for
                    // the vCPU (Arm ARM D1.6.2 "Wait for Interrupt"), masked
                    // by PSTATE or not: look, with the list registers read
                    // back first (the guest may have taken what they held).
                    if refresh_and_deliver(pcpu, vm, vcpu, ctx, sched) {
                        return Next::Resume;
                    }
                    let own = deadline_register.map(|r| ctx.regs.reg(r).wrapping_add(vm.cntvoff));
                    Next::Put(PutReason::Wfi {
                        deadline: el2::exit::wfi_deadline(vtimer_wait_deadline(ctx), own),
                    })
                }
                WfxKind::Wfe => on_spin(pcpu, vm, vcpu, ctx, sched),
            }
        }
        Exit::DataAbort(abort) => data_abort(pcpu, vm, vcpu, ctx, abort, sched),
        Exit::InstructionAbort { far: address } => {
            if let Some(nth) = vm.fault_to_log() {
                log::warn!(
                    "{vcpu} ({}): instruction fetch at {address:#x} outside its memory; abort \
                     injected (fault {nth} of this VM)",
                    vm.name
                );
            }
            inject(ctx, GuestFault::InstructionAbort { address });
            Next::Resume
        }
        Exit::SystemRegister(access) => {
            // A debug or PMU register the guest may touch (el2::sysreg).
            if let Some(register) = el2::sysreg::sgi_register(&access) {
                send_sgi(pcpu, vm, vcpu, register, ctx.regs.reg(access.rt), sched);
                ctx.regs.pc += 4;
                return Next::Resume;
            }
            if el2::sysreg::is_id_read(&access) {
                let hw = super::regs::read_id_register(access.crm, access.op2);
                let value = el2::sysreg::sanitize_id(access.crm, access.op2, hw);
                ctx.regs.set_reg(access.rt, value);
                ctx.regs.pc += 4;
                return Next::Resume;
            }
            let value = ctx.regs.reg(access.rt);
            match el2::sysreg::emulate(&access, value, &mut ctx.debug) {
                Some(done) => {
                    if let el2::sysreg::Emulated::Read(v) = done {
                        ctx.regs.set_reg(access.rt, v);
                    }
                    // ELR points at the trapped MSR/MRS: step over it.
                    ctx.regs.pc += 4;
                }
                None => {
                    log::debug!(
                        "{vcpu} ({}): {access} at {:#x} not emulated; undefined instruction \
                         injected",
                        vm.name,
                        ctx.regs.pc
                    );
                    inject(ctx, GuestFault::Undefined);
                }
            }
            Next::Resume
        }
        Exit::Other { esr, .. } => {
            log::debug!(
                "{vcpu} ({}): {} (ESR {esr:#x}) at {:#x}; undefined instruction injected",
                vm.name,
                exit.class_name(),
                ctx.regs.pc
            );
            inject(ctx, GuestFault::Undefined);
            Next::Resume
        }
        Exit::FpAccess => {
            // The trapped instruction runs again once the state is in.
            ctx.load_fp();
            Next::Resume
        }
        Exit::Fiq | Exit::SError => {
            log::warn!("{vcpu} ({}): unexpected {}", vm.name, exit.class_name());
            Next::Resume
        }
    }
}

/// WFE/WFET: KVM's `kvm_vcpu_on_spin` (`el2::onspin`): hand the rest of
/// the slice to a preempted sibling, boosted ones first; else yield plainly.
fn on_spin(
    pcpu: usize,
    vm: &Vm,
    vcpu: VcpuId,
    ctx: &mut VcpuContext,
    sched: &Mutex<Scheduler>,
) -> Next {
    let now = cpu::counter();
    let mut s = sched.lock();
    let mut spin = vm.spin.lock();
    // Lock order: SCHED, then the spin state, then the virtual GIC (a leaf).
    let gic = vm.vgic.lock();
    // On the stack: a guest's WFE must not cost heap.
    let mut candidates = [onspin::Candidate::NOT_PREEMPTED; platform::vm::MAX_VCPUS as usize];
    let mut count = 0;
    for (slot, v) in candidates.iter_mut().zip(s.vcpus(vm.id)) {
        let waiting = s.can_yield_to(vcpu, v, pcpu, now).is_ok();
        let locks = if waiting {
            vm.lock_count_hint(v.index)
        } else {
            0
        };
        let pending = waiting && (gic.has_pending(v.index) || vm.vtimer_is_due(v.index, now));
        *slot = spin.candidate(v.index, waiting, locks, pending);
        count += 1;
    }
    drop(gic);
    let plan = spin.plan(
        Spinner::from_pstate(vcpu, ctx.regs.pstate),
        &candidates[..count],
    );
    for choice in plan.iter() {
        let yielded = s.yield_to(vcpu, choice.target, pcpu, now).is_ok();
        spin.attempted(choice, yielded);
        if yielded {
            spin.descheduled(vcpu.index, ctx.regs.pstate);
            vm.write_preempted(vcpu.index, 1);
            return Next::Yielded;
        }
    }
    // No sibling took the slice: yield plainly, as before (the spinner
    // stays in its spin loop until it is loaded again).
    Next::Put(PutReason::Yield)
}

/// The virtual timer's part of a waiting vCPU's deadline, from the live
/// registers (CNTVOFF_EL2 is 0: virtual time is physical time); see
/// `el2::exit::vtimer_wait_deadline`.
fn vtimer_wait_deadline(ctx: &mut VcpuContext) -> Option<u64> {
    let ctl = CNTV_CTL_EL0.extract();
    el2::exit::vtimer_wait_deadline(el2::exit::VtimerState {
        enabled: ctl.is_set(CNTV_CTL_EL0::ENABLE),
        masked: ctl.is_set(CNTV_CTL_EL0::IMASK),
        masked_by_hypervisor: core::mem::take(&mut ctx.vtimer.fired),
        deadline: CNTV_CVAL_EL0.get(),
    })
}

/// Writes an injected exception into the live EL1 registers and the
/// guest's resume state.
fn inject(ctx: &mut VcpuContext, what: GuestFault) {
    let entry = fault::inject(what, ctx.regs.pc, ctx.regs.pstate, VBAR_EL1.get());
    ESR_EL1.set(entry.esr_el1);
    if let Some(far) = entry.far_el1 {
        FAR_EL1.set(far);
    }
    ELR_EL1.set(entry.elr_el1);
    SPSR_EL1.set(entry.spsr_el1);
    ctx.regs.pc = entry.pc;
    ctx.regs.pstate = entry.pstate;
}

/// Injects a synchronous external abort for a data access at guest VA
/// `far` that cannot complete, logging `why` while the VM's faults are
/// still worth logging (`el2::fault::worth_logging`).
fn abort_data_access(
    vm: &Vm,
    vcpu: VcpuId,
    ctx: &mut VcpuContext,
    far: u64,
    write: bool,
    why: core::fmt::Arguments<'_>,
) {
    if let Some(nth) = vm.fault_to_log() {
        log::warn!(
            "{vcpu} ({}): {why} injected (fault {nth} of this VM)",
            vm.name
        );
    }
    inject(
        ctx,
        GuestFault::DataAbort {
            address: far,
            write,
        },
    );
}

fn data_abort(
    pcpu: usize,
    vm: &Vm,
    vcpu: VcpuId,
    ctx: &mut VcpuContext,
    abort: DataAbort,
    sched: &Mutex<Scheduler>,
) -> Next {
    let far = abort.far;
    let access = match abort.access {
        Ok(access) => access,
        Err(why) => {
            abort_data_access(
                vm,
                vcpu,
                ctx,
                far,
                abort.write,
                format_args!("undecodable access at VA {far:#x}: {why}; abort"),
            );
            return Next::Resume;
        }
    };
    match vm.devices.route(access.ipa, access.size) {
        Some((&device, offset)) => {
            let routed = Routed {
                access,
                device,
                offset,
                far,
            };
            match routed.device {
                EmulatedDevice::Uart => uart_access(pcpu, vm, vcpu, ctx, &routed, sched),
                EmulatedDevice::Distributor | EmulatedDevice::Redistributors => {
                    gic_access(pcpu, vm, vcpu, ctx, &routed, sched)
                }
            }
        }
        None => abort_data_access(
            vm,
            vcpu,
            ctx,
            far,
            access.write,
            format_args!(
                "{} at IPA {:#x} outside its memory; synchronous external abort",
                if access.write { "write" } else { "read" },
                access.ipa
            ),
        ),
    }
    Next::Resume
}

/// A trapped access routed to an emulated device.
struct Routed {
    access: MmioAccess,
    device: EmulatedDevice,
    /// The access's offset in the device's frame.
    offset: u64,
    /// The guest virtual address, for an injected abort.
    far: u64,
}

/// A guest access to its PL011.
fn uart_access(
    pcpu: usize,
    vm: &Vm,
    vcpu: VcpuId,
    ctx: &mut VcpuContext,
    routed: &Routed,
    sched: &Mutex<Scheduler>,
) {
    let (access, offset) = (&routed.access, routed.offset);
    let mut uart = vm.console.lock();
    let result = if access.write {
        let value = el2::mmio::write_value(&ctx.regs, access);
        uart.write(offset, access.size, value, &mut HypervisorConsole)
    } else {
        uart.read(offset, access.size)
            .map(|value| el2::mmio::complete_read(&mut ctx.regs, access, value))
    };
    let targets = uart_line_follow(vm, &uart);
    drop(uart);
    deliver(pcpu, vm, Some(vcpu.index), targets, sched);
    match result {
        Ok(()) => el2::mmio::skip_instruction(&mut ctx.regs, access),
        Err(e) => abort_data_access(
            vm,
            vcpu,
            ctx,
            routed.far,
            access.write,
            format_args!("UART {e}; abort"),
        ),
    }
}

/// Makes the virtual GIC's SPI follow the UART's interrupt line after an
/// access or new input; call it with the `console` lock held (`uart` is
/// the guarded model) and give the result to [`deliver`] after releasing
/// it. The vGIC is updated under the console lock (the vGIC lock is a
/// leaf, taken inside), so the order of line changes is the order of the
/// UART accesses that made them: two pCPUs — a guest access on one, input
/// forwarded on the other — cannot apply their levels in the wrong order
/// and leave the virtual line low under a UART that is asserting.
/// Returns the vCPUs to tell.
fn uart_line_follow(vm: &Vm, uart: &Pl011) -> VcpuMask {
    let level = uart.irq_level();
    if vm.uart_line.swap(level, Ordering::AcqRel) == level {
        return VcpuMask::EMPTY;
    }
    if level {
        VgicCounters::count(&vm.vgic_stats.spi);
    }
    let intid = layout::UART_IRQ.intid();
    let mut gic = vm.vgic.lock();
    let mut targets = gic.set_level(intid, 0, level).unwrap_or_default();
    // A line that drops takes the pending state away (Arm IHI 0069,
    // "Interrupt handling state machine": a level-sensitive interrupt is
    // pending only while asserted). If the interrupt sits in a vCPU's list
    // register, that entry still says pending: the vCPU must resync its
    // list registers before the guest can acknowledge it a second time
    // (typically the vCPU whose UART access lowered the line, about to
    // re-enter).
    if !level && let Some(holder) = gic.irq_status(intid, 0).and_then(|status| status.in_lr) {
        targets.insert(holder);
    }
    targets
}

/// A guest access to its virtual GIC's distributor or redistributors.
/// Reserved offsets and read-only registers are RAZ/WI as on a real GIC;
/// an access of a size or alignment the register does not take gets a
/// synchronous external abort.
fn gic_access(
    pcpu: usize,
    vm: &Vm,
    vcpu: VcpuId,
    ctx: &mut VcpuContext,
    routed: &Routed,
    sched: &Mutex<Scheduler>,
) {
    let (access, offset) = (&routed.access, routed.offset);
    let ipa = access.ipa;
    let value = el2::mmio::write_value(&ctx.regs, access);
    let (result, woken) = {
        let mut gic = vm.vgic.lock();
        let distributor = routed.device == EmulatedDevice::Distributor;
        let result = match (distributor, access.write) {
            (true, false) => gic.dist_read(offset, access.size),
            (true, true) => gic.dist_write(offset, access.size, value).map(|()| 0),
            (false, false) => gic.redist_read(offset, access.size),
            (false, true) => gic.redist_write(offset, access.size, value).map(|()| 0),
        };
        (result, gic.take_wakeups())
    };
    // The writer's own list registers may hold an interrupt the write
    // changed (disabled it, cleared its pending state, moved it): resync
    // them before it re-enters. GIC writes are rare; this costs one refill.
    let mut targets = woken;
    if access.write {
        targets.insert(vcpu.index);
    }
    deliver(pcpu, vm, Some(vcpu.index), targets, sched);
    match result {
        Ok(read) => {
            if !access.write {
                el2::mmio::complete_read(&mut ctx.regs, access, read);
            }
            el2::mmio::skip_instruction(&mut ctx.regs, access);
        }
        Err(e) if !e.aborts() => {
            log::debug!("{vcpu} ({}): GIC access at IPA {ipa:#x}: {e}", vm.name);
            if !access.write {
                el2::mmio::complete_read(&mut ctx.regs, access, 0);
            }
            el2::mmio::skip_instruction(&mut ctx.regs, access);
        }
        Err(e) => abort_data_access(
            vm,
            vcpu,
            ctx,
            routed.far,
            access.write,
            format_args!("GIC access at IPA {ipa:#x}: {e}; abort"),
        ),
    }
}

/// A guest write to an SGI generation register (it traps: HCR_EL2.IMO).
fn send_sgi(
    pcpu: usize,
    vm: &Vm,
    vcpu: VcpuId,
    register: el2::sysreg::SgiRegister,
    value: u64,
    sched: &Mutex<Scheduler>,
) {
    use el2::sysreg::SgiRegister;
    match register {
        SgiRegister::Group1 => {
            VgicCounters::count(&vm.vgic_stats.sgis);
            let woken = vm.vgic.lock().send_sgi(vcpu.index, value);
            if let Ok(woken) = woken {
                deliver(pcpu, vm, Some(vcpu.index), woken, sched);
            }
        }
        // One Security state (GICD_CTLR.DS = 1): no other state's Group 1
        // to send to; and every SGI is Group 1 unless the guest made it
        // Group 0, which only a Group 0 SGI register write would reach —
        // not offered: both are ignored, as docs/linux-guests.md says.
        SgiRegister::OtherGroup1 | SgiRegister::Group0 => {
            log::debug!("{vcpu} ({}): {register:?} SGI write ignored", vm.name);
        }
    }
}

/// The dispatcher's view of a VM: its vCPUs' MPIDRs and power states, its RAM.
struct View<'a> {
    vm: &'a Vm,
    sched: &'a Scheduler,
}

impl VmView for View<'_> {
    fn vcpu_count(&self) -> u16 {
        self.vm.vcpus.len() as u16
    }

    fn mpidr_of(&self, index: u16) -> Mpidr {
        layout::vcpu_mpidr(index)
    }

    fn vcpu_of_mpidr(&self, mpidr: Mpidr) -> Option<u16> {
        layout::vcpu_index(mpidr).filter(|&i| i < self.vcpu_count())
    }

    fn power_state(&self, index: u16) -> PowerState {
        self.sched
            .power_state(VcpuId {
                vm: self.vm.id,
                index,
            })
            .unwrap_or(PowerState::Off)
    }

    fn counter(&self, physical: bool) -> u64 {
        let now = cpu::counter();
        if physical {
            now
        } else {
            now.wrapping_sub(self.vm.cntvoff)
        }
    }

    fn wall_clock_ns(&self) -> Option<u64> {
        WALL_CLOCK.get().map(|clock| clock.ns_at(cpu::counter()))
    }

    fn vm_vcpu_count(&self, vm: VmId) -> Option<u16> {
        VMS.get()?
            .get(usize::from(vm.0))
            .map(|vm| vm.vcpus.len() as u16)
    }

    fn ram_contains(&self, ipa: u64, len: u64) -> bool {
        let ram = self.vm.layout.ram;
        ipa >= ram.base && ipa.checked_add(len).is_some_and(|end| end <= ram.end())
    }
}

fn hypercall(
    pcpu: usize,
    vm: &Vm,
    vcpu: VcpuId,
    ctx: &mut VcpuContext,
    imm: u16,
    sched: &Mutex<Scheduler>,
) -> Next {
    if imm != 0 {
        // SMCCC: only immediate 0 is a call; answer as an unknown function.
        ctx.regs.x[0] = pvlock_abi::smccc::ret_to_x0(pvlock_abi::smccc::NOT_SUPPORTED);
        return Next::Resume;
    }
    let mut s = sched.lock();
    let action = vm
        .dispatcher
        .dispatch(vcpu, &mut ctx.regs, &View { vm, sched: &s });
    match action {
        Action::None => Next::Resume,
        Action::CpuOn {
            target,
            entry,
            context_id,
        } => {
            // The target is Off (checked under this lock), so nobody holds
            // its context: reset it to the entry point, then start it.
            match vm.vcpus.get(usize::from(target.index)) {
                Some(slot) => {
                    let mut t = slot.lock();
                    *t = reset_context(target.index);
                    t.regs = el2::vcpu::GuestRegs {
                        pc: entry,
                        pstate: vm.layout.boot_regs().pstate,
                        ..Default::default()
                    };
                    t.regs.set_reg(0, context_id);
                }
                None => return Next::Resume,
            }
            // A vCPU starting afresh forgets a PV-lock record it registered itself.
            vm.pv.reset_vcpu(target.index);
            vm.spin.lock().reset_vcpu(target.index);
            match s.power_on(target, cpu::counter()) {
                Ok(wakeup) => {
                    if let Some(value) = pv::preempted_on_wake(wakeup) {
                        vm.write_preempted(target.index, value);
                    }
                    poke(pcpu, wakeup);
                }
                Err(e) => {
                    let code = match s.power_state(target) {
                        Some(state) => state
                            .cpu_on_error()
                            .unwrap_or(pvlock_abi::psci::error::INTERNAL_FAILURE),
                        None => pvlock_abi::psci::error::INVALID_PARAMETERS,
                    };
                    log::warn!("{vcpu}: CPU_ON {target}: {e}");
                    ctx.regs.x[0] = pvlock_abi::psci::ret_to_x0(code);
                }
            }
            Next::Resume
        }
        Action::CpuOff => Next::Put(PutReason::PowerOff),
        Action::CpuSuspend => {
            // Like WFI: no suspension with an interrupt pending.
            drop(s);
            if refresh_and_deliver(pcpu, vm, vcpu, ctx, sched) {
                return Next::Resume;
            }
            Next::Put(PutReason::Wfi {
                deadline: vtimer_wait_deadline(ctx),
            })
        }
        Action::SystemOff | Action::SystemReset => {
            let reset = action == Action::SystemReset;
            stop_vm(pcpu, vm, &mut s, reset);
            Next::Put(PutReason::PowerOff)
        }
        Action::Kick { target } => {
            vm.spin.lock().stats_mut().record_kick();
            kick(pcpu, vm, vcpu, ctx, target, &mut s)
        }
        Action::SetWfxPolicy {
            vm: target,
            vcpu: which,
            wfe,
        } => {
            // X0 already says SET (0); the target VM and vCPU exist (checked
            // through `vm_vcpu_count`, and VMS never changes). A leaf lock:
            // the target picks the policy up at its next guest entry.
            if let Some(t) = VMS.get().and_then(|vms| vms.get(usize::from(target.0))) {
                t.wfx.lock().set(which, wfe);
                match which {
                    Some(index) => log::info!("{vcpu}: vm {} vCPU {index}: wfe-trap {wfe}", t.name),
                    None => log::info!("{vcpu}: vm {} every vCPU: wfe-trap {wfe}", t.name),
                }
            }
            Next::Resume
        }
        Action::YieldTo { target } => {
            // X0 already says "not yielded" (1); only a real yield changes it.
            let yielded = s.yield_to(vcpu, target, pcpu, cpu::counter()).is_ok();
            let mut spin = vm.spin.lock();
            spin.stats_mut().record_pv_yield(yielded);
            if !yielded {
                return Next::Resume;
            }
            spin.descheduled(vcpu.index, ctx.regs.pstate);
            ctx.regs.x[0] = pvlock_abi::smccc::ret_to_x0(pvlock_abi::directed_yield::YIELDED);
            // The caller waits in a run queue now: preempted.
            vm.write_preempted(vcpu.index, 1);
            Next::Yielded
        }
    }
}

/// PV KICK_CPU (openEuler / Anolis): wake `target` from its WFI wait and,
/// if it is now waiting for a pCPU, hand it the rest of the caller's slice
/// (directed yield within the VM). X0 already holds the answer.
fn kick(
    pcpu: usize,
    vm: &Vm,
    caller: VcpuId,
    ctx: &VcpuContext,
    target: VcpuId,
    s: &mut Scheduler,
) -> Next {
    let now = cpu::counter();
    let wakeup = match s.wake(target, now) {
        Ok(wakeup) => wakeup,
        Err(e) => {
            log::debug!("{caller}: KICK_CPU {target}: {e}");
            return Next::Resume;
        }
    };
    if let Some(value) = pv::preempted_on_wake(wakeup) {
        vm.write_preempted(target.index, value);
    }
    poke(pcpu, wakeup);
    // A target queued on an idle pCPU starts there at once: no need to yield.
    if target == caller || matches!(wakeup, Wakeup::Queued { ipi: true, .. }) {
        return Next::Resume;
    }
    match s.yield_to(caller, target, pcpu, now) {
        Ok(()) => {
            // The caller waits in a run queue now: preempted.
            vm.write_preempted(caller.index, 1);
            vm.spin.lock().descheduled(caller.index, ctx.regs.pstate);
            Next::Yielded
        }
        Err(_) => Next::Resume,
    }
}

/// Starts stopping every vCPU of `vm` (SYSTEM_OFF / SYSTEM_RESET): the
/// ones not running are turned off here, the running ones see the VM's
/// state at their next exit (an IPI makes that soon).
fn stop_vm(pcpu: usize, vm: &Vm, s: &mut Scheduler, reset: bool) {
    let target = if reset { VM_RESETTING } else { VM_STOPPING };
    if vm
        .state
        .compare_exchange(VM_RUNNING, target, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    let now = cpu::counter();
    for index in 0..vm.vcpus.len() as u16 {
        let v = VcpuId { vm: vm.id, index };
        if let Err(el2::sched::SchedError::Running { pcpu: other }) = s.power_off(v, now)
            && other != pcpu
        {
            send_reschedule(other);
        }
    }
}

/// Every vCPU of `vm` is off: power the VM off, or reload and restart it.
fn vm_stopped(vm: &Vm, sched: &Mutex<Scheduler>) {
    match vm.state() {
        VM_RESETTING => {
            vm.console.lock().flush(&mut HypervisorConsole);
            vm.resets.fetch_add(1, Ordering::Relaxed);
            log::info!("vm {}: restarting (SYSTEM_RESET)", vm.name);
            vm.pv.reset_all();
            vm.spin.lock().reset();
            // Every vCPU is off and saved: no list register holds anything.
            vm.vgic.lock().reset();
            vm.irq_attention.store(0, Ordering::Release);
            {
                let mut uart = vm.console.lock();
                uart.reset();
                vm.uart_line.store(false, Ordering::Release);
            }
            {
                let s = sched.lock();
                let now = cpu::counter();
                for v in s.vcpus(vm.id) {
                    let steal = s.stats(v, now).map_or(0, |st| st.steal_ticks);
                    vm.pv.rebase_steal(v.index, steal);
                }
            }
            if let Err(e) = vm.load() {
                log::error!("vm {}: cannot restart: {e}", vm.name);
                vm.state.store(VM_STOPPING, Ordering::Release);
                vm_stopped(vm, sched);
                return;
            }
            vm.state.store(VM_RUNNING, Ordering::Release);
            let boot = VcpuId {
                vm: vm.id,
                index: 0,
            };
            let mut s = sched.lock();
            match s.power_on(boot, cpu::counter()) {
                Ok(wakeup) => poke(usize::MAX, wakeup),
                Err(e) => log::error!("vm {}: cannot restart: {e}", vm.name),
            }
        }
        VM_STOPPING | VM_RUNNING => {
            // RUNNING: every vCPU did CPU_OFF; treat it as SYSTEM_OFF.
            vm.state.store(VM_OFF, Ordering::Release);
            vm.console.lock().flush(&mut HypervisorConsole);
            println!("el2: vm {} powered off", vm.name);
            let vms = VMS.get().map_or(&[][..], |v| v.as_slice());
            if vms.iter().all(|v| v.state() == VM_OFF) {
                ALL_OFF.store(true, Ordering::Release);
                if let Some(mpidrs) = PCPU_MPIDRS.get() {
                    for (pcpu, _) in mpidrs.iter().enumerate() {
                        send_reschedule(pcpu);
                    }
                }
            }
        }
        _ => {}
    }
}

/// Prints the per-VM summary and powers the machine off.
fn finish(vms: &[Vm], sched: &Mutex<Scheduler>) -> ! {
    let hz = cpu::counter_frequency().max(1);
    let now = cpu::counter();
    let s = sched.lock();
    println!("el2: all VMs powered off");
    for vm in vms {
        let mut exits = String::new();
        for (name, count) in EXIT_CLASSES.iter().zip(&vm.exits) {
            let n = count.load(Ordering::Relaxed);
            if n > 0 {
                exits.push_str(&alloc::format!(" {name}={n}"));
            }
        }
        println!(
            "summary: vm {}: {} vCPUs, resets {}, exits:{}",
            vm.name,
            vm.vcpus.len(),
            vm.resets.load(Ordering::Relaxed),
            exits
        );
        println!("summary:   wait/yield: {}", vm.spin.lock().stats());
        if let Some(variant) = vm.pv.config().lock {
            println!(
                "summary:   pv-lock {}: {}",
                variant.name(),
                vm.pv.record_stats()
            );
        }
        println!("summary:   vgic: {}", vm.vgic_stats.snapshot());
        for v in s.vcpus(vm.id) {
            if let Some(stats) = s.stats(v, now) {
                println!("summary:   {v}: {}", stats.display(hz));
            }
        }
    }
    drop(s);
    println!("el2: powering off");
    psci::power_off()
}
