//! Carrying out decisions: this module is the one place where what an
//! exit handler decided happens — interrupt deliveries, blocking,
//! directed yields, kicks, vCPUs powered on and off, the VM stopped or
//! reset, a WFE policy changed — through [`Runner::apply`], or, for the
//! dispatcher's PV_SCHED_YIELD_TO shortcut, straight through
//! `Runner::yield_to`; each under the locks the module doc of
//! `el2::run` orders: first the deliveries (the vGIC lock already
//! released; a wake-up takes the scheduler's), then the next step, under
//! the scheduler lock where it changes a vCPU's state. Every scheduler
//! transition writes the PV "preempted" record under that lock, through
//! [`Runner::woken`] (a wake-up) or [`Runner::yielded`] (a yield).

use super::machine::{Machine, VcpuContext};
use super::vm::{Vm, reset_context};
use super::{Applied, Decision, Picked, Runner};
use crate::guest::layout;
use crate::sched::onspin::{self, Spinner, VmSpin};
use crate::sched::waitword::{self, GuestView, Wait};
use crate::sched::{Handover, PutReason, Scheduler, Wakeup};
use crate::trap::decision::Next;
use crate::vcpu::{GuestRegs, PowerState, VcpuId, VmId};
use pvlock_abi::{directed_yield, psci, smccc};

impl<'h, M: Machine> Runner<'h, M> {
    /// Carries out `decision` for the running `vcpu`; says what the pCPU
    /// does next. Takes the decision by value: each is applied once.
    pub(super) fn apply(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        decision: Decision,
    ) -> Applied {
        #[cfg(test)]
        {
            self.applied += 1;
        }
        // Checked here: most decisions deliver nothing, and `deliver` is
        // out of line.
        if !decision.deliver.is_empty() {
            self.deliver(vm, Some(vcpu.index), decision.deliver);
        }
        match decision.next {
            Next::Resume => Applied::Resume,
            Next::WaitForInterrupt { deadline } => self.wait_for_interrupt(vm, vcpu, ctx, deadline),
            Next::OnSpin => self.on_spin(vm, vcpu, ctx),
            Next::PowerOn {
                target,
                entry,
                context_id,
            } => {
                self.cpu_on(vm, vcpu, ctx, target, (entry, context_id));
                Applied::Resume
            }
            Next::PowerOff => Applied::Put(PutReason::PowerOff),
            Next::StopVm | Next::ResetVm => {
                let mut s = self.host.sched.lock();
                self.stop_vm(vm, &mut s, decision.next == Next::ResetVm);
                Applied::Put(PutReason::PowerOff)
            }
            Next::Kick { target, lend } => self.kick(vm, vcpu, ctx, target, lend),
            Next::YieldTo { target } => self.yield_to(vm, vcpu, ctx, target),
            Next::SetWfxPolicy {
                vm: target,
                vcpu: which,
                wfe,
            } => {
                self.set_wfx_policy(vcpu, target, which, wfe);
                Applied::Resume
            }
        }
    }

    /// WFI (and CPU_SUSPEND) completes at once if an interrupt is pending
    /// for the vCPU: look, with the list registers read back first (the
    /// guest may have taken what they held). Otherwise block until the
    /// virtual timer's deadline or the instruction's own.
    fn wait_for_interrupt(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        own: Option<u64>,
    ) -> Applied {
        if self.refresh_and_deliver(vm, vcpu, ctx) {
            return Applied::Resume;
        }
        let vtimer = self.vtimer_wait_deadline(vm);
        Applied::Put(PutReason::Wfi {
            deadline: crate::trap::exit::wfi_deadline(vtimer, own),
        })
    }

    /// WFE/WFET, or a spin the vCPU's samples showed
    /// (`el2::sched::spinwatch`): KVM's `kvm_vcpu_on_spin`
    /// (`el2::sched::onspin`): hand the rest of the slice to a preempted
    /// sibling, boosted ones first; else yield plainly.
    pub(super) fn on_spin(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
    ) -> Applied {
        // The word its wait loop polls, read while it is loaded (its stage
        // 1 is the CPU's) and before any lock is taken; only the boosts
        // use it (`boost` is fixed for the VM's life).
        let memory = GuestMemory::new(&self.machine, vm);
        let word = if vm.config.boost {
            waitword::find(&ctx.regs, &memory)
        } else {
            None
        };
        let now = self.machine.counter();
        let host = self.host;
        let mut s = host.sched.lock();
        let mut spin = vm.spin.lock();
        spin.spinning_on(vcpu.index, word);
        // Lock order: the scheduler, then the spin state, then the virtual
        // GIC (a leaf).
        let gic = vm.vgic.lock();
        // On the stack: a guest's WFE must not cost heap.
        let mut candidates = [onspin::Candidate::NOT_PREEMPTED; platform::vm::MAX_VCPUS as usize];
        let mut count = 0;
        for (slot, v) in candidates.iter_mut().zip(s.vcpus(vm.id)) {
            let waiting = s.can_yield_to(vcpu, v, self.pcpu, now).is_ok();
            let locks = if waiting {
                vm.lock_count_hint(&self.machine, v.index)
            } else {
                0
            };
            let pending = waiting && (gic.has_pending(v.index) || vm.vtimer_is_due(v.index, now));
            let wait = match spin.wait_word(v.index) {
                Some(word) if waiting => word.state(memory.read(word.ipa, word.width)),
                _ => Wait::Unknown,
            };
            *slot = spin.candidate(v.index, waiting, locks, pending, wait);
            count += 1;
        }
        drop(gic);
        let plan = spin.plan(
            Spinner::from_pstate(vcpu, ctx.regs.pstate),
            &candidates[..count],
        );
        for choice in plan.iter() {
            let handover = s.yield_to(vcpu, choice.target, self.pcpu, now);
            spin.attempted(choice, handover.is_ok());
            if let Ok(handover) = handover {
                return self.yielded(vm, (vcpu, ctx), (choice.target, handover), &s, &mut spin);
            }
        }
        // No sibling took the slice: yield plainly, as before (the spinner
        // stays in its spin loop until it is loaded again).
        Applied::Put(PutReason::Yield)
    }

    /// The scheduler switched this pCPU from `vcpu` to `target` for a
    /// directed yield (the caller holds the scheduler lock `s`, and `spin`,
    /// their VM's spin state): `vcpu` waits in a run queue now, so its
    /// record says preempted, and its deschedule snapshot is taken;
    /// `target` runs here next, and what its load and first pass need is
    /// read now, under the lock of the switch, for
    /// [`Runner::load_handover`].
    fn yielded(
        &mut self,
        vm: &Vm<M>,
        (vcpu, ctx): (VcpuId, &VcpuContext<M::Saved>),
        (target, handover): (VcpuId, Handover),
        s: &Scheduler,
        spin: &mut VmSpin,
    ) -> Applied {
        vm.write_preempted(&self.machine, vcpu.index, 1);
        spin.descheduled(vcpu.index, ctx.regs.pstate);
        spin.resumed(target.index);
        self.pick = Picked {
            slice_end: Some(handover.slice_end),
            runnable: s.runnable_on(self.pcpu),
            next_deadline: s.next_deadline_on(self.pcpu),
        };
        self.handover = Some((target, handover.steal_ticks));
        Applied::Yielded
    }

    /// PV_SCHED_YIELD_TO: hand the rest of the caller's slice to `target`.
    /// X0 already says "not yielded" (1); only a real yield changes it.
    /// Also called by the runner's exit path for the dispatcher's yield
    /// shortcut, which counts it as applied.
    pub(super) fn yield_to(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        target: VcpuId,
    ) -> Applied {
        let now = self.machine.counter();
        let host = self.host;
        let s = &mut *host.sched.lock();
        let handover = s.yield_to(vcpu, target, self.pcpu, now);
        let mut spin = vm.spin.lock();
        spin.stats_mut().record_pv_yield(handover.is_ok());
        let Ok(handover) = handover else {
            return Applied::Resume;
        };
        ctx.regs.x[0] = smccc::ret_to_x0(directed_yield::YIELDED);
        self.yielded(vm, (vcpu, ctx), (target, handover), s, &mut spin)
    }

    /// PV KICK_CPU (openEuler / Anolis) and PV_SCHED_KICK_LEND: wake
    /// `target` from its WFI wait and, with `lend`, if it is now waiting
    /// for a pCPU, lend it a short run of the caller's slice (within the
    /// VM). X0 already holds the answer.
    fn kick(
        &mut self,
        vm: &'h Vm<M>,
        caller: VcpuId,
        ctx: &VcpuContext<M::Saved>,
        target: VcpuId,
        lend: bool,
    ) -> Applied {
        vm.spin.lock().stats_mut().record_kick();
        let now = self.machine.counter();
        let host = self.host;
        let s = &mut *host.sched.lock();
        let wakeup = match s.wake(target, now) {
            Ok(wakeup) => wakeup,
            Err(e) => {
                log::debug!("{caller}: KICK_CPU {target}: {e}");
                return Applied::Resume;
            }
        };
        self.woken(target, wakeup);
        // A target queued on an idle pCPU, or preempting the vCPU running
        // where it waits, starts there at once: no need to lend.
        if !lend
            || target == caller
            || matches!(
                wakeup,
                Wakeup::Queued { ipi: true, .. } | Wakeup::Preempting { .. }
            )
        {
            return Applied::Resume;
        }
        let lend = self.machine.counter_frequency() * crate::sched::KICK_LEND_US / 1_000_000;
        match s.lend_to(caller, target, self.pcpu, now, lend) {
            Ok(handover) => {
                self.yielded(
                    vm,
                    (caller, ctx),
                    (target, handover),
                    s,
                    &mut vm.spin.lock(),
                );
                Applied::Lent
            }
            Err(_) => Applied::Resume,
        }
    }

    /// PSCI CPU_ON of `target`, which the dispatcher found Off: under the
    /// scheduler lock, if it still is, reset its context to `entry` with
    /// X0 = the context id, then start it. A failure is the caller's PSCI
    /// error in X0. Rare: kept out of the loop's code.
    #[cold]
    #[inline(never)]
    fn cpu_on(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        target: VcpuId,
        (entry, context_id): (u64, u64),
    ) {
        let s = &mut *self.host.sched.lock();
        // Started by another vCPU since the dispatcher looked?
        let error = s.power_state(target).map_or(
            Some(psci::error::INVALID_PARAMETERS),
            PowerState::cpu_on_error,
        );
        if let Some(code) = error {
            log::warn!("{vcpu}: CPU_ON {target}: no longer off");
            ctx.regs.x[0] = psci::ret_to_x0(code);
            return;
        }
        // Off, so its context is in its slot.
        if !self.reset_to(vm, target, entry, context_id) {
            log::error!("{vcpu}: CPU_ON {target}: its context is loaded on a pCPU");
            ctx.regs.x[0] = psci::ret_to_x0(psci::error::INTERNAL_FAILURE);
            return;
        }
        // A vCPU starting afresh forgets a PV-lock record it registered
        // itself.
        vm.pv.reset_vcpu(target.index);
        vm.spin.lock().reset_vcpu(target.index);
        match s.power_on(target, self.machine.counter()) {
            Ok(wakeup) => self.woken(target, wakeup),
            Err(e) => {
                log::warn!("{vcpu}: CPU_ON {target}: {e}");
                ctx.regs.x[0] = psci::ret_to_x0(psci::error::INTERNAL_FAILURE);
            }
        }
    }

    /// Resets `target`'s context, in its slot, to start at `entry` with
    /// X0 = `context_id`; false if the slot is empty.
    fn reset_to(&self, vm: &Vm<M>, target: VcpuId, entry: u64, context_id: u64) -> bool {
        let Some(slot) = vm.vcpus.get(usize::from(target.index)) else {
            return false;
        };
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
        // Its timer starts off: the line the vGIC kept since the vCPU
        // powered off goes low with the context's (the slot, then the vGIC:
        // `el2::run`'s lock order).
        let _ = vm
            .vgic
            .lock()
            .set_level(layout::TIMER.virt.intid(), target.index, false);
        vm.note_vtimer(target.index, t);
        true
    }

    /// A control VM's PVLOCK_SET_WFX_POLICY. X0 already says SET (0); the
    /// target VM and vCPU exist. No lock: the target picks the policy up
    /// at its next guest entry. Rare: kept out of the loop's code.
    #[cold]
    #[inline(never)]
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
        t.wfx.set(which, wfe);
        match which {
            Some(index) => log::info!("{caller}: vm {} vCPU {index}: wfe-trap {wfe}", t.name),
            None => log::info!("{caller}: vm {} every vCPU: wfe-trap {wfe}", t.name),
        }
    }

    /// After the scheduler woke `vcpu` (the caller holds the scheduler
    /// lock): its PV "preempted" record follows, and the pCPU it was
    /// queued on is poked.
    pub(super) fn woken(&self, vcpu: VcpuId, wakeup: Wakeup) {
        if let (Some(vm), Some(value)) = (
            self.host.vms.get(usize::from(vcpu.vm.0)),
            crate::services::pv::preempted_on_wake(wakeup),
        ) {
            vm.write_preempted(&self.machine, vcpu.index, value);
        }
        self.poke(wakeup);
    }

    /// Sends the reschedule SGI where a wake-up needs it: to an idle pCPU
    /// given work (not this one, which looks at the scheduler next anyway),
    /// and to a pCPU whose running vCPU must give way, this one included
    /// (its vCPU may be re-entered in place; the SGI makes it exit and
    /// pass through the scheduler).
    pub(super) fn poke(&self, wakeup: Wakeup) {
        match wakeup {
            Wakeup::Queued { pcpu, ipi: true } if pcpu != self.pcpu => {
                self.machine.send_reschedule(pcpu);
            }
            Wakeup::Preempting { pcpu } => self.machine.send_reschedule(pcpu),
            _ => {}
        }
    }
}

/// A VM's memory as the loaded vCPU sees it, for [`waitword::find`]: its
/// stage 1 through the machine's translation, its RAM through the VM's
/// window on the host.
pub(super) struct GuestMemory<'a, M: Machine> {
    machine: &'a M,
    vm: &'a Vm<M>,
}

impl<'a, M: Machine> GuestMemory<'a, M> {
    pub(super) fn new(machine: &'a M, vm: &'a Vm<M>) -> Self {
        Self { machine, vm }
    }
}

impl<M: Machine> GuestView for GuestMemory<'_, M> {
    fn ipa_of(&self, va: u64) -> Option<u64> {
        self.machine.guest_ipa_of(va)
    }

    fn read(&self, ipa: u64, width: u8) -> Option<u64> {
        if !matches!(width, 1 | 2 | 4 | 8) || !ipa.is_multiple_of(u64::from(width)) {
            return None;
        }
        let pa = self.vm.ram_host_address(ipa, u64::from(width))?;
        Some(self.machine.read_guest_ram(pa, width))
    }
}
