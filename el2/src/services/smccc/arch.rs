//! Arm Architecture Calls (SMCCC owner 0): SMCCC_VERSION,
//! SMCCC_ARCH_FEATURES, SMCCC_ARCH_SOC_ID and the Spectre workarounds.
//!
//! DEN0028 chapter "Arm Architecture Calls"; docs/abi.md §1.

use pvlock_abi::arch::{
    SMCCC_ARCH_FEATURES, SMCCC_ARCH_SOC_ID, SMCCC_ARCH_WORKAROUND_1, SMCCC_ARCH_WORKAROUND_2,
    SMCCC_ARCH_WORKAROUND_3, SMCCC_VERSION, WORKAROUND_NOT_REQUIRED, WORKAROUND_UNAFFECTED,
};
use pvlock_abi::smccc::{self, FunctionId};

use super::{Call, Reply, Service};
use tock_registers::LocalRegisterCopy;
use tock_registers::register_bitfields;

/// Whether the physical CPUs are exposed to one speculative-execution
/// issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposure {
    /// No PE of the machine is affected.
    Unaffected,
    /// Some PE may be affected. The hypervisor implements no firmware
    /// mitigation, so it says so (NOT_SUPPORTED) and the guest reports
    /// itself vulnerable rather than wrongly safe.
    Vulnerable,
}

register_bitfields! {u64,
    /// The speculation-safety fields of ID_AA64PFR0_EL1 (Arm ARM D24.2.73)
    /// that aarch64-cpu leaves out.
    pub ID_AA64PFR0_CSV [
        /// Meltdown-class speculation safe.
        CSV3 OFFSET(60) NUMBITS(4) [],
        /// Branch-target speculation safe (1), and across contexts with
        /// branch history too (3: FEAT_CSV2_3).
        CSV2 OFFSET(56) NUMBITS(4) [],
    ],
}

/// The host's exposure to the issues the SMCCC workaround calls address;
/// decides the SMCCC_ARCH_FEATURES answers for them.
///
/// Derived from the physical CPUs' ID registers
/// ([`Self::from_id_aa64pfr0`]): ID_AA64PFR0_EL1.CSV2 >= 1 clears Spectre
/// v2, >= 3 Spectre-BHB, and Spectre v4 is always reported vulnerable
/// (docs/abi.md §1). Host tests use [`Self::UNAFFECTED`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuVulnerabilities {
    /// Spectre v2 (CVE-2017-5715): SMCCC_ARCH_WORKAROUND_1.
    pub spectre_v2: Exposure,
    /// Spectre v4 / speculative store bypass (CVE-2018-3639):
    /// SMCCC_ARCH_WORKAROUND_2.
    pub spectre_v4: Exposure,
    /// Spectre-BHB (CVE-2022-23960): SMCCC_ARCH_WORKAROUND_3.
    pub spectre_bhb: Exposure,
}

impl CpuVulnerabilities {
    /// Unaffected by all three (QEMU TCG; CPUs whose ID registers say so).
    pub const UNAFFECTED: Self = Self {
        spectre_v2: Exposure::Unaffected,
        spectre_v4: Exposure::Unaffected,
        spectre_bhb: Exposure::Unaffected,
    };

    /// What ID_AA64PFR0_EL1 = `pfr0` clears; what it does not stays
    /// "vulnerable" (the hypervisor applies no firmware mitigation on a
    /// guest's behalf).
    pub fn from_id_aa64pfr0(pfr0: u64) -> Self {
        let csv2 = LocalRegisterCopy::<u64, ID_AA64PFR0_CSV::Register>::new(pfr0)
            .read(ID_AA64PFR0_CSV::CSV2);
        let safe = |yes: bool| {
            if yes {
                Exposure::Unaffected
            } else {
                Exposure::Vulnerable
            }
        };
        Self {
            spectre_v2: safe(csv2 >= 1),
            spectre_v4: Exposure::Vulnerable,
            spectre_bhb: safe(csv2 >= 3),
        }
    }

    /// Possibly affected by all three: the safe answer when unknown.
    pub const VULNERABLE: Self = Self {
        spectre_v2: Exposure::Vulnerable,
        spectre_v4: Exposure::Vulnerable,
        spectre_bhb: Exposure::Vulnerable,
    };

    fn exposure(&self, workaround: FunctionId) -> Option<Exposure> {
        match workaround {
            SMCCC_ARCH_WORKAROUND_1 => Some(self.spectre_v2),
            SMCCC_ARCH_WORKAROUND_2 => Some(self.spectre_v4),
            SMCCC_ARCH_WORKAROUND_3 => Some(self.spectre_bhb),
            _ => None,
        }
    }
}

const IDS: [FunctionId; 6] = [
    SMCCC_VERSION,
    SMCCC_ARCH_FEATURES,
    SMCCC_ARCH_SOC_ID,
    SMCCC_ARCH_WORKAROUND_1,
    SMCCC_ARCH_WORKAROUND_2,
    SMCCC_ARCH_WORKAROUND_3,
];

/// The Arm Architecture Calls service.
///
/// | call | answer |
/// |---|---|
/// | SMCCC_VERSION | 1.1 (`0x10001`): X4..X17 preserved; what Linux needs before it probes vendor services |
/// | SMCCC_ARCH_FEATURES(W1 = id) | the table's answer for the id ([`super::Dispatcher::arch_features`]) |
/// | SMCCC_ARCH_SOC_ID | NOT_SUPPORTED (guests ask only from SMCCC 1.2) |
/// | ARCH_WORKAROUND_1/2/3 | 0 and nothing else (a no-op, as in KVM's fast path) where unaffected; NOT_SUPPORTED otherwise |
///
/// Its own SMCCC_ARCH_FEATURES answers: 0 for SMCCC_VERSION and
/// SMCCC_ARCH_FEATURES — both are implemented, DEN0028 "SMCCC_ARCH_FEATURES"
/// defines the call as "is this Arm Architecture function implemented", and
/// TF-A answers 0 (so do probes such as Jailhouse's, which asks
/// ARCH_FEATURES about itself). KVM answers -1 for both, but no guest
/// depends on that. The workarounds, per [`CpuVulnerabilities`]:
///
/// | issue | unaffected | vulnerable |
/// |---|---|---|
/// | WORKAROUND_1 (Spectre v2) | 1, "not affected" | -1 |
/// | WORKAROUND_2 (Spectre v4) | -2, "not required" | -1 |
/// | WORKAROUND_3 (Spectre-BHB) | 1, "not affected" | -1 |
///
/// "Mitigated" (0) is never answered: the hypervisor performs no
/// mitigation on the guest's behalf. DEN0028 "SMCCC_ARCH_WORKAROUND_1/2/3";
/// docs/abi.md §1.
#[derive(Clone, Copy, Debug)]
pub struct ArchService {
    vulnerabilities: CpuVulnerabilities,
}

impl ArchService {
    /// The service for a host with `vulnerabilities`.
    pub const fn new(vulnerabilities: CpuVulnerabilities) -> Self {
        Self { vulnerabilities }
    }
}

impl Service for ArchService {
    fn name(&self) -> &'static str {
        "arm-arch"
    }

    fn ids(&self) -> &[FunctionId] {
        &IDS
    }

    fn is_constant(&self, fid: FunctionId) -> bool {
        fid == SMCCC_VERSION
    }

    fn call(&self, call: &Call<'_>) -> Reply {
        match call.fid() {
            SMCCC_VERSION => Reply::value(u64::from(smccc::VERSION_1_1.raw())),
            SMCCC_ARCH_FEATURES => {
                // An SMC32 call: the queried id is W1 (`Call::arg` truncates).
                let queried = FunctionId::from_raw(call.arg(1) as u32);
                Reply::code(call.table().arch_features(queried))
            }
            fid => match self.vulnerabilities.exposure(fid) {
                Some(Exposure::Unaffected) => Reply::code(smccc::SUCCESS),
                Some(Exposure::Vulnerable) | None => Reply::not_supported(),
            },
        }
    }

    fn arch_features(&self, fid: FunctionId) -> Option<i64> {
        match fid {
            SMCCC_VERSION | SMCCC_ARCH_FEATURES => Some(smccc::SUCCESS),
            SMCCC_ARCH_WORKAROUND_2 => match self.vulnerabilities.spectre_v4 {
                Exposure::Unaffected => Some(WORKAROUND_NOT_REQUIRED),
                Exposure::Vulnerable => None,
            },
            fid => match self.vulnerabilities.exposure(fid)? {
                Exposure::Unaffected => Some(WORKAROUND_UNAFFECTED),
                Exposure::Vulnerable => None,
            },
        }
    }
}
