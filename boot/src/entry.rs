//! What both images do first, with the MMU off (or, el2's EFI stage, on
//! with an identity map) and before any Rust code runs: drop stale cache
//! lines over the image, apply the image's own relocations and zero
//! `.bss`.
//!
//! Each is an assembly routine an image's entry code calls with `bl`. They
//! use no stack (there is none yet) and no exception-level register, so
//! one copy serves EL1 and EL2:
//!
//! | routine | does | returns | clobbers |
//! |---|---|---|---|
//! | `boot_invalidate_image` | DC IVAC over `[__image_start, __image_end)`, then DSB SY | — | x0-x4 |
//! | `boot_relocate` | `*(base + r_offset) = base + r_addend` for every `.rela.dyn` entry, base = `__image_start` | x0 = 0, or 1 at the first entry that is not `R_AARCH64_RELATIVE` | x0-x5 |
//! | `boot_zero_bss` | zeroes `[__bss_start, __bss_end)` | — | x0-x1 |
//!
//! Why the invalidation: with the MMU off every data access is
//! Non-cacheable, so it goes past the caches; a clean line a loader (or a
//! previous user of the RAM) left behind would, once the caches are on,
//! hide what was written meanwhile (Arm ARM D7.5.9, "Data cache
//! maintenance instructions"; booting.rst requires the loader to clean,
//! not to invalidate). Under a hypervisor, DC IVAC at EL1 is performed as
//! a clean and invalidate. It must not run with the caches on (el2's EFI
//! stage), where it would throw away dirty data.
//!
//! Why the relocation is its own: the images are static PIEs (linked at
//! 0, `-pie --no-dynamic-linker`), so the only dynamic relocations are
//! `R_AARCH64_RELATIVE` (ELF for the Arm 64-bit Architecture, "Dynamic
//! relocations"). Applying them is idempotent, which lets el2's EFI entry
//! and then its ordinary entry both run it over the same image.

/// The ELF relocation type of a base-relative 64-bit address (ELF for the
/// Arm 64-bit Architecture, "Dynamic relocations").
pub const R_AARCH64_RELATIVE: u64 = 1027;

/// Bytes of one `Elf64_Rela` (r_offset, r_info, r_addend).
pub const RELA_ENTRY_SIZE: usize = 24;

#[cfg(target_os = "none")]
core::arch::global_asm!(
    r#"
    .section .text.boot.invalidate_image, "ax"
    .global boot_invalidate_image
boot_invalidate_image:
    adrp    x0, __image_start
    add     x0, x0, :lo12:__image_start
    adrp    x1, __image_end
    add     x1, x1, :lo12:__image_end
    mrs     x2, ctr_el0
    ubfx    x2, x2, #16, #4         // CTR_EL0.DminLine: log2(words per line)
    mov     x3, #4
    lsl     x3, x3, x2              // bytes per D-cache line
    sub     x4, x3, #1
    bic     x0, x0, x4
0:  dc      ivac, x0
    add     x0, x0, x3
    cmp     x0, x1
    b.lo    0b
    dsb     sy
    ret

    .section .text.boot.relocate, "ax"
    .global boot_relocate
boot_relocate:
    adrp    x0, __image_start
    add     x0, x0, :lo12:__image_start
    adrp    x1, __rela_start
    add     x1, x1, :lo12:__rela_start
    adrp    x2, __rela_end
    add     x2, x2, :lo12:__rela_end
0:  cmp     x1, x2
    b.hs    1f
    ldp     x3, x4, [x1], #16       // r_offset, r_info
    ldr     x5, [x1], #8            // r_addend
    cmp     x4, #{r_aarch64_relative}
    b.ne    2f
    add     x5, x5, x0
    str     x5, [x0, x3]
    b       0b
1:  mov     x0, #0
    ret
2:  mov     x0, #1
    ret

    .section .text.boot.zero_bss, "ax"
    .global boot_zero_bss
boot_zero_bss:
    adrp    x0, __bss_start
    add     x0, x0, :lo12:__bss_start
    adrp    x1, __bss_end
    add     x1, x1, :lo12:__bss_end
0:  cmp     x0, x1
    b.hs    1f
    stp     xzr, xzr, [x0], #16
    b       0b
1:  ret
"#,
    r_aarch64_relative = const R_AARCH64_RELATIVE,
);

// `boot_relocate` reads each entry as 16 + 8 bytes.
const _: () = assert!(RELA_ENTRY_SIZE == 16 + 8);
