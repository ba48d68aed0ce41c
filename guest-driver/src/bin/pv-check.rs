//! `pv-check`: checks the hypervisor's paravirtual services against
//! docs/abi.md from inside a VM, through the guest driver (`guest_driver::pv`),
//! and powers off.
//!
//! Command line (`/chosen/bootargs`; `guest_driver::pvcheck::Expect`):
//!
//! | word | meaning | default |
//! |---|---|---|
//! | `expect-kvm=yes\|no` | a KVM-compatible hypervisor (SMCCC >= 1.1, KVM's UID) / none (QEMU's own SMCCC 1.0 firmware) | not checked |
//! | `expect-lock=V` | the PV-lock variant offered: `seed-v2`, `seed-v3`, `openeuler`, `anolis` or `none` | required |
//! | `expect-steal=yes\|no\|none` | stolen time offered and at least 10% of the busy period (more vCPUs than pCPUs) / offered and below 5% of it (a pCPU per vCPU) / not offered | required |
//! | `overcommit=yes\|no` | more vCPUs than pCPUs | from `expect-steal` |
//! | `busy-ms=N` | length of the busy period (10..=10000) | 300 |
//! | `away-us=N` | observer gap that discards a truth-test window (1..=4000) | calibrated |
//! | `timeout=S` | seconds to wait for a vCPU (1..=3600) | 60 |
//! | `expect-virtio=1\|2` | the virtio-mmio transports' Version | 2 |
//!
//! What it checks, in order (each check prints `pv-check: <label>: ok` or
//! `pv-check: <label>: FAILED: <why>`; `guest_driver::pvcheck::labels`
//! lists them):
//!
//! 0. QEMU `virt`'s virtio-mmio window (`guest_driver::virtiocheck`): each
//!    of the 32 transports at 0x0a000000 reads magic "virt", the Version
//!    `expect-virtio=` names (2 by default: el2's; 1 on QEMU 7.2's own
//!    legacy transports), DeviceID 0, VendorID "QEMU", 0 in the other
//!    registers sampled, and Status still reads 0 after a write; the
//!    device tree has QEMU's 32 `virtio,mmio` nodes;
//! 1. the probe finds what the command line says (`pv-check: probe`; the
//!    directed-yield call comes with every PV-lock variant);
//!    without any service it says `pv-check: nothing offered`;
//! 2. every call of `pvcheck::CALLS` that applies gets its documented
//!    answer, each made by an HVC helper that loads known values into
//!    x4..x17 and checks them afterwards (SMCCC 1.1 preserves them);
//! 3. the boot vCPU's `init_cpu`; for openEuler and Anolis, registering an
//!    unaligned IPA and one outside RAM is refused, nothing is written to
//!    the unaligned target, and the registered record is still written
//!    after a reschedule (a WFI with a 5 ms virtual-timer deadline); for
//!    openEuler also IPA_RELEASE (no more writes) and IPA_INIT again;
//! 4. every other vCPU starts and runs `init_cpu`; the hypervisor's records
//!    are 64-byte aligned, in reserved memory and one per vCPU;
//! 5. openEuler / Anolis: vCPU 0 kicks vCPU 1 out of a WFI that would
//!    otherwise last 2 s; then kicks it while it still runs, and its next
//!    WFI must return at once (a kick before the halt is not lost);
//! 6. a busy period (`busy-ms`) in which every vCPU spins. With PV-lock,
//!    the preempted-truth test of shared/docs/TESTING.md: vCPU 0 (A)
//!    polls the flag and the progress counter of each of its siblings
//!    (the Bs: vCPUs 1 to 7), which count. Watching every sibling means
//!    that with overcommit some B is out whenever A runs, however the
//!    hypervisor pairs vCPUs on its pCPUs. A window between two polls is
//!    judged only if A was not away in it (less than the threshold between
//!    the start of one poll and the end of the next — 32 times the median
//!    poll, between 20 us and 1 ms, far below el2's 4 ms slice — and no
//!    growth of A's own stolen time). For each B, in a judged window where
//!    A read B's flag as 1 around both of its reads of B's counter, the
//!    counter must not move; with overcommit A must see that at least once;
//!    without it, a B's flag must read 0 whenever its counter moved.
//!    `pv-check: preempted truth: N windows, M with B preempted, V
//!    violations` reports the counts, per (window, B);
//! 7. each vCPU's stolen time over the busy period: at least 10% of it with
//!    `expect-steal=yes`, below 5% with `no`, 0 with `none`;
//!
//! and ends with `pv-check: all checks passed`, or a `GUEST FATAL` line
//! counting the failures; either way the guest powers off.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod guest {
    use core::fmt;
    use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
    use core::time::Duration;

    use guest_driver::bootargs::{ArgError, BootArgs};
    use guest_driver::devicetree::{Conduit as Method, MAX_CPUS, MemRange};
    use guest_driver::println;
    use guest_driver::pv::{CpuInit, Kick, PvInfo, return_code};
    use guest_driver::pvcheck::{
        self, ALL_PASSED, Expect, ExpectError, Label, PREFIX, STEAL_DEDICATED_MAX_PERCENT,
        STEAL_OVERCOMMIT_MIN_PERCENT, Steal, TruthCounts,
    };
    use guest_driver::rt::{self, psci, pv, smp, time};
    use guest_driver::virtiocheck;
    use pvlock_abi::FunctionId;
    use pvlock_abi::pvlock::{Variant, VcpuState32, anolis, openeuler};
    use pvlock_abi::{smccc, virtio_mmio};
    use spin::Once;

    guest_driver::entry!(main, secondary_main);

    struct Settings {
        expect: Expect,
        busy: Duration,
        away: Option<Duration>,
        timeout: Duration,
    }

    static SETTINGS: Once<Settings> = Once::new();
    static FAILURES: AtomicUsize = AtomicUsize::new(0);

    fn settings() -> &'static Settings {
        SETTINGS.get().expect("main parses the settings first")
    }

    fn info() -> &'static PvInfo {
        pv::init()
    }

    // ---- Reporting -------------------------------------------------------

    /// Prints `<label>: ok`, with ` (<detail>)` if there is one.
    fn pass(label: Label, detail: Option<fmt::Arguments>) {
        match detail {
            Some(d) => println!("{label}: ok ({d})"),
            None => println!("{label}: ok"),
        }
    }

    /// Prints `<label>: FAILED: <why>` and counts it.
    fn fail(label: Label, why: fmt::Arguments) {
        println!("{label}: FAILED: {why}");
        FAILURES.fetch_add(1, Ordering::Relaxed);
    }

    fn verdict(label: Label, ok: bool, detail: fmt::Arguments) {
        if ok {
            pass(label, Some(detail));
        } else {
            fail(label, detail);
        }
    }

    fn millis(ns: u64) -> f64 {
        ns as f64 / 1e6
    }

    fn ticks_to_ns(ticks: u64) -> u64 {
        u64::try_from(time::to_duration(ticks).as_nanos()).unwrap_or(u64::MAX)
    }

    // ---- SMCCC calls that check x4..x17 ----------------------------------

    /// The answer of one checked call: X0..X3, and which of X4..X17 came
    /// back changed (bit n = x(4+n)).
    struct Checked {
        regs: [u64; 4],
        changed: u32,
    }

    /// Calls made through [`checked_call`], and those that changed X4..X17.
    static CALLS_MADE: AtomicU32 = AtomicU32::new(0);
    static CLOBBERING_CALLS: AtomicU32 = AtomicU32::new(0);

    /// What X4..X17 hold during call `seq`: distinct per register and call.
    fn pattern(register: usize, seq: u32) -> u64 {
        0x5a00_0000_0000_0000 | (register as u64) << 40 | u64::from(seq) << 8 | register as u64
    }

    /// Makes an SMCCC call through the device tree's conduit with known
    /// values in X4..X17, and reports which of them the callee changed.
    fn checked_call(function: FunctionId, args: [u64; 3]) -> Checked {
        let seq = CALLS_MADE.fetch_add(1, Ordering::Relaxed);
        let p: [u64; 14] = core::array::from_fn(|i| pattern(i + 4, seq));
        let mut o = p;
        let (mut x0, mut x1, mut x2, mut x3) =
            (u64::from(function.raw()), args[0], args[1], args[2]);
        macro_rules! call {
            ($insn:literal) => {
                // SAFETY: an SMCCC fast call: the callee changes at most
                // X0..X17 (all operands here), may write memory the guest
                // shared with it (the asm is not `nomem`), and uses no
                // guest stack.
                unsafe {
                    core::arch::asm!(
                        $insn,
                        inout("x0") x0, inout("x1") x1, inout("x2") x2, inout("x3") x3,
                        inout("x4") o[0], inout("x5") o[1], inout("x6") o[2], inout("x7") o[3],
                        inout("x8") o[4], inout("x9") o[5], inout("x10") o[6], inout("x11") o[7],
                        inout("x12") o[8], inout("x13") o[9], inout("x14") o[10],
                        inout("x15") o[11], inout("x16") o[12], inout("x17") o[13],
                        options(nostack)
                    )
                }
            };
        }
        match psci::conduit() {
            Method::Hvc => call!("hvc #0"),
            Method::Smc => call!("smc #0"),
        }
        let changed = (0..14).filter(|&i| o[i] != p[i]).fold(0, |m, i| m | 1 << i);
        if changed != 0 {
            CLOBBERING_CALLS.fetch_add(1, Ordering::Relaxed);
        }
        Checked {
            regs: [x0, x1, x2, x3],
            changed,
        }
    }

    /// ` (x5, x9 changed)`.
    struct Changed(u32);

    impl fmt::Display for Changed {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            if self.0 == 0 {
                return Ok(());
            }
            write!(f, " (")?;
            for (n, i) in (0..14).filter(|i| self.0 & 1 << i != 0).enumerate() {
                write!(f, "{}x{}", if n == 0 { "" } else { ", " }, i + 4)?;
            }
            write!(f, " changed)")
        }
    }

    fn preserves_registers() -> bool {
        info().smccc_version >= smccc::VERSION_1_1
    }

    /// Makes `function(args)` and returns its return code; a change of
    /// X4..X17 under SMCCC 1.1 is reported under `label`.
    fn code_of(label: Label, function: FunctionId, args: [u64; 3]) -> i64 {
        let c = checked_call(function, args);
        if preserves_registers() && c.changed != 0 {
            fail(
                label,
                format_args!("the call changed{}", Changed(c.changed)),
            );
        }
        return_code(function, c.regs[0])
    }

    // ---- Rescheduling: a WFI that waits for the virtual timer ------------

    /// Blocks for 5 ms, so the hypervisor takes this vCPU off its pCPU
    /// and puts it back.
    fn reschedule() {
        let deadline = time::counter() + time::to_ticks(Duration::from_millis(5));
        while time::counter() < deadline {
            time::wfi_until(deadline);
        }
    }

    fn spin_for(duration: Duration) {
        let end = time::counter() + time::to_ticks(duration);
        while time::counter() < end {
            core::hint::spin_loop();
        }
    }

    // ---- Phases ----------------------------------------------------------

    const PHASE_INIT: u8 = 0;
    const PHASE_KICK: u8 = 1;
    const PHASE_EARLY_KICK: u8 = 2;
    const PHASE_BUSY: u8 = 3;
    static PHASE: AtomicU8 = AtomicU8::new(PHASE_INIT);
    static INITED: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
    static DONE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

    /// The busy period ends at this counter value.
    static BUSY_END: AtomicU64 = AtomicU64::new(0);
    /// Each vCPU's busy period as it saw it (ticks) and its stolen time
    /// then (ns).
    static BUSY_TICKS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
    static BUSY_STEAL: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
    static BUSY_STEAL_END: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

    /// Each counting vCPU's progress counter.
    static COUNTERS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
    /// vCPU 0 saw a vCPU preempted although there is no PV-lock.
    static SEEN_PREEMPTED_WITHOUT_LOCK: AtomicBool = AtomicBool::new(false);

    /// The observer of the truth test.
    const A: usize = 0;
    /// The vCPU the kick test puts to sleep.
    const B: usize = 1;
    /// Most siblings of A that count and that A watches in the truth test
    /// (vCPUs 1..=MAX_OBSERVED; a poll reads each one's flag twice).
    const MAX_OBSERVED: usize = 7;

    /// How many siblings A watches: every other vCPU, up to MAX_OBSERVED.
    /// Watching them all means that, with more vCPUs than pCPUs, some
    /// sibling is preempted whenever A runs, however the hypervisor pairs
    /// vCPUs on its pCPUs.
    fn observed(vcpus: usize) -> usize {
        vcpus.saturating_sub(1).min(MAX_OBSERVED)
    }

    fn wait_phase(phase: u8) -> bool {
        time::wait_until(settings().timeout, || {
            PHASE.load(Ordering::Acquire) >= phase
        })
    }

    // ---- main --------------------------------------------------------------

    fn main() {
        let machine = rt::machine();
        let vcpus = machine.cpus().len();
        println!(
            "{PREFIX} {vcpus} vCPUs, {} MiB of RAM at {:#x}, PSCI via {}, counter {} Hz",
            machine.memory_size() >> 20,
            machine.memory().first().map_or(0, |m| m.start),
            psci::conduit().name(),
            time::frequency()
        );
        let args = rt::bootargs();
        let settings = match parse(args) {
            Ok(s) => SETTINGS.call_once(|| s),
            Err(e) => rt::fatal(format_args!(
                "{PREFIX} bad bootargs \"{}\": {e}",
                args.as_str()
            )),
        };
        println!(
            "{PREFIX} expecting {} (bootargs \"{}\")",
            settings.expect,
            args.as_str()
        );
        check_virtio_mmio(&settings.expect);
        check_probe(&settings.expect);
        check_calls(&settings.expect);
        init_this_cpu(0);
        if let Some(variant) = info().lock.filter(|v| v.guest_allocates()) {
            check_refused_registrations(variant, machine.memory_end());
        }
        if info().lock == Some(Variant::OpenEuler) {
            check_release();
        }
        start_secondaries(vcpus);
        check_records(vcpus);
        if vcpus >= 2 && matches!(settings.expect.lock, Some(v) if v.guest_allocates()) {
            check_kick();
            check_early_kick();
        }
        busy_period(vcpus);
        report_busy_period(vcpus);
        let failures = FAILURES.load(Ordering::Relaxed);
        if failures > 0 {
            rt::fatal(format_args!(
                "{PREFIX} {failures} check(s) failed, see above"
            ));
        }
        println!("{ALL_PASSED}");
    }

    /// QEMU `virt`'s virtio-mmio window: 32 empty transports of the
    /// expected Version that ignore writes, and their device-tree nodes
    /// as QEMU writes them (`guest_driver::virtiocheck`).
    fn check_virtio_mmio(expect: &Expect) {
        let transports = Label::VirtioTransports(expect.virtio_version);
        match rt::mmu::map_device(virtio_mmio::WINDOW_BASE, virtiocheck::WINDOW_BYTES) {
            Err(e) => fail(transports, format_args!("cannot map the window: {e}")),
            Ok(()) => {
                let result = virtiocheck::check_transports(
                    expect.virtio_version,
                    // SAFETY: the window is mapped as device memory just
                    // above; its registers are 32-bit, word aligned.
                    |address| unsafe { core::ptr::read_volatile(address as *const u32) },
                    // SAFETY: as for the reads; a write to an empty
                    // transport is ignored.
                    |address, value| unsafe {
                        core::ptr::write_volatile(address as *mut u32, value)
                    },
                );
                match result {
                    Ok(()) => pass(transports, None),
                    Err(e) => fail(transports, format_args!("{e}")),
                }
            }
        }
        match virtiocheck::check_nodes(rt::device_tree_blob()) {
            Ok(()) => pass(Label::VirtioNodes, None),
            Err(e) => fail(Label::VirtioNodes, format_args!("{e}")),
        }
    }

    /// Why the command line cannot be used.
    enum BadArgs {
        Expect(ExpectError<'static>),
        Number(ArgError<'static>),
    }

    impl fmt::Display for BadArgs {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                BadArgs::Expect(e) => e.fmt(f),
                BadArgs::Number(e) => e.fmt(f),
            }
        }
    }

    fn parse(args: BootArgs<'static>) -> Result<Settings, BadArgs> {
        let expect = Expect::from_bootargs(&args).map_err(BadArgs::Expect)?;
        let away = args
            .get("away-us")
            .map(|_| args.number("away-us", 0, 1, 4000))
            .transpose()
            .map_err(BadArgs::Number)?;
        Ok(Settings {
            expect,
            busy: Duration::from_millis(
                args.number("busy-ms", 300, 10, 10_000)
                    .map_err(BadArgs::Number)?,
            ),
            away: away.map(Duration::from_micros),
            timeout: Duration::from_secs(
                args.number("timeout", 60, 1, 3600)
                    .map_err(BadArgs::Number)?,
            ),
        })
    }

    fn secondary_main(cpu: usize) {
        init_this_cpu(cpu);
        INITED[cpu].store(true, Ordering::Release);
        if cpu == B && wait_phase(PHASE_KICK) && PHASE.load(Ordering::Acquire) == PHASE_KICK {
            wait_for_kick();
            if wait_phase(PHASE_EARLY_KICK) && PHASE.load(Ordering::Acquire) == PHASE_EARLY_KICK {
                wfi_after_kick();
            }
        }
        if wait_phase(PHASE_BUSY) {
            busy(cpu);
        }
        DONE[cpu].store(true, Ordering::Release);
    }

    // ---- 1. The probe ------------------------------------------------------

    fn check_probe(expect: &Expect) {
        let info = info();
        // This project's directed yield comes with every PV-lock variant
        // (docs/vms.md) and with nothing else.
        let mut ok = info.lock == expect.lock
            && info.steal_time == expect.steal_offered()
            && info.kick == matches!(expect.lock, Some(v) if v.guest_allocates())
            && info.directed_yield == expect.lock.is_some();
        match expect.kvm {
            Some(true) => ok &= info.kvm && info.smccc_version >= smccc::VERSION_1_1,
            Some(false) => ok &= !info.kvm && info.smccc_version < smccc::VERSION_1_1,
            None => {}
        }
        verdict(Label::Probe, ok, format_args!("{info}"));
        if !info.offers_anything() {
            println!(
                "{PREFIX} nothing offered: vcpu_is_preempted is always false, steal_time always 0"
            );
        }
    }

    // ---- 2. The calls ------------------------------------------------------

    fn check_calls(expect: &Expect) {
        let features = info().features;
        let before = CALLS_MADE.load(Ordering::Relaxed);
        for (spec, answer) in pvcheck::calls(expect) {
            let label = Label::Call(spec, answer);
            let c = checked_call(spec.function, spec.args);
            let clobbered = preserves_registers() && c.changed != 0;
            if answer.accepts(c.regs, features) && !clobbered {
                match answer {
                    pvcheck::Answer::Ipa | pvcheck::Answer::AtLeast(_) => {
                        pass(label, Some(format_args!("{:#x}", c.regs[0])))
                    }
                    _ => pass(label, None),
                }
            } else {
                let r = c.regs;
                fail(
                    label,
                    format_args!(
                        "got x0 {:#x} ({}) x1 {:#x} x2 {:#x} x3 {:#x}{}",
                        r[0],
                        r[0] as i64,
                        r[1],
                        r[2],
                        r[3],
                        Changed(if preserves_registers() { c.changed } else { 0 })
                    ),
                );
            }
        }
        if preserves_registers() {
            let made = CALLS_MADE.load(Ordering::Relaxed) - before;
            let clobbering = CLOBBERING_CALLS.load(Ordering::Relaxed);
            verdict(
                Label::RegistersPreserved,
                clobbering == 0,
                format_args!("{made} calls, {clobbering} changed x4..x17"),
            );
        }
    }

    // ---- 3. Setting up each vCPU -------------------------------------------

    fn init_this_cpu(cpu: usize) {
        let info = info();
        let CpuInit { lock, steal_time } = pv::init_cpu();
        let label = Label::InitCpu(cpu);
        let (lock, steal) = match (lock, steal_time) {
            (Ok(l), Ok(s)) => (l, s),
            (Err(e), _) => return fail(label, format_args!("PV-lock: {e}")),
            (_, Err(e)) => return fail(label, format_args!("stolen time: {e}")),
        };
        if lock.is_some() != info.lock.is_some() || steal.is_some() != info.steal_time {
            return fail(
                label,
                format_args!("records {lock:x?} {steal:x?} for {info}"),
            );
        }
        if pv::vcpu_is_preempted(cpu) {
            return fail(
                label,
                format_args!("the running vCPU reads its own flag as preempted"),
            );
        }
        match (lock, steal) {
            (None, None) => pass(label, Some(format_args!("nothing to set up"))),
            (lock, steal) => pass(
                label,
                Some(format_args!(
                    "PV-lock record {}, stolen-time record {}, own flag 0",
                    Ipa(lock),
                    Ipa(steal)
                )),
            ),
        }
    }

    struct Ipa(Option<u64>);

    impl fmt::Display for Ipa {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self.0 {
                Some(ipa) => write!(f, "{ipa:#x}"),
                None => write!(f, "none"),
            }
        }
    }

    /// Memory whose IPA a refused registration names: it must stay as it is.
    #[repr(C, align(64))]
    struct Target([AtomicU8; 128]);
    static TARGET: Target = Target([const { AtomicU8::new(0) }; 128]);
    const TARGET_FILL: u8 = 0xa5;
    /// What the guest writes into its registered record's flag to see
    /// whether the hypervisor still writes it.
    const SENTINEL: u32 = 0x5e47;
    /// Most reschedules to wait for a write to the record.
    const MAX_RESCHEDULES: u32 = 200;

    fn register_call(variant: Variant) -> FunctionId {
        match variant {
            Variant::Anolis => anolis::PV_LOCK_PREEMPTED,
            _ => openeuler::PV_SCHED_IPA_INIT,
        }
    }

    fn own_record() -> Option<&'static VcpuState32> {
        pv::driver().and_then(|d| d.guest_record(0))
    }

    /// Reschedules until the hypervisor has overwritten the sentinel in
    /// `record`; returns how many reschedules that took.
    fn reschedules_until_written(record: &VcpuState32) -> Option<u32> {
        (1..=MAX_RESCHEDULES).find(|_| {
            reschedule();
            record.load_preempted(Ordering::Acquire) != SENTINEL
        })
    }

    static RESCHEDULES_NEEDED: AtomicU32 = AtomicU32::new(0);

    /// openEuler / Anolis: registering an unaligned IPA, or one outside
    /// RAM, is refused; the unaligned target stays untouched and the record
    /// registered before is still the one written.
    fn check_refused_registrations(variant: Variant, ram_end: u64) {
        let call = register_call(variant);
        for b in &TARGET.0 {
            b.store(TARGET_FILL, Ordering::Relaxed);
        }
        let unaligned = TARGET.0.as_ptr() as u64 + 8;
        let code_unaligned = code_of(Label::UnalignedIpa(variant), call, [unaligned, 0, 0]);
        let code_outside = code_of(Label::IpaOutsideRam(variant), call, [ram_end, 0, 0]);
        let Some(record) = own_record() else {
            return fail(
                Label::StillRegistered(variant),
                format_args!("no record registered"),
            );
        };
        record.store_preempted(SENTINEL, Ordering::Release);
        let written = reschedules_until_written(record);
        RESCHEDULES_NEEDED.store(written.unwrap_or(MAX_RESCHEDULES), Ordering::Relaxed);
        let untouched = TARGET
            .0
            .iter()
            .all(|b| b.load(Ordering::Acquire) == TARGET_FILL);
        verdict(
            Label::UnalignedIpa(variant),
            code_unaligned < 0 && untouched,
            format_args!(
                "IPA {unaligned:#x} -> {code_unaligned}, {}",
                if untouched {
                    "target untouched"
                } else {
                    "target WRITTEN"
                }
            ),
        );
        verdict(
            Label::IpaOutsideRam(variant),
            code_outside < 0,
            format_args!("IPA {ram_end:#x} -> {code_outside}"),
        );
        match written {
            Some(n) => pass(
                Label::StillRegistered(variant),
                Some(format_args!(
                    "flag {} after {n} reschedule(s)",
                    record.load_preempted(Ordering::Relaxed)
                )),
            ),
            None => fail(
                Label::StillRegistered(variant),
                format_args!(
                    "the flag still holds {SENTINEL:#x} after {MAX_RESCHEDULES} reschedules"
                ),
            ),
        }
    }

    /// openEuler: after IPA_RELEASE the record is no longer written; after
    /// IPA_INIT it is again.
    fn check_release() {
        let Some(record) = own_record() else {
            return fail(Label::Release, format_args!("no record registered"));
        };
        let ipa = record as *const VcpuState32 as u64;
        let code = code_of(Label::Release, openeuler::PV_SCHED_IPA_RELEASE, [0; 3]);
        record.store_preempted(SENTINEL, Ordering::Release);
        // Twice as many reschedules as a write took before, and at least 3.
        let tries = (2 * RESCHEDULES_NEEDED.load(Ordering::Relaxed)).clamp(3, MAX_RESCHEDULES);
        for _ in 0..tries {
            reschedule();
        }
        let flag = record.load_preempted(Ordering::Acquire);
        verdict(
            Label::Release,
            code == smccc::SUCCESS && flag == SENTINEL,
            format_args!("-> {code}, flag {flag:#x} after {tries} reschedules"),
        );
        let code = code_of(Label::Reregister, openeuler::PV_SCHED_IPA_INIT, [ipa, 0, 0]);
        let written = reschedules_until_written(record);
        verdict(
            Label::Reregister,
            code == smccc::SUCCESS && written.is_some(),
            format_args!(
                "IPA {ipa:#x} -> {code}, flag {:#x} after {} reschedule(s)",
                record.load_preempted(Ordering::Relaxed),
                written.unwrap_or(MAX_RESCHEDULES)
            ),
        );
    }

    // ---- 4. The other vCPUs ------------------------------------------------

    fn start_secondaries(vcpus: usize) {
        let timeout = settings().timeout;
        for cpu in 1..vcpus {
            let label = Label::InitCpu(cpu);
            match smp::start(cpu) {
                Ok(started) if started.wait_entered(timeout) => {}
                Ok(_) => fail(
                    label,
                    format_args!("did not come online within {} s", timeout.as_secs()),
                ),
                Err(e) => fail(label, format_args!("CPU_ON failed with {e}")),
            }
        }
        let all = time::wait_until(timeout, || {
            (1..vcpus).all(|cpu| INITED[cpu].load(Ordering::Acquire) || !smp::is_running(cpu))
        });
        if !all {
            println!(
                "{PREFIX} not every vCPU finished init_cpu within {} s",
                timeout.as_secs()
            );
        }
    }

    /// The hypervisor's records: 64-byte aligned, in reserved memory, one
    /// per vCPU (no two vCPUs, and not PV-lock and stolen time, share one).
    fn check_records(vcpus: usize) {
        let Some(driver) = pv::driver() else { return };
        let info = info();
        let hypervisor_lock = matches!(info.lock, Some(v) if !v.guest_allocates());
        if !hypervisor_lock && !info.steal_time {
            return;
        }
        let machine = rt::machine();
        let mut records = [0u64; 2 * MAX_CPUS];
        let mut n = 0;
        for cpu in 0..vcpus {
            let (lock, steal) = driver.record_ipas(cpu);
            for ipa in [lock.filter(|_| hypervisor_lock), steal]
                .into_iter()
                .flatten()
            {
                records[n] = ipa;
                n += 1;
            }
        }
        let records = &mut records[..n];
        let expected = vcpus * (usize::from(hypervisor_lock) + usize::from(info.steal_time));
        let size = pvlock_abi::pvlock::STATE_SIZE as u64;
        let bad = records.iter().copied().find(|&ipa| {
            !ipa.is_multiple_of(size) || !machine.is_reserved(&MemRange::new(ipa, size))
        });
        records.sort_unstable();
        let shared = records.windows(2).find(|w| w[0] == w[1]).map(|w| w[0]);
        let (low, high) = (records.first().copied(), records.last().copied());
        let in_ram = records
            .iter()
            .all(|&ipa| machine.is_ram(&MemRange::new(ipa, size)));
        match (n == expected, bad, shared) {
            (true, None, None) => pass(
                Label::Records,
                Some(format_args!(
                    "{n} records {}..={}, {} RAM",
                    Ipa(low),
                    Ipa(high),
                    if in_ram { "inside" } else { "partly outside" }
                )),
            ),
            (false, ..) => fail(
                Label::Records,
                format_args!("{n} records set up, expected {expected}"),
            ),
            (_, Some(ipa), _) => fail(
                Label::Records,
                format_args!(
                    "the record at {ipa:#x} is not 64-byte aligned inside a reserved region \
                     (/memreserve/ or /reserved-memory: {:x?})",
                    machine.reserved()
                ),
            ),
            (_, None, Some(ipa)) => {
                fail(Label::Records, format_args!("{ipa:#x} is handed out twice"))
            }
        }
    }

    // ---- 5. Kick -----------------------------------------------------------

    /// How long B waits in WFI if nobody kicks it.
    const KICK_SAFETY: Duration = Duration::from_secs(2);
    /// How long A waits before kicking, so that B really sleeps.
    const KICK_DELAY: Duration = Duration::from_millis(20);
    /// More WFI returns than this before the kick: WFI did not wait.
    const MAX_WFIS: u32 = 100;
    static KICK_WAITING: AtomicBool = AtomicBool::new(false);
    static KICKED: AtomicBool = AtomicBool::new(false);
    static KICK_DONE: AtomicBool = AtomicBool::new(false);
    static KICK_WOKE: AtomicU64 = AtomicU64::new(0);
    static KICK_DEADLINE: AtomicU64 = AtomicU64::new(0);
    static KICK_WFIS: AtomicU32 = AtomicU32::new(0);

    /// B: waits in WFI until kicked (or its safety deadline).
    fn wait_for_kick() {
        let deadline = time::counter() + time::to_ticks(KICK_SAFETY);
        KICK_DEADLINE.store(deadline, Ordering::Relaxed);
        KICK_WAITING.store(true, Ordering::Release);
        let mut wfis = 0u32;
        while !KICKED.load(Ordering::Acquire) && time::counter() < deadline {
            time::wfi_until(deadline);
            wfis += 1;
        }
        KICK_WOKE.store(time::counter(), Ordering::Relaxed);
        KICK_WFIS.store(wfis, Ordering::Relaxed);
        KICK_DONE.store(true, Ordering::Release);
    }

    /// A: kicks B out of its WFI.
    fn check_kick() {
        PHASE.store(PHASE_KICK, Ordering::Release);
        let timeout = settings().timeout;
        if !time::wait_until(timeout, || KICK_WAITING.load(Ordering::Acquire)) {
            return fail(Label::Kick, format_args!("vCPU {B} never started waiting"));
        }
        spin_for(KICK_DELAY);
        let kicked_at = time::counter();
        KICKED.store(true, Ordering::Release);
        let answer = pv::kick(B);
        if !time::wait_until(KICK_SAFETY + timeout, || KICK_DONE.load(Ordering::Acquire)) {
            return fail(
                Label::Kick,
                format_args!("vCPU {B} never woke ({answer:?})"),
            );
        }
        let woke = KICK_WOKE.load(Ordering::Relaxed);
        let deadline = KICK_DEADLINE.load(Ordering::Relaxed);
        let wfis = KICK_WFIS.load(Ordering::Relaxed);
        let after = millis(ticks_to_ns(woke.saturating_sub(kicked_at)));
        verdict(
            Label::Kick,
            answer == Kick::Kicked && woke < deadline && wfis <= MAX_WFIS,
            format_args!(
                "kick -> {answer:?}; vCPU {B} woke {after:.3} ms after it, {} its {} s deadline, \
                 after {wfis} WFI(s)",
                if woke < deadline { "before" } else { "at" },
                KICK_SAFETY.as_secs()
            ),
        );
    }

    /// How long B's WFI after an early kick may take: the kick test above
    /// shows that without a kick the same WFI lasts at least KICK_DELAY,
    /// and the deadline is KICK_SAFETY away.
    const EARLY_KICK_MAX: Duration = Duration::from_millis(10);
    static EARLY_READY: AtomicBool = AtomicBool::new(false);
    static EARLY_KICKED: AtomicBool = AtomicBool::new(false);
    static EARLY_DONE: AtomicBool = AtomicBool::new(false);
    static EARLY_WFI_TICKS: AtomicU64 = AtomicU64::new(0);

    /// B: runs until A has kicked it, then waits in WFI once.
    fn wfi_after_kick() {
        // A kick of the previous check that found B running left its
        // flag set: one short WFI consumes it, so that only the kick below
        // can end the WFI that is judged.
        time::wfi_until(time::counter() + time::to_ticks(Duration::from_millis(1)));
        EARLY_READY.store(true, Ordering::Release);
        let timeout = settings().timeout;
        let kicked = time::wait_until(timeout, || EARLY_KICKED.load(Ordering::Acquire));
        let start = time::counter();
        if kicked {
            time::wfi_until(start + time::to_ticks(KICK_SAFETY));
        }
        EARLY_WFI_TICKS.store(time::counter() - start, Ordering::Relaxed);
        EARLY_DONE.store(true, Ordering::Release);
    }

    /// A: kicks B while B still runs (the kick a PV spinlock's unlocker
    /// sends just before its waiter halts), then tells it to WFI.
    fn check_early_kick() {
        PHASE.store(PHASE_EARLY_KICK, Ordering::Release);
        let timeout = settings().timeout;
        if !time::wait_until(timeout, || EARLY_READY.load(Ordering::Acquire)) {
            return fail(Label::EarlyKick, format_args!("vCPU {B} never got ready"));
        }
        let answer = pv::kick(B);
        EARLY_KICKED.store(true, Ordering::Release);
        if !time::wait_until(KICK_SAFETY + timeout, || EARLY_DONE.load(Ordering::Acquire)) {
            return fail(
                Label::EarlyKick,
                format_args!("vCPU {B} never came back from its WFI ({answer:?})"),
            );
        }
        let waited = ticks_to_ns(EARLY_WFI_TICKS.load(Ordering::Relaxed));
        verdict(
            Label::EarlyKick,
            answer == Kick::Kicked && waited < EARLY_KICK_MAX.as_nanos() as u64,
            format_args!(
                "kick -> {answer:?} while vCPU {B} ran; its next WFI took {:.3} ms (limit {} \
                 ms, deadline {} s)",
                millis(waited),
                EARLY_KICK_MAX.as_millis(),
                KICK_SAFETY.as_secs()
            ),
        );
    }

    // ---- 6. The busy period -----------------------------------------------

    fn busy_period(vcpus: usize) {
        let end = time::counter() + time::to_ticks(settings().busy);
        BUSY_END.store(end, Ordering::Relaxed);
        PHASE.store(PHASE_BUSY, Ordering::Release);
        busy(0);
        let timeout = settings().timeout;
        let all = time::wait_until(timeout, || {
            (1..vcpus).all(|cpu| DONE[cpu].load(Ordering::Acquire) || !smp::is_running(cpu))
        });
        if !all {
            println!(
                "{PREFIX} not every vCPU finished the busy period within {} s",
                timeout.as_secs()
            );
        }
    }

    /// Every vCPU's part of the busy period, with its stolen time around it.
    fn busy(cpu: usize) {
        let end = BUSY_END.load(Ordering::Relaxed);
        let start = time::counter();
        let steal = pv::steal_time(cpu);
        let vcpus = rt::machine().cpus().len();
        let truth = info().lock.is_some() && vcpus >= 2;
        match cpu {
            A if truth => observe(end),
            b if truth && (1..=observed(vcpus)).contains(&b) => count(b, end),
            A if info().lock.is_none() => watch_no_lock(vcpus, end),
            _ => spin_until(end),
        }
        BUSY_TICKS[cpu].store(time::counter() - start, Ordering::Relaxed);
        BUSY_STEAL[cpu].store(steal, Ordering::Relaxed);
        BUSY_STEAL_END[cpu].store(pv::steal_time(cpu), Ordering::Release);
    }

    fn spin_until(end: u64) {
        while time::counter() < end {
            core::hint::spin_loop();
        }
    }

    /// A B: counts as fast as it can.
    fn count(cpu: usize, end: u64) {
        let counter = &COUNTERS[cpu];
        let mut n = 0u64;
        while time::counter() < end {
            for _ in 0..64 {
                n += 1;
                counter.store(n, Ordering::Relaxed);
            }
        }
    }

    /// Without PV-lock: vCPU 0 asks about every vCPU all along.
    fn watch_no_lock(vcpus: usize, end: u64) {
        while time::counter() < end {
            if (0..vcpus).any(pv::vcpu_is_preempted) {
                SEEN_PREEMPTED_WITHOUT_LOCK.store(true, Ordering::Relaxed);
            }
        }
    }

    /// One poll of A: each B's flag around a read of each B's counter,
    /// bracketed by the counter and with A's own stolen time.
    #[derive(Clone, Copy)]
    struct Poll {
        start: u64,
        end: u64,
        own_steal: u64,
        /// Bit i: B = vCPU i + 1 read as preempted before and after.
        preempted: u8,
        counters: [u64; MAX_OBSERVED],
    }

    const _: () = assert!(MAX_OBSERVED <= u8::BITS as usize);

    fn poll(n: usize) -> Poll {
        let flags = || {
            (0..n)
                .filter(|&i| pv::vcpu_is_preempted(i + 1))
                .fold(0u8, |m, i| m | 1 << i)
        };
        let start = time::counter();
        let own_steal = pv::steal_time(A);
        let before = flags();
        let counters = core::array::from_fn(|i| {
            if i < n {
                COUNTERS[i + 1].load(Ordering::Acquire)
            } else {
                0
            }
        });
        let after = flags();
        Poll {
            start,
            end: time::counter(),
            own_steal,
            preempted: before & after,
            counters,
        }
    }

    /// Polls used to calibrate the away threshold.
    const CALIBRATION_POLLS: usize = 512;
    const MIN_AWAY: Duration = Duration::from_micros(20);
    const MAX_AWAY: Duration = Duration::from_millis(1);
    /// Judged windows needed for the test to mean anything.
    const MIN_WINDOWS: u64 = 100;

    /// What the observer found.
    struct Truth {
        counts: TruthCounts,
        /// Windows in which A was away (not per B).
        discarded: u64,
        /// How many Bs A watched.
        observed: usize,
        /// Judged windows in which B's counter moved ...
        moved: u64,
        /// ... and A read B's flag as 1 at one end.
        moved_shown_preempted: u64,
        threshold_ns: u64,
        median_poll_ns: u64,
    }

    static TRUTH: Once<Truth> = Once::new();

    /// A: the preempted-truth test, with every B it watches. The counts
    /// are per (window, B).
    fn observe(end: u64) {
        let n = observed(rt::machine().cpus().len());
        let mut gaps = [0u32; CALIBRATION_POLLS];
        let mut prev = poll(n);
        for gap in &mut gaps {
            let p = poll(n);
            *gap = u32::try_from(p.end - prev.start).unwrap_or(u32::MAX);
            prev = p;
        }
        gaps.sort_unstable();
        let median = u64::from(gaps[CALIBRATION_POLLS / 2]);
        let threshold = match settings().away {
            Some(away) => time::to_ticks(away),
            None => (32 * median).clamp(time::to_ticks(MIN_AWAY), time::to_ticks(MAX_AWAY)),
        };
        let mut counts = TruthCounts {
            windows: 0,
            preempted: 0,
            violations: 0,
        };
        let (mut discarded, mut moved, mut moved_shown_preempted) = (0u64, 0u64, 0u64);
        while time::counter() < end {
            let p = poll(n);
            let away = p.end - prev.start > threshold || p.own_steal != prev.own_steal;
            if away {
                discarded += 1;
                prev = p;
                continue;
            }
            for i in 0..n {
                counts.windows += 1;
                let advanced = p.counters[i] != prev.counters[i];
                let (was, is) = (prev.preempted & 1 << i != 0, p.preempted & 1 << i != 0);
                if was && is {
                    counts.preempted += 1;
                    if advanced {
                        counts.violations += 1;
                    }
                }
                if advanced {
                    moved += 1;
                    if was || is {
                        moved_shown_preempted += 1;
                    }
                }
            }
            prev = p;
        }
        TRUTH.call_once(|| Truth {
            counts,
            discarded,
            observed: n,
            moved,
            moved_shown_preempted,
            threshold_ns: ticks_to_ns(threshold),
            median_poll_ns: ticks_to_ns(median),
        });
    }

    // ---- 7. Reports --------------------------------------------------------

    fn report_busy_period(vcpus: usize) {
        let expect = &settings().expect;
        if let Some(truth) = TRUTH.get() {
            let counts = truth.counts;
            let shown = truth.moved_shown_preempted;
            println!("{counts}");
            println!(
                "{PREFIX} preempted truth details: B = each of vCPUs 1..={}, {} windows discarded \
                 (observer away), a B's counter moved in {} windows ({shown} of them with its flag \
                 1), median poll {} ns, away threshold {:.3} ms",
                truth.observed,
                truth.discarded,
                truth.moved,
                truth.median_poll_ns,
                millis(truth.threshold_ns)
            );
            let overcommit = expect.overcommitted();
            let problem = if counts.violations > 0 {
                Some("B's counter moved while its flag said preempted")
            } else if counts.windows < MIN_WINDOWS {
                Some("too few judged windows")
            } else if overcommit == Some(true) && counts.preempted == 0 {
                Some("A never saw B preempted")
            } else if overcommit == Some(false) && shown > 0 {
                Some("B's flag read 1 while its counter moved, without overcommit")
            } else {
                None
            };
            // Without overcommit the judged direction is "a B whose counter
            // moved read 0"; on a host too busy to run A and a B at once no
            // window shows a B moving, and the result says so.
            let detail = format_args!(
                "{} windows, {} with B preempted, {} violations; a B moved in {} of them, \
                 reading 1 in {shown}",
                counts.windows, counts.preempted, counts.violations, truth.moved
            );
            match problem {
                None => pass(Label::PreemptedTruth, Some(detail)),
                Some(why) => fail(Label::PreemptedTruth, format_args!("{why}: {detail}")),
            }
        } else if info().lock.is_some() && vcpus >= 2 {
            fail(
                Label::PreemptedTruth,
                format_args!("the observer did not run"),
            );
        }
        if info().lock.is_none() {
            let seen = SEEN_PREEMPTED_WITHOUT_LOCK.load(Ordering::Relaxed)
                || (0..vcpus).any(pv::vcpu_is_preempted);
            verdict(
                Label::NeverPreempted,
                !seen,
                format_args!("{vcpus} vCPUs asked all through the busy period"),
            );
        }
        if !info().steal_time {
            let nonzero = (0..vcpus).find(|&cpu| {
                BUSY_STEAL_END[cpu].load(Ordering::Acquire) != 0 || pv::steal_time(cpu) != 0
            });
            verdict(
                Label::NoStealTime,
                nonzero.is_none(),
                format_args!("{vcpus} vCPUs"),
            );
            return;
        }
        for cpu in 0..vcpus {
            if !DONE[cpu].load(Ordering::Acquire) && cpu != 0 {
                fail(
                    Label::Steal(cpu),
                    format_args!("did not finish the busy period"),
                );
                continue;
            }
            let period = ticks_to_ns(BUSY_TICKS[cpu].load(Ordering::Relaxed));
            let end = BUSY_STEAL_END[cpu].load(Ordering::Acquire);
            let start = BUSY_STEAL[cpu].load(Ordering::Relaxed);
            let grown = end.wrapping_sub(start);
            let percent = match expect.steal {
                Steal::Grows => STEAL_OVERCOMMIT_MIN_PERCENT,
                _ => STEAL_DEDICATED_MAX_PERCENT,
            };
            let bound = period / 100 * percent;
            let ok = match expect.steal {
                _ if end < start => false,
                Steal::Grows => grown >= bound,
                Steal::NearZero => grown < bound,
                Steal::Unavailable => grown == 0,
            };
            verdict(
                Label::Steal(cpu),
                ok,
                format_args!(
                    "{}{:.3} ms stolen in a {:.3} ms busy period ({} {percent}%)",
                    if end < start { "DECREASED: " } else { "+" },
                    millis(grown),
                    millis(period),
                    if matches!(expect.steal, Steal::Grows) {
                        "at least"
                    } else {
                        "below"
                    }
                ),
            );
        }
    }
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "pv-check is a bare-metal guest; build it with `cargo xtask build` and boot it with \
         `cargo xtask run --guest pv-check --bootargs 'expect-lock=... expect-steal=...'` (or \
         `--bare` without the hypervisor)"
    );
    std::process::exit(2);
}
