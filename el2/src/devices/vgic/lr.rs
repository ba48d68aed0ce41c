//! The list registers of the GICv3 virtual CPU interface (`ICH_LR<n>_EL2`):
//! the values the hypervisor writes before entering a vCPU and reads back
//! after it exits (Arm IHI 0069, "`ICH_LR<n>_EL2`, Interrupt Controller List
//! Registers").

// Every `ICH_LR<n>_EL2` has the layout aarch64-cpu gives ICH_LR0_EL2.
use aarch64_cpu::registers::ICH_LR0_EL2 as LR;
use aarch64_cpu::registers::SPSR_EL2;
use tock_registers::LocalRegisterCopy;
use tock_registers::register_bitfields;

register_bitfields! {u64,
    /// ICH_VMCR_EL2 (Arm IHI 0069, "`ICH_VMCR_EL2`, Interrupt Controller
    /// Virtual Machine Control Register"): the fields
    /// [`signalled_at_once`] reads (aarch64-cpu gives the register no
    /// fields).
    pub VMCR [
        /// The guest's priority mask (ICV_PMR_EL1).
        VPMR OFFSET(24) NUMBITS(8) [],
        /// Group 1 enable (ICV_IGRPEN1_EL1).
        VENG1 OFFSET(1) NUMBITS(1) [],
        /// Group 0 enable (ICV_IGRPEN0_EL1).
        VENG0 OFFSET(0) NUMBITS(1) [],
    ]
}

/// Whether the virtual CPU interface signals one of the entries `lrs` to
/// a guest that runs with `pstate` (its SPSR_EL2), its interface's
/// `vmcr` (ICH_VMCR_EL2) and `any_active` (an active priority bit set in
/// `ICH_AP0R<n>_EL2` / `ICH_AP1R<n>_EL2`), so that the guest takes it as soon
/// as it executes: a pending entry of an enabled group whose priority is
/// higher (numerically lower) than the priority mask, unmasked by
/// PSTATE.I (Group 1, a virtual IRQ) or PSTATE.F (Group 0, a virtual
/// FIQ) (Arm IHI 0069, "Virtual interrupt handling and prioritization").
/// With an interrupt active the running priority also counts; rather than
/// compute it, the answer is then `false`: not known to be signalled.
pub fn signalled_at_once(
    lrs: impl IntoIterator<Item = Lr>,
    vmcr: u64,
    any_active: bool,
    pstate: u64,
) -> bool {
    if any_active {
        return false;
    }
    let vmcr = LocalRegisterCopy::<u64, VMCR::Register>::new(vmcr);
    let pstate = LocalRegisterCopy::<u64, SPSR_EL2::Register>::new(pstate);
    let mask = vmcr.read(VMCR::VPMR);
    let irq_open = vmcr.is_set(VMCR::VENG1) && !pstate.is_set(SPSR_EL2::I);
    let fiq_open = vmcr.is_set(VMCR::VENG0) && !pstate.is_set(SPSR_EL2::F);
    lrs.into_iter().any(|lr| {
        lr.state == LrState::Pending
            && u64::from(lr.priority) < mask
            && if lr.group1 { irq_open } else { fiq_open }
    })
}

/// The most list registers a CPU interface has: ICH_VTR_EL2.ListRegs is a
/// 5-bit field holding the count minus one, and the architecture defines
/// ICH_LR0_EL2..ICH_LR15_EL2.
pub const MAX_LIST_REGISTERS: usize = 16;

/// `ICH_LR<n>_EL2`.State, bits 63:62.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LrState {
    /// 0b00: the entry holds no interrupt, or the guest has acknowledged
    /// and deactivated the one it held.
    #[default]
    Invalid,
    /// 0b01: waiting for the guest to acknowledge it.
    Pending,
    /// 0b10: acknowledged, not yet deactivated.
    Active,
    /// 0b11: active and pending again.
    PendingActive,
}

impl LrState {
    /// The two-bit State field value.
    pub const fn bits(self) -> u64 {
        match self {
            Self::Invalid => 0b00,
            Self::Pending => 0b01,
            Self::Active => 0b10,
            Self::PendingActive => 0b11,
        }
    }

    /// The state a two-bit State field value (only bits 1:0 count) names.
    pub const fn from_bits(bits: u64) -> Self {
        match bits & 0b11 {
            0b00 => Self::Invalid,
            0b01 => Self::Pending,
            0b10 => Self::Active,
            _ => Self::PendingActive,
        }
    }

    /// The state for a pending and an active part.
    pub const fn new(pending: bool, active: bool) -> Self {
        match (pending, active) {
            (false, false) => Self::Invalid,
            (true, false) => Self::Pending,
            (false, true) => Self::Active,
            (true, true) => Self::PendingActive,
        }
    }

    /// Pending or pending and active.
    pub const fn is_pending(self) -> bool {
        matches!(self, Self::Pending | Self::PendingActive)
    }

    /// Active or pending and active.
    pub const fn is_active(self) -> bool {
        matches!(self, Self::Active | Self::PendingActive)
    }

    /// Whether an entry in this state may carry a physical interrupt (HW
    /// = 1): pending or active, not both, since the pending state of a
    /// physical interrupt that is active is the physical one's (Arm IHI
    /// 0069, "`ICH_LR<n>_EL2`": a hardware entry's pending and active
    /// state), and an invalid entry has nothing to deactivate.
    pub const fn may_be_hardware(self) -> bool {
        matches!(self, Self::Pending | Self::Active)
    }
}

/// One list register's contents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Lr {
    /// The virtual INTID the guest acknowledges (vINTID, bits 31:0).
    pub intid: u32,
    /// State, bits 63:62.
    pub state: LrState,
    /// Priority, bits 55:48. The CPU interface implements only the top
    /// ICH_VTR_EL2.PRIbits of it; the others read back as zero.
    pub priority: u8,
    /// Group, bit 60: Group 1 (signalled as a virtual IRQ) rather than
    /// Group 0 (a virtual FIQ).
    pub group1: bool,
    /// HW (bit 61) with pINTID (bits 44:32, 13 bits kept): the guest's
    /// deactivation of the virtual interrupt also deactivates this
    /// physical one. The model never fills these itself; the caller maps
    /// an entry with [`ListRegisters::map_hardware`] (the virtual timer's:
    /// `el2::devices::vtimer`).
    pub physical: Option<u16>,
    /// EOI (bit 41, only when HW is 0): the guest's deactivation raises a
    /// maintenance interrupt (ICH_EISR_EL2, ICH_MISR_EL2.EOI), so the
    /// hypervisor sees a level-sensitive interrupt complete and can
    /// re-pend it while its line is still high.
    pub eoi_maintenance: bool,
}

impl Lr {
    /// The `ICH_LR<n>_EL2` value for this entry. A `physical` INTID wider
    /// than 13 bits is truncated; with `physical`, `eoi_maintenance` is
    /// not encoded (bit 41 then belongs to pINTID).
    pub const fn encode(&self) -> u64 {
        let mut value = (self.intid as u64 & LR::vINTID.mask) << LR::vINTID.shift
            | (self.priority as u64) << LR::Priority.shift
            | self.state.bits() << LR::State.shift;
        if self.group1 {
            value |= LR::Group::SET.value;
        }
        match self.physical {
            Some(pintid) => {
                value |= LR::HW::SET.value | (pintid as u64 & LR::pINTID.mask) << LR::pINTID.shift;
            }
            None => {
                if self.eoi_maintenance {
                    value |= LR::EOI::SET.value;
                }
            }
        }
        value
    }

    /// Decodes an `ICH_LR<n>_EL2` value; RES0 bits are ignored.
    pub const fn decode(value: u64) -> Self {
        let hw = value & LR::HW::SET.value != 0;
        Self {
            intid: ((value >> LR::vINTID.shift) & LR::vINTID.mask) as u32,
            state: LrState::from_bits(value >> LR::State.shift),
            priority: ((value >> LR::Priority.shift) & LR::Priority.mask) as u8,
            group1: value & LR::Group::SET.value != 0,
            physical: if hw {
                Some(((value >> LR::pINTID.shift) & LR::pINTID.mask) as u16)
            } else {
                None
            },
            eoi_maintenance: !hw && value & LR::EOI::SET.value != 0,
        }
    }
}

/// What [`super::VGic::fill`] puts in a vCPU's list registers: entries
/// `0..len()` are filled, the rest are empty (write them as 0, i.e.
/// Invalid, so no stale entry survives from another vCPU).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListRegisters {
    entries: [Option<Lr>; MAX_LIST_REGISTERS],
}

impl ListRegisters {
    /// Every list register, filled ones first.
    pub const fn entries(&self) -> &[Option<Lr>; MAX_LIST_REGISTERS] {
        &self.entries
    }

    /// Consumes the set into its array of entries.
    pub const fn into_entries(self) -> [Option<Lr>; MAX_LIST_REGISTERS] {
        self.entries
    }

    /// List register `index`, if filled.
    pub fn get(&self, index: usize) -> Option<Lr> {
        self.entries.get(index).copied().flatten()
    }

    /// How many list registers are filled.
    pub fn len(&self) -> usize {
        self.entries.iter().take_while(|e| e.is_some()).count()
    }

    /// Whether none is filled.
    pub fn is_empty(&self) -> bool {
        self.entries[0].is_none()
    }

    /// The filled entries, in list register order.
    pub fn iter(&self) -> impl Iterator<Item = &Lr> + '_ {
        self.entries.iter().map_while(Option::as_ref)
    }

    /// The `ICH_LR<n>_EL2` values to write: the encoded entries, 0 for the
    /// empty ones.
    pub fn values(&self) -> [u64; MAX_LIST_REGISTERS] {
        self.entries.map(|e| e.map_or(0, |lr| lr.encode()))
    }

    /// The state of the entry for virtual `intid`, if one is filled.
    pub fn state_of(&self, intid: u32) -> Option<LrState> {
        self.iter().find(|lr| lr.intid == intid).map(|lr| lr.state)
    }

    /// Makes the entry for virtual `intid` a hardware one for physical
    /// `pintid` (HW = 1): the guest's deactivation of the virtual
    /// interrupt deactivates the physical one, and no EOI maintenance
    /// interrupt is asked for (a hardware entry has no EOI bit). False, and
    /// nothing changed, if no entry holds `intid` or its state cannot carry
    /// a physical interrupt ([`LrState::may_be_hardware`]).
    pub fn map_hardware(&mut self, intid: u32, pintid: u16) -> bool {
        let entry = self
            .entries
            .iter_mut()
            .flatten()
            .find(|lr| lr.intid == intid && lr.state.may_be_hardware());
        match entry {
            Some(lr) => {
                lr.physical = Some(pintid);
                lr.eoi_maintenance = false;
                true
            }
            None => false,
        }
    }

    /// Appends an entry; false if all are used.
    pub(super) fn push(&mut self, lr: Lr) -> bool {
        match self.entries.iter_mut().find(|e| e.is_none()) {
            Some(slot) => {
                *slot = Some(lr);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Group 1 enabled, priority mask 0xf0, as Linux's GIC driver leaves
    /// it.
    const LINUX_VMCR: u64 = 0xf0 << 24 | 1 << 1;
    /// EL1h, DAIF clear.
    const EL1H: u64 = 0b0101;

    fn sgi(state: LrState, priority: u8) -> Lr {
        Lr {
            intid: 1,
            state,
            priority,
            group1: true,
            ..Lr::default()
        }
    }

    #[test]
    fn a_pending_entry_above_the_mask_is_signalled_to_an_unmasked_guest() {
        let pending = [sgi(LrState::Pending, 0xa0)];
        assert!(signalled_at_once(pending, LINUX_VMCR, false, EL1H));
        // Among others that are not.
        let mixed = [sgi(LrState::Active, 0xa0), sgi(LrState::Pending, 0xa0)];
        assert!(signalled_at_once(mixed, LINUX_VMCR, false, EL1H));
    }

    #[test]
    fn masks_priorities_group_enables_and_active_interrupts_hold_it_back() {
        let pending = [sgi(LrState::Pending, 0xa0)];
        // PSTATE.I.
        let masked = EL1H | SPSR_EL2::I::Masked.value;
        assert!(!signalled_at_once(pending, LINUX_VMCR, false, masked));
        // The priority mask (pseudo-NMI masks with it, PSTATE.I clear).
        let pmr_low = 0x80 << 24 | 1 << 1;
        assert!(!signalled_at_once(pending, pmr_low, false, EL1H));
        assert!(!signalled_at_once(
            [sgi(LrState::Pending, 0xf0)],
            LINUX_VMCR,
            false,
            EL1H
        ));
        // Group 1 disabled.
        assert!(!signalled_at_once(pending, 0xf0 << 24, false, EL1H));
        // An interrupt active: the running priority is not computed.
        assert!(!signalled_at_once(pending, LINUX_VMCR, true, EL1H));
        // Nothing pending.
        for state in [LrState::Invalid, LrState::Active, LrState::PendingActive] {
            assert!(!signalled_at_once(
                [sgi(state, 0xa0)],
                LINUX_VMCR,
                false,
                EL1H
            ));
        }
        assert!(!signalled_at_once([], LINUX_VMCR, false, EL1H));
    }

    #[test]
    fn group_0_goes_by_the_fiq_mask_and_its_own_enable() {
        let fiq = [Lr {
            group1: false,
            ..sgi(LrState::Pending, 0xa0)
        }];
        let both = LINUX_VMCR | 1;
        assert!(signalled_at_once(fiq, both, false, EL1H));
        assert!(!signalled_at_once(fiq, LINUX_VMCR, false, EL1H));
        let irq_masked = EL1H | SPSR_EL2::I::Masked.value;
        assert!(signalled_at_once(fiq, both, false, irq_masked));
        let fiq_masked = EL1H | SPSR_EL2::F::Masked.value;
        assert!(!signalled_at_once(fiq, both, false, fiq_masked));
    }
}
