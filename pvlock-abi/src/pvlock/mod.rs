//! Paravirtual "vCPU preempted" (PV-lock) interfaces: the published
//! variants, none of them in mainline Linux. docs/abi.md §3.
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
//! Update rule (docs/abi.md §3): [`VcpuState64::RUNNING`] (0) is written
//! in vcpu_load before the vCPU runs and [`VcpuState64::PREEMPTED`] (1)
//! when it is put while still runnable (the published seed-v3 and
//! openEuler hosts write 1 at every put; el2 follows x86 KVM and leaves a
//! vCPU that blocked itself at 0). Writes are single-copy
//! atomic, little-endian, and release-ordered against the guest's plain
//! load; the structures therefore hold atomics (same size and alignment as
//! the plain integers) and expose only LE-converting accessors.
//!
//! The reserved tail of each structure is kept as an array of `AtomicU8`
//! (same layout as `u8`), private to this crate, so that holding a
//! `&VcpuState*` over guest memory stays sound while the guest writes
//! anywhere in the 64 bytes (the openEuler guest `memset`s its own struct).
//!
//! # Extension: the lock count (this project's, not in any published variant)
//!
//! Both structures carry one documented extension field, carved out of the
//! reserved bytes at the same offset in both, [`LOCK_COUNT_OFFSET`] (8):
//!
//! | bytes | [`VcpuState64`] | [`VcpuState32`] |
//! |---|---|---|
//! | 0..4 | `le64 preempted` (low half) | `le32 preempted` |
//! | 4..8 | `le64 preempted` (high half) | reserved, kept zero (see [`VcpuState32`]) |
//! | 8..12 | `le32 lock_count` | `le32 lock_count` |
//! | 12..64 | reserved, zero | reserved, zero |
//!
//! `lock_count` is the number of guest locks the vCPU holds right now. The
//! **guest** maintains it — the vCPU that owns the record adds one when it
//! takes a lock and subtracts one when it drops it
//! ([`VcpuState64::lock_acquired`] / [`VcpuState64::lock_released`]) — and
//! the **hypervisor** only reads it ([`VcpuState64::lock_count_hint`]), as
//! a hint for directed yield: a vCPU preempted while it holds a lock is
//! the one its spinning siblings wait for (the "boost vCPU in critical
//! section" seed; docs/abi.md §6 "kvm_vcpu_on_spin"). It is the explicit,
//! documented guest/host contract that the seed's review asked for instead
//! of exposing the guest kernel's `preempt_count` (an internal that
//! changes between kernel versions).
//!
//! Rules:
//! - A guest that does not know the extension never writes it; the field
//!   stays 0 (zeroed at VM load for hypervisor-placed records, by the guest
//!   for its own) and means "no hint". Every published guest is such a
//!   guest, so the extension changes nothing for them.
//! - The value is a hint from the guest and never trusted: the hypervisor
//!   must not fail, and must not let one VM affect another, whatever it
//!   reads, and it ignores implausible values (el2's directed-yield policy
//!   ignores counts above Linux's `MAX_LOCK_DEPTH`, 48).
//! - The hypervisor never writes it: it writes only `preempted`, and a
//!   hypervisor-placed record is zero because the VM's RAM is zeroed each
//!   time the VM is loaded (el2 does not zero it again when it hands the
//!   IPA out).
//! - Only the owning vCPU writes it, so the guest needs no atomic
//!   read-modify-write against other CPUs; the accessors use one anyway
//!   (an interrupt on the same CPU may take a lock in between).
//! - Hypervisors that honour the hint advertise the directed-yield call
//!   ([`crate::directed_yield`], KVM_FEATURES bit 112).

use core::fmt;
use core::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use crate::smccc::FunctionId;

pub mod anolis;
pub mod openeuler;
pub mod seed_v2;
pub mod seed_v3;

/// Size and alignment, in bytes, of every PV-lock structure ("Structure
/// must be 64 byte aligned, pad to that size"). docs/abi.md §3.
pub const STATE_SIZE: usize = 64;

/// Byte offset of the `le32 lock_count` extension in both [`VcpuState64`]
/// and [`VcpuState32`] (see the module documentation, "Extension: the lock
/// count"). Past the widest `preempted` field (bytes 0..8) and 4-byte
/// aligned.
pub const LOCK_COUNT_OFFSET: usize = 8;

/// Width in bytes of the `lock_count` extension (`le32`).
pub const LOCK_COUNT_WIDTH: usize = 4;

const _: () = assert!(LOCK_COUNT_OFFSET >= 8 && LOCK_COUNT_OFFSET.is_multiple_of(LOCK_COUNT_WIDTH));
const _: () = assert!(LOCK_COUNT_OFFSET + LOCK_COUNT_WIDTH <= STATE_SIZE);

/// Guest side of the lock count: one lock more (`up`) or one fewer,
/// saturating rather than wrapping. `count` is a record's `lock_count` cell
/// ([`VcpuState64::lock_count_cell`], [`VcpuState32::lock_count_cell`]),
/// for a guest that keeps a reference to it rather than to the record.
///
/// A single-copy-atomic load and store, not a read-modify-write: only the
/// vCPU that owns the record writes the cell (the hypervisor only reads
/// it), and an interrupt handler that runs between the two on that vCPU
/// takes and drops its locks in pairs, so it leaves the cell as it found
/// it. The hypervisor sees the old or the new count, never a torn one.
#[inline]
pub fn lock_count_add(count: &AtomicU32, up: bool) {
    let value = u32::from_le(count.load(Ordering::Relaxed));
    let next = if up {
        value.saturating_add(1)
    } else {
        value.saturating_sub(1)
    };
    count.store(next.to_le(), Ordering::Relaxed);
}

/// Per-vCPU state with a 64-bit `preempted` field:
/// `struct { le64 preempted; u8 pad[56]; }`, 64 bytes, 64-byte aligned.
///
/// Used by [`seed_v2`] and [`seed_v3`] (Linux `struct pvlock_vcpu_state`,
/// `arch/arm64/include/asm/pvlock-abi.h` of the seed series). The
/// hypervisor owns the memory; the guest maps it read-only in effect,
/// except for the project's `lock_count` extension at
/// [`LOCK_COUNT_OFFSET`] (module documentation), which only the guest
/// writes. docs/abi.md §3.
#[repr(C, align(64))]
pub struct VcpuState64 {
    /// `le64 preempted` at offset 0: non-zero while the vCPU is not running.
    preempted: AtomicU64,
    /// `le32 lock_count` at offset 8 (extension; the seed series' `pad`):
    /// locks the vCPU holds, written by the guest.
    lock_count: AtomicU32,
    /// `u8 pad[52]` at offset 12: reserved, zero.
    reserved: [AtomicU8; 52],
}

const _: () = assert!(core::mem::size_of::<VcpuState64>() == STATE_SIZE);
const _: () = assert!(core::mem::align_of::<VcpuState64>() == STATE_SIZE);
const _: () = assert!(core::mem::offset_of!(VcpuState64, preempted) == 0);
const _: () = assert!(core::mem::offset_of!(VcpuState64, lock_count) == LOCK_COUNT_OFFSET);
const _: () = assert!(core::mem::offset_of!(VcpuState64, reserved) == 12);

impl VcpuState64 {
    /// Value of `preempted` while the vCPU runs. docs/abi.md §3.
    pub const RUNNING: u64 = 0;
    /// Value of `preempted` while the vCPU is runnable but not running
    /// (written at vcpu_put). docs/abi.md §3.
    pub const PREEMPTED: u64 = 1;

    /// A zeroed structure (`preempted` = [`Self::RUNNING`], reserved = 0),
    /// the record's state before the vCPU first runs.
    pub const fn new() -> Self {
        Self {
            preempted: AtomicU64::new(Self::RUNNING),
            lock_count: AtomicU32::new(0),
            reserved: [const { AtomicU8::new(0) }; 52],
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

    /// Host side: the guest's `lock_count` extension (locks the vCPU holds;
    /// module documentation), a single-copy-atomic little-endian `Relaxed`
    /// load. An untrusted hint: any value may be read, including garbage
    /// from a guest that does not maintain it correctly.
    pub fn lock_count_hint(&self) -> u32 {
        u32::from_le(self.lock_count.load(Ordering::Relaxed))
    }

    /// Guest side: the `lock_count` cell itself, for [`lock_count_add`]
    /// from a reference kept per CPU.
    pub fn lock_count_cell(&self) -> &AtomicU32 {
        &self.lock_count
    }

    /// Guest side: the owning vCPU took a lock (`lock_count` + 1,
    /// saturating).
    pub fn lock_acquired(&self) {
        lock_count_add(&self.lock_count, true);
    }

    /// Guest side: the owning vCPU dropped a lock (`lock_count` - 1,
    /// saturating at 0, so an unbalanced release never leaves a huge count).
    pub fn lock_released(&self) {
        lock_count_add(&self.lock_count, false);
    }

    /// Zeroes the whole structure (host, before handing out the IPA),
    /// `lock_count` included.
    pub fn reset(&self) {
        for b in &self.reserved {
            b.store(0, Ordering::Relaxed);
        }
        self.lock_count.store(0, Ordering::Relaxed);
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
            .field("lock_count", &self.lock_count_hint())
            .finish_non_exhaustive()
    }
}

/// Per-vCPU state with a 32-bit `preempted` field:
/// `struct { le32 preempted; u8 pad[60]; }`, 64 bytes, 64-byte aligned.
///
/// Used by [`openeuler`] (Linux `struct pvsched_vcpu_state`,
/// `arch/arm64/include/asm/pvsched-abi.h`) and [`anolis`]. The guest
/// allocates it (per-CPU, 64-byte aligned) and passes its IPA. docs/abi.md §3.
///
/// Compatibility note: the host writes only bytes 0..4. A guest that reads
/// the field as 64 bits (one Anolis tree declares `le64 preempted; u8
/// pad[56]` for the same calls) still sees 0/1 as long as bytes 4..8 stay
/// zero — which is why the `lock_count` extension sits at
/// [`LOCK_COUNT_OFFSET`] (8), as in [`VcpuState64`], and bytes 4..8 stay
/// reserved.
#[repr(C, align(64))]
pub struct VcpuState32 {
    /// `le32 preempted` at offset 0: non-zero while the vCPU is not running.
    preempted: AtomicU32,
    /// `u8 pad[4]` at offset 4: reserved, zero (see the compatibility note).
    reserved_low: [AtomicU8; 4],
    /// `le32 lock_count` at offset 8 (extension): locks the vCPU holds,
    /// written by the guest.
    lock_count: AtomicU32,
    /// `u8 pad[52]` at offset 12: reserved, zero.
    reserved: [AtomicU8; 52],
}

const _: () = assert!(core::mem::size_of::<VcpuState32>() == STATE_SIZE);
const _: () = assert!(core::mem::align_of::<VcpuState32>() == STATE_SIZE);
const _: () = assert!(core::mem::offset_of!(VcpuState32, preempted) == 0);
const _: () = assert!(core::mem::offset_of!(VcpuState32, reserved_low) == 4);
const _: () = assert!(core::mem::offset_of!(VcpuState32, lock_count) == LOCK_COUNT_OFFSET);
const _: () = assert!(core::mem::offset_of!(VcpuState32, reserved) == 12);

impl VcpuState32 {
    /// Value of `preempted` while the vCPU runs. docs/abi.md §3.
    pub const RUNNING: u32 = 0;
    /// Value of `preempted` while the vCPU is runnable but not running
    /// (written at vcpu_put). docs/abi.md §3.
    pub const PREEMPTED: u32 = 1;

    /// A zeroed structure (`preempted` = [`Self::RUNNING`], reserved = 0),
    /// suitable for a guest's per-CPU static.
    pub const fn new() -> Self {
        Self {
            preempted: AtomicU32::new(Self::RUNNING),
            reserved_low: [const { AtomicU8::new(0) }; 4],
            lock_count: AtomicU32::new(0),
            reserved: [const { AtomicU8::new(0) }; 52],
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

    /// Host side: the guest's `lock_count` extension; see
    /// [`VcpuState64::lock_count_hint`].
    pub fn lock_count_hint(&self) -> u32 {
        u32::from_le(self.lock_count.load(Ordering::Relaxed))
    }

    /// Guest side: the `lock_count` cell; see
    /// [`VcpuState64::lock_count_cell`].
    pub fn lock_count_cell(&self) -> &AtomicU32 {
        &self.lock_count
    }

    /// Guest side: the owning vCPU took a lock; see
    /// [`VcpuState64::lock_acquired`].
    pub fn lock_acquired(&self) {
        lock_count_add(&self.lock_count, true);
    }

    /// Guest side: the owning vCPU dropped a lock; see
    /// [`VcpuState64::lock_released`].
    pub fn lock_released(&self) {
        lock_count_add(&self.lock_count, false);
    }

    /// Zeroes the whole structure (guest, before IPA_INIT / after release),
    /// `lock_count` included.
    pub fn reset(&self) {
        for b in self.reserved_low.iter().chain(&self.reserved) {
            b.store(0, Ordering::Relaxed);
        }
        self.lock_count.store(0, Ordering::Relaxed);
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
            .field("lock_count", &self.lock_count_hint())
            .finish_non_exhaustive()
    }
}

/// Which PV-lock ABI a VM is given (chosen per VM in its description).
/// docs/abi.md §3.
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
        assert_eq!(offset_of!(VcpuState64, lock_count), 8);
        assert_eq!(offset_of!(VcpuState64, reserved), 12);
        assert_eq!(size_of::<VcpuState32>(), 64);
        assert_eq!(align_of::<VcpuState32>(), 64);
        assert_eq!(offset_of!(VcpuState32, preempted), 0);
        assert_eq!(offset_of!(VcpuState32, reserved_low), 4);
        assert_eq!(offset_of!(VcpuState32, lock_count), 8);
        assert_eq!(offset_of!(VcpuState32, reserved), 12);
        // Atomics have the layout of the plain integers.
        assert_eq!(size_of::<AtomicU64>(), 8);
        assert_eq!(align_of::<AtomicU64>(), 8);
        assert_eq!(size_of::<AtomicU32>(), 4);
        assert_eq!(size_of::<[AtomicU8; 52]>(), 52);
    }

    /// The lock-count extension: offset 8 in both records, clear of every
    /// variant's `preempted` field (bytes 0..8 for le64, 0..4 for le32, with
    /// 4..8 kept zero for Anolis guests that read le64).
    #[test]
    fn lock_count_offset_is_pinned() {
        assert_eq!(LOCK_COUNT_OFFSET, 8);
        assert_eq!(LOCK_COUNT_WIDTH, 4);
        assert_eq!(offset_of!(VcpuState64, lock_count), LOCK_COUNT_OFFSET);
        assert_eq!(offset_of!(VcpuState32, lock_count), LOCK_COUNT_OFFSET);
        for v in Variant::ALL {
            assert!(
                v.preempted_width() <= LOCK_COUNT_OFFSET,
                "{} overlaps the lock count",
                v.name()
            );
        }
    }

    #[test]
    fn lock_count_is_le32_at_offset_8() {
        let s = VcpuState64::new();
        assert_eq!(s.lock_count_hint(), 0);
        s.lock_acquired();
        s.lock_acquired();
        assert_eq!(s.lock_count_hint(), 2);
        let b = bytes_of(&s);
        assert_eq!(&b[8..12], &[2, 0, 0, 0]);
        assert!(b[..8].iter().chain(&b[12..]).all(|&x| x == 0));
        // Independent of `preempted`.
        s.set_preempted(true);
        assert_eq!(s.lock_count_hint(), 2);
        assert_eq!(s.load_preempted(Ordering::Relaxed), 1);
        s.lock_released();
        assert_eq!(s.lock_count_hint(), 1);
        assert!(s.is_preempted());
        s.reset();
        assert_eq!(bytes_of(&s), &[0u8; 64]);

        let t = VcpuState32::new();
        t.lock_acquired();
        t.set_preempted(true);
        let b = bytes_of(&t);
        assert_eq!(&b[..4], &[1, 0, 0, 0]);
        assert_eq!(&b[4..8], &[0, 0, 0, 0], "bytes 4..8 stay zero");
        assert_eq!(&b[8..12], &[1, 0, 0, 0]);
        assert!(b[12..].iter().all(|&x| x == 0));
        assert_eq!(t.lock_count_hint(), 1);
        t.reset();
        assert_eq!(bytes_of(&t), &[0u8; 64]);
    }

    #[test]
    fn lock_count_saturates() {
        let s = VcpuState32::new();
        // An unbalanced release leaves 0, not u32::MAX.
        s.lock_released();
        assert_eq!(s.lock_count_hint(), 0);
        // Whatever the guest stored, the host reads it back as written
        // (little-endian) and the guest side never wraps.
        let raw = |s: &VcpuState32| {
            let b = bytes_of(s);
            u32::from_le_bytes([b[8], b[9], b[10], b[11]])
        };
        s.lock_count.store(u32::MAX.to_le(), Ordering::Relaxed);
        assert_eq!(s.lock_count_hint(), u32::MAX);
        s.lock_acquired();
        assert_eq!(s.lock_count_hint(), u32::MAX);
        s.lock_released();
        assert_eq!(raw(&s), u32::MAX - 1);
        let t = VcpuState64::new();
        t.lock_count
            .store(0x0102_0304u32.to_le(), Ordering::Relaxed);
        assert_eq!(&bytes_of(&t)[8..12], &[4, 3, 2, 1]);
        assert_eq!(t.lock_count_hint(), 0x0102_0304);
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
