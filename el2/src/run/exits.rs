//! Exit handling: one small handler per exit kind, each returning a
//! [`Decision`] that `Runner::apply` carries out; a handler changes only
//! its own vCPU's context. Hypercalls are in `hypercall`, trapped device
//! accesses in `devices`.

use super::machine::{Machine, Taken, VcpuContext, VtimerContext};
use super::vm::{VgicCounters, Vm};
use super::{Decision, Runner};
use crate::devices::vgic::{VGic, VcpuMask};
use crate::devices::vtimer;
use crate::guest::layout;
use crate::sched::onspin::pstate_in_kernel;
use crate::trap::debug::{DebugAnswer, Switch};
use crate::trap::decision::Next;
use crate::trap::exit::{Exit, WfxKind};
use crate::trap::fault::GuestFault;
use crate::trap::mmio::{A64_INSTRUCTION_BYTES, complete_instruction};
use crate::trap::pmu::{self, PmuFeatures, PmuTrap};
use crate::trap::sysreg::{self, Emulated, SysregAccess};
use crate::vcpu::VcpuId;

impl<'h, M: Machine> Runner<'h, M> {
    /// The exit table.
    pub(super) fn handle_exit(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        exit: Exit,
    ) -> Decision {
        match exit {
            Exit::Irq => self.interrupt(vm, vcpu, ctx),
            Exit::Hvc { imm } => self.hypercall(vm, vcpu, ctx, imm),
            Exit::Smc { imm } => {
                // ELR points at the trapped SMC (Arm ARM D1.10.2): step
                // over it.
                complete_instruction(&mut ctx.regs, A64_INSTRUCTION_BYTES);
                self.hypercall(vm, vcpu, ctx, imm)
            }
            Exit::Wfx {
                kind,
                deadline_register,
            } => {
                complete_instruction(&mut ctx.regs, A64_INSTRUCTION_BYTES);
                vm.spin.lock().stats_mut().record_wfx(&exit);
                Decision::new(match kind {
                    // WFIT's deadline (Rt, in virtual counter ticks; Arm
                    // ARM C6.2.397 "WFIT").
                    WfxKind::Wfi => Next::WaitForInterrupt {
                        deadline: deadline_register
                            .map(|r| ctx.regs.reg(r).wrapping_add(vm.registers.cntvoff)),
                    },
                    WfxKind::Wfe => Next::OnSpin,
                })
            }
            Exit::DataAbort(abort) => self.data_abort(vm, vcpu, ctx, abort),
            Exit::InstructionAbort { far: address } => {
                if let Some(nth) = vm.fault_to_log() {
                    log::warn!(
                        "{vcpu} ({}): instruction fetch at {address:#x} outside its memory; \
                         abort injected (fault {nth} of this VM)",
                        vm.name
                    );
                }
                self.inject(ctx, GuestFault::InstructionAbort { address });
                Decision::RESUME
            }
            Exit::SystemRegister(access) => self.system_register(vm, vcpu, ctx, access),
            Exit::Other { esr, .. } => {
                log::debug!(
                    "{vcpu} ({}): {} (ESR {esr:#x}) at {:#x}; undefined instruction injected",
                    vm.name,
                    exit.class_name(),
                    ctx.regs.pc
                );
                self.inject(ctx, GuestFault::Undefined);
                Decision::RESUME
            }
            Exit::FpAccess => {
                // The trapped instruction runs again once the state is in.
                self.machine.load_fp(ctx);
                Decision::RESUME
            }
            Exit::Fiq | Exit::SError => {
                log::warn!("{vcpu} ({}): unexpected {}", vm.name, exit.class_name());
                Decision::RESUME
            }
        }
    }

    /// A physical interrupt while the guest ran.
    fn interrupt(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
    ) -> Decision {
        match self.machine.take_interrupt() {
            Taken::VirtualTimer => {
                // The timer's line is high, and its physical PPI stays
                // active until a list register entry or the runner ends it
                // (`el2::devices::vtimer`).
                self.vtimer_ppi.fired();
                VgicCounters::count(&vm.vgic_stats.timer);
                let intid = layout::TIMER.virt.intid();
                let mut gic = vm.vgic.lock();
                let woken = follow_vtimer_line(&mut gic, vcpu.index, &mut ctx.vtimer, true);
                // The vCPU refills whenever the interrupt can reach it,
                // even with the line already high in the vGIC: a hardware
                // entry the guest deactivated made the PPI fire again, and
                // the entry is gone. One the guest disabled waits in the
                // vGIC, its PPI held.
                let reachable = gic
                    .irq_status(intid, vcpu.index)
                    .is_some_and(|irq| irq.enabled || irq.in_lr.is_some());
                drop(gic);
                Decision::delivering(if reachable {
                    woken | VcpuMask::single(vcpu.index)
                } else {
                    woken
                })
            }
            Taken::Maintenance => {
                // The list registers need a refill: the vCPU's own mark.
                VgicCounters::count(&vm.vgic_stats.maintenance);
                // An EOI of the PMU's level-sensitive interrupt among
                // them: its line follows the counters again.
                let mut targets = self.pmu_line_follow(vm, vcpu, ctx);
                targets.insert(vcpu.index);
                Decision::delivering(targets)
            }
            Taken::PmuOverflow => self.pmu_overflow(vm, vcpu, ctx),
            Taken::Hypervisor => {
                // The slice tick or an IPI: also when the boot CPU looks
                // for console input while it runs a vCPU.
                self.forward_console_input(Some(vcpu));
                Decision::RESUME
            }
        }
    }

    /// A trapped system register: SGI generation, an ID register, a debug
    /// register (`el2::trap::debug`), or one of the PMU registers
    /// `el2::trap::sysreg` emulates; any other gets an undefined
    /// instruction.
    fn system_register(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        access: SysregAccess,
    ) -> Decision {
        if let Some(register) = sysreg::sgi_register(&access) {
            let targets = self.send_sgi(vm, vcpu, register, ctx.regs.reg(access.rt));
            complete_instruction(&mut ctx.regs, A64_INSTRUCTION_BYTES);
            return Decision::delivering(targets);
        }
        if sysreg::is_id_read(&access) {
            let hw = self.machine.read_id_register(access.crm, access.op2);
            let value = sysreg::sanitize_id(access.crm, access.op2, hw, vm.pmu);
            ctx.regs.set_reg(access.rt, value);
            complete_instruction(&mut ctx.regs, A64_INSTRUCTION_BYTES);
            return Decision::RESUME;
        }
        if pmu::is_pmu_register(access.encoding())
            && let Some(features) = vm.pmu
        {
            return self.pmu_trap(vm, vcpu, ctx, features, access);
        }
        let value = ctx.regs.reg(access.rt);
        let from_el0 = !pstate_in_kernel(ctx.regs.pstate);
        let answer = match ctx.debug.emulate(&access, value, vm.debug, from_el0) {
            Some(DebugAnswer::Done { result, switch }) => {
                match switch {
                    Some(Switch::ToCpu) => self.machine.load_debug(&ctx.debug.registers, vm.debug),
                    Some(Switch::ToMemory) => {
                        self.machine.save_debug(&mut ctx.debug.registers, vm.debug)
                    }
                    None => {}
                }
                Some(result)
            }
            Some(DebugAnswer::TrapToEl1) => {
                self.inject(ctx, GuestFault::SystemRegisterTrap { iss: access.iss() });
                return Decision::RESUME;
            }
            None => sysreg::emulate(&access),
        };
        match answer {
            Some(done) => {
                if let Emulated::Read(v) = done {
                    ctx.regs.set_reg(access.rt, v);
                }
                // ELR points at the trapped MSR/MRS: step over it.
                complete_instruction(&mut ctx.regs, A64_INSTRUCTION_BYTES);
            }
            None => {
                log::debug!(
                    "{vcpu} ({}): {access} at {:#x} not emulated; undefined instruction \
                     injected",
                    vm.name,
                    ctx.regs.pc
                );
                self.inject(ctx, GuestFault::Undefined);
            }
        }
        Decision::RESUME
    }

    /// A trapped access to the PMU of a VM that has one: its first since
    /// the vCPU's load loads the vCPU's PMU registers and runs the
    /// instruction again, untrapped (`el2::trap::pmu`).
    fn pmu_trap(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        features: PmuFeatures,
        access: SysregAccess,
    ) -> Decision {
        match ctx.pmu.trapped() {
            // ELR still points at the access: it runs again.
            PmuTrap::LoadAndRetry => self.machine.load_pmu(&ctx.pmu.registers, features),
            PmuTrap::Undefined => {
                log::debug!(
                    "{vcpu} ({}): {access} at {:#x} trapped with the PMU loaded; undefined \
                     instruction injected",
                    vm.name,
                    ctx.regs.pc
                );
                self.inject(ctx, GuestFault::Undefined);
            }
        }
        Decision::RESUME
    }

    /// The PMU overflow interrupt fired while `vcpu` ran: its virtual
    /// line goes high (the physical interrupt stays disabled until the
    /// line drops, [`Self::pmu_line_follow`]). With its PMU not loaded
    /// the interrupt is a stale one of a vCPU since put, whose counters
    /// are stopped: enabled again, nothing injected.
    fn pmu_overflow(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
    ) -> Decision {
        if !ctx.pmu.in_cpu() {
            self.machine.enable_pmu_interrupt();
            return Decision::RESUME;
        }
        ctx.pmu.line = true;
        let woken = vm
            .vgic
            .lock()
            .set_level(layout::PMU_IRQ.intid(), vcpu.index, true);
        Decision::delivering(woken.unwrap_or_default())
    }

    /// Samples the loaded PMU's overflow line while the vGIC has it high:
    /// once it dropped (the guest cleared the overflow or the interrupt
    /// enable), the virtual line drops and the physical interrupt is
    /// enabled again. Returns the vCPUs to wake.
    pub(super) fn pmu_line_follow(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
    ) -> VcpuMask {
        if !(ctx.pmu.in_cpu() && ctx.pmu.line) {
            return VcpuMask::EMPTY;
        }
        let (pmcr, interrupts, overflows) = self.machine.pmu_overflow_registers();
        if pmu::overflow_line(pmcr, interrupts, overflows) {
            return VcpuMask::EMPTY;
        }
        ctx.pmu.line = false;
        self.machine.enable_pmu_interrupt();
        vm.vgic
            .lock()
            .set_level(layout::PMU_IRQ.intid(), vcpu.index, false)
            .unwrap_or_default()
    }

    /// At put, after the PMU registers were saved: the virtual overflow
    /// line follows the saved counters (the physical interrupt is enabled
    /// again by the save). Returns the vCPUs to wake.
    pub(super) fn pmu_line_saved(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
    ) -> VcpuMask {
        let level = ctx.pmu.saved_line();
        if level == ctx.pmu.line {
            return VcpuMask::EMPTY;
        }
        ctx.pmu.line = level;
        vm.vgic
            .lock()
            .set_level(layout::PMU_IRQ.intid(), vcpu.index, level)
            .unwrap_or_default()
    }

    /// The virtual timer's part of a waiting vCPU's deadline, from the
    /// live registers, in physical counter ticks: when its line rises
    /// (`el2::devices::vtimer::rises_at`), whether or not its PPI is
    /// enabled in the vGIC. A wait that ends there with nothing to take is
    /// a spurious wake-up, which WFI allows (Arm ARM D1.6.2), and what a
    /// guest that polls the counter after WFI relies on; with the line
    /// already high, the wait ends at once.
    pub(super) fn vtimer_wait_deadline(&self, vm: &Vm<M>) -> Option<u64> {
        let (ctl, cval) = self.machine.vtimer_live();
        vtimer::rises_at(ctl, cval, vm.registers.cntvoff)
    }

    /// Injects `what` into the running vCPU: its EL1 exception registers
    /// and its resume state.
    pub(super) fn inject(&mut self, ctx: &mut VcpuContext<M::Saved>, what: GuestFault) {
        let entry =
            crate::trap::fault::inject(what, ctx.regs.pc, ctx.regs.pstate, self.machine.vbar_el1());
        self.machine.write_exception(&entry);
        ctx.regs.pc = entry.pc;
        ctx.regs.pstate = entry.pstate;
    }

    /// Gives the vGIC `line` as the level of `vcpu`'s virtual timer line,
    /// if it is not what the vGIC has (`ctx` is `vcpu`'s, held by this
    /// pCPU). Returns the vCPUs to tell.
    pub(super) fn set_vtimer_line(
        &self,
        vm: &Vm<M>,
        vcpu: u16,
        ctx: &mut VcpuContext<M::Saved>,
        line: bool,
    ) -> VcpuMask {
        if ctx.vtimer.line == line {
            return VcpuMask::EMPTY;
        }
        follow_vtimer_line(&mut vm.vgic.lock(), vcpu, &mut ctx.vtimer, line)
    }
}

/// Drives `vcpu`'s virtual timer PPI in `gic` (locked by the caller) to
/// `line`, and notes that in `vtimer`, its context's timer (`VtimerContext::line`).
/// Returns the vCPUs to tell.
pub(super) fn follow_vtimer_line(
    gic: &mut VGic,
    vcpu: u16,
    vtimer: &mut VtimerContext,
    line: bool,
) -> VcpuMask {
    if vtimer.line == line {
        return VcpuMask::EMPTY;
    }
    vtimer.line = line;
    gic.set_level(layout::TIMER.virt.intid(), vcpu, line)
        .unwrap_or_default()
}
