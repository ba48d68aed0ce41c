//! PV lock, seed series v3 (2020): one SMC32 call multiplexed by x1, on
//! vendor function 1 — the number mainline later gave to KVM_PTP.
//! docs/abi.md §3.
//!
//! Guest sequence: KVM detected (Call UID) and KVM_FEATURES bit
//! [`KVM_FEATURES_BIT`] (1) set, then `PV_LOCK(x1 = ARG_FEATURES)` answers 0,
//! then per CPU `PV_LOCK(x1 = ARG_PREEMPTED)` returns the IPA of that vCPU's
//! [`VcpuState`] or -1. Reference: "[PATCH v3] KVM: arm64: ... PV lock"
//! (`ARM_SMCCC_VENDOR_HYP_KVM_PV_LOCK_FUNC_ID` =
//! `ARM_SMCCC_CALL_VAL(FAST, SMC_32, VENDOR_HYP, 1)`, `KVM_PV_LOCK_FEATURES 0`,
//! `KVM_PV_LOCK_PREEMPTED 1`).
//!
//! Although the call is SMC32, the PREEMPTED answer is a 64-bit IPA: write
//! all of X0 (as the seed host did through `smccc_set_retval`).
//!
//! Conflict: the id equals [`crate::kvm::PTP`]; a VM gets one or the other.

use crate::catalog::Entry;
use crate::smccc::{FunctionId, Owner};

/// PV_LOCK, `0x86000001` (SMC32, vendor function 1), multiplexed by x1.
/// Same value as [`crate::kvm::PTP`] (documented clash). docs/abi.md §3.
pub const PV_LOCK: FunctionId = FunctionId::fast32(Owner::VendorHypervisor, 0x0001);

/// x1 = 0: KVM_PV_LOCK_FEATURES; answers 0 (SUCCESS) when available.
/// docs/abi.md §3.
pub const ARG_FEATURES: u64 = 0;

/// x1 = 1: KVM_PV_LOCK_PREEMPTED; answers the IPA of the vCPU's
/// [`VcpuState`] or -1. docs/abi.md §3.
pub const ARG_PREEMPTED: u64 = 1;

/// The KVM_FEATURES bit that advertises this call: its vendor function
/// number, 1 (shared with [`crate::kvm::func::PTP`]). docs/abi.md §3.
pub const KVM_FEATURES_BIT: u16 = PV_LOCK.number();

/// The per-vCPU structure: `le64 preempted; u8 pad[56]`. docs/abi.md §3.
pub type VcpuState = super::VcpuState64;

/// Every id of this variant.
pub const IDS: &[FunctionId] = &[PV_LOCK];

/// Names for [`crate::describe`]: none of its own — `0x86000001` is listed
/// once, in [`crate::kvm::CALLS`], under both meanings.
pub const CALLS: &[Entry] = &[];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_abi_md() {
        assert_eq!(PV_LOCK.raw(), 0x86000001);
        assert!(PV_LOCK.is_fast() && !PV_LOCK.is_smc64());
        assert_eq!(PV_LOCK.owner(), Owner::VendorHypervisor);
        assert_eq!(PV_LOCK, crate::kvm::PTP);
        assert_eq!(ARG_FEATURES, 0);
        assert_eq!(ARG_PREEMPTED, 1);
        assert_eq!(KVM_FEATURES_BIT, 1);
        assert_eq!(KVM_FEATURES_BIT, crate::kvm::func::PTP);
        assert_eq!(core::mem::size_of::<VcpuState>(), 64);
    }
}
