//! What the boot loader handed over, read and checked: the blob at x0 (a
//! device tree, or the handoff block of the image's own EFI entry), the
//! platform parsed from it, the console, and the two ways of stopping when
//! the description cannot be used (before and after the final map).

use super::{console, cpu, exceptions, mmu, psci};
use crate::println;
use alloc::string::String;
use alloc::vec::Vec;
use el2::bringup::bootargs::BootArgs;
use el2::bringup::efi::handoff::{self, Handoff};
use el2::memory::layout::{self, ImageLayout};
use el2::{BANNER, FATAL_MARKER};
use platform::{Conduit, MemRange, Platform, Uart};

/// The most device tree the hypervisor accepts; real boards need < 1 MiB.
const FDT_MAX_SIZE: u32 = 64 << 20;

/// What the boot loader handed over in x0: a device tree (arm64 Image
/// protocol), or the handoff block of the image's own EFI entry
/// (`arch::efi`, `el2::bringup::efi::handoff`), told apart by their magic.
pub(super) struct BootBlob {
    /// All of it: mapped read-only and kept from the VMs.
    pub(super) range: MemRange,
    pub(super) handoff: bool,
}

impl BootBlob {
    /// What it is, in the hypervisor's owned ranges and messages.
    pub(super) fn what(&self) -> &'static str {
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
pub(super) fn boot_blob(x0: u64) -> Option<BootBlob> {
    if x0 == 0 || !x0.is_multiple_of(8) {
        return None;
    }
    // SAFETY: the boot protocol hands us the physical address of a DTB
    // (at least its 40-byte header) or of a handoff block (at least its
    // 64-byte header) in RAM; aligned loads suit memory with the MMU off.
    if let Some(size) = unsafe { boot::handover::read_fdt_total_size(x0, FDT_MAX_SIZE) } {
        return Some(BootBlob {
            range: MemRange::new(x0, u64::from(size)),
            handoff: false,
        });
    }
    let words = x0 as *const u64;
    let word = |i: usize| {
        // SAFETY: as above: the DTB magic is ruled out, so this is the
        // handoff block's header, at least 64 bytes; aligned 8-byte reads.
        unsafe { words.add(i).read_volatile() }.to_le_bytes()
    };
    let mut header = [0u8; handoff::HEADER_LEN];
    for (i, chunk) in header.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&word(i));
    }
    handoff::probe(&header).map(|probe| BootBlob {
        range: MemRange::new(x0, probe.block_size),
        handoff: true,
    })
}

/// The platform from what the boot loader handed over, a line saying
/// where it came from, and warnings to log once the console works. Stops
/// the machine (with a report on the console, when one can be found) if
/// the description cannot be used.
pub(super) fn acquire_platform(
    image: &ImageLayout,
    boot: &BootBlob,
) -> (Platform, String, Vec<String>) {
    // SAFETY: `boot_blob` checked the header; the boot map covers the
    // whole blob and nothing writes it.
    let bytes: &'static [u8] = unsafe {
        core::slice::from_raw_parts(boot.range.base as *const u8, boot.range.size as usize)
    };
    if !boot.handoff {
        return match Platform::parse(bytes) {
            Ok(platform) => (platform, String::from("device tree"), Vec::new()),
            Err(error) => fail_rescued(
                image,
                boot,
                platform::rescue(bytes),
                format_args!("cannot use the boot device tree: {error}"),
            ),
        };
    }
    platform_from_handoff(image, boot, bytes)
}

/// The platform the UEFI handoff block describes: the firmware's ACPI
/// tables if it has any, else its device tree, with the UEFI memory map.
fn platform_from_handoff(
    image: &ImageLayout,
    boot: &BootBlob,
    bytes: &'static [u8],
) -> (Platform, String, Vec<String>) {
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
            Err(error) => fail_rescued(
                image,
                boot,
                platform::acpi::rescue(&tables),
                format_args!("cannot use the firmware's ACPI tables: {error}"),
            ),
        };
    }
    let Some(dtb) = handoff.firmware_dtb() else {
        psci::park()
    };
    let platform = platform_from_firmware_dt(image, boot, dtb, ram, reserved, description);
    let source =
        String::from("firmware device tree and UEFI memory map from the UEFI handoff block");
    (platform, source, notes)
}

/// The firmware's device tree, with the UEFI memory map for RAM and the
/// VM description from the handoff block.
fn platform_from_firmware_dt(
    image: &ImageLayout,
    boot: &BootBlob,
    dtb: &[u8],
    ram: Vec<MemRange>,
    reserved: Vec<platform::ReservedRegion>,
    description: Option<&[u8]>,
) -> Platform {
    let mut platform = match Platform::parse(dtb) {
        Ok(platform) => platform,
        Err(error) => fail_rescued(
            image,
            boot,
            platform::rescue(dtb),
            format_args!("cannot use the firmware's device tree: {error}"),
        ),
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
    platform
}

/// [`fail_early`] with what a description that failed to parse still
/// says about the console and the PSCI conduit.
fn fail_rescued(
    image: &ImageLayout,
    boot: &BootBlob,
    rescue: platform::Rescue,
    what: core::fmt::Arguments,
) -> ! {
    fail_early(
        image,
        boot.range,
        rescue.console.as_ref(),
        rescue.psci_conduit,
        what,
    )
}

pub(super) fn start_console(platform: &Platform, args: &BootArgs) {
    if let Some(uart) = &platform.uart {
        // SAFETY: the UART is in the current map as device memory and the
        // hypervisor is its only user.
        unsafe { console::init(uart.range.base) };
    }
    console::init_logger(args.log_level);
}

pub(super) fn print_platform(platform: &Platform, image: &ImageLayout, boot: &BootBlob) {
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
pub(super) fn stop(what: core::fmt::Arguments) -> ! {
    exceptions::begin_fatal();
    println!("*** {FATAL_MARKER}: {what} ***");
    psci::power_off()
}

/// Stops before the final map is active: maps just the image, the DTB and
/// the console UART (when one is known), reports `what` there and powers
/// off through `conduit` (when known).
pub(super) fn fail_early(
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
