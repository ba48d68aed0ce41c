//! Paravirtual "vCPU preempted" (PV-lock) interfaces: the published
//! variants, none of them in mainline Linux. ABI.md §3.
//!
//! Each variant has its own module with its function IDs; the per-vCPU
//! structures are shared:
//!
//! | module | ids | structure | who picks the address |
//! |---|---|---|---|
//! | [`seed_v2`] (seed v2 / 2022 RFC) | `0xC6000020`, `0xC6000021` | [`VcpuState64`] | hypervisor returns IPA |
//! | [`seed_v3`] (seed v3, 2020) | `0x86000001` (x1 = 0/1) | [`VcpuState64`] | hypervisor returns IPA |
//! | [`openeuler`] (pvsched) | `0xC5000090..=0xC5000093` | [`VcpuState32`] | guest passes IPA |
//! | [`anolis`] | `0xC60000B0..=0xC60000B2`, `0xC50000B3` | [`VcpuState32`] | guest passes IPA |
//!
//! Update rule (every host implementation; ABI.md §3): write
//! [`VcpuState64::RUNNING`] (0) in vcpu_load before the vCPU runs and
//! [`VcpuState64::PREEMPTED`] (1) in vcpu_put. Writes are single-copy
//! atomic, little-endian, and release-ordered against the guest's plain
//! load; the structures therefore hold atomics (same size and alignment as
//! the plain integers) and expose only LE-converting accessors.
//!
//! The reserved tail of each structure is kept as an array of `AtomicU8`
//! (same layout as `u8`), private to this crate, so that holding a
//! `&VcpuState*` over guest memory stays sound while the guest writes
//! anywhere in the 64 bytes (the openEuler guest `memset`s its own struct).
//! A documented extension field can later be carved out of the front of
//! the reserved area by shortening the array; the offset asserts next to
//! each type pin where it may start.

use core::fmt;
use core::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use crate::smccc::FunctionId;

pub mod anolis;
pub mod openeuler;
pub mod seed_v2;
pub mod seed_v3;

/// Size and alignment, in bytes, of every PV-lock structure ("Structure
/// must be 64 byte aligned, pad to that size"). ABI.md §3.
pub const STATE_SIZE: usize = 64;

/// Per-vCPU state with a 64-bit `preempted` field:
/// `struct { le64 preempted; u8 pad[56]; }`, 64 bytes, 64-byte aligned.
///
/// Used by [`seed_v2`] and [`seed_v3`] (Linux `struct pvlock_vcpu_state`,
/// `arch/arm64/include/asm/pvlock-abi.h` of the seed series). The
/// hypervisor owns the memory; the guest maps it read-only in effect.
/// ABI.md §3.
#[repr(C, align(64))]
pub struct VcpuState64 {
    /// `le64 preempted` at offset 0: non-zero while the vCPU is not running.
    preempted: AtomicU64,
    /// `u8 pad[56]` at offset 8: reserved, zero.
    reserved: [AtomicU8; 56],
}

const _: () = assert!(core::mem::size_of::<VcpuState64>() == STATE_SIZE);
const _: () = assert!(core::mem::align_of::<VcpuState64>() == STATE_SIZE);
const _: () = assert!(core::mem::offset_of!(VcpuState64, preempted) == 0);
const _: () = assert!(core::mem::offset_of!(VcpuState64, reserved) == 8);

impl VcpuState64 {
    /// Value of `preempted` while the vCPU runs. ABI.md §3.
    pub const RUNNING: u64 = 0;
    /// Value of `preempted` the host writes at vcpu_put. ABI.md §3.
    pub const PREEMPTED: u64 = 1;

    /// A zeroed structure (`preempted` = [`Self::RUNNING`], reserved = 0),
    /// what the host writes when it hands out the IPA.
    pub const fn new() -> Self {
        Self {
            preempted: AtomicU64::new(Self::RUNNING),
            reserved: [const { AtomicU8::new(0) }; 56],
        }
    }

    /// Single-copy-atomic little-endian store of `preempted`.
    pub fn store_preempted(&self, value: u64, order: Ordering) {
        self.preempted.store(value.to_le(), order);
    }

    /// Single-copy-atomic little-endian load of `preempted`.
    pub fn load_preempted(&self, order: Ordering) -> u64 {
        u64::from_le(self.preempted.load(order))
    }

    /// Host side: store [`Self::PREEMPTED`] or [`Self::RUNNING`] with
    /// release ordering.
    pub fn set_preempted(&self, preempted: bool) {
        let v = if preempted {
            Self::PREEMPTED
        } else {
            Self::RUNNING
        };
        self.store_preempted(v, Ordering::Release);
    }

    /// Guest side: whether `preempted` is non-zero (acquire load).
    pub fn is_preempted(&self) -> bool {
        self.load_preempted(Ordering::Acquire) != Self::RUNNING
    }

    /// Zeroes the whole structure (host, before handing out the IPA).
    pub fn reset(&self) {
        for b in &self.reserved {
            b.store(0, Ordering::Relaxed);
        }
        self.store_preempted(Self::RUNNING, Ordering::Release);
    }
}

impl Default for VcpuState64 {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for VcpuState64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VcpuState64")
            .field("preempted", &self.load_preempted(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Per-vCPU state with a 32-bit `preempted` field:
/// `struct { le32 preempted; u8 pad[60]; }`, 64 bytes, 64-byte aligned.
///
/// Used by [`openeuler`] (Linux `struct pvsched_vcpu_state`,
/// `arch/arm64/include/asm/pvsched-abi.h`) and [`anolis`]. The guest
/// allocates it (per-CPU, 64-byte aligned) and passes its IPA. ABI.md §3.
///
/// Compatibility note: the host writes only bytes 0..4. A guest that reads
/// the field as 64 bits (one Anolis tree declares `le64 preempted; u8
/// pad[56]` for the same calls) still sees 0/1 as long as bytes 4..8 stay
/// zero — so keep any future extension field out of bytes 4..8.
#[repr(C, align(64))]
pub struct VcpuState32 {
    /// `le32 preempted` at offset 0: non-zero while the vCPU is not running.
    preempted: AtomicU32,
    /// `u8 pad[60]` at offset 4: reserved, zero.
    reserved: [AtomicU8; 60],
}

const _: () = assert!(core::mem::size_of::<VcpuState32>() == STATE_SIZE);
const _: () = assert!(core::mem::align_of::<VcpuState32>() == STATE_SIZE);
const _: () = assert!(core::mem::offset_of!(VcpuState32, preempted) == 0);
const _: () = assert!(core::mem::offset_of!(VcpuState32, reserved) == 4);

impl VcpuState32 {
    /// Value of `preempted` while the vCPU runs. ABI.md §3.
    pub const RUNNING: u32 = 0;
    /// Value of `preempted` the host writes at vcpu_put. ABI.md §3.
    pub const PREEMPTED: u32 = 1;

    /// A zeroed structure (`preempted` = [`Self::RUNNING`], reserved = 0),
    /// suitable for a guest's per-CPU static.
    pub const fn new() -> Self {
        Self {
            preempted: AtomicU32::new(Self::RUNNING),
            reserved: [const { AtomicU8::new(0) }; 60],
        }
    }

    /// Single-copy-atomic little-endian store of `preempted`.
    pub fn store_preempted(&self, value: u32, order: Ordering) {
        self.preempted.store(value.to_le(), order);
    }

    /// Single-copy-atomic little-endian load of `preempted`.
    pub fn load_preempted(&self, order: Ordering) -> u32 {
        u32::from_le(self.preempted.load(order))
    }

    /// Host side: store [`Self::PREEMPTED`] or [`Self::RUNNING`] with
    /// release ordering.
    pub fn set_preempted(&self, preempted: bool) {
        let v = if preempted {
            Self::PREEMPTED
        } else {
            Self::RUNNING
        };
        self.store_preempted(v, Ordering::Release);
    }

    /// Guest side: whether `preempted` is non-zero (acquire load).
    pub fn is_preempted(&self) -> bool {
        self.load_preempted(Ordering::Acquire) != Self::RUNNING
    }

    /// Zeroes the whole structure (guest, before IPA_INIT / after release).
    pub fn reset(&self) {
        for b in &self.reserved {
            b.store(0, Ordering::Relaxed);
        }
        self.store_preempted(Self::RUNNING, Ordering::Release);
    }
}

impl Default for VcpuState32 {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for VcpuState32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VcpuState32")
            .field("preempted", &self.load_preempted(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Which PV-lock ABI a VM is given (chosen per VM in its description).
/// ABI.md §3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Seed series v2 / 2022 RFC: [`seed_v2`].
    SeedV2,
    /// Seed series v3 (2020), multiplexed on `0x86000001`: [`seed_v3`].
    SeedV3,
    /// openEuler pvsched: [`openeuler`].
    OpenEuler,
    /// Anolis: [`anolis`].
    Anolis,
}

impl Variant {
    /// All variants.
    pub const ALL: [Variant; 4] = [Self::SeedV2, Self::SeedV3, Self::OpenEuler, Self::Anolis];

    /// Short name for logs and configuration.
    pub const fn name(self) -> &'static str {
        match self {
            Self::SeedV2 => "seed-v2",
            Self::SeedV3 => "seed-v3",
            Self::OpenEuler => "openeuler",
            Self::Anolis => "anolis",
        }
    }

    /// Every function ID the variant defines.
    pub const fn function_ids(self) -> &'static [FunctionId] {
        match self {
            Self::SeedV2 => seed_v2::IDS,
            Self::SeedV3 => seed_v3::IDS,
            Self::OpenEuler => openeuler::IDS,
            Self::Anolis => anolis::IDS,
        }
    }

    /// Width in bytes of the `preempted` field (8: [`VcpuState64`], 4:
    /// [`VcpuState32`]).
    pub const fn preempted_width(self) -> usize {
        match self {
            Self::SeedV2 | Self::SeedV3 => 8,
            Self::OpenEuler | Self::Anolis => 4,
        }
    }

    /// Whether the guest allocates the structure and passes its IPA (true)
    /// or the hypervisor allocates it and returns the IPA (false).
    pub const fn guest_allocates(self) -> bool {
        matches!(self, Self::OpenEuler | Self::Anolis)
    }

    /// Whether the variant uses `0x86000001`, mainline's KVM_PTP, so that
    /// PTP cannot be offered on the same VM.
    pub const fn clashes_with_kvm_ptp(self) -> bool {
        matches!(self, Self::SeedV3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, offset_of, size_of};

    #[test]
    fn layouts() {
        assert_eq!(STATE_SIZE, 64);
        assert_eq!(size_of::<VcpuState64>(), 64);
        assert_eq!(align_of::<VcpuState64>(), 64);
        assert_eq!(offset_of!(VcpuState64, preempted), 0);
        assert_eq!(offset_of!(VcpuState64, reserved), 8);
        assert_eq!(size_of::<VcpuState32>(), 64);
        assert_eq!(align_of::<VcpuState32>(), 64);
        assert_eq!(offset_of!(VcpuState32, preempted), 0);
        assert_eq!(offset_of!(VcpuState32, reserved), 4);
        // Atomics have the layout of the plain integers.
        assert_eq!(size_of::<AtomicU64>(), 8);
        assert_eq!(align_of::<AtomicU64>(), 8);
        assert_eq!(size_of::<AtomicU32>(), 4);
        assert_eq!(size_of::<[AtomicU8; 56]>(), 56);
    }

    #[test]
    fn values() {
        assert_eq!(VcpuState64::RUNNING, 0);
        assert_eq!(VcpuState64::PREEMPTED, 1);
        assert_eq!(VcpuState32::RUNNING, 0);
        assert_eq!(VcpuState32::PREEMPTED, 1);
    }

    fn bytes_of<T>(v: &T) -> &[u8] {
        // SAFETY: test-only view of a plain-old-data structure; no writes
        // happen while the slice lives.
        unsafe { core::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
    }

    #[test]
    fn le64_bytes() {
        let s = VcpuState64::new();
        assert_eq!(bytes_of(&s), &[0u8; 64]);
        s.set_preempted(true);
        assert!(s.is_preempted());
        let b = bytes_of(&s);
        assert_eq!(b[0], 1);
        assert!(b[1..].iter().all(|&x| x == 0));
        s.set_preempted(false);
        assert!(!s.is_preempted());
        s.store_preempted(0x0102_0304_0506_0708, Ordering::Relaxed);
        assert_eq!(&bytes_of(&s)[..8], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(s.load_preempted(Ordering::Relaxed), 0x0102_0304_0506_0708);
        s.reset();
        assert_eq!(bytes_of(&s), &[0u8; 64]);
    }

    #[test]
    fn le32_bytes() {
        let s = VcpuState32::default();
        s.set_preempted(true);
        let b = bytes_of(&s);
        assert_eq!(b[0], 1);
        assert!(b[1..].iter().all(|&x| x == 0));
        assert!(s.is_preempted());
        s.store_preempted(0x0A0B_0C0D, Ordering::Relaxed);
        assert_eq!(&bytes_of(&s)[..4], &[0x0D, 0x0C, 0x0B, 0x0A]);
        s.reset();
        assert!(!s.is_preempted());
    }

    #[test]
    fn variants() {
        assert_eq!(Variant::SeedV2.preempted_width(), 8);
        assert_eq!(Variant::SeedV3.preempted_width(), 8);
        assert_eq!(Variant::OpenEuler.preempted_width(), 4);
        assert_eq!(Variant::Anolis.preempted_width(), 4);
        assert!(!Variant::SeedV2.guest_allocates());
        assert!(!Variant::SeedV3.guest_allocates());
        assert!(Variant::OpenEuler.guest_allocates());
        assert!(Variant::Anolis.guest_allocates());
        for v in Variant::ALL {
            assert_eq!(
                v.clashes_with_kvm_ptp(),
                v.function_ids().contains(&crate::kvm::PTP),
                "{}",
                v.name()
            );
            for id in v.function_ids() {
                assert!(crate::describe(*id).is_some());
            }
        }
    }
}
