//! A guest's self-hosted debug (Arm ARM D2 "AArch64 Self-hosted Debug"):
//! its hardware breakpoints and watchpoints, software step, MDSCR_EL1 and
//! the OS lock, per vCPU, switched lazily.
//!
//! # What a vCPU gets
//!
//! The breakpoints and watchpoints the CPU has (ID_AA64DFR0_EL1.BRPs and
//! WRPs, which the VM reads unchanged, [`DebugFeatures`]), MDSCR_EL1, and
//! its own OS lock, OS double lock and DBGPRCR_EL1.CORENPDRQ. Breakpoint,
//! watchpoint and software-step exceptions are taken by the guest at EL1:
//! MDCR_EL2.TDE and HCR_EL2.TGE stay clear, so the debug target
//! Exception level is EL1 (Arm ARM D2 "Routing debug exceptions").
//!
//! # Lazy switch (KVM's "debug dirty")
//!
//! A vCPU's debug registers are in one of two places:
//!
//! - **in memory** ([`DebugState::in_cpu`] false): every access to them
//!   traps (MDCR_EL2.TDA) and is emulated here against
//!   [`DebugState::registers`]; the CPU runs the vCPU with MDSCR_EL1 = 0,
//!   so no breakpoint, watchpoint or step can fire whatever the
//!   comparators hold (MDE, KDE and SS are all clear). A vCPU that never
//!   touches its debug registers stays here and costs nothing at load or
//!   put;
//! - **in the CPU**: its comparators and MDSCR_EL1 are loaded and TDA is
//!   clear, so the guest reads and writes them at full speed. It gets
//!   there at its first write of a comparator or of an MDSCR_EL1 that
//!   enables debug (MDE, KDE or SS): the write is emulated, then the whole
//!   state is loaded ([`Switch::ToCpu`]) before the guest resumes.
//!
//! At put a vCPU in the CPU is saved, and the CPU is left with MDSCR_EL1 =
//! 0 and TDA set for the next one ([`DebugState::put`]); it is loaded
//! again at its next load only if its MDSCR_EL1 still enables debug. A
//! kernel that clears every comparator at boot (Linux's
//! `hw_breakpoint_reset`) and never debugs pays one load and one save,
//! once.
//!
//! The OS lock registers always trap (MDCR_EL2.TDOSA) and are emulated:
//! while the guest's OS lock or OS double lock is locked, debug exceptions
//! are disabled for it as the architecture says (`OSLSR_EL1.OSLK`,
//! `DoubleLockStatus()` in Arm ARM D2 "The effect of powerdown on debug
//! exceptions" and the pseudocode `AArch64.GenerateDebugExceptionsFrom`):
//! its state goes back to memory ([`Switch::ToMemory`]), where MDSCR_EL1
//! reads as the guest wrote it but the CPU has it 0. The OS lock resets
//! locked, so a guest unlocks it (OSLAR_EL1 = 0) before its breakpoints
//! can fire; Linux does so as each CPU comes up.
//!
//! # Why a guest cannot debug el2
//!
//! - The debug target Exception level is EL1 (TDE and TGE clear), and
//!   debug exceptions are never generated at an Exception level above the
//!   debug target: `AArch64.GenerateDebugExceptionsFrom(EL2, ...)` is
//!   `UInt(target) > UInt(from)`, false for target EL1. So no breakpoint
//!   (whatever `DBGBCR<n>.HMC`, SSC and PMC say), watchpoint or software
//!   step fires while el2 runs, even with the guest's comparators loaded
//!   and its MDSCR_EL1.KDE set; nor can the guest route one to EL2.
//!   (BRK at EL2 is el2's own code.)
//! - Software step: a guest stepping an instruction that traps to el2
//!   leaves SPSR_EL2.SS set; el2 clears it when it completes the
//!   instruction for the guest (`el2::trap::mmio::complete_instruction`),
//!   so the guest's step exception comes after that one instruction, at
//!   EL1, as on hardware. EL2 itself is never stepped (above).
//! - Halting debug (entering Debug state) needs EDSCR.HDE, which only an
//!   external debugger, or EL1 through MDSCR_EL1.HDE while the *physical*
//!   OS lock is locked, can set. The physical OS lock and OS double lock
//!   stay unlocked while guests run (el2 clears them at boot; the guest's
//!   OSLAR_EL1/OSDLR_EL1 writes are emulated, TDOSA), so MDSCR_EL1.HDE is
//!   read-only to a guest. The debug ROM address (MDRAR_EL1, TDRA) and the
//!   power-down controls (DBGPRCR_EL1, TDOSA) stay trapped too.
//! - What a vCPU in the CPU also reaches (TDA clear) is per-PE debug state
//!   nobody else uses: the Debug Communications Channel (MDCCSR_EL0,
//!   DBGDTR*_EL0, MDCCINT_EL1), the claim tags and DBGAUTHSTATUS_EL1.
//!   None of them generates an exception at EL2 or reveals el2's state;
//!   they are not switched, so two such vCPUs on one pCPU could signal
//!   each other through them (as through a cache), nothing more.
//!
//! el2's own values are never in these registers: it does not use
//! self-hosted debug.

use super::sysreg::{Emulated, SysregAccess, encoding};
use aarch64_cpu::registers::{ID_AA64DFR0_EL1, MDSCR_EL1, OSLAR_EL1};
use tock_registers::LocalRegisterCopy;
use tock_registers::register_bitfields;

/// ID_AA64DFR0_EL1's place in the ID register space (op0 3, op1 0, CRn
/// 0): (CRm, op2).
pub const ID_AA64DFR0_CRM_OP2: (u8, u8) = (5, 0);

/// Most breakpoints, and most watchpoints, ID_AA64DFR0_EL1 can describe
/// (BRPs and WRPs are 4-bit "number minus one" fields).
pub const MAX_COMPARATORS: usize = boot::debug::COMPARATORS;

register_bitfields! {u64,
    /// ID_AA64DFR0_EL1 fields aarch64-cpu does not name (Arm ARM D19.2).
    pub ID_AA64DFR0_MORE [
        /// FEAT_DoubleLock: 0b0000 implemented, 0b1111 not.
        DoubleLock OFFSET(36) NUMBITS(4) [
            Implemented = 0b0000,
            NotImplemented = 0b1111,
        ],
    ],
    /// OSDLR_EL1 (Arm ARM D19.3).
    OSDLR [
        /// OS double lock control.
        DLK OFFSET(0) NUMBITS(1) [],
    ],
    /// DBGPRCR_EL1 (Arm ARM D19.3).
    DBGPRCR [
        /// Core no powerdown request.
        CORENPDRQ OFFSET(0) NUMBITS(1) [],
    ],
    /// OSLSR_EL1 (Arm ARM D19.3).
    OSLSR [
        /// OS lock model: OSLM[1] (bit 3) set, OSLM[0] (bit 0) clear is
        /// the only model Armv8 permits.
        OSLM_HIGH OFFSET(3) NUMBITS(1) [],
        /// The OS lock is locked.
        OSLK OFFSET(1) NUMBITS(1) [],
    ],
}

/// The MDSCR_EL1 bits that enable a debug event at EL0 or EL1: software
/// step, kernel debug, monitor debug (breakpoints and watchpoints).
const MDSCR_ENABLES: u64 =
    MDSCR_EL1::SS::SET.value | MDSCR_EL1::KDE::SET.value | MDSCR_EL1::MDE::SET.value;

/// The MDSCR_EL1 bits a guest keeps: the enables and TDCC (EL0's DCC
/// access trap). The rest are read-only status (RXfull, TXfull...) or the
/// OS-lock save/restore view of external debug (HDE, INTdis...), which
/// EL1 cannot write while the physical OS lock is unlocked, or belong to
/// features a VM is not offered (trace filtering, PC sampling).
pub const MDSCR_GUEST_BITS: u64 = MDSCR_ENABLES | MDSCR_EL1::TDCC::SET.value;

/// The highest debug architecture a VM is told about: Armv8.8
/// (FEAT_Debugv8p8). From Armv8.9 a CPU may have more than 16 breakpoints
/// or watchpoints behind MDSELR_EL1, which el2 does not switch.
pub const DEBUG_VER_MAX: u64 = 0b1010;

/// What the CPU offers every vCPU, from its ID_AA64DFR0_EL1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DebugFeatures {
    /// Breakpoints (BRPs + 1).
    pub breakpoints: usize,
    /// Watchpoints (WRPs + 1).
    pub watchpoints: usize,
    /// FEAT_DoubleLock: OSDLR_EL1.DLK exists.
    pub double_lock: bool,
}

impl DebugFeatures {
    /// The features the CPU whose ID_AA64DFR0_EL1 reads `dfr0` has.
    pub fn from_dfr0(dfr0: u64) -> Self {
        let named = LocalRegisterCopy::<u64, ID_AA64DFR0_EL1::Register>::new(dfr0);
        let more = LocalRegisterCopy::<u64, ID_AA64DFR0_MORE::Register>::new(dfr0);
        Self {
            breakpoints: named.read(ID_AA64DFR0_EL1::BRPs) as usize + 1,
            watchpoints: named.read(ID_AA64DFR0_EL1::WRPs) as usize + 1,
            double_lock: more.matches_all(ID_AA64DFR0_MORE::DoubleLock::Implemented),
        }
    }

    /// The guest's ID_AA64DFR0_EL1 debug fields, from the CPU's `dfr0`: the
    /// debug version (at most [`DEBUG_VER_MAX`]), the breakpoint,
    /// watchpoint and context-comparator counts and the double lock as the
    /// CPU has them. Every other field is 0 here (the PMU's, SPE's and
    /// trace's are decided with them, `el2::trap::sysreg::sanitize_id`).
    pub fn guest_dfr0(dfr0: u64) -> u64 {
        use ID_AA64DFR0_EL1 as Dfr0;
        let hw = LocalRegisterCopy::<u64, Dfr0::Register>::new(dfr0);
        let debug_ver = hw.read(Dfr0::DebugVer).min(DEBUG_VER_MAX);
        let kept = Dfr0::DebugVer.val(debug_ver)
            + Dfr0::BRPs.val(hw.read(Dfr0::BRPs))
            + Dfr0::WRPs.val(hw.read(Dfr0::WRPs))
            + Dfr0::CTX_CMPs.val(hw.read(Dfr0::CTX_CMPs));
        let double_lock = ID_AA64DFR0_MORE::DoubleLock.val(
            LocalRegisterCopy::<u64, ID_AA64DFR0_MORE::Register>::new(dfr0)
                .read(ID_AA64DFR0_MORE::DoubleLock),
        );
        kept.value | double_lock.value
    }
}

/// One breakpoint or watchpoint: its control register (`DBGBCR<n>_EL1`,
/// `DBGWCR<n>_EL1`) and value register (`DBGBVR<n>_EL1`, `DBGWVR<n>_EL1`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Comparator {
    pub control: u64,
    pub value: u64,
}

/// The registers that are in the CPU while a vCPU's debug state is
/// ([`DebugState::in_cpu`]); entries beyond the CPU's counts stay zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DebugRegisters {
    pub breakpoints: [Comparator; MAX_COMPARATORS],
    pub watchpoints: [Comparator; MAX_COMPARATORS],
    /// MDSCR_EL1 as the guest wrote it ([`MDSCR_GUEST_BITS`]).
    pub mdscr: u64,
}

impl DebugRegisters {
    /// MDSCR_EL1 enables a debug event (software step, or breakpoints and
    /// watchpoints, at EL0 or EL1).
    pub fn enables_debug(&self) -> bool {
        self.mdscr & MDSCR_ENABLES != 0
    }
}

/// A vCPU's debug state: where its registers are ([module
/// documentation](self)) and its emulated OS lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebugState {
    /// The registers, up to date while not [`Self::in_cpu`].
    pub registers: DebugRegisters,
    /// OSLSR_EL1.OSLK.
    os_lock: bool,
    /// OSDLR_EL1.DLK.
    double_lock: bool,
    /// DBGPRCR_EL1.CORENPDRQ.
    no_powerdown: bool,
    /// The guest uses its debug registers: load them with the vCPU.
    in_use: bool,
    /// They are in the CPU (loaded with the vCPU, TDA clear).
    in_cpu: bool,
}

impl Default for DebugState {
    fn default() -> Self {
        Self::reset()
    }
}

/// A move of a vCPU's debug registers, for the hardware layer to make at
/// once (the vCPU is loaded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    /// Load [`DebugState::registers`] into the CPU and stop trapping them.
    ToCpu,
    /// Save the CPU's into [`DebugState::registers`], set MDSCR_EL1 to 0
    /// and trap them again.
    ToMemory,
}

/// How a trapped debug register access is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugAnswer {
    /// Emulated; then the switch, if any, before the guest resumes.
    Done {
        result: Emulated,
        switch: Option<Switch>,
    },
    /// An EL0 access to the Debug Communications Channel while the
    /// guest's MDSCR_EL1.TDCC is set: the guest's EL1 takes it as a
    /// trapped system register access (EC 0x18), as the CPU would have
    /// trapped it had MDSCR_EL1 been loaded.
    TrapToEl1,
}

impl DebugState {
    /// The state after a cold reset: OS lock locked (Arm ARM D19.3
    /// "OSLSR_EL1": OSLK is set by a Cold reset), nothing else set, in
    /// memory.
    pub const fn reset() -> Self {
        Self {
            registers: DebugRegisters {
                breakpoints: [Comparator {
                    control: 0,
                    value: 0,
                }; MAX_COMPARATORS],
                watchpoints: [Comparator {
                    control: 0,
                    value: 0,
                }; MAX_COMPARATORS],
                mdscr: 0,
            },
            os_lock: true,
            double_lock: false,
            no_powerdown: false,
            in_use: false,
            in_cpu: false,
        }
    }

    /// The registers are in the CPU (the vCPU is loaded and its debug
    /// accesses do not trap).
    pub fn in_cpu(&self) -> bool {
        self.in_cpu
    }

    /// The guest's OS lock is locked.
    pub fn os_locked(&self) -> bool {
        self.os_lock
    }

    /// Debug exceptions are disabled by the OS lock or the OS double lock
    /// (`DoubleLockStatus()`: DLK set and CORENPDRQ clear).
    pub fn locked(&self) -> bool {
        self.os_lock || (self.double_lock && !self.no_powerdown)
    }

    /// Where the registers belong now.
    fn belongs_in_cpu(&self) -> bool {
        self.in_use && !self.locked()
    }

    /// The vCPU is being loaded: whether its registers go into the CPU
    /// (the hardware layer then loads them and clears TDA). False for a
    /// vCPU that does not use them: its load costs nothing.
    pub fn load(&mut self) -> bool {
        // `put` left `in_cpu` clear: a vCPU that does not use its debug
        // registers costs one load and one branch here.
        if !self.in_use {
            return false;
        }
        self.in_cpu = !self.locked();
        self.in_cpu
    }

    /// The vCPU, its registers in the CPU, was put and they were saved
    /// into [`Self::registers`] (the CPU left with MDSCR_EL1 = 0 and TDA
    /// set). It keeps using them, and loads them at its next load, only
    /// while its MDSCR_EL1 enables debug; otherwise its next access traps
    /// again. (Nothing to do at the put of a vCPU whose registers are not
    /// in the CPU.)
    pub fn put(&mut self) {
        self.registers.mdscr &= MDSCR_GUEST_BITS;
        self.in_use = self.registers.enables_debug();
        self.in_cpu = false;
    }

    /// The switch an emulated access calls for, made effective.
    fn reconcile(&mut self) -> Option<Switch> {
        match (self.in_cpu, self.belongs_in_cpu()) {
            (false, true) => {
                self.in_cpu = true;
                Some(Switch::ToCpu)
            }
            (true, false) => {
                self.in_cpu = false;
                Some(Switch::ToMemory)
            }
            _ => None,
        }
    }

    /// Answers a trapped access to a debug register, with `value` the
    /// content of Xt for a write, from EL0 if `from_el0`; `None` for a
    /// register that is not a debug register, or a breakpoint or
    /// watchpoint the CPU does not have (UNDEFINED, Arm ARM D19.3 "`DBGBCR<n>_EL1`").
    pub fn emulate(
        &mut self,
        access: &SysregAccess,
        value: u64,
        features: DebugFeatures,
        from_el0: bool,
    ) -> Option<DebugAnswer> {
        use encoding::*;
        let write = access.write;
        let result = match access.encoding() {
            MDSCR_EL1 if write => {
                self.registers.mdscr = value & MDSCR_GUEST_BITS;
                if self.registers.enables_debug() {
                    self.in_use = true;
                }
                Emulated::Written
            }
            MDSCR_EL1 => Emulated::Read(self.registers.mdscr),
            OSLAR_EL1 if write => {
                let oslar = LocalRegisterCopy::<u64, OSLAR_EL1::Register>::new(value);
                self.os_lock = oslar.is_set(OSLAR_EL1::OSLK);
                Emulated::Written
            }
            OSLSR_EL1 if !write => Emulated::Read(
                (OSLSR::OSLM_HIGH::SET + OSLSR::OSLK.val(u64::from(self.os_lock))).value,
            ),
            OSDLR_EL1 if write => {
                self.double_lock = features.double_lock && OSDLR::DLK.is_set(value);
                Emulated::Written
            }
            OSDLR_EL1 => Emulated::Read(OSDLR::DLK.val(u64::from(self.double_lock)).value),
            DBGPRCR_EL1 if write => {
                self.no_powerdown = DBGPRCR::CORENPDRQ.is_set(value);
                Emulated::Written
            }
            DBGPRCR_EL1 => {
                Emulated::Read(DBGPRCR::CORENPDRQ.val(u64::from(self.no_powerdown)).value)
            }
            (2, 0, 0, n, op2 @ 4..=7) => {
                let (bank, count) = if op2 < 6 {
                    (&mut self.registers.breakpoints, features.breakpoints)
                } else {
                    (&mut self.registers.watchpoints, features.watchpoints)
                };
                let n = usize::from(n);
                if n >= count.min(MAX_COMPARATORS) {
                    return None;
                }
                let comparator = &mut bank[n];
                // op2 4 and 6 are the value registers, 5 and 7 the controls.
                let register = if op2 % 2 == 0 {
                    &mut comparator.value
                } else {
                    &mut comparator.control
                };
                if write {
                    *register = value;
                    self.in_use = true;
                    Emulated::Written
                } else {
                    Emulated::Read(*register)
                }
            }
            MDCCSR_EL0 | DBGDTR_EL0 | DBGDTRRX_EL0 => {
                let trapped_to_el1 = self.registers.mdscr & MDSCR_EL1::TDCC::SET.value != 0;
                if from_el0 && trapped_to_el1 {
                    return Some(DebugAnswer::TrapToEl1);
                }
                // No external debugger is attached: nothing to receive,
                // and what is sent goes nowhere.
                if write && access.encoding() == MDCCSR_EL0 {
                    // MDCCSR_EL0 is read-only.
                    return None;
                }
                if write {
                    Emulated::Written
                } else {
                    Emulated::Read(0)
                }
            }
            MDCCINT_EL1 | MDRAR_EL1 | DBGCLAIMSET_EL1 | DBGCLAIMCLR_EL1 | DBGAUTHSTATUS_EL1 => {
                if write {
                    Emulated::Written
                } else {
                    Emulated::Read(0)
                }
            }
            _ => return None,
        };
        Some(DebugAnswer::Done {
            result,
            switch: self.reconcile(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU 7.2's `-cpu max` ID_AA64DFR0_EL1: Debugv8p4, PMUv3p5, 6
    /// breakpoints, 4 watchpoints, 2 context comparators.
    const QEMU_MAX_DFR0: u64 = 0x0000_0000_1030_5609;

    /// `MSR/MRS S<op0>_<op1>_C<crn>_C<crm>_<op2>` with Xt = x2.
    fn access(encoding: (u8, u8, u8, u8, u8), write: bool) -> SysregAccess {
        let (op0, op1, crn, crm, op2) = encoding;
        SysregAccess {
            op0,
            op1,
            crn,
            crm,
            op2,
            rt: 2,
            write,
        }
    }

    fn features() -> DebugFeatures {
        DebugFeatures::from_dfr0(QEMU_MAX_DFR0)
    }

    fn write(state: &mut DebugState, encoding: (u8, u8, u8, u8, u8), value: u64) -> DebugAnswer {
        state
            .emulate(&access(encoding, true), value, features(), false)
            .unwrap_or_else(|| panic!("{encoding:?} not emulated"))
    }

    fn read(state: &mut DebugState, encoding: (u8, u8, u8, u8, u8)) -> u64 {
        match state.emulate(&access(encoding, false), 0, features(), false) {
            Some(DebugAnswer::Done {
                result: Emulated::Read(v),
                switch: None,
            }) => v,
            other => panic!("{encoding:?}: {other:?}"),
        }
    }

    const fn dbgbcr(n: u8) -> (u8, u8, u8, u8, u8) {
        (2, 0, 0, n, 5)
    }
    const fn dbgwvr(n: u8) -> (u8, u8, u8, u8, u8) {
        (2, 0, 0, n, 6)
    }

    #[test]
    fn features_come_from_the_id_register() {
        let f = features();
        assert_eq!((f.breakpoints, f.watchpoints, f.double_lock), (6, 4, true));
        let none = DebugFeatures::from_dfr0(0xf << 36 | 0xf << 12 | 0xf << 20);
        assert_eq!(
            (none.breakpoints, none.watchpoints, none.double_lock),
            (16, 16, false)
        );
    }

    #[test]
    fn the_guest_reads_the_debug_version_counts_and_double_lock() {
        // QEMU max: Debugv8p4 and its counts kept; PMUVer (6) and
        // TraceVer are not debug fields.
        assert_eq!(DebugFeatures::guest_dfr0(QEMU_MAX_DFR0), 0x1030_5009);
        // A newer CPU: Debugv8p9 (0b1011) shown as v8p8, double lock not
        // implemented (0xf) kept, SPE (PMSVer), trace filter, BRBE gone.
        let newer: u64 = 0b1011
            | 1 << 4
            | 0xf << 12
            | 0xf << 20
            | 0xf << 28
            | 1 << 32
            | 0xf << 36
            | 1 << 40
            | 1 << 52;
        let guest = DebugFeatures::guest_dfr0(newer);
        assert_eq!(guest & 0xf, DEBUG_VER_MAX);
        assert_eq!((guest >> 36) & 0xf, 0xf, "DoubleLock as the CPU has it");
        assert_eq!(
            guest & (0xf << 12 | 0xf << 20 | 0xf << 28),
            newer & (0xf << 12 | 0xf << 20 | 0xf << 28)
        );
        assert_eq!(guest & (0xf << 32 | 0xf << 40 | 0xf << 52 | 0xf << 4), 0);
    }

    /// What the runner does at a put: the state's `put` only for
    /// registers in the CPU (after saving them).
    fn put(s: &mut DebugState) {
        if s.in_cpu() {
            s.put();
        }
    }

    #[test]
    fn a_vcpu_that_never_touches_debug_stays_out_of_the_cpu() {
        let mut s = DebugState::reset();
        for _ in 0..3 {
            assert!(!s.load(), "nothing to load");
            put(&mut s);
        }
        // Linux's boot: unlock the OS lock, MDSCR_EL1 = TDCC, read a
        // comparator: none of it makes the vCPU a debug user.
        assert!(matches!(
            write(&mut s, encoding::OSLAR_EL1, 0),
            DebugAnswer::Done { switch: None, .. }
        ));
        assert!(matches!(
            write(&mut s, encoding::MDSCR_EL1, MDSCR_EL1::TDCC::SET.value),
            DebugAnswer::Done { switch: None, .. }
        ));
        assert_eq!(read(&mut s, dbgbcr(0)), 0);
        assert!(!s.load());
        assert!(!s.in_cpu());
    }

    #[test]
    fn the_first_comparator_write_moves_the_state_into_the_cpu() {
        let mut s = DebugState::reset();
        write(&mut s, encoding::OSLAR_EL1, 0);
        let answer = write(&mut s, dbgwvr(3), 0x4010_0008);
        assert_eq!(
            answer,
            DebugAnswer::Done {
                result: Emulated::Written,
                switch: Some(Switch::ToCpu)
            }
        );
        assert!(s.in_cpu());
        assert_eq!(s.registers.watchpoints[3].value, 0x4010_0008);
        // At put the hardware layer saved the registers; MDSCR_EL1 does not
        // enable debug, so the next load leaves them in memory.
        put(&mut s);
        assert!(!s.load());
        // Enabling monitor debug brings them back, and keeps them there.
        assert_eq!(
            write(&mut s, encoding::MDSCR_EL1, MDSCR_EL1::MDE::SET.value),
            DebugAnswer::Done {
                result: Emulated::Written,
                switch: Some(Switch::ToCpu)
            }
        );
        put(&mut s);
        assert!(s.load(), "MDE set: loaded with the vCPU");
        put(&mut s);
        assert!(s.load());
        // The guest clears MDSCR_EL1 in the CPU (no trap); the save at put
        // sees it, and the vCPU stops paying.
        s.registers.mdscr = MDSCR_EL1::TDCC::SET.value | MDSCR_EL1::TXfull::SET.value;
        put(&mut s);
        assert_eq!(
            s.registers.mdscr,
            MDSCR_EL1::TDCC::SET.value,
            "status bits dropped"
        );
        assert!(!s.load());
    }

    #[test]
    fn the_os_lock_keeps_debug_out_of_the_cpu() {
        // Reset: locked. A comparator write is stored, but the state stays
        // in memory (debug exceptions are disabled).
        let mut s = DebugState::reset();
        assert!(s.locked());
        assert!(matches!(
            write(&mut s, dbgbcr(5), 0x1e3),
            DebugAnswer::Done { switch: None, .. }
        ));
        assert_eq!(read(&mut s, dbgbcr(5)), 0x1e3);
        assert!(!s.load());
        // Unlocking moves it in; locking again moves it out at once.
        assert_eq!(
            write(&mut s, encoding::OSLAR_EL1, 0),
            DebugAnswer::Done {
                result: Emulated::Written,
                switch: Some(Switch::ToCpu)
            }
        );
        assert_eq!(
            write(&mut s, encoding::OSLAR_EL1, 1),
            DebugAnswer::Done {
                result: Emulated::Written,
                switch: Some(Switch::ToMemory)
            }
        );
        assert_eq!(read(&mut s, encoding::OSLSR_EL1), 0b1010);
        // The double lock counts only without a no-powerdown request
        // (DoubleLockStatus()).
        write(&mut s, encoding::OSLAR_EL1, 0);
        assert!(s.in_cpu());
        assert_eq!(
            write(&mut s, encoding::OSDLR_EL1, 1),
            DebugAnswer::Done {
                result: Emulated::Written,
                switch: Some(Switch::ToMemory)
            }
        );
        assert_eq!(read(&mut s, encoding::OSDLR_EL1), 1);
        assert_eq!(
            write(&mut s, encoding::DBGPRCR_EL1, 1),
            DebugAnswer::Done {
                result: Emulated::Written,
                switch: Some(Switch::ToCpu)
            }
        );
        assert_eq!(read(&mut s, encoding::DBGPRCR_EL1), 1);
        // A CPU without FEAT_DoubleLock: OSDLR_EL1 reads as zero.
        let mut plain = DebugState::reset();
        let no_double_lock = DebugFeatures {
            double_lock: false,
            ..features()
        };
        let osdlr = |write| access(encoding::OSDLR_EL1, write);
        plain.emulate(&osdlr(true), 1, no_double_lock, false);
        assert_eq!(
            plain.emulate(&osdlr(false), 0, no_double_lock, false),
            Some(DebugAnswer::Done {
                result: Emulated::Read(0),
                switch: None
            })
        );
    }

    #[test]
    fn only_the_cpus_comparators_exist() {
        let mut s = DebugState::reset();
        // 6 breakpoints, 4 watchpoints: BCR5 exists, BCR6 and WVR4 do not.
        assert!(
            s.emulate(&access(dbgbcr(5), false), 0, features(), false)
                .is_some()
        );
        assert_eq!(
            s.emulate(&access(dbgbcr(6), true), 1, features(), false),
            None
        );
        assert_eq!(
            s.emulate(&access(dbgwvr(4), false), 0, features(), false),
            None
        );
        assert_eq!(s, DebugState::reset());
    }

    #[test]
    fn mdscr_keeps_what_el1_can_write() {
        let mut s = DebugState::reset();
        write(&mut s, encoding::MDSCR_EL1, u64::MAX);
        assert_eq!(read(&mut s, encoding::MDSCR_EL1), MDSCR_GUEST_BITS);
        assert_eq!(MDSCR_GUEST_BITS, 1 | 1 << 12 | 1 << 13 | 1 << 15);
    }

    #[test]
    fn the_dcc_reads_empty_unless_el0_is_trapped_to_el1() {
        let mut s = DebugState::reset();
        let dtr_read = access(encoding::DBGDTRRX_EL0, false);
        let status = access(encoding::MDCCSR_EL0, false);
        for from_el0 in [false, true] {
            assert_eq!(
                s.emulate(&status, 0, features(), from_el0),
                Some(DebugAnswer::Done {
                    result: Emulated::Read(0),
                    switch: None
                })
            );
        }
        write(&mut s, encoding::MDSCR_EL1, MDSCR_EL1::TDCC::SET.value);
        assert_eq!(
            s.emulate(&dtr_read, 0, features(), true),
            Some(DebugAnswer::TrapToEl1)
        );
        assert!(matches!(
            s.emulate(&dtr_read, 0, features(), false),
            Some(DebugAnswer::Done { .. })
        ));
        // MDCCSR_EL0 is read-only.
        assert_eq!(
            s.emulate(&access(encoding::MDCCSR_EL0, true), 0, features(), false),
            None
        );
    }

    #[test]
    fn other_registers_are_not_debug_registers() {
        let mut s = DebugState::reset();
        for encoding in [(3, 0, 1, 0, 0), (3, 3, 9, 12, 0), (2, 0, 0, 2, 1)] {
            for write in [false, true] {
                assert_eq!(
                    s.emulate(&access(encoding, write), 5, features(), false),
                    None,
                    "{encoding:?}"
                );
            }
        }
        // OSLAR_EL1 is write-only, OSLSR_EL1 read-only.
        assert_eq!(
            s.emulate(&access(encoding::OSLAR_EL1, false), 0, features(), false),
            None
        );
        assert_eq!(
            s.emulate(&access(encoding::OSLSR_EL1, true), 0, features(), false),
            None
        );
    }
}
