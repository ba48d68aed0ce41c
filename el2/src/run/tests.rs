//! The runner on the fake machine: several VMs on several pCPUs, the
//! pCPUs' steps interleaved in a seeded random order, with guests that
//! yield, kick, send SGIs, write their UART, power vCPUs on and off, reset
//! their VM once and finally power it off. After every step the runner's
//! invariants must hold, and a step that ran one VM's vCPU must have left
//! every other VM as it was; in the end every VM must have powered off,
//! with exactly one decision applied for every exit.

use super::fake::{Fake, HZ, World};
use super::us_to_ticks;
use super::{CONTEXT_WAIT_MS, Host, Runner, Step, Vm, VmParts, VmState, register_vcpus};
use crate::devices::vgic::VGic;
use crate::devices::vtimer::{self, PhysicalIrq};
use crate::guest::layout;
use crate::guest::placement::VmPlacement;
use crate::memory::ownership::OwnershipMap;
use crate::sched::onspin::YieldReason;
use crate::sched::spinwatch;
use crate::sched::{BlockReason, CpuSet, Scheduler, VcpuState};
use crate::services::smccc::CpuVulnerabilities;
use crate::trap::exit::EXIT_CLASSES;
use crate::vcpu::{GuestRegs, VcpuId, VmId};
use alloc::sync::Arc;
use alloc::vec::Vec;
use platform::{MemRange, VmConfig};
use pvlock_abi::pvlock::Variant;

const MIB: u64 = 1 << 20;

/// One VM of the test: vCPUs, PV-lock variant, CPU affinity.
pub(super) struct Spec {
    pub(super) vcpus: u32,
    pub(super) pv_lock: Option<Variant>,
    pub(super) affinity: Option<Vec<u32>>,
}

pub(super) fn host(world: &Arc<World>, pcpus: usize, specs: &[Spec]) -> Host<Fake> {
    host_with(world, pcpus, specs, |_, _| {})
}

/// [`host`], with `configure(i, config)` changing VM `i`'s description
/// before it is built.
fn host_with(
    world: &Arc<World>,
    pcpus: usize,
    specs: &[Spec],
    configure: impl Fn(usize, &mut VmConfig),
) -> Host<Fake> {
    let machine = Fake::new(0, world.clone());
    let mut online = CpuSet::default();
    for pcpu in 0..pcpus {
        online.insert(pcpu);
    }
    let mut sched = Scheduler::new(online, HZ * 4 / 1000);
    let mut vms = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let node = alloc::format!("/chosen/vm@{i}");
        let name = alloc::format!("vm{i}");
        let mut config = VmConfig::new(
            &node,
            &name,
            spec.vcpus,
            64 * MIB,
            MemRange::new(0x4800_0000 + i as u64 * 0x10_0000, 0x10_0000),
        );
        config.pv_lock = spec.pv_lock;
        config.cpu_affinity = spec.affinity.clone();
        configure(i, &mut config);
        let layout = layout::plan(&config, &[]).expect("layout");
        let parts = VmParts {
            id: VmId(i as u16),
            config,
            placement: VmPlacement {
                ram: MemRange::new(0x1_0000_0000 * (i as u64 + 1), 64 * MIB),
            },
            layout,
            stage2: (),
            vttbr: i as u64 + 1,
            several: specs.len() > 1,
            vulnerabilities: CpuVulnerabilities::UNAFFECTED,
        };
        let vm = Vm::build(&machine, parts, &|_| Ok(())).expect("VM");
        sched
            .reserve_vm(usize::from(vm.vcpu_count()))
            .expect("room");
        vms.push(vm);
    }
    for vm in &vms {
        register_vcpus(&machine, &mut sched, vm, 0).expect("registered");
    }
    Host::new(vms, sched, OwnershipMap::new(&[], &[]), None, pcpus)
}

/// What must hold between any two steps of any pCPUs.
fn check_invariants(host: &Host<Fake>, runners: &[Runner<'_, Fake>], world: &World, step: usize) {
    let s = host.sched.lock();
    let mut running: Vec<VcpuId> = Vec::new();
    for (pcpu, runner) in runners.iter().enumerate() {
        // The virtual timer's physical PPI: never left active for another
        // vCPU, held by the hypervisor only while it really is active, and
        // known to be held whenever it is active.
        let active = runner.machine().timer_ppi_active;
        if runner.running().is_none() {
            assert!(
                !active && runner.vtimer_ppi == PhysicalIrq::Inactive,
                "step {step}: pCPU {pcpu} idles with its timer PPI {:?} (active {active})",
                runner.vtimer_ppi
            );
        }
        assert!(
            !active || runner.vtimer_ppi != PhysicalIrq::Inactive,
            "step {step}: pCPU {pcpu}'s timer PPI is active and nobody will end it"
        );
        assert!(
            active || runner.vtimer_ppi != PhysicalIrq::HeldByHypervisor,
            "step {step}: pCPU {pcpu} holds an inactive timer PPI"
        );
        if let Some(v) = runner.running() {
            assert!(
                !running.contains(&v),
                "step {step}: {v} loaded on two pCPUs"
            );
            running.push(v);
            assert_eq!(
                s.current(pcpu),
                Some(v),
                "step {step}: pCPU {pcpu} runs {v}, the scheduler says otherwise"
            );
        }
    }
    for vm in &host.vms {
        for index in 0..vm.vcpu_count() {
            let v = VcpuId { vm: vm.id, index };
            let loaded = running.contains(&v);
            let saved_timer = vm.vcpus[usize::from(index)]
                .lock()
                .as_ref()
                .map(|ctx| ctx.vtimer);
            let in_slot = saved_timer.is_some();
            assert_eq!(
                loaded, !in_slot,
                "step {step}: {v} loaded {loaded}, context in its slot {in_slot}"
            );
            // A vCPU off its pCPU: the vGIC has the timer line its context
            // says, which is high only if its saved registers say so now.
            if let Some(timer) = saved_timer {
                let intid = layout::TIMER.virt.intid();
                let line = vm.vgic.lock().irq_status(intid, index).map(|st| st.line);
                assert_eq!(
                    line,
                    Some(timer.line),
                    "step {step}: {v}'s timer line in the vGIC and its context"
                );
                let now = world.now();
                assert!(
                    !timer.line
                        || vtimer::line_at(timer.ctl, timer.cval, vm.registers.cntvoff, now),
                    "step {step}: {v}'s timer line is high, its registers {timer:?} say low"
                );
            }
            // No lost wake-up: a vCPU blocked in WFI has no interrupt it
            // could take (the GIC change that made one deliverable woke it).
            if matches!(s.state(v), Some(VcpuState::Blocked(_))) {
                assert!(
                    !vm.vgic.lock().has_pending(index),
                    "step {step}: {v} sleeps with an interrupt pending"
                );
            }
            // The record says "preempted" exactly while the vCPU is
            // runnable and not running (docs/abi.md §3).
            if vm.state() == VmState::Running
                && let Some(record) = vm.pv.lock_record(index)
                && let Some(pa) = vm.placement.host_pa(record.ipa)
            {
                let value = world.memory.lock().get(&pa).copied().unwrap_or(0);
                let runnable = s.state(v) == Some(VcpuState::Runnable);
                assert_eq!(
                    value,
                    u64::from(runnable),
                    "step {step}: {v} ({:?}, loaded {loaded}) reads preempted {value}",
                    s.state(v)
                );
            }
        }
    }
}

/// What a VM's guests could observe of it, and the scheduler's view of its
/// vCPUs: what a step that ran another VM's vCPU must leave as it was.
#[derive(Debug, PartialEq)]
struct Observable {
    state: VmState,
    vcpus: Vec<Option<VcpuState>>,
    /// The saved registers of the vCPUs not loaded.
    regs: Vec<Option<GuestRegs>>,
    vgic: VGic,
    attention: u64,
    /// The words the PV stores wrote into its RAM.
    memory: Vec<(u64, u64)>,
}

impl Observable {
    fn of(host: &Host<Fake>, world: &World, vm: &Vm<Fake>) -> Self {
        let s = host.sched.lock();
        let ram = vm.placement.ram;
        Self {
            state: vm.state(),
            vcpus: (0..vm.vcpu_count())
                .map(|index| s.state(VcpuId { vm: vm.id, index }))
                .collect(),
            regs: vm
                .vcpus
                .iter()
                .map(|slot| slot.lock().as_ref().map(|ctx| ctx.regs.clone()))
                .collect(),
            vgic: vm.vgic.lock().clone(),
            attention: vm.irq_attention.load(core::sync::atomic::Ordering::Acquire),
            memory: world
                .memory
                .lock()
                .range(ram.base..ram.end())
                .map(|(&pa, &value)| (pa, value))
                .collect(),
        }
    }

    /// The parts of `self` that differ from `other`, by name.
    fn differences(&self, other: &Self) -> Vec<&'static str> {
        let mut differ = Vec::new();
        let mut check = |same: bool, what| {
            if !same {
                differ.push(what);
            }
        };
        check(self.state == other.state, "VM state");
        check(self.vcpus == other.vcpus, "vCPU states");
        check(self.regs == other.regs, "saved registers");
        check(self.vgic == other.vgic, "virtual GIC");
        check(self.attention == other.attention, "interrupt marks");
        check(self.memory == other.memory, "PV records");
        differ
    }

    /// `self` with the one change another VM's step may make to it: the
    /// pCPU's timer expiry wakes a vCPU blocked there whose WFI deadline
    /// has passed (it becomes runnable, and its record says preempted).
    fn with_timer_wakes(mut self, after: &Self, vm: &Vm<Fake>, now: u64) -> Self {
        for (index, (before, after)) in self.vcpus.iter_mut().zip(&after.vcpus).enumerate() {
            let due = matches!(before, Some(VcpuState::Blocked(BlockReason::Wfi {
                deadline: Some(d)
            })) if *d <= now);
            if due && *after == Some(VcpuState::Runnable) {
                *before = Some(VcpuState::Runnable);
                let record = vm
                    .pv
                    .lock_record(index as u16)
                    .and_then(|r| vm.placement.host_pa(r.ipa));
                for (pa, value) in &mut self.memory {
                    if Some(*pa) == record {
                        *value = 1;
                    }
                }
            }
        }
        self
    }
}

/// Runs `specs` on `pcpus` fake pCPUs until every VM is off; returns the
/// console.
/// The fake guest's exits come 20-420 ticks apart: sampled for spins
/// every two to eight of them (`Runner::set_spin_sample_ticks`).
const SPIN_SAMPLE_TICKS: u64 = 500;

fn run(seed: u64, pcpus: usize, specs: &[Spec]) -> Vec<alloc::string::String> {
    let world = World::new(pcpus, specs.len(), seed, HZ / 10);
    let host = host(&world, pcpus, specs);
    let mut runners: Vec<Runner<'_, Fake>> = (0..pcpus)
        .map(|pcpu| {
            let mut runner = Runner::new(pcpu, &host, Fake::new(pcpu, world.clone()));
            runner.set_spin_sample_ticks(SPIN_SAMPLE_TICKS, 3 * SPIN_SAMPLE_TICKS);
            runner
        })
        .collect();
    let mut done = alloc::vec![false; pcpus];
    for step in 0..200_000 {
        let pcpu = world.below(pcpus as u64) as usize;
        // A step of a pCPU that runs a vCPU of VM A touches no other VM.
        let running = runners[pcpu].running().map(|v| v.vm);
        let others: Vec<(usize, Observable)> = host
            .vms
            .iter()
            .enumerate()
            .filter(|(_, vm)| running.is_some_and(|a| a != vm.id))
            .map(|(i, vm)| (i, Observable::of(&host, &world, vm)))
            .collect();
        if runners[pcpu].step() == Step::AllOff {
            done[pcpu] = true;
        }
        check_invariants(&host, &runners, &world, step);
        let now = world.now();
        for (i, before) in others {
            let vm = &host.vms[i];
            let after = Observable::of(&host, &world, vm);
            let changed = before.with_timer_wakes(&after, vm, now).differences(&after);
            assert!(
                changed.is_empty(),
                "seed {seed} step {step}: a step of {running:?} on pCPU {pcpu} changed {}'s {}",
                vm.name,
                changed.join(", ")
            );
        }
        if done.iter().all(|&d| d) {
            break;
        }
    }
    assert!(
        done.iter().all(|&d| d),
        "seed {seed}: not every VM powered off at {} ticks: {:?}\n{:#?}",
        world.now(),
        host.vms.iter().map(Vm::state).collect::<Vec<_>>(),
        host.vms
            .iter()
            .flat_map(|vm| {
                let s = host.sched.lock();
                (0..vm.vcpu_count())
                    .map(|index| s.state(VcpuId { vm: vm.id, index }))
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    );
    runners[0].step();
    // Every exit got exactly one decision, applied once: a handled exit's
    // through `Runner::apply`, a constant hypercall's in place.
    let decided: u64 = runners.iter().map(|r| r.applied).sum::<u64>()
        + world.fast_exits.load(core::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        decided,
        world.exits.load(core::sync::atomic::Ordering::Relaxed),
        "seed {seed}: decisions applied vs exits"
    );
    host.print_summary(runners[0].machine());
    for vm in &host.vms {
        assert_eq!(
            vm.resets.load(core::sync::atomic::Ordering::Relaxed),
            1,
            "{}",
            vm.name
        );
        for (class, n) in vm.exit_counts() {
            *EXITS.lock().entry(class).or_insert(0) += n;
        }
    }
    let relaxed = core::sync::atomic::Ordering::Relaxed;
    *INJECTED.lock() += world.injected.load(relaxed);
    *FP_LOADS.lock() += world.fp_loads.load(relaxed);
    let mut timer = TIMER_PPI.lock();
    timer[0] += world.timer_fires.load(relaxed);
    timer[1] += world.timer_ppi_ended_by_guest.load(relaxed);
    timer[2] += world.timer_ppi_ended_by_runner.load(relaxed);
    for (&vcpu, &loads) in world.debug_loads.lock().iter() {
        *DEBUG_LOADS.lock().entry(vcpu.1).or_insert(0) += loads;
    }
    *DEBUG_CHECKS.lock() += world.debug_checks.load(relaxed);
    for (&vcpu, &loads) in world.pmu_loads.lock().iter() {
        *PMU_LOADS.lock().entry(vcpu.1).or_insert(0) += loads;
    }
    *PMU_CHECKS.lock() += world.pmu_checks.load(relaxed);
    *PMU_ENABLES.lock() += world.pmu_interrupts_enabled.load(relaxed);
    world.console.lock().clone()
}

/// Exits by class, aborts injected and FP loads, summed over the runs
/// (the multi-VM test reads them after its own runs, which alone make
/// enough of each; the other test only adds to them).
static EXITS: boot::sync::SpinMutex<alloc::collections::BTreeMap<&str, u64>> =
    boot::sync::SpinMutex::new(alloc::collections::BTreeMap::new());
static INJECTED: boot::sync::SpinMutex<u64> = boot::sync::SpinMutex::new(0);
static FP_LOADS: boot::sync::SpinMutex<u64> = boot::sync::SpinMutex::new(0);
/// Virtual timer PPIs taken, ended by a hardware list register entry, and
/// ended by the runner.
static TIMER_PPI: boot::sync::SpinMutex<[u64; 3]> = boot::sync::SpinMutex::new([0; 3]);
/// Debug register loads by vCPU index, and the debuggers' checks that
/// their registers followed them (`fake::DEBUGGER`).
static DEBUG_LOADS: boot::sync::SpinMutex<alloc::collections::BTreeMap<u16, u64>> =
    boot::sync::SpinMutex::new(alloc::collections::BTreeMap::new());
static DEBUG_CHECKS: boot::sync::SpinMutex<u64> = boot::sync::SpinMutex::new(0);
/// Likewise for the PMU (`fake::PMU_USER`), and how often the PMU
/// interrupt was enabled again after an overflow.
static PMU_LOADS: boot::sync::SpinMutex<alloc::collections::BTreeMap<u16, u64>> =
    boot::sync::SpinMutex::new(alloc::collections::BTreeMap::new());
static PMU_CHECKS: boot::sync::SpinMutex<u64> = boot::sync::SpinMutex::new(0);
static PMU_ENABLES: boot::sync::SpinMutex<u64> = boot::sync::SpinMutex::new(0);

#[test]
fn several_vms_on_several_pcpus_keep_the_runner_invariants() {
    let mut sampled_spins = 0;
    for seed in 0..24 {
        let pcpus = 1 + (seed as usize % 4);
        let specs = [
            Spec {
                vcpus: 4,
                pv_lock: Some(Variant::SeedV2),
                affinity: None,
            },
            Spec {
                vcpus: 3,
                pv_lock: Some(Variant::OpenEuler),
                affinity: None,
            },
            Spec {
                vcpus: 2,
                pv_lock: Some(Variant::SeedV2),
                affinity: Some(alloc::vec![0]),
            },
        ];
        let console = run(seed, pcpus, &specs);
        for vm in ["vm0", "vm1", "vm2"] {
            let line = alloc::format!("el2: vm {vm} powered off");
            assert!(
                console.contains(&line),
                "seed {seed}: no {line:?} in {console:#?}"
            );
        }
        assert!(console.iter().any(|l| l == "el2: all VMs powered off"));
        check_run_times(seed, &console, &["vm0", "vm1", "vm2"]);
        assert!(
            console
                .iter()
                .any(|l| l.starts_with("summary: vm vm2: 2 vCPUs, resets 1"))
        );
        // The guests' UART output reached the console, each VM's prefixed.
        assert!(
            console.iter().any(|l| l.starts_with("[vm0] ")),
            "seed {seed}"
        );
        sampled_spins += console
            .iter()
            .filter_map(|l| {
                l.split_once(" sampled-spins ")?
                    .1
                    .split(' ')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum::<u64>();
    }
    // The fake's spins without exits were found by sampling (each then
    // took the on-spin path the invariants were checked through).
    assert!(sampled_spins > 20, "{sampled_spins} sampled spins");
    // Every exit kind the fake makes was taken and handled, tens of
    // thousands of exits in all; the aborts outside memory and the
    // undefined instruction were injected, the FP traps loaded FP/SIMD.
    let exits = EXITS.lock().clone();
    // (The fake raises neither FIQ nor SError.)
    for &class in EXIT_CLASSES
        .iter()
        .filter(|&&c| c != "fiq" && c != "serror")
    {
        assert!(
            exits.get(class).copied().unwrap_or(0) > 0,
            "no {class} exit: {exits:?}"
        );
    }
    let total: u64 = exits.values().sum();
    assert!(total > 20_000, "{total} exits: {exits:?}");
    assert!(*INJECTED.lock() > 0 && *FP_LOADS.lock() > 0);
    // The timer's PPI fired, and was ended both ways.
    let [fired, by_guest, by_runner] = *TIMER_PPI.lock();
    assert!(
        fired > 100 && by_guest > 0 && by_runner > 0,
        "timer PPI: {fired} fired, {by_guest} ended by the guest, {by_runner} by the runner"
    );
    // Only the vCPUs that use their debug registers ever had them loaded,
    // and theirs followed them through every put, load and migration
    // (checked by the fake guest at each of their exits).
    let loads = DEBUG_LOADS.lock().clone();
    assert_eq!(
        loads.keys().copied().collect::<Vec<_>>(),
        [super::fake::DEBUGGER],
        "debug registers loaded per vCPU index: {loads:?}"
    );
    assert!(loads[&super::fake::DEBUGGER] > 100, "{loads:?}");
    assert!(*DEBUG_CHECKS.lock() > 1000, "{}", *DEBUG_CHECKS.lock());
    // The same for the PMU: only its user loads it, its cycle count
    // follows it, and its overflow interrupt was raised and, once the
    // guest cleared the overflow, enabled again.
    let loads = PMU_LOADS.lock().clone();
    assert_eq!(
        loads.keys().copied().collect::<Vec<_>>(),
        [super::fake::PMU_USER],
        "PMU loaded per vCPU index: {loads:?}"
    );
    assert!(loads[&super::fake::PMU_USER] > 100, "{loads:?}");
    assert!(*PMU_CHECKS.lock() > 1000, "{}", *PMU_CHECKS.lock());
    assert!(*PMU_ENABLES.lock() > 10, "{}", *PMU_ENABLES.lock());
}

/// Each power-off line is followed by the run time of every VM so far, in
/// `names` order, and no VM's figure goes down from one such line to the
/// next.
fn check_run_times(seed: u64, console: &[String], names: &[&str]) {
    let mut last = alloc::vec![0.0f64; names.len()];
    let mut lines = 0;
    for (at, line) in console.iter().enumerate() {
        let Some(vm) = line
            .strip_prefix("el2: vm ")
            .and_then(|l| l.strip_suffix(" powered off"))
        else {
            continue;
        };
        let times = &console[at + 1];
        let prefix = alloc::format!("el2: run time at vm {vm}'s power-off:");
        let rest = times
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("seed {seed}: {times:?} after {line:?}"));
        let words: Vec<&str> = rest.split_whitespace().collect();
        assert_eq!(words.len(), 3 * names.len(), "seed {seed}: {times:?}");
        for (i, name) in names.iter().enumerate() {
            assert_eq!(words[3 * i], *name, "seed {seed}: {times:?}");
            assert_eq!(words[3 * i + 2], "ms", "seed {seed}: {times:?}");
            let ms: f64 = words[3 * i + 1].parse().expect("a number of ms");
            assert!(ms >= last[i], "seed {seed}: {name} went back in {times:?}");
            last[i] = ms;
        }
        lines += 1;
    }
    assert!(lines >= names.len(), "seed {seed}: {lines} run-time lines");
    assert!(last.iter().all(|&ms| ms > 0.0), "seed {seed}: {last:?}");
}

#[test]
fn one_vm_alone_owns_the_pcpus() {
    for seed in 100..108 {
        let console = run(
            seed,
            2,
            &[Spec {
                vcpus: 4,
                pv_lock: Some(Variant::SeedV2),
                affinity: None,
            }],
        );
        assert!(console.contains(&"el2: vm vm0 powered off".into()));
    }
}

/// `create_vms` on a host device tree describing five VMs, two of which
/// cannot be placed (one wants more contiguous RAM than is left, one's
/// kernel overlaps reserved memory): those two are reported and left out;
/// each of the three others is placed in host RAM, its RAM claimed for it,
/// its vCPU 0 given to the scheduler and the others left off, with ids in
/// order; the hypervisor's own range stays its own. Under
/// `el2.fail-alloc=` (here with a heap that never refuses, so each sweep
/// ends at its first attempt) the same VMs are created.
#[test]
fn create_vms_places_claims_and_registers_every_described_vm() {
    use crate::guest::placement::OwnedRange;
    use crate::memory::ownership::Owner;
    use crate::vcpu::PowerState;
    let tree = include_bytes!("../../../fuzz/corpus/device_tree/seed-host-good-vms");
    let platform = platform::Platform::parse(tree).expect("the seed tree parses");
    let described = platform.vms.len();
    assert_eq!(described, 5);
    let world = World::new(2, described, 1, HZ);
    let machine = Fake::new(0, world.clone());
    let image = MemRange::new(0x4008_0000, 0x20_0000);
    let hypervisor = [OwnedRange {
        range: image,
        what: "hypervisor image",
    }];
    for fail_alloc in [None, Some("linux0")] {
        let (vms, sched, ownership) =
            super::create_vms(&machine, &platform, &hypervisor, &[0, 1], fail_alloc);
        let names: Vec<&str> = vms.iter().map(|vm| vm.name.as_str()).collect();
        assert_eq!(names, ["linux0", "vm1", "vm3"], "{fail_alloc:?}");
        assert_eq!(ownership.owner_of(image.base), Some(Owner::Hypervisor));
        for (i, vm) in vms.iter().enumerate() {
            assert_eq!(vm.id, VmId(i as u16));
            let ram = vm.placement.ram;
            assert_eq!(ownership.owner_of(ram.base), Some(Owner::Vm(vm.id)));
            assert_eq!(ownership.owner_of(ram.end() - 1), Some(Owner::Vm(vm.id)));
            assert!(!ram.overlaps(&image), "{}: {ram:x?}", vm.name);
            for index in 0..vm.vcpu_count() {
                let state = sched.power_state(VcpuId { vm: vm.id, index });
                let expected = if index == 0 {
                    PowerState::OnPending
                } else {
                    PowerState::Off
                };
                assert_eq!(state, Some(expected), "{}/{index}", vm.name);
            }
        }
        assert_eq!(vms[0].vcpu_count(), 4);
    }
}

#[test]
fn each_vm_gets_the_slice_its_description_gives() {
    let world = World::new(2, 2, 1, HZ);
    let one_vcpu = || Spec {
        vcpus: 1,
        pv_lock: None,
        affinity: None,
    };
    let host = host_with(&world, 2, &[one_vcpu(), one_vcpu()], |i, config| {
        if i == 0 {
            config.time_slice_us = 1_000;
        }
    });
    let mut s = host.sched.lock();
    let mut slices: Vec<(VcpuId, Option<u64>)> = (0..2)
        .map(|pcpu| {
            let vcpu = s.pick_next(pcpu, 0).expect("a boot vCPU for each pCPU");
            (vcpu, s.slice_end(vcpu))
        })
        .collect();
    slices.sort_by_key(|&(vcpu, _)| vcpu.vm.0);
    let boot = |vm| VcpuId {
        vm: VmId(vm),
        index: 0,
    };
    assert_eq!(
        slices,
        [(boot(0), Some(HZ / 1_000)), (boot(1), Some(HZ * 4 / 1_000))],
        "vm0 asked for 1 ms slices, vm1 has the default 4 ms"
    );
}

/// A vCPU in a wait loop that never traps (no WFE, no exits: the fake's
/// `FakeSaved::spins`) while a sibling waits for its pCPU is found by its
/// register samples and hands the sibling the rest of its slice, within
/// two sample periods instead of its whole slice
/// (`el2::sched::spinwatch`).
#[test]
fn a_vcpu_spinning_without_exits_hands_its_slice_to_a_waiting_sibling() {
    let world = World::new(1, 1, 3, u64::MAX);
    let spec = Spec {
        vcpus: 2,
        pv_lock: None,
        affinity: None,
    };
    let host = host(&world, 1, &[spec]);
    let mut runner = Runner::new(0, &host, Fake::new(0, world.clone()));
    // Both vCPUs want the one pCPU; the runner loads one of them, which
    // then spins from its first instruction.
    host.sched
        .lock()
        .power_on(
            VcpuId {
                vm: VmId(0),
                index: 1,
            },
            world.now(),
        )
        .expect("vCPU 1 was off");
    assert_eq!(runner.step(), Step::Ran);
    let spinner = runner.running().expect("a vCPU is loaded");
    let sibling = sibling_of(spinner);
    runner.loaded.as_mut().expect("loaded").ctx.saved.spins = u32::MAX;
    let spins_from = world.now();
    let slice_end = host.sched.lock().slice_end(spinner).expect("it runs");
    let stats = || *host.vms[0].spin.lock().stats();
    for _ in 0..100 {
        if stats().sampled_spins > 0 {
            break;
        }
        assert_eq!(runner.step(), Step::Ran);
    }
    let found_at = world.now();
    assert_eq!(stats().sampled_spins, 1);
    assert_eq!((stats().spins, stats().yields), (1, 1), "{}", stats());
    let s = host.sched.lock();
    assert_eq!(s.stats(sibling, found_at).map(|v| v.yielded_to), Some(1));
    // Two samples decide, a period apart (the longest: nothing spun on
    // this pCPU before); each is late by at most one of the fake's steps
    // (420 ticks).
    let period = us_to_ticks(HZ, spinwatch::MAX_SAMPLE_PERIOD_US);
    assert!(
        found_at - spins_from <= 2 * (period + 420),
        "found after {} ticks, sampled every {period}",
        found_at - spins_from
    );
    assert!(found_at < slice_end, "the slice ran out first");
}

/// A spinner found by sampling yields to the sibling whose wait has ended
/// (the word it was found polling holds another value now), ahead of the
/// sibling KVM's round robin names first, and skips one whose word is
/// unchanged; the spinner's own wait word, read through its loop's
/// instructions in guest memory, is kept for when it is a candidate
/// itself (`el2::sched::waitword`).
#[test]
fn a_spinner_yields_to_the_sibling_whose_wait_ended() {
    use crate::sched::waitword::{Wait, WaitWord};
    // `ldxr w16, [x0]; wfe`, as GNU as assembles it.
    const LDXR_W16_X0: u64 = 0x885f_7c10;
    const WFE: u64 = 0xd503_205f;
    let world = World::new(1, 1, 5, u64::MAX);
    let spec = Spec {
        vcpus: 4,
        pv_lock: None,
        affinity: None,
    };
    let host = host(&world, 1, &[spec]);
    let now = world.now();
    for index in 1..4 {
        host.sched
            .lock()
            .power_on(VcpuId { vm: VmId(0), index }, now)
            .expect("the vCPU was off");
    }
    let mut runner = Runner::new(0, &host, Fake::new(0, world.clone()));
    runner.set_spin_sample_ticks(WITNESS_SAMPLE_TICKS, WITNESS_SAMPLE_TICKS);
    assert_eq!(runner.step(), Step::Ran);
    let spinner = runner.running().expect("a vCPU is loaded");
    // The others in KVM's round-robin order (after `last_boosted`, 0).
    let order: Vec<u16> = [1, 2, 3, 0]
        .into_iter()
        .filter(|&i| i != spinner.index)
        .collect();
    let (waiting, plain, ended) = (order[0], order[1], order[2]);
    let vm = &host.vms[0];
    let ram = |ipa: u64| vm.ram_host_address(ipa, 8).expect("in RAM");
    let code = layout::RAM_BASE + 0x10_0000;
    let spinner_word = layout::RAM_BASE + 0x20_0000;
    let ended_word = spinner_word + 0x40;
    let waiting_word = spinner_word + 0x80;
    {
        let mut memory = world.memory.lock();
        memory.insert(ram(code), LDXR_W16_X0 | WFE << 32);
        memory.insert(ram(spinner_word), 7);
        // Handed over since it was found polling 0; still 0.
        memory.insert(ram(ended_word), 1);
        memory.insert(ram(waiting_word), 0);
    }
    let word = |ipa| WaitWord {
        ipa,
        width: 4,
        value: 0,
    };
    {
        let mut spin = vm.spin.lock();
        spin.spinning_on(ended, Some(word(ended_word)));
        spin.spinning_on(waiting, Some(word(waiting_word)));
    }
    let loaded = runner.loaded.as_mut().expect("loaded");
    loaded.ctx.saved.spins = u32::MAX;
    loaded.ctx.regs.pc = code + 4;
    loaded.ctx.regs.x[0] = spinner_word;
    let stats = || *vm.spin.lock().stats();
    for _ in 0..100 {
        if stats().sampled_spins > 0 {
            break;
        }
        assert_eq!(runner.step(), Step::Ran);
    }
    assert_eq!(stats().yields_for(YieldReason::WaitEnded), 1, "{}", stats());
    assert_eq!(runner.running().map(|v| v.index), Some(ended));
    let s = host.sched.lock();
    let yielded_to = |index| {
        s.stats(VcpuId { vm: VmId(0), index }, world.now())
            .map(|v| v.yielded_to)
    };
    assert_eq!(yielded_to(ended), Some(1));
    assert_eq!((yielded_to(plain), yielded_to(waiting)), (Some(0), Some(0)));
    drop(s);
    let spin = vm.spin.lock();
    // The spinner's own wait, as its `ldxr` names it; the target's word is
    // forgotten now that it runs; the waiting sibling's stays.
    assert_eq!(
        spin.wait_word(spinner.index),
        Some(WaitWord {
            ipa: spinner_word,
            width: 4,
            value: 7
        })
    );
    assert_eq!(spin.wait_word(ended), None);
    assert_eq!(spin.wait_word(waiting), Some(word(waiting_word)));
    assert_eq!(
        spin.candidate(waiting, true, 0, false, Wait::Waiting).wait,
        Wait::Waiting
    );
}

/// Ticks from the load of a vCPU spinning at the second instruction of
/// `code` (`x0` naming a word in RAM) until it is found spinning, sampled
/// every 300 to 2,400 ticks (the longest first), in a VM with its boosts
/// on or off.
fn ticks_to_find_a_spin(boost: bool, code: [u32; 4]) -> u64 {
    const SHORTEST: u64 = 300;
    const LONGEST: u64 = 2_400;
    let (world, host) = two_vcpus_on_one_pcpu_with(11, None, |config| config.boost = boost);
    let mut runner = Runner::new(0, &host, Fake::new(0, world.clone()));
    runner.set_spin_sample_ticks(SHORTEST, LONGEST);
    assert_eq!(runner.step(), Step::Ran);
    let pc = layout::RAM_BASE + 0x10_0000;
    let ram = host.vms[0].ram_host_address(pc, 8).expect("in RAM");
    {
        let mut memory = world.memory.lock();
        for (i, pair) in code.chunks(2).enumerate() {
            let value = u64::from(pair[0]) | u64::from(pair[1]) << 32;
            memory.insert(ram + 8 * i as u64, value);
        }
    }
    let loaded = runner.loaded.as_mut().expect("loaded");
    loaded.ctx.saved.spins = u32::MAX;
    loaded.ctx.regs.pc = pc + 4;
    loaded.ctx.regs.x[0] = layout::RAM_BASE + 0x20_0000;
    // The watch starts with the vCPU's first pass, next.
    let loaded_at = world.now();
    assert_eq!(run_until_a_spin_is_found(&mut runner, &world), 1);
    world.now() - loaded_at
}

/// A sample that lands in a wait loop brings the next forward to the
/// shortest period (`el2::sched::spinwatch`, "The period"): a spin that
/// starts while a pCPU samples at the longest is found one short period
/// after the first sample, not one long one. Only for boost-on VMs (el2
/// reads the guest's code for the boosts only), and only inside a loop
/// that executes a WFE, WFET or YIELD.
#[test]
fn a_sample_in_a_wait_loop_is_confirmed_one_short_period_later() {
    // GNU as: `1: ldxr w16, [x0]; wfe; cbnz w16, 1b; nop`, and the same
    // loop with a NOP for the WFE.
    const LDXR_W16_X0: u32 = 0x885f_7c10;
    const WFE: u32 = 0xd503_205f;
    const CBNZ_W16_BACK_2: u32 = 0x35ff_ffd0;
    const NOP: u32 = 0xd503_201f;
    let wait_loop = [LDXR_W16_X0, WFE, CBNZ_W16_BACK_2, NOP];
    // Two samples decide: a long period and a short one, or two long
    // ones (each sample lands a few fake guest steps, of at most 420
    // ticks, after it falls due).
    let with_hint = ticks_to_find_a_spin(true, wait_loop);
    assert!(with_hint < 2 * 2_400, "{with_hint} ticks");
    let boosts_off = ticks_to_find_a_spin(false, wait_loop);
    assert!(boosts_off >= 2 * 2_400, "{boosts_off} ticks");
    let no_wait = ticks_to_find_a_spin(true, [LDXR_W16_X0, NOP, CBNZ_W16_BACK_2, NOP]);
    assert!(no_wait >= 2 * 2_400, "{no_wait} ticks");
}

/// The spin-sample period of the witness tests below, in ticks, and the
/// most a step of the fake guest advances the clock (`Fake::run_guest`).
const WITNESS_SAMPLE_TICKS: u64 = 300;
const FAKE_STEP_TICKS: u64 = 420;

/// The rig of the runner tests below: one pCPU, one VM of two vCPUs, both
/// on, with 20 ms slices (room for many samples in one) and the PV lock
/// `pv_lock` (with it, PV_SCHED_YIELD_TO).
fn two_vcpus_on_one_pcpu(seed: u64, pv_lock: Option<Variant>) -> (Arc<World>, Host<Fake>) {
    two_vcpus_on_one_pcpu_with(seed, pv_lock, |_| {})
}

/// [`two_vcpus_on_one_pcpu`] with the VM's description changed by
/// `configure` too.
fn two_vcpus_on_one_pcpu_with(
    seed: u64,
    pv_lock: Option<Variant>,
    configure: impl Fn(&mut VmConfig),
) -> (Arc<World>, Host<Fake>) {
    let world = World::new(1, 1, seed, u64::MAX);
    let spec = Spec {
        vcpus: 2,
        pv_lock,
        affinity: None,
    };
    let host = host_with(&world, 1, &[spec], |_, config| {
        config.time_slice_us = 20_000;
        configure(config);
    });
    let now = world.now();
    host.sched
        .lock()
        .power_on(
            VcpuId {
                vm: VmId(0),
                index: 1,
            },
            now,
        )
        .expect("vCPU 1 was off");
    (world, host)
}

/// The other vCPU of a VM of two (the rigs of the tests below).
fn sibling_of(vcpu: VcpuId) -> VcpuId {
    VcpuId {
        index: 1 - vcpu.index,
        ..vcpu
    }
}

/// Steps until VM 0 has taken a PV directed yield, calling `before_each`
/// before every step; asserts that it took exactly one. The yield comes
/// at the yielder's next exit of its own, and a timer interrupt may end a
/// step first: at most 20 steps.
fn step_until_a_pv_yield(
    runner: &mut Runner<'_, Fake>,
    mut before_each: impl FnMut(&mut Runner<'_, Fake>),
) {
    let yields = |runner: &Runner<'_, Fake>| runner.host.vms[0].spin.lock().stats().pv_yields;
    for _ in 0..20 {
        before_each(runner);
        assert_eq!(runner.step(), Step::Ran);
        if yields(runner) > 0 {
            break;
        }
    }
    assert_eq!(yields(runner), 1, "the yield was taken");
}

/// A runner of the rig that samples every [`WITNESS_SAMPLE_TICKS`], run
/// until the loaded vCPU's first exits have enabled its GIC group and
/// SGI 3; with that vCPU.
fn runner_past_gic_setup<'h>(
    host: &'h Host<Fake>,
    world: &Arc<World>,
) -> (Runner<'h, Fake>, VcpuId) {
    let mut runner = Runner::new(0, host, Fake::new(0, world.clone()));
    runner.set_spin_sample_ticks(WITNESS_SAMPLE_TICKS, WITNESS_SAMPLE_TICKS);
    loop {
        assert_eq!(runner.step(), Step::Ran);
        let loaded = runner.loaded.as_ref().expect("a vCPU is loaded");
        if loaded.ctx.saved.entries >= 3 {
            let vcpu = loaded.vcpu;
            return (runner, vcpu);
        }
    }
}

/// Runs loaded `vcpu` until its slice is nearly over (a step runs until
/// the next sample, up to a period and a step later), sampled several
/// times, checking that it stays loaded.
fn run_through_slice(runner: &mut Runner<'_, Fake>, world: &World, vcpu: VcpuId) {
    let pass = WITNESS_SAMPLE_TICKS + FAKE_STEP_TICKS;
    let slice_end = runner.host.sched.lock().slice_end(vcpu).expect("it runs");
    assert!(world.now() + 4 * pass < slice_end, "room for samples");
    while world.now() + 2 * pass < slice_end {
        assert_eq!(runner.step(), Step::Ran);
        assert_eq!(runner.running(), Some(vcpu), "it stays loaded");
    }
}

/// Steps until VM 0 records a sampled spin or 20,000 ticks pass; its
/// sampled spins then.
fn run_until_a_spin_is_found(runner: &mut Runner<'_, Fake>, world: &World) -> u64 {
    let from = world.now();
    while runner_spins(runner) == 0 && world.now() < from + 20_000 {
        assert_eq!(runner.step(), Step::Ran);
    }
    runner_spins(runner)
}

/// VM 0's sampled spins so far.
fn runner_spins(runner: &Runner<'_, Fake>) -> u64 {
    runner.host.vms[0].spin.lock().stats().sampled_spins
}

/// The spin sampler's first witness that a vCPU did not run, through the
/// runner (`el2::sched::spinwatch`, `Sample::Unmoved`): a vCPU whose
/// registers stay the same across samples while its list registers hold
/// an interrupt its virtual CPU interface signals at once did not execute
/// (it would have taken the interrupt), so it is not a spin. Once the
/// interface no longer signals it, the same unchanged registers are one.
#[test]
fn a_vcpu_with_an_interrupt_it_would_take_at_once_is_not_read_as_spinning() {
    use crate::devices::vgic::VMCR;
    use aarch64_cpu::registers::SPSR_EL2;
    let (world, host) = two_vcpus_on_one_pcpu(5, None);
    let vm = &host.vms[0];
    let (mut runner, spinner) = runner_past_gic_setup(&host, &world);
    let sibling = sibling_of(spinner);
    assert!(
        matches!(host.sched.lock().state(sibling), Some(VcpuState::Runnable)),
        "the sibling waits for the pCPU, so the spinner is sampled"
    );
    {
        let ctx = &mut runner.loaded.as_mut().expect("loaded").ctx;
        ctx.saved.spins = u32::MAX;
        // EL1h with IRQs and FIQs unmasked.
        ctx.regs.pstate = SPSR_EL2::M::EL1h.value;
    }
    // SGI 3 for the spinner: the runner puts it in a list register.
    vm.vgic.lock().raise_edge(3, spinner.index).expect("SGI 3");
    vm.irq_attention
        .fetch_or(1 << spinner.index, core::sync::atomic::Ordering::AcqRel);
    runner.machine_mut().interface = (
        (VMCR::VENG0::SET + VMCR::VENG1::SET + VMCR::VPMR.val(0xff)).value,
        false,
    );
    run_through_slice(&mut runner, &world, spinner);
    let ctx = &runner.loaded.as_ref().expect("loaded").ctx;
    assert!(ctx.lrs.used > 0, "the SGI waits in a list register");
    assert_eq!(runner_spins(&runner), 0, "{}", vm.spin.lock().stats());
    // The interface closed (both groups off): nothing shows it did not
    // run, so its unchanged registers are a spin, found in this slice or
    // when it runs again.
    runner.machine_mut().interface = (0, false);
    assert_eq!(run_until_a_spin_is_found(&mut runner, &world), 1);
}

/// The spin sampler's second witness, through the runner: a vCPU woken
/// from WFI whose samples all show it where its WFI returned did not run
/// (under QEMU's icount a pCPU can be made to wait out a sample period
/// without executing), so it is not a spin; the put that blocked it keeps
/// that PC and the load hands it to the sampler. Moved elsewhere, the
/// same unchanged registers are a spin.
#[test]
fn a_vcpu_woken_from_wfi_and_still_where_it_returned_is_not_read_as_spinning() {
    let (world, host) = two_vcpus_on_one_pcpu(9, None);
    let vm = &host.vms[0];
    let (mut runner, waiter) = runner_past_gic_setup(&host, &world);
    runner.loaded.as_mut().expect("loaded").ctx.saved.wfi_next = true;
    // It blocks in WFI; the sibling runs.
    while host.sched.lock().state(waiter) == Some(VcpuState::Running { pcpu: 0 }) {
        assert_eq!(runner.step(), Step::Ran);
    }
    assert!(
        matches!(host.sched.lock().state(waiter), Some(VcpuState::Blocked(_))),
        "{waiter} blocked in WFI"
    );
    let woken_at = {
        let mut slot = vm.vcpus[usize::from(waiter.index)].lock();
        let ctx = slot.as_mut().expect("its context is in its slot");
        // From its wake-up on, it does not execute.
        ctx.saved.spins = u32::MAX;
        ctx.blocked_at.expect("the put kept where its WFI returned")
    };
    host.sched.lock().wake(waiter, world.now()).expect("woken");
    let from = world.now();
    while runner.running() != Some(waiter) {
        assert!(world.now() < from + 50_000, "{waiter} never ran");
        assert_eq!(runner.step(), Step::Ran);
    }
    run_through_slice(&mut runner, &world, waiter);
    assert_eq!(
        runner.loaded.as_ref().expect("loaded").ctx.regs.pc,
        woken_at
    );
    assert_eq!(runner_spins(&runner), 0, "{}", vm.spin.lock().stats());
    // Somewhere else, unchanged registers are a spin.
    runner.loaded.as_mut().expect("loaded").ctx.regs.pc = woken_at + 8;
    assert_eq!(run_until_a_spin_is_found(&mut runner, &world), 1);
}

/// The spin sampler's third witness, through the runner: a vCPU entered
/// each time with the timer of its pass already due (QEMU's round-robin
/// icount handing the turn to another pCPU at every timer write, modelled
/// by `Fake::timer_write_hands_over`) had no time to run, so its
/// unchanged registers are not a spin, however many samples find them.
/// Given the time, the same registers are one.
#[test]
fn a_vcpu_that_had_no_time_in_the_guest_is_not_read_as_spinning() {
    let (world, host) = two_vcpus_on_one_pcpu(11, None);
    let vm = &host.vms[0];
    let (mut runner, spinner) = runner_past_gic_setup(&host, &world);
    runner.loaded.as_mut().expect("loaded").ctx.saved.spins = u32::MAX;
    runner.machine_mut().timer_write_hands_over = true;
    let samples_before = world.now();
    run_through_slice(&mut runner, &world, spinner);
    assert!(
        world.now() - samples_before > 4 * WITNESS_SAMPLE_TICKS,
        "several sample periods passed"
    );
    assert_eq!(runner_spins(&runner), 0, "{}", vm.spin.lock().stats());
    runner.machine_mut().timer_write_hands_over = false;
    assert_eq!(run_until_a_spin_is_found(&mut runner, &world), 1);
}

/// A directed yield switches the pCPU to its target inside the guest loop
/// (`Runner::switch_in_place`) and gives the target its own first pass
/// there: it enters with the traps its own WFE policy gives, not the
/// yielder's. (That the target runs out the yielder's slice is the
/// scheduler's host test `a_directed_yield_keeps_the_books_of_a_put_and_a_run`.)
#[test]
fn a_directed_yield_enters_its_target_with_the_targets_own_traps() {
    use crate::sched::onspin::{TrapPolicy, hcr_traps_wfe};
    let (world, host) = two_vcpus_on_one_pcpu(7, Some(Variant::OpenEuler));
    let vm = &host.vms[0];
    let (mut runner, yielder) = runner_past_gic_setup(&host, &world);
    let target = sibling_of(yielder);
    // Two vCPUs want the pCPU: the yielder's policy (auto) traps WFE, the
    // target's never does.
    assert!(vm.wfx.set(Some(target.index), TrapPolicy::NoTrap));
    runner.loaded.as_mut().expect("loaded").ctx.saved.yield_next = Some(target.index);
    // Only the yield's step is recorded.
    step_until_a_pv_yield(&mut runner, |runner| runner.machine_mut().record_entries());
    let entered = runner.machine().entered_with.clone().expect("recorded");
    let first = entered
        .iter()
        .position(|&(index, _)| index == target.index)
        .expect("the target entered in the yielder's step");
    assert!(first > 0, "the yielder entered first: {entered:x?}");
    for &(index, hcr) in &entered {
        assert_eq!(
            hcr_traps_wfe(hcr),
            index == yielder.index,
            "each vCPU enters with its own traps: {entered:x?}"
        );
    }
}

/// A kicker and the sibling it will kick, both on one pCPU, the kicker
/// running and the sibling waiting for the pCPU: each has had a slice,
/// so that the sibling is not owed enough to preempt the kicker
/// (`Wakeup::Preempting`, which needs no hand-over).
fn kicker_and_waiting_sibling<'h>(
    host: &'h Host<Fake>,
    world: &Arc<World>,
) -> (Runner<'h, Fake>, VcpuId, VcpuId) {
    let (mut runner, kicker) = runner_past_gic_setup(host, world);
    let target = sibling_of(kicker);
    for vcpu in [target, kicker] {
        for _ in 0..200 {
            if runner.running() == Some(vcpu) {
                break;
            }
            assert_eq!(runner.step(), Step::Ran);
        }
        assert_eq!(runner.running(), Some(vcpu));
    }
    assert_eq!(
        host.sched.lock().state(target),
        Some(VcpuState::Runnable),
        "the sibling waits for the pCPU"
    );
    (runner, kicker, target)
}

/// Steps `runner` until its VM has made one kick.
fn step_until_a_kick(runner: &mut Runner<'_, Fake>, host: &Host<Fake>) {
    let kicks = || host.vms[0].spin.lock().stats().kicks;
    for _ in 0..20 {
        if kicks() > 0 {
            break;
        }
        assert_eq!(runner.step(), Step::Ran);
    }
    assert_eq!(kicks(), 1);
}

/// openEuler's KICK_CPU only wakes (docs/abi.md §3): the kicker of a
/// sibling that waits for this pCPU goes on running, with the slice it
/// had, and the sibling waits its turn.
#[test]
fn a_kick_cpu_wakes_and_the_kicker_keeps_its_pcpu() {
    let (world, host) = two_vcpus_on_one_pcpu(7, Some(Variant::OpenEuler));
    let (mut runner, kicker, target) = kicker_and_waiting_sibling(&host, &world);
    let kicker_slice_end = host.sched.lock().slice_end(kicker).expect("it runs");
    runner.loaded.as_mut().expect("loaded").ctx.saved.kick_next = Some(target.index);
    step_until_a_kick(&mut runner, &host);
    assert_eq!(runner.running(), Some(kicker), "the kicker goes on");
    assert_eq!(host.sched.lock().slice_end(kicker), Some(kicker_slice_end));
    assert_eq!(host.sched.lock().state(target), Some(VcpuState::Runnable));
}

/// PV_SCHED_KICK_LEND of a sibling that waits for this pCPU lends it a
/// short run here (`Scheduler::lend_to`): the sibling runs at once with
/// the slice timer armed for the lend's end, not the kicker's slice end,
/// and the kicker runs again when the lend is over.
#[test]
fn a_kick_that_lends_runs_the_kicked_sibling_shortly_then_the_kicker_goes_on() {
    let (world, host) = two_vcpus_on_one_pcpu(7, Some(Variant::OpenEuler));
    let (mut runner, kicker, target) = kicker_and_waiting_sibling(&host, &world);
    let kicker_slice_end = host.sched.lock().slice_end(kicker).expect("it runs");
    runner
        .loaded
        .as_mut()
        .expect("loaded")
        .ctx
        .saved
        .kick_lend_next = Some(target.index);
    step_until_a_kick(&mut runner, &host);
    assert_eq!(runner.running(), Some(target), "the kicked sibling runs");
    let lent_at = world.now();
    let lend = HZ * crate::sched::KICK_LEND_US / 1_000_000;
    let run_end = host.sched.lock().slice_end(target).expect("it runs");
    assert!(run_end <= lent_at + lend, "{run_end} > {lent_at} + {lend}");
    // The kicker runs again within a few fake steps of the lend's end
    // (and the one slice extension the sibling may get there), long before
    // its own slice would have ended: the timer was armed for the lend.
    let kicker_runs = || {
        host.sched
            .lock()
            .stats(kicker, world.now())
            .expect("a vCPU")
            .scheduled_in
    };
    let runs_before = kicker_runs();
    let extension = HZ * crate::sched::onspin::SLICE_EXTENSION_US / 1_000_000;
    let by = run_end + extension + 4 * FAKE_STEP_TICKS;
    while kicker_runs() == runs_before && world.now() <= by {
        assert_eq!(runner.step(), Step::Ran);
    }
    assert!(
        kicker_runs() > runs_before,
        "the kicker had not run again at {}, the lend ended at {run_end}",
        world.now()
    );
    assert!(by < kicker_slice_end);
}

/// A directed yield whose target's context is not in its slot (a
/// scheduler bug: another pCPU holds it) is waited for once, for
/// `CONTEXT_WAIT_MS`; then the target is put back Runnable, the yielder
/// saved, and the pCPU goes back to the scheduler. Given its context
/// back, the target takes the next yield.
#[test]
fn a_directed_yield_to_a_vcpu_whose_context_is_missing_waits_once_and_gives_it_back() {
    let (world, host) = two_vcpus_on_one_pcpu(11, Some(Variant::OpenEuler));
    let vm = &host.vms[0];
    let (mut runner, yielder) = runner_past_gic_setup(&host, &world);
    let target = sibling_of(yielder);
    let held_elsewhere = vm.vcpus[usize::from(target.index)]
        .lock()
        .take()
        .expect("the target's context is in its slot");
    runner.loaded.as_mut().expect("loaded").ctx.saved.yield_next = Some(target.index);
    // Each counter read moves the clock a thousandth of the wait, so that
    // the wait ends and the slice does not meanwhile.
    let wait = CONTEXT_WAIT_MS * HZ / 1000;
    runner.machine_mut().ticks_per_counter_read = wait / 1000;
    let mut step_start = 0;
    step_until_a_pv_yield(&mut runner, |_| step_start = world.now());
    let waited = world.now() - step_start;
    assert!(
        (wait..2 * wait).contains(&waited),
        "one wait of {CONTEXT_WAIT_MS} ms, not two: the step took {waited} ticks"
    );
    assert!(
        runner.loaded.is_none(),
        "the pCPU went back to the scheduler"
    );
    assert!(
        vm.vcpus[usize::from(yielder.index)].lock().is_some(),
        "the yielder was saved"
    );
    let s = host.sched.lock();
    assert_eq!(
        s.state(target),
        Some(VcpuState::Runnable),
        "the target is put back"
    );
    assert_eq!(s.state(yielder), Some(VcpuState::Runnable));
    drop(s);
    // Given its context back, the target takes the yielder's next yield.
    *vm.vcpus[usize::from(target.index)].lock() = Some(held_elsewhere);
    runner.machine_mut().ticks_per_counter_read = 0;
    for _ in 0..20 {
        assert_eq!(runner.step(), Step::Ran);
        let Some(loaded) = runner.loaded.as_mut() else {
            continue;
        };
        if loaded.vcpu == target {
            assert_eq!(vm.spin.lock().stats().pv_yields, 2);
            return;
        }
        loaded.ctx.saved.yield_next = Some(target.index);
    }
    panic!("the target never ran again");
}
