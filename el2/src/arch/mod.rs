//! Everything that only runs on AArch64 at EL2: entry, vectors, MMU, GIC,
//! timer, console and firmware calls, and the boot sequence that ties them
//! together. Decisions (memory layout, CPU order, command line) are made by
//! the portable `el2` library.

pub mod cache;
pub mod console;
pub mod cpu;
pub mod efi;
pub mod exceptions;
pub mod gic;
pub mod gicv;
pub mod head;
pub mod heap;
pub mod irq;
pub mod machine;
pub mod mmu;
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
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use el2::bootargs::{self, BootArgs, SelfTest};
use el2::efi::handoff::{self, Handoff};
use el2::guest::placement::OwnedRange;
use el2::layout::{self, ImageLayout};
use el2::percpu::PerCpu;
use el2::smp::{self, CpuStarter, MAX_CPUS};
use el2::{BANNER, FATAL_MARKER};
use platform::{Conduit, Cpu, MemRange, Platform, Uart};
use spin::Once;

/// How long a secondary CPU has to report in after CPU_ON.
const CPU_ON_TIMEOUT_MS: u32 = 2000;

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

/// FDT header magic (Devicetree Specification 5.2, "Header").
const FDT_MAGIC: u32 = 0xd00d_feed;
/// The most device tree the hypervisor accepts; real boards need < 1 MiB.
const FDT_MAX_SIZE: u32 = 64 << 20;

/// What the boot loader handed over in x0: a device tree (arm64 Image
/// protocol), or the handoff block of the image's own EFI entry
/// (`arch::efi`, `el2::efi::handoff`), told apart by their magic.
struct BootBlob {
    /// All of it: mapped read-only and kept from the VMs.
    range: MemRange,
    handoff: bool,
}

impl BootBlob {
    /// What it is, in the hypervisor's owned ranges and messages.
    fn what(&self) -> &'static str {
        if self.handoff {
            "UEFI handoff block"
        } else {
            "host device tree"
        }
    }
}

/// The blob at `x0`, from its header: the device tree's `totalsize`, or
/// the handoff block's allocated size.
///
/// Runs with the MMU off and no heap: it reads the header and nothing
/// more; `Platform::parse` or `Handoff::parse` validates the rest once the
/// heap works.
fn boot_blob(x0: u64) -> Option<BootBlob> {
    if x0 == 0 || !x0.is_multiple_of(8) {
        return None;
    }
    let words = x0 as *const u64;
    let word = |i: usize| {
        // SAFETY: the boot protocol hands us the physical address of a DTB
        // (at least its 40-byte header) or of a handoff block (at least its
        // 64-byte header, read only once the DTB magic is ruled out) in
        // RAM; aligned 8-byte reads suit memory with the MMU off.
        unsafe { words.add(i).read_volatile() }.to_le_bytes()
    };
    let first = word(0);
    let magic = u32::from_be_bytes([first[0], first[1], first[2], first[3]]);
    let size = u32::from_be_bytes([first[4], first[5], first[6], first[7]]);
    if magic == FDT_MAGIC {
        return (40..=FDT_MAX_SIZE).contains(&size).then(|| BootBlob {
            range: MemRange::new(x0, u64::from(size)),
            handoff: false,
        });
    }
    let mut header = [0u8; handoff::HEADER_LEN];
    for (i, chunk) in header.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&word(i));
    }
    handoff::probe(&header).map(|probe| BootBlob {
        range: MemRange::new(x0, probe.block_size),
        handoff: true,
    })
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
    let boot_params = mmu::boot_map(&[
        (image.image.base, image.image.size),
        (boot.range.base, boot.range.size),
    ]);
    // SAFETY: the boot map identity-maps the whole image (code, stacks,
    // heap) and the DTB or handoff block, so everything in use stays where
    // it is.
    unsafe { boot::mmu::enable_el2(&boot_params) };
    heap::init();

    let (platform, source, mut notes) = acquire_platform(&image, &boot);
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
            &image,
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
    let warnings = notes;
    let args = BOOT_ARGS.call_once(|| args);

    let boot_mpidr = cpu::current_mpidr();
    let order = smp::logical_order(&platform.cpus, boot_mpidr);
    let cpu_count = order.as_ref().map_or(1, |o| o.len().min(MAX_CPUS));
    let dtb_range = boot.range;
    let built = layout::el2_map_plan(&image, platform, dtb_range, cpu_count)
        .map_err(|e| alloc::format!("EL2 memory map: {e}"))
        .and_then(|plan| {
            let params =
                mmu::final_map(&plan).map_err(|e| alloc::format!("EL2 page tables: {e}"))?;
            Ok((plan, params))
        });
    let (plan, params) = match built {
        Ok(built) => built,
        Err(why) => fail_early(
            &image,
            dtb_range,
            platform.uart.as_ref(),
            Some(platform.psci.conduit),
            format_args!("{why}"),
        ),
    };
    // SAFETY: the final map keeps text, data, stacks, heap and DTB at the
    // same addresses, now with their own permissions.
    unsafe { boot::mmu::enable_el2(&params) };
    mmu::publish_for_secondaries(params);
    start_console(platform, args);

    println!("{BANNER} at EL2 on {}", platform.model);
    println!("platform: {source}");
    if let Some(rtc) = platform.rtc {
        // SAFETY: the RTC is in the final map as device memory (el2::layout).
        let seconds = unsafe { rtc::read_seconds(rtc.base) };
        vm::set_wall_clock(u64::from(seconds), cpu::counter(), cpu::counter_frequency());
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
    timer::set_period(cpu::counter_frequency() * u64::from(args.tick_ms) / 1000);
    if let Err(error) = init_cpu_interrupts(platform, &cpus[0]) {
        stop(format_args!("GIC on the boot CPU: {error}"));
    }
    cpus[0].mark_online();

    let mut starter = PsciStarter;
    let report = smp::bring_up(&order, &mut starter);
    for (index, mpidr, why) in &report.failed {
        log::error!(
            "cpu {index} (mpidr {mpidr}, {}): {why}; left out",
            node_of(&order, *index)
        );
    }
    println!("smp: {} CPUs online", report.online.len());

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

    // Secondaries wait for this before counting ticks (or skipping that).
    TICK_CHECK_GO.store(true, Ordering::Release);
    aarch64_cpu::asm::sev();
    if args.tick_check_ms > 0 {
        tick_check(cpus, &report.online, args);
    }
    if args.selftest == Some(SelfTest::PanicAll) {
        panic_with_the_others();
    }

    let hypervisor = [
        OwnedRange {
            range: image.image,
            what: "hypervisor image",
        },
        OwnedRange {
            range: dtb_range,
            what: boot.what(),
        },
    ];
    let pcpus: Vec<(usize, platform::Mpidr)> = report
        .online
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

/// The platform from what the boot loader handed over, a line saying
/// where it came from, and warnings to log once the console works. Stops
/// the machine (with a report on the console, when one can be found) if
/// the description cannot be used.
fn acquire_platform(image: &ImageLayout, boot: &BootBlob) -> (Platform, String, Vec<String>) {
    // SAFETY: `boot_blob` checked the header; the boot map covers the
    // whole blob and nothing writes it.
    let bytes: &'static [u8] = unsafe {
        core::slice::from_raw_parts(boot.range.base as *const u8, boot.range.size as usize)
    };
    if !boot.handoff {
        return match Platform::parse(bytes) {
            Ok(platform) => (platform, String::from("device tree"), Vec::new()),
            Err(error) => {
                let rescue = platform::rescue(bytes);
                fail_early(
                    image,
                    boot.range,
                    rescue.console.as_ref(),
                    rescue.psci_conduit,
                    format_args!("cannot use the boot device tree: {error}"),
                )
            }
        };
    }
    // Nothing in a corrupt handoff block can be trusted to find a console.
    let Ok(handoff) = Handoff::parse(bytes, boot.range.base) else {
        psci::park()
    };
    let mut notes = Vec::new();
    if handoff.ram_truncated() {
        notes.push(String::from(
            "UEFI handoff: the EFI entry had to leave some RAM banks out",
        ));
    }
    if handoff.unknown_records() > 0 {
        notes.push(alloc::format!(
            "UEFI handoff: {} record(s) of unknown kinds skipped",
            handoff.unknown_records()
        ));
    }
    let ram = handoff.ram();
    let reserved = handoff.reserved();
    let tables = handoff.acpi_tables();
    let description = handoff.vm_description();
    if !tables.is_empty() {
        return match Platform::from_acpi(&tables, &ram, &reserved, description) {
            Ok(platform) => {
                let source = alloc::format!(
                    "ACPI tables ({}) and UEFI memory map from the UEFI handoff block",
                    tables.len()
                );
                (platform, source, notes)
            }
            Err(error) => {
                let rescue = platform::acpi::rescue(&tables);
                fail_early(
                    image,
                    boot.range,
                    rescue.console.as_ref(),
                    rescue.psci_conduit,
                    format_args!("cannot use the firmware's ACPI tables: {error}"),
                )
            }
        };
    }
    let Some(dtb) = handoff.firmware_dtb() else {
        psci::park()
    };
    let mut platform = match Platform::parse(dtb) {
        Ok(platform) => platform,
        Err(error) => {
            let rescue = platform::rescue(dtb);
            fail_early(
                image,
                boot.range,
                rescue.console.as_ref(),
                rescue.psci_conduit,
                format_args!("cannot use the firmware's device tree: {error}"),
            )
        }
    };
    // Under UEFI the memory map, not the tree's /memory, says what RAM is
    // free (the firmware keeps some for itself); the tree's reserved
    // regions stay reserved too.
    platform.memory = ram;
    platform.reserved.splice(0..0, reserved);
    if let Some(description) = description {
        match platform::vms_from_dt(description) {
            Ok((bootargs, vms)) => {
                platform.bootargs = bootargs;
                platform.vms = vms;
            }
            Err(error) => fail_early(
                image,
                boot.range,
                platform.uart.as_ref(),
                Some(platform.psci.conduit),
                format_args!("cannot use the UEFI VM description: {error}"),
            ),
        }
    }
    let source =
        String::from("firmware device tree and UEFI memory map from the UEFI handoff block");
    (platform, source, notes)
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

fn node_of<'a>(order: &[&'a Cpu], index: usize) -> &'a str {
    order.get(index).map_or("?", |c| c.node.as_str())
}

/// Secondary CPUs' Rust entry, from `head.rs`, with the final map on.
pub extern "C" fn secondary_main(index: usize) -> ! {
    cpu::clear_current();
    cpu::init_el2_registers(exceptions::vector_base());
    let (Some(cpus), Some(platform)) = (CPUS.get(), PLATFORM.get()) else {
        psci::park()
    };
    let Some(this) = cpus.get(index) else {
        psci::park()
    };
    cpu::set_current(this);
    if this.mpidr != cpu::current_mpidr() {
        log::error!(
            "started as cpu {index} but MPIDR is {}",
            cpu::current_mpidr()
        );
        psci::park();
    }
    if let Err(error) = init_cpu_interrupts(platform, this) {
        log::error!("GIC: {error}");
        psci::park();
    }
    this.mark_online();
    log::debug!("online");

    sleep_until_set(&TICK_CHECK_GO);
    if let Some(args) = BOOT_ARGS.get()
        && args.tick_check_ms > 0
    {
        count_ticks(args.tick_check_ms);
    }
    TICK_CHECK_DONE.fetch_add(1, Ordering::AcqRel);
    if BOOT_ARGS
        .get()
        .is_some_and(|args| args.selftest == Some(SelfTest::PanicAll))
    {
        panic_with_the_others();
    }
    // Either the boot CPU starts VMs, or it powers the machine off.
    sleep_until_set(&RUN_VMS);
    vm::init_pcpu_for_guests();
    vm::run(index)
}

/// Waits, asleep, until the boot CPU sets `flag`: WFI with interrupts
/// masked and the EL2 timer as a 1 ms alarm clock (a pending interrupt
/// ends a WFI whatever PSTATE.I says, Arm ARM D1.6.2 "Wait for
/// Interrupt"; stopping the timer lowers its level-sensitive PPI again).
/// A WFE loop woken by the boot CPU's SEV would do on hardware, but QEMU's
/// TCG treats WFE as a mere yield: with 64 CPUs spinning on 2 host cores,
/// the CPU being started got too little time to report within
/// `CPU_ON_TIMEOUT_MS`.
fn sleep_until_set(flag: &AtomicBool) {
    let nap = cpu::counter_frequency() / 1000;
    while !flag.load(Ordering::Acquire) {
        timer::arm_at(cpu::counter() + nap);
        aarch64_cpu::asm::wfi();
        timer::stop();
    }
}

fn init_cpu_interrupts(platform: &Platform, this: &PerCpu) -> Result<(), &'static str> {
    // SAFETY: every redistributor region is in the final map as device
    // memory, and this runs on the CPU whose MPIDR is `this.mpidr`.
    let interface = unsafe { gic::init_cpu(&platform.gic, this.mpidr) }?;
    interface.enable_ppi_level(platform.timer.hyp_phys.intid());
    // The running guest's virtual timer and the virtual CPU interface's
    // maintenance interrupt both exit the guest to EL2 (HCR_EL2.IMO).
    interface.enable_ppi_level(platform.timer.virt.intid());
    interface.enable_ppi_level(maintenance_intid(platform));
    interface.enable_sgi(u32::from(irq::RESCHEDULE_SGI));
    interface.enable_sgi(u32::from(irq::STOP_SGI));
    Ok(())
}

/// Sends the stop SGI to every other online CPU (the fatal-error path).
/// A CPU running a guest exits to EL2 and parks in the IRQ handler; an
/// idle one parks at its next interrupt. A CPU spinning at EL2 with
/// interrupts masked does not stop, but the power-off that follows the
/// report stops the machine.
pub fn stop_other_cpus() {
    let Some(cpus) = CPUS.get() else {
        return;
    };
    let this = cpu::current().map(|c| c.index);
    for other in cpus.iter() {
        if Some(other.index) != this && other.is_online() {
            gic::send_sgi(other.mpidr, irq::STOP_SGI);
        }
    }
}

/// The maintenance interrupt's INTID: the GIC node's `interrupts`, else
/// PPI 9 (INTID 25), the Server Base System Architecture's assignment that
/// QEMU `virt` and the Kunpeng boards follow.
fn maintenance_intid(platform: &Platform) -> u32 {
    const SBSA_MAINTENANCE_INTID: u32 = 25;
    platform
        .gic
        .maintenance_irq
        .map_or(SBSA_MAINTENANCE_INTID, |irq| irq.intid())
}

/// Counts this CPU's ticks for `window_ms` with interrupts unmasked.
fn count_ticks(window_ms: u32) {
    let window = cpu::counter_frequency() * u64::from(window_ms) / 1000;
    let end = cpu::counter() + window;
    timer::start();
    // SAFETY: unmasking IRQs at EL2 only lets the tick handler run between
    // instructions of this loop; it touches nothing this code holds.
    unsafe { core::arch::asm!("msr daifclr, #2", options(nomem, nostack)) };
    while cpu::counter() < end {
        aarch64_cpu::asm::wfi();
    }
    // SAFETY: as above; masks them again.
    unsafe { core::arch::asm!("msr daifset, #2", options(nomem, nostack)) };
    timer::stop();
}

fn tick_check(cpus: &[PerCpu], online: &[usize], args: &BootArgs) {
    count_ticks(args.tick_check_ms);
    // The others started at about the same time; allow them the window again
    // plus the CPU_ON timeout before declaring one stuck.
    let deadline = cpu::counter()
        + cpu::counter_frequency() * u64::from(args.tick_check_ms + CPU_ON_TIMEOUT_MS) / 1000;
    while TICK_CHECK_DONE.load(Ordering::Acquire) + 1 < online.len() && cpu::counter() < deadline {
        core::hint::spin_loop();
    }
    let expected = args.tick_check_ms / args.tick_ms;
    for &index in online {
        let cpu = &cpus[index];
        println!(
            "tick: cpu {index} mpidr {}: {} ticks in {} ms (expected {expected})",
            cpu.mpidr,
            cpu.ticks(),
            args.tick_check_ms
        );
        if cpu.other_irqs() > 0 {
            log::warn!("cpu {index}: {} unexpected interrupts", cpu.other_irqs());
        }
    }
}

/// Starts secondaries with PSCI CPU_ON at `head::secondary_entry`.
struct PsciStarter;

impl CpuStarter for PsciStarter {
    fn start(&mut self, index: usize, cpu: &Cpu) -> Result<(), i32> {
        let entry = head::secondary_entry as *const () as u64;
        psci::cpu_on(cpu.mpidr.value(), entry, index as u64)
    }

    fn wait_online(&mut self, index: usize) -> bool {
        let Some(cpus) = CPUS.get() else {
            return false;
        };
        let deadline =
            cpu::counter() + cpu::counter_frequency() * u64::from(CPU_ON_TIMEOUT_MS) / 1000;
        while cpu::counter() < deadline {
            if cpus[index].is_online() {
                return true;
            }
            core::hint::spin_loop();
        }
        cpus[index].is_online()
    }

    fn timeout_ms(&self) -> u32 {
        CPU_ON_TIMEOUT_MS
    }
}

fn start_console(platform: &Platform, args: &BootArgs) {
    if let Some(uart) = &platform.uart {
        // SAFETY: the UART is in the current map as device memory and the
        // hypervisor is its only user.
        unsafe { console::init(uart.range.base) };
    }
    console::init_logger(args.log_level);
}

fn print_platform(platform: &Platform, image: &ImageLayout, boot: &BootBlob) {
    let frequency = cpu::counter_frequency();
    println!(
        "platform: {} CPUs, {} memory bank(s), counter {}.{:03} MHz",
        platform.cpus.len(),
        platform.memory.len(),
        frequency / 1_000_000,
        (frequency / 1000) % 1000
    );
    for bank in &platform.memory {
        println!(
            "  memory   {:#014x}..{:#014x} ({} MiB)",
            bank.base,
            bank.end(),
            bank.size >> 20
        );
    }
    for region in &platform.reserved {
        println!(
            "  reserved {:#014x}..{:#014x} {}",
            region.range.base,
            region.range.end(),
            region.name
        );
    }
    println!(
        "  image    {:#014x}..{:#014x}  {} {:#014x}..{:#014x}",
        image.image.base,
        image.image.end(),
        if boot.handoff { "handoff" } else { "dtb" },
        boot.range.base,
        boot.range.end()
    );
    println!(
        "  GICv3    distributor {:#x}, {} redistributor region(s), maintenance IRQ {:?}",
        platform.gic.distributor.base,
        platform.gic.redistributor_regions.len(),
        platform.gic.maintenance_irq.map(|i| i.intid())
    );
    for region in &platform.gic.redistributor_regions {
        println!(
            "           redistributors {:#x}..{:#x} stride {:#x}",
            region.range.base,
            region.range.end(),
            region.stride.unwrap_or(0)
        );
    }
    if let Some(uart) = &platform.uart {
        println!("  console  PL011 at {:#x} ({})", uart.range.base, uart.node);
    }
    let t = &platform.timer;
    println!(
        "  timer    PPIs: EL1 phys {}, virt {}, EL2 phys {}{}",
        t.nonsecure_phys.intid(),
        t.virt.intid(),
        t.hyp_phys.intid(),
        t.hyp_virt
            .map_or(alloc::string::String::new(), |v| alloc::format!(
                ", EL2 virt {}",
                v.intid()
            ))
    );
    println!(
        "  PSCI     {}.{} via {:?}",
        platform.psci.version.0, platform.psci.version.1, platform.psci.conduit
    );
}

/// Reports a fatal configuration error on the (running) console and powers off.
fn stop(what: core::fmt::Arguments) -> ! {
    exceptions::begin_fatal();
    println!("*** {FATAL_MARKER}: {what} ***");
    psci::power_off()
}

/// Stops before the final map is active: maps just the image, the DTB and
/// the console UART (when one is known), reports `what` there and powers
/// off through `conduit` (when known).
fn fail_early(
    image: &ImageLayout,
    dtb: MemRange,
    uart: Option<&Uart>,
    conduit: Option<Conduit>,
    what: core::fmt::Arguments,
) -> ! {
    if let Some(uart) = uart
        && let Ok(params) = mmu::final_map(&layout::emergency_map_plan(image, dtb, uart.range))
    {
        // SAFETY: the emergency map keeps the whole image and the DTB
        // where they are.
        unsafe { boot::mmu::enable_el2(&params) };
        // SAFETY: just mapped as device memory; nothing else uses it.
        unsafe { console::init(uart.range.base) };
        println!("{BANNER}");
        println!("*** {FATAL_MARKER}: {what} ***");
    }
    if let Some(conduit) = conduit {
        psci::set_conduit(conduit);
    }
    psci::power_off()
}
