//! The PV-lock ("vCPU preempted") services: the four published ABI
//! variants in one service type. docs/abi.md §3.
//!
//! The records themselves, and when the runner (`el2::run`) writes them, are in
//! [`crate::services::pv`].

use alloc::sync::Arc;

use pvlock_abi::kvm::{KvmFeatures, func};
use pvlock_abi::pvlock::{Variant, anolis, openeuler, seed_v2, seed_v3};
use pvlock_abi::smccc::{self, FunctionId};

use super::{Call, Reply, Service};
use crate::services::pv::PvRegistry;
use crate::trap::decision::Next;
use crate::vcpu::VcpuId;

/// The ids each variant makes discoverable through SMCCC_ARCH_FEATURES
/// (answer 0): the ones its guests probe that way (docs/abi.md §1, §3).
const fn arch_feature_ids(variant: Variant) -> &'static [FunctionId] {
    match variant {
        // Guests probe PV_LOCK_FEATURES; PREEMPTED is implemented and
        // answers 0 too (the 2022 RFC's selftest probes both).
        Variant::SeedV2 => seed_v2::IDS,
        // Discovered through KVM_FEATURES bit 1 instead.
        Variant::SeedV3 => &[],
        Variant::OpenEuler => &[openeuler::PV_SCHED_FEATURES],
        Variant::Anolis => &[anolis::PV_LOCK_FEATURES, anolis::PV_QSPINLOCK_FEATURES],
    }
}

/// One VM's PV-lock service, for the variant its description names.
///
/// Every "features" call reads the queried id from W1 (the published hosts
/// declare it `u32`) and answers 0 for an id of the same variant, else
/// NOT_SUPPORTED. Every error is NOT_SUPPORTED (-1): the published hosts
/// answer nothing else, and the Anolis guest tests only for -1.
///
/// | variant | call | answer |
/// |---|---|---|
/// | seed-v2 | `0xC6000020` PV_LOCK_FEATURES(W1 = id) | 0 for `0xC6000020` / `0xC6000021` |
/// | seed-v2 | `0xC6000021` PV_LOCK_PREEMPTED | the IPA of the caller's record in the PV area |
/// | seed-v3 | `0x86000001`, W1 = 0 (FEATURES) | 0 |
/// | seed-v3 | `0x86000001`, W1 = 1 (PREEMPTED) | the IPA (all 64 bits of X0) |
/// | seed-v3 | `0x86000001`, other W1 | NOT_SUPPORTED |
/// | openEuler | `0xC5000090` PV_SCHED_FEATURES(W1 = id) | 0 for `0xC5000090..=0xC5000093` |
/// | openEuler | `0xC5000091` PV_SCHED_IPA_INIT(X1 = IPA) | 0, the caller's record is now at X1; NOT_SUPPORTED if refused |
/// | openEuler | `0xC5000092` PV_SCHED_IPA_RELEASE | 0, no record |
/// | openEuler | `0xC5000093` PV_SCHED_KICK_CPU(X1 = vCPU index) | 0 and [`Next::Kick`]; NOT_SUPPORTED for no such vCPU |
/// | Anolis | `0xC60000B0` PV_LOCK_FEATURES(W1 = id) | 0 for the four Anolis ids |
/// | Anolis | `0xC60000B1` PV_LOCK_PREEMPTED(X1 = IPA) | as IPA_INIT |
/// | Anolis | `0xC60000B2` PV_QSPINLOCK_FEATURES(W1 = id) | as PV_LOCK_FEATURES |
/// | Anolis | `0xC50000B3` PV_QSPINLOCK_KICK_CPU(X1 = vCPU index) | as KICK_CPU |
///
/// A guest-chosen record (IPA_INIT, Anolis PREEMPTED) is refused unless it
/// is 64-byte aligned, inside the VM's RAM and clear of the PV area
/// ([`PvRegistry::register_guest_lock`]); a refusal keeps any earlier
/// registration. The openEuler host accepts any address but -1 and writes
/// nowhere useful for a bad one; refusing is the same for a correct guest
/// and safer for the rest. The vCPU index of a kick is the whole X1 (an
/// SMC64 call), and is the guest's logical CPU number, which equals the
/// vCPU index when CPUs come up in DT order, as Linux brings them up.
///
/// SMCCC_ARCH_FEATURES answers 0 for seed-v2's two ids, openEuler's
/// PV_SCHED_FEATURES, and Anolis's PV_LOCK_FEATURES and
/// PV_QSPINLOCK_FEATURES; seed-v3 is found through KVM_FEATURES bit 1 and
/// seed-v2 also sets bits 32 and 33 (`func::PV_LOCK_FEATURES`,
/// `func::PV_LOCK_PREEMPTED`).
#[derive(Debug)]
pub struct PvLockService {
    variant: Variant,
    registry: Arc<PvRegistry>,
}

impl PvLockService {
    /// The `variant` service over the VM's `registry` (built with the same
    /// variant).
    pub fn new(variant: Variant, registry: Arc<PvRegistry>) -> Self {
        Self { variant, registry }
    }

    /// The variant served.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// 0 if W1 names an id of this variant.
    fn features(&self, call: &Call<'_>) -> Reply {
        let queried = FunctionId::from_raw(call.arg(1) as u32);
        if self.variant.function_ids().contains(&queried) {
            Reply::code(smccc::SUCCESS)
        } else {
            Reply::not_supported()
        }
    }

    /// The IPA of the caller's record (hypervisor-placed variants).
    fn preempted_ipa(&self, call: &Call<'_>) -> Reply {
        match self.registry.hand_out_lock_record(call.caller().index) {
            Some(record) => Reply::value(record.ipa),
            None => Reply::not_supported(),
        }
    }

    /// The guest tells where its record is (guest-chosen variants).
    fn register(&self, call: &Call<'_>) -> Reply {
        let ipa = call.arg(1);
        match self
            .registry
            .guest_registers_lock(call.caller().index, ipa, &|ipa, len| {
                call.vm().ram_contains(ipa, len)
            }) {
            Ok(()) => Reply::code(smccc::SUCCESS),
            Err(_) => Reply::not_supported(),
        }
    }

    /// KICK_CPU(X1 = vCPU index).
    fn kick(call: &Call<'_>) -> Reply {
        let caller = call.caller();
        let index = call.arg(1);
        match u16::try_from(index) {
            Ok(index) if index < call.vm().vcpu_count() => {
                Reply::code(smccc::SUCCESS).then(Next::Kick {
                    target: VcpuId {
                        vm: caller.vm,
                        index,
                    },
                    // A wake-up only, as a KVM host's kick (docs/abi.md §3).
                    lend: false,
                })
            }
            _ => Reply::not_supported(),
        }
    }
}

impl Service for PvLockService {
    fn name(&self) -> &'static str {
        match self.variant {
            Variant::SeedV2 => "pv-lock(seed-v2)",
            Variant::SeedV3 => "pv-lock(seed-v3)",
            Variant::OpenEuler => "pv-lock(openeuler)",
            Variant::Anolis => "pv-lock(anolis)",
        }
    }

    fn ids(&self) -> &[FunctionId] {
        self.variant.function_ids()
    }

    fn call(&self, call: &Call<'_>) -> Reply {
        match (self.variant, call.fid()) {
            (Variant::SeedV2, seed_v2::PV_LOCK_FEATURES) => self.features(call),
            (Variant::SeedV2, seed_v2::PV_LOCK_PREEMPTED) => self.preempted_ipa(call),
            // SMC32: the selector is W1 (`Call::arg` truncates).
            (Variant::SeedV3, seed_v3::PV_LOCK) => match call.arg(1) {
                seed_v3::ARG_FEATURES => Reply::code(smccc::SUCCESS),
                seed_v3::ARG_PREEMPTED => self.preempted_ipa(call),
                _ => Reply::not_supported(),
            },
            (Variant::OpenEuler, openeuler::PV_SCHED_FEATURES) => self.features(call),
            (Variant::OpenEuler, openeuler::PV_SCHED_IPA_INIT) => self.register(call),
            (Variant::OpenEuler, openeuler::PV_SCHED_IPA_RELEASE) => {
                self.registry.release_guest_lock(call.caller().index);
                Reply::code(smccc::SUCCESS)
            }
            (Variant::OpenEuler, openeuler::PV_SCHED_KICK_CPU) => Self::kick(call),
            (Variant::Anolis, anolis::PV_LOCK_FEATURES | anolis::PV_QSPINLOCK_FEATURES) => {
                self.features(call)
            }
            (Variant::Anolis, anolis::PV_LOCK_PREEMPTED) => self.register(call),
            (Variant::Anolis, anolis::PV_QSPINLOCK_KICK_CPU) => Self::kick(call),
            _ => Reply::not_supported(),
        }
    }

    fn arch_features(&self, fid: FunctionId) -> Option<i64> {
        arch_feature_ids(self.variant)
            .contains(&fid)
            .then_some(smccc::SUCCESS)
    }

    fn kvm_features(&self) -> KvmFeatures {
        match self.variant {
            Variant::SeedV2 => KvmFeatures::EMPTY
                .with(func::PV_LOCK_FEATURES)
                .with(func::PV_LOCK_PREEMPTED),
            Variant::SeedV3 => KvmFeatures::EMPTY.with(seed_v3::KVM_FEATURES_BIT),
            Variant::OpenEuler | Variant::Anolis => KvmFeatures::EMPTY,
        }
    }
}
