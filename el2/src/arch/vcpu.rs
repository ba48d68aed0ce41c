//! Running a vCPU: its full register context, switching it on and off the
//! physical CPU, and the entry into the guest.
//!
//! `enter_guest` is an ordinary function call for the hypervisor: it saves
//! the callee-saved registers and the thread stack pointer, loads the
//! guest's general registers and ERETs. When the guest traps, the lower-EL
//! vectors (in `exceptions.rs`) store the guest's registers back and
//! return from `enter_guest` with the vector number, on the thread stack.

use super::cpu::CpuLocal;
use super::regs::{CPACR_EL1_RESET, CPTR_EL2, CPTR_EL2_NVHE, SCTLR_EL1_RESET};
use aarch64_cpu::registers::*;
use core::arch::{asm, global_asm};
use core::mem::offset_of;
use el2::run::FastExit;
use el2::vcpu::GuestRegs;
use tock_registers::interfaces::{ReadWriteable, Readable, Writeable};

/// Defines the EL1 system register context and its save/restore from one
/// list, so that nothing is saved without being restored. The registers
/// after `rewritten_only_if_changed` are written at a load only when the
/// incoming vCPU's value differs from what the register holds.
macro_rules! el1_context {
    (
        $($field:ident: $reg:ident),* $(,)?
        ; rewritten_only_if_changed: $($lazy_field:ident: $lazy_reg:ident),* $(,)?
    ) => {
        /// The guest's EL1 (and EL0) system registers while it is off the CPU.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct El1Context {
            $(pub $field: u64,)*
            $(pub $lazy_field: u64,)*
        }

        impl El1Context {
            /// Reads the registers of the guest that just ran. Built as one
            /// value, so that the compiler stores them in pairs (`stp`); a
            /// store per field after each read cost 12 instructions more
            /// per vCPU switch.
            pub fn save(&mut self) {
                *self = Self {
                    $($field: $reg.get(),)*
                    $($lazy_field: $lazy_reg.get(),)*
                };
            }

            /// Loads the registers for the guest about to run.
            pub fn restore(&self) {
                $($reg.set(self.$field);)*
                $(
                    if $lazy_reg.get() != self.$lazy_field {
                        $lazy_reg.set(self.$lazy_field);
                    }
                )*
            }
        }
    };
}

el1_context! {
    sctlr: SCTLR_EL1,
    actlr: ACTLR_EL1,
    cpacr: CPACR_EL1,
    ttbr0: TTBR0_EL1,
    ttbr1: TTBR1_EL1,
    mair: MAIR_EL1,
    amair: AMAIR_EL1,
    vbar: VBAR_EL1,
    contextidr: CONTEXTIDR_EL1,
    esr: ESR_EL1,
    far: FAR_EL1,
    afsr0: AFSR0_EL1,
    afsr1: AFSR1_EL1,
    par: PAR_EL1,
    elr: ELR_EL1,
    spsr: SPSR_EL1,
    sp_el1: SP_EL1,
    tpidr_el0: TPIDR_EL0,
    tpidrro_el0: TPIDRRO_EL0,
    tpidr_el1: TPIDR_EL1,
    cntkctl: CNTKCTL_EL1,
    csselr: CSSELR_EL1;
    // Writing TCR_EL1 changes nothing architecturally when the value is
    // already there (the TLBs are tagged by VMID and ASID, and a TCR change
    // needs the guest's own TLB maintenance anyway), but an emulator whose
    // TLB is not tagged pays for it: QEMU 7.2 flushes its whole TLB for
    // the CPU, EL2's entries included, on every TCR_EL1 write, and the
    // stage-1 and stage-2 walks that refill it made a multi-threaded PV
    // lock run at 2x overcommit 2-7% slower (docs/benchmarks.md). The
    // vCPUs of one VM almost always share the value. (SCTLR_EL1 writes
    // that change nothing QEMU skips itself; TTBRn_EL1 writes flush only
    // when the ASID changes.)
    rewritten_only_if_changed: tcr: TCR_EL1,
}

/// The FP/SIMD registers (Q0-Q31, FPCR, FPSR).
#[repr(C, align(16))]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FpContext {
    pub q: [u128; 32],
    pub fpcr: u64,
    pub fpsr: u64,
}

impl FpContext {
    pub fn save(&mut self) {
        // SAFETY: stores the 32 Q registers and FPCR/FPSR into `self`, which
        // is 16-byte aligned and large enough; CPTR_EL2.TFP is clear while
        // VMs exist, so the accesses do not trap. The hypervisor itself is
        // soft-float, so these registers hold the guest's values.
        unsafe {
            asm!(
                ".arch_extension fp",
                ".arch_extension simd",
                "stp q0, q1, [{0}, #0]",
                "stp q2, q3, [{0}, #32]",
                "stp q4, q5, [{0}, #64]",
                "stp q6, q7, [{0}, #96]",
                "stp q8, q9, [{0}, #128]",
                "stp q10, q11, [{0}, #160]",
                "stp q12, q13, [{0}, #192]",
                "stp q14, q15, [{0}, #224]",
                "stp q16, q17, [{0}, #256]",
                "stp q18, q19, [{0}, #288]",
                "stp q20, q21, [{0}, #320]",
                "stp q22, q23, [{0}, #352]",
                "stp q24, q25, [{0}, #384]",
                "stp q26, q27, [{0}, #416]",
                "stp q28, q29, [{0}, #448]",
                "stp q30, q31, [{0}, #480]",
                "mrs {1}, fpcr",
                "mrs {2}, fpsr",
                "add {0}, {0}, #512",
                "stp {1}, {2}, [{0}]",
                inout(reg) self as *mut Self => _,
                out(reg) _,
                out(reg) _,
                options(nostack, preserves_flags),
            );
        }
    }

    pub fn restore(&self) {
        // SAFETY: the mirror image of `save`: loads from `self`.
        unsafe {
            asm!(
                ".arch_extension fp",
                ".arch_extension simd",
                "ldp q0, q1, [{0}, #0]",
                "ldp q2, q3, [{0}, #32]",
                "ldp q4, q5, [{0}, #64]",
                "ldp q6, q7, [{0}, #96]",
                "ldp q8, q9, [{0}, #128]",
                "ldp q10, q11, [{0}, #160]",
                "ldp q12, q13, [{0}, #192]",
                "ldp q14, q15, [{0}, #224]",
                "ldp q16, q17, [{0}, #256]",
                "ldp q18, q19, [{0}, #288]",
                "ldp q20, q21, [{0}, #320]",
                "ldp q22, q23, [{0}, #352]",
                "ldp q24, q25, [{0}, #384]",
                "ldp q26, q27, [{0}, #416]",
                "ldp q28, q29, [{0}, #448]",
                "ldp q30, q31, [{0}, #480]",
                "add {0}, {0}, #512",
                "ldp {1}, {2}, [{0}]",
                "msr fpcr, {1}",
                "msr fpsr, {2}",
                inout(reg) self as *const Self => _,
                out(reg) _,
                out(reg) _,
                options(nostack, preserves_flags),
            );
        }
    }
}

const _: () = assert!(offset_of!(FpContext, fpcr) == 512);

/// What only this layer knows of a vCPU: its EL1 system registers, its
/// FP/SIMD registers and its virtual CPU interface registers
/// (`el2::run::Machine::Saved`). The default is the state at reset.
///
/// In this order (`repr(C)`): what every switch loads and saves first,
/// close to the vCPU context's base (`el2::run::VcpuContext`), where load
/// and store pairs reach it; the lazily switched FP/SIMD registers last.
#[repr(C)]
#[derive(Clone, Debug)]
pub struct SavedRegisters {
    pub el1: El1Context,
    /// ICH_VMCR_EL2 and the active priorities.
    pub gic: super::gicv::CpuInterfaceState,
    /// `fp` is in this CPU's FP/SIMD registers (the vCPU used FP/SIMD since
    /// it was loaded), and must be saved when it is put.
    pub fp_live: bool,
    pub fp: FpContext,
}

impl Default for SavedRegisters {
    fn default() -> Self {
        Self {
            el1: El1Context {
                sctlr: SCTLR_EL1_RESET,
                cpacr: CPACR_EL1_RESET,
                ..El1Context::default()
            },
            fp: FpContext::default(),
            fp_live: false,
            gic: super::gicv::CpuInterfaceState::default(),
        }
    }
}

/// A vCPU's context as the runner keeps it.
pub type VcpuContext = el2::run::VcpuContext<SavedRegisters>;

/// Loads the vCPU's system state into this CPU (its general registers go
/// in at `enter_guest`). The FP/SIMD state is not loaded: its first use
/// traps ([`load_fp`]), so a vCPU that runs without touching FP/SIMD (a
/// spinner, a kernel between two switches) costs neither the load nor the
/// save of 32 128-bit registers — KVM's lazy FP switch.
pub fn load(ctx: &mut VcpuContext) {
    ctx.saved.el1.restore();
    CNTV_CVAL_EL0.set(ctx.vtimer.cval);
    CNTV_CTL_EL0.set(ctx.vtimer.ctl);
    ctx.saved.gic.restore();
    VMPIDR_EL2.set(ctx.vmpidr);
    ctx.saved.fp_live = false;
    CPTR_EL2.modify(CPTR_EL2_NVHE::TFP::SET);
}

/// The vCPU's first FP/SIMD instruction since it was loaded trapped (Arm
/// ARM D24.2.41, EC 0x07): load its FP/SIMD state and stop trapping. The
/// instruction runs again when the vCPU resumes.
pub fn load_fp(ctx: &mut VcpuContext) {
    CPTR_EL2.modify(CPTR_EL2_NVHE::TFP::CLEAR);
    // The FP/SIMD instructions of `restore` must see TFP clear.
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
    ctx.saved.fp.restore();
    ctx.saved.fp_live = true;
}

/// Saves the vCPU's system state from this CPU (FP/SIMD only if it was
/// loaded) and disables its virtual timer, so that it cannot fire for the
/// next guest (the scheduler tracks its deadline meanwhile). Inlined into
/// the runner's put, which every vCPU switch takes.
#[inline(always)]
pub fn save(ctx: &mut VcpuContext) {
    ctx.saved.el1.save();
    ctx.saved.gic.save();
    if ctx.saved.fp_live {
        ctx.saved.fp.save();
        ctx.saved.fp_live = false;
    }
    ctx.vtimer.ctl = CNTV_CTL_EL0.get();
    ctx.vtimer.cval = CNTV_CVAL_EL0.get();
    CNTV_CTL_EL0.set(0);
}

global_asm!(
    r#"
    .section .text.guest, "ax"
    .global {enter_guest}
{enter_guest}:
    stp     x29, x30, [sp, #-96]!
    stp     x19, x20, [sp, #16]
    stp     x21, x22, [sp, #32]
    stp     x23, x24, [sp, #48]
    stp     x25, x26, [sp, #64]
    stp     x27, x28, [sp, #80]
    mrs     x1, tpidr_el2
    str     x0, [x1, #{local_guest_regs}]
    mov     x2, sp
    str     x2, [x1, #{local_host_sp}]
    ldr     x2, [x0, #{regs_pc}]
    ldr     x3, [x0, #{regs_pstate}]
    ldr     x4, [x0, #{regs_sp_el0}]
    msr     elr_el2, x2
    msr     spsr_el2, x3
    // From here on SP_EL0 is the guest's: run on SP_EL2 until the ERET.
    msr     spsel, #1
    msr     sp_el0, x4
    ldr     x19, [x0, #152]
    ldp     x20, x21, [x0, #160]
    ldp     x22, x23, [x0, #176]
    ldp     x24, x25, [x0, #192]
    ldp     x26, x27, [x0, #208]
    ldp     x28, x29, [x0, #224]
    // The exit vector's fast path (exceptions.rs) joins here: X19..X29 are
    // the guest's, X0 points at its register file.
    .global {resume_caller_saved}
{resume_caller_saved}:
    ldp     x2, x3, [x0, #16]
    ldp     x4, x5, [x0, #32]
    ldp     x6, x7, [x0, #48]
    ldp     x8, x9, [x0, #64]
    ldp     x10, x11, [x0, #80]
    ldp     x12, x13, [x0, #96]
    ldp     x14, x15, [x0, #112]
    ldp     x16, x17, [x0, #128]
    ldr     x18, [x0, #144]
    ldr     x30, [x0, #240]
    ldp     x0, x1, [x0, #0]
    eret
    // Never reached architecturally; stops straight-line speculation past the ERET.
    dsb     nsh
    isb
"#,
    enter_guest = sym enter_guest,
    resume_caller_saved = sym resume_caller_saved,
    local_guest_regs = const offset_of!(CpuLocal, guest_regs),
    local_host_sp = const offset_of!(CpuLocal, host_sp),
    regs_pc = const offset_of!(GuestRegs, pc),
    regs_pstate = const offset_of!(GuestRegs, pstate),
    regs_sp_el0 = const offset_of!(GuestRegs, sp_el0),
);

// The assembly above and in exceptions.rs addresses x0..x30 at 8-byte steps from 0.
const _: () = assert!(offset_of!(GuestRegs, x) == 0);

unsafe extern "C" {
    /// Runs the guest whose registers `regs` holds until it traps; returns
    /// the lower-EL vector taken (8 synchronous, 9 IRQ, 10 FIQ, 11 SError;
    /// 12-15 the same from AArch32).
    ///
    /// # Safety
    /// The vCPU's system state must be loaded ([`load`]), its
    /// stage 2 active, and `regs` must stay valid until it returns; so
    /// must the `FastExit` in this CPU's `CpuLocal`, if any.
    fn enter_guest(regs: *mut GuestRegs) -> u64;

    /// The tail of [`enter_guest`]: loads X0..X18 and X30 from the
    /// register file at X0 and ERETs. Only a branch target for the exit
    /// vector, never called.
    pub(super) fn resume_caller_saved();
}

/// Runs the loaded vCPU until an exit `fast` does not answer: the
/// synchronous exit vector asks [`answer_on_exit`] first, and resumes the
/// guest at once if it answered. Returns the vector of the exit.
pub fn run_until_exit(regs: &mut GuestRegs, fast: &FastExit<'_>) -> u64 {
    let Some(local) = super::cpu::local() else {
        unreachable!("a guest runs only on a CPU with its CpuLocal set")
    };
    // SAFETY: this CPU's own `CpuLocal`, touched only from this CPU; the
    // vector code reads `fast_exit` only inside the `enter_guest` call
    // below, while `fast` is borrowed. It is cleared again afterwards, so
    // no stale pointer outlives the borrow.
    unsafe { (*local).fast_exit = (fast as *const FastExit<'_>).cast() };
    // SAFETY: the runner loaded the context (`load_vcpu`: system registers
    // and stage 2); `regs` and `fast` outlive the call.
    let vector = unsafe { enter_guest(regs) };
    // SAFETY: as above.
    unsafe { (*local).fast_exit = core::ptr::null() };
    vector
}

/// Called by the synchronous exit vector (`exceptions.rs`), on the
/// exception stack with the guest's X0..X18 and X30 saved in `regs` (X19..X29
/// are still live in the CPU: this function preserves them, as AAPCS64
/// requires) and ELR/SPSR_EL2 untouched: whether `fast` answered the exit
/// with syndrome `esr` in the saved registers, so that the vector resumes
/// the guest without returning to the runner.
///
/// # Safety
/// `regs` is the running vCPU's register file and `fast` null or the
/// `FastExit` that [`run_until_exit`] lent for this entry.
pub(super) unsafe extern "C" fn answer_on_exit(
    regs: *mut GuestRegs,
    esr: u64,
    fast: *const FastExit<'static>,
) -> bool {
    // SAFETY: the caller's contract; nothing else touches either while the
    // exit vector runs with interrupts masked on this CPU.
    let (Some(regs), Some(fast)) = (unsafe { regs.as_mut() }, unsafe { fast.as_ref() }) else {
        return false;
    };
    fast.answer(esr, regs.results_mut())
}
