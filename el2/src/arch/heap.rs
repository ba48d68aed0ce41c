//! The hypervisor's heap: `el2::memory::heap::TransactionalHeap` over the `.heap`
//! section, which the Image header's image_size reserves. The section holds
//! the main heap and, after it, the reserve that lets a VM's creation fail
//! with an error instead of stopping the machine (see `el2::memory::heap`).

use aarch64_cpu::registers::MPIDR_EL1;
use el2::memory::heap::{HeapUsage, Transaction, TransactionalHeap};
use tock_registers::interfaces::Readable;

const HEAP_SIZE: usize = 16 * 1024 * 1024;
/// The reserve: what one VM's creation may still allocate between the main
/// heap's first refusal and its next checkpoint (the host test
/// `el2/tests/vm_creation_oom.rs` measures the need for the largest VM).
const RESERVE_SIZE: usize = 2 * 1024 * 1024;
const MAIN_SIZE: usize = HEAP_SIZE - RESERVE_SIZE;

/// Buddy orders: blocks up to 2^31 bytes, far more than the heap.
const ORDER: usize = 32;

#[repr(C, align(4096))]
struct HeapArea([u8; HEAP_SIZE]);

#[unsafe(link_section = ".heap")]
static mut HEAP_AREA: HeapArea = HeapArea([0; HEAP_SIZE]);

#[global_allocator]
static ALLOCATOR: TransactionalHeap<ORDER> = TransactionalHeap::new(calling_cpu);

/// The calling CPU's affinity: unique per CPU, never `usize::MAX`, and
/// readable before the per-CPU table exists.
fn calling_cpu() -> usize {
    (MPIDR_EL1.get() & platform::Mpidr::AFFINITY_MASK) as usize
}

/// Hands the heap area to the allocator. Call once, with the MMU and caches
/// on (the allocator's locks use exclusive accesses).
pub fn init() {
    let start = (&raw mut HEAP_AREA) as usize;
    // SAFETY: HEAP_AREA is used by nothing but the allocator, and this runs
    // once on the boot CPU before anything allocates; the two parts are
    // disjoint.
    unsafe { ALLOCATOR.init((start, MAIN_SIZE), (start + MAIN_SIZE, RESERVE_SIZE)) };
}

/// The heap's physical range, for the stage-1 map.
pub fn range() -> (u64, u64) {
    ((&raw const HEAP_AREA) as u64, HEAP_SIZE as u64)
}

/// An open allocation transaction of this heap.
pub type Txn = Transaction<'static, ORDER>;

/// An allocation transaction for work done on one VM's behalf.
pub fn transaction() -> Txn {
    ALLOCATOR.begin()
}

/// A transaction whose `n`-th allocation is refused (`el2.fail-alloc=`).
pub fn transaction_failing_at(n: u64) -> Txn {
    ALLOCATOR.begin_failing_at(n)
}

/// A transaction in which the heap refuses its `n`-th and every later
/// allocation (`el2.fail-alloc=`).
pub fn transaction_exhausted_at(n: u64) -> Txn {
    ALLOCATOR.begin_exhausted_at(n)
}

/// Bytes in use in the main heap and the reserve.
pub fn usage() -> HeapUsage {
    ALLOCATOR.usage()
}
