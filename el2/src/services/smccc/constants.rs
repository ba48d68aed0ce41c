//! The replies of a VM's constant calls ([`super::Service::is_constant`]:
//! SMCCC_VERSION, PSCI_VERSION, the vendor UID, KVM_FEATURES without PTP),
//! laid out for the guest-exit fast path: one hash, one compare, a count
//! in the caller's own row and a copy of four registers.
//!
//! The table decides nothing a service would not: every reply is what the
//! service answered when the table was built (`Dispatcher::register`), and
//! a call the table does not find goes through `Dispatcher::dispatch`,
//! which answers the same.

use alloc::vec::Vec;
use pvlock_abi::FunctionId;
use pvlock_abi::smccc::RESULT_REGS;

use super::counters::VcpuCallCounts;

/// Hash buckets: a power of two, many more than a VM has constant calls,
/// so that a hash without collisions is found for any set of them.
const BUCKETS: usize = 64;

/// One constant call: its id, its catalog counter, its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Constant {
    fid: u32,
    counter: usize,
    reply: [u64; RESULT_REGS],
}

/// The constant calls of one VM, by a collision-free hash of their ids.
#[derive(Clone, Debug)]
pub struct ConstantReplies {
    constants: Vec<Constant>,
    /// Per bucket, the index into `constants` plus one (0: empty).
    buckets: [u8; BUCKETS],
    /// The hash is the top bits of `raw * multiplier` (multiplicative
    /// hashing), with the first multiplier tried that puts every constant
    /// in a bucket of its own.
    multiplier: u32,
}

impl Default for ConstantReplies {
    fn default() -> Self {
        Self {
            constants: Vec::new(),
            buckets: [0; BUCKETS],
            multiplier: 1,
        }
    }
}

impl ConstantReplies {
    /// The table of `calls`: (id, catalog counter index, reply). An id the
    /// catalog does not name (no counter) is left out, and so are calls
    /// beyond what a collision-free hash holds (none for the services
    /// el2 has: a host test checks it); the dispatcher answers those.
    pub fn build(
        calls: impl IntoIterator<Item = (FunctionId, Option<usize>, [u64; RESULT_REGS])>,
    ) -> Self {
        let mut constants: Vec<Constant> = calls
            .into_iter()
            .filter_map(|(fid, counter, reply)| {
                Some(Constant {
                    fid: fid.raw(),
                    counter: counter?,
                    reply,
                })
            })
            .collect();
        // No more than there are buckets (and bucket indices fit a byte).
        constants.truncate(BUCKETS);
        // The first multiplier that separates them all; drop the last
        // constant until one does (never needed so far, but the table must
        // not answer one call with another's reply).
        loop {
            if let Some(table) = candidate_multipliers().find_map(|m| Self::hashed(&constants, m)) {
                return table;
            }
            constants.pop();
        }
    }

    /// The table of `constants` hashed with `multiplier`, if no two
    /// collide.
    fn hashed(constants: &[Constant], multiplier: u32) -> Option<Self> {
        let mut buckets = [0u8; BUCKETS];
        for (index, constant) in constants.iter().enumerate() {
            let bucket = &mut buckets[bucket_of(constant.fid, multiplier)];
            if *bucket != 0 {
                return None;
            }
            *bucket = u8::try_from(index + 1).ok()?;
        }
        Some(Self {
            constants: constants.to_vec(),
            buckets,
            multiplier,
        })
    }

    /// How many calls the table answers.
    pub fn len(&self) -> usize {
        self.constants.len()
    }

    /// Whether the table answers no call.
    pub fn is_empty(&self) -> bool {
        self.constants.is_empty()
    }

    /// The constant call whose id is in `x0` (W0, SVE hint cleared).
    #[inline(always)]
    fn find(&self, x0: u64) -> Option<&Constant> {
        let fid = FunctionId::from_x0(x0).raw();
        let slot = usize::from(self.buckets[bucket_of(fid, self.multiplier)]);
        let constant = self.constants.get(slot.wrapping_sub(1))?;
        (constant.fid == fid).then_some(constant)
    }

    /// The reply to the call in `x0` if it is a constant call (nothing
    /// counted).
    pub fn reply(&self, x0: u64) -> Option<&[u64; RESULT_REGS]> {
        self.find(x0).map(|c| &c.reply)
    }

    /// Answers the call in `x[0]` (the guest's X0..X3: a constant call
    /// reads no argument) if it is a constant call: writes the results to
    /// X0..X3 (X4..X17 stay as they are, as SMCCC 1.1 requires),
    /// counts it in `counts`, and returns true; otherwise (also for a row
    /// that cannot count it) changes nothing: the dispatcher then answers
    /// and counts the call.
    #[inline(always)]
    pub fn answer(&self, x: &mut [u64; RESULT_REGS], counts: VcpuCallCounts<'_>) -> bool {
        let Some(constant) = self.find(x[0]) else {
            return false;
        };
        if !counts.record(constant.counter) {
            return false;
        }
        *x = constant.reply;
        true
    }
}

/// `raw`'s bucket with `multiplier`: the top log2(BUCKETS) bits of the
/// 32-bit product.
#[inline(always)]
fn bucket_of(raw: u32, multiplier: u32) -> usize {
    (raw.wrapping_mul(multiplier) >> (u32::BITS - BUCKETS.trailing_zeros())) as usize % BUCKETS
}

/// The first of [`candidate_multipliers`]: Knuth's 2^32 / golden ratio.
pub(super) const FIRST_MULTIPLIER: u32 = 0x9E37_79B9;

/// The multipliers `build` (and the dispatcher's route index) try, in
/// order: odd, with their bits spread (a fixed sequence, so that a VM's
/// table is the same on every boot).
pub(super) fn candidate_multipliers() -> impl Iterator<Item = u32> {
    // The golden ratio's, then a Weyl sequence of odd steps.
    (0..1024u32).map(|k| FIRST_MULTIPLIER.wrapping_add(k.wrapping_mul(0x6A09_E668)) | 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvlock_abi::catalog;

    fn reply(n: u64) -> [u64; RESULT_REGS] {
        [n, n + 1, n + 2, n + 3]
    }

    #[test]
    fn sixteen_constants_fit_one_collision_free_table() {
        // Four times what el2's services declare constant today (at most
        // four per VM; pv_tests checks that the dispatcher's table answers
        // every one of them): the first 16 catalog ids, each its own.
        let all: Vec<_> = catalog::entries()
            .enumerate()
            .map(|(i, e)| (e.id, Some(i), reply(i as u64)))
            .collect();
        let table = ConstantReplies::build(all.iter().copied().take(16));
        assert_eq!(table.len(), 16);
        for (fid, _, r) in all.iter().take(16) {
            assert_eq!(table.reply(u64::from(fid.raw())), Some(r), "{fid:?}");
        }
        for (fid, _, _) in all.iter().skip(16) {
            assert_eq!(table.reply(u64::from(fid.raw())), None, "{fid:?}");
        }
    }

    #[test]
    fn ids_outside_the_catalog_are_left_to_the_dispatcher() {
        let fid = FunctionId::from_raw(0x8600_0042);
        let table = ConstantReplies::build([(fid, None, reply(1))]);
        assert!(table.is_empty());
        assert_eq!(table.reply(0x8600_0042), None);
    }

    #[test]
    fn an_answer_writes_x0_to_x3_counts_once_and_keeps_the_rest() {
        let fid = pvlock_abi::arch::SMCCC_VERSION;
        let index = catalog::index_of(fid).unwrap();
        let table = ConstantReplies::build([(fid, Some(index), reply(7))]);
        let counters = super::super::CallCounters::for_vcpus(2);
        // W0 only, the SVE hint ignored (DEN0028 "Function Identifiers").
        let mut x = [
            0xffff_ffff_0000_0000 | u64::from(fid.raw()) | 1 << 16,
            1,
            2,
            3,
        ];
        assert!(table.answer(&mut x, counters.vcpu(1)));
        assert_eq!(x, reply(7));
        assert_eq!(counters.count(fid), 1);
        assert_eq!(counters.per_vcpu_total(), 1);
        // Not a constant: nothing written, nothing counted.
        let features = u64::from(pvlock_abi::arch::SMCCC_ARCH_FEATURES.raw());
        let mut other = [features, 0, 0, 0];
        assert!(!table.answer(&mut other, counters.vcpu(1)));
        assert_eq!(other, [features, 0, 0, 0]);
        assert_eq!(counters.total(), 1);
        // A vCPU without a row is left to the dispatcher, which counts.
        x[0] = u64::from(fid.raw());
        x[1] = 55;
        assert!(!table.answer(&mut x, counters.vcpu(9)));
        assert_eq!(x[1], 55);
        assert_eq!(counters.total(), 1);
    }
}
