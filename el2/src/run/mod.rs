//! The VM runner: what each pCPU does, as portable code over a
//! [`Machine`]. One [`Runner`] per pCPU owns that pCPU's loop — pick a
//! vCPU, load it, enter it, decode the exit, handle it, decide, put it —
//! and [`Runner::step`] runs one pass of it, so that the host tests can
//! interleave several pCPUs over one [`Host`] with a fake machine.
//!
//! Decisions: an exit handler (`exits`, `hypercall`, `devices`) decides
//! and changes nothing but its own vCPU's context (results in registers,
//! an injected exception, the PC stepped on); it returns a `Decision`:
//! what happens next ([`Next`], the type the SMCCC dispatcher answers
//! with too) and the vCPUs of the same VM a virtual GIC change made an
//! interrupt deliverable to. `Runner::apply` (`apply`) carries it out in
//! one place and says what the pCPU does: resume, put the vCPU with a
//! [`PutReason`] (the scheduler's input), or save it because the
//! scheduler already took it off this pCPU (a directed yield).
//!
//! Lock order (each lock only while holding the ones before it):
//! the scheduler, then a VM's directed-yield state (`spin`), then its
//! virtual GIC (a leaf). A VM's console is taken before its virtual GIC
//! (`devices::uart_line_follow`). A vCPU's context slot is held only to
//! move the context in or out, or, while the vCPU is off its pCPU, to make
//! the virtual GIC follow its timer's line (the slot, then the virtual
//! GIC: `devices::sample_saved_timer`, `apply::reset_to`); the context of
//! a running vCPU is in its pCPU's runner, so no two pCPUs can hold it.
//! The PV "preempted" flag of a put vCPU is written under the scheduler
//! lock, with the scheduler's decision: once the lock is released another
//! pCPU may pick the vCPU and write 0, which must not be overtaken.

mod apply;
mod create;
mod devices;
mod exits;
mod hypercall;
mod lifecycle;
pub mod machine;
pub mod vm;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod level_tests;
#[cfg(test)]
mod tests;

pub use create::create_vms;
pub use lifecycle::register_vcpus;
pub use machine::{FastExit, Machine, Taken, VcpuContext, VmRegisters};
pub use vm::{Vm, VmParts, VmState, guest_hcr};

use crate::devices::vgic::{Lr, LrState, MAX_LIST_REGISTERS, VcpuMask, signalled_at_once};
use crate::devices::vtimer::{self, PhysicalIrq};
use crate::guest::layout;
use crate::memory::ownership::OwnershipMap;
use crate::sched::onspin;
use crate::sched::spinwatch::{self, Sample, SpinWatch};
use crate::sched::waitword;
use crate::sched::{PutOutcome, PutReason, Scheduler, Wakeup};
use crate::services::pv;
use crate::services::wallclock::WallClock;
use crate::trap::decision::Next;
use crate::trap::exit::{Exit, Syndrome};
use crate::vcpu::VcpuId;
use alloc::boxed::Box;
use alloc::vec::Vec;
use apply::GuestMemory;
use boot::sync::SpinMutex as Mutex;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// An idle pCPU looks at the scheduler at least this often even if nobody
/// sends it an IPI (a safety net, not the mechanism).
const IDLE_RECHECK_MS: u64 = 50;

/// Everything the pCPUs share: the VMs, the scheduler, page ownership and
/// the clock of day. One value for the machine's lifetime.
pub struct Host<M: Machine> {
    pub vms: Vec<Vm<M>>,
    pub sched: Mutex<Scheduler>,
    pub ownership: Mutex<OwnershipMap>,
    /// The time of day, when the board has an RTC (for KVM PTP).
    pub wall_clock: Option<WallClock>,
    /// When the boot CPU next looks for console input (counter ticks).
    next_input_poll: AtomicU64,
    /// Set when the last VM has powered off.
    all_off: AtomicBool,
    /// How many pCPUs run the loop (reschedule SGIs go to 0..this).
    pcpus: usize,
}

impl<M: Machine> Host<M> {
    pub fn new(
        vms: Vec<Vm<M>>,
        sched: Scheduler,
        ownership: OwnershipMap,
        wall_clock: Option<WallClock>,
        pcpus: usize,
    ) -> Self {
        Self {
            vms,
            sched: Mutex::new(sched),
            ownership: Mutex::new(ownership),
            wall_clock,
            next_input_poll: AtomicU64::new(0),
            all_off: AtomicBool::new(false),
            pcpus,
        }
    }

    /// Whether every VM has powered off.
    pub fn all_off(&self) -> bool {
        self.all_off.load(Ordering::Acquire)
    }
}

/// An exit handler's answer: what happens next, and the vCPUs of the
/// exiting vCPU's VM that its virtual GIC change made an interrupt
/// deliverable to (the only effect a handler leaves to the runner besides
/// `next`). Neither `Copy` nor `Clone`: [`Runner::apply`] takes it, so a
/// decision is applied at most once, and `#[must_use]`, so it is applied.
#[must_use]
#[derive(Debug)]
pub(crate) struct Decision {
    next: Next,
    deliver: VcpuMask,
}

impl Decision {
    /// Resume, nothing to deliver.
    const RESUME: Self = Self::new(Next::Resume);

    const fn new(next: Next) -> Self {
        Self {
            next,
            deliver: VcpuMask::EMPTY,
        }
    }

    /// Resume after telling `targets` of the interrupts now deliverable
    /// to them.
    const fn delivering(targets: VcpuMask) -> Self {
        Self {
            next: Next::Resume,
            deliver: targets,
        }
    }
}

/// What the pCPU does once a decision is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Applied {
    /// Enter the guest again.
    Resume,
    /// Leave the pCPU for this reason.
    Put(PutReason),
    /// The scheduler has already switched this pCPU to a sibling (a
    /// directed yield handed it the rest of the slice): save the vCPU and
    /// load the sibling ([`Runner::load_handover`]).
    Yielded,
    /// As [`Self::Yielded`], after a kick: the sibling runs only for a
    /// short lend (`Scheduler::lend_to`), so it is loaded through a full
    /// pass of its own, which arms the timer for the lend's end, not in
    /// place for the rest of the slice ([`Runner::switch_in_place`]).
    Lent,
}

/// What one [`Runner::step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Loaded a vCPU, or ran the loaded one until its next full pass.
    Ran,
    /// Nothing to run: waited for an interrupt.
    Idle,
    /// Every VM has powered off: the loop is over.
    AllOff,
}

/// How long a pCPU waits for the context of a vCPU it picked to be saved
/// by the pCPU that ran it last ([`Runner::take_context`]): that save
/// takes microseconds; under single-threaded emulation the other pCPU
/// may not run again for a few milliseconds.
const CONTEXT_WAIT_MS: u64 = 20;

/// What the scheduler says about a vCPU it just picked, read under the
/// same lock as the pick: one lock round trip less on every switch.
#[derive(Clone, Copy, Debug, Default)]
struct Picked {
    /// The end of the slice it was given.
    slice_end: Option<u64>,
    /// vCPUs that want this pCPU (the `auto` WFE trap policy).
    runnable: usize,
    /// The earliest WFI deadline of a vCPU blocked on this pCPU.
    next_deadline: Option<u64>,
}

impl Picked {
    fn read(s: &Scheduler, vcpu: VcpuId, pcpu: usize) -> Self {
        Self {
            slice_end: s.slice_end(vcpu),
            runnable: s.runnable_on(pcpu),
            next_deadline: s.next_deadline_on(pcpu),
        }
    }
}

/// The vCPU this pCPU runs, with its context. Two words: it moves in
/// registers (a larger value is copied with a `memcpy` call on this
/// soft-float target, which cost 45 instructions per vCPU switch).
struct Loaded<S> {
    vcpu: VcpuId,
    ctx: Box<VcpuContext<S>>,
}

/// One pCPU's loop.
pub struct Runner<'h, M: Machine> {
    pcpu: usize,
    host: &'h Host<M>,
    machine: M,
    loaded: Option<Loaded<M::Saved>>,
    /// What the scheduler said when it picked the loaded vCPU, for its
    /// first pass (`pick_fresh`); later passes read the scheduler again.
    pick: Picked,
    pick_fresh: bool,
    /// The target of the directed yield just applied and its steal ticks,
    /// read under the switch's lock: loaded once the yielder is saved.
    handover: Option<(VcpuId, u64)>,
    /// Who owes the deactivation of this pCPU's virtual timer PPI
    /// (`el2::devices::vtimer`): inactive whenever no vCPU is loaded.
    vtimer_ppi: PhysicalIrq,
    /// Samples the loaded vCPU for spins that do not trap
    /// (`el2::sched::spinwatch`) while its WFE would.
    watch: SpinWatch,
    /// Whether the loaded vCPU's WFE traps, so that it is sampled: set by
    /// each full pass ([`Self::arm_pass`]).
    watching: bool,
    /// Decisions applied, for the host tests' "every exit, one decision"
    /// check (the exits the machine answered itself it counts).
    #[cfg(test)]
    applied: u64,
}

impl<'h, M: Machine> Runner<'h, M> {
    pub fn new(pcpu: usize, host: &'h Host<M>, machine: M) -> Self {
        let hz = machine.counter_frequency();
        let watch = SpinWatch::new(
            us_to_ticks(hz, spinwatch::MIN_SAMPLE_PERIOD_US),
            us_to_ticks(hz, spinwatch::MAX_SAMPLE_PERIOD_US),
        );
        Self {
            pcpu,
            host,
            machine,
            loaded: None,
            pick: Picked::default(),
            pick_fresh: false,
            handover: None,
            vtimer_ppi: PhysicalIrq::Inactive,
            watch,
            watching: false,
            #[cfg(test)]
            applied: 0,
        }
    }

    /// Samples for spins every `min` to `max` ticks instead of
    /// [`spinwatch::MIN_SAMPLE_PERIOD_US`] to
    /// [`spinwatch::MAX_SAMPLE_PERIOD_US`]: the fake guest of the host
    /// tests exits every few hundred of its ticks, where a real guest
    /// exits every few microseconds, and at the real periods its samples
    /// would crowd out its exits.
    #[cfg(test)]
    pub(crate) fn set_spin_sample_ticks(&mut self, min: u64, max: u64) {
        self.watch = SpinWatch::new(min, max);
    }

    pub fn machine(&self) -> &M {
        &self.machine
    }

    pub fn machine_mut(&mut self) -> &mut M {
        &mut self.machine
    }

    /// The vCPU this pCPU has loaded, if any.
    pub fn running(&self) -> Option<VcpuId> {
        self.loaded.as_ref().map(|l| l.vcpu)
    }

    /// Runs the loop until every VM has powered off.
    pub fn run(&mut self) {
        while self.step() != Step::AllOff {}
    }

    /// One pass of the loop: with no vCPU loaded, pick one and load it (or
    /// wait for an interrupt); with one, run it until it must pass
    /// through the scheduler again. Inlined into [`Self::run`]: a call per
    /// pass of this large function costs its register saves twice per
    /// vCPU switch.
    #[inline(always)]
    pub fn step(&mut self) -> Step {
        match self.loaded.take() {
            Some(loaded) => {
                self.run_slice(loaded);
                Step::Ran
            }
            None if self.host.all_off() => Step::AllOff,
            None => self.schedule(),
        }
    }

    /// The context of `vcpu`, just picked. The pCPU that ran it last
    /// releases the scheduler lock after its put and only then saves the
    /// context back into its slot (`vcpu_put`), so a vCPU woken in between
    /// (an SGI from its sibling as it blocks in WFI) can be picked here
    /// before the context is back: wait for it, a few hundred
    /// instructions. `None` if it does not come back within
    /// [`CONTEXT_WAIT_MS`].
    fn take_context(&self, vm: &Vm<M>, vcpu: VcpuId) -> Option<Box<VcpuContext<M::Saved>>> {
        let slot = &vm.vcpus[usize::from(vcpu.index)];
        // Almost always back already: the deadline only once it is not.
        if let Some(ctx) = slot.lock().take() {
            return Some(ctx);
        }
        let give_up = self
            .machine
            .counter()
            .saturating_add(self.ms_to_ticks(CONTEXT_WAIT_MS));
        loop {
            if let Some(ctx) = slot.lock().take() {
                return Some(ctx);
            }
            if self.machine.counter() >= give_up {
                return None;
            }
            core::hint::spin_loop();
        }
    }

    fn ms_to_ticks(&self, ms: u64) -> u64 {
        self.machine.counter_frequency() * ms / 1000
    }

    fn vm(&self, vcpu: VcpuId) -> &'h Vm<M> {
        &self.host.vms[usize::from(vcpu.vm.0)]
    }

    /// Picks the next vCPU and loads it, or idles.
    fn schedule(&mut self) -> Step {
        let host = self.host;
        let now = self.machine.counter();
        let next = {
            let mut s = host.sched.lock();
            s.expire_timers_on(self.pcpu, now, |vcpu, wakeup| {
                self.woken(vcpu, wakeup);
            });
            let next = s.pick_next(self.pcpu, now);
            if let Some(vcpu) = next {
                self.pick = Picked::read(&s, vcpu, self.pcpu);
                self.pick_fresh = true;
            }
            next.map(|vcpu| (vcpu, s.steal_ticks(vcpu, now).unwrap_or(0)))
        };
        let Some((vcpu, steal_ticks)) = next else {
            self.idle();
            self.forward_console_input(None);
            return Step::Idle;
        };
        if let Some(loaded) = self.load_picked(vcpu, steal_ticks) {
            self.loaded = Some(loaded);
            self.vm(vcpu).spin.lock().resumed(vcpu.index);
        }
        Step::Ran
    }

    /// Loads the target of the directed yield just applied, once the
    /// yielder is saved: the scheduler made it Running here under the
    /// lock of the switch, where `Runner::yielded` also read what its
    /// first pass needs (`pick`) and marked it resumed in the spin state,
    /// so no `pick_next` and no second lock.
    /// The target is a sibling: `vm`, the yielder's VM, is its VM.
    fn load_handover(&mut self, vm: &'h Vm<M>) -> Option<Loaded<M::Saved>> {
        let (vcpu, steal_ticks) = self.handover.take()?;
        self.pick_fresh = true;
        self.load_picked_of(vm, vcpu, steal_ticks)
    }

    /// Loads `vcpu`, which the scheduler made Running on this pCPU, with
    /// `steal_ticks` for its stolen-time record. `None` if its context
    /// never came back ([`Self::take_context`]): then it is put back.
    fn load_picked(&mut self, vcpu: VcpuId, steal_ticks: u64) -> Option<Loaded<M::Saved>> {
        self.load_picked_of(self.vm(vcpu), vcpu, steal_ticks)
    }

    /// [`Self::load_picked`] with `vcpu`'s VM, `vm`, already at hand.
    #[inline(always)]
    fn load_picked_of(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        steal_ticks: u64,
    ) -> Option<Loaded<M::Saved>> {
        debug_assert_eq!(vm.id, vcpu.vm);
        let Some(mut ctx) = self.take_context(vm, vcpu) else {
            self.context_missing(vcpu);
            return None;
        };
        self.vcpu_load(vm, vcpu, &mut ctx, steal_ticks);
        Some(Loaded { vcpu, ctx })
    }

    /// `vcpu`, which the scheduler made Running here, has no context to
    /// load ([`Self::take_context`] gave up): the scheduler gave this pCPU
    /// a vCPU another pCPU holds and does not give back. A bug, caught
    /// here rather than by running it twice: logged, and the vCPU put
    /// back as if it had yielded.
    #[cold]
    #[inline(never)]
    fn context_missing(&mut self, vcpu: VcpuId) {
        log::error!(
            "{vcpu}: picked on pCPU {} while loaded elsewhere",
            self.pcpu
        );
        self.pick_fresh = false;
        let now = self.machine.counter();
        let mut s = self.host.sched.lock();
        let _ = s.put(vcpu, self.pcpu, now, PutReason::Yield);
    }

    /// Runs the loaded vCPU through one full pass: the VM's state, the
    /// slice, the trap configuration and the slice timer; then the guest
    /// until an exit that needs the scheduler; then applies the decision.
    /// A directed yield applied inside the guest loop switches to its
    /// target there ([`Self::switch_in_place`]); one applied here (a spin
    /// the sampler found) loads the target for a pass of its own at once,
    /// in the same call.
    fn run_slice(&mut self, mut loaded: Loaded<M::Saved>) {
        let host = self.host;
        loop {
            let vcpu = loaded.vcpu;
            let vm = self.vm(vcpu);
            if vm.state() != VmState::Running {
                self.power_off(vm, loaded);
                return;
            }
            let picked = if core::mem::replace(&mut self.pick_fresh, false) {
                let woken_at = loaded.ctx.blocked_at.take();
                self.watch.start(self.machine.counter(), woken_at);
                self.pick
            } else {
                // The WFI deadlines of vCPUs blocked on this pCPU fall due
                // while it runs this one, not only when it passes through
                // the scheduler: wake them now (they queue for a pCPU), or
                // a vCPU that never yields would keep them asleep past
                // their timers.
                let now = self.machine.counter();
                let mut s = host.sched.lock();
                s.expire_timers_on(self.pcpu, now, |v, wakeup| self.woken(v, wakeup));
                Picked::read(&s, vcpu, self.pcpu)
            };
            let Some(slice_end) = picked.slice_end else {
                self.put(vm, loaded, PutReason::Yield);
                return;
            };
            self.arm_pass(vm, vcpu, &picked, slice_end);
            let mut applied = self.run_guest(vm, &mut loaded, slice_end);
            // A directed yield may have switched the vCPU in place.
            let vcpu = loaded.vcpu;
            if self.watching && applied == Applied::Resume {
                applied = self.sample_for_spin(vm, vcpu, &mut loaded.ctx);
            }
            let reason = match applied {
                Applied::Resume => {
                    if self.machine.counter() < slice_end
                        || self.extend_slice(vm, vcpu, &loaded.ctx)
                    {
                        self.loaded = Some(loaded);
                        return;
                    }
                    PutReason::SliceExpired
                }
                Applied::Put(PutReason::PowerOff) => {
                    self.power_off(vm, loaded);
                    return;
                }
                Applied::Put(reason) => reason,
                Applied::Yielded | Applied::Lent => {
                    self.vcpu_put(vm, vcpu, loaded);
                    match self.load_handover(vm) {
                        Some(target) => {
                            loaded = target;
                            continue;
                        }
                        None => return,
                    }
                }
            };
            self.put(vm, loaded, reason);
            return;
        }
    }

    /// Takes the loaded vCPU's sample if one is due
    /// (`el2::sched::spinwatch`); a vCPU that spins gets what a trapped
    /// WFE gets ([`Self::on_spin`]). Out of line: most passes take no
    /// sample.
    #[inline(never)]
    fn sample_for_spin(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
    ) -> Applied {
        let now = self.machine.counter();
        let machine = &self.machine;
        let interrupt_waits = || {
            let (vmcr, any_active) = machine.live_interface();
            let lrs = (0..ctx.lrs.used).map(|index| Lr::decode(machine.read_lr(index)));
            signalled_at_once(lrs, vmcr, any_active, ctx.regs.pstate)
        };
        // The guest's code is read only for the boosts (as its wait words
        // are: `on_spin`).
        let looks_like_wait = || {
            vm.config.boost && waitword::looks_like_wait(&ctx.regs, &GuestMemory::new(machine, vm))
        };
        if self
            .watch
            .sample(&ctx.regs, now, interrupt_waits, looks_like_wait)
            != Sample::Spinning
        {
            return Applied::Resume;
        }
        vm.spin.lock().stats_mut().record_sampled_spin();
        self.on_spin(vm, vcpu, ctx)
    }

    /// The trap configuration and the timer of one full pass of `vcpu`
    /// (what `picked` says of it, inside a slice ending at `slice_end`):
    /// HCR_EL2's WFx traps, and the slice timer armed for the slice's end,
    /// or the next blocked vCPU's wake-up or the next spin sample if
    /// earlier (its interrupt exits the guest to the timer expiry or the
    /// sample of [`Self::run_slice`]).
    #[inline(always)]
    fn arm_pass(&mut self, vm: &Vm<M>, vcpu: VcpuId, picked: &Picked, slice_end: u64) {
        let hcr = vm.wfx.hcr_for(guest_hcr(), vcpu.index, picked.runnable);
        self.machine.set_traps(hcr);
        // Where WFE traps, the spins that do not execute it are looked for
        // by sampling.
        self.watching = onspin::hcr_traps_wfe(hcr);
        let mut deadline = picked.next_deadline.map_or(slice_end, |d| d.min(slice_end));
        if self.watching {
            deadline = deadline.min(self.watch.due());
        }
        self.machine.arm_timer(deadline);
        if self.watching {
            // Read after the write: under QEMU's icount it can hand the
            // turn to another pCPU until the deadline.
            self.watch.entered(self.machine.counter(), deadline);
        }
    }

    /// Enters the guest, handles each exit and applies its decision, until
    /// one that needs more than re-entering (or that re-entering in place
    /// would not see: an interrupt, a slice end). A directed yield to a
    /// sibling switches `loaded` to it here ([`Self::switch_in_place`]) and
    /// goes on with the sibling, inside the same slice (`slice_end`).
    fn run_guest(
        &mut self,
        vm: &'h Vm<M>,
        loaded: &mut Loaded<M::Saved>,
        slice_end: u64,
    ) -> Applied {
        loop {
            let vcpu = loaded.vcpu;
            let attention = 1u64 << vcpu.index;
            // The shortest path, taken by the hardware layer on the exit
            // itself: a call whose reply is fixed for the VM is answered
            // from the dispatcher's precomputed replies. No look at the
            // clock: the slice timer is armed, so a slice that ended
            // meanwhile exits again at once as an interrupt, which comes
            // here.
            let fast = FastExit {
                constants: vm.dispatcher.constants(),
                counts: vm.dispatcher.vcpu_counts(vcpu.index),
                attention: &vm.irq_attention,
                mask: attention,
            };
            let applied = loop {
                // New interrupts for this vCPU (or a maintenance request)
                // since its list registers were last written: one load when
                // there are none.
                if vm.irq_attention.load(Ordering::Acquire) & attention != 0 {
                    self.refresh_and_deliver(vm, vcpu, &mut loaded.ctx);
                }
                let (vector, esr) = self.machine.enter_guest(&mut loaded.ctx, &fast);
                let outcome = match self.directed_yield_exit(vm, vcpu, &mut loaded.ctx, vector, esr)
                {
                    Some(applied) => (applied != Applied::Resume).then_some(applied),
                    None => self.handle_and_apply(vm, vcpu, &mut loaded.ctx, vector, esr),
                };
                if let Some(applied) = outcome {
                    break applied;
                }
            };
            if applied != Applied::Yielded {
                return applied;
            }
            if let Err(applied) = self.switch_in_place(vm, loaded, slice_end) {
                return applied;
            }
        }
    }

    /// A directed yield just applied, seen from inside [`Self::run_guest`]:
    /// saves the yielder, loads the target in its place in `loaded`, and
    /// gives the target the first pass [`Self::run_slice`] would (the
    /// sample watch restarted, the traps and the timer set), so that it
    /// enters the guest without the way back through `run_slice`: every
    /// directed yield's path. The slice goes on (`slice_end`, the
    /// yielder's, which the target inherits). A VM stopped meanwhile is
    /// seen at the target's next exit, as for any running vCPU: the pCPU
    /// that stops it sends this one an IPI (`Runner::stop_vm`), since the
    /// scheduler has the target running here. `Err(Applied::Yielded)`,
    /// `loaded` still the yielder and no hand-over left, if the target's
    /// context is not to be had ([`Self::context_missing`] puts the target
    /// back): `run_slice` then saves the yielder and goes back to the
    /// scheduler.
    #[inline(always)]
    fn switch_in_place(
        &mut self,
        vm: &'h Vm<M>,
        loaded: &mut Loaded<M::Saved>,
        slice_end: u64,
    ) -> Result<(), Applied> {
        let (target, steal_ticks) = self.handover.ok_or(Applied::Yielded)?;
        debug_assert_eq!(self.pick.slice_end, Some(slice_end));
        self.handover = None;
        let Some(ctx) = self.take_context(vm, target) else {
            self.context_missing(target);
            return Err(Applied::Yielded);
        };
        let yielder = core::mem::replace(loaded, Loaded { vcpu: target, ctx });
        self.vcpu_put_inline(vm, yielder.vcpu, yielder);
        self.vcpu_load_inline(vm, target, &mut loaded.ctx, steal_ticks);
        let woken_at = loaded.ctx.blocked_at.take();
        self.watch.start(self.machine.counter(), woken_at);
        let picked = self.pick;
        self.arm_pass(vm, target, &picked, slice_end);
        Ok(())
    }

    /// PV_SCHED_YIELD_TO, the PV lock waiters' one hot call whose reply is
    /// not constant: answered and applied in the guest loop itself,
    /// without the exit's decode, the general dispatch and the frame of
    /// [`Self::handle_and_apply`] (docs/benchmarks.md, "Costs"). `None`,
    /// with nothing done, for any other exit.
    #[inline(always)]
    fn directed_yield_exit(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        vector: u64,
        esr: u64,
    ) -> Option<Applied> {
        if !crate::trap::exit::is_hvc_call(vector, esr) {
            return None;
        }
        let next = vm
            .dispatcher
            .directed_yield(vcpu, &mut ctx.regs, vm.vcpu_count())?;
        vm.count_exit(&Exit::Hvc { imm: 0 });
        Some(match next {
            // Straight to the yield; anything else (a refused call resumes)
            // through `apply`.
            Next::YieldTo { target } => {
                #[cfg(test)]
                {
                    self.applied += 1;
                }
                self.yield_to(vm, vcpu, ctx, target)
            }
            other => self.apply_next(vm, vcpu, ctx, other),
        })
    }

    /// [`Self::apply`] of a bare `next`, out of line: the refused directed
    /// yields' path, kept out of the guest loop.
    #[inline(never)]
    fn apply_next(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        next: Next,
    ) -> Applied {
        self.apply(vm, vcpu, ctx, Decision::new(next))
    }

    /// One exit after the shortest paths (a constant call answered in the
    /// exit vector, [`Self::directed_yield_exit`]): decode it, handle it,
    /// apply the decision; `None` if the guest may go straight back in.
    /// Out of line, so that the loop around `enter_guest` stays small.
    #[inline(never)]
    fn handle_and_apply(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        vector: u64,
        esr: u64,
    ) -> Option<Applied> {
        // The syndrome, captured once: the fault address registers only
        // for the exits they describe.
        let (far, hpfar) = if Syndrome::has_fault_address(vector, esr) {
            self.machine.fault_address()
        } else {
            (0, 0)
        };
        let exit = Exit::decode(Syndrome {
            vector,
            esr,
            far,
            hpfar,
        });
        vm.count_exit(&exit);
        let decision = self.handle_exit(vm, vcpu, ctx, exit);
        let applied = self.apply(vm, vcpu, ctx, decision);
        // The fast path: a hypercall or an emulated access that leaves the
        // vCPU running inside its slice changes nothing the checks of the
        // full pass read, so the guest goes straight back in. Interrupts
        // (a slice tick, a reschedule IPI, a VM stopping) always take the
        // full pass, and the armed slice timer ends the slice.
        if applied == Applied::Resume && resumes_in_place(&exit) {
            return None;
        }
        Some(applied)
    }

    /// Puts the loaded vCPU with `reason` (not a power-off): the scheduler
    /// decides; the vCPU's PV "preempted" flag follows under its lock.
    fn put(&mut self, vm: &'h Vm<M>, mut loaded: Loaded<M::Saved>, reason: PutReason) {
        let vcpu = loaded.vcpu;
        let now = self.machine.counter();
        let mut s = self.host.sched.lock();
        let outcome = s.put(vcpu, self.pcpu, now, reason);
        // Written under the scheduler lock: once it is released another
        // pCPU may pick the vCPU and write 0, which must not be overtaken.
        if let Some(value) = outcome.ok().and_then(pv::preempted_on_put) {
            vm.write_preempted(&self.machine, vcpu.index, value);
        }
        if let Ok(outcome) = outcome {
            vm.spin
                .lock()
                .record_put(vcpu.index, loaded.ctx.regs.pstate, outcome);
        }
        drop(s);
        if outcome == Ok(PutOutcome::Blocked) {
            loaded.ctx.blocked_at = Some(loaded.ctx.regs.pc);
        }
        match outcome {
            Ok(PutOutcome::KeepRunning) => self.loaded = Some(loaded),
            Ok(_) => self.vcpu_put(vm, vcpu, loaded),
            Err(e) => {
                log::error!("{vcpu}: scheduler refused put: {e}");
                self.vcpu_put(vm, vcpu, loaded);
            }
        }
    }

    /// The loaded vCPU powers off (CPU_OFF, or its VM stops): save and
    /// release the context before the scheduler marks it Off (a CPU_ON
    /// then finds it in its slot), then see whether its VM stopped.
    fn power_off(&mut self, vm: &'h Vm<M>, loaded: Loaded<M::Saved>) {
        let vcpu = loaded.vcpu;
        self.vcpu_put(vm, vcpu, loaded);
        let now = self.machine.counter();
        let mut s = self.host.sched.lock();
        match s.put(vcpu, self.pcpu, now, PutReason::PowerOff) {
            Ok(outcome) => {
                if let Some(value) = pv::preempted_on_put(outcome) {
                    vm.write_preempted(&self.machine, vcpu.index, value);
                }
            }
            Err(e) => log::error!("{vcpu}: scheduler refused power-off: {e}"),
        }
        let all_off = s
            .vcpus(vm.id)
            .all(|v| s.power_state(v) == Some(crate::vcpu::PowerState::Off));
        drop(s);
        if all_off {
            self.vm_stopped(vm);
        }
    }

    /// Whether the running vCPU, whose slice has ended, may run on: it is
    /// inside a critical section (boosts on, its guest declares a lock or
    /// it runs with IRQs masked) and only its own VM's vCPUs wait; it
    /// then runs `onspin::SLICE_EXTENSION_US` longer.
    fn extend_slice(&mut self, vm: &'h Vm<M>, vcpu: VcpuId, ctx: &VcpuContext<M::Saved>) -> bool {
        // The spin state is a leaf lock: never held while taking the
        // scheduler's.
        let reason = vm.spin.lock().extension_reason(
            vm.lock_count_hint(&self.machine, vcpu.index),
            ctx.regs.pstate,
        );
        if reason.is_none() {
            return false;
        }
        let now = self.machine.counter();
        let ticks =
            self.machine.counter_frequency() * crate::sched::onspin::SLICE_EXTENSION_US / 1_000_000;
        let extended = self
            .host
            .sched
            .lock()
            .extend_slice(vcpu, self.pcpu, now, ticks)
            .is_some();
        if extended {
            vm.spin.lock().record_extension();
        }
        extended
    }

    /// Loads a vCPU onto this pCPU: its VM's stage 2, the vCPU's system
    /// registers and virtual CPU interface, and its PV records: "not
    /// preempted" and the stolen time it has accumulated (`steal_ticks`),
    /// both before it runs.
    fn vcpu_load(
        &mut self,
        vm: &Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        steal_ticks: u64,
    ) {
        self.vcpu_load_inline(vm, vcpu, ctx, steal_ticks);
    }

    /// [`Self::vcpu_load`] inlined: the directed yield's switch
    /// ([`Self::switch_in_place`]) would pay its call frame on every
    /// switch.
    #[inline(always)]
    fn vcpu_load_inline(
        &mut self,
        vm: &Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        steal_ticks: u64,
    ) {
        vm.write_preempted(&self.machine, vcpu.index, pv::preempted_on_load());
        vm.write_stolen_time(&self.machine, vcpu.index, steal_ticks);
        self.machine.load_vcpu(vm.registers, guest_hcr(), ctx);
        // Only a vCPU that uses its debug registers has them loaded
        // (`el2::trap::debug`); the others' accesses trap.
        if ctx.debug.load() {
            self.machine.load_debug(&ctx.debug.registers, vm.debug);
        }
        // Likewise the PMU (`el2::trap::pmu`).
        if ctx.pmu.load()
            && let Some(pmu) = vm.pmu
        {
            self.machine.load_pmu(&ctx.pmu.registers, pmu);
        }
        // The list registers are empty now; whatever waits for this vCPU
        // has its `irq_attention` bit set (see `vcpu_put`), so the first
        // entry's check fills them.
        ctx.lrs = machine::ListRegisterUse::default();
    }

    /// Saves the vCPU and gives its context back to its slot: what the
    /// guest did with its list registers goes back into the virtual GIC
    /// (an interrupt it left pending may now go to another vCPU), then
    /// its system registers. (Its PV "preempted" flag was written with the
    /// scheduler's decision, under the scheduler lock.) Takes the
    /// scheduler lock: call it without.
    fn vcpu_put(&mut self, vm: &'h Vm<M>, vcpu: VcpuId, loaded: Loaded<M::Saved>) {
        self.vcpu_put_inline(vm, vcpu, loaded);
    }

    /// [`Self::vcpu_put`] inlined, as [`Self::vcpu_load_inline`].
    #[inline(always)]
    fn vcpu_put_inline(&mut self, vm: &'h Vm<M>, vcpu: VcpuId, loaded: Loaded<M::Saved>) {
        let mut ctx = loaded.ctx;
        let mut woken = VcpuMask::EMPTY;
        let mut timer_entry = None;
        if ctx.lrs.used != 0 || ctx.lrs.underflow {
            let (read_back, used) = self.read_lrs(&ctx);
            timer_entry = hardware_timer_entry(&read_back[..used]);
            woken = vm
                .vgic
                .lock()
                .sync_back(vcpu.index, &read_back[..used])
                .without(vcpu.index);
            // Anything the guest had not finished with (pending or active),
            // or that did not fit, is back in the model: the vCPU's next
            // load must fill its list registers again. Without it, the
            // empty list registers it will be loaded with are all it is
            // owed — the cheap vCPU switch.
            let unfinished = read_back[..used]
                .iter()
                .any(|lr| lr.state != LrState::Invalid);
            if unfinished || ctx.lrs.underflow {
                // Marked, not woken: a wake-up is owed only for a new
                // interrupt, and WFI has already looked at these.
                vm.irq_attention
                    .fetch_or(1u64 << vcpu.index, Ordering::AcqRel);
            }
            for index in 0..ctx.lrs.used {
                self.machine.write_lr(index, 0);
            }
            ctx.lrs = machine::ListRegisterUse::default();
        }
        // A vCPU whose debug or PMU registers are not in the CPU costs a
        // byte test each here.
        if ctx.debug.in_cpu() {
            self.machine.save_debug(&mut ctx.debug.registers, vm.debug);
            ctx.debug.put();
        }
        if ctx.pmu.in_cpu()
            && let Some(pmu) = vm.pmu
        {
            self.machine.save_pmu(&mut ctx.pmu.registers, pmu);
            ctx.pmu.put();
            woken = woken.union(self.pmu_line_saved(vm, vcpu, &mut ctx));
        }
        self.machine.save_vcpu(&mut ctx);
        // The timer is off in hardware now: its PPI is ended for the next
        // vCPU, and the line the vGIC keeps while this one is away is the
        // one it left (it can only rise then, at `note_vtimer`'s
        // deadline). Usually there is nothing to do: one check.
        let line = vtimer::line_of(ctx.vtimer.ctl);
        if self.vtimer_ppi != PhysicalIrq::Inactive || line != ctx.vtimer.line {
            self.put_timer(vm, vcpu.index, &mut ctx, timer_entry, line);
        }
        vm.note_vtimer(vcpu.index, &ctx);
        *vm.vcpus[usize::from(vcpu.index)].lock() = Some(ctx);
        if !woken.is_empty() {
            self.deliver(vm, None, woken);
        }
    }

    /// `vcpu_put`'s part for a timer whose PPI is held or whose `line`, as
    /// saved, is not the one the vGIC has (`timer_entry`: its hardware
    /// list register entry as read back, if it had one).
    #[cold]
    #[inline(never)]
    fn put_timer(
        &mut self,
        vm: &Vm<M>,
        vcpu: u16,
        ctx: &mut VcpuContext<M::Saved>,
        timer_entry: Option<LrState>,
        line: bool,
    ) {
        if self.vtimer_ppi.put(timer_entry) {
            self.machine.deactivate_vtimer_ppi();
        }
        // (Only this vCPU could hear of it: a line that rose since its WFI
        // looked is at or before the deadline its wait was given.)
        let _ = self.set_vtimer_line(vm, vcpu, ctx, line);
    }

    /// The list registers `ctx` uses, read back and decoded.
    fn read_lrs(&self, ctx: &VcpuContext<M::Saved>) -> ([Lr; MAX_LIST_REGISTERS], usize) {
        let mut lrs = [Lr::default(); MAX_LIST_REGISTERS];
        let used = ctx.lrs.used.min(MAX_LIST_REGISTERS);
        for (index, lr) in lrs.iter_mut().enumerate().take(used) {
            *lr = Lr::decode(self.machine.read_lr(index));
        }
        (lrs, used)
    }

    /// Brings the running `vcpu`'s list registers up to date: what the
    /// guest did with the current ones goes back into the virtual GIC, and
    /// its most urgent deliverable interrupts go in (with the underflow
    /// maintenance interrupt if more wait than fit). Returns the other
    /// vCPUs the change made something deliverable to, and whether `vcpu`
    /// itself has an interrupt to take (what ends a WFI).
    fn vgic_refresh(
        &mut self,
        vm: &Vm<M>,
        vcpu: u16,
        ctx: &mut VcpuContext<M::Saved>,
    ) -> (VcpuMask, bool) {
        // Cleared before the virtual GIC is read: an injection after this
        // point sets it again and is picked up at the next entry.
        vm.irq_attention
            .fetch_and(!(1u64 << vcpu), Ordering::AcqRel);
        let (read_back, used) = self.read_lrs(ctx);
        // The timer's line as it is now (the guest changes it without a
        // trap): resampled before the list registers are read back into
        // the vGIC and filled again (`el2::devices::vtimer`).
        let line = vtimer::line_of(self.machine.vtimer_control());
        let mut gic = vm.vgic.lock();
        let mut woken = exits::follow_vtimer_line(&mut gic, vcpu, &mut ctx.vtimer, line);
        woken |= gic.sync_back(vcpu, &read_back[..used]);
        let mut lrs = gic.fill(vcpu, self.machine.list_registers());
        let underflow = gic.underflow_needed(vcpu);
        // `VGic::has_pending`, walking the interrupts a third time only
        // when some did not fit: otherwise whatever is deliverable is in
        // the list registers just filled.
        let pending =
            lrs.iter().any(|lr| lr.state.is_pending()) || (underflow && gic.has_pending(vcpu));
        woken |= gic.take_wakeups();
        drop(gic);
        let timer = layout::TIMER.virt.intid();
        let refill = self.vtimer_ppi.refill(
            hardware_timer_entry(&read_back[..used]),
            lrs.state_of(timer),
            line,
        );
        if refill.map {
            lrs.map_hardware(timer, self.machine.vtimer_ppi());
        }
        if refill.deactivate {
            self.machine.deactivate_vtimer_ppi();
        }
        // A fresh set of list registers; the ones the previous set used
        // beyond it are cleared.
        let values = lrs.values();
        let fresh = lrs.len();
        let end = fresh.max(ctx.lrs.used).min(self.machine.list_registers());
        for (index, &value) in values.iter().enumerate().take(end) {
            self.machine
                .write_lr(index, if index < fresh { value } else { 0 });
        }
        ctx.lrs.used = fresh;
        if underflow != ctx.lrs.underflow {
            ctx.lrs.underflow = underflow;
            self.machine.set_interface_control(underflow);
        }
        (woken.without(vcpu), pending)
    }

    /// [`Self::vgic_refresh`], then wakes whom it names. Returns whether
    /// `vcpu` has an interrupt to take. Out of line: the run loop calls it
    /// only when something is new for the vCPU.
    #[inline(never)]
    fn refresh_and_deliver(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
    ) -> bool {
        let (woken, pending) = self.vgic_refresh(vm, vcpu.index, ctx);
        self.deliver(vm, Some(vcpu.index), woken);
        pending
    }

    /// After a virtual GIC change made an interrupt deliverable to
    /// `targets`: marks their list registers out of date and gets each to
    /// look — a blocked one is woken, one running on another pCPU gets the
    /// reschedule SGI, which exits it to refill. `running` is the vCPU this
    /// pCPU runs, which needs no more than the mark. Call without the
    /// scheduler lock.
    fn deliver(&self, vm: &Vm<M>, running: Option<u16>, targets: VcpuMask) {
        if targets.is_empty() {
            return;
        }
        // After the vGIC change (the caller has released its lock), before
        // the wake-up: the target's next entry sees the mark.
        vm.irq_attention.fetch_or(targets.bits(), Ordering::AcqRel);
        let others = match running {
            Some(index) => targets.without(index),
            None => targets,
        };
        if others.is_empty() {
            return;
        }
        let now = self.machine.counter();
        let mut s = self.host.sched.lock();
        for index in others.iter() {
            let target = VcpuId { vm: vm.id, index };
            match s.wake(target, now) {
                Ok(Wakeup::Kicked {
                    running_on: Some(other),
                }) => {
                    if other != self.pcpu {
                        self.machine.send_reschedule(other);
                    }
                }
                Ok(wakeup) => self.woken(target, wakeup),
                Err(_) => {}
            }
        }
    }

    /// Waits until a timer deadline of this pCPU, an IPI, or the
    /// safety-net recheck.
    fn idle(&mut self) {
        let now = self.machine.counter();
        let recheck = now + self.ms_to_ticks(IDLE_RECHECK_MS);
        let deadline = self
            .host
            .sched
            .lock()
            .next_deadline_on(self.pcpu)
            .map_or(recheck, |d| d.min(recheck));
        self.machine.wait_for_interrupt(deadline);
    }

    /// Interactive input: when a single VM runs, it owns the console, and
    /// the bytes typed on it go to that VM's UART (raising its receive
    /// interrupt). The boot CPU polls the console at its hypervisor
    /// interrupts (the slice tick, at least once a slice, while it runs a
    /// vCPU) and whenever it wakes from idle (at least every
    /// `IDLE_RECHECK_MS`), at most once a millisecond; bytes the guest's
    /// FIFO has no room for wait in the console's own FIFO. With several
    /// VMs, input is ignored (their output shares the console, prefixed
    /// with each VM's name). `running` is the vCPU this pCPU runs, if any.
    fn forward_console_input(&mut self, running: Option<VcpuId>) {
        let host = self.host;
        let [vm] = host.vms.as_slice() else {
            return;
        };
        if self.pcpu != 0 || vm.state() != VmState::Running {
            return;
        }
        // At most once per millisecond: faster than anyone types (and than
        // a 115200-baud line fills a 16-byte FIFO), and off the
        // vCPU-switch path.
        let now = self.machine.counter();
        if now < host.next_input_poll.load(Ordering::Relaxed) {
            return;
        }
        host.next_input_poll
            .store(now + self.ms_to_ticks(1), Ordering::Relaxed);
        let targets = {
            let mut uart = vm.console.lock();
            while uart.rx_space() > 0 {
                let Some(byte) = self.machine.console_read_byte() else {
                    break;
                };
                uart.push_input(byte);
            }
            devices::uart_line_follow(vm, &uart)
        };
        let running = running.filter(|v| v.vm == vm.id).map(|v| v.index);
        self.deliver(vm, running, targets);
    }
}

/// `us` microseconds in ticks of a counter running at `hz` (saturating).
fn us_to_ticks(hz: u64, us: u64) -> u64 {
    hz.saturating_mul(us) / 1_000_000
}

/// The state of the virtual timer's hardware entry among list registers
/// read back, if there is one (`el2::devices::vtimer::PhysicalIrq`).
fn hardware_timer_entry(read_back: &[Lr]) -> Option<LrState> {
    let timer = layout::TIMER.virt.intid();
    read_back
        .iter()
        .find(|lr| lr.intid == timer && lr.physical.is_some())
        .map(|lr| lr.state)
}

/// Whether the guest may be re-entered at once after `exit`'s decision
/// was applied with [`Applied::Resume`]: the exits a guest makes on its own
/// (hypercalls, emulated MMIO and system registers, aborts injected back)
/// change neither the VM's state nor this vCPU's slice, so the VM state,
/// the slice end, the trap configuration and the slice timer stay as the
/// last full pass set them. A policy change (PVLOCK_SET_WFX_POLICY) or a
/// vCPU queued here by a kick reaches HCR_EL2 at the next interrupt exit
/// (the slice tick at the latest), as KVM applies its WFx traps at
/// vcpu_load.
fn resumes_in_place(exit: &Exit) -> bool {
    matches!(
        exit,
        Exit::Hvc { .. }
            | Exit::Smc { .. }
            | Exit::DataAbort(_)
            | Exit::InstructionAbort { .. }
            | Exit::SystemRegister(_)
            | Exit::FpAccess
    )
}
