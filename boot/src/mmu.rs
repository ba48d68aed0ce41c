//! Turning a CPU's stage-1 MMU on: the settings ([`MmuParams`]) and the
//! switch-on, once per exception level.
//!
//! Each image computes its own settings (el2 with aarch64-paging's El2
//! regime, the guests with their own table builder); what this module
//! decides is the order of the writes, which is the same at EL1 and EL2
//! (Arm ARM D8.2, "Translation process", and D8.13, "TLB maintenance"):
//! MAIR, TCR and TTBR0 first, an ISB so the new regime is in effect, a TLB
//! invalidation of the level's regime so no entry of an earlier map (from
//! firmware, or the boot map) survives, and SCTLR last, then an
//! instruction-cache invalidation so nothing fetched with the old
//! attributes is reused. Safe with the MMU already on when the new tables
//! map the running code at the same addresses (identity maps).
//!
//! | routine | registers | TLB invalidation |
//! |---|---|---|
//! | `boot_enable_mmu_el2` | MAIR_EL2, TCR_EL2, TTBR0_EL2, SCTLR_EL2 | TLBI ALLE2 |
//! | `boot_enable_mmu_el1` | MAIR_EL1, TCR_EL1, TTBR0_EL1, SCTLR_EL1 | TLBI VMALLE1 |
//!
//! Both take x0 = `&MmuParams`, use no stack and clobber x1-x4, so a
//! secondary CPU's entry code calls them with `bl` before it has a stack.

/// What a CPU loads to turn its MMU on, in this order (the assembly reads
/// it with two LDPs). One cache line of its own: secondaries read it with
/// their caches off, after the boot CPU wrote it with its caches off or
/// cleaned it to the point of coherency.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MmuParams {
    pub mair: u64,
    pub tcr: u64,
    pub ttbr0: u64,
    pub sctlr: u64,
}

const _: () = {
    assert!(core::mem::offset_of!(MmuParams, mair) == 0);
    assert!(core::mem::offset_of!(MmuParams, tcr) == 8);
    assert!(core::mem::offset_of!(MmuParams, ttbr0) == 16);
    assert!(core::mem::offset_of!(MmuParams, sctlr) == 24);
};

/// One switch-on routine per exception level, from one text.
#[cfg(target_os = "none")]
macro_rules! enable_mmu_routine {
    ($el:literal, $tlbi:literal) => {
        core::arch::global_asm!(
            concat!("    .section .text.boot.enable_mmu_", $el, ", \"ax\""),
            concat!("    .global boot_enable_mmu_", $el),
            concat!("boot_enable_mmu_", $el, ":"),
            "    ldp     x1, x2, [x0]",
            "    ldp     x3, x4, [x0, #16]",
            concat!("    msr     mair_", $el, ", x1"),
            concat!("    msr     tcr_", $el, ", x2"),
            concat!("    msr     ttbr0_", $el, ", x3"),
            "    isb",
            concat!("    tlbi    ", $tlbi),
            "    dsb     nsh",
            "    isb",
            concat!("    msr     sctlr_", $el, ", x4"),
            "    isb",
            "    ic      iallu",
            "    dsb     nsh",
            "    isb",
            "    ret",
        );
    };
}

#[cfg(target_os = "none")]
enable_mmu_routine!("el2", "alle2");
#[cfg(target_os = "none")]
enable_mmu_routine!("el1", "vmalle1");

#[cfg(target_os = "none")]
unsafe extern "C" {
    fn boot_enable_mmu_el2(params: *const MmuParams);
    fn boot_enable_mmu_el1(params: *const MmuParams);
}

/// Loads the EL2 translation settings from `params` and turns the MMU on
/// (or switches tables when it is already on).
///
/// # Safety
/// Must run at EL2. The tables must identity-map, with the attributes they
/// need, everything the CPU uses from here on: the running code, its
/// stack, its data, `params` itself.
#[cfg(target_os = "none")]
pub unsafe fn enable_el2(params: *const MmuParams) {
    // SAFETY: per the caller, at EL2 with tables that keep everything in
    // use where it is; the routine follows the AAPCS64 (clobbers only
    // caller-saved x1-x4).
    unsafe { boot_enable_mmu_el2(params) }
}

/// Loads the EL1&0 translation settings from `params` and turns the MMU on.
///
/// # Safety
/// As [`enable_el2`], at EL1.
#[cfg(target_os = "none")]
pub unsafe fn enable_el1(params: *const MmuParams) {
    // SAFETY: as in enable_el2, at EL1.
    unsafe { boot_enable_mmu_el1(params) }
}
