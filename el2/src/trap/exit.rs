//! Why a guest stopped running: the lower-EL vector taken and the
//! syndrome registers, read once right after the exit ([`Syndrome`]) and
//! decoded once into a typed [`Exit`] that carries everything its handler
//! needs (docs/architecture.md, "Running guests"): nothing downstream reads
//! ESR_EL2, FAR_EL2 or HPFAR_EL2 again.

use crate::trap::esr::Esr;
use crate::trap::mmio::{MmioAccess, MmioDecodeError};
use crate::trap::sysreg::SysregAccess;
use aarch64_cpu::registers::ESR_EL2;
use tock_registers::{LocalRegisterCopy, register_bitfields};

register_bitfields! {u64,
    /// ISS of a trapped WFI/WFE (Arm ARM D24.2.45, "ISS encoding for an
    /// exception from a WF* instruction").
    WFX_ISS [
        /// Register holding the timeout of WFIT/WFET.
        RN OFFSET(5) NUMBITS(5) [],
        /// RN is valid.
        RV OFFSET(2) NUMBITS(1) [],
        /// Which instruction: WFI, WFE, WFIT, WFET.
        TI OFFSET(0) NUMBITS(2) [
            Wfi = 0,
            Wfe = 1,
            Wfit = 2,
            Wfet = 3,
        ],
    ],
    /// ISS of an HVC/SMC (the instruction's immediate).
    CALL_ISS [
        IMM16 OFFSET(0) NUMBITS(16) [],
    ],
}

/// Lower-EL vector numbers as `enter_guest` returns them (vector table
/// entries 8..=15: AArch64 then AArch32, each synchronous/IRQ/FIQ/SError).
const VECTOR_LOWER_FIRST: u64 = 8;

/// The wait instructions (Arm ARM C6.2, WFE/WFI/WFET/WFIT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WfxKind {
    Wfi,
    Wfe,
}

/// What the hardware says about one exit from the guest, captured by the
/// arch layer right after it and before anything else can overwrite it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Syndrome {
    /// The lower-EL vector taken (8 synchronous, 9 IRQ, 10 FIQ, 11 SError;
    /// 12..=15 the same from AArch32).
    pub vector: u64,
    /// ESR_EL2, for a synchronous exception.
    pub esr: u64,
    /// FAR_EL2, for an abort ([`Syndrome::has_fault_address`]); else 0.
    pub far: u64,
    /// HPFAR_EL2, for an abort; else 0.
    pub hpfar: u64,
}

impl Syndrome {
    /// A synchronous exit with this ESR and no fault address.
    pub const fn synchronous(esr: u64) -> Self {
        Self {
            vector: VECTOR_LOWER_FIRST,
            esr,
            far: 0,
            hpfar: 0,
        }
    }

    /// An asynchronous exit through lower-EL `vector` (IRQ, FIQ, SError).
    pub const fn asynchronous(vector: u64) -> Self {
        Self {
            vector,
            esr: 0,
            far: 0,
            hpfar: 0,
        }
    }

    /// Whether FAR_EL2 and HPFAR_EL2 describe this exit, so the arch layer
    /// must read them: an instruction or data abort from a lower EL (Arm
    /// ARM D24.2.43 "FAR_EL2", D24.2.69 "HPFAR_EL2"). Every other exit
    /// saves the two system-register reads.
    pub fn has_fault_address(vector: u64, esr: u64) -> bool {
        use ESR_EL2::EC::Value as Ec;
        vector_kind(vector) == 0
            && matches!(
                Esr::new(esr).class(),
                Some(Ec::DataAbortLowerEL | Ec::InstrAbortLowerEL)
            )
    }
}

/// A stage-2 fault on a guest data access, decoded for emulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataAbort {
    /// The guest's virtual address (FAR_EL2): what an injected abort
    /// reports in FAR_EL1.
    pub far: u64,
    /// The access was a store (ISS.WnR).
    pub write: bool,
    /// The single load or store to emulate, or why there is none.
    pub access: Result<MmioAccess, MmioDecodeError>,
}

/// A decoded guest exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// `hvc #imm` from AArch64 (ELR already points past it).
    Hvc {
        imm: u16,
    },
    /// `smc #imm` trapped by HCR_EL2.TSC (ELR points at it).
    Smc {
        imm: u16,
    },
    /// WFI/WFE, or WFIT/WFET with their deadline register.
    Wfx {
        kind: WfxKind,
        deadline_register: Option<u8>,
    },
    /// A stage-2 fault on a data access: emulated device or outside the VM.
    DataAbort(DataAbort),
    /// A stage-2 fault on an instruction fetch at guest virtual address
    /// `far`.
    InstructionAbort {
        far: u64,
    },
    /// A trapped system register access or system instruction.
    SystemRegister(SysregAccess),
    /// The first FP/SIMD instruction since the vCPU was loaded, trapped by
    /// CPTR_EL2.TFP (EC 0x07): its FP/SIMD state is loaded lazily.
    FpAccess,
    /// A physical interrupt arrived while the guest ran.
    Irq,
    Fiq,
    SError,
    /// Any other synchronous exception: its exception class bits and the
    /// whole ESR_EL2, for the log.
    Other {
        class: u64,
        esr: u64,
    },
}

impl Exit {
    /// Decodes the exit the arch layer captured.
    pub fn decode(syndrome: Syndrome) -> Exit {
        match vector_kind(syndrome.vector) {
            1 => return Exit::Irq,
            2 => return Exit::Fiq,
            3 => return Exit::SError,
            _ => {}
        }
        let raw = syndrome.esr;
        let esr = Esr::new(raw);
        let iss = esr.iss();
        use ESR_EL2::EC::Value as Ec;
        match esr.class() {
            Some(Ec::HVC64) => Exit::Hvc {
                imm: LocalRegisterCopy::<u64, CALL_ISS::Register>::new(iss).read(CALL_ISS::IMM16)
                    as u16,
            },
            Some(Ec::SMC64) => Exit::Smc {
                imm: LocalRegisterCopy::<u64, CALL_ISS::Register>::new(iss).read(CALL_ISS::IMM16)
                    as u16,
            },
            Some(Ec::TrappedWFIorWFE) => {
                let wfx = LocalRegisterCopy::<u64, WFX_ISS::Register>::new(iss);
                let (kind, timed) = match wfx.read_as_enum(WFX_ISS::TI) {
                    Some(WFX_ISS::TI::Value::Wfe) => (WfxKind::Wfe, false),
                    Some(WFX_ISS::TI::Value::Wfit) => (WfxKind::Wfi, true),
                    Some(WFX_ISS::TI::Value::Wfet) => (WfxKind::Wfe, true),
                    _ => (WfxKind::Wfi, false),
                };
                Exit::Wfx {
                    kind,
                    deadline_register: (timed && wfx.is_set(WFX_ISS::RV))
                        .then(|| wfx.read(WFX_ISS::RN) as u8),
                }
            }
            Some(Ec::DataAbortLowerEL) => Exit::DataAbort(DataAbort {
                far: syndrome.far,
                write: esr.abort().is_some_and(|abort| abort.write),
                access: MmioAccess::decode(raw, syndrome.far, syndrome.hpfar),
            }),
            Some(Ec::InstrAbortLowerEL) => Exit::InstructionAbort { far: syndrome.far },
            Some(Ec::TrappedMsrMrs) => Exit::SystemRegister(SysregAccess::from_iss(iss)),
            Some(Ec::TrappedFP) => Exit::FpAccess,
            _ => Exit::Other {
                class: esr.class_bits(),
                esr: raw,
            },
        }
    }

    /// A short name per kind, for the per-VM exit statistics.
    pub fn class_name(&self) -> &'static str {
        match self {
            Exit::Hvc { .. } => "hvc",
            Exit::Smc { .. } => "smc",
            Exit::Wfx {
                kind: WfxKind::Wfi, ..
            } => "wfi",
            Exit::Wfx {
                kind: WfxKind::Wfe, ..
            } => "wfe",
            Exit::DataAbort(_) => "data-abort",
            Exit::InstructionAbort { .. } => "insn-abort",
            Exit::SystemRegister(_) => "sysreg",
            Exit::FpAccess => "fp",
            Exit::Irq => "irq",
            Exit::Fiq => "fiq",
            Exit::SError => "serror",
            Exit::Other { .. } => "other",
        }
    }
}

/// Every value of [`Exit::class_name`], in a fixed order (statistics index).
pub const EXIT_CLASSES: [&str; 12] = [
    "hvc",
    "smc",
    "wfi",
    "wfe",
    "data-abort",
    "insn-abort",
    "sysreg",
    "irq",
    "fiq",
    "serror",
    "other",
    "fp",
];

impl Exit {
    /// Index of this exit's class in [`EXIT_CLASSES`].
    pub fn class_index(&self) -> usize {
        // Every exit counts itself: a match, not a search by name. A test
        // checks that the two agree.
        match self {
            Exit::Hvc { .. } => 0,
            Exit::Smc { .. } => 1,
            Exit::Wfx {
                kind: WfxKind::Wfi, ..
            } => 2,
            Exit::Wfx {
                kind: WfxKind::Wfe, ..
            } => 3,
            Exit::DataAbort(_) => 4,
            Exit::InstructionAbort { .. } => 5,
            Exit::SystemRegister(_) => 6,
            Exit::Irq => 7,
            Exit::Fiq => 8,
            Exit::SError => 9,
            Exit::Other { .. } => 10,
            Exit::FpAccess => 11,
        }
    }
}

/// Which kind of exception a lower-EL vector takes: 0 synchronous, 1 IRQ,
/// 2 FIQ, 3 SError (the vector table's order, Arm ARM D1.3.1).
fn vector_kind(vector: u64) -> u64 {
    vector.wrapping_sub(VECTOR_LOWER_FIRST) % 4
}

/// ESR_EL2 of `HVC #0` from AArch64 as the CPU reports it: EC = HVC64,
/// IL = 1 (a 32-bit instruction), ISS = the immediate 0 (its bits 24:16
/// are RES0). Arm ARM D24.2.41 "ESR_EL2", ISS encoding for an exception
/// from HVC or SVC.
pub const HVC0_SYNDROME: u64 = ESR_EL2::EC::HVC64.value | ESR_EL2::IL::SET.value;

/// Whether a synchronous exit's `esr` is an SMCCC call by `HVC #0`, with
/// one compare: the check before the constant-call fast path, which must
/// cost less than a full [`Exit::decode`]. A syndrome with RES0 bits set
/// is not recognised here (it takes the full decode, which answers the
/// same), never the other way round.
#[inline(always)]
pub fn is_hvc0_syndrome(esr: u64) -> bool {
    esr == HVC0_SYNDROME
}

/// Whether the exit from lower-EL `vector` with `esr` is an SMCCC call by
/// `HVC #0` that [`is_hvc0_syndrome`] recognises.
pub fn is_hvc_call(vector: u64, esr: u64) -> bool {
    vector_kind(vector) == 0 && is_hvc0_syndrome(esr)
}

/// When a vCPU that executed WFI/WFIT must wake at the latest, in
/// physical counter ticks: the earlier of its virtual timer's deadline (if
/// armed: `el2::devices::vtimer::rises_at`) and the WFIT timeout (if the
/// instruction had one); `None` means only an interrupt or a kick wakes
/// it.
pub fn wfi_deadline(vtimer: Option<u64>, wfit_timeout: Option<u64>) -> Option<u64> {
    match (vtimer, wfit_timeout) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNC: u64 = 8;

    #[test]
    fn hypercalls() {
        // EC 0x16, IL, imm 0.
        assert_eq!(
            Exit::decode(Syndrome::synchronous(0x5a00_0000)),
            Exit::Hvc { imm: 0 }
        );
        // EC 0x17, IL, imm 0x1234.
        assert_eq!(
            Exit::decode(Syndrome::synchronous(0x5e00_1234)),
            Exit::Smc { imm: 0x1234 }
        );
    }

    #[test]
    fn wait_instructions() {
        let wfi = 0x0600_0000; // EC 0x01, IL, TI = 0
        assert_eq!(
            Exit::decode(Syndrome::synchronous(wfi)),
            Exit::Wfx {
                kind: WfxKind::Wfi,
                deadline_register: None
            }
        );
        assert_eq!(
            Exit::decode(Syndrome::synchronous(wfi | 1)),
            Exit::Wfx {
                kind: WfxKind::Wfe,
                deadline_register: None
            }
        );
        // WFET with RV and Rt = 3.
        assert_eq!(
            Exit::decode(Syndrome::synchronous(wfi | (3 << 5) | (1 << 2) | 3)),
            Exit::Wfx {
                kind: WfxKind::Wfe,
                deadline_register: Some(3)
            }
        );
        // WFIT without RV: no usable deadline.
        assert_eq!(
            Exit::decode(Syndrome::synchronous(wfi | 2)),
            Exit::Wfx {
                kind: WfxKind::Wfi,
                deadline_register: None
            }
        );
    }

    /// Every TI value with RV set and clear, in the syndromes a trapped WF*
    /// from AArch64 really carries: EC 0x01, IL = 1, CV = 1, COND = 0xE
    /// (QEMU `syn_wfx(1, 0xe, ti, false)`), Rn in bits 9:5 (Arm ARM
    /// D24.2.45, "ISS encoding for an exception from a WF* instruction").
    /// RV is RES0 for WFI/WFE, and a WFIT/WFET without it has no usable
    /// deadline (Linux `kvm_handle_wfx` then treats it as WFI/WFE).
    #[test]
    fn wait_instructions_with_real_syndromes() {
        const WFX: u64 = 0x07E0_0000;
        const RV: u64 = 1 << 2;
        let rn = |n: u64| n << 5;
        let wfx = |kind, deadline_register| Exit::Wfx {
            kind,
            deadline_register,
        };
        let cases = [
            (WFX, wfx(WfxKind::Wfi, None)),
            (WFX | RV | rn(7), wfx(WfxKind::Wfi, None)),
            (WFX | 1, wfx(WfxKind::Wfe, None)),
            (WFX | 1 | RV | rn(7), wfx(WfxKind::Wfe, None)),
            (WFX | 2 | RV | rn(0), wfx(WfxKind::Wfi, Some(0))),
            (WFX | 2 | RV | rn(30), wfx(WfxKind::Wfi, Some(30))),
            (WFX | 2 | rn(30), wfx(WfxKind::Wfi, None)),
            (WFX | 3 | RV | rn(5), wfx(WfxKind::Wfe, Some(5))),
            (WFX | 3 | RV | rn(31), wfx(WfxKind::Wfe, Some(31))),
            (WFX | 3 | rn(5), wfx(WfxKind::Wfe, None)),
        ];
        for (esr, exit) in cases {
            assert_eq!(Exit::decode(Syndrome::synchronous(esr)), exit, "{esr:#x}");
            // The condition fields and IL do not matter (a 16-bit T32 WFI
            // from AArch32 has IL = 0 and no CV/COND).
            assert_eq!(
                Exit::decode(Syndrome::synchronous(esr & !0x01F0_0000)),
                exit,
                "{esr:#x}"
            );
            // Bits 63:32 (ISS2) are ignored.
            assert_eq!(
                Exit::decode(Syndrome::synchronous(esr | 0xFF << 32)),
                exit,
                "{esr:#x}"
            );
        }
        assert_eq!(
            Exit::decode(Syndrome::synchronous(WFX | 1)).class_name(),
            "wfe"
        );
        assert_eq!(
            Exit::decode(Syndrome::synchronous(WFX | 3 | RV)).class_name(),
            "wfe"
        );
        assert_eq!(
            Exit::decode(Syndrome::synchronous(WFX | 2 | RV)).class_name(),
            "wfi"
        );
    }

    #[test]
    fn aborts_interrupts_and_others() {
        // EC 0x24, IL, ISV, SAS = 2 (4 bytes), SRT = 2, WnR, DFSC level-2
        // translation fault: `str w2, [x1]` to an unmapped page.
        let store = 0x9382_0046;
        let far = 0xffff_0000_0900_0018;
        let hpfar = (0x0900_0000 >> 12) << 4; // FIPA = IPA[47:12] in bits 43:4
        let exit = Exit::decode(Syndrome {
            vector: SYNC,
            esr: store,
            far,
            hpfar,
        });
        let Exit::DataAbort(abort) = exit else {
            panic!("{exit:?}")
        };
        assert_eq!((abort.far, abort.write), (far, true));
        let access = abort.access.expect("a single-register store");
        assert_eq!(
            (access.ipa, access.size, access.register),
            (0x0900_0018, 4, 2)
        );
        assert!(access.write);
        // The same store without ISV: the direction is still known, the
        // access cannot be emulated.
        let Exit::DataAbort(abort) = Exit::decode(Syndrome {
            vector: SYNC,
            esr: store & !(1 << 24),
            far,
            hpfar,
        }) else {
            panic!()
        };
        assert!(abort.write);
        assert_eq!(
            abort.access,
            Err(MmioDecodeError::NoSyndrome { ipa: 0x0900_0018 })
        );
        // EC 0x20: the fetch address is FAR_EL2.
        assert_eq!(
            Exit::decode(Syndrome {
                vector: SYNC,
                esr: 0x8200_0006,
                far: 0x4000_1000,
                hpfar: 0,
            }),
            Exit::InstructionAbort { far: 0x4000_1000 }
        );
        // EC 0x18, `mrs x3, osdlr_el1` (op0 2, op1 0, CRn 1, CRm 3, op2 4).
        let mrs = 0x6200_0000 | (2 << 20) | (4 << 17) | (1 << 10) | (3 << 5) | (3 << 1) | 1;
        assert_eq!(
            Exit::decode(Syndrome::synchronous(mrs)),
            Exit::SystemRegister(SysregAccess::from_iss(mrs & 0x1ff_ffff))
        );
        let Exit::SystemRegister(access) = Exit::decode(Syndrome::synchronous(mrs)) else {
            panic!()
        };
        assert_eq!(
            (access.op0, access.crn, access.crm, access.op2),
            (2, 1, 3, 4)
        );
        assert_eq!((access.rt, access.write), (3, false));
        // EC 0x07 with ISS 0 (AArch64 FP/SIMD access, CPTR_EL2.TFP).
        assert_eq!(
            Exit::decode(Syndrome::synchronous(0x1e00_0000)),
            Exit::FpAccess
        );
        // An SVE access (EC 0x19) is not one: it stays undefined.
        assert_eq!(
            Exit::decode(Syndrome::synchronous(0x6600_0000)),
            Exit::Other {
                class: 0x19,
                esr: 0x6600_0000
            }
        );
        assert_eq!(Exit::decode(Syndrome::asynchronous(9)), Exit::Irq);
        assert_eq!(Exit::decode(Syndrome::asynchronous(10)), Exit::Fiq);
        assert_eq!(Exit::decode(Syndrome::asynchronous(11)), Exit::SError);
        assert_eq!(
            Exit::decode(Syndrome::asynchronous(13)),
            Exit::Irq,
            "IRQ from AArch32"
        );
        assert_eq!(
            Exit::decode(Syndrome::synchronous(0x5600_0000)),
            Exit::Other {
                class: 0x15,
                esr: 0x5600_0000
            },
            "SVC"
        );
    }

    #[test]
    fn only_aborts_need_the_fault_address_registers() {
        assert!(Syndrome::has_fault_address(SYNC, 0x9382_0046));
        assert!(Syndrome::has_fault_address(SYNC, 0x8200_0006));
        // An abort taken at EL2 itself is not a guest exit's.
        assert!(!Syndrome::has_fault_address(SYNC, 0x9600_0046));
        for esr in [0x5a00_0000, 0x0600_0000, 0x6200_0000, 0x1e00_0000] {
            assert!(!Syndrome::has_fault_address(SYNC, esr), "{esr:#x}");
        }
        // IRQ, FIQ, SError: ESR_EL2 is stale, whatever it says.
        for vector in [9, 10, 11, 13] {
            assert!(!Syndrome::has_fault_address(vector, 0x9382_0046));
        }
    }

    #[test]
    fn wfi_wakes_at_the_earlier_deadline() {
        assert_eq!(wfi_deadline(None, None), None);
        assert_eq!(wfi_deadline(Some(500), None), Some(500));
        assert_eq!(wfi_deadline(None, Some(700)), Some(700));
        assert_eq!(wfi_deadline(Some(500), Some(700)), Some(500));
        assert_eq!(wfi_deadline(Some(900), Some(700)), Some(700));
    }

    #[test]
    fn hvc_calls_are_recognised_cheaply_and_exactly() {
        // Real ESR_EL2 values: HVC #0, HVC #1, SMC #0, a data abort.
        let hvc0 = 0x5a00_0000;
        let hvc1 = 0x5a00_0001;
        let smc0 = 0x5e00_0000;
        let dabt = 0x9200_0046;
        let sync = VECTOR_LOWER_FIRST;
        assert!(is_hvc_call(sync, hvc0));
        assert_eq!(
            Exit::decode(Syndrome::synchronous(hvc0)),
            Exit::Hvc { imm: 0 }
        );
        assert_eq!(HVC0_SYNDROME, hvc0);
        for (vector, esr) in [(sync, hvc1), (sync, smc0), (sync, dabt), (sync + 1, hvc0)] {
            assert!(!is_hvc_call(vector, esr), "{vector} {esr:#x}");
            assert_ne!(
                Exit::decode(Syndrome {
                    vector,
                    esr,
                    ..Syndrome::default()
                }),
                Exit::Hvc { imm: 0 }
            );
        }
    }

    #[test]
    fn class_indices_are_stable() {
        for (i, name) in EXIT_CLASSES.iter().enumerate() {
            assert!(EXIT_CLASSES[..i].iter().all(|n| n != name));
        }
        assert_eq!(Exit::Irq.class_index(), 7);
        assert_eq!(Exit::Other { class: 0, esr: 0 }.class_index(), 10);
        // The index is the position of the exit's name, for every kind.
        let every = [
            Exit::Hvc { imm: 0 },
            Exit::Smc { imm: 0 },
            Exit::Wfx {
                kind: WfxKind::Wfi,
                deadline_register: None,
            },
            Exit::Wfx {
                kind: WfxKind::Wfe,
                deadline_register: Some(3),
            },
            Exit::decode(Syndrome::synchronous(0x9382_0046)),
            Exit::InstructionAbort { far: 0 },
            Exit::decode(Syndrome::synchronous(0x6200_0000)),
            Exit::Irq,
            Exit::Fiq,
            Exit::SError,
            Exit::Other {
                class: 0x3f,
                esr: 0xfc00_0000,
            },
            Exit::FpAccess,
        ];
        for exit in every {
            assert_eq!(
                EXIT_CLASSES[exit.class_index()],
                exit.class_name(),
                "{exit:?}"
            );
        }
    }
}
