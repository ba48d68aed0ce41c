//! Register offsets, fields and identification values of the virtual
//! GICv3 (Arm IHI 0069, "The GIC Distributor register map" and "The GIC
//! Redistributor register map").
//!
//! Distributor offsets are from the distributor frame's base. Redistributor
//! offsets are from the frame they live in: `GICR_*` registers without a
//! trailing `0`/`1` are in the RD_base frame (the first 64 KiB of a vCPU's
//! redistributor), the SGI/PPI registers are in the SGI_base frame, which
//! starts [`GICR_SGI_BASE`] bytes further.

/// Size of the distributor frame.
pub const GICD_FRAME_SIZE: u64 = 0x1_0000;

/// Distributor Control Register.
pub const GICD_CTLR: u64 = 0x0000;
/// Interrupt Controller Type Register (read-only).
pub const GICD_TYPER: u64 = 0x0004;
/// Distributor Implementer Identification Register (read-only).
pub const GICD_IIDR: u64 = 0x0008;
/// Interrupt Controller Type Register 2 (read-only; GICv4.1 fields, all zero here).
pub const GICD_TYPER2: u64 = 0x000c;
/// Error Reporting Status Register (optional; RAZ/WI here).
pub const GICD_STATUSR: u64 = 0x0010;
/// Interrupt Group Registers, one bit per INTID.
pub const GICD_IGROUPR: u64 = 0x0080;
/// Interrupt Set-Enable Registers.
pub const GICD_ISENABLER: u64 = 0x0100;
/// Interrupt Clear-Enable Registers.
pub const GICD_ICENABLER: u64 = 0x0180;
/// Interrupt Set-Pending Registers.
pub const GICD_ISPENDR: u64 = 0x0200;
/// Interrupt Clear-Pending Registers.
pub const GICD_ICPENDR: u64 = 0x0280;
/// Interrupt Set-Active Registers.
pub const GICD_ISACTIVER: u64 = 0x0300;
/// Interrupt Clear-Active Registers.
pub const GICD_ICACTIVER: u64 = 0x0380;
/// Interrupt Priority Registers, one byte per INTID.
pub const GICD_IPRIORITYR: u64 = 0x0400;
/// Interrupt Processor Targets Registers, one byte per INTID: RAZ/WI with
/// affinity routing.
pub const GICD_ITARGETSR: u64 = 0x0800;
/// Interrupt Configuration Registers, two bits per INTID.
pub const GICD_ICFGR: u64 = 0x0c00;
/// Interrupt Group Modifier Registers: RAZ/WI with a single Security state.
pub const GICD_IGRPMODR: u64 = 0x0d00;
/// Non-secure Access Control Registers: RAZ/WI with a single Security state.
pub const GICD_NSACR: u64 = 0x0e00;
/// Software Generated Interrupt Register (the GICv2-style SGI register):
/// ignored, SGIs are generated through ICC_SGI1R_EL1 with affinity routing.
pub const GICD_SGIR: u64 = 0x0f00;
/// SGI Clear-Pending Registers: RAZ/WI with affinity routing.
pub const GICD_CPENDSGIR: u64 = 0x0f10;
/// SGI Set-Pending Registers: RAZ/WI with affinity routing.
pub const GICD_SPENDSGIR: u64 = 0x0f20;
/// Base of the Interrupt Routing Registers: INTID `n`'s 64-bit
/// `GICD_IROUTER<n>` is at `GICD_IROUTER_BASE + 8 * n`, for SPIs only
/// (n = 32..=1019), so the first one is [`GICD_IROUTER`].
pub const GICD_IROUTER_BASE: u64 = 0x6000;
/// GICD_IROUTER<32>, the first Interrupt Routing Register.
pub const GICD_IROUTER: u64 = 0x6100;
/// Peripheral ID2 Register, whose ArchRev field names the GIC version.
pub const GICD_PIDR2: u64 = 0xffe8;

/// Size of one vCPU's redistributor: the RD_base and SGI_base frames,
/// 64 KiB each, without the GICv4 VLPI frames.
pub const GICR_FRAME_SIZE: u64 = 0x2_0000;
/// Offset of the SGI_base frame in a vCPU's redistributor.
pub const GICR_SGI_BASE: u64 = 0x1_0000;

/// Redistributor Control Register (RD_base).
pub const GICR_CTLR: u64 = 0x0000;
/// Redistributor Implementer Identification Register (RD_base, read-only).
pub const GICR_IIDR: u64 = 0x0004;
/// Redistributor Type Register (RD_base, 64-bit, read-only).
pub const GICR_TYPER: u64 = 0x0008;
/// Error Reporting Status Register (RD_base, optional; RAZ/WI here).
pub const GICR_STATUSR: u64 = 0x0010;
/// Redistributor Wake Register (RD_base).
pub const GICR_WAKER: u64 = 0x0014;
/// Peripheral ID2 Register (RD_base).
pub const GICR_PIDR2: u64 = 0xffe8;

/// Interrupt Group Register 0: SGIs and PPIs (SGI_base).
pub const GICR_IGROUPR0: u64 = 0x0080;
/// Interrupt Set-Enable Register 0 (SGI_base).
pub const GICR_ISENABLER0: u64 = 0x0100;
/// Interrupt Clear-Enable Register 0 (SGI_base).
pub const GICR_ICENABLER0: u64 = 0x0180;
/// Interrupt Set-Pending Register 0 (SGI_base).
pub const GICR_ISPENDR0: u64 = 0x0200;
/// Interrupt Clear-Pending Register 0 (SGI_base).
pub const GICR_ICPENDR0: u64 = 0x0280;
/// Interrupt Set-Active Register 0 (SGI_base).
pub const GICR_ISACTIVER0: u64 = 0x0300;
/// Interrupt Clear-Active Register 0 (SGI_base).
pub const GICR_ICACTIVER0: u64 = 0x0380;
/// Interrupt Priority Registers 0..=7, one byte per SGI/PPI: 0x0400..=0x041f
/// (SGI_base).
pub const GICR_IPRIORITYR: u64 = 0x0400;
/// Interrupt Configuration Register 0: SGIs, read-only edge (SGI_base).
pub const GICR_ICFGR0: u64 = 0x0c00;
/// Interrupt Configuration Register 1: PPIs (SGI_base).
pub const GICR_ICFGR1: u64 = 0x0c04;
/// Interrupt Group Modifier Register 0: RAZ/WI with a single Security
/// state (SGI_base).
pub const GICR_IGRPMODR0: u64 = 0x0d00;
/// Non-secure Access Control Register: RAZ/WI with a single Security
/// state (SGI_base).
pub const GICR_NSACR: u64 = 0x0e00;

/// First of the identification registers (PIDR4) in both the distributor
/// frame and RD_base; PIDR5-7, PIDR0-3 and CIDR0-3 follow at 4-byte steps
/// up to 0xfffc.
pub const ID_REGISTERS: u64 = 0xffd0;

/// GICD_CTLR.EnableGrp0 (single Security state view): forward Group 0
/// interrupts.
pub const GICD_CTLR_ENABLE_GRP0: u32 = 1 << 0;
/// GICD_CTLR.EnableGrp1: forward Group 1 interrupts. The same bit, in the
/// same place, as EnableGrp1NS of a two-Security-state GIC (EnableGrp1A in
/// its Non-secure view).
pub const GICD_CTLR_ENABLE_GRP1: u32 = 1 << 1;
/// GICD_CTLR.ARE: affinity routing enabled; RAO/WI. The same bit as ARE_NS
/// of a two-Security-state GIC.
pub const GICD_CTLR_ARE: u32 = 1 << 4;
/// GICD_CTLR.DS: security disabled, i.e. a single Security state; RAO/WI.
pub const GICD_CTLR_DS: u32 = 1 << 6;
/// GICD_CTLR.RWP: register write pending; always 0, writes take effect at once.
pub const GICD_CTLR_RWP: u32 = 1 << 31;

/// GICD_TYPER.ITLinesNumber, bits 4:0: the distributor implements INTIDs
/// up to `32 * (ITLinesNumber + 1) - 1`.
pub const GICD_TYPER_ITLINES_MASK: u32 = 0x1f;
/// GICD_TYPER.SecurityExtn: two Security states (0 here).
pub const GICD_TYPER_SECURITY_EXTN: u32 = 1 << 10;
/// GICD_TYPER.MBIS: message-based SPIs (0 here).
pub const GICD_TYPER_MBIS: u32 = 1 << 16;
/// GICD_TYPER.LPIS: LPIs (0 here).
pub const GICD_TYPER_LPIS: u32 = 1 << 17;
/// Shift of GICD_TYPER.IDbits, bits 23:19: INTID bits minus one.
pub const GICD_TYPER_IDBITS_SHIFT: u32 = 19;
/// GICD_TYPER.A3V: non-zero Aff3 supported in routing and SGIs (1 here).
pub const GICD_TYPER_A3V: u32 = 1 << 24;
/// GICD_TYPER.No1N: 1-of-N SPI routing is NOT supported (0 here: it is).
pub const GICD_TYPER_NO1N: u32 = 1 << 25;
/// GICD_TYPER.RSS: SGI targets with Aff0 above 15 (0 here).
pub const GICD_TYPER_RSS: u32 = 1 << 26;

/// `GICD_IROUTER<n>`.IRM: 1-of-N routing, to any one participating PE.
pub const IROUTER_IRM: u64 = 1 << 31;
/// The writable bits of `GICD_IROUTER<n>`: Aff3 (39:32), IRM (31) and
/// Aff2.Aff1.Aff0 (23:0); the rest is RES0.
pub const IROUTER_MASK: u64 = 0xff_80ff_ffff;
/// The affinity bits of `GICD_IROUTER<n>`, which sit where MPIDR_EL1 has them.
pub const AFFINITY_MASK: u64 = 0xff_00ff_ffff;

/// GICR_TYPER.Last: the last redistributor of the region.
pub const GICR_TYPER_LAST: u64 = 1 << 4;
/// Shift of GICR_TYPER.Processor_Number, bits 23:8.
pub const GICR_TYPER_PROCESSOR_NUMBER_SHIFT: u32 = 8;
/// Shift of GICR_TYPER.Affinity_Value, bits 63:32 (Aff3.Aff2.Aff1.Aff0).
pub const GICR_TYPER_AFFINITY_SHIFT: u32 = 32;

/// GICR_WAKER.ProcessorSleep: the PE is (about to be) powered down.
pub const GICR_WAKER_PROCESSOR_SLEEP: u32 = 1 << 1;
/// GICR_WAKER.ChildrenAsleep: the redistributor's interface to the PE is
/// quiescent (read-only).
pub const GICR_WAKER_CHILDREN_ASLEEP: u32 = 1 << 2;

/// ICC_SGI1R_EL1.TargetList, bits 15:0: Aff0 values (within the range RS
/// selects) of the targets in cluster Aff3.Aff2.Aff1.
pub const SGI1R_TARGET_LIST_MASK: u64 = 0xffff;
/// Shift of ICC_SGI1R_EL1.Aff1, bits 23:16.
pub const SGI1R_AFF1_SHIFT: u32 = 16;
/// Shift of ICC_SGI1R_EL1.INTID, bits 27:24.
pub const SGI1R_INTID_SHIFT: u32 = 24;
/// Shift of ICC_SGI1R_EL1.Aff2, bits 39:32.
pub const SGI1R_AFF2_SHIFT: u32 = 32;
/// ICC_SGI1R_EL1.IRM: send to every PE but the sender; targets are ignored.
pub const SGI1R_IRM: u64 = 1 << 40;
/// Shift of ICC_SGI1R_EL1.RS, bits 47:44: TargetList bit `i` names
/// Aff0 = RS * 16 + i.
pub const SGI1R_RS_SHIFT: u32 = 44;
/// Shift of ICC_SGI1R_EL1.Aff3, bits 55:48.
pub const SGI1R_AFF3_SHIFT: u32 = 48;

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

/// Shift of PIDR2.ArchRev, bits 7:4.
pub const PIDR2_ARCHREV_SHIFT: u32 = 4;

/// `ICH_LR<n>_EL2`.vINTID, bits 31:0.
pub const ICH_LR_VINTID_MASK: u64 = 0xffff_ffff;
/// Shift of `ICH_LR<n>_EL2`.pINTID, bits 44:32 (when HW is 1).
pub const ICH_LR_PINTID_SHIFT: u32 = 32;
/// `ICH_LR<n>_EL2`.pINTID, unshifted width (13 bits).
pub const ICH_LR_PINTID_MASK: u64 = 0x1fff;
/// `ICH_LR<n>_EL2`.EOI, bit 41 (when HW is 0): a maintenance interrupt when
/// the guest deactivates the interrupt.
pub const ICH_LR_EOI: u64 = 1 << 41;
/// Shift of `ICH_LR<n>_EL2`.Priority, bits 55:48.
pub const ICH_LR_PRIORITY_SHIFT: u32 = 48;
/// `ICH_LR<n>_EL2`.Group, bit 60: Group 1.
pub const ICH_LR_GROUP: u64 = 1 << 60;
/// `ICH_LR<n>_EL2`.HW, bit 61: deactivation also deactivates pINTID.
pub const ICH_LR_HW: u64 = 1 << 61;
/// Shift of `ICH_LR<n>_EL2`.State, bits 63:62.
pub const ICH_LR_STATE_SHIFT: u32 = 62;
