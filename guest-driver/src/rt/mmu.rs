//! The guest's stage-1 map: an identity map of its RAM (cacheable), its
//! console (device) and its own image with per-section permissions, turned
//! on by the boot CPU before any other Rust code runs and reused by every
//! secondary.
//!
//! Why at all: with the MMU off, every data access is Device-nGnRnE, so
//! the guest could neither use atomics (exclusives on Device memory are
//! CONSTRAINED UNPREDICTABLE) nor see coherently what the hypervisor writes
//! through its cacheable mappings (shared/docs/TESTING.md).
//!
//! | range | mapping |
//! |---|---|
//! | each RAM bank | Normal write-back, read-write, execute-never |
//! | reserved memory marked `no-map` (e.g. the hypervisor's PV area) | unmapped, until [`map_shared`] maps what a hypercall hands out |
//! | image `.text` | Normal, read-only, executable |
//! | image `.rodata`, `.rela.dyn`, `.got` | Normal, read-only, execute-never |
//! | image `.data`, `.bss`, stacks | Normal, read-write, execute-never |
//! | stack guard pages | unmapped |
//! | the device tree (when outside RAM) | Normal, read-only, execute-never |
//! | console UART page | Device-nGnRE, execute-never |
//!
//! SCTLR_EL1.WXN is set: no page is both writable and executable. Anything
//! else (other devices, addresses past RAM) is unmapped until
//! [`map_device`] (devices) or [`map_shared`] (memory the hypervisor
//! shares, e.g. paravirtual records outside RAM) adds it.

use super::SpinMutex;
use super::{image, stacks};
use crate::devicetree::MemRange;
use crate::pagetable::{self, Attributes, MapError, Mapper, MemoryKind, PAGE_SIZE, Table};
use aarch64_cpu::asm::barrier;
use aarch64_cpu::registers::{ID_AA64MMFR0_EL1, MAIR_EL1, SCTLR_EL1, TCR_EL1};
use core::cell::UnsafeCell;
use tock_registers::interfaces::Readable;

/// Translation tables available to the map (128 KiB of `.bss`).
const TABLE_POOL: usize = 32;

/// SCTLR_EL1 bits that are RES1 in ARMv8.0 and keep their legacy meaning
/// when the feature that reuses them is implemented (Arm ARM D23.2
/// "SCTLR_EL1"; Linux `INIT_SCTLR_EL1_MMU_OFF`): LSMAOE (29), nTLSMD (28),
/// SPAN (23: PSTATE.PAN unchanged on exceptions), EIS (22), TSCXT (20),
/// EOS (11).
const SCTLR_RES1: u64 = (1 << 29) | (1 << 28) | (1 << 23) | (1 << 22) | (1 << 20) | (1 << 11);

/// SCTLR_EL1 with the MMU and caches off, little-endian, no alignment checks.
pub const SCTLR_MMU_OFF: u64 = SCTLR_RES1;

/// SCTLR_EL1 with the MMU, data and instruction caches, SP alignment checks
/// and write-implies-execute-never on.
const SCTLR_MMU_ON: u64 = SCTLR_RES1
    | SCTLR_EL1::M::Enable.value
    | SCTLR_EL1::C::Cacheable.value
    | SCTLR_EL1::I::Cacheable.value
    | SCTLR_EL1::SA::Enable.value
    | SCTLR_EL1::WXN::Enable.value;

/// What `boot::mmu::enable_el1` loads.
pub use boot::mmu::MmuParams;

/// The settings secondaries turn their MMU on with. The boot CPU writes
/// them with its MMU off (straight to memory), and secondaries read them
/// with theirs off, so no cache maintenance is needed.
pub static mut MMU_PARAMS: MmuParams = MmuParams {
    mair: 0,
    tcr: 0,
    ttbr0: 0,
    sctlr: 0,
};

/// The translation tables.
struct TablePool(UnsafeCell<[Table; TABLE_POOL]>);

// SAFETY: the tables are written by the boot CPU alone before any other CPU
// starts, and afterwards only under `TABLES_USED`'s lock.
unsafe impl Sync for TablePool {}

static TABLES: TablePool = TablePool(UnsafeCell::new([Table::EMPTY; TABLE_POOL]));

/// Tables in use once the map is live; the lock serialises live changes.
static TABLES_USED: SpinMutex<usize> = SpinMutex::new(0);

/// Builds the map with the MMU off and returns how many tables it used.
/// `ram` is empty if the device tree could not be read; the image, the
/// tree and the console are mapped regardless, so the failure can be
/// reported. The whole pages of each `no_map` region are left out of RAM's
/// mapping.
///
/// # Safety
/// Only the boot CPU may call this, once, with the MMU off and no other
/// CPU running.
pub unsafe fn build(
    ram: &[MemRange],
    no_map: impl Iterator<Item = MemRange>,
    dtb: MemRange,
    uart: Option<MemRange>,
) -> Result<usize, MapError> {
    // SAFETY: per this function's contract nothing else accesses the pool.
    let tables = unsafe { &mut *TABLES.0.get() };
    let mut map = Mapper::new(tables);
    for bank in ram {
        map.map(page_down(bank.start), page_up(bank.end()), Attributes::DATA)?;
    }
    for region in no_map {
        // Only pages entirely inside the region: a page it shares with
        // something else stays mapped.
        let (start, end) = (page_up(region.start), page_down(region.end()));
        if start < end {
            map.unmap(start, end)?;
        }
    }
    if !ram.iter().any(|bank| bank.covers(&dtb)) && dtb.size > 0 {
        map.map(
            page_down(dtb.start),
            page_up(dtb.end()),
            Attributes::READ_ONLY,
        )?;
    }
    if let Some(uart) = uart {
        let size = uart.size.max(PAGE_SIZE);
        map.map(
            page_down(uart.start),
            page_up(uart.start + size),
            Attributes::DEVICE,
        )?;
    }
    let image = image::layout();
    map.map(image.text.start, image.text.end(), Attributes::CODE)?;
    map.map(
        image.rodata.start,
        image.rodata.end(),
        Attributes::READ_ONLY,
    )?;
    map.map(image.data.start, image.data.end(), Attributes::DATA)?;
    for guard in stacks::guard_pages() {
        map.unmap(guard, guard + PAGE_SIZE)?;
    }
    let root = map.root_address();
    let used = map.tables_used();
    // SAFETY: the boot CPU alone runs; secondaries read this only after
    // CPU_ON, which orders these stores before their loads.
    unsafe {
        MMU_PARAMS = MmuParams {
            mair: mair(),
            tcr: tcr(),
            ttbr0: root,
            sctlr: SCTLR_MMU_ON,
        };
    }
    Ok(used)
}

/// Turns the MMU on with the map [`build`] made, on the boot CPU.
///
/// # Safety
/// [`build`] must have succeeded; only the boot CPU calls this, once.
pub unsafe fn enable(tables_used: usize) {
    // SAFETY: MMU_PARAMS holds a complete map that identity-maps this code,
    // its stack and its data with the attributes they need.
    unsafe { boot::mmu::enable_el1(&raw const MMU_PARAMS) };
    // Atomics are safe from here on.
    *TABLES_USED.lock() = tables_used;
}

/// Maps `[start, start + size)` (rounded out to pages) as device memory
/// while the MMU is on, e.g. a device a test wants to reach. Only unmapped
/// ranges can be added: changing a live mapping would need break-before-make.
pub fn map_device(start: u64, size: u64) -> Result<(), MapError> {
    map_live(start, size, Attributes::DEVICE)
}

/// Maps `[start, start + size)` (rounded out to pages) as read-only,
/// executable normal memory while the MMU is on: for a test that branches
/// to an address outside the image (whose code is the only executable
/// memory of the map) to see what an instruction fetch there does. Only
/// unmapped ranges can be added, as for [`map_device`].
pub fn map_executable(start: u64, size: u64) -> Result<(), MapError> {
    map_live(start, size, Attributes::CODE)
}

/// Adds a mapping of `[start, start + size)` (rounded out to pages) with
/// `attributes` to the live map.
fn map_live(start: u64, size: u64, attributes: Attributes) -> Result<(), MapError> {
    let mut used = TABLES_USED.lock();
    // SAFETY: TABLES_USED's lock serialises every change to the live pool;
    // the MMU reads it concurrently, which is what Mapper's live mode is for
    // (it only turns invalid entries into valid ones).
    let tables = unsafe { &mut *TABLES.0.get() };
    let mut map = Mapper::resume_live(tables, *used);
    let result = map.map(
        page_down(start),
        page_up(start.saturating_add(size.max(1))),
        attributes,
    );
    *used = map.tables_used();
    // Make the new descriptors visible to this CPU's table walks before any
    // access through them (invalid entries are never cached in TLBs, so no
    // TLB maintenance is needed).
    barrier::dsb(barrier::ISHST);
    barrier::isb(barrier::SY);
    result
}

/// Makes `[start, start + size)` (rounded out to pages) readable and
/// writable as normal write-back memory while the MMU is on, for memory the
/// hypervisor shares with the guest (its paravirtual records, whose
/// `lock_count` the guest writes: `pvlock_abi::pvlock`): pages already
/// mapped as writable normal memory (RAM) stay as they are, unmapped pages
/// are mapped read-write, never executable. A page mapped as a device or
/// read-only (the image's code and constants) is refused, since changing a
/// live mapping would need break-before-make.
pub fn map_shared(start: u64, size: u64) -> Result<(), MapError> {
    let mut used = TABLES_USED.lock();
    // SAFETY: as in map_device: TABLES_USED's lock serialises changes to the
    // live pool, and the live mapper only turns invalid entries valid.
    let tables = unsafe { &mut *TABLES.0.get() };
    let mut map = Mapper::resume_live(tables, *used);
    let mut result = Ok(());
    let mut page = page_down(start);
    let end = page_up(start.saturating_add(size.max(1)));
    while page < end {
        result = match map.lookup(page) {
            Some(a) if a.kind == MemoryKind::Normal && a.writable => Ok(()),
            Some(_) => Err(MapError::LiveEntryChange { address: page }),
            None => map.map(page, page + PAGE_SIZE, Attributes::DATA),
        };
        if result.is_err() {
            break;
        }
        page += PAGE_SIZE;
    }
    *used = map.tables_used();
    // As in map_device: the new descriptors are visible to this CPU's
    // walks, and (after the DSB) to every other CPU's.
    barrier::dsb(barrier::ISHST);
    barrier::isb(barrier::SY);
    result
}

/// MAIR_EL1: index [`pagetable::MAIR_INDEX_DEVICE`] Device-nGnRE, index
/// [`pagetable::MAIR_INDEX_NORMAL`] Normal write-back read/write-allocate.
fn mair() -> u64 {
    const _: () = assert!(pagetable::MAIR_INDEX_DEVICE == 0 && pagetable::MAIR_INDEX_NORMAL == 1);
    (MAIR_EL1::Attr0_Device::nonGathering_nonReordering_EarlyWriteAck
        + MAIR_EL1::Attr1_Normal_Outer::WriteBack_NonTransient_ReadWriteAlloc
        + MAIR_EL1::Attr1_Normal_Inner::WriteBack_NonTransient_ReadWriteAlloc)
        .value
}

/// TCR_EL1: TTBR0 only, 48-bit VAs, 4 KiB granule, cacheable inner
/// shareable walks, physical address size from ID_AA64MMFR0_EL1 (at most
/// 48 bits, the most a 4 KiB granule map without LPA2 can output).
fn tcr() -> u64 {
    // PARange is at bit 0, so its field values are the register values,
    // and they equal the IPS encodings for every size up to 48 bits.
    let pa_range = ID_AA64MMFR0_EL1
        .read(ID_AA64MMFR0_EL1::PARange)
        .min(ID_AA64MMFR0_EL1::PARange::Bits_48.value);
    (TCR_EL1::T0SZ.val(u64::from(64 - pagetable::VA_BITS))
        + TCR_EL1::TG0::KiB_4
        + TCR_EL1::SH0::Inner
        + TCR_EL1::IRGN0::WriteBack_ReadAlloc_WriteAlloc_Cacheable
        + TCR_EL1::ORGN0::WriteBack_ReadAlloc_WriteAlloc_Cacheable
        + TCR_EL1::EPD1::DisableTTBR1Walks
        + TCR_EL1::IPS.val(pa_range))
    .value
}

const fn page_down(address: u64) -> u64 {
    address & !(PAGE_SIZE - 1)
}

const fn page_up(address: u64) -> u64 {
    address.saturating_add(PAGE_SIZE - 1) & !(PAGE_SIZE - 1)
}
