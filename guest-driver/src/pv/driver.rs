//! Per-CPU set-up and use of the shared records: the PV-lock "preempted"
//! record and the stolen-time record of every CPU; and the scheduling
//! hints (kick, directed yield).

use core::fmt;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

use pvlock_abi::directed_yield::{self, PV_SCHED_YIELD_TO};
use pvlock_abi::pvlock::{
    self, Variant, VcpuState32, VcpuState64, anolis, openeuler, seed_v2, seed_v3,
};
use pvlock_abi::pvtime::{self, StolenTime};
use pvlock_abi::smccc::{self, FunctionId};

use super::{Conduit, MAX_CPUS, PvInfo, SharedMemory, probe, return_code};

/// Why a CPU's record could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitError {
    /// `cpu` is not below [`MAX_CPUS`].
    CpuOutOfRange(usize),
    /// The hypervisor answered `call` with this error code.
    Refused { call: FunctionId, code: i64 },
    /// The hypervisor returned an IPA that is not 64-byte aligned.
    Misaligned { call: FunctionId, ipa: u64 },
    /// The record at `ipa` could not be made readable.
    Unmapped { ipa: u64, reason: &'static str },
    /// The stolen-time record has a revision or attributes other than 0,
    /// which no guest may use (DEN0057A; Linux refuses it too).
    UnknownStolenTimeRecord {
        ipa: u64,
        revision: u32,
        attributes: u32,
    },
}

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            InitError::CpuOutOfRange(cpu) => {
                write!(f, "cpu {cpu} is beyond the driver's {MAX_CPUS}")
            }
            InitError::Refused { call, code } => write!(
                f,
                "{} answered {code}",
                pvlock_abi::describe(call).unwrap_or("the call")
            ),
            InitError::Misaligned { call, ipa } => write!(
                f,
                "{} returned {ipa:#x}, which is not 64-byte aligned",
                pvlock_abi::describe(call).unwrap_or("the call")
            ),
            InitError::Unmapped { ipa, reason } => {
                write!(f, "cannot map the record at {ipa:#x}: {reason}")
            }
            InitError::UnknownStolenTimeRecord {
                ipa,
                revision,
                attributes,
            } => write!(
                f,
                "the stolen-time record at {ipa:#x} has revision {revision} and attributes \
                 {attributes}; only 0 and 0 are defined"
            ),
        }
    }
}

/// What [`PvDriver::init_cpu`] set up: the IPA of each record, `None`
/// when the service is not offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuInit {
    /// The PV-lock "preempted" record.
    pub lock: Result<Option<u64>, InitError>,
    /// The stolen-time record.
    pub steal_time: Result<Option<u64>, InitError>,
}

impl CpuInit {
    /// Whether every offered service was set up.
    pub fn is_ok(&self) -> bool {
        self.lock.is_ok() && self.steal_time.is_ok()
    }
}

/// The answer of [`PvDriver::kick`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kick {
    /// The hypervisor took the kick.
    Kicked,
    /// No kick call is offered: nothing was done.
    Unavailable,
    /// The hypervisor answered with this error code (-1: no such vCPU).
    Refused(i64),
}

/// The answer of [`PvDriver::yield_to`] (`pvlock_abi::directed_yield`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YieldResult {
    /// X0 = 0 (YIELDED): the rest of the caller's time slice went to the
    /// target; the call returned once the caller was scheduled again.
    Yielded,
    /// X0 = 1 (NOT_YIELDED): the target exists but could not take the
    /// slice (it was running, blocked, off, already handed a slice, not
    /// allowed on the caller's pCPU, or the slice was used up).
    NotYielded,
    /// X0 = -1 (UNKNOWN_VCPU): no vCPU with that index in the VM.
    UnknownVcpu,
    /// X0 = -3 (TO_SELF): the target is the caller.
    ToSelf,
    /// No directed-yield call is offered: nothing was sent.
    Unavailable,
    /// Any other answer (no documented meaning).
    Refused(i64),
}

impl YieldResult {
    /// The result for the call's X0 (`pvlock_abi::directed_yield`).
    pub fn from_code(code: i64) -> Self {
        match code {
            directed_yield::YIELDED => YieldResult::Yielded,
            directed_yield::NOT_YIELDED => YieldResult::NotYielded,
            directed_yield::UNKNOWN_VCPU => YieldResult::UnknownVcpu,
            directed_yield::TO_SELF => YieldResult::ToSelf,
            other => YieldResult::Refused(other),
        }
    }

    /// Whether a call went to the hypervisor (anything but
    /// [`Unavailable`](Self::Unavailable)).
    pub const fn was_sent(self) -> bool {
        !matches!(self, YieldResult::Unavailable)
    }
}

/// One CPU's records, published by the CPU itself in `init_cpu` (release)
/// and read by every CPU (acquire).
struct Slot {
    /// The PV-lock record ([`VcpuState64`] or [`VcpuState32`], by variant).
    lock: AtomicPtr<u8>,
    lock_ipa: AtomicU64,
    steal: AtomicPtr<StolenTime>,
    steal_ipa: AtomicU64,
}

impl Slot {
    const fn new() -> Self {
        Self {
            lock: AtomicPtr::new(ptr::null_mut()),
            lock_ipa: AtomicU64::new(0),
            steal: AtomicPtr::new(ptr::null_mut()),
            steal_ipa: AtomicU64::new(0),
        }
    }
}

/// The driver: what [`probe`] found, and every CPU's records.
///
/// For the variants where the guest allocates the record (openEuler,
/// Anolis) the records are part of the driver, one 64-byte aligned
/// [`VcpuState32`] per CPU, so the driver must stay where it is once a CPU
/// registered its record: keep it in a `static` (the runtime does).
pub struct PvDriver<P> {
    platform: P,
    info: PvInfo,
    slots: [Slot; MAX_CPUS],
    /// The guest-allocated records (openEuler, Anolis).
    own: [VcpuState32; MAX_CPUS],
}

/// A CPU's PV-lock record, by the width of its variant's `preempted`.
#[derive(Clone, Copy)]
enum LockRecord<'a> {
    Wide(&'a VcpuState64),
    Narrow(&'a VcpuState32),
}

impl<P: Conduit + SharedMemory> PvDriver<P> {
    /// Probes the hypervisor behind `platform` ([`probe`]).
    pub fn new(platform: P) -> Self {
        let info = probe(&platform);
        Self::with_info(platform, info)
    }

    /// A driver for services already probed.
    pub fn with_info(platform: P, info: PvInfo) -> Self {
        Self {
            platform,
            info,
            slots: [const { Slot::new() }; MAX_CPUS],
            own: [const { VcpuState32::new() }; MAX_CPUS],
        }
    }

    /// What the hypervisor offers.
    pub fn info(&self) -> &PvInfo {
        &self.info
    }

    /// The platform the driver calls through.
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// Sets up the records of `cpu`, which must be the calling CPU: each
    /// call asks for (or registers) the caller's own record. Call it once
    /// per CPU, before the CPU's flag or stolen time is read; again after
    /// [`release_cpu`](Self::release_cpu).
    ///
    /// - seed-v2 / seed-v3: PREEMPTED returns the IPA of the hypervisor's
    ///   record, which is mapped (normal write-back) if needed;
    /// - openEuler / Anolis: the driver's own record for `cpu` is zeroed and
    ///   its IPA registered with IPA_INIT / PREEMPTED(x1 = IPA);
    /// - PV time: PV_TIME_ST returns the IPA of the stolen-time record,
    ///   whose revision and attributes must be 0.
    ///
    /// A service that fails stays unused for `cpu` (never preempted, no
    /// stolen time); the other one is still set up.
    pub fn init_cpu(&self, cpu: usize) -> CpuInit {
        let Some(slot) = self.slots.get(cpu) else {
            let e = Err(InitError::CpuOutOfRange(cpu));
            return CpuInit {
                lock: e,
                steal_time: e,
            };
        };
        let lock = match self.info.lock {
            None => Ok(None),
            Some(variant) => self.init_lock(cpu, variant).map(|(ipa, record)| {
                slot.lock_ipa.store(ipa, Ordering::Relaxed);
                slot.lock.store(record.as_ptr(), Ordering::Release);
                Some(ipa)
            }),
        };
        let steal_time = if self.info.steal_time {
            self.init_steal_time().map(|(ipa, record)| {
                slot.steal_ipa.store(ipa, Ordering::Relaxed);
                slot.steal.store(record.as_ptr(), Ordering::Release);
                Some(ipa)
            })
        } else {
            Ok(None)
        };
        CpuInit { lock, steal_time }
    }

    fn init_lock(&self, cpu: usize, variant: Variant) -> Result<(u64, NonNull<u8>), InitError> {
        match variant {
            Variant::SeedV2 => self.hypervisor_record(seed_v2::PV_LOCK_PREEMPTED, 0),
            Variant::SeedV3 => self.hypervisor_record(seed_v3::PV_LOCK, seed_v3::ARG_PREEMPTED),
            Variant::OpenEuler => self.register_own(cpu, openeuler::PV_SCHED_IPA_INIT),
            Variant::Anolis => self.register_own(cpu, anolis::PV_LOCK_PREEMPTED),
        }
    }

    fn init_steal_time(&self) -> Result<(u64, NonNull<StolenTime>), InitError> {
        let (ipa, record) = self.hypervisor_record(pvtime::PV_TIME_ST, 0)?;
        let record = record.cast::<StolenTime>();
        // SAFETY: map_shared made the 64 bytes at `record` readable as
        // normal memory for good; StolenTime is 64 bytes of atomics, which
        // the hypervisor writes concurrently.
        let st = unsafe { record.as_ref() };
        let (revision, attributes) = (st.revision(), st.attributes());
        if revision != StolenTime::REVISION || attributes != StolenTime::ATTRIBUTES {
            return Err(InitError::UnknownStolenTimeRecord {
                ipa,
                revision,
                attributes,
            });
        }
        Ok((ipa, record))
    }

    /// Asks `call` (x1 = `arg`) for the IPA of a hypervisor-allocated
    /// 64-byte record and maps it.
    fn hypervisor_record(
        &self,
        call: FunctionId,
        arg: u64,
    ) -> Result<(u64, NonNull<u8>), InitError> {
        let ipa = self.platform.call(call, [arg, 0, 0])[0];
        if smccc::x0_to_ret(ipa) < 0 {
            return Err(InitError::Refused {
                call,
                code: smccc::x0_to_ret(ipa),
            });
        }
        if !ipa.is_multiple_of(pvlock::STATE_SIZE as u64) {
            // An SMC32 callee that sets only W0 returns an error code as a
            // negative W0 with the upper half clear (never aligned).
            let code = return_code(call, ipa);
            if !call.is_smc64() && ipa >> 32 == 0 && (smccc::INVALID_PARAMETER..0).contains(&code) {
                return Err(InitError::Refused { call, code });
            }
            return Err(InitError::Misaligned { call, ipa });
        }
        let record = self
            .platform
            .map_shared(ipa, pvlock::STATE_SIZE)
            .map_err(|reason| InitError::Unmapped { ipa, reason })?;
        Ok((ipa, record))
    }

    /// Zeroes the driver's record for `cpu` and registers its IPA with
    /// `call` (x1 = IPA).
    fn register_own(&self, cpu: usize, call: FunctionId) -> Result<(u64, NonNull<u8>), InitError> {
        let record = &self.own[cpu];
        record.reset();
        let address = NonNull::from(record).cast::<u8>();
        let ipa = self.platform.ipa_of(address.as_ptr());
        let code = return_code(call, self.platform.call(call, [ipa, 0, 0])[0]);
        if code != smccc::SUCCESS {
            return Err(InitError::Refused { call, code });
        }
        Ok((ipa, address))
    }

    /// Stops using `cpu`'s records (a CPU going offline); openEuler's
    /// record is unregistered with IPA_RELEASE. Returns that call's error,
    /// if it failed.
    pub fn release_cpu(&self, cpu: usize) -> Result<(), InitError> {
        let Some(slot) = self.slots.get(cpu) else {
            return Err(InitError::CpuOutOfRange(cpu));
        };
        slot.lock.store(ptr::null_mut(), Ordering::Release);
        slot.steal.store(ptr::null_mut(), Ordering::Release);
        if self.info.lock == Some(Variant::OpenEuler) {
            let call = openeuler::PV_SCHED_IPA_RELEASE;
            let code = return_code(call, self.platform.call(call, [0; 3])[0]);
            if code != smccc::SUCCESS {
                return Err(InitError::Refused { call, code });
            }
        }
        Ok(())
    }

    /// Whether `cpu` is preempted: its hypervisor-written flag is non-zero
    /// (one acquire load of the 64-bit or 32-bit field, by variant). False
    /// without PV-lock, and for a CPU whose record is not set up.
    pub fn vcpu_is_preempted(&self, cpu: usize) -> bool {
        self.with_lock_record(cpu, |r| r.is_preempted(), |r| r.is_preempted())
            .unwrap_or(false)
    }

    /// The time `cpu` was runnable but not running, in nanoseconds, as the
    /// hypervisor last wrote it (before the CPU last ran). 0 without PV
    /// time, and for a CPU whose record is not set up.
    pub fn steal_time(&self, cpu: usize) -> u64 {
        let Some(slot) = self.slots.get(cpu) else {
            return 0;
        };
        let record = slot.steal.load(Ordering::Acquire);
        if record.is_null() {
            return 0;
        }
        // SAFETY: published by init_cpu after mapping the 64-byte record;
        // never unmapped; atomics only.
        unsafe { &*record }.load_stolen_time(Ordering::Acquire)
    }

    /// The IPAs of `cpu`'s records: (PV-lock, stolen time).
    pub fn record_ipas(&self, cpu: usize) -> (Option<u64>, Option<u64>) {
        let Some(slot) = self.slots.get(cpu) else {
            return (None, None);
        };
        let ipa = |p: bool, ipa: &AtomicU64| p.then(|| ipa.load(Ordering::Relaxed));
        (
            ipa(!slot.lock.load(Ordering::Acquire).is_null(), &slot.lock_ipa),
            ipa(
                !slot.steal.load(Ordering::Acquire).is_null(),
                &slot.steal_ipa,
            ),
        )
    }

    /// The calling CPU `cpu` took a lock: its PV-lock record's `lock_count`
    /// goes up by one (`pvlock_abi::pvlock`, "Extension: the lock
    /// count"), a hint the hypervisor may use to prefer a preempted lock
    /// holder. Only the CPU that owns the record may call this. Nothing
    /// happens without a PV-lock record for `cpu`.
    pub fn lock_acquired(&self, cpu: usize) {
        self.with_lock_record(cpu, |r| r.lock_acquired(), |r| r.lock_acquired());
    }

    /// The calling CPU `cpu` dropped a lock: `lock_count` goes down by one
    /// (saturating at 0). See [`lock_acquired`](Self::lock_acquired).
    pub fn lock_released(&self, cpu: usize) {
        self.with_lock_record(cpu, |r| r.lock_released(), |r| r.lock_released());
    }

    /// The `lock_count` in `cpu`'s PV-lock record (locks it holds, as the
    /// guest maintains it); 0 without a record. For diagnostics and tests.
    pub fn lock_count(&self, cpu: usize) -> u32 {
        self.with_lock_record(cpu, |r| r.lock_count_hint(), |r| r.lock_count_hint())
            .unwrap_or(0)
    }

    /// `cpu`'s `lock_count` cell, for a caller that keeps it (the
    /// runtime's per-CPU fast path, `rt::pv::lock_acquired`); `None`
    /// without a PV-lock record. Valid as long as the driver: records are
    /// never unmapped.
    pub fn lock_count_cell(&self, cpu: usize) -> Option<&AtomicU32> {
        Some(match self.lock_record(cpu)? {
            LockRecord::Wide(r) => r.lock_count_cell(),
            LockRecord::Narrow(r) => r.lock_count_cell(),
        })
    }

    /// Runs `wide` or `narrow` on `cpu`'s PV-lock record, by the variant's
    /// record type; `None` when `cpu` has none.
    fn with_lock_record<R>(
        &self,
        cpu: usize,
        wide: impl FnOnce(&VcpuState64) -> R,
        narrow: impl FnOnce(&VcpuState32) -> R,
    ) -> Option<R> {
        Some(match self.lock_record(cpu)? {
            LockRecord::Wide(r) => wide(r),
            LockRecord::Narrow(r) => narrow(r),
        })
    }

    /// `cpu`'s PV-lock record as its variant's type; `None` when `cpu` has
    /// none.
    fn lock_record(&self, cpu: usize) -> Option<LockRecord<'_>> {
        let record = self.slots.get(cpu)?.lock.load(Ordering::Acquire);
        if record.is_null() {
            return None;
        }
        Some(match self.info.lock?.preempted_width() {
            // SAFETY: a non-null pointer was published by init_cpu after
            // mapping (or owning) a 64-byte aligned record of the variant's
            // type; records are never unmapped, and hold only atomics.
            8 => LockRecord::Wide(unsafe { &*record.cast::<VcpuState64>() }),
            // SAFETY: as above, for the 32-bit variants' record.
            _ => LockRecord::Narrow(unsafe { &*record.cast::<VcpuState32>() }),
        })
    }

    /// The record the driver allocated for `cpu` under openEuler or Anolis
    /// (the hypervisor writes it once registered); `None` for the other
    /// variants. For diagnostics and tests.
    pub fn guest_record(&self, cpu: usize) -> Option<&VcpuState32> {
        match self.info.lock {
            Some(v) if v.guest_allocates() => self.own.get(cpu),
            _ => None,
        }
    }

    /// Wakes vCPU `vcpu` (the hypervisor's vCPU index) from a WFI-based
    /// wait, for a lock that hands itself to the vCPU it wakes: with
    /// PV_SCHED_KICK_LEND where offered, which also runs the woken vCPU
    /// at once for a short while if it has to wait for a pCPU
    /// (`pvlock_abi::directed_yield`), else with the lock variant's
    /// KICK_CPU (openEuler, Anolis), which only wakes; does nothing when
    /// no kick is offered.
    pub fn kick(&self, vcpu: u64) -> Kick {
        let call = match self.info.lock {
            Some(Variant::OpenEuler | Variant::Anolis) if self.info.kick && self.info.kick_lend => {
                directed_yield::PV_SCHED_KICK_LEND
            }
            Some(Variant::OpenEuler) if self.info.kick => openeuler::PV_SCHED_KICK_CPU,
            Some(Variant::Anolis) if self.info.kick => anolis::PV_QSPINLOCK_KICK_CPU,
            _ => return Kick::Unavailable,
        };
        match return_code(call, self.platform.call(call, [vcpu, 0, 0])[0]) {
            smccc::SUCCESS => Kick::Kicked,
            code => Kick::Refused(code),
        }
    }

    /// Asks the hypervisor to give the rest of the caller's time slice to
    /// vCPU `vcpu` (the hypervisor's vCPU index), with PV_SCHED_YIELD_TO
    /// (`pvlock_abi::directed_yield`): what a lock waiter does when the
    /// vCPU it waits for is preempted. Sends nothing, and answers
    /// [`YieldResult::Unavailable`], when the call is not offered.
    pub fn yield_to(&self, vcpu: u64) -> YieldResult {
        if !self.info.directed_yield {
            return YieldResult::Unavailable;
        }
        let x0 = self.platform.call(PV_SCHED_YIELD_TO, [vcpu, 0, 0])[0];
        YieldResult::from_code(return_code(PV_SCHED_YIELD_TO, x0))
    }
}
