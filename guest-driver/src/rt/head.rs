//! The arm64 Image header and the first instructions each CPU executes.
//!
//! The loader (QEMU's `-kernel`, or the hypervisor for a VM) enters `_head`
//! per the arm64 Image protocol (Linux Documentation/arch/arm64/booting.rst):
//! EL1, MMU off, x0 = the device tree's address. Secondary CPUs enter
//! `secondary_entry` from PSCI CPU_ON with the MMU off and x0 = the context
//! id, which the runtime sets to their logical CPU number.
//!
//! The header and the steps are `boot`'s, shared with el2 (`boot::image`,
//! `boot::entry`, `boot::stacks`, `boot::mmu`); what is the guests' own
//! here is the exception level (EL1, or park), SCTLR_EL1 and CPACR_EL1,
//! and the per-CPU block. The boot CPU, before any Rust code runs:
//! - masks interrupts, sets SCTLR_EL1 to a known MMU-off value and enables
//!   FP/SIMD (the guests are built hard-float);
//! - invalidates the D-cache over the image footprint
//!   (`boot_invalidate_image`), so that no stale line (from whoever used
//!   this RAM before) can later hide what it now writes with the caches
//!   off; in a VM, DC IVAC at EL1 is performed as a clean and invalidate;
//! - applies its R_AARCH64_RELATIVE relocations (`boot_relocate`: the
//!   image is a position-independent executable linked at 0) and zeroes
//!   `.bss` (`boot_zero_bss`);
//! - takes its stacks (`boot_set_stacks`) and per-CPU block
//!   (`.Lset_percpu` below).
//!
//! A secondary turns the MMU on with the settings the boot CPU published
//! before touching memory (`boot_enable_mmu_el1`), then takes its stacks
//! and per-CPU block.
//!
//! Stacks: ordinary code runs in EL1t on SP_EL0 (the thread stack); every
//! exception switches to SP_EL1, this CPU's exception stack, whose top the
//! per-CPU block (TPIDR_EL1) holds so the vectors can reset SP to it. Both
//! stacks sit above an unmapped guard page.

use super::{mmu, percpu};
use aarch64_cpu::registers::{CPACR_EL1, CurrentEL};
use boot::image::FLAGS;
use core::arch::global_asm;

/// Image header `flags`: little-endian, 4 KiB pages, and the 2 MiB aligned
/// base may be anywhere in RAM (the image relocates itself). Linux sets
/// the same flags.
const IMAGE_FLAGS: u64 =
    FLAGS::BE::Little.value | FLAGS::PAGE_SIZE::K4.value | FLAGS::PHYS_PLACEMENT::Anywhere.value;
/// CurrentEL when running at EL1.
const CURRENT_EL_EL1: u64 = CurrentEL::EL::EL1.value;
/// CPACR_EL1 with FP/SIMD accesses untrapped at EL1 and EL0.
const CPACR_FP_ENABLED: u64 = CPACR_EL1::FPEN::TrapNothing.value;

boot::arm64_image_header!(entry: primary_entry, flags: IMAGE_FLAGS);

global_asm!(
    r#"
    .section .text.boot, "ax"
    .global {primary_entry}
{primary_entry}:
    mov     x19, x0
    msr     daifset, #0xf
    mrs     x1, CurrentEL
    cmp     x1, #{current_el_el1}
    b.ne    .Lpark
    bl      .Lreset_el1
    bl      boot_invalidate_image
    bl      boot_relocate
    cbnz    x0, .Lpark              // nothing but RELATIVE is expected in a static PIE
    bl      boot_zero_bss
    mov     x20, #0
    mov     x0, x20
    bl      boot_set_stacks
    bl      .Lset_percpu
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
    bl      boot_enable_mmu_el1
    mov     x0, x20
    bl      boot_set_stacks
    bl      .Lset_percpu
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

// x20 = logical CPU number, x1 = the top of its exception stack (from
// boot_set_stacks). Fills this CPU's per-CPU block, points TPIDR_EL1 at
// it and installs the vectors. Clobbers x3-x5.
.Lset_percpu:
    adrp    x4, {percpu}
    add     x4, x4, :lo12:{percpu}
    ldr     x3, ={percpu_size}
    madd    x4, x20, x3, x4
    str     x1, [x4, #{percpu_exception_top}]
    str     x20, [x4, #{percpu_index}]
    msr     tpidr_el1, x4
    adrp    x5, {vectors}
    add     x5, x5, :lo12:{vectors}
    msr     vbar_el1, x5
    isb
    ret
    .ltorg
"#,
    primary_entry = sym primary_entry,
    secondary_entry = sym secondary_entry,
    primary_start = sym super::primary_start,
    secondary_start = sym super::secondary_start,
    mmu_params = sym mmu::MMU_PARAMS,
    percpu = sym percpu::PERCPU,
    percpu_size = const core::mem::size_of::<percpu::PerCpu>(),
    percpu_exception_top = const percpu::OFFSET_EXCEPTION_STACK_TOP,
    percpu_index = const percpu::OFFSET_INDEX,
    vectors = sym super::exceptions::VECTORS,
    sctlr_mmu_off = const mmu::SCTLR_MMU_OFF,
    cpacr_fp_enabled = const CPACR_FP_ENABLED,
    current_el_el1 = const CURRENT_EL_EL1,
);

unsafe extern "C" {
    fn primary_entry() -> !;
    /// Where PSCI CPU_ON starts a secondary CPU; x0 = logical CPU number.
    pub fn secondary_entry() -> !;
}
