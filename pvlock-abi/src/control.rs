//! Management calls for **control VMs**: this project's vendor call
//! PVLOCK_SET_WFX_POLICY, in KVM's vendor-hypervisor range (owner 6) right
//! after PV_SCHED_YIELD_TO ([`crate::directed_yield`]), outside every
//! upstream reservation.
//!
//! A VM whose description says `control = "on"` (docs/vm-binding.md) may
//! change how the hypervisor traps WFE for any VM's vCPUs at run time: the
//! per-vCPU WFx exit control of seed 002 (x86 `KVM_CAP_X86_DISABLE_EXITS`
//! per vCPU), with the VM description's `wfe-trap` / `wfe-trap-vcpus` as
//! the starting point and this call to change it. Every other VM does not
//! have the call at all: there it answers NOT_SUPPORTED and is neither
//! advertised in KVM_FEATURES nor by SMCCC_ARCH_FEATURES, exactly like an
//! id nobody implements, so an ordinary guest cannot even tell that the
//! call exists.
//!
//! | | |
//! |---|---|
//! | id | [`PVLOCK_SET_WFX_POLICY`] = `0xC6000071` (fast, SMC64, owner 6, vendor function 0x71 = 113) |
//! | X1 | target VM index (all 64 bits): the hypervisor's VM number — the position of the VM among the VMs that started, in boot-DT order, as the hypervisor's log names it (`vmN/vcpuM`). The caller's own VM is allowed |
//! | X2 | target vCPU index within that VM (all 64 bits), or [`ALL_VCPUS`] (`u64::MAX`) for every vCPU of the VM |
//! | X3 | the new WFE policy ([`WFE_AUTO`] 0, [`WFE_TRAP`] 1, [`WFE_NOTRAP`] 2; all 64 bits count) |
//! | X0 = 0 ([`SET`], SUCCESS) | recorded; each affected vCPU uses it from its next entry into the guest (a vCPU that is running now keeps its current setting until it next exits) |
//! | X0 = -1 ([`NOT_CONTROL_VM`], NOT_SUPPORTED) | the caller's VM is not a control VM (it has no such call) |
//! | X0 = -3 ([`INVALID`], INVALID_PARAMETER) | no such VM, no such vCPU in it, or an unknown policy code; nothing changed |
//! | X1..X3 | zero |
//! | discovery (control VMs only) | KVM_FEATURES bit [`KVM_FEATURES_BIT`] (113) and SMCCC_ARCH_FEATURES(`0xC6000071`) = 0 |
//!
//! The policies are KVM's `kvm-arm.wfe_trap_policy` (docs/abi.md §6): *auto*
//! traps WFE (HCR_EL2.TWE) only while the physical CPU has more than one
//! runnable vCPU, *trap* always, *notrap* never. The call sets WFE only;
//! whether WFI traps is fixed by the VM description (`wfi-trap`). A
//! setting survives the target VM's SYSTEM_RESET: it is the host's
//! decision about the VM, not guest state.
//!
//! The function number 0x71 follows PV_SCHED_YIELD_TO's 0x70, for the same
//! reasons ([`crate::directed_yield`], "The number"): outside pKVM's 2..=63,
//! clear of upstream's 64, 65 and 127 and of what upstream and Android
//! number next, inside the 128-bit KVM_FEATURES bitmap. Its KVM_FEATURES
//! bit is its function number, 113. The call had number 0x23 (bit 35)
//! before, inside pKVM's reservation; that id is retired
//! ([`RETIRED_PVLOCK_SET_WFX_POLICY`]) and answers NOT_SUPPORTED on every
//! VM, control VMs included.

use crate::catalog::Entry;
use crate::smccc::{self, FunctionId, Owner};

/// PVLOCK_SET_WFX_POLICY, `0xC6000071` (fast, SMC64, owner 6, vendor
/// function 0x71): X1 = target VM, X2 = target vCPU or [`ALL_VCPUS`], X3 =
/// WFE policy code. See the module documentation for the answers.
pub const PVLOCK_SET_WFX_POLICY: FunctionId = FunctionId::fast64(Owner::VendorHypervisor, 0x71);

/// The KVM_FEATURES bit that advertises [`PVLOCK_SET_WFX_POLICY`] to a
/// control VM: its vendor function number, 113.
pub const KVM_FEATURES_BIT: u16 = PVLOCK_SET_WFX_POLICY.number();

/// `0xC6000023`, PVLOCK_SET_WFX_POLICY's number before it left pKVM's
/// reserved range (vendor function 0x23, KVM_FEATURES bit 35). Nothing
/// answers it, on any VM: NOT_SUPPORTED. Not in [`CALLS`].
pub const RETIRED_PVLOCK_SET_WFX_POLICY: FunctionId =
    FunctionId::fast64(Owner::VendorHypervisor, 0x23);

/// X2 = `u64::MAX`: every vCPU of the target VM.
pub const ALL_VCPUS: u64 = u64::MAX;

/// X3 = 0: *auto*, trap WFE only while the physical CPU has more than one
/// runnable vCPU (KVM's default).
pub const WFE_AUTO: u64 = 0;

/// X3 = 1: *trap*, always trap WFE (`kvm-arm.wfe_trap_policy=trap`).
pub const WFE_TRAP: u64 = 1;

/// X3 = 2: *notrap*, never trap WFE (`kvm-arm.wfe_trap_policy=notrap`).
pub const WFE_NOTRAP: u64 = 2;

/// X0 = 0 (SUCCESS): the policy is recorded.
pub const SET: i64 = smccc::SUCCESS;

/// X0 = -1 (NOT_SUPPORTED): the caller's VM is not a control VM — the same
/// answer as for any id nobody implements.
pub const NOT_CONTROL_VM: i64 = smccc::NOT_SUPPORTED;

/// X0 = -3 (INVALID_PARAMETER): no such VM or vCPU, or an unknown policy
/// code. Nothing was changed.
pub const INVALID: i64 = smccc::INVALID_PARAMETER;

/// Every id of this service.
pub const IDS: &[FunctionId] = &[PVLOCK_SET_WFX_POLICY];

/// Names for [`crate::describe`].
pub const CALLS: &[Entry] = &[Entry::new(PVLOCK_SET_WFX_POLICY, "PVLOCK_SET_WFX_POLICY")];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directed_yield::PV_SCHED_YIELD_TO;
    use crate::kvm::func;
    use crate::pvlock::Variant;

    #[test]
    fn id_and_bit() {
        assert_eq!(PVLOCK_SET_WFX_POLICY.raw(), 0xC600_0071);
        assert!(PVLOCK_SET_WFX_POLICY.is_fast() && PVLOCK_SET_WFX_POLICY.is_smc64());
        assert_eq!(PVLOCK_SET_WFX_POLICY.owner(), Owner::VendorHypervisor);
        // The next vendor function after PV_SCHED_YIELD_TO.
        assert_eq!(
            PVLOCK_SET_WFX_POLICY.number(),
            PV_SCHED_YIELD_TO.number() + 1
        );
        assert_eq!(KVM_FEATURES_BIT, 113);
        assert_eq!(func::PVLOCK_SET_WFX_POLICY, KVM_FEATURES_BIT);
        const { assert!(KVM_FEATURES_BIT < func::NUM_FUNCS) };
        assert!(!(func::PKVM_FIRST..=func::PKVM_LAST).contains(&KVM_FEATURES_BIT));
        assert_eq!(RETIRED_PVLOCK_SET_WFX_POLICY.raw(), 0xC600_0023);
    }

    #[test]
    fn collides_with_nothing_named() {
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
            func::PV_LOCK_FEATURES,
            func::PV_LOCK_PREEMPTED,
            func::PV_SCHED_YIELD_TO,
        ] {
            assert_ne!(KVM_FEATURES_BIT, mainline);
        }
        for v in Variant::ALL {
            assert!(
                !v.function_ids().contains(&PVLOCK_SET_WFX_POLICY),
                "{}",
                v.name()
            );
        }
        assert_eq!(
            crate::describe(PVLOCK_SET_WFX_POLICY),
            Some("PVLOCK_SET_WFX_POLICY")
        );
        assert_eq!(crate::describe(RETIRED_PVLOCK_SET_WFX_POLICY), None);
    }

    #[test]
    fn arguments_and_answers() {
        assert_eq!((WFE_AUTO, WFE_TRAP, WFE_NOTRAP), (0, 1, 2));
        assert_eq!(ALL_VCPUS, u64::MAX);
        assert_eq!((SET, NOT_CONTROL_VM, INVALID), (0, -1, -3));
        assert_eq!(smccc::ret_to_x0(NOT_CONTROL_VM), u64::MAX);
        assert_eq!(smccc::ret_to_x0(INVALID), u64::MAX - 2);
    }
}
