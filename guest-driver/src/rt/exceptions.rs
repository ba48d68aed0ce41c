//! The EL1 vector table (Arm ARM D1.3.1 "Exception vectors"): 16 entries,
//! 0x80 bytes apart. Every exception is unexpected in the runtime's guests
//! (interrupts stay masked), so each entry resets SP_EL1 to the top of this
//! CPU's exception stack, saves a `boot` [`Frame`] there with `boot`'s
//! frame code (shared with el2) and calls `handle_exception`, which
//! reports and powers the guest off:
//!
//! ```text
//! GUEST FATAL: vcpu 1 (mpidr 0.0.0.1): synchronous external abort at 0x50000000 (data abort, read)
//! GUEST FATAL:   taken from EL1 on SP_EL0 (guest code); ESR 0x96000010 FAR 0x50000000 ELR 0x40081a2c (ELF 0x1a2c) SPSR 0x600003c4
//! GUEST FATAL:   x0  0x0000000000000001 x1  ... (four per line)
//! ```
//!
//! Resetting SP (instead of pushing below it) means an exception inside the
//! handler, or an overflowed exception stack, still gets a good stack.
//!
//! The one exception to "fatal": a synchronous exception that the code
//! asked to survive with [`super::fault::expect`]. The handler then
//! returns, and the vector code restores the frame (with the return
//! address the catcher chose) and resumes the code with ERET.

use super::{console, image, percpu, psci, stacks};
use crate::FATAL_MARKER;
use crate::fault::{Fault, Vector, origin_name};
use boot::exception::FRAME_SIZE;
use core::arch::global_asm;
use core::sync::atomic::Ordering;

/// Register state at the exception, as the vector code saves it.
pub use boot::exception::Frame;

global_asm!(
    r#"
// TPIDR_EL0 is scratch here: the guests never run EL0 code.
.macro VECTOR kind
    .balign 0x80
    msr     tpidr_el0, x0
    mrs     x0, tpidr_el1
    ldr     x0, [x0, #{percpu_exception_top}]
    mov     sp, x0
    mrs     x0, tpidr_el0
    sub     sp, sp, #{frame_size}
    stp     x0, x1, [sp, #0]
    mov     x0, #\kind
    b       .Lexception_common
.endm

    .section .text.vectors, "ax"
    .balign 0x800
    .global guest_rt_vectors
guest_rt_vectors:
    VECTOR 0
    VECTOR 1
    VECTOR 2
    VECTOR 3
    VECTOR 4
    VECTOR 5
    VECTOR 6
    VECTOR 7
    VECTOR 8
    VECTOR 9
    VECTOR 10
    VECTOR 11
    VECTOR 12
    VECTOR 13
    VECTOR 14
    VECTOR 15

.Lexception_common:"#,
    boot::save_frame!(el1),
    // The handler returns only for an expected exception (rt::fault): the
    // code resumes where the frame's ELR now points.
    "    mov     x1, sp",
    "    bl      {handler}",
    boot::restore_frame!(el1),
    frame_size = const FRAME_SIZE,
    percpu_exception_top = const percpu::OFFSET_EXCEPTION_STACK_TOP,
    handler = sym handle_exception,
);

unsafe extern "C" {
    /// The vector table (2 KiB aligned), for VBAR_EL1.
    #[link_name = "guest_rt_vectors"]
    pub static VECTORS: [u8; 0x800];
}

/// Returns if the exception saved in `frame` (taken through vector
/// `vector`) is one the code expected ([`super::fault::expect`]), with the
/// frame's return address moved past it; otherwise reports it and powers
/// the guest off.
extern "C" fn handle_exception(vector: u64, frame: &mut Frame) {
    if super::fault::catch(frame, Vector(vector)) {
        return;
    }
    report_and_stop(frame, vector)
}

/// Reports the exception saved in `frame` (taken through vector `vector`)
/// and powers the guest off.
fn report_and_stop(frame: &Frame, vector: u64) -> ! {
    let cpu = percpu::this_cpu();
    let index = cpu.index.load(Ordering::Relaxed);
    let mpidr = super::machine_if_ready()
        .and_then(|m| m.cpus().get(index as usize).copied())
        .unwrap_or_default();
    let fault = Fault {
        vector: Vector(vector),
        esr: frame.esr,
        far: frame.far,
    };
    // Plain load and store: the counter is this CPU's alone.
    let depth = cpu.reporting.load(Ordering::Relaxed);
    cpu.reporting
        .store(depth.saturating_add(1), Ordering::Relaxed);
    match depth {
        0 => {}
        1 => {
            console::print_fatal(format_args!(
                "{FATAL_MARKER}: vcpu {index}: {fault} while reporting an earlier fault (ELR {:#x})\n",
                frame.elr
            ));
            psci::system_off();
        }
        _ => psci::park(),
    }
    let overflow = if fault.vector.has_syndrome() {
        stacks::guard_owner(frame.far)
    } else {
        None
    };
    match overflow {
        Some((owner, stack)) => console::print_fatal(format_args!(
            "{FATAL_MARKER}: vcpu {index} (mpidr {mpidr}): stack overflow: {fault}, in the guard \
             page of vcpu {owner}'s {stack} stack\n"
        )),
        None => console::print_fatal(format_args!(
            "{FATAL_MARKER}: vcpu {index} (mpidr {mpidr}): {fault}\n"
        )),
    }
    console::print_fatal(format_args!(
        "{FATAL_MARKER}:   taken from {}; ESR {:#x} FAR {:#x} ELR {:#x} (ELF {:#x}) SPSR {:#x}\n",
        origin_name(fault.vector),
        frame.esr,
        frame.far,
        frame.elr,
        frame.elr.wrapping_sub(image::base()),
        frame.spsr
    ));
    // x0..x30 and SP_EL0, four per line.
    let value = |n: usize| if n < 31 { frame.x[n] } else { frame.sp_el0 };
    for row in 0..8 {
        let n = row * 4;
        console::print_fatal(format_args!(
            "{FATAL_MARKER}:   {} {:#018x} {} {:#018x} {} {:#018x} {} {:#018x}\n",
            RegName(n),
            value(n),
            RegName(n + 1),
            value(n + 1),
            RegName(n + 2),
            value(n + 2),
            RegName(n + 3),
            value(n + 3),
        ));
    }
    psci::system_off()
}

/// `x0 `, `x12`, `sp ` (register 31 of the dump is SP_EL0).
struct RegName(usize);

impl core::fmt::Display for RegName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.0 < 31 {
            write!(f, "x{:<2}", self.0)
        } else {
            write!(f, "sp ")
        }
    }
}
