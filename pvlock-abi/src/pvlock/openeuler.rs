//! openEuler "pvsched" (Kunpeng guests, kernels 4.19 / 5.10 / 6.6): four
//! SMC64 calls in the standard-hypervisor range (owner 5, function numbers
//! 0x90..0x93). docs/abi.md §3.
//!
//! Guest sequence: SMCCC ≥ 1.1, `SMCCC_ARCH_FEATURES(PV_SCHED_FEATURES)`
//! answers 0, then per CPU `PV_SCHED_IPA_INIT(x1 = IPA of its own
//! VcpuState)`; on CPU offline `PV_SCHED_IPA_RELEASE`. With `arm_pvspin`
//! (4.19/5.10 only) lock waiters `wfi` and the unlocker calls
//! `PV_SCHED_KICK_CPU(x1 = target vCPU index)`. Reference: openEuler
//! `Documentation/virt/kvm/arm/pvsched.rst`, `arch/arm64/kvm/pvsched.c`.

use crate::catalog::Entry;
use crate::smccc::{FunctionId, Owner};

/// PV_SCHED_FEATURES, `0xC5000090` (x1 = function ID): 0 for each
/// implemented PV_SCHED call, else -1. Probed with SMCCC_ARCH_FEATURES.
/// docs/abi.md §3.
pub const PV_SCHED_FEATURES: FunctionId = FunctionId::fast64(Owner::StandardHypervisor, 0x90);

/// PV_SCHED_IPA_INIT, `0xC5000091` (x1 = IPA of the calling vCPU's
/// guest-allocated [`VcpuState`]): 0 or -1. docs/abi.md §3.
pub const PV_SCHED_IPA_INIT: FunctionId = FunctionId::fast64(Owner::StandardHypervisor, 0x91);

/// PV_SCHED_IPA_RELEASE, `0xC5000092`: forget the calling vCPU's IPA; 0.
/// docs/abi.md §3.
pub const PV_SCHED_IPA_RELEASE: FunctionId = FunctionId::fast64(Owner::StandardHypervisor, 0x92);

/// PV_SCHED_KICK_CPU, `0xC5000093` (x1 = target vCPU index; 4.19/5.10
/// only): wake the target from its WFI wait (set a "kicked" flag that makes
/// its current or next WFI return at once) and yield to it if runnable; 0,
/// or -1 if no such vCPU. docs/abi.md §3.
pub const PV_SCHED_KICK_CPU: FunctionId = FunctionId::fast64(Owner::StandardHypervisor, 0x93);

/// The per-vCPU structure: `le32 preempted; u8 pad[60]`, allocated by the
/// guest. docs/abi.md §3.
pub type VcpuState = super::VcpuState32;

/// Every id of this variant.
pub const IDS: &[FunctionId] = &[
    PV_SCHED_FEATURES,
    PV_SCHED_IPA_INIT,
    PV_SCHED_IPA_RELEASE,
    PV_SCHED_KICK_CPU,
];

/// Names for [`crate::describe`].
pub const CALLS: &[Entry] = &[
    Entry::new(PV_SCHED_FEATURES, "PV_SCHED_FEATURES(openEuler)"),
    Entry::new(PV_SCHED_IPA_INIT, "PV_SCHED_IPA_INIT(openEuler)"),
    Entry::new(PV_SCHED_IPA_RELEASE, "PV_SCHED_IPA_RELEASE(openEuler)"),
    Entry::new(PV_SCHED_KICK_CPU, "PV_SCHED_KICK_CPU(openEuler)"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_abi_md() {
        assert_eq!(PV_SCHED_FEATURES.raw(), 0xC5000090);
        assert_eq!(PV_SCHED_IPA_INIT.raw(), 0xC5000091);
        assert_eq!(PV_SCHED_IPA_RELEASE.raw(), 0xC5000092);
        assert_eq!(PV_SCHED_KICK_CPU.raw(), 0xC5000093);
        for id in IDS {
            assert!(id.is_fast() && id.is_smc64());
            assert_eq!(id.owner(), Owner::StandardHypervisor);
        }
        assert_eq!(core::mem::size_of::<VcpuState>(), 64);
    }
}
