//! Guest system-register accesses that the hypervisor traps on purpose and
//! emulates, instead of injecting an undefined instruction: the decoding of
//! a trapped MSR/MRS ([`SysregAccess`]), the SGI generation registers the
//! virtual GIC answers, the ID registers, and the PMU.
//!
//! The debug registers (MDCR_EL2.TDA, TDOSA, TDRA) are a vCPU's own,
//! switched lazily: `el2::trap::debug`.
//!
//! The PMU is the vCPU's own, switched lazily (`el2::trap::pmu`); on a
//! CPU without a PMUv3p1 none is offered, and its EL0/EL1 registers read
//! as zero and ignore writes ([`emulate`]; the guest's DT has no PMU node).
//!
//! The ID registers (op0 3, op1 0, CRn 0, CRm 1-7; HCR_EL2.TID3) are
//! trapped too, and read as the hardware's values with the features a VM
//! does not get taken out ([`sanitize_id`]): SVE and SME (their register
//! state is not switched), the statistical profiling and trace units (not
//! offered), MTE, MPAM and the activity monitors; the PMU's version is the
//! one offered, if any (`el2::trap::pmu::PmuFeatures`). Linux sizes
//! its SVE support from ID_AA64PFR0_EL1 and would otherwise write ZCR_EL1,
//! which traps. ID_AA64DFR0_EL1 tells the truth about debug: the debug
//! version, breakpoints, watchpoints, context comparators and double lock
//! the CPU has (`el2::trap::debug::DebugFeatures::guest_dfr0`), and the
//! PMU version offered.
//!
//! Anything else trapped as a system-register access (EC 0x18) still gets
//! an undefined instruction.

use super::debug::DebugFeatures;
use super::pmu::{self, PmuFeatures};
use aarch64_cpu::registers::{ID_AA64PFR0_EL1, ID_AA64PFR1_EL1};
use core::fmt;
use tock_registers::fields::Field;
use tock_registers::{LocalRegisterCopy, RegisterLongName, register_bitfields};

register_bitfields! {u64,
    /// ISS of a trapped MSR/MRS (Arm ARM D24.2.41 "ESR_EL2", ISS encoding
    /// for an exception from MSR, MRS, or System instruction execution in
    /// AArch64 state).
    SYSREG_ISS [
        OP0 OFFSET(20) NUMBITS(2) [],
        OP2 OFFSET(17) NUMBITS(3) [],
        OP1 OFFSET(14) NUMBITS(3) [],
        CRN OFFSET(10) NUMBITS(4) [],
        RT OFFSET(5) NUMBITS(5) [],
        CRM OFFSET(1) NUMBITS(4) [],
        DIRECTION OFFSET(0) NUMBITS(1) [
            Write = 0,
            Read = 1,
        ],
    ],
    /// The ID register fields that aarch64-cpu does not name (Arm ARM D19.2).
    ID_AA64PFR0_MORE [
        /// Memory Partitioning and Monitoring.
        MPAM OFFSET(40) NUMBITS(4) [],
    ],
    ID_AA64PFR1_MORE [
        /// Non-maskable interrupts.
        NMI OFFSET(36) NUMBITS(4) [],
        /// Scalable Matrix Extension.
        SME OFFSET(24) NUMBITS(4) [],
        /// MPAM minor version.
        MPAM_FRAC OFFSET(16) NUMBITS(4) [],
    ],
}

/// One trapped MSR/MRS, decoded from the ISS of an EC 0x18 exception (Arm
/// ARM D24.2.41 "ESR_EL2", ISS encoding for an exception from MSR, MRS, or
/// System instruction execution in AArch64 state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SysregAccess {
    pub op0: u8,
    pub op1: u8,
    pub crn: u8,
    pub crm: u8,
    pub op2: u8,
    /// The general-purpose register (31 is XZR).
    pub rt: u8,
    /// MSR (a write) rather than MRS.
    pub write: bool,
}

impl SysregAccess {
    /// Decodes the ISS field (ESR_EL2 bits 24:0).
    pub fn from_iss(iss: u64) -> Self {
        let iss = LocalRegisterCopy::<u64, SYSREG_ISS::Register>::new(iss);
        // Each field is at most 5 bits wide.
        let field = |f| iss.read(f) as u8;
        Self {
            op0: field(SYSREG_ISS::OP0),
            op1: field(SYSREG_ISS::OP1),
            crn: field(SYSREG_ISS::CRN),
            crm: field(SYSREG_ISS::CRM),
            op2: field(SYSREG_ISS::OP2),
            rt: field(SYSREG_ISS::RT),
            write: iss.matches_all(SYSREG_ISS::DIRECTION::Write),
        }
    }

    /// The ISS that decodes as this access (the fields this type keeps;
    /// bits 24:22 are RES0 in this encoding).
    pub fn iss(&self) -> u64 {
        let direction = if self.write {
            SYSREG_ISS::DIRECTION::Write
        } else {
            SYSREG_ISS::DIRECTION::Read
        };
        (SYSREG_ISS::OP0.val(self.op0.into())
            + SYSREG_ISS::OP2.val(self.op2.into())
            + SYSREG_ISS::OP1.val(self.op1.into())
            + SYSREG_ISS::CRN.val(self.crn.into())
            + SYSREG_ISS::RT.val(self.rt.into())
            + SYSREG_ISS::CRM.val(self.crm.into())
            + direction)
            .value
    }

    /// (op0, op1, CRn, CRm, op2).
    pub const fn encoding(&self) -> Encoding {
        (self.op0, self.op1, self.crn, self.crm, self.op2)
    }
}

impl fmt::Display for SysregAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} S{}_{}_C{}_C{}_{} {} x{}",
            if self.write { "MSR" } else { "MRS" },
            self.op0,
            self.op1,
            self.crn,
            self.crm,
            self.op2,
            if self.write { "from" } else { "to" },
            self.rt
        )
    }
}

/// A system register's encoding: (op0, op1, CRn, CRm, op2).
pub type Encoding = (u8, u8, u8, u8, u8);

/// The registers emulated by name (Arm ARM D19 register descriptions).
pub mod encoding {
    use super::Encoding;

    pub const MDCCINT_EL1: Encoding = (2, 0, 0, 2, 0);
    pub const MDSCR_EL1: Encoding = (2, 0, 0, 2, 2);
    pub const MDRAR_EL1: Encoding = (2, 0, 1, 0, 0);
    pub const OSLAR_EL1: Encoding = (2, 0, 1, 0, 4);
    pub const OSLSR_EL1: Encoding = (2, 0, 1, 1, 4);
    pub const OSDLR_EL1: Encoding = (2, 0, 1, 3, 4);
    pub const DBGPRCR_EL1: Encoding = (2, 0, 1, 4, 4);
    pub const MDCCSR_EL0: Encoding = (2, 3, 0, 1, 0);
    pub const DBGDTR_EL0: Encoding = (2, 3, 0, 4, 0);
    /// DBGDTRRX_EL0 for MRS, DBGDTRTX_EL0 for MSR.
    pub const DBGDTRRX_EL0: Encoding = (2, 3, 0, 5, 0);
    pub const DBGCLAIMSET_EL1: Encoding = (2, 0, 7, 8, 6);
    pub const DBGCLAIMCLR_EL1: Encoding = (2, 0, 7, 9, 6);
    pub const DBGAUTHSTATUS_EL1: Encoding = (2, 0, 7, 14, 6);
    pub const ICC_SGI1R_EL1: Encoding = (3, 0, 12, 11, 5);
    pub const ICC_ASGI1R_EL1: Encoding = (3, 0, 12, 11, 6);
    pub const ICC_SGI0R_EL1: Encoding = (3, 0, 12, 11, 7);
}

/// The GICv3 SGI generation registers, which trap to EL2 from EL1 while
/// HCR_EL2.IMO/FMO route interrupts to the hypervisor (Arm IHI 0069,
/// "ICC_SGI1R_EL1": "traps to EL2 when HCR_EL2.IMO == 1").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SgiRegister {
    /// ICC_SGI1R_EL1: Group 1 SGIs of the current Security state; what
    /// Linux and every guest of a single-Security-state GIC use.
    Group1,
    /// ICC_ASGI1R_EL1: Group 1 SGIs of the other Security state. The
    /// virtual GIC has one Security state (GICD_CTLR.DS = 1), so these
    /// have no target.
    OtherGroup1,
    /// ICC_SGI0R_EL1: Group 0 SGIs (virtual FIQs).
    Group0,
}

/// Whether `access` is a write to an SGI generation register, and which.
pub fn sgi_register(access: &SysregAccess) -> Option<SgiRegister> {
    use encoding::*;
    if !access.write {
        return None;
    }
    match access.encoding() {
        ICC_SGI1R_EL1 => Some(SgiRegister::Group1),
        ICC_ASGI1R_EL1 => Some(SgiRegister::OtherGroup1),
        ICC_SGI0R_EL1 => Some(SgiRegister::Group0),
        _ => None,
    }
}

/// Whether `access` reads an ID register (op0 3, op1 0, CRn 0, CRm 1-7:
/// the registers HCR_EL2.TID3 traps; Arm ARM D19.2 "identification
/// registers"). Writes to them are not ID reads (undefined).
pub fn is_id_read(access: &SysregAccess) -> bool {
    matches!(access.encoding(), (3, 0, 0, 1..=7, _)) && !access.write
}

/// `hw` with the fields in `hidden` set to 0 ("not implemented").
fn hide<R: RegisterLongName>(hw: u64, hidden: &[Field<u64, R>]) -> u64 {
    hidden
        .iter()
        .fold(hw, |value, field| value & !(field.mask << field.shift))
}

/// The value a VM reads from the ID register (op0 3, op1 0, CRn 0, `crm`,
/// `op2`) whose hardware value is `hw`, with `pmu` the PMU it is offered:
/// the hardware's, with the fields of features the VM does not get set to
/// "not implemented" (0) and versions capped at what el2 switches.
pub fn sanitize_id(crm: u8, op2: u8, hw: u64, pmu: Option<PmuFeatures>) -> u64 {
    match (crm, op2) {
        (4, 0) => hide(
            hide(hw, &[ID_AA64PFR0_EL1::SVE, ID_AA64PFR0_EL1::AMU]),
            &[ID_AA64PFR0_MORE::MPAM],
        ),
        (4, 1) => hide(
            hide(hw, &[ID_AA64PFR1_EL1::MTE]),
            &[
                ID_AA64PFR1_MORE::SME,
                ID_AA64PFR1_MORE::MPAM_FRAC,
                ID_AA64PFR1_MORE::NMI,
            ],
        ),
        // ID_AA64ZFR0_EL1 (SVE features), ID_AA64SMFR0_EL1 (SME features).
        (4, 4) | (4, 5) => 0,
        // ID_AA64DFR0_EL1: the debug fields as the CPU has them, the PMU
        // version offered, nothing else (no SPE, trace, BRBE).
        (5, 0) => DebugFeatures::guest_dfr0(hw) | PmuFeatures::guest_dfr0_field(pmu),
        // ID_AA64DFR1_EL1: none of its features (more breakpoints behind
        // MDSELR_EL1, PMU extensions) is offered.
        (5, 1) => 0,
        // ID_DFR0_EL1, the AArch32 view of the PMU.
        (1, 2) => PmuFeatures::guest_id_dfr0(pmu, hw),
        _ => hw,
    }
}

/// What an emulated access did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emulated {
    /// A read: this value goes to Xt (nothing if Xt is XZR).
    Read(u64),
    /// A write, absorbed.
    Written,
}

/// Emulates `access` to the PMU of a VM that is offered none: reads as
/// zero, writes ignored; `None` for a register that is not the PMU's.
pub fn emulate(access: &SysregAccess) -> Option<Emulated> {
    pmu::is_pmu_register(access.encoding()).then_some(if access.write {
        Emulated::Written
    } else {
        Emulated::Read(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ISS for `MSR/MRS S<op0>_<op1>_C<crn>_C<crm>_<op2>, x<rt>`.
    fn iss(op0: u64, op1: u64, crn: u64, crm: u64, op2: u64, rt: u64, write: bool) -> u64 {
        op0 << 20 | op2 << 17 | op1 << 14 | crn << 10 | rt << 5 | crm << 1 | u64::from(!write)
    }

    #[test]
    fn sgi_generation_writes_are_recognised() {
        // Linux's `msr_s SYS_ICC_SGI1R_EL1, x0`: ESR 0x623a_3016 (EC 0x18, IL, op0 3, op2 5, CRn 12, CRm 11, x0).
        let a = SysregAccess::from_iss(0x623a_3016 & 0x1ff_ffff);
        assert_eq!(a.encoding(), (3, 0, 12, 11, 5));
        assert_eq!(sgi_register(&a), Some(SgiRegister::Group1));
        let asgi = SysregAccess::from_iss(iss(3, 0, 12, 11, 6, 2, true));
        assert_eq!(sgi_register(&asgi), Some(SgiRegister::OtherGroup1));
        let sgi0 = SysregAccess::from_iss(iss(3, 0, 12, 11, 7, 2, true));
        assert_eq!(sgi_register(&sgi0), Some(SgiRegister::Group0));
        // Reads (the registers are write-only) and neighbours are not SGIs.
        assert_eq!(
            sgi_register(&SysregAccess::from_iss(iss(3, 0, 12, 11, 5, 2, false))),
            None
        );
        assert_eq!(
            sgi_register(&SysregAccess::from_iss(iss(3, 0, 12, 12, 5, 2, true))),
            None
        );
    }

    #[test]
    fn decodes_the_iss_linux_traps_first() {
        // ESR 0x62240024: Linux's `msr mdscr_el1, x1` under MDCR_EL2.TDA.
        let a = SysregAccess::from_iss(0x62240024 & 0x1ff_ffff);
        assert_eq!(a.encoding(), (2, 0, 0, 2, 2));
        assert_eq!((a.rt, a.write), (1, true));
        assert_eq!(a.to_string(), "MSR S2_0_C0_C2_2 from x1");
        // Round trip through the helper for a read.
        let r = SysregAccess::from_iss(iss(3, 3, 9, 14, 0, 7, false));
        assert_eq!((r.encoding(), r.rt, r.write), ((3, 3, 9, 14, 0), 7, false));
    }

    #[test]
    fn pmu_registers_read_zero_and_ignore_writes() {
        let pmu = [
            (3, 3, 9, 12, 0),  // PMCR_EL0
            (3, 3, 9, 14, 0),  // PMUSERENR_EL0
            (3, 3, 14, 15, 7), // PMCCFILTR_EL0
            (3, 0, 9, 14, 1),  // PMINTENSET_EL1
        ];
        for (op0, op1, crn, crm, op2) in pmu {
            let r = SysregAccess::from_iss(iss(op0, op1, crn, crm, op2, 2, false));
            let w = SysregAccess::from_iss(iss(op0, op1, crn, crm, op2, 2, true));
            assert_eq!(emulate(&r), Some(Emulated::Read(0)), "{r}");
            assert_eq!(emulate(&w), Some(Emulated::Written), "{w}");
        }
    }

    #[test]
    fn id_registers_hide_what_a_vm_does_not_get() {
        // QEMU 7.2 -cpu max: ID_AA64PFR0_EL1 with SVE (1 at 35:32), GIC
        // sysregs (1 at 27:24), EL2/EL3 AArch64.
        let pfr0 = 0x0000_0001_0100_2222u64;
        let vm = sanitize_id(4, 0, pfr0, None);
        assert_eq!((vm >> 32) & 0xf, 0, "no SVE");
        assert_eq!((vm >> 24) & 0xf, 1, "GIC system registers kept");
        assert_eq!(vm & 0xffff, pfr0 & 0xffff, "EL0-EL3 fields kept");
        // ID_AA64PFR1_EL1 with MTE and SME.
        let pfr1 = 0x0000_0001_0100_0320u64;
        let vm1 = sanitize_id(4, 1, pfr1, None);
        assert_eq!(((vm1 >> 8) & 0xf, (vm1 >> 24) & 0xf), (0, 0));
        assert_eq!(vm1 & 0xf0, 0x20, "SSBS kept");
        // SVE and SME feature registers vanish.
        assert_eq!(sanitize_id(4, 4, u64::MAX, None), 0);
        assert_eq!(sanitize_id(4, 5, u64::MAX, None), 0);
        // ID_AA64DFR0_EL1: no PMU, SPE, trace buffer; debug version and
        // breakpoint counts kept.
        let dfr0 = 0x0000_0001_f010_5f09u64;
        let d = sanitize_id(5, 0, dfr0, None);
        assert_eq!((d >> 8) & 0xf, 0, "PMUVer: no PMU offered");
        assert_eq!((d >> 32) & 0xf, 0, "PMSVer");
        assert_eq!(d & 0xf, 9, "DebugVer");
        assert_eq!((d >> 12) & 0xf, 5, "BRPs");
        assert_eq!((d >> 20) & 0xf, 1, "WRPs");
        assert_eq!(sanitize_id(5, 1, u64::MAX, None), 0, "ID_AA64DFR1_EL1");
        // With QEMU max's PMU (PMUv3p5) offered, PMUVer is the CPU's; the
        // AArch32 view too.
        let qemu_max = 0x1030_5609;
        let pmu = PmuFeatures::from_cpu(qemu_max, 6);
        assert_eq!((sanitize_id(5, 0, qemu_max, pmu) >> 8) & 0xf, 6);
        assert_eq!(sanitize_id(1, 2, 0x3603_0066, pmu), 0x3603_0066);
        assert_eq!(sanitize_id(1, 2, 0x3603_0066, None), 0x3003_0066);
        // The instruction-set registers pass through.
        assert_eq!(sanitize_id(6, 0, 0x1234_5678, None), 0x1234_5678);
        // Reads of CRm 1-7 are ID reads; writes and other spaces are not.
        let id = SysregAccess::from_iss(iss(3, 0, 0, 4, 0, 1, false));
        assert!(is_id_read(&id));
        assert!(!is_id_read(&SysregAccess { write: true, ..id }));
        assert!(!is_id_read(&SysregAccess::from_iss(iss(
            3, 0, 0, 0, 5, 1, false
        ))));
        assert!(!is_id_read(&SysregAccess::from_iss(iss(
            3, 0, 1, 0, 0, 1, false
        ))));
    }

    #[test]
    fn everything_else_is_left_to_the_caller() {
        // SCTLR_EL1 (never trapped here), an IMPLEMENTATION DEFINED register,
        // ICC_SGI1R_EL1 (the vGIC's), MDSCR_EL1 and DBGBCR0_EL1
        // (el2::trap::debug's).
        for (op0, op1, crn, crm, op2) in [
            (3, 0, 1, 0, 0),
            (3, 0, 15, 0, 0),
            (3, 0, 12, 11, 5),
            (2, 0, 0, 2, 2),
            (2, 0, 0, 0, 5),
        ] {
            let a = SysregAccess::from_iss(iss(op0, op1, crn, crm, op2, 0, true));
            assert_eq!(emulate(&a), None, "{a}");
        }
        // No ISS value panics the decoder, nor re-encodes differently.
        for i in 0..(1u64 << 16) {
            let raw = i.wrapping_mul(0x9e37_79b9) & 0x1ff_ffff;
            let a = SysregAccess::from_iss(raw);
            let _ = emulate(&a);
            assert_eq!(SysregAccess::from_iss(a.iss()), a);
        }
    }
}
