//! Anolis (Alibaba Cloud kernel) PV lock and PV qspinlock. docs/abi.md §3.
//!
//! Three SMC64 calls in KVM's vendor range (owner 6, function numbers
//! 0xB0..0xB2) and a kick call that sits in the **standard-hypervisor**
//! range (owner 5, function 0xB3) — the owner really differs; it is kept
//! exactly as docs/abi.md §3 gives it.
//!
//! Guest sequence: SMCCC ≥ 1.1, `SMCCC_ARCH_FEATURES(PV_LOCK_FEATURES)`
//! answers 0, then per CPU `PV_LOCK_PREEMPTED(x1 = IPA of its own
//! VcpuState)`. With `pvqspinlock`, `SMCCC_ARCH_FEATURES(PV_QSPINLOCK_FEATURES)`
//! answers 0 and the unlocker calls `PV_QSPINLOCK_KICK_CPU(x1 = cpu)`.

use crate::catalog::Entry;
use crate::smccc::{FunctionId, Owner};

/// PV_LOCK_FEATURES, `0xC60000B0`: probed with SMCCC_ARCH_FEATURES; 0 when
/// the preempted service is available. docs/abi.md §3.
pub const PV_LOCK_FEATURES: FunctionId = FunctionId::fast64(Owner::VendorHypervisor, 0xB0);

/// PV_LOCK_PREEMPTED, `0xC60000B1` (x1 = IPA of the calling vCPU's
/// guest-allocated [`VcpuState`]): 0 or -1. docs/abi.md §3.
pub const PV_LOCK_PREEMPTED: FunctionId = FunctionId::fast64(Owner::VendorHypervisor, 0xB1);

/// PV_QSPINLOCK_FEATURES, `0xC60000B2`: probed with SMCCC_ARCH_FEATURES; 0
/// when the kick call is available. docs/abi.md §3.
pub const PV_QSPINLOCK_FEATURES: FunctionId = FunctionId::fast64(Owner::VendorHypervisor, 0xB2);

/// PV_QSPINLOCK_KICK_CPU, `0xC50000B3` (x1 = target vCPU index): wake the
/// target from its WFI wait. Note owner 5, not 6. docs/abi.md §3.
pub const PV_QSPINLOCK_KICK_CPU: FunctionId = FunctionId::fast64(Owner::StandardHypervisor, 0xB3);

/// The per-vCPU structure as docs/abi.md gives it: `le32 preempted; u8 pad[60]`,
/// allocated by the guest. See [`super::VcpuState32`] for the note on Anolis
/// trees that read the field as `le64`. docs/abi.md §3.
pub type VcpuState = super::VcpuState32;

/// Every id of this variant.
pub const IDS: &[FunctionId] = &[
    PV_LOCK_FEATURES,
    PV_LOCK_PREEMPTED,
    PV_QSPINLOCK_FEATURES,
    PV_QSPINLOCK_KICK_CPU,
];

/// Names for [`crate::describe`].
pub const CALLS: &[Entry] = &[
    Entry::new(PV_LOCK_FEATURES, "PV_LOCK_FEATURES(anolis)"),
    Entry::new(PV_LOCK_PREEMPTED, "PV_LOCK_PREEMPTED(anolis)"),
    Entry::new(PV_QSPINLOCK_FEATURES, "PV_QSPINLOCK_FEATURES(anolis)"),
    Entry::new(PV_QSPINLOCK_KICK_CPU, "PV_QSPINLOCK_KICK_CPU(anolis)"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_abi_md() {
        assert_eq!(PV_LOCK_FEATURES.raw(), 0xC60000B0);
        assert_eq!(PV_LOCK_PREEMPTED.raw(), 0xC60000B1);
        assert_eq!(PV_QSPINLOCK_FEATURES.raw(), 0xC60000B2);
        assert_eq!(PV_QSPINLOCK_KICK_CPU.raw(), 0xC50000B3);
        for id in IDS {
            assert!(id.is_fast() && id.is_smc64());
        }
        assert_eq!(PV_LOCK_FEATURES.owner(), Owner::VendorHypervisor);
        assert_eq!(PV_QSPINLOCK_KICK_CPU.owner(), Owner::StandardHypervisor);
        assert_eq!(core::mem::size_of::<VcpuState>(), 64);
    }
}
