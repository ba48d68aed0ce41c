//! The workspace's one seeded pseudorandom generator.
//!
//! Property tests, the fuzz harnesses' replays, the test guests and the
//! benchmarks' perturbations all draw from [`Rng`], so that a seed names
//! the same sequence everywhere: on every machine, in every build, in a
//! host test and in a guest. It is not for anything secret.
//!
//! The generator is Marsaglia's xorshift64 (shifts 13, 7, 17; "Xorshift
//! RNGs", Journal of Statistical Software 8(14), 2003): one state word,
//! three shifts and three xors per number, `no_std` and allocation-free,
//! so a guest or the hypervisor's own tests can use it anywhere. Its state
//! must never be zero; [`Rng::new`] passes the seed through the SplitMix64
//! output function (Steele, Lea and Flood, "Fast splittable pseudorandom
//! number generators", 2014) first, so seed 0 is as good as any and
//! neighbouring seeds (1, 2, 3, ...) start unrelated streams.
//!
//! [`xorshift64`] is the bare step, for code that wants a chain of
//! dependent ALU work rather than randomness (the lock benchmark's
//! critical sections).

#![no_std]

/// SplitMix64's increment, the golden ratio in 64-bit fixed point.
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// One xorshift64 step (shifts 13, 7, 17). Maps every non-zero word to a
/// non-zero word and 0 to 0.
#[inline(always)]
pub const fn xorshift64(x: u64) -> u64 {
    let x = x ^ (x << 13);
    let x = x ^ (x >> 7);
    x ^ (x << 17)
}

/// SplitMix64's output function: a bijection of `u64` with good avalanche.
const fn splitmix64_mix(seed: u64) -> u64 {
    let z = seed.wrapping_add(GOLDEN_GAMMA);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A seeded xorshift64 stream (module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    /// Never zero.
    state: u64,
}

impl Rng {
    /// The stream that `seed` names. Every seed, 0 included, gives a valid
    /// stream; different seeds give different streams (but for the one seed that
    /// would start at xorshift's fixed point, see the body).
    pub const fn new(seed: u64) -> Self {
        let state = splitmix64_mix(seed);
        // The output function is a bijection, so exactly one seed maps to
        // 0, xorshift's fixed point; that seed gets a fixed non-zero state
        // instead (the stream of one other seed: harmless for tests).
        Self {
            state: if state == 0 { GOLDEN_GAMMA } else { state },
        }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = xorshift64(self.state);
        self.state
    }

    /// The next 32 random bits (the high half, the better mixed one).
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// A number in `0..bound`; 0 when `bound` is 0. Reduced by modulo:
    /// the bias, at most `bound / 2^64`, does not matter to tests.
    #[inline]
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64().checked_rem(bound).unwrap_or(0)
    }

    /// [`Self::below`] for indices.
    #[inline]
    pub fn index(&mut self, len: usize) -> usize {
        // A usize is at most 64 bits on every target the workspace builds.
        self.below(len as u64) as usize
    }

    /// True with probability `numerator / denominator` (false when the
    /// denominator is 0).
    #[inline]
    pub fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        denominator != 0 && self.below(denominator) < numerator
    }

    /// A uniform value in [0, 1), from the top 53 bits.
    pub fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform value in [low, high).
    pub fn next_in(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.next_unit()
    }

    /// One of `items`, or `None` if it is empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.index(items.len()))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::collections::BTreeSet;
    use std::vec::Vec;

    use super::*;

    #[test]
    fn the_step_matches_marsaglias_definition() {
        // Marsaglia's paper iterates y ^= y << 13; y ^= y >> 7; y ^= y << 17
        // (the 64-bit triple (13, 7, 17)); from 1 the first steps are:
        let mut y = 1u64;
        let mut by_hand = Vec::new();
        for _ in 0..3 {
            y ^= y << 13;
            y ^= y >> 7;
            y ^= y << 17;
            by_hand.push(y);
        }
        // 1 -> 0x2001 -> 0x2041 -> 0x4082_2041.
        assert_eq!(by_hand[0], 0x4082_2041);
        assert_eq!(xorshift64(1), by_hand[0]);
        assert_eq!(xorshift64(by_hand[0]), by_hand[1]);
        assert_eq!(xorshift64(by_hand[1]), by_hand[2]);
        assert_eq!(xorshift64(0), 0);
    }

    #[test]
    fn seeds_go_through_the_splitmix64_output_function() {
        // Vigna's splitmix64.c seeded with 1234567 outputs this first: the
        // same function of seed + gamma as [`splitmix64_mix`].
        assert_eq!(splitmix64_mix(1_234_567), 6_457_827_717_110_365_317);
        let mut rng = Rng::new(1_234_567);
        assert_eq!(rng.next_u64(), xorshift64(6_457_827_717_110_365_317));
    }

    #[test]
    fn every_seed_gives_a_live_stream_and_seeds_differ() {
        let mut firsts = BTreeSet::new();
        for seed in (0..1_000).chain([u64::MAX, u64::MAX - 1]) {
            let mut rng = Rng::new(seed);
            let first = rng.next_u64();
            assert_ne!(first, 0, "seed {seed}");
            assert!(firsts.insert(first), "seed {seed} repeats a stream");
        }
        // The one seed whose mixed value is 0 (the output function maps
        // 0 to 0, so it is the seed that adds up to 0) still runs.
        let zero_seed = GOLDEN_GAMMA.wrapping_neg();
        assert_eq!(splitmix64_mix(zero_seed), 0);
        let mut replaced = Rng::new(zero_seed);
        assert_eq!(
            replaced,
            Rng {
                state: GOLDEN_GAMMA
            }
        );
        assert_ne!(replaced.next_u64(), 0);
    }

    #[test]
    fn the_same_seed_gives_the_same_stream() {
        let a: Vec<u64> = {
            let mut rng = Rng::new(42);
            (0..100).map(|_| rng.next_u64()).collect()
        };
        let mut b = Rng::new(42);
        assert!(a.iter().all(|&x| x == b.next_u64()));
    }

    #[test]
    fn ranges_hold_and_cover() {
        let mut rng = Rng::new(7);
        let mut seen = [0u32; 10];
        for _ in 0..100_000 {
            let i = rng.below(10);
            seen[i as usize] += 1;
            let unit = rng.next_unit();
            assert!((0.0..1.0).contains(&unit));
            let factor = rng.next_in(0.9, 1.1);
            assert!((0.9..1.1).contains(&factor), "{factor}");
        }
        // Each of ten values about 10 000 times: far from any edge case.
        assert!(
            seen.iter().all(|&n| (9_000..11_000).contains(&n)),
            "{seen:?}"
        );
        assert_eq!(rng.below(0), 0);
        assert_eq!(rng.index(1), 0);
        assert!(!rng.chance(1, 0));
        assert!(!rng.chance(0, 5));
        assert!(rng.chance(5, 5));
        assert_eq!(rng.pick::<u8>(&[]), None);
        assert_eq!(rng.pick(&[3]), Some(&3));
    }
}
