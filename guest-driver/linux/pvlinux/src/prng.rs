//! SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
//! generators", 2014): the `bench --seed` perturbations come from it, so
//! that a seed names the same run on every machine and every build.

/// A SplitMix64 stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

impl SplitMix64 {
    /// The stream that `seed` names.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform value in [0, 1), from the top 53 bits.
    pub fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform value in [low, high).
    pub fn next_in(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.next_unit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_outputs() {
        // The reference C implementation (Vigna's splitmix64.c) seeded
        // with 1234567.
        let mut rng = SplitMix64::new(1_234_567);
        let first: Vec<u64> = (0..5).map(|_| rng.next_u64()).collect();
        assert_eq!(
            first,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821,
            ]
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_stream() {
        let a: Vec<u64> = {
            let mut rng = SplitMix64::new(42);
            (0..100).map(|_| rng.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut rng = SplitMix64::new(42);
            (0..100).map(|_| rng.next_u64()).collect()
        };
        assert_eq!(a, b);
        let mut other = SplitMix64::new(43);
        assert_ne!(a[0], other.next_u64());
    }

    #[test]
    fn ranges_are_half_open() {
        let mut rng = SplitMix64::new(7);
        for _ in 0..100_000 {
            let unit = rng.next_unit();
            assert!((0.0..1.0).contains(&unit));
            let factor = rng.next_in(0.9, 1.1);
            assert!((0.9..1.1).contains(&factor), "{factor}");
        }
    }
}
