//! Per-CPU blocks, one per possible CPU, in logical order. TPIDR_EL1 points
//! at the running CPU's block; the entry code fills in its stack top and
//! index, the exception vectors read the stack top back.

use crate::devicetree::MAX_CPUS;
use aarch64_cpu::registers::TPIDR_EL1;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, Ordering};
use tock_registers::interfaces::Readable;

/// One CPU's block. The first two fields are written by the entry code and
/// read by the exception vectors (assembly): keep their offsets in sync.
#[repr(C)]
pub struct PerCpu {
    /// Top of this CPU's exception stack: every exception starts there.
    pub exception_stack_top: AtomicU64,
    /// The logical CPU number.
    pub index: AtomicU64,
    /// How many times the CPU has entered the runtime (a secondary once per
    /// successful CPU_ON).
    pub entries: AtomicU32,
    /// Between entering the runtime and calling CPU_OFF.
    pub running: AtomicBool,
    /// Fault reports in progress on this CPU (a fault while reporting one
    /// must not recurse forever).
    pub reporting: AtomicU8,
    /// The synchronous exception [`super::fault::expect`] waits for on
    /// this CPU, and what it recorded.
    pub expected_fault: super::fault::ExpectedFault,
    /// This CPU's PV-lock record's `lock_count` cell, null without one: set
    /// by [`super::pv::init_cpu`], so that every lock taken and dropped
    /// reaches it with one load instead of the driver's lookup.
    pub lock_count: AtomicPtr<AtomicU32>,
}

pub const OFFSET_EXCEPTION_STACK_TOP: usize = core::mem::offset_of!(PerCpu, exception_stack_top);
pub const OFFSET_INDEX: usize = core::mem::offset_of!(PerCpu, index);

impl PerCpu {
    const fn new() -> Self {
        Self {
            exception_stack_top: AtomicU64::new(0),
            index: AtomicU64::new(0),
            entries: AtomicU32::new(0),
            running: AtomicBool::new(false),
            reporting: AtomicU8::new(0),
            expected_fault: super::fault::ExpectedFault::new(),
            lock_count: AtomicPtr::new(core::ptr::null_mut()),
        }
    }
}

/// Every CPU's block (in `.bss`: zero until the entry code runs).
pub static PERCPU: [PerCpu; MAX_CPUS] = [const { PerCpu::new() }; MAX_CPUS];

/// The running CPU's block: TPIDR_EL1 itself, one register read. The PV
/// locks ask for it up to three times per acquisition (the CPU number,
/// the `lock_count` cell on lock and on unlock); turning the register back
/// into an index into [`PERCPU`], bounds-checked, cost about 20 of a
/// lockbench iteration's 860 instructions.
#[inline(always)]
pub fn this_cpu() -> &'static PerCpu {
    let block = TPIDR_EL1.get() as *const PerCpu;
    // SAFETY: the entry code (`.Lset_percpu` in head.rs) points TPIDR_EL1
    // at this CPU's element of the static PERCPU before any Rust code runs
    // on the CPU, and nothing writes it afterwards (EL0 cannot), so it
    // names a live, 'static PerCpu; every field is atomic, so a shared
    // reference is all it needs.
    unsafe { &*block }
}

/// The running CPU's logical number.
pub fn current() -> usize {
    this_cpu().index.load(Ordering::Relaxed) as usize
}
