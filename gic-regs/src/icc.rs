//! The fields of the GIC CPU interface's system registers (Arm IHI 0069,
//! "AArch64 System register descriptions of the GIC CPU interface").
//!
//! At EL2 the ICC_*_EL1 names reach the physical CPU interface; at EL1
//! under a hypervisor that sets HCR_EL2.IMO/FMO, the same encodings reach
//! the virtual one (ICV_*), with the same fields. The accessors live with
//! the code of each exception level: el2's `arch::regs` and the guest
//! runtime's `rt::gic`.

use tock_registers::register_bitfields;

register_bitfields! {u64,
    /// ICC_SGI1R_EL1 ("ICC_SGI1R_EL1, Interrupt Controller Software
    /// Generated Interrupt Group 1 Register"): a write generates the SGI.
    pub ICC_SGI1R_EL1 [
        /// Aff3 of the targets.
        Aff3 OFFSET(48) NUMBITS(8) [],
        /// Range Selector: TargetList bit `i` names Aff0 = RS * 16 + i.
        RS OFFSET(44) NUMBITS(4) [],
        /// Interrupt Routing Mode: 1 sends to every PE but the sender, and
        /// the target fields are ignored.
        IRM OFFSET(40) NUMBITS(1) [],
        /// Aff2 of the targets.
        Aff2 OFFSET(32) NUMBITS(8) [],
        /// The SGI.
        INTID OFFSET(24) NUMBITS(4) [],
        /// Aff1 of the targets.
        Aff1 OFFSET(16) NUMBITS(8) [],
        /// One bit per target PE in the cluster Aff3.Aff2.Aff1 (see RS).
        TargetList OFFSET(0) NUMBITS(16) [],
    ],
    /// ICC_IAR1_EL1 ("ICC_IAR1_EL1, Interrupt Controller Interrupt
    /// Acknowledge Register 1"): a read acknowledges the most urgent
    /// pending Group 1 interrupt.
    pub ICC_IAR1_EL1 [
        /// The acknowledged interrupt, or [`crate::SPURIOUS`].
        INTID OFFSET(0) NUMBITS(24) [],
    ],
    /// ICC_EOIR1_EL1 ("ICC_EOIR1_EL1, Interrupt Controller End Of
    /// Interrupt Register 1").
    pub ICC_EOIR1_EL1 [
        /// The interrupt being completed, as ICC_IAR1_EL1 returned it.
        INTID OFFSET(0) NUMBITS(24) [],
    ],
    /// ICC_DIR_EL1 ("ICC_DIR_EL1, Interrupt Controller Deactivate Interrupt
    /// Register"): with ICC_CTLR_EL1.EOImode = 1, a write deactivates an
    /// interrupt whose priority an ICC_EOIR1_EL1 write dropped.
    pub ICC_DIR_EL1 [
        /// The interrupt to deactivate.
        INTID OFFSET(0) NUMBITS(24) [],
    ],
    /// ICC_PMR_EL1 ("ICC_PMR_EL1, Interrupt Controller Interrupt Priority
    /// Mask Register"): only interrupts of a higher priority (a lower
    /// value) than the mask are signalled.
    pub ICC_PMR_EL1 [
        Priority OFFSET(0) NUMBITS(8) [],
    ],
    /// ICC_BPR1_EL1 ("ICC_BPR1_EL1, Interrupt Controller Binary Point
    /// Register 1"): how the Group 1 priority splits into a group
    /// priority, which preempts, and a subpriority.
    pub ICC_BPR1_EL1 [
        BinaryPoint OFFSET(0) NUMBITS(3) [],
    ],
    /// ICC_IGRPEN1_EL1 ("ICC_IGRPEN1_EL1, Interrupt Controller Interrupt
    /// Group 1 Enable register").
    pub ICC_IGRPEN1_EL1 [
        /// Group 1 interrupts are enabled at this CPU interface.
        Enable OFFSET(0) NUMBITS(1) [],
    ],
    /// ICC_SRE_EL1 ("ICC_SRE_EL1, Interrupt Controller System Register
    /// Enable register (EL1)").
    pub ICC_SRE_EL1 [
        /// Disable IRQ bypass.
        DIB OFFSET(2) NUMBITS(1) [],
        /// Disable FIQ bypass.
        DFB OFFSET(1) NUMBITS(1) [],
        /// System Register Enable: the CPU interface is used through the
        /// ICC_* system registers, not memory-mapped.
        SRE OFFSET(0) NUMBITS(1) [],
    ],
    /// ICC_CTLR_EL1 ("ICC_CTLR_EL1, Interrupt Controller Control Register
    /// (EL1)"), the fields the project uses. aarch64-cpu 11 defines the
    /// register read-only and without EOImode, which both sides write.
    pub ICC_CTLR_EL1 [
        /// Implemented priority bits minus one (read-only).
        PRIbits OFFSET(8) NUMBITS(3) [],
        /// What a write to ICC_EOIR1_EL1 does.
        EOImode OFFSET(1) NUMBITS(1) [
            /// Priority drop and deactivation.
            DropAndDeactivate = 0,
            /// Priority drop only; ICC_DIR_EL1 deactivates.
            DropOnly = 1,
        ],
    ],
}
