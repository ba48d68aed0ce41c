//! KVM's vendor-specific hypervisor services (SMCCC owner 6), which guests
//! use to detect "KVM" and to discover which vendor functions exist.
//!
//! References: Linux `Documentation/virt/kvm/arm/hypercalls.rst` and
//! `ptp_kvm.rst`, `include/linux/arm-smccc.h`,
//! `drivers/firmware/smccc/kvm_guest.c`; DEN0028 "General Service
//! Queries" for the Call UID; docs/abi.md §2.

use crate::catalog::Entry;
use crate::pvlock::{seed_v2, seed_v3};
use crate::smccc::{self, FunctionId, Owner};

/// Vendor hypervisor Call UID, `0x8600FF01`: answers [`UID`] in W0..W3
/// (upper halves zero). Linux compares all four words.
///
/// DEN0028 "General Service Queries" (Call UID, function 0xFF01); docs/abi.md §2.
pub const CALL_UID: FunctionId = FunctionId::fast32(Owner::VendorHypervisor, smccc::CALL_UID);

/// KVM's UUID `28b46fb6-2ec5-11e9-a9ca-4b564d003a74`, bytes in string order.
///
/// Linux `ARM_SMCCC_VENDOR_HYP_UID_KVM` (since 6.16 a `UUID_INIT(0x28b46fb6,
/// 0x2ec5, 0x11e9, 0xa9, 0xca, 0x4b, 0x56, 0x4d, 0x00, 0x3a, 0x74)`); docs/abi.md §2.
pub const UID_BYTES: [u8; 16] = [
    0x28, 0xb4, 0x6f, 0xb6, // 28b46fb6
    0x2e, 0xc5, // 2ec5
    0x11, 0xe9, // 11e9
    0xa9, 0xca, // a9ca
    0x4b, 0x56, 0x4d, 0x00, 0x3a, 0x74, // 4b564d003a74
];

/// KVM's Call UID as the four result words W0..W3, i.e.
/// [`smccc::uuid_to_words`]`(`[`UID_BYTES`]`)`.
///
/// Linux `ARM_SMCCC_VENDOR_HYP_UID_KVM_REG_0..3` (before 6.16); docs/abi.md §2.
pub const UID: [u32; 4] = [0xb66fb428, 0xe911c52e, 0x564bcaa9, 0x743a004d];

const _: () = {
    let packed = smccc::uuid_to_words(UID_BYTES);
    assert!(packed[0] == UID[0] && packed[1] == UID[1]);
    assert!(packed[2] == UID[2] && packed[3] == UID[3]);
    // DEN0028: word 0 of a UID must never be 0xFFFFFFFF (that is -1,
    // "no UID"); docs/abi.md §1.
    assert!(UID[0] != 0xFFFF_FFFF);
};

/// KVM "vendor function" numbers: SMCCC function numbers in owner 6 and, at
/// the same time, bit numbers in the [`FEATURES`] bitmap (bit N set =
/// vendor function N implemented).
///
/// Linux `ARM_SMCCC_KVM_FUNC_*` (`include/linux/arm-smccc.h`); docs/abi.md §2.
pub mod func {
    /// 0: KVM_FEATURES itself; always advertised.
    pub const FEATURES: u16 = 0;
    /// 1: KVM_PTP (also the seed-v3 PV-lock call; see
    /// [`crate::pvlock::seed_v3`]).
    pub const PTP: u16 = 1;
    /// 2: pKVM HYP_MEMINFO (protected guests only).
    pub const HYP_MEMINFO: u16 = 2;
    /// 3: pKVM MEM_SHARE.
    pub const MEM_SHARE: u16 = 3;
    /// 4: pKVM MEM_UNSHARE.
    pub const MEM_UNSHARE: u16 = 4;
    /// 7: pKVM MMIO_GUARD.
    pub const MMIO_GUARD: u16 = 7;
    /// First number of the pKVM range (`HYP_MEMINFO`).
    pub const PKVM_FIRST: u16 = 2;
    /// Last number of the pKVM range. Mainline (6.12+) reserves 2..=63
    /// (`ARM_SMCCC_KVM_FUNC_PKVM_RESV_5..63`), not only 2..=8.
    pub const PKVM_LAST: u16 = 63;
    /// 64: DISCOVER_IMPL_VER (target-implementation discovery).
    pub const DISCOVER_IMPL_VER: u16 = 64;
    /// 65: DISCOVER_IMPL_CPUS.
    pub const DISCOVER_IMPL_CPUS: u16 = 65;
    /// 127: FEATURES_2 (reserved for a second bitmap).
    pub const FEATURES_2: u16 = 127;
    /// Number of bits in the [`super::KvmFeatures`] bitmap (0..=127).
    pub const NUM_FUNCS: u16 = 128;

    /// Bit 32: **this project's** advertisement of the seed-v2 PV-lock
    /// PV_LOCK_FEATURES call (`0xC6000020`). The bit number is the call's
    /// vendor function number (0x20), by the "bit N = vendor function N"
    /// rule; no published guest reads it (seed-v2 guests probe with
    /// SMCCC_ARCH_FEATURES).
    ///
    /// Caution: seed-v2's numbers are published and kept, but they lie
    /// inside the range mainline reserves for pKVM ([`PKVM_FIRST`] to
    /// [`PKVM_LAST`]): this bit is `ARM_SMCCC_KVM_FUNC_PKVM_RESV_32` there.
    /// A guest that reads that range as pKVM's must not be offered
    /// seed-v2 (docs/abi.md §2).
    pub const PV_LOCK_FEATURES: u16 = crate::pvlock::seed_v2::PV_LOCK_FEATURES.number();

    /// Bit 33: this project's advertisement of seed-v2 PV_LOCK_PREEMPTED
    /// (`0xC6000021`, vendor function 0x21); see [`PV_LOCK_FEATURES`].
    pub const PV_LOCK_PREEMPTED: u16 = crate::pvlock::seed_v2::PV_LOCK_PREEMPTED.number();

    /// Bit 112: this project's advertisement of the directed-yield call
    /// PV_SCHED_YIELD_TO (`0xC6000070`, vendor function 0x70;
    /// [`crate::directed_yield`]), outside every upstream reservation.
    pub const PV_SCHED_YIELD_TO: u16 = crate::directed_yield::PV_SCHED_YIELD_TO.number();

    /// Bit 114: this project's advertisement of the kick that lends,
    /// PV_SCHED_KICK_LEND (`0xC6000072`, vendor function 0x72;
    /// [`crate::directed_yield`]).
    pub const PV_SCHED_KICK_LEND: u16 = crate::directed_yield::PV_SCHED_KICK_LEND.number();

    /// Bit 113: this project's advertisement of the control-VM call
    /// PVLOCK_SET_WFX_POLICY (`0xC6000071`, vendor function 0x71;
    /// [`crate::control`]), set only for control VMs.
    pub const PVLOCK_SET_WFX_POLICY: u16 = crate::control::PVLOCK_SET_WFX_POLICY.number();
}

/// KVM_FEATURES, `0x86000000` (HVC32): answers a 128-bit bitmap in W0..W3,
/// W0 = functions 0..31, W1 = 32..63, W2 = 64..95, W3 = 96..127
/// ([`KvmFeatures::words`]). Bit 0 is always set.
///
/// Linux `ARM_SMCCC_VENDOR_HYP_KVM_FEATURES_FUNC_ID`; hypercalls.rst; docs/abi.md §2.
/// Linux then prints `smccc: KVM: hypervisor services detected (0x%08x
/// 0x%08x 0x%08x 0x%08x)` with W3 first.
pub const FEATURES: FunctionId = FunctionId::fast32(Owner::VendorHypervisor, func::FEATURES);

/// KVM_PTP, `0x86000001` (HVC32), only if bit [`func::PTP`] is advertised.
/// w1 = [`ptp::VIRTUAL_COUNTER`] or [`ptp::PHYSICAL_COUNTER`]; returns the
/// wall clock in ns (W0 = high 32 bits, W1 = low 32 bits) and the counter
/// (W2 = high, W3 = low); NOT_SUPPORTED (-1) on a bad w1.
///
/// Same id as the seed-v3 PV-lock call ([`seed_v3::PV_LOCK`]): a VM can
/// have one or the other, not both.
///
/// Linux `ARM_SMCCC_VENDOR_HYP_KVM_PTP_FUNC_ID`; ptp_kvm.rst; docs/abi.md §2–3.
pub const PTP: FunctionId = FunctionId::fast32(Owner::VendorHypervisor, func::PTP);

/// KVM_PTP argument values (w1).
///
/// Linux `KVM_PTP_VIRT_COUNTER` / `KVM_PTP_PHYS_COUNTER`; docs/abi.md §2.
pub mod ptp {
    /// w1 = 0: sample CNTVCT (the guest's virtual counter).
    pub const VIRTUAL_COUNTER: u32 = 0;
    /// w1 = 1: sample CNTPCT (the physical counter).
    pub const PHYSICAL_COUNTER: u32 = 1;
}

const _: () = assert!(seed_v3::PV_LOCK.raw() == PTP.raw());
const _: () = assert!(func::PV_LOCK_FEATURES == seed_v2::PV_LOCK_FEATURES.number());

/// The 128-bit KVM_FEATURES bitmap: bit N set = vendor function N is
/// implemented.
///
/// Linux `bitmap_from_arr32(__kvm_arm_hyp_services, val, 128)` with
/// `val[i] = lower_32_bits(res.a<i>)`; hypercalls.rst; docs/abi.md §2.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KvmFeatures([u32; 4]);

impl KvmFeatures {
    /// No bits set (not a valid answer: bit 0 must be set; see [`Self::new`]).
    pub const EMPTY: Self = Self([0; 4]);

    /// Only [`func::FEATURES`] (bit 0) set — the minimum valid answer.
    pub const fn new() -> Self {
        Self::EMPTY.with(func::FEATURES)
    }

    /// Rebuilds a bitmap from W0..W3.
    pub const fn from_words(words: [u32; 4]) -> Self {
        Self(words)
    }

    /// Returns a copy with bit `func` set. Panics if `func >= 128`.
    pub const fn with(self, func: u16) -> Self {
        assert!(func < func::NUM_FUNCS, "KVM vendor function out of range");
        let mut words = self.0;
        words[(func / 32) as usize] |= 1 << (func % 32);
        Self(words)
    }

    /// Sets bit `func`. Panics if `func >= 128`.
    pub fn set(&mut self, func: u16) {
        *self = self.with(func);
    }

    /// Clears bit `func` (no-op if `func >= 128`).
    pub fn clear(&mut self, func: u16) {
        if func < func::NUM_FUNCS {
            self.0[(func / 32) as usize] &= !(1 << (func % 32));
        }
    }

    /// Whether bit `func` is set (false for `func >= 128`, like Linux's
    /// `kvm_arm_hyp_service_available`).
    pub const fn contains(self, func: u16) -> bool {
        func < func::NUM_FUNCS && self.0[(func / 32) as usize] & (1 << (func % 32)) != 0
    }

    /// The four result words: `[w0, w1, w2, w3]`, w0 = bits 0..31.
    pub const fn words(self) -> [u32; 4] {
        self.0
    }

    /// The four result registers X0..X3 (each word zero-extended).
    pub const fn to_regs(self) -> [u64; 4] {
        [
            self.0[0] as u64,
            self.0[1] as u64,
            self.0[2] as u64,
            self.0[3] as u64,
        ]
    }
}

/// The Call UID result registers X0..X3 (words zero-extended).
///
/// DEN0028 "General Service Queries" (Call UID); docs/abi.md §1–2.
pub const UID_REGS: [u64; 4] = [UID[0] as u64, UID[1] as u64, UID[2] as u64, UID[3] as u64];

/// Names of the calls in this module, for [`crate::describe`]. `0x86000001`
/// appears once, under both of its meanings.
pub const CALLS: &[Entry] = &[
    Entry::new(CALL_UID, "KVM_CALL_UID"),
    Entry::new(FEATURES, "KVM_FEATURES"),
    Entry::new(PTP, "KVM_PTP|PV_LOCK(seed-v3)"),
];

#[cfg(test)]
mod tests {
    use super::*;

    extern crate std;
    use std::vec::Vec;

    /// Parses `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` into bytes in string
    /// order (RFC 4122 / Linux `uuid_t`).
    fn parse_uuid(s: &str) -> [u8; 16] {
        let hex: Vec<u8> = s.bytes().filter(|&c| c != b'-').collect();
        assert_eq!(hex.len(), 32);
        core::array::from_fn(|i| {
            let pair = core::str::from_utf8(&hex[2 * i..2 * i + 2]).unwrap();
            u8::from_str_radix(pair, 16).unwrap()
        })
    }

    #[test]
    fn ids_match_abi_md() {
        assert_eq!(CALL_UID.raw(), 0x8600FF01);
        assert_eq!(FEATURES.raw(), 0x86000000);
        assert_eq!(PTP.raw(), 0x86000001);
        for e in CALLS {
            assert!(e.id.is_fast() && !e.id.is_smc64());
            assert_eq!(e.id.owner(), Owner::VendorHypervisor);
        }
    }

    #[test]
    fn uid_words_match_abi_md() {
        assert_eq!(UID, [0xb66fb428, 0xe911c52e, 0x564bcaa9, 0x743a004d]);
        assert_eq!(UID_REGS, [0xb66fb428, 0xe911c52e, 0x564bcaa9, 0x743a004d]);
    }

    /// The four words are the UUID's 16 bytes in string order, packed
    /// little-endian four at a time (Linux `smccc_res_to_uuid` /
    /// `UUID_INIT(0x28b46fb6, 0x2ec5, 0x11e9, ...)`): word 0 = 0xb66fb428
    /// because byte 0 (0x28) is its least significant byte.
    #[test]
    fn uid_encodes_kvm_uuid() {
        let bytes = parse_uuid("28b46fb6-2ec5-11e9-a9ca-4b564d003a74");
        assert_eq!(bytes, UID_BYTES);
        assert_eq!(smccc::uuid_to_words(bytes), UID);
        assert_eq!(smccc::words_to_uuid(UID), bytes);
        // Byte order spelled out for word 0.
        assert_eq!(UID[0] & 0xFF, 0x28);
        assert_eq!(UID[0] >> 24, 0xb6);
        // The pre-6.16-rc mistake UUID_INIT(0xb66fb428, 0xc52e, 0xe911, ...)
        // would give different bytes.
        let wrong = parse_uuid("b66fb428-c52e-e911-a9ca-4b564d003a74");
        assert_ne!(smccc::uuid_to_words(wrong), UID);
    }

    #[test]
    fn feature_bit_numbers() {
        assert_eq!(func::FEATURES, 0);
        assert_eq!(func::PTP, 1);
        assert_eq!(func::HYP_MEMINFO, 2);
        assert_eq!(func::MEM_SHARE, 3);
        assert_eq!(func::MEM_UNSHARE, 4);
        assert_eq!(func::MMIO_GUARD, 7);
        assert_eq!((func::PKVM_FIRST, func::PKVM_LAST), (2, 63));
        assert_eq!(func::DISCOVER_IMPL_VER, 64);
        assert_eq!(func::DISCOVER_IMPL_CPUS, 65);
        assert_eq!(func::FEATURES_2, 127);
        assert_eq!(func::NUM_FUNCS, 128);
        // Project choice: PV lock bits mirror vendor fn numbers 0x20/0x21.
        assert_eq!(func::PV_LOCK_FEATURES, 32);
        assert_eq!(func::PV_LOCK_PREEMPTED, 33);
        // ...and the directed-yield call's bit mirrors its number 0x70.
        assert_eq!(func::PV_SCHED_YIELD_TO, 112);
        // ...and the control-VM call's bit its number 0x71.
        assert_eq!(func::PVLOCK_SET_WFX_POLICY, 113);
        // The feature bit number is the function number of the call.
        assert_eq!(FEATURES.number(), func::FEATURES);
        assert_eq!(PTP.number(), func::PTP);
    }

    #[test]
    fn ptp_arguments() {
        assert_eq!(ptp::VIRTUAL_COUNTER, 0);
        assert_eq!(ptp::PHYSICAL_COUNTER, 1);
    }

    #[test]
    fn feature_bitmap_words() {
        let f = KvmFeatures::new();
        assert_eq!(f.words(), [0x1, 0, 0, 0]);
        assert!(f.contains(func::FEATURES));
        assert!(!f.contains(func::PTP));

        let mut f = KvmFeatures::new().with(func::PTP);
        assert_eq!(f.words(), [0x3, 0, 0, 0]);
        f.set(func::PV_LOCK_FEATURES);
        f.set(func::PV_LOCK_PREEMPTED);
        assert_eq!(f.words(), [0x3, 0x3, 0, 0]);
        f.set(func::DISCOVER_IMPL_VER);
        f.set(func::FEATURES_2);
        assert_eq!(f.words(), [0x3, 0x3, 0x1, 0x8000_0000]);
        assert_eq!(f.to_regs(), [0x3, 0x3, 0x1, 0x8000_0000]);
        assert!(f.contains(127));
        assert!(!f.contains(128));
        assert!(!f.contains(u16::MAX));
        f.clear(func::PTP);
        assert_eq!(f.words()[0], 0x1);
        f.clear(500);
        assert_eq!(KvmFeatures::from_words(f.words()), f);
        assert_eq!(KvmFeatures::EMPTY.words(), [0; 4]);
    }

    #[test]
    #[should_panic]
    fn feature_bitmap_rejects_bit_128() {
        let mut f = KvmFeatures::new();
        f.set(128);
    }
}
