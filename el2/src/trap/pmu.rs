//! A guest's PMU (Arm ARM D12 "The Performance Monitors Extension"):
//! PMUv3 with the event counters the CPU has, partitioned from EL2 and
//! switched per vCPU, lazily.
//!
//! # What a VM gets
//!
//! The CPU's PMUv3 (PMUVer as the CPU has it, at most
//! [`PMU_VER_MAX`]), with every event counter it has: MDCR_EL2.HPMN is
//! PMCR_EL0.N, so the guest's PMCR_EL0.N reads the CPU's count and el2
//! keeps none for itself (it does not count anything). The guest programs
//! the real counters: its PMCR_EL0, PMSELR_EL0 (with PMXEVTYPER/PMXEVCNTR),
//! PMUSERENR_EL0 (its EL0's access), the enables, overflow flags and
//! interrupt enables, PMSWINC_EL0, the cycle counter and its filter, and
//! each event counter and its type behave as the architecture says,
//! because they are the hardware's. The overflow interrupt is the guest's
//! PPI 7 (INTID 23) through its virtual GIC, described by an
//! `arm,armv8-pmuv3` node in its device tree (`el2::guest::dt`).
//!
//! # Partitioned from EL2
//!
//! MDCR_EL2.HPMD (FEAT_PMUv3p1, required: [`PmuFeatures::from_cpu`])
//! prohibits event counting at EL2 by the guest's counters, whatever their
//! `PMEVTYPER<n>.NSH` says, and with FEAT_PMUv3p5 MDCR_EL2.HCCD stops the
//! cycle counter at EL2: a counter counts the guest's own execution, not
//! el2 handling its exits. (On a PMUv3p1..p4 CPU a guest that sets
//! PMCCFILTR_EL0.NSH and clears PMCR_EL0.DP can make its cycle counter run
//! through el2's handling of its own exits: what its virtual counter
//! shows it anyway.)
//!
//! # Lazy switch
//!
//! A vCPU's PMU registers are in memory ([`PmuState::registers`]) or in
//! the CPU ([`PmuState::in_cpu`]). In memory, every PMU access traps
//! (MDCR_EL2.TPM, TPMCR) and the CPU's counters are stopped, disabled and
//! their interrupt off, so nothing counts for a vCPU that is not running.
//! The first trapped access loads the vCPU's registers, stops the trap and
//! runs the instruction again ([`PmuTrap::LoadAndRetry`], KVM's lazy
//! FP/SIMD idea, here for the PMU): nothing is emulated. At put the
//! registers are saved and the counters stopped; the vCPU loads them
//! again at its next load only while it counts (PMCR_EL0.E with a counter
//! enabled) or lets its EL0 use the PMU (PMUSERENR_EL0), the states in
//! which a trap would be too late. So a counter counts only while its vCPU
//! runs, and a vCPU that does not use the PMU pays nothing at load or put.
//! Linux resets the PMU of every CPU it brings up: one load and one save
//! per vCPU, then nothing until `perf` uses it.
//!
//! # The overflow interrupt
//!
//! The CPU's PMU interrupt is a level-sensitive PPI taken at EL2. When it
//! fires for the running vCPU, el2 disables it in the physical GIC and
//! raises the vCPU's virtual line ([`PmuState::line`]); the line is
//! sampled again from the counters ([`overflow_line`]) when the guest
//! ends its handling (the EOI maintenance interrupt of the level-sensitive
//! virtual interrupt) and at put, and the physical interrupt enabled again
//! once it is low.

use aarch64_cpu::registers::ID_AA64DFR0_EL1;
use boot::pmu::{CYCLE_COUNTER, MAX_EVENT_COUNTERS, PMCR, PMUSERENR};
use tock_registers::LocalRegisterCopy;
use tock_registers::register_bitfields;

register_bitfields! {u64,
    /// ID_DFR0_EL1, the AArch32 debug features.
    pub ID_DFR0 [
        /// The PMU's version, AArch32 encoding.
        PERFMON OFFSET(24) NUMBITS(4) [],
    ],
}

/// ID_AA64DFR0_EL1.PMUVer of FEAT_PMUv3p1 (0b0100): the first with
/// MDCR_EL2.HPMD, so the least el2 offers.
pub const PMU_VER_P1: u64 = 0b0100;
/// ...p5 (0b0110): MDCR_EL2.HCCD, 64-bit event counters.
pub const PMU_VER_P5: u64 = 0b0110;
/// The highest PMU version a VM is told about: FEAT_PMUv3p7 (0b0111).
/// From v3p8 a PMU has registers el2 does not switch (PMICNTR_EL0,
/// PMICFILTR_EL0).
pub const PMU_VER_MAX: u64 = 0b0111;
/// PMUVer 0b1111: an IMPLEMENTATION DEFINED PMU, not PMUv3.
const PMU_VER_IMPDEF: u64 = 0b1111;

/// The PMU a VM gets: the CPU's, if it has a PMUv3p1 or later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmuFeatures {
    /// Event counters: MDCR_EL2.HPMN, all the CPU has.
    pub counters: usize,
    /// ID_AA64DFR0_EL1.PMUVer the guest reads.
    pub version: u64,
}

impl PmuFeatures {
    /// The PMU offered on a CPU whose ID_AA64DFR0_EL1 reads `dfr0` and
    /// whose guests get `counters` event counters (MDCR_EL2.HPMN); `None`
    /// without a PMUv3p1 or later.
    pub fn from_cpu(dfr0: u64, counters: usize) -> Option<Self> {
        let hw = LocalRegisterCopy::<u64, ID_AA64DFR0_EL1::Register>::new(dfr0)
            .read(ID_AA64DFR0_EL1::PMUVer);
        (PMU_VER_P1..PMU_VER_IMPDEF).contains(&hw).then_some(Self {
            counters: counters.min(MAX_EVENT_COUNTERS),
            version: hw.min(PMU_VER_MAX),
        })
    }

    /// The CPU has FEAT_PMUv3p5 (MDCR_EL2.HCCD: no cycle counting at EL2).
    pub fn has_hccd(dfr0: u64) -> bool {
        let hw = LocalRegisterCopy::<u64, ID_AA64DFR0_EL1::Register>::new(dfr0)
            .read(ID_AA64DFR0_EL1::PMUVer);
        (PMU_VER_P5..PMU_VER_IMPDEF).contains(&hw)
    }

    /// The guest's ID_AA64DFR0_EL1.PMUVer field, in place.
    pub fn guest_dfr0_field(pmu: Option<Self>) -> u64 {
        ID_AA64DFR0_EL1::PMUVer
            .val(pmu.map_or(0, |p| p.version))
            .value
    }

    /// The guest's ID_DFR0_EL1 (AArch32) from the CPU's `hw`: PerfMon as
    /// the CPU has it when the PMU is offered (its AArch32 encoding of the
    /// same versions, capped alike), else 0.
    pub fn guest_id_dfr0(pmu: Option<Self>, hw: u64) -> u64 {
        let hw_field = ID_DFR0::PERFMON.read(hw);
        let kept = match pmu {
            Some(_) if hw_field != PMU_VER_IMPDEF => hw_field.min(PMU_VER_MAX),
            _ => 0,
        };
        (hw & !(ID_DFR0::PERFMON.mask << ID_DFR0::PERFMON.shift)) | ID_DFR0::PERFMON.val(kept).value
    }
}

/// A vCPU's PMU registers while they are not in the CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmuRegisters {
    pub pmcr: u64,
    pub pmselr: u64,
    /// PMCNTENSET_EL0: enabled counters (bit 31 the cycle counter).
    pub enabled: u64,
    /// PMINTENSET_EL1: counters whose overflow interrupts.
    pub interrupts: u64,
    /// PMOVSSET_EL0: counters that overflowed.
    pub overflows: u64,
    pub pmuserenr: u64,
    pub cycles: u64,
    pub cycle_filter: u64,
    /// `PMEVCNTR<n>_EL0`.
    pub counts: [u64; MAX_EVENT_COUNTERS],
    /// `PMEVTYPER<n>_EL0`.
    pub types: [u64; MAX_EVENT_COUNTERS],
}

impl Default for PmuRegisters {
    fn default() -> Self {
        Self::reset()
    }
}

impl PmuRegisters {
    /// Every register zero: nothing enabled, counting or allowed at EL0
    /// (the architecture leaves most reset values UNKNOWN; PMCR_EL0.E,
    /// the enables and PMUSERENR_EL0 reset to 0 on a warm reset).
    pub const fn reset() -> Self {
        Self {
            pmcr: 0,
            pmselr: 0,
            enabled: 0,
            interrupts: 0,
            overflows: 0,
            pmuserenr: 0,
            cycles: 0,
            cycle_filter: 0,
            counts: [0; MAX_EVENT_COUNTERS],
            types: [0; MAX_EVENT_COUNTERS],
        }
    }

    /// A counter counts: PMCR_EL0.E and at least one counter enabled.
    pub fn counting(&self) -> bool {
        PMCR::E.is_set(self.pmcr) && self.enabled != 0
    }

    /// EL0 may use the PMU (any PMUSERENR_EL0 enable).
    pub fn el0_access(&self) -> bool {
        let enables = PMUSERENR::EN::SET.value
            | PMUSERENR::SW::SET.value
            | PMUSERENR::CR::SET.value
            | PMUSERENR::ER::SET.value;
        self.pmuserenr & enables != 0
    }
}

/// The level of the PMU overflow interrupt request, from PMCR_EL0,
/// PMINTENSET_EL1 and PMOVSSET_EL0: a counter that overflowed with its
/// interrupt enabled, while PMCR_EL0.E is set (Arm ARM D12 "Behavior on
/// overflow", pseudocode `CheckForPMUOverflow`; every counter is below
/// HPMN, so E governs them all).
pub fn overflow_line(pmcr: u64, interrupts: u64, overflows: u64) -> bool {
    PMCR::E.is_set(pmcr) && interrupts & overflows != 0
}

/// What a trapped PMU access calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PmuTrap {
    /// Load the vCPU's registers, stop trapping, and resume the guest at
    /// the same instruction.
    LoadAndRetry,
    /// The registers are in the CPU already, so this access traps for
    /// another reason (a register the PMU does not have): an undefined
    /// instruction, as on the CPU.
    Undefined,
}

/// A vCPU's PMU: its registers, where they are, and its overflow line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PmuState {
    /// Up to date while not [`Self::in_cpu`].
    pub registers: PmuRegisters,
    /// Load the registers with the vCPU.
    in_use: bool,
    /// The registers are in the CPU (loaded, TPM clear).
    in_cpu: bool,
    /// The vCPU's overflow interrupt line as its virtual GIC last saw it.
    pub line: bool,
}

impl PmuState {
    /// The registers are in the CPU.
    pub fn in_cpu(&self) -> bool {
        self.in_cpu
    }

    /// The vCPU is being loaded: whether its registers go into the CPU.
    /// `put` left `in_cpu` clear: a vCPU that does not use the PMU costs
    /// one load and one branch here.
    pub fn load(&mut self) -> bool {
        if !self.in_use {
            return false;
        }
        self.in_cpu = true;
        true
    }

    /// A PMU access trapped: what to do (the state is updated for it).
    pub fn trapped(&mut self) -> PmuTrap {
        if self.in_cpu {
            return PmuTrap::Undefined;
        }
        self.in_use = true;
        self.in_cpu = true;
        PmuTrap::LoadAndRetry
    }

    /// The vCPU, its registers in the CPU, was put and they were saved
    /// into [`Self::registers`], the CPU's counters stopped. It loads them
    /// with the vCPU again only while a counter counts or its EL0 may use
    /// the PMU; otherwise its next access traps and loads them. (Nothing
    /// to do at the put of a vCPU whose registers are not in the CPU.)
    pub fn put(&mut self) {
        self.in_use = self.registers.counting() || self.registers.el0_access();
        self.in_cpu = false;
    }

    /// The overflow line of the saved registers.
    pub fn saved_line(&self) -> bool {
        let r = &self.registers;
        overflow_line(r.pmcr, r.interrupts, r.overflows)
    }
}

/// Bit of the cycle counter in the enable, interrupt and overflow masks.
pub const CYCLE_COUNTER_BIT: u64 = 1 << CYCLE_COUNTER;

/// The PMU's EL0 and EL1 registers: PMCR_EL0 ... PMUSERENR_EL0,
/// PMOVSSET_EL0 (op1 3, CRn 9, CRm 12-14), `PMEVCNTR<n>_EL0` and
/// `PMEVTYPER<n>_EL0` (CRn 14, CRm 8-15), PMINTENSET/CLR_EL1, PMMIR_EL1
/// (op1 0, CRn 9, CRm 14, op2 1, 2, 6).
pub fn is_pmu_register(encoding: (u8, u8, u8, u8, u8)) -> bool {
    matches!(
        encoding,
        (3, 3, 9, 12..=14, _) | (3, 3, 14, 8..=15, _) | (3, 0, 9, 14, 1 | 2 | 6)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU 7.2's `-cpu max` ID_AA64DFR0_EL1 (PMUVer 6, FEAT_PMUv3p5).
    const QEMU_MAX_DFR0: u64 = 0x1030_5609;

    #[test]
    fn a_pmuv3p1_or_later_is_offered_with_every_counter() {
        let pmu = PmuFeatures::from_cpu(QEMU_MAX_DFR0, 6).expect("offered");
        assert_eq!((pmu.counters, pmu.version), (6, 6));
        assert!(PmuFeatures::has_hccd(QEMU_MAX_DFR0));
        // PMUv3 without p1 (no HPMD), none, IMPLEMENTATION DEFINED: not
        // offered.
        for pmuver in [0b0000, 0b0001, 0b1111] {
            assert_eq!(PmuFeatures::from_cpu(pmuver << 8, 6), None, "{pmuver}");
        }
        // v3p1 offered without HCCD; v3p9 shown as v3p7.
        let p1 = PmuFeatures::from_cpu(0b0100 << 8, 31).expect("v3p1");
        assert_eq!((p1.counters, p1.version), (31, 4));
        assert!(!PmuFeatures::has_hccd(0b0100 << 8));
        assert_eq!(
            PmuFeatures::from_cpu(0b1001 << 8, 6).map(|p| p.version),
            Some(PMU_VER_MAX)
        );
    }

    #[test]
    fn the_id_registers_match_what_is_offered() {
        let pmu = PmuFeatures::from_cpu(QEMU_MAX_DFR0, 6);
        assert_eq!(PmuFeatures::guest_dfr0_field(pmu), 6 << 8);
        assert_eq!(PmuFeatures::guest_dfr0_field(None), 0);
        // ID_DFR0_EL1: PerfMon kept with the PMU (other fields as they are),
        // 0 without.
        let id_dfr0 = 0x0600_0000 | 0x3003_0066;
        assert_eq!(PmuFeatures::guest_id_dfr0(pmu, id_dfr0), id_dfr0);
        assert_eq!(PmuFeatures::guest_id_dfr0(None, id_dfr0), 0x3003_0066);
        assert_eq!(
            PmuFeatures::guest_id_dfr0(pmu, 0x0900_0000),
            0x0700_0000,
            "capped at v3p7"
        );
    }

    /// What the runner does at a put: the state's `put` only for
    /// registers in the CPU (after saving them).
    fn put(s: &mut PmuState) {
        if s.in_cpu() {
            s.put();
        }
    }

    #[test]
    fn a_vcpu_that_never_touches_the_pmu_stays_out_of_the_cpu() {
        let mut s = PmuState::default();
        for _ in 0..3 {
            assert!(!s.load());
            put(&mut s);
        }
        assert!(!s.in_cpu());
    }

    #[test]
    fn the_first_access_loads_and_the_put_decides_whether_it_stays() {
        let mut s = PmuState::default();
        assert_eq!(s.trapped(), PmuTrap::LoadAndRetry);
        assert!(s.in_cpu());
        // Trapping again with the registers loaded is not the PMU's.
        assert_eq!(s.trapped(), PmuTrap::Undefined);
        // Linux's reset: nothing enabled. Put: not loaded next time.
        put(&mut s);
        assert!(!s.load());
        // perf enables the cycle counter: loaded with the vCPU from then on.
        assert_eq!(s.trapped(), PmuTrap::LoadAndRetry);
        s.registers.pmcr = PMCR::E::SET.value;
        s.registers.enabled = CYCLE_COUNTER_BIT;
        put(&mut s);
        assert!(s.load());
        put(&mut s);
        assert!(s.load());
        // Enables without PMCR_EL0.E count nothing: dropped at that put.
        s.registers.pmcr = 0;
        put(&mut s);
        assert!(!s.load());
        put(&mut s);
        assert!(!s.load(), "a put of a vCPU not in the CPU changes nothing");
        // EL0 access keeps it loaded (an EL0 read must not trap to EL1).
        assert_eq!(s.trapped(), PmuTrap::LoadAndRetry);
        s.registers.pmuserenr = PMUSERENR::CR::SET.value;
        put(&mut s);
        assert!(s.load());
    }

    #[test]
    fn the_overflow_line_needs_enable_interrupt_and_overflow() {
        let e = PMCR::E::SET.value;
        assert!(overflow_line(e, 0b10, 0b11));
        assert!(overflow_line(e, CYCLE_COUNTER_BIT, CYCLE_COUNTER_BIT));
        assert!(!overflow_line(0, 0b10, 0b10), "PMCR_EL0.E clear");
        assert!(!overflow_line(e, 0b01, 0b10), "other counter's interrupt");
        assert!(!overflow_line(e, 0b10, 0), "no overflow");
        let mut s = PmuState::default();
        s.registers.pmcr = e;
        s.registers.interrupts = 0b100;
        s.registers.overflows = 0b100;
        assert!(s.saved_line());
    }

    #[test]
    fn pmu_registers_by_encoding() {
        for pmu in [
            (3, 3, 9, 12, 0),  // PMCR_EL0
            (3, 3, 9, 12, 4),  // PMSWINC_EL0
            (3, 3, 9, 13, 0),  // PMCCNTR_EL0
            (3, 3, 9, 14, 0),  // PMUSERENR_EL0
            (3, 3, 9, 14, 3),  // PMOVSSET_EL0
            (3, 3, 14, 8, 0),  // PMEVCNTR0_EL0
            (3, 3, 14, 15, 6), // PMEVTYPER30_EL0
            (3, 3, 14, 15, 7), // PMCCFILTR_EL0
            (3, 0, 9, 14, 1),  // PMINTENSET_EL1
            (3, 0, 9, 14, 6),  // PMMIR_EL1
        ] {
            assert!(is_pmu_register(pmu), "{pmu:?}");
        }
        for other in [(3, 0, 9, 14, 0), (3, 3, 13, 0, 2), (2, 0, 0, 2, 2)] {
            assert!(!is_pmu_register(other), "{other:?}");
        }
    }
}
