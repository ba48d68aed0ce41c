//! Hypercalls (HVC, and SMC trapped by HCR_EL2.TSC): the VM's SMCCC
//! dispatcher answers the call and says what it asks of the hypervisor
//! (`smccc::Action`); this module carries that out — power a vCPU on or
//! off, suspend, stop or reset the VM, kick, directed yield, a WFx policy
//! change — and says what happens to the caller next.

use super::machine::{Machine, VcpuContext};
use super::vm::{Vm, reset_context};
use super::{Decision, Runner};
use crate::guest::layout;
use crate::sched::{PutReason, Scheduler, Wakeup};
use crate::services::pv;
use crate::services::smccc::{Action, PowerState, VmView};
use crate::vcpu::{GuestRegs, VcpuId, VmId};
use platform::Mpidr;

/// The dispatcher's view of a VM: its vCPUs' MPIDRs and power states, its
/// RAM, the clocks.
struct View<'a, M: Machine> {
    vm: &'a Vm<M>,
    vms: &'a [Vm<M>],
    sched: &'a Scheduler,
    machine: &'a M,
    wall_clock: Option<&'a crate::services::wallclock::WallClock>,
}

impl<M: Machine> VmView for View<'_, M> {
    fn vcpu_count(&self) -> u16 {
        self.vm.vcpu_count()
    }

    fn mpidr_of(&self, index: u16) -> Mpidr {
        layout::vcpu_mpidr(index)
    }

    fn vcpu_of_mpidr(&self, mpidr: Mpidr) -> Option<u16> {
        layout::vcpu_index(mpidr).filter(|&i| i < self.vcpu_count())
    }

    fn power_state(&self, index: u16) -> PowerState {
        self.sched
            .power_state(VcpuId {
                vm: self.vm.id,
                index,
            })
            .unwrap_or(PowerState::Off)
    }

    fn counter(&self, physical: bool) -> u64 {
        let now = self.machine.counter();
        if physical {
            now
        } else {
            now.wrapping_sub(self.vm.registers.cntvoff)
        }
    }

    fn wall_clock_ns(&self) -> Option<u64> {
        self.wall_clock
            .map(|clock| clock.ns_at(self.machine.counter()))
    }

    fn vm_vcpu_count(&self, vm: VmId) -> Option<u16> {
        self.vms.get(usize::from(vm.0)).map(Vm::vcpu_count)
    }

    fn ram_contains(&self, ipa: u64, len: u64) -> bool {
        let ram = self.vm.layout.ram;
        ipa >= ram.base && ipa.checked_add(len).is_some_and(|end| end <= ram.end())
    }
}

impl<'h, M: Machine> Runner<'h, M> {
    pub(super) fn hypercall(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        imm: u16,
    ) -> Decision {
        if imm != 0 {
            // SMCCC: only immediate 0 is a call; answer as an unknown
            // function.
            ctx.regs.x[0] = pvlock_abi::smccc::ret_to_x0(pvlock_abi::smccc::NOT_SUPPORTED);
            return Decision::Resume;
        }
        let host = self.host;
        let mut s = host.sched.lock();
        let action = vm.dispatcher.dispatch(
            vcpu,
            &mut ctx.regs,
            &View {
                vm,
                vms: &host.vms,
                sched: &s,
                machine: &self.machine,
                wall_clock: host.wall_clock.as_ref(),
            },
        );
        match action {
            Action::None => Decision::Resume,
            Action::CpuOn {
                target,
                entry,
                context_id,
            } => {
                self.cpu_on(vm, vcpu, ctx, &mut s, target, entry, context_id);
                Decision::Resume
            }
            Action::CpuOff => Decision::Put(PutReason::PowerOff),
            Action::CpuSuspend => {
                // Like WFI: no suspension with an interrupt pending.
                drop(s);
                if self.refresh_and_deliver(vm, vcpu, ctx) {
                    return Decision::Resume;
                }
                Decision::Put(PutReason::Wfi {
                    deadline: self.vtimer_wait_deadline(vm, ctx),
                })
            }
            Action::SystemOff | Action::SystemReset => {
                self.stop_vm(vm, &mut s, action == Action::SystemReset);
                Decision::Put(PutReason::PowerOff)
            }
            Action::Kick { target } => {
                vm.spin.lock().stats_mut().record_kick();
                self.kick(vm, vcpu, ctx, target, &mut s)
            }
            Action::SetWfxPolicy {
                vm: target,
                vcpu: which,
                wfe,
            } => {
                self.set_wfx_policy(vcpu, target, which, wfe);
                Decision::Resume
            }
            Action::YieldTo { target } => self.yield_to(vm, vcpu, ctx, &mut s, target),
        }
    }

    /// A control VM's PVLOCK_SET_WFX_POLICY. X0 already says SET (0); the
    /// target VM and vCPU exist (checked through `vm_vcpu_count`, and the
    /// VMs never change). A leaf lock: the target picks the policy up at
    /// its next guest entry.
    fn set_wfx_policy(
        &self,
        caller: VcpuId,
        target: VmId,
        which: Option<u16>,
        wfe: platform::vm::TrapPolicy,
    ) {
        let Some(t) = self.host.vms.get(usize::from(target.0)) else {
            return;
        };
        t.wfx.lock().set(which, wfe);
        match which {
            Some(index) => log::info!("{caller}: vm {} vCPU {index}: wfe-trap {wfe}", t.name),
            None => log::info!("{caller}: vm {} every vCPU: wfe-trap {wfe}", t.name),
        }
    }

    /// PV_SCHED_YIELD_TO: hand the rest of the caller's slice to `target`.
    /// X0 already says "not yielded" (1); only a real yield changes it.
    fn yield_to(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        s: &mut Scheduler,
        target: VcpuId,
    ) -> Decision {
        let now = self.machine.counter();
        let yielded = s.yield_to(vcpu, target, self.pcpu, now).is_ok();
        let mut spin = vm.spin.lock();
        spin.stats_mut().record_pv_yield(yielded);
        if !yielded {
            return Decision::Resume;
        }
        spin.descheduled(vcpu.index, ctx.regs.pstate);
        ctx.regs.x[0] = pvlock_abi::smccc::ret_to_x0(pvlock_abi::directed_yield::YIELDED);
        // The caller waits in a run queue now: preempted.
        vm.write_preempted(&self.machine, vcpu.index, 1);
        Decision::Yielded
    }

    /// PSCI CPU_ON of `target`, which the dispatcher found Off (under the
    /// scheduler lock `s`, still held): reset its context to `entry`, then
    /// start it. A failure is the caller's PSCI error in X0.
    #[allow(clippy::too_many_arguments)]
    fn cpu_on(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        s: &mut Scheduler,
        target: VcpuId,
        entry: u64,
        context_id: u64,
    ) {
        // The target is Off, so its context is in its slot.
        let started = vm.vcpus.get(usize::from(target.index)).is_some_and(|slot| {
            let mut slot = slot.lock();
            let Some(t) = slot.as_mut() else {
                return false;
            };
            reset_context(t, target.index);
            t.regs = GuestRegs {
                pc: entry,
                pstate: vm.layout.boot_regs().pstate,
                ..Default::default()
            };
            t.regs.set_reg(0, context_id);
            true
        });
        if !started {
            log::error!("{vcpu}: CPU_ON {target}: its context is loaded on a pCPU");
            ctx.regs.x[0] = pvlock_abi::psci::ret_to_x0(pvlock_abi::psci::error::INTERNAL_FAILURE);
            return;
        }
        // A vCPU starting afresh forgets a PV-lock record it registered
        // itself.
        vm.pv.reset_vcpu(target.index);
        vm.spin.lock().reset_vcpu(target.index);
        match s.power_on(target, self.machine.counter()) {
            Ok(wakeup) => {
                if let Some(value) = pv::preempted_on_wake(wakeup) {
                    vm.write_preempted(&self.machine, target.index, value);
                }
                self.poke(wakeup);
            }
            Err(e) => {
                let code = match s.power_state(target) {
                    Some(state) => state
                        .cpu_on_error()
                        .unwrap_or(pvlock_abi::psci::error::INTERNAL_FAILURE),
                    None => pvlock_abi::psci::error::INVALID_PARAMETERS,
                };
                log::warn!("{vcpu}: CPU_ON {target}: {e}");
                ctx.regs.x[0] = pvlock_abi::psci::ret_to_x0(code);
            }
        }
    }

    /// PV KICK_CPU (openEuler / Anolis): wake `target` from its WFI wait
    /// and, if it is now waiting for a pCPU, hand it the rest of the
    /// caller's slice (directed yield within the VM). X0 already holds the
    /// answer.
    fn kick(
        &mut self,
        vm: &'h Vm<M>,
        caller: VcpuId,
        ctx: &VcpuContext<M::Saved>,
        target: VcpuId,
        s: &mut Scheduler,
    ) -> Decision {
        let now = self.machine.counter();
        let wakeup = match s.wake(target, now) {
            Ok(wakeup) => wakeup,
            Err(e) => {
                log::debug!("{caller}: KICK_CPU {target}: {e}");
                return Decision::Resume;
            }
        };
        if let Some(value) = pv::preempted_on_wake(wakeup) {
            vm.write_preempted(&self.machine, target.index, value);
        }
        self.poke(wakeup);
        // A target queued on an idle pCPU starts there at once: no need to
        // yield.
        if target == caller || matches!(wakeup, Wakeup::Queued { ipi: true, .. }) {
            return Decision::Resume;
        }
        match s.yield_to(caller, target, self.pcpu, now) {
            Ok(()) => {
                // The caller waits in a run queue now: preempted.
                vm.write_preempted(&self.machine, caller.index, 1);
                vm.spin.lock().descheduled(caller.index, ctx.regs.pstate);
                Decision::Yielded
            }
            Err(_) => Decision::Resume,
        }
    }
}
