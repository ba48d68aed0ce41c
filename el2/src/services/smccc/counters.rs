//! Per-function-id hypercall counts, for the end-of-run summary.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use pvlock_abi::FunctionId;
use pvlock_abi::catalog::{self, Entry};

/// How often each function id was called. Every id `pvlock_abi` names has
/// its own counter ([`catalog::index_of`]); all others (unknown, yielding,
/// malformed) share one, which also remembers the last such id. Lock-free:
/// the vCPUs of one VM call concurrently from several pCPUs.
///
/// The constant calls answered on the exit fast path count into a row of
/// their caller's own ([`VcpuCallCounts`]) instead: one writer per row, so
/// a plain load and store, no atomic read-modify-write on the shortest
/// path a hypercall has. The totals add both.
#[derive(Debug)]
pub struct CallCounters {
    named: [AtomicU64; catalog::LEN],
    unnamed: AtomicU64,
    last_unnamed: AtomicU32,
    /// `catalog::LEN` counters per vCPU, vCPU after vCPU.
    per_vcpu: Box<[AtomicU64]>,
}

/// One vCPU's row of [`CallCounters`]. Only the runner that has the vCPU
/// loaded writes it (a vCPU is loaded on one pCPU at a time, and the
/// hand-off between pCPUs goes through its context slot's lock), so a
/// count is a load and a store that no other writer can interleave.
#[derive(Clone, Copy, Debug)]
pub struct VcpuCallCounts<'a>(&'a [AtomicU64]);

impl VcpuCallCounts<'_> {
    /// Counts one call to the id whose [`catalog::index_of`] is `index`;
    /// false (nothing counted) if the row has no such counter.
    #[inline(always)]
    pub fn record(&self, index: usize) -> bool {
        let Some(counter) = self.0.get(index) else {
            return false;
        };
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        true
    }
}

impl Default for CallCounters {
    fn default() -> Self {
        Self::new()
    }
}

impl CallCounters {
    /// All counts zero, with no per-vCPU rows.
    pub fn new() -> Self {
        Self::for_vcpus(0)
    }

    /// All counts zero, with a row for each of `vcpus` vCPUs.
    pub fn for_vcpus(vcpus: u16) -> Self {
        Self {
            named: [const { AtomicU64::new(0) }; catalog::LEN],
            unnamed: AtomicU64::new(0),
            last_unnamed: AtomicU32::new(0),
            per_vcpu: (0..usize::from(vcpus) * catalog::LEN)
                .map(|_| AtomicU64::new(0))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        }
    }

    /// vCPU `vcpu`'s own row (empty, so counting nothing, for a vCPU the
    /// counters have no row for).
    pub fn vcpu(&self, vcpu: u16) -> VcpuCallCounts<'_> {
        let start = usize::from(vcpu) * catalog::LEN;
        VcpuCallCounts(
            self.per_vcpu
                .get(start..start + catalog::LEN)
                .unwrap_or(&[]),
        )
    }

    /// The calls to catalog entry `index` counted in the per-vCPU rows.
    fn per_vcpu_count(&self, index: usize) -> u64 {
        self.per_vcpu
            .iter()
            .skip(index)
            .step_by(catalog::LEN)
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// All calls counted in the per-vCPU rows (each one a hypercall exit
    /// answered on the fast path).
    pub fn per_vcpu_total(&self) -> u64 {
        self.per_vcpu
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
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
        match catalog::index_of(fid).and_then(|i| Some((i, self.named.get(i)?))) {
            Some((index, shared)) => shared.load(Ordering::Relaxed) + self.per_vcpu_count(index),
            None => self.unnamed.load(Ordering::Relaxed),
        }
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
            .enumerate()
            .map(|(index, (entry, count))| {
                (
                    entry,
                    count.load(Ordering::Relaxed) + self.per_vcpu_count(index),
                )
            })
            .filter(|&(_, count)| count > 0)
    }

    /// All calls counted.
    pub fn total(&self) -> u64 {
        self.named
            .iter()
            .chain(core::iter::once(&self.unnamed))
            .map(|c| c.load(Ordering::Relaxed))
            .sum::<u64>()
            + self.per_vcpu_total()
    }
}
