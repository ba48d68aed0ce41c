//! The handoff block: everything the EFI entry hands the hypervisor's
//! boot path in one piece of memory, instead of a device tree.
//!
//! The EFI entry allocates the block (`AllocatePages`, `EfiLoaderData`),
//! fills it with [`Writer`] before and right after `ExitBootServices()`,
//! and enters the ordinary boot path with x0 = its physical address. The
//! boot path tells it from a device tree by its magic (an FDT starts with
//! the big-endian word 0xd00dfeed; this starts with `PVLKHAND`), maps it
//! like the device tree and reads it with [`Handoff::parse`], which checks
//! everything (magic, version, sizes, a CRC-32, every record's bounds and
//! contents) and never panics, whatever the bytes.
//!
//! Layout (all numbers little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `PVLKHAND` |
//! | 8 | 4 | version (1) |
//! | 12 | 4 | header size (64) |
//! | 16 | 8 | total size: header and records, in bytes |
//! | 24 | 8 | the block's own physical address |
//! | 32 | 8 | the block's allocated size (whole pages): all of it stays reserved |
//! | 40 | 4 | number of records |
//! | 44 | 4 | flags (bit 0: the RAM list was cut short) |
//! | 48 | 4 | CRC-32 (IEEE 802.3) of the first `total size` bytes, this field as 0 |
//! | 52 | 12 | zero |
//!
//! Records follow the header, each 8-byte aligned: kind (u32), zero (u32),
//! payload size in bytes (u64), the payload, zero padding to 8 bytes.
//!
//! | kind | payload |
//! |---|---|
//! | 1 RAM | RAM banks: `{base: u64, size: u64}` each |
//! | 2 reserved | reserved regions inside the banks: `{base: u64, size: u64, kind: u32, zero: u32}` each, kind a [`ReservedKind`] |
//! | 3 ACPI table | one whole ACPI table, its header's `Length` = the payload size |
//! | 4 firmware DTB | the device tree the firmware installed, if any |
//! | 5 VM description | the VMs to run and the hypervisor's command line, as a device tree (`/chosen` with `bootargs` and `pvlock,vm` nodes, docs/vm-binding.md) |
//!
//! Exactly one RAM record; at most one of each other kind except ACPI
//! tables. Records of kinds this version does not know are skipped, so a
//! newer EFI entry can add some.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use platform::{MemRange, ReservedRegion};

use super::memmap::{Memory, ReservedKind};

/// The first eight bytes of a handoff block.
pub const MAGIC: [u8; 8] = *b"PVLKHAND";
/// The layout this module writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of the header.
pub const HEADER_LEN: usize = 64;
/// Bytes of a record's header.
pub const RECORD_HEADER_LEN: usize = 16;
/// Bytes of one RAM entry.
pub const RAM_ENTRY_LEN: usize = 16;
/// Bytes of one reserved entry.
pub const RESERVED_ENTRY_LEN: usize = 24;
/// The largest block the boot path maps.
pub const MAX_BLOCK_LEN: u64 = 1 << 30;
/// Flags bit: not every RAM bank fitted (the block was too small).
pub const FLAG_RAM_TRUNCATED: u32 = 1 << 0;

/// Header field offsets.
mod field {
    pub const VERSION: usize = 8;
    pub const HEADER_SIZE: usize = 12;
    pub const TOTAL_SIZE: usize = 16;
    pub const BLOCK_BASE: usize = 24;
    pub const BLOCK_SIZE: usize = 32;
    pub const RECORD_COUNT: usize = 40;
    pub const FLAGS: usize = 44;
    pub const CRC: usize = 48;
}

/// What a record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    Ram = 1,
    Reserved = 2,
    AcpiTable = 3,
    FirmwareDtb = 4,
    VmDescription = 5,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Ram,
        Kind::Reserved,
        Kind::AcpiTable,
        Kind::FirmwareDtb,
        Kind::VmDescription,
    ];

    fn from_u32(value: u32) -> Option<Kind> {
        Self::ALL.into_iter().find(|k| *k as u32 == value)
    }

    /// The record's name in messages.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Ram => "RAM",
            Kind::Reserved => "reserved memory",
            Kind::AcpiTable => "ACPI table",
            Kind::FirmwareDtb => "firmware device tree",
            Kind::VmDescription => "VM description",
        }
    }
}

/// CRC-32 as IEEE 802.3 (reflected polynomial 0xedb88320, initial and
/// final value all ones).
pub fn crc32(bytes: &[u8]) -> u32 {
    !crc32_update(!0, bytes)
}

/// Feeds `bytes` into a running CRC-32 register (byte-wise, from a table
/// built at compile time).
fn crc32_update(crc: u32, bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    bytes.iter().fold(crc, |crc, &b| {
        TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

/// Bytes a record with `payload` bytes takes, padding included.
pub const fn record_len(payload: usize) -> usize {
    RECORD_HEADER_LEN + payload.next_multiple_of(8)
}

/// Bytes the RAM and reserved records take for `banks` and `reserved`
/// entries.
pub const fn memory_len(banks: usize, reserved: usize) -> usize {
    record_len(banks * RAM_ENTRY_LEN) + record_len(reserved * RESERVED_ENTRY_LEN)
}

/// The block is too small for what was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

impl fmt::Display for Full {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the handoff block is full")
    }
}

/// Fills a handoff block (the EFI entry's side).
pub struct Writer<'a> {
    buf: &'a mut [u8],
    used: usize,
    records: u32,
    flags: u32,
}

impl<'a> Writer<'a> {
    /// Starts a block in `buf` (all of the allocation), which lives at
    /// physical address `base`.
    pub fn new(buf: &'a mut [u8], base: u64) -> Result<Self, Full> {
        if buf.len() < HEADER_LEN {
            return Err(Full);
        }
        buf[..HEADER_LEN].fill(0);
        buf[..8].copy_from_slice(&MAGIC);
        buf[field::VERSION..field::VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
        buf[field::HEADER_SIZE..field::HEADER_SIZE + 4]
            .copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        buf[field::BLOCK_BASE..field::BLOCK_BASE + 8].copy_from_slice(&base.to_le_bytes());
        let size = buf.len() as u64;
        buf[field::BLOCK_SIZE..field::BLOCK_SIZE + 8].copy_from_slice(&size.to_le_bytes());
        Ok(Self {
            buf,
            used: HEADER_LEN,
            records: 0,
            flags: 0,
        })
    }

    /// Bytes still free.
    pub fn room(&self) -> usize {
        self.buf.len() - self.used
    }

    /// Appends a record of `kind` with `len` payload bytes that `fill`
    /// writes (it gets exactly `len` bytes, zeroed).
    pub fn push_with(
        &mut self,
        kind: Kind,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), Full> {
        let total = len
            .checked_next_multiple_of(8)
            .and_then(|l| l.checked_add(RECORD_HEADER_LEN))
            .ok_or(Full)?;
        if total > self.room() {
            return Err(Full);
        }
        let record = &mut self.buf[self.used..self.used + total];
        record.fill(0);
        record[..4].copy_from_slice(&(kind as u32).to_le_bytes());
        record[8..16].copy_from_slice(&(len as u64).to_le_bytes());
        fill(&mut record[RECORD_HEADER_LEN..RECORD_HEADER_LEN + len]);
        self.used += total;
        self.records += 1;
        Ok(())
    }

    /// Appends a record of `kind` holding `payload`.
    pub fn push(&mut self, kind: Kind, payload: &[u8]) -> Result<(), Full> {
        self.push_with(kind, payload.len(), |out| out.copy_from_slice(payload))
    }

    /// Appends the reserved regions, then as many RAM banks as fit (all,
    /// when the block was sized with [`memory_len`]). Dropping RAM is safe
    /// and is flagged ([`FLAG_RAM_TRUNCATED`]); dropping a reserved region
    /// is not, so that is an error.
    pub fn push_memory(&mut self, memory: &Memory) -> Result<(), Full> {
        let reserved = &memory.reserved;
        self.push_with(Kind::Reserved, reserved.len() * RESERVED_ENTRY_LEN, |out| {
            for (r, entry) in reserved
                .iter()
                .zip(out.chunks_exact_mut(RESERVED_ENTRY_LEN))
            {
                entry[..8].copy_from_slice(&r.range.base.to_le_bytes());
                entry[8..16].copy_from_slice(&r.range.size.to_le_bytes());
                entry[16..20].copy_from_slice(&(r.kind as u32).to_le_bytes());
            }
        })?;
        let fit = self.room().saturating_sub(RECORD_HEADER_LEN) / RAM_ENTRY_LEN;
        let banks = &memory.banks[..memory.banks.len().min(fit)];
        if banks.len() < memory.banks.len() {
            self.flags |= FLAG_RAM_TRUNCATED;
        }
        self.push_with(Kind::Ram, banks.len() * RAM_ENTRY_LEN, |out| {
            for (bank, entry) in banks.iter().zip(out.chunks_exact_mut(RAM_ENTRY_LEN)) {
                entry[..8].copy_from_slice(&bank.base.to_le_bytes());
                entry[8..16].copy_from_slice(&bank.size.to_le_bytes());
            }
        })
    }

    /// Writes the header's totals and CRC; returns the total size.
    pub fn finish(self) -> usize {
        let used = self.used;
        let buf = self.buf;
        buf[field::TOTAL_SIZE..field::TOTAL_SIZE + 8].copy_from_slice(&(used as u64).to_le_bytes());
        buf[field::RECORD_COUNT..field::RECORD_COUNT + 4]
            .copy_from_slice(&self.records.to_le_bytes());
        buf[field::FLAGS..field::FLAGS + 4].copy_from_slice(&self.flags.to_le_bytes());
        buf[field::CRC..field::CRC + 4].fill(0);
        let crc = crc32(&buf[..used]);
        buf[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_le_bytes());
        used
    }
}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    bytes
        .get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// What the boot path needs to map a block before reading it: the sizes
/// from a header that looks like a handoff's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Header and records: what [`Handoff::parse`] reads.
    pub total_size: u64,
    /// All of the block: what stays reserved.
    pub block_size: u64,
}

/// Whether `header` (the block's first [`HEADER_LEN`] bytes) starts a
/// handoff block of a sane size. Checks only the header; the boot path
/// calls this with the MMU off, to know how much to map, and then
/// [`Handoff::parse`] checks everything.
pub fn probe(header: &[u8]) -> Option<Probe> {
    if header.len() < HEADER_LEN || header[..8] != MAGIC {
        return None;
    }
    let total_size = le_u64(header, field::TOTAL_SIZE);
    let block_size = le_u64(header, field::BLOCK_SIZE);
    (HEADER_LEN as u64 <= total_size && total_size <= block_size && block_size <= MAX_BLOCK_LEN)
        .then_some(Probe {
            total_size,
            block_size,
        })
}

/// Why a handoff block cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandoffError {
    /// Not a handoff block, or its header is inconsistent.
    BadHeader(String),
    /// A layout this hypervisor does not read.
    UnsupportedVersion(u32),
    /// The bytes do not match the CRC: corrupted on the way.
    BadCrc { stored: u32, computed: u32 },
    /// Record `index` (of kind `kind`, when known) is malformed.
    BadRecord {
        index: usize,
        kind: Option<Kind>,
        why: String,
    },
    /// No RAM record: the machine's memory is unknown.
    NoRam,
}

impl fmt::Display for HandoffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UEFI handoff block: ")?;
        match self {
            Self::BadHeader(why) => write!(f, "bad header: {why}"),
            Self::UnsupportedVersion(v) => {
                write!(f, "version {v}, this hypervisor reads version {VERSION}")
            }
            Self::BadCrc { stored, computed } => write!(
                f,
                "CRC-32 is {computed:#010x}, the header says {stored:#010x}: the block is corrupted"
            ),
            Self::BadRecord { index, kind, why } => match kind {
                Some(kind) => write!(f, "record {index} ({}): {why}", kind.name()),
                None => write!(f, "record {index}: {why}"),
            },
            Self::NoRam => write!(f, "no RAM record"),
        }
    }
}

/// A checked handoff block (the boot path's side). Every accessor is
/// infallible: [`Handoff::parse`] has checked what it reads.
#[derive(Clone, Debug)]
pub struct Handoff<'a> {
    bytes: &'a [u8],
    block: MemRange,
    flags: u32,
    /// (kind, payload) of every record of a known kind, in order.
    records: Vec<(Kind, &'a [u8])>,
    unknown: usize,
}

/// FDT header magic and least size (Devicetree Specification 0.4, 5.2).
use boot::handover::FDT_MAGIC;
const FDT_HEADER_LEN: usize = boot::handover::FDT_HEADER_SIZE as usize;

impl<'a> Handoff<'a> {
    /// Checks the block in `bytes`, which the boot loader said is at
    /// physical address `address`. `bytes` may be longer than the block's
    /// total size.
    pub fn parse(bytes: &'a [u8], address: u64) -> Result<Self, HandoffError> {
        let (bytes, block) = check_header(bytes, address)?;
        let stored = le_u32(bytes, field::CRC);
        let computed = crc32_without_field(bytes);
        if stored != computed {
            return Err(HandoffError::BadCrc { stored, computed });
        }
        let Records { known, unknown } = read_records(bytes)?;
        if !known.iter().any(|(k, _)| *k == Kind::Ram) {
            return Err(HandoffError::NoRam);
        }
        Ok(Self {
            bytes,
            block,
            flags: le_u32(bytes, field::FLAGS),
            records: known,
            unknown,
        })
    }

    /// The whole block (to keep reserved and mapped).
    pub fn block(&self) -> MemRange {
        self.block
    }

    /// The bytes [`Handoff::parse`] checked.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    fn payloads(&self, kind: Kind) -> impl Iterator<Item = &'a [u8]> + '_ {
        self.records
            .iter()
            .filter(move |(k, _)| *k == kind)
            .map(|(_, p)| *p)
    }

    /// The RAM banks.
    pub fn ram(&self) -> Vec<MemRange> {
        self.payloads(Kind::Ram)
            .flat_map(|p| p.chunks_exact(RAM_ENTRY_LEN))
            .map(|e| MemRange::new(le_u64(e, 0), le_u64(e, 8)))
            .collect()
    }

    /// The reserved regions, named by why they are reserved.
    pub fn reserved(&self) -> Vec<ReservedRegion> {
        self.payloads(Kind::Reserved)
            .flat_map(|p| p.chunks_exact(RESERVED_ENTRY_LEN))
            .map(|e| ReservedRegion {
                range: MemRange::new(le_u64(e, 0), le_u64(e, 8)),
                name: String::from(
                    ReservedKind::from_u32(le_u32(e, 16)).map_or("reserved", ReservedKind::name),
                ),
            })
            .collect()
    }

    /// The ACPI tables, in the order the firmware's XSDT lists them.
    pub fn acpi_tables(&self) -> Vec<&'a [u8]> {
        self.payloads(Kind::AcpiTable).collect()
    }

    /// The device tree the firmware installed, if it installed one.
    pub fn firmware_dtb(&self) -> Option<&'a [u8]> {
        self.payloads(Kind::FirmwareDtb).next()
    }

    /// The VM description (a device tree), if there is one.
    pub fn vm_description(&self) -> Option<&'a [u8]> {
        self.payloads(Kind::VmDescription).next()
    }

    /// Whether the EFI entry had to leave RAM banks out.
    pub fn ram_truncated(&self) -> bool {
        self.flags & FLAG_RAM_TRUNCATED != 0
    }

    /// How many records of kinds this version does not know were skipped.
    pub fn unknown_records(&self) -> usize {
        self.unknown
    }
}

/// Checks the header of the block in `bytes`, handed over at `address`:
/// magic, version, header size, and a total and block size that fit
/// `bytes` and the address space. Returns the header and records (the
/// first `total size` bytes) and the whole block.
fn check_header(bytes: &[u8], address: u64) -> Result<(&[u8], MemRange), HandoffError> {
    let bad = |why: String| Err(HandoffError::BadHeader(why));
    if bytes.len() < HEADER_LEN {
        return bad(format!("{} bytes, shorter than the header", bytes.len()));
    }
    if bytes[..8] != MAGIC {
        return bad("no PVLKHAND magic".into());
    }
    let version = le_u32(bytes, field::VERSION);
    if version != VERSION {
        return Err(HandoffError::UnsupportedVersion(version));
    }
    let header_size = le_u32(bytes, field::HEADER_SIZE);
    if header_size as usize != HEADER_LEN {
        return bad(format!("header size {header_size}, expected {HEADER_LEN}"));
    }
    let total = le_u64(bytes, field::TOTAL_SIZE);
    let base = le_u64(bytes, field::BLOCK_BASE);
    let block_size = le_u64(bytes, field::BLOCK_SIZE);
    if total < HEADER_LEN as u64 || total > bytes.len() as u64 {
        return bad(format!(
            "total size {total} is outside {HEADER_LEN}..={}",
            bytes.len()
        ));
    }
    if block_size < total || block_size > MAX_BLOCK_LEN {
        return bad(format!(
            "block size {block_size} is smaller than the total size {total} or above {MAX_BLOCK_LEN}"
        ));
    }
    if base != address {
        return bad(format!(
            "it says it is at {base:#x}, but it was handed over at {address:#x}"
        ));
    }
    if base.checked_add(block_size).is_none() {
        return bad("the block wraps around the address space".into());
    }
    Ok((&bytes[..total as usize], MemRange::new(base, block_size)))
}

/// The records of a block, as [`read_records`] finds them.
struct Records<'a> {
    /// (kind, payload) of every record of a known kind, in order.
    known: Vec<(Kind, &'a [u8])>,
    /// How many records of kinds this version does not know were skipped.
    unknown: usize,
}

/// The records of a header-and-records `bytes` (its CRC checked), each
/// payload of a known kind checked. The records must fill `bytes`
/// exactly.
fn read_records(bytes: &[u8]) -> Result<Records<'_>, HandoffError> {
    let count = le_u32(bytes, field::RECORD_COUNT) as usize;
    let mut records: Vec<(Kind, &[u8])> = Vec::new();
    let mut unknown = 0;
    let mut at = HEADER_LEN;
    for index in 0..count {
        let record = record_at(bytes, at, index)?;
        at = record.next;
        let Some(kind) = record.kind else {
            unknown += 1;
            continue;
        };
        let bad_record = |why: String| HandoffError::BadRecord {
            index,
            kind: Some(kind),
            why,
        };
        check_payload(kind, record.payload).map_err(bad_record)?;
        let single = !matches!(kind, Kind::AcpiTable);
        if single && records.iter().any(|(k, _)| *k == kind) {
            return Err(bad_record("appears twice".into()));
        }
        records.push((kind, record.payload));
    }
    if at != bytes.len() {
        return Err(HandoffError::BadHeader(format!(
            "{} bytes after the last record",
            bytes.len().saturating_sub(at)
        )));
    }
    Ok(Records {
        known: records,
        unknown,
    })
}

/// One record as it stands in the block, before its kind's checks.
struct RawRecord<'a> {
    /// `None` for a kind this version does not know.
    kind: Option<Kind>,
    payload: &'a [u8],
    /// Where the next record starts: 8-byte aligned, at most the end of
    /// the block.
    next: usize,
}

/// Record `index`, at offset `at` of `bytes`: its header and payload must
/// lie inside `bytes`.
fn record_at(bytes: &[u8], at: usize, index: usize) -> Result<RawRecord<'_>, HandoffError> {
    let bad_record = |kind, why: String| Err(HandoffError::BadRecord { index, kind, why });
    if bytes.len() - at < RECORD_HEADER_LEN {
        return bad_record(None, "runs past the end of the block".into());
    }
    let kind = Kind::from_u32(le_u32(bytes, at));
    let len = le_u64(bytes, at + 8);
    let room = (bytes.len() - at - RECORD_HEADER_LEN) as u64;
    if len > room {
        return bad_record(
            kind,
            format!("{len} bytes, but only {room} are left in the block"),
        );
    }
    let len = len as usize;
    Ok(RawRecord {
        kind,
        payload: &bytes[at + RECORD_HEADER_LEN..at + RECORD_HEADER_LEN + len],
        next: (at + RECORD_HEADER_LEN + len)
            .checked_next_multiple_of(8)
            .unwrap_or(usize::MAX)
            .min(bytes.len()),
    })
}

/// The CRC of a header-and-records `bytes` with the CRC field taken as zero.
fn crc32_without_field(bytes: &[u8]) -> u32 {
    let crc = crc32_update(!0, &bytes[..field::CRC]);
    let crc = crc32_update(crc, &[0; 4]);
    !crc32_update(crc, &bytes[field::CRC + 4..])
}

/// Kind-specific checks of one payload.
fn check_payload(kind: Kind, payload: &[u8]) -> Result<(), String> {
    let ranges = |entry: usize| -> Result<(), String> {
        if !payload.len().is_multiple_of(entry) {
            return Err(format!(
                "{} bytes is not a whole number of {entry}-byte entries",
                payload.len()
            ));
        }
        for (i, e) in payload.chunks_exact(entry).enumerate() {
            let (base, size) = (le_u64(e, 0), le_u64(e, 8));
            if size == 0 || base.checked_add(size).is_none() {
                return Err(format!(
                    "entry {i}: {size:#x} bytes at {base:#x} is not a usable range"
                ));
            }
        }
        Ok(())
    };
    match kind {
        Kind::Ram => ranges(RAM_ENTRY_LEN),
        Kind::Reserved => ranges(RESERVED_ENTRY_LEN),
        Kind::AcpiTable => {
            if payload.len() < super::acpi::sdt::HEADER_LEN {
                return Err(format!(
                    "{} bytes, shorter than a table header",
                    payload.len()
                ));
            }
            let length = le_u32(payload, super::acpi::sdt::LENGTH) as usize;
            if length != payload.len() {
                return Err(format!(
                    "table {} says it is {length} bytes long, the record holds {}",
                    super::acpi::signature_str(&payload[..4]),
                    payload.len()
                ));
            }
            Ok(())
        }
        Kind::FirmwareDtb | Kind::VmDescription => {
            if payload.len() < FDT_HEADER_LEN {
                return Err(format!(
                    "{} bytes, shorter than an FDT header",
                    payload.len()
                ));
            }
            let magic = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
            let size = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
            if magic != FDT_MAGIC {
                return Err(format!("magic {magic:#010x} is not an FDT's"));
            }
            if size as usize > payload.len() || (size as usize) < FDT_HEADER_LEN {
                return Err(format!(
                    "FDT totalsize {size} does not fit the record's {} bytes",
                    payload.len()
                ));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bringup::efi::acpi::fake;
    use crate::bringup::efi::memmap::Reserved;
    use alloc::vec;

    const BASE: u64 = 0x7f00_0000;

    fn dtb(tag: u32) -> Vec<u8> {
        // A minimal empty FDT: header, empty reservation map, root node.
        let mut w = vm_fdt::FdtWriter::new().unwrap();
        let root = w.begin_node("").unwrap();
        w.property_u32("tag", tag).unwrap();
        w.end_node(root).unwrap();
        w.finish().unwrap()
    }

    fn memory() -> Memory {
        Memory {
            banks: vec![
                MemRange::new(0x4000_0000, 0x3000_0000),
                MemRange::new(0x8000_0000, 0x1000_0000),
            ],
            reserved: vec![
                Reserved {
                    range: MemRange::new(0x5000_0000, 0x20_0000),
                    kind: ReservedKind::RuntimeCode,
                },
                Reserved {
                    range: MemRange::new(0x5020_0000, 0x1000),
                    kind: ReservedKind::AcpiNvs,
                },
            ],
        }
    }

    /// A complete block as the EFI entry writes it.
    fn block() -> Vec<u8> {
        let mut buf = vec![0xeeu8; 0x4000];
        let mut w = Writer::new(&mut buf, BASE).unwrap();
        w.push(Kind::AcpiTable, &fake::table(b"APIC", &[1, 2, 3]))
            .unwrap();
        w.push(Kind::AcpiTable, &fake::table(b"GTDT", &[4; 60]))
            .unwrap();
        w.push(Kind::FirmwareDtb, &dtb(1)).unwrap();
        w.push(Kind::VmDescription, &dtb(2)).unwrap();
        w.push_memory(&memory()).unwrap();
        let used = w.finish();
        assert!(used < buf.len());
        buf
    }

    #[test]
    fn the_magic_is_not_an_fdts() {
        assert_ne!(MAGIC[..4], FDT_MAGIC.to_be_bytes());
        assert_ne!(MAGIC[..4], FDT_MAGIC.to_le_bytes());
    }

    #[test]
    fn crc32_is_ieee() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(
            !crc32_update(crc32_update(!0, b"1234"), b"56789"),
            0xcbf4_3926
        );
    }

    #[test]
    fn round_trip() {
        let buf = block();
        let probe = probe(&buf[..HEADER_LEN]).unwrap();
        assert_eq!(probe.block_size, 0x4000);
        let h = Handoff::parse(&buf, BASE).unwrap();
        assert_eq!(h.bytes().len() as u64, probe.total_size);
        assert_eq!(h.block(), MemRange::new(BASE, 0x4000));
        assert_eq!(h.ram(), memory().banks);
        assert_eq!(
            h.reserved(),
            [
                ReservedRegion {
                    range: MemRange::new(0x5000_0000, 0x20_0000),
                    name: "EFI runtime services code".into()
                },
                ReservedRegion {
                    range: MemRange::new(0x5020_0000, 0x1000),
                    name: "ACPI NVS memory".into()
                },
            ]
        );
        let tables = h.acpi_tables();
        assert_eq!(tables.len(), 2);
        assert_eq!(&tables[0][..4], b"APIC");
        assert_eq!(tables[1], &fake::table(b"GTDT", &[4; 60])[..]);
        assert_eq!(h.firmware_dtb(), Some(&dtb(1)[..]));
        assert_eq!(h.vm_description(), Some(&dtb(2)[..]));
        assert!(!h.ram_truncated());
        assert_eq!(h.unknown_records(), 0);
        // Every payload starts 8-byte aligned in the block.
        for t in tables {
            assert_eq!((t.as_ptr() as usize - buf.as_ptr() as usize) % 8, 0);
        }
    }

    #[test]
    fn only_ram_is_required() {
        let mut buf = vec![0u8; 256];
        let mut w = Writer::new(&mut buf, BASE).unwrap();
        w.push_memory(&Memory {
            banks: vec![MemRange::new(0x4000_0000, 0x1000_0000)],
            reserved: vec![],
        })
        .unwrap();
        w.finish();
        let h = Handoff::parse(&buf, BASE).unwrap();
        assert_eq!(h.ram().len(), 1);
        assert!(h.reserved().is_empty());
        assert!(h.acpi_tables().is_empty());
        assert_eq!(h.firmware_dtb(), None);
        assert_eq!(h.vm_description(), None);

        let mut buf = vec![0u8; 256];
        let mut w = Writer::new(&mut buf, BASE).unwrap();
        w.push(Kind::VmDescription, &dtb(2)).unwrap();
        w.finish();
        assert_eq!(Handoff::parse(&buf, BASE).unwrap_err(), HandoffError::NoRam);
    }

    #[test]
    fn ram_that_does_not_fit_is_cut_and_flagged() {
        let m = memory();
        let exact = HEADER_LEN + memory_len(m.banks.len(), m.reserved.len());
        let mut buf = vec![0u8; exact];
        let mut w = Writer::new(&mut buf, BASE).unwrap();
        w.push_memory(&m).unwrap();
        assert_eq!(w.finish(), exact);
        assert!(!Handoff::parse(&buf, BASE).unwrap().ram_truncated());

        let mut buf = vec![0u8; exact - RAM_ENTRY_LEN];
        let mut w = Writer::new(&mut buf, BASE).unwrap();
        w.push_memory(&m).unwrap();
        w.finish();
        let h = Handoff::parse(&buf, BASE).unwrap();
        assert!(h.ram_truncated());
        assert_eq!(h.ram(), m.banks[..1]);
        assert_eq!(h.reserved().len(), 2);

        // No room for the reserved regions: an error, never a silent loss.
        let mut buf = vec![0u8; HEADER_LEN + 40];
        let mut w = Writer::new(&mut buf, BASE).unwrap();
        assert_eq!(w.push_memory(&m), Err(Full));
        let mut tiny = [0u8; 8];
        assert!(Writer::new(&mut tiny, BASE).is_err());
    }

    #[test]
    fn unknown_records_are_skipped() {
        let mut buf = block();
        let total = le_u64(&buf, field::TOTAL_SIZE) as usize;
        // Append a record of kind 99 and fix the header.
        let extra = [99u32.to_le_bytes(), [0; 4]].concat();
        buf[total..total + 8].copy_from_slice(&extra);
        buf[total + 8..total + 16].copy_from_slice(&3u64.to_le_bytes());
        buf[total + 16..total + 24].copy_from_slice(&[7, 7, 7, 0, 0, 0, 0, 0]);
        let total = total + 24;
        buf[field::TOTAL_SIZE..field::TOTAL_SIZE + 8]
            .copy_from_slice(&(total as u64).to_le_bytes());
        let count = le_u32(&buf, field::RECORD_COUNT) + 1;
        buf[field::RECORD_COUNT..field::RECORD_COUNT + 4].copy_from_slice(&count.to_le_bytes());
        let crc = crc32_without_field(&buf[..total]);
        buf[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_le_bytes());
        let h = Handoff::parse(&buf, BASE).unwrap();
        assert_eq!(h.unknown_records(), 1);
        assert_eq!(h.acpi_tables().len(), 2);
    }

    /// Rewrites the CRC so that a deliberately bad field gets past it.
    fn resealed(mut buf: Vec<u8>) -> Vec<u8> {
        let total = (le_u64(&buf, field::TOTAL_SIZE) as usize).min(buf.len());
        if total >= HEADER_LEN {
            let crc = crc32_without_field(&buf[..total]);
            buf[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_le_bytes());
        }
        buf
    }

    #[test]
    fn bad_blocks_are_named() {
        let good = block();
        let at = |off: usize, bytes: &[u8], reseal: bool| {
            let mut b = good.clone();
            b[off..off + bytes.len()].copy_from_slice(bytes);
            if reseal { resealed(b) } else { b }
        };
        let err = |b: &[u8]| Handoff::parse(b, BASE).unwrap_err().to_string();
        assert!(err(&at(0, b"D00DFEED", false)).contains("magic"));
        assert!(err(&at(8, &2u32.to_le_bytes(), false)).contains("version 2"));
        assert!(err(&at(100, &[0x55], false)).contains("CRC-32"));
        assert!(err(&at(field::TOTAL_SIZE, &u64::MAX.to_le_bytes(), false)).contains("total size"));
        assert!(err(&at(field::BLOCK_SIZE, &0x10u64.to_le_bytes(), true)).contains("block size"));
        assert!(
            Handoff::parse(&good, BASE + 0x1000)
                .unwrap_err()
                .to_string()
                .contains("handed over at 0x7f001000")
        );
        // The first record's size made too large.
        let e = err(&at(HEADER_LEN + 8, &0x10_0000u64.to_le_bytes(), true));
        assert!(
            e.contains("record 0 (ACPI table)") && e.contains("left"),
            "{e}"
        );
        // The first ACPI table's Length no longer matching its record.
        let e = err(&at(HEADER_LEN + RECORD_HEADER_LEN + 4, &[0xff], true));
        assert!(
            e.contains("record 0 (ACPI table)") && e.contains("APIC"),
            "{e}"
        );
        // A record count larger than the records.
        let n = le_u32(&good, field::RECORD_COUNT) + 1;
        let e = err(&at(field::RECORD_COUNT, &n.to_le_bytes(), true));
        assert!(e.contains("past the end"), "{e}");
        // Fewer: bytes left over.
        let e = err(&at(field::RECORD_COUNT, &(n - 2).to_le_bytes(), true));
        assert!(e.contains("after the last record"), "{e}");
        assert!(err(&good[..40]).contains("shorter"));
    }

    #[test]
    fn bad_payloads() {
        let one = |kind: Kind, payload: &[u8]| {
            let mut buf = vec![0u8; 512];
            let mut w = Writer::new(&mut buf, BASE).unwrap();
            w.push(Kind::Ram, &[0u8; 0]).unwrap();
            w.push(kind, payload).unwrap();
            w.finish();
            Handoff::parse(&buf, BASE).map(|_| ())
        };
        let range = |base: u64, size: u64| [base.to_le_bytes(), size.to_le_bytes()].concat();
        assert!(one(Kind::AcpiTable, &fake::table(b"SPCR", &[])).is_ok());
        assert!(one(Kind::Ram, &range(0, 1)).is_err(), "two RAM records");
        assert!(one(Kind::Reserved, &[0; 23]).is_err());
        assert!(one(Kind::Reserved, &[range(1, 0), vec![0; 8]].concat()).is_err());
        assert!(one(Kind::Reserved, &[range(u64::MAX, 2), vec![0; 8]].concat()).is_err());
        assert!(one(Kind::AcpiTable, &[0; 20]).is_err());
        assert!(one(Kind::FirmwareDtb, &[0; 64]).is_err());
        let mut short = dtb(1);
        short.truncate(60);
        assert!(one(Kind::FirmwareDtb, &short).is_err());
        assert!(one(Kind::VmDescription, &dtb(3)).is_ok());
        // Reserved entries of a kind this version does not name stay
        // reserved, under a generic name.
        let mut buf = vec![0u8; 512];
        let mut w = Writer::new(&mut buf, BASE).unwrap();
        w.push(Kind::Ram, &range(0x1000, 0x1000)).unwrap();
        w.push(
            Kind::Reserved,
            &[range(0x1000, 0x100), 77u64.to_le_bytes().to_vec()].concat(),
        )
        .unwrap();
        w.finish();
        let h = Handoff::parse(&buf, BASE).unwrap();
        assert_eq!(h.reserved()[0].name, "reserved");
    }

    #[test]
    fn probe_checks_only_the_header() {
        let good = block();
        assert!(probe(&good[..HEADER_LEN]).is_some());
        assert!(probe(&good[..HEADER_LEN - 1]).is_none());
        assert!(probe(&dtb(1)).is_none());
        let mut huge = good.clone();
        huge[field::BLOCK_SIZE..field::BLOCK_SIZE + 8]
            .copy_from_slice(&(MAX_BLOCK_LEN + 1).to_le_bytes());
        assert!(probe(&huge).is_none());
    }

    #[test]
    fn hostile_blocks_never_panic() {
        let good = block();
        let mut rng = prng::Rng::new(0x2545_f491_4f6c_dd1d);
        let mut next = || rng.next_u64();
        for round in 0..3000 {
            let mut b = good.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % b.len() as u64) as usize;
                b[at] = next() as u8;
            }
            // Half the time, get past the CRC so the record checks run.
            if round % 2 == 0 {
                b = resealed(b);
            }
            if next() % 8 == 0 {
                let len = (next() % b.len() as u64) as usize;
                b.truncate(len);
            }
            if let Ok(h) = Handoff::parse(&b, BASE) {
                let _ = (h.ram(), h.reserved(), h.acpi_tables(), h.firmware_dtb());
            }
            let _ = probe(&b);
        }
    }
}
