//! The GTDT (ACPI 6.5 §5.2.25 "Generic Timer Description Table"): the
//! architected timer's interrupts.

use alloc::format;

use super::table::{Fields, Table};
use super::{EDGE_FALLING, EDGE_RISING, LEVEL_HIGH, LEVEL_LOW};
use crate::{ArchTimer, Interrupt, PlatformError};

/// Offsets of each timer's GSIV; its flags follow in the next 4 bytes
/// (§5.2.25 Table 5.121).
const SECURE_EL1: usize = 48;
const NON_SECURE_EL1: usize = 56;
const VIRTUAL_EL1: usize = 64;
const NON_SECURE_EL2: usize = 72;
/// Only in GTDT revision 3 and later (ACPI 6.3).
const VIRTUAL_EL2: usize = 96;
/// Through the EL2 timer's flags: every revision has these (ACPI 5.0's
/// revision 1 already had the four timers at these offsets).
const MIN_LEN: usize = 80;
/// Through the virtual EL2 timer's flags.
const REVISION_3_LEN: usize = 104;

/// Timer flags (Table 5.122): bit 0 edge (else level), bit 1 active low
/// (else high); bit 2, always-on capability, says nothing about the
/// interrupt's shape.
const EDGE: u32 = 1 << 0;
const ACTIVE_LOW: u32 = 1 << 1;

/// The secure EL1 timer's interrupt when the firmware leaves it out
/// (GSIV 0, as it may: the non-secure world never uses CNTPS): the PPI
/// the Arm Base System Architecture recommends for it (BSA "PPI
/// assignments": INTID 29), level-high.
const DEFAULT_SECURE_EL1: Interrupt = Interrupt::Ppi {
    number: 13,
    flags: LEVEL_HIGH,
};

pub(crate) fn parse(table: &Table<'_>) -> Result<ArchTimer, PlatformError> {
    let fields = table.fields();
    fields.require(MIN_LEN, "EL2 Timer Flags")?;
    let secure_phys =
        timer(&fields, SECURE_EL1, "Secure EL1 Timer GSIV")?.unwrap_or(DEFAULT_SECURE_EL1);
    let nonsecure_phys = required(&fields, NON_SECURE_EL1, "Non-Secure EL1 Timer GSIV")?;
    let virt = required(&fields, VIRTUAL_EL1, "Virtual EL1 Timer GSIV")?;
    let hyp_phys = required(&fields, NON_SECURE_EL2, "EL2 Timer GSIV")?;
    let hyp_virt = if table.revision >= 3 {
        fields.require(REVISION_3_LEN, "Virtual EL2 Timer Flags")?;
        timer(&fields, VIRTUAL_EL2, "Virtual EL2 Timer GSIV")?
    } else {
        None
    };
    Ok(ArchTimer {
        secure_phys,
        nonsecure_phys,
        virt,
        hyp_phys,
        hyp_virt,
        // CNTFRQ_EL0 is the only source; ACPI has no override.
        clock_frequency: None,
    })
}

/// A timer whose GSIV must be given.
fn required(fields: &Fields<'_>, at: usize, field: &str) -> Result<Interrupt, PlatformError> {
    timer(fields, at, field)?.ok_or_else(|| fields.bad(field, "0: the timer has no interrupt"))
}

/// The timer whose GSIV is at `at` and flags at `at + 4`: a PPI, or
/// `None` for GSIV 0.
fn timer(fields: &Fields<'_>, at: usize, field: &str) -> Result<Option<Interrupt>, PlatformError> {
    let gsiv = fields.u32(at, field)?;
    let flags = fields.u32(at + 4, field)?;
    let flags = match (flags & EDGE != 0, flags & ACTIVE_LOW != 0) {
        (false, false) => LEVEL_HIGH,
        (false, true) => LEVEL_LOW,
        (true, false) => EDGE_RISING,
        (true, true) => EDGE_FALLING,
    };
    match gsiv {
        0 => Ok(None),
        16..=31 => Ok(Some(Interrupt::Ppi {
            number: gsiv - 16,
            flags,
        })),
        _ => Err(fields.bad(field, format!("GSIV {gsiv} is not a PPI (INTIDs 16 to 31)"))),
    }
}
