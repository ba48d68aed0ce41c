//! What the runner needs of the CPU it runs on: the [`Machine`] trait,
//! which `el2/src/arch/` implements for the hardware and the host tests
//! implement as a fake, and the part of a vCPU's context the runner itself
//! reads and writes ([`VcpuContext`]).
//!
//! The trait is deliberately narrow: entering the guest (the syndrome
//! registers each read once), saving and loading the registers only the
//! hardware layer knows, lazy FP/SIMD, the GIC virtual interface's list
//! registers and ICH_HCR_EL2, the debug registers of a vCPU that uses
//! them, the EL2 timer, SGIs to other pCPUs, the
//! stores into guest memory that the PV records need, and the console.
//! Every decision about what those operations mean is the runner's.

use crate::memory::layout::MapKind;
use crate::services::smccc::{ConstantReplies, VcpuCallCounts};
use crate::trap::debug::{DebugFeatures, DebugRegisters, DebugState};
use crate::trap::fault::Injection;
use crate::trap::pmu::{PmuFeatures, PmuRegisters, PmuState};
use crate::vcpu::GuestRegs;
use alloc::string::String;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use platform::MemRange;
use pvlock_abi::smccc::RESULT_REGS;

/// What the hardware layer answers on a guest exit itself, without
/// returning to the runner: a constant hypercall (SMCCC_VERSION,
/// PSCI_VERSION, the vendor UID, KVM_FEATURES) from a vCPU with no new
/// interrupt. The reply is the dispatcher's, counted in the vCPU's own
/// row; everything else returns from [`Machine::enter_guest`].
///
/// Answering in place skips nothing the runner would do for such a call:
/// it changes no state, so the checks of a full pass read the same, and
/// an interrupt (a slice end, a reschedule SGI) still exits to the runner
/// as soon as the guest is back in (physical IRQs are routed to EL2).
pub struct FastExit<'a> {
    pub constants: &'a ConstantReplies,
    pub counts: VcpuCallCounts<'a>,
    /// The VM's `irq_attention` and the vCPU's bit in it: with news, the
    /// runner refills the list registers first.
    pub attention: &'a AtomicU64,
    pub mask: u64,
}

impl FastExit<'_> {
    /// Answers a synchronous exit with syndrome `esr` in `x` (the guest's
    /// X0..X3, all a constant call reads or writes): true if the guest
    /// goes straight back in, false (nothing changed) if the runner must
    /// see the exit.
    #[inline(always)]
    pub fn answer(&self, esr: u64, x: &mut [u64; RESULT_REGS]) -> bool {
        crate::trap::exit::is_hvc0_syndrome(esr)
            && self.attention.load(Ordering::Acquire) & self.mask == 0
            && self.constants.answer(x, self.counts)
    }
}

/// Why the hypervisor took a physical interrupt while a guest ran
/// (`Machine::take_interrupt` acknowledges and completes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// Nothing for the guest (the hypervisor's tick, a reschedule SGI, a
    /// spurious interrupt): the run loop re-reads the scheduler.
    Hypervisor,
    /// The running guest's virtual timer raised its line at this pCPU. The
    /// physical PPI is left active (priority drop only), so that it cannot
    /// fire again until it is deactivated: by the guest through a hardware
    /// list register entry, or by [`Machine::deactivate_vtimer_ppi`]
    /// (`el2::devices::vtimer`). The guest's timer registers are untouched.
    VirtualTimer,
    /// The virtual CPU interface wants its list registers looked at (an
    /// EOI of a level-sensitive interrupt, or an underflow).
    Maintenance,
    /// The PMU's overflow interrupt: the running vCPU's, if its PMU is
    /// loaded. The physical interrupt is disabled in the GIC (its line
    /// stays high until the guest clears the overflow), until
    /// [`Machine::enable_pmu_interrupt`].
    PmuOverflow,
}

/// The per-VM registers a vCPU load switches (Arm ARM D8 "The AArch64
/// Virtual Memory System Architecture": VTTBR_EL2; D11 "The Generic
/// Timer": CNTVOFF_EL2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmRegisters {
    /// VTTBR_EL2: the VM's stage-2 tables and VMID.
    pub vttbr: u64,
    /// CNTVOFF_EL2: virtual time = physical time - this.
    pub cntvoff: u64,
}

/// The guest's virtual timer while the vCPU is off the CPU. While it is
/// off, the hardware timer is disabled (so it cannot fire for the wrong
/// guest) and the deadline is tracked by the scheduler instead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VtimerContext {
    /// CNTV_CTL_EL0 as saved (ISTATUS as the hardware computed it then).
    pub ctl: u64,
    /// CNTV_CVAL_EL0 as saved (virtual counter ticks).
    pub cval: u64,
    /// The level of the timer's line that the virtual GIC has: changed
    /// only together with the vGIC's, under its lock, by whoever holds
    /// the context (`el2::devices::vtimer`).
    pub line: bool,
}

/// Which of the pCPU's list registers hold this vCPU's interrupts while it
/// runs, and whether it asked for the underflow maintenance interrupt
/// (ICH_HCR_EL2.UIE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListRegisterUse {
    /// Entries 0..this hold what the last fill wrote.
    pub used: usize,
    /// ICH_HCR_EL2.UIE is set.
    pub underflow: bool,
}

/// One vCPU's state while it is off the CPU, and the part the runner
/// works on while it runs. `saved` is the hardware layer's own: EL1 system
/// registers, FP/SIMD, the virtual CPU interface's VMCR and active
/// priorities.
///
/// In this order (`repr(C)`): what every vCPU switch reads and writes
/// first, near the context's base, where the load and store pairs reach;
/// the debug and PMU registers (a KiB that only a vCPU using them
/// switches) last.
#[repr(C)]
#[derive(Clone, Debug, Default)]
pub struct VcpuContext<S> {
    pub regs: GuestRegs,
    pub vtimer: VtimerContext,
    /// The MPIDR the guest reads (VMPIDR_EL2).
    pub vmpidr: u64,
    pub lrs: ListRegisterUse,
    pub saved: S,
    /// The guest's self-hosted debug state, and where it is
    /// (`el2::trap::debug`).
    pub debug: DebugState,
    /// The guest's PMU, where it is, and its overflow line
    /// (`el2::trap::pmu`).
    pub pmu: PmuState,
    /// Where its last WFI that blocked it returns to (its PC then), until
    /// its next load (`el2::sched::spinwatch`, "A vCPU that did not run").
    pub blocked_at: Option<u64>,
}

/// How an allocation transaction refuses allocations (`el2.fail-alloc=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// None: the heap answers as it can.
    None,
    /// The `n`-th allocation (from 0) is refused.
    Nth(u64),
    /// The `n`-th and every later allocation is refused.
    From(u64),
}

pub use crate::memory::heap::Allocations;

/// The hardware under the runner, one value per pCPU.
///
/// Calls that change what the guest sees take `&mut self`; the runner
/// makes them only on the pCPU that owns the vCPU concerned. Guest memory
/// is addressed by host physical address (the VM's placement translates
/// IPAs); the runner only passes addresses inside the VM's RAM, aligned as
/// the record needs (`el2::services::pv` checks both at registration).
pub trait Machine {
    /// The vCPU state only the hardware layer knows.
    type Saved: Default + Send;
    /// A VM's stage-2 tables, kept alive as long as the VM.
    type Stage2: Send + Sync;
    /// An open allocation transaction ([`Self::allocations`]).
    type Txn: Allocations;

    /// The physical counter (CNTPCT_EL0).
    fn counter(&self) -> u64;
    /// Its frequency in Hz (CNTFRQ_EL0).
    fn counter_frequency(&self) -> u64;

    /// Loads a vCPU onto this pCPU: `vm`'s stage 2 and virtual counter
    /// offset, HCR_EL2 = `hcr`, the vCPU's system registers, virtual
    /// timer, MPIDR and virtual CPU interface (enabled, with empty list
    /// registers). FP/SIMD is left trapped: its first use reaches
    /// [`Self::load_fp`].
    fn load_vcpu(&mut self, vm: VmRegisters, hcr: u64, ctx: &mut VcpuContext<Self::Saved>);
    /// Saves the running vCPU's system registers and virtual timer (and
    /// FP/SIMD if it was loaded) and disables its virtual CPU interface.
    /// The runner has read back and emptied its list registers.
    fn save_vcpu(&mut self, ctx: &mut VcpuContext<Self::Saved>);
    /// The vCPU's first FP/SIMD instruction since its load trapped: load
    /// its FP/SIMD state and stop trapping.
    fn load_fp(&mut self, ctx: &mut VcpuContext<Self::Saved>);
    /// Loads the running vCPU's debug registers (`el2::trap::debug`): the
    /// first `features.breakpoints` and `features.watchpoints` comparators
    /// and MDSCR_EL1; then stops trapping the guest's accesses to them
    /// (MDCR_EL2.TDA clear).
    fn load_debug(&mut self, registers: &DebugRegisters, features: DebugFeatures);
    /// Saves the running vCPU's debug registers into `registers`, sets
    /// MDSCR_EL1 to 0 (no debug event can fire for whatever runs next)
    /// and traps the debug registers again (MDCR_EL2.TDA set): the state
    /// every pCPU has while no vCPU's debug registers are loaded.
    fn save_debug(&mut self, registers: &mut DebugRegisters, features: DebugFeatures);
    /// How many event counters the guests' PMU partition has
    /// (MDCR_EL2.HPMN); 0 without a PMU.
    fn pmu_counters(&self) -> usize;
    /// Loads the running vCPU's PMU registers (`el2::trap::pmu`): the
    /// first `features.counters` event counters and types, the cycle
    /// counter and its filter, the enables, interrupt enables and
    /// overflow flags, PMSELR_EL0, PMUSERENR_EL0 and, last, PMCR_EL0; then
    /// stops trapping the guest's PMU accesses (MDCR_EL2.TPM, TPMCR). The
    /// PMU interrupt is enabled.
    fn load_pmu(&mut self, registers: &PmuRegisters, features: PmuFeatures);
    /// Stops the running vCPU's counters, saves its PMU registers into
    /// `registers`, leaves the PMU disabled (no counter enabled, no
    /// interrupt enabled, no overflow, EL0 access off), traps its
    /// registers again and enables the PMU interrupt: the state of every
    /// pCPU while no vCPU's PMU is loaded.
    fn save_pmu(&mut self, registers: &mut PmuRegisters, features: PmuFeatures);
    /// The loaded PMU's PMCR_EL0, PMINTENSET_EL1 and PMOVSSET_EL0, which
    /// decide its overflow line (`el2::trap::pmu::overflow_line`).
    fn pmu_overflow_registers(&self) -> (u64, u64, u64);
    /// Enables the PMU interrupt in the GIC again (after
    /// [`Taken::PmuOverflow`] disabled it), its line having dropped.
    fn enable_pmu_interrupt(&mut self);
    /// Sets HCR_EL2 for the next entry (the WFx trap policy changes it).
    fn set_traps(&mut self, hcr: u64);
    /// Runs the loaded vCPU until an exit `fast` does not answer
    /// ([`FastExit`]); returns the lower-EL vector taken and ESR_EL2.
    fn enter_guest(
        &mut self,
        ctx: &mut VcpuContext<Self::Saved>,
        fast: &FastExit<'_>,
    ) -> (u64, u64);
    /// FAR_EL2 and HPFAR_EL2 of the exit just taken. The runner reads them
    /// once, right after the exit, and only for the exits they describe
    /// (`Syndrome::has_fault_address`).
    fn fault_address(&self) -> (u64, u64);
    /// Acknowledges, handles and completes the physical interrupt that
    /// made the guest exit.
    fn take_interrupt(&mut self) -> Taken;
    /// Arms this pCPU's EL2 timer for counter value `deadline`.
    fn arm_timer(&mut self, deadline: u64);
    /// Waits, with no vCPU loaded, until an interrupt or `deadline`.
    fn wait_for_interrupt(&mut self, deadline: u64);
    /// Sends the reschedule SGI to `pcpu`.
    fn send_reschedule(&self, pcpu: usize);

    /// The running vCPU's live virtual timer: (CNTV_CTL_EL0, CNTV_CVAL_EL0).
    fn vtimer_live(&self) -> (u64, u64);
    /// The running vCPU's live CNTV_CTL_EL0 alone (ISTATUS as the hardware
    /// computes it now): what the timer's line is.
    fn vtimer_control(&self) -> u64;
    /// The INTID of the physical PPI through which the loaded vCPU's
    /// virtual timer interrupts this pCPU: the pINTID of its hardware list
    /// register entries.
    fn vtimer_ppi(&self) -> u16;
    /// Deactivates that PPI, which the hypervisor left active when it took
    /// it ([`Taken::VirtualTimer`]) and no list register entry ended:
    /// ICC_DIR_EL1. Only while it is active.
    fn deactivate_vtimer_ppi(&mut self);
    /// The running vCPU's VBAR_EL1.
    fn vbar_el1(&self) -> u64;
    /// Writes an injected exception's EL1 registers (ESR, FAR if given,
    /// ELR, SPSR) for the running vCPU.
    fn write_exception(&mut self, entry: &Injection);
    /// The CPU's value of the ID register `op0 = 3, op1 = 0, CRn = 0`,
    /// `crm`, `op2` (the runner sanitises it).
    fn read_id_register(&self, crm: u8, op2: u8) -> u64;

    /// How many list registers the virtual CPU interface has.
    fn list_registers(&self) -> usize;
    /// Reads `ICH_LR<index>_EL2`.
    fn read_lr(&self, index: usize) -> u64;
    /// Writes `ICH_LR<index>_EL2`.
    fn write_lr(&mut self, index: usize, value: u64);
    /// ICH_HCR_EL2: the interface enabled, with the underflow maintenance
    /// interrupt when `underflow`.
    fn set_interface_control(&mut self, underflow: bool);
    /// The running vCPU's ICH_VMCR_EL2, and whether any of its active
    /// priority bits (`ICH_AP0R<n>_EL2`, `ICH_AP1R<n>_EL2`) is set.
    fn live_interface(&self) -> (u64, bool);

    /// Stores the PV-lock "preempted" field of the `width`-byte record at
    /// `pa` (docs/abi.md §3), release-ordered, single-copy atomic.
    fn store_preempted(&self, pa: u64, width: usize, value: u64);
    /// The `lock_count` hint of the `width`-byte PV-lock record at `pa`.
    fn lock_count_hint(&self, pa: u64, width: usize) -> u32;
    /// Stores the stolen time (ns) of the PV-time record at `pa`
    /// (docs/abi.md §4), release-ordered.
    fn store_stolen_time(&self, pa: u64, ns: u64);
    /// The IPA that guest virtual address `va` translates to for a read at
    /// EL1 through the loaded vCPU's stage 1 (AT S1E1R; the vCPU's
    /// PAR_EL1 is kept), `None` if the translation faults. Only while a
    /// vCPU is loaded.
    fn guest_ipa_of(&self, va: u64) -> Option<u64>;
    /// The `width` bytes (1, 2, 4 or 8, naturally aligned) at host
    /// address `pa` of a VM's RAM, little-endian, read single-copy
    /// atomically (the guest may be writing them).
    fn read_guest_ram(&self, pa: u64, width: u8) -> u64;
    /// Zeroes host memory `range` (a VM's RAM, none of whose vCPUs runs).
    fn zero(&self, range: MemRange);
    /// Copies host memory `from` (a boot module) to `to`.
    fn copy(&self, to: u64, from: MemRange);
    /// Writes `bytes` to host memory at `to`.
    fn write(&self, to: u64, bytes: &[u8]);
    /// Makes what was written to `range` visible to a guest that starts
    /// with its MMU and caches off (clean to PoC, invalidate the I-cache).
    fn sync_for_guest(&self, range: MemRange);
    /// An allocation transaction of the hypervisor's heap: what is built
    /// on one VM's behalf, with allocations refused as `refusal` says
    /// (`el2.fail-alloc=`; `el2::memory::heap`).
    fn allocations(&self, refusal: Refusal) -> Self::Txn;
    /// Bytes of the heap in use (main heap and reserve).
    fn heap_in_use(&self) -> usize;
    /// Maps host memory `range` at EL2 (a VM's RAM read-write, its boot
    /// modules read-only), if not mapped yet.
    fn map_at_el2(&self, range: MemRange, kind: MapKind) -> Result<(), String>;
    /// Stage-2 tables for VMID `vmid` mapping guest RAM `ipa` to host
    /// memory at `pa`, and the VTTBR_EL2 value that selects them.
    fn stage2(&self, vmid: u8, ipa: MemRange, pa: u64) -> Result<(Self::Stage2, u64), String>;
    /// Host memory `range`, mapped at EL2 and not written while the VM
    /// is created (a boot module's header).
    fn host_bytes(&self, range: MemRange) -> &[u8];

    /// Reads a byte typed on the hypervisor's console, if any.
    fn console_read_byte(&mut self) -> Option<u8>;
    /// Prints one line on the hypervisor's console.
    fn console_line(&self, line: fmt::Arguments<'_>);
}
