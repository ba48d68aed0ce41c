//! Guest SMCCC calls: the dispatcher for a guest's `hvc #0` (or a trapped
//! `smc`) and the services behind it.
//!
//! # Flow
//!
//! The runner (`el2::run`) decodes the trap, then calls [`Dispatcher::dispatch`]
//! with the caller, its saved registers and a [`VmView`] of its VM. The
//! dispatcher
//! 1. decodes the function id from W0 only (bits 63:32 of X0 and the SMCCC
//!    1.3 SVE hint are ignored; DEN0028 "Function Identifiers"), counts it
//!    ([`CallCounters`]), and answers NOT_SUPPORTED to yielding calls (bit
//!    31 clear) and to ids with must-be-zero bits set;
//! 2. routes the id to the one registered [`Service`] that owns it (a
//!    binary search in a table sorted by id, i.e. by calling convention,
//!    then owner, then function number); unowned ids answer NOT_SUPPORTED
//!    (-1 sign-extended; DEN0028 "Return codes");
//! 3. writes the service's [`Reply`] into X0..X3 — results it does not use
//!    are zeroed, as KVM does — and leaves X4..X17 and every other register
//!    untouched (DEN0028 "Register use in AArch64 SMC and HVC calls",
//!    SMCCC ≥ 1.1);
//! 4. returns the reply's [`Next`], which the runner carries out (start a
//!    vCPU, stop this one, block it, stop the VM, kick a sibling, yield to
//!    a sibling, change a VM's WFE trap policy).
//!
//! For a trapped SMC the caller also advances ELR by 4 (the trap leaves it
//! at the SMC, unlike HVC; docs/abi.md §1). Nothing is ever forwarded to EL3.
//!
//! # Services
//!
//! A service ([`Service`]) owns a list of function ids, answers calls to
//! them, says what SMCCC_ARCH_FEATURES answers for each
//! ([`Service::arch_features`]) and which KVM_FEATURES bits it contributes
//! ([`Service::kvm_features`]). Each VM has its own [`Dispatcher`] built
//! from its description, so a service (a PV-lock ABI variant, PV time, KVM
//! PTP) is switched on per VM by registering it; two services that claim
//! the same id (KVM_PTP and the seed-v3 PV-lock call share `0x86000001`,
//! docs/abi.md §3) cannot both be registered ([`RegisterError`]). The table
//! answers the discovery calls for everyone: SMCCC_ARCH_FEATURES asks the
//! owner of the queried id, KVM_FEATURES ORs every service's bits, and
//! PSCI_FEATURES(SMCCC_VERSION) asks whether anyone implements
//! SMCCC_VERSION.
//!
//! To add a service: implement [`Service`] (ids from `pvlock_abi`, never
//! restated), keep any per-VM state behind interior mutability (calls
//! from the VM's vCPUs may run concurrently on several pCPUs, so services
//! are `Sync` and take `&self`), read arguments with [`Call::arg`] (which
//! applies the SMC32 truncation), return a [`Reply`], and add a [`Next`]
//! variant if the runner has to act (a kick, a directed yield).
//!
//! [`Dispatcher::standard`] registers the two services every VM has:
//! [`ArchService`] (SMCCC_VERSION, SMCCC_ARCH_FEATURES, the Spectre
//! workarounds) and [`PsciService`] (PSCI 1.1 as KVM offers it, docs/abi.md §5).
//!
//! [`dispatcher_for`] ([`Dispatcher::for_vm`]) builds a VM's table from its
//! [`VmServices`] (its [`PvConfig`] and whether it is a control VM; a bare
//! `&PvConfig` still works and means "not a control VM"): the standard
//! services, [`KvmService`] (vendor Call UID, KVM_FEATURES, and KVM_PTP if
//! enabled; docs/abi.md §2) for every VM, then the enabled paravirtual services
//! — [`PvLockService`] for the VM's PV-lock variant (docs/abi.md §3) together
//! with [`PvYieldService`] (the project's directed-yield call,
//! `pvlock_abi::directed_yield`), and [`PvTimeService`] (DEN0057A;
//! docs/abi.md §4) — and, for a control VM only, [`ControlService`]
//! (PVLOCK_SET_WFX_POLICY, `pvlock_abi::control`). The PV services share
//! the VM's [`PvRegistry`] of record addresses with the runner (`el2::run`), which
//! keeps the records up to date ([`crate::services::pv`]).
//!
//! | VM enables | ids answered | KVM_FEATURES bits | SMCCC_ARCH_FEATURES = 0 for |
//! |---|---|---|---|
//! | (always) | `0x8600FF01`, `0x86000000` | 0 | — |
//! | `kvm-ptp` | `0x86000001` (PTP) | 1 | — |
//! | `pv-lock` seed-v2 | `0xC6000020`, `0xC6000021` | 32, 33 | both |
//! | `pv-lock` seed-v3 | `0x86000001` (PV_LOCK) | 1 | — |
//! | `pv-lock` openEuler | `0xC5000090..=0xC5000093` | — | `0xC5000090` |
//! | `pv-lock` Anolis | `0xC60000B0..=0xC60000B2`, `0xC50000B3` | — | `0xC60000B0`, `0xC60000B2` |
//! | `pv-lock` (any variant) | `0xC6000070` (PV_SCHED_YIELD_TO) | 112 | `0xC6000070` |
//! | `pv-time` | `0xC5000020`, `0xC5000021` | — | `0xC5000020` |
//! | `control = "on"` | `0xC6000071` (PVLOCK_SET_WFX_POLICY) | 113 | `0xC6000071` |
//!
//! Everything else a VM did not enable answers NOT_SUPPORTED — on a VM
//! that is not a control VM, PVLOCK_SET_WFX_POLICY looks exactly like an
//! id nobody implements. So do the two calls' retired numbers,
//! `0xC6000022` and `0xC6000023` (bits 34 and 35, inside pKVM's reserved
//! range), on every VM.

pub mod arch;
pub mod constants;
pub mod control;
pub mod counters;
pub mod kvm;
pub mod psci;
#[cfg(test)]
mod pv_tests;
pub mod pvlock;
pub mod pvtime;
pub mod pvyield;
#[cfg(test)]
mod tests;

pub use arch::{ArchService, CpuVulnerabilities, Exposure};
pub use constants::ConstantReplies;
pub use control::ControlService;
pub use counters::{CallCounters, VcpuCallCounts};
pub use kvm::KvmService;
pub use psci::PsciService;
pub use pvlock::PvLockService;
pub use pvtime::PvTimeService;
pub use pvyield::PvYieldService;

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use platform::{Mpidr, VmConfig};
use pvlock_abi::catalog;
use pvlock_abi::directed_yield::PV_SCHED_YIELD_TO;
use pvlock_abi::kvm::KvmFeatures;
use pvlock_abi::smccc::{self, FunctionId, PRESERVED_FIRST, RESULT_REGS};

use crate::services::pv::{ConfigError, PvConfig, PvRegistry};
use crate::trap::decision::Next;
/// A vCPU's power state, as the scheduler keeps it and PSCI reports it.
pub use crate::vcpu::PowerState;
use crate::vcpu::{GuestRegs, VcpuId, VmId};

/// What the dispatcher may know about the caller's VM. The runner (`el2::run`)
/// implements it over its VM table, the scheduler
/// ([`crate::sched::Scheduler::power_state`]) and the guest memory map.
pub trait VmView {
    /// Number of vCPUs of the VM (indices `0..vcpu_count()`).
    fn vcpu_count(&self) -> u16;

    /// The MPIDR (affinity fields only) of vCPU `index`, as the VM's
    /// generated device tree gives it.
    fn mpidr_of(&self, index: u16) -> Mpidr;

    /// The vCPU whose MPIDR affinity is exactly `mpidr`. The default
    /// searches [`Self::mpidr_of`]; override it with the inverse of the
    /// guest-DT mapping.
    fn vcpu_of_mpidr(&self, mpidr: Mpidr) -> Option<u16> {
        (0..self.vcpu_count()).find(|&i| self.mpidr_of(i) == mpidr)
    }

    /// The power state of vCPU `index`.
    fn power_state(&self, index: u16) -> PowerState;

    /// Whether the guest-physical range `[ipa, ipa + len)` lies entirely in
    /// the VM's RAM.
    fn ram_contains(&self, ipa: u64, len: u64) -> bool;

    /// The VM's counter now, as KVM_PTP returns it (docs/abi.md §2): its
    /// virtual counter (CNTVCT as the guest reads it, i.e. CNTPCT minus
    /// the VM's CNTVOFF) if `physical` is false, else its physical counter
    /// (CNTPCT). Sample it as close as possible to
    /// [`Self::wall_clock_ns`]: the guest uses the pair to relate the two
    /// clocks. The default, 0, is only for views that offer no PTP.
    fn counter(&self, physical: bool) -> u64 {
        let _ = physical;
        0
    }

    /// Wall-clock time now, in nanoseconds since the Unix epoch (UTC), for
    /// KVM_PTP; `None` if the hypervisor has no wall clock (no RTC or time
    /// source was found). It must not change between `None` and `Some`
    /// during a VM's life: with `None`, [`KvmService`] neither advertises
    /// PTP in KVM_FEATURES nor answers it (NOT_SUPPORTED), so a guest never
    /// synchronises to a made-up time. The default: `None`.
    fn wall_clock_ns(&self) -> Option<u64> {
        None
    }

    /// The number of vCPUs of VM `vm` of the hypervisor's VM table (any
    /// VM, the caller's own included), `None` if there is no such VM. Used
    /// by calls that name another VM (a control VM's
    /// PVLOCK_SET_WFX_POLICY, [`ControlService`]). The runner (`el2::run`) answers
    /// from its VM table, which never changes once the VMs are created.
    /// The default, `None` for every VM, makes those calls answer
    /// INVALID_PARAMETER.
    fn vm_vcpu_count(&self, vm: VmId) -> Option<u16> {
        let _ = vm;
        None
    }
}

/// Which services a VM's table gets: its paravirtual services and whether
/// it is a control VM. What [`dispatcher_for`] / [`Dispatcher::for_vm`]
/// take, by value; a `&PvConfig` converts into one with `control` false,
/// so callers that know nothing about control VMs keep passing their
/// `&PvConfig`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VmServices {
    /// The paravirtual services (`pv-lock`, `pv-time`, `kvm-ptp`); the
    /// VM's [`PvRegistry`] must be built for exactly this.
    pub pv: PvConfig,
    /// The VM is a control VM (`control = "on"`): it gets
    /// [`ControlService`] (PVLOCK_SET_WFX_POLICY).
    pub control: bool,
}

impl VmServices {
    /// What a VM description asks for: `pv-lock`, `pv-time`, `kvm-ptp`
    /// and `control`.
    pub fn from_config(config: &VmConfig) -> Self {
        Self {
            pv: PvConfig {
                lock: config.pv_lock,
                steal_time: config.pv_time,
                ptp: config.kvm_ptp,
            },
            control: config.control,
        }
    }
}

/// A VM that is not a control VM. Only by reference, so that the callers
/// of [`dispatcher_for`] that pass `&PvConfig` keep compiling unchanged
/// (and clippy-clean); pass a `VmServices` by value.
impl From<&PvConfig> for VmServices {
    fn from(pv: &PvConfig) -> Self {
        Self {
            pv: *pv,
            control: false,
        }
    }
}

/// The service table of a VM with `services` (see [`Dispatcher::for_vm`]):
/// a [`VmServices`] (by value), or a `&PvConfig` for a VM that is not a
/// control VM.
pub fn dispatcher_for(
    services: impl Into<VmServices>,
    registry: Arc<PvRegistry>,
    vulnerabilities: CpuVulnerabilities,
) -> Result<Dispatcher, TableError> {
    Dispatcher::for_vm(services, registry, vulnerabilities)
}

/// Why a VM's service table could not be built ([`Dispatcher::for_vm`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableError {
    /// The PV configuration is inconsistent, or the registry was built for
    /// another one.
    Config(ConfigError),
    /// A service was refused (cannot happen for a configuration that
    /// passed [`PvConfig::validate`]; kept so that it is never silently
    /// ignored).
    Register(RegisterError),
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "{e}"),
            Self::Register(e) => write!(f, "{e}"),
        }
    }
}

impl From<ConfigError> for TableError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

impl From<RegisterError> for TableError {
    fn from(e: RegisterError) -> Self {
        Self::Register(e)
    }
}

/// A service's answer: the four result registers X0..X3 and what happens
/// to the caller next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// X0..X3 as the caller will see them (unused results zero).
    pub x: [u64; RESULT_REGS],
    /// What the runner does next with the caller.
    pub next: Next,
}

impl Reply {
    /// One result in X0, X1..X3 zero; the caller resumes.
    pub const fn value(x0: u64) -> Self {
        Self::values([x0, 0, 0, 0])
    }

    /// Four results; the caller resumes.
    pub const fn values(x: [u64; RESULT_REGS]) -> Self {
        Self {
            x,
            next: Next::Resume,
        }
    }

    /// An SMCCC return code in X0, sign-extended to 64 bits.
    pub const fn code(code: i64) -> Self {
        Self::value(smccc::ret_to_x0(code))
    }

    /// A PSCI return code in X0, sign-extended to 64 bits.
    pub const fn psci(code: i32) -> Self {
        Self::value(pvlock_abi::psci::ret_to_x0(code))
    }

    /// NOT_SUPPORTED (-1).
    pub const fn not_supported() -> Self {
        Self::code(smccc::NOT_SUPPORTED)
    }

    /// The same results, and `next` for the caller.
    #[must_use]
    pub const fn then(self, next: Next) -> Self {
        Self { next, ..self }
    }
}

/// One call as a service sees it.
pub struct Call<'a> {
    caller: VcpuId,
    fid: FunctionId,
    regs: &'a GuestRegs,
    vm: &'a dyn VmView,
    table: &'a Dispatcher,
}

impl<'a> Call<'a> {
    /// The calling vCPU.
    pub fn caller(&self) -> VcpuId {
        self.caller
    }

    /// The function id (W0, SVE hint cleared).
    pub fn fid(&self) -> FunctionId {
        self.fid
    }

    /// Argument register X`n` (1..=17; others read 0). For an SMC32/HVC32
    /// call only the low 32 bits count (DEN0028 "Register use in AArch64
    /// SMC and HVC calls": arguments are passed in W1..W7), so they are
    /// all the service sees.
    pub fn arg(&self, n: usize) -> u64 {
        if n == 0 || n > smccc::PRESERVED_LAST {
            return 0;
        }
        let value = self.regs.x.get(n).copied().unwrap_or(0);
        if self.fid.is_smc64() {
            value
        } else {
            value & u64::from(u32::MAX)
        }
    }

    /// The caller's VM.
    pub fn vm(&self) -> &'a dyn VmView {
        self.vm
    }

    /// The caller's service table, for discovery calls.
    pub fn table(&self) -> &'a Dispatcher {
        self.table
    }
}

/// A set of SMCCC functions offered to a VM. See the module documentation.
pub trait Service: Send + Sync {
    /// A short name for logs.
    fn name(&self) -> &'static str;

    /// The function ids this service owns (fast-call ids as decoded by
    /// [`FunctionId::from_x0`]). Fixed for the service's lifetime.
    fn ids(&self) -> &[FunctionId];

    /// Answers a call to one of [`Self::ids`].
    fn call(&self, call: &Call<'_>) -> Reply;

    /// What SMCCC_ARCH_FEATURES answers for `fid` (one of [`Self::ids`]):
    /// `Some(value)` if the function is discoverable that way, `None` for
    /// NOT_SUPPORTED (DEN0028 "SMCCC_ARCH_FEATURES"). The default: `None`.
    fn arch_features(&self, fid: FunctionId) -> Option<i64> {
        let _ = fid;
        None
    }

    /// The KVM vendor-function bits this service implements (docs/abi.md §2).
    /// The default: none.
    fn kvm_features(&self) -> KvmFeatures {
        KvmFeatures::EMPTY
    }

    /// Whether the reply to `fid` (one of [`Self::ids`]) is fixed once the
    /// table is built: it reads no argument, no caller, no VM state and no
    /// clock, and asks the runner for nothing (SMCCC_VERSION, PSCI_VERSION, the
    /// vendor UID, KVM_FEATURES). The dispatcher answers such calls from a
    /// precomputed reply ([`Dispatcher::constant_reply`]), the hypervisor's
    /// shortest hypercall path. The default: no.
    fn is_constant(&self, fid: FunctionId) -> bool {
        let _ = fid;
        false
    }

    /// Whether this service owns PV_SCHED_YIELD_TO and answers it with
    /// `pvyield::reply`, so that the dispatcher may answer the call
    /// without its general route ([`Dispatcher::directed_yield`]). Only
    /// [`PvYieldService`] does. The default: no.
    fn answers_directed_yield(&self) -> bool {
        false
    }
}

/// Why [`Dispatcher::register`] refused a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterError {
    /// `fid` is already owned by the service named `owner`.
    Conflict {
        /// The id both claim.
        fid: FunctionId,
        /// The service already registered for it.
        owner: &'static str,
        /// The service refused.
        refused: &'static str,
    },
    /// The service lists a yielding-call id or one with must-be-zero bits
    /// set, which the dispatcher never routes.
    NotFastCall(FunctionId),
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Conflict {
                fid,
                owner,
                refused,
            } => write!(
                f,
                "{refused}: function id {fid:#010x} already belongs to {owner}"
            ),
            Self::NotFastCall(fid) => write!(f, "{fid:#010x} is not a fast-call id"),
        }
    }
}

// Results never reach the registers a callee must preserve.
const _: () = assert!(RESULT_REGS <= PRESERVED_FIRST);

/// An open-addressing hash index over a dispatcher's routes: slot
/// `hash(fid)` and the following ones (linear probing) hold route
/// positions + 1, 0 marks an empty slot. At most a quarter full, and
/// hashed with the first multiplier of `constants::candidate_multipliers`
/// that gives every route a home slot of its own (there is one for any
/// table el2 builds; the probing is for a table that had none), so a call
/// is found with one read: every hypercall that is not constant looks
/// here. Rebuilt whenever a service registers.
#[derive(Clone, Debug, Default)]
struct RouteIndex {
    slots: Vec<u16>,
    multiplier: u32,
    /// 32 - log2(slots.len()): the hash is the product's top bits.
    shift: u32,
}

impl RouteIndex {
    /// The index of `routes` (positions must fit in `u16`, which a table of
    /// a few dozen calls does).
    fn build(routes: &[Route]) -> Self {
        let size = (routes.len() * 4).next_power_of_two().max(16);
        let shift = u32::BITS - size.trailing_zeros();
        let separates = |multiplier: u32| {
            let mut taken = alloc::vec![false; size];
            routes.iter().all(|route| {
                let at = Self::hash(route.fid, multiplier, shift, size);
                !core::mem::replace(&mut taken[at], true)
            })
        };
        let multiplier = constants::candidate_multipliers()
            .find(|&m| separates(m))
            .unwrap_or(constants::FIRST_MULTIPLIER);
        let mut slots = alloc::vec![0u16; size];
        for (position, route) in routes.iter().enumerate() {
            let Ok(entry) = u16::try_from(position + 1) else {
                break;
            };
            let mut at = Self::hash(route.fid, multiplier, shift, size);
            while slots[at] != 0 {
                at = (at + 1) & (size - 1);
            }
            slots[at] = entry;
        }
        Self {
            slots,
            multiplier,
            shift,
        }
    }

    /// Multiplicative hashing of the id to a slot of a power-of-two table.
    #[inline(always)]
    fn hash(fid: FunctionId, multiplier: u32, shift: u32, size: usize) -> usize {
        (fid.raw().wrapping_mul(multiplier) >> shift) as usize & (size - 1)
    }

    /// Whether every route has its home slot (no lookup probes), for the
    /// host tests.
    #[cfg(test)]
    fn is_collision_free(&self, routes: &[Route]) -> bool {
        routes.iter().enumerate().all(|(position, route)| {
            let at = Self::hash(route.fid, self.multiplier, self.shift, self.slots.len());
            usize::from(self.slots[at]) == position + 1
        })
    }

    /// The route of `fid` among `routes` (those the index was built from).
    fn find<'r>(&self, routes: &'r [Route], fid: FunctionId) -> Option<&'r Route> {
        let size = self.slots.len();
        if size == 0 {
            return None;
        }
        let mut at = Self::hash(fid, self.multiplier, self.shift, size);
        for _ in 0..size {
            let entry = usize::from(self.slots[at]);
            let route = routes.get(entry.checked_sub(1)?)?;
            if route.fid == fid {
                return Some(route);
            }
            at = (at + 1) & (size - 1);
        }
        None
    }
}

/// The view constant calls are computed with: they must not look at it,
/// and it knows nothing (no vCPU, no RAM).
struct NoVm;

impl VmView for NoVm {
    fn vcpu_count(&self) -> u16 {
        0
    }

    fn mpidr_of(&self, _index: u16) -> Mpidr {
        Mpidr::from_raw(0)
    }

    fn power_state(&self, _index: u16) -> PowerState {
        PowerState::Off
    }

    fn ram_contains(&self, _ipa: u64, _len: u64) -> bool {
        false
    }
}

/// Where a registered function id goes: its service (index into the
/// table's services) and its call counter (`pvlock_abi::catalog` index,
/// `None` for an id the catalog does not name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Route {
    fid: FunctionId,
    service: usize,
    counter: Option<usize>,
}

/// A VM's SMCCC service table and call counters.
pub struct Dispatcher {
    services: Vec<Box<dyn Service>>,
    /// `(id, index into services)`, sorted by id.
    routes: Vec<Route>,
    /// Open-addressing index of `routes` ([`RouteIndex`]): one hash and
    /// usually one probe per call instead of a binary search.
    index: RouteIndex,
    counters: CallCounters,
    /// The replies of the constant calls ([`Service::is_constant`]);
    /// recomputed by every registration (a new service can change
    /// KVM_FEATURES).
    constants: ConstantReplies,
    /// PV_SCHED_YIELD_TO's route when a service registered it that
    /// answers it with `pvyield::reply` (every VM with a PV-lock variant):
    /// [`Self::directed_yield`] takes it without the route look-up.
    directed_yield: Option<Route>,
}

impl Default for Dispatcher {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field(
                "services",
                &self.services.iter().map(|s| s.name()).collect::<Vec<_>>(),
            )
            .field("routes", &self.routes.len())
            .finish()
    }
}

impl Dispatcher {
    /// A table with no service: every call answers NOT_SUPPORTED.
    pub fn new() -> Self {
        Self {
            services: Vec::new(),
            routes: Vec::new(),
            index: RouteIndex::default(),
            counters: CallCounters::new(),
            constants: ConstantReplies::default(),
            directed_yield: None,
        }
    }

    /// The same table, counting calls per vCPU for `vcpus` vCPUs (the
    /// exit fast path's counts, [`Self::vcpu_counts`]).
    pub fn with_vcpu_counters(mut self, vcpus: u16) -> Self {
        self.counters = CallCounters::for_vcpus(vcpus);
        self
    }

    /// The services every VM has: [`ArchService`] with `vulnerabilities`
    /// and [`PsciService`].
    pub fn standard(vulnerabilities: CpuVulnerabilities) -> Self {
        let mut table = Self::new();
        let arch = table.register(Box::new(ArchService::new(vulnerabilities)));
        let psci = table.register(Box::new(PsciService));
        debug_assert!(arch.is_ok() && psci.is_ok(), "standard services overlap");
        table
    }

    /// The table of a VM with `services` (a [`VmServices`] by value, or a
    /// `&PvConfig` for a VM that is not a control VM): the
    /// [standard](Self::standard) services, the KVM vendor discovery calls
    /// ([`KvmService`], every VM, with KVM_PTP if `pv.ptp`), the PV-lock
    /// variant ([`PvLockService`]) with the directed-yield call
    /// ([`PvYieldService`]), and PV time ([`PvTimeService`]), if enabled;
    /// and [`ControlService`] if `control`. `registry` must have been built
    /// for the same `pv` ([`PvRegistry::new`]); the services and the arch
    /// layer share it.
    ///
    /// Refused with [`ConfigError::PtpClash`] for KVM_PTP with seed-v3
    /// (both are `0x86000001`, docs/abi.md §3), checked before anything is
    /// registered; `register` would refuse the second claimant anyway
    /// ([`TableError::Register`]).
    pub fn for_vm(
        services: impl Into<VmServices>,
        registry: Arc<PvRegistry>,
        vulnerabilities: CpuVulnerabilities,
    ) -> Result<Self, TableError> {
        let services = services.into();
        let config = &services.pv;
        config.validate()?;
        if registry.config() != *config {
            return Err(ConfigError::RegistryMismatch {
                registry: registry.config(),
                config: *config,
            }
            .into());
        }
        let mut table = Self::standard(vulnerabilities).with_vcpu_counters(registry.vcpus());
        table.register(Box::new(KvmService::new(config.ptp)))?;
        if let Some(variant) = config.lock {
            table.register(Box::new(PvLockService::new(variant, registry.clone())))?;
            table.register(Box::new(PvYieldService::new()))?;
        }
        if config.steal_time {
            table.register(Box::new(PvTimeService::new(registry)))?;
        }
        if services.control {
            table.register(Box::new(ControlService::new()))?;
        }
        Ok(table)
    }

    /// Adds `service`. Refused, leaving the table unchanged, if it claims
    /// an id another service owns or an id that is not a fast call.
    pub fn register(&mut self, service: Box<dyn Service>) -> Result<(), RegisterError> {
        let index = self.services.len();
        let mut routes = self.routes.clone();
        for &fid in service.ids() {
            if !fid.is_fast() || fid.mbz_bits() != 0 || fid.has_sve_hint() {
                return Err(RegisterError::NotFastCall(fid));
            }
            match routes.binary_search_by_key(&fid, |r| r.fid) {
                Ok(at) => {
                    let owner = if routes[at].service == index {
                        service.name()
                    } else {
                        self.services[routes[at].service].name()
                    };
                    return Err(RegisterError::Conflict {
                        fid,
                        owner,
                        refused: service.name(),
                    });
                }
                Err(at) => routes.insert(
                    at,
                    Route {
                        fid,
                        service: index,
                        counter: catalog::index_of(fid),
                    },
                ),
            }
        }
        self.index = RouteIndex::build(&routes);
        if service.answers_directed_yield() {
            self.directed_yield = routes
                .iter()
                .find(|r| r.fid == PV_SCHED_YIELD_TO && r.service == index)
                .copied();
        }
        self.routes = routes;
        self.services.push(service);
        self.constants = self.compute_constants();
        Ok(())
    }

    /// Every constant call's reply, asked of its service once.
    fn compute_constants(&self) -> ConstantReplies {
        let mut constants = Vec::new();
        for route in &self.routes {
            let Some(service) = self.services.get(route.service) else {
                continue;
            };
            if !service.is_constant(route.fid) {
                continue;
            }
            let regs = GuestRegs {
                x: {
                    let mut x = [0; 31];
                    x[0] = u64::from(route.fid.raw());
                    x
                },
                ..GuestRegs::default()
            };
            let reply = service.call(&Call {
                caller: VcpuId {
                    vm: VmId(0),
                    index: 0,
                },
                fid: route.fid,
                regs: &regs,
                vm: &NoVm,
                table: self,
            });
            // A service that wants more than a resume was wrong to call
            // it constant.
            if reply.next == Next::Resume {
                constants.push((route.fid, route.counter, reply.x));
            }
        }
        ConstantReplies::build(constants)
    }

    /// The constant calls' replies, for the exit fast path: what it does
    /// not find goes through [`Self::dispatch`].
    pub fn constants(&self) -> &ConstantReplies {
        &self.constants
    }

    /// The reply to the call in `x0` if it is a constant call, else
    /// `None` (nothing counted).
    pub fn constant_reply(&self, x0: u64) -> Option<&[u64; RESULT_REGS]> {
        self.constants.reply(x0)
    }

    /// vCPU `vcpu`'s own call counters, which only its runner writes (the
    /// exit fast path's; [`CallCounters`]).
    pub fn vcpu_counts(&self, vcpu: u16) -> VcpuCallCounts<'_> {
        self.counters.vcpu(vcpu)
    }

    /// The registered services, in registration order.
    pub fn services(&self) -> impl Iterator<Item = &dyn Service> {
        self.services.iter().map(|s| &**s)
    }

    /// The route of `fid`, if some service owns it.
    fn route(&self, fid: FunctionId) -> Option<&Route> {
        self.index.find(&self.routes, fid)
    }

    /// The service that owns `fid`.
    fn owner(&self, fid: FunctionId) -> Option<&dyn Service> {
        let route = self.route(fid)?;
        self.services.get(route.service).map(|s| &**s)
    }

    /// Whether some service owns `fid`.
    pub fn implements(&self, fid: FunctionId) -> bool {
        self.owner(fid).is_some()
    }

    /// The SMCCC_ARCH_FEATURES answer for `fid`: its owner's
    /// [`Service::arch_features`], NOT_SUPPORTED if it has no owner.
    pub fn arch_features(&self, fid: FunctionId) -> i64 {
        self.owner(fid)
            .and_then(|s| s.arch_features(fid))
            .unwrap_or(smccc::NOT_SUPPORTED)
    }

    /// The KVM_FEATURES bitmap: bit 0 (KVM_FEATURES itself) and every
    /// service's bits (docs/abi.md §2).
    pub fn kvm_features(&self) -> KvmFeatures {
        let words = self
            .services
            .iter()
            .fold(KvmFeatures::new().words(), |acc, s| {
                let bits = s.kvm_features().words();
                core::array::from_fn(|i| acc[i] | bits[i])
            });
        KvmFeatures::from_words(words)
    }

    /// Per-function-id call counts of this VM.
    pub fn counters(&self) -> &CallCounters {
        &self.counters
    }

    /// PV_SCHED_YIELD_TO from `caller` in a VM of `vcpu_count` vCPUs,
    /// answered and counted as [`Self::dispatch`] would, without its route
    /// look-up and service call: every PV lock waiter's hot call whose
    /// reply is not constant, one per directed yield and vCPU switch.
    /// `None`, with nothing touched, if X0 holds another call or the VM is
    /// not offered it: then `dispatch` answers.
    #[inline(always)]
    pub fn directed_yield(
        &self,
        caller: VcpuId,
        regs: &mut GuestRegs,
        vcpu_count: u16,
    ) -> Option<Next> {
        let route = self.directed_yield.as_ref()?;
        let fid = FunctionId::from_x0(regs.x[0]);
        if fid != route.fid {
            return None;
        }
        match route.counter {
            Some(index) => self.counters.record_index(index, fid),
            None => self.counters.record(fid),
        }
        let reply = pvyield::reply(caller, vcpu_count, regs.x[1]);
        regs.x[..RESULT_REGS].copy_from_slice(&reply.x);
        Some(reply.next)
    }

    /// Handles one SMCCC call from `caller`, whose saved registers are
    /// `regs` (X0 = function id, X1..X17 arguments): writes the results to
    /// X0..X3 and returns what the caller must do. Never touches X4..X30,
    /// PC or PSTATE, and never panics, whatever the registers hold.
    /// Inlined into its one caller, the runner's hypercall handler: out of
    /// line it cost up to 66 more instructions per directed yield and vCPU
    /// switch (measured; docs/benchmarks.md).
    #[inline(always)]
    pub fn dispatch(&self, caller: VcpuId, regs: &mut GuestRegs, vm: &dyn VmView) -> Next {
        let fid = FunctionId::from_x0(regs.x[0]);
        // One index lookup routes and counts the call: this is every
        // hypercall's path, so no scan of the catalog here.
        let route = self.route(fid);
        match route {
            Some(Route {
                counter: Some(index),
                ..
            }) => self.counters.record_index(*index, fid),
            _ => self.counters.record(fid),
        }
        let reply = match route.and_then(|r| self.services.get(r.service)) {
            // Only fast-call ids with clear MBZ bits can be routed
            // (`register` checks); yielding calls end here.
            Some(service) => service.call(&Call {
                caller,
                fid,
                regs,
                vm,
                table: self,
            }),
            None => Reply::not_supported(),
        };
        regs.x[..RESULT_REGS].copy_from_slice(&reply.x);
        reply.next
    }
}
