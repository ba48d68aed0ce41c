//! Per-function-id hypercall counts, for the end-of-run summary.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use pvlock_abi::FunctionId;
use pvlock_abi::catalog::{self, Entry};

/// How often each function id was called. Every id `pvlock_abi` names has
/// its own counter ([`catalog::index_of`]); all others (unknown, yielding,
/// malformed) share one, which also remembers the last such id. Lock-free:
/// the vCPUs of one VM call concurrently from several pCPUs.
#[derive(Debug)]
pub struct CallCounters {
    named: [AtomicU64; catalog::LEN],
    unnamed: AtomicU64,
    last_unnamed: AtomicU32,
}

impl Default for CallCounters {
    fn default() -> Self {
        Self::new()
    }
}

impl CallCounters {
    /// All counts zero.
    pub const fn new() -> Self {
        Self {
            named: [const { AtomicU64::new(0) }; catalog::LEN],
            unnamed: AtomicU64::new(0),
            last_unnamed: AtomicU32::new(0),
        }
    }

    /// Counts one call to `fid`, whose [`catalog::index_of`] the caller
    /// already knows is `index` (the dispatcher keeps it with the route).
    pub fn record_index(&self, index: usize, fid: FunctionId) {
        match self.named.get(index) {
            Some(counter) => {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            None => self.record(fid),
        }
    }

    /// Counts one call to `fid`.
    pub fn record(&self, fid: FunctionId) {
        match catalog::index_of(fid).and_then(|i| self.named.get(i)) {
            Some(counter) => {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                self.unnamed.fetch_add(1, Ordering::Relaxed);
                self.last_unnamed.store(fid.raw(), Ordering::Relaxed);
            }
        }
    }

    /// Calls to `fid` so far (for an id `pvlock_abi` does not name: all
    /// such calls).
    pub fn count(&self, fid: FunctionId) -> u64 {
        catalog::index_of(fid)
            .and_then(|i| self.named.get(i))
            .unwrap_or(&self.unnamed)
            .load(Ordering::Relaxed)
    }

    /// Calls to ids `pvlock_abi` does not name, and the last such id.
    pub fn unnamed(&self) -> (u64, Option<FunctionId>) {
        let count = self.unnamed.load(Ordering::Relaxed);
        let last = FunctionId::from_raw(self.last_unnamed.load(Ordering::Relaxed));
        (count, (count > 0).then_some(last))
    }

    /// Every named id called at least once, with its count, in catalog order.
    pub fn called(&self) -> impl Iterator<Item = (&'static Entry, u64)> + '_ {
        catalog::entries()
            .zip(self.named.iter())
            .map(|(entry, count)| (entry, count.load(Ordering::Relaxed)))
            .filter(|&(_, count)| count > 0)
    }

    /// All calls counted.
    pub fn total(&self) -> u64 {
        self.named
            .iter()
            .chain(core::iter::once(&self.unnamed))
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}
