//! EL2 stage-1 translation: a coarse boot map to get the caches on, then the
//! final fine-grained map built with aarch64-paging from `el2::memory::layout`.
//!
//! EL2 runs identity-mapped. The boot map exists because Rust code must not
//! use atomics or the heap with the MMU off (exclusives on Device memory
//! are CONSTRAINED UNPREDICTABLE, Arm ARM B2.9.5): it is written with plain
//! stores into .bss, maps the 1 GiB blocks holding the image and the DTB as
//! normal cacheable memory, and is replaced as soon as the heap works.

use super::regs;
use aarch64_cpu::registers::{ID_AA64MMFR0_EL1, MAIR_EL2, SCTLR_EL2, TCR_EL2};
use aarch64_paging::descriptor::El23Attributes as Attr;
use aarch64_paging::idmap::IdMap;
use aarch64_paging::paging::{El2, MemoryRegion};
use alloc::boxed::Box;
use core::ptr::addr_of_mut;
use el2::memory::layout::{MapEntry, MapKind};
use platform::MemRange;
use tock_registers::interfaces::Readable;

/// Translation settings `boot::mmu::enable_el2` turns the MMU on with.
pub use boot::mmu::MmuParams;

/// What secondary CPUs load at entry, before their caches are on: written
/// once by the boot CPU and cleaned to the point of coherency.
pub static mut SECONDARY_MMU_PARAMS: MmuParams = MmuParams {
    mair: 0,
    tcr: 0,
    ttbr0: 0,
    sctlr: 0,
};

/// MAIR_EL2 index of Device-nGnRE.
const MAIR_DEVICE: Attr = Attr::ATTRIBUTE_INDEX_0;
/// MAIR_EL2 index of Normal inner/outer write-back, read/write-allocate.
const MAIR_NORMAL: Attr = Attr::ATTRIBUTE_INDEX_1;

fn mair_value() -> u64 {
    (MAIR_EL2::Attr0_Device::nonGathering_nonReordering_EarlyWriteAck
        + MAIR_EL2::Attr1_Normal_Outer::WriteBack_NonTransient_ReadWriteAlloc
        + MAIR_EL2::Attr1_Normal_Inner::WriteBack_NonTransient_ReadWriteAlloc)
        .value
}

/// 48-bit VAs, 4 KiB granule, walks cacheable and inner shareable; the
/// output size is what the CPU implements, capped at 48 bits (4-level
/// tables without FEAT_LPA2 cannot express more).
fn tcr_value() -> u64 {
    use ID_AA64MMFR0_EL1::PARange::Value as Pa;
    let ps = match ID_AA64MMFR0_EL1.read_as_enum(ID_AA64MMFR0_EL1::PARange) {
        Some(Pa::Bits_32) => TCR_EL2::PS::Bits_32,
        Some(Pa::Bits_36) => TCR_EL2::PS::Bits_36,
        Some(Pa::Bits_40) => TCR_EL2::PS::Bits_40,
        Some(Pa::Bits_42) => TCR_EL2::PS::Bits_42,
        Some(Pa::Bits_44) => TCR_EL2::PS::Bits_44,
        _ => TCR_EL2::PS::Bits_48,
    };
    (TCR_EL2::T0SZ.val(64 - 48)
        + TCR_EL2::TG0::KiB_4
        + TCR_EL2::SH0::Inner
        + TCR_EL2::ORGN0::WriteBack_ReadAlloc_WriteAlloc_Cacheable
        + TCR_EL2::IRGN0::WriteBack_ReadAlloc_WriteAlloc_Cacheable
        + ps)
        .value
        | regs::TCR_EL2_RES1
}

/// SCTLR_EL2 with the MMU, caches and SP alignment checks on; `wxn` makes
/// every writable page execute-never (only safe once text is read-only).
fn sctlr_value(wxn: bool) -> u64 {
    let wxn = if wxn {
        SCTLR_EL2::WXN::Enable
    } else {
        SCTLR_EL2::WXN::Disable
    };
    (SCTLR_EL2::M::Enable
        + SCTLR_EL2::C::Cacheable
        + SCTLR_EL2::I::Cacheable
        + SCTLR_EL2::SA::Enable
        + SCTLR_EL2::A::Disable
        + SCTLR_EL2::EE::Little
        + SCTLR_EL2::EIS::SET
        + SCTLR_EL2::EOS::SET
        + wxn)
        .value
        | regs::SCTLR_EL2_RES1
}

/// SCTLR_EL2 for running with the MMU and caches off, little-endian: what
/// each CPU writes first thing, whatever firmware left there.
pub const SCTLR_EL2_MMU_OFF: u64 = SCTLR_EL2::EE::Little.value
    | SCTLR_EL2::EIS::SET.value
    | SCTLR_EL2::EOS::SET.value
    | regs::SCTLR_EL2_RES1;

const ENTRIES: usize = 512;
const GIB: u64 = 1 << 30;
/// Level-0 entries each cover 512 GiB.
const L0_SHIFT: u32 = 39;
/// The boot map covers at most this many distinct 512 GiB areas (image and DTB).
const BOOT_L1_TABLES: usize = 2;

#[repr(C, align(4096))]
struct Table([u64; ENTRIES]);

struct BootTables {
    l0: Table,
    l1: [Table; BOOT_L1_TABLES],
    /// The level-0 index each used level-1 table hangs from.
    l1_owner: [usize; BOOT_L1_TABLES],
    l1_used: usize,
}

/// In .bss, so zero when the boot CPU builds it.
static mut BOOT_TABLES: BootTables = BootTables {
    l0: Table([0; ENTRIES]),
    l1: [Table([0; ENTRIES]), Table([0; ENTRIES])],
    l1_owner: [0; BOOT_L1_TABLES],
    l1_used: 0,
};

/// Builds the boot map covering `regions` (base, size) with 1 GiB blocks
/// and returns the settings that turn it on.
///
/// Runs with the MMU off: plain stores only, no heap, no atomics.
pub fn boot_map(regions: &[(u64, u64)]) -> MmuParams {
    // SAFETY: only the boot CPU runs this, once, before any other CPU is
    // started and before anything else refers to BOOT_TABLES.
    let tables = unsafe { &mut *addr_of_mut!(BOOT_TABLES) };
    let table_bits = (Attr::VALID | Attr::TABLE_OR_PAGE).bits() as u64;
    let block_bits =
        (Attr::VALID | MAIR_NORMAL | Attr::INNER_SHAREABLE | Attr::ACCESSED | Attr::USER_RES1)
            .bits() as u64;
    for &(base, size) in regions {
        let mut gib = base & !(GIB - 1);
        while gib < base.saturating_add(size) {
            let l0_index = (gib >> L0_SHIFT) as usize % ENTRIES;
            let used = tables.l1_used;
            let slot = match tables.l1_owner[..used].iter().position(|&o| o == l0_index) {
                Some(slot) => slot,
                None if used < BOOT_L1_TABLES => {
                    tables.l1_used += 1;
                    tables.l1_owner[used] = l0_index;
                    tables.l0.0[l0_index] = &tables.l1[used] as *const Table as u64 | table_bits;
                    used
                }
                // Cannot happen for two regions; leave the rest unmapped.
                None => break,
            };
            tables.l1[slot].0[(gib >> 30) as usize % ENTRIES] = gib | block_bits;
            gib += GIB;
        }
    }
    MmuParams {
        mair: mair_value(),
        tcr: tcr_value(),
        ttbr0: &tables.l0 as *const Table as u64,
        sctlr: sctlr_value(false),
    }
}

fn attributes(kind: MapKind) -> Attr {
    let normal =
        Attr::VALID | MAIR_NORMAL | Attr::INNER_SHAREABLE | Attr::ACCESSED | Attr::USER_RES1;
    match kind {
        MapKind::Text => normal | Attr::READ_ONLY,
        MapKind::ReadOnly => normal | Attr::READ_ONLY | Attr::XN,
        MapKind::ReadWrite => normal | Attr::XN,
        MapKind::Device => Attr::VALID | MAIR_DEVICE | Attr::ACCESSED | Attr::USER_RES1 | Attr::XN,
    }
}

/// Builds the final map from `plan` and returns the settings that switch to
/// it (W^X enforced). The tables live on the heap for the rest of the run.
pub fn final_map(plan: &[MapEntry]) -> Result<MmuParams, aarch64_paging::MapError> {
    let mut idmap = Box::new(IdMap::new(0, El2));
    for entry in plan {
        let region = MemoryRegion::new(entry.range.base as usize, entry.range.end() as usize);
        idmap.map_range(&region, attributes(entry.kind))?;
    }
    idmap.mark_active();
    let ttbr0 = idmap.root_address().0 as u64;
    // The hypervisor uses this map until it powers off; later mappings
    // (guest memory, boot modules) are added to it.
    *LIVE_MAP.lock() = Some(Box::leak(idmap));
    Ok(MmuParams {
        mair: mair_value(),
        tcr: tcr_value(),
        ttbr0,
        sctlr: sctlr_value(true),
    })
}

/// Why [`map_more`] failed.
#[derive(Debug)]
pub enum MapMoreError {
    /// Called before the final map was built.
    NotBuilt,
    Map(aarch64_paging::MapError),
}

impl core::fmt::Display for MapMoreError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotBuilt => write!(f, "the EL2 map is not built yet"),
            Self::Map(e) => write!(f, "{e}"),
        }
    }
}

/// The active EL2 map, for mappings added after boot.
static LIVE_MAP: super::sync::Mutex<Option<&'static mut IdMap<El2>>> =
    super::sync::Mutex::new(None);

/// Adds `range` (not mapped before) to the live EL2 map with the
/// attributes of `kind`. Adding a mapping where there was none needs no
/// break-before-make and no TLB maintenance, only ordering before use.
pub fn map_more(range: MemRange, kind: MapKind) -> Result<(), MapMoreError> {
    let mut live = LIVE_MAP.lock();
    let idmap = live.as_deref_mut().ok_or(MapMoreError::NotBuilt)?;
    let region = MemoryRegion::new(range.base as usize, range.end() as usize);
    idmap
        .map_range(&region, attributes(kind))
        .map_err(MapMoreError::Map)?;
    aarch64_cpu::asm::barrier::dsb(aarch64_cpu::asm::barrier::ISHST);
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
    Ok(())
}

/// Publishes `params` for secondary CPUs, which read them with the MMU off.
pub fn publish_for_secondaries(params: MmuParams) {
    // SAFETY: written by the boot CPU before it starts any secondary CPU;
    // secondaries only read it after CPU_ON, which orders after this store
    // and the clean below.
    unsafe {
        SECONDARY_MMU_PARAMS = params;
        super::cache::clean_to_poc(
            addr_of_mut!(SECONDARY_MMU_PARAMS) as u64,
            core::mem::size_of::<MmuParams>() as u64,
        );
    }
}
