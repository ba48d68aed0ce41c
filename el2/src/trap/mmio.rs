//! Emulation of a guest's single load or store to an emulated device.
//!
//! A VM's emulated devices (UART, GIC) have no stage-2 mapping, so a guest
//! access to one traps to EL2 as a data abort from a lower EL (ESR_EL2 EC
//! 0x24) with a stage-2 translation fault. When the load or store is a
//! single general-purpose register transfer, the syndrome describes it
//! completely (Arm ARM D24.2.45, "ISS encoding for an exception from a
//! Data Abort", fields ISV, SAS, SSE, SRT, SF, AR, WnR), and the
//! hypervisor performs it on the guest's behalf:
//!
//! 1. [`MmioAccess::decode`] the syndrome, FAR_EL2 and HPFAR_EL2;
//! 2. [`MmioMap::route`] the IPA to a device and an offset in its frame;
//! 3. for a write, hand [`write_value`] to the device; for a read, hand
//!    the device's value to [`complete_read`];
//! 4. [`skip_instruction`], so the guest resumes after the access.
//!
//! Anything that fails (no syndrome, no device at that IPA, an access the
//! device refuses) becomes an abort injected into the guest instead, and
//! the PC is left on the faulting instruction, as hardware would.

use crate::trap::esr::{ABORT_ISS, Esr, FaultStatus};
use crate::vcpu::GuestRegs;
use aarch64_cpu::registers::{ESR_EL2, HPFAR_EL2};
use alloc::vec::Vec;
use core::fmt;
use platform::MemRange;
use tock_registers::LocalRegisterCopy;

/// One decoded guest load or store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmioAccess {
    /// The faulting intermediate physical address:
    /// `(HPFAR_EL2.FIPA << 12) | (FAR_EL2 & 0xfff)`.
    pub ipa: u64,
    /// Bytes transferred: 1, 2, 4 or 8 (ISS.SAS).
    pub size: u8,
    /// A store (ISS.WnR).
    pub write: bool,
    /// The register transferred, 0..=31 where 31 is the zero register
    /// (ISS.SRT). For an AArch32 EL0 access it is the AArch32 register
    /// number, which is also the X register of the User mode view (Arm ARM
    /// "Mapping of the general-purpose registers between the Execution
    /// states").
    pub register: u8,
    /// A load sign-extends its value (ISS.SSE: LDRSB, LDRSH, LDRSW).
    pub sign_extend: bool,
    /// The register is 64-bit Xt rather than Wt (ISS.SF).
    pub sixty_four: bool,
    /// The instruction has acquire/release semantics (ISS.AR: LDAR,
    /// STLR, ...). Informational: the emulated access completes before
    /// the guest runs again, which orders it against everything the guest
    /// does before and after.
    pub acquire_release: bool,
    /// Length of the trapped instruction in bytes (ESR.IL): 4, or 2 for a
    /// 16-bit T32 instruction of an AArch32 EL0.
    pub instruction_len: u8,
}

/// Why a data abort cannot be emulated as a single access. The caller
/// injects an abort into the guest, except for [`Self::CacheMaintenance`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmioDecodeError {
    /// The syndrome is not a data abort from a lower EL; `class` is its EC.
    NotLowerElDataAbort { class: u8 },
    /// The fault is not one for which HPFAR_EL2 holds the faulting IPA (a
    /// stage-2 translation, access flag or address size fault; Arm ARM
    /// D24.2.x "HPFAR_EL2"): a permission fault, an external abort, ...
    UnexpectedFault(FaultStatus),
    /// The fault happened while the MMU walked the guest's own stage-1
    /// tables, which lie at `ipa` (a page address), not in RAM.
    StageOneTableWalk { ipa: u64 },
    /// A cache maintenance or address translation instruction (DC, AT) on
    /// the emulated region at `ipa` (ISS.CM). There is nothing to maintain
    /// on an emulated device: like KVM, the caller may simply skip the
    /// instruction (advance the PC by 4).
    CacheMaintenance { ipa: u64 },
    /// ISV = 0: the instruction is not described by the syndrome (load or
    /// store pair, writeback addressing, SIMD/FP register, exclusive, ...),
    /// so it cannot be emulated without decoding guest memory. `ipa` is
    /// the faulting address.
    NoSyndrome { ipa: u64 },
    /// FAR_EL2 is not valid (ISS.FnV), so only the page of the faulting
    /// address (`page`) is known.
    FarNotValid { page: u64 },
}

impl fmt::Display for MmioDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotLowerElDataAbort { class } => {
                write!(
                    f,
                    "exception class {class:#04x} is not a data abort from a lower EL"
                )
            }
            Self::UnexpectedFault(status) => write!(f, "{status} cannot be emulated"),
            Self::StageOneTableWalk { ipa } => {
                write!(f, "stage-1 table walk of the guest reached IPA {ipa:#x}")
            }
            Self::CacheMaintenance { ipa } => {
                write!(f, "cache maintenance on emulated IPA {ipa:#x}")
            }
            Self::NoSyndrome { ipa } => write!(
                f,
                "access to IPA {ipa:#x} without an instruction syndrome (ISV = 0)"
            ),
            Self::FarNotValid { page } => {
                write!(f, "access to IPA page {page:#x} without a valid FAR")
            }
        }
    }
}

impl MmioAccess {
    /// Decodes a data abort taken to EL2 from ESR_EL2, FAR_EL2 and
    /// HPFAR_EL2 as the exception vector saved them.
    pub fn decode(esr: u64, far: u64, hpfar: u64) -> Result<Self, MmioDecodeError> {
        let syndrome = Esr::new(esr);
        if syndrome.class() != Some(ESR_EL2::EC::Value::DataAbortLowerEL) {
            return Err(MmioDecodeError::NotLowerElDataAbort {
                class: syndrome.class_bits() as u8,
            });
        }
        let iss = LocalRegisterCopy::<u64, ABORT_ISS::Register>::new(syndrome.iss());
        // HPFAR_EL2.FIPA holds IPA[N:12] (bits 4 upwards); the page offset
        // comes from FAR_EL2, which holds the guest's virtual address.
        let page =
            LocalRegisterCopy::<u64, HPFAR_EL2::Register>::new(hpfar).read(HPFAR_EL2::FIPA) << 12;
        let status = FaultStatus::from_fsc(iss.read(ABORT_ISS::FSC) as u8);
        if !matches!(
            status,
            FaultStatus::Translation { .. }
                | FaultStatus::AccessFlag { .. }
                | FaultStatus::AddressSize { .. }
        ) {
            // HPFAR_EL2 is UNKNOWN for other faults (and for permission
            // faults on some cores), so there is no trustworthy IPA.
            return Err(MmioDecodeError::UnexpectedFault(status));
        }
        if iss.is_set(ABORT_ISS::S1PTW) {
            return Err(MmioDecodeError::StageOneTableWalk { ipa: page });
        }
        if iss.is_set(ABORT_ISS::FNV) {
            return Err(MmioDecodeError::FarNotValid { page });
        }
        let ipa = page | (far & 0xfff);
        if iss.is_set(ABORT_ISS::CM) {
            return Err(MmioDecodeError::CacheMaintenance { ipa });
        }
        if !iss.is_set(ABORT_ISS::ISV) {
            return Err(MmioDecodeError::NoSyndrome { ipa });
        }
        Ok(Self {
            ipa,
            size: 1 << iss.read(ABORT_ISS::SAS),
            write: iss.is_set(ABORT_ISS::WNR),
            register: iss.read(ABORT_ISS::SRT) as u8,
            sign_extend: iss.is_set(ABORT_ISS::SSE),
            sixty_four: iss.is_set(ABORT_ISS::SF),
            acquire_release: iss.is_set(ABORT_ISS::AR),
            instruction_len: if syndrome.is_32bit_instruction() {
                4
            } else {
                2
            },
        })
    }

    /// The bits an access of this size transfers.
    const fn size_mask(&self) -> u64 {
        match self.size {
            8.. => u64::MAX,
            size => (1u64 << (size as u32 * 8)) - 1,
        }
    }
}

/// Completes an emulated load: truncates `value` to the access size,
/// sign-extends it when the instruction asks (to 64 bits for Xt, to 32
/// for Wt), and writes it to the target register. A Wt load clears the
/// upper half of Xt; a load into XZR is discarded. Does not move the PC
/// (see [`skip_instruction`]).
pub fn complete_read(regs: &mut GuestRegs, access: &MmioAccess, value: u64) {
    let bits = u32::from(access.size.min(8)) * 8;
    let mut value = value & access.size_mask();
    if access.sign_extend && (1..64).contains(&bits) {
        let unused = 64 - bits;
        value = (((value << unused) as i64) >> unused) as u64;
    }
    if !access.sixty_four {
        value &= u64::from(u32::MAX);
    }
    regs.set_reg(access.register, value);
}

/// The value an emulated store writes: the low `size` bytes of its source
/// register (zero for XZR).
pub fn write_value(regs: &GuestRegs, access: &MmioAccess) -> u64 {
    regs.reg(access.register) & access.size_mask()
}

/// SPSR_EL2.M[4]: the guest was in AArch32 state (aarch64-cpu's
/// `SPSR_EL2::M` covers M[3:0] only).
pub(crate) const SPSR_AARCH32: u64 = 1 << 4;
/// SPSR_EL2.T (AArch32): T32 instruction set.
const SPSR_T32: u64 = 1 << 5;
/// SPSR_EL2.SS: software step state.
const SPSR_SS: u64 = 1 << 21;
/// SPSR_EL2.BTYPE (AArch64), bits 11:10.
const SPSR_BTYPE: u64 = 0b11 << 10;
/// SPSR_EL2.IT (AArch32): IT[1:0] in bits 26:25, IT[7:2] in bits 15:10.
const SPSR_IT: u64 = (0b11 << 25) | (0x3f << 10);

/// Resumes the guest after the emulated instruction, as if it had
/// executed: advances the PC by the instruction's length and updates
/// PSTATE as hardware would after a completed instruction (this is what
/// KVM's `kvm_skip_instr` does):
/// - BTYPE is cleared (an A64 instruction that is not a branch leaves
///   PSTATE.BTYPE zero, Arm ARM D8.x "PSTATE.BTYPE");
/// - SS is cleared, so a debugger single-stepping the guest gets its step
///   exception after this instruction (Arm ARM D2.x "Software Step
///   exceptions", the active-pending transition);
/// - for AArch32 T32 code inside an IT block, ITSTATE advances (Arm ARM
///   for A-profile, AArch32 "ITAdvance()") and the PC wraps at 32 bits.
pub fn skip_instruction(regs: &mut GuestRegs, access: &MmioAccess) {
    complete_instruction(regs, u64::from(access.instruction_len));
}

/// Bytes of an A64 instruction.
pub const A64_INSTRUCTION_BYTES: u64 = 4;

/// Resumes the guest after the trapped `len`-byte instruction that el2
/// completed for it (an emulated access, system register or trapped SMC),
/// as [`skip_instruction`] describes.
pub fn complete_instruction(regs: &mut GuestRegs, len: u64) {
    if regs.pstate & SPSR_AARCH32 != 0 {
        regs.pc = regs.pc.wrapping_add(len) & u64::from(u32::MAX);
        if regs.pstate & SPSR_T32 != 0 {
            regs.pstate = it_advance(regs.pstate);
        }
    } else {
        regs.pc = regs.pc.wrapping_add(len);
        regs.pstate &= !SPSR_BTYPE;
    }
    regs.pstate &= !SPSR_SS;
}

/// AArch32 `ITAdvance()`: the IT block moves on by one instruction, and
/// ends after its last one.
fn it_advance(pstate: u64) -> u64 {
    if pstate & SPSR_IT == 0 {
        return pstate;
    }
    // ITSTATE = IT[7:0]: IT[7:5] is the base condition, IT[4:0] the mask.
    let it = ((pstate >> 8) & 0xfc) | ((pstate >> 25) & 0b11);
    let it = if it & 0b111 == 0 {
        0
    } else {
        (it & 0xe0) | ((it << 1) & 0x1f)
    };
    (pstate & !SPSR_IT) | ((it & 0xfc) << 8) | ((it & 0b11) << 25)
}

/// Why a device frame cannot be added to an [`MmioMap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmioMapError {
    /// The range is empty or wraps around the address space.
    Empty(MemRange),
    /// The range overlaps one already in the map.
    Overlap { range: MemRange, existing: MemRange },
}

impl fmt::Display for MmioMapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty(r) => write!(
                f,
                "device range at {:#x} of {:#x} bytes is empty or wraps",
                r.base, r.size
            ),
            Self::Overlap { range, existing } => write!(
                f,
                "device range [{:#x}, {:#x}) overlaps [{:#x}, {:#x})",
                range.base,
                range.end(),
                existing.base,
                existing.end()
            ),
        }
    }
}

/// A VM's emulated devices by IPA: which device an access belongs to and
/// at what offset in its frame.
///
/// `H` is whatever names a device for the caller: a small `Copy` enum
/// (`Uart`, `Gicd`, `Gicr(vcpu)`) or the device model itself. The table
/// is sorted by address and lookups are binary searches. Keep device
/// frames out of the pages stage 2 maps (in practice: page-aligned and
/// outside guest RAM), or accesses to them never trap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MmioMap<H> {
    entries: Vec<(MemRange, H)>,
}

impl<H> Default for MmioMap<H> {
    fn default() -> Self {
        Self::new()
    }
}

impl<H> MmioMap<H> {
    pub const fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// Adds a device frame; it must not overlap any other.
    pub fn insert(&mut self, range: MemRange, device: H) -> Result<(), MmioMapError> {
        if range.size == 0 || range.base.checked_add(range.size).is_none() {
            return Err(MmioMapError::Empty(range));
        }
        let i = self.entries.partition_point(|(r, _)| r.base < range.base);
        for neighbour in [i.checked_sub(1), Some(i)].into_iter().flatten() {
            if let Some((existing, _)) = self.entries.get(neighbour)
                && existing.overlaps(&range)
            {
                return Err(MmioMapError::Overlap {
                    range,
                    existing: *existing,
                });
            }
        }
        self.entries.insert(i, (range, device));
        Ok(())
    }

    /// The device whose frame holds all `size` bytes at `ipa`, and the
    /// offset of `ipa` in that frame. `None` when no frame holds the whole
    /// access (one that straddles the end of a frame is refused).
    pub fn route(&self, ipa: u64, size: u8) -> Option<(&H, u64)> {
        let i = self.index(ipa, size)?;
        let (range, device) = &self.entries[i];
        Some((device, ipa - range.base))
    }

    /// As [`Self::route`], for a device that must be changed.
    pub fn route_mut(&mut self, ipa: u64, size: u8) -> Option<(&mut H, u64)> {
        let i = self.index(ipa, size)?;
        let (range, device) = &mut self.entries[i];
        Some((device, ipa - range.base))
    }

    /// The frames, in address order.
    pub fn iter(&self) -> impl Iterator<Item = (MemRange, &H)> + '_ {
        self.entries.iter().map(|(r, d)| (*r, d))
    }

    fn index(&self, ipa: u64, size: u8) -> Option<usize> {
        let last = ipa.checked_add(u64::from(size.max(1)) - 1)?;
        let i = self
            .entries
            .partition_point(|(r, _)| r.base <= ipa)
            .checked_sub(1)?;
        let range = self.entries[i].0;
        (range.contains(ipa) && range.contains(last)).then_some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    /// HPFAR_EL2 for a fault at `ipa`: FIPA = IPA[51:12] in bits 4 upwards.
    fn hpfar(ipa: u64) -> u64 {
        (ipa >> 12) << 4
    }

    /// A kernel virtual address whose page offset is that of `ipa`.
    fn far(ipa: u64) -> u64 {
        0xffff_8000_1000_0000 | (ipa & 0xfff)
    }

    const UART_DR: u64 = 0x0900_0000;
    const UART_FR: u64 = 0x0900_0018;

    fn decode(esr: u64, ipa: u64) -> Result<MmioAccess, MmioDecodeError> {
        MmioAccess::decode(esr, far(ipa), hpfar(ipa))
    }

    // Real syndromes of a guest at EL1 faulting on an unmapped IPA (stage-2
    // translation fault, level 3): EC 0x24, IL, and the ISS as the
    // instruction describes itself.

    #[test]
    fn ldr_w1() {
        // ldr w1, [x0]: ISV, SAS = 2 (word), SRT = 1, DFSC 0b000111.
        let access = decode(0x9381_0007, UART_FR).unwrap();
        assert_eq!(
            access,
            MmioAccess {
                ipa: UART_FR,
                size: 4,
                write: false,
                register: 1,
                sign_extend: false,
                sixty_four: false,
                acquire_release: false,
                instruction_len: 4,
            }
        );
        let mut regs = GuestRegs {
            pc: 0xffff_8000_0800_1000,
            ..GuestRegs::default()
        };
        regs.x[1] = u64::MAX;
        complete_read(&mut regs, &access, 0xdead_beef_0000_0090);
        // A Wt load clears the upper half of Xt and takes only 4 bytes.
        assert_eq!(regs.x[1], 0x90);
        skip_instruction(&mut regs, &access);
        assert_eq!(regs.pc, 0xffff_8000_0800_1004);
    }

    #[test]
    fn the_fault_pkvm_tests_expect() {
        // The triple pKVM's proxy tests expect when a guest does an 8-byte
        // load from the unmapped IPA 0xdead: a FIPA of 0xd, the page offset
        // in FAR.
        let access = MmioAccess::decode(0x93c0_8007, 0xead, 0xd0).unwrap();
        assert_eq!(access.ipa, 0xdead);
        assert_eq!(
            (access.size, access.sixty_four, access.write),
            (8, true, false)
        );
    }

    #[test]
    fn ldr_x0_is_a_full_doubleword() {
        // ldr x0, [x1]: SAS = 3, SF.
        let access = decode(0x93c0_8007, 0x0800_0008).unwrap();
        assert_eq!((access.size, access.register), (8, 0));
        assert!(access.sixty_four && !access.write);
        let mut regs = GuestRegs::default();
        complete_read(&mut regs, &access, 0x8000_0000_0000_0001);
        assert_eq!(regs.x[0], 0x8000_0000_0000_0001);
    }

    #[test]
    fn strb_w2() {
        // strb w2, [x0]: SAS = 0 (byte), SRT = 2, WnR.
        let access = decode(0x9302_0047, UART_DR).unwrap();
        assert!(access.write);
        assert_eq!((access.size, access.register), (1, 2));
        let mut regs = GuestRegs::default();
        regs.x[2] = 0x1234_5641;
        assert_eq!(write_value(&regs, &access), 0x41);
    }

    #[test]
    fn ldrsh_sign_extends_to_64_or_32_bits() {
        // ldrsh x3, [x0]: SAS = 1, SSE, SRT = 3, SF.
        let access = decode(0x9363_8007, UART_DR).unwrap();
        assert!(access.sign_extend && access.sixty_four);
        assert_eq!(access.size, 2);
        let mut regs = GuestRegs::default();
        complete_read(&mut regs, &access, 0xffff_8001);
        assert_eq!(regs.x[3], 0xffff_ffff_ffff_8001);
        complete_read(&mut regs, &access, 0x7fff);
        assert_eq!(regs.x[3], 0x7fff);

        // ldrsh w3, [x0]: the same without SF extends to 32 bits only.
        let access = decode(0x9363_0007, UART_DR).unwrap();
        assert!(access.sign_extend && !access.sixty_four);
        complete_read(&mut regs, &access, 0x8001);
        assert_eq!(regs.x[3], 0xffff_8001);

        // ldrsb w4, [x0] and ldrsw x5, [x0].
        let access = decode(0x9324_0007, UART_DR).unwrap();
        complete_read(&mut regs, &access, 0x80);
        assert_eq!(regs.x[4], 0xffff_ff80);
        let access = decode(0x93a5_8007, UART_DR).unwrap();
        assert_eq!(access.size, 4);
        complete_read(&mut regs, &access, 0x8000_0000);
        assert_eq!(regs.x[5], 0xffff_ffff_8000_0000);
    }

    #[test]
    fn the_zero_register() {
        // str wzr, [x0]: SRT = 31 is WZR, which stores zero.
        let access = decode(0x939f_0047, UART_DR).unwrap();
        assert_eq!(access.register, 31);
        let mut regs = GuestRegs {
            x: [0x5a; 31],
            ..GuestRegs::default()
        };
        assert_eq!(write_value(&regs, &access), 0);
        // ldr wzr, [x0]: the value is discarded.
        let access = decode(0x939f_0007, UART_DR).unwrap();
        complete_read(&mut regs, &access, 7);
        assert_eq!(regs.x, [0x5a; 31]);
    }

    #[test]
    fn store_release_is_flagged() {
        // stlr w1, [x0]: AR.
        let access = decode(0x9381_4047, UART_DR).unwrap();
        assert!(access.acquire_release && access.write);
    }

    #[test]
    fn undescribed_and_unemulatable_aborts_are_errors() {
        // ldp w1, w2, [x0]: ISV = 0.
        assert_eq!(
            decode(0x9200_0007, UART_FR),
            Err(MmioDecodeError::NoSyndrome { ipa: UART_FR })
        );
        // dc civac, x0: CM and WnR, no syndrome.
        assert_eq!(
            decode(0x9200_0147, UART_DR),
            Err(MmioDecodeError::CacheMaintenance { ipa: UART_DR })
        );
        // Stage-2 permission fault: HPFAR_EL2 may not hold the IPA.
        assert_eq!(
            decode(0x9381_000f, UART_DR),
            Err(MmioDecodeError::UnexpectedFault(FaultStatus::Permission {
                level: 3
            }))
        );
        // Synchronous external abort.
        assert!(matches!(
            decode(0x9381_0010, UART_DR),
            Err(MmioDecodeError::UnexpectedFault(
                FaultStatus::SynchronousExternal
            ))
        ));
        // Stage-1 walk of guest tables that lie outside RAM: S1PTW.
        assert_eq!(
            decode(0x9200_0087, 0x0a00_0123),
            Err(MmioDecodeError::StageOneTableWalk { ipa: 0x0a00_0000 })
        );
        // FnV.
        assert_eq!(
            decode(0x9381_0407, 0x0a00_0123),
            Err(MmioDecodeError::FarNotValid { page: 0x0a00_0000 })
        );
        // Data abort at EL2 (EC 0x25) and an HVC (EC 0x16).
        assert_eq!(
            decode(0x9781_0007, UART_DR),
            Err(MmioDecodeError::NotLowerElDataAbort { class: 0x25 })
        );
        let err = decode(0x5a00_0000, UART_DR).unwrap_err();
        assert_eq!(err, MmioDecodeError::NotLowerElDataAbort { class: 0x16 });
        assert!(err.to_string().contains("0x16"));
    }

    #[test]
    fn ipa_comes_from_hpfar_and_the_page_offset_from_far() {
        // A 48-bit IPA; FAR's upper bits (a VA) and HPFAR's NS bit are ignored.
        let ipa = 0xfedc_ba98_7654;
        let access = MmioAccess::decode(0x9381_0006, far(ipa), hpfar(ipa) | 1 << 63).unwrap();
        assert_eq!(access.ipa, ipa);
    }

    #[test]
    fn skipping_a_t32_instruction_advances_the_it_block() {
        // A 16-bit T32 store (IL = 0) by an AArch32 EL0 inside an IT block.
        let access = decode(0x9181_0047, UART_DR).unwrap();
        assert_eq!(access.instruction_len, 2);
        // AArch32 User, T32, ITSTATE = 0b000_01100 (ITE: two more after
        // this one), SS set.
        let it: u64 = 0b0000_1100;
        let pstate = 0x10 | SPSR_T32 | SPSR_SS | ((it & 0xfc) << 8) | ((it & 3) << 25);
        let mut regs = GuestRegs {
            pc: 0xffff_fffe,
            pstate,
            ..GuestRegs::default()
        };
        skip_instruction(&mut regs, &access);
        assert_eq!(regs.pc, 0, "the AArch32 PC wraps at 32 bits");
        let it_after = ((regs.pstate >> 8) & 0xfc) | ((regs.pstate >> 25) & 3);
        assert_eq!(it_after, 0b0001_1000);
        assert_eq!(regs.pstate & SPSR_SS, 0);
        // The last instruction of the block ends it.
        let mut last = 0x10 | SPSR_T32 | (0b0000_1000 << 8);
        last = it_advance(last);
        assert_eq!(last & SPSR_IT, 0);
        assert_eq!(it_advance(0x10 | SPSR_T32), 0x10 | SPSR_T32);
    }

    #[test]
    fn skipping_an_a64_instruction_clears_btype_and_ss() {
        let access = decode(0x9381_0007, UART_DR).unwrap();
        let pstate = 0x3c5 | SPSR_BTYPE | SPSR_SS;
        let mut regs = GuestRegs {
            pc: 0x4008_0000,
            pstate,
            ..GuestRegs::default()
        };
        skip_instruction(&mut regs, &access);
        assert_eq!(regs.pc, 0x4008_0004);
        assert_eq!(regs.pstate, 0x3c5 & !SPSR_BTYPE);
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Device {
        Gicd,
        Gicr,
        Uart,
    }

    #[test]
    fn routing_by_ipa() {
        let mut map = MmioMap::new();
        map.insert(MemRange::new(0x0900_0000, 0x1000), Device::Uart)
            .unwrap();
        map.insert(MemRange::new(0x0800_0000, 0x1_0000), Device::Gicd)
            .unwrap();
        map.insert(MemRange::new(0x080a_0000, 0x4_0000), Device::Gicr)
            .unwrap();
        assert_eq!(
            map.insert(MemRange::new(0x0800_f000, 0x2000), Device::Uart),
            Err(MmioMapError::Overlap {
                range: MemRange::new(0x0800_f000, 0x2000),
                existing: MemRange::new(0x0800_0000, 0x1_0000)
            })
        );
        assert_eq!(
            map.insert(MemRange::new(0x0809_f000, 0x2000), Device::Uart),
            Err(MmioMapError::Overlap {
                range: MemRange::new(0x0809_f000, 0x2000),
                existing: MemRange::new(0x080a_0000, 0x4_0000)
            })
        );
        assert!(matches!(
            map.insert(MemRange::new(0x1000, 0), Device::Uart),
            Err(MmioMapError::Empty(_))
        ));
        assert!(matches!(
            map.insert(MemRange::new(u64::MAX - 10, 0x100), Device::Uart),
            Err(MmioMapError::Empty(_))
        ));

        assert_eq!(map.route(0x0900_0018, 4), Some((&Device::Uart, 0x18)));
        assert_eq!(map.route(0x0800_0000, 8), Some((&Device::Gicd, 0)));
        assert_eq!(map.route(0x080b_fffc, 4), Some((&Device::Gicr, 0x1_fffc)));
        assert_eq!(map.route(0x0900_0ffc, 4), Some((&Device::Uart, 0xffc)));
        // Straddling the end of a frame, between frames, below all of them.
        assert_eq!(map.route(0x0900_0ffc, 8), None);
        assert_eq!(map.route(0x0900_1000, 1), None);
        assert_eq!(map.route(0x0801_0000, 4), None);
        assert_eq!(map.route(0x1000, 4), None);
        assert_eq!(map.route(u64::MAX, 8), None);
        let order: Vec<Device> = map.iter().map(|(_, d)| *d).collect();
        assert_eq!(order, [Device::Gicd, Device::Gicr, Device::Uart]);
    }

    #[test]
    fn routing_to_a_mutable_device() {
        let mut map = MmioMap::default();
        map.insert(MemRange::new(0x1000, 0x1000), 0u32).unwrap();
        let access = decode(0x9302_0047, 0x1004).unwrap();
        if let Some((device, offset)) = map.route_mut(access.ipa, access.size) {
            *device += offset as u32;
        }
        assert_eq!(map.route(0x1000, 4), Some((&4, 0)));
    }
}
