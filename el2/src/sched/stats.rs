//! Per-vCPU and per-VM scheduling accounting, in counter ticks.

use core::fmt;
use core::ops::AddAssign;

/// What the scheduler measured for one vCPU. Times are in counter ticks
/// (CNTPCT); the intervals that are still open when the stats are read are
/// included up to the `now` of the query.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VcpuStats {
    /// Time spent Running on a pCPU.
    pub run_ticks: u64,
    /// Time spent Runnable but not running: waiting in a run queue. This is the
    /// vCPU's steal time (DEN0057A "stolen time"; docs/abi.md §4). Blocked and
    /// powered-off time is never steal.
    pub steal_ticks: u64,
    /// Time spent Blocked (WFI / CPU_SUSPEND).
    pub blocked_ticks: u64,
    /// Times it was scheduled in (each Runnable -> Running transition).
    pub scheduled_in: u64,
    /// Times its slice expired and it was switched out for another vCPU
    /// (a slice renewed because nobody was waiting does not count).
    pub preemptions: u64,
    /// Times it blocked in WFI (a WFI that returned at once does not count).
    pub blocks: u64,
    /// Times it gave up the pCPU voluntarily (plain yield or directed yield).
    pub yields: u64,
    /// Times it was the target of a directed yield.
    pub yielded_to: u64,
    /// Times it was scheduled in on a different pCPU than the last one.
    pub migrations: u64,
    /// Times its slice was extended because it was inside a critical
    /// section (`Scheduler::extend_slice`).
    pub extensions: u64,
    /// Times its slice was cut short for a vCPU woken with less CPU time
    /// (wake-up preemption).
    pub wakeup_preemptions: u64,
}

impl AddAssign<&VcpuStats> for VcpuStats {
    fn add_assign(&mut self, other: &VcpuStats) {
        self.run_ticks = self.run_ticks.saturating_add(other.run_ticks);
        self.steal_ticks = self.steal_ticks.saturating_add(other.steal_ticks);
        self.blocked_ticks = self.blocked_ticks.saturating_add(other.blocked_ticks);
        self.scheduled_in += other.scheduled_in;
        self.preemptions += other.preemptions;
        self.blocks += other.blocks;
        self.yields += other.yields;
        self.yielded_to += other.yielded_to;
        self.migrations += other.migrations;
        self.extensions += other.extensions;
        self.wakeup_preemptions += other.wakeup_preemptions;
    }
}

impl VcpuStats {
    /// A one-line rendering with times in milliseconds, for the end-of-run
    /// summary; `counter_hz` is CNTFRQ.
    pub fn display(&self, counter_hz: u64) -> impl fmt::Display + '_ {
        Summary {
            stats: self,
            counter_hz,
        }
    }
}

/// A VM's totals: the sum of its vCPUs' [`VcpuStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmStats {
    /// Number of vCPUs summed.
    pub vcpus: usize,
    /// The sums.
    pub total: VcpuStats,
}

struct Summary<'a> {
    stats: &'a VcpuStats,
    counter_hz: u64,
}

/// `ticks` of a counter running at `counter_hz` as milliseconds with one
/// decimal, for console lines.
pub fn millis(ticks: u64, counter_hz: u64) -> impl fmt::Display {
    Millis { ticks, counter_hz }
}

/// `ticks` as milliseconds with one decimal, without floating point.
struct Millis {
    ticks: u64,
    counter_hz: u64,
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.counter_hz == 0 {
            return write!(f, "{} ticks", self.ticks);
        }
        let tenths = u128::from(self.ticks) * 10_000 / u128::from(self.counter_hz);
        write!(f, "{}.{} ms", tenths / 10, tenths % 10)
    }
}

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.stats;
        let ms = |ticks| millis(ticks, self.counter_hz);
        write!(
            f,
            "run {} steal {} blocked {} in {} preempted {} blocks {} yields {} yielded-to {} \
             migrations {} extended {} wakeup-preemptions {}",
            ms(s.run_ticks),
            ms(s.steal_ticks),
            ms(s.blocked_ticks),
            s.scheduled_in,
            s.preemptions,
            s.blocks,
            s.yields,
            s.yielded_to,
            s.migrations,
            s.extensions,
            s.wakeup_preemptions
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_and_renders() {
        let a = VcpuStats {
            run_ticks: 62_500_000,
            steal_ticks: 625_000,
            scheduled_in: 3,
            ..VcpuStats::default()
        };
        let mut total = VcpuStats::default();
        total += &a;
        total += &a;
        assert_eq!(total.run_ticks, 125_000_000);
        assert_eq!(total.scheduled_in, 6);
        assert_eq!(
            alloc::format!("{}", a.display(62_500_000)),
            "run 1000.0 ms steal 10.0 ms blocked 0.0 ms in 3 preempted 0 blocks 0 yields 0 yielded-to 0 migrations 0 extended 0 wakeup-preemptions 0"
        );
        assert!(alloc::format!("{}", a.display(0)).starts_with("run 62500000 ticks"));
    }
}
