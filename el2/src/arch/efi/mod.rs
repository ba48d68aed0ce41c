//! The EFI entry: what the image does when UEFI firmware starts it as an
//! application (`\EFI\BOOT\BOOTAA64.EFI`), up to the ordinary boot.
//!
//! `head.rs` relocates the image and calls [`efi_main`] on the firmware's
//! stack, with the firmware's MMU (an identity map) and caches on. While
//! boot services exist it:
//!
//! 1. copies `.data` aside (the ordinary boot must find it as the image
//!    had it) and starts the heap, which everything below uses;
//! 2. finds the ACPI 2.0 RSDP and the firmware's device tree in the
//!    configuration table (UEFI 2.10 section 4.6) and every ACPI table
//!    the RSDP leads to (`el2::bringup::efi::acpi`);
//! 3. reads the VM description `\EFI\pvlock\vms.dtb` from the partition it
//!    was loaded from (`EFI_LOADED_IMAGE_PROTOCOL.DeviceHandle`, then
//!    `EFI_SIMPLE_FILE_SYSTEM_PROTOCOL`), loads every payload file it
//!    names into `EfiLoaderData` pages and rebuilds it with their
//!    addresses (`el2::bringup::efi::vmdesc`); non-empty load options replace its
//!    `/chosen/bootargs`;
//! 4. writes the handoff block (`el2::bringup::efi::handoff`): ACPI tables, device
//!    trees and, after ExitBootServices(), the RAM and reserved ranges of
//!    the very memory map the exit used (`el2::bringup::efi::memmap`).
//!
//! Anything that goes wrong before the exit is printed on the firmware's
//! console, naming the file (and node and property), every page allocated
//! is given back and the error status goes back to the firmware. After the
//! exit nothing can fail: the handoff block was sized for the largest map
//! the buffer can hold. `head::efi_handover` then leaves the firmware's
//! translation regime and enters `primary_entry` with x0 = the block.
//!
//! Payloads need no particular alignment: the hypervisor copies each
//! kernel and initrd into its VM's memory (`el2::guest::layout`), and only
//! checks that they lie in RAM apart from everything else
//! (`el2::guest::placement`), which separate page allocations are.

mod api;

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use aarch64_cpu::registers::{CurrentEL, DAIF};
use api::{Firmware, Handle, LOADER_DATA, SystemTable};
use core::sync::atomic::{AtomicUsize, Ordering};
use el2::bringup::efi::acpi::{self, PhysMemory};
use el2::bringup::efi::handoff::{self, Kind, Writer};
use el2::bringup::efi::memmap::{self, MIN_DESCRIPTOR_SIZE};
use el2::bringup::efi::vmdesc::{self, Loaded, VmDescription};
use el2::bringup::efi::{self as efi, Status, text};
use platform::MemRange;
use tock_registers::interfaces::{Readable, Writeable};

use super::{cache, head, heap};

/// Prints one line on the firmware's console.
macro_rules! say {
    ($fw:expr, $($arg:tt)*) => {
        $fw.print(format_args!("el2: UEFI: {}\n", format_args!($($arg)*)))
    };
}

/// The largest firmware device tree copied.
const MAX_DTB_LEN: usize = 16 << 20;
/// FDT magic and header size (Devicetree Specification 0.4, 5.2).
use boot::handover::FDT_MAGIC;
const FDT_HEADER_LEN: usize = boot::handover::FDT_HEADER_SIZE as usize;

unsafe extern "C" {
    static __data_start: u8;
    static __data_end: u8;
}

/// The image's `.data` section, where it runs.
fn data_section() -> MemRange {
    let start = (&raw const __data_start) as u64;
    let end = (&raw const __data_end) as u64;
    MemRange::new(start, end - start)
}

/// While the UEFI stage runs with boot services: the image handle and the
/// system table, for a panic to be reported on the firmware's console
/// ([`report_panic`]); 0 otherwise.
static PANIC_IMAGE: AtomicUsize = AtomicUsize::new(0);
static PANIC_SYSTEM_TABLE: AtomicUsize = AtomicUsize::new(0);

/// Called by the panic handler first: during the UEFI stage (before
/// ExitBootServices), prints the panic on the firmware's console and ends
/// the image with `EFI_ABORTED`, so the firmware's boot manager goes on
/// instead of the machine hanging with no console set up. Returns at any
/// other time.
pub fn report_panic(info: &core::panic::PanicInfo) {
    let table = PANIC_SYSTEM_TABLE.swap(0, Ordering::AcqRel);
    if table == 0 {
        return;
    }
    let image = PANIC_IMAGE.load(Ordering::Acquire) as Handle;
    // SAFETY: both were stored by `efi_main` from the entry point's
    // arguments and are cleared before boot services end, so boot services
    // still exist; the swap above lets only one panic use them.
    let Some(fw) = (unsafe { Firmware::new(image, table as *const SystemTable) }) else {
        return;
    };
    fw.print(format_args!(
        "*** {}: panic in the UEFI stage: {info} ***\n",
        el2::FATAL_MARKER
    ));
    fw.exit(Status::ABORTED)
}

/// The PE/COFF entry's Rust half (see the module docs); returns an
/// `EFI_STATUS` to the firmware, or never returns.
pub extern "C" fn efi_main(image: Handle, system_table: *const SystemTable) -> usize {
    // SAFETY: head.rs passes on what the firmware gave the entry point.
    let Some(fw) = (unsafe { Firmware::new(image, system_table) }) else {
        return Status::INVALID_PARAMETER.0;
    };
    PANIC_IMAGE.store(image as usize, Ordering::Release);
    PANIC_SYSTEM_TABLE.store(system_table as usize, Ordering::Release);
    fw.print(format_args!("{} (UEFI entry)\n", el2::BANNER));
    // The ordinary boot parks a CPU that is not at EL2; say so while the
    // firmware's console still works.
    let el = CurrentEL.read(CurrentEL::EL);
    if el != 2 {
        say!(
            fw,
            "error: the firmware started this image at EL{el}; the hypervisor needs EL2 \
             (on QEMU: -machine virtualization=on)"
        );
        return Status::UNSUPPORTED.0;
    }
    // Before the heap (or anything else) writes to .data.
    let data = data_section();
    let data_copy = match fw.allocate_pages(LOADER_DATA, efi::pages_for(data.size)) {
        Ok(address) => address,
        Err(status) => {
            say!(fw, "error: cannot allocate {} bytes: {status}", data.size);
            return status.0;
        }
    };
    // SAFETY: `data` is this image's .data; `data_copy` is a fresh
    // allocation of the same size; they do not overlap.
    unsafe { copy_physical(data.base, data_copy, data.size) };
    heap::init();
    let mut pages = Pages::default();
    pages.add(data_copy, data.size);

    let status = match prepare(&fw, &mut pages) {
        Ok(ready) => hand_over(fw, ready, data_copy),
        Err(status) => {
            pages.release(&fw);
            status
        }
    };
    PANIC_SYSTEM_TABLE.store(0, Ordering::Release);
    status.0
}

/// Copies `len` bytes of physical memory from `from` to `to`.
///
/// # Safety
/// Both ranges must be memory this image owns (its own, or pages it
/// allocated), reached through the firmware's identity map, and must not
/// overlap.
unsafe fn copy_physical(from: u64, to: u64, len: u64) {
    // SAFETY: as the caller guarantees.
    unsafe { core::ptr::copy_nonoverlapping(from as *const u8, to as *mut u8, len as usize) };
}

/// Pages allocated so far, given back if the boot fails.
#[derive(Default)]
struct Pages(Vec<(u64, u64)>);

impl Pages {
    fn add(&mut self, address: u64, bytes: u64) {
        self.0.push((address, efi::pages_for(bytes)));
    }

    fn release(self, fw: &Firmware) {
        for (address, pages) in self.0 {
            fw.free_pages(address, pages);
        }
    }
}

/// Everything ready for ExitBootServices().
struct Ready {
    handoff: HandoffBlock,
    payloads: Vec<MemRange>,
}

/// The handoff block before the exit: every record but the memory
/// map's, written.
struct HandoffBlock {
    writer: Writer<'static>,
    /// The block's pages.
    block: MemRange,
    /// The buffer ExitBootServices() gets the final memory map in.
    map: Vec<u8>,
}

/// Physical memory the firmware's memory map describes, read through its
/// identity map.
struct FirmwareMemory {
    /// Sorted, merged ranges of every descriptor that is memory (not
    /// MMIO), whatever its type.
    ranges: Vec<MemRange>,
}

impl FirmwareMemory {
    fn from_map(map: &[u8], descriptor_size: usize) -> Self {
        let mut ranges: Vec<MemRange> = memmap::descriptors(map, descriptor_size)
            .filter(|d| {
                !matches!(
                    d.kind,
                    memmap::kind::MMIO | memmap::kind::MMIO_PORT_SPACE | memmap::kind::UNACCEPTED
                )
            })
            .filter_map(|d| d.range())
            .collect();
        ranges.sort_unstable_by_key(|r| r.base);
        let mut merged: Vec<MemRange> = Vec::new();
        for r in ranges {
            match merged.last_mut() {
                Some(last) if r.base <= last.end() => {
                    last.size = last.end().max(r.end()) - last.base;
                }
                _ => merged.push(r),
            }
        }
        Self { ranges: merged }
    }
}

impl PhysMemory for FirmwareMemory {
    fn read(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let end = addr.checked_add(len as u64)?;
        self.ranges
            .iter()
            .any(|r| r.base <= addr && end <= r.end())
            // SAFETY: inside memory the firmware's map describes, which it
            // maps one to one while boot services run; nothing writes the
            // firmware's tables while this image runs.
            .then(|| unsafe { api::physical_bytes(addr, len) })
    }
}

/// Steps 2 to 4 of the module docs, up to ExitBootServices().
fn prepare(fw: &Firmware, pages: &mut Pages) -> Result<Ready, Status> {
    let image = loaded_image(fw)?;
    let memory = firmware_memory(fw)?;
    let tables = firmware_tables(fw, &memory)?;
    let vms = load_vms(fw, &image, pages)?;
    uefi_panic_selftest(&vms.description);
    let handoff = write_handoff_block(fw, pages, &tables, &vms.description)?;
    Ok(Ready {
        handoff,
        payloads: vms.payloads,
    })
}

/// What the firmware says about this image (EFI_LOADED_IMAGE_PROTOCOL).
fn loaded_image(fw: &Firmware) -> Result<api::ImageInfo, Status> {
    let image = fw.loaded_image().inspect_err(|status| {
        say!(
            fw,
            "error: no EFI_LOADED_IMAGE_PROTOCOL for this image: {status}"
        );
    })?;
    say!(
        fw,
        "image at {:#x}..{:#x}",
        image.base,
        image.base + image.size
    );
    Ok(image)
}

/// The size of the memory map and of its descriptors now
/// (`GetMemoryMap()` with no buffer).
fn memory_map_size(fw: &Firmware) -> Result<(usize, usize), Status> {
    fw.memory_map_size().inspect_err(|status| {
        say!(fw, "error: GetMemoryMap() failed: {status}");
    })
}

/// The memory map now, to read firmware tables only where there is memory.
fn firmware_memory(fw: &Firmware) -> Result<FirmwareMemory, Status> {
    let (map_size, descriptor_size) = memory_map_size(fw)?;
    if descriptor_size < MIN_DESCRIPTOR_SIZE {
        say!(
            fw,
            "error: GetMemoryMap() reports {descriptor_size}-byte descriptors, fewer than the {MIN_DESCRIPTOR_SIZE} of EFI_MEMORY_DESCRIPTOR"
        );
        return Err(Status::UNSUPPORTED);
    }
    let mut map = vec![0u8; map_size + 8 * descriptor_size];
    let info = fw.memory_map(&mut map).inspect_err(|status| {
        say!(fw, "error: GetMemoryMap() failed: {status}");
    })?;
    if info.descriptor_version != memmap::DESCRIPTOR_VERSION {
        say!(
            fw,
            "warning: memory descriptors of version {}, expected {}",
            info.descriptor_version,
            memmap::DESCRIPTOR_VERSION
        );
    }
    Ok(FirmwareMemory::from_map(
        &map[..info.size.min(map.len())],
        descriptor_size,
    ))
}

/// What describes the machine: the firmware's ACPI tables, its device
/// tree, or both; at least one of them.
struct FirmwareTables<'m> {
    acpi: Vec<acpi::Table<'m>>,
    dtb: Option<&'m [u8]>,
}

/// ACPI and the device tree, from the configuration table (UEFI 2.10
/// section 4.6). Either may be broken if the other is usable.
fn firmware_tables<'m>(
    fw: &Firmware,
    memory: &'m FirmwareMemory,
) -> Result<FirmwareTables<'m>, Status> {
    let rsdp = fw.configuration_table(&efi::ACPI_20_TABLE_GUID);
    let dtb_address = fw.configuration_table(&efi::DTB_TABLE_GUID);
    let acpi = match rsdp {
        Some(address) => read_acpi_tables(fw, memory, address, dtb_address.is_some())?,
        None => Vec::new(),
    };
    let dtb = match dtb_address {
        Some(address) => read_firmware_dtb(fw, memory, address, !acpi.is_empty())?,
        None => None,
    };
    if acpi.is_empty() && dtb.is_none() {
        say!(
            fw,
            "error: the firmware installed neither ACPI 2.0 tables ({}) nor a device tree ({}): nothing describes the machine",
            efi::ACPI_20_TABLE_GUID,
            efi::DTB_TABLE_GUID
        );
        return Err(Status::UNSUPPORTED);
    }
    say!(
        fw,
        "{} ACPI tables{}, {}",
        acpi.len(),
        rsdp.map_or(String::new(), |a| format!(" from the RSDP at {a:#x}")),
        match (dtb, dtb_address) {
            (Some(d), Some(a)) => format!("device tree at {a:#x} ({} bytes)", d.len()),
            _ => String::from("no device tree"),
        }
    );
    Ok(FirmwareTables { acpi, dtb })
}

/// The ACPI tables the RSDP at `rsdp` leads to. Unusable tables are an
/// error unless the firmware also installed a device tree
/// (`dtb_installed`), which is then used instead.
fn read_acpi_tables<'m>(
    fw: &Firmware,
    memory: &'m FirmwareMemory,
    rsdp: u64,
    dtb_installed: bool,
) -> Result<Vec<acpi::Table<'m>>, Status> {
    match acpi::tables(memory, rsdp) {
        Ok(found) => {
            for warning in &found.warnings {
                say!(fw, "warning: {warning}");
            }
            Ok(found.tables)
        }
        Err(error) if dtb_installed => {
            say!(fw, "warning: {error}; using the device tree instead");
            Ok(Vec::new())
        }
        Err(error) => {
            say!(fw, "error: {error}");
            Err(Status::LOAD_ERROR)
        }
    }
}

/// The device tree the firmware installed at `address`. An unusable one
/// is an error unless ACPI tables were found (`acpi_found`), and is then
/// not used.
fn read_firmware_dtb<'m>(
    fw: &Firmware,
    memory: &'m FirmwareMemory,
    address: u64,
    acpi_found: bool,
) -> Result<Option<&'m [u8]>, Status> {
    match firmware_dtb(memory, address) {
        Ok(dtb) => Ok(Some(dtb)),
        Err(why) if acpi_found => {
            say!(
                fw,
                "warning: firmware device tree at {address:#x}: {why}; not used"
            );
            Ok(None)
        }
        Err(why) => {
            say!(fw, "error: firmware device tree at {address:#x}: {why}");
            Err(Status::LOAD_ERROR)
        }
    }
}

/// The VMs to run: the VM description as the hypervisor reads it, and
/// where the payloads it names were loaded.
struct Vms {
    description: Vec<u8>,
    payloads: Vec<MemRange>,
}

/// The VM description and its payloads: reads [`vmdesc::PATH`] from the
/// partition this image was loaded from, loads every file it names and
/// rebuilds it with their addresses and the load options' command line.
fn load_vms(fw: &Firmware, image: &api::ImageInfo, pages: &mut Pages) -> Result<Vms, Status> {
    let refused = |error: vmdesc::DescError| {
        say!(fw, "error: {}: {error}", vmdesc::PATH);
        Status::LOAD_ERROR
    };
    let root = fw.open_volume(image.device).inspect_err(|status| {
        say!(
            fw,
            "error: {}: cannot open the file system this image was loaded from: {status}",
            vmdesc::PATH
        );
    })?;
    let file =
        read_file(&root, vmdesc::PATH, vmdesc::MAX_LEN as u64).map_err(|(why, status)| {
            say!(fw, "error: {}: {why}", vmdesc::PATH);
            status
        })?;
    let parsed = VmDescription::parse(&file).map_err(refused)?;
    let files = parsed.files().map_err(refused)?;
    say_vm_nodes(fw, &parsed.vm_nodes());
    let (loaded, payloads) = load_payloads(fw, &root, &files, pages)?;
    drop(root);
    let bootargs = load_options_command_line(fw, image.load_options);
    let description = parsed
        .build(&loaded, bootargs.as_deref())
        .map_err(refused)?;
    Ok(Vms {
        description,
        payloads,
    })
}

/// Says which VM nodes the description enables.
fn say_vm_nodes(fw: &Firmware, vms: &[String]) {
    if vms.is_empty() {
        say!(fw, "{}: no VM", vmdesc::PATH);
    } else {
        say!(
            fw,
            "{}: {} VM(s): {}",
            vmdesc::PATH,
            vms.len(),
            vms.join(", ")
        );
    }
}

/// Loads every payload in `files`, in order; returns where each went, as
/// the VM description's builder and as the ranges to clean before the
/// hand-over want them.
fn load_payloads(
    fw: &Firmware,
    root: &api::File,
    files: &[vmdesc::FileRef],
    pages: &mut Pages,
) -> Result<(Vec<Loaded>, Vec<MemRange>), Status> {
    let mut loaded = Vec::new();
    let mut payloads = Vec::new();
    for file in files {
        let (address, size) =
            load_payload(fw, root, &file.path, pages).map_err(|(why, status)| {
                say!(
                    fw,
                    "error: {}: node {}, property \"{}\": {}: {why}",
                    vmdesc::PATH,
                    file.node,
                    file.property,
                    file.path
                );
                status
            })?;
        say!(
            fw,
            "{} {}: {} ({} KiB) at {address:#x}",
            file.node,
            file.property,
            file.path,
            size.div_ceil(1024)
        );
        loaded.push(Loaded { address, size });
        payloads.push(MemRange::new(address, size));
    }
    Ok((loaded, payloads))
}

/// The command line in the load options, if any: it replaces the VM
/// description's `/chosen/bootargs`. Load options that are not one are
/// ignored.
fn load_options_command_line(fw: &Firmware, load_options: &[u8]) -> Option<String> {
    match text::load_options_command_line(load_options) {
        Ok(Some(line)) => {
            say!(fw, "command line from the load options: \"{line}\"");
            Some(line)
        }
        Ok(None) => None,
        Err(why) => {
            say!(fw, "load options ignored: {why}");
            None
        }
    }
}

/// `el2.selftest=uefi-panic` on the command line the VM description
/// carries: panics here, to test the report of a panic in the UEFI stage.
fn uefi_panic_selftest(vm_description: &[u8]) {
    let selftest = platform::vms_from_dt(vm_description)
        .ok()
        .and_then(|(line, _)| el2::bringup::bootargs::parse(&line).0.selftest);
    if selftest == Some(el2::bringup::bootargs::SelfTest::UefiPanic) {
        panic!("selftest: el2.selftest=uefi-panic");
    }
}

/// The handoff block, with room for the RAM and reserved ranges of a
/// map up to twice today's size (ours and the firmware's allocations
/// between now and the exit add a few descriptors), and a buffer for
/// that map; every record but the memory map's is written.
fn write_handoff_block(
    fw: &Firmware,
    pages: &mut Pages,
    tables: &FirmwareTables<'_>,
    vm_description: &[u8],
) -> Result<HandoffBlock, Status> {
    let (map_size, descriptor_size) = memory_map_size(fw)?;
    let capacity = 2 * map_size.div_ceil(descriptor_size) + 32;
    let map = vec![0u8; capacity * descriptor_size];
    let len = handoff_len(tables, vm_description, capacity);
    let address = fw
        .allocate_pages(LOADER_DATA, efi::pages_for(len as u64))
        .inspect_err(|status| {
            say!(
                fw,
                "error: cannot allocate the {len}-byte handoff block: {status}"
            );
        })?;
    pages.add(address, len as u64);
    // SAFETY: the pages just allocated, used through nothing else.
    let block = unsafe { api::physical_bytes_mut(address, len) };
    let mut writer = Writer::new(block, address).map_err(|_| Status::BUFFER_TOO_SMALL)?;
    write_records(fw, &mut writer, tables, vm_description)?;
    say!(
        fw,
        "handoff block at {address:#x} ({} KiB); leaving boot services",
        len / 1024
    );
    Ok(HandoffBlock {
        writer,
        block: MemRange::new(address, len as u64),
        map,
    })
}

/// Bytes of a handoff block, in whole pages, that holds the firmware's
/// tables, the VM description and the memory ranges of a map of up to
/// `capacity` descriptors.
fn handoff_len(tables: &FirmwareTables<'_>, vm_description: &[u8], capacity: usize) -> usize {
    let len = handoff::HEADER_LEN
        + tables
            .acpi
            .iter()
            .map(|t| handoff::record_len(t.bytes.len()))
            .sum::<usize>()
        + tables.dtb.map_or(0, |d| handoff::record_len(d.len()))
        + handoff::record_len(vm_description.len())
        // Each descriptor can add a bank and cut reserved ranges in two.
        + handoff::memory_len(2 * capacity + 8, 2 * capacity + 8);
    len.next_multiple_of(efi::PAGE_SIZE as usize)
}

/// The records written before the exit: the ACPI tables, the firmware's
/// device tree, the VM description.
fn write_records(
    fw: &Firmware,
    writer: &mut Writer<'_>,
    tables: &FirmwareTables<'_>,
    vm_description: &[u8],
) -> Result<(), Status> {
    let full = |_| {
        say!(fw, "error: the handoff block is too small");
        Status::BUFFER_TOO_SMALL
    };
    for table in &tables.acpi {
        writer.push(Kind::AcpiTable, table.bytes).map_err(full)?;
    }
    if let Some(dtb) = tables.dtb {
        writer.push(Kind::FirmwareDtb, dtb).map_err(full)?;
    }
    writer
        .push(Kind::VmDescription, vm_description)
        .map_err(full)
}

/// The firmware's device tree at `address`, checked for its magic and a
/// sane `totalsize`.
fn firmware_dtb(memory: &FirmwareMemory, address: u64) -> Result<&[u8], String> {
    let header = memory
        .read(address, FDT_HEADER_LEN)
        .ok_or("its header is not in memory")?;
    let word = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    if word(0) != FDT_MAGIC {
        return Err(format!("magic {:#010x} is not an FDT's", word(0)));
    }
    let size = word(4) as usize;
    if !(FDT_HEADER_LEN..=MAX_DTB_LEN).contains(&size) {
        return Err(format!(
            "totalsize {size} is not between {FDT_HEADER_LEN} and {MAX_DTB_LEN}"
        ));
    }
    memory
        .read(address, size)
        .ok_or_else(|| format!("its {size} bytes are not all in memory"))
}

/// Why a file could not be read, and the status to return.
type FileError = (String, Status);

/// Reads the whole of `path` (at most `max` bytes) onto the heap.
fn read_file(root: &api::File, path: &str, max: u64) -> Result<Vec<u8>, FileError> {
    let file = open(root, path)?;
    let size = file
        .size()
        .map_err(|s| (format!("cannot find its size: {s}"), s))?;
    if size > max {
        return Err((
            format!("{size} bytes, more than the {max} accepted"),
            Status::BAD_BUFFER_SIZE,
        ));
    }
    let mut bytes = vec![0u8; size as usize];
    let read = file
        .read(&mut bytes)
        .map_err(|s| (format!("cannot read it: {s}"), s))?;
    if read != bytes.len() {
        return Err((
            format!("read {read} of its {size} bytes"),
            Status::END_OF_FILE,
        ));
    }
    Ok(bytes)
}

fn open(root: &api::File, path: &str) -> Result<api::File, FileError> {
    let name = text::to_ucs2(path).ok_or((
        String::from("the name cannot be said in UCS-2"),
        Status::INVALID_PARAMETER,
    ))?;
    root.open(&name)
        .map_err(|s| (format!("cannot open it: {s}"), s))
}

/// Loads `path` into fresh `EfiLoaderData` pages; returns its address and
/// size.
fn load_payload(
    fw: &Firmware,
    root: &api::File,
    path: &str,
    pages: &mut Pages,
) -> Result<(u64, u64), FileError> {
    let file = open(root, path)?;
    let size = file
        .size()
        .map_err(|s| (format!("cannot find its size: {s}"), s))?;
    if size == 0 {
        return Err((String::from("the file is empty"), Status::LOAD_ERROR));
    }
    let len =
        usize::try_from(size).map_err(|_| (String::from("too large"), Status::BAD_BUFFER_SIZE))?;
    let address = fw
        .allocate_pages(LOADER_DATA, efi::pages_for(size))
        .map_err(|s| (format!("cannot allocate {size} bytes for it: {s}"), s))?;
    pages.add(address, size);
    // SAFETY: the pages just allocated, used through nothing else.
    let buf = unsafe { api::physical_bytes_mut(address, len) };
    let read = file
        .read(buf)
        .map_err(|s| (format!("cannot read it: {s}"), s))?;
    if read != len {
        return Err((
            format!("read {read} of its {size} bytes"),
            Status::END_OF_FILE,
        ));
    }
    Ok((address, size))
}

/// Leaves boot services, completes the handoff block with the final
/// memory map and enters the ordinary boot. Returns only if the firmware
/// refuses to let go.
fn hand_over(fw: Firmware, ready: Ready, data_copy: u64) -> Status {
    let Ready {
        handoff:
            HandoffBlock {
                mut writer,
                block,
                mut map,
            },
        payloads,
    } = ready;
    // From here on a panic cannot use the firmware's console.
    PANIC_SYSTEM_TABLE.store(0, Ordering::Release);
    let info = match fw.exit_boot_services(&mut map) {
        Ok(info) => info,
        Err(status) => return status,
    };
    // Boot services are gone: no console, no allocation from the firmware,
    // and its interrupt handlers are not ours to run.
    DAIF.write(DAIF::D::Masked + DAIF::A::Masked + DAIF::I::Masked + DAIF::F::Masked);
    let map = &map[..info.size.min(map.len())];
    let memory = memmap::memory(memmap::descriptors(map, info.descriptor_size));
    if writer.push_memory(&memory).is_err() {
        // Cannot happen: the block has room for twice the map's capacity.
        return Status::BUFFER_TOO_SMALL;
    }
    writer.finish();
    cache::clean_to_poc(block.base, block.size);
    for payload in &payloads {
        cache::clean_to_poc(payload.base, payload.size);
    }
    // SAFETY: boot services are exited; the handoff block and the payloads
    // are cleaned to the point of coherency, and `data_copy` holds .data as
    // it was at entry.
    unsafe { head::efi_handover(block.base, data_copy as *const u8) }
}
