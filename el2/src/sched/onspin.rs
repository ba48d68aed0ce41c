//! Directed yield for a spinning vCPU: KVM's `kvm_vcpu_on_spin` as a pure
//! decision, the WFE trap policy, and the counters for both (docs/abi.md §6).
//!
//! A guest vCPU that spins on a lock executes WFE in its wait loop (Linux
//! arm64 `smp_cond_load_acquire` / `__cmpwait`). With HCR_EL2.TWE set the
//! WFE traps (ESR EC 0x01, TI = 1 WFE or 3 WFET; [`crate::trap::exit::Exit::Wfx`]),
//! and the hypervisor can do better than let it spin: give the rest of its
//! time slice to a sibling vCPU of the same VM that is waiting for a pCPU —
//! with luck the lock holder, which then releases the lock.
//!
//! # The decision ([`on_spin`])
//!
//! KVM's `kvm_vcpu_on_spin(me, yield_to_kernel_mode)` (`virt/kvm/kvm_main.c`),
//! reached from arm64's `kvm_handle_wfx` with `vcpu_mode_priv(vcpu)`, scans
//! the VM's vCPUs round robin, starting after `kvm->last_boosted_vcpu`, and
//! skips, in this order:
//! 1. the spinner itself;
//! 2. vCPUs that are not runnable-and-waiting ([`Candidate::preempted`]:
//!    running, blocked, off);
//! 3. when the spinner is in kernel mode, vCPUs preempted in user mode
//!    ([`Candidate::preempted_in_user_mode`]) — unless they have a pending
//!    (virtual) interrupt ([`Candidate::has_pending_virtual_interrupt`]),
//!    seed 003 "Boost vCPU candidate in user mode which is delivering
//!    interrupt" (applied upstream): an IPI receiver in user mode is what
//!    a kernel spinner waiting for a TLB shootdown needs to run;
//! 4. vCPUs that are themselves in a spin loop, unless their `dy_eligible`
//!    flag says yes — a flag that toggles on every look
//!    (`kvm_vcpu_eligible_for_directed_yield`; [`SpinState`]), so a
//!    spinning sibling is skipped every other time instead of always.
//!
//! It tries `yield_to` on the survivors in order, stops at the first
//! success (recording it in `last_boosted_vcpu`), and gives up after three
//! failed attempts.
//!
//! On top of that, seed 000 ("Scaling Guest OS Critical Sections with
//! boosting") prefers candidates likely to be in a critical section. This
//! module does it the way that series' review asked:
//! - the candidate's interrupt-mask state when it was descheduled is the
//!   hypervisor's own observation (PSTATE.I of its saved SPSR,
//!   [`Descheduled::irqs_masked`]; x86 `last_guest_irq_disabled`), no ABI;
//! - instead of the guest kernel's `preempt_count` — an internal the review
//!   refused to make guest/host ABI — the guest declares held locks in an
//!   explicit, documented field of the PV-lock record
//!   (`pvlock_abi::pvlock`, `lock_count` at offset 8), read as an
//!   untrusted hint ([`Candidate::lock_count_hint`]; values above
//!   [`MAX_PLAUSIBLE_LOCK_COUNT`] are ignored);
//! - boosting only *reorders*: boosted candidates (lock holder, IRQs
//!   masked, pending interrupt; [`YieldReason`]) come first, in round-robin
//!   order, then the plain round robin. The series instead *skipped* every
//!   candidate that was not boosted, which turns a hint into a veto.
//!
//! Ahead of every boost, with boosts on, come the candidates whose wait
//! has ended: taken off while spinning, and the word their wait loop
//! polls has changed since ([`super::waitword`], [`Candidate::wait`]);
//! they are not looked at (their `dy_eligible` does not toggle). A
//! candidate whose word has not changed would only spin again and is left
//! out: the one skip this module adds to KVM's.
//!
//! The answer is a [`YieldPlan`] of at most [`MAX_ATTEMPTS`] (3)
//! candidates, each with its reason. Candidates come from the spinner's
//! own VM only — the API takes one VM's vCPUs, indexed by vCPU index — and
//! `Scheduler::yield_to` refuses another VM's vCPU anyway, so a guest's
//! hints (its lock counts, even a hostile one's) can only reorder its own
//! vCPUs within time it already had.
//!
//! Because boosted candidates can come from anywhere in the round, the
//! scan looks at every sibling until three boosted candidates are found
//! (KVM stops at its first successful yield), so a spinning sibling's
//! `dy_eligible` toggles once per [`on_spin`] that reaches it.
//!
//! # WFx trap policy ([`TrapPolicy`], [`trap_wfe`], [`WfxPolicies`])
//!
//! KVM clears HCR_EL2.TWE while the pCPU runs a single task (no overcommit:
//! a spinning vCPU wastes nobody's time and wakes fastest by itself) and
//! sets it otherwise; `kvm-arm.wfe_trap_policy=trap|notrap` overrides.
//! Here the policy is per vCPU, as seed 002 makes x86's exit control: each
//! VM's description gives a policy for the VM (`wfe-trap`) and exceptions
//! for single vCPUs (`wfe-trap-vcpus`), and a control VM (`control = "on"`)
//! changes any vCPU's policy at run time with PVLOCK_SET_WFX_POLICY
//! ([`pvlock_abi::control`]). Whether WFI traps (HCR_EL2.TWI) is fixed per
//! VM (`wfi-trap`). [`WfxPolicies`] holds one VM's settings and computes
//! HCR_EL2 from them ([`hcr_traps`]). The enum itself lives in `platform`
//! ([`platform::TrapPolicy`], re-exported here), since the VM binding
//! parses it.
//!
//! Under QEMU TCG a WFE never traps whatever TWE says (docs/abi.md §6, "QEMU
//! caveat"), so on QEMU the WFE trap is only reached by unit tests; the
//! decision is reached end to end by the spins the runner finds by
//! sampling where TWE is set ([`super::spinwatch`]) and by the
//! directed-yield hypercall ([`pvlock_abi::directed_yield`]); WFI traps
//! normally, so `wfi-trap` has a visible effect there.
//!
//! # What the runner (`el2::run`) does
//!
//! Per VM it keeps one [`VmSpin`] (`last_boosted`, each vCPU's [`SpinState`]
//! and [`Descheduled`] snapshot, the VM's [`SpinStats`]) behind its own
//! lock (lock order: scheduler, `VmSpin`, and under it only the virtual
//! GIC, a leaf; `el2/src/run/mod.rs` has the whole order). Decisions and snapshots are made with the
//! scheduler lock held too, so that they describe the scheduler state they
//! were made on. Then:
//! - **Every guest entry**: HCR_EL2 = the VM's
//!   [`WfxPolicies::hcr_for`]`(guest_hcr, vcpu, runnable)`, with `runnable`
//!   = `scheduler.runnable_on(pcpu)` read under the lock the run loop
//!   already takes for `slice_end`. The [`WfxPolicies`] are atomic per
//!   vCPU and take no lock, so that a control VM's
//!   [`crate::trap::decision::Next::SetWfxPolicy`] can update them from
//!   another pCPU; each affected vCPU picks the change up at its next
//!   entry.
//! - **vcpu_load**: [`VmSpin::resumed`] (the vCPU is back from its spin,
//!   if it was in one).
//! - **Every `put`** (still under the scheduler lock it ran under):
//!   [`VmSpin::record_put`] with the vCPU's saved SPSR_EL2
//!   (`ctx.regs.pstate`) and the [`PutOutcome`]; after a successful
//!   `yield_to` (on-spin, PV_SCHED_YIELD_TO, KICK), [`VmSpin::descheduled`]
//!   for the yielder the same way. Never read a sibling's context at
//!   decision time instead: it may be locked by the pCPU that runs it,
//!   which may be waiting for the scheduler lock.
//! - **PSCI CPU_ON** of a vCPU: [`VmSpin::reset_vcpu`]; **SYSTEM_RESET**:
//!   [`VmSpin::reset`].
//! - **Every WFx exit**: [`SpinStats::record_wfx`].
//! - **A sample that finds a spin** ([`super::spinwatch`]):
//!   [`SpinStats::record_sampled_spin`], then the same as a WFE trap.
//! - **WFE / WFET** (ELR already stepped past it): under the scheduler lock,
//!   build one [`Candidate`] per vCPU of the VM ([`VmSpin::candidate`]; the
//!   spinner's own entry is ignored) with `preempted` =
//!   `scheduler.can_yield_to(spinner, v, pcpu, now).is_ok()`, the lock
//!   count read from v's PV-lock record (`lock_count_hint()`, 0 without a
//!   record) and whether a virtual interrupt or a due virtual timer waits
//!   for v (the virtual GIC, the timer deadline saved at its put); call
//!   [`VmSpin::plan`] with [`Spinner::from_pstate`]; try
//!   `yield_to(spinner, choice.target, pcpu, now)` for each choice in
//!   order, reporting each to [`VmSpin::attempted`], and on the first
//!   success write the spinner's "preempted" flag (1) and leave the pCPU
//!   (its slice now belongs to the target). If none succeeds, fall back to
//!   what WFE did before (a plain yield; the spinner then stays "in its
//!   spin loop" while it waits, as a KVM spinner does inside `yield_to`,
//!   until its next vcpu_load), or, if the arch resumes the spinner
//!   without leaving the pCPU, call [`VmSpin::resumed`] for it at once. A
//!   WFET deadline needs no special care: the guest re-executes its wait
//!   loop and checks its own deadline.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::ops::AddAssign;
use core::sync::atomic::{AtomicU8, Ordering};

use super::waitword::{Wait, WaitWord};

use aarch64_cpu::registers::{HCR_EL2, SPSR_EL2};
use tock_registers::LocalRegisterCopy;

pub use platform::TrapPolicy;
use platform::VmConfig;

use crate::sched::PutOutcome;
use crate::trap::exit::{Exit, WfxKind};
use crate::vcpu::VcpuId;

/// At most this many candidates are offered per spin: KVM's `try = 3`,
/// "give up after three failed attempts" (docs/abi.md §6).
pub const MAX_ATTEMPTS: usize = 3;

/// Lock counts above this are treated as garbage and ignored: Linux's
/// `MAX_LOCK_DEPTH` (48), the most locks lockdep lets one task hold at once.
/// A guest that really held more would merely lose its boost.
pub const MAX_PLAUSIBLE_LOCK_COUNT: u32 = 48;

/// Whether a saved PSTATE (SPSR_EL2) is a privileged mode: anything but
/// AArch64 EL0t or AArch32 User. Both have `M[3:0]` = 0 (Arm ARM
/// "SPSR_EL2": `M[4]` selects AArch32, User is 0b10000), so `M[3:0]` alone
/// decides. KVM's `vcpu_mode_priv`, what arm64 `kvm_handle_wfx` passes as
/// `yield_to_kernel_mode`.
pub fn pstate_in_kernel(spsr: u64) -> bool {
    LocalRegisterCopy::<u64, SPSR_EL2::Register>::new(spsr).read(SPSR_EL2::M) != 0
}

/// Whether a saved PSTATE (SPSR_EL2) has IRQs masked (PSTATE.I, bit 7).
pub fn pstate_irqs_masked(spsr: u64) -> bool {
    LocalRegisterCopy::<u64, SPSR_EL2::Register>::new(spsr).is_set(SPSR_EL2::I)
}

/// The vCPU that trapped on WFE and the mode it was in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spinner {
    /// The spinning vCPU.
    pub vcpu: VcpuId,
    /// It spins in kernel mode (EL1): then candidates preempted in user
    /// mode are skipped unless an interrupt is pending for them.
    pub in_kernel: bool,
}

impl Spinner {
    /// `vcpu` with its saved PSTATE (SPSR_EL2 at the WFE trap).
    pub fn from_pstate(vcpu: VcpuId, spsr: u64) -> Self {
        Self {
            vcpu,
            in_kernel: pstate_in_kernel(spsr),
        }
    }
}

/// What the hypervisor saw of a vCPU when it last took it off a pCPU while
/// it stayed runnable; recorded from its saved SPSR_EL2
/// ([`VmSpin::descheduled`]). The x86 equivalents are
/// `preempted_in_kernel` and seed 000's `last_guest_irq_disabled`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Descheduled {
    /// It was in EL0 (AArch64 EL0t or AArch32 User).
    pub in_user_mode: bool,
    /// It had IRQs masked (PSTATE.I): likely inside a critical section.
    pub irqs_masked: bool,
}

impl Descheduled {
    /// From the vCPU's saved SPSR_EL2.
    pub fn from_spsr(spsr: u64) -> Self {
        Self {
            in_user_mode: !pstate_in_kernel(spsr),
            irqs_masked: pstate_irqs_masked(spsr),
        }
    }
}

/// One sibling of the spinner as [`on_spin`] sees it. Its spin-loop flags
/// are not here but in the caller's [`SpinState`] table, because looking
/// at the candidate changes them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Candidate {
    /// Runnable and not running: waiting for a pCPU (KVM `vcpu->preempted`
    /// and "not blocking"). The caller may pass the stricter
    /// `Scheduler::can_yield_to(..).is_ok()`, so that no attempt is spent
    /// on a vCPU that cannot take this pCPU. When false nothing else
    /// matters.
    pub preempted: bool,
    /// It was descheduled in user mode ([`Descheduled::in_user_mode`]).
    pub preempted_in_user_mode: bool,
    /// A virtual interrupt is pending for it, or its virtual timer is due
    /// (the seed's "boost vCPU in user mode which is delivering
    /// interrupt"; x86 KVM's `kvm_arch_dy_has_pending_interrupt`). False
    /// with boosts off ([`VmSpin::candidate`]).
    pub has_pending_virtual_interrupt: bool,
    /// It was descheduled with IRQs masked ([`Descheduled::irqs_masked`]).
    pub irqs_masked_when_descheduled: bool,
    /// The `lock_count` its guest declared in its PV-lock record
    /// (`lock_count_hint()`), 0 without a record. Untrusted: see
    /// [`plausible_lock_count`].
    pub lock_count_hint: u32,
    /// Whether it was taken off while spinning, and if so whether the word
    /// its wait loop polls still holds the value it spun on
    /// ([`super::waitword`]): [`Wait::Ended`], what it waited for has
    /// happened (a queued lock was handed to it) and it makes progress as
    /// soon as it runs; [`Wait::Waiting`], it would only spin again.
    /// [`Wait::Unknown`] with boosts off.
    pub wait: Wait,
}

impl Candidate {
    /// A vCPU waiting for a pCPU, as it was when descheduled, with the
    /// guest's lock count and no pending interrupt.
    pub fn preempted(desched: Descheduled, lock_count_hint: u32) -> Self {
        Self {
            preempted: true,
            preempted_in_user_mode: desched.in_user_mode,
            has_pending_virtual_interrupt: false,
            irqs_masked_when_descheduled: desched.irqs_masked,
            lock_count_hint,
            wait: Wait::Unknown,
        }
    }

    /// A vCPU that is not waiting for a pCPU (running, blocked, off).
    pub const NOT_PREEMPTED: Self = Self {
        preempted: false,
        preempted_in_user_mode: false,
        has_pending_virtual_interrupt: false,
        irqs_masked_when_descheduled: false,
        lock_count_hint: 0,
        wait: Wait::Unknown,
    };

    /// Whether it holds a guest lock by its (plausible) lock count.
    pub fn holds_lock(&self) -> bool {
        plausible_lock_count(self.lock_count_hint) > 0
    }

    /// Why it should be tried before the plain round robin, if at all; the
    /// strongest reason when several apply: a declared lock, then masked
    /// IRQs, then a pending interrupt.
    pub fn boost(&self) -> Option<YieldReason> {
        if self.holds_lock() {
            Some(YieldReason::LockHolder)
        } else if self.irqs_masked_when_descheduled {
            Some(YieldReason::IrqsMasked)
        } else if self.has_pending_virtual_interrupt {
            Some(YieldReason::PendingInterrupt)
        } else {
            None
        }
    }
}

/// A guest-declared lock count as the policy uses it: the value if it is at
/// most [`MAX_PLAUSIBLE_LOCK_COUNT`], else 0 (ignored: a wrapped decrement,
/// a stale or hostile write).
pub const fn plausible_lock_count(raw: u32) -> u32 {
    if raw <= MAX_PLAUSIBLE_LOCK_COUNT {
        raw
    } else {
        0
    }
}

/// How much longer a vCPU inside a critical section may run when its
/// slice ends ([`slice_extension_reason`]), once per slice: an eighth of
/// el2's 4 ms slice, ample for a critical section of thousands of
/// instructions, small enough that a guest claiming a lock all the time
/// gains little.
pub const SLICE_EXTENSION_US: u64 = 500;

/// Whether a vCPU whose time slice just ended should run a little longer
/// (`Scheduler::extend_slice`), and why: the seed 000 boost applied at
/// preemption time instead of at yield time. A vCPU inside a critical
/// section — its guest declared a held lock (`lock_count_hint`, untrusted,
/// through [`plausible_lock_count`]) or it runs with IRQs masked (`pstate`,
/// its SPSR_EL2) — that is preempted makes every sibling that needs the
/// lock wait a whole round of time slices; a short extension lets it leave
/// the section first. The scheduler bounds the rest: once per slice, only
/// when no other VM waits for the pCPU.
pub fn slice_extension_reason(lock_count_hint: u32, pstate: u64) -> Option<YieldReason> {
    if plausible_lock_count(lock_count_hint) > 0 {
        Some(YieldReason::LockHolder)
    } else if pstate_irqs_masked(pstate) {
        Some(YieldReason::IrqsMasked)
    } else {
        None
    }
}

/// One vCPU's spin-loop flags (KVM `vcpu->spin_loop`): whether it is in
/// [`on_spin`] right now — from the start of its own spin until it runs
/// again, so also while it waits after yielding — and whether the next look
/// at it finds it eligible. The caller keeps one per vCPU ([`VmSpin`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinState {
    in_spin_loop: bool,
    dy_eligible: bool,
}

impl SpinState {
    /// Not spinning, not eligible.
    pub const fn new() -> Self {
        Self {
            in_spin_loop: false,
            dy_eligible: false,
        }
    }

    /// Whether the vCPU is in a spin loop.
    pub const fn in_spin_loop(&self) -> bool {
        self.in_spin_loop
    }

    /// What the next look would answer for a vCPU in a spin loop.
    pub const fn dy_eligible(&self) -> bool {
        self.dy_eligible
    }

    /// The vCPU starts spinning (`kvm_vcpu_set_in_spin_loop(me, true)`).
    pub fn enter(&mut self) {
        self.in_spin_loop = true;
    }

    /// The vCPU is back from its spin: out of the loop, and not eligible
    /// during its next one (the end of `kvm_vcpu_on_spin`). Idempotent.
    pub fn leave(&mut self) {
        self.in_spin_loop = false;
        self.dy_eligible = false;
    }

    /// Another spinner looks at this vCPU as a candidate
    /// (`kvm_vcpu_eligible_for_directed_yield`): eligible if it is not in a
    /// spin loop, or if `dy_eligible` says so; a vCPU in a spin loop has
    /// `dy_eligible` toggled by every look.
    pub fn look(&mut self) -> bool {
        let eligible = !self.in_spin_loop || self.dy_eligible;
        if self.in_spin_loop {
            self.dy_eligible = !self.dy_eligible;
        }
        eligible
    }
}

/// Why a candidate is in the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum YieldReason {
    /// Plain round robin after `last_boosted` (KVM's only reason).
    RoundRobin,
    /// Boost: descheduled with IRQs masked (seed 000).
    IrqsMasked,
    /// Boost: its guest declared a held lock (`lock_count`; seed 000 as
    /// its review asked).
    LockHolder,
    /// Boost: a virtual interrupt is pending for it (seed 003).
    PendingInterrupt,
    /// First of all: the wait it was taken off in has ended
    /// ([`Wait::Ended`]: [`Candidate::wait`]).
    WaitEnded,
}

impl YieldReason {
    /// Number of reasons.
    pub const COUNT: usize = 5;

    /// Every reason, in [`Self::index`] order.
    pub const ALL: [Self; Self::COUNT] = [
        Self::RoundRobin,
        Self::IrqsMasked,
        Self::LockHolder,
        Self::PendingInterrupt,
        Self::WaitEnded,
    ];

    /// Its position in [`Self::ALL`] (a statistics index).
    pub const fn index(self) -> usize {
        match self {
            Self::RoundRobin => 0,
            Self::IrqsMasked => 1,
            Self::LockHolder => 2,
            Self::PendingInterrupt => 3,
            Self::WaitEnded => 4,
        }
    }

    /// A short name for logs and the summary.
    pub const fn name(self) -> &'static str {
        match self {
            Self::RoundRobin => "round-robin",
            Self::IrqsMasked => "irqs-masked",
            Self::LockHolder => "lock-holder",
            Self::PendingInterrupt => "pending-irq",
            Self::WaitEnded => "wait-ended",
        }
    }

    /// Whether this is a boost (anything but the plain round robin).
    pub const fn is_boost(self) -> bool {
        !matches!(self, Self::RoundRobin)
    }
}

impl fmt::Display for YieldReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_boost() {
            write!(f, "boost: {}", self.name())
        } else {
            f.write_str(self.name())
        }
    }
}

/// One candidate to try with `Scheduler::yield_to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The sibling to yield to (same VM as the spinner).
    pub target: VcpuId,
    /// Why it was chosen.
    pub reason: YieldReason,
}

/// The candidates to try, in order, at most [`MAX_ATTEMPTS`]: the caller
/// stops at the first one `yield_to` accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct YieldPlan {
    choices: [Option<Choice>; MAX_ATTEMPTS],
}

impl YieldPlan {
    /// No candidate.
    pub const EMPTY: Self = Self {
        choices: [None; MAX_ATTEMPTS],
    };

    fn push(&mut self, choice: Choice) -> bool {
        match self.choices.iter_mut().find(|c| c.is_none()) {
            Some(slot) => {
                *slot = Some(choice);
                true
            }
            None => false,
        }
    }

    /// Number of candidates.
    pub fn len(&self) -> usize {
        self.choices.iter().flatten().count()
    }

    /// Whether there is no candidate.
    pub fn is_empty(&self) -> bool {
        self.choices[0].is_none()
    }

    /// Whether [`MAX_ATTEMPTS`] candidates are already chosen.
    fn is_full(&self) -> bool {
        self.choices.iter().all(Option::is_some)
    }

    /// The candidates in the order to try them.
    pub fn iter(&self) -> impl Iterator<Item = Choice> + '_ {
        self.choices.iter().flatten().copied()
    }

    /// The `i`-th candidate.
    pub fn get(&self, i: usize) -> Option<Choice> {
        self.choices.get(i).copied().flatten()
    }
}

/// KVM's `kvm_vcpu_on_spin` as a pure decision (module documentation):
/// which siblings of `spinner` to try, in order, with why.
///
/// - `last_boosted`: the VM's `last_boosted_vcpu` (index of the last
///   successful target; 0 initially, as in KVM, so the first scan starts at
///   vCPU 1). Out-of-range values wrap.
/// - `vcpus`: one entry per vCPU of the spinner's VM, by vCPU index; the
///   spinner's own entry is ignored.
/// - `spin`: the VM's [`SpinState`]s, by vCPU index. The spinner's is
///   marked in its spin loop; each candidate looked at in a spin loop has
///   its `dy_eligible` toggled. Missing entries count as not spinning.
///
/// Never panics; a spinner outside `vcpus` or a VM of one vCPU gets an
/// empty plan.
pub fn on_spin(
    spinner: Spinner,
    last_boosted: u16,
    vcpus: &[Candidate],
    spin: &mut [SpinState],
) -> YieldPlan {
    let me = usize::from(spinner.vcpu.index);
    if let Some(state) = spin.get_mut(me) {
        state.enter();
    }
    let count = vcpus.len();
    let mut first = YieldPlan::EMPTY;
    let mut boosted = YieldPlan::EMPTY;
    let mut plain = YieldPlan::EMPTY;
    if count < 2 || me >= count {
        return first;
    }
    let start = (usize::from(last_boosted) + 1) % count;
    // The siblings that may take the spinner's slice, in round-robin
    // order: (slot, vCPU index, candidate).
    let siblings = (0..count)
        .map(|i| (start + i) % count)
        .filter(|&slot| slot != me)
        .filter_map(|slot| {
            let candidate = &vcpus[slot];
            let skipped = !candidate.preempted
                || candidate.wait == Wait::Waiting
                || (spinner.in_kernel
                    && candidate.preempted_in_user_mode
                    && !candidate.has_pending_virtual_interrupt);
            // `slot < count <= vcpus.len()`, and vCPU indices are u16.
            let index = u16::try_from(slot).ok()?;
            (!skipped).then_some((slot, index, candidate))
        });
    let target = |index| VcpuId {
        vm: spinner.vcpu.vm,
        index,
    };
    // First the siblings whose wait has ended: each is past its spin,
    // whatever its spin-loop flags say, so it is not looked at.
    let ended = |c: &Candidate| c.wait == Wait::Ended;
    for (_, index, _) in siblings.clone().filter(|(_, _, c)| ended(c)) {
        let choice = Choice {
            target: target(index),
            reason: YieldReason::WaitEnded,
        };
        if !first.push(choice) {
            break;
        }
    }
    for (slot, index, candidate) in siblings.filter(|(_, _, c)| !ended(c)) {
        if first.is_full() {
            break;
        }
        if !spin.get_mut(slot).is_none_or(SpinState::look) {
            continue;
        }
        let target = target(index);
        match candidate.boost() {
            Some(reason) => {
                boosted.push(Choice { target, reason });
                if boosted.is_full() {
                    break;
                }
            }
            None => {
                plain.push(Choice {
                    target,
                    reason: YieldReason::RoundRobin,
                });
            }
        }
    }
    for choice in boosted.iter().chain(plain.iter()) {
        if !first.push(choice) {
            break;
        }
    }
    first
}

/// Whether a vCPU about to enter the guest on a pCPU with
/// `runnable_on_this_pcpu` vCPUs wanting it (itself included:
/// `Scheduler::runnable_on`) should trap WFE. Auto traps only when more
/// than one vCPU wants the pCPU: alone, a spinning vCPU wastes no one's
/// time, and it sees the lock released soonest by staying on the CPU.
pub const fn trap_wfe(policy: TrapPolicy, runnable_on_this_pcpu: usize) -> bool {
    match policy {
        TrapPolicy::Auto => runnable_on_this_pcpu > 1,
        TrapPolicy::Trap => true,
        TrapPolicy::NoTrap => false,
    }
}

/// Whether `hcr` traps WFE (HCR_EL2.TWE): then the runner also samples
/// the vCPU for spins that do not execute WFE ([`super::spinwatch`]).
pub fn hcr_traps_wfe(hcr: u64) -> bool {
    LocalRegisterCopy::<u64, HCR_EL2::Register>::new(hcr).is_set(HCR_EL2::TWE)
}

/// `hcr` with HCR_EL2.TWE (bit 14, "Traps EL0 and EL1 execution of WFE
/// instructions to EL2") set if `trap`, clear otherwise; every other bit as
/// given.
pub fn hcr_el2_with_wfe_trap(hcr: u64, trap: bool) -> u64 {
    let mut value = LocalRegisterCopy::<u64, HCR_EL2::Register>::new(hcr);
    value.modify(if trap {
        HCR_EL2::TWE::SET
    } else {
        HCR_EL2::TWE::CLEAR
    });
    value.get()
}

/// `hcr` with HCR_EL2.TWE (bit 14, WFE) set iff `wfe_trap` and HCR_EL2.TWI
/// (bit 13, "Traps EL0 and EL1 execution of WFI instructions to EL2") set
/// iff `wfi_trap`; every other bit as given. WFET and WFIT follow TWE and
/// TWI (Arm ARM "HCR_EL2").
pub fn hcr_traps(hcr: u64, wfe_trap: bool, wfi_trap: bool) -> u64 {
    let mut value = LocalRegisterCopy::<u64, HCR_EL2::Register>::new(hcr);
    value.modify(
        if wfe_trap {
            HCR_EL2::TWE::SET
        } else {
            HCR_EL2::TWE::CLEAR
        } + if wfi_trap {
            HCR_EL2::TWI::SET
        } else {
            HCR_EL2::TWI::CLEAR
        },
    );
    value.get()
}

/// One VM's WFx trap policies: a WFE [`TrapPolicy`] per vCPU and whether
/// WFI traps — seed 002's per-vCPU exit control.
///
/// Built from the VM description ([`Self::from_config`]: `wfe-trap`, its
/// per-vCPU exceptions `wfe-trap-vcpus`, `wfi-trap`); a control VM changes
/// the WFE policies at run time with PVLOCK_SET_WFX_POLICY
/// ([`crate::trap::decision::Next::SetWfxPolicy`] -> [`Self::set`]). WFI's
/// setting is fixed for the VM's life. Nothing resets the table, not even
/// the VM's SYSTEM_RESET: the settings are the host's, not the guest's.
///
/// The runner (`el2::run`) keeps one per VM and reads it at every guest
/// entry ([`Self::hcr_for`]), so a change takes effect at each affected
/// vCPU's next entry into the guest. Each vCPU's policy is one atomic
/// byte: the read at every entry takes no lock, and a control VM's
/// [`Self::set`] on another pCPU needs none either (a policy is one value;
/// the order in which two updates land is the order they were made in).
#[derive(Debug)]
pub struct WfxPolicies {
    /// Per vCPU, its WFE policy's index in [`TrapPolicy::ALL`].
    per_vcpu: Vec<AtomicU8>,
    wfi_trap: bool,
}

/// A policy as [`WfxPolicies`] stores it.
fn policy_code(policy: TrapPolicy) -> u8 {
    // ALL holds every policy, and has three entries.
    TrapPolicy::ALL
        .iter()
        .position(|&p| p == policy)
        .map_or(0, |i| i as u8)
}

impl PartialEq for WfxPolicies {
    fn eq(&self, other: &Self) -> bool {
        self.wfi_trap == other.wfi_trap
            && self.vcpus() == other.vcpus()
            && (0..self.vcpus()).all(|v| self.wfe_for(v) == other.wfe_for(v))
    }
}

impl Eq for WfxPolicies {}

impl Clone for WfxPolicies {
    fn clone(&self) -> Self {
        Self {
            per_vcpu: (0..self.vcpus())
                .map(|v| AtomicU8::new(policy_code(self.wfe_for(v))))
                .collect(),
            wfi_trap: self.wfi_trap,
        }
    }
}

impl WfxPolicies {
    /// `vcpus` vCPUs, each with the WFE policy `wfe`; WFI traps if
    /// `wfi_trap`.
    pub fn new(vcpus: u16, wfe: TrapPolicy, wfi_trap: bool) -> Self {
        Self {
            per_vcpu: (0..vcpus)
                .map(|_| AtomicU8::new(policy_code(wfe)))
                .collect(),
            wfi_trap,
        }
    }

    /// The policies `config` describes: vCPU i gets
    /// [`VmConfig::wfe_trap_of`]`(i)` (its `wfe-trap-vcpus` entry, else the
    /// VM's `wfe-trap`), and WFI traps as `wfi-trap` says. A config with
    /// more than `u16::MAX` vCPUs (never a parsed one, which has at most
    /// 64) is cut to `u16::MAX`.
    pub fn from_config(config: &VmConfig) -> Self {
        let vcpus = u16::try_from(config.vcpus).unwrap_or(u16::MAX);
        Self {
            per_vcpu: (0..vcpus)
                .map(|i| AtomicU8::new(policy_code(config.wfe_trap_of(u32::from(i)))))
                .collect(),
            wfi_trap: config.wfi_trap,
        }
    }

    /// Number of vCPUs in the table.
    pub fn vcpus(&self) -> u16 {
        // `new` and `from_config` never make more than u16::MAX entries.
        u16::try_from(self.per_vcpu.len()).unwrap_or(u16::MAX)
    }

    /// Sets the WFE policy of `vcpu`, or of every vCPU with `None`. Returns
    /// false, changing nothing, for a vCPU outside the table.
    pub fn set(&self, vcpu: Option<u16>, policy: TrapPolicy) -> bool {
        let code = policy_code(policy);
        match vcpu {
            None => {
                for slot in &self.per_vcpu {
                    slot.store(code, Ordering::Relaxed);
                }
                true
            }
            Some(index) => match self.per_vcpu.get(usize::from(index)) {
                Some(slot) => {
                    slot.store(code, Ordering::Relaxed);
                    true
                }
                None => false,
            },
        }
    }

    /// The WFE policy of `vcpu`; [`TrapPolicy::Auto`] (KVM's default) for a
    /// vCPU outside the table.
    #[inline]
    pub fn wfe_for(&self, vcpu: u16) -> TrapPolicy {
        self.per_vcpu
            .get(usize::from(vcpu))
            .and_then(|slot| TrapPolicy::ALL.get(usize::from(slot.load(Ordering::Relaxed))))
            .copied()
            .unwrap_or_default()
    }

    /// Whether WFI traps (`wfi-trap`).
    pub fn wfi_trap(&self) -> bool {
        self.wfi_trap
    }

    /// HCR_EL2 for entering `vcpu` on a pCPU with `runnable_on_this_pcpu`
    /// vCPUs wanting it (itself included; `Scheduler::runnable_on`):
    /// [`hcr_traps`]`(hcr, `[`trap_wfe`]`(self.wfe_for(vcpu), runnable), self.wfi_trap())`.
    pub fn hcr_for(&self, hcr: u64, vcpu: u16, runnable_on_this_pcpu: usize) -> u64 {
        hcr_traps(
            hcr,
            trap_wfe(self.wfe_for(vcpu), runnable_on_this_pcpu),
            self.wfi_trap,
        )
    }
}

/// Counters of the wait traps and the directed-yield policy, for one VM
/// (or, summed with `+=`, for all).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinStats {
    /// WFI traps.
    pub wfi: u64,
    /// WFIT traps with a valid deadline register (RV = 1). KVM treats a
    /// WFIT without one as WFI, and so does the count.
    pub wfit: u64,
    /// WFE traps (a WFET without a valid register counts here, as KVM
    /// treats it).
    pub wfe: u64,
    /// WFET traps with a valid deadline register.
    pub wfet: u64,
    /// Spins found by sampling a vCPU's registers instead of a WFE trap
    /// ([`super::spinwatch`]); each then goes through the same decision.
    pub sampled_spins: u64,
    /// Directed-yield decisions made ([`VmSpin::plan`]).
    pub spins: u64,
    /// `yield_to` calls for on-spin candidates.
    pub yield_attempts: u64,
    /// On-spin candidates that took the slice.
    pub yields: u64,
    /// Successful on-spin yields by [`YieldReason::index`].
    pub yields_by_reason: [u64; YieldReason::COUNT],
    /// PV_SCHED_YIELD_TO calls that asked for a yield (valid sibling).
    pub pv_yield_calls: u64,
    /// ...of which the target took the slice.
    pub pv_yields: u64,
    /// PV KICK_CPU calls carried out (openEuler, Anolis).
    pub kicks: u64,
    /// Slices extended because the vCPU was inside a critical section
    /// ([`slice_extension_reason`]).
    pub extensions: u64,
}

impl SpinStats {
    /// Counts a WFx trap; other exits are ignored.
    pub fn record_wfx(&mut self, exit: &Exit) {
        let Exit::Wfx {
            kind,
            deadline_register,
        } = *exit
        else {
            return;
        };
        let counter = match (kind, deadline_register.is_some()) {
            (WfxKind::Wfi, false) => &mut self.wfi,
            (WfxKind::Wfi, true) => &mut self.wfit,
            (WfxKind::Wfe, false) => &mut self.wfe,
            (WfxKind::Wfe, true) => &mut self.wfet,
        };
        *counter += 1;
    }

    /// Counts one spin found by sampling ([`super::spinwatch`]).
    pub fn record_sampled_spin(&mut self) {
        self.sampled_spins += 1;
    }

    /// Counts one carried-out PV kick.
    pub fn record_kick(&mut self) {
        self.kicks += 1;
    }

    /// Counts one PV_SCHED_YIELD_TO that asked for a yield, and whether
    /// `yield_to` accepted it.
    pub fn record_pv_yield(&mut self, yielded: bool) {
        self.pv_yield_calls += 1;
        self.pv_yields += u64::from(yielded);
    }

    /// Successful on-spin yields for `reason`.
    pub fn yields_for(&self, reason: YieldReason) -> u64 {
        self.yields_by_reason[reason.index()]
    }

    /// Successful on-spin yields to a boosted candidate.
    pub fn boosts(&self) -> u64 {
        YieldReason::ALL
            .iter()
            .filter(|r| r.is_boost())
            .map(|r| self.yields_for(*r))
            .sum()
    }
}

impl AddAssign<&SpinStats> for SpinStats {
    fn add_assign(&mut self, other: &SpinStats) {
        self.wfi += other.wfi;
        self.wfit += other.wfit;
        self.wfe += other.wfe;
        self.wfet += other.wfet;
        self.sampled_spins += other.sampled_spins;
        self.spins += other.spins;
        self.yield_attempts += other.yield_attempts;
        self.yields += other.yields;
        for (mine, theirs) in self.yields_by_reason.iter_mut().zip(other.yields_by_reason) {
            *mine += theirs;
        }
        self.pv_yield_calls += other.pv_yield_calls;
        self.pv_yields += other.pv_yields;
        self.kicks += other.kicks;
        self.extensions += other.extensions;
    }
}

/// One line for the end-of-run summary, e.g. `wfi 3 wfit 0 wfe 40 wfet 2
/// sampled-spins 0 on-spin 42 attempts 30 yields 25 (round-robin 20 irqs-masked 1
/// lock-holder 4 pending-irq 0 wait-ended 0) pv-yield 5/7 kicks 9 extensions 2`.
impl fmt::Display for SpinStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wfi {} wfit {} wfe {} wfet {} sampled-spins {} on-spin {} attempts {} yields {} (",
            self.wfi,
            self.wfit,
            self.wfe,
            self.wfet,
            self.sampled_spins,
            self.spins,
            self.yield_attempts,
            self.yields
        )?;
        for (i, reason) in YieldReason::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{} {}", reason.name(), self.yields_for(*reason))?;
        }
        write!(
            f,
            ") pv-yield {}/{} kicks {} extensions {}",
            self.pv_yields, self.pv_yield_calls, self.kicks, self.extensions
        )
    }
}

/// The directed-yield state of one VM: what KVM keeps in `struct kvm`
/// (`last_boosted_vcpu`) and in each `struct kvm_vcpu` (`spin_loop`, the
/// "preempted in kernel" / "IRQs disabled" snapshots), plus the VM's
/// [`SpinStats`]. The runner (`el2::run`) keeps one per VM behind a leaf lock
/// (module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmSpin {
    last_boosted: u16,
    spin: Vec<SpinState>,
    descheduled: Vec<Descheduled>,
    /// Per vCPU, the word it polled in the spin it was last found in
    /// ([`super::waitword`]); it counts only while the vCPU is still in
    /// that spin loop ([`Self::wait_word`]).
    waits: Vec<Option<WaitWord>>,
    stats: SpinStats,
    /// The VM's `boost` switch: critical-section boosts on.
    boost: bool,
}

impl VmSpin {
    /// The state of a VM with `vcpus` vCPUs: nobody spinning, nothing
    /// boosted yet, counters zero, boosts on.
    pub fn new(vcpus: u16) -> Self {
        let count = usize::from(vcpus);
        Self {
            last_boosted: 0,
            spin: vec![SpinState::new(); count],
            descheduled: vec![Descheduled::default(); count],
            waits: vec![None; count],
            stats: SpinStats::default(),
            boost: true,
        }
    }

    /// Turns the critical-section boosts on or off (the VM's `boost`
    /// property). Off: on-spin is KVM's plain round robin (candidates carry
    /// no lock count, masked-IRQ snapshot or pending interrupt) and no
    /// slice is extended.
    pub fn set_boost(&mut self, on: bool) {
        self.boost = on;
    }

    /// Whether the boosts are on.
    pub fn boost(&self) -> bool {
        self.boost
    }

    /// Whether vCPU, whose slice just ended with `pstate` and the guest's
    /// `lock_count_hint`, should have it extended ([`slice_extension_reason`],
    /// never with boosts off).
    pub fn extension_reason(&self, lock_count_hint: u32, pstate: u64) -> Option<YieldReason> {
        if self.boost {
            slice_extension_reason(lock_count_hint, pstate)
        } else {
            None
        }
    }

    /// Counts one extended slice.
    pub fn record_extension(&mut self) {
        self.stats.extensions += 1;
    }

    /// Number of vCPUs.
    pub fn vcpus(&self) -> usize {
        self.spin.len()
    }

    /// The index of the last vCPU an on-spin yield went to (0 initially).
    pub fn last_boosted(&self) -> u16 {
        self.last_boosted
    }

    /// vCPU `index`'s spin-loop flags (default for an unknown index).
    pub fn spin_state(&self, index: u16) -> SpinState {
        self.spin
            .get(usize::from(index))
            .copied()
            .unwrap_or_default()
    }

    /// What was recorded when vCPU `index` was last descheduled.
    pub fn last_descheduled(&self, index: u16) -> Descheduled {
        self.descheduled
            .get(usize::from(index))
            .copied()
            .unwrap_or_default()
    }

    /// Records that vCPU `index` is being taken off its pCPU while staying
    /// runnable (a requeue, a directed yield), with its saved SPSR_EL2.
    /// Unknown indices are ignored.
    pub fn descheduled(&mut self, index: u16, spsr: u64) {
        if let Some(slot) = self.descheduled.get_mut(usize::from(index)) {
            *slot = Descheduled::from_spsr(spsr);
        }
    }

    /// Records the outcome of `Scheduler::put` for vCPU `index`, whose
    /// saved SPSR_EL2 is `spsr`: a requeued vCPU gets its snapshot
    /// ([`Self::descheduled`]); one that blocked or powered off gets a
    /// neutral one, because it is not a candidate until it is woken or
    /// started, and then its PSTATE at the put says nothing about a
    /// critical section (Linux idles in WFI with IRQs masked); a vCPU that
    /// keeps running keeps what it had.
    pub fn record_put(&mut self, index: u16, spsr: u64, outcome: PutOutcome) {
        match outcome {
            PutOutcome::Requeued => self.descheduled(index, spsr),
            PutOutcome::Blocked | PutOutcome::PoweredOff => self.reset_vcpu(index),
            PutOutcome::KeepRunning => {}
        }
    }

    /// Forgets vCPU `index`'s snapshot and spin state (PSCI CPU_ON: it
    /// starts afresh). Unknown indices are ignored.
    pub fn reset_vcpu(&mut self, index: u16) {
        let i = usize::from(index);
        if let Some(slot) = self.descheduled.get_mut(i) {
            *slot = Descheduled::default();
        }
        if let Some(state) = self.spin.get_mut(i) {
            *state = SpinState::new();
        }
        if let Some(wait) = self.waits.get_mut(i) {
            *wait = None;
        }
    }

    /// vCPU `index` runs again (vcpu_load) or its spin ended without a
    /// yield: it leaves its spin loop ([`SpinState::leave`]).
    pub fn resumed(&mut self, index: u16) {
        if let Some(state) = self.spin.get_mut(usize::from(index)) {
            state.leave();
        }
    }

    /// vCPU `index` was found spinning, polling `word` if its wait loop
    /// showed one ([`super::waitword::find`]); it counts while the vCPU
    /// is in that spin loop, until it runs again ([`Self::resumed`], which
    /// does not touch it: one store less on every load). Unknown indices
    /// are ignored.
    pub fn spinning_on(&mut self, index: u16, word: Option<WaitWord>) {
        let i = usize::from(index);
        if let (Some(wait), Some(state)) = (self.waits.get_mut(i), self.spin.get_mut(i)) {
            *wait = word;
            state.enter();
        }
    }

    /// The word vCPU `index` polled when it was last found spinning, if it
    /// has not run since; `None` with boosts off, since only the boosts
    /// look at it ([`Candidate::wait`]).
    pub fn wait_word(&self, index: u16) -> Option<WaitWord> {
        if !self.boost || !self.spin_state(index).in_spin_loop() {
            return None;
        }
        self.waits.get(usize::from(index)).copied().flatten()
    }

    /// The snapshot entry for vCPU `index`: `preempted`, `lock_count_hint`,
    /// `pending_interrupt` (a virtual interrupt or a due virtual timer
    /// waits for it) and `wait` (the word of [`Self::wait_word`] read
    /// again: [`WaitWord::state`]) from the caller (scheduler, PV-lock
    /// record, virtual GIC, guest memory), the rest from
    /// [`Self::descheduled`]. With boosts off, only what KVM itself looks
    /// at (preempted, and in user mode): no lock count, no masked IRQs, no
    /// pending interrupt and no ended wait, so neither the boost order nor
    /// the pending-interrupt exception to the user-mode skip applies.
    pub fn candidate(
        &self,
        index: u16,
        preempted: bool,
        lock_count_hint: u32,
        pending_interrupt: bool,
        wait: Wait,
    ) -> Candidate {
        match (preempted, self.boost) {
            (false, _) => Candidate::NOT_PREEMPTED,
            (true, true) => Candidate {
                has_pending_virtual_interrupt: pending_interrupt,
                wait,
                ..Candidate::preempted(self.last_descheduled(index), lock_count_hint)
            },
            (true, false) => {
                let desched = self.last_descheduled(index);
                Candidate::preempted(
                    Descheduled {
                        irqs_masked: false,
                        ..desched
                    },
                    0,
                )
            }
        }
    }

    /// Decides whom `spinner` should yield to ([`on_spin`] with this VM's
    /// `last_boosted` and spin states) and counts the decision. `vcpus`:
    /// one entry per vCPU of this VM, by index.
    pub fn plan(&mut self, spinner: Spinner, vcpus: &[Candidate]) -> YieldPlan {
        self.stats.spins += 1;
        on_spin(spinner, self.last_boosted, vcpus, &mut self.spin)
    }

    /// Reports one `yield_to` attempt for `choice` and whether it was
    /// accepted; an accepted one becomes `last_boosted` (KVM writes
    /// `last_boosted_vcpu` on success only).
    pub fn attempted(&mut self, choice: Choice, yielded: bool) {
        self.stats.yield_attempts += 1;
        if yielded {
            self.stats.yields += 1;
            self.stats.yields_by_reason[choice.reason.index()] += 1;
            self.last_boosted = choice.target.index;
        }
    }

    /// Forgets the VM's guest-derived state (SYSTEM_RESET): nobody
    /// spinning, no snapshots, `last_boosted` 0. The counters carry on.
    pub fn reset(&mut self) {
        self.last_boosted = 0;
        self.spin.fill(SpinState::new());
        self.descheduled.fill(Descheduled::default());
        self.waits.fill(None);
    }

    /// The VM's counters.
    pub fn stats(&self) -> &SpinStats {
        &self.stats
    }

    /// The VM's counters, to record WFx traps, kicks and PV yields.
    pub fn stats_mut(&mut self) -> &mut SpinStats {
        &mut self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::{CpuSet, InitialState, PutReason, Scheduler};
    use crate::vcpu::VmId;

    const VM: VmId = VmId(3);

    fn id(index: u16) -> VcpuId {
        VcpuId { vm: VM, index }
    }

    fn kernel(index: u16) -> Spinner {
        Spinner {
            vcpu: id(index),
            in_kernel: true,
        }
    }

    fn user(index: u16) -> Spinner {
        Spinner {
            vcpu: id(index),
            in_kernel: false,
        }
    }

    /// A preempted candidate descheduled in kernel mode with IRQs on.
    const PLAIN: Candidate = Candidate {
        preempted: true,
        preempted_in_user_mode: false,
        has_pending_virtual_interrupt: false,
        irqs_masked_when_descheduled: false,
        lock_count_hint: 0,
        wait: Wait::Unknown,
    };

    const USER: Candidate = Candidate {
        preempted_in_user_mode: true,
        ..PLAIN
    };

    const MASKED: Candidate = Candidate {
        irqs_masked_when_descheduled: true,
        ..PLAIN
    };

    fn holder(count: u32) -> Candidate {
        Candidate {
            lock_count_hint: count,
            ..PLAIN
        }
    }

    /// `on_spin` with fresh spin states; the plan as (index, reason).
    fn plan(spinner: Spinner, last: u16, vcpus: &[Candidate]) -> Vec<(u16, YieldReason)> {
        let mut spin = vec![SpinState::new(); vcpus.len()];
        pairs(on_spin(spinner, last, vcpus, &mut spin))
    }

    fn pairs(plan: YieldPlan) -> Vec<(u16, YieldReason)> {
        plan.iter()
            .map(|c| {
                assert_eq!(c.target.vm, VM, "a target outside the spinner's VM");
                (c.target.index, c.reason)
            })
            .collect()
    }

    fn indices(plan: &[(u16, YieldReason)]) -> Vec<u16> {
        plan.iter().map(|&(i, _)| i).collect()
    }

    use YieldReason::{IrqsMasked, LockHolder, PendingInterrupt, RoundRobin, WaitEnded};

    #[test]
    fn pstate_modes_and_irq_mask() {
        // AArch64: EL0t 0b0000, EL1t 0b0100, EL1h 0b0101; DAIF in bits 9:6.
        assert!(!pstate_in_kernel(0x0));
        assert!(pstate_in_kernel(0x4));
        assert!(pstate_in_kernel(0x5));
        assert!(pstate_in_kernel(0x3C5), "EL1h, DAIF masked (boot state)");
        assert!(!pstate_in_kernel(0x8000_0000 | 0x200), "EL0t with N and D");
        // AArch32 (M[4] = 1): User 0b10000 is EL0; SVC 0b10011, IRQ 0b10010,
        // SYS 0b11111 are privileged.
        assert!(!pstate_in_kernel(0x10));
        for mode in [0x11, 0x12, 0x13, 0x17, 0x1B, 0x1F] {
            assert!(pstate_in_kernel(mode), "{mode:#x}");
        }
        assert!(pstate_irqs_masked(0x85));
        assert!(pstate_irqs_masked(0x3C5));
        assert!(!pstate_irqs_masked(0x345), "D, A, F but not I");
        assert!(!pstate_irqs_masked(0x5));
        assert_eq!(
            Descheduled::from_spsr(0x80),
            Descheduled {
                in_user_mode: true,
                irqs_masked: true
            }
        );
        assert_eq!(Descheduled::from_spsr(0x5), Descheduled::default());
        assert_eq!(Spinner::from_pstate(id(1), 0x3C5), kernel(1));
        assert_eq!(Spinner::from_pstate(id(1), 0x0), user(1));
    }

    #[test]
    fn round_robin_starts_after_last_boosted() {
        let all = [PLAIN; 6];
        // KVM's last_boosted_vcpu starts at 0: the first scan starts at 1.
        assert_eq!(
            plan(kernel(0), 0, &all),
            [(1, RoundRobin), (2, RoundRobin), (3, RoundRobin)]
        );
        assert_eq!(indices(&plan(kernel(0), 2, &all)), [3, 4, 5]);
        // Wraps around, skipping the spinner.
        assert_eq!(indices(&plan(kernel(0), 4, &all)), [5, 1, 2]);
        assert_eq!(indices(&plan(kernel(3), 4, &all)), [5, 0, 1]);
        assert_eq!(indices(&plan(kernel(5), 5, &all)), [0, 1, 2]);
        // An out-of-range last_boosted wraps instead of failing.
        assert_eq!(indices(&plan(kernel(0), 200, &all)), [3, 4, 5]);
        assert_eq!(indices(&plan(kernel(0), u16::MAX, &all)), [4, 5, 1]);
    }

    #[test]
    fn self_and_vcpus_not_waiting_are_skipped() {
        let n = Candidate::NOT_PREEMPTED;
        let vcpus = [PLAIN, n, PLAIN, n, n, PLAIN];
        assert_eq!(indices(&plan(kernel(2), 0, &vcpus)), [5, 0]);
        // The spinner's own entry is ignored whatever it says.
        assert_eq!(indices(&plan(kernel(0), 0, &vcpus)), [2, 5]);
        assert_eq!(plan(kernel(1), 0, &[n, n, n]), []);
        // A not-preempted vCPU is skipped even with every hint set.
        let hinted = Candidate {
            preempted: false,
            ..Candidate {
                has_pending_virtual_interrupt: true,
                ..holder(3)
            }
        };
        assert_eq!(plan(kernel(0), 0, &[PLAIN, hinted]), []);
    }

    #[test]
    fn kernel_spinners_skip_user_mode_candidates_without_an_interrupt() {
        let delivering = Candidate {
            has_pending_virtual_interrupt: true,
            ..USER
        };
        let vcpus = [PLAIN, USER, PLAIN, delivering, USER];
        // In kernel: 1 and 4 are skipped; 3 stays (seed 003) and is boosted.
        assert_eq!(
            plan(kernel(0), 0, &vcpus),
            [(3, PendingInterrupt), (2, RoundRobin)]
        );
        // In user mode nothing is skipped for its mode.
        assert_eq!(
            plan(user(0), 0, &vcpus),
            [(3, PendingInterrupt), (1, RoundRobin), (2, RoundRobin)]
        );
        // Even a user-mode lock holder is skipped by a kernel spinner.
        let user_holder = Candidate {
            preempted_in_user_mode: true,
            ..holder(1)
        };
        assert_eq!(plan(kernel(0), 0, &[PLAIN, user_holder]), []);
        assert_eq!(plan(user(0), 0, &[PLAIN, user_holder]), [(1, LockHolder)]);
    }

    #[test]
    fn spinning_siblings_are_eligible_every_other_look() {
        let vcpus = [PLAIN; 3];
        let mut spin = [SpinState::new(); 3];
        // vCPU 1 spins (it trapped on WFE and yielded, say).
        spin[1].enter();
        let looks: Vec<Vec<u16>> = (0..4)
            .map(|_| indices(&pairs(on_spin(kernel(0), 2, &vcpus, &mut spin))))
            .collect();
        // dy_eligible starts false: skipped, taken, skipped, taken. vCPU 2
        // (not spinning) is always eligible.
        assert_eq!(looks, [vec![2], vec![1, 2], vec![2], vec![1, 2]]);
        assert!(spin[1].in_spin_loop());
        assert!(
            !spin[2].in_spin_loop() && !spin[2].dy_eligible(),
            "no toggle"
        );
        // The spinner itself is now in its spin loop...
        assert!(spin[0].in_spin_loop());
        // ...and a spinning vCPU that is not preempted is never looked at.
        spin[1].leave();
        spin[1].enter();
        let running = [PLAIN, Candidate::NOT_PREEMPTED, PLAIN];
        on_spin(kernel(0), 0, &running, &mut spin);
        assert!(!spin[1].dy_eligible(), "not toggled");
        // leave(): out of the loop and not eligible next time.
        let mut s = SpinState::new();
        s.enter();
        assert!(!s.look());
        assert!(s.dy_eligible());
        s.leave();
        assert_eq!(s, SpinState::new());
        assert!(s.look(), "not spinning: eligible");
        assert_eq!(s, SpinState::new());
        s.leave();
        assert_eq!(s, SpinState::new(), "idempotent");
    }

    #[test]
    fn a_sibling_whose_wait_ended_goes_first_and_one_still_waiting_never() {
        let ended = Candidate {
            wait: Wait::Ended,
            ..PLAIN
        };
        //            0      1       2      3      4
        let vcpus = [PLAIN, MASKED, PLAIN, ended, holder(1)];
        let mut spin = [SpinState::new(); 5];
        // vCPU 3 was taken off spinning: KVM's rule skips it every other
        // look, but its wait has ended; it is not looked at.
        spin[3].enter();
        for _ in 0..3 {
            let p = pairs(on_spin(kernel(0), 0, &vcpus, &mut spin));
            assert_eq!(p, [(3, WaitEnded), (1, IrqsMasked), (4, LockHolder)]);
            assert!(spin[3].in_spin_loop() && !spin[3].dy_eligible());
        }
        // Several: in round-robin order, before any boost; three settle
        // the plan, and a spinning sibling is then not looked at.
        let vcpus = [PLAIN, ended, MASKED, ended, PLAIN, ended, ended];
        let mut spin = [SpinState::new(); 7];
        spin[4].enter();
        let p = pairs(on_spin(kernel(0), 4, &vcpus, &mut spin));
        assert_eq!(p, [(5, WaitEnded), (6, WaitEnded), (1, WaitEnded)]);
        assert!(!spin[4].dy_eligible(), "not looked at");
        // Not the spinner itself, not one that is not waiting for a pCPU,
        // and, for a kernel spinner, not one in user mode.
        let vcpus = [
            ended,
            Candidate {
                preempted: false,
                ..ended
            },
            Candidate {
                wait: Wait::Ended,
                ..USER
            },
            PLAIN,
        ];
        assert_eq!(plan(kernel(0), 0, &vcpus), [(3, RoundRobin)]);
        assert_eq!(plan(user(0), 0, &vcpus), [(2, WaitEnded), (3, RoundRobin)]);
        // One whose word still holds what it spun on would only spin
        // again: never tried, boosted or not, looked at or not.
        let waiting = Candidate {
            wait: Wait::Waiting,
            ..MASKED
        };
        let vcpus = [PLAIN, waiting, holder(1), waiting, PLAIN];
        let mut spin = [SpinState::new(); 5];
        let p = pairs(on_spin(kernel(0), 0, &vcpus, &mut spin));
        assert_eq!(p, [(2, LockHolder), (4, RoundRobin)]);
        assert_eq!(plan(kernel(0), 0, &[PLAIN, waiting]), []);
    }

    #[test]
    fn wait_words_last_until_the_vcpu_runs_and_count_only_with_boosts() {
        let word = WaitWord {
            ipa: 0x4000_0040,
            width: 4,
            value: 1,
        };
        let mut vm = VmSpin::new(3);
        vm.spinning_on(1, Some(word));
        assert_eq!(vm.wait_word(1), Some(word));
        assert_eq!(vm.wait_word(0), None);
        assert_eq!(
            vm.candidate(1, true, 0, false, Wait::Ended).wait,
            Wait::Ended
        );
        assert_eq!(
            vm.candidate(1, true, 0, false, Wait::Waiting).wait,
            Wait::Waiting
        );
        assert_eq!(
            vm.candidate(1, false, 0, false, Wait::Ended),
            Candidate::NOT_PREEMPTED
        );
        // It runs again: its spin, and the word, are behind it.
        vm.resumed(1);
        assert_eq!(vm.wait_word(1), None);
        // Found spinning without a word it polls: none.
        vm.spinning_on(1, Some(word));
        vm.spinning_on(1, None);
        assert_eq!(vm.wait_word(1), None);
        // CPU_ON and SYSTEM_RESET forget it; unknown vCPUs are ignored.
        vm.spinning_on(2, Some(word));
        vm.reset_vcpu(2);
        assert_eq!(vm.wait_word(2), None);
        vm.spinning_on(2, Some(word));
        vm.reset();
        assert_eq!(vm.wait_word(2), None);
        vm.spinning_on(7, Some(word));
        assert_eq!(vm.wait_word(7), None);
        // Boosts off: KVM's rule alone.
        vm.set_boost(false);
        vm.spinning_on(1, Some(word));
        assert_eq!(vm.wait_word(1), None);
        assert_eq!(
            vm.candidate(1, true, 0, false, Wait::Ended).wait,
            Wait::Unknown
        );
    }

    #[test]
    fn at_most_three_candidates() {
        let all = [PLAIN; 16];
        let p = plan(kernel(7), 7, &all);
        assert_eq!(indices(&p), [8, 9, 10]);
        assert_eq!(MAX_ATTEMPTS, 3);
        let boosted = [MASKED; 16];
        assert_eq!(plan(kernel(0), 0, &boosted).len(), 3);
    }

    #[test]
    fn boosted_candidates_come_first_in_round_robin_order() {
        //            0      1      2          3       4          5      6
        let vcpus = [PLAIN, PLAIN, holder(2), PLAIN, MASKED, PLAIN, PLAIN];
        assert_eq!(
            plan(kernel(0), 0, &vcpus),
            [(2, LockHolder), (4, IrqsMasked), (1, RoundRobin)]
        );
        // Starting after 3: 4 comes before 2 in the round, boosts first.
        assert_eq!(
            plan(kernel(0), 3, &vcpus),
            [(4, IrqsMasked), (2, LockHolder), (5, RoundRobin)]
        );
        // The strongest reason names the boost: lock, then IRQs, then a
        // pending interrupt.
        let both = Candidate {
            irqs_masked_when_descheduled: true,
            has_pending_virtual_interrupt: true,
            ..holder(1)
        };
        assert_eq!(both.boost(), Some(LockHolder));
        let masked_pending = Candidate {
            has_pending_virtual_interrupt: true,
            ..MASKED
        };
        assert_eq!(masked_pending.boost(), Some(IrqsMasked));
        assert_eq!(PLAIN.boost(), None);
        // Three boosted candidates settle the plan: the scan stops, so a
        // spinning sibling further on is not looked at (not toggled).
        let vcpus = [PLAIN, MASKED, MASKED, MASKED, PLAIN];
        let mut spin = [SpinState::new(); 5];
        spin[4].enter();
        let p = pairs(on_spin(kernel(0), 0, &vcpus, &mut spin));
        assert_eq!(p, [(1, IrqsMasked), (2, IrqsMasked), (3, IrqsMasked)]);
        assert!(!spin[4].dy_eligible());
    }

    #[test]
    fn implausible_lock_counts_are_ignored() {
        assert_eq!(plausible_lock_count(0), 0);
        assert_eq!(plausible_lock_count(1), 1);
        assert_eq!(plausible_lock_count(48), 48);
        assert_eq!(plausible_lock_count(49), 0);
        assert_eq!(plausible_lock_count(u32::MAX), 0, "a wrapped decrement");
        for (count, reason) in [
            (1, LockHolder),
            (MAX_PLAUSIBLE_LOCK_COUNT, LockHolder),
            (MAX_PLAUSIBLE_LOCK_COUNT + 1, RoundRobin),
            (0x8000_0000, RoundRobin),
            (u32::MAX, RoundRobin),
        ] {
            let vcpus = [PLAIN, PLAIN, holder(count)];
            assert_eq!(plan(kernel(0), 0, &vcpus)[0].1, reason, "{count}");
        }
        // Garbage never outranks a plausible holder, and still runs in turn.
        let vcpus = [PLAIN, holder(u32::MAX), holder(3)];
        assert_eq!(
            plan(kernel(0), 0, &vcpus),
            [(2, LockHolder), (1, RoundRobin)]
        );
    }

    #[test]
    fn degenerate_snapshots_give_empty_plans() {
        let mut spin = [SpinState::new(); 4];
        assert!(on_spin(kernel(0), 0, &[], &mut spin).is_empty());
        assert!(on_spin(kernel(0), 0, &[PLAIN], &mut spin).is_empty());
        assert!(spin[0].in_spin_loop(), "the spinner still spins");
        // A spinner outside the snapshot: nothing (and no panic).
        assert!(on_spin(kernel(9), 0, &[PLAIN; 3], &mut spin).is_empty());
        // Fewer spin states than vCPUs: the missing ones count as idle.
        let mut short = [SpinState::new(); 1];
        assert_eq!(
            pairs(on_spin(kernel(0), 0, &[PLAIN; 3], &mut short)).len(),
            2
        );
        assert_eq!(YieldPlan::EMPTY.len(), 0);
        assert_eq!(YieldPlan::EMPTY.get(0), None);
        assert_eq!(YieldPlan::default(), YieldPlan::EMPTY);
    }

    #[test]
    fn reasons_name_themselves() {
        assert_eq!(alloc::format!("{RoundRobin}"), "round-robin");
        assert_eq!(alloc::format!("{IrqsMasked}"), "boost: irqs-masked");
        assert_eq!(alloc::format!("{LockHolder}"), "boost: lock-holder");
        assert_eq!(alloc::format!("{PendingInterrupt}"), "boost: pending-irq");
        assert_eq!(alloc::format!("{WaitEnded}"), "boost: wait-ended");
        for (i, r) in YieldReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
            assert_eq!(r.is_boost(), i != 0);
        }
    }

    /// Any snapshot: a plan of distinct waiting siblings of the spinner's
    /// VM, boosts first, each group in round-robin order; never a panic.
    #[test]
    fn random_snapshots_give_well_formed_plans() {
        let mut rng = prng::Rng::new(0xDEAD_BEEF_CAFE_F00D);
        let mut random = move || rng.next_u64();
        for _ in 0..20_000 {
            let count = (random() % 12) as usize;
            let vcpus: Vec<Candidate> = (0..count)
                .map(|_| {
                    let r = random();
                    Candidate {
                        preempted: r & 1 != 0,
                        preempted_in_user_mode: r & 2 != 0,
                        has_pending_virtual_interrupt: r & 4 != 0,
                        irqs_masked_when_descheduled: r & 8 != 0,
                        lock_count_hint: match (r >> 4) % 4 {
                            0 => 0,
                            1 => (r >> 8) as u32 % 60,
                            _ => (r >> 32) as u32,
                        },
                        wait: match (r >> 40) % 3 {
                            0 => Wait::Unknown,
                            1 => Wait::Waiting,
                            _ => Wait::Ended,
                        },
                    }
                })
                .collect();
            let mut spin: Vec<SpinState> = (0..(random() % 13))
                .map(|_| {
                    let mut s = SpinState::new();
                    if random() & 1 != 0 {
                        s.enter();
                    }
                    if random() & 1 != 0 {
                        s.look();
                    }
                    s
                })
                .collect();
            let spinner = Spinner {
                vcpu: id((random() % 13) as u16),
                in_kernel: random() & 1 != 0,
            };
            let last = (random() % 20) as u16;
            let p = pairs(on_spin(spinner, last, &vcpus, &mut spin));
            assert!(p.len() <= MAX_ATTEMPTS);
            let start = if count == 0 {
                0
            } else {
                (usize::from(last) + 1) % count
            };
            let position = |i: u16| (usize::from(i) + count - start) % count;
            // Ended waits, then the other boosts, then the plain round.
            let group = |r: YieldReason| match r {
                WaitEnded => 0,
                RoundRobin => 2,
                _ => 1,
            };
            for (k, &(i, reason)) in p.iter().enumerate() {
                let c = vcpus[usize::from(i)];
                assert_ne!(i, spinner.vcpu.index);
                assert!(c.preempted);
                assert!(
                    !spinner.in_kernel
                        || !c.preempted_in_user_mode
                        || c.has_pending_virtual_interrupt
                );
                assert_ne!(c.wait, Wait::Waiting, "a waiting sibling is never tried");
                let expected = if c.wait == Wait::Ended {
                    WaitEnded
                } else {
                    c.boost().unwrap_or(RoundRobin)
                };
                assert_eq!(expected, reason);
                if k > 0 {
                    let (before, before_reason) = p[k - 1];
                    assert!(
                        group(before_reason) <= group(reason),
                        "ended, boosts, plain"
                    );
                    if group(before_reason) == group(reason) {
                        assert!(position(before) < position(i), "round-robin order");
                    }
                }
            }
            // Every ended wait that may take the slice is in the plan
            // (up to its size), whatever its spin-loop flags said.
            let may_take = |i: usize| {
                let c = vcpus[i];
                i != usize::from(spinner.vcpu.index)
                    && c.preempted
                    && c.wait == Wait::Ended
                    && (!spinner.in_kernel
                        || !c.preempted_in_user_mode
                        || c.has_pending_virtual_interrupt)
            };
            if usize::from(spinner.vcpu.index) < count {
                let ended = (0..count).filter(|&i| may_take(i)).count();
                let planned = p.iter().filter(|&&(_, r)| r == WaitEnded).count();
                assert_eq!(planned, ended.min(MAX_ATTEMPTS));
            }
        }
    }

    #[test]
    fn trap_policy() {
        assert_eq!(TrapPolicy::default(), TrapPolicy::Auto);
        // KVM: TWE clear while the pCPU runs a single task.
        assert!(!trap_wfe(TrapPolicy::Auto, 1));
        assert!(trap_wfe(TrapPolicy::Auto, 2));
        assert!(trap_wfe(TrapPolicy::Auto, 9));
        assert!(!trap_wfe(TrapPolicy::Auto, 0));
        for n in [0, 1, 2, usize::MAX] {
            assert!(trap_wfe(TrapPolicy::Trap, n));
            assert!(!trap_wfe(TrapPolicy::NoTrap, n));
        }
        for p in [TrapPolicy::Auto, TrapPolicy::Trap, TrapPolicy::NoTrap] {
            assert_eq!(TrapPolicy::parse(p.name()), Some(p));
            assert_eq!(alloc::format!("{p}"), p.name());
        }
        assert_eq!(TrapPolicy::parse("Trap"), None);
        assert_eq!(TrapPolicy::parse(""), None);
    }

    #[test]
    fn twe_is_bit_14_and_nothing_else_changes() {
        // VM | SWIO | FMO | IMO | AMO | FB | BSU=IS | TWI | TSC | RW
        let hcr: u64 =
            1 | 1 << 1 | 1 << 3 | 1 << 4 | 1 << 5 | 1 << 9 | 1 << 10 | 1 << 13 | 1 << 19 | 1 << 31;
        assert_eq!(hcr_el2_with_wfe_trap(hcr, true), hcr | 1 << 14);
        assert_eq!(hcr_el2_with_wfe_trap(hcr | 1 << 14, false), hcr);
        assert_eq!(hcr_el2_with_wfe_trap(hcr, false), hcr);
        assert_eq!(hcr_el2_with_wfe_trap(u64::MAX, false), !(1 << 14));
        assert_eq!(hcr_el2_with_wfe_trap(0, true), 1 << 14);
    }

    #[test]
    fn hcr_traps_sets_twe_bit_14_and_twi_bit_13_only() {
        // VM | SWIO | FMO | IMO | AMO | FB | BSU=IS | TSC | RW, no TWE/TWI.
        let hcr: u64 = 1 | 1 << 1 | 1 << 3 | 1 << 4 | 1 << 5 | 1 << 9 | 1 << 10 | 1 << 19 | 1 << 31;
        const TWE: u64 = 1 << 14;
        const TWI: u64 = 1 << 13;
        for base in [hcr, hcr | TWE, hcr | TWI, hcr | TWE | TWI] {
            assert_eq!(hcr_traps(base, false, false), hcr);
            assert_eq!(hcr_traps(base, true, false), hcr | TWE);
            assert_eq!(hcr_traps(base, false, true), hcr | TWI);
            assert_eq!(hcr_traps(base, true, true), hcr | TWE | TWI);
        }
        assert_eq!(hcr_traps(u64::MAX, false, false), !(TWE | TWI));
        assert_eq!(hcr_traps(0, true, true), TWE | TWI);
        // The same bits as aarch64-cpu's fields, and as the WFE-only helper.
        assert_eq!(TWE, HCR_EL2::TWE::SET.value);
        assert_eq!(TWI, HCR_EL2::TWI::SET.value);
        for wfe in [false, true] {
            assert_eq!(
                hcr_traps(hcr | TWI, wfe, true),
                hcr_el2_with_wfe_trap(hcr | TWI, wfe)
            );
        }
    }

    fn config(vcpus: u32) -> VmConfig {
        VmConfig::new(
            "/chosen/vm@0",
            "vm0",
            vcpus,
            2 << 20,
            platform::MemRange::new(0x4800_0000, 0x1000),
        )
    }

    #[test]
    fn wfx_policies_start_from_the_vm_description() {
        use TrapPolicy::{Auto, NoTrap, Trap};
        // Defaults: auto everywhere, WFI traps.
        let p = WfxPolicies::from_config(&config(3));
        assert_eq!(p, WfxPolicies::new(3, Auto, true));
        assert_eq!(p.vcpus(), 3);
        assert!((0..3).all(|v| p.wfe_for(v) == Auto));
        assert!(p.wfi_trap());
        // wfe-trap for the VM, wfe-trap-vcpus for single vCPUs, wfi-trap.
        let mut c = config(4);
        c.wfe_trap = NoTrap;
        c.wfe_trap_vcpus = alloc::vec![(2, Trap), (0, Auto)];
        c.wfi_trap = false;
        let p = WfxPolicies::from_config(&c);
        let each: Vec<TrapPolicy> = (0..4).map(|v| p.wfe_for(v)).collect();
        assert_eq!(each, [Auto, NoTrap, Trap, NoTrap]);
        assert!(!p.wfi_trap());
        // Outside the table: KVM's default.
        assert_eq!(p.wfe_for(4), Auto);
        assert_eq!(p.wfe_for(u16::MAX), Auto);
        // An absurd unparsed config is cut, not a panic.
        assert_eq!(
            WfxPolicies::from_config(&config(u32::MAX)).vcpus(),
            u16::MAX
        );
    }

    #[test]
    fn wfx_policies_change_per_vcpu_or_for_all() {
        use TrapPolicy::{Auto, NoTrap, Trap};
        let p = WfxPolicies::new(4, Auto, true);
        assert!(p.set(Some(1), NoTrap));
        assert!(p.set(Some(3), Trap));
        let each: Vec<TrapPolicy> = (0..4).map(|v| p.wfe_for(v)).collect();
        assert_eq!(each, [Auto, NoTrap, Auto, Trap]);
        // A vCPU outside the table: refused, nothing changed.
        let before = p.clone();
        assert!(!p.set(Some(4), Trap));
        assert!(!p.set(Some(u16::MAX), Trap));
        assert_eq!(p, before);
        // Every vCPU; WFI untouched.
        assert!(p.set(None, NoTrap));
        assert!((0..4).all(|v| p.wfe_for(v) == NoTrap));
        assert!(p.wfi_trap());
        // An empty table accepts "all" and refuses any vCPU.
        let empty = WfxPolicies::new(0, Trap, false);
        assert!(empty.set(None, Auto));
        assert!(!empty.set(Some(0), Auto));
    }

    #[test]
    fn wfx_policies_give_hcr_el2_per_vcpu() {
        use TrapPolicy::{Auto, NoTrap, Trap};
        const TWE: u64 = 1 << 14;
        const TWI: u64 = 1 << 13;
        let hcr = 1 | 1 << 31;
        let p = WfxPolicies::new(3, Auto, true);
        p.set(Some(1), Trap);
        p.set(Some(2), NoTrap);
        // Alone on the pCPU: only the trap vCPU traps WFE; WFI always.
        assert_eq!(p.hcr_for(hcr, 0, 1), hcr | TWI);
        assert_eq!(p.hcr_for(hcr, 1, 1), hcr | TWE | TWI);
        assert_eq!(p.hcr_for(hcr, 2, 1), hcr | TWI);
        // Overcommitted: auto traps too, notrap still does not.
        assert_eq!(p.hcr_for(hcr, 0, 2), hcr | TWE | TWI);
        assert_eq!(p.hcr_for(hcr, 1, 2), hcr | TWE | TWI);
        assert_eq!(p.hcr_for(hcr, 2, 2), hcr | TWI);
        // wfi-trap = "notrap": TWI cleared even if the base value has it.
        let p = WfxPolicies::new(1, Trap, false);
        assert_eq!(p.hcr_for(hcr | TWI, 0, 1), hcr | TWE);
        for vcpu in [0, 1, 7] {
            for runnable in [0, 1, 2, 5] {
                let q = WfxPolicies::new(8, Auto, true);
                assert_eq!(
                    q.hcr_for(hcr, vcpu, runnable),
                    hcr_traps(hcr, trap_wfe(Auto, runnable), true)
                );
            }
        }
    }

    /// Real ESR_EL2 values of trapped WF* from AArch64, as QEMU builds them
    /// (`syn_wfx`: EC 0x01, IL, CV = 1, COND = 0xE) and Arm ARM D24.2.45
    /// defines them (TI, RV, Rn).
    const WFX: u64 = 0x07E0_0000;

    #[test]
    fn wfx_traps_are_counted_by_instruction() {
        let mut stats = SpinStats::default();
        for esr in [
            WFX,                        // WFI
            WFX | 1,                    // WFE
            WFX | 1,                    // WFE
            WFX | 2 | 1 << 2 | 4 << 5,  // WFIT x4
            WFX | 2,                    // WFIT, RV clear: KVM's WFI
            WFX | 3 | 1 << 2 | 31 << 5, // WFET xzr
            WFX | 3,                    // WFET, RV clear: KVM's WFE
            0x5A00_0000,                // HVC: not counted
        ] {
            stats.record_wfx(&Exit::decode(crate::trap::exit::Syndrome::synchronous(esr)));
        }
        assert_eq!((stats.wfi, stats.wfit, stats.wfe, stats.wfet), (2, 1, 3, 1));
    }

    #[test]
    fn stats_sum_and_render() {
        let mut vm = VmSpin::new(4);
        vm.stats_mut()
            .record_wfx(&Exit::decode(crate::trap::exit::Syndrome::synchronous(
                WFX | 1,
            )));
        vm.stats_mut().record_kick();
        vm.stats_mut().record_sampled_spin();
        vm.stats_mut().record_pv_yield(true);
        vm.stats_mut().record_pv_yield(false);
        let p = vm.plan(kernel(0), &[PLAIN, MASKED, PLAIN, holder(1)]);
        assert_eq!(
            pairs(p),
            [(1, IrqsMasked), (3, LockHolder), (2, RoundRobin)]
        );
        vm.attempted(p.get(0).unwrap(), false);
        vm.attempted(p.get(1).unwrap(), true);
        let s = *vm.stats();
        assert_eq!((s.spins, s.yield_attempts, s.yields), (1, 2, 1));
        assert_eq!(s.yields_for(LockHolder), 1);
        assert_eq!(s.boosts(), 1);
        assert_eq!(
            alloc::format!("{s}"),
            "wfi 0 wfit 0 wfe 1 wfet 0 sampled-spins 1 on-spin 1 attempts 2 yields 1 \
             (round-robin 0 irqs-masked 0 lock-holder 1 pending-irq 0 wait-ended 0) pv-yield 1/2 \
             kicks 1 extensions 0"
        );
        let mut total = SpinStats::default();
        total += &s;
        total += &s;
        assert_eq!(total.yields_for(LockHolder), 2);
        assert_eq!((total.wfe, total.kicks, total.pv_yield_calls), (2, 2, 4));
        assert_eq!((total.spins, total.sampled_spins), (2, 2));
    }

    #[test]
    fn without_boosts_on_spin_is_plain_round_robin_and_slices_end_on_time() {
        use aarch64_cpu::registers::SPSR_EL2;
        let el1h = SPSR_EL2::M::EL1h.value;
        let masked = el1h | SPSR_EL2::I::Masked.value;
        for boost in [true, false] {
            let mut vm = VmSpin::new(4);
            vm.set_boost(boost);
            assert_eq!(vm.boost(), boost);
            // vCPU 1 was descheduled with IRQs masked, vCPU 3 holds a lock.
            vm.descheduled(1, masked);
            vm.descheduled(2, el1h);
            vm.descheduled(3, el1h);
            let candidates = [
                vm.candidate(0, false, 0, false, Wait::Unknown),
                vm.candidate(1, true, 0, false, Wait::Unknown),
                vm.candidate(2, true, 0, false, Wait::Unknown),
                vm.candidate(3, true, 1, false, Wait::Unknown),
            ];
            let p = vm.plan(kernel(0), &candidates);
            let expected: &[(u16, YieldReason)] = if boost {
                &[(1, IrqsMasked), (3, LockHolder), (2, RoundRobin)]
            } else {
                &[(1, RoundRobin), (2, RoundRobin), (3, RoundRobin)]
            };
            assert_eq!(pairs(p), expected, "boost {boost}");
            let reason = vm.extension_reason(1, masked);
            assert_eq!(reason, boost.then_some(LockHolder));
            vm.record_extension();
            assert_eq!(vm.stats().extensions, 1);
        }
    }

    #[test]
    fn a_pending_interrupt_counts_only_with_boosts_on() {
        use aarch64_cpu::registers::SPSR_EL2;
        let el0 = SPSR_EL2::M::EL0t.value;
        let el1h = SPSR_EL2::M::EL1h.value;
        for boost in [true, false] {
            let mut vm = VmSpin::new(4);
            vm.set_boost(boost);
            // vCPU 1 was preempted in user mode with an interrupt waiting
            // for it; vCPU 2 in the kernel with one; vCPU 3 plainly.
            vm.descheduled(1, el0);
            vm.descheduled(2, el1h);
            vm.descheduled(3, el1h);
            let candidates = [
                vm.candidate(0, false, 0, true, Wait::Unknown),
                vm.candidate(1, true, 0, true, Wait::Unknown),
                vm.candidate(2, true, 0, true, Wait::Unknown),
                vm.candidate(3, true, 0, false, Wait::Unknown),
            ];
            assert_eq!(candidates[1].has_pending_virtual_interrupt, boost);
            // A kernel-mode spinner: with boosts, the interrupt makes both
            // worth trying first (the user-mode one is no longer skipped);
            // without, KVM's rules alone: the user-mode vCPU is skipped and
            // the rest is tried in round-robin order.
            let p = vm.plan(kernel(0), &candidates);
            let expected: &[(u16, YieldReason)] = if boost {
                &[
                    (1, PendingInterrupt),
                    (2, PendingInterrupt),
                    (3, RoundRobin),
                ]
            } else {
                &[(2, RoundRobin), (3, RoundRobin)]
            };
            assert_eq!(pairs(p), expected, "boost {boost}");
        }
    }

    #[test]
    fn slices_are_extended_inside_critical_sections_only() {
        use aarch64_cpu::registers::SPSR_EL2;
        let el1h = SPSR_EL2::M::EL1h.value;
        let masked = el1h | SPSR_EL2::I::Masked.value;
        assert_eq!(slice_extension_reason(0, el1h), None);
        assert_eq!(slice_extension_reason(1, el1h), Some(LockHolder));
        assert_eq!(slice_extension_reason(0, masked), Some(IrqsMasked));
        // A declared lock is the stronger reason.
        assert_eq!(slice_extension_reason(2, masked), Some(LockHolder));
        // An implausible count is ignored, not trusted.
        assert_eq!(
            slice_extension_reason(MAX_PLAUSIBLE_LOCK_COUNT + 1, el1h),
            None
        );
        assert_eq!(slice_extension_reason(u32::MAX, masked), Some(IrqsMasked));
    }

    #[test]
    fn vm_spin_keeps_last_boosted_snapshots_and_spin_states() {
        let mut vm = VmSpin::new(4);
        assert_eq!((vm.vcpus(), vm.last_boosted()), (4, 0));
        // Snapshots from the saved SPSR at deschedule time.
        vm.descheduled(1, 0x0); // EL0t
        vm.descheduled(2, 0x85); // EL1h, I
        vm.descheduled(9, 0x85); // unknown: ignored
        assert_eq!(vm.candidate(1, true, 0, false, Wait::Unknown), USER);
        assert_eq!(vm.candidate(2, true, 0, false, Wait::Unknown), MASKED);
        assert_eq!(vm.candidate(3, true, 7, false, Wait::Unknown), holder(7));
        assert_eq!(
            vm.candidate(2, false, 7, false, Wait::Unknown),
            Candidate::NOT_PREEMPTED
        );
        assert_eq!(vm.candidate(9, true, 0, false, Wait::Unknown), PLAIN);
        // A failed attempt does not move last_boosted; a success does.
        let vcpus: Vec<Candidate> = (0..4)
            .map(|i| vm.candidate(i, i != 0, 0, false, Wait::Unknown))
            .collect();
        let p = vm.plan(kernel(0), &vcpus);
        assert_eq!(pairs(p), [(2, IrqsMasked), (3, RoundRobin)]);
        assert!(vm.spin_state(0).in_spin_loop());
        vm.attempted(p.get(0).unwrap(), false);
        assert_eq!(vm.last_boosted(), 0);
        vm.attempted(p.get(1).unwrap(), true);
        assert_eq!(vm.last_boosted(), 3);
        // The next spin starts after vCPU 3.
        vm.resumed(0);
        assert!(!vm.spin_state(0).in_spin_loop());
        assert_eq!(
            pairs(vm.plan(kernel(1), &vcpus)),
            [(2, IrqsMasked), (3, RoundRobin)]
        );
        // vCPU 1 has been in its spin loop since its own plan: skipped on
        // the first look, eligible on the second.
        assert_eq!(
            pairs(vm.plan(user(0), &vcpus)),
            [(2, IrqsMasked), (3, RoundRobin)]
        );
        assert_eq!(
            pairs(vm.plan(user(0), &vcpus)),
            [(2, IrqsMasked), (1, RoundRobin), (3, RoundRobin)]
        );
        vm.resumed(42);
        assert_eq!(vm.spin_state(42), SpinState::new());
        // Puts: a requeue records the PSTATE, a block or power-off clears
        // it (an idle WFI runs with IRQs masked), a renewed slice keeps it.
        vm.record_put(3, 0x3C5, PutOutcome::Requeued);
        assert_eq!(vm.candidate(3, true, 0, false, Wait::Unknown), MASKED);
        vm.record_put(3, 0x5, PutOutcome::KeepRunning);
        assert_eq!(vm.candidate(3, true, 0, false, Wait::Unknown), MASKED);
        vm.record_put(3, 0x3C5, PutOutcome::Blocked);
        assert_eq!(vm.candidate(3, true, 0, false, Wait::Unknown), PLAIN);
        vm.record_put(2, 0x0, PutOutcome::Requeued);
        assert_eq!(vm.candidate(2, true, 0, false, Wait::Unknown), USER);
        vm.record_put(2, 0x0, PutOutcome::PoweredOff);
        assert_eq!(vm.candidate(2, true, 0, false, Wait::Unknown), PLAIN);
        vm.record_put(77, 0x0, PutOutcome::Requeued);
        // CPU_ON: a fresh start.
        vm.record_put(1, 0x85, PutOutcome::Requeued);
        vm.reset_vcpu(1);
        assert_eq!(vm.candidate(1, true, 0, false, Wait::Unknown), PLAIN);
        assert_eq!(vm.spin_state(1), SpinState::new());
        vm.reset_vcpu(300);
        vm.reset();
        assert_eq!(vm.last_boosted(), 0);
        assert_eq!(vm.last_descheduled(2), Descheduled::default());
        assert!(!vm.spin_state(1).in_spin_loop());
        assert_eq!(vm.stats().spins, 4, "counters survive a reset");
    }

    /// The runner's (`el2::run`) WFE path, end to end on a real scheduler: one pCPU,
    /// four vCPUs of one VM; vCPU 0 spins while 2 holds a lock.
    #[test]
    fn a_spinner_yields_to_the_preempted_lock_holder() {
        const SLICE: u64 = 1_000;
        let mut s = Scheduler::new(CpuSet::first_n(1), SLICE);
        let vm_id = s.add_vm(crate::sched::DEFAULT_WEIGHT).unwrap();
        let vcpus: Vec<VcpuId> = (0..4)
            .map(|_| s.add_vcpu(vm_id, None, InitialState::Runnable, 0).unwrap())
            .collect();
        let mut vm = VmSpin::new(4);
        let lock_counts = [0u32, 0, 1, 0];
        // Each vCPU runs a slice in turn and is preempted in EL1 with IRQs on.
        let mut now = 0;
        for &v in &vcpus {
            assert_eq!(s.pick_next(0, now), Some(v));
            vm.resumed(v.index);
            now += SLICE;
            let outcome = s.put(v, 0, now, PutReason::SliceExpired).unwrap();
            vm.record_put(v.index, 0x5, outcome);
        }
        // vCPU 0 runs again and traps on WFE (EL1h) early in its slice.
        let spinner = vcpus[0];
        assert_eq!(s.pick_next(0, now), Some(spinner));
        vm.resumed(spinner.index);
        now += 10;
        let exit = Exit::decode(crate::trap::exit::Syndrome::synchronous(WFX | 1));
        vm.stats_mut().record_wfx(&exit);
        let snapshot: Vec<Candidate> = vcpus
            .iter()
            .map(|&v| {
                let ok = s.can_yield_to(spinner, v, 0, now).is_ok();
                vm.candidate(
                    v.index,
                    ok,
                    lock_counts[usize::from(v.index)],
                    false,
                    Wait::Unknown,
                )
            })
            .collect();
        let plan = vm.plan(Spinner::from_pstate(spinner, 0x5), &snapshot);
        let order: Vec<(VcpuId, YieldReason)> = plan.iter().map(|c| (c.target, c.reason)).collect();
        assert_eq!(
            order,
            [
                (vcpus[2], LockHolder),
                (vcpus[1], RoundRobin),
                (vcpus[3], RoundRobin)
            ]
        );
        vm.descheduled(spinner.index, 0x5);
        let mut taken = None;
        for choice in plan.iter() {
            let ok = s.yield_to(spinner, choice.target, 0, now).is_ok();
            vm.attempted(choice, ok);
            if ok {
                taken = Some(choice.target);
                break;
            }
        }
        assert_eq!(taken, Some(vcpus[2]));
        assert_eq!(vm.last_boosted(), 2);
        // The holder runs on the rest of the spinner's slice.
        assert_eq!(s.pick_next(0, now), Some(vcpus[2]));
        assert_eq!(s.slice_end(vcpus[2]), Some(now - 10 + SLICE));
        assert!(vm.spin_state(0).in_spin_loop(), "until it runs again");
        let st = vm.stats();
        assert_eq!(
            (st.wfe, st.spins, st.yield_attempts, st.yields),
            (1, 1, 1, 1)
        );
        assert_eq!(s.stats(spinner, now).unwrap().yields, 1);
    }
}
