//! The hypervisor's heap: a buddy allocator over the `.heap` section,
//! which the Image header's image_size reserves.

use buddy_system_allocator::LockedHeap;

const HEAP_SIZE: usize = 16 * 1024 * 1024;

#[repr(C, align(4096))]
struct HeapArea([u8; HEAP_SIZE]);

#[unsafe(link_section = ".heap")]
static mut HEAP_AREA: HeapArea = HeapArea([0; HEAP_SIZE]);

/// Orders up to 2^32 bytes; the heap is far smaller.
#[global_allocator]
static ALLOCATOR: LockedHeap<32> = LockedHeap::empty();

/// Hands the heap area to the allocator. Call once, with the MMU and caches
/// on (the allocator's lock uses exclusive accesses).
pub fn init() {
    let start = (&raw mut HEAP_AREA) as usize;
    // SAFETY: HEAP_AREA is used by nothing but the allocator, and this runs
    // once on the boot CPU before anything allocates.
    unsafe { ALLOCATOR.lock().init(start, HEAP_SIZE) };
}

/// The heap's physical range, for the stage-1 map.
pub fn range() -> (u64, u64) {
    ((&raw const HEAP_AREA) as u64, HEAP_SIZE as u64)
}
