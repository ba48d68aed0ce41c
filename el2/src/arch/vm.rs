//! VM creation and the run loop's start: every VM the platform describes
//! is placed, its RAM and boot modules mapped at EL2 and claimed in the
//! ownership map, its stage-2 tables built, and its services and memory
//! set up by `el2::run::Vm::build`; then each pCPU hands itself to the
//! portable runner (`el2::run::Runner`) over [`Hardware`].

use super::machine::Hardware;
use super::regs::{COUNT64, VPIDR_EL2};
use super::stage2::{self};
use super::{gicv, psci, timer};
use crate::println;
use aarch64_cpu::registers::*;
use alloc::vec::Vec;
use el2::guest::placement::OwnedRange;
use el2::memory::ownership::OwnershipMap;
use el2::run::{Host, Runner, Vm};
use el2::sched::Scheduler;
use platform::{Mpidr, Platform};
use spin::Once;
use tock_registers::interfaces::{Readable, Writeable};

/// What every pCPU's runner shares.
static HOST: Once<Host<Hardware>> = Once::new();
/// The time of day, when the board has an RTC (for KVM PTP).
static WALL_CLOCK: Once<el2::services::wallclock::WallClock> = Once::new();

/// Records the RTC reading taken at boot; the clock, unless the counter
/// frequency is unknown.
pub fn set_wall_clock(
    epoch_secs: u64,
    counter: u64,
    hz: u64,
) -> Option<el2::services::wallclock::WallClock> {
    let clock = el2::services::wallclock::WallClock::new(epoch_secs, counter, hz)?;
    Some(*WALL_CLOCK.call_once(|| clock))
}

/// Creates every VM the boot DT describes that can be placed and loaded
/// (`el2::run::create_vms`, which reports the others) and publishes them
/// to the runners. `fail_alloc` names a VM to create under fault
/// injection (`el2.fail-alloc=`). Returns how many VMs were created.
pub fn create_vms(
    platform: &Platform,
    hypervisor: &[OwnedRange],
    pcpus: &[(usize, Mpidr)],
    fail_alloc: Option<&str>,
) -> usize {
    let online: Vec<usize> = pcpus.iter().map(|&(index, _)| index).collect();
    let (vms, sched, ownership) =
        el2::run::create_vms(&Hardware, platform, hypervisor, &online, fail_alloc);
    publish(vms, sched, ownership, pcpus)
}

/// Publishes the host the runners share; returns how many VMs will run.
fn publish(
    vms: Vec<Vm<Hardware>>,
    sched: Scheduler,
    ownership: OwnershipMap,
    pcpus: &[(usize, Mpidr)],
) -> usize {
    for vm in &vms {
        log::info!(
            "vm {}: {} vCPUs, {} us slices, {} MiB at host {:#x}, kernel at IPA {:#x}, DT at IPA {:#x}",
            vm.name,
            vm.vcpu_count(),
            vm.config.time_slice_us,
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
