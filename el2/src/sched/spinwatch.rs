//! Spins the CPU does not trap: deciding from two register samples that a
//! running vCPU is waiting in a loop, so that it can be handed to the same
//! directed yield a trapped WFE gets ([`super::onspin`]).
//!
//! A trapped WFE is how el2 learns that a vCPU spins (docs/abi.md §6). Not
//! every wait executes WFE: arm64 Linux's `cpu_relax()` is YIELD, which
//! no hypervisor can trap (seqlock readers, optimistic spinning on a
//! mutex or rwsem owner), and QEMU TCG never traps WFE at all, so under
//! QEMU a stock kernel's queued-spinlock waiters spin until their slice
//! ends (docs/benchmarks-linux.md, "spinlock convoys"). x86 has
//! pause-loop exiting for this; Arm has nothing, so el2 looks.
//!
//! # The rule ([`SpinWatch::sample`])
//!
//! While a vCPU's WFE would trap ([`super::onspin::trap_wfe`]: by default
//! whenever its pCPU has another runnable vCPU, so never without
//! overcommit), the runner samples it: the slice timer is armed for the
//! sample, and the interrupt exit brings the guest's registers as they
//! were. The vCPU spins if two consecutive samples, one period apart, find
//! - all 31 general-purpose registers equal,
//! - the same exception level, stack pointer selection and DAIF masks,
//! - and PCs at most [`LOOP_SPAN_BYTES`] apart (the same short loop).
//!
//! A wait loop (`ldaxr; cmp; b.ne` with or without WFE) meets all three:
//! what it reads has not changed, so nothing it computes has. A vCPU that
//! makes progress changes a register, in a period of hundreds of
//! thousands of instructions: a loop counter, a pointer, a result. What
//! does not is no progress — a loop polling memory, a `b .`, an untrapped
//! WFI — and is worth less than a sibling that may hold what it waits
//! for. Interrupts the guest takes in between do not matter: its handler
//! returns to the same loop with the same registers.
//!
//! A false positive costs the vCPU what a trapped WFE would: the rest of
//! its slice goes to a sibling of its own VM, or, with none waiting, a
//! plain yield; its VM's share is unchanged (the scheduler's `share_tests`).
//!
//! # A vCPU that did not run
//!
//! Two equal samples can also mean that the vCPU executed nothing in
//! between. On hardware it runs whenever it is loaded; under QEMU's
//! round-robin icount a pCPU can be starved for a whole period: the
//! sample's timer write kicks the writing CPU out of its turn and the
//! other CPU runs up to the deadline just written (docs/benchmarks.md,
//! "Spins found by sampling"). The registers cannot tell (a wait loop
//! interrupted at one TB boundary, or parked in WFE, shows one PC
//! too), and QEMU offers no per-CPU instruction count. What the runner
//! can see is when it lost the turn: it reads the counter after each
//! write of its timer ([`SpinWatch::entered`]), and a vCPU that got
//! there with less than half the time between two samples still to run
//! had no chance to show progress ([`Sample::Starved`]: no conclusion,
//! and a period twice as long, so that this pCPU's deadline stops being
//! the earliest that loses it the turn). Without this witness, starved
//! vCPUs read as spinning handed their slices on and were sampled at the
//! shortest period, which starved them more: in the ping boot test a
//! VM `time-slice-us` of 4,001 µs put every round trip behind a slice
//! (median 4.08 ms, 5,603 sampled spins against 33 with it;
//! docs/testing.md, "Wake-up latency"). On hardware the time left is
//! the period, and the witness never speaks. Two more witnesses exist
//! where it matters most, for a vCPU just woken, and two equal samples
//! with either conclude nothing ([`Sample::Unmoved`]):
//! - an interrupt waits in its list registers that the virtual CPU
//!   interface signals to it at once (`el2::devices::vgic::signalled_at_once`:
//!   pending, above its priority mask, its group enabled and unmasked in
//!   PSTATE, nothing active): a running guest would have taken it, and
//!   its registers would show that;
//! - it was woken from a WFI that blocked it, and both samples find it
//!   exactly where that WFI returned to: a guest returns from WFI to act
//!   on the wake-up, not to spin in place (a wait loop goes back through
//!   its WFI, which traps). A guest that polls in a loop headed by the
//!   instruction right after a WFI is not found spinning in that load.
//!
//! # The period
//!
//! Between [`MIN_SAMPLE_PERIOD_US`] and [`MAX_SAMPLE_PERIOD_US`]: a found
//! spin sets the shortest, each sample that finds progress (or finds the
//! vCPU starved of guest time) doubles it. A
//! spinlock convoy (every waiter spinning behind a preempted one) is
//! then chased at the shortest period, one waiter after another, while a
//! pCPU whose vCPUs do not spin is sampled eight times less often.
//!
//! A sample that decides nothing (the first since the load, or one that
//! found progress) but finds the vCPU's PC inside a loop that waits (a
//! backward branch at or after the PC, within [`LOOP_SPAN_BYTES`], whose
//! body holds a WFE, WFET or YIELD: `super::waitword::looks_like_wait`,
//! asked by the runner of boost-on VMs only) takes the next sample at
//! the shortest period, leaving the period as it was. A spin that starts
//! while the period is the longest is then found one short period after
//! a sample first lands in it, instead of one long one: 0.2 ms instead of
//! 1.6 ms under `MAX_SAMPLE_PERIOD_US`. A loop that yields while it makes
//! progress costs one sample more. (Any WFE or YIELD near the PC was
//! tried first: Rust guests inline `spin_loop()`'s YIELD beside
//! unrelated code, CPU hogs were sampled at the shortest period
//! throughout, and under icount that starved vCPUs: docs/benchmarks.md.)
//!
//! The watch belongs to the pCPU, not the vCPU: its samples start afresh
//! at every load ([`SpinWatch::start`]), so they never compare two vCPUs
//! or two separate runs of one; its period carries over, since a convoy
//! involves the pCPU's next vCPU as much as the last. A CPU hog of another
//! VM on the pCPU lengthens it, so a convoying VM's waiter loaded after a
//! hog's slice can spin a long period and a short one (1.8 ms; two long
//! ones, 3.2 ms, in a VM with boosts off) before it is found.
//! Two other owners were measured and not kept (docs/benchmarks.md,
//! "Spins found by sampling"): one period per VM (the hog's progress no
//! longer counts, but two vCPUs passing interrupts back and forth kept
//! doubling their VM's period while six siblings spun, and the ping boot
//! test's worst round trip went from 0.06 to 6.2 ms) and one per vCPU
//! with a found spin setting the whole VM to the shortest (spinners with
//! masked interrupts, boosted candidates, then handed each other their
//! slices: 5,990 sampled spins against 222, worst round trip 28 ms).
//!
//! Comparing a vCPU's first sample after a load with the registers it
//! was put with would find a spin one period sooner, but under QEMU's
//! round-robin icount a just-loaded vCPU can execute nothing before its
//! pCPU's timer fires, and one unchanged sample would then call it a
//! spin; two need it starved for two periods in a row, which still
//! happens beside a CPU hog (docs/benchmarks.md, "Reading the figures").

use aarch64_cpu::registers::SPSR_EL2;
use tock_registers::LocalRegisterCopy;

use crate::vcpu::GuestRegs;

/// The shortest time between two samples of a running vCPU while its WFE
/// would trap: the period right after a spin was found on the pCPU,
/// while a convoy is likely to go on. Two samples decide, so a spin is
/// caught within one to two periods of its start.
pub const MIN_SAMPLE_PERIOD_US: u64 = 200;

/// The longest: each sample that finds progress doubles the period up to
/// this, so a pCPU whose vCPUs do not spin takes a sample exit every 1.6
/// ms, not every 200 µs. Under multi-threaded QEMU a timer exit costs
/// tens of microseconds (the timer's and the interrupt's trips through
/// QEMU's main loop), and sampling every 200 µs throughout cost the Linux
/// guests' benchmark about 10% at 2x (docs/benchmarks-linux.md).
pub const MAX_SAMPLE_PERIOD_US: u64 = 1_600;

/// Two samples' PCs at most this far apart can be one wait loop: 16
/// instructions, more than any of Linux's (`__cmpwait`, the queued
/// spinlock's `smp_cond_load_acquire`, a ticket lock's `ldaxrh; cmp;
/// b.eq; wfe; b`).
pub const LOOP_SPAN_BYTES: u64 = 64;

/// What one sample of a running vCPU concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sample {
    /// Not due yet: nothing was taken.
    NotDue,
    /// The first sample since the vCPU was loaded: nothing to compare.
    First,
    /// Something changed since the last sample.
    Progressed,
    /// Nothing changed in a whole period: the vCPU spins.
    Spinning,
    /// Nothing changed, but a witness says the vCPU did not run: an
    /// interrupt it would have taken at once still waits, or it sits
    /// where the WFI it was woken from returned (module documentation, "A
    /// vCPU that did not run"). No conclusion; the period stays.
    Unmoved,
    /// Nothing changed, but the vCPU had less than half the period in the
    /// guest: each time it was entered, the timer that ends its pass was
    /// due or nearly (module documentation, "A vCPU that did not run").
    /// No conclusion; the period doubles, as after progress.
    Starved,
}

/// The registers one sample keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Snapshot {
    x: [u64; 31],
    pc: u64,
    /// SPSR_EL2's M (exception level and stack pointer) and DAIF fields.
    mode: u64,
}

impl Snapshot {
    fn of(regs: &GuestRegs) -> Self {
        let spsr = LocalRegisterCopy::<u64, SPSR_EL2::Register>::new(regs.pstate);
        let mode = spsr.read(SPSR_EL2::M)
            | spsr.read(SPSR_EL2::D) << 9
            | spsr.read(SPSR_EL2::A) << 8
            | spsr.read(SPSR_EL2::I) << 7
            | spsr.read(SPSR_EL2::F) << 6;
        Self {
            x: regs.x,
            pc: regs.pc,
            mode,
        }
    }

    /// Whether `later`, one period on, is the same wait.
    fn same_wait(&self, later: &Self) -> bool {
        self.pc.abs_diff(later.pc) <= LOOP_SPAN_BYTES
            && self.mode == later.mode
            && self.x == later.x
    }
}

/// One pCPU's sampler for the vCPU it runs (module documentation).
#[derive(Clone, Debug)]
pub struct SpinWatch {
    /// The counter value at which the next sample is due.
    due: u64,
    /// The last sample since the vCPU was loaded.
    last: Option<Snapshot>,
    /// Where the loaded vCPU's WFI returned to, if it was woken from one
    /// for this load.
    woken_at: Option<u64>,
    /// The time from the last sample (or the load) to the next one.
    interval: u64,
    /// How long the vCPU had in the guest since then: the sum, over its
    /// entries, of the time left to the deadline its pass was armed for
    /// ([`Self::entered`]).
    window: u64,
    /// The time to the next sample, between the two bounds (ticks).
    period: u64,
    min_period: u64,
    max_period: u64,
}

impl SpinWatch {
    /// A watch whose period stays between `min_period` and `max_period`
    /// counter ticks (at least one tick each); it starts at the longest.
    pub fn new(min_period: u64, max_period: u64) -> Self {
        let min_period = min_period.max(1);
        let max_period = max_period.max(min_period);
        Self {
            due: u64::MAX,
            last: None,
            woken_at: None,
            interval: max_period,
            window: 0,
            period: max_period,
            min_period,
            max_period,
        }
    }

    /// A vCPU was just loaded at `now`: forget the last one's sample; the
    /// first is due a period on. `woken_at`: where the WFI it was woken
    /// from returned to, if it was.
    #[inline]
    pub fn start(&mut self, now: u64, woken_at: Option<u64>) {
        self.due = now.saturating_add(self.period);
        self.interval = self.period;
        self.window = 0;
        self.last = None;
        self.woken_at = woken_at;
    }

    /// The loaded vCPU enters the guest at `now` (read after the timer
    /// was armed) with the timer armed for `deadline`: it has until then
    /// to run, or nothing if `deadline` has passed.
    #[inline]
    pub fn entered(&mut self, now: u64, deadline: u64) {
        self.window = self.window.saturating_add(deadline.saturating_sub(now));
    }

    /// The counter value at which the next sample is due (for the slice
    /// timer).
    #[inline]
    pub fn due(&self) -> u64 {
        self.due
    }

    /// The time from one sample to the next now (ticks).
    #[cfg(test)]
    fn period(&self) -> u64 {
        self.period
    }

    /// Samples the loaded vCPU's registers `regs` at `now`, if a sample
    /// is due, and says whether it spins; sets the period (module
    /// documentation) and the next sample's time. `interrupt_waits` says
    /// whether an interrupt the vCPU would take at once waits for it; it
    /// is asked only when the registers did not change. `looks_like_wait`
    /// says whether the vCPU's PC is in what looks like a wait loop
    /// (`super::waitword::looks_like_wait`); it is asked when a sample
    /// does not decide (the first, or one that found progress), and yes
    /// brings the next sample forward to the shortest period (module
    /// documentation, "The period").
    pub fn sample(
        &mut self,
        regs: &GuestRegs,
        now: u64,
        interrupt_waits: impl FnOnce() -> bool,
        looks_like_wait: impl FnOnce() -> bool,
    ) -> Sample {
        if now < self.due {
            return Sample::NotDue;
        }
        let snapshot = Snapshot::of(regs);
        let had_time = core::mem::take(&mut self.window) >= self.interval / 2;
        let sample = match self.last.replace(snapshot) {
            None => Sample::First,
            Some(last) if last.same_wait(&snapshot) => {
                let at_wake = self.woken_at == Some(snapshot.pc) && last.pc == snapshot.pc;
                if !had_time {
                    Sample::Starved
                } else if at_wake || interrupt_waits() {
                    Sample::Unmoved
                } else {
                    Sample::Spinning
                }
            }
            Some(_) => Sample::Progressed,
        };
        self.period = match sample {
            Sample::Spinning => self.min_period,
            Sample::Progressed | Sample::Starved => {
                self.period.saturating_mul(2).min(self.max_period)
            }
            Sample::First | Sample::Unmoved | Sample::NotDue => self.period,
        };
        // A sample in a wait loop is confirmed or refuted soon; the
        // period it leaves is the one the next samples keep.
        let confirm = matches!(sample, Sample::First | Sample::Progressed)
            && self.period > self.min_period
            && looks_like_wait();
        let next = if confirm {
            self.min_period
        } else {
            self.period
        };
        self.due = now.saturating_add(next);
        self.interval = next;
        sample
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: u64 = 100;
    /// EL1h with DAIF clear.
    const EL1H: u64 = 0b0101;
    /// EL1h with IRQs masked (PSTATE.I).
    const EL1H_IRQS_MASKED: u64 = EL1H | 1 << 7;
    /// EL0t.
    const EL0T: u64 = 0;

    /// `watch` after its vCPU had all the time in the guest since the
    /// last sample.
    fn ran(watch: &mut SpinWatch) -> &mut SpinWatch {
        watch.entered(0, u64::MAX);
        watch
    }

    /// `watch`'s sample of `regs` when due, its vCPU having had all the
    /// time in the guest since the last.
    fn sample_due(
        watch: &mut SpinWatch,
        regs: &GuestRegs,
        interrupt_waits: impl FnOnce() -> bool,
        looks_like_wait: impl FnOnce() -> bool,
    ) -> Sample {
        let due = watch.due();
        ran(watch).sample(regs, due, interrupt_waits, looks_like_wait)
    }

    fn regs(pc: u64, pstate: u64, x3: u64) -> GuestRegs {
        let mut regs = GuestRegs {
            pc,
            pstate,
            ..Default::default()
        };
        regs.x[0] = 0xffff_0000_1234_5678;
        regs.x[3] = x3;
        regs
    }

    /// Samples `seq`, each when due, from a load at 0 with a fixed
    /// period; the conclusions.
    fn run(seq: &[GuestRegs]) -> alloc::vec::Vec<Sample> {
        let mut watch = SpinWatch::new(PERIOD, PERIOD);
        watch.start(0, None);
        seq.iter()
            .map(|r| sample_due(&mut watch, r, || false, || false))
            .collect()
    }

    #[test]
    fn a_loop_whose_registers_do_not_change_spins() {
        let wait = [
            regs(0x1000, EL1H, 7),
            regs(0x1008, EL1H, 7),
            regs(0x1004, EL1H, 7),
        ];
        assert_eq!(
            run(&wait),
            [Sample::First, Sample::Spinning, Sample::Spinning]
        );
        // The same in user mode and with IRQs masked.
        let user = [regs(0x40_0000, EL0T, 1), regs(0x40_0000, EL0T, 1)];
        assert_eq!(run(&user), [Sample::First, Sample::Spinning]);
        let masked = [
            regs(0x1000, EL1H_IRQS_MASKED, 1),
            regs(0x1000 + LOOP_SPAN_BYTES, EL1H_IRQS_MASKED, 1),
        ];
        assert_eq!(run(&masked), [Sample::First, Sample::Spinning]);
    }

    #[test]
    fn any_change_is_progress() {
        // A register: a counter, a pointer, a result.
        assert_eq!(
            run(&[regs(0x1000, EL1H, 1), regs(0x1000, EL1H, 2)]),
            [Sample::First, Sample::Progressed]
        );
        // The PC beyond one loop.
        assert_eq!(
            run(&[
                regs(0x1000, EL1H, 1),
                regs(0x1000 + LOOP_SPAN_BYTES + 4, EL1H, 1)
            ]),
            [Sample::First, Sample::Progressed]
        );
        // The mode or the masks.
        assert_eq!(
            run(&[regs(0x1000, EL1H, 1), regs(0x1000, EL0T, 1)]),
            [Sample::First, Sample::Progressed]
        );
        assert_eq!(
            run(&[regs(0x1000, EL1H, 1), regs(0x1000, EL1H_IRQS_MASKED, 1)]),
            [Sample::First, Sample::Progressed]
        );
        // Progress, then a wait: compared with the last sample only.
        assert_eq!(
            run(&[
                regs(0x1000, EL1H, 1),
                regs(0x2000, EL1H, 2),
                regs(0x2000, EL1H, 2)
            ]),
            [Sample::First, Sample::Progressed, Sample::Spinning]
        );
    }

    #[test]
    fn condition_flags_do_not_count() {
        // NZCV differ between two points of one loop (before and after its
        // compare): still the same wait.
        let n_set = EL1H | 1 << 31;
        assert_eq!(
            run(&[regs(0x1000, EL1H, 1), regs(0x1004, n_set, 1)]),
            [Sample::First, Sample::Spinning]
        );
    }

    #[test]
    fn samples_are_taken_once_due_and_restart_at_each_load() {
        let mut watch = SpinWatch::new(PERIOD, PERIOD);
        let wait = regs(0x1000, EL1H, 1);
        // Nothing is due before the first load.
        assert_eq!(
            ran(&mut watch).sample(&wait, u64::MAX - 1, || false, || false),
            Sample::NotDue
        );
        watch.start(1_000, None);
        assert_eq!(watch.due(), 1_000 + PERIOD);
        // An exit before the sample is due takes none.
        assert_eq!(
            ran(&mut watch).sample(&wait, 1_050, || false, || false),
            Sample::NotDue
        );
        assert_eq!(
            ran(&mut watch).sample(&wait, 1_100, || false, || false),
            Sample::First
        );
        assert_eq!(watch.due(), 1_200);
        assert_eq!(
            ran(&mut watch).sample(&wait, 1_150, || false, || false),
            Sample::NotDue
        );
        // Late is fine: the next is due a period after this one.
        assert_eq!(
            ran(&mut watch).sample(&wait, 1_250, || false, || false),
            Sample::Spinning
        );
        assert_eq!(watch.due(), 1_350);
        // Another vCPU (or the same again) is loaded: no comparison with
        // what ran before.
        watch.start(2_000, None);
        assert_eq!(
            ran(&mut watch).sample(&wait, 2_100, || false, || false),
            Sample::First
        );
        // A counter near its end saturates rather than wrapping to "due".
        watch.start(u64::MAX - 10, None);
        assert_eq!(watch.due(), u64::MAX);
        assert_eq!(
            ran(&mut watch).sample(&wait, u64::MAX - 5, || false, || false),
            Sample::NotDue
        );
    }

    #[test]
    fn progress_doubles_the_period_up_to_the_longest_and_a_spin_resets_it() {
        let mut watch = SpinWatch::new(100, 800);
        assert_eq!(watch.period(), 800, "a pCPU starts at the longest");
        let mut work = 0;
        let mut step = |watch: &mut SpinWatch, spinning: bool| {
            if !spinning {
                work += 1;
            }
            sample_due(watch, &regs(0x1000, EL1H, work), || false, || false)
        };
        watch.start(0, None);
        assert_eq!(step(&mut watch, true), Sample::First);
        assert_eq!(watch.period(), 800);
        assert_eq!(step(&mut watch, true), Sample::Spinning);
        assert_eq!(watch.period(), 100);
        // A convoy: the next vCPU loaded spins too, and is sampled at the
        // shortest period.
        let loaded_at = watch.due() + 5;
        watch.start(loaded_at, None);
        assert_eq!(watch.due(), loaded_at + 100);
        // Progress: 200, 400, 800, and there it stays.
        let periods: alloc::vec::Vec<u64> = (0..5)
            .map(|_| {
                step(&mut watch, false);
                watch.period()
            })
            .collect();
        assert_eq!(periods, [100, 200, 400, 800, 800]);
        // Bounds below one tick, or crossed, are made sane.
        let odd = SpinWatch::new(0, 0);
        assert_eq!(odd.period(), 1);
        let crossed = SpinWatch::new(500, 100);
        assert_eq!(crossed.period(), 500);
    }

    #[test]
    fn a_sample_in_a_wait_loop_is_confirmed_at_the_shortest_period() {
        let mut watch = SpinWatch::new(100, 800);
        watch.start(0, None);
        let asked = core::cell::Cell::new(0);
        let asked = &asked;
        let in_loop = |answer: bool| {
            move || {
                asked.set(asked.get() + 1);
                answer
            }
        };
        // The first sample lands in a wait loop: the next comes at the
        // shortest period, and two equal samples still decide.
        let wait = regs(0x1000, EL1H, 7);
        assert_eq!(
            ran(&mut watch).sample(&wait, 800, || false, in_loop(true)),
            Sample::First
        );
        assert_eq!(watch.due(), 900);
        assert_eq!(watch.period(), 800, "the period itself stays");
        assert_eq!(
            ran(&mut watch).sample(&wait, 900, || false, in_loop(true)),
            Sample::Spinning
        );
        assert_eq!(asked.get(), 1, "a spin is not asked about");
        // Progress out of the loop: the period doubles from where it was.
        watch.start(1_000, None);
        assert_eq!(
            ran(&mut watch).sample(&wait, 1_100, || false, in_loop(true)),
            Sample::First
        );
        assert_eq!(watch.due(), 1_200, "at the shortest already");
        assert_eq!(asked.get(), 1, "not asked at the shortest period");
        let moved = regs(0x1000, EL1H, 8);
        assert_eq!(
            ran(&mut watch).sample(&moved, 1_200, || false, in_loop(false)),
            Sample::Progressed
        );
        assert_eq!((watch.period(), watch.due()), (200, 1_400));
        // In a loop again, but it moved on since: confirmed soon, the
        // doubled period kept for the samples after.
        let later = regs(0x1000, EL1H, 9);
        assert_eq!(
            ran(&mut watch).sample(&later, 1_400, || false, in_loop(true)),
            Sample::Progressed
        );
        assert_eq!((watch.period(), watch.due()), (400, 1_500));
        // Equal with an interrupt waiting: no conclusion, no hint asked.
        assert_eq!(
            ran(&mut watch).sample(&later, 1_500, || true, in_loop(true)),
            Sample::Unmoved
        );
        assert_eq!((watch.period(), watch.due()), (400, 1_900));
        assert_eq!(asked.get(), 3);
    }

    #[test]
    fn a_vcpu_with_an_interrupt_it_would_have_taken_did_not_run() {
        let mut watch = SpinWatch::new(100, 800);
        watch.start(0, None);
        let still = regs(0x1000, EL1H, 7);
        assert_eq!(
            sample_due(&mut watch, &still, || true, || false),
            Sample::First
        );
        // Equal registers with an interrupt waiting: no conclusion, the
        // period stays.
        assert_eq!(
            sample_due(&mut watch, &still, || true, || false),
            Sample::Unmoved
        );
        assert_eq!(watch.period(), 800);
        // Without one: the spin.
        assert_eq!(
            sample_due(&mut watch, &still, || false, || false),
            Sample::Spinning
        );
        assert_eq!(watch.period(), 100);
        // The witness is asked only when nothing changed.
        let asked = core::cell::Cell::new(0);
        let ask = || {
            asked.set(asked.get() + 1);
            true
        };
        assert_eq!(
            sample_due(&mut watch, &regs(0x1000, EL1H, 8), ask, || false),
            Sample::Progressed
        );
        assert_eq!(asked.get(), 0);
    }

    #[test]
    fn a_vcpu_found_where_its_wfi_returned_did_not_run() {
        let mut watch = SpinWatch::new(100, 800);
        let at_wake = regs(0x2004, EL1H, 7);
        watch.start(0, Some(0x2004));
        assert_eq!(
            sample_due(&mut watch, &at_wake, || false, || false),
            Sample::First
        );
        assert_eq!(
            sample_due(&mut watch, &at_wake, || false, || false),
            Sample::Unmoved
        );
        assert_eq!(watch.period(), 800);
        // Once it moved on, a wait elsewhere is a spin, and so is one
        // that passes through that PC.
        let wait = regs(0x3000, EL1H, 9);
        assert_eq!(
            sample_due(&mut watch, &wait, || false, || false),
            Sample::Progressed
        );
        assert_eq!(
            sample_due(&mut watch, &wait, || false, || false),
            Sample::Spinning
        );
        let around = regs(0x2008, EL1H, 7);
        assert_eq!(
            sample_due(&mut watch, &around, || false, || false),
            Sample::Progressed
        );
        assert_eq!(
            sample_due(&mut watch, &at_wake, || false, || false),
            Sample::Spinning
        );
        // Not woken from a WFI for this load: equal samples are a spin.
        watch.start(10_000, None);
        assert_eq!(
            sample_due(&mut watch, &at_wake, || false, || false),
            Sample::First
        );
        assert_eq!(
            sample_due(&mut watch, &at_wake, || false, || false),
            Sample::Spinning
        );
    }

    #[test]
    fn a_vcpu_that_had_no_time_in_the_guest_did_not_run() {
        let mut watch = SpinWatch::new(100, 800);
        watch.start(0, None);
        watch.period = 100;
        let still = regs(0x1000, EL1H, 7);
        assert_eq!(
            sample_due(&mut watch, &still, || false, || false),
            Sample::First
        );
        // Entered with the timer due (the deadline passed while the timer
        // was written): no time, no conclusion, and a longer period.
        let due = watch.due();
        watch.entered(due, due);
        assert_eq!(
            watch.sample(&still, due, || false, || false),
            Sample::Starved
        );
        assert_eq!(watch.period(), 200);
        // Less than half the time between the samples is not enough, in
        // how many entries ever.
        let (from, due) = (due, watch.due());
        watch.entered(from + 60, from + 100);
        watch.entered(due - 50, due - 1);
        assert_eq!(
            watch.sample(&still, due, || false, || false),
            Sample::Starved
        );
        assert_eq!(watch.period(), 400);
        // Half is: the spin.
        let (from, due) = (due, watch.due());
        watch.entered(from + 100, from + 200);
        watch.entered(due - 100, due);
        assert_eq!(
            watch.sample(&still, due, || false, || false),
            Sample::Spinning
        );
        assert_eq!(watch.period(), 100);
        // A change is progress, time or not.
        let due = watch.due();
        assert_eq!(
            watch.sample(&regs(0x1000, EL1H, 8), due, || false, || false),
            Sample::Progressed
        );
        // A new load starts with no time.
        watch.start(10_000, None);
        let due = watch.due();
        assert_eq!(watch.sample(&still, due, || false, || false), Sample::First);
        assert_eq!(
            watch.sample(&still, watch.due(), || false, || false),
            Sample::Starved
        );
    }
}
