//! A vCPU's PMU registers in and out of this CPU, when `el2::trap::pmu`
//! says so, and the PMU's partition between the guests and EL2. It
//! decides nothing.
//!
//! While no vCPU's PMU is loaded a CPU's PMU counts nothing: PMCR_EL0.E
//! clear, no counter enabled, no overflow or interrupt enabled, EL0 access
//! off, and the guests' accesses trapped (MDCR_EL2.TPM, TPMCR).

use aarch64_cpu::registers::{ID_AA64DFR0_EL1, MDCR_EL2};
use boot::pmu::{Event, PMCR, Register, read, read_event, write, write_event};
use el2::trap::pmu::{PmuFeatures, PmuRegisters};
use tock_registers::fields::FieldValue;
use tock_registers::interfaces::{ReadWriteable, Readable};

/// Every counter's bit in the set/clear registers.
const ALL_COUNTERS: u64 = u64::MAX;

/// The PMU fields of MDCR_EL2 every CPU runs guests with, given its
/// ID_AA64DFR0_EL1 `dfr0`: with a PMU to offer (`PmuFeatures::from_cpu`),
/// every event counter is the guests' (HPMN = PMCR_EL0.N as EL2 reads it),
/// none counts at EL2 (HPMD; HCCD for the cycle counter with
/// FEAT_PMUv3p5), the EL2 range's counters are off (HPME clear); without
/// one, HPMN as the firmware left it. The PMU registers trap either way
/// (TPM, TPMCR) until a vCPU loads its own.
pub fn mdcr_fields(dfr0: u64) -> FieldValue<u64, MDCR_EL2::Register> {
    let trapped = MDCR_EL2::TPM::SET + MDCR_EL2::TPMCR::SET;
    if PmuFeatures::from_cpu(dfr0, 0).is_none() {
        return trapped + MDCR_EL2::HPMN.val(MDCR_EL2.read(MDCR_EL2::HPMN));
    }
    let counters = PMCR::N.read(read(Register::Pmcr));
    let mut fields = trapped + MDCR_EL2::HPMN.val(counters) + MDCR_EL2::HPMD::SET;
    if PmuFeatures::has_hccd(dfr0) {
        fields += MDCR_EL2::HCCD::SET;
    }
    fields
}

/// Stops and clears this CPU's PMU before it runs guests (firmware may
/// have left it counting), if it has one to offer.
pub fn init_cpu() {
    if PmuFeatures::from_cpu(ID_AA64DFR0_EL1.get(), 0).is_some() {
        write(Register::Pmcr, 0);
        quiesce();
    }
}

/// No counter enabled, no interrupt, no overflow, no EL0 access.
fn quiesce() {
    write(Register::Pmcntenclr, ALL_COUNTERS);
    write(Register::Pmintenclr, ALL_COUNTERS);
    write(Register::Pmovsclr, ALL_COUNTERS);
    write(Register::Pmuserenr, 0);
}

/// The guests' event counters (MDCR_EL2.HPMN).
pub fn counters() -> usize {
    MDCR_EL2.read(MDCR_EL2::HPMN) as usize
}

/// Loads `registers`, counters stopped until PMCR_EL0 is written last,
/// and stops trapping the guest's PMU accesses. EL2 does not count
/// (MDCR_EL2.HPMD, HCCD), so the counters start with the guest.
pub fn load(registers: &PmuRegisters, features: PmuFeatures) {
    let stopped = registers.pmcr & !PMCR::E::SET.value;
    write(Register::Pmcr, stopped);
    for n in 0..features.counters {
        write_event(Event::Type, n, registers.types[n]);
        write_event(Event::Counter, n, registers.counts[n]);
    }
    write(Register::Pmccfiltr, registers.cycle_filter);
    write(Register::Pmccntr, registers.cycles);
    write(Register::Pmcntenclr, ALL_COUNTERS);
    write(Register::Pmcntenset, registers.enabled);
    write(Register::Pmintenclr, ALL_COUNTERS);
    write(Register::Pmintenset, registers.interrupts);
    write(Register::Pmovsclr, ALL_COUNTERS);
    write(Register::Pmovsset, registers.overflows);
    write(Register::Pmselr, registers.pmselr);
    write(Register::Pmuserenr, registers.pmuserenr);
    // PMCR_EL0.P and C read as zero, so this resets nothing.
    write(Register::Pmcr, registers.pmcr);
    MDCR_EL2.modify(MDCR_EL2::TPM::CLEAR + MDCR_EL2::TPMCR::CLEAR);
}

/// Stops the counters, saves them into `registers`, leaves the PMU
/// quiet and traps it again.
pub fn save(registers: &mut PmuRegisters, features: PmuFeatures) {
    let pmcr = read(Register::Pmcr);
    write(Register::Pmcr, pmcr & !PMCR::E::SET.value);
    registers.pmcr = pmcr;
    registers.enabled = read(Register::Pmcntenset);
    registers.interrupts = read(Register::Pmintenset);
    registers.overflows = read(Register::Pmovsset);
    registers.pmselr = read(Register::Pmselr);
    registers.pmuserenr = read(Register::Pmuserenr);
    registers.cycles = read(Register::Pmccntr);
    registers.cycle_filter = read(Register::Pmccfiltr);
    for n in 0..features.counters {
        registers.types[n] = read_event(Event::Type, n);
        registers.counts[n] = read_event(Event::Counter, n);
    }
    quiesce();
    MDCR_EL2.modify(MDCR_EL2::TPM::SET + MDCR_EL2::TPMCR::SET);
}

/// PMCR_EL0, PMINTENSET_EL1 and PMOVSSET_EL0 of the loaded PMU.
pub fn overflow_registers() -> (u64, u64, u64) {
    (
        read(Register::Pmcr),
        read(Register::Pmintenset),
        read(Register::Pmovsset),
    )
}
