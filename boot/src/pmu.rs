//! The PMUv3's EL0 and EL1 registers (Arm ARM D12 "The Performance
//! Monitors Extension", register descriptions in D19.5), which el2
//! switches for a vCPU that uses them and the test guests program: their
//! fields, and accessors by name and, for the event counters and their
//! event types (`PMEVCNTR<n>_EL0`, `PMEVTYPER<n>_EL0`), by number (the
//! number is part of the instruction). aarch64-cpu defines none of them.

use tock_registers::register_bitfields;

register_bitfields! {u64,
    /// PMCR_EL0, the Performance Monitors Control Register.
    pub PMCR [
        /// Implementer code (RO).
        IMP OFFSET(24) NUMBITS(8) [],
        /// Identification code (RO).
        IDCODE OFFSET(16) NUMBITS(8) [],
        /// Number of event counters (RO); from EL0/EL1, MDCR_EL2.HPMN.
        N OFFSET(11) NUMBITS(5) [],
        /// Freeze-on-overflow (FEAT_PMUv3p7).
        FZO OFFSET(9) NUMBITS(1) [],
        /// Long event counter enable (FEAT_PMUv3p5): overflow at 64 bits.
        LP OFFSET(7) NUMBITS(1) [],
        /// Long cycle counter enable: PMCCNTR_EL0 overflows at 64 bits.
        LC OFFSET(6) NUMBITS(1) [],
        /// Disable the cycle counter where event counting is prohibited.
        DP OFFSET(5) NUMBITS(1) [],
        /// Export events.
        X OFFSET(4) NUMBITS(1) [],
        /// Clock divider: PMCCNTR_EL0 counts every 64th cycle.
        D OFFSET(3) NUMBITS(1) [],
        /// Cycle counter reset (write-only, reads 0).
        C OFFSET(2) NUMBITS(1) [],
        /// Event counter reset (write-only, reads 0).
        P OFFSET(1) NUMBITS(1) [],
        /// Enable the counters below HPMN and the cycle counter.
        E OFFSET(0) NUMBITS(1) [],
    ],
    /// PMUSERENR_EL0: which PMU registers EL0 may use.
    pub PMUSERENR [
        /// Event counter reads.
        ER OFFSET(3) NUMBITS(1) [],
        /// Cycle counter reads.
        CR OFFSET(2) NUMBITS(1) [],
        /// Software increment writes.
        SW OFFSET(1) NUMBITS(1) [],
        /// Everything else, as well.
        EN OFFSET(0) NUMBITS(1) [],
    ],
    /// PMEVTYPER<n>_EL0 and PMCCFILTR_EL0: what a counter counts, where.
    pub PMEVTYPER [
        /// Do not count at EL1.
        P OFFSET(31) NUMBITS(1) [],
        /// Do not count at EL0.
        U OFFSET(30) NUMBITS(1) [],
        /// Non-secure EL1 filtering (with P).
        NSK OFFSET(29) NUMBITS(1) [],
        /// Non-secure EL0 filtering (with U).
        NSU OFFSET(28) NUMBITS(1) [],
        /// Count at EL2.
        NSH OFFSET(27) NUMBITS(1) [],
        /// Count at EL3.
        M OFFSET(26) NUMBITS(1) [],
        /// The event number (PMEVTYPER<n> only).
        EVTCOUNT OFFSET(0) NUMBITS(16) [],
    ],
}

/// The cycle counter's bit in PMCNTENSET/CLR, PMINTENSET/CLR, PMOVSSET/CLR,
/// and PMSELR_EL0's value that selects PMCCFILTR_EL0.
pub const CYCLE_COUNTER: u32 = 31;
/// Most event counters a PMU can have (PMCR_EL0.N is 5 bits; 31 is the
/// cycle counter's number).
pub const MAX_EVENT_COUNTERS: usize = 31;

/// Common event numbers (Arm ARM D17 "PMU events and event numbers").
pub mod event {
    /// Instruction architecturally executed, software increment.
    pub const SW_INCR: u64 = 0x00;
    /// Instruction architecturally executed.
    pub const INST_RETIRED: u64 = 0x08;
    /// Cycle.
    pub const CPU_CYCLES: u64 = 0x11;
    /// Chain: the odd counter of a pair counts the even one's overflows.
    pub const CHAIN: u64 = 0x1e;
}

/// A PMU register by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Register {
    Pmcr,
    Pmcntenset,
    Pmcntenclr,
    Pmovsset,
    Pmovsclr,
    Pmswinc,
    Pmselr,
    Pmceid0,
    Pmceid1,
    Pmccntr,
    Pmxevtyper,
    Pmxevcntr,
    Pmuserenr,
    Pmintenset,
    Pmintenclr,
    Pmccfiltr,
}

/// An event counter's registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `PMEVCNTR<n>_EL0`.
    Counter,
    /// `PMEVTYPER<n>_EL0`.
    Type,
}

/// `MRS` of the PMU register named `$name`.
#[cfg(target_os = "none")]
macro_rules! mrs {
    ($name:literal) => {{
        let value: u64;
        // SAFETY: reading a PMU register has no effect but the read (none
        // of them is read-sensitive).
        unsafe {
            core::arch::asm!(
                concat!("mrs {}, ", $name),
                out(reg) value,
                options(nomem, nostack, preserves_flags),
            )
        };
        value
    }};
}

/// `MSR` of the PMU register named `$name`.
#[cfg(target_os = "none")]
macro_rules! msr {
    ($name:literal, $value:expr) => {
        // SAFETY: the PMU's registers have no effect on memory; what they
        // count, and at which Exception levels, is the caller's
        // configuration (with MDCR_EL2's).
        unsafe {
            core::arch::asm!(
                concat!("msr ", $name, ", {}"),
                in(reg) $value,
                options(nomem, nostack, preserves_flags),
            )
        }
    };
}

/// Reads `register` (the write-only PMSWINC_EL0: 0).
#[cfg(target_os = "none")]
pub fn read(register: Register) -> u64 {
    match register {
        Register::Pmcr => mrs!("pmcr_el0"),
        Register::Pmcntenset => mrs!("pmcntenset_el0"),
        Register::Pmcntenclr => mrs!("pmcntenclr_el0"),
        Register::Pmovsset => mrs!("pmovsset_el0"),
        Register::Pmovsclr => mrs!("pmovsclr_el0"),
        Register::Pmswinc => 0,
        Register::Pmselr => mrs!("pmselr_el0"),
        Register::Pmceid0 => mrs!("pmceid0_el0"),
        Register::Pmceid1 => mrs!("pmceid1_el0"),
        Register::Pmccntr => mrs!("pmccntr_el0"),
        Register::Pmxevtyper => mrs!("pmxevtyper_el0"),
        Register::Pmxevcntr => mrs!("pmxevcntr_el0"),
        Register::Pmuserenr => mrs!("pmuserenr_el0"),
        Register::Pmintenset => mrs!("pmintenset_el1"),
        Register::Pmintenclr => mrs!("pmintenclr_el1"),
        Register::Pmccfiltr => mrs!("pmccfiltr_el0"),
    }
}

/// Writes `value` to `register` (nothing for the read-only PMCEID0/1_EL0).
#[cfg(target_os = "none")]
pub fn write(register: Register, value: u64) {
    match register {
        Register::Pmcr => msr!("pmcr_el0", value),
        Register::Pmcntenset => msr!("pmcntenset_el0", value),
        Register::Pmcntenclr => msr!("pmcntenclr_el0", value),
        Register::Pmovsset => msr!("pmovsset_el0", value),
        Register::Pmovsclr => msr!("pmovsclr_el0", value),
        Register::Pmswinc => msr!("pmswinc_el0", value),
        Register::Pmselr => msr!("pmselr_el0", value),
        Register::Pmceid0 => {}
        Register::Pmceid1 => {}
        Register::Pmccntr => msr!("pmccntr_el0", value),
        Register::Pmxevtyper => msr!("pmxevtyper_el0", value),
        Register::Pmxevcntr => msr!("pmxevcntr_el0", value),
        Register::Pmuserenr => msr!("pmuserenr_el0", value),
        Register::Pmintenset => msr!("pmintenset_el1", value),
        Register::Pmintenclr => msr!("pmintenclr_el1", value),
        Register::Pmccfiltr => msr!("pmccfiltr_el0", value),
    }
}

/// `MRS`/`MSR` of `PMEVCNTR<n>_EL0` or `PMEVTYPER<n>_EL0` (op0 3, op1 3,
/// CRn 14, CRm 0b10:n[4:3] or 0b11:n[4:3], op2 n[2:0]).
#[cfg(target_os = "none")]
macro_rules! event_access {
    ($read:ident, $write:ident, $($n:literal $crm:literal $op2:literal)*) => {
        fn $read(n: usize) -> u64 {
            match n {
                $($n => {
                    let value: u64;
                    // SAFETY: reading an event counter or its type has no
                    // effect but the read.
                    unsafe {
                        core::arch::asm!(
                            concat!("mrs {}, S3_3_C14_C", $crm, "_", $op2),
                            out(reg) value,
                            options(nomem, nostack, preserves_flags),
                        )
                    };
                    value
                })*
                _ => 0,
            }
        }

        fn $write(n: usize, value: u64) {
            match n {
                $($n => {
                    // SAFETY: as for `write`: no effect on memory.
                    unsafe {
                        core::arch::asm!(
                            concat!("msr S3_3_C14_C", $crm, "_", $op2, ", {}"),
                            in(reg) value,
                            options(nomem, nostack, preserves_flags),
                        )
                    };
                })*
                _ => {}
            }
        }
    };
}

#[cfg(target_os = "none")]
event_access!(read_counter, write_counter, 0 8 0 1 8 1 2 8 2 3 8 3 4 8 4 5 8 5 6 8 6 7 8 7 8 9 0 9 9 1 10 9 2 11 9 3 12 9 4 13 9 5 14 9 6 15 9 7 16 10 0 17 10 1 18 10 2 19 10 3 20 10 4 21 10 5 22 10 6 23 10 7 24 11 0 25 11 1 26 11 2 27 11 3 28 11 4 29 11 5 30 11 6);
#[cfg(target_os = "none")]
event_access!(read_type, write_type, 0 12 0 1 12 1 2 12 2 3 12 3 4 12 4 5 12 5 6 12 6 7 12 7 8 13 0 9 13 1 10 13 2 11 13 3 12 13 4 13 13 5 14 13 6 15 13 7 16 14 0 17 14 1 18 14 2 19 14 3 20 14 4 21 14 5 22 14 6 23 14 7 24 15 0 25 15 1 26 15 2 27 15 3 28 15 4 29 15 5 30 15 6);

/// Reads event counter `n`'s `register` (0 for `n` >= 31). The counter
/// must exist (n < PMCR_EL0.N as this Exception level sees it).
#[cfg(target_os = "none")]
pub fn read_event(register: Event, n: usize) -> u64 {
    match register {
        Event::Counter => read_counter(n),
        Event::Type => read_type(n),
    }
}

/// Writes event counter `n`'s `register` (nothing for `n` >= 31), as
/// [`read_event`].
#[cfg(target_os = "none")]
pub fn write_event(register: Event, n: usize, value: u64) {
    match register {
        Event::Counter => write_counter(n, value),
        Event::Type => write_type(n, value),
    }
}
