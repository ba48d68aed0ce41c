//! PSCI (Arm DEN0022) calls to the guest's firmware, i.e. its hypervisor
//! (or QEMU's emulation on a bare machine), through the conduit its device
//! tree names. Function ids and return codes come from `pvlock_abi::psci`;
//! the `smccc` crate only makes the HVC/SMC.

use crate::devicetree::Conduit;
use crate::mpidr::Mpidr;
use core::fmt;
use core::sync::atomic::{AtomicU8, Ordering};
use pvlock_abi::FunctionId;
use pvlock_abi::psci::{self, error};
use smccc::{Call, Hvc, Smc};

const HVC: u8 = 0;
const SMC: u8 = 1;

/// The conduit. A guest's PSCI is its hypervisor's, so HVC until the device
/// tree says otherwise.
static CONDUIT: AtomicU8 = AtomicU8::new(HVC);

/// Sets the conduit (from the device tree's `/psci` `method`).
pub fn set_conduit(conduit: Conduit) {
    CONDUIT.store(
        match conduit {
            Conduit::Hvc => HVC,
            Conduit::Smc => SMC,
        },
        Ordering::Relaxed,
    );
}

/// The conduit in use.
pub fn conduit() -> Conduit {
    match CONDUIT.load(Ordering::Relaxed) {
        SMC => Conduit::Smc,
        _ => Conduit::Hvc,
    }
}

/// A PSCI error code (negative `int32`, DEN0022 "Return error codes").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PsciError(pub i32);

impl fmt::Display for PsciError {
    /// `-4 (ALREADY_ON)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({})",
            self.0,
            error::name(self.0).unwrap_or("unknown")
        )
    }
}

/// An SMC32/HVC32 call with up to three arguments; returns W0 as `int32`.
fn call32(function: FunctionId, args: [u32; 3]) -> i32 {
    let args = [args[0], args[1], args[2], 0, 0, 0, 0];
    let ret = match conduit() {
        Conduit::Hvc => Hvc::call32(function.raw(), args),
        Conduit::Smc => Smc::call32(function.raw(), args),
    };
    ret[0] as i32
}

/// An SMC64/HVC64 call with up to three arguments; returns X0.
fn call64(function: FunctionId, args: [u64; 3]) -> i64 {
    let mut all = [0u64; 17];
    all[..3].copy_from_slice(&args);
    let ret = match conduit() {
        Conduit::Hvc => Hvc::call64(function.raw(), all),
        Conduit::Smc => Smc::call64(function.raw(), all),
    };
    ret[0] as i64
}

/// PSCI answers are `int32`, sign-extended into X0 by SMC64 callees; a
/// value outside `int32` is a broken callee, kept recognisable.
fn to_result(x0: i64) -> Result<i32, PsciError> {
    let value = i32::try_from(x0).unwrap_or(i32::MIN);
    if value < 0 {
        Err(PsciError(value))
    } else {
        Ok(value)
    }
}

/// PSCI_VERSION: (major, minor).
pub fn version() -> Result<(u16, u16), PsciError> {
    let v = to_result(i64::from(call32(psci::PSCI_VERSION, [0; 3])))?;
    Ok(((v >> 16) as u16, v as u16))
}

/// PSCI_FEATURES: the feature flags of `function`, or NOT_SUPPORTED.
pub fn features(function: FunctionId) -> Result<i32, PsciError> {
    to_result(i64::from(call32(
        psci::PSCI_FEATURES,
        [function.raw(), 0, 0],
    )))
}

/// CPU_ON (SMC64): starts `target` at `entry` (a physical address, entered
/// at EL1 with the MMU off) with x0 = `context`.
pub fn cpu_on(target: Mpidr, entry: u64, context: u64) -> Result<(), PsciError> {
    to_result(call64(psci::CPU_ON64, [target.raw(), entry, context])).map(|_| ())
}

/// AFFINITY_INFO (SMC64) of one CPU (lowest affinity level 0): one of
/// `psci::AFFINITY_ON`, `AFFINITY_OFF`, `AFFINITY_ON_PENDING`.
pub fn affinity_info(target: Mpidr) -> Result<i32, PsciError> {
    to_result(call64(psci::AFFINITY_INFO64, [target.raw(), 0, 0]))
}

/// CPU_OFF: powers this CPU down. Returns only if the call failed.
pub fn cpu_off() -> PsciError {
    match to_result(i64::from(call32(psci::CPU_OFF, [0; 3]))) {
        Err(e) => e,
        // DEN0022: CPU_OFF never returns on success; returning 0 is an
        // answer no valid caller can act on.
        Ok(_) => PsciError(error::INTERNAL_FAILURE),
    }
}

/// SYSTEM_OFF. If the firmware refuses or returns, parks this CPU.
pub fn system_off() -> ! {
    let _ = call32(psci::SYSTEM_OFF, [0; 3]);
    park()
}

/// SYSTEM_RESET. If the firmware refuses or returns, parks this CPU.
pub fn system_reset() -> ! {
    let _ = call32(psci::SYSTEM_RESET, [0; 3]);
    park()
}

/// Stops this CPU for good: interrupts are masked, events change nothing.
pub use boot::handover::park;
