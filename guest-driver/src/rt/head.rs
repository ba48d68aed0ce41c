//! The arm64 Image header and the first instructions each CPU executes.
//!
//! The loader (QEMU's `-kernel`, or the hypervisor for a VM) enters `_head`
//! per the arm64 Image protocol (Linux Documentation/arch/arm64/booting.rst):
//! EL1, MMU off, x0 = the device tree's address. Secondary CPUs enter
//! `secondary_entry` from PSCI CPU_ON with the MMU off and x0 = the context
//! id, which the runtime sets to their logical CPU number.
//!
//! The boot CPU, before any Rust code runs:
//! - masks interrupts, sets SCTLR_EL1 to a known MMU-off value and enables
//!   FP/SIMD (the guests are built hard-float);
//! - invalidates the D-cache over the image footprint, so that no stale
//!   line (from whoever used this RAM before) can later hide what it now
//!   writes with the caches off;
//! - applies its R_AARCH64_RELATIVE relocations (the image is a
//!   position-independent executable linked at 0) and zeroes `.bss`;
//! - takes stack slot 0 (`.Lset_stacks` below).
//!
//! A secondary turns the MMU on with the settings the boot CPU published
//! before touching memory, then takes its stack slot.
//!
//! Stacks: ordinary code runs in EL1t on SP_EL0 (the thread stack); every
//! exception switches to SP_EL1, this CPU's exception stack, whose top the
//! per-CPU block (TPIDR_EL1) holds so the vectors can reset SP to it. Both
//! stacks sit above an unmapped guard page.

use super::{mmu, percpu, stacks};
use aarch64_cpu::registers::{CPACR_EL1, CurrentEL};
use core::arch::global_asm;

/// Image header `text_offset`: the image is placed this far above a 2 MiB
/// aligned base.
const TEXT_OFFSET: u64 = 0x8_0000;
/// Image header `flags`: little-endian (bit 0 = 0), 4 KiB pages (bits 2:1 =
/// 0b01), and the 2 MiB aligned base may be anywhere in RAM (bit 3 = 1: the
/// image relocates itself). Linux sets the same flags.
const IMAGE_FLAGS: u64 = 0b1010;
/// CurrentEL when running at EL1.
const CURRENT_EL_EL1: u64 = CurrentEL::EL::EL1.value;
/// CPACR_EL1 with FP/SIMD accesses untrapped at EL1 and EL0.
const CPACR_FP_ENABLED: u64 = CPACR_EL1::FPEN::TrapNothing.value;
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
{primary_entry}:
    mov     x19, x0
    msr     daifset, #0xf
    mrs     x1, CurrentEL
    cmp     x1, #{current_el_el1}
    b.ne    .Lpark
    bl      .Lreset_el1

    // Drop whatever the caches hold for the image footprint: what we write
    // from here on with the caches off goes straight to memory, and a stale
    // line must not shadow it once the caches are on. (In a VM, DC IVAC at
    // EL1 is performed as a clean and invalidate.)
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
    bl      {primary_start}
.Lpark:
    wfe
    b       .Lpark

    .global {secondary_entry}
{secondary_entry}:
    msr     daifset, #0xf
    mov     x20, x0
    bl      .Lreset_el1
    // The boot CPU wrote the translation settings before it turned its own
    // MMU on, so they are in memory: read them and turn the MMU on before
    // touching any memory through the caches.
    adrp    x0, {mmu_params}
    add     x0, x0, :lo12:{mmu_params}
    bl      {enable_mmu}
    bl      .Lset_stacks
    mov     x0, x20
    bl      {secondary_start}
    b       .Lpark

// MMU and caches off, alignment checks off, little-endian; FP/SIMD on.
// Clobbers x1.
.Lreset_el1:
    ldr     x1, ={sctlr_mmu_off}
    msr     sctlr_el1, x1
    ldr     x1, ={cpacr_fp_enabled}
    msr     cpacr_el1, x1
    isb
    ret

// x20 = logical CPU number. Points SP_EL1 at the top of this CPU's
// exception stack and SP_EL0 at the top of its thread stack, leaves
// SPSel = 0 (EL1t), fills this CPU's per-CPU block, points TPIDR_EL1 at it
// and installs the vectors. Clobbers x0-x5.
.Lset_stacks:
    adrp    x0, {stacks}
    add     x0, x0, :lo12:{stacks}
    ldr     x1, ={slot_size}
    madd    x0, x20, x1, x0         // this CPU's slot
    ldr     x1, ={exception_top}
    add     x2, x0, x1
    msr     spsel, #1
    mov     sp, x2
    ldr     x1, ={thread_top}
    add     x3, x0, x1
    msr     spsel, #0
    mov     sp, x3
    adrp    x4, {percpu}
    add     x4, x4, :lo12:{percpu}
    ldr     x1, ={percpu_size}
    madd    x4, x20, x1, x4
    str     x2, [x4, #{percpu_exception_top}]
    str     x20, [x4, #{percpu_index}]
    msr     tpidr_el1, x4
    adrp    x5, {vectors}
    add     x5, x5, :lo12:{vectors}
    msr     vbar_el1, x5
    isb
    ret
    .ltorg

// x0 = &MmuParams (mair, tcr, ttbr0, sctlr). Programs the EL1&0 translation
// regime, invalidates this CPU's stale TLB entries and writes SCTLR_EL1
// last. The tables identity-map this code, so execution carries on.
    .global {enable_mmu}
{enable_mmu}:
    ldp     x1, x2, [x0]
    ldp     x3, x4, [x0, #16]
    msr     mair_el1, x1
    msr     tcr_el1, x2
    msr     ttbr0_el1, x3
    isb
    tlbi    vmalle1
    dsb     nsh
    isb
    msr     sctlr_el1, x4
    isb
    ic      iallu
    dsb     nsh
    isb
    ret
"#,
    primary_entry = sym primary_entry,
    secondary_entry = sym secondary_entry,
    primary_start = sym super::primary_start,
    secondary_start = sym super::secondary_start,
    enable_mmu = sym enable_mmu,
    mmu_params = sym mmu::MMU_PARAMS,
    stacks = sym stacks::STACKS,
    slot_size = const stacks::SLOT_SIZE,
    exception_top = const stacks::EXCEPTION_STACK_TOP,
    thread_top = const stacks::THREAD_STACK_TOP,
    percpu = sym percpu::PERCPU,
    percpu_size = const core::mem::size_of::<percpu::PerCpu>(),
    percpu_exception_top = const percpu::OFFSET_EXCEPTION_STACK_TOP,
    percpu_index = const percpu::OFFSET_INDEX,
    vectors = sym super::exceptions::VECTORS,
    sctlr_mmu_off = const mmu::SCTLR_MMU_OFF,
    cpacr_fp_enabled = const CPACR_FP_ENABLED,
    text_offset = const TEXT_OFFSET,
    image_flags = const IMAGE_FLAGS,
    current_el_el1 = const CURRENT_EL_EL1,
    r_aarch64_relative = const R_AARCH64_RELATIVE,
);

unsafe extern "C" {
    fn primary_entry() -> !;
    /// Where PSCI CPU_ON starts a secondary CPU; x0 = logical CPU number.
    pub fn secondary_entry() -> !;
    /// Loads the translation settings from `params` and turns the MMU on.
    pub fn enable_mmu(params: *const mmu::MmuParams);
}
