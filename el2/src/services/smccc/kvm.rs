//! KVM's vendor hypervisor service (SMCCC owner 6): the calls a guest uses
//! to recognise "KVM" and discover the vendor functions, and KVM_PTP.
//!
//! Linux `Documentation/virt/kvm/arm/hypercalls.rst`, `ptp_kvm.rst`,
//! `drivers/firmware/smccc/kvm_guest.c`; docs/abi.md §2.

use pvlock_abi::kvm::{self, CALL_UID, FEATURES, PTP, func, ptp};
use pvlock_abi::smccc::FunctionId;

use super::{Call, Reply, Service};

const IDS: [FunctionId; 2] = [CALL_UID, FEATURES];
const IDS_WITH_PTP: [FunctionId; 3] = [CALL_UID, FEATURES, PTP];

/// The KVM vendor hypervisor service, registered for every VM.
///
/// | call | answer |
/// |---|---|
/// | `0x8600FF01` Call UID | KVM's UID in W0..W3 ([`kvm::UID_REGS`]) |
/// | `0x86000000` KVM_FEATURES | the VM's table's bitmap in W0..W3 ([`super::Dispatcher::kvm_features`]): bit 0 always, plus every registered service's bits |
/// | `0x86000001` KVM_PTP (only with PTP enabled) | W1 = 0 virtual / 1 physical counter: wall clock ns (X0 = high 32 bits, X1 = low 32) and the counter (X2 = high, X3 = low); NOT_SUPPORTED on any other W1 |
///
/// As KVM, it answers nothing else in owner 6: no Call Count (0xFF00) or
/// Revision (0xFF03) — mainline KVM implements neither for the vendor
/// range, and Linux never asks — and SMCCC_ARCH_FEATURES answers
/// NOT_SUPPORTED for all three ids (guests discover them through the UID
/// and the bitmap).
///
/// PTP needs a wall clock ([`super::VmView::wall_clock_ns`]). Without one
/// the service drops bit 1 from its KVM_FEATURES answer and PTP answers
/// NOT_SUPPORTED, so the guest's `ptp_kvm` driver does not bind rather than
/// serving a made-up time.
#[derive(Clone, Copy, Debug)]
pub struct KvmService {
    ptp: bool,
}

impl KvmService {
    /// The service, with KVM_PTP if `ptp`.
    pub const fn new(ptp: bool) -> Self {
        Self { ptp }
    }

    /// KVM_PTP (Linux `kvm_ptp_get_time`): X0..X3 = wall-clock ns high/low,
    /// counter high/low; NOT_SUPPORTED with X1..X3 zero on a bad W1 or
    /// without a wall clock.
    fn ptp(call: &Call<'_>) -> Reply {
        // SMC32: the counter selector is W1 (`Call::arg` truncates).
        let physical = match call.arg(1) {
            w1 if w1 == u64::from(ptp::VIRTUAL_COUNTER) => false,
            w1 if w1 == u64::from(ptp::PHYSICAL_COUNTER) => true,
            _ => return Reply::not_supported(),
        };
        let vm = call.vm();
        let counter = vm.counter(physical);
        let Some(wall) = vm.wall_clock_ns() else {
            return Reply::not_supported();
        };
        Reply::values([high(wall), low(wall), high(counter), low(counter)])
    }
}

fn high(value: u64) -> u64 {
    value >> 32
}

fn low(value: u64) -> u64 {
    value & u64::from(u32::MAX)
}

impl Service for KvmService {
    fn name(&self) -> &'static str {
        "kvm"
    }

    fn ids(&self) -> &[FunctionId] {
        if self.ptp { &IDS_WITH_PTP } else { &IDS }
    }

    /// The UID always; KVM_FEATURES unless PTP is offered (its bit then
    /// follows whether a wall clock is available).
    fn is_constant(&self, fid: FunctionId) -> bool {
        fid == CALL_UID || (fid == FEATURES && !self.ptp)
    }

    fn call(&self, call: &Call<'_>) -> Reply {
        match call.fid() {
            CALL_UID => Reply::values(kvm::UID_REGS),
            FEATURES => {
                let mut features = call.table().kvm_features();
                if self.ptp && call.vm().wall_clock_ns().is_none() {
                    // Only this service sets bit 1 when PTP is on: a VM
                    // with PTP cannot have seed-v3 (`PvConfig::validate`).
                    features.clear(func::PTP);
                }
                Reply::values(features.to_regs())
            }
            PTP if self.ptp => Self::ptp(call),
            _ => Reply::not_supported(),
        }
    }

    fn kvm_features(&self) -> kvm::KvmFeatures {
        let features = kvm::KvmFeatures::new();
        if self.ptp {
            features.with(func::PTP)
        } else {
            features
        }
    }
}
