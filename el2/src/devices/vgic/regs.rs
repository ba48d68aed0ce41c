//! The register map the virtual GICv3 emulates (Arm IHI 0069, "The GIC
//! Distributor register map" and "The GIC Redistributor register map"),
//! and the identification values it reports.
//!
//! The offsets and fields are `gic_regs`', the one GICv3 register map of
//! the workspace, which el2's physical driver and the guests' driver map
//! onto real frames; they are re-exported here so that the model and its
//! tests find them in one place. Distributor offsets are from the
//! distributor frame's base. Redistributor offsets are from the frame they
//! live in: `GICR_*` registers without a trailing `0`/`1` are in the
//! RD_base frame (the first 64 KiB of a vCPU's redistributor), the SGI/PPI
//! registers are in the SGI_base frame, which starts [`SGI_FRAME_OFFSET`]
//! bytes further. A vCPU's redistributor is [`REDISTRIBUTOR_SIZE`] bytes:
//! no VLPI frames.

pub use gic_regs::icc::ICC_SGI1R_EL1;
pub use gic_regs::offset::*;
pub use gic_regs::{
    DISTRIBUTOR_SIZE, GICD_CTLR, GICD_IROUTER, GICD_TYPER, GICR_TYPER, GICR_WAKER, PIDR2,
    REDISTRIBUTOR_SIZE, SGI_FRAME_OFFSET,
};

/// GICD_IIDR and GICR_IIDR: Implementer 0x43b (JEP106 continuation 4,
/// identity 0x3b: Arm, which owns the architecture, as QEMU's and KVM's
/// emulated GICs also report), Revision 0, Variant 0, ProductID 0x45
/// ('E', for this hypervisor's emulation; QEMU reports 0, KVM 0x4b 'K').
/// No Linux erratum workaround matches it, so a guest applies none.
pub const IIDR: u32 = 0x4500_043b;

/// PIDR4..PIDR7, PIDR0..PIDR3, CIDR0..CIDR3, from [`ID_REGISTERS`] up:
/// JEP106 Arm (PIDR1.DES_0 = 0xb, PIDR2.DES_1 = 0b011 with PIDR2.JEDEC,
/// PIDR4.DES_2 = continuation 4), part number 0, PIDR2.ArchRev = 3
/// (GICv3), and the CoreSight component ID 0xb105f00d. Only ArchRev is
/// architected (Linux checks it, in the distributor and in every
/// redistributor frame); the rest is IMPLEMENTATION DEFINED.
pub const ID_VALUES: [u32; 12] = [
    0x04, 0x00, 0x00, 0x00, // PIDR4-7
    0x00, 0xb0, 0x3b, 0x00, // PIDR0-3
    0x0d, 0xf0, 0x05, 0xb1, // CIDR0-3
];
