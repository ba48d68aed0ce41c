//! Wall-clock time for guests (KVM PTP, docs/abi.md §2): one reading of
//! a real-time clock at boot, carried forward with the architected counter.

use core::fmt;

/// Nanoseconds per second.
const NS_PER_SEC: u128 = 1_000_000_000;

/// The time of day as of one RTC reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WallClock {
    /// Whole seconds since the Unix epoch when the RTC was read.
    epoch_secs: u64,
    /// The physical counter at that moment.
    counter_at: u64,
    /// Counter ticks per second (CNTFRQ_EL0).
    hz: u64,
}

impl WallClock {
    /// `None` when the counter frequency is unknown (0).
    pub const fn new(epoch_secs: u64, counter_at: u64, hz: u64) -> Option<Self> {
        if hz == 0 {
            return None;
        }
        Some(Self {
            epoch_secs,
            counter_at,
            hz,
        })
    }

    /// Nanoseconds since the Unix epoch at counter value `counter`
    /// (saturating; a counter before the reading counts as the reading).
    pub fn ns_at(&self, counter: u64) -> u64 {
        let elapsed = u128::from(counter.saturating_sub(self.counter_at));
        let ns =
            u128::from(self.epoch_secs) * NS_PER_SEC + elapsed * NS_PER_SEC / u128::from(self.hz);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// The boot console's line, from which a test computes what every PTP
/// reply must say for a counter value (xtask's `ptptest` reads it back):
/// `wall clock: <secs> s since the Unix epoch at counter <ticks> (<hz> Hz)`.
impl fmt::Display for WallClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wall clock: {} s since the Unix epoch at counter {} ({} Hz)",
            self.epoch_secs, self.counter_at, self.hz
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn the_boot_line_names_the_reading() {
        let clock = WallClock::new(1_795_996_800, 1_000, 62_500_000).unwrap();
        assert_eq!(
            clock.to_string(),
            "wall clock: 1795996800 s since the Unix epoch at counter 1000 (62500000 Hz)"
        );
    }

    #[test]
    fn carries_the_reading_forward_with_the_counter() {
        // 62.5 MHz counter (QEMU 7.2), read at 2026-11-30T00:00:00Z.
        let clock = WallClock::new(1_795_996_800, 1_000, 62_500_000).unwrap();
        assert_eq!(clock.ns_at(1_000), 1_795_996_800 * 1_000_000_000);
        // 62_500_000 ticks later: one second.
        assert_eq!(clock.ns_at(62_501_000), 1_795_996_801 * 1_000_000_000);
        // One tick = 16 ns.
        assert_eq!(clock.ns_at(1_001) - clock.ns_at(1_000), 16);
        assert_eq!(clock.ns_at(0), clock.ns_at(1_000), "before the reading");
    }

    #[test]
    fn no_clock_without_a_frequency_and_no_overflow() {
        assert_eq!(WallClock::new(1, 0, 0), None);
        let far = WallClock::new(u64::MAX / 2, 0, 1).unwrap();
        assert_eq!(far.ns_at(u64::MAX), u64::MAX);
    }
}
