//! The EL2 vector table (Arm ARM D1.3.1 "Exception vectors"): 16 entries,
//! 0x80 bytes apart. The eight current-EL entries save a `boot` [`Frame`]
//! on the exception stack (SP_EL2) with `boot`'s frame code, shared with
//! the guests' runtime, and call [`handle_exception`]; the eight lower-EL
//! ones are guest exits (`vcpu.rs`). IRQs go to the interrupt handler;
//! every other exception is unexpected while no guest runs and ends in a
//! fatal report.

use super::{console, cpu, psci, stacks};
use boot::exception::{FRAME_SIZE, Kind, Origin, Vector};
use core::arch::global_asm;
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, Ordering};
use el2::FATAL_MARKER;
use el2::trap::esr::{AbortSyndrome, Esr};

/// Register state at the exception, as the vector code saves it.
pub use boot::exception::Frame;

/// Where an exception came from, in the report's words.
fn origin_name(vector: Vector) -> &'static str {
    match vector.origin() {
        Origin::CurrentSp0 => "EL2 on SP_EL0 (hypervisor thread)",
        Origin::CurrentSpx => "EL2 on SP_EL2 (hypervisor exception handler)",
        Origin::LowerAarch64 => "lower EL, AArch64",
        Origin::LowerAarch32 => "lower EL, AArch32",
    }
}

global_asm!(
    r#"
.macro VECTOR kind
    .balign 0x80
    sub     sp, sp, #{frame_size}
    stp     x0, x1, [sp, #0]
    mov     x0, #\kind
    b       .Lexception_common
.endm

// From a guest: save its registers into the running vCPU's register file
// and return from `enter_guest` (vcpu.rs) with the vector number. A
// synchronous exit from AArch64 first asks `answer_on_exit` whether it can
// be answered in place (a constant hypercall), and then resumes the guest
// at once.
.macro GUEST_VECTOR kind
    .balign 0x80
    stp     x0, x1, [sp, #-16]!
    mov     x1, #\kind
    b       .Lguest_exit
.endm

// X2..X18 and X30 into the register file at X0, then the guest's X0 and X1
// from the exception stack: every register a call may clobber.
.macro SAVE_CALLER_SAVED
    stp     x2, x3, [x0, #16]
    stp     x4, x5, [x0, #32]
    stp     x6, x7, [x0, #48]
    stp     x8, x9, [x0, #64]
    stp     x10, x11, [x0, #80]
    stp     x12, x13, [x0, #96]
    stp     x14, x15, [x0, #112]
    stp     x16, x17, [x0, #128]
    str     x18, [x0, #144]
    str     x30, [x0, #240]
    ldp     x2, x3, [sp], #16
    stp     x2, x3, [x0, #0]
.endm

    .section .text.vectors, "ax"
    .balign 0x800
    .global {vectors}
{vectors}:
    VECTOR 0
    VECTOR 1
    VECTOR 2
    VECTOR 3
    VECTOR 4
    VECTOR 5
    VECTOR 6
    VECTOR 7
    .balign 0x80
    stp     x0, x1, [sp, #-16]!
    b       .Lguest_sync_exit
    GUEST_VECTOR 9
    GUEST_VECTOR 10
    GUEST_VECTOR 11
    GUEST_VECTOR 12
    GUEST_VECTOR 13
    GUEST_VECTOR 14
    GUEST_VECTOR 15

.Lguest_sync_exit:
    mrs     x1, tpidr_el2
    ldr     x0, [x1, #{local_guest_regs}]
    SAVE_CALLER_SAVED
    ldr     x2, [x1, #{local_fast_exit}]
    mrs     x1, esr_el2
    bl      {answer_on_exit}
    mrs     x1, tpidr_el2
    cbnz    w0, .Lguest_resume
    ldr     x0, [x1, #{local_guest_regs}]
    mov     x1, #{sync_vector}
    b       .Lguest_exit_rest

.Lguest_exit:
    mrs     x0, tpidr_el2
    ldr     x0, [x0, #{local_guest_regs}]
    SAVE_CALLER_SAVED
.Lguest_exit_rest:
    str     x19, [x0, #152]
    stp     x20, x21, [x0, #160]
    stp     x22, x23, [x0, #176]
    stp     x24, x25, [x0, #192]
    stp     x26, x27, [x0, #208]
    stp     x28, x29, [x0, #224]
    mrs     x2, elr_el2
    mrs     x3, spsr_el2
    mrs     x4, sp_el0
    str     x2, [x0, #{regs_pc}]
    str     x3, [x0, #{regs_pstate}]
    str     x4, [x0, #{regs_sp_el0}]
    // Back to the hypervisor thread that called enter_guest, on its stack.
    mrs     x2, tpidr_el2
    ldr     x3, [x2, #{local_host_sp}]
    msr     spsel, #0
    mov     sp, x3
    mov     x0, x1
    ldp     x19, x20, [sp, #16]
    ldp     x21, x22, [sp, #32]
    ldp     x23, x24, [sp, #48]
    ldp     x25, x26, [sp, #64]
    ldp     x27, x28, [sp, #80]
    ldp     x29, x30, [sp], #96
    ret

// Answered in place: the guest's X19..X29, ELR_EL2, SPSR_EL2 and SP_EL0
// are as it left them; reload what the call may have changed and go back.
.Lguest_resume:
    ldr     x0, [x1, #{local_guest_regs}]
    b       {resume_caller_saved}

.Lexception_common:"#,
    boot::save_frame!(el2),
    "    mov     x1, sp",
    "    bl      {handler}",
    boot::restore_frame!(el2),
    vectors = sym vectors,
    handler = sym handle_exception,
    frame_size = const FRAME_SIZE,
    local_guest_regs = const core::mem::offset_of!(super::cpu::CpuLocal, guest_regs),
    local_host_sp = const core::mem::offset_of!(super::cpu::CpuLocal, host_sp),
    local_fast_exit = const core::mem::offset_of!(super::cpu::CpuLocal, fast_exit),
    answer_on_exit = sym super::vcpu::answer_on_exit,
    resume_caller_saved = sym super::vcpu::resume_caller_saved,
    sync_vector = const Vector::new(Origin::LowerAarch64, Kind::Synchronous).0,
    regs_pc = const core::mem::offset_of!(el2::vcpu::GuestRegs, pc),
    regs_pstate = const core::mem::offset_of!(el2::vcpu::GuestRegs, pstate),
    regs_sp_el0 = const core::mem::offset_of!(el2::vcpu::GuestRegs, sp_el0),
);

unsafe extern "C" {
    fn vectors();
}

/// The address to program into VBAR_EL2.
pub fn vector_base() -> u64 {
    vectors as *const () as u64
}

/// Called by the vector code with the vector number and the saved frame;
/// returning resumes the interrupted code.
extern "C" fn handle_exception(vector: u64, frame: &mut Frame) {
    let vector = Vector(vector);
    if vector.kind() == Kind::Irq && vector.is_current_el() {
        // IRQs are unmasked at EL2 only while no vCPU is loaded (boot, an
        // idle pCPU): a virtual timer PPI has no guest to go to here, and
        // is not left active.
        if super::irq::handle() == super::irq::Taken::VirtualTimer {
            super::irq::deactivate_vtimer();
        }
        return;
    }
    fatal(vector, frame)
}

/// Set by the first CPU to report a fatal error; a second fault (nested, or
/// on another CPU meanwhile) parks instead of interleaving reports.
static FATAL_IN_PROGRESS: AtomicBool = AtomicBool::new(false);

/// Makes this CPU the one that reports a fatal error and stops the others
/// (they park at the stop SGI, or at their own fatal error); every other
/// caller parks here. A fatal error on one CPU thus stops the machine with
/// one report, whatever the other CPUs were doing.
pub fn begin_fatal() {
    if FATAL_IN_PROGRESS.swap(true, Ordering::AcqRel) {
        psci::park();
    }
    super::bringup::stop_other_cpus();
}

/// Whether a fatal error is being reported (the stop SGI then parks).
pub fn fatal_in_progress() -> bool {
    FATAL_IN_PROGRESS.load(Ordering::Acquire)
}

fn fatal(vector: Vector, frame: &Frame) -> ! {
    begin_fatal();
    let mut report = Report::default();
    let _ = write_report(&mut report, vector, frame);
    report.flush();
    psci::power_off()
}

/// The fatal report: what was taken where, the syndrome, the abort's
/// details when it is one, and the registers.
fn write_report(out: &mut Report, vector: Vector, frame: &Frame) -> core::fmt::Result {
    let esr = Esr::new(frame.esr);
    write_heading(out, vector, &esr)?;
    write_syndrome(out, &esr)?;
    if let Some(abort) = esr.abort() {
        write_abort(out, &abort, frame.far)?;
    }
    write_registers(out, frame)?;
    writeln!(out, "*** machine stopped ***")
}

/// The report's first lines: the exception, where it came from, and the
/// CPU that took it.
fn write_heading(out: &mut Report, vector: Vector, esr: &Esr) -> core::fmt::Result {
    let (cpu_index, mpidr) = match cpu::current() {
        Some(c) => (c.index, c.mpidr),
        None => (0, cpu::current_mpidr()),
    };
    writeln!(
        out,
        "*** {FATAL_MARKER}: {} exception from {}: {} ***",
        vector.kind(),
        origin_name(vector),
        if vector.kind() == Kind::Synchronous {
            esr.class_name()
        } else {
            "unexpected"
        },
    )?;
    writeln!(out, "  cpu {cpu_index} (mpidr {mpidr})")
}

/// ESR_EL2 decoded into its fields (Arm ARM, "ESR_EL2").
fn write_syndrome(out: &mut Report, esr: &Esr) -> core::fmt::Result {
    writeln!(
        out,
        "  ESR_EL2 {:#018x}: EC {:#04x} ({}), IL {}, ISS {:#09x}",
        esr.raw(),
        esr.class_bits(),
        esr.class_name(),
        u8::from(esr.is_32bit_instruction()),
        esr.iss()
    )
}

/// An abort's kind and fault status and, when the faulting address `far`
/// is valid and lies in a stack's guard page, which stack overflowed.
fn write_abort(out: &mut Report, abort: &AbortSyndrome, far: u64) -> core::fmt::Result {
    writeln!(
        out,
        "  {} abort: {}{}{}",
        if abort.data { "data" } else { "instruction" },
        if abort.data {
            if abort.write { "write, " } else { "read, " }
        } else {
            ""
        },
        abort.status,
        if abort.far_valid {
            ""
        } else {
            " (FAR not valid)"
        },
    )?;
    if !abort.far_valid {
        return Ok(());
    }
    for (what, array) in [
        ("thread", stacks::thread_stacks()),
        ("exception", stacks::exception_stacks()),
    ] {
        if let Some(owner) = array.guard_owner(far) {
            writeln!(
                out,
                "  stack overflow: cpu {owner}'s {what} stack ran into its guard page at {far:#x}"
            )?;
        }
    }
    Ok(())
}

/// The exception registers and x0..x30, four to a line.
fn write_registers(out: &mut Report, frame: &Frame) -> core::fmt::Result {
    let image_base = super::image_base();
    writeln!(
        out,
        "  FAR_EL2 {:#018x}  ELR_EL2 {:#018x} (el2 ELF address {:#x})",
        frame.far,
        frame.elr,
        frame.elr.wrapping_sub(image_base)
    )?;
    writeln!(
        out,
        "  SPSR_EL2 {:#018x}  SP_EL0 {:#018x}",
        frame.spsr, frame.sp_el0
    )?;
    for row in 0..8 {
        write!(out, " ")?;
        for col in 0..4 {
            let reg = row * 4 + col;
            if reg < 31 {
                write!(out, " x{reg:<2} {:#018x}", frame.x[reg])?;
            }
        }
        writeln!(out)?;
    }
    Ok(())
}

/// Collects the report in a fixed buffer (the heap may be what broke) and
/// writes it in one go.
struct Report {
    buf: [u8; 4096],
    len: usize,
}

impl Default for Report {
    fn default() -> Self {
        Self {
            buf: [0; 4096],
            len: 0,
        }
    }
}

impl Write for Report {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.buf.len() - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

impl Report {
    fn flush(&self) {
        let text = core::str::from_utf8(&self.buf[..self.len])
            .unwrap_or("EL2 FATAL: report unprintable\n");
        console::print_fatal(format_args!("{text}"));
    }
}
