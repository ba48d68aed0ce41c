//! A fair queued spin lock with paravirtual waiting, in the style of Linux's
//! qspinlock and its paravirt slow path (`kernel/locking/qspinlock_paravirt.h`),
//! written for a guest whose vCPUs a hypervisor time-slices.
//!
//! # Layout
//!
//! One 64-bit lock word ([`QueuedLock`]) holds:
//!
//! | bits | meaning |
//! |---|---|
//! | 0..16 | the holder: its CPU number + 1, [`ANON_HOLDER`] for a CPU without a number, 0 when free |
//! | 16 | [`HEAD_HALTED`]: the waiter next in line (the pending one, else the queue's head) sleeps; the unlocker must kick it |
//! | 17 | [`PENDING`]: one waiter spins on the word without a node and takes the lock next |
//! | 32..64 | the queue's tail: the tag of the last waiter's node, 0 when nobody waits |
//!
//! The first CPU to find the lock held while nobody waits sets
//! [`PENDING`] and spins on the lock word itself (qspinlock's pending
//! bit): two CPUs that share a lock, the common case, never touch a queue
//! node. Later waiters queue on per-CPU nodes (MCS): each spins on its
//! own node until its predecessor makes it the head, and only the head
//! spins on the lock word, waiting for the holder and the pending waiter
//! to be gone, so a release disturbs one or two waiters, and waiters are
//! served in the order they came (the pending one first, then the
//! queue). A CPU has [`LEVELS`] nodes, one per wait that can be in
//! progress at once on it (a thread, and handlers that interrupt it while
//! it waits); a CPU beyond them, or beyond [`MAX_CPUS`], takes the lock
//! without queuing (it competes with the pending waiter and the head;
//! rare).
//!
//! # Paravirtual waiting
//!
//! Every [`spin_limit`](QueuedLock::spin_limit) spins a waiter looks at the
//! vCPU it waits for ([`Paravirt`]):
//!
//! - the pending waiter, and the head while nobody is pending, wait for the
//!   **holder**: if the hypervisor preempted it, they give it the rest of
//!   their own time slice ([`Paravirt::yield_to`]);
//! - the head behind a pending waiter waits for that waiter as for a
//!   predecessor (below), except that it yields to it when the lock is
//!   already free, since it then takes the lock the moment it runs;
//! - a waiter behind the head waits for its **predecessor** in the queue:
//!   if that vCPU is preempted, spinning is pointless (even once it runs it
//!   must first get the lock), so the waiter sleeps ([`Paravirt::wait`]);
//! - any waiter that looked [`halt_after`](QueuedLock::halt_after) times
//!   without getting anywhere sleeps too, freeing its pCPU for a sibling;
//! - a CPU that comes to a lock others wait for takes it past them if the
//!   one whose turn it is does not run: the lock is free and the pending
//!   waiter is preempted, or it stays free for `spin_limit` reads (lock
//!   stealing, as Linux's PV qspinlock allows). In strict FIFO order the
//!   lock would sit idle until the hypervisor runs that vCPU again; under
//!   overcommit that is most hand-offs to a waiter that was descheduled.
//!   A waiter that runs takes a free lock at once, so it is not starved,
//!   and a CPU steals at most every other contended acquisition, so the
//!   queue keeps moving while the one whose turn it is stays away.
//!
//! A sleeping waiter is woken with [`Paravirt::kick`] by whoever makes its
//! wait end: a sleeping pending waiter or head by the unlocker (which sees
//! [`HEAD_HALTED`]), a sleeping waiter behind the head by its
//! predecessor's unlock, once the predecessor took the lock and made it
//! the head, and a head sleeping behind the pending waiter by that
//! waiter's unlock, once it took the lock (the word names the queue's
//! head for it). Nobody kicks a waiter
//! that could not take the lock at once, so a kicked vCPU never runs only
//! to spin. The hypervisor latches a kick sent before the waiter's WFI
//! (docs/abi.md §3), and `wait` may return early (the backend bounds it): every
//! sleep is followed by a fresh look at the lock.
//!
//! Mutual exclusion, and FIFO order among the waiters, rest on the lock
//! word and the queue alone; the backend only gives hints and wake-ups,
//! and a backend that answers nonsense cannot break the lock (a wrong
//! `kick` only costs a sleeper the backend's wait bound; a wrong
//! "preempted" only lets a newcomer steal).

use core::cell::UnsafeCell;
use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use super::{DEFAULT_SPIN_LIMIT, Paravirt, WaitStats};
use crate::pv::{Kick, MAX_CPUS, YieldResult};

#[cfg(test)]
mod tests;

/// Nodes per CPU: one per wait that can be in progress on a CPU at once
/// (task, and interrupt handlers nested over it; Linux uses 4 too).
pub const LEVELS: usize = 4;

/// Looks at the awaited vCPU after which a waiter sleeps even though that
/// vCPU runs, unless [`QueuedLock::set_halt_after`] says otherwise: 64
/// looks of [`DEFAULT_SPIN_LIMIT`] spins, 8,192 spins (Linux's PV
/// qspinlock spins 32,768 before it halts). A sleep and its kick cost two
/// exits and a wake-up, which pays off only when a sibling wants the pCPU;
/// with 16 looks a waiter behind a holder that merely ran slowly (a host
/// hiccup under parallel emulation) slept hundreds of times a run even at
/// 1x, and the multi-threaded lockbench at 2x ran at less than half of
/// its speed with 64, which does as well as 16 under icount at 2x
/// (docs/benchmarks.md, "Reading the figures").
pub const DEFAULT_HALT_AFTER: u32 = 64;

const HOLDER_MASK: u64 = 0xffff;
/// The holder field for a CPU whose number does not fit (no yield to it).
pub const ANON_HOLDER: u64 = HOLDER_MASK;
/// The waiter next in line sleeps: the unlocker kicks the CPU in
/// `halted_head`.
pub const HEAD_HALTED: u64 = 1 << 16;
/// A waiter without a node spins on the word and takes the lock next.
pub const PENDING: u64 = 1 << 17;
/// How often a contended lock tries to become the pending waiter (or to
/// take a lock that came free meanwhile) before it queues.
const PENDING_TRIES: u32 = 4;
const TAIL_SHIFT: u32 = 32;
const TAIL_MASK: u64 = 0xffff_ffff << TAIL_SHIFT;

/// What a contended lock found when it tried the pending bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contended {
    /// The lock came free and nobody waited: taken.
    Taken,
    /// We are the pending waiter.
    Pending,
    /// Others wait: queue.
    Queue,
}

/// One queued wait.
#[repr(C, align(64))]
struct Node {
    /// Set by the predecessor when this node becomes the queue head.
    head: AtomicU32,
    /// The node's CPU sleeps (or is about to) in [`Paravirt::wait`].
    halted: AtomicU32,
    /// The successor's tag, 0 until it links itself.
    next: AtomicU32,
}

impl Node {
    const fn new() -> Self {
        Self {
            head: AtomicU32::new(0),
            halted: AtomicU32::new(0),
            next: AtomicU32::new(0),
        }
    }
}

/// Every CPU's nodes, shared by all queued locks (a CPU waits for one lock
/// per level at a time).
static NODES: [[Node; LEVELS]; MAX_CPUS] = [const { [const { Node::new() }; LEVELS] }; MAX_CPUS];

/// Each CPU's waits in progress: the next free level. Only its own CPU
/// touches it, and nested waits (interrupts) leave it as they found it, so
/// a load and a store update it: a handler that runs between the two takes
/// and gives back the same level before the interrupted wait uses it.
static DEPTH: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

/// Each CPU's last contended acquisition was a steal, so its next one
/// queues ([`QueuedLock::steal_in_turn`]). Only its own CPU touches it.
static STOLE_LAST: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// A node's tag in the tail field and in `next`: never 0.
fn tag(cpu: usize, level: usize) -> u32 {
    // cpu < MAX_CPUS and level < LEVELS: small.
    (cpu * LEVELS + level + 1) as u32
}

/// The node a (non-zero) tag names, and its CPU. Tags only come from
/// [`tag`], so they are in range.
fn node_of(tag: u32) -> (&'static Node, usize) {
    let index = tag as usize - 1;
    let (cpu, level) = (index / LEVELS, index % LEVELS);
    (&NODES[cpu][level], cpu)
}

/// The holder field for `cpu`.
fn holder_field(cpu: usize) -> u64 {
    match u64::try_from(cpu) {
        Ok(c) if c < ANON_HOLDER - 1 => c + 1,
        _ => ANON_HOLDER,
    }
}

/// The CPU a holder field names, if it names one.
fn holder_cpu(word: u64) -> Option<usize> {
    match word & HOLDER_MASK {
        0 | ANON_HOLDER => None,
        field => Some(field as usize - 1),
    }
}

/// A CPU's queue node for one wait; gives the level back when dropped.
struct Slot {
    cpu: usize,
    level: usize,
}

impl Slot {
    /// The calling CPU's next free node, if it has one.
    fn take(cpu: usize) -> Option<Self> {
        let depth = DEPTH.get(cpu)?;
        let level = depth.load(Ordering::Relaxed);
        if level as usize >= LEVELS {
            return None;
        }
        depth.store(level + 1, Ordering::Relaxed);
        Some(Self {
            cpu,
            level: level as usize,
        })
    }

    fn node(&self) -> &'static Node {
        &NODES[self.cpu][self.level]
    }

    fn tag(&self) -> u32 {
        tag(self.cpu, self.level)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Only this CPU writes its depth, and nested waits gave theirs
        // back already (see DEPTH).
        let depth = &DEPTH[self.cpu];
        depth.store(
            depth.load(Ordering::Relaxed).saturating_sub(1),
            Ordering::Relaxed,
        );
    }
}

/// The lock word and its settings, on a cache line of their own.
#[repr(C, align(64))]
struct Word {
    state: AtomicU64,
    /// CPU number + 1 of the sleeping head (valid while HEAD_HALTED).
    halted_head: AtomicU32,
    /// CPU number + 1 of the pending waiter (a hint while PENDING).
    pending_cpu: AtomicU32,
    /// The tag of the queue's head node while a waiter is pending, 0
    /// otherwise: the pending waiter that takes the lock kicks it if it
    /// sleeps.
    queue_head: AtomicU32,
    spin_limit: AtomicU32,
    halt_after: AtomicU32,
    /// Whether newcomers may steal the lock (the default).
    steal: AtomicBool,
    /// Kicks the unlockers sent, and how many the hypervisor refused.
    kicks: AtomicU64,
    kicks_refused: AtomicU64,
}

/// A fair (FIFO, except for steals past a waiter that does not run)
/// queued spin lock around a `T`, waiting paravirtually with
/// the backend `P` (see the module documentation).
///
/// `P::this_cpu` must give each CPU that takes the lock its own number
/// (the nodes are per CPU), and a CPU must not take a queued lock it holds
/// (not reentrant); take it with interrupts masked if a handler takes it
/// too.
pub struct QueuedLock<T: ?Sized, P> {
    word: Word,
    pv: P,
    data: UnsafeCell<T>,
}

// SAFETY: the lock word gives one CPU at a time access to `data` (through
// a guard), which is all a `&QueuedLock` shares; `T: Send` since the holder
// may be any CPU. The backend is shared as `&P`.
unsafe impl<T: ?Sized + Send, P: Sync> Sync for QueuedLock<T, P> {}

impl<T, P> QueuedLock<T, P> {
    /// An unlocked queued lock that waits with the help of `pv`.
    pub const fn with_paravirt(data: T, pv: P) -> Self {
        Self {
            word: Word {
                state: AtomicU64::new(0),
                halted_head: AtomicU32::new(0),
                pending_cpu: AtomicU32::new(0),
                queue_head: AtomicU32::new(0),
                spin_limit: AtomicU32::new(DEFAULT_SPIN_LIMIT),
                halt_after: AtomicU32::new(DEFAULT_HALT_AFTER),
                steal: AtomicBool::new(true),
                kicks: AtomicU64::new(0),
                kicks_refused: AtomicU64::new(0),
            },
            pv,
            data: UnsafeCell::new(data),
        }
    }

    /// The protected value, consuming the lock.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized, P: Paravirt> QueuedLock<T, P> {
    /// Takes the lock, waiting in FIFO order.
    pub fn lock(&self) -> QueuedLockGuard<'_, T, P> {
        self.lock_counted(&mut WaitStats::default())
    }

    /// Takes the lock, waiting in FIFO order, and adds what the wait cost
    /// to `stats`.
    pub fn lock_counted(&self, stats: &mut WaitStats) -> QueuedLockGuard<'_, T, P> {
        let me = self.pv.this_cpu();
        // Acquire: pairs with the previous holder's release in unlock.
        if self
            .word
            .state
            .compare_exchange(0, holder_field(me), Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended(me, stats);
        }
        stats.acquisitions += 1;
        self.acquired()
    }

    /// The lock was taken or waited for: queue (or, without a free node,
    /// compete directly). Out of line, so that the uncontended path above
    /// stays a compare-and-swap in a small frame.
    #[cold]
    #[inline(never)]
    fn lock_contended(&self, me: usize, stats: &mut WaitStats) {
        stats.contended += 1;
        match self.try_pending(me) {
            Contended::Taken => return,
            Contended::Pending => return self.wait_pending(me, stats),
            Contended::Queue => {}
        }
        if P::ENABLED && self.word.steal.load(Ordering::Relaxed) && self.steal_in_turn(me) {
            stats.steals += 1;
            return;
        }
        match Slot::take(me) {
            Some(slot) => self.lock_queued(&slot, stats),
            None => self.lock_unqueued(me, stats),
        }
    }

    /// Takes the lock if it is free and nobody waits for it.
    pub fn try_lock(&self) -> Option<QueuedLockGuard<'_, T, P>> {
        let me = holder_field(self.pv.this_cpu());
        self.word
            .state
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        Some(self.acquired())
    }

    fn acquired(&self) -> QueuedLockGuard<'_, T, P> {
        if P::ENABLED {
            self.pv.lock_acquired();
        }
        QueuedLockGuard {
            lock: self,
            _per_cpu: PhantomData,
        }
    }

    /// Takes a lock that came free while nobody waits, or becomes the
    /// pending waiter of a held one; [`Contended::Queue`] when others wait
    /// already (or the word kept changing).
    fn try_pending(&self, me: usize) -> Contended {
        let state = &self.word.state;
        let mut seen = state.load(Ordering::Relaxed);
        for _ in 0..PENDING_TRIES {
            if seen & (PENDING | TAIL_MASK) != 0 {
                break;
            }
            let (want, outcome) = if seen & HOLDER_MASK == 0 {
                (seen | holder_field(me), Contended::Taken)
            } else {
                (seen | PENDING, Contended::Pending)
            };
            // Acquire: a take pairs with the previous holder's release.
            match state.compare_exchange(seen, want, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => {
                    if outcome == Contended::Pending
                        && let Ok(field) = u32::try_from(holder_field(me))
                    {
                        self.word.pending_cpu.store(field, Ordering::Relaxed);
                    }
                    return outcome;
                }
                Err(now) => seen = now,
            }
        }
        Contended::Queue
    }

    /// [`Self::try_steal`], at most every other contended acquisition of
    /// a CPU: one that stole last time queues this time (and may steal
    /// again the next). Unbounded, the CPUs that ran stole again and again
    /// past the queue (the least served vCPU of a 2x lockbench run got 0.40
    /// of the most served's acquisitions); taking turns keeps most of the
    /// gain and the queue moving. A CPU beyond [`MAX_CPUS`] never steals.
    fn steal_in_turn(&self, me: usize) -> bool {
        let Some(stole_last) = STOLE_LAST.get(me) else {
            return false;
        };
        // Only this CPU writes its flag (as DEPTH).
        let stole = !stole_last.load(Ordering::Relaxed) && self.try_steal(me);
        stole_last.store(stole, Ordering::Relaxed);
        stole
    }

    /// A newcomer that found others waiting takes the lock past them if
    /// the one whose turn it is does not run: the lock is free and the
    /// pending waiter is preempted, or the lock stays free for
    /// `spin_limit` reads (far longer than a running waiter needs to take
    /// a lock it watches: the pending waiter or the queue's head is
    /// preempted or asleep until its kick gets it a pCPU). FIFO order
    /// would leave the lock idle until that vCPU runs again; Linux's PV
    /// qspinlock lets a newcomer steal the lock too
    /// (`pv_hybrid_queued_unfair_trylock`). The steal sets only the holder
    /// field, so the waiters wait on for this holder as for any other, and
    /// the one whose turn it is, once it runs, takes the lock at the next
    /// release: it takes a free lock at once, a stealer only one that
    /// stayed free.
    fn try_steal(&self, me: usize) -> bool {
        let (limit, _) = self.limits();
        let state = &self.word.state;
        let mut seen = state.load(Ordering::Relaxed);
        let pending_preempted = seen & PENDING != 0
            && (self.word.pending_cpu.load(Ordering::Relaxed) as usize)
                .checked_sub(1)
                .is_some_and(|cpu| self.pv.vcpu_is_preempted(cpu));
        let reads = if pending_preempted { 0 } else { limit };
        for _ in 0..reads {
            if seen & HOLDER_MASK != 0 || seen & (PENDING | TAIL_MASK) == 0 {
                return false;
            }
            self.pv.relax();
            seen = state.load(Ordering::Relaxed);
        }
        // Acquire: pairs with the previous holder's release in unlock.
        seen & HOLDER_MASK == 0
            && seen & (PENDING | TAIL_MASK) != 0
            && state
                .compare_exchange(
                    seen,
                    seen | holder_field(me),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// As the pending waiter: spin on the lock word until the holder
    /// releases, then take it (clearing [`PENDING`]) and kick the queue's
    /// head if it fell asleep behind us. Yields to a preempted holder;
    /// sleeps (to be kicked by the unlocker) after `halt_after` fruitless
    /// looks, as the head does.
    fn wait_pending(&self, me: usize, stats: &mut WaitStats) {
        let (limit, halt_after) = self.limits();
        let (mut spins, mut looks) = (0u32, 0u32);
        let state = &self.word.state;
        loop {
            let s = state.load(Ordering::Relaxed);
            if s & HOLDER_MASK == 0 {
                // The unlock cleared HEAD_HALTED with the holder; the tail
                // stays. SeqCst: see sleep_behind_pending.
                let taken = (s & TAIL_MASK) | holder_field(me);
                if state
                    .compare_exchange_weak(s, taken, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
                {
                    if P::ENABLED {
                        self.wake_queue_head();
                    }
                    return;
                }
                continue;
            }
            stats.spins += 1;
            spins += 1;
            if P::ENABLED && spins >= limit {
                spins = 0;
                looks += 1;
                stats.looks += 1;
                if self.help_holder(s, me, stats) {
                    continue;
                }
                if self.pv.can_halt() && looks >= halt_after {
                    looks = 0;
                    self.sleep_as_head(me, stats, true);
                    continue;
                }
            }
            self.pv.relax();
        }
    }

    /// Just took the lock as the pending waiter: if the queue's head sleeps
    /// behind us, have our unlock kick it (it is next in line now).
    fn wake_queue_head(&self) {
        // SeqCst: see sleep_behind_pending.
        let head = self.word.queue_head.load(Ordering::SeqCst);
        if head == 0 {
            return;
        }
        let (node, cpu) = node_of(head);
        if node.halted.load(Ordering::SeqCst) != 0
            && let Ok(field) = u32::try_from(holder_field(cpu))
        {
            self.word.halted_head.store(field, Ordering::Relaxed);
            self.word.state.fetch_or(HEAD_HALTED, Ordering::Relaxed);
        }
    }

    /// The slow path: queue behind the tail, wait to be the head, wait for
    /// the lock, then make the successor the head.
    fn lock_queued(&self, slot: &Slot, stats: &mut WaitStats) {
        let node = slot.node();
        let my_tag = slot.tag();
        node.head.store(0, Ordering::Relaxed);
        node.halted.store(0, Ordering::Relaxed);
        node.next.store(0, Ordering::Relaxed);
        // Release: the successor that finds our tag sees the node reset.
        // Acquire: we see the predecessor's node as it published it.
        let old = self
            .word
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                Some(s & !TAIL_MASK | u64::from(my_tag) << TAIL_SHIFT)
            })
            // The closure always answers Some.
            .unwrap_or_else(|s| s);
        let prev = (old >> TAIL_SHIFT) as u32;
        if prev != 0 {
            let (pred, pred_cpu) = node_of(prev);
            pred.next.store(my_tag, Ordering::Release);
            self.wait_to_be_head(node, pred_cpu, stats);
        }
        let was_last = self.wait_for_lock(node, slot.cpu, my_tag, stats);
        if !was_last {
            self.pass_head_on(node);
        }
    }

    /// Behind the head: spin on our own node until the predecessor makes
    /// it the head; sleep if the predecessor is preempted or for long.
    fn wait_to_be_head(&self, node: &Node, pred_cpu: usize, stats: &mut WaitStats) {
        let (limit, halt_after) = self.limits();
        let (mut spins, mut looks) = (0u32, 0u32);
        // Acquire: pairs with the predecessor's store in pass_head_on.
        while node.head.load(Ordering::Acquire) == 0 {
            stats.spins += 1;
            spins += 1;
            if P::ENABLED && spins >= limit {
                spins = 0;
                looks += 1;
                stats.looks += 1;
                let preempted = self.pv.vcpu_is_preempted(pred_cpu);
                stats.saw_preempted += u64::from(preempted);
                if self.pv.can_halt() && (preempted || looks >= halt_after) {
                    looks = 0;
                    Self::sleep_in_queue(&self.pv, node, stats);
                    continue;
                }
            }
            self.pv.relax();
        }
    }

    /// Sleeps until kicked, unless the node became the head meanwhile.
    fn sleep_in_queue(pv: &P, node: &Node, stats: &mut WaitStats) {
        // SeqCst on both sides (here and in pass_head_on): either the new
        // holder sees `halted` and arranges the kick, or we see `head` and
        // do not sleep. Both may happen: then one kick is spurious.
        node.halted.store(1, Ordering::SeqCst);
        if node.head.load(Ordering::SeqCst) == 0 {
            stats.halts += 1;
            pv.wait();
        }
        node.halted.store(0, Ordering::Relaxed);
    }

    /// As the head: spin on the lock word until the holder and the
    /// pending waiter are gone, then take it. Yields to a preempted holder;
    /// sleeps (to be kicked by the unlocker) after `halt_after` fruitless
    /// looks; behind a pending waiter, waits for it as for a predecessor.
    /// Returns whether this waiter was the last in the queue (the tail is
    /// then cleared).
    fn wait_for_lock(&self, node: &Node, me: usize, my_tag: u32, stats: &mut WaitStats) -> bool {
        let (limit, halt_after) = self.limits();
        let (mut spins, mut looks) = (0u32, 0u32);
        let state = &self.word.state;
        // Whether `queue_head` names us: from our first sleep behind a
        // pending waiter, which once gone does not come back while we
        // queue (PENDING is only set when nobody queues).
        let mut named = false;
        loop {
            let s = state.load(Ordering::Relaxed);
            if s & (HOLDER_MASK | PENDING) == 0 {
                let last = (s >> TAIL_SHIFT) as u32 == my_tag;
                // Taking the lock also clears HEAD_HALTED (it was ours) and,
                // when no one queued behind us, the tail.
                let tail = if last { 0 } else { s & TAIL_MASK };
                if named {
                    // Before the take, whose release orders it before a
                    // later head's naming.
                    named = false;
                    self.word.queue_head.store(0, Ordering::Relaxed);
                }
                if self.try_swap(s, tail | holder_field(me)) {
                    return last;
                }
                continue;
            }
            stats.spins += 1;
            spins += 1;
            if P::ENABLED && spins >= limit {
                spins = 0;
                looks += 1;
                stats.looks += 1;
                if self.help_holder(s, me, stats) {
                    continue;
                }
                if s & PENDING != 0 {
                    if self.help_pending(s, looks >= halt_after, stats) {
                        if !named {
                            // SeqCst: see sleep_behind_pending.
                            self.word.queue_head.store(my_tag, Ordering::SeqCst);
                            named = true;
                        }
                        looks = 0;
                        self.sleep_behind_pending(node, stats);
                    }
                    continue;
                }
                if self.pv.can_halt() && looks >= halt_after {
                    looks = 0;
                    self.sleep_as_head(me, stats, false);
                    continue;
                }
            }
            self.pv.relax();
        }
    }

    /// The head behind the pending waiter (`word` has [`PENDING`]) looked:
    /// a preempted pending waiter gets our slice if the lock is free (it
    /// takes the lock as soon as it runs); otherwise true if we should
    /// sleep until its unlock kicks us: it is preempted (as behind a
    /// preempted predecessor), or we `waited_long`.
    fn help_pending(&self, word: u64, waited_long: bool, stats: &mut WaitStats) -> bool {
        let pending = self.word.pending_cpu.load(Ordering::Relaxed);
        let preempted = (pending as usize)
            .checked_sub(1)
            .filter(|&cpu| self.pv.vcpu_is_preempted(cpu));
        stats.saw_preempted += u64::from(preempted.is_some());
        if let Some(cpu) = preempted
            && word & HOLDER_MASK == 0
        {
            let answer = self.pv.yield_to(cpu);
            stats.count_yield(answer);
            return false;
        }
        self.pv.can_halt() && (preempted.is_some() || waited_long)
    }

    /// Sleeps until the pending waiter's unlock kicks us, unless it took
    /// the lock meanwhile. SeqCst with the pending waiter's take and its
    /// look at our node (`wake_queue_head`): either it sees `halted` (and
    /// our registration in `queue_head`) and arranges the kick, or we see
    /// [`PENDING`] gone and do not sleep.
    fn sleep_behind_pending(&self, node: &Node, stats: &mut WaitStats) {
        node.halted.store(1, Ordering::SeqCst);
        if self.word.state.load(Ordering::SeqCst) & PENDING != 0 {
            stats.halts += 1;
            self.pv.wait();
        }
        node.halted.store(0, Ordering::Relaxed);
    }

    /// If the holder named in `word` is preempted, yields to it; true when
    /// the hypervisor ran it.
    fn help_holder(&self, word: u64, me: usize, stats: &mut WaitStats) -> bool {
        let Some(holder) = holder_cpu(word) else {
            stats.owner_unknown += 1;
            return false;
        };
        if holder == me || !self.pv.vcpu_is_preempted(holder) {
            return false;
        }
        stats.saw_preempted += 1;
        let answer = self.pv.yield_to(holder);
        stats.count_yield(answer);
        answer == YieldResult::Yielded
    }

    /// Marks the lock "head halted" while it is still held (and, for the
    /// queue's head, while nobody is pending: the pending waiter is next
    /// in line then), then sleeps; the unlock that clears the mark kicks
    /// us. `pending`: we are the pending waiter.
    fn sleep_as_head(&self, me: usize, stats: &mut WaitStats, pending: bool) {
        let Ok(me_field) = u32::try_from(holder_field(me)) else {
            return;
        };
        self.word.halted_head.store(me_field, Ordering::Relaxed);
        // Release: the unlocker that sees the mark sees `halted_head`.
        let marked = self
            .word
            .state
            .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                let next_in_line = pending || s & PENDING == 0;
                (s & HOLDER_MASK != 0 && next_in_line).then_some(s | HEAD_HALTED)
            });
        if marked.is_ok() {
            stats.halts += 1;
            self.pv.wait();
        }
    }

    /// We hold the lock and others queued behind us: make our successor
    /// the head, and have our unlock kick it if it sleeps.
    fn pass_head_on(&self, node: &Node) {
        // The successor swapped the tail before us being here; it links
        // itself a few instructions later.
        let next = loop {
            // Acquire: pairs with the successor's store of its tag.
            let next = node.next.load(Ordering::Acquire);
            if next != 0 {
                break next;
            }
            super::cpu_relax();
        };
        let (successor, cpu) = node_of(next);
        // See sleep_in_queue for the SeqCst pairing.
        successor.head.store(1, Ordering::SeqCst);
        if successor.halted.load(Ordering::SeqCst) != 0
            && let Ok(field) = u32::try_from(holder_field(cpu))
        {
            self.word.halted_head.store(field, Ordering::Relaxed);
            self.word.state.fetch_or(HEAD_HALTED, Ordering::Relaxed);
        }
    }

    /// Without a node: compete for the lock word directly (keeping the
    /// queue and its mark), yielding to a preempted holder.
    fn lock_unqueued(&self, me: usize, stats: &mut WaitStats) {
        let limit = self.limits().0;
        let mut spins = 0u32;
        let state = &self.word.state;
        loop {
            let s = state.load(Ordering::Relaxed);
            if s & HOLDER_MASK == 0 {
                if self.try_swap(s, s | holder_field(me)) {
                    return;
                }
                continue;
            }
            stats.spins += 1;
            spins += 1;
            if P::ENABLED && spins >= limit {
                spins = 0;
                stats.looks += 1;
                self.help_holder(s, me, stats);
            }
            self.pv.relax();
        }
    }

    /// Takes a free lock: the word goes from `seen` to `taken` unless it
    /// changed meanwhile.
    fn try_swap(&self, seen: u64, taken: u64) -> bool {
        // Acquire: pairs with the previous holder's release in unlock.
        // Release: a head's clearing of `queue_head` comes before the
        // registration of the head that finds the tail this take cleared.
        self.word
            .state
            .compare_exchange_weak(seen, taken, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    fn unlock(&self) {
        // Release: the next holder sees our writes. Acquire: we see the
        // sleeping head's `halted_head` when we see its mark.
        let old = self
            .word
            .state
            .fetch_and(!(HOLDER_MASK | HEAD_HALTED), Ordering::AcqRel);
        if P::ENABLED {
            self.pv.lock_released();
        }
        if old & HEAD_HALTED != 0 {
            self.kick_halted_head();
        }
    }

    /// The unlock found the queue's head asleep: kick it (out of line, as
    /// the contended lock path).
    #[cold]
    #[inline(never)]
    fn kick_halted_head(&self) {
        let head = self.word.halted_head.load(Ordering::Relaxed);
        if let Some(cpu) = (head as usize).checked_sub(1) {
            self.word.kicks.fetch_add(1, Ordering::Relaxed);
            if self.pv.kick(cpu) != Kick::Kicked {
                self.word.kicks_refused.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn limits(&self) -> (u32, u32) {
        (
            self.word.spin_limit.load(Ordering::Relaxed).max(1),
            self.word.halt_after.load(Ordering::Relaxed).max(1),
        )
    }

    /// Whether some CPU holds the lock (a snapshot).
    pub fn is_locked(&self) -> bool {
        self.word.state.load(Ordering::Relaxed) & HOLDER_MASK != 0
    }

    /// Whether CPUs wait for the lock, pending or queued (a snapshot).
    pub fn has_waiters(&self) -> bool {
        self.word.state.load(Ordering::Relaxed) & (PENDING | TAIL_MASK) != 0
    }

    /// The CPU holding the lock, if it is held by a CPU with a number (a
    /// snapshot).
    pub fn holder(&self) -> Option<usize> {
        holder_cpu(self.word.state.load(Ordering::Relaxed))
    }

    /// Kicks the unlockers sent to sleeping waiters, and how many of them
    /// the backend reported as not delivered.
    pub fn kicks(&self) -> (u64, u64) {
        (
            self.word.kicks.load(Ordering::Relaxed),
            self.word.kicks_refused.load(Ordering::Relaxed),
        )
    }

    /// Spins between two looks at the awaited vCPU.
    pub fn spin_limit(&self) -> u32 {
        self.word.spin_limit.load(Ordering::Relaxed)
    }

    /// Sets the spins between two looks (at least 1); takes effect for
    /// waits that start afterwards.
    pub fn set_spin_limit(&self, spins: u32) {
        self.word.spin_limit.store(spins.max(1), Ordering::Relaxed);
    }

    /// Looks after which a waiter sleeps although the awaited vCPU runs.
    pub fn halt_after(&self) -> u32 {
        self.word.halt_after.load(Ordering::Relaxed)
    }

    /// Sets the looks before a waiter sleeps (at least 1; `u32::MAX`: only
    /// when the awaited vCPU is preempted).
    pub fn set_halt_after(&self, looks: u32) {
        self.word.halt_after.store(looks.max(1), Ordering::Relaxed);
    }

    /// Whether a CPU that comes to the lock may take it past a waiter
    /// whose turn it is but who does not run (the module documentation's
    /// lock stealing; on by default).
    pub fn steals(&self) -> bool {
        self.word.steal.load(Ordering::Relaxed)
    }

    /// Allows or forbids lock stealing: without it the lock is strictly
    /// FIFO, and a hand-off to a descheduled waiter waits for it to run.
    pub fn set_steal(&self, steal: bool) {
        self.word.steal.store(steal, Ordering::Relaxed);
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

impl<T: ?Sized, P: Paravirt> fmt::Debug for QueuedLock<T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuedLock")
            .field("locked", &self.is_locked())
            .field("holder", &self.holder())
            .field("waiters", &self.has_waiters())
            .finish_non_exhaustive()
    }
}

/// Access to a [`QueuedLock`]'s value; dropping it releases the lock. It
/// stays on the CPU that took the lock (not `Send`).
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct QueuedLockGuard<'a, T: ?Sized, P: Paravirt> {
    lock: &'a QueuedLock<T, P>,
    _per_cpu: PhantomData<*const ()>,
}

// SAFETY: a shared guard only gives `&T`, like `&T` itself.
unsafe impl<T: ?Sized + Sync, P: Paravirt + Sync> Sync for QueuedLockGuard<'_, T, P> {}

impl<T: ?Sized, P: Paravirt> Deref for QueuedLockGuard<'_, T, P> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while its CPU holds the lock.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized, P: Paravirt> DerefMut for QueuedLockGuard<'_, T, P> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in deref, and the guard is borrowed mutably.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized, P: Paravirt> Drop for QueuedLockGuard<'_, T, P> {
    fn drop(&mut self) {
        self.lock.unlock();
    }
}

impl<T: ?Sized + fmt::Debug, P: Paravirt> fmt::Debug for QueuedLockGuard<'_, T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}
