//! The `lockbench` guest's settings, workload and console lines, shared
//! with `cargo xtask`, which judges boot tests and reads benchmark figures
//! by those lines.
//!
//! Every vCPU takes one shared lock (the [`LockKind`] the command line
//! names) over and over: `iterations` times, or until `duration-ms` of
//! counter time passed; inside it runs [`Shared::update`], a critical
//! section of a few hundred instructions whose non-atomic
//! read-modify-write updates lose counts if two vCPUs are ever inside at
//! once; outside it, [`private_work`]. At the end the boot vCPU checks the
//! shared data ([`DataCheck`]), adds up what the waits cost
//! ([`YieldLine`]) and prints the throughput ([`ResultLine`]). With
//! `costs=N` it first measures a null hypercall and a directed yield
//! between two vCPUs ([`CostLine`]).

use core::fmt;
use core::ptr;

use crate::bootargs::{ArgError, BootArgs};

/// Every line lockbench prints starts with this.
pub const PREFIX: &str = "lockbench:";

/// The last line of a successful run.
pub const ALL_PASSED: &str = "lockbench: all checks passed";

/// Starts the line the guest prints when a PV lock finds no PV-lock record
/// or no directed yield (no hypervisor, or one without them): the lock
/// then waits like a plain one.
pub const PV_UNAVAILABLE: &str =
    "lockbench: the PV lock has no preempted flag or no directed yield here";

/// `iterations=`: acquisitions per vCPU unless the command line says
/// otherwise. With a PV lock, 4 vCPUs on 2 pCPUs take about 2 s under
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
/// Most `duration-ms=`: a day (`cargo xtask soak` runs for minutes to
/// hours).
pub const MAX_DURATION_MS: u64 = 86_400_000;
/// Most `min-contended=`.
pub const MAX_MIN_CONTENDED: u64 = 1_000_000_000;
/// Most `costs=` rounds.
pub const MAX_COST_ROUNDS: u64 = 10_000_000;
/// With `seed=`: each iteration's private work is drawn within this many
/// percent of `private-work` either way.
pub const PRIVATE_WORK_SPREAD_PERCENT: u64 = 10;
/// With `seed=`: each vCPU waits up to this long, drawn at random, before
/// its first acquisition.
pub const MAX_START_OFFSET_US: u64 = 100;

/// Which lock the vCPUs share (`lock=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    /// `pv`: the queued lock ([`crate::lock::QueuedLock`]) with paravirtual
    /// waiting: directed yield to a preempted holder, sleeping waiters
    /// kicked by the unlocker, lock count.
    Pv,
    /// `pv-ticket`: the ticket lock with directed yield to the preempted
    /// vCPU whose turn it is, and lock count (no sleeping).
    PvTicket,
    /// `ticket`: the plain ticket lock, the baseline.
    Ticket,
}

impl LockKind {
    /// Every kind, in command-line order.
    pub const ALL: [LockKind; 3] = [LockKind::Pv, LockKind::PvTicket, LockKind::Ticket];

    /// The command-line word.
    pub const fn name(self) -> &'static str {
        match self {
            LockKind::Pv => "pv",
            LockKind::PvTicket => "pv-ticket",
            LockKind::Ticket => "ticket",
        }
    }

    /// Whether the lock uses the paravirtual services.
    pub const fn is_paravirt(self) -> bool {
        !matches!(self, LockKind::Ticket)
    }
}

/// What the command line asks for:
///
/// | word | meaning | default |
/// |---|---|---|
/// | `lock=pv\|pv-ticket\|ticket` | the PV queued lock, the PV ticket lock, or the plain ticket lock | `pv` |
/// | `iterations=N` | acquisitions per vCPU (1..=100000000) | [`DEFAULT_ITERATIONS`] |
/// | `duration-ms=N` | instead of `iterations`: every vCPU runs until N ms of counter time passed since the start (0..=86400000, a day; 0: use `iterations`) | 0 |
/// | `min-contended=N` | with `duration-ms`: past the duration, the run goes on until the vCPUs together made N contended acquisitions (hand-offs between vCPUs), or until `max-duration-ms` (0..=1000000000; 0: stop at the duration) | 0 |
/// | `max-duration-ms=N` | with `min-contended`: the longest the run goes on, since the start (0..=86400000; below `duration-ms`: `duration-ms`) | 0 |
/// | `cs-work=N` | mixing rounds inside the lock (1..=1000000) | [`DEFAULT_CS_WORK`] |
/// | `private-work=N` | mixing rounds between acquisitions (0..=1000000) | [`DEFAULT_PRIVATE_WORK`] |
/// | `spin-limit=N` | PV locks: spins between two looks at the awaited vCPU's flag (1..=1000000000) | [`crate::lock::DEFAULT_SPIN_LIMIT`] |
/// | `halt-after=N` | PV queued lock: looks after which a waiter sleeps until kicked although the awaited vCPU runs (1..=4294967295) | [`crate::lock::DEFAULT_HALT_AFTER`] |
/// | `steal=on\|off` | PV queued lock: a CPU that comes to the lock takes it past a waiter whose turn it is but who does not run | `on` |
/// | `first-hold-ms=N` | each vCPU's first critical sections (see `long-holds`) last at least N ms of counter time (0..=1000): longer than a time slice, their holder is preempted inside them for sure (with more vCPUs than pCPUs) | 0 |
/// | `long-holds=N` | how many of each vCPU's first critical sections `first-hold-ms` lengthens (1..=1000) | 1 |
/// | `costs=N` | first measure N null hypercalls and N directed-yield round trips between vCPUs 0 and 1 (0..=10000000; 0: skip) | 0 |
/// | `self-sgi=N` | after every N-th acquisition a vCPU sends itself SGI [`SELF_SGI`] and waits for it with WFI (0..=1000000; 0: never): a guest that wakes itself with interrupts, for the fair-share tests | 0 |
/// | `seed=N` | perturb the run, reproducibly: each vCPU draws, from N and its number, its start offset (up to [`MAX_START_OFFSET_US`]) and each iteration's private work (within [`PRIVATE_WORK_SPREAD_PERCENT`] of `private-work`); 0: no perturbation | 0 |
/// | `timeout=S` | seconds to wait for a vCPU to come online, and for all to finish (1..=3600) | 60 |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub lock: LockKind,
    pub iterations: u64,
    pub duration_ms: u64,
    pub min_contended: u64,
    pub max_duration_ms: u64,
    pub cs_work: u64,
    pub private_work: u64,
    pub spin_limit: u32,
    pub halt_after: u32,
    pub steal: bool,
    pub first_hold_ms: u64,
    pub long_holds: u64,
    pub costs: u64,
    pub self_sgi: u64,
    pub seed: u64,
    pub timeout_secs: u64,
}

/// The SGI a vCPU sends itself with `self-sgi=N`.
pub const SELF_SGI: u32 = 2;

impl Default for Settings {
    fn default() -> Self {
        Self {
            lock: LockKind::Pv,
            iterations: DEFAULT_ITERATIONS,
            duration_ms: 0,
            min_contended: 0,
            max_duration_ms: 0,
            cs_work: DEFAULT_CS_WORK,
            private_work: DEFAULT_PRIVATE_WORK,
            spin_limit: crate::lock::DEFAULT_SPIN_LIMIT,
            halt_after: crate::lock::DEFAULT_HALT_AFTER,
            steal: true,
            first_hold_ms: 0,
            long_holds: 1,
            costs: 0,
            self_sgi: 0,
            seed: 0,
            timeout_secs: 60,
        }
    }
}

impl Settings {
    /// Reads the words of the table above; absent words take their default.
    pub fn from_bootargs<'a>(args: &BootArgs<'a>) -> Result<Self, ArgError<'a>> {
        let d = Self::default();
        const NAMES: [&str; 3] = [
            LockKind::ALL[0].name(),
            LockKind::ALL[1].name(),
            LockKind::ALL[2].name(),
        ];
        let lock = match args.choice("lock", &NAMES)? {
            Some(word) => LockKind::ALL
                .into_iter()
                .find(|k| k.name() == word)
                .unwrap_or(d.lock),
            None => d.lock,
        };
        let spin_limit = args.number("spin-limit", d.spin_limit.into(), 1, 1_000_000_000)?;
        let halt_after = args.number("halt-after", d.halt_after.into(), 1, u32::MAX.into())?;
        let steal = match args.choice("steal", &["on", "off"])? {
            Some(word) => word == "on",
            None => d.steal,
        };
        Ok(Self {
            lock,
            iterations: args.number("iterations", d.iterations, 1, MAX_ITERATIONS)?,
            duration_ms: args.number("duration-ms", d.duration_ms, 0, MAX_DURATION_MS)?,
            min_contended: args.number("min-contended", d.min_contended, 0, MAX_MIN_CONTENDED)?,
            max_duration_ms: args.number(
                "max-duration-ms",
                d.max_duration_ms,
                0,
                MAX_DURATION_MS,
            )?,
            cs_work: args.number("cs-work", d.cs_work, 1, MAX_WORK)?,
            private_work: args.number("private-work", d.private_work, 0, MAX_WORK)?,
            // In range by the bounds just checked.
            spin_limit: u32::try_from(spin_limit).unwrap_or(u32::MAX),
            halt_after: u32::try_from(halt_after).unwrap_or(u32::MAX),
            steal,
            first_hold_ms: args.number("first-hold-ms", d.first_hold_ms, 0, 1000)?,
            long_holds: args.number("long-holds", d.long_holds, 1, 1000)?,
            costs: args.number("costs", d.costs, 0, MAX_COST_ROUNDS)?,
            self_sgi: args.number("self-sgi", d.self_sgi, 0, 1_000_000)?,
            seed: args.number("seed", d.seed, 0, u64::MAX)?,
            timeout_secs: args.number("timeout", d.timeout_secs, 1, 3600)?,
        })
    }
}

impl fmt::Display for Settings {
    /// The command-line words, every one: `lock=pv iterations=4000 ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lock={} iterations={} duration-ms={} min-contended={} max-duration-ms={} cs-work={} \
             private-work={} spin-limit={} halt-after={} steal={} first-hold-ms={} long-holds={} \
             costs={} self-sgi={} seed={} timeout={}",
            self.lock.name(),
            self.iterations,
            self.duration_ms,
            self.min_contended,
            self.max_duration_ms,
            self.cs_work,
            self.private_work,
            self.spin_limit,
            self.halt_after,
            if self.steal { "on" } else { "off" },
            self.first_hold_ms,
            self.long_holds,
            self.costs,
            self.self_sgi,
            self.seed,
            self.timeout_secs
        )
    }
}

/// One step of the mixing loop (xorshift64 plus a counter): a chain of
/// dependent ALU instructions the compiler cannot fold or vectorise.
#[inline(always)]
fn mix(x: u64, i: u64) -> u64 {
    prng::xorshift64(x).wrapping_add(i)
}

/// `work` rounds of the mixing loop on a vCPU's own state, outside the lock.
pub fn private_work(state: u64, work: u64) -> u64 {
    let mut x = state;
    for i in 0..work {
        x = mix(core::hint::black_box(x), i);
    }
    x
}

/// A vCPU's draws under `seed=` (see [`Settings`]): none without a seed.
#[derive(Clone, Debug)]
pub struct Perturbation {
    rng: Option<prng::Rng>,
    private_work: u64,
}

impl Perturbation {
    /// vCPU `cpu`'s draws for a run with `settings`.
    pub fn new(settings: &Settings, cpu: usize) -> Self {
        let rng = (settings.seed != 0).then(|| {
            // Distinct, reproducible streams per (seed, vCPU).
            prng::Rng::new(prng::xorshift64(
                settings.seed ^ (cpu as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ))
        });
        Self {
            rng,
            private_work: settings.private_work,
        }
    }

    /// How long to wait before the first acquisition, in microseconds.
    pub fn start_offset_us(&mut self) -> u64 {
        self.rng
            .as_mut()
            .map_or(0, |r| r.below(MAX_START_OFFSET_US + 1))
    }

    /// The private work of the next iteration.
    pub fn private_work(&mut self) -> u64 {
        let w = self.private_work;
        match self.rng.as_mut() {
            None => w,
            Some(r) => {
                let spread = w * PRIVATE_WORK_SPREAD_PERCENT / 100;
                w - spread + r.below(2 * spread + 1)
            }
        }
    }
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
    /// [`DataLine`] when it passed, else `lockbench: data: FAILED: ...`.
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

/// `lockbench: data ok: 8000 acquisitions, 0 lost updates`.
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

/// `lockbench: yields: 120 calls, 97 yielded, 40 halts, 38 kicks`: the
/// directed-yield calls the waiters made and how many the hypervisor
/// answered YIELDED, the times a waiter slept until kicked, and the kicks
/// the unlockers sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct YieldLine {
    pub calls: u64,
    pub yielded: u64,
    pub halts: u64,
    pub kicks: u64,
}

impl YieldLine {
    const TEXT: &'static str = " yields: ";

    /// Finds the line anywhere in `line` (a hypervisor may prefix it).
    pub fn parse(line: &str) -> Option<Self> {
        let at = line.find(PREFIX)? + PREFIX.len();
        let rest = line[at..].strip_prefix(Self::TEXT)?;
        let (calls, rest) = rest.split_once(" calls, ")?;
        let (yielded, rest) = rest.split_once(" yielded, ")?;
        let (halts, rest) = rest.split_once(" halts, ")?;
        let (kicks, _) = rest.split_once(" kicks")?;
        Some(Self {
            calls: calls.parse().ok()?,
            yielded: yielded.parse().ok()?,
            halts: halts.parse().ok()?,
            kicks: kicks.parse().ok()?,
        })
    }
}

impl fmt::Display for YieldLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}{} calls, {} yielded, {} halts, {} kicks",
            Self::TEXT,
            self.calls,
            self.yielded,
            self.halts,
            self.kicks
        )
    }
}

/// `lockbench: result: lock=pv vcpus=4 acquisitions=40000 contended=3100
/// elapsed-ns=2383237000 worst-wait-ns=30105000`: the run's figures in
/// counter time, for `cargo xtask bench` (nanoseconds of counter time;
/// under QEMU with `-icount shift=0` one nanosecond is one instruction).
/// `contended` counts the acquisitions that found the lock taken: the
/// hand-offs between vCPUs that decide a contended figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResultLine {
    pub lock: LockKind,
    pub vcpus: u64,
    pub acquisitions: u64,
    pub contended: u64,
    pub elapsed_ns: u64,
    pub worst_wait_ns: u64,
}

impl ResultLine {
    const TEXT: &'static str = " result: ";

    /// Acquisitions per second of counter time (0 for an empty run).
    pub fn per_second(&self) -> f64 {
        if self.elapsed_ns == 0 {
            0.0
        } else {
            self.acquisitions as f64 * 1e9 / self.elapsed_ns as f64
        }
    }

    /// Finds the line anywhere in `line`.
    pub fn parse(line: &str) -> Option<Self> {
        let at = line.find(PREFIX)? + PREFIX.len();
        let rest = line[at..].strip_prefix(Self::TEXT)?;
        let mut words = rest.split_whitespace();
        let mut field = |key: &str| words.next()?.strip_prefix(key)?.strip_prefix('=');
        let lock = field("lock")?;
        let lock = LockKind::ALL.into_iter().find(|k| k.name() == lock)?;
        Some(Self {
            lock,
            vcpus: field("vcpus")?.parse().ok()?,
            acquisitions: field("acquisitions")?.parse().ok()?,
            contended: field("contended")?.parse().ok()?,
            elapsed_ns: field("elapsed-ns")?.parse().ok()?,
            worst_wait_ns: field("worst-wait-ns")?.parse().ok()?,
        })
    }
}

impl fmt::Display for ResultLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}lock={} vcpus={} acquisitions={} contended={} elapsed-ns={} \
             worst-wait-ns={}",
            Self::TEXT,
            self.lock.name(),
            self.vcpus,
            self.acquisitions,
            self.contended,
            self.elapsed_ns,
            self.worst_wait_ns
        )
    }
}

/// The start of one vCPU's line, `lockbench: vcpu 2: 9000 acquisitions,
/// 8100 contended, ...` (the rest is for people): what a fairness figure
/// needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VcpuLine {
    pub cpu: u64,
    pub acquisitions: u64,
    pub contended: u64,
}

impl VcpuLine {
    const TEXT: &'static str = " vcpu ";

    /// Finds the line anywhere in `line` (a hypervisor may prefix it).
    pub fn parse(line: &str) -> Option<Self> {
        let at = line.find(PREFIX)? + PREFIX.len();
        let rest = line[at..].strip_prefix(Self::TEXT)?;
        let (cpu, rest) = rest.split_once(": ")?;
        let (acquisitions, rest) = rest.split_once(" acquisitions, ")?;
        let (contended, _) = rest.split_once(" contended")?;
        Some(Self {
            cpu: cpu.parse().ok()?,
            acquisitions: acquisitions.parse().ok()?,
            contended: contended.parse().ok()?,
        })
    }
}

impl fmt::Display for VcpuLine {
    /// The line's start; the guest goes on after it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}{}: {} acquisitions, {} contended",
            Self::TEXT,
            self.cpu,
            self.acquisitions,
            self.contended
        )
    }
}

/// `lockbench: cost: rounds=100000 null-hypercall-ns=1234567 yield-round-trip-ns=...
/// yields=200000`: `rounds` SMCCC_VERSION calls took `null-hypercall-ns`
/// of counter time; `rounds` directed-yield round trips between vCPUs 0
/// and 1 (0 yields to 1, which yields back) took `yield-round-trip-ns` and
/// made `yields` successful yields (2 per round trip when both vCPUs share
/// a pCPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostLine {
    pub rounds: u64,
    pub null_hypercall_ns: u64,
    pub yield_round_trip_ns: u64,
    pub yields: u64,
}

impl CostLine {
    const TEXT: &'static str = " cost: ";

    /// Counter time of one null hypercall, in ns (None without rounds).
    pub fn per_hypercall_ns(&self) -> Option<f64> {
        (self.rounds > 0).then(|| self.null_hypercall_ns as f64 / self.rounds as f64)
    }

    /// Counter time of one directed yield that switched vCPUs, in ns: a
    /// round trip is two of them (None without successful yields).
    pub fn per_switch_ns(&self) -> Option<f64> {
        (self.yields > 0).then(|| self.yield_round_trip_ns as f64 / self.yields as f64)
    }

    /// Finds the line anywhere in `line`.
    pub fn parse(line: &str) -> Option<Self> {
        let at = line.find(PREFIX)? + PREFIX.len();
        let rest = line[at..].strip_prefix(Self::TEXT)?;
        let mut words = rest.split_whitespace();
        let mut field = |key: &str| -> Option<u64> {
            words
                .next()?
                .strip_prefix(key)?
                .strip_prefix('=')?
                .parse()
                .ok()
        };
        Some(Self {
            rounds: field("rounds")?,
            null_hypercall_ns: field("null-hypercall-ns")?,
            yield_round_trip_ns: field("yield-round-trip-ns")?,
            yields: field("yields")?,
        })
    }
}

impl fmt::Display for CostLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}rounds={} null-hypercall-ns={} yield-round-trip-ns={} yields={}",
            Self::TEXT,
            self.rounds,
            self.null_hypercall_ns,
            self.yield_round_trip_ns,
            self.yields
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
            "lock=ticket iterations=10 cs-work=5 private-work=0 spin-limit=7 first-hold-ms=9 \
             long-holds=3",
        )
        .unwrap();
        assert_eq!(s.lock, LockKind::Ticket);
        assert_eq!(
            (
                s.iterations,
                s.cs_work,
                s.private_work,
                s.spin_limit,
                s.first_hold_ms,
                s.long_holds
            ),
            (10, 5, 0, 7, 9, 3)
        );
        assert_eq!(
            settings("lock=mcs").unwrap_err().to_string(),
            "lock=mcs: must be one of pv, pv-ticket, ticket"
        );
        assert_eq!(settings("lock=pv-ticket").unwrap().lock, LockKind::PvTicket);
        let s = settings("duration-ms=250 halt-after=3 costs=1000").unwrap();
        assert_eq!((s.duration_ms, s.halt_after, s.costs), (250, 3, 1000));
        assert!(settings("halt-after=0").is_err());
        assert!(!settings("steal=off").unwrap().steal);
        assert!(settings("steal=on").unwrap().steal);
        assert!(settings("steal=yes").is_err());
        assert!(settings("duration-ms=86400000").is_ok());
        assert!(settings("duration-ms=86400001").is_err());
        let s = settings("duration-ms=200 min-contended=200 max-duration-ms=600").unwrap();
        assert_eq!((s.min_contended, s.max_duration_ms), (200, 600));
        assert!(settings("min-contended=1000000001").is_err());
        assert!(settings("max-duration-ms=86400001").is_err());
        assert!(settings("iterations=0").is_err());
        assert!(settings("cs-work=0").is_err());
        assert!(settings("spin-limit=0").is_err());
        assert!(settings("first-hold-ms=1001").is_err());
        assert!(settings("long-holds=0").is_err());
        assert!(settings("long-holds=1001").is_err());
        assert_eq!(settings("self-sgi=7").unwrap().self_sgi, 7);
        assert!(settings("self-sgi=1000001").is_err());
        // The words round-trip.
        let s = settings("lock=ticket iterations=3 steal=off seed=18446744073709551615 timeout=9")
            .unwrap();
        assert_eq!(s.seed, u64::MAX);
        assert_eq!(settings(&s.to_string()).unwrap(), s);
        assert_eq!(
            Settings::default().to_string(),
            "lock=pv iterations=10000 duration-ms=0 min-contended=0 max-duration-ms=0 cs-work=40 \
             private-work=40 spin-limit=128 halt-after=64 steal=on first-hold-ms=0 long-holds=1 \
             costs=0 self-sgi=0 seed=0 timeout=60"
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
            "lockbench: data ok: 100 acquisitions, 0 lost updates"
        );
        // Fewer counted than reported: lost updates, and the line says so.
        let check = shared.check(103);
        assert!(!check.passed());
        assert_eq!(check.lost_updates(), 3);
        assert_eq!(
            check.to_string(),
            "lockbench: data: FAILED: 103 acquisitions, counters 100 and 100, 3 lost updates, \
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
    fn a_seed_perturbs_reproducibly_and_within_bounds() {
        let plain = Settings::default();
        let mut none = Perturbation::new(&plain, 3);
        assert_eq!(none.start_offset_us(), 0);
        assert!((0..100).all(|_| none.private_work() == plain.private_work));
        let seeded = Settings {
            seed: 7,
            private_work: 1000,
            ..plain
        };
        let draws = |cpu| {
            let mut p = Perturbation::new(&seeded, cpu);
            let offset = p.start_offset_us();
            let works: Vec<u64> = (0..1000).map(|_| p.private_work()).collect();
            (offset, works)
        };
        let (offset, works) = draws(0);
        assert_eq!(
            draws(0),
            (offset, works.clone()),
            "the same seed, the same run"
        );
        assert_ne!(draws(1).1, works, "each vCPU its own stream");
        assert!(offset <= MAX_START_OFFSET_US);
        assert!(
            works.iter().all(|&w| (900..=1100).contains(&w)),
            "{works:?}"
        );
        // The draws spread over the band, around its middle.
        let (low, high) = (works.iter().min(), works.iter().max());
        assert!(low < Some(&920) && high > Some(&1080), "{low:?} {high:?}");
        let mean = works.iter().sum::<u64>() as f64 / works.len() as f64;
        assert!((990.0..1010.0).contains(&mean), "{mean}");
        let offsets: Vec<u64> = (0..32)
            .map(|cpu| Perturbation::new(&seeded, cpu).start_offset_us())
            .collect();
        assert!(offsets.iter().any(|&o| o != offsets[0]), "{offsets:?}");
    }

    #[test]
    fn lines_round_trip() {
        let data = DataLine {
            acquisitions: 8000,
            lost_updates: 0,
        };
        assert_eq!(
            data.to_string(),
            "lockbench: data ok: 8000 acquisitions, 0 lost updates"
        );
        assert_eq!(DataLine::parse(&format!("[vm0] {data}\r")), Some(data));
        let yields = YieldLine {
            calls: 120,
            yielded: 97,
            halts: 40,
            kicks: 38,
        };
        assert_eq!(
            yields.to_string(),
            "lockbench: yields: 120 calls, 97 yielded, 40 halts, 38 kicks"
        );
        assert_eq!(YieldLine::parse(&yields.to_string()), Some(yields));
        assert_eq!(
            YieldLine::parse("lockbench: yields: x calls, 1 yielded, 0 halts, 0 kicks"),
            None
        );
        let result = ResultLine {
            lock: LockKind::PvTicket,
            vcpus: 4,
            acquisitions: 40_000,
            contended: 3_100,
            elapsed_ns: 2_000_000_000,
            worst_wait_ns: 30_105_000,
        };
        assert_eq!(
            result.to_string(),
            "lockbench: result: lock=pv-ticket vcpus=4 acquisitions=40000 contended=3100 \
             elapsed-ns=2000000000 worst-wait-ns=30105000"
        );
        assert_eq!(ResultLine::parse(&format!("[vm0] {result}")), Some(result));
        assert_eq!(result.per_second(), 20_000.0);
        assert_eq!(
            ResultLine::parse(
                "lockbench: result: lock=mcs vcpus=4 acquisitions=1 contended=0 elapsed-ns=1 \
                 worst-wait-ns=1"
            ),
            None
        );
        // A line without the contended count is not a result.
        assert_eq!(
            ResultLine::parse(
                "lockbench: result: lock=pv vcpus=4 acquisitions=1 elapsed-ns=1 worst-wait-ns=1"
            ),
            None
        );
        let vcpu = VcpuLine {
            cpu: 2,
            acquisitions: 9000,
            contended: 8100,
        };
        let printed = format!("[vm0] {vcpu}, 12 looks (0 owner unknown, 3 preempted)\r");
        assert_eq!(VcpuLine::parse(&printed), Some(vcpu));
        assert_eq!(
            VcpuLine::parse("lockbench: vcpu x: 1 acquisitions, 0 contended"),
            None
        );
        let cost = CostLine {
            rounds: 1000,
            null_hypercall_ns: 123_000,
            yield_round_trip_ns: 900_000,
            yields: 2000,
        };
        assert_eq!(
            cost.to_string(),
            "lockbench: cost: rounds=1000 null-hypercall-ns=123000 yield-round-trip-ns=900000 \
             yields=2000"
        );
        assert_eq!(CostLine::parse(&cost.to_string()), Some(cost));
        assert_eq!(cost.per_hypercall_ns(), Some(123.0));
        assert_eq!(cost.per_switch_ns(), Some(450.0));
        let none = CostLine {
            yields: 0,
            rounds: 0,
            ..cost
        };
        assert_eq!(
            (none.per_hypercall_ns(), none.per_switch_ns()),
            (None, None)
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
