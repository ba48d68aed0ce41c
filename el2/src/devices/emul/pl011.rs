//! An emulated Arm PrimeCell UART (PL011), one per VM, following the
//! PL011 Technical Reference Manual (ARM DDI 0183, "Register
//! descriptions" and "Interrupts").
//!
//! The model is complete enough for Linux's `amba-pl011` driver (AMBA
//! probe by its ID registers, interrupt-driven transmit and receive) and
//! for polling guests (earlycon, bare-metal tests). What it simplifies:
//!
//! - **Transmit is immediate.** A byte written to DR goes straight to the
//!   VM's line buffer, so the transmit FIFO is always empty: FR.TXFE is
//!   set, FR.TXFF and FR.BUSY are clear, and the transmit interrupt is
//!   raised after every byte. Bytes are sent whatever CR.UARTEN and CR.TXE
//!   say (as QEMU does): a guest that forgets to enable its UART still
//!   gets its output out. Baud rate, line format and IrDA settings are
//!   stored and read back but change nothing.
//! - **Receive is from the hypervisor.** [`Pl011::push_input`] puts a byte
//!   in the receive FIFO: 16 entries when LCR_H.FEN is set, a one-byte
//!   holding register when it is clear (the reset state), as on hardware.
//!   Input has no line errors, so FE/PE/BE never appear; overrun does.
//!   The caller should offer input only while [`Pl011::rx_space`] is
//!   non-zero and keep the rest queued; what it pushes into a full FIFO
//!   is an overrun.
//! - **The receive timeout has always expired.** There are no bit times,
//!   so data left below the receive trigger level raises the receive
//!   timeout interrupt at once instead of 32 bit periods later.
//! - **No modem lines and no DMA.** CTS, DSR, DCD and RI read as
//!   deasserted (as QEMU reports them outside loopback); DMACR is stored
//!   but never acted on (the generated DT describes no DMA channels).
//!   Loopback (CR.LBE) sends transmitted bytes to the receive FIFO instead
//!   of the console and disconnects input.
//!
//! Register accesses may be 8, 16 or 32 bits wide (Linux's driver uses
//! 16-bit accesses for the Arm variant, earlycon may use 8-bit ones), at
//! the register's offset; the TRM defines only word-aligned 32-bit
//! registers, so a 64-bit access is an [`AccessError`] (the caller aborts
//! the guest), and a narrower access that does not start at a register's
//! first byte reads as zero and is ignored, like a reserved offset.
//!
//! Interrupts (RIS; MIS = RIS & IMSC; ICR clears by writing ones):
//! - TX is raised after every transmitted byte and when the transmitter
//!   becomes enabled (CR.UARTEN and CR.TXE), since the empty FIFO is then
//!   at or below any trigger level; only ICR clears it, which is how a
//!   driver acknowledges it (Linux masks it once it has nothing to send);
//! - RX is raised when the receive FIFO reaches the IFLS trigger level and
//!   cleared when reads take it below;
//! - RT is raised when data is left below the trigger level and cleared
//!   when the FIFO empties;
//! - OE is raised on an overrun.
//!
//! [`Pl011::irq_level`] is the combined UARTINTR line (MIS != 0); the
//! caller re-reads it after every access or input and drives the UART's
//! SPI with it (level-sensitive).
//!
//! Output is line-buffered: bytes collect until a line feed (or until
//! [`LINE_MAX`] bytes) and the whole line then goes to the
//! [`ConsoleSink`], so lines of different VMs never interleave.

use super::{AccessError, ConsoleSink};
use alloc::string::String;

/// Size of the PL011's register frame.
pub const FRAME_SIZE: u64 = 0x1000;

/// Depth of the receive FIFO with FIFOs enabled (LCR_H.FEN).
pub const FIFO_DEPTH: usize = 16;

/// Longest line the model buffers; a longer one is emitted in pieces of
/// this size.
pub const LINE_MAX: usize = 256;

/// Register offsets (ARM DDI 0183, "Summary of registers").
pub mod offset {
    /// Data register: write transmits, read pops the receive FIFO.
    pub const DR: u64 = 0x000;
    /// Receive status (read) / error clear (write).
    pub const RSR_ECR: u64 = 0x004;
    /// Flag register (read-only).
    pub const FR: u64 = 0x018;
    /// IrDA low-power counter.
    pub const ILPR: u64 = 0x020;
    /// Integer baud rate divisor.
    pub const IBRD: u64 = 0x024;
    /// Fractional baud rate divisor.
    pub const FBRD: u64 = 0x028;
    /// Line control.
    pub const LCR_H: u64 = 0x02c;
    /// Control.
    pub const CR: u64 = 0x030;
    /// Interrupt FIFO level select.
    pub const IFLS: u64 = 0x034;
    /// Interrupt mask set/clear.
    pub const IMSC: u64 = 0x038;
    /// Raw interrupt status (read-only).
    pub const RIS: u64 = 0x03c;
    /// Masked interrupt status (read-only).
    pub const MIS: u64 = 0x040;
    /// Interrupt clear (write-only, write 1 to clear).
    pub const ICR: u64 = 0x044;
    /// DMA control.
    pub const DMACR: u64 = 0x048;
    /// UARTPeriphID0; PeriphID1-3 and PCellID0-3 follow at 4-byte steps.
    pub const PERIPH_ID0: u64 = 0xfe0;
}

/// UARTPeriphID0-3 then UARTPCellID0-3, the values QEMU's PL011 reports
/// (part 0x011, designer 0x41 Arm, revision 1; PrimeCell ID 0xB105F00D),
/// so a guest sees the same UART under the hypervisor as on bare QEMU.
/// Linux's AMBA bus reads them to match the `amba-pl011` driver, which
/// also takes a revision below 3 to mean 16-entry FIFOs, as modelled here.
pub const ID_REGISTERS: [u8; 8] = [0x11, 0x10, 0x14, 0x00, 0x0d, 0xf0, 0x05, 0xb1];

/// Bits of DR, FR, LCR_H, CR and the interrupt registers (ARM DDI 0183,
/// "Register descriptions").
pub mod bits {
    /// DR: framing error of the character read.
    pub const DR_FE: u32 = 1 << 8;
    /// DR: parity error.
    pub const DR_PE: u32 = 1 << 9;
    /// DR: break error.
    pub const DR_BE: u32 = 1 << 10;
    /// DR: overrun error (data arrived while the receive FIFO was full).
    pub const DR_OE: u32 = 1 << 11;

    /// RSR: overrun error, sticky until a write to ECR.
    pub const RSR_OE: u32 = 1 << 3;

    /// FR: clear to send.
    pub const FR_CTS: u32 = 1 << 0;
    /// FR: UART busy transmitting.
    pub const FR_BUSY: u32 = 1 << 3;
    /// FR: receive FIFO empty.
    pub const FR_RXFE: u32 = 1 << 4;
    /// FR: transmit FIFO full.
    pub const FR_TXFF: u32 = 1 << 5;
    /// FR: receive FIFO full.
    pub const FR_RXFF: u32 = 1 << 6;
    /// FR: transmit FIFO empty.
    pub const FR_TXFE: u32 = 1 << 7;

    /// LCR_H: FIFOs enabled.
    pub const LCR_H_FEN: u32 = 1 << 4;
    /// LCR_H: 8-bit words.
    pub const LCR_H_WLEN_8: u32 = 0b11 << 5;

    /// CR: UART enable.
    pub const CR_UARTEN: u32 = 1 << 0;
    /// CR: loopback enable.
    pub const CR_LBE: u32 = 1 << 7;
    /// CR: transmit enable.
    pub const CR_TXE: u32 = 1 << 8;
    /// CR: receive enable.
    pub const CR_RXE: u32 = 1 << 9;
    /// CR: every defined bit (bits 6:3 are reserved).
    pub const CR_DEFINED: u32 = 0xff87;

    /// Interrupt: receive (RXRIS / RXIM / RXIC).
    pub const INT_RX: u32 = 1 << 4;
    /// Interrupt: transmit.
    pub const INT_TX: u32 = 1 << 5;
    /// Interrupt: receive timeout.
    pub const INT_RT: u32 = 1 << 6;
    /// Interrupt: framing error.
    pub const INT_FE: u32 = 1 << 7;
    /// Interrupt: parity error.
    pub const INT_PE: u32 = 1 << 8;
    /// Interrupt: break error.
    pub const INT_BE: u32 = 1 << 9;
    /// Interrupt: overrun error.
    pub const INT_OE: u32 = 1 << 10;
    /// Every interrupt bit (10:0, modem status interrupts included).
    pub const INT_ALL: u32 = 0x7ff;
}

use bits::*;
use offset::*;

/// Reset value of CR: transmit and receive enabled, UART disabled.
const CR_RESET: u32 = CR_TXE | CR_RXE;
/// Reset value of IFLS: both trigger levels at half full.
const IFLS_RESET: u32 = 0x12;

/// Counters for the summary at VM power-off and for debugging guests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pl011Stats {
    /// Bytes the guest wrote to DR.
    pub tx_bytes: u64,
    /// Lines handed to the console sink.
    pub lines: u64,
    /// Input bytes accepted into the receive FIFO.
    pub rx_bytes: u64,
    /// Input bytes dropped because the receive FIFO was full.
    pub rx_overruns: u64,
    /// Reads of reserved offsets, of write-only ICR, or not at a register's start.
    pub ignored_reads: u64,
    /// Writes to reserved offsets, to read-only registers, or not at a register's start.
    pub ignored_writes: u64,
}

/// The receive FIFO: entries are DR values (data in bits 7:0, error flags
/// in bits 11:8).
#[derive(Clone, Debug)]
struct RxFifo {
    entries: [u16; FIFO_DEPTH],
    head: usize,
    len: usize,
}

impl RxFifo {
    const fn new() -> Self {
        Self {
            entries: [0; FIFO_DEPTH],
            head: 0,
            len: 0,
        }
    }

    /// Appends; the caller has checked there is room.
    fn push(&mut self, entry: u16) {
        if self.len < FIFO_DEPTH {
            self.entries[(self.head + self.len) % FIFO_DEPTH] = entry;
            self.len += 1;
        }
    }

    fn pop(&mut self) -> Option<u16> {
        if self.len == 0 {
            return None;
        }
        let entry = self.entries[self.head];
        self.head = (self.head + 1) % FIFO_DEPTH;
        self.len -= 1;
        Some(entry)
    }

    /// Sets `flags` on the most recently received entry.
    fn mark_newest(&mut self, flags: u16) {
        if let Some(last) = self.len.checked_sub(1) {
            self.entries[(self.head + last) % FIFO_DEPTH] |= flags;
        }
    }

    fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }
}

/// Output collected until the end of a line.
#[derive(Clone, Debug)]
struct LineBuffer {
    bytes: [u8; LINE_MAX],
    len: usize,
    /// A carriage return not yet stored: dropped if a line feed follows.
    pending_cr: bool,
}

impl LineBuffer {
    const fn new() -> Self {
        Self {
            bytes: [0; LINE_MAX],
            len: 0,
            pending_cr: false,
        }
    }

    /// Adds one byte of output; returns how many lines it emitted.
    ///
    /// LF ends the line (without the LF); a CR right before an LF is
    /// dropped, so CR LF and LF end lines alike; any other CR is kept as
    /// part of the line (a guest redrawing a progress line).
    fn put(&mut self, byte: u8, vm_name: Option<&str>, sink: &mut dyn ConsoleSink) -> u64 {
        if byte == b'\n' {
            self.pending_cr = false;
            self.emit(vm_name, sink);
            return 1;
        }
        let mut emitted = 0;
        if core::mem::take(&mut self.pending_cr) {
            emitted += self.store(b'\r', vm_name, sink);
        }
        if byte == b'\r' {
            self.pending_cr = true;
        } else {
            emitted += self.store(byte, vm_name, sink);
        }
        emitted
    }

    fn store(&mut self, byte: u8, vm_name: Option<&str>, sink: &mut dyn ConsoleSink) -> u64 {
        self.bytes[self.len] = byte;
        self.len += 1;
        if self.len == LINE_MAX {
            self.emit(vm_name, sink);
            return 1;
        }
        0
    }

    fn emit(&mut self, vm_name: Option<&str>, sink: &mut dyn ConsoleSink) {
        sink.emit_line(vm_name, &self.bytes[..self.len]);
        self.len = 0;
    }

    /// Emits a partial line, if any; a trailing CR is dropped.
    fn flush(&mut self, vm_name: Option<&str>, sink: &mut dyn ConsoleSink) -> u64 {
        self.pending_cr = false;
        if self.len == 0 {
            return 0;
        }
        self.emit(vm_name, sink);
        1
    }
}

/// One VM's emulated PL011.
#[derive(Clone, Debug)]
pub struct Pl011 {
    name: Option<String>,
    rsr: u32,
    ilpr: u32,
    ibrd: u32,
    fbrd: u32,
    lcr_h: u32,
    cr: u32,
    ifls: u32,
    imsc: u32,
    ris: u32,
    dmacr: u32,
    rx: RxFifo,
    line: LineBuffer,
    stats: Pl011Stats,
}

impl Pl011 {
    /// A PL011 in its reset state. `vm_name` is what the console sink
    /// prefixes its lines with: the caller passes the VM's name when the
    /// hypervisor runs more than one VM, `None` otherwise.
    pub fn new(vm_name: Option<&str>) -> Self {
        Self {
            name: vm_name.map(String::from),
            rsr: 0,
            ilpr: 0,
            ibrd: 0,
            fbrd: 0,
            lcr_h: 0,
            cr: CR_RESET,
            ifls: IFLS_RESET,
            imsc: 0,
            ris: 0,
            dmacr: 0,
            rx: RxFifo::new(),
            line: LineBuffer::new(),
            stats: Pl011Stats::default(),
        }
    }

    /// Returns the registers and the receive FIFO to their reset state
    /// (for a VM reset). The output line buffer and the counters are kept:
    /// call [`Self::flush`] first to emit a partial line.
    pub fn reset(&mut self) {
        *self = Self {
            name: self.name.take(),
            line: core::mem::replace(&mut self.line, LineBuffer::new()),
            stats: self.stats,
            ..Self::new(None)
        };
    }

    /// The name given at construction.
    pub fn vm_name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// A guest read of `size` bytes (1, 2 or 4) at `offset` in the frame.
    /// Reading DR pops the receive FIFO.
    pub fn read(&mut self, offset: u64, size: u8) -> Result<u64, AccessError> {
        let mask = access_mask(offset, size)?;
        if !offset.is_multiple_of(4) {
            self.stats.ignored_reads += 1;
            return Ok(0);
        }
        let value = match offset {
            DR => self.read_dr(),
            RSR_ECR => self.rsr,
            FR => self.flags(),
            ILPR => self.ilpr,
            IBRD => self.ibrd,
            FBRD => self.fbrd,
            LCR_H => self.lcr_h,
            CR => self.cr,
            IFLS => self.ifls,
            IMSC => self.imsc,
            RIS => self.ris,
            MIS => self.ris & self.imsc,
            DMACR => self.dmacr,
            PERIPH_ID0..FRAME_SIZE => {
                let index = ((offset - PERIPH_ID0) / 4) as usize;
                u32::from(ID_REGISTERS[index])
            }
            // ICR is write-only; everything else is reserved.
            _ => {
                self.stats.ignored_reads += 1;
                0
            }
        };
        Ok(u64::from(value) & mask)
    }

    /// A guest write of `size` bytes (1, 2 or 4) at `offset` in the frame.
    /// Writing DR transmits, which may complete a line for `sink`.
    pub fn write(
        &mut self,
        offset: u64,
        size: u8,
        value: u64,
        sink: &mut dyn ConsoleSink,
    ) -> Result<(), AccessError> {
        let value = (value & access_mask(offset, size)?) as u32;
        if !offset.is_multiple_of(4) {
            self.stats.ignored_writes += 1;
            return Ok(());
        }
        match offset {
            DR => self.transmit(value as u8, sink),
            // Any write to ECR clears the receive status (ARM DDI 0183, UARTRSR/UARTECR).
            RSR_ECR => self.rsr = 0,
            ILPR => self.ilpr = value & 0xff,
            IBRD => self.ibrd = value & 0xffff,
            FBRD => self.fbrd = value & 0x3f,
            LCR_H => {
                // Switching between FIFO and character mode flushes the
                // receive FIFO (as QEMU does), so the FIFO never holds more
                // than the new depth.
                if (self.lcr_h ^ value) & LCR_H_FEN != 0 {
                    self.rx.clear();
                }
                self.lcr_h = value & 0xff;
                self.rx_reconfigured();
            }
            CR => {
                let was_enabled = self.transmitter_enabled();
                self.cr = value & CR_DEFINED;
                // An enabled transmitter with an empty FIFO is at or below
                // any trigger level: the transmit interrupt asserts.
                if !was_enabled && self.transmitter_enabled() {
                    self.ris |= INT_TX;
                }
            }
            IFLS => {
                self.ifls = value & 0x3f;
                self.rx_reconfigured();
            }
            IMSC => self.imsc = value & INT_ALL,
            ICR => self.ris &= !value,
            DMACR => self.dmacr = value & 0x7,
            // FR, RIS, MIS and the ID registers are read-only; the rest is reserved.
            _ => self.stats.ignored_writes += 1,
        }
        Ok(())
    }

    /// Offers one byte of input to the guest. Returns whether it entered
    /// the receive FIFO: a byte pushed into a full FIFO is dropped and
    /// flagged as an overrun (RSR.OE, the OE interrupt, and DR.OE on the
    /// newest byte in the FIFO, so a driver reading the FIFO sees where
    /// data went missing); in loopback mode input is disconnected and
    /// dropped without an overrun.
    pub fn push_input(&mut self, byte: u8) -> bool {
        if self.cr & CR_LBE != 0 {
            return false;
        }
        let accepted = self.receive(u16::from(byte));
        if accepted {
            self.stats.rx_bytes += 1;
        }
        accepted
    }

    /// How many bytes [`Self::push_input`] takes now without an overrun:
    /// the free space of the FIFO (one entry without LCR_H.FEN), zero in
    /// loopback mode.
    pub fn rx_space(&self) -> usize {
        if self.cr & CR_LBE != 0 {
            return 0;
        }
        self.rx_depth() - self.rx.len
    }

    /// The level of the UART's combined interrupt (UARTINTR): whether any
    /// raw interrupt is unmasked, i.e. MIS != 0.
    pub fn irq_level(&self) -> bool {
        self.ris & self.imsc != 0
    }

    /// Emits a partial output line, if any (at VM power-off).
    pub fn flush(&mut self, sink: &mut dyn ConsoleSink) {
        self.stats.lines += self.line.flush(self.name.as_deref(), sink);
    }

    /// The counters.
    pub fn stats(&self) -> &Pl011Stats {
        &self.stats
    }

    fn transmitter_enabled(&self) -> bool {
        self.cr & (CR_UARTEN | CR_TXE) == CR_UARTEN | CR_TXE
    }

    fn transmit(&mut self, byte: u8, sink: &mut dyn ConsoleSink) {
        self.stats.tx_bytes += 1;
        if self.cr & CR_LBE != 0 {
            self.receive(u16::from(byte));
        } else {
            self.stats.lines += self.line.put(byte, self.name.as_deref(), sink);
        }
        // The byte left the (always empty) transmit FIFO at once: the FIFO
        // is at or below its trigger level (ARM DDI 0183, "UARTTXINTR").
        self.ris |= INT_TX;
    }

    /// Puts a received DR value into the FIFO; false on overrun.
    fn receive(&mut self, entry: u16) -> bool {
        if self.rx.len >= self.rx_depth() {
            // ARM DDI 0183, UARTRSR: "OE is set to 1 if data is received
            // and the receive FIFO is already full"; the FIFO keeps its
            // contents and the new character is lost.
            self.rsr |= RSR_OE;
            self.ris |= INT_OE;
            self.rx.mark_newest(DR_OE as u16);
            self.stats.rx_overruns += 1;
            return false;
        }
        self.rx.push(entry);
        if self.rx.len >= self.rx_trigger() {
            self.ris |= INT_RX;
        } else {
            self.ris |= INT_RT;
        }
        true
    }

    fn read_dr(&mut self) -> u32 {
        let Some(entry) = self.rx.pop() else {
            return 0;
        };
        let entry = u32::from(entry);
        // RSR's FE, PE and BE describe the character just read; OE stays
        // until cleared through ECR.
        self.rsr = (self.rsr & RSR_OE) | ((entry >> 8) & 0xf);
        let level = self.rx.len;
        if level < self.rx_trigger() {
            // "The receive interrupt is cleared by reading data from the
            // receive FIFO until it becomes less than the trigger level."
            self.ris &= !INT_RX;
            if level > 0 {
                self.ris |= INT_RT;
            }
        }
        if level == 0 {
            // "The receive timeout interrupt is cleared ... when the FIFO
            // becomes empty through reading all the data."
            self.ris &= !INT_RT;
        }
        entry
    }

    /// Re-evaluates the receive interrupts after the trigger level or the
    /// FIFO mode changed.
    fn rx_reconfigured(&mut self) {
        let level = self.rx.len;
        self.ris &= !(INT_RX | INT_RT);
        if level >= self.rx_trigger() {
            self.ris |= INT_RX;
        } else if level > 0 {
            self.ris |= INT_RT;
        }
    }

    fn flags(&self) -> u32 {
        let mut fr = FR_TXFE;
        if self.rx.len == 0 {
            fr |= FR_RXFE;
        }
        if self.rx.len >= self.rx_depth() {
            fr |= FR_RXFF;
        }
        fr
    }

    fn fifo_enabled(&self) -> bool {
        self.lcr_h & LCR_H_FEN != 0
    }

    fn rx_depth(&self) -> usize {
        if self.fifo_enabled() { FIFO_DEPTH } else { 1 }
    }

    /// Receive FIFO entries at which the receive interrupt asserts
    /// (IFLS.RXIFLSEL, ARM DDI 0183 "UARTIFLS"): 1/8, 1/4, 1/2, 3/4 or 7/8
    /// of the FIFO; the reserved encodings act as 1/2. Without FIFOs the
    /// one-byte holding register triggers it as soon as it is full.
    fn rx_trigger(&self) -> usize {
        if !self.fifo_enabled() {
            return 1;
        }
        match (self.ifls >> 3) & 0b111 {
            0b000 => 2,
            0b001 => 4,
            0b011 => 12,
            0b100 => 14,
            _ => 8,
        }
    }
}

/// Checks the access size and returns the mask of the bits it carries.
fn access_mask(offset: u64, size: u8) -> Result<u64, AccessError> {
    match size {
        1 => Ok(0xff),
        2 => Ok(0xffff),
        4 => Ok(0xffff_ffff),
        _ => Err(AccessError::UnsupportedSize { offset, size }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::borrow::ToOwned;
    use alloc::vec::Vec;

    /// Records every line with the name it came with.
    #[derive(Default)]
    struct Lines(Vec<(Option<String>, Vec<u8>)>);

    impl ConsoleSink for Lines {
        fn emit_line(&mut self, vm_name: Option<&str>, line: &[u8]) {
            self.0.push((vm_name.map(String::from), line.to_owned()));
        }
    }

    impl Lines {
        fn texts(&self) -> Vec<&[u8]> {
            self.0.iter().map(|(_, l)| l.as_slice()).collect()
        }
    }

    fn read32(uart: &mut Pl011, offset: u64) -> u32 {
        uart.read(offset, 4).unwrap() as u32
    }

    fn write32(uart: &mut Pl011, offset: u64, value: u32, sink: &mut Lines) {
        uart.write(offset, 4, value.into(), sink).unwrap();
    }

    fn write_str(uart: &mut Pl011, text: &[u8], sink: &mut Lines) {
        for &byte in text {
            write32(uart, DR, byte.into(), sink);
        }
    }

    #[test]
    fn reset_state_and_identification() {
        let mut uart = Pl011::new(None);
        assert_eq!(read32(&mut uart, CR), 0x300);
        assert_eq!(read32(&mut uart, IFLS), 0x12);
        assert_eq!(read32(&mut uart, FR), FR_TXFE | FR_RXFE);
        for offset in [RSR_ECR, ILPR, IBRD, FBRD, LCR_H, IMSC, RIS, MIS, DMACR] {
            assert_eq!(read32(&mut uart, offset), 0, "offset {offset:#x}");
        }
        // What Linux's AMBA bus does (drivers/amba/bus.c): read the eight
        // ID registers at the end of the frame, one byte from each word.
        let mut periph = 0u32;
        let mut cell = 0u32;
        for i in 0..4 {
            periph |= (read32(&mut uart, FRAME_SIZE - 0x20 + 4 * i) & 0xff) << (8 * i);
            cell |= (read32(&mut uart, FRAME_SIZE - 0x10 + 4 * i) & 0xff) << (8 * i);
        }
        assert_eq!(cell, 0xb105_f00d);
        assert_eq!(periph, 0x0014_1011);
        // amba-pl011's vendor_arm matches id 0x00041011 under mask 0x000fffff.
        assert_eq!(periph & 0x000f_ffff, 0x0004_1011);
        assert!(!uart.irq_level());
        assert_eq!(uart.stats(), &Pl011Stats::default());
    }

    #[test]
    fn linux_driver_sequence() {
        let mut sink = Lines::default();
        let mut uart = Pl011::new(None);
        // pl011_hwinit: clear the error and receive interrupts, save IMSC,
        // unmask RX/RT (16-bit accesses, as amba-pl011 makes for Arm's part).
        let w16 = |uart: &mut Pl011, offset, value: u16, sink: &mut Lines| {
            uart.write(offset, 2, value.into(), sink).unwrap();
        };
        w16(&mut uart, ICR, 0x7f0, &mut sink);
        assert_eq!(uart.read(IMSC, 2), Ok(0));
        w16(&mut uart, IMSC, (INT_RT | INT_RX) as u16, &mut sink);
        // pl011_startup: trigger levels, enable; then set_termios.
        w16(&mut uart, IFLS, 0x12, &mut sink);
        w16(
            &mut uart,
            CR,
            (CR_UARTEN | CR_TXE | CR_RXE) as u16,
            &mut sink,
        );
        // Enabling the transmitter raised TX, which is still masked.
        assert_eq!(uart.read(RIS, 2), Ok(u64::from(INT_TX)));
        assert!(!uart.irq_level());
        w16(&mut uart, IBRD, 13, &mut sink); // 115200 baud at 24 MHz
        w16(&mut uart, FBRD, 1, &mut sink);
        w16(
            &mut uart,
            LCR_H,
            (LCR_H_WLEN_8 | LCR_H_FEN) as u16,
            &mut sink,
        );
        assert_eq!(uart.read(IBRD, 2), Ok(13));
        assert_eq!(uart.read(FBRD, 2), Ok(1));
        assert_eq!(uart.read(LCR_H, 2), Ok(0x70));
        // pl011_enable_interrupts: drain the receive FIFO while !RXFE.
        assert_ne!(uart.read(FR, 2).unwrap() as u32 & FR_RXFE, 0);

        // pl011_tx_chars: write while !TXFF, then unmask TX for the rest.
        for &byte in b"Linux version" {
            assert_eq!(uart.read(FR, 2).unwrap() as u32 & FR_TXFF, 0);
            w16(&mut uart, DR, byte.into(), &mut sink);
        }
        w16(
            &mut uart,
            IMSC,
            (INT_RT | INT_RX | INT_TX) as u16,
            &mut sink,
        );
        assert!(uart.irq_level(), "the empty FIFO asserts TX");
        assert_eq!(uart.read(MIS, 2), Ok(u64::from(INT_TX)));
        // The interrupt handler writes the rest, nothing left: mask TX.
        for &byte in b" 6.12\r\n" {
            w16(&mut uart, DR, byte.into(), &mut sink);
        }
        w16(&mut uart, IMSC, (INT_RT | INT_RX) as u16, &mut sink);
        assert!(!uart.irq_level());
        // pl011_console_write: poll FR.BUSY after the last byte.
        assert_eq!(uart.read(FR, 2).unwrap() as u32 & FR_BUSY, 0);
        assert_eq!(sink.texts(), [b"Linux version 6.12".as_slice()]);

        // Input: RT fires at once (below the half-full trigger), the
        // handler drains DR until RXFE.
        for &byte in b"ls\r" {
            assert!(uart.push_input(byte));
        }
        assert!(uart.irq_level());
        assert_eq!(uart.read(MIS, 2), Ok(u64::from(INT_RT)));
        let mut got = Vec::new();
        while uart.read(FR, 2).unwrap() as u32 & FR_RXFE == 0 {
            got.push(uart.read(DR, 2).unwrap() as u8);
        }
        assert_eq!(got, b"ls\r");
        assert!(!uart.irq_level());
        assert_eq!(uart.stats().rx_bytes, 3);
        assert_eq!(uart.stats().tx_bytes, 20);
        assert_eq!(uart.stats().lines, 1);
    }

    #[test]
    fn transmit_interrupt_set_clear_and_mask() {
        let mut sink = Lines::default();
        let mut uart = Pl011::new(None);
        write32(&mut uart, DR, u32::from(b'x'), &mut sink);
        assert_eq!(read32(&mut uart, RIS), INT_TX);
        assert_eq!(read32(&mut uart, MIS), 0);
        assert!(!uart.irq_level());
        write32(&mut uart, IMSC, INT_TX, &mut sink);
        assert_eq!(read32(&mut uart, MIS), INT_TX);
        assert!(uart.irq_level());
        // Write 1 to clear; 0 bits leave others alone.
        write32(&mut uart, ICR, INT_RX, &mut sink);
        assert!(uart.irq_level());
        write32(&mut uart, ICR, INT_TX, &mut sink);
        assert_eq!(read32(&mut uart, RIS), 0);
        assert!(!uart.irq_level());
        // Re-enabling the transmitter raises it again; re-writing an
        // enabled CR does not.
        write32(&mut uart, CR, CR_UARTEN | CR_TXE, &mut sink);
        assert!(uart.irq_level());
        write32(&mut uart, ICR, INT_ALL, &mut sink);
        write32(&mut uart, CR, CR_UARTEN | CR_TXE | CR_RXE, &mut sink);
        assert!(!uart.irq_level());
        // Undefined bits of IMSC and CR do not stick.
        write32(&mut uart, IMSC, u32::MAX, &mut sink);
        assert_eq!(read32(&mut uart, IMSC), INT_ALL);
        write32(&mut uart, CR, u32::MAX, &mut sink);
        assert_eq!(read32(&mut uart, CR), CR_DEFINED);
    }

    #[test]
    fn receive_fifo_trigger_levels_and_timeout() {
        let mut sink = Lines::default();
        let mut uart = Pl011::new(None);
        write32(&mut uart, LCR_H, LCR_H_FEN | LCR_H_WLEN_8, &mut sink);
        write32(&mut uart, IMSC, INT_RX | INT_RT, &mut sink);
        write32(&mut uart, IFLS, 0b001 << 3, &mut sink); // RX at 1/4 = 4 bytes
        assert_eq!(uart.rx_space(), FIFO_DEPTH);
        for byte in b"abc" {
            assert!(uart.push_input(*byte));
        }
        assert_eq!(read32(&mut uart, RIS), INT_RT);
        uart.push_input(b'd');
        assert_eq!(read32(&mut uart, RIS), INT_RT | INT_RX);
        // The timeout can be cleared on its own; reading below the trigger
        // clears RX, and data left behind times out again.
        write32(&mut uart, ICR, INT_RT, &mut sink);
        assert_eq!(read32(&mut uart, RIS), INT_RX);
        assert_eq!(read32(&mut uart, DR), u32::from(b'a'));
        assert_eq!(read32(&mut uart, RIS), INT_RT);
        // 8-bit reads of DR pop too.
        assert_eq!(uart.read(DR, 1), Ok(u64::from(b'b')));
        assert_eq!(uart.read(DR, 1), Ok(u64::from(b'c')));
        assert!(uart.irq_level());
        assert_eq!(uart.read(DR, 1), Ok(u64::from(b'd')));
        assert_eq!(read32(&mut uart, RIS), 0);
        assert_eq!(read32(&mut uart, FR), FR_TXFE | FR_RXFE);
        // An empty FIFO reads as 0.
        assert_eq!(read32(&mut uart, DR), 0);
        assert!(!uart.irq_level());
        // Raising the trigger above the level turns RX into a timeout.
        for byte in b"12345" {
            uart.push_input(*byte);
        }
        assert_eq!(read32(&mut uart, RIS), INT_RX | INT_RT);
        write32(&mut uart, IFLS, 0b100 << 3, &mut sink); // 7/8 = 14 bytes
        assert_eq!(read32(&mut uart, RIS), INT_RT);
        assert_eq!(uart.rx_space(), FIFO_DEPTH - 5);
    }

    #[test]
    fn receive_overrun_in_both_fifo_modes() {
        let mut sink = Lines::default();
        let mut uart = Pl011::new(None);
        // Reset: FIFOs off, a one-byte holding register.
        assert_eq!(uart.rx_space(), 1);
        assert!(uart.push_input(b'a'));
        assert_eq!(uart.rx_space(), 0);
        assert_eq!(read32(&mut uart, FR), FR_TXFE | FR_RXFF);
        assert_eq!(read32(&mut uart, RIS), INT_RX);
        assert!(!uart.push_input(b'b'));
        assert_eq!(read32(&mut uart, RSR_ECR), RSR_OE);
        assert_eq!(read32(&mut uart, RIS), INT_RX | INT_OE);
        // The byte kept carries the overrun flag; RSR.OE sticks until ECR.
        assert_eq!(read32(&mut uart, DR), u32::from(b'a') | DR_OE);
        assert_eq!(read32(&mut uart, RSR_ECR), RSR_OE);
        write32(&mut uart, RSR_ECR, 0, &mut sink);
        assert_eq!(read32(&mut uart, RSR_ECR), 0);
        write32(&mut uart, ICR, INT_OE, &mut sink);

        // FIFOs on: 16 bytes, then overrun.
        write32(&mut uart, LCR_H, LCR_H_FEN, &mut sink);
        for i in 0..FIFO_DEPTH as u8 {
            assert!(uart.push_input(b'A' + i));
        }
        assert_ne!(read32(&mut uart, FR) & FR_RXFF, 0);
        assert!(!uart.push_input(b'!'));
        assert!(!uart.push_input(b'!'));
        assert_eq!(uart.stats().rx_overruns, 3);
        let mut got = Vec::new();
        while read32(&mut uart, FR) & FR_RXFE == 0 {
            got.push(read32(&mut uart, DR));
        }
        assert_eq!(got.len(), FIFO_DEPTH);
        assert_eq!(got[0], u32::from(b'A'));
        assert_eq!(got[15], u32::from(b'P') | DR_OE);
        // Leaving FIFO mode flushes the FIFO.
        uart.push_input(b'z');
        write32(&mut uart, LCR_H, 0, &mut sink);
        assert_eq!(read32(&mut uart, FR), FR_TXFE | FR_RXFE);
        assert_eq!(read32(&mut uart, RIS) & (INT_RX | INT_RT), 0);
    }

    #[test]
    fn line_buffering_and_carriage_returns() {
        let mut sink = Lines::default();
        let mut uart = Pl011::new(None);
        write_str(
            &mut uart,
            b"one\r\ntwo\n\r\nprogress 1\rprogress 2\n\ntail\r",
            &mut sink,
        );
        assert_eq!(
            sink.texts(),
            [
                b"one".as_slice(),
                b"two",
                b"",
                b"progress 1\rprogress 2",
                b""
            ]
        );
        // The partial line waits for power-off; its trailing CR is dropped.
        uart.flush(&mut sink);
        assert_eq!(sink.0.last().unwrap().1, b"tail");
        uart.flush(&mut sink);
        assert_eq!(sink.0.len(), 6, "nothing left to flush");
        assert_eq!(uart.stats().lines, 6);
        assert!(sink.0.iter().all(|(name, _)| name.is_none()));
    }

    #[test]
    fn long_lines_are_emitted_in_pieces() {
        let mut sink = Lines::default();
        let mut uart = Pl011::new(None);
        let long: Vec<u8> = (0..LINE_MAX + 10).map(|i| b'a' + (i % 26) as u8).collect();
        write_str(&mut uart, &long, &mut sink);
        assert_eq!(sink.texts(), [&long[..LINE_MAX]]);
        write_str(&mut uart, b"\n", &mut sink);
        assert_eq!(sink.texts(), [&long[..LINE_MAX], &long[LINE_MAX..]]);
        // A CR held back at the buffer's edge is not lost.
        let mut sink = Lines::default();
        write_str(&mut uart, &[b'x'; LINE_MAX - 1], &mut sink);
        write_str(&mut uart, b"\ry\n", &mut sink);
        let mut first = [b'x'; LINE_MAX];
        first[LINE_MAX - 1] = b'\r';
        assert_eq!(sink.texts(), [first.as_slice(), b"y"]);
    }

    #[test]
    fn two_vms_never_interleave_mid_line() {
        let mut sink = Lines::default();
        let mut a = Pl011::new(Some("alpha"));
        let mut b = Pl011::new(Some("beta"));
        assert_eq!(a.vm_name(), Some("alpha"));
        // Alternate byte by byte, as two vCPUs on two CPUs would.
        let (text_a, text_b) = (
            b"hello from alpha\r\nbye\n".as_slice(),
            b"beta here\n".as_slice(),
        );
        for i in 0..text_a.len().max(text_b.len()) {
            if let Some(&byte) = text_a.get(i) {
                write32(&mut a, DR, byte.into(), &mut sink);
            }
            if let Some(&byte) = text_b.get(i) {
                write32(&mut b, DR, byte.into(), &mut sink);
            }
        }
        let lines: Vec<(Option<&str>, &[u8])> = sink
            .0
            .iter()
            .map(|(n, l)| (n.as_deref(), l.as_slice()))
            .collect();
        assert_eq!(
            lines,
            [
                (Some("beta"), b"beta here".as_slice()),
                (Some("alpha"), b"hello from alpha"),
                (Some("alpha"), b"bye"),
            ]
        );
    }

    #[test]
    fn loopback_feeds_the_receiver_not_the_console() {
        let mut sink = Lines::default();
        let mut uart = Pl011::new(None);
        write32(
            &mut uart,
            CR,
            CR_UARTEN | CR_TXE | CR_RXE | CR_LBE,
            &mut sink,
        );
        assert_eq!(uart.rx_space(), 0);
        assert!(!uart.push_input(b'i'), "input is disconnected in loopback");
        write32(&mut uart, DR, u32::from(b'\n'), &mut sink);
        assert!(sink.0.is_empty());
        assert_eq!(read32(&mut uart, DR), u32::from(b'\n'));
        assert_eq!(uart.stats().rx_overruns, 0);
    }

    #[test]
    fn odd_accesses() {
        let mut sink = Lines::default();
        let mut uart = Pl011::new(None);
        // 64-bit accesses are refused: the caller aborts the guest.
        assert_eq!(
            uart.read(DR, 8),
            Err(AccessError::UnsupportedSize {
                offset: DR,
                size: 8
            })
        );
        assert_eq!(
            uart.write(CR, 8, 0, &mut sink),
            Err(AccessError::UnsupportedSize {
                offset: CR,
                size: 8
            })
        );
        assert!(uart.read(DR, 3).is_err() && uart.read(DR, 0).is_err());
        assert_eq!(
            read32(&mut uart, CR),
            0x300,
            "a refused write changes nothing"
        );
        // Reserved offsets, write-only and read-only registers, and
        // accesses inside a register are ignored and counted.
        for offset in [0x008, 0x01c, 0x04c, 0x080, 0xfdc, FRAME_SIZE, u64::MAX - 3] {
            assert_eq!(read32(&mut uart, offset), 0);
            write32(&mut uart, offset, 0xffff_ffff, &mut sink);
        }
        assert_eq!(read32(&mut uart, ICR), 0);
        for offset in [FR, RIS, MIS, PERIPH_ID0, 0xffc] {
            write32(&mut uart, offset, 0xffff_ffff, &mut sink);
        }
        assert_eq!(uart.read(DR + 1, 1), Ok(0));
        uart.write(DR + 2, 2, u64::from(b'!'), &mut sink).unwrap();
        assert_eq!(uart.stats().ignored_reads, 9);
        assert_eq!(uart.stats().ignored_writes, 13);
        assert_eq!(uart.stats().tx_bytes, 0);
        assert_eq!(read32(&mut uart, 0xffc), 0xb1);
        // A byte write to DR transmits its low byte; narrow reads truncate.
        uart.write(DR, 1, 0x1234_5641, &mut sink).unwrap();
        uart.write(DR, 2, u64::from(b'\n'), &mut sink).unwrap();
        assert_eq!(sink.texts(), [b"A".as_slice()]);
        assert_eq!(uart.read(CR, 1), Ok(0x00));
        assert_eq!(uart.read(CR, 2), Ok(0x300));
    }

    #[test]
    fn reset_keeps_the_name_and_the_partial_line() {
        let mut sink = Lines::default();
        let mut uart = Pl011::new(Some("vm0"));
        write32(&mut uart, LCR_H, LCR_H_FEN, &mut sink);
        write32(&mut uart, IMSC, INT_ALL, &mut sink);
        write_str(&mut uart, b"partial", &mut sink);
        uart.push_input(b'q');
        uart.reset();
        assert_eq!(read32(&mut uart, LCR_H), 0);
        assert_eq!(read32(&mut uart, FR), FR_TXFE | FR_RXFE);
        assert!(!uart.irq_level());
        uart.flush(&mut sink);
        assert_eq!(sink.0, [(Some(String::from("vm0")), b"partial".to_vec())]);
        assert_eq!(uart.stats().tx_bytes, 7);
    }

    #[test]
    fn random_accesses_never_panic_and_keep_the_fifo_consistent() {
        let mut rng = prng::Rng::new(0x2545_f491_4f6c_dd1d);
        let mut next = move || rng.next_u64();
        let mut sink = Lines::default();
        let mut uart = Pl011::new(Some("fuzz"));
        for _ in 0..200_000 {
            let r = next();
            // Mostly defined registers, sometimes anywhere.
            let offset = if r & 0xf == 0 {
                (r >> 8) & 0x1fff
            } else {
                ((r >> 8) % 0x13) * 4
            };
            let size = [1, 2, 4, 8, 3][((r >> 32) % 5) as usize];
            match (r >> 40) % 4 {
                0 => {
                    let _ = uart.read(offset, size);
                }
                1 => {
                    let _ = uart.write(offset, size, next(), &mut sink);
                }
                2 => {
                    let space = uart.rx_space();
                    let accepted = uart.push_input(next() as u8);
                    assert_eq!(accepted, space > 0);
                }
                _ => {
                    assert_eq!(uart.irq_level(), uart.ris & uart.imsc != 0);
                }
            }
            assert!(uart.rx.len <= uart.rx_depth());
            let fr = uart.flags();
            assert_eq!(fr & FR_RXFE != 0, uart.rx.len == 0);
            assert_eq!(fr & (FR_TXFF | FR_BUSY), 0);
        }
        uart.flush(&mut sink);
        assert!(sink.0.iter().all(|(_, line)| line.len() <= LINE_MAX));
    }
}
