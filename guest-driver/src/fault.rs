//! Naming an exception taken to EL1 from its syndrome (Arm ARM D24.2
//! "ESR_EL1"), for the runtime's one-line fault reports such as
//! `synchronous external abort at 0x50000000 (data abort, read)`.

use aarch64_cpu::registers::ESR_EL1;
use boot::exception::{Kind, Origin};
use core::fmt;
use tock_registers::LocalRegisterCopy;
use tock_registers::register_bitfields;

register_bitfields! {u64,
    /// The ISS fields of data and instruction aborts that a report names
    /// (Arm ARM D24.2 "ISS encoding for an exception from a Data Abort /
    /// an Instruction Abort").
    ABORT_ISS [
        /// FAR not valid.
        FNV OFFSET(10) NUMBITS(1) [],
        /// Write, not read (data aborts only).
        WNR OFFSET(6) NUMBITS(1) [],
        /// Data/Instruction fault status code.
        FSC OFFSET(0) NUMBITS(6) [],
    ]
}

/// Which of the 16 vectors (Arm ARM D1.3.1 "Exception vectors") an
/// exception came through: `boot`'s numbering, shared with el2.
pub use boot::exception::Vector;

/// Where an exception taken to EL1 came from, in a report's words.
pub fn origin_name(vector: Vector) -> &'static str {
    match vector.origin() {
        Origin::CurrentSp0 => "EL1 on SP_EL0 (guest code)",
        Origin::CurrentSpx => "EL1 on SP_EL1 (the exception handler itself)",
        Origin::LowerAarch64 => "EL0, AArch64",
        Origin::LowerAarch32 => "EL0, AArch32",
    }
}

/// DFSC/IFSC of a synchronous external abort, not on a translation table
/// walk (Arm ARM D24.2 "ISS encoding for an exception from a Data Abort"):
/// what the hypervisor injects for an access outside the VM's memory.
pub const FSC_SYNCHRONOUS_EXTERNAL_ABORT: u64 = 0b01_0000;

/// What the syndrome of a data or instruction abort says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Abort {
    /// A load or store (data abort), not an instruction fetch.
    pub data: bool,
    /// The access was a write (WnR; data aborts only).
    pub write: bool,
    /// The fault status code (DFSC/IFSC).
    pub status: u64,
    /// FAR_EL1 holds the faulting address (FnV clear).
    pub far_valid: bool,
}

impl Abort {
    /// Whether this is a synchronous external abort.
    pub const fn is_external(&self) -> bool {
        self.status == FSC_SYNCHRONOUS_EXTERNAL_ABORT
    }
}

/// A synchronous exception a guest survived on purpose (the runtime's
/// `rt::fault::expect`): the syndrome, the fault address and the address
/// of the instruction that raised it, as the exception left them in
/// ESR_EL1, FAR_EL1 and ELR_EL1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caught {
    pub esr: u64,
    /// FAR_EL1; meaningful for aborts only.
    pub far: u64,
    pub elr: u64,
}

impl Caught {
    /// The exception, for decoding: taken from the code itself (EL1 on
    /// SP_EL0), the only kind the runtime catches.
    pub fn fault(&self) -> Fault {
        Fault {
            vector: Vector::SYNCHRONOUS_CURRENT_SP0,
            esr: self.esr,
            far: self.far,
        }
    }
}

/// What went wrong, in words: the first line of a fault report.
#[derive(Clone, Copy, Debug)]
pub struct Fault {
    pub vector: Vector,
    pub esr: u64,
    pub far: u64,
}

impl Fault {
    fn syndrome(&self) -> LocalRegisterCopy<u64, ESR_EL1::Register> {
        LocalRegisterCopy::new(self.esr)
    }

    /// The exception class, `None` for a reserved value.
    pub fn class(&self) -> Option<ESR_EL1::EC::Value> {
        self.syndrome().read_as_enum(ESR_EL1::EC)
    }

    /// Whether this is a synchronous external abort (data or instruction),
    /// e.g. one the hypervisor injected for an access outside the VM's RAM.
    pub fn is_external_abort(&self) -> bool {
        self.abort().is_some_and(|abort| abort.is_external())
    }

    /// The abort's syndrome, for a synchronous data or instruction abort;
    /// `None` for anything else.
    pub fn abort(&self) -> Option<Abort> {
        if self.vector.kind() != Kind::Synchronous {
            return None;
        }
        use ESR_EL1::EC::Value as Ec;
        let iss: LocalRegisterCopy<u64, ABORT_ISS::Register> =
            LocalRegisterCopy::new(self.syndrome().read(ESR_EL1::ISS));
        let data = match self.class()? {
            Ec::DataAbortCurrentEL | Ec::DataAbortLowerEL => true,
            Ec::InstrAbortCurrentEL | Ec::InstrAbortLowerEL => false,
            _ => return None,
        };
        Some(Abort {
            data,
            write: data && iss.is_set(ABORT_ISS::WNR),
            status: iss.read(ABORT_ISS::FSC),
            far_valid: !iss.is_set(ABORT_ISS::FNV),
        })
    }
}

enum FscName {
    Plain(&'static str),
    Level(&'static str, u64),
    Unknown(u64),
}

/// DFSC/IFSC names (Arm ARM D24.2 "ISS encoding for an exception from a
/// Data Abort", field DFSC).
fn fsc_name(fsc: u64) -> FscName {
    let level = fsc & 0b11;
    match fsc {
        0b00_0000..=0b00_0011 => FscName::Level("address size fault", level),
        0b00_0100..=0b00_0111 => FscName::Level("translation fault", level),
        0b00_1000..=0b00_1011 => FscName::Level("access flag fault", level),
        0b00_1100..=0b00_1111 => FscName::Level("permission fault", level),
        FSC_SYNCHRONOUS_EXTERNAL_ABORT => FscName::Plain("synchronous external abort"),
        0b01_0001 => FscName::Plain("synchronous tag check fault"),
        0b01_0100..=0b01_0111 => FscName::Level(
            "synchronous external abort on a translation table walk",
            level,
        ),
        0b01_1000 => FscName::Plain("synchronous parity or ECC error"),
        0b01_1100..=0b01_1111 => FscName::Level(
            "synchronous parity or ECC error on a translation table walk",
            level,
        ),
        0b10_0001 => FscName::Plain("alignment fault"),
        0b11_0000 => FscName::Plain("TLB conflict abort"),
        0b11_0001 => FscName::Plain("unsupported atomic hardware update fault"),
        other => FscName::Unknown(other),
    }
}

impl fmt::Display for Fault {
    /// One line: what happened, where, and the class it came as.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ESR_EL1::EC::Value as Ec;
        if !self.vector.has_syndrome() {
            return write!(f, "unexpected {}", self.vector.kind());
        }
        if let Some(abort) = self.abort() {
            match fsc_name(abort.status) {
                FscName::Plain(name) => write!(f, "{name}")?,
                FscName::Level(name, level) => write!(f, "{name} (level {level})")?,
                FscName::Unknown(code) => write!(f, "abort with fault status {code:#04x}")?,
            }
            if abort.far_valid {
                write!(f, " at {:#x}", self.far)?;
            } else {
                write!(f, " at an unknown address")?;
            }
            return match (abort.data, abort.write) {
                (true, true) => write!(f, " (data abort, write)"),
                (true, false) => write!(f, " (data abort, read)"),
                (false, _) => write!(f, " (instruction abort)"),
            };
        }
        let ec = self.syndrome().read(ESR_EL1::EC);
        match self.class() {
            Some(Ec::Unknown) => write!(f, "undefined instruction"),
            Some(Ec::SError) => write!(f, "SError interrupt"),
            Some(Ec::PCAlignmentFault) => write!(f, "PC alignment fault at {:#x}", self.far),
            Some(Ec::SPAlignmentFault) => write!(f, "SP alignment fault"),
            Some(Ec::Brk64) => write!(
                f,
                "breakpoint instruction (BRK #{:#x})",
                self.syndrome().read(ESR_EL1::ISS) & 0xffff
            ),
            Some(Ec::TrappedFP) => write!(f, "FP/SIMD access trapped"),
            Some(Ec::TrappedMsrMrs) => write!(f, "system register access trapped"),
            Some(Ec::TrappedWFIorWFE) => write!(f, "WFI/WFE trapped"),
            Some(Ec::IllegalExecutionState) => write!(f, "illegal execution state"),
            Some(Ec::SVC64) => write!(f, "unexpected SVC"),
            Some(Ec::HVC64) => write!(f, "unexpected HVC"),
            Some(Ec::SMC64) => write!(f, "unexpected SMC"),
            _ => write!(f, "{} exception, class {ec:#04x}", self.vector.kind()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sync(esr: u64, far: u64) -> String {
        Fault {
            vector: Vector(0),
            esr,
            far,
        }
        .to_string()
    }

    #[test]
    fn aborts_name_the_status_address_and_direction() {
        // EC 0x25 (data abort, same EL), IL, DFSC 0x10, WnR 0.
        let sea = Fault {
            vector: Vector(0),
            esr: 0x9600_0010,
            far: 0x5000_0000,
        };
        assert!(sea.is_external_abort());
        assert_eq!(
            sea.to_string(),
            "synchronous external abort at 0x50000000 (data abort, read)"
        );
        assert_eq!(
            sync(0x9600_0047, 0x1000),
            "translation fault (level 3) at 0x1000 (data abort, write)"
        );
        assert_eq!(
            sync(0x8600_000f, 0x4008_0000),
            "permission fault (level 3) at 0x40080000 (instruction abort)"
        );
        assert_eq!(
            sync(0x9600_0410, 0),
            "synchronous external abort at an unknown address (data abort, read)"
        );
        assert!(
            !Fault {
                vector: Vector(0),
                esr: 0x9600_0047,
                far: 0
            }
            .is_external_abort()
        );
    }

    #[test]
    fn abort_fields() {
        let abort = |esr| {
            Fault {
                vector: Vector::SYNCHRONOUS_CURRENT_SP0,
                esr,
                far: 0,
            }
            .abort()
        };
        // EC 0x25 (data abort, same EL), IL, WnR, DFSC 0x10.
        assert_eq!(
            abort(0x9600_0050),
            Some(Abort {
                data: true,
                write: true,
                status: FSC_SYNCHRONOUS_EXTERNAL_ABORT,
                far_valid: true
            })
        );
        // EC 0x21 (instruction abort, same EL): never a write, even with bit 6 set.
        assert_eq!(
            abort(0x8600_0050),
            Some(Abort {
                data: false,
                write: false,
                status: FSC_SYNCHRONOUS_EXTERNAL_ABORT,
                far_valid: true
            })
        );
        assert_eq!(abort(0x9600_0410).map(|a| a.far_valid), Some(false));
        assert!(abort(0x9600_0410).is_some_and(|a| a.is_external()));
        assert_eq!(abort(0x0200_0000), None, "an undefined instruction");
        let irq = Fault {
            vector: Vector(1),
            esr: 0x9600_0010,
            far: 0,
        };
        assert_eq!(irq.abort(), None);
    }

    #[test]
    fn other_classes() {
        assert_eq!(sync(0x0200_0000, 0), "undefined instruction");
        assert_eq!(sync(0xf200_0007, 0), "breakpoint instruction (BRK #0x7)");
        assert_eq!(sync(0x1fe0_0000, 0), "FP/SIMD access trapped");
        let serror = Fault {
            vector: Vector(3),
            esr: 0xbe00_0000,
            far: 0,
        };
        assert_eq!(serror.to_string(), "SError interrupt");
        let irq = Fault {
            vector: Vector(1),
            esr: 0x9600_0010,
            far: 0,
        };
        assert_eq!(irq.to_string(), "unexpected IRQ");
        assert!(!irq.is_external_abort(), "an IRQ's stale ESR means nothing");
        assert_eq!(
            origin_name(Vector(5)),
            "EL1 on SP_EL1 (the exception handler itself)"
        );
    }
}
