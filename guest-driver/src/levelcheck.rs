//! The `level-check` guest's settings, checks and console lines, shared
//! with `cargo xtask`, which judges boots by those lines.
//!
//! level-check proves that a level-sensitive interrupt's pending state
//! follows its input line wherever a guest can look (Arm IHI 0069,
//! "Interrupt handling state machine": a level-sensitive interrupt is
//! pending while its line is asserted, or while a GICD_ISPENDR /
//! GICR_ISPENDR0 write has latched it), for the two level sources a VM
//! has: the virtual timer's PPI (its line is the timer condition while
//! CNTV_CTL_EL0.ENABLE is set and IMASK clear; Arm ARM D11, "The Generic
//! Timer") and the UART's SPI. Each check prints `level-check: <label>:
//! ok (<detail>)` or `level-check: <label>: FAILED: <why>`; [`Label::ALL`]
//! lists them. A run ends with [`ALL_PASSED`], or with a `GUEST FATAL`
//! line counting the failures.

use core::fmt;
use core::time::Duration;

use crate::bootargs::{ArgError, BootArgs};
use crate::gicv3::IntId;

/// Every line level-check prints starts with this.
pub const PREFIX: &str = "level-check:";

/// The last line of a successful run.
pub const ALL_PASSED: &str = "level-check: all checks passed";

/// Fewest vCPUs the guest runs with: vCPU 1 sends the wake-up SGI that
/// ends vCPU 0's waits on a machine whose WFI waits for an interrupt, and
/// reads vCPU 0's redistributor in the remote check.
pub const MIN_VCPUS: usize = 2;

/// The SGI vCPU 1 sends to end vCPU 0's waits.
pub const WAKE_SGI: IntId = IntId::sgi(3);

/// The priority of every interrupt the checks use: one the open priority
/// mask lets through with any number of implemented priority bits.
pub const CHECK_PRIORITY: u8 = 0x80;

/// How far ahead the checks arm the virtual timer.
pub const TIMER_DELAY: Duration = Duration::from_millis(1);

/// How long a descheduled wait after the line dropped lasts.
pub const SLEEP: Duration = Duration::from_millis(2);

/// How long a change of a line may take to show: in the GIC's registers
/// (on QEMU and under a hypervisor that samples the line when it is read,
/// no time; a GIC on real hardware takes a few cycles), and in
/// CNTV_CTL_EL0.ISTATUS once the count passed the deadline (QEMU updates
/// ISTATUS from a host timer, which a loaded host delays by milliseconds).
pub const SETTLE_LIMIT: Duration = Duration::from_millis(250);

/// How long a check polls ICC_IAR1_EL1 for an interrupt that must not
/// come (or come again).
pub const QUIET_WINDOW: Duration = Duration::from_millis(1);

/// Where the timer goes when a check moves its compare value later: far
/// beyond the end of the run.
pub const CVAL_LATER: Duration = Duration::from_secs(3600);

/// Rounds of each descheduled check unless `rounds=` says otherwise.
pub const DEFAULT_ROUNDS: u64 = 4;
/// Most rounds `rounds=` takes.
pub const MAX_ROUNDS: u64 = 1000;
/// Seconds each wait may take unless `timeout=` says otherwise.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// Most seconds `timeout=` takes.
pub const MAX_TIMEOUT_SECS: u64 = 3600;

/// What the command line asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Rounds of each descheduled check (`rounds=`).
    pub rounds: u64,
    /// Seconds each wait may take (`timeout=`).
    pub timeout_secs: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            rounds: DEFAULT_ROUNDS,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
        }
    }
}

impl Settings {
    /// Reads `rounds=N` (1..=1000) and `timeout=S` (1..=3600).
    pub fn from_bootargs<'a>(args: &BootArgs<'a>) -> Result<Self, ArgError<'a>> {
        Ok(Self {
            rounds: args.number("rounds", DEFAULT_ROUNDS, 1, MAX_ROUNDS)?,
            timeout_secs: args.number("timeout", DEFAULT_TIMEOUT_SECS, 1, MAX_TIMEOUT_SECS)?,
        })
    }

    pub const fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }
}

impl fmt::Display for Settings {
    /// The command-line words: `rounds=4 timeout=30`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rounds={} timeout={}", self.rounds, self.timeout_secs)
    }
}

/// How a check takes the virtual timer's line down after it fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lowering {
    /// CNTV_CTL_EL0 = 0: the timer off.
    Disable,
    /// CNTV_CTL_EL0 = ENABLE | IMASK: the timer on, its output masked.
    Mask,
    /// CNTV_CVAL_EL0 moved [`CVAL_LATER`] into the future: the condition
    /// no longer met.
    MoveLater,
}

impl Lowering {
    pub const ALL: [Lowering; 3] = [Lowering::Disable, Lowering::Mask, Lowering::MoveLater];

    /// What the guest writes, as the pass lines say it.
    pub const fn action(self) -> &'static str {
        match self {
            Lowering::Disable => "CNTV_CTL_EL0 = 0",
            Lowering::Mask => "CNTV_CTL_EL0 = ENABLE | IMASK",
            Lowering::MoveLater => "CNTV_CVAL_EL0 moved an hour later",
        }
    }
}

/// The checks, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    /// vCPU 0 masks the timer's PPI at its redistributor, lets the timer
    /// fire while it runs (GICR_ISPENDR0 shows it pending, CNTV_CTL_EL0
    /// reads as written with ISTATUS set), takes the line down as the
    /// [`Lowering`] says, and then GICR_ISPENDR0 and GICR_ICPENDR0 read it
    /// not pending, GICR_ISACTIVER0 not active, and unmasking the PPI
    /// delivers nothing.
    Running(Lowering),
    /// The same `rounds` times, vCPU 0 descheduled (waiting in WFI) while
    /// the timer fires and again after the line went down: with more
    /// vCPUs than pCPUs another vCPU runs meanwhile, and vCPU 0 may come
    /// back on another pCPU.
    Descheduled(Lowering),
    /// The PPI enabled: the timer fires while PSTATE.I masks it, the
    /// guest disables the timer before acknowledging, and then the PPI
    /// reads not pending and ICC_IAR1_EL1 never returns it.
    Retract,
    /// The PPI enabled: acknowledged, it reads active and (its line still
    /// high) pending; after IMASK, active and not pending; after its EOI,
    /// neither, and it does not come again.
    Active,
    /// The PPI enabled: completed without the timer reprogrammed, it is
    /// delivered again (its line is still high); completed after IMASK,
    /// not.
    Again,
    /// vCPU 1 reads vCPU 0's GICR_ISPENDR0 while vCPU 0 waits: pending once
    /// vCPU 0's timer passed its deadline, not pending once vCPU 0 turned
    /// the timer off.
    Remote,
    /// The UART's SPI routed to vCPU 0 and disabled: pending in
    /// GICD_ISPENDR while UARTIMSC.TXIM lets its transmit interrupt out,
    /// not pending once TXIM is masked, nothing delivered when enabled;
    /// enabled and unmasked, delivered once, active until completed.
    Uart,
}

impl Label {
    /// Every label a passing run prints with `: ok`, each once, in order.
    pub const ALL: [Label; 11] = [
        Label::Running(Lowering::Disable),
        Label::Running(Lowering::Mask),
        Label::Running(Lowering::MoveLater),
        Label::Descheduled(Lowering::Disable),
        Label::Descheduled(Lowering::Mask),
        Label::Descheduled(Lowering::MoveLater),
        Label::Retract,
        Label::Active,
        Label::Again,
        Label::Remote,
        Label::Uart,
    ];

    /// The label's own word.
    pub const fn name(self) -> &'static str {
        match self {
            Label::Running(Lowering::Disable) => "disable",
            Label::Running(Lowering::Mask) => "imask",
            Label::Running(Lowering::MoveLater) => "cval",
            Label::Descheduled(Lowering::Disable) => "disable-descheduled",
            Label::Descheduled(Lowering::Mask) => "imask-descheduled",
            Label::Descheduled(Lowering::MoveLater) => "cval-descheduled",
            Label::Retract => "retract",
            Label::Active => "active",
            Label::Again => "again",
            Label::Remote => "remote",
            Label::Uart => "uart",
        }
    }
}

impl fmt::Display for Label {
    /// `level-check: imask`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX} {}", self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;
    use std::vec::Vec;

    #[test]
    fn settings_round_trip() {
        let s = Settings::from_bootargs(&BootArgs::new("")).unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!(s.to_string(), "rounds=4 timeout=30");
        let s = Settings::from_bootargs(&BootArgs::new("rounds=9 timeout=5")).unwrap();
        assert_eq!((s.rounds, s.timeout()), (9, Duration::from_secs(5)));
        assert_eq!(
            Settings::from_bootargs(&BootArgs::new(&s.to_string())),
            Ok(s)
        );
        assert!(Settings::from_bootargs(&BootArgs::new("rounds=0")).is_err());
        assert!(Settings::from_bootargs(&BootArgs::new("rounds=1001")).is_err());
        assert!(Settings::from_bootargs(&BootArgs::new("timeout=0")).is_err());
    }

    #[test]
    fn each_pass_line_names_one_label() {
        // xtask finds `<label>: ok` in the console: no label's pass text
        // may occur in another's.
        let texts: Vec<_> = Label::ALL.iter().map(|l| std::format!("{l}: ok")).collect();
        for (i, a) in texts.iter().enumerate() {
            for (j, b) in texts.iter().enumerate() {
                assert!(i == j || !b.contains(a.as_str()), "{a:?} is in {b:?}");
            }
        }
        assert_eq!(
            Label::Descheduled(Lowering::Mask).to_string(),
            "level-check: imask-descheduled"
        );
        assert!(Lowering::ALL.iter().all(|l| !l.action().is_empty()));
    }
}
