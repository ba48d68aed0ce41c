//! The paravirtual-service driver: finds out what the hypervisor offers
//! (SMCCC version, KVM identity, the PV-lock variant, stolen time) and sets
//! up each CPU's shared records, for any Rust guest kernel.
//!
//! Every guest-visible number comes from `pvlock_abi`; the project's
//! `docs/abi.md` explains them. Linux's equivalents are
//! `drivers/firmware/smccc/kvm_guest.c` (KVM detection),
//! `arch/arm64/kernel/paravirt.c` (stolen time) and the out-of-tree PV-lock
//! series (docs/abi.md §3).
//!
//! The hardware is reached through two small traits, so that the probing
//! and the record handling run unchanged in host tests with a fake:
//!
//! - [`Conduit`]: one SMCCC fast call (HVC or SMC). `HvcConduit` and
//!   `SmcConduit` are the real ones (X0..X3 only; see their docs).
//! - [`SharedMemory`]: turns an IPA the hypervisor handed out into an
//!   address the guest can read (mapping it as normal write-back memory
//!   if needed), and a guest address into its IPA.
//!
//! ```ignore
//! let pv = PvDriver::new(platform);          // probes once
//! // on every CPU, for itself:
//! let init = pv.init_cpu(cpu);
//! // from anywhere:
//! if pv.vcpu_is_preempted(other) { /* don't spin on it */ }
//! let stolen_ns = pv.steal_time(cpu);
//! ```
//!
//! | step | calls (docs/abi.md) |
//! |---|---|
//! | SMCCC version | PSCI_FEATURES(SMCCC_VERSION), then SMCCC_VERSION (§1, §5); under 1.1 nothing else is asked |
//! | KVM | vendor Call UID, all four words; KVM_FEATURES (§2) |
//! | PV-lock, best first | seed-v2, seed-v3, openEuler, Anolis (§3; [`probe`]) |
//! | stolen time | SMCCC_ARCH_FEATURES(PV_TIME_FEATURES), PV_TIME_FEATURES(PV_TIME_ST) (§4) |
//! | directed yield | KVM_FEATURES bit 112 and SMCCC_ARCH_FEATURES(PV_SCHED_YIELD_TO) (`pvlock_abi::directed_yield`) |
//! | kick that lends | KVM_FEATURES bit 114 and SMCCC_ARCH_FEATURES(PV_SCHED_KICK_LEND) (the same module) |
//! | per CPU | the variant's PREEMPTED / IPA_INIT, PV_TIME_ST ([`PvDriver::init_cpu`]) |
//!
//! Besides reading the records, the driver sends the two scheduling hints
//! a lock waiter needs: [`PvDriver::kick`] (openEuler / Anolis KICK_CPU)
//! and [`PvDriver::yield_to`] (PV_SCHED_YIELD_TO, the project's directed
//! yield), and keeps the calling vCPU's `lock_count` in its PV-lock record
//! ([`PvDriver::lock_acquired`] / [`PvDriver::lock_released`]). The
//! PV-aware lock built on them is [`crate::lock`].

mod driver;
#[cfg(test)]
mod tests;

pub use driver::{CpuInit, InitError, Kick, PvDriver, YieldResult};

use core::fmt;
use core::ptr::NonNull;

use pvlock_abi::kvm::{self, KvmFeatures};
use pvlock_abi::pvlock::{Variant, anolis, openeuler, seed_v2, seed_v3};
use pvlock_abi::smccc::{self, FunctionId, Version};
use pvlock_abi::{arch, directed_yield, psci, pvtime};

/// Most CPUs the driver keeps records for (the runtime's
/// `devicetree::MAX_CPUS`, and the VM binding's largest `vcpus`).
pub const MAX_CPUS: usize = 64;

/// Makes SMCCC fast calls to the hypervisor.
pub trait Conduit {
    /// Calls `function` with x1..x3 = `args` and returns x0..x3 as the
    /// callee left them (no call the driver makes takes more arguments;
    /// x4..x17 are the callee's to change under SMCCC 1.0). SMC32 calls
    /// pass the low halves of the arguments; the results come back whole,
    /// since some SMC32 calls return 64-bit values (the seed-v3 PREEMPTED
    /// IPA).
    fn call(&self, function: FunctionId, args: [u64; 3]) -> [u64; 4];
}

impl<C: Conduit + ?Sized> Conduit for &C {
    fn call(&self, function: FunctionId, args: [u64; 3]) -> [u64; 4] {
        (**self).call(function, args)
    }
}

// The real conduits, `HvcConduit` and `SmcConduit`: one SMCCC fast call
// each, documented on the types (the part they share is in the macro).
macro_rules! fast_call_conduit {
    ($(#[$doc:meta])* $name:ident, $instruction:literal) => {
        $(#[$doc])*
        ///
        /// A call moves only what the driver's calls use: W0 the function
        /// id, X1..X3 the arguments, X0..X3 the results. X4..X17 are left
        /// to the callee, which SMCCC 1.0 allows to change them (1.1 and
        /// later preserve them): right under every version, and no
        /// seventeen-register set-up and read-back on the lock waiters'
        /// directed-yield path (DEN0028, "Argument passing" and "Result
        /// passing"). Always the 64-bit register form: it reads back all of
        /// X0..X3, which an SMC32 call that returns an address needs, and an
        /// SMC32 callee only looks at W1..W3 anyway.
        #[cfg(target_arch = "aarch64")]
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        #[cfg(target_arch = "aarch64")]
        impl $name {
            pub const fn new() -> Self {
                Self
            }
        }

        #[cfg(target_arch = "aarch64")]
        impl Conduit for $name {
            #[inline]
            fn call(&self, function: FunctionId, [a1, a2, a3]: [u64; 3]) -> [u64; 4] {
                let (r0, r1, r2, r3): (u64, u64, u64, u64);
                // SAFETY: an SMCCC fast call through the conduit the
                // platform names. The callee writes X0..X3 (outputs here)
                // and may change X4..X17 (declared clobbered); it preserves
                // X18..X30 and SP (SMCCC 1.0 onwards). It may read and
                // write guest memory it was handed (the PV records), so
                // memory is not declared untouched.
                unsafe {
                    core::arch::asm!(
                        $instruction,
                        inout("x0") u64::from(function.raw()) => r0,
                        inout("x1") a1 => r1,
                        inout("x2") a2 => r2,
                        inout("x3") a3 => r3,
                        out("x4") _, out("x5") _, out("x6") _, out("x7") _,
                        out("x8") _, out("x9") _, out("x10") _, out("x11") _,
                        out("x12") _, out("x13") _, out("x14") _, out("x15") _,
                        out("x16") _, out("x17") _,
                        options(nostack),
                    );
                }
                [r0, r1, r2, r3]
            }
        }
    };
}

fast_call_conduit!(
    /// SMCCC fast calls by `HVC #0`, the conduit of every hypervisor this
    /// driver knows.
    HvcConduit,
    "hvc #0"
);
fast_call_conduit!(
    /// SMCCC fast calls by `SMC #0`, for a guest whose device tree says
    /// `method = "smc"`.
    SmcConduit,
    "smc #0"
);

/// The guest's view of memory it shares with the hypervisor.
pub trait SharedMemory {
    /// Makes the `size` bytes at `ipa`, memory the hypervisor owns and
    /// writes, readable and writable as normal write-back cacheable memory
    /// (mapping them if they are not yet) and returns their address. `ipa`
    /// is 64-byte aligned. The guest only writes the PV-lock record's
    /// `lock_count` extension (`pvlock_abi::pvlock`).
    fn map_shared(&self, ipa: u64, size: usize) -> Result<NonNull<u8>, &'static str>;

    /// The IPA of guest memory at `address` (`virt_to_phys`).
    fn ipa_of(&self, address: *const u8) -> u64;
}

impl<M: SharedMemory + ?Sized> SharedMemory for &M {
    fn map_shared(&self, ipa: u64, size: usize) -> Result<NonNull<u8>, &'static str> {
        (**self).map_shared(ipa, size)
    }

    fn ipa_of(&self, address: *const u8) -> u64 {
        (**self).ipa_of(address)
    }
}

/// The SMCCC return code in X0 of a call to `function`: all of X0 for an
/// SMC64 call; for an SMC32 call W0 sign-extended, since a 32-bit callee
/// need only set W0 (docs/abi.md §1 asks hypervisors to sign-extend into X0; a
/// guest accepts either).
pub fn return_code(function: FunctionId, x0: u64) -> i64 {
    if function.is_smc64() {
        smccc::x0_to_ret(x0)
    } else {
        i64::from(x0 as u32 as i32)
    }
}

/// What the hypervisor offers this guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PvInfo {
    /// SMCCC_VERSION's answer; 1.0 when it is not there (docs/abi.md §1).
    pub smccc_version: Version,
    /// The vendor hypervisor Call UID is KVM's (all four words).
    pub kvm: bool,
    /// KVM_FEATURES; empty unless `kvm`.
    pub features: KvmFeatures,
    /// The PV-lock variant in use, the best one offered.
    pub lock: Option<Variant>,
    /// PV time's stolen-time records are offered.
    pub steal_time: bool,
    /// The lock variant's KICK_CPU is offered (openEuler, Anolis).
    pub kick: bool,
    /// The project's directed-yield call PV_SCHED_YIELD_TO is offered
    /// (`pvlock_abi::directed_yield`).
    pub directed_yield: bool,
    /// The project's kick that lends, PV_SCHED_KICK_LEND, is offered
    /// (`pvlock_abi::directed_yield`); [`PvDriver::kick`] then uses it.
    pub kick_lend: bool,
}

impl PvInfo {
    /// Nothing offered, SMCCC 1.0: what a guest without a hypervisor (or
    /// under one that predates SMCCC 1.1) sees.
    pub const NOTHING: Self = Self {
        smccc_version: smccc::VERSION_1_0,
        kvm: false,
        features: KvmFeatures::EMPTY,
        lock: None,
        steal_time: false,
        kick: false,
        directed_yield: false,
        kick_lend: false,
    };

    /// Whether any paravirtual service is offered.
    pub const fn offers_anything(&self) -> bool {
        self.lock.is_some() || self.steal_time
    }
}

impl fmt::Display for PvInfo {
    /// `SMCCC 1.1, KVM (features 0x00000000 0x00000000 0x00000000
    /// 0x00000003), PV-lock seed-v3, stolen time, no kick, no directed
    /// yield` — the features printed w3 first, as Linux does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.smccc_version;
        write!(f, "SMCCC {}.{}, ", v.major(), v.minor())?;
        if self.kvm {
            let w = self.features.words();
            write!(
                f,
                "KVM (features {:#010x} {:#010x} {:#010x} {:#010x})",
                w[3], w[2], w[1], w[0]
            )?;
        } else {
            write!(f, "not KVM")?;
        }
        match self.lock {
            Some(variant) => write!(f, ", PV-lock {}", variant.name())?,
            None => write!(f, ", no PV-lock")?,
        }
        write!(
            f,
            ", {}, {}, {}",
            if self.steal_time {
                "stolen time"
            } else {
                "no stolen time"
            },
            if self.kick { "kick" } else { "no kick" },
            if self.directed_yield {
                "directed yield"
            } else {
                "no directed yield"
            }
        )
    }
}

/// Finds out what the hypervisor behind `conduit` offers (the boot CPU
/// asks, once).
///
/// 1. The SMCCC version: PSCI 1.0+ must list SMCCC_VERSION in
///    PSCI_FEATURES, else the firmware speaks SMCCC 1.0 (DEN0028, as Linux
///    `psci_init_smccc`). Below 1.1 nothing else is asked: X4..X17 are not
///    even preserved.
/// 2. KVM: the vendor hypervisor Call UID must match all four words of
///    [`kvm::UID`]; then KVM_FEATURES.
/// 3. The PV-lock variant, best first:
///    - seed-v2: SMCCC_ARCH_FEATURES(PV_LOCK_FEATURES) = 0 and
///      PV_LOCK_FEATURES(PV_LOCK_PREEMPTED) = 0;
///    - seed-v3: KVM_FEATURES bit 1 and PV_LOCK(x1 = FEATURES) answering 0
///      in all of W0..W3 — bit 1 is also mainline's KVM_PTP, whose answer
///      to w1 = 0 is a non-zero time stamp;
///    - openEuler: SMCCC_ARCH_FEATURES(PV_SCHED_FEATURES) = 0 and
///      PV_SCHED_FEATURES(IPA_INIT) = 0;
///    - Anolis: SMCCC_ARCH_FEATURES(PV_LOCK_FEATURES) = 0.
///
///    The variants whose ids lie in the vendor-specific range (seed-v2,
///    seed-v3, Anolis) are only asked for when the vendor is KVM: what a
///    vendor function id means depends on the vendor (DEN0028).
/// 4. Stolen time: SMCCC_ARCH_FEATURES(PV_TIME_FEATURES) = 0 and
///    PV_TIME_FEATURES(PV_TIME_ST) = 0.
/// 5. Kick: openEuler PV_SCHED_FEATURES(KICK_CPU) = 0; Anolis
///    SMCCC_ARCH_FEATURES(PV_QSPINLOCK_FEATURES) = 0.
/// 6. Directed yield: the vendor is KVM, KVM_FEATURES has bit 112 and
///    SMCCC_ARCH_FEATURES(PV_SCHED_YIELD_TO) = 0. Both are asked because
///    bit 112 is this project's choice, not an upstream assignment
///    (`pvlock_abi::directed_yield`): a hypervisor that sets it for
///    another reason does not also answer 0 for this project's function
///    id.
/// 7. The kick that lends: as 6, with bit 114 and PV_SCHED_KICK_LEND.
pub fn probe(conduit: &impl Conduit) -> PvInfo {
    let smccc_version = smccc_version(conduit);
    if smccc_version < arch::MIN_VERSION_FOR_VENDOR_PROBE {
        return PvInfo {
            smccc_version,
            ..PvInfo::NOTHING
        };
    }
    let uid = conduit.call(kvm::CALL_UID, [0; 3]);
    let kvm = uid.map(|x| x as u32) == kvm::UID;
    let features = if kvm {
        KvmFeatures::from_words(conduit.call(kvm::FEATURES, [0; 3]).map(|x| x as u32))
    } else {
        KvmFeatures::EMPTY
    };
    let arch_features = |function: FunctionId| {
        let x0 = conduit.call(arch::SMCCC_ARCH_FEATURES, [function.raw().into(), 0, 0])[0];
        return_code(arch::SMCCC_ARCH_FEATURES, x0) == smccc::SUCCESS
    };
    let answers_zero = |function: FunctionId, arg: FunctionId| {
        let x0 = conduit.call(function, [arg.raw().into(), 0, 0])[0];
        return_code(function, x0) == smccc::SUCCESS
    };

    let seed_v2 = || {
        kvm && arch_features(seed_v2::PV_LOCK_FEATURES)
            && answers_zero(seed_v2::PV_LOCK_FEATURES, seed_v2::PV_LOCK_PREEMPTED)
    };
    let seed_v3 = || {
        kvm && features.contains(seed_v3::KVM_FEATURES_BIT)
            && conduit
                .call(seed_v3::PV_LOCK, [seed_v3::ARG_FEATURES, 0, 0])
                .iter()
                .all(|&x| x as u32 == 0)
    };
    let openeuler = || {
        arch_features(openeuler::PV_SCHED_FEATURES)
            && answers_zero(openeuler::PV_SCHED_FEATURES, openeuler::PV_SCHED_IPA_INIT)
    };
    let anolis = || kvm && arch_features(anolis::PV_LOCK_FEATURES);
    let lock = if seed_v2() {
        Some(Variant::SeedV2)
    } else if seed_v3() {
        Some(Variant::SeedV3)
    } else if openeuler() {
        Some(Variant::OpenEuler)
    } else if anolis() {
        Some(Variant::Anolis)
    } else {
        None
    };
    let steal_time = arch_features(pvtime::PV_TIME_FEATURES)
        && answers_zero(pvtime::PV_TIME_FEATURES, pvtime::PV_TIME_ST);
    let kick = match lock {
        Some(Variant::OpenEuler) => {
            answers_zero(openeuler::PV_SCHED_FEATURES, openeuler::PV_SCHED_KICK_CPU)
        }
        Some(Variant::Anolis) => arch_features(anolis::PV_QSPINLOCK_FEATURES),
        _ => false,
    };
    let directed_yield = kvm
        && features.contains(directed_yield::KVM_FEATURES_BIT)
        && arch_features(directed_yield::PV_SCHED_YIELD_TO);
    let kick_lend = kvm
        && features.contains(directed_yield::KICK_LEND_FEATURES_BIT)
        && arch_features(directed_yield::PV_SCHED_KICK_LEND);
    PvInfo {
        smccc_version,
        kvm,
        features,
        lock,
        steal_time,
        kick,
        directed_yield,
        kick_lend,
    }
}

/// The SMCCC version: SMCCC_VERSION if PSCI (1.0 or later) lists it in
/// PSCI_FEATURES, else 1.0 (DEN0028 "SMCCC_VERSION"; Linux
/// `psci_init_smccc`).
pub fn smccc_version(conduit: &impl Conduit) -> Version {
    let call = |function: FunctionId, arg: u64| {
        return_code(function, conduit.call(function, [arg, 0, 0])[0])
    };
    let psci = call(psci::PSCI_VERSION, 0);
    if psci < i64::from(psci::VERSION_1_0.raw()) {
        return smccc::VERSION_1_0;
    }
    if call(psci::PSCI_FEATURES, arch::SMCCC_VERSION.raw().into()) < 0 {
        return smccc::VERSION_1_0;
    }
    match u32::try_from(call(arch::SMCCC_VERSION, 0)) {
        Ok(raw) => Version::from_raw(raw),
        Err(_) => smccc::VERSION_1_0,
    }
}
