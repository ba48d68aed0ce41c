//! Scheduler tests, including a small deterministic simulator of pCPUs
//! driven by their slice timers.

use super::*;
use alloc::vec;
use alloc::vec::Vec;

const SLICE: u64 = 1_000;

fn vcpu(vm: u16, index: u16) -> VcpuId {
    VcpuId {
        vm: VmId(vm),
        index,
    }
}

/// A scheduler over pCPUs `0..pcpus` with one VM per entry of `vms`, each
/// with that many Runnable vCPUs of any affinity.
fn scheduler(pcpus: usize, vms: &[u16]) -> Scheduler {
    let mut s = Scheduler::new(CpuSet::first_n(pcpus), SLICE);
    for &count in vms {
        let vm = s.add_vm(DEFAULT_WEIGHT).unwrap();
        for _ in 0..count {
            s.add_vcpu(vm, None, InitialState::Runnable, 0).unwrap();
        }
    }
    s
}

/// Drives every pCPU: each runs its vCPU until its slice ends, then puts
/// it with `SliceExpired` and picks again. Events are processed in time
/// order, ties by pCPU index, so runs are reproducible.
struct Sim {
    s: Scheduler,
    now: u64,
    pcpus: usize,
}

impl Sim {
    /// With `staggered`, pCPU `p` of `n` starts at `p * SLICE / n`, so slice
    /// ends interleave as they do on hardware; otherwise all start at 0.
    fn with_phases(s: Scheduler, staggered: bool) -> Self {
        let pcpus = s.pcpus.len();
        let mut sim = Self { s, now: 0, pcpus };
        for p in 0..pcpus {
            let start = if staggered {
                p as u64 * SLICE / pcpus as u64
            } else {
                0
            };
            sim.s.pick_next(p, start);
        }
        sim
    }

    /// Runs until `until`, checking invariants at every event.
    fn run_until(&mut self, until: u64) {
        loop {
            let next = (0..self.pcpus)
                .filter_map(|p| self.s.slice_end(self.s.current(p)?))
                .min();
            let Some(next) = next.filter(|&t| t <= until) else {
                self.now = until;
                return;
            };
            self.now = next.max(self.now);
            for p in 0..self.pcpus {
                let Some(v) = self.s.current(p) else {
                    self.s.pick_next(p, self.now);
                    continue;
                };
                if self.s.slice_end(v).is_some_and(|end| end <= self.now) {
                    let outcome = self.s.put(v, p, self.now, PutReason::SliceExpired).unwrap();
                    if outcome == PutOutcome::Requeued {
                        self.s.pick_next(p, self.now).expect("work is waiting");
                    }
                }
            }
            self.check_invariants();
        }
    }

    fn check_invariants(&self) {
        for p in 0..self.pcpus {
            if let Some(v) = self.s.current(p) {
                assert_eq!(self.s.state(v), Some(VcpuState::Running { pcpu: p }));
                let slot = self.s.slot(v).unwrap();
                assert!(
                    self.s.vcpus[slot].allowed.contains(p),
                    "{v} outside affinity"
                );
            }
            // Queue links are consistent and lengths match.
            let mut n = 0;
            let mut cursor = self.s.pcpus[p].head;
            let mut prev = None;
            while let Some(slot) = cursor {
                assert_eq!(self.s.vcpus[slot].prev, prev);
                assert_eq!(self.s.vcpus[slot].place, Place::Queue(p));
                assert_eq!(self.s.vcpus[slot].state, VcpuState::Runnable);
                prev = Some(slot);
                cursor = self.s.vcpus[slot].next;
                n += 1;
            }
            assert_eq!(self.s.pcpus[p].tail, prev);
            assert_eq!(n, self.s.pcpus[p].len);
            assert_eq!(self.s.queued.contains(p), n > 0);
        }
    }

    fn run_ticks(&self, v: VcpuId) -> u64 {
        self.s.stats(v, self.now).unwrap().run_ticks
    }
}

/// Run ticks of each vCPU of VM 0.
fn shares(sim: &Sim, count: u16) -> Vec<u64> {
    (0..count).map(|i| sim.run_ticks(vcpu(0, i))).collect()
}

fn spread(runs: &[u64]) -> u64 {
    runs.iter().max().unwrap() - runs.iter().min().unwrap()
}

#[test]
fn round_robin_gives_eight_vcpus_equal_shares_of_two_pcpus() {
    for staggered in [false, true] {
        // Two VMs of four vCPUs each, overcommitted 4:1.
        let mut sim = Sim::with_phases(scheduler(2, &[4, 4]), staggered);
        let rounds = 1_000;
        sim.run_until(rounds * SLICE);
        let all: Vec<VcpuId> = (0..2)
            .flat_map(|vm| (0..4).map(move |i| vcpu(vm, i)))
            .collect();
        let runs: Vec<u64> = all.iter().map(|&v| sim.run_ticks(v)).collect();
        assert!(runs.iter().all(|&r| r > 0), "every vCPU ran");
        assert!(
            spread(&runs) <= SLICE,
            "shares differ by more than one slice: {runs:?}"
        );
        // Both pCPUs were busy all the time after they started.
        let idle_start = if staggered { SLICE / 2 } else { 0 };
        assert_eq!(runs.iter().sum::<u64>(), 2 * rounds * SLICE - idle_start);
        for &v in &all {
            let stats = sim.s.stats(v, sim.now).unwrap();
            // Runnable the whole time: every tick is either run or steal.
            assert_eq!(stats.run_ticks + stats.steal_ticks, rounds * SLICE, "{v}");
            assert_eq!(stats.blocked_ticks, 0);
            // Whole slices, the last one possibly still running.
            assert!(stats.run_ticks.abs_diff(stats.scheduled_in * SLICE) <= SLICE);
            assert_eq!(stats.migrations, 0, "balanced queues need no migration");
        }
        let vm0 = sim.s.vm_stats(VmId(0), sim.now).unwrap();
        let vm1 = sim.s.vm_stats(VmId(1), sim.now).unwrap();
        assert_eq!(vm0.vcpus, 4);
        assert!(vm0.total.run_ticks.abs_diff(vm1.total.run_ticks) <= SLICE);
    }
}

#[test]
fn uneven_queues_still_share_evenly() {
    // vCPU counts that do not divide over the pCPUs: the vCPUs must rotate
    // for the shares to be even, but not on every switch.
    let margin = FAIRNESS_MARGIN_SLICES * SLICE;
    for (pcpus, vcpus) in [(2, 3), (2, 5), (3, 4), (3, 7), (4, 5), (4, 9), (8, 9)] {
        for staggered in [false, true] {
            let mut sim = Sim::with_phases(scheduler(pcpus, &[vcpus]), staggered);
            sim.run_until(3_000 * SLICE);
            let runs = shares(&sim, vcpus);
            assert!(
                spread(&runs) <= margin,
                "{vcpus} on {pcpus}: shares differ by more than the margin: {runs:?}"
            );
            let (migrations, switches) = (0..vcpus)
                .map(|i| sim.s.stats(vcpu(0, i), sim.now).unwrap())
                .fold((0, 0), |(m, s), st| {
                    (m + st.migrations, s + st.scheduled_in)
                });
            assert!(
                migrations * 3 < switches * 2,
                "{vcpus} on {pcpus}: {migrations} migrations in {switches} switches"
            );
        }
    }
}

#[test]
fn a_vcpu_back_from_a_long_block_is_owed_little() {
    // Three vCPUs on two pCPUs; c sleeps for 1000 slices, then all run.
    let mut s = scheduler(2, &[3]);
    let (a, b, c) = (vcpu(0, 0), vcpu(0, 1), vcpu(0, 2));
    let pa = s.home(a).unwrap();
    assert_eq!(s.pick_next(pa, 0), Some(a));
    assert_eq!(s.pick_next(1 - pa, 0), Some(b));
    // c is queued behind a; let it run once and block.
    s.put(a, pa, 1, PutReason::Yield).unwrap();
    assert_eq!(s.pick_next(pa, 1), Some(c));
    s.put(c, pa, 2, PutReason::Wfi { deadline: None }).unwrap();
    assert_eq!(s.pick_next(pa, 2), Some(a));
    let mut sim = Sim {
        s,
        now: 2,
        pcpus: 2,
    };
    sim.run_until(1_000 * SLICE);
    let before = shares(&sim, 3);
    assert!(before[2] <= 1);
    sim.s.wake(c, sim.now).unwrap();
    // Its virtual run time was raised to within the margin of the
    // least-served runnable sibling's: otherwise, at the head of a queue,
    // it would look owed so much that no other pCPU's head would ever be
    // pulled past it.
    let margin = FAIRNESS_MARGIN_SLICES * SLICE;
    let slot = sim.s.slot(c).unwrap();
    let now = sim.now;
    let least = [a, b]
        .map(|v| sim.s.vruntime_at(sim.s.slot(v).unwrap(), now))
        .into_iter()
        .min()
        .unwrap();
    assert!(least >= 999 * SLICE);
    assert_eq!(sim.s.vcpus[slot].vruntime + margin, least);
    sim.run_until(4_000 * SLICE);
    let after: Vec<u64> = shares(&sim, 3)
        .iter()
        .zip(&before)
        .map(|(now, then)| now - then)
        .collect();
    // Fair share of the last 3000 slices of two pCPUs: 2000 slices each.
    // c may catch up by the margin, no more.
    let fair = 2_000 * SLICE;
    for run in &after {
        assert!(run.abs_diff(fair) <= 2 * margin, "{after:?}");
    }
}

#[test]
fn a_lone_vcpu_keeps_its_pcpu_when_the_slice_expires() {
    let mut s = scheduler(1, &[1]);
    let v = vcpu(0, 0);
    assert_eq!(s.pick_next(0, 0), Some(v));
    assert_eq!(s.slice_end(v), Some(SLICE));
    assert_eq!(
        s.put(v, 0, SLICE, PutReason::SliceExpired),
        Ok(PutOutcome::KeepRunning)
    );
    assert_eq!(s.slice_end(v), Some(2 * SLICE));
    let stats = s.stats(v, 2 * SLICE).unwrap();
    assert_eq!((stats.scheduled_in, stats.preemptions), (1, 0));
    assert_eq!(stats.run_ticks, 2 * SLICE);
}

#[test]
fn wfi_blocks_until_woken_and_the_idle_pcpu_is_poked() {
    let mut s = scheduler(2, &[2]);
    let (a, b) = (vcpu(0, 0), vcpu(0, 1));
    assert_eq!(s.pick_next(0, 0), Some(a));
    assert_eq!(s.pick_next(1, 0), Some(b));
    assert_eq!(
        s.put(b, 1, 100, PutReason::Wfi { deadline: None }),
        Ok(PutOutcome::Blocked)
    );
    assert_eq!(
        s.state(b),
        Some(VcpuState::Blocked(BlockReason::Wfi { deadline: None }))
    );
    assert!(!s.is_preempted(b));
    assert_eq!(s.pick_next(1, 100), None);
    assert!(s.is_idle(1));
    assert_eq!(s.next_deadline_on(1), None);
    // An interrupt for b: back on its idle home pCPU, which must be poked.
    assert_eq!(s.wake(b, 400), Ok(Wakeup::Queued { pcpu: 1, ipi: true }));
    assert!(!s.is_idle(1));
    assert!(s.is_preempted(b));
    assert_eq!(s.pick_next(1, 450), Some(b));
    let stats = s.stats(b, 450).unwrap();
    assert_eq!(stats.blocked_ticks, 300);
    assert_eq!(stats.steal_ticks, 50);
    assert_eq!(stats.blocks, 1);
    // Waking a powered-off vCPU does nothing.
    s.put(b, 1, 500, PutReason::PowerOff).unwrap();
    assert_eq!(s.wake(b, 600), Ok(Wakeup::Ignored));
    assert_eq!(s.state(b), Some(VcpuState::Off));
}

#[test]
fn wfi_deadlines_wake_vcpus_in_order() {
    let mut s = scheduler(1, &[3]);
    let (a, b, c) = (vcpu(0, 0), vcpu(0, 1), vcpu(0, 2));
    assert_eq!(s.pick_next(0, 0), Some(a));
    s.put(
        a,
        0,
        10,
        PutReason::Wfi {
            deadline: Some(900),
        },
    )
    .unwrap();
    assert_eq!(s.pick_next(0, 10), Some(b));
    s.put(
        b,
        0,
        20,
        PutReason::Wfi {
            deadline: Some(500),
        },
    )
    .unwrap();
    assert_eq!(s.pick_next(0, 20), Some(c));
    s.put(c, 0, 30, PutReason::Wfi { deadline: None }).unwrap();
    assert_eq!(s.pick_next(0, 30), None);
    assert_eq!(s.next_deadline_on(0), Some(500));
    assert_eq!(s.next_deadline(), Some(500));

    let mut woken = vec![];
    s.expire_timers(499, |v, w| woken.push((v, w)));
    assert!(woken.is_empty());
    s.expire_timers_on(0, 500, |v, w| woken.push((v, w)));
    assert_eq!(woken, [(b, Wakeup::Queued { pcpu: 0, ipi: true })]);
    assert_eq!(s.next_deadline(), Some(900));
    // A wake-up before the deadline disarms the timer.
    assert_eq!(
        s.wake(a, 600),
        Ok(Wakeup::Queued {
            pcpu: 0,
            ipi: false
        })
    );
    assert_eq!(s.next_deadline(), None);
    woken.clear();
    s.expire_timers(10_000, |v, w| woken.push((v, w)));
    assert!(woken.is_empty(), "c has no deadline, a's was disarmed");
    assert_eq!(s.pick_next(0, 700), Some(b));
}

#[test]
fn wfi_past_its_deadline_does_not_block() {
    let mut s = scheduler(1, &[1]);
    let v = vcpu(0, 0);
    s.pick_next(0, 0);
    assert_eq!(
        s.put(
            v,
            0,
            100,
            PutReason::Wfi {
                deadline: Some(100)
            }
        ),
        Ok(PutOutcome::KeepRunning)
    );
    assert_eq!(s.state(v), Some(VcpuState::Running { pcpu: 0 }));
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn a_wake_racing_with_wfi_is_not_lost() {
    let mut s = scheduler(1, &[1]);
    let v = vcpu(0, 0);
    s.pick_next(0, 0);
    // The interrupt arrives while the vCPU is still running (e.g. between
    // the trap and the put).
    assert_eq!(
        s.wake(v, 10),
        Ok(Wakeup::Kicked {
            running_on: Some(0)
        })
    );
    assert!(s.is_kicked(v));
    assert_eq!(
        s.put(v, 0, 20, PutReason::Wfi { deadline: None }),
        Ok(PutOutcome::KeepRunning)
    );
    assert!(!s.is_kicked(v), "the kick is consumed");
    assert_eq!(
        s.put(v, 0, 30, PutReason::Wfi { deadline: None }),
        Ok(PutOutcome::Blocked)
    );
    // A kick while Runnable also makes its next WFI complete.
    let mut s = scheduler(1, &[2]);
    let (a, b) = (vcpu(0, 0), vcpu(0, 1));
    s.pick_next(0, 0);
    assert_eq!(s.wake(b, 5), Ok(Wakeup::Kicked { running_on: None }));
    s.put(a, 0, SLICE, PutReason::SliceExpired).unwrap();
    assert_eq!(s.pick_next(0, SLICE), Some(b));
    assert_eq!(
        s.put(b, 0, SLICE + 1, PutReason::Wfi { deadline: None }),
        Ok(PutOutcome::KeepRunning)
    );
}

#[test]
fn simultaneous_wakeups_spread_over_idle_pcpus() {
    let mut s = Scheduler::new(CpuSet::first_n(3), SLICE);
    let vm = s.add_vm(DEFAULT_WEIGHT).unwrap();
    let pinned = CpuSet::single(0);
    let v: Vec<VcpuId> = (0..2)
        .map(|_| {
            s.add_vcpu(vm, Some(pinned), InitialState::Runnable, 0)
                .unwrap()
        })
        .collect();
    // Both start on pCPU 0 (pinned), then block there.
    assert_eq!(s.pick_next(0, 0), Some(v[0]));
    s.put(v[0], 0, 1, PutReason::Wfi { deadline: None })
        .unwrap();
    assert_eq!(s.pick_next(0, 1), Some(v[1]));
    s.put(v[1], 0, 2, PutReason::Wfi { deadline: None })
        .unwrap();
    assert_eq!(s.pick_next(0, 2), None);
    for p in 1..3 {
        assert_eq!(s.pick_next(p, 2), None);
    }
    // Free vCPUs that blocked on pCPU 0 while 1 and 2 are idle.
    let free: Vec<VcpuId> = (0..2)
        .map(|_| s.add_vcpu(vm, None, InitialState::Off, 2).unwrap())
        .collect();
    for (i, &f) in free.iter().enumerate() {
        assert_eq!(s.power_on(f, 3), Ok(Wakeup::Queued { pcpu: i, ipi: true }));
    }
    // pCPU 0 took the first; the second went to idle pCPU 1.
    assert_eq!(s.pick_next(0, 4), Some(free[0]));
    assert_eq!(s.pick_next(1, 4), Some(free[1]));
    s.put(free[0], 0, 5, PutReason::Wfi { deadline: None })
        .unwrap();
    s.put(free[1], 1, 5, PutReason::Wfi { deadline: None })
        .unwrap();
    assert_eq!(s.pick_next(0, 5), None);
    assert_eq!(s.pick_next(1, 5), None);
    // Two wake-ups at once claim two different idle pCPUs.
    let a = s.wake(free[0], 6).unwrap();
    let b = s.wake(free[1], 6).unwrap();
    assert_eq!(a, Wakeup::Queued { pcpu: 0, ipi: true });
    assert_eq!(b, Wakeup::Queued { pcpu: 1, ipi: true });
    // The pinned ones only ever go to pCPU 0, even with 2 idle.
    assert_eq!(
        s.wake(v[0], 7),
        Ok(Wakeup::Queued {
            pcpu: 0,
            ipi: false
        })
    );
}

#[test]
fn stealing_respects_affinity() {
    let mut s = Scheduler::new(CpuSet::first_n(2), SLICE);
    let vm = s.add_vm(DEFAULT_WEIGHT).unwrap();
    let other_vm = s.add_vm(DEFAULT_WEIGHT).unwrap();
    let (on0, on1) = (CpuSet::single(0), CpuSet::single(1));
    let free = s.add_vcpu(vm, None, InitialState::Runnable, 0).unwrap();
    let pinned: Vec<VcpuId> = (0..3)
        .map(|_| {
            s.add_vcpu(vm, Some(on0), InitialState::Runnable, 0)
                .unwrap()
        })
        .collect();
    let busy = s
        .add_vcpu(other_vm, Some(on1), InitialState::Runnable, 0)
        .unwrap();
    assert_eq!(s.queue_len(0), 4);
    assert_eq!(s.pick_next(1, 0), Some(busy));
    // `free` runs on pCPU 0 first and blocks there: pCPU 0 is its home.
    assert_eq!(s.pick_next(0, 0), Some(free));
    s.put(free, 0, 10, PutReason::Wfi { deadline: None })
        .unwrap();
    assert_eq!(s.pick_next(0, 10), Some(pinned[0]));
    // No pCPU is idle when it wakes: it queues at home, behind two pinned.
    assert_eq!(
        s.wake(free, 20),
        Ok(Wakeup::Queued {
            pcpu: 0,
            ipi: false
        })
    );
    assert_eq!(s.queue_len(0), 3);
    // pCPU 1 runs out of work: it steals `free` from the tail of pCPU 0's
    // queue, skipping the pinned vCPUs ahead of it.
    s.put(busy, 1, 30, PutReason::Wfi { deadline: None })
        .unwrap();
    assert_eq!(s.pick_next(1, 30), Some(free));
    assert_eq!(s.queue_len(0), 2);
    assert_eq!(s.stats(free, 30).unwrap().migrations, 1);
    // Nothing else may move: pCPU 1 goes idle with two vCPUs waiting on 0.
    s.put(free, 1, 40, PutReason::Wfi { deadline: None })
        .unwrap();
    assert_eq!(s.pick_next(1, 40), None);
    assert_eq!(s.queue_len(0), 2);
}

#[test]
fn pinned_vcpus_never_migrate() {
    // Six vCPUs over three pCPUs: two pinned to pCPU 0, two pinned to pCPU
    // 2, two free; all block and wake in a fixed pseudo-random pattern.
    let mut s = Scheduler::new(CpuSet::first_n(3), SLICE);
    let vm = s.add_vm(DEFAULT_WEIGHT).unwrap();
    let affinity = [
        Some(CpuSet::single(0)),
        Some(CpuSet::single(0)),
        Some(CpuSet::single(2)),
        Some(CpuSet::single(2)),
        None,
        None,
    ];
    let ids: Vec<VcpuId> = affinity
        .iter()
        .map(|a| s.add_vcpu(vm, *a, InitialState::Runnable, 0).unwrap())
        .collect();
    let mut rng = prng::Rng::new(0x2545_f491_4f6c_dd1d);
    let mut random = move || rng.next_u64();
    let mut now = 0;
    for _ in 0..20_000 {
        now += 37;
        let p = (random() % 3) as usize;
        match s.current(p) {
            None => {
                s.pick_next(p, now);
            }
            Some(v) => {
                let why = match random() % 4 {
                    0 => PutReason::Wfi {
                        deadline: Some(now + random() % 5_000),
                    },
                    1 => PutReason::Yield,
                    _ => PutReason::SliceExpired,
                };
                let out = s.put(v, p, now, why).unwrap();
                if out != PutOutcome::KeepRunning {
                    s.pick_next(p, now);
                }
            }
        }
        s.expire_timers(now, |_, _| {});
        if random() % 8 == 0 {
            let v = ids[(random() % 6) as usize];
            s.wake(v, now).unwrap();
        }
        for (i, &v) in ids.iter().enumerate() {
            if let (Some(VcpuState::Running { pcpu }), Some(only)) = (s.state(v), affinity[i]) {
                assert!(only.contains(pcpu), "{v} ran on pCPU {pcpu}");
            }
        }
    }
    for (i, &v) in ids.iter().enumerate() {
        let stats = s.stats(v, now).unwrap();
        assert!(stats.scheduled_in > 0, "{v} never ran");
        if affinity[i].is_some() {
            assert_eq!(stats.migrations, 0, "{v}");
        }
    }
    let free_migrations: u64 = ids[4..]
        .iter()
        .map(|&v| s.stats(v, now).unwrap().migrations)
        .sum();
    assert!(free_migrations > 0, "free vCPUs do get balanced");
}

#[test]
fn power_on_and_off_transitions_and_errors() {
    let mut s = Scheduler::new(CpuSet::first_n(2), SLICE);
    let vm = s.add_vm(DEFAULT_WEIGHT).unwrap();
    let boot = s.add_vcpu(vm, None, InitialState::Runnable, 0).unwrap();
    let second = s.add_vcpu(vm, None, InitialState::Off, 0).unwrap();
    assert_eq!(boot, vcpu(0, 0));
    assert_eq!(second, vcpu(0, 1));
    assert_eq!(s.vcpus(vm).collect::<Vec<_>>(), [boot, second]);
    assert_eq!(s.vcpu_count(vm), Some(2));
    assert_eq!(s.power_state(boot), Some(PowerState::OnPending));
    assert_eq!(s.power_state(second), Some(PowerState::Off));
    assert_eq!(s.pick_next(0, 0), Some(boot));
    assert_eq!(s.power_state(boot), Some(PowerState::On));

    // CPU_ON of the second vCPU: it goes to the idle pCPU 1.
    assert_eq!(
        s.power_on(second, 10),
        Ok(Wakeup::Queued { pcpu: 1, ipi: true })
    );
    assert_eq!(s.power_state(second), Some(PowerState::OnPending));
    assert_eq!(
        s.power_on(second, 11),
        Err(SchedError::NotOff(VcpuState::Runnable))
    );
    assert_eq!(
        s.power_on(boot, 11),
        Err(SchedError::NotOff(VcpuState::Running { pcpu: 0 }))
    );
    assert_eq!(s.pick_next(1, 12), Some(second));
    assert_eq!(s.stats(second, 12).unwrap().steal_ticks, 2);

    // CPU_OFF.
    assert_eq!(
        s.put(second, 1, 20, PutReason::PowerOff),
        Ok(PutOutcome::PoweredOff)
    );
    assert_eq!(s.state(second), Some(VcpuState::Off));
    assert_eq!(s.power_state(second), Some(PowerState::Off));
    assert_eq!(s.pick_next(1, 20), None);
    // Off time is not accounted anywhere.
    let stats = s.stats(second, 1_000).unwrap();
    assert_eq!(
        (stats.run_ticks, stats.steal_ticks, stats.blocked_ticks),
        (8, 2, 0)
    );

    // Stopping from outside: refused while running, immediate otherwise.
    assert_eq!(s.power_off(boot, 30), Err(SchedError::Running { pcpu: 0 }));
    s.put(boot, 0, 30, PutReason::Wfi { deadline: Some(99) })
        .unwrap();
    assert_eq!(s.power_off(boot, 31), Ok(()));
    assert_eq!(s.next_deadline(), None, "its timer went with it");
    assert_eq!(s.power_off(boot, 32), Ok(()), "already off");
    s.power_on(second, 40).unwrap();
    assert_eq!(s.power_off(second, 41), Ok(()));
    assert_eq!(s.queue_len(0) + s.queue_len(1), 0);
    assert_eq!(s.pick_next(0, 42), None);
}

#[test]
fn steal_time_accrues_only_while_waiting_for_a_pcpu() {
    let mut s = scheduler(1, &[3]);
    let (a, b, c) = (vcpu(0, 0), vcpu(0, 1), vcpu(0, 2));
    assert_eq!(s.pick_next(0, 0), Some(a));
    // c blocks as soon as it runs; b waits in the queue meanwhile.
    s.put(a, 0, 100, PutReason::SliceExpired).unwrap();
    assert_eq!(s.pick_next(0, 100), Some(b));
    s.put(b, 0, 200, PutReason::SliceExpired).unwrap();
    assert_eq!(s.pick_next(0, 200), Some(c));
    s.put(c, 0, 250, PutReason::Wfi { deadline: None }).unwrap();
    assert_eq!(s.pick_next(0, 250), Some(a));
    let at = 1_250;
    let (sa, sb, sc) = (
        s.stats(a, at).unwrap(),
        s.stats(b, at).unwrap(),
        s.stats(c, at).unwrap(),
    );
    // a: ran 0-100 and from 250; waited 100-250.
    assert_eq!((sa.run_ticks, sa.steal_ticks), (1_100, 150));
    // b: waited 0-100, ran 100-200, waits since 200.
    assert_eq!((sb.run_ticks, sb.steal_ticks), (100, 100 + 1_050));
    // c: waited 0-200, ran 200-250, blocked since: no steal while blocked.
    assert_eq!(
        (sc.run_ticks, sc.steal_ticks, sc.blocked_ticks),
        (50, 200, 1_000)
    );
    assert_eq!(sa.preemptions, 1);
    let vm = s.vm_stats(VmId(0), at).unwrap();
    assert_eq!(vm.vcpus, 3);
    assert_eq!(vm.total.run_ticks, at);
    assert_eq!(vm.total.steal_ticks, 150 + 1_150 + 200);
}

#[test]
fn yield_to_hands_the_rest_of_the_slice_to_a_sibling() {
    // pCPU 0 runs a; b (same VM) waits on pCPU 1's queue behind x (another
    // VM), and y (another VM) waits on pCPU 0.
    let mut s = Scheduler::new(CpuSet::first_n(2), SLICE);
    let vm0 = s.add_vm(DEFAULT_WEIGHT).unwrap();
    let vm1 = s.add_vm(DEFAULT_WEIGHT).unwrap();
    let a = s
        .add_vcpu(vm0, Some(CpuSet::single(0)), InitialState::Runnable, 0)
        .unwrap();
    let x = s
        .add_vcpu(vm1, Some(CpuSet::single(1)), InitialState::Runnable, 0)
        .unwrap();
    let y = s
        .add_vcpu(vm1, Some(CpuSet::single(0)), InitialState::Runnable, 0)
        .unwrap();
    let b = s.add_vcpu(vm0, None, InitialState::Runnable, 0).unwrap();
    let c = s
        .add_vcpu(vm0, Some(CpuSet::single(1)), InitialState::Runnable, 0)
        .unwrap();
    let z = s
        .add_vcpu(vm1, Some(CpuSet::single(1)), InitialState::Runnable, 0)
        .unwrap();
    assert_eq!(s.pick_next(0, 0), Some(a));
    assert_eq!(s.pick_next(1, 0), Some(x));
    assert_eq!(s.home(b), Some(1));
    assert!(s.is_preempted(b));

    // Refusals change nothing.
    assert_eq!(s.yield_to(a, y, 0, 300), Err(YieldError::OtherVm));
    assert_eq!(s.yield_to(a, a, 0, 300), Err(YieldError::ToSelf));
    assert_eq!(s.yield_to(b, a, 0, 300), Err(YieldError::NotRunningHere));
    assert_eq!(s.yield_to(a, b, 1, 300), Err(YieldError::NotRunningHere));
    assert_eq!(s.yield_to(a, c, 0, 300), Err(YieldError::NotAllowedHere));
    assert_eq!(
        s.yield_to(a, vcpu(0, 9), 0, 300),
        Err(YieldError::UnknownVcpu(vcpu(0, 9)))
    );
    assert_eq!(s.yield_to(a, b, 0, SLICE), Err(YieldError::NoSliceLeft));
    assert_eq!(s.queue_len(1), 3);

    // a yields to b at 300: b leaves pCPU 1's queue and runs on pCPU 0 at
    // once, until a's slice would have ended, not for a fresh slice; what
    // its load needs comes with the switch.
    assert_eq!(
        s.yield_to(a, b, 0, 300),
        Ok(Handover {
            slice_end: SLICE,
            steal_ticks: 300
        })
    );
    assert_eq!(s.queue_len(1), 2);
    assert_eq!(s.state(a), Some(VcpuState::Runnable));
    assert_eq!(s.state(b), Some(VcpuState::Running { pcpu: 0 }));
    assert!(!s.is_preempted(b));
    assert_eq!(s.current(0), Some(b));
    assert_eq!(s.pick_next(0, 305), Some(b), "already running");
    assert_eq!(s.slice_end(b), Some(SLICE));
    // a queued behind y: y (the other VM) runs next, exactly when it would
    // have run had a used its whole slice.
    assert_eq!(
        s.put(b, 0, SLICE, PutReason::SliceExpired),
        Ok(PutOutcome::Requeued)
    );
    assert_eq!(s.pick_next(0, SLICE), Some(y));
    let (sa, sb) = (s.stats(a, SLICE).unwrap(), s.stats(b, SLICE).unwrap());
    assert_eq!((sa.run_ticks, sa.yields), (300, 1));
    assert_eq!((sb.run_ticks, sb.yielded_to, sb.migrations), (700, 1, 0));

    // A running or blocked vCPU cannot be yielded to.
    assert!(
        s.yield_to(x, z, 1, 400).is_ok(),
        "same VM, queued on the same pCPU"
    );
    assert_eq!(s.current(1), Some(z));
    assert_eq!(
        s.yield_to(y, z, 0, SLICE + 1),
        Err(YieldError::NotRunnable(VcpuState::Running { pcpu: 1 }))
    );
    s.put(z, 1, 402, PutReason::Wfi { deadline: None }).unwrap();
    assert_eq!(
        s.yield_to(y, z, 0, SLICE + 2),
        Err(YieldError::NotRunnable(VcpuState::Blocked(
            BlockReason::Wfi { deadline: None }
        )))
    );
}

#[test]
fn calls_with_wrong_ids_fail_cleanly() {
    let mut s = scheduler(2, &[1]);
    let v = vcpu(0, 0);
    let ghost = vcpu(3, 0);
    assert_eq!(s.wake(ghost, 0), Err(SchedError::UnknownVcpu(ghost)));
    assert_eq!(
        s.power_on(vcpu(0, 1), 0),
        Err(SchedError::UnknownVcpu(vcpu(0, 1)))
    );
    assert_eq!(s.state(ghost), None);
    assert_eq!(s.stats(ghost, 0), None);
    assert!(!s.is_preempted(ghost));
    assert_eq!(s.vm_stats(VmId(7), 0), None);
    assert_eq!(
        s.add_vcpu(VmId(7), None, InitialState::Off, 0),
        Err(SchedError::UnknownVm(VmId(7)))
    );
    assert_eq!(
        s.add_vcpu(VmId(0), Some(CpuSet::single(5)), InitialState::Off, 0),
        Err(SchedError::NoAllowedPcpu)
    );
    assert_eq!(s.pick_next(9, 0), None);
    assert_eq!(s.pick_next(crate::bringup::smp::MAX_CPUS + 1, 0), None);
    assert_eq!(
        s.put(v, 0, 0, PutReason::Yield),
        Err(SchedError::NotRunningHere { vcpu: v, pcpu: 0 })
    );
    let p = s.home(v).unwrap();
    assert_eq!(s.pick_next(p, 0), Some(v));
    assert_eq!(s.pick_next(p, 1), Some(v), "idempotent while running");
    assert_eq!(s.stats(v, 1).unwrap().scheduled_in, 1);
    assert_eq!(
        s.put(v, 1 - p, 5, PutReason::Yield),
        Err(SchedError::NotRunningHere {
            vcpu: v,
            pcpu: 1 - p
        })
    );
    // Time running backwards never underflows.
    assert_eq!(s.put(v, p, 0, PutReason::Yield), Ok(PutOutcome::Requeued));
    assert_eq!(s.pick_next(p, 0), Some(v));
    assert_eq!(s.stats(v, 0).unwrap().run_ticks, 0);
}

#[test]
fn offline_pcpus_get_no_work() {
    // pCPUs 0 and 2 online, 1 failed to start.
    let online: CpuSet = [0, 2].into_iter().collect();
    let mut s = Scheduler::new(online, SLICE);
    let vm = s.add_vm(DEFAULT_WEIGHT).unwrap();
    for _ in 0..4 {
        s.add_vcpu(vm, None, InitialState::Runnable, 0).unwrap();
    }
    assert_eq!(s.queue_len(1), 0);
    assert_eq!(s.queue_len(0), 2);
    assert_eq!(s.queue_len(2), 2);
    assert_eq!(s.pick_next(1, 0), None);
    assert!(!s.is_idle(1));
    assert_eq!(
        s.add_vcpu(vm, Some(CpuSet::single(1)), InitialState::Off, 0),
        Err(SchedError::NoAllowedPcpu)
    );
}

#[test]
fn runnable_on_counts_running_and_queued() {
    let mut s = Scheduler::new(CpuSet::first_n(2), SLICE);
    let vm = s.add_vm(DEFAULT_WEIGHT).unwrap();
    let pinned = Some(CpuSet::single(0));
    let a = s.add_vcpu(vm, pinned, InitialState::Runnable, 0).unwrap();
    assert_eq!(s.runnable_on(0), 1, "queued");
    assert_eq!(s.pick_next(0, 0), Some(a));
    assert_eq!(s.runnable_on(0), 1, "a alone: KVM would clear TWE");
    let b = s.add_vcpu(vm, pinned, InitialState::Runnable, 0).unwrap();
    let c = s.add_vcpu(vm, pinned, InitialState::Runnable, 0).unwrap();
    assert_eq!(s.runnable_on(0), 3);
    // A directed yield: a queued, b running, c queued.
    s.yield_to(a, b, 0, 10).unwrap();
    assert_eq!(s.runnable_on(0), 3);
    assert_eq!(s.current(0), Some(b));
    s.put(b, 0, 20, PutReason::Wfi { deadline: None }).unwrap();
    assert_eq!(s.runnable_on(0), 2, "b blocked");
    assert_eq!(s.pick_next(0, 20), Some(c));
    assert_eq!(s.runnable_on(0), 2);
    assert_eq!(s.runnable_on(1), 0);
    assert_eq!(s.runnable_on(7), 0, "unknown pCPU");
}

/// `can_yield_to` answers exactly what `yield_to` then does, over a long
/// pseudo-random run with pinned and free vCPUs of two VMs.
/// A kick's hand-over (`lend_to`): the kicked sibling runs at once, but
/// only for the lend (at most to the kicker's slice end), and the kicker
/// waits at the head of its queue, so it runs next; a directed yield
/// sends it to the tail instead. Refusals are a directed yield's.
#[test]
fn a_kick_lends_a_short_run_and_the_kicker_runs_next() {
    let lend = SLICE / 8;
    let setup = || {
        let mut s = Scheduler::new(CpuSet::first_n(1), SLICE);
        let vm = s.add_vm(DEFAULT_WEIGHT).unwrap();
        let [a, b, c] = [0; 3].map(|_| {
            s.add_vcpu(vm, None, InitialState::Runnable, 0)
                .expect("room for a vCPU")
        });
        assert_eq!(s.pick_next(0, 0), Some(a));
        (s, a, b, c)
    };
    let (mut s, a, _, c) = setup();
    assert_eq!(s.lend_to(a, a, 0, 100, lend), Err(YieldError::ToSelf));
    assert_eq!(
        s.lend_to(a, c, 0, SLICE, lend),
        Err(YieldError::NoSliceLeft)
    );
    assert_eq!(
        s.lend_to(a, c, 0, 100, lend),
        Ok(Handover {
            slice_end: 100 + lend,
            steal_ticks: 100
        })
    );
    assert_eq!(s.current(0), Some(c));
    assert_eq!(s.slice_end(c), Some(100 + lend));
    assert_eq!(s.state(a), Some(VcpuState::Runnable));
    assert_eq!(s.queue_len(0), 2);
    // The lend ends: the kicker, not b (queued before it), runs next.
    assert_eq!(
        s.put(c, 0, 100 + lend, PutReason::SliceExpired),
        Ok(PutOutcome::Requeued)
    );
    assert_eq!(s.pick_next(0, 100 + lend), Some(a));
    assert_eq!(s.stats(c, 100 + lend).unwrap().run_ticks, lend);
    // Or the lent run yields: the kicker again.
    let (mut s, a, _, c) = setup();
    assert!(s.lend_to(a, c, 0, 100, lend).is_ok());
    assert_eq!(s.put(c, 0, 150, PutReason::Yield), Ok(PutOutcome::Requeued));
    assert_eq!(s.pick_next(0, 150), Some(a));
    // Two vCPUs only.
    let mut s = Scheduler::new(CpuSet::first_n(1), SLICE);
    let vm = s.add_vm(DEFAULT_WEIGHT).unwrap();
    let a = s.add_vcpu(vm, None, InitialState::Runnable, 0).unwrap();
    let c = s.add_vcpu(vm, None, InitialState::Runnable, 0).unwrap();
    assert_eq!(s.pick_next(0, 0), Some(a));
    assert!(s.lend_to(a, c, 0, 100, lend).is_ok());
    assert_eq!(s.put(c, 0, 150, PutReason::Yield), Ok(PutOutcome::Requeued));
    assert_eq!(s.pick_next(0, 150), Some(a));
    // A directed yield in its place: the yielder goes behind b.
    let (mut s, a, b, c) = setup();
    assert!(s.yield_to(a, c, 0, 100).is_ok());
    assert_eq!(s.slice_end(c), Some(SLICE));
    assert_eq!(
        s.put(c, 0, SLICE, PutReason::SliceExpired),
        Ok(PutOutcome::Requeued)
    );
    assert_eq!(s.pick_next(0, SLICE), Some(b));
    // A lend longer than what is left of the slice ends with the slice.
    let (mut s, a, _, c) = setup();
    let late = SLICE - lend / 2;
    assert_eq!(
        s.lend_to(a, c, 0, late, lend).map(|h| h.slice_end),
        Ok(SLICE)
    );
}

#[test]
fn can_yield_to_agrees_with_yield_to() {
    let mut s = Scheduler::new(CpuSet::first_n(3), SLICE);
    let mut all = Vec::new();
    for vm in 0..2usize {
        let id = s.add_vm(DEFAULT_WEIGHT).unwrap();
        for i in 0..4u16 {
            let affinity = match i {
                0 => Some(CpuSet::single(vm)),
                1 => Some(CpuSet::single(2)),
                _ => None,
            };
            all.push(s.add_vcpu(id, affinity, InitialState::Runnable, 0).unwrap());
        }
    }
    all.push(vcpu(0, 9));
    let mut rng = prng::Rng::new(0x2545_F491_4F6C_DD1D);
    let mut random = move |n: usize| rng.index(n);
    let mut now = 0;
    let mut accepted = 0;
    let mut refusals = Vec::new();
    for _ in 0..5_000 {
        now += random(40) as u64;
        let pcpu = random(3);
        match random(10) {
            0 | 1 => {
                s.pick_next(pcpu, now);
            }
            2 => {
                if let Some(v) = s.current(pcpu) {
                    s.put(v, pcpu, now, PutReason::SliceExpired).unwrap();
                }
            }
            3 => {
                if let Some(v) = s.current(pcpu) {
                    s.put(v, pcpu, now, PutReason::Wfi { deadline: None })
                        .unwrap();
                }
            }
            4 | 5 => {
                let _ = s.wake(all[random(all.len())], now);
            }
            _ => {
                let from = s.current(pcpu).unwrap_or(all[random(all.len())]);
                let target = all[random(all.len())];
                let at = [now, now, now, now + SLICE][random(4)];
                let predicted = s.can_yield_to(from, target, pcpu, at);
                assert_eq!(s.yield_to(from, target, pcpu, at).map(|_| ()), predicted);
                match predicted {
                    Ok(()) => {
                        accepted += 1;
                        s.pick_next(pcpu, at);
                    }
                    Err(e) => refusals.push(core::mem::discriminant(&e)),
                }
            }
        }
    }
    // (Wake-up preemptions cut slices short, so some yields find no slice
    // left to give.)
    assert!(accepted > 50, "{accepted}");
    // Every kind of refusal came up.
    refusals.sort_by_key(|d| alloc::format!("{d:?}"));
    refusals.dedup();
    assert_eq!(refusals.len(), 7, "{refusals:?}");
}

#[test]
fn a_slice_is_extended_once_and_only_over_the_vms_own_vcpus() {
    // One pCPU, VM 0 with two vCPUs: vCPU 0 runs, vCPU 1 waits.
    let mut s = scheduler(1, &[2]);
    let running = s.pick_next(0, 0).unwrap();
    let end = s.slice_end(running).unwrap();
    assert_eq!(s.extend_slice(running, 0, end, 100), Some(end + 100));
    assert_eq!(s.slice_end(running), Some(end + 100));
    assert_eq!(
        s.extend_slice(running, 0, end + 100, 100),
        None,
        "once per slice"
    );
    assert_eq!(s.stats(running, end).unwrap().extensions, 1);
    // The vCPU that is not running, or a wrong pCPU, gets nothing.
    assert_eq!(s.extend_slice(vcpu(0, 1), 0, end, 100), None);
    assert_eq!(s.extend_slice(running, 1, end, 100), None);
    // Preempted at the extended end; the next slice may be extended again.
    assert_eq!(
        s.put(running, 0, end + 100, PutReason::SliceExpired),
        Ok(PutOutcome::Requeued)
    );
    let next = s.pick_next(0, end + 100).unwrap();
    assert_eq!(next, vcpu(0, 1));
    assert!(s.extend_slice(next, 0, end + 1100, 100).is_some());

    // Alone on its pCPU: the slice is renewed anyway, no extension.
    let mut s = scheduler(1, &[1]);
    let alone = s.pick_next(0, 0).unwrap();
    assert_eq!(s.extend_slice(alone, 0, SLICE, 100), None);

    // Another VM's vCPU waits for the pCPU: no extension at its cost.
    let mut s = scheduler(1, &[1, 1]);
    let first = s.pick_next(0, 0).unwrap();
    assert_eq!(s.queue_len(0), 1);
    assert_eq!(s.extend_slice(first, 0, SLICE, 100), None);
    assert_eq!(s.stats(first, SLICE).unwrap().extensions, 0);

    // A renewal starts a new slice that may be extended again.
    let mut s = scheduler(1, &[2]);
    let v = s.pick_next(0, 0).unwrap();
    assert!(s.extend_slice(v, 0, SLICE, 100).is_some());
    // The sibling blocks: the next expiry renews in place.
    s.put(v, 0, SLICE + 100, PutReason::SliceExpired).unwrap();
    let w = s.pick_next(0, SLICE + 100).unwrap();
    s.put(w, 0, SLICE + 150, PutReason::Wfi { deadline: None })
        .unwrap();
    let v = s.pick_next(0, SLICE + 150).unwrap();
    assert_eq!(
        s.put(v, 0, 2 * SLICE + 150, PutReason::SliceExpired),
        Ok(PutOutcome::KeepRunning)
    );
    s.wake(w, 2 * SLICE + 200).unwrap();
    assert!(s.extend_slice(v, 0, 3 * SLICE + 150, 100).is_some());

    // A directed yield hands the slice on as it is: extended once, it is
    // not extended again by the vCPU that takes it, nor by the next.
    let mut s = scheduler(1, &[3]);
    let a = s.pick_next(0, 0).unwrap();
    let end = s.slice_end(a).unwrap();
    assert!(s.extend_slice(a, 0, end, 100).is_some());
    let (b, c) = (vcpu(0, 1), vcpu(0, 2));
    let handover = s.yield_to(a, b, 0, end + 10).unwrap();
    assert_eq!(handover.slice_end, end + 100);
    assert_eq!(s.extend_slice(b, 0, end + 100, 100), None);
    s.yield_to(b, c, 0, end + 20).unwrap();
    assert_eq!(s.extend_slice(c, 0, end + 100, 100), None);
    // A slice not yet extended may be, once, by whoever holds it.
    s.put(c, 0, end + 100, PutReason::SliceExpired).unwrap();
    let d = s.pick_next(0, end + 100).unwrap();
    let end = s.slice_end(d).unwrap();
    let e = if d == a { b } else { a };
    s.yield_to(d, e, 0, end - 10).unwrap();
    assert!(s.extend_slice(e, 0, end, 100).is_some());
}

/// Every queue is a proper list (acyclic, linked both ways, its length
/// right) and every vCPU is where its state says.
fn assert_consistent(s: &Scheduler) {
    for (p, pcpu) in s.pcpus.iter().enumerate() {
        let mut n = 0;
        let mut cursor = pcpu.head;
        let mut prev = None;
        while let Some(slot) = cursor {
            assert!(n <= s.vcpus.len(), "pCPU {p}'s queue has a cycle");
            assert_eq!(
                s.vcpus[slot].prev, prev,
                "pCPU {p}: back link of slot {slot}"
            );
            assert_eq!(s.vcpus[slot].place, Place::Queue(p), "slot {slot}");
            assert_eq!(s.vcpus[slot].state, VcpuState::Runnable, "slot {slot}");
            prev = Some(slot);
            cursor = s.vcpus[slot].next;
            n += 1;
        }
        assert_eq!(pcpu.tail, prev, "pCPU {p}'s tail");
        assert_eq!(n, pcpu.len, "pCPU {p}'s length");
        if let Some(slot) = pcpu.current {
            assert_eq!(s.vcpus[slot].state, VcpuState::Running { pcpu: p });
        }
    }
}

/// One operation of a random mix on `pcpus` pCPUs at `now`: a pick, a
/// put for any reason, a wake, a directed yield, a slice extension, timer
/// expiry, or a slice end.
fn random_operation(
    s: &mut Scheduler,
    vcpus: &[VcpuId],
    pcpus: usize,
    now: u64,
    random: &mut impl FnMut(u64) -> u64,
) {
    let p = random(pcpus as u64) as usize;
    match random(8) {
        0 | 1 => {
            s.pick_next(p, now);
        }
        2 => {
            if let Some(v) = s.current(p) {
                let why = match random(3) {
                    0 => PutReason::SliceExpired,
                    1 => PutReason::Yield,
                    _ => PutReason::Wfi {
                        deadline: Some(now + random(3000)),
                    },
                };
                s.put(v, p, now, why).unwrap();
            }
        }
        3 => {
            let v = vcpus[random(vcpus.len() as u64) as usize];
            let _ = s.wake(v, now);
        }
        4 => {
            if let Some(v) = s.current(p) {
                let target = vcpus[random(vcpus.len() as u64) as usize];
                let _ = s.yield_to(v, target, p, now);
            }
        }
        5 => {
            if let Some(v) = s.current(p) {
                let _ = s.extend_slice(v, p, now, 100);
            }
        }
        6 => s.expire_timers(now, |_, _| {}),
        _ => {
            if let Some(v) = s.current(p)
                && s.slice_end(v).is_some_and(|end| end <= now)
            {
                s.put(v, p, now, PutReason::SliceExpired).unwrap();
            }
        }
    }
}

#[test]
fn random_operations_keep_every_queue_consistent() {
    // A fixed seed: reproducible.
    let mut rng = prng::Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut random = move |n: u64| rng.below(n);
    for (pcpus, vms) in [
        (1usize, &[2u16][..]),
        (2, &[2]),
        (2, &[4]),
        (2, &[3, 2]),
        (4, &[8, 2]),
    ] {
        let mut s = scheduler(pcpus, vms);
        let vcpus: Vec<VcpuId> = (0..vms.len() as u16)
            .flat_map(|vm| (0..vms[usize::from(vm)]).map(move |i| vcpu(vm, i)))
            .collect();
        let mut now = 0;
        for _ in 0..20_000 {
            now += 1 + random(300);
            random_operation(&mut s, &vcpus, pcpus, now, &mut random);
            assert_consistent(&s);
        }
    }
}

/// The directed yield as the generic operations would do it: the yielder
/// requeued, the target run with the inherited slice end and extension.
fn yield_by_requeue_and_run(
    s: &mut Scheduler,
    from: VcpuId,
    target: VcpuId,
    pcpu: usize,
    now: u64,
) -> Result<Handover, YieldError> {
    let (from_slot, target_slot) = s.yield_slots(from, target, pcpu, now)?;
    let (slice_end, extended) = (s.vcpus[from_slot].slice_end, s.vcpus[from_slot].extended);
    s.vcpus[from_slot].stats.yields += 1;
    s.requeue(from_slot, pcpu, now);
    s.run(target_slot, pcpu, now, slice_end);
    s.vcpus[target_slot].stats.yielded_to += 1;
    s.vcpus[target_slot].extended = extended;
    Ok(Handover {
        slice_end,
        steal_ticks: s.vcpus[target_slot].stats.steal_ticks,
    })
}

/// The fused switch of `yield_to` leaves every field of the scheduler as
/// the generic put-and-run would, over random schedules of two VMs with
/// yields between siblings on every pCPU.
#[test]
fn a_directed_yield_keeps_the_books_of_a_put_and_a_run() {
    for (pcpus, vms) in [(1usize, &[3u16][..]), (2, &[3, 2]), (4, &[6, 3])] {
        let (mut fused, mut generic) = (scheduler(pcpus, vms), scheduler(pcpus, vms));
        let vcpus: Vec<VcpuId> = (0..vms.len() as u16)
            .flat_map(|vm| (0..vms[usize::from(vm)]).map(move |i| vcpu(vm, i)))
            .collect();
        // Two generators with one seed: both schedulers see the same
        // operations.
        let seed = 0x2545_f491_4f6c_dd1d;
        let (mut a, mut b) = (prng::Rng::new(seed), prng::Rng::new(seed));
        let mut choice = prng::Rng::new(seed ^ 1);
        let (mut now, mut yields) = (0, 0);
        for _ in 0..10_000 {
            now += 1 + choice.below(300);
            let p = choice.below(pcpus as u64) as usize;
            let target = vcpus[choice.below(vcpus.len() as u64) as usize];
            match fused.current(p) {
                Some(from) if choice.below(3) == 0 => {
                    let answer = fused.yield_to(from, target, p, now);
                    yields += u32::from(answer.is_ok());
                    assert_eq!(
                        answer,
                        yield_by_requeue_and_run(&mut generic, from, target, p, now)
                    );
                }
                _ => {
                    random_operation(&mut fused, &vcpus, pcpus, now, &mut |n| a.below(n));
                    random_operation(&mut generic, &vcpus, pcpus, now, &mut |n| b.below(n));
                }
            }
            assert_eq!(format!("{fused:?}"), format!("{generic:?}"), "at {now}");
        }
        assert!(yields > 100, "{yields} yields accepted");
    }
}

#[test]
fn steal_ticks_agrees_with_the_full_stats() {
    let mut s = scheduler(1, &[3]);
    let running = s.pick_next(0, 0).unwrap();
    for now in [0, 5, SLICE, 3 * SLICE + 7] {
        for v in [vcpu(0, 0), vcpu(0, 1), vcpu(0, 2)] {
            assert_eq!(
                s.steal_ticks(v, now),
                s.stats(v, now).map(|st| st.steal_ticks),
                "{v} at {now}"
            );
        }
    }
    s.put(running, 0, SLICE, PutReason::SliceExpired).unwrap();
    s.pick_next(0, SLICE);
    let queued = vcpu(0, 0);
    assert_eq!(s.steal_ticks(queued, SLICE + 40), Some(40));
    assert_eq!(s.steal_ticks(vcpu(9, 0), 0), None);
}

/// [`random_operation`]s on a machine of `pcpus` pCPUs and `vms` VMs of `vcpus_per_vm` vCPUs with
/// a quarter of the VMs pinned to half the pCPUs; returns the mean and the
/// largest number of elements one operation's scans visited.
fn work_per_operation(pcpus: usize, vms: u16, vcpus_per_vm: u16) -> (f64, u64) {
    let mut rng = prng::Rng::new(0x2545_f491_4f6c_dd1d);
    let mut random = move |n: u64| rng.below(n);
    let mut s = Scheduler::new(CpuSet::first_n(pcpus), SLICE);
    let half = CpuSet::first_n(pcpus / 2);
    let mut vcpus = Vec::new();
    for n in 0..vms {
        let vm = s.add_vm(DEFAULT_WEIGHT).unwrap();
        let affinity = (n % 4 == 0).then_some(half);
        for _ in 0..vcpus_per_vm {
            vcpus.push(s.add_vcpu(vm, affinity, InitialState::Runnable, 0).unwrap());
        }
    }
    let ops = 20_000;
    let (mut total, mut most, mut now) = (0, 0, 0);
    for _ in 0..ops {
        now += 1 + random(300);
        let before = s.visits.get();
        random_operation(&mut s, &vcpus, pcpus, now, &mut random);
        let work = s.visits.get() - before;
        total += work;
        most = most.max(work);
    }
    (total as f64 / f64::from(ops), most)
}

/// The scheduler's hot paths scale with the machine at most linearly: on
/// machines 4 and 16 times larger (pCPUs and vCPUs alike), the mean work
/// per operation grows about 4 and 16 times at worst (quadratic work
/// would grow 16 and 256 times), and no single operation visits more than
/// the machine's pCPUs and vCPUs together, plus the vCPUs it woke.
#[test]
fn work_per_operation_grows_linearly() {
    let small = work_per_operation(16, 4, 16);
    let medium = work_per_operation(64, 16, 16);
    let large = work_per_operation(256, 16, 64);
    for ((mean, most), (pcpus, vcpus)) in
        [small, medium, large]
            .into_iter()
            .zip([(16u64, 64u64), (64, 256), (256, 1024)])
    {
        assert!(mean > 0.0, "the scans were counted");
        assert!(
            most <= 2 * (pcpus + vcpus),
            "one operation visited {most} elements on {pcpus} pCPUs / {vcpus} vCPUs"
        );
    }
    let growth = |(a, _): (f64, u64), (b, _): (f64, u64)| b / a;
    assert!(
        growth(small, medium) <= 6.0,
        "x4 machine: work per operation grew {:.1}x ({small:?} -> {medium:?})",
        growth(small, medium)
    );
    assert!(
        growth(small, large) <= 24.0,
        "x16 machine: work per operation grew {:.1}x ({small:?} -> {large:?})",
        growth(small, large)
    );
}

/// One pCPU, two vCPUs of one VM: `a` runs with `b` blocked in WFI since
/// 0; the scheduler at `now`, `a` scheduled in at `since`.
fn one_pcpu_a_running_b_blocked(since: u64) -> (Scheduler, VcpuId, VcpuId) {
    let mut s = scheduler(1, &[2]);
    let (a, b) = (vcpu(0, 0), vcpu(0, 1));
    assert_eq!(s.pick_next(0, 0), Some(a));
    assert_eq!(s.put(a, 0, 0, PutReason::Yield), Ok(PutOutcome::Requeued));
    assert_eq!(s.pick_next(0, 0), Some(b));
    assert_eq!(
        s.put(b, 0, 0, PutReason::Wfi { deadline: None }),
        Ok(PutOutcome::Blocked)
    );
    assert_eq!(s.pick_next(0, 0), Some(a));
    if since > 0 {
        // Renewed in place: `a` has run since 0.
        assert_eq!(
            s.put(a, 0, since, PutReason::SliceExpired),
            Ok(PutOutcome::KeepRunning)
        );
    }
    (s, a, b)
}

#[test]
fn a_woken_vcpu_with_less_cpu_time_preempts_the_running_one() {
    let (mut s, a, b) = one_pcpu_a_running_b_blocked(0);
    // `a` has run 1.5 slices, `b` nothing: `b` is owed more than the
    // wake-up granularity, so `a`'s slice ends now and `b` waits at the
    // head.
    let now = SLICE + SLICE / 2;
    assert_eq!(s.slice_end(a), Some(SLICE));
    let _ = s.put(a, 0, SLICE, PutReason::SliceExpired);
    assert_eq!(s.wake(b, now), Ok(Wakeup::Preempting { pcpu: 0 }));
    assert_eq!(s.slice_end(a), Some(now));
    assert_eq!(s.state(b), Some(VcpuState::Runnable));
    assert_eq!(s.stats(a, now).unwrap().wakeup_preemptions, 1);
    // The runner puts `a` at its (new) slice end; `b` runs next.
    assert_eq!(
        s.put(a, 0, now, PutReason::SliceExpired),
        Ok(PutOutcome::Requeued)
    );
    assert_eq!(s.pick_next(0, now), Some(b));
}

#[test]
fn a_woken_vcpu_without_enough_credit_waits_its_turn() {
    let (mut s, a, b) = one_pcpu_a_running_b_blocked(0);
    // `a` has run less than the granularity: no preemption.
    let now = SLICE / WAKEUP_GRANULARITY_DIVISOR - 1;
    assert_eq!(
        s.wake(b, now),
        Ok(Wakeup::Queued {
            pcpu: 0,
            ipi: false
        })
    );
    assert_eq!(s.slice_end(a), Some(SLICE));
    assert_eq!(s.stats(a, now).unwrap().wakeup_preemptions, 0);
}

#[test]
fn the_preempted_vcpu_keeps_its_minimum_run() {
    // `a` was scheduled in (renewed) long ago but picked again just now:
    // it keeps `slice / MIN_RUN_DIVISOR` from its scheduling-in.
    let mut s = scheduler(1, &[2]);
    let (a, b) = (vcpu(0, 0), vcpu(0, 1));
    assert_eq!(s.pick_next(0, 0), Some(a));
    assert_eq!(
        s.put(a, 0, SLICE, PutReason::Yield),
        Ok(PutOutcome::Requeued)
    );
    assert_eq!(s.pick_next(0, SLICE), Some(b));
    assert_eq!(
        s.put(b, 0, SLICE, PutReason::Wfi { deadline: None }),
        Ok(PutOutcome::Blocked)
    );
    // `a` again, scheduled in at SLICE with a vruntime of SLICE; `b` has 0.
    assert_eq!(s.pick_next(0, SLICE), Some(a));
    let now = SLICE + 1;
    assert_eq!(s.wake(b, now), Ok(Wakeup::Preempting { pcpu: 0 }));
    assert_eq!(s.slice_end(a), Some(SLICE + SLICE / MIN_RUN_DIVISOR));
}

#[test]
fn a_sibling_preempts_later_unless_the_running_vcpu_is_cpu_bound() {
    // One pCPU: `a` (VM 0) ran half a slice, blocked, and is back running
    // since 600; its sibling `b` and `c` of VM 1 blocked with no CPU time.
    let (a, b, c) = (vcpu(0, 0), vcpu(0, 1), vcpu(1, 0));
    let a_back_running = || {
        let mut s = scheduler(1, &[2, 1]);
        assert_eq!(s.pick_next(0, 0), Some(a));
        let _ = s.put(a, 0, SLICE / 2, PutReason::Wfi { deadline: None });
        for v in [c, b] {
            assert_eq!(s.pick_next(0, SLICE / 2), Some(v));
            let _ = s.put(v, 0, SLICE / 2, PutReason::Wfi { deadline: None });
        }
        let _ = s.wake(a, 600);
        assert_eq!(s.pick_next(0, 600), Some(a));
        s
    };
    // `a` has not run a slice since it blocked: its sibling preempts it
    // after the siblings' longer minimum run...
    let mut s = a_back_running();
    assert_eq!(s.wake(b, 601), Ok(Wakeup::Preempting { pcpu: 0 }));
    assert_eq!(s.slice_end(a), Some(600 + SLICE / SIBLING_MIN_RUN_DIVISOR));
    // ...another VM's vCPU, owed the time, after the short one.
    let mut s = a_back_running();
    assert_eq!(s.wake(c, 601), Ok(Wakeup::Preempting { pcpu: 0 }));
    assert_eq!(s.slice_end(a), Some(600 + SLICE / MIN_RUN_DIVISOR));
    // Once `a` has run a whole slice without blocking (and is scheduled in
    // again after a yield), its sibling gets the short minimum too.
    let mut s = a_back_running();
    let now = 600 + SLICE;
    assert_eq!(s.put(a, 0, now, PutReason::Yield), Ok(PutOutcome::Requeued));
    assert_eq!(s.pick_next(0, now), Some(a));
    assert_eq!(s.wake(b, now + 1), Ok(Wakeup::Preempting { pcpu: 0 }));
    assert_eq!(s.slice_end(a), Some(now + SLICE / MIN_RUN_DIVISOR));
    const { assert!(SIBLING_MIN_RUN_DIVISOR < MIN_RUN_DIVISOR) };
}

#[test]
fn a_woken_vcpu_preempts_where_it_waits_least() {
    // Two pCPUs, one VM: `s` computes on pCPU 1 from the start; `b` ran
    // briefly on pCPU 0 and blocked; `a` ran half a slice there, blocked,
    // and is back running on pCPU 0 when it wakes `b`, whose home is
    // pCPU 0.
    let (b, s_, a) = (vcpu(0, 0), vcpu(0, 1), vcpu(0, 2));
    let mut s = scheduler(2, &[3]);
    assert_eq!(s.pick_next(0, 0), Some(b));
    assert_eq!(s.pick_next(1, 0), Some(s_));
    let _ = s.put(b, 0, 10, PutReason::Wfi { deadline: None });
    assert_eq!(s.pick_next(0, 10), Some(a));
    let blocked = 10 + SLICE / 2;
    let _ = s.put(a, 0, blocked, PutReason::Wfi { deadline: None });
    let back = blocked + 100;
    let _ = s.wake(a, back);
    assert_eq!(s.pick_next(0, back), Some(a));
    // On pCPU 0 `b` would wait out its sibling's longer minimum run; `s`
    // has run past any minimum: `b` preempts `s`, at once.
    let now = back + 1;
    assert_eq!(s.wake(b, now), Ok(Wakeup::Preempting { pcpu: 1 }));
    assert_eq!(s.slice_end(s_), Some(now));
    assert_eq!(s.slice_end(a), Some(back + SLICE));
    assert_eq!(
        s.put(s_, 1, now, PutReason::SliceExpired),
        Ok(PutOutcome::Requeued)
    );
    assert_eq!(s.pick_next(1, now), Some(b));
}

#[test]
fn a_woken_vcpu_runs_on_the_first_pcpu_that_switches() {
    // Two pCPUs, one VM of four vCPUs: `w` runs briefly and blocks; the
    // other three compute. `w` is woken on pCPU 1 while both pCPUs run
    // vCPUs just scheduled in, so it waits there for one's minimum run;
    // when the vCPU on pCPU 0 blocks first, pCPU 0 takes `w` at once,
    // ahead of its own queue.
    let mut s = scheduler(2, &[4]);
    let w = vcpu(0, 0);
    assert_eq!(s.pick_next(0, 0), Some(w));
    assert_eq!(
        s.put(w, 0, 10, PutReason::Wfi { deadline: None }),
        Ok(PutOutcome::Blocked)
    );
    // The others take turns for a slice or two each: `w` is owed more
    // than the granularity, less than the margin over each of them.
    let mut now = 10;
    let mut running = [s.pick_next(0, now).unwrap(), s.pick_next(1, now).unwrap()];
    for _ in 0..2 {
        now += SLICE;
        for (pcpu, v) in running.iter_mut().enumerate() {
            let _ = s.put(*v, pcpu, now, PutReason::SliceExpired);
            *v = s.pick_next(pcpu, now).unwrap();
        }
    }
    assert!(!running.contains(&w));
    now += 1;
    let Ok(Wakeup::Preempting { pcpu }) = s.wake(w, now) else {
        panic!("w, owed its share, preempts");
    };
    let other = 1 - pcpu;
    // The vCPU on the other pCPU blocks before the minimum run is up.
    now += 5;
    assert_eq!(
        s.put(
            running[other],
            other,
            now,
            PutReason::Wfi { deadline: None }
        ),
        Ok(PutOutcome::Blocked)
    );
    assert_eq!(s.pick_next(other, now), Some(w));
    // The vCPU it would have preempted keeps its pCPU, its slice renewed
    // when the minimum run is up since nobody owed it waits there.
    let third = running[pcpu];
    assert_eq!(s.current(pcpu), Some(third));
}

#[test]
fn a_waiting_vcpu_given_an_interrupt_moves_ahead() {
    // One pCPU: `a` runs, `c` waits at the head of the queue, `b` (never
    // run) behind it. An interrupt for `b` while it waits puts it ahead of
    // `c` and ends `a`'s slice.
    let mut s = scheduler(1, &[3]);
    let (a, b, c) = (vcpu(0, 0), vcpu(0, 1), vcpu(0, 2));
    assert_eq!(s.pick_next(0, 0), Some(a));
    let _ = s.put(a, 0, SLICE, PutReason::SliceExpired);
    assert_eq!(s.pick_next(0, SLICE), Some(b));
    let _ = s.put(b, 0, SLICE + 10, PutReason::Yield);
    assert_eq!(s.pick_next(0, SLICE + 10), Some(c));
    let _ = s.put(c, 0, 2 * SLICE + 10, PutReason::SliceExpired);
    // Queue: a (run SLICE), b (run 10), c (run SLICE); a runs.
    assert_eq!(s.pick_next(0, 2 * SLICE + 10), Some(a));
    let now = 2 * SLICE + 500;
    assert_eq!(s.wake(b, now), Ok(Wakeup::Preempting { pcpu: 0 }));
    assert!(s.is_kicked(b), "its next WFI still returns at once");
    assert_eq!(s.slice_end(a), Some(now));
    let _ = s.put(a, 0, now, PutReason::SliceExpired);
    assert_eq!(s.pick_next(0, now), Some(b));
}

#[test]
fn a_wakeup_lets_a_directed_yield_run_its_minimum() {
    // One pCPU, three vCPUs: `a` hands its slice to `c`; `b`, woken just
    // after with less CPU time than either, preempts `c` only once `c` has
    // run the minimum: the hand-over is not undone at once.
    let mut s = scheduler(1, &[3]);
    let (a, b, c) = (vcpu(0, 0), vcpu(0, 1), vcpu(0, 2));
    assert_eq!(s.pick_next(0, 0), Some(a));
    let _ = s.put(a, 0, SLICE, PutReason::SliceExpired);
    assert_eq!(s.pick_next(0, SLICE), Some(b));
    assert_eq!(
        s.put(b, 0, SLICE, PutReason::Wfi { deadline: None }),
        Ok(PutOutcome::Blocked)
    );
    assert_eq!(s.pick_next(0, SLICE), Some(c));
    let _ = s.put(c, 0, 3 * SLICE, PutReason::SliceExpired);
    assert_eq!(s.pick_next(0, 3 * SLICE), Some(a));
    assert!(s.yield_to(a, c, 0, 3 * SLICE + 10).is_ok());
    assert_eq!(
        s.wake(b, 3 * SLICE + 20),
        Ok(Wakeup::Preempting { pcpu: 0 })
    );
    assert_eq!(s.pick_next(0, 3 * SLICE + 20), Some(c));
    assert_eq!(
        s.slice_end(c),
        Some(3 * SLICE + 10 + SLICE / MIN_RUN_DIVISOR),
        "c keeps its minimum run"
    );
    // Then `b` (vruntime far below) runs, ahead of the yielder.
    let now = 3 * SLICE + 10 + SLICE / MIN_RUN_DIVISOR;
    assert_eq!(
        s.put(c, 0, now, PutReason::SliceExpired),
        Ok(PutOutcome::Requeued)
    );
    assert_eq!(s.pick_next(0, now), Some(b));
}

/// One pCPU shared by a vCPU that always computes (VM 0) and one that
/// runs `burst` ticks, blocks in WFI and is woken `gap` ticks later by an
/// interrupt it sent itself (VM 1), for `until` ticks. Returns each one's
/// run ticks, the woken vCPU's worst and median wait from its wake-up to
/// being scheduled in, and the preemptions the hog saw.
fn hog_and_self_waker(burst: u64, gap: u64, until: u64) -> ([u64; 2], u64, u64, u64) {
    let mut s = scheduler(1, &[1, 1]);
    let (hog, waker) = (vcpu(0, 0), vcpu(1, 0));
    let mut now = 0;
    // When the waker's interrupt arrives while it is blocked.
    let mut wake_at: Option<u64> = None;
    // When it was woken and not yet scheduled in.
    let mut woken_at: Option<u64> = None;
    let mut waits = Vec::new();
    while now < until {
        let running = s.pick_next(0, now).expect("someone is runnable");
        let slice_end = s.slice_end(running).unwrap();
        if running == waker {
            if let Some(at) = woken_at.take() {
                waits.push(now - at);
            }
            if now + burst <= slice_end {
                now += burst;
                let _ = s.put(waker, 0, now, PutReason::Wfi { deadline: None });
                wake_at = Some(now + gap);
            } else {
                now = slice_end;
                let _ = s.put(waker, 0, now, PutReason::SliceExpired);
            }
            continue;
        }
        // The hog runs to its slice end, unless the waker's interrupt
        // comes first and cuts the slice short.
        match wake_at {
            Some(at) if at < slice_end => {
                now = at.max(now);
                wake_at = None;
                woken_at = Some(now);
                let _ = s.wake(waker, now);
                // Runs on to its (possibly shortened) slice end.
                now = s.slice_end(hog).unwrap().max(now);
            }
            _ => now = slice_end,
        }
        let _ = s.put(hog, 0, now, PutReason::SliceExpired);
    }
    let run = |v| s.stats(v, now).unwrap().run_ticks;
    waits.sort_unstable();
    let worst = waits.last().copied().unwrap_or(0);
    let median = waits.get(waits.len() / 2).copied().unwrap_or(0);
    let preemptions = s.stats(hog, now).unwrap().wakeup_preemptions;
    ([run(hog), run(waker)], worst, median, preemptions)
}

#[test]
fn wakeups_are_served_fast_but_buy_no_more_than_a_fair_share() {
    // A waker that wants nearly the whole pCPU (300 of every 310 ticks)
    // against a hog: it gets about half, not more, however often it is
    // woken, and each wake-up waits at most the preempted vCPU's minimum
    // run or one slice, never a queue of slices.
    let until = 2_000 * SLICE;
    let ([hog, waker], worst, median, preemptions) = hog_and_self_waker(300, 10, until);
    let share = waker as f64 / (hog + waker) as f64;
    assert!((0.45..=0.55).contains(&share), "waker's share {share}");
    assert!(preemptions > 100, "{preemptions} wake-up preemptions");
    assert!(worst <= SLICE, "worst wait {worst}");
    assert!(median <= SLICE / MIN_RUN_DIVISOR, "median wait {median}");
    // A waker that wants little (10 of every 1010 ticks) gets all it wants,
    // at once.
    let ([hog, waker], _, median, _) = hog_and_self_waker(10, 1_000, until);
    let share = waker as f64 / (hog + waker) as f64;
    assert!(share > 0.009, "small waker's share {share}");
    assert!(median <= SLICE / MIN_RUN_DIVISOR, "median wait {median}");
}
