//! The `pv-check` guest's expectations and console lines, shared with
//! `cargo xtask`, which judges boots by those lines.
//!
//! pv-check is told on its command line what the VM should offer
//! ([`Expect`]); from that alone both sides know which checks apply: every
//! SMCCC call with a documented answer ([`CALLS`], docs/abi.md §1-5) and every
//! other check ([`labels`]). Each passing check prints
//! `pv-check: <label>: ok` (sometimes followed by ` (<detail>)`), a failing
//! one `pv-check: <label>: FAILED: <why>`.

use core::fmt;

use pvlock_abi::kvm::{self, KvmFeatures};
use pvlock_abi::pvlock::{Variant, anolis, openeuler, seed_v2, seed_v3};
use pvlock_abi::smccc::{self, FunctionId, Owner};
use pvlock_abi::{arch, control, directed_yield, psci, pvtime, virtio_mmio};

use crate::bootargs::{ArgError, BootArgs};

/// Every line pv-check prints starts with this.
pub const PREFIX: &str = "pv-check:";

/// The last line of a successful run.
pub const ALL_PASSED: &str = "pv-check: all checks passed";

/// Stolen time over the busy period, in percent of the period, with more
/// vCPUs than pCPUs (`expect-steal=yes`): every vCPU must wait at least
/// this much (with 4 vCPUs on 2 pCPUs each waits about half the time).
pub const STEAL_OVERCOMMIT_MIN_PERCENT: u64 = 10;

/// With a pCPU for each vCPU (`expect-steal=no`) stolen time must stay
/// below this share of the busy period. Not 0: a reschedule IPI to an idle
/// pCPU takes as long as the host takes to run that pCPU's thread, and the
/// hypervisor counts that wait, truthfully, as stolen.
pub const STEAL_DEDICATED_MAX_PERCENT: u64 = 5;

/// A function number no catalogued service uses in the vendor-hypervisor
/// and standard-hypervisor ranges (checked by a test): calls to it must
/// answer NOT_SUPPORTED.
pub const UNUSED_FUNCTION: u16 = 0xFE;

/// A vCPU index no VM has (the binding allows up to 64 vCPUs): a kick of
/// it must answer NOT_SUPPORTED.
pub const NO_SUCH_VCPU: u64 = 0xFFFF;

/// What stolen time should do ("expect-steal=").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steal {
    /// `yes`: offered, and every vCPU's grows in the busy period (more
    /// vCPUs than pCPUs).
    Grows,
    /// `no`: offered, and stays below [`STEAL_DEDICATED_MAX_PERCENT`] (a pCPU for
    /// every vCPU).
    NearZero,
    /// `none`: not offered.
    Unavailable,
}

/// What the VM should offer, from the command line:
///
/// | word | values | meaning |
/// |---|---|---|
/// | `expect-kvm=` | `yes`, `no` | the hypervisor is KVM-compatible (SMCCC >= 1.1, KVM's UID), or there is none (QEMU's own firmware: SMCCC 1.0); absent: not checked |
/// | `expect-lock=` | `seed-v2`, `seed-v3`, `openeuler`, `anolis`, `none` | the PV-lock variant offered (required) |
/// | `expect-steal=` | `yes`, `no`, `none` | stolen time offered and growing / offered and near 0 / not offered (required) |
/// | `overcommit=` | `yes`, `no` | more vCPUs than pCPUs; default `yes` for `expect-steal=yes`, `no` for `expect-steal=no`, else unknown |
/// | `expect-control=` | `yes`, `no` | the VM is a control VM (PVLOCK_SET_WFX_POLICY answers) or not (it answers NOT_SUPPORTED); default `no` |
/// | `expect-virtio=` | `1`, `2` | the Version the empty virtio-mmio transports report: 2 under el2 (the default), 1 on QEMU 7.2 with its default `force-legacy=on` |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expect {
    pub kvm: Option<bool>,
    pub lock: Option<Variant>,
    pub steal: Steal,
    /// Explicit `overcommit=`; see [`Expect::overcommitted`].
    pub overcommit: Option<bool>,
    /// `expect-control=yes`: the VM may change WFE trap policies.
    pub control: bool,
    /// `expect-virtio=`: the virtio-mmio transports' Version.
    pub virtio_version: u32,
}

const YES_NO: &[&str] = &["yes", "no"];
const LOCKS: &[&str] = &["seed-v2", "seed-v3", "openeuler", "anolis", "none"];
const STEALS: &[&str] = &["yes", "no", "none"];
const VIRTIO_VERSIONS: &[&str] = &["1", "2"];

/// A required word is missing from the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectError<'a> {
    Missing(&'static str),
    Bad(ArgError<'a>),
}

impl fmt::Display for ExpectError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpectError::Missing(key) => write!(f, "{key}= is required"),
            ExpectError::Bad(e) => e.fmt(f),
        }
    }
}

impl Expect {
    /// Reads the `expect-*` and `overcommit` words.
    pub fn from_bootargs<'a>(args: &BootArgs<'a>) -> Result<Self, ExpectError<'a>> {
        let yes_no = |key| {
            args.choice(key, YES_NO)
                .map(|v| v.map(|v| v == "yes"))
                .map_err(ExpectError::Bad)
        };
        let lock = args
            .choice("expect-lock", LOCKS)
            .map_err(ExpectError::Bad)?
            .ok_or(ExpectError::Missing("expect-lock"))?;
        let steal = match args
            .choice("expect-steal", STEALS)
            .map_err(ExpectError::Bad)?
            .ok_or(ExpectError::Missing("expect-steal"))?
        {
            "yes" => Steal::Grows,
            "no" => Steal::NearZero,
            _ => Steal::Unavailable,
        };
        Ok(Self {
            kvm: yes_no("expect-kvm")?,
            lock: Variant::ALL.into_iter().find(|v| v.name() == lock),
            steal,
            overcommit: yes_no("overcommit")?,
            control: yes_no("expect-control")?.unwrap_or(false),
            virtio_version: match args
                .choice("expect-virtio", VIRTIO_VERSIONS)
                .map_err(ExpectError::Bad)?
            {
                Some("1") => virtio_mmio::VERSION_LEGACY,
                _ => virtio_mmio::VERSION,
            },
        })
    }

    /// Whether stolen time is offered.
    pub const fn steal_offered(&self) -> bool {
        !matches!(self.steal, Steal::Unavailable)
    }

    /// Whether there are more vCPUs than pCPUs, if known.
    pub const fn overcommitted(&self) -> Option<bool> {
        match (self.overcommit, self.steal) {
            (Some(o), _) => Some(o),
            (None, Steal::Grows) => Some(true),
            (None, Steal::NearZero) => Some(false),
            (None, Steal::Unavailable) => None,
        }
    }

    const fn lock_is(&self, variant: Variant) -> bool {
        matches!(self.lock, Some(v) if v as u8 == variant as u8)
    }

    const fn guest_allocates(&self) -> bool {
        matches!(self.lock, Some(v) if v.guest_allocates())
    }
}

impl fmt::Display for Expect {
    /// The command-line words: `expect-kvm=yes expect-lock=seed-v2
    /// expect-steal=yes`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        if let Some(kvm) = self.kvm {
            write!(f, "expect-kvm={} ", yes_no(kvm))?;
        }
        write!(
            f,
            "expect-lock={} expect-steal={}",
            self.lock.map_or("none", Variant::name),
            match self.steal {
                Steal::Grows => "yes",
                Steal::NearZero => "no",
                Steal::Unavailable => "none",
            }
        )?;
        if let Some(o) = self.overcommit {
            write!(f, " overcommit={}", yes_no(o))?;
        }
        if self.control {
            f.write_str(" expect-control=yes")?;
        }
        if self.virtio_version != virtio_mmio::VERSION {
            write!(f, " expect-virtio={}", self.virtio_version)?;
        }
        Ok(())
    }
}

/// A documented answer to an SMCCC call (docs/abi.md §1-5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// This return code in X0, sign-extended to 64 bits.
    Code(i64),
    /// One of these return codes.
    OneOf(&'static [i64]),
    /// A version (non-negative, bit 31 clear) of at least this.
    AtLeast(u32),
    /// KVM's Call UID in W0..W3, upper halves zero.
    Uid,
    /// A KVM_FEATURES bitmap (upper halves zero) with bit 0 set and the
    /// PV-lock bits of this variant: bit 1 under seed-v3; under seed-v2
    /// this project's bits 32 and 33 (`kvm::func::PV_LOCK_FEATURES`,
    /// `PV_LOCK_PREEMPTED`), which are clear under every other variant;
    /// the bits of the project's directed yield (112) and kick that lends
    /// (114) exactly when there is a variant;
    /// and never the retired bits 34 and 35 (the project's calls' old
    /// numbers, inside pKVM's range).
    Features(Option<Variant>),
    /// A 64-byte aligned IPA.
    Ipa,
    /// 0 in all of X0..X3.
    AllZero,
    /// NOT_SUPPORTED, unless KVM_FEATURES advertises KVM_PTP on the same id
    /// (the seed-v3 clash): then any answer.
    NotSupportedUnlessPtp,
}

const NOT_SUPPORTED: Answer = Answer::Code(smccc::NOT_SUPPORTED);
/// The KVM_FEATURES bits of the project's calls' retired numbers (34, 35):
/// no hypervisor of this ABI sets them.
const RETIRED_BITS: [u16; 2] = [
    directed_yield::RETIRED_PV_SCHED_YIELD_TO.number(),
    control::RETIRED_PVLOCK_SET_WFX_POLICY.number(),
];
const SUCCESS: Answer = Answer::Code(smccc::SUCCESS);
/// SMCCC_ARCH_FEATURES answers for WORKAROUND_1 and _3.
const WORKAROUND_1_ANSWERS: &[i64] = &[
    arch::WORKAROUND_MITIGATED,
    arch::WORKAROUND_UNAFFECTED,
    arch::WORKAROUND_VULNERABLE,
];
/// SMCCC_ARCH_FEATURES answers for WORKAROUND_2 (Linux also takes
/// "unaffected").
const WORKAROUND_2_ANSWERS: &[i64] = &[
    arch::WORKAROUND_MITIGATED,
    arch::WORKAROUND_NOT_REQUIRED,
    arch::WORKAROUND_VULNERABLE,
    arch::WORKAROUND_UNAFFECTED,
];

impl Answer {
    /// Whether `regs` (X0..X3) is this answer, on a VM whose KVM_FEATURES
    /// answer was `features`.
    pub fn accepts(&self, regs: [u64; 4], features: KvmFeatures) -> bool {
        let upper_halves_clear = regs.iter().all(|r| r >> 32 == 0);
        match *self {
            Answer::Code(code) => regs[0] == smccc::ret_to_x0(code),
            Answer::OneOf(codes) => codes.iter().any(|&c| regs[0] == smccc::ret_to_x0(c)),
            Answer::AtLeast(min) => {
                (u64::from(min)..=u64::from(i32::MAX as u32)).contains(&regs[0])
            }
            Answer::Uid => regs == kvm::UID_REGS,
            Answer::Features(lock) => {
                let f = KvmFeatures::from_words(regs.map(|r| r as u32));
                let seed_v2_bits = [kvm::func::PV_LOCK_FEATURES, kvm::func::PV_LOCK_PREEMPTED];
                let lock_bits = match lock {
                    Some(Variant::SeedV3) => f.contains(seed_v3::KVM_FEATURES_BIT),
                    Some(Variant::SeedV2) => seed_v2_bits.iter().all(|&b| f.contains(b)),
                    _ => !seed_v2_bits.iter().any(|&b| f.contains(b)),
                };
                let yield_bit = f.contains(kvm::func::PV_SCHED_YIELD_TO) == lock.is_some()
                    && f.contains(kvm::func::PV_SCHED_KICK_LEND) == lock.is_some();
                let retired_clear = !RETIRED_BITS.iter().any(|&b| f.contains(b));
                upper_halves_clear
                    && f.contains(kvm::func::FEATURES)
                    && lock_bits
                    && yield_bit
                    && retired_clear
            }
            Answer::Ipa => {
                smccc::x0_to_ret(regs[0]) > 0
                    && regs[0].is_multiple_of(pvlock_abi::pvlock::STATE_SIZE as u64)
            }
            Answer::AllZero => regs == [0; 4],
            Answer::NotSupportedUnlessPtp => {
                features.contains(kvm::func::PTP)
                    || regs[0] == smccc::ret_to_x0(smccc::NOT_SUPPORTED)
            }
        }
    }
}

/// A return code with its name: `-1 (NOT_SUPPORTED)`.
struct Code(i64);

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            smccc::SUCCESS => return write!(f, "0"),
            smccc::NOT_SUPPORTED => "NOT_SUPPORTED",
            smccc::NOT_REQUIRED => "NOT_REQUIRED",
            smccc::INVALID_PARAMETER => "INVALID_PARAMETER",
            other => return write!(f, "{other}"),
        };
        write!(f, "{} ({name})", self.0)
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Answer::Code(code) => Code(code).fmt(f),
            Answer::OneOf(codes) => {
                write!(f, "one of")?;
                for (i, &c) in codes.iter().enumerate() {
                    write!(f, "{}{c}", if i == 0 { " " } else { ", " })?;
                }
                Ok(())
            }
            Answer::AtLeast(v) => write!(f, "{}.{} or later", v >> 16, v & 0xffff),
            Answer::Uid => {
                let u = kvm::UID;
                write!(
                    f,
                    "KVM's UID {:08x} {:08x} {:08x} {:08x}",
                    u[0], u[1], u[2], u[3]
                )
            }
            Answer::Features(lock) => {
                write!(f, "a bitmap with bit {}", kvm::func::FEATURES)?;
                let (a, b) = (kvm::func::PV_LOCK_FEATURES, kvm::func::PV_LOCK_PREEMPTED);
                let (y, k) = (kvm::func::PV_SCHED_YIELD_TO, kvm::func::PV_SCHED_KICK_LEND);
                let [r, s] = RETIRED_BITS;
                match lock {
                    Some(Variant::SeedV3) => write!(
                        f,
                        ", bit {} and bits {y}, {k} set, bits {r}, {s} clear",
                        seed_v3::KVM_FEATURES_BIT
                    ),
                    Some(Variant::SeedV2) => {
                        write!(f, " and bits {a}, {b}, {y}, {k} set, bits {r}, {s} clear")
                    }
                    Some(_) => write!(f, " and bits {y}, {k} set, bits {a}, {b}, {r}, {s} clear"),
                    None => write!(f, " set, bits {a}, {b}, {r}, {s}, {y}, {k} clear"),
                }
            }
            Answer::Ipa => write!(f, "a 64-byte aligned IPA"),
            Answer::AllZero => write!(f, "0 in x0..x3"),
            Answer::NotSupportedUnlessPtp => {
                write!(
                    f,
                    "{} unless KVM_PTP is advertised",
                    Code(smccc::NOT_SUPPORTED)
                )
            }
        }
    }
}

/// When a call's answer applies, and which.
#[derive(Clone, Copy, Debug)]
enum Rule {
    Always(Answer),
    /// Depends on whether the VM is KVM (skipped when that is not known).
    Kvm {
        yes: Answer,
        no: Answer,
    },
    /// KVM_FEATURES: depends on whether the VM is KVM and on its variant.
    KvmFeatures,
    /// Depends on whether the VM has `variant` (`None`: skipped).
    Lock {
        variant: Variant,
        offered: Option<Answer>,
        otherwise: Option<Answer>,
    },
    /// Depends on whether stolen time is offered.
    Steal {
        offered: Answer,
        otherwise: Answer,
    },
    /// Depends on whether the VM is a control VM.
    Control {
        yes: Answer,
        no: Answer,
    },
}

/// One SMCCC call pv-check makes from the boot vCPU, with its documented
/// answer.
#[derive(Clone, Copy, Debug)]
pub struct CallSpec {
    /// What is called, by name: `SMCCC_ARCH_FEATURES(PV_TIME_FEATURES)`.
    pub label: &'static str,
    pub function: FunctionId,
    /// x1..x3.
    pub args: [u64; 3],
    rule: Rule,
}

impl CallSpec {
    /// The answer the VM must give, or `None` if the call is not checked
    /// for it.
    pub fn answer(&self, expect: &Expect) -> Option<Answer> {
        match self.rule {
            Rule::Always(a) => Some(a),
            Rule::Kvm { yes, no } => expect.kvm.map(|k| if k { yes } else { no }),
            Rule::KvmFeatures => expect.kvm.map(|k| {
                if k {
                    Answer::Features(expect.lock)
                } else {
                    NOT_SUPPORTED
                }
            }),
            Rule::Lock {
                variant,
                offered,
                otherwise,
            } => {
                if expect.lock_is(variant) {
                    offered
                } else {
                    otherwise
                }
            }
            Rule::Steal { offered, otherwise } => Some(if expect.steal_offered() {
                offered
            } else {
                otherwise
            }),
            Rule::Control { yes, no } => Some(if expect.control { yes } else { no }),
        }
    }
}

const fn id(f: FunctionId) -> u64 {
    f.raw() as u64
}

const fn call(label: &'static str, function: FunctionId, x1: u64, rule: Rule) -> CallSpec {
    CallSpec {
        label,
        function,
        args: [x1, 0, 0],
        rule,
    }
}

const fn lock(variant: Variant, offered: Option<Answer>, otherwise: Option<Answer>) -> Rule {
    Rule::Lock {
        variant,
        offered,
        otherwise,
    }
}

/// 0 when `variant` is offered, else NOT_SUPPORTED.
const fn lock_feature(variant: Variant) -> Rule {
    lock(variant, Some(SUCCESS), Some(NOT_SUPPORTED))
}

/// NOT_SUPPORTED unless `variant` is offered (then not checked here).
const fn absent_unless(variant: Variant) -> Rule {
    lock(variant, None, Some(NOT_SUPPORTED))
}

const UNKNOWN_VENDOR32: FunctionId = FunctionId::fast32(Owner::VendorHypervisor, UNUSED_FUNCTION);
const UNKNOWN_VENDOR64: FunctionId = FunctionId::fast64(Owner::VendorHypervisor, UNUSED_FUNCTION);
const UNKNOWN_STANDARD64: FunctionId =
    FunctionId::fast64(Owner::StandardHypervisor, UNUSED_FUNCTION);

/// Every call pv-check makes, in order (docs/abi.md §1-5). Calls of a variant
/// the VM does not have must answer NOT_SUPPORTED; those that register or
/// kick for the VM's own guest-allocated variant are checked separately.
#[rustfmt::skip]
pub static CALLS: &[CallSpec] = &[
    // §5, §1: PSCI and the SMCCC version.
    call("PSCI_VERSION", psci::PSCI_VERSION, 0, Rule::Always(Answer::AtLeast(psci::VERSION_1_0.raw()))),
    call("PSCI_FEATURES(SMCCC_VERSION)", psci::PSCI_FEATURES, id(arch::SMCCC_VERSION),
        Rule::Kvm { yes: SUCCESS, no: NOT_SUPPORTED }),
    call("SMCCC_VERSION", arch::SMCCC_VERSION, 0,
        Rule::Kvm { yes: Answer::AtLeast(smccc::VERSION_1_1.raw()), no: NOT_SUPPORTED }),
    // §2: KVM.
    call("KVM_CALL_UID", kvm::CALL_UID, 0, Rule::Kvm { yes: Answer::Uid, no: NOT_SUPPORTED }),
    call("KVM_FEATURES", kvm::FEATURES, 0, Rule::KvmFeatures),
    // §1: SMCCC_ARCH_FEATURES.
    call("SMCCC_ARCH_FEATURES(SMCCC_ARCH_WORKAROUND_1)", arch::SMCCC_ARCH_FEATURES,
        id(arch::SMCCC_ARCH_WORKAROUND_1),
        Rule::Kvm { yes: Answer::OneOf(WORKAROUND_1_ANSWERS), no: NOT_SUPPORTED }),
    call("SMCCC_ARCH_FEATURES(SMCCC_ARCH_WORKAROUND_2)", arch::SMCCC_ARCH_FEATURES,
        id(arch::SMCCC_ARCH_WORKAROUND_2),
        Rule::Kvm { yes: Answer::OneOf(WORKAROUND_2_ANSWERS), no: NOT_SUPPORTED }),
    call("SMCCC_ARCH_FEATURES(SMCCC_ARCH_WORKAROUND_3)", arch::SMCCC_ARCH_FEATURES,
        id(arch::SMCCC_ARCH_WORKAROUND_3),
        Rule::Kvm { yes: Answer::OneOf(WORKAROUND_1_ANSWERS), no: NOT_SUPPORTED }),
    call("SMCCC_ARCH_FEATURES(PV_LOCK_FEATURES(seed-v2))", arch::SMCCC_ARCH_FEATURES,
        id(seed_v2::PV_LOCK_FEATURES), lock_feature(Variant::SeedV2)),
    call("SMCCC_ARCH_FEATURES(PV_SCHED_FEATURES(openEuler))", arch::SMCCC_ARCH_FEATURES,
        id(openeuler::PV_SCHED_FEATURES), lock_feature(Variant::OpenEuler)),
    call("SMCCC_ARCH_FEATURES(PV_LOCK_FEATURES(anolis))", arch::SMCCC_ARCH_FEATURES,
        id(anolis::PV_LOCK_FEATURES), lock_feature(Variant::Anolis)),
    call("SMCCC_ARCH_FEATURES(PV_QSPINLOCK_FEATURES(anolis))", arch::SMCCC_ARCH_FEATURES,
        id(anolis::PV_QSPINLOCK_FEATURES), lock_feature(Variant::Anolis)),
    call("SMCCC_ARCH_FEATURES(PV_TIME_FEATURES)", arch::SMCCC_ARCH_FEATURES,
        id(pvtime::PV_TIME_FEATURES), Rule::Steal { offered: SUCCESS, otherwise: NOT_SUPPORTED }),
    // §3 seed-v2.
    call("PV_LOCK_FEATURES(seed-v2)(PV_LOCK_FEATURES)", seed_v2::PV_LOCK_FEATURES,
        id(seed_v2::PV_LOCK_FEATURES), lock_feature(Variant::SeedV2)),
    call("PV_LOCK_FEATURES(seed-v2)(PV_LOCK_PREEMPTED)", seed_v2::PV_LOCK_FEATURES,
        id(seed_v2::PV_LOCK_PREEMPTED), lock_feature(Variant::SeedV2)),
    call("PV_LOCK_FEATURES(seed-v2)(an unknown function)", seed_v2::PV_LOCK_FEATURES,
        id(UNKNOWN_VENDOR64), Rule::Always(NOT_SUPPORTED)),
    call("PV_LOCK_PREEMPTED(seed-v2)", seed_v2::PV_LOCK_PREEMPTED, 0,
        lock(Variant::SeedV2, Some(Answer::Ipa), Some(NOT_SUPPORTED))),
    // §3 seed-v3 (0x86000001 is KVM_PTP on a VM that advertises it instead).
    call("PV_LOCK(seed-v3)(FEATURES)", seed_v3::PV_LOCK, seed_v3::ARG_FEATURES,
        lock(Variant::SeedV3, Some(Answer::AllZero), Some(Answer::NotSupportedUnlessPtp))),
    call("PV_LOCK(seed-v3)(PREEMPTED)", seed_v3::PV_LOCK, seed_v3::ARG_PREEMPTED,
        lock(Variant::SeedV3, Some(Answer::Ipa), Some(Answer::NotSupportedUnlessPtp))),
    // §3 openEuler.
    call("PV_SCHED_FEATURES(openEuler)(PV_SCHED_FEATURES)", openeuler::PV_SCHED_FEATURES,
        id(openeuler::PV_SCHED_FEATURES), lock_feature(Variant::OpenEuler)),
    call("PV_SCHED_FEATURES(openEuler)(PV_SCHED_IPA_INIT)", openeuler::PV_SCHED_FEATURES,
        id(openeuler::PV_SCHED_IPA_INIT), lock_feature(Variant::OpenEuler)),
    call("PV_SCHED_FEATURES(openEuler)(PV_SCHED_IPA_RELEASE)", openeuler::PV_SCHED_FEATURES,
        id(openeuler::PV_SCHED_IPA_RELEASE), lock_feature(Variant::OpenEuler)),
    call("PV_SCHED_FEATURES(openEuler)(PV_SCHED_KICK_CPU)", openeuler::PV_SCHED_FEATURES,
        id(openeuler::PV_SCHED_KICK_CPU), lock_feature(Variant::OpenEuler)),
    call("PV_SCHED_FEATURES(openEuler)(an unknown function)", openeuler::PV_SCHED_FEATURES,
        id(UNKNOWN_STANDARD64), Rule::Always(NOT_SUPPORTED)),
    call("PV_SCHED_IPA_INIT(openEuler)(0)", openeuler::PV_SCHED_IPA_INIT, 0,
        absent_unless(Variant::OpenEuler)),
    call("PV_SCHED_IPA_RELEASE(openEuler)", openeuler::PV_SCHED_IPA_RELEASE, 0,
        absent_unless(Variant::OpenEuler)),
    call("PV_SCHED_KICK_CPU(openEuler)(vCPU 0)", openeuler::PV_SCHED_KICK_CPU, 0,
        absent_unless(Variant::OpenEuler)),
    call("PV_SCHED_KICK_CPU(openEuler)(no such vCPU)", openeuler::PV_SCHED_KICK_CPU,
        NO_SUCH_VCPU, Rule::Always(NOT_SUPPORTED)),
    // §3 Anolis.
    call("PV_LOCK_FEATURES(anolis)", anolis::PV_LOCK_FEATURES, 0, absent_unless(Variant::Anolis)),
    call("PV_LOCK_PREEMPTED(anolis)(0)", anolis::PV_LOCK_PREEMPTED, 0,
        absent_unless(Variant::Anolis)),
    call("PV_QSPINLOCK_FEATURES(anolis)", anolis::PV_QSPINLOCK_FEATURES, 0,
        absent_unless(Variant::Anolis)),
    call("PV_QSPINLOCK_KICK_CPU(anolis)(vCPU 0)", anolis::PV_QSPINLOCK_KICK_CPU, 0,
        absent_unless(Variant::Anolis)),
    call("PV_QSPINLOCK_KICK_CPU(anolis)(no such vCPU)", anolis::PV_QSPINLOCK_KICK_CPU,
        NO_SUCH_VCPU, Rule::Always(NOT_SUPPORTED)),
    // §4 PV time.
    call("PV_TIME_FEATURES(PV_TIME_FEATURES)", pvtime::PV_TIME_FEATURES,
        id(pvtime::PV_TIME_FEATURES), Rule::Steal { offered: SUCCESS, otherwise: NOT_SUPPORTED }),
    call("PV_TIME_FEATURES(PV_TIME_ST)", pvtime::PV_TIME_FEATURES, id(pvtime::PV_TIME_ST),
        Rule::Steal { offered: SUCCESS, otherwise: NOT_SUPPORTED }),
    call("PV_TIME_FEATURES(an unknown function)", pvtime::PV_TIME_FEATURES,
        id(UNKNOWN_STANDARD64), Rule::Always(NOT_SUPPORTED)),
    call("PV_TIME_ST", pvtime::PV_TIME_ST, 0,
        Rule::Steal { offered: Answer::Ipa, otherwise: NOT_SUPPORTED }),
    // The control call (pvlock-abi `control`): only a control VM may set
    // WFE trap policies; it sets every vCPU of VM 0 to trap, refuses an
    // undefined policy, and puts them back to auto.
    CallSpec { label: "PVLOCK_SET_WFX_POLICY(VM 0, all vCPUs, trap)",
        function: control::PVLOCK_SET_WFX_POLICY,
        args: [0, control::ALL_VCPUS, control::WFE_TRAP],
        rule: Rule::Control { yes: SUCCESS, no: NOT_SUPPORTED } },
    CallSpec { label: "PVLOCK_SET_WFX_POLICY(VM 0, all vCPUs, policy 7)",
        function: control::PVLOCK_SET_WFX_POLICY,
        args: [0, control::ALL_VCPUS, 7],
        rule: Rule::Control { yes: Answer::Code(control::INVALID), no: NOT_SUPPORTED } },
    CallSpec { label: "PVLOCK_SET_WFX_POLICY(VM 0, all vCPUs, auto)",
        function: control::PVLOCK_SET_WFX_POLICY,
        args: [0, control::ALL_VCPUS, control::WFE_AUTO],
        rule: Rule::Control { yes: SUCCESS, no: NOT_SUPPORTED } },
    // §7: the project's calls' retired numbers (inside pKVM's range)
    // answer like ids nobody implements, on every VM, control VMs included.
    call("the retired PV_SCHED_YIELD_TO 0xC6000022(vCPU 1)",
        directed_yield::RETIRED_PV_SCHED_YIELD_TO, 1, Rule::Always(NOT_SUPPORTED)),
    call("SMCCC_ARCH_FEATURES(the retired PV_SCHED_YIELD_TO 0xC6000022)",
        arch::SMCCC_ARCH_FEATURES, id(directed_yield::RETIRED_PV_SCHED_YIELD_TO),
        Rule::Always(NOT_SUPPORTED)),
    CallSpec { label: "the retired PVLOCK_SET_WFX_POLICY 0xC6000023(VM 0, all vCPUs, trap)",
        function: control::RETIRED_PVLOCK_SET_WFX_POLICY,
        args: [0, control::ALL_VCPUS, control::WFE_TRAP],
        rule: Rule::Always(NOT_SUPPORTED) },
    call("SMCCC_ARCH_FEATURES(the retired PVLOCK_SET_WFX_POLICY 0xC6000023)",
        arch::SMCCC_ARCH_FEATURES, id(control::RETIRED_PVLOCK_SET_WFX_POLICY),
        Rule::Always(NOT_SUPPORTED)),
    // §1: unknown function ids.
    call("an unknown vendor-hypervisor SMC32 function", UNKNOWN_VENDOR32, 0,
        Rule::Always(NOT_SUPPORTED)),
    call("an unknown vendor-hypervisor SMC64 function", UNKNOWN_VENDOR64, 0,
        Rule::Always(NOT_SUPPORTED)),
    call("an unknown standard-hypervisor SMC64 function", UNKNOWN_STANDARD64, 0,
        Rule::Always(NOT_SUPPORTED)),
];

/// The calls checked for a VM expected to offer `expect`, with their
/// answers.
pub fn calls(expect: &Expect) -> impl Iterator<Item = (&'static CallSpec, Answer)> + '_ {
    CALLS
        .iter()
        .filter_map(move |spec| spec.answer(expect).map(|a| (spec, a)))
}

/// A check's label: what a line says before `: ok` / `: FAILED`.
#[derive(Clone, Copy, Debug)]
pub enum Label {
    /// The probe found what the command line says.
    Probe,
    /// A call and its documented answer.
    Call(&'static CallSpec, Answer),
    /// X4..X17 survived every call (SMCCC 1.1).
    RegistersPreserved,
    /// vCPU N set up its records, and reads its own flag as 0.
    InitCpu(usize),
    /// The hypervisor's records are 64-byte aligned, in reserved memory and
    /// distinct.
    Records,
    /// Registering an unaligned IPA is refused and writes nothing.
    UnalignedIpa(Variant),
    /// Registering an IPA outside RAM is refused.
    IpaOutsideRam(Variant),
    /// After those refused calls the registered record is still written.
    StillRegistered(Variant),
    /// openEuler IPA_RELEASE: the record is no longer written.
    Release,
    /// openEuler IPA_INIT after a release: written again.
    Reregister,
    /// KICK_CPU wakes a vCPU waiting in WFI.
    Kick,
    /// A KICK_CPU that arrives while the target still runs makes its next
    /// WFI return at once (the kick is not lost).
    EarlyKick,
    /// No PV-lock: no vCPU is ever preempted.
    NeverPreempted,
    /// No PV time: every vCPU's stolen time is 0.
    NoStealTime,
    /// The preempted flag never claims a vCPU is out while it runs.
    PreemptedTruth,
    /// vCPU N's stolen time over the busy period.
    Steal(usize),
    /// The 32 virtio-mmio transports read as empty ones of this Version
    /// and ignore writes (`crate::virtiocheck::check_transports`).
    VirtioTransports(u32),
    /// The device tree describes them as QEMU `virt` does
    /// (`crate::virtiocheck::check_nodes`).
    VirtioNodes,
}

/// Names a register-setting variant's call: `PV_SCHED_IPA_INIT(openEuler)`.
fn register_call(variant: Variant) -> &'static str {
    match variant {
        Variant::Anolis => "PV_LOCK_PREEMPTED(anolis)",
        _ => "PV_SCHED_IPA_INIT(openEuler)",
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX} ")?;
        match *self {
            Label::Probe => write!(f, "probe"),
            Label::Call(spec, answer) => write!(f, "call {} -> {answer}", spec.label),
            Label::RegistersPreserved => write!(f, "x4..x17 preserved across every call"),
            Label::InitCpu(cpu) => write!(f, "vcpu {cpu}: init_cpu"),
            Label::Records => write!(
                f,
                "hypervisor records 64-byte aligned, in reserved memory, one per vCPU"
            ),
            Label::UnalignedIpa(v) => write!(
                f,
                "{} with an unaligned IPA -> error, nothing written",
                register_call(v)
            ),
            Label::IpaOutsideRam(v) => {
                write!(f, "{} with an IPA outside RAM -> error", register_call(v))
            }
            Label::StillRegistered(v) => write!(
                f,
                "{} record still written after the refused calls",
                register_call(v)
            ),
            Label::Release => write!(
                f,
                "PV_SCHED_IPA_RELEASE(openEuler) -> 0, record no longer written"
            ),
            Label::Reregister => write!(
                f,
                "PV_SCHED_IPA_INIT(openEuler) again -> 0, record written again"
            ),
            Label::Kick => write!(f, "kick wakes a vCPU waiting in WFI"),
            Label::EarlyKick => write!(f, "a kick before WFI makes it return at once"),
            Label::NeverPreempted => {
                write!(f, "no PV-lock: vcpu_is_preempted false for every vCPU")
            }
            Label::NoStealTime => write!(f, "no stolen time: steal_time 0 for every vCPU"),
            Label::PreemptedTruth => write!(f, "preempted flag truthful"),
            Label::Steal(cpu) => write!(f, "vcpu {cpu}: stolen time over the busy period"),
            Label::VirtioTransports(version) => write!(
                f,
                "virtio-mmio: {} transports at {:#x} read magic \"virt\", version {version}, \
                 device 0, vendor \"QEMU\", 0 elsewhere, ignore writes",
                virtio_mmio::TRANSPORTS,
                virtio_mmio::WINDOW_BASE
            ),
            Label::VirtioNodes => write!(
                f,
                "virtio-mmio: device tree has QEMU virt's {} virtio,mmio nodes",
                virtio_mmio::TRANSPORTS
            ),
        }
    }
}

/// Every label a passing run of `vcpus` vCPUs prints with `: ok`, each
/// once, in no particular order.
pub fn labels(expect: &Expect, vcpus: usize, mut f: impl FnMut(Label)) {
    f(Label::VirtioTransports(expect.virtio_version));
    f(Label::VirtioNodes);
    f(Label::Probe);
    for (spec, answer) in calls(expect) {
        f(Label::Call(spec, answer));
    }
    if expect.kvm == Some(true) {
        f(Label::RegistersPreserved);
    }
    for cpu in 0..vcpus {
        f(Label::InitCpu(cpu));
    }
    let hypervisor_lock = matches!(expect.lock, Some(v) if !v.guest_allocates());
    if hypervisor_lock || expect.steal_offered() {
        f(Label::Records);
    }
    if let Some(v) = expect.lock.filter(|_| expect.guest_allocates()) {
        f(Label::UnalignedIpa(v));
        f(Label::IpaOutsideRam(v));
        f(Label::StillRegistered(v));
        if vcpus >= 2 {
            f(Label::Kick);
            f(Label::EarlyKick);
        }
    }
    if expect.lock_is(Variant::OpenEuler) {
        f(Label::Release);
        f(Label::Reregister);
    }
    match expect.lock {
        None => f(Label::NeverPreempted),
        Some(_) if vcpus >= 2 => f(Label::PreemptedTruth),
        Some(_) => {}
    }
    if expect.steal_offered() {
        for cpu in 0..vcpus {
            f(Label::Steal(cpu));
        }
    } else {
        f(Label::NoStealTime);
    }
}

/// The preempted-flag truth test's counts:
/// `pv-check: preempted truth: N windows, M with B preempted, V violations`.
///
/// A window is the time between two consecutive polls of the observer
/// (vCPU A); it counts only if A was not away in it (no jump in the
/// counter, no growth of its own stolen time). Each of A's watched
/// siblings is a B, and the counts are per (window, B): "B preempted"
/// means A read B's flag as 1 around both of its reads of B's counter; a
/// violation is such a window in which B's counter moved anyway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TruthCounts {
    pub windows: u64,
    pub preempted: u64,
    pub violations: u64,
}

impl TruthCounts {
    const TEXT: &'static str = " preempted truth: ";

    /// Finds the line anywhere in `line` (a hypervisor may prefix it).
    pub fn parse(line: &str) -> Option<Self> {
        let at = line.find(PREFIX)? + PREFIX.len();
        let rest = line[at..].strip_prefix(Self::TEXT)?;
        let (windows, rest) = rest.split_once(" windows, ")?;
        let (preempted, rest) = rest.split_once(" with B preempted, ")?;
        let (violations, _) = rest.split_once(" violations")?;
        Some(Self {
            windows: windows.parse().ok()?,
            preempted: preempted.parse().ok()?,
            violations: violations.parse().ok()?,
        })
    }
}

impl fmt::Display for TruthCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}{} windows, {} with B preempted, {} violations",
            Self::TEXT,
            self.windows,
            self.preempted,
            self.violations
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::{String, ToString};
    use std::vec::Vec;

    fn expect(line: &str) -> Expect {
        Expect::from_bootargs(&BootArgs::new(line)).unwrap()
    }

    fn label_lines(e: &Expect, vcpus: usize) -> Vec<String> {
        let mut v = Vec::new();
        labels(e, vcpus, |l| v.push(l.to_string()));
        v
    }

    #[test]
    fn command_line_round_trips() {
        for line in [
            "expect-kvm=yes expect-lock=seed-v2 expect-steal=yes",
            "expect-kvm=no expect-lock=none expect-steal=none",
            "expect-lock=anolis expect-steal=no overcommit=yes",
            "expect-kvm=yes expect-lock=openeuler expect-steal=none",
            "expect-kvm=yes expect-lock=seed-v3 expect-steal=yes",
        ] {
            assert_eq!(expect(line).to_string(), line);
        }
        let e = expect("rounds=3 expect-lock=seed-v3 expect-steal=no");
        assert_eq!(e.lock, Some(Variant::SeedV3));
        assert_eq!((e.kvm, e.overcommitted()), (None, Some(false)));
        assert_eq!(
            expect("expect-lock=none expect-steal=none").overcommitted(),
            None
        );
        assert_eq!(
            Expect::from_bootargs(&BootArgs::new("expect-steal=yes")),
            Err(ExpectError::Missing("expect-lock"))
        );
        let err = Expect::from_bootargs(&BootArgs::new("expect-lock=v4 expect-steal=yes"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "expect-lock=v4: must be one of seed-v2, seed-v3, openeuler, anolis, none"
        );
        assert!(Expect::from_bootargs(&BootArgs::new("expect-lock=none")).is_err());
    }

    #[test]
    fn unused_function_is_unused() {
        for id in [UNKNOWN_VENDOR32, UNKNOWN_VENDOR64, UNKNOWN_STANDARD64] {
            assert_eq!(pvlock_abi::describe(id), None, "{id:?}");
        }
        const {
            assert!(UNUSED_FUNCTION > kvm::func::PKVM_LAST);
            assert!(!matches!(
                UNUSED_FUNCTION,
                kvm::func::DISCOVER_IMPL_VER
                    | kvm::func::DISCOVER_IMPL_CPUS
                    | kvm::func::FEATURES_2
            ));
        }
    }

    #[test]
    fn every_other_variants_ids_are_checked_absent() {
        for v in Variant::ALL {
            let e = Expect {
                kvm: Some(true),
                lock: Some(v),
                steal: Steal::Grows,
                overcommit: None,
                control: false,
                virtio_version: virtio_mmio::VERSION,
            };
            for other in Variant::ALL.into_iter().filter(|&o| o != v) {
                for &id in other.function_ids() {
                    let checked = calls(&e).any(|(s, a)| {
                        s.function == id
                            && matches!(a, Answer::Code(-1) | Answer::NotSupportedUnlessPtp)
                    });
                    assert!(checked, "{} VM: {id:?} of {}", v.name(), other.name());
                }
            }
        }
    }

    #[test]
    fn the_retired_numbers_are_checked_on_every_vm() {
        let retired = [
            directed_yield::RETIRED_PV_SCHED_YIELD_TO,
            control::RETIRED_PVLOCK_SET_WFX_POLICY,
        ];
        for line in [
            "expect-kvm=no expect-lock=none expect-steal=none",
            "expect-kvm=yes expect-lock=seed-v2 expect-steal=yes expect-control=yes",
            "expect-kvm=yes expect-lock=openeuler expect-steal=none",
        ] {
            let e = expect(line);
            for id in retired {
                let answers: Vec<Answer> = calls(&e)
                    .filter(|(s, _)| s.function == id || s.args[0] == u64::from(id.raw()))
                    .map(|(_, a)| a)
                    .collect();
                assert_eq!(answers, [NOT_SUPPORTED; 2], "{line}: {id:?}");
            }
        }
        assert_eq!(RETIRED_BITS, [34, 35]);
    }

    #[test]
    fn only_a_control_vm_may_set_wfe_policies() {
        let plain = expect("expect-kvm=yes expect-lock=seed-v2 expect-steal=yes");
        assert!(!plain.control);
        let ctl = expect("expect-kvm=yes expect-lock=seed-v2 expect-steal=yes expect-control=yes");
        assert!(ctl.control);
        assert_eq!(
            ctl.to_string(),
            "expect-kvm=yes expect-lock=seed-v2 expect-steal=yes expect-control=yes"
        );
        let answers = |e: &Expect| -> Vec<(&str, Answer)> {
            calls(e)
                .filter(|(s, _)| s.function == control::PVLOCK_SET_WFX_POLICY)
                .map(|(s, a)| (s.label, a))
                .collect()
        };
        assert_eq!(
            answers(&plain).iter().map(|(_, a)| *a).collect::<Vec<_>>(),
            [NOT_SUPPORTED; 3]
        );
        assert_eq!(
            answers(&ctl).iter().map(|(_, a)| *a).collect::<Vec<_>>(),
            [SUCCESS, Answer::Code(control::INVALID), SUCCESS]
        );
        // The policy is put back last.
        assert!(answers(&ctl)[2].0.ends_with("auto)"));
    }

    #[test]
    fn answers_are_judged_exactly() {
        let none = KvmFeatures::EMPTY;
        let nope = smccc::ret_to_x0(-1);
        assert!(NOT_SUPPORTED.accepts([nope, 7, 7, 7], none));
        assert!(
            !NOT_SUPPORTED.accepts([0xFFFF_FFFF, 0, 0, 0], none),
            "sign-extended"
        );
        assert!(SUCCESS.accepts([0, 1, 2, 3], none));
        assert!(Answer::AtLeast(0x10001).accepts([0x10002, 0, 0, 0], none));
        assert!(!Answer::AtLeast(0x10001).accepts([0x10000, 0, 0, 0], none));
        assert!(!Answer::AtLeast(0x10001).accepts([nope, 0, 0, 0], none));
        assert!(Answer::Uid.accepts(kvm::UID_REGS, none));
        let mut uid = kvm::UID_REGS;
        uid[3] |= 1 << 32;
        assert!(!Answer::Uid.accepts(uid, none));
        // Bits 112 and 114 (the directed yield and the kick that lends)
        // are bits 16 and 18 of W3.
        const Y: u64 = (1 << 16) | (1 << 18);
        let v3 = Answer::Features(Some(Variant::SeedV3));
        assert!(v3.accepts([0b11, 0, 0, Y], none));
        assert!(!v3.accepts([0b01, 0, 0, Y], none), "seed-v3 needs bit 1");
        assert!(
            !v3.accepts([0b11, 0, 0, 0], none),
            "a variant needs bit 112"
        );
        assert!(
            !v3.accepts([0b11, 0, 0, 1 << 16], none),
            "a variant needs bit 114"
        );
        let v2 = Answer::Features(Some(Variant::SeedV2));
        assert!(v2.accepts([0b01, 0b11, 0, Y], none));
        assert!(
            !v2.accepts([0b01, 0b01, 0, Y], none),
            "seed-v2 needs bits 32 and 33"
        );
        assert!(!v2.accepts([0b01, 0b111, 0, Y], none), "the retired bit 34");
        let oe = Answer::Features(Some(Variant::OpenEuler));
        assert!(oe.accepts([0b01, 0, 0, Y], none));
        assert!(oe.accepts([0b11, 0, 0, Y], none), "bit 1 may be KVM_PTP");
        assert!(!oe.accepts([0b01, 0b10, 0, Y], none));
        assert!(
            !oe.accepts([0b01, 0b1000, 0, Y], none),
            "the retired bit 35"
        );
        assert!(
            !Answer::Features(None).accepts([0b00, 0, 0, 0], none),
            "bit 0"
        );
        assert!(Answer::Features(None).accepts([0b01, 0, 0, 0], none));
        assert!(
            !Answer::Features(None).accepts([0b01, 0, 0, Y], none),
            "no variant, no directed yield"
        );
        assert!(!Answer::Features(None).accepts([0b01, 0, 0, 1 << 32], none));
        assert_eq!(
            v2.to_string(),
            "a bitmap with bit 0 and bits 32, 33, 112, 114 set, bits 34, 35 clear"
        );
        assert_eq!(
            Answer::Features(None).to_string(),
            "a bitmap with bit 0 set, bits 32, 33, 34, 35, 112, 114 clear"
        );
        assert_eq!(
            v3.to_string(),
            "a bitmap with bit 0, bit 1 and bits 112, 114 set, bits 34, 35 clear"
        );
        assert_eq!(
            oe.to_string(),
            "a bitmap with bit 0 and bits 112, 114 set, bits 32, 33, 34, 35 clear"
        );
        assert!(Answer::Ipa.accepts([0x4800_0040, 0, 0, 0], none));
        assert!(!Answer::Ipa.accepts([0x4800_0020, 0, 0, 0], none));
        assert!(!Answer::Ipa.accepts([nope, 0, 0, 0], none));
        assert!(!Answer::Ipa.accepts([0, 0, 0, 0], none));
        assert!(Answer::AllZero.accepts([0; 4], none));
        assert!(!Answer::AllZero.accepts([0, 0, 0, 5], none));
        let ptp = KvmFeatures::new().with(kvm::func::PTP);
        assert!(Answer::NotSupportedUnlessPtp.accepts([nope, 0, 0, 0], none));
        assert!(!Answer::NotSupportedUnlessPtp.accepts([0x12, 3, 4, 5], none));
        assert!(Answer::NotSupportedUnlessPtp.accepts([0x12, 3, 4, 5], ptp));
        assert!(Answer::OneOf(WORKAROUND_2_ANSWERS).accepts([smccc::ret_to_x0(-2), 0, 0, 0], none));
        assert!(!Answer::OneOf(WORKAROUND_1_ANSWERS).accepts([2, 0, 0, 0], none));
    }

    #[test]
    fn bare_qemu_checks() {
        let e = expect("expect-kvm=no expect-lock=none expect-steal=none");
        let lines = label_lines(&e, 4);
        assert!(lines.contains(&"pv-check: call SMCCC_VERSION -> -1 (NOT_SUPPORTED)".into()));
        assert!(lines.contains(&"pv-check: call KVM_CALL_UID -> -1 (NOT_SUPPORTED)".into()));
        assert!(lines.contains(&"pv-check: call PSCI_VERSION -> 1.0 or later".into()));
        assert!(
            lines.contains(&"pv-check: no PV-lock: vcpu_is_preempted false for every vCPU".into())
        );
        assert!(lines.contains(&"pv-check: no stolen time: steal_time 0 for every vCPU".into()));
        assert!(lines.contains(&"pv-check: vcpu 3: init_cpu".into()));
        assert!(!lines.iter().any(|l| l.contains("x4..x17")));
        assert!(!lines.iter().any(|l| l.contains("preempted flag truthful")));
        assert!(
            !lines
                .iter()
                .any(|l| l.contains("Ipa") || l.contains("IPA "))
        );
        // Without expect-kvm the KVM-identity calls are not judged.
        let any = expect("expect-lock=none expect-steal=none");
        assert!(
            !label_lines(&any, 1)
                .iter()
                .any(|l| l.contains("KVM_CALL_UID"))
        );
        let unique: std::collections::BTreeSet<&String> = lines.iter().collect();
        assert_eq!(unique.len(), lines.len(), "labels are unique");
    }

    #[test]
    fn variant_checks() {
        let e = expect("expect-kvm=yes expect-lock=openeuler expect-steal=yes");
        let lines = label_lines(&e, 4);
        for want in [
            "pv-check: call SMCCC_ARCH_FEATURES(PV_SCHED_FEATURES(openEuler)) -> 0",
            "pv-check: call SMCCC_ARCH_FEATURES(PV_LOCK_FEATURES(seed-v2)) -> -1 (NOT_SUPPORTED)",
            "pv-check: call PV_LOCK(seed-v3)(PREEMPTED) -> -1 (NOT_SUPPORTED) unless KVM_PTP is advertised",
            "pv-check: call PV_TIME_ST -> a 64-byte aligned IPA",
            "pv-check: call KVM_CALL_UID -> KVM's UID b66fb428 e911c52e 564bcaa9 743a004d",
            "pv-check: PV_SCHED_IPA_INIT(openEuler) with an unaligned IPA -> error, nothing written",
            "pv-check: PV_SCHED_IPA_RELEASE(openEuler) -> 0, record no longer written",
            "pv-check: kick wakes a vCPU waiting in WFI",
            "pv-check: preempted flag truthful",
            "pv-check: vcpu 3: stolen time over the busy period",
            "pv-check: x4..x17 preserved across every call",
            "pv-check: hypervisor records 64-byte aligned, in reserved memory, one per vCPU",
        ] {
            assert!(lines.contains(&want.to_string()), "{want}\n{lines:#?}");
        }
        assert!(
            !lines
                .iter()
                .any(|l| l.contains("PV_SCHED_IPA_INIT(openEuler)(0)"))
        );
        let anolis = label_lines(
            &expect("expect-kvm=yes expect-lock=anolis expect-steal=none"),
            1,
        );
        assert!(anolis.contains(
            &"pv-check: PV_LOCK_PREEMPTED(anolis) with an IPA outside RAM -> error".into()
        ));
        assert!(
            !anolis
                .iter()
                .any(|l| l.contains("kick") || l.contains("record no longer written"))
        );
        assert!(!anolis.iter().any(|l| l.contains("hypervisor records")));
        let v2 = label_lines(
            &expect("expect-kvm=yes expect-lock=seed-v2 expect-steal=no"),
            2,
        );
        assert!(v2.contains(
            &"pv-check: call PV_LOCK_PREEMPTED(seed-v2) -> a 64-byte aligned IPA".into()
        ));
        assert!(v2.contains(
            &"pv-check: call PV_SCHED_IPA_INIT(openEuler)(0) -> -1 (NOT_SUPPORTED)".into()
        ));
        assert!(!v2.iter().any(|l| l.contains("WFI")));
    }

    #[test]
    fn the_virtio_window_is_checked_everywhere_with_the_version_asked() {
        let el2 = expect("expect-kvm=yes expect-lock=seed-v2 expect-steal=yes");
        assert_eq!(el2.virtio_version, 2);
        let bare = expect("expect-kvm=no expect-lock=none expect-steal=none expect-virtio=1");
        assert_eq!(bare.virtio_version, 1);
        assert_eq!(
            bare.to_string(),
            "expect-kvm=no expect-lock=none expect-steal=none expect-virtio=1"
        );
        assert!(
            Expect::from_bootargs(&BootArgs::new(
                "expect-lock=none expect-steal=none expect-virtio=3"
            ))
            .is_err()
        );
        for (e, version) in [(el2, 2), (bare, 1)] {
            let lines = label_lines(&e, 2);
            assert!(lines.contains(&format!(
                "pv-check: virtio-mmio: 32 transports at 0xa000000 read magic \"virt\", version {version}, device 0, vendor \"QEMU\", 0 elsewhere, ignore writes"
            )));
            assert!(lines.contains(
                &"pv-check: virtio-mmio: device tree has QEMU virt's 32 virtio,mmio nodes".into()
            ));
        }
    }

    #[test]
    fn truth_line_round_trips() {
        let c = TruthCounts {
            windows: 1234,
            preempted: 56,
            violations: 0,
        };
        let line = c.to_string();
        assert_eq!(
            line,
            "pv-check: preempted truth: 1234 windows, 56 with B preempted, 0 violations"
        );
        assert_eq!(TruthCounts::parse(&format!("[vm0] {line}\r")), Some(c));
        assert_eq!(
            TruthCounts::parse("pv-check: preempted truth: x windows"),
            None
        );
    }
}
