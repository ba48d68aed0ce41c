//! CPU identities: the affinity fields of MPIDR_EL1, as device trees list
//! them in `/cpus/cpu@N/reg` and PSCI CPU_ON takes them.

use core::fmt;

/// The affinity part of an MPIDR (Aff3 in bits 39:32, Aff2..Aff0 in bits
/// 23:0); Arm ARM D23.2 "MPIDR_EL1".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Mpidr(u64);

/// The affinity fields of MPIDR_EL1.
const AFFINITY_MASK: u64 = 0xff_00ff_ffff;

impl Mpidr {
    /// Keeps only the affinity fields of `raw` (an MPIDR_EL1 value or a
    /// device tree `reg`).
    pub const fn from_raw(raw: u64) -> Self {
        Self(raw & AFFINITY_MASK)
    }

    /// An MPIDR from its four affinity levels.
    pub const fn from_affinity(aff3: u8, aff2: u8, aff1: u8, aff0: u8) -> Self {
        Self(((aff3 as u64) << 32) | ((aff2 as u64) << 16) | ((aff1 as u64) << 8) | aff0 as u64)
    }

    /// The value PSCI calls take.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// Affinity level `level` (0..=3).
    pub const fn affinity(self, level: u32) -> u8 {
        let shift = if level == 3 { 32 } else { 8 * level };
        (self.0 >> shift) as u8
    }

    /// The vCPU index that KVM and this project's hypervisor give the vCPU
    /// with this MPIDR (Aff0 = index bits 3:0, Aff1 = bits 11:4, Aff2 =
    /// bits 19:12; Linux `reset_mpidr`, docs/vms.md). This is the number
    /// paravirtual calls such as KICK_CPU take. `None` for an MPIDR no such
    /// vCPU has (Aff0 above 15, or Aff3 set).
    pub const fn vcpu_index(self) -> Option<u64> {
        // Aff0 holds `pvlock_abi::virt::CPUS_PER_CLUSTER` values, a power
        // of two: the index is Aff2:Aff1:Aff0 packed, ORs and shifts (on
        // every directed yield's path).
        const PER_CLUSTER: u16 = pvlock_abi::virt::CPUS_PER_CLUSTER;
        const AFF0_BITS: u32 = PER_CLUSTER.trailing_zeros();
        const _: () = assert!(PER_CLUSTER.is_power_of_two());
        if self.affinity(0) as u16 >= PER_CLUSTER || self.affinity(3) != 0 {
            return None;
        }
        Some(
            self.affinity(0) as u64
                | (self.affinity(1) as u64) << AFF0_BITS
                | (self.affinity(2) as u64) << (AFF0_BITS + 8),
        )
    }
}

impl fmt::Display for Mpidr {
    /// `Aff3.Aff2.Aff1.Aff0`, the way the hypervisor prints CPUs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}.{}.{}",
            self.affinity(3),
            self.affinity(2),
            self.affinity(1),
            self.affinity(0)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_display() {
        let m = Mpidr::from_raw(0x8000_0000 | 0x12_0003_0405);
        assert_eq!(m.raw(), 0x12_0003_0405, "U and MT bits dropped");
        assert_eq!(m.to_string(), "18.3.4.5");
        assert_eq!(Mpidr::from_affinity(0, 0, 1, 2).raw(), 0x102);
        assert_eq!(Mpidr::from_affinity(0, 0, 0, 3).to_string(), "0.0.0.3");
    }

    #[test]
    fn vcpu_indices_follow_kvm() {
        assert_eq!(Mpidr::from_raw(0).vcpu_index(), Some(0));
        assert_eq!(Mpidr::from_affinity(0, 0, 0, 15).vcpu_index(), Some(15));
        assert_eq!(Mpidr::from_affinity(0, 0, 1, 0).vcpu_index(), Some(16));
        assert_eq!(Mpidr::from_affinity(0, 0, 3, 15).vcpu_index(), Some(63));
        assert_eq!(Mpidr::from_affinity(0, 1, 0, 2).vcpu_index(), Some(4098));
        assert_eq!(Mpidr::from_affinity(0, 0, 0, 16).vcpu_index(), None);
        assert_eq!(Mpidr::from_affinity(1, 0, 0, 0).vcpu_index(), None);
    }
}
