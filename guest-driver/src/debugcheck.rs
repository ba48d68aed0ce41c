//! The `debug-check` guest's register values, judges and console lines,
//! shared with `cargo xtask`, which judges boots by those lines.
//!
//! debug-check proves a guest's self-hosted debug (Arm ARM D2 "AArch64
//! Self-hosted Debug") on every vCPU at once: each sets every hardware
//! breakpoint and every watchpoint in turn and single-steps instructions
//! (one the CPU runs, and ones the hypervisor completes for it), each at
//! addresses of its own, and checks what it set only after the other vCPU
//! ran in between (so, on one pCPU, after being descheduled). Each check
//! prints `debug-check: vcpu N: <label>: ok (<detail>)` or `debug-check:
//! vcpu N: <label>: FAILED: <why>`; a vCPU first prints its
//! [`Features`] line. A run ends with [`ALL_PASSED`], or a `GUEST FATAL`
//! line counting the failures.

use core::fmt;

use aarch64_cpu::registers::ESR_EL1;
use tock_registers::LocalRegisterCopy;
use tock_registers::register_bitfields;

use crate::fault::Caught;

/// Every line debug-check prints starts with this.
pub const PREFIX: &str = "debug-check:";

/// The last line of a successful run.
pub const ALL_PASSED: &str = "debug-check: all checks passed";

/// Most breakpoints, and most watchpoints, a CPU can have
/// (ID_AA64DFR0_EL1.BRPs and WRPs are "number minus one", 4 bits).
pub const MAX_COMPARATORS: usize = boot::debug::COMPARATORS;

/// Most vCPUs the guest runs its checks on: each has its own breakpoint
/// addresses and watched words.
pub const MAX_VCPUS: usize = 2;

register_bitfields! {u64,
    /// DBGBCR<n>_EL1 (Arm ARM D19.3).
    pub DBGBCR [
        /// Breakpoint type: 0b0000 unlinked instruction address match.
        BT OFFSET(20) NUMBITS(4) [],
        /// Higher mode control: 0 leaves EL2 out.
        HMC OFFSET(13) NUMBITS(1) [],
        /// Security state control.
        SSC OFFSET(14) NUMBITS(2) [],
        /// Byte address select: 0b1111 matches the whole A64 instruction.
        BAS OFFSET(5) NUMBITS(4) [],
        /// Privilege mode control: 0b01 EL1.
        PMC OFFSET(1) NUMBITS(2) [
            El1 = 0b01,
        ],
        /// Enable.
        E OFFSET(0) NUMBITS(1) [],
    ],
    /// DBGWCR<n>_EL1 (Arm ARM D19.3).
    pub DBGWCR [
        /// Address mask: 0 matches the byte address select alone.
        MASK OFFSET(24) NUMBITS(5) [],
        /// Higher mode control.
        HMC OFFSET(13) NUMBITS(1) [],
        /// Byte address select: 0xff watches all eight bytes of the
        /// doubleword at DBGWVR<n>_EL1.
        BAS OFFSET(5) NUMBITS(8) [],
        /// Load/store control: which accesses match.
        LSC OFFSET(3) NUMBITS(2) [
            Load = 0b01,
            Store = 0b10,
            Both = 0b11,
        ],
        /// Privileged access control: 0b01 EL1.
        PAC OFFSET(1) NUMBITS(2) [
            El1 = 0b01,
        ],
        /// Enable.
        E OFFSET(0) NUMBITS(1) [],
    ],
    /// ISS of a watchpoint exception (Arm ARM D24.2 "ISS encoding for an
    /// exception from a Watchpoint exception").
    WATCHPOINT_ISS [
        /// The access was a cache maintenance instruction.
        CM OFFSET(8) NUMBITS(1) [],
        /// The access was a write.
        WNR OFFSET(6) NUMBITS(1) [],
        /// Data fault status code: 0b100010, a debug exception.
        DFSC OFFSET(0) NUMBITS(6) [],
    ],
    /// ISS of a software step exception (Arm ARM D24.2 "ISS encoding for
    /// an exception from a Software Step exception").
    STEP_ISS [
        /// EX is valid.
        ISV OFFSET(24) NUMBITS(1) [],
        /// The stepped instruction was a load-exclusive.
        EX OFFSET(6) NUMBITS(1) [],
        /// Instruction fault status code: 0b100010.
        IFSC OFFSET(0) NUMBITS(6) [],
    ],
}

/// The fault status code of every debug exception: 0b100010.
pub const DEBUG_EXCEPTION_FSC: u64 = 0b10_0010;

/// `DBGBCR<n>_EL1` for an unlinked address breakpoint on the A64
/// instruction at `DBGBVR<n>_EL1`, at EL1.
pub fn breakpoint_control() -> u64 {
    (DBGBCR::BT.val(0) + DBGBCR::BAS.val(0b1111) + DBGBCR::PMC::El1 + DBGBCR::E::SET).value
}

/// Which accesses a watchpoint watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watch {
    Loads,
    Stores,
    Both,
}

impl Watch {
    /// Watchpoint `n` watches these: loads, stores and both in turn, so
    /// that each kind is checked on several watchpoints.
    pub const fn for_watchpoint(n: usize) -> Self {
        match n % 3 {
            0 => Self::Loads,
            1 => Self::Stores,
            _ => Self::Both,
        }
    }

    pub const fn loads(self) -> bool {
        matches!(self, Self::Loads | Self::Both)
    }

    pub const fn stores(self) -> bool {
        matches!(self, Self::Stores | Self::Both)
    }
}

impl fmt::Display for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Loads => "loads",
            Self::Stores => "stores",
            Self::Both => "loads and stores",
        })
    }
}

/// `DBGWCR<n>_EL1` for a watchpoint on the doubleword at `DBGWVR<n>_EL1`,
/// at EL1, for `watch`.
pub fn watchpoint_control(watch: Watch) -> u64 {
    let lsc = match watch {
        Watch::Loads => DBGWCR::LSC::Load,
        Watch::Stores => DBGWCR::LSC::Store,
        Watch::Both => DBGWCR::LSC::Both,
    };
    (DBGWCR::BAS.val(0xff) + lsc + DBGWCR::PAC::El1 + DBGWCR::E::SET).value
}

/// The instructions the step check steps, one at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// `add`: the CPU runs it.
    Plain,
    /// `mrs` of ID_AA64DFR0_EL1, which traps to the hypervisor
    /// (HCR_EL2.TID3) and is completed by it.
    SystemRegister,
    /// A load from the GIC distributor, emulated by the hypervisor.
    Mmio,
    /// `hvc #0` (SMCCC_VERSION), answered by the hypervisor.
    Hypercall,
}

impl StepKind {
    pub const ALL: [Self; 4] = [
        Self::Plain,
        Self::SystemRegister,
        Self::Mmio,
        Self::Hypercall,
    ];
}

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Plain => "add",
            Self::SystemRegister => "mrs id_aa64dfr0_el1",
            Self::Mmio => "mmio load",
            Self::Hypercall => "hvc",
        })
    }
}

/// One check of one vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    /// Breakpoint n: read back after a deschedule, hit once at its own
    /// address with the right syndrome, not hit in the other vCPU's code,
    /// silent once disabled.
    Breakpoint(usize),
    /// Watchpoint n: likewise, for loads and stores of its own word.
    Watchpoint(usize),
    /// One instruction single-stepped.
    Step(StepKind),
    /// The OS lock: a breakpoint does not fire while it is locked, and
    /// does once it is unlocked again.
    OsLock,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Breakpoint(n) => write!(f, "breakpoint {n}"),
            Self::Watchpoint(n) => write!(f, "watchpoint {n}"),
            Self::Step(kind) => write!(f, "step {kind}"),
            Self::OsLock => write!(f, "os lock"),
        }
    }
}

impl Label {
    /// Every check of a CPU with `features`, in the order a vCPU runs them.
    pub fn all(features: Features) -> impl Iterator<Item = Label> {
        (0..features.breakpoints)
            .map(Label::Breakpoint)
            .chain((0..features.watchpoints).map(Label::Watchpoint))
            .chain(StepKind::ALL.into_iter().map(Label::Step))
            .chain(core::iter::once(Label::OsLock))
    }
}

/// What a vCPU found in ID_AA64DFR0_EL1, printed before its checks:
/// `debug-check: vcpu 0: 6 breakpoints, 4 watchpoints, debug version 9`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    pub breakpoints: usize,
    pub watchpoints: usize,
    /// ID_AA64DFR0_EL1.DebugVer.
    pub version: u64,
}

impl Features {
    /// From the guest's ID_AA64DFR0_EL1.
    pub fn from_dfr0(dfr0: u64) -> Self {
        use aarch64_cpu::registers::ID_AA64DFR0_EL1 as Dfr0;
        let dfr0 = LocalRegisterCopy::<u64, Dfr0::Register>::new(dfr0);
        Self {
            breakpoints: dfr0.read(Dfr0::BRPs) as usize + 1,
            watchpoints: dfr0.read(Dfr0::WRPs) as usize + 1,
            version: dfr0.read(Dfr0::DebugVer),
        }
    }
}

/// A vCPU's [`Features`] line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeaturesLine {
    pub vcpu: usize,
    pub features: Features,
}

impl fmt::Display for FeaturesLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Features {
            breakpoints,
            watchpoints,
            version,
        } = self.features;
        write!(
            f,
            "{PREFIX} vcpu {}: {breakpoints} breakpoints, {watchpoints} watchpoints, debug \
             version {version}",
            self.vcpu
        )
    }
}

impl FeaturesLine {
    /// Parses a [`FeaturesLine`] anywhere in `line`.
    pub fn parse(line: &str) -> Option<Self> {
        let rest = &line[line.find(PREFIX)? + PREFIX.len()..];
        let [
            "vcpu",
            vcpu,
            breakpoints,
            "breakpoints,",
            watchpoints,
            "watchpoints,",
            "debug",
            "version",
            version,
        ] = words(rest)?
        else {
            return None;
        };
        Some(Self {
            vcpu: vcpu.strip_suffix(':')?.parse().ok()?,
            features: Features {
                breakpoints: breakpoints.parse().ok()?,
                watchpoints: watchpoints.parse().ok()?,
                version: version.parse().ok()?,
            },
        })
    }
}

/// `text`'s whitespace-separated words, if there are exactly `N`.
fn words<const N: usize>(text: &str) -> Option<[&str; N]> {
    let mut words = [""; N];
    let mut iter = text.split_whitespace();
    for word in &mut words {
        *word = iter.next()?;
    }
    iter.next().is_none().then_some(words)
}

/// How a check went: passed, or why it failed.
pub type Verdict = Result<(), &'static str>;

fn syndrome(caught: &Caught) -> LocalRegisterCopy<u64, ESR_EL1::Register> {
    LocalRegisterCopy::new(caught.esr)
}

/// Judges what calling the breakpointed instruction at `address` raised:
/// exactly a breakpoint exception from the current EL (EC 0x31) with IFSC
/// "debug exception", at `address` (ELR_EL1).
pub fn judge_breakpoint(caught: Option<Caught>, address: u64) -> Verdict {
    let caught = caught.ok_or("the breakpoint did not fire")?;
    let esr = syndrome(&caught);
    if esr.read_as_enum(ESR_EL1::EC) != Some(ESR_EL1::EC::Value::BreakpointCurrentEL) {
        return Err("not a breakpoint exception from EL1 (EC 0x31)");
    }
    if esr.read(ESR_EL1::ISS) != DEBUG_EXCEPTION_FSC {
        return Err("ISS is not IFSC 0b100010 alone");
    }
    if caught.elr != address {
        return Err("ELR_EL1 is not the breakpointed instruction");
    }
    Ok(())
}

/// Judges what an access by the instruction at `pc` to the watched
/// doubleword at `address` raised, `write` for a store, which `watched`
/// says must (or must not) fire: a watchpoint exception from the current
/// EL (EC 0x35), WnR as the access, CM clear, DFSC "debug exception",
/// FAR_EL1 the address and ELR_EL1 the instruction; or nothing.
pub fn judge_watchpoint(
    caught: Option<Caught>,
    address: u64,
    pc: u64,
    write: bool,
    watched: bool,
) -> Verdict {
    let Some(caught) = caught else {
        return if watched {
            Err("the watchpoint did not fire")
        } else {
            Ok(())
        };
    };
    if !watched {
        return Err("an access the watchpoint does not watch raised an exception");
    }
    let esr = syndrome(&caught);
    if esr.read_as_enum(ESR_EL1::EC) != Some(ESR_EL1::EC::Value::WatchpointCurrentEL) {
        return Err("not a watchpoint exception from EL1 (EC 0x35)");
    }
    let iss = LocalRegisterCopy::<u64, WATCHPOINT_ISS::Register>::new(esr.read(ESR_EL1::ISS));
    if iss.read(WATCHPOINT_ISS::DFSC) != DEBUG_EXCEPTION_FSC {
        return Err("DFSC is not 0b100010");
    }
    if iss.is_set(WATCHPOINT_ISS::WNR) != write {
        return Err("WnR does not match the access");
    }
    if iss.is_set(WATCHPOINT_ISS::CM) {
        return Err("CM set for a load or store");
    }
    if caught.far != address {
        return Err("FAR_EL1 is not the watched address");
    }
    if caught.elr != pc {
        return Err("ELR_EL1 is not the accessing instruction");
    }
    Ok(())
}

/// Judges the exception after stepping one instruction that does not end
/// at `next`: a software step exception from the current EL (EC 0x33),
/// IFSC "debug exception", with ELR_EL1 = `next`, the instruction after
/// it. ISV says whether EX is valid: set when the CPU stepped the
/// instruction itself (then EX must be clear: not a load-exclusive),
/// clear when the step ended in the active-pending state, as after an
/// instruction the hypervisor completed or an HVC (Arm ARM D2 "Software
/// Step exceptions", the syndrome).
pub fn judge_step(caught: Option<Caught>, next: u64) -> Verdict {
    let caught = caught.ok_or("no software step exception")?;
    let esr = syndrome(&caught);
    if esr.read_as_enum(ESR_EL1::EC) != Some(ESR_EL1::EC::Value::SoftwareStepCurrentEL) {
        return Err("not a software step exception from EL1 (EC 0x33)");
    }
    let iss = LocalRegisterCopy::<u64, STEP_ISS::Register>::new(esr.read(ESR_EL1::ISS));
    if iss.is_set(STEP_ISS::ISV) && iss.is_set(STEP_ISS::EX) {
        return Err("ISS: EX set, but no load-exclusive was stepped");
    }
    if iss.read(STEP_ISS::IFSC) != DEBUG_EXCEPTION_FSC {
        return Err("IFSC is not 0b100010");
    }
    if caught.elr != next {
        return Err("ELR_EL1 is not the instruction after the stepped one");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EC_SHIFT: u64 = 26;
    const IL: u64 = 1 << 25;

    #[test]
    fn register_values_follow_the_arm_arm() {
        // E, PMC 0b01, BAS 0b1111.
        assert_eq!(breakpoint_control(), 0x1e3);
        // E, PAC 0b01, LSC, BAS 0xff.
        assert_eq!(watchpoint_control(Watch::Loads), 0x1feb);
        assert_eq!(watchpoint_control(Watch::Stores), 0x1ff3);
        assert_eq!(watchpoint_control(Watch::Both), 0x1ffb);
        assert_eq!(
            [0, 1, 2, 3].map(Watch::for_watchpoint),
            [Watch::Loads, Watch::Stores, Watch::Both, Watch::Loads]
        );
    }

    #[test]
    fn breakpoints_are_judged_by_class_status_and_address() {
        let hit = Caught {
            esr: 0x31 << EC_SHIFT | IL | DEBUG_EXCEPTION_FSC,
            far: 0,
            elr: 0x4008_1000,
        };
        assert_eq!(judge_breakpoint(Some(hit), 0x4008_1000), Ok(()));
        assert!(judge_breakpoint(Some(hit), 0x4008_1004).is_err());
        assert!(judge_breakpoint(None, 0x4008_1000).is_err());
        // A BRK, or a breakpoint taken from EL0's class.
        for ec in [0x3c, 0x30] {
            let other = Caught {
                esr: ec << EC_SHIFT | IL | DEBUG_EXCEPTION_FSC,
                ..hit
            };
            assert!(judge_breakpoint(Some(other), 0x4008_1000).is_err());
        }
    }

    #[test]
    fn watchpoints_check_wnr_far_and_elr() {
        let store = Caught {
            esr: 0x35 << EC_SHIFT | IL | 1 << 6 | DEBUG_EXCEPTION_FSC,
            far: 0x4010_0008,
            elr: 0x4008_2000,
        };
        assert_eq!(
            judge_watchpoint(Some(store), 0x4010_0008, 0x4008_2000, true, true),
            Ok(())
        );
        assert!(judge_watchpoint(Some(store), 0x4010_0008, 0x4008_2000, false, true).is_err());
        assert!(judge_watchpoint(Some(store), 0x4010_0010, 0x4008_2000, true, true).is_err());
        assert!(judge_watchpoint(Some(store), 0x4010_0008, 0x4008_2004, true, true).is_err());
        assert!(judge_watchpoint(Some(store), 0x4010_0008, 0x4008_2000, true, false).is_err());
        assert_eq!(judge_watchpoint(None, 0, 0, false, false), Ok(()));
        assert!(judge_watchpoint(None, 0, 0, false, true).is_err());
    }

    #[test]
    fn a_step_lands_on_the_next_instruction() {
        let step = Caught {
            esr: 0x33 << EC_SHIFT | IL | 1 << 24 | DEBUG_EXCEPTION_FSC,
            far: 0,
            elr: 0x4008_3004,
        };
        assert_eq!(judge_step(Some(step), 0x4008_3004), Ok(()));
        // One instruction too far: what a hypervisor that completes an
        // instruction without clearing SPSR_EL2.SS leads to.
        assert!(judge_step(Some(step), 0x4008_3000).is_err());
        let exclusive = Caught {
            esr: step.esr | 1 << 6,
            ..step
        };
        assert!(judge_step(Some(exclusive), 0x4008_3004).is_err());
        // Ended in active-pending: EX not valid.
        let pending = Caught {
            esr: 0x33 << EC_SHIFT | IL | DEBUG_EXCEPTION_FSC,
            ..step
        };
        assert_eq!(judge_step(Some(pending), 0x4008_3004), Ok(()));
    }

    #[test]
    fn the_features_line_round_trips() {
        let line = FeaturesLine {
            vcpu: 1,
            features: Features::from_dfr0(0x1030_5609),
        };
        assert_eq!(
            line.features,
            Features {
                breakpoints: 6,
                watchpoints: 4,
                version: 9
            }
        );
        let text = format!("[vm0] {line}");
        assert_eq!(FeaturesLine::parse(&text), Some(line));
        assert_eq!(FeaturesLine::parse("debug-check: vcpu 1: ok"), None);
        assert_eq!(Label::all(line.features).count(), 6 + 4 + 4 + 1);
        assert_eq!(Label::Step(StepKind::Mmio).to_string(), "step mmio load");
    }
}
