//! The FADT (ACPI 6.5 §5.2.9 "Fixed ACPI Description Table"): how PSCI
//! is reached.

use alloc::format;
use alloc::string::String;

use super::table::{Kind, Table, error};
use crate::{Conduit, ErrorKind, PlatformError, Psci};

/// `ARM_BOOT_ARCH`, 2 bytes (Table 5.9, ACPI 5.1 and later).
const ARM_BOOT_ARCH: usize = 129;
/// `FADT Minor Version`, 1 byte.
const MINOR_VERSION: usize = 131;

/// ARM_BOOT_ARCH flags (Table 5.11).
const PSCI_COMPLIANT: u16 = 1 << 0;
const PSCI_USE_HVC: u16 = 1 << 1;

/// The PSCI version recorded for ACPI. The FADT only says PSCI is there:
/// ACPI on Arm requires PSCI 0.2 or later, and the Arm Base Boot
/// Requirements (BBR, "PSCI") require servers to implement PSCI 1.0 or
/// later. Like a DT's `arm,psci-1.0` compatible it is what the hypervisor
/// reports; every PSCI call it makes (CPU_ON, SYSTEM_OFF, SYSTEM_RESET)
/// exists since PSCI 0.2.
pub(crate) const PSCI_VERSION: (u16, u16) = (1, 0);

/// The PSCI conduit. `PSCI_COMPLIANT` must be set: without PSCI the
/// hypervisor can start no CPU and cannot power off.
pub(crate) fn psci(table: &Table<'_>) -> Result<Psci, PlatformError> {
    let fields = table.fields();
    if fields.len() <= MINOR_VERSION {
        return Err(error(
            Kind::Fadt,
            Some(String::from("ARM_BOOT_ARCH")),
            ErrorKind::MissingProperty,
        ));
    }
    let flags = fields.u16(ARM_BOOT_ARCH, "ARM_BOOT_ARCH")?;
    let minor = fields.u8(MINOR_VERSION, "FADT Minor Version")?;
    if flags & PSCI_COMPLIANT == 0 {
        return Err(error(
            Kind::Fadt,
            Some(String::from("ARM_BOOT_ARCH")),
            ErrorKind::Unsupported(format!(
                "PSCI_COMPLIANT is clear ({flags:#06x}, FADT {}.{minor}): the firmware \
                 has no PSCI, which the hypervisor needs to start CPUs",
                table.revision
            )),
        ));
    }
    Ok(Psci {
        conduit: if flags & PSCI_USE_HVC != 0 {
            Conduit::Hvc
        } else {
            Conduit::Smc
        },
        version: PSCI_VERSION,
    })
}
