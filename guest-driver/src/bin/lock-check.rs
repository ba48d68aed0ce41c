//! `lock-check`: every vCPU hammers one shared lock, the PV-aware ticket
//! lock (`guest_driver::lock`) or the plain one, then the guest checks the
//! shared data for lost updates, reports what the waits cost (directed
//! yields above all) and powers off.
//!
//! Command line (`/chosen/bootargs`; `guest_driver::lockcheck::Settings`):
//!
//! | word | meaning | default |
//! |---|---|---|
//! | `lock=pv\|ticket` | the PV-aware ticket lock (preempted flag, directed yield, lock count) or the plain ticket lock | `pv` |
//! | `iterations=N` | acquisitions per vCPU | 10000 |
//! | `cs-work=N` | mixing rounds inside the lock (about 7 instructions each) | 40 |
//! | `private-work=N` | mixing rounds between two acquisitions | 40 |
//! | `spin-limit=N` | PV lock: spins between two looks at the awaited vCPU's flag | 128 |
//! | `first-hold-ms=N` | each vCPU's first critical section lasts at least N ms: with more vCPUs than pCPUs and N above the hypervisor's time slice (el2: 4 ms), its holder is surely preempted inside it | 0 |
//! | `timeout=S` | seconds to wait for a vCPU to come online, and for the others once vCPU 0 is done | 60 |
//!
//! Each vCPU sets up its paravirtual records (`rt::pv::init_cpu`), waits
//! for the others, and then runs `iterations` times: take the lock, run
//! the critical section (`lockcheck::Shared::update`: two counters
//! incremented by plain loads and stores around a few hundred instructions
//! of work, and a marker of who is inside), release, do private work. The
//! waits of the PV lock look at the awaited vCPU's "preempted" flag every
//! `spin-limit` spins and, when it is set, give it the waiter's time slice
//! with PV_SCHED_YIELD_TO. At the end vCPU 0 checks the two counters
//! against vCPUs x iterations and that no critical section met another,
//! and that each vCPU's PV-lock record counted the lock it held
//! (`lock_count` 1 inside its first critical section with the PV lock, 0
//! with the plain one, 0 after its last). Without a PV-lock record or
//! without directed yield (no hypervisor) `lock=pv` says so
//! (`lockcheck::PV_UNAVAILABLE`) and waits like the plain lock.
//!
//! Output (every line starts with `lock-check:`; `guest_driver::lockcheck`
//! defines the lines `cargo xtask` judges):
//!
//! ```text
//! lock-check: 4 vCPUs, 64 MiB of RAM at 0x40000000, counter 62500000 Hz
//! lock-check: lock pv, 10000 iterations per vCPU, cs-work 40, private-work 40, spin-limit 128, first-hold-ms 10 (bootargs "lock=pv first-hold-ms=10")
//! lock-check: PV: SMCCC 1.1, KVM (features 0x00000000 0x00000000 0x00000007 0x00000001), PV-lock seed-v2, stolen time, no kick, directed yield
//! lock-check: vcpu 0: 10000 acquisitions, 9999 contended, 149983 looks (0 owner unknown, 20252 preempted), 20252 yield calls, 9603 yielded, worst wait 30.105 ms, in 2381.905 ms
//! ...
//! lock-check: data ok: 40000 acquisitions, 0 lost updates
//! lock-check: yields: 80150 calls, 38709 yielded
//! lock-check: 40000 acquisitions in 2383.237 ms: 16784 per second, worst wait 30.105 ms
//! lock-check: all checks passed
//! ```
//!
//! A failed check prints `lock-check: <what>: FAILED: <why>` and the run
//! ends with a `GUEST FATAL` line instead of `all checks passed`.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod guest {
    use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use core::time::Duration;

    use guest_driver::devicetree::MAX_CPUS;
    use guest_driver::lock::{Paravirt, TicketLock, WaitStats};
    use guest_driver::lockcheck::{
        self, ALL_PASSED, LockKind, PREFIX, PV_UNAVAILABLE, Settings, Shared, YieldLine,
    };
    use guest_driver::println;
    use guest_driver::pv::CpuInit;
    use guest_driver::rt::pv::RtParavirt;
    use guest_driver::rt::{self, pv, smp, time};
    use spin::Once;

    guest_driver::entry!(main, secondary_main);

    static SETTINGS: Once<Settings> = Once::new();
    /// The shared data behind each kind of lock; `lock=` picks one.
    static PV_LOCK: TicketLock<Shared, RtParavirt> =
        TicketLock::with_paravirt(Shared::new(), RtParavirt);
    static TICKET_LOCK: TicketLock<Shared> = TicketLock::new(Shared::new());
    /// A vCPU has set up its records and waits for GO.
    static READY: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
    /// Every vCPU is ready: start hammering.
    static GO: AtomicBool = AtomicBool::new(false);
    static RESULTS: [Once<VcpuResult>; MAX_CPUS] = [const { Once::new() }; MAX_CPUS];
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
            "{PREFIX} lock {}, {} iterations per vCPU, cs-work {}, private-work {}, spin-limit {}, \
             first-hold-ms {} (bootargs \"{}\")",
            s.lock.name(),
            s.iterations,
            s.cs_work,
            s.private_work,
            s.spin_limit,
            s.first_hold_ms,
            args.as_str()
        );
        let info = pv::init();
        println!("{PREFIX} PV: {info}");
        if s.lock == LockKind::Pv && !(info.lock.is_some() && info.directed_yield) {
            println!("{PV_UNAVAILABLE}: its waiters spin like the plain ticket lock's");
        }
        PV_LOCK.set_spin_limit(s.spin_limit);
        init_this_cpu(0);
        let timeout = Duration::from_secs(s.timeout_secs);
        for cpu in 1..vcpus {
            start_vcpu(cpu, timeout);
        }
        GO.store(true, Ordering::Release);
        let start = time::counter();
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

    fn secondary_main(cpu: usize) {
        init_this_cpu(cpu);
        READY[cpu].store(true, Ordering::Release);
        let timeout = Duration::from_secs(settings().timeout_secs);
        if time::wait_until(timeout, || GO.load(Ordering::Acquire)) {
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
            LockKind::Ticket => hammer(&TICKET_LOCK, cpu, s),
        };
        RESULTS[cpu].call_once(|| result);
    }

    /// One vCPU's run: `iterations` times the lock, the critical section
    /// and the private work.
    fn hammer<P: Paravirt>(lock: &TicketLock<Shared, P>, cpu: usize, s: &Settings) -> VcpuResult {
        let mut stats = WaitStats::default();
        let mut worst_wait = 0;
        let mut state = cpu as u64 + 1;
        let mut count_inside = 0;
        let hold = time::to_ticks(Duration::from_millis(s.first_hold_ms));
        let start = time::counter();
        for i in 0..s.iterations {
            let asked = time::counter();
            let mut shared = lock.lock_counted(&mut stats);
            let got = time::counter();
            worst_wait = worst_wait.max(got.wrapping_sub(asked));
            if i == 0 {
                count_inside = lock_count(cpu).unwrap_or(0);
                // Hold the lock across a slice expiry: the holder is then
                // preempted inside its critical section, and its waiters
                // on other pCPUs find it so.
                while time::counter().wrapping_sub(got) < hold {
                    core::hint::spin_loop();
                }
            }
            shared.update(cpu, s.cs_work);
            drop(shared);
            state = lockcheck::private_work(state, s.private_work);
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
                "{PREFIX} vcpu {cpu}: {} acquisitions, {} contended, {} looks ({} owner unknown, \
                 {} preempted), {} yield calls, {} yielded, worst wait {:.3} ms, in {:.3} ms",
                st.acquisitions,
                st.contended,
                st.looks,
                st.owner_unknown,
                st.saw_preempted,
                st.yield_calls,
                st.yielded,
                millis(r.worst_wait),
                millis(r.busy)
            );
            // The PV lock counts itself in the holder's record, the plain
            // one never touches it.
            let inside = u32::from(s.lock == LockKind::Pv);
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
            if st.acquisitions != s.iterations {
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
        let expected = vcpus as u64 * s.iterations;
        let check = match s.lock {
            LockKind::Pv => PV_LOCK.lock().check(expected),
            LockKind::Ticket => TICKET_LOCK.lock().check(expected),
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
        let secs = time::to_duration(elapsed).as_secs_f64();
        println!(
            "{PREFIX} {} acquisitions in {:.3} ms: {:.0} per second, worst wait {:.3} ms",
            total.acquisitions,
            millis(elapsed),
            if secs > 0.0 {
                total.acquisitions as f64 / secs
            } else {
                0.0
            },
            millis(worst_wait)
        );
    }
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "lock-check is a bare-metal guest; build it with `cargo xtask build` and boot it with \
         `cargo xtask run --guest lock-check --vcpus 4 --smp 2 --bootargs 'lock=pv'` (or \
         `--bare` without the hypervisor)"
    );
    std::process::exit(2);
}
