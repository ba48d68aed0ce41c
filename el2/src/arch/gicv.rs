//! The GICv3 virtual CPU interface (Arm IHI 0069, "Virtual interrupt
//! handling and prioritization" and the ICH_* register descriptions): the
//! list registers the portable model (`el2::devices::vgic`) fills, and the per-vCPU
//! interface state (ICH_VMCR_EL2, the active-priority registers) that
//! moves with a vCPU between pCPUs.
//!
//! The guest talks to its virtual CPU interface through the ICC_* names
//! (ICV_* in hardware, because HCR_EL2.IMO/FMO are set); only the SGI
//! generation registers trap.

use aarch64_cpu::registers::*;
use core::sync::atomic::{AtomicUsize, Ordering};
use el2::devices::vgic::MAX_LIST_REGISTERS;
use tock_registers::interfaces::{Readable, Writeable};

/// How many list registers this machine's CPUs have (ICH_VTR_EL2.ListRegs
/// + 1; every CPU of a system has the same GIC CPU interface).
static LIST_REGISTERS: AtomicUsize = AtomicUsize::new(0);
/// How many of ICH_AP0R<n>_EL2 / ICH_AP1R<n>_EL2 exist: one per 32
/// preemption levels (ICH_VTR_EL2.PREbits + 1 bits: 5 -> 1, 6 -> 2,
/// 7 -> 4; Arm IHI 0069, "ICH_AP1R<n>_EL2").
static ACTIVE_PRIORITY_REGISTERS: AtomicUsize = AtomicUsize::new(1);

/// Reads this CPU's virtual interface configuration and leaves it
/// disabled with empty list registers. Once per pCPU, before it runs
/// guests.
pub fn init_pcpu() {
    let vtr = ICH_VTR_EL2.extract();
    let lrs = (vtr.read(ICH_VTR_EL2::ListRegs) as usize + 1).min(MAX_LIST_REGISTERS);
    LIST_REGISTERS.store(lrs, Ordering::Relaxed);
    let preemption_bits = vtr.read(ICH_VTR_EL2::PREbits) as u32 + 1;
    let aprs = 1usize << preemption_bits.clamp(5, 7).saturating_sub(5);
    ACTIVE_PRIORITY_REGISTERS.store(aprs, Ordering::Relaxed);
    ICH_HCR_EL2.set(0);
    for index in 0..lrs {
        write_lr(index, 0);
    }
}

/// The number of list registers.
pub fn list_registers() -> usize {
    LIST_REGISTERS.load(Ordering::Relaxed)
}

/// Writes `ICH_LR<index>_EL2` (ignored beyond the implemented ones).
pub fn write_lr(index: usize, value: u64) {
    match index {
        0 => ICH_LR0_EL2.set(value),
        1 => ICH_LR1_EL2.set(value),
        2 => ICH_LR2_EL2.set(value),
        3 => ICH_LR3_EL2.set(value),
        4 => ICH_LR4_EL2.set(value),
        5 => ICH_LR5_EL2.set(value),
        6 => ICH_LR6_EL2.set(value),
        7 => ICH_LR7_EL2.set(value),
        8 => ICH_LR8_EL2.set(value),
        9 => ICH_LR9_EL2.set(value),
        10 => ICH_LR10_EL2.set(value),
        11 => ICH_LR11_EL2.set(value),
        12 => ICH_LR12_EL2.set(value),
        13 => ICH_LR13_EL2.set(value),
        14 => ICH_LR14_EL2.set(value),
        15 => ICH_LR15_EL2.set(value),
        _ => {}
    }
}

/// Reads `ICH_LR<index>_EL2` (0 beyond the implemented ones).
pub fn read_lr(index: usize) -> u64 {
    match index {
        0 => ICH_LR0_EL2.get(),
        1 => ICH_LR1_EL2.get(),
        2 => ICH_LR2_EL2.get(),
        3 => ICH_LR3_EL2.get(),
        4 => ICH_LR4_EL2.get(),
        5 => ICH_LR5_EL2.get(),
        6 => ICH_LR6_EL2.get(),
        7 => ICH_LR7_EL2.get(),
        8 => ICH_LR8_EL2.get(),
        9 => ICH_LR9_EL2.get(),
        10 => ICH_LR10_EL2.get(),
        11 => ICH_LR11_EL2.get(),
        12 => ICH_LR12_EL2.get(),
        13 => ICH_LR13_EL2.get(),
        14 => ICH_LR14_EL2.get(),
        15 => ICH_LR15_EL2.get(),
        _ => 0,
    }
}

/// A vCPU's virtual CPU interface registers while it is off the CPU
/// (which list registers it uses is the runner's: `el2::run`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuInterfaceState {
    /// ICH_VMCR_EL2: the guest's priority mask, binary points, group
    /// enables and EOI mode. Zero at reset: everything masked until the
    /// guest's GIC driver sets it up.
    pub vmcr: u64,
    /// ICH_AP0R<n>_EL2 and ICH_AP1R<n>_EL2: the priorities of the
    /// interrupts the guest has acknowledged and not yet completed.
    pub ap0r: [u64; 4],
    pub ap1r: [u64; 4],
}

impl CpuInterfaceState {
    /// Loads the interface state and enables the virtual interface with
    /// no underflow request; the runner writes the list registers.
    pub fn restore(&self) {
        ICH_VMCR_EL2.set(self.vmcr);
        let aprs = ACTIVE_PRIORITY_REGISTERS.load(Ordering::Relaxed);
        write_aprs(aprs, &self.ap0r, &self.ap1r);
        set_control(false);
    }

    /// Saves the interface state and disables the virtual interface, so
    /// nothing of this vCPU is signalled on this pCPU while it runs
    /// another. The runner has read back and emptied the list registers.
    pub fn save(&mut self) {
        self.vmcr = ICH_VMCR_EL2.get();
        let aprs = ACTIVE_PRIORITY_REGISTERS.load(Ordering::Relaxed);
        read_aprs(aprs, &mut self.ap0r, &mut self.ap1r);
        ICH_HCR_EL2.set(0);
    }
}

/// The loaded vCPU's ICH_VMCR_EL2, and whether an active priority bit is
/// set (an interrupt acknowledged and not yet completed).
pub fn live_interface() -> (u64, bool) {
    let (mut ap0r, mut ap1r) = ([0; 4], [0; 4]);
    read_aprs(
        ACTIVE_PRIORITY_REGISTERS.load(Ordering::Relaxed),
        &mut ap0r,
        &mut ap1r,
    );
    let active = ap0r.iter().chain(&ap1r).any(|&bits| bits != 0);
    (ICH_VMCR_EL2.get(), active)
}

/// ICH_HCR_EL2: the virtual CPU interface on, with the underflow
/// maintenance interrupt when asked for. (EOI maintenance interrupts need
/// no enable: an EOI list register entry raises one when ICH_HCR_EL2.En is
/// set.)
pub fn set_control(underflow: bool) {
    let mut hcr = ICH_HCR_EL2::En::SET.value;
    if underflow {
        hcr |= ICH_HCR_EL2::UIE::SET.value;
    }
    ICH_HCR_EL2.set(hcr);
}

fn write_aprs(count: usize, ap0r: &[u64; 4], ap1r: &[u64; 4]) {
    ICH_AP0R0_EL2.set(ap0r[0]);
    ICH_AP1R0_EL2.set(ap1r[0]);
    if count >= 2 {
        ICH_AP0R1_EL2.set(ap0r[1]);
        ICH_AP1R1_EL2.set(ap1r[1]);
    }
    if count >= 4 {
        ICH_AP0R2_EL2.set(ap0r[2]);
        ICH_AP1R2_EL2.set(ap1r[2]);
        ICH_AP0R3_EL2.set(ap0r[3]);
        ICH_AP1R3_EL2.set(ap1r[3]);
    }
}

fn read_aprs(count: usize, ap0r: &mut [u64; 4], ap1r: &mut [u64; 4]) {
    ap0r[0] = ICH_AP0R0_EL2.get();
    ap1r[0] = ICH_AP1R0_EL2.get();
    if count >= 2 {
        ap0r[1] = ICH_AP0R1_EL2.get();
        ap1r[1] = ICH_AP1R1_EL2.get();
    }
    if count >= 4 {
        ap0r[2] = ICH_AP0R2_EL2.get();
        ap1r[2] = ICH_AP1R2_EL2.get();
        ap0r[3] = ICH_AP0R3_EL2.get();
        ap1r[3] = ICH_AP1R3_EL2.get();
    }
}
