//! The control-VM call PVLOCK_SET_WFX_POLICY (this project's vendor call
//! `0xC6000071`; `pvlock_abi::control`, seed 002's per-vCPU exit control).

use platform::TrapPolicy;
use pvlock_abi::control::{ALL_VCPUS, IDS, INVALID, KVM_FEATURES_BIT, PVLOCK_SET_WFX_POLICY, SET};
use pvlock_abi::kvm::KvmFeatures;
use pvlock_abi::smccc::{self, FunctionId};

use super::{Call, Reply, Service};
use crate::trap::decision::Next;
use crate::vcpu::VmId;

/// PVLOCK_SET_WFX_POLICY for one control VM; registered by
/// [`super::Dispatcher::for_vm`] only when [`super::VmServices::control`]
/// is set (`control = "on"`). On every other VM the id has no owner, so it
/// answers NOT_SUPPORTED ([`pvlock_abi::control::NOT_CONTROL_VM`]) and is
/// advertised nowhere, exactly like an unknown id.
///
/// | call | answer |
/// |---|---|
/// | `0xC6000071`(X1 = VM, X2 = vCPU or [`ALL_VCPUS`], X3 = policy code) | X0 = 0 ([`SET`]) and [`Next::SetWfxPolicy`] |
/// | ... X1 names no VM ([`super::VmView::vm_vcpu_count`] is `None`; all 64 bits count) | -3 ([`INVALID`]), no action |
/// | ... X2 neither [`ALL_VCPUS`] nor below that VM's vCPU count | -3, no action |
/// | ... X3 not a policy code ([`TrapPolicy::from_abi`]) | -3, no action |
///
/// X1..X3 are zeroed. SMCCC_ARCH_FEATURES(`0xC6000071`) answers 0 and the
/// service sets KVM_FEATURES bit 113 ([`KVM_FEATURES_BIT`]). The target may
/// be the caller's own VM, or the calling vCPU itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct ControlService;

impl ControlService {
    /// The service (it has no per-VM state: the policies live with the
    /// runner's VMs).
    pub const fn new() -> Self {
        Self
    }

    /// The action a well-formed call asks for, `None` if any argument is
    /// bad.
    fn parse(call: &Call<'_>) -> Option<Next> {
        // SMC64: all 64 bits of every argument count.
        let vm = VmId(u16::try_from(call.arg(1)).ok()?);
        let vcpus = call.vm().vm_vcpu_count(vm)?;
        let vcpu = match call.arg(2) {
            ALL_VCPUS => None,
            index => Some(u16::try_from(index).ok().filter(|&i| i < vcpus)?),
        };
        let wfe = TrapPolicy::from_abi(call.arg(3))?;
        Some(Next::SetWfxPolicy { vm, vcpu, wfe })
    }
}

impl Service for ControlService {
    fn name(&self) -> &'static str {
        "control"
    }

    fn ids(&self) -> &[FunctionId] {
        IDS
    }

    fn call(&self, call: &Call<'_>) -> Reply {
        if call.fid() != PVLOCK_SET_WFX_POLICY {
            return Reply::not_supported();
        }
        match Self::parse(call) {
            Some(action) => Reply::code(SET).then(action),
            None => Reply::code(INVALID),
        }
    }

    fn arch_features(&self, fid: FunctionId) -> Option<i64> {
        (fid == PVLOCK_SET_WFX_POLICY).then_some(smccc::SUCCESS)
    }

    fn kvm_features(&self) -> KvmFeatures {
        KvmFeatures::EMPTY.with(KVM_FEATURES_BIT)
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use crate::services::pv::{ConfigError, PvConfig, PvRegistry};
    use crate::vcpu::{GuestRegs, VcpuId, VmId};
    use alloc::sync::Arc;
    use alloc::vec;
    use alloc::vec::Vec;
    use platform::{MemRange, Mpidr, TrapPolicy, VmConfig};
    use pvlock_abi::control;
    use pvlock_abi::kvm::func;
    use pvlock_abi::pvlock::Variant;

    /// ABI literals: the id, SMCCC_ARCH_FEATURES, KVM_FEATURES.
    const SET_WFX_POLICY: u64 = 0xC600_0071;
    /// Its number before it left pKVM's reserved range: retired.
    const RETIRED_SET_WFX_POLICY: u64 = 0xC600_0023;
    const ARCH_FEATURES: u64 = 0x8000_0001;
    const KVM_FEATURES: u64 = 0x8600_0000;
    const NOT_SUPPORTED: u64 = u64::MAX;
    const INVALID_PARAMETER: u64 = u64::MAX - 2;
    const AREA: MemRange = MemRange::new(0x5FF0_0000, 0x1000);

    /// The hypervisor's VM table as the dispatcher sees it: the vCPU count
    /// of each VM, the caller being `me`.
    struct Machine {
        vms: Vec<u16>,
        me: VmId,
    }

    impl VmView for Machine {
        fn vcpu_count(&self) -> u16 {
            self.vms[usize::from(self.me.0)]
        }

        fn mpidr_of(&self, index: u16) -> Mpidr {
            Mpidr::from_affinity(0, 0, 0, index as u8)
        }

        fn power_state(&self, _: u16) -> PowerState {
            PowerState::On
        }

        fn ram_contains(&self, _: u64, _: u64) -> bool {
            false
        }

        fn vm_vcpu_count(&self, vm: VmId) -> Option<u16> {
            self.vms.get(usize::from(vm.0)).copied()
        }
    }

    /// VM 0 (4 vCPUs, the caller), VM 1 (1 vCPU), VM 2 (64 vCPUs).
    fn machine() -> Machine {
        Machine {
            vms: vec![4, 1, 64],
            me: VmId(0),
        }
    }

    /// A view that does not implement `vm_vcpu_count`.
    struct Blind;

    impl VmView for Blind {
        fn vcpu_count(&self) -> u16 {
            4
        }

        fn mpidr_of(&self, index: u16) -> Mpidr {
            Mpidr::from_affinity(0, 0, 0, index as u8)
        }

        fn power_state(&self, _: u16) -> PowerState {
            PowerState::On
        }

        fn ram_contains(&self, _: u64, _: u64) -> bool {
            false
        }
    }

    fn table(pv: PvConfig, control: bool) -> Dispatcher {
        let area = pv.needs_area().then_some(AREA);
        let registry = Arc::new(PvRegistry::new(4, pv, area).unwrap());
        dispatcher_for(
            VmServices { pv, control },
            registry,
            CpuVulnerabilities::UNAFFECTED,
        )
        .unwrap()
    }

    /// Dispatches from vCPU 1 of VM 0 with X1.. = `args` (garbage past
    /// them); checks X4..X30, PC and PSTATE are untouched.
    fn call(table: &Dispatcher, view: &dyn VmView, x0: u64, args: &[u64]) -> ([u64; 4], Next) {
        let mut regs = GuestRegs {
            x: core::array::from_fn(|n| 0xC3C3_0000_0000_0000 | n as u64),
            pc: 0xFFFF_8000_0000_2000,
            pstate: 0x3C5,
            ..GuestRegs::default()
        };
        regs.x[0] = x0;
        for (n, arg) in args.iter().enumerate() {
            regs.x[n + 1] = *arg;
        }
        let before = regs.clone();
        let action = table.dispatch(
            VcpuId {
                vm: VmId(0),
                index: 1,
            },
            &mut regs,
            view,
        );
        assert_eq!(regs.x[4..], before.x[4..]);
        assert_eq!((regs.pc, regs.pstate), (before.pc, before.pstate));
        ([regs.x[0], regs.x[1], regs.x[2], regs.x[3]], action)
    }

    fn set(table: &Dispatcher, view: &dyn VmView, args: [u64; 3]) -> ([u64; 4], Next) {
        call(table, view, SET_WFX_POLICY, &args)
    }

    fn ok(vm: u16, vcpu: Option<u16>, wfe: TrapPolicy) -> ([u64; 4], Next) {
        (
            [0, 0, 0, 0],
            Next::SetWfxPolicy {
                vm: VmId(vm),
                vcpu,
                wfe,
            },
        )
    }

    const INVALID: ([u64; 4], Next) = ([INVALID_PARAMETER, 0, 0, 0], Next::Resume);

    #[test]
    fn abi_literals_are_the_constants_used() {
        assert_eq!(
            u64::from(control::PVLOCK_SET_WFX_POLICY.raw()),
            SET_WFX_POLICY
        );
        assert_eq!(func::PVLOCK_SET_WFX_POLICY, 113);
        assert_eq!(
            u64::from(control::RETIRED_PVLOCK_SET_WFX_POLICY.raw()),
            RETIRED_SET_WFX_POLICY
        );
        assert_eq!(control::ALL_VCPUS, u64::MAX);
        assert_eq!(
            [control::WFE_AUTO, control::WFE_TRAP, control::WFE_NOTRAP],
            [0, 1, 2]
        );
    }

    /// Not a control VM: the call is indistinguishable from an id nobody
    /// implements (0xC6000073), on every PV configuration.
    #[test]
    fn only_control_vms_have_the_call() {
        let unknown = 0xC600_0073;
        let view = machine();
        for pv in PvConfig::every_valid() {
            let plain = table(pv, false);
            assert!(!plain.services().any(|s| s.name() == "control"));
            for args in [[0, 0, 1], [2, control::ALL_VCPUS, 2], [9, 9, 9]] {
                let answer = set(&plain, &view, args);
                assert_eq!(answer, ([NOT_SUPPORTED, 0, 0, 0], Next::Resume), "{pv:?}");
                assert_eq!(answer, call(&plain, &view, unknown, &args));
            }
            assert_eq!(
                call(&plain, &view, ARCH_FEATURES, &[SET_WFX_POLICY]),
                call(&plain, &view, ARCH_FEATURES, &[unknown])
            );
            assert_eq!(
                call(&plain, &view, ARCH_FEATURES, &[SET_WFX_POLICY]).0[0],
                NOT_SUPPORTED
            );
            assert!(!plain.kvm_features().contains(func::PVLOCK_SET_WFX_POLICY));
            assert!(!plain.implements(control::PVLOCK_SET_WFX_POLICY));

            // The same VM as a control VM: the call, advertised both ways,
            // and nothing else changes.
            let ctl = table(pv, true);
            let names: Vec<&str> = ctl.services().map(|s| s.name()).collect();
            let plain_names: Vec<&str> = plain.services().map(|s| s.name()).collect();
            assert_eq!(names[..names.len() - 1], plain_names[..]);
            assert_eq!(names.last(), Some(&"control"));
            assert_eq!(
                call(&ctl, &view, ARCH_FEATURES, &[SET_WFX_POLICY]).0,
                [0, 0, 0, 0]
            );
            let words = call(&ctl, &view, KVM_FEATURES, &[]).0;
            let plain_words = call(&plain, &view, KVM_FEATURES, &[]).0;
            assert_eq!(words[3], plain_words[3] | 1 << (113 - 96), "bit 113");
            assert_eq!(words[..3], plain_words[..3]);
            // The retired number is nobody's, on a control VM too.
            for args in [[0, control::ALL_VCPUS, 1], [9, 9, 9]] {
                assert_eq!(
                    call(&ctl, &view, RETIRED_SET_WFX_POLICY, &args),
                    call(&ctl, &view, unknown, &args)
                );
            }
            assert_eq!(
                call(&ctl, &view, ARCH_FEATURES, &[RETIRED_SET_WFX_POLICY]).0[0],
                NOT_SUPPORTED
            );
            assert!(!ctl.kvm_features().contains(35));
        }
    }

    #[test]
    fn sets_one_vcpu_or_every_vcpu_of_any_vm() {
        let ctl = table(PvConfig::NONE, true);
        let view = machine();
        use TrapPolicy::{Auto, NoTrap, Trap};
        assert_eq!(set(&ctl, &view, [2, 63, 1]), ok(2, Some(63), Trap));
        assert_eq!(set(&ctl, &view, [1, 0, 2]), ok(1, Some(0), NoTrap));
        assert_eq!(set(&ctl, &view, [2, u64::MAX, 0]), ok(2, None, Auto));
        // Its own VM, even the calling vCPU.
        assert_eq!(set(&ctl, &view, [0, 1, 2]), ok(0, Some(1), NoTrap));
        assert_eq!(set(&ctl, &view, [0, u64::MAX, 1]), ok(0, None, Trap));
        assert_eq!(ctl.counters().count(control::PVLOCK_SET_WFX_POLICY), 5);
    }

    #[test]
    fn bad_vms_vcpus_and_policies_are_invalid_parameters() {
        let ctl = table(PvConfig::NONE, true);
        let view = machine();
        for args in [
            // No such VM (all 64 bits count).
            [3, 0, 1],
            [u64::from(u16::MAX), 0, 1],
            [1 << 16, 0, 1],
            [1 << 32, 0, 1],
            [u64::MAX, u64::MAX, 1],
            // No such vCPU in the VM.
            [1, 1, 1],
            [0, 4, 1],
            [2, 64, 0],
            [2, 1 << 32, 0],
            [2, u64::MAX - 1, 0],
            [2, u64::from(u16::MAX), 0],
            // No such policy.
            [0, 0, 3],
            [0, 0, 1 << 32 | 1],
            [0, u64::MAX, u64::MAX],
        ] {
            assert_eq!(set(&ctl, &view, args), INVALID, "{args:x?}");
        }
        // A view that cannot see other VMs: nothing is valid.
        for args in [[0, 0, 0], [0, u64::MAX, 1], [1, 0, 2]] {
            assert_eq!(set(&ctl, &Blind, args), INVALID, "{args:x?}");
        }
    }

    #[test]
    fn garbage_never_panics_and_answers_only_known_codes() {
        let ctl = table(PvConfig::NONE, true);
        let view = machine();
        let mut rng = prng::Rng::new(0x0123_4567_89AB_CDEF);
        let mut random = move || rng.next_u64();
        for _ in 0..5_000 {
            let pick = |r: u64, small: u64| if r & 1 == 0 { r >> 1 } else { (r >> 1) % small };
            let args = [
                pick(random(), 4),
                pick(random(), 70) | if random() % 8 == 0 { u64::MAX } else { 0 },
                pick(random(), 4),
            ];
            let (x, action) = set(&ctl, &view, args);
            assert_eq!(x[1..], [0, 0, 0]);
            match action {
                Next::SetWfxPolicy { vm, vcpu, wfe } => {
                    assert_eq!(x[0], 0);
                    let count = view.vms[usize::from(vm.0)];
                    assert_eq!(u64::from(vm.0), args[0]);
                    match vcpu {
                        Some(i) => assert!(i < count && u64::from(i) == args[1]),
                        None => assert_eq!(args[1], u64::MAX),
                    }
                    assert_eq!(wfe.abi_code(), args[2]);
                }
                Next::Resume => assert_eq!(x[0], INVALID_PARAMETER, "{args:x?}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn services_from_a_vm_description_and_from_a_pv_config() {
        let mut config = VmConfig::new(
            "/chosen/vm@0",
            "ctl",
            4,
            2 << 20,
            MemRange::new(0x4800_0000, 0x1000),
        );
        config.pv_lock = Some(Variant::OpenEuler);
        config.pv_time = false;
        config.kvm_ptp = true;
        config.control = true;
        let services = VmServices::from_config(&config);
        let pv = PvConfig {
            lock: Some(Variant::OpenEuler),
            steal_time: false,
            ptp: true,
        };
        assert_eq!(services, VmServices { pv, control: true });
        // A bare &PvConfig means "not a control VM".
        assert_eq!(VmServices::from(&pv), VmServices { pv, control: false });
        assert!(!VmServices::default().control);
        // dispatcher_for takes both forms, Dispatcher::for_vm too.
        let registry = || Arc::new(PvRegistry::new(4, pv, None).unwrap());
        let names = |t: Dispatcher| t.services().map(|s| s.name()).collect::<Vec<_>>();
        let by_pv = dispatcher_for(&pv, registry(), CpuVulnerabilities::UNAFFECTED).unwrap();
        let by_services =
            dispatcher_for(services, registry(), CpuVulnerabilities::UNAFFECTED).unwrap();
        let by_value =
            Dispatcher::for_vm(services, registry(), CpuVulnerabilities::UNAFFECTED).unwrap();
        assert_eq!(
            names(by_pv),
            ["arm-arch", "psci", "kvm", "pv-lock(openeuler)", "pv-yield"]
        );
        assert_eq!(
            names(by_services),
            [
                "arm-arch",
                "psci",
                "kvm",
                "pv-lock(openeuler)",
                "pv-yield",
                "control"
            ]
        );
        assert_eq!(names(by_value).last(), Some(&"control"));
        // The registry must still match the PV part.
        let other = Arc::new(PvRegistry::new(4, PvConfig::NONE, None).unwrap());
        assert_eq!(
            dispatcher_for(services, other, CpuVulnerabilities::UNAFFECTED).unwrap_err(),
            TableError::Config(ConfigError::RegistryMismatch {
                registry: PvConfig::NONE,
                config: pv,
            })
        );
        // A control VM with nothing else.
        let registry = Arc::new(PvRegistry::new(1, PvConfig::NONE, None).unwrap());
        let bare = dispatcher_for(
            VmServices {
                pv: PvConfig::NONE,
                control: true,
            },
            registry,
            CpuVulnerabilities::UNAFFECTED,
        )
        .unwrap();
        assert_eq!(names(bare), ["arm-arch", "psci", "kvm", "control"]);
    }
}
