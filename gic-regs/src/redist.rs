//! The redistributors (Arm IHI 0069, "The GIC Redistributor register
//! map"): one per PE, each an RD_base frame (identification, power) and an
//! SGI_base frame (that PE's SGIs and PPIs), 64 KiB each; with virtual
//! LPIs (GICR_TYPER.VLPIS) a VLPI_base and a reserved frame follow.

use tock_registers::LocalRegisterCopy;
use tock_registers::registers::{ReadOnly, ReadWrite};
use tock_registers::{register_bitfields, register_structs};

use crate::{GICD_IROUTER, PIDR2};

register_bitfields! {u32,
    /// GICR_CTLR (Arm IHI 0069, "GICR_CTLR, Redistributor Control
    /// Register").
    pub GICR_CTLR [
        /// Upstream Write Pending: writes that affect the distributor have
        /// not reached it yet.
        UWP OFFSET(31) NUMBITS(1) [],
        /// Register Write Pending: a write to GICR_ICENABLER0 or to
        /// GICR_CTLR.EnableLPIs has not taken effect yet.
        RWP OFFSET(3) NUMBITS(1) [],
        /// LPIs are enabled.
        EnableLPIs OFFSET(0) NUMBITS(1) [],
    ],
    /// GICR_WAKER (Arm IHI 0069, "GICR_WAKER, Redistributor Wake
    /// Register").
    pub GICR_WAKER [
        /// The interface to the PE is quiescent (read-only).
        ChildrenAsleep OFFSET(2) NUMBITS(1) [],
        /// The PE is asleep: the redistributor does not forward interrupts
        /// to it. Software clears it to bring the PE's interface up.
        ProcessorSleep OFFSET(1) NUMBITS(1) [],
    ],
}

register_bitfields! {u64,
    /// GICR_TYPER (Arm IHI 0069, "GICR_TYPER, Redistributor Type
    /// Register").
    pub GICR_TYPER [
        /// Aff3.Aff2.Aff1.Aff0 of the PE this redistributor serves, 8 bits
        /// each from bit 31 down (see [`typer_affinity`]).
        Affinity_Value OFFSET(32) NUMBITS(32) [],
        /// The redistributor's number, for the ITS.
        Processor_Number OFFSET(8) NUMBITS(16) [],
        /// The last redistributor of its region.
        Last OFFSET(4) NUMBITS(1) [],
        /// Direct injection of LPIs is supported.
        DirectLPI OFFSET(3) NUMBITS(1) [],
        /// Virtual LPIs: the redistributor has two more 64 KiB frames
        /// (VLPI_base and a reserved one) after SGI_base.
        VLPIS OFFSET(1) NUMBITS(1) [],
        /// Physical LPIs are supported.
        PLPIS OFFSET(0) NUMBITS(1) [],
    ],
}

register_structs! {
    /// A redistributor's RD_base frame (Arm IHI 0069, "The GIC
    /// Redistributor register map"). The LPI registers are padding here:
    /// nothing in the project uses LPIs.
    pub RdFrame {
        /// GICR_CTLR.
        (0x0000 => pub ctlr: ReadWrite<u32, GICR_CTLR::Register>),
        /// GICR_IIDR, Redistributor Implementer Identification Register.
        (0x0004 => pub iidr: ReadOnly<u32>),
        /// GICR_TYPER, 64 bits.
        (0x0008 => pub typer: ReadOnly<u64, GICR_TYPER::Register>),
        /// GICR_STATUSR, Error Reporting Status Register (optional).
        (0x0010 => pub statusr: ReadWrite<u32>),
        /// GICR_WAKER.
        (0x0014 => pub waker: ReadWrite<u32, GICR_WAKER::Register>),
        (0x0018 => _reserved0),
        /// PIDR4..PIDR7, PIDR0 and PIDR1.
        (0xffd0 => pub id_registers: [ReadOnly<u32>; 6]),
        /// GICR_PIDR2.
        (0xffe8 => pub pidr2: ReadOnly<u32, PIDR2::Register>),
        /// PIDR3 and CIDR0..CIDR3.
        (0xffec => pub id_registers_end: [ReadOnly<u32>; 5]),
        (0x1_0000 => @END),
    }
}

register_structs! {
    /// A redistributor's SGI_base frame, which holds its PE's SGIs and
    /// PPIs (Arm IHI 0069, "The GIC Redistributor register map"). The
    /// extended PPI registers are padding here.
    pub SgiFrame {
        (0x0000 => _reserved0),
        /// GICR_IGROUPR0: one bit per SGI/PPI, 1 = Group 1.
        (0x0080 => pub igroupr0: ReadWrite<u32>),
        (0x0084 => _reserved1),
        /// GICR_ISENABLER0: writing 1 enables the SGI/PPI; reads the
        /// enables.
        (0x0100 => pub isenabler0: ReadWrite<u32>),
        (0x0104 => _reserved2),
        /// GICR_ICENABLER0: writing 1 disables the SGI/PPI.
        (0x0180 => pub icenabler0: ReadWrite<u32>),
        (0x0184 => _reserved3),
        /// GICR_ISPENDR0: writing 1 makes the SGI/PPI pending; reads the
        /// pending state.
        (0x0200 => pub ispendr0: ReadWrite<u32>),
        (0x0204 => _reserved4),
        /// GICR_ICPENDR0: writing 1 clears the SGI's/PPI's pending state.
        (0x0280 => pub icpendr0: ReadWrite<u32>),
        (0x0284 => _reserved5),
        /// GICR_ISACTIVER0: writing 1 activates the SGI/PPI.
        (0x0300 => pub isactiver0: ReadWrite<u32>),
        (0x0304 => _reserved6),
        /// GICR_ICACTIVER0: writing 1 deactivates the SGI/PPI.
        (0x0380 => pub icactiver0: ReadWrite<u32>),
        (0x0384 => _reserved7),
        /// `GICR_IPRIORITYR<n>`: one byte per SGI/PPI, byte-accessible.
        (0x0400 => pub ipriorityr: [ReadWrite<u8>; 32]),
        (0x0420 => _reserved8),
        /// GICR_ICFGR0: the SGIs' Int_config fields (read-only, edge).
        (0x0c00 => pub icfgr0: ReadWrite<u32>),
        /// GICR_ICFGR1: the PPIs' Int_config fields, two bits each, the
        /// odd one 1 for edge-triggered, 0 for level-sensitive.
        (0x0c04 => pub icfgr1: ReadWrite<u32>),
        (0x0c08 => _reserved9),
        /// GICR_IGRPMODR0: with GICR_IGROUPR0, the group of each SGI/PPI
        /// of a GIC with two Security states.
        (0x0d00 => pub igrpmodr0: ReadWrite<u32>),
        (0x0d04 => _reserved10),
        /// GICR_NSACR, Non-secure Access Control Register.
        (0x0e00 => pub nsacr: ReadWrite<u32>),
        (0x0e04 => _reserved11),
        (0x1_0000 => @END),
    }
}

register_structs! {
    /// One PE's redistributor: RD_base, then SGI_base.
    pub RedistributorFrames {
        (0x0_0000 => pub rd: RdFrame),
        (0x1_0000 => pub sgi: SgiFrame),
        (0x2_0000 => @END),
    }
}

/// Where a redistributor's SGI_base frame starts, from its RD_base.
pub const SGI_FRAME_OFFSET: u64 = core::mem::offset_of!(RedistributorFrames, sgi) as u64;
/// Size of a redistributor without virtual LPIs: RD_base and SGI_base.
pub const REDISTRIBUTOR_SIZE: u64 = size_of::<RedistributorFrames>() as u64;
/// Size of a redistributor with virtual LPIs (GICR_TYPER.VLPIS): VLPI_base
/// and a reserved frame follow SGI_base.
pub const REDISTRIBUTOR_SIZE_VLPIS: u64 = 2 * REDISTRIBUTOR_SIZE;

/// GICR_TYPER.Affinity_Value of the PE whose MPIDR_EL1 is `mpidr`:
/// Aff3.Aff2.Aff1.Aff0, 8 bits each (only MPIDR's affinity fields count).
pub fn typer_affinity(mpidr: u64) -> u32 {
    // The affinity fields of MPIDR_EL1 sit where GICD_IROUTER has them.
    let mpidr = LocalRegisterCopy::<u64, GICD_IROUTER::Register>::new(mpidr);
    let byte = |field| mpidr.read(field) as u8;
    u32::from_be_bytes([
        byte(GICD_IROUTER::Aff3),
        byte(GICD_IROUTER::Aff2),
        byte(GICD_IROUTER::Aff1),
        byte(GICD_IROUTER::Aff0),
    ])
}

/// The offset, from the start of a redistributor region of `region_size`
/// bytes, of the redistributor that serves the PE whose MPIDR_EL1 is
/// `mpidr`. The redistributors are read one after the other
/// (`typer_at(offset)` reads the GICR_TYPER of the one at `offset`),
/// `stride` bytes apart where the firmware gives one (the device tree's
/// `redistributor-stride`; zero counts as none), else
/// [`REDISTRIBUTOR_SIZE`], or [`REDISTRIBUTOR_SIZE_VLPIS`] for one with
/// GICR_TYPER.VLPIS, until the one marked Last or the end of the region.
pub fn find_redistributor(
    region_size: u64,
    stride: Option<u64>,
    mpidr: u64,
    mut typer_at: impl FnMut(u64) -> u64,
) -> Option<u64> {
    let wanted = u64::from(typer_affinity(mpidr));
    let stride = stride.filter(|&stride| stride != 0);
    let mut offset: u64 = 0;
    while offset.checked_add(REDISTRIBUTOR_SIZE)? <= region_size {
        let typer = LocalRegisterCopy::<u64, GICR_TYPER::Register>::new(typer_at(offset));
        if typer.read(GICR_TYPER::Affinity_Value) == wanted {
            return Some(offset);
        }
        if typer.is_set(GICR_TYPER::Last) {
            return None;
        }
        let size = if typer.is_set(GICR_TYPER::VLPIS) {
            REDISTRIBUTOR_SIZE_VLPIS
        } else {
            REDISTRIBUTOR_SIZE
        };
        offset = offset.checked_add(stride.unwrap_or(size))?;
    }
    None
}
