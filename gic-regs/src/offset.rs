//! Each register's offset in its frame, for code that serves or checks the
//! frames by offset: el2's virtual GIC, which emulates them, and the tests
//! and the hostile guest, which poke them. They are taken from the frame
//! structures, so the structures and the offsets are one definition.
//!
//! Distributor offsets are from the distributor frame's base.
//! Redistributor offsets are from the frame they live in: `GICR_*`
//! registers without a trailing `0`/`1` are in the RD_base frame, the
//! SGI/PPI registers in the SGI_base frame, which starts
//! [`crate::SGI_FRAME_OFFSET`] bytes further. A register array's offset
//! is its first register's.

use core::mem::offset_of;

use crate::{DistributorFrame, PRIVATE_COUNT, RdFrame, SgiFrame};

macro_rules! offsets {
    ($frame:ty { $($(#[$doc:meta])* $name:ident = $field:ident;)* }) => {
        $(
            $(#[$doc])*
            pub const $name: u64 = offset_of!($frame, $field) as u64;
        )*
    };
}

offsets!(DistributorFrame {
    /// GICD_CTLR, Distributor Control Register.
    GICD_CTLR = ctlr;
    /// GICD_TYPER, Interrupt Controller Type Register.
    GICD_TYPER = typer;
    /// GICD_IIDR, Distributor Implementer Identification Register.
    GICD_IIDR = iidr;
    /// GICD_TYPER2, Interrupt Controller Type Register 2.
    GICD_TYPER2 = typer2;
    /// GICD_STATUSR, Error Reporting Status Register.
    GICD_STATUSR = statusr;
    /// `GICD_IGROUPR<n>`, Interrupt Group Registers.
    GICD_IGROUPR = igroupr;
    /// `GICD_ISENABLER<n>`, Interrupt Set-Enable Registers.
    GICD_ISENABLER = isenabler;
    /// `GICD_ICENABLER<n>`, Interrupt Clear-Enable Registers.
    GICD_ICENABLER = icenabler;
    /// `GICD_ISPENDR<n>`, Interrupt Set-Pending Registers.
    GICD_ISPENDR = ispendr;
    /// `GICD_ICPENDR<n>`, Interrupt Clear-Pending Registers.
    GICD_ICPENDR = icpendr;
    /// `GICD_ISACTIVER<n>`, Interrupt Set-Active Registers.
    GICD_ISACTIVER = isactiver;
    /// `GICD_ICACTIVER<n>`, Interrupt Clear-Active Registers.
    GICD_ICACTIVER = icactiver;
    /// `GICD_IPRIORITYR<n>`, Interrupt Priority Registers.
    GICD_IPRIORITYR = ipriorityr;
    /// `GICD_ITARGETSR<n>`, Interrupt Processor Targets Registers.
    GICD_ITARGETSR = itargetsr;
    /// `GICD_ICFGR<n>`, Interrupt Configuration Registers.
    GICD_ICFGR = icfgr;
    /// `GICD_IGRPMODR<n>`, Interrupt Group Modifier Registers.
    GICD_IGRPMODR = igrpmodr;
    /// `GICD_NSACR<n>`, Non-secure Access Control Registers.
    GICD_NSACR = nsacr;
    /// GICD_SGIR, Software Generated Interrupt Register.
    GICD_SGIR = sgir;
    /// `GICD_CPENDSGIR<n>`, SGI Clear-Pending Registers.
    GICD_CPENDSGIR = cpendsgir;
    /// `GICD_SPENDSGIR<n>`, SGI Set-Pending Registers.
    GICD_SPENDSGIR = spendsgir;
    /// `GICD_IROUTER<32>`, the first Interrupt Routing Register.
    GICD_IROUTER = irouter;
    /// GICD_PIDR2, Distributor Peripheral ID2 Register.
    GICD_PIDR2 = pidr2;
    /// The first identification register (PIDR4) of the distributor
    /// frame; PIDR5-7, PIDR0-3 and CIDR0-3 follow at 4-byte steps up to
    /// the end of the frame. RD_base has them at the same offsets.
    ID_REGISTERS = id_registers;
});

/// One past the last `GICD_IGRPMODR<n>`: reserved space follows.
pub const GICD_IGRPMODR_END: u64 =
    GICD_IGRPMODR + field_size(|frame: &DistributorFrame| &frame.igrpmodr);
/// One past the last `GICD_SPENDSGIR<n>`: reserved space follows.
pub const GICD_SPENDSGIR_END: u64 =
    GICD_SPENDSGIR + field_size(|frame: &DistributorFrame| &frame.spendsgir);

/// Where `GICD_IROUTER<n>` would be for n = 0: INTID `n`'s routing
/// register is at `GICD_IROUTER_BASE + 8 * n`, for SPIs only (n =
/// 32..=1019).
pub const GICD_IROUTER_BASE: u64 = GICD_IROUTER - 8 * PRIVATE_COUNT as u64;

offsets!(RdFrame {
    /// GICR_CTLR, Redistributor Control Register (RD_base).
    GICR_CTLR = ctlr;
    /// GICR_IIDR, Redistributor Implementer Identification Register
    /// (RD_base).
    GICR_IIDR = iidr;
    /// GICR_TYPER, Redistributor Type Register (RD_base, 64-bit).
    GICR_TYPER = typer;
    /// GICR_STATUSR, Error Reporting Status Register (RD_base).
    GICR_STATUSR = statusr;
    /// GICR_WAKER, Redistributor Wake Register (RD_base).
    GICR_WAKER = waker;
    /// GICR_PIDR2, Redistributor Peripheral ID2 Register (RD_base).
    GICR_PIDR2 = pidr2;
});

offsets!(SgiFrame {
    /// GICR_IGROUPR0, Interrupt Group Register 0 (SGI_base).
    GICR_IGROUPR0 = igroupr0;
    /// GICR_ISENABLER0, Interrupt Set-Enable Register 0 (SGI_base).
    GICR_ISENABLER0 = isenabler0;
    /// GICR_ICENABLER0, Interrupt Clear-Enable Register 0 (SGI_base).
    GICR_ICENABLER0 = icenabler0;
    /// GICR_ISPENDR0, Interrupt Set-Pending Register 0 (SGI_base).
    GICR_ISPENDR0 = ispendr0;
    /// GICR_ICPENDR0, Interrupt Clear-Pending Register 0 (SGI_base).
    GICR_ICPENDR0 = icpendr0;
    /// GICR_ISACTIVER0, Interrupt Set-Active Register 0 (SGI_base).
    GICR_ISACTIVER0 = isactiver0;
    /// GICR_ICACTIVER0, Interrupt Clear-Active Register 0 (SGI_base).
    GICR_ICACTIVER0 = icactiver0;
    /// `GICR_IPRIORITYR<n>`, Interrupt Priority Registers (SGI_base).
    GICR_IPRIORITYR = ipriorityr;
    /// GICR_ICFGR0, Interrupt Configuration Register 0: SGIs (SGI_base).
    GICR_ICFGR0 = icfgr0;
    /// GICR_ICFGR1, Interrupt Configuration Register 1: PPIs (SGI_base).
    GICR_ICFGR1 = icfgr1;
    /// GICR_IGRPMODR0, Interrupt Group Modifier Register 0 (SGI_base).
    GICR_IGRPMODR0 = igrpmodr0;
    /// GICR_NSACR, Non-secure Access Control Register (SGI_base).
    GICR_NSACR = nsacr;
});

/// One past the last `GICR_IPRIORITYR<n>`: reserved space follows.
pub const GICR_IPRIORITYR_END: u64 =
    GICR_IPRIORITYR + field_size(|frame: &SgiFrame| &frame.ipriorityr);

const _: () = assert!(ID_REGISTERS == offset_of!(RdFrame, id_registers) as u64);

/// The size of the field of a frame that `field` picks.
const fn field_size<F, T>(_field: fn(&F) -> &T) -> u64 {
    size_of::<T>() as u64
}
