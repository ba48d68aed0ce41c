//! Decoding of the Exception Syndrome Register (Arm ARM D24.2.45 "ESR_EL2").
//!
//! The exception class comes from aarch64-cpu's typed `ESR_EL2::EC`; this
//! module adds the names and the ISS fields a fault report needs.

use aarch64_cpu::registers::ESR_EL2;
use core::fmt;
use tock_registers::LocalRegisterCopy;
use tock_registers::register_bitfields;

register_bitfields! {u64,
    /// ISS layout of data and instruction aborts (Arm ARM D24.2.45, "ISS
    /// encoding for an exception from a Data Abort / Instruction Abort").
    pub ABORT_ISS [
        /// Instruction syndrome valid (data aborts only).
        ISV OFFSET(24) NUMBITS(1) [],
        /// Access size: 0 byte, 1 halfword, 2 word, 3 doubleword.
        SAS OFFSET(22) NUMBITS(2) [],
        /// Syndrome sign extend: the load sign-extends its value (when ISV).
        SSE OFFSET(21) NUMBITS(1) [],
        /// Register transferred (when ISV).
        SRT OFFSET(16) NUMBITS(5) [],
        /// Sixty-four: the register is Xt, not Wt (when ISV).
        SF OFFSET(15) NUMBITS(1) [],
        /// Acquire/release semantics (when ISV).
        AR OFFSET(14) NUMBITS(1) [],
        /// FAR not valid.
        FNV OFFSET(10) NUMBITS(1) [],
        /// External abort type (IMPLEMENTATION DEFINED classification).
        EA OFFSET(9) NUMBITS(1) [],
        /// Cache maintenance: the abort came from a cache maintenance or
        /// address translation instruction (data aborts only).
        CM OFFSET(8) NUMBITS(1) [],
        /// Fault on a stage-2 walk of a stage-1 table.
        S1PTW OFFSET(7) NUMBITS(1) [],
        /// Write, not read (data aborts only).
        WNR OFFSET(6) NUMBITS(1) [],
        /// Data/Instruction fault status code.
        FSC OFFSET(0) NUMBITS(6) [],
    ]
}

/// A decoded syndrome.
#[derive(Clone, Copy)]
pub struct Esr(LocalRegisterCopy<u64, ESR_EL2::Register>);

impl Esr {
    pub fn new(raw: u64) -> Self {
        Self(LocalRegisterCopy::new(raw))
    }

    pub fn raw(&self) -> u64 {
        self.0.get()
    }

    /// The exception class, `None` for a value the architecture reserves.
    pub fn class(&self) -> Option<ESR_EL2::EC::Value> {
        self.0.read_as_enum(ESR_EL2::EC)
    }

    /// The raw EC field, for reports of reserved classes.
    pub fn class_bits(&self) -> u64 {
        self.0.read(ESR_EL2::EC)
    }

    pub fn iss(&self) -> u64 {
        self.0.read(ESR_EL2::ISS)
    }

    /// True for a 32-bit instruction (IL = 1).
    pub fn is_32bit_instruction(&self) -> bool {
        self.0.is_set(ESR_EL2::IL)
    }

    pub fn class_name(&self) -> &'static str {
        self.class().map_or("reserved exception class", class_name)
    }

    /// The abort fields, for data and instruction aborts.
    pub fn abort(&self) -> Option<AbortSyndrome> {
        use ESR_EL2::EC::Value as Ec;
        let data = match self.class()? {
            Ec::DataAbortLowerEL | Ec::DataAbortCurrentEL => true,
            Ec::InstrAbortLowerEL | Ec::InstrAbortCurrentEL => false,
            _ => return None,
        };
        let iss = LocalRegisterCopy::<u64, ABORT_ISS::Register>::new(self.iss());
        Some(AbortSyndrome {
            data,
            write: data && iss.is_set(ABORT_ISS::WNR),
            far_valid: !iss.is_set(ABORT_ISS::FNV),
            s1ptw: iss.is_set(ABORT_ISS::S1PTW),
            status: FaultStatus::from_fsc(iss.read(ABORT_ISS::FSC) as u8),
            access: (data && iss.is_set(ABORT_ISS::ISV)).then(|| AccessSyndrome {
                size_bytes: 1 << iss.read(ABORT_ISS::SAS),
                register: iss.read(ABORT_ISS::SRT) as u8,
            }),
        })
    }
}

impl fmt::Debug for Esr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Esr({:#x})", self.raw())
    }
}

/// What a data or instruction abort says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortSyndrome {
    pub data: bool,
    pub write: bool,
    pub far_valid: bool,
    pub s1ptw: bool,
    pub status: FaultStatus,
    /// Present when the syndrome describes the faulting load/store (ISV).
    pub access: Option<AccessSyndrome>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessSyndrome {
    pub size_bytes: u8,
    pub register: u8,
}

/// The fault status code of an abort (Arm ARM D24.2.45, DFSC/IFSC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultStatus {
    AddressSize { level: u8 },
    Translation { level: u8 },
    AccessFlag { level: u8 },
    Permission { level: u8 },
    SynchronousExternal,
    SynchronousExternalOnWalk { level: u8 },
    Alignment,
    TlbConflict,
    Other(u8),
}

impl FaultStatus {
    pub fn from_fsc(fsc: u8) -> Self {
        let level = fsc & 0b11;
        match fsc {
            0b00_0000..=0b00_0011 => Self::AddressSize { level },
            0b00_0100..=0b00_0111 => Self::Translation { level },
            0b00_1000..=0b00_1011 => Self::AccessFlag { level },
            0b00_1100..=0b00_1111 => Self::Permission { level },
            0b01_0000 => Self::SynchronousExternal,
            0b01_0100..=0b01_0111 => Self::SynchronousExternalOnWalk { level },
            0b10_0001 => Self::Alignment,
            0b11_0000 => Self::TlbConflict,
            other => Self::Other(other),
        }
    }
}

impl fmt::Display for FaultStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AddressSize { level } => write!(f, "address size fault, level {level}"),
            Self::Translation { level } => write!(f, "translation fault, level {level}"),
            Self::AccessFlag { level } => write!(f, "access flag fault, level {level}"),
            Self::Permission { level } => write!(f, "permission fault, level {level}"),
            Self::SynchronousExternal => write!(f, "synchronous external abort"),
            Self::SynchronousExternalOnWalk { level } => {
                write!(f, "synchronous external abort on table walk, level {level}")
            }
            Self::Alignment => write!(f, "alignment fault"),
            Self::TlbConflict => write!(f, "TLB conflict abort"),
            Self::Other(fsc) => write!(f, "fault status {fsc:#04x}"),
        }
    }
}

/// A human name for each exception class.
pub fn class_name(ec: ESR_EL2::EC::Value) -> &'static str {
    use ESR_EL2::EC::Value as Ec;
    match ec {
        Ec::Unknown => "Unknown reason (undefined instruction)",
        Ec::TrappedWFIorWFE => "trapped WFI/WFE",
        Ec::TrappedMCRorMRC | Ec::TrappedMCRorMRC2 => "trapped AArch32 MCR/MRC",
        Ec::TrappedMCRRorMRRC | Ec::TrappedMRRC => "trapped AArch32 MCRR/MRRC",
        Ec::TrappedLDCorSTC => "trapped AArch32 LDC/STC",
        Ec::TrappedFP => "trapped FP/SIMD access",
        Ec::TrappedVMRS => "trapped VMRS",
        Ec::TrappedPointerAuth => "trapped pointer authentication instruction",
        Ec::TrappedNotCovered => "trapped instruction not covered by another class",
        Ec::BranchTarget => "branch target exception",
        Ec::IllegalExecutionState => "illegal execution state",
        Ec::SVC32 => "SVC (AArch32)",
        Ec::HVC32 => "HVC (AArch32)",
        Ec::SMC32 => "SMC (AArch32)",
        Ec::TrappedMSRR_MRRS => "trapped MSRR/MRRS",
        Ec::SVC64 => "SVC (AArch64)",
        Ec::HVC64 => "HVC (AArch64)",
        Ec::SMC64 => "SMC (AArch64)",
        Ec::TrappedMsrMrs => "trapped MSR/MRS/system instruction",
        Ec::TrappedSve => "trapped SVE access",
        Ec::TrappedERET => "trapped ERET",
        Ec::TrappedTSTART => "trapped TSTART",
        Ec::PointerAuth => "pointer authentication failure",
        Ec::TrappedSME => "trapped SME access",
        Ec::InstrAbortLowerEL => "instruction abort from a lower EL",
        Ec::InstrAbortCurrentEL => "instruction abort at EL2",
        Ec::PCAlignmentFault => "PC alignment fault",
        Ec::DataAbortLowerEL => "data abort from a lower EL",
        Ec::DataAbortCurrentEL => "data abort at EL2",
        Ec::SPAlignmentFault => "SP alignment fault",
        Ec::MemoryOperationException => "memory operation exception",
        Ec::TrappedFP32 => "trapped AArch32 FP exception",
        Ec::TrappedFP64 => "trapped AArch64 FP exception",
        Ec::GCSException => "guarded control stack exception",
        Ec::SError => "SError interrupt",
        Ec::BreakpointLowerEL => "breakpoint from a lower EL",
        Ec::BreakpointCurrentEL => "breakpoint at EL2",
        Ec::SoftwareStepLowerEL => "software step from a lower EL",
        Ec::SoftwareStepCurrentEL => "software step at EL2",
        Ec::WatchpointLowerEL => "watchpoint from a lower EL",
        Ec::WatchpointCurrentEL => "watchpoint at EL2",
        Ec::Bkpt32 => "BKPT (AArch32)",
        Ec::VectorCatch32 => "vector catch (AArch32)",
        Ec::Brk64 => "BRK (AArch64)",
        Ec::ProfilingException => "profiling exception",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ESR_EL2::EC::Value as Ec;

    #[test]
    fn undefined_instruction_at_el2() {
        // EC 0, IL 1: what `udf #0` at EL2 reports.
        let esr = Esr::new(0x0200_0000);
        assert_eq!(esr.class(), Some(Ec::Unknown));
        assert!(esr.is_32bit_instruction());
        assert!(esr.class_name().contains("Unknown reason"));
        assert!(esr.abort().is_none());
    }

    #[test]
    fn data_abort_write_translation_fault() {
        // EC 0x25, IL, ISV, SAS=3 (8 bytes), SRT=1, WnR, DFSC 0b000111 (level 3).
        let esr = Esr::new(0x9600_0000 | (1 << 24) | (3 << 22) | (1 << 16) | (1 << 6) | 0b00_0111);
        assert_eq!(esr.class(), Some(Ec::DataAbortCurrentEL));
        let abort = esr.abort().expect("data abort");
        assert!(abort.data && abort.write && abort.far_valid && !abort.s1ptw);
        assert_eq!(abort.status, FaultStatus::Translation { level: 3 });
        assert_eq!(
            abort.access,
            Some(AccessSyndrome {
                size_bytes: 8,
                register: 1
            })
        );
        assert_eq!(abort.status.to_string(), "translation fault, level 3");
    }

    #[test]
    fn instruction_abort_never_claims_a_write() {
        // EC 0x21, IFSC permission fault level 3, bit 6 set (RES0 for instruction aborts).
        let esr = Esr::new((0x21 << 26) | (1 << 25) | (1 << 6) | 0b00_1111);
        let abort = esr.abort().expect("instruction abort");
        assert!(!abort.data && !abort.write);
        assert_eq!(abort.status, FaultStatus::Permission { level: 3 });
        assert_eq!(abort.access, None);
    }

    #[test]
    fn hvc_and_wfx_classes() {
        assert_eq!(Esr::new(0x5a00_0000).class(), Some(Ec::HVC64)); // EC 0x16
        assert_eq!(Esr::new(0x5e00_0000).class(), Some(Ec::SMC64)); // EC 0x17
        assert_eq!(Esr::new(0x0600_0001).class(), Some(Ec::TrappedWFIorWFE)); // EC 0x01, WFE
    }

    #[test]
    fn reserved_class_is_named_as_such() {
        let esr = Esr::new(0x3f << 26);
        assert_eq!(esr.class(), None);
        assert_eq!(esr.class_bits(), 0x3f);
        assert_eq!(esr.class_name(), "reserved exception class");
    }

    #[test]
    fn fault_status_codes() {
        assert_eq!(
            FaultStatus::from_fsc(0b00_0101),
            FaultStatus::Translation { level: 1 }
        );
        assert_eq!(
            FaultStatus::from_fsc(0b01_0000),
            FaultStatus::SynchronousExternal
        );
        assert_eq!(FaultStatus::from_fsc(0b10_0001), FaultStatus::Alignment);
        assert_eq!(FaultStatus::from_fsc(0b11_1111), FaultStatus::Other(0x3f));
    }
}
