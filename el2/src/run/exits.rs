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
                Decision::delivering(VcpuMask::single(vcpu.index))
            }
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
            let value = sysreg::sanitize_id(access.crm, access.op2, hw);
            ctx.regs.set_reg(access.rt, value);
            complete_instruction(&mut ctx.regs, A64_INSTRUCTION_BYTES);
            return Decision::RESUME;
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
