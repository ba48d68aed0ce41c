//! `smp-demo`: the first guest. It starts every vCPU its device tree lists
//! with PSCI CPU_ON, gives each the same measurable work, prints progress
//! as it goes, checks every vCPU's result and the PSCI answers it got, and
//! powers off.
//!
//! Command line (`/chosen/bootargs`):
//!
//! | word | meaning | default |
//! |---|---|---|
//! | `work=N` | iterations of the checksum loop per round (1..=100000000) | 1000000 |
//! | `rounds=N` | rounds per vCPU, each ending with a progress line (1..=1000) | 5 |
//! | `timeout=S` | seconds to wait for a vCPU to come online, and for all to finish | 60 |
//! | `psci-checks=all` | also check that CPU_ON with an entry point outside RAM answers INVALID_ADDRESS (the pvlock hypervisor checks this; QEMU does not) | `basic` |
//! | `selftest=abort` | read past the end of RAM first: the guest must report a synchronous external abort | none |
//! | `selftest=undef` | execute an undefined instruction first: the guest must report it | none |
//! | `selftest=reset` | on the first boot (`/chosen/pvlock,reset-count` 0) request PSCI SYSTEM_RESET; after a restart say so and run normally | none |
//!
//! Output (every line starts with `smp-demo:`; `guest_driver::demo` defines
//! the lines `cargo xtask` judges):
//!
//! ```text
//! smp-demo: 4 vCPUs, 256 MiB of RAM at 0x40000000, PSCI 1.1 via hvc, counter 62500000 Hz
//! smp-demo: 3 rounds of 200000 iterations per vCPU (bootargs "rounds=3 work=200000")
//! smp-demo: psci: CPU_ON of an MPIDR not in the device tree -> -2 (INVALID_PARAMETERS): ok (mpidr 0.255.0.0)
//! smp-demo: psci: CPU_ON of the calling vCPU -> -4 (ALREADY_ON): ok (vcpu 0)
//! smp-demo: vcpu 1 mpidr 0.0.0.1 online 2.316 ms after CPU_ON
//! smp-demo: psci: CPU_ON of a running vCPU -> -4 (ALREADY_ON): ok (vcpu 1)
//! smp-demo: psci: AFFINITY_INFO of a running vCPU -> 0 (ON): ok (vcpu 1)
//! ...
//! smp-demo: vcpu 0 mpidr 0.0.0.0 round 1/3 at 13.766 ms
//! smp-demo: vcpu 3 mpidr 0.0.0.3 round 1/3 at 16.187 ms
//! ...
//! smp-demo: vcpu 3 mpidr 0.0.0.3 done, checksum 0xf01f33689dfb0da4
//! smp-demo: psci: AFFINITY_INFO of a vCPU after CPU_OFF -> 1 (OFF): ok (vcpu 1)
//! ...
//! smp-demo: 4 vCPUs done, checksums ok
//! ```
//!
//! The boot vCPU starts the others one at a time (each must come online and
//! then answer ALREADY_ON and AFFINITY_INFO ON) and only then lets all of
//! them work, so every vCPU works at once and none finishes while PSCI is
//! still being asked about it. A secondary that returns from its work is
//! powered off by the runtime (CPU_OFF), which AFFINITY_INFO must then show.
//! Progress lines take their time stamp before the console lock, so they
//! may come out slightly out of time order.
//!
//! Any failed check prints a line saying what was expected, and the run
//! ends with a `GUEST FATAL` line instead of the summary.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod guest {
    use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    use core::time::Duration;
    use guest_driver::bootargs::{ArgError, BootArgs};
    use guest_driver::demo::{
        Checksum, MAX_WORK, PREFIX, Progress, PsciCheck, PsciResult, Summary, expected_checksum,
    };
    use guest_driver::devicetree::MAX_CPUS;
    use guest_driver::mpidr::Mpidr;
    use guest_driver::println;
    use guest_driver::rt::{self, psci, selftest, smp, time};
    use spin::Once;

    guest_driver::entry!(main, secondary_main);

    /// What the command line asks for.
    struct Settings {
        work: u64,
        rounds: u64,
        timeout: Duration,
        check_entry_outside_ram: bool,
        selftest: Option<&'static str>,
    }

    impl Settings {
        fn parse(args: BootArgs<'static>) -> Result<Self, ArgError<'static>> {
            let checks = args.choice("psci-checks", &["basic", "all"])?;
            let selftest = args.choice("selftest", &["abort", "undef", "reset"])?;
            Ok(Self {
                work: args.number("work", 1_000_000, 1, MAX_WORK)?,
                rounds: args.number("rounds", 5, 1, 1000)?,
                timeout: Duration::from_secs(args.number("timeout", 60, 1, 3600)?),
                check_entry_outside_ram: checks == Some("all"),
                selftest,
            })
        }
    }

    static SETTINGS: Once<Settings> = Once::new();
    /// Each vCPU's final checksum, valid once its `DONE` flag is set.
    static CHECKSUMS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
    static DONE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
    /// Checks that failed so far.
    static FAILURES: AtomicUsize = AtomicUsize::new(0);
    /// Set by the boot vCPU once every vCPU is started and checked: no
    /// vCPU finishes (and powers off) while PSCI is still asked about it,
    /// and all of them work at the same time.
    static GO: AtomicBool = AtomicBool::new(false);

    fn settings() -> &'static Settings {
        SETTINGS.get().expect("main parses the settings first")
    }

    fn mpidr_of(cpu: usize) -> Mpidr {
        rt::machine().cpus()[cpu]
    }

    fn fail() {
        FAILURES.fetch_add(1, Ordering::Relaxed);
    }

    fn millis(d: Duration) -> f64 {
        d.as_secs_f64() * 1000.0
    }

    /// Prints a PSCI check's line (with `detail` appended) and counts it.
    fn report(
        check: PsciCheck,
        answer: Result<i32, psci::PsciError>,
        detail: core::fmt::Arguments,
    ) {
        let answer = answer.unwrap_or_else(|e| e.0);
        let result = PsciResult { check, answer };
        println!("{result} ({detail})");
        if !result.passed() {
            fail();
        }
    }

    fn main() {
        let machine = rt::machine();
        let vcpus = machine.cpus().len();
        let version = match psci::version() {
            Ok((major, minor)) => (major, minor),
            Err(e) => rt::fatal(format_args!("{PREFIX} PSCI_VERSION failed with {e}")),
        };
        println!(
            "{PREFIX} {vcpus} vCPUs, {} MiB of RAM at {:#x}, PSCI {}.{} via {}, counter {} Hz",
            machine.memory_size() >> 20,
            machine.memory().first().map_or(0, |m| m.start),
            version.0,
            version.1,
            psci::conduit().name(),
            time::frequency()
        );
        let args = rt::bootargs();
        let settings = match Settings::parse(args) {
            Ok(s) => SETTINGS.call_once(|| s),
            Err(e) => rt::fatal(format_args!("{PREFIX} bad bootargs: {e}")),
        };
        println!(
            "{PREFIX} {} rounds of {} iterations per vCPU (bootargs \"{}\")",
            settings.rounds,
            settings.work,
            args.as_str()
        );
        if machine.ignored_cpus > 0 {
            println!(
                "{PREFIX} {} CPU nodes ignored (more than {MAX_CPUS}, or not started by PSCI)",
                machine.ignored_cpus
            );
        }
        match settings.selftest {
            None => {}
            Some("abort") => {
                println!(
                    "{PREFIX} selftest: reading {:#x}, past the end of RAM; expecting a synchronous external abort",
                    machine.memory_end()
                );
                let (address, value) = selftest::read_outside_ram();
                rt::fatal(format_args!(
                    "{PREFIX} selftest: reading {address:#x} returned {value:#x} instead of aborting"
                ));
            }
            Some("undef") => {
                println!("{PREFIX} selftest: executing an undefined instruction");
                selftest::undefined_instruction();
                rt::fatal(format_args!(
                    "{PREFIX} selftest: the undefined instruction did not trap"
                ));
            }
            Some("reset") if machine.resets == 0 => {
                println!("{PREFIX} selftest: requesting SYSTEM_RESET");
                psci::system_reset();
            }
            Some("reset") => {
                println!(
                    "{PREFIX} selftest: restarted after {} reset(s)",
                    machine.resets
                );
            }
            Some(other) => unreachable!("selftest={other} passed Settings::parse"),
        }

        check_psci_basics();
        for cpu in 1..vcpus {
            start_vcpu(cpu);
        }
        GO.store(true, Ordering::Release);
        run(0);
        finish(vcpus);
    }

    fn secondary_main(cpu: usize) {
        let timeout = settings().timeout;
        if !time::wait_until(timeout, || GO.load(Ordering::Acquire)) {
            println!(
                "{PREFIX} vcpu {cpu}: the boot vCPU did not start the work within {} s; starting anyway",
                timeout.as_secs()
            );
        }
        run(cpu);
    }

    /// CPU_ON answers that need no second vCPU.
    fn check_psci_basics() {
        let machine = rt::machine();
        let unknown = (0..=0xffu8)
            .rev()
            .map(|aff2| Mpidr::from_affinity(0, aff2, 0, 0))
            .find(|m| machine.cpu_index(*m).is_none())
            .expect("a guest has fewer than 256 CPUs");
        report(
            PsciCheck::UnknownMpidr,
            psci::cpu_on(unknown, smp::entry_point(), 0).map(|()| 0),
            format_args!("mpidr {unknown}"),
        );
        report(
            PsciCheck::BootCpuAlreadyOn,
            smp::start(0).map(|_| 0),
            format_args!("vcpu 0"),
        );
    }

    /// Starts `cpu`, waits for it, and checks what PSCI says about it.
    fn start_vcpu(cpu: usize) {
        let settings = settings();
        let mpidr = mpidr_of(cpu);
        if settings.check_entry_outside_ram && cpu == 1 {
            let outside = rt::machine().memory_end();
            report(
                PsciCheck::EntryOutsideRam,
                psci::cpu_on(mpidr, outside, cpu as u64).map(|()| 0),
                format_args!("vcpu {cpu}, entry {outside:#x}"),
            );
        }
        let asked = time::counter();
        let started = match smp::start(cpu) {
            Ok(started) => started,
            Err(e) => {
                println!(
                    "{PREFIX} vcpu {cpu} mpidr {mpidr}: CPU_ON failed with {e}; expected 0 (SUCCESS)"
                );
                fail();
                return;
            }
        };
        if !started.wait_entered(settings.timeout) {
            println!(
                "{PREFIX} vcpu {cpu} mpidr {mpidr}: CPU_ON succeeded but the vCPU did not come online within {} s",
                settings.timeout.as_secs()
            );
            fail();
            return;
        }
        println!(
            "{PREFIX} vcpu {cpu} mpidr {mpidr} online {:.3} ms after CPU_ON",
            millis(time::to_duration(time::counter() - asked))
        );
        report(
            PsciCheck::RunningCpuAlreadyOn,
            smp::start(cpu).map(|_| 0),
            format_args!("vcpu {cpu}"),
        );
        report(
            PsciCheck::AffinityOn,
            psci::affinity_info(mpidr),
            format_args!("vcpu {cpu}"),
        );
    }

    /// Every vCPU's work: the rounds of the checksum loop, a progress line
    /// after each.
    fn run(cpu: usize) {
        let settings = settings();
        let mpidr = mpidr_of(cpu);
        let mut checksum = Checksum::new(cpu);
        for round in 1..=settings.rounds {
            checksum.round(settings.work);
            let progress = Progress {
                vcpu: cpu,
                mpidr,
                round,
                rounds: settings.rounds,
            };
            println!("{progress} at {:.3} ms", millis(time::since_boot()));
        }
        CHECKSUMS[cpu].store(checksum.value(), Ordering::Relaxed);
        DONE[cpu].store(true, Ordering::Release);
        println!(
            "{PREFIX} vcpu {cpu} mpidr {mpidr} done, checksum {:#018x}",
            checksum.value()
        );
    }

    /// Waits for every vCPU, checks the checksums and that the secondaries
    /// are off, then prints the summary (or fails).
    fn finish(vcpus: usize) {
        let settings = settings();
        let all_done = time::wait_until(settings.timeout, || {
            (0..vcpus).all(|cpu| DONE[cpu].load(Ordering::Acquire) || !smp::is_running(cpu))
        });
        for cpu in 0..vcpus {
            let mpidr = mpidr_of(cpu);
            if !DONE[cpu].load(Ordering::Acquire) {
                println!(
                    "{PREFIX} vcpu {cpu} mpidr {mpidr} did not finish{}",
                    if all_done { "" } else { " in time" }
                );
                fail();
                continue;
            }
            let got = CHECKSUMS[cpu].load(Ordering::Relaxed);
            let expected = expected_checksum(cpu, settings.work, settings.rounds);
            if got != expected {
                println!(
                    "{PREFIX} vcpu {cpu} mpidr {mpidr}: checksum {got:#018x} WRONG, expected {expected:#018x}"
                );
                fail();
            }
        }
        for (cpu, done) in DONE.iter().enumerate().take(vcpus).skip(1) {
            if !done.load(Ordering::Acquire) {
                continue;
            }
            let mpidr = mpidr_of(cpu);
            let mut last = psci::affinity_info(mpidr);
            time::wait_until(settings.timeout, || {
                last = psci::affinity_info(mpidr);
                last == Ok(pvlock_abi::psci::AFFINITY_OFF)
            });
            report(PsciCheck::AffinityOff, last, format_args!("vcpu {cpu}"));
        }
        let failures = FAILURES.load(Ordering::Relaxed);
        if failures > 0 {
            rt::fatal(format_args!(
                "{PREFIX} {failures} check(s) failed, see above"
            ));
        }
        println!("{}", Summary { vcpus });
    }
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "smp-demo is a bare-metal guest; build it with `cargo xtask build` and boot it with \
         `cargo xtask run --guest smp-demo` (or `--guest smp-demo --bare` without the hypervisor)"
    );
    std::process::exit(2);
}
