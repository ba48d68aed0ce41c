//! The list registers of the GICv3 virtual CPU interface (`ICH_LR<n>_EL2`):
//! the values the hypervisor writes before entering a vCPU and reads back
//! after it exits (Arm IHI 0069, "`ICH_LR<n>_EL2`, Interrupt Controller List
//! Registers").

// Every `ICH_LR<n>_EL2` has the layout aarch64-cpu gives ICH_LR0_EL2.
use aarch64_cpu::registers::ICH_LR0_EL2 as LR;

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
