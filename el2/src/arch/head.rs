//! The image header and the first instructions each CPU executes.
//!
//! The boot CPU enters at `_head` per the arm64 Image protocol
//! (Documentation/arch/arm64/booting.rst): EL2, MMU and D-cache off,
//! x0 = physical address of the device tree. Secondary CPUs enter at
//! `secondary_entry` from PSCI CPU_ON with MMU off and x0 = the context id,
//! which is their logical CPU number.
//!
//! Before any Rust code runs, the boot CPU invalidates stale cache lines
//! over the image, applies its own R_AARCH64_RELATIVE relocations (the image
//! is a position-independent executable linked at 0) and zeroes .bss.
//! Every CPU then switches to its own stacks: ordinary code runs on SP_EL0
//! (the thread stack), and exceptions taken at EL2 switch to SP_EL2 (the
//! exception stack), so a thread-stack overflow is reported from a good stack.

use super::{mmu, stacks};

use core::arch::global_asm;

/// Image header `text_offset`: where a loader places the image above a 2 MiB boundary.
const TEXT_OFFSET: u64 = 0x8_0000;
/// Image header `flags`: little-endian (bit 0 = 0), 4 KiB pages (bits 2:1 = 1),
/// placement anywhere after a 2 MiB aligned base (bit 3 = 0).
const IMAGE_FLAGS: u64 = 0b0010;
/// CurrentEL.EL (bits 3:2) when running at EL2.
const CURRENT_EL_EL2: u64 = 2 << 2;
/// ELF relocation type of a base-relative 64-bit address (ELF for the Arm
/// 64-bit Architecture, "Dynamic relocations").
const R_AARCH64_RELATIVE: u64 = 1027;

global_asm!(
    r#"
    .section .text.head, "ax"
    .global _head
_head:
    b       {primary_entry}         // code0
    .long   0                       // code1
    .quad   {text_offset}           // text_offset
    .quad   __image_size            // image_size
    .quad   {image_flags}           // flags
    .quad   0                       // res2
    .quad   0                       // res3
    .quad   0                       // res4
    .ascii  "ARM\x64"               // magic
    .long   0                       // res5

    .section .text.boot, "ax"
    .global {primary_entry}
{primary_entry}:
    mov     x19, x0
    msr     daifset, #0xf
    mrs     x1, CurrentEL
    cmp     x1, #{current_el_el2}
    b.ne    .Lpark
    ldr     x1, ={sctlr_mmu_off}
    msr     sctlr_el2, x1
    isb

    // Clean lines the boot loader may have left in the caches hold nothing
    // of ours; drop them so that nothing stale hides what we now write with
    // the MMU (and so the caches) off.
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

    // Apply R_AARCH64_RELATIVE relocations: *(base + offset) = base + addend.
    adr     x0, _head
    adrp    x1, __rela_start
    add     x1, x1, :lo12:__rela_start
    adrp    x2, __rela_end
    add     x2, x2, :lo12:__rela_end
1:  cmp     x1, x2
    b.hs    2f
    ldp     x3, x4, [x1], #16       // r_offset, r_info
    ldr     x5, [x1], #8            // r_addend
    cmp     x4, #{r_aarch64_relative}
    b.ne    .Lpark                  // nothing else is expected in a static PIE
    add     x5, x5, x0
    str     x5, [x0, x3]
    b       1b
2:
    // Zero .bss (64-byte aligned at both ends by the linker script).
    adrp    x0, __bss_start
    add     x0, x0, :lo12:__bss_start
    adrp    x1, __bss_end
    add     x1, x1, :lo12:__bss_end
3:  cmp     x0, x1
    b.hs    4f
    stp     xzr, xzr, [x0], #16
    b       3b
4:
    mov     x20, #0
    bl      .Lset_stacks
    mov     x0, x19
    bl      {primary_main}
.Lpark:
    wfe
    b       .Lpark

    .global {secondary_entry}
{secondary_entry}:
    msr     daifset, #0xf
    mov     x20, x0
    ldr     x1, ={sctlr_mmu_off}
    msr     sctlr_el2, x1
    isb
    // The boot CPU wrote the final translation settings and cleaned them to
    // the point of coherency; turn the MMU on before touching any memory
    // through the caches.
    adrp    x0, {mmu_params}
    add     x0, x0, :lo12:{mmu_params}
    bl      {enable_mmu}
    bl      .Lset_stacks
    mov     x0, x20
    bl      {secondary_main}
    b       .Lpark

// x20 = logical CPU number. Points SP_EL2 at the top of this CPU's exception
// stack and SP_EL0 at the top of its thread stack, and leaves SPSel = 0.
// Clobbers x0-x2.
.Lset_stacks:
    add     x2, x20, #1
    adrp    x0, {exception_stacks}
    add     x0, x0, :lo12:{exception_stacks}
    ldr     x1, ={exception_slot}
    madd    x0, x2, x1, x0
    msr     spsel, #1
    mov     sp, x0
    adrp    x0, {thread_stacks}
    add     x0, x0, :lo12:{thread_stacks}
    ldr     x1, ={thread_slot}
    madd    x0, x2, x1, x0
    msr     spsel, #0
    mov     sp, x0
    ret
    .ltorg

// x0 = &MmuParams (mair, tcr, ttbr0, sctlr). Programs the EL2 translation
// regime and writes SCTLR_EL2 last. Safe to call with the MMU on when the
// new tables map the running code at the same addresses.
    .global {enable_mmu}
{enable_mmu}:
    ldp     x1, x2, [x0]
    ldp     x3, x4, [x0, #16]
    msr     mair_el2, x1
    msr     tcr_el2, x2
    msr     ttbr0_el2, x3
    isb
    tlbi    alle2
    dsb     nsh
    isb
    msr     sctlr_el2, x4
    isb
    ic      iallu
    dsb     nsh
    isb
    ret
"#,
    primary_entry = sym primary_entry,
    secondary_entry = sym secondary_entry,
    primary_main = sym super::primary_main,
    secondary_main = sym super::secondary_main,
    enable_mmu = sym enable_mmu,
    mmu_params = sym mmu::SECONDARY_MMU_PARAMS,
    thread_stacks = sym stacks::THREAD_STACKS,
    exception_stacks = sym stacks::EXCEPTION_STACKS,
    thread_slot = const stacks::THREAD_SLOT_SIZE,
    exception_slot = const stacks::EXCEPTION_SLOT_SIZE,
    sctlr_mmu_off = const mmu::SCTLR_EL2_MMU_OFF,
    text_offset = const TEXT_OFFSET,
    image_flags = const IMAGE_FLAGS,
    current_el_el2 = const CURRENT_EL_EL2,
    r_aarch64_relative = const R_AARCH64_RELATIVE,
);

unsafe extern "C" {
    fn primary_entry() -> !;
    /// Where PSCI CPU_ON starts a secondary CPU; x0 = logical CPU number.
    pub fn secondary_entry() -> !;
    /// Loads the EL2 translation settings from `params` and turns the MMU on
    /// (or switches tables when it is already on).
    pub fn enable_mmu(params: *const mmu::MmuParams);
}
