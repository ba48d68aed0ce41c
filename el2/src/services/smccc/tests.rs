//! Dispatcher, Arm architecture and PSCI tests against a fake VM.

use super::*;
use alloc::vec;
use alloc::vec::Vec;
use pvlock_abi::psci::{self as abi_psci, error};
use pvlock_abi::{arch as abi_arch, kvm, pvtime};

const RAM_BASE: u64 = 0x4000_0000;
const RAM_SIZE: u64 = 0x1000_0000;
const CALLER: VcpuId = VcpuId {
    vm: crate::vcpu::VmId(3),
    index: 0,
};

/// A VM whose vCPU `i` has MPIDR Aff1 = i / 16, Aff0 = i % 16 (the guest-DT
/// rule), with the given power states and one RAM bank.
struct FakeVm {
    states: Vec<PowerState>,
}

impl FakeVm {
    /// `count` vCPUs, vCPU 0 (the caller) on, the rest off.
    fn new(count: usize) -> Self {
        let mut states = vec![PowerState::Off; count];
        states[0] = PowerState::On;
        Self { states }
    }
}

impl VmView for FakeVm {
    fn vcpu_count(&self) -> u16 {
        self.states.len() as u16
    }

    fn mpidr_of(&self, index: u16) -> Mpidr {
        Mpidr::from_affinity(0, 0, (index / 16) as u8, (index % 16) as u8)
    }

    fn power_state(&self, index: u16) -> PowerState {
        self.states[usize::from(index)]
    }

    fn ram_contains(&self, ipa: u64, len: u64) -> bool {
        ipa >= RAM_BASE
            && ipa
                .checked_add(len)
                .is_some_and(|end| end <= RAM_BASE + RAM_SIZE)
    }
}

/// Registers before a call: X1..X3 from `args` (garbage past them), every
/// other register a recognisable pattern.
fn regs_for(x0: u64, args: &[u64]) -> GuestRegs {
    let mut regs = GuestRegs {
        x: core::array::from_fn(|n| 0x5A5A_0000_0000_0000 | n as u64),
        pc: 0xFFFF_8000_1234_5678,
        pstate: 0x3C5,
        ..GuestRegs::default()
    };
    regs.x[0] = x0;
    for (n, arg) in args.iter().enumerate() {
        regs.x[n + 1] = *arg;
    }
    regs
}

/// Dispatches one call and checks the SMCCC register rules: X4..X30, PC and
/// PSTATE untouched. Returns X0..X3 and the action.
fn call_on(table: &Dispatcher, vm: &FakeVm, x0: u64, args: &[u64]) -> ([u64; 4], Next) {
    let mut regs = regs_for(x0, args);
    let before = regs.clone();
    let action = table.dispatch(CALLER, &mut regs, vm);
    assert_eq!(regs.x[4..], before.x[4..], "X4..X30 changed by {x0:#x}");
    assert_eq!((regs.pc, regs.pstate), (before.pc, before.pstate));
    ([regs.x[0], regs.x[1], regs.x[2], regs.x[3]], action)
}

fn standard() -> Dispatcher {
    Dispatcher::standard(CpuVulnerabilities::UNAFFECTED)
}

/// Calls `fid` on a standard table and a 20-vCPU VM; returns X0 and the
/// action, checking X1..X3 were zeroed (every call here returns one value).
fn call(vm: &FakeVm, fid: FunctionId, args: &[u64]) -> (u64, Next) {
    let (x, action) = call_on(&standard(), vm, u64::from(fid.raw()), args);
    assert_eq!(x[1..], [0, 0, 0], "X1..X3 not zeroed by {fid:?}");
    (x[0], action)
}

fn psci_ret(code: i32) -> u64 {
    abi_psci::ret_to_x0(code)
}

const NOT_SUPPORTED: u64 = u64::MAX;

#[test]
fn versions() {
    let vm = FakeVm::new(1);
    assert_eq!(
        call(&vm, abi_psci::PSCI_VERSION, &[7, 7, 7]),
        (0x10001, Next::Resume)
    );
    assert_eq!(
        call(&vm, abi_arch::SMCCC_VERSION, &[7, 7, 7]),
        (0x10001, Next::Resume)
    );
}

#[test]
fn only_w0_selects_the_function() {
    let vm = FakeVm::new(1);
    let table = standard();
    // Bits 63:32 of X0 are ignored.
    let (x, _) = call_on(&table, &vm, 0xDEAD_BEEF_8400_0000, &[]);
    assert_eq!(x[0], 0x10001);
    // So is the SMCCC 1.3 SVE hint (bit 16).
    let (x, _) = call_on(&table, &vm, 0x8401_0000, &[]);
    assert_eq!(x[0], 0x10001);
    assert_eq!(table.counters().count(abi_psci::PSCI_VERSION), 2);
}

#[test]
fn unknown_yielding_and_malformed_ids_are_not_supported() {
    let vm = FakeVm::new(1);
    let table = standard();
    for x0 in [
        0x0000_0000,           // yielding, Arm range
        0x0400_0000,           // PSCI_VERSION with the fast bit clear
        0x8402_0000,           // must-be-zero bit 17 set
        0x8480_0000,           // must-be-zero bit 23 set
        0x8400_0020,           // past the PSCI block
        0x8200_0000,           // SiP
        0x8300_0000,           // OEM
        0xC600_0002,           // KVM vendor range, nothing registered
        0x8600_FF01,           // KVM Call UID, not registered here
        0xBF00_0000,           // Trusted OS
        0xFFFF_FFFF_FFFF_FFFF, // W0 = 0xFFFFFFFF
    ] {
        let (x, action) = call_on(&table, &vm, x0, &[1, 2, 3]);
        assert_eq!(x, [NOT_SUPPORTED, 0, 0, 0], "{x0:#x}");
        assert_eq!(action, Next::Resume);
    }
    let (count, last) = table.counters().unnamed();
    assert_eq!(count, 10);
    // Recorded as decoded: W0 with the SVE hint cleared.
    assert_eq!(last, Some(FunctionId::from_raw(0xFFFE_FFFF)));
    // Named ids that no service owns are counted under their own name.
    assert_eq!(table.counters().count(kvm::CALL_UID), 1);
    assert_eq!(table.counters().total(), 11);
}

#[test]
fn an_empty_table_supports_nothing() {
    let vm = FakeVm::new(1);
    let table = Dispatcher::new();
    for fid in [
        abi_psci::PSCI_VERSION,
        abi_arch::SMCCC_VERSION,
        abi_psci::CPU_ON64,
    ] {
        let (x, action) = call_on(&table, &vm, u64::from(fid.raw()), &[0, RAM_BASE, 0]);
        assert_eq!((x, action), ([NOT_SUPPORTED, 0, 0, 0], Next::Resume));
    }
    assert_eq!(table.kvm_features(), kvm::KvmFeatures::new());
}

#[test]
fn psci_features() {
    let vm = FakeVm::new(1);
    let f = |fid: u64| call(&vm, abi_psci::PSCI_FEATURES, &[fid]).0;
    for fid in [
        abi_psci::PSCI_VERSION,
        abi_psci::CPU_OFF,
        abi_psci::CPU_ON,
        abi_psci::CPU_ON64,
        abi_psci::AFFINITY_INFO,
        abi_psci::AFFINITY_INFO64,
        abi_psci::MIGRATE_INFO_TYPE,
        abi_psci::SYSTEM_OFF,
        abi_psci::SYSTEM_RESET,
        abi_psci::PSCI_FEATURES,
        abi_psci::SYSTEM_RESET2,
        abi_psci::SYSTEM_RESET2_64,
        abi_arch::SMCCC_VERSION,
    ] {
        assert_eq!(f(u64::from(fid.raw())), 0, "{fid:?}");
    }
    // CPU_SUSPEND: feature flags 0 — no OS-initiated mode, original format.
    assert_eq!(f(u64::from(abi_psci::CPU_SUSPEND.raw())), 0);
    assert_eq!(f(u64::from(abi_psci::CPU_SUSPEND64.raw())), 0);
    for fid in [
        abi_psci::MIGRATE,
        abi_psci::MIGRATE64,
        abi_psci::MIGRATE_INFO_UP_CPU,
        abi_psci::MIGRATE_INFO_UP_CPU64,
        abi_psci::SYSTEM_SUSPEND,
        abi_psci::SYSTEM_SUSPEND64,
        abi_psci::CPU_FREEZE,
        abi_psci::CPU_DEFAULT_SUSPEND,
        abi_psci::MEM_PROTECT,
        abi_arch::SMCCC_ARCH_FEATURES,
        FunctionId::from_raw(0xC400_0000), // no SMC64 PSCI_VERSION
        FunctionId::from_raw(0x1234_5678),
    ] {
        assert_eq!(f(u64::from(fid.raw())), NOT_SUPPORTED, "{fid:?}");
    }
    // The queried id is W1: the high half of X1 is ignored.
    assert_eq!(f(0xFFFF_FFFF_8400_0000), 0);
    // SMCCC_VERSION is implemented only if some service answers it.
    let mut psci_only = Dispatcher::new();
    psci_only.register(Box::new(PsciService)).unwrap();
    let (x, _) = call_on(
        &psci_only,
        &vm,
        u64::from(abi_psci::PSCI_FEATURES.raw()),
        &[u64::from(abi_arch::SMCCC_VERSION.raw())],
    );
    assert_eq!(x[0], NOT_SUPPORTED);
}

#[test]
fn psci_features_agrees_with_the_calls() {
    // Every PSCI id: PSCI_FEATURES says implemented exactly when calling it
    // answers something other than NOT_SUPPORTED. (X1 is a valid id so
    // that PSCI_FEATURES itself answers 0; other functions reject it with
    // their own errors.)
    let vm = FakeVm::new(2);
    let x1 = u64::from(abi_psci::PSCI_VERSION.raw());
    for entry in abi_psci::CALLS {
        let features = call(&vm, abi_psci::PSCI_FEATURES, &[u64::from(entry.id.raw())]).0;
        let (answer, _) = call(&vm, entry.id, &[x1, RAM_BASE, 0]);
        assert_eq!(
            features != NOT_SUPPORTED,
            answer != NOT_SUPPORTED,
            "{}",
            entry.name
        );
        assert_eq!(
            features != NOT_SUPPORTED,
            super::psci::implemented(entry.id)
        );
    }
}

#[test]
fn cpu_on_starts_an_off_vcpu() {
    let vm = FakeVm::new(20);
    let entry = RAM_BASE + 0x8_0000;
    let context = 0xAAAA_BBBB_CCCC_DDDD;
    // vCPU 17 is MPIDR Aff1 = 1, Aff0 = 1.
    let (x0, action) = call(&vm, abi_psci::CPU_ON64, &[0x101, entry, context]);
    assert_eq!(x0, 0);
    assert_eq!(
        action,
        Next::PowerOn {
            target: VcpuId {
                vm: CALLER.vm,
                index: 17
            },
            entry,
            context_id: context,
        }
    );
}

#[test]
fn cpu_on_smc32_uses_the_low_32_bits_of_x1_to_x3() {
    let vm = FakeVm::new(20);
    let junk = 0xFFFF_FFFF_0000_0000;
    let (x0, action) = call(
        &vm,
        abi_psci::CPU_ON,
        &[junk | 0x101, junk | (RAM_BASE + 0x100), junk | 0x1234_5678],
    );
    assert_eq!(x0, 0);
    assert_eq!(
        action,
        Next::PowerOn {
            target: VcpuId {
                vm: CALLER.vm,
                index: 17
            },
            entry: RAM_BASE + 0x100,
            context_id: 0x1234_5678,
        }
    );
    // The same registers through the SMC64 id are taken whole: bits above
    // the affinity fields make the MPIDR invalid.
    let (x0, action) = call(&vm, abi_psci::CPU_ON64, &[junk | 0x101, RAM_BASE, 0]);
    assert_eq!(
        (x0, action),
        (psci_ret(error::INVALID_PARAMETERS), Next::Resume)
    );
}

#[test]
fn cpu_on_errors() {
    let mut vm = FakeVm::new(20);
    vm.states[2] = PowerState::On;
    vm.states[3] = PowerState::OnPending;
    let ok_entry = RAM_BASE;
    let cases = [
        // No vCPU 32 (Aff1 = 2), nor anything at Aff2.
        ([0x200, ok_entry], error::INVALID_PARAMETERS),
        ([0x1_0000, ok_entry], error::INVALID_PARAMETERS),
        // Bits outside the affinity fields (here MPIDR.U, bit 30).
        ([0x4000_0001, ok_entry], error::INVALID_PARAMETERS),
        ([2, ok_entry], error::ALREADY_ON),
        ([0, ok_entry], error::ALREADY_ON), // the caller itself
        ([3, ok_entry], error::ON_PENDING),
        // KVM's checks come first: state before entry point.
        ([2, 0x10], error::ALREADY_ON),
        ([1, RAM_BASE - 4], error::INVALID_ADDRESS),
        ([1, RAM_BASE + RAM_SIZE], error::INVALID_ADDRESS),
        // The first instruction must fit.
        ([1, RAM_BASE + RAM_SIZE - 2], error::INVALID_ADDRESS),
        ([1, u64::MAX - 1], error::INVALID_ADDRESS),
    ];
    for ([target, entry], code) in cases {
        for fid in [abi_psci::CPU_ON, abi_psci::CPU_ON64] {
            if !fid.is_smc64() && entry > u64::from(u32::MAX) {
                continue;
            }
            let got = call(&vm, fid, &[target, entry, 0]);
            assert_eq!(
                got,
                (psci_ret(code), Next::Resume),
                "{fid:?} {target:#x} {entry:#x}"
            );
        }
    }
    assert_eq!(PowerState::Off.cpu_on_error(), None);
    assert_eq!(PowerState::On.cpu_on_error(), Some(error::ALREADY_ON));
    assert_eq!(
        PowerState::OnPending.cpu_on_error(),
        Some(error::ON_PENDING)
    );
}

#[test]
fn cpu_off_and_suspend() {
    let vm = FakeVm::new(1);
    assert_eq!(call(&vm, abi_psci::CPU_OFF, &[]), (0, Next::PowerOff));
    for fid in [abi_psci::CPU_SUSPEND, abi_psci::CPU_SUSPEND64] {
        // Any power_state, entry and context: treated as standby (WFI).
        assert_eq!(
            call(&vm, fid, &[0x1_0000, RAM_BASE, 5]),
            (0, Next::WaitForInterrupt { deadline: None })
        );
    }
}

#[test]
fn affinity_info() {
    let mut vm = FakeVm::new(20);
    vm.states[5] = PowerState::OnPending;
    let info = |vm: &FakeVm, fid, target, level| call(vm, fid, &[target, level]).0;
    for fid in [abi_psci::AFFINITY_INFO, abi_psci::AFFINITY_INFO64] {
        // Level 0: one vCPU.
        assert_eq!(info(&vm, fid, 0, 0), 0, "on");
        assert_eq!(info(&vm, fid, 1, 0), 1, "off");
        assert_eq!(info(&vm, fid, 5, 0), 2, "on pending");
        assert_eq!(info(&vm, fid, 0x103, 0), 1, "vCPU 19");
        assert_eq!(
            info(&vm, fid, 0x104, 0),
            psci_ret(error::INVALID_PARAMETERS),
            "no vCPU 20"
        );
        assert_eq!(
            info(&vm, fid, 0x200, 0),
            psci_ret(error::INVALID_PARAMETERS)
        );
        assert_eq!(
            info(&vm, fid, 0x8000_0000, 0),
            psci_ret(error::INVALID_PARAMETERS)
        );
        // Levels 1..=3: every vCPU whose fields from that level up match.
        assert_eq!(info(&vm, fid, 0x105, 1), 1, "cluster 1 is all off");
        assert_eq!(info(&vm, fid, 0x0FF, 1), 0, "cluster 0 holds vCPU 0");
        assert_eq!(
            info(&vm, fid, 0x200, 1),
            psci_ret(error::INVALID_PARAMETERS)
        );
        assert_eq!(info(&vm, fid, 0, 2), 0);
        assert_eq!(info(&vm, fid, 0, 3), 0);
        assert_eq!(info(&vm, fid, 0, 4), psci_ret(error::INVALID_PARAMETERS));
    }
    vm.states[0] = PowerState::Off;
    assert_eq!(
        info(&vm, abi_psci::AFFINITY_INFO64, 0, 1),
        2,
        "only pending in cluster 0"
    );
    vm.states[5] = PowerState::Off;
    assert_eq!(info(&vm, abi_psci::AFFINITY_INFO64, 0, 1), 1);
    vm.states[18] = PowerState::On;
    assert_eq!(info(&vm, abi_psci::AFFINITY_INFO64, 0x100, 1), 0);
    // SMC32: W1 and W2 only.
    let junk = 0xFFFF_FFFF_0000_0000;
    assert_eq!(info(&vm, abi_psci::AFFINITY_INFO, junk | 0x102, junk), 0);
    assert_eq!(
        info(&vm, abi_psci::AFFINITY_INFO64, 0x102, junk),
        psci_ret(error::INVALID_PARAMETERS)
    );
}

#[test]
fn migration_is_not_supported() {
    let vm = FakeVm::new(1);
    assert_eq!(
        call(&vm, abi_psci::MIGRATE_INFO_TYPE, &[]),
        (2, Next::Resume)
    );
    for fid in [
        abi_psci::MIGRATE,
        abi_psci::MIGRATE64,
        abi_psci::MIGRATE_INFO_UP_CPU,
        abi_psci::MIGRATE_INFO_UP_CPU64,
        abi_psci::SYSTEM_SUSPEND,
        abi_psci::SYSTEM_SUSPEND64,
        abi_psci::SYSTEM_OFF2,
    ] {
        assert_eq!(
            call(&vm, fid, &[0, RAM_BASE, 0]),
            (NOT_SUPPORTED, Next::Resume),
            "{fid:?}"
        );
    }
}

#[test]
fn system_off_and_reset() {
    let vm = FakeVm::new(1);
    let failed = psci_ret(error::INTERNAL_FAILURE);
    assert_eq!(call(&vm, abi_psci::SYSTEM_OFF, &[]), (failed, Next::StopVm));
    assert_eq!(
        call(&vm, abi_psci::SYSTEM_RESET, &[]),
        (failed, Next::ResetVm)
    );
    let reset2 = |fid, reset_type| call(&vm, fid, &[reset_type, 0xC00C1E]);
    let invalid = (psci_ret(error::INVALID_PARAMETERS), Next::Resume);
    for fid in [abi_psci::SYSTEM_RESET2, abi_psci::SYSTEM_RESET2_64] {
        for accepted in [0, 0x8000_0000, 0x8000_1234, 0xFFFF_FFFF] {
            assert_eq!(
                reset2(fid, accepted),
                (failed, Next::ResetVm),
                "{accepted:#x}"
            );
        }
        for refused in [1, 2, 0x7FFF_FFFF] {
            assert_eq!(reset2(fid, refused), invalid, "{refused:#x}");
        }
    }
    // SMC32 reads W1; the SMC64 form compares the whole register, as KVM.
    assert_eq!(
        reset2(abi_psci::SYSTEM_RESET2, 0xFFFF_FFFF_0000_0001),
        invalid
    );
    assert_eq!(
        reset2(abi_psci::SYSTEM_RESET2, 0x1_0000_0000),
        (failed, Next::ResetVm)
    );
    assert_eq!(
        reset2(abi_psci::SYSTEM_RESET2_64, 0x1_0000_0001),
        (failed, Next::ResetVm)
    );
}

#[test]
fn arch_features_and_workarounds() {
    let vm = FakeVm::new(1);
    let features = |table: &Dispatcher, fid: FunctionId| {
        call_on(
            table,
            &vm,
            u64::from(abi_arch::SMCCC_ARCH_FEATURES.raw()),
            &[u64::from(fid.raw())],
        )
        .0[0]
    };
    let unaffected = standard();
    assert_eq!(features(&unaffected, abi_arch::SMCCC_VERSION), 0);
    assert_eq!(features(&unaffected, abi_arch::SMCCC_ARCH_FEATURES), 0);
    assert_eq!(
        features(&unaffected, abi_arch::SMCCC_ARCH_SOC_ID),
        NOT_SUPPORTED
    );
    assert_eq!(features(&unaffected, abi_arch::SMCCC_ARCH_WORKAROUND_1), 1);
    assert_eq!(
        features(&unaffected, abi_arch::SMCCC_ARCH_WORKAROUND_2),
        smccc::ret_to_x0(abi_arch::WORKAROUND_NOT_REQUIRED)
    );
    assert_eq!(features(&unaffected, abi_arch::SMCCC_ARCH_WORKAROUND_3), 1);
    // PSCI is discovered through PSCI_FEATURES, not here (as KVM).
    assert_eq!(features(&unaffected, abi_psci::PSCI_VERSION), NOT_SUPPORTED);
    assert_eq!(
        features(&unaffected, pvtime::PV_TIME_FEATURES),
        NOT_SUPPORTED
    );
    // The queried id is W1.
    let (x, _) = call_on(
        &unaffected,
        &vm,
        u64::from(abi_arch::SMCCC_ARCH_FEATURES.raw()),
        &[0x1234_5678_8000_8000],
    );
    assert_eq!(x, [1, 0, 0, 0]);
    // Calling a workaround on an unaffected host is a no-op returning 0.
    for fid in [
        abi_arch::SMCCC_ARCH_WORKAROUND_1,
        abi_arch::SMCCC_ARCH_WORKAROUND_2,
        abi_arch::SMCCC_ARCH_WORKAROUND_3,
    ] {
        let (x, action) = call_on(&unaffected, &vm, u64::from(fid.raw()), &[1]);
        assert_eq!((x, action), ([0, 0, 0, 0], Next::Resume));
    }
    assert_eq!(
        call(&vm, abi_arch::SMCCC_ARCH_SOC_ID, &[0]),
        (NOT_SUPPORTED, Next::Resume)
    );

    // A host that may be affected says so: the guest reports itself
    // vulnerable instead of relying on a mitigation that is not there.
    let vulnerable = Dispatcher::standard(CpuVulnerabilities::VULNERABLE);
    let mixed = Dispatcher::standard(CpuVulnerabilities {
        spectre_v4: Exposure::Vulnerable,
        ..CpuVulnerabilities::UNAFFECTED
    });
    for fid in [
        abi_arch::SMCCC_ARCH_WORKAROUND_1,
        abi_arch::SMCCC_ARCH_WORKAROUND_2,
        abi_arch::SMCCC_ARCH_WORKAROUND_3,
    ] {
        assert_eq!(features(&vulnerable, fid), NOT_SUPPORTED, "{fid:?}");
        let (x, _) = call_on(&vulnerable, &vm, u64::from(fid.raw()), &[]);
        assert_eq!(x[0], NOT_SUPPORTED);
    }
    assert_eq!(features(&mixed, abi_arch::SMCCC_ARCH_WORKAROUND_1), 1);
    assert_eq!(
        features(&mixed, abi_arch::SMCCC_ARCH_WORKAROUND_2),
        NOT_SUPPORTED
    );
}

/// A stand-in for the later KVM vendor service: answers KVM_FEATURES from
/// the table, advertises one feature bit, and makes PV_TIME_FEATURES
/// discoverable through SMCCC_ARCH_FEATURES.
struct FakeVendor;

const VENDOR_IDS: [FunctionId; 3] = [kvm::FEATURES, kvm::PTP, pvtime::PV_TIME_FEATURES];

impl Service for FakeVendor {
    fn name(&self) -> &'static str {
        "fake-vendor"
    }

    fn ids(&self) -> &[FunctionId] {
        &VENDOR_IDS
    }

    fn call(&self, call: &Call<'_>) -> Reply {
        match call.fid() {
            kvm::FEATURES => Reply::values(call.table().kvm_features().to_regs()),
            kvm::PTP => Reply::values([1, 2, 3, call.arg(1)]),
            _ => Reply::not_supported(),
        }
    }

    fn arch_features(&self, fid: FunctionId) -> Option<i64> {
        (fid == pvtime::PV_TIME_FEATURES).then_some(0)
    }

    fn kvm_features(&self) -> kvm::KvmFeatures {
        kvm::KvmFeatures::EMPTY.with(kvm::func::PTP)
    }
}

/// Claims whatever ids it is given.
struct Squatter(Vec<FunctionId>);

impl Service for Squatter {
    fn name(&self) -> &'static str {
        "squatter"
    }

    fn ids(&self) -> &[FunctionId] {
        &self.0
    }

    fn call(&self, _: &Call<'_>) -> Reply {
        Reply::value(42)
    }
}

#[test]
fn services_register_into_one_table() {
    let vm = FakeVm::new(1);
    let mut table = standard();
    table.register(Box::new(FakeVendor)).unwrap();
    let names: Vec<&str> = table.services().map(|s| s.name()).collect();
    assert_eq!(names, ["arm-arch", "psci", "fake-vendor"]);

    // KVM_FEATURES: bit 0 always, plus every service's bits.
    let (x, _) = call_on(&table, &vm, u64::from(kvm::FEATURES.raw()), &[]);
    assert_eq!(x, [0b11, 0, 0, 0]);
    // A service returning four values owns X0..X3; SMC32 arguments are W.
    let (x, _) = call_on(&table, &vm, u64::from(kvm::PTP.raw()), &[0x7_0000_0009]);
    assert_eq!(x, [1, 2, 3, 9]);
    // SMCCC_ARCH_FEATURES asks the owner of the queried id.
    let (x, _) = call_on(
        &table,
        &vm,
        u64::from(abi_arch::SMCCC_ARCH_FEATURES.raw()),
        &[u64::from(pvtime::PV_TIME_FEATURES.raw())],
    );
    assert_eq!(x[0], 0);
    assert_eq!(table.arch_features(kvm::PTP), smccc::NOT_SUPPORTED);
    assert!(table.implements(kvm::PTP));

    // Conflicts and bad ids are refused and leave the table as it was.
    let squat = table.register(Box::new(Squatter(vec![abi_psci::CPU_OFF])));
    assert_eq!(
        squat,
        Err(RegisterError::Conflict {
            fid: abi_psci::CPU_OFF,
            owner: "psci",
            refused: "squatter",
        })
    );
    let twice = table.register(Box::new(Squatter(vec![
        FunctionId::from_raw(0xC600_0040),
        FunctionId::from_raw(0xC600_0040),
    ])));
    assert!(matches!(
        twice,
        Err(RegisterError::Conflict {
            owner: "squatter",
            ..
        })
    ));
    for bad in [0x0600_0040, 0xC602_0040, 0xC601_0040] {
        let fid = FunctionId::from_raw(bad);
        assert_eq!(
            table.register(Box::new(Squatter(vec![
                FunctionId::from_raw(0xC600_0041),
                fid
            ]))),
            Err(RegisterError::NotFastCall(fid))
        );
    }
    assert!(!table.implements(FunctionId::from_raw(0xC600_0040)));
    assert!(!table.implements(FunctionId::from_raw(0xC600_0041)));
    assert_eq!(table.services().count(), 3);
    assert_eq!(
        call_on(&table, &vm, u64::from(abi_psci::CPU_OFF.raw()), &[]).1,
        Next::PowerOff
    );
    assert!(alloc::format!("{}", squat.unwrap_err()).contains("already belongs to psci"));
}

#[test]
fn calls_are_counted_by_id() {
    let vm = FakeVm::new(2);
    let table = standard();
    for _ in 0..3 {
        call_on(&table, &vm, u64::from(abi_psci::PSCI_VERSION.raw()), &[]);
    }
    call_on(
        &table,
        &vm,
        u64::from(abi_psci::CPU_ON64.raw()),
        &[1, RAM_BASE, 0],
    );
    call_on(&table, &vm, 0x8600_0002, &[]);
    let called: Vec<(&str, u64)> = table
        .counters()
        .called()
        .map(|(e, n)| (e.name, n))
        .collect();
    assert_eq!(called, [("PSCI_VERSION", 3), ("PSCI_CPU_ON64", 1)]);
    assert_eq!(
        table.counters().unnamed(),
        (1, Some(FunctionId::from_raw(0x8600_0002)))
    );
    assert_eq!(table.counters().total(), 5);
}

#[test]
fn no_register_contents_make_the_dispatcher_panic() {
    let mut vm = FakeVm::new(20);
    vm.states[7] = PowerState::OnPending;
    let table = standard();
    let mut rng = prng::Rng::new(0x9E37_79B9_7F4A_7C15);
    let mut random = move || rng.next_u64();
    let interesting = [0, 1, 0x100, 0x101, 0xFF_00FF_FFFF, u64::MAX, RAM_BASE, 4];
    for i in 0..20_000 {
        // Mostly real ids (any owner, both conventions), sometimes noise.
        let x0 = if i % 4 == 0 {
            random()
        } else {
            let owner = random() % 64;
            0x8000_0000 | (random() & 0x4000_0000) | (owner << 24) | (random() % 0x30)
        };
        let mut arg = || {
            let r = random();
            if r % 2 == 0 {
                interesting[(r >> 8) as usize % interesting.len()]
            } else {
                r
            }
        };
        let args = [arg(), arg(), arg()];
        call_on(&table, &vm, x0, &args);
    }
}

#[test]
fn the_route_index_finds_every_route_and_nothing_else() {
    // Tables of many sizes, ids spread over every owner and number.
    for count in [0usize, 1, 2, 7, 16, 33, 100, 300] {
        let routes: Vec<Route> = (0..count)
            .map(|i| Route {
                fid: FunctionId::fast64(
                    smccc::Owner::from_bits((i % 64) as u8),
                    (i * 7919 % 65536) as u16,
                ),
                service: i,
                counter: None,
            })
            .collect();
        let index = RouteIndex::build(&routes);
        for route in &routes {
            assert_eq!(index.find(&routes, route.fid), Some(route), "{count}");
        }
        for missing in [0x8400_0000u32, 0xC600_0099, 0xFFFF_FFFF, 0] {
            let fid = FunctionId::from_raw(missing);
            if !routes.iter().any(|r| r.fid == fid) {
                assert_eq!(index.find(&routes, fid), None);
            }
        }
    }
    // An empty index finds nothing.
    assert_eq!(
        RouteIndex::default().find(&[], FunctionId::from_raw(0)),
        None
    );
}

#[test]
fn speculation_exposure_follows_id_aa64pfr0_csv2() {
    let csv2 = |value: u64| CpuVulnerabilities::from_id_aa64pfr0(value << 56);
    assert_eq!(csv2(0), CpuVulnerabilities::VULNERABLE);
    let one = csv2(1);
    assert_eq!(
        (one.spectre_v2, one.spectre_v4, one.spectre_bhb),
        (
            Exposure::Unaffected,
            Exposure::Vulnerable,
            Exposure::Vulnerable
        )
    );
    let three = csv2(3);
    assert_eq!(
        (three.spectre_v2, three.spectre_v4, three.spectre_bhb),
        (
            Exposure::Unaffected,
            Exposure::Vulnerable,
            Exposure::Unaffected
        )
    );
    // CSV3 (bits 63:60) and the fields below change nothing here.
    assert_eq!(
        CpuVulnerabilities::from_id_aa64pfr0((1 << 60) | 0x1111),
        CpuVulnerabilities::VULNERABLE
    );
}
