//! `level-check`: proves that the (virtual) GICv3 a guest is given keeps
//! the pending state of a level-sensitive interrupt in step with its line
//! wherever the guest can look — GICR_ISPENDR0, GICR_ICPENDR0,
//! GICR_ISACTIVER0 and their distributor counterparts, enabling the
//! interrupt, acknowledging it — for the virtual timer's PPI and the UART's
//! SPI, with the runtime's polling driver (`guest_driver::rt::gic`:
//! PSTATE.I stays masked, WFI waits, ICC_IAR1_EL1 acknowledges,
//! ICC_EOIR1_EL1 completes), and powers off.
//!
//! Command line (`/chosen/bootargs`; `guest_driver::levelcheck::Settings`):
//!
//! | word | meaning | default |
//! |---|---|---|
//! | `rounds=N` | rounds of each descheduled check (1..=1000) | 4 |
//! | `timeout=S` | seconds each wait may take (1..=3600) | 30 |
//!
//! It needs two vCPUs or more. vCPU 0 runs the checks; vCPU 1 computes
//! without a break (so with one pCPU vCPU 0's waits leave the pCPU to it),
//! sends vCPU 0 the SGI that ends each of its waits (on a machine where WFI
//! waits for an interrupt: bare QEMU) and reads vCPU 0's redistributor in
//! the remote check; further vCPUs compute too, so that vCPU 0, woken from
//! a wait, may come back on another pCPU. Each check starts with the
//! timer off and its PPI disabled and not pending, and prints
//! `level-check: <label>: ok (<detail>)` or `level-check: <label>: FAILED:
//! <why>` (`guest_driver::levelcheck::Label`):
//!
//! 1. **disable**, **imask**, **cval** (vCPU 0 running): the PPI disabled
//!    at the redistributor, the timer armed 1 ms ahead; once it fired
//!    (CNTV_CTL_EL0.ISTATUS), CNTV_CTL_EL0 reads what the guest wrote plus
//!    ISTATUS and GICR_ISPENDR0 reads the PPI pending, not active. Then
//!    the line goes down — CNTV_CTL_EL0 = 0, CNTV_CTL_EL0 = ENABLE | IMASK,
//!    or CNTV_CVAL_EL0 an hour later — and GICR_ISPENDR0 and GICR_ICPENDR0
//!    must read it not pending, GICR_ISACTIVER0 not active, and enabling
//!    it must deliver nothing in a quiet window (what CNTV_CTL_EL0 read is
//!    judged last, so a failure of the pending state is the one reported);
//! 2. **disable-descheduled**, **imask-descheduled**, **cval-descheduled**:
//!    the same `rounds` times, vCPU 0 waiting in WFI while the timer fires
//!    and for 2 ms after the line went down;
//! 3. **retract**: the PPI enabled; once the timer fired, the guest turns
//!    it off before acknowledging: GICR_ISPENDR0 reads not pending and
//!    ICC_IAR1_EL1 never returns the PPI;
//! 4. **active**: the PPI enabled and acknowledged: GICR_ISACTIVER0 reads
//!    it active and GICR_ISPENDR0 pending (the line is still high); after
//!    CNTV_CTL_EL0.IMASK (what Linux's handler does), active and not
//!    pending; after its EOI, neither, and it does not come again;
//! 5. **again**: the PPI enabled, acknowledged and completed without
//!    touching the timer: it comes again, since its line is still high;
//!    completed after IMASK, it does not;
//! 6. **remote**: vCPU 0 arms its timer and waits; vCPU 1 reads vCPU 0's
//!    GICR_ISPENDR0 once the deadline passed (pending), then vCPU 0 turns
//!    the timer off, reads its own (not pending) and waits again, and
//!    vCPU 1 reads it again (not pending);
//! 7. **uart**: the UART's SPI routed to vCPU 0 and disabled; unmasking
//!    UARTIMSC.TXIM (the transmit interrupt is asserted while the FIFO has
//!    room) makes GICD_ISPENDR read it pending, masking TXIM not pending,
//!    and enabling the SPI delivers nothing; unmasked again with the SPI
//!    enabled, it is delivered, GICD_ISACTIVER reads it active, and once
//!    TXIM is masked and it is completed, neither, and it does not come
//!    again.
//!
//! The run ends with `level-check: all checks passed`, or a `GUEST FATAL`
//! line counting the failures; either way the guest powers off.
//!
//! ```text
//! level-check: 2 vCPUs, virtual timer INTID 27, UART INTID 33, counter 62500000 Hz
//! level-check: rounds=4 timeout=30 (bootargs "")
//! level-check: disable: ok (pending 0.001 ms after ISTATUS; after CNTV_CTL_EL0 = 0 not pending, not active, not delivered when enabled)
//! ...
//! level-check: all checks passed
//! ```
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod guest {
    use core::fmt;
    use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
    use core::time::Duration;

    use aarch64_cpu::asm::barrier;
    use aarch64_cpu::registers::{CNTV_CTL_EL0, CNTV_CVAL_EL0};
    use spin::Once;
    use tock_registers::interfaces::{Readable, Writeable};

    use guest_driver::devicetree::MAX_CPUS;
    use guest_driver::gicv3::{Distributor, GicError, IntId, Redistributor};
    use guest_driver::levelcheck::{
        ALL_PASSED, CHECK_PRIORITY, CVAL_LATER, Label, Lowering, MIN_VCPUS, PREFIX, QUIET_WINDOW,
        SETTLE_LIMIT, SLEEP, Settings, TIMER_DELAY, WAKE_SGI,
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
    /// When vCPU 1 is to send [`WAKE_SGI`] to vCPU 0 (counter ticks);
    /// [`NO_WAKE`] when not asked.
    static WAKE_AT: AtomicU64 = AtomicU64::new(NO_WAKE);
    const NO_WAKE: u64 = u64::MAX;
    /// Each secondary set up its GIC.
    static READY: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
    /// Each secondary is done (and about to call CPU_OFF).
    static FINISHED: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
    /// Set by vCPU 0 once the checks are over: the secondaries stop.
    static DONE: AtomicBool = AtomicBool::new(false);

    fn settings() -> &'static Settings {
        SETTINGS.get().expect("main parses the settings first")
    }

    fn mpidr_of(cpu: usize) -> Mpidr {
        rt::machine().cpus()[cpu]
    }

    /// The counter value `duration` from now.
    fn after(duration: Duration) -> u64 {
        time::counter().saturating_add(time::to_ticks(duration))
    }

    // ---- What can go wrong ---------------------------------------------

    /// Why a check failed.
    enum Problem {
        Gic(GicError),
        /// A register read `read` at `step`, where the architecture says
        /// the opposite.
        Read {
            register: &'static str,
            read: bool,
            step: &'static str,
        },
        /// CNTV_CTL_EL0 did not read ENABLE | ISTATUS after the timer
        /// fired: something changed what the guest wrote.
        TimerControl(u64),
        /// CNTV_CTL_EL0.ISTATUS never came up after the deadline.
        NoIstatus,
        /// `intid` was delivered at `step`, where it must not be.
        Delivered {
            intid: IntId,
            step: &'static str,
        },
        /// `intid` was not delivered at `step` within the timeout.
        NotDelivered {
            intid: IntId,
            step: &'static str,
        },
        /// An interrupt no check asked for.
        Stray(IntId),
        /// vCPU 1's wake-up SGI did not come within the timeout.
        NoWake,
        /// The runtime has no console UART to drive.
        NoConsole,
        /// vCPU 1's read of vCPU 0's GICR_ISPENDR0 at `step`.
        Remote {
            step: &'static str,
            read: RemoteRead,
        },
    }

    impl From<GicError> for Problem {
        fn from(e: GicError) -> Self {
            Problem::Gic(e)
        }
    }

    impl fmt::Display for Problem {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Problem::Gic(e) => write!(f, "GIC: {e}"),
                Problem::Read {
                    register,
                    read,
                    step,
                } => write!(
                    f,
                    "{register} reads {} {step}",
                    if *read { "1" } else { "0" }
                ),
                Problem::TimerControl(ctl) => write!(
                    f,
                    "CNTV_CTL_EL0 reads {ctl:#x} after the timer fired, not ENABLE | ISTATUS \
                     (0x5) as written"
                ),
                Problem::NoIstatus => write!(
                    f,
                    "CNTV_CTL_EL0.ISTATUS not set within {} ms of the deadline",
                    SETTLE_LIMIT.as_millis()
                ),
                Problem::Delivered { intid, step } => write!(f, "INTID {intid} delivered {step}"),
                Problem::NotDelivered { intid, step } => write!(
                    f,
                    "INTID {intid} not delivered {step} within {} s",
                    settings().timeout_secs
                ),
                Problem::Stray(intid) => write!(f, "took INTID {intid}, which no check asked for"),
                Problem::NoWake => write!(
                    f,
                    "vcpu 1's wake-up SGI {WAKE_SGI} did not come within {} s",
                    settings().timeout_secs
                ),
                Problem::NoConsole => write!(f, "no console UART to drive"),
                Problem::Remote { step, read } => {
                    write!(f, "vcpu 1 read vcpu 0's GICR_ISPENDR0 {step}: {read}")
                }
            }
        }
    }

    /// Prints `<label>: ok (<detail>)`, or `<label>: FAILED: <why>` and
    /// counts it.
    fn report(label: Label, result: Result<(), Problem>, detail: fmt::Arguments) {
        match result {
            Ok(()) => println!("{label}: ok ({detail})"),
            Err(why) => {
                println!("{label}: FAILED: {why}");
                FAILURES.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    // ---- Reading the GIC -----------------------------------------------

    /// Reads a bit until it says `want`, for at most [`SETTLE_LIMIT`]:
    /// `Err` naming `register` and `step` if it never does.
    fn expect(
        mut read: impl FnMut() -> Result<bool, GicError>,
        want: bool,
        register: &'static str,
        step: &'static str,
    ) -> Result<(), Problem> {
        let give_up = after(SETTLE_LIMIT);
        loop {
            if read()? == want {
                return Ok(());
            }
            if time::counter() >= give_up {
                return Err(Problem::Read {
                    register,
                    read: !want,
                    step,
                });
            }
            cpu_relax();
        }
    }

    /// Polls ICC_IAR1_EL1 for `window`: `intid` must not come. The wake-up
    /// SGI is completed and ignored; anything else is a stray.
    fn quiet(window: Duration, intid: IntId, step: &'static str) -> Result<(), Problem> {
        let end = after(window);
        while time::counter() < end {
            match gic::acknowledge() {
                Some(got) => {
                    gic::end_of_interrupt(got);
                    if got == intid {
                        return Err(Problem::Delivered { intid, step });
                    }
                    if got != WAKE_SGI {
                        return Err(Problem::Stray(got));
                    }
                }
                None => cpu_relax(),
            }
        }
        Ok(())
    }

    /// Polls ICC_IAR1_EL1 until it returns `intid`, acknowledged and not
    /// completed (the caller completes it), for at most the timeout.
    fn take(intid: IntId, step: &'static str) -> Result<(), Problem> {
        let give_up = after(settings().timeout());
        loop {
            match gic::acknowledge() {
                Some(got) if got == intid => return Ok(()),
                Some(got) => {
                    gic::end_of_interrupt(got);
                    if got != WAKE_SGI {
                        return Err(Problem::Stray(got));
                    }
                }
                None if time::counter() >= give_up => {
                    return Err(Problem::NotDelivered { intid, step });
                }
                None => cpu_relax(),
            }
        }
    }

    // ---- Waiting ---------------------------------------------------------

    /// Waits in WFI until vCPU 1's wake-up SGI comes (ending the WFIs that
    /// end sooner, such as a hypervisor's at the virtual timer's deadline).
    /// Under a hypervisor, with more vCPUs than pCPUs, vCPU 0 leaves its
    /// pCPU meanwhile.
    fn wait_for_wake() -> Result<(), Problem> {
        let give_up = after(settings().timeout());
        loop {
            if let Some(got) = gic::acknowledge() {
                gic::end_of_interrupt(got);
                return if got == WAKE_SGI {
                    Ok(())
                } else {
                    Err(Problem::Stray(got))
                };
            }
            if time::counter() >= give_up {
                return Err(Problem::NoWake);
            }
            aarch64_cpu::asm::wfi();
        }
    }

    /// Waits (descheduled, see [`wait_for_wake`]) until the counter
    /// reaches `until`.
    fn sleep_until(until: u64) -> Result<(), Problem> {
        WAKE_AT.store(until, Ordering::Release);
        let woken = wait_for_wake();
        WAKE_AT.store(NO_WAKE, Ordering::Release);
        woken
    }

    fn spin_until(until: u64) {
        while time::counter() < until {
            cpu_relax();
        }
    }

    // ---- The virtual timer -----------------------------------------------

    fn write_control(value: u64) {
        CNTV_CTL_EL0.set(value);
        barrier::isb(barrier::SY);
    }

    /// Arms the timer `delay` from now (ENABLE, IMASK clear); returns the
    /// deadline.
    fn arm(delay: Duration) -> u64 {
        let due = after(delay);
        CNTV_CVAL_EL0.set(due);
        write_control(CNTV_CTL_EL0::ENABLE::SET.value);
        due
    }

    /// Takes the timer's line down as `how` says.
    fn lower(how: Lowering) {
        match how {
            Lowering::Disable => write_control(0),
            Lowering::Mask => {
                write_control((CNTV_CTL_EL0::ENABLE::SET + CNTV_CTL_EL0::IMASK::SET).value);
            }
            Lowering::MoveLater => {
                CNTV_CVAL_EL0.set(after(CVAL_LATER));
                barrier::isb(barrier::SY);
            }
        }
    }

    /// Waits until the timer's condition is met (ISTATUS) and returns
    /// CNTV_CTL_EL0.
    fn fired() -> Result<u64, Problem> {
        let give_up = after(SETTLE_LIMIT);
        loop {
            let ctl = CNTV_CTL_EL0.get();
            if CNTV_CTL_EL0::ISTATUS.is_set(ctl) {
                return Ok(ctl);
            }
            if time::counter() >= give_up {
                return Err(Problem::NoIstatus);
            }
            cpu_relax();
        }
    }

    /// The timer off, its PPI disabled and its pending latch cleared:
    /// nothing pending.
    fn start_clean(r: &Redistributor, timer: IntId) -> Result<(), Problem> {
        write_control(0);
        r.set_enabled(timer, false)?;
        r.clear_pending(timer)?;
        expect(
            || r.pending(timer),
            false,
            "GICR_ISPENDR0",
            "with the timer off",
        )
    }

    /// Runs `body` between [`start_clean`] and a tidy-up that turns the
    /// timer off and disables its PPI, whatever `body` left.
    fn timer_check(
        r: &Redistributor,
        timer: IntId,
        body: impl FnOnce() -> Result<(), Problem>,
    ) -> Result<(), Problem> {
        let result = start_clean(r, timer).and_then(|()| body());
        write_control(0);
        let _ = r.set_enabled(timer, false);
        let _ = r.clear_pending(timer);
        result
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
        let (Some(timer), Some(uart)) = (machine.virtual_timer_irq, machine.uart_irq) else {
            rt::fatal(format_args!(
                "{PREFIX} the device tree names not the virtual timer's or the UART's interrupt \
                 (timer {:?}, uart {:?})",
                machine.virtual_timer_irq, machine.uart_irq
            ))
        };
        if vcpus < MIN_VCPUS {
            rt::fatal(format_args!(
                "{PREFIX} needs {MIN_VCPUS} vCPUs or more, has {vcpus}"
            ));
        }
        println!(
            "{PREFIX} {vcpus} vCPUs, virtual timer INTID {timer}, UART INTID {uart}, counter {} \
             Hz",
            time::frequency()
        );
        println!("{PREFIX} {settings} (bootargs \"{}\")", args.as_str());
        let distributor = match gic::init() {
            Ok(d) => d,
            Err(e) => rt::fatal(format_args!("{PREFIX} cannot set up the GIC: {e}")),
        };
        let set_up = gic::init_cpu().and_then(|cpu| {
            let r = &cpu.redistributor;
            r.configure(WAKE_SGI, CHECK_PRIORITY)?;
            r.set_enabled(WAKE_SGI, true)?;
            r.set_enabled(timer, false)?;
            r.configure(timer, CHECK_PRIORITY)?;
            Ok(cpu)
        });
        let cpu = match set_up {
            Ok(c) => c,
            Err(e) => rt::fatal(format_args!("{PREFIX} vcpu 0: cannot set up the GIC: {e}")),
        };
        start_secondaries(vcpus);
        for how in Lowering::ALL {
            let result = running(&cpu, timer, how);
            report(
                Label::Running(how),
                result,
                format_args!(
                    "pending once the timer fired; after {} not pending, not active, not \
                     delivered when enabled",
                    how.action()
                ),
            );
        }
        for how in Lowering::ALL {
            let result = (0..settings.rounds).try_for_each(|_| descheduled(&cpu, timer, how));
            report(
                Label::Descheduled(how),
                result,
                format_args!(
                    "{} rounds, vcpu 0 waiting while the timer fired and after {}: not pending, \
                     not active, not delivered when enabled",
                    settings.rounds,
                    how.action()
                ),
            );
        }
        report(
            Label::Retract,
            retract(&cpu, timer),
            format_args!("the timer off before the acknowledge: not pending, not delivered"),
        );
        report(
            Label::Active,
            active(&cpu, timer),
            format_args!(
                "acknowledged: active and pending; after IMASK active, not pending; after EOI \
                 neither, not again"
            ),
        );
        report(
            Label::Again,
            again(&cpu, timer),
            format_args!(
                "delivered again after an EOI with the line high; not after IMASK and EOI"
            ),
        );
        report(
            Label::Remote,
            remote(&cpu, timer),
            format_args!(
                "vcpu 1 read vcpu 0's PPI {timer} pending after its deadline, not pending once \
                 vcpu 0 turned the timer off"
            ),
        );
        report(
            Label::Uart,
            uart_check(distributor, uart),
            format_args!(
                "INTID {uart} pending while TXIM is unmasked, not once masked, not delivered \
                 when enabled; delivered once, active until completed"
            ),
        );
        DONE.store(true, Ordering::Release);
        if !time::wait_until(settings.timeout(), || {
            (1..vcpus).all(|c| FINISHED[c].load(Ordering::Acquire))
        }) {
            println!(
                "{PREFIX} not every vCPU finished within {} s",
                settings.timeout_secs
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

    // ---- Secondaries -----------------------------------------------------

    /// Starts every secondary and waits until each has set up its GIC; a
    /// vCPU that does not is fatal (vCPU 0's waits need vCPU 1).
    fn start_secondaries(vcpus: usize) {
        let timeout = settings().timeout();
        for (cpu, ready) in READY.iter().enumerate().take(vcpus).skip(1) {
            let started = match smp::start(cpu) {
                Ok(started) => started.wait_entered(timeout),
                Err(e) => rt::fatal(format_args!("{PREFIX} vcpu {cpu}: CPU_ON failed with {e}")),
            };
            if !started || !time::wait_until(timeout, || ready.load(Ordering::Acquire)) {
                rt::fatal(format_args!(
                    "{PREFIX} vcpu {cpu} did not come online and set up its GIC"
                ));
            }
        }
    }

    /// vCPU 1 wakes vCPU 0 and reads its redistributor in the remote
    /// check; every secondary computes until vCPU 0 is done.
    fn secondary_main(cpu: usize) {
        if let Err(e) = gic::init_cpu() {
            println!("{PREFIX} vcpu {cpu}: cannot set up the GIC: {e}");
            return;
        }
        let vcpu0 = mpidr_of(0);
        let redistributor0 = gic::redistributor_of(vcpu0);
        let timer = rt::machine().virtual_timer_irq;
        READY[cpu].store(true, Ordering::Release);
        while !DONE.load(Ordering::Acquire) {
            if cpu == 1 {
                let at = WAKE_AT.load(Ordering::Acquire);
                if at != NO_WAKE
                    && time::counter() >= at
                    && WAKE_AT
                        .compare_exchange(at, NO_WAKE, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    let _ = gic::send_sgi(vcpu0, WAKE_SGI);
                }
                if let (Ok(r), Some(timer)) = (&redistributor0, timer) {
                    remote_reader(r, timer, vcpu0);
                }
            }
            cpu_relax();
        }
        FINISHED[cpu].store(true, Ordering::Release);
    }

    // ---- 1 and 2. Masked, fired, lowered, unmasked ------------------------

    fn running(cpu: &CpuInterface, timer: IntId, how: Lowering) -> Result<(), Problem> {
        let r = &cpu.redistributor;
        timer_check(r, timer, || fire_lower_unmask(r, timer, how, false))
    }

    fn descheduled(cpu: &CpuInterface, timer: IntId, how: Lowering) -> Result<(), Problem> {
        let r = &cpu.redistributor;
        timer_check(r, timer, || fire_lower_unmask(r, timer, how, true))
    }

    /// The issue's sequence: the PPI disabled, the timer fires (vCPU 0
    /// waiting if `wait`), the GIC shows it pending; the line goes down
    /// `how` (vCPU 0 waiting again if `wait`); then it is not pending, not
    /// active, and enabling it delivers nothing.
    fn fire_lower_unmask(
        r: &Redistributor,
        timer: IntId,
        how: Lowering,
        wait: bool,
    ) -> Result<(), Problem> {
        let due = arm(TIMER_DELAY);
        if wait {
            sleep_until(due)?;
        } else {
            spin_until(due);
        }
        // Judged last, so that a failure of the pending state is the one
        // reported.
        let ctl = fired()?;
        expect(
            || r.pending(timer),
            true,
            "GICR_ISPENDR0",
            "after the timer fired, its PPI disabled",
        )?;
        expect(
            || r.active(timer),
            false,
            "GICR_ISACTIVER0",
            "after the timer fired, its PPI disabled",
        )?;
        lower(how);
        if wait {
            sleep_until(after(SLEEP))?;
        }
        let step = "after the line went down";
        expect(|| r.pending(timer), false, "GICR_ISPENDR0", step)?;
        expect(|| r.pending_in_icpendr(timer), false, "GICR_ICPENDR0", step)?;
        expect(|| r.active(timer), false, "GICR_ISACTIVER0", step)?;
        r.set_enabled(timer, true)?;
        quiet(QUIET_WINDOW, timer, "when enabled after the line went down")?;
        expect(
            || r.pending(timer),
            false,
            "GICR_ISPENDR0",
            "once enabled after the line went down",
        )?;
        let as_written = (CNTV_CTL_EL0::ENABLE::SET + CNTV_CTL_EL0::ISTATUS::SET).value;
        if ctl == as_written {
            Ok(())
        } else {
            Err(Problem::TimerControl(ctl))
        }
    }

    // ---- 3. Retracted before the acknowledge ---------------------------------

    fn retract(cpu: &CpuInterface, timer: IntId) -> Result<(), Problem> {
        let r = &cpu.redistributor;
        timer_check(r, timer, || {
            r.set_enabled(timer, true)?;
            let due = arm(TIMER_DELAY);
            spin_until(due);
            fired()?;
            expect(
                || r.pending(timer),
                true,
                "GICR_ISPENDR0",
                "after the timer fired, its PPI enabled",
            )?;
            lower(Lowering::Disable);
            expect(
                || r.pending(timer),
                false,
                "GICR_ISPENDR0",
                "after the timer was turned off before the acknowledge",
            )?;
            quiet(
                QUIET_WINDOW,
                timer,
                "after the timer was turned off before the acknowledge",
            )
        })
    }

    // ---- 4. Active, and pending while the line is high -----------------------

    fn active(cpu: &CpuInterface, timer: IntId) -> Result<(), Problem> {
        let r = &cpu.redistributor;
        timer_check(r, timer, || {
            r.set_enabled(timer, true)?;
            arm(TIMER_DELAY);
            take(timer, "after the timer fired")?;
            let acknowledged = (|| {
                let step = "acknowledged, its line high";
                expect(|| r.active(timer), true, "GICR_ISACTIVER0", step)?;
                expect(|| r.pending(timer), true, "GICR_ISPENDR0", step)?;
                lower(Lowering::Mask);
                let step = "acknowledged, after IMASK";
                expect(|| r.active(timer), true, "GICR_ISACTIVER0", step)?;
                expect(|| r.pending(timer), false, "GICR_ISPENDR0", step)
            })();
            gic::end_of_interrupt(timer);
            acknowledged?;
            let step = "after IMASK and its EOI";
            expect(|| r.active(timer), false, "GICR_ISACTIVER0", step)?;
            expect(|| r.pending(timer), false, "GICR_ISPENDR0", step)?;
            quiet(QUIET_WINDOW, timer, step)
        })
    }

    // ---- 5. Delivered again while the line stays high ------------------------

    fn again(cpu: &CpuInterface, timer: IntId) -> Result<(), Problem> {
        let r = &cpu.redistributor;
        timer_check(r, timer, || {
            r.set_enabled(timer, true)?;
            arm(TIMER_DELAY);
            take(timer, "after the timer fired")?;
            gic::end_of_interrupt(timer);
            take(timer, "again after its EOI, the timer untouched")?;
            lower(Lowering::Mask);
            gic::end_of_interrupt(timer);
            quiet(QUIET_WINDOW, timer, "after IMASK and its EOI")
        })
    }

    // ---- 6. Another vCPU's view ----------------------------------------------

    /// Where the remote check is: vCPU 0 moves it to ARMED and LOWERED,
    /// vCPU 1 to the READ states after reading.
    static REMOTE_STEP: AtomicU8 = AtomicU8::new(REMOTE_IDLE);
    const REMOTE_IDLE: u8 = 0;
    const REMOTE_ARMED: u8 = 1;
    const REMOTE_READ_ARMED: u8 = 2;
    const REMOTE_LOWERED: u8 = 3;
    const REMOTE_READ_LOWERED: u8 = 4;
    /// vCPU 0's timer deadline for the first read.
    static REMOTE_DUE: AtomicU64 = AtomicU64::new(0);
    /// What vCPU 1 read, as [`RemoteRead`] codes.
    static REMOTE_FIRST: AtomicU8 = AtomicU8::new(0);
    static REMOTE_SECOND: AtomicU8 = AtomicU8::new(0);

    /// vCPU 1's read of vCPU 0's GICR_ISPENDR0.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum RemoteRead {
        NotPending,
        Pending,
        Failed,
    }

    impl RemoteRead {
        fn code(self) -> u8 {
            self as u8
        }

        fn from_code(code: u8) -> Self {
            match code {
                0 => RemoteRead::NotPending,
                1 => RemoteRead::Pending,
                _ => RemoteRead::Failed,
            }
        }

        /// Reads until it says `want` or [`SETTLE_LIMIT`] passes.
        fn settle(r: &Redistributor, timer: IntId, want: bool) -> Self {
            match expect(|| r.pending(timer), want, "", "") {
                Ok(()) if want => RemoteRead::Pending,
                Ok(()) => RemoteRead::NotPending,
                Err(Problem::Read { .. }) if want => RemoteRead::NotPending,
                Err(Problem::Read { .. }) => RemoteRead::Pending,
                Err(_) => RemoteRead::Failed,
            }
        }
    }

    impl fmt::Display for RemoteRead {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(match self {
                RemoteRead::NotPending => "not pending",
                RemoteRead::Pending => "pending",
                RemoteRead::Failed => "the read failed",
            })
        }
    }

    /// vCPU 1's part, called in its loop.
    fn remote_reader(r: &Redistributor, timer: IntId, vcpu0: Mpidr) {
        let (result, next) = match REMOTE_STEP.load(Ordering::Acquire) {
            REMOTE_ARMED if time::counter() >= REMOTE_DUE.load(Ordering::Relaxed) => {
                (&REMOTE_FIRST, REMOTE_READ_ARMED)
            }
            REMOTE_LOWERED => (&REMOTE_SECOND, REMOTE_READ_LOWERED),
            _ => return,
        };
        let want = next == REMOTE_READ_ARMED;
        result.store(RemoteRead::settle(r, timer, want).code(), Ordering::Relaxed);
        REMOTE_STEP.store(next, Ordering::Release);
        let _ = gic::send_sgi(vcpu0, WAKE_SGI);
    }

    fn remote(cpu: &CpuInterface, timer: IntId) -> Result<(), Problem> {
        let r = &cpu.redistributor;
        let result = timer_check(r, timer, || {
            let due = arm(TIMER_DELAY);
            REMOTE_DUE.store(due, Ordering::Relaxed);
            REMOTE_STEP.store(REMOTE_ARMED, Ordering::Release);
            wait_for_wake()?;
            let first = RemoteRead::from_code(REMOTE_FIRST.load(Ordering::Relaxed));
            if first != RemoteRead::Pending {
                return Err(Problem::Remote {
                    step: "after vcpu 0's timer passed its deadline",
                    read: first,
                });
            }
            lower(Lowering::Disable);
            expect(
                || r.pending(timer),
                false,
                "GICR_ISPENDR0",
                "on vcpu 0 after it turned its timer off",
            )?;
            REMOTE_STEP.store(REMOTE_LOWERED, Ordering::Release);
            wait_for_wake()?;
            let second = RemoteRead::from_code(REMOTE_SECOND.load(Ordering::Relaxed));
            if second != RemoteRead::NotPending {
                return Err(Problem::Remote {
                    step: "after vcpu 0 turned its timer off",
                    read: second,
                });
            }
            Ok(())
        });
        REMOTE_STEP.store(REMOTE_IDLE, Ordering::Release);
        result
    }

    // ---- 7. The UART's SPI ---------------------------------------------------

    /// Unmasks or masks UARTIMSC.TXIM; returns UARTIMSC as it was.
    fn transmit_interrupt(unmasked: bool) -> Result<Interrupts, Problem> {
        console::update_interrupt_masks(|masks| {
            if unmasked {
                masks | Interrupts::TXI
            } else {
                masks - Interrupts::TXI
            }
        })
        .ok_or(Problem::NoConsole)
    }

    fn uart_check(distributor: &Distributor, spi: IntId) -> Result<(), Problem> {
        distributor.set_spi_enabled(spi, false)?;
        distributor.configure_spi(spi, CHECK_PRIORITY, mpidr_of(0))?;
        distributor.clear_spi_pending(spi)?;
        let saved = transmit_interrupt(false)?;
        let result = uart_sequence(distributor, spi);
        let _ = distributor.set_spi_enabled(spi, false);
        console::update_interrupt_masks(|_| saved);
        result
    }

    fn uart_sequence(distributor: &Distributor, spi: IntId) -> Result<(), Problem> {
        let pending = || distributor.spi_pending(spi);
        let active = || distributor.spi_active(spi);
        expect(pending, false, "GICD_ISPENDR", "with TXIM masked")?;
        transmit_interrupt(true)?;
        let step = "with TXIM unmasked, the SPI disabled";
        expect(pending, true, "GICD_ISPENDR", step)?;
        expect(active, false, "GICD_ISACTIVER", step)?;
        transmit_interrupt(false)?;
        let step = "after TXIM was masked";
        expect(pending, false, "GICD_ISPENDR", step)?;
        distributor.set_spi_enabled(spi, true)?;
        quiet(QUIET_WINDOW, spi, "when enabled after TXIM was masked")?;
        transmit_interrupt(true)?;
        take(spi, "with TXIM unmasked, the SPI enabled")?;
        let acknowledged = (|| {
            expect(active, true, "GICD_ISACTIVER", "acknowledged")?;
            transmit_interrupt(false)?;
            expect(
                pending,
                false,
                "GICD_ISPENDR",
                "acknowledged, after TXIM was masked",
            )
        })();
        gic::end_of_interrupt(spi);
        acknowledged?;
        let step = "after TXIM was masked and its EOI";
        expect(active, false, "GICD_ISACTIVER", step)?;
        quiet(QUIET_WINDOW, spi, step)
    }
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "level-check is a bare-metal guest; build it with `cargo xtask build` and boot it with \
         `cargo xtask run --guest level-check`"
    );
    std::process::exit(2);
}
