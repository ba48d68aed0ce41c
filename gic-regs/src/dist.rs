//! The distributor (Arm IHI 0069, "The GIC Distributor register map").

use tock_registers::registers::{ReadOnly, ReadWrite, WriteOnly};
use tock_registers::{register_bitfields, register_structs};

register_bitfields! {u32,
    /// GICD_CTLR (Arm IHI 0069, "GICD_CTLR, Distributor Control
    /// Register"). The fields are named as a GIC with a single Security
    /// state (DS = 1) lays them out; the Non-secure view of a GIC with two
    /// puts its own fields in the same bits, named in each field's
    /// comment.
    pub GICD_CTLR [
        /// Register Write Pending: a write to GICD_CTLR or to a
        /// `GICD_ICENABLER<n>` has not taken effect everywhere yet.
        RWP OFFSET(31) NUMBITS(1) [],
        /// Disable Security: one Security state (RAO/WI where the GIC
        /// has only one).
        DS OFFSET(6) NUMBITS(1) [],
        /// Affinity Routing Enable; ARE_NS in the Non-secure view.
        ARE OFFSET(4) NUMBITS(1) [],
        /// Forward Group 1 interrupts to the CPU interfaces; EnableGrp1A
        /// (affinity-routed Non-secure Group 1) in the Non-secure view.
        EnableGrp1 OFFSET(1) NUMBITS(1) [],
        /// Forward Group 0 interrupts to the CPU interfaces; EnableGrp1
        /// (Non-secure Group 1 without affinity routing) in the
        /// Non-secure view.
        EnableGrp0 OFFSET(0) NUMBITS(1) [],
    ],
    /// GICD_TYPER (Arm IHI 0069, "GICD_TYPER, Interrupt Controller Type
    /// Register").
    pub GICD_TYPER [
        /// Non-zero Aff0 values above 15 in SGI targets (range selector).
        RSS OFFSET(26) NUMBITS(1) [],
        /// 1-of-N SPI routing is NOT supported.
        No1N OFFSET(25) NUMBITS(1) [],
        /// Non-zero Aff3 values are supported.
        A3V OFFSET(24) NUMBITS(1) [],
        /// INTID bits supported, minus one.
        IDbits OFFSET(19) NUMBITS(5) [],
        /// LPIs are supported.
        LPIS OFFSET(17) NUMBITS(1) [],
        /// Message-based SPIs are supported.
        MBIS OFFSET(16) NUMBITS(1) [],
        /// The GIC has two Security states.
        SecurityExtn OFFSET(10) NUMBITS(1) [],
        /// INTIDs up to `32 * (ITLinesNumber + 1) - 1` are implemented.
        ITLinesNumber OFFSET(0) NUMBITS(5) [],
    ],
    /// GICD_PIDR2 and GICR_PIDR2, the Peripheral ID2 Registers (Arm IHI
    /// 0069, "GICD_PIDR2, Distributor Peripheral ID2 Register"); the rest
    /// of the identification registers is IMPLEMENTATION DEFINED.
    pub PIDR2 [
        /// The GIC architecture version: 3 for GICv3, 4 for GICv4.
        ArchRev OFFSET(4) NUMBITS(4) [],
    ],
}

register_bitfields! {u64,
    /// `GICD_IROUTER<n>` (Arm IHI 0069, "`GICD_IROUTER<n>`, Interrupt
    /// Routing Registers"): the affinity fields sit where MPIDR_EL1 has
    /// them.
    pub GICD_IROUTER [
        Aff3 OFFSET(32) NUMBITS(8) [],
        /// 1: deliver to any one PE that takes part in 1-of-N routing;
        /// 0: to the PE the affinity fields name.
        Interrupt_Routing_Mode OFFSET(31) NUMBITS(1) [
            Targeted = 0,
            AnyParticipatingPe = 1,
        ],
        Aff2 OFFSET(16) NUMBITS(8) [],
        Aff1 OFFSET(8) NUMBITS(8) [],
        Aff0 OFFSET(0) NUMBITS(8) [],
    ],
}

register_structs! {
    /// The distributor's frame (Arm IHI 0069, "The GIC Distributor
    /// register map"). With affinity routing the registers of INTIDs
    /// 0..=31 here are RAZ/WI: SGIs and PPIs live in each PE's
    /// redistributor.
    pub DistributorFrame {
        /// GICD_CTLR.
        (0x0000 => pub ctlr: ReadWrite<u32, GICD_CTLR::Register>),
        /// GICD_TYPER.
        (0x0004 => pub typer: ReadOnly<u32, GICD_TYPER::Register>),
        /// GICD_IIDR, Distributor Implementer Identification Register.
        (0x0008 => pub iidr: ReadOnly<u32>),
        /// GICD_TYPER2 (GICv4.1 virtual SGIs and extended INTIDs).
        (0x000c => pub typer2: ReadOnly<u32>),
        /// GICD_STATUSR, Error Reporting Status Register (optional).
        (0x0010 => pub statusr: ReadWrite<u32>),
        (0x0014 => _reserved0),
        /// `GICD_IGROUPR<n>`: one bit per INTID, 1 = Group 1.
        (0x0080 => pub igroupr: [ReadWrite<u32>; 32]),
        /// `GICD_ISENABLER<n>`: writing 1 enables the INTID; reads the
        /// enables.
        (0x0100 => pub isenabler: [ReadWrite<u32>; 32]),
        /// `GICD_ICENABLER<n>`: writing 1 disables the INTID.
        (0x0180 => pub icenabler: [ReadWrite<u32>; 32]),
        /// `GICD_ISPENDR<n>`: writing 1 makes the INTID pending.
        (0x0200 => pub ispendr: [ReadWrite<u32>; 32]),
        /// `GICD_ICPENDR<n>`: writing 1 clears the pending state.
        (0x0280 => pub icpendr: [ReadWrite<u32>; 32]),
        /// `GICD_ISACTIVER<n>`: writing 1 activates the INTID.
        (0x0300 => pub isactiver: [ReadWrite<u32>; 32]),
        /// `GICD_ICACTIVER<n>`: writing 1 deactivates the INTID.
        (0x0380 => pub icactiver: [ReadWrite<u32>; 32]),
        /// `GICD_IPRIORITYR<n>`: one byte per INTID, byte-accessible.
        (0x0400 => pub ipriorityr: [ReadWrite<u8>; 1024]),
        /// `GICD_ITARGETSR<n>`: one byte per INTID; RAZ/WI with affinity
        /// routing.
        (0x0800 => pub itargetsr: [ReadWrite<u8>; 1024]),
        /// `GICD_ICFGR<n>`: two bits per INTID, Int_config in the odd one
        /// (1 edge-triggered, 0 level-sensitive).
        (0x0c00 => pub icfgr: [ReadWrite<u32>; 64]),
        /// `GICD_IGRPMODR<n>`: with GICD_IGROUPR, the group of each INTID
        /// of a GIC with two Security states.
        (0x0d00 => pub igrpmodr: [ReadWrite<u32>; 32]),
        (0x0d80 => _reserved1),
        /// `GICD_NSACR<n>`, Non-secure Access Control Registers.
        (0x0e00 => pub nsacr: [ReadWrite<u32>; 64]),
        /// GICD_SGIR, the SGI register of legacy (ARE = 0) operation.
        (0x0f00 => pub sgir: WriteOnly<u32>),
        (0x0f04 => _reserved2),
        /// `GICD_CPENDSGIR<n>`: legacy SGI clear-pending, one byte per SGI.
        (0x0f10 => pub cpendsgir: [ReadWrite<u8>; 16]),
        /// `GICD_SPENDSGIR<n>`: legacy SGI set-pending, one byte per SGI.
        (0x0f20 => pub spendsgir: [ReadWrite<u8>; 16]),
        (0x0f30 => _reserved3),
        /// `GICD_IROUTER<n>` of INTIDs 32..=1019 (there are none below 32).
        (0x6100 => pub irouter: [ReadWrite<u64, GICD_IROUTER::Register>; 988]),
        (0x7fe0 => _reserved4),
        /// PIDR4..PIDR7, PIDR0 and PIDR1.
        (0xffd0 => pub id_registers: [ReadOnly<u32>; 6]),
        /// GICD_PIDR2.
        (0xffe8 => pub pidr2: ReadOnly<u32, PIDR2::Register>),
        /// PIDR3 and CIDR0..CIDR3.
        (0xffec => pub id_registers_end: [ReadOnly<u32>; 5]),
        (0x1_0000 => @END),
    }
}

/// Size of the distributor frame.
pub const DISTRIBUTOR_SIZE: u64 = size_of::<DistributorFrame>() as u64;
