//! `cargo xtask profile`: where the cost run's instructions go, per
//! source function, exactly.
//!
//! The cost run (`bench::cost_test`: null hypercalls, then directed-yield
//! round trips between two vCPUs on one pCPU) runs under icount with
//! QEMU's `-d exec,nochain,in_asm`: with chaining off QEMU logs every
//! translation block it executes (`Trace ...` lines) and, the first time,
//! the block's instructions (`IN:` blocks). Summing each execution's
//! instructions by guest address, over the window between the second and
//! the last execution of an operation's marker function, and dividing by
//! the operations in it gives the instructions per operation; the EL2
//! ones are then attributed to el2's source functions, inlined frames
//! included, through `llvm-symbolizer`. Under icount one instruction is
//! one nanosecond, so the totals match the guest's own cost line.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, Result, bail, ensure};

use crate::Workspace;
use crate::bench::{self, Bench};
use crate::cli::ProfileOpts;
use crate::image;
use crate::setup::{self, Tool};

/// The symbolizer `Tool::Symbolizer` installs.
pub const SYMBOLIZER: &str = "llvm-symbolizer";
/// Lists el2's symbols, to find the markers.
pub const NM: &str = "llvm-nm";

/// What the guest prints once both operations are measured
/// (`guest_driver::lockbench::CostLine`).
const COST_LINE: &str = "lockbench: cost:";

/// One operation the cost run repeats, found by a function it runs once
/// per operation.
struct Operation {
    name: &'static str,
    /// A substring of the marker's demangled symbol.
    marker: &'static str,
}

const OPERATIONS: [Operation; 2] = [
    Operation {
        name: "null hypercall (answered in the exit vector)",
        marker: "resume_caller_saved",
    },
    Operation {
        name: "directed yield + vCPU switch",
        marker: "el2::sched::Scheduler::yield_to",
    },
];

/// One `Trace` line: the host address of the translated block (the key
/// of its `IN:` block), the guest PC it starts at and its TB flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Executed<'a> {
    block: &'a str,
    pc: u64,
    flags: u32,
}

/// Parses QEMU 7.2's `Trace %d: %p [%016lx/%016lx/%08x/%08x] %s` (cs_base,
/// pc, flags, cflags).
fn parse_trace(line: &str) -> Option<Executed<'_>> {
    let rest = line.strip_prefix("Trace ")?;
    let mut words = rest.split_whitespace();
    let _cpu = words.next()?;
    let block = words.next()?;
    let fields = words.next()?.strip_prefix('[')?.strip_suffix(']')?;
    let mut f = fields.split('/');
    let _cs_base = f.next()?;
    let pc = u64::from_str_radix(f.next()?, 16).ok()?;
    let flags = u32::from_str_radix(f.next()?, 16).ok()?;
    Some(Executed { block, pc, flags })
}

/// The address and the disassembly of one instruction line of an `IN:`
/// block (`0x40080000:  91005a4d  add x13, x18, #0x16`).
fn parse_instruction(line: &str) -> Option<(u64, &str)> {
    let (address, rest) = line.strip_prefix("0x")?.split_once(':')?;
    let address = u64::from_str_radix(address, 16).ok()?;
    let rest = rest.trim_start();
    // The encoding, then the mnemonic and its operands.
    let text = rest.split_once(char::is_whitespace).map_or("", |(_, t)| t);
    Some((address, text.trim()))
}

/// Whether a block with these TB flags runs in el2's own translation
/// regime: QEMU 7.2 keeps the MMU index in TBFLAG_ANY.MMUIDX (bits 4..8),
/// and ARMMMUIdx_E2 (the non-VHE EL2 regime) is core index 6.
fn runs_at_el2(flags: u32) -> bool {
    (flags >> 4) & 0xf == 6
}

/// Instructions executed between the second and the last execution of
/// `marker` (a guest PC), by guest PC for EL2 and in total for the rest.
#[derive(Debug, Default, PartialEq, Eq)]
struct Window {
    el2: HashMap<u64, u64>,
    /// The disassembly of each EL2 instruction in `el2`, as QEMU printed
    /// it when it translated the instruction's block.
    text: HashMap<u64, String>,
    guest: u64,
    /// Operations in the window: the marker's executions in it.
    operations: u64,
    /// Counting pass: the instructions executed (all levels) before each
    /// of the marker's executions.
    times: Vec<u64>,
}

/// Reads the trace twice: once for when each marker ran, once to count
/// each one's steady window ([`steady_window`]).
fn measure(trace: &Path, markers: &[u64]) -> Result<Vec<Window>> {
    let counted = scan(trace, markers, None)?;
    let mut windows = Vec::new();
    for (marker, c) in markers.iter().zip(&counted) {
        let window = steady_window(&c.times).with_context(|| {
            format!(
                "the marker at {marker:#x} ran {} times in {}, never in a steady loop",
                c.times.len(),
                trace.display()
            )
        })?;
        windows.push(window);
    }
    scan(trace, markers, Some(&windows))
}

/// The operations of the cost run's loop, from when the marker ran
/// (`times`: instructions executed before each of its executions): the
/// longest run of consecutive executions no more than twice the median
/// interval apart, less its first interval (where blocks are translated
/// the first time and caches warm). Other executions — the guest's probes
/// before the loop, a call after it — fall outside. As `[from, to)` of
/// the marker's execution count (1 after its first execution), so that
/// `to - from` operations are counted.
fn steady_window(times: &[u64]) -> Option<(u64, u64)> {
    let gaps: Vec<u64> = times
        .windows(2)
        .map(|t| t[1].saturating_sub(t[0]))
        .collect();
    let mut sorted = gaps.clone();
    sorted.sort_unstable();
    let median = *sorted.get(sorted.len() / 2)?;
    let (mut best, mut start) = ((0, 0), 0);
    for (i, &gap) in gaps.iter().enumerate() {
        if gap > median.saturating_mul(2) {
            start = i + 1;
        } else if i + 1 - start > best.1 - best.0 {
            best = (start, i + 1);
        }
    }
    // Gaps best.0 + 1 .. best.1; gap i is counted while the count is i + 1.
    let (from, to) = (best.0 as u64 + 2, best.1 as u64 + 1);
    (to > from).then_some((from, to))
}

/// One pass: counts each marker's executions (`windows: None`), or the
/// instructions of the blocks executed while a marker's execution count
/// is in its `[from, to)`.
fn scan(trace: &Path, markers: &[u64], windows: Option<&[(u64, u64)]>) -> Result<Vec<Window>> {
    let file = File::open(trace).with_context(|| format!("cannot open {}", trace.display()))?;
    count(BufReader::with_capacity(1 << 20, file), markers, windows)
        .with_context(|| format!("reading {}", trace.display()))
}

fn count(
    mut reader: impl BufRead,
    markers: &[u64],
    windows: Option<&[(u64, u64)]>,
) -> Result<Vec<Window>> {
    // Host block address -> its instructions' PCs and whether it is EL2.
    let mut blocks: HashMap<u64, (Vec<u64>, bool)> = HashMap::new();
    let mut translating: Option<Vec<u64>> = None;
    let mut texts: HashMap<u64, String> = HashMap::new();
    let mut seen = vec![0u64; markers.len()];
    let mut out: Vec<Window> = markers.iter().map(|_| Window::default()).collect();
    let mut line = String::new();
    let mut executed = 0u64;
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        if line.starts_with("IN:") {
            translating = Some(Vec::new());
        } else if let Some((pc, text)) = parse_instruction(&line) {
            if let Some(pcs) = translating.as_mut() {
                pcs.push(pc);
                texts.entry(pc).or_insert_with(|| text.to_string());
            }
        } else if let Some(e) = parse_trace(&line) {
            let Some(block) = e
                .block
                .strip_prefix("0x")
                .and_then(|b| u64::from_str_radix(b, 16).ok())
            else {
                continue;
            };
            // A block's `IN:` lines come just before its first execution.
            if let Some(pcs) = translating.take() {
                blocks.insert(block, (pcs, runs_at_el2(e.flags)));
            }
            let Some((pcs, el2)) = blocks.get(&block) else {
                continue;
            };
            for ((marker, seen), w) in markers.iter().zip(seen.iter_mut()).zip(out.iter_mut()) {
                if e.pc == *marker {
                    *seen += 1;
                    if windows.is_none() {
                        w.times.push(executed);
                    }
                }
            }
            executed += pcs.len() as u64;
            let Some(windows) = windows else { continue };
            for ((w, &(from, to)), &seen) in out.iter_mut().zip(windows).zip(&seen) {
                if seen < from || seen >= to {
                    continue;
                }
                if *el2 {
                    for &pc in pcs {
                        *w.el2.entry(pc).or_default() += 1;
                    }
                } else {
                    w.guest += pcs.len() as u64;
                }
            }
        }
    }
    for (i, w) in out.iter_mut().enumerate() {
        w.text = w
            .el2
            .keys()
            .filter_map(|pc| Some((*pc, texts.get(pc)?.clone())))
            .collect();
        w.operations = match windows {
            None => seen[i],
            Some(windows) => windows[i].1.min(seen[i]).saturating_sub(windows[i].0),
        };
    }
    Ok(out)
}

/// Makes a Rust legacy-mangled name that the symbolizer left partly
/// encoded readable, and drops the hash and generic arguments.
fn tidy(name: &str) -> String {
    let mut s = name.trim_start_matches('_').to_string();
    for (code, text) in [
        ("$LT$", "<"),
        ("$GT$", ">"),
        ("$u20$", " "),
        ("$C$", ","),
        ("$RF$", "&"),
        ("$BP$", "*"),
        ("$u7b$", "{"),
        ("$u7d$", "}"),
        ("..", "::"),
    ] {
        s = s.replace(code, text);
    }
    if let Some(at) = s.rfind("::h")
        && s.len() - at == 19
        && s[at + 3..].bytes().all(|b| b.is_ascii_hexdigit())
    {
        s.truncate(at);
    }
    // Generic arguments go, innermost first; a qualified path
    // (`<Hardware as Machine>`) stays, its brackets set aside meanwhile.
    const OPEN: char = '\u{1}';
    const CLOSE: char = '\u{2}';
    while let Some(close) = s.find('>') {
        let Some(open) = s[..close].rfind('<') else {
            break;
        };
        if s[open..close].contains(" as ") {
            s.replace_range(close..=close, &CLOSE.to_string());
            s.replace_range(open..=open, &OPEN.to_string());
        } else {
            s.replace_range(open..=close, "");
        }
    }
    let s = s.replace(OPEN, "<").replace(CLOSE, ">");
    // The crate's own paths without `el2::` (not `esr_el2::`).
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(at) = rest.find("el2::") {
        let starts_a_path = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        out.push_str(&rest[..at]);
        if !starts_a_path {
            out.push_str("el2::");
        }
        rest = &rest[at + "el2::".len()..];
    }
    out.push_str(rest);
    out
}

/// What the symbolizer says of one PC.
#[derive(Debug)]
struct Symbolized {
    /// The inlined call chain, outermost first.
    chain: Vec<String>,
    /// The innermost frame's source line (`file:line`, the path from its
    /// `src/` on).
    line: String,
}

/// The inlined call chain at each PC (outermost first), from
/// `llvm-symbolizer -f -i -C`.
pub(crate) fn frames(elf: &Path, offset: u64, pcs: &[u64]) -> Result<Vec<Vec<String>>> {
    Ok(symbolize(elf, offset, pcs)?
        .into_iter()
        .map(|s| s.chain)
        .collect())
}

/// [`frames`], with the innermost frame's source line.
fn symbolize(elf: &Path, offset: u64, pcs: &[u64]) -> Result<Vec<Symbolized>> {
    let mut child = Command::new(SYMBOLIZER)
        .arg(format!("--obj={}", elf.display()))
        .args(["-f", "-i", "-C"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {SYMBOLIZER}"))?;
    let input: String = pcs
        .iter()
        .map(|pc| format!("{:#x}\n", pc.wrapping_sub(offset)))
        .collect();
    let mut stdin = child.stdin.take().context("no stdin")?;
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output()?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("writer panicked"))??;
    ensure!(output.status.success(), "{SYMBOLIZER} failed");
    let text = String::from_utf8_lossy(&output.stdout);
    let chains: Vec<Symbolized> = text
        .trim_end()
        .split("\n\n")
        .map(|block| {
            let lines: Vec<&str> = block.lines().collect();
            // Pairs of (function, file:line:column), innermost first.
            let mut chain: Vec<String> = lines.iter().step_by(2).map(|f| tidy(f)).collect();
            chain.reverse();
            let line = lines.get(1).map_or_else(String::new, |l| source_line(l));
            Symbolized { chain, line }
        })
        .collect();
    ensure!(
        chains.len() == pcs.len(),
        "{SYMBOLIZER} answered {} addresses for {}",
        chains.len(),
        pcs.len()
    );
    Ok(chains)
}

/// `file:line` of the symbolizer's `/path/to/file.rs:line:column`, the
/// path cut to what follows its last `/src/` (or to the file name); empty
/// where the symbolizer knows no line (`??`).
fn source_line(location: &str) -> String {
    // No line information (the assembly of the vectors): nothing.
    if location.starts_with("??") {
        return String::new();
    }
    let numeric = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let without_column = match location.rsplit_once(':') {
        Some((rest, column))
            if numeric(column) && rest.rsplit_once(':').is_some_and(|(_, l)| numeric(l)) =>
        {
            rest
        }
        _ => location,
    };
    let short = without_column
        .rsplit_once("/src/")
        .map(|(_, tail)| tail)
        .or_else(|| without_column.rsplit_once('/').map(|(_, tail)| tail))
        .unwrap_or(without_column);
    short.to_string()
}

/// The address `marker` (a substring of a demangled symbol) runs at.
fn marker_address(elf: &Path, offset: u64, marker: &str) -> Result<u64> {
    let output = Command::new(NM)
        .args(["-C", "--defined-only"])
        .arg(elf)
        .output()
        .with_context(|| format!("cannot run {NM}"))?;
    ensure!(output.status.success(), "{NM} {} failed", elf.display());
    let text = String::from_utf8_lossy(&output.stdout);
    let found: Vec<u64> = text
        .lines()
        .filter(|l| l.contains(marker))
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok())
        .collect();
    match found.as_slice() {
        [address] => Ok(address.wrapping_add(offset)),
        [] => bail!("no symbol of {} contains {marker:?}", elf.display()),
        _ => bail!(
            "{} symbols of {} contain {marker:?}: the marker must be one function",
            found.len(),
            elf.display()
        ),
    }
}

/// The report for one operation: instructions per operation by inlined
/// call path, to `depth` frames, paths of at least `min` shown.
fn report(
    op: &str,
    w: &Window,
    chains: &HashMap<u64, Vec<String>>,
    depth: usize,
    min: f64,
) -> String {
    let n = w.operations.max(1) as f64;
    let el2: u64 = w.el2.values().sum();
    let mut out = format!(
        "{op}: {:.1} instructions per operation over {} operations (guest {:.1}, el2 {:.1})\n",
        (el2 + w.guest) as f64 / n,
        w.operations,
        w.guest as f64 / n,
        el2 as f64 / n
    );
    let mut paths: HashMap<Vec<String>, u64> = HashMap::new();
    for (pc, &executed) in &w.el2 {
        let chain = chains.get(pc).map(Vec::as_slice).unwrap_or_default();
        for d in 1..=depth.min(chain.len()) {
            *paths.entry(chain[..d].to_vec()).or_default() += executed;
        }
    }
    write_children(&mut out, &paths, &[], n, min);
    out
}

/// Appends the paths one frame below `prefix`, heavier first, each
/// followed by its own children.
fn write_children(
    out: &mut String,
    paths: &HashMap<Vec<String>, u64>,
    prefix: &[String],
    operations: f64,
    min: f64,
) {
    let mut children: Vec<(&Vec<String>, u64)> = paths
        .iter()
        .filter(|(p, _)| p.len() == prefix.len() + 1 && p.starts_with(prefix))
        .map(|(p, &c)| (p, c))
        .collect();
    children.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    for (path, executed) in children {
        let per = executed as f64 / operations;
        if per < min {
            continue;
        }
        let indent = "  ".repeat(path.len());
        out.push_str(&format!("{per:9.1} {indent}{}\n", path[path.len() - 1]));
        write_children(out, paths, path, operations, min);
    }
}

/// The listing for one operation: every EL2 instruction executed in the
/// window, in address order, with its executions per operation, its
/// disassembly and its innermost source function and line; a blank line
/// wherever the innermost function changes.
fn listing(op: &str, w: &Window, symbols: &HashMap<u64, Symbolized>, offset: u64) -> String {
    let n = w.operations.max(1) as f64;
    let mut out = format!(
        "{op}: executions per operation, address (el2's link address; branch targets as \
             QEMU printed them, at the load address), instruction, innermost function, source\n"
    );
    let mut pcs: Vec<u64> = w.el2.keys().copied().collect();
    pcs.sort_unstable();
    let mut last_function: Option<&str> = None;
    for pc in pcs {
        let per = w.el2[&pc] as f64 / n;
        let text = w.text.get(&pc).map_or("?", String::as_str);
        let (function, line) = symbols.get(&pc).map_or(("?", ""), |s| {
            (s.chain.last().map_or("?", String::as_str), s.line.as_str())
        });
        if last_function.is_some_and(|f| f != function) {
            out.push('\n');
        }
        last_function = Some(function);
        out.push_str(&format!(
            "{per:7.2} {:#8x}  {text:<44} {function}  {line}\n",
            pc.wrapping_sub(offset)
        ));
    }
    out
}

pub fn profile(ws: &Workspace, o: &ProfileOpts) -> Result<ExitCode> {
    setup::ensure_tools(&[Tool::Symbolizer])?;
    let dir = ws.xtask_dir()?.join("profile");
    let b = Bench::prepare(ws, &o.build, dir.join("logs"), false)?;
    let elf = b.el2_elf().to_path_buf();
    let offset = image::LOAD_ADDR.wrapping_sub(b.el2_link_base());
    let trace = dir.join("trace.log");
    let _ = fs::remove_file(&trace);
    let mut t = bench::cost_test(o.rounds);
    t.machine.extra_args.extend(
        ["-d", "exec,nochain,in_asm", "-D"]
            .map(String::from)
            .into_iter()
            .chain([trace.display().to_string()]),
    );
    eprintln!(
        "profile: the cost run with {} rounds under icount, every executed block logged to {}",
        o.rounds,
        trace.display()
    );
    // The trace is complete once the guest printed its cost line: stop
    // QEMU there (the lock run after it only grows the trace).
    let (machine, image) = b.prepare_test(&t)?;
    let console = b
        .run_machine(&t.name, &machine, &image, t.timeout, Some(COST_LINE))
        .map_err(|e| anyhow::anyhow!("the cost run failed: {e}"))?;
    let costs = bench::parse_costs(&console).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut text = format!(
        "the guest's cost line: null hypercall {:.1}, directed yield + vCPU switch {:.1} \
         instructions\n\n",
        costs.null_hypercall_instructions, costs.vcpu_switch_instructions
    );
    let markers = OPERATIONS
        .iter()
        .map(|op| marker_address(&elf, offset, op.marker))
        .collect::<Result<Vec<u64>>>()?;
    let windows = measure(&trace, &markers)?;
    let mut listings = String::new();
    for (op, w) in OPERATIONS.iter().zip(&windows) {
        let mut pcs: Vec<u64> = w.el2.keys().copied().collect();
        pcs.sort_unstable();
        let symbols: HashMap<u64, Symbolized> = pcs
            .iter()
            .copied()
            .zip(symbolize(&elf, offset, &pcs)?)
            .collect();
        let chains: HashMap<u64, Vec<String>> = symbols
            .iter()
            .map(|(&pc, s)| (pc, s.chain.clone()))
            .collect();
        text.push_str(&report(op.name, w, &chains, o.depth, o.min));
        text.push('\n');
        listings.push_str(&listing(op.name, w, &symbols, offset));
        listings.push('\n');
    }
    let out = dir.join("report.txt");
    fs::write(&out, &text).with_context(|| format!("cannot write {}", out.display()))?;
    let listing_path = dir.join("listing.txt");
    fs::write(&listing_path, &listings)
        .with_context(|| format!("cannot write {}", listing_path.display()))?;
    print!("{text}");
    println!("report: {}", out.display());
    println!("listing (every instruction): {}", listing_path.display());
    // The trace is large (about 3 MB per round); the report is what stays.
    let _ = fs::remove_file(&trace);
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace in QEMU 7.2's format: two EL2 blocks (one the marker) and
    /// a guest block (EL1 flags).
    const TRACE: &str = "\
----------------
IN: 
0x40080000:  91005a4d  add      x13, x18, #0x16
0x40080004:  140003ff  b        #0x40081000

Trace 0: 0x7f0000000100 [0000000000000000/0000000040080000/00000061/ff020200] 
----------------
IN: 
0x40081000:  aa0003f3  mov      x19, x0

Trace 0: 0x7f0000000200 [0000000000000000/0000000040081000/00000061/ff020200] 
----------------
IN: 
0x40000000:  580000c0  ldr      x0, #0x40000018
0x40000004:  aa1f03e1  mov      x1, xzr
0x40000008:  aa1f03e2  mov      x2, xzr

Trace 0: 0x7f0000000300 [0000000000000000/0000000040000000/00000025/ff020200] 
Trace 0: 0x7f0000000100 [0000000000000000/0000000040080000/00000061/ff020200] 
Trace 0: 0x7f0000000200 [0000000000000000/0000000040081000/00000061/ff020200] 
Trace 0: 0x7f0000000300 [0000000000000000/0000000040000000/00000025/ff020200] 
Trace 0: 0x7f0000000100 [0000000000000000/0000000040080000/00000061/ff020200] 
Trace 0: 0x7f0000000300 [0000000000000000/0000000040000000/00000025/ff020200] 
Trace 0: 0x7f0000000100 [0000000000000000/0000000040080000/00000061/ff020200] 
";

    #[test]
    fn lines_parse_as_qemu_prints_them() {
        assert_eq!(
            parse_trace(
                "Trace 0: 0x7f992c000300 [0000000000000400/0000000040080000/00000061/ff020200] "
            ),
            Some(Executed {
                block: "0x7f992c000300",
                pc: 0x4008_0000,
                flags: 0x61
            })
        );
        assert_eq!(parse_trace("Trace 0: 0x7f [bad]"), None);
        assert_eq!(
            parse_instruction("0x4008101c:  d5033fdf  isb      "),
            Some((0x4008_101c, "isb"))
        );
        assert_eq!(
            parse_instruction("0x40080000:  91005a4d  add      x13, x18, #0x16"),
            Some((0x4008_0000, "add      x13, x18, #0x16"))
        );
        assert_eq!(parse_instruction("IN: "), None);
        assert!(runs_at_el2(0x61));
        assert!(!runs_at_el2(0x25), "EL1");
    }

    #[test]
    fn the_window_counts_each_execution_of_each_block() {
        let marker = 0x4008_0000;
        let all = count(TRACE.as_bytes(), &[marker, 0x4000_0000], None).unwrap();
        assert_eq!((all[0].operations, all[1].operations), (4, 3));
        assert_eq!(all[0].times, [0, 6, 12, 17]);
        // Between the marker's 2nd and 4th execution: 2 operations, each
        // the marker block (2), then the mov block once and the guest
        // block (3) twice.
        let w = &count(TRACE.as_bytes(), &[marker], Some(&[(2, 4)])).unwrap()[0];
        assert_eq!(w.operations, 2);
        assert_eq!(w.guest, 6);
        assert_eq!(
            w.el2,
            HashMap::from([(0x4008_0000, 2), (0x4008_0004, 2), (0x4008_1000, 1)])
        );
        assert_eq!(w.text[&0x4008_1000], "mov      x19, x0");
        let symbols = HashMap::from([
            (
                0x4008_0000,
                Symbolized {
                    chain: vec!["el2::outer".into(), "el2::inner".into()],
                    line: "run/mod.rs:12".into(),
                },
            ),
            (
                0x4008_1000,
                Symbolized {
                    chain: vec!["el2::other".into()],
                    line: "sched/mod.rs:3".into(),
                },
            ),
        ]);
        let list = listing("op", w, &symbols, 0x4000_0000);
        let rows: Vec<&str> = list.lines().skip(1).collect();
        assert_eq!(rows.len(), 5, "{list}");
        assert!(
            rows[0].starts_with("   1.00  0x80000  add      x13, x18, #0x16"),
            "{list}"
        );
        assert!(rows[0].ends_with("el2::inner  run/mod.rs:12"), "{list}");
        assert_eq!(rows[1], "", "a new function: {list}");
        assert!(rows[2].contains("0x80004  b        #0x40081000"), "{list}");
        assert!(rows[2].ends_with("?  "), "no symbol: {list}");
        assert_eq!(rows[3], "", "{list}");
        assert!(
            rows[4].starts_with("   0.50  0x81000  mov      x19, x0"),
            "{list}"
        );
        let text = report("op", w, &HashMap::new(), 3, 0.0);
        assert!(
            text.starts_with(
                "op: 5.5 instructions per operation over 2 operations (guest 3.0, el2 2.5)"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_steady_window_is_the_loop() {
        // Two probes long before, a loop of 100-instruction operations (one
        // slow first one), a call long after.
        let mut times = vec![0, 5_000];
        let mut t = 20_000;
        for i in 0..50 {
            times.push(t);
            t += if i == 0 { 180 } else { 100 };
        }
        times.push(t + 90_000);
        // The loop is the 3rd to the 52nd execution (49 intervals); less
        // its first interval: counts 4..52, 48 operations.
        assert_eq!(steady_window(&times), Some((4, 52)));
        assert_eq!(steady_window(&[0, 10]), None, "one interval is no loop");
        assert_eq!(steady_window(&[]), None);
    }

    #[test]
    fn source_lines_keep_the_path_after_src() {
        assert_eq!(
            source_line("/work/main/el2/src/run/mod.rs:429:23"),
            "run/mod.rs:429"
        );
        assert_eq!(
            source_line("/rustc/abc/library/core/src/slice/index.rs:272:10"),
            "slice/index.rs:272"
        );
        assert_eq!(source_line("/x/vectors.S:12"), "vectors.S:12");
        assert_eq!(source_line("/x/head.S:12:0"), "head.S:12");
        assert_eq!(source_line("??:0:0"), "");
        assert_eq!(source_line(""), "");
    }

    #[test]
    fn names_are_tidied() {
        assert_eq!(
            tidy("el2::sched::Scheduler::yield_to::h347d0cd8cbb82a1e"),
            "sched::Scheduler::yield_to"
        );
        assert_eq!(
            tidy(
                "_$LT$el2..arch..machine..Hardware$u20$as$u20$el2..run..machine..Machine$GT$::save_vcpu::h7cd67bceb741e7ac"
            ),
            "<arch::machine::Hardware as run::machine::Machine>::save_vcpu"
        );
        assert_eq!(
            tidy("el2::run::Runner$LT$M$GT$::load_picked::h974b36f9f97f30ed"),
            "run::Runner::load_picked"
        );
        assert_eq!(tidy("enter_guest"), "enter_guest");
        assert_eq!(
            tidy("aarch64_cpu..registers..esr_el2..ESR_EL2..EC..Value"),
            "aarch64_cpu::registers::esr_el2::ESR_EL2::EC::Value"
        );
    }

    #[test]
    fn paths_nest_under_their_parents() {
        let w = Window {
            el2: HashMap::from([(1, 10), (2, 6), (3, 4)]),
            guest: 0,
            operations: 2,
            ..Window::default()
        };
        let chain = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let chains = HashMap::from([
            (1, chain(&["run", "load"])),
            (2, chain(&["run", "put"])),
            (3, chain(&["sched"])),
        ]);
        let text = report("op", &w, &chains, 2, 0.0);
        let rows: Vec<&str> = text.lines().skip(1).map(str::trim).collect();
        assert_eq!(
            rows,
            ["8.0   run", "5.0     load", "3.0     put", "2.0   sched"]
        );
    }
}
