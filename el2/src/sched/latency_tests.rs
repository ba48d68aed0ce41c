//! Wake-up latency (module documentation, "Wake-up preemption"): two vCPUs
//! that bounce an interrupt between them, within their fair share, beside
//! CPU-bound siblings on fewer pCPUs, are each served within the minimum
//! run (plus the critical-section extension the runner grants a vCPU
//! with IRQs masked), never behind a queue of slices. The same set-up
//! as the `irq-check` ping boot test, in scheduler time.

use super::*;
use alloc::vec::Vec;

/// One tick is one microsecond: a 4 ms slice.
const SLICE: u64 = 4_000;
/// What the runner grants a vCPU whose slice ends with IRQs masked
/// (`el2::run`: 500 µs).
const EXTENSION: u64 = 500;
/// What each of the pair runs per wake-up before it sends its interrupt.
const WORK: u64 = 20;
/// How long vCPU 0 rests (WFI with a timer) after each round trip.
const GAP: u64 = 1_000;

/// What a pCPU does next in the simulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Its vCPU's slice ends.
    SliceEnd(u64),
    /// One of the pair finishes its work and sends its interrupt.
    Send(u64),
}

impl Next {
    fn at(self) -> u64 {
        match self {
            Next::SliceEnd(t) | Next::Send(t) => t,
        }
    }
}

/// `pcpus` pCPUs, one VM of `2 + spinners` vCPUs: vCPUs 0 and 1 bounce
/// an interrupt `round_trips` times (vCPU 0 resting `GAP` after each),
/// the rest compute without a break; with `extend`, every slice end of a
/// spinner asks for the extension (its guest runs with IRQs masked).
/// Returns each round trip's time and the scheduler.
fn ping_pong(
    pcpus: usize,
    spinners: u16,
    round_trips: usize,
    extend: bool,
) -> (Vec<u64>, Scheduler) {
    let mut s = Scheduler::new(CpuSet::first_n(pcpus), SLICE);
    let vm = s.add_vm(DEFAULT_WEIGHT).unwrap();
    for _ in 0..2 + spinners {
        s.add_vcpu(vm, None, InitialState::Runnable, 0).unwrap();
    }
    let (pinger, ponger) = (VcpuId { vm, index: 0 }, VcpuId { vm, index: 1 });
    let is_pair = |v: VcpuId| v == pinger || v == ponger;
    let mut now = 0;
    // Whether each of the pair has something to send when it next runs
    // (they start by blocking, as the guest's do after starting).
    let mut due = [false, false];
    let mut next: Vec<Option<Next>> = vec![None; pcpus];
    let mut rest_until: Option<u64>;
    let mut sent_at = 0;
    let mut trips = Vec::new();

    // pCPU `p` schedules someone in at `now`.
    let schedule = |s: &mut Scheduler, p: usize, now: u64, due: &[bool; 2]| -> Option<Next> {
        let v = s.pick_next(p, now)?;
        Some(if is_pair(v) && due[usize::from(v.index)] {
            Next::Send(now + WORK)
        } else if is_pair(v) {
            // Woken with nothing to do (cannot happen here): block again.
            Next::Send(now)
        } else {
            Next::SliceEnd(s.slice_end(v).unwrap())
        })
    };
    // A wake-up's effect on the pCPUs.
    let apply = |s: &mut Scheduler,
                 w: Wakeup,
                 now: u64,
                 next: &mut [Option<Next>],
                 due: &[bool; 2]| {
        match w {
            Wakeup::Queued { pcpu, ipi: true } => next[pcpu] = schedule(s, pcpu, now, due),
            Wakeup::Preempting { pcpu } => {
                if let Some(Next::SliceEnd(_)) = next[pcpu] {
                    let v = s.current(pcpu).unwrap();
                    next[pcpu] = Some(Next::SliceEnd(s.slice_end(v).unwrap()));
                }
            }
            _ => {}
        }
    };

    for (p, n) in next.iter_mut().enumerate() {
        *n = schedule(&mut s, p, 0, &due);
    }
    // The pair blocks first; vCPU 0 starts the first round trip at 1 ms.
    for v in [pinger, ponger] {
        for (p, n) in next.iter_mut().enumerate() {
            if s.current(p) == Some(v) {
                s.put(v, p, 0, PutReason::Wfi { deadline: None }).unwrap();
                *n = schedule(&mut s, p, 0, &due);
            }
        }
    }
    // A queued one blocks when it first runs (nothing is due); vCPU 0's
    // first ping is after one rest.
    rest_until = Some(GAP);

    while trips.len() < round_trips {
        let pcpu_event = (0..pcpus)
            .filter_map(|p| next[p].map(|n| (n.at(), p)))
            .min();
        let timer = rest_until;
        match (pcpu_event, timer) {
            (_, Some(t)) if pcpu_event.is_none_or(|(at, _)| t < at) => {
                // vCPU 0's rest is over: its timer wakes it to ping.
                now = t;
                rest_until = None;
                due[0] = true;
                if matches!(s.state(pinger), Some(VcpuState::Blocked(_))) {
                    let w = s.wake(pinger, now).unwrap();
                    apply(&mut s, w, now, &mut next, &due);
                }
            }
            (Some((at, p)), _) => {
                now = at;
                let v = s.current(p).expect("a pCPU with an event runs a vCPU");
                match next[p].unwrap() {
                    Next::Send(_) => {
                        let me = usize::from(v.index);
                        if due[me] {
                            due[me] = false;
                            if v == pinger && sent_at != 0 {
                                // The answer came: the round trip is over.
                                trips.push(now - WORK - sent_at);
                                sent_at = 0;
                                rest_until = Some(now + GAP);
                            } else {
                                if v == pinger {
                                    sent_at = now;
                                }
                                let other = if v == pinger { ponger } else { pinger };
                                due[usize::from(other.index)] = true;
                                let w = s.wake(other, now).unwrap();
                                apply(&mut s, w, now, &mut next, &due);
                            }
                        }
                        match s.put(v, p, now, PutReason::Wfi { deadline: None }) {
                            Ok(PutOutcome::KeepRunning) => {
                                next[p] = Some(Next::Send(now + WORK));
                            }
                            _ => next[p] = schedule(&mut s, p, now, &due),
                        }
                    }
                    Next::SliceEnd(end) => {
                        if extend && let Some(longer) = s.extend_slice(v, p, now, EXTENSION) {
                            next[p] = Some(Next::SliceEnd(longer));
                            continue;
                        }
                        debug_assert!(end <= now);
                        match s.put(v, p, now, PutReason::SliceExpired).unwrap() {
                            PutOutcome::KeepRunning => {
                                next[p] = Some(Next::SliceEnd(s.slice_end(v).unwrap()));
                            }
                            _ => next[p] = schedule(&mut s, p, now, &due),
                        }
                    }
                }
            }
            (None, _) => panic!("nothing left to happen at {now}"),
        }
        for (p, n) in next.iter_mut().enumerate() {
            if n.is_none() {
                *n = schedule(&mut s, p, now, &due);
            }
        }
    }
    (trips, s)
}

fn median_and_worst(mut trips: Vec<u64>) -> (u64, u64) {
    trips.sort_unstable();
    (trips[trips.len() / 2], *trips.last().unwrap())
}

#[test]
fn a_pair_within_its_share_is_served_within_the_minimum_run() {
    let min_run = SLICE / MIN_RUN_DIVISOR;
    for (pcpus, spinners) in [(1, 1), (2, 6), (2, 2), (4, 12)] {
        for extend in [false, true] {
            let (trips, _) = ping_pong(pcpus, spinners, 1_001, extend);
            // The first round trip starts with every vCPU Runnable in FIFO
            // order (vCPU 1 has not yet run to block): a start-up, not a
            // wake-up, as the boot test's warm-up is.
            let (median, worst) = median_and_worst(trips[1..].to_vec());
            let per_wake = min_run + if extend { EXTENSION } else { 0 };
            assert!(
                worst <= 2 * (per_wake + WORK),
                "{pcpus} pCPUs, {spinners} spinners, extend {extend}: worst {worst}"
            );
            assert!(
                median <= min_run,
                "{pcpus} pCPUs, {spinners} spinners, extend {extend}: median {median}"
            );
        }
    }
}
