//! Stage-2 translation: each VM's own tables (aarch64-paging's Stage2
//! regime) and VMID, so switching between VMs needs no TLB flush.
//!
//! Every VM uses a 39-bit IPA space (512 GiB, one level-1 root table with
//! the 4 KiB granule); its RAM is mapped as normal write-back memory and
//! nothing else: emulated devices and every other IPA fault to EL2.

use aarch64_cpu::registers::{ID_AA64MMFR0_EL1, VTCR_EL2, VTTBR_EL2};
use aarch64_paging::descriptor::{PhysicalAddress, Stage2Attributes as S2};
use aarch64_paging::idmap::IdTranslation;
use aarch64_paging::paging::{Constraints, MemoryRegion, Stage2};
use aarch64_paging::{MapError, Mapping};
use platform::MemRange;
use tock_registers::interfaces::Readable;

/// The guest IPA width (39 bits: the root is a single level-1 table, Arm
/// ARM D8.2.7, "stage 2 translation with the 4KB granule").
const IPA_BITS: u64 = el2::guest::layout::IPA_BITS as u64;
const ROOT_LEVEL: usize = 1;

/// VTCR_EL2 for every VM: 39-bit IPAs starting at level 1, 4 KiB granule,
/// cacheable inner-shareable walks, 8-bit VMIDs, output size as the CPU
/// implements (capped at 48 bits).
pub fn vtcr_value() -> u64 {
    use ID_AA64MMFR0_EL1::PARange::Value as Pa;
    let ps = match ID_AA64MMFR0_EL1.read_as_enum(ID_AA64MMFR0_EL1::PARange) {
        Some(Pa::Bits_32) => VTCR_EL2::PS::PA_32B_4GB,
        Some(Pa::Bits_36) => VTCR_EL2::PS::PA_36B_64GB,
        Some(Pa::Bits_40) => VTCR_EL2::PS::PA_40B_1TB,
        Some(Pa::Bits_42) => VTCR_EL2::PS::PA_42B_4TB,
        Some(Pa::Bits_44) => VTCR_EL2::PS::PA_44B_16TB,
        _ => VTCR_EL2::PS::PA_48B_256TB,
    };
    (VTCR_EL2::RES1::SET
        + VTCR_EL2::T0SZ.val(64 - IPA_BITS)
        + VTCR_EL2::SL0::Granule4KBLevel1
        + VTCR_EL2::TG0::Granule4KB
        + VTCR_EL2::SH0::Inner
        + VTCR_EL2::ORGN0::NormalWBRAWA
        + VTCR_EL2::IRGN0::NormalWBRAWA
        + ps)
        .value
}

/// One VM's stage-2 tables.
pub struct Stage2Tables {
    mapping: Mapping<IdTranslation<S2>, Stage2>,
    vmid: u8,
}

impl Stage2Tables {
    /// Empty tables for VMID `vmid` (0 is left for "no VM").
    pub fn new(vmid: u8) -> Self {
        Self {
            mapping: Mapping::new(IdTranslation::new(), ROOT_LEVEL, Stage2),
            vmid,
        }
    }

    /// Maps guest RAM `ipa` to host memory at `pa`: normal write-back,
    /// read/write/execute.
    pub fn map_ram(&mut self, ipa: MemRange, pa: u64) -> Result<(), MapError> {
        let region = MemoryRegion::new(ipa.base as usize, ipa.end() as usize);
        let flags = S2::VALID
            | S2::MEMATTR_NORMAL_INNER_WB
            | S2::MEMATTR_NORMAL_OUTER_WB
            | S2::S2AP_ACCESS_RW
            | S2::SH_INNER
            | S2::ACCESS_FLAG;
        self.mapping.map_range(
            &region,
            PhysicalAddress(pa as usize),
            flags,
            Constraints::empty(),
        )
    }

    /// The VTTBR_EL2 value selecting these tables and this VMID.
    pub fn vttbr(&self) -> u64 {
        let root = self.mapping.root_address().0 as u64;
        (VTTBR_EL2::VMID.val(u64::from(self.vmid)) + VTTBR_EL2::BADDR.val(root >> 1)).value
    }
}
