//! Per-CPU stacks, reserved in the image (the `.stacks` section is part of
//! the Image header's image_size, so the boot loader keeps it free).
//!
//! Each slot is a guard page followed by the stack; the stage-1 map leaves
//! the guard unmapped (see `el2::layout`).

use el2::layout::{PAGE_SIZE, StackArray};
use el2::smp::MAX_CPUS;

const THREAD_STACK_SIZE: usize = 32 * 1024;
const EXCEPTION_STACK_SIZE: usize = 16 * 1024;

pub const THREAD_SLOT_SIZE: usize = PAGE_SIZE as usize + THREAD_STACK_SIZE;
pub const EXCEPTION_SLOT_SIZE: usize = PAGE_SIZE as usize + EXCEPTION_STACK_SIZE;

#[repr(C, align(4096))]
pub struct Slots<const SLOT: usize>([[u8; SLOT]; MAX_CPUS]);

// Stacks are only ever reached through SP, never through these symbols, so
// no Rust reference to them exists.
#[unsafe(link_section = ".stacks.thread")]
pub static mut THREAD_STACKS: Slots<THREAD_SLOT_SIZE> = Slots([[0; THREAD_SLOT_SIZE]; MAX_CPUS]);
#[unsafe(link_section = ".stacks.exception")]
pub static mut EXCEPTION_STACKS: Slots<EXCEPTION_SLOT_SIZE> =
    Slots([[0; EXCEPTION_SLOT_SIZE]; MAX_CPUS]);

pub fn thread_stacks() -> StackArray {
    StackArray {
        base: (&raw const THREAD_STACKS) as u64,
        slots: MAX_CPUS,
        stack_size: THREAD_STACK_SIZE as u64,
    }
}

pub fn exception_stacks() -> StackArray {
    StackArray {
        base: (&raw const EXCEPTION_STACKS) as u64,
        slots: MAX_CPUS,
        stack_size: EXCEPTION_STACK_SIZE as u64,
    }
}
