//! `hostile`: a guest that attacks the hypervisor it runs under, the way
//! docs/security.md's threat model lets any guest, and checks that every
//! attempt gets the answer the project documents. It survives its own
//! aborts and undefined instructions with `rt::fault::expect`, prints one
//! line per attempt (`guest_driver::hostile` has the attempts, their
//! documented answers and the lines) and powers off.
//!
//! It needs a VM with `pv-lock = "openeuler"` and el2's other defaults (PV
//! time on, no `control`, no KVM PTP), at least three vCPUs (four in the
//! boot test) whose device-tree order is their vCPU order, and one RAM
//! bank. Command line: `timeout=S`, the seconds a step waits for the other
//! vCPUs (1..=3600, default 30).
//!
//! What it does, in order (vCPU 0 unless said otherwise):
//!
//! 1. starts every vCPU but the last, which stays off for the CPU_ON
//!    attempts; the others wait for work and watch each other's waits
//!    (below);
//! 2. CPU_ON of the last vCPU with an entry point past RAM and in device
//!    memory, and of an unknown MPIDR; every function id `pvlock_abi`
//!    names (but CPU_OFF, SYSTEM_OFF, SYSTEM_RESET) with garbage
//!    arguments; PV_SCHED_IPA_INIT of bad IPAs, PV_TIME_ST, KICK_CPU and
//!    PV_SCHED_YIELD_TO of no vCPU and of itself, the control call; SMC
//!    against HVC, SiP and OEM calls, HVC #1 and SMC #1;
//! 3. loads and stores outside RAM, an instruction fetch outside RAM, the
//!    host's GIC ITS, RTC and fw_cfg, 8-byte accesses to the PL011 and
//!    GICD_CTLR, a reserved and a read-only GICD register, a load pair from
//!    the distributor;
//! 4. PMU, breakpoint, MDSCR_EL1 and OS-lock registers, CNTP_CTL_EL0,
//!    HCR_EL2, the ID registers;
//! 5. all running vCPUs race to CPU_ON the last one at once;
//! 6. the storms: 100 000 SMCCC_VERSION calls, 10 000 WFIs (each with the
//!    virtual timer armed), 10 000 WFEs, 10 000 SGIs to itself while the
//!    SGI is disabled;
//! 7. every vCPU notes its stolen time; the middle vCPUs scribble over
//!    every vCPU's PV-lock and stolen-time record while the last one runs;
//!    then each vCPU in turn has itself rescheduled and checks that its own
//!    records were rewritten sanely;
//! 8. whether every wait of the run ended by its deadline.
//!
//! Every WFI and CPU_SUSPEND has the virtual timer armed, and the vCPUs
//! that look for work check the others' waits: one still blocked
//! `hostile::LOST_WAKE_UP` past its deadline has lost its wake-up, which
//! is counted (and fails the attempt it belongs to, and the last one) and
//! ended with a KICK_CPU, so that the run goes on to report it. vCPUs wait
//! for work in WFI, but vCPU 1 spins: a lost wake-up can leave a pCPU
//! asleep with every vCPU that blocked on it.
//!
//! The run ends with `hostile: all N attempts answered as documented`, or
//! a `GUEST FATAL` line counting the failures.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod guest {
    use core::arch::asm;
    use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
    use core::time::Duration;

    use aarch64_cpu::registers::{
        ID_AA64DFR0_EL1, ID_AA64PFR0_EL1, ID_AA64PFR1_EL1, MDSCR_EL1, MPIDR_EL1, OSLAR_EL1,
    };
    use boot::pmu::{self, Register::*};
    use guest_driver::bootargs::{ArgError, BootArgs};
    use guest_driver::devicetree::{MAX_CPUS, MemRange};
    use guest_driver::fault::Caught;
    use guest_driver::gicv3::IntId;
    use guest_driver::hostile::{
        self, Access, AllAnswered, BREAKPOINT_ADDRESS, BREAKPOINT_CONTROL, BadCpuOn, BadIpa, Env,
        FETCH_TARGET, GICD_CTLR, GICD_RESERVED, GICD_TYPER, HostDevice, LOST_WAKE_UP, Label, Note,
        Outcome, PL011_FR, PMU_ENABLES_WRITTEN, PREFIX, Place, RecordCheck, ResultLine,
        SCRIBBLE_PATTERNS, STORM_LOST_WAKE_UPS_MAX, SmcCall, Storm, Target, Unowned, Via,
    };
    use guest_driver::mpidr::Mpidr;
    use guest_driver::note;
    use guest_driver::println;
    use guest_driver::pv::{Conduit, HvcConduit, SmcConduit};
    use guest_driver::rt::{self, SpinMutex, fault, gic, mmu, psci, pv, smp, time};
    use pvlock_abi::pvlock::{self, Variant};
    use pvlock_abi::pvtime::StolenTime;
    use pvlock_abi::{arch, pvtime, smccc};
    use spin::Once;
    use tock_registers::interfaces::{Readable, Writeable};

    guest_driver::entry!(main, secondary_main);

    /// Fewest vCPUs the guest works with: two to race for a third.
    const MIN_VCPUS: usize = 3;
    /// How long the scribblers scribble: several of el2's 4 ms slices, so
    /// that the hypervisor puts and loads vCPUs (and writes their records)
    /// while they do.
    const SCRIBBLE_TIME: Duration = Duration::from_millis(40);
    /// How long a vCPU waits in WFI between looks for work, and how long
    /// each WFI that should get it rescheduled lasts.
    const IDLE_WAIT: Duration = Duration::from_millis(1);
    /// WFIs a vCPU tries before it gives up on being rescheduled.
    const RESCHEDULE_TRIES: u32 = 10;
    /// How far ahead a PSCI CPU_SUSPEND with garbage arguments arms the
    /// virtual timer that ends it.
    const SUSPEND_WAKE: Duration = Duration::from_micros(50);
    /// Stolen time counts from the VM's start, a little before the
    /// runtime's clock does: the bound a sane stolen time stays below is
    /// the runtime's uptime plus this.
    const STOLEN_TIME_SLACK: Duration = Duration::from_secs(1);
    /// The SGI the storm sends, disabled.
    const STORM_SGI: IntId = IntId::sgi(15);
    /// Its priority, any the priority mask lets through.
    const STORM_SGI_PRIORITY: u8 = 0x80;
    /// What the stores of the attempts write.
    const PROBE_VALUE: u32 = 0xa5a5_a5a5;
    /// PMCR_EL0.E and PMCR_EL0.C (Arm ARM D19.5 "PMCR_EL0"): enable the
    /// counters, reset the cycle counter.
    const PMCR_ENABLE_AND_RESET_CYCLES: u64 = 1 << 0 | 1 << 2;
    /// PMCNTENSET_EL0.C: enable the cycle counter.
    const PMCNTENSET_CYCLES: u64 = 1 << 31;
    /// 32-bit words of a PV record.
    const RECORD_WORDS: usize = pvlock::STATE_SIZE / 4;
    const _: () = assert!(pvtime::RECORD_SIZE == pvlock::STATE_SIZE);

    // ---- Settings and reporting ----------------------------------------------

    struct Settings {
        timeout: Duration,
    }

    impl Settings {
        fn parse(args: BootArgs<'static>) -> Result<Self, ArgError<'static>> {
            Ok(Self {
                timeout: Duration::from_secs(args.number("timeout", 30, 1, 3600)?),
            })
        }
    }

    static SETTINGS: Once<Settings> = Once::new();

    fn timeout() -> Duration {
        SETTINGS
            .get()
            .map_or(Duration::from_secs(30), |s| s.timeout)
    }

    /// Attempts reported, and those that failed.
    static REPORTED: AtomicUsize = AtomicUsize::new(0);
    static FAILURES: AtomicUsize = AtomicUsize::new(0);

    fn report(label: Label, outcome: Outcome) {
        println!(
            "{}",
            ResultLine {
                label,
                outcome: &outcome
            }
        );
        REPORTED.fetch_add(1, Ordering::Relaxed);
        if !outcome.answered {
            FAILURES.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Stops the guest: it cannot attack as planned.
    fn setup_failed(why: core::fmt::Arguments) -> ! {
        rt::fatal(format_args!("{PREFIX} set-up: {why}"))
    }

    // ---- Probes: single instructions that may fault ----------------------------
    //
    // Each returns the address of its own faulting instruction (ADR of the
    // local label), which the judge compares with ELR_EL1. A probe that
    // faults is resumed after the instruction by rt::fault::expect, with
    // its destination register as it was.

    /// A 4-byte load from `address`: (value, address of the LDR).
    fn load32(address: u64) -> (u64, u64) {
        let (value, at): (u32, u64);
        // SAFETY: `address` is mapped as device memory (or is a device
        // register the guest may read); the load either reads it or
        // aborts, which the caller catches with rt::fault::expect. It
        // writes no memory of the guest's.
        unsafe {
            asm!(
                "adr {at}, 0f",
                "0: ldr {value:w}, [{address}]",
                address = in(reg) address,
                value = out(reg) value,
                at = out(reg) at,
                options(nostack, preserves_flags),
            );
        }
        (value.into(), at)
    }

    /// An 8-byte load from `address`: (value, address of the LDR).
    fn load64(address: u64) -> (u64, u64) {
        let (value, at);
        // SAFETY: as load32, for an 8-byte access.
        unsafe {
            asm!(
                "adr {at}, 0f",
                "0: ldr {value}, [{address}]",
                address = in(reg) address,
                value = out(reg) value,
                at = out(reg) at,
                options(nostack, preserves_flags),
            );
        }
        (value, at)
    }

    /// A 4-byte store of `value` to `address`: the address of the STR.
    fn store32(address: u64, value: u32) -> u64 {
        let at;
        // SAFETY: `address` is mapped as device memory outside the guest's
        // RAM (or is a device register the test means to write): the store
        // reaches no memory the guest or its runtime uses, and either goes
        // to the device or aborts, which the caller catches.
        unsafe {
            asm!(
                "adr {at}, 0f",
                "0: str {value:w}, [{address}]",
                address = in(reg) address,
                value = in(reg) value,
                at = out(reg) at,
                options(nostack, preserves_flags),
            );
        }
        at
    }

    /// An 8-byte store of `value` to `address`: the address of the STR.
    fn store64(address: u64, value: u64) -> u64 {
        let at;
        // SAFETY: as store32, for an 8-byte access.
        unsafe {
            asm!(
                "adr {at}, 0f",
                "0: str {value}, [{address}]",
                address = in(reg) address,
                value = in(reg) value,
                at = out(reg) at,
                options(nostack, preserves_flags),
            );
        }
        at
    }

    /// A load pair of two 4-byte words from `address` (an access whose
    /// abort syndrome has no ISV): the address of the LDP.
    fn load_pair(address: u64) -> u64 {
        let at;
        // SAFETY: as load32; the two registers are scratch.
        unsafe {
            asm!(
                "adr {at}, 0f",
                "0: ldp {first:w}, {second:w}, [{address}]",
                address = in(reg) address,
                first = out(reg) _,
                second = out(reg) _,
                at = out(reg) at,
                options(nostack, preserves_flags),
            );
        }
        at
    }

    /// Branches to `target` with BLR (an instruction fetch there): returns
    /// once rt::fault::expect resumes at the link register, or if code at
    /// `target` returns.
    fn branch_to(target: u64) {
        // SAFETY: `target` is mapped executable but backed by no memory:
        // the fetch aborts and rt::fault::expect resumes at the link
        // register (x30, set by BLR) with every other register as it was.
        // The C ABI clobbers cover a callee that did run.
        unsafe { asm!("blr {target}", target = in(reg) target, clobber_abi("C")) };
    }

    /// Reads CNTP_CTL_EL0, the EL1 physical timer el2 does not let guests
    /// use: (value, address of the MRS).
    fn read_cntp_ctl() -> (u64, u64) {
        let (value, at);
        // SAFETY: a system register read; it touches no memory. It traps
        // to the hypervisor, whose undefined instruction the caller
        // catches.
        unsafe {
            asm!(
                "adr {at}, 0f",
                "0: mrs {value}, cntp_ctl_el0",
                value = out(reg) value,
                at = out(reg) at,
                options(nomem, nostack, preserves_flags),
            );
        }
        (value, at)
    }

    /// Writes 0 (timer off) to CNTP_CTL_EL0: the address of the MSR.
    fn write_cntp_ctl() -> u64 {
        let at;
        // SAFETY: as read_cntp_ctl; writing 0 would only disable a timer
        // the guest does not use.
        unsafe {
            asm!(
                "adr {at}, 0f",
                "0: msr cntp_ctl_el0, xzr",
                at = out(reg) at,
                options(nomem, nostack, preserves_flags),
            );
        }
        at
    }

    /// Reads HCR_EL2 (S3_4_C1_C1_0) from EL1: (value, address of the MRS).
    fn read_hcr_el2() -> (u64, u64) {
        let (value, at);
        // SAFETY: an EL2 register read from EL1 is undefined: it raises
        // an exception the caller catches, and touches no memory.
        unsafe {
            asm!(
                "adr {at}, 0f",
                "0: mrs {value}, s3_4_c1_c1_0",
                value = out(reg) value,
                at = out(reg) at,
                options(nomem, nostack, preserves_flags),
            );
        }
        (value, at)
    }

    /// Defines a reader and a writer of a system register that aarch64-cpu
    /// does not define, by its assembler name.
    macro_rules! system_register {
        ($read:ident, $write:ident, $name:literal) => {
            #[doc = concat!("Reads ", $name, ".")]
            fn $read() -> u64 {
                let value;
                // SAFETY: a system register read; no memory is touched. It
                // traps to the hypervisor, which emulates it (an exception
                // instead is caught by the caller).
                unsafe {
                    asm!(concat!("mrs {}, ", $name), out(reg) value,
                         options(nomem, nostack, preserves_flags))
                };
                value
            }

            #[doc = concat!("Writes ", $name, ".")]
            fn $write(value: u64) {
                // SAFETY: as the read; the hypervisor emulates the register
                // per vCPU (or ignores the write), so no real debug or PMU
                // state changes.
                unsafe {
                    asm!(concat!("msr ", $name, ", {}"), in(reg) value,
                         options(nomem, nostack, preserves_flags))
                };
            }
        };
    }

    system_register!(read_dbgbvr0, write_dbgbvr0, "dbgbvr0_el1");
    system_register!(read_dbgbcr0, write_dbgbcr0, "dbgbcr0_el1");

    /// Reads OSLSR_EL1 (read-only; aarch64-cpu does not define it).
    fn read_oslsr() -> u64 {
        let value;
        // SAFETY: as the system_register! reads.
        unsafe {
            asm!("mrs {}, oslsr_el1", out(reg) value, options(nomem, nostack, preserves_flags))
        };
        value
    }

    /// An SMCCC call of `function` with immediate 1: X0.
    fn call_with_immediate_one(via: Via, function: u32) -> u64 {
        let mut x0 = u64::from(function);
        match via {
            // SAFETY: HVC #1 traps to the hypervisor, which answers in X0
            // (and may change X1..X17, which the C ABI clobbers cover);
            // no memory of the guest's is touched.
            Via::Hvc => unsafe { asm!("hvc #1", inout("x0") x0, clobber_abi("C")) },
            // SAFETY: as the HVC: HCR_EL2.TSC traps SMC to the hypervisor.
            Via::Smc => unsafe { asm!("smc #1", inout("x0") x0, clobber_abi("C")) },
        }
        x0
    }

    /// SEVL then WFE: the WFE finds the event SEVL set and does not wait.
    fn wfe_without_waiting() {
        aarch64_cpu::asm::sevl();
        aarch64_cpu::asm::wfe();
    }

    /// Several accesses, each in its own rt::fault::expect (a second
    /// exception in one scope would be fatal), keeping the first exception.
    #[derive(Default)]
    struct Probes {
        first: Option<Caught>,
    }

    impl Probes {
        fn run<R>(&mut self, access: impl FnOnce() -> R) -> R {
            let (result, caught) = fault::expect(access);
            self.first = self.first.or(caught);
            result
        }
    }

    // ---- The guest and its records --------------------------------------------

    /// The hypervisor's vCPU index of logical CPU `cpu` (the set-up checks
    /// that they are equal).
    fn vcpu_of(cpu: usize) -> u16 {
        cpu as u16
    }

    /// The guest as the documented answers need it, for the calling vCPU.
    fn env() -> Env {
        let machine = rt::machine();
        let cpu = smp::current();
        let (lock, steal) = pv::driver().map_or((None, None), |d| d.record_ipas(cpu));
        let powered_on = (0..machine.cpus().len())
            .filter(|&c| smp::is_running(c))
            .fold(0u64, |mask, c| mask | 1 << vcpu_of(c));
        Env {
            ram_base: machine.memory()[0].start,
            ram_end: machine.memory_end(),
            uart: machine.uart.map_or(0, |u| u.start),
            gicd: machine.gic.map_or(0, |g| g.distributor.start),
            vcpus: machine.cpus().len() as u16,
            caller: vcpu_of(cpu),
            powered_on,
            lock_record: lock.unwrap_or(0),
            steal_record: steal.unwrap_or(0),
        }
    }

    /// The 16 words of the 64-byte PV record at `ipa`.
    fn record_words(ipa: u64) -> &'static [AtomicU32; RECORD_WORDS] {
        // SAFETY: every IPA passed here comes from the PV driver's
        // record_ipas: a 64-byte aligned record that stays mapped
        // read-write for good (the guest's RAM, or the hypervisor's PV
        // area mapped by map_shared), which the guest only accesses
        // atomically and the hypervisor with single-copy-atomic stores.
        unsafe { &*(ipa as *const [AtomicU32; RECORD_WORDS]) }
    }

    /// The stolen-time record at `ipa`.
    fn stolen_time_record(ipa: u64) -> &'static StolenTime {
        // SAFETY: as record_words: a record the PV driver set up, mapped
        // for good; StolenTime is 64 bytes of atomics, 64-byte aligned.
        unsafe { &*(ipa as *const StolenTime) }
    }

    /// The IPAs of logical CPU `cpu`'s PV-lock and stolen-time records.
    fn records_of(cpu: usize) -> [Option<u64>; 2] {
        let (lock, steal) = pv::driver().map_or((None, None), |d| d.record_ipas(cpu));
        [lock, steal]
    }

    /// Checks what the attempts rely on, sets up vCPU 0's PV records and
    /// the GIC, and maps the pages the probes touch.
    fn set_up() {
        let machine = rt::machine();
        let vcpus = machine.cpus().len();
        if vcpus < MIN_VCPUS {
            setup_failed(format_args!("{vcpus} vCPUs, the guest needs {MIN_VCPUS}"));
        }
        if machine.memory().len() != 1 {
            setup_failed(format_args!(
                "{} RAM banks, expected 1",
                machine.memory().len()
            ));
        }
        for (cpu, mpidr) in machine.cpus().iter().enumerate() {
            if mpidr.vcpu_index() != Some(cpu as u64) {
                setup_failed(format_args!(
                    "CPU {cpu} has MPIDR {mpidr}, not vCPU {cpu}'s"
                ));
            }
        }
        let info = pv::init();
        let wanted = info.lock == Some(Variant::OpenEuler)
            && info.steal_time
            && info.kick
            && info.directed_yield;
        if !wanted {
            setup_failed(format_args!(
                "the VM must have pv-lock = \"openeuler\" and PV time; it offers {info}"
            ));
        }
        let init = pv::init_cpu();
        if !init.is_ok() {
            setup_failed(format_args!("vcpu 0: PV records: {init:?}"));
        }
        if let Err(e) = gic::init().and_then(|_| gic::init_cpu()) {
            setup_failed(format_args!("GIC: {e}"));
        }
        let (Some(gic), Some(uart)) = (machine.gic, machine.uart) else {
            setup_failed(format_args!("the device tree has no GICv3 or no PL011"));
        };
        let env = env();
        let devices = core::iter::once(gic.distributor)
            .chain(gic.redistributor_regions().iter().copied())
            .chain([uart])
            .chain(machine.memory().iter().copied());
        let probed = Place::ALL
            .map(|p| p.ipa(env.ram_end))
            .into_iter()
            .chain(HostDevice::ALL.map(HostDevice::ipa))
            .chain([FETCH_TARGET]);
        for address in probed {
            if let Some(frame) = devices.clone().find(|r| contains(r, address)) {
                setup_failed(format_args!(
                    "{address:#x} is inside {:#x}..{:#x}, which the guest has",
                    frame.start,
                    frame.end()
                ));
            }
            let mapped = if address == FETCH_TARGET {
                mmu::map_executable(address, 4)
            } else {
                mmu::map_device(address, 4)
            };
            if let Err(e) = mapped {
                setup_failed(format_args!("cannot map {address:#x}: {e}"));
            }
        }
    }

    fn contains(range: &MemRange, address: u64) -> bool {
        (range.start..range.end()).contains(&address)
    }

    // ---- Calls ------------------------------------------------------------

    /// HVC for the garbage calls, with the virtual timer armed around the
    /// ones that wait like WFI.
    struct GarbageConduit;

    impl Conduit for GarbageConduit {
        fn call(&self, function: pvlock_abi::FunctionId, args: [u64; 3]) -> [u64; 4] {
            let call = || HvcConduit::new().call(function, args);
            if hostile::waits_like_wfi(function) {
                let deadline = time::counter().saturating_add(time::to_ticks(SUSPEND_WAKE));
                timed_wait(deadline, call)
            } else {
                call()
            }
        }
    }

    fn one_call(label: Label) {
        let env = env();
        let outcome = match label.documented_call(&env) {
            Some(call) => call.attempt(&HvcConduit::new(), &SmcConduit::new()),
            None => Outcome::failed(note!("no vCPU is off to ask CPU_ON about (test error)")),
        };
        report(label, outcome);
    }

    fn calls() {
        for bad in BadCpuOn::ALL {
            one_call(Label::CpuOn(bad));
        }
        for function in hostile::garbage_targets() {
            let lost_before = lost_wake_ups(0);
            let mut outcome = hostile::attempt_garbage(&GarbageConduit, function, &env());
            let lost = lost_wake_ups(0) - lost_before;
            if outcome.answered && lost > 0 {
                outcome = Outcome::failed(note!(
                    "{}, but {lost} call(s) were still blocked {} ms past their virtual-timer \
                     deadline (lost wake-ups, ended by a KICK_CPU from another vCPU)",
                    outcome.note,
                    LOST_WAKE_UP.as_millis()
                ));
            }
            if function == pvlock_abi::pvlock::openeuler::PV_SCHED_IPA_RELEASE {
                // The garbage released the record: register it again.
                let init = pv::init_cpu();
                if outcome.answered && !init.is_ok() {
                    outcome = Outcome::failed(note!(
                        "{}; registering the record again: {init:?}",
                        outcome.note
                    ));
                }
            }
            report(Label::Garbage(function), outcome);
        }
        for label in BadIpa::ALL
            .map(Label::IpaInit)
            .into_iter()
            .chain([Label::StolenTimeOfNoVcpu, Label::WithoutControl])
            .chain(Target::BOTH.map(Label::Kick))
            .chain(Target::BOTH.map(Label::YieldTo))
            .chain([SmcCall::PsciVersion, SmcCall::UnknownPsci].map(Label::SmcAsHvc))
        {
            one_call(label);
        }
        for owner in [Unowned::Sip, Unowned::Oem] {
            for via in Via::BOTH {
                one_call(Label::Unowned(owner, via));
            }
        }
        for via in Via::BOTH {
            let x0 = call_with_immediate_one(via, hostile::NON_ZERO_IMMEDIATE_CALL.raw());
            report(
                Label::NonZeroImmediate(via),
                hostile::judge_non_zero_immediate(x0),
            );
        }
    }

    // ---- Memory and devices -------------------------------------------------

    /// Judges a probe against the label's documented answer: `caught` is
    /// what it raised, `at` the probing instruction, `read` what it read.
    fn judged(label: Label, env: &Env, caught: Option<Caught>, at: u64, read: u64) -> Outcome {
        match label.expected(env) {
            Some(expected) => hostile::judge_fault(expected, caught, at, read),
            None => Outcome::failed(note!("no documented answer (test error)")),
        }
    }

    /// The attempt `label`: a 4-byte load or store at `address`.
    fn data_probe(label: Label, env: &Env, access: Access, address: u64) -> Outcome {
        match access {
            Access::Read => {
                let ((value, at), caught) = fault::expect(|| load32(address));
                judged(label, env, caught, at, value)
            }
            Access::Write => {
                let (at, caught) = fault::expect(|| store32(address, PROBE_VALUE));
                judged(label, env, caught, at, 0)
            }
        }
    }

    fn memory_and_devices() {
        let env = env();
        for place in Place::ALL {
            for access in [Access::Read, Access::Write] {
                let label = Label::Outside(access, place);
                report(
                    label,
                    data_probe(label, &env, access, place.ipa(env.ram_end)),
                );
            }
        }
        let ((), caught) = fault::expect(|| branch_to(FETCH_TARGET));
        report(
            Label::Fetch,
            judged(Label::Fetch, &env, caught, FETCH_TARGET, 0),
        );
        for device in HostDevice::ALL {
            for access in [Access::Read, Access::Write] {
                let label = Label::HostDevice(access, device);
                report(label, data_probe(label, &env, access, device.ipa()));
            }
        }
        emulated_devices(&env);
    }

    fn emulated_devices(env: &Env) {
        let (fr, ctlr, typer, reserved) = (
            env.uart + PL011_FR,
            env.gicd + GICD_CTLR,
            env.gicd + GICD_TYPER,
            env.gicd + GICD_RESERVED,
        );
        let ((value, at), caught) = fault::expect(|| load64(fr));
        report(
            Label::Pl011WideRead,
            judged(Label::Pl011WideRead, env, caught, at, value),
        );
        let ((value, at), caught) = fault::expect(|| load64(ctlr));
        report(
            Label::GicdWideRead,
            judged(Label::GicdWideRead, env, caught, at, value),
        );
        // Write back what GICD_CTLR holds, should the write go through.
        let mut probes = Probes::default();
        let (current, _) = probes.run(|| load32(ctlr));
        let (at, caught) = fault::expect(|| store64(ctlr, current));
        let outcome = match probes.first {
            Some(c) => Outcome::failed(note!("the 4-byte read of GICD_CTLR: {}", c.fault())),
            None => judged(Label::GicdWideWrite, env, caught, at, 0),
        };
        report(Label::GicdWideWrite, outcome);
        let (at, caught) = fault::expect(|| load_pair(ctlr));
        report(
            Label::GicdLoadPair,
            judged(Label::GicdLoadPair, env, caught, at, 0),
        );
        // A reserved offset: a write is ignored, a read gives 0.
        let (_, written) = fault::expect(|| store32(reserved, u32::MAX));
        let ((value, at), caught) = fault::expect(|| load32(reserved));
        let outcome = match written {
            Some(c) => Outcome::failed(note!("the write: {}; documented: ignored", c.fault())),
            None => judged(Label::GicdReserved, env, caught, at, value),
        };
        report(Label::GicdReserved, outcome);
        // A read-only register: the write is ignored.
        let mut probes = Probes::default();
        let (before, _) = probes.run(|| load32(typer));
        let (_, caught) = fault::expect(|| store32(typer, !(before as u32)));
        let (after, _) = probes.run(|| load32(typer));
        let outcome = match probes.first {
            Some(c) => Outcome::failed(note!("reading GICD_TYPER: {}", c.fault())),
            None => hostile::judge_ignored_write(caught, before, after),
        };
        report(Label::GicdReadOnlyWrite, outcome);
    }

    // ---- System registers ---------------------------------------------------

    fn system_registers() {
        let env = env();
        let mut probes = Probes::default();
        probes.run(|| pmu::write(Pmcr, PMCR_ENABLE_AND_RESET_CYCLES));
        probes.run(|| pmu::write(Pmcntenset, PMCNTENSET_CYCLES));
        let read = (probes.run(|| pmu::read(Pmcr)) | probes.run(|| pmu::read(Pmcntenset)))
            & PMU_ENABLES_WRITTEN;
        // Off again: nothing counts for this vCPU once it is put.
        probes.run(|| pmu::write(Pmcr, 0));
        probes.run(|| pmu::write(Pmcntenclr, PMCNTENSET_CYCLES));
        report(
            Label::PmuRegisters,
            judged(Label::PmuRegisters, &env, probes.first, 0, read),
        );

        let mut probes = Probes::default();
        probes.run(|| write_dbgbvr0(BREAKPOINT_ADDRESS));
        probes.run(|| write_dbgbcr0(BREAKPOINT_CONTROL));
        let read = probes.run(read_dbgbvr0) | probes.run(read_dbgbcr0);
        probes.run(|| write_dbgbcr0(0));
        probes.run(|| write_dbgbvr0(0));
        report(
            Label::BreakpointRegisters,
            judged(Label::BreakpointRegisters, &env, probes.first, 0, read),
        );

        let mut probes = Probes::default();
        let written = MDSCR_EL1::TDCC::SET.value;
        probes.run(|| MDSCR_EL1.set(written));
        let read = probes.run(|| MDSCR_EL1.get());
        probes.run(|| MDSCR_EL1.set(0));
        report(
            Label::Mdscr,
            hostile::judge_read_back(probes.first, written, read),
        );

        let mut probes = Probes::default();
        let at_reset = probes.run(read_oslsr);
        probes.run(|| OSLAR_EL1.write(OSLAR_EL1::OSLK::Unlocked));
        let unlocked = probes.run(read_oslsr);
        probes.run(|| OSLAR_EL1.write(OSLAR_EL1::OSLK::Locked));
        let locked = probes.run(read_oslsr);
        // Leave it unlocked, as a kernel does once it booted.
        probes.run(|| OSLAR_EL1.write(OSLAR_EL1::OSLK::Unlocked));
        report(
            Label::OsLock,
            hostile::judge_os_lock(probes.first, at_reset, unlocked, locked),
        );

        let ((value, at), caught) = fault::expect(read_cntp_ctl);
        let label = Label::PhysicalTimer(Access::Read);
        report(label, judged(label, &env, caught, at, value));
        let (at, caught) = fault::expect(write_cntp_ctl);
        let label = Label::PhysicalTimer(Access::Write);
        report(label, judged(label, &env, caught, at, 0));
        let ((value, at), caught) = fault::expect(read_hcr_el2);
        report(
            Label::El2Register,
            judged(Label::El2Register, &env, caught, at, value),
        );

        let mut probes = Probes::default();
        let dfr0 = probes.run(|| ID_AA64DFR0_EL1.get());
        let pfr0 = probes.run(|| ID_AA64PFR0_EL1.get());
        let pfr1 = probes.run(|| ID_AA64PFR1_EL1.get());
        let outcome = match probes.first {
            Some(c) => Outcome::failed(note!(
                "{} (ESR {:#x}); documented: read with features hidden",
                c.fault(),
                c.esr
            )),
            None => hostile::judge_id_registers(dfr0, pfr0, pfr1, rt::machine().pmu_irq.is_some()),
        };
        report(Label::IdRegisters, outcome);
    }

    // ---- Waits and lost wake-ups ------------------------------------------------
    //
    // Every WFI (and PSCI CPU_SUSPEND) the guest makes has the virtual timer
    // armed, and is registered here with its deadline. Every vCPU that
    // looks for work checks the others' registered waits: one still blocked
    // (its PV `preempted` flag 0: not woken and waiting for a pCPU)
    // LOST_WAKE_UP past its deadline has lost its wake-up; it is counted
    // and ended with a KICK_CPU, so that the run goes on and reports it.

    /// Each vCPU's deadline while it waits (counter ticks), 0 otherwise.
    static WAITING_UNTIL: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
    /// The deadline of each vCPU's last wait that another vCPU ended.
    static RESCUED_WAIT: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
    /// Lost wake-ups, per vCPU.
    static LOST_WAKE_UPS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
    /// Waits made, by all vCPUs.
    static WAITS: AtomicU64 = AtomicU64::new(0);

    fn lost_wake_ups(cpu: usize) -> u64 {
        LOST_WAKE_UPS[cpu].load(Ordering::Relaxed)
    }

    /// Runs `wait` (a WFI, a PSCI CPU_SUSPEND) with the virtual timer armed
    /// for `deadline`, registered for the other vCPUs to watch.
    fn timed_wait<R>(deadline: u64, wait: impl FnOnce() -> R) -> R {
        let cpu = smp::current();
        WAITS.fetch_add(1, Ordering::Relaxed);
        WAITING_UNTIL[cpu].store(deadline, Ordering::Release);
        let result = time::with_virtual_timer(deadline, wait);
        WAITING_UNTIL[cpu].store(0, Ordering::Release);
        result
    }

    /// WFI until `deadline` at the latest.
    fn nap_until(deadline: u64) {
        timed_wait(deadline, aarch64_cpu::asm::wfi);
    }

    /// The deadline of `cpu`'s wait if it looks blocked past it by
    /// LOST_WAKE_UP: still waiting, and not woken (its `preempted` flag 0).
    fn overdue_wait(cpu: usize) -> Option<u64> {
        let until = WAITING_UNTIL[cpu].load(Ordering::Acquire);
        let margin = time::to_ticks(LOST_WAKE_UP);
        let overdue = until != 0 && time::counter() >= until.saturating_add(margin);
        (overdue && !pv::vcpu_is_preempted(cpu)).then_some(until)
    }

    /// Kicks every other vCPU still blocked LOST_WAKE_UP past the deadline
    /// of its wait (seen so twice, LOST_WAKE_UP_CONFIRM apart), once per
    /// wait, and counts it.
    fn rescue_lost_wake_ups() {
        let me = smp::current();
        let mut suspects = [None; MAX_CPUS];
        for cpu in (0..vcpus()).filter(|&c| c != me) {
            suspects[cpu] = overdue_wait(cpu)
                .filter(|until| RESCUED_WAIT[cpu].load(Ordering::Acquire) != *until);
        }
        if suspects.iter().all(Option::is_none) {
            return;
        }
        time::wait_until(hostile::LOST_WAKE_UP_CONFIRM, || false);
        for (cpu, suspect) in suspects.iter().enumerate() {
            let Some(until) = *suspect else { continue };
            if overdue_wait(cpu) != Some(until)
                || RESCUED_WAIT[cpu].swap(until, Ordering::AcqRel) == until
            {
                continue;
            }
            LOST_WAKE_UPS[cpu].fetch_add(1, Ordering::Relaxed);
            let _ = pv::kick(cpu);
        }
    }

    fn wake_ups() {
        let lost: [(u16, u64); MAX_CPUS] =
            core::array::from_fn(|cpu| (vcpu_of(cpu), lost_wake_ups(cpu)));
        report(
            Label::WakeUps,
            hostile::judge_wake_ups(WAITS.load(Ordering::Relaxed), &lost[..vcpus()]),
        );
    }

    // ---- Work for every vCPU -----------------------------------------------------

    /// What vCPU 0 asks every running vCPU to do.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(u8)]
    enum Task {
        /// The racers CPU_ON the last vCPU at once.
        Race = 1,
        /// Note the stolen time before the scribbling.
        NoteStolenTime = 2,
        /// The middle vCPUs scribble over every record, the last one runs.
        Scribble = 3,
        /// Get rescheduled and check the own records.
        CheckRecords = 4,
        /// Return (CPU_OFF).
        Finish = 5,
    }

    impl Task {
        const ALL: [Task; 5] = [
            Task::Race,
            Task::NoteStolenTime,
            Task::Scribble,
            Task::CheckRecords,
            Task::Finish,
        ];

        fn from_raw(raw: u8) -> Option<Self> {
            Self::ALL.into_iter().find(|t| *t as u8 == raw)
        }
    }

    /// The task of the current round; written before [`ROUND`] moves.
    static TASK: AtomicU8 = AtomicU8::new(0);
    /// Rounds posted so far.
    static ROUND: AtomicU32 = AtomicU32::new(0);
    /// The last round each vCPU finished.
    static DONE: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];
    /// Set by each secondary once it waits for rounds.
    static READY: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
    /// Racers at the start line.
    static RACE_LINE: AtomicUsize = AtomicUsize::new(0);
    /// Each racer's CPU_ON answer.
    static RACE_ANSWERS: SpinMutex<[Option<i32>; MAX_CPUS]> = SpinMutex::new([None; MAX_CPUS]);
    /// Words the scribblers wrote, and loops the runner ran meanwhile.
    static SCRIBBLED: AtomicU64 = AtomicU64::new(0);
    static RUNNER_LOOPS: AtomicU64 = AtomicU64::new(0);
    /// Each vCPU's stolen time before the scribbling.
    static STOLEN_BEFORE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
    /// What each vCPU found in its records afterwards.
    static RECORDS: SpinMutex<[Option<RecordCheck>; MAX_CPUS]> = SpinMutex::new([None; MAX_CPUS]);

    fn vcpus() -> usize {
        smp::count()
    }

    /// The vCPU the race starts, and the one that runs during the
    /// scribbling: the last.
    fn last_vcpu() -> usize {
        vcpus() - 1
    }

    /// The vCPU that never waits in WFI while it has nothing to do, but
    /// spins and watches the others' waits: a lost wake-up can leave a
    /// pCPU asleep with every vCPU that blocked on it, which no vCPU that
    /// waits itself would see.
    const WATCHER: usize = 1;

    /// Waits until `done` holds or `timeout` passes, looking after the
    /// others' waits in between: in WFI steps, or spinning on [`WATCHER`].
    fn wait_idle(timeout: Duration, done: impl FnMut() -> bool) -> bool {
        wait_watching(timeout, smp::current() == WATCHER, done)
    }

    /// Spins until `done` holds or `timeout` passes, looking after the
    /// others' waits in between.
    fn spin_until(timeout: Duration, done: impl FnMut() -> bool) -> bool {
        wait_watching(timeout, true, done)
    }

    fn wait_watching(timeout: Duration, spin: bool, mut done: impl FnMut() -> bool) -> bool {
        let deadline = time::Deadline::after(timeout);
        loop {
            if done() {
                return true;
            }
            if deadline.passed() {
                return done();
            }
            rescue_lost_wake_ups();
            if spin {
                guest_driver::lock::cpu_relax();
            } else {
                nap_until(time::counter().saturating_add(time::to_ticks(IDLE_WAIT)));
            }
        }
    }

    /// A round of work posted to the running vCPUs.
    #[derive(Clone, Copy)]
    struct Round {
        task: Task,
        number: u32,
        /// The vCPUs that take part: those waiting for rounds when it was
        /// posted (one that comes up later, the race's target, starts from
        /// the round it finds).
        participants: u64,
    }

    /// Posts `task` to every running vCPU but vCPU 0.
    fn post(task: Task) -> Round {
        let participants = (1..vcpus())
            .filter(|&c| READY[c].load(Ordering::Acquire))
            .fold(0, |mask, c| mask | 1 << c);
        TASK.store(task as u8, Ordering::Relaxed);
        let number = ROUND.fetch_add(1, Ordering::Release) + 1;
        Round {
            task,
            number,
            participants,
        }
    }

    /// Waits until every participant of `round` has done its part; says
    /// what went wrong, if anything. The last round spins: the watcher
    /// powers off in it, and nobody would see a lost wake-up any more.
    fn finish(round: Round) -> Option<Note> {
        let waiting = |cpu: &usize| {
            round.participants & 1 << *cpu != 0 && DONE[*cpu].load(Ordering::Acquire) < round.number
        };
        let spin = round.task == Task::Finish || smp::current() == WATCHER;
        if wait_watching(timeout(), spin, || !(1..vcpus()).any(|c| waiting(&c))) {
            return None;
        }
        let late = (1..vcpus()).find(|c| waiting(c)).unwrap_or(0);
        Some(note!(
            "vcpu {late} did not finish {:?} within {} s",
            round.task,
            timeout().as_secs()
        ))
    }

    /// Posts `task` to every running vCPU, does vCPU 0's part and waits for
    /// the others'; says what went wrong, if anything.
    fn everyone(task: Task) -> Option<Note> {
        let round = post(task);
        run_task(task, 0);
        finish(round)
    }

    fn run_task(task: Task, cpu: usize) {
        let last = last_vcpu();
        match task {
            Task::Race if cpu < last => race(cpu),
            Task::NoteStolenTime => {
                let stolen = pv::steal_time(cpu);
                STOLEN_BEFORE[cpu].store(stolen, Ordering::Relaxed);
            }
            Task::Scribble if cpu == last => run_while_scribbling(),
            Task::Scribble if cpu > 0 => scribble(),
            Task::CheckRecords => check_records_in_turn(cpu),
            _ => {}
        }
    }

    fn secondary_main(cpu: usize) {
        let init = pv::init_cpu();
        if !init.is_ok() {
            rt::fatal(format_args!("{PREFIX} vcpu {cpu}: PV records: {init:?}"));
        }
        let mut seen = ROUND.load(Ordering::Acquire);
        READY[cpu].store(true, Ordering::Release);
        loop {
            let mut round = seen;
            wait_idle(Duration::MAX, || {
                round = ROUND.load(Ordering::Acquire);
                round != seen
            });
            seen = round;
            let task = Task::from_raw(TASK.load(Ordering::Relaxed));
            if let Some(task) = task.filter(|t| *t != Task::Finish) {
                run_task(task, cpu);
            }
            DONE[cpu].store(round, Ordering::Release);
            if task == Some(Task::Finish) {
                return;
            }
        }
    }

    // ---- The CPU_ON race ------------------------------------------------------

    /// Meets the other racers at the start line, then asks for the last
    /// vCPU to start.
    fn race(cpu: usize) {
        let racers = last_vcpu();
        RACE_LINE.fetch_add(1, Ordering::AcqRel);
        spin_until(timeout(), || RACE_LINE.load(Ordering::Acquire) >= racers);
        let target = last_vcpu();
        let mpidr = rt::machine().cpus()[target];
        let answer =
            psci::cpu_on(mpidr, smp::entry_point(), target as u64).map_or_else(|e| e.0, |()| 0);
        RACE_ANSWERS.lock()[cpu] = Some(answer);
    }

    /// Starts every vCPU but the last (the one the attempts need off):
    /// they look after the others' waits and take part in the race.
    fn start_helpers() {
        let last = last_vcpu();
        for (cpu, ready) in READY.iter().enumerate().take(last).skip(1) {
            let started = smp::start(cpu).map(|s| s.wait_entered(timeout()));
            if started != Ok(true) {
                rt::fatal(format_args!(
                    "{PREFIX} vcpu {cpu} did not start: {started:?}"
                ));
            }
            if !wait_idle(timeout(), || ready.load(Ordering::Acquire)) {
                rt::fatal(format_args!("{PREFIX} vcpu {cpu} never got ready"));
            }
        }
    }

    /// Every running vCPU asks at once for the last one to start.
    fn cpu_on_race() {
        let last = last_vcpu();
        let outcome = match everyone(Task::Race) {
            Some(why) => Outcome::failed(why),
            None => {
                let answers = *RACE_ANSWERS.lock();
                let mut pairs = [(0u16, 0i32); MAX_CPUS];
                let mut n = 0;
                for (cpu, answer) in answers.iter().enumerate() {
                    if let Some(a) = answer {
                        pairs[n] = (vcpu_of(cpu), *a);
                        n += 1;
                    }
                }
                hostile::judge_race(vcpu_of(last), &pairs[..n])
            }
        };
        report(Label::CpuOnRace, outcome);
        if !wait_idle(timeout(), || READY[last].load(Ordering::Acquire)) {
            rt::fatal(format_args!(
                "{PREFIX} vcpu {last} never came up after the race"
            ));
        }
    }

    // ---- Storms ----------------------------------------------------------------

    fn storms() {
        for storm in Storm::ALL {
            let start = time::counter();
            let (completed, problem) = match storm {
                Storm::Hvc => hvc_storm(),
                Storm::Wfi => wfi_storm(),
                Storm::Wfe => {
                    for _ in 0..storm.count() {
                        wfe_without_waiting();
                    }
                    (storm.count(), None)
                }
                Storm::Sgi => sgi_storm(),
            };
            let took = time::to_duration(time::counter().wrapping_sub(start));
            report(
                Label::Storm(storm),
                hostile::judge_storm(storm, completed, problem, took),
            );
        }
    }

    /// WFIs, each with the virtual timer armed a moment ahead; stops after
    /// STORM_LOST_WAKE_UPS_MAX lost wake-ups.
    fn wfi_storm() -> (u64, Option<Note>) {
        let me = smp::current();
        let lost_before = lost_wake_ups(me);
        let count = Storm::Wfi.count();
        let mut completed = 0;
        while completed < count {
            nap_until(time::counter().saturating_add(time::to_ticks(hostile::WFI_STORM_DEADLINE)));
            completed += 1;
            if lost_wake_ups(me) - lost_before >= STORM_LOST_WAKE_UPS_MAX {
                break;
            }
        }
        let lost = lost_wake_ups(me) - lost_before;
        let problem = (lost > 0).then(|| {
            note!(
                "{lost} WFIs were still blocked {} ms past their deadline (lost wake-ups, \
                 ended by a KICK_CPU from another vCPU){}",
                LOST_WAKE_UP.as_millis(),
                if completed < count { "; stopped" } else { "" }
            )
        });
        (completed, problem)
    }

    /// SMCCC_VERSION by HVC, each answer checked.
    fn hvc_storm() -> (u64, Option<Note>) {
        let conduit = HvcConduit::new();
        let version = u64::from(smccc::VERSION_1_1.raw());
        for n in 0..Storm::Hvc.count() {
            let x0 = conduit.call(arch::SMCCC_VERSION, [0; 3])[0];
            if x0 != version {
                return (
                    n,
                    Some(note!("SMCCC_VERSION answered {x0:#x}, not {version:#x}")),
                );
            }
        }
        (Storm::Hvc.count(), None)
    }

    /// SGIs to this vCPU while the SGI is disabled: none may be delivered,
    /// and it must be pending afterwards (a GIC keeps an SGI sent to a
    /// disabled interrupt pending).
    fn sgi_storm() -> (u64, Option<Note>) {
        let cpu = match gic::init_cpu() {
            Ok(cpu) => cpu,
            Err(e) => return (0, Some(note!("GIC: {e}"))),
        };
        let redistributor = cpu.redistributor;
        let own = Mpidr::from_raw(MPIDR_EL1.get());
        let set_up = redistributor
            .configure(STORM_SGI, STORM_SGI_PRIORITY)
            .and_then(|()| redistributor.set_enabled(STORM_SGI, false))
            .and_then(|()| redistributor.clear_pending(STORM_SGI));
        if let Err(e) = set_up {
            return (0, Some(note!("GIC: {e}")));
        }
        for n in 0..Storm::Sgi.count() {
            if let Err(e) = gic::send_sgi(own, STORM_SGI) {
                return (n, Some(note!("sending: {e}")));
            }
        }
        let count = Storm::Sgi.count();
        if let Some(intid) = gic::acknowledge() {
            gic::end_of_interrupt(intid);
            return (count, Some(note!("INTID {intid} was delivered")));
        }
        let pending = redistributor.pending(STORM_SGI);
        let cleared = redistributor
            .clear_pending(STORM_SGI)
            .and_then(|()| redistributor.pending(STORM_SGI));
        match (pending, cleared) {
            (Ok(true), Ok(false)) => (count, None),
            (Ok(false), _) => (count, Some(note!("the disabled SGI is not pending"))),
            (Ok(true), Ok(true)) => (count, Some(note!("the SGI stays pending once cleared"))),
            (Err(e), _) | (_, Err(e)) => (count, Some(note!("GIC: {e}"))),
        }
    }

    // ---- Scribbling over the records -------------------------------------------

    /// Writes garbage over every vCPU's PV-lock and stolen-time record
    /// until the scribbling time is up.
    fn scribble() {
        let records: [[Option<u64>; 2]; MAX_CPUS] = core::array::from_fn(records_of);
        let vcpus = vcpus();
        let deadline = time::Deadline::after(SCRIBBLE_TIME);
        let mut written = 0u64;
        let mut turn = 0usize;
        while !deadline.passed() {
            let pattern = SCRIBBLE_PATTERNS[turn % SCRIBBLE_PATTERNS.len()];
            turn = turn.wrapping_add(1);
            for ipa in records[..vcpus].iter().flatten().flatten() {
                for word in record_words(*ipa) {
                    word.store(pattern, Ordering::Relaxed);
                }
                written += RECORD_WORDS as u64;
            }
        }
        SCRIBBLED.fetch_add(written, Ordering::Relaxed);
    }

    /// Keeps the last vCPU busy while the others scribble.
    fn run_while_scribbling() {
        let deadline = time::Deadline::after(SCRIBBLE_TIME);
        let mut loops = 0u64;
        while !deadline.passed() {
            loops = core::hint::black_box(loops + 1);
        }
        RUNNER_LOOPS.store(loops, Ordering::Relaxed);
    }

    /// WFIs until one lasts its whole deadline: the hypervisor took the
    /// vCPU off its pCPU and loaded it again, writing its records. True if
    /// one did within a few tries.
    fn reschedule() -> bool {
        for _ in 0..RESCHEDULE_TRIES {
            let deadline = time::counter().saturating_add(time::to_ticks(IDLE_WAIT));
            nap_until(deadline);
            if time::counter() >= deadline {
                return true;
            }
        }
        false
    }

    /// Whose turn it is to check its records: the vCPUs do it one after
    /// the other, the others spinning (and looking after its waits)
    /// meanwhile, so that never every vCPU waits in WFI at once.
    static RECORDS_TURN: AtomicUsize = AtomicUsize::new(0);

    /// Waits for `cpu`'s turn, checks its records, and stays awake until
    /// every vCPU has had its turn.
    fn check_records_in_turn(cpu: usize) {
        spin_until(timeout(), || RECORDS_TURN.load(Ordering::Acquire) == cpu);
        check_own_records(cpu);
        RECORDS_TURN.store(cpu + 1, Ordering::Release);
        spin_until(timeout(), || {
            RECORDS_TURN.load(Ordering::Acquire) >= vcpus()
        });
    }

    /// The running vCPU's look at its own records after the scribbling;
    /// then it puts back what the hypervisor does not rewrite (the PV-lock
    /// record's `lock_count` and padding, the stolen-time record's
    /// revision, attributes and padding), so the records are as the driver
    /// expects them again.
    fn check_own_records(cpu: usize) {
        let Some(driver) = pv::driver() else {
            return;
        };
        let rescheduled = reschedule();
        let stolen_after = driver.steal_time(cpu);
        let preempted = driver
            .guest_record(cpu)
            .map_or(u32::MAX, |r| r.load_preempted(Ordering::Acquire));
        reschedule();
        let stolen_later = driver.steal_time(cpu);
        let uptime = time::since_boot() + STOLEN_TIME_SLACK;
        // The vCPU runs: its own records are written by nobody else now.
        if let Some(record) = driver.guest_record(cpu) {
            record.reset();
        }
        if let [_, Some(ipa)] = records_of(cpu) {
            let record = stolen_time_record(ipa);
            let stolen = record.load_stolen_time(Ordering::Acquire);
            record.reset();
            record.store_stolen_time(stolen, Ordering::Release);
        }
        RECORDS.lock()[cpu] = Some(RecordCheck {
            vcpu: vcpu_of(cpu),
            stolen_before: STOLEN_BEFORE[cpu].load(Ordering::Relaxed),
            stolen_after,
            stolen_later,
            uptime: u64::try_from(uptime.as_nanos()).unwrap_or(u64::MAX),
            preempted,
            rescheduled,
        });
    }

    fn scribbling() {
        let steps = [Task::NoteStolenTime, Task::Scribble, Task::CheckRecords];
        let outcome = match steps.into_iter().find_map(everyone) {
            Some(why) => Outcome::failed(why),
            None => {
                let found = *RECORDS.lock();
                let mut checks = [EMPTY_CHECK; MAX_CPUS];
                let mut n = 0;
                for check in found.iter().take(vcpus()).flatten() {
                    checks[n] = *check;
                    n += 1;
                }
                if n < vcpus() {
                    Outcome::failed(note!("only {n} of {} vCPUs checked their records", vcpus()))
                } else {
                    let mut outcome =
                        hostile::judge_records(&checks[..n], SCRIBBLED.load(Ordering::Relaxed));
                    if outcome.answered {
                        outcome = Outcome::ok(note!(
                            "{}; vcpu {} ran {} loops meanwhile",
                            outcome.note,
                            last_vcpu(),
                            RUNNER_LOOPS.load(Ordering::Relaxed)
                        ));
                    }
                    outcome
                }
            }
        };
        report(Label::Scribble, outcome);
    }

    /// A placeholder for the unused slots of the checks array.
    const EMPTY_CHECK: RecordCheck = RecordCheck {
        vcpu: 0,
        stolen_before: 0,
        stolen_after: 0,
        stolen_later: 0,
        uptime: 0,
        preempted: 0,
        rescheduled: false,
    };

    // ---- main ---------------------------------------------------------------------

    fn main() {
        let machine = rt::machine();
        let args = rt::bootargs();
        match Settings::parse(args) {
            Ok(s) => {
                SETTINGS.call_once(|| s);
            }
            Err(e) => rt::fatal(format_args!("{PREFIX} bad bootargs: {e}")),
        }
        let attempts = hostile::labels().count();
        println!(
            "{PREFIX} {} vCPUs, {} MiB of RAM at {:#x}, {attempts} attempts (bootargs \"{}\")",
            machine.cpus().len(),
            machine.memory_size() >> 20,
            machine.memory().first().map_or(0, |m| m.start),
            args.as_str()
        );
        set_up();
        start_helpers();
        calls();
        memory_and_devices();
        system_registers();
        cpu_on_race();
        storms();
        scribbling();
        wake_ups();
        if let Some(why) = everyone(Task::Finish) {
            println!("{PREFIX} {why}");
        }
        // Let the others power off before the VM does.
        spin_until(timeout(), || (1..vcpus()).all(|c| !smp::is_running(c)));
        let reported = REPORTED.load(Ordering::Relaxed);
        let failures = FAILURES.load(Ordering::Relaxed);
        if failures > 0 || reported != attempts {
            rt::fatal(format_args!(
                "{PREFIX} {failures} of {reported} attempts not answered as documented ({attempts} planned)"
            ));
        }
        println!("{}", AllAnswered { attempts });
    }
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "hostile is a bare-metal guest; build it with `cargo xtask build` and boot it under el2 \
         with `cargo xtask run --guest hostile --pv-lock openeuler` (or `cargo xtask test \
         --boot-only --filter hostile`)"
    );
    std::process::exit(2);
}
