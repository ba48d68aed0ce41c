//! System registers that aarch64-cpu 11 does not define (or defines without
//! the fields the hypervisor programs), typed the same way with
//! tock-registers. The GIC CPU interface's take their fields from
//! `gic_regs::icc`, which the guests' driver shares; each accessor here
//! has the name of its fields, as aarch64-cpu's do.

pub use gic_regs::icc::{
    ICC_BPR1_EL1, ICC_CTLR_EL1, ICC_DIR_EL1, ICC_EOIR1_EL1, ICC_IAR1_EL1, ICC_IGRPEN1_EL1,
    ICC_PMR_EL1, ICC_SGI1R_EL1,
};
use tock_registers::interfaces::{Readable, Writeable};
use tock_registers::register_bitfields;

/// Defines a typed system register accessor, as aarch64-cpu does.
macro_rules! sysreg {
    ($(#[$doc:meta])* $name:ident, $asm:literal, $bits:path) => {
        $(#[$doc])*
        pub struct $name;

        impl Readable for $name {
            type T = u64;
            type R = $bits;

            #[inline]
            fn get(&self) -> u64 {
                let value;
                // SAFETY: reading this system register has no side effects
                // at EL2 (none of the registers defined here is a
                // read-sensitive one such as ICC_IAR1_EL1).
                unsafe {
                    core::arch::asm!(concat!("mrs {0}, ", $asm), out(reg) value, options(nomem, nostack, preserves_flags));
                }
                value
            }
        }

        impl Writeable for $name {
            type T = u64;
            type R = $bits;

            #[inline]
            fn set(&self, value: u64) {
                // SAFETY: callers program this register as part of EL2's own
                // configuration; it does not affect Rust's memory model.
                unsafe {
                    core::arch::asm!(concat!("msr ", $asm, ", {0}"), in(reg) value, options(nomem, nostack, preserves_flags));
                }
            }
        }
    };
}

register_bitfields! {u64,
    /// Architectural Feature Trap Register (EL2), layout when HCR_EL2.E2H = 0
    /// (Arm ARM D24.2.37 "CPTR_EL2").
    pub CPTR_EL2_NVHE [
        /// Trap EL1 accesses to CPACR_EL1.
        TCPAC OFFSET(31) NUMBITS(1) [],
        /// Trap activity monitor accesses.
        TAM OFFSET(30) NUMBITS(1) [],
        /// Trap trace register accesses.
        TTA OFFSET(20) NUMBITS(1) [],
        /// Trap SME (RES1 without SME).
        TSM OFFSET(12) NUMBITS(1) [],
        /// Trap FP/SIMD accesses from EL0-EL2.
        TFP OFFSET(10) NUMBITS(1) [],
        /// Trap SVE (RES1 without SVE).
        TZ OFFSET(8) NUMBITS(1) [],
        /// Bits that read as one: 13, 9 and 7:0.
        RES1_13 OFFSET(13) NUMBITS(1) [],
        RES1_9 OFFSET(9) NUMBITS(1) [],
        RES1_7_0 OFFSET(0) NUMBITS(8) [],
    ],

    /// A 64-bit compare value or counter.
    pub COUNT64 [
        VALUE OFFSET(0) NUMBITS(64) [],
    ],
}

sysreg!(
    /// CPTR_EL2 with its non-VHE fields.
    CptrEl2, "cptr_el2", CPTR_EL2_NVHE::Register
);
sysreg!(
    /// Counter-timer Hypervisor Physical Timer CompareValue register.
    CnthpCvalEl2, "cnthp_cval_el2", COUNT64::Register
);
sysreg!(IccPmrEl1, "icc_pmr_el1", ICC_PMR_EL1::Register);
sysreg!(IccBpr1El1, "icc_bpr1_el1", ICC_BPR1_EL1::Register);
sysreg!(IccIgrpen1El1, "icc_igrpen1_el1", ICC_IGRPEN1_EL1::Register);
sysreg!(
    /// End Of Interrupt for group 1 (write only in use).
    IccEoir1El1, "icc_eoir1_el1", ICC_EOIR1_EL1::Register
);
sysreg!(
    /// Deactivate Interrupt (write only in use).
    IccDirEl1, "icc_dir_el1", ICC_DIR_EL1::Register
);

pub const CPTR_EL2: CptrEl2 = CptrEl2;
pub const CNTHP_CVAL_EL2: CnthpCvalEl2 = CnthpCvalEl2;
pub const ICC_PMR_EL1: IccPmrEl1 = IccPmrEl1;
pub const ICC_BPR1_EL1: IccBpr1El1 = IccBpr1El1;
pub const ICC_IGRPEN1_EL1: IccIgrpen1El1 = IccIgrpen1El1;
pub const ICC_EOIR1_EL1: IccEoir1El1 = IccEoir1El1;
pub const ICC_DIR_EL1: IccDirEl1 = IccDirEl1;

/// Acknowledges the highest-priority pending group 1 interrupt
/// (ICC_IAR1_EL1). Reading it changes the GIC's state, so it is a function
/// rather than a `Readable` register.
pub fn acknowledge_interrupt() -> u32 {
    let value: u64;
    // SAFETY: acknowledging an interrupt only changes GIC state; the caller
    // (the EL2 IRQ handler) ends it with ICC_EOIR1_EL1 and ICC_DIR_EL1.
    unsafe {
        core::arch::asm!("mrs {0}, icc_iar1_el1", out(reg) value, options(nomem, nostack, preserves_flags));
    }
    ICC_IAR1_EL1::INTID.read(value) as u32
}

register_bitfields! {u64,
    /// TCR_EL2 bits that are RES1 when HCR_EL2.E2H = 0 (Arm ARM D24.2.180);
    /// aarch64-cpu's TCR_EL2 leaves them out.
    pub TCR_EL2_NVHE_RES1 [
        RES1_31 OFFSET(31) NUMBITS(1) [],
        RES1_23 OFFSET(23) NUMBITS(1) [],
    ],

    /// SCTLR_EL2 bits that are RES1 when HCR_EL2.E2H = 0 (Arm ARM D24.2.163)
    /// and that aarch64-cpu's SCTLR_EL2 does not name.
    pub SCTLR_EL2_NVHE_RES1 [
        RES1_29 OFFSET(29) NUMBITS(1) [],
        RES1_28 OFFSET(28) NUMBITS(1) [],
        RES1_23 OFFSET(23) NUMBITS(1) [],
        RES1_18 OFFSET(18) NUMBITS(1) [],
        RES1_16 OFFSET(16) NUMBITS(1) [],
        RES1_5 OFFSET(5) NUMBITS(1) [],
        RES1_4 OFFSET(4) NUMBITS(1) [],
    ],
}

/// The RES1 bits of TCR_EL2 (non-VHE), to OR into any value written.
pub const TCR_EL2_RES1: u64 =
    TCR_EL2_NVHE_RES1::RES1_31::SET.value | TCR_EL2_NVHE_RES1::RES1_23::SET.value;

/// The RES1 bits of SCTLR_EL2 (non-VHE) that aarch64-cpu does not name.
pub const SCTLR_EL2_RES1: u64 = {
    use SCTLR_EL2_NVHE_RES1 as S;
    S::RES1_29::SET.value
        | S::RES1_28::SET.value
        | S::RES1_23::SET.value
        | S::RES1_18::SET.value
        | S::RES1_16::SET.value
        | S::RES1_5::SET.value
        | S::RES1_4::SET.value
};

sysreg!(
    /// Interrupt Controller Control Register (EL1): EL2's EOI mode.
    IccCtlrEl1, "icc_ctlr_el1", ICC_CTLR_EL1::Register
);
pub const ICC_CTLR_EL1: IccCtlrEl1 = IccCtlrEl1;

/// ICC_SGI1R_EL1 is write-only: writing it sends the SGI.
pub struct IccSgi1rEl1;

impl Writeable for IccSgi1rEl1 {
    type T = u64;
    type R = ICC_SGI1R_EL1::Register;

    #[inline]
    fn set(&self, value: u64) {
        // SAFETY: sends an SGI; no memory effects.
        unsafe {
            core::arch::asm!("msr icc_sgi1r_el1, {0}", in(reg) value, options(nomem, nostack, preserves_flags));
        }
    }
}

pub const ICC_SGI1R_EL1: IccSgi1rEl1 = IccSgi1rEl1;

sysreg!(
    /// Virtualization Processor ID Register: the MIDR_EL1 a guest reads.
    VpidrEl2, "vpidr_el2", COUNT64::Register
);
pub const VPIDR_EL2: VpidrEl2 = VpidrEl2;

register_bitfields! {u64,
    /// SCTLR_EL1 bits that are RES1 in ARMv8.0 (Arm ARM D24.2.161): the
    /// reset state a vCPU starts from, MMU and caches off.
    pub SCTLR_EL1_RES1 [
        RES1_29 OFFSET(29) NUMBITS(1) [],
        RES1_28 OFFSET(28) NUMBITS(1) [],
        RES1_23 OFFSET(23) NUMBITS(1) [],
        RES1_22 OFFSET(22) NUMBITS(1) [],
        RES1_20 OFFSET(20) NUMBITS(1) [],
        RES1_11 OFFSET(11) NUMBITS(1) [],
    ],

    /// CPACR_EL1, the FP/SIMD enable of EL1/EL0 (Arm ARM D24.2.33).
    pub CPACR_EL1_FPEN [
        /// 0b11: no FP/SIMD instructions trapped.
        FPEN OFFSET(20) NUMBITS(2) [],
    ],
}

/// SCTLR_EL1 at vCPU reset: RES1 bits only (MMU, caches, alignment checks off).
pub const SCTLR_EL1_RESET: u64 = SCTLR_EL1_RES1::RES1_29::SET.value
    | SCTLR_EL1_RES1::RES1_28::SET.value
    | SCTLR_EL1_RES1::RES1_23::SET.value
    | SCTLR_EL1_RES1::RES1_22::SET.value
    | SCTLR_EL1_RES1::RES1_20::SET.value
    | SCTLR_EL1_RES1::RES1_11::SET.value;

/// CPACR_EL1 at vCPU reset: FP/SIMD usable at EL1 and EL0, as QEMU sets it
/// for a kernel it boots directly (Linux sets it again itself).
pub const CPACR_EL1_RESET: u64 = CPACR_EL1_FPEN::FPEN.val(0b11).value;

/// Reads the ID register op0 3, op1 0, CRn 0, CRm `crm`, op2 `op2` (the
/// space HCR_EL2.TID3 traps for guests); 0 outside CRm 1-7.
pub fn read_id_register(crm: u8, op2: u8) -> u64 {
    macro_rules! id_registers {
        ($($crm:literal => [$($op2:literal),*]);* $(;)?) => {
            match (crm, op2) {
                $($(
                    ($crm, $op2) => {
                        let value: u64;
                        // SAFETY: every encoding of this space is an ID
                        // register or reserved RAZ (Arm ARM D19.2, the
                        // "ID register space" of op0 3, op1 0, CRn 0), so
                        // reading it at EL2 has no effect but the read.
                        unsafe {
                            core::arch::asm!(
                                concat!("mrs {}, S3_0_C0_C", $crm, "_", $op2),
                                out(reg) value,
                                options(nomem, nostack, preserves_flags),
                            )
                        };
                        value
                    }
                )*)*
                _ => 0,
            }
        };
    }
    id_registers! {
        1 => [0, 1, 2, 3, 4, 5, 6, 7];
        2 => [0, 1, 2, 3, 4, 5, 6, 7];
        3 => [0, 1, 2, 3, 4, 5, 6, 7];
        4 => [0, 1, 2, 3, 4, 5, 6, 7];
        5 => [0, 1, 2, 3, 4, 5, 6, 7];
        6 => [0, 1, 2, 3, 4, 5, 6, 7];
        7 => [0, 1, 2, 3, 4, 5, 6, 7];
    }
}
