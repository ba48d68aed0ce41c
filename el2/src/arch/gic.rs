//! The physical GICv3 (Arm IHI 0069): distributor and redistributor set-up
//! and the EL2 CPU interface, enough for the hypervisor's own interrupts.
//!
//! All interrupts are non-secure group 1. Each CPU finds its redistributor
//! by matching GICR_TYPER's affinity against its MPIDR across every
//! redistributor region the platform lists, so sparse MPIDRs and several
//! regions (as on HiSilicon D05) work.

use super::regs::{
    ICC_BPR1, ICC_BPR1_EL1, ICC_CTLR, ICC_CTLR_EL1, ICC_IGRPEN1, ICC_IGRPEN1_EL1, ICC_PMR,
    ICC_PMR_EL1,
};
use aarch64_cpu::asm::barrier;
use platform::{GicV3, Mpidr};
use tock_registers::interfaces::{ReadWriteable, Readable, Writeable};
use tock_registers::registers::{ReadOnly, ReadWrite};
use tock_registers::{register_bitfields, register_structs};

register_bitfields! {u32,
    /// GICD_CTLR, as both security views lay it out for what we use
    /// (Linux writes the same bits in either case).
    GICD_CTLR [
        RWP OFFSET(31) NUMBITS(1) [],
        ARE OFFSET(4) NUMBITS(1) [],
        ENABLE_GRP1A OFFSET(1) NUMBITS(1) [],
        ENABLE_GRP1 OFFSET(0) NUMBITS(1) [],
    ],
    GICD_TYPER [
        /// (N + 1) * 32 interrupt IDs are supported.
        IT_LINES_NUMBER OFFSET(0) NUMBITS(5) [],
    ],
    GICR_WAKER [
        CHILDREN_ASLEEP OFFSET(2) NUMBITS(1) [],
        PROCESSOR_SLEEP OFFSET(1) NUMBITS(1) [],
    ],
}

register_bitfields! {u64,
    GICR_TYPER [
        /// Aff3.Aff2.Aff1.Aff0 of the CPU this redistributor serves.
        AFFINITY OFFSET(32) NUMBITS(32) [],
        /// The last redistributor of its region.
        LAST OFFSET(4) NUMBITS(1) [],
        /// Virtual LPIs supported: the frame set is four 64 KiB frames.
        VLPIS OFFSET(1) NUMBITS(1) [],
    ],
}

register_structs! {
    Distributor {
        (0x0000 => ctlr: ReadWrite<u32, GICD_CTLR::Register>),
        (0x0004 => typer: ReadOnly<u32, GICD_TYPER::Register>),
        (0x0008 => _reserved0),
        (0x0080 => igroupr: [ReadWrite<u32>; 32]),
        (0x0100 => _reserved1),
        (0x0180 => icenabler: [ReadWrite<u32>; 32]),
        (0x0200 => _reserved2),
        (0x0400 => ipriorityr: [ReadWrite<u32>; 256]),
        (0x0800 => @END),
    }
}

register_structs! {
    /// RD_base frame.
    RedistributorControl {
        (0x0000 => ctlr: ReadWrite<u32>),
        (0x0004 => iidr: ReadOnly<u32>),
        (0x0008 => typer: ReadOnly<u64, GICR_TYPER::Register>),
        (0x0010 => _reserved0),
        (0x0014 => waker: ReadWrite<u32, GICR_WAKER::Register>),
        (0x0018 => @END),
    }
}

register_structs! {
    /// SGI_base frame: SGIs and PPIs of one CPU.
    RedistributorSgi {
        (0x0000 => _reserved0),
        (0x0080 => igroupr0: ReadWrite<u32>),
        (0x0084 => _reserved1),
        (0x0100 => isenabler0: ReadWrite<u32>),
        (0x0104 => _reserved2),
        (0x0180 => icenabler0: ReadWrite<u32>),
        (0x0184 => _reserved3),
        (0x0400 => ipriorityr: [ReadWrite<u32>; 8]),
        (0x0420 => _reserved4),
        (0x0c00 => icfgr0: ReadWrite<u32>),
        (0x0c04 => icfgr1: ReadWrite<u32>),
        (0x0c08 => @END),
    }
}

/// Offset of the SGI_base frame from RD_base.
const SGI_FRAME_OFFSET: u64 = 0x1_0000;
/// Redistributor frame-set sizes without and with virtual LPI frames.
const FRAMES_V3: u64 = 0x2_0000;
const FRAMES_V4: u64 = 0x4_0000;
/// Priority of every interrupt the hypervisor enables; PMR lets it through.
const DEFAULT_PRIORITY: u32 = 0xa0;
const PRIORITY_MASK_ALL_BUT_LOWEST: u64 = 0xf0;
/// Polls of RWP / ChildrenAsleep before giving up.
const POLL_LIMIT: u32 = 1_000_000;

fn priority_word() -> u32 {
    u32::from_ne_bytes([DEFAULT_PRIORITY as u8; 4])
}

/// Sets up the distributor: every SPI disabled, group 1, default priority,
/// affinity routing and group 1 enabled.
///
/// # Safety
/// `gic.distributor` must be mapped as device memory and owned by the hypervisor.
pub unsafe fn init_distributor(gic: &GicV3) -> Result<(), &'static str> {
    // SAFETY: per the caller, the distributor's registers are mapped.
    let gicd = unsafe { &*(gic.distributor.base as *const Distributor) };
    gicd.ctlr.set(0);
    wait_rwp(gicd)?;
    let lines = ((gicd.typer.read(GICD_TYPER::IT_LINES_NUMBER) as usize) + 1) * 32;
    // Word 0 covers SGIs/PPIs, which live in each redistributor under affinity routing.
    for word in 1..(lines / 32).min(32) {
        gicd.icenabler[word].set(u32::MAX);
        gicd.igroupr[word].set(u32::MAX);
    }
    for word in 8..(lines / 4).min(256) {
        gicd.ipriorityr[word].set(priority_word());
    }
    wait_rwp(gicd)?;
    gicd.ctlr
        .write(GICD_CTLR::ARE::SET + GICD_CTLR::ENABLE_GRP1A::SET + GICD_CTLR::ENABLE_GRP1::SET);
    wait_rwp(gicd)
}

fn wait_rwp(gicd: &Distributor) -> Result<(), &'static str> {
    for _ in 0..POLL_LIMIT {
        if !gicd.ctlr.is_set(GICD_CTLR::RWP) {
            return Ok(());
        }
        core::hint::spin_loop();
    }
    Err("GICD_CTLR.RWP never cleared")
}

/// Packs an MPIDR's affinity the way GICR_TYPER reports it.
fn typer_affinity(mpidr: Mpidr) -> u64 {
    u64::from_be_bytes([
        0,
        0,
        0,
        0,
        mpidr.aff(3),
        mpidr.aff(2),
        mpidr.aff(1),
        mpidr.aff(0),
    ])
}

/// Finds the RD_base of `mpidr`'s redistributor.
///
/// # Safety
/// Every redistributor region of `gic` must be mapped as device memory.
unsafe fn find_redistributor(gic: &GicV3, mpidr: Mpidr) -> Option<u64> {
    let wanted = typer_affinity(mpidr);
    for region in &gic.redistributor_regions {
        let mut frame = region.range.base;
        while frame + FRAMES_V3 <= region.range.end() {
            // SAFETY: `frame` lies inside a mapped redistributor region.
            let rd = unsafe { &*(frame as *const RedistributorControl) };
            let typer = rd.typer.extract();
            if typer.read(GICR_TYPER::AFFINITY) == wanted {
                return Some(frame);
            }
            if typer.is_set(GICR_TYPER::LAST) {
                break;
            }
            frame += region.stride.unwrap_or(if typer.is_set(GICR_TYPER::VLPIS) {
                FRAMES_V4
            } else {
                FRAMES_V3
            });
        }
    }
    None
}

/// Wakes this CPU's redistributor, makes its SGIs and PPIs group 1 with the
/// default priority (all disabled), and enables the EL2 CPU interface.
///
/// # Safety
/// As for [`find_redistributor`]; runs on the CPU whose MPIDR is `mpidr`.
pub unsafe fn init_cpu(gic: &GicV3, mpidr: Mpidr) -> Result<CpuInterface, &'static str> {
    // SAFETY: per the caller.
    let rd_base = unsafe { find_redistributor(gic, mpidr) }
        .ok_or("no redistributor has this CPU's affinity")?;
    // SAFETY: rd_base is a redistributor frame set inside a mapped region.
    let rd = unsafe { &*(rd_base as *const RedistributorControl) };
    rd.waker.modify(GICR_WAKER::PROCESSOR_SLEEP::CLEAR);
    let mut awake = false;
    for _ in 0..POLL_LIMIT {
        if !rd.waker.is_set(GICR_WAKER::CHILDREN_ASLEEP) {
            awake = true;
            break;
        }
        core::hint::spin_loop();
    }
    if !awake {
        return Err("redistributor did not wake (GICR_WAKER.ChildrenAsleep stuck)");
    }
    // SAFETY: the SGI frame follows RD_base in the same frame set.
    let sgi = unsafe { &*((rd_base + SGI_FRAME_OFFSET) as *const RedistributorSgi) };
    sgi.icenabler0.set(u32::MAX);
    sgi.igroupr0.set(u32::MAX);
    for word in &sgi.ipriorityr {
        word.set(priority_word());
    }
    ICC_PMR_EL1.write(ICC_PMR::PRIORITY.val(PRIORITY_MASK_ALL_BUT_LOWEST));
    ICC_BPR1_EL1.write(ICC_BPR1::BINARY_POINT.val(0));
    ICC_CTLR_EL1.modify(ICC_CTLR::EOIMODE::CLEAR);
    ICC_IGRPEN1_EL1.write(ICC_IGRPEN1::ENABLE::SET);
    barrier::isb(barrier::SY);
    Ok(CpuInterface { sgi })
}

/// One CPU's private interrupts.
pub struct CpuInterface {
    sgi: &'static RedistributorSgi,
}

/// Sends SGI `intid` (0..16) to the CPU with affinity `mpidr`.
pub fn send_sgi(mpidr: Mpidr, intid: u8) {
    use super::regs::{ICC_SGI1R, ICC_SGI1R_EL1};
    let aff0 = mpidr.aff(0);
    // SGIs are delivered once this write and earlier memory writes are
    // observed: the target reads the state we set up before sending.
    barrier::dsb(barrier::ISHST);
    ICC_SGI1R_EL1.write(
        ICC_SGI1R::AFF3.val(u64::from(mpidr.aff(3)))
            + ICC_SGI1R::AFF2.val(u64::from(mpidr.aff(2)))
            + ICC_SGI1R::AFF1.val(u64::from(mpidr.aff(1)))
            + ICC_SGI1R::RS.val(u64::from(aff0 / 16))
            + ICC_SGI1R::TARGET_LIST.val(1 << (aff0 % 16))
            + ICC_SGI1R::INTID.val(u64::from(intid & 0xf)),
    );
    barrier::isb(barrier::SY);
}

impl CpuInterface {
    /// Enables software-generated interrupt `intid` (0..16) on this CPU.
    pub fn enable_sgi(&self, intid: u32) {
        if intid < 16 {
            self.sgi.isenabler0.set(1 << intid);
        }
    }

    /// Enables private interrupt `intid` (16..32) as level-sensitive.
    pub fn enable_ppi_level(&self, intid: u32) {
        if !(16..32).contains(&intid) {
            return;
        }
        let shift = (intid - 16) * 2;
        // Int_config bit 1 of each 2-bit field: 0 = level-sensitive.
        let cfg = self.sgi.icfgr1.get() & !(0b10 << shift);
        self.sgi.icfgr1.set(cfg);
        self.sgi.isenabler0.set(1 << intid);
    }
}
