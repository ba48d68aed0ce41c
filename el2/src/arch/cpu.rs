//! Per-CPU EL2 register set-up. Nothing is left as firmware set it: U-Boot,
//! for one, leaves HCR_EL2 = 0x20 (AMO only).

use super::regs::{CPTR_EL2, CPTR_EL2_NVHE};
use aarch64_cpu::registers::*;
use el2::percpu::PerCpu;
use platform::Mpidr;
use tock_registers::interfaces::{Readable, Writeable};

/// Programs the EL2 controls every CPU needs before it takes exceptions.
///
/// No guest runs yet, so the policy is "EL1 owns nothing": physical
/// interrupts are routed to EL2 (HCR_EL2.IMO/FMO/AMO — also what lets the
/// hypervisor take its own IRQs, Arm ARM D1.3.6 "Asynchronous exception
/// routing"), guest SMCs would trap (TSC), and FP/SIMD, SVE, trace,
/// activity monitors and debug registers are trapped.
pub fn init_el2_registers(vectors: u64) {
    HCR_EL2.write(
        HCR_EL2::RW::EL1IsAarch64
            + HCR_EL2::IMO::EnableVirtualIRQ
            + HCR_EL2::FMO::EnableVirtualFIQ
            + HCR_EL2::AMO::SET
            + HCR_EL2::TSC::EnableTrapEl1SmcToEl2,
    );
    // The hypervisor is built soft-float and never uses FP/SIMD itself.
    CPTR_EL2.write(
        CPTR_EL2_NVHE::TCPAC::SET
            + CPTR_EL2_NVHE::TAM::SET
            + CPTR_EL2_NVHE::TTA::SET
            + CPTR_EL2_NVHE::TSM::SET
            + CPTR_EL2_NVHE::TFP::SET
            + CPTR_EL2_NVHE::TZ::SET
            + CPTR_EL2_NVHE::RES1_13::SET
            + CPTR_EL2_NVHE::RES1_9::SET
            + CPTR_EL2_NVHE::RES1_7_0.val(0xff),
    );
    // Keep the firmware's HPMN (it resets to PMCR_EL0.N, the counter count);
    // trap PMU control, debug and OS-lock registers from lower ELs.
    let hpmn = MDCR_EL2.read(MDCR_EL2::HPMN);
    MDCR_EL2.write(
        MDCR_EL2::HPMN.val(hpmn)
            + MDCR_EL2::TPMCR::SET
            + MDCR_EL2::TPM::SET
            + MDCR_EL2::TDA::SET
            + MDCR_EL2::TDOSA::SET
            + MDCR_EL2::TDRA::SET,
    );
    // EL1 may read the physical counter and use its physical timer.
    CNTHCTL_EL2.write(CNTHCTL_EL2::EL1PCTEN::SET + CNTHCTL_EL2::EL1PCEN::SET);
    CNTVOFF_EL2.set(0);
    // No stage 2 yet: a zero VTTBR/VMID.
    VTTBR_EL2.set(0);
    // Our own timer stays off until the tick is armed.
    CNTHP_CTL_EL2.write(CNTHP_CTL_EL2::ENABLE::CLEAR + CNTHP_CTL_EL2::IMASK::SET);
    // GICv3 system register interface for EL2, and let EL1 use its own
    // (virtual) system register interface without trapping ICC_SRE_EL1.
    ICC_SRE_EL2.write(ICC_SRE_EL2::SRE::SET + ICC_SRE_EL2::ENABLE::SET);
    VBAR_EL2.set(vectors);
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
}

/// This CPU's affinity, as the device tree and PSCI name it.
pub fn current_mpidr() -> Mpidr {
    Mpidr::from_raw(MPIDR_EL1.get())
}

/// Records `cpu` as the running CPU's per-CPU data.
pub fn set_current(cpu: &'static PerCpu) {
    TPIDR_EL2.set(cpu as *const PerCpu as u64);
}

/// The running CPU's per-CPU data, once `set_current` ran on it.
pub fn current() -> Option<&'static PerCpu> {
    let ptr = TPIDR_EL2.get() as *const PerCpu;
    // SAFETY: TPIDR_EL2 is zeroed by `clear_current` at entry and then only
    // ever set by `set_current` from a `&'static PerCpu`.
    unsafe { ptr.as_ref() }
}

/// Forgets whatever firmware left in TPIDR_EL2.
pub fn clear_current() {
    TPIDR_EL2.set(0);
}

/// Physical counter value (CNTPCT_EL0), ordered after earlier instructions.
pub fn counter() -> u64 {
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
    CNTPCT_EL0.get()
}

/// Counter ticks per second.
pub fn counter_frequency() -> u64 {
    CNTFRQ_EL0.get()
}
