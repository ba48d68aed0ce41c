//! The few UEFI interfaces the EFI entry uses (UEFI 2.10), as the
//! firmware lays them out, and small wrappers that make each call.
//!
//! Tables are reached through the pointers the firmware gave; every call
//! goes through one of the small `unsafe` functions below. All of it is
//! only valid while boot services exist: [`Firmware::exit_boot_services`]
//! consumes the [`Firmware`], so nothing can call into the firmware
//! after it succeeded.

use core::ffi::c_void;
use core::fmt;
use core::ptr;

use el2::bringup::efi::text::Ucs2Writer;
use el2::bringup::efi::{Guid, Status};

/// `EFI_HANDLE`.
pub type Handle = *mut c_void;

type EfiStatus = usize;

/// `EFI_TABLE_HEADER` (UEFI 2.10 section 4.2).
#[repr(C)]
struct TableHeader {
    signature: u64,
    revision: u32,
    header_size: u32,
    crc32: u32,
    reserved: u32,
}

/// `EFI_SYSTEM_TABLE_SIGNATURE`, "IBI SYST" (section 4.3).
const SYSTEM_TABLE_SIGNATURE: u64 = u64::from_le_bytes(*b"IBI SYST");
/// `EFI_BOOT_SERVICES_SIGNATURE`, "BOOTSERV" (section 4.4).
const BOOT_SERVICES_SIGNATURE: u64 = u64::from_le_bytes(*b"BOOTSERV");

/// `EFI_SYSTEM_TABLE` (section 4.3).
#[repr(C)]
pub struct SystemTable {
    hdr: TableHeader,
    firmware_vendor: *const u16,
    firmware_revision: u32,
    console_in_handle: Handle,
    con_in: *mut c_void,
    console_out_handle: Handle,
    con_out: *mut SimpleTextOutput,
    standard_error_handle: Handle,
    std_err: *mut SimpleTextOutput,
    runtime_services: *mut c_void,
    boot_services: *const BootServices,
    number_of_table_entries: usize,
    configuration_table: *const ConfigurationTable,
}

/// `EFI_CONFIGURATION_TABLE` (section 4.6).
#[repr(C)]
struct ConfigurationTable {
    vendor_guid: Guid,
    vendor_table: *const c_void,
}

/// `EFI_SIMPLE_TEXT_OUTPUT_PROTOCOL` (section 12.4), up to the one
/// function used.
#[repr(C)]
struct SimpleTextOutput {
    reset: usize,
    output_string: unsafe extern "efiapi" fn(*mut SimpleTextOutput, *const u16) -> EfiStatus,
}

/// `EFI_ALLOCATE_TYPE.AllocateAnyPages` (section 7.2).
const ALLOCATE_ANY_PAGES: u32 = 0;
/// `EFI_MEMORY_TYPE.EfiLoaderData` (section 7.2).
pub const LOADER_DATA: u32 = el2::bringup::efi::memmap::kind::LOADER_DATA;

/// `EFI_BOOT_SERVICES` (section 4.4), up to `ExitBootServices`; entries
/// not used are plain words.
#[repr(C)]
struct BootServices {
    hdr: TableHeader,
    raise_tpl: usize,
    restore_tpl: usize,
    allocate_pages: unsafe extern "efiapi" fn(u32, u32, usize, *mut u64) -> EfiStatus,
    free_pages: unsafe extern "efiapi" fn(u64, usize) -> EfiStatus,
    get_memory_map: unsafe extern "efiapi" fn(
        *mut usize,
        *mut u8,
        *mut usize,
        *mut usize,
        *mut u32,
    ) -> EfiStatus,
    allocate_pool: usize,
    free_pool: usize,
    create_event: usize,
    set_timer: usize,
    wait_for_event: usize,
    signal_event: usize,
    close_event: usize,
    check_event: usize,
    install_protocol_interface: usize,
    reinstall_protocol_interface: usize,
    uninstall_protocol_interface: usize,
    handle_protocol: unsafe extern "efiapi" fn(Handle, *const Guid, *mut *mut c_void) -> EfiStatus,
    reserved: usize,
    register_protocol_notify: usize,
    locate_handle: usize,
    locate_device_path: usize,
    install_configuration_table: usize,
    load_image: usize,
    start_image: usize,
    exit: unsafe extern "efiapi" fn(Handle, EfiStatus, usize, *const u16) -> EfiStatus,
    unload_image: usize,
    exit_boot_services: unsafe extern "efiapi" fn(Handle, usize) -> EfiStatus,
}

/// `EFI_LOADED_IMAGE_PROTOCOL` (section 9.1).
#[repr(C)]
struct LoadedImage {
    revision: u32,
    parent_handle: Handle,
    system_table: *const SystemTable,
    device_handle: Handle,
    file_path: *const c_void,
    reserved: *const c_void,
    load_options_size: u32,
    load_options: *const u8,
    image_base: *const c_void,
    image_size: u64,
    image_code_type: u32,
    image_data_type: u32,
    unload: usize,
}

/// `EFI_SIMPLE_FILE_SYSTEM_PROTOCOL` (section 13.4).
#[repr(C)]
struct SimpleFileSystem {
    revision: u64,
    open_volume:
        unsafe extern "efiapi" fn(*mut SimpleFileSystem, *mut *mut FileProtocol) -> EfiStatus,
}

/// `EFI_FILE_PROTOCOL` (section 13.5), up to `SetPosition`.
#[repr(C)]
struct FileProtocol {
    revision: u64,
    open: unsafe extern "efiapi" fn(
        *mut FileProtocol,
        *mut *mut FileProtocol,
        *const u16,
        u64,
        u64,
    ) -> EfiStatus,
    close: unsafe extern "efiapi" fn(*mut FileProtocol) -> EfiStatus,
    delete: usize,
    read: unsafe extern "efiapi" fn(*mut FileProtocol, *mut usize, *mut c_void) -> EfiStatus,
    write: usize,
    get_position: unsafe extern "efiapi" fn(*mut FileProtocol, *mut u64) -> EfiStatus,
    set_position: unsafe extern "efiapi" fn(*mut FileProtocol, u64) -> EfiStatus,
}

/// `EFI_FILE_MODE_READ` (section 13.5, `Open()`).
const FILE_MODE_READ: u64 = 1;
/// `SetPosition()` to this goes to the end of the file (section 13.5).
const POSITION_END: u64 = u64::MAX;

/// What `GetMemoryMap()` said about the map it wrote.
#[derive(Clone, Copy, Debug)]
pub struct MapInfo {
    /// Bytes of the buffer written.
    pub size: usize,
    pub key: usize,
    pub descriptor_size: usize,
    pub descriptor_version: u32,
}

/// What the firmware says about the running image.
pub struct ImageInfo {
    /// The device the image was loaded from (its file system is the ESP).
    pub device: Handle,
    /// The load options, often a UCS-2 command line.
    pub load_options: &'static [u8],
    pub base: u64,
    pub size: u64,
}

/// Boot services, while they exist.
pub struct Firmware {
    image: Handle,
    system_table: *const SystemTable,
    boot_services: *const BootServices,
    con_out: *mut SimpleTextOutput,
}

fn status(raw: EfiStatus) -> Result<(), Status> {
    Status(raw).to_result()
}

impl Firmware {
    /// Checks the system table the firmware passed to the entry point.
    ///
    /// # Safety
    /// `system_table` must be what the firmware passed to the image's
    /// entry point, with boot services not yet exited.
    pub unsafe fn new(image: Handle, system_table: *const SystemTable) -> Option<Self> {
        if system_table.is_null() {
            return None;
        }
        // SAFETY: the caller guarantees a valid system table.
        let st = unsafe { &*system_table };
        if st.hdr.signature != SYSTEM_TABLE_SIGNATURE || st.boot_services.is_null() {
            return None;
        }
        // SAFETY: a valid system table points at valid boot services.
        let bs = unsafe { &*st.boot_services };
        (bs.hdr.signature == BOOT_SERVICES_SIGNATURE).then_some(Self {
            image,
            system_table,
            boot_services: st.boot_services,
            con_out: st.con_out,
        })
    }

    fn st(&self) -> &SystemTable {
        // SAFETY: checked in `new`; valid until boot services are exited,
        // which consumes `self`.
        unsafe { &*self.system_table }
    }

    fn bs(&self) -> &BootServices {
        // SAFETY: as for `st`.
        unsafe { &*self.boot_services }
    }

    /// Writes one NUL-terminated UCS-2 chunk on the console.
    fn output(&self, chunk: &[u16]) {
        if self.con_out.is_null() || chunk.last() != Some(&0) {
            return;
        }
        // SAFETY: ConOut is the firmware's console protocol, `chunk` is
        // NUL-terminated and outlives the call.
        let _ = unsafe { ((*self.con_out).output_string)(self.con_out, chunk.as_ptr()) };
    }

    /// Prints on the firmware's console (ConOut).
    pub fn print(&self, args: fmt::Arguments) {
        let mut writer = Ucs2Writer::new(|chunk: &[u16]| self.output(chunk));
        let _ = fmt::Write::write_fmt(&mut writer, args);
    }

    /// The address of the configuration table `guid`, if installed.
    pub fn configuration_table(&self, guid: &Guid) -> Option<u64> {
        let st = self.st();
        if st.configuration_table.is_null() {
            return None;
        }
        // SAFETY: the firmware's table of NumberOfTableEntries entries.
        let tables = unsafe {
            core::slice::from_raw_parts(st.configuration_table, st.number_of_table_entries)
        };
        tables
            .iter()
            .find(|t| t.vendor_guid == *guid)
            .map(|t| t.vendor_table as u64)
    }

    /// `AllocatePages(AllocateAnyPages, memory_type, pages)`.
    pub fn allocate_pages(&self, memory_type: u32, pages: u64) -> Result<u64, Status> {
        let pages = usize::try_from(pages).map_err(|_| Status::OUT_OF_RESOURCES)?;
        let mut address = 0u64;
        // SAFETY: a boot service call with valid arguments.
        status(unsafe {
            (self.bs().allocate_pages)(ALLOCATE_ANY_PAGES, memory_type, pages, &mut address)
        })?;
        Ok(address)
    }

    /// `FreePages()` of what [`Self::allocate_pages`] returned.
    pub fn free_pages(&self, address: u64, pages: u64) {
        let Ok(pages) = usize::try_from(pages) else {
            return;
        };
        // SAFETY: frees pages this image allocated and no longer uses.
        let _ = unsafe { (self.bs().free_pages)(address, pages) };
    }

    /// The bytes and descriptor size the memory map needs now
    /// (`GetMemoryMap()` with an empty buffer).
    pub fn memory_map_size(&self) -> Result<(usize, usize), Status> {
        let (mut size, mut key, mut descriptor_size, mut version) = (0usize, 0usize, 0usize, 0u32);
        // SAFETY: a zero-sized buffer is never written; the firmware only
        // reports the size.
        let raw = unsafe {
            (self.bs().get_memory_map)(
                &mut size,
                ptr::null_mut(),
                &mut key,
                &mut descriptor_size,
                &mut version,
            )
        };
        match Status(raw) {
            Status::BUFFER_TOO_SMALL | Status::SUCCESS => Ok((size, descriptor_size)),
            other => Err(other),
        }
    }

    /// `GetMemoryMap()` into `buf`.
    pub fn memory_map(&self, buf: &mut [u8]) -> Result<MapInfo, Status> {
        let mut info = MapInfo {
            size: buf.len(),
            key: 0,
            descriptor_size: 0,
            descriptor_version: 0,
        };
        // SAFETY: `buf` is writable for `info.size` bytes.
        status(unsafe {
            (self.bs().get_memory_map)(
                &mut info.size,
                buf.as_mut_ptr(),
                &mut info.key,
                &mut info.descriptor_size,
                &mut info.descriptor_version,
            )
        })?;
        Ok(info)
    }

    fn protocol<T>(&self, handle: Handle, guid: &Guid) -> Result<*mut T, Status> {
        let mut interface: *mut c_void = ptr::null_mut();
        // SAFETY: a boot service call with valid arguments.
        status(unsafe { (self.bs().handle_protocol)(handle, guid, &mut interface) })?;
        if interface.is_null() {
            return Err(Status::UNSUPPORTED);
        }
        Ok(interface.cast())
    }

    /// This image's `EFI_LOADED_IMAGE_PROTOCOL`.
    pub fn loaded_image(&self) -> Result<ImageInfo, Status> {
        let image: *mut LoadedImage =
            self.protocol(self.image, &el2::bringup::efi::LOADED_IMAGE_PROTOCOL_GUID)?;
        // SAFETY: the firmware's protocol instance for this image.
        let image = unsafe { &*image };
        let load_options = if image.load_options.is_null() {
            &[][..]
        } else {
            // SAFETY: LoadOptionsSize bytes at LoadOptions belong to the
            // image for as long as it runs.
            unsafe {
                core::slice::from_raw_parts(image.load_options, image.load_options_size as usize)
            }
        };
        Ok(ImageInfo {
            device: image.device_handle,
            load_options,
            base: image.image_base as u64,
            size: image.image_size,
        })
    }

    /// The root directory of the file system on `device`.
    pub fn open_volume(&self, device: Handle) -> Result<File, Status> {
        let fs: *mut SimpleFileSystem =
            self.protocol(device, &el2::bringup::efi::SIMPLE_FILE_SYSTEM_PROTOCOL_GUID)?;
        let mut root: *mut FileProtocol = ptr::null_mut();
        // SAFETY: the firmware's file system protocol on `device`.
        status(unsafe { ((*fs).open_volume)(fs, &mut root) })?;
        File::wrap(root)
    }

    /// Ends this image with `status` (UEFI 2.10 section 7.4.5, `Exit()`):
    /// the firmware takes over again, as if the entry point had returned.
    pub fn exit(&self, status: Status) -> ! {
        // SAFETY: the documented call, with this image's handle and no
        // exit data; boot services are still there (they consume `self`).
        unsafe { (self.bs().exit)(self.image, status.0, 0, core::ptr::null()) };
        // Exit() does not return for a started image; if it does, stop here.
        loop {
            aarch64_cpu::asm::wfi();
        }
    }

    /// Gets the memory map into `buf` and leaves boot services with it,
    /// getting it again when the map changed in between (UEFI 2.10 section
    /// 7.4: `EFI_INVALID_PARAMETER` means a stale `MapKey`). Nothing but
    /// `GetMemoryMap()` runs between the attempts: no allocation, no
    /// console. On success the firmware is gone and `buf` holds the map
    /// the exit used.
    pub fn exit_boot_services(self, buf: &mut [u8]) -> Result<MapInfo, Status> {
        const ATTEMPTS: usize = 8;
        let mut last = Status::ABORTED;
        for _ in 0..ATTEMPTS {
            let info = self.memory_map(buf)?;
            // SAFETY: the documented call; `info.key` is from the map just read.
            let raw = unsafe { (self.bs().exit_boot_services)(self.image, info.key) };
            match Status(raw) {
                Status::SUCCESS => return Ok(info),
                Status::INVALID_PARAMETER => last = Status::INVALID_PARAMETER,
                other => return Err(other),
            }
        }
        Err(last)
    }
}

/// An open `EFI_FILE_PROTOCOL`, closed when dropped.
pub struct File {
    raw: *mut FileProtocol,
}

impl File {
    fn wrap(raw: *mut FileProtocol) -> Result<Self, Status> {
        if raw.is_null() {
            Err(Status::DEVICE_ERROR)
        } else {
            Ok(Self { raw })
        }
    }

    /// Opens `path` (NUL-terminated UCS-2) for reading, relative to this
    /// directory.
    pub fn open(&self, path: &[u16]) -> Result<File, Status> {
        if path.last() != Some(&0) {
            return Err(Status::INVALID_PARAMETER);
        }
        let mut file: *mut FileProtocol = ptr::null_mut();
        // SAFETY: `self` is open and `path` is NUL-terminated.
        status(unsafe {
            ((*self.raw).open)(self.raw, &mut file, path.as_ptr(), FILE_MODE_READ, 0)
        })?;
        File::wrap(file)
    }

    fn set_position(&self, position: u64) -> Result<(), Status> {
        // SAFETY: `self` is open.
        status(unsafe { ((*self.raw).set_position)(self.raw, position) })
    }

    /// The file's size in bytes; leaves the position at the start.
    pub fn size(&self) -> Result<u64, Status> {
        self.set_position(POSITION_END)?;
        let mut position = 0u64;
        // SAFETY: `self` is open.
        status(unsafe { ((*self.raw).get_position)(self.raw, &mut position) })?;
        self.set_position(0)?;
        Ok(position)
    }

    /// Reads from the current position into `buf` until it is full or the
    /// file ends; returns the bytes read.
    pub fn read(&self, buf: &mut [u8]) -> Result<usize, Status> {
        let mut done = 0;
        while done < buf.len() {
            let rest = &mut buf[done..];
            let mut len = rest.len();
            // SAFETY: `self` is open and `rest` is writable for `len` bytes.
            status(unsafe { ((*self.raw).read)(self.raw, &mut len, rest.as_mut_ptr().cast()) })?;
            if len == 0 {
                break;
            }
            done += len.min(rest.len());
        }
        Ok(done)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        // SAFETY: `self` is open; it is not used after this.
        let _ = unsafe { ((*self.raw).close)(self.raw) };
    }
}

/// `len` bytes of physical memory at `address`.
///
/// # Safety
/// While boot services run, the firmware maps memory one to one; the
/// bytes must be memory the firmware's map describes (the caller checks
/// against the memory map) and must not change while the slice lives.
pub unsafe fn physical_bytes(address: u64, len: usize) -> &'static [u8] {
    // SAFETY: as the caller guarantees.
    unsafe { core::slice::from_raw_parts(address as *const u8, len) }
}

/// `len` writable bytes of physical memory at `address`.
///
/// # Safety
/// As [`physical_bytes`], and the pages must be this image's own
/// allocation, used through nothing else.
pub unsafe fn physical_bytes_mut(address: u64, len: usize) -> &'static mut [u8] {
    // SAFETY: as the caller guarantees.
    unsafe { core::slice::from_raw_parts_mut(address as *mut u8, len) }
}
