//! `cargo xtask run ... --sample MS`: where the physical CPUs' time goes,
//! by sampling their program counters through QEMU's monitor.
//!
//! QEMU gets a monitor on a Unix socket; a thread asks it for `info
//! registers -a` every MS milliseconds while the machine runs and keeps,
//! per physical CPU, the PC, the exception level (PSTATE) and X30. The
//! report splits the samples into el2 (EL2: the hypervisor, its idle loop
//! included), guest kernels (EL1) and guest user space (EL0), names the
//! guest-kernel functions from the kernel's `System.map` when the run
//! boots the project's Linux kernel (`--linux-pv`, `--linux-baseline`),
//! the el2 functions through `llvm-symbolizer`, and, for samples in a
//! spinlock slow path, the function they return to (X30): which lock a
//! convoy is on.
//!
//! What a sample is worth: QEMU answers the monitor between translation
//! blocks, so a PC is where a block starts (in a spin loop, the loop), and
//! each poll stops every CPU for a moment; both blur the picture. One bias
//! moves it: the monitor holds QEMU's global lock while it reads the
//! registers, and under multi-threaded TCG a CPU that needs that lock at
//! that moment (to take an interrupt, or for a system register QEMU
//! treats as I/O: the GIC's CPU interface, the timers) waits at that
//! point, so el2's exception vectors and its timer and SGI writes are
//! over-counted — by how much depends on the polling interval, so compare
//! runs at the same one. The samples are kept in `target/xtask/samples.txt`,
//! one poll per line.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Where the guest kernels' addresses start (arm64 Linux's kernel half).
const KERNEL_HALF: u64 = 0xffff_0000_0000_0000;
/// How long the sampler waits for QEMU to create its monitor socket.
const SOCKET_WAIT: Duration = Duration::from_secs(60);
/// The monitor's prompt, which ends every answer.
const PROMPT: &str = "(qemu) ";
/// Lines per list in the report.
const TOP: usize = 15;

/// The exception level a sample was taken at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    El0,
    El1,
    El2,
    El3,
}

impl Level {
    /// From QEMU's `PSTATE=... EL1h` mode word.
    fn parse(mode: &str) -> Option<Level> {
        match mode.get(..3)? {
            "EL0" => Some(Level::El0),
            "EL1" => Some(Level::El1),
            "EL2" => Some(Level::El2),
            "EL3" => Some(Level::El3),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Level::El0 => "guest user space (EL0)",
            Level::El1 => "guest kernel (EL1)",
            Level::El2 => "el2 (EL2)",
            Level::El3 => "firmware (EL3)",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Level::El0 => "EL0",
            Level::El1 => "EL1",
            Level::El2 => "EL2",
            Level::El3 => "EL3",
        }
    }
}

/// One physical CPU at one poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSample {
    pub cpu: usize,
    pub pc: u64,
    pub level: Level,
    /// X30, the link register: the caller of a leaf function.
    pub lr: u64,
}

/// The CPUs of one `info registers -a` answer (QEMU 7.2's format: a
/// `CPU#N` line, then ` PC=... X00=...` lines, `X30=...`, and `PSTATE=%08x
/// NZCV ELnx`); CPUs without a PC or mode are left out.
pub fn parse_registers(answer: &str) -> Vec<CpuSample> {
    let field = |text: &str, name: &str| -> Option<u64> {
        let at = text.find(name)? + name.len();
        let hex: String = text[at..]
            .chars()
            .take_while(char::is_ascii_hexdigit)
            .collect();
        u64::from_str_radix(&hex, 16).ok()
    };
    answer
        .split("CPU#")
        .skip(1)
        .filter_map(|block| {
            let cpu = block
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .ok()?;
            let pc = field(block, " PC=")?;
            let lr = field(block, "X30=").unwrap_or(0);
            let pstate = block.find("PSTATE=")?;
            let mode = block[pstate..].split_whitespace().nth(2)?;
            Some(CpuSample {
                cpu,
                pc,
                level: Level::parse(mode)?,
                lr,
            })
        })
        .collect()
}

/// Reads from the monitor until its prompt ends what it has to say.
fn read_answer(stream: &mut UnixStream) -> std::io::Result<String> {
    let mut answer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        answer.extend_from_slice(&chunk[..n]);
        if answer.ends_with(PROMPT.as_bytes()) {
            return Ok(String::from_utf8_lossy(&answer).into_owned());
        }
    }
}

/// The sampling thread of one run.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Vec<CpuSample>>>,
}

impl Sampler {
    /// The QEMU arguments that give the sampler its monitor at `socket`.
    pub fn qemu_args(socket: &Path) -> [String; 2] {
        [
            "-monitor".into(),
            format!("unix:{},server,nowait", socket.display()),
        ]
    }

    /// Starts polling the monitor at `socket` (once QEMU has made it)
    /// every `interval`, until QEMU goes or [`Sampler::finish`].
    pub fn start(socket: PathBuf, interval: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut polls = Vec::new();
            let start = Instant::now();
            let mut stream = loop {
                if stopped.load(Ordering::Relaxed) || start.elapsed() > SOCKET_WAIT {
                    return polls;
                }
                match UnixStream::connect(&socket) {
                    Ok(stream) => break stream,
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            };
            if read_answer(&mut stream).is_err() {
                return polls;
            }
            while !stopped.load(Ordering::Relaxed) {
                if stream.write_all(b"info registers -a\n").is_err() {
                    break;
                }
                match read_answer(&mut stream) {
                    Ok(answer) => polls.push(parse_registers(&answer)),
                    Err(_) => break,
                }
                std::thread::sleep(interval);
            }
            polls
        });
        Sampler { stop, thread }
    }

    /// Stops sampling and returns every poll's CPUs.
    pub fn finish(self) -> Vec<Vec<CpuSample>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Function start addresses and names, sorted by address.
#[derive(Clone, Debug, Default)]
pub struct Symbols(Vec<(u64, String)>);

impl Symbols {
    /// The text symbols of a `System.map` (`address type name` lines).
    pub fn from_system_map(text: &str) -> Symbols {
        let mut symbols: Vec<(u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                let address = u64::from_str_radix(words.next()?, 16).ok()?;
                let kind = words.next()?;
                let name = words.next()?;
                matches!(kind, "t" | "T" | "w" | "W").then(|| (address, name.to_string()))
            })
            .collect();
        symbols.sort();
        Symbols(symbols)
    }

    /// The function `pc` is in: the last symbol at or below it.
    pub fn lookup(&self, pc: u64) -> Option<&str> {
        let at = self.0.partition_point(|(address, _)| *address <= pc);
        at.checked_sub(1).map(|i| self.0[i].1.as_str())
    }
}

/// Whether a guest function is a spinlock's (or rwlock's) slow path,
/// whose caller says which lock it spins on.
fn is_lock_slow_path(name: &str) -> bool {
    name.contains("queued_spin_lock_slowpath")
        || name.contains("queued_read_lock_slowpath")
        || name.contains("queued_write_lock_slowpath")
}

/// Counts per key, reported largest first.
#[derive(Default)]
struct Tally(BTreeMap<String, u64>);

impl Tally {
    fn add(&mut self, key: &str) {
        *self.0.entry(key.to_string()).or_default() += 1;
    }

    fn top(&self, n: usize) -> Vec<(&str, u64)> {
        let mut rows: Vec<(&str, u64)> = self.0.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        rows.truncate(n);
        rows
    }
}

/// What the report names el2's functions with: PC -> `leaf in function`.
pub type El2Names = BTreeMap<u64, String>;

/// The report over `polls`: shares by exception level, then the guest
/// kernel's functions (with `guest`), the lock slow paths' callers and
/// el2's functions (with `el2`).
pub fn report(polls: &[Vec<CpuSample>], guest: Option<&Symbols>, el2: &El2Names) -> String {
    let samples: Vec<&CpuSample> = polls.iter().flatten().collect();
    let total = samples.len() as u64;
    let mut out = String::new();
    let cpus = polls.iter().map(Vec::len).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "sample: {} polls of {cpus} physical CPUs, {total} samples",
        polls.len()
    );
    if total == 0 {
        return out;
    }
    let share = |n: u64| 100.0 * n as f64 / total as f64;
    let mut levels: BTreeMap<Level, u64> = BTreeMap::new();
    for s in &samples {
        *levels.entry(s.level).or_default() += 1;
    }
    for (level, n) in &levels {
        let _ = writeln!(out, "  {:<26} {n:>7} {:>6.1}%", level.name(), share(*n));
    }
    let mut section = |title: &str, tally: &Tally| {
        if tally.0.is_empty() {
            return;
        }
        let _ = writeln!(out, "{title}");
        for (name, n) in tally.top(TOP) {
            let _ = writeln!(out, "  {n:>7} {:>6.1}%  {name}", share(n));
        }
    };
    if let Some(symbols) = guest {
        let mut functions = Tally::default();
        let mut callers = Tally::default();
        for s in samples
            .iter()
            .filter(|s| s.level == Level::El1 && s.pc >= KERNEL_HALF)
        {
            let name = symbols.lookup(s.pc).unwrap_or("?");
            functions.add(name);
            if is_lock_slow_path(name) {
                callers.add(symbols.lookup(s.lr).unwrap_or("?"));
            }
        }
        section("guest kernel functions (share of all samples):", &functions);
        section(
            "callers (X30) of the guest kernel's lock slow-path samples:",
            &callers,
        );
    }
    let mut hypervisor = Tally::default();
    for s in samples.iter().filter(|s| s.level == Level::El2) {
        hypervisor.add(el2.get(&s.pc).map_or("?", String::as_str));
    }
    if !el2.is_empty() {
        section("el2 functions (share of all samples):", &hypervisor);
    }
    out
}

/// The samples as text, one poll per line: `cpu:level:pc:x30` per CPU.
pub fn raw(polls: &[Vec<CpuSample>]) -> String {
    let mut out = String::new();
    for poll in polls {
        let line: Vec<String> = poll
            .iter()
            .map(|s| format!("{}:{}:{:x}:{:x}", s.cpu, s.level.tag(), s.pc, s.lr))
            .collect();
        let _ = writeln!(out, "{}", line.join(" "));
    }
    out
}

/// el2's function at each EL2 PC of `polls`, through `llvm-symbolizer`
/// over `elf` loaded at `offset`: `innermost in outermost` when inlined.
pub fn el2_names(polls: &[Vec<CpuSample>], elf: &Path, offset: u64) -> Result<El2Names> {
    let mut pcs: Vec<u64> = polls
        .iter()
        .flatten()
        .filter(|s| s.level == Level::El2)
        .map(|s| s.pc)
        .collect();
    pcs.sort_unstable();
    pcs.dedup();
    if pcs.is_empty() {
        return Ok(El2Names::new());
    }
    let chains = crate::profile::frames(elf, offset, &pcs)
        .with_context(|| format!("cannot symbolize el2's PCs with {}", elf.display()))?;
    Ok(pcs
        .into_iter()
        .zip(chains)
        .map(|(pc, chain)| {
            let name = match (chain.first(), chain.last()) {
                (Some(outer), Some(inner)) if outer != inner => format!("{inner} in {outer}"),
                (Some(only), _) => only.clone(),
                _ => "?".to_string(),
            };
            (pc, name)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two CPUs as QEMU 7.2's `info registers -a` prints them, after the
    /// monitor's echo of the command.
    const ANSWER: &str = "info registers -a\r\n\r\nCPU#0\r\n PC=ffff8000800b1234 \
        X00=0000000000000001 X01=0000000000000000\r\nX29=ffff800082003d80 \
        X30=ffff8000801f0010  SP=ffff800082003d80\r\nPSTATE=200003c5 --C- EL1h  \
        SVCR=00000000 --  BTYPE=0\r\n\r\nCPU#1\r\n PC=0000000040097298 \
        X00=0000000000000000\r\nX30=00000000400887ac  SP=00000000400fa780\r\n\
        PSTATE=800003c8 N--- EL2t  SVCR=00000000\r\n(qemu) ";

    #[test]
    fn an_answer_gives_each_cpus_pc_level_and_link_register() {
        assert_eq!(
            parse_registers(ANSWER),
            [
                CpuSample {
                    cpu: 0,
                    pc: 0xffff_8000_800b_1234,
                    level: Level::El1,
                    lr: 0xffff_8000_801f_0010,
                },
                CpuSample {
                    cpu: 1,
                    pc: 0x4009_7298,
                    level: Level::El2,
                    lr: 0x4008_87ac,
                },
            ]
        );
        // A CPU whose mode is unreadable is left out, not guessed.
        let garbled = ANSWER.replace("EL2t", "??");
        assert_eq!(parse_registers(&garbled).len(), 1);
        assert!(parse_registers("(qemu) ").is_empty());
    }

    #[test]
    fn a_pc_is_in_the_last_text_symbol_at_or_below_it() {
        let symbols = Symbols::from_system_map(
            "ffff800080010000 T _text\nffff800080020000 t queued_spin_lock_slowpath\n\
             ffff800080020400 D some_data\nffff800080030000 T folio_batch_move_lru\n",
        );
        assert_eq!(
            symbols.lookup(0xffff_8000_8002_0010),
            Some("queued_spin_lock_slowpath")
        );
        // Data symbols do not end a function.
        assert_eq!(
            symbols.lookup(0xffff_8000_8002_0500),
            Some("queued_spin_lock_slowpath")
        );
        assert_eq!(
            symbols.lookup(0xffff_8000_8003_0000),
            Some("folio_batch_move_lru")
        );
        assert_eq!(symbols.lookup(0x1000), None);
    }

    #[test]
    fn the_report_splits_levels_and_names_the_locks_callers() {
        let symbols = Symbols::from_system_map(
            "ffff800080020000 t queued_spin_lock_slowpath\n\
             ffff800080030000 T folio_batch_move_lru\nffff800080040000 T do_idle\n",
        );
        let spin = |cpu| CpuSample {
            cpu,
            pc: 0xffff_8000_8002_0040,
            level: Level::El1,
            lr: 0xffff_8000_8003_0100,
        };
        let el2 = CpuSample {
            cpu: 1,
            pc: 0x4009_7298,
            level: Level::El2,
            lr: 0,
        };
        let user = CpuSample {
            cpu: 0,
            pc: 0x40_0000,
            level: Level::El0,
            lr: 0,
        };
        let polls = vec![vec![spin(0), el2], vec![spin(0), spin(1)], vec![user, el2]];
        let names: El2Names = [(0x4009_7298, "wait_for_interrupt in idle".to_string())].into();
        let text = report(&polls, Some(&symbols), &names);
        assert!(
            text.contains("3 polls of 2 physical CPUs, 6 samples"),
            "{text}"
        );
        assert!(
            text.contains("guest kernel (EL1)               3   50.0%"),
            "{text}"
        );
        assert!(
            text.contains("el2 (EL2)                        2   33.3%"),
            "{text}"
        );
        assert!(
            text.contains("guest user space (EL0)           1   16.7%"),
            "{text}"
        );
        assert!(
            text.contains("3   50.0%  queued_spin_lock_slowpath"),
            "{text}"
        );
        let callers = text.split("callers (X30)").nth(1).unwrap();
        assert!(
            callers.contains("3   50.0%  folio_batch_move_lru"),
            "{text}"
        );
        assert!(
            text.contains("2   33.3%  wait_for_interrupt in idle"),
            "{text}"
        );
        // Without symbols, only the levels.
        let bare = report(&polls, None, &El2Names::new());
        assert!(!bare.contains("functions"), "{bare}");
        assert_eq!(
            raw(&polls[..1]).trim(),
            "0:EL1:ffff800080020040:ffff800080030100 1:EL2:40097298:0"
        );
    }
}
