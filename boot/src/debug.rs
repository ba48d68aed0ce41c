//! The self-hosted debug comparators by number: `DBGBVR<n>_EL1`,
//! `DBGBCR<n>_EL1`, `DBGWVR<n>_EL1` and `DBGWCR<n>_EL1` (op0 2, op1 0,
//! CRn 0, CRm n, op2 4 to 7; Arm ARM D19.3). The number is part of the
//! MRS/MSR instruction, so each of the 16 has its own; el2 switches a
//! vCPU's comparators with these, and the test guests arm theirs.
//!
//! What a comparator may be set to is the caller's business: it has no
//! effect on memory, and whether it can fire, and where, is decided by
//! MDSCR_EL1, the OS lock and the debug target Exception level (Arm ARM D2
//! "AArch64 Self-hosted Debug").

/// Most comparators of each kind ID_AA64DFR0_EL1 can describe.
pub const COMPARATORS: usize = 16;

/// A kind of comparator register (its op2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparator {
    /// `DBGBVR<n>_EL1`: a breakpoint's address.
    BreakpointValue = 4,
    /// `DBGBCR<n>_EL1`: a breakpoint's control.
    BreakpointControl = 5,
    /// `DBGWVR<n>_EL1`: a watchpoint's address.
    WatchpointValue = 6,
    /// `DBGWCR<n>_EL1`: a watchpoint's control.
    WatchpointControl = 7,
}

/// `MRS` of comparator `n` (0..16) of `register`'s kind.
#[cfg(target_os = "none")]
macro_rules! read_arms {
    ($register:expr, $n:expr, $($k:literal)*) => {
        match ($register, $n) {
            $(
                (Comparator::BreakpointValue, $k) => read_one!("4", $k),
                (Comparator::BreakpointControl, $k) => read_one!("5", $k),
                (Comparator::WatchpointValue, $k) => read_one!("6", $k),
                (Comparator::WatchpointControl, $k) => read_one!("7", $k),
            )*
            _ => 0,
        }
    };
}

#[cfg(target_os = "none")]
macro_rules! read_one {
    ($op2:literal, $k:literal) => {{
        let value: u64;
        // SAFETY: reading a debug register has no effect but the read.
        unsafe {
            core::arch::asm!(
                concat!("mrs {}, S2_0_C0_C", $k, "_", $op2),
                out(reg) value,
                options(nomem, nostack, preserves_flags),
            )
        };
        value
    }};
}

#[cfg(target_os = "none")]
macro_rules! write_arms {
    ($register:expr, $n:expr, $value:expr, $($k:literal)*) => {
        match ($register, $n) {
            $(
                (Comparator::BreakpointValue, $k) => write_one!("4", $k, $value),
                (Comparator::BreakpointControl, $k) => write_one!("5", $k, $value),
                (Comparator::WatchpointValue, $k) => write_one!("6", $k, $value),
                (Comparator::WatchpointControl, $k) => write_one!("7", $k, $value),
            )*
            _ => {}
        }
    };
}

#[cfg(target_os = "none")]
macro_rules! write_one {
    ($op2:literal, $k:literal, $value:expr) => {
        // SAFETY: a comparator has no effect on memory (module
        // documentation); which exceptions it can raise, and at which
        // Exception level, is the caller's configuration.
        unsafe {
            core::arch::asm!(
                concat!("msr S2_0_C0_C", $k, "_", $op2, ", {}"),
                in(reg) $value,
                options(nomem, nostack, preserves_flags),
            )
        }
    };
}

/// Reads comparator register `n` of kind `register`; 0 for `n` >= 16.
/// The CPU must implement it (ID_AA64DFR0_EL1.BRPs/WRPs): an access to
/// one it lacks is UNDEFINED.
#[cfg(target_os = "none")]
pub fn read(register: Comparator, n: usize) -> u64 {
    read_arms!(register, n, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
}

/// Writes `value` to comparator register `n` of kind `register`; nothing
/// for `n` >= 16. The CPU must implement it, as for [`read`].
#[cfg(target_os = "none")]
pub fn write(register: Comparator, n: usize, value: u64) {
    write_arms!(register, n, value, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
}
