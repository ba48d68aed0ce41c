//! The `smp-demo` guest's workload and the console lines it prints, shared
//! with `cargo xtask`, which judges boots by those lines.
//!
//! Every vCPU runs `rounds` rounds of `work` iterations of a checksum loop:
//! a 64-bit linear congruential generator (the integer registers) and a
//! floating-point running sum (the FP/SIMD registers), so that a vCPU whose
//! registers were not saved and restored faithfully across a switch ends
//! with a wrong checksum. The boot vCPU checks every vCPU's result against
//! a closed form ([`expected_checksum`]) that costs O(log n), not a rerun.

use crate::mpidr::Mpidr;
use core::fmt;
use pvlock_abi::psci;

/// Every line smp-demo prints starts with this.
pub const PREFIX: &str = "smp-demo:";

/// Multiplier of the LCG (Knuth's MMIX generator).
const LCG_MULTIPLIER: u64 = 6_364_136_223_846_793_005;
/// Increment of the LCG (Knuth's MMIX generator).
const LCG_INCREMENT: u64 = 1_442_695_040_888_963_407;

/// Largest `work` per round: the floating-point sum of a round,
/// work * (work - 1) / 2, must stay below 2^53 to be exact.
pub const MAX_WORK: u64 = 100_000_000;

/// Where vCPU `vcpu`'s generator starts.
pub const fn seed(vcpu: usize) -> u64 {
    (vcpu as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The checksum state of one vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checksum {
    lcg: u64,
    float_total: u64,
}

impl Checksum {
    pub const fn new(vcpu: usize) -> Self {
        Self {
            lcg: seed(vcpu),
            float_total: 0,
        }
    }

    /// One round: `work` (at most [`MAX_WORK`]) iterations of the loop.
    pub fn round(&mut self, work: u64) {
        let mut x = self.lcg;
        let mut sum = 0.0f64;
        for i in 0..work {
            // black_box keeps the compiler from folding the recurrence.
            x = core::hint::black_box(x.wrapping_mul(LCG_MULTIPLIER).wrapping_add(LCG_INCREMENT));
            sum += i as f64;
        }
        self.lcg = x;
        self.float_total = self.float_total.wrapping_add(sum as u64);
    }

    /// The value reported and checked.
    pub const fn value(&self) -> u64 {
        self.lcg ^ self.float_total
    }
}

/// What vCPU `vcpu` must end with after `rounds` rounds of `work`.
pub fn expected_checksum(vcpu: usize, work: u64, rounds: u64) -> u64 {
    let lcg = lcg_skip(seed(vcpu), work.wrapping_mul(rounds));
    let per_round = if work == 0 { 0 } else { work * (work - 1) / 2 };
    lcg ^ per_round.wrapping_mul(rounds)
}

/// The LCG state after `steps` steps from `x`, by repeated squaring of the
/// affine map x -> a*x + c (F. Brown, "Random number generation with
/// arbitrary strides", 1994).
fn lcg_skip(x: u64, mut steps: u64) -> u64 {
    let (mut acc_mul, mut acc_add) = (1u64, 0u64);
    let (mut cur_mul, mut cur_add) = (LCG_MULTIPLIER, LCG_INCREMENT);
    while steps > 0 {
        if steps & 1 == 1 {
            acc_mul = acc_mul.wrapping_mul(cur_mul);
            acc_add = acc_add.wrapping_mul(cur_mul).wrapping_add(cur_add);
        }
        cur_add = cur_mul.wrapping_add(1).wrapping_mul(cur_add);
        cur_mul = cur_mul.wrapping_mul(cur_mul);
        steps >>= 1;
    }
    acc_mul.wrapping_mul(x).wrapping_add(acc_add)
}

/// `smp-demo: vcpu 3 mpidr 0.0.0.3 round 2/5`: vCPU 3 finished round 2.
/// The guest appends ` at <ms> ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub vcpu: usize,
    pub mpidr: Mpidr,
    pub round: u64,
    pub rounds: u64,
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX} vcpu {} mpidr {} round {}/{}",
            self.vcpu, self.mpidr, self.round, self.rounds
        )
    }
}

impl Progress {
    /// Finds a progress line anywhere in `line` (a hypervisor may prefix
    /// guest output with the VM's name).
    pub fn parse(line: &str) -> Option<Self> {
        let start = line.find(PREFIX)? + PREFIX.len();
        let rest = line[start..].strip_prefix(" vcpu ")?;
        let (vcpu, rest) = rest.split_once(" mpidr ")?;
        let (mpidr, rest) = rest.split_once(" round ")?;
        let (round, rest) = rest.split_once('/')?;
        let rounds = rest.split(' ').next()?;
        let mut aff = [0u8; 4];
        let mut parts = mpidr.split('.');
        for a in &mut aff {
            *a = parts.next()?.parse().ok()?;
        }
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            vcpu: vcpu.parse().ok()?,
            mpidr: Mpidr::from_affinity(aff[0], aff[1], aff[2], aff[3]),
            round: round.parse().ok()?,
            rounds: rounds.parse().ok()?,
        })
    }
}

/// The last line of a successful run: `smp-demo: 8 vCPUs done, checksums ok`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    pub vcpus: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX} {} vCPUs done, checksums ok", self.vcpus)
    }
}

/// A PSCI answer smp-demo checks itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PsciCheck {
    /// CPU_ON of an MPIDR that is not in the device tree.
    UnknownMpidr,
    /// CPU_ON of the vCPU making the call.
    BootCpuAlreadyOn,
    /// CPU_ON of a vCPU that has started and reported in.
    RunningCpuAlreadyOn,
    /// CPU_ON of an off vCPU with an entry point outside the guest's RAM
    /// (only the pvlock hypervisor checks this; opt in with
    /// `psci-checks=all`).
    EntryOutsideRam,
    /// AFFINITY_INFO of a vCPU that has reported in.
    AffinityOn,
    /// AFFINITY_INFO of a vCPU that returned from its work and called
    /// CPU_OFF.
    AffinityOff,
}

impl PsciCheck {
    /// Every check; [`PsciCheck::EntryOutsideRam`] runs only on request.
    pub const ALL: [PsciCheck; 6] = [
        PsciCheck::UnknownMpidr,
        PsciCheck::BootCpuAlreadyOn,
        PsciCheck::RunningCpuAlreadyOn,
        PsciCheck::EntryOutsideRam,
        PsciCheck::AffinityOn,
        PsciCheck::AffinityOff,
    ];

    /// What was called.
    pub const fn call(self) -> &'static str {
        match self {
            PsciCheck::UnknownMpidr => "CPU_ON of an MPIDR not in the device tree",
            PsciCheck::BootCpuAlreadyOn => "CPU_ON of the calling vCPU",
            PsciCheck::RunningCpuAlreadyOn => "CPU_ON of a running vCPU",
            PsciCheck::EntryOutsideRam => "CPU_ON with an entry point outside RAM",
            PsciCheck::AffinityOn => "AFFINITY_INFO of a running vCPU",
            PsciCheck::AffinityOff => "AFFINITY_INFO of a vCPU after CPU_OFF",
        }
    }

    /// The answer PSCI (DEN0022) and KVM give.
    pub const fn expected(self) -> i32 {
        match self {
            PsciCheck::UnknownMpidr => psci::error::INVALID_PARAMETERS,
            PsciCheck::BootCpuAlreadyOn | PsciCheck::RunningCpuAlreadyOn => psci::error::ALREADY_ON,
            PsciCheck::EntryOutsideRam => psci::error::INVALID_ADDRESS,
            PsciCheck::AffinityOn => psci::AFFINITY_ON,
            PsciCheck::AffinityOff => psci::AFFINITY_OFF,
        }
    }

    fn answer_name(self, answer: i32) -> &'static str {
        match self {
            PsciCheck::AffinityOn | PsciCheck::AffinityOff => match answer {
                psci::AFFINITY_ON => "ON",
                psci::AFFINITY_OFF => "OFF",
                psci::AFFINITY_ON_PENDING => "ON_PENDING",
                _ => psci::error::name(answer).unwrap_or("unknown"),
            },
            _ => psci::error::name(answer).unwrap_or("unknown"),
        }
    }
}

/// The line reporting one check:
/// `smp-demo: psci: CPU_ON of a running vCPU -> -4 (ALREADY_ON): ok`
/// (or `: WRONG, expected ...`). The guest appends details such as
/// ` (vcpu 3)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PsciResult {
    pub check: PsciCheck,
    pub answer: i32,
}

impl PsciResult {
    pub const fn passed(&self) -> bool {
        self.answer == self.check.expected()
    }

    /// The line a passing check prints (what xtask looks for).
    pub const fn pass(check: PsciCheck) -> Self {
        Self {
            check,
            answer: check.expected(),
        }
    }
}

impl fmt::Display for PsciResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX} psci: {} -> {} ({})",
            self.check.call(),
            self.answer,
            self.check.answer_name(self.answer)
        )?;
        if self.passed() {
            write!(f, ": ok")
        } else {
            let expected = self.check.expected();
            write!(
                f,
                ": WRONG, expected {expected} ({})",
                self.check.answer_name(expected)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_form_matches_the_loop() {
        for (vcpu, work, rounds) in [(0, 0, 3), (1, 1, 1), (3, 1000, 4), (63, 12_345, 2)] {
            let mut c = Checksum::new(vcpu);
            for _ in 0..rounds {
                c.round(work);
            }
            assert_eq!(
                c.value(),
                expected_checksum(vcpu, work, rounds),
                "{vcpu} {work} {rounds}"
            );
        }
        assert_ne!(expected_checksum(0, 10, 1), expected_checksum(1, 10, 1));
        assert_ne!(expected_checksum(0, 10, 1), expected_checksum(0, 10, 2));
    }

    #[test]
    fn float_sums_stay_exact_up_to_max_work() {
        let n = MAX_WORK;
        let exact = n * (n - 1) / 2;
        assert!(exact < 1 << 53);
        assert_eq!(exact as f64 as u64, exact);
    }

    #[test]
    fn progress_lines_round_trip() {
        let p = Progress {
            vcpu: 17,
            mpidr: Mpidr::from_affinity(0, 0, 1, 1),
            round: 2,
            rounds: 5,
        };
        let line = format!("vm1: {p} at 12.5 ms\r");
        assert_eq!(p.to_string(), "smp-demo: vcpu 17 mpidr 0.0.1.1 round 2/5");
        assert_eq!(Progress::parse(&line), Some(p));
        assert_eq!(
            Progress::parse("smp-demo: vcpu x mpidr 0.0.0.0 round 1/2"),
            None
        );
        assert_eq!(
            Progress::parse("smp-demo: vcpu 1 mpidr 0.0.0 round 1/2"),
            None
        );
    }

    #[test]
    fn summary_and_psci_lines() {
        assert_eq!(
            Summary { vcpus: 8 }.to_string(),
            "smp-demo: 8 vCPUs done, checksums ok"
        );
        assert_eq!(
            PsciResult::pass(PsciCheck::RunningCpuAlreadyOn).to_string(),
            "smp-demo: psci: CPU_ON of a running vCPU -> -4 (ALREADY_ON): ok"
        );
        let wrong = PsciResult {
            check: PsciCheck::EntryOutsideRam,
            answer: 0,
        };
        assert!(!wrong.passed());
        assert_eq!(
            wrong.to_string(),
            "smp-demo: psci: CPU_ON with an entry point outside RAM -> 0 (SUCCESS): \
             WRONG, expected -9 (INVALID_ADDRESS)"
        );
        assert_eq!(
            PsciResult::pass(PsciCheck::AffinityOff).to_string(),
            "smp-demo: psci: AFFINITY_INFO of a vCPU after CPU_OFF -> 1 (OFF): ok"
        );
    }
}
