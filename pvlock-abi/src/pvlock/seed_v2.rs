//! PV lock, seed series v2 / 2022 RFC: two SMC64 calls in KVM's vendor
//! range (vendor function numbers 0x20 and 0x21). docs/abi.md §3.
//!
//! Guest sequence: SMCCC ≥ 1.1, then `SMCCC_ARCH_FEATURES(PV_LOCK_FEATURES)`
//! must answer 0, then `PV_LOCK_FEATURES(PV_LOCK_PREEMPTED)` must answer 0,
//! then per CPU `PV_LOCK_PREEMPTED` returns the IPA of that vCPU's
//! [`VcpuState`]. Reference: the 2022 RFC "KVM: arm64: Support pvlock
//! preempted via shared structure" (`ARM_SMCCC_HV_PV_LOCK_FEATURES` /
//! `_PREEMPTED` = `ARM_SMCCC_CALL_VAL(FAST, SMC_64, VENDOR_HYP, 0x20/0x21)`).

use crate::catalog::Entry;
use crate::smccc::{FunctionId, Owner};

/// PV_LOCK_FEATURES, `0xC6000020` (x1 = function ID): 0 for
/// [`PV_LOCK_FEATURES`] and [`PV_LOCK_PREEMPTED`] when enabled, else -1.
/// Itself probed with SMCCC_ARCH_FEATURES. docs/abi.md §3.
pub const PV_LOCK_FEATURES: FunctionId = FunctionId::fast64(Owner::VendorHypervisor, 0x20);

/// PV_LOCK_PREEMPTED, `0xC6000021`: returns the IPA of the calling vCPU's
/// [`VcpuState`] in X0 (hypervisor-allocated, zero from VM load), or -1.
/// docs/abi.md §3.
pub const PV_LOCK_PREEMPTED: FunctionId = FunctionId::fast64(Owner::VendorHypervisor, 0x21);

/// The per-vCPU structure: `le64 preempted; u8 pad[56]`. docs/abi.md §3.
pub type VcpuState = super::VcpuState64;

/// Every id of this variant.
pub const IDS: &[FunctionId] = &[PV_LOCK_FEATURES, PV_LOCK_PREEMPTED];

/// Names for [`crate::describe`].
pub const CALLS: &[Entry] = &[
    Entry::new(PV_LOCK_FEATURES, "PV_LOCK_FEATURES(seed-v2)"),
    Entry::new(PV_LOCK_PREEMPTED, "PV_LOCK_PREEMPTED(seed-v2)"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_abi_md() {
        assert_eq!(PV_LOCK_FEATURES.raw(), 0xC6000020);
        assert_eq!(PV_LOCK_PREEMPTED.raw(), 0xC6000021);
        for id in IDS {
            assert!(id.is_fast() && id.is_smc64());
            assert_eq!(id.owner(), Owner::VendorHypervisor);
        }
        assert_eq!(PV_LOCK_FEATURES.number(), 0x20);
        assert_eq!(PV_LOCK_PREEMPTED.number(), 0x21);
        assert_eq!(core::mem::size_of::<VcpuState>(), 64);
    }
}
