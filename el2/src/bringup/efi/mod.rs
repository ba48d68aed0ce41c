//! Booting from UEFI: what the image's EFI entry (`arch::efi`) decides,
//! as plain data that `cargo test` checks on the host.
//!
//! The hypervisor image is also an EFI application (its PE/COFF header is
//! in `arch/head.rs`). Started by the firmware from an EFI system
//! partition, it gathers what the hypervisor needs while boot services
//! still exist, leaves them (UEFI 2.10 section 7.4, `ExitBootServices()`)
//! and enters the ordinary boot path with one block of memory, the
//! *handoff*, instead of a device tree. This module holds the parts that
//! are decisions rather than firmware calls:
//!
//! - [`memmap`]: which parts of the UEFI memory map are RAM the hypervisor
//!   may give away and which must stay reserved;
//! - [`acpi`]: finding every ACPI table from the RSDP, so that the tables
//!   can be copied out of firmware memory;
//! - [`vmdesc`]: the VM description file on the ESP, whose VM nodes name
//!   their payloads by file, rewritten into the `pvlock,vm` binding once
//!   the files are in memory;
//! - [`handoff`]: the format of the handoff block, its writer (used by the
//!   EFI entry) and its reader (used by the boot path, and hostile-input
//!   safe);
//! - [`text`]: console text as UEFI wants it (UCS-2, CR LF).
//!
//! The numbers below are the specification's: UEFI 2.10 Appendix D
//! ("Status Codes") and the GUIDs of the tables and protocols used.

pub mod acpi;
pub mod handoff;
pub mod memmap;
pub mod text;
pub mod vmdesc;

use core::fmt;

/// An EFI GUID in its in-memory layout (UEFI 2.10 Appendix A, "GUID and
/// Time Formats"): the first three fields little-endian, then eight bytes.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Guid {
    pub data1: u32,
    pub data2: u16,
    pub data3: u16,
    pub data4: [u8; 8],
}

impl Guid {
    /// The GUID written `d1-d2-d3-d4[0..2]-d4[2..8]`.
    pub const fn new(data1: u32, data2: u16, data3: u16, data4: [u8; 8]) -> Self {
        Self {
            data1,
            data2,
            data3,
            data4,
        }
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.data4;
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            self.data1, self.data2, self.data3, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]
        )
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `EFI_ACPI_20_TABLE_GUID` (UEFI 2.10 section 4.6.1.1, "Industry Standard
/// Configuration Tables"): the ACPI 2.0+ RSDP.
pub const ACPI_20_TABLE_GUID: Guid = Guid::new(
    0x8868_e871,
    0xe4f1,
    0x11d3,
    [0xbc, 0x22, 0x00, 0x80, 0xc7, 0x3c, 0x88, 0x81],
);

/// `EFI_DTB_TABLE_GUID` (UEFI 2.10 section 4.6.1.3, "Devicetree Tables"):
/// a flattened device tree the firmware hands on.
pub const DTB_TABLE_GUID: Guid = Guid::new(
    0xb1b6_21d5,
    0xf19c,
    0x41a5,
    [0x83, 0x0b, 0xd9, 0x15, 0x2c, 0x69, 0xaa, 0xe0],
);

/// `EFI_LOADED_IMAGE_PROTOCOL_GUID` (UEFI 2.10 section 9.1).
pub const LOADED_IMAGE_PROTOCOL_GUID: Guid = Guid::new(
    0x5b1b_31a1,
    0x9562,
    0x11d2,
    [0x8e, 0x3f, 0x00, 0xa0, 0xc9, 0x69, 0x72, 0x3b],
);

/// `EFI_SIMPLE_FILE_SYSTEM_PROTOCOL_GUID` (UEFI 2.10 section 13.4).
pub const SIMPLE_FILE_SYSTEM_PROTOCOL_GUID: Guid = Guid::new(
    0x964e_5b22,
    0x6459,
    0x11d2,
    [0x8e, 0x39, 0x00, 0xa0, 0xc9, 0x69, 0x72, 0x3b],
);

/// `EFI_STATUS` (UEFI 2.10 Appendix D, "Status Codes"): success is 0,
/// errors have the top bit set, warnings are the other non-zero values.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Status(pub usize);

/// The bit that marks an error code.
const ERROR_BIT: usize = 1 << (usize::BITS - 1);

impl Status {
    pub const SUCCESS: Status = Status(0);
    pub const LOAD_ERROR: Status = Status::error(1);
    pub const INVALID_PARAMETER: Status = Status::error(2);
    pub const UNSUPPORTED: Status = Status::error(3);
    pub const BAD_BUFFER_SIZE: Status = Status::error(4);
    pub const BUFFER_TOO_SMALL: Status = Status::error(5);
    pub const NOT_READY: Status = Status::error(6);
    pub const DEVICE_ERROR: Status = Status::error(7);
    pub const WRITE_PROTECTED: Status = Status::error(8);
    pub const OUT_OF_RESOURCES: Status = Status::error(9);
    pub const VOLUME_CORRUPTED: Status = Status::error(10);
    pub const VOLUME_FULL: Status = Status::error(11);
    pub const NO_MEDIA: Status = Status::error(12);
    pub const MEDIA_CHANGED: Status = Status::error(13);
    pub const NOT_FOUND: Status = Status::error(14);
    pub const ACCESS_DENIED: Status = Status::error(15);
    pub const NO_RESPONSE: Status = Status::error(16);
    pub const NO_MAPPING: Status = Status::error(17);
    pub const TIMEOUT: Status = Status::error(18);
    pub const NOT_STARTED: Status = Status::error(19);
    pub const ALREADY_STARTED: Status = Status::error(20);
    pub const ABORTED: Status = Status::error(21);
    pub const ICMP_ERROR: Status = Status::error(22);
    pub const TFTP_ERROR: Status = Status::error(23);
    pub const PROTOCOL_ERROR: Status = Status::error(24);
    pub const INCOMPATIBLE_VERSION: Status = Status::error(25);
    pub const SECURITY_VIOLATION: Status = Status::error(26);
    pub const CRC_ERROR: Status = Status::error(27);
    pub const END_OF_MEDIA: Status = Status::error(28);
    pub const END_OF_FILE: Status = Status::error(31);
    pub const INVALID_LANGUAGE: Status = Status::error(32);
    pub const COMPROMISED_DATA: Status = Status::error(33);

    /// The error with code `code`.
    pub const fn error(code: usize) -> Status {
        Status(ERROR_BIT | code)
    }

    pub const fn is_error(self) -> bool {
        self.0 & ERROR_BIT != 0
    }

    /// `Ok` for success and warnings, `Err(self)` for errors.
    pub const fn to_result(self) -> Result<(), Status> {
        if self.is_error() { Err(self) } else { Ok(()) }
    }

    /// The specification's name of the code, if it has one here.
    pub fn name(self) -> Option<&'static str> {
        const NAMES: [(Status, &str); 32] = [
            (Status::SUCCESS, "EFI_SUCCESS"),
            (Status::LOAD_ERROR, "EFI_LOAD_ERROR"),
            (Status::INVALID_PARAMETER, "EFI_INVALID_PARAMETER"),
            (Status::UNSUPPORTED, "EFI_UNSUPPORTED"),
            (Status::BAD_BUFFER_SIZE, "EFI_BAD_BUFFER_SIZE"),
            (Status::BUFFER_TOO_SMALL, "EFI_BUFFER_TOO_SMALL"),
            (Status::NOT_READY, "EFI_NOT_READY"),
            (Status::DEVICE_ERROR, "EFI_DEVICE_ERROR"),
            (Status::WRITE_PROTECTED, "EFI_WRITE_PROTECTED"),
            (Status::OUT_OF_RESOURCES, "EFI_OUT_OF_RESOURCES"),
            (Status::VOLUME_CORRUPTED, "EFI_VOLUME_CORRUPTED"),
            (Status::VOLUME_FULL, "EFI_VOLUME_FULL"),
            (Status::NO_MEDIA, "EFI_NO_MEDIA"),
            (Status::MEDIA_CHANGED, "EFI_MEDIA_CHANGED"),
            (Status::NOT_FOUND, "EFI_NOT_FOUND"),
            (Status::ACCESS_DENIED, "EFI_ACCESS_DENIED"),
            (Status::NO_RESPONSE, "EFI_NO_RESPONSE"),
            (Status::NO_MAPPING, "EFI_NO_MAPPING"),
            (Status::TIMEOUT, "EFI_TIMEOUT"),
            (Status::NOT_STARTED, "EFI_NOT_STARTED"),
            (Status::ALREADY_STARTED, "EFI_ALREADY_STARTED"),
            (Status::ABORTED, "EFI_ABORTED"),
            (Status::ICMP_ERROR, "EFI_ICMP_ERROR"),
            (Status::TFTP_ERROR, "EFI_TFTP_ERROR"),
            (Status::PROTOCOL_ERROR, "EFI_PROTOCOL_ERROR"),
            (Status::INCOMPATIBLE_VERSION, "EFI_INCOMPATIBLE_VERSION"),
            (Status::SECURITY_VIOLATION, "EFI_SECURITY_VIOLATION"),
            (Status::CRC_ERROR, "EFI_CRC_ERROR"),
            (Status::END_OF_MEDIA, "EFI_END_OF_MEDIA"),
            (Status::END_OF_FILE, "EFI_END_OF_FILE"),
            (Status::INVALID_LANGUAGE, "EFI_INVALID_LANGUAGE"),
            (Status::COMPROMISED_DATA, "EFI_COMPROMISED_DATA"),
        ];
        NAMES.iter().find(|(s, _)| *s == self).map(|(_, n)| *n)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None if self.is_error() => write!(f, "EFI error {}", self.0 & !ERROR_BIT),
            None => write!(f, "EFI warning {}", self.0),
        }
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self} ({:#x})", self.0)
    }
}

/// UEFI pages are 4 KiB whatever the CPU's granule (UEFI 2.10 section
/// 7.2, `AllocatePages()`).
pub const PAGE_SIZE: u64 = 4096;

/// Pages needed for `bytes`.
pub const fn pages_for(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn guids_print_as_the_specification_writes_them() {
        assert_eq!(
            DTB_TABLE_GUID.to_string(),
            "b1b621d5-f19c-41a5-830b-d9152c69aae0"
        );
        assert_eq!(
            ACPI_20_TABLE_GUID.to_string(),
            "8868e871-e4f1-11d3-bc22-0080c73c8881"
        );
        assert_eq!(
            SIMPLE_FILE_SYSTEM_PROTOCOL_GUID.to_string(),
            "964e5b22-6459-11d2-8e39-00a0c969723b"
        );
        assert_eq!(
            LOADED_IMAGE_PROTOCOL_GUID.to_string(),
            "5b1b31a1-9562-11d2-8e3f-00a0c969723b"
        );
        // The in-memory layout: 16 bytes, first field little-endian.
        assert_eq!(core::mem::size_of::<Guid>(), 16);
    }

    #[test]
    fn statuses_are_named() {
        assert_eq!(Status::NOT_FOUND.0, (1 << 63) | 14);
        assert_eq!(Status::NOT_FOUND.to_string(), "EFI_NOT_FOUND");
        assert!(Status::NOT_FOUND.is_error());
        assert!(!Status::SUCCESS.is_error());
        assert_eq!(Status::error(99).to_string(), "EFI error 99");
        assert_eq!(Status(4).to_string(), "EFI warning 4");
        assert_eq!(Status(4).to_result(), Ok(()));
        assert_eq!(
            Status::BUFFER_TOO_SMALL.to_result(),
            Err(Status::BUFFER_TOO_SMALL)
        );
        assert_eq!(pages_for(0), 0);
        assert_eq!(pages_for(1), 1);
        assert_eq!(pages_for(4096), 1);
        assert_eq!(pages_for(4097), 2);
    }
}
