//! Naming an exception taken to EL1 from its syndrome (Arm ARM D24.2
//! "ESR_EL1"), for the runtime's one-line fault reports such as
//! `synchronous external abort at 0x50000000 (data abort, read)`.

use aarch64_cpu::registers::ESR_EL1;
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
/// exception came through: `origin * 4 + kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vector(pub u64);

impl Vector {
    /// The kind of exception.
    pub fn kind(self) -> &'static str {
        match self.0 % 4 {
            0 => "synchronous",
            1 => "IRQ",
            2 => "FIQ",
            _ => "SError",
        }
    }

    /// Where it was taken from.
    pub fn origin(self) -> &'static str {
        match self.0 / 4 {
            0 => "EL1 on SP_EL0 (guest code)",
            1 => "EL1 on SP_EL1 (the exception handler itself)",
            2 => "EL0, AArch64",
            _ => "EL0, AArch32",
        }
    }

    /// Whether the syndrome registers describe this exception (synchronous
    /// exceptions and SErrors; IRQs and FIQs have no syndrome).
    pub fn has_syndrome(self) -> bool {
        matches!(self.0 % 4, 0 | 3)
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
        self.abort().is_some_and(|(fsc, _)| {
            matches!(fsc_name(fsc), FscName::Plain("synchronous external abort"))
        })
    }

    /// (FSC, is-data-abort) for aborts.
    fn abort(&self) -> Option<(u64, bool)> {
        if !self.vector.0.is_multiple_of(4) {
            return None;
        }
        use ESR_EL1::EC::Value as Ec;
        let iss: LocalRegisterCopy<u64, ABORT_ISS::Register> =
            LocalRegisterCopy::new(self.syndrome().read(ESR_EL1::ISS));
        match self.class()? {
            Ec::DataAbortCurrentEL | Ec::DataAbortLowerEL => Some((iss.read(ABORT_ISS::FSC), true)),
            Ec::InstrAbortCurrentEL | Ec::InstrAbortLowerEL => {
                Some((iss.read(ABORT_ISS::FSC), false))
            }
            _ => None,
        }
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
        0b01_0000 => FscName::Plain("synchronous external abort"),
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
        if let Some((fsc, data)) = self.abort() {
            match fsc_name(fsc) {
                FscName::Plain(name) => write!(f, "{name}")?,
                FscName::Level(name, level) => write!(f, "{name} (level {level})")?,
                FscName::Unknown(code) => write!(f, "abort with fault status {code:#04x}")?,
            }
            let iss: LocalRegisterCopy<u64, ABORT_ISS::Register> =
                LocalRegisterCopy::new(self.syndrome().read(ESR_EL1::ISS));
            if iss.is_set(ABORT_ISS::FNV) {
                write!(f, " at an unknown address")?;
            } else {
                write!(f, " at {:#x}", self.far)?;
            }
            return match (data, iss.is_set(ABORT_ISS::WNR)) {
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
            Vector(5).origin(),
            "EL1 on SP_EL1 (the exception handler itself)"
        );
    }
}
