use super::*;
use pvlock_abi::pvlock::{seed_v2, seed_v3};
use std::cell::RefCell;
use std::string::{String, ToString};
use std::vec::Vec;

/// A VM like the one the boot test gives the guest: 64 MiB of RAM, 4
/// vCPUs of which only vCPU 0 (the caller) is on.
const ENV: Env = Env {
    ram_base: 0x4000_0000,
    ram_end: 0x4400_0000,
    uart: 0x0900_0000,
    gicd: 0x0800_0000,
    vcpus: 4,
    caller: 0,
    powered_on: 0b1,
    lock_record: 0x4012_3440,
    steal_record: 0x43df_f000,
};

/// A conduit whose answers come from a function.
struct Fake<F>(F);

impl<F: Fn(FunctionId, [u64; 3]) -> [u64; 4]> Conduit for Fake<F> {
    fn call(&self, function: FunctionId, args: [u64; 3]) -> [u64; 4] {
        (self.0)(function, args)
    }
}

/// X0..X3 for a return code.
fn code(c: i64) -> [u64; 4] {
    [c as u64, 0, 0, 0]
}

/// A hypervisor that answers every call as documented (an argument-free
/// call with a value of its own), and fails the test if the guest sends
/// a call it must not send.
fn documented(env: Env) -> impl Fn(FunctionId, [u64; 3]) -> [u64; 4] {
    move |function, args| match documented_answer(function, args, &env) {
        Some(Answer::Code(c)) => code(c),
        Some(Answer::Value(v)) => [v, 0, 0, 0],
        Some(Answer::Registers(r)) => r,
        Some(Answer::OneOf(codes)) => code(codes[0]),
        Some(Answer::IgnoresArguments) => [u64::from(function.raw()) ^ 0x55, 1, 2, 3],
        None => panic!("the guest sent {function:?} {args:#x?}, which it must not"),
    }
}

fn texts() -> Vec<String> {
    labels().map(|l| l.to_string()).collect()
}

#[test]
fn labels_are_unique_and_no_ok_line_matches_another() {
    let all = texts();
    let count = all.len();
    let mut sorted = all.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), count, "duplicate labels");
    for a in &all {
        assert!(a.starts_with("hostile: "), "{a}");
        let ok = format!("{a}: ok (");
        for b in &all {
            assert!(
                a == b || !format!("{b}: ok (detail)").contains(&ok),
                "{a} in {b}"
            );
        }
        assert!(!AllAnswered { attempts: count }.to_string().contains(&ok));
    }
    // Per group: 10 outside RAM, 1 fetch, 6 host devices, 6 emulated
    // devices, 8 system registers, 2 + 4 + 2 conduits, the garbage, 4 + 1 +
    // 2 + 2 + 3 + 1 + 1 calls, 4 storms, 1 scribble, 1 for the wake-ups.
    let garbage = catalog::LEN - NEVER_CALLED.len();
    assert_eq!(count, 10 + 1 + 6 + 6 + 8 + 8 + garbage + 14 + 4 + 1 + 1);
    assert!(all.contains(&"hostile: read just past RAM".to_string()));
    assert!(all.contains(&"hostile: write at 0x80000000".to_string()));
    assert!(all.contains(&"hostile: instruction fetch at 0x80001000".to_string()));
    assert!(all.contains(&"hostile: read the host's GIC ITS at 0x8080000".to_string()));
    assert!(all.contains(&"hostile: garbage to PSCI_CPU_ON64".to_string()));
    assert!(all.contains(&"hostile: garbage to PV_SCHED_IPA_INIT(openEuler)".to_string()));
    assert!(all.contains(&"hostile: 100000 SMCCC_VERSION calls".to_string()));
    assert!(all.contains(&"hostile: SMC #1".to_string()));
}

#[test]
fn garbage_goes_to_every_named_function_but_the_stopping_ones() {
    let targets: Vec<FunctionId> = garbage_targets().collect();
    for never in NEVER_CALLED {
        assert!(!targets.contains(&never));
    }
    for id in [
        psci::CPU_ON64,
        psci::SYSTEM_RESET2,
        psci::CPU_SUSPEND,
        openeuler::PV_SCHED_IPA_INIT,
        seed_v2::PV_LOCK_PREEMPTED,
        seed_v3::PV_LOCK,
        control::PVLOCK_SET_WFX_POLICY,
        kvm::CALL_UID,
    ] {
        assert!(targets.contains(&id), "{id:?}");
    }
    // Every target gets argument sets it is safe to send: most of them
    // but for SYSTEM_RESET2, whose reset types 0 and 0x80000000 and above
    // reset the VM.
    for id in &targets {
        let safe = garbage_arguments()
            .filter(|a| documented_answer(*id, *a, &ENV).is_some())
            .count();
        let reset = [psci::SYSTEM_RESET2, psci::SYSTEM_RESET2_64].contains(id);
        let least = if reset { 2 } else { 10 };
        assert!(safe >= least, "{id:?}: only {safe} safe argument sets");
    }
    assert_eq!(garbage_arguments().count(), GARBAGE.len() + RANDOM_SETS);
    // Deterministic.
    assert!(garbage_arguments().eq(garbage_arguments()));
}

#[test]
fn what_the_vm_under_test_offers() {
    for id in [
        arch::SMCCC_VERSION,
        kvm::FEATURES,
        openeuler::PV_SCHED_KICK_CPU,
        pvtime::PV_TIME_ST,
        directed_yield::PV_SCHED_YIELD_TO,
        psci::SYSTEM_OFF2,
        UNKNOWN_PSCI,
    ] {
        assert!(offered(id), "{id:?}");
    }
    for id in [
        kvm::PTP,
        seed_v2::PV_LOCK_FEATURES,
        control::PVLOCK_SET_WFX_POLICY,
        Unowned::Sip.function(),
        Unowned::Oem.function(),
    ] {
        assert!(!offered(id), "{id:?}");
    }
    assert_eq!(Unowned::Sip.function().raw(), 0xC200_0000);
    assert_eq!(Unowned::Oem.function().raw(), 0xC300_0000);
    assert_eq!(pvlock_abi::describe(UNKNOWN_PSCI), None);
}

#[test]
fn documented_answers_to_garbage() {
    let answer = |f, args| documented_answer(f, args, &ENV);
    let psci = |c: i32| Some(Answer::Code(i64::from(c)));
    use psci::error::*;
    // SMC32 CPU_ON sees W1 = 1 (vCPU 1, off) and an entry W2 outside RAM.
    let w1_is_one = [0xffff_ffff_0000_0001, 0x7fff_ffff_ffff_ffc0, 0];
    assert_eq!(answer(psci::CPU_ON, w1_is_one), psci(INVALID_ADDRESS));
    // SMC64 CPU_ON sees the whole X1: not an MPIDR.
    assert_eq!(answer(psci::CPU_ON64, w1_is_one), psci(INVALID_PARAMETERS));
    assert_eq!(answer(psci::CPU_ON64, [0, 0, 0]), psci(ALREADY_ON));
    assert_eq!(
        answer(psci::CPU_ON64, [1, 0x4000_0000, 0]),
        None,
        "would start vCPU 1"
    );
    assert_eq!(
        answer(psci::CPU_ON64, [4, 0x4000_0000, 0]),
        psci(INVALID_PARAMETERS)
    );
    // SYSTEM_RESET2: reset type 1 is refused; 0, a vendor type, and a
    // 64-bit value are never sent.
    assert_eq!(
        answer(psci::SYSTEM_RESET2, w1_is_one),
        psci(INVALID_PARAMETERS)
    );
    assert_eq!(answer(psci::SYSTEM_RESET2_64, w1_is_one), None);
    assert_eq!(answer(psci::SYSTEM_RESET2, [0x8000_0000, 0, 0]), None);
    assert_eq!(answer(psci::SYSTEM_RESET2, [1 << 32, 0, 0]), None);
    assert_eq!(
        answer(psci::SYSTEM_RESET2_64, [7, 0, 0]),
        psci(INVALID_PARAMETERS)
    );
    // Features calls read W1.
    let pv_time_st = [GARBAGE[8], 0, 0];
    assert_eq!(
        answer(pvtime::PV_TIME_FEATURES, pv_time_st),
        Some(Answer::Code(0))
    );
    assert_eq!(
        answer(arch::SMCCC_ARCH_FEATURES, pv_time_st),
        Some(Answer::Code(-1))
    );
    assert_eq!(
        answer(openeuler::PV_SCHED_FEATURES, pv_time_st),
        Some(Answer::Code(-1))
    );
    assert_eq!(answer(psci::PSCI_FEATURES, pv_time_st), psci(NOT_SUPPORTED));
    let cpu_on = [
        0xffff_0000_0000_0000 | u64::from(psci::CPU_ON64.raw()),
        0,
        0,
    ];
    assert_eq!(answer(psci::PSCI_FEATURES, cpu_on), psci(SUCCESS));
    let workaround = [u64::from(arch::SMCCC_ARCH_WORKAROUND_1.raw()), 0, 0];
    assert_eq!(answer(arch::SMCCC_ARCH_FEATURES, workaround), None);
    // IPA_INIT: never a 64-byte aligned IPA in RAM.
    assert_eq!(
        answer(openeuler::PV_SCHED_IPA_INIT, [0x4000_0040, 0, 0]),
        None
    );
    assert_eq!(
        answer(openeuler::PV_SCHED_IPA_INIT, [0x4000_0048, 0, 0]),
        Some(Answer::Code(-1))
    );
    assert_eq!(
        answer(openeuler::PV_SCHED_IPA_INIT, [0x4400_0000, 0, 0]),
        Some(Answer::Code(-1))
    );
    // Kicks and yields by index.
    assert_eq!(
        answer(openeuler::PV_SCHED_KICK_CPU, [3, 0, 0]),
        Some(Answer::Code(0))
    );
    assert_eq!(
        answer(openeuler::PV_SCHED_KICK_CPU, [1 << 32, 0, 0]),
        Some(Answer::Code(-1))
    );
    let yield_to = |x1| answer(directed_yield::PV_SCHED_YIELD_TO, [x1, 0, 0]);
    assert_eq!(yield_to(0), Some(Answer::Code(-3)));
    assert_eq!(yield_to(4), Some(Answer::Code(-1)));
    assert_eq!(yield_to(2), Some(Answer::OneOf(&[0, 1])));
    // AFFINITY_INFO by level.
    let info = |target, level| answer(psci::AFFINITY_INFO64, [target, level, 0]);
    assert_eq!(info(0, 0), psci(psci::AFFINITY_ON));
    assert_eq!(info(1, 0), psci(psci::AFFINITY_OFF));
    assert_eq!(
        info(3, 1),
        psci(psci::AFFINITY_ON),
        "vCPU 0 is in the cluster"
    );
    assert_eq!(info(0x10, 0), psci(INVALID_PARAMETERS), "no vCPU 16");
    assert_eq!(info(0, 4), psci(INVALID_PARAMETERS));
    assert_eq!(info(1 << 31, 0), psci(INVALID_PARAMETERS));
    // Fixed answers, services the VM lacks, the stopping calls.
    assert_eq!(answer(psci::MIGRATE_INFO_TYPE, [u64::MAX; 3]), psci(2));
    assert_eq!(answer(psci::MIGRATE64, [u64::MAX; 3]), psci(NOT_SUPPORTED));
    assert_eq!(answer(psci::CPU_SUSPEND64, [u64::MAX; 3]), psci(SUCCESS));
    assert_eq!(
        answer(seed_v2::PV_LOCK_PREEMPTED, [0; 3]),
        Some(Answer::Code(-1))
    );
    assert_eq!(answer(kvm::PTP, [0; 3]), Some(Answer::Code(-1)));
    assert_eq!(
        answer(kvm::CALL_UID, [u64::MAX; 3]),
        Some(Answer::Registers(kvm::UID_REGS))
    );
    for never in NEVER_CALLED {
        assert_eq!(answer(never, [0; 3]), None);
    }
}

#[test]
fn garbage_attempts_pass_a_documented_hypervisor_and_send_nothing_unsafe() {
    let hypervisor = Fake(documented(ENV));
    for id in garbage_targets() {
        let outcome = attempt_garbage(&hypervisor, id, &ENV);
        assert!(outcome.answered, "{id:?}: {}", outcome.note);
    }
    let outcome = attempt_garbage(&hypervisor, psci::PSCI_VERSION, &ENV);
    assert_eq!(
        outcome.note.as_str(),
        format!(
            "{} argument sets, x0 0x10001 each",
            GARBAGE.len() + RANDOM_SETS
        )
    );
    let outcome = attempt_garbage(&hypervisor, psci::SYSTEM_RESET2_64, &ENV);
    assert_eq!(
        outcome.note.as_str(),
        format!(
            "2 argument sets, x0 0xfffffffffffffffe each, {} not sent",
            GARBAGE.len() + RANDOM_SETS - 2
        )
    );
}

#[test]
fn garbage_attempts_catch_wrong_answers() {
    // A PSCI that reads all of X1 in SMC32 CPU_ON: W1 = 1 with a garbage
    // upper half is then no MPIDR.
    let whole_register = Fake(|f: FunctionId, args: [u64; 3]| {
        if f == psci::CPU_ON && args[0] >> 32 != 0 {
            code(i64::from(psci::error::INVALID_PARAMETERS))
        } else {
            documented(ENV)(f, args)
        }
    });
    let outcome = attempt_garbage(&whole_register, psci::CPU_ON, &ENV);
    assert!(!outcome.answered);
    assert!(
        outcome
            .note
            .as_str()
            .contains("-> x0 0xfffffffffffffffe, documented"),
        "{}",
        outcome.note
    );
    // Registering garbage.
    let accepts = Fake(|f: FunctionId, args| {
        if f == openeuler::PV_SCHED_IPA_INIT {
            code(0)
        } else {
            documented(ENV)(f, args)
        }
    });
    let outcome = attempt_garbage(&accepts, openeuler::PV_SCHED_IPA_INIT, &ENV);
    assert!(!outcome.answered);
    assert!(
        outcome.note.as_str().contains("documented -1"),
        "{}",
        outcome.note
    );
    // An argument-free call whose answer moves with x1.
    let reads_x1 = Fake(|f: FunctionId, args: [u64; 3]| {
        if f == pvtime::PV_TIME_ST {
            [args[0] & !63, 0, 0, 0]
        } else {
            documented(ENV)(f, args)
        }
    });
    let outcome = attempt_garbage(&reads_x1, pvtime::PV_TIME_ST, &ENV);
    assert!(!outcome.answered);
    assert!(
        outcome
            .note
            .as_str()
            .contains("documented 0x0 (as without arguments)"),
        "{}",
        outcome.note
    );
    // The wrong UID word.
    let foreign = Fake(|f: FunctionId, args| {
        if f == kvm::CALL_UID {
            [kvm::UID_REGS[0], kvm::UID_REGS[1], 0, kvm::UID_REGS[3]]
        } else {
            documented(ENV)(f, args)
        }
    });
    assert!(!attempt_garbage(&foreign, kvm::CALL_UID, &ENV).answered);
}

#[test]
fn one_call_attempts_are_documented() {
    let call = |label: Label| label.documented_call(&ENV).unwrap();
    let ipa_init = call(Label::IpaInit(BadIpa::Unaligned));
    assert_eq!(ipa_init.function, openeuler::PV_SCHED_IPA_INIT);
    assert_eq!(ipa_init.args, [ENV.lock_record + 8, 0, 0]);
    assert_eq!(ipa_init.answer, Answer::Code(-1));
    assert_eq!(call(Label::IpaInit(BadIpa::Device)).args[0], 0x0900_0000);
    assert_eq!(
        call(Label::IpaInit(BadIpa::PvArea)).args[0],
        ENV.steal_record
    );
    assert_eq!(
        call(Label::StolenTimeOfNoVcpu).answer,
        Answer::Value(ENV.steal_record)
    );
    assert_eq!(call(Label::Kick(Target::Itself)).answer, Answer::Code(0));
    assert_eq!(
        call(Label::YieldTo(Target::Itself)).answer,
        Answer::Code(-3)
    );
    assert_eq!(
        call(Label::YieldTo(Target::NoSuchVcpu)).args[0],
        0xffff_ffff
    );
    let entry_past_ram = call(Label::CpuOn(BadCpuOn::EntryPastRam));
    assert_eq!(entry_past_ram.args, [1, 0x4400_0000, 0], "vCPU 1 is off");
    assert_eq!(entry_past_ram.answer, Answer::Code(-9));
    assert_eq!(
        call(Label::CpuOn(BadCpuOn::EntryInDevice)).args[1],
        0x0900_0000
    );
    assert_eq!(
        call(Label::CpuOn(BadCpuOn::UnknownMpidr)).answer,
        Answer::Code(-2)
    );
    let everyone_on = Env {
        powered_on: 0b1111,
        ..ENV
    };
    assert_eq!(
        Label::CpuOn(BadCpuOn::EntryPastRam).documented_call(&everyone_on),
        None
    );
    assert_eq!(call(Label::WithoutControl).answer, Answer::Code(-1));
    let version = call(Label::SmcAsHvc(SmcCall::PsciVersion));
    assert_eq!(version.conduits, Conduits::Both);
    assert_eq!(version.answer, Answer::Value(0x10001));
    assert_eq!(
        call(Label::Unowned(Unowned::Oem, Via::Smc)).conduits,
        Conduits::Smc
    );
    assert_eq!(
        call(Label::Unowned(Unowned::Oem, Via::Hvc)).conduits,
        Conduits::Hvc
    );
    assert_eq!(Label::Fetch.documented_call(&ENV), None);
    // Every label has exactly one way of being judged.
    for label in labels() {
        let ways = [
            label.documented_call(&ENV).is_some(),
            label.expected(&ENV).is_some(),
        ];
        assert!(ways.iter().filter(|w| **w).count() <= 1, "{label}");
    }
}

#[test]
fn one_call_attempts_compare_smc_with_hvc() {
    let version = Label::SmcAsHvc(SmcCall::PsciVersion)
        .documented_call(&ENV)
        .unwrap();
    let hvc = Fake(documented(ENV));
    let smc = Fake(documented(ENV));
    let outcome = version.attempt(&hvc, &smc);
    assert!(outcome.answered);
    assert_eq!(outcome.note.as_str(), "HVC -> 0x10001, SMC -> 0x10001");
    // An SMC forwarded to firmware that says PSCI 1.0.
    let firmware = Fake(|_, _| [0x10000, 0, 0, 0]);
    let outcome = version.attempt(&hvc, &firmware);
    assert!(!outcome.answered);
    assert_eq!(
        outcome.note.as_str(),
        "PSCI_VERSION by SMC -> x0 0x10000, documented 0x10001"
    );
    // Only by SMC: the HVC conduit is not used.
    let sip = Label::Unowned(Unowned::Sip, Via::Smc)
        .documented_call(&ENV)
        .unwrap();
    let unused = Fake(|_, _| panic!("HVC used"));
    assert!(sip.attempt(&unused, &smc).answered);
}

#[test]
fn faults_are_judged_by_class_status_address_and_elr() {
    let at = 0x4008_1000;
    let sea = |esr, far, elr| Some(Caught { esr, far, elr });
    let read = Expected::ExternalDataAbort {
        address: 0x8000_0000,
        write: false,
    };
    // el2's injection: EC 0x25, IL, DFSC 0x10 (WnR for writes).
    let ok = judge_fault(read, sea(0x9600_0010, 0x8000_0000, at), at, 0);
    assert!(ok.answered);
    assert_eq!(
        ok.note.as_str(),
        "synchronous external abort at 0x80000000 (data abort, read)"
    );
    let fails = |caught, why: &str| {
        let outcome = judge_fault(read, caught, at, 0);
        assert!(!outcome.answered, "{why}");
        assert!(
            outcome.note.as_str().contains(why),
            "{why:?} not in {}",
            outcome.note
        );
    };
    fails(
        None,
        "no exception; documented: a synchronous external abort",
    );
    fails(sea(0x9200_0010, 0x8000_0000, at), "not EC 0x25");
    fails(sea(0x9600_0007, 0x8000_0000, at), "DFSC 0x7");
    fails(sea(0x9600_0010, 0x8000_0004, at), "FAR is not 0x80000000");
    fails(sea(0x9600_0410, 0x8000_0000, at), "FAR is not 0x80000000");
    fails(sea(0x9600_0050, 0x8000_0000, at), "wrong WnR");
    fails(
        sea(0x9600_0010, 0x8000_0000, at + 4),
        "ELR is not the access",
    );
    fails(sea(0x0200_0000, 0, at), "not EC 0x25");
    let write = Expected::ExternalDataAbort {
        address: 0x8000_0000,
        write: true,
    };
    assert!(judge_fault(write, sea(0x9600_0050, 0x8000_0000, at), at, 0).answered);
    // Instruction aborts: EC 0x21, FAR = ELR = the target.
    let fetch = Expected::ExternalInstructionAbort {
        address: FETCH_TARGET,
    };
    let ok = judge_fault(fetch, sea(0x8600_0010, FETCH_TARGET, FETCH_TARGET), at, 0);
    assert!(ok.answered, "{}", ok.note);
    assert!(!judge_fault(fetch, sea(0x8600_0010, FETCH_TARGET, at), at, 0).answered);
    assert!(!judge_fault(fetch, sea(0x8600_000f, FETCH_TARGET, FETCH_TARGET), at, 0).answered);
    // Undefined instructions: EC 0 at the instruction.
    assert!(judge_fault(Expected::Undefined, sea(0x0200_0000, 0, at), at, 0).answered);
    assert!(!judge_fault(Expected::Undefined, sea(0x0200_0000, 0, at + 4), at, 0).answered);
    assert!(!judge_fault(Expected::Undefined, sea(0x6200_0000, 0, at), at, 0).answered);
    assert!(!judge_fault(Expected::Undefined, None, at, 5).answered);
    // Reads of emulated registers.
    assert!(judge_fault(Expected::Reads(0), None, at, 0).answered);
    assert!(!judge_fault(Expected::Reads(0), None, at, 1).answered);
    assert!(!judge_fault(Expected::Reads(0), sea(0x0200_0000, 0, at), at, 0).answered);
}

#[test]
fn expected_faults_come_from_the_label() {
    assert_eq!(
        Label::Outside(Access::Write, Place::PastRam).expected(&ENV),
        Some(Expected::ExternalDataAbort {
            address: 0x4400_0000,
            write: true
        })
    );
    assert_eq!(
        Label::HostDevice(Access::Read, HostDevice::FwCfg).expected(&ENV),
        Some(Expected::ExternalDataAbort {
            address: 0x0902_0000,
            write: false
        })
    );
    assert_eq!(
        Label::PhysicalTimer(Access::Read).expected(&ENV),
        Some(Expected::Undefined)
    );
    assert_eq!(Label::GicdReserved.expected(&ENV), Some(Expected::Reads(0)));
    assert_eq!(
        Label::Pl011WideRead.expected(&ENV),
        Some(Expected::ExternalDataAbort {
            address: 0x0900_0018,
            write: false
        })
    );
    assert_eq!(
        Label::GicdWideWrite.expected(&ENV),
        Some(Expected::ExternalDataAbort {
            address: 0x0800_0000,
            write: true
        })
    );
    assert_eq!(Label::OsLock.expected(&ENV), None);
    assert_eq!(Place::PastIpaSpace.ipa(0), 0x80_0000_0000);
}

#[test]
fn registers_are_judged() {
    let undef = Some(Caught {
        esr: 0x0200_0000,
        far: 0,
        elr: 0,
    });
    assert_eq!(oslsr_value(true), 0b1010);
    assert_eq!(oslsr_value(false), 0b1000);
    assert!(judge_os_lock(None, 0xa, 0x8, 0xa).answered);
    assert!(
        !judge_os_lock(None, 0x8, 0x8, 0xa).answered,
        "reset unlocked"
    );
    assert!(
        !judge_os_lock(None, 0xa, 0xa, 0xa).answered,
        "ignored OSLAR"
    );
    assert!(!judge_os_lock(undef, 0xa, 0x8, 0xa).answered);
    // QEMU max's PMU (PMUv3p5) with its DT node, SVE and MTE hidden.
    assert!(judge_id_registers(0x1030_5609, 0x0001_0000_1011_1112, 0x20, true).answered);
    assert!(judge_id_registers(0x1030_5009, 0x1011_1112, 0, false).answered);
    let pmu = judge_id_registers(0x1030_5609, 0x1011_1112, 0, false);
    assert!(!pmu.answered);
    assert_eq!(
        pmu.note.as_str(),
        "ID_AA64DFR0_EL1.PMUVer is 6, but the device tree has no PMU node"
    );
    assert!(
        !judge_id_registers(0x1030_5009, 0, 0, true).answered,
        "no PMU"
    );
    assert!(!judge_id_registers(0xf00, 0, 0, true).answered, "IMPDEF");
    assert!(!judge_id_registers(0, 1 << 32, 0, false).answered, "SVE");
    assert!(!judge_id_registers(0, 0, 1 << 24, false).answered, "SME");
    assert!(!judge_id_registers(0, 0, 2 << 8, false).answered, "MTE");
    assert!(!judge_id_registers(0, 1 << 40, 0, false).answered, "MPAM");
    assert!(judge_ignored_write(None, 0x37_8000, 0x37_8000).answered);
    assert!(!judge_ignored_write(None, 0x37_8000, 0).answered);
    assert!(!judge_ignored_write(undef, 1, 1).answered);
    assert!(judge_read_back(None, 0x1000, 0x1000).answered);
    assert!(!judge_read_back(None, 0x1000, 0).answered);
    assert!(judge_non_zero_immediate(u64::MAX).answered);
    assert!(!judge_non_zero_immediate(0x10001).answered);
}

#[test]
fn races_storms_and_records_are_judged() {
    use psci::error::*;
    let race = judge_race(3, &[(0, ALREADY_ON), (1, SUCCESS), (2, ON_PENDING)]);
    assert!(race.answered);
    assert_eq!(race.note.as_str(), "vcpu 3: vcpu 0 -4, vcpu 1 0, vcpu 2 -5");
    assert!(!judge_race(3, &[(0, SUCCESS), (1, SUCCESS)]).answered);
    assert!(!judge_race(3, &[(0, ALREADY_ON), (1, ALREADY_ON)]).answered);
    assert!(!judge_race(3, &[(0, SUCCESS), (1, INVALID_PARAMETERS)]).answered);
    assert!(!judge_race(3, &[(0, SUCCESS)]).answered);

    let took = Duration::from_millis(250);
    let storm = judge_storm(Storm::Hvc, 100_000, None, took);
    assert!(storm.answered);
    assert_eq!(
        storm.note.as_str(),
        "100000 in 250.0 ms, the guest still runs"
    );
    assert!(!judge_storm(Storm::Wfi, 9_999, None, took).answered);
    let wrong = judge_storm(Storm::Hvc, 7, Some(note!("x0 0x0")), took);
    assert_eq!(wrong.note.as_str(), "after 7 of 100000: x0 0x0");

    let good = RecordCheck {
        vcpu: 1,
        stolen_before: 1_000,
        stolen_after: 5_000,
        stolen_later: 5_000,
        uptime: 2_000_000_000,
        preempted: 0,
        rescheduled: true,
    };
    assert!(judge_records(&[good], 10).answered);
    let checks = [
        RecordCheck {
            preempted: 0xffff_ffff,
            ..good
        },
        RecordCheck {
            stolen_after: 10,
            ..good
        },
        RecordCheck {
            stolen_later: u64::MAX,
            ..good
        },
        RecordCheck {
            rescheduled: false,
            ..good
        },
    ];
    for bad in checks {
        assert!(!judge_records(&[good, bad], 10).answered, "{bad:?}");
    }
    assert!(!judge_records(&[], 10).answered);
    // Scribbled stolen time is always beyond any uptime.
    for high in SCRIBBLE_PATTERNS {
        assert!(u64::from(high) << 32 > 3600 * 1_000_000_000);
    }
}

#[test]
fn wake_ups_are_judged() {
    let none = judge_wake_ups(20_000, &[(0, 0), (1, 0)]);
    assert!(none.answered);
    assert_eq!(
        none.note.as_str(),
        "20000 waits, none still blocked 50 ms past its deadline"
    );
    let lost = judge_wake_ups(20_000, &[(0, 3), (1, 0), (2, 1)]);
    assert!(!lost.answered);
    assert!(
        lost.note
            .as_str()
            .starts_with("4 of 20000 waits were still blocked 50 ms"),
        "{}",
        lost.note
    );
    assert!(
        lost.note.as_str().ends_with(": vcpu 0: 3, vcpu 2: 1"),
        "{}",
        lost.note
    );
}

#[test]
fn notes_truncate_at_a_character_boundary() {
    let long = "é".repeat(200);
    let note = note!("{long}");
    assert!(note.as_str().len() <= NOTE_CAPACITY);
    assert!(note.as_str().ends_with("..."));
    assert!(note.as_str().starts_with("éé"));
    assert_eq!(note!("a {} c", "b").as_str(), "a b c");
    assert_eq!(Note::new().as_str(), "");
}

#[test]
fn result_and_final_lines() {
    let ok = Outcome::ok(note!("reads 0x0"));
    let line = ResultLine {
        label: Label::GicdReserved,
        outcome: &ok,
    };
    assert_eq!(
        line.to_string(),
        "hostile: reserved GICD offset 0x30 reads as zero: ok (reads 0x0)"
    );
    let failed = Outcome::failed(note!("x0 0x0, documented -1"));
    let line = ResultLine {
        label: Label::NonZeroImmediate(Via::Hvc),
        outcome: &failed,
    };
    assert_eq!(
        line.to_string(),
        "hostile: HVC #1: FAILED: x0 0x0, documented -1"
    );
    let all = AllAnswered { attempts: 117 };
    assert_eq!(
        all.to_string(),
        "hostile: all 117 attempts answered as documented"
    );
    assert_eq!(AllAnswered::parse(&format!("[vm0] {all}\r")), Some(all));
    assert_eq!(
        AllAnswered::parse("hostile: all x attempts answered as documented"),
        None
    );
    assert_eq!(
        AllAnswered::parse("hostile: all 3 attempts answered as documented, or not"),
        None
    );
}

/// What a passing run prints, as the hypervisor shows it.
fn passing_console() -> Vec<String> {
    let mut lines = vec!["[vm0] hostile: 4 vCPUs, 64 MiB of RAM at 0x40000000".to_string()];
    let mut count = 0;
    for label in labels() {
        count += 1;
        let ok = Outcome::ok(note!("as documented"));
        lines.push(format!(
            "[vm0] {}",
            ResultLine {
                label,
                outcome: &ok
            }
        ));
    }
    lines.push(format!("[vm0] {}", AllAnswered { attempts: count }));
    lines
}

fn problems(lines: &[String]) -> Vec<String> {
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let found = RefCell::new(Vec::new());
    judge_console(&lines, |p| found.borrow_mut().push(p.to_string()));
    found.into_inner()
}

#[test]
fn consoles_are_judged() {
    let good = passing_console();
    assert_eq!(problems(&good), Vec::<String>::new());

    // A failed attempt instead of its ok line.
    let mut failed = good.clone();
    failed[5] = "[vm0] hostile: read at 0x100000000: FAILED: no exception".into();
    let found = problems(&failed);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("an attempt failed: "), "{found:?}");
    assert!(found[1].contains("\"hostile: read at 0x100000000: ok\" 0 times"));

    // An attempt reported twice, one missing.
    let mut twice = good.clone();
    twice[3] = twice[2].clone();
    let found = problems(&twice);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().any(|p| p.contains("2 times")));
    assert!(found.iter().any(|p| p.contains("0 times")));

    // No final line; a wrong count; two final lines.
    let mut unfinished = good.clone();
    unfinished.pop();
    assert_eq!(
        problems(&unfinished),
        ["0 \"hostile: all N attempts answered as documented\" lines, expected 1"]
    );
    let mut miscounted = good.clone();
    *miscounted.last_mut().unwrap() = AllAnswered { attempts: 3 }.to_string();
    let found = problems(&miscounted);
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("the guest counted 3 attempts"),
        "{found:?}"
    );
    let mut doubled = good.clone();
    doubled.push(good.last().unwrap().clone());
    assert_eq!(problems(&doubled).len(), 1);
}

#[test]
fn vcpu_mpidrs_follow_the_hypervisor() {
    for index in [0u16, 1, 15, 16, 63, 4095, 4096] {
        assert_eq!(vcpu_mpidr(index).vcpu_index(), Some(u64::from(index)));
    }
    assert_eq!(vcpu_mpidr(17).raw(), 0x101);
    assert_eq!(UNKNOWN_MPIDR.raw(), 0xff_0000);
    assert_eq!(vcpu_of_mpidr(UNKNOWN_MPIDR.raw(), 4), None);
    assert_eq!(vcpu_of_mpidr(3, 4), Some(3));
    assert_eq!(
        vcpu_of_mpidr(0x8000_0003, 4),
        None,
        "not only affinity bits"
    );
}
