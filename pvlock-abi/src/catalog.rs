//! Names of every function ID this crate defines, for hypervisor logs and
//! per-call statistics.
//!
//! Each service module keeps a `CALLS` list next to its constants; this
//! module joins them ([`GROUPS`]) and checks at compile time that no id is
//! listed twice. The one known clash, `0x86000001` (mainline KVM_PTP and the
//! seed-v3 PV-lock call, docs/abi.md §3), is listed once under both names.

use crate::smccc::FunctionId;
use crate::{arch, control, directed_yield, kvm, psci, pvlock, pvtime};

/// A named function ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The id.
    pub id: FunctionId,
    /// Its name, as printed in logs.
    pub name: &'static str,
}

impl Entry {
    /// Builds an entry.
    pub const fn new(id: FunctionId, name: &'static str) -> Self {
        Self { id, name }
    }
}

/// Every service's `CALLS` list, in a fixed order (indices from
/// [`index_of`] follow it).
pub const GROUPS: &[&[Entry]] = &[
    arch::CALLS,
    kvm::CALLS,
    pvlock::seed_v2::CALLS,
    pvlock::seed_v3::CALLS,
    pvlock::openeuler::CALLS,
    pvlock::anolis::CALLS,
    directed_yield::CALLS,
    control::CALLS,
    pvtime::CALLS,
    psci::CALLS,
];

/// Number of named ids (length of the flattened [`GROUPS`]).
pub const LEN: usize = {
    let mut n = 0;
    let mut g = 0;
    while g < GROUPS.len() {
        n += GROUPS[g].len();
        g += 1;
    }
    n
};

const fn nth(mut i: usize) -> Entry {
    let mut g = 0;
    while i >= GROUPS[g].len() {
        i -= GROUPS[g].len();
        g += 1;
    }
    GROUPS[g][i]
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

// No id and no name appears twice.
const _: () = {
    let mut i = 0;
    while i < LEN {
        let mut j = i + 1;
        while j < LEN {
            assert!(nth(i).id.raw() != nth(j).id.raw(), "duplicate function id");
            assert!(!str_eq(nth(i).name, nth(j).name), "duplicate name");
            j += 1;
        }
        i += 1;
    }
};

/// Iterates over every named id.
pub fn entries() -> impl Iterator<Item = &'static Entry> {
    GROUPS.iter().flat_map(|g| g.iter())
}

/// The position of `id` in [`entries`] (`0..LEN`), e.g. to index a
/// per-call counter array; `None` for an unknown id.
pub fn index_of(id: FunctionId) -> Option<usize> {
    entries().position(|e| e.id == id)
}

/// The name of `id`, or `None` if this crate does not define it. Pass an
/// id decoded with [`FunctionId::from_x0`] (SVE hint already masked).
pub fn describe(id: FunctionId) -> Option<&'static str> {
    entries().find(|e| e.id == id).map(|e| e.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pvlock::{anolis, openeuler, seed_v2, seed_v3};

    extern crate std;
    use std::vec::Vec;

    /// Every function-id constant of the crate, by path.
    fn all_constants() -> Vec<(FunctionId, &'static str)> {
        std::vec![
            (arch::SMCCC_VERSION, "arch::SMCCC_VERSION"),
            (arch::SMCCC_ARCH_FEATURES, "arch::SMCCC_ARCH_FEATURES"),
            (arch::SMCCC_ARCH_SOC_ID, "arch::SMCCC_ARCH_SOC_ID"),
            (
                arch::SMCCC_ARCH_WORKAROUND_1,
                "arch::SMCCC_ARCH_WORKAROUND_1"
            ),
            (
                arch::SMCCC_ARCH_WORKAROUND_2,
                "arch::SMCCC_ARCH_WORKAROUND_2"
            ),
            (
                arch::SMCCC_ARCH_WORKAROUND_3,
                "arch::SMCCC_ARCH_WORKAROUND_3"
            ),
            (kvm::CALL_UID, "kvm::CALL_UID"),
            (kvm::FEATURES, "kvm::FEATURES"),
            (kvm::PTP, "kvm::PTP"),
            (seed_v2::PV_LOCK_FEATURES, "seed_v2::PV_LOCK_FEATURES"),
            (seed_v2::PV_LOCK_PREEMPTED, "seed_v2::PV_LOCK_PREEMPTED"),
            (seed_v3::PV_LOCK, "seed_v3::PV_LOCK"),
            (openeuler::PV_SCHED_FEATURES, "openeuler::PV_SCHED_FEATURES"),
            (openeuler::PV_SCHED_IPA_INIT, "openeuler::PV_SCHED_IPA_INIT"),
            (
                openeuler::PV_SCHED_IPA_RELEASE,
                "openeuler::PV_SCHED_IPA_RELEASE"
            ),
            (openeuler::PV_SCHED_KICK_CPU, "openeuler::PV_SCHED_KICK_CPU"),
            (anolis::PV_LOCK_FEATURES, "anolis::PV_LOCK_FEATURES"),
            (anolis::PV_LOCK_PREEMPTED, "anolis::PV_LOCK_PREEMPTED"),
            (
                anolis::PV_QSPINLOCK_FEATURES,
                "anolis::PV_QSPINLOCK_FEATURES"
            ),
            (
                anolis::PV_QSPINLOCK_KICK_CPU,
                "anolis::PV_QSPINLOCK_KICK_CPU"
            ),
            (
                directed_yield::PV_SCHED_YIELD_TO,
                "directed_yield::PV_SCHED_YIELD_TO"
            ),
            (
                directed_yield::PV_SCHED_KICK_LEND,
                "directed_yield::PV_SCHED_KICK_LEND"
            ),
            (
                control::PVLOCK_SET_WFX_POLICY,
                "control::PVLOCK_SET_WFX_POLICY"
            ),
            (pvtime::PV_TIME_FEATURES, "pvtime::PV_TIME_FEATURES"),
            (pvtime::PV_TIME_ST, "pvtime::PV_TIME_ST"),
            (psci::PSCI_VERSION, "psci::PSCI_VERSION"),
            (psci::CPU_SUSPEND, "psci::CPU_SUSPEND"),
            (psci::CPU_SUSPEND64, "psci::CPU_SUSPEND64"),
            (psci::CPU_OFF, "psci::CPU_OFF"),
            (psci::CPU_ON, "psci::CPU_ON"),
            (psci::CPU_ON64, "psci::CPU_ON64"),
            (psci::AFFINITY_INFO, "psci::AFFINITY_INFO"),
            (psci::AFFINITY_INFO64, "psci::AFFINITY_INFO64"),
            (psci::MIGRATE, "psci::MIGRATE"),
            (psci::MIGRATE64, "psci::MIGRATE64"),
            (psci::MIGRATE_INFO_TYPE, "psci::MIGRATE_INFO_TYPE"),
            (psci::MIGRATE_INFO_UP_CPU, "psci::MIGRATE_INFO_UP_CPU"),
            (psci::MIGRATE_INFO_UP_CPU64, "psci::MIGRATE_INFO_UP_CPU64"),
            (psci::SYSTEM_OFF, "psci::SYSTEM_OFF"),
            (psci::SYSTEM_RESET, "psci::SYSTEM_RESET"),
            (psci::PSCI_FEATURES, "psci::PSCI_FEATURES"),
            (psci::CPU_FREEZE, "psci::CPU_FREEZE"),
            (psci::CPU_DEFAULT_SUSPEND, "psci::CPU_DEFAULT_SUSPEND"),
            (psci::CPU_DEFAULT_SUSPEND64, "psci::CPU_DEFAULT_SUSPEND64"),
            (psci::NODE_HW_STATE, "psci::NODE_HW_STATE"),
            (psci::NODE_HW_STATE64, "psci::NODE_HW_STATE64"),
            (psci::SYSTEM_SUSPEND, "psci::SYSTEM_SUSPEND"),
            (psci::SYSTEM_SUSPEND64, "psci::SYSTEM_SUSPEND64"),
            (psci::PSCI_SET_SUSPEND_MODE, "psci::PSCI_SET_SUSPEND_MODE"),
            (psci::PSCI_STAT_RESIDENCY, "psci::PSCI_STAT_RESIDENCY"),
            (psci::PSCI_STAT_RESIDENCY64, "psci::PSCI_STAT_RESIDENCY64"),
            (psci::PSCI_STAT_COUNT, "psci::PSCI_STAT_COUNT"),
            (psci::PSCI_STAT_COUNT64, "psci::PSCI_STAT_COUNT64"),
            (psci::SYSTEM_RESET2, "psci::SYSTEM_RESET2"),
            (psci::SYSTEM_RESET2_64, "psci::SYSTEM_RESET2_64"),
            (psci::MEM_PROTECT, "psci::MEM_PROTECT"),
            (
                psci::MEM_PROTECT_CHECK_RANGE,
                "psci::MEM_PROTECT_CHECK_RANGE"
            ),
            (
                psci::MEM_PROTECT_CHECK_RANGE64,
                "psci::MEM_PROTECT_CHECK_RANGE64"
            ),
            (psci::SYSTEM_OFF2, "psci::SYSTEM_OFF2"),
            (psci::SYSTEM_OFF2_64, "psci::SYSTEM_OFF2_64"),
        ]
    }

    #[test]
    fn every_constant_has_a_name() {
        for (id, path) in all_constants() {
            assert!(describe(id).is_some(), "{path} ({id:?}) has no name");
        }
        // And every named id is one of the constants.
        let all = all_constants();
        for e in entries() {
            assert!(all.iter().any(|(id, _)| *id == e.id), "{}", e.name);
        }
    }

    #[test]
    fn only_documented_collision() {
        let all = all_constants();
        for (i, (a, pa)) in all.iter().enumerate() {
            for (b, pb) in &all[i + 1..] {
                if a == b {
                    let pair = [*pa, *pb];
                    assert!(
                        pair == ["kvm::PTP", "seed_v3::PV_LOCK"]
                            || pair == ["seed_v3::PV_LOCK", "kvm::PTP"],
                        "{pa} and {pb} share {a:?}"
                    );
                }
            }
        }
        assert_eq!(kvm::PTP.raw(), 0x86000001);
        assert_eq!(seed_v3::PV_LOCK.raw(), 0x86000001);
        assert_eq!(describe(kvm::PTP), Some("KVM_PTP|PV_LOCK(seed-v3)"));
    }

    #[test]
    fn lookups() {
        assert_eq!(LEN, entries().count());
        assert_eq!(LEN, all_constants().len() - 1);
        assert_eq!(
            describe(FunctionId::from_raw(0xC5000021)),
            Some("PV_TIME_ST")
        );
        assert_eq!(
            describe(FunctionId::from_x0(0xFFFF_FFFF_C501_0021)),
            Some("PV_TIME_ST")
        );
        assert_eq!(
            describe(FunctionId::from_raw(0x84000003)),
            Some("PSCI_CPU_ON")
        );
        assert_eq!(
            describe(FunctionId::from_raw(0xC4000003)),
            Some("PSCI_CPU_ON64")
        );
        assert_eq!(
            describe(FunctionId::from_raw(0x80000000)),
            Some("SMCCC_VERSION")
        );
        assert_eq!(
            describe(FunctionId::from_raw(0xC6000070)),
            Some("PV_SCHED_YIELD_TO")
        );
        assert_eq!(
            describe(FunctionId::from_raw(0xC6000071)),
            Some("PVLOCK_SET_WFX_POLICY")
        );
        // The retired numbers name nothing.
        assert_eq!(describe(FunctionId::from_raw(0xC6000022)), None);
        assert_eq!(describe(FunctionId::from_raw(0xC6000023)), None);
        assert_eq!(describe(FunctionId::from_raw(0x84000050)), None);
        assert_eq!(describe(FunctionId::from_raw(0xC6000002)), None);
        for (i, e) in entries().enumerate() {
            assert_eq!(index_of(e.id), Some(i));
            assert_eq!(nth(i), *e);
        }
        assert_eq!(index_of(FunctionId::from_raw(0)), None);
    }
}
