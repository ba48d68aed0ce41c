//! The ticket locks with std threads, the PV one against a fake backend
//! that plays the hypervisor: it marks CPUs preempted, parks a "preempted"
//! thread in its wait loop, and logs and answers directed yields.

use super::*;
use std::cell::Cell;
use std::sync::atomic::AtomicBool;
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use std::vec::Vec;

pub(crate) const CPUS: usize = 8;

/// A plain lock's backend for host tests (nothing paravirtual), whose
/// waiters give the host CPU away between two reads of the lock. A test
/// runs more spinning threads than the machine has cores, and the host
/// preempts them like a hypervisor preempts vCPUs: with `spin_loop` alone
/// a ticket lock then takes minutes (lock-waiter preemption), which is
/// the problem the PV lock exists for.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HostYield;

impl Paravirt for HostYield {
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

    fn relax(&self) {
        thread::yield_now();
    }
}

thread_local! {
    /// The CPU number of the calling thread, as the fake sees it.
    static CPU: Cell<usize> = const { Cell::new(0) };
}

pub(crate) fn become_cpu(cpu: usize) {
    CPU.with(|c| c.set(cpu));
}

/// How long a test waits for something before it fails loudly.
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

pub(crate) fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        thread::sleep(Duration::from_micros(200));
    }
}

pub(crate) struct Fake {
    preempted: [AtomicBool; CPUS],
    lock_count: [AtomicU32; CPUS],
    /// (from, to) of every yield_to.
    yields: Mutex<Vec<(usize, usize)>>,
    /// What yield_to answers.
    answer: Mutex<YieldResult>,
    /// yield_to(cpu) clears cpu's preempted flag (the hypervisor ran it).
    runs_target: bool,
    /// A thread whose CPU is preempted waits in relax() until it is not.
    parks: bool,
    /// can_halt() answers this: wait() sleeps until kicked.
    pub(crate) halts: bool,
    /// A kick for this CPU is pending (consumed by its next wait).
    kicked: [AtomicBool; CPUS],
    /// This CPU sleeps in wait().
    pub(crate) sleeping: [AtomicBool; CPUS],
    /// (from, to) of every kick.
    kicks: Mutex<Vec<(usize, usize)>>,
    /// Waits that ended because the fake's bound passed, not by a kick.
    pub(crate) wait_timeouts: AtomicU32,
}

impl Fake {
    pub(crate) fn new() -> Self {
        Self {
            preempted: [const { AtomicBool::new(false) }; CPUS],
            lock_count: [const { AtomicU32::new(0) }; CPUS],
            yields: Mutex::new(Vec::new()),
            answer: Mutex::new(YieldResult::Yielded),
            runs_target: false,
            parks: false,
            halts: false,
            kicked: [const { AtomicBool::new(false) }; CPUS],
            sleeping: [const { AtomicBool::new(false) }; CPUS],
            kicks: Mutex::new(Vec::new()),
            wait_timeouts: AtomicU32::new(0),
        }
    }

    /// A fake whose waiters sleep until kicked.
    pub(crate) fn halting() -> Self {
        Self {
            halts: true,
            ..Self::new()
        }
    }

    pub(crate) fn kicks(&self) -> Vec<(usize, usize)> {
        self.kicks.lock().unwrap().clone()
    }

    pub(crate) fn preempt(&self, cpu: usize, preempted: bool) {
        self.preempted[cpu].store(preempted, Ordering::SeqCst);
    }

    pub(crate) fn yields(&self) -> Vec<(usize, usize)> {
        self.yields.lock().unwrap().clone()
    }

    pub(crate) fn count(&self, cpu: usize) -> u32 {
        self.lock_count[cpu].load(Ordering::SeqCst)
    }
}

impl Paravirt for Fake {
    fn this_cpu(&self) -> usize {
        CPU.with(Cell::get)
    }

    fn vcpu_is_preempted(&self, cpu: usize) -> bool {
        self.preempted[cpu].load(Ordering::SeqCst)
    }

    fn yield_to(&self, cpu: usize) -> YieldResult {
        self.yields.lock().unwrap().push((self.this_cpu(), cpu));
        if self.runs_target {
            self.preempt(cpu, false);
        }
        *self.answer.lock().unwrap()
    }

    fn lock_acquired(&self) {
        self.lock_count[self.this_cpu()].fetch_add(1, Ordering::SeqCst);
    }

    fn lock_released(&self) {
        self.lock_count[self.this_cpu()].fetch_sub(1, Ordering::SeqCst);
    }

    fn relax(&self) {
        if self.parks {
            let me = self.this_cpu();
            wait_for("the hypervisor to run a preempted CPU", || {
                !self.vcpu_is_preempted(me)
            });
        }
        // As HostYield: the host time-slices the threads.
        thread::yield_now();
    }

    fn can_halt(&self) -> bool {
        self.halts
    }

    /// Sleeps until kicked; gives up after [`WAIT_BOUND`] (counted), as
    /// the runtime's wait is bounded by a timer.
    fn wait(&self) {
        let me = self.this_cpu();
        self.sleeping[me].store(true, Ordering::SeqCst);
        let start = Instant::now();
        while !self.kicked[me].swap(false, Ordering::SeqCst) {
            if start.elapsed() > WAIT_BOUND {
                self.wait_timeouts.fetch_add(1, Ordering::SeqCst);
                break;
            }
            thread::sleep(Duration::from_micros(50));
        }
        self.sleeping[me].store(false, Ordering::SeqCst);
    }

    fn kick(&self, cpu: usize) -> Kick {
        self.kicks.lock().unwrap().push((self.this_cpu(), cpu));
        match self.kicked.get(cpu) {
            Some(kicked) => {
                kicked.store(true, Ordering::SeqCst);
                Kick::Kicked
            }
            None => Kick::Refused(-1),
        }
    }
}

/// How long the fake's wait() sleeps without a kick.
pub(crate) const WAIT_BOUND: Duration = Duration::from_secs(5);

/// What a critical section does to detect another thread inside: plain
/// (non-atomic) read-modify-writes, and a flag.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) a: u64,
    pub(crate) b: u64,
}

/// A lock over [`Counters`] that [`hammer`] can drive: the ticket lock
/// here, the queued lock in its own tests.
pub(crate) trait CountersLock: Sync {
    /// Runs `section` holding the lock, counting the wait in `stats`.
    fn with(&self, stats: &mut WaitStats, section: &mut dyn FnMut(&mut Counters));

    /// Whether nobody holds or waits for the lock.
    fn idle(&self) -> bool;
}

impl<P: Paravirt + Sync> CountersLock for TicketLock<Counters, P> {
    fn with(&self, stats: &mut WaitStats, section: &mut dyn FnMut(&mut Counters)) {
        section(&mut self.lock_counted(stats));
    }

    fn idle(&self) -> bool {
        !self.is_locked()
    }
}

/// `threads` threads take the lock `rounds` times each and update the
/// counters with plain read-modify-writes; nothing may be lost. Returns
/// the waits' statistics.
pub(crate) fn hammer(lock: &impl CountersLock, threads: usize, rounds: u64) -> WaitStats {
    let inside = AtomicBool::new(false);
    let stats = Mutex::new(WaitStats::default());
    let start = Barrier::new(threads);
    thread::scope(|s| {
        for cpu in 0..threads {
            let (inside, stats, start) = (&inside, &stats, &start);
            s.spawn(move || {
                become_cpu(cpu);
                let mut mine = WaitStats::default();
                start.wait();
                for _ in 0..rounds {
                    lock.with(&mut mine, &mut |g| {
                        assert!(!inside.swap(true, Ordering::Relaxed), "two threads inside");
                        let a = g.a;
                        // A window for another thread to come in, if it could.
                        for _ in 0..20 {
                            std::hint::black_box(&mut *g);
                        }
                        g.a = a + 1;
                        g.b += 1;
                        inside.store(false, Ordering::Relaxed);
                    });
                }
                *stats.lock().unwrap() += mine;
            });
        }
    });
    let total = threads as u64 * rounds;
    become_cpu(0);
    let mut seen = (0, 0);
    lock.with(&mut WaitStats::default(), &mut |g| seen = (g.a, g.b));
    assert_eq!(seen, (total, total), "lost updates");
    let stats = *stats.lock().unwrap();
    assert_eq!(stats.acquisitions, total);
    assert!(stats.contended <= total);
    assert!(lock.idle());
    stats
}

#[test]
fn plain_lock_excludes_and_loses_nothing() {
    let lock = TicketLock::with_paravirt(Counters::default(), HostYield);
    hammer(&lock, 6, 20_000);
    assert_eq!(lock.holder(), None, "a plain lock records no owner");
    // NoPv itself, with as many threads as there are cores.
    let lock = TicketLock::new(Counters::default());
    let cores = thread::available_parallelism().map_or(1, |n| n.get().min(4));
    hammer(&lock, cores, 5_000);
}

#[test]
fn pv_lock_excludes_and_loses_nothing_while_yielding() {
    // Every CPU reads as preempted and every yield is answered YIELDED:
    // the waiters yield all the time, and the lock must not care.
    let fake = Fake::new();
    for cpu in 0..CPUS {
        fake.preempt(cpu, true);
    }
    let lock = TicketLock::with_paravirt(Counters::default(), &fake);
    lock.set_spin_limit(1);
    // Two waiters that surely wait (the hammer's threads may not overlap
    // on a loaded host).
    become_cpu(3);
    let guard = lock.lock();
    thread::scope(|s| {
        for cpu in [4, 5] {
            let lock = &lock;
            s.spawn(move || {
                become_cpu(cpu);
                lock.lock().a += 1;
            });
        }
        wait_for("two waiters", || lock.queued() == 3);
        wait_for("a yield", || !fake.yields().is_empty());
        drop(guard);
    });
    lock.lock().a -= 2;
    hammer(&lock, 6, 10_000);
    let yields = fake.yields();
    assert!(!yields.is_empty(), "some waiter yielded");
    assert!(yields.iter().all(|&(from, to)| from != to && to < 6));
    for cpu in 0..CPUS {
        assert_eq!(fake.count(cpu), 0, "cpu {cpu}'s lock count after the run");
    }
}

#[test]
fn tickets_are_served_first_come_first_served() {
    let fake = Fake::new();
    let lock = TicketLock::with_paravirt(Vec::new(), &fake);
    become_cpu(0);
    let guard = lock.lock();
    assert_eq!(lock.holder(), Some(0));
    thread::scope(|s| {
        for cpu in 1..CPUS {
            let lock = &lock;
            s.spawn(move || {
                become_cpu(cpu);
                lock.lock().push(cpu);
            });
            // The next thread starts only once this one holds its ticket.
            wait_for("a ticket", || lock.queued() == cpu as u32 + 1);
        }
        drop(guard);
    });
    assert_eq!(lock.into_inner(), (1..CPUS).collect::<Vec<_>>());
}

#[test]
fn try_lock_only_takes_a_free_lock() {
    let lock = TicketLock::new(5u32);
    let guard = lock.try_lock().expect("free");
    assert!(lock.try_lock().is_none());
    assert_eq!(lock.queued(), 1);
    drop(guard);
    assert!(!lock.is_locked());
    *lock.try_lock().unwrap() += 1;
    assert_eq!(*lock.lock(), 6);

    // A waiter in the queue keeps try_lock out too.
    let lock = TicketLock::new(());
    let guard = lock.lock();
    thread::scope(|s| {
        s.spawn(|| drop(lock.lock()));
        wait_for("a waiter", || lock.queued() == 2);
        assert!(lock.try_lock().is_none());
        drop(guard);
    });
    assert!(lock.try_lock().is_some());
}

#[test]
fn tickets_wrap_around() {
    let lock = TicketLock::with_paravirt(0u64, Fake::new());
    lock.tickets.next.store(u32::MAX - 2, Ordering::Relaxed);
    lock.tickets.serving.store(u32::MAX - 2, Ordering::Relaxed);
    for _ in 0..6 {
        *lock.lock() += 1;
        assert!(!lock.is_locked());
    }
    assert_eq!(lock.tickets.serving.load(Ordering::Relaxed), 3);
    let guard = lock.try_lock().unwrap();
    assert_eq!(lock.holder(), Some(0));
    drop(guard);
    assert_eq!(lock.into_inner(), 6);
}

#[test]
fn a_waiter_yields_to_a_preempted_holder_and_only_then() {
    let fake = Fake::new();
    let lock = TicketLock::with_paravirt((), &fake);
    lock.set_spin_limit(8);
    become_cpu(0);

    // The holder runs: the waiter spins and asks nothing.
    let guard = lock.lock();
    let stats = thread::scope(|s| {
        let waiter = s.spawn(|| {
            become_cpu(1);
            let mut stats = WaitStats::default();
            drop(lock.lock_counted(&mut stats));
            stats
        });
        wait_for("the waiter", || lock.queued() == 2);
        thread::sleep(Duration::from_millis(20));
        drop(guard);
        waiter.join().unwrap()
    });
    assert!(fake.yields().is_empty());
    assert_eq!((stats.acquisitions, stats.contended), (1, 1));
    assert!(stats.spins > 8);
    assert_eq!(
        (stats.saw_preempted, stats.yield_calls, stats.yielded),
        (0, 0, 0)
    );

    // The holder is preempted: the waiter gives it its slice, again and
    // again (the fake does not run it), until the holder releases.
    let guard = lock.lock();
    fake.preempt(0, true);
    let stats = thread::scope(|s| {
        let waiter = s.spawn(|| {
            become_cpu(1);
            let mut stats = WaitStats::default();
            drop(lock.lock_counted(&mut stats));
            stats
        });
        wait_for("three yields", || fake.yields().len() >= 3);
        fake.preempt(0, false);
        drop(guard);
        waiter.join().unwrap()
    });
    let yields = fake.yields();
    assert!(yields.iter().all(|&y| y == (1, 0)), "{yields:?}");
    assert_eq!(stats.yield_calls, yields.len() as u64);
    assert_eq!(stats.yielded, stats.yield_calls);
    assert_eq!(stats.saw_preempted, stats.yield_calls);
    assert_eq!(stats.yield_refused, 0);
}

#[test]
fn a_waiter_yields_to_a_preempted_waiter_whose_turn_it_is() {
    // Lock-waiter preemption: CPU 0 holds, CPU 1 waits next but is
    // preempted, CPU 2 waits behind it. When CPU 0 releases, CPU 1's turn
    // comes while it cannot run; only CPU 2's yield gets it going again.
    let fake = Fake {
        runs_target: true,
        parks: true,
        ..Fake::new()
    };
    let lock = TicketLock::with_paravirt(Vec::new(), &fake);
    lock.set_spin_limit(16);
    become_cpu(0);
    let guard = lock.lock();
    fake.preempt(1, true);
    let stats = thread::scope(|s| {
        let lock = &lock;
        s.spawn(|| {
            become_cpu(1);
            lock.lock().push(1);
        });
        wait_for("CPU 1's ticket", || lock.queued() == 2);
        let third = s.spawn(|| {
            become_cpu(2);
            let mut stats = WaitStats::default();
            lock.lock_counted(&mut stats).push(2);
            stats
        });
        wait_for("CPU 2's ticket", || lock.queued() == 3);
        // CPU 0 runs, so CPU 2 has had nobody to yield to.
        assert!(fake.yields().is_empty());
        drop(guard);
        third.join().unwrap()
    });
    assert_eq!(fake.yields(), [(2, 1)]);
    assert_eq!((stats.yield_calls, stats.yielded), (1, 1));
    assert_eq!(lock.into_inner(), [1, 2]);
}

#[test]
fn answers_other_than_yielded_are_counted_apart() {
    for (answer, calls, yielded, refused) in [
        (YieldResult::NotYielded, 1, 0, 0),
        (YieldResult::Unavailable, 0, 0, 0),
        (YieldResult::UnknownVcpu, 1, 0, 1),
        (YieldResult::ToSelf, 1, 0, 1),
        (YieldResult::Refused(-2), 1, 0, 1),
    ] {
        let fake = Fake::new();
        *fake.answer.lock().unwrap() = answer;
        let lock = TicketLock::with_paravirt((), &fake);
        lock.set_spin_limit(1);
        become_cpu(0);
        let guard = lock.lock();
        fake.preempt(0, true);
        let stats = thread::scope(|s| {
            let waiter = s.spawn(|| {
                become_cpu(3);
                let mut stats = WaitStats::default();
                drop(lock.lock_counted(&mut stats));
                stats
            });
            wait_for("a look at the holder", || !fake.yields().is_empty());
            // Stop the waiter's looks before it makes another one.
            fake.preempt(0, false);
            drop(guard);
            waiter.join().unwrap()
        });
        let n = fake.yields().len() as u64;
        assert!(n >= 1);
        assert_eq!(stats.saw_preempted, n, "{answer:?}");
        assert_eq!(
            (stats.yield_calls, stats.yielded, stats.yield_refused),
            (calls * n, yielded * n, refused * n),
            "{answer:?}"
        );
    }
}

#[test]
fn the_holders_lock_count_covers_the_critical_section() {
    let fake = Fake::new();
    let a = TicketLock::with_paravirt((), &fake);
    let b = TicketLock::with_paravirt((), &fake);
    become_cpu(5);
    assert_eq!(fake.count(5), 0);
    let outer = a.lock();
    assert_eq!(fake.count(5), 1);
    let inner = b.try_lock().unwrap();
    assert_eq!(fake.count(5), 2);
    drop(inner);
    assert_eq!(fake.count(5), 1);
    drop(outer);
    assert_eq!(fake.count(5), 0);
    // The plain lock never touches a backend: there is none to touch.
    let plain = TicketLock::new(());
    drop(plain.lock());
    assert!(fake.yields().is_empty());
}

#[test]
fn the_holder_is_whoever_has_the_turn() {
    let fake = Fake::new();
    let lock = TicketLock::with_paravirt((), &fake);
    assert_eq!(lock.holder(), None);
    become_cpu(4);
    let guard = lock.lock();
    assert_eq!(lock.holder(), Some(4));
    assert!(format!("{lock:?}").contains("holder: Some(4)"));
    drop(guard);
    assert_eq!(lock.holder(), None);
    // A stale slot (ticket 0's) is not taken for ticket OWNER_SLOTS.
    lock.tickets
        .serving
        .store(OWNER_SLOTS as u32, Ordering::Relaxed);
    lock.tickets
        .next
        .store(OWNER_SLOTS as u32 + 1, Ordering::Relaxed);
    assert_eq!(lock.holder(), None);
    assert_eq!(lock.tickets.owner_of(0), Some(4));
}

#[test]
fn stats_add_up() {
    let mut a = WaitStats {
        acquisitions: 1,
        contended: 2,
        spins: 3,
        looks: 8,
        owner_unknown: 9,
        saw_preempted: 4,
        yield_calls: 5,
        yielded: 6,
        yield_refused: 7,
        halts: 10,
        steals: 11,
    };
    a += a;
    assert_eq!(
        a,
        WaitStats {
            acquisitions: 2,
            contended: 4,
            spins: 6,
            looks: 16,
            owner_unknown: 18,
            saw_preempted: 8,
            yield_calls: 10,
            yielded: 12,
            yield_refused: 14,
            halts: 20,
            steals: 22,
        }
    );
    assert_eq!(TicketLock::new(()).spin_limit(), DEFAULT_SPIN_LIMIT);
    let lock = TicketLock::new(());
    lock.set_spin_limit(0);
    assert_eq!(lock.spin_limit(), 1);
}
