//! Per-CPU stacks, reserved in the image: the `.stacks` output section is
//! inside the Image header's `image_size`, so the loader keeps it free.
//!
//! Each CPU has two stacks, one of each [`StackArray`]: a thread stack
//! (SP_EL0: ordinary code runs in EL2t or EL1t on it) and an exception
//! stack (SP_EL2 or SP_EL1: every exception switches to it), so that a
//! thread-stack overflow is reported from a good stack. Slot `i` of an
//! array is `[guard page][stack]`; the stack grows down towards its guard,
//! which the image's stage-1 map leaves unmapped, so an overflow faults
//! instead of running into the neighbour and [`StackArray::guard_owner`]
//! names whose stack it was.
//!
//! `per_cpu_stacks!` defines an image's two
//! arrays and `boot_set_stacks`, which the entry code calls on each CPU
//! once `.bss` is zero (or its MMU is on):
//!
//! | in | out | clobbers |
//! |---|---|---|
//! | x0 = logical CPU number (kept) | SP_ELx (SPSel 1) = x1 = top of its exception stack; SP_EL0 = x2 = top of its thread stack; SPSel = 0 | x3, x4 |
//!
//! `msr spsel` selects the current level's own stack pointer, so the
//! routine is the same at EL1 and EL2.

use core::ops::Range;

/// Bytes of a guard page (the images' translation granule is 4 KiB).
pub const GUARD_SIZE: u64 = 4096;

/// Bytes of one slot of an array whose stacks are `stack_size` bytes.
pub const fn slot_size(stack_size: usize) -> usize {
    GUARD_SIZE as usize + stack_size
}

/// One kind of stack for every CPU, each above its own guard page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackArray {
    /// Address of slot 0 (its guard page).
    pub base: u64,
    /// How many CPUs have a slot.
    pub slots: usize,
    /// Bytes of one stack, a multiple of [`GUARD_SIZE`].
    pub stack_size: u64,
}

impl StackArray {
    pub const fn slot_size(&self) -> u64 {
        GUARD_SIZE + self.stack_size
    }

    /// The guard page below `cpu`'s stack.
    pub const fn guard(&self, cpu: usize) -> Range<u64> {
        let start = self.base + cpu as u64 * self.slot_size();
        start..start + GUARD_SIZE
    }

    /// `cpu`'s usable stack; its end is the initial SP.
    pub const fn stack(&self, cpu: usize) -> Range<u64> {
        let start = self.guard(cpu).end;
        start..start + self.stack_size
    }

    /// Every slot, guards included.
    pub const fn all(&self) -> Range<u64> {
        self.base..self.base + self.slots as u64 * self.slot_size()
    }

    /// The CPU whose guard page holds `address`, if any.
    pub fn guard_owner(&self, address: u64) -> Option<usize> {
        let offset = address.checked_sub(self.base)?;
        let cpu = usize::try_from(offset / self.slot_size()).ok()?;
        (cpu < self.slots && offset % self.slot_size() < GUARD_SIZE).then_some(cpu)
    }
}

/// The storage of one [`StackArray`]: `N` slots of `SLOT` bytes, page
/// aligned. Reached only through SP and through the address of the static
/// that holds it, never through a Rust reference.
#[repr(C, align(4096))]
pub struct Slots<const SLOT: usize, const N: usize>([[u8; SLOT]; N]);

impl<const SLOT: usize, const N: usize> Slots<SLOT, N> {
    const VALID: () = assert!(
        SLOT.is_multiple_of(GUARD_SIZE as usize) && SLOT > GUARD_SIZE as usize,
        "a slot is a guard page and a whole number of stack pages"
    );

    pub const fn new() -> Self {
        let () = Self::VALID;
        Self([[0; SLOT]; N])
    }
}

impl<const SLOT: usize, const N: usize> Default for Slots<SLOT, N> {
    fn default() -> Self {
        Self::new()
    }
}

/// Defines an image's per-CPU stacks: `THREAD_STACKS` (section
/// `.stacks.thread`) and `EXCEPTION_STACKS` (`.stacks.exception`), the
/// functions `thread_stacks()` and `exception_stacks()` that describe them
/// as [`StackArray`]s, and the routine `boot_set_stacks` (see the module
/// documentation). Invoke it once per image, in the module that owns the
/// stacks; sizes are in bytes, multiples of [`GUARD_SIZE`].
///
/// ```ignore
/// boot::per_cpu_stacks!(cpus: MAX_CPUS, thread: 32 * 1024, exception: 16 * 1024);
/// ```
#[cfg(target_os = "none")]
#[macro_export]
macro_rules! per_cpu_stacks {
    (cpus: $cpus:expr, thread: $thread:expr, exception: $exception:expr $(,)?) => {
        const THREAD_SLOT_SIZE: usize = $crate::stacks::slot_size($thread);
        const EXCEPTION_SLOT_SIZE: usize = $crate::stacks::slot_size($exception);

        // Reached through SP and `boot_set_stacks` only: no Rust reference
        // to either exists. NOLOAD in the linker script: not in the file.
        #[unsafe(link_section = ".stacks.thread")]
        static mut THREAD_STACKS: $crate::stacks::Slots<THREAD_SLOT_SIZE, { $cpus }> =
            $crate::stacks::Slots::new();
        #[unsafe(link_section = ".stacks.exception")]
        static mut EXCEPTION_STACKS: $crate::stacks::Slots<EXCEPTION_SLOT_SIZE, { $cpus }> =
            $crate::stacks::Slots::new();

        /// Every CPU's thread stack (SP_EL0).
        pub fn thread_stacks() -> $crate::stacks::StackArray {
            $crate::stacks::StackArray {
                base: (&raw const THREAD_STACKS) as u64,
                slots: $cpus,
                stack_size: ($thread) as u64,
            }
        }

        /// Every CPU's exception stack (SP_ELx).
        pub fn exception_stacks() -> $crate::stacks::StackArray {
            $crate::stacks::StackArray {
                base: (&raw const EXCEPTION_STACKS) as u64,
                slots: $cpus,
                stack_size: ($exception) as u64,
            }
        }

        // x0 = CPU; slot n's stack ends where slot n + 1 begins.
        core::arch::global_asm!(
            r#"
    .section .text.boot.set_stacks, "ax"
    .global boot_set_stacks
boot_set_stacks:
    add     x3, x0, #1
    adrp    x1, {exception_stacks}
    add     x1, x1, :lo12:{exception_stacks}
    ldr     x4, ={exception_slot}
    madd    x1, x3, x4, x1
    adrp    x2, {thread_stacks}
    add     x2, x2, :lo12:{thread_stacks}
    ldr     x4, ={thread_slot}
    madd    x2, x3, x4, x2
    msr     spsel, #1
    mov     sp, x1
    msr     spsel, #0
    mov     sp, x2
    ret
    .ltorg
"#,
            exception_stacks = sym EXCEPTION_STACKS,
            thread_stacks = sym THREAD_STACKS,
            exception_slot = const EXCEPTION_SLOT_SIZE,
            thread_slot = const THREAD_SLOT_SIZE,
        );
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array() -> StackArray {
        StackArray {
            base: 0x4010_0000,
            slots: 4,
            stack_size: 8 * GUARD_SIZE,
        }
    }

    #[test]
    fn slots_are_a_guard_then_the_stack() {
        let stacks = array();
        assert_eq!(stacks.slot_size(), 9 * GUARD_SIZE);
        assert_eq!(slot_size(8 * 4096) as u64, stacks.slot_size());
        assert_eq!(stacks.guard(0), 0x4010_0000..0x4010_1000);
        assert_eq!(stacks.stack(0), 0x4010_1000..0x4010_9000);
        assert_eq!(stacks.guard(1).start, stacks.stack(0).end);
        assert_eq!(stacks.all(), 0x4010_0000..0x4010_0000 + 36 * GUARD_SIZE);
        assert_eq!(stacks.stack(3).end, stacks.all().end);
    }

    #[test]
    fn guard_owner_names_the_cpu_whose_guard_it_is() {
        let stacks = array();
        for cpu in 0..stacks.slots {
            let guard = stacks.guard(cpu);
            assert_eq!(stacks.guard_owner(guard.start), Some(cpu));
            assert_eq!(stacks.guard_owner(guard.end - 1), Some(cpu));
            assert_eq!(stacks.guard_owner(stacks.stack(cpu).start), None);
            assert_eq!(stacks.guard_owner(stacks.stack(cpu).end - 1), None);
        }
        assert_eq!(stacks.guard_owner(stacks.base - 1), None);
        // Past the last slot: another array's guard, not ours.
        assert_eq!(stacks.guard_owner(stacks.all().end), None);
        assert_eq!(stacks.guard_owner(u64::MAX), None);
    }
}
