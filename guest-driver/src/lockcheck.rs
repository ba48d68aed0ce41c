//! The `lock-check` guest's settings, workload and console lines, shared
//! with `cargo xtask`, which judges boots by those lines.
//!
//! Every vCPU takes one shared [`TicketLock`](crate::lock::TicketLock)
//! `iterations` times; inside it runs [`Shared::update`], a critical
//! section of a few hundred instructions whose non-atomic read-modify-write
//! updates lose counts if two vCPUs are ever inside at once; outside it,
//! [`private_work`]. At the end the boot vCPU checks the shared data
//! ([`DataCheck`]) and adds up what the waits cost ([`YieldLine`]).

use core::fmt;
use core::ptr;

use crate::bootargs::{ArgError, BootArgs};

/// Every line lock-check prints starts with this.
pub const PREFIX: &str = "lock-check:";

/// The last line of a successful run.
pub const ALL_PASSED: &str = "lock-check: all checks passed";

/// Starts the line the guest prints when `lock=pv` finds no PV-lock record
/// or no directed yield (no hypervisor, or one without them): the PV lock
/// then waits exactly like the plain one.
pub const PV_UNAVAILABLE: &str =
    "lock-check: the PV lock has no preempted flag or no directed yield here";

/// `iterations=`: acquisitions per vCPU unless the command line says
/// otherwise. With the PV lock, 4 vCPUs on 2 pCPUs take about 2 s under
/// TCG; the plain ticket lock, once a vCPU is preempted holding a ticket,
/// manages only a few hundred acquisitions per second there (each handoff
/// to a preempted vCPU waits for a time slice to end), so give it fewer.
pub const DEFAULT_ITERATIONS: u64 = 10_000;
/// `cs-work=`: mixing rounds in the critical section (about 7 instructions
/// each, so a few hundred instructions in all).
pub const DEFAULT_CS_WORK: u64 = 40;
/// `private-work=`: mixing rounds between two acquisitions.
pub const DEFAULT_PRIVATE_WORK: u64 = 40;
/// Most of each work setting: keeps one iteration well below a time slice.
pub const MAX_WORK: u64 = 1_000_000;
/// Most `iterations=`.
pub const MAX_ITERATIONS: u64 = 100_000_000;

/// Which lock the vCPUs share (`lock=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    /// `pv`: the ticket lock with paravirtual waiting (preempted flag,
    /// directed yield, lock count).
    Pv,
    /// `ticket`: the plain ticket lock, the baseline.
    Ticket,
}

impl LockKind {
    /// The command-line word.
    pub const fn name(self) -> &'static str {
        match self {
            LockKind::Pv => "pv",
            LockKind::Ticket => "ticket",
        }
    }
}

/// What the command line asks for:
///
/// | word | meaning | default |
/// |---|---|---|
/// | `lock=pv\|ticket` | the PV-aware ticket lock or the plain one | `pv` |
/// | `iterations=N` | acquisitions per vCPU (1..=100000000) | [`DEFAULT_ITERATIONS`] |
/// | `cs-work=N` | mixing rounds inside the lock (1..=1000000) | [`DEFAULT_CS_WORK`] |
/// | `private-work=N` | mixing rounds between acquisitions (0..=1000000) | [`DEFAULT_PRIVATE_WORK`] |
/// | `spin-limit=N` | PV lock: spins between two looks at the awaited vCPU's flag (1..=1000000000) | [`crate::lock::DEFAULT_SPIN_LIMIT`] |
/// | `first-hold-ms=N` | each vCPU's first critical section lasts at least N ms of counter time (0..=1000): longer than a time slice, its holder is preempted inside it for sure (with more vCPUs than pCPUs) | 0 |
/// | `timeout=S` | seconds to wait for a vCPU to come online, and for all to finish (1..=3600) | 60 |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub lock: LockKind,
    pub iterations: u64,
    pub cs_work: u64,
    pub private_work: u64,
    pub spin_limit: u32,
    pub first_hold_ms: u64,
    pub timeout_secs: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            lock: LockKind::Pv,
            iterations: DEFAULT_ITERATIONS,
            cs_work: DEFAULT_CS_WORK,
            private_work: DEFAULT_PRIVATE_WORK,
            spin_limit: crate::lock::DEFAULT_SPIN_LIMIT,
            first_hold_ms: 0,
            timeout_secs: 60,
        }
    }
}

impl Settings {
    /// Reads the words of the table above; absent words take their default.
    pub fn from_bootargs<'a>(args: &BootArgs<'a>) -> Result<Self, ArgError<'a>> {
        let d = Self::default();
        let lock = match args.choice("lock", &["pv", "ticket"])? {
            Some("ticket") => LockKind::Ticket,
            _ => LockKind::Pv,
        };
        let spin_limit = args.number("spin-limit", d.spin_limit.into(), 1, 1_000_000_000)?;
        Ok(Self {
            lock,
            iterations: args.number("iterations", d.iterations, 1, MAX_ITERATIONS)?,
            cs_work: args.number("cs-work", d.cs_work, 1, MAX_WORK)?,
            private_work: args.number("private-work", d.private_work, 0, MAX_WORK)?,
            // In range by the bound just checked.
            spin_limit: u32::try_from(spin_limit).unwrap_or(u32::MAX),
            first_hold_ms: args.number("first-hold-ms", d.first_hold_ms, 0, 1000)?,
            timeout_secs: args.number("timeout", d.timeout_secs, 1, 3600)?,
        })
    }
}

impl fmt::Display for Settings {
    /// The command-line words, every one: `lock=pv iterations=4000 ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lock={} iterations={} cs-work={} private-work={} spin-limit={} first-hold-ms={} \
             timeout={}",
            self.lock.name(),
            self.iterations,
            self.cs_work,
            self.private_work,
            self.spin_limit,
            self.first_hold_ms,
            self.timeout_secs
        )
    }
}

/// One step of the mixing loop (xorshift64 plus a counter): a chain of
/// dependent ALU instructions the compiler cannot fold or vectorise.
#[inline(always)]
fn mix(x: u64, i: u64) -> u64 {
    let mut x = x ^ (x << 13);
    x ^= x >> 7;
    x ^= x << 17;
    x.wrapping_add(i)
}

/// `work` rounds of the mixing loop on a vCPU's own state, outside the lock.
pub fn private_work(state: u64, work: u64) -> u64 {
    let mut x = state;
    for i in 0..work {
        x = mix(core::hint::black_box(x), i);
    }
    x
}

/// The data the lock protects. Every field is read and written with
/// volatile accesses in a fixed order, so that each update really is a
/// load early in the critical section and a store late in it: two vCPUs
/// inside at once lose counts, and see each other in `inside`.
#[derive(Debug)]
pub struct Shared {
    /// Incremented once per critical section: load first, store last.
    first: u64,
    /// Incremented again after `first`: must end equal to it.
    second: u64,
    /// CPU number + 1 of the vCPU inside; 0 when nobody is.
    inside: u64,
    /// Critical sections that found another vCPU inside, or lost `inside`
    /// to one.
    overlaps: u64,
    /// The mixing loop's shared state.
    mix: u64,
}

/// Reads `*p` with a volatile load.
fn load(p: &u64) -> u64 {
    // SAFETY: a reference is valid and aligned for a read.
    unsafe { ptr::read_volatile(p) }
}

/// Writes `*p` with a volatile store.
fn store(p: &mut u64, value: u64) {
    // SAFETY: a mutable reference is valid and aligned for a write.
    unsafe { ptr::write_volatile(p, value) }
}

impl Shared {
    /// Nothing counted yet.
    pub const fn new() -> Self {
        Self {
            first: 0,
            second: 0,
            inside: 0,
            overlaps: 0,
            mix: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// One critical section of CPU `cpu`: `work` rounds of the mixing loop
    /// on the shared state, between the load and the store of `first`.
    pub fn update(&mut self, cpu: usize, work: u64) {
        let me = cpu as u64 + 1;
        let first = load(&self.first);
        if load(&self.inside) != 0 {
            self.overlapped();
        }
        store(&mut self.inside, me);
        let mut x = load(&self.mix);
        for i in 0..work {
            x = mix(x, i);
        }
        store(&mut self.mix, x);
        if load(&self.inside) != me {
            self.overlapped();
        }
        store(&mut self.inside, 0);
        store(&mut self.first, first.wrapping_add(1));
        let second = load(&self.second);
        store(&mut self.second, second.wrapping_add(1));
    }

    fn overlapped(&mut self) {
        let n = load(&self.overlaps);
        store(&mut self.overlaps, n + 1);
    }

    /// What the data says after `expected` critical sections.
    pub fn check(&self, expected: u64) -> DataCheck {
        DataCheck {
            expected,
            first: load(&self.first),
            second: load(&self.second),
            overlaps: load(&self.overlaps),
        }
    }
}

impl Default for Shared {
    fn default() -> Self {
        Self::new()
    }
}

/// The shared data at the end, against the acquisitions the vCPUs made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataCheck {
    /// Acquisitions the vCPUs report (vCPUs x iterations).
    pub expected: u64,
    /// The two counters.
    pub first: u64,
    pub second: u64,
    /// Critical sections that met another vCPU inside.
    pub overlaps: u64,
}

impl DataCheck {
    /// Counts lost to overlapping updates (by the counter that lost more).
    pub fn lost_updates(&self) -> u64 {
        self.expected.saturating_sub(self.first.min(self.second))
    }

    /// Whether the data is exactly what `expected` exclusive critical
    /// sections leave.
    pub fn passed(&self) -> bool {
        self.first == self.expected && self.second == self.expected && self.overlaps == 0
    }

    /// The line xtask requires, when the data passed.
    pub fn line(&self) -> Option<DataLine> {
        self.passed().then_some(DataLine {
            acquisitions: self.expected,
            lost_updates: 0,
        })
    }
}

impl fmt::Display for DataCheck {
    /// [`DataLine`] when it passed, else `lock-check: data: FAILED: ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line() {
            Some(line) => line.fmt(f),
            None => write!(
                f,
                "{PREFIX} data: FAILED: {} acquisitions, counters {} and {}, {} lost updates, \
                 {} overlapping critical sections",
                self.expected,
                self.first,
                self.second,
                self.lost_updates(),
                self.overlaps
            ),
        }
    }
}

/// `lock-check: data ok: 8000 acquisitions, 0 lost updates`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataLine {
    pub acquisitions: u64,
    pub lost_updates: u64,
}

impl DataLine {
    const TEXT: &'static str = " data ok: ";

    /// Finds the line anywhere in `line` (a hypervisor may prefix it).
    pub fn parse(line: &str) -> Option<Self> {
        let at = line.find(PREFIX)? + PREFIX.len();
        let rest = line[at..].strip_prefix(Self::TEXT)?;
        let (acquisitions, rest) = rest.split_once(" acquisitions, ")?;
        let (lost, _) = rest.split_once(" lost updates")?;
        Some(Self {
            acquisitions: acquisitions.parse().ok()?,
            lost_updates: lost.parse().ok()?,
        })
    }
}

impl fmt::Display for DataLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}{} acquisitions, {} lost updates",
            Self::TEXT,
            self.acquisitions,
            self.lost_updates
        )
    }
}

/// `lock-check: yields: 120 calls, 97 yielded`: the directed-yield calls
/// the waiters made, and how many the hypervisor answered YIELDED.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct YieldLine {
    pub calls: u64,
    pub yielded: u64,
}

impl YieldLine {
    const TEXT: &'static str = " yields: ";

    /// Finds the line anywhere in `line` (a hypervisor may prefix it).
    pub fn parse(line: &str) -> Option<Self> {
        let at = line.find(PREFIX)? + PREFIX.len();
        let rest = line[at..].strip_prefix(Self::TEXT)?;
        let (calls, rest) = rest.split_once(" calls, ")?;
        let (yielded, _) = rest.split_once(" yielded")?;
        Some(Self {
            calls: calls.parse().ok()?,
            yielded: yielded.parse().ok()?,
        })
    }
}

impl fmt::Display for YieldLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}{} calls, {} yielded",
            Self::TEXT,
            self.calls,
            self.yielded
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::TicketLock;
    use crate::lock::tests::HostYield;
    use std::string::ToString;

    fn settings(line: &str) -> Result<Settings, ArgError<'_>> {
        Settings::from_bootargs(&BootArgs::new(line))
    }

    #[test]
    fn settings_have_defaults_and_bounds() {
        assert_eq!(settings("").unwrap(), Settings::default());
        let s = settings(
            "lock=ticket iterations=10 cs-work=5 private-work=0 spin-limit=7 first-hold-ms=9",
        )
        .unwrap();
        assert_eq!(s.lock, LockKind::Ticket);
        assert_eq!(
            (
                s.iterations,
                s.cs_work,
                s.private_work,
                s.spin_limit,
                s.first_hold_ms
            ),
            (10, 5, 0, 7, 9)
        );
        assert_eq!(
            settings("lock=mcs").unwrap_err().to_string(),
            "lock=mcs: must be one of pv, ticket"
        );
        assert!(settings("iterations=0").is_err());
        assert!(settings("cs-work=0").is_err());
        assert!(settings("spin-limit=0").is_err());
        assert!(settings("first-hold-ms=1001").is_err());
        // The words round-trip.
        let s = settings("lock=ticket iterations=3 timeout=9").unwrap();
        assert_eq!(settings(&s.to_string()).unwrap(), s);
        assert_eq!(
            Settings::default().to_string(),
            "lock=pv iterations=10000 cs-work=40 private-work=40 spin-limit=128 first-hold-ms=0 \
             timeout=60"
        );
    }

    #[test]
    fn exclusive_updates_count_exactly() {
        let mut shared = Shared::new();
        for i in 0..100 {
            shared.update(i % 3, 10);
        }
        let check = shared.check(100);
        assert!(check.passed(), "{check:?}");
        assert_eq!(check.lost_updates(), 0);
        assert_eq!(
            check.to_string(),
            "lock-check: data ok: 100 acquisitions, 0 lost updates"
        );
        // Fewer counted than reported: lost updates, and the line says so.
        let check = shared.check(103);
        assert!(!check.passed());
        assert_eq!(check.lost_updates(), 3);
        assert_eq!(
            check.to_string(),
            "lock-check: data: FAILED: 103 acquisitions, counters 100 and 100, 3 lost updates, \
             0 overlapping critical sections"
        );
        assert!(DataLine::parse(&check.to_string()).is_none());
    }

    #[test]
    fn a_vcpu_inside_is_seen() {
        let mut shared = Shared::new();
        // As if CPU 1 were inside when CPU 0 entered.
        shared.inside = 2;
        shared.update(0, 1);
        let check = shared.check(1);
        assert_eq!(check.overlaps, 1);
        assert!(!check.passed());
    }

    #[test]
    fn the_lock_keeps_the_data_exact_across_threads() {
        const THREADS: usize = 4;
        const ROUNDS: u64 = 5_000;
        let lock = TicketLock::with_paravirt(Shared::new(), HostYield);
        std::thread::scope(|s| {
            for cpu in 0..THREADS {
                let lock = &lock;
                s.spawn(move || {
                    let mut state = cpu as u64;
                    for _ in 0..ROUNDS {
                        lock.lock().update(cpu, 20);
                        state = private_work(state, 20);
                    }
                    state
                });
            }
        });
        let check = lock.into_inner().check(THREADS as u64 * ROUNDS);
        assert!(check.passed(), "{check:?}");
    }

    #[test]
    fn lines_round_trip() {
        let data = DataLine {
            acquisitions: 8000,
            lost_updates: 0,
        };
        assert_eq!(
            data.to_string(),
            "lock-check: data ok: 8000 acquisitions, 0 lost updates"
        );
        assert_eq!(DataLine::parse(&format!("[vm0] {data}\r")), Some(data));
        let yields = YieldLine {
            calls: 120,
            yielded: 97,
        };
        assert_eq!(
            yields.to_string(),
            "lock-check: yields: 120 calls, 97 yielded"
        );
        assert_eq!(YieldLine::parse(&yields.to_string()), Some(yields));
        assert_eq!(
            YieldLine::parse("lock-check: yields: x calls, 1 yielded"),
            None
        );
        assert_eq!(
            DataLine::parse("pv-check: data ok: 1 acquisitions, 0 lost updates"),
            None
        );
    }

    #[test]
    fn private_work_is_deterministic() {
        assert_eq!(private_work(1, 0), 1);
        assert_eq!(private_work(1, 3), mix(mix(mix(1, 0), 1), 2));
        assert_ne!(private_work(1, 3), private_work(2, 3));
    }
}
