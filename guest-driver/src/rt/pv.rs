//! The paravirtual driver ([`crate::pv`]) on the runtime: calls go through
//! the device tree's PSCI conduit (HVC under a hypervisor), records are
//! reached through the runtime's identity map (IPA = VA), and one driver
//! serves the whole guest.
//!
//! ```ignore
//! let info = rt::pv::init();          // boot CPU, once: probes
//! let records = rt::pv::init_cpu();   // every CPU, for itself
//! rt::pv::vcpu_is_preempted(cpu);     // anywhere
//! ```

use core::ptr::NonNull;

use pvlock_abi::FunctionId;
use spin::Once;

use super::{machine, mmu, psci, smp};
use crate::devicetree::{Conduit as Method, MAX_CPUS};
use crate::pv::{
    self, Conduit, CpuInit, HvcConduit, Kick, PvDriver, PvInfo, SharedMemory, SmcConduit,
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
            crate::pagetable::MapError::LiveEntryChange { .. } => "it is mapped as a device",
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
    driver.init_cpu(smp::current())
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
