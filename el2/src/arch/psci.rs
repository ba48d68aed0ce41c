//! Calls to the firmware's PSCI (Arm DEN0022) through the conduit the host
//! device tree names. These are the hypervisor's own requests to EL3 (or
//! QEMU's emulation of it), never a guest's.

use core::sync::atomic::{AtomicU8, Ordering};
use platform::Conduit;
use smccc::{Hvc, Smc, psci};

const UNKNOWN: u8 = 0;
const SMC: u8 = 1;
const HVC: u8 = 2;

/// The conduit, once the device tree has been read.
static CONDUIT: AtomicU8 = AtomicU8::new(UNKNOWN);

pub fn set_conduit(conduit: Conduit) {
    let value = match conduit {
        Conduit::Smc => SMC,
        Conduit::Hvc => HVC,
    };
    CONDUIT.store(value, Ordering::Release);
}

/// PSCI CPU_ON (64-bit): starts `mpidr` at physical address `entry` at EL2
/// with x0 = `context`. Returns the PSCI error code on failure.
pub fn cpu_on(mpidr: u64, entry: u64, context: u64) -> Result<(), i32> {
    let result = match CONDUIT.load(Ordering::Acquire) {
        SMC => psci::cpu_on::<Smc>(mpidr, entry, context),
        HVC => psci::cpu_on::<Hvc>(mpidr, entry, context),
        _ => Err(psci::Error::NotSupported),
    };
    result.map_err(|e| i32::try_from(i64::from(e)).unwrap_or(i32::MIN))
}

/// PSCI SYSTEM_OFF. Returns only when there is no conduit yet or the
/// firmware refused; the caller then parks the CPU.
pub fn system_off() {
    let _ = match CONDUIT.load(Ordering::Acquire) {
        SMC => psci::system_off::<Smc>(),
        HVC => psci::system_off::<Hvc>(),
        _ => Ok(()),
    };
}

/// Stops this CPU for good (interrupts masked, waiting for events that
/// change nothing).
pub use boot::handover::park;

/// Powers the machine off; parks if that is impossible.
pub fn power_off() -> ! {
    system_off();
    park()
}
