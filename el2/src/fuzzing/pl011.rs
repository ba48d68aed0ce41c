//! The emulated PL011 driven by a guest's register accesses and the
//! hypervisor's input, in any order.
//!
//! Input layout: a first byte whose bit 0 gives the UART a VM name, then
//! operations until the input ends, each an opening byte whose value
//! modulo 8 picks an [`Op`], followed by its operands.
//!
//! Invariants checked, as `emul` and `emul::pl011` document them:
//! - no access panics, at any offset and size;
//! - a size other than 1, 2 or 4 is [`AccessError::UnsupportedSize`]
//!   naming the access; any other access succeeds, and a read returns no
//!   more bits than its size;
//! - a read or write that does not start at a register, of a reserved
//!   offset, of write-only ICR, or a write to a read-only register reads
//!   as zero, changes nothing and is counted as ignored; the identification
//!   registers read the documented values;
//! - FR always shows an empty transmit FIFO (TXFE set, TXFF and BUSY
//!   clear), and RXFE / RXFF agree with [`Pl011::rx_space`], which is 0 in
//!   loopback and otherwise at most the FIFO depth (16, or 1 without
//!   LCR_H.FEN);
//! - MIS is RIS & IMSC and [`Pl011::irq_level`] is MIS != 0;
//! - [`Pl011::push_input`] takes a byte exactly when `rx_space` was
//!   non-zero, never in loopback, and counts it or the overrun;
//! - every line reaches the sink whole: at most [`LINE_MAX`] bytes, no
//!   line feed, with the UART's VM name; the line counter counts them;
//!   after a flush nothing is left to flush;
//! - a reset keeps the name and the counters and restores CR, IFLS, IMSC
//!   and an empty receive FIFO.

use alloc::string::String;

use super::input::Input;
use crate::devices::emul::pl011::{
    FIFO_DEPTH, FRAME_SIZE, ID_REGISTERS, LINE_MAX, Pl011, Pl011Stats, bits, offset as reg,
};
use crate::devices::emul::{AccessError, ConsoleSink};

/// Most operations one input runs.
const MAX_OPERATIONS: usize = 1024;

/// The operations, by their opening byte modulo 8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Op {
    /// An offset ([`offset`]) and a size ([`size`]).
    Read,
    /// An offset, a size and an 8-byte value.
    Write,
    /// One input byte.
    Push,
    /// A count byte (modulo 32), then that many input bytes.
    PushBurst,
    Flush,
    Reset,
    /// A count byte, then that many bytes written to DR one by one.
    TransmitBurst,
    /// Only the checks every operation ends with.
    Check,
}

impl Op {
    const ALL: [Self; 8] = [
        Self::Read,
        Self::Write,
        Self::Push,
        Self::PushBurst,
        Self::Flush,
        Self::Reset,
        Self::TransmitBurst,
        Self::Check,
    ];

    fn from_byte(byte: u8) -> Self {
        Self::ALL[usize::from(byte) % Self::ALL.len()]
    }
}

/// The register offsets, for [`offset`]'s register choices.
pub(super) const REGISTERS: [u64; 22] = [
    reg::DR,
    reg::RSR_ECR,
    reg::FR,
    reg::ILPR,
    reg::IBRD,
    reg::FBRD,
    reg::LCR_H,
    reg::CR,
    reg::IFLS,
    reg::IMSC,
    reg::RIS,
    reg::MIS,
    reg::ICR,
    reg::DMACR,
    reg::PERIPH_ID0,
    reg::PERIPH_ID0 + 4,
    reg::PERIPH_ID0 + 8,
    reg::PERIPH_ID0 + 12,
    reg::PERIPH_ID0 + 16,
    reg::PERIPH_ID0 + 20,
    reg::PERIPH_ID0 + 24,
    reg::PERIPH_ID0 + 28,
];

/// Registers that can be read (all but write-only ICR).
const READABLE: [u64; 21] = {
    let mut readable = [0; 21];
    let mut i = 0;
    let mut at = 0;
    while i < REGISTERS.len() {
        if REGISTERS[i] != reg::ICR {
            readable[at] = REGISTERS[i];
            at += 1;
        }
        i += 1;
    }
    readable
};

/// Registers that take writes.
const WRITABLE: [u64; 11] = [
    reg::DR,
    reg::RSR_ECR,
    reg::ILPR,
    reg::IBRD,
    reg::FBRD,
    reg::LCR_H,
    reg::CR,
    reg::IFLS,
    reg::IMSC,
    reg::ICR,
    reg::DMACR,
];

/// Offset kinds, by bits 1:0 of the offset byte; bits 7:2 index
/// [`REGISTERS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum OffsetKind {
    /// The register's offset.
    Register,
    /// One to three bytes into the register (by bits 7:2 modulo 3).
    InsideRegister,
    /// A 16-bit value follows: anywhere in the frame.
    InFrame,
    /// An 8-byte value follows: anywhere.
    Raw,
}

impl OffsetKind {
    const ALL: [Self; 4] = [
        Self::Register,
        Self::InsideRegister,
        Self::InFrame,
        Self::Raw,
    ];
}

/// An offset byte: `kind` at the register of [`REGISTERS`] index `register`.
#[cfg(test)]
pub(super) const fn offset_byte(kind: OffsetKind, register: u8) -> u8 {
    register << 2 | kind as u8
}

/// Access sizes by the size byte modulo 16; 10 and above take the byte
/// itself.
pub(super) const SIZES: [u8; 10] = [4, 4, 4, 1, 2, 8, 0, 3, 16, 255];

/// Checks every line the UART hands out and counts them.
struct CheckingSink {
    name: Option<String>,
    lines: u64,
}

impl ConsoleSink for CheckingSink {
    fn emit_line(&mut self, vm_name: Option<&str>, line: &[u8]) {
        assert_eq!(
            vm_name,
            self.name.as_deref(),
            "a line with another VM's name"
        );
        assert!(line.len() <= LINE_MAX, "a {}-byte line", line.len());
        assert!(!line.contains(&b'\n'), "a line feed inside a line");
        self.lines += 1;
    }
}

/// Runs the PL011 harness on one input (see the module documentation).
pub fn pl011(data: &[u8]) {
    let mut input = Input::new(data);
    let name = input.bool().then(|| String::from("vm0"));
    let mut uart = Pl011::new(name.as_deref());
    let mut sink = CheckingSink { name, lines: 0 };
    for _ in 0..MAX_OPERATIONS {
        if input.is_empty() {
            break;
        }
        match Op::from_byte(input.u8()) {
            Op::Read => {
                let (offset, size) = (offset(&mut input), size(&mut input));
                read(&mut uart, offset, size);
            }
            Op::Write => {
                let (offset, size) = (offset(&mut input), size(&mut input));
                write(&mut uart, offset, size, input.u64(), &mut sink);
            }
            Op::Push => push(&mut uart, input.u8()),
            Op::PushBurst => {
                for _ in 0..input.u8() % 32 {
                    push(&mut uart, input.u8());
                }
            }
            Op::Flush => {
                uart.flush(&mut sink);
                let lines = sink.lines;
                uart.flush(&mut sink);
                assert_eq!(sink.lines, lines, "a second flush emitted a line");
            }
            Op::Reset => reset(&mut uart),
            Op::TransmitBurst => {
                for _ in 0..input.u8() {
                    write(&mut uart, reg::DR, 1, input.u8().into(), &mut sink);
                }
            }
            Op::Check => {}
        }
        check_state(&mut uart, &sink);
    }
}

/// An offset: see [`OffsetKind`].
fn offset(input: &mut Input<'_>) -> u64 {
    let byte = input.u8();
    let register = REGISTERS[usize::from(byte >> 2) % REGISTERS.len()];
    match OffsetKind::ALL[usize::from(byte & 3)] {
        OffsetKind::Register => register,
        OffsetKind::InsideRegister => register + 1 + u64::from(byte >> 2) % 3,
        OffsetKind::InFrame => u64::from(input.u16()) % FRAME_SIZE,
        OffsetKind::Raw => input.u64(),
    }
}

/// An access size: see [`SIZES`].
fn size(input: &mut Input<'_>) -> u8 {
    let byte = input.u8();
    SIZES.get(usize::from(byte % 16)).copied().unwrap_or(byte)
}

/// The bits an access of a valid size carries.
fn mask(size: u8) -> u64 {
    (1u64 << (u32::from(size) * 8)) - 1
}

fn valid_size(size: u8) -> bool {
    matches!(size, 1 | 2 | 4)
}

/// A register access that does not start at a register of `registers`
/// (or is not word-aligned) is ignored.
fn ignored(offset: u64, registers: &[u64]) -> bool {
    !offset.is_multiple_of(4) || !registers.contains(&offset)
}

fn read(uart: &mut Pl011, offset: u64, size: u8) {
    let before = *uart.stats();
    let result = uart.read(offset, size);
    if !valid_size(size) {
        assert_eq!(result, Err(AccessError::UnsupportedSize { offset, size }));
        assert_eq!(*uart.stats(), before);
        return;
    }
    let value = result.expect("a read of a supported size");
    assert_eq!(value & !mask(size), 0, "{size}-byte read at {offset:#x}");
    let ignored_reads = before.ignored_reads + u64::from(ignored(offset, &READABLE));
    assert_eq!(
        uart.stats().ignored_reads,
        ignored_reads,
        "read at {offset:#x}"
    );
    if ignored(offset, &READABLE) {
        assert_eq!(value, 0, "an ignored read at {offset:#x}");
    }
    if let Some(id) = offset
        .checked_sub(reg::PERIPH_ID0)
        .filter(|at| offset.is_multiple_of(4) && *at < 32)
    {
        let expected = u64::from(ID_REGISTERS[(id / 4) as usize]);
        assert_eq!(value, expected & mask(size), "ID register at {offset:#x}");
    }
}

fn write(uart: &mut Pl011, offset: u64, size: u8, value: u64, sink: &mut CheckingSink) {
    let before = *uart.stats();
    let result = uart.write(offset, size, value, sink);
    if !valid_size(size) {
        assert_eq!(result, Err(AccessError::UnsupportedSize { offset, size }));
        assert_eq!(*uart.stats(), before);
        return;
    }
    assert_eq!(result, Ok(()), "{size}-byte write at {offset:#x}");
    let stats = uart.stats();
    let ignored = ignored(offset, &WRITABLE);
    assert_eq!(
        stats.ignored_writes,
        before.ignored_writes + u64::from(ignored)
    );
    let transmitted = offset == reg::DR;
    assert_eq!(stats.tx_bytes, before.tx_bytes + u64::from(transmitted));
}

fn push(uart: &mut Pl011, byte: u8) {
    let before = *uart.stats();
    let space = uart.rx_space();
    let loopback = read32(uart, reg::CR) & bits::CR_LBE != 0;
    let accepted = uart.push_input(byte);
    let stats = uart.stats();
    if loopback {
        assert!(!accepted, "input taken in loopback");
        assert_eq!(*stats, before, "input counted in loopback");
    } else {
        assert_eq!(accepted, space > 0, "rx_space {space}");
        assert_eq!(stats.rx_bytes, before.rx_bytes + u64::from(accepted));
        assert_eq!(stats.rx_overruns, before.rx_overruns + u64::from(!accepted));
    }
}

fn reset(uart: &mut Pl011) {
    let name = uart.vm_name().map(String::from);
    let stats: Pl011Stats = *uart.stats();
    uart.reset();
    assert_eq!(uart.vm_name(), name.as_deref(), "reset lost the name");
    assert_eq!(*uart.stats(), stats, "reset changed the counters");
    assert_eq!(read32(uart, reg::CR), bits::CR_TXE | bits::CR_RXE);
    assert_eq!(read32(uart, reg::IFLS), 0x12);
    assert_eq!(read32(uart, reg::IMSC), 0);
    assert_ne!(
        read32(uart, reg::FR) & bits::FR_RXFE,
        0,
        "data left after a reset"
    );
}

/// A 32-bit read of a register that has no read side effect.
fn read32(uart: &mut Pl011, offset: u64) -> u32 {
    uart.read(offset, 4).expect("a 32-bit read") as u32
}

fn check_state(uart: &mut Pl011, sink: &CheckingSink) {
    let stats = *uart.stats();
    let fr = read32(uart, reg::FR);
    assert_ne!(fr & bits::FR_TXFE, 0, "FR {fr:#x}: transmit FIFO not empty");
    assert_eq!(fr & (bits::FR_TXFF | bits::FR_BUSY), 0, "FR {fr:#x}: busy");
    let (ris, imsc, mis) = (
        read32(uart, reg::RIS),
        read32(uart, reg::IMSC),
        read32(uart, reg::MIS),
    );
    assert_eq!(mis, ris & imsc);
    assert_eq!(uart.irq_level(), mis != 0);
    let space = uart.rx_space();
    if read32(uart, reg::CR) & bits::CR_LBE != 0 {
        assert_eq!(space, 0, "input space in loopback");
    } else {
        let depth = if read32(uart, reg::LCR_H) & bits::LCR_H_FEN != 0 {
            FIFO_DEPTH
        } else {
            1
        };
        assert!(space <= depth, "rx_space {space} above the depth {depth}");
        assert_eq!(
            fr & bits::FR_RXFE != 0,
            space == depth,
            "FR {fr:#x}, rx_space {space}"
        );
        assert_eq!(
            fr & bits::FR_RXFF != 0,
            space == 0,
            "FR {fr:#x}, rx_space {space}"
        );
    }
    assert_eq!(
        *uart.stats(),
        stats,
        "register reads were counted as ignored"
    );
    assert_eq!(
        stats.lines, sink.lines,
        "lines counted and lines emitted differ"
    );
}
