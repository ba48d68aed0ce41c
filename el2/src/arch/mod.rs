//! Everything that only runs on AArch64 at EL2: entry, vectors, MMU, GIC,
//! timer, console and firmware calls, and the boot sequence that ties them
//! together. Decisions (memory layout, CPU order, command line) are made by
//! the portable `el2` library.

pub mod bringup;
pub mod cache;
pub mod console;
pub mod cpu;
pub mod debug;
pub mod efi;
pub mod exceptions;
pub mod gic;
pub mod gicv;
pub mod handover;
pub mod head;
pub mod heap;
pub mod irq;
pub mod machine;
pub mod mmu;
pub mod pmu;
pub mod psci;
pub mod regs;
pub mod rtc;
pub mod stacks;
pub mod stage2;
pub mod sync;
pub mod timer;
pub mod vcpu;
pub mod vm;

use crate::println;
use alloc::string::String;
use alloc::vec::Vec;
use bringup::{PsciStarter, init_cpu_interrupts, maintenance_intid, node_of, tick_check};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use el2::BANNER;
use el2::bringup::bootargs::{self, BootArgs, SelfTest};
use el2::bringup::percpu::PerCpu;
use el2::bringup::smp::{self, MAX_CPUS};
use el2::guest::placement::OwnedRange;
use el2::memory::layout::{self, ImageLayout};
use handover::{
    BootBlob, acquire_platform, boot_blob, fail_early, print_platform, start_console, stop,
};
use platform::{Conduit, MemRange, Platform};
use spin::Once;

static PLATFORM: Once<Platform> = Once::new();

static BOOT_ARGS: Once<BootArgs> = Once::new();

static CPUS: Once<&'static [PerCpu]> = Once::new();

/// The boot-time tick check: every online CPU counts its own ticks over the
/// same window once the boot CPU says go.
static TICK_CHECK_GO: AtomicBool = AtomicBool::new(false);

static TICK_CHECK_DONE: AtomicUsize = AtomicUsize::new(0);

/// Set by the boot CPU once VMs exist: every online CPU enters the run loop.
static RUN_VMS: AtomicBool = AtomicBool::new(false);

/// Where the image runs (it is linked at 0 and relocated at boot).
pub fn image_base() -> u64 {
    boot::image::base()
}

fn image_layout() -> ImageLayout {
    let sections = boot::image::sections();
    let start = sections.start;
    let (heap_base, heap_size) = heap::range();
    ImageLayout {
        image: MemRange::new(start, sections.end - start),
        text: MemRange::new(start, sections.text_end - start),
        rodata: MemRange::new(sections.text_end, sections.rodata_end - sections.text_end),
        data: MemRange::new(sections.rodata_end, sections.bss_end - sections.rodata_end),
        thread_stacks: stacks::thread_stacks(),
        exception_stacks: stacks::exception_stacks(),
        heap: MemRange::new(heap_base, heap_size),
    }
}

/// The boot CPU's Rust entry, from `head.rs`, with the MMU off and SP_EL0 set.
pub extern "C" fn primary_main(x0: u64) -> ! {
    cpu::clear_current();
    cpu::init_el2_registers(exceptions::vector_base());
    let image = image_layout();
    // Without a readable DTB or handoff there is no console to complain on: stop.
    let Some(boot) = boot_blob(x0) else {
        psci::park()
    };
    let (platform, args, source, warnings) = read_platform(&image, &boot);
    let boot_mpidr = cpu::current_mpidr();
    let order = smp::logical_order(&platform.cpus, boot_mpidr);
    let cpu_count = order.as_ref().map_or(1, |o| o.len().min(MAX_CPUS));
    let plan = enter_final_map(&image, &boot, platform, cpu_count);
    start_console(platform, args);

    println!("{BANNER} at EL2 on {}", platform.model);
    println!("platform: {source}");
    if let Some(rtc) = platform.rtc {
        // SAFETY: the RTC is in the final map as device memory (el2::memory::layout).
        let seconds = unsafe { rtc::read_seconds(rtc.base) };
        if let Some(clock) =
            vm::set_wall_clock(u64::from(seconds), cpu::counter(), cpu::counter_frequency())
        {
            println!("{clock}");
        }
    }
    for warning in &warnings {
        log::warn!("{warning}");
    }
    print_platform(platform, &image, &boot);
    for entry in &plan {
        log::debug!(
            "map {:#014x}..{:#014x} {:?} {}",
            entry.range.base,
            entry.range.end(),
            entry.kind,
            entry.what
        );
    }
    let Some(order) = order else {
        stop(format_args!(
            "device tree node /cpus: no cpu has this CPU's MPIDR {boot_mpidr}"
        ))
    };
    let (cpus, online) = start_cpus(platform, args, &order);
    run_selftest(args);

    // Secondaries wait for this before counting ticks (or skipping that).
    TICK_CHECK_GO.store(true, Ordering::Release);
    aarch64_cpu::asm::sev();
    if args.tick_check_ms > 0 {
        tick_check(cpus, &online, args);
    }
    if args.selftest == Some(SelfTest::PanicAll) {
        panic_with_the_others();
    }
    start_vms(platform, args, &image, &boot, cpus, &online)
}

/// With the boot map on and the heap up: the platform from the boot blob
/// (stopping if its PSCI conduit cannot serve EL2), the firmware conduit,
/// and the command line; with where the description came from and the
/// warnings to log once the console works.
fn read_platform(
    image: &ImageLayout,
    boot: &BootBlob,
) -> (&'static Platform, &'static BootArgs, String, Vec<String>) {
    let boot_params = mmu::boot_map(&[
        (image.image.base, image.image.size),
        (boot.range.base, boot.range.size),
    ]);
    // SAFETY: the boot map identity-maps the whole image (code, stacks,
    // heap) and the DTB or handoff block, so everything in use stays where
    // it is.
    unsafe { boot::mmu::enable_el2(&boot_params) };
    heap::init();

    let (platform, source, mut notes) = acquire_platform(image, boot);
    if platform.psci.conduit == Conduit::Hvc {
        // An HVC from EL2 is taken at EL2: el2 would be calling itself.
        // (Not boot-tested: QEMU rewrites /psci's method to its own conduit
        // when it loads the kernel itself.)
        let described_by = if source.starts_with("ACPI") {
            "ACPI table FADT, field \"ARM_BOOT_ARCH\" (PSCI_USE_HVC)"
        } else {
            "device tree node /psci, property \"method\" (\"hvc\")"
        };
        fail_early(
            image,
            boot.range,
            platform.uart.as_ref(),
            None,
            format_args!(
                "{described_by}: PSCI through HVC is for a kernel under a hypervisor; \
                 el2 runs at EL2 and needs PSCI from EL3 firmware through SMC"
            ),
        )
    }
    let platform = PLATFORM.call_once(|| platform);
    psci::set_conduit(platform.psci.conduit);
    let (args, warnings) = bootargs::parse(&platform.bootargs);
    notes.extend(warnings);
    let args = BOOT_ARGS.call_once(|| args);
    (platform, args, source, notes)
}

/// Plans the EL2 memory map for `cpu_count` CPUs, builds its tables and
/// switches to it (stopping with a report if that cannot be done);
/// returns the plan, for the log.
fn enter_final_map(
    image: &ImageLayout,
    boot: &BootBlob,
    platform: &Platform,
    cpu_count: usize,
) -> Vec<layout::MapEntry> {
    let built = layout::el2_map_plan(image, platform, boot.range, cpu_count)
        .map_err(|e| alloc::format!("EL2 memory map: {e}"))
        .and_then(|plan| {
            let params =
                mmu::final_map(&plan).map_err(|e| alloc::format!("EL2 page tables: {e}"))?;
            Ok((plan, params))
        });
    let (plan, params) = match built {
        Ok(built) => built,
        Err(why) => fail_early(
            image,
            boot.range,
            platform.uart.as_ref(),
            Some(platform.psci.conduit),
            format_args!("{why}"),
        ),
    };
    // SAFETY: the final map keeps text, data, stacks, heap and DTB at the
    // same addresses, now with their own permissions.
    unsafe { boot::mmu::enable_el2(&params) };
    mmu::publish_for_secondaries(params);
    plan
}

/// The per-CPU table, the GIC and the timer on the boot CPU, then the
/// secondaries (PSCI CPU_ON): returns the table and the CPUs online.
fn start_cpus(
    platform: &Platform,
    args: &BootArgs,
    order: &[&platform::Cpu],
) -> (&'static [PerCpu], Vec<usize>) {
    let cpus: Vec<PerCpu> = order
        .iter()
        .take(MAX_CPUS)
        .enumerate()
        .map(|(index, c)| PerCpu::new(index, c.mpidr))
        .collect();
    let cpus = CPUS.call_once(|| cpus.leak());
    cpu::set_current(&cpus[0]);
    if order.len() > MAX_CPUS {
        log::warn!(
            "{} CPUs described; el2 drives the first {MAX_CPUS} (its stacks are \
             reserved in the image) and leaves the others off",
            order.len()
        );
    }

    // SAFETY: the distributor and redistributors are in the final map as device memory.
    if let Err(error) = unsafe { gic::init_distributor(&platform.gic) } {
        stop(format_args!("GIC distributor: {error}"));
    }
    let tick_intid = platform.timer.hyp_phys.intid();
    irq::set_tick_intid(tick_intid);
    irq::set_vtimer_intid(platform.timer.virt.intid());
    irq::set_maintenance_intid(maintenance_intid(platform));
    irq::set_pmu_intid(bringup::PMU_INTID);
    timer::set_period(cpu::counter_frequency() * u64::from(args.tick_ms) / 1000);
    if let Err(error) = init_cpu_interrupts(platform, &cpus[0]) {
        stop(format_args!("GIC on the boot CPU: {error}"));
    }
    cpus[0].mark_online();

    let mut starter = PsciStarter;
    let report = smp::bring_up(order, &mut starter);
    for (index, mpidr, why) in &report.failed {
        log::error!(
            "cpu {index} (mpidr {mpidr}, {}): {why}; left out",
            node_of(order, *index)
        );
    }
    println!("smp: {} CPUs online", report.online.len());
    (cpus, report.online)
}

/// `el2.selftest=`: the faults the boot CPU provokes itself.
fn run_selftest(args: &BootArgs) {
    match args.selftest {
        Some(SelfTest::Undef) => {
            log::info!("selftest: executing an undefined instruction at EL2");
            // SAFETY: deliberately faults; the fatal handler never returns here.
            unsafe { core::arch::asm!("udf #0") };
        }
        Some(SelfTest::StackOverflow) => {
            log::info!("selftest: overflowing the thread stack");
            let depth = overflow_stack(0);
            log::error!("selftest: stack overflow not caught (depth {depth})");
        }
        // After the tick check, on every CPU (below).
        Some(SelfTest::PanicAll) => log::info!("selftest: every CPU will panic"),
        // Its panic was in the UEFI stage, if there was one.
        Some(SelfTest::UefiPanic) => log::info!("selftest: uefi-panic applies to the UEFI stage"),
        None => {}
    }
}

/// Creates the VMs on the `online` CPUs, lets the secondaries join the
/// run loop and runs it on the boot CPU; powers off if no VM could start.
fn start_vms(
    platform: &'static Platform,
    args: &BootArgs,
    image: &ImageLayout,
    boot: &BootBlob,
    cpus: &[PerCpu],
    online: &[usize],
) -> ! {
    let hypervisor = [
        OwnedRange {
            range: image.image,
            what: "hypervisor image",
        },
        OwnedRange {
            range: boot.range,
            what: boot.what(),
        },
    ];
    let pcpus: Vec<(usize, platform::Mpidr)> = online
        .iter()
        .map(|&index| (index, cpus[index].mpidr))
        .collect();
    let created = vm::create_vms(platform, &hypervisor, &pcpus, args.fail_alloc.as_deref());
    if created == 0 {
        if platform.vms.is_empty() {
            println!("el2: no VM configured, powering off");
        } else {
            println!("el2: no VM could be started, powering off");
        }
        psci::power_off()
    }
    println!("el2: {created} VM(s) on {} pCPUs", pcpus.len());
    vm::init_pcpu_for_guests();
    RUN_VMS.store(true, Ordering::Release);
    aarch64_cpu::asm::sev();
    vm::run(0)
}

/// `el2.selftest=panic-all`: every CPU panics at about the same moment
/// (the boot CPU once the tick check is over, each secondary once it has
/// counted its ticks); exactly one report must come out.
fn panic_with_the_others() -> ! {
    let index = cpu::current().map_or(0, |c| c.index);
    panic!("selftest: panic on every CPU (this is cpu {index})")
}

/// Recurses with a 1 KiB frame until the guard page stops it (the bound is
/// far beyond any stack this image has).
#[inline(never)]
fn overflow_stack(depth: u64) -> u64 {
    let frame = core::hint::black_box([depth as u8; 1024]);
    if depth > 1 << 20 {
        return depth;
    }
    overflow_stack(depth + 1) + u64::from(frame[depth as usize % 1024])
}
