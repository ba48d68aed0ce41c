//! A fixed-size set of physical CPU indices (logical CPU numbers), used for
//! vCPU affinity and for the scheduler's own bookkeeping (online, idle and
//! non-empty-queue sets). Copyable, allocation-free, and every operation is
//! O(`MAX_CPUS` / 64).

use core::fmt;

use crate::bringup::smp::MAX_CPUS;

const WORD_BITS: usize = u64::BITS as usize;
const WORDS: usize = MAX_CPUS.div_ceil(WORD_BITS);

/// A set of logical pCPU indices `0..MAX_CPUS` ([`crate::bringup::smp::MAX_CPUS`]).
/// Indices out of range are never members: inserting one is refused, asking
/// for one answers `false`.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CpuSet([u64; WORDS]);

impl CpuSet {
    /// No CPU.
    pub const EMPTY: Self = Self([0; WORDS]);

    /// Every CPU index the hypervisor can drive.
    pub const fn all() -> Self {
        Self::first_n(MAX_CPUS)
    }

    /// CPUs `0..n` (`n` is capped at [`MAX_CPUS`]).
    pub const fn first_n(n: usize) -> Self {
        let n = if n > MAX_CPUS { MAX_CPUS } else { n };
        let mut words = [0; WORDS];
        let mut w = 0;
        while w < WORDS {
            let lo = w * WORD_BITS;
            words[w] = if n >= lo + WORD_BITS {
                u64::MAX
            } else if n > lo {
                (1 << (n - lo)) - 1
            } else {
                0
            };
            w += 1;
        }
        Self(words)
    }

    /// Only `cpu` (empty if `cpu` is out of range).
    pub const fn single(cpu: usize) -> Self {
        let mut set = Self::EMPTY;
        if cpu < MAX_CPUS {
            set.0[cpu / WORD_BITS] = 1 << (cpu % WORD_BITS);
        }
        set
    }

    /// Adds `cpu`; returns `false` (and leaves the set alone) if it is out
    /// of range.
    pub fn insert(&mut self, cpu: usize) -> bool {
        match self.0.get_mut(cpu / WORD_BITS) {
            Some(word) if cpu < MAX_CPUS => {
                *word |= 1 << (cpu % WORD_BITS);
                true
            }
            _ => false,
        }
    }

    /// Removes `cpu` (no-op if absent or out of range).
    pub fn remove(&mut self, cpu: usize) {
        if let Some(word) = self.0.get_mut(cpu / WORD_BITS) {
            *word &= !(1 << (cpu % WORD_BITS));
        }
    }

    /// Whether `cpu` is a member.
    pub const fn contains(&self, cpu: usize) -> bool {
        cpu < MAX_CPUS && self.0[cpu / WORD_BITS] & (1 << (cpu % WORD_BITS)) != 0
    }

    /// Whether no CPU is a member.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The CPUs in both sets.
    #[must_use]
    pub fn intersection(&self, other: &Self) -> Self {
        Self(core::array::from_fn(|w| self.0[w] & other.0[w]))
    }

    /// The lowest member.
    pub fn first(&self) -> Option<usize> {
        self.0
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * WORD_BITS + w.trailing_zeros() as usize)
    }

    /// The members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &word)| {
            let mut rest = word;
            core::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                Some(i * WORD_BITS + bit)
            })
        })
    }
}

impl FromIterator<usize> for CpuSet {
    /// Collects CPU indices; out-of-range ones are dropped.
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut set = Self::EMPTY;
        for cpu in iter {
            set.insert(cpu);
        }
        set
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn membership_and_bounds() {
        let mut set = CpuSet::EMPTY;
        assert!(set.is_empty());
        assert!(set.insert(0));
        assert!(set.insert(63));
        assert!(set.insert(64));
        assert!(set.insert(MAX_CPUS - 1));
        assert!(!set.insert(MAX_CPUS));
        assert!(!set.contains(MAX_CPUS));
        assert_eq!(set.len(), 4);
        assert_eq!(set.iter().collect::<Vec<_>>(), [0, 63, 64, MAX_CPUS - 1]);
        set.remove(63);
        set.remove(MAX_CPUS + 5);
        assert_eq!(set.first(), Some(0));
        set.remove(0);
        assert_eq!(set.first(), Some(64));
        assert!(CpuSet::single(MAX_CPUS).is_empty());
    }

    #[test]
    fn ranges_and_intersections() {
        assert_eq!(CpuSet::first_n(0), CpuSet::EMPTY);
        assert_eq!(CpuSet::first_n(70).len(), 70);
        assert_eq!(CpuSet::first_n(64).iter().last(), Some(63));
        assert_eq!(CpuSet::first_n(1000), CpuSet::all());
        assert_eq!(CpuSet::all().len(), MAX_CPUS);
        let odd: CpuSet = (0..MAX_CPUS).filter(|c| c % 2 == 1).collect();
        let low = CpuSet::first_n(6);
        assert_eq!(odd.intersection(&low).iter().collect::<Vec<_>>(), [1, 3, 5]);
        assert_eq!(alloc::format!("{:?}", low.intersection(&odd)), "{1, 3, 5}");
    }
}
