//! The hypervisor's console: `boot::console` (the platform's PL011 behind
//! one lock, shared with the guests' runtime) with el2's `log` backend on
//! top, which prefixes every record with its level and CPU.

pub use boot::console::{init, print, print_fatal, read_byte};

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
