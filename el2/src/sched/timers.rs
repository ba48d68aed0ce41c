//! Per-pCPU min-heaps of WFI deadlines.
//!
//! A blocked vCPU whose virtual timer is armed sits in the heap of the pCPU
//! it blocked on, so that pCPU can program its wake-up timer for the
//! earliest deadline. The heap is indexed: each entry's position is stored
//! with its vCPU (through [`Positions`]), so a vCPU woken early by an
//! interrupt leaves the heap in O(log n) without a search, and nothing is
//! allocated once the vector has grown to its high-water mark.

use alloc::vec::Vec;

/// Where the heap records each member's current position.
pub(super) trait Positions {
    /// Entry `slot` now lives at index `pos` of the heap.
    fn set_pos(&mut self, slot: usize, pos: usize);
}

/// A binary min-heap of `(deadline, vCPU slot)`, ties broken by slot.
#[derive(Debug, Default)]
pub(super) struct TimerHeap {
    entries: Vec<(u64, usize)>,
}

impl TimerHeap {
    /// The earliest deadline and its slot.
    pub(super) fn peek(&self) -> Option<(u64, usize)> {
        self.entries.first().copied()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Makes room for `total` entries, so that inserting up to that many
    /// allocates nothing.
    pub(super) fn reserve_total(
        &mut self,
        total: usize,
    ) -> Result<(), alloc::collections::TryReserveError> {
        self.entries
            .try_reserve(total.saturating_sub(self.entries.len()))
    }

    /// Adds `slot` with `deadline`; its position is reported through `pos`.
    pub(super) fn insert(
        &mut self,
        deadline: u64,
        slot: usize,
        pos: &mut (impl Positions + ?Sized),
    ) {
        self.entries.push((deadline, slot));
        let at = self.entries.len() - 1;
        pos.set_pos(slot, at);
        self.sift_up(at, pos);
    }

    /// Removes the entry at heap index `at` (as last reported through
    /// [`Positions`]) and returns its slot; `None` if `at` is out of range.
    pub(super) fn remove_at(
        &mut self,
        at: usize,
        pos: &mut (impl Positions + ?Sized),
    ) -> Option<usize> {
        if at >= self.entries.len() {
            return None;
        }
        let (_, slot) = self.entries.swap_remove(at);
        if at < self.entries.len() {
            pos.set_pos(self.entries[at].1, at);
            let at = self.sift_up(at, pos);
            self.sift_down(at, pos);
        }
        Some(slot)
    }

    fn swap(&mut self, a: usize, b: usize, pos: &mut (impl Positions + ?Sized)) {
        self.entries.swap(a, b);
        pos.set_pos(self.entries[a].1, a);
        pos.set_pos(self.entries[b].1, b);
    }

    fn sift_up(&mut self, mut at: usize, pos: &mut (impl Positions + ?Sized)) -> usize {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.entries[at] >= self.entries[parent] {
                break;
            }
            self.swap(at, parent, pos);
            at = parent;
        }
        at
    }

    fn sift_down(&mut self, mut at: usize, pos: &mut (impl Positions + ?Sized)) {
        loop {
            let left = 2 * at + 1;
            let right = left + 1;
            let mut least = at;
            if left < self.entries.len() && self.entries[left] < self.entries[least] {
                least = left;
            }
            if right < self.entries.len() && self.entries[right] < self.entries[least] {
                least = right;
            }
            if least == at {
                return;
            }
            self.swap(at, least, pos);
            at = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    struct Pos(Vec<Option<usize>>);
    impl Positions for Pos {
        fn set_pos(&mut self, slot: usize, pos: usize) {
            self.0[slot] = Some(pos);
        }
    }

    #[test]
    fn pops_in_deadline_order_and_removes_from_the_middle() {
        let deadlines = [50u64, 10, 40, 10, 70, 5, 60, 30];
        let mut pos = Pos(vec![None; deadlines.len()]);
        let mut heap = TimerHeap::default();
        for (slot, d) in deadlines.iter().enumerate() {
            heap.insert(*d, slot, &mut pos);
        }
        // Remove slot 2 (deadline 40) and slot 5 (the minimum) by position.
        for slot in [2, 5] {
            let at = pos.0[slot].take().unwrap();
            assert_eq!(heap.remove_at(at, &mut pos), Some(slot));
        }
        assert_eq!(heap.remove_at(99, &mut pos), None);
        let mut order = vec![];
        while let Some((d, slot)) = heap.peek() {
            assert_eq!(heap.remove_at(0, &mut pos), Some(slot));
            order.push((d, slot));
        }
        assert_eq!(
            order,
            [(10, 1), (10, 3), (30, 7), (50, 0), (60, 6), (70, 4)]
        );
        assert_eq!(heap.len(), 0);
    }
}
