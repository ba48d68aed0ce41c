//! Per-CPU stacks, reserved in the image (the `.stacks` section is inside
//! the Image header's image_size, so the loader keeps it free).
//!
//! Each CPU's slot, from low to high addresses:
//!
//! | offset | size | what |
//! |---|---|---|
//! | 0 | 4 KiB | guard page (unmapped) |
//! | 4 KiB | [`EXCEPTION_STACK_SIZE`] | exception stack (SP_EL1) |
//! | 12 KiB | 4 KiB | guard page (unmapped) |
//! | 16 KiB | [`THREAD_STACK_SIZE`] | thread stack (SP_EL0) |
//!
//! A stack that overflows runs into its guard page; the fault is taken on
//! the exception stack and reported as a stack overflow of that CPU.

use crate::devicetree::MAX_CPUS;
use crate::pagetable::PAGE_SIZE;

const GUARD_SIZE: usize = PAGE_SIZE as usize;
/// Bytes of exception stack per CPU: the fault report runs on it.
pub const EXCEPTION_STACK_SIZE: usize = 8 * 1024;
/// Bytes of thread stack per CPU: `main`, `secondary_main` and what they call.
pub const THREAD_STACK_SIZE: usize = 32 * 1024;
/// Offset in a slot of the exception stack's top (its initial SP).
pub const EXCEPTION_STACK_TOP: usize = GUARD_SIZE + EXCEPTION_STACK_SIZE;
/// Offset in a slot of the thread stack's guard page.
const THREAD_GUARD: usize = EXCEPTION_STACK_TOP;
/// Offset in a slot of the thread stack's top (its initial SP).
pub const THREAD_STACK_TOP: usize = THREAD_GUARD + GUARD_SIZE + THREAD_STACK_SIZE;
/// Bytes per CPU.
pub const SLOT_SIZE: usize = THREAD_STACK_TOP;

const _: () = assert!(
    SLOT_SIZE.is_multiple_of(GUARD_SIZE) && EXCEPTION_STACK_SIZE.is_multiple_of(GUARD_SIZE)
);

/// The stacks of every possible CPU.
#[repr(C, align(4096))]
pub struct Slots([[u8; SLOT_SIZE]; MAX_CPUS]);

/// Stacks are only ever reached through SP, never through this symbol, so
/// no Rust reference to it exists. NOLOAD: not part of the file, not zeroed.
#[unsafe(link_section = ".stacks")]
pub static mut STACKS: Slots = Slots([[0; SLOT_SIZE]; MAX_CPUS]);

fn base() -> u64 {
    (&raw const STACKS) as u64
}

/// The guard pages of every slot, for the stage-1 map to leave unmapped.
pub fn guard_pages() -> impl Iterator<Item = u64> {
    let base = base();
    (0..MAX_CPUS).flat_map(move |cpu| {
        let slot = base + (cpu * SLOT_SIZE) as u64;
        [slot, slot + THREAD_GUARD as u64]
    })
}

/// Whose guard page `address` is in, if any: (CPU, "thread"/"exception").
pub fn guard_owner(address: u64) -> Option<(usize, &'static str)> {
    let offset = address.checked_sub(base())? as usize;
    let cpu = offset / SLOT_SIZE;
    if cpu >= MAX_CPUS {
        return None;
    }
    match offset % SLOT_SIZE {
        o if o < GUARD_SIZE => Some((cpu, "exception")),
        o if (THREAD_GUARD..THREAD_GUARD + GUARD_SIZE).contains(&o) => Some((cpu, "thread")),
        _ => None,
    }
}
