//! PSCI for guests, answered as KVM answers it (Arm DEN0022; docs/abi.md §5).
//!
//! | function | answer |
//! |---|---|
//! | PSCI_VERSION | 1.1 |
//! | CPU_SUSPEND (32/64) | SUCCESS; [`Next::WaitForInterrupt`] with no deadline — every power state is treated as standby and the call returns like WFI (DEN0022 lets an implementation enter a shallower state than asked; KVM does the same) |
//! | CPU_OFF | [`Next::PowerOff`] (X0 = SUCCESS, never seen: the vCPU restarts from a later CPU_ON's entry) |
//! | CPU_ON (32/64) | INVALID_PARAMETERS for an MPIDR with non-affinity bits or no such vCPU; ALREADY_ON / ON_PENDING for a target not Off; INVALID_ADDRESS for an entry outside the VM's RAM; else SUCCESS and [`Next::PowerOn`] |
//! | AFFINITY_INFO (32/64) | 0 ON, 1 OFF, 2 ON_PENDING; INVALID_PARAMETERS for a level above 3 or an affinity no vCPU matches |
//! | MIGRATE_INFO_TYPE | 2: no Trusted OS to migrate |
//! | SYSTEM_OFF, SYSTEM_RESET | [`Next::StopVm`] / [`Next::ResetVm`], X0 = INTERNAL_FAILURE (seen only if the call ever returned) |
//! | SYSTEM_RESET2 (32/64) | type 0 (warm reset) or a vendor type (bit 31): as SYSTEM_RESET; else INVALID_PARAMETERS |
//! | PSCI_FEATURES | 0 for each function above and for SMCCC_VERSION (CPU_SUSPEND: feature flags 0), else NOT_SUPPORTED |
//! | MIGRATE, MIGRATE_INFO_UP_CPU, SYSTEM_SUSPEND, every other PSCI id | NOT_SUPPORTED (KVM's answers; MIGRATE_INFO_UP_CPU is only meaningful for a uniprocessor Trusted OS, MIGRATE_INFO_TYPE 0 or 1) |
//!
//! SMC32 forms see only W1..W3 ([`super::Call::arg`]), as KVM's
//! `kvm_psci_narrow_to_32bit` does.

use platform::Mpidr;
use pvlock_abi::psci::{
    self, AFFINITY_INFO, AFFINITY_INFO64, AFFINITY_LEVEL_MAX, AFFINITY_OFF, AFFINITY_ON,
    AFFINITY_ON_PENDING, CPU_OFF, CPU_ON, CPU_ON64, CPU_SUSPEND, CPU_SUSPEND64, MIGRATE_INFO_TYPE,
    PSCI_FEATURES, PSCI_VERSION, SYSTEM_OFF, SYSTEM_RESET, SYSTEM_RESET2, SYSTEM_RESET2_64,
    TOS_NOT_PRESENT_OR_MP, error,
};
use pvlock_abi::{FunctionId, arch};

use super::{Call, PowerState, Reply, Service, VmView};
use crate::trap::decision::Next;
use crate::vcpu::VcpuId;

/// Every PSCI function id: the service owns the whole PSCI block so that
/// no other service can claim one, and answers NOT_SUPPORTED to those it
/// does not implement.
const IDS: [FunctionId; psci::CALLS.len()] = {
    let mut ids = [FunctionId::from_raw(0); psci::CALLS.len()];
    let mut i = 0;
    while i < ids.len() {
        ids[i] = psci::CALLS[i].id;
        i += 1;
    }
    ids
};

/// PSCI_FEATURES flags for CPU_SUSPEND: bit 0 clear (no OS-initiated mode),
/// bit 1 clear (original power_state format) — KVM's answer.
/// DEN0022 "PSCI_FEATURES" (feature flags for CPU_SUSPEND).
const CPU_SUSPEND_FLAGS: u32 = 0;
const _: () = assert!(
    CPU_SUSPEND_FLAGS
        & (psci::CPU_SUSPEND_FEATURE_OS_INITIATED | psci::CPU_SUSPEND_FEATURE_EXTENDED_STATE_ID)
        == 0
);

/// Bytes the entry point must have in RAM: one A64 instruction.
const INSTRUCTION_BYTES: u64 = 4;

/// The PSCI service. Stateless: power states come from the [`VmView`].
#[derive(Clone, Copy, Debug, Default)]
pub struct PsciService;

impl PsciService {
    /// What PSCI_FEATURES answers for `fid`: `Some(flags)` for a PSCI
    /// function this service implements, `None` otherwise. `call` handles
    /// exactly these (a test checks that the two agree).
    fn features(fid: FunctionId) -> Option<u32> {
        match fid {
            CPU_SUSPEND | CPU_SUSPEND64 => Some(CPU_SUSPEND_FLAGS),
            PSCI_VERSION | CPU_OFF | CPU_ON | CPU_ON64 | AFFINITY_INFO | AFFINITY_INFO64
            | MIGRATE_INFO_TYPE | SYSTEM_OFF | SYSTEM_RESET | PSCI_FEATURES | SYSTEM_RESET2
            | SYSTEM_RESET2_64 => Some(0),
            _ => None,
        }
    }
}

impl Service for PsciService {
    fn name(&self) -> &'static str {
        "psci"
    }

    fn ids(&self) -> &[FunctionId] {
        &IDS
    }

    fn is_constant(&self, fid: FunctionId) -> bool {
        fid == PSCI_VERSION
    }

    fn call(&self, call: &Call<'_>) -> Reply {
        match call.fid() {
            PSCI_VERSION => Reply::value(u64::from(psci::VERSION_1_1.raw())),
            CPU_SUSPEND | CPU_SUSPEND64 => {
                Reply::psci(error::SUCCESS).then(Next::WaitForInterrupt { deadline: None })
            }
            CPU_OFF => Reply::psci(error::SUCCESS).then(Next::PowerOff),
            CPU_ON | CPU_ON64 => cpu_on(call),
            AFFINITY_INFO | AFFINITY_INFO64 => {
                Reply::psci(affinity_info(call.vm(), call.arg(1), call.arg(2)))
            }
            MIGRATE_INFO_TYPE => Reply::psci(TOS_NOT_PRESENT_OR_MP),
            // KVM leaves INTERNAL_FAILURE in X0: the call only "returns" if
            // the VM was not actually stopped.
            SYSTEM_OFF => Reply::psci(error::INTERNAL_FAILURE).then(Next::StopVm),
            SYSTEM_RESET => Reply::psci(error::INTERNAL_FAILURE).then(Next::ResetVm),
            SYSTEM_RESET2 | SYSTEM_RESET2_64 => system_reset2(call.arg(1)),
            PSCI_FEATURES => {
                // PSCI_FEATURES takes a uint32 function id (W1).
                let queried = FunctionId::from_raw(call.arg(1) as u32);
                if queried == arch::SMCCC_VERSION {
                    let implemented = call.table().implements(arch::SMCCC_VERSION);
                    return Reply::psci(if implemented {
                        error::SUCCESS
                    } else {
                        error::NOT_SUPPORTED
                    });
                }
                match Self::features(queried) {
                    Some(flags) => Reply::value(u64::from(flags)),
                    None => Reply::psci(error::NOT_SUPPORTED),
                }
            }
            _ => Reply::psci(error::NOT_SUPPORTED),
        }
    }
}

/// The vCPU whose MPIDR is `raw`, if `raw` holds affinity bits only (as
/// KVM's `kvm_psci_valid_affinity`) and names a vCPU of the VM.
fn vcpu_of_raw_mpidr(vm: &dyn VmView, raw: u64) -> Option<u16> {
    if raw & !Mpidr::AFFINITY_MASK != 0 {
        return None;
    }
    vm.vcpu_of_mpidr(Mpidr::from_raw(raw))
        .filter(|&index| index < vm.vcpu_count())
}

/// CPU_ON(target MPIDR, entry, context). DEN0022 "CPU_ON".
///
/// Checks in KVM's order — target, then its state — and then the entry
/// point, which KVM does not check: every answer KVM gives is the same
/// here, and only an entry outside RAM, which KVM would accept and the
/// guest would fault on, becomes INVALID_ADDRESS.
fn cpu_on(call: &Call<'_>) -> Reply {
    let vm = call.vm();
    let (entry, context_id) = (call.arg(2), call.arg(3));
    let Some(index) = vcpu_of_raw_mpidr(vm, call.arg(1)) else {
        return Reply::psci(error::INVALID_PARAMETERS);
    };
    if let Some(code) = vm.power_state(index).cpu_on_error() {
        return Reply::psci(code);
    }
    if !vm.ram_contains(entry, INSTRUCTION_BYTES) {
        return Reply::psci(error::INVALID_ADDRESS);
    }
    let target = VcpuId {
        vm: call.caller().vm,
        index,
    };
    Reply::psci(error::SUCCESS).then(Next::PowerOn {
        target,
        entry,
        context_id,
    })
}

/// The MPIDR bits AFFINITY_INFO compares at `level`: the affinity fields
/// from `level` up (level 0: all four; level 3: Aff3 only).
fn affinity_mask(level: u64) -> u64 {
    let field = |l: u64| if l >= level { u8::MAX } else { 0 };
    Mpidr::from_affinity(field(3), field(2), field(1), field(0)).value()
}

/// AFFINITY_INFO(target affinity, lowest affinity level). DEN0022
/// "AFFINITY_INFO".
///
/// Level 0 asks about one vCPU. Levels 1..=3 ask about every vCPU whose
/// affinity fields from that level up match, as KVM answers them: ON if any
/// is on, else ON_PENDING if any is pending, else OFF. (PSCI 1.0 made
/// levels above 0 optional; KVM keeps them, so does this.) A level above 3
/// or an affinity that matches no vCPU is INVALID_PARAMETERS.
fn affinity_info(vm: &dyn VmView, raw: u64, level: u64) -> i32 {
    if raw & !Mpidr::AFFINITY_MASK != 0 || level > AFFINITY_LEVEL_MAX {
        return error::INVALID_PARAMETERS;
    }
    if level == 0 {
        return match vcpu_of_raw_mpidr(vm, raw).map(|index| vm.power_state(index)) {
            Some(PowerState::On) => AFFINITY_ON,
            Some(PowerState::Off) => AFFINITY_OFF,
            Some(PowerState::OnPending) => AFFINITY_ON_PENDING,
            None => error::INVALID_PARAMETERS,
        };
    }
    let mask = affinity_mask(level);
    let (mut matched, mut pending) = (false, false);
    for index in (0..vm.vcpu_count()).filter(|&i| vm.mpidr_of(i).value() & mask == raw & mask) {
        matched = true;
        match vm.power_state(index) {
            PowerState::On => return AFFINITY_ON,
            PowerState::OnPending => pending = true,
            PowerState::Off => {}
        }
    }
    match (matched, pending) {
        (_, true) => AFFINITY_ON_PENDING,
        (true, false) => AFFINITY_OFF,
        (false, false) => error::INVALID_PARAMETERS,
    }
}

/// SYSTEM_RESET2(reset type, cookie). DEN0022 "SYSTEM_RESET2".
///
/// The reset type is a uint32; KVM compares the whole register of the
/// SMC64 form against the vendor range, so a value above 32 bits is
/// accepted as vendor-specific, as there.
fn system_reset2(reset_type: u64) -> Reply {
    let accepted = match u32::try_from(reset_type) {
        Ok(reset_type) => psci::reset2_type_supported(reset_type),
        Err(_) => true,
    };
    if accepted {
        Reply::psci(error::INTERNAL_FAILURE).then(Next::ResetVm)
    } else {
        Reply::psci(error::INVALID_PARAMETERS)
    }
}

#[cfg(test)]
pub(super) fn implemented(fid: FunctionId) -> bool {
    PsciService::features(fid).is_some()
}
