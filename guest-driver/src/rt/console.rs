//! The guest's console: the PL011 its device tree names, written by polling
//! (FR.TXFF), behind a lock so that each [`println!`](crate::println) comes
//! out as one whole line even when several vCPUs print at once.

use super::SpinMutex;
use arm_pl011_uart::{PL011Registers, Uart, UniqueMmioPointer};

/// The PL011's interrupt bits (UARTIMSC, UARTRIS, UARTMIS, UARTICR).
pub use arm_pl011_uart::Interrupts;
use core::fmt::{self, Write};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};

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

static CONSOLE: SpinMutex<Option<Console>> = SpinMutex::new(None);
/// Set once [`init`] ran: before that (MMU off) the lock must not be taken,
/// since atomic read-modify-writes are not allowed on Device memory.
static READY: AtomicBool = AtomicBool::new(false);

/// Takes the PL011 at `base` as the console. The firmware or hypervisor has
/// set it up; the guest only writes to it.
///
/// # Safety
/// `base` must be the PL011's register block, mapped as device memory, used
/// by nothing else; the MMU must be on.
pub unsafe fn init(base: u64) {
    let Some(regs) = NonNull::new(base as *mut PL011Registers) else {
        return;
    };
    // SAFETY: the caller guarantees a valid, exclusively owned PL011 block.
    let uart = Uart::new(unsafe { UniqueMmioPointer::new(regs) });
    *CONSOLE.lock() = Some(Console { uart });
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

/// Sets the console UART's interrupt mask (UARTIMSC: a set bit lets that
/// interrupt drive the UART's interrupt line) to `update(old)`, under the
/// console lock, so no line being printed sees the change half-way.
/// Returns the old mask, for the caller to restore exactly; `None` without
/// a console. The runtime itself only polls the UART, so it never needs
/// an interrupt; a guest that unmasks one must mask it again.
pub fn update_interrupt_masks(update: impl FnOnce(Interrupts) -> Interrupts) -> Option<Interrupts> {
    if !READY.load(Ordering::Acquire) {
        return None;
    }
    let mut console = CONSOLE.lock();
    let uart = &mut console.as_mut()?.uart;
    let old = uart.interrupt_masks();
    uart.set_interrupt_masks(update(old));
    Some(old)
}

/// Writes from a fatal path: takes the lock if it can within a bounded
/// wait, and otherwise writes anyway (the holder may be this very CPU,
/// interrupted by the fault; a garbled report beats none).
pub fn print_fatal(args: fmt::Arguments) {
    if !READY.load(Ordering::Acquire) {
        return;
    }
    for _ in 0..1_000_000 {
        if let Some(mut guard) = CONSOLE.try_lock() {
            if let Some(console) = guard.as_mut() {
                let _ = console.write_fmt(args);
            }
            return;
        }
        crate::lock::cpu_relax();
    }
    // SAFETY: only reached when the lock is stuck; the console is a plain
    // MMIO writer, so concurrent use garbles text but breaks no invariant.
    unsafe { CONSOLE.force_unlock() };
    if let Some(console) = CONSOLE.lock().as_mut() {
        let _ = console.write_fmt(args);
    }
}

/// Prints a line on the guest console (one whole line, never interleaved
/// with another CPU's).
#[macro_export]
macro_rules! println {
    () => {
        $crate::rt::console::print(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::rt::console::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Prints on the guest console without a newline.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::rt::console::print(format_args!($($arg)*))
    };
}
