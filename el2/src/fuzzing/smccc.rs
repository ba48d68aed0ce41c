//! The SMCCC/PSCI dispatcher of one VM, called by its vCPUs with any
//! registers.
//!
//! Input layout (every field one byte unless said otherwise):
//! 1. services: bits 2:0 the PV-lock variant ([`VARIANT_CHOICES`]), bit 3
//!    PV time, bit 4 KVM_PTP, bit 5 control VM, bit 6 a wall clock;
//! 2. host vulnerabilities: bits 0, 1, 2 Spectre v2, v4, BHB;
//! 3. vCPUs: `1 + byte % 64`;
//! 4. RAM: `(2 + byte) * 2 MiB` from the guest RAM base;
//! 5. the VM table: bits 1:0 how many other VMs, bits 3:2 where the
//!    caller's VM is among them, then one byte per other VM (its vCPUs);
//! 6. each vCPU's power state, two bits per vCPU ([`power_state`]);
//! 7. then calls until the input ends: a caller byte ([`RAW_CALLER`]), the
//!    function id ([`function_id`]) and X1..X3 ([`Harness::argument`]); an
//!    opening byte of [`SET_POWER_STATE`] instead changes a vCPU's power
//!    state, as other pCPUs would meanwhile.
//!
//! Invariants checked (the module documentation of [`crate::services::smccc`] and
//! its services promises each):
//! - no call panics, whatever the registers hold;
//! - X4..X30, PC, PSTATE and SP_EL0 are never touched;
//! - an id no service owns answers NOT_SUPPORTED in X0 and zero in X1..X3,
//!   with no action;
//! - every call is counted exactly once;
//! - a constant call's precomputed reply is the one dispatch writes;
//! - an SMC32 call sees only the low halves of its arguments;
//! - each action names a vCPU of the caller's VM and holds only after the
//!   checks the service documents: CPU_ON's target is Off and its entry in
//!   RAM; a kick's target exists; a directed yield's target exists and is
//!   not the caller; PVLOCK_SET_WFX_POLICY comes from a control VM and
//!   names an existing VM and vCPU;
//! - the VM's view is only asked about its own vCPUs (`0..vcpu_count()`);
//! - every PV record the registry hands out is 64-byte aligned and inside
//!   the VM's RAM; a guest-chosen one is clear of the hypervisor's area;
//! - a configuration with KVM_PTP and seed-v3 is refused.

use alloc::sync::Arc;
use alloc::vec::Vec;

use platform::vm::{MAX_VCPUS, MEMORY_GRANULE};
use platform::{MemRange, Mpidr};
use pvlock_abi::catalog;
use pvlock_abi::pvlock::Variant;
use pvlock_abi::smccc::{FunctionId, NOT_SUPPORTED, SVE_HINT, ret_to_x0};
use pvlock_abi::{arch, control, directed_yield, kvm, psci};

use super::input::Input;
use crate::guest::layout::{DTB_MAX_SIZE, RAM_BASE, vcpu_index, vcpu_mpidr};
use crate::services::pv::{ConfigError, PvConfig, PvRegistry, RECORD_SIZE};
use crate::services::smccc::{
    CpuVulnerabilities, Dispatcher, Exposure, PowerState, TableError, VmServices, VmView,
    dispatcher_for,
};
use crate::trap::decision::Next;
use crate::vcpu::{GuestRegs, VcpuId, VmId};

/// Most calls one input makes, so that one execution stays short.
const MAX_CALLS: usize = 512;

/// The PV-lock choice of the services byte's bits 2:0: every variant,
/// and none (which three encodings share).
pub(super) const VARIANT_CHOICES: [Option<Variant>; 8] = [
    None,
    Some(Variant::SeedV2),
    Some(Variant::SeedV3),
    Some(Variant::OpenEuler),
    Some(Variant::Anolis),
    None,
    None,
    None,
];
pub(super) const SERVICE_PV_TIME: u8 = 1 << 3;
pub(super) const SERVICE_PTP: u8 = 1 << 4;
pub(super) const SERVICE_CONTROL: u8 = 1 << 5;
pub(super) const SERVICE_WALL_CLOCK: u8 = 1 << 6;

/// A caller byte with this value is followed by a raw 16-bit vCPU index,
/// which may be out of range; any other value but [`SET_POWER_STATE`] is
/// the caller's index modulo the vCPU count.
pub(super) const RAW_CALLER: u8 = 0xff;
/// A caller byte with this value is not a call: a vCPU index byte and a
/// power-state byte follow.
pub(super) const SET_POWER_STATE: u8 = 0xfe;

/// Function-id selectors are 16-bit values: `selector % 8 == 0` is a raw
/// 64-bit X0 from the input; otherwise `selector / 8` picks a named id of
/// `pvlock_abi::catalog`, and a noise byte follows ([`NOISE_SVE_HINT`],
/// [`NOISE_HIGH_BITS`]).
pub(super) const FUNCTION_SELECTOR_STEP: u16 = 8;
/// Noise bit: set the SVE hint (bit 16), which dispatch must ignore.
pub(super) const NOISE_SVE_HINT: u8 = 1;
/// Noise bit: a 32-bit value follows for bits 63:32 of X0, which dispatch
/// must ignore.
pub(super) const NOISE_HIGH_BITS: u8 = 2;

/// The argument kinds of [`Harness::argument`], by their kind byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Arg {
    /// A 64-bit value follows.
    Raw,
    /// A byte follows.
    Small,
    /// A 16-bit record number follows: RAM base + 64 * it.
    RamRecord,
    /// A byte follows: RAM end - 64 * (1 + it), an aligned record at the
    /// top of RAM.
    RamTopRecord,
    /// A byte follows: RAM end - it, an address at RAM's edge.
    RamEdge,
    /// A byte follows: a vCPU index, up to two past the last vCPU.
    VcpuIndex,
    /// A byte follows: the MPIDR of such a vCPU index.
    VcpuMpidr,
    /// A byte follows: a named function id.
    FunctionId,
    /// A byte follows: a record inside the hypervisor's PV area.
    PvAreaRecord,
    /// A byte follows: `u64::MAX` minus it.
    NearMax,
    /// A 32-bit value follows, with all-ones above it: what an SMC32 call
    /// must not see.
    HighGarbage,
}

impl Arg {
    const ALL: [Self; 11] = [
        Self::Raw,
        Self::Small,
        Self::RamRecord,
        Self::RamTopRecord,
        Self::RamEdge,
        Self::VcpuIndex,
        Self::VcpuMpidr,
        Self::FunctionId,
        Self::PvAreaRecord,
        Self::NearMax,
        Self::HighGarbage,
    ];

    fn from_byte(byte: u8) -> Self {
        Self::ALL[usize::from(byte) % Self::ALL.len()]
    }
}

/// Power states by the two bits the input gives each vCPU.
pub(super) fn power_state(bits: u8) -> PowerState {
    match bits & 3 {
        0 => PowerState::On,
        2 => PowerState::OnPending,
        _ => PowerState::Off,
    }
}

/// The caller's VM as the dispatcher sees it, answering with this
/// hypervisor's MPIDR numbering. Panics if asked about a vCPU outside
/// `0..vcpu_count()`, which the trait does not allow.
struct FakeVm {
    states: Vec<PowerState>,
    ram: MemRange,
    /// vCPU counts of every VM of the hypervisor, the caller's included.
    vms: Vec<u16>,
    wall_clock: Option<u64>,
}

impl FakeVm {
    fn check_index(&self, index: u16) {
        assert!(
            index < self.vcpu_count(),
            "the dispatcher asked about vCPU {index} of a {}-vCPU VM",
            self.vcpu_count()
        );
    }
}

impl VmView for FakeVm {
    fn vcpu_count(&self) -> u16 {
        self.states.len() as u16
    }

    fn mpidr_of(&self, index: u16) -> Mpidr {
        self.check_index(index);
        vcpu_mpidr(index)
    }

    fn vcpu_of_mpidr(&self, mpidr: Mpidr) -> Option<u16> {
        vcpu_index(mpidr).filter(|&index| index < self.vcpu_count())
    }

    fn power_state(&self, index: u16) -> PowerState {
        self.check_index(index);
        self.states[usize::from(index)]
    }

    fn ram_contains(&self, ipa: u64, len: u64) -> bool {
        ipa >= self.ram.base
            && ipa
                .checked_add(len)
                .is_some_and(|end| end <= self.ram.end())
    }

    fn counter(&self, physical: bool) -> u64 {
        if physical {
            0x0000_0123_4567_89ab
        } else {
            0x0000_0001_0000_0002
        }
    }

    fn wall_clock_ns(&self) -> Option<u64> {
        self.wall_clock
    }

    fn vm_vcpu_count(&self, vm: VmId) -> Option<u16> {
        self.vms.get(usize::from(vm.0)).copied()
    }
}

/// One VM: its table, its registry and what it looks like.
struct Harness {
    services: VmServices,
    table: Dispatcher,
    registry: Arc<PvRegistry>,
    view: FakeVm,
    vm: VmId,
    pv_area: Option<MemRange>,
}

/// Runs the SMCCC harness on one input (see the module documentation).
pub fn smccc(data: &[u8]) {
    let mut input = Input::new(data);
    let mut harness = Harness::new(&mut input);
    for call in 0..MAX_CALLS {
        if input.is_empty() {
            break;
        }
        harness.step(&mut input, call as u64);
    }
}

impl Harness {
    fn new(input: &mut Input<'_>) -> Self {
        let services_byte = input.u8();
        let mut services = VmServices {
            pv: PvConfig {
                lock: VARIANT_CHOICES[usize::from(services_byte & 7)],
                steal_time: services_byte & SERVICE_PV_TIME != 0,
                ptp: services_byte & SERVICE_PTP != 0,
            },
            control: services_byte & SERVICE_CONTROL != 0,
        };
        let exposure = |bit: u8| {
            if bit != 0 {
                Exposure::Vulnerable
            } else {
                Exposure::Unaffected
            }
        };
        let vulnerable = input.u8();
        let vulnerabilities = CpuVulnerabilities {
            spectre_v2: exposure(vulnerable & 1),
            spectre_v4: exposure(vulnerable & 2),
            spectre_bhb: exposure(vulnerable & 4),
        };
        let vcpus = 1 + input.below(MAX_VCPUS as usize) as u16;
        let ram = MemRange::new(RAM_BASE, (2 + u64::from(input.u8())) * MEMORY_GRANULE);
        let table_byte = input.u8();
        let others = usize::from(table_byte & 3);
        let vm = VmId(u16::from((table_byte >> 2) & 3) % (others as u16 + 1));
        let mut vms: Vec<u16> = (0..others)
            .map(|_| 1 + input.below(MAX_VCPUS as usize) as u16)
            .collect();
        vms.insert(usize::from(vm.0), vcpus);
        let mut states = Vec::with_capacity(usize::from(vcpus));
        for _ in 0..usize::from(vcpus).div_ceil(4) {
            let byte = input.u8();
            states.extend((0..4).map(|i| power_state(byte >> (2 * i))));
        }
        states.truncate(usize::from(vcpus));
        let view = FakeVm {
            states,
            ram,
            vms,
            wall_clock: (services_byte & SERVICE_WALL_CLOCK != 0).then_some(0x1234_5678_9abc_def0),
        };

        if services.pv.validate().is_err() {
            // KVM_PTP and seed-v3 share 0x86000001: refused before
            // anything is built, by the registry and by the table alike.
            let refused = PvRegistry::new(vcpus, services.pv, None);
            assert!(matches!(refused, Err(ConfigError::PtpClash { .. })));
            let lenient = PvConfig {
                ptp: false,
                ..services.pv
            };
            let area = area_for(ram, vcpus, &lenient);
            let registry = PvRegistry::new(vcpus, lenient, area).expect("a valid configuration");
            let registry = Arc::new(registry);
            let refused = dispatcher_for(services, registry, vulnerabilities);
            assert!(matches!(
                refused,
                Err(TableError::Config(ConfigError::PtpClash { .. }))
            ));
            services.pv = lenient;
        }
        // Laid out as `guest::layout::plan` does: right below the device
        // tree's slot at the top of RAM.
        let pv_area = area_for(ram, vcpus, &services.pv);
        let registry =
            Arc::new(PvRegistry::new(vcpus, services.pv, pv_area).expect("a valid configuration"));
        let table = dispatcher_for(services, registry.clone(), vulnerabilities)
            .expect("a valid configuration");
        Self {
            services,
            table,
            registry,
            view,
            vm,
            pv_area,
        }
    }

    fn vcpus(&self) -> u16 {
        self.view.vcpu_count()
    }

    fn step(&mut self, input: &mut Input<'_>, call: u64) {
        let index = match input.u8() {
            SET_POWER_STATE => {
                let index = input.below(usize::from(self.vcpus()));
                self.view.states[index] = power_state(input.u8());
                return;
            }
            RAW_CALLER => input.u16(),
            byte => u16::from(byte) % self.vcpus(),
        };
        let caller = VcpuId { vm: self.vm, index };
        let mut fill = prng::Rng::new(call.wrapping_mul(0x9e37_79b9) ^ u64::from(index));
        let mut regs = GuestRegs {
            x: core::array::from_fn(|_| fill.next_u64()),
            pc: fill.next_u64(),
            pstate: fill.next_u64(),
            sp_el0: fill.next_u64(),
        };
        regs.x[0] = function_id(input);
        for n in 1..=3 {
            regs.x[n] = self.argument(input);
        }
        let before = regs.clone();
        let action = self.dispatch(caller, &mut regs);
        let fid = FunctionId::from_x0(before.x[0]);
        let reply = [regs.x[0], regs.x[1], regs.x[2], regs.x[3]];

        if !self.table.implements(fid) {
            assert_eq!(reply, [u64::MAX, 0, 0, 0], "unowned id {fid:?}");
            assert_eq!(action, Next::Resume, "unowned id {fid:?}");
        }
        if let Some(constant) = self.table.constant_reply(before.x[0]) {
            assert_eq!(*constant, reply, "constant reply of {fid:?}");
            assert_eq!(action, Next::Resume, "constant call {fid:?}");
        }
        if !fid.is_smc64() {
            // An SMC32 call reads W1..W17 only: the upper halves of
            // X1..X17 must change nothing. SMC32 calls change no service
            // state, so repeating one is harmless.
            let mut garbage = before.clone();
            for x in &mut garbage.x[1..=17] {
                *x ^= fill.next_u64() << 32;
            }
            let again = self.dispatch(caller, &mut garbage);
            assert_eq!(garbage.x[..4], reply, "SMC32 {fid:?} read bits 63:32");
            assert_eq!(again, action, "SMC32 {fid:?} read bits 63:32");
        }
        self.check_discovery(fid, &before, &reply);
        self.check_action(caller, fid, &reply, action);
        self.check_records(index);
    }

    /// The discovery calls answer from the table: SMCCC_ARCH_FEATURES asks
    /// the queried id's owner (NOT_SUPPORTED without one), KVM_FEATURES is
    /// every service's bits (without PTP's when there is no wall clock),
    /// PSCI_FEATURES(SMCCC_VERSION) says whether SMCCC_VERSION exists.
    fn check_discovery(&self, fid: FunctionId, before: &GuestRegs, reply: &[u64; 4]) {
        // Both take a uint32 function id in W1.
        let queried = FunctionId::from_raw(before.x[1] as u32);
        if fid == arch::SMCCC_ARCH_FEATURES {
            let expected = self.table.arch_features(queried);
            assert_eq!(reply[0], ret_to_x0(expected), "ARCH_FEATURES({queried:?})");
            if !self.table.implements(queried) {
                assert_eq!(
                    expected, NOT_SUPPORTED,
                    "ARCH_FEATURES of unowned {queried:?}"
                );
            }
        } else if fid == kvm::FEATURES {
            let mut features = self.table.kvm_features();
            if self.services.pv.ptp && self.view.wall_clock.is_none() {
                features.clear(kvm::func::PTP);
            }
            assert_eq!(*reply, features.to_regs(), "KVM_FEATURES");
        } else if fid == psci::PSCI_FEATURES && queried == arch::SMCCC_VERSION {
            let implemented = self.table.implements(arch::SMCCC_VERSION);
            assert_eq!(reply[0] == 0, implemented, "PSCI_FEATURES(SMCCC_VERSION)");
        }
    }

    /// Dispatches and checks what every call must leave alone.
    fn dispatch(&self, caller: VcpuId, regs: &mut GuestRegs) -> Next {
        let before = regs.clone();
        let counted = self.table.counters().total();
        let action = self.table.dispatch(caller, regs, &self.view);
        assert_eq!(
            self.table.counters().total(),
            counted + 1,
            "not counted once"
        );
        assert_eq!(regs.x[4..], before.x[4..], "X4..X30 changed");
        assert_eq!(
            (regs.pc, regs.pstate, regs.sp_el0),
            (before.pc, before.pstate, before.sp_el0),
            "PC, PSTATE or SP_EL0 changed"
        );
        action
    }

    /// Checks `action` against what its service promises, then carries it
    /// out on the fake VM as the runner (`el2::run`) would.
    fn check_action(&mut self, caller: VcpuId, fid: FunctionId, reply: &[u64; 4], action: Next) {
        let vcpus = self.vcpus();
        let own = |target: VcpuId| target.vm == caller.vm && target.index < vcpus;
        match action {
            Next::Resume | Next::StopVm => {}
            // CPU_SUSPEND: a WFI with no deadline of its own.
            Next::WaitForInterrupt { deadline } => {
                assert!(psci::is_psci(fid), "{action:?} from {fid:?}");
                assert_eq!(deadline, None, "{action:?} from {fid:?}");
            }
            // Only a trapped WFE asks for the spin path.
            Next::OnSpin => panic!("{action:?} from {fid:?}"),
            Next::PowerOn {
                target,
                entry,
                context_id: _,
            } => {
                assert_eq!(fid.to_smc32(), psci::CPU_ON, "{action:?} from {fid:?}");
                assert!(own(target), "{action:?} from {caller}");
                assert!(self.view.ram_contains(entry, 4), "{action:?} outside RAM");
                assert_eq!(reply[0], 0, "{action:?} without SUCCESS");
                let state = &mut self.view.states[usize::from(target.index)];
                assert_eq!(*state, PowerState::Off, "{action:?} of a vCPU not off");
                *state = PowerState::OnPending;
            }
            Next::PowerOff => {
                assert_eq!(fid, psci::CPU_OFF);
                if let Some(state) = self.view.states.get_mut(usize::from(caller.index)) {
                    *state = PowerState::Off;
                }
            }
            Next::ResetVm => {
                assert!(psci::is_psci(fid), "{action:?} from {fid:?}");
                self.registry.reset_all();
                for (index, state) in self.view.states.iter_mut().enumerate() {
                    *state = if index == 0 {
                        PowerState::On
                    } else {
                        PowerState::Off
                    };
                }
            }
            Next::Kick { target, lend } => {
                // Only the project's own call lends; KICK_CPU only wakes.
                assert_eq!(
                    lend,
                    fid == directed_yield::PV_SCHED_KICK_LEND,
                    "{action:?} from {fid:?}"
                );
                assert!(own(target), "{action:?} from {caller}");
                assert_eq!(reply[0], 0, "{action:?} without SUCCESS");
            }
            Next::YieldTo { target } => {
                assert_eq!(fid, directed_yield::PV_SCHED_YIELD_TO);
                assert!(own(target), "{action:?} from {caller}");
                assert_ne!(target.index, caller.index, "{action:?} to itself");
                assert_eq!(reply[0], ret_to_x0(directed_yield::NOT_YIELDED));
            }
            Next::SetWfxPolicy { vm, vcpu, wfe: _ } => {
                assert_eq!(fid, control::PVLOCK_SET_WFX_POLICY);
                assert!(
                    self.services.control,
                    "{action:?} from a VM that is not a control VM"
                );
                let count = self.view.vm_vcpu_count(vm);
                assert!(count.is_some(), "{action:?} names no VM");
                assert!(
                    vcpu.is_none_or(|v| count.is_some_and(|n| v < n)),
                    "{action:?} names no vCPU of its VM"
                );
                assert_eq!(reply[0], ret_to_x0(control::SET));
            }
        }
    }

    /// The records of `index` are where `crate::services::pv` promises them.
    fn check_records(&self, index: u16) {
        let in_ram =
            |ipa: u64| ipa.is_multiple_of(RECORD_SIZE) && self.view.ram_contains(ipa, RECORD_SIZE);
        if let Some(record) = self.registry.lock_record(index) {
            assert!(in_ram(record.ipa), "PV-lock record {record:?}");
            let record_range = MemRange::new(record.ipa, RECORD_SIZE);
            let in_area = self.pv_area.is_some_and(|area| {
                area.contains(record.ipa) && area.contains(record_range.end() - 1)
            });
            let guest_chosen = self.services.pv.lock.is_some_and(Variant::guest_allocates);
            if guest_chosen {
                assert!(
                    !self
                        .pv_area
                        .is_some_and(|area| area.overlaps(&record_range)),
                    "a guest-chosen record {record:?} in the hypervisor's area"
                );
            } else {
                assert!(
                    in_area,
                    "a hypervisor-placed record {record:?} outside its area"
                );
            }
        }
        if let Some(ipa) = self.registry.steal_record(index) {
            assert!(in_ram(ipa), "stolen-time record at {ipa:#x}");
        }
    }

    /// One argument register ([`Arg`]).
    fn argument(&self, input: &mut Input<'_>) -> u64 {
        let ram_end = self.view.ram.end();
        let area_base = self.pv_area.map_or(ram_end, |area| area.base);
        match Arg::from_byte(input.u8()) {
            Arg::Raw => input.u64(),
            Arg::Small => u64::from(input.u8()),
            Arg::RamRecord => RAM_BASE + u64::from(input.u16()) * RECORD_SIZE,
            Arg::RamTopRecord => ram_end - (1 + u64::from(input.u8())) * RECORD_SIZE,
            Arg::RamEdge => ram_end - u64::from(input.u8()),
            Arg::VcpuIndex => u64::from(input.u8()) % (u64::from(self.vcpus()) + 2),
            Arg::VcpuMpidr => {
                let index = u16::from(input.u8()) % (self.vcpus() + 2);
                vcpu_mpidr(index).value()
            }
            Arg::FunctionId => u64::from(named_id(usize::from(input.u8())).raw()),
            Arg::PvAreaRecord => area_base + u64::from(input.u8()) * RECORD_SIZE,
            Arg::NearMax => u64::MAX - u64::from(input.u8()),
            Arg::HighGarbage => 0xffff_ffff_0000_0000 | u64::from(input.u32()),
        }
    }
}

/// The PV area of a VM with `ram` and `vcpus` for `config`: whole pages
/// right below the device tree's slot, as `guest::layout::plan` places it;
/// `None` when nothing needs one.
fn area_for(ram: MemRange, vcpus: u16, config: &PvConfig) -> Option<MemRange> {
    const PAGE: u64 = 0x1000;
    let size = PvRegistry::area_size(vcpus, config).next_multiple_of(PAGE);
    (size > 0).then(|| MemRange::new(ram.end() - DTB_MAX_SIZE - size, size))
}

/// The named function id at `index` of `pvlock_abi::catalog` (wrapping).
fn named_id(index: usize) -> FunctionId {
    catalog::entries()
        .nth(index % catalog::LEN)
        .map_or(FunctionId::from_raw(0), |entry| entry.id)
}

/// X0 from a selector (see [`FUNCTION_SELECTOR_STEP`]).
fn function_id(input: &mut Input<'_>) -> u64 {
    let selector = input.u16();
    if selector.is_multiple_of(FUNCTION_SELECTOR_STEP) {
        return input.u64();
    }
    let mut x0 = u64::from(named_id(usize::from(selector / FUNCTION_SELECTOR_STEP)).raw());
    let noise = input.u8();
    if noise & NOISE_SVE_HINT != 0 {
        x0 |= u64::from(SVE_HINT);
    }
    if noise & NOISE_HIGH_BITS != 0 {
        x0 |= u64::from(input.u32()) << 32;
    }
    x0
}
