//! The paravirtual services (KVM vendor, PV-lock variants, PV time) through
//! a VM's dispatcher, against docs/abi.md: every expected id and value below is
//! the literal from docs/abi.md, checked against the `pvlock_abi` constant the
//! code uses.

use super::*;
use crate::services::pv::{ConfigError, LockRecord, PvConfig, PvRegistry, RecordStats};
use crate::vcpu::VmId;
use alloc::vec::Vec;
use platform::MemRange;
use pvlock_abi::arch as abi_arch;
use pvlock_abi::directed_yield;
use pvlock_abi::kvm::{self, func};
use pvlock_abi::pvlock::{Variant, anolis, openeuler, seed_v2, seed_v3};
use pvlock_abi::pvtime;

const RAM_BASE: u64 = 0x4000_0000;
const RAM_SIZE: u64 = 0x1_0000_0000;
/// Above 4 GiB, so IPAs in X0 must be all 64 bits.
const AREA: MemRange = MemRange::new(0x1_3FF0_0000, 0x1_0000);
const VCPUS: u16 = 4;
const VM: VmId = VmId(2);
const NOT_SUPPORTED: u64 = u64::MAX;
const WALL_NS: u64 = 0x1234_5678_9ABC_DEF0;
const PHYS_COUNT: u64 = 0x0000_00AB_CDEF_0123;
const VIRT_COUNT: u64 = 0x0000_0001_0000_0002;

/// docs/abi.md's ids, literally.
mod abi {
    pub const CALL_UID: u32 = 0x8600FF01;
    pub const KVM_FEATURES: u32 = 0x86000000;
    pub const KVM_PTP: u32 = 0x86000001;
    pub const SEED_V3: u32 = 0x86000001;
    pub const SEED_V2_FEATURES: u32 = 0xC6000020;
    pub const SEED_V2_PREEMPTED: u32 = 0xC6000021;
    pub const OE_FEATURES: u32 = 0xC5000090;
    pub const OE_IPA_INIT: u32 = 0xC5000091;
    pub const OE_IPA_RELEASE: u32 = 0xC5000092;
    pub const OE_KICK_CPU: u32 = 0xC5000093;
    pub const ANOLIS_FEATURES: u32 = 0xC60000B0;
    pub const ANOLIS_PREEMPTED: u32 = 0xC60000B1;
    pub const ANOLIS_QSPINLOCK_FEATURES: u32 = 0xC60000B2;
    pub const ANOLIS_KICK_CPU: u32 = 0xC50000B3;
    pub const PV_TIME_FEATURES: u32 = 0xC5000020;
    pub const PV_TIME_ST: u32 = 0xC5000021;
    /// The project's directed-yield call (pvlock_abi::directed_yield).
    pub const YIELD_TO: u32 = 0xC6000070;
    /// Its number until it left pKVM's reserved range: retired.
    pub const RETIRED_YIELD_TO: u32 = 0xC6000022;
    /// The control call's retired number (its new one is control.rs's).
    pub const RETIRED_SET_WFX_POLICY: u32 = 0xC6000023;
    pub const ARCH_FEATURES: u32 = 0x80000001;
    pub const UID_WORDS: [u64; 4] = [0xb66fb428, 0xe911c52e, 0x564bcaa9, 0x743a004d];

    pub const PV_LOCK_IDS: [u32; 11] = [
        SEED_V3,
        SEED_V2_FEATURES,
        SEED_V2_PREEMPTED,
        OE_FEATURES,
        OE_IPA_INIT,
        OE_IPA_RELEASE,
        OE_KICK_CPU,
        ANOLIS_FEATURES,
        ANOLIS_PREEMPTED,
        ANOLIS_QSPINLOCK_FEATURES,
        ANOLIS_KICK_CPU,
    ];
}

#[test]
fn abi_literals_are_the_constants_used() {
    assert_eq!(kvm::CALL_UID.raw(), abi::CALL_UID);
    assert_eq!(kvm::FEATURES.raw(), abi::KVM_FEATURES);
    assert_eq!(kvm::PTP.raw(), abi::KVM_PTP);
    assert_eq!(seed_v3::PV_LOCK.raw(), abi::SEED_V3);
    assert_eq!(seed_v2::PV_LOCK_FEATURES.raw(), abi::SEED_V2_FEATURES);
    assert_eq!(seed_v2::PV_LOCK_PREEMPTED.raw(), abi::SEED_V2_PREEMPTED);
    assert_eq!(openeuler::PV_SCHED_FEATURES.raw(), abi::OE_FEATURES);
    assert_eq!(openeuler::PV_SCHED_IPA_INIT.raw(), abi::OE_IPA_INIT);
    assert_eq!(openeuler::PV_SCHED_IPA_RELEASE.raw(), abi::OE_IPA_RELEASE);
    assert_eq!(openeuler::PV_SCHED_KICK_CPU.raw(), abi::OE_KICK_CPU);
    assert_eq!(anolis::PV_LOCK_FEATURES.raw(), abi::ANOLIS_FEATURES);
    assert_eq!(anolis::PV_LOCK_PREEMPTED.raw(), abi::ANOLIS_PREEMPTED);
    assert_eq!(
        anolis::PV_QSPINLOCK_FEATURES.raw(),
        abi::ANOLIS_QSPINLOCK_FEATURES
    );
    assert_eq!(anolis::PV_QSPINLOCK_KICK_CPU.raw(), abi::ANOLIS_KICK_CPU);
    assert_eq!(pvtime::PV_TIME_FEATURES.raw(), abi::PV_TIME_FEATURES);
    assert_eq!(pvtime::PV_TIME_ST.raw(), abi::PV_TIME_ST);
    assert_eq!(directed_yield::PV_SCHED_YIELD_TO.raw(), abi::YIELD_TO);
    assert_eq!(
        directed_yield::RETIRED_PV_SCHED_YIELD_TO.raw(),
        abi::RETIRED_YIELD_TO
    );
    assert_eq!(
        pvlock_abi::control::RETIRED_PVLOCK_SET_WFX_POLICY.raw(),
        abi::RETIRED_SET_WFX_POLICY
    );
    assert_eq!(abi_arch::SMCCC_ARCH_FEATURES.raw(), abi::ARCH_FEATURES);
    assert_eq!(kvm::UID_REGS, abi::UID_WORDS);
    // docs/abi.md §2 bit numbers: 0 FEATURES, 1 PTP (= seed-v3); the project's
    // seed-v2 bits are the vendor function numbers 0x20 / 0x21.
    assert_eq!((func::FEATURES, func::PTP), (0, 1));
    assert_eq!(seed_v3::KVM_FEATURES_BIT, 1);
    assert_eq!((func::PV_LOCK_FEATURES, func::PV_LOCK_PREEMPTED), (32, 33));
    assert_eq!(func::PV_SCHED_YIELD_TO, 112);
    let mut every: Vec<u32> = Variant::ALL
        .iter()
        .flat_map(|v| v.function_ids())
        .map(|f| f.raw())
        .collect();
    every.sort_unstable();
    let mut literal = abi::PV_LOCK_IDS.to_vec();
    literal.sort_unstable();
    assert_eq!(every, literal);
}

/// A VM with `VCPUS` vCPUs, 4 GiB of RAM and (optionally) a wall clock.
struct FakeVm {
    wall: Option<u64>,
}

impl VmView for FakeVm {
    fn vcpu_count(&self) -> u16 {
        VCPUS
    }

    fn mpidr_of(&self, index: u16) -> Mpidr {
        Mpidr::from_affinity(0, 0, 0, index as u8)
    }

    fn power_state(&self, _: u16) -> PowerState {
        PowerState::On
    }

    fn ram_contains(&self, ipa: u64, len: u64) -> bool {
        ipa >= RAM_BASE
            && ipa
                .checked_add(len)
                .is_some_and(|end| end <= RAM_BASE + RAM_SIZE)
    }

    fn counter(&self, physical: bool) -> u64 {
        if physical { PHYS_COUNT } else { VIRT_COUNT }
    }

    fn wall_clock_ns(&self) -> Option<u64> {
        self.wall
    }
}

const CLOCK: FakeVm = FakeVm {
    wall: Some(WALL_NS),
};

/// A VM's registry and table.
struct Vm {
    registry: Arc<PvRegistry>,
    table: Dispatcher,
}

fn vm_with(lock: Option<Variant>, steal_time: bool, ptp: bool) -> Vm {
    let config = PvConfig {
        lock,
        steal_time,
        ptp,
    };
    let area = config.needs_area().then_some(AREA);
    let registry = Arc::new(PvRegistry::new(VCPUS, config, area).unwrap());
    let table = dispatcher_for(&config, registry.clone(), CpuVulnerabilities::UNAFFECTED).unwrap();
    Vm { registry, table }
}

fn lock_vm(variant: Variant) -> Vm {
    vm_with(Some(variant), false, false)
}

/// Dispatches `fid` from vCPU `caller` with X1.. = `args` (garbage past
/// them) and checks that X4..X30, PC and PSTATE are untouched.
fn call_from(
    table: &Dispatcher,
    vm: &FakeVm,
    caller: u16,
    fid: u32,
    args: &[u64],
) -> ([u64; 4], Next) {
    let mut regs = GuestRegs {
        x: core::array::from_fn(|n| 0xA5A5_0000_0000_0000 | n as u64),
        pc: 0xFFFF_8000_0000_1000,
        pstate: 0x3C5,
        ..GuestRegs::default()
    };
    regs.x[0] = u64::from(fid);
    for (n, arg) in args.iter().enumerate() {
        regs.x[n + 1] = *arg;
    }
    let before = regs.clone();
    let caller = VcpuId {
        vm: VM,
        index: caller,
    };
    let action = table.dispatch(caller, &mut regs, vm);
    assert_eq!(regs.x[4..], before.x[4..], "X4..X30 changed by {fid:#x}");
    assert_eq!((regs.pc, regs.pstate), (before.pc, before.pstate));
    ([regs.x[0], regs.x[1], regs.x[2], regs.x[3]], action)
}

/// One-result call from vCPU 0: X0, checking X1..X3 were zeroed and no
/// action asked.
fn x0(vm: &Vm, fid: u32, args: &[u64]) -> u64 {
    x0_from(vm, 0, fid, args)
}

fn x0_from(vm: &Vm, caller: u16, fid: u32, args: &[u64]) -> u64 {
    let (x, action) = call_from(&vm.table, &CLOCK, caller, fid, args);
    assert_eq!(x[1..], [0, 0, 0], "X1..X3 of {fid:#x}");
    assert_eq!(action, Next::Resume, "{fid:#x}");
    x[0]
}

fn arch_features(vm: &Vm, fid: u32) -> u64 {
    x0(vm, abi::ARCH_FEATURES, &[u64::from(fid)])
}

/// The names of the registered services.
fn services(vm: &Vm) -> Vec<&'static str> {
    vm.table.services().map(|s| s.name()).collect()
}

#[test]
fn every_vm_has_the_standard_and_kvm_services() {
    for config in PvConfig::every_valid() {
        let vm = vm_with(config.lock, config.steal_time, config.ptp);
        let names = services(&vm);
        assert_eq!(names[..3], ["arm-arch", "psci", "kvm"], "{config:?}");
        // A PV-lock variant comes with the directed-yield call.
        assert_eq!(
            names.len(),
            3 + 2 * usize::from(config.lock.is_some()) + usize::from(config.steal_time)
        );
        assert_eq!(names.contains(&"pv-time"), config.steal_time);
        assert_eq!(names.contains(&"pv-yield"), config.lock.is_some());
    }
    assert_eq!(
        services(&lock_vm(Variant::OpenEuler)),
        ["arm-arch", "psci", "kvm", "pv-lock(openeuler)", "pv-yield"]
    );
}

#[test]
fn call_uid_is_kvm_s_on_every_vm() {
    for config in PvConfig::every_valid() {
        let vm = vm_with(config.lock, config.steal_time, config.ptp);
        let (x, action) = call_from(&vm.table, &CLOCK, 1, abi::CALL_UID, &[9, 9, 9]);
        assert_eq!(x, abi::UID_WORDS, "{config:?}");
        assert_eq!(action, Next::Resume);
        assert_ne!(x[0], 0xFFFF_FFFF, "word 0 must not read as -1");
        // Bits 63:32 of X0 are ignored.
        let mut regs = GuestRegs::default();
        regs.x[0] = 0xFFFF_FFFF_0000_0000 | u64::from(abi::CALL_UID);
        vm.table
            .dispatch(VcpuId { vm: VM, index: 0 }, &mut regs, &CLOCK);
        assert_eq!(regs.x[..4], abi::UID_WORDS);
    }
}

#[test]
fn kvm_features_bitmap_per_vm() {
    let words = |vm: &Vm, view: &FakeVm| call_from(&vm.table, view, 0, abi::KVM_FEATURES, &[]).0;
    // docs/abi.md §2 / project bits: nothing -> bit 0; seed-v2 -> 0, 32, 33;
    // seed-v3 -> 0, 1; PTP -> 0, 1; every PV-lock variant -> 112 and 114
    // (the directed yield and the kick that lends, bits 16 and 18 of W3);
    // never the retired 34 or 35.
    const YIELD: u64 = (1 << (112 - 96)) | (1 << (114 - 96));
    assert_eq!(words(&vm_with(None, false, false), &CLOCK), [0b1, 0, 0, 0]);
    assert_eq!(
        words(&lock_vm(Variant::SeedV2), &CLOCK),
        [0b1, 0b11, 0, YIELD]
    );
    assert_eq!(
        words(&lock_vm(Variant::SeedV3), &CLOCK),
        [0b11, 0, 0, YIELD]
    );
    assert_eq!(words(&vm_with(None, false, true), &CLOCK), [0b11, 0, 0, 0]);
    assert_eq!(
        words(&lock_vm(Variant::OpenEuler), &CLOCK),
        [0b1, 0, 0, YIELD]
    );
    assert_eq!(words(&lock_vm(Variant::Anolis), &CLOCK), [0b1, 0, 0, YIELD]);
    assert_eq!(words(&vm_with(None, true, false), &CLOCK), [0b1, 0, 0, 0]);
    assert_eq!(
        words(&vm_with(Some(Variant::SeedV2), true, true), &CLOCK),
        [0b11, 0b11, 0, YIELD]
    );
    // The answer is the table's, which agrees with the constants.
    let seed_v2 = lock_vm(Variant::SeedV2);
    let expected = kvm::KvmFeatures::new()
        .with(func::PV_LOCK_FEATURES)
        .with(func::PV_LOCK_PREEMPTED)
        .with(func::PV_SCHED_YIELD_TO)
        .with(func::PV_SCHED_KICK_LEND);
    assert_eq!(seed_v2.table.kvm_features(), expected);
    assert_eq!(words(&seed_v2, &CLOCK), expected.to_regs());
    // No wall clock: PTP is not advertised; seed-v3's bit 1 is unaffected.
    let no_clock = FakeVm { wall: None };
    assert_eq!(words(&vm_with(None, true, true), &no_clock), [0b1, 0, 0, 0]);
    assert_eq!(
        words(&lock_vm(Variant::SeedV3), &no_clock),
        [0b11, 0, 0, YIELD]
    );
}

#[test]
fn ptp_returns_wall_clock_and_counter() {
    let vm = vm_with(None, false, true);
    let ptp = |view: &FakeVm, w1: u64| call_from(&vm.table, view, 1, abi::KVM_PTP, &[w1]);
    let wall = [WALL_NS >> 32, WALL_NS & 0xFFFF_FFFF];
    // w1 = 0: virtual counter; w1 = 1: physical.
    assert_eq!(
        ptp(&CLOCK, 0),
        (
            [wall[0], wall[1], VIRT_COUNT >> 32, VIRT_COUNT & 0xFFFF_FFFF],
            Next::Resume
        )
    );
    assert_eq!(
        ptp(&CLOCK, 1).0,
        [wall[0], wall[1], PHYS_COUNT >> 32, PHYS_COUNT & 0xFFFF_FFFF]
    );
    assert_eq!(
        ptp(&CLOCK, 1).0,
        [0x1234_5678, 0x9ABC_DEF0, 0xAB, 0xCDEF_0123]
    );
    // SMC32: only W1 counts.
    assert_eq!(ptp(&CLOCK, 0xFFFF_FFFF_0000_0001).0, ptp(&CLOCK, 1).0);
    // Bad w1: -1, X1..X3 zero.
    for w1 in [2, 0xFFFF_FFFF, 0x8000_0000] {
        assert_eq!(ptp(&CLOCK, w1), ([NOT_SUPPORTED, 0, 0, 0], Next::Resume));
    }
    // No wall clock: -1.
    let no_clock = FakeVm { wall: None };
    assert_eq!(ptp(&no_clock, 0).0, [NOT_SUPPORTED, 0, 0, 0]);
    // Not discoverable through SMCCC_ARCH_FEATURES (KVM_FEATURES bit 1 is).
    assert_eq!(arch_features(&vm, abi::KVM_PTP), NOT_SUPPORTED);
    // A VM without PTP (or seed-v3) answers -1.
    let none = vm_with(None, true, false);
    assert_eq!(x0(&none, abi::KVM_PTP, &[0]), NOT_SUPPORTED);
}

#[test]
fn kvm_answers_only_what_kvm_answers() {
    // Vendor-range Call Count / Revision: KVM implements neither.
    let vm = vm_with(Some(Variant::SeedV2), true, true);
    for fid in [0x8600FF00, 0x8600FF03, 0xC600FF01, 0x86000002, 0x86000040] {
        assert_eq!(x0(&vm, fid, &[]), NOT_SUPPORTED, "{fid:#x}");
    }
    for fid in [abi::CALL_UID, abi::KVM_FEATURES, abi::KVM_PTP] {
        assert_eq!(arch_features(&vm, fid), NOT_SUPPORTED, "{fid:#x}");
    }
}

#[test]
fn seed_v2() {
    let vm = lock_vm(Variant::SeedV2);
    let features = |w1: u64| x0(&vm, abi::SEED_V2_FEATURES, &[w1]);
    assert_eq!(features(u64::from(abi::SEED_V2_FEATURES)), 0);
    assert_eq!(features(u64::from(abi::SEED_V2_PREEMPTED)), 0);
    // The queried id is W1.
    assert_eq!(
        features(0xFFFF_FFFF_0000_0000 | u64::from(abi::SEED_V2_PREEMPTED)),
        0
    );
    for other in [
        0,
        abi::SEED_V3,
        0xC6000022,
        abi::OE_FEATURES,
        abi::PV_TIME_ST,
    ] {
        assert_eq!(features(u64::from(other)), NOT_SUPPORTED, "{other:#x}");
    }
    // PREEMPTED: each vCPU its own 64-byte slot in the area, all 64 bits.
    for caller in 0..VCPUS {
        let ipa = x0_from(&vm, caller, abi::SEED_V2_PREEMPTED, &[7, 7]);
        assert_eq!(ipa, AREA.base + 64 * u64::from(caller));
        assert_eq!(
            vm.registry.lock_record(caller),
            Some(LockRecord { ipa, width: 8 })
        );
    }
    assert_eq!(
        vm.registry.record_stats(),
        RecordStats {
            handed_out: u32::from(VCPUS),
            ..RecordStats::default()
        }
    );
    // Both ids discoverable through SMCCC_ARCH_FEATURES.
    assert_eq!(arch_features(&vm, abi::SEED_V2_FEATURES), 0);
    assert_eq!(arch_features(&vm, abi::SEED_V2_PREEMPTED), 0);
}

#[test]
fn seed_v3() {
    let vm = lock_vm(Variant::SeedV3);
    let call = |caller: u16, x1: u64| x0_from(&vm, caller, abi::SEED_V3, &[x1]);
    assert_eq!(call(0, seed_v3::ARG_FEATURES), 0);
    assert_eq!(call(0, 0), 0);
    for caller in 0..VCPUS {
        // A full 64-bit IPA although the call is SMC32.
        let ipa = call(caller, 1);
        assert_eq!(ipa, AREA.base + 64 * u64::from(caller));
        assert!(ipa > u64::from(u32::MAX));
    }
    // W1 only: high junk ignored.
    assert_eq!(call(2, 0xDEAD_BEEF_0000_0001), AREA.base + 128);
    for bad in [2, 3, 0xFFFF_FFFF] {
        assert_eq!(call(0, bad), NOT_SUPPORTED);
    }
    // Found through KVM_FEATURES, not SMCCC_ARCH_FEATURES.
    assert_eq!(arch_features(&vm, abi::SEED_V3), NOT_SUPPORTED);
}

#[test]
fn hypervisor_placed_preempted_needs_a_record() {
    // A caller the registry does not know gets -1, never someone's IPA.
    for variant in [Variant::SeedV2, Variant::SeedV3] {
        let config = PvConfig {
            lock: Some(variant),
            ..PvConfig::NONE
        };
        let registry = Arc::new(PvRegistry::new(2, config, Some(AREA)).unwrap());
        let table = dispatcher_for(&config, registry, CpuVulnerabilities::UNAFFECTED).unwrap();
        let (fid, x1) = match variant {
            Variant::SeedV2 => (abi::SEED_V2_PREEMPTED, 0),
            _ => (abi::SEED_V3, 1),
        };
        assert_eq!(
            call_from(&table, &CLOCK, 1, fid, &[x1]).0[0],
            AREA.base + 64
        );
        assert_eq!(call_from(&table, &CLOCK, 2, fid, &[x1]).0[0], NOT_SUPPORTED);
    }
}

/// IPAs a guest may not choose for its record.
fn bad_record_ipas() -> [u64; 9] {
    [
        RAM_BASE + 0x1008,          // unaligned
        RAM_BASE + 0x103F,          // unaligned
        RAM_BASE - 64,              // below RAM
        RAM_BASE + RAM_SIZE,        // above RAM
        0,                          // not RAM
        u64::MAX,                   // GPA_INVALID
        !63,                        // would wrap
        AREA.base,                  // the hypervisor's PV area
        AREA.base + AREA.size - 64, // its last record slot
    ]
}

/// openEuler IPA_INIT and Anolis PREEMPTED: validation, replacement.
fn guest_registration(variant: Variant, register: u32) {
    // With PV time on too, so that a PV area exists to be refused.
    let vm = vm_with(Some(variant), true, false);
    let ok = RAM_BASE + 0x10_0000;
    assert_eq!(vm.registry.lock_record(1), None, "before registration");
    for bad in bad_record_ipas() {
        assert_eq!(x0_from(&vm, 1, register, &[bad]), NOT_SUPPORTED, "{bad:#x}");
        assert_eq!(vm.registry.lock_record(1), None);
    }
    assert_eq!(x0_from(&vm, 1, register, &[ok]), 0);
    assert_eq!(
        vm.registry.lock_record(1),
        Some(LockRecord { ipa: ok, width: 4 })
    );
    // Per vCPU: the others are still unregistered.
    assert_eq!(vm.registry.lock_record(0), None);
    // A refused attempt keeps the earlier record; a good one replaces it.
    assert_eq!(x0_from(&vm, 1, register, &[ok + 1]), NOT_SUPPORTED);
    assert_eq!(vm.registry.lock_record(1).unwrap().ipa, ok);
    assert_eq!(x0_from(&vm, 1, register, &[RAM_BASE + RAM_SIZE - 64]), 0);
    assert_eq!(
        vm.registry.lock_record(1).unwrap().ipa,
        RAM_BASE + RAM_SIZE - 64
    );
    // Reset forgets guest-chosen registrations.
    x0_from(&vm, 2, register, &[ok + 64]);
    vm.registry.reset_vcpu(1);
    assert_eq!(vm.registry.lock_record(1), None);
    assert_eq!(vm.registry.lock_record(2).unwrap().ipa, ok + 64);
    vm.registry.reset_all();
    assert!((0..VCPUS).all(|v| vm.registry.lock_record(v).is_none()));
    // The summary's counts: every guest call, none of el2's own resets.
    let refused = bad_record_ipas().len() as u32 + 1;
    assert_eq!(
        vm.registry.record_stats(),
        RecordStats {
            handed_out: 0,
            registered: 3,
            refused,
            released: 0,
        }
    );
}

/// A kick, `kick` on a `variant` VM: 0 and `Next::Kick` of any vCPU of
/// the VM, lending exactly when `lend` (PV_SCHED_KICK_LEND; KICK_CPU only
/// wakes), from every caller; -1 and no action for no such vCPU.
fn kick(variant: Variant, kick: u32, lend: bool) {
    let vm = lock_vm(variant);
    for (caller, target) in (0..VCPUS).flat_map(|c| (0..VCPUS).map(move |t| (c, t))) {
        let (x, action) = call_from(&vm.table, &CLOCK, caller, kick, &[u64::from(target)]);
        assert_eq!(x, [0, 0, 0, 0], "{variant:?} {caller} -> {target}");
        assert_eq!(
            action,
            Next::Kick {
                target: VcpuId {
                    vm: VM,
                    index: target
                },
                lend,
            }
        );
    }
    // No such vCPU: -1 and no action. X1 is taken whole (SMC64).
    for bad in [
        u64::from(VCPUS),
        0x1_0000,
        0x1_0000_0000,
        0x1_0000_0001,
        u64::MAX,
    ] {
        assert_eq!(
            call_from(&vm.table, &CLOCK, 1, kick, &[bad]),
            ([NOT_SUPPORTED, 0, 0, 0], Next::Resume),
            "{bad:#x}"
        );
    }
}

#[test]
fn openeuler() {
    let vm = lock_vm(Variant::OpenEuler);
    let features = |w1: u32| x0(&vm, abi::OE_FEATURES, &[u64::from(w1)]);
    for id in [
        abi::OE_FEATURES,
        abi::OE_IPA_INIT,
        abi::OE_IPA_RELEASE,
        abi::OE_KICK_CPU,
    ] {
        assert_eq!(features(id), 0, "{id:#x}");
    }
    for other in [0xC5000094, abi::ANOLIS_PREEMPTED, abi::PV_TIME_FEATURES, 0] {
        assert_eq!(features(other), NOT_SUPPORTED, "{other:#x}");
    }
    guest_registration(Variant::OpenEuler, abi::OE_IPA_INIT);
    // IPA_RELEASE forgets the caller's record only, and always answers 0.
    let ok = RAM_BASE + 0x2000;
    assert_eq!(x0_from(&vm, 3, abi::OE_IPA_RELEASE, &[]), 0);
    assert_eq!(x0_from(&vm, 3, abi::OE_IPA_INIT, &[ok]), 0);
    assert_eq!(x0_from(&vm, 2, abi::OE_IPA_INIT, &[ok + 64]), 0);
    assert_eq!(x0_from(&vm, 3, abi::OE_IPA_RELEASE, &[ok + 64]), 0);
    assert_eq!(vm.registry.lock_record(3), None);
    assert_eq!(vm.registry.lock_record(2).unwrap().ipa, ok + 64);
    // Two releases are counted, the first of them with nothing registered.
    assert_eq!(
        vm.registry.record_stats(),
        RecordStats {
            registered: 2,
            released: 2,
            ..RecordStats::default()
        }
    );
    kick(Variant::OpenEuler, abi::OE_KICK_CPU, false);
    // Probed with SMCCC_ARCH_FEATURES(0xC5000090) only.
    assert_eq!(arch_features(&vm, abi::OE_FEATURES), 0);
    for id in [abi::OE_IPA_INIT, abi::OE_IPA_RELEASE, abi::OE_KICK_CPU] {
        assert_eq!(arch_features(&vm, id), NOT_SUPPORTED, "{id:#x}");
    }
}

#[test]
fn anolis() {
    let vm = lock_vm(Variant::Anolis);
    for features in [abi::ANOLIS_FEATURES, abi::ANOLIS_QSPINLOCK_FEATURES] {
        for id in [
            abi::ANOLIS_FEATURES,
            abi::ANOLIS_PREEMPTED,
            abi::ANOLIS_QSPINLOCK_FEATURES,
            abi::ANOLIS_KICK_CPU,
        ] {
            assert_eq!(
                x0(&vm, features, &[u64::from(id)]),
                0,
                "{features:#x}({id:#x})"
            );
        }
        for other in [abi::OE_KICK_CPU, abi::SEED_V2_FEATURES, 0xC60000B3] {
            assert_eq!(x0(&vm, features, &[u64::from(other)]), NOT_SUPPORTED);
        }
    }
    guest_registration(Variant::Anolis, abi::ANOLIS_PREEMPTED);
    kick(Variant::Anolis, abi::ANOLIS_KICK_CPU, false);
    // Its guests probe both FEATURES calls with SMCCC_ARCH_FEATURES.
    assert_eq!(arch_features(&vm, abi::ANOLIS_FEATURES), 0);
    assert_eq!(arch_features(&vm, abi::ANOLIS_QSPINLOCK_FEATURES), 0);
    assert_eq!(arch_features(&vm, abi::ANOLIS_PREEMPTED), NOT_SUPPORTED);
    assert_eq!(arch_features(&vm, abi::ANOLIS_KICK_CPU), NOT_SUPPORTED);
}

#[test]
fn pv_time() {
    let vm = vm_with(None, true, false);
    let features = |w1: u64| x0(&vm, abi::PV_TIME_FEATURES, &[w1]);
    assert_eq!(features(u64::from(abi::PV_TIME_FEATURES)), 0);
    assert_eq!(features(u64::from(abi::PV_TIME_ST)), 0);
    assert_eq!(
        features(0xFFFF_FFFF_0000_0000 | u64::from(abi::PV_TIME_ST)),
        0
    );
    for other in [0xC5000022, abi::OE_FEATURES, abi::SEED_V2_FEATURES, 0] {
        assert_eq!(features(u64::from(other)), NOT_SUPPORTED, "{other:#x}");
    }
    for caller in 0..VCPUS {
        let ipa = x0_from(&vm, caller, abi::PV_TIME_ST, &[]);
        assert_eq!(Some(ipa), vm.registry.steal_record(caller));
        assert_eq!(ipa, AREA.base + 64 * u64::from(caller));
    }
    // After the seed-v2 records when both are on.
    let both = vm_with(Some(Variant::SeedV2), true, false);
    assert_eq!(
        x0_from(&both, 1, abi::PV_TIME_ST, &[]),
        AREA.base + 64 * u64::from(VCPUS) + 64
    );
    // As KVM: ARCH_FEATURES(PV_TIME_FEATURES) = 0, PV_TIME_ST not probed so.
    assert_eq!(arch_features(&vm, abi::PV_TIME_FEATURES), 0);
    assert_eq!(arch_features(&vm, abi::PV_TIME_ST), NOT_SUPPORTED);
}

#[test]
fn services_answer_only_on_vms_that_enabled_them() {
    for config in PvConfig::every_valid() {
        let vm = vm_with(config.lock, config.steal_time, config.ptp);
        let mine: Vec<u32> = config
            .lock
            .map_or(&[][..], |v| v.function_ids())
            .iter()
            .map(|f| f.raw())
            .collect();
        for fid in abi::PV_LOCK_IDS {
            if mine.contains(&fid) || (fid == abi::KVM_PTP && config.ptp) {
                continue;
            }
            // Every PV-lock id of another variant: -1 whatever the
            // arguments, and not discoverable.
            for args in [[0u64, 0], [1, 0], [RAM_BASE, 0], [u64::from(fid), 0]] {
                assert_eq!(
                    call_from(&vm.table, &CLOCK, 0, fid, &args),
                    ([NOT_SUPPORTED, 0, 0, 0], Next::Resume),
                    "{config:?} {fid:#x}"
                );
            }
            assert_eq!(arch_features(&vm, fid), NOT_SUPPORTED);
        }
        if !config.steal_time {
            for fid in [abi::PV_TIME_FEATURES, abi::PV_TIME_ST] {
                assert_eq!(x0(&vm, fid, &[u64::from(fid)]), NOT_SUPPORTED);
                assert_eq!(arch_features(&vm, fid), NOT_SUPPORTED);
            }
        }
        assert!(vm.registry.lock_record(0).is_some() == config.hypervisor_places_lock());
    }
}

#[test]
fn each_vm_has_its_own_registrations() {
    let a = lock_vm(Variant::OpenEuler);
    let b = lock_vm(Variant::OpenEuler);
    assert_eq!(x0_from(&a, 1, abi::OE_IPA_INIT, &[RAM_BASE]), 0);
    assert_eq!(a.registry.lock_record(1).unwrap().ipa, RAM_BASE);
    assert_eq!(b.registry.lock_record(1), None);
    // And its own counters.
    assert_eq!(a.table.counters().count(openeuler::PV_SCHED_IPA_INIT), 1);
    assert_eq!(b.table.counters().count(openeuler::PV_SCHED_IPA_INIT), 0);
}

#[test]
fn seed_v3_and_ptp_are_refused_together() {
    let config = PvConfig {
        lock: Some(Variant::SeedV3),
        steal_time: false,
        ptp: true,
    };
    // The registry refuses the configuration already...
    assert!(matches!(
        PvRegistry::new(VCPUS, config, Some(AREA)),
        Err(ConfigError::PtpClash { .. })
    ));
    // ...and so does the table, even with a registry built for something
    // else.
    let seed_v3 = PvConfig {
        ptp: false,
        ..config
    };
    let registry = Arc::new(PvRegistry::new(VCPUS, seed_v3, Some(AREA)).unwrap());
    assert_eq!(
        dispatcher_for(&config, registry.clone(), CpuVulnerabilities::UNAFFECTED).unwrap_err(),
        TableError::Config(ConfigError::PtpClash {
            variant: Variant::SeedV3
        })
    );
    // A registry built for another configuration is refused.
    let other = PvConfig {
        steal_time: true,
        ..seed_v3
    };
    assert_eq!(
        dispatcher_for(&other, registry.clone(), CpuVulnerabilities::UNAFFECTED).unwrap_err(),
        TableError::Config(ConfigError::RegistryMismatch {
            registry: seed_v3,
            config: other
        })
    );
    // Registering both by hand: `register` refuses the second claimant of
    // 0x86000001 and leaves the table as it was.
    let mut table = Dispatcher::standard(CpuVulnerabilities::UNAFFECTED);
    table.register(Box::new(KvmService::new(true))).unwrap();
    assert_eq!(
        table.register(Box::new(PvLockService::new(Variant::SeedV3, registry))),
        Err(RegisterError::Conflict {
            fid: kvm::PTP,
            owner: "kvm",
            refused: "pv-lock(seed-v3)",
        })
    );
    assert_eq!(table.services().count(), 3);
    let (x, _) = call_from(&table, &CLOCK, 0, abi::KVM_PTP, &[1]);
    assert_eq!(x[0], WALL_NS >> 32, "still PTP");
    assert!(
        alloc::format!("{}", TableError::from(RegisterError::NotFastCall(kvm::PTP)))
            .contains("0x86000001")
    );
}

#[test]
fn no_register_contents_make_a_pv_service_panic() {
    let tables = [
        vm_with(Some(Variant::OpenEuler), true, true),
        vm_with(Some(Variant::Anolis), false, true),
        vm_with(Some(Variant::SeedV2), true, true),
        vm_with(Some(Variant::SeedV3), true, false),
    ];
    let views = [CLOCK, FakeVm { wall: None }];
    let mut rng = prng::Rng::new(0x9E37_79B9_7F4A_7C15);
    let mut random = move || rng.next_u64();
    let interesting = [
        0,
        1,
        2,
        u64::from(VCPUS),
        u64::MAX,
        RAM_BASE,
        RAM_BASE + RAM_SIZE - 64,
        AREA.base,
        0x8000_0000_0000_0000,
    ];
    let ids: Vec<u32> = abi::PV_LOCK_IDS
        .iter()
        .copied()
        .chain([
            abi::CALL_UID,
            abi::KVM_FEATURES,
            abi::PV_TIME_FEATURES,
            abi::PV_TIME_ST,
            abi::YIELD_TO,
            abi::ARCH_FEATURES,
        ])
        .collect();
    for i in 0..20_000 {
        let vm = &tables[i % tables.len()];
        let view = &views[(i / 7) % 2];
        let fid = ids[random() as usize % ids.len()];
        let mut arg = || {
            let r = random();
            if r % 2 == 0 {
                interesting[(r >> 8) as usize % interesting.len()] ^ (r >> 40 & 1)
            } else {
                r
            }
        };
        let args = [arg(), arg(), arg()];
        // Callers the registry does not know, too.
        let caller = (random() % (u64::from(VCPUS) + 2)) as u16;
        call_from(&vm.table, view, caller, fid, &args);
    }
}

/// PV_SCHED_YIELD_TO: on every VM with a PV-lock variant, X0 = 1 ("not
/// yielded" until the runner (`el2::run`) has yielded) and `Next::YieldTo` for a
/// sibling; -3 for the caller itself; -1 for no such vCPU; nothing on VMs
/// without PV-lock.
#[test]
fn pv_sched_yield_to() {
    for variant in Variant::ALL {
        let vm = lock_vm(variant);
        for caller in 0..VCPUS {
            for target in 0..VCPUS {
                let (x, action) = call_from(
                    &vm.table,
                    &CLOCK,
                    caller,
                    abi::YIELD_TO,
                    &[u64::from(target)],
                );
                if target == caller {
                    assert_eq!(x, [(-3i64) as u64, 0, 0, 0]);
                    assert_eq!(action, Next::Resume);
                } else {
                    assert_eq!(x, [1, 0, 0, 0], "{variant:?} {caller} -> {target}");
                    assert_eq!(
                        action,
                        Next::YieldTo {
                            target: VcpuId {
                                vm: VM,
                                index: target
                            }
                        }
                    );
                }
            }
        }
        // No such vCPU: -1 and no action. X1 is taken whole (SMC64).
        for bad in [
            u64::from(VCPUS),
            0x1_0000,
            0x1_0000_0001,
            0xFFFF_FFFF_0000_0002,
            u64::MAX,
        ] {
            assert_eq!(
                call_from(&vm.table, &CLOCK, 1, abi::YIELD_TO, &[bad]),
                ([NOT_SUPPORTED, 0, 0, 0], Next::Resume),
                "{bad:#x}"
            );
        }
        // A caller the VM view does not know still cannot name a target
        // outside the VM.
        let (x, action) = call_from(&vm.table, &CLOCK, VCPUS + 1, abi::YIELD_TO, &[0]);
        assert_eq!(x[0], 1);
        assert_eq!(
            action,
            Next::YieldTo {
                target: VcpuId { vm: VM, index: 0 }
            }
        );
        // Discoverable both ways.
        assert_eq!(arch_features(&vm, abi::YIELD_TO), 0);
        assert!(vm.table.kvm_features().contains(func::PV_SCHED_YIELD_TO));
        assert_eq!(
            vm.table.counters().count(directed_yield::PV_SCHED_YIELD_TO),
            u64::from(VCPUS) * u64::from(VCPUS) + 5 + 1
        );
        // The variant's own features call does not claim it.
        let own_features = match variant {
            Variant::SeedV2 => Some(abi::SEED_V2_FEATURES),
            Variant::OpenEuler => Some(abi::OE_FEATURES),
            Variant::Anolis => Some(abi::ANOLIS_FEATURES),
            Variant::SeedV3 => None,
        };
        if let Some(features) = own_features {
            assert_eq!(
                x0(&vm, features, &[u64::from(abi::YIELD_TO)]),
                NOT_SUPPORTED
            );
        }
    }
    // VMs without PV-lock: not offered, not advertised.
    for config in PvConfig::every_valid()
        .into_iter()
        .filter(|c| c.lock.is_none())
    {
        let vm = vm_with(config.lock, config.steal_time, config.ptp);
        assert_eq!(
            call_from(&vm.table, &CLOCK, 0, abi::YIELD_TO, &[1]),
            ([NOT_SUPPORTED, 0, 0, 0], Next::Resume),
            "{config:?}"
        );
        assert_eq!(arch_features(&vm, abi::YIELD_TO), NOT_SUPPORTED);
        assert!(!vm.table.kvm_features().contains(func::PV_SCHED_YIELD_TO));
    }
}

/// PV_SCHED_KICK_LEND: on every VM with a PV-lock variant, 0 and a kick
/// that lends (`Next::Kick` with `lend`) of any vCPU of the VM, the
/// caller's own included (only its kicked flag is set then); -1 for no
/// such vCPU; discoverable both ways; nothing on VMs without PV-lock.
/// KICK_CPU, by contrast, never lends (`kick`, above).
#[test]
fn pv_sched_kick_lend() {
    let kick_lend = directed_yield::PV_SCHED_KICK_LEND.raw();
    for variant in Variant::ALL {
        kick(variant, kick_lend, true);
        let vm = lock_vm(variant);
        assert_eq!(arch_features(&vm, kick_lend), 0);
        assert!(vm.table.kvm_features().contains(func::PV_SCHED_KICK_LEND));
    }
    for config in PvConfig::every_valid()
        .into_iter()
        .filter(|c| c.lock.is_none())
    {
        let vm = vm_with(config.lock, config.steal_time, config.ptp);
        assert_eq!(
            call_from(&vm.table, &CLOCK, 0, kick_lend, &[1]),
            ([NOT_SUPPORTED, 0, 0, 0], Next::Resume),
            "{config:?}"
        );
        assert_eq!(arch_features(&vm, kick_lend), NOT_SUPPORTED);
        assert!(!vm.table.kvm_features().contains(func::PV_SCHED_KICK_LEND));
    }
}

/// The project's calls' old numbers, inside pKVM's reserved range (0x22
/// and 0x23, bits 34 and 35), are retired: on every VM configuration, the
/// one that has the directed-yield call included, each answers -1 like an
/// id nobody implements, SMCCC_ARCH_FEATURES says -1, and KVM_FEATURES
/// has neither bit.
#[test]
fn the_retired_numbers_answer_not_supported() {
    let unknown = 0xC600_0024;
    for config in PvConfig::every_valid() {
        let vm = vm_with(config.lock, config.steal_time, config.ptp);
        for retired in [abi::RETIRED_YIELD_TO, abi::RETIRED_SET_WFX_POLICY] {
            for args in [[1, 0, 0], [0, u64::MAX, 1]] {
                let answer = call_from(&vm.table, &CLOCK, 0, retired, &args);
                assert_eq!(
                    answer,
                    ([NOT_SUPPORTED, 0, 0, 0], Next::Resume),
                    "{config:?} {retired:#x}"
                );
                assert_eq!(answer, call_from(&vm.table, &CLOCK, 0, unknown, &args));
            }
            assert_eq!(arch_features(&vm, retired), NOT_SUPPORTED, "{config:?}");
        }
        let features = vm.table.kvm_features();
        assert!(
            !features.contains(34) && !features.contains(35),
            "{config:?}"
        );
    }
}

/// The dispatcher's shortcut for PV_SCHED_YIELD_TO (the runner's exit
/// path takes it before the general dispatch) answers and counts every
/// call exactly as `dispatch` does, touches nothing for any other call,
/// and is not there on a VM without the service.
#[test]
fn the_directed_yield_shortcut_answers_as_dispatch_does() {
    let regs_for = |x0: u64, x1: u64| GuestRegs {
        x: core::array::from_fn(|n| match n {
            0 => x0,
            1 => x1,
            _ => 0xA5A5_0000_0000_0000 | n as u64,
        }),
        pc: 0xFFFF_8000_0000_1000,
        pstate: 0x3C5,
        ..GuestRegs::default()
    };
    let yield_x0 = u64::from(abi::YIELD_TO);
    let targets = [
        0,
        1,
        u64::from(VCPUS - 1),
        u64::from(VCPUS),
        0x1_0000,
        0x1_0000_0001,
        u64::MAX,
    ];
    for variant in Variant::ALL {
        let vm = lock_vm(variant);
        for caller in 0..VCPUS + 2 {
            let caller = VcpuId {
                vm: VM,
                index: caller,
            };
            // SMCCC reads W0 only and ignores the SVE hint (bit 16).
            for (x0, &x1) in [
                yield_x0,
                0xdead_beef_0000_0000 | yield_x0,
                yield_x0 | 1 << 16,
            ]
            .into_iter()
            .flat_map(|x0| targets.iter().map(move |x1| (x0, x1)))
            {
                let mut slow = regs_for(x0, x1);
                let slow_next = vm.table.dispatch(caller, &mut slow, &CLOCK);
                let counted = vm.table.counters().count(directed_yield::PV_SCHED_YIELD_TO);
                let mut fast = regs_for(x0, x1);
                let fast_next = vm
                    .table
                    .directed_yield(caller, &mut fast, CLOCK.vcpu_count());
                assert_eq!(
                    fast_next,
                    Some(slow_next),
                    "{variant:?} {caller} -> {x1:#x}"
                );
                assert_eq!(fast, slow, "{variant:?} {caller} -> {x1:#x}");
                assert_eq!(
                    vm.table.counters().count(directed_yield::PV_SCHED_YIELD_TO),
                    counted + 1,
                    "counted once"
                );
            }
        }
        // Any other call, the yield's SMC32 twin included: not taken,
        // nothing written or counted.
        for x0 in [
            u64::from(abi::OE_KICK_CPU),
            u64::from(abi_arch::SMCCC_VERSION.raw()),
            yield_x0 + 1,
            yield_x0 & !(1 << 30),
        ] {
            let mut regs = regs_for(x0, 1);
            let before = regs.clone();
            let total = vm.table.counters().total();
            assert_eq!(
                vm.table
                    .directed_yield(VcpuId { vm: VM, index: 0 }, &mut regs, VCPUS),
                None
            );
            assert_eq!(regs, before, "{x0:#x}");
            assert_eq!(vm.table.counters().total(), total, "{x0:#x}");
        }
    }
    for config in PvConfig::every_valid()
        .into_iter()
        .filter(|c| c.lock.is_none())
    {
        let vm = vm_with(config.lock, config.steal_time, config.ptp);
        let mut regs = regs_for(yield_x0, 1);
        let before = regs.clone();
        assert_eq!(
            vm.table
                .directed_yield(VcpuId { vm: VM, index: 0 }, &mut regs, VCPUS),
            None
        );
        assert_eq!(regs, before, "{config:?}");
    }
}

#[test]
fn pv_sched_yield_to_answers_match_the_abi_constants() {
    assert_eq!(directed_yield::YIELDED, 0);
    assert_eq!(pvlock_abi::smccc::ret_to_x0(directed_yield::NOT_YIELDED), 1);
    assert_eq!(
        pvlock_abi::smccc::ret_to_x0(directed_yield::UNKNOWN_VCPU),
        NOT_SUPPORTED
    );
    assert_eq!(
        pvlock_abi::smccc::ret_to_x0(directed_yield::TO_SELF),
        (-3i64) as u64
    );
    // Registering it twice is refused like any other id clash.
    let mut table = Dispatcher::new();
    table.register(Box::new(PvYieldService::new())).unwrap();
    assert_eq!(
        table.register(Box::new(PvYieldService::new())),
        Err(RegisterError::Conflict {
            fid: directed_yield::PV_SCHED_YIELD_TO,
            owner: "pv-yield",
            refused: "pv-yield",
        })
    );
}

#[test]
fn constant_replies_are_exactly_what_dispatch_answers() {
    use pvlock_abi::arch::{SMCCC_ARCH_FEATURES, SMCCC_VERSION};
    use pvlock_abi::kvm::{CALL_UID, FEATURES};
    use pvlock_abi::psci::PSCI_VERSION;
    for config in PvConfig::every_valid() {
        let vm = vm_with(config.lock, config.steal_time, config.ptp);
        let mut constants = 0;
        for fid in [SMCCC_VERSION, PSCI_VERSION, CALL_UID, FEATURES] {
            // KVM_FEATURES follows the wall clock when PTP is offered.
            let expected_constant = !(fid == FEATURES && config.ptp);
            let before = vm.table.counters().count(fid);
            let fast = vm.table.constant_reply(u64::from(fid.raw())).copied();
            assert_eq!(fast.is_some(), expected_constant, "{fid:?} with {config:?}");
            // The exit fast path's answer: the same reply, counted once, in
            // the caller's row.
            let mut x = [u64::from(fid.raw()), 7, 8, 9];
            let answered = vm.table.constants().answer(&mut x, vm.table.vcpu_counts(1));
            assert_eq!(answered, expected_constant, "{fid:?} with {config:?}");
            if let Some(fast) = fast {
                constants += 1;
                assert_eq!(x, fast);
                assert_eq!(vm.table.counters().count(fid), before + 1, "counted");
                let (slow, action) = call_from(&vm.table, &CLOCK, 0, fid.raw(), &[]);
                assert_eq!(action, Next::Resume);
                assert_eq!(fast, slow, "{fid:?} with {config:?}");
                // Garbage in the upper half of W0's register and in the
                // arguments changes nothing: the reply is constant.
                let dirty = 0xdead_beef_0000_0000 | u64::from(fid.raw());
                if fid.is_smc64() {
                    assert_eq!(vm.table.constant_reply(dirty), None);
                } else {
                    assert_eq!(vm.table.constant_reply(dirty), Some(&fast));
                }
            }
        }
        assert!(constants >= 3);
        // Calls that read arguments or state are never constant.
        for fid in [
            SMCCC_ARCH_FEATURES,
            pvlock_abi::directed_yield::PV_SCHED_YIELD_TO,
        ] {
            assert_eq!(vm.table.constant_reply(u64::from(fid.raw())), None);
        }
    }
}

/// Every table a valid configuration builds finds each of its calls at
/// its home slot: the route look-up on every hypercall reads one slot.
#[test]
fn every_route_index_is_collision_free() {
    for config in PvConfig::every_valid() {
        let vm = vm_with(config.lock, config.steal_time, config.ptp);
        let table = &vm.table;
        assert!(
            table.index.is_collision_free(&table.routes),
            "{config:?}: {} routes",
            table.routes.len()
        );
        for route in &table.routes {
            assert_eq!(table.route(route.fid).map(|r| r.fid), Some(route.fid));
        }
    }
}
