//! Finding the firmware's ACPI tables from the RSDP, so that each can be
//! copied out of firmware memory (ACPI 6.5 section 5.2, "ACPI System
//! Description Tables").
//!
//! The RSDP (section 5.2.5.3) gives the XSDT (section 5.2.8), whose
//! entries are the 64-bit addresses of the other tables; the FADT (section
//! 5.2.9) names the DSDT, which the XSDT does not list. Every table the
//! walk reaches is a System Description Table: a 36-byte header (section
//! 5.2.6) whose `Length` covers the whole table, header included, and
//! whose bytes sum to zero.
//!
//! Memory is read through [`PhysMemory`], so the walk runs on the host
//! against made-up tables as well as on the machine. A table that cannot
//! be read, or whose length is absurd, is left out with a warning; only a
//! bad RSDP or XSDT stops the walk.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Physical memory as the walk sees it.
pub trait PhysMemory {
    /// `len` bytes at physical address `addr`, or `None` if they cannot be
    /// read (outside memory, wrapping around).
    fn read(&self, addr: u64, len: usize) -> Option<&[u8]>;
}

/// RSDP fields (ACPI 6.5 section 5.2.5.3, "Root System Description
/// Pointer (RSDP) Structure").
mod rsdp {
    pub const SIGNATURE: &[u8; 8] = b"RSD PTR ";
    /// Bytes covered by the first checksum (the ACPI 1.0 structure).
    pub const V1_LEN: usize = 20;
    pub const REVISION: usize = 15;
    pub const LENGTH: usize = 20;
    pub const XSDT_ADDRESS: usize = 24;
    /// The ACPI 2.0+ structure's size.
    pub const V2_LEN: usize = 36;
}

/// System description table header fields (section 5.2.6).
pub mod sdt {
    pub const SIGNATURE: usize = 0;
    pub const LENGTH: usize = 4;
    /// The header's size: the least any table can be.
    pub const HEADER_LEN: usize = 36;
}

/// FADT fields (section 5.2.9, "Fixed ACPI Description Table").
mod fadt {
    pub const SIGNATURE: &[u8; 4] = b"FACP";
    pub const DSDT: usize = 40;
    pub const X_DSDT: usize = 140;
}

/// The largest table copied (a big server's DSDT is well under 1 MiB).
pub const MAX_TABLE_LEN: usize = 16 << 20;
/// The most XSDT entries followed.
pub const MAX_TABLES: usize = 1024;

fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// Whether `bytes` sum to zero modulo 256, as every ACPI checksum requires.
pub fn checksum_ok(bytes: &[u8]) -> bool {
    bytes.iter().fold(0u8, |sum, b| sum.wrapping_add(*b)) == 0
}

/// A table's signature as text (`APIC`, `FACP`), for messages.
pub fn signature_str(signature: &[u8]) -> String {
    signature
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b)
            } else {
                '?'
            }
        })
        .collect()
}

/// One table found by [`tables`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table<'a> {
    /// Where the firmware keeps it.
    pub address: u64,
    /// The whole table, header included (`Length` bytes).
    pub bytes: &'a [u8],
}

impl Table<'_> {
    /// The table's signature (its first four bytes).
    pub fn signature(&self) -> [u8; 4] {
        let mut s = [0u8; 4];
        s.copy_from_slice(&self.bytes[..4]);
        s
    }
}

/// Why the tables cannot be found at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcpiError {
    /// The RSDP is unreadable or malformed.
    Rsdp(String),
    /// The XSDT is unreadable or malformed.
    Xsdt(String),
}

impl fmt::Display for AcpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rsdp(why) => write!(f, "ACPI RSDP: {why}"),
            Self::Xsdt(why) => write!(f, "ACPI XSDT: {why}"),
        }
    }
}

/// What [`tables`] found: the tables in XSDT order (then the DSDT), and a
/// warning for every table left out or suspicious.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found<'a> {
    pub tables: Vec<Table<'a>>,
    pub warnings: Vec<String>,
}

/// Reads one system description table at `address`: its header, then
/// `Length` bytes. `Err` says why it cannot be used.
fn read_table<M: PhysMemory + ?Sized>(mem: &M, address: u64) -> Result<&[u8], String> {
    let header = mem
        .read(address, sdt::HEADER_LEN)
        .ok_or_else(|| format!("its header at {address:#x} cannot be read"))?;
    let len = le_u32(header, sdt::LENGTH).unwrap_or(0) as usize;
    if !(sdt::HEADER_LEN..=MAX_TABLE_LEN).contains(&len) {
        return Err(format!(
            "Length {len} at {address:#x} is not between {} and {MAX_TABLE_LEN}",
            sdt::HEADER_LEN
        ));
    }
    mem.read(address, len)
        .ok_or_else(|| format!("its {len} bytes at {address:#x} cannot be read"))
}

/// Every table reachable from the RSDP at `rsdp_address`: the XSDT's
/// entries, in order, and the DSDT the FADT names. Each table appears
/// once; the XSDT itself is not among them (it only holds addresses).
pub fn tables<M: PhysMemory + ?Sized>(mem: &M, rsdp_address: u64) -> Result<Found<'_>, AcpiError> {
    let xsdt_address = xsdt_address(mem, rsdp_address)?;
    let xsdt = read_xsdt(mem, xsdt_address)?;
    let mut found = Found::default();
    let addresses = xsdt_entries(xsdt, &mut found.warnings);
    follow_entries(mem, addresses, &mut found);
    Ok(found)
}

/// The XSDT's address from the RSDP at `rsdp_address`, once the RSDP's
/// signature, both checksums, revision and length are checked.
fn xsdt_address<M: PhysMemory + ?Sized>(mem: &M, rsdp_address: u64) -> Result<u64, AcpiError> {
    let rsdp = mem
        .read(rsdp_address, rsdp::V2_LEN)
        .ok_or_else(|| AcpiError::Rsdp(format!("cannot read it at {rsdp_address:#x}")))?;
    if &rsdp[..8] != rsdp::SIGNATURE {
        return Err(AcpiError::Rsdp(format!(
            "no \"RSD PTR \" signature at {rsdp_address:#x}"
        )));
    }
    if !checksum_ok(&rsdp[..rsdp::V1_LEN]) {
        return Err(AcpiError::Rsdp("bad checksum".into()));
    }
    let revision = rsdp[rsdp::REVISION];
    if revision < 2 {
        return Err(AcpiError::Rsdp(format!(
            "revision {revision}: ACPI 1.0 has no XSDT; ACPI 2.0 or later is needed"
        )));
    }
    let length = le_u32(rsdp, rsdp::LENGTH).unwrap_or(0) as usize;
    if length < rsdp::V2_LEN {
        return Err(AcpiError::Rsdp(format!("Length {length} is too small")));
    }
    let whole = mem
        .read(rsdp_address, length)
        .ok_or_else(|| AcpiError::Rsdp(format!("cannot read its {length} bytes")))?;
    if !checksum_ok(whole) {
        return Err(AcpiError::Rsdp("bad extended checksum".into()));
    }
    let xsdt_address = le_u64(rsdp, rsdp::XSDT_ADDRESS).unwrap_or(0);
    if xsdt_address == 0 {
        return Err(AcpiError::Rsdp("XsdtAddress is 0".into()));
    }
    Ok(xsdt_address)
}

/// The XSDT at `address`, whole, if it reads and says it is one.
fn read_xsdt<M: PhysMemory + ?Sized>(mem: &M, address: u64) -> Result<&[u8], AcpiError> {
    let xsdt = read_table(mem, address).map_err(AcpiError::Xsdt)?;
    if &xsdt[..4] != b"XSDT" {
        return Err(AcpiError::Xsdt(format!(
            "signature at {address:#x} is {:?}",
            signature_str(&xsdt[..4])
        )));
    }
    Ok(xsdt)
}

/// The table addresses the XSDT lists, at most [`MAX_TABLES`] of them; a
/// bad checksum, a partial entry or too many entries add a warning.
fn xsdt_entries(xsdt: &[u8], warnings: &mut Vec<String>) -> Vec<u64> {
    if !checksum_ok(xsdt) {
        warnings.push("ACPI XSDT: bad checksum".into());
    }
    let entries = &xsdt[sdt::HEADER_LEN..];
    if !entries.len().is_multiple_of(8) {
        warnings.push("ACPI XSDT: Length is not a whole number of entries".into());
    }
    let count = entries.len() / 8;
    if count > MAX_TABLES {
        warnings.push(format!(
            "ACPI XSDT: {count} entries; only the first {MAX_TABLES} are used"
        ));
    }
    (0..count.min(MAX_TABLES))
        .filter_map(|i| le_u64(entries, i * 8))
        .collect()
}

/// Reads the table at each of `addresses` into `found`, in order, once
/// each, and the DSDT a FADT names after them. A table that cannot be
/// read is left out with a warning; one with a bad checksum is kept with
/// one.
fn follow_entries<'m, M: PhysMemory + ?Sized>(
    mem: &'m M,
    mut addresses: Vec<u64>,
    found: &mut Found<'m>,
) {
    let mut next = 0;
    while next < addresses.len() {
        let address = addresses[next];
        next += 1;
        if address == 0 || found.tables.iter().any(|t| t.address == address) {
            continue;
        }
        let bytes = match read_table(mem, address) {
            Ok(bytes) => bytes,
            Err(why) => {
                found
                    .warnings
                    .push(format!("ACPI table at {address:#x} left out: {why}"));
                continue;
            }
        };
        let signature = signature_str(&bytes[..4]);
        if !checksum_ok(bytes) {
            found.warnings.push(format!(
                "ACPI table {signature} at {address:#x}: bad checksum"
            ));
        }
        if let Some(dsdt) = fadt_dsdt(bytes)
            && !addresses.contains(&dsdt)
        {
            addresses.push(dsdt);
        }
        found.tables.push(Table { address, bytes });
    }
}

/// The DSDT's address when `table` is the FADT: X_DSDT when set, else
/// DSDT.
fn fadt_dsdt(table: &[u8]) -> Option<u64> {
    if &table[..4] != fadt::SIGNATURE {
        return None;
    }
    le_u64(table, fadt::X_DSDT)
        .filter(|&a| a != 0)
        .or_else(|| le_u32(table, fadt::DSDT).map(u64::from))
        .filter(|&a| a != 0)
}

/// Test tables: a little physical memory with an RSDP, an XSDT and some
/// tables; shared with the handoff tests.
#[cfg(test)]
pub(crate) mod fake {
    use super::*;
    use alloc::vec;

    /// Memory from `base`, as one buffer.
    pub struct Memory {
        pub base: u64,
        pub bytes: Vec<u8>,
    }

    impl PhysMemory for Memory {
        fn read(&self, addr: u64, len: usize) -> Option<&[u8]> {
            let start = usize::try_from(addr.checked_sub(self.base)?).ok()?;
            self.bytes.get(start..start.checked_add(len)?)
        }
    }

    /// Fixes the checksum byte at `at` so that `bytes` sum to zero.
    pub fn fix_checksum(bytes: &mut [u8], at: usize) {
        bytes[at] = 0;
        let sum = bytes.iter().fold(0u8, |s, b| s.wrapping_add(*b));
        bytes[at] = 0u8.wrapping_sub(sum);
    }

    /// A table with `signature` and `body` after the header.
    pub fn table(signature: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut t = vec![0u8; sdt::HEADER_LEN];
        t[..4].copy_from_slice(signature);
        t.extend_from_slice(body);
        let len = t.len() as u32;
        t[4..8].copy_from_slice(&len.to_le_bytes());
        t[8] = 2;
        t[10..16].copy_from_slice(b"PVLOCK");
        fix_checksum(&mut t, 9);
        t
    }

    /// An RSDP for `xsdt`.
    pub fn rsdp(xsdt: u64) -> Vec<u8> {
        let mut r = vec![0u8; 36];
        r[..8].copy_from_slice(b"RSD PTR ");
        r[9..15].copy_from_slice(b"PVLOCK");
        r[15] = 2;
        r[20..24].copy_from_slice(&36u32.to_le_bytes());
        r[24..32].copy_from_slice(&xsdt.to_le_bytes());
        fix_checksum(&mut r[..20], 8);
        fix_checksum(&mut r, 32);
        r
    }

    /// Where [`machine`] puts table `index` of `tables`.
    pub fn address_of(base: u64, tables: &[Vec<u8>], index: usize) -> u64 {
        base + 0x100
            + tables[..index]
                .iter()
                .map(|t| (t.len() as u64).next_multiple_of(16))
                .sum::<u64>()
    }

    /// Lays out `tables` after an RSDP and an XSDT listing the first
    /// `listed` of them (plus `extra` entries), 16-byte aligned, from
    /// `base`. Returns the memory and each table's address.
    pub fn machine(
        base: u64,
        tables: &[Vec<u8>],
        listed: usize,
        extra: &[u64],
    ) -> (Memory, Vec<u64>) {
        let mut at = base + 0x100;
        let mut addresses = Vec::new();
        for t in tables {
            addresses.push(at);
            at += (t.len() as u64).next_multiple_of(16);
        }
        let xsdt_address = at;
        let entries: Vec<u8> = addresses[..listed]
            .iter()
            .chain(extra)
            .flat_map(|a| a.to_le_bytes())
            .collect();
        let xsdt = table(b"XSDT", &entries);
        let mut bytes = vec![0u8; (xsdt_address - base) as usize + xsdt.len()];
        bytes[..36].copy_from_slice(&rsdp(xsdt_address));
        for (t, a) in tables.iter().zip(&addresses) {
            let off = (a - base) as usize;
            bytes[off..off + t.len()].copy_from_slice(t);
        }
        let off = (xsdt_address - base) as usize;
        bytes[off..].copy_from_slice(&xsdt);
        (Memory { base, bytes }, addresses)
    }
}

#[cfg(test)]
mod tests {
    use super::fake::*;
    use super::*;
    use alloc::vec;

    /// A FADT (ACPI 6.5 revision: 276 bytes) naming `dsdt` in X_DSDT or,
    /// when `legacy`, in the 32-bit DSDT field.
    fn fadt(dsdt: u64, legacy: bool) -> Vec<u8> {
        let mut body = vec![0u8; 276 - 36];
        if legacy {
            body[40 - 36..44 - 36].copy_from_slice(&(dsdt as u32).to_le_bytes());
        } else {
            body[140 - 36..148 - 36].copy_from_slice(&dsdt.to_le_bytes());
        }
        table(b"FACP", &body)
    }

    #[test]
    fn walks_the_xsdt_and_adds_the_dsdt() {
        let madt = table(b"APIC", &[1, 2, 3, 4]);
        let dsdt = table(b"DSDT", &[0x10; 20]);
        for legacy in [false, true] {
            // The DSDT is third and left out of the XSDT: only the FADT names it.
            let layout = [madt.clone(), fadt(0, legacy), dsdt.clone()];
            let dsdt_at = address_of(0x1000, &layout, 2);
            let all = [madt.clone(), fadt(dsdt_at, legacy), dsdt.clone()];
            let (mem, _) = machine(0x1000, &all, 2, &[]);
            let found = tables(&mem, 0x1000).unwrap();
            let sigs: Vec<[u8; 4]> = found.tables.iter().map(Table::signature).collect();
            assert_eq!(sigs, [*b"APIC", *b"FACP", *b"DSDT"]);
            assert_eq!(found.tables[0].bytes, &madt[..]);
            assert_eq!(found.tables[2].address, dsdt_at);
            assert_eq!(found.tables[2].bytes, &dsdt[..]);
            assert!(found.warnings.is_empty(), "{:?}", found.warnings);
            // Listed in the XSDT too, and twice: still once.
            let (mem, _) = machine(0x1000, &all, 3, &[dsdt_at]);
            assert_eq!(tables(&mem, 0x1000).unwrap().tables.len(), 3);
        }
    }

    #[test]
    fn bad_tables_are_left_out_with_a_warning() {
        let good = table(b"GTDT", &[7; 8]);
        let mut bad_sum = table(b"SPCR", &[1; 8]);
        bad_sum[20] ^= 0xff;
        let (mem, _) = machine(0x8000, &[good.clone(), bad_sum], 2, &[0x10, 0xdead_0000, 0]);
        let found = tables(&mem, 0x8000).unwrap();
        // A bad checksum is only a warning: the table is still copied.
        assert_eq!(found.tables.len(), 2);
        assert_eq!(found.warnings.len(), 3, "{:?}", found.warnings);
        assert!(found.warnings[0].contains("SPCR") && found.warnings[0].contains("checksum"));
        assert!(found.warnings[1].contains("0x10"));
        assert!(found.warnings[2].contains("0xdead0000"));
    }

    #[test]
    fn absurd_lengths_are_refused() {
        let mut t = table(b"BIG ", &[]);
        t[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut short = table(b"TINY", &[]);
        short[4..8].copy_from_slice(&8u32.to_le_bytes());
        let (mem, _) = machine(0, &[t, short], 2, &[]);
        let found = tables(&mem, 0).unwrap();
        assert!(found.tables.is_empty());
        assert_eq!(found.warnings.len(), 2);
    }

    #[test]
    fn bad_rsdp_or_xsdt_stops_the_walk() {
        let (mem, _) = machine(0x1000, &[table(b"APIC", &[])], 1, &[]);
        assert!(tables(&mem, 0x1000).is_ok());
        assert!(matches!(tables(&mem, 0x2000), Err(AcpiError::Rsdp(_))));
        let mut broken = Memory {
            base: mem.base,
            bytes: mem.bytes.clone(),
        };
        broken.bytes[0] = b'X';
        assert!(matches!(tables(&broken, 0x1000), Err(AcpiError::Rsdp(_))));
        let mut v1 = Memory {
            base: mem.base,
            bytes: mem.bytes.clone(),
        };
        v1.bytes[15] = 0;
        fix_checksum(&mut v1.bytes[..20], 8);
        let err = tables(&v1, 0x1000).unwrap_err();
        assert!(err.to_string().contains("revision 0"), "{err}");
        let mut no_xsdt = Memory {
            base: mem.base,
            bytes: mem.bytes.clone(),
        };
        no_xsdt.bytes[24..32].copy_from_slice(&0x10u64.to_le_bytes());
        fix_checksum(&mut no_xsdt.bytes[..36], 32);
        assert!(matches!(tables(&no_xsdt, 0x1000), Err(AcpiError::Xsdt(_))));
    }

    #[test]
    fn hostile_memory_never_panics() {
        let (mem, _) = machine(0x1000, &[table(b"APIC", &[9; 40])], 1, &[]);
        let mut rng = prng::Rng::new(0x9e37_79b9_7f4a_7c15);
        for _ in 0..2000 {
            let mut m = Memory {
                base: mem.base,
                bytes: mem.bytes.clone(),
            };
            for _ in 0..4 {
                let r = rng.next_u64();
                let at = (r % m.bytes.len() as u64) as usize;
                m.bytes[at] = (r >> 32) as u8;
            }
            let _ = tables(&m, 0x1000);
        }
    }
}
