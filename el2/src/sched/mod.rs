//! The vCPU scheduler: which vCPU each physical CPU runs, for how long, and
//! what each vCPU's time went to.
//!
//! This is pure bookkeeping. The runner (`el2::run`) keeps one [`Scheduler`] behind
//! one spin lock, calls it on every scheduling event (slice timer, WFI trap,
//! hypercall, wake-up) with the current counter value `now` (CNTPCT ticks),
//! and acts on its answers after dropping the lock: it loads the vCPU that
//! [`Scheduler::pick_next`] names, programs the pCPU's timer for
//! [`Scheduler::slice_end`] and [`Scheduler::next_deadline_on`], and sends a
//! reschedule IPI where a [`Wakeup`] says so. Nothing here blocks, allocates
//! on the hot paths (beyond the amortised growth of a timer heap), or
//! panics on anything a guest can cause.
//!
//! # States
//!
//! | from | to | by |
//! |---|---|---|
//! | Off | Runnable | `add_vcpu(Runnable)`, `power_on` |
//! | Runnable | Running(pcpu) | `pick_next`, `yield_to` (the target) |
//! | Running | Runnable | `put(SliceExpired)`, `put(Yield)`, `yield_to` (the yielder) |
//! | Running | Blocked(Wfi) | `put(Wfi)` |
//! | Blocked | Runnable | `wake`, `expire_timers` |
//! | Running | Off | `put(PowerOff)` (PSCI CPU_OFF) |
//! | Runnable, Blocked | Off | `power_off` (the VM stops or resets) |
//!
//! A wake-up that arrives while the vCPU is Running (or Runnable) sets its
//! *kicked* flag instead, and the next `put(Wfi)` consumes it and answers
//! [`PutOutcome::KeepRunning`]: a wake that races with the vCPU's decision
//! to block is never lost. WFI may always complete early (Arm ARM "Wait For
//! Interrupt"), so a stale kick costs the guest one spurious wake-up at most.
//!
//! # Run queues and placement
//!
//! Every online pCPU has a FIFO run queue (an intrusive doubly linked list
//! through the vCPU table, so any vCPU can leave its queue in O(1)). A vCPU
//! has an affinity (the pCPUs it may run on, intersected with the online
//! ones; a single pCPU pins it) and a *home*, the pCPU it last ran or was
//! queued on. When it becomes Runnable it is queued on:
//! 1. its home, if that pCPU is idle;
//! 2. else any idle pCPU it may use (found through an idle bitmap);
//! 3. else its home, if it has run before (warm caches, no migration);
//! 4. else (first start: `add_vcpu`, `power_on`) the least loaded pCPU it
//!    may use.
//!
//! A pCPU is *idle* once `pick_next` found nothing for it; queuing a vCPU
//! on an idle pCPU claims it (so two wake-ups at once spread over two idle
//! pCPUs) and tells the caller to IPI it ([`Wakeup::Queued`] `ipi`).
//!
//! [`Scheduler::pick_next`] takes, in order:
//! 1. its own queue's candidate (the head, unless another VM queued there
//!    is owed more: "Fair share" below) — unless the head of another queue
//!    that may run here has had at least [`FAIRNESS_MARGIN_SLICES`] slices
//!    less CPU time, and then that one moves here, or a sibling of the
//!    candidate (same VM) queued elsewhere has had that margin less than
//!    the candidate, and then the sibling moves here;
//! 2. with an empty queue, the first vCPU allowed here from the most loaded
//!    other queue (stealing).
//!
//! Rule 1 keeps shares even when the vCPUs do not divide evenly over the
//! pCPUs: with n+1 vCPUs on n pCPUs, one pCPU would otherwise serve a single
//! vCPU while another alternates two. The margin is the hysteresis: shares
//! stay within about that many slices of each other while only a fraction
//! of switches migrate, and evenly loaded queues never migrate anyone. A
//! vCPU never runs on a pCPU outside its affinity, so pinned vCPUs never
//! migrate.
//!
//! # Fair share
//!
//! CPU time is shared per VM, then per vCPU. Each VM has a weight (its
//! `cpu-weight`, [`DEFAULT_WEIGHT`] unless its description says;
//! docs/vm-binding.md), and VMs that all want more than they get receive
//! CPU time in proportion to their weights, whatever their vCPU counts; a
//! VM that cannot use its share (it has fewer runnable vCPUs than that
//! many pCPUs) leaves the rest to the others. Within a VM, its runnable
//! vCPUs share equally.
//!
//! Two clocks measure it, as Linux CFS's group scheduling does:
//! - a VM's *weighted time*: its vCPUs' run ticks times `DEFAULT_WEIGHT /
//!   weight`, runs in progress included. A VM that wakes up (one of its
//!   vCPUs becomes runnable while none was) is raised to no less than the
//!   VM clock (the highest weighted time a VM was scheduled in or renewed
//!   with) minus the margin, so time it did not want is not owed to it.
//! - a vCPU's virtual run time (`vruntime`): its run ticks, raised on its
//!   return from Blocked or Off to no less than the least `vruntime` of
//!   its VM's other runnable vCPUs minus the margin (as CFS places a waking
//!   task against the queue's minimum), or, with none runnable, its VM's
//!   fair clock (the highest `vruntime` a vCPU of the VM was scheduled in
//!   or renewed with) minus the margin.
//!
//! Whenever the scheduler asks whether one vCPU is owed more than another,
//! it compares virtual run times if both belong to one VM and their VMs'
//! weighted times otherwise. A queue's candidate is its head unless a VM
//! with a vCPU further back has had at least the granularity
//! (`slice / WAKEUP_GRANULARITY_DIVISOR`) less weighted time than the
//! head's VM; then it is that VM's first queued vCPU, so a VM's own vCPUs
//! keep their FIFO order. A slice ending with nobody owed more is renewed
//! in place; a vCPU that yields (`put(Yield)`) is passed over by the next
//! pick if anyone else waits, whatever the shares say.
//!
//! The guest's hints stay inside its VM's share: a directed yield gives the
//! yielder's slice to a sibling, a slice extension is granted only when
//! nobody of another VM waits, and kicks and self-sent interrupts wake
//! vCPUs whose VM is then charged for what they run. The host tests in
//! `share_tests` hold VMs of different sizes and weights to their shares
//! within 2% of the machine, and a VM playing every one of those tricks
//! against CPU hogs to no more than its share within 3%.
//!
//! # Time slice
//!
//! A vCPU picked from a queue gets a fresh slice of its VM's length: the
//! scheduler's default slice, or the VM's `time-slice-us`
//! ([`Scheduler::set_vm_slice`]). The default alone sets the wake-up
//! granularity, the minimum runs and the fairness margin below, so a VM's
//! slice changes how often its pCPU is reconsidered, never its share. The
//! runner (`el2::run`) arms the pCPU's timer for
//! [`Scheduler::slice_end`] and calls `put(SliceExpired)` when it fires.
//! If nobody is waiting for the pCPU (its queue is empty and no other queue
//! has a head that `pick_next` would pull), the slice is renewed in place
//! ([`PutOutcome::KeepRunning`]): no switch, so no spurious "preempted"
//! flag for the guest.
//!
//! # Wake-up preemption
//!
//! A vCPU that becomes Runnable because an interrupt is pending for it (a
//! wake from WFI, a kick), or that gets one while it waits in a queue, runs
//! soon rather than behind the running vCPUs' slices, as CFS gives KVM's
//! vCPU threads: if it is owed at least `slice / WAKEUP_GRANULARITY_DIVISOR`
//! more CPU time (by the rule of "Fair share") than the vCPU running on
//! the pCPU it waits for, it moves to the head of that queue and the running vCPU's slice
//! ends now — or, if that one was scheduled in less than its minimum run
//! ago, once it has run that long ([`Wakeup::Preempting`]: the caller sends
//! that pCPU the reschedule SGI). The minimum run is `slice /
//! MIN_RUN_DIVISOR`, or the longer `slice / SIBLING_MIN_RUN_DIVISOR` when
//! the woken vCPU is a sibling of the running one and that one has not run
//! a whole slice since it last blocked: an early preemption between siblings only
//! reorders the VM's own time, and a vCPU that is not CPU-bound is likely
//! in kernel work that holds locks. A woken vCPU waiting for a minimum run
//! is taken by whichever pCPU switches first, if it is owed the
//! granularity over what that pCPU would run. A vCPU woken with no idle
//! pCPU that would preempt the vCPU on its home pCPU goes instead to the
//! pCPU it may use where it would preempt soonest (a CPU-bound vCPU past
//! its minimum run: at once), so it does not wait out a sibling's longer
//! minimum at home while another pCPU computes. Owed that much over the
//! queue's head but not over the running vCPU (typically the sender of
//! the wake-up, about to block), or woken while the pCPU is between two
//! vCPUs, it still moves to the head and runs next there; `latency_tests`
//! holds two vCPUs bouncing an interrupt beside CPU-bound siblings to
//! round trips within two minimum runs. The credit a wake-up can
//! spend is what the woken vCPU (or its VM) did not use, and a vCPU or VM
//! back from a block keeps at most the fairness margin of it, so a guest that wakes
//! itself over and over (self-sent SGIs, short timers) is served fast but
//! gets no more than its share: the host test
//! `wakeups_are_served_fast_but_buy_no_more_than_a_fair_share` holds a
//! waker that wants 97% of a pCPU to 45-55% against a CPU hog, with its
//! median wait within the minimum run.
//!
//! # Directed yield and fairness
//!
//! [`Scheduler::yield_to`] is the primitive the directed-yield policy
//! (KVM's `kvm_vcpu_on_spin`, docs/abi.md §6) builds on: the running vCPU gives
//! the rest of its slice to a Runnable sibling *of the same VM*, which is
//! taken out of whichever queue holds it and runs on this pCPU at once:
//! one call, under one lock, switches the two (the runner then saves one
//! and loads the other without asking `pick_next`). The sibling inherits
//! the yielder's `slice_end` — it does not get a fresh slice — and the
//! yielder goes to the tail of the queue as with a plain
//! yield. So a VM's hints only reorder its own vCPUs inside time the VM
//! already had: no other VM's vCPU waits longer than it would have had the
//! yielder spun to the end of its slice. A yield with no slice left is
//! refused ([`YieldError::NoSliceLeft`]).
//!
//! # Accounting
//!
//! Each vCPU accumulates run, steal (Runnable but not running, DEN0057A
//! stolen time) and blocked ticks, plus event counts ([`VcpuStats`]);
//! [`Scheduler::stats`] and [`Scheduler::vm_stats`] include the interval in
//! progress. The runner (`el2::run`) reads the steal total at every load to update
//! the guest's PV stolen-time record, and writes the PV "preempted" flag at
//! every put/load; [`Scheduler::is_preempted`] answers the same question
//! for the hypervisor's own policies.
//!
//! # Locking
//!
//! All state is in one [`Scheduler`] and every method takes `&mut self` or
//! `&self`: the runner (`el2::run`) wraps it in one spin lock, taken with interrupts
//! masked (the slice timer and IPI handlers call in too), held only for the
//! call, never across a guest entry. It acts on most answers — loading a
//! vCPU, sending IPIs — after releasing the lock; the PV "preempted" flag
//! is the exception, written while the lock is held so that a late 1 from
//! the pCPU that put a vCPU cannot overtake the 0 of the pCPU that loads
//! it next (docs/abi.md §3, "The update rule").
//!
//! # Cost
//!
//! `wake`, `power_off`, `yield_to`, `put` and the queue operations are O(1)
//! plus O(log n) for the WFI timer heap; wake-up placement scans the idle
//! bitmap (`MAX_CPUS / 64` words), and a vCPU back from a block or off
//! walks its VM's vCPUs for the least-served runnable one (its catch-up
//! floor). `pick_next` and `put(SliceExpired)`
//! walk the own queue (the fair-share candidate) and look at the head of
//! each non-empty queue (at most one per pCPU, found through a bitmap);
//! `pick_next` also walks the candidate VM's vCPUs (the sibling pull),
//! and with an empty own queue walks a victim queue for a vCPU allowed to
//! move — the steal scan. First
//! placement (`add_vcpu`, `power_on`) and `expire_timers` /
//! `next_deadline` (all pCPUs) scan the pCPUs.

mod cpuset;
#[cfg(test)]
mod latency_tests;
pub mod onspin;
#[cfg(test)]
mod share_tests;
pub mod spinwatch;
mod stats;
#[cfg(test)]
mod tests;
mod timers;
pub mod waitword;

pub use cpuset::CpuSet;
pub use stats::{VcpuStats, VmStats, millis};

use alloc::vec::Vec;
use core::fmt;

use crate::vcpu::PowerState;
use crate::vcpu::{VcpuId, VmId};
use timers::{Positions, TimerHeap};

/// Wake-up preemption: a vCPU woken by an interrupt (or given one while it
/// waits) preempts the vCPU running where it is queued when it has had at
/// least this fraction of a slice less CPU time (`slice / divisor`: 1 ms
/// at the default 4 ms slice), as Linux CFS's wake-up granularity.
pub const WAKEUP_GRANULARITY_DIVISOR: u64 = 4;

/// The least a preempted vCPU runs after being scheduled in before a
/// wake-up may take its pCPU (`slice / divisor`: 0.5 ms at 4 ms), so that
/// a stream of wake-ups cannot keep a pCPU switching, while a vCPU that
/// blocks often still gets its share against CPU hogs of another VM.
pub const MIN_RUN_DIVISOR: u64 = 8;

/// The minimum run instead (`slice / divisor`: 1.33 ms at 4 ms) when the
/// woken vCPU is a sibling (same VM) of the preempted one and the
/// preempted one has not run a whole slice since it last blocked. Such a
/// vCPU is in the
/// middle of interactive kernel work — a Linux guest forking, exiting,
/// waking tasks on idle CPUs — where an early preemption catches lock
/// holders (rwlock readers, spinlocks taken with interrupts enabled) and
/// only reorders the VM's own time: with 0.5 ms, Linux's `spawn` test at
/// 4x overcommit ran at 0.42 of its speed with this (docs/vms.md,
/// "Wake-up preemption"). A vCPU that has run a whole slice without
/// blocking keeps the short minimum, so an interrupt-driven
/// sibling beside CPU-bound ones is still served fast. Three keeps a round
/// trip of two wake-ups, slice extensions included, within one slice.
pub const SIBLING_MIN_RUN_DIVISOR: u64 = 3;

/// The CPU weight of a VM whose description gives none
/// (`platform::vm::DEFAULT_CPU_WEIGHT`): the unit of the weighted VM times.
pub const DEFAULT_WEIGHT: u32 = platform::vm::DEFAULT_CPU_WEIGHT;

/// How much less CPU time (in slices) the head of another pCPU's queue
/// must have had than the own candidate before `pick_next` takes it
/// instead. The hysteresis that keeps unevenly loaded queues fair without
/// migrating on every switch; it also bounds the credit a vCPU keeps
/// across a block.
pub const FAIRNESS_MARGIN_SLICES: u64 = 2;

/// How long a kicked vCPU runs on its kicker's time ([`Scheduler::lend_to`]):
/// an eighth of the default 4 ms slice, the slice extension's length
/// (`onspin::SLICE_EXTENSION_US`), ample for a lock's waiter to take the
/// lock, run its critical section and release it.
pub const KICK_LEND_US: u64 = 500;

/// Where a vCPU is in its life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VcpuState {
    /// Powered off (never started, or after PSCI CPU_OFF).
    Off,
    /// Wants to run and is waiting for a pCPU in a run queue: "preempted".
    Runnable,
    /// Running on logical pCPU `pcpu`.
    Running {
        /// The pCPU it runs on.
        pcpu: usize,
    },
    /// Waiting for an event.
    Blocked(BlockReason),
}

/// Why a vCPU is blocked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockReason {
    /// WFI (or PSCI CPU_SUSPEND, which behaves like it): until an interrupt
    /// wakes it ([`Scheduler::wake`]) or, if `deadline` is set, until the
    /// counter reaches it ([`Scheduler::expire_timers`]).
    Wfi {
        /// Counter value at which the vCPU's virtual timer fires, if armed.
        deadline: Option<u64>,
    },
}

/// The state [`Scheduler::add_vcpu`] creates a vCPU in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitialState {
    /// Powered off; a sibling starts it with PSCI CPU_ON.
    Off,
    /// Runnable at once (the boot vCPU).
    Runnable,
}

/// Why the running vCPU leaves its pCPU ([`Scheduler::put`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutReason {
    /// Its slice timer fired.
    SliceExpired,
    /// It executed WFI (or CPU_SUSPEND) with nothing pending.
    Wfi {
        /// Counter value at which its virtual timer fires, if armed.
        deadline: Option<u64>,
    },
    /// It gives up the rest of its slice (e.g. a WFE trap with no better
    /// candidate); it goes to the tail of the queue.
    Yield,
    /// PSCI CPU_OFF.
    PowerOff,
}

/// What [`Scheduler::put`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// Queued at the tail of this pCPU's run queue; call `pick_next`.
    Requeued,
    /// Nothing changed: the vCPU stays Running here, resume it. Answered
    /// for a WFI that must complete at once (a kick is pending or its
    /// deadline has passed) and for a slice expiry with nobody waiting (the
    /// slice was renewed; re-read [`Scheduler::slice_end`]).
    KeepRunning,
    /// Blocked; call `pick_next`.
    Blocked,
    /// Off; call `pick_next`.
    PoweredOff,
}

/// What [`Scheduler::wake`] (or a timer expiry, or `power_on`) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wakeup {
    /// The vCPU became Runnable and was queued on `pcpu`. `ipi` is true
    /// when that pCPU was idle: send it the reschedule SGI (not needed if
    /// it is the calling pCPU, which will call `pick_next` anyway).
    Queued {
        /// The pCPU it was queued on.
        pcpu: usize,
        /// Whether `pcpu` was idle and must be poked.
        ipi: bool,
    },
    /// The vCPU became (or was already) Runnable, waits at the head of
    /// `pcpu`'s queue, and the vCPU running there has had its slice cut
    /// short for it (wake-up preemption, module documentation): send
    /// `pcpu` the reschedule SGI, also when it is the calling pCPU (the
    /// running vCPU must pass through the scheduler before its old slice
    /// end). A Runnable vCPU's kicked flag is set as for [`Self::Kicked`].
    Preempting {
        /// The pCPU whose running vCPU gives way.
        pcpu: usize,
    },
    /// The vCPU was already Running (`running_on` is its pCPU) or Runnable
    /// (`None`): its kicked flag is set, so its next WFI completes at once.
    /// A Running vCPU may also need an IPI to see a new virtual interrupt —
    /// that is the interrupt controller's business, not the scheduler's.
    Kicked {
        /// The pCPU it is running on, if it is running.
        running_on: Option<usize>,
    },
    /// The vCPU is off; nothing was done.
    Ignored,
}

/// A scheduler call that cannot be carried out. None of these can be
/// caused by a guest on its own: they mean the caller passed ids that do
/// not exist or do not match the scheduler's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedError {
    /// No such VM.
    UnknownVm(VmId),
    /// No such vCPU.
    UnknownVcpu(VcpuId),
    /// The pCPU index is not an online pCPU of this scheduler.
    BadPcpu(usize),
    /// The affinity asked for contains no online pCPU.
    NoAllowedPcpu,
    /// More than `u16::MAX` VMs, or vCPUs in one VM.
    TooMany,
    /// The vCPU is not the one running on that pCPU.
    NotRunningHere {
        /// The vCPU named.
        vcpu: VcpuId,
        /// The pCPU named.
        pcpu: usize,
    },
    /// `power_on` of a vCPU that is not Off; holds its state, from which
    /// the PSCI layer derives ALREADY_ON or ON_PENDING.
    NotOff(VcpuState),
    /// `power_off` of a vCPU that is running on `pcpu`: stop it there (IPI)
    /// and `put(PowerOff)` it on that pCPU.
    Running {
        /// Where it runs.
        pcpu: usize,
    },
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownVm(vm) => write!(f, "no VM {}", vm.0),
            Self::UnknownVcpu(vcpu) => write!(f, "no vCPU {vcpu}"),
            Self::BadPcpu(pcpu) => write!(f, "pCPU {pcpu} is not online"),
            Self::NoAllowedPcpu => write!(f, "the affinity holds no online pCPU"),
            Self::TooMany => write!(f, "too many VMs or vCPUs"),
            Self::NotRunningHere { vcpu, pcpu } => {
                write!(f, "{vcpu} is not running on pCPU {pcpu}")
            }
            Self::NotOff(state) => write!(f, "vCPU is not off ({state:?})"),
            Self::Running { pcpu } => write!(f, "vCPU is running on pCPU {pcpu}"),
        }
    }
}

/// Why [`Scheduler::yield_to`] refused. Nothing has changed when it does;
/// the policy may try another candidate or fall back to a plain yield.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YieldError {
    /// One of the two vCPUs does not exist.
    UnknownVcpu(VcpuId),
    /// The yielder is not the vCPU running on that pCPU.
    NotRunningHere,
    /// A vCPU cannot yield to itself.
    ToSelf,
    /// The target belongs to another VM: a guest's hints never take time
    /// from another VM.
    OtherVm,
    /// The target is not waiting in a run queue (it is running, blocked or
    /// off).
    NotRunnable(VcpuState),
    /// The target's affinity does not include this pCPU.
    NotAllowedHere,
    /// The yielder's slice is already used up; there is nothing to give.
    NoSliceLeft,
}

/// What the pCPU of a directed yield needs to load its target, read under
/// the same lock as the switch ([`Scheduler::yield_to`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handover {
    /// The end of the slice the target inherited from the yielder.
    pub slice_end: u64,
    /// The target's steal ticks up to the switch: what its PV stolen-time
    /// record is to say when it is loaded.
    pub steal_ticks: u64,
}

/// Where a Runnable vCPU waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// Not waiting (Off, Running, Blocked).
    Nowhere,
    /// In this pCPU's run queue.
    Queue(usize),
}

#[derive(Debug)]
struct Vcpu {
    id: VcpuId,
    state: VcpuState,
    /// Affinity intersected with the online pCPUs; never empty.
    allowed: CpuSet,
    /// Where it last ran or was queued.
    home: usize,
    /// Where it last ran, if it ever did.
    last_pcpu: Option<usize>,
    /// A wake-up arrived while it was not blocked.
    kicked: bool,
    /// Powered on and not scheduled in since (PSCI ON_PENDING).
    on_pending: bool,
    /// Its run ticks when it last became runnable from Blocked or Off: a
    /// vCPU that has run a whole slice since without blocking is
    /// CPU-bound (`preempt_for`).
    run_ticks_at_wake: u64,
    /// Queued by a wake-up that preempts the vCPU running there once that
    /// one has had its minimum run, and not scheduled in since: whichever
    /// pCPU switches first may take it (module documentation, "Wake-up
    /// preemption").
    awaits_preemption: bool,
    /// When the current state began (for accounting and FIFO ages).
    since: u64,
    /// End of the slice, while Running.
    slice_end: u64,
    /// The current slice was extended once already (extend_slice).
    extended: bool,
    /// CPU time received, for fairness among its VM's vCPUs: run ticks,
    /// raised on wake-up to no less than its VM's fair clock minus the
    /// margin.
    vruntime: u64,
    place: Place,
    prev: Option<usize>,
    next: Option<usize>,
    /// The pCPU whose timer heap holds its WFI deadline, if armed.
    timer: Option<usize>,
    /// Its index in that heap.
    timer_pos: usize,
    stats: VcpuStats,
}

impl Positions for [Vcpu] {
    fn set_pos(&mut self, slot: usize, pos: usize) {
        if let Some(v) = self.get_mut(slot) {
            v.timer_pos = pos;
        }
    }
}

#[derive(Debug, Default)]
struct Pcpu {
    head: Option<usize>,
    tail: Option<usize>,
    len: usize,
    current: Option<usize>,
    /// A vCPU that yielded here (`put(Yield)`): the next pick passes over
    /// it if anyone else waits, whatever the shares say.
    skip: Option<usize>,
    timers: TimerHeap,
}

impl Pcpu {
    /// vCPUs that want this pCPU: queued or running.
    fn load(&self) -> usize {
        self.len + usize::from(self.current.is_some())
    }
}

/// A VM's share of the machine: its weight and the CPU time its vCPUs
/// have had, weighted (module documentation, "Fair share").
#[derive(Debug)]
struct VmEntry {
    /// The slots of its vCPUs by vCPU index.
    slots: Vec<usize>,
    /// `cpu-weight`, at least 1.
    weight: u64,
    /// Weighted CPU time of its vCPUs' finished runs (run ticks times
    /// [`DEFAULT_WEIGHT`] / `weight`), raised when the VM wakes up to no
    /// less than the scheduler's VM clock minus the fairness margin.
    served: u64,
    /// How many of its vCPUs are Running, and the sum of the times they
    /// were scheduled in: the runs in progress, for [`Scheduler::vm_time`].
    running: u64,
    running_since: u64,
    /// How many of its vCPUs are Runnable or Running.
    active: u32,
    /// The highest `vruntime` one of its vCPUs was scheduled in (or had its
    /// slice renewed) with: the floor a vCPU back from a block is raised
    /// to, less the margin.
    fair_clock: u64,
    /// The slice its vCPUs get when scheduled in or renewed, in ticks (at
    /// least 1): its `time-slice-us`, the default until set. Last: the
    /// directed yield's path loads `weight` and `served` as one pair.
    slice: u64,
}

impl VmEntry {
    /// `ticks` of CPU time in the VM's weighted units.
    /// The default weight, the common case, costs no division.
    #[inline(always)]
    fn weighted(&self, ticks: u64) -> u64 {
        if self.weight == u64::from(DEFAULT_WEIGHT) {
            ticks
        } else {
            ticks.saturating_mul(u64::from(DEFAULT_WEIGHT)) / self.weight
        }
    }
}

/// Whether a vCPU in `state` wants a pCPU (Runnable or Running).
fn is_active(state: VcpuState) -> bool {
    matches!(state, VcpuState::Runnable | VcpuState::Running { .. })
}

/// The scheduler of every vCPU on every pCPU. See the module documentation.
#[derive(Debug)]
pub struct Scheduler {
    /// The default slice in ticks: a VM's unless it has its own, and the
    /// unit of the wake-up granularity, the minimum runs and the fairness
    /// margin.
    slice: u64,
    online: CpuSet,
    /// Online pCPUs that found nothing to run and have not been given work.
    idle: CpuSet,
    /// pCPUs whose run queue is not empty.
    queued: CpuSet,
    pcpus: Vec<Pcpu>,
    vcpus: Vec<Vcpu>,
    /// Per VM, its vCPUs and its share.
    vms: Vec<VmEntry>,
    /// The vCPU list [`Self::reserve_vm`] made room in, for `add_vm`.
    next_vm_slots: Vec<usize>,
    /// Tests only: the elements every scan has visited (queues, pCPUs,
    /// queued vCPUs), to show that no operation's work grows faster than
    /// linearly with the machine (`tests::work_per_operation_grows_linearly`).
    #[cfg(test)]
    visits: core::cell::Cell<u64>,
    /// The VM clock: the highest weighted VM time ([`Self::vm_time`]) a
    /// vCPU was scheduled in (or had its slice renewed) with.
    vm_clock: u64,
}

impl Scheduler {
    /// A scheduler for the `online` pCPUs (logical indices, e.g.
    /// `BringUpReport::online`) with a default time slice of `slice_ticks`
    /// counter ticks (at least 1). Every online pCPU starts idle.
    pub fn new(online: CpuSet, slice_ticks: u64) -> Self {
        let count = online.iter().last().map_or(0, |last| last + 1);
        Self {
            slice: slice_ticks.max(1),
            online,
            idle: online,
            queued: CpuSet::EMPTY,
            pcpus: (0..count).map(|_| Pcpu::default()).collect(),
            vcpus: Vec::new(),
            vms: Vec::new(),
            next_vm_slots: Vec::new(),
            #[cfg(test)]
            visits: core::cell::Cell::new(0),
            vm_clock: 0,
        }
    }

    /// Gives `vm`'s vCPUs slices of `slice_ticks` (at least 1) instead of
    /// the default, from their next slice on: the VM's `time-slice-us`.
    pub fn set_vm_slice(&mut self, vm: VmId, slice_ticks: u64) -> Result<(), SchedError> {
        let entry = self
            .vms
            .get_mut(usize::from(vm.0))
            .ok_or(SchedError::UnknownVm(vm))?;
        entry.slice = slice_ticks.max(1);
        Ok(())
    }

    /// The pCPUs this scheduler runs vCPUs on.
    pub fn online(&self) -> CpuSet {
        self.online
    }

    /// Makes room for one more VM with `vcpus` vCPUs: its [`Self::add_vm`]
    /// and `vcpus` [`Self::add_vcpu`] calls, and every wake-up deadline its
    /// vCPUs may later leave in any pCPU's timer heap, then allocate
    /// nothing. So a VM that does not fit in the heap is refused here, at
    /// creation, and no guest action ever makes the scheduler allocate.
    pub fn reserve_vm(&mut self, vcpus: usize) -> Result<(), crate::memory::heap::OutOfMemory> {
        let oom = |_| crate::memory::heap::OutOfMemory;
        self.vms.try_reserve(1).map_err(oom)?;
        self.vcpus.try_reserve(vcpus).map_err(oom)?;
        let total = self.vcpus.len() + vcpus;
        for pcpu in &mut self.pcpus {
            pcpu.timers.reserve_total(total).map_err(oom)?;
        }
        let mut slots = Vec::new();
        slots.try_reserve_exact(vcpus).map_err(oom)?;
        self.next_vm_slots = slots;
        Ok(())
    }

    /// Adds a VM with no vCPUs and CPU weight `weight` (the VM's
    /// `cpu-weight`; [`DEFAULT_WEIGHT`] for an equal share; 0 counts as 1).
    /// VM ids are handed out in call order from 0, so add VMs in the order
    /// of the hypervisor's VM table. After [`Self::reserve_vm`], neither
    /// this nor the VM's vCPUs allocate.
    pub fn add_vm(&mut self, weight: u32) -> Result<VmId, SchedError> {
        let id = u16::try_from(self.vms.len()).map_err(|_| SchedError::TooMany)?;
        self.vms.push(VmEntry {
            slots: core::mem::take(&mut self.next_vm_slots),
            weight: u64::from(weight.max(1)),
            served: 0,
            running: 0,
            running_since: 0,
            active: 0,
            fair_clock: 0,
            slice: self.slice,
        });
        Ok(VmId(id))
    }

    /// Adds the next vCPU of `vm` (indices are handed out from 0 in call
    /// order; vCPU 0 is the boot vCPU). `affinity` restricts the pCPUs it
    /// may run on (`None`: any online pCPU). It starts Off, or Runnable and
    /// queued (first placement). A Runnable start is meant for boot, when
    /// every pCPU is about to call `pick_next` anyway; once pCPUs may be
    /// idle, add the vCPU Off and [`Self::power_on`] it, which says which
    /// pCPU to IPI.
    pub fn add_vcpu(
        &mut self,
        vm: VmId,
        affinity: Option<CpuSet>,
        initial: InitialState,
        now: u64,
    ) -> Result<VcpuId, SchedError> {
        let slots = &self
            .vms
            .get(usize::from(vm.0))
            .ok_or(SchedError::UnknownVm(vm))?
            .slots;
        let index = u16::try_from(slots.len()).map_err(|_| SchedError::TooMany)?;
        let allowed = affinity
            .unwrap_or_else(CpuSet::all)
            .intersection(&self.online);
        let Some(first) = allowed.first() else {
            return Err(SchedError::NoAllowedPcpu);
        };
        let id = VcpuId { vm, index };
        let slot = self.vcpus.len();
        self.vcpus.push(Vcpu {
            id,
            state: VcpuState::Off,
            allowed,
            home: self.least_loaded(&allowed, first),
            last_pcpu: None,
            kicked: false,
            on_pending: false,
            awaits_preemption: false,
            run_ticks_at_wake: 0,
            since: now,
            slice_end: 0,
            extended: false,
            vruntime: 0,
            place: Place::Nowhere,
            prev: None,
            next: None,
            timer: None,
            timer_pos: 0,
            stats: VcpuStats::default(),
        });
        if let Some(entry) = self.vms.get_mut(usize::from(vm.0)) {
            entry.slots.push(slot);
        }
        if initial == InitialState::Runnable {
            self.start(slot, now);
        }
        Ok(id)
    }

    /// Number of VMs.
    pub fn vm_count(&self) -> usize {
        self.vms.len()
    }

    /// Number of vCPUs of `vm`.
    pub fn vcpu_count(&self, vm: VmId) -> Option<u16> {
        let entry = self.vms.get(usize::from(vm.0))?;
        u16::try_from(entry.slots.len()).ok()
    }

    /// The vCPUs of `vm`, by index.
    pub fn vcpus(&self, vm: VmId) -> impl Iterator<Item = VcpuId> + '_ {
        let slots = self
            .vms
            .get(usize::from(vm.0))
            .map_or(&[][..], |entry| &entry.slots[..]);
        slots
            .iter()
            .filter_map(|&slot| self.vcpus.get(slot))
            .map(|v| v.id)
    }

    /// The state of `vcpu` (`None` if it does not exist).
    pub fn state(&self, vcpu: VcpuId) -> Option<VcpuState> {
        Some(self.vcpu(vcpu)?.state)
    }

    /// Whether `vcpu` wants to run but is not running (Runnable): the
    /// question a guest's `vcpu_is_preempted` asks.
    pub fn is_preempted(&self, vcpu: VcpuId) -> bool {
        self.state(vcpu) == Some(VcpuState::Runnable)
    }

    /// Whether a wake-up is pending for `vcpu` (its next WFI completes at once).
    pub fn is_kicked(&self, vcpu: VcpuId) -> bool {
        self.vcpu(vcpu).is_some_and(|v| v.kicked)
    }

    /// The power state PSCI reports for `vcpu` (CPU_ON, AFFINITY_INFO):
    /// Off; OnPending from `power_on` until it is first scheduled in; else On.
    pub fn power_state(&self, vcpu: VcpuId) -> Option<PowerState> {
        let v = self.vcpu(vcpu)?;
        Some(match v.state {
            VcpuState::Off => PowerState::Off,
            VcpuState::Runnable if v.on_pending => PowerState::OnPending,
            _ => PowerState::On,
        })
    }

    /// The pCPU `vcpu` last ran or was queued on.
    pub fn home(&self, vcpu: VcpuId) -> Option<usize> {
        Some(self.vcpu(vcpu)?.home)
    }

    /// The counter value at which the running `vcpu`'s slice ends (`None`
    /// unless it is Running).
    pub fn slice_end(&self, vcpu: VcpuId) -> Option<u64> {
        let v = self.vcpu(vcpu)?;
        matches!(v.state, VcpuState::Running { .. }).then_some(v.slice_end)
    }

    /// The vCPU running on `pcpu`.
    pub fn current(&self, pcpu: usize) -> Option<VcpuId> {
        let slot = self.pcpus.get(pcpu)?.current?;
        Some(self.vcpus.get(slot)?.id)
    }

    /// Number of vCPUs waiting in `pcpu`'s run queue.
    pub fn queue_len(&self, pcpu: usize) -> usize {
        self.pcpus.get(pcpu).map_or(0, |p| p.len)
    }

    /// Number of vCPUs that want `pcpu` now: the one running there and
    /// those queued on it (0 for an unknown pCPU). The count KVM's WFE
    /// trap policy looks at (`single_task_running()`; docs/abi.md §6): with
    /// a vCPU loaded, 1 means it is alone. See [`crate::sched::onspin::trap_wfe`].
    pub fn runnable_on(&self, pcpu: usize) -> usize {
        self.pcpus.get(pcpu).map_or(0, Pcpu::load)
    }

    /// Whether `pcpu` found nothing to run and has not been given work since.
    pub fn is_idle(&self, pcpu: usize) -> bool {
        self.idle.contains(pcpu)
    }

    /// `vcpu`'s accounting, including the interval in progress at `now`.
    pub fn stats(&self, vcpu: VcpuId, now: u64) -> Option<VcpuStats> {
        Some(Self::stats_of(self.vcpu(vcpu)?, now))
    }

    /// The sum of `vm`'s vCPU accounting at `now`.
    pub fn vm_stats(&self, vm: VmId, now: u64) -> Option<VmStats> {
        let entry = self.vms.get(usize::from(vm.0))?;
        let mut stats = VmStats::default();
        for v in entry.slots.iter().filter_map(|&slot| self.vcpus.get(slot)) {
            stats.vcpus += 1;
            stats.total += &Self::stats_of(v, now);
        }
        Some(stats)
    }

    /// Chooses what `pcpu` runs next and marks it Running there with its
    /// slice (see the module documentation for the order). `None`: nothing
    /// may run here; the pCPU is now idle and waits for an IPI or its timer
    /// ([`Self::next_deadline_on`]). If a vCPU is already running on `pcpu`
    /// it is returned unchanged. An offline or unknown `pcpu` gets `None`.
    pub fn pick_next(&mut self, pcpu: usize, now: u64) -> Option<VcpuId> {
        if !self.online.contains(pcpu) {
            return None;
        }
        let p = self.pcpus.get_mut(pcpu)?;
        if let Some(slot) = p.current {
            return self.vcpus.get(slot).map(|v| v.id);
        }
        let skip = p.skip.take();
        let Some(slot) = self.choose_next(pcpu, now, skip) else {
            self.idle.insert(pcpu);
            return None;
        };
        self.run(slot, pcpu, now, now.saturating_add(self.slice_of(slot)));
        self.advance_clocks(slot, now);
        Some(self.vcpus[slot].id)
    }

    /// Takes the running `vcpu` off `pcpu` for `why`. See [`PutOutcome`]
    /// for what to do next. Errors if `vcpu` is not the one running on
    /// `pcpu`.
    pub fn put(
        &mut self,
        vcpu: VcpuId,
        pcpu: usize,
        now: u64,
        why: PutReason,
    ) -> Result<PutOutcome, SchedError> {
        let slot = self.running_slot(vcpu, pcpu)?;
        match why {
            PutReason::SliceExpired => {
                if self.would_pick_again(slot, pcpu, now) {
                    // Renewed in place: as good as scheduled in again.
                    self.advance_clocks(slot, now);
                    self.vcpus[slot].slice_end = now.saturating_add(self.slice_of(slot));
                    self.vcpus[slot].extended = false;
                    return Ok(PutOutcome::KeepRunning);
                }
                self.vcpus[slot].stats.preemptions += 1;
                self.requeue(slot, pcpu, now);
                Ok(PutOutcome::Requeued)
            }
            PutReason::Yield => {
                self.vcpus[slot].stats.yields += 1;
                self.requeue(slot, pcpu, now);
                self.pcpus[pcpu].skip = Some(slot);
                Ok(PutOutcome::Requeued)
            }
            PutReason::Wfi { deadline } => {
                let v = &mut self.vcpus[slot];
                if v.kicked {
                    v.kicked = false;
                    return Ok(PutOutcome::KeepRunning);
                }
                if deadline.is_some_and(|d| d <= now) {
                    return Ok(PutOutcome::KeepRunning);
                }
                v.stats.blocks += 1;
                self.pcpus[pcpu].current = None;
                self.transition(slot, VcpuState::Blocked(BlockReason::Wfi { deadline }), now);
                if let Some(deadline) = deadline {
                    self.arm_timer(slot, pcpu, deadline);
                }
                Ok(PutOutcome::Blocked)
            }
            PutReason::PowerOff => {
                self.pcpus[pcpu].current = None;
                self.transition(slot, VcpuState::Off, now);
                let v = &mut self.vcpus[slot];
                v.kicked = false;
                v.on_pending = false;
                Ok(PutOutcome::PoweredOff)
            }
        }
    }

    /// Lets the running `vcpu`, whose slice ends now, run `ticks` longer
    /// (the critical-section boost: its guest says it holds a lock, or it
    /// runs with IRQs masked). Returns the new slice end, or `None` when
    /// the extension is refused: `vcpu` is not running on `pcpu`, its slice
    /// was extended already (once per slice, so a guest that always claims
    /// a lock gets at most one extension per slice; a directed yield hands
    /// the slice on with that flag, so its new holder cannot extend it
    /// again), nobody waits for
    /// `pcpu` (the slice is renewed anyway), or a vCPU of another VM waits
    /// in `pcpu`'s queue: an extension may only make the VM's own vCPUs
    /// wait, never another VM's.
    pub fn extend_slice(&mut self, vcpu: VcpuId, pcpu: usize, now: u64, ticks: u64) -> Option<u64> {
        let slot = self.running_slot(vcpu, pcpu).ok()?;
        if self.vcpus[slot].extended {
            return None;
        }
        let p = &self.pcpus[pcpu];
        let mut waiting = core::iter::successors(p.head, |&slot| self.vcpus[slot].next);
        let mut any = false;
        if !waiting.all(|other| {
            any = true;
            self.vcpus[other].id.vm == vcpu.vm
        }) || !any
        {
            return None;
        }
        let v = &mut self.vcpus[slot];
        v.extended = true;
        v.slice_end = now.saturating_add(ticks);
        v.stats.extensions += 1;
        Some(v.slice_end)
    }

    /// A wake-up for `vcpu` (an interrupt became pending for it, or a PV
    /// kick): Blocked -> Runnable and queued; Running or Runnable -> kicked;
    /// Off -> ignored. See [`Wakeup`].
    pub fn wake(&mut self, vcpu: VcpuId, now: u64) -> Result<Wakeup, SchedError> {
        let slot = self.slot(vcpu)?;
        Ok(self.wake_slot(slot, now))
    }

    /// Starts an Off `vcpu` (PSCI CPU_ON, after the runner (`el2::run`) has set up
    /// its entry registers): Runnable and queued on the least loaded pCPU
    /// it may use (an idle one first). It reports
    /// [`PowerState::OnPending`] until first scheduled in. Errors with
    /// [`SchedError::NotOff`] if it is not Off.
    pub fn power_on(&mut self, vcpu: VcpuId, now: u64) -> Result<Wakeup, SchedError> {
        let slot = self.slot(vcpu)?;
        match self.vcpus[slot].state {
            VcpuState::Off => Ok(self.start(slot, now)),
            state => Err(SchedError::NotOff(state)),
        }
    }

    /// Stops `vcpu` from outside (system off or reset of its VM): a
    /// Runnable or Blocked vCPU becomes Off at once, an Off one stays Off. A
    /// Running one cannot be stopped from here: [`SchedError::Running`] names
    /// its pCPU, which must `put(PowerOff)` it.
    pub fn power_off(&mut self, vcpu: VcpuId, now: u64) -> Result<(), SchedError> {
        let slot = self.slot(vcpu)?;
        match self.vcpus[slot].state {
            VcpuState::Running { pcpu } => return Err(SchedError::Running { pcpu }),
            VcpuState::Off => {}
            VcpuState::Runnable => {
                self.unlink(slot);
                self.transition(slot, VcpuState::Off, now);
            }
            VcpuState::Blocked(_) => {
                self.disarm_timer(slot);
                self.transition(slot, VcpuState::Off, now);
            }
        }
        let v = &mut self.vcpus[slot];
        v.kicked = false;
        v.on_pending = false;
        Ok(())
    }

    /// Directed yield: `from`, running on `pcpu`, gives the rest of its
    /// slice to `target`, a Runnable vCPU of the same VM allowed on `pcpu`.
    /// `from` is queued at the tail of `pcpu`'s queue as for
    /// [`PutReason::Yield`]; `target` leaves its run queue (on any pCPU) and
    /// is Running on `pcpu` at once, until `from`'s `slice_end`: the
    /// caller saves `from` and loads `target` with the [`Handover`],
    /// without a `pick_next`. A hand-over continues the yielder's slice
    /// inside its VM's time, so the fairness clocks do not move (they move
    /// when a slice starts or is renewed). On refusal nothing changes.
    pub fn yield_to(
        &mut self,
        from: VcpuId,
        target: VcpuId,
        pcpu: usize,
        now: u64,
    ) -> Result<Handover, YieldError> {
        let (from_slot, target_slot) = self.yield_slots(from, target, pcpu, now)?;
        Ok(self.switch_within_vm(from_slot, target_slot, pcpu, now))
    }

    /// The hand-over of a kick that lends (PV_SCHED_KICK_LEND, docs/abi.md
    /// §7): as [`Self::yield_to`], same checks and books, but `target`
    /// runs on `pcpu` only until `lend` ticks from `now` (or `from`'s
    /// slice end, if sooner), and `from` waits at the head of `pcpu`'s
    /// queue instead of its tail, so that it runs next. A kicker has work
    /// of its own: it released what the kicked vCPU waited for and goes
    /// on. Sent behind its pCPU's queue it would wait a slice per vCPU
    /// there; lending its slice whole would leave the kicked vCPU, once
    /// past its wait, running on the kicker's time.
    pub fn lend_to(
        &mut self,
        from: VcpuId,
        target: VcpuId,
        pcpu: usize,
        now: u64,
        lend: u64,
    ) -> Result<Handover, YieldError> {
        let (from_slot, target_slot) = self.yield_slots(from, target, pcpu, now)?;
        let mut handover = self.switch_within_vm(from_slot, target_slot, pcpu, now);
        self.unlink(from_slot);
        self.enqueue_front(from_slot, pcpu);
        handover.slice_end = handover.slice_end.min(now.saturating_add(lend));
        self.vcpus[target_slot].slice_end = handover.slice_end;
        Ok(handover)
    }

    /// The switch of [`Self::yield_to`]: `from_slot`, Running on `pcpu`, is
    /// queued at its tail, and `target_slot`, a Runnable vCPU of the same
    /// VM, runs there until `from_slot`'s slice end. The same books as
    /// `requeue(from_slot)` then `run(target_slot)` — the host test
    /// `a_directed_yield_keeps_the_books_of_a_put_and_a_run` holds the two
    /// equal over random schedules — with the two transitions fused: one
    /// vCPU of the VM stops running and another starts, so the VM's
    /// running and active counts stay and only its served time and the
    /// sum of its runs' starts move. It is every directed yield's path.
    #[inline(always)]
    fn switch_within_vm(
        &mut self,
        from_slot: usize,
        target_slot: usize,
        pcpu: usize,
        now: u64,
    ) -> Handover {
        let f = &mut self.vcpus[from_slot];
        let (vm, slice_end, from_since) = (f.id.vm, f.slice_end, f.since);
        let extended = f.extended;
        let ran = now.saturating_sub(from_since);
        f.vruntime = f.vruntime.saturating_add(ran);
        f.stats.run_ticks = f.stats.run_ticks.saturating_add(ran);
        f.stats.yields += 1;
        f.since = from_since.max(now);
        f.state = VcpuState::Runnable;
        self.pcpus[pcpu].current = None;
        if self.vcpus[target_slot].place == Place::Queue(pcpu) {
            self.replace_in_queue(target_slot, from_slot, pcpu);
        } else {
            self.enqueue(from_slot, pcpu);
            self.unlink(target_slot);
        }
        let t = &mut self.vcpus[target_slot];
        t.stats.steal_ticks = t
            .stats
            .steal_ticks
            .saturating_add(now.saturating_sub(t.since));
        t.since = t.since.max(now);
        t.state = VcpuState::Running { pcpu };
        t.slice_end = slice_end;
        // The slice, extended or not, goes on: one extension per slice,
        // however often it changes hands.
        t.extended = extended;
        t.on_pending = false;
        t.awaits_preemption = false;
        t.stats.scheduled_in += 1;
        t.stats.yielded_to += 1;
        if t.last_pcpu.is_some_and(|last| last != pcpu) {
            t.stats.migrations += 1;
        }
        t.last_pcpu = Some(pcpu);
        t.home = pcpu;
        let (target_since, steal_ticks) = (t.since, t.stats.steal_ticks);
        self.pcpus[pcpu].current = Some(target_slot);
        if let Some(entry) = self.vms.get_mut(usize::from(vm.0)) {
            entry.served = entry.served.saturating_add(entry.weighted(ran));
            entry.running_since = entry
                .running_since
                .wrapping_sub(from_since)
                .wrapping_add(target_since);
        }
        Handover {
            slice_end,
            steal_ticks,
        }
    }

    /// Whether [`Self::yield_to`]`(from, target, pcpu, now)` would be
    /// accepted, without changing anything: the same checks in the same
    /// order, so the refusal is the one `yield_to` would answer. The
    /// directed-yield policy ([`crate::sched::onspin`]) uses it to offer only
    /// siblings that can take the yielder's slice on this pCPU, so that its
    /// few attempts are not spent on a vCPU pinned elsewhere or already
    /// running.
    pub fn can_yield_to(
        &self,
        from: VcpuId,
        target: VcpuId,
        pcpu: usize,
        now: u64,
    ) -> Result<(), YieldError> {
        self.yield_slots(from, target, pcpu, now).map(|_| ())
    }

    /// The checks of [`Self::yield_to`], in order; the slots of the
    /// yielder and the target when it would be accepted. Inlined: called
    /// out of line, its result went through memory and the call saved
    /// and restored registers, 23 instructions per directed yield.
    #[inline(always)]
    fn yield_slots(
        &self,
        from: VcpuId,
        target: VcpuId,
        pcpu: usize,
        now: u64,
    ) -> Result<(usize, usize), YieldError> {
        let entry = self.vms.get(usize::from(from.vm.0));
        let slot_in = |vcpu: VcpuId| entry?.slots.get(usize::from(vcpu.index)).copied();
        let from_slot = slot_in(from).ok_or(YieldError::UnknownVcpu(from))?;
        let target_slot = if target.vm == from.vm {
            slot_in(target)
        } else {
            self.slot(target).ok()
        }
        .ok_or(YieldError::UnknownVcpu(target))?;
        if !self.runs_on(from_slot, pcpu) {
            return Err(YieldError::NotRunningHere);
        }
        if target == from {
            return Err(YieldError::ToSelf);
        }
        if target.vm != from.vm {
            return Err(YieldError::OtherVm);
        }
        let t = &self.vcpus[target_slot];
        if !matches!(t.place, Place::Queue(_)) {
            return Err(YieldError::NotRunnable(t.state));
        }
        if !t.allowed.contains(pcpu) {
            return Err(YieldError::NotAllowedHere);
        }
        if self.vcpus[from_slot].slice_end <= now {
            return Err(YieldError::NoSliceLeft);
        }
        Ok((from_slot, target_slot))
    }

    /// Wakes every vCPU that blocked on `pcpu` and whose WFI deadline is at
    /// or before `now`, reporting each wake-up to `on_wake` (which may name
    /// another pCPU to IPI). Call it from `pcpu`'s timer interrupt.
    pub fn expire_timers_on(
        &mut self,
        pcpu: usize,
        now: u64,
        mut on_wake: impl FnMut(VcpuId, Wakeup),
    ) {
        while let Some((deadline, slot)) = self.pcpus.get(pcpu).and_then(|p| p.timers.peek()) {
            if deadline > now {
                break;
            }
            self.visit();
            // Disarming first guarantees progress whatever the vCPU's state.
            self.disarm_timer(slot);
            let wakeup = self.wake_slot(slot, now);
            on_wake(self.vcpus[slot].id, wakeup);
        }
    }

    /// [`Self::expire_timers_on`] for every pCPU.
    pub fn expire_timers(&mut self, now: u64, mut on_wake: impl FnMut(VcpuId, Wakeup)) {
        let online = self.online;
        for pcpu in online.iter() {
            self.visit();
            self.expire_timers_on(pcpu, now, &mut on_wake);
        }
    }

    /// The earliest WFI deadline of the vCPUs blocked on `pcpu`: program
    /// `pcpu`'s timer for the earlier of this and the running vCPU's
    /// [`Self::slice_end`].
    pub fn next_deadline_on(&self, pcpu: usize) -> Option<u64> {
        Some(self.pcpus.get(pcpu)?.timers.peek()?.0)
    }

    /// The earliest WFI deadline of all blocked vCPUs.
    pub fn next_deadline(&self) -> Option<u64> {
        self.online
            .iter()
            .inspect(|_| self.visit())
            .filter_map(|pcpu| self.next_deadline_on(pcpu))
            .min()
    }

    // --- internals -------------------------------------------------------

    fn slot(&self, vcpu: VcpuId) -> Result<usize, SchedError> {
        self.vms
            .get(usize::from(vcpu.vm.0))
            .and_then(|entry| entry.slots.get(usize::from(vcpu.index)))
            .copied()
            .ok_or(SchedError::UnknownVcpu(vcpu))
    }

    fn vcpu(&self, vcpu: VcpuId) -> Option<&Vcpu> {
        self.vcpus.get(self.slot(vcpu).ok()?)
    }

    /// The slot of `vcpu` if it is the one running on `pcpu`.
    fn running_slot(&self, vcpu: VcpuId, pcpu: usize) -> Result<usize, SchedError> {
        let slot = self.slot(vcpu)?;
        if self.runs_on(slot, pcpu) {
            Ok(slot)
        } else {
            Err(SchedError::NotRunningHere { vcpu, pcpu })
        }
    }

    /// Whether `slot` is the vCPU running on `pcpu`: one compare, since a
    /// pCPU's `current` is exactly the vCPU Running on it (every
    /// transition sets the two together; the simulation tests check it
    /// after every event).
    fn runs_on(&self, slot: usize, pcpu: usize) -> bool {
        self.pcpus
            .get(pcpu)
            .is_some_and(|p| p.current == Some(slot))
    }

    fn stats_of(v: &Vcpu, now: u64) -> VcpuStats {
        let mut stats = v.stats;
        Self::close_interval(&mut stats, v.state, v.since, now);
        stats
    }

    /// Adds the open interval of `state`, entered at `since`, up to `now`
    /// to the time counter it belongs to.
    fn close_interval(stats: &mut VcpuStats, state: VcpuState, since: u64, now: u64) {
        let open = now.saturating_sub(since);
        let counter = match state {
            VcpuState::Running { .. } => &mut stats.run_ticks,
            VcpuState::Runnable => &mut stats.steal_ticks,
            VcpuState::Blocked(_) => &mut stats.blocked_ticks,
            VcpuState::Off => return,
        };
        *counter = counter.saturating_add(open);
    }

    /// `vcpu`'s steal time at `now` (its [`VcpuStats::steal_ticks`]),
    /// without copying the rest: what every vcpu_load publishes.
    pub fn steal_ticks(&self, vcpu: VcpuId, now: u64) -> Option<u64> {
        let v = self.vcpu(vcpu)?;
        let open = match v.state {
            VcpuState::Runnable => now.saturating_sub(v.since),
            _ => 0,
        };
        Some(v.stats.steal_ticks.saturating_add(open))
    }

    /// Closes the interval of the current state into the accounting and
    /// enters `state`. In place: this is on every switch's path.
    /// Also keeps the VM's share accounting: its weighted time, its runs in
    /// progress, and its active count, whose rise from 0 (the VM wakes up)
    /// raises its time to the VM clock minus the margin. Inlined: every
    /// caller passes a constant `state`, which folds most of the branches.
    #[inline(always)]
    fn transition(&mut self, slot: usize, state: VcpuState, now: u64) {
        let (vm_clock, margin) = (self.vm_clock, self.margin());
        let v = &mut self.vcpus[slot];
        let Some(vm) = self.vms.get_mut(usize::from(v.id.vm.0)) else {
            return;
        };
        let was_active = is_active(v.state);
        if matches!(v.state, VcpuState::Running { .. }) {
            let ran = now.saturating_sub(v.since);
            v.vruntime = v.vruntime.saturating_add(ran);
            vm.served = vm.served.saturating_add(vm.weighted(ran));
            // Exact by construction: `running_since` is the sum of the
            // `since` of the `running` vCPUs, this one's included.
            vm.running -= 1;
            vm.running_since = vm.running_since.wrapping_sub(v.since);
        }
        Self::close_interval(&mut v.stats, v.state, v.since, now);
        v.since = v.since.max(now);
        v.state = state;
        if matches!(state, VcpuState::Running { .. }) {
            vm.running += 1;
            vm.running_since = vm.running_since.wrapping_add(v.since);
        }
        match (was_active, is_active(state)) {
            (false, true) => {
                v.run_ticks_at_wake = v.stats.run_ticks;
                if vm.active == 0 {
                    vm.served = vm.served.max(vm_clock.saturating_sub(margin));
                }
                vm.active += 1;
            }
            (true, false) => vm.active = vm.active.saturating_sub(1),
            _ => {}
        }
    }

    /// The fairness margin in ticks ([`FAIRNESS_MARGIN_SLICES`] slices).
    fn margin(&self) -> u64 {
        self.slice.saturating_mul(FAIRNESS_MARGIN_SLICES)
    }

    /// `vm`'s weighted CPU time at `now`, its runs in progress included.
    fn vm_time(&self, vm: VmId, now: u64) -> u64 {
        let Some(entry) = self.vms.get(usize::from(vm.0)) else {
            return 0;
        };
        // Each running vCPU's `since` is at most `now` (or the run counts
        // as nothing yet).
        let in_progress = entry
            .running
            .wrapping_mul(now)
            .saturating_sub(entry.running_since);
        entry.served.saturating_add(entry.weighted(in_progress))
    }

    /// `slot` is scheduled in (or renewed) at `now`: its VM's fair clock
    /// and the VM clock move up to its times.
    #[inline(always)]
    fn advance_clocks(&mut self, slot: usize, now: u64) {
        let vruntime = self.vruntime_at(slot, now);
        let vm = self.vcpus[slot].id.vm;
        let vm_time = self.vm_time(vm, now);
        self.vm_clock = self.vm_clock.max(vm_time);
        if let Some(entry) = self.vms.get_mut(usize::from(vm.0)) {
            entry.fair_clock = entry.fair_clock.max(vruntime);
        }
    }

    /// Whether `slot` has had at least `lead` ticks less CPU time than
    /// `other` at `now`: between vCPUs of one VM by their virtual run times,
    /// between vCPUs of different VMs by their VMs' weighted times (module
    /// documentation, "Fair share").
    fn owed(&self, slot: usize, other: usize, now: u64, lead: u64) -> bool {
        let (a, b) = (self.vcpus[slot].id.vm, self.vcpus[other].id.vm);
        if a == b {
            self.vruntime_at(slot, now).saturating_add(lead) <= self.vruntime_at(other, now)
        } else {
            self.vm_time(a, now).saturating_add(lead) <= self.vm_time(b, now)
        }
    }

    /// Off -> Runnable on its first placement.
    fn start(&mut self, slot: usize, now: u64) -> Wakeup {
        self.transition(slot, VcpuState::Runnable, now);
        self.catch_up(slot, now);
        let v = &mut self.vcpus[slot];
        v.kicked = false;
        v.on_pending = true;
        v.awaits_preemption = false;
        let pcpu = self.placement(slot, true);
        let ipi = self.enqueue(slot, pcpu);
        Wakeup::Queued { pcpu, ipi }
    }

    fn wake_slot(&mut self, slot: usize, now: u64) -> Wakeup {
        match self.vcpus[slot].state {
            VcpuState::Off => Wakeup::Ignored,
            VcpuState::Running { pcpu } => {
                self.vcpus[slot].kicked = true;
                Wakeup::Kicked {
                    running_on: Some(pcpu),
                }
            }
            VcpuState::Runnable => {
                self.vcpus[slot].kicked = true;
                match self.vcpus[slot].place {
                    Place::Queue(pcpu) => self.preempt_for(slot, pcpu, now),
                    Place::Nowhere => None,
                }
                .unwrap_or(Wakeup::Kicked { running_on: None })
            }
            VcpuState::Blocked(_) => {
                self.disarm_timer(slot);
                self.transition(slot, VcpuState::Runnable, now);
                self.catch_up(slot, now);
                let mut pcpu = self.placement(slot, false);
                if !self.idle.contains(pcpu) {
                    pcpu = self.soonest_preemption(slot, pcpu, now);
                }
                let ipi = self.enqueue(slot, pcpu);
                let preempting = if ipi {
                    None
                } else {
                    self.preempt_for(slot, pcpu, now)
                };
                preempting.unwrap_or(Wakeup::Queued { pcpu, ipi })
            }
        }
    }

    /// Wake-up preemption (module documentation): if `slot`, Runnable in
    /// `pcpu`'s queue, has had at least the wake-up granularity less CPU
    /// time than the vCPU running there, it moves to the head of the queue
    /// and the running vCPU's slice ends now, or once it has run the
    /// minimum since it was scheduled in. If it is not owed that much over
    /// the running vCPU, or nothing runs there (the pCPU is between two
    /// vCPUs), but it is owed that much over the queue's head, it still
    /// moves to the head: it runs next there.
    fn preempt_for(&mut self, slot: usize, pcpu: usize, now: u64) -> Option<Wakeup> {
        let p = self.pcpus.get(pcpu)?;
        let (current, head) = (p.current, p.head);
        let granularity = self.granularity();
        let Some(current) = current.filter(|&c| self.owed(slot, c, now, granularity)) else {
            // Typically the running vCPU is the one that sent the wake-up
            // and is about to block itself: the woken vCPU should not wait
            // behind CPU-bound vCPUs that had their share.
            if let Some(head) = head
                && head != slot
                && self.owed(slot, head, now, granularity)
            {
                self.unlink(slot);
                self.enqueue_front(slot, pcpu);
            }
            return None;
        };
        self.unlink(slot);
        self.enqueue_front(slot, pcpu);
        self.vcpus[slot].awaits_preemption = true;
        let end = self.preemption_end(slot, current, now);
        let c = &mut self.vcpus[current];
        if end < c.slice_end {
            c.slice_end = end;
            c.stats.wakeup_preemptions += 1;
        }
        Some(Wakeup::Preempting { pcpu })
    }

    /// When `current`, running, would make way for `slot` woken now: once
    /// it has run its minimum since it was scheduled in (the longer
    /// sibling minimum if both are of one VM and `current` is in
    /// interactive work: it has not run a whole slice since it last woke).
    fn preemption_end(&self, slot: usize, current: usize, now: u64) -> u64 {
        let c = &self.vcpus[current];
        let ran_since_wake = c
            .stats
            .run_ticks
            .saturating_add(now.saturating_sub(c.since))
            .saturating_sub(c.run_ticks_at_wake);
        let min_run = if c.id.vm == self.vcpus[slot].id.vm && ran_since_wake < self.slice {
            self.slice / SIBLING_MIN_RUN_DIVISOR
        } else {
            self.slice / MIN_RUN_DIVISOR
        };
        now.max(c.since.saturating_add(min_run))
    }

    /// Where `slot`, woken with no idle pCPU to go to, waits least. If it
    /// would preempt the vCPU running on `home` ([`Self::preempt_for`]'s
    /// rule), the pCPU it may use whose running vCPU it would preempt
    /// soonest, `home` on ties. If it would not preempt there (typically
    /// the vCPU running there sent the wake-up and is about to block: the
    /// woken one runs next there), `home`. Without this a vCPU woken by a
    /// sibling queued behind that sibling on its home pCPU and waited out
    /// the sibling minimum there while another pCPU ran a CPU-bound vCPU
    /// it could have preempted at once (a 4.5 ms ping round trip in
    /// irq-check).
    fn soonest_preemption(&self, slot: usize, home: usize, now: u64) -> usize {
        let granularity = self.granularity();
        let end_on = |pcpu: usize| {
            self.visit();
            let current = self.pcpus.get(pcpu)?.current?;
            self.owed(slot, current, now, granularity)
                .then(|| self.preemption_end(slot, current, now))
        };
        let mut best = (end_on(home), home);
        for pcpu in self.vcpus[slot].allowed.intersection(&self.online).iter() {
            if pcpu == home {
                continue;
            }
            if let Some(end) = end_on(pcpu)
                && best.0.is_some_and(|b| end < b)
            {
                best = (Some(end), pcpu);
            }
        }
        best.1
    }

    /// A vCPU that was blocked or off comes back with at most the fairness
    /// margin of credit over the least-served of its VM's other runnable
    /// vCPUs (as CFS places a waking task relative to the run queue's
    /// minimum virtual run time), or over its VM's fair clock if none is:
    /// time it did not want is not owed to it, and what it is owed puts it
    /// ahead of every CPU-bound sibling, however far their times spread
    /// over the queues. (Its VM's own credit is bounded in `transition`.)
    fn catch_up(&mut self, slot: usize, now: u64) {
        let margin = self.margin();
        let vm = usize::from(self.vcpus[slot].id.vm.0);
        let Some(entry) = self.vms.get(vm) else {
            return;
        };
        let least_served = entry
            .slots
            .iter()
            .filter(|&&other| other != slot && is_active(self.vcpus[other].state))
            .map(|&other| self.vruntime_at(other, now))
            .min();
        let floor = least_served
            .unwrap_or(entry.fair_clock)
            .saturating_sub(margin);
        let v = &mut self.vcpus[slot];
        v.vruntime = v.vruntime.max(floor);
    }

    /// Where a vCPU that becomes Runnable is queued (module documentation,
    /// "Run queues and placement"). `first_start`: it has no warm home.
    fn placement(&self, slot: usize, first_start: bool) -> usize {
        let v = &self.vcpus[slot];
        let home_allowed = v.allowed.contains(v.home);
        if home_allowed && self.idle.contains(v.home) {
            return v.home;
        }
        if let Some(idle) = self.idle.intersection(&v.allowed).first() {
            return idle;
        }
        if home_allowed && !first_start {
            return v.home;
        }
        self.least_loaded(&v.allowed, v.home)
    }

    /// Counts one element visited by a scan (tests only; nothing otherwise).
    #[inline(always)]
    fn visit(&self) {
        #[cfg(test)]
        self.visits.set(self.visits.get() + 1);
    }

    /// The least loaded pCPU of `allowed`; ties go to `prefer`, then to the
    /// lowest index.
    fn least_loaded(&self, allowed: &CpuSet, prefer: usize) -> usize {
        let load = |pcpu: usize| self.pcpus.get(pcpu).map_or(usize::MAX, Pcpu::load);
        let mut best = (
            prefer,
            if allowed.contains(prefer) {
                load(prefer)
            } else {
                usize::MAX
            },
        );
        for pcpu in allowed.iter() {
            self.visit();
            if load(pcpu) < best.1 {
                best = (pcpu, load(pcpu));
            }
        }
        best.0
    }

    /// Queues a Runnable vCPU at the tail of `pcpu`'s queue; returns whether
    /// `pcpu` was idle (and claims it).
    fn enqueue(&mut self, slot: usize, pcpu: usize) -> bool {
        let tail = self.pcpus[pcpu].tail;
        let v = &mut self.vcpus[slot];
        v.place = Place::Queue(pcpu);
        v.prev = tail;
        v.next = None;
        v.home = pcpu;
        match tail {
            Some(tail) => self.vcpus[tail].next = Some(slot),
            None => self.pcpus[pcpu].head = Some(slot),
        }
        let p = &mut self.pcpus[pcpu];
        p.tail = Some(slot);
        p.len += 1;
        self.queued.insert(pcpu);
        let was_idle = self.idle.contains(pcpu);
        self.idle.remove(pcpu);
        was_idle
    }

    /// Queues a Runnable vCPU at the head of `pcpu`'s queue (a wake-up
    /// preemption: it runs next there). `pcpu` runs a vCPU, so it is not
    /// idle.
    fn enqueue_front(&mut self, slot: usize, pcpu: usize) {
        let head = self.pcpus[pcpu].head;
        let v = &mut self.vcpus[slot];
        v.place = Place::Queue(pcpu);
        v.prev = None;
        v.next = head;
        v.home = pcpu;
        match head {
            Some(head) => self.vcpus[head].prev = Some(slot),
            None => self.pcpus[pcpu].tail = Some(slot),
        }
        let p = &mut self.pcpus[pcpu];
        p.head = Some(slot);
        p.len += 1;
        self.queued.insert(pcpu);
    }

    /// `leaving` leaves `pcpu`'s queue and `joining` joins its tail: the
    /// same links as `enqueue(joining, pcpu)` then `unlink(leaving)`, for a
    /// directed yield to a vCPU queued on the yielder's own pCPU. The
    /// queue's length and its bit in `queued` stay, and `pcpu`, which runs
    /// the yielder, is not idle. The common case, `leaving` at the tail
    /// (the only waiter), is one link: `joining` takes its place. Inlined:
    /// it is every directed yield's, and out of line it costs 17 more
    /// instructions (the profile's cost run).
    #[inline(always)]
    fn replace_in_queue(&mut self, leaving: usize, joining: usize, pcpu: usize) {
        let (prev, next) = {
            let v = &mut self.vcpus[leaving];
            v.place = Place::Nowhere;
            (v.prev.take(), v.next.take())
        };
        let p = &mut self.pcpus[pcpu];
        let before = match next {
            // At the tail: `joining` follows `prev`.
            None => prev,
            // Inside: close the gap, then follow the tail.
            Some(next) => {
                match prev {
                    Some(prev) => self.vcpus[prev].next = Some(next),
                    None => p.head = Some(next),
                }
                self.vcpus[next].prev = prev;
                p.tail
            }
        };
        match before {
            Some(before) => self.vcpus[before].next = Some(joining),
            None => p.head = Some(joining),
        }
        p.tail = Some(joining);
        let j = &mut self.vcpus[joining];
        j.place = Place::Queue(pcpu);
        j.prev = before;
        j.next = None;
        j.home = pcpu;
    }

    /// Takes a Runnable vCPU out of its queue.
    fn unlink(&mut self, slot: usize) {
        let (place, prev, next) = {
            let v = &mut self.vcpus[slot];
            let taken = (v.place, v.prev.take(), v.next.take());
            v.place = Place::Nowhere;
            taken
        };
        match place {
            Place::Nowhere => {}
            Place::Queue(pcpu) => {
                match prev {
                    Some(prev) => self.vcpus[prev].next = next,
                    None => self.pcpus[pcpu].head = next,
                }
                match next {
                    Some(next) => self.vcpus[next].prev = prev,
                    None => self.pcpus[pcpu].tail = prev,
                }
                let p = &mut self.pcpus[pcpu];
                p.len = p.len.saturating_sub(1);
                if p.len == 0 {
                    self.queued.remove(pcpu);
                }
            }
        }
    }

    /// Running -> Runnable at the tail of `pcpu`'s queue.
    fn requeue(&mut self, slot: usize, pcpu: usize, now: u64) {
        self.pcpus[pcpu].current = None;
        self.transition(slot, VcpuState::Runnable, now);
        self.enqueue(slot, pcpu);
    }

    /// Makes a waiting vCPU Running on `pcpu` until `slice_end`.
    fn run(&mut self, slot: usize, pcpu: usize, now: u64, slice_end: u64) {
        self.unlink(slot);
        self.transition(slot, VcpuState::Running { pcpu }, now);
        let v = &mut self.vcpus[slot];
        v.slice_end = slice_end;
        v.extended = false;
        v.on_pending = false;
        v.awaits_preemption = false;
        v.stats.scheduled_in += 1;
        if v.last_pcpu.is_some_and(|last| last != pcpu) {
            v.stats.migrations += 1;
        }
        v.last_pcpu = Some(pcpu);
        v.home = pcpu;
        self.pcpus[pcpu].current = Some(slot);
        self.idle.remove(pcpu);
    }

    /// The next vCPU for `pcpu` from the run queues.
    /// `skip`: a vCPU that has just yielded here.
    fn choose_next(&self, pcpu: usize, now: u64, skip: Option<usize>) -> Option<usize> {
        let Some(own) = self.queue_candidate(pcpu, now, None, skip) else {
            return self.steal_for(pcpu);
        };
        match self.least_served_foreign_head(pcpu, now) {
            Some(foreign) if self.owed(foreign, own, now, self.margin()) => Some(foreign),
            _ => Some(
                self.preemptor_for(pcpu, own, now)
                    .or_else(|| self.most_owed_sibling(own, pcpu))
                    .unwrap_or(own),
            ),
        }
    }

    /// The head of another queue that waits there for a wake-up
    /// preemption, may run on `pcpu` and is owed at least the granularity
    /// over `own`, `pcpu`'s own candidate: it runs here now rather than
    /// after the minimum run of the vCPU it would preempt (the most owed
    /// one, if several wait).
    fn preemptor_for(&self, pcpu: usize, own: usize, now: u64) -> Option<usize> {
        self.queued
            .iter()
            .inspect(|_| self.visit())
            .filter(|&other| other != pcpu)
            .filter_map(|other| self.pcpus.get(other)?.head)
            .filter(|&head| {
                let v = &self.vcpus[head];
                v.awaits_preemption
                    && v.allowed.contains(pcpu)
                    && self.owed(head, own, now, self.granularity())
            })
            .min_by_key(|&head| {
                let v = &self.vcpus[head];
                (self.vm_time(v.id.vm, now), v.vruntime, head)
            })
    }

    /// A sibling of `own` (same VM) queued on another pCPU, allowed on
    /// `pcpu`, that has had at least the margin less CPU time than `own`:
    /// the one that has had the least. What keeps a VM's vCPUs even when
    /// they wait on queues that serve the VM unequally.
    fn most_owed_sibling(&self, own: usize, pcpu: usize) -> Option<usize> {
        let entry = self.vms.get(usize::from(self.vcpus[own].id.vm.0))?;
        let limit = self.vcpus[own].vruntime.checked_sub(self.margin())?;
        entry
            .slots
            .iter()
            .inspect(|_| self.visit())
            .map(|&slot| (slot, &self.vcpus[slot]))
            .filter(|(_, v)| matches!(v.place, Place::Queue(q) if q != pcpu))
            .filter(|(_, v)| v.allowed.contains(pcpu) && v.vruntime <= limit)
            .min_by_key(|(slot, v)| (v.vruntime, *slot))
            .map(|(slot, _)| slot)
    }

    /// Whom `pcpu`'s own queue offers (module documentation, "Fair
    /// share"): the vCPU queued first, unless another VM with a vCPU in the
    /// queue has had at least the granularity less weighted CPU time than
    /// that one's VM; then the first queued vCPU of the VM that has had the
    /// least. `incumbent`, the vCPU running there, counts as queued at the
    /// tail. `skip` (a vCPU that just yielded) is offered only if nobody
    /// else is there.
    fn queue_candidate(
        &self,
        pcpu: usize,
        now: u64,
        incumbent: Option<usize>,
        skip: Option<usize>,
    ) -> Option<usize> {
        let head = self.pcpus.get(pcpu)?.head;
        let queued = core::iter::successors(head, |&slot| self.vcpus[slot].next);
        // (weighted VM time, first slot) of the queue's first VM and of the
        // least served one.
        let mut first: Option<(u64, usize)> = None;
        let mut least: Option<(u64, usize)> = None;
        let mut skipped = None;
        for slot in queued.chain(incumbent) {
            self.visit();
            if Some(slot) == skip {
                skipped = Some(slot);
                continue;
            }
            let vm = self.vcpus[slot].id.vm;
            if least.is_some_and(|(_, seen)| self.vcpus[seen].id.vm == vm) {
                continue;
            }
            let time = self.vm_time(vm, now);
            first = first.or(Some((time, slot)));
            if least.is_none_or(|(least_time, _)| time < least_time) {
                least = Some((time, slot));
            }
        }
        match (first, least) {
            (Some((first_time, _)), Some((least_time, slot)))
                if least_time.saturating_add(self.granularity()) <= first_time =>
            {
                Some(slot)
            }
            (Some((_, slot)), _) => Some(slot),
            _ => skipped,
        }
    }

    /// The length of the slices `slot`'s VM gives its vCPUs.
    fn slice_of(&self, slot: usize) -> u64 {
        self.vms
            .get(usize::from(self.vcpus[slot].id.vm.0))
            .map_or(self.slice, |entry| entry.slice)
    }

    /// The wake-up and share granularity in ticks (`slice /
    /// WAKEUP_GRANULARITY_DIVISOR`).
    fn granularity(&self) -> u64 {
        self.slice / WAKEUP_GRANULARITY_DIVISOR
    }

    /// `slot`'s virtual run time at `now`, including a run in progress.
    fn vruntime_at(&self, slot: usize, now: u64) -> u64 {
        let v = &self.vcpus[slot];
        match v.state {
            VcpuState::Running { .. } => v.vruntime.saturating_add(now.saturating_sub(v.since)),
            _ => v.vruntime,
        }
    }

    /// Whether `pick_next(pcpu)` would choose `slot`, running on `pcpu`,
    /// again if it were put back at `now`: nobody waiting for this pCPU
    /// is owed the time more.
    fn would_pick_again(&self, slot: usize, pcpu: usize, now: u64) -> bool {
        let p = &self.pcpus[pcpu];
        (p.head.is_none() || self.queue_candidate(pcpu, now, Some(slot), None) == Some(slot))
            && self
                .least_served_foreign_head(pcpu, now)
                .is_none_or(|foreign| !self.owed(foreign, slot, now, self.margin()))
    }

    /// Among the heads of the other non-empty queues that may run on
    /// `pcpu`, the one that has had the least CPU time: the least weighted
    /// VM time, then the least virtual run time.
    fn least_served_foreign_head(&self, pcpu: usize, now: u64) -> Option<usize> {
        self.queued
            .iter()
            .inspect(|_| self.visit())
            .filter(|&other| other != pcpu)
            .filter_map(|other| self.pcpus.get(other)?.head)
            .filter(|&head| self.vcpus[head].allowed.contains(pcpu))
            .min_by_key(|&head| {
                let v = &self.vcpus[head];
                (self.vm_time(v.id.vm, now), v.vruntime, head)
            })
    }

    /// For an empty queue: the first vCPU allowed on `pcpu` in the most
    /// loaded other queue that has one.
    fn steal_for(&self, pcpu: usize) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for other in self.queued.iter().filter(|&other| other != pcpu) {
            self.visit();
            let len = self.pcpus[other].len;
            if best.is_some_and(|(best_len, _)| len <= best_len) {
                continue;
            }
            let mut cursor = self.pcpus[other].head;
            while let Some(slot) = cursor {
                self.visit();
                if self.vcpus[slot].allowed.contains(pcpu) {
                    best = Some((len, slot));
                    break;
                }
                cursor = self.vcpus[slot].next;
            }
        }
        best.map(|(_, slot)| slot)
    }

    fn arm_timer(&mut self, slot: usize, pcpu: usize, deadline: u64) {
        self.vcpus[slot].timer = Some(pcpu);
        self.pcpus[pcpu]
            .timers
            .insert(deadline, slot, &mut self.vcpus[..]);
    }

    fn disarm_timer(&mut self, slot: usize) {
        let v = &mut self.vcpus[slot];
        if let Some(pcpu) = v.timer.take() {
            let at = v.timer_pos;
            if let Some(p) = self.pcpus.get_mut(pcpu) {
                p.timers.remove_at(at, &mut self.vcpus[..]);
            }
        }
    }
}
