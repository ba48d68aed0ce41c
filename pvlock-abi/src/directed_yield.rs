//! Directed yield by hypercall: **this project's** vendor call
//! PV_SCHED_YIELD_TO, in KVM's vendor-hypervisor range (owner 6), at a
//! function number nothing upstream reserves. No published guest uses it;
//! the project's guest driver does.
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
//! | id | [`PV_SCHED_YIELD_TO`] = `0xC6000070` (fast, SMC64, owner 6, vendor function 0x70 = 112) |
//! | argument | X1 = target vCPU index (all 64 bits; the guest's logical CPU number, which is the vCPU index when CPUs come up in DT order, as for the openEuler KICK_CPU call, docs/abi.md §3) |
//! | X0 = 0 ([`YIELDED`]) | the caller's remaining slice went to the target; the call returns once the caller is scheduled again |
//! | X0 = 1 ([`NOT_YIELDED`]) | a valid sibling that could not take the slice (running, blocked, off, already handed a slice, not allowed on the caller's pCPU, or no slice left); the call returns at once |
//! | X0 = -1 ([`UNKNOWN_VCPU`], NOT_SUPPORTED) | no such vCPU in the caller's VM (or the call is not offered) |
//! | X0 = -3 ([`TO_SELF`], INVALID_PARAMETER) | the target is the caller |
//! | X1..X3 | zero |
//! | discovery | KVM_FEATURES bit [`KVM_FEATURES_BIT`] (112) and SMCCC_ARCH_FEATURES(`0xC6000070`) = 0 |
//!
//! **The number.** Upstream Linux (`include/linux/arm-smccc.h`) assigns
//! KVM vendor functions 0 (FEATURES) and 1 (PTP), reserves 2..=63 for
//! pKVM (HYP_MEMINFO, MEM_SHARE, MEM_UNSHARE, MMIO_GUARD and
//! `ARM_SMCCC_KVM_FUNC_PKVM_RESV_*`), assigns 64 and 65
//! (DISCOVER_IMPL_VER / _CPUS) and keeps 127 (FEATURES_2) for a second
//! bitmap; new upstream functions are numbered upwards from 66, and
//! Android's kernels used 65 and 66 for vCPU frequency calls. 0x70 = 112
//! is far from all of them and still inside the 128-bit KVM_FEATURES
//! bitmap, whose bit N advertises vendor function N, so its bit is 112
//! ([`crate::kvm::func::PV_SCHED_YIELD_TO`]). The call had number 0x22
//! (bit 34) before, inside pKVM's reservation; that id is retired
//! ([`RETIRED_PV_SCHED_YIELD_TO`]) and answers NOT_SUPPORTED like any id
//! nobody implements.
//!
//! **The kick that lends, PV_SCHED_KICK_LEND.** A lock that hands itself
//! to the waiter it wakes (the guest driver's queued lock gives a halted
//! queue head the lock's next turn) needs that waiter to run at once:
//! until it does, every other waiter waits. openEuler's and Anolis's
//! KICK_CPU only wake (docs/abi.md §3: a woken vCPU gets what any woken
//! vCPU gets), which is right for Linux's PV qspinlock, whose unlocker
//! frees the lock for whoever runs and goes on with its own work. This
//! call wakes the target as KICK_CPU does and, if it then waits for a
//! pCPU, lends it a short run of the caller's slice on the caller's pCPU,
//! the caller running next (within the caller's VM and the time it
//! already had, as for the yield):
//!
//! | | |
//! |---|---|
//! | id | [`PV_SCHED_KICK_LEND`] = `0xC6000072` (fast, SMC64, owner 6, vendor function 0x72 = 114) |
//! | argument | X1 = target vCPU index, as for PV_SCHED_YIELD_TO |
//! | X0 = 0 ([`KICKED`]) | the target was woken (or had its next WFI made to return at once), and was lent a run if it had to wait for a pCPU; the call returns once the caller runs again |
//! | X0 = -1 ([`UNKNOWN_VCPU`], NOT_SUPPORTED) | no such vCPU in the caller's VM (or the call is not offered) |
//! | X1..X3 | zero |
//! | discovery | KVM_FEATURES bit [`KICK_LEND_FEATURES_BIT`] (114) and SMCCC_ARCH_FEATURES(`0xC6000072`) = 0 |
//!
//! A hypervisor that offers this call also honours the PV-lock records'
//! `lock_count` extension ([`crate::pvlock`], "Extension: the lock count")
//! in its own directed-yield decisions.

use crate::catalog::Entry;
use crate::smccc::{self, FunctionId, Owner};

/// PV_SCHED_YIELD_TO, `0xC6000070` (fast, SMC64, owner 6, vendor function
/// 0x70): X1 = target vCPU index. See the module documentation for the
/// answers.
pub const PV_SCHED_YIELD_TO: FunctionId = FunctionId::fast64(Owner::VendorHypervisor, 0x70);

/// The KVM_FEATURES bit that advertises [`PV_SCHED_YIELD_TO`]: its vendor
/// function number, 112.
pub const KVM_FEATURES_BIT: u16 = PV_SCHED_YIELD_TO.number();

/// PV_SCHED_KICK_LEND, `0xC6000072` (fast, SMC64, owner 6, vendor
/// function 0x72): X1 = target vCPU index; wakes it and lends it a short
/// run of the caller's slice. See the module documentation.
pub const PV_SCHED_KICK_LEND: FunctionId = FunctionId::fast64(Owner::VendorHypervisor, 0x72);

/// The KVM_FEATURES bit that advertises [`PV_SCHED_KICK_LEND`]: its vendor
/// function number, 114.
pub const KICK_LEND_FEATURES_BIT: u16 = PV_SCHED_KICK_LEND.number();

/// X0 = 0 (SUCCESS) for [`PV_SCHED_KICK_LEND`]: the target was kicked.
pub const KICKED: i64 = smccc::SUCCESS;

/// `0xC6000022`, PV_SCHED_YIELD_TO's number before it left pKVM's
/// reserved range (vendor function 0x22, KVM_FEATURES bit 34). Nothing
/// answers it: it gets NOT_SUPPORTED, SMCCC_ARCH_FEATURES says
/// NOT_SUPPORTED and bit 34 is clear. Not in [`CALLS`]: it names nothing.
pub const RETIRED_PV_SCHED_YIELD_TO: FunctionId = FunctionId::fast64(Owner::VendorHypervisor, 0x22);

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
pub const IDS: &[FunctionId] = &[PV_SCHED_YIELD_TO, PV_SCHED_KICK_LEND];

/// Names for [`crate::describe`].
pub const CALLS: &[Entry] = &[
    Entry::new(PV_SCHED_YIELD_TO, "PV_SCHED_YIELD_TO"),
    Entry::new(PV_SCHED_KICK_LEND, "PV_SCHED_KICK_LEND"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvm::func;
    use crate::pvlock::{Variant, anolis};

    #[test]
    fn id_and_bit() {
        assert_eq!(PV_SCHED_YIELD_TO.raw(), 0xC600_0070);
        assert!(PV_SCHED_YIELD_TO.is_fast() && PV_SCHED_YIELD_TO.is_smc64());
        assert_eq!(PV_SCHED_YIELD_TO.owner(), Owner::VendorHypervisor);
        assert_eq!(PV_SCHED_YIELD_TO.number(), 0x70);
        assert_eq!(KVM_FEATURES_BIT, 112);
        assert_eq!(func::PV_SCHED_YIELD_TO, KVM_FEATURES_BIT);
        // Inside the 128-bit bitmap, in its last word.
        const { assert!(KVM_FEATURES_BIT < func::NUM_FUNCS) };
        assert_eq!(RETIRED_PV_SCHED_YIELD_TO.raw(), 0xC600_0022);
    }

    #[test]
    fn outside_every_upstream_reservation_and_assignment() {
        let n = KVM_FEATURES_BIT;
        assert!(!(func::PKVM_FIRST..=func::PKVM_LAST).contains(&n));
        for upstream in [
            func::FEATURES,
            func::PTP,
            func::DISCOVER_IMPL_VER,
            func::DISCOVER_IMPL_CPUS,
            func::FEATURES_2,
        ] {
            assert_ne!(n, upstream);
        }
        // Clear of the numbers upstream grows into next, and of Android's.
        assert!(n > func::DISCOVER_IMPL_CPUS + 16 && n < func::FEATURES_2);
        // The retired number was inside pKVM's range: that is why it moved.
        let old = RETIRED_PV_SCHED_YIELD_TO.number();
        assert!((func::PKVM_FIRST..=func::PKVM_LAST).contains(&old));
    }

    #[test]
    fn collides_with_nothing_named() {
        // No PV-lock variant's id, in any owner (docs/abi.md §3).
        for v in Variant::ALL {
            assert!(
                !v.function_ids().contains(&PV_SCHED_YIELD_TO),
                "{}",
                v.name()
            );
        }
        assert_ne!(PV_SCHED_YIELD_TO, anolis::PV_LOCK_FEATURES);
        // The catalog names it, once, and not the retired id.
        assert_eq!(
            crate::describe(PV_SCHED_YIELD_TO),
            Some("PV_SCHED_YIELD_TO")
        );
        assert_eq!(crate::describe(RETIRED_PV_SCHED_YIELD_TO), None);
    }

    #[test]
    fn the_kick_that_lends() {
        assert_eq!(PV_SCHED_KICK_LEND.raw(), 0xC600_0072);
        assert!(PV_SCHED_KICK_LEND.is_fast() && PV_SCHED_KICK_LEND.is_smc64());
        assert_eq!(KICK_LEND_FEATURES_BIT, 114);
        assert_eq!(func::PV_SCHED_KICK_LEND, KICK_LEND_FEATURES_BIT);
        const { assert!(KICK_LEND_FEATURES_BIT < func::NUM_FUNCS) };
        // Next to the project's other two vendor calls, not on them.
        assert_ne!(KICK_LEND_FEATURES_BIT, func::PV_SCHED_YIELD_TO);
        assert_ne!(KICK_LEND_FEATURES_BIT, func::PVLOCK_SET_WFX_POLICY);
        for v in Variant::ALL {
            assert!(!v.function_ids().contains(&PV_SCHED_KICK_LEND));
        }
        assert_eq!(
            crate::describe(PV_SCHED_KICK_LEND),
            Some("PV_SCHED_KICK_LEND")
        );
        assert_eq!(KICKED, 0);
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
