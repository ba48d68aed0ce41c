//! A fake [`Machine`] for the runner's host tests: a shared virtual clock,
//! per-pCPU EL2 timers, pending reschedule SGIs and list registers, a
//! virtual timer per pCPU whose physical PPI fires while its line is high
//! and stays active until deactivated (by the runner, or by the guest
//! through a hardware list register entry), a memory that keeps what the
//! PV-record stores wrote, debug registers, and scripted guests that exit
//! with hypercalls, WFI, WFE, UART writes, GIC accesses and SGIs, program
//! their timer and acknowledge and complete what their list registers
//! hold, as a seeded generator chooses. vCPU 1 of every VM also uses its
//! debug registers ([`DEBUGGER`]) and checks, at every exit, that they
//! hold what it last wrote wherever it runs; vCPU 2 ([`PMU_USER`]) counts
//! with its PMU, raises its overflow interrupt now and then, and checks
//! that its cycle count follows it.

use super::machine::{Allocations, FastExit, Machine, Refusal, Taken, VcpuContext, VmRegisters};
use crate::devices::vgic::{Lr, LrState, MAX_LIST_REGISTERS};
use crate::devices::vtimer;
use crate::guest::layout;
use crate::memory::heap::OutOfMemory;
use crate::memory::layout::MapKind;
use crate::trap::debug::{DebugFeatures, DebugRegisters};
use crate::trap::exit::Syndrome;
use crate::trap::fault::Injection;
use crate::trap::pmu::{CYCLE_COUNTER_BIT, PmuFeatures, PmuRegisters};
use aarch64_cpu::registers::{CNTV_CTL_EL0, ESR_EL2};
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use boot::sync::SpinMutex as Mutex;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use platform::MemRange;
use pvlock_abi::{directed_yield, psci, pvlock};

/// Counter ticks per second of the fake clock.
pub const HZ: u64 = 1_000_000;

/// The lower-EL synchronous and IRQ vectors (`el2::trap::exit`'s numbering).
const VECTOR_SYNC: u64 = 8;
const VECTOR_IRQ: u64 = 9;

/// ESR_EL2.IL: a 32-bit instruction.
const IL: u64 = 1 << 25;
/// Data-abort ISS (Arm ARM D24.2.40 "ISS encoding for an exception from a
/// Data Abort"): ISV, SAS (bits 23:22), SRT (20:16), WnR (6), and DFSC
/// "translation fault, level 3".
const ABORT_ISV: u64 = 1 << 24;
const ABORT_SRT_SHIFT: u64 = 16;
const ABORT_WNR: u64 = 1 << 6;
const ABORT_DFSC_TRANSLATION_L3: u64 = 0b00_0111;
/// WFx ISS: TI = 0b01 is WFE (Arm ARM D24.2.40 "ISS encoding for an
/// exception from a WF* instruction").
const WFX_TI_WFE: u64 = 1;
/// MSR/MRS ISS fields (Arm ARM D24.2.40 "ISS encoding for an exception
/// from MSR, MRS, or System instruction execution"), and ICC_SGI1R_EL1:
/// op0 3, op1 0, CRn 12, CRm 11, op2 5.
const SYSREG_ICC_SGI1R_WRITE: u64 = (3 << 20) | (5 << 17) | (12 << 10) | (11 << 1);
const SYSREG_RT_SHIFT: u64 = 5;
/// ID_AA64PFR0_EL1: op0 3, op1 0, CRn 0, CRm 4, op2 0; Direction 1 (read).
const SYSREG_ID_AA64PFR0_READ: u64 = (3 << 20) | (4 << 1) | 1;
/// MSR DBGBVR<n>_EL1 (op0 2, op1 0, CRn 0, CRm n, op2 4), MSR MDSCR_EL1
/// (CRm 2, op2 2) and MSR OSLAR_EL1 (CRn 1, CRm 0, op2 4), Direction 0.
const SYSREG_DBGBVR_WRITE: u64 = (2 << 20) | (4 << 17);
const SYSREG_CRM_SHIFT: u64 = 1;
const SYSREG_MDSCR_WRITE: u64 = (2 << 20) | (2 << 17) | (2 << SYSREG_CRM_SHIFT);
const SYSREG_OSLAR_WRITE: u64 = (2 << 20) | (4 << 17) | (1 << 10);
/// QEMU 7.2 `-cpu max`'s ID_AA64DFR0_EL1: 6 breakpoints, 4 watchpoints.
pub const DFR0: u64 = 0x1030_5609;
/// The vCPU of each VM that uses its debug registers.
pub const DEBUGGER: u16 = 1;
/// The vCPU of each VM that uses its PMU.
pub const PMU_USER: u16 = 2;
/// The fake CPU's event counters.
pub const PMU_COUNTERS: usize = 6;
/// MRS PMCCNTR_EL0 (op0 3, op1 3, CRn 9, CRm 13, op2 0), Direction 1.
const SYSREG_PMCCNTR_READ: u64 = (3 << 20) | (3 << 14) | (9 << 10) | (13 << 1) | 1;
/// PMCR_EL0.E.
const PMCR_E: u64 = 1;
/// MDSCR_EL1.MDE and TDCC.
const MDSCR_MDE: u64 = 1 << 15;
const MDSCR_TDCC: u64 = 1 << 12;
/// An IPA below guest RAM with no emulated device behind it.
const UNBACKED_IPA: u64 = 0x2000_0000;

/// What every fake pCPU shares.
pub struct World {
    pub clock: AtomicU64,
    /// Per pCPU: a reschedule SGI is pending.
    ipi: Vec<AtomicBool>,
    /// Per pCPU: the EL2 timer's deadline.
    timer: Vec<AtomicU64>,
    /// What the PV stores wrote, by host address.
    pub memory: Mutex<BTreeMap<u64, u64>>,
    /// Lines printed on the console.
    pub console: Mutex<Vec<String>>,
    /// Guests' choices.
    rng: Mutex<prng::Rng>,
    /// Per VM: after this time its vCPU 0 asks for SYSTEM_OFF.
    pub stop_after: u64,
    /// Per VM, whether a SYSTEM_RESET was made already (one per VM).
    pub resets: Mutex<Vec<bool>>,
    /// Exceptions the runner injected (`write_exception`).
    pub injected: AtomicU64,
    /// FP/SIMD loads after an FP trap.
    pub fp_loads: AtomicU64,
    /// Guest exits made (every exit of the fake guest).
    pub exits: AtomicU64,
    /// Of those, the ones `FastExit` answered without the runner.
    pub fast_exits: AtomicU64,
    /// Virtual timer PPIs taken, and deactivated by the runner and by the
    /// guests' hardware list register entries.
    pub timer_fires: AtomicU64,
    pub timer_ppi_ended_by_runner: AtomicU64,
    pub timer_ppi_ended_by_guest: AtomicU64,
    /// Debug register loads ([`Machine::load_debug`]) per (VM, vCPU).
    pub debug_loads: Mutex<BTreeMap<(usize, u16), u64>>,
    /// Times a [`DEBUGGER`] found its debug registers as it left them.
    pub debug_checks: AtomicU64,
    /// PMU loads ([`Machine::load_pmu`]) per (VM, vCPU).
    pub pmu_loads: Mutex<BTreeMap<(usize, u16), u64>>,
    /// Times a [`PMU_USER`] found its cycle count as it left it.
    pub pmu_checks: AtomicU64,
    /// PMU interrupts enabled again after an overflow.
    pub pmu_interrupts_enabled: AtomicU64,
}

impl World {
    pub fn new(pcpus: usize, vms: usize, seed: u64, stop_after: u64) -> Arc<Self> {
        Arc::new(Self {
            clock: AtomicU64::new(1),
            ipi: (0..pcpus).map(|_| AtomicBool::new(false)).collect(),
            timer: (0..pcpus).map(|_| AtomicU64::new(u64::MAX)).collect(),
            memory: Mutex::new(BTreeMap::new()),
            console: Mutex::new(Vec::new()),
            rng: Mutex::new(prng::Rng::new(seed)),
            stop_after,
            resets: Mutex::new(alloc::vec![false; vms]),
            injected: AtomicU64::new(0),
            fp_loads: AtomicU64::new(0),
            exits: AtomicU64::new(0),
            fast_exits: AtomicU64::new(0),
            timer_fires: AtomicU64::new(0),
            timer_ppi_ended_by_runner: AtomicU64::new(0),
            timer_ppi_ended_by_guest: AtomicU64::new(0),
            debug_loads: Mutex::new(BTreeMap::new()),
            debug_checks: AtomicU64::new(0),
            pmu_loads: Mutex::new(BTreeMap::new()),
            pmu_checks: AtomicU64::new(0),
            pmu_interrupts_enabled: AtomicU64::new(0),
        })
    }

    pub fn below(&self, n: u64) -> u64 {
        self.rng.lock().below(n.max(1))
    }

    pub fn now(&self) -> u64 {
        self.clock.load(Ordering::Relaxed)
    }

    fn advance(&self, ticks: u64) -> u64 {
        self.clock.fetch_add(ticks, Ordering::Relaxed) + ticks
    }
}

/// An allocation transaction that never refuses (the host tests' heap is
/// the process's).
pub struct FakeTxn;

impl Allocations for FakeTxn {
    fn check(&self) -> Result<(), OutOfMemory> {
        Ok(())
    }

    fn failed(&self) -> bool {
        false
    }
}

/// The registers only the fake knows of a vCPU.
#[derive(Clone, Debug, Default)]
pub struct FakeSaved {
    /// Entries so far (the first issues the PV-record hypercall).
    pub entries: u64,
    /// A [`DEBUGGER`]'s debug registers as it last wrote them.
    pub debug_written: DebugRegisters,
    /// The vCPU unlocked its OS lock.
    pub os_unlocked: bool,
    /// A [`PMU_USER`]'s cycle count as it last saw it.
    pub cycles: u64,
    /// Interrupts it still spins through (a wait loop: no exits, no
    /// register changes; `el2::sched::spinwatch`).
    pub spins: u32,
    /// Its next exit is a WFI (once its GIC is set up).
    pub wfi_next: bool,
    /// Its next exit is PV_SCHED_YIELD_TO to this vCPU index (once its
    /// GIC is set up).
    pub yield_next: Option<u16>,
    /// Its next exit is openEuler's PV_SCHED_KICK_CPU of this vCPU index
    /// (once its GIC is set up).
    pub kick_next: Option<u16>,
    /// Its next exit is the project's PV_SCHED_KICK_LEND of this vCPU
    /// index (once its GIC is set up).
    pub kick_lend_next: Option<u16>,
}

/// One fake pCPU.
pub struct Fake {
    pub pcpu: usize,
    pub world: Arc<World>,
    /// The VM loaded (VTTBR = VM id + 1), if any.
    loaded_vm: Option<usize>,
    lrs: [u64; MAX_LIST_REGISTERS],
    /// Why the last exit was an IRQ.
    pending_irq: Option<Taken>,
    /// FAR_EL2 and HPFAR_EL2 of the last exit.
    fault: (u64, u64),
    /// The loaded vCPU's CNTV_CTL_EL0 (without ISTATUS, which
    /// [`Self::timer_control`] computes) and CNTV_CVAL_EL0; all zero (off)
    /// with nothing loaded.
    timer: (u64, u64),
    /// The physical virtual-timer PPI is active.
    pub timer_ppi_active: bool,
    /// The vCPU loaded (its index).
    loaded_index: u16,
    /// The debug registers in this pCPU while a vCPU's are loaded (its
    /// debug accesses do not trap); `None`: trapped, MDSCR_EL1 = 0.
    debug_cpu: Option<DebugRegisters>,
    /// The PMU registers in this pCPU while a vCPU's are loaded; `None`:
    /// trapped, nothing counting.
    pmu_cpu: Option<PmuRegisters>,
    /// What [`Machine::live_interface`] reports (ICH_VMCR_EL2, any active
    /// priority): closed unless a test opens it.
    pub interface: (u64, bool),
    /// HCR_EL2 as the runner last set it (`Machine::set_traps`).
    traps: u64,
    /// Each guest entry's vCPU index and HCR_EL2, once a test asks for
    /// them ([`Self::record_entries`]).
    pub entered_with: Option<Vec<(u16, u64)>>,
    /// Ticks the world's clock moves at each counter read (0: it moves
    /// only when a test or a guest entry moves it), for the runner's
    /// bounded waits.
    pub ticks_per_counter_read: u64,
    /// Each write of the EL2 timer moves the world's clock to its
    /// deadline before the write returns: QEMU's round-robin icount,
    /// which hands the writing CPU's turn to another CPU until the
    /// earliest timer deadline (`el2::sched::spinwatch`, "A vCPU that did
    /// not run").
    pub timer_write_hands_over: bool,
}

impl Fake {
    pub fn new(pcpu: usize, world: Arc<World>) -> Self {
        Self {
            pcpu,
            world,
            loaded_vm: None,
            lrs: [0; MAX_LIST_REGISTERS],
            pending_irq: None,
            fault: (0, 0),
            timer: (0, 0),
            timer_ppi_active: false,
            loaded_index: 0,
            debug_cpu: None,
            pmu_cpu: None,
            interface: (0, false),
            traps: 0,
            entered_with: None,
            ticks_per_counter_read: 0,
            timer_write_hands_over: false,
        }
    }

    /// Records each guest entry from now on ([`Self::entered_with`]).
    pub fn record_entries(&mut self) {
        self.entered_with = Some(Vec::new());
    }

    /// The loaded guest writes CNTV_CTL_EL0 and CNTV_CVAL_EL0 (for the
    /// scripted tests).
    pub fn set_timer(&mut self, ctl: u64, cval: u64) {
        self.timer = (ctl, cval);
    }

    /// The timer's physical PPI is signalled now if its line is high and
    /// it is not active (for the scripted tests): the next exit is an IRQ
    /// that [`Machine::take_interrupt`] answers with it. Whether it was.
    pub fn signal_timer(&mut self) -> bool {
        let fires = vtimer::line_of(self.timer_control()) && !self.timer_ppi_active;
        if fires {
            self.timer_ppi_active = true;
            self.pending_irq = Some(Taken::VirtualTimer);
        }
        fires
    }

    /// The list registers as the runner last wrote them, decoded.
    pub fn list_registers_now(&self) -> Vec<Lr> {
        self.lrs
            .iter()
            .map(|&v| Lr::decode(v))
            .filter(|lr| lr.state != LrState::Invalid)
            .collect()
    }

    /// The guest deactivates the entry for `intid` (for the scripted
    /// tests), and, for a hardware entry, its physical interrupt.
    pub fn deactivate(&mut self, intid: u32) {
        for value in &mut self.lrs {
            let mut lr = Lr::decode(*value);
            if lr.intid == intid && lr.state.is_active() {
                if lr.physical.is_some() {
                    self.timer_ppi_active = false;
                }
                lr.state = if lr.state.is_pending() {
                    LrState::Pending
                } else {
                    LrState::Invalid
                };
                *value = lr.encode();
            }
        }
    }

    /// The guest acknowledges the entry for `intid` (for the scripted
    /// tests): pending becomes active.
    pub fn acknowledge(&mut self, intid: u32) {
        for value in &mut self.lrs {
            let mut lr = Lr::decode(*value);
            if lr.intid == intid && lr.state == LrState::Pending {
                lr.state = LrState::Active;
                *value = lr.encode();
            }
        }
    }

    /// CNTV_CTL_EL0 as the loaded vCPU reads it: ISTATUS while enabled and
    /// the count (CNTVOFF is 0 here) has reached CVAL.
    fn timer_control(&self) -> u64 {
        let (ctl, cval) = self.timer;
        let enabled = ctl & CNTV_CTL_EL0::ENABLE::SET.value != 0;
        let istatus = if enabled && self.world.now() >= cval {
            CNTV_CTL_EL0::ISTATUS::SET.value
        } else {
            0
        };
        (ctl & !CNTV_CTL_EL0::ISTATUS::SET.value) | istatus
    }

    /// The guest programs its timer now and then: armed a little ahead,
    /// masked, or off.
    fn program_timer(&mut self) {
        let world = self.world.clone();
        let enable = CNTV_CTL_EL0::ENABLE::SET.value;
        match world.below(40) {
            0..=3 => self.timer = (enable, world.now() + world.below(2000)),
            4 => self.timer.0 = enable | CNTV_CTL_EL0::IMASK::SET.value,
            5 => self.timer.0 = 0,
            _ => {}
        }
    }

    /// The guest acknowledges and completes what its list registers hold,
    /// now and then, as its CPU interface would: a pending entry becomes
    /// active, an active one is deactivated (and with it the physical
    /// interrupt of a hardware entry); the timer's handler takes its line
    /// down as it completes it, most of the time.
    fn handle_interrupts(&mut self) {
        let world = self.world.clone();
        let timer = crate::guest::layout::TIMER.virt.intid();
        for value in &mut self.lrs {
            let mut lr = Lr::decode(*value);
            // An acknowledge, or a deactivation (which leaves the pending
            // part of a pending and active entry).
            let next = match lr.state {
                LrState::Pending if world.below(3) == 0 => LrState::Active,
                LrState::Active if world.below(3) == 0 => LrState::Invalid,
                LrState::PendingActive if world.below(3) == 0 => LrState::Pending,
                _ => continue,
            };
            if next == LrState::Invalid && lr.intid == timer {
                match world.below(4) {
                    0 => self.timer.0 |= CNTV_CTL_EL0::IMASK::SET.value,
                    1 => self.timer.1 = world.now() + 100 + world.below(1000),
                    2 => self.timer.0 = 0,
                    _ => {}
                }
            }
            if next == LrState::Invalid && lr.physical.is_some() {
                assert!(
                    self.timer_ppi_active,
                    "pCPU {}: a hardware entry deactivated an inactive PPI",
                    self.pcpu
                );
                self.timer_ppi_active = false;
                world
                    .timer_ppi_ended_by_guest
                    .fetch_add(1, Ordering::Relaxed);
            }
            // (The EOI maintenance interrupt an interface raises for an
            // entry that asks for one is not modelled: the runner reads the
            // entry back at its next refill.)
            lr.state = next;
            *value = lr.encode();
        }
    }

    /// A hypercall exit with `function` in X0 and `args` in X1...
    fn hvc(ctx: &mut VcpuContext<FakeSaved>, function: u32, args: &[u64]) -> Syndrome {
        ctx.regs.x[0] = u64::from(function);
        for (i, &arg) in args.iter().enumerate() {
            ctx.regs.x[1 + i] = arg;
        }
        Syndrome::synchronous(IL | (ESR_EL2::EC::HVC64.value))
    }

    /// The guest runs a while and exits: for a pending reschedule SGI or
    /// the EL2 timer's deadline, now and then for its virtual timer, else
    /// for what [`Self::guest_exit`] chooses.
    fn run_guest(&mut self, ctx: &mut VcpuContext<FakeSaved>) -> Syndrome {
        assert!(
            self.loaded_vm.is_some(),
            "pCPU {}: entry with nothing loaded",
            self.pcpu
        );
        // A vCPU spinning on a value (`FakeSaved::spins`) runs without
        // exits and without changing a register until an interrupt comes;
        // the EL2 timer is always armed while it runs, so one comes.
        let irq = loop {
            let step = 20 + self.world.below(400);
            let now = self.world.advance(step);
            if ctx.saved.spins == 0 {
                // Its own work meanwhile changes its registers.
                ctx.regs.x[28] = ctx.regs.x[28].wrapping_add(step);
            }
            if self.world.ipi[self.pcpu].swap(false, Ordering::AcqRel) {
                break Some(Taken::Hypervisor);
            }
            if now >= self.world.timer[self.pcpu].load(Ordering::Relaxed) {
                self.world.timer[self.pcpu].store(u64::MAX, Ordering::Relaxed);
                break Some(Taken::Hypervisor);
            }
            // The timer's physical PPI fires while its line is high, unless
            // it is still active.
            if vtimer::line_of(self.timer_control()) && !self.timer_ppi_active {
                self.timer_ppi_active = true;
                self.world.timer_fires.fetch_add(1, Ordering::Relaxed);
                break Some(Taken::VirtualTimer);
            }
            if ctx.saved.spins == 0 {
                break None;
            }
        };
        if irq.is_some() {
            ctx.saved.spins = ctx.saved.spins.saturating_sub(1);
            self.pending_irq = irq;
            return Syndrome::asynchronous(VECTOR_IRQ);
        }
        // Now and then it starts to spin through the next few interrupts.
        if self.world.below(40) == 0 {
            ctx.saved.spins = 1 + self.world.below(4) as u32;
        }
        self.handle_interrupts();
        self.program_timer();
        self.guest_exit(ctx)
    }

    /// What the guest on this pCPU does next.
    fn guest_exit(&mut self, ctx: &mut VcpuContext<FakeSaved>) -> Syndrome {
        let world = self.world.clone();
        let vm = self.loaded_vm.unwrap_or(0);
        let index =
            layout::vcpu_index(platform::Mpidr::from_raw(ctx.vmpidr & !(1 << 31))).unwrap_or(0);
        ctx.saved.entries += 1;
        match ctx.saved.entries {
            1 => return Self::hvc(ctx, pvlock::seed_v2::PV_LOCK_PREEMPTED.raw(), &[]),
            // STR W8, [GICD_CTLR]: Group 1 on.
            2 => {
                ctx.regs.x[8] = gic_regs::GICD_CTLR::EnableGrp1::SET.value.into();
                return Self::data_abort(layout::GICD.base + gic_regs::offset::GICD_CTLR, true, 8);
            }
            // STR W9, [GICR_ISENABLER0 of its own redistributor]: the SGI
            // its siblings send (3) and its virtual timer's PPI on.
            3 => {
                ctx.regs.x[9] = 1 << 3 | 1 << crate::guest::layout::TIMER.virt.intid();
                let sgi_base = layout::GICR_BASE
                    + u64::from(index) * gic_regs::REDISTRIBUTOR_SIZE
                    + gic_regs::SGI_FRAME_OFFSET;
                return Self::data_abort(sgi_base + gic_regs::offset::GICR_ISENABLER0, true, 9);
            }
            _ => {}
        }
        if core::mem::take(&mut ctx.saved.wfi_next) {
            return Syndrome::synchronous(IL | ESR_EL2::EC::TrappedWFIorWFE.value);
        }
        if let Some(target) = ctx.saved.kick_next.take() {
            return Self::hvc(
                ctx,
                pvlock::openeuler::PV_SCHED_KICK_CPU.raw(),
                &[u64::from(target)],
            );
        }
        if let Some(target) = ctx.saved.kick_lend_next.take() {
            return Self::hvc(
                ctx,
                directed_yield::PV_SCHED_KICK_LEND.raw(),
                &[u64::from(target)],
            );
        }
        if let Some(target) = ctx.saved.yield_next.take() {
            return Self::hvc(
                ctx,
                directed_yield::PV_SCHED_YIELD_TO.raw(),
                &[u64::from(target)],
            );
        }
        // Every vCPU unlocks its OS lock and sets MDSCR_EL1.TDCC, as Linux
        // does when a CPU comes up: neither makes it a debug user.
        if !ctx.saved.os_unlocked {
            ctx.saved.os_unlocked = true;
            // MSR OSLAR_EL1, XZR
            return Self::msr(SYSREG_OSLAR_WRITE, 31);
        }
        if index == DEBUGGER {
            if let Some(exit) = self.debug(ctx) {
                return exit;
            }
        } else if index == PMU_USER {
            if let Some(exit) = self.pmu(ctx) {
                return exit;
            }
        } else if world.below(100) == 0 {
            ctx.regs.x[11] = MDSCR_TDCC;
            return Self::msr(SYSREG_MDSCR_WRITE, 11);
        }
        let now = world.now();
        if index == 0 && now > world.stop_after * (vm as u64 + 1) {
            let mut resets = world.resets.lock();
            let function = if resets[vm] {
                psci::SYSTEM_OFF
            } else {
                resets[vm] = true;
                psci::SYSTEM_RESET
            };
            return Self::hvc(ctx, function.raw(), &[]);
        }
        let sibling = world.below(8);
        match world.below(124) {
            0..=29 => Self::hvc(ctx, pvlock_abi::arch::SMCCC_VERSION.raw(), &[]),
            30..=44 => {
                // A guest waits with its timer armed (its own work, or a
                // bound on the wait): it wakes at the deadline at the
                // latest.
                if vtimer::rises_at(self.timer.0, self.timer.1, 0).is_none() {
                    self.timer = (
                        CNTV_CTL_EL0::ENABLE::SET.value,
                        now + world.below(HZ / 1000),
                    );
                }
                Syndrome::synchronous(IL | ESR_EL2::EC::TrappedWFIorWFE.value)
            }
            45..=54 => Syndrome::synchronous(IL | ESR_EL2::EC::TrappedWFIorWFE.value | WFX_TI_WFE),
            55..=64 => Self::hvc(ctx, directed_yield::PV_SCHED_YIELD_TO.raw(), &[sibling]),
            65..=72 => Self::hvc(
                ctx,
                psci::CPU_ON64.raw(),
                &[layout::vcpu_mpidr(sibling as u16).value(), 0x4008_0000, 7],
            ),
            73..=74 if index != 0 => Self::hvc(ctx, psci::CPU_OFF.raw(), &[]),
            75..=84 => {
                // STR W3, [UART DR]
                ctx.regs.x[3] = u64::from(b'a' + (index as u8 % 26));
                Self::data_abort(layout::UART.base, true, 3)
            }
            85..=94 => {
                // MSR ICC_SGI1R_EL1, X4: SGI 3 to the sibling (Aff0 list).
                ctx.regs.x[4] = (3 << 24) | (1 << (sibling % 16));
                Syndrome::synchronous(
                    IL | ESR_EL2::EC::TrappedMsrMrs.value
                        | SYSREG_ICC_SGI1R_WRITE
                        | (4 << SYSREG_RT_SHIFT),
                )
            }
            95..=99 => Self::hvc(ctx, pvlock::openeuler::PV_SCHED_KICK_CPU.raw(), &[sibling]),
            // SMC #0: SMCCC_VERSION through the other conduit.
            100..=101 => {
                ctx.regs.x[0] = u64::from(pvlock_abi::arch::SMCCC_VERSION.raw());
                Syndrome::synchronous(IL | ESR_EL2::EC::SMC64.value)
            }
            // LDR W5, [GICD_CTLR]
            102..=104 => Self::data_abort(layout::GICD.base, false, 5),
            // LDR W6, [an IPA no memory or device answers]
            105..=106 => Self::data_abort(UNBACKED_IPA, false, 6),
            // An instruction fetch from there.
            107 => Syndrome {
                vector: VECTOR_SYNC,
                esr: IL | ESR_EL2::EC::InstrAbortLowerEL.value | ABORT_DFSC_TRANSLATION_L3,
                far: UNBACKED_IPA,
                hpfar: (UNBACKED_IPA >> 12) << 4,
            },
            // MRS X7, ID_AA64PFR0_EL1
            108..=110 => Syndrome::synchronous(
                IL | ESR_EL2::EC::TrappedMsrMrs.value
                    | SYSREG_ID_AA64PFR0_READ
                    | (7 << SYSREG_RT_SHIFT),
            ),
            // The first FP/SIMD instruction since the load.
            111..=113 => Syndrome::synchronous(IL | ESR_EL2::EC::TrappedFP.value),
            // An instruction el2 does not emulate (EC 0: unknown reason).
            114 => Syndrome::synchronous(IL | ESR_EL2::EC::Unknown.value),
            // LDR W10, [GICR_ISPENDR0] of its own redistributor or a
            // sibling's.
            115..=117 => {
                let whose = if world.below(2) == 0 {
                    u64::from(index)
                } else {
                    sibling
                };
                Self::data_abort(
                    layout::GICR_BASE
                        + whose * gic_regs::REDISTRIBUTOR_SIZE
                        + gic_regs::SGI_FRAME_OFFSET
                        + gic_regs::offset::GICR_ISPENDR0,
                    false,
                    10,
                )
            }
            // STR W11, [GICR_ICENABLER0 or GICR_ISENABLER0]: its timer's PPI
            // off or on.
            118..=119 => {
                ctx.regs.x[11] = 1 << crate::guest::layout::TIMER.virt.intid();
                let register = if world.below(2) == 0 {
                    gic_regs::offset::GICR_ICENABLER0
                } else {
                    gic_regs::offset::GICR_ISENABLER0
                };
                Self::data_abort(
                    layout::GICR_BASE
                        + u64::from(index) * gic_regs::REDISTRIBUTOR_SIZE
                        + gic_regs::SGI_FRAME_OFFSET
                        + register,
                    true,
                    11,
                )
            }
            _ => Self::hvc(ctx, pvlock_abi::arch::SMCCC_VERSION.raw(), &[]),
        }
    }

    /// What a [`DEBUGGER`] does before its other work: checks that its
    /// debug registers (in this pCPU if loaded, else in el2's copy) hold
    /// what it last wrote; now and then writes
    /// a breakpoint value or flips MDSCR_EL1.MDE, in the CPU when its
    /// registers are loaded (no exit), else by an exit that el2 emulates.
    fn debug(&mut self, ctx: &mut VcpuContext<FakeSaved>) -> Option<Syndrome> {
        let now = self.debug_cpu.as_ref().unwrap_or(&ctx.debug.registers);
        assert_eq!(
            now, &ctx.saved.debug_written,
            "pCPU {}: the debug registers did not follow their vCPU",
            self.pcpu
        );
        self.world.debug_checks.fetch_add(1, Ordering::Relaxed);
        let written = &mut ctx.saved.debug_written;
        let features = DebugFeatures::from_dfr0(DFR0);
        let (value, syndrome) = match self.world.below(40) {
            0 => {
                let n = self.world.below(features.breakpoints as u64);
                let value = self.world.now() << 2;
                written.breakpoints[n as usize].value = value;
                if let Some(cpu) = &mut self.debug_cpu {
                    cpu.breakpoints[n as usize].value = value;
                    return None;
                }
                (value, SYSREG_DBGBVR_WRITE | n << SYSREG_CRM_SHIFT)
            }
            1 => {
                let value = written.mdscr ^ MDSCR_MDE;
                written.mdscr = value;
                if let Some(cpu) = &mut self.debug_cpu {
                    cpu.mdscr = value;
                    return None;
                }
                (value, SYSREG_MDSCR_WRITE)
            }
            _ => return None,
        };
        ctx.regs.x[10] = value;
        Some(Self::msr(syndrome, 10))
    }

    /// What a [`PMU_USER`] does before its other work: checks that its
    /// cycle count is what it last saw (it counts only while loaded); with
    /// its PMU trapped, now and then reads PMCCNTR_EL0 (el2 loads the PMU
    /// and the read runs again); with it loaded, counts, turns counting
    /// on and off, and overflows with its interrupt enabled (an IRQ exit)
    /// or clears that overflow again (the maintenance exit of its EOI).
    fn pmu(&mut self, ctx: &mut VcpuContext<FakeSaved>) -> Option<Syndrome> {
        let now = self
            .pmu_cpu
            .as_ref()
            .map_or(ctx.pmu.registers.cycles, |r| r.cycles);
        assert_eq!(
            now, ctx.saved.cycles,
            "pCPU {}: the cycle counter did not follow its vCPU",
            self.pcpu
        );
        self.world.pmu_checks.fetch_add(1, Ordering::Relaxed);
        let choice = self.world.below(40);
        let Some(cpu) = &mut self.pmu_cpu else {
            return (choice < 2).then(|| Self::msr(SYSREG_PMCCNTR_READ, 12));
        };
        if cpu.counting() {
            cpu.cycles += 1 + self.world.below(1000);
        }
        ctx.saved.cycles = cpu.cycles;
        match choice {
            // Mostly counting once it uses the PMU, as perf does.
            0..=19 if !cpu.counting() => {
                cpu.pmcr |= PMCR_E;
                cpu.enabled = CYCLE_COUNTER_BIT;
            }
            20 => cpu.pmcr &= !PMCR_E,
            21..=24 if cpu.counting() && cpu.overflows == 0 => {
                cpu.interrupts = CYCLE_COUNTER_BIT;
                cpu.overflows = CYCLE_COUNTER_BIT;
                self.pending_irq = Some(Taken::PmuOverflow);
                return Some(Syndrome::asynchronous(VECTOR_IRQ));
            }
            25..=28 if cpu.overflows != 0 => {
                cpu.overflows = 0;
                self.pending_irq = Some(Taken::Maintenance);
                return Some(Syndrome::asynchronous(VECTOR_IRQ));
            }
            29 => cpu.pmuserenr ^= 1,
            _ => {}
        }
        None
    }

    /// A trapped MSR with ISS `iss` (Rt filled in from `rt`).
    fn msr(iss: u64, rt: u64) -> Syndrome {
        Syndrome::synchronous(IL | ESR_EL2::EC::TrappedMsrMrs.value | iss | (rt << SYSREG_RT_SHIFT))
    }

    /// A stage-2 data abort on a 32-bit access to `ipa` with register
    /// `rt` (ISV set: the syndrome describes it).
    pub fn data_abort(ipa: u64, write: bool, rt: u64) -> Syndrome {
        Syndrome {
            vector: VECTOR_SYNC,
            esr: IL
                | ESR_EL2::EC::DataAbortLowerEL.value
                | ABORT_ISV
                | (2 << 22)
                | (rt << ABORT_SRT_SHIFT)
                | if write { ABORT_WNR } else { 0 }
                | ABORT_DFSC_TRANSLATION_L3,
            far: 0xffff_0000_0000_0000 | ipa,
            hpfar: (ipa >> 12) << 4,
        }
    }
}

impl Machine for Fake {
    type Saved = FakeSaved;
    type Stage2 = ();
    type Txn = FakeTxn;

    fn counter(&self) -> u64 {
        match self.ticks_per_counter_read {
            0 => self.world.now(),
            step => self.world.advance(step),
        }
    }

    fn counter_frequency(&self) -> u64 {
        HZ
    }

    fn load_vcpu(&mut self, vm: VmRegisters, _hcr: u64, ctx: &mut VcpuContext<FakeSaved>) {
        assert!(
            self.loaded_vm.is_none(),
            "pCPU {}: load over a loaded vCPU",
            self.pcpu
        );
        assert!(
            self.debug_cpu.is_none() && self.pmu_cpu.is_none(),
            "pCPU {}: a vCPU's debug or PMU registers left loaded",
            self.pcpu
        );
        self.loaded_vm = Some(vm.vttbr as usize - 1);
        self.loaded_index =
            layout::vcpu_index(platform::Mpidr::from_raw(ctx.vmpidr & !(1 << 31))).unwrap_or(0);
        assert!(
            self.lrs.iter().all(|&lr| lr == 0),
            "list registers left full"
        );
        assert!(
            !self.timer_ppi_active,
            "pCPU {}: the virtual timer's PPI left active for the next vCPU",
            self.pcpu
        );
        self.timer = (ctx.vtimer.ctl, ctx.vtimer.cval);
    }

    fn save_vcpu(&mut self, ctx: &mut VcpuContext<FakeSaved>) {
        assert!(
            self.loaded_vm.take().is_some(),
            "pCPU {}: save with nothing loaded",
            self.pcpu
        );
        assert!(
            self.debug_cpu.is_none() && self.pmu_cpu.is_none(),
            "pCPU {}: the vCPU's debug or PMU registers were not saved",
            self.pcpu
        );
        assert!(
            self.lrs.iter().all(|&lr| lr == 0),
            "list registers left full at save"
        );
        ctx.vtimer.ctl = self.timer_control();
        ctx.vtimer.cval = self.timer.1;
        self.timer = (0, 0);
    }

    fn load_fp(&mut self, _ctx: &mut VcpuContext<FakeSaved>) {
        self.world.fp_loads.fetch_add(1, Ordering::Relaxed);
    }

    fn load_debug(&mut self, registers: &DebugRegisters, features: DebugFeatures) {
        assert_eq!(features, DebugFeatures::from_dfr0(DFR0));
        assert!(
            self.debug_cpu.replace(registers.clone()).is_none(),
            "pCPU {}: debug registers loaded twice",
            self.pcpu
        );
        let vm = self.loaded_vm.expect("a vCPU is loaded");
        *self
            .world
            .debug_loads
            .lock()
            .entry((vm, self.loaded_index))
            .or_insert(0) += 1;
    }

    fn save_debug(&mut self, registers: &mut DebugRegisters, _features: DebugFeatures) {
        *registers = self
            .debug_cpu
            .take()
            .expect("debug registers saved that were not loaded");
    }

    fn pmu_counters(&self) -> usize {
        PMU_COUNTERS
    }

    fn load_pmu(&mut self, registers: &PmuRegisters, features: PmuFeatures) {
        assert_eq!(features, PmuFeatures::from_cpu(DFR0, PMU_COUNTERS).unwrap());
        assert!(
            self.pmu_cpu.replace(registers.clone()).is_none(),
            "pCPU {}: PMU loaded twice",
            self.pcpu
        );
        let vm = self.loaded_vm.expect("a vCPU is loaded");
        *self
            .world
            .pmu_loads
            .lock()
            .entry((vm, self.loaded_index))
            .or_insert(0) += 1;
    }

    fn save_pmu(&mut self, registers: &mut PmuRegisters, _features: PmuFeatures) {
        *registers = self
            .pmu_cpu
            .take()
            .expect("PMU registers saved that were not loaded");
    }

    fn pmu_overflow_registers(&self) -> (u64, u64, u64) {
        let r = self.pmu_cpu.as_ref().expect("only a loaded PMU is sampled");
        (r.pmcr, r.interrupts, r.overflows)
    }

    fn enable_pmu_interrupt(&mut self) {
        self.world
            .pmu_interrupts_enabled
            .fetch_add(1, Ordering::Relaxed);
    }

    fn set_traps(&mut self, hcr: u64) {
        self.traps = hcr;
    }

    fn enter_guest(&mut self, ctx: &mut VcpuContext<FakeSaved>, fast: &FastExit<'_>) -> (u64, u64) {
        if let Some(entries) = &mut self.entered_with {
            entries.push((self.loaded_index, self.traps));
        }
        loop {
            let exit = self.run_guest(ctx);
            self.world.exits.fetch_add(1, Ordering::Relaxed);
            // What the hardware layer's exit vector does: a synchronous
            // exit that `fast` answers goes straight back in.
            if exit.vector == VECTOR_SYNC && fast.answer(exit.esr, ctx.regs.results_mut()) {
                self.world.fast_exits.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.fault = (exit.far, exit.hpfar);
            return (exit.vector, exit.esr);
        }
    }

    fn fault_address(&self) -> (u64, u64) {
        self.fault
    }

    fn take_interrupt(&mut self) -> Taken {
        self.pending_irq.take().unwrap_or(Taken::Hypervisor)
    }

    fn arm_timer(&mut self, deadline: u64) {
        self.world.timer[self.pcpu].store(deadline, Ordering::Relaxed);
        let now = self.world.now();
        if self.timer_write_hands_over && deadline > now {
            self.world.advance(deadline - now);
        }
    }

    fn wait_for_interrupt(&mut self, deadline: u64) {
        if self.world.ipi[self.pcpu].swap(false, Ordering::AcqRel) {
            return;
        }
        // Sleep part of the way: other pCPUs still run meanwhile.
        let now = self.world.now();
        if deadline > now {
            self.world.advance((deadline - now).min(200));
        }
    }

    fn send_reschedule(&self, pcpu: usize) {
        assert!(
            pcpu < self.world.ipi.len(),
            "SGI to pCPU {pcpu}, which does not exist"
        );
        self.world.ipi[pcpu].store(true, Ordering::Release);
    }

    fn vtimer_live(&self) -> (u64, u64) {
        (self.timer_control(), self.timer.1)
    }

    fn vtimer_control(&self) -> u64 {
        self.timer_control()
    }

    fn vtimer_ppi(&self) -> u16 {
        crate::guest::layout::TIMER.virt.intid() as u16
    }

    fn deactivate_vtimer_ppi(&mut self) {
        assert!(
            self.timer_ppi_active,
            "pCPU {}: the runner deactivated an inactive PPI",
            self.pcpu
        );
        self.timer_ppi_active = false;
        self.world
            .timer_ppi_ended_by_runner
            .fetch_add(1, Ordering::Relaxed);
    }

    fn vbar_el1(&self) -> u64 {
        0x4000_0000
    }

    fn write_exception(&mut self, entry: &Injection) {
        // The guest resumes at its vector table (VBAR_EL1 + the offset).
        assert!(
            (self.vbar_el1()..self.vbar_el1() + 0x800).contains(&entry.pc),
            "exception entered at {:#x}",
            entry.pc
        );
        self.world.injected.fetch_add(1, Ordering::Relaxed);
    }

    fn read_id_register(&self, crm: u8, op2: u8) -> u64 {
        match (crm, op2) {
            crate::trap::debug::ID_AA64DFR0_CRM_OP2 => DFR0,
            _ => 0,
        }
    }

    fn list_registers(&self) -> usize {
        4
    }

    fn read_lr(&self, index: usize) -> u64 {
        self.lrs[index]
    }

    fn write_lr(&mut self, index: usize, value: u64) {
        assert!(
            index < self.list_registers(),
            "ICH_LR{index}_EL2 does not exist"
        );
        self.lrs[index] = value;
    }

    fn set_interface_control(&mut self, _underflow: bool) {}

    /// The fake guest takes its interrupts when it likes
    /// ([`Self::handle_interrupts`]), not when an interface would signal
    /// them, so its interface reads as signalling nothing (VMCR 0: both
    /// groups off, everything masked) unless a test sets
    /// [`Self::interface`]: then the sampler's witness that a vCPU did not
    /// run (`el2::sched::spinwatch`) sees what the test put there.
    fn live_interface(&self) -> (u64, bool) {
        self.interface
    }

    fn store_preempted(&self, pa: u64, width: usize, value: u64) {
        assert!(
            pa.is_multiple_of(64) && (width == 4 || width == 8),
            "record {pa:#x}/{width}"
        );
        self.world.memory.lock().insert(pa, value);
    }

    fn lock_count_hint(&self, _pa: u64, _width: usize) -> u32 {
        0
    }

    /// The fake guests' stage 1 is flat: every address is its own IPA.
    fn guest_ipa_of(&self, va: u64) -> Option<u64> {
        Some(va)
    }

    /// From the 8-byte words of the fake memory (0 where nothing was
    /// stored).
    fn read_guest_ram(&self, pa: u64, width: u8) -> u64 {
        assert!(
            matches!(width, 1 | 2 | 4 | 8) && pa.is_multiple_of(u64::from(width)),
            "read {pa:#x}/{width}"
        );
        let word = self
            .world
            .memory
            .lock()
            .get(&(pa & !7))
            .copied()
            .unwrap_or(0);
        let bits = u32::from(width) * 8;
        let value = word >> ((pa & 7) * 8);
        if bits == 64 {
            value
        } else {
            value & ((1 << bits) - 1)
        }
    }

    fn store_stolen_time(&self, pa: u64, ns: u64) {
        let mut memory = self.world.memory.lock();
        let old = memory.insert(pa, ns).unwrap_or(0);
        assert!(ns >= old, "stolen time went back at {pa:#x}: {old} -> {ns}");
    }

    fn zero(&self, range: MemRange) {
        self.world
            .memory
            .lock()
            .retain(|&pa, _| !(range.base..range.end()).contains(&pa));
    }

    fn copy(&self, _to: u64, _from: MemRange) {}

    fn write(&self, _to: u64, _bytes: &[u8]) {}

    fn sync_for_guest(&self, _range: MemRange) {}

    fn allocations(&self, _refusal: Refusal) -> FakeTxn {
        FakeTxn
    }

    fn heap_in_use(&self) -> usize {
        0
    }

    fn map_at_el2(&self, _range: MemRange, _kind: MapKind) -> Result<(), String> {
        Ok(())
    }

    fn stage2(&self, vmid: u8, _ipa: MemRange, _pa: u64) -> Result<((), u64), String> {
        Ok(((), u64::from(vmid)))
    }

    fn host_bytes(&self, _range: MemRange) -> &[u8] {
        // A kernel without an Image header: placed at the start of RAM.
        &[]
    }

    fn console_read_byte(&mut self) -> Option<u8> {
        None
    }

    fn console_line(&self, line: fmt::Arguments<'_>) {
        self.world.console.lock().push(alloc::format!("{line}"));
    }
}
