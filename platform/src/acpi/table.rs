//! The System Description Table header (ACPI 6.5 §5.2.6 "System
//! Description Table Header"), the tables this crate reads, and
//! bounds-checked little-endian field reads whose errors name the table
//! and the field.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::NODE_PREFIX;
use crate::{ErrorKind, PlatformError};

/// Size of the System Description Table header.
pub(crate) const HEADER_LEN: usize = 36;
/// Offset of the header's `Length` field.
const LENGTH_OFFSET: usize = 4;
/// Offset of the header's `Revision` field.
const REVISION_OFFSET: usize = 8;
/// Offset and size of the header's `OEMID` field.
const OEM_ID: (usize, usize) = (10, 6);
/// Offset and size of the header's `OEM Table ID` field.
const OEM_TABLE_ID: (usize, usize) = (16, 8);

/// The tables this crate reads (ACPI 6.5 §5.2.12, §5.2.9, §5.2.25,
/// §5.2.16; SPCR is defined by Microsoft's "Serial Port Console
/// Redirection Table" specification, which ACPI 6.5 Table 5.6 reserves
/// the signature for).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Multiple APIC Description Table, signature "APIC".
    Madt,
    /// Fixed ACPI Description Table, signature "FACP".
    Fadt,
    /// Generic Timer Description Table.
    Gtdt,
    /// Serial Port Console Redirection table.
    Spcr,
    /// System Resource Affinity Table.
    Srat,
}

impl Kind {
    pub(crate) const ALL: [Kind; 5] = [Kind::Madt, Kind::Fadt, Kind::Gtdt, Kind::Spcr, Kind::Srat];

    /// The 4-byte signature the table starts with.
    pub(crate) const fn signature(self) -> &'static [u8; 4] {
        match self {
            Kind::Madt => b"APIC",
            Kind::Fadt => b"FACP",
            Kind::Gtdt => b"GTDT",
            Kind::Spcr => b"SPCR",
            Kind::Srat => b"SRAT",
        }
    }

    /// The name the specification gives the table, used in errors.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Kind::Madt => "MADT",
            Kind::Fadt => "FADT",
            Kind::Gtdt => "GTDT",
            Kind::Spcr => "SPCR",
            Kind::Srat => "SRAT",
        }
    }

    /// The kind whose signature `bytes` starts with, if any.
    pub(crate) fn of(bytes: &[u8]) -> Option<Kind> {
        let signature = bytes.get(..4)?;
        Kind::ALL
            .into_iter()
            .find(|kind| kind.signature().as_slice() == signature)
    }
}

/// An error about field `field` of table `table`.
pub(crate) fn error(table: Kind, field: Option<String>, kind: ErrorKind) -> PlatformError {
    PlatformError {
        node: format!("{NODE_PREFIX}{}", table.name()),
        property: field,
        kind,
    }
}

/// A bad value in field `field` of table `table`.
pub(crate) fn bad(table: Kind, field: impl Into<String>, why: impl Into<String>) -> PlatformError {
    error(table, Some(field.into()), ErrorKind::BadValue(why.into()))
}

/// A table that passed the header checks: its bytes are exactly its
/// `Length` long and sum to zero.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Table<'a> {
    /// Which table.
    pub(crate) kind: Kind,
    /// The header's `Revision`.
    pub(crate) revision: u8,
    /// The whole table, header included, `Length` bytes.
    pub(crate) bytes: &'a [u8],
}

impl<'a> Table<'a> {
    /// Checks the header of `bytes`, a table whose signature is `kind`'s:
    /// the slice holds the 36-byte header, `Length` is at least the header
    /// and at most the slice (which may be longer: the rest is ignored),
    /// and the `Length` bytes sum to zero mod 256 (§5.2.6 `Checksum`).
    pub(crate) fn new(kind: Kind, bytes: &'a [u8]) -> Result<Table<'a>, PlatformError> {
        let header = Fields::new(kind, "", bytes);
        if bytes.len() < HEADER_LEN {
            return Err(bad(
                kind,
                "Length",
                format!(
                    "only {} bytes were given, too few for the {HEADER_LEN}-byte header",
                    bytes.len()
                ),
            ));
        }
        let length = header.u32(LENGTH_OFFSET, "Length")?;
        let length = usize::try_from(length).unwrap_or(usize::MAX);
        if length < HEADER_LEN {
            return Err(bad(
                kind,
                "Length",
                format!("{length} is shorter than the {HEADER_LEN}-byte header"),
            ));
        }
        let Some(bytes) = bytes.get(..length) else {
            return Err(bad(
                kind,
                "Length",
                format!(
                    "{length} bytes, but only {} were given: the table is truncated",
                    bytes.len()
                ),
            ));
        };
        let sum = bytes.iter().fold(0u8, |sum, &byte| sum.wrapping_add(byte));
        if sum != 0 {
            return Err(bad(
                kind,
                "Checksum",
                format!(
                    "the table's {length} bytes sum to {sum:#04x}, not 0: the table is corrupt"
                ),
            ));
        }
        Ok(Table {
            kind,
            revision: bytes[REVISION_OFFSET],
            bytes,
        })
    }

    /// The whole table's fields, named without a structure prefix.
    pub(crate) fn fields(&self) -> Fields<'a> {
        Fields::new(self.kind, "", self.bytes)
    }

    /// The header's `OEMID` and `OEM Table ID`, each without the spaces
    /// or NULs that pad it, joined by a space (`BOCHS BXPC`, `HISI
    /// HIP08`); bytes that are not printable ASCII become `?`.
    pub(crate) fn oem(&self) -> String {
        let text = |(at, len): (usize, usize)| -> String {
            self.bytes[at..at + len]
                .iter()
                .map(|&b| {
                    if b.is_ascii_graphic() || b == b' ' {
                        char::from(b)
                    } else if b == 0 {
                        ' '
                    } else {
                        '?'
                    }
                })
                .collect::<String>()
                .trim()
                .into()
        };
        let parts = [text(OEM_ID), text(OEM_TABLE_ID)];
        let parts: Vec<&str> = parts
            .iter()
            .map(String::as_str)
            .filter(|s| !s.is_empty())
            .collect();
        parts.join(" ")
    }

    /// The interrupt-controller-style structures (1-byte `Type`, 1-byte
    /// `Length`, ACPI 6.5 §5.2.12.2 and §5.2.16) that fill the table from
    /// `start` to its end. Each must be at least 2 bytes and lie wholly
    /// inside the table.
    pub(crate) fn structures(&self, start: usize) -> Result<Vec<Structure<'a>>, PlatformError> {
        let mut structures = Vec::new();
        let mut at = start;
        while at < self.bytes.len() {
            let field = || format!("structure at offset {at:#x}");
            let rest = &self.bytes[at..];
            let &[kind, length, ..] = rest else {
                return Err(bad(
                    self.kind,
                    field(),
                    "the table ends inside the structure's Type and Length",
                ));
            };
            let length = usize::from(length);
            if length < 2 {
                return Err(bad(
                    self.kind,
                    field(),
                    format!("Length {length} is shorter than the Type and Length fields"),
                ));
            }
            let Some(bytes) = rest.get(..length) else {
                return Err(bad(
                    self.kind,
                    field(),
                    format!(
                        "Length {length} runs past the end of the table ({} bytes left)",
                        rest.len()
                    ),
                ));
            };
            structures.push(Structure { kind, bytes });
            at += length;
        }
        Ok(structures)
    }
}

/// One structure inside a table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Structure<'a> {
    /// Its `Type`.
    pub(crate) kind: u8,
    /// Its bytes, `Length` long, `Type` and `Length` included.
    pub(crate) bytes: &'a [u8],
}

/// Bounds-checked little-endian reads from one structure (or a whole
/// table); an error names the table and the field as `prefix.field`.
#[derive(Clone, Debug)]
pub(crate) struct Fields<'a> {
    table: Kind,
    prefix: String,
    bytes: &'a [u8],
}

impl<'a> Fields<'a> {
    /// Reads from `bytes`, a part of `table` called `prefix` (`GICC[3]`;
    /// empty for the table itself).
    pub(crate) fn new(table: Kind, prefix: impl Into<String>, bytes: &'a [u8]) -> Fields<'a> {
        Fields {
            table,
            prefix: prefix.into(),
            bytes,
        }
    }

    /// The structure's name, for messages (`GICC[3]`).
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How many bytes the structure has.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// `prefix.field`, or `field` for the table itself.
    pub(crate) fn name(&self, field: &str) -> String {
        if self.prefix.is_empty() {
            String::from(field)
        } else {
            format!("{}.{field}", self.prefix)
        }
    }

    /// A bad value in `field`.
    pub(crate) fn bad(&self, field: &str, why: impl Into<String>) -> PlatformError {
        bad(self.table, self.name(field), why)
    }

    /// Something `field` describes that the hypervisor cannot use.
    pub(crate) fn unsupported(&self, field: &str, why: impl Into<String>) -> PlatformError {
        error(
            self.table,
            Some(self.name(field)),
            ErrorKind::Unsupported(why.into()),
        )
    }

    /// Fails unless the structure has at least `needed` bytes, naming
    /// `field`, the last field the caller reads.
    pub(crate) fn require(&self, needed: usize, field: &str) -> Result<(), PlatformError> {
        if self.bytes.len() >= needed {
            return Ok(());
        }
        let what = if self.prefix.is_empty() {
            "the table"
        } else {
            "the structure"
        };
        Err(bad(
            self.table,
            self.name("Length"),
            format!(
                "{what} has {} bytes, too few to hold {} (needs {needed})",
                self.bytes.len(),
                field
            ),
        ))
    }

    fn array<const N: usize>(&self, at: usize, field: &str) -> Result<[u8; N], PlatformError> {
        at.checked_add(N)
            .and_then(|end| self.bytes.get(at..end))
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(|| {
                self.bad(
                    field,
                    format!(
                        "bytes {at}..{} lie past the end ({} bytes)",
                        at.saturating_add(N),
                        self.bytes.len()
                    ),
                )
            })
    }

    /// The byte at `at`.
    pub(crate) fn u8(&self, at: usize, field: &str) -> Result<u8, PlatformError> {
        self.array::<1>(at, field).map(|[byte]| byte)
    }

    /// The little-endian `u16` at `at`.
    pub(crate) fn u16(&self, at: usize, field: &str) -> Result<u16, PlatformError> {
        self.array(at, field).map(u16::from_le_bytes)
    }

    /// The little-endian `u32` at `at`.
    pub(crate) fn u32(&self, at: usize, field: &str) -> Result<u32, PlatformError> {
        self.array(at, field).map(u32::from_le_bytes)
    }

    /// The little-endian `u64` at `at`.
    pub(crate) fn u64(&self, at: usize, field: &str) -> Result<u64, PlatformError> {
        self.array(at, field).map(u64::from_le_bytes)
    }
}
