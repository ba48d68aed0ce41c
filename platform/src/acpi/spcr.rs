//! The SPCR (Microsoft "Serial Port Console Redirection Table", revisions
//! 1 to 4): the console UART.

use alloc::format;
use alloc::string::String;

use super::table::Table;
use super::{LEVEL_HIGH, checked_range};
use crate::{Interrupt, PlatformError, Uart, UartKind};

/// Offsets of the fields read.
const INTERFACE_TYPE: usize = 36;
/// `Base Address`, a Generic Address Structure (ACPI 6.5 §5.2.3.2):
/// Address Space ID, Register Bit Width, Register Bit Offset, Access
/// Size, then the 64-bit address.
const BASE_ADDRESS: usize = 40;
const GAS_ADDRESS: usize = BASE_ADDRESS + 4;
const INTERRUPT_TYPE: usize = 52;
const GSIV: usize = 54;
/// Every revision's table is at least this long (revision 3 added fields
/// after it).
const MIN_LEN: usize = 80;

/// Interface types (the DBG2 serial port subtypes, Microsoft "Debug Port
/// Table 2", Table 3) the hypervisor's console driver can drive: it only
/// reads UARTFR and reads and writes UARTDR with 32-bit accesses, which
/// the SBSA Generic UART (BSA Appendix B, a subset of the PL011's
/// registers) implements too.
const ARM_PL011: u8 = 0x03;
/// "ARM SBSA (2.x only) Generic UART supporting only 32-bit accesses"
/// (deprecated, still found in older firmware).
const ARM_SBSA_32BIT: u8 = 0x0d;
const ARM_SBSA: u8 = 0x0e;

/// GAS Address Space ID for system memory.
const SYSTEM_MEMORY: u8 = 0;
/// `Interrupt Type` bit 3: the interrupt is an Arm GIC GSIV.
const ARMH_GIC: u8 = 1 << 3;

/// Both a PL011 (PL011 TRM, "Summary of registers") and an SBSA UART
/// have a 4 KiB register frame; SPCR gives only the base.
pub(crate) const UART_SIZE: u64 = 0x1000;

/// The console the SPCR describes, if the hypervisor can drive it. Other
/// UART types, and ports that are not memory-mapped or whose address is 0
/// (the SPCR's way of saying redirection is off), give `None`, like a
/// DT console that is not a PL011: the hypervisor then runs headless.
/// `with_irq` reads the interrupt too.
pub(crate) fn console(table: &Table<'_>, with_irq: bool) -> Result<Option<Uart>, PlatformError> {
    let fields = table.fields();
    fields.require(MIN_LEN, "GSIV")?;
    let interface = fields.u8(INTERFACE_TYPE, "Interface Type")?;
    if !matches!(interface, ARM_PL011 | ARM_SBSA_32BIT | ARM_SBSA) {
        log::debug!("SPCR console: interface type {interface:#x} is not a PL011 or SBSA UART");
        return Ok(None);
    }
    let space = fields.u8(BASE_ADDRESS, "Base Address")?;
    let base = fields.u64(GAS_ADDRESS, "Base Address")?;
    if space != SYSTEM_MEMORY || base == 0 {
        log::debug!("SPCR console: not memory-mapped (address space {space}, address {base:#x})");
        return Ok(None);
    }
    let range = checked_range(&fields, "Base Address", base, UART_SIZE)?;
    let irq = if with_irq && fields.u8(INTERRUPT_TYPE, "Interrupt Type")? & ARMH_GIC != 0 {
        match fields.u32(GSIV, "GSIV")? {
            0 => None,
            // SPCR says nothing of the trigger: a PL011's UARTINTR (and an
            // SBSA UART's) is level-sensitive, active high.
            gsiv @ 32..=1019 => Some(Interrupt::Spi {
                number: gsiv - 32,
                flags: LEVEL_HIGH,
            }),
            gsiv => {
                return Err(fields.bad(
                    "GSIV",
                    format!("{gsiv} is not a shared peripheral interrupt (INTIDs 32 to 1019)"),
                ));
            }
        }
    } else {
        None
    };
    Ok(Some(Uart {
        kind: UartKind::Pl011,
        range,
        irq,
        node: String::from("SPCR"),
    }))
}
