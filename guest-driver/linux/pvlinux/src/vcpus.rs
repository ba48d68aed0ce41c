//! The guest kernel's PV-lock debugfs file: what it says and how to read
//! it.
//!
//! The guest kernel's PV-lock driver writes, per possible CPU, whether the
//! CPU is online, whether its PV-lock record is registered with the
//! hypervisor, the preempted flag as the guest reads it at that moment,
//! and how many PV qspinlock halts (`waits`) and kicks that CPU did:
//!
//! ```text
//! interface openeuler
//! qspinlock pv
//! cpu online registered preempted waits kicks
//! 0 1 1 0 12 34
//! 1 1 1 1 5 6
//! ```
//!
//! Line 1 names the PV-lock ABI variant in use (`none` when the
//! hypervisor offered none), line 2 the qspinlock slow path the kernel
//! patched in, line 3 the column names, then one row per possible CPU, all
//! integers decimal. Columns are found by name, so the driver may add
//! columns without breaking this reader; the six above are required.
//!
//! [`VcpusFile::parse`] reads the whole file; [`scan_preempted`] reads
//! only the `cpu` and `preempted` columns, for the `truth` observer that
//! polls the file as fast as it can.

use std::fmt;

/// Where the guest kernel's PV-lock driver puts the file.
pub const DEFAULT_PATH: &str = "/sys/kernel/debug/pvlock/vcpus";

/// The PV-lock ABI variant the guest kernel uses (line 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interface {
    /// The hypervisor offered no PV-lock interface: no preempted flag.
    None,
    /// The seed v2 ABI.
    SeedV2,
    /// openEuler's pvsched ABI.
    OpenEuler,
}

impl Interface {
    /// The name the file uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::SeedV2 => "seed-v2",
            Self::OpenEuler => "openeuler",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [Self::None, Self::SeedV2, Self::OpenEuler]
            .into_iter()
            .find(|interface| interface.name() == name)
    }
}

/// The qspinlock slow path the guest kernel runs (line 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qspinlock {
    /// Native: waiters spin, no halt and kick.
    Native,
    /// Paravirtual: waiters halt and are kicked.
    Pv,
}

impl Qspinlock {
    /// The name the file uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Pv => "pv",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [Self::Native, Self::Pv]
            .into_iter()
            .find(|qspinlock| qspinlock.name() == name)
    }
}

/// One CPU's row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VcpuRow {
    /// The CPU number.
    pub cpu: u32,
    /// The CPU is online.
    pub online: bool,
    /// Its PV-lock record is registered with the hypervisor.
    pub registered: bool,
    /// Its preempted flag read 1 when the file was generated.
    pub preempted: bool,
    /// PV qspinlock halts this CPU did.
    pub waits: u64,
    /// PV qspinlock kicks this CPU sent.
    pub kicks: u64,
}

/// The whole file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VcpusFile {
    /// Line 1.
    pub interface: Interface,
    /// Line 2.
    pub qspinlock: Qspinlock,
    /// One row per possible CPU, in the file's order.
    pub rows: Vec<VcpuRow>,
}

/// Why the file could not be read: the 1-based line and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The line (1-based) the problem is on; one past the last line when
    /// lines are missing.
    pub line: usize,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

fn error(line: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        line,
        message: message.into(),
    }
}

/// Where each required column is in a row.
#[derive(Clone, Copy, Debug)]
struct Columns {
    cpu: usize,
    online: usize,
    registered: usize,
    preempted: usize,
    waits: usize,
    kicks: usize,
    count: usize,
}

const HEADER_LINE: usize = 3;

/// Reads lines 1 to 3; returns what they say and the row lines.
fn parse_head(text: &str) -> Result<(Interface, Qspinlock, Columns, Rows<'_>), ParseError> {
    let mut lines = text.lines();
    let interface = keyword_line(lines.next(), 1, "interface")?;
    let interface = Interface::from_name(interface).ok_or_else(|| {
        error(
            1,
            format!("unknown interface {interface:?} (expected none, seed-v2 or openeuler)"),
        )
    })?;
    let qspinlock = keyword_line(lines.next(), 2, "qspinlock")?;
    let qspinlock = Qspinlock::from_name(qspinlock).ok_or_else(|| {
        error(
            2,
            format!("unknown qspinlock {qspinlock:?} (expected native or pv)"),
        )
    })?;
    let header = lines
        .next()
        .ok_or_else(|| error(HEADER_LINE, "missing the column header"))?;
    let columns = parse_header(header)?;
    Ok((
        interface,
        qspinlock,
        columns,
        Rows {
            lines,
            number: HEADER_LINE,
        },
    ))
}

/// `<keyword> <value>` on line `number`.
fn keyword_line<'a>(
    line: Option<&'a str>,
    number: usize,
    keyword: &str,
) -> Result<&'a str, ParseError> {
    let line = line.ok_or_else(|| error(number, format!("missing the `{keyword}` line")))?;
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some(word), Some(value), None) if word == keyword => Ok(value),
        _ => Err(error(
            number,
            format!("expected `{keyword} <name>`, found {line:?}"),
        )),
    }
}

fn parse_header(header: &str) -> Result<Columns, ParseError> {
    let names: Vec<&str> = header.split_whitespace().collect();
    let find = |name: &str| {
        let mut positions = names.iter().enumerate().filter(|(_, n)| **n == name);
        match (positions.next(), positions.next()) {
            (Some((index, _)), None) => Ok(index),
            (Some(_), Some(_)) => Err(error(
                HEADER_LINE,
                format!("column `{name}` appears twice in {header:?}"),
            )),
            (None, _) => Err(error(
                HEADER_LINE,
                format!("no column `{name}` in the header {header:?}"),
            )),
        }
    };
    Ok(Columns {
        cpu: find("cpu")?,
        online: find("online")?,
        registered: find("registered")?,
        preempted: find("preempted")?,
        waits: find("waits")?,
        kicks: find("kicks")?,
        count: names.len(),
    })
}

/// The row lines after the header, numbered, blank lines skipped.
struct Rows<'a> {
    lines: std::str::Lines<'a>,
    number: usize,
}

impl<'a> Iterator for Rows<'a> {
    type Item = (usize, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let line = self.lines.next()?;
            self.number += 1;
            if !line.trim().is_empty() {
                return Some((self.number, line));
            }
        }
    }
}

/// Splits a row into exactly `columns.count` fields.
fn row_fields<'a>(
    number: usize,
    line: &'a str,
    columns: &Columns,
    fields: &mut Vec<&'a str>,
) -> Result<(), ParseError> {
    fields.clear();
    fields.extend(line.split_whitespace());
    if fields.len() != columns.count {
        return Err(error(
            number,
            format!(
                "{} fields where the header has {}: {line:?}",
                fields.len(),
                columns.count
            ),
        ));
    }
    Ok(())
}

fn integer(number: usize, column: &str, text: &str) -> Result<u64, ParseError> {
    // Decimal digits only: `+1`, which `u64::from_str` takes, is not what
    // the driver writes.
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(error(
            number,
            format!("`{column}` is {text:?}, not a decimal integer"),
        ));
    }
    text.parse()
        .map_err(|_| error(number, format!("`{column}` {text} is out of range")))
}

fn cpu_number(number: usize, text: &str) -> Result<u32, ParseError> {
    let cpu = integer(number, "cpu", text)?;
    u32::try_from(cpu).map_err(|_| error(number, format!("`cpu` {cpu} is out of range")))
}

fn flag(number: usize, column: &str, text: &str) -> Result<bool, ParseError> {
    match text {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(error(number, format!("`{column}` is {text:?}, not 0 or 1"))),
    }
}

impl VcpusFile {
    /// Reads the whole file.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let (interface, qspinlock, columns, rows) = parse_head(text)?;
        let mut fields = Vec::with_capacity(columns.count);
        let mut parsed: Vec<VcpuRow> = Vec::new();
        for (number, line) in rows {
            row_fields(number, line, &columns, &mut fields)?;
            let row = VcpuRow {
                cpu: cpu_number(number, fields[columns.cpu])?,
                online: flag(number, "online", fields[columns.online])?,
                registered: flag(number, "registered", fields[columns.registered])?,
                preempted: flag(number, "preempted", fields[columns.preempted])?,
                waits: integer(number, "waits", fields[columns.waits])?,
                kicks: integer(number, "kicks", fields[columns.kicks])?,
            };
            if parsed.iter().any(|earlier| earlier.cpu == row.cpu) {
                return Err(error(number, format!("a second row for cpu {}", row.cpu)));
            }
            parsed.push(row);
        }
        Ok(Self {
            interface,
            qspinlock,
            rows: parsed,
        })
    }

    /// The row of `cpu`, if the file has one.
    pub fn row(&self, cpu: u32) -> Option<&VcpuRow> {
        self.rows.iter().find(|row| row.cpu == cpu)
    }

    /// `waits` summed over every CPU.
    pub fn total_waits(&self) -> u64 {
        self.rows.iter().map(|row| row.waits).sum()
    }

    /// `kicks` summed over every CPU.
    pub fn total_kicks(&self) -> u64 {
        self.rows.iter().map(|row| row.kicks).sum()
    }
}

/// Reads only the `cpu` and `preempted` columns, calling `each(cpu,
/// preempted)` per row; checks the three head lines' shape but not what
/// the other columns hold. For the `truth` observer's polls.
pub fn scan_preempted(text: &str, mut each: impl FnMut(u32, bool)) -> Result<(), ParseError> {
    let (_, _, columns, rows) = parse_head(text)?;
    for (number, line) in rows {
        let mut cpu = None;
        let mut preempted = None;
        let mut count = 0;
        for (index, field) in line.split_whitespace().enumerate() {
            if index == columns.cpu {
                cpu = Some(field);
            } else if index == columns.preempted {
                preempted = Some(field);
            }
            count += 1;
        }
        match (cpu, preempted) {
            (Some(cpu), Some(preempted)) if count == columns.count => {
                each(
                    cpu_number(number, cpu)?,
                    flag(number, "preempted", preempted)?,
                );
            }
            _ => {
                return Err(error(
                    number,
                    format!(
                        "{count} fields where the header has {}: {line:?}",
                        columns.count
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "interface openeuler\n\
                        qspinlock pv\n\
                        cpu online registered preempted waits kicks\n\
                        0 1 1 0 12 34\n\
                        1 1 1 1 5 6\n";

    #[test]
    fn parses_the_documented_example() {
        let file = VcpusFile::parse(GOOD).unwrap();
        assert_eq!(file.interface, Interface::OpenEuler);
        assert_eq!(file.qspinlock, Qspinlock::Pv);
        assert_eq!(
            file.rows,
            [
                VcpuRow {
                    cpu: 0,
                    online: true,
                    registered: true,
                    preempted: false,
                    waits: 12,
                    kicks: 34,
                },
                VcpuRow {
                    cpu: 1,
                    online: true,
                    registered: true,
                    preempted: true,
                    waits: 5,
                    kicks: 6,
                },
            ]
        );
        assert_eq!(file.total_waits(), 17);
        assert_eq!(file.total_kicks(), 40);
        assert_eq!(file.row(1).map(|row| row.preempted), Some(true));
        assert_eq!(file.row(2), None);
    }

    #[test]
    fn every_interface_and_qspinlock_name() {
        for interface in [Interface::None, Interface::SeedV2, Interface::OpenEuler] {
            for qspinlock in [Qspinlock::Native, Qspinlock::Pv] {
                let text = format!(
                    "interface {}\nqspinlock {}\ncpu online registered preempted waits kicks\n",
                    interface.name(),
                    qspinlock.name()
                );
                let file = VcpusFile::parse(&text).unwrap();
                assert_eq!((file.interface, file.qspinlock), (interface, qspinlock));
                assert!(file.rows.is_empty());
            }
        }
    }

    #[test]
    fn finds_columns_by_name_and_ignores_extra_ones() {
        let text = "interface seed-v2\r\n\
                    qspinlock native\r\n\
                    steal kicks cpu preempted extra waits registered online\r\n\
                    99 7 3 1 x 8 0 1\r\n\
                    \r\n\
                    0 0 4 0 y 0 1 0\r\n";
        let file = VcpusFile::parse(text).unwrap();
        assert_eq!(file.interface, Interface::SeedV2);
        assert_eq!(file.qspinlock, Qspinlock::Native);
        assert_eq!(
            file.rows[0],
            VcpuRow {
                cpu: 3,
                online: true,
                registered: false,
                preempted: true,
                waits: 8,
                kicks: 7,
            }
        );
        assert_eq!(file.rows[1].cpu, 4);
        assert!(file.rows[1].registered && !file.rows[1].online);

        let mut seen = Vec::new();
        scan_preempted(text, |cpu, preempted| seen.push((cpu, preempted))).unwrap();
        assert_eq!(seen, [(3, true), (4, false)]);
    }

    fn parse_error(text: &str) -> ParseError {
        VcpusFile::parse(text).unwrap_err()
    }

    #[test]
    fn malformed_files_name_the_line() {
        const HEADER: &str = "cpu online registered preempted waits kicks";
        let cases: &[(String, usize, &str)] = &[
            (String::new(), 1, "missing the `interface` line"),
            ("interface\n".into(), 1, "expected `interface <name>`"),
            ("interfaces pv\n".into(), 1, "expected `interface <name>`"),
            (
                "interface pv extra\n".into(),
                1,
                "expected `interface <name>`",
            ),
            ("interface kvm\n".into(), 1, "unknown interface \"kvm\""),
            ("interface none\n".into(), 2, "missing the `qspinlock` line"),
            (
                "interface none\nqspinlock fast\n".into(),
                2,
                "unknown qspinlock",
            ),
            (
                "interface none\nqspinlock pv\n".into(),
                3,
                "missing the column header",
            ),
            (
                "interface none\nqspinlock pv\ncpu online registered waits kicks\n".into(),
                3,
                "no column `preempted`",
            ),
            (
                format!("interface none\nqspinlock pv\n{HEADER} cpu\n"),
                3,
                "column `cpu` appears twice",
            ),
            (
                format!("interface none\nqspinlock pv\n{HEADER}\n0 1 1 0 1\n"),
                4,
                "5 fields where the header has 6",
            ),
            (
                format!("interface none\nqspinlock pv\n{HEADER}\n0 1 1 0 1 2\n1 1 1 2 0 0\n"),
                5,
                "`preempted` is \"2\", not 0 or 1",
            ),
            (
                format!("interface none\nqspinlock pv\n{HEADER}\n0 1 1 0 -1 2\n"),
                4,
                "`waits` is \"-1\", not a decimal integer",
            ),
            (
                format!("interface none\nqspinlock pv\n{HEADER}\n0 1 1 0 1 +2\n"),
                4,
                "`kicks` is \"+2\", not a decimal integer",
            ),
            (
                format!("interface none\nqspinlock pv\n{HEADER}\n0 1 1 0 1 99999999999999999999\n"),
                4,
                "`kicks` 99999999999999999999 is out of range",
            ),
            (
                format!("interface none\nqspinlock pv\n{HEADER}\n4294967296 1 1 0 1 2\n"),
                4,
                "`cpu` 4294967296 is out of range",
            ),
            (
                format!("interface none\nqspinlock pv\n{HEADER}\n0 1 1 0 1 2\n\n0 1 1 0 1 2\n"),
                6,
                "a second row for cpu 0",
            ),
        ];
        for (text, line, message) in cases {
            let error = parse_error(text);
            assert_eq!(error.line, *line, "{text:?}: {error}");
            assert!(error.message.contains(message), "{text:?}: {error}");
            assert!(error.to_string().starts_with(&format!("line {line}: ")));
        }
    }

    #[test]
    fn the_fast_scan_checks_what_it_reads() {
        let mut seen = Vec::new();
        scan_preempted(GOOD, |cpu, preempted| seen.push((cpu, preempted))).unwrap();
        assert_eq!(seen, [(0, false), (1, true)]);

        let bad_flag = GOOD.replace("1 1 1 1 5 6", "1 1 1 x 5 6");
        let error = scan_preempted(&bad_flag, |_, _| {}).unwrap_err();
        assert_eq!(error.line, 5);
        assert!(error.message.contains("`preempted` is \"x\""));

        let short_row = GOOD.replace("1 1 1 1 5 6", "1 1 1 1 5");
        let error = scan_preempted(&short_row, |_, _| {}).unwrap_err();
        assert_eq!(error.line, 5);
        assert!(error.message.contains("5 fields where the header has 6"));

        let truncated = &GOOD[..20];
        assert_eq!(scan_preempted(truncated, |_, _| {}).unwrap_err().line, 2);
    }
}
