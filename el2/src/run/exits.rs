//! Exit handling: one small handler per exit kind, each returning a
//! [`Decision`] that `Runner::apply` carries out; a handler changes only
//! its own vCPU's context. Hypercalls are in `hypercall`, trapped device
//! accesses in `devices`.

use super::machine::{Machine, Taken, VcpuContext};
use super::vm::{VgicCounters, Vm};
use super::{Decision, Runner};
use crate::devices::vgic::VcpuMask;
use crate::guest::layout;
use crate::sched::onspin::pstate_in_kernel;
use crate::trap::debug::{DebugAnswer, Switch};
use crate::trap::decision::Next;
use crate::trap::exit::{Exit, VtimerState, WfxKind};
use crate::trap::fault::GuestFault;
use crate::trap::mmio::{A64_INSTRUCTION_BYTES, complete_instruction};
use crate::trap::sysreg::{self, Emulated, SysregAccess};
use crate::vcpu::VcpuId;
use aarch64_cpu::registers::CNTV_CTL_EL0;
use tock_registers::LocalRegisterCopy;

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
                ctx.vtimer.fired = true;
                VgicCounters::count(&vm.vgic_stats.timer);
                // Latched rather than driven as a level: the hardware
                // timer is masked now, and the guest's handler reprograms
                // (and so unmasks) it, which fires again if due.
                let intid = layout::TIMER.virt.intid();
                let woken = vm.vgic.lock().raise_edge(intid, vcpu.index);
                Decision::delivering(woken.unwrap_or_default())
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
    /// live registers, in physical counter ticks; see
    /// `el2::trap::exit::vtimer_wait_deadline`.
    pub(super) fn vtimer_wait_deadline(
        &self,
        vm: &Vm<M>,
        ctx: &mut VcpuContext<M::Saved>,
    ) -> Option<u64> {
        let (ctl, cval) = self.machine.vtimer_live();
        let ctl = LocalRegisterCopy::<u64, CNTV_CTL_EL0::Register>::new(ctl);
        crate::trap::exit::vtimer_wait_deadline(VtimerState {
            enabled: ctl.is_set(CNTV_CTL_EL0::ENABLE),
            masked: ctl.is_set(CNTV_CTL_EL0::IMASK),
            masked_by_hypervisor: core::mem::take(&mut ctx.vtimer.fired),
            deadline: cval.wrapping_add(vm.registers.cntvoff),
        })
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
}
