//! Exceptions the hypervisor injects into a guest: what EL1 sees when the
//! hypervisor decides that a guest access must fail (an undefined
//! instruction, an access outside the VM's memory).
//!
//! Injection emulates the architectural exception entry to EL1 (Arm ARM
//! D1.3.1 "Exception entry"): ELR_EL1 and SPSR_EL1 receive the interrupted
//! PC and PSTATE, ESR_EL1 (and FAR_EL1 for aborts) describe the fault, and
//! execution continues at the EL1 vector with all of DAIF masked, in EL1h.

use aarch64_cpu::registers::{ESR_EL1, SPSR_EL2};
use tock_registers::LocalRegisterCopy;
use tock_registers::fields::FieldValue;

/// Fault status code of a synchronous external abort, not on a table walk
/// (Arm ARM D24.2.45, DFSC/IFSC = 0b010000).
const FSC_SYNCHRONOUS_EXTERNAL_ABORT: u64 = 0b01_0000;
/// Data abort ISS: WnR, write not read (bit 6).
const ISS_WNR: u64 = 1 << 6;

/// Offsets in the EL1 vector table (Arm ARM D1.3.1 "Exception vectors").
const VECTOR_CURRENT_EL_SP0: u64 = 0x000;
const VECTOR_CURRENT_EL_SPX: u64 = 0x200;
const VECTOR_LOWER_EL_AARCH64: u64 = 0x400;
const VECTOR_LOWER_EL_AARCH32: u64 = 0x600;

/// What the guest is told went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestFault {
    /// An instruction the hypervisor does not emulate: EC 0 ("Unknown reason").
    Undefined,
    /// A load or store that no memory or device answers: a synchronous
    /// external abort at `address` (the faulting virtual address).
    DataAbort { address: u64, write: bool },
    /// An instruction fetch that no memory answers.
    InstructionAbort { address: u64 },
    /// A system register access that the guest's own EL1 configuration
    /// traps (EC 0x18, "Trapped MSR, MRS or System instruction"), with
    /// the ISS of the access: what EL1 would have taken had the
    /// configuration been loaded into the CPU (`el2::trap::debug`).
    SystemRegisterTrap { iss: u64 },
}

/// The EL1 state after taking the exception; the arch layer writes the
/// `*_el1` values to the registers and resumes the guest at `pc`/`pstate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Injection {
    pub esr_el1: u64,
    /// `None` when the fault has no address (FAR_EL1 is then UNKNOWN and left alone).
    pub far_el1: Option<u64>,
    pub elr_el1: u64,
    pub spsr_el1: u64,
    pub pc: u64,
    pub pstate: u64,
}

/// Computes the exception entry for `fault`, raised by the instruction at
/// `pc` while the guest ran with `pstate`, into a guest whose vector base is
/// `vbar_el1`.
pub fn inject(fault: GuestFault, pc: u64, pstate: u64, vbar_el1: u64) -> Injection {
    let from = LocalRegisterCopy::<u64, SPSR_EL2::Register>::new(pstate);
    let aarch32 = pstate & (1 << 4) != 0; // PSTATE.nRW
    let mode = from.read_as_enum(SPSR_EL2::M);
    let from_el1 = matches!(
        mode,
        Some(SPSR_EL2::M::Value::EL1t) | Some(SPSR_EL2::M::Value::EL1h)
    );
    let offset = if aarch32 {
        VECTOR_LOWER_EL_AARCH32
    } else {
        match mode {
            Some(SPSR_EL2::M::Value::EL1t) => VECTOR_CURRENT_EL_SP0,
            Some(SPSR_EL2::M::Value::EL1h) => VECTOR_CURRENT_EL_SPX,
            _ => VECTOR_LOWER_EL_AARCH64,
        }
    };
    use ESR_EL1::EC::Value as Ec;
    let (class, iss, far) = match fault {
        GuestFault::Undefined => (Ec::Unknown, 0, None),
        GuestFault::DataAbort { address, write } => (
            if from_el1 {
                Ec::DataAbortCurrentEL
            } else {
                Ec::DataAbortLowerEL
            },
            FSC_SYNCHRONOUS_EXTERNAL_ABORT | if write { ISS_WNR } else { 0 },
            Some(address),
        ),
        GuestFault::InstructionAbort { address } => (
            if from_el1 {
                Ec::InstrAbortCurrentEL
            } else {
                Ec::InstrAbortLowerEL
            },
            FSC_SYNCHRONOUS_EXTERNAL_ABORT,
            Some(address),
        ),
        GuestFault::SystemRegisterTrap { iss } => (Ec::TrappedMsrMrs, iss, None),
    };
    let esr: FieldValue<u64, ESR_EL1::Register> =
        ESR_EL1::EC.val(class as u64) + ESR_EL1::IL::SET + ESR_EL1::ISS.val(iss);
    let target = SPSR_EL2::M::EL1h
        + SPSR_EL2::D::Masked
        + SPSR_EL2::A::Masked
        + SPSR_EL2::I::Masked
        + SPSR_EL2::F::Masked;
    Injection {
        esr_el1: esr.value,
        far_el1: far,
        elr_el1: pc,
        spsr_el1: pstate,
        pc: vbar_el1.wrapping_add(offset),
        pstate: target.value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// EL1h with interrupts unmasked, as a running kernel has it.
    const EL1H: u64 = 0b0101;
    const EL0T: u64 = 0b0000;
    const VBAR: u64 = 0xffff_8000_1001_0000;

    #[test]
    fn data_abort_from_the_kernel() {
        let i = inject(
            GuestFault::DataAbort {
                address: 0x1_0000_0000,
                write: true,
            },
            0x4008_1234,
            EL1H | (1 << 29),
            VBAR,
        );
        // EC 0x25 (data abort, same EL), IL, WnR, DFSC 0b010000.
        assert_eq!(i.esr_el1, (0x25 << 26) | (1 << 25) | (1 << 6) | 0x10);
        assert_eq!(i.far_el1, Some(0x1_0000_0000));
        assert_eq!(i.elr_el1, 0x4008_1234);
        assert_eq!(i.spsr_el1, EL1H | (1 << 29));
        assert_eq!(i.pc, VBAR + 0x200);
        assert_eq!(i.pstate, 0x3c5, "EL1h with D, A, I, F masked");
    }

    #[test]
    fn data_abort_from_user_space_goes_to_the_lower_el_vector() {
        let i = inject(
            GuestFault::DataAbort {
                address: 0x1000,
                write: false,
            },
            0x40_0000,
            EL0T,
            VBAR,
        );
        assert_eq!(i.esr_el1 >> 26, 0x24);
        assert_eq!(i.esr_el1 & (1 << 6), 0, "a read");
        assert_eq!(i.pc, VBAR + 0x400);
    }

    #[test]
    fn undefined_instruction_on_the_sp0_stack() {
        let i = inject(GuestFault::Undefined, 0x4008_0000, 0b0100, VBAR);
        assert_eq!(i.esr_el1, 1 << 25, "EC 0, IL 1, ISS 0");
        assert_eq!(i.far_el1, None);
        assert_eq!(i.pc, VBAR);
    }

    #[test]
    fn instruction_abort_and_aarch32() {
        let i = inject(
            GuestFault::InstructionAbort {
                address: 0xdead_0000,
            },
            0xdead_0000,
            EL1H,
            VBAR,
        );
        assert_eq!(i.esr_el1 >> 26, 0x21);
        let a32 = inject(GuestFault::Undefined, 0x8000, 0b1_0000, VBAR);
        assert_eq!(a32.pc, VBAR + 0x600);
    }

    #[test]
    fn a_trapped_el0_system_register_access_goes_to_the_lower_el_vector() {
        // `mrs x3, dbgdtrrx_el0` from EL0: op0 2, op1 3, CRm 5, Rt 3, read.
        let iss = (2 << 20) | (3 << 14) | (5 << 1) | (3 << 5) | 1;
        let i = inject(
            GuestFault::SystemRegisterTrap { iss },
            0x40_1000,
            EL0T,
            VBAR,
        );
        assert_eq!(i.esr_el1, (0x18 << 26) | (1 << 25) | iss);
        assert_eq!(i.far_el1, None);
        assert_eq!((i.elr_el1, i.pc), (0x40_1000, VBAR + 0x400));
    }
}

/// Whether the `nth` fault a VM caused (counting from 1) is worth a log
/// line: the first 16, then the 32nd, 64th, 128th... A guest stuck in a
/// loop of faults (a kernel whose vector base is not set yet takes its own
/// injected abort forever) then costs a few dozen lines, not the console.
pub fn worth_logging(nth: u64) -> bool {
    nth <= 16 || nth.is_power_of_two()
}

#[cfg(test)]
mod log_budget_tests {
    use super::worth_logging;

    #[test]
    fn faults_are_logged_at_a_logarithmic_rate() {
        let logged: alloc::vec::Vec<u64> = (1..=1_000_000).filter(|&n| worth_logging(n)).collect();
        assert_eq!(
            logged[..17],
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 32]
        );
        assert_eq!(logged.len(), 16 + 15, "16, then 2^5 ..= 2^19");
    }
}
