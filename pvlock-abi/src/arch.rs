//! Arm Architecture Calls (SMCCC owner 0).
//!
//! DEN0028 chapter "Arm Architecture Calls" (sections titled by the call
//! names below); docs/abi.md §1.

use crate::catalog::Entry;
use crate::smccc::{self, FunctionId, Owner, Version};

/// SMCCC_VERSION, `0x80000000`: returns the implemented SMCCC version
/// ([`smccc::Version`]); answer at least [`smccc::VERSION_1_1`].
///
/// DEN0028 "SMCCC_VERSION"; docs/abi.md §1.
pub const SMCCC_VERSION: FunctionId = FunctionId::fast32(Owner::Arch, 0x0000);

/// SMCCC_ARCH_FEATURES, `0x80000001` (x1 = function ID to query): 0 (or a
/// call-specific non-negative value) when the queried function is
/// implemented, NOT_SUPPORTED (-1) otherwise.
///
/// DEN0028 "SMCCC_ARCH_FEATURES"; docs/abi.md §1.
pub const SMCCC_ARCH_FEATURES: FunctionId = FunctionId::fast32(Owner::Arch, 0x0001);

/// SMCCC_ARCH_SOC_ID, `0x80000002` (x1 = [`SOC_ID_VERSION`] or
/// [`SOC_ID_REVISION`]). Answer NOT_SUPPORTED unless implemented; guests
/// only ask from [`MIN_VERSION_FOR_SOC_ID`] on.
///
/// DEN0028 "SMCCC_ARCH_SOC_ID"; docs/abi.md §1.
pub const SMCCC_ARCH_SOC_ID: FunctionId = FunctionId::fast32(Owner::Arch, 0x0002);

/// SMCCC_ARCH_WORKAROUND_1, `0x80008000` (Spectre v2 / CVE-2017-5715).
/// Probed through SMCCC_ARCH_FEATURES; answers: [`WORKAROUND_MITIGATED`],
/// [`WORKAROUND_UNAFFECTED`], [`WORKAROUND_VULNERABLE`].
///
/// DEN0028 "SMCCC_ARCH_WORKAROUND_1"; docs/abi.md §1.
pub const SMCCC_ARCH_WORKAROUND_1: FunctionId = FunctionId::fast32(Owner::Arch, 0x8000);

/// SMCCC_ARCH_WORKAROUND_2, `0x80007FFF` (Spectre v4 / SSBD, CVE-2018-3639).
/// Probed through SMCCC_ARCH_FEATURES; answers: [`WORKAROUND_MITIGATED`],
/// [`WORKAROUND_NOT_REQUIRED`], [`WORKAROUND_VULNERABLE`].
///
/// DEN0028 "SMCCC_ARCH_WORKAROUND_2"; docs/abi.md §1.
pub const SMCCC_ARCH_WORKAROUND_2: FunctionId = FunctionId::fast32(Owner::Arch, 0x7FFF);

/// SMCCC_ARCH_WORKAROUND_3, `0x80003FFF` (Spectre-BHB, CVE-2022-23960;
/// also covers WORKAROUND_1). Same answers as WORKAROUND_1.
///
/// DEN0028 "SMCCC_ARCH_WORKAROUND_3"; docs/abi.md §1.
pub const SMCCC_ARCH_WORKAROUND_3: FunctionId = FunctionId::fast32(Owner::Arch, 0x3FFF);

/// SMCCC_ARCH_FEATURES answer for a workaround: the call is implemented and
/// this PE needs it (the guest will call it / treat itself as mitigated).
///
/// DEN0028 "SMCCC_ARCH_WORKAROUND_1/2/3"; docs/abi.md §1 ("0 mitigated").
pub const WORKAROUND_MITIGATED: i64 = smccc::SUCCESS;

/// SMCCC_ARCH_FEATURES answer for WORKAROUND_1/3: this PE is not affected
/// (Linux `SMCCC_ARCH_WORKAROUND_RET_UNAFFECTED`).
///
/// DEN0028 "SMCCC_ARCH_WORKAROUND_1"; docs/abi.md §1 ("1 not affected").
pub const WORKAROUND_UNAFFECTED: i64 = 1;

/// SMCCC_ARCH_FEATURES answer for WORKAROUND_2: no dynamic mitigation is
/// required (unaffected or permanently mitigated). Linux also accepts
/// [`WORKAROUND_UNAFFECTED`] here.
///
/// DEN0028 "SMCCC_ARCH_WORKAROUND_2"; docs/abi.md §1 ("-2 not required").
pub const WORKAROUND_NOT_REQUIRED: i64 = smccc::NOT_REQUIRED;

/// SMCCC_ARCH_FEATURES answer for a workaround the firmware does not
/// provide (the guest then considers itself vulnerable).
///
/// DEN0028 "SMCCC_ARCH_FEATURES"; docs/abi.md §1 ("-1 vulnerable").
pub const WORKAROUND_VULNERABLE: i64 = smccc::NOT_SUPPORTED;

/// SMCCC_ARCH_SOC_ID argument x1 = 0: return the SoC version (JEP106 id
/// and implementation-defined SoC id).
///
/// DEN0028 "SMCCC_ARCH_SOC_ID".
pub const SOC_ID_VERSION: u32 = 0;

/// SMCCC_ARCH_SOC_ID argument x1 = 1: return the SoC revision.
///
/// DEN0028 "SMCCC_ARCH_SOC_ID".
pub const SOC_ID_REVISION: u32 = 1;

/// Linux only asks SMCCC_ARCH_SOC_ID when SMCCC_VERSION ≥ 1.2.
///
/// DEN0028 "SMCCC_ARCH_SOC_ID"; docs/abi.md §1.
pub const MIN_VERSION_FOR_SOC_ID: Version = smccc::VERSION_1_2;

/// Linux only probes the vendor hypervisor services (and the PV calls)
/// when SMCCC_VERSION ≥ 1.1 and the conduit is HVC.
///
/// docs/abi.md §1–2 (`kvm_init_hyp_services`).
pub const MIN_VERSION_FOR_VENDOR_PROBE: Version = smccc::VERSION_1_1;

/// Names of the calls in this module, for [`crate::describe`].
pub const CALLS: &[Entry] = &[
    Entry::new(SMCCC_VERSION, "SMCCC_VERSION"),
    Entry::new(SMCCC_ARCH_FEATURES, "SMCCC_ARCH_FEATURES"),
    Entry::new(SMCCC_ARCH_SOC_ID, "SMCCC_ARCH_SOC_ID"),
    Entry::new(SMCCC_ARCH_WORKAROUND_1, "SMCCC_ARCH_WORKAROUND_1"),
    Entry::new(SMCCC_ARCH_WORKAROUND_2, "SMCCC_ARCH_WORKAROUND_2"),
    Entry::new(SMCCC_ARCH_WORKAROUND_3, "SMCCC_ARCH_WORKAROUND_3"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_abi_md() {
        assert_eq!(SMCCC_VERSION.raw(), 0x80000000);
        assert_eq!(SMCCC_ARCH_FEATURES.raw(), 0x80000001);
        assert_eq!(SMCCC_ARCH_SOC_ID.raw(), 0x80000002);
        assert_eq!(SMCCC_ARCH_WORKAROUND_1.raw(), 0x80008000);
        assert_eq!(SMCCC_ARCH_WORKAROUND_2.raw(), 0x80007FFF);
        assert_eq!(SMCCC_ARCH_WORKAROUND_3.raw(), 0x80003FFF);
        for e in CALLS {
            assert!(e.id.is_fast() && !e.id.is_smc64());
            assert_eq!(e.id.owner(), Owner::Arch);
        }
    }

    #[test]
    fn answers() {
        assert_eq!(WORKAROUND_MITIGATED, 0);
        assert_eq!(WORKAROUND_UNAFFECTED, 1);
        assert_eq!(WORKAROUND_NOT_REQUIRED, -2);
        assert_eq!(WORKAROUND_VULNERABLE, -1);
        assert_eq!((SOC_ID_VERSION, SOC_ID_REVISION), (0, 1));
        assert_eq!(MIN_VERSION_FOR_SOC_ID.raw(), 0x10002);
        assert_eq!(MIN_VERSION_FOR_VENDOR_PROBE.raw(), 0x10001);
    }
}
