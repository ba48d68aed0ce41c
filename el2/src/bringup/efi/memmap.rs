//! The UEFI memory map as the hypervisor's RAM banks and reserved regions.
//!
//! `GetMemoryMap()` (UEFI 2.10 section 7.2) describes memory as
//! `EFI_MEMORY_DESCRIPTOR`s, `DescriptorSize` bytes apart (the firmware
//! may make them larger than the structure, so the stride is its word,
//! not `size_of`). After `ExitBootServices()` (section 7.4) the memory
//! types mean (section 7.2, table "Memory Type Usage after
//! ExitBootServices()"):
//!
//! | type | here |
//! |---|---|
//! | `EfiConventionalMemory`, `EfiBootServicesCode/Data`, `EfiLoaderCode/Data` | RAM, free to use |
//! | `EfiRuntimeServicesCode/Data` | RAM the firmware keeps: reserved |
//! | `EfiACPIReclaimMemory`, `EfiACPIMemoryNVS` | RAM holding ACPI tables / firmware state: reserved (the hypervisor copies the tables it needs) |
//! | `EfiReservedMemoryType`, `EfiUnusableMemory`, `EfiMemoryMappedIO(PortSpace)`, `EfiPalCode`, `EfiPersistentMemory`, `EfiUnacceptedMemoryType`, unknown types | not RAM |
//!
//! Attributes refine that (section 7.2, "Memory Attribute Definitions"):
//! RAM must be write-back cacheable (`EFI_MEMORY_WB`) to be used as
//! ordinary memory; a range the firmware needs at run time
//! (`EFI_MEMORY_RUNTIME`) is reserved whatever its type, and so is
//! specific-purpose memory (`EFI_MEMORY_SP`), which is meant for particular
//! users and not for general allocation.
//!
//! The result follows the device tree's model, which `platform` and the
//! rest of the hypervisor use: memory *banks* (a `/memory` node's `reg`)
//! and *reserved regions* inside them (`/reserved-memory`). A bank is a
//! maximal run of touching ranges that are either free RAM or reserved
//! RAM, containing at least some free RAM; the reserved ranges in a bank
//! become named reserved regions. Firmware bugs are resolved towards
//! safety: where descriptors overlap, "not RAM" beats "reserved", which
//! beats "free RAM", so the hypervisor never gives away a byte any
//! descriptor says is not free.

use alloc::vec::Vec;
use platform::MemRange;

use super::PAGE_SIZE;

/// `EFI_MEMORY_TYPE` values (UEFI 2.10 section 7.2, `EFI_MEMORY_TYPE`).
pub mod kind {
    pub const RESERVED: u32 = 0;
    pub const LOADER_CODE: u32 = 1;
    pub const LOADER_DATA: u32 = 2;
    pub const BOOT_SERVICES_CODE: u32 = 3;
    pub const BOOT_SERVICES_DATA: u32 = 4;
    pub const RUNTIME_SERVICES_CODE: u32 = 5;
    pub const RUNTIME_SERVICES_DATA: u32 = 6;
    pub const CONVENTIONAL: u32 = 7;
    pub const UNUSABLE: u32 = 8;
    pub const ACPI_RECLAIM: u32 = 9;
    pub const ACPI_NVS: u32 = 10;
    pub const MMIO: u32 = 11;
    pub const MMIO_PORT_SPACE: u32 = 12;
    pub const PAL_CODE: u32 = 13;
    pub const PERSISTENT: u32 = 14;
    pub const UNACCEPTED: u32 = 15;
}

/// Memory attribute bits (UEFI 2.10 section 7.2, "Memory Attribute
/// Definitions").
pub mod attribute {
    /// Write-back cacheable.
    pub const WB: u64 = 0x8;
    /// Specific-purpose memory.
    pub const SP: u64 = 0x4_0000;
    /// The firmware needs the range at run time.
    pub const RUNTIME: u64 = 0x8000_0000_0000_0000;
}

/// Offsets in `EFI_MEMORY_DESCRIPTOR` (UEFI 2.10 section 7.2,
/// `GetMemoryMap()`): Type (u32), 4 bytes of padding, PhysicalStart,
/// VirtualStart, NumberOfPages, Attribute (u64 each).
mod offset {
    pub const TYPE: usize = 0;
    pub const PHYSICAL_START: usize = 8;
    pub const NUMBER_OF_PAGES: usize = 24;
    pub const ATTRIBUTE: usize = 32;
    /// The structure's size; `DescriptorSize` is at least this.
    pub const END: usize = 40;
}

/// The smallest `DescriptorSize` that holds a whole descriptor.
pub const MIN_DESCRIPTOR_SIZE: usize = offset::END;

/// `EFI_MEMORY_DESCRIPTOR.DescriptorVersion` this code reads.
pub const DESCRIPTOR_VERSION: u32 = 1;

/// One `EFI_MEMORY_DESCRIPTOR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub kind: u32,
    pub physical_start: u64,
    pub pages: u64,
    pub attribute: u64,
}

impl Descriptor {
    /// The bytes it describes; `None` when they run past the end of the
    /// address space.
    pub fn range(&self) -> Option<MemRange> {
        let size = self.pages.checked_mul(PAGE_SIZE)?;
        self.physical_start.checked_add(size)?;
        Some(MemRange::new(self.physical_start, size))
    }

    /// Writes the descriptor in the firmware's layout (for tests and
    /// fuzzing); `out` must hold [`MIN_DESCRIPTOR_SIZE`] bytes.
    pub fn write(&self, out: &mut [u8]) {
        out[offset::TYPE..offset::TYPE + 4].copy_from_slice(&self.kind.to_le_bytes());
        out[offset::PHYSICAL_START..offset::PHYSICAL_START + 8]
            .copy_from_slice(&self.physical_start.to_le_bytes());
        out[offset::NUMBER_OF_PAGES..offset::NUMBER_OF_PAGES + 8]
            .copy_from_slice(&self.pages.to_le_bytes());
        out[offset::ATTRIBUTE..offset::ATTRIBUTE + 8]
            .copy_from_slice(&self.attribute.to_le_bytes());
    }
}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// The descriptors of a memory map `GetMemoryMap()` wrote into `map`
/// (`MemoryMapSize` bytes), `descriptor_size` apart. A trailing partial
/// descriptor is ignored; a `descriptor_size` too small for the structure
/// yields nothing (the caller checks it against [`MIN_DESCRIPTOR_SIZE`]
/// before trusting the map).
pub fn descriptors(map: &[u8], descriptor_size: usize) -> impl Iterator<Item = Descriptor> + '_ {
    let count = if descriptor_size >= MIN_DESCRIPTOR_SIZE {
        map.len() / descriptor_size
    } else {
        0
    };
    (0..count).map(move |i| {
        let d = &map[i * descriptor_size..];
        Descriptor {
            kind: le_u32(d, offset::TYPE),
            physical_start: le_u64(d, offset::PHYSICAL_START),
            pages: le_u64(d, offset::NUMBER_OF_PAGES),
            attribute: le_u64(d, offset::ATTRIBUTE),
        }
    })
}

/// Why a range of RAM stays reserved; names it in the reserved regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum ReservedKind {
    RuntimeCode = 1,
    RuntimeData = 2,
    AcpiReclaim = 3,
    AcpiNvs = 4,
    /// Another RAM type marked `EFI_MEMORY_RUNTIME`.
    Runtime = 5,
    /// RAM marked `EFI_MEMORY_SP`.
    SpecificPurpose = 6,
}

impl ReservedKind {
    pub const ALL: [ReservedKind; 6] = [
        Self::RuntimeCode,
        Self::RuntimeData,
        Self::AcpiReclaim,
        Self::AcpiNvs,
        Self::Runtime,
        Self::SpecificPurpose,
    ];

    /// The region's name in the hypervisor's reserved regions.
    pub const fn name(self) -> &'static str {
        match self {
            Self::RuntimeCode => "EFI runtime services code",
            Self::RuntimeData => "EFI runtime services data",
            Self::AcpiReclaim => "ACPI reclaim memory",
            Self::AcpiNvs => "ACPI NVS memory",
            Self::Runtime => "EFI runtime memory",
            Self::SpecificPurpose => "EFI specific-purpose memory",
        }
    }

    /// The kind whose number ([`ReservedKind as u32`]) is `value`.
    pub fn from_u32(value: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|k| *k as u32 == value)
    }
}

/// What the hypervisor may do with a descriptor's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Use {
    /// Free RAM.
    Ram,
    /// RAM nobody else may be given.
    Reserved(ReservedKind),
    /// Not RAM at all.
    NotRam,
}

impl Use {
    /// Which of two claims on the same byte wins: the safer.
    fn rank(self) -> u8 {
        match self {
            Use::Ram => 0,
            Use::Reserved(_) => 1,
            Use::NotRam => 2,
        }
    }
}

/// The module documentation's table, for one descriptor.
pub fn classify(d: &Descriptor) -> Use {
    let ram_type = matches!(
        d.kind,
        kind::CONVENTIONAL
            | kind::BOOT_SERVICES_CODE
            | kind::BOOT_SERVICES_DATA
            | kind::LOADER_CODE
            | kind::LOADER_DATA
    );
    let reserved = match d.kind {
        kind::RUNTIME_SERVICES_CODE => Some(ReservedKind::RuntimeCode),
        kind::RUNTIME_SERVICES_DATA => Some(ReservedKind::RuntimeData),
        kind::ACPI_RECLAIM => Some(ReservedKind::AcpiReclaim),
        kind::ACPI_NVS => Some(ReservedKind::AcpiNvs),
        _ => None,
    };
    match (ram_type, reserved) {
        (true, _) if d.attribute & attribute::WB == 0 => Use::NotRam,
        (true, _) if d.attribute & attribute::RUNTIME != 0 => Use::Reserved(ReservedKind::Runtime),
        (true, _) if d.attribute & attribute::SP != 0 => {
            Use::Reserved(ReservedKind::SpecificPurpose)
        }
        (true, _) => Use::Ram,
        (false, Some(kind)) => Use::Reserved(kind),
        (false, None) => Use::NotRam,
    }
}

/// A reserved region of [`Memory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reserved {
    pub range: MemRange,
    pub kind: ReservedKind,
}

/// The map as banks and reserved regions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// RAM banks, sorted, disjoint and not touching.
    pub banks: Vec<MemRange>,
    /// Reserved regions, each inside a bank, sorted and disjoint.
    pub reserved: Vec<Reserved>,
}

/// Banks and reserved regions of `descriptors` (module documentation).
/// Never fails: a descriptor whose range wraps around the address space
/// is dropped when it would add RAM and cut at the top of the address
/// space otherwise.
pub fn memory(descriptors: impl IntoIterator<Item = Descriptor>) -> Memory {
    // Every descriptor's range with its use.
    let mut claims: Vec<(MemRange, Use)> = Vec::new();
    for d in descriptors {
        let usage = classify(&d);
        let range = match d.range() {
            Some(range) => range,
            None if usage == Use::Ram => continue,
            None => MemRange::new(d.physical_start, u64::MAX - d.physical_start),
        };
        if range.size > 0 {
            claims.push((range, usage));
        }
    }
    // Cut the address space at every boundary; each piece takes the
    // safest use any claim on it has.
    let mut cuts: Vec<u64> = claims.iter().flat_map(|(r, _)| [r.base, r.end()]).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut pieces: Vec<(MemRange, Use)> = Vec::new();
    for pair in cuts.windows(2) {
        let piece = MemRange::new(pair[0], pair[1] - pair[0]);
        let usage = claims
            .iter()
            .filter(|(r, _)| r.base <= piece.base && piece.end() <= r.end())
            .map(|(_, u)| *u)
            .max_by_key(|u| u.rank());
        let Some(usage) = usage else { continue };
        match pieces.last_mut() {
            Some((last, u)) if *u == usage && last.end() == piece.base => {
                last.size += piece.size;
            }
            _ => pieces.push((piece, usage)),
        }
    }
    // Banks: runs of touching RAM and reserved pieces with some RAM in them.
    let mut memory = Memory::default();
    let mut run: Vec<(MemRange, Use)> = Vec::new();
    let flush = |run: &mut Vec<(MemRange, Use)>, memory: &mut Memory| {
        if run.iter().any(|(_, u)| *u == Use::Ram)
            && let (Some(first), Some(last)) = (run.first(), run.last())
        {
            let base = first.0.base;
            memory.banks.push(MemRange::new(base, last.0.end() - base));
            for (range, usage) in run.iter() {
                if let Use::Reserved(kind) = usage {
                    memory.reserved.push(Reserved {
                        range: *range,
                        kind: *kind,
                    });
                }
            }
        }
        run.clear();
    };
    for (range, usage) in pieces {
        let touches = run.last().is_some_and(|(r, _)| r.end() == range.base);
        if usage == Use::NotRam || !touches {
            flush(&mut run, &mut memory);
        }
        if usage != Use::NotRam {
            run.push((range, usage));
        }
    }
    flush(&mut run, &mut memory);
    memory
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const WB: u64 = attribute::WB;

    fn d(kind: u32, base: u64, pages: u64, attribute: u64) -> Descriptor {
        Descriptor {
            kind,
            physical_start: base,
            pages,
            attribute,
        }
    }

    fn raw(descs: &[Descriptor], stride: usize) -> Vec<u8> {
        let mut out = vec![0xa5u8; descs.len() * stride];
        for (i, desc) in descs.iter().enumerate() {
            desc.write(&mut out[i * stride..]);
        }
        out
    }

    const MIB: u64 = 1 << 20;
    const PAGES_PER_MIB: u64 = MIB / PAGE_SIZE;

    #[test]
    fn descriptors_are_read_at_the_firmwares_stride() {
        let descs = [
            d(kind::CONVENTIONAL, 0x4000_0000, 16, WB),
            d(
                kind::RUNTIME_SERVICES_DATA,
                0x4001_0000,
                1,
                WB | attribute::RUNTIME,
            ),
        ];
        for stride in [40, 48, 64] {
            let map = raw(&descs, stride);
            assert_eq!(descriptors(&map, stride).collect::<Vec<_>>(), descs);
            // A partial descriptor at the end is ignored.
            assert_eq!(descriptors(&map[..map.len() - 1], stride).count(), 1);
        }
        assert_eq!(descriptors(&raw(&descs, 48), 24).count(), 0);
        assert_eq!(descriptors(&[], 48).count(), 0);
        assert_eq!(descriptors(&[], 0).count(), 0);
    }

    #[test]
    fn types_and_attributes() {
        let use_of = |kind, attribute| classify(&d(kind, 0, 1, attribute));
        for k in [
            kind::CONVENTIONAL,
            kind::BOOT_SERVICES_CODE,
            kind::BOOT_SERVICES_DATA,
            kind::LOADER_CODE,
            kind::LOADER_DATA,
        ] {
            assert_eq!(use_of(k, WB), Use::Ram, "type {k}");
            assert_eq!(use_of(k, 0), Use::NotRam, "type {k} without WB");
            assert_eq!(
                use_of(k, WB | attribute::RUNTIME),
                Use::Reserved(ReservedKind::Runtime)
            );
            assert_eq!(
                use_of(k, WB | attribute::SP),
                Use::Reserved(ReservedKind::SpecificPurpose)
            );
        }
        assert_eq!(
            use_of(kind::RUNTIME_SERVICES_CODE, WB | attribute::RUNTIME),
            Use::Reserved(ReservedKind::RuntimeCode)
        );
        assert_eq!(
            use_of(kind::RUNTIME_SERVICES_DATA, WB),
            Use::Reserved(ReservedKind::RuntimeData)
        );
        assert_eq!(
            use_of(kind::ACPI_RECLAIM, WB),
            Use::Reserved(ReservedKind::AcpiReclaim)
        );
        assert_eq!(
            use_of(kind::ACPI_NVS, WB),
            Use::Reserved(ReservedKind::AcpiNvs)
        );
        for k in [
            kind::RESERVED,
            kind::UNUSABLE,
            kind::MMIO,
            kind::MMIO_PORT_SPACE,
            kind::PAL_CODE,
            kind::PERSISTENT,
            kind::UNACCEPTED,
            16,
            0x7000_0000,
            0x8000_0001,
        ] {
            assert_eq!(use_of(k, WB), Use::NotRam, "type {k:#x}");
        }
        for k in ReservedKind::ALL {
            assert_eq!(ReservedKind::from_u32(k as u32), Some(k));
        }
        assert_eq!(ReservedKind::from_u32(0), None);
    }

    /// A map shaped like edk2's on QEMU `virt` with 1 GiB: loader and
    /// boot-services pieces, runtime and ACPI ranges in the middle of RAM,
    /// flash and MMIO outside it.
    #[test]
    fn a_typical_map() {
        let base = 0x4000_0000;
        let map = [
            d(kind::MMIO, 0x0400_0000, 16384, attribute::RUNTIME),
            d(kind::LOADER_DATA, base, 8 * PAGES_PER_MIB, WB),
            d(kind::CONVENTIONAL, base + 8 * MIB, 900 * PAGES_PER_MIB, WB),
            d(kind::ACPI_RECLAIM, base + 908 * MIB, PAGES_PER_MIB, WB),
            d(
                kind::BOOT_SERVICES_DATA,
                base + 909 * MIB,
                10 * PAGES_PER_MIB,
                WB,
            ),
            d(
                kind::RUNTIME_SERVICES_DATA,
                base + 919 * MIB,
                2 * PAGES_PER_MIB,
                WB | attribute::RUNTIME,
            ),
            d(
                kind::RUNTIME_SERVICES_CODE,
                base + 921 * MIB,
                PAGES_PER_MIB,
                WB | attribute::RUNTIME,
            ),
            d(
                kind::BOOT_SERVICES_CODE,
                base + 922 * MIB,
                102 * PAGES_PER_MIB,
                WB,
            ),
        ];
        let m = memory(map);
        assert_eq!(m.banks, [MemRange::new(base, 1024 * MIB)]);
        assert_eq!(
            m.reserved,
            [
                Reserved {
                    range: MemRange::new(base + 908 * MIB, MIB),
                    kind: ReservedKind::AcpiReclaim
                },
                Reserved {
                    range: MemRange::new(base + 919 * MIB, 2 * MIB),
                    kind: ReservedKind::RuntimeData
                },
                Reserved {
                    range: MemRange::new(base + 921 * MIB, MIB),
                    kind: ReservedKind::RuntimeCode
                },
            ]
        );
    }

    #[test]
    fn holes_split_banks_and_order_does_not_matter() {
        let map = [
            d(kind::CONVENTIONAL, 0x9000_0000, 256, WB),
            d(kind::RESERVED, 0x8010_0000, 256, WB),
            d(kind::CONVENTIONAL, 0x8000_0000, 256, WB),
            d(kind::CONVENTIONAL, 0x8020_0000, 256, WB),
        ];
        let m = memory(map);
        assert_eq!(
            m.banks,
            [
                MemRange::new(0x8000_0000, MIB),
                MemRange::new(0x8020_0000, MIB),
                MemRange::new(0x9000_0000, MIB),
            ]
        );
        assert!(m.reserved.is_empty());
    }

    #[test]
    fn reserved_ram_away_from_free_ram_is_no_bank() {
        let map = [
            d(
                kind::RUNTIME_SERVICES_CODE,
                0x1000,
                1,
                WB | attribute::RUNTIME,
            ),
            d(kind::CONVENTIONAL, 0x10_0000, 256, WB),
            d(kind::ACPI_NVS, 0x30_0000, 16, WB),
        ];
        let m = memory(map);
        assert_eq!(m.banks, [MemRange::new(0x10_0000, MIB)]);
        assert!(m.reserved.is_empty());
        // At the edge of a bank, reserved RAM joins it.
        let edge = [
            d(kind::CONVENTIONAL, 0x10_0000, 256, WB),
            d(kind::ACPI_NVS, 0x20_0000, 16, WB),
        ];
        let m = memory(edge);
        assert_eq!(m.banks, [MemRange::new(0x10_0000, MIB + 16 * PAGE_SIZE)]);
        assert_eq!(
            m.reserved,
            [Reserved {
                range: MemRange::new(0x20_0000, 16 * PAGE_SIZE),
                kind: ReservedKind::AcpiNvs
            }]
        );
    }

    #[test]
    fn overlaps_resolve_towards_safety() {
        // Free RAM overlapped by a runtime range and by MMIO.
        let map = [
            d(kind::CONVENTIONAL, 0x4000_0000, 1024, WB),
            d(kind::RUNTIME_SERVICES_DATA, 0x4010_0000, 16, WB),
            d(kind::MMIO, 0x4020_0000, 16, 0),
        ];
        let m = memory(map);
        assert_eq!(
            m.banks,
            [
                MemRange::new(0x4000_0000, 2 * MIB),
                MemRange::new(0x4021_0000, 0x4040_0000 - 0x4021_0000),
            ]
        );
        assert_eq!(
            m.reserved,
            [Reserved {
                range: MemRange::new(0x4010_0000, 16 * PAGE_SIZE),
                kind: ReservedKind::RuntimeData
            }]
        );
    }

    #[test]
    fn wrapping_and_empty_descriptors() {
        let map = [
            d(kind::CONVENTIONAL, 0x4000_0000, 256, WB),
            // Free RAM past the end of the address space: dropped.
            d(kind::CONVENTIONAL, u64::MAX - 0xfff, 2, WB),
            d(kind::CONVENTIONAL, 0x1000, u64::MAX, WB),
            // Not RAM that wraps: it still cuts everything above it.
            d(kind::MMIO, 0x4008_0000, u64::MAX / PAGE_SIZE, 0),
            d(kind::CONVENTIONAL, 0x5000_0000, 0, WB),
        ];
        let m = memory(map);
        assert_eq!(m.banks, [MemRange::new(0x4000_0000, 0x8_0000)]);
    }

    #[test]
    fn invariants_hold_for_arbitrary_maps() {
        // A small deterministic generator; every map must give sorted,
        // disjoint banks and reserved regions inside them, and no byte
        // any descriptor calls not-RAM or reserved may be free RAM.
        let mut rng = prng::Rng::new(0x1234_5678_9abc_def0);
        let mut next = || rng.next_u64();
        for _ in 0..500 {
            let n = (next() % 12) as usize;
            let map: Vec<Descriptor> = (0..n)
                .map(|_| {
                    let kind = (next() % 17) as u32;
                    let attribute = match next() % 4 {
                        0 => 0,
                        1 => WB | attribute::RUNTIME,
                        _ => WB,
                    };
                    d(kind, (next() % 64) * PAGE_SIZE, next() % 16, attribute)
                })
                .collect();
            let m = memory(map.clone());
            for pair in m.banks.windows(2) {
                assert!(pair[0].end() < pair[1].base, "{map:?}");
            }
            for pair in m.reserved.windows(2) {
                assert!(pair[0].range.end() <= pair[1].range.base, "{map:?}");
            }
            for r in &m.reserved {
                assert!(
                    m.banks
                        .iter()
                        .any(|b| b.base <= r.range.base && r.range.end() <= b.end()),
                    "{map:?}"
                );
            }
            // Sample every page: free in the result only if some
            // descriptor says RAM and none says otherwise.
            for page in 0..96u64 {
                let addr = page * PAGE_SIZE;
                let free = m.banks.iter().any(|b| b.contains(addr))
                    && !m.reserved.iter().any(|r| r.range.contains(addr));
                let claims: Vec<Use> = map
                    .iter()
                    .filter(|d| d.range().is_some_and(|r| r.contains(addr)))
                    .map(classify)
                    .collect();
                let expect_free = !claims.is_empty() && claims.iter().all(|u| *u == Use::Ram);
                assert_eq!(free, expect_free, "page {addr:#x} of {map:?}");
            }
        }
    }
}
