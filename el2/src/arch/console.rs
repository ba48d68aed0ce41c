//! The hypervisor's console: the platform's PL011, behind a lock, as the
//! `log` backend.

use arm_pl011_uart::{PL011Registers, Uart, UniqueMmioPointer};
use core::fmt::{self, Write};
use core::ptr::NonNull;

struct Console {
    uart: Uart<'static>,
}

impl Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for byte in s.bytes() {
            if byte == b'\n' {
                self.put(b'\r');
            }
            self.put(byte);
        }
        Ok(())
    }
}

impl Console {
    fn put(&mut self, byte: u8) {
        while self.uart.is_tx_fifo_full() {
            core::hint::spin_loop();
        }
        self.uart.write_word(byte);
    }
}

static CONSOLE: super::sync::Mutex<Option<Console>> = super::sync::Mutex::new(None);

/// Takes the PL011 at `base` as the console. The firmware has set its baud
/// rate; the hypervisor only writes to it.
///
/// # Safety
/// `base` must be the PL011's register block, mapped as device memory in
/// the current stage-1 map, and used by nothing else.
pub unsafe fn init(base: u64) {
    let Some(regs) = NonNull::new(base as *mut PL011Registers) else {
        return;
    };
    // SAFETY: the caller guarantees a valid, exclusively owned PL011 block.
    let uart = Uart::new(unsafe { UniqueMmioPointer::new(regs) });
    *CONSOLE.lock() = Some(Console { uart });
}

/// Takes one byte of input from the console, if one has arrived (receive
/// errors — framing, parity, break — drop the byte).
pub fn read_byte() -> Option<u8> {
    let mut console = CONSOLE.lock();
    let uart = &mut console.as_mut()?.uart;
    if uart.is_rx_fifo_empty() {
        return None;
    }
    uart.read_word().ok().flatten()
}

/// Writes `args` to the console, if there is one.
pub fn print(args: fmt::Arguments) {
    if let Some(console) = CONSOLE.lock().as_mut() {
        let _ = console.write_fmt(args);
    }
}

/// Writes from the fatal-error path: takes the lock if it can within a
/// bounded wait, and otherwise writes anyway (the holder may be the CPU
/// that faulted, and a garbled report beats none).
pub fn print_fatal(args: fmt::Arguments) {
    for _ in 0..1_000_000 {
        if let Some(mut guard) = CONSOLE.try_lock() {
            if let Some(console) = guard.as_mut() {
                let _ = console.write_fmt(args);
            }
            return;
        }
        core::hint::spin_loop();
    }
    // SAFETY: only reached when the lock is stuck; the console is a plain
    // MMIO writer, so concurrent use garbles text but breaks no invariant.
    unsafe { CONSOLE.force_unlock() };
    if let Some(console) = CONSOLE.lock().as_mut() {
        let _ = console.write_fmt(args);
    }
}

#[macro_export]
macro_rules! println {
    () => { $crate::arch::console::print(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::arch::console::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `log` backend: one line per record, prefixed with level and CPU.
struct Logger;

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let cpu = super::cpu::current().map_or(0, |c| c.index);
        print(format_args!(
            "[{:5} cpu{}] {}\n",
            record.level(),
            cpu,
            record.args()
        ));
    }

    fn flush(&self) {}
}

static LOGGER: Logger = Logger;

pub fn init_logger(level: log::LevelFilter) {
    // A second call (there is none) would only fail to replace the logger.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}
