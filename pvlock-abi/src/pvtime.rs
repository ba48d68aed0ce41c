//! Paravirtualized time / stolen time (Arm DEN0057A "Paravirtualized Time
//! for Arm-based Systems"), used by stock Linux guests. docs/abi.md §4.
//!
//! Guest sequence (Linux `arch/arm64/kernel/paravirt.c`): SMCCC ≥ 1.1,
//! `SMCCC_ARCH_FEATURES(PV_TIME_FEATURES)` answers 0, then
//! `PV_TIME_FEATURES(PV_TIME_ST)` answers 0, then per CPU `PV_TIME_ST`
//! returns the IPA of its [`StolenTime`] record; the guest maps it
//! write-back and checks `revision == 0 && attributes == 0`, then prints
//! `arm-pv: using stolen time PV`.

use core::fmt;
use core::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use crate::catalog::Entry;
use crate::smccc::{FunctionId, Owner};

/// PV_TIME_FEATURES, `0xC5000020` (x1 = function ID): 0 for
/// [`PV_TIME_FEATURES`] and [`PV_TIME_ST`] when enabled, else -1. Itself
/// probed with SMCCC_ARCH_FEATURES.
///
/// DEN0057A "PV_TIME_FEATURES"; docs/abi.md §4.
pub const PV_TIME_FEATURES: FunctionId = FunctionId::fast64(Owner::StandardHypervisor, 0x20);

/// PV_TIME_ST, `0xC5000021`: IPA of the calling vCPU's [`StolenTime`]
/// record, or -1 (NOT_SUPPORTED).
///
/// DEN0057A "PV_TIME_ST"; docs/abi.md §4.
pub const PV_TIME_ST: FunctionId = FunctionId::fast64(Owner::StandardHypervisor, 0x21);

/// Size and alignment of the stolen-time record.
///
/// DEN0057A "Stolen time shared structure" (64 bytes, 64-byte aligned).
pub const RECORD_SIZE: usize = 64;

/// The stolen-time record: `le32 revision; le32 attributes; le64
/// stolen_time; u8 pad[48]` — 64 bytes, 64-byte aligned, in memory the guest
/// maps as normal write-back. Linux `struct pvclock_vcpu_stolen_time`.
///
/// `stolen_time` accumulates, in nanoseconds, the time the vCPU was
/// runnable but not running; the host updates it (single-copy atomic,
/// little-endian) before the vCPU runs again.
///
/// DEN0057A "Stolen time shared structure"; docs/abi.md §4.
#[repr(C, align(64))]
pub struct StolenTime {
    /// `le32 revision` at offset 0; must be [`StolenTime::REVISION`].
    revision: AtomicU32,
    /// `le32 attributes` at offset 4; must be [`StolenTime::ATTRIBUTES`].
    attributes: AtomicU32,
    /// `le64 stolen_time` at offset 8, in ns.
    stolen_time: AtomicU64,
    /// `u8 pad[48]` at offset 16: reserved, zero.
    reserved: [AtomicU8; 48],
}

const _: () = assert!(core::mem::size_of::<StolenTime>() == RECORD_SIZE);
const _: () = assert!(core::mem::align_of::<StolenTime>() == RECORD_SIZE);
const _: () = assert!(core::mem::offset_of!(StolenTime, revision) == 0);
const _: () = assert!(core::mem::offset_of!(StolenTime, attributes) == 4);
const _: () = assert!(core::mem::offset_of!(StolenTime, stolen_time) == 8);
const _: () = assert!(core::mem::offset_of!(StolenTime, reserved) == 16);

impl StolenTime {
    /// The only defined revision, 0 (guests refuse anything else).
    /// DEN0057A "Stolen time shared structure"; docs/abi.md §4.
    pub const REVISION: u32 = 0;
    /// The only defined attributes value, 0 (guests refuse anything else).
    /// DEN0057A "Stolen time shared structure"; docs/abi.md §4.
    pub const ATTRIBUTES: u32 = 0;

    /// A zeroed record: revision 0, attributes 0, stolen_time 0.
    pub const fn new() -> Self {
        Self {
            revision: AtomicU32::new(Self::REVISION),
            attributes: AtomicU32::new(Self::ATTRIBUTES),
            stolen_time: AtomicU64::new(0),
            reserved: [const { AtomicU8::new(0) }; 48],
        }
    }

    /// Host: (re)initialise the record (its RAM is zeroed at VM load too).
    pub fn reset(&self) {
        for b in &self.reserved {
            b.store(0, Ordering::Relaxed);
        }
        self.revision
            .store(Self::REVISION.to_le(), Ordering::Relaxed);
        self.attributes
            .store(Self::ATTRIBUTES.to_le(), Ordering::Relaxed);
        self.stolen_time.store(0, Ordering::Release);
    }

    /// `revision`, little-endian decoded.
    pub fn revision(&self) -> u32 {
        u32::from_le(self.revision.load(Ordering::Relaxed))
    }

    /// `attributes`, little-endian decoded.
    pub fn attributes(&self) -> u32 {
        u32::from_le(self.attributes.load(Ordering::Relaxed))
    }

    /// Single-copy-atomic little-endian store of `stolen_time` (ns).
    pub fn store_stolen_time(&self, ns: u64, order: Ordering) {
        self.stolen_time.store(ns.to_le(), order);
    }

    /// Single-copy-atomic little-endian load of `stolen_time` (ns).
    pub fn load_stolen_time(&self, order: Ordering) -> u64 {
        u64::from_le(self.stolen_time.load(order))
    }
}

impl Default for StolenTime {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for StolenTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StolenTime")
            .field("revision", &self.revision())
            .field("attributes", &self.attributes())
            .field("stolen_time", &self.load_stolen_time(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Names for [`crate::describe`].
pub const CALLS: &[Entry] = &[
    Entry::new(PV_TIME_FEATURES, "PV_TIME_FEATURES"),
    Entry::new(PV_TIME_ST, "PV_TIME_ST"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, offset_of, size_of};

    #[test]
    fn ids_match_abi_md() {
        assert_eq!(PV_TIME_FEATURES.raw(), 0xC5000020);
        assert_eq!(PV_TIME_ST.raw(), 0xC5000021);
        for e in CALLS {
            assert!(e.id.is_fast() && e.id.is_smc64());
            assert_eq!(e.id.owner(), Owner::StandardHypervisor);
        }
    }

    #[test]
    fn layout() {
        assert_eq!(RECORD_SIZE, 64);
        assert_eq!(size_of::<StolenTime>(), 64);
        assert_eq!(align_of::<StolenTime>(), 64);
        assert_eq!(offset_of!(StolenTime, revision), 0);
        assert_eq!(offset_of!(StolenTime, attributes), 4);
        assert_eq!(offset_of!(StolenTime, stolen_time), 8);
        assert_eq!(offset_of!(StolenTime, reserved), 16);
        assert_eq!(StolenTime::REVISION, 0);
        assert_eq!(StolenTime::ATTRIBUTES, 0);
    }

    #[test]
    fn stolen_time_is_le64_at_offset_8() {
        let r = StolenTime::new();
        r.store_stolen_time(0x1122_3344_5566_7788, Ordering::Release);
        // SAFETY: test-only byte view; no concurrent writer.
        let bytes =
            unsafe { core::slice::from_raw_parts((&r as *const StolenTime).cast::<u8>(), 64) };
        assert_eq!(&bytes[..8], &[0; 8]);
        assert_eq!(
            &bytes[8..16],
            &[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]
        );
        assert!(bytes[16..].iter().all(|&b| b == 0));
        assert_eq!(r.load_stolen_time(Ordering::Acquire), 0x1122_3344_5566_7788);
        r.reset();
        assert_eq!(r.load_stolen_time(Ordering::Acquire), 0);
        assert_eq!((r.revision(), r.attributes()), (0, 0));
    }
}
