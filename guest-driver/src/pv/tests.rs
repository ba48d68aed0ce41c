//! The probe and the driver against a fake hypervisor.

use super::*;
use pvlock_abi::pvlock::{VcpuState32, VcpuState64};
use pvlock_abi::pvtime::StolenTime;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::vec::Vec;

const NOT_SUPPORTED: u64 = smccc::ReturnCode::NotSupported.to_x0();
const CPUS: usize = 4;

/// A hypervisor made of a table of answers, keyed by function id and x1
/// (`None`: any x1); everything else answers NOT_SUPPORTED. It owns the
/// records it hands out, so their "IPAs" are host addresses (the driver
/// assumes an identity map, as the runtime's).
struct Fake {
    answers: BTreeMap<(u32, Option<u64>), [u64; 4]>,
    /// Every call made: (function, x1).
    log: RefCell<Vec<(u32, u64)>>,
    /// The CPU the next call comes from (the answer to PREEMPTED and
    /// PV_TIME_ST depends on it).
    cpu: Cell<usize>,
    lock_records: Vec<VcpuState64>,
    time_records: Vec<StolenTime>,
    /// Per-CPU-answer calls: function id -> which records.
    per_cpu: BTreeMap<u32, PerCpu>,
}

#[derive(Clone, Copy)]
enum PerCpu {
    Lock,
    Time,
}

impl Fake {
    /// No hypervisor: QEMU's own firmware (PSCI 1.1, SMCCC 1.0: no
    /// SMCCC_VERSION in PSCI_FEATURES).
    fn bare() -> Self {
        let mut f = Self {
            answers: BTreeMap::new(),
            log: RefCell::new(Vec::new()),
            cpu: Cell::new(0),
            lock_records: (0..CPUS).map(|_| VcpuState64::new()).collect(),
            time_records: (0..CPUS).map(|_| StolenTime::new()).collect(),
            per_cpu: BTreeMap::new(),
        };
        f.set(psci::PSCI_VERSION, None, &[0x10001]);
        f
    }

    /// A KVM-compatible hypervisor with SMCCC 1.1 and no PV services.
    fn kvm() -> Self {
        let mut f = Self::bare();
        f.set(
            psci::PSCI_FEATURES,
            Some(arch::SMCCC_VERSION.raw().into()),
            &[0],
        );
        f.set(arch::SMCCC_VERSION, None, &[0x10001]);
        f.set(kvm::CALL_UID, None, &kvm::UID_REGS);
        f.set(kvm::FEATURES, None, &KvmFeatures::new().to_regs());
        f
    }

    fn set(&mut self, function: FunctionId, x1: Option<u64>, regs: &[u64]) {
        let mut all = [0u64; 4];
        all[..regs.len()].copy_from_slice(regs);
        self.answers.insert((function.raw(), x1), all);
    }

    fn arch_features(&mut self, function: FunctionId) {
        self.set(arch::SMCCC_ARCH_FEATURES, Some(function.raw().into()), &[0]);
    }

    fn feature_bit(&mut self, bit: u16) {
        let key = (kvm::FEATURES.raw(), None);
        let words = self.answers[&key].map(|x| x as u32);
        let regs = KvmFeatures::from_words(words).with(bit).to_regs();
        self.answers.insert(key, regs);
    }

    fn seed_v2(mut self) -> Self {
        self.arch_features(seed_v2::PV_LOCK_FEATURES);
        for f in [seed_v2::PV_LOCK_FEATURES, seed_v2::PV_LOCK_PREEMPTED] {
            self.set(seed_v2::PV_LOCK_FEATURES, Some(f.raw().into()), &[0]);
        }
        self.per_cpu
            .insert(seed_v2::PV_LOCK_PREEMPTED.raw(), PerCpu::Lock);
        self
    }

    fn seed_v3(mut self) -> Self {
        self.feature_bit(seed_v3::KVM_FEATURES_BIT);
        self.set(seed_v3::PV_LOCK, Some(seed_v3::ARG_FEATURES), &[0, 0, 0, 0]);
        self
    }

    fn openeuler(mut self) -> Self {
        self.arch_features(openeuler::PV_SCHED_FEATURES);
        for f in openeuler::IDS {
            self.set(openeuler::PV_SCHED_FEATURES, Some(f.raw().into()), &[0]);
        }
        self.set(openeuler::PV_SCHED_IPA_INIT, None, &[0]);
        self.set(openeuler::PV_SCHED_IPA_RELEASE, None, &[0]);
        for cpu in 0..CPUS as u64 {
            self.set(openeuler::PV_SCHED_KICK_CPU, Some(cpu), &[0]);
        }
        self
    }

    fn anolis(mut self) -> Self {
        self.arch_features(anolis::PV_LOCK_FEATURES);
        self.arch_features(anolis::PV_QSPINLOCK_FEATURES);
        self.set(anolis::PV_LOCK_PREEMPTED, None, &[0]);
        for cpu in 0..CPUS as u64 {
            self.set(anolis::PV_QSPINLOCK_KICK_CPU, Some(cpu), &[0]);
        }
        self
    }

    /// The project's directed yield (bit 112 and SMCCC_ARCH_FEATURES), with
    /// X0 = `answer` for every target.
    fn directed_yield(mut self, answer: i64) -> Self {
        self.feature_bit(directed_yield::KVM_FEATURES_BIT);
        self.arch_features(directed_yield::PV_SCHED_YIELD_TO);
        self.set(
            directed_yield::PV_SCHED_YIELD_TO,
            None,
            &[smccc::ret_to_x0(answer)],
        );
        self
    }

    /// The project's kick that lends (bit 114 and SMCCC_ARCH_FEATURES),
    /// answering 0 for every vCPU of the fake.
    fn kick_lend(mut self) -> Self {
        self.feature_bit(directed_yield::KICK_LEND_FEATURES_BIT);
        self.arch_features(directed_yield::PV_SCHED_KICK_LEND);
        for cpu in 0..CPUS as u64 {
            self.set(directed_yield::PV_SCHED_KICK_LEND, Some(cpu), &[0]);
        }
        self
    }

    fn pv_time(mut self) -> Self {
        self.arch_features(pvtime::PV_TIME_FEATURES);
        for f in [pvtime::PV_TIME_FEATURES, pvtime::PV_TIME_ST] {
            self.set(pvtime::PV_TIME_FEATURES, Some(f.raw().into()), &[0]);
        }
        self.per_cpu.insert(pvtime::PV_TIME_ST.raw(), PerCpu::Time);
        self
    }

    fn calls(&self) -> Vec<(u32, u64)> {
        self.log.borrow().clone()
    }

    fn called(&self, function: FunctionId) -> bool {
        self.log.borrow().iter().any(|&(f, _)| f == function.raw())
    }
}

impl Conduit for Fake {
    fn call(&self, function: FunctionId, args: [u64; 3]) -> [u64; 4] {
        self.log.borrow_mut().push((function.raw(), args[0]));
        let cpu = self.cpu.get();
        if let Some(which) = self.per_cpu.get(&function.raw()) {
            let address = match which {
                PerCpu::Lock => &self.lock_records[cpu] as *const VcpuState64 as u64,
                PerCpu::Time => &self.time_records[cpu] as *const StolenTime as u64,
            };
            return [address, 0, 0, 0];
        }
        self.answers
            .get(&(function.raw(), Some(args[0])))
            .or_else(|| self.answers.get(&(function.raw(), None)))
            .copied()
            .unwrap_or([NOT_SUPPORTED, 0, 0, 0])
    }
}

impl SharedMemory for Fake {
    fn map_shared(&self, ipa: u64, size: usize) -> Result<NonNull<u8>, &'static str> {
        assert_eq!(size, 64);
        assert_eq!(ipa % 64, 0, "the driver checks alignment before mapping");
        NonNull::new(ipa as *mut u8).ok_or("null")
    }

    fn ipa_of(&self, address: *const u8) -> u64 {
        address as u64
    }
}

fn init_all(pv: &PvDriver<&Fake>, fake: &Fake) {
    for cpu in 0..CPUS {
        fake.cpu.set(cpu);
        let init = pv.init_cpu(cpu);
        assert!(init.is_ok(), "cpu {cpu}: {init:?}");
    }
}

#[test]
fn kvm_is_detected_by_all_four_uid_words() {
    let info = probe(&Fake::kvm());
    assert_eq!(info.smccc_version, smccc::VERSION_1_1);
    assert!(info.kvm);
    assert_eq!(info.features, KvmFeatures::new());
    assert_eq!(
        (info.lock, info.steal_time, info.kick),
        (None, false, false)
    );
    assert!(!info.offers_anything());

    for word in 0..4 {
        let mut f = Fake::kvm().seed_v2();
        let mut uid = kvm::UID_REGS;
        uid[word] ^= 1;
        f.set(kvm::CALL_UID, None, &uid);
        let info = probe(&f);
        assert!(!info.kvm, "word {word} differs");
        assert_eq!(info.features, KvmFeatures::EMPTY);
        assert!(!f.called(kvm::FEATURES));
    }
}

#[test]
fn variants_are_chosen_best_first() {
    let all = || Fake::kvm().seed_v2().seed_v3().openeuler().anolis();
    assert_eq!(probe(&all()).lock, Some(Variant::SeedV2));

    let mut f = all();
    f.set(
        arch::SMCCC_ARCH_FEATURES,
        Some(seed_v2::PV_LOCK_FEATURES.raw().into()),
        &[NOT_SUPPORTED],
    );
    assert_eq!(probe(&f).lock, Some(Variant::SeedV3));

    // seed-v2 needs both answers.
    let mut f = all();
    f.set(
        seed_v2::PV_LOCK_FEATURES,
        Some(seed_v2::PV_LOCK_PREEMPTED.raw().into()),
        &[NOT_SUPPORTED],
    );
    assert_eq!(probe(&f).lock, Some(Variant::SeedV3));

    let f = Fake::kvm().openeuler().anolis();
    let info = probe(&f);
    assert_eq!(info.lock, Some(Variant::OpenEuler));
    assert!(info.kick);

    let info = probe(&Fake::kvm().anolis());
    assert_eq!(info.lock, Some(Variant::Anolis));
    assert!(info.kick);

    // Anolis without its qspinlock kick.
    let mut f = Fake::kvm().anolis();
    f.set(
        arch::SMCCC_ARCH_FEATURES,
        Some(anolis::PV_QSPINLOCK_FEATURES.raw().into()),
        &[NOT_SUPPORTED],
    );
    let info = probe(&f);
    assert_eq!((info.lock, info.kick), (Some(Variant::Anolis), false));
}

#[test]
fn seed_v3_needs_its_feature_bit_and_an_all_zero_answer() {
    // The bit alone is KVM_PTP: w1 = 0 answers a time stamp, not 0.
    let mut ptp = Fake::kvm();
    ptp.feature_bit(kvm::func::PTP);
    ptp.set(kvm::PTP, Some(0), &[0x1234, 0x5678_9abc, 0x0, 0x42]);
    assert_eq!(probe(&ptp).lock, None);

    // A wall clock whose high word is 0 still has the rest.
    ptp.set(kvm::PTP, Some(0), &[0, 0x5678_9abc, 0x0, 0x42]);
    assert_eq!(probe(&ptp).lock, None);

    // The answer without the bit is not trusted.
    let mut f = Fake::kvm();
    f.set(seed_v3::PV_LOCK, Some(seed_v3::ARG_FEATURES), &[0, 0, 0, 0]);
    assert_eq!(probe(&f).lock, None);

    let f = Fake::kvm().seed_v3();
    assert_eq!(probe(&f).lock, Some(Variant::SeedV3));
}

#[test]
fn smccc_1_0_asks_nothing_else() {
    // QEMU's firmware: PSCI 1.1, no SMCCC_VERSION.
    let f = Fake::bare();
    let info = probe(&f);
    assert_eq!(info, PvInfo::NOTHING);
    let asked: Vec<u32> = f.calls().iter().map(|c| c.0).collect();
    assert_eq!(asked, [psci::PSCI_VERSION.raw(), psci::PSCI_FEATURES.raw()]);

    // SMCCC_VERSION listed but answering 1.0: still nothing.
    let mut f = Fake::kvm().seed_v2().pv_time();
    f.set(arch::SMCCC_VERSION, None, &[0x10000]);
    let info = probe(&f);
    assert_eq!(info.smccc_version, smccc::VERSION_1_0);
    assert!(!info.kvm && !info.offers_anything());
    assert!(!f.called(kvm::CALL_UID));

    // PSCI 0.2 has no PSCI_FEATURES.
    let mut f = Fake::kvm();
    f.set(psci::PSCI_VERSION, None, &[0x2]);
    assert_eq!(probe(&f).smccc_version, smccc::VERSION_1_0);
    assert!(!f.called(psci::PSCI_FEATURES));

    // SMCCC_VERSION listed but then refused.
    let mut f = Fake::kvm();
    f.set(arch::SMCCC_VERSION, None, &[NOT_SUPPORTED]);
    assert_eq!(probe(&f).smccc_version, smccc::VERSION_1_0);

    // A later version is fine.
    let mut f = Fake::kvm().seed_v2();
    f.set(arch::SMCCC_VERSION, None, &[0x10002]);
    let info = probe(&f);
    assert_eq!(info.smccc_version, smccc::VERSION_1_2);
    assert_eq!(info.lock, Some(Variant::SeedV2));
}

#[test]
fn foreign_vendor_gets_no_vendor_range_variant() {
    // Another vendor whose functions 0x20/0x21 or 0xB0 happen to answer 0
    // is not asked; the standard-hypervisor services still count.
    let mut f = Fake::kvm().seed_v2().anolis().pv_time();
    f.set(kvm::CALL_UID, None, &[0x1234_5678, 1, 2, 3]);
    let info = probe(&f);
    assert!(!info.kvm);
    assert_eq!(info.lock, None);
    assert!(info.steal_time);

    let mut f = Fake::kvm().seed_v2().openeuler();
    f.set(kvm::CALL_UID, None, &[NOT_SUPPORTED]);
    let info = probe(&f);
    assert_eq!(info.lock, Some(Variant::OpenEuler));
}

#[test]
fn nothing_offered_degrades_to_never_preempted() {
    for fake in [Fake::bare(), Fake::kvm()] {
        let pv = PvDriver::new(&fake);
        for cpu in 0..CPUS {
            let init = pv.init_cpu(cpu);
            assert_eq!(init.lock, Ok(None));
            assert_eq!(init.steal_time, Ok(None));
            assert!(!pv.vcpu_is_preempted(cpu));
            assert_eq!(pv.steal_time(cpu), 0);
            assert_eq!(pv.record_ipas(cpu), (None, None));
        }
        assert_eq!(pv.kick(1), Kick::Unavailable);
        assert!(pv.guest_record(0).is_none());
    }
    // Out of range is harmless.
    let fake = Fake::kvm().seed_v2();
    let pv = PvDriver::new(&fake);
    assert!(!pv.vcpu_is_preempted(MAX_CPUS));
    assert_eq!(pv.steal_time(usize::MAX), 0);
    assert_eq!(
        pv.init_cpu(MAX_CPUS).lock,
        Err(InitError::CpuOutOfRange(MAX_CPUS))
    );
}

#[test]
fn seed_v2_records_are_the_hypervisors_and_read_live() {
    let fake = Fake::kvm().seed_v2().pv_time();
    let pv = PvDriver::new(&fake);
    assert_eq!(pv.info().lock, Some(Variant::SeedV2));
    assert!(pv.info().steal_time);
    // Nothing is read before init_cpu.
    fake.lock_records[2].set_preempted(true);
    assert!(!pv.vcpu_is_preempted(2));
    init_all(&pv, &fake);
    for cpu in 0..CPUS {
        let (lock, steal) = pv.record_ipas(cpu);
        assert_eq!(lock, Some(&fake.lock_records[cpu] as *const _ as u64));
        assert_eq!(steal, Some(&fake.time_records[cpu] as *const _ as u64));
    }
    assert!(pv.vcpu_is_preempted(2));
    assert!(!pv.vcpu_is_preempted(1));
    fake.lock_records[2].set_preempted(false);
    assert!(!pv.vcpu_is_preempted(2));
    // Any non-zero value counts.
    fake.lock_records[3].store_preempted(1 << 40, core::sync::atomic::Ordering::Release);
    assert!(pv.vcpu_is_preempted(3));

    fake.time_records[1].store_stolen_time(123_456, core::sync::atomic::Ordering::Release);
    assert_eq!(pv.steal_time(1), 123_456);
    assert_eq!(pv.steal_time(0), 0);
    assert_eq!(pv.kick(1), Kick::Unavailable);
    assert!(pv.guest_record(0).is_none());

    // Releasing forgets the records.
    assert_eq!(pv.release_cpu(2), Ok(()));
    fake.lock_records[2].set_preempted(true);
    assert!(!pv.vcpu_is_preempted(2));
    assert!(!fake.called(openeuler::PV_SCHED_IPA_RELEASE));
}

#[test]
fn seed_v3_preempted_is_the_multiplexed_call() {
    let mut fake = Fake::kvm().seed_v3();
    fake.per_cpu.insert(seed_v3::PV_LOCK.raw(), PerCpu::Lock);
    // The per-CPU answer would also answer FEATURES; the probe saw the
    // feature answer first, so probe with the table, then init.
    let info = probe(&Fake::kvm().seed_v3());
    let pv = PvDriver::with_info(&fake, info);
    fake.cpu.set(1);
    assert_eq!(
        pv.init_cpu(1).lock,
        Ok(Some(&fake.lock_records[1] as *const _ as u64))
    );
    assert!(
        fake.calls()
            .contains(&(seed_v3::PV_LOCK.raw(), seed_v3::ARG_PREEMPTED))
    );
    fake.lock_records[1].set_preempted(true);
    assert!(pv.vcpu_is_preempted(1));
}

#[test]
fn openeuler_registers_the_drivers_own_aligned_records() {
    let fake = Fake::kvm().openeuler().pv_time();
    let pv = PvDriver::new(&fake);
    assert_eq!(pv.info().lock, Some(Variant::OpenEuler));
    init_all(&pv, &fake);
    let inits: Vec<u64> = fake
        .calls()
        .iter()
        .filter(|c| c.0 == openeuler::PV_SCHED_IPA_INIT.raw())
        .map(|c| c.1)
        .collect();
    assert_eq!(inits.len(), CPUS);
    for (cpu, &ipa) in inits.iter().enumerate() {
        let record = pv.guest_record(cpu).unwrap();
        assert_eq!(ipa, record as *const VcpuState32 as u64);
        assert_eq!(ipa % 64, 0);
        assert_eq!(pv.record_ipas(cpu).0, Some(ipa));
    }
    // The hypervisor writes the guest's record.
    pv.guest_record(3).unwrap().set_preempted(true);
    assert!(pv.vcpu_is_preempted(3));
    assert!(!pv.vcpu_is_preempted(2));
    // init_cpu zeroes the record before registering it.
    fake.cpu.set(3);
    assert!(pv.init_cpu(3).is_ok());
    assert!(!pv.vcpu_is_preempted(3));

    assert_eq!(pv.kick(2), Kick::Kicked);
    assert!(
        fake.calls()
            .contains(&(openeuler::PV_SCHED_KICK_CPU.raw(), 2))
    );
    assert_eq!(pv.kick(CPUS as u64), Kick::Refused(-1));

    assert_eq!(pv.release_cpu(1), Ok(()));
    assert!(fake.called(openeuler::PV_SCHED_IPA_RELEASE));
    assert_eq!(pv.record_ipas(1).0, None);
}

#[test]
fn anolis_registers_with_preempted() {
    let fake = Fake::kvm().anolis();
    let pv = PvDriver::new(&fake);
    init_all(&pv, &fake);
    let ipa = pv.guest_record(0).unwrap() as *const VcpuState32 as u64;
    assert!(
        fake.calls()
            .contains(&(anolis::PV_LOCK_PREEMPTED.raw(), ipa))
    );
    assert!(!fake.called(openeuler::PV_SCHED_IPA_INIT));
    assert_eq!(pv.kick(1), Kick::Kicked);
    assert!(
        fake.calls()
            .contains(&(anolis::PV_QSPINLOCK_KICK_CPU.raw(), 1))
    );
}

#[test]
fn refused_and_broken_answers_leave_the_service_unused() {
    // PREEMPTED refused.
    let mut fake = Fake::kvm().seed_v2().pv_time();
    fake.per_cpu.remove(&seed_v2::PV_LOCK_PREEMPTED.raw());
    let pv = PvDriver::new(&fake);
    let init = pv.init_cpu(0);
    assert_eq!(
        init.lock,
        Err(InitError::Refused {
            call: seed_v2::PV_LOCK_PREEMPTED,
            code: -1
        })
    );
    assert!(
        init.steal_time.unwrap().is_some(),
        "stolen time still set up"
    );
    assert!(!init.is_ok());
    assert!(!pv.vcpu_is_preempted(0));

    // A misaligned IPA.
    let mut fake = Fake::kvm().seed_v2();
    fake.per_cpu.remove(&seed_v2::PV_LOCK_PREEMPTED.raw());
    fake.set(seed_v2::PV_LOCK_PREEMPTED, None, &[0x4000_1008]);
    let pv = PvDriver::new(&fake);
    assert_eq!(
        pv.init_cpu(0).lock,
        Err(InitError::Misaligned {
            call: seed_v2::PV_LOCK_PREEMPTED,
            ipa: 0x4000_1008
        })
    );

    // seed-v3 is SMC32: a callee that sets only W0 = -1.
    let info = probe(&Fake::kvm().seed_v3());
    let mut fake = Fake::kvm();
    fake.set(
        seed_v3::PV_LOCK,
        Some(seed_v3::ARG_PREEMPTED),
        &[0xFFFF_FFFF],
    );
    let pv = PvDriver::with_info(&fake, info);
    assert_eq!(
        pv.init_cpu(0).lock,
        Err(InitError::Refused {
            call: seed_v3::PV_LOCK,
            code: -1
        })
    );
    // ... but an aligned IPA with bit 31 set is an IPA.
    fake.set(
        seed_v3::PV_LOCK,
        Some(seed_v3::ARG_PREEMPTED),
        &[0x8000_0040],
    );
    let pv = PvDriver::with_info(&fake, info);
    assert_eq!(pv.init_cpu(0).lock, Ok(Some(0x8000_0040)));

    // A stolen-time record of an unknown revision.
    let fake = Fake::kvm().pv_time();
    let pv = PvDriver::new(&fake);
    // The revision is the first word of the record.
    let record = &fake.time_records[0] as *const StolenTime as *mut u32;
    // SAFETY: test-only write to the fake's own record, no other access.
    unsafe { record.write_volatile(1u32.to_le()) };
    let init = pv.init_cpu(0);
    assert!(matches!(
        init.steal_time,
        Err(InitError::UnknownStolenTimeRecord {
            revision: 1,
            attributes: 0,
            ..
        })
    ));
    assert_eq!(pv.steal_time(0), 0);

    // openEuler IPA_INIT refused.
    let mut fake = Fake::kvm().openeuler();
    fake.set(
        openeuler::PV_SCHED_IPA_INIT,
        None,
        &[smccc::ReturnCode::InvalidParameter.to_x0()],
    );
    let pv = PvDriver::new(&fake);
    assert_eq!(
        pv.init_cpu(0).lock,
        Err(InitError::Refused {
            call: openeuler::PV_SCHED_IPA_INIT,
            code: -3
        })
    );
    pv.guest_record(0).unwrap().set_preempted(true);
    assert!(
        !pv.vcpu_is_preempted(0),
        "an unregistered record is not read"
    );
}

#[test]
fn smc32_return_codes_use_w0() {
    assert_eq!(return_code(arch::SMCCC_VERSION, 0xFFFF_FFFF), -1);
    assert_eq!(return_code(arch::SMCCC_VERSION, u64::MAX), -1);
    assert_eq!(return_code(arch::SMCCC_VERSION, 0x10001), 0x10001);
    assert_eq!(return_code(pvtime::PV_TIME_ST, 0xFFFF_FFFF), 0xFFFF_FFFF);
    assert_eq!(return_code(pvtime::PV_TIME_ST, u64::MAX), -1);
}

#[test]
fn info_is_printed_like_linux() {
    let info = probe(&Fake::kvm().seed_v3().pv_time());
    assert_eq!(
        info.to_string(),
        "SMCCC 1.1, KVM (features 0x00000000 0x00000000 0x00000000 0x00000003), PV-lock \
         seed-v3, stolen time, no kick, no directed yield"
    );
    assert_eq!(
        PvInfo::NOTHING.to_string(),
        "SMCCC 1.0, not KVM, no PV-lock, no stolen time, no kick, no directed yield"
    );
    let info = probe(&Fake::kvm().seed_v2().directed_yield(0));
    assert_eq!(
        info.to_string(),
        "SMCCC 1.1, KVM (features 0x00010000 0x00000000 0x00000000 0x00000001), PV-lock \
         seed-v2, no stolen time, no kick, directed yield"
    );
}

#[test]
fn directed_yield_needs_kvm_bit_112_and_arch_features() {
    let info = probe(&Fake::kvm().seed_v2().directed_yield(0));
    assert!(info.directed_yield);
    assert!(info.features.contains(112));
    // The retired number's bit (34, pKVM's range) means nothing.
    assert!(!info.features.contains(34));

    // The bit alone may be someone else's use of function 112: not trusted.
    let mut f = Fake::kvm();
    f.feature_bit(directed_yield::KVM_FEATURES_BIT);
    assert!(!probe(&f).directed_yield);
    // SMCCC_ARCH_FEATURES alone: no bit, no call.
    let mut f = Fake::kvm();
    f.arch_features(directed_yield::PV_SCHED_YIELD_TO);
    assert!(!probe(&f).directed_yield);
    // A vendor other than KVM: its function 0x70 means something else.
    let mut f = Fake::kvm().directed_yield(0);
    f.set(kvm::CALL_UID, None, &[0x1234_5678, 1, 2, 3]);
    assert!(!probe(&f).directed_yield);
    // Nothing under SMCCC 1.0.
    assert!(!probe(&Fake::bare()).directed_yield);
}

/// Where the hypervisor offers the kick that lends (bit 114 and
/// SMCCC_ARCH_FEATURES, under KVM), the driver's kick is that call, for
/// the driver's locks hand themselves to the vCPU they wake; else the
/// variant's KICK_CPU. The bit alone is not trusted.
#[test]
fn the_kick_lends_where_the_hypervisor_offers_it() {
    for (fake, plain_kick) in [
        (Fake::kvm().openeuler(), openeuler::PV_SCHED_KICK_CPU),
        (Fake::kvm().anolis(), anolis::PV_QSPINLOCK_KICK_CPU),
    ] {
        let fake = fake.kick_lend();
        let pv = PvDriver::new(&fake);
        assert!(pv.info().kick_lend);
        assert_eq!(pv.kick(2), Kick::Kicked);
        assert_eq!(
            fake.calls().last(),
            Some(&(directed_yield::PV_SCHED_KICK_LEND.raw(), 2))
        );
        assert!(!fake.called(plain_kick));
        assert_eq!(pv.kick(CPUS as u64), Kick::Refused(-1));
    }
    let mut f = Fake::kvm().openeuler();
    f.feature_bit(directed_yield::KICK_LEND_FEATURES_BIT);
    let pv = PvDriver::new(&f);
    assert!(!pv.info().kick_lend);
    assert_eq!(pv.kick(1), Kick::Kicked);
    assert_eq!(
        f.calls().last(),
        Some(&(openeuler::PV_SCHED_KICK_CPU.raw(), 1))
    );
    // No lock variant with a kick: nothing, whatever else is offered.
    let fake = Fake::kvm().seed_v2().kick_lend();
    let pv = PvDriver::new(&fake);
    assert_eq!(pv.kick(1), Kick::Unavailable);
    assert!(!fake.called(directed_yield::PV_SCHED_KICK_LEND));
}

#[test]
fn yield_to_sends_the_call_and_names_the_answer() {
    for (code, expected) in [
        (0, YieldResult::Yielded),
        (1, YieldResult::NotYielded),
        (-1, YieldResult::UnknownVcpu),
        (-3, YieldResult::ToSelf),
        (-2, YieldResult::Refused(-2)),
        (7, YieldResult::Refused(7)),
    ] {
        let fake = Fake::kvm().seed_v2().directed_yield(code);
        let pv = PvDriver::new(&fake);
        assert_eq!(pv.yield_to(3), expected, "X0 = {code}");
        assert_eq!(
            fake.calls().last(),
            Some(&(directed_yield::PV_SCHED_YIELD_TO.raw(), 3))
        );
        assert!(expected.was_sent());
    }
    // Not offered: nothing is sent.
    let fake = Fake::kvm().seed_v2();
    let pv = PvDriver::new(&fake);
    assert_eq!(pv.yield_to(1), YieldResult::Unavailable);
    assert!(!fake.called(directed_yield::PV_SCHED_YIELD_TO));
    assert!(!YieldResult::Unavailable.was_sent());
}

#[test]
fn lock_count_goes_to_the_callers_record() {
    // The hypervisor's 64-bit records (seed-v2).
    let fake = Fake::kvm().seed_v2();
    let pv = PvDriver::new(&fake);
    // No record yet: nothing happens.
    pv.lock_acquired(1);
    assert_eq!(fake.lock_records[1].lock_count_hint(), 0);
    init_all(&pv, &fake);
    pv.lock_acquired(1);
    pv.lock_acquired(1);
    pv.lock_released(1);
    assert_eq!(fake.lock_records[1].lock_count_hint(), 1);
    assert_eq!(pv.lock_count(1), 1);
    assert_eq!(pv.lock_count(0), 0);
    // The count does not disturb the flag, nor the flag the count.
    assert!(!pv.vcpu_is_preempted(1));
    fake.lock_records[1].set_preempted(true);
    assert!(pv.vcpu_is_preempted(1));
    assert_eq!(pv.lock_count(1), 1);
    pv.lock_released(1);
    pv.lock_released(1);
    assert_eq!(pv.lock_count(1), 0, "saturates at 0");
    pv.lock_acquired(MAX_CPUS);
    assert_eq!(pv.lock_count(MAX_CPUS), 0);

    // The driver's own 32-bit records (openEuler).
    let fake = Fake::kvm().openeuler();
    let pv = PvDriver::new(&fake);
    init_all(&pv, &fake);
    pv.lock_acquired(2);
    assert_eq!(pv.guest_record(2).unwrap().lock_count_hint(), 1);
    assert_eq!(pv.guest_record(3).unwrap().lock_count_hint(), 0);
    pv.lock_released(2);
    assert_eq!(pv.lock_count(2), 0);

    // No PV-lock at all.
    let fake = Fake::kvm().pv_time();
    let pv = PvDriver::new(&fake);
    init_all(&pv, &fake);
    pv.lock_acquired(0);
    assert_eq!(pv.lock_count(0), 0);
    assert!(pv.lock_count_cell(0).is_none());
}

#[test]
fn a_kept_lock_count_cell_is_the_records() {
    // What the runtime keeps per CPU is the very cell the record's
    // lock_count lives in, for both record widths; none before init_cpu,
    // without a PV-lock service, or for a CPU out of range.
    for fake in [Fake::kvm().seed_v2(), Fake::kvm().openeuler()] {
        let pv = PvDriver::new(&fake);
        assert!(pv.lock_count_cell(1).is_none(), "no record yet");
        init_all(&pv, &fake);
        let cell = pv.lock_count_cell(1).expect("a record");
        pvlock_abi::pvlock::lock_count_add(cell, true);
        pvlock_abi::pvlock::lock_count_add(cell, true);
        assert_eq!(pv.lock_count(1), 2);
        pv.lock_released(1);
        assert_eq!(
            u32::from_le(cell.load(core::sync::atomic::Ordering::Relaxed)),
            1
        );
        assert_eq!(pv.lock_count(0), 0, "another CPU's record");
        assert!(pv.lock_count_cell(MAX_CPUS).is_none());
    }
    let fake = Fake::kvm().pv_time();
    let pv = PvDriver::new(&fake);
    init_all(&pv, &fake);
    assert!(pv.lock_count_cell(0).is_none());
}
