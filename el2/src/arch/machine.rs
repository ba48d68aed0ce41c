//! The hardware under the runner: [`Hardware`] implements
//! `el2::run::Machine` with this CPU's registers — guest entry and the
//! syndrome registers, the EL1 context, lazy FP/SIMD, a vCPU's debug
//! and PMU registers, the GIC virtual interface, the
//! EL2 timer, SGIs, and the stores into guest memory. It decides nothing.

use super::regs;
use super::stage2::Stage2Tables;
use super::vcpu::{self, SavedRegisters, VcpuContext};
use super::{cache, cpu, debug, gic, gicv, heap, irq, mmu, pmu, timer};
use crate::println;
use aarch64_cpu::registers::*;
use alloc::string::String;
use alloc::vec::Vec;
use el2::memory::layout::MapKind;
use el2::run::machine::Refusal;
use el2::run::{FastExit, Machine, Taken, VmRegisters};
use el2::trap::debug::{DebugFeatures, DebugRegisters};
use el2::trap::fault::Injection;
use el2::trap::pmu::{PmuFeatures, PmuRegisters};
use platform::{MemRange, Mpidr};
use spin::Once;
use tock_registers::interfaces::{Readable, Writeable};

/// The pCPUs running the run loop (logical index -> MPIDR), for IPIs.
pub(super) static PCPU_MPIDRS: Once<Vec<Mpidr>> = Once::new();

/// This CPU, as the runner's machine.
pub struct Hardware;

impl Machine for Hardware {
    type Saved = SavedRegisters;
    type Stage2 = Stage2Tables;
    type Txn = heap::Txn;

    fn counter(&self) -> u64 {
        cpu::counter()
    }

    fn counter_frequency(&self) -> u64 {
        cpu::counter_frequency()
    }

    fn load_vcpu(&mut self, vm: VmRegisters, hcr: u64, ctx: &mut VcpuContext) {
        HCR_EL2.set(hcr);
        VTTBR_EL2.set(vm.vttbr);
        CNTVOFF_EL2.set(vm.cntvoff);
        aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
        vcpu::load(ctx);
    }

    #[inline(always)]
    fn save_vcpu(&mut self, ctx: &mut VcpuContext) {
        vcpu::save(ctx);
    }

    fn load_fp(&mut self, ctx: &mut VcpuContext) {
        vcpu::load_fp(ctx);
    }

    fn load_debug(&mut self, registers: &DebugRegisters, features: DebugFeatures) {
        debug::load(registers, features);
    }

    fn save_debug(&mut self, registers: &mut DebugRegisters, features: DebugFeatures) {
        debug::save(registers, features);
    }

    fn pmu_counters(&self) -> usize {
        pmu::counters()
    }

    fn load_pmu(&mut self, registers: &PmuRegisters, features: PmuFeatures) {
        // Enabled whatever happened to it meanwhile (a stale overflow of
        // the vCPU put last, taken while this pCPU idled, disabled it):
        // an overflow of this vCPU must reach it.
        irq::enable_pmu_interrupt();
        pmu::load(registers, features);
    }

    fn save_pmu(&mut self, registers: &mut PmuRegisters, features: PmuFeatures) {
        pmu::save(registers, features);
        // The counters are stopped and their interrupt off: the line is low.
        irq::enable_pmu_interrupt();
    }

    fn pmu_overflow_registers(&self) -> (u64, u64, u64) {
        pmu::overflow_registers()
    }

    fn enable_pmu_interrupt(&mut self) {
        irq::enable_pmu_interrupt();
    }

    fn set_traps(&mut self, hcr: u64) {
        HCR_EL2.set(hcr);
    }

    fn enter_guest(&mut self, ctx: &mut VcpuContext, fast: &FastExit<'_>) -> (u64, u64) {
        let vector = vcpu::run_until_exit(&mut ctx.regs, fast);
        (vector, ESR_EL2.get())
    }

    fn fault_address(&self) -> (u64, u64) {
        (FAR_EL2.get(), HPFAR_EL2.get())
    }

    fn take_interrupt(&mut self) -> Taken {
        irq::handle()
    }

    fn arm_timer(&mut self, deadline: u64) {
        timer::arm_at(deadline);
    }

    fn wait_for_interrupt(&mut self, deadline: u64) {
        timer::arm_at(deadline);
        // WFI with IRQs still masked: an interrupt pending now or later
        // wakes it whatever PSTATE.I says (Arm ARM D1.6.2, "Wait for
        // Interrupt"), and is taken only once they are unmasked after it.
        // Unmasking first would let a timer that is already due (the
        // deadline passed since it was read, or a tick still pending) be
        // taken and stopped *before* the WFI, which would then sleep until
        // some other interrupt: a lost wake-up that left the boot CPU
        // asleep for good.
        // SAFETY: unmasking IRQs lets the EL2 IRQ handler run here; it
        // touches nothing this code holds (the runner holds no lock here).
        unsafe {
            core::arch::asm!(
                "wfi",
                "msr daifclr, #2",
                "isb",
                "msr daifset, #2",
                options(nomem, nostack)
            )
        };
    }

    fn send_reschedule(&self, pcpu: usize) {
        if let Some(mpidr) = PCPU_MPIDRS.get().and_then(|m| m.get(pcpu)) {
            gic::send_sgi(*mpidr, irq::RESCHEDULE_SGI);
        }
    }

    fn vtimer_live(&self) -> (u64, u64) {
        (CNTV_CTL_EL0.get(), CNTV_CVAL_EL0.get())
    }

    fn vtimer_control(&self) -> u64 {
        CNTV_CTL_EL0.get()
    }

    fn vtimer_ppi(&self) -> u16 {
        irq::vtimer_intid() as u16
    }

    fn deactivate_vtimer_ppi(&mut self) {
        irq::deactivate_vtimer();
    }

    fn vbar_el1(&self) -> u64 {
        VBAR_EL1.get()
    }

    fn write_exception(&mut self, entry: &Injection) {
        ESR_EL1.set(entry.esr_el1);
        if let Some(far) = entry.far_el1 {
            FAR_EL1.set(far);
        }
        ELR_EL1.set(entry.elr_el1);
        SPSR_EL1.set(entry.spsr_el1);
    }

    fn read_id_register(&self, crm: u8, op2: u8) -> u64 {
        regs::read_id_register(crm, op2)
    }

    fn list_registers(&self) -> usize {
        gicv::list_registers()
    }

    fn read_lr(&self, index: usize) -> u64 {
        gicv::read_lr(index)
    }

    fn live_interface(&self) -> (u64, bool) {
        gicv::live_interface()
    }

    fn write_lr(&mut self, index: usize, value: u64) {
        gicv::write_lr(index, value);
    }

    fn set_interface_control(&mut self, underflow: bool) {
        gicv::set_control(underflow);
    }

    fn store_preempted(&self, pa: u64, width: usize, value: u64) {
        // SAFETY: the runner passes a record checked to be 64-byte aligned
        // and inside its VM's RAM (hypervisor-placed, or validated at
        // registration), which is mapped read-write at EL2 for the VM's
        // lifetime. Only atomics touch it, so concurrent guest writes are
        // harmless.
        unsafe {
            if width == 8 {
                let state = &*(pa as *const pvlock_abi::pvlock::VcpuState64);
                state.store_preempted(value, core::sync::atomic::Ordering::Release);
            } else {
                let state = &*(pa as *const pvlock_abi::pvlock::VcpuState32);
                state.store_preempted(value as u32, core::sync::atomic::Ordering::Release);
            }
        }
    }

    fn lock_count_hint(&self, pa: u64, width: usize) -> u32 {
        // SAFETY: as in `store_preempted`: an aligned record in a VM's RAM,
        // mapped at EL2; read with an atomic load only.
        unsafe {
            if width == 8 {
                (*(pa as *const pvlock_abi::pvlock::VcpuState64)).lock_count_hint()
            } else {
                (*(pa as *const pvlock_abi::pvlock::VcpuState32)).lock_count_hint()
            }
        }
    }

    fn guest_ipa_of(&self, va: u64) -> Option<u64> {
        cpu::translate_el1_read(va)
    }

    fn read_guest_ram(&self, pa: u64, width: u8) -> u64 {
        use core::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering};
        // SAFETY: the runner passes an address it translated through its
        // VM's RAM window (`Vm::ram_host_address`), naturally aligned for
        // `width`; a VM's RAM is mapped at EL2 for its lifetime. Only
        // atomic loads touch it, so the guest's concurrent writes are
        // harmless.
        unsafe {
            match width {
                1 => u64::from((*(pa as *const AtomicU8)).load(Ordering::Relaxed)),
                2 => u64::from((*(pa as *const AtomicU16)).load(Ordering::Relaxed)),
                4 => u64::from((*(pa as *const AtomicU32)).load(Ordering::Relaxed)),
                8 => (*(pa as *const AtomicU64)).load(Ordering::Relaxed),
                _ => 0,
            }
        }
    }

    fn store_stolen_time(&self, pa: u64, ns: u64) {
        // SAFETY: as in `store_preempted`: an aligned, hypervisor-placed
        // record in a VM's RAM, mapped at EL2; accessed atomically.
        unsafe {
            let record = &*(pa as *const pvlock_abi::pvtime::StolenTime);
            record.store_stolen_time(ns, core::sync::atomic::Ordering::Release);
        }
    }

    fn zero(&self, range: MemRange) {
        // SAFETY: the runner passes a VM's RAM, mapped read-write at EL2
        // and owned by that VM, none of whose vCPUs runs.
        unsafe { core::ptr::write_bytes(range.base as *mut u8, 0, range.size as usize) };
    }

    fn copy(&self, to: u64, from: MemRange) {
        // SAFETY: `from` is a boot module, mapped read-only at EL2 and
        // outside every VM's RAM (placement guarantees it); `to` is in the
        // RAM of a VM none of whose vCPUs runs, with room for it (the
        // layout reserved the slot).
        unsafe { copy_to(to, from) };
    }

    fn write(&self, to: u64, bytes: &[u8]) {
        // SAFETY: `to` is in the RAM of a VM none of whose vCPUs runs, with
        // room for `bytes` (the layout reserved the slot); `bytes` is
        // hypervisor heap memory, disjoint from it.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), to as *mut u8, bytes.len()) };
    }

    fn sync_for_guest(&self, range: MemRange) {
        cache::clean_to_poc(range.base, range.size);
        cache::invalidate_icache();
    }

    fn allocations(&self, refusal: Refusal) -> heap::Txn {
        match refusal {
            Refusal::None => heap::transaction(),
            Refusal::Nth(n) => heap::transaction_failing_at(n),
            Refusal::From(n) => heap::transaction_exhausted_at(n),
        }
    }

    fn heap_in_use(&self) -> usize {
        let usage = heap::usage();
        usage.main + usage.reserve
    }

    fn map_at_el2(&self, range: MemRange, kind: MapKind) -> Result<(), String> {
        mmu::map_more(range, kind).map_err(|e| alloc::format!("{e}"))
    }

    fn stage2(&self, vmid: u8, ipa: MemRange, pa: u64) -> Result<(Stage2Tables, u64), String> {
        let mut tables = Stage2Tables::new(vmid);
        tables.map_ram(ipa, pa).map_err(|e| alloc::format!("{e}"))?;
        let vttbr = tables.vttbr();
        Ok((tables, vttbr))
    }

    fn host_bytes(&self, range: MemRange) -> &[u8] {
        // SAFETY: the runner asks only for a boot module it has mapped at
        // EL2 (read-only) with `map_at_el2`, inside host RAM (placement
        // checked it), which nothing writes.
        unsafe { core::slice::from_raw_parts(range.base as *const u8, range.size as usize) }
    }

    fn console_read_byte(&mut self) -> Option<u8> {
        super::console::read_byte()
    }

    fn console_line(&self, line: core::fmt::Arguments<'_>) {
        println!("{line}");
    }
}

/// Copies `module` from host memory to host address `dst`.
///
/// # Safety
/// Both ranges must be mapped at EL2, `dst` writable, and not overlap.
unsafe fn copy_to(dst: u64, module: MemRange) {
    // SAFETY: per the caller.
    unsafe {
        core::ptr::copy_nonoverlapping(
            module.base as *const u8,
            dst as *mut u8,
            module.size as usize,
        )
    };
}
