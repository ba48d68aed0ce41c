//! The project's scheduling calls for PV-lock guests: the directed yield
//! PV_SCHED_YIELD_TO (`0xC6000070`) and the kick that lends,
//! PV_SCHED_KICK_LEND (`0xC6000072`); `pvlock_abi::directed_yield`,
//! docs/abi.md §7.

use pvlock_abi::directed_yield::{
    IDS, KICK_LEND_FEATURES_BIT, KICKED, KVM_FEATURES_BIT, NOT_YIELDED, PV_SCHED_KICK_LEND,
    PV_SCHED_YIELD_TO, TO_SELF, UNKNOWN_VCPU,
};
use pvlock_abi::kvm::KvmFeatures;
use pvlock_abi::smccc::{self, FunctionId};

use super::{Call, Reply, Service};
use crate::trap::decision::Next;
use crate::vcpu::VcpuId;

/// PV_SCHED_YIELD_TO for one VM; registered by
/// [`super::Dispatcher::for_vm`] on every VM with a PV-lock variant (the
/// guests that can tell a preempted lock holder from a running one).
///
/// | call | answer |
/// |---|---|
/// | `0xC6000070` PV_SCHED_YIELD_TO(X1 = target vCPU index) | X0 = 1 ([`NOT_YIELDED`]) and [`Next::YieldTo`]; the runner (`el2::run`) rewrites X0 to 0 ([`pvlock_abi::directed_yield::YIELDED`]) if the yield happens |
/// | ... X1 = the caller's own index | -3 ([`TO_SELF`], INVALID_PARAMETER), no action |
/// | ... X1 not a vCPU of the VM (all 64 bits count: SMC64) | -1 ([`UNKNOWN_VCPU`], NOT_SUPPORTED), no action |
/// | `0xC6000072` PV_SCHED_KICK_LEND(X1 = target vCPU index) | 0 ([`KICKED`]) and [`Next::Kick`] with `lend` |
/// | ... X1 not a vCPU of the VM | -1, no action |
///
/// X1..X3 are zeroed. SMCCC_ARCH_FEATURES answers 0 for both ids and the
/// service sets KVM_FEATURES bits 112 ([`KVM_FEATURES_BIT`]) and 114
/// ([`KICK_LEND_FEATURES_BIT`]).
///
/// X0 is "not yielded" until the yield has really happened, so whatever
/// the runner (`el2::run`) does not get to do, the guest is never told it yielded
/// when it did not.
#[derive(Clone, Copy, Debug, Default)]
pub struct PvYieldService;

impl PvYieldService {
    /// The service (it has no per-VM state).
    pub const fn new() -> Self {
        Self
    }
}

impl Service for PvYieldService {
    fn name(&self) -> &'static str {
        "pv-yield"
    }

    fn ids(&self) -> &[FunctionId] {
        IDS
    }

    fn call(&self, call: &Call<'_>) -> Reply {
        // SMC64: the whole of X1 is the index.
        let (caller, count, x1) = (call.caller(), call.vm().vcpu_count(), call.arg(1));
        match call.fid() {
            PV_SCHED_YIELD_TO => reply(caller, count, x1),
            PV_SCHED_KICK_LEND => kick_lend_reply(caller, count, x1),
            _ => Reply::not_supported(),
        }
    }

    fn arch_features(&self, fid: FunctionId) -> Option<i64> {
        IDS.contains(&fid).then_some(smccc::SUCCESS)
    }

    fn kvm_features(&self) -> KvmFeatures {
        KvmFeatures::EMPTY
            .with(KVM_FEATURES_BIT)
            .with(KICK_LEND_FEATURES_BIT)
    }

    fn answers_directed_yield(&self) -> bool {
        true
    }
}

/// PV_SCHED_YIELD_TO's reply to `caller`, in a VM of `vcpu_count` vCPUs,
/// for the target index in X1 (`x1`, all 64 bits: SMC64): the table
/// above. The one rule behind both ways the call is answered,
/// [`PvYieldService::call`] and the dispatcher's shortcut
/// [`super::Dispatcher::directed_yield`].
#[inline(always)]
pub(super) fn reply(caller: VcpuId, vcpu_count: u16, x1: u64) -> Reply {
    let index = match u16::try_from(x1) {
        Ok(index) if index < vcpu_count => index,
        _ => return Reply::code(UNKNOWN_VCPU),
    };
    if index == caller.index {
        return Reply::code(TO_SELF);
    }
    Reply::code(NOT_YIELDED).then(Next::YieldTo {
        target: VcpuId {
            vm: caller.vm,
            index,
        },
    })
}

/// PV_SCHED_KICK_LEND's reply to `caller`, in a VM of `vcpu_count`
/// vCPUs, for the target index in X1 (`x1`, all 64 bits): a kick that
/// lends, of any vCPU of the VM (the caller's own only sets its kicked
/// flag, as KICK_CPU's does), or -1 for no such vCPU.
fn kick_lend_reply(caller: VcpuId, vcpu_count: u16, x1: u64) -> Reply {
    match u16::try_from(x1) {
        Ok(index) if index < vcpu_count => Reply::code(KICKED).then(Next::Kick {
            target: VcpuId {
                vm: caller.vm,
                index,
            },
            lend: true,
        }),
        _ => Reply::code(UNKNOWN_VCPU),
    }
}
