//! The queued lock with std threads, against the fake hypervisor of the
//! ticket lock's tests (preempted flags, logged yields, and waits that
//! sleep until a kick).
//!
//! The queue nodes are per CPU and shared by every queued lock, so two
//! tests that both play "CPU 1" must not run at once: each test holds
//! [`serial`] for its whole length.

use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::Duration;
use std::vec::Vec;

use super::*;
use crate::lock::tests::{CPUS, Counters, CountersLock, Fake, HostYield, become_cpu, wait_for};

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The host-test backend with CPU numbers (the queued lock needs them).
#[derive(Clone, Copy, Default)]
struct HostCpus;

impl Paravirt for HostCpus {
    const ENABLED: bool = false;

    fn this_cpu(&self) -> usize {
        Fake::new().this_cpu()
    }

    fn vcpu_is_preempted(&self, _cpu: usize) -> bool {
        false
    }

    fn yield_to(&self, _cpu: usize) -> YieldResult {
        YieldResult::Unavailable
    }

    fn relax(&self) {
        HostYield.relax();
    }
}

impl<P: Paravirt + Sync> CountersLock for QueuedLock<Counters, P> {
    fn with(&self, stats: &mut WaitStats, section: &mut dyn FnMut(&mut Counters)) {
        section(&mut self.lock_counted(stats));
    }

    fn idle(&self) -> bool {
        !self.is_locked() && !self.has_waiters()
    }
}

/// The shared hammer, then: every CPU gave its nodes back.
fn hammer(lock: &impl CountersLock, threads: usize, rounds: u64) -> WaitStats {
    let stats = crate::lock::tests::hammer(lock, threads, rounds);
    for (cpu, depth) in DEPTH.iter().enumerate() {
        assert_eq!(
            depth.load(Ordering::Relaxed),
            0,
            "cpu {cpu} left a level taken"
        );
    }
    stats
}

/// Spawns CPU `cpu` taking `lock` once (pushing its number) and waits
/// until it is queued (the tail names its node).
fn queue_up<'s, P: Paravirt + Sync>(
    s: &'s thread::Scope<'s, '_>,
    lock: &'s QueuedLock<Vec<usize>, P>,
    cpu: usize,
) -> thread::ScopedJoinHandle<'s, WaitStats> {
    let handle = s.spawn(move || {
        become_cpu(cpu);
        let mut stats = WaitStats::default();
        lock.lock_counted(&mut stats).push(cpu);
        stats
    });
    wait_for("the waiter to queue", || waiting(lock, cpu));
    handle
}

/// Whether `cpu` waits for `lock` as the pending waiter or as the queue's
/// tail (the first waiter of a held lock is pending, later ones queue).
fn waiting<T, P: Paravirt>(lock: &QueuedLock<T, P>, cpu: usize) -> bool {
    let state = lock.word.state.load(Ordering::SeqCst);
    let pending =
        state & PENDING != 0 && lock.word.pending_cpu.load(Ordering::SeqCst) as usize == cpu + 1;
    pending || (state >> TAIL_SHIFT) as u32 == tag(cpu, 0)
}

#[test]
fn excludes_and_loses_nothing() {
    let _serial = serial();
    let lock = QueuedLock::with_paravirt(Counters::default(), HostCpus);
    let stats = hammer(&lock, 6, 20_000);
    assert_eq!((stats.halts, stats.yield_calls), (0, 0));
}

#[test]
fn excludes_and_loses_nothing_while_yielding_and_sleeping() {
    let _serial = serial();
    // Every CPU reads as preempted, every yield is answered YIELDED and
    // waiters sleep at every look: the lock must not care.
    let fake = Fake::halting();
    for cpu in 0..CPUS {
        fake.preempt(cpu, true);
    }
    let lock = QueuedLock::with_paravirt(Counters::default(), &fake);
    lock.set_spin_limit(1);
    lock.set_halt_after(1);
    // A queue that surely forms (the hammer's threads may not overlap on
    // a loaded host): CPU 1 is pending and CPU 2 heads the queue, both
    // yield to the holder; CPU 3 sleeps behind CPU 2.
    become_cpu(0);
    let guard = lock.lock();
    let mut stats = thread::scope(|s| {
        let waiters: Vec<_> = [1, 2, 3]
            .into_iter()
            .map(|cpu| {
                let lock = &lock;
                let waiter = s.spawn(move || {
                    become_cpu(cpu);
                    let mut stats = WaitStats::default();
                    lock.lock_counted(&mut stats).a += 1;
                    stats
                });
                wait_for("the waiter to queue", || waiting(lock, cpu));
                waiter
            })
            .collect();
        wait_for("CPU 3 to sleep", || fake.sleeping[3].load(Ordering::SeqCst));
        wait_for("CPU 1 and CPU 2 to yield", || {
            let yields = fake.yields();
            yields.contains(&(1, 0)) && yields.contains(&(2, 0))
        });
        drop(guard);
        let mut stats = WaitStats::default();
        for w in waiters {
            stats += w.join().unwrap();
        }
        stats
    });
    lock.lock().a -= 3;
    stats += hammer(&lock, 6, 3_000);
    assert!(stats.halts > 0, "{stats:?}");
    assert!(stats.yielded > 0, "{stats:?}");
    let (kicks, refused) = lock.kicks();
    assert!(
        kicks > 0 && refused == 0,
        "{kicks} kicks, {refused} refused"
    );
    assert_eq!(
        fake.wait_timeouts.load(Ordering::SeqCst),
        0,
        "every sleeper was kicked"
    );
    assert!(fake.kicks().iter().all(|&(from, to)| from != to && to < 6));
    assert!(fake.yields().iter().all(|&(from, to)| from != to && to < 6));
    for cpu in 0..CPUS {
        assert_eq!(fake.count(cpu), 0, "cpu {cpu}'s lock count after the run");
    }
}

#[test]
fn waiters_are_served_in_queue_order() {
    let _serial = serial();
    let fake = Fake::new();
    let lock = QueuedLock::with_paravirt(Vec::new(), &fake);
    become_cpu(0);
    let guard = lock.lock();
    assert_eq!(lock.holder(), Some(0));
    assert_eq!(fake.count(0), 1, "the holder's lock count");
    thread::scope(|s| {
        let waiters: Vec<_> = (1..CPUS).map(|cpu| queue_up(s, &lock, cpu)).collect();
        assert!(lock.has_waiters());
        drop(guard);
        for w in waiters {
            let stats = w.join().unwrap();
            assert_eq!((stats.acquisitions, stats.contended), (1, 1));
        }
    });
    assert_eq!(fake.count(0), 0);
    assert_eq!(lock.into_inner(), (1..CPUS).collect::<Vec<_>>());
}

#[test]
fn try_lock_only_takes_a_free_lock_without_waiters() {
    let _serial = serial();
    let lock = QueuedLock::with_paravirt(Vec::new(), HostCpus);
    become_cpu(0);
    let guard = lock.try_lock().expect("free");
    assert!(lock.try_lock().is_none());
    thread::scope(|s| {
        let waiter = queue_up(s, &lock, 1);
        drop(guard);
        waiter.join().unwrap();
    });
    assert!(!lock.is_locked());
    lock.try_lock().expect("free again").push(0);
    assert_eq!(lock.into_inner(), [1, 0]);
}

#[test]
fn the_head_yields_to_a_preempted_holder_and_only_then() {
    let _serial = serial();
    let fake = Fake::new();
    let lock = QueuedLock::with_paravirt(Vec::new(), &fake);
    lock.set_spin_limit(8);
    become_cpu(0);

    // The holder runs: the head spins and asks nothing.
    let guard = lock.lock();
    let stats = thread::scope(|s| {
        let head = queue_up(s, &lock, 1);
        thread::sleep(Duration::from_millis(20));
        drop(guard);
        head.join().unwrap()
    });
    assert!(fake.yields().is_empty());
    assert!(stats.looks > 0 && stats.saw_preempted == 0, "{stats:?}");

    // The holder is preempted: the head yields to it until it releases.
    let guard = lock.lock();
    fake.preempt(0, true);
    let stats = thread::scope(|s| {
        let head = queue_up(s, &lock, 1);
        wait_for("three yields", || fake.yields().len() >= 3);
        fake.preempt(0, false);
        drop(guard);
        head.join().unwrap()
    });
    let yields = fake.yields();
    assert!(yields.iter().all(|&y| y == (1, 0)), "{yields:?}");
    assert_eq!(stats.yielded, yields.len() as u64);
    assert_eq!(stats.halts, 0, "no kick is offered: nobody sleeps");
}

#[test]
fn a_waiter_behind_a_preempted_predecessor_sleeps_until_its_turn() {
    let _serial = serial();
    let fake = Fake::halting();
    let lock = QueuedLock::with_paravirt(Vec::new(), &fake);
    lock.set_spin_limit(4);
    // Only a preempted predecessor makes it sleep in this test.
    lock.set_halt_after(u32::MAX);
    become_cpu(0);
    let guard = lock.lock();
    thread::scope(|s| {
        // CPU 1 is the head; CPU 2 waits behind it and finds it preempted.
        let head = queue_up(s, &lock, 1);
        fake.preempt(1, true);
        let behind = queue_up(s, &lock, 2);
        wait_for("CPU 2 to sleep", || fake.sleeping[2].load(Ordering::SeqCst));
        // Nobody kicks it before it can have the lock: not the holder's
        // unlock (CPU 1 is the head, not CPU 2), ...
        fake.preempt(1, false);
        drop(guard);
        let head_stats = head.join().unwrap();
        // ... but CPU 1's unlock does: it made CPU 2 the head while CPU 2
        // slept, so its release kicks it.
        let behind_stats = behind.join().unwrap();
        assert_eq!(head_stats.halts, 0);
        assert!(behind_stats.halts >= 1 && behind_stats.saw_preempted >= 1);
    });
    assert_eq!(
        fake.kicks(),
        [(1, 2)],
        "one kick, from the unlock before its turn"
    );
    assert_eq!(
        fake.wait_timeouts.load(Ordering::SeqCst),
        0,
        "woken by the kick"
    );
    assert_eq!(lock.into_inner(), [1, 2]);
}

#[test]
fn a_head_that_waited_long_sleeps_and_the_unlock_kicks_it() {
    let _serial = serial();
    let fake = Fake::halting();
    let lock = QueuedLock::with_paravirt(Vec::new(), &fake);
    lock.set_spin_limit(4);
    lock.set_halt_after(3);
    become_cpu(0);
    let guard = lock.lock();
    thread::scope(|s| {
        let head = queue_up(s, &lock, 1);
        wait_for("the head to sleep", || {
            fake.sleeping[1].load(Ordering::SeqCst)
        });
        assert_ne!(lock.word.state.load(Ordering::SeqCst) & HEAD_HALTED, 0);
        assert!(fake.kicks().is_empty());
        drop(guard);
        let stats = head.join().unwrap();
        assert!(stats.halts >= 1 && stats.yield_calls == 0, "{stats:?}");
    });
    assert_eq!(fake.kicks(), [(0, 1)]);
    assert_eq!(lock.kicks(), (1, 0));
    assert_eq!(
        fake.wait_timeouts.load(Ordering::SeqCst),
        0,
        "woken by the kick"
    );
    assert_eq!(lock.word.state.load(Ordering::SeqCst), 0, "mark cleared");
}

#[test]
fn the_head_behind_a_sleeping_pending_waiter_is_kicked_by_its_unlock() {
    let _serial = serial();
    let fake = Fake::halting();
    let lock = QueuedLock::with_paravirt(Vec::new(), &fake);
    lock.set_spin_limit(4);
    lock.set_halt_after(3);
    become_cpu(0);
    let guard = lock.lock();
    thread::scope(|s| {
        // The holder runs long: CPU 1, pending, sleeps with the word's
        // mark; CPU 2, the queue's head, sleeps on its node behind it.
        let pending = queue_up(s, &lock, 1);
        let head = queue_up(s, &lock, 2);
        wait_for("both to sleep", || {
            fake.sleeping[1].load(Ordering::SeqCst) && fake.sleeping[2].load(Ordering::SeqCst)
        });
        assert_ne!(lock.word.state.load(Ordering::SeqCst) & HEAD_HALTED, 0);
        assert_eq!(lock.word.halted_head.load(Ordering::SeqCst), 2, "CPU 1");
        assert_eq!(lock.word.queue_head.load(Ordering::SeqCst), tag(2, 0));
        assert!(fake.kicks().is_empty());
        drop(guard);
        let (pending, head) = (pending.join().unwrap(), head.join().unwrap());
        assert!(
            pending.halts >= 1 && head.halts >= 1,
            "{pending:?} {head:?}"
        );
    });
    // The holder's unlock kicks the pending waiter; the pending waiter's
    // unlock kicks the head it found asleep when it took the lock.
    assert_eq!(fake.kicks(), [(0, 1), (1, 2)]);
    assert_eq!(
        fake.wait_timeouts.load(Ordering::SeqCst),
        0,
        "woken by the kicks"
    );
    assert_eq!(lock.word.state.load(Ordering::SeqCst), 0);
    assert_eq!(
        lock.word.queue_head.load(Ordering::SeqCst),
        0,
        "name cleared"
    );
    assert_eq!(lock.into_inner(), [1, 2]);
}

#[test]
fn what_the_head_behind_a_pending_waiter_does_when_it_looks() {
    let _serial = serial();
    let held = holder_field(0) | PENDING;
    let free = PENDING;
    for fake in [Fake::halting(), Fake::new()] {
        let halts = fake.can_halt();
        let lock = QueuedLock::with_paravirt((), &fake);
        lock.word.pending_cpu.store(2, Ordering::SeqCst); // CPU 1
        become_cpu(2);
        let mut stats = WaitStats::default();
        // Pending CPU running: sleep only after waiting long.
        assert!(!lock.help_pending(held, false, &mut stats));
        assert_eq!(lock.help_pending(held, true, &mut stats), halts);
        // Pending CPU preempted, lock held: it must get the lock before it
        // can release anything, so sleep (as behind a predecessor).
        fake.preempt(1, true);
        assert_eq!(lock.help_pending(held, false, &mut stats), halts);
        assert!(fake.yields().is_empty());
        // Lock free: the preempted pending CPU takes it the moment it runs.
        assert!(!lock.help_pending(free, true, &mut stats));
        assert_eq!(fake.yields(), [(2, 1)]);
        assert_eq!((stats.saw_preempted, stats.yield_calls), (2, 1));
    }
}

/// A newcomer takes a free lock past the waiter whose turn it is only
/// when that waiter does not run: at once if the pending waiter is
/// preempted, otherwise once the lock stayed free for `spin_limit` reads.
/// It never takes a held lock, nor steals where nobody waits, and leaves
/// every other field of the word as it was.
#[test]
fn a_newcomer_steals_the_lock_only_past_a_waiter_that_does_not_run() {
    let _serial = serial();
    let fake = Fake::new();
    let lock = QueuedLock::with_paravirt((), &fake);
    lock.set_spin_limit(1 << 20);
    let queued = u64::from(tag(2, 0)) << TAIL_SHIFT;
    lock.word.pending_cpu.store(2, Ordering::SeqCst); // CPU 1
    become_cpu(3);
    // The pending CPU is preempted and the lock free: taken at once (a
    // wait of 2^20 reads would time the test out).
    fake.preempt(1, true);
    lock.word.state.store(PENDING | queued, Ordering::SeqCst);
    assert!(lock.try_steal(3));
    assert_eq!(
        lock.word.state.load(Ordering::SeqCst),
        PENDING | queued | holder_field(3)
    );
    // Held, or free with nobody waiting (the fast path's case): no steal.
    for state in [PENDING | queued | holder_field(0), holder_field(0), 0] {
        lock.word.state.store(state, Ordering::SeqCst);
        assert!(!lock.try_steal(3), "{state:#x}");
        assert_eq!(lock.word.state.load(Ordering::SeqCst), state);
    }
}

/// A CPU that stole the lock queues at its next contended acquisition,
/// and may steal again at the one after.
#[test]
fn a_cpu_steals_at_most_every_other_contended_acquisition() {
    let _serial = serial();
    let fake = Fake::new();
    let lock = QueuedLock::with_paravirt((), &fake);
    let stealable = PENDING | u64::from(tag(2, 0)) << TAIL_SHIFT;
    lock.word.pending_cpu.store(2, Ordering::SeqCst); // CPU 1
    fake.preempt(1, true);
    become_cpu(3);
    STOLE_LAST[3].store(false, Ordering::SeqCst);
    for (round, steals) in [true, false, true, false].into_iter().enumerate() {
        lock.word.state.store(stealable, Ordering::SeqCst);
        assert_eq!(lock.steal_in_turn(3), steals, "round {round}");
        let expected = if steals {
            stealable | holder_field(3)
        } else {
            stealable
        };
        assert_eq!(lock.word.state.load(Ordering::SeqCst), expected);
    }
    // Any contended acquisition that does not steal, one that found the
    // lock held included, gives the CPU its turn back.
    lock.word
        .state
        .store(stealable | holder_field(0), Ordering::SeqCst);
    assert!(!lock.steal_in_turn(3));
    lock.word.state.store(stealable, Ordering::SeqCst);
    assert!(lock.steal_in_turn(3));
    STOLE_LAST[3].store(false, Ordering::SeqCst);
}

/// The waiting half of the steal: a pending waiter that runs takes the
/// lock during the newcomer's reads, and the newcomer leaves it alone; a
/// lock that stays free for all of them is stolen.
#[test]
fn a_newcomer_waits_for_a_running_waiter_before_it_steals() {
    /// A backend whose `relax` is where CPU 1, the pending waiter, takes
    /// the lock: at the `TAKE_AT`th read.
    struct TakenWhileWaiting;
    static LOCK: QueuedLock<(), TakenWhileWaiting> =
        QueuedLock::with_paravirt((), TakenWhileWaiting);
    static RELAXES: AtomicU32 = AtomicU32::new(0);
    const TAKE_AT: u32 = 5;
    impl Paravirt for TakenWhileWaiting {
        // The point of this backend: CPU 1 takes the lock in here.
        fn relax(&self) {
            if RELAXES.fetch_add(1, Ordering::SeqCst) + 1 == TAKE_AT {
                let s = LOCK.word.state.load(Ordering::SeqCst);
                LOCK.word
                    .state
                    .store(s & TAIL_MASK | holder_field(1), Ordering::SeqCst);
            }
        }
        fn this_cpu(&self) -> usize {
            3
        }
        // CPU 1 runs; nobody yields.
        fn vcpu_is_preempted(&self, _cpu: usize) -> bool {
            false
        }
        fn yield_to(&self, _cpu: usize) -> YieldResult {
            YieldResult::Unavailable
        }
    }
    let _serial = serial();
    LOCK.word.pending_cpu.store(2, Ordering::SeqCst); // CPU 1, running
    // More reads than it takes CPU 1: CPU 1 gets the lock, not CPU 3.
    LOCK.set_spin_limit(TAKE_AT + 3);
    LOCK.word.state.store(PENDING, Ordering::SeqCst);
    assert!(!LOCK.try_steal(3));
    assert_eq!(RELAXES.load(Ordering::SeqCst), TAKE_AT);
    assert_eq!(LOCK.word.state.load(Ordering::SeqCst), holder_field(1));
    // Fewer reads than it takes CPU 1: the lock stayed free, CPU 3 takes it.
    RELAXES.store(0, Ordering::SeqCst);
    LOCK.set_spin_limit(TAKE_AT - 1);
    LOCK.word.state.store(PENDING, Ordering::SeqCst);
    assert!(LOCK.try_steal(3));
    assert_eq!(RELAXES.load(Ordering::SeqCst), TAKE_AT - 1);
    assert_eq!(
        LOCK.word.state.load(Ordering::SeqCst),
        PENDING | holder_field(3)
    );
}

#[test]
fn a_cpu_out_of_nodes_still_gets_the_lock() {
    let _serial = serial();
    let fake = Fake::new();
    let lock = QueuedLock::with_paravirt(Vec::new(), &fake);
    lock.set_spin_limit(1);
    become_cpu(3);
    // CPU 3 is inside LEVELS nested waits (as if interrupted that often).
    let taken: Vec<_> = (0..LEVELS).map(|_| Slot::take(3).unwrap()).collect();
    assert!(Slot::take(3).is_none(), "only {LEVELS} levels");
    become_cpu(0);
    let guard = lock.lock();
    fake.preempt(0, true);
    thread::scope(|s| {
        // CPU 1 is pending (no node needed), so CPU 3 would have to queue.
        let pending = queue_up(s, &lock, 1);
        let waiter = s.spawn(|| {
            become_cpu(3);
            let mut stats = WaitStats::default();
            lock.lock_counted(&mut stats).push(3);
            stats
        });
        // It waits without a node, and still helps a preempted holder.
        wait_for("a yield from the unqueued waiter", || {
            fake.yields().contains(&(3, 0))
        });
        assert_eq!(
            lock.word.state.load(Ordering::SeqCst) & TAIL_MASK,
            0,
            "it did not queue"
        );
        fake.preempt(0, false);
        drop(guard);
        let stats = waiter.join().unwrap();
        assert_eq!((stats.acquisitions, stats.contended), (1, 1));
        pending.join().unwrap();
    });
    drop(taken);
    assert_eq!(DEPTH[3].load(Ordering::Relaxed), 0);
    let mut took = lock.into_inner();
    took.sort_unstable();
    assert_eq!(
        took,
        [1, 3],
        "the unqueued CPU may overtake the pending one"
    );
}

#[test]
fn holder_fields_and_tags() {
    assert_eq!(holder_field(0), 1);
    assert_eq!(holder_cpu(holder_field(62)), Some(62));
    assert_eq!(holder_field(usize::MAX), ANON_HOLDER);
    assert_eq!(holder_field(0xfffe), ANON_HOLDER);
    assert_eq!(holder_cpu(ANON_HOLDER | HEAD_HALTED), None);
    assert_eq!(holder_cpu(0), None);
    // Every node has its own non-zero tag, and the tag finds it again.
    let mut seen = std::collections::BTreeSet::new();
    for (cpu, nodes) in NODES.iter().enumerate() {
        for (level, expected) in nodes.iter().enumerate() {
            let t = tag(cpu, level);
            assert!(t != 0 && seen.insert(t));
            let (node, c) = node_of(t);
            assert_eq!(c, cpu);
            assert!(core::ptr::eq(node, expected));
        }
    }
    assert_eq!(seen.len(), MAX_CPUS * LEVELS);
}
