//! PSCI, the Power State Coordination Interface (Arm DEN0022), as offered
//! to guests. docs/abi.md §5.
//!
//! PSCI lives in the Standard Secure Service range (SMCCC owner 4),
//! function numbers 0x00..=0x1F: the 32-bit id is `0x84000000 + n`, the
//! 64-bit id `0xC4000000 + n`. Only functions that take or return an
//! MPIDR, an address or another register-width value have a 64-bit id
//! ([`has_smc64`]); the rest (PSCI_VERSION, CPU_OFF, MIGRATE_INFO_TYPE,
//! SYSTEM_OFF, SYSTEM_RESET, PSCI_FEATURES, CPU_FREEZE,
//! PSCI_SET_SUSPEND_MODE, MEM_PROTECT) exist only as SMC32.
//!
//! Spec sections are cited by title: DEN0022 chapter "API specification"
//! has one section per function (named as below), "Return error codes" and
//! "Function IDs" (the table of 32/64-bit ids).

use crate::catalog::Entry;
use crate::smccc::{FunctionId, Owner, Version};

/// PSCI function numbers `n` (bits 15:0 of the id).
///
/// DEN0022 "Function IDs" table; Linux `include/uapi/linux/psci.h`.
pub mod func {
    /// 0x00 PSCI_VERSION (SMC32 only).
    pub const PSCI_VERSION: u16 = 0;
    /// 0x01 CPU_SUSPEND (SMC32 and SMC64).
    pub const CPU_SUSPEND: u16 = 1;
    /// 0x02 CPU_OFF (SMC32 only).
    pub const CPU_OFF: u16 = 2;
    /// 0x03 CPU_ON (SMC32 and SMC64).
    pub const CPU_ON: u16 = 3;
    /// 0x04 AFFINITY_INFO (SMC32 and SMC64).
    pub const AFFINITY_INFO: u16 = 4;
    /// 0x05 MIGRATE (SMC32 and SMC64).
    pub const MIGRATE: u16 = 5;
    /// 0x06 MIGRATE_INFO_TYPE (SMC32 only).
    pub const MIGRATE_INFO_TYPE: u16 = 6;
    /// 0x07 MIGRATE_INFO_UP_CPU (SMC32 and SMC64; returns an MPIDR).
    pub const MIGRATE_INFO_UP_CPU: u16 = 7;
    /// 0x08 SYSTEM_OFF (SMC32 only).
    pub const SYSTEM_OFF: u16 = 8;
    /// 0x09 SYSTEM_RESET (SMC32 only).
    pub const SYSTEM_RESET: u16 = 9;
    /// 0x0A PSCI_FEATURES (SMC32 only; PSCI 1.0).
    pub const PSCI_FEATURES: u16 = 10;
    /// 0x0B CPU_FREEZE (SMC32 only; PSCI 1.0).
    pub const CPU_FREEZE: u16 = 11;
    /// 0x0C CPU_DEFAULT_SUSPEND (SMC32 and SMC64; PSCI 1.0).
    pub const CPU_DEFAULT_SUSPEND: u16 = 12;
    /// 0x0D NODE_HW_STATE (SMC32 and SMC64; PSCI 1.0).
    pub const NODE_HW_STATE: u16 = 13;
    /// 0x0E SYSTEM_SUSPEND (SMC32 and SMC64; PSCI 1.0).
    pub const SYSTEM_SUSPEND: u16 = 14;
    /// 0x0F PSCI_SET_SUSPEND_MODE (SMC32 only; PSCI 1.0).
    pub const PSCI_SET_SUSPEND_MODE: u16 = 15;
    /// 0x10 PSCI_STAT_RESIDENCY (SMC32 and SMC64; PSCI 1.0).
    pub const PSCI_STAT_RESIDENCY: u16 = 16;
    /// 0x11 PSCI_STAT_COUNT (SMC32 and SMC64; PSCI 1.0).
    pub const PSCI_STAT_COUNT: u16 = 17;
    /// 0x12 SYSTEM_RESET2 (SMC32 and SMC64; PSCI 1.1).
    pub const SYSTEM_RESET2: u16 = 18;
    /// 0x13 MEM_PROTECT (SMC32 only; PSCI 1.1).
    pub const MEM_PROTECT: u16 = 19;
    /// 0x14 MEM_PROTECT_CHECK_RANGE (SMC32 and SMC64; PSCI 1.1).
    pub const MEM_PROTECT_CHECK_RANGE: u16 = 20;
    /// 0x15 SYSTEM_OFF2 (SMC32 and SMC64; PSCI 1.3).
    pub const SYSTEM_OFF2: u16 = 21;
    /// Last function number of the PSCI block (0x00..=0x1F).
    pub const LAST: u16 = 0x1F;
}

/// Whether PSCI function `number` also has an SMC64 id.
///
/// DEN0022 "Function IDs" table (functions with an MPIDR, address or other
/// register-width argument or result).
pub const fn has_smc64(number: u16) -> bool {
    matches!(
        number,
        func::CPU_SUSPEND
            | func::CPU_ON
            | func::AFFINITY_INFO
            | func::MIGRATE
            | func::MIGRATE_INFO_UP_CPU
            | func::CPU_DEFAULT_SUSPEND
            | func::NODE_HW_STATE
            | func::SYSTEM_SUSPEND
            | func::PSCI_STAT_RESIDENCY
            | func::PSCI_STAT_COUNT
            | func::SYSTEM_RESET2
            | func::MEM_PROTECT_CHECK_RANGE
            | func::SYSTEM_OFF2
    )
}

/// Whether `id` lies in the PSCI block: fast call, owner 4 (Standard
/// Secure), function number 0x00..=0x1F (either convention).
///
/// DEN0028 service-call ranges (PSCI = Standard Secure 0x00-0x1F); DEN0022
/// "Function IDs".
pub const fn is_psci(id: FunctionId) -> bool {
    id.is_fast()
        && matches!(id.owner(), Owner::StandardSecure)
        && id.mbz_bits() == 0
        && id.number() <= func::LAST
}

const fn id32(n: u16) -> FunctionId {
    FunctionId::fast32(Owner::StandardSecure, n)
}

const fn id64(n: u16) -> FunctionId {
    assert!(has_smc64(n), "this PSCI function has no SMC64 id");
    FunctionId::fast64(Owner::StandardSecure, n)
}

/// PSCI_VERSION `0x84000000`. DEN0022 "PSCI_VERSION".
pub const PSCI_VERSION: FunctionId = id32(func::PSCI_VERSION);
/// CPU_SUSPEND `0x84000001`. DEN0022 "CPU_SUSPEND".
pub const CPU_SUSPEND: FunctionId = id32(func::CPU_SUSPEND);
/// CPU_SUSPEND (SMC64) `0xC4000001`. DEN0022 "CPU_SUSPEND".
pub const CPU_SUSPEND64: FunctionId = id64(func::CPU_SUSPEND);
/// CPU_OFF `0x84000002`. DEN0022 "CPU_OFF".
pub const CPU_OFF: FunctionId = id32(func::CPU_OFF);
/// CPU_ON `0x84000003` (x1 MPIDR, x2 entry, x3 context; SMC32 uses only
/// the low 32 bits). DEN0022 "CPU_ON"; docs/abi.md §5.
pub const CPU_ON: FunctionId = id32(func::CPU_ON);
/// CPU_ON (SMC64) `0xC4000003`. DEN0022 "CPU_ON"; docs/abi.md §5.
pub const CPU_ON64: FunctionId = id64(func::CPU_ON);
/// AFFINITY_INFO `0x84000004` (x1 target affinity, x2 lowest level).
/// DEN0022 "AFFINITY_INFO".
pub const AFFINITY_INFO: FunctionId = id32(func::AFFINITY_INFO);
/// AFFINITY_INFO (SMC64) `0xC4000004`. DEN0022 "AFFINITY_INFO".
pub const AFFINITY_INFO64: FunctionId = id64(func::AFFINITY_INFO);
/// MIGRATE `0x84000005`. DEN0022 "MIGRATE".
pub const MIGRATE: FunctionId = id32(func::MIGRATE);
/// MIGRATE (SMC64) `0xC4000005`. DEN0022 "MIGRATE".
pub const MIGRATE64: FunctionId = id64(func::MIGRATE);
/// MIGRATE_INFO_TYPE `0x84000006`. DEN0022 "MIGRATE_INFO_TYPE".
pub const MIGRATE_INFO_TYPE: FunctionId = id32(func::MIGRATE_INFO_TYPE);
/// MIGRATE_INFO_UP_CPU `0x84000007`. DEN0022 "MIGRATE_INFO_UP_CPU".
pub const MIGRATE_INFO_UP_CPU: FunctionId = id32(func::MIGRATE_INFO_UP_CPU);
/// MIGRATE_INFO_UP_CPU (SMC64) `0xC4000007`. DEN0022 "MIGRATE_INFO_UP_CPU".
pub const MIGRATE_INFO_UP_CPU64: FunctionId = id64(func::MIGRATE_INFO_UP_CPU);
/// SYSTEM_OFF `0x84000008`. DEN0022 "SYSTEM_OFF".
pub const SYSTEM_OFF: FunctionId = id32(func::SYSTEM_OFF);
/// SYSTEM_RESET `0x84000009`. DEN0022 "SYSTEM_RESET".
pub const SYSTEM_RESET: FunctionId = id32(func::SYSTEM_RESET);
/// PSCI_FEATURES `0x8400000A` (x1 = function ID): 0 (or feature flags) for
/// each implemented PSCI function and for SMCCC_VERSION, else -1.
/// DEN0022 "PSCI_FEATURES"; docs/abi.md §5.
pub const PSCI_FEATURES: FunctionId = id32(func::PSCI_FEATURES);
/// CPU_FREEZE `0x8400000B`. DEN0022 "CPU_FREEZE".
pub const CPU_FREEZE: FunctionId = id32(func::CPU_FREEZE);
/// CPU_DEFAULT_SUSPEND `0x8400000C`. DEN0022 "CPU_DEFAULT_SUSPEND".
pub const CPU_DEFAULT_SUSPEND: FunctionId = id32(func::CPU_DEFAULT_SUSPEND);
/// CPU_DEFAULT_SUSPEND (SMC64) `0xC400000C`. DEN0022 "CPU_DEFAULT_SUSPEND".
pub const CPU_DEFAULT_SUSPEND64: FunctionId = id64(func::CPU_DEFAULT_SUSPEND);
/// NODE_HW_STATE `0x8400000D`. DEN0022 "NODE_HW_STATE".
pub const NODE_HW_STATE: FunctionId = id32(func::NODE_HW_STATE);
/// NODE_HW_STATE (SMC64) `0xC400000D`. DEN0022 "NODE_HW_STATE".
pub const NODE_HW_STATE64: FunctionId = id64(func::NODE_HW_STATE);
/// SYSTEM_SUSPEND `0x8400000E`. DEN0022 "SYSTEM_SUSPEND".
pub const SYSTEM_SUSPEND: FunctionId = id32(func::SYSTEM_SUSPEND);
/// SYSTEM_SUSPEND (SMC64) `0xC400000E`. DEN0022 "SYSTEM_SUSPEND".
pub const SYSTEM_SUSPEND64: FunctionId = id64(func::SYSTEM_SUSPEND);
/// PSCI_SET_SUSPEND_MODE `0x8400000F`. DEN0022 "PSCI_SET_SUSPEND_MODE".
pub const PSCI_SET_SUSPEND_MODE: FunctionId = id32(func::PSCI_SET_SUSPEND_MODE);
/// PSCI_STAT_RESIDENCY `0x84000010`. DEN0022 "PSCI_STAT_RESIDENCY".
pub const PSCI_STAT_RESIDENCY: FunctionId = id32(func::PSCI_STAT_RESIDENCY);
/// PSCI_STAT_RESIDENCY (SMC64) `0xC4000010`. DEN0022 "PSCI_STAT_RESIDENCY".
pub const PSCI_STAT_RESIDENCY64: FunctionId = id64(func::PSCI_STAT_RESIDENCY);
/// PSCI_STAT_COUNT `0x84000011`. DEN0022 "PSCI_STAT_COUNT".
pub const PSCI_STAT_COUNT: FunctionId = id32(func::PSCI_STAT_COUNT);
/// PSCI_STAT_COUNT (SMC64) `0xC4000011`. DEN0022 "PSCI_STAT_COUNT".
pub const PSCI_STAT_COUNT64: FunctionId = id64(func::PSCI_STAT_COUNT);
/// SYSTEM_RESET2 `0x84000012` (x1 reset type, x2 cookie; see
/// [`reset2_type_supported`]). DEN0022 "SYSTEM_RESET2"; docs/abi.md §5.
pub const SYSTEM_RESET2: FunctionId = id32(func::SYSTEM_RESET2);
/// SYSTEM_RESET2 (SMC64) `0xC4000012`. DEN0022 "SYSTEM_RESET2".
pub const SYSTEM_RESET2_64: FunctionId = id64(func::SYSTEM_RESET2);
/// MEM_PROTECT `0x84000013`. DEN0022 "MEM_PROTECT".
pub const MEM_PROTECT: FunctionId = id32(func::MEM_PROTECT);
/// MEM_PROTECT_CHECK_RANGE `0x84000014`. DEN0022 "MEM_PROTECT_CHECK_RANGE".
pub const MEM_PROTECT_CHECK_RANGE: FunctionId = id32(func::MEM_PROTECT_CHECK_RANGE);
/// MEM_PROTECT_CHECK_RANGE (SMC64) `0xC4000014`.
/// DEN0022 "MEM_PROTECT_CHECK_RANGE".
pub const MEM_PROTECT_CHECK_RANGE64: FunctionId = id64(func::MEM_PROTECT_CHECK_RANGE);
/// SYSTEM_OFF2 `0x84000015` (PSCI 1.3). DEN0022 (issue F) "SYSTEM_OFF2".
pub const SYSTEM_OFF2: FunctionId = id32(func::SYSTEM_OFF2);
/// SYSTEM_OFF2 (SMC64) `0xC4000015` (PSCI 1.3). DEN0022 "SYSTEM_OFF2".
pub const SYSTEM_OFF2_64: FunctionId = id64(func::SYSTEM_OFF2);

/// PSCI 0.2 (`0x00002`). DEN0022 "PSCI_VERSION" (same encoding as
/// [`crate::smccc::Version`]: major 30:16, minor 15:0).
pub const VERSION_0_2: Version = Version::new(0, 2);
/// PSCI 1.0 (`0x10000`). DEN0022 "PSCI_VERSION".
pub const VERSION_1_0: Version = Version::new(1, 0);
/// PSCI 1.1 (`0x10001`), KVM's answer; Linux prints `PSCIv1.1 detected in
/// firmware.` DEN0022 "PSCI_VERSION"; docs/abi.md §5.
pub const VERSION_1_1: Version = Version::new(1, 1);

/// PSCI return error codes. DEN0022 defines them as `int32`; a host
/// writes them to X0 sign-extended ([`ret_to_x0`]).
///
/// DEN0022 "Return error codes"; docs/abi.md §5.
pub mod error {
    /// SUCCESS. DEN0022 "Return error codes".
    pub const SUCCESS: i32 = 0;
    /// NOT_SUPPORTED. DEN0022 "Return error codes".
    pub const NOT_SUPPORTED: i32 = -1;
    /// INVALID_PARAMETERS. DEN0022 "Return error codes".
    pub const INVALID_PARAMETERS: i32 = -2;
    /// DENIED. DEN0022 "Return error codes".
    pub const DENIED: i32 = -3;
    /// ALREADY_ON. DEN0022 "Return error codes".
    pub const ALREADY_ON: i32 = -4;
    /// ON_PENDING. DEN0022 "Return error codes".
    pub const ON_PENDING: i32 = -5;
    /// INTERNAL_FAILURE. DEN0022 "Return error codes".
    pub const INTERNAL_FAILURE: i32 = -6;
    /// NOT_PRESENT. DEN0022 "Return error codes".
    pub const NOT_PRESENT: i32 = -7;
    /// DISABLED. DEN0022 "Return error codes".
    pub const DISABLED: i32 = -8;
    /// INVALID_ADDRESS. DEN0022 "Return error codes".
    pub const INVALID_ADDRESS: i32 = -9;

    /// The name of a PSCI return code, for logs (`None` if unknown).
    pub const fn name(code: i32) -> Option<&'static str> {
        Some(match code {
            SUCCESS => "SUCCESS",
            NOT_SUPPORTED => "NOT_SUPPORTED",
            INVALID_PARAMETERS => "INVALID_PARAMETERS",
            DENIED => "DENIED",
            ALREADY_ON => "ALREADY_ON",
            ON_PENDING => "ON_PENDING",
            INTERNAL_FAILURE => "INTERNAL_FAILURE",
            NOT_PRESENT => "NOT_PRESENT",
            DISABLED => "DISABLED",
            INVALID_ADDRESS => "INVALID_ADDRESS",
            _ => return None,
        })
    }
}

/// Turns a PSCI `int32` result into the X0 value, sign-extended to 64 bits
/// (e.g. -2 becomes `0xFFFF_FFFF_FFFF_FFFE`), as KVM does and Linux expects.
///
/// DEN0022 "Return error codes"; DEN0028 "Return codes"; docs/abi.md §1.
pub const fn ret_to_x0(code: i32) -> u64 {
    crate::smccc::ret_to_x0(code as i64)
}

/// AFFINITY_INFO answer: the node is ON. DEN0022 "AFFINITY_INFO"; docs/abi.md §5.
pub const AFFINITY_ON: i32 = 0;
/// AFFINITY_INFO answer: the node is OFF. DEN0022 "AFFINITY_INFO".
pub const AFFINITY_OFF: i32 = 1;
/// AFFINITY_INFO answer: the node is ON_PENDING. DEN0022 "AFFINITY_INFO".
pub const AFFINITY_ON_PENDING: i32 = 2;
/// Highest valid `lowest_affinity_level` argument of AFFINITY_INFO (3); a
/// larger one answers [`error::INVALID_PARAMETERS`]. DEN0022 "AFFINITY_INFO";
/// docs/abi.md §5.
pub const AFFINITY_LEVEL_MAX: u64 = 3;

/// MIGRATE_INFO_TYPE answer 0: a uniprocessor Trusted OS that supports
/// migration. DEN0022 "MIGRATE_INFO_TYPE".
pub const TOS_UP_MIGRATE_CAPABLE: i32 = 0;
/// MIGRATE_INFO_TYPE answer 1: a uniprocessor Trusted OS that does not
/// support migration. DEN0022 "MIGRATE_INFO_TYPE".
pub const TOS_UP_NOT_MIGRATE_CAPABLE: i32 = 1;
/// MIGRATE_INFO_TYPE answer 2: no Trusted OS, or one that needs no
/// migration — KVM's (and our) answer. Linux `PSCI_0_2_TOS_MP`.
/// DEN0022 "MIGRATE_INFO_TYPE"; docs/abi.md §5.
pub const TOS_NOT_PRESENT_OR_MP: i32 = 2;

/// SYSTEM_RESET2 reset type bit 31: 1 = vendor-specific reset, 0 =
/// architectural reset. DEN0022 "SYSTEM_RESET2"; docs/abi.md §5.
pub const RESET2_VENDOR: u32 = 1 << 31;
/// SYSTEM_RESET2 architectural reset type 0: SYSTEM_WARM_RESET (the only
/// architectural type defined). DEN0022 "SYSTEM_RESET2"; docs/abi.md §5.
pub const RESET2_SYSTEM_WARM_RESET: u32 = 0;

/// KVM's SYSTEM_RESET2 rule: type 0 (warm reset) or any vendor type
/// (bit 31 set) is accepted; any other architectural type answers
/// [`error::INVALID_PARAMETERS`]. DEN0022 "SYSTEM_RESET2"; docs/abi.md §5.
pub const fn reset2_type_supported(reset_type: u32) -> bool {
    reset_type == RESET2_SYSTEM_WARM_RESET || reset_type & RESET2_VENDOR != 0
}

/// PSCI_FEATURES(CPU_SUSPEND) flag bit 0: OS-initiated mode supported.
/// DEN0022 "PSCI_FEATURES".
pub const CPU_SUSPEND_FEATURE_OS_INITIATED: u32 = 1 << 0;
/// PSCI_FEATURES(CPU_SUSPEND) flag bit 1: extended StateID format (0 = the
/// original format, KVM's answer). DEN0022 "PSCI_FEATURES".
pub const CPU_SUSPEND_FEATURE_EXTENDED_STATE_ID: u32 = 1 << 1;

/// Names for [`crate::describe`].
pub const CALLS: &[Entry] = &[
    Entry::new(PSCI_VERSION, "PSCI_VERSION"),
    Entry::new(CPU_SUSPEND, "PSCI_CPU_SUSPEND"),
    Entry::new(CPU_SUSPEND64, "PSCI_CPU_SUSPEND64"),
    Entry::new(CPU_OFF, "PSCI_CPU_OFF"),
    Entry::new(CPU_ON, "PSCI_CPU_ON"),
    Entry::new(CPU_ON64, "PSCI_CPU_ON64"),
    Entry::new(AFFINITY_INFO, "PSCI_AFFINITY_INFO"),
    Entry::new(AFFINITY_INFO64, "PSCI_AFFINITY_INFO64"),
    Entry::new(MIGRATE, "PSCI_MIGRATE"),
    Entry::new(MIGRATE64, "PSCI_MIGRATE64"),
    Entry::new(MIGRATE_INFO_TYPE, "PSCI_MIGRATE_INFO_TYPE"),
    Entry::new(MIGRATE_INFO_UP_CPU, "PSCI_MIGRATE_INFO_UP_CPU"),
    Entry::new(MIGRATE_INFO_UP_CPU64, "PSCI_MIGRATE_INFO_UP_CPU64"),
    Entry::new(SYSTEM_OFF, "PSCI_SYSTEM_OFF"),
    Entry::new(SYSTEM_RESET, "PSCI_SYSTEM_RESET"),
    Entry::new(PSCI_FEATURES, "PSCI_FEATURES"),
    Entry::new(CPU_FREEZE, "PSCI_CPU_FREEZE"),
    Entry::new(CPU_DEFAULT_SUSPEND, "PSCI_CPU_DEFAULT_SUSPEND"),
    Entry::new(CPU_DEFAULT_SUSPEND64, "PSCI_CPU_DEFAULT_SUSPEND64"),
    Entry::new(NODE_HW_STATE, "PSCI_NODE_HW_STATE"),
    Entry::new(NODE_HW_STATE64, "PSCI_NODE_HW_STATE64"),
    Entry::new(SYSTEM_SUSPEND, "PSCI_SYSTEM_SUSPEND"),
    Entry::new(SYSTEM_SUSPEND64, "PSCI_SYSTEM_SUSPEND64"),
    Entry::new(PSCI_SET_SUSPEND_MODE, "PSCI_SET_SUSPEND_MODE"),
    Entry::new(PSCI_STAT_RESIDENCY, "PSCI_STAT_RESIDENCY"),
    Entry::new(PSCI_STAT_RESIDENCY64, "PSCI_STAT_RESIDENCY64"),
    Entry::new(PSCI_STAT_COUNT, "PSCI_STAT_COUNT"),
    Entry::new(PSCI_STAT_COUNT64, "PSCI_STAT_COUNT64"),
    Entry::new(SYSTEM_RESET2, "PSCI_SYSTEM_RESET2"),
    Entry::new(SYSTEM_RESET2_64, "PSCI_SYSTEM_RESET2_64"),
    Entry::new(MEM_PROTECT, "PSCI_MEM_PROTECT"),
    Entry::new(MEM_PROTECT_CHECK_RANGE, "PSCI_MEM_PROTECT_CHECK_RANGE"),
    Entry::new(MEM_PROTECT_CHECK_RANGE64, "PSCI_MEM_PROTECT_CHECK_RANGE64"),
    Entry::new(SYSTEM_OFF2, "PSCI_SYSTEM_OFF2"),
    Entry::new(SYSTEM_OFF2_64, "PSCI_SYSTEM_OFF2_64"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_abi_md() {
        let table: &[(FunctionId, u32)] = &[
            (PSCI_VERSION, 0x84000000),
            (CPU_SUSPEND, 0x84000001),
            (CPU_SUSPEND64, 0xC4000001),
            (CPU_OFF, 0x84000002),
            (CPU_ON, 0x84000003),
            (CPU_ON64, 0xC4000003),
            (AFFINITY_INFO, 0x84000004),
            (AFFINITY_INFO64, 0xC4000004),
            (MIGRATE, 0x84000005),
            (MIGRATE64, 0xC4000005),
            (MIGRATE_INFO_TYPE, 0x84000006),
            (MIGRATE_INFO_UP_CPU, 0x84000007),
            (MIGRATE_INFO_UP_CPU64, 0xC4000007),
            (SYSTEM_OFF, 0x84000008),
            (SYSTEM_RESET, 0x84000009),
            (PSCI_FEATURES, 0x8400000A),
            (CPU_FREEZE, 0x8400000B),
            (CPU_DEFAULT_SUSPEND, 0x8400000C),
            (CPU_DEFAULT_SUSPEND64, 0xC400000C),
            (NODE_HW_STATE, 0x8400000D),
            (NODE_HW_STATE64, 0xC400000D),
            (SYSTEM_SUSPEND, 0x8400000E),
            (SYSTEM_SUSPEND64, 0xC400000E),
            (PSCI_SET_SUSPEND_MODE, 0x8400000F),
            (PSCI_STAT_RESIDENCY, 0x84000010),
            (PSCI_STAT_RESIDENCY64, 0xC4000010),
            (PSCI_STAT_COUNT, 0x84000011),
            (PSCI_STAT_COUNT64, 0xC4000011),
            (SYSTEM_RESET2, 0x84000012),
            (SYSTEM_RESET2_64, 0xC4000012),
            (MEM_PROTECT, 0x84000013),
            (MEM_PROTECT_CHECK_RANGE, 0x84000014),
            (MEM_PROTECT_CHECK_RANGE64, 0xC4000014),
            (SYSTEM_OFF2, 0x84000015),
            (SYSTEM_OFF2_64, 0xC4000015),
        ];
        assert_eq!(table.len(), CALLS.len());
        for (id, raw) in table {
            assert_eq!(id.raw(), *raw, "{id:?}");
            assert!(is_psci(*id));
            assert_eq!(id.owner(), Owner::StandardSecure);
            // Each SMC64 id has an SMC32 sibling.
            if id.is_smc64() {
                assert!(has_smc64(id.number()));
                assert!(table.iter().any(|(s, _)| *s == id.to_smc32()));
            }
        }
        // Every number 0..=21 is present as SMC32, and as SMC64 exactly
        // when has_smc64 says so.
        for n in 0..=func::SYSTEM_OFF2 {
            let n32 = table
                .iter()
                .filter(|(id, _)| id.number() == n && !id.is_smc64());
            let n64 = table
                .iter()
                .filter(|(id, _)| id.number() == n && id.is_smc64());
            assert_eq!(n32.count(), 1, "fn {n}");
            assert_eq!(n64.count(), usize::from(has_smc64(n)), "fn {n}");
        }
    }

    #[test]
    fn numbers_match_abi_md() {
        assert_eq!(func::PSCI_VERSION, 0);
        assert_eq!(func::CPU_SUSPEND, 1);
        assert_eq!(func::CPU_OFF, 2);
        assert_eq!(func::CPU_ON, 3);
        assert_eq!(func::AFFINITY_INFO, 4);
        assert_eq!(func::MIGRATE, 5);
        assert_eq!(func::MIGRATE_INFO_TYPE, 6);
        assert_eq!(func::MIGRATE_INFO_UP_CPU, 7);
        assert_eq!(func::SYSTEM_OFF, 8);
        assert_eq!(func::SYSTEM_RESET, 9);
        assert_eq!(func::PSCI_FEATURES, 10);
        assert_eq!(func::CPU_FREEZE, 11);
        assert_eq!(func::CPU_DEFAULT_SUSPEND, 12);
        assert_eq!(func::NODE_HW_STATE, 13);
        assert_eq!(func::SYSTEM_SUSPEND, 14);
        assert_eq!(func::PSCI_SET_SUSPEND_MODE, 15);
        assert_eq!(func::PSCI_STAT_RESIDENCY, 16);
        assert_eq!(func::PSCI_STAT_COUNT, 17);
        assert_eq!(func::SYSTEM_RESET2, 18);
        assert_eq!(func::MEM_PROTECT, 19);
        assert_eq!(func::MEM_PROTECT_CHECK_RANGE, 20);
        assert_eq!(func::SYSTEM_OFF2, 21);
        assert_eq!(func::LAST, 0x1F);
    }

    #[test]
    fn smc32_only_functions() {
        for n in [
            func::PSCI_VERSION,
            func::CPU_OFF,
            func::MIGRATE_INFO_TYPE,
            func::SYSTEM_OFF,
            func::SYSTEM_RESET,
            func::PSCI_FEATURES,
            func::CPU_FREEZE,
            func::PSCI_SET_SUSPEND_MODE,
            func::MEM_PROTECT,
        ] {
            assert!(!has_smc64(n), "fn {n}");
        }
    }

    #[test]
    fn is_psci_range() {
        assert!(is_psci(FunctionId::from_raw(0x8400001F)));
        assert!(!is_psci(FunctionId::from_raw(0x84000020)));
        assert!(!is_psci(FunctionId::from_raw(0x85000000)));
        assert!(!is_psci(FunctionId::from_raw(0x04000000)));
        assert!(!is_psci(FunctionId::from_raw(0x84020000)));
    }

    #[test]
    fn errors_and_answers() {
        use error::*;
        let codes = [
            SUCCESS,
            NOT_SUPPORTED,
            INVALID_PARAMETERS,
            DENIED,
            ALREADY_ON,
            ON_PENDING,
            INTERNAL_FAILURE,
            NOT_PRESENT,
            DISABLED,
            INVALID_ADDRESS,
        ];
        assert_eq!(codes, [0, -1, -2, -3, -4, -5, -6, -7, -8, -9]);
        for c in codes {
            assert!(error::name(c).is_some());
        }
        assert_eq!(error::name(-10), None);
        assert_eq!(error::name(DENIED), Some("DENIED"));
        assert_eq!(ret_to_x0(NOT_SUPPORTED), 0xFFFF_FFFF_FFFF_FFFF);
        assert_eq!(ret_to_x0(INVALID_PARAMETERS), 0xFFFF_FFFF_FFFF_FFFE);
        assert_eq!(ret_to_x0(TOS_NOT_PRESENT_OR_MP), 2);
        assert_eq!(VERSION_0_2.raw(), 0x00002);
        assert_eq!(VERSION_1_0.raw(), 0x10000);
        assert_eq!(VERSION_1_1.raw(), 0x10001);
        assert_eq!((AFFINITY_ON, AFFINITY_OFF, AFFINITY_ON_PENDING), (0, 1, 2));
        assert_eq!(AFFINITY_LEVEL_MAX, 3);
        assert_eq!(TOS_UP_MIGRATE_CAPABLE, 0);
        assert_eq!(TOS_UP_NOT_MIGRATE_CAPABLE, 1);
        assert_eq!(TOS_NOT_PRESENT_OR_MP, 2);
        assert_eq!(CPU_SUSPEND_FEATURE_OS_INITIATED, 1);
        assert_eq!(CPU_SUSPEND_FEATURE_EXTENDED_STATE_ID, 2);
    }

    #[test]
    fn system_reset2_types() {
        assert_eq!(RESET2_VENDOR, 0x8000_0000);
        assert_eq!(RESET2_SYSTEM_WARM_RESET, 0);
        assert!(reset2_type_supported(0));
        assert!(reset2_type_supported(0x8000_0000));
        assert!(reset2_type_supported(0xFFFF_FFFF));
        assert!(!reset2_type_supported(1));
        assert!(!reset2_type_supported(0x7FFF_FFFF));
    }
}
