//! A vCPU's self-hosted debug registers in and out of this CPU, when
//! `el2::trap::debug` says so: the breakpoint and watchpoint comparators,
//! MDSCR_EL1 and MDCR_EL2.TDA. It decides nothing.
//!
//! While no vCPU's debug registers are loaded, a CPU has MDSCR_EL1 = 0
//! (no breakpoint, watchpoint or step can fire at EL0 or EL1), TDA set,
//! and its physical OS lock and OS double lock unlocked
//! ([`init_cpu`]): the guests' OS locks are emulated.

use aarch64_cpu::registers::{MDCR_EL2, MDSCR_EL1, OSLAR_EL1};
use boot::debug::{Comparator as Register, read, write};
use el2::trap::debug::{Comparator, DebugFeatures, DebugRegisters, MAX_COMPARATORS};
use tock_registers::interfaces::{ReadWriteable, Writeable};

/// Writes OSDLR_EL1 (aarch64-cpu does not define it).
fn write_osdlr(value: u64) {
    // SAFETY: clearing the OS double lock at EL2 only lets debug
    // exceptions be generated at the debug target EL1; no memory effect.
    unsafe {
        core::arch::asm!("msr osdlr_el1, {}", in(reg) value, options(nomem, nostack, preserves_flags))
    };
}

/// This CPU's debug state before it runs guests: the physical OS lock and
/// OS double lock unlocked (both can reset locked, and would disable every
/// guest's debug exceptions), MDSCR_EL1 = 0. MDCR_EL2 traps the debug
/// registers (`cpu::init_el2_registers`).
pub fn init_cpu() {
    write_osdlr(0);
    OSLAR_EL1.write(OSLAR_EL1::OSLK::Unlocked);
    MDSCR_EL1.set(0);
    aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
}

/// The first `count` of 16 comparators: the ones the CPU has (the guest's
/// values cannot fire at EL2: debug exceptions are never generated above
/// the debug target EL1, `el2::trap::debug`).
fn implemented(count: usize) -> core::ops::Range<usize> {
    0..count.min(MAX_COMPARATORS)
}

/// Loads `registers` (the comparators `features` names and MDSCR_EL1) and
/// stops trapping the guest's debug register accesses. The ERET into the
/// guest synchronises the writes (Arm ARM D2 "Synchronization and debug
/// exceptions").
pub fn load(registers: &DebugRegisters, features: DebugFeatures) {
    for n in implemented(features.breakpoints) {
        let Comparator { control, value } = registers.breakpoints[n];
        write(Register::BreakpointValue, n, value);
        write(Register::BreakpointControl, n, control);
    }
    for n in implemented(features.watchpoints) {
        let Comparator { control, value } = registers.watchpoints[n];
        write(Register::WatchpointValue, n, value);
        write(Register::WatchpointControl, n, control);
    }
    MDSCR_EL1.set(registers.mdscr);
    MDCR_EL2.modify(MDCR_EL2::TDA::CLEAR);
}

/// Saves the running vCPU's debug registers into `registers`, disables
/// debug events (MDSCR_EL1 = 0) and traps the debug registers again.
pub fn save(registers: &mut DebugRegisters, features: DebugFeatures) {
    for n in implemented(features.breakpoints) {
        registers.breakpoints[n] = Comparator {
            control: read(Register::BreakpointControl, n),
            value: read(Register::BreakpointValue, n),
        };
    }
    for n in implemented(features.watchpoints) {
        registers.watchpoints[n] = Comparator {
            control: read(Register::WatchpointControl, n),
            value: read(Register::WatchpointValue, n),
        };
    }
    registers.mdscr = tock_registers::interfaces::Readable::get(&MDSCR_EL1);
    MDSCR_EL1.set(0);
    MDCR_EL2.modify(MDCR_EL2::TDA::SET);
}
