//! The `pmu-check` guest's register values, judges and console lines,
//! shared with `cargo xtask`, which judges boots by those lines.
//!
//! pmu-check proves a guest's PMUv3 (Arm ARM D12 "The Performance Monitors
//! Extension") on each of two vCPUs sharing a pCPU: the registers, the
//! cycle counter (which must count only while its vCPU runs), software
//! increments, the overflow interrupt through the GIC, instructions
//! retired, and chained counters where the CPU has them. Each check
//! prints `pmu-check: vcpu N: <label>: ok (<detail>)` or `pmu-check: vcpu
//! N: <label>: FAILED: <why>`, or for a feature the CPU lacks `pmu-check:
//! vcpu N: <label>: not implemented (<why>)`; a vCPU first prints its
//! [`FeaturesLine`]. A run ends with [`ALL_PASSED`], or a `GUEST FATAL`
//! line counting the failures.

use core::fmt;

use boot::pmu::PMEVTYPER;
/// The common event numbers the checks use.
pub use boot::pmu::event;

/// Every line pmu-check prints starts with this.
pub const PREFIX: &str = "pmu-check:";

/// The last line of a successful run.
pub const ALL_PASSED: &str = "pmu-check: all checks passed";

/// Most vCPUs the guest runs its checks on.
pub const MAX_VCPUS: usize = 2;

/// What a check line says after the label when the CPU lacks the feature.
pub const NOT_IMPLEMENTED: &str = "not implemented";

/// The event counters the checks use: software increments, the overflow,
/// instructions retired, and a chained pair (even, odd).
pub const SW_INCR_COUNTER: usize = 0;
pub const OVERFLOW_COUNTER: usize = 1;
pub const INSTRUCTION_COUNTER: usize = 2;
pub const CHAIN_LOW_COUNTER: usize = 4;
pub const CHAIN_HIGH_COUNTER: usize = 5;

/// Fewest event counters the checks need.
pub const MIN_COUNTERS: usize = CHAIN_HIGH_COUNTER + 1;

/// How many NOPs the instruction check counts.
pub const NOPS: u64 = 1000;

/// A 32-bit event counter's value one increment before it overflows.
pub const ONE_BEFORE_OVERFLOW: u64 = 0xffff_ffff;

/// How far the cycle count over a window in which the vCPU was
/// descheduled may be from the calibrated rate times the time it ran, as
/// a fraction of the window.
pub const CYCLE_TOLERANCE: f64 = 0.1;

/// Least share of the window the vCPU must have been descheduled for the
/// cycle check to mean anything.
pub const MIN_STOLEN_SHARE: f64 = 0.3;

/// `PMEVTYPER<n>_EL0` for `event` counted at EL1 and EL0 only (NSH clear:
/// not at EL2, which el2 prohibits anyway).
pub fn event_type(event: u64) -> u64 {
    PMEVTYPER::EVTCOUNT.val(event).value
}

/// Whether PMCEID0_EL0 `pmceid0` says the CPU counts common event `event`
/// (events 0x00..0x20 are bits 0..31; Arm ARM D19.5 "PMCEID0_EL0").
pub fn implements(pmceid0: u64, event: u64) -> bool {
    event < 32 && pmceid0 & (1 << event) != 0
}

/// One vCPU's check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    /// PMCR_EL0.N, PMSELR_EL0 with PMXEVTYPER_EL0 (an event counter's and,
    /// with 31, PMCCFILTR_EL0), PMUSERENR_EL0 and the counters read back
    /// after the other vCPU ran, PMCR_EL0.C and P resets.
    Registers,
    /// The cycle counter advances, and only while its vCPU runs.
    CycleCounter,
    /// Software increments (PMSWINC_EL0) count exactly, across a switch.
    SoftwareIncrement,
    /// A counter's overflow raises the PMU interrupt (INTID 23) once, and
    /// no more once the overflow is cleared.
    Overflow,
    /// Instructions retired count exactly (QEMU: only under -icount).
    Instructions,
    /// A chained pair counts past 32 bits (where the CPU has CHAIN).
    Chain,
}

impl Label {
    pub const ALL: [Self; 6] = [
        Self::Registers,
        Self::CycleCounter,
        Self::SoftwareIncrement,
        Self::Overflow,
        Self::Instructions,
        Self::Chain,
    ];

    /// The event a check needs the CPU to implement, if any.
    pub const fn event(self) -> Option<u64> {
        match self {
            Self::Instructions => Some(event::INST_RETIRED),
            Self::Chain => Some(event::CHAIN),
            Self::SoftwareIncrement | Self::Overflow => Some(event::SW_INCR),
            Self::Registers | Self::CycleCounter => None,
        }
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Registers => "registers",
            Self::CycleCounter => "cycle counter",
            Self::SoftwareIncrement => "software increment",
            Self::Overflow => "overflow interrupt",
            Self::Instructions => "instructions retired",
            Self::Chain => "chain",
        })
    }
}

/// What a vCPU found, printed before its checks: `pmu-check: vcpu 0:
/// PMUv3 version 6, 6 event counters, PMCEID0 0x6000001, interrupt INTID
/// 23`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeaturesLine {
    pub vcpu: usize,
    /// ID_AA64DFR0_EL1.PMUVer.
    pub version: u64,
    /// PMCR_EL0.N.
    pub counters: usize,
    pub pmceid0: u64,
    /// The DT's PMU interrupt.
    pub intid: u32,
}

impl fmt::Display for FeaturesLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX} vcpu {}: PMUv3 version {}, {} event counters, PMCEID0 {:#x}, interrupt \
             INTID {}",
            self.vcpu, self.version, self.counters, self.pmceid0, self.intid
        )
    }
}

impl FeaturesLine {
    /// Parses a [`FeaturesLine`] anywhere in `line`.
    pub fn parse(line: &str) -> Option<Self> {
        let rest = &line[line.find(PREFIX)? + PREFIX.len()..];
        let mut words = rest.split_whitespace();
        let mut next = || words.next();
        let (Some("vcpu"), Some(vcpu), Some("PMUv3"), Some("version")) =
            (next(), next(), next(), next())
        else {
            return None;
        };
        let version = next()?.strip_suffix(',')?.parse().ok()?;
        let counters = next()?.parse().ok()?;
        let (Some("event"), Some("counters,"), Some("PMCEID0")) = (next(), next(), next()) else {
            return None;
        };
        let pmceid0 =
            u64::from_str_radix(next()?.strip_suffix(',')?.strip_prefix("0x")?, 16).ok()?;
        let (Some("interrupt"), Some("INTID")) = (next(), next()) else {
            return None;
        };
        let intid = next()?.parse().ok()?;
        next().is_none().then_some(Self {
            vcpu: vcpu.strip_suffix(':')?.parse().ok()?,
            version,
            counters,
            pmceid0,
            intid,
        })
    }
}

/// What the cycle check prints before its verdict, when it could judge
/// the descheduled time: `pmu-check: vcpu 0: cycle window: ...`.
pub const CYCLE_WINDOW: &str = "cycle window:";

/// Judges the cycle counter over a window of `window_ns` in which the
/// vCPU was descheduled for `stolen_ns` (its PV stolen time) and counted
/// `cycles`, with `per_ns` cycles per nanosecond calibrated while it ran
/// alone: it must have counted the time it ran, not the time it waited,
/// within [`CYCLE_TOLERANCE`] of the window.
pub fn judge_cycles(
    cycles: u64,
    window_ns: u64,
    stolen_ns: u64,
    per_ns: f64,
) -> Result<(), &'static str> {
    if window_ns == 0 || per_ns <= 0.0 {
        return Err("no time passed, or the counter did not advance while calibrating");
    }
    let window = window_ns as f64;
    let stolen = stolen_ns.min(window_ns) as f64;
    if stolen < MIN_STOLEN_SHARE * window {
        return Err("the vCPU was not descheduled for long enough to tell");
    }
    let ran_cycles = per_ns * (window - stolen);
    let slack = CYCLE_TOLERANCE * per_ns * window;
    let counted = cycles as f64;
    if counted > ran_cycles + slack {
        return Err("the cycle counter counted while its vCPU was descheduled");
    }
    if counted < ran_cycles - slack {
        return Err("the cycle counter counted less than the time its vCPU ran");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_types_and_pmceid() {
        assert_eq!(event_type(event::INST_RETIRED), 0x08);
        assert_eq!(event_type(event::CHAIN), 0x1e);
        // QEMU 7.2 under -icount: SW_INCR, INST_RETIRED, CPU_CYCLES; no CHAIN.
        let qemu = 1 << 0 | 1 << 8 | 1 << 17;
        assert!(implements(qemu, event::SW_INCR));
        assert!(implements(qemu, event::INST_RETIRED));
        assert!(!implements(qemu, event::CHAIN));
        assert!(!implements(u64::MAX, 40), "not in PMCEID0");
        assert_eq!(Label::Chain.event(), Some(event::CHAIN));
    }

    #[test]
    fn the_features_line_round_trips() {
        let line = FeaturesLine {
            vcpu: 1,
            version: 6,
            counters: 6,
            pmceid0: 0x2_0101,
            intid: 23,
        };
        assert_eq!(FeaturesLine::parse(&format!("[vm0] {line}")), Some(line));
        assert_eq!(
            FeaturesLine::parse("pmu-check: vcpu 1: registers: ok"),
            None
        );
        assert_eq!(Label::Overflow.to_string(), "overflow interrupt");
    }

    #[test]
    fn cycles_count_only_while_the_vcpu_runs() {
        // A 8 ms window, 4 ms of it descheduled, 1 cycle per ns.
        assert_eq!(judge_cycles(4_000_000, 8_000_000, 4_000_000, 1.0), Ok(()));
        assert_eq!(judge_cycles(4_500_000, 8_000_000, 4_000_000, 1.0), Ok(()));
        // Counting through the deschedule, or barely at all.
        assert!(judge_cycles(8_000_000, 8_000_000, 4_000_000, 1.0).is_err());
        assert!(judge_cycles(1_000_000, 8_000_000, 4_000_000, 1.0).is_err());
        // Not descheduled: nothing to tell.
        assert!(judge_cycles(8_000_000, 8_000_000, 0, 1.0).is_err());
        assert!(judge_cycles(1, 0, 0, 1.0).is_err());
    }
}
