//! Who owns each page of host RAM.
//!
//! As in pKVM, every page of host RAM has exactly one owner and the
//! hypervisor tracks it; a VM's stage-2 tables map only pages the VM owns,
//! so no VM can reach the hypervisor, firmware or another VM. This module
//! is the bookkeeping: a map from host physical pages to [`Owner`]s that
//! only changes through checked transitions.
//!
//! # Owners
//!
//! | owner | what the pages are | mapped where |
//! |---|---|---|
//! | [`Owner::Hypervisor`] | the hypervisor's image, heap, stacks, page tables | EL2 stage 1 only |
//! | [`Owner::Reserved`] | firmware and `/reserved-memory` regions from the boot DT | nowhere |
//! | [`Owner::Module`] | boot modules (a guest kernel, initrd or DTB the loader put in RAM) waiting to be copied into their VM | EL2, read-only, while copied |
//! | [`Owner::Free`] | unowned RAM | nowhere |
//! | [`Owner::Vm`] | the memory of one VM | that VM's stage 2 (and EL2 while it loads the VM) |
//!
//! # State machine
//!
//! ```text
//!                 Free ---------------> Hypervisor   (never leaves)
//!   Module <----> Free <--------------> Vm(id)
//!                                       Reserved     (fixed at construction)
//! ```
//!
//! The legal transitions, all that [`OwnershipMap::claim`] accepts
//! ([`transition_allowed`]):
//! - `Free -> Hypervisor`: the hypervisor takes memory for itself (its own
//!   image and the DTB at boot, later stage-2 tables);
//! - `Free -> Module`: at boot, the regions where the loader left modules;
//! - `Module -> Free`: once a module has been copied into its VM;
//! - `Free -> Vm(id)`: VM creation gives the VM its memory;
//! - `Vm(id) -> Free`: VM teardown. The caller must scrub (zero) the pages
//!   *before* releasing them, so nothing a VM wrote can reach the next owner.
//!
//! Nothing else: nothing ever leaves `Hypervisor` or `Reserved`, nothing
//! becomes `Reserved` after construction, and a page never moves directly
//! from one VM to another (`Vm(a) -> Vm(b)`) — it has to go through `Free`,
//! which is where it is scrubbed.
//!
//! # Representation
//!
//! Host RAM may be hundreds of GiB, so there is no per-page array: the map
//! is a sorted list of page-aligned, non-overlapping [`Region`]s that
//! together cover exactly the RAM (gaps between memory banks are simply
//! absent), and two regions that touch never have the same owner (they are
//! merged). Lookups are binary searches, a claim costs O(regions), and
//! the list is only as long as the ownership pattern needs (tens of
//! entries on a real system, whatever the amount of RAM).

use crate::memory::layout::{PAGE_SIZE, page_ceil, page_cover, page_floor};
use crate::vcpu::VmId;
use alloc::vec::Vec;
use core::fmt;
use platform::{MemRange, Platform};

/// Who a page of host RAM belongs to (see the module docs for what each
/// means and which transitions are legal).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Owner {
    /// The hypervisor itself.
    Hypervisor,
    /// Firmware or a `/reserved-memory` / `/memreserve/` region: never used.
    Reserved,
    /// A boot module waiting to be copied into its VM.
    Module,
    /// Unowned RAM, mapped nowhere.
    Free,
    /// The memory of one VM.
    Vm(VmId),
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Hypervisor => f.write_str("hypervisor"),
            Self::Reserved => f.write_str("reserved"),
            Self::Module => f.write_str("boot module"),
            Self::Free => f.write_str("free"),
            Self::Vm(id) => write!(f, "vm{}", id.0),
        }
    }
}

/// Whether a page may move from `from` to `to` (the table in the module docs).
pub const fn transition_allowed(from: Owner, to: Owner) -> bool {
    matches!(
        (from, to),
        (
            Owner::Free,
            Owner::Hypervisor | Owner::Module | Owner::Vm(_)
        ) | (Owner::Module | Owner::Vm(_), Owner::Free)
    )
}

/// A run of pages with one owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Page-aligned, never empty.
    pub range: MemRange,
    pub owner: Owner,
}

/// Where [`OwnershipMap::find_free`] looks first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The lowest suitable address.
    Lowest,
    /// The highest suitable address (keeps low memory, which 32-bit DMA
    /// devices and the hypervisor's own boot allocations want, for last).
    Highest,
}

/// Why a claim or check was refused. A refused claim changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnershipError {
    /// The range has no pages.
    Empty(MemRange),
    /// The base or the size is not a multiple of the page size.
    Unaligned(MemRange),
    /// The range runs past the end of the address space.
    WrapsAround(MemRange),
    /// The state machine forbids moving pages from `from` to `to`.
    IllegalTransition { from: Owner, to: Owner },
    /// `page` (the first such page of the range) is not host RAM.
    OutsideRam { page: u64 },
    /// `page` (the first such page of the range) belongs to `owner`, not
    /// to the `expected` one.
    WrongOwner {
        page: u64,
        owner: Owner,
        expected: Owner,
    },
}

impl fmt::Display for OwnershipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let span = |f: &mut fmt::Formatter<'_>, r: &MemRange| {
            write!(f, "[{:#x}, {:#x})", r.base, r.base.wrapping_add(r.size))
        };
        match self {
            Self::Empty(r) => {
                f.write_str("empty range ")?;
                span(f, r)
            }
            Self::Unaligned(r) => {
                f.write_str("range ")?;
                span(f, r)?;
                write!(f, " is not aligned to {PAGE_SIZE:#x}-byte pages")
            }
            Self::WrapsAround(r) => write!(
                f,
                "range at {:#x} of {:#x} bytes wraps around the address space",
                r.base, r.size
            ),
            Self::IllegalTransition { from, to } => {
                write!(f, "pages may not move from {from} to {to}")
            }
            Self::OutsideRam { page } => write!(f, "page {page:#x} is not RAM"),
            Self::WrongOwner {
                page,
                owner,
                expected,
            } => write!(f, "page {page:#x} belongs to {owner}, not {expected}"),
        }
    }
}

/// The owner of every page of host RAM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnershipMap {
    /// Sorted, non-overlapping, page-aligned, non-empty; regions that touch
    /// have different owners.
    regions: Vec<Region>,
}

impl OwnershipMap {
    /// All of `banks` free except `reserved`.
    ///
    /// Banks are trimmed inwards to whole pages (a partial page cannot be
    /// given to anyone) and may overlap or touch each other; reserved
    /// regions are rounded outwards to whole pages (a partly reserved page
    /// is reserved) and may lie partly or wholly outside RAM.
    pub fn new(banks: &[MemRange], reserved: &[MemRange]) -> Self {
        let mut ram: Vec<MemRange> = banks
            .iter()
            .filter_map(|bank| {
                let base = page_ceil(bank.base);
                let end = page_floor(bank.end());
                (end > base).then(|| MemRange::new(base, end - base))
            })
            .collect();
        ram.sort_unstable_by_key(|r| r.base);
        let mut map = Self {
            regions: Vec::with_capacity(ram.len() + 2 * reserved.len()),
        };
        for range in ram {
            match map.regions.last_mut() {
                Some(last) if range.base <= last.range.end() => {
                    let end = last.range.end().max(range.end());
                    last.range.size = end - last.range.base;
                }
                _ => map.regions.push(Region {
                    range,
                    owner: Owner::Free,
                }),
            }
        }
        for region in reserved.iter().filter(|r| r.size > 0) {
            map.assign(page_cover(*region), Owner::Reserved);
        }
        map
    }

    /// The host's RAM as the boot DT describes it: its memory banks, with
    /// its `/memreserve/` entries and `/reserved-memory` regions reserved.
    pub fn from_platform(platform: &Platform) -> Self {
        let reserved: Vec<MemRange> = platform.reserved.iter().map(|r| r.range).collect();
        Self::new(&platform.memory, &reserved)
    }

    /// Moves every page of `range` from `from` to `to`.
    ///
    /// Fails, changing nothing, when the range is empty, not page-aligned
    /// or wraps; when the state machine forbids `from -> to`; or when any
    /// page of it is not RAM or not currently owned by `from` (the error
    /// names the lowest such page).
    pub fn claim(&mut self, range: MemRange, from: Owner, to: Owner) -> Result<(), OwnershipError> {
        check_range(range)?;
        if !transition_allowed(from, to) {
            return Err(OwnershipError::IllegalTransition { from, to });
        }
        self.scan(range, from)?;
        self.assign(range, to);
        Ok(())
    }

    /// Checks that every page of `range` is RAM owned by `owner`, e.g.
    /// before mapping it into a VM's stage 2. Errors as [`Self::claim`].
    pub fn check_owned(&self, range: MemRange, owner: Owner) -> Result<(), OwnershipError> {
        check_range(range)?;
        self.scan(range, owner)
    }

    /// Returns every page of `vm` to [`Owner::Free`] and the ranges it
    /// held, for VM teardown. The caller must have scrubbed them (see the
    /// module docs); [`Self::regions_of`] lists them beforehand.
    pub fn release_vm(&mut self, vm: VmId) -> Vec<MemRange> {
        let released: Vec<MemRange> = self.regions_of(Owner::Vm(vm)).collect();
        for &range in &released {
            self.assign(range, Owner::Free);
        }
        released
    }

    /// The owner of the page holding `pa`; `None` outside RAM.
    pub fn owner_of(&self, pa: u64) -> Option<Owner> {
        self.region_index(pa).map(|i| self.regions[i].owner)
    }

    /// A free, page-aligned range of `size` bytes (rounded up to whole
    /// pages) whose base is a multiple of `align` (at least a page), at the
    /// lowest or highest such address. The map is not changed: claim the
    /// result from [`Owner::Free`]. `None` when nothing fits, or when
    /// `size` is 0 or `align` is not a power of two.
    pub fn find_free(&self, size: u64, align: u64, placement: Placement) -> Option<MemRange> {
        if size == 0 || !align.is_power_of_two() {
            return None;
        }
        let size = size.checked_add(PAGE_SIZE - 1)? & !(PAGE_SIZE - 1);
        let align = align.max(PAGE_SIZE);
        let fits = |region: &Region| -> Option<MemRange> {
            let (base, end) = (region.range.base, region.range.end());
            let start = match placement {
                Placement::Lowest => base.checked_next_multiple_of(align)?,
                Placement::Highest => end.checked_sub(size)? & !(align - 1),
            };
            (start >= base && start.checked_add(size)? <= end).then(|| MemRange::new(start, size))
        };
        let mut free = self.regions.iter().filter(|r| r.owner == Owner::Free);
        match placement {
            Placement::Lowest => free.find_map(fits),
            Placement::Highest => free.rev().find_map(fits),
        }
    }

    /// Every region, in address order.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// The ranges `owner` holds, in address order.
    pub fn regions_of(&self, owner: Owner) -> impl Iterator<Item = MemRange> + '_ {
        self.regions
            .iter()
            .filter(move |r| r.owner == owner)
            .map(|r| r.range)
    }

    /// Bytes `owner` holds.
    pub fn total(&self, owner: Owner) -> u64 {
        self.regions_of(owner).map(|r| r.size).sum()
    }

    /// Bytes per owner, for every owner that holds any, in [`Owner`] order
    /// (hypervisor, reserved, modules, free, then VMs by id).
    pub fn totals(&self) -> Vec<(Owner, u64)> {
        let mut totals: Vec<(Owner, u64)> = Vec::new();
        for region in &self.regions {
            match totals.binary_search_by_key(&region.owner, |t| t.0) {
                Ok(i) => totals[i].1 += region.range.size,
                Err(i) => totals.insert(i, (region.owner, region.range.size)),
            }
        }
        totals
    }

    /// Bytes of RAM the map covers.
    pub fn ram_size(&self) -> u64 {
        self.regions.iter().map(|r| r.range.size).sum()
    }

    /// The index of the region holding `pa`.
    fn region_index(&self, pa: u64) -> Option<usize> {
        let i = self.regions.partition_point(|r| r.range.end() <= pa);
        self.regions
            .get(i)
            .is_some_and(|r| r.range.contains(pa))
            .then_some(i)
    }

    /// Finds the lowest page of `range` that is not RAM owned by `expected`.
    fn scan(&self, range: MemRange, expected: Owner) -> Result<(), OwnershipError> {
        let end = range.end();
        let mut page = range.base;
        while page < end {
            let Some(i) = self.region_index(page) else {
                return Err(OwnershipError::OutsideRam { page });
            };
            let region = self.regions[i];
            if region.owner != expected {
                return Err(OwnershipError::WrongOwner {
                    page,
                    owner: region.owner,
                    expected,
                });
            }
            page = region.range.end();
        }
        Ok(())
    }

    /// Gives the RAM pages of `range` (page-aligned; parts outside RAM are
    /// skipped) to `owner`, unchecked, and restores the invariants.
    fn assign(&mut self, range: MemRange, owner: Owner) {
        let (start, end) = (range.base, range.end());
        if start >= end {
            return;
        }
        self.split_at(start);
        self.split_at(end);
        let first = self.regions.partition_point(|r| r.range.base < start);
        let last = self.regions.partition_point(|r| r.range.base < end);
        for region in &mut self.regions[first..last] {
            region.owner = owner;
        }
        // Only the changed regions and their two neighbours can have become
        // mergeable.
        self.merge(first.saturating_sub(1), (last + 1).min(self.regions.len()));
    }

    /// Makes `addr` a region boundary if it falls inside a region.
    fn split_at(&mut self, addr: u64) {
        if let Some(i) = self.region_index(addr) {
            let region = self.regions[i];
            if region.range.base != addr {
                let low = addr - region.range.base;
                self.regions[i].range.size = low;
                self.regions.insert(
                    i + 1,
                    Region {
                        range: MemRange::new(addr, region.range.size - low),
                        owner: region.owner,
                    },
                );
            }
        }
    }

    /// Merges touching regions with the same owner among `regions[from..to]`.
    fn merge(&mut self, from: usize, to: usize) {
        let mut write = from;
        for read in from + 1..to {
            let next = self.regions[read];
            let current = &mut self.regions[write];
            if current.owner == next.owner && current.range.end() == next.range.base {
                current.range.size += next.range.size;
            } else {
                write += 1;
                self.regions[write] = next;
            }
        }
        if to > from {
            self.regions.drain(write + 1..to);
        }
    }
}

/// Checks that `range` is a non-empty, page-aligned range that does not wrap.
fn check_range(range: MemRange) -> Result<(), OwnershipError> {
    if range.size == 0 {
        return Err(OwnershipError::Empty(range));
    }
    if !range.base.is_multiple_of(PAGE_SIZE) || !range.size.is_multiple_of(PAGE_SIZE) {
        return Err(OwnershipError::Unaligned(range));
    }
    if range.base.checked_add(range.size).is_none() {
        return Err(OwnershipError::WrapsAround(range));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::vec;

    const P: u64 = PAGE_SIZE;
    const GIB: u64 = 1 << 30;

    /// Checks every structural invariant and that the map covers exactly `ram`.
    fn assert_invariants(map: &OwnershipMap, ram: &[MemRange]) {
        let regions = map.regions();
        for r in regions {
            assert!(r.range.size > 0, "empty region {r:?}");
            assert_eq!(r.range.base % P, 0, "unaligned {r:?}");
            assert_eq!(r.range.size % P, 0, "unaligned {r:?}");
        }
        for pair in regions.windows(2) {
            assert!(
                pair[0].range.end() <= pair[1].range.base,
                "overlap {pair:?}"
            );
            assert!(
                pair[0].range.end() != pair[1].range.base || pair[0].owner != pair[1].owner,
                "unmerged {pair:?}"
            );
        }
        // Coverage: merge touching regions regardless of owner and compare.
        let mut covered: Vec<MemRange> = Vec::new();
        for r in regions {
            match covered.last_mut() {
                Some(last) if last.end() == r.range.base => last.size += r.range.size,
                _ => covered.push(r.range),
            }
        }
        assert_eq!(covered, ram);
    }

    #[test]
    fn banks_are_trimmed_merged_and_reserved_regions_rounded_out() {
        let map = OwnershipMap::new(
            &[
                // Out of order, overlapping, touching and unaligned banks.
                MemRange::new(0x8000_0000, GIB),
                MemRange::new(0x4000_0800, GIB - 0x800),
                MemRange::new(0x7000_0000, 0x1000_0000),
                MemRange::new(0x1_0000_0000, 0x10_0fff),
                MemRange::new(0x2_0000_0100, 0x100), // no whole page: dropped
            ],
            &[
                MemRange::new(0x4800_0010, 0x20),   // one page
                MemRange::new(0xbfff_f000, 0x2000), // past the end of RAM
                MemRange::new(0x1000, 0x1000),      // outside RAM
                MemRange::new(0x4900_0000, 0),      // empty
            ],
        );
        let ram = [
            MemRange::new(0x4000_1000, 2 * GIB - 0x1000),
            MemRange::new(0x1_0000_0000, 0x10_0000),
        ];
        assert_invariants(&map, &ram);
        assert_eq!(map.owner_of(0x4800_0000), Some(Owner::Reserved));
        assert_eq!(map.owner_of(0x4800_0fff), Some(Owner::Reserved));
        assert_eq!(map.owner_of(0x4800_1000), Some(Owner::Free));
        assert_eq!(map.owner_of(0xbfff_f000), Some(Owner::Reserved));
        assert_eq!(map.owner_of(0xc000_0000), None);
        assert_eq!(map.owner_of(0x4000_0fff), None);
        assert_eq!(map.owner_of(0x1000), None);
        assert_eq!(map.total(Owner::Reserved), 2 * P);
        assert_eq!(map.ram_size(), 2 * GIB - 0x1000 + 0x10_0000);
        assert_eq!(
            map.totals(),
            vec![
                (Owner::Reserved, 2 * P),
                (Owner::Free, map.ram_size() - 2 * P)
            ]
        );
    }

    #[test]
    fn vm_lifecycle_and_merging() {
        let ram = [MemRange::new(0x4000_0000, GIB)];
        let mut map = OwnershipMap::new(&ram, &[]);
        let vm = Owner::Vm(VmId(1));
        let image = MemRange::new(0x4000_0000, 0x20_0000);
        map.claim(image, Owner::Free, Owner::Hypervisor).unwrap();
        let kernel = MemRange::new(0x4800_0000, 0x40_0000);
        map.claim(kernel, Owner::Free, Owner::Module).unwrap();

        let guest = map
            .find_free(256 << 20, 2 << 20, Placement::Highest)
            .unwrap();
        assert_eq!(guest, MemRange::new(0x7000_0000, 256 << 20));
        // Claimed in two halves: they merge back into one region.
        let half = MemRange::new(guest.base, guest.size / 2);
        map.claim(half, Owner::Free, vm).unwrap();
        map.claim(MemRange::new(half.end(), guest.size / 2), Owner::Free, vm)
            .unwrap();
        assert_eq!(map.regions_of(vm).collect::<Vec<_>>(), vec![guest]);
        assert_invariants(&map, &ram);

        // The module is copied, then released; it merges with its free neighbours.
        map.claim(kernel, Owner::Module, Owner::Free).unwrap();
        assert_eq!(map.regions().len(), 3);
        assert_eq!(map.check_owned(guest, vm), Ok(()));

        assert_eq!(map.release_vm(VmId(1)), vec![guest]);
        assert_eq!(
            map.regions(),
            &[
                Region {
                    range: image,
                    owner: Owner::Hypervisor
                },
                Region {
                    range: MemRange::new(image.end(), GIB - image.size),
                    owner: Owner::Free
                },
            ]
        );
        assert!(map.release_vm(VmId(1)).is_empty());
    }

    #[test]
    fn illegal_transitions_are_refused() {
        let a = Owner::Vm(VmId(0));
        let b = Owner::Vm(VmId(1));
        for (from, to) in [
            (a, b),
            (Owner::Hypervisor, Owner::Free),
            (Owner::Hypervisor, a),
            (Owner::Reserved, Owner::Free),
            (Owner::Free, Owner::Reserved),
            (Owner::Free, Owner::Free),
            (a, a),
            (Owner::Module, a),
            (a, Owner::Hypervisor),
        ] {
            assert!(!transition_allowed(from, to), "{from} -> {to}");
        }
        for (from, to) in [
            (Owner::Free, a),
            (a, Owner::Free),
            (Owner::Free, Owner::Hypervisor),
            (Owner::Free, Owner::Module),
            (Owner::Module, Owner::Free),
        ] {
            assert!(transition_allowed(from, to), "{from} -> {to}");
        }

        let mut map = OwnershipMap::new(&[MemRange::new(0, 16 * P)], &[]);
        map.claim(MemRange::new(0, 4 * P), Owner::Free, a).unwrap();
        let before = map.clone();
        assert_eq!(
            map.claim(MemRange::new(0, 4 * P), a, b),
            Err(OwnershipError::IllegalTransition { from: a, to: b })
        );
        assert_eq!(map, before);
    }

    #[test]
    fn a_failed_claim_names_the_first_bad_page_and_changes_nothing() {
        let ram = [MemRange::new(0, 8 * P), MemRange::new(16 * P, 8 * P)];
        let mut map = OwnershipMap::new(&ram, &[MemRange::new(5 * P, P)]);
        let vm = Owner::Vm(VmId(3));
        let before = map.clone();
        let err = map.claim(MemRange::new(2 * P, 6 * P), Owner::Free, vm);
        assert_eq!(
            err,
            Err(OwnershipError::WrongOwner {
                page: 5 * P,
                owner: Owner::Reserved,
                expected: Owner::Free
            })
        );
        assert_eq!(
            err.unwrap_err().to_string(),
            "page 0x5000 belongs to reserved, not free"
        );
        // Through the gap between the banks.
        assert_eq!(
            map.claim(MemRange::new(6 * P, 12 * P), Owner::Free, vm),
            Err(OwnershipError::OutsideRam { page: 8 * P })
        );
        assert_eq!(map, before);
        assert_invariants(&map, &ram);
    }

    #[test]
    fn unaligned_empty_and_wrapping_ranges_are_errors() {
        let mut map = OwnershipMap::new(&[MemRange::new(0, 16 * P)], &[]);
        let vm = Owner::Vm(VmId(0));
        for (range, err) in [
            (
                MemRange::new(0x800, P),
                OwnershipError::Unaligned(MemRange::new(0x800, P)),
            ),
            (
                MemRange::new(0, P + 1),
                OwnershipError::Unaligned(MemRange::new(0, P + 1)),
            ),
            (
                MemRange::new(P, 0),
                OwnershipError::Empty(MemRange::new(P, 0)),
            ),
            (
                MemRange::new(page_floor(u64::MAX), 2 * P),
                OwnershipError::WrapsAround(MemRange::new(page_floor(u64::MAX), 2 * P)),
            ),
        ] {
            assert_eq!(map.claim(range, Owner::Free, vm), Err(err));
            assert_eq!(map.check_owned(range, Owner::Free), Err(err));
            assert!(!format!("{err}").is_empty());
        }
        assert_eq!(map.total(Owner::Free), 16 * P);
    }

    #[test]
    fn find_free_honours_alignment_size_and_placement() {
        let ram = [MemRange::new(0x10_0000, 0x30_0000)];
        let mut map = OwnershipMap::new(&ram, &[MemRange::new(0x20_0000, P)]);
        // Free: [1 MiB, 2 MiB) and [2 MiB + 4 KiB, 4 MiB).
        assert_eq!(
            map.find_free(0x10_0000, 0x10_0000, Placement::Lowest),
            Some(MemRange::new(0x10_0000, 0x10_0000))
        );
        assert_eq!(
            map.find_free(0x10_0000, 0x10_0000, Placement::Highest),
            Some(MemRange::new(0x30_0000, 0x10_0000))
        );
        // 1.5 MiB fits only in the upper free region.
        assert_eq!(
            map.find_free(0x18_0000, P, Placement::Lowest),
            Some(MemRange::new(0x20_1000, 0x18_0000))
        );
        // Sizes round up to pages; alignment below a page means a page.
        assert_eq!(
            map.find_free(1, 1, Placement::Highest),
            Some(MemRange::new(0x3f_f000, P))
        );
        assert_eq!(map.find_free(0x30_0000, P, Placement::Lowest), None);
        assert_eq!(map.find_free(0, P, Placement::Lowest), None);
        assert_eq!(map.find_free(P, 3 * P, Placement::Lowest), None);
        assert_eq!(map.find_free(u64::MAX, P, Placement::Lowest), None);
        map.claim(
            MemRange::new(0x10_0000, 0x10_0000),
            Owner::Free,
            Owner::Hypervisor,
        )
        .unwrap();
        assert_eq!(
            map.find_free(P, 0x10_0000, Placement::Lowest),
            Some(MemRange::new(0x30_0000, P))
        );
    }

    #[test]
    fn huge_ram_is_a_handful_of_regions() {
        // 512 GiB in two banks: the map's size depends on the ownership
        // pattern, not on the amount of RAM.
        let ram = [
            MemRange::new(0x80_0000_0000, 256 * GIB),
            MemRange::new(0x100_0000_0000, 256 * GIB),
        ];
        let mut map = OwnershipMap::new(&ram, &[]);
        for vm in 0..8u16 {
            let r = map.find_free(32 * GIB, GIB, Placement::Lowest).unwrap();
            map.claim(r, Owner::Free, Owner::Vm(VmId(vm))).unwrap();
        }
        assert_eq!(map.regions().len(), 9);
        assert_eq!(map.total(Owner::Free), 256 * GIB);
        assert_eq!(
            map.owner_of(0x80_0000_0000 + 100 * GIB),
            Some(Owner::Vm(VmId(3)))
        );
        assert_invariants(&map, &ram);
    }

    /// The obvious model: one owner per page of a small window.
    struct Reference {
        origin: u64,
        pages: Vec<Option<Owner>>,
    }

    impl Reference {
        fn owner(&self, pa: u64) -> Option<Owner> {
            let index = pa.checked_sub(self.origin)? / P;
            self.pages
                .get(usize::try_from(index).ok()?)
                .copied()
                .flatten()
        }

        fn scan(&self, range: MemRange, expected: Owner) -> Result<(), OwnershipError> {
            check_range(range)?;
            for page in (range.base..range.end()).step_by(P as usize) {
                match self.owner(page) {
                    None => return Err(OwnershipError::OutsideRam { page }),
                    Some(owner) if owner != expected => {
                        return Err(OwnershipError::WrongOwner {
                            page,
                            owner,
                            expected,
                        });
                    }
                    Some(_) => {}
                }
            }
            Ok(())
        }

        fn claim(&mut self, range: MemRange, from: Owner, to: Owner) -> Result<(), OwnershipError> {
            check_range(range)?;
            if !transition_allowed(from, to) {
                return Err(OwnershipError::IllegalTransition { from, to });
            }
            self.scan(range, from)?;
            for page in (range.base..range.end()).step_by(P as usize) {
                let index = ((page - self.origin) / P) as usize;
                self.pages[index] = Some(to);
            }
            Ok(())
        }

        fn find_free(&self, size: u64, align: u64, placement: Placement) -> Option<MemRange> {
            let size = size.div_ceil(P) * P;
            let align = align.max(P);
            let end = self.origin + self.pages.len() as u64 * P;
            let fits = |base: &u64| {
                base.is_multiple_of(align)
                    && (*base..base + size)
                        .step_by(P as usize)
                        .all(|p| self.owner(p) == Some(Owner::Free))
            };
            let pages = (end - self.origin) / P;
            let mut bases = (0..pages).map(|i| self.origin + i * P);
            let base = match placement {
                Placement::Lowest => bases.find(fits),
                Placement::Highest => bases.rev().find(fits),
            }?;
            Some(MemRange::new(base, size))
        }
    }

    #[test]
    fn randomized_claims_match_a_per_page_model() {
        const ORIGIN: u64 = 0x4000_0000;
        const WINDOW_PAGES: u64 = 160;
        let banks = [
            MemRange::new(ORIGIN + 4 * P, 44 * P),
            MemRange::new(ORIGIN + 64 * P, 32 * P),
            // Touches the previous bank.
            MemRange::new(ORIGIN + 96 * P, 8 * P),
            // Unaligned: pages 121..140 are usable.
            MemRange::new(ORIGIN + 120 * P + 0x800, 20 * P),
        ];
        let reserved = [
            MemRange::new(ORIGIN + 10 * P + 0x10, 0x1800),
            MemRange::new(ORIGIN + 46 * P, 20 * P),
            MemRange::new(ORIGIN + 150 * P, P),
        ];
        let ram = [
            MemRange::new(ORIGIN + 4 * P, 44 * P),
            MemRange::new(ORIGIN + 64 * P, 40 * P),
            MemRange::new(ORIGIN + 121 * P, 19 * P),
        ];
        let owners = [
            Owner::Free,
            Owner::Hypervisor,
            Owner::Reserved,
            Owner::Module,
            Owner::Vm(VmId(0)),
            Owner::Vm(VmId(1)),
            Owner::Vm(VmId(2)),
        ];

        for seed in [1u64, 0x9e37_79b9_7f4a_7c15, 0xdead_beef, 42] {
            let mut rng = prng::Rng::new(seed);
            let mut map = OwnershipMap::new(&banks, &reserved);
            let mut model = Reference {
                origin: ORIGIN,
                pages: (0..WINDOW_PAGES)
                    .map(|i| {
                        let pa = ORIGIN + i * P;
                        ram.iter().any(|r| r.contains(pa)).then(|| {
                            if reserved.iter().any(|r| page_cover(*r).contains(pa)) {
                                Owner::Reserved
                            } else {
                                Owner::Free
                            }
                        })
                    })
                    .collect(),
            };
            assert_invariants(&map, &ram);
            let mut succeeded = 0;

            for step in 0..3000 {
                let (range, from) = if rng.below(3) != 0 {
                    // Part of one region of the model, from its real owner:
                    // such claims succeed when the transition is legal.
                    let first = rng.below(WINDOW_PAGES) as usize;
                    let owner = model.pages[first];
                    let mut last = first;
                    while last + 1 < model.pages.len()
                        && model.pages[last + 1] == owner
                        && rng.below(8) != 0
                    {
                        last += 1;
                    }
                    let range =
                        MemRange::new(ORIGIN + first as u64 * P, (last - first + 1) as u64 * P);
                    let from = owner.unwrap_or(owners[rng.index(owners.len())]);
                    (range, from)
                } else {
                    // Anywhere, possibly unaligned, across owners and gaps.
                    let mut base = ORIGIN + rng.below(WINDOW_PAGES) * P;
                    let mut size = rng.below(24) * P;
                    match rng.below(10) {
                        0 => base += 0x10,
                        1 => size += 0x200,
                        _ => {}
                    }
                    let from = owners[rng.index(owners.len())];
                    (MemRange::new(base, size), from)
                };
                // Mostly legal transitions, so that pages keep moving; the
                // hypervisor only rarely, since it never gives pages back.
                let legal: Vec<Owner> = owners
                    .iter()
                    .copied()
                    .filter(|&to| transition_allowed(from, to))
                    .filter(|&to| to != Owner::Hypervisor || rng.below(20) == 0)
                    .collect();
                let to = if !legal.is_empty() && rng.below(5) != 0 {
                    legal[rng.index(legal.len())]
                } else {
                    owners[rng.index(owners.len())]
                };

                let expected = model.claim(range, from, to);
                let before = map.clone();
                let got = map.claim(range, from, to);
                assert_eq!(
                    got, expected,
                    "seed {seed:#x} step {step}: claim {range:x?} {from} -> {to}"
                );
                match got {
                    Ok(()) => succeeded += 1,
                    Err(_) => assert_eq!(map, before, "a failed claim changed the map"),
                }
                assert_invariants(&map, &ram);

                if step % 10 == 0 {
                    for i in 0..WINDOW_PAGES {
                        let pa = ORIGIN + i * P + rng.below(P);
                        assert_eq!(map.owner_of(pa), model.owner(pa), "owner of {pa:#x}");
                    }
                    for &owner in &owners {
                        let pages = model.pages.iter().filter(|o| **o == Some(owner)).count();
                        assert_eq!(map.total(owner), pages as u64 * P, "total of {owner}");
                    }
                    let owner = owners[rng.index(owners.len())];
                    let check = MemRange::new(range.base & !(P - 1), range.size.max(P) & !(P - 1));
                    assert_eq!(map.check_owned(check, owner), model.scan(check, owner));
                }
                if step % 7 == 0 {
                    let size = 1 + rng.below(12 * P);
                    let align = P << rng.below(5);
                    for placement in [Placement::Lowest, Placement::Highest] {
                        assert_eq!(
                            map.find_free(size, align, placement),
                            model.find_free(size, align, placement),
                            "find_free({size:#x}, {align:#x}, {placement:?})"
                        );
                    }
                }
            }
            // The walk must have moved pages around, not just bounced off errors.
            assert!(
                succeeded > 500,
                "seed {seed:#x}: only {succeeded} claims succeeded"
            );
        }
    }
}
