//! The paravirtual driver ([`crate::pv`]) on the runtime: calls go through
//! the device tree's PSCI conduit (HVC under a hypervisor), records are
//! reached through the runtime's identity map (IPA = VA), and one driver
//! serves the whole guest.
//!
//! ```ignore
//! let info = rt::pv::init();          // boot CPU, once: probes
//! let records = rt::pv::init_cpu();   // every CPU, for itself
//! rt::pv::vcpu_is_preempted(cpu);     // anywhere
//! rt::pv::yield_to(cpu);              // a waiter, for a preempted sibling
//! ```
//!
//! [`RtParavirt`] is the runtime's backend for the PV-aware lock
//! ([`crate::lock`]).

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};

use pvlock_abi::FunctionId;
use spin::Once;

use super::{machine, mmu, percpu, psci, smp, time};
use crate::devicetree::{Conduit as Method, MAX_CPUS};
use crate::lock::Paravirt;
use crate::pv::{
    self, Conduit, CpuInit, HvcConduit, Kick, PvDriver, PvInfo, SharedMemory, SmcConduit,
    YieldResult,
};

const _: () = assert!(
    MAX_CPUS == pv::MAX_CPUS,
    "one record per CPU the runtime runs"
);

/// The runtime's platform: the PSCI conduit and the identity map.
#[derive(Clone, Copy, Debug, Default)]
pub struct RtPlatform;

impl Conduit for RtPlatform {
    fn call(&self, function: FunctionId, args: [u64; 3]) -> [u64; 4] {
        match psci::conduit() {
            Method::Hvc => HvcConduit::new().call(function, args),
            Method::Smc => SmcConduit::new().call(function, args),
        }
    }
}

impl SharedMemory for RtPlatform {
    fn map_shared(&self, ipa: u64, size: usize) -> Result<NonNull<u8>, &'static str> {
        mmu::map_shared(ipa, size as u64).map_err(|e| match e {
            crate::pagetable::MapError::LiveEntryChange { .. } => {
                "it is mapped as a device or read-only"
            }
            crate::pagetable::MapError::OutOfTables => "out of translation tables",
            crate::pagetable::MapError::BadRange { .. } => "beyond 48-bit addresses",
        })?;
        NonNull::new(ipa as *mut u8).ok_or("it is at address 0")
    }

    fn ipa_of(&self, address: *const u8) -> u64 {
        address as u64
    }
}

static DRIVER: Once<PvDriver<RtPlatform>> = Once::new();

/// Probes the hypervisor (the first call; later calls return the same
/// answer) and returns what it offers.
pub fn init() -> &'static PvInfo {
    DRIVER.call_once(|| PvDriver::new(RtPlatform)).info()
}

/// The driver, once [`init`] ran.
pub fn driver() -> Option<&'static PvDriver<RtPlatform>> {
    DRIVER.get()
}

/// Sets up the calling CPU's records ([`PvDriver::init_cpu`]); probes
/// first if nobody did.
pub fn init_cpu() -> CpuInit {
    init();
    let driver = driver().expect("init() just ran");
    let cpu = smp::current();
    let result = driver.init_cpu(cpu);
    let cell = driver
        .lock_count_cell(cpu)
        .map_or(core::ptr::null_mut(), |c| core::ptr::from_ref(c).cast_mut());
    percpu::this_cpu().lock_count.store(cell, Ordering::Relaxed);
    result
}

/// The calling CPU's `lock_count` cell, as [`init_cpu`] left it.
fn this_cpu_lock_count() -> Option<&'static AtomicU32> {
    let cell = percpu::this_cpu().lock_count.load(Ordering::Relaxed);
    // SAFETY: null, or stored by init_cpu on this CPU from a reference the
    // 'static driver handed out to a record that is never unmapped (and
    // this CPU reads back its own store).
    unsafe { cell.as_ref() }
}

/// Whether logical CPU `cpu` is preempted; false without PV-lock.
pub fn vcpu_is_preempted(cpu: usize) -> bool {
    driver().is_some_and(|d| d.vcpu_is_preempted(cpu))
}

/// Logical CPU `cpu`'s stolen time in ns; 0 without PV time.
pub fn steal_time(cpu: usize) -> u64 {
    driver().map_or(0, |d| d.steal_time(cpu))
}

/// Kicks logical CPU `cpu` out of a WFI-based wait (openEuler, Anolis); the
/// hypervisor's vCPU index comes from the CPU's MPIDR.
pub fn kick(cpu: usize) -> Kick {
    let Some(driver) = driver() else {
        return Kick::Unavailable;
    };
    match machine().cpus().get(cpu).and_then(|m| m.vcpu_index()) {
        Some(vcpu) => driver.kick(vcpu),
        // No vCPU has that MPIDR: as the hypervisor would answer.
        None => Kick::Refused(pvlock_abi::smccc::NOT_SUPPORTED),
    }
}

/// The hypervisor's vCPU index of logical CPU `cpu` (from its MPIDR).
fn vcpu_index(cpu: usize) -> Option<u64> {
    machine().cpus().get(cpu).and_then(|m| m.vcpu_index())
}

/// Gives the rest of this vCPU's time slice to logical CPU `cpu` with the
/// directed-yield call ([`PvDriver::yield_to`]); the hypervisor's vCPU
/// index comes from the CPU's MPIDR. [`YieldResult::Unavailable`] when the
/// call is not offered (or [`init`] has not run).
pub fn yield_to(cpu: usize) -> YieldResult {
    let Some(driver) = driver() else {
        return YieldResult::Unavailable;
    };
    match vcpu_index(cpu) {
        Some(vcpu) => driver.yield_to(vcpu),
        // No vCPU has that MPIDR: as the hypervisor would answer.
        None if driver.info().directed_yield => YieldResult::UnknownVcpu,
        None => YieldResult::Unavailable,
    }
}

/// The calling CPU took a lock: one more in its PV-lock record's
/// `lock_count` (as [`PvDriver::lock_acquired`], through the cell
/// [`init_cpu`] kept in the per-CPU block); nothing without a record.
#[inline]
pub fn lock_acquired() {
    if let Some(count) = this_cpu_lock_count() {
        pvlock_abi::pvlock::lock_count_add(count, true);
    }
}

/// The calling CPU dropped a lock (as [`PvDriver::lock_released`]; see
/// [`lock_acquired`]).
#[inline]
pub fn lock_released() {
    if let Some(count) = this_cpu_lock_count() {
        pvlock_abi::pvlock::lock_count_add(count, false);
    }
}

/// The runtime's [`Paravirt`] backend for [`crate::lock::TicketLock`]:
/// CPUs are the runtime's logical CPU numbers, the preempted flag and the
/// lock count are the driver's records, directed yield is
/// PV_SCHED_YIELD_TO. Without [`init`] (or without the services) it is a
/// plain ticket lock's: never preempted, no yield, no count.
///
/// ```ignore
/// static COUNTER: TicketLock<u64, RtParavirt> = TicketLock::with_paravirt(0, RtParavirt);
/// *COUNTER.lock() += 1;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct RtParavirt;

impl Paravirt for RtParavirt {
    fn this_cpu(&self) -> usize {
        smp::current()
    }

    fn vcpu_is_preempted(&self, cpu: usize) -> bool {
        vcpu_is_preempted(cpu)
    }

    fn yield_to(&self, cpu: usize) -> YieldResult {
        yield_to(cpu)
    }

    fn lock_acquired(&self) {
        lock_acquired();
    }

    fn lock_released(&self) {
        lock_released();
    }

    /// When the hypervisor offers a kick call.
    fn can_halt(&self) -> bool {
        driver().is_some_and(|d| d.info().kick)
    }

    /// WFI for at most [`WAIT_BOUND`]: a kick ends it sooner.
    fn wait(&self) {
        time::wfi_until(time::counter().saturating_add(time::to_ticks(WAIT_BOUND)));
    }

    fn kick(&self, cpu: usize) -> Kick {
        kick(cpu)
    }
}

/// The longest a lock waiter sleeps in [`RtParavirt`]'s wait without a
/// kick: a bound for a lost kick (a hypervisor that does not latch kicks,
/// or one whose WFI is not trapped), not a time the lock relies on.
pub const WAIT_BOUND: core::time::Duration = core::time::Duration::from_millis(10);
