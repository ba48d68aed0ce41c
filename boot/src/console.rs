//! The console both images print on: the PL011 UART their device tree (or
//! SPCR table) names, written by polling (UARTFR.TXFF), behind one lock so
//! that each `println!` comes out as a whole line even
//! when several CPUs print at once.
//!
//! What is decided here:
//! - line ends are CR LF ([`CrLf`]), what a serial terminal (and QEMU's
//!   `-serial`) expects;
//! - nothing is printed until `init` ran: before that the MMU may be off
//!   (every access is then to Device memory), and the exclusive loads and
//!   stores the lock uses are CONSTRAINED UNPREDICTABLE there (Arm ARM
//!   B2.9.5, "Load-Exclusive and Store-Exclusive instruction usage
//!   restrictions");
//! - the fatal path (`print_fatal`) waits for the lock a bounded time
//!   and then writes anyway: the holder may be the very CPU that faulted
//!   while printing, and a garbled report beats none.
//!
//! The UART's baud rate and line settings are the firmware's (or, in a VM,
//! the hypervisor's emulation needs none): the images only write it, read
//! what arrives, and mask its interrupts.

use core::fmt;

/// Where console bytes go, one at a time.
pub trait ByteSink {
    fn put(&mut self, byte: u8);
}

/// A [`fmt::Write`] over a [`ByteSink`] that ends each line with CR LF.
#[derive(Debug)]
pub struct CrLf<S>(pub S);

impl<S: ByteSink> fmt::Write for CrLf<S> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for byte in s.bytes() {
            if byte == b'\n' {
                self.0.put(b'\r');
            }
            self.0.put(byte);
        }
        Ok(())
    }
}

#[cfg(target_os = "none")]
pub use hardware::*;

#[cfg(target_os = "none")]
mod hardware {
    use super::{ByteSink, CrLf};
    use crate::sync::{SpinMutex, cpu_relax};
    use arm_pl011_uart::{PL011Registers, Uart, UniqueMmioPointer};
    use core::fmt::{self, Write};
    use core::ptr::NonNull;
    use core::sync::atomic::{AtomicBool, Ordering};

    /// The PL011's interrupt bits (UARTIMSC, UARTRIS, UARTMIS, UARTICR).
    pub use arm_pl011_uart::Interrupts;

    struct Pl011(Uart<'static>);

    impl ByteSink for Pl011 {
        fn put(&mut self, byte: u8) {
            while self.0.is_tx_fifo_full() {
                core::hint::spin_loop();
            }
            self.0.write_word(byte);
        }
    }

    static CONSOLE: SpinMutex<Option<CrLf<Pl011>>> = SpinMutex::new(None);
    /// Set once [`init`] ran (see the module documentation).
    static READY: AtomicBool = AtomicBool::new(false);

    /// How many times [`print_fatal`] looks at a busy lock before it
    /// writes regardless.
    const FATAL_LOCK_TRIES: u32 = 1_000_000;

    /// Takes the PL011 at `base` as the console.
    ///
    /// # Safety
    /// `base` must be the PL011's register block, mapped as Device memory
    /// in the current stage-1 map, and used by nothing else; the MMU must
    /// be on (normal memory cacheable) on this and every CPU that prints.
    pub unsafe fn init(base: u64) {
        let Some(regs) = NonNull::new(base as *mut PL011Registers) else {
            return;
        };
        // SAFETY: the caller guarantees a valid, exclusively owned PL011 block.
        let uart = Uart::new(unsafe { UniqueMmioPointer::new(regs) });
        *CONSOLE.lock() = Some(CrLf(Pl011(uart)));
        READY.store(true, Ordering::Release);
    }

    /// Writes `args` to the console, if there is one.
    pub fn print(args: fmt::Arguments) {
        if !READY.load(Ordering::Acquire) {
            return;
        }
        if let Some(console) = CONSOLE.lock().as_mut() {
            let _ = console.write_fmt(args);
        }
    }

    /// Writes from a fatal path: takes the lock if it can within a bounded
    /// wait, and otherwise writes anyway (see the module documentation).
    pub fn print_fatal(args: fmt::Arguments) {
        if !READY.load(Ordering::Acquire) {
            return;
        }
        for _ in 0..FATAL_LOCK_TRIES {
            if let Some(mut guard) = CONSOLE.try_lock() {
                if let Some(console) = guard.as_mut() {
                    let _ = console.write_fmt(args);
                }
                return;
            }
            cpu_relax();
        }
        // SAFETY: only reached when the lock is stuck; the console is a
        // plain MMIO writer, so concurrent use garbles text but breaks no
        // invariant.
        unsafe { CONSOLE.force_unlock() };
        if let Some(console) = CONSOLE.lock().as_mut() {
            let _ = console.write_fmt(args);
        }
    }

    /// Takes one byte of input, if one has arrived (receive errors —
    /// framing, parity, break — drop the byte).
    pub fn read_byte() -> Option<u8> {
        if !READY.load(Ordering::Acquire) {
            return None;
        }
        let mut console = CONSOLE.lock();
        let uart = &mut console.as_mut()?.0.0;
        if uart.is_rx_fifo_empty() {
            return None;
        }
        uart.read_word().ok().flatten()
    }

    /// Sets the UART's interrupt mask (UARTIMSC: a set bit lets that
    /// interrupt drive the UART's interrupt line) to `update(old)`, under
    /// the console lock, so no line being printed sees the change half-way.
    /// Returns the old mask, for the caller to restore exactly; `None`
    /// without a console. The console itself only polls.
    pub fn update_interrupt_masks(
        update: impl FnOnce(Interrupts) -> Interrupts,
    ) -> Option<Interrupts> {
        if !READY.load(Ordering::Acquire) {
            return None;
        }
        let mut console = CONSOLE.lock();
        let uart = &mut console.as_mut()?.0.0;
        let old = uart.interrupt_masks();
        uart.set_interrupt_masks(update(old));
        Some(old)
    }
}

/// Prints a line on the console (one whole line, never interleaved with
/// another CPU's).
#[cfg(target_os = "none")]
#[macro_export]
macro_rules! println {
    () => {
        $crate::console::print(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::console::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Prints on the console without a newline.
#[cfg(target_os = "none")]
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::console::print(format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Write;

    impl ByteSink for Vec<u8> {
        fn put(&mut self, byte: u8) {
            self.push(byte);
        }
    }

    #[test]
    fn lines_end_with_cr_lf() {
        let mut out = CrLf(Vec::new());
        write!(out, "one\ntwo\n\nthree").unwrap();
        assert_eq!(out.0, b"one\r\ntwo\r\n\r\nthree");
        out.0.clear();
        writeln!(out, "{}", 42).unwrap();
        assert_eq!(out.0, b"42\r\n");
    }
}
