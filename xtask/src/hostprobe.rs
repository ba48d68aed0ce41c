//! How quickly this host moves a cache line between two of its cores,
//! measured beside every multi-threaded benchmark run.
//!
//! Under multi-threaded TCG each pCPU is a host thread, and a contended
//! guest lock is a cache line that the host passes between the cores
//! running those threads. The machines this project benchmarks on are
//! themselves virtual: their cores' round trip reads anywhere from 0.3 to
//! 12 µs from one run to the next, and the multi-threaded cells swing by
//! 2.5x between minutes. Each multi-threaded run records the round trip
//! just before it, so that results.json keeps what the host's cores did
//! beside each figure. In the first full run with it (docs/benchmarks.md,
//! "Reading the figures") it did not tell the fast runs from the slow
//! ones: the swing comes from something a two-thread ping-pong does not
//! see.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// Round trips in one timed batch.
const ROUND_TRIPS: u32 = 2_000;
/// Batches per probe; the probe is their median.
const BATCHES: usize = 5;

/// The host's core-to-core round trip, in nanoseconds: the median of
/// [`BATCHES`] batches of [`ROUND_TRIPS`] hand-offs of one atomic
/// between two threads (each waits for the other's store before its
/// own). About 50 ms on the slowest host seen.
pub fn core_round_trip_ns() -> f64 {
    let mut batches: Vec<f64> = (0..BATCHES).map(|_| batch(ROUND_TRIPS)).collect();
    batches.sort_by(f64::total_cmp);
    batches[BATCHES / 2]
}

/// One batch of `round_trips` hand-offs; nanoseconds per round trip.
fn batch(round_trips: u32) -> f64 {
    let turn = AtomicU32::new(0);
    let wait_for = |value: u32| {
        while turn.load(Ordering::Acquire) != value {
            std::hint::spin_loop();
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..round_trips {
                wait_for(2 * i + 1);
                turn.store(2 * i + 2, Ordering::Release);
            }
        });
        let start = Instant::now();
        for i in 0..round_trips {
            turn.store(2 * i + 1, Ordering::Release);
            wait_for(2 * i + 2);
        }
        start.elapsed().as_nanos() as f64 / f64::from(round_trips)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_takes_time_and_less_than_a_millisecond() {
        // Two threads on any host that runs the test suite: at least a
        // few nanoseconds (two stores seen across threads), and far below
        // a scheduler tick unless the host has one core and no other.
        let ns = core_round_trip_ns();
        assert!(ns.is_finite() && ns > 1.0, "{ns}");
        assert!(ns < 1_000_000.0, "{ns}");
    }
}
