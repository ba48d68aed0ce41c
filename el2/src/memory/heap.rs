//! The hypervisor's heap, with allocation transactions for the work done
//! on one VM's behalf.
//!
//! Rust's infallible collections, and the crates el2 builds VMs with
//! (aarch64-paging's table allocation, vm-fdt's writer), cannot report an
//! allocation failure: they call `handle_alloc_error`, which at EL2 stops
//! the whole machine. A VM whose creation needs more heap than is left
//! must instead fail on its own, with an error naming its node, while the
//! other VMs start. So the work done for one VM (creating it, rebuilding
//! its device tree at reset) runs as a [`Transaction`]:
//!
//! - its allocations are served from the main heap as usual;
//! - if the main heap refuses one, the block comes from a separate reserve
//!   heap instead and the transaction is marked failed: the code in
//!   progress keeps running on valid memory and no null pointer ever
//!   reaches `handle_alloc_error`;
//! - the caller looks at [`Transaction::failed`] at its checkpoints, drops
//!   what it built (every block goes back to the heap it came from, found
//!   by address) and reports the VM as out of hypervisor memory.
//!
//! This is the emergency-pool idea (a reserve that guarantees forward
//! progress) put to error reporting. The reserve only has to hold what a
//! transaction allocates between its first failure and the caller's next
//! checkpoint; the host test `tests/vm_creation_oom.rs` measures that for
//! the largest VM the binding allows.
//!
//! Only the CPU that opened a transaction draws on the reserve; other
//! CPUs' allocations behave as without one. Transactions are serialised
//! (a second CPU waits); the owning CPU may nest them.
//!
//! For tests, a transaction can be told to fail its n-th main-heap
//! allocation (fault injection, like Linux's failslab): `el2.fail-alloc=`
//! uses it to fail a VM's creation at each of its allocations in turn.

use core::alloc::{GlobalAlloc, Layout};
use core::fmt;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use buddy_system_allocator::Heap;
use spin::Mutex;

/// The error a transaction's owner reports when the heap refused it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfMemory;

impl OutOfMemory {
    /// How the error reads.
    pub const MESSAGE: &'static str = "out of hypervisor memory";
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Self::MESSAGE)
    }
}

/// Bytes in use in each of the two heaps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapUsage {
    /// Main heap, in allocator blocks (a request rounded up to its order).
    pub main: usize,
    /// Reserve heap, likewise.
    pub reserve: usize,
}

/// No CPU owns the transaction state.
const NO_OWNER: usize = usize::MAX;
/// A fault-injection index no transaction reaches.
const NEVER: u64 = u64::MAX;

/// A buddy heap with a reserve for transactions; see the module docs.
/// `ORDER` is the buddy allocator's number of size classes (blocks up to
/// 2^(ORDER-1) bytes).
pub struct TransactionalHeap<const ORDER: usize> {
    main: Mutex<Heap<ORDER>>,
    reserve: Mutex<Heap<ORDER>>,
    /// `[start, end)` of the reserve's memory, to route frees.
    reserve_start: AtomicUsize,
    reserve_end: AtomicUsize,
    /// Who is calling: a value unique per CPU (per thread on the host),
    /// never `usize::MAX`.
    caller: fn() -> usize,
    /// The CPU whose transaction is open, or [`NO_OWNER`].
    owner: AtomicUsize,
    /// Nesting depth of the owner's transactions.
    depth: AtomicUsize,
    /// Whether the open transaction was refused memory by the main heap.
    failed: AtomicBool,
    /// Main-heap allocations the open transaction has asked for.
    attempts: AtomicU64,
    /// The attempt number to refuse (fault injection), or [`NEVER`].
    fail_at: AtomicU64,
    /// Whether every attempt after `fail_at` is refused too.
    fail_after: AtomicBool,
}

impl<const ORDER: usize> TransactionalHeap<ORDER> {
    /// An empty heap (every allocation fails until [`Self::init`]).
    /// `caller` names the calling CPU (a value unique per CPU, never
    /// `usize::MAX`); it runs on every allocation, so it must not allocate.
    pub const fn new(caller: fn() -> usize) -> Self {
        Self {
            main: Mutex::new(Heap::empty()),
            reserve: Mutex::new(Heap::empty()),
            reserve_start: AtomicUsize::new(0),
            reserve_end: AtomicUsize::new(0),
            caller,
            owner: AtomicUsize::new(NO_OWNER),
            depth: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            attempts: AtomicU64::new(0),
            fail_at: AtomicU64::new(NEVER),
            fail_after: AtomicBool::new(false),
        }
    }

    /// Hands the two memory areas to the heap.
    ///
    /// # Safety
    /// Each `(start, size)` must be memory that nothing else uses, valid
    /// for reads and writes for the rest of the program, the two disjoint;
    /// call once, before anything allocates.
    pub unsafe fn init(&self, main: (usize, usize), reserve: (usize, usize)) {
        self.reserve_start.store(reserve.0, Ordering::Relaxed);
        self.reserve_end
            .store(reserve.0.saturating_add(reserve.1), Ordering::Relaxed);
        // SAFETY: per the caller, both areas are ours alone and live forever.
        unsafe {
            self.main.lock().init(main.0, main.1);
            self.reserve.lock().init(reserve.0, reserve.1);
        }
    }

    /// Opens a transaction for the calling CPU, waiting while another
    /// CPU's is open. Nested calls on the owning CPU join the open one.
    pub fn begin(&self) -> Transaction<'_, ORDER> {
        self.open(NEVER, false)
    }

    /// Opens a transaction whose `n`-th main-heap allocation (counting
    /// from 0) is refused, to test the caller's failure path. Ignored
    /// (joins) when the calling CPU already has one open.
    pub fn begin_failing_at(&self, n: u64) -> Transaction<'_, ORDER> {
        self.open(n, false)
    }

    /// Like [`Self::begin_failing_at`], but the main heap also refuses
    /// every later allocation, as an exhausted heap would.
    pub fn begin_exhausted_at(&self, n: u64) -> Transaction<'_, ORDER> {
        self.open(n, true)
    }

    fn open(&self, fail_at: u64, fail_after: bool) -> Transaction<'_, ORDER> {
        let me = (self.caller)();
        if self.owner.load(Ordering::Acquire) == me {
            self.depth.fetch_add(1, Ordering::Relaxed);
            return Transaction { heap: self };
        }
        while self
            .owner
            .compare_exchange_weak(NO_OWNER, me, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        self.depth.store(1, Ordering::Relaxed);
        self.failed.store(false, Ordering::Relaxed);
        self.attempts.store(0, Ordering::Relaxed);
        self.fail_at.store(fail_at, Ordering::Relaxed);
        self.fail_after.store(fail_after, Ordering::Relaxed);
        Transaction { heap: self }
    }

    /// What both heaps have handed out and not had back.
    pub fn usage(&self) -> HeapUsage {
        HeapUsage {
            main: self.main.lock().stats_alloc_actual(),
            reserve: self.reserve.lock().stats_alloc_actual(),
        }
    }

    fn in_reserve(&self, ptr: *mut u8) -> bool {
        let addr = ptr as usize;
        addr >= self.reserve_start.load(Ordering::Relaxed)
            && addr < self.reserve_end.load(Ordering::Relaxed)
    }

    fn transaction_is_mine(&self) -> bool {
        self.owner.load(Ordering::Relaxed) == (self.caller)()
    }
}

fn raw(result: Result<NonNull<u8>, ()>) -> *mut u8 {
    result.map_or(ptr::null_mut(), NonNull::as_ptr)
}

// SAFETY: blocks come from one of two buddy heaps, each behind its own
// lock, and go back to the one whose memory holds them; a block is never
// in both (the areas are disjoint, per `init`).
unsafe impl<const ORDER: usize> GlobalAlloc for TransactionalHeap<ORDER> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !self.transaction_is_mine() {
            return raw(self.main.lock().alloc(layout));
        }
        let attempt = self.attempts.fetch_add(1, Ordering::Relaxed);
        let fail_at = self.fail_at.load(Ordering::Relaxed);
        let refuse =
            attempt == fail_at || (attempt > fail_at && self.fail_after.load(Ordering::Relaxed));
        if !refuse && let Ok(block) = self.main.lock().alloc(layout) {
            return block.as_ptr();
        }
        self.failed.store(true, Ordering::Relaxed);
        raw(self.reserve.lock().alloc(layout))
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(block) = NonNull::new(ptr) else {
            return;
        };
        let heap = if self.in_reserve(ptr) {
            &self.reserve
        } else {
            &self.main
        };
        // SAFETY: per GlobalAlloc, `ptr` came from `alloc` with `layout`,
        // which took it from the heap whose area contains it.
        unsafe { heap.lock().dealloc(block, layout) };
    }
}

/// An open allocation transaction; closes when dropped (the outermost one
/// releases the heap to other CPUs).
pub struct Transaction<'a, const ORDER: usize> {
    heap: &'a TransactionalHeap<ORDER>,
}

impl<const ORDER: usize> Transaction<'_, ORDER> {
    /// Whether the main heap refused one of this transaction's
    /// allocations (which the reserve then served).
    pub fn failed(&self) -> bool {
        self.heap.failed.load(Ordering::Relaxed)
    }

    /// `Err(OutOfMemory)` once [`Self::failed`]: a checkpoint.
    pub fn check(&self) -> Result<(), OutOfMemory> {
        if self.failed() {
            Err(OutOfMemory)
        } else {
            Ok(())
        }
    }

    /// Main-heap allocations asked for so far.
    pub fn allocations(&self) -> u64 {
        self.heap.attempts.load(Ordering::Relaxed)
    }
}

/// What a VM's creation needs of an open allocation transaction; the
/// runner's `Machine` hands out [`Transaction`]s on the hardware and a
/// fake in the host tests.
pub trait Allocations {
    /// `Err(OutOfMemory)` once the heap refused one of its allocations.
    fn check(&self) -> Result<(), OutOfMemory>;
    /// Whether the heap refused one of its allocations.
    fn failed(&self) -> bool;
}

impl<const ORDER: usize> Allocations for Transaction<'_, ORDER> {
    fn check(&self) -> Result<(), OutOfMemory> {
        Transaction::check(self)
    }

    fn failed(&self) -> bool {
        Transaction::failed(self)
    }
}

impl<const ORDER: usize> Drop for Transaction<'_, ORDER> {
    fn drop(&mut self) {
        if self.heap.depth.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.heap.fail_at.store(NEVER, Ordering::Relaxed);
            self.heap.fail_after.store(false, Ordering::Relaxed);
            self.heap.owner.store(NO_OWNER, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as StdAtomicUsize;

    const MAIN: usize = 64 * 1024;
    const RESERVE: usize = 64 * 1024;

    fn thread_id() -> usize {
        static NEXT: StdAtomicUsize = StdAtomicUsize::new(1);
        std::thread_local!(static ID: usize = NEXT.fetch_add(1, Ordering::Relaxed));
        ID.with(|id| *id)
    }

    /// A heap over two leaked, page-aligned areas.
    fn heap() -> &'static TransactionalHeap<20> {
        let heap = Box::leak(Box::new(TransactionalHeap::<20>::new(thread_id)));
        let area = |size| {
            let layout = Layout::from_size_align(size, 4096).unwrap();
            // SAFETY: non-zero size; leaked, so it lives forever.
            (unsafe { std::alloc::alloc(layout) }) as usize
        };
        // SAFETY: two fresh leaked areas of exactly these sizes.
        unsafe { heap.init((area(MAIN), MAIN), (area(RESERVE), RESERVE)) };
        heap
    }

    fn alloc(heap: &TransactionalHeap<20>, size: usize) -> (*mut u8, Layout) {
        let layout = Layout::from_size_align(size, 8).unwrap();
        // SAFETY: non-zero size.
        (unsafe { heap.alloc(layout) }, layout)
    }

    fn free(heap: &TransactionalHeap<20>, (ptr, layout): (*mut u8, Layout)) {
        // SAFETY: from `alloc` with this layout.
        unsafe { heap.dealloc(ptr, layout) }
    }

    #[test]
    fn without_a_transaction_an_exhausted_heap_returns_null() {
        let heap = heap();
        let big = alloc(heap, MAIN / 2);
        assert!(!big.0.is_null());
        assert!(alloc(heap, MAIN).0.is_null(), "half the heap is taken");
        assert_eq!(heap.usage().reserve, 0);
        free(heap, big);
        assert_eq!(heap.usage(), HeapUsage::default());
    }

    #[test]
    fn a_refused_transaction_allocation_comes_from_the_reserve_and_goes_back_there() {
        let heap = heap();
        let hogs = [alloc(heap, MAIN / 2), alloc(heap, MAIN / 4)];
        let txn = heap.begin();
        let small = alloc(heap, 64);
        assert!(!txn.failed(), "a small block still fits");
        assert_eq!(txn.check(), Ok(()));
        let refused = alloc(heap, MAIN / 2);
        assert!(!refused.0.is_null(), "served from the reserve");
        assert!(txn.failed());
        assert_eq!(txn.check(), Err(OutOfMemory));
        assert!(heap.in_reserve(refused.0));
        assert!(!heap.in_reserve(small.0));
        assert!(heap.usage().reserve >= MAIN / 2);
        free(heap, refused);
        free(heap, small);
        drop(txn);
        assert_eq!(heap.usage().reserve, 0);
        hogs.into_iter().for_each(|b| free(heap, b));
        assert_eq!(heap.usage(), HeapUsage::default());
    }

    #[test]
    fn beyond_the_reserve_it_is_null_again() {
        let heap = heap();
        let _txn = heap.begin();
        let a = alloc(heap, MAIN / 2);
        let b = alloc(heap, 2 * MAIN);
        assert!(!a.0.is_null());
        assert!(b.0.is_null(), "larger than both heaps");
    }

    #[test]
    fn fault_injection_refuses_exactly_the_nth_main_allocation() {
        let heap = heap();
        for n in 0..5u64 {
            let txn = heap.begin_failing_at(n);
            let blocks: Vec<_> = (0..5).map(|_| alloc(heap, 32)).collect();
            assert!(txn.failed());
            assert_eq!(txn.allocations(), 5);
            for (i, &(ptr, _)) in blocks.iter().enumerate() {
                assert_eq!(heap.in_reserve(ptr), i as u64 == n, "block {i}, n {n}");
            }
            blocks.into_iter().for_each(|b| free(heap, b));
            drop(txn);
            assert_eq!(heap.usage(), HeapUsage::default());
        }
        let txn = heap.begin_failing_at(5);
        let blocks: Vec<_> = (0..5).map(|_| alloc(heap, 32)).collect();
        assert!(!txn.failed(), "only five allocations were made");
        blocks.into_iter().for_each(|b| free(heap, b));
    }

    #[test]
    fn an_exhausted_heap_refuses_from_the_nth_allocation_on() {
        let heap = heap();
        let txn = heap.begin_exhausted_at(2);
        let blocks: Vec<_> = (0..5).map(|_| alloc(heap, 32)).collect();
        let from_reserve: Vec<bool> = blocks.iter().map(|b| heap.in_reserve(b.0)).collect();
        assert_eq!(from_reserve, [false, false, true, true, true]);
        blocks.into_iter().for_each(|b| free(heap, b));
        drop(txn);
        let txn = heap.begin();
        let block = alloc(heap, 32);
        assert!(
            !heap.in_reserve(block.0) && !txn.failed(),
            "the next one starts afresh"
        );
        free(heap, block);
    }

    #[test]
    fn a_new_transaction_starts_clean_and_nesting_joins_the_open_one() {
        let heap = heap();
        {
            let outer = heap.begin_failing_at(0);
            {
                let inner = heap.begin_failing_at(7);
                let block = alloc(heap, 16);
                assert!(inner.failed(), "the outer transaction's injection holds");
                free(heap, block);
            }
            assert!(outer.failed(), "the inner transaction was the same one");
            assert_eq!(heap.owner.load(Ordering::Relaxed), thread_id());
        }
        assert_eq!(heap.owner.load(Ordering::Relaxed), NO_OWNER);
        let txn = heap.begin();
        assert!(!txn.failed());
        assert_eq!(txn.allocations(), 0);
    }

    #[test]
    fn other_threads_neither_use_the_reserve_nor_disturb_the_count() {
        let heap = heap();
        let txn = heap.begin_failing_at(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let block = alloc(heap, 64);
                assert!(!heap.in_reserve(block.0));
                free(heap, block);
                assert!(alloc(heap, MAIN * 2).0.is_null(), "no reserve for us");
            });
        });
        assert!(!txn.failed());
        assert_eq!(txn.allocations(), 0);
    }

    #[test]
    fn a_second_thread_waits_for_the_open_transaction() {
        let heap = heap();
        let txn = heap.begin();
        let entered = AtomicBool::new(false);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let _theirs = heap.begin();
                entered.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!entered.load(Ordering::SeqCst), "it must wait for ours");
            drop(txn);
            waiter.join().unwrap();
        });
        assert!(entered.load(Ordering::SeqCst));
    }
}
