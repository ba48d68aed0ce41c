//! `debug-check`: proves a guest's self-hosted debug end to end on its
//! first two vCPUs at once, then powers off. Meant for two vCPUs sharing
//! one pCPU, where a vCPU's debug state must follow it through every
//! switch (`cargo xtask test --filter debug-check`).
//!
//! Command line (`/chosen/bootargs`): `timeout=S`, the seconds each wait
//! for the other vCPU may take (1..=3600, default 30).
//!
//! Each of vCPUs 0 and 1 unlocks its OS lock, sets MDSCR_EL1.MDE and KDE,
//! unmasks debug exceptions (PSTATE.D) and reads how many breakpoints and
//! watchpoints ID_AA64DFR0_EL1 says it has
//! (`guest_driver::debugcheck::FeaturesLine`). Then, each check printing
//! `debug-check: vcpu N: <label>: ok` or `...: FAILED: <why>`
//! (`guest_driver::debugcheck::Label`):
//!
//! 1. **breakpoint n**, for every breakpoint in turn: DBGBVRn = the
//!    vCPU's own instruction (in a sled of NOPs of its own), DBGBCRn =
//!    enabled at EL1. It waits until the other vCPU ran (with one pCPU:
//!    this one was descheduled and loaded again), reads both registers
//!    back, runs the other vCPU's sled (nothing must fire: its breakpoints
//!    are not ours), then its own (exactly one breakpoint exception, EC
//!    0x31, IFSC 0b100010, ELR_EL1 = the address), then again with DBGBCRn
//!    cleared (nothing);
//! 2. **watchpoint n**, for every watchpoint: DBGWVRn = a doubleword of
//!    its own, DBGWCRn = enabled at EL1 for loads, stores or both
//!    (`Watch::for_watchpoint`). After the other vCPU ran: read back; a
//!    load and a store of the other vCPU's word (nothing); a load and a
//!    store of its own, each raising a watchpoint exception (EC 0x35, WnR
//!    as the access, FAR_EL1 = the word, ELR_EL1 = the instruction) if
//!    the watchpoint watches that kind, else nothing; cleared, nothing;
//! 3. **step**: with PSTATE.D masked, MDSCR_EL1.SS set; after the other
//!    vCPU ran, an ERET with SPSR.SS set runs one instruction, and the
//!    software step exception (EC 0x33, ISV, IFSC 0b100010) must name the
//!    next one, with the instruction's result in place: `add` (run by the
//!    CPU), `mrs` of ID_AA64DFR0_EL1 and a load from GICD_TYPER (both
//!    completed by the hypervisor, which must end the step there too),
//!    and the SMCCC_VERSION call;
//! 4. **os lock**: breakpoint 0 armed; OS lock locked (OSLAR_EL1 = 1):
//!    OSLSR_EL1 says so and the breakpoint does not fire; unlocked: it
//!    fires.
//!
//! Then MDSCR_EL1 = 0 and breakpoints and watchpoints off. The run ends
//! with `debug-check: all checks passed`, or a `GUEST FATAL` line
//! counting the failures; either way the guest powers off.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod guest {
    use core::arch::{asm, global_asm};
    use core::fmt;
    use core::sync::atomic::AtomicU64;

    use aarch64_cpu::registers::{DAIF, ID_AA64DFR0_EL1, MDSCR_EL1, OSLAR_EL1};
    use boot::debug::{self, Comparator::*};
    use tock_registers::interfaces::{Readable, Writeable};

    use guest_driver::debugcheck::{
        ALL_PASSED, Features, FeaturesLine, Label, MAX_COMPARATORS, MAX_VCPUS, PREFIX, StepKind,
        Verdict, Watch, breakpoint_control, judge_breakpoint, judge_step, judge_watchpoint,
        watchpoint_control,
    };
    use guest_driver::devicetree::Conduit;
    use guest_driver::println;
    use guest_driver::rt::{self, fault, gic, pair};

    guest_driver::entry!(main, secondary_main);

    /// Per vCPU, the doublewords its watchpoints watch.
    static WORDS: [[AtomicU64; MAX_COMPARATORS]; MAX_VCPUS] =
        [const { [const { AtomicU64::new(0) }; MAX_COMPARATORS] }; MAX_VCPUS];

    // The code the checks break on and step: per vCPU a sled of 16 NOPs
    // and a RET (breakpoint n of vCPU v is on NOP n of sled v); one
    // instruction and a RET per stepped kind; the load and the store the
    // watchpoints watch (x1 the address, x0 the value).
    global_asm!(
        r#"
        .section .text.debug_check, "ax"
        .balign 4
        .global debug_check_sled0
    debug_check_sled0:
        .rept 16
        nop
        .endr
        ret
        .global debug_check_sled1
    debug_check_sled1:
        .rept 16
        nop
        .endr
        ret
        .global debug_check_step_add
    debug_check_step_add:
        add x2, x2, #1
        ret
        .global debug_check_step_mrs
    debug_check_step_mrs:
        mrs x2, id_aa64dfr0_el1
        ret
        .global debug_check_step_ldr
    debug_check_step_ldr:
        ldr w2, [x3]
        ret
        .global debug_check_step_hvc
    debug_check_step_hvc:
        hvc #0
        ret
        .global debug_check_step_smc
    debug_check_step_smc:
        smc #0
        ret
        .global debug_check_load
    debug_check_load:
        ldr x0, [x1]
        ret
        .global debug_check_store
    debug_check_store:
        str x0, [x1]
        ret
    "#
    );

    unsafe extern "C" {
        fn debug_check_sled0();
        fn debug_check_sled1();
        fn debug_check_step_add();
        fn debug_check_step_mrs();
        fn debug_check_step_ldr();
        fn debug_check_step_hvc();
        fn debug_check_step_smc();
        fn debug_check_load();
        fn debug_check_store();
    }

    fn address_of(f: unsafe extern "C" fn()) -> u64 {
        f as usize as u64
    }

    /// vCPU `vcpu`'s sled.
    fn sled(vcpu: usize) -> u64 {
        if vcpu == 0 {
            address_of(debug_check_sled0)
        } else {
            address_of(debug_check_sled1)
        }
    }

    /// Runs the sled at `address` (16 NOPs and a RET).
    fn run_sled(address: u64) {
        // SAFETY: the sled only returns (x30); breakpoints on it are taken
        // by the runtime's handler, which resumes after the NOP.
        unsafe { asm!("blr {0}", in(reg) address, out("x30") _, options(nostack)) };
    }

    /// Loads the doubleword at `address` with the watched load.
    fn load(address: u64) {
        // SAFETY: `address` is one of WORDS; the function only loads it.
        unsafe {
            asm!("blr {f}", f = in(reg) address_of(debug_check_load), in("x1") address,
                 out("x0") _, out("x30") _, options(nostack))
        };
    }

    /// Stores `value` at `address` with the watched store.
    fn store(address: u64, value: u64) {
        // SAFETY: `address` is one of WORDS (an AtomicU64); a plain
        // 64-bit store is single-copy atomic.
        unsafe {
            asm!("blr {f}", f = in(reg) address_of(debug_check_store), in("x1") address,
                 in("x0") value, out("x30") _, options(nostack))
        };
    }

    /// Reads OSLSR_EL1 (aarch64-cpu does not define it).
    fn read_oslsr() -> u64 {
        let value;
        // SAFETY: a read of a debug status register.
        unsafe { asm!("mrs {}, oslsr_el1", out(reg) value, options(nomem, nostack)) };
        value
    }

    /// OSLSR_EL1.OSLK.
    const OSLSR_LOCKED: u64 = 1 << 1;
    /// SPSR.SS and SPSR.M = EL1t (the guests run at EL1 on SP_EL0).
    const SPSR_SS: u64 = 1 << 21;
    const SPSR_EL1T: u64 = 0b0100;

    fn mask_debug() {
        // SAFETY: masks debug exceptions (PSTATE.D); no memory effect.
        unsafe { asm!("msr daifset, #8", options(nomem, nostack)) };
    }

    fn unmask_debug() {
        // SAFETY: unmasks debug exceptions; the runtime catches those a
        // check expects (rt::fault).
        unsafe { asm!("msr daifclr, #8", options(nomem, nostack)) };
    }

    // ---- Reporting and waiting -------------------------------------------

    fn pass(vcpu: usize, label: Label, detail: fmt::Arguments) {
        println!("{PREFIX} vcpu {vcpu}: {label}: ok ({detail})");
    }

    fn fail(vcpu: usize, label: Label, why: fmt::Arguments) {
        println!("{PREFIX} vcpu {vcpu}: {label}: FAILED: {why}");
        pair::failed();
    }

    fn wait_for_other(me: usize, vcpus: usize) -> bool {
        pair::wait_for_other(me, vcpus)
    }

    // ---- main ------------------------------------------------------------

    fn main() {
        // The step check loads from the distributor: map it.
        if let Err(e) = gic::init() {
            rt::fatal(format_args!("{PREFIX} cannot map the GIC: {e}"));
        }
        pair::main(PREFIX, ALL_PASSED, checks);
    }

    fn secondary_main(cpu: usize) {
        pair::secondary(cpu, checks);
    }

    /// Every check of vCPU `me` (`rt::pair` runs it on both vCPUs).
    fn checks(me: usize, vcpus: usize) {
        let features = Features::from_dfr0(ID_AA64DFR0_EL1.get());
        println!("{}", FeaturesLine { vcpu: me, features });
        OSLAR_EL1.write(OSLAR_EL1::OSLK::Unlocked);
        MDSCR_EL1.write(MDSCR_EL1::MDE::SET + MDSCR_EL1::KDE::SET);
        unmask_debug();
        let count = |n: usize| n.min(MAX_COMPARATORS);
        for n in 0..count(features.breakpoints) {
            report(me, Label::Breakpoint(n), breakpoint(me, vcpus, n));
        }
        for n in 0..count(features.watchpoints) {
            report(me, Label::Watchpoint(n), watchpoint(me, vcpus, n));
        }
        for kind in StepKind::ALL {
            report(me, Label::Step(kind), step(me, vcpus, kind));
        }
        report(me, Label::OsLock, os_lock(me));
        mask_debug();
        MDSCR_EL1.set(0);
    }

    /// Why a check failed.
    enum CheckError {
        /// A judge's verdict.
        Judged(&'static str),
        /// A register read back wrong.
        ReadBack {
            what: &'static str,
            n: usize,
            wrote: u64,
            read: u64,
        },
        /// The other vCPU never ran.
        NotDescheduled,
        /// A result of a stepped instruction.
        Result { got: u64, expected: u64 },
    }

    impl From<&'static str> for CheckError {
        fn from(why: &'static str) -> Self {
            Self::Judged(why)
        }
    }

    impl fmt::Display for CheckError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Self::Judged(why) => f.write_str(why),
                Self::ReadBack {
                    what,
                    n,
                    wrote,
                    read,
                } => write!(f, "{what}{n}_EL1 reads {read:#x} after writing {wrote:#x}"),
                Self::NotDescheduled => f.write_str("the other vCPU did not run in time"),
                Self::Result { got, expected } => {
                    write!(
                        f,
                        "the stepped instruction's result is {got:#x}, not {expected:#x}"
                    )
                }
            }
        }
    }

    fn report(me: usize, label: Label, outcome: Result<(), CheckError>) {
        let detail = match label {
            Label::OsLock => "silent while locked, fired once unlocked",
            _ => "checked after the other vCPU ran",
        };
        match outcome {
            Ok(()) => pass(me, label, format_args!("{detail}")),
            Err(e) => fail(me, label, format_args!("{e}")),
        }
    }

    fn read_back(what: &'static str, n: usize, wrote: u64, read: u64) -> Result<(), CheckError> {
        if read == wrote {
            Ok(())
        } else {
            Err(CheckError::ReadBack {
                what,
                n,
                wrote,
                read,
            })
        }
    }

    fn waited(me: usize, vcpus: usize) -> Result<(), CheckError> {
        if wait_for_other(me, vcpus) {
            Ok(())
        } else {
            Err(CheckError::NotDescheduled)
        }
    }

    fn judged(verdict: Verdict) -> Result<(), CheckError> {
        verdict.map_err(CheckError::from)
    }

    // ---- 1. Breakpoints --------------------------------------------------

    fn breakpoint(me: usize, vcpus: usize, n: usize) -> Result<(), CheckError> {
        let address = sled(me) + 4 * n as u64;
        let control = breakpoint_control();
        debug::write(BreakpointValue, n, address);
        debug::write(BreakpointControl, n, control);
        let outcome = (|| {
            waited(me, vcpus)?;
            read_back("DBGBVR", n, address, debug::read(BreakpointValue, n))?;
            read_back("DBGBCR", n, control, debug::read(BreakpointControl, n))?;
            let ((), caught) = fault::expect(|| run_sled(sled(1 - me)));
            if caught.is_some() {
                return Err("a breakpoint fired in the other vCPU's code".into());
            }
            let ((), caught) = fault::expect(|| run_sled(sled(me)));
            judged(judge_breakpoint(caught, address))?;
            debug::write(BreakpointControl, n, 0);
            let ((), caught) = fault::expect(|| run_sled(sled(me)));
            if caught.is_some() {
                return Err("the breakpoint fired after DBGBCR was cleared".into());
            }
            Ok(())
        })();
        debug::write(BreakpointControl, n, 0);
        debug::write(BreakpointValue, n, 0);
        outcome
    }

    // ---- 2. Watchpoints --------------------------------------------------

    fn watchpoint(me: usize, vcpus: usize, n: usize) -> Result<(), CheckError> {
        let address = WORDS[me][n].as_ptr() as u64;
        let theirs = WORDS[1 - me][n].as_ptr() as u64;
        let watch = Watch::for_watchpoint(n);
        let control = watchpoint_control(watch);
        debug::write(WatchpointValue, n, address);
        debug::write(WatchpointControl, n, control);
        let outcome = (|| {
            waited(me, vcpus)?;
            read_back("DBGWVR", n, address, debug::read(WatchpointValue, n))?;
            read_back("DBGWCR", n, control, debug::read(WatchpointControl, n))?;
            let ((), load_caught) = fault::expect(|| load(theirs));
            let ((), store_caught) = fault::expect(|| store(theirs, 1));
            if load_caught.is_some() || store_caught.is_some() {
                return Err("a watchpoint fired on the other vCPU's word".into());
            }
            let ((), caught) = fault::expect(|| load(address));
            judged(judge_watchpoint(
                caught,
                address,
                address_of(debug_check_load),
                false,
                watch.loads(),
            ))?;
            let ((), caught) = fault::expect(|| store(address, 2));
            judged(judge_watchpoint(
                caught,
                address,
                address_of(debug_check_store),
                true,
                watch.stores(),
            ))?;
            debug::write(WatchpointControl, n, 0);
            let ((), load_caught) = fault::expect(|| load(address));
            let ((), store_caught) = fault::expect(|| store(address, 3));
            if load_caught.is_some() || store_caught.is_some() {
                return Err("the watchpoint fired after DBGWCR was cleared".into());
            }
            Ok(())
        })();
        debug::write(WatchpointControl, n, 0);
        debug::write(WatchpointValue, n, 0);
        outcome
    }

    // ---- 3. Software step ------------------------------------------------

    /// The registers a stepped instruction uses: x0 (a call's function
    /// and result), x2 (the result of the others), x3 (the address a load
    /// uses).
    #[derive(Clone, Copy)]
    struct StepRegisters {
        x0: u64,
        x2: u64,
        x3: u64,
    }

    /// Runs the instruction at `target` (followed by a RET) with `regs`:
    /// stepped if `stepping` (MDSCR_EL1.SS must be set and PSTATE.D
    /// masked), else plainly. Returns x0 and x2 afterwards.
    fn run_target(target: u64, regs: StepRegisters, stepping: bool) -> (u64, u64) {
        let (x0, x2);
        if stepping {
            // An ERET with SPSR.SS set and D clear: the step state machine
            // is active-not-pending, so the one instruction at the target
            // runs and the step exception follows. DAIF's A, I, F stay.
            let spsr = (DAIF.get() & !DAIF::D::SET.value) | SPSR_EL1T | SPSR_SS;
            // SAFETY: the target runs one instruction with the registers
            // given and returns to label 1 (x30); the step exception in
            // between is caught by the caller (rt::fault), which resumes
            // at the target's RET with debug exceptions masked. A call
            // (HVC/SMC, SMCCC) preserves x4-x17 and returns in x0-x3.
            unsafe {
                asm!(
                    "adr x30, 1f",
                    "msr elr_el1, {target}",
                    "msr spsr_el1, {spsr}",
                    "isb",
                    "eret",
                    "1:",
                    target = in(reg) target,
                    spsr = in(reg) spsr,
                    inout("x0") regs.x0 => x0,
                    inout("x2") regs.x2 => x2,
                    inout("x3") regs.x3 => _,
                    out("x1") _,
                    out("x30") _,
                    options(nostack),
                )
            };
        } else {
            // SAFETY: as above, plainly called.
            unsafe {
                asm!(
                    "blr {target}",
                    target = in(reg) target,
                    inout("x0") regs.x0 => x0,
                    inout("x2") regs.x2 => x2,
                    inout("x3") regs.x3 => _,
                    out("x1") _,
                    out("x30") _,
                    options(nostack),
                )
            };
        }
        (x0, x2)
    }

    /// The instruction a step kind steps, the registers it starts with,
    /// and which of x0 and x2 holds its result.
    fn step_target(kind: StepKind) -> (u64, StepRegisters, bool) {
        let machine = rt::machine();
        let none = StepRegisters {
            x0: 0,
            x2: 41,
            x3: 0,
        };
        match kind {
            StepKind::Plain => (address_of(debug_check_step_add), none, false),
            StepKind::SystemRegister => (address_of(debug_check_step_mrs), none, false),
            StepKind::Mmio => {
                let distributor = machine.gic.map_or(0, |g| g.distributor.start);
                let typer = distributor + gic_regs::offset::GICD_TYPER;
                (
                    address_of(debug_check_step_ldr),
                    StepRegisters { x3: typer, ..none },
                    false,
                )
            }
            StepKind::Hypercall => {
                let target = match machine.psci {
                    Some(Conduit::Smc) => address_of(debug_check_step_smc),
                    _ => address_of(debug_check_step_hvc),
                };
                let version = u64::from(pvlock_abi::arch::SMCCC_VERSION.raw());
                (
                    target,
                    StepRegisters {
                        x0: version,
                        ..none
                    },
                    true,
                )
            }
        }
    }

    fn step(me: usize, vcpus: usize, kind: StepKind) -> Result<(), CheckError> {
        let (target, regs, in_x0) = step_target(kind);
        let (x0, x2) = run_target(target, regs, false);
        let expected = if in_x0 { x0 } else { x2 };
        mask_debug();
        MDSCR_EL1.write(MDSCR_EL1::MDE::SET + MDSCR_EL1::KDE::SET + MDSCR_EL1::SS::SET);
        let outcome = (|| {
            waited(me, vcpus)?;
            if !MDSCR_EL1.is_set(MDSCR_EL1::SS) {
                return Err("MDSCR_EL1.SS was lost".into());
            }
            let ((x0, x2), caught) = fault::expect(|| run_target(target, regs, true));
            judged(judge_step(caught, target + 4))?;
            let got = if in_x0 { x0 } else { x2 };
            if got != expected {
                return Err(CheckError::Result { got, expected });
            }
            Ok(())
        })();
        MDSCR_EL1.write(MDSCR_EL1::MDE::SET + MDSCR_EL1::KDE::SET);
        unmask_debug();
        outcome
    }

    // ---- 4. The OS lock ----------------------------------------------------

    fn os_lock(me: usize) -> Result<(), CheckError> {
        let address = sled(me);
        debug::write(BreakpointValue, 0, address);
        debug::write(BreakpointControl, 0, breakpoint_control());
        let outcome = (|| {
            OSLAR_EL1.write(OSLAR_EL1::OSLK::Locked);
            if read_oslsr() & OSLSR_LOCKED == 0 {
                return Err("OSLSR_EL1.OSLK clear after locking".into());
            }
            read_back("DBGBVR", 0, address, debug::read(BreakpointValue, 0))?;
            let ((), caught) = fault::expect(|| run_sled(address));
            if caught.is_some() {
                return Err("a breakpoint fired with the OS lock locked".into());
            }
            OSLAR_EL1.write(OSLAR_EL1::OSLK::Unlocked);
            if read_oslsr() & OSLSR_LOCKED != 0 {
                return Err("OSLSR_EL1.OSLK set after unlocking".into());
            }
            let ((), caught) = fault::expect(|| run_sled(address));
            judged(judge_breakpoint(caught, address))
        })();
        OSLAR_EL1.write(OSLAR_EL1::OSLK::Unlocked);
        debug::write(BreakpointControl, 0, 0);
        debug::write(BreakpointValue, 0, 0);
        outcome
    }
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "debug-check is a bare-metal guest; build it with `cargo xtask build` and boot it with \
         `cargo xtask run --guest debug-check`"
    );
    std::process::exit(2);
}
