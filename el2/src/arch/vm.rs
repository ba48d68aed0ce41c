//! VM creation and the run loop's start: every VM the platform describes
//! is placed, its RAM and boot modules mapped at EL2 and claimed in the
//! ownership map, its stage-2 tables built, and its services and memory
//! set up by `el2::run::Vm::build`; then each pCPU hands itself to the
//! portable runner (`el2::run::Runner`) over [`Hardware`].

use super::machine::Hardware;
use super::regs::{COUNT64, VPIDR_EL2};
use super::stage2::{self, Stage2Tables};
use super::{cpu, gicv, heap, mmu, psci, timer};
use crate::println;
use aarch64_cpu::registers::*;
use alloc::string::String;
use alloc::vec::Vec;
use el2::guest::layout::{self, ImageHeader};
use el2::guest::placement::{self, HostMemory, OwnedRange, VmPlacement};
use el2::guest::{VmError, dt};
use el2::memory::layout::{MapKind, page_cover};
use el2::memory::ownership::{Owner, OwnershipMap};
use el2::run::{Host, Runner, Vm, VmParts};
use el2::sched::{CpuSet, Scheduler};
use el2::vcpu::VmId;
use platform::{MemRange, Mpidr, Platform, VmConfig};
use spin::Once;
use tock_registers::interfaces::{Readable, Writeable};

/// Default vCPU time slice.
const SLICE_MS: u64 = 4;

fn ms_to_ticks(ms: u64) -> u64 {
    cpu::counter_frequency() * ms / 1000
}

/// What every pCPU's runner shares.
static HOST: Once<Host<Hardware>> = Once::new();
/// The time of day, when the board has an RTC (for KVM PTP).
static WALL_CLOCK: Once<el2::services::wallclock::WallClock> = Once::new();

/// Records the RTC reading taken at boot.
pub fn set_wall_clock(epoch_secs: u64, counter: u64, hz: u64) {
    if let Some(clock) = el2::services::wallclock::WallClock::new(epoch_secs, counter, hz) {
        WALL_CLOCK.call_once(|| clock);
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
    let built = build_vms(&configs, placements, &mut ownership, &mut sched, fail_alloc);
    publish(built, sched, ownership, pcpus)
}

/// Creates each placed VM (under fault injection for the one `fail_alloc`
/// names) and reserves its scheduler entries; reports and leaves out the
/// ones that fail.
fn build_vms(
    configs: &[&VmConfig],
    placements: Vec<Result<VmPlacement, VmError>>,
    ownership: &mut OwnershipMap,
    sched: &mut Scheduler,
    fail_alloc: Option<&str>,
) -> Vec<Vm<Hardware>> {
    let several = configs.len() > 1;
    let mut built = Vec::new();
    for (config, placed) in configs.iter().zip(placements) {
        let created = placed.and_then(|placement| {
            let id = VmId(u16::try_from(built.len()).unwrap_or(u16::MAX));
            if fail_alloc == Some(config.name.as_str()) {
                create_failing_each_allocation(id, config, placement, ownership, several)
            } else {
                create_vm(
                    id,
                    config,
                    placement,
                    ownership,
                    several,
                    &heap::transaction(),
                )
            }
        });
        let created = created.and_then(|vm| {
            // Room in the scheduler now, so registering cannot fail later.
            match sched.reserve_vm(usize::from(vm.vcpu_count())) {
                Ok(()) => Ok(vm),
                Err(_) => {
                    release_ram(ownership, vm.id, vm.placement.ram);
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
    built
}

/// Gives the built VMs' vCPUs to the scheduler and publishes the host the
/// runners share; returns how many VMs will run.
fn publish(
    built: Vec<Vm<Hardware>>,
    mut sched: Scheduler,
    ownership: OwnershipMap,
    pcpus: &[(usize, Mpidr)],
) -> usize {
    // The vCPUs' clocks (run, steal) start once every VM is loaded: loading
    // (zeroing and copying hundreds of MiB) is not time a vCPU waited for a
    // pCPU, and it would show in its guest as stolen time.
    let now = cpu::counter();
    let mut vms = Vec::new();
    for vm in built {
        match el2::run::register_vcpus(&Hardware, &mut sched, &vm, now) {
            Ok(()) => vms.push(vm),
            Err(why) => log::error!("VM {} not started: {why}", vm.config.name),
        }
    }
    for vm in &vms {
        log::info!(
            "vm {}: {} vCPUs, {} MiB at host {:#x}, kernel at IPA {:#x}, DT at IPA {:#x}",
            vm.name,
            vm.vcpu_count(),
            vm.placement.ram.size >> 20,
            vm.placement.ram.base,
            vm.layout.kernel_entry,
            vm.layout.dtb_ipa
        );
    }
    let count = vms.len();
    let mpidrs = super::machine::PCPU_MPIDRS.call_once(|| {
        let mut mpidrs = Vec::new();
        for &(index, mpidr) in pcpus {
            if mpidrs.len() <= index {
                mpidrs.resize(index + 1, Mpidr::from_raw(0));
            }
            mpidrs[index] = mpidr;
        }
        mpidrs
    });
    let pcpu_count = mpidrs.len();
    HOST.call_once(|| Host::new(vms, sched, ownership, WALL_CLOCK.get().copied(), pcpu_count));
    count
}

/// Claims the VM's RAM and builds it inside the allocation transaction
/// `txn` (`el2::memory::heap`): if the heap refuses any of its allocations, the VM
/// is dropped, its RAM given back, and the error says it ran out of
/// hypervisor memory and while building what.
fn create_vm(
    id: VmId,
    config: &VmConfig,
    placement: VmPlacement,
    ownership: &mut OwnershipMap,
    several: bool,
    txn: &heap::Txn,
) -> Result<Vm<Hardware>, VmError> {
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
) -> Result<Vm<Hardware>, VmError> {
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
) -> Result<Vm<Hardware>, VmError> {
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
    let parts = VmParts {
        id,
        config: config.clone(),
        placement,
        layout,
        stage2,
        vttbr,
        several,
        vulnerabilities: cpu_vulnerabilities(),
    };
    Vm::build(&Hardware, parts, checkpoint)
}

/// What the guests are told about this CPU's speculation bugs, from its
/// ID registers; what the ID registers do not clear stays "vulnerable"
/// (the hypervisor applies no firmware mitigation on a guest's behalf).
fn cpu_vulnerabilities() -> el2::services::smccc::CpuVulnerabilities {
    use super::regs::ID_AA64PFR0_CSV as Csv;
    use el2::services::smccc::Exposure;
    let pfr0 = super::regs::id_aa64pfr0();
    let csv2 = pfr0.read(Csv::CSV2);
    let safe = |yes: bool| {
        if yes {
            Exposure::Unaffected
        } else {
            Exposure::Vulnerable
        }
    };
    el2::services::smccc::CpuVulnerabilities {
        spectre_v2: safe(csv2 >= 1),
        spectre_v4: Exposure::Vulnerable,
        spectre_bhb: safe(csv2 >= 3),
    }
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

/// The run loop of pCPU `pcpu`: runs vCPUs until every VM has powered
/// off. The boot CPU then prints the summary and powers off.
pub fn run(pcpu: usize) -> ! {
    let Some(host) = HOST.get() else { psci::park() };
    let mut runner = Runner::new(pcpu, host, Hardware);
    runner.run();
    if pcpu == 0 {
        host.print_summary(runner.machine());
        println!("el2: powering off");
        psci::power_off()
    }
    psci::park()
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
