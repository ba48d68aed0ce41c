//! The word a spinning vCPU waits on, and whether that wait has ended:
//! which of a spinner's preempted siblings can make progress the moment it
//! runs.
//!
//! When el2 finds a vCPU spinning (a trapped WFE, or two equal samples:
//! [`super::spinwatch`]), it yields the rest of the slice to a sibling
//! ([`super::onspin`]), and the siblings that are themselves waiting in a
//! spin loop are the ones KVM's rule skips every other time. A queued
//! spinlock defeats that rule: it hands the lock over in FIFO order, so
//! the vCPU the lock needs next is a waiter, taken off while it spun, and
//! every other waiter, running or not, spins until that one runs
//! (docs/benchmarks-linux.md, "Two regimes at 4x"). A hypervisor that
//! cannot tell the waiters apart chooses blind, and each wrong choice
//! costs a WFE trap on hardware and a sample period under QEMU.
//!
//! The waiters can be told apart by what they wait for. An arm64 wait
//! loop polls one word with a load-acquire or load-exclusive (Linux's
//! `smp_cond_load_acquire`, `__cmpwait`, a ticket lock's `ldaxrh`), and
//! the word the next owner polls is the one the hand-off wrote: its MCS
//! node's `locked` flag, or the lock word the queue's head waits on. So
//! when a spin is found, el2 records the word the spinner polls and its
//! value then ([`find`]); a preempted sibling whose recorded word now
//! holds another value has had its wait end while it was off the CPU
//! ([`Wait::Ended`]) and is tried first, whatever KVM's rule would skip;
//! a sibling whose word is unchanged ([`Wait::Waiting`]) would only spin
//! again and is not tried at all ([`super::onspin::Candidate::wait`]).
//!
//! # Finding the word ([`find`])
//!
//! From the spinner's registers as they are when the spin is found:
//! the instructions around its PC (at most [`LOOP_SPAN_WORDS`] either
//! side, within its page: the loop [`super::spinwatch`] found spans no
//! more) are read through the vCPU's own stage 1 ([`GuestView`]), and the
//! load-acquire or load-exclusive nearest the PC, looking back first (a
//! wait loop's load heads it), names the base register; that register's
//! value is the word's guest virtual address, translated the same way.
//! Loads whose base is SP, AArch32 code, a PC or word outside the VM's
//! RAM, or a translation that faults give no word, and the spinner is
//! then a candidate as before.
//!
//! # Looking like a wait ([`looks_like_wait`])
//!
//! The same window, read at a sample that found nothing yet, says
//! whether the PC lies inside a loop that waits: a direct branch at or
//! after the PC jumps back to it or before it ([`backward_branch_target`])
//! and a WFE, WFET or YIELD ([`waits`]) lies in that loop's body. The
//! sampler then takes its next sample sooner ([`super::spinwatch`], "The
//! period"); no decision rests on it.
//!
//! Everything read is the guest's own memory and registers, and only
//! reorders the guest's own vCPUs (as every boost: [`super::onspin`]); a
//! guest that makes its words change all the time gains what a guest that
//! declares a lock in its PV-lock record gains, its own vCPUs tried in
//! another order within its share.

use crate::trap::mmio::SPSR_AARCH32;
use crate::vcpu::GuestRegs;

use super::spinwatch::LOOP_SPAN_BYTES;

/// How many instructions either side of the PC [`find`] looks at for the
/// wait loop's load: the span [`super::spinwatch`] accepts as one loop.
pub const LOOP_SPAN_WORDS: u64 = LOOP_SPAN_BYTES / 4;

/// The translation granule [`find`] keeps its instruction window inside:
/// the smallest (4 KiB), so that one translation of the PC covers it
/// whatever granule the guest uses.
const PAGE_BYTES: u64 = 4096;

/// What [`find`] needs of the spinning vCPU's VM, while the vCPU is loaded.
pub trait GuestView {
    /// The IPA that guest virtual address `va` translates to for a read
    /// at EL1 through the loaded vCPU's stage 1 (AT S1E1R), `None` if the
    /// translation faults.
    fn ipa_of(&self, va: u64) -> Option<u64>;

    /// The `width` bytes (1, 2, 4 or 8, naturally aligned) of the VM's
    /// RAM at `ipa`, little-endian, read atomically; `None` if they are
    /// not all in its RAM.
    fn read(&self, ipa: u64, width: u8) -> Option<u64>;
}

/// The word a spinner polls, as it was when the spin was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitWord {
    /// Its IPA, naturally aligned to `width`.
    pub ipa: u64,
    /// Its width in bytes: 1, 2, 4 or 8.
    pub width: u8,
    /// Its value when the spin was found.
    pub value: u64,
}

impl WaitWord {
    /// What became of the wait, from the word read again (`now`: `None`
    /// if it could not be).
    pub fn state(&self, now: Option<u64>) -> Wait {
        match now {
            Some(value) if value != self.value => Wait::Ended,
            Some(_) => Wait::Waiting,
            None => Wait::Unknown,
        }
    }
}

/// What el2 knows of a preempted vCPU's wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Wait {
    /// It was not found spinning since it last ran, its loop showed no
    /// word, or the word could not be read again.
    #[default]
    Unknown,
    /// Its word still holds the value it spun on: run now, it would only
    /// spin again.
    Waiting,
    /// Its word holds another value: what it waited for has happened.
    Ended,
}

/// The polling load of a wait loop: its base register and access width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolledLoad {
    /// The base register, 0-30 (a load based on SP is not one).
    pub base: u8,
    /// The access width in bytes.
    pub width: u8,
}

/// LDXR, LDAXR (B, H, W, X): "Load/store exclusive" with o2 = 0, L = 1,
/// o1 = 0, Rs = Rt2 = 0b11111, any size and o0 (Arm ARM, "Load/store
/// exclusive register" encodings; LDXR, LDAXR).
const EXCLUSIVE_MASK: u32 = 0x3FFF_7C00;
const EXCLUSIVE_BITS: u32 = 0x085F_7C00;
/// LDAR (B, H, W, X): the ordered form with o2 = 1, L = 1, o1 = 0, o0 = 1
/// (Arm ARM, LDAR).
const ACQUIRE_MASK: u32 = 0x3FFF_FC00;
const ACQUIRE_BITS: u32 = 0x08DF_FC00;
/// LDAPR (B, H, W, X), FEAT_LRCPC: "Load/store register (atomic)" with
/// V = 0, A = 1, R = 0, Rs = 0b11111, o3 = 1, opc = 0b100 (Arm ARM,
/// LDAPR).
const RCPC_MASK: u32 = 0x3FFF_FC00;
const RCPC_BITS: u32 = 0x38BF_C000;

/// `insn`'s base register and width if it is a load a wait loop polls
/// with (LDXR, LDAXR, LDAR, LDAPR of any size) and its base is not SP.
pub fn polling_load(insn: u32) -> Option<PolledLoad> {
    let polls = insn & EXCLUSIVE_MASK == EXCLUSIVE_BITS
        || insn & ACQUIRE_MASK == ACQUIRE_BITS
        || insn & RCPC_MASK == RCPC_BITS;
    let base = ((insn >> 5) & 0x1F) as u8;
    (polls && base != 31).then_some(PolledLoad {
        base,
        width: 1 << (insn >> 30),
    })
}

/// The polling load nearest to `code[pc_index]`: the PC's own instruction
/// or the nearest before it, else the nearest after it.
pub fn nearest_polling_load(code: &[u32], pc_index: usize) -> Option<PolledLoad> {
    let before = code.get(..=pc_index)?.iter().rev();
    let after = code.get(pc_index + 1..).unwrap_or_default().iter();
    before.chain(after).find_map(|&insn| polling_load(insn))
}

/// WFE, "Wait For Event" (Arm ARM, WFE): a hint instruction, one encoding.
const WFE: u32 = 0xD503_205F;
/// YIELD (Arm ARM, YIELD): a hint instruction, one encoding; arm64 Linux's
/// `cpu_relax()`.
const YIELD: u32 = 0xD503_203F;
/// WFET, FEAT_WFxT (Arm ARM, WFET): "System instructions with register
/// argument", CRm = 0, op2 = 0, any Rd.
const WFET_MASK: u32 = 0xFFFF_FFE0;
const WFET_BITS: u32 = 0xD503_1000;

/// Whether `insn` is what a wait loop executes while it waits: WFE,
/// WFET or YIELD.
pub fn waits(insn: u32) -> bool {
    insn == WFE || insn == YIELD || insn & WFET_MASK == WFET_BITS
}

/// The instructions around a vCPU's PC: at most [`LOOP_SPAN_WORDS`]
/// either side, inside the PC's page (module documentation, "Finding the
/// word").
struct CodeWindow {
    code: [u32; 2 * LOOP_SPAN_WORDS as usize + 1],
    count: usize,
    pc_index: usize,
}

impl CodeWindow {
    /// Read through the loaded vCPU's stage 1; `None` for AArch32 or a
    /// misaligned PC, a PC that does not translate, or code outside RAM.
    fn read(regs: &GuestRegs, view: &impl GuestView) -> Option<Self> {
        // AArch32, whose code this does not decode.
        if regs.pstate & SPSR_AARCH32 != 0 || !regs.pc.is_multiple_of(4) {
            return None;
        }
        let pc = regs.pc;
        let page = pc & !(PAGE_BYTES - 1);
        let first = pc.saturating_sub(LOOP_SPAN_BYTES).max(page);
        let last = pc
            .saturating_add(LOOP_SPAN_BYTES)
            .min(page + (PAGE_BYTES - 4));
        let page_ipa = view.ipa_of(pc)? & !(PAGE_BYTES - 1);
        let mut window = Self {
            code: [0; 2 * LOOP_SPAN_WORDS as usize + 1],
            count: 0,
            pc_index: usize::try_from((pc - first) / 4).ok()?,
        };
        for (slot, va) in window.code.iter_mut().zip((first..=last).step_by(4)) {
            let ipa = page_ipa.checked_add(va - page)?;
            *slot = u32::try_from(view.read(ipa, 4)?).ok()?;
            window.count += 1;
        }
        Some(window)
    }

    fn code(&self) -> &[u32] {
        &self.code[..self.count]
    }
}

/// The word the loaded vCPU, found spinning with registers `regs`, polls
/// (module documentation, "Finding the word").
pub fn find(regs: &GuestRegs, view: &impl GuestView) -> Option<WaitWord> {
    let window = CodeWindow::read(regs, view)?;
    let load = nearest_polling_load(window.code(), window.pc_index)?;
    let va = regs.reg(load.base);
    if !va.is_multiple_of(u64::from(load.width)) {
        return None;
    }
    let ipa = view.ipa_of(va)?;
    let value = view.read(ipa, load.width)?;
    Some(WaitWord {
        ipa,
        width: load.width,
        value,
    })
}

/// B (imm26), B.cond and BC.cond (imm19), CBZ and CBNZ (imm19), TBZ and
/// TBNZ (imm14): Arm ARM, "Branches, Exception Generating and System
/// instructions"; each as (mask, bits, offset field's low bit, its width).
const BRANCHES: [(u32, u32, u32, u32); 4] = [
    (0xFC00_0000, 0x1400_0000, 0, 26),
    (0xFF00_0000, 0x5400_0000, 5, 19),
    (0x7E00_0000, 0x3400_0000, 5, 19),
    (0x7E00_0000, 0x3600_0000, 5, 14),
];

/// Where the direct branch `insn`, at `code[index]`, jumps back to: the
/// index of its target if it is at or before `index` (a loop's closing
/// branch; `b .` included), `None` for any other instruction, a forward
/// branch, or a target before `code`.
pub fn backward_branch_target(insn: u32, index: usize) -> Option<usize> {
    let &(_, _, low, width) = BRANCHES
        .iter()
        .find(|&&(mask, bits, _, _)| insn & mask == bits)?;
    let field = (insn >> low) & ((1 << width) - 1);
    // Sign-extend the word offset.
    let shift = 32 - width;
    let offset = ((field << shift) as i32) >> shift;
    if offset > 0 {
        return None;
    }
    index.checked_sub(offset.unsigned_abs() as usize)
}

/// Whether `code[pc_index]` lies inside a loop that waits: a branch at or
/// after it jumps back to it or before it, and a WFE, WFET or YIELD
/// ([`waits`]) lies between that target and that branch.
pub fn inside_waiting_loop(code: &[u32], pc_index: usize) -> bool {
    code.iter()
        .enumerate()
        .skip(pc_index)
        .filter_map(|(index, &insn)| Some((backward_branch_target(insn, index)?, index)))
        .filter(|&(target, _)| target <= pc_index)
        .any(|(target, branch)| code[target..=branch].iter().any(|&i| waits(i)))
}

/// Whether the loaded vCPU, with registers `regs`, looks like it is in a
/// wait loop: its PC inside a loop of the instructions [`find`] would
/// read that executes a WFE, WFET or YIELD ([`inside_waiting_loop`]). A
/// hint, not a finding (a loop that yields while it makes progress looks
/// the same): [`super::spinwatch`] takes its next sample sooner on it,
/// and two equal samples still decide.
pub fn looks_like_wait(regs: &GuestRegs, view: &impl GuestView) -> bool {
    CodeWindow::read(regs, view)
        .is_some_and(|window| inside_waiting_loop(window.code(), window.pc_index))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use core::cell::RefCell;

    // Encodings as GNU as (binutils, aarch64-linux-gnu) assembles them.
    const LDXR_W16_X0: u32 = 0x885f_7c10;
    const LDAXR_X3_X19: u32 = 0xc85f_fe63;
    const LDXRB_W2_X1: u32 = 0x085f_7c22;
    const LDAXRH_W2_X1: u32 = 0x485f_fc22;
    const LDAR_W1_X0: u32 = 0x88df_fc01;
    const LDARB_W1_X22: u32 = 0x08df_fec1;
    const LDAR_X5_SP: u32 = 0xc8df_ffe5;
    const LDAPR_W4_X7: u32 = 0xb8bf_c0e4;
    const LDR_W1_X0: u32 = 0xb940_0001;
    const STXR_W1_W2_X0: u32 = 0x8801_7c02;
    const STLR_W1_X0: u32 = 0x889f_fc01;
    const LDXP_X1_X2_X0: u32 = 0xc87f_0801;
    const SEVL: u32 = 0xd503_20bf;
    const WFE: u32 = 0xd503_205f;
    const NOP: u32 = 0xd503_201f;
    const YIELD: u32 = 0xd503_203f;
    const TST_W1_FF: u32 = 0x7200_1c3f;
    const CBNZ_W16_8: u32 = 0x3500_0050;
    /// `b.ne` back 12 instructions.
    const B_NE_BACK: u32 = 0x54ff_fe61;

    #[test]
    fn the_loads_a_wait_loop_polls_with_are_recognised() {
        let load = |base, width| Some(PolledLoad { base, width });
        assert_eq!(polling_load(LDXR_W16_X0), load(0, 4));
        assert_eq!(polling_load(LDAXR_X3_X19), load(19, 8));
        assert_eq!(polling_load(LDXRB_W2_X1), load(1, 1));
        assert_eq!(polling_load(LDAXRH_W2_X1), load(1, 2));
        assert_eq!(polling_load(LDAR_W1_X0), load(0, 4));
        assert_eq!(polling_load(LDARB_W1_X22), load(22, 1));
        assert_eq!(polling_load(LDAPR_W4_X7), load(7, 4));
    }

    #[test]
    fn stores_pairs_plain_loads_and_sp_based_loads_are_not() {
        for insn in [
            LDR_W1_X0,
            STXR_W1_W2_X0,
            STLR_W1_X0,
            LDXP_X1_X2_X0,
            LDAR_X5_SP,
            SEVL,
            WFE,
            0,
            u32::MAX,
        ] {
            assert_eq!(polling_load(insn), None, "{insn:#010x}");
        }
    }

    /// The shape of Linux's `smp_cond_load_acquire` on arm64 with
    /// `__cmpwait` inlined: `1: ldar w1, [x0]; tst w1, #0xff; b.ne 2f;
    /// sevl; wfe; ldxr w16, [x0]; eor w16, w16, w1; cbnz w16, 3f; wfe;
    /// 3: b 1b; 2: nop`.
    const COND_LOAD: [u32; 11] = [
        LDAR_W1_X0,
        TST_W1_FF,
        0x5400_0101,
        SEVL,
        WFE,
        LDXR_W16_X0,
        0x4a01_0210,
        CBNZ_W16_8,
        WFE,
        0x17ff_fff7,
        NOP,
    ];

    #[test]
    fn the_nearest_load_is_looked_for_back_from_the_pc_first() {
        // At the WFE: the LDAR heads the loop.
        assert_eq!(
            nearest_polling_load(&COND_LOAD, 4),
            Some(PolledLoad { base: 0, width: 4 })
        );
        // At the load itself.
        assert_eq!(nearest_polling_load(&COND_LOAD, 0).unwrap().base, 0);
        // Before any load: the next one.
        let code = [SEVL, WFE, LDAXR_X3_X19, CBNZ_W16_8];
        assert_eq!(
            nearest_polling_load(&code, 1),
            Some(PolledLoad { base: 19, width: 8 })
        );
        // Back first, even when a load after is nearer.
        let code = [LDXRB_W2_X1, TST_W1_FF, WFE, LDAXR_X3_X19];
        assert_eq!(nearest_polling_load(&code, 2).unwrap().base, 1);
        // No load, or a PC outside the code.
        assert_eq!(nearest_polling_load(&[SEVL, WFE, B_NE_BACK], 1), None);
        assert_eq!(nearest_polling_load(&COND_LOAD, 11), None);
        assert_eq!(nearest_polling_load(&[], 0), None);
    }

    /// A guest whose stage 1 maps virtual pages to IPAs by a table, and
    /// whose RAM is a map of bytes.
    #[derive(Default)]
    struct Guest {
        pages: BTreeMap<u64, u64>,
        ram: RefCell<BTreeMap<u64, u8>>,
        translations: RefCell<u32>,
    }

    impl Guest {
        fn map(&mut self, va_page: u64, ipa_page: u64) {
            self.pages.insert(va_page, ipa_page);
        }

        fn store(&self, ipa: u64, width: u8, value: u64) {
            let mut ram = self.ram.borrow_mut();
            for i in 0..u64::from(width) {
                ram.insert(ipa + i, (value >> (8 * i)) as u8);
            }
        }

        /// `insns` at `ipa`, the rest of their page NOPs.
        fn code(&self, ipa: u64, insns: &[u32]) {
            let page = ipa & !0xFFF;
            for nop in (page..page + 0x1000).step_by(4) {
                if !self.ram.borrow().contains_key(&nop) {
                    self.store(nop, 4, u64::from(NOP));
                }
            }
            for (i, &insn) in insns.iter().enumerate() {
                self.store(ipa + 4 * i as u64, 4, u64::from(insn));
            }
        }
    }

    impl GuestView for Guest {
        fn ipa_of(&self, va: u64) -> Option<u64> {
            *self.translations.borrow_mut() += 1;
            let page = self.pages.get(&(va & !0xFFF))?;
            Some(page | (va & 0xFFF))
        }

        fn read(&self, ipa: u64, width: u8) -> Option<u64> {
            assert!(ipa.is_multiple_of(u64::from(width)), "unaligned read");
            let ram = self.ram.borrow();
            (0..u64::from(width)).try_fold(0, |value, i| {
                Some(value | u64::from(*ram.get(&(ipa + i))?) << (8 * i))
            })
        }
    }

    const CODE_VA: u64 = 0xffff_8000_0801_0000;
    const CODE_IPA: u64 = 0x4020_0000;
    const DATA_VA: u64 = 0xffff_0000_c123_4000;
    const DATA_IPA: u64 = 0x4780_0000;

    fn spinner(pc: u64, x0: u64) -> GuestRegs {
        let mut x = [0; 31];
        x[0] = x0;
        GuestRegs {
            x,
            pc,
            pstate: 0x3c5, // EL1h, DAIF masked
            ..GuestRegs::default()
        }
    }

    fn guest() -> Guest {
        let mut guest = Guest::default();
        guest.map(CODE_VA, CODE_IPA);
        guest.map(DATA_VA, DATA_IPA);
        guest.code(CODE_IPA + 0x100, &COND_LOAD);
        guest.store(DATA_IPA + 0x40, 4, 0x101);
        guest
    }

    #[test]
    fn a_cond_load_loop_waits_on_the_word_its_load_names() {
        let guest = guest();
        let regs = spinner(CODE_VA + 0x100 + 4 * 4, DATA_VA + 0x40);
        let word = find(&regs, &guest).expect("the loop's word");
        assert_eq!(
            word,
            WaitWord {
                ipa: DATA_IPA + 0x40,
                width: 4,
                value: 0x101
            }
        );
        assert_eq!(word.state(guest.read(word.ipa, word.width)), Wait::Waiting);
        // The hand-off writes it: the wait has ended.
        guest.store(DATA_IPA + 0x40, 4, 0x1);
        assert_eq!(word.state(guest.read(word.ipa, word.width)), Wait::Ended);
        // A word that cannot be read again says nothing.
        assert_eq!(word.state(None), Wait::Unknown);
    }

    #[test]
    fn the_window_stays_inside_the_pcs_page() {
        let mut guest = guest();
        // The loop's load at the very start of a page, the PC just after
        // it; the page before is not mapped, and must not be read.
        guest.map(CODE_VA + 0x1000, CODE_IPA + 0x1000);
        guest.code(CODE_IPA + 0x1000, &[LDXR_W16_X0, WFE]);
        guest.pages.remove(&CODE_VA);
        let regs = spinner(CODE_VA + 0x1004, DATA_VA + 0x40);
        assert_eq!(find(&regs, &guest).map(|w| w.ipa), Some(DATA_IPA + 0x40));
        // At the end of a page, with the load before the PC.
        guest.code(CODE_IPA + 0x1ff8, &[LDXRB_W2_X1, WFE]);
        let mut regs = spinner(CODE_VA + 0x1ffc, 0);
        regs.x[1] = DATA_VA + 0x43;
        guest.store(DATA_IPA + 0x43, 1, 7);
        assert_eq!(
            find(&regs, &guest),
            Some(WaitWord {
                ipa: DATA_IPA + 0x43,
                width: 1,
                value: 7
            })
        );
    }

    #[test]
    fn no_word_without_a_load_a_mapping_or_ram() {
        let mut guest = guest();
        let at_wfe = CODE_VA + 0x100 + 4 * 4;
        // The data page is not mapped.
        assert_eq!(find(&spinner(at_wfe, 0x1234_0000), &guest), None);
        // The code page is not mapped.
        assert_eq!(find(&spinner(0xffff_8000_0900_0000, DATA_VA), &guest), None);
        // Mapped, but no RAM behind the word.
        assert_eq!(find(&spinner(at_wfe, DATA_VA + 0x80), &guest), None);
        // Misaligned for its width (the load would fault).
        assert_eq!(find(&spinner(at_wfe, DATA_VA + 0x42), &guest), None);
        // A misaligned or AArch32 PC.
        assert_eq!(find(&spinner(at_wfe + 2, DATA_VA + 0x40), &guest), None);
        let mut regs = spinner(at_wfe, DATA_VA + 0x40);
        regs.pstate = 0x13; // AArch32 SVC
        assert_eq!(find(&regs, &guest), None);
        // A loop without a polling load (plain loads and YIELD).
        let plain = CODE_IPA + 0x3000;
        guest.map(CODE_VA + 0x3000, plain);
        guest.code(plain + 0x800, &[LDR_W1_X0, YIELD, B_NE_BACK]);
        assert_eq!(
            find(&spinner(CODE_VA + 0x3804, DATA_VA + 0x40), &guest),
            None
        );
    }

    #[test]
    fn wait_instructions_are_wfe_wfet_and_yield() {
        // GNU as: `wfet x3`, `wfi`, `wfit x0`.
        const WFET_X3: u32 = 0xd503_1003;
        const WFI: u32 = 0xd503_207f;
        const WFIT_X0: u32 = 0xd503_1020;
        for insn in [WFE, YIELD, WFET_X3] {
            assert!(waits(insn), "{insn:#010x}");
        }
        // A WFI blocks (it traps), a SEV or NOP does not wait.
        for insn in [WFI, WFIT_X0, SEVL, NOP, LDAR_W1_X0, 0, u32::MAX] {
            assert!(!waits(insn), "{insn:#010x}");
        }
    }

    // GNU as: `1: ldxr w16, [x0]; wfe; cbnz w16, 1b`, `1: wfe; ldar w1,
    // [x0]; tbz w1, #0, 1b`, `1: ldr w1, [x0]; yield; b.ne 1b`, `1: add
    // x0, x0, #1; cmp x0, x1; b.ne 1b`, `cbnz w1, 1f; yield; 1: nop`,
    // `1: yield; b 1b`.
    const CBNZ_LOOP: [u32; 3] = [LDXR_W16_X0, WFE, 0x35ff_ffd0];
    const TBZ_LOOP: [u32; 3] = [WFE, LDAR_W1_X0, 0x3607_ffc1];
    const YIELD_LOOP: [u32; 3] = [LDR_W1_X0, YIELD, 0x54ff_ffc1];
    const BUSY_LOOP: [u32; 3] = [0x9100_0400, 0xeb01_001f, 0x54ff_ffc1];
    const YIELD_SKIPPED: [u32; 3] = [0x3500_0041, YIELD, NOP];
    const YIELD_FOREVER: [u32; 2] = [YIELD, 0x17ff_ffff];

    #[test]
    fn backward_branches_name_their_targets() {
        assert_eq!(backward_branch_target(CBNZ_LOOP[2], 2), Some(0));
        assert_eq!(backward_branch_target(TBZ_LOOP[2], 2), Some(0));
        assert_eq!(backward_branch_target(YIELD_LOOP[2], 2), Some(0));
        assert_eq!(backward_branch_target(YIELD_FOREVER[1], 1), Some(0));
        // `b .`
        assert_eq!(backward_branch_target(0x1400_0000, 7), Some(7));
        // COND_LOAD's `b 1b`, nine back.
        assert_eq!(backward_branch_target(COND_LOAD[9], 9), Some(0));
        // Forward: COND_LOAD's `b.ne 2f` and `cbnz w16, 3f`, a forward CBNZ.
        assert_eq!(backward_branch_target(COND_LOAD[2], 2), None);
        assert_eq!(backward_branch_target(CBNZ_W16_8, 7), None);
        assert_eq!(backward_branch_target(YIELD_SKIPPED[0], 0), None);
        // Beyond the start of the code.
        assert_eq!(backward_branch_target(CBNZ_LOOP[2], 1), None);
        // Not branches.
        for insn in [NOP, WFE, YIELD, LDAR_W1_X0, BUSY_LOOP[0], BUSY_LOOP[1]] {
            assert_eq!(backward_branch_target(insn, 5), None, "{insn:#010x}");
        }
    }

    #[test]
    fn a_pc_inside_a_loop_that_waits_is_in_a_wait() {
        for code in [&CBNZ_LOOP[..], &TBZ_LOOP, &YIELD_LOOP, &YIELD_FOREVER] {
            for pc_index in 0..code.len() {
                assert!(
                    inside_waiting_loop(code, pc_index),
                    "{code:x?} at {pc_index}"
                );
            }
        }
        // Linux's `smp_cond_load_acquire`: inside its loop, not after it.
        for pc_index in 0..=9 {
            assert!(inside_waiting_loop(&COND_LOAD, pc_index), "at {pc_index}");
        }
        assert!(!inside_waiting_loop(&COND_LOAD, 10));
        // A loop that does not wait, a YIELD outside any loop.
        for pc_index in 0..3 {
            assert!(!inside_waiting_loop(&BUSY_LOOP, pc_index));
            assert!(!inside_waiting_loop(&YIELD_SKIPPED, pc_index));
        }
        // A waiting loop before the PC, then straight code.
        let mut code = YIELD_LOOP.to_vec();
        code.extend([NOP, NOP]);
        assert!(!inside_waiting_loop(&code, 3));
        assert!(!inside_waiting_loop(&code, 5), "past the end");
    }

    #[test]
    fn a_wait_loop_in_guest_memory_looks_like_one() {
        let mut guest = guest();
        for index in 0..10 {
            let regs = spinner(CODE_VA + 0x100 + 4 * index, 0);
            assert!(looks_like_wait(&regs, &guest), "at instruction {index}");
        }
        // The NOP after the loop, and the NOPs around it.
        for pc in [0x100 + 4 * 10, 0x100 - 4, 0x800] {
            assert!(
                !looks_like_wait(&spinner(CODE_VA + pc, 0), &guest),
                "{pc:#x}"
            );
        }
        // A YIELD loop at the very start and at the very end of a page.
        let plain = CODE_IPA + 0x3000;
        guest.map(CODE_VA + 0x3000, plain);
        guest.code(plain, &YIELD_LOOP);
        guest.code(plain + 0xff4, &YIELD_LOOP);
        assert!(looks_like_wait(&spinner(CODE_VA + 0x3004, 0), &guest));
        assert!(looks_like_wait(&spinner(CODE_VA + 0x3ffc, 0), &guest));
        // One that straddles two pages, `1: yield` at the end of one and
        // `b.ne 1b` at the start of the next: the window stays inside the
        // PC's page, so from either side the loop is not seen.
        const B_NE_BACK_1: u32 = 0x54ff_ffe1;
        assert_eq!(backward_branch_target(B_NE_BACK_1, 1), Some(0));
        guest.map(CODE_VA + 0x7000, CODE_IPA + 0x7000);
        guest.map(CODE_VA + 0x8000, CODE_IPA + 0x8000);
        guest.code(CODE_IPA + 0x7ffc, &[YIELD]);
        guest.code(CODE_IPA + 0x8000, &[B_NE_BACK_1]);
        assert!(!looks_like_wait(&spinner(CODE_VA + 0x7ffc, 0), &guest));
        assert!(!looks_like_wait(&spinner(CODE_VA + 0x8000, 0), &guest));
        // A loop whose closing branch is more than 16 instructions after
        // the PC is not read.
        let long = CODE_IPA + 0x5000;
        guest.map(CODE_VA + 0x5000, long);
        let mut code = [NOP; 19];
        code[0] = YIELD;
        code[18] = 0x54ff_fdc1; // b.ne back 18, to the YIELD
        assert_eq!(backward_branch_target(code[18], 18), Some(0));
        guest.code(long + 0x100, &code);
        assert!(looks_like_wait(
            &spinner(CODE_VA + 0x5100 + 4 * 2, 0),
            &guest
        ));
        assert!(!looks_like_wait(&spinner(CODE_VA + 0x5100, 0), &guest));
    }

    #[test]
    fn code_without_a_wait_or_out_of_reach_does_not_look_like_one() {
        let mut guest = guest();
        // Unmapped code, a misaligned PC, AArch32.
        assert!(!looks_like_wait(&spinner(0xffff_8000_0900_0000, 0), &guest));
        assert!(!looks_like_wait(&spinner(CODE_VA + 0x102, 0), &guest));
        let mut regs = spinner(CODE_VA + 0x110, 0);
        regs.pstate = 0x13; // AArch32 SVC
        assert!(!looks_like_wait(&regs, &guest));
        // A busy loop.
        let busy = CODE_IPA + 0x6000;
        guest.map(CODE_VA + 0x6000, busy);
        guest.code(busy + 0x200, &BUSY_LOOP);
        assert!(!looks_like_wait(&spinner(CODE_VA + 0x6204, 0), &guest));
    }

    #[test]
    fn a_pc_at_the_top_of_the_address_space_does_not_wrap() {
        let mut guest = guest();
        guest.map(0xffff_ffff_ffff_f000, CODE_IPA + 0x2000);
        guest.code(CODE_IPA + 0x2ff8, &[LDXR_W16_X0, WFE]);
        let regs = spinner(0xffff_ffff_ffff_fffc, DATA_VA + 0x40);
        assert_eq!(find(&regs, &guest).map(|w| w.ipa), Some(DATA_IPA + 0x40));
        // Two translations: the code page and the word.
        assert_eq!(*guest.translations.borrow(), 2);
    }
}
