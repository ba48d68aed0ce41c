//! `irq-check`: proves the (virtual) GICv3 a guest is given end to end,
//! with the runtime's polling driver (`guest_driver::rt::gic`: PSTATE.I
//! stays masked, WFI waits, ICC_IAR1_EL1 acknowledges, ICC_EOIR1_EL1
//! completes), and powers off.
//!
//! Command line (`/chosen/bootargs`; `guest_driver::irqcheck::Settings`):
//!
//! | word | meaning | default |
//! |---|---|---|
//! | `rounds=N` | times the token goes around the ring (1..=1000000) | 200 |
//! | `timeout=S` | seconds each check (and each wait for a vCPU) may take (1..=3600) | 60 |
//! | `ping=N` | round trips of the ping check (0..=10000; 0 leaves it out) | 0 |
//!
//! The GIC's frames, the virtual timer's PPI and the UART's SPI come from
//! the device tree (`intc@...`, `/timer`'s third `interrupts` entry, the
//! console PL011's `interrupts`). The checks, in order (each prints
//! `irq-check: <label>: ok` or `irq-check: <label>: FAILED: <why>`;
//! `guest_driver::irqcheck::Label` lists them):
//!
//! 1. **burst** (vCPU 0, alone): SGIs 0..=11 get 12 distinct priorities
//!    (`irqcheck::burst_priorities`, steps the CPU interface tells apart),
//!    are sent to vCPU 0 itself in INTID order, least urgent first, and
//!    are acknowledged by polling: each exactly once, most urgent first,
//!    none missing, nothing else, also in the quiet window after the
//!    twelfth. Twelve interrupts are three times the four list registers
//!    of QEMU's CPUs: a hypervisor must refill them while the guest takes
//!    them. The guest spins on ICC_IAR1_EL1 without WFI or any other trap,
//!    so the rest come in only when the hypervisor refills the list
//!    registers by itself: on their underflow maintenance interrupt (or at
//!    an exit of its own, such as a time-slice tick, which would show as
//!    a long wait in the pass line);
//! 2. **timer** (vCPU 0): the virtual timer's PPI, enabled with its
//!    pending state cleared, and CNTV armed 2 ms ahead; WFI until the
//!    deadline, then polling, until ICC_IAR1_EL1 returns the PPI, which
//!    must not be before the deadline; then the timer is disabled
//!    (CNTV_CTL_EL0 = 0) and the PPI completed and disabled again;
//! 3. **ring** (every vCPU, the secondaries started with PSCI CPU_ON): a
//!    token, SGI 1, goes around the vCPUs `rounds` times: each vCPU waits
//!    for it (WFI, with the virtual timer armed at the check's deadline
//!    only so a lost token cannot hang it; its PPI stays disabled) and
//!    passes it to the next; each must receive it exactly `rounds` times
//!    (`irq-check: ring: vcpu N received R tokens`, also counting any that
//!    come in a quiet window after the ring) before the deadline. With
//!    more vCPUs than pCPUs the hypervisor wakes blocked vCPUs and kicks
//!    running ones on other pCPUs;
//! 4. **spi**: vCPU 0 routes the UART's SPI (GICD_IROUTER) to the last
//!    vCPU's MPIDR, reads the route back and enables it; the last vCPU
//!    unmasks the UART's transmit interrupt (UARTIMSC.TXIM, under the
//!    console lock; with the transmit FIFO empty it is asserted at once)
//!    and waits for the SPI. Meanwhile vCPU 0 polls its own ICC_IAR1_EL1
//!    for 2 ms and must not get it. Then the target restores UARTIMSC
//!    exactly, completes the SPI, and must not get it again in a quiet
//!    window (the line is low). With one vCPU, vCPU 0 is the target and
//!    there is no one else to check.
//! 5. **ping** (with `ping=N`, at least two vCPUs): vCPU 0 sends SGI 2 to
//!    vCPU 1, which waits for it in WFI and answers with SGI 2, for which
//!    vCPU 0 waits in WFI: N round trips, each timed by vCPU 0 with the
//!    counter, 1 ms apart (vCPU 0 rests in WFI on its virtual timer in
//!    between, so that the pair asks for less than its share), after a
//!    100 ms warm-up. Meanwhile every other vCPU computes without a break
//!    (no WFI, no YIELD), so with more vCPUs than pCPUs each wake-up
//!    competes with them for a pCPU and the round trip measures the
//!    hypervisor's wake-up latency. The pass line gives the median and the
//!    worst round trip, and of how late vCPU 0 ran again after each rest's
//!    timer deadline (`irqcheck::PingReport`); judging them is the
//!    caller's.
//!
//! Every interrupt a check did not ask for is completed and reported.
//! The run ends with `irq-check: all checks passed`, or a `GUEST FATAL`
//! line counting the failures; either way the guest powers off.
//!
//! ```text
//! irq-check: 4 vCPUs, GICv3 distributor 0x8000000, redistributors 0x80a0000 (512 KiB), virtual timer INTID 27, UART INTID 33, counter 62500000 Hz
//! irq-check: rounds=200 timeout=60 (bootargs "rounds=200"), 5 priority bits
//! irq-check: burst: ok (8 6 10 4 11 7 5 9 2 0 3 1, longest wait 150.5 us)
//! irq-check: timer: ok (INTID 27 2.092 ms after the deadline; the last WFI ended 2.063 ms after it)
//! irq-check: ring: vcpu 0 received 200 tokens
//! ...
//! irq-check: ring: ok (800 hand-offs in 93.4 ms, 116.8 us each)
//! irq-check: spi: ok (INTID 33 reached vcpu 3 (mpidr 0.0.0.3) 0.016 ms after TXIM was unmasked; vcpu 0 saw nothing in 2 ms; not again after TXIM was masked)
//! irq-check: all checks passed
//! ```
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod guest {
    use core::fmt;
    use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
    use core::time::Duration;

    use aarch64_cpu::registers::{CNTV_CTL_EL0, CNTV_CVAL_EL0};
    use spin::Once;
    use tock_registers::interfaces::Writeable;

    use guest_driver::devicetree::MAX_CPUS;
    use guest_driver::gicv3::{Distributor, IntId};
    use guest_driver::irqcheck::{
        self, ALL_PASSED, BurstLog, CHECK_PRIORITY, Label, MAX_PING, PING_GAP, PING_SGI,
        PING_WARM_UP, PREFIX, PingReport, QUIET_WINDOW, RING_SGI, RingCount, SPI_WATCH, Settings,
        Spread, TIMER_DELAY,
    };
    use guest_driver::lock::cpu_relax;
    use guest_driver::mpidr::Mpidr;
    use guest_driver::println;
    use guest_driver::rt::console::{self, Interrupts};
    use guest_driver::rt::gic::{self, CpuInterface};
    use guest_driver::rt::{self, smp, time};

    guest_driver::entry!(main, secondary_main);

    static SETTINGS: Once<Settings> = Once::new();
    /// Checks that failed so far.
    static FAILURES: AtomicUsize = AtomicUsize::new(0);

    fn settings() -> &'static Settings {
        SETTINGS.get().expect("main parses the settings first")
    }

    fn mpidr_of(cpu: usize) -> Mpidr {
        rt::machine().cpus()[cpu]
    }

    // ---- Reporting -----------------------------------------------------

    /// Prints `<label>: ok (<detail>)`.
    fn pass(label: Label, detail: fmt::Arguments) {
        println!("{label}: ok ({detail})");
    }

    /// Prints `<label>: FAILED: <why>` and counts it.
    fn fail(label: Label, why: fmt::Arguments) {
        println!("{label}: FAILED: {why}");
        FAILURES.fetch_add(1, Ordering::Relaxed);
    }

    fn micros(ticks: u64) -> f64 {
        time::to_duration(ticks).as_secs_f64() * 1e6
    }

    fn millis(ticks: u64) -> f64 {
        time::to_duration(ticks).as_secs_f64() * 1e3
    }

    /// The counter value `timeout` from now.
    fn deadline_after(timeout: Duration) -> u64 {
        time::counter().saturating_add(time::to_ticks(timeout))
    }

    /// Interrupts a check took that it did not ask for.
    #[derive(Clone, Copy, Default)]
    struct Strays {
        count: u64,
        last: Option<IntId>,
    }

    impl Strays {
        fn record(&mut self, intid: IntId) {
            self.count += 1;
            self.last = Some(intid);
        }
    }

    impl fmt::Display for Strays {
        /// `; also took 3 other interrupt(s), the last INTID 27`, or nothing.
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self.last {
                Some(last) => write!(
                    f,
                    "; also took {} other interrupt(s), the last INTID {last}",
                    self.count
                ),
                None => Ok(()),
            }
        }
    }

    // ---- Waiting for interrupts ----------------------------------------

    /// Waits for an interrupt and acknowledges it; `None` once the counter
    /// reaches `deadline`. Each wait is a WFI with the virtual timer armed
    /// at `deadline` (its PPI disabled in the GIC), so that the hypervisor
    /// ends it then at the latest.
    fn wait_for_interrupt(deadline: u64) -> Option<IntId> {
        loop {
            if let Some(intid) = gic::acknowledge() {
                return Some(intid);
            }
            if time::counter() >= deadline {
                return None;
            }
            time::wfi_until(deadline);
        }
    }

    /// Polls ICC_IAR1_EL1 for `window` without WFI, completing whatever
    /// arrives and handing it to `took`.
    fn poll_for(window: Duration, mut took: impl FnMut(IntId)) {
        let end = deadline_after(window);
        while time::counter() < end {
            match gic::acknowledge() {
                Some(intid) => {
                    gic::end_of_interrupt(intid);
                    took(intid);
                }
                None => cpu_relax(),
            }
        }
    }

    // ---- main ----------------------------------------------------------

    fn main() {
        let machine = rt::machine();
        let vcpus = machine.cpus().len();
        let args = rt::bootargs();
        let settings = match Settings::from_bootargs(&args) {
            Ok(s) => SETTINGS.call_once(|| s),
            Err(e) => rt::fatal(format_args!(
                "{PREFIX} bad bootargs \"{}\": {e}",
                args.as_str()
            )),
        };
        let (Some(gic_node), Some(timer), Some(uart)) =
            (machine.gic, machine.virtual_timer_irq, machine.uart_irq)
        else {
            rt::fatal(format_args!(
                "{PREFIX} the device tree names no GICv3, or not the virtual timer's or the \
                 UART's interrupt on it (gic {:?}, timer {:?}, uart {:?})",
                machine.gic, machine.virtual_timer_irq, machine.uart_irq
            ))
        };
        let regions = gic_node.redistributor_regions();
        println!(
            "{PREFIX} {vcpus} vCPUs, GICv3 distributor {:#x}, redistributors {:#x} ({} KiB{}), \
             virtual timer INTID {timer}, UART INTID {uart}, counter {} Hz",
            gic_node.distributor.start,
            regions[0].start,
            regions[0].size >> 10,
            if regions.len() > 1 {
                " and more regions"
            } else {
                ""
            },
            time::frequency()
        );
        let distributor = match gic::init() {
            Ok(d) => d,
            Err(e) => rt::fatal(format_args!("{PREFIX} cannot set up the GIC: {e}")),
        };
        let cpu = match gic::init_cpu() {
            Ok(c) => c,
            Err(e) => rt::fatal(format_args!("{PREFIX} vcpu 0: cannot set up the GIC: {e}")),
        };
        println!(
            "{PREFIX} {settings} (bootargs \"{}\"), {} priority bits",
            args.as_str(),
            cpu.priority_bits
        );
        check_burst(&cpu);
        check_timer(&cpu, timer);
        let all_ready = start_secondaries(vcpus);
        check_ring(&cpu, vcpus, all_ready);
        check_spi(distributor, vcpus, uart);
        if settings.ping > 0 {
            check_ping(&cpu, vcpus, all_ready);
        }
        let timeout = settings.timeout();
        if !time::wait_until(timeout, || {
            (1..vcpus).all(|c| FINISHED[c].load(Ordering::Acquire))
        }) {
            println!(
                "{PREFIX} not every vCPU finished within {} s",
                timeout.as_secs()
            );
            FAILURES.fetch_add(1, Ordering::Relaxed);
        }
        let failures = FAILURES.load(Ordering::Relaxed);
        if failures > 0 {
            rt::fatal(format_args!(
                "{PREFIX} {failures} check(s) failed, see above"
            ));
        }
        println!("{ALL_PASSED}");
    }

    // ---- 1. The burst --------------------------------------------------

    fn check_burst(cpu: &CpuInterface) {
        let label = Label::Burst;
        let priorities = match irqcheck::burst_priorities(cpu.priority_bits) {
            Ok(p) => p,
            Err(e) => return fail(label, format_args!("{e}")),
        };
        let redistributor = &cpu.redistributor;
        for &(sgi, priority) in &priorities {
            let set_up = redistributor
                .configure(sgi, priority)
                .and_then(|()| redistributor.set_enabled(sgi, true))
                .and_then(|()| redistributor.priority(sgi));
            match set_up {
                Ok(read) if read == priority => {}
                Ok(read) => {
                    return fail(
                        label,
                        format_args!(
                            "GICR_IPRIORITYR of SGI {sgi} reads {read:#x} after writing \
                             {priority:#x}"
                        ),
                    );
                }
                Err(e) => return fail(label, format_args!("setting up SGI {sgi}: {e}")),
            }
        }
        let me = mpidr_of(0);
        for &(sgi, _) in &priorities {
            if let Err(e) = gic::send_sgi(me, sgi) {
                return fail(label, format_args!("sending SGI {sgi}: {e}"));
            }
        }
        // Spin on ICC_IAR1_EL1, no WFI: only the hypervisor's refill of
        // the list registers can bring in the SGIs beyond the first four.
        let mut log = BurstLog::new();
        let start = time::counter();
        let deadline = deadline_after(settings().timeout());
        let (mut last, mut longest_wait) = (start, 0);
        while !log.full() && time::counter() < deadline {
            match gic::acknowledge() {
                Some(intid) => {
                    let now = time::counter();
                    longest_wait = longest_wait.max(now - last);
                    last = now;
                    gic::end_of_interrupt(intid);
                    log.record(intid);
                }
                None => cpu_relax(),
            }
        }
        let timed_out = !log.full();
        poll_for(QUIET_WINDOW, |intid| log.record(intid));
        for &(sgi, _) in &priorities {
            if let Err(e) = redistributor.set_enabled(sgi, false) {
                return fail(label, format_args!("disabling SGI {sgi}: {e}"));
            }
        }
        match log.judge() {
            Ok(()) => pass(
                label,
                format_args!("{log}, longest wait {:.1} us", micros(longest_wait)),
            ),
            Err(e) => fail(
                label,
                format_args!(
                    "{e}; acknowledged in order: {log}{}",
                    if timed_out {
                        " (gave up waiting for the rest)"
                    } else {
                        ""
                    }
                ),
            ),
        }
    }

    // ---- 2. The virtual timer ------------------------------------------

    fn check_timer(cpu: &CpuInterface, timer: IntId) {
        let label = Label::Timer;
        let redistributor = &cpu.redistributor;
        CNTV_CTL_EL0.set(0);
        // Start clean: nothing left pending from an earlier timer expiry.
        let set_up = redistributor
            .set_enabled(timer, false)
            .and_then(|()| redistributor.clear_pending(timer))
            .and_then(|()| redistributor.configure(timer, CHECK_PRIORITY))
            .and_then(|()| redistributor.set_enabled(timer, true));
        if let Err(e) = set_up {
            return fail(label, format_args!("setting up INTID {timer}: {e}"));
        }
        let armed = time::counter();
        let due = armed + time::to_ticks(TIMER_DELAY);
        let give_up = deadline_after(settings().timeout());
        CNTV_CVAL_EL0.set(due);
        CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::SET + CNTV_CTL_EL0::IMASK::CLEAR);
        let mut strays = Strays::default();
        // When the last WFI ended: how late the wake-up was, beside how
        // late the interrupt was.
        let mut woke = armed;
        let arrived = loop {
            match gic::acknowledge() {
                Some(intid) if intid == timer => break Some(time::counter()),
                Some(other) => {
                    gic::end_of_interrupt(other);
                    strays.record(other);
                }
                None if time::counter() >= give_up => break None,
                // The hypervisor ends the WFI at the deadline, when the
                // interrupt becomes pending.
                None if time::counter() < due => {
                    aarch64_cpu::asm::wfi();
                    woke = time::counter();
                }
                // Past the deadline a WFI could block for good if the
                // interrupt were lost: poll instead, bounded by give_up.
                None => cpu_relax(),
            }
        };
        CNTV_CTL_EL0.set(0);
        if arrived.is_some() {
            gic::end_of_interrupt(timer);
        }
        let tidy = redistributor
            .set_enabled(timer, false)
            .and_then(|()| redistributor.clear_pending(timer));
        match (arrived, tidy) {
            (None, _) => fail(
                label,
                format_args!(
                    "INTID {timer} did not arrive within {} s of arming the timer{strays}",
                    settings().timeout_secs
                ),
            ),
            (Some(at), _) if at < due => fail(
                label,
                format_args!(
                    "INTID {timer} arrived {:.3} ms before the timer's deadline{strays}",
                    millis(due - at)
                ),
            ),
            (Some(_), Err(e)) => fail(label, format_args!("disabling INTID {timer}: {e}")),
            (Some(_), Ok(())) if strays.count > 0 => {
                fail(label, format_args!("INTID {timer} arrived{strays}"))
            }
            (Some(at), Ok(())) => pass(
                label,
                format_args!(
                    "INTID {timer} {:.3} ms after the deadline; the last WFI ended {:.3} ms {}",
                    millis(at - due),
                    millis(woke.abs_diff(due)),
                    if woke >= due { "after it" } else { "before it" }
                ),
            ),
        }
    }

    // ---- Secondaries -----------------------------------------------------

    const NOT_READY: u8 = 0;
    const READY: u8 = 1;
    const SETUP_FAILED: u8 = 2;
    /// Each secondary's state once started: its GIC set up (ring SGI
    /// enabled) or not.
    static STATE: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(NOT_READY) }; MAX_CPUS];
    /// Each secondary is done (and about to call CPU_OFF).
    static FINISHED: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

    const RING_WAIT: u8 = 0;
    const RING_GO: u8 = 1;
    const RING_CANCELLED: u8 = 2;
    /// Set by vCPU 0 once every vCPU is ready (or one is not).
    static RING: AtomicU8 = AtomicU8::new(RING_WAIT);

    /// Starts every secondary and waits until each has set up its GIC.
    /// False if one did not.
    fn start_secondaries(vcpus: usize) -> bool {
        let timeout = settings().timeout();
        let mut all = true;
        for (cpu, state) in STATE.iter().enumerate().take(vcpus).skip(1) {
            let ready = match smp::start(cpu) {
                Err(e) => Err(Why::Psci(e)),
                Ok(started) if !started.wait_entered(timeout) => {
                    Err(Why::Text("did not come online"))
                }
                Ok(_) => {
                    time::wait_until(timeout, || state.load(Ordering::Acquire) != NOT_READY);
                    match state.load(Ordering::Acquire) {
                        READY => Ok(()),
                        SETUP_FAILED => Err(Why::Text("could not set up its GIC")),
                        _ => Err(Why::Text("did not set up its GIC in time")),
                    }
                }
            };
            if let Err(why) = ready {
                println!("{PREFIX} vcpu {cpu} (mpidr {}): {why}", mpidr_of(cpu));
                all = false;
            }
        }
        all
    }

    fn secondary_main(cpu: usize) {
        let set_up = gic::init_cpu().and_then(|c| {
            for sgi in [RING_SGI, PING_SGI] {
                c.redistributor.configure(sgi, CHECK_PRIORITY)?;
                c.redistributor.set_enabled(sgi, true)?;
            }
            Ok(c)
        });
        match set_up {
            Ok(_) => STATE[cpu].store(READY, Ordering::Release),
            Err(e) => {
                println!("{PREFIX} vcpu {cpu}: cannot set up the GIC: {e}");
                STATE[cpu].store(SETUP_FAILED, Ordering::Release);
                FINISHED[cpu].store(true, Ordering::Release);
                return;
            }
        }
        let timeout = settings().timeout();
        time::wait_until(timeout, || RING.load(Ordering::Acquire) != RING_WAIT);
        if RING.load(Ordering::Acquire) == RING_GO {
            ring_member(cpu, smp::count());
            if time::wait_until(timeout, || RING_ALL_DONE.load(Ordering::Acquire)) {
                ring_drain(cpu);
            }
        }
        if cpu + 1 == smp::count() {
            spi_target_on_secondary(cpu);
        }
        if settings().ping > 0 {
            ping_member(cpu);
        }
        FINISHED[cpu].store(true, Ordering::Release);
    }

    /// Why [`start_secondaries`] could not use a vCPU.
    enum Why {
        Text(&'static str),
        Psci(rt::psci::PsciError),
    }

    impl fmt::Display for Why {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Why::Text(t) => f.write_str(t),
                Why::Psci(e) => write!(f, "CPU_ON failed with {e}"),
            }
        }
    }

    // ---- 3. The ring -----------------------------------------------------

    /// When the ring must be over (counter ticks).
    static RING_DEADLINE: AtomicU64 = AtomicU64::new(0);
    /// Tokens each vCPU received.
    static TOKENS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
    /// Each vCPU finished its rounds, or gave up.
    static RING_DONE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
    /// Each vCPU gave up waiting for the token at the deadline.
    static RING_TIMED_OUT: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
    /// Each vCPU could not send the token on.
    static RING_SEND_FAILED: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
    /// Set by vCPU 0 once every vCPU is done: time for the quiet window.
    static RING_ALL_DONE: AtomicBool = AtomicBool::new(false);
    /// Each vCPU finished its quiet window.
    static DRAINED: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
    /// Interrupts other than the ring's SGI each vCPU took in the ring,
    /// and the last one (raw INTID; [`NO_INTID`] for none).
    static STRAY_COUNT: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
    static STRAY_LAST: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(NO_INTID) }; MAX_CPUS];
    const NO_INTID: u32 = u32::MAX;

    fn record_stray(cpu: usize, intid: IntId) {
        STRAY_COUNT[cpu].fetch_add(1, Ordering::Relaxed);
        STRAY_LAST[cpu].store(intid.raw(), Ordering::Relaxed);
    }

    /// vCPU `cpu`'s part of the ring: receive the token `rounds` times,
    /// passing it on after each (vCPU 0 starts it, and keeps the last).
    fn ring_member(cpu: usize, vcpus: usize) {
        let rounds = settings().rounds;
        let deadline = RING_DEADLINE.load(Ordering::Acquire);
        let successor = mpidr_of(irqcheck::ring_successor(cpu, vcpus));
        let pass_on = || {
            if gic::send_sgi(successor, RING_SGI).is_err() {
                RING_SEND_FAILED[cpu].store(true, Ordering::Relaxed);
            }
        };
        if cpu == 0 {
            pass_on();
        }
        let mut received = 0;
        while received < rounds {
            match wait_for_interrupt(deadline) {
                Some(intid) if intid == RING_SGI => {
                    gic::end_of_interrupt(intid);
                    received += 1;
                    TOKENS[cpu].store(received, Ordering::Relaxed);
                    if cpu != 0 || received < rounds {
                        pass_on();
                    }
                }
                Some(other) => {
                    gic::end_of_interrupt(other);
                    record_stray(cpu, other);
                }
                None => {
                    RING_TIMED_OUT[cpu].store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
        RING_DONE[cpu].store(true, Ordering::Release);
    }

    /// After the ring: a token that comes now was delivered twice.
    fn ring_drain(cpu: usize) {
        poll_for(QUIET_WINDOW, |intid| {
            if intid == RING_SGI {
                TOKENS[cpu].fetch_add(1, Ordering::Relaxed);
            } else {
                record_stray(cpu, intid);
            }
        });
        DRAINED[cpu].store(true, Ordering::Release);
    }

    fn check_ring(cpu: &CpuInterface, vcpus: usize, all_ready: bool) {
        let label = Label::Ring;
        let set_up = cpu
            .redistributor
            .configure(RING_SGI, CHECK_PRIORITY)
            .and_then(|()| cpu.redistributor.set_enabled(RING_SGI, true));
        if !all_ready || set_up.is_err() {
            RING.store(RING_CANCELLED, Ordering::Release);
            return match set_up {
                Err(e) => fail(label, format_args!("setting up SGI {RING_SGI}: {e}")),
                Ok(()) => fail(label, format_args!("not every vCPU came up, see above")),
            };
        }
        let timeout = settings().timeout();
        let start = time::counter();
        RING_DEADLINE.store(deadline_after(timeout), Ordering::Release);
        RING.store(RING_GO, Ordering::Release);
        ring_member(0, vcpus);
        let all_done = time::wait_until(timeout, || {
            (0..vcpus).all(|c| RING_DONE[c].load(Ordering::Acquire))
        });
        let elapsed = time::counter() - start;
        RING_ALL_DONE.store(true, Ordering::Release);
        ring_drain(0);
        let all_drained = time::wait_until(timeout, || {
            (0..vcpus).all(|c| DRAINED[c].load(Ordering::Acquire))
        });
        let rounds = settings().rounds;
        let mut wrong = 0;
        for (vcpu, tokens) in TOKENS.iter().enumerate().take(vcpus) {
            let count = RingCount {
                vcpu,
                tokens: tokens.load(Ordering::Relaxed),
            };
            println!("{count}");
            if count.tokens != rounds {
                wrong += 1;
            }
        }
        let problem = |v: &[AtomicBool]| (0..vcpus).find(|&c| v[c].load(Ordering::Relaxed));
        let stray = (0..vcpus).find(|&c| STRAY_COUNT[c].load(Ordering::Relaxed) > 0);
        if let Some(c) = problem(&RING_SEND_FAILED) {
            fail(
                label,
                format_args!("vcpu {c} could not send SGI {RING_SGI}"),
            );
        } else if let Some(c) = problem(&RING_TIMED_OUT) {
            fail(
                label,
                format_args!(
                    "vcpu {c} waited {} s for the token in vain (tokens lost)",
                    timeout.as_secs()
                ),
            );
        } else if !all_done || !all_drained {
            fail(
                label,
                format_args!(
                    "not every vCPU finished the ring within {} s",
                    timeout.as_secs()
                ),
            );
        } else if wrong > 0 {
            fail(
                label,
                format_args!("{wrong} vCPU(s) did not receive exactly {rounds} tokens"),
            );
        } else if let Some(c) = stray {
            fail(
                label,
                format_args!(
                    "vcpu {c} took {} interrupt(s) other than SGI {RING_SGI}, the last INTID {}",
                    STRAY_COUNT[c].load(Ordering::Relaxed),
                    STRAY_LAST[c].load(Ordering::Relaxed)
                ),
            );
        } else {
            let hand_offs = vcpus as u64 * rounds;
            pass(
                label,
                format_args!(
                    "{hand_offs} hand-offs in {:.1} ms, {:.1} us each",
                    millis(elapsed),
                    micros(elapsed) / hand_offs as f64
                ),
            );
        }
    }

    // ---- 4. The SPI ------------------------------------------------------

    /// vCPU 0 routed and enabled the SPI.
    static SPI_ROUTED: AtomicBool = AtomicBool::new(false);
    /// The target unmasked UARTIMSC.TXIM.
    static SPI_UNMASKED: AtomicBool = AtomicBool::new(false);
    /// vCPU 0 finished watching its own ICC_IAR1_EL1.
    static SPI_WATCHED: AtomicBool = AtomicBool::new(false);
    /// The target restored UARTIMSC and stored its [`SpiOutcome`].
    static SPI_DONE: AtomicBool = AtomicBool::new(false);
    /// The target's [`SpiOutcome`] code, and the delivery latency.
    static SPI_OUTCOME: AtomicU8 = AtomicU8::new(0);
    static SPI_LATENCY: AtomicU64 = AtomicU64::new(0);
    /// UARTIMSC as the target found it, so vCPU 0 can restore it should the
    /// target never finish.
    static SAVED_IMSC: AtomicU32 = AtomicU32::new(0);

    /// What the spi check's pass line says about vCPU 0's watch.
    struct WatchNote {
        target_cpu: usize,
    }

    impl fmt::Display for WatchNote {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            if self.target_cpu == 0 {
                write!(f, "no other vCPU to watch")
            } else {
                write!(f, "vcpu 0 saw nothing in {} ms", SPI_WATCH.as_millis())
            }
        }
    }

    /// What the SPI's target saw.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum SpiOutcome {
        /// The SPI came once, `latency` ticks after TXIM was unmasked, and
        /// not again once TXIM was masked.
        Delivered { latency: u64 },
        /// It never came.
        NotDelivered,
        /// It came again after TXIM was masked and it was completed.
        Redelivered,
        /// The runtime has no console UART to unmask.
        NoConsole,
    }

    impl SpiOutcome {
        const DELIVERED: u8 = 1;
        const NOT_DELIVERED: u8 = 2;
        const REDELIVERED: u8 = 3;
        const NO_CONSOLE: u8 = 4;

        fn store(self) {
            let code = match self {
                SpiOutcome::Delivered { latency } => {
                    SPI_LATENCY.store(latency, Ordering::Relaxed);
                    Self::DELIVERED
                }
                SpiOutcome::NotDelivered => Self::NOT_DELIVERED,
                SpiOutcome::Redelivered => Self::REDELIVERED,
                SpiOutcome::NoConsole => Self::NO_CONSOLE,
            };
            SPI_OUTCOME.store(code, Ordering::Release);
        }

        fn load() -> Option<Self> {
            Some(match SPI_OUTCOME.load(Ordering::Acquire) {
                Self::DELIVERED => SpiOutcome::Delivered {
                    latency: SPI_LATENCY.load(Ordering::Relaxed),
                },
                Self::NOT_DELIVERED => SpiOutcome::NotDelivered,
                Self::REDELIVERED => SpiOutcome::Redelivered,
                Self::NO_CONSOLE => SpiOutcome::NoConsole,
                _ => return None,
            })
        }
    }

    /// The target's part: unmask TXIM, wait for the SPI, restore UARTIMSC
    /// (after vCPU 0 watched, if `watched`), complete the SPI and make sure
    /// it does not come again. Other interrupts go to `strays`.
    fn spi_target(spi: IntId, watched: bool, strays: &mut Strays) -> SpiOutcome {
        let timeout = settings().timeout();
        let deadline = deadline_after(timeout);
        let Some(saved) = console::update_interrupt_masks(|masks| masks | Interrupts::TXI) else {
            return SpiOutcome::NoConsole;
        };
        SAVED_IMSC.store(saved.bits(), Ordering::Relaxed);
        let unmasked_at = time::counter();
        SPI_UNMASKED.store(true, Ordering::Release);
        let arrived = loop {
            match wait_for_interrupt(deadline) {
                Some(intid) if intid == spi => break Some(time::counter() - unmasked_at),
                Some(other) => {
                    gic::end_of_interrupt(other);
                    strays.record(other);
                }
                None => break None,
            }
        };
        if watched {
            time::wait_until(timeout, || SPI_WATCHED.load(Ordering::Acquire));
        }
        console::update_interrupt_masks(|_| saved);
        let Some(latency) = arrived else {
            return SpiOutcome::NotDelivered;
        };
        gic::end_of_interrupt(spi);
        let mut again = false;
        poll_for(QUIET_WINDOW, |intid| {
            if intid == spi {
                again = true;
            } else {
                strays.record(intid);
            }
        });
        if again {
            SpiOutcome::Redelivered
        } else {
            SpiOutcome::Delivered { latency }
        }
    }

    /// The last vCPU, when it is not vCPU 0: the target's part once vCPU 0
    /// routed the SPI, the outcome stored for vCPU 0.
    fn spi_target_on_secondary(cpu: usize) {
        let timeout = settings().timeout();
        if RING.load(Ordering::Acquire) != RING_GO
            || !time::wait_until(timeout, || SPI_ROUTED.load(Ordering::Acquire))
        {
            return;
        }
        let Some(spi) = rt::machine().uart_irq else {
            return;
        };
        let mut strays = Strays::default();
        spi_target(spi, true, &mut strays).store();
        STRAY_COUNT[cpu].store(strays.count, Ordering::Relaxed);
        STRAY_LAST[cpu].store(strays.last.map_or(NO_INTID, IntId::raw), Ordering::Relaxed);
        SPI_DONE.store(true, Ordering::Release);
    }

    fn check_spi(distributor: &Distributor, vcpus: usize, spi: IntId) {
        let label = Label::Spi;
        let target_cpu = vcpus - 1;
        let target = mpidr_of(target_cpu);
        let routed = distributor
            .set_spi_enabled(spi, false)
            .and_then(|()| distributor.configure_spi(spi, CHECK_PRIORITY, target))
            .and_then(|()| distributor.route_of(spi));
        match routed {
            Ok((to, false)) if to == target => {}
            Ok((to, any)) => {
                return fail(
                    label,
                    format_args!(
                        "GICD_IROUTER<{spi}> reads back mpidr {to}{} after routing it to {target}",
                        if any { " with 1-of-N" } else { "" }
                    ),
                );
            }
            Err(e) => return fail(label, format_args!("routing INTID {spi}: {e}")),
        }
        if let Err(e) = distributor.set_spi_enabled(spi, true) {
            return fail(label, format_args!("enabling INTID {spi}: {e}"));
        }
        let timeout = settings().timeout();
        let mut strays = Strays::default();
        let mut elsewhere = 0u64;
        let outcome = if target_cpu == 0 {
            Some(spi_target(spi, false, &mut strays))
        } else if STATE[target_cpu].load(Ordering::Acquire) != READY {
            None
        } else {
            SPI_ROUTED.store(true, Ordering::Release);
            if time::wait_until(timeout, || SPI_UNMASKED.load(Ordering::Acquire)) {
                poll_for(SPI_WATCH, |intid| {
                    if intid == spi {
                        elsewhere += 1;
                    } else {
                        strays.record(intid);
                    }
                });
            }
            SPI_WATCHED.store(true, Ordering::Release);
            if !time::wait_until(timeout, || SPI_DONE.load(Ordering::Acquire))
                && SPI_UNMASKED.load(Ordering::Acquire)
            {
                // The target is stuck with TXIM unmasked: put the console
                // back as it found it.
                let saved = Interrupts::from_bits_retain(SAVED_IMSC.load(Ordering::Relaxed));
                console::update_interrupt_masks(|_| saved);
            }
            // The target's strays (it stored them before SPI_DONE).
            let last = STRAY_LAST[target_cpu].load(Ordering::Relaxed);
            if last != NO_INTID {
                strays.count += STRAY_COUNT[target_cpu].load(Ordering::Relaxed);
                strays.last = Some(IntId::from_raw(last));
            }
            SpiOutcome::load()
        };
        let disabled = distributor.set_spi_enabled(spi, false);
        let watch = WatchNote { target_cpu };
        match outcome {
            None => fail(
                label,
                format_args!("vcpu {target_cpu}, the target, did not take part (see above)"),
            ),
            Some(SpiOutcome::NoConsole) => fail(label, format_args!("no console UART to unmask")),
            Some(SpiOutcome::NotDelivered) => fail(
                label,
                format_args!(
                    "INTID {spi} did not reach vcpu {target_cpu} within {} s of unmasking \
                     UARTIMSC.TXIM{strays}",
                    timeout.as_secs()
                ),
            ),
            Some(SpiOutcome::Redelivered) => fail(
                label,
                format_args!(
                    "INTID {spi} came to vcpu {target_cpu} again after UARTIMSC.TXIM was masked \
                     and it was completed{strays}"
                ),
            ),
            Some(SpiOutcome::Delivered { .. }) if elsewhere > 0 => fail(
                label,
                format_args!(
                    "INTID {spi}, routed to vcpu {target_cpu} (mpidr {target}), also reached \
                     vcpu 0, {elsewhere} time(s){strays}"
                ),
            ),
            Some(SpiOutcome::Delivered { .. }) if strays.count > 0 => {
                fail(label, format_args!("INTID {spi} arrived{strays}"))
            }
            Some(SpiOutcome::Delivered { .. }) if disabled.is_err() => fail(
                label,
                format_args!("disabling INTID {spi}: {}", disabled.unwrap_err()),
            ),
            Some(SpiOutcome::Delivered { latency }) => pass(
                label,
                format_args!(
                    "INTID {spi} reached vcpu {target_cpu} (mpidr {target}) {:.3} ms after TXIM \
                     was unmasked; {watch}; not again after TXIM was masked",
                    millis(latency)
                ),
            ),
        }
    }

    // ---- 5. The ping ----------------------------------------------------

    const PING_WAIT: u8 = 0;
    const PING_GO: u8 = 1;
    const PING_CANCELLED: u8 = 2;
    /// Set by vCPU 0 once every secondary is in its part of the check.
    static PING: AtomicU8 = AtomicU8::new(PING_WAIT);
    /// Secondaries that reached the check.
    static PING_ARRIVED: AtomicUsize = AtomicUsize::new(0);
    /// Set by vCPU 0 when the round trips are over: the spinners stop.
    static PING_OVER: AtomicBool = AtomicBool::new(false);
    /// vCPU 1 gave up waiting for a ping at the deadline, or could not
    /// answer one.
    static PONG_TIMED_OUT: AtomicBool = AtomicBool::new(false);
    static PONG_SEND_FAILED: AtomicBool = AtomicBool::new(false);
    /// vCPU 1 is done and stored its strays.
    static PONG_DONE: AtomicBool = AtomicBool::new(false);
    /// When the ping must be over (counter ticks).
    static PING_DEADLINE: AtomicU64 = AtomicU64::new(0);
    /// Each round trip's time, and how late vCPU 0 ran again after each
    /// rest's timer deadline, in nanoseconds; filled by vCPU 0 only.
    static ROUND_TRIPS: spin::Mutex<[u64; MAX_PING as usize]> =
        spin::Mutex::new([0; MAX_PING as usize]);
    static TIMER_LATE: spin::Mutex<[u64; MAX_PING as usize]> =
        spin::Mutex::new([0; MAX_PING as usize]);

    fn nanos(ticks: u64) -> u64 {
        u64::try_from(time::to_duration(ticks).as_nanos()).unwrap_or(u64::MAX)
    }

    /// A secondary's part: vCPU 1 answers every ping, the others compute
    /// until vCPU 0 says the round trips are over.
    fn ping_member(cpu: usize) {
        let timeout = settings().timeout();
        PING_ARRIVED.fetch_add(1, Ordering::AcqRel);
        time::wait_until(timeout, || PING.load(Ordering::Acquire) != PING_WAIT);
        if PING.load(Ordering::Acquire) != PING_GO {
            return;
        }
        if cpu != 1 {
            return spin_until_ping_over();
        }
        let deadline = PING_DEADLINE.load(Ordering::Acquire);
        let vcpu0 = mpidr_of(0);
        let mut strays = Strays::default();
        let mut answered = 0;
        while answered < settings().ping {
            match wait_for_interrupt(deadline) {
                Some(intid) if intid == PING_SGI => {
                    gic::end_of_interrupt(intid);
                    if gic::send_sgi(vcpu0, PING_SGI).is_err() {
                        PONG_SEND_FAILED.store(true, Ordering::Relaxed);
                        break;
                    }
                    answered += 1;
                }
                Some(other) => {
                    gic::end_of_interrupt(other);
                    strays.record(other);
                }
                None => {
                    PONG_TIMED_OUT.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
        STRAY_COUNT[cpu].store(strays.count, Ordering::Relaxed);
        STRAY_LAST[cpu].store(strays.last.map_or(NO_INTID, IntId::raw), Ordering::Relaxed);
        PONG_DONE.store(true, Ordering::Release);
    }

    /// Computes without WFI or YIELD (either would give the pCPU away)
    /// until [`PING_OVER`], checking it every few thousand instructions.
    fn spin_until_ping_over() {
        let mut x = 1u64;
        while !PING_OVER.load(Ordering::Acquire) {
            for _ in 0..1000 {
                x = core::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
    }

    fn check_ping(cpu: &CpuInterface, vcpus: usize, all_ready: bool) {
        let label = Label::Ping;
        let set_up = cpu
            .redistributor
            .configure(PING_SGI, CHECK_PRIORITY)
            .and_then(|()| cpu.redistributor.set_enabled(PING_SGI, true));
        let timeout = settings().timeout();
        let arrived = time::wait_until(timeout, || {
            PING_ARRIVED.load(Ordering::Acquire) == vcpus - 1
        });
        let cancel = |why: fmt::Arguments| {
            PING.store(PING_CANCELLED, Ordering::Release);
            fail(label, why)
        };
        if vcpus < 2 {
            return cancel(format_args!("needs two vCPUs, the VM has {vcpus}"));
        }
        if let Err(e) = set_up {
            return cancel(format_args!("setting up SGI {PING_SGI}: {e}"));
        }
        if !all_ready || !arrived {
            return cancel(format_args!("not every vCPU came to the check, see above"));
        }
        let deadline = deadline_after(timeout);
        PING_DEADLINE.store(deadline, Ordering::Release);
        PING.store(PING_GO, Ordering::Release);
        let vcpu1 = mpidr_of(1);
        let wanted = settings().ping as usize;
        // Let the spinners run first: until now vCPU 0 (and vCPU 1) did
        // the other checks while the spinners mostly waited, and fair
        // share would rightly serve the spinners first.
        let warm_up_until = time::counter().saturating_add(time::to_ticks(PING_WARM_UP));
        while time::counter() < warm_up_until {
            time::wfi_until(warm_up_until);
        }
        let mut round_trips = ROUND_TRIPS.lock();
        let mut timer_late = TIMER_LATE.lock();
        let mut strays = Strays::default();
        let mut done = 0;
        let mut send_error = None;
        'trips: for (slot, late) in round_trips
            .iter_mut()
            .zip(timer_late.iter_mut())
            .take(wanted)
        {
            let sent = time::counter();
            if let Err(e) = gic::send_sgi(vcpu1, PING_SGI) {
                send_error = Some(e);
                break;
            }
            loop {
                match wait_for_interrupt(deadline) {
                    Some(intid) if intid == PING_SGI => break,
                    Some(other) => {
                        gic::end_of_interrupt(other);
                        strays.record(other);
                    }
                    None => break 'trips,
                }
            }
            let answered = time::counter();
            gic::end_of_interrupt(PING_SGI);
            *slot = nanos(answered - sent);
            done += 1;
            // Rest before the next ping, waiting in WFI on the virtual
            // timer: the pair asks for far less than its fair share.
            let rest_until = answered.saturating_add(time::to_ticks(PING_GAP));
            while time::counter() < rest_until {
                time::wfi_until(rest_until);
            }
            *late = nanos(time::counter() - rest_until);
        }
        PING_OVER.store(true, Ordering::Release);
        // An answer that comes now was delivered twice.
        let mut extra = 0u64;
        poll_for(QUIET_WINDOW, |intid| {
            if intid == PING_SGI {
                extra += 1;
            } else {
                strays.record(intid);
            }
        });
        let pong_done = time::wait_until(timeout, || PONG_DONE.load(Ordering::Acquire));
        let last = STRAY_LAST[1].load(Ordering::Relaxed);
        if last != NO_INTID {
            strays.count += STRAY_COUNT[1].load(Ordering::Relaxed);
            strays.last = Some(IntId::from_raw(last));
        }
        if let Some(e) = send_error {
            fail(label, format_args!("sending SGI {PING_SGI} to vcpu 1: {e}"));
        } else if PONG_SEND_FAILED.load(Ordering::Relaxed) {
            fail(
                label,
                format_args!("vcpu 1 could not answer with SGI {PING_SGI}"),
            );
        } else if done < wanted {
            fail(
                label,
                format_args!(
                    "{done} of {wanted} answers came within {} s{}",
                    timeout.as_secs(),
                    if PONG_TIMED_OUT.load(Ordering::Relaxed) {
                        "; vcpu 1 waited for a ping in vain"
                    } else {
                        ""
                    }
                ),
            );
        } else if !pong_done {
            fail(
                label,
                format_args!("vcpu 1 did not finish within {} s", timeout.as_secs()),
            );
        } else if extra > 0 {
            fail(
                label,
                format_args!("{extra} answer(s) came after the last ping{strays}"),
            );
        } else if strays.count > 0 {
            fail(label, format_args!("{done} round trips{strays}"));
        } else {
            match (
                Spread::of(&mut round_trips[..done]),
                Spread::of(&mut timer_late[..done]),
            ) {
                (Some(round_trip), Some(timer_late)) => println!(
                    "{}",
                    PingReport {
                        round_trips: done as u64,
                        spinners: vcpus - 2,
                        round_trip,
                        timer_late,
                    }
                ),
                _ => fail(label, format_args!("no round trip was made")),
            }
        }
    }
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "irq-check is a bare-metal guest; build it with `cargo xtask build` and boot it with \
         `cargo xtask run --guest irq-check`"
    );
    std::process::exit(2);
}
