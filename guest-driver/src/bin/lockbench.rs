//! `lockbench`: every vCPU hammers one shared lock (the PV queued lock,
//! the PV ticket lock or the plain ticket lock of `guest_driver::lock`),
//! then the guest checks the shared data for lost updates, reports what
//! the waits cost (directed yields, sleeps, kicks) and the throughput, and
//! powers off. It is both the lock-contention boot test and the guest of
//! `cargo xtask bench`.
//!
//! Command line (`/chosen/bootargs`; `guest_driver::lockbench::Settings`
//! has the full table):
//!
//! | word | meaning | default |
//! |---|---|---|
//! | `lock=pv\|pv-ticket\|ticket` | the PV queued lock (yield to a preempted holder, sleep until kicked), the PV ticket lock (yield only), or the plain ticket lock | `pv` |
//! | `iterations=N` | acquisitions per vCPU | 10000 |
//! | `duration-ms=N` | instead: run until N ms of counter time passed | 0 (off) |
//! | `min-contended=N` / `max-duration-ms=M` | with `duration-ms`: go on past it until the vCPUs together made N contended acquisitions, at most until M ms | 0 / 0 (off) |
//! | `cs-work=N` / `private-work=N` | mixing rounds inside / between acquisitions (about 7 instructions each) | 40 / 40 |
//! | `spin-limit=N` | PV locks: spins between two looks at the awaited vCPU | 128 |
//! | `halt-after=N` | PV queued lock: looks before a waiter sleeps anyway | 64 |
//! | `steal=on\|off` | PV queued lock: newcomers take the lock past a waiter whose turn it is but who does not run | on |
//! | `first-hold-ms=N` | each vCPU's first critical section lasts at least N ms: with more vCPUs than pCPUs and N above the hypervisor's time slice (el2: 4 ms), its holder is surely preempted inside it | 0 |
//! | `long-holds=N` | how many of each vCPU's first critical sections last `first-hold-ms` | 1 |
//! | `costs=N` | first time N null hypercalls (vCPU 0 alone) and N directed-yield round trips between vCPUs 0 and 1 | 0 (off) |
//! | `seed=N` | perturb the run reproducibly: per-vCPU start offsets (up to 100 µs) and private work within ±10% per iteration, drawn from N; 0: none | 0 |
//! | `timeout=S` | seconds to wait for a vCPU to come online, and for the others once vCPU 0 is done | 60 |
//!
//! Each vCPU sets up its paravirtual records (`rt::pv::init_cpu`), waits
//! for the others, and then loops: take the lock, run the critical section
//! (`lockbench::Shared::update`: two counters incremented by plain loads
//! and stores around a few hundred instructions of work, and a marker of
//! who is inside), release, do private work. At the end vCPU 0 checks the
//! two counters against the acquisitions the vCPUs made and that no
//! critical section met another, and that each vCPU's PV-lock record
//! counted the lock it held (`lock_count` 1 inside its first critical
//! section with a PV lock, 0 with the plain one, 0 after its last).
//! Without a PV-lock record or without directed yield (no hypervisor) a
//! PV lock says so (`lockbench::PV_UNAVAILABLE`) and waits like a plain
//! one.
//!
//! Output (every line starts with `lockbench:`; `guest_driver::lockbench`
//! defines the lines `cargo xtask` reads):
//!
//! ```text
//! lockbench: 4 vCPUs, 64 MiB of RAM at 0x40000000, counter 62500000 Hz
//! lockbench: lock pv, 10000 iterations per vCPU, ... (bootargs "lock=pv")
//! lockbench: PV: SMCCC 1.1, KVM (...), PV-lock openeuler, stolen time, kick, directed yield
//! lockbench: vcpu 0: 10000 acquisitions, 9999 contended, 1498 looks (0 owner unknown, 202 preempted), 202 yield calls, 96 yielded, 310 halts, 7 steals, worst wait 30.105 ms, in 2381.905 ms
//! ...
//! lockbench: data ok: 40000 acquisitions, 0 lost updates
//! lockbench: yields: 801 calls, 387 yielded, 1240 halts, 1236 kicks
//! lockbench: 40000 acquisitions in 2383.237 ms: 16784 per second, worst wait 30.105 ms
//! lockbench: result: lock=pv vcpus=4 acquisitions=40000 contended=39996 elapsed-ns=2383237000 worst-wait-ns=30105000
//! lockbench: all checks passed
//! ```
//!
//! A failed check prints `lockbench: <what>: FAILED: <why>` and the run
//! ends with a `GUEST FATAL` line instead of `all checks passed`.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod guest {
    use core::ops::DerefMut;
    use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    use core::time::Duration;

    use guest_driver::devicetree::{Conduit as Method, MAX_CPUS};
    use guest_driver::gicv3::IntId;
    use guest_driver::lock::{Paravirt, QueuedLock, TicketLock, WaitStats};
    use guest_driver::lockbench::{
        self, ALL_PASSED, CostLine, LockKind, PREFIX, PV_UNAVAILABLE, ResultLine, Settings, Shared,
        VcpuLine, YieldLine,
    };
    use guest_driver::println;
    use guest_driver::pv::{Conduit, CpuInit, YieldResult};
    use guest_driver::rt::gic;
    use guest_driver::rt::pv::{RtParavirt, RtPlatform};
    use guest_driver::rt::{self, pv, smp, time};
    use pvlock_abi::arch::SMCCC_VERSION;
    use spin::Once;

    guest_driver::entry!(main, secondary_main);

    static SETTINGS: Once<Settings> = Once::new();
    /// The shared data behind each kind of lock; `lock=` picks one.
    static PV_LOCK: QueuedLock<Shared, RtParavirt> =
        QueuedLock::with_paravirt(Shared::new(), RtParavirt);
    static PV_TICKET_LOCK: TicketLock<Shared, RtParavirt> =
        TicketLock::with_paravirt(Shared::new(), RtParavirt);
    static TICKET_LOCK: TicketLock<Shared> = TicketLock::new(Shared::new());
    /// A vCPU has set up its records and waits for GO.
    static READY: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
    /// Every vCPU is ready: start hammering.
    static GO: AtomicBool = AtomicBool::new(false);
    /// The counter when vCPU 0 gave GO.
    static START: AtomicU64 = AtomicU64::new(0);
    /// vCPU 1 plays the other end of the directed-yield round trips while
    /// this is set, and counts its successful yields in PONG_YIELDS.
    static PING: AtomicBool = AtomicBool::new(false);
    static PONG_READY: AtomicBool = AtomicBool::new(false);
    static PONG_YIELDS: AtomicU64 = AtomicU64::new(0);
    static RESULTS: [Once<VcpuResult>; MAX_CPUS] = [const { Once::new() }; MAX_CPUS];
    /// With `min-contended`: each vCPU's contended acquisitions, published
    /// once its duration is over, so that every vCPU can tell whether the
    /// run has had enough hand-offs to stop.
    static CONTENDED: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
    static FAILURES: AtomicUsize = AtomicUsize::new(0);

    /// What one vCPU's run cost it.
    #[derive(Clone, Copy)]
    struct VcpuResult {
        stats: WaitStats,
        /// Its PV-lock record's `lock_count` inside its first critical
        /// section and after its last one; `None` without a record.
        lock_count: Option<(u32, u32)>,
        /// The longest wait for the lock, in counter ticks.
        worst_wait: u64,
        /// From its first acquisition to its last release plus private work.
        busy: u64,
        /// The counter when it finished.
        end: u64,
    }

    /// The three locks, as the workload sees them.
    trait BenchLock: Sync {
        type Guard<'a>: DerefMut<Target = Shared>
        where
            Self: 'a;

        fn take(&self, stats: &mut WaitStats) -> Self::Guard<'_>;

        /// Kicks its unlockers sent (the queued lock's only).
        fn kicks(&self) -> u64 {
            0
        }
    }

    impl<P: Paravirt + Sync> BenchLock for TicketLock<Shared, P> {
        type Guard<'a>
            = guest_driver::lock::TicketLockGuard<'a, Shared, P>
        where
            P: 'a;

        fn take(&self, stats: &mut WaitStats) -> Self::Guard<'_> {
            self.lock_counted(stats)
        }
    }

    impl<P: Paravirt + Sync> BenchLock for QueuedLock<Shared, P> {
        type Guard<'a>
            = guest_driver::lock::QueuedLockGuard<'a, Shared, P>
        where
            P: 'a;

        fn take(&self, stats: &mut WaitStats) -> Self::Guard<'_> {
            self.lock_counted(stats)
        }

        fn kicks(&self) -> u64 {
            self.kicks().0
        }
    }

    fn settings() -> &'static Settings {
        SETTINGS.get().expect("main parses the settings first")
    }

    fn fail(what: &str, why: core::fmt::Arguments) {
        println!("{PREFIX} {what}: FAILED: {why}");
        FAILURES.fetch_add(1, Ordering::Relaxed);
    }

    fn millis(ticks: u64) -> f64 {
        time::to_duration(ticks).as_secs_f64() * 1000.0
    }

    fn nanos(ticks: u64) -> u64 {
        u64::try_from(time::to_duration(ticks).as_nanos()).unwrap_or(u64::MAX)
    }

    fn main() {
        let machine = rt::machine();
        let vcpus = machine.cpus().len();
        println!(
            "{PREFIX} {vcpus} vCPUs, {} MiB of RAM at {:#x}, counter {} Hz",
            machine.memory_size() >> 20,
            machine.memory().first().map_or(0, |m| m.start),
            time::frequency()
        );
        let args = rt::bootargs();
        let s = match Settings::from_bootargs(&args) {
            Ok(s) => SETTINGS.call_once(|| s),
            Err(e) => rt::fatal(format_args!(
                "{PREFIX} bad bootargs \"{}\": {e}",
                args.as_str()
            )),
        };
        println!(
            "{PREFIX} lock {}, {}, cs-work {}, private-work {}, spin-limit {}, halt-after {}, \
             steal {}, first-hold-ms {}, long-holds {} (bootargs \"{}\")",
            s.lock.name(),
            RunLength(s),
            s.cs_work,
            s.private_work,
            s.spin_limit,
            s.halt_after,
            if s.steal { "on" } else { "off" },
            s.first_hold_ms,
            s.long_holds,
            args.as_str()
        );
        let info = pv::init();
        println!("{PREFIX} PV: {info}");
        if s.lock.is_paravirt() && !(info.lock.is_some() && info.directed_yield) {
            println!("{PV_UNAVAILABLE}: its waiters spin like the plain ticket lock's");
        }
        PV_LOCK.set_spin_limit(s.spin_limit);
        PV_LOCK.set_halt_after(s.halt_after);
        PV_LOCK.set_steal(s.steal);
        PV_TICKET_LOCK.set_spin_limit(s.spin_limit);
        if s.self_sgi > 0
            && let Err(e) = gic::init()
        {
            fail("self-sgi", format_args!("cannot set up the GIC: {e}"));
        }
        init_this_cpu(0);
        // Alone, so that no sibling's time slice lands in the figure.
        let hypercall_ticks = (s.costs > 0).then(|| time_hypercalls(s.costs));
        let timeout = Duration::from_secs(s.timeout_secs);
        for cpu in 1..vcpus {
            start_vcpu(cpu, timeout);
        }
        if let Some(hypercall_ticks) = hypercall_ticks {
            measure_yields(s.costs, vcpus, hypercall_ticks);
        }
        let start = time::counter();
        START.store(start, Ordering::Relaxed);
        GO.store(true, Ordering::Release);
        run(0);
        let all = time::wait_until(timeout, || {
            (0..vcpus).all(|cpu| RESULTS[cpu].is_completed() || !READY[cpu].load(Ordering::Acquire))
        });
        if !all {
            fail(
                "run",
                format_args!(
                    "not every vCPU finished within {} s of vCPU 0",
                    s.timeout_secs
                ),
            );
        }
        report(vcpus, start);
        let failures = FAILURES.load(Ordering::Relaxed);
        if failures > 0 {
            rt::fatal(format_args!(
                "{PREFIX} {failures} check(s) failed, see above"
            ));
        }
        println!("{ALL_PASSED}");
    }

    /// `10000 iterations per vCPU` or `for 200 ms`.
    struct RunLength<'a>(&'a Settings);

    impl core::fmt::Display for RunLength<'_> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            match self.0.duration_ms {
                0 => write!(f, "{} iterations per vCPU", self.0.iterations),
                ms => write!(f, "for {ms} ms"),
            }
        }
    }

    fn secondary_main(cpu: usize) {
        init_this_cpu(cpu);
        READY[cpu].store(true, Ordering::Release);
        let timeout = Duration::from_secs(settings().timeout_secs);
        let started = time::wait_until(timeout, || {
            if cpu == 1 && PING.load(Ordering::Acquire) {
                pong();
            }
            GO.load(Ordering::Acquire)
        });
        if started {
            run(cpu);
        } else {
            fail(
                "run",
                format_args!(
                    "vcpu {cpu}: vCPU 0 did not start the run within {} s",
                    timeout.as_secs()
                ),
            );
        }
    }

    /// Counter ticks of `rounds` SMCCC_VERSION calls: a hypercall that
    /// does nothing, so its time is the round trip into the hypervisor.
    fn time_hypercalls(rounds: u64) -> u64 {
        let hvc = guest_driver::rt::psci::conduit() == Method::Hvc;
        let start = time::counter();
        for _ in 0..rounds {
            if hvc {
                core::hint::black_box(bare_hvc(SMCCC_VERSION.raw()));
            } else {
                core::hint::black_box(RtPlatform.call(SMCCC_VERSION, [0; 3]));
            }
        }
        time::counter().wrapping_sub(start)
    }

    /// `HVC #0` with W0 = `function` and nothing else set up: the round trip
    /// itself, without the driver's general call path (which clears and
    /// reads back X1..X17). SMCCC 1.1 lets the callee change X0..X3 only.
    fn bare_hvc(function: u32) -> u64 {
        let x0: u64;
        // SAFETY: an SMCCC call through the conduit the device tree names
        // (checked by the caller); per SMCCC 1.1 it writes X0..X3 and
        // preserves every other register and memory the guest owns.
        unsafe {
            core::arch::asm!(
                "hvc #0",
                inout("x0") u64::from(function) => x0,
                lateout("x1") _,
                lateout("x2") _,
                lateout("x3") _,
                options(nostack),
            );
        }
        x0
    }

    /// vCPU 1's end of the round trips: yield back to vCPU 0 while PING.
    fn pong() {
        PONG_READY.store(true, Ordering::Release);
        while PING.load(Ordering::Acquire) {
            if pv::yield_to(0) == YieldResult::Yielded {
                PONG_YIELDS.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// `rounds` directed-yield round trips between vCPUs 0 and 1 (both on
    /// one pCPU for the figure to mean a vCPU switch), then the cost line.
    fn measure_yields(rounds: u64, vcpus: usize, hypercall_ticks: u64) {
        let mut line = CostLine {
            rounds,
            null_hypercall_ns: nanos(hypercall_ticks),
            yield_round_trip_ns: 0,
            yields: 0,
        };
        if vcpus >= 2 && pv::driver().is_some_and(|d| d.info().directed_yield) {
            PING.store(true, Ordering::Release);
            let timeout = Duration::from_secs(settings().timeout_secs);
            // vCPU 1 may wait on another pCPU: give it our slice first.
            let ready = time::wait_until(timeout, || {
                let _ = pv::yield_to(1);
                PONG_READY.load(Ordering::Acquire)
            });
            if !ready {
                fail("costs", format_args!("vcpu 1 never answered the yields"));
            }
            PONG_YIELDS.store(0, Ordering::Relaxed);
            let mut yields = 0;
            let start = time::counter();
            for _ in 0..rounds {
                yields += u64::from(pv::yield_to(1) == YieldResult::Yielded);
            }
            let ticks = time::counter().wrapping_sub(start);
            line.yields = yields + PONG_YIELDS.load(Ordering::Relaxed);
            line.yield_round_trip_ns = nanos(ticks);
            PING.store(false, Ordering::Release);
        }
        println!("{line}");
        if let Some(ns) = line.per_hypercall_ns() {
            println!("{PREFIX} null hypercall: {ns:.1} ns of counter time");
        }
        match line.per_switch_ns() {
            Some(ns) => println!(
                "{PREFIX} directed yield to a sibling: {ns:.1} ns of counter time per switch"
            ),
            None => println!("{PREFIX} directed yield to a sibling: not measured"),
        }
    }

    /// Starts `cpu` and waits until it is ready.
    fn start_vcpu(cpu: usize, timeout: Duration) {
        match smp::start(cpu) {
            Ok(started) if started.wait_entered(timeout) => {}
            Ok(_) => {
                return fail(
                    "start",
                    format_args!(
                        "vcpu {cpu} did not come online within {} s",
                        timeout.as_secs()
                    ),
                );
            }
            Err(e) => return fail("start", format_args!("vcpu {cpu}: CPU_ON failed with {e}")),
        }
        if !time::wait_until(timeout, || READY[cpu].load(Ordering::Acquire)) {
            fail(
                "start",
                format_args!(
                    "vcpu {cpu} did not set up its records within {} s",
                    timeout.as_secs()
                ),
            );
        }
    }

    /// The calling vCPU's paravirtual records; a service that is offered
    /// but cannot be set up is a failure.
    fn init_this_cpu(cpu: usize) {
        if settings().self_sgi > 0 {
            let sgi = IntId::from_raw(lockbench::SELF_SGI);
            let ready = gic::init_cpu().and_then(|c| {
                c.redistributor.configure(sgi, SELF_SGI_PRIORITY)?;
                c.redistributor.set_enabled(sgi, true)
            });
            if let Err(e) = ready {
                fail("self-sgi", format_args!("vcpu {cpu}: {e}"));
            }
        }
        let CpuInit { lock, steal_time } = pv::init_cpu();
        if let Err(e) = lock {
            fail("init_cpu", format_args!("vcpu {cpu}: PV-lock: {e}"));
        }
        if let Err(e) = steal_time {
            fail("init_cpu", format_args!("vcpu {cpu}: stolen time: {e}"));
        }
    }

    fn run(cpu: usize) {
        let s = settings();
        let result = match s.lock {
            LockKind::Pv => hammer(&PV_LOCK, cpu, s),
            LockKind::PvTicket => hammer(&PV_TICKET_LOCK, cpu, s),
            LockKind::Ticket => hammer(&TICKET_LOCK, cpu, s),
        };
        RESULTS[cpu].call_once(|| result);
    }

    /// One vCPU's run: the lock, the critical section and the private
    /// work, `iterations` times or until the run's deadline.
    fn hammer(lock: &impl BenchLock, cpu: usize, s: &Settings) -> VcpuResult {
        let mut stats = WaitStats::default();
        let mut worst_wait = 0;
        let mut state = cpu as u64 + 1;
        let mut perturb = lockbench::Perturbation::new(s, cpu);
        let mut count_inside = 0;
        let hold = time::to_ticks(Duration::from_millis(s.first_hold_ms));
        let after_start = |ms| {
            START
                .load(Ordering::Relaxed)
                .saturating_add(time::to_ticks(Duration::from_millis(ms)))
        };
        let (iterations, deadline) = match s.duration_ms {
            0 => (s.iterations, u64::MAX),
            ms => (u64::MAX, after_start(ms)),
        };
        // `min-contended`: the latest the run may go on past `deadline`.
        let last_deadline = after_start(s.max_duration_ms.max(s.duration_ms));
        // A perturbed run's start offset, before this vCPU's busy time.
        let offset = time::to_ticks(Duration::from_micros(perturb.start_offset_us()));
        let arrived = time::counter();
        while time::counter().wrapping_sub(arrived) < offset {
            core::hint::spin_loop();
        }
        let start = time::counter();
        let mut i = 0;
        // When this vCPU next looks whether the run may stop: at the
        // duration's end, then every CONTENDED_LOOK_US.
        let mut next_look = deadline;
        let look_ticks = time::to_ticks(Duration::from_micros(CONTENDED_LOOK_US));
        while i < iterations {
            // One compare per iteration; the look itself (a call and, with
            // `min-contended`, a sum over every CPU's count) only every
            // CONTENDED_LOOK_US.
            let asked = time::counter();
            if asked >= next_look {
                if run_may_stop(cpu, &stats, s, last_deadline) {
                    break;
                }
                next_look = asked.saturating_add(look_ticks);
            }
            let mut shared = lock.take(&mut stats);
            let got = time::counter();
            worst_wait = worst_wait.max(got.wrapping_sub(asked));
            if i == 0 {
                count_inside = lock_count(cpu).unwrap_or(0);
            }
            if i < s.long_holds {
                // Hold the lock across a slice expiry: the holder is then
                // preempted inside its critical section, and its waiters
                // on other pCPUs find it so.
                while time::counter().wrapping_sub(got) < hold {
                    core::hint::spin_loop();
                }
            }
            shared.update(cpu, s.cs_work);
            drop(shared);
            state = lockbench::private_work(state, perturb.private_work());
            i += 1;
            if s.self_sgi > 0 && i.is_multiple_of(s.self_sgi) {
                wake_self_with_sgi(cpu);
            }
        }
        core::hint::black_box(state);
        let end = time::counter();
        VcpuResult {
            stats,
            lock_count: lock_count(cpu).map(|after| (count_inside, after)),
            worst_wait,
            busy: end.wrapping_sub(start),
            end,
        }
    }

    /// How often (µs of counter time) a vCPU past its duration looks
    /// whether the run has had `min-contended` hand-offs. By time, not by
    /// iterations: a look every 8 iterations added about 30 instructions
    /// to an iteration of about 860 of a fast run (the PV lock at 1x,
    /// which never reaches its hand-offs, paid it for two thirds of its
    /// time), and a look every 128 let a slow one (the plain lock at 2x,
    /// one iteration per slice at worst) run on far past its hand-offs.
    const CONTENDED_LOOK_US: u64 = 50;

    /// Whether a vCPU past its duration ends the run now: at once without
    /// `min-contended`; with it, once the vCPUs together made that many
    /// contended acquisitions, or the run reached `last_deadline`. The loop
    /// asks every [`CONTENDED_LOOK_US`]; each time this vCPU's count is
    /// published first. A vCPU that has not passed its
    /// duration yet counts what it had published (0): the sum only
    /// undercounts, so a run never stops early.
    fn run_may_stop(cpu: usize, stats: &WaitStats, s: &Settings, last_deadline: u64) -> bool {
        if s.min_contended == 0 {
            return true;
        }
        CONTENDED[cpu].store(stats.contended, Ordering::Relaxed);
        if time::counter() >= last_deadline {
            return true;
        }
        let total: u64 = CONTENDED.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        total >= s.min_contended
    }

    /// Priority of the self-sent SGI (any value the priority mask lets
    /// through).
    const SELF_SGI_PRIORITY: u8 = 0x80;

    /// `self-sgi`: sends this vCPU SGI [`lockbench::SELF_SGI`] and waits
    /// for it with WFI (PSTATE.I stays masked: the SGI ends the WFI and is
    /// acknowledged by polling), so the hypervisor sees an interrupt the
    /// guest sent itself, a wake-up and a WFI that completes at once.
    fn wake_self_with_sgi(cpu: usize) {
        let sgi = IntId::from_raw(lockbench::SELF_SGI);
        if let Err(e) = gic::send_sgi(rt::machine().cpus()[cpu], sgi) {
            fail("self-sgi", format_args!("vcpu {cpu}: sending: {e}"));
            return;
        }
        let deadline = time::counter()
            .saturating_add(time::to_ticks(Duration::from_secs(settings().timeout_secs)));
        loop {
            match gic::acknowledge() {
                Some(intid) => {
                    gic::end_of_interrupt(intid);
                    if intid == sgi {
                        return;
                    }
                }
                None if time::counter() >= deadline => {
                    fail("self-sgi", format_args!("vcpu {cpu}: SGI never arrived"));
                    return;
                }
                None => time::wfi_until(deadline),
            }
        }
    }

    /// `cpu`'s PV-lock record's `lock_count`; `None` without a record.
    fn lock_count(cpu: usize) -> Option<u32> {
        let driver = pv::driver()?;
        driver.record_ipas(cpu).0?;
        Some(driver.lock_count(cpu))
    }

    /// Every vCPU's line, the data check, the yields and the throughput.
    fn report(vcpus: usize, start: u64) {
        let s = settings();
        let mut total = WaitStats::default();
        let (mut worst_wait, mut end) = (0, start);
        for (cpu, result) in RESULTS.iter().enumerate().take(vcpus) {
            let Some(r) = result.get() else {
                fail("run", format_args!("vcpu {cpu} did not report"));
                continue;
            };
            let st = r.stats;
            println!(
                "{}, {} looks ({} owner unknown, {} preempted), {} yield calls, {} yielded, {} \
                 halts, {} steals, worst wait {:.3} ms, in {:.3} ms",
                VcpuLine {
                    cpu: cpu as u64,
                    acquisitions: st.acquisitions,
                    contended: st.contended,
                },
                st.looks,
                st.owner_unknown,
                st.saw_preempted,
                st.yield_calls,
                st.yielded,
                st.halts,
                st.steals,
                millis(r.worst_wait),
                millis(r.busy)
            );
            // The PV locks count themselves in the holder's record, the
            // plain one never touches it. A vCPU that never got the lock
            // (a timed run that ended before it ran) has no "inside".
            let inside = u32::from(s.lock.is_paravirt() && st.acquisitions > 0);
            match r.lock_count {
                Some(counts) if counts != (inside, 0) => fail(
                    "lock count",
                    format_args!(
                        "vcpu {cpu}: lock_count {} inside the critical section and {} after it, \
                         expected {inside} and 0",
                        counts.0, counts.1
                    ),
                ),
                _ => {}
            }
            if s.duration_ms > 0 && st.acquisitions == 0 {
                fail(
                    "run",
                    format_args!(
                        "vcpu {cpu} never got the lock in the {} ms run: it did not take part",
                        s.duration_ms
                    ),
                );
            }
            if s.duration_ms == 0 && st.acquisitions != s.iterations {
                fail(
                    "run",
                    format_args!(
                        "vcpu {cpu} took the lock {} times, not {}",
                        st.acquisitions, s.iterations
                    ),
                );
            }
            total += st;
            worst_wait = worst_wait.max(r.worst_wait);
            end = end.max(r.end);
        }
        let (check, kicks) = match s.lock {
            LockKind::Pv => (PV_LOCK.lock().check(total.acquisitions), PV_LOCK.kicks().0),
            LockKind::PvTicket => (
                PV_TICKET_LOCK.lock().check(total.acquisitions),
                BenchLock::kicks(&PV_TICKET_LOCK),
            ),
            LockKind::Ticket => (
                TICKET_LOCK.lock().check(total.acquisitions),
                BenchLock::kicks(&TICKET_LOCK),
            ),
        };
        println!("{check}");
        if !check.passed() {
            FAILURES.fetch_add(1, Ordering::Relaxed);
        }
        println!(
            "{}",
            YieldLine {
                calls: total.yield_calls,
                yielded: total.yielded,
                halts: total.halts,
                kicks,
            }
        );
        if total.yield_refused > 0 {
            fail(
                "yields",
                format_args!(
                    "{} directed-yield calls answered neither YIELDED nor NOT_YIELDED",
                    total.yield_refused
                ),
            );
        }
        let elapsed = end.wrapping_sub(start);
        let result = ResultLine {
            lock: s.lock,
            vcpus: vcpus as u64,
            acquisitions: total.acquisitions,
            contended: total.contended,
            elapsed_ns: nanos(elapsed),
            worst_wait_ns: nanos(worst_wait),
        };
        println!(
            "{PREFIX} {} acquisitions in {:.3} ms: {:.0} per second, worst wait {:.3} ms",
            total.acquisitions,
            millis(elapsed),
            result.per_second(),
            millis(worst_wait)
        );
        println!("{result}");
    }
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "lockbench is a bare-metal guest; build it with `cargo xtask build` and boot it with \
         `cargo xtask run --guest lockbench --vcpus 4 --smp 2 --bootargs 'lock=pv'` (or \
         `--bare` without the hypervisor)"
    );
    std::process::exit(2);
}
