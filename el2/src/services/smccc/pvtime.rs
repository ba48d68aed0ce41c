//! Paravirtualized time (Arm DEN0057A, SMCCC owner 5): where each vCPU's
//! stolen-time record is. docs/abi.md §4.

use alloc::sync::Arc;

use pvlock_abi::pvtime::{PV_TIME_FEATURES, PV_TIME_ST};
use pvlock_abi::smccc::{self, FunctionId};

use super::{Call, Reply, Service};
use crate::services::pv::PvRegistry;

const IDS: [FunctionId; 2] = [PV_TIME_FEATURES, PV_TIME_ST];

/// The PV time service, registered for VMs with `pv-time`.
///
/// | call | answer |
/// |---|---|
/// | `0xC5000020` PV_TIME_FEATURES(W1 = id) | 0 for PV_TIME_FEATURES and PV_TIME_ST, else NOT_SUPPORTED |
/// | `0xC5000021` PV_TIME_ST | the IPA of the caller's `StolenTime` record ([`PvRegistry::steal_record`]), or NOT_SUPPORTED |
///
/// SMCCC_ARCH_FEATURES answers 0 for PV_TIME_FEATURES and NOT_SUPPORTED
/// for PV_TIME_ST, as KVM does (the guest probes only the former that
/// way). The queried id is read from W1, as KVM (`u32 feature`).
///
/// DEN0057A "PV_TIME_FEATURES", "PV_TIME_ST"; Linux
/// `arch/arm64/kvm/pvtime.c`; docs/abi.md §4.
#[derive(Debug)]
pub struct PvTimeService {
    registry: Arc<PvRegistry>,
}

impl PvTimeService {
    /// The service over the VM's `registry`.
    pub fn new(registry: Arc<PvRegistry>) -> Self {
        Self { registry }
    }
}

impl Service for PvTimeService {
    fn name(&self) -> &'static str {
        "pv-time"
    }

    fn ids(&self) -> &[FunctionId] {
        &IDS
    }

    fn call(&self, call: &Call<'_>) -> Reply {
        match call.fid() {
            PV_TIME_FEATURES => {
                let queried = FunctionId::from_raw(call.arg(1) as u32);
                if IDS.contains(&queried) {
                    Reply::code(smccc::SUCCESS)
                } else {
                    Reply::not_supported()
                }
            }
            PV_TIME_ST => match self.registry.steal_record(call.caller().index) {
                Some(ipa) => Reply::value(ipa),
                None => Reply::not_supported(),
            },
            _ => Reply::not_supported(),
        }
    }

    fn arch_features(&self, fid: FunctionId) -> Option<i64> {
        (fid == PV_TIME_FEATURES).then_some(smccc::SUCCESS)
    }
}
