//! Locks for guests of a hypervisor that time-slices vCPUs:
//!
//! - [`QueuedLock`]: a fair queued (MCS / qspinlock-style) lock whose
//!   waiters yield to a preempted holder, sleep in WFI when the vCPU ahead
//!   of them is preempted or when they waited long, and are kicked awake
//!   by the unlock that makes their turn come (module `queued`);
//! - [`TicketLock`] with a [`Paravirt`] backend: a fair ticket lock whose
//!   waiters hand their time slice to the vCPU whose turn it is when the
//!   hypervisor has preempted it (described below);
//! - [`TicketLock`] with [`NoPv`]: the plain ticket lock, the baseline.
//!
//! # The problem
//!
//! A ticket lock serves waiters strictly in the order they arrived. Under
//! a hypervisor that runs more vCPUs than it has pCPUs, the vCPU whose turn
//! it is may not be running: the holder was preempted inside its critical
//! section (lock-holder preemption), or the lock was passed to a waiter
//! that is preempted (lock-waiter preemption). Every other waiter then
//! spins until the hypervisor happens to run that vCPU again, a time slice
//! or more later, and the guest's throughput collapses.
//!
//! # What the PV lock does
//!
//! [`TicketLock`] with a [`Paravirt`] backend (the runtime's is
//! `rt::pv::RtParavirt`, over [`crate::pv::PvDriver`]):
//!
//! - each ticket's owner is recorded in the lock, so a waiter can always
//!   name the vCPU whose turn it is: the holder, or the waiter the lock was
//!   just passed to ([`TicketLock::holder`]);
//! - a waiter spins; every [`spin_limit`](TicketLock::spin_limit) spins
//!   (default [`DEFAULT_SPIN_LIMIT`]) it looks at that vCPU's "preempted"
//!   flag ([`Paravirt::vcpu_is_preempted`]) and, if it is set, gives it the
//!   rest of its own time slice ([`Paravirt::yield_to`]:
//!   PV_SCHED_YIELD_TO, `pvlock_abi::directed_yield`); otherwise it keeps
//!   spinning ([`Paravirt::relax`] between two looks);
//! - the holder's PV-lock record counts the locks it holds
//!   ([`Paravirt::lock_acquired`] / [`Paravirt::lock_released`], the
//!   record's `lock_count` extension in `pvlock_abi::pvlock`), a hint the
//!   hypervisor's own directed yield (on a trapped WFE) can use.
//!
//! Waiters never ask the hypervisor about a vCPU that is running, so
//! without overcommit the PV lock costs one flag load per
//! `spin_limit` spins and nothing else. Mutual exclusion and FIFO order
//! rest on the two ticket counters alone: the backend only gives hints, and
//! a backend that answers nonsense cannot break the lock.
//!
//! [`TicketLock::new`] makes the baseline, `TicketLock<T, NoPv>`: the same
//! code with every paravirtual step compiled out ([`Paravirt::ENABLED`]).
//!
//! ```ignore
//! static SHARED: TicketLock<State, RtParavirt> =
//!     TicketLock::with_paravirt(State::new(), RtParavirt);
//! let mut stats = WaitStats::default();
//! SHARED.lock_counted(&mut stats).update();   // unlocked when the guard drops
//! ```

mod queued;
#[cfg(test)]
pub(crate) mod tests;

pub use queued::{
    ANON_HOLDER, DEFAULT_HALT_AFTER, HEAD_HALTED, LEVELS, QueuedLock, QueuedLockGuard,
};

use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use core::ops::{AddAssign, Deref, DerefMut};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::pv::{Kick, MAX_CPUS, YieldResult};

/// One pause in a spin-wait loop: the YIELD hint on arm64, as Linux's
/// `cpu_relax()`, `spin_loop` elsewhere; `boot`'s, which el2's and the
/// runtime's spin locks use too (`boot::sync` says why YIELD matters
/// under QEMU's TCG).
pub use boot::sync::cpu_relax;

/// Spins between two looks at the awaited vCPU's "preempted" flag, unless
/// [`TicketLock::set_spin_limit`] says otherwise. A look is one load of a
/// shared record, so it can be frequent; the spins in between keep a
/// waiter whose holder is about to release from making a hypercall.
pub const DEFAULT_SPIN_LIMIT: u32 = 128;

/// Owner slots in a lock: one per ticket that can be outstanding at once
/// when every CPU waits (a CPU waits for one ticket at a time).
const OWNER_SLOTS: usize = MAX_CPUS;

/// What a paravirtual lock asks of the platform. Every method is a hint:
/// the lock stays correct (exclusive and FIFO) whatever they return.
pub trait Paravirt {
    /// Whether the lock uses the backend at all. `false` (only [`NoPv`])
    /// compiles every paravirtual step out: a plain ticket lock.
    const ENABLED: bool = true;

    /// The calling CPU's number, the one [`vcpu_is_preempted`] and
    /// [`yield_to`] take (the runtime's logical CPU number).
    ///
    /// [`vcpu_is_preempted`]: Self::vcpu_is_preempted
    /// [`yield_to`]: Self::yield_to
    fn this_cpu(&self) -> usize;

    /// Whether the hypervisor has taken `cpu` off its pCPU while it still
    /// wants to run (the PV-lock "preempted" flag).
    fn vcpu_is_preempted(&self, cpu: usize) -> bool;

    /// Asks the hypervisor to give the rest of the caller's time slice to
    /// `cpu` (directed yield). Returns once the caller runs again.
    fn yield_to(&self, cpu: usize) -> YieldResult;

    /// The calling CPU now holds one more lock.
    fn lock_acquired(&self) {}

    /// The calling CPU now holds one lock fewer.
    fn lock_released(&self) {}

    /// What a waiter does between two reads of the lock: [`cpu_relax`].
    fn relax(&self) {
        cpu_relax();
    }

    /// Whether [`wait`](Self::wait) sleeps until [`kick`](Self::kick)
    /// wakes it (the hypervisor offers a kick call). Without it the queued
    /// lock's waiters never sleep.
    fn can_halt(&self) -> bool {
        false
    }

    /// Sleeps until another CPU kicks this one, or for a bounded time; may
    /// return early for any reason (callers look at the lock again).
    fn wait(&self) {}

    /// Wakes `cpu` from [`wait`](Self::wait), or makes its next wait return
    /// at once.
    fn kick(&self, _cpu: usize) -> Kick {
        Kick::Unavailable
    }
}

impl<P: Paravirt + ?Sized> Paravirt for &P {
    const ENABLED: bool = P::ENABLED;

    fn this_cpu(&self) -> usize {
        (**self).this_cpu()
    }

    fn vcpu_is_preempted(&self, cpu: usize) -> bool {
        (**self).vcpu_is_preempted(cpu)
    }

    fn yield_to(&self, cpu: usize) -> YieldResult {
        (**self).yield_to(cpu)
    }

    fn lock_acquired(&self) {
        (**self).lock_acquired();
    }

    fn lock_released(&self) {
        (**self).lock_released();
    }

    fn relax(&self) {
        (**self).relax();
    }

    fn can_halt(&self) -> bool {
        (**self).can_halt()
    }

    fn wait(&self) {
        (**self).wait();
    }

    fn kick(&self, cpu: usize) -> Kick {
        (**self).kick(cpu)
    }
}

/// No paravirtual services: [`TicketLock`] is then a plain ticket lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoPv;

impl Paravirt for NoPv {
    const ENABLED: bool = false;

    fn this_cpu(&self) -> usize {
        0
    }

    fn vcpu_is_preempted(&self, _cpu: usize) -> bool {
        false
    }

    fn yield_to(&self, _cpu: usize) -> YieldResult {
        YieldResult::Unavailable
    }
}

/// What acquisitions cost a CPU, counted by [`TicketLock::lock_counted`]
/// (add them up with `+=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Locks taken.
    pub acquisitions: u64,
    /// ... of which had to wait for another CPU.
    pub contended: u64,
    /// Reads of the lock that found it still busy.
    pub spins: u64,
    /// Looks at the vCPU whose turn it is, one per `spin_limit` spins (PV
    /// only).
    pub looks: u64,
    /// ... that could not name that vCPU (it had not yet recorded its
    /// ticket).
    pub owner_unknown: u64,
    /// ... that found it preempted.
    pub saw_preempted: u64,
    /// Directed-yield calls sent to the hypervisor.
    pub yield_calls: u64,
    /// ... that the hypervisor answered YIELDED.
    pub yielded: u64,
    /// ... that it answered with neither YIELDED nor NOT_YIELDED (an
    /// unknown vCPU, the caller itself, or an undocumented code): the
    /// backend names CPUs differently from the hypervisor.
    pub yield_refused: u64,
    /// Sleeps until a kick (queued lock only).
    pub halts: u64,
    /// Locks taken past waiters whose turn it was but who did not run
    /// (queued lock only).
    pub steals: u64,
}

impl WaitStats {
    /// Counts a directed-yield answer.
    fn count_yield(&mut self, answer: YieldResult) {
        self.yield_calls += u64::from(answer.was_sent());
        match answer {
            YieldResult::Yielded => self.yielded += 1,
            YieldResult::NotYielded | YieldResult::Unavailable => {}
            YieldResult::UnknownVcpu | YieldResult::ToSelf | YieldResult::Refused(_) => {
                self.yield_refused += 1
            }
        }
    }
}

impl AddAssign for WaitStats {
    fn add_assign(&mut self, other: Self) {
        self.acquisitions += other.acquisitions;
        self.contended += other.contended;
        self.spins += other.spins;
        self.looks += other.looks;
        self.owner_unknown += other.owner_unknown;
        self.saw_preempted += other.saw_preempted;
        self.yield_calls += other.yield_calls;
        self.yielded += other.yielded;
        self.yield_refused += other.yield_refused;
        self.halts += other.halts;
        self.steals += other.steals;
    }
}

/// The ticket counters and, for the PV lock, who owns which ticket.
#[repr(C, align(64))]
struct Tickets {
    /// The next ticket to hand out.
    next: AtomicU32,
    /// The ticket whose owner may hold the lock.
    serving: AtomicU32,
    /// Spins between looks at the awaited vCPU (at least 1).
    spin_limit: AtomicU32,
    /// Slot `t % OWNER_SLOTS`: `t << 32 | (cpu + 1)` for the CPU that took
    /// ticket `t`; low half 0: nobody yet. The ticket in the high half
    /// tells a current entry from a stale one.
    owners: [AtomicU64; OWNER_SLOTS],
}

impl Tickets {
    const fn new() -> Self {
        Self {
            next: AtomicU32::new(0),
            serving: AtomicU32::new(0),
            spin_limit: AtomicU32::new(DEFAULT_SPIN_LIMIT),
            owners: [const { AtomicU64::new(0) }; OWNER_SLOTS],
        }
    }

    fn slot(&self, ticket: u32) -> &AtomicU64 {
        // 2^32 is a multiple of OWNER_SLOTS, so slots survive wrapping.
        &self.owners[ticket as usize % OWNER_SLOTS]
    }

    /// Records that `cpu` took `ticket` (a hint: relaxed).
    fn set_owner(&self, ticket: u32, cpu: usize) {
        if let Ok(cpu) = u32::try_from(cpu)
            && let Some(tag) = cpu.checked_add(1)
        {
            self.slot(ticket)
                .store(u64::from(ticket) << 32 | u64::from(tag), Ordering::Relaxed);
        }
    }

    /// The CPU that took `ticket`, if its entry is there yet (and not yet
    /// overwritten by a ticket `OWNER_SLOTS` later).
    fn owner_of(&self, ticket: u32) -> Option<usize> {
        let entry = self.slot(ticket).load(Ordering::Relaxed);
        let (t, tag) = ((entry >> 32) as u32, entry as u32);
        (t == ticket && tag != 0).then(|| (tag - 1) as usize)
    }
}

/// A fair (FIFO) spin lock around a `T`, with paravirtual waiting when `P`
/// is a real [`Paravirt`] backend (see the module documentation) and
/// without when it is [`NoPv`].
///
/// Like any spin lock it is not reentrant: a CPU that takes it again while
/// it holds it (for instance from an interrupt handler) waits for itself
/// forever; take it with interrupts masked if a handler takes it too.
pub struct TicketLock<T: ?Sized, P = NoPv> {
    tickets: Tickets,
    pv: P,
    data: UnsafeCell<T>,
}

// SAFETY: the ticket counters give one CPU at a time access to `data`
// (through a guard), which is all a `&TicketLock` shares; `T: Send` since
// the holder may be any CPU. The backend is shared as `&P`.
unsafe impl<T: ?Sized + Send, P: Sync> Sync for TicketLock<T, P> {}

impl<T> TicketLock<T, NoPv> {
    /// A plain ticket lock (no paravirtual services), unlocked.
    pub const fn new(data: T) -> Self {
        Self::with_paravirt(data, NoPv)
    }
}

impl<T, P> TicketLock<T, P> {
    /// A ticket lock that waits with the help of `pv`, unlocked.
    pub const fn with_paravirt(data: T, pv: P) -> Self {
        Self {
            tickets: Tickets::new(),
            pv,
            data: UnsafeCell::new(data),
        }
    }

    /// The protected value, consuming the lock.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized, P: Paravirt> TicketLock<T, P> {
    /// Takes the lock, waiting in FIFO order.
    pub fn lock(&self) -> TicketLockGuard<'_, T, P> {
        self.lock_counted(&mut WaitStats::default())
    }

    /// Takes the lock, waiting in FIFO order, and adds what the wait cost
    /// to `stats`.
    pub fn lock_counted(&self, stats: &mut WaitStats) -> TicketLockGuard<'_, T, P> {
        let t = &self.tickets;
        let ticket = t.next.fetch_add(1, Ordering::Relaxed);
        let me = if P::ENABLED {
            let me = self.pv.this_cpu();
            t.set_owner(ticket, me);
            me
        } else {
            0
        };
        let limit = t.spin_limit.load(Ordering::Relaxed).max(1);
        let mut waited = false;
        let mut since_look = 0u32;
        loop {
            // Acquire: pairs with the previous holder's release in unlock.
            let serving = t.serving.load(Ordering::Acquire);
            if serving == ticket {
                break;
            }
            waited = true;
            stats.spins += 1;
            if P::ENABLED {
                since_look += 1;
                if since_look >= limit {
                    since_look = 0;
                    self.help_awaited(serving, me, stats);
                }
            }
            self.pv.relax();
        }
        stats.acquisitions += 1;
        stats.contended += u64::from(waited);
        self.acquired()
    }

    /// Takes the lock if nobody holds it or waits for it.
    pub fn try_lock(&self) -> Option<TicketLockGuard<'_, T, P>> {
        let t = &self.tickets;
        // Acquire: pairs with the last holder's release in unlock. Taking
        // ticket `serving` is then taking the lock.
        let serving = t.serving.load(Ordering::Acquire);
        t.next
            .compare_exchange(
                serving,
                serving.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .ok()?;
        if P::ENABLED {
            t.set_owner(serving, self.pv.this_cpu());
        }
        Some(self.acquired())
    }

    fn acquired(&self) -> TicketLockGuard<'_, T, P> {
        if P::ENABLED {
            self.pv.lock_acquired();
        }
        TicketLockGuard {
            lock: self,
            _per_cpu: PhantomData,
        }
    }

    /// A waiter's look at the vCPU whose ticket is being served: if the
    /// hypervisor preempted it, give it this vCPU's time slice.
    fn help_awaited(&self, serving: u32, me: usize, stats: &mut WaitStats) {
        stats.looks += 1;
        let Some(cpu) = self.tickets.owner_of(serving) else {
            stats.owner_unknown += 1;
            return;
        };
        if cpu == me || !self.pv.vcpu_is_preempted(cpu) {
            return;
        }
        // Still its turn? It may have released and been preempted since.
        if self.tickets.serving.load(Ordering::Relaxed) != serving {
            return;
        }
        stats.saw_preempted += 1;
        stats.count_yield(self.pv.yield_to(cpu));
    }

    fn unlock(&self) {
        let t = &self.tickets;
        // Only the holder writes `serving`.
        let next = t.serving.load(Ordering::Relaxed).wrapping_add(1);
        t.serving.store(next, Ordering::Release);
        if P::ENABLED {
            self.pv.lock_released();
        }
    }

    /// Whether some CPU holds the lock (a snapshot).
    pub fn is_locked(&self) -> bool {
        self.queued() != 0
    }

    /// Tickets taken and not yet done with: the holder and its waiters (a
    /// snapshot).
    pub fn queued(&self) -> u32 {
        let t = &self.tickets;
        let serving = t.serving.load(Ordering::Relaxed);
        t.next.load(Ordering::Relaxed).wrapping_sub(serving)
    }

    /// The CPU whose turn it is, if the lock is taken and the PV lock knows
    /// (a snapshot): the holder, or the waiter the lock was just passed to
    /// and that has not noticed yet. Always `None` for a plain lock.
    pub fn holder(&self) -> Option<usize> {
        if !P::ENABLED || !self.is_locked() {
            return None;
        }
        let t = &self.tickets;
        t.owner_of(t.serving.load(Ordering::Relaxed))
    }

    /// Spins between two looks at the awaited vCPU's flag (PV lock).
    pub fn spin_limit(&self) -> u32 {
        self.tickets.spin_limit.load(Ordering::Relaxed)
    }

    /// Sets the spins between two looks (at least 1); takes effect for
    /// waits that start afterwards.
    pub fn set_spin_limit(&self, spins: u32) {
        self.tickets
            .spin_limit
            .store(spins.max(1), Ordering::Relaxed);
    }

    /// The paravirtual backend.
    pub fn paravirt(&self) -> &P {
        &self.pv
    }

    /// The protected value, through exclusive access to the lock.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T: ?Sized, P: Paravirt> fmt::Debug for TicketLock<T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TicketLock")
            .field("queued", &self.queued())
            .field("holder", &self.holder())
            .field("paravirt", &P::ENABLED)
            .finish_non_exhaustive()
    }
}

/// Access to a [`TicketLock`]'s value; dropping it releases the lock. It
/// stays on the CPU that took the lock (not `Send`): the lock count it
/// keeps is that CPU's.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct TicketLockGuard<'a, T: ?Sized, P: Paravirt> {
    lock: &'a TicketLock<T, P>,
    _per_cpu: PhantomData<*const ()>,
}

// SAFETY: a shared guard only gives `&T`, like `&T` itself.
unsafe impl<T: ?Sized + Sync, P: Paravirt + Sync> Sync for TicketLockGuard<'_, T, P> {}

impl<T: ?Sized, P: Paravirt> Deref for TicketLockGuard<'_, T, P> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while its CPU holds the lock.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized, P: Paravirt> DerefMut for TicketLockGuard<'_, T, P> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in deref, and the guard is borrowed mutably.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized, P: Paravirt> Drop for TicketLockGuard<'_, T, P> {
    fn drop(&mut self) {
        self.lock.unlock();
    }
}

impl<T: ?Sized + fmt::Debug, P: Paravirt> fmt::Debug for TicketLockGuard<'_, T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}
