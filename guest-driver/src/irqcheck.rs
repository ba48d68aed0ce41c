//! The `irq-check` guest's settings, checks and console lines, shared with
//! `cargo xtask`, which judges boots by those lines.
//!
//! irq-check proves a (virtual) GICv3 end to end with a polling driver
//! ([`crate::gicv3`]): PSTATE.I stays masked, interrupts are acknowledged
//! by reading ICC_IAR1_EL1 and completed with ICC_EOIR1_EL1, and WFI waits
//! for them. Each check prints `irq-check: <label>: ok` (sometimes
//! followed by ` (<detail>)`) or `irq-check: <label>: FAILED: <why>`;
//! [`Label::ALL`] lists them; with `ping=N` the ping check
//! ([`Label::Ping`]) runs after them and its pass line is a
//! [`PingReport`]. The ring check also prints one [`RingCount`] line per
//! vCPU. A run ends with [`ALL_PASSED`], or with a `GUEST FATAL` line
//! counting the failures.

use core::fmt;
use core::time::Duration;

use crate::bootargs::{ArgError, BootArgs};
use crate::gicv3::{self, IntId, PRIORITY_MASK_OPEN};

/// Every line irq-check prints starts with this.
pub const PREFIX: &str = "irq-check:";

/// The last line of a successful run.
pub const ALL_PASSED: &str = "irq-check: all checks passed";

/// How many SGIs the burst sends (SGIs 0..=11): three times the four list
/// registers of QEMU's CPUs, so a hypervisor must refill them twice or
/// more while the guest takes the interrupts.
pub const BURST_SGIS: usize = 12;

/// The SGI the ring passes around.
pub const RING_SGI: IntId = IntId::sgi(1);

/// The SGI the ping check bounces between vCPUs 0 and 1.
pub const PING_SGI: IntId = IntId::sgi(2);

/// How long vCPU 0 rests (WFI on its virtual timer) after each round trip
/// of the ping check: with it the two vCPUs ask for a few percent of a
/// pCPU, well under their fair share beside the boot test's six CPU-bound
/// siblings on two pCPUs, so that what the round trips measure is the
/// wake-up latency a vCPU within its share gets. (Without it the pair
/// would ask for a whole pCPU, and fair share would rightly make it
/// wait.)
pub const PING_GAP: Duration = Duration::from_millis(1);

/// How long vCPU 0 rests before the first round trip, the spinners
/// already computing: the other checks ran mostly on vCPU 0 while the
/// spinners waited, and what the pair used then fair share makes it pay
/// back first. 100 ms is more than the earlier checks take.
pub const PING_WARM_UP: Duration = Duration::from_millis(100);

/// Most round trips `ping=` takes: vCPU 0 keeps every one to find the
/// median.
pub const MAX_PING: u64 = 10_000;

/// Ring rounds unless `rounds=` says otherwise.
pub const DEFAULT_ROUNDS: u64 = 200;
/// Most ring rounds `rounds=` takes.
pub const MAX_ROUNDS: u64 = 1_000_000;
/// Seconds each check may take unless `timeout=` says otherwise.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// Most seconds `timeout=` takes.
pub const MAX_TIMEOUT_SECS: u64 = 3600;

/// How far ahead the timer check arms the virtual timer.
pub const TIMER_DELAY: Duration = Duration::from_millis(2);
/// How long vCPU 0 watches for the SPI routed to another vCPU.
pub const SPI_WATCH: Duration = Duration::from_millis(2);
/// How long a vCPU keeps polling after a check got what it waited for,
/// to catch an interrupt delivered twice.
pub const QUIET_WINDOW: Duration = Duration::from_millis(1);

/// The priority of the interrupt each of the timer, ring and spi checks
/// waits for: one the open priority mask lets through with any number of
/// implemented priority bits (at least [`MIN_PRIORITY_BITS`]).
pub const CHECK_PRIORITY: u8 = 0x80;

/// Fewest implemented priority bits the burst can use: it needs 12
/// distinct priorities below the open priority mask, which keeps the
/// lowest level masked (16 levels with 4 bits). Every GICv3 CPU
/// interface has at least 4 (Arm IHI 0069, "Interrupt prioritization").
pub const MIN_PRIORITY_BITS: u32 = 4;

/// Finest priority step the burst uses, even when the CPU interface has
/// more bits: QEMU's virtual CPU interface implements 5 priority bits
/// (ICH_VTR_EL2.PRIbits + 1), so priorities 8 apart are the closest it
/// tells apart, and a hypervisor that sorts by all 8 bits agrees with it.
const FINEST_BURST_STEP: u8 = gicv3::priority_step(5);

/// Each burst SGI's urgency, 0 the most urgent: a permutation that neither
/// INTID order nor its reverse follows, and in which the four SGIs sent
/// first (0..=3) are the four least urgent. A hypervisor that put the
/// first four into the list registers and refilled in arrival order would
/// hand them out first.
const BURST_RANKS: [u8; BURST_SGIS] = [9, 11, 8, 10, 3, 6, 1, 5, 0, 7, 2, 4];

/// What the command line asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Times the token goes around the ring (`rounds=`).
    pub rounds: u64,
    /// Seconds each check may take (`timeout=`).
    pub timeout_secs: u64,
    /// Round trips of the ping check (`ping=`); 0 leaves it out.
    pub ping: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            rounds: DEFAULT_ROUNDS,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            ping: 0,
        }
    }
}

impl Settings {
    /// Reads `rounds=N` (1..=1000000), `timeout=S` (1..=3600) and
    /// `ping=N` (0..=[`MAX_PING`]).
    pub fn from_bootargs<'a>(args: &BootArgs<'a>) -> Result<Self, ArgError<'a>> {
        Ok(Self {
            rounds: args.number("rounds", DEFAULT_ROUNDS, 1, MAX_ROUNDS)?,
            timeout_secs: args.number("timeout", DEFAULT_TIMEOUT_SECS, 1, MAX_TIMEOUT_SECS)?,
            ping: args.number("ping", 0, 0, MAX_PING)?,
        })
    }

    pub const fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }
}

impl fmt::Display for Settings {
    /// The command-line words: `rounds=200 timeout=60 ping=0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rounds={} timeout={} ping={}",
            self.rounds, self.timeout_secs, self.ping
        )
    }
}

// ---- The burst -------------------------------------------------------------

/// The burst's SGIs, in the order they are sent (INTID order).
pub fn burst_sgis() -> impl Iterator<Item = IntId> {
    (0..BURST_SGIS as u32).map(IntId::sgi)
}

/// Each burst SGI with the priority the burst gives it on a CPU interface
/// with `priority_bits` implemented bits: (rank + 1) steps, where a step
/// is the interface's (at least 8, the step of QEMU's 5 bits): 12 distinct values
/// the interface tells apart, none 0 and all below the open priority mask.
pub fn burst_priorities(priority_bits: u32) -> Result<[(IntId, u8); BURST_SGIS], BurstError> {
    if priority_bits < MIN_PRIORITY_BITS {
        return Err(BurstError::TooFewPriorityBits(priority_bits));
    }
    let step = gicv3::priority_step(priority_bits).max(FINEST_BURST_STEP);
    let mut priorities = [(IntId::sgi(0), 0); BURST_SGIS];
    for ((sgi, &rank), slot) in burst_sgis().zip(&BURST_RANKS).zip(&mut priorities) {
        *slot = (sgi, (rank + 1) * step);
    }
    Ok(priorities)
}

/// The burst's SGIs most urgent first: the order ICC_IAR1_EL1 must return
/// them in.
pub fn burst_order() -> [IntId; BURST_SGIS] {
    let mut order = [IntId::sgi(0); BURST_SGIS];
    for (sgi, &rank) in BURST_RANKS.iter().enumerate() {
        order[rank as usize] = IntId::sgi(sgi as u32);
    }
    order
}

/// Why the burst failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BurstError {
    /// The CPU interface has too few priority bits for 12 priorities.
    TooFewPriorityBits(u32),
    /// An interrupt that is not one of the burst's was acknowledged.
    Unexpected { position: usize, intid: IntId },
    /// An SGI was acknowledged twice.
    Duplicate(IntId),
    /// Not every SGI was acknowledged.
    Missing { received: usize, first: IntId },
    /// The SGIs came in the wrong order.
    OutOfOrder {
        position: usize,
        got: IntId,
        expected: IntId,
    },
}

impl fmt::Display for BurstError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BurstError::TooFewPriorityBits(bits) => write!(
                f,
                "the CPU interface implements {bits} priority bits, fewer than {MIN_PRIORITY_BITS}"
            ),
            BurstError::Unexpected { position, intid } => write!(
                f,
                "acknowledgement {} was INTID {intid}, not one of the burst's SGIs",
                position + 1
            ),
            BurstError::Duplicate(intid) => write!(f, "SGI {intid} was acknowledged twice"),
            BurstError::Missing { received, first } => write!(
                f,
                "only {received} of {BURST_SGIS} SGIs acknowledged (SGI {first} never was)"
            ),
            BurstError::OutOfOrder {
                position,
                got,
                expected,
            } => write!(
                f,
                "acknowledgement {} was SGI {got}, but SGI {expected} was pending with a higher \
                 priority",
                position + 1
            ),
        }
    }
}

/// Room in a [`BurstLog`]: every burst SGI twice over, so duplicates are
/// kept too.
const BURST_LOG_CAPACITY: usize = 2 * BURST_SGIS;

/// What ICC_IAR1_EL1 returned during the burst, in order.
#[derive(Clone, Copy, Debug)]
pub struct BurstLog {
    acknowledged: [IntId; BURST_LOG_CAPACITY],
    len: usize,
    /// Acknowledgements beyond the capacity.
    dropped: usize,
}

impl Default for BurstLog {
    fn default() -> Self {
        Self::new()
    }
}

impl BurstLog {
    pub const fn new() -> Self {
        Self {
            acknowledged: [IntId::SPURIOUS; BURST_LOG_CAPACITY],
            len: 0,
            dropped: 0,
        }
    }

    /// Records one acknowledged interrupt.
    pub fn record(&mut self, intid: IntId) {
        match self.acknowledged.get_mut(self.len) {
            Some(slot) => {
                *slot = intid;
                self.len += 1;
            }
            None => self.dropped += 1,
        }
    }

    /// The interrupts acknowledged so far (at most the capacity).
    pub fn acknowledged(&self) -> &[IntId] {
        &self.acknowledged[..self.len]
    }

    /// Whether as many interrupts as the burst sent have been acknowledged.
    pub fn full(&self) -> bool {
        self.len + self.dropped >= BURST_SGIS
    }

    /// Judges the log: every burst SGI exactly once, nothing else, in
    /// [`burst_order`].
    pub fn judge(&self) -> Result<(), BurstError> {
        let expected = burst_order();
        let mut seen = [false; BURST_SGIS];
        for (position, &intid) in self.acknowledged().iter().enumerate() {
            let Some(flag) = seen.get_mut(intid.raw() as usize) else {
                return Err(BurstError::Unexpected { position, intid });
            };
            if *flag {
                return Err(BurstError::Duplicate(intid));
            }
            *flag = true;
        }
        if self.dropped > 0 {
            // More acknowledgements than room for every SGI twice: some
            // SGI came more than once.
            return Err(BurstError::Duplicate(
                self.acknowledged[BURST_LOG_CAPACITY - 1],
            ));
        }
        if let Some(first) = expected.iter().find(|id| !seen[id.raw() as usize]) {
            return Err(BurstError::Missing {
                received: self.len,
                first: *first,
            });
        }
        for (position, (&got, &want)) in self.acknowledged().iter().zip(&expected).enumerate() {
            if got != want {
                return Err(BurstError::OutOfOrder {
                    position,
                    got,
                    expected: want,
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for BurstLog {
    /// The acknowledged INTIDs, space-separated.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, intid) in self.acknowledged().iter().enumerate() {
            write!(f, "{}{intid}", if i == 0 { "" } else { " " })?;
        }
        Ok(())
    }
}

/// Whether the priority mask lets a burst priority through: true for
/// every priority [`burst_priorities`] gives (host-tested), so an SGI the
/// guest never sees is the interrupt controller's fault.
pub const fn unmasked(priority: u8, priority_bits: u32) -> bool {
    gicv3::effective_priority(priority, priority_bits)
        < gicv3::effective_priority(PRIORITY_MASK_OPEN, priority_bits)
}

// ---- The ring --------------------------------------------------------------

/// The vCPU that vCPU `vcpu` of `vcpus` passes the token to.
pub const fn ring_successor(vcpu: usize, vcpus: usize) -> usize {
    (vcpu + 1) % vcpus
}

/// ICC_SGI1R_EL1 writes a passing run makes, which el2 counts as `sgis`
/// in its `summary:   vgic:` line: the burst's, one per hand-off of the
/// ring (vCPU 0 starts the token and passes it on after each of its first
/// `rounds - 1` receipts, every other vCPU after each of its `rounds`),
/// and two per round trip of the ping check.
pub const fn sgis_sent(vcpus: usize, rounds: u64, ping: u64) -> u64 {
    BURST_SGIS as u64 + vcpus as u64 * rounds + 2 * ping
}

// ---- The ping --------------------------------------------------------------

/// The median and the worst of a set of times, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spread {
    pub median_ns: u64,
    pub worst_ns: u64,
}

impl Spread {
    /// Of `times_ns` (sorted in place); `None` if there is none. The median
    /// of an even count is the upper of the two middle values.
    pub fn of(times_ns: &mut [u64]) -> Option<Self> {
        times_ns.sort_unstable();
        Some(Self {
            median_ns: *times_ns.get(times_ns.len() / 2)?,
            worst_ns: *times_ns.last()?,
        })
    }

    /// `median 0.123456 ms, worst 4.000001 ms`, from its words.
    fn parse(text: &str) -> Option<Self> {
        let (median, worst) = text.strip_prefix("median ")?.split_once(" ms, worst ")?;
        Some(Self {
            median_ns: parse_millis_as_ns(median)?,
            worst_ns: parse_millis_as_ns(worst.strip_suffix(" ms")?)?,
        })
    }
}

impl fmt::Display for Spread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "median {}.{:06} ms, worst {}.{:06} ms",
            self.median_ns / 1_000_000,
            self.median_ns % 1_000_000,
            self.worst_ns / 1_000_000,
            self.worst_ns % 1_000_000,
        )
    }
}

/// The ping check's pass line: `irq-check: ping: ok (1000 round trips
/// between vcpu 0 and vcpu 1 beside 6 spinning vCPUs: median 0.041424 ms,
/// worst 0.456789 ms; timer wake-ups late by median 0.500123 ms, worst
/// 2.000001 ms)`. A round trip is vCPU 0 sending [`PING_SGI`] to vCPU 1,
/// which waits for it in WFI and answers with the same SGI, until vCPU 0,
/// also waiting in WFI, has acknowledged the answer. Then vCPU 0 rests
/// [`PING_GAP`] in WFI on its virtual timer: how long after the timer's
/// deadline it runs again is the timer wake-up's lateness. The other
/// vCPUs compute without a break meanwhile, so with more vCPUs than
/// pCPUs each wake-up competes with them for a pCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PingReport {
    pub round_trips: u64,
    pub spinners: usize,
    pub round_trip: Spread,
    pub timer_late: Spread,
}

impl PingReport {
    const TEXT: &'static str = " ping: ok (";
    const TIMER: &'static str = "; timer wake-ups late by ";

    /// Finds the line anywhere in `line` (a hypervisor may prefix it).
    pub fn parse(line: &str) -> Option<Self> {
        let at = line.find(PREFIX)? + PREFIX.len();
        let rest = line[at..].strip_prefix(Self::TEXT)?;
        let (round_trips, rest) =
            rest.split_once(" round trips between vcpu 0 and vcpu 1 beside ")?;
        let (spinners, rest) = rest.split_once(" spinning vCPUs: ")?;
        let (round_trip, rest) = rest.split_once(Self::TIMER)?;
        let (timer_late, _) = rest.split_once(')')?;
        Some(Self {
            round_trips: round_trips.parse().ok()?,
            spinners: spinners.parse().ok()?,
            round_trip: Spread::parse(round_trip)?,
            timer_late: Spread::parse(timer_late)?,
        })
    }
}

impl fmt::Display for PingReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}{} round trips between vcpu 0 and vcpu 1 beside {} spinning vCPUs: {}{}{})",
            Self::TEXT,
            self.round_trips,
            self.spinners,
            self.round_trip,
            Self::TIMER,
            self.timer_late,
        )
    }
}

/// `0.123456` (milliseconds, exactly six decimals) as nanoseconds.
fn parse_millis_as_ns(text: &str) -> Option<u64> {
    let (whole, fraction) = text.split_once('.')?;
    if fraction.len() != 6 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    whole
        .checked_mul(1_000_000)?
        .checked_add(fraction.parse().ok()?)
}

/// `irq-check: ring: vcpu 3 received 200 tokens`: how many times vCPU 3
/// acknowledged the ring's SGI (including any that came after the ring
/// ended, which a passing run has none of).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingCount {
    pub vcpu: usize,
    pub tokens: u64,
}

impl RingCount {
    const TEXT: &'static str = " ring: vcpu ";

    /// Finds the line anywhere in `line` (a hypervisor may prefix it).
    pub fn parse(line: &str) -> Option<Self> {
        let at = line.find(PREFIX)? + PREFIX.len();
        let rest = line[at..].strip_prefix(Self::TEXT)?;
        let (vcpu, rest) = rest.split_once(" received ")?;
        let (tokens, _) = rest.split_once(" tokens")?;
        Some(Self {
            vcpu: vcpu.parse().ok()?,
            tokens: tokens.parse().ok()?,
        })
    }
}

impl fmt::Display for RingCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}{} received {} tokens",
            Self::TEXT,
            self.vcpu,
            self.tokens
        )
    }
}

// ---- Labels ----------------------------------------------------------------

/// A check's label: what a line says before `: ok` / `: FAILED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    /// vCPU 0 sends itself the [`BURST_SGIS`] SGIs of distinct priorities
    /// and acknowledges each exactly once, most urgent first.
    Burst,
    /// The virtual timer's PPI arrives, not before the timer's deadline.
    Timer,
    /// The token goes around the vCPUs `rounds` times; each vCPU receives
    /// it exactly `rounds` times.
    Ring,
    /// The UART's SPI, routed to the last vCPU, reaches it and no other.
    Spi,
    /// With `ping=N`, after the others: N round trips of [`PING_SGI`]
    /// between vCPUs 0 and 1 while the rest compute ([`PingReport`]).
    Ping,
}

impl Label {
    /// Every label a passing run prints with `: ok`, each once, in the
    /// order the checks run; [`Label::Ping`] follows them with `ping=N`.
    pub const ALL: [Label; 4] = [Label::Burst, Label::Timer, Label::Ring, Label::Spi];

    /// The label's own word.
    pub const fn name(self) -> &'static str {
        match self {
            Label::Burst => "burst",
            Label::Timer => "timer",
            Label::Ring => "ring",
            Label::Spi => "spi",
            Label::Ping => "ping",
        }
    }
}

impl fmt::Display for Label {
    /// `irq-check: burst`.
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
        assert_eq!(s.to_string(), "rounds=200 timeout=60 ping=0");
        let s = Settings::from_bootargs(&BootArgs::new("rounds=7 timeout=3 ping=1000")).unwrap();
        assert_eq!(
            (s.rounds, s.timeout(), s.ping),
            (7, Duration::from_secs(3), 1000)
        );
        assert_eq!(
            Settings::from_bootargs(&BootArgs::new(&s.to_string())),
            Ok(s)
        );
        assert!(Settings::from_bootargs(&BootArgs::new("rounds=0")).is_err());
        assert!(Settings::from_bootargs(&BootArgs::new("timeout=lots")).is_err());
        assert!(Settings::from_bootargs(&BootArgs::new("ping=10001")).is_err());
    }

    #[test]
    fn burst_priorities_are_distinct_multiples_of_8_below_the_mask() {
        for bits in MIN_PRIORITY_BITS..=8 {
            let pairs = burst_priorities(bits).unwrap();
            assert!(pairs.iter().map(|p| p.0).eq(burst_sgis()));
            let priorities: Vec<u8> = pairs.iter().map(|p| p.1).collect();
            let mut seen: Vec<u8> = priorities
                .iter()
                .map(|&p| gicv3::effective_priority(p, bits))
                .collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), BURST_SGIS, "{bits} bits: {priorities:?}");
            assert!(priorities.iter().all(|&p| p % 8 == 0 && p != 0));
            assert!(priorities.iter().all(|&p| unmasked(p, bits)), "{bits} bits");
        }
        assert!((MIN_PRIORITY_BITS..=8).all(|bits| unmasked(CHECK_PRIORITY, bits)));
        // QEMU's 5 bits: 0x08..=0x60, SGI 8 the most urgent.
        let qemu = burst_priorities(5).unwrap();
        assert_eq!(qemu[8], (IntId::sgi(8), 0x08));
        assert_eq!(qemu[1], (IntId::sgi(1), 0x60));
        assert_eq!(burst_priorities(4).unwrap()[1], (IntId::sgi(1), 0xc0));
        // With 8 bits the burst still uses steps of 8.
        assert_eq!(burst_priorities(8), Ok(qemu));
        assert_eq!(burst_priorities(3), Err(BurstError::TooFewPriorityBits(3)));
    }

    #[test]
    fn burst_order_is_by_priority_and_neither_intid_order() {
        let order: Vec<u32> = burst_order().iter().map(|i| i.raw()).collect();
        assert_eq!(order, [8, 6, 10, 4, 11, 7, 5, 9, 2, 0, 3, 1]);
        let table = burst_priorities(5).unwrap();
        let priorities: Vec<u8> = burst_order()
            .iter()
            .map(|&sgi| table[sgi.raw() as usize].1)
            .collect();
        assert!(priorities.windows(2).all(|w| w[0] < w[1]));
        // The first four sent are the four least urgent.
        let mut first_four: Vec<u8> = BURST_RANKS[..4].to_vec();
        first_four.sort_unstable();
        assert_eq!(first_four, [8, 9, 10, 11]);
    }

    fn log_of(intids: &[u32]) -> BurstLog {
        let mut log = BurstLog::new();
        for &i in intids {
            log.record(IntId::from_raw(i));
        }
        log
    }

    #[test]
    fn burst_logs_are_judged() {
        let good: Vec<u32> = burst_order().iter().map(|i| i.raw()).collect();
        let log = log_of(&good);
        assert!(log.full());
        assert_eq!(log.judge(), Ok(()));
        assert_eq!(log.to_string(), "8 6 10 4 11 7 5 9 2 0 3 1");
        // Arrival order instead of priority order.
        let arrival = log_of(&(0..12).collect::<Vec<_>>());
        assert_eq!(
            arrival.judge(),
            Err(BurstError::OutOfOrder {
                position: 0,
                got: IntId::sgi(0),
                expected: IntId::sgi(8)
            })
        );
        // Only four came (no list-register refill).
        let four = log_of(&good[..4]);
        assert!(!four.full());
        assert_eq!(
            four.judge(),
            Err(BurstError::Missing {
                received: 4,
                first: IntId::sgi(11)
            })
        );
        assert_eq!(
            four.judge().unwrap_err().to_string(),
            "only 4 of 12 SGIs acknowledged (SGI 11 never was)"
        );
        // One twice.
        let mut twice = good.clone();
        twice.push(8);
        assert_eq!(
            log_of(&twice).judge(),
            Err(BurstError::Duplicate(IntId::sgi(8)))
        );
        // Something else.
        let mut other = good.clone();
        other.insert(3, 27);
        assert_eq!(
            log_of(&other).judge(),
            Err(BurstError::Unexpected {
                position: 3,
                intid: IntId::from_raw(27)
            })
        );
        // A storm of one SGI overflows the log and is still a duplicate.
        let storm = log_of(&[8; 30]);
        assert_eq!(storm.judge(), Err(BurstError::Duplicate(IntId::sgi(8))));
        assert_eq!(storm.acknowledged().len(), BURST_LOG_CAPACITY);
    }

    #[test]
    fn ring_arithmetic() {
        assert_eq!(ring_successor(0, 1), 0);
        assert_eq!(ring_successor(2, 4), 3);
        assert_eq!(ring_successor(7, 8), 0);
        assert_eq!(sgis_sent(1, 200, 0), 212);
        assert_eq!(sgis_sent(8, 200, 0), 1612);
        assert_eq!(sgis_sent(8, 10, 1000), 12 + 80 + 2000);
    }

    #[test]
    fn spreads_take_the_median_and_the_worst() {
        let mut odd = [900, 100, 300, 200, 50_000];
        assert_eq!(
            Spread::of(&mut odd),
            Some(Spread {
                median_ns: 300,
                worst_ns: 50_000
            })
        );
        let mut even = [4, 1, 3, 2];
        assert_eq!(
            Spread::of(&mut even),
            Some(Spread {
                median_ns: 3,
                worst_ns: 4
            })
        );
        assert_eq!(Spread::of(&mut []), None);
    }

    #[test]
    fn ping_lines_round_trip() {
        let r = PingReport {
            round_trips: 1000,
            spinners: 6,
            round_trip: Spread {
                median_ns: 123_456,
                worst_ns: 4_000_001,
            },
            timer_late: Spread {
                median_ns: 500_123,
                worst_ns: 12_000_000,
            },
        };
        assert_eq!(
            r.to_string(),
            "irq-check: ping: ok (1000 round trips between vcpu 0 and vcpu 1 beside 6 spinning \
             vCPUs: median 0.123456 ms, worst 4.000001 ms; timer wake-ups late by median \
             0.500123 ms, worst 12.000000 ms)"
        );
        assert_eq!(PingReport::parse(&format!("[vm0] {r}\r")), Some(r));
        assert_eq!(
            PingReport::parse("irq-check: ping: FAILED: no answer"),
            None
        );
        let bad = r.to_string().replace("0.123456", "0.1234");
        assert_eq!(PingReport::parse(&bad), None);
        let cut = r.to_string().replace("; timer wake-ups", "; timer");
        assert_eq!(PingReport::parse(&cut), None);
        // The ping's ok line is not any other label's.
        for label in Label::ALL {
            assert!(!r.to_string().contains(&format!("{label}: ok")));
        }
        assert!(r.to_string().contains(&format!("{}: ok", Label::Ping)));
    }

    #[test]
    fn labels() {
        let lines: Vec<String> = Label::ALL.iter().map(|l| l.to_string()).collect();
        assert_eq!(
            lines,
            [
                "irq-check: burst",
                "irq-check: timer",
                "irq-check: ring",
                "irq-check: spi"
            ]
        );
        // No label's ok line is part of another's, or of a ring count line.
        let count = RingCount { vcpu: 0, tokens: 1 }.to_string();
        for a in &lines {
            let ok = format!("{a}: ok");
            assert!(!count.contains(&ok));
            for b in &lines {
                assert!(a == b || !format!("{b}: ok").contains(&ok));
            }
        }
    }
}
