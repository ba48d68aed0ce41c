//! `pmu-check`: proves a guest's PMUv3 end to end on its first two vCPUs
//! at once, then powers off. Meant for two vCPUs sharing one pCPU under
//! `-icount` (`cargo xtask test --filter pmu-check`), where a vCPU's
//! counters must stop while the other runs and QEMU counts instructions
//! exactly.
//!
//! Command line (`/chosen/bootargs`): `timeout=S`, the seconds each wait
//! may take (1..=3600, default 30).
//!
//! Each of vCPUs 0 and 1 reads ID_AA64DFR0_EL1.PMUVer, PMCR_EL0.N,
//! PMCEID0_EL0 and the DT's PMU interrupt
//! (`guest_driver::pmucheck::FeaturesLine`), enables that PPI in its
//! redistributor and its stolen-time record, then (each check printing
//! `pmu-check: vcpu N: <label>: ok (...)`, `...: FAILED: <why>` or, for
//! what the CPU lacks, `...: not implemented (...)`;
//! `guest_driver::pmucheck::Label`):
//!
//! 1. **registers**: PMCR_EL0.N has room for the checks; PMSELR_EL0 = 3
//!    makes PMXEVTYPER_EL0 PMEVTYPER3_EL0, and 31 makes it PMCCFILTR_EL0;
//!    PMUSERENR_EL0 and PMEVCNTR3_EL0, set to values of this vCPU's own,
//!    read back after the other vCPU ran; PMCR_EL0.C and P reset the
//!    counters;
//! 2. **cycle counter**: it advances; calibrated against the virtual
//!    counter while the vCPU runs alone (no stolen time), it then counts,
//!    over a window in which the other vCPU ran, the time this one ran
//!    and not the time it was descheduled (its PV stolen time), within
//!    10 % of the window (without a stolen-time record, on bare QEMU,
//!    only that it advances: its `cycle window` line is then missing);
//! 3. **software increment**: a SW_INCR counter preset to a value of
//!    this vCPU's own gains exactly the PMSWINC_EL0 writes made before
//!    and after the other vCPU ran;
//! 4. **overflow interrupt**: a SW_INCR counter at 0xffffffff with its
//!    interrupt enabled overflows on one more increment; after the other
//!    vCPU ran, the GIC has the PMU's PPI (INTID 23) pending, the counter
//!    reads 0 and PMOVSSET_EL0 its bit; with the overflow cleared and the
//!    interrupt completed, it does not come again;
//! 5. **instructions retired** (where PMCEID0_EL0 has INST_RETIRED: QEMU
//!    only under -icount): 1000 NOPs between enabling and disabling a
//!    counter count exactly 1000 more than none;
//! 6. **chain** (where PMCEID0_EL0 has CHAIN; QEMU 7.2 has not): a
//!    SW_INCR counter at 0xffffffff chained to the next one carries into
//!    it.
//!
//! Then every counter is disabled. The run ends with `pmu-check: all
//! checks passed`, or a `GUEST FATAL` line counting the failures.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod guest {
    use core::arch::asm;
    use core::fmt;
    use core::time::Duration;

    use aarch64_cpu::registers::ID_AA64DFR0_EL1;
    use boot::pmu::{CYCLE_COUNTER, Event, PMCR, PMEVTYPER, PMUSERENR, Register, event};
    use boot::pmu::{read, read_event, write, write_event};
    use tock_registers::interfaces::Readable;

    use guest_driver::gicv3::IntId;
    use guest_driver::pmucheck::{
        ALL_PASSED, CHAIN_HIGH_COUNTER, CHAIN_LOW_COUNTER, CYCLE_WINDOW, FeaturesLine,
        INSTRUCTION_COUNTER, Label, MIN_COUNTERS, NOPS, NOT_IMPLEMENTED, ONE_BEFORE_OVERFLOW,
        OVERFLOW_COUNTER, PREFIX, SW_INCR_COUNTER, event_type, implements, judge_cycles,
    };
    use guest_driver::println;
    use guest_driver::rt::gic;
    use guest_driver::rt::{self, pair, pv, time};

    guest_driver::entry!(main, secondary_main);

    /// The priority of the PMU interrupt: one the open mask lets through.
    const PMU_PRIORITY: u8 = 0x80;
    /// How long the calibration of the cycle counter runs.
    const CALIBRATION: Duration = Duration::from_millis(1);
    /// Tries at a calibration window without stolen time.
    const CALIBRATION_TRIES: u32 = 20;
    /// How long a vCPU watches for a second PMU interrupt.
    const QUIET_WINDOW: Duration = Duration::from_millis(2);

    fn bit(counter: usize) -> u64 {
        1 << counter
    }

    const CYCLES: u64 = 1 << CYCLE_COUNTER;
    /// An event counter's bits below PMCR_EL0.LP's 64-bit overflow.
    const LOW_32_BITS: u64 = 0xffff_ffff;

    /// Why a check failed, or that the CPU lacks what it needs.
    enum Outcome {
        Passed(&'static str),
        Failed(Failure),
        NotImplemented(&'static str),
    }

    /// Why a check failed.
    enum Failure {
        Said(&'static str),
        Value {
            what: &'static str,
            got: u64,
            expected: u64,
        },
    }

    impl fmt::Display for Failure {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Self::Said(why) => f.write_str(why),
                Self::Value {
                    what,
                    got,
                    expected,
                } => write!(f, "{what} is {got:#x}, expected {expected:#x}"),
            }
        }
    }

    fn expect(what: &'static str, got: u64, expected: u64) -> Result<(), Failure> {
        if got == expected {
            Ok(())
        } else {
            Err(Failure::Value {
                what,
                got,
                expected,
            })
        }
    }

    fn report(me: usize, label: Label, outcome: Outcome) {
        match outcome {
            Outcome::Passed(detail) => println!("{PREFIX} vcpu {me}: {label}: ok ({detail})"),
            Outcome::NotImplemented(why) => {
                println!("{PREFIX} vcpu {me}: {label}: {NOT_IMPLEMENTED} ({why})");
            }
            Outcome::Failed(why) => {
                println!("{PREFIX} vcpu {me}: {label}: FAILED: {why}");
                pair::failed();
            }
        }
    }

    /// Waits until the other vCPU ran (or finished): on one pCPU, this
    /// vCPU was descheduled and loaded again.
    fn wait_for_other(me: usize, vcpus: usize) -> Result<(), Failure> {
        if pair::wait_for_other(me, vcpus) {
            Ok(())
        } else {
            Err(Failure::Said("the other vCPU did not run in time"))
        }
    }

    // ---- main ------------------------------------------------------------

    fn main() {
        if let Err(e) = gic::init() {
            rt::fatal(format_args!("{PREFIX} cannot set up the GIC: {e}"));
        }
        pv::init();
        pair::main(PREFIX, ALL_PASSED, checks);
    }

    fn secondary_main(cpu: usize) {
        pair::secondary(cpu, checks);
    }

    /// Every check of vCPU `me` (`rt::pair` runs it on both vCPUs).
    fn checks(me: usize, vcpus: usize) {
        let version = ID_AA64DFR0_EL1.read(ID_AA64DFR0_EL1::PMUVer);
        if version == 0 {
            rt::fatal(format_args!(
                "{PREFIX} vcpu {me}: ID_AA64DFR0_EL1 shows no PMU"
            ));
        }
        let Some(intid) = rt::machine().pmu_irq else {
            rt::fatal(format_args!(
                "{PREFIX} the device tree has no arm,armv8-pmuv3 node"
            ))
        };
        let counters = PMCR::N.read(read(Register::Pmcr)) as usize;
        let pmceid0 = read(Register::Pmceid0);
        println!(
            "{}",
            FeaturesLine {
                vcpu: me,
                version,
                counters,
                pmceid0,
                intid: intid.raw(),
            }
        );
        if let Err(e) = gic::init_cpu().and_then(|c| {
            c.redistributor.configure(intid, PMU_PRIORITY)?;
            c.redistributor.set_enabled(intid, true)
        }) {
            rt::fatal(format_args!("{PREFIX} vcpu {me}: GIC: {e}"));
        }
        pv::init_cpu();
        write(Register::Pmcr, (PMCR::E::SET + PMCR::LC::SET).value);
        for label in Label::ALL {
            let outcome = match label.event() {
                Some(event) if !implements(pmceid0, event) => {
                    Outcome::NotImplemented(missing(label))
                }
                _ => run(label, me, vcpus, counters, intid),
            };
            report(me, label, outcome);
        }
        write(Register::Pmcntenclr, u64::MAX);
        write(Register::Pmintenclr, u64::MAX);
        write(Register::Pmovsclr, u64::MAX);
        write(Register::Pmcr, 0);
    }

    /// Why a check's event is missing, in its not-implemented line.
    fn missing(label: Label) -> &'static str {
        match label {
            Label::Instructions => {
                "PMCEID0_EL0 bit 8, INST_RETIRED, clear: QEMU counts instructions only under -icount"
            }
            Label::Chain => "PMCEID0_EL0 bit 30, CHAIN, clear: QEMU 7.2 has no chained counters",
            _ => "PMCEID0_EL0 bit 0, SW_INCR, clear",
        }
    }

    fn run(label: Label, me: usize, vcpus: usize, counters: usize, intid: IntId) -> Outcome {
        let result = match label {
            Label::Registers => registers(me, vcpus, counters),
            Label::CycleCounter => cycle_counter(me, vcpus),
            Label::SoftwareIncrement => software_increment(me, vcpus),
            Label::Overflow => overflow(me, vcpus, intid),
            Label::Instructions => instructions(),
            Label::Chain => chain(),
        };
        match result {
            Ok(detail) => Outcome::Passed(detail),
            Err(why) => Outcome::Failed(why),
        }
    }

    type Checked = Result<&'static str, Failure>;

    // ---- 1. Registers ----------------------------------------------------

    fn registers(me: usize, vcpus: usize, counters: usize) -> Checked {
        if counters < MIN_COUNTERS {
            return Err(Failure::Value {
                what: "PMCR_EL0.N",
                got: counters as u64,
                expected: MIN_COUNTERS as u64,
            });
        }
        let selected = 3;
        let cycles_type = event_type(event::CPU_CYCLES);
        write(Register::Pmselr, selected);
        write(Register::Pmxevtyper, cycles_type);
        expect(
            "PMEVTYPER3_EL0 after PMSELR_EL0 = 3 and a PMXEVTYPER_EL0 write",
            read_event(Event::Type, 3),
            cycles_type,
        )?;
        let filter = PMEVTYPER::U::SET.value;
        write(Register::Pmselr, u64::from(CYCLE_COUNTER));
        write(Register::Pmxevtyper, filter);
        expect(
            "PMCCFILTR_EL0 after PMSELR_EL0 = 31 and a PMXEVTYPER_EL0 write",
            read(Register::Pmccfiltr),
            filter,
        )?;
        write(Register::Pmccfiltr, 0);
        let user = if me == 0 {
            PMUSERENR::EN::SET.value
        } else {
            (PMUSERENR::CR::SET + PMUSERENR::ER::SET).value
        };
        let count = 0x1234_0000 + me as u64;
        write(Register::Pmuserenr, user);
        write_event(Event::Counter, selected as usize, count);
        wait_for_other(me, vcpus)?;
        expect(
            "PMUSERENR_EL0 after the other vCPU ran",
            read(Register::Pmuserenr),
            user,
        )?;
        expect(
            "PMEVCNTR3_EL0 after the other vCPU ran",
            read_event(Event::Counter, selected as usize),
            count,
        )?;
        write(Register::Pmuserenr, 0);
        // PMCR_EL0.P resets the event counters, C the cycle counter.
        let pmcr = read(Register::Pmcr);
        write(Register::Pmcr, pmcr | PMCR::P::SET.value);
        expect(
            "PMEVCNTR3_EL0 after PMCR_EL0.P",
            read_event(Event::Counter, 3),
            0,
        )?;
        write(Register::Pmccntr, 1 << 40);
        write(Register::Pmcr, pmcr | PMCR::C::SET.value);
        if read(Register::Pmccntr) >= 1 << 40 {
            return Err(Failure::Said("PMCR_EL0.C did not reset PMCCNTR_EL0"));
        }
        Ok("PMSELR, PMUSERENR, PMCR.P and C as the Arm ARM says")
    }

    // ---- 2. The cycle counter --------------------------------------------

    fn cycle_counter(me: usize, vcpus: usize) -> Checked {
        write(Register::Pmccfiltr, 0);
        write(Register::Pmcntenset, CYCLES);
        let sample = || (read(Register::Pmccntr), time::counter(), pv::steal_time(me));
        // Calibrate over a window without stolen time.
        let mut per_ns = None;
        for _ in 0..CALIBRATION_TRIES {
            let (c0, t0, s0) = sample();
            let end = t0 + time::to_ticks(CALIBRATION);
            while time::counter() < end {}
            let (c1, t1, s1) = sample();
            if s1 == s0 {
                if c1 <= c0 {
                    return Err(Failure::Said("PMCCNTR_EL0 did not advance"));
                }
                let ns = time::to_duration(t1 - t0).as_nanos() as f64;
                per_ns = Some((c1 - c0) as f64 / ns);
                break;
            }
        }
        let Some(per_ns) = per_ns else {
            return Err(Failure::Said("no calibration window without stolen time"));
        };
        if vcpus < 2 || !pv::init().steal_time {
            // Without a sibling or a stolen-time record there is nothing
            // to check the descheduled time against (bare QEMU).
            write(Register::Pmcntenclr, CYCLES);
            return Ok("advances; no stolen time to check the descheduled time against");
        }
        let (c0, t0, s0) = sample();
        wait_for_other(me, vcpus)?;
        let (c1, t1, s1) = sample();
        let window_ns = time::to_duration(t1 - t0).as_nanos() as u64;
        println!(
            "{PREFIX} vcpu {me}: {CYCLE_WINDOW} {} cycles in {} us, {} us of it descheduled, \
             {:.3} cycles/ns when alone",
            c1 - c0,
            window_ns / 1000,
            (s1 - s0) / 1000,
            per_ns
        );
        judge_cycles(c1 - c0, window_ns, s1 - s0, per_ns).map_err(Failure::Said)?;
        write(Register::Pmcntenclr, CYCLES);
        Ok("counts only while its vCPU runs (checked against its stolen time)")
    }

    // ---- 3. Software increment --------------------------------------------

    fn increment(counter: usize, times: u64) {
        for _ in 0..times {
            write(Register::Pmswinc, bit(counter));
        }
    }

    fn software_increment(me: usize, vcpus: usize) -> Checked {
        let n = SW_INCR_COUNTER;
        let base = 1000 * (me as u64 + 1);
        let (before, after) = (5 + me as u64, 3);
        write_event(Event::Type, n, event_type(event::SW_INCR));
        write_event(Event::Counter, n, base);
        write(Register::Pmcntenset, bit(n));
        increment(n, before);
        wait_for_other(me, vcpus)?;
        increment(n, after);
        write(Register::Pmcntenclr, bit(n));
        expect(
            "PMEVCNTR0_EL0 after the increments",
            read_event(Event::Counter, n),
            base + before + after,
        )?;
        Ok("exact across a switch")
    }

    // ---- 4. The overflow interrupt -----------------------------------------

    fn overflow(me: usize, vcpus: usize, intid: IntId) -> Checked {
        let n = OVERFLOW_COUNTER;
        // Nothing stale first.
        while let Some(stale) = gic::acknowledge() {
            gic::end_of_interrupt(stale);
        }
        write_event(Event::Type, n, event_type(event::SW_INCR));
        write_event(Event::Counter, n, ONE_BEFORE_OVERFLOW);
        write(Register::Pmovsclr, bit(n));
        write(Register::Pmintenset, bit(n));
        write(Register::Pmcntenset, bit(n));
        increment(n, 1);
        wait_for_other(me, vcpus)?;
        let deadline = time::counter() + time::to_ticks(pair::timeout());
        let got = loop {
            if let Some(taken) = gic::acknowledge() {
                break Some(taken);
            }
            if time::counter() >= deadline {
                break None;
            }
        };
        let result = (|| {
            match got {
                Some(taken) if taken == intid => {}
                Some(_) => return Err(Failure::Said("another interrupt came first")),
                None => return Err(Failure::Said("no PMU interrupt")),
            }
            // A 32-bit overflow (PMCR_EL0.LP clear) wraps bits 31:0; with
            // FEAT_PMUv3p5 the counter is 64 bits wide and carries on.
            expect(
                "PMEVCNTR1_EL0 bits 31:0 after the overflow",
                read_event(Event::Counter, n) & LOW_32_BITS,
                0,
            )?;
            expect(
                "PMOVSSET_EL0's bit of the counter",
                read(Register::Pmovsset) & bit(n),
                bit(n),
            )?;
            Ok(())
        })();
        // The handler's work: clear the overflow, then complete.
        write(Register::Pmovsclr, bit(n));
        if let Some(taken) = got {
            gic::end_of_interrupt(taken);
        }
        result?;
        let quiet_end = time::counter() + time::to_ticks(QUIET_WINDOW);
        while time::counter() < quiet_end {
            if let Some(again) = gic::acknowledge() {
                gic::end_of_interrupt(again);
                return Err(Failure::Said(
                    "an interrupt came again after the overflow was cleared",
                ));
            }
        }
        write(Register::Pmintenclr, bit(n));
        write(Register::Pmcntenclr, bit(n));
        Ok("taken once after the other vCPU ran, not again once cleared")
    }

    // ---- 5. Instructions retired --------------------------------------------

    /// PMEVCNTR2_EL0's increase between enabling and disabling it, around
    /// `NOPS` NOPs or none.
    fn count_instructions(with_nops: bool) -> u64 {
        let n = INSTRUCTION_COUNTER;
        write_event(Event::Counter, n, 0);
        let enable = bit(n);
        if with_nops {
            // SAFETY: enables a counter, runs NOPs, disables it.
            unsafe {
                asm!(
                    "msr pmcntenset_el0, {0}",
                    ".rept 1000",
                    "nop",
                    ".endr",
                    "msr pmcntenclr_el0, {0}",
                    in(reg) enable,
                    options(nomem, nostack),
                )
            };
        } else {
            // SAFETY: as above, without the NOPs.
            unsafe {
                asm!(
                    "msr pmcntenset_el0, {0}",
                    "msr pmcntenclr_el0, {0}",
                    in(reg) enable,
                    options(nomem, nostack),
                )
            };
        }
        read_event(Event::Counter, n)
    }

    fn instructions() -> Checked {
        const _: () = assert!(NOPS == 1000, "the .rept count");
        // Only EL1 (no EL0 code runs), never EL2.
        let n = INSTRUCTION_COUNTER;
        write_event(
            Event::Type,
            n,
            event_type(event::INST_RETIRED) | PMEVTYPER::U::SET.value,
        );
        let without = count_instructions(false);
        let with = count_instructions(true);
        expect(
            "instructions retired by 1000 NOPs",
            with.wrapping_sub(without),
            NOPS,
        )?;
        Ok("exact")
    }

    // ---- 6. Chained counters -----------------------------------------------

    fn chain() -> Checked {
        let (low, high) = (CHAIN_LOW_COUNTER, CHAIN_HIGH_COUNTER);
        write_event(Event::Type, low, event_type(event::SW_INCR));
        write_event(Event::Type, high, event_type(event::CHAIN));
        write_event(Event::Counter, low, ONE_BEFORE_OVERFLOW);
        write_event(Event::Counter, high, 0);
        write(Register::Pmcntenset, bit(low) | bit(high));
        increment(low, 1);
        write(Register::Pmcntenclr, bit(low) | bit(high));
        expect(
            "the chain's low counter, bits 31:0",
            read_event(Event::Counter, low) & LOW_32_BITS,
            0,
        )?;
        expect(
            "the chain's high counter",
            read_event(Event::Counter, high),
            1,
        )?;
        Ok("the odd counter counts the even one's overflow")
    }
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "pmu-check is a bare-metal guest; build it with `cargo xtask build` and boot it with \
         `cargo xtask run --guest pmu-check`"
    );
    std::process::exit(2);
}
