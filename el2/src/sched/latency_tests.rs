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
/// What it runs after sending, before its WFI traps: the sender is still
/// running when the vCPU it woke is placed, and may be preempted by it
/// before it gets to block.
const TAIL: u64 = 2;
/// How long vCPU 0 rests (WFI with a timer) after each round trip.
const GAP: u64 = 1_000;

/// What a pCPU does next in the simulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Its vCPU's slice ends.
    SliceEnd(u64),
    /// One of the pair finishes its work and sends its interrupt.
    Send(u64),
    /// One of the pair executes WFI.
    Block(u64),
}

impl Next {
    fn at(self) -> u64 {
        match self {
            Next::SliceEnd(t) | Next::Send(t) | Next::Block(t) => t,
        }
    }
}

/// What one of the pair does when it next runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Todo {
    /// Nothing: it blocks at once.
    Block,
    /// Its interrupt came: it works, then sends (or, vCPU 0 with the
    /// answer, ends the round trip), then blocks.
    Send,
    /// It sent and was preempted before its WFI: it blocks when it runs.
    FinishBlocking,
}

struct PingPong {
    s: Scheduler,
    now: u64,
    next: Vec<Option<Next>>,
    todo: [Todo; 2],
    pair: [VcpuId; 2],
    extend: bool,
}

impl PingPong {
    fn pair_index(&self, v: VcpuId) -> Option<usize> {
        self.pair.iter().position(|&p| p == v)
    }

    /// What `v`, now running on a pCPU, does first.
    fn first_event(&self, v: VcpuId) -> Next {
        match self.pair_index(v).map(|i| self.todo[i]) {
            Some(Todo::Send) => Next::Send(self.now + WORK),
            Some(Todo::FinishBlocking) => Next::Block(self.now + TAIL),
            Some(Todo::Block) => Next::Block(self.now),
            None => Next::SliceEnd(self.s.slice_end(v).unwrap()),
        }
    }

    /// pCPU `p` schedules someone in.
    fn schedule(&mut self, p: usize) {
        self.next[p] = self.s.pick_next(p, self.now).map(|v| self.first_event(v));
    }

    /// `p`'s next event, at most its running vCPU's slice end.
    fn bounded(&self, p: usize, event: Next) -> Next {
        let v = self.s.current(p).unwrap();
        let end = self.s.slice_end(v).unwrap();
        if event.at() > end {
            Next::SliceEnd(end)
        } else {
            event
        }
    }

    /// Applies a wake-up of one of the pair.
    fn wake(&mut self, which: usize) {
        self.todo[which] = Todo::Send;
        let w = self.s.wake(self.pair[which], self.now).unwrap();
        match w {
            Wakeup::Queued { pcpu, ipi: true } => self.schedule(pcpu),
            Wakeup::Preempting { pcpu } => {
                if let Some(event) = self.next[pcpu] {
                    self.next[pcpu] = Some(self.bounded(pcpu, event));
                }
            }
            _ => {}
        }
    }

    /// `v` on `p` executes WFI.
    fn block(&mut self, p: usize, v: VcpuId) {
        let which = self.pair_index(v).unwrap();
        match self
            .s
            .put(v, p, self.now, PutReason::Wfi { deadline: None })
        {
            Ok(PutOutcome::KeepRunning) => {
                // A wake-up came first: it works on it.
                self.todo[which] = Todo::Send;
                self.next[p] = Some(self.bounded(p, Next::Send(self.now + WORK)));
            }
            _ => {
                self.todo[which] = Todo::Block;
                self.schedule(p);
            }
        }
    }

    fn slice_end(&mut self, p: usize, v: VcpuId) {
        let spinner = self.pair_index(v).is_none();
        if self.extend
            && spinner
            && let Some(longer) = self.s.extend_slice(v, p, self.now, EXTENSION)
        {
            self.next[p] = Some(Next::SliceEnd(longer));
            return;
        }
        match self.s.put(v, p, self.now, PutReason::SliceExpired).unwrap() {
            PutOutcome::KeepRunning => {
                let event = match self.pair_index(v).map(|i| self.todo[i]) {
                    Some(Todo::FinishBlocking) => Next::Block(self.now + TAIL),
                    _ => Next::SliceEnd(self.s.slice_end(v).unwrap()),
                };
                self.next[p] = Some(self.bounded(p, event));
            }
            _ => self.schedule(p),
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
    let mut sim = PingPong {
        s,
        now: 0,
        next: vec![None; pcpus],
        // They start by blocking, as the guest's do after starting.
        todo: [Todo::Block; 2],
        pair: [VcpuId { vm, index: 0 }, VcpuId { vm, index: 1 }],
        extend,
    };
    for p in 0..pcpus {
        sim.schedule(p);
    }
    // vCPU 0's first ping is after one rest.
    let mut rest_until = Some(GAP);
    let mut sent_at = None;
    let mut trips = Vec::new();
    while trips.len() < round_trips {
        let pcpu_event = (0..pcpus)
            .filter_map(|p| sim.next[p].map(|n| (n.at(), p)))
            .min();
        match (pcpu_event, rest_until) {
            (_, Some(t)) if pcpu_event.is_none_or(|(at, _)| t < at) => {
                // vCPU 0's rest is over: its timer wakes it to ping.
                sim.now = t;
                rest_until = None;
                sim.wake(0);
            }
            (Some((at, p)), _) => {
                sim.now = at;
                let v = sim.s.current(p).expect("a pCPU with an event runs a vCPU");
                match sim.next[p].unwrap() {
                    Next::Send(_) => {
                        let me = sim.pair_index(v).unwrap();
                        if me == 0
                            && let Some(at) = sent_at.take()
                        {
                            // The answer came: the round trip is over.
                            trips.push(sim.now - WORK - at);
                            rest_until = Some(sim.now + GAP);
                        } else {
                            if me == 0 {
                                sent_at = Some(sim.now);
                            }
                            sim.wake(1 - me);
                        }
                        sim.todo[me] = Todo::FinishBlocking;
                        sim.next[p] = Some(sim.bounded(p, Next::Block(sim.now + TAIL)));
                    }
                    Next::Block(_) => sim.block(p, v),
                    Next::SliceEnd(_) => sim.slice_end(p, v),
                }
            }
            (None, _) => panic!("nothing left to happen at {}", sim.now),
        }
        for p in 0..pcpus {
            if sim.next[p].is_none() {
                sim.schedule(p);
            }
        }
    }
    (trips, sim.s)
}

fn median_and_worst(mut trips: Vec<u64>) -> (u64, u64) {
    trips.sort_unstable();
    (trips[trips.len() / 2], *trips.last().unwrap())
}

#[test]
fn a_pair_within_its_share_is_served_within_the_minimum_run() {
    // The pair and the spinners are one VM, and the spinners, which never
    // block, are CPU-bound: the short minimum run applies.
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
                worst <= 2 * (per_wake + WORK + TAIL),
                "{pcpus} pCPUs, {spinners} spinners, extend {extend}: worst {worst}"
            );
            // Which keeps a round trip within one slice.
            assert!(
                worst <= SLICE,
                "{pcpus} pCPUs, {spinners} spinners, extend {extend}: worst {worst}"
            );
            assert!(
                median <= min_run,
                "{pcpus} pCPUs, {spinners} spinners, extend {extend}: median {median}"
            );
        }
    }
}
