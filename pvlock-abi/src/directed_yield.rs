//! Directed yield by hypercall: **this project's** vendor call
//! PV_SCHED_YIELD_TO, in KVM's vendor-hypervisor range (owner 6) next to
//! the seed-v2 PV-lock calls. No published guest uses it; the project's
//! guest driver does.
//!
//! A vCPU that waits for a sibling — typically a lock waiter that found the
//! lock holder preempted through the PV-lock "preempted" flag — asks the
//! hypervisor to give the rest of its own time slice to that sibling. It
//! is the hypercall form of what the hypervisor does by itself on a WFE
//! trap (`kvm_vcpu_on_spin`, docs/abi.md §6), for the case where the guest
//! knows whom it waits for; x86 KVM has the same thing as
//! `KVM_HC_SCHED_YIELD` (`Documentation/virt/kvm/x86/hypercalls.rst`).
//! The yield stays inside the caller's VM and inside the time the caller
//! already had, so no answer here can take time from another VM.
//!
//! | | |
//! |---|---|
//! | id | [`PV_SCHED_YIELD_TO`] = `0xC6000022` (fast, SMC64, owner 6, vendor function 0x22) |
//! | argument | X1 = target vCPU index (all 64 bits; the guest's logical CPU number, which is the vCPU index when CPUs come up in DT order, as for the openEuler KICK_CPU call, docs/abi.md §3) |
//! | X0 = 0 ([`YIELDED`]) | the caller's remaining slice went to the target; the call returns once the caller is scheduled again |
//! | X0 = 1 ([`NOT_YIELDED`]) | a valid sibling that could not take the slice (running, blocked, off, already handed a slice, not allowed on the caller's pCPU, or no slice left); the call returns at once |
//! | X0 = -1 ([`UNKNOWN_VCPU`], NOT_SUPPORTED) | no such vCPU in the caller's VM (or the call is not offered) |
//! | X0 = -3 ([`TO_SELF`], INVALID_PARAMETER) | the target is the caller |
//! | X1..X3 | zero |
//! | discovery | KVM_FEATURES bit [`KVM_FEATURES_BIT`] (34) and SMCCC_ARCH_FEATURES(`0xC6000022`) = 0 |
//!
//! The function number 0x22 follows the seed-v2 ids 0x20/0x21 and collides
//! with no call in docs/abi.md or in mainline KVM's list of vendor functions
//! (0 FEATURES, 1 PTP, 2..4 and 7 pKVM, 64/65 DISCOVER_IMPL_*, 127
//! FEATURES_2). Its KVM_FEATURES bit is its function number, by the "bit N
//! = vendor function N" rule used for bits 32/33
//! ([`crate::kvm::func::PV_LOCK_FEATURES`]). The same caution applies:
//! mainline *reserves* 2..=63 for pKVM ([`crate::kvm::func::PKVM_LAST`]),
//! so bit 34 overlaps `ARM_SMCCC_KVM_FUNC_PKVM_RESV_34`; do not advertise it
//! to a guest that might read that range as pKVM's.
//!
//! A hypervisor that offers this call also honours the PV-lock records'
//! `lock_count` extension ([`crate::pvlock`], "Extension: the lock count")
//! in its own directed-yield decisions.

use crate::catalog::Entry;
use crate::smccc::{self, FunctionId, Owner};

/// PV_SCHED_YIELD_TO, `0xC6000022` (fast, SMC64, owner 6, vendor function
/// 0x22): X1 = target vCPU index. See the module documentation for the
/// answers.
pub const PV_SCHED_YIELD_TO: FunctionId = FunctionId::fast64(Owner::VendorHypervisor, 0x22);

/// The KVM_FEATURES bit that advertises [`PV_SCHED_YIELD_TO`]: its vendor
/// function number, 34 (see the module documentation for the pKVM-range
/// caution).
pub const KVM_FEATURES_BIT: u16 = PV_SCHED_YIELD_TO.number();

/// X0 = 0 (SUCCESS): the caller yielded the rest of its slice to the target.
pub const YIELDED: i64 = smccc::SUCCESS;

/// X0 = 1: the target exists and is not the caller, but no yield happened
/// (it was not waiting for a pCPU, or could not take the caller's slice).
/// Positive, so it cannot be mistaken for an SMCCC error code.
pub const NOT_YIELDED: i64 = 1;

/// X0 = -1 (NOT_SUPPORTED): the index names no vCPU of the caller's VM, as
/// the openEuler KICK_CPU call answers for a bad index (docs/abi.md §3). Also
/// what a VM without the call gets for any index.
pub const UNKNOWN_VCPU: i64 = smccc::NOT_SUPPORTED;

/// X0 = -3 (INVALID_PARAMETER): the target is the caller itself.
pub const TO_SELF: i64 = smccc::INVALID_PARAMETER;

/// Every id of this service.
pub const IDS: &[FunctionId] = &[PV_SCHED_YIELD_TO];

/// Names for [`crate::describe`].
pub const CALLS: &[Entry] = &[Entry::new(PV_SCHED_YIELD_TO, "PV_SCHED_YIELD_TO")];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvm::func;
    use crate::pvlock::{Variant, anolis, seed_v2};

    #[test]
    fn id_and_bit() {
        assert_eq!(PV_SCHED_YIELD_TO.raw(), 0xC600_0022);
        assert!(PV_SCHED_YIELD_TO.is_fast() && PV_SCHED_YIELD_TO.is_smc64());
        assert_eq!(PV_SCHED_YIELD_TO.owner(), Owner::VendorHypervisor);
        assert_eq!(PV_SCHED_YIELD_TO.number(), 0x22);
        assert_eq!(KVM_FEATURES_BIT, 34);
        assert_eq!(func::PV_SCHED_YIELD_TO, KVM_FEATURES_BIT);
        // Next to seed-v2's 0x20 / 0x21, as bits 32 / 33 are.
        assert_eq!(
            seed_v2::PV_LOCK_PREEMPTED.number() + 1,
            PV_SCHED_YIELD_TO.number()
        );
        assert_eq!(func::PV_LOCK_PREEMPTED + 1, KVM_FEATURES_BIT);
    }

    #[test]
    fn collides_with_nothing_named() {
        // No mainline vendor function number (docs/abi.md §2).
        for mainline in [
            func::FEATURES,
            func::PTP,
            func::HYP_MEMINFO,
            func::MEM_SHARE,
            func::MEM_UNSHARE,
            func::MMIO_GUARD,
            func::DISCOVER_IMPL_VER,
            func::DISCOVER_IMPL_CPUS,
            func::FEATURES_2,
        ] {
            assert_ne!(KVM_FEATURES_BIT, mainline);
        }
        // No PV-lock variant's id, in any owner (docs/abi.md §3).
        for v in Variant::ALL {
            assert!(
                !v.function_ids().contains(&PV_SCHED_YIELD_TO),
                "{}",
                v.name()
            );
        }
        assert_ne!(PV_SCHED_YIELD_TO, anolis::PV_LOCK_FEATURES);
        // The catalog names it, once.
        assert_eq!(
            crate::describe(PV_SCHED_YIELD_TO),
            Some("PV_SCHED_YIELD_TO")
        );
    }

    #[test]
    fn answers() {
        assert_eq!(YIELDED, 0);
        assert_eq!(NOT_YIELDED, 1);
        assert_eq!(UNKNOWN_VCPU, -1);
        assert_eq!(TO_SELF, -3);
        assert_eq!(smccc::ret_to_x0(UNKNOWN_VCPU), u64::MAX);
        assert_eq!(smccc::ret_to_x0(NOT_YIELDED), 1);
    }
}
