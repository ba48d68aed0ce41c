//! Per-VM paravirtual services: what a VM has enabled ([`PvConfig`]), where
//! its per-vCPU shared records live ([`PvRegistry`]), and the pure rules the
//! arch layer follows to keep them up to date (the "preempted" flag state
//! machine, stolen-time conversion). The SMCCC calls that expose them are
//! in [`crate::services::smccc`] ([`crate::services::smccc::dispatcher_for`]).
//!
//! # Records
//!
//! Every record is 64 bytes and 64-byte aligned (docs/abi.md §3
//! "Records"; §4, DEN0057A "Stolen time shared structure"), so it never
//! straddles a page.
//!
//! | service | record | who picks the IPA |
//! |---|---|---|
//! | PV-lock seed-v2 / seed-v3 | `VcpuState64` (`le64 preempted`) | the hypervisor, in the VM's PV area |
//! | PV-lock openEuler / Anolis | `VcpuState32` (`le32 preempted`) | the guest (IPA_INIT / PREEMPTED with x1 = IPA) |
//! | PV time | `StolenTime` (`le64 stolen_time` at offset 8) | the hypervisor, in the VM's PV area |
//!
//! The *PV area* is a range of the VM's RAM that the hypervisor reserves
//! (the VM's DT marks it `reserved-memory`, `no-map`), at least
//! [`PvRegistry::area_size`] bytes, 64-byte aligned. [`PvRegistry::new`]
//! lays the records out in it: the hypervisor-placed PV-lock records of
//! vCPUs `0..n` first, then the stolen-time records of vCPUs `0..n`. All of
//! them are all-zero in their initial state (`VcpuState64::new`,
//! `StolenTime::new`), so RAM zeroed at VM load is initialised.
//!
//! # The "preempted" flag (docs/abi.md §3, update rule)
//!
//! Every published host writes 0 ("running") in vcpu_load before the vCPU
//! runs and 1 ("preempted") in vcpu_put. The seed-v3 and openEuler hosts
//! write 1 on *every* put, including a vCPU that blocked itself in WFI;
//! x86 KVM writes 1 only when the vCPU was descheduled while still
//! runnable. This hypervisor follows x86 for every variant, because that is
//! the meaning guests can use: a vCPU idling in WFI is a good wake-up
//! target (Linux `available_idle_cpu()` asks `vcpu_is_preempted()`), a
//! preempted one is not, and a spinner should stop spinning only on a lock
//! holder that really lost its pCPU. Concretely, the flag a guest reads is
//! 1 exactly while the vCPU is Runnable in the scheduler
//! ([`crate::sched::Scheduler::is_preempted`]):
//!
//! | event | scheduler answer | write |
//! |---|---|---|
//! | vcpu_load | `pick_next` returned it | [`preempted_on_load`]: 0 |
//! | vcpu_put, slice expired / yield | [`PutOutcome::Requeued`] | 1 |
//! | vcpu_put, WFI / CPU_SUSPEND | [`PutOutcome::Blocked`] | 0 |
//! | vcpu_put, CPU_OFF | [`PutOutcome::PoweredOff`] | 0 (see [`preempted_on_put`]) |
//! | WFI that completes at once, slice renewed | [`PutOutcome::KeepRunning`] | none: it never left |
//! | directed yield (`yield_to`), the yielder | requeued | 1, as `Requeued` |
//! | wake-up of a blocked vCPU, CPU_ON, timer expiry | [`Wakeup::Queued`] | [`preempted_on_wake`]: 1 |
//! | wake-up that preempts the pCPU's running vCPU | [`Wakeup::Preempting`] | 1 (the woken vCPU waits until that one has passed through the scheduler) |
//! | wake-up of a running or runnable vCPU | [`Wakeup::Kicked`] | none (already 0 / 1) |
//!
//! So a vCPU that blocked itself reads 0 until it becomes runnable while
//! not running, then 1, then 0 again once it is loaded.
//!
//! # What the runner (`el2::run`) does
//!
//! - **vcpu_load**: after `pick_next` named the vCPU and before entering
//!   it, if [`PvRegistry::lock_record_pa`] is `Some`, store
//!   [`preempted_on_load`] in the record's first
//!   [`PvRegistry::lock_width`] bytes
//!   (little-endian, single-copy atomic, e.g. `VcpuState64::store_preempted`
//!   / `VcpuState32::store_preempted` with `Release`); if
//!   [`PvRegistry::stolen_time_record`] is `Some`, store the
//!   nanoseconds it gives for the scheduler's steal ticks at the address
//!   it gives (`StolenTime::store_stolen_time`, `Release`).
//! - **vcpu_put**: store [`preempted_on_put`] of the [`PutOutcome`] (if
//!   `Some`) **while still holding the scheduler lock** that `put` ran
//!   under: once the lock is dropped another pCPU may pick the vCPU and
//!   store 0, and a late 1 would then stay visible while it runs. After a
//!   successful `yield_to`, store 1 for the yielder the same way.
//! - **wake-up** (`wake`, `power_on`, `expire_timers*`): store
//!   [`preempted_on_wake`] of the [`Wakeup`] (if `Some`) under the same
//!   lock, for the same reason.
//! - **PSCI CPU_ON** (`Next::PowerOn`): call [`PvRegistry::reset_vcpu`]
//!   for the target *before* `power_on`, then write the wake value as
//!   above.
//! - **PSCI SYSTEM_RESET**: with every vCPU Off, call
//!   [`PvRegistry::reset_all`]; reload zeroes the VM's RAM, which puts the
//!   hypervisor-placed records back to their initial values (if RAM is not
//!   zeroed, `reset()` each record instead); and call
//!   [`PvRegistry::rebase_steal`] for every vCPU with its current steal
//!   ticks, so the new guest's stolen time starts from 0.
//! - **KICK** (`Next::Kick`): see [`crate::trap::decision::Next::Kick`].
//!
//! Guest memory at these IPAs is the VM's own RAM: the runner (`el2::run`)
//! writes it through EL2's mapping of that RAM, never through anything the
//! guest controls. [`PvRegistry::backed_by`] gives the registry that RAM's
//! host block ([`HostWindow`]); each record's host address is computed
//! once, when the record is placed or registered, and kept beside its IPA,
//! so the writes at every put, load and wake-up translate nothing.

use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use platform::MemRange;
use pvlock_abi::pvlock::{self, Variant, VcpuState32, VcpuState64};
use pvlock_abi::{kvm, pvtime};

use crate::sched::{PutOutcome, Wakeup};

/// Size and alignment, in bytes, of every per-vCPU record (PV-lock and
/// stolen time alike). `pvlock::STATE_SIZE` (docs/abi.md §3) and
/// `pvtime::RECORD_SIZE` (DEN0057A; docs/abi.md §4).
pub const RECORD_SIZE: u64 = pvlock::STATE_SIZE as u64;

const _: () = assert!(pvlock::STATE_SIZE == pvtime::RECORD_SIZE);
const _: () = assert!(RECORD_SIZE.is_power_of_two());

/// "Not registered" in [`PvRegistry`]'s guest-chosen slots: never a valid
/// record address (not 64-byte aligned).
const UNREGISTERED: u64 = u64::MAX;
const _: () = assert!(!UNREGISTERED.is_multiple_of(RECORD_SIZE));

/// What paravirtual services one VM has enabled, from its description
/// (`pv-lock`, `pv-time`, `kvm-ptp`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PvConfig {
    /// The PV-lock ABI variant the VM gets, if any (docs/abi.md §3).
    pub lock: Option<Variant>,
    /// PV stolen time (DEN0057A; docs/abi.md §4).
    pub steal_time: bool,
    /// KVM_PTP, vendor function 1 (docs/abi.md §2).
    pub ptp: bool,
}

impl PvConfig {
    /// Every configuration that [`Self::validate`] accepts (tests).
    #[cfg(test)]
    pub(crate) fn every_valid() -> Vec<PvConfig> {
        let mut configs = Vec::new();
        for lock in [None].into_iter().chain(Variant::ALL.map(Some)) {
            for steal_time in [false, true] {
                for ptp in [false, true] {
                    let config = PvConfig {
                        lock,
                        steal_time,
                        ptp,
                    };
                    if config.validate().is_ok() {
                        configs.push(config);
                    }
                }
            }
        }
        configs
    }

    /// Nothing enabled: the VM still gets the KVM vendor discovery calls.
    pub const NONE: Self = Self {
        lock: None,
        steal_time: false,
        ptp: false,
    };

    /// Whether the services can coexist on one VM. The seed-v3 PV-lock call
    /// is `0x86000001`, mainline's KVM_PTP (docs/abi.md §3,
    /// "The seed-v3 / PTP conflict"), so a VM cannot have both: [`ConfigError::PtpClash`].
    pub const fn validate(&self) -> Result<(), ConfigError> {
        match self.lock {
            Some(variant) if self.ptp && variant.clashes_with_kvm_ptp() => {
                Err(ConfigError::PtpClash { variant })
            }
            _ => Ok(()),
        }
    }

    /// Whether the PV-lock records are the hypervisor's to place (seed-v2,
    /// seed-v3) rather than the guest's (openEuler, Anolis).
    pub const fn hypervisor_places_lock(&self) -> bool {
        match self.lock {
            Some(variant) => !variant.guest_allocates(),
            None => false,
        }
    }

    /// Whether the VM needs a PV area ([`PvRegistry::area_size`] > 0).
    pub const fn needs_area(&self) -> bool {
        self.hypervisor_places_lock() || self.steal_time
    }
}

/// Why a VM's paravirtual services cannot be set up as described. Each is
/// a fault of the VM's description (or of the caller), never of the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// KVM_PTP and a PV-lock variant that uses the same function id
    /// (seed-v3, `0x86000001`) were both enabled.
    PtpClash {
        /// The clashing variant.
        variant: Variant,
    },
    /// Records must be placed but no PV area was given.
    NoArea {
        /// Bytes needed ([`PvRegistry::area_size`]).
        needed: u64,
    },
    /// The PV area is not 64-byte aligned.
    AreaMisaligned {
        /// The area given.
        area: MemRange,
    },
    /// The PV area is smaller than the records need, or wraps around the
    /// end of the address space.
    AreaTooSmall {
        /// The area given.
        area: MemRange,
        /// Bytes needed ([`PvRegistry::area_size`]).
        needed: u64,
    },
    /// The registry handed to [`crate::services::smccc::dispatcher_for`] was built
    /// for another configuration.
    RegistryMismatch {
        /// What the registry was built for.
        registry: PvConfig,
        /// What the dispatcher was asked for.
        config: PvConfig,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PtpClash { variant } => write!(
                f,
                "kvm-ptp and pv-lock {} both use function id {:#010x}; enable one",
                variant.name(),
                kvm::PTP.raw()
            ),
            Self::NoArea { needed } => {
                write!(f, "the PV records need a {needed}-byte area; none given")
            }
            Self::AreaMisaligned { area } => write!(
                f,
                "PV area {:#x}+{:#x} is not {RECORD_SIZE}-byte aligned",
                area.base, area.size
            ),
            Self::AreaTooSmall { area, needed } => write!(
                f,
                "PV area {:#x}+{:#x} is too small: {needed:#x} bytes needed",
                area.base, area.size
            ),
            Self::RegistryMismatch { registry, config } => write!(
                f,
                "PV registry built for {registry:?}, dispatcher asked for {config:?}"
            ),
        }
    }
}

/// Where a VM's RAM is on the host: guest RAM from IPA `ipa_base` is the
/// host block `host` (the VM's placement). Records are written through it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostWindow {
    /// The IPA of the first byte of guest RAM.
    pub ipa_base: u64,
    /// The host block behind it.
    pub host: MemRange,
}

impl HostWindow {
    /// The host address of the record at `ipa`, if all of its
    /// [`RECORD_SIZE`] bytes are in the window.
    pub fn record_pa(&self, ipa: u64) -> Option<u64> {
        self.host_address(ipa, RECORD_SIZE)
    }

    /// The host address of the `len` bytes at `ipa`, if all of them are
    /// in the window.
    pub fn host_address(&self, ipa: u64, len: u64) -> Option<u64> {
        let offset = ipa.checked_sub(self.ipa_base)?;
        (self.host.size.checked_sub(offset)? >= len).then(|| self.host.base + offset)
    }
}

/// Where one vCPU's PV-lock record is and how wide its `preempted` field
/// is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockRecord {
    /// The record's IPA (64-byte aligned, 64 bytes inside the VM's RAM).
    pub ipa: u64,
    /// Width in bytes of the `preempted` field at offset 0:
    /// `Variant::preempted_width` (8 for `VcpuState64`, 4 for
    /// `VcpuState32`). Write exactly this many bytes, little-endian.
    pub width: usize,
}

/// Why a guest-chosen PV-lock record was refused
/// ([`PvRegistry::register_guest_lock`]). The service answers all of them
/// with NOT_SUPPORTED (-1) and records nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockRegisterError {
    /// The VM's variant does not let the guest choose (or it has none).
    NotGuestAllocated,
    /// No such vCPU in this registry.
    UnknownVcpu,
    /// The IPA is not 64-byte aligned.
    Misaligned,
    /// The 64 bytes are not all inside the VM's RAM.
    OutsideRam,
    /// The 64 bytes overlap the hypervisor's PV area.
    InPvArea,
}

/// The per-VM table of PV record addresses, shared (through an `Arc`)
/// between the VM's SMCCC services and the runner (`el2::run`). Lock-free: every
/// mutable slot is an atomic, so any pCPU may read it at any time.
///
/// Indices are vCPU indices within the VM; an index the registry does not
/// know reads as "no record" and is ignored by the mutators.
#[derive(Debug)]
pub struct PvRegistry {
    config: PvConfig,
    vcpus: u16,
    area: Option<MemRange>,
    /// The width of the `preempted` field of the VM's variant (0 without
    /// a PV lock).
    lock_width: usize,
    /// The guest chooses its PV-lock records (openEuler/Anolis).
    guest_allocates: bool,
    /// Base of the stolen-time records.
    steal_base: Option<u64>,
    /// Per vCPU, the IPA of its PV-lock record: the fixed slot in the PV
    /// area (seed-v2/v3), or the guest's choice (openEuler/Anolis),
    /// [`UNREGISTERED`] when none; empty without a PV lock. One load at
    /// every put, load and wake-up.
    lock_ipa: Vec<AtomicU64>,
    /// Per vCPU, the scheduler steal ticks that count as stolen time 0.
    steal_origin: Vec<AtomicU64>,
    /// Where the VM's RAM is on the host, once [`Self::backed_by`] said.
    host: Option<HostWindow>,
    /// Per vCPU, `lock_ipa` translated to the host address the runner
    /// writes through ([`UNREGISTERED`] when none, or without a
    /// [`HostWindow`]); kept with `lock_ipa`, so that a put, load or
    /// wake-up costs one load, not a look-up and a translation. Empty
    /// without a PV lock.
    lock_pa: Vec<AtomicU64>,
    /// The host address of vCPU 0's stolen-time record (the others follow
    /// at [`RECORD_SIZE`] strides), with PV time and a [`HostWindow`].
    steal_pa_base: Option<u64>,
    /// The counter's rate, for [`Self::stolen_time_record`].
    steal_clock: StealClock,
    /// What the guest did with its PV-lock records, for the summary.
    record_stats: RecordCounters,
}

/// How often a VM's guest asked for, registered and released PV-lock
/// records: what shows, from outside, that it set them up on every CPU and
/// gave them back (CPU hotplug, reboot, kexec).
#[derive(Debug, Default)]
struct RecordCounters {
    handed_out: AtomicU32,
    registered: AtomicU32,
    refused: AtomicU32,
    released: AtomicU32,
}

/// A snapshot of `RecordCounters` ([`PvRegistry::record_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordStats {
    /// Hypervisor-placed records whose IPA a vCPU asked for (seed-v2
    /// PV_LOCK_PREEMPTED, seed-v3 PREEMPTED).
    pub handed_out: u32,
    /// Guest-chosen records accepted (openEuler IPA_INIT, Anolis
    /// PREEMPTED).
    pub registered: u32,
    /// Guest-chosen records refused (misaligned, outside RAM, in the PV
    /// area).
    pub refused: u32,
    /// openEuler IPA_RELEASE calls.
    pub released: u32,
}

impl fmt::Display for RecordStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "handed-out {} registered {} refused {} released {}",
            self.handed_out, self.registered, self.refused, self.released
        )
    }
}

impl PvRegistry {
    /// Bytes of PV area `config` needs for `vcpus` vCPUs: one record per
    /// vCPU for hypervisor-placed PV-lock records, one per vCPU for stolen
    /// time. 0 when nothing is hypervisor-placed.
    pub const fn area_size(vcpus: u16, config: &PvConfig) -> u64 {
        let per_vcpu = config.hypervisor_places_lock() as u64 + config.steal_time as u64;
        per_vcpu * vcpus as u64 * RECORD_SIZE
    }

    /// The registry of a VM with `vcpus` vCPUs and `config`, laying the
    /// hypervisor-placed records out in `area` (IPA range in the VM's RAM,
    /// reserved from the guest; the caller guarantees both): PV-lock
    /// records of vCPUs `0..vcpus` from `area.base`, then stolen-time
    /// records. `area` may be larger than needed, or given when nothing
    /// needs it; it is then only kept out of guest-chosen registrations.
    pub fn new(vcpus: u16, config: PvConfig, area: Option<MemRange>) -> Result<Self, ConfigError> {
        config.validate()?;
        let needed = Self::area_size(vcpus, &config);
        if let Some(area) = area {
            if !area.base.is_multiple_of(RECORD_SIZE) {
                return Err(ConfigError::AreaMisaligned { area });
            }
            if area.size < needed || area.base.checked_add(area.size).is_none() {
                return Err(ConfigError::AreaTooSmall { area, needed });
            }
        }
        let base = match area {
            Some(area) => area.base,
            None if needed == 0 => 0,
            None => return Err(ConfigError::NoArea { needed }),
        };
        let lock_bytes = if config.hypervisor_places_lock() {
            u64::from(vcpus) * RECORD_SIZE
        } else {
            0
        };
        let lock_ipa = match config.lock {
            None => Vec::new(),
            Some(variant) if variant.guest_allocates() => {
                (0..vcpus).map(|_| AtomicU64::new(UNREGISTERED)).collect()
            }
            Some(_) => (0..u64::from(vcpus))
                .map(|vcpu| AtomicU64::new(base + vcpu * RECORD_SIZE))
                .collect(),
        };
        Ok(Self {
            config,
            vcpus,
            area,
            lock_width: config.lock.map_or(0, |variant| variant.preempted_width()),
            guest_allocates: config.lock.is_some_and(|variant| variant.guest_allocates()),
            // `new` checked that base + lock_bytes + steal bytes fits.
            steal_base: config.steal_time.then_some(base + lock_bytes),
            lock_pa: lock_ipa
                .iter()
                .map(|_| AtomicU64::new(UNREGISTERED))
                .collect(),
            lock_ipa,
            steal_origin: (0..vcpus).map(|_| AtomicU64::new(0)).collect(),
            host: None,
            steal_pa_base: None,
            steal_clock: StealClock::new(0),
            record_stats: RecordCounters::default(),
        })
    }

    /// The registry of a VM whose RAM is `host`, on a machine whose
    /// counter runs at `counter_hz` (CNTFRQ_EL0): what its records' host
    /// addresses ([`Self::lock_record_pa`], [`Self::stolen_time_record`])
    /// and the stolen time's nanoseconds are computed from. The caller
    /// guarantees that `host` holds the PV area; a record outside it gets
    /// no host address (and is never written).
    pub fn backed_by(mut self, host: HostWindow, counter_hz: u64) -> Self {
        self.host = Some(host);
        self.steal_clock = StealClock::new(counter_hz);
        for (ipa, pa) in self.lock_ipa.iter().zip(&self.lock_pa) {
            let ipa = ipa.load(Ordering::Relaxed);
            let translated = (ipa != UNREGISTERED).then(|| host.record_pa(ipa)).flatten();
            pa.store(translated.unwrap_or(UNREGISTERED), Ordering::Relaxed);
        }
        self.steal_pa_base = self.steal_base.and_then(|base| {
            let last = base + u64::from(self.vcpus.saturating_sub(1)) * RECORD_SIZE;
            host.record_pa(last).and_then(|_| host.record_pa(base))
        });
        self
    }

    /// The configuration the registry was built for.
    pub fn config(&self) -> PvConfig {
        self.config
    }

    /// Number of vCPUs.
    pub fn vcpus(&self) -> u16 {
        self.vcpus
    }

    /// The PV area, as given to [`Self::new`].
    pub fn area(&self) -> Option<MemRange> {
        self.area
    }

    /// Where `vcpu`'s PV-lock record is: the fixed slot in the PV area for
    /// seed-v2/seed-v3, the guest's last accepted registration for
    /// openEuler/Anolis; `None` if the VM has no PV lock, the guest has not
    /// registered (or released), or there is no such vCPU. Read it at every
    /// vcpu_load / vcpu_put / wake-up: a guest-chosen one can change
    /// whenever the vCPU runs.
    pub fn lock_record(&self, vcpu: u16) -> Option<LockRecord> {
        let ipa = self
            .lock_ipa
            .get(usize::from(vcpu))?
            .load(Ordering::Acquire);
        (ipa != UNREGISTERED).then_some(LockRecord {
            ipa,
            width: self.lock_width,
        })
    }

    /// The IPA of `vcpu`'s stolen-time record (fixed, in the PV area), or
    /// `None` without PV time or for an unknown vCPU.
    pub fn steal_record(&self, vcpu: u16) -> Option<u64> {
        let base = self.steal_base?;
        (vcpu < self.vcpus).then(|| base + u64::from(vcpu) * RECORD_SIZE)
    }

    /// The host address of `vcpu`'s PV-lock record ([`Self::lock_record`]
    /// translated through the [`HostWindow`]), `None` when it has none:
    /// what the runner writes the `preempted` field through, at every put,
    /// load and wake-up.
    #[inline]
    pub fn lock_record_pa(&self, vcpu: u16) -> Option<u64> {
        let pa = self.lock_pa.get(usize::from(vcpu))?.load(Ordering::Acquire);
        (pa != UNREGISTERED).then_some(pa)
    }

    /// Width in bytes of the VM's `preempted` field (`Variant::preempted_width`;
    /// 0 without a PV lock).
    #[inline]
    pub fn lock_width(&self) -> usize {
        self.lock_width
    }

    /// What vcpu_load stores in `vcpu`'s stolen-time record: its host
    /// address and [`Self::stolen_time_ns`] of `steal_ticks` at the
    /// counter rate [`Self::backed_by`] was given; `None` without PV time,
    /// a [`HostWindow`], or such a vCPU.
    #[inline]
    pub fn stolen_time_record(&self, vcpu: u16, steal_ticks: u64) -> Option<(u64, u64)> {
        let base = self.steal_pa_base?;
        let origin = self.steal_origin.get(usize::from(vcpu))?;
        let ns = self
            .steal_clock
            .ns(steal_ticks.saturating_sub(origin.load(Ordering::Relaxed)));
        Some((base + u64::from(vcpu) * RECORD_SIZE, ns))
    }

    /// Records the guest's choice of PV-lock record for `vcpu`
    /// (openEuler PV_SCHED_IPA_INIT, Anolis PV_LOCK_PREEMPTED), replacing
    /// any earlier one. Accepted only if `ipa` is 64-byte aligned, its 64
    /// bytes lie in the VM's RAM (`ram_contains(ipa, len)` says whether
    /// `len` bytes at `ipa` do), and they do not overlap the PV
    /// area (docs/abi.md §3: the guest allocates a 64-byte-aligned 64-byte
    /// structure; the PV area is the hypervisor's). On refusal the earlier
    /// registration, if any, stays.
    pub fn register_guest_lock(
        &self,
        vcpu: u16,
        ipa: u64,
        ram_contains: &dyn Fn(u64, u64) -> bool,
    ) -> Result<(), LockRegisterError> {
        if !self.guest_allocates {
            return Err(LockRegisterError::NotGuestAllocated);
        }
        let slot = self
            .lock_ipa
            .get(usize::from(vcpu))
            .ok_or(LockRegisterError::UnknownVcpu)?;
        if !ipa.is_multiple_of(RECORD_SIZE) {
            return Err(LockRegisterError::Misaligned);
        }
        if !ram_contains(ipa, RECORD_SIZE) {
            return Err(LockRegisterError::OutsideRam);
        }
        // `ram_contains` guarantees that ipa + 64 does not wrap.
        let record = MemRange::new(ipa, RECORD_SIZE);
        if self.area.is_some_and(|area| area.overlaps(&record)) {
            return Err(LockRegisterError::InPvArea);
        }
        let pa = self.host.and_then(|host| host.record_pa(ipa));
        if let Some(slot_pa) = self.lock_pa.get(usize::from(vcpu)) {
            slot_pa.store(pa.unwrap_or(UNREGISTERED), Ordering::Release);
        }
        slot.store(ipa, Ordering::Release);
        Ok(())
    }

    /// [`Self::register_guest_lock`] on behalf of the guest's call, counted
    /// in [`Self::record_stats`].
    pub fn guest_registers_lock(
        &self,
        vcpu: u16,
        ipa: u64,
        ram_contains: &dyn Fn(u64, u64) -> bool,
    ) -> Result<(), LockRegisterError> {
        let result = self.register_guest_lock(vcpu, ipa, ram_contains);
        let counter = match result {
            Ok(()) => &self.record_stats.registered,
            Err(_) => &self.record_stats.refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }

    /// The guest's PV_SCHED_IPA_RELEASE: forgets `vcpu`'s guest-chosen
    /// record, counted in [`Self::record_stats`]. No-op for
    /// hypervisor-placed records.
    pub fn release_guest_lock(&self, vcpu: u16) {
        self.record_stats.released.fetch_add(1, Ordering::Relaxed);
        self.forget_guest_lock(vcpu);
    }

    /// The guest asked for `vcpu`'s hypervisor-placed record: `Some` IPA,
    /// counted in [`Self::record_stats`], or `None`.
    pub fn hand_out_lock_record(&self, vcpu: u16) -> Option<LockRecord> {
        let record = self.lock_record(vcpu)?;
        self.record_stats.handed_out.fetch_add(1, Ordering::Relaxed);
        Some(record)
    }

    /// What the guest did with its records so far (never reset, not even
    /// by SYSTEM_RESET: the counts span the VM's life).
    pub fn record_stats(&self) -> RecordStats {
        let c = &self.record_stats;
        RecordStats {
            handed_out: c.handed_out.load(Ordering::Relaxed),
            registered: c.registered.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            released: c.released.load(Ordering::Relaxed),
        }
    }

    fn forget_guest_lock(&self, vcpu: u16) {
        if !self.guest_allocates {
            return;
        }
        if let Some(slot) = self.lock_ipa.get(usize::from(vcpu)) {
            slot.store(UNREGISTERED, Ordering::Release);
        }
        if let Some(slot) = self.lock_pa.get(usize::from(vcpu)) {
            slot.store(UNREGISTERED, Ordering::Release);
        }
    }

    /// PSCI CPU_ON of `vcpu` (after CPU_OFF): a new guest CPU bring-up
    /// registers again, so a guest-chosen record is forgotten (its memory
    /// may have been reused). Call it before `Scheduler::power_on`.
    ///
    /// Hypervisor-placed records keep their fixed IPAs. The caller keeps
    /// their contents right: the PV-lock `preempted` field is rewritten by
    /// the state machine (1 at the CPU_ON wake-up, 0 at the first load);
    /// the stolen-time record must **not** be reset — a CPU that comes back
    /// online keeps the guest's per-CPU steal baseline, so stolen time must
    /// stay monotonic for the life of the guest OS (it starts over only at
    /// SYSTEM_RESET, [`Self::rebase_steal`]).
    pub fn reset_vcpu(&self, vcpu: u16) {
        self.forget_guest_lock(vcpu);
    }

    /// PSCI SYSTEM_RESET / SYSTEM_RESET2: every guest-chosen registration
    /// is forgotten. See the module documentation for what the caller does
    /// with the hypervisor-placed records and stolen time.
    pub fn reset_all(&self) {
        for vcpu in 0..self.vcpus {
            self.reset_vcpu(vcpu);
        }
    }

    /// Makes `steal_ticks` (the scheduler's steal-tick total of `vcpu`
    /// now) the origin of the guest's stolen time: call it for every vCPU
    /// when the VM (re)starts, with its record zeroed, so a new guest does
    /// not see the previous run's steal as one huge burst.
    pub fn rebase_steal(&self, vcpu: u16, steal_ticks: u64) {
        if let Some(origin) = self.steal_origin.get(usize::from(vcpu)) {
            origin.store(steal_ticks, Ordering::Relaxed);
        }
    }

    /// The value to store in `vcpu`'s `stolen_time` field (ns, DEN0057A)
    /// when its scheduler steal-tick total is `steal_ticks` and the counter
    /// runs at `counter_hz`: the steal since [`Self::rebase_steal`],
    /// converted by [`stolen_ns`]. Monotonic as long as `steal_ticks` is.
    pub fn stolen_time_ns(&self, vcpu: u16, steal_ticks: u64, counter_hz: u64) -> u64 {
        let origin = self
            .steal_origin
            .get(usize::from(vcpu))
            .map_or(0, |o| o.load(Ordering::Relaxed));
        stolen_ns(steal_ticks.saturating_sub(origin), counter_hz)
    }
}

/// The `preempted` value to store at vcpu_load, before the vCPU runs: 0,
/// "running" (docs/abi.md §3 update rule).
pub const fn preempted_on_load() -> u64 {
    VcpuState64::RUNNING
}

/// The `preempted` value to store when [`crate::sched::Scheduler::put`]
/// answered `outcome`, or `None` to leave the record alone.
///
/// - [`PutOutcome::Requeued`] (slice expired, yield): 1 — descheduled while
///   still runnable, the one case a guest must know about.
/// - [`PutOutcome::Blocked`] (WFI, CPU_SUSPEND): 0 — the vCPU chose to
///   idle; it reads 1 only once a wake-up makes it runnable while it is
///   not running ([`preempted_on_wake`]). Written rather than left, so a
///   record the guest registered while running holds a defined value.
/// - [`PutOutcome::PoweredOff`] (CPU_OFF): 0 — an offline CPU holds no lock
///   and runs nothing, so nothing should wait on it as on a preempted one.
///   The seed-v3 and openEuler hosts would write 1 here (they write 1 on
///   every put); no guest can observe the difference usefully, since it
///   never spins on or wakes tasks onto an offline CPU.
/// - [`PutOutcome::KeepRunning`]: `None` — the vCPU never left its pCPU.
///
/// See the module documentation for the comparison with the "1 on every
/// put" hosts.
pub const fn preempted_on_put(outcome: PutOutcome) -> Option<u64> {
    match outcome {
        PutOutcome::Requeued => Some(VcpuState64::PREEMPTED),
        PutOutcome::Blocked | PutOutcome::PoweredOff => Some(VcpuState64::RUNNING),
        PutOutcome::KeepRunning => None,
    }
}

/// The `preempted` value to store when a wake-up (`Scheduler::wake`,
/// `power_on`, a WFI deadline) answered `wakeup`, or `None` to leave the
/// record alone: 1 when the vCPU became (or stays) Runnable while not
/// running ([`Wakeup::Queued`], [`Wakeup::Preempting`]: it waits until the
/// running vCPU has left); nothing for [`Wakeup::Kicked`] (already
/// running, 0, or already runnable, 1) or [`Wakeup::Ignored`] (Off).
pub const fn preempted_on_wake(wakeup: Wakeup) -> Option<u64> {
    match wakeup {
        Wakeup::Queued { .. } | Wakeup::Preempting { .. } => Some(VcpuState64::PREEMPTED),
        Wakeup::Kicked { .. } | Wakeup::Ignored => None,
    }
}

// The two record widths agree on the values written.
const _: () = assert!(VcpuState64::RUNNING == VcpuState32::RUNNING as u64);
const _: () = assert!(VcpuState64::PREEMPTED == VcpuState32::PREEMPTED as u64);

/// Nanoseconds in a second.
const NS_PER_S: u128 = 1_000_000_000;

/// [`stolen_ns`] at one counter rate, decided once: a rate that divides
/// 10^9 — QEMU virt's 62.5 MHz, the 100 MHz of many servers, Armv8.6's
/// mandated 1 GHz — is a whole number of nanoseconds per tick, and the
/// conversion a multiplication (the same floor: ticks·10^9/hz is then
/// exact); any other rate keeps `stolen_ns`'s divisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StealClock {
    counter_hz: u64,
    ns_per_tick: Option<u64>,
}

impl StealClock {
    const fn new(counter_hz: u64) -> Self {
        let ns_per_s = NS_PER_S as u64;
        let ns_per_tick = if counter_hz != 0 && ns_per_s.is_multiple_of(counter_hz) {
            Some(ns_per_s / counter_hz)
        } else {
            None
        };
        Self {
            counter_hz,
            ns_per_tick,
        }
    }

    /// `stolen_ns(ticks, counter_hz)`.
    #[inline]
    const fn ns(&self, ticks: u64) -> u64 {
        match self.ns_per_tick {
            Some(per_tick) => ticks.saturating_mul(per_tick),
            None => stolen_ns(ticks, self.counter_hz),
        }
    }
}

/// Converts `steal_ticks` counter ticks at `counter_hz` (CNTFRQ_EL0) to
/// nanoseconds for the stolen-time record (DEN0057A: `stolen_time` is in
/// ns). Exact (rounded down) for every input: the product is computed in
/// 128 bits; a result beyond `u64::MAX` (more than 584 years) saturates.
/// A `counter_hz` of 0 (an unset CNTFRQ) gives 0 rather than a division
/// fault.
pub const fn stolen_ns(steal_ticks: u64, counter_hz: u64) -> u64 {
    if counter_hz == 0 {
        return 0;
    }
    // Every vcpu_load converts: whole seconds and the remainder with 64-bit
    // divisions (one instruction each), the same floor as the 128-bit
    // product, without a 128-bit division routine. floor((q·hz + r)·1e9 /
    // hz) = q·1e9 + floor(r·1e9 / hz), and r·1e9 fits in 64 bits while hz
    // does not exceed u64::MAX / 1e9 (about 18 GHz); beyond, or if q·1e9
    // overflows, the 128-bit form decides.
    let ns_per_s = NS_PER_S as u64;
    if counter_hz <= u64::MAX / ns_per_s {
        let (seconds, rest) = (steal_ticks / counter_hz, steal_ticks % counter_hz);
        if let Some(whole) = seconds.checked_mul(ns_per_s) {
            return whole.saturating_add(rest * ns_per_s / counter_hz);
        }
    }
    let ns = steal_ticks as u128 * NS_PER_S / counter_hz as u128;
    if ns > u64::MAX as u128 {
        u64::MAX
    } else {
        ns as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::CpuSet;
    use crate::sched::{InitialState, MIN_RUN_DIVISOR, PutReason, Scheduler};
    use crate::vcpu::PowerState;
    use crate::vcpu::{VcpuId, VmId};
    use alloc::vec;
    use pvlock_abi::pvlock::Variant;

    const RAM: MemRange = MemRange::new(0x4000_0000, 0x1000_0000);
    const AREA: MemRange = MemRange::new(0x4FF0_0000, 0x1_0000);

    /// The VM's RAM as `register_guest_lock` asks about it.
    fn in_ram(ipa: u64, len: u64) -> bool {
        ipa >= RAM.base && ipa.checked_add(len).is_some_and(|end| end <= RAM.end())
    }

    fn config(lock: Option<Variant>, steal_time: bool, ptp: bool) -> PvConfig {
        PvConfig {
            lock,
            steal_time,
            ptp,
        }
    }

    #[test]
    fn registry_is_shareable() {
        fn shareable<T: Send + Sync>() {}
        shareable::<PvRegistry>();
    }

    #[test]
    fn seed_v3_and_ptp_cannot_both_be_on() {
        let clash = config(Some(Variant::SeedV3), false, true);
        assert_eq!(
            clash.validate(),
            Err(ConfigError::PtpClash {
                variant: Variant::SeedV3
            })
        );
        assert!(alloc::format!("{}", clash.validate().unwrap_err()).contains("0x86000001"));
        assert_eq!(
            PvRegistry::new(2, clash, Some(AREA)).unwrap_err(),
            ConfigError::PtpClash {
                variant: Variant::SeedV3
            }
        );
        for variant in Variant::ALL {
            for steal_time in [false, true] {
                let with_ptp = config(Some(variant), steal_time, true);
                assert_eq!(with_ptp.validate().is_ok(), variant != Variant::SeedV3);
                assert!(config(Some(variant), steal_time, false).validate().is_ok());
            }
        }
        assert!(config(None, true, true).validate().is_ok());
        assert!(PvConfig::NONE.validate().is_ok());
        assert_eq!(PvConfig::default(), PvConfig::NONE);
    }

    #[test]
    fn area_size_counts_only_hypervisor_placed_records() {
        let size = |lock, steal| PvRegistry::area_size(5, &config(lock, steal, false));
        assert_eq!(size(None, false), 0);
        assert_eq!(size(None, true), 5 * 64);
        assert_eq!(size(Some(Variant::SeedV2), false), 5 * 64);
        assert_eq!(size(Some(Variant::SeedV3), true), 10 * 64);
        assert_eq!(size(Some(Variant::OpenEuler), false), 0);
        assert_eq!(size(Some(Variant::Anolis), true), 5 * 64);
        assert_eq!(RECORD_SIZE, 64);
        // The largest VM fits in u64 easily.
        assert_eq!(
            PvRegistry::area_size(u16::MAX, &config(Some(Variant::SeedV2), true, false)),
            u64::from(u16::MAX) * 128
        );
    }

    #[test]
    fn hypervisor_records_are_laid_out_in_the_area() {
        for variant in [Variant::SeedV2, Variant::SeedV3] {
            let vcpus = 7;
            let cfg = config(Some(variant), true, false);
            let needed = PvRegistry::area_size(vcpus, &cfg);
            let area = MemRange::new(AREA.base, needed);
            let reg = PvRegistry::new(vcpus, cfg, Some(area)).unwrap();
            assert_eq!(reg.area(), Some(area));
            assert_eq!((reg.vcpus(), reg.config()), (vcpus, cfg));
            let mut records = vec![];
            for v in 0..vcpus {
                let lock = reg.lock_record(v).unwrap();
                assert_eq!(lock.width, 8);
                // Lock records first, then stolen-time records.
                assert_eq!(lock.ipa, area.base + u64::from(v) * 64);
                let steal = reg.steal_record(v).unwrap();
                assert_eq!(steal, area.base + u64::from(vcpus) * 64 + u64::from(v) * 64);
                records.push(lock.ipa);
                records.push(steal);
            }
            for (i, &a) in records.iter().enumerate() {
                assert!(a.is_multiple_of(64), "aligned");
                assert!(area.contains(a) && a + 64 <= area.end(), "inside the area");
                for &b in &records[i + 1..] {
                    assert!(!MemRange::new(a, 64).overlaps(&MemRange::new(b, 64)));
                }
            }
            assert_eq!(reg.lock_record(vcpus), None);
            assert_eq!(reg.steal_record(vcpus), None);
            assert_eq!(reg.lock_record(u16::MAX), None);
        }
        // Stolen time alone starts at the area's base.
        let reg = PvRegistry::new(3, config(None, true, false), Some(AREA)).unwrap();
        assert_eq!(reg.lock_record(0), None);
        assert_eq!(reg.steal_record(0), Some(AREA.base));
        assert_eq!(reg.steal_record(2), Some(AREA.base + 128));
        // Guest-chosen lock records take no room.
        let reg =
            PvRegistry::new(3, config(Some(Variant::Anolis), true, false), Some(AREA)).unwrap();
        assert_eq!(reg.steal_record(0), Some(AREA.base));
    }

    #[test]
    fn bad_areas_are_refused() {
        let cfg = config(Some(Variant::SeedV2), true, false);
        let needed = PvRegistry::area_size(4, &cfg);
        assert_eq!(
            PvRegistry::new(4, cfg, None).unwrap_err(),
            ConfigError::NoArea { needed }
        );
        let misaligned = MemRange::new(AREA.base + 32, 0x1000);
        assert_eq!(
            PvRegistry::new(4, cfg, Some(misaligned)).unwrap_err(),
            ConfigError::AreaMisaligned { area: misaligned }
        );
        let small = MemRange::new(AREA.base, needed - 1);
        assert_eq!(
            PvRegistry::new(4, cfg, Some(small)).unwrap_err(),
            ConfigError::AreaTooSmall {
                area: small,
                needed
            }
        );
        let wraps = MemRange::new(u64::MAX - 63, needed);
        assert_eq!(
            PvRegistry::new(4, cfg, Some(wraps)).unwrap_err(),
            ConfigError::AreaTooSmall {
                area: wraps,
                needed
            }
        );
        // Exactly big enough, and at the very top of the address space.
        let top = MemRange::new((u64::MAX - needed - 63) & !63, needed);
        assert!(PvRegistry::new(4, cfg, Some(top)).is_ok());
        // No area needed: none is fine, and one given is kept.
        let guest = config(Some(Variant::OpenEuler), false, true);
        assert_eq!(PvRegistry::new(4, guest, None).unwrap().area(), None);
        assert_eq!(
            PvRegistry::new(4, guest, Some(AREA)).unwrap().area(),
            Some(AREA)
        );
        for e in [
            ConfigError::NoArea { needed },
            ConfigError::AreaMisaligned { area: misaligned },
            ConfigError::AreaTooSmall {
                area: small,
                needed,
            },
        ] {
            assert!(!alloc::format!("{e}").is_empty());
        }
    }

    #[test]
    fn guest_chosen_records_are_validated() {
        for variant in [Variant::OpenEuler, Variant::Anolis] {
            let reg = PvRegistry::new(4, config(Some(variant), true, false), Some(AREA)).unwrap();
            let ok = RAM.base + 0x1_0040;
            // Nothing until the guest says where.
            assert_eq!(reg.lock_record(1), None);
            for (ipa, err) in [
                (ok + 8, LockRegisterError::Misaligned),
                (ok + 63, LockRegisterError::Misaligned),
                (u64::MAX, LockRegisterError::Misaligned),
                (RAM.base - 64, LockRegisterError::OutsideRam),
                (RAM.end(), LockRegisterError::OutsideRam),
                (0, LockRegisterError::OutsideRam),
                (!63, LockRegisterError::OutsideRam),
                (AREA.base, LockRegisterError::InPvArea),
                (AREA.end() - 64, LockRegisterError::InPvArea),
            ] {
                assert_eq!(
                    reg.register_guest_lock(1, ipa, &in_ram),
                    Err(err),
                    "{ipa:#x}"
                );
                assert_eq!(reg.lock_record(1), None);
            }
            assert_eq!(
                reg.register_guest_lock(4, ok, &in_ram),
                Err(LockRegisterError::UnknownVcpu)
            );
            // The last record of RAM and the one right after the area are fine.
            assert_eq!(reg.register_guest_lock(0, RAM.end() - 64, &in_ram), Ok(()));
            assert_eq!(reg.register_guest_lock(2, AREA.end(), &in_ram), Ok(()));
            assert_eq!(reg.register_guest_lock(1, ok, &in_ram), Ok(()));
            assert_eq!(reg.lock_record(1), Some(LockRecord { ipa: ok, width: 4 }));
            // A refused re-registration keeps the old one; a good one replaces it.
            assert!(reg.register_guest_lock(1, ok + 4, &in_ram).is_err());
            assert_eq!(reg.lock_record(1).unwrap().ipa, ok);
            assert_eq!(reg.register_guest_lock(1, ok + 64, &in_ram), Ok(()));
            assert_eq!(reg.lock_record(1).unwrap().ipa, ok + 64);
            // Release, per-vCPU reset (CPU_ON) and reset_all forget it.
            reg.release_guest_lock(1);
            assert_eq!(reg.lock_record(1), None);
            reg.register_guest_lock(1, ok, &in_ram).unwrap();
            reg.reset_vcpu(1);
            assert_eq!(reg.lock_record(1), None);
            assert_eq!(reg.lock_record(0).unwrap().ipa, RAM.end() - 64);
            reg.reset_all();
            assert!((0..4).all(|v| reg.lock_record(v).is_none()));
            // Stolen-time records are the hypervisor's and stay put.
            assert_eq!(reg.steal_record(3), Some(AREA.base + 3 * 64));
            // Unknown vCPUs are ignored.
            reg.release_guest_lock(9);
            reg.reset_vcpu(u16::MAX);
        }
    }

    /// A host block behind [`RAM`] that is not at its IPA, so that a
    /// record written at its IPA instead of its host address shows.
    const HOST: HostWindow = HostWindow {
        ipa_base: RAM.base,
        host: MemRange::new(0x8_2000_0000, RAM.size),
    };

    /// The host address the runner writes through, by hand.
    fn on_host(ipa: u64) -> u64 {
        ipa - RAM.base + HOST.host.base
    }

    #[test]
    fn records_are_written_at_their_host_address_kept_with_their_ipa() {
        // Hypervisor-placed: every record's host address is known at once.
        for variant in [Variant::SeedV2, Variant::SeedV3] {
            let reg = PvRegistry::new(4, config(Some(variant), true, false), Some(AREA))
                .unwrap()
                .backed_by(HOST, 62_500_000);
            for v in 0..4 {
                let ipa = reg.lock_record(v).unwrap().ipa;
                assert_eq!(reg.lock_record_pa(v), Some(on_host(ipa)));
                let (pa, ns) = reg.stolen_time_record(v, 62_500_000).unwrap();
                assert_eq!(pa, on_host(reg.steal_record(v).unwrap()));
                assert_eq!(ns, 1_000_000_000);
            }
            assert_eq!(reg.lock_width(), 8);
            assert_eq!(reg.lock_record_pa(4), None);
            assert_eq!(reg.stolen_time_record(4, 1), None);
            // The steal origin counts as it does for `stolen_time_ns`.
            reg.rebase_steal(2, 1_000);
            assert_eq!(
                reg.stolen_time_record(2, 63_500).map(|r| r.1),
                Some(reg.stolen_time_ns(2, 63_500, 62_500_000))
            );
            assert_eq!(reg.stolen_time_ns(2, 63_500, 62_500_000), 1_000_000);
        }
        // Guest-chosen: the host address follows every registration,
        // refusal, release and reset.
        for variant in [Variant::OpenEuler, Variant::Anolis] {
            let reg = PvRegistry::new(4, config(Some(variant), false, false), Some(AREA))
                .unwrap()
                .backed_by(HOST, 62_500_000);
            let ok = RAM.base + 0x2_0000;
            assert_eq!(reg.lock_record_pa(1), None);
            assert_eq!(reg.stolen_time_record(1, 5), None, "no PV time");
            reg.register_guest_lock(1, ok, &in_ram).unwrap();
            assert_eq!(reg.lock_record_pa(1), Some(on_host(ok)));
            assert_eq!(reg.lock_width(), 4);
            assert!(reg.register_guest_lock(1, ok + 4, &in_ram).is_err());
            assert_eq!(reg.lock_record_pa(1), Some(on_host(ok)));
            reg.register_guest_lock(1, RAM.end() - 64, &in_ram).unwrap();
            assert_eq!(reg.lock_record_pa(1), Some(on_host(RAM.end() - 64)));
            reg.release_guest_lock(1);
            assert_eq!(reg.lock_record_pa(1), None);
            reg.register_guest_lock(2, ok, &in_ram).unwrap();
            reg.reset_vcpu(2);
            assert_eq!(reg.lock_record_pa(2), None);
            reg.register_guest_lock(3, ok, &in_ram).unwrap();
            reg.reset_all();
            assert!((0..4).all(|v| reg.lock_record_pa(v).is_none()));
        }
        // Without a host window nothing has a host address: nothing is
        // written.
        let unbacked =
            PvRegistry::new(2, config(Some(Variant::SeedV2), true, false), Some(AREA)).unwrap();
        assert_eq!(unbacked.lock_record_pa(0), None);
        assert_eq!(unbacked.stolen_time_record(0, 1), None);
        // A window that ends inside the area gives its records none either.
        let short = HostWindow {
            ipa_base: RAM.base,
            host: MemRange::new(HOST.host.base, AREA.base - RAM.base + 64),
        };
        let reg = PvRegistry::new(2, config(Some(Variant::SeedV2), true, false), Some(AREA))
            .unwrap()
            .backed_by(short, 62_500_000);
        assert_eq!(reg.lock_record_pa(0), Some(on_host(AREA.base)));
        assert_eq!(reg.lock_record_pa(1), None);
        assert_eq!(reg.stolen_time_record(0, 1), None);
        assert_eq!(HOST.record_pa(RAM.base - 1), None);
        assert_eq!(HOST.record_pa(RAM.end() - 63), None);
        assert_eq!(
            HOST.record_pa(RAM.end() - 64),
            Some(on_host(RAM.end() - 64))
        );
    }

    #[test]
    fn hypervisor_placed_records_survive_resets() {
        let reg =
            PvRegistry::new(2, config(Some(Variant::SeedV2), true, false), Some(AREA)).unwrap();
        let before = (reg.lock_record(1), reg.steal_record(1));
        assert_eq!(
            reg.register_guest_lock(1, RAM.base, &in_ram),
            Err(LockRegisterError::NotGuestAllocated)
        );
        reg.release_guest_lock(1);
        reg.reset_vcpu(1);
        reg.reset_all();
        assert_eq!((reg.lock_record(1), reg.steal_record(1)), before);
        // No PV lock at all.
        let none = PvRegistry::new(2, PvConfig::NONE, None).unwrap();
        assert_eq!((none.lock_record(0), none.steal_record(0)), (None, None));
        assert_eq!(
            none.register_guest_lock(0, RAM.base, &in_ram),
            Err(LockRegisterError::NotGuestAllocated)
        );
    }

    #[test]
    fn the_steal_clock_converts_as_stolen_ns_does_at_every_rate() {
        let mut rng = prng::Rng::new(0x9e37_79b9_7f4a_7c15);
        for hz in [
            0,
            1,
            3,
            24_000_000,
            25_000_000,
            62_500_000,
            100_000_000,
            1_000_000_000,
            2_000_000_000,
            u64::MAX,
        ] {
            let clock = StealClock::new(hz);
            // The multiplication only where it is exact.
            assert_eq!(
                clock.ns_per_tick.is_some(),
                hz != 0 && 1_000_000_000 % hz == 0,
                "{hz} Hz"
            );
            for ticks in [0, 1, u64::MAX, u64::MAX / 16, u64::MAX / 16 + 1] {
                assert_eq!(clock.ns(ticks), stolen_ns(ticks, hz), "{ticks} at {hz} Hz");
            }
            for _ in 0..2_000 {
                let x = rng.next_u64();
                let ticks = x >> (x % 64);
                assert_eq!(clock.ns(ticks), stolen_ns(ticks, hz), "{ticks} at {hz} Hz");
            }
        }
    }

    #[test]
    fn stolen_ns_is_exact_and_never_overflows() {
        assert_eq!(stolen_ns(0, 62_500_000), 0);
        assert_eq!(stolen_ns(62_500_000, 62_500_000), 1_000_000_000);
        assert_eq!(stolen_ns(1, 62_500_000), 16);
        assert_eq!(stolen_ns(1, 3), 333_333_333);
        assert_eq!(stolen_ns(1, 1_000_000_000), 1);
        assert_eq!(stolen_ns(1, 2_000_000_000), 0);
        // ticks * 1e9 overflows u64 here but not the result.
        assert_eq!(stolen_ns(1 << 62, 1 << 32), (1u64 << 30) * 1_000_000_000);
        assert_eq!(stolen_ns(u64::MAX, u64::MAX), 1_000_000_000);
        assert_eq!(stolen_ns(u64::MAX, 1), u64::MAX);
        assert_eq!(
            stolen_ns(u64::MAX / 1000, 1_000_000),
            u64::MAX / 1000 * 1000
        );
        assert_eq!(stolen_ns(12345, 0), 0);
        // The 64-bit path agrees with the exact 128-bit floor everywhere.
        let exact =
            |t: u64, hz: u64| (t as u128 * NS_PER_S / hz as u128).min(u64::MAX as u128) as u64;
        let mut rng = prng::Rng::new(0x2545_f491_4f6c_dd1d);
        for _ in 0..20_000 {
            let x = rng.next_u64();
            let t = x >> (x % 64);
            for hz in [
                1,
                3,
                62_500_000,
                1_000_000_000,
                25_000_000,
                19_200_000,
                u64::MAX / 1_000_000_000,
                (x >> 20) | 1,
            ] {
                assert_eq!(stolen_ns(t, hz), exact(t, hz), "{t} ticks at {hz} Hz");
            }
        }
    }

    #[test]
    fn stolen_time_starts_over_at_rebase() {
        let hz = 1_000_000;
        let reg = PvRegistry::new(2, config(None, true, false), Some(AREA)).unwrap();
        assert_eq!(reg.stolen_time_ns(0, 1_500, hz), 1_500_000);
        reg.rebase_steal(0, 1_000);
        assert_eq!(reg.stolen_time_ns(0, 1_500, hz), 500_000);
        assert_eq!(reg.stolen_time_ns(0, 1_000, hz), 0);
        // Never below zero, and other vCPUs unaffected.
        assert_eq!(reg.stolen_time_ns(0, 10, hz), 0);
        assert_eq!(reg.stolen_time_ns(1, 1_500, hz), 1_500_000);
        reg.rebase_steal(7, 5);
        assert_eq!(reg.stolen_time_ns(7, 1_500, hz), 1_500_000);
    }

    #[test]
    fn preempted_values() {
        assert_eq!(preempted_on_load(), 0);
        assert_eq!(preempted_on_put(PutOutcome::Requeued), Some(1));
        assert_eq!(preempted_on_put(PutOutcome::Blocked), Some(0));
        assert_eq!(preempted_on_put(PutOutcome::PoweredOff), Some(0));
        assert_eq!(preempted_on_put(PutOutcome::KeepRunning), None);
        assert_eq!(
            preempted_on_wake(Wakeup::Queued { pcpu: 3, ipi: true }),
            Some(1)
        );
        assert_eq!(preempted_on_wake(Wakeup::Preempting { pcpu: 3 }), Some(1));
        assert_eq!(
            preempted_on_wake(Wakeup::Kicked {
                running_on: Some(1)
            }),
            None
        );
        assert_eq!(preempted_on_wake(Wakeup::Kicked { running_on: None }), None);
        assert_eq!(preempted_on_wake(Wakeup::Ignored), None);
    }

    /// The runner's (`el2::run`) side of the state machine over a real scheduler:
    /// every transition writes what this module says into a fake record
    /// per vCPU, as the guest would read it.
    struct Host {
        s: Scheduler,
        vm: VmId,
        flag: Vec<u64>,
        now: u64,
    }

    impl Host {
        fn new(pcpus: usize, vcpus: u16) -> Self {
            let mut s = Scheduler::new(CpuSet::first_n(pcpus), 100);
            let vm = s.add_vm(crate::sched::DEFAULT_WEIGHT).unwrap();
            for _ in 0..vcpus {
                s.add_vcpu(vm, None, InitialState::Off, 0).unwrap();
            }
            Self {
                s,
                vm,
                flag: vec![0; usize::from(vcpus)],
                now: 0,
            }
        }

        fn id(&self, index: u16) -> VcpuId {
            VcpuId { vm: self.vm, index }
        }

        fn write(&mut self, index: u16, value: Option<u64>) {
            if let Some(value) = value {
                self.flag[usize::from(index)] = value;
            }
        }

        fn power_on(&mut self, index: u16) {
            let w = self.s.power_on(self.id(index), self.now).unwrap();
            self.write(index, preempted_on_wake(w));
        }

        fn wake(&mut self, index: u16) {
            let w = self.s.wake(self.id(index), self.now).unwrap();
            self.write(index, preempted_on_wake(w));
        }

        fn pick(&mut self, pcpu: usize) -> Option<u16> {
            let v = self.s.pick_next(pcpu, self.now)?;
            self.write(v.index, Some(preempted_on_load()));
            Some(v.index)
        }

        fn put(&mut self, index: u16, pcpu: usize, why: PutReason) -> PutOutcome {
            let o = self.s.put(self.id(index), pcpu, self.now, why).unwrap();
            self.write(index, preempted_on_put(o));
            o
        }

        fn yield_to(&mut self, from: u16, to: u16, pcpu: usize) -> bool {
            let ok = self
                .s
                .yield_to(self.id(from), self.id(to), pcpu, self.now)
                .is_ok();
            if ok {
                // The switch: the yielder is put, the target loaded.
                self.write(from, preempted_on_put(PutOutcome::Requeued));
                self.write(to, Some(preempted_on_load()));
            }
            ok
        }

        fn expire(&mut self) {
            let mut woken = vec![];
            self.s
                .expire_timers(self.now, |v, w| woken.push((v.index, w)));
            for (index, w) in woken {
                self.write(index, preempted_on_wake(w));
            }
        }

        /// What the guest reads for vCPU `index`.
        fn reads(&self, index: u16) -> u64 {
            self.flag[usize::from(index)]
        }

        /// The rule: the flag reads 1 exactly while the vCPU is Runnable.
        fn check(&self) {
            for index in 0..self.flag.len() as u16 {
                assert_eq!(
                    self.reads(index),
                    u64::from(self.s.is_preempted(self.id(index))),
                    "vCPU {index} in {:?}",
                    self.s.state(self.id(index))
                );
            }
        }
    }

    /// The sequence: 0 while running, 1 when descheduled while
    /// runnable, 0 while blocked in WFI until it becomes runnable while not
    /// running, then 1, then 0 once loaded.
    #[test]
    fn scripted_preempted_sequence() {
        let mut h = Host::new(1, 2);
        h.power_on(0);
        assert_eq!(h.reads(0), 1, "on but not yet running");
        assert_eq!(h.pick(0), Some(0));
        assert_eq!(h.reads(0), 0, "running");
        h.check();

        // vCPU 1 starts and waits for the only pCPU.
        h.power_on(1);
        assert_eq!(h.reads(1), 1);
        // vCPU 0's slice expires with vCPU 1 waiting: preempted.
        h.now = 100;
        assert_eq!(h.put(0, 0, PutReason::SliceExpired), PutOutcome::Requeued);
        assert_eq!(h.reads(0), 1);
        assert_eq!(h.pick(0), Some(1));
        assert_eq!((h.reads(0), h.reads(1)), (1, 0));
        h.check();

        // vCPU 1 blocks in WFI: it reads 0, not "preempted".
        h.now = 150;
        assert_eq!(
            h.put(1, 0, PutReason::Wfi { deadline: None }),
            PutOutcome::Blocked
        );
        assert_eq!(h.reads(1), 0);
        assert_eq!(h.pick(0), Some(0));
        h.check();
        // Still 0 while it stays blocked...
        assert_eq!(h.reads(1), 0);
        // ...1 once a wake-up makes it runnable while vCPU 0 has the pCPU
        // (it has had less CPU time, so vCPU 0's slice now ends once vCPU
        // 0 has run the minimum: wake-up preemption)...
        h.wake(1);
        assert_eq!(h.reads(1), 1);
        let first = VcpuId { vm: h.vm, index: 0 };
        assert_eq!(
            h.s.slice_end(first),
            Some((150 + 100 / MIN_RUN_DIVISOR).max(h.now))
        );
        h.check();
        // ...and a second wake-up changes nothing.
        h.wake(1);
        assert_eq!(h.reads(1), 1);
        // A wake-up of the running vCPU only sets its kicked flag: its WFI
        // completes at once and nothing is written.
        h.wake(0);
        assert_eq!(
            h.put(0, 0, PutReason::Wfi { deadline: None }),
            PutOutcome::KeepRunning
        );
        assert_eq!(h.reads(0), 0);
        h.check();

        // Directed yield, inside what is left of vCPU 0's slice: the
        // yielder is preempted, the target runs.
        h.now = 151;
        assert!(h.yield_to(0, 1, 0));
        assert_eq!(h.pick(0), Some(1));
        assert_eq!((h.reads(0), h.reads(1)), (1, 0));
        h.check();

        // CPU_OFF: 0, and it stays 0 while off; CPU_ON makes it 1 again.
        h.now = 200;
        assert_eq!(h.put(1, 0, PutReason::PowerOff), PutOutcome::PoweredOff);
        assert_eq!(h.reads(1), 0);
        assert_eq!(h.pick(0), Some(0));
        h.wake(1);
        assert_eq!(h.reads(1), 0, "a wake-up of an Off vCPU is ignored");
        h.power_on(1);
        assert_eq!(h.reads(1), 1);
        h.check();

        // A WFI with a deadline: 0 while blocked, 1 when the timer makes it
        // runnable while the other vCPU runs.
        h.now = 300;
        assert_eq!(h.put(0, 0, PutReason::SliceExpired), PutOutcome::Requeued);
        assert_eq!(h.pick(0), Some(1));
        assert_eq!(
            h.put(
                1,
                0,
                PutReason::Wfi {
                    deadline: Some(350)
                }
            ),
            PutOutcome::Blocked
        );
        assert_eq!(h.pick(0), Some(0));
        assert_eq!(h.reads(1), 0);
        h.now = 350;
        h.expire();
        assert_eq!(h.reads(1), 1);
        h.check();
    }

    /// Random schedules over several pCPUs: after every step each vCPU's
    /// flag equals "Runnable", so the guest never sees 1 for a running or
    /// idle vCPU nor 0 for one waiting for a pCPU.
    #[test]
    fn preempted_flag_tracks_runnable_under_random_schedules() {
        let mut rng = prng::Rng::new(0x2545_F491_4F6C_DD1D);
        let mut random = move |n: u64| rng.below(n);
        let pcpus = 3;
        let vcpus = 5u16;
        let mut h = Host::new(pcpus, vcpus);
        h.power_on(0);
        for _ in 0..50_000 {
            h.now += random(40);
            match random(10) {
                0 => {
                    let v = random(u64::from(vcpus)) as u16;
                    if h.s.power_state(h.id(v)) == Some(PowerState::Off) {
                        h.power_on(v);
                    }
                }
                1 | 2 => h.wake(random(u64::from(vcpus)) as u16),
                3 => h.expire(),
                _ => {
                    let pcpu = random(pcpus as u64) as usize;
                    match h.s.current(pcpu) {
                        None => {
                            h.pick(pcpu);
                        }
                        Some(v) => {
                            let v = v.index;
                            match random(12) {
                                0..=4 => {
                                    h.put(v, pcpu, PutReason::SliceExpired);
                                }
                                5 => {
                                    h.put(v, pcpu, PutReason::Yield);
                                }
                                6..=8 => {
                                    let deadline = (random(2) == 0).then(|| h.now + random(300));
                                    h.put(v, pcpu, PutReason::Wfi { deadline });
                                }
                                9 => {
                                    // Keep at least one vCPU around.
                                    if random(4) == 0 {
                                        h.put(v, pcpu, PutReason::PowerOff);
                                    }
                                }
                                _ => {
                                    let to = random(u64::from(vcpus)) as u16;
                                    h.yield_to(v, to, pcpu);
                                }
                            }
                        }
                    }
                }
            }
            h.check();
        }
    }
}
