//! Creating the VMs the platform describes: each is placed in host RAM,
//! its RAM claimed in the ownership map (and given back if anything after
//! fails), its RAM and boot modules mapped at EL2 and its stage-2 tables
//! built by the [`Machine`], its services and memory set up by
//! [`Vm::build`], its scheduler entries reserved; and `el2.fail-alloc=`'s
//! sweep, which creates one VM with each of its heap allocations refused
//! in turn and checks that each failure gives everything back.

use super::lifecycle::register_vcpus;
use super::machine::{Allocations, Machine, Refusal};
use super::vm::{Vm, VmParts};
use crate::guest::layout::{self, ImageHeader};
use crate::guest::placement::{self, HostMemory, OwnedRange, VmPlacement};
use crate::guest::{VmError, dt};
use crate::memory::layout::{MapKind, page_cover};
use crate::memory::ownership::{Owner, OwnershipMap};
use crate::sched::{CpuSet, Scheduler};
use crate::services::smccc::CpuVulnerabilities;
use crate::vcpu::VmId;
use alloc::string::String;
use alloc::vec::Vec;
use platform::{MemRange, Platform, VmConfig};

/// ID_AA64PFR0_EL1 in the ID register space (op0 3, op1 0, CRn 0).
const ID_AA64PFR0_CRM: u8 = 4;
const ID_AA64PFR0_OP2: u8 = 0;

/// Creates every VM the boot DT describes that can be placed and loaded,
/// and registers their vCPUs with a scheduler for the `pcpus` online;
/// reports the others (naming node and property) and leaves them out.
/// `fail_alloc` names a VM to create under fault injection
/// (`el2.fail-alloc=`, `create_failing_each_allocation`). Returns how
/// many VMs were created. The scheduler's slice is the binding's default
/// `time-slice-us`; each VM's own is set as its vCPUs are registered.
pub fn create_vms<M: Machine>(
    machine: &M,
    platform: &Platform,
    hypervisor: &[OwnedRange],
    pcpus: &[usize],
    fail_alloc: Option<&str>,
) -> (Vec<Vm<M>>, Scheduler, OwnershipMap) {
    let mut configs = Vec::new();
    for result in &platform.vms {
        match result {
            Ok(config) => configs.push(config),
            Err(error) => log::error!("VM not started: {error}"),
        }
    }
    let mut ownership = OwnershipMap::from_platform(platform);
    let mut online = CpuSet::default();
    for &index in pcpus {
        online.insert(index);
    }
    let slice_ticks = super::us_to_ticks(
        machine.counter_frequency(),
        u64::from(platform::vm::DEFAULT_TIME_SLICE_US),
    );
    let mut sched = Scheduler::new(online, slice_ticks);
    if configs.is_empty() {
        return (Vec::new(), sched, ownership);
    }
    let host = HostMemory {
        ram: &platform.memory,
        reserved: &platform.reserved,
        hypervisor,
    };
    let placements = placement::place(&host, &configs);

    for owned in hypervisor {
        let range = page_cover(owned.range);
        if let Err(e) = ownership.claim(range, Owner::Free, Owner::Hypervisor) {
            log::warn!("ownership: {} {range:x?}: {e}", owned.what);
        }
    }
    let built = build_vms(
        machine,
        &configs,
        placements,
        &mut ownership,
        &mut sched,
        fail_alloc,
    );
    // The vCPUs' clocks (run, steal) start once every VM is loaded: loading
    // (zeroing and copying hundreds of MiB) is not time a vCPU waited for a
    // pCPU, and it would show in its guest as stolen time.
    let now = machine.counter();
    let mut vms = Vec::new();
    for vm in built {
        match register_vcpus(machine, &mut sched, &vm, now) {
            Ok(()) => vms.push(vm),
            Err(why) => log::error!("VM {} not started: {why}", vm.config.name),
        }
    }
    (vms, sched, ownership)
}

/// Creates each placed VM (under fault injection for the one `fail_alloc`
/// names) and reserves its scheduler entries; reports and leaves out the
/// ones that fail.
fn build_vms<M: Machine>(
    machine: &M,
    configs: &[&VmConfig],
    placements: Vec<Result<VmPlacement, VmError>>,
    ownership: &mut OwnershipMap,
    sched: &mut Scheduler,
    fail_alloc: Option<&str>,
) -> Vec<Vm<M>> {
    let several = configs.len() > 1;
    let mut built = Vec::new();
    for (config, placed) in configs.iter().zip(placements) {
        let created = placed.and_then(|placement| {
            let id = VmId(u16::try_from(built.len()).unwrap_or(u16::MAX));
            if fail_alloc == Some(config.name.as_str()) {
                create_failing_each_allocation(machine, id, config, placement, ownership, several)
            } else {
                create_vm(
                    machine,
                    id,
                    config,
                    placement,
                    ownership,
                    several,
                    &machine.allocations(Refusal::None),
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

/// Claims the VM's RAM and builds it inside the allocation transaction
/// `txn` (`el2::memory::heap`): if the heap refuses any of its allocations, the VM
/// is dropped, its RAM given back, and the error says it ran out of
/// hypervisor memory and while building what.
fn create_vm<M: Machine>(
    machine: &M,
    id: VmId,
    config: &VmConfig,
    placement: VmPlacement,
    ownership: &mut OwnershipMap,
    several: bool,
    txn: &M::Txn,
) -> Result<Vm<M>, VmError> {
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
    let result = match build_vm(machine, id, config, placement, several, &checkpoint) {
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
fn create_failing_each_allocation<M: Machine>(
    machine: &M,
    id: VmId,
    config: &VmConfig,
    placement: VmPlacement,
    ownership: &mut OwnershipMap,
    several: bool,
) -> Result<Vm<M>, VmError> {
    let broken =
        |why: String| VmError::new(&config.node, "name", alloc::format!("fail-alloc: {why}"));
    let mut settled: Option<usize> = None;
    let mut failures = 0;
    for exhausted in [false, true] {
        for n in 0.. {
            let txn = machine.allocations(if exhausted {
                Refusal::From(n)
            } else {
                Refusal::Nth(n)
            });
            let result = create_vm(machine, id, config, placement, ownership, several, &txn);
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
            let total = machine.heap_in_use();
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
fn build_vm<M: Machine>(
    machine: &M,
    id: VmId,
    config: &VmConfig,
    placement: VmPlacement,
    several: bool,
    checkpoint: &dyn Fn(&str) -> Result<(), VmError>,
) -> Result<Vm<M>, VmError> {
    let fail = |property: &'static str, why: String| VmError::new(&config.node, property, why);
    let ram = placement.ram;
    for module in [Some(config.kernel), config.initrd].into_iter().flatten() {
        let range = page_cover(module);
        machine.map_at_el2(range, MapKind::ReadOnly).map_err(|e| {
            fail(
                "kernel",
                alloc::format!("cannot map the module at {range:x?}: {e}"),
            )
        })?;
    }
    machine
        .map_at_el2(ram, MapKind::ReadWrite)
        .map_err(|e| fail("memory", alloc::format!("cannot map the VM's memory: {e}")))?;
    checkpoint("the hypervisor's map of its memory")?;
    // The kernel module was just mapped read-only; placement checked its
    // size to be non-zero and inside host RAM.
    let header = machine.host_bytes(MemRange::new(
        config.kernel.base,
        config.kernel.size.min(ImageHeader::SIZE as u64),
    ));
    let layout = layout::plan(config, header)?;
    // Written now only to report errors before the VM exists (with the
    // PMU node, the larger tree); `load` writes it again with the reset
    // count.
    dt::build(config, &layout, 0, true)?;
    checkpoint("its device tree")?;
    // VMID 0 is left for "no VM".
    let vmid = u8::try_from(id.0 + 1).map_err(|_| fail("name", "too many VMs".into()))?;
    let (stage2, vttbr) = machine
        .stage2(vmid, layout.ram, ram.base)
        .map_err(|e| fail("memory", alloc::format!("stage 2: {e}")))?;
    checkpoint("its stage-2 tables")?;
    let parts = VmParts {
        id,
        config: config.clone(),
        placement,
        layout,
        stage2,
        vttbr,
        several,
        vulnerabilities: CpuVulnerabilities::from_id_aa64pfr0(
            machine.read_id_register(ID_AA64PFR0_CRM, ID_AA64PFR0_OP2),
        ),
    };
    Vm::build(machine, parts, checkpoint)
}
