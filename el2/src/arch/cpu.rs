//! Per-CPU EL2 register set-up. Nothing is left as firmware set it: U-Boot,
//! for one, leaves HCR_EL2 = 0x20 (AMO only).

use super::regs::{CPTR_EL2, CPTR_EL2_NVHE};
use aarch64_cpu::registers::*;
use el2::bringup::percpu::PerCpu;
use platform::Mpidr;
use tock_registers::interfaces::{Readable, Writeable};

/// Programs the EL2 controls every CPU needs before it takes exceptions.
///
/// No guest runs yet, so the policy is "EL1 owns nothing": physical
/// interrupts are routed to EL2 (HCR_EL2.IMO/FMO/AMO — also what lets the
/// hypervisor take its own IRQs, Arm ARM D1.3.6 "Asynchronous exception
/// routing"), guest SMCs would trap (TSC), and FP/SIMD, SVE, trace,
/// activity monitors, the PMU and debug registers are trapped.
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
    // The PMU is the guests' (every counter, none counting at EL2) and
    // trapped until a vCPU loads its own (pmu::mdcr_fields); debug and
    // OS-lock registers are trapped from lower ELs. TDE stays clear:
    // guests take their own debug exceptions at EL1, and none is ever
    // generated at EL2 (el2::trap::debug). A vCPU that uses its debug
    // registers clears TDA while it runs (debug::load).
    MDCR_EL2.write(
        super::pmu::mdcr_fields(ID_AA64DFR0_EL1.get())
            + MDCR_EL2::TDA::SET
            + MDCR_EL2::TDOSA::SET
            + MDCR_EL2::TDRA::SET,
    );
    super::pmu::init_cpu();
    // EL1 may read the physical counter and use its physical timer.
    CNTHCTL_EL2.write(CNTHCTL_EL2::EL1PCTEN::SET + CNTHCTL_EL2::EL1PCEN::SET);
    CNTVOFF_EL2.set(0);
    super::debug::init_cpu();
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

/// What the exception vectors need per CPU, reached through TPIDR_EL2:
/// where to save a trapped guest's registers and where the hypervisor's
/// thread stack was when it entered the guest. The layout is shared with
/// the assembly in `vcpu.rs` (offsets via `offset_of!`).
#[repr(C)]
#[derive(Debug)]
pub struct CpuLocal {
    /// The running vCPU's register file while a guest runs on this CPU.
    pub guest_regs: *mut el2::vcpu::GuestRegs,
    /// SP_EL0 of the hypervisor thread that entered the guest.
    pub host_sp: u64,
    /// What the synchronous exit vector may answer itself while that
    /// guest runs (`el2::run::FastExit`, borrowed for the duration of one
    /// `enter_guest` call; null outside one).
    pub fast_exit: *const el2::run::FastExit<'static>,
    /// This CPU's portable per-CPU data.
    pub percpu: *const PerCpu,
}

/// One `CpuLocal` per possible CPU, indexed by logical CPU number.
static mut CPU_LOCALS: [CpuLocal; el2::bringup::smp::MAX_CPUS] = [const {
    CpuLocal {
        guest_regs: core::ptr::null_mut(),
        host_sp: 0,
        fast_exit: core::ptr::null(),
        percpu: core::ptr::null(),
    }
}; el2::bringup::smp::MAX_CPUS];

/// Records `cpu` as the running CPU's per-CPU data.
pub fn set_current(cpu: &'static PerCpu) {
    let index = cpu.index.min(el2::bringup::smp::MAX_CPUS - 1);
    // SAFETY: each CPU only ever touches its own slot (its logical index),
    // and only from this CPU.
    let local = unsafe { &mut (*core::ptr::addr_of_mut!(CPU_LOCALS))[index] };
    local.percpu = cpu;
    TPIDR_EL2.set(local as *mut CpuLocal as u64);
}

/// The running CPU's `CpuLocal`, once `set_current` ran on it.
pub fn local() -> Option<*mut CpuLocal> {
    let ptr = TPIDR_EL2.get() as *mut CpuLocal;
    (!ptr.is_null()).then_some(ptr)
}

/// The running CPU's per-CPU data, once `set_current` ran on it.
pub fn current() -> Option<&'static PerCpu> {
    let local = local()?;
    // SAFETY: TPIDR_EL2 is zeroed by `clear_current` at entry and then only
    // ever set by `set_current` to this CPU's slot, whose `percpu` points to
    // a `&'static PerCpu`.
    unsafe { (*local).percpu.as_ref() }
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

/// The output address of an EL1 read of guest virtual address `va`
/// through the EL1&0 stage 1 loaded now (the loaded vCPU's; an IPA, since
/// its HCR_EL2.VM is set), `None` if the translation faults: AT S1E1R
/// (Arm ARM, "Address translation instructions"). Executed at EL2, the
/// instruction reports a fault of the stage 1 walk, stage 2 faults on its
/// table accesses included, in PAR_EL1 instead of taking it. PAR_EL1 is
/// the vCPU's own register while it is loaded, so its value is put back.
pub fn translate_el1_read(va: u64) -> Option<u64> {
    let guest_par = PAR_EL1.get();
    // SAFETY: AT S1E1R writes nothing but PAR_EL1, whose guest value is
    // restored below; the ISB makes its result visible to the read. It
    // reads the guest's tables through the guest's stage 2 and cannot
    // reach memory the guest cannot.
    unsafe {
        core::arch::asm!(
            "at s1e1r, {va}",
            "isb",
            va = in(reg) va,
            options(nostack, preserves_flags),
        );
    }
    let par = PAR_EL1.extract();
    PAR_EL1.set(guest_par);
    if par.is_set(PAR_EL1::F) {
        return None;
    }
    Some(par.read(PAR_EL1::PA) << 12 | (va & 0xFFF))
}
