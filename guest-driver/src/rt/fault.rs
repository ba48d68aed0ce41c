//! Surviving a synchronous exception on purpose: a test that provokes one
//! (a load from an address nothing backs, a system register the
//! hypervisor refuses) wraps the provoking code in [`expect`], which
//! records the next synchronous exception this CPU takes and resumes the
//! code instead of reporting the exception as fatal.
//!
//! ```ignore
//! let (_, caught) = rt::fault::expect(|| probe_read(0x8000_0000));
//! let fault = caught.expect("the read aborted").fault();
//! assert!(fault.is_external_abort());
//! ```
//!
//! The catching is opt-in and scoped: outside [`expect`] every exception
//! stays fatal ([`super::exceptions`]), and inside it only the first
//! synchronous exception taken from the code itself (EL1 on SP_EL0) is
//! caught. A second one in the same scope, an exception taken by the
//! exception handler, an IRQ or an SError are still reported and power
//! the guest off. The state is per CPU (`TPIDR_EL1`'s per-CPU block), so
//! CPUs catch independently.
//!
//! Where the code resumes:
//! - after the faulting instruction (ELR_EL1 + 4: the guests are A64
//!   only) for every exception that names an instruction that executed
//!   (data aborts, undefined instructions, trapped system registers);
//! - at the link register (x30) for an instruction abort, where the fetch
//!   itself failed and there is no instruction to step over: branch to the
//!   address under test with `BLR`, and the abort returns as if the code
//!   there had returned at once;
//! - at ELR_EL1 itself for a software step exception, which is taken
//!   after the stepped instruction ran and names the next one, with
//!   PSTATE.D set (debug exceptions masked): the step state machine is
//!   active-pending now, so unmasked it would step again at once (Arm
//!   ARM D2 "Software Step exceptions"). The code clears MDSCR_EL1.SS
//!   before it unmasks them.
//!
//! A breakpoint or watchpoint exception resumes after the instruction,
//! which then has not run (nor made its access).
//!
//! The provoking code must expect the instruction to have had no effect:
//! a load that aborts leaves its destination register as it was.

use core::sync::atomic::{AtomicU8, AtomicU64, Ordering, compiler_fence};

use super::exceptions::Frame;
use super::percpu;
pub use crate::fault::Caught;
use crate::fault::Vector;
use aarch64_cpu::registers::{ESR_EL1, SPSR_EL1};
use tock_registers::LocalRegisterCopy;

/// Bytes of an A64 instruction: how far a caught exception's return
/// address moves to step over the instruction that raised it.
const INSTRUCTION_BYTES: u64 = 4;

/// SPSR_EL1.D: debug exceptions masked.
const SPSR_DEBUG_MASKED: u64 = SPSR_EL1::D::Masked.value;

/// The general-purpose register holding the return address of a `BLR`.
const LINK_REGISTER: usize = 30;

/// No [`expect`] is running on the CPU.
const IDLE: u8 = 0;
/// [`expect`] is running and nothing was caught yet.
const ARMED: u8 = 1;
/// [`expect`] is running and caught an exception.
const CAUGHT: u8 = 2;

/// One CPU's catching state (part of its per-CPU block). Only the CPU
/// itself touches it, from its code and from its exception handler.
pub struct ExpectedFault {
    state: AtomicU8,
    esr: AtomicU64,
    far: AtomicU64,
    elr: AtomicU64,
}

impl ExpectedFault {
    pub(super) const fn new() -> Self {
        Self {
            state: AtomicU8::new(IDLE),
            esr: AtomicU64::new(0),
            far: AtomicU64::new(0),
            elr: AtomicU64::new(0),
        }
    }
}

/// Runs `f` with the next synchronous exception it raises on this CPU
/// caught instead of fatal (see the module documentation); returns what
/// `f` returned and the exception, if one was taken.
///
/// # Panics
/// If called inside another `expect` on the same CPU: the inner scope
/// would take the outer one's exception.
pub fn expect<R>(f: impl FnOnce() -> R) -> (R, Option<Caught>) {
    let slot = &percpu::this_cpu().expected_fault;
    let previous = slot.state.swap(ARMED, Ordering::Relaxed);
    assert_eq!(previous, IDLE, "rt::fault::expect does not nest");
    // Keep the compiler from moving `f`'s memory accesses out of the scope.
    compiler_fence(Ordering::SeqCst);
    let result = f();
    compiler_fence(Ordering::SeqCst);
    let caught = (slot.state.swap(IDLE, Ordering::Relaxed) == CAUGHT).then(|| Caught {
        esr: slot.esr.load(Ordering::Relaxed),
        far: slot.far.load(Ordering::Relaxed),
        elr: slot.elr.load(Ordering::Relaxed),
    });
    (result, caught)
}

/// Called by the exception handler first: if this CPU runs [`expect`] and
/// the exception in `frame` is its first synchronous exception from the
/// code itself, records it, points `frame`'s return address past it and
/// returns true (the handler then resumes the code). Otherwise returns
/// false and changes nothing.
pub(super) fn catch(frame: &mut Frame, vector: Vector) -> bool {
    if vector != Vector::SYNCHRONOUS_CURRENT_SP0 {
        return false;
    }
    let slot = &percpu::this_cpu().expected_fault;
    if slot.state.load(Ordering::Relaxed) != ARMED {
        return false;
    }
    slot.esr.store(frame.esr, Ordering::Relaxed);
    slot.far.store(frame.far, Ordering::Relaxed);
    slot.elr.store(frame.elr, Ordering::Relaxed);
    slot.state.store(CAUGHT, Ordering::Relaxed);
    let syndrome: LocalRegisterCopy<u64, ESR_EL1::Register> = LocalRegisterCopy::new(frame.esr);
    match syndrome.read_as_enum(ESR_EL1::EC) {
        Some(ESR_EL1::EC::Value::InstrAbortCurrentEL) => frame.elr = frame.x[LINK_REGISTER],
        Some(ESR_EL1::EC::Value::SoftwareStepCurrentEL) => frame.spsr |= SPSR_DEBUG_MASKED,
        _ => frame.elr = frame.elr.wrapping_add(INSTRUCTION_BYTES),
    }
    true
}
