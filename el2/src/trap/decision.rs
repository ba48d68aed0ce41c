//! What happens to a vCPU after its exit was handled: the one type every
//! exit handler and the SMCCC dispatcher (`el2::services::smccc`) answer
//! with. The runner (`el2::run`, `Runner::apply`) carries it out, in the
//! documented lock order, and is the only code that does: a handler
//! decides, it never powers, blocks, wakes or yields a vCPU itself.
//!
//! Deliberately exhaustive: a new variant must be carried out by the
//! runner and checked by the dispatcher's fuzz harness.

use crate::vcpu::{VcpuId, VmId};
use platform::TrapPolicy;

/// What the runner does next with the vCPU whose exit was handled. The
/// guest-visible results (X0..X3, an injected exception, the PC stepped
/// over the trapped instruction) are already in the vCPU's context; a
/// variant says when the answer depends on what the runner finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Enter the guest again.
    Resume,
    /// WFI, WFIT or PSCI CPU_SUSPEND (treated as WFI, as KVM does): block
    /// until an interrupt is pending for the vCPU, its virtual timer
    /// fires, or `deadline` (physical counter ticks: WFIT's own) passes;
    /// resume at once if an interrupt is pending already, masked by
    /// PSTATE or not (Arm ARM D1.6.2 "Wait for Interrupt").
    WaitForInterrupt {
        /// WFIT's deadline, if any.
        deadline: Option<u64>,
    },
    /// WFE (a spin): KVM's `kvm_vcpu_on_spin` — hand the rest of the slice
    /// to a preempted sibling, boosted ones first (`el2::sched::onspin`);
    /// else yield plainly.
    OnSpin,
    /// PSCI CPU_ON, answered SUCCESS for a `target` that was Off: reset
    /// its context to start at `entry` in EL1h with the MMU and caches off,
    /// DAIF masked and X0 = `context_id`, forget the PV-lock record it
    /// registered itself, and power it on. If it is no longer Off when the
    /// runner gets to it (another vCPU started it meanwhile), the caller's
    /// X0 is rewritten with `PowerState::cpu_on_error`.
    PowerOn {
        /// The vCPU to start (same VM as the caller).
        target: VcpuId,
        /// Its entry point (IPA, checked to be in the VM's RAM).
        entry: u64,
        /// Its X0 at entry.
        context_id: u64,
    },
    /// PSCI CPU_OFF: the caller powers off. It next runs only after a
    /// CPU_ON, from that call's entry point.
    PowerOff,
    /// PSCI SYSTEM_OFF: stop every vCPU of the VM and power it off.
    StopVm,
    /// PSCI SYSTEM_RESET or SYSTEM_RESET2: stop every vCPU of the VM, then
    /// reload it and start its vCPU 0 again.
    ResetVm,
    /// A paravirtual kick (openEuler PV_SCHED_KICK_CPU, Anolis
    /// PV_QSPINLOCK_KICK_CPU, docs/abi.md §3; the project's
    /// PV_SCHED_KICK_LEND, §7, with `lend`). X0 already holds 0. Under
    /// the scheduler lock:
    /// 1. `Scheduler::wake(target)`: a Blocked target becomes Runnable
    ///    (its PV-lock record then reads
    ///    [`crate::services::pv::preempted_on_wake`], and its pCPU gets
    ///    the reschedule SGI the [`crate::sched::Wakeup`] asks for); a
    ///    Running or Runnable one gets its kicked flag, so its current or
    ///    next WFI returns at once; an Off one is left alone;
    /// 2. only with `lend`: if `target` is not the caller and is now
    ///    Runnable, and the wake did not just queue it on an idle pCPU or
    ///    make it preempt (where it runs at once),
    ///    `Scheduler::lend_to(caller, target)`: a short run of the
    ///    caller's own slice within its own VM; if refused, or without
    ///    `lend`, resume the caller.
    ///
    /// `target` is a vCPU of the caller's VM (checked); it may be the
    /// caller itself (only the kicked flag is set) or Off.
    Kick {
        /// The vCPU to wake.
        target: VcpuId,
        /// Whether the caller lends it a short run at once
        /// (PV_SCHED_KICK_LEND) or only wakes it (KICK_CPU).
        lend: bool,
    },
    /// PV_SCHED_YIELD_TO (`pvlock_abi::directed_yield`): give the rest of
    /// the caller's slice to `target` if it is waiting for a pCPU. X0
    /// already holds 1 ("not yielded"); a yield that happens rewrites it
    /// to 0 (`directed_yield::YIELDED`). Either way the call is counted
    /// ([`crate::sched::onspin::SpinStats::record_pv_yield`]). No wake-up:
    /// a blocked target stays blocked (that is a kick's job). `target` is
    /// a vCPU of the caller's VM other than the caller (checked).
    YieldTo {
        /// The vCPU to yield to.
        target: VcpuId,
    },
    /// PVLOCK_SET_WFX_POLICY (`pvlock_abi::control`), from a control VM:
    /// from now on vCPU `vcpu` of VM `vm` — every vCPU of it with `None` —
    /// traps WFE by policy `wfe`
    /// ([`crate::sched::onspin::WfxPolicies::set`], no lock; the
    /// target may be the caller's own VM). X0 already holds 0
    /// (`pvlock_abi::control::SET`). The VM and vCPU exist (checked
    /// through `VmView::vm_vcpu_count`; the VM table never changes). Each
    /// affected vCPU picks the policy up at its next guest entry, the
    /// slice tick at the latest: no IPI. WFI's setting is not changed.
    /// The one decision that reaches another VM.
    SetWfxPolicy {
        /// The target VM (index in the hypervisor's VM table).
        vm: VmId,
        /// The target vCPU of that VM, `None` for all of them.
        vcpu: Option<u16>,
        /// The WFE trap policy to apply.
        wfe: TrapPolicy,
    },
}
