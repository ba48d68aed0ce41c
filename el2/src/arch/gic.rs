//! The physical GICv3 (Arm IHI 0069): distributor and redistributor set-up
//! and the EL2 CPU interface, enough for the hypervisor's own interrupts.
//! The frames and fields are `gic_regs`', which the virtual GIC and the
//! guests' driver use too.
//!
//! All interrupts are non-secure group 1. Each CPU finds its redistributor
//! by matching GICR_TYPER's affinity against its MPIDR across every
//! redistributor region the platform lists, so sparse MPIDRs and several
//! regions (as on HiSilicon D05) work.

use super::regs::{ICC_BPR1_EL1, ICC_CTLR_EL1, ICC_IGRPEN1_EL1, ICC_PMR_EL1, ICC_SGI1R_EL1};
use aarch64_cpu::asm::barrier;
use core::sync::atomic::{AtomicPtr, Ordering};
use el2::bringup::smp::MAX_CPUS;
use gic_regs::{
    DistributorFrame, GICD_CTLR, GICD_TYPER, GICR_WAKER, PRIVATE_COUNT, RedistributorFrames,
    SGI_COUNT, SgiFrame,
};
use platform::{GicV3, Mpidr};
use tock_registers::interfaces::{ReadWriteable, Readable, Writeable};

/// Priority of every interrupt the hypervisor enables; PMR lets it through.
const DEFAULT_PRIORITY: u8 = 0xa0;
const PRIORITY_MASK_ALL_BUT_LOWEST: u64 = 0xf0;
/// Polls of RWP / ChildrenAsleep before giving up.
const POLL_LIMIT: u32 = 1_000_000;
/// Int_config, the odd bit of each two-bit field of `GICR_ICFGR<n>`: 1
/// edge-triggered, 0 level-sensitive ("GICR_ICFGR1, Interrupt
/// Configuration Register 1").
const INT_CONFIG_EDGE: u32 = 0b10;

/// Sets up the distributor: every SPI disabled, group 1, default priority,
/// affinity routing and group 1 enabled.
///
/// # Safety
/// `gic.distributor` must be mapped as device memory and owned by the hypervisor.
pub unsafe fn init_distributor(gic: &GicV3) -> Result<(), &'static str> {
    // SAFETY: per the caller, the distributor's registers are mapped.
    let gicd = unsafe { &*(gic.distributor.base as *const DistributorFrame) };
    gicd.ctlr.set(0);
    wait_rwp(gicd)?;
    let lines = ((gicd.typer.read(GICD_TYPER::ITLinesNumber) as usize) + 1) * 32;
    // Word 0 covers SGIs/PPIs, which live in each redistributor under affinity routing.
    let spi_words = 1..(lines / 32).min(gicd.icenabler.len());
    for word in spi_words {
        gicd.icenabler[word].set(u32::MAX);
        gicd.igroupr[word].set(u32::MAX);
    }
    let spis = PRIVATE_COUNT as usize..lines.min(gicd.ipriorityr.len());
    for priority in &gicd.ipriorityr[spis] {
        priority.set(DEFAULT_PRIORITY);
    }
    wait_rwp(gicd)?;
    // In the Non-secure view of a GIC with two Security states these are
    // ARE_NS, EnableGrp1A and EnableGrp1; with one, ARE and both groups
    // (all interrupts here are group 1). Linux writes the same bits.
    gicd.ctlr
        .write(GICD_CTLR::ARE::SET + GICD_CTLR::EnableGrp1::SET + GICD_CTLR::EnableGrp0::SET);
    wait_rwp(gicd)
}

fn wait_rwp(gicd: &DistributorFrame) -> Result<(), &'static str> {
    for _ in 0..POLL_LIMIT {
        if !gicd.ctlr.is_set(GICD_CTLR::RWP) {
            return Ok(());
        }
        core::hint::spin_loop();
    }
    Err("GICD_CTLR.RWP never cleared")
}

/// Finds `mpidr`'s redistributor.
///
/// # Safety
/// Every redistributor region of `gic` must be mapped as device memory.
unsafe fn find_redistributor(gic: &GicV3, mpidr: Mpidr) -> Option<&'static RedistributorFrames> {
    gic.redistributor_regions.iter().find_map(|region| {
        let base = region.range.base;
        let offset =
            gic_regs::find_redistributor(region.range.size, region.stride, mpidr.value(), |at| {
                // SAFETY: the scan stays inside this mapped region.
                unsafe { redistributor_at(base + at) }.rd.typer.get()
            })?;
        // SAFETY: the redistributor found is inside this mapped region.
        Some(unsafe { redistributor_at(base + offset) })
    })
}

/// The redistributor whose RD_base is at `rd_base`.
///
/// # Safety
/// `rd_base` must be a redistributor frame set inside a redistributor
/// region mapped as device memory for good.
unsafe fn redistributor_at(rd_base: u64) -> &'static RedistributorFrames {
    // SAFETY: per the caller; the frames' cells are accessed volatile only.
    unsafe { &*(rd_base as *const RedistributorFrames) }
}

/// Wakes this CPU's redistributor, makes its SGIs and PPIs group 1 with the
/// default priority (all disabled), and enables the EL2 CPU interface.
///
/// # Safety
/// As for [`find_redistributor`]; runs on the CPU whose MPIDR is `mpidr`.
pub unsafe fn init_cpu(gic: &GicV3, mpidr: Mpidr) -> Result<CpuInterface, &'static str> {
    // SAFETY: per the caller.
    let redistributor = unsafe { find_redistributor(gic, mpidr) }
        .ok_or("no redistributor has this CPU's affinity")?;
    let rd = &redistributor.rd;
    rd.waker.modify(GICR_WAKER::ProcessorSleep::CLEAR);
    let mut awake = false;
    for _ in 0..POLL_LIMIT {
        if !rd.waker.is_set(GICR_WAKER::ChildrenAsleep) {
            awake = true;
            break;
        }
        core::hint::spin_loop();
    }
    if !awake {
        return Err("redistributor did not wake (GICR_WAKER.ChildrenAsleep stuck)");
    }
    let sgi = &redistributor.sgi;
    sgi.icenabler0.set(u32::MAX);
    sgi.igroupr0.set(u32::MAX);
    for priority in &sgi.ipriorityr {
        priority.set(DEFAULT_PRIORITY);
    }
    ICC_PMR_EL1.write(ICC_PMR_EL1::Priority.val(PRIORITY_MASK_ALL_BUT_LOWEST));
    ICC_BPR1_EL1.write(ICC_BPR1_EL1::BinaryPoint.val(0));
    // Priority drop and deactivation apart: the virtual timer's PPI stays
    // active after its handler until the guest's hardware list register
    // entry, or the runner, deactivates it (`super::irq`).
    ICC_CTLR_EL1.modify(ICC_CTLR_EL1::EOImode::DropOnly);
    ICC_IGRPEN1_EL1.write(ICC_IGRPEN1_EL1::Enable::SET);
    barrier::isb(barrier::SY);
    Ok(CpuInterface { sgi })
}

/// One CPU's private interrupts.
pub struct CpuInterface {
    sgi: &'static SgiFrame,
}

/// Each CPU's SGI/PPI frame by logical CPU number, once [`remember`] ran
/// on it: for turning a private interrupt off and on while guests run.
static SGI_FRAMES: [AtomicPtr<SgiFrame>; MAX_CPUS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_CPUS];

/// Records `interface` as logical CPU `index`'s.
pub fn remember(index: usize, interface: &CpuInterface) {
    if let Some(slot) = SGI_FRAMES.get(index) {
        slot.store(
            core::ptr::from_ref(interface.sgi).cast_mut(),
            Ordering::Release,
        );
    }
}

/// Enables or disables private interrupt `intid` (16..32) on this CPU
/// (logical number `index`), if [`remember`] ran for it. A disable takes
/// effect shortly (GICR_CTLR.RWP); an interrupt signalled meanwhile is
/// taken once more, which its handler tolerates.
pub fn set_ppi_enabled(index: usize, intid: u32, enabled: bool) {
    if !(SGI_COUNT..PRIVATE_COUNT).contains(&intid) {
        return;
    }
    let Some(frame) = SGI_FRAMES.get(index).map(|f| f.load(Ordering::Acquire)) else {
        return;
    };
    // SAFETY: a non-null entry is the `&'static SgiFrame` `remember` stored
    // for this CPU, mapped as device memory for good; only this CPU
    // touches its own frame's enables after boot.
    let Some(sgi) = (unsafe { frame.as_ref() }) else {
        return;
    };
    if enabled {
        sgi.isenabler0.set(1 << intid);
    } else {
        sgi.icenabler0.set(1 << intid);
    }
}

/// Sends SGI `intid` (0..16; anything else sends nothing) to the CPU with
/// affinity `mpidr`.
pub fn send_sgi(mpidr: Mpidr, intid: u8) {
    let Some(value) = gic_regs::sgi1r_value(mpidr.value(), intid.into()) else {
        return;
    };
    // SGIs are delivered once this write and earlier memory writes are
    // observed: the target reads the state we set up before sending.
    barrier::dsb(barrier::ISHST);
    ICC_SGI1R_EL1.set(value);
    barrier::isb(barrier::SY);
}

impl CpuInterface {
    /// Enables software-generated interrupt `intid` (0..16) on this CPU.
    pub fn enable_sgi(&self, intid: u32) {
        if intid < SGI_COUNT {
            self.sgi.isenabler0.set(1 << intid);
        }
    }

    /// Enables private interrupt `intid` (16..32) as level-sensitive.
    pub fn enable_ppi_level(&self, intid: u32) {
        if !(SGI_COUNT..PRIVATE_COUNT).contains(&intid) {
            return;
        }
        let shift = (intid - SGI_COUNT) * 2;
        let cfg = self.sgi.icfgr1.get() & !(INT_CONFIG_EDGE << shift);
        self.sgi.icfgr1.set(cfg);
        self.sgi.isenabler0.set(1 << intid);
    }
}
