//! Identity-mapped stage-1 translation tables for the EL1&0 regime: 4 KiB
//! granule, 48-bit virtual addresses, four levels (Arm ARM D8.2 "Translation
//! table descriptor formats").
//!
//! A [`Mapper`] writes descriptors into a fixed pool of [`Table`]s with plain
//! stores and no allocation, so the runtime can build its map before the MMU
//! (and with it atomics and caches) is on. Each call to [`Mapper::map`] or
//! [`Mapper::unmap`] sets a range to one state, using the largest block that
//! fits (1 GiB, 2 MiB, 4 KiB) and splitting an existing block into a
//! next-level table where a range covers only part of it. Later calls win,
//! so a map is built from the coarse to the fine: RAM first, then the
//! image's read-only parts, then the unmapped guard pages.
//!
//! The same code runs in host tests: a table's "physical address" is simply
//! its address, exactly as under the runtime's identity map.

use core::fmt;

/// Translation granule and page size.
pub const PAGE_SIZE: u64 = 4096;
/// Descriptors per table.
const ENTRIES: usize = 512;
/// Bits of virtual address translated by TTBR0_EL1 (TCR_EL1.T0SZ = 64 - 48).
pub const VA_BITS: u32 = 48;
/// The level of the root table for 48-bit VAs and a 4 KiB granule.
const ROOT_LEVEL: u32 = 0;
/// The last level (pages).
const LEAF_LEVEL: u32 = 3;

/// Descriptor bit 0: valid.
const VALID: u64 = 1 << 0;
/// Descriptor bit 1: at levels 0-2 "table" (else block); at level 3 it must
/// be 1 for a page.
const TABLE_OR_PAGE: u64 = 1 << 1;
/// Lower attributes: AttrIndx[2:0], an index into MAIR_EL1.
const ATTR_INDEX_SHIFT: u32 = 2;
/// AP[2]: read-only (AP[1] = 0: no EL0 access).
const AP_READ_ONLY: u64 = 1 << 7;
/// SH[1:0] = 0b11: Inner Shareable.
const INNER_SHAREABLE: u64 = 0b11 << 8;
/// AF: the access flag, set so that no access flag fault is ever taken.
const ACCESS_FLAG: u64 = 1 << 10;
/// PXN: never executable at EL1.
const PRIVILEGED_EXECUTE_NEVER: u64 = 1 << 53;
/// UXN: never executable at EL0.
const UNPRIVILEGED_EXECUTE_NEVER: u64 = 1 << 54;
/// Output address bits [47:12] of a descriptor.
const ADDRESS_MASK: u64 = ((1 << VA_BITS) - 1) & !(PAGE_SIZE - 1);

/// MAIR_EL1 attribute index of Device-nGnRE memory.
pub const MAIR_INDEX_DEVICE: u64 = 0;
/// MAIR_EL1 attribute index of Normal write-back cacheable memory.
pub const MAIR_INDEX_NORMAL: u64 = 1;

/// One translation table: 512 descriptors, 4 KiB aligned.
#[derive(Clone)]
#[repr(C, align(4096))]
pub struct Table(pub [u64; ENTRIES]);

impl Table {
    /// A table with every entry invalid.
    pub const EMPTY: Table = Table([0; ENTRIES]);
}

/// What kind of memory a range is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// Device-nGnRE: MMIO registers. Never executable.
    Device,
    /// Normal write-back cacheable, inner shareable: RAM.
    Normal,
}

/// Access permissions and memory type of a mapped range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub kind: MemoryKind,
    pub writable: bool,
    pub executable: bool,
}

impl Attributes {
    /// Read-write device registers.
    pub const DEVICE: Self = Self {
        kind: MemoryKind::Device,
        writable: true,
        executable: false,
    };
    /// Read-write data (RAM).
    pub const DATA: Self = Self {
        kind: MemoryKind::Normal,
        writable: true,
        executable: false,
    };
    /// Read-only data.
    pub const READ_ONLY: Self = Self {
        kind: MemoryKind::Normal,
        writable: false,
        executable: false,
    };
    /// Code: read-only and executable.
    pub const CODE: Self = Self {
        kind: MemoryKind::Normal,
        writable: false,
        executable: true,
    };

    /// The block/page descriptor bits (without valid, type and address).
    fn descriptor_bits(self) -> u64 {
        let mut bits = ACCESS_FLAG | UNPRIVILEGED_EXECUTE_NEVER;
        bits |= match self.kind {
            MemoryKind::Device => {
                (MAIR_INDEX_DEVICE << ATTR_INDEX_SHIFT) | PRIVILEGED_EXECUTE_NEVER
            }
            MemoryKind::Normal => (MAIR_INDEX_NORMAL << ATTR_INDEX_SHIFT) | INNER_SHAREABLE,
        };
        if !self.writable {
            bits |= AP_READ_ONLY;
        }
        if !self.executable {
            bits |= PRIVILEGED_EXECUTE_NEVER;
        }
        bits
    }

    /// Decodes the attributes of a valid block or page descriptor.
    fn from_descriptor(desc: u64) -> Self {
        let index = (desc >> ATTR_INDEX_SHIFT) & 0b111;
        Self {
            kind: if index == MAIR_INDEX_DEVICE {
                MemoryKind::Device
            } else {
                MemoryKind::Normal
            },
            writable: desc & AP_READ_ONLY == 0,
            executable: desc & PRIVILEGED_EXECUTE_NEVER == 0,
        }
    }
}

/// Why a range could not be mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// The range is empty, not page aligned, or reaches past 2^48.
    BadRange { start: u64, end: u64 },
    /// Every table of the pool is in use.
    OutOfTables,
    /// The tables are live (the MMU uses them) and the change would replace
    /// a valid entry, which needs a break-before-make sequence this mapper
    /// does not perform.
    LiveEntryChange { address: u64 },
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::BadRange { start, end } => write!(
                f,
                "range {start:#x}..{end:#x} is empty, not page aligned or beyond 48-bit addresses"
            ),
            MapError::OutOfTables => write!(f, "out of translation tables"),
            MapError::LiveEntryChange { address } => write!(
                f,
                "changing the live mapping of {address:#x} would need break-before-make"
            ),
        }
    }
}

/// Builds identity mappings in a pool of tables whose first entry is the
/// root (level 0) table.
pub struct Mapper<'a> {
    tables: &'a mut [Table],
    /// Tables in use: the root and every table a descriptor points to.
    used: usize,
    /// The MMU walks these tables: only invalid entries may become valid.
    live: bool,
}

/// Bytes one entry of a table at `level` maps.
const fn entry_size(level: u32) -> u64 {
    1 << (12 + 9 * (LEAF_LEVEL - level))
}

impl<'a> Mapper<'a> {
    /// Starts a new map in `tables`, clearing the root. `tables[0]` becomes
    /// the root table whose address goes into TTBR0_EL1.
    ///
    /// # Panics
    /// If `tables` is empty.
    pub fn new(tables: &'a mut [Table]) -> Self {
        tables[0].0.fill(0);
        Self {
            tables,
            used: 1,
            live: false,
        }
    }

    /// Continues the map that a [`Mapper::new`] over the same pool built,
    /// whose first `used` tables are in use, now that the MMU walks it:
    /// only unmapped ranges can be mapped.
    pub fn resume_live(tables: &'a mut [Table], used: usize) -> Self {
        Self {
            tables,
            used: used.max(1),
            live: true,
        }
    }

    /// The root table's (physical = virtual) address, for TTBR0_EL1.
    pub fn root_address(&self) -> u64 {
        table_address(&self.tables[0])
    }

    /// How many tables of the pool are in use.
    pub fn tables_used(&self) -> usize {
        self.used
    }

    /// Identity-maps `[start, end)` with `attributes`.
    pub fn map(&mut self, start: u64, end: u64, attributes: Attributes) -> Result<(), MapError> {
        self.set(start, end, Some(attributes))
    }

    /// Makes `[start, end)` unmapped (e.g. a guard page).
    pub fn unmap(&mut self, start: u64, end: u64) -> Result<(), MapError> {
        self.set(start, end, None)
    }

    /// What `address` is mapped as, if it is.
    pub fn lookup(&self, address: u64) -> Option<Attributes> {
        let mut table = 0;
        let mut level = ROOT_LEVEL;
        loop {
            let index = ((address >> (12 + 9 * (LEAF_LEVEL - level))) as usize) % ENTRIES;
            let desc = self.tables[table].0[index];
            if desc & VALID == 0 {
                return None;
            }
            if level == LEAF_LEVEL || desc & TABLE_OR_PAGE == 0 {
                return Some(Attributes::from_descriptor(desc));
            }
            table = self.table_index(desc & ADDRESS_MASK)?;
            level += 1;
        }
    }

    fn set(
        &mut self,
        start: u64,
        end: u64,
        attributes: Option<Attributes>,
    ) -> Result<(), MapError> {
        if start >= end
            || !start.is_multiple_of(PAGE_SIZE)
            || !end.is_multiple_of(PAGE_SIZE)
            || end > 1 << VA_BITS
        {
            return Err(MapError::BadRange { start, end });
        }
        self.set_in(0, ROOT_LEVEL, 0, start, end, attributes)
    }

    /// Sets `[start, end)` (inside the range the table covers, starting at
    /// `base`) in table `table` at `level`.
    fn set_in(
        &mut self,
        table: usize,
        level: u32,
        base: u64,
        start: u64,
        end: u64,
        attributes: Option<Attributes>,
    ) -> Result<(), MapError> {
        let size = entry_size(level);
        let first = ((start - base) / size) as usize;
        let last = ((end - 1 - base) / size) as usize;
        for index in first..=last {
            let entry_start = base + index as u64 * size;
            let entry_end = entry_start + size;
            let (from, to) = (start.max(entry_start), end.min(entry_end));
            let desc = self.tables[table].0[index];
            let whole = from == entry_start && to == entry_end;
            // 4 KiB granule: blocks exist at levels 1 and 2, pages at 3.
            if whole && level >= 1 {
                let new = match attributes {
                    Some(a) => {
                        let kind = if level == LEAF_LEVEL {
                            TABLE_OR_PAGE
                        } else {
                            0
                        };
                        VALID | kind | entry_start | a.descriptor_bits()
                    }
                    None => 0,
                };
                if self.live && desc & VALID != 0 && desc != new {
                    return Err(MapError::LiveEntryChange {
                        address: entry_start,
                    });
                }
                // A table that was there is simply no longer referenced
                // (the pool only grows; maps are built once).
                self.tables[table].0[index] = new;
                continue;
            }
            let child = if desc & VALID == 0 {
                if attributes.is_none() {
                    continue; // already unmapped
                }
                let child = self.allocate()?;
                self.link(table, index, child);
                child
            } else if desc & TABLE_OR_PAGE != 0 {
                // Levels 0-2 only: a level-3 entry is always `whole`.
                self.table_index(desc & ADDRESS_MASK)
                    .expect("table descriptors only point into the pool")
            } else {
                if self.live {
                    return Err(MapError::LiveEntryChange {
                        address: entry_start,
                    });
                }
                // Split the block: the next level maps the same range with
                // the same attributes, in smaller pieces.
                let child_size = entry_size(level + 1);
                let kind = if level + 1 == LEAF_LEVEL {
                    TABLE_OR_PAGE
                } else {
                    0
                };
                let child = self.allocate()?;
                for (j, e) in self.tables[child].0.iter_mut().enumerate() {
                    *e = (desc & !ADDRESS_MASK) | kind | (entry_start + j as u64 * child_size);
                }
                self.link(table, index, child);
                child
            };
            self.set_in(child, level + 1, entry_start, from, to, attributes)?;
        }
        Ok(())
    }

    /// Takes an empty table from the pool. (Tables are filled in place: a
    /// 4 KiB table passed by value would cost that much stack per level.)
    fn allocate(&mut self) -> Result<usize, MapError> {
        if self.used == self.tables.len() {
            return Err(MapError::OutOfTables);
        }
        let index = self.used;
        self.tables[index].0.fill(0);
        self.used += 1;
        Ok(index)
    }

    fn link(&mut self, table: usize, index: usize, child: usize) {
        let address = table_address(&self.tables[child]);
        self.tables[table].0[index] = VALID | TABLE_OR_PAGE | address;
    }

    fn table_index(&self, address: u64) -> Option<usize> {
        self.tables[..self.used]
            .iter()
            .position(|t| table_address(t) == address)
    }
}

fn table_address(table: &Table) -> u64 {
    table as *const Table as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn pool(n: usize) -> Vec<Table> {
        vec![Table::EMPTY; n]
    }

    #[test]
    fn whole_gigabyte_is_one_block() {
        let mut tables = pool(4);
        let mut m = Mapper::new(&mut tables);
        m.map(GIB, 2 * GIB, Attributes::DATA).unwrap();
        assert_eq!(m.tables_used(), 2, "root + one level-1 table");
        assert_eq!(m.lookup(GIB), Some(Attributes::DATA));
        assert_eq!(m.lookup(2 * GIB - PAGE_SIZE), Some(Attributes::DATA));
        assert_eq!(m.lookup(GIB - PAGE_SIZE), None);
        assert_eq!(m.lookup(2 * GIB), None);
    }

    #[test]
    fn unaligned_ram_uses_smaller_blocks_and_pages() {
        let mut tables = pool(8);
        let mut m = Mapper::new(&mut tables);
        let (start, end) = (GIB + 3 * PAGE_SIZE, GIB + 5 * MIB);
        m.map(start, end, Attributes::DATA).unwrap();
        assert_eq!(m.lookup(start - PAGE_SIZE), None);
        assert_eq!(m.lookup(start), Some(Attributes::DATA));
        assert_eq!(m.lookup(GIB + 2 * MIB), Some(Attributes::DATA));
        assert_eq!(m.lookup(end - PAGE_SIZE), Some(Attributes::DATA));
        assert_eq!(m.lookup(end), None);
    }

    #[test]
    fn later_calls_split_blocks_and_keep_the_rest() {
        let mut tables = pool(8);
        let mut m = Mapper::new(&mut tables);
        m.map(GIB, 2 * GIB, Attributes::DATA).unwrap();
        let text = GIB + 0x8_0000;
        m.map(text, text + 0x3000, Attributes::CODE).unwrap();
        let guard = GIB + 0x40_0000;
        m.unmap(guard, guard + PAGE_SIZE).unwrap();
        assert_eq!(m.lookup(text), Some(Attributes::CODE));
        assert_eq!(m.lookup(text + 0x2000), Some(Attributes::CODE));
        assert_eq!(m.lookup(text + 0x3000), Some(Attributes::DATA));
        assert_eq!(m.lookup(text - PAGE_SIZE), Some(Attributes::DATA));
        assert_eq!(m.lookup(guard), None);
        assert_eq!(m.lookup(guard - PAGE_SIZE), Some(Attributes::DATA));
        assert_eq!(m.lookup(guard + PAGE_SIZE), Some(Attributes::DATA));
        assert_eq!(m.lookup(GIB + 512 * MIB), Some(Attributes::DATA));
    }

    #[test]
    fn device_pages_are_never_executable_and_descriptors_are_well_formed() {
        let mut tables = pool(8);
        {
            let mut m = Mapper::new(&mut tables);
            m.map(0x0900_0000, 0x0900_1000, Attributes::DEVICE).unwrap();
            assert_eq!(m.lookup(0x0900_0000), Some(Attributes::DEVICE));
        }
        // Walk by hand: L0[0] -> L1[0] -> L2[72] -> L3[0].
        let l1 = tables[0].0[0] & ADDRESS_MASK;
        assert_eq!(tables[0].0[0] & 0b11, 0b11);
        assert_eq!(l1, &tables[1] as *const Table as u64);
        let l2 = tables[1].0[0] & ADDRESS_MASK;
        assert_eq!(l2, &tables[2] as *const Table as u64);
        let l3 = tables[2].0[0x0900_0000 / (2 << 20)] & ADDRESS_MASK;
        assert_eq!(l3, &tables[3] as *const Table as u64);
        let page = tables[3].0[0];
        assert_eq!(page & ADDRESS_MASK, 0x0900_0000);
        assert_eq!(page & 0b11, 0b11, "valid page");
        assert_ne!(page & ACCESS_FLAG, 0);
        assert_ne!(page & PRIVILEGED_EXECUTE_NEVER, 0);
        assert_ne!(page & UNPRIVILEGED_EXECUTE_NEVER, 0);
        assert_eq!((page >> ATTR_INDEX_SHIFT) & 0b111, MAIR_INDEX_DEVICE);
    }

    #[test]
    fn unmapping_nothing_allocates_nothing() {
        let mut tables = pool(2);
        let mut m = Mapper::new(&mut tables);
        m.unmap(GIB, GIB + PAGE_SIZE).unwrap();
        assert_eq!(m.tables_used(), 1);
    }

    #[test]
    fn bad_ranges_and_exhaustion_are_errors() {
        let mut tables = pool(2);
        let mut m = Mapper::new(&mut tables);
        for (s, e) in [(GIB, GIB), (GIB + 1, 2 * GIB), (0, (1 << 48) + PAGE_SIZE)] {
            assert_eq!(
                m.map(s, e, Attributes::DATA),
                Err(MapError::BadRange { start: s, end: e })
            );
        }
        assert_eq!(
            m.map(0, PAGE_SIZE, Attributes::DATA),
            Err(MapError::OutOfTables)
        );
    }

    #[test]
    fn live_tables_only_gain_mappings() {
        let mut tables = pool(8);
        let used = {
            let mut m = Mapper::new(&mut tables);
            m.map(GIB, GIB + 2 * MIB, Attributes::DATA).unwrap();
            m.tables_used()
        };
        let mut m = Mapper::resume_live(&mut tables, used);
        // New mappings next to existing ones are fine, as is repeating one.
        m.map(GIB + 2 * MIB, GIB + 2 * MIB + PAGE_SIZE, Attributes::DEVICE)
            .unwrap();
        m.map(GIB, GIB + 2 * MIB, Attributes::DATA).unwrap();
        assert_eq!(
            m.lookup(GIB + 2 * MIB),
            Some(Attributes::DEVICE),
            "mapped into a fresh table"
        );
        // Changing or splitting what the MMU may be using is refused.
        assert_eq!(
            m.map(GIB, GIB + PAGE_SIZE, Attributes::CODE),
            Err(MapError::LiveEntryChange { address: GIB })
        );
        assert_eq!(
            m.unmap(GIB, GIB + 2 * MIB),
            Err(MapError::LiveEntryChange { address: GIB })
        );
    }
}
