//! The secondary CPUs: started with PSCI CPU_ON, each sets itself up, takes
//! part in the boot-time tick check and then waits for the boot CPU to
//! start VMs; and stopping the other CPUs when one reports a fatal error.

use super::{
    BOOT_ARGS, CPUS, PLATFORM, RUN_VMS, TICK_CHECK_DONE, TICK_CHECK_GO, panic_with_the_others,
};
use super::{cpu, exceptions, gic, head, irq, psci, timer, vm};
use crate::println;
use aarch64_cpu::registers::ID_AA64DFR0_EL1;
use core::sync::atomic::{AtomicBool, Ordering};
use el2::bringup::bootargs::{BootArgs, SelfTest};
use el2::bringup::percpu::PerCpu;
use el2::bringup::smp::CpuStarter;
use el2::trap::pmu::PmuFeatures;
use platform::{Cpu, Platform};
use tock_registers::interfaces::Readable;

/// How long a secondary CPU has to report in after CPU_ON.
const CPU_ON_TIMEOUT_MS: u32 = 2000;

pub(super) fn node_of<'a>(order: &[&'a Cpu], index: usize) -> &'a str {
    order.get(index).map_or("?", |c| c.node.as_str())
}

/// Secondary CPUs' Rust entry, from `head.rs`, with the final map on.
pub extern "C" fn secondary_main(index: usize) -> ! {
    cpu::clear_current();
    cpu::init_el2_registers(exceptions::vector_base());
    let (Some(cpus), Some(platform)) = (CPUS.get(), PLATFORM.get()) else {
        psci::park()
    };
    let Some(this) = cpus.get(index) else {
        psci::park()
    };
    cpu::set_current(this);
    if this.mpidr != cpu::current_mpidr() {
        log::error!(
            "started as cpu {index} but MPIDR is {}",
            cpu::current_mpidr()
        );
        psci::park();
    }
    if let Err(error) = init_cpu_interrupts(platform, this) {
        log::error!("GIC: {error}");
        psci::park();
    }
    this.mark_online();
    log::debug!("online");

    sleep_until_set(&TICK_CHECK_GO);
    if let Some(args) = BOOT_ARGS.get()
        && args.tick_check_ms > 0
    {
        count_ticks(args.tick_check_ms);
    }
    TICK_CHECK_DONE.fetch_add(1, Ordering::AcqRel);
    if BOOT_ARGS
        .get()
        .is_some_and(|args| args.selftest == Some(SelfTest::PanicAll))
    {
        panic_with_the_others();
    }
    // Either the boot CPU starts VMs, or it powers the machine off.
    sleep_until_set(&RUN_VMS);
    vm::init_pcpu_for_guests();
    vm::run(index)
}

/// Waits, asleep, until the boot CPU sets `flag`: WFI with interrupts
/// masked and the EL2 timer as a 1 ms alarm clock (a pending interrupt
/// ends a WFI whatever PSTATE.I says, Arm ARM D1.6.2 "Wait for
/// Interrupt"; stopping the timer lowers its level-sensitive PPI again).
/// A WFE loop woken by the boot CPU's SEV would do on hardware, but QEMU's
/// TCG treats WFE as a mere yield: with 64 CPUs spinning on 2 host cores,
/// the CPU being started got too little time to report within
/// `CPU_ON_TIMEOUT_MS`.
pub(super) fn sleep_until_set(flag: &AtomicBool) {
    let nap = cpu::counter_frequency() / 1000;
    while !flag.load(Ordering::Acquire) {
        timer::arm_at(cpu::counter() + nap);
        aarch64_cpu::asm::wfi();
        timer::stop();
    }
}

pub(super) fn init_cpu_interrupts(platform: &Platform, this: &PerCpu) -> Result<(), &'static str> {
    // SAFETY: every redistributor region is in the final map as device
    // memory, and this runs on the CPU whose MPIDR is `this.mpidr`.
    let interface = unsafe { gic::init_cpu(&platform.gic, this.mpidr) }?;
    interface.enable_ppi_level(platform.timer.hyp_phys.intid());
    // The running guest's virtual timer and the virtual CPU interface's
    // maintenance interrupt both exit the guest to EL2 (HCR_EL2.IMO).
    interface.enable_ppi_level(platform.timer.virt.intid());
    interface.enable_ppi_level(maintenance_intid(platform));
    // The PMU's overflow interrupt, when guests get the PMU: the running
    // vCPU's.
    if PmuFeatures::from_cpu(ID_AA64DFR0_EL1.get(), 0).is_some() {
        interface.enable_ppi_level(PMU_INTID);
    }
    interface.enable_sgi(u32::from(irq::RESCHEDULE_SGI));
    interface.enable_sgi(u32::from(irq::STOP_SGI));
    gic::remember(this.index, &interface);
    Ok(())
}

/// The PMU's overflow interrupt: PPI 7 (INTID 23), the Server Base System
/// Architecture's assignment, which QEMU `virt` follows (its DT's `/pmu`
/// node says so; el2 does not read that node).
pub(super) const PMU_INTID: u32 = 23;

/// Sends the stop SGI to every other online CPU (the fatal-error path).
/// A CPU running a guest exits to EL2 and parks in the IRQ handler; an
/// idle one parks at its next interrupt. A CPU spinning at EL2 with
/// interrupts masked does not stop, but the power-off that follows the
/// report stops the machine.
pub fn stop_other_cpus() {
    let Some(cpus) = CPUS.get() else {
        return;
    };
    let this = cpu::current().map(|c| c.index);
    for other in cpus.iter() {
        if Some(other.index) != this && other.is_online() {
            gic::send_sgi(other.mpidr, irq::STOP_SGI);
        }
    }
}

/// The maintenance interrupt's INTID: the GIC node's `interrupts`, else
/// PPI 9 (INTID 25), the Server Base System Architecture's assignment that
/// QEMU `virt` and the Kunpeng boards follow.
pub(super) fn maintenance_intid(platform: &Platform) -> u32 {
    const SBSA_MAINTENANCE_INTID: u32 = 25;
    platform
        .gic
        .maintenance_irq
        .map_or(SBSA_MAINTENANCE_INTID, |irq| irq.intid())
}

/// Counts this CPU's ticks for `window_ms` with interrupts unmasked.
pub(super) fn count_ticks(window_ms: u32) {
    let window = cpu::counter_frequency() * u64::from(window_ms) / 1000;
    let end = cpu::counter() + window;
    timer::start();
    // SAFETY: unmasking IRQs at EL2 only lets the tick handler run between
    // instructions of this loop; it touches nothing this code holds.
    unsafe { core::arch::asm!("msr daifclr, #2", options(nomem, nostack)) };
    while cpu::counter() < end {
        aarch64_cpu::asm::wfi();
    }
    // SAFETY: as above; masks them again.
    unsafe { core::arch::asm!("msr daifset, #2", options(nomem, nostack)) };
    timer::stop();
}

pub(super) fn tick_check(cpus: &[PerCpu], online: &[usize], args: &BootArgs) {
    count_ticks(args.tick_check_ms);
    // The others started at about the same time; allow them the window again
    // plus the CPU_ON timeout before declaring one stuck.
    let deadline = cpu::counter()
        + cpu::counter_frequency() * u64::from(args.tick_check_ms + CPU_ON_TIMEOUT_MS) / 1000;
    while TICK_CHECK_DONE.load(Ordering::Acquire) + 1 < online.len() && cpu::counter() < deadline {
        core::hint::spin_loop();
    }
    let expected = args.tick_check_ms / args.tick_ms;
    for &index in online {
        let cpu = &cpus[index];
        println!(
            "tick: cpu {index} mpidr {}: {} ticks in {} ms (expected {expected})",
            cpu.mpidr,
            cpu.ticks(),
            args.tick_check_ms
        );
        if cpu.other_irqs() > 0 {
            log::warn!("cpu {index}: {} unexpected interrupts", cpu.other_irqs());
        }
    }
}

/// Starts secondaries with PSCI CPU_ON at `head::secondary_entry`.
pub(super) struct PsciStarter;

impl CpuStarter for PsciStarter {
    fn start(&mut self, index: usize, cpu: &Cpu) -> Result<(), i32> {
        let entry = head::secondary_entry as *const () as u64;
        psci::cpu_on(cpu.mpidr.value(), entry, index as u64)
    }

    fn wait_online(&mut self, index: usize) -> bool {
        let Some(cpus) = CPUS.get() else {
            return false;
        };
        let deadline =
            cpu::counter() + cpu::counter_frequency() * u64::from(CPU_ON_TIMEOUT_MS) / 1000;
        while cpu::counter() < deadline {
            if cpus[index].is_online() {
                return true;
            }
            core::hint::spin_loop();
        }
        cpus[index].is_online()
    }

    fn timeout_ms(&self) -> u32 {
        CPU_ON_TIMEOUT_MS
    }
}
