//! A virtual GICv3 for one VM: the portable model of its distributor, its
//! redistributors and the state of every interrupt behind them, and the
//! handoff of interrupts to the virtual CPU interface's list registers.
//!
//! Nothing here touches hardware. The hypervisor leaves the GIC frames out
//! of stage 2, so the guest's accesses trap and [`crate::trap::mmio`] decodes
//! them; it hands them to [`VGic::dist_read`] / [`VGic::dist_write`] and
//! [`VGic::redist_read`] / [`VGic::redist_write`], and copies
//! [`ListRegisters`] to and from `ICH_LR<n>_EL2` around every run of a vCPU.
//! The guest talks to the virtual CPU interface (ICV_* registers) in
//! hardware; only ICC_SGI1R_EL1 traps, and goes to [`VGic::send_sgi`].
//!
//! # What the guest sees
//!
//! A GICv3 (PIDR2.ArchRev = 3, [`regs::IIDR`]) with:
//! - **A single Security state**: GICD_CTLR.DS reads as one (RAO/WI), as
//!   under KVM or QEMU's `virt` without EL3. That is what the virtual CPU
//!   interface is anyway (it has a Group 0, signalled as a virtual FIQ,
//!   and a Group 1, a virtual IRQ, and no Secure state), and it keeps
//!   priorities unshifted: a two-Security-state GIC would have to show a
//!   Non-secure guest the shifted "Non-secure view" of every priority
//!   (Arm IHI 0069, "Software accesses of interrupt priority"). So
//!   GICD_CTLR has EnableGrp0 (bit 0) and EnableGrp1 (bit 1, where a
//!   two-Security-state GIC has EnableGrp1NS) writable; `GICD_IGROUPR<n>`
//!   and GICR_IGROUPR0 are read-write storage of each interrupt's group,
//!   which goes into the list register; `GICD_IGRPMODR<n>`, GICR_IGRPMODR0
//!   and the NSACRs are RAZ/WI, as the architecture has them when DS is 1.
//!   Every interrupt resets to Group 1 (the architecture leaves the reset
//!   value UNKNOWN; KVM chooses the same), so a guest that never programs
//!   groups gets IRQs, and Linux, which writes all ones, changes nothing.
//! - **Affinity routing only**: GICD_CTLR.ARE (bit 4, where a
//!   two-Security-state GIC has ARE_NS) is RAO/WI; GICv2 compatibility
//!   (legacy operation, ARE = 0) is not offered. Accordingly
//!   `GICD_ITARGETSR<n>`, `GICD_CPENDSGIR<n>` and `GICD_SPENDSGIR<n>` are
//!   RAZ/WI, the GICv2 GICD_SGIR is not implemented, and the distributor's
//!   registers for INTIDs 0..=31 are RAZ/WI: SGIs and PPIs are programmed
//!   in each vCPU's redistributor (Arm IHI 0069, "Affinity routing").
//!   SPIs go where `GICD_IROUTER<n>` says: the vCPU whose MPIDR affinity
//!   matches Aff3.Aff2.Aff1.Aff0 (none if no vCPU does: the SPI stays
//!   pending), or with IRM = 1 any one of the vCPUs that participate in
//!   1-of-N distribution, which here are those whose GICR_WAKER has
//!   ProcessorSleep clear.
//! - **No LPIs, ITS, message-based SPIs, extended SPI/PPI ranges or NMIs**
//!   (GICD_TYPER.LPIS = MBIS = ESPI = NMI = 0, GICR_TYPER.PLPIS = VLPIS =
//!   0, so each redistributor is two 64 KiB frames), and the optional
//!   GICD_STATUSR/GICR_STATUSR are RAZ/WI.
//! - `spis` SPIs (INTIDs 32..32 + spis), a multiple of 32 up to 960, or
//!   988 for the whole range up to INTID 1019; GICD_TYPER.ITLinesNumber
//!   is `ceil(spis / 32)`, IDbits is 15 (16-bit INTIDs), A3V is 1, No1N 0
//!   (1-of-N supported), RSS 0, CPUNumber 0 (meaningless with ARE).
//! - SGIs are always edge-triggered (GICR_ICFGR0 reads 0xaaaa_aaaa and
//!   ignores writes); PPIs and SPIs reset level-sensitive and are
//!   configurable. All priorities reset to 0, all interrupts disabled,
//!   inactive, not pending, every `GICD_IROUTER<n>` to 0 (vCPU 0 in the
//!   usual numbering), every redistributor asleep (GICR_WAKER
//!   ProcessorSleep and ChildrenAsleep set).
//! - GICD_CTLR.RWP and GICR_CTLR.RWP read 0: every write takes effect
//!   before the access completes.
//!
//! # Register accesses
//!
//! Accesses may be 32-bit to any register, 8-bit to the byte-wide
//! IPRIORITYR and ITARGETSR-class registers, and 64-bit or 32-bit (either
//! half) to the 64-bit `GICD_IROUTER<n>` and GICR_TYPER (Arm IHI 0069, "GIC
//! memory-mapped register access"). The outcome of anything else is a
//! [`VgicError`], and the model's state is unchanged (a read's value is
//! zero):
//! - [`VgicError::Ignored`] for reserved offsets (nothing implemented
//!   there, or beyond the last vCPU's redistributor), writes to read-only
//!   registers and reads of write-only ones. A GIC makes these RAZ/WI
//!   silently, and so should the caller: complete the access (a load
//!   gets 0), skip the instruction, perhaps log ([`VgicError::aborts`] is
//!   false);
//! - [`VgicError::UnsupportedSize`] and [`VgicError::Misaligned`] for a
//!   size the register does not take (or not 1, 2, 4, 8) and an access
//!   not aligned to its size. The architecture gives these no defined
//!   result; the caller injects a synchronous external abort, as the
//!   PL011 model's callers do for its bad sizes ([`VgicError::aborts`] is
//!   true).
//!
//! # Interrupt state
//!
//! Each interrupt has an enable, a group, a priority, an edge/level
//! configuration, an active bit, a pending latch (an edge seen on its
//! input, or a write to ISPENDR) and, for PPIs and SPIs, the level of its
//! input line. A level-sensitive interrupt is pending while its line is
//! high or its latch is set; an edge-triggered one while its latch is set
//! (Arm IHI 0069, "Interrupt handling state machine"). SGIs and PPIs
//! exist once per vCPU; SPIs once per VM.
//!
//! Every register read, enable, fill and fold answers from the line as
//! the caller last drove it ([`VGic::set_level`]), so the caller drives
//! each line before the guest can look: the emulated PL011 at every access
//! that changes its interrupt (`el2::run::devices::uart_line_follow`); the
//! virtual timer, whose guest changes it without a trap, is sampled by the
//! runner before every refill, before every GIC register access, when its
//! vCPU is put and, for a vCPU off its pCPU, when another vCPU accesses its
//! redistributor (`el2::devices::vtimer`). Between two samples the latch
//! and the list registers keep nothing a dropped line would leave behind:
//! a level-sensitive entry read back still pending returns only its latch
//! to the model, never its line.
//!
//! # Delivery through the list registers
//!
//! The caller keeps this contract for each vCPU:
//! 1. before entering it, [`VGic::fill`] its list registers and write
//!    [`ListRegisters::values`] to all of `ICH_LR<n>_EL2`; if
//!    [`VGic::underflow_needed`], enable the maintenance interrupt that
//!    asks for a refill (ICH_HCR_EL2.UIE, or NPIE);
//! 2. after it exits, read back the `ICH_LR<n>_EL2` that `fill` filled and
//!    give them, decoded, to [`VGic::sync_back`].
//!
//! `fill` moves the pending state of the interrupts it picks into the
//! list registers ("in flight": no other vCPU gets them), and `sync_back`
//! folds what the guest did with them back into the model. The caller may
//! turn a filled entry into a hardware one before writing it
//! ([`ListRegisters::map_hardware`]: the virtual timer's, so that the
//! guest's deactivation also ends the physical PPI); the model folds it
//! back by its state like any other. For a PPI whose line such a physical
//! interrupt backs ([`VGic::set_hardware_line`]), an active entry never
//! carries the pending state its line gives: the physical interrupt
//! brings that back after the guest's deactivation, so the guest cannot
//! take a pending state its line dropped without a trap. Register
//! accesses and injections between the two see a consistent model; a
//! change made while the interrupt sits in a running vCPU's list register
//! is merged at `sync_back` (a new edge is kept, see
//! [`VGic::raise_edge`]), except the active state, which the list
//! register read back decides.
//!
//! # Waking vCPUs
//!
//! Injections return a [`VcpuMask`] of the vCPUs that now have an
//! interrupt to take that they did not have (a vCPU blocked in WFI is to
//! be woken; a running one holding the interrupt in its list registers may
//! be kicked out of the guest to see it sooner). Register writes, which
//! cannot return one, collect theirs for [`VGic::take_wakeups`].
//!
//! One `VGic` serves a whole VM and is not internally synchronised: the
//! caller keeps it behind a lock.

mod dist;
mod lr;
mod redist;
pub mod regs;
#[cfg(test)]
mod tests;

pub use lr::{ListRegisters, Lr, LrState, MAX_LIST_REGISTERS, VMCR, signalled_at_once};

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::ops::{BitOr, BitOrAssign};
use platform::Mpidr;
use regs::*;
use tock_registers::LocalRegisterCopy;

/// INTIDs 0..16 are SGIs; INTIDs 0..32 (SGIs and PPIs) are private to each
/// vCPU, and the SPIs start there.
pub use gic_regs::{PRIVATE_COUNT, SGI_COUNT};
/// The most SPIs: INTIDs 32..=1019 (1020..=1023 are special INTIDs).
pub const MAX_SPIS: u32 = gic_regs::SPI_COUNT;
/// The most vCPUs a `VGic` serves: the most a VM has
/// ([`platform::vm::MAX_VCPUS`]), and what a [`VcpuMask`] holds.
pub const MAX_VCPUS: usize = platform::vm::MAX_VCPUS as usize;

const _: () = assert!(MAX_VCPUS <= u64::BITS as usize);

/// The writable bits of `GICD_IROUTER<n>`: Aff3, Interrupt_Routing_Mode and
/// Aff2.Aff1.Aff0; the rest is RES0.
const ROUTER_WRITABLE: u64 = GICD_IROUTER::Aff3::SET.value
    | GICD_IROUTER::Interrupt_Routing_Mode::SET.value
    | GICD_IROUTER::Aff2::SET.value
    | GICD_IROUTER::Aff1::SET.value
    | GICD_IROUTER::Aff0::SET.value;
/// ICC_SGI1R_EL1.TargetList names one of 16 Aff0 values per bit.
const TARGET_LIST_BITS: u8 = 16;

/// A set of vCPU indices of one VM (`0..MAX_VCPUS`).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct VcpuMask(u64);

impl VcpuMask {
    /// No vCPU.
    pub const EMPTY: Self = Self(0);

    /// The set whose bit `i` names vCPU `i`.
    pub const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }

    /// Bit `i` set for vCPU `i`.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// Only `vcpu` (empty if it is out of range).
    pub const fn single(vcpu: u16) -> Self {
        if (vcpu as usize) < MAX_VCPUS {
            Self(1 << vcpu)
        } else {
            Self::EMPTY
        }
    }

    /// vCPUs `0..n` (`n` capped at [`MAX_VCPUS`]).
    pub const fn first_n(n: usize) -> Self {
        if n >= MAX_VCPUS {
            Self(u64::MAX >> (u64::BITS as usize - MAX_VCPUS))
        } else {
            Self((1 << n) - 1)
        }
    }

    /// Whether `vcpu` is a member.
    pub const fn contains(self, vcpu: u16) -> bool {
        (vcpu as usize) < MAX_VCPUS && self.0 & (1 << vcpu) != 0
    }

    /// Adds `vcpu` (no-op if out of range).
    pub fn insert(&mut self, vcpu: u16) {
        *self = self.union(Self::single(vcpu));
    }

    /// The set without `vcpu`.
    pub const fn without(self, vcpu: u16) -> Self {
        Self(self.0 & !Self::single(vcpu).0)
    }

    /// Members of either set.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Members of `self` that are not in `other`.
    pub const fn difference(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// Whether there is no member.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many members.
    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The members, lowest first.
    pub fn iter(self) -> impl Iterator<Item = u16> {
        let mut bits = self.0;
        core::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let vcpu = bits.trailing_zeros() as u16;
            bits &= bits - 1;
            Some(vcpu)
        })
    }
}

impl BitOr for VcpuMask {
    type Output = Self;
    fn bitor(self, other: Self) -> Self {
        self.union(other)
    }
}

impl BitOrAssign for VcpuMask {
    fn bitor_assign(&mut self, other: Self) {
        *self = self.union(other);
    }
}

impl fmt::Debug for VcpuMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// Why a [`VGic`] cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VgicConfigError {
    /// The vCPU count is 0 or above [`MAX_VCPUS`].
    Vcpus(u16),
    /// The SPI count is not a multiple of 32 up to 960, nor 988.
    Spis(u32),
    /// Two vCPUs have the same MPIDR affinity, so routing could not tell
    /// them apart.
    DuplicateMpidr { mpidr: u64, first: u16, second: u16 },
}

impl fmt::Display for VgicConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Vcpus(n) => write!(f, "{n} vCPUs: a vGIC serves 1 to {MAX_VCPUS}"),
            Self::Spis(n) => write!(
                f,
                "{n} SPIs: a vGIC has a multiple of 32 up to 960, or {MAX_SPIS}"
            ),
            Self::DuplicateMpidr {
                mpidr,
                first,
                second,
            } => write!(f, "vCPUs {first} and {second} share MPIDR {mpidr:#x}"),
        }
    }
}

/// A guest register access the model did not perform; see the module
/// documentation ("Register accesses") for what the caller does with it.
/// `offset` is the offset the caller passed (in the distributor frame, or
/// from the first redistributor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VgicError {
    /// Read as zero, write ignored, as the GIC itself does: a reserved or
    /// unimplemented offset, a write to a read-only register, a read of a
    /// write-only one. The caller completes the access.
    Ignored { offset: u64, size: u8, write: bool },
    /// A size that is not 1, 2, 4 or 8, or that the register does not take
    /// (see "Register accesses"). The caller injects an abort.
    UnsupportedSize { offset: u64, size: u8, write: bool },
    /// An access not aligned to its size. The caller injects an abort.
    Misaligned { offset: u64, size: u8, write: bool },
}

impl VgicError {
    /// Whether the caller should inject an abort into the guest rather
    /// than complete the access as read-as-zero / write-ignored.
    pub const fn aborts(&self) -> bool {
        !matches!(self, Self::Ignored { .. })
    }

    /// The offset of the access.
    pub const fn offset(&self) -> u64 {
        match *self {
            Self::Ignored { offset, .. }
            | Self::UnsupportedSize { offset, .. }
            | Self::Misaligned { offset, .. } => offset,
        }
    }
}

impl fmt::Display for VgicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, offset, size, write) = match *self {
            Self::Ignored {
                offset,
                size,
                write,
            } => ("ignored (RAZ/WI)", offset, size, write),
            Self::UnsupportedSize {
                offset,
                size,
                write,
            } => ("of an unsupported size", offset, size, write),
            Self::Misaligned {
                offset,
                size,
                write,
            } => ("misaligned", offset, size, write),
        };
        let kind = if write { "write" } else { "read" };
        write!(f, "{size}-byte {kind} at offset {offset:#x} {what}")
    }
}

/// Why an injection was refused (a hypervisor bug, not a guest's doing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectError {
    /// The INTID is not one of this vGIC's SGIs, PPIs or SPIs.
    NoSuchInterrupt { intid: u32 },
    /// The vCPU index is not one of this VM's.
    NoSuchVcpu { vcpu: u16 },
    /// SGIs have no input line ([`VGic::set_level`]); use
    /// [`VGic::send_sgi`] or [`VGic::raise_edge`].
    NoLine { intid: u32 },
}

impl fmt::Display for InjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSuchInterrupt { intid } => write!(f, "no interrupt {intid} in this vGIC"),
            Self::NoSuchVcpu { vcpu } => write!(f, "no vCPU {vcpu} in this vGIC"),
            Self::NoLine { intid } => write!(f, "SGI {intid} has no input line"),
        }
    }
}

/// A deliverable interrupt, as [`VGic::pending_for`] lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingIrq {
    /// Its INTID.
    pub intid: u32,
    /// Its priority (lower is more urgent).
    pub priority: u8,
    /// Group 1 rather than Group 0.
    pub group1: bool,
}

/// What a VM's virtual GIC delivered over a run, as the hypervisor
/// counts it (its end-of-run summary prints it with `Display`:
/// `sgis S timer T spi P maintenance M`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeliveryStats {
    /// SGI generation register writes by the VM's vCPUs.
    pub sgis: u64,
    /// Virtual timer interrupts injected.
    pub timer: u64,
    /// Rising edges of emulated devices' SPI lines.
    pub spi: u64,
    /// Maintenance interrupts taken (list-register refills and EOIs of
    /// level-sensitive interrupts).
    pub maintenance: u64,
}

impl fmt::Display for DeliveryStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sgis {} timer {} spi {} maintenance {}",
            self.sgis, self.timer, self.spi, self.maintenance
        )
    }
}

/// A snapshot of one interrupt, for diagnostics and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqStatus {
    /// GICD_ISENABLER / GICR_ISENABLER0 bit.
    pub enabled: bool,
    /// The pending state GICD_ISPENDR reads (including a pending state
    /// moved to a list register).
    pub pending: bool,
    /// GICD_ISACTIVER bit.
    pub active: bool,
    /// GICD_IPRIORITYR byte.
    pub priority: u8,
    /// Group 1 rather than Group 0.
    pub group1: bool,
    /// Edge-triggered rather than level-sensitive.
    pub edge: bool,
    /// The level of its input line (always low for an SGI).
    pub line: bool,
    /// The vCPU whose list registers hold it, if any.
    pub in_lr: Option<u16>,
}

/// What [`VGic::fill`] moved into a list register, to fold back later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InLr {
    /// The vCPU whose list register holds it.
    vcpu: u16,
    /// The entry was filled with a pending state.
    pending: bool,
    /// That pending state included the latch (an edge, an ISPENDR write),
    /// which was cleared in the model when it moved.
    latch: bool,
}

/// The state of one interrupt (one per vCPU for an SGI or PPI).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Irq {
    enabled: bool,
    /// Edge seen or ISPENDR written, not yet acknowledged or cleared.
    latch: bool,
    /// Input level (PPIs and SPIs).
    line: bool,
    active: bool,
    /// Edge-triggered (ICFGR Int_config = 1).
    edge: bool,
    group1: bool,
    priority: u8,
    in_lr: Option<InLr>,
}

impl Irq {
    const fn reset(edge: bool) -> Self {
        Self {
            enabled: false,
            latch: false,
            line: false,
            active: false,
            edge,
            group1: true,
            priority: 0,
            in_lr: None,
        }
    }

    /// Pending in the model: the latch, or a level-sensitive line held
    /// high (Arm IHI 0069, "Interrupt handling state machine": a
    /// level-sensitive interrupt is pending while its input is asserted).
    const fn pending(&self) -> bool {
        self.latch || (!self.edge && self.line)
    }

    /// The pending state registers read: the model's, or the latch that
    /// went to a list register.
    const fn pending_view(&self) -> bool {
        self.pending() || matches!(self.in_lr, Some(InLr { latch: true, .. }))
    }
}

/// Routing of one SPI.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Route {
    /// `GICD_IROUTER<n>`, RES0 bits clear.
    router: u64,
    /// The vCPU whose affinity matches (IRM = 0).
    target: Option<u16>,
    /// The vCPU that acknowledged it, while it is active.
    active_on: Option<u16>,
}

/// Which interrupts a register's bits describe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bank {
    /// The distributor's view: SPIs only; INTIDs below 32 are RAZ/WI.
    Spi,
    /// One vCPU's redistributor: its SGIs and PPIs.
    Private(u16),
}

/// The one-bit-per-interrupt register families.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BitReg {
    Group,
    SetEnable,
    ClearEnable,
    SetPending,
    ClearPending,
    SetActive,
    ClearActive,
}

/// A decoded register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reg {
    /// Architecturally RAZ/WI in this configuration.
    RazWi,
    /// Read-only with this value; writes are reported as ignored.
    ReadOnly(u64),
    /// One bit per interrupt from the INTID given.
    Bits(BitReg, Bank, u32),
    /// One priority byte per interrupt from the INTID given.
    Priority(Bank, u32),
    /// Two configuration bits per interrupt from the INTID given.
    Config(Bank, u32),
    /// GICD_CTLR.
    GicdCtlr,
    /// `GICD_IROUTER<n>` of this INTID.
    Router(u32),
    /// This vCPU's GICR_WAKER.
    Waker(u16),
}

/// Which access sizes a register takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Width {
    /// 32-bit only.
    Word,
    /// 8-bit or 32-bit.
    ByteOrWord,
    /// 64-bit, or 32-bit to either half.
    DoubleOrWord,
}

impl Width {
    const fn allows(self, size: u8) -> bool {
        matches!(
            (self, size),
            (_, 4) | (Self::ByteOrWord, 1) | (Self::DoubleOrWord, 8)
        )
    }
}

/// A register found at an offset: what it is, the sizes it takes, and
/// the offset of its first byte (for the byte lanes of a wider register).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Decoded {
    reg: Reg,
    width: Width,
    base: u64,
}

impl Decoded {
    const fn new(reg: Reg, width: Width, base: u64) -> Self {
        Self { reg, width, base }
    }
}

/// One guest access, for error reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Access {
    offset: u64,
    size: u8,
    write: bool,
}

impl Access {
    /// Checks the size (1, 2, 4, 8) and the alignment of `frame_offset`
    /// (frames are 64 KiB aligned, so this is also the address's).
    fn check(self, frame_offset: u64) -> Result<Self, VgicError> {
        if !matches!(self.size, 1 | 2 | 4 | 8) {
            return Err(self.unsupported());
        }
        if !frame_offset.is_multiple_of(u64::from(self.size)) {
            return Err(VgicError::Misaligned {
                offset: self.offset,
                size: self.size,
                write: self.write,
            });
        }
        Ok(self)
    }

    const fn ignored(self) -> VgicError {
        VgicError::Ignored {
            offset: self.offset,
            size: self.size,
            write: self.write,
        }
    }

    const fn unsupported(self) -> VgicError {
        VgicError::UnsupportedSize {
            offset: self.offset,
            size: self.size,
            write: self.write,
        }
    }

    /// The bits an access of this size carries.
    const fn mask(self) -> u64 {
        match self.size {
            8.. => u64::MAX,
            size => (1 << (size as u32 * 8)) - 1,
        }
    }
}

/// An interrupt that may go into a list register, with its sort key:
/// active ones first (the guest must find them to deactivate them), then
/// by priority, then by INTID.
#[derive(Clone, Copy, Debug, Default)]
struct Candidate {
    key: (bool, u8, u32),
    slot: usize,
    state: LrState,
}

/// The virtual GICv3 of one VM; see the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VGic {
    /// MPIDR affinity of each vCPU, by index.
    mpidrs: Vec<u64>,
    spis: u32,
    /// Each vCPU's 32 private interrupts, vCPU by vCPU, then the SPIs.
    irqs: Vec<Irq>,
    /// Routing of each SPI.
    routes: Vec<Route>,
    enable_grp0: bool,
    enable_grp1: bool,
    /// vCPUs whose GICR_WAKER.ProcessorSleep is clear.
    awake: VcpuMask,
    /// vCPUs register writes made something deliverable to.
    wakeups: VcpuMask,
    /// The PPIs whose line a physical interrupt backs (bit `intid`):
    /// [`VGic::set_hardware_line`].
    hardware_lines: u32,
}

impl VGic {
    /// A vGIC in its reset state for `vcpus` vCPUs, where vCPU `i` has the
    /// MPIDR_EL1 `mpidr(i)` (only its affinity fields count; for this
    /// hypervisor's VMs, `guest::layout::vcpu_mpidr(i).value()`), and
    /// `spis` SPIs: a multiple of 32 up to 960, or [`MAX_SPIS`].
    pub fn new(vcpus: u16, spis: u32, mpidr: impl Fn(u16) -> u64) -> Result<Self, VgicConfigError> {
        if vcpus == 0 || usize::from(vcpus) > MAX_VCPUS {
            return Err(VgicConfigError::Vcpus(vcpus));
        }
        if !(spis == MAX_SPIS || (spis.is_multiple_of(32) && spis < MAX_SPIS)) {
            return Err(VgicConfigError::Spis(spis));
        }
        let mpidrs: Vec<u64> = (0..vcpus)
            .map(|i| mpidr(i) & Mpidr::AFFINITY_MASK)
            .collect();
        for (second, &m) in mpidrs.iter().enumerate() {
            if let Some(first) = mpidrs[..second].iter().position(|&other| other == m) {
                return Err(VgicConfigError::DuplicateMpidr {
                    mpidr: m,
                    first: first as u16,
                    second: second as u16,
                });
            }
        }
        Ok(Self::reset_state(mpidrs, spis))
    }

    fn reset_state(mpidrs: Vec<u64>, spis: u32) -> Self {
        let vcpus = mpidrs.len();
        let mut irqs = Vec::with_capacity(vcpus * PRIVATE_COUNT as usize + spis as usize);
        for _ in 0..vcpus {
            // SGIs are always edge-triggered; PPIs reset level-sensitive.
            irqs.extend((0..PRIVATE_COUNT).map(|intid| Irq::reset(intid < SGI_COUNT)));
        }
        irqs.extend((0..spis).map(|_| Irq::reset(false)));
        let mut gic = Self {
            mpidrs,
            spis,
            irqs,
            routes: vec![Route::default(); spis as usize],
            enable_grp0: false,
            enable_grp1: false,
            awake: VcpuMask::EMPTY,
            wakeups: VcpuMask::EMPTY,
            hardware_lines: 0,
        };
        let target = gic.vcpu_by_affinity(0);
        for route in &mut gic.routes {
            route.target = target;
        }
        gic
    }

    /// Returns every register and interrupt to its reset state (a VM
    /// reset); input lines go low too, so devices re-assert theirs. Which
    /// lines a physical interrupt backs stays.
    pub fn reset(&mut self) {
        let hardware_lines = self.hardware_lines;
        *self = Self::reset_state(core::mem::take(&mut self.mpidrs), self.spis);
        self.hardware_lines = hardware_lines;
    }

    /// Marks the line of PPI `intid` (of every vCPU) as backed by a
    /// physical interrupt that the caller hands to the guest through
    /// hardware list register entries ([`ListRegisters::map_hardware`]):
    /// the virtual timer's. While such an interrupt is active, the pending
    /// state its line gives it is the physical interrupt's to bring back
    /// (it fires again once the guest's deactivation ends it, the line
    /// still high), so [`Self::fill`] gives it an Active entry, which a
    /// hardware entry can carry, and not a pending and active one, whose
    /// pending part the guest could take after its line dropped without a
    /// trap. A latched pending state (a GICR_ISPENDR0 write) still goes in.
    pub fn set_hardware_line(&mut self, intid: u32) -> Result<(), InjectError> {
        if !(SGI_COUNT..PRIVATE_COUNT).contains(&intid) {
            return Err(InjectError::NoSuchInterrupt { intid });
        }
        self.hardware_lines |= 1 << intid;
        Ok(())
    }

    /// How many vCPUs.
    pub fn vcpus(&self) -> u16 {
        self.mpidrs.len() as u16
    }

    /// How many SPIs.
    pub fn spis(&self) -> u32 {
        self.spis
    }

    /// The MPIDR affinity of `vcpu`.
    pub fn mpidr(&self, vcpu: u16) -> Option<u64> {
        self.mpidrs.get(usize::from(vcpu)).copied()
    }

    /// The vCPUs that register writes since the last call made an
    /// interrupt deliverable to; call it after every [`Self::dist_write`]
    /// and [`Self::redist_write`].
    pub fn take_wakeups(&mut self) -> VcpuMask {
        core::mem::take(&mut self.wakeups)
    }

    // Injection.

    /// Drives the input line of PPI `intid` of `vcpu`, or of SPI `intid`
    /// (`vcpu` is then ignored): the virtual timer (PPI 27), an emulated
    /// device's SPI (the PL011's SPI 1, INTID 33). A level-sensitive
    /// interrupt is pending while the line is high; an edge-triggered one
    /// latches a rising edge. Returns the vCPUs to wake.
    pub fn set_level(
        &mut self,
        intid: u32,
        vcpu: u16,
        level: bool,
    ) -> Result<VcpuMask, InjectError> {
        if intid < SGI_COUNT {
            return Err(InjectError::NoLine { intid });
        }
        let slot = self.inject_slot(intid, vcpu)?;
        Ok(self.change(slot, |g| {
            if let Some(irq) = g.irqs.get_mut(slot) {
                if irq.edge && level && !irq.line {
                    irq.latch = true;
                }
                irq.line = level;
            }
        }))
    }

    /// An edge on interrupt `intid` (of `vcpu` for an SGI or PPI; `vcpu` is
    /// ignored for an SPI): it becomes pending until acknowledged, however
    /// many edges come before that. For a level-sensitive interrupt this
    /// sets the pending latch, as a GICD_ISPENDR write does, so the event
    /// is not lost. Returns the vCPUs to wake.
    pub fn raise_edge(&mut self, intid: u32, vcpu: u16) -> Result<VcpuMask, InjectError> {
        let slot = self.inject_slot(intid, vcpu)?;
        Ok(self.change(slot, |g| {
            if let Some(irq) = g.irqs.get_mut(slot) {
                irq.latch = true;
            }
        }))
    }

    /// A write of `sgi1r` to ICC_SGI1R_EL1 by vCPU `from`: SGI INTID
    /// (bits 27:24) to every vCPU but `from` if IRM (bit 40) is set, else
    /// to the vCPUs of cluster Aff3.Aff2.Aff1 (bits 55:48, 39:32, 23:16)
    /// whose Aff0 is `RS * 16 + i` (RS bits 47:44) for each TargetList bit
    /// `i` (bits 15:0) set. Target list entries that match no vCPU are
    /// ignored. The SGI is Group 1: with a single Security state a target
    /// whose copy of that SGI is configured as Group 0 does not get it
    /// (Arm IHI 0069, "ICC_SGI1R_EL1, Interrupt Controller Software
    /// Generated Interrupt Group 1 Register", and the forwarding rules for
    /// SGIs). Returns the vCPUs to wake.
    pub fn send_sgi(&mut self, from: u16, sgi1r: u64) -> Result<VcpuMask, InjectError> {
        if usize::from(from) >= self.mpidrs.len() {
            return Err(InjectError::NoSuchVcpu { vcpu: from });
        }
        use ICC_SGI1R_EL1 as S;
        let sgi1r = LocalRegisterCopy::<u64, S::Register>::new(sgi1r);
        let intid = sgi1r.read(S::INTID) as u32;
        let targets = if sgi1r.is_set(S::IRM) {
            VcpuMask::first_n(self.mpidrs.len()).without(from)
        } else {
            let aff = |field| sgi1r.read(field) as u8;
            let (aff3, aff2, aff1) = (aff(S::Aff3), aff(S::Aff2), aff(S::Aff1));
            // TargetList bit `i` is Aff0 RS * 16 + i.
            let first = sgi1r.read(S::RS) * u64::from(TARGET_LIST_BITS);
            let list = sgi1r.read(S::TargetList);
            let mut targets = VcpuMask::EMPTY;
            for bit in 0..TARGET_LIST_BITS {
                let aff0 = (first + u64::from(bit)) as u8;
                let mpidr = Mpidr::from_affinity(aff3, aff2, aff1, aff0).value();
                if list & (1 << bit) != 0
                    && let Some(vcpu) = self.vcpu_by_affinity(mpidr)
                {
                    targets.insert(vcpu);
                }
            }
            targets
        };
        let mut woken = VcpuMask::EMPTY;
        for vcpu in targets.iter() {
            let Some(slot) = self.private_slot(vcpu, intid) else {
                continue;
            };
            if self.irqs.get(slot).is_some_and(|irq| irq.group1) {
                woken |= self.change(slot, |g| {
                    if let Some(irq) = g.irqs.get_mut(slot) {
                        irq.latch = true;
                    }
                });
            }
        }
        Ok(woken)
    }

    // Delivery.

    /// The interrupts deliverable to `vcpu` and not in a list register:
    /// enabled, pending, not active, their group enabled in GICD_CTLR, and
    /// targeting `vcpu`; most urgent first (lower priority value, then
    /// lower INTID). The CPU interface's own masks (ICH_VMCR_EL2: the
    /// priority mask, the group enables) are the caller's to apply.
    pub fn pending_for(&self, vcpu: u16) -> Vec<PendingIrq> {
        let mut list: Vec<PendingIrq> = self
            .slots_of(vcpu)
            .filter(|&slot| self.deliverable_to(slot, vcpu))
            .filter_map(|slot| {
                let irq = self.irqs.get(slot)?;
                Some(PendingIrq {
                    intid: self.intid_of(slot),
                    priority: irq.priority,
                    group1: irq.group1,
                })
            })
            .collect();
        list.sort_unstable_by_key(|p| (p.priority, p.intid));
        list
    }

    /// Whether `vcpu` has an interrupt to take: one [`Self::pending_for`]
    /// lists, or one its list registers hold in the pending state. This is
    /// what wakes a vCPU blocked in WFI and what the directed-yield rule
    /// calls a pending virtual interrupt.
    pub fn has_pending(&self, vcpu: u16) -> bool {
        self.slots_of(vcpu).any(|slot| {
            self.deliverable_to(slot, vcpu)
                || self.irqs.get(slot).is_some_and(|irq| {
                    matches!(irq.in_lr, Some(InLr { vcpu: v, pending: true, .. }) if v == vcpu)
                })
        })
    }

    /// Fills up to `n` (at most [`MAX_LIST_REGISTERS`]) list registers of
    /// `vcpu` for its next run: first the interrupts active on it (so the
    /// guest can deactivate them; with their pending state if pending
    /// again), then [`Self::pending_for`] in order. The pending state of
    /// each goes into its list register: no other vCPU gets the interrupt
    /// until [`Self::sync_back`]. Level-sensitive entries ask for an EOI
    /// maintenance interrupt, so the hypervisor learns when the guest
    /// deactivates one and can re-pend it if its line is still high.
    ///
    /// Anything still in `vcpu`'s list registers from an earlier `fill`
    /// without a `sync_back` is taken back first, as if read back
    /// unchanged.
    pub fn fill(&mut self, vcpu: u16, n: usize) -> ListRegisters {
        let mut lrs = ListRegisters::default();
        if usize::from(vcpu) >= self.mpidrs.len() {
            return lrs;
        }
        let woken = self.release_lrs(vcpu);
        self.wakeups |= woken;
        let n = n.min(MAX_LIST_REGISTERS);
        if n == 0 {
            return lrs;
        }
        // The n best candidates, sorted, without allocating.
        let mut best = [Candidate::default(); MAX_LIST_REGISTERS];
        let mut len = 0;
        for slot in self.slots_of(vcpu) {
            let Some(candidate) = self.lr_candidate(slot, vcpu) else {
                continue;
            };
            if len == n {
                if best[n - 1].key <= candidate.key {
                    continue;
                }
                len -= 1;
            }
            let mut i = len;
            while i > 0 && best[i - 1].key > candidate.key {
                best[i] = best[i - 1];
                i -= 1;
            }
            best[i] = candidate;
            len += 1;
        }
        for candidate in &best[..len] {
            let intid = self.intid_of(candidate.slot);
            let Some(irq) = self.irqs.get_mut(candidate.slot) else {
                continue;
            };
            let pending = candidate.state.is_pending();
            irq.in_lr = Some(InLr {
                vcpu,
                pending,
                latch: pending && irq.latch,
            });
            if pending {
                irq.latch = false;
            }
            lrs.push(Lr {
                intid,
                state: candidate.state,
                priority: irq.priority,
                group1: irq.group1,
                physical: None,
                eoi_maintenance: pending && !irq.edge,
            });
        }
        lrs
    }

    /// Folds the list registers of `vcpu`, read back after it ran, into the
    /// model: `lrs` are the entries [`Self::fill`] filled, decoded from
    /// `ICH_LR<n>_EL2` (entries for interrupts `fill` did not give this vCPU
    /// are ignored; any it gave that are missing count as unchanged). Per
    /// entry:
    /// - still pending (Pending, PendingActive): not acknowledged; the
    ///   pending state returns to the model (merged with any edge raised
    ///   meanwhile: pending once);
    /// - not pending (Active, Invalid): acknowledged; an edge raised while
    ///   it was in the list register leaves it pending again, and a
    ///   level-sensitive interrupt is pending again while its line is high;
    /// - active (Active, PendingActive) stays active on this vCPU; Invalid
    ///   or Pending is inactive: the guest deactivated it.
    ///
    /// Returns the other vCPUs to wake: an interrupt the guest left pending
    /// may be routed elsewhere now.
    pub fn sync_back(&mut self, vcpu: u16, lrs: &[Lr]) -> VcpuMask {
        if usize::from(vcpu) >= self.mpidrs.len() {
            return VcpuMask::EMPTY;
        }
        let mut woken = VcpuMask::EMPTY;
        for lr in lrs {
            let Some(slot) = self.slot(lr.intid, vcpu) else {
                continue;
            };
            let Some(in_lr) = self.irqs.get(slot).and_then(|irq| irq.in_lr) else {
                continue;
            };
            if in_lr.vcpu != vcpu {
                continue;
            }
            let (pending, active) = (lr.state.is_pending(), lr.state.is_active());
            woken |= self.change(slot, |g| g.fold(slot, in_lr, pending, active));
        }
        woken |= self.release_lrs(vcpu);
        woken.without(vcpu)
    }

    /// Whether interrupts for `vcpu` wait outside its list registers (more
    /// than [`Self::fill`] could place): the caller enables the
    /// maintenance interrupt that fires when the guest has consumed its
    /// list registers (ICH_HCR_EL2.UIE, or NPIE), to exit and refill.
    pub fn underflow_needed(&self, vcpu: u16) -> bool {
        self.slots_of(vcpu)
            .any(|slot| self.lr_candidate(slot, vcpu).is_some())
    }

    // Inspection.

    /// The state of interrupt `intid` (of `vcpu` for an SGI or PPI).
    pub fn irq_status(&self, intid: u32, vcpu: u16) -> Option<IrqStatus> {
        let irq = self.irqs.get(self.slot(intid, vcpu)?)?;
        Some(IrqStatus {
            enabled: irq.enabled,
            pending: irq.pending_view(),
            active: irq.active,
            priority: irq.priority,
            group1: irq.group1,
            edge: irq.edge,
            line: irq.line,
            in_lr: irq.in_lr.map(|l| l.vcpu),
        })
    }

    /// The vCPUs SPI `intid` is routed to now: the one `GICD_IROUTER<n>`
    /// names (none if no vCPU has that affinity), or with IRM every vCPU
    /// participating in 1-of-N distribution.
    pub fn spi_targets(&self, intid: u32) -> Option<VcpuMask> {
        Some(self.targets(self.spi_slot(intid)?))
    }

    // Slots: index into `irqs`.

    fn private_end(&self) -> usize {
        self.mpidrs.len() * PRIVATE_COUNT as usize
    }

    fn private_slot(&self, vcpu: u16, intid: u32) -> Option<usize> {
        (usize::from(vcpu) < self.mpidrs.len() && intid < PRIVATE_COUNT)
            .then(|| usize::from(vcpu) * PRIVATE_COUNT as usize + intid as usize)
    }

    fn spi_slot(&self, intid: u32) -> Option<usize> {
        let index = intid.checked_sub(PRIVATE_COUNT)?;
        (index < self.spis).then(|| self.private_end() + index as usize)
    }

    /// The slot of `intid`: `vcpu`'s copy for an SGI or PPI.
    fn slot(&self, intid: u32, vcpu: u16) -> Option<usize> {
        if intid < PRIVATE_COUNT {
            self.private_slot(vcpu, intid)
        } else {
            self.spi_slot(intid)
        }
    }

    fn bank_slot(&self, bank: Bank, intid: u32) -> Option<usize> {
        match bank {
            Bank::Spi => self.spi_slot(intid),
            Bank::Private(vcpu) => self.private_slot(vcpu, intid),
        }
    }

    fn inject_slot(&self, intid: u32, vcpu: u16) -> Result<usize, InjectError> {
        if intid < PRIVATE_COUNT && usize::from(vcpu) >= self.mpidrs.len() {
            return Err(InjectError::NoSuchVcpu { vcpu });
        }
        self.slot(intid, vcpu)
            .ok_or(InjectError::NoSuchInterrupt { intid })
    }

    /// The index into `routes` of an SPI's slot.
    fn spi_index(&self, slot: usize) -> Option<usize> {
        slot.checked_sub(self.private_end())
    }

    fn intid_of(&self, slot: usize) -> u32 {
        match self.spi_index(slot) {
            Some(index) => PRIVATE_COUNT + index as u32,
            None => (slot % PRIVATE_COUNT as usize) as u32,
        }
    }

    /// Every slot that can concern `vcpu`: its private bank, then the SPIs.
    fn slots_of(&self, vcpu: u16) -> impl Iterator<Item = usize> + use<> {
        let bank = match self.private_slot(vcpu, 0) {
            Some(first) => first..first + PRIVATE_COUNT as usize,
            None => 0..0,
        };
        let spis = self.private_end()..self.irqs.len();
        bank.chain(spis)
    }

    fn vcpu_by_affinity(&self, affinity: u64) -> Option<u16> {
        self.mpidrs
            .iter()
            .position(|&m| m == affinity & Mpidr::AFFINITY_MASK)
            .map(|i| i as u16)
    }

    // Delivery rules.

    fn group_enabled(&self, group1: bool) -> bool {
        if group1 {
            self.enable_grp1
        } else {
            self.enable_grp0
        }
    }

    /// The vCPUs the interrupt in `slot` would go to if deliverable.
    fn targets(&self, slot: usize) -> VcpuMask {
        let Some(index) = self.spi_index(slot) else {
            return VcpuMask::single((slot / PRIVATE_COUNT as usize) as u16);
        };
        match self.routes.get(index) {
            // 1-of-N: any participating PE (Arm IHI 0069, "GICD_IROUTER<n>,
            // Interrupt Routing Registers"); a PE whose redistributor is
            // asleep does not participate.
            Some(route) if GICD_IROUTER::Interrupt_Routing_Mode.is_set(route.router) => self.awake,
            Some(route) => route.target.map_or(VcpuMask::EMPTY, VcpuMask::single),
            None => VcpuMask::EMPTY,
        }
    }

    /// Whether the interrupt in `slot` is deliverable to `vcpu` and not
    /// already in a list register.
    fn deliverable_to(&self, slot: usize, vcpu: u16) -> bool {
        self.irqs.get(slot).is_some_and(|irq| {
            irq.in_lr.is_none()
                && irq.enabled
                && self.group_enabled(irq.group1)
                && irq.pending()
                && !irq.active
        }) && self.targets(slot).contains(vcpu)
    }

    /// What [`Self::fill`] would put in a list register of `vcpu` for
    /// `slot` (`slot` being `vcpu`'s own or an SPI).
    fn lr_candidate(&self, slot: usize, vcpu: u16) -> Option<Candidate> {
        let irq = self.irqs.get(slot)?;
        if irq.in_lr.is_some() {
            return None;
        }
        let deliverable = irq.enabled && self.group_enabled(irq.group1);
        let forwardable = deliverable && irq.pending();
        let active_here = irq.active
            && match self.spi_index(slot) {
                Some(index) => self
                    .routes
                    .get(index)
                    .is_some_and(|r| r.active_on == Some(vcpu)),
                None => true,
            };
        let intid = self.intid_of(slot);
        if active_here {
            // An active interrupt whose line a physical one backs is
            // pending again through that one (`Self::set_hardware_line`).
            let hardware_line =
                self.spi_index(slot).is_none() && self.hardware_lines & 1 << intid != 0;
            let pending = if hardware_line {
                deliverable && irq.latch
            } else {
                forwardable
            };
            Some(Candidate {
                key: (false, irq.priority, intid),
                slot,
                state: LrState::new(pending, true),
            })
        } else if forwardable && !irq.active && self.targets(slot).contains(vcpu) {
            Some(Candidate {
                key: (true, irq.priority, intid),
                slot,
                state: LrState::Pending,
            })
        } else {
            None
        }
    }

    /// The vCPUs that should hear about the interrupt in `slot` now: its
    /// targets while it is deliverable, or, while it sits in a list
    /// register, that vCPU if it has become pending again outside it (an
    /// edge raised meanwhile, a level line that rose after the entry was
    /// filled without a pending state).
    fn signal(&self, slot: usize) -> VcpuMask {
        let Some(irq) = self.irqs.get(slot) else {
            return VcpuMask::EMPTY;
        };
        if !irq.enabled || !self.group_enabled(irq.group1) {
            return VcpuMask::EMPTY;
        }
        match irq.in_lr {
            Some(lr) if irq.latch || (!irq.edge && irq.line && !lr.pending) => {
                VcpuMask::single(lr.vcpu)
            }
            Some(_) => VcpuMask::EMPTY,
            None if irq.active || !irq.pending() => VcpuMask::EMPTY,
            None => self.targets(slot),
        }
    }

    /// Applies `f` and returns the vCPUs the interrupt in `slot` newly
    /// signals.
    fn change(&mut self, slot: usize, f: impl FnOnce(&mut Self)) -> VcpuMask {
        let before = self.signal(slot);
        f(self);
        self.signal(slot).difference(before)
    }

    /// As [`Self::change`], for a change that may concern every interrupt.
    fn change_all(&mut self, f: impl FnOnce(&mut Self)) -> VcpuMask {
        let before: Vec<VcpuMask> = (0..self.irqs.len()).map(|s| self.signal(s)).collect();
        f(self);
        before
            .iter()
            .enumerate()
            .fold(VcpuMask::EMPTY, |woken, (slot, &was)| {
                woken | self.signal(slot).difference(was)
            })
    }

    /// Takes the interrupt in `slot` out of the list register described by
    /// `in_lr`, which now says `pending` and `active`.
    fn fold(&mut self, slot: usize, in_lr: InLr, pending: bool, active: bool) {
        let spi = self.spi_index(slot);
        if let Some(irq) = self.irqs.get_mut(slot) {
            irq.in_lr = None;
            if in_lr.pending && pending {
                // Not acknowledged: the latch that moved to the list
                // register comes back (a new edge meanwhile makes no
                // difference, pending is pending once).
                irq.latch |= in_lr.latch;
            }
            irq.active = active;
        }
        if let Some(route) = spi.and_then(|index| self.routes.get_mut(index)) {
            route.active_on = active.then_some(in_lr.vcpu);
        }
    }

    /// Takes back, unchanged, everything still in `vcpu`'s list registers.
    fn release_lrs(&mut self, vcpu: u16) -> VcpuMask {
        let mut woken = VcpuMask::EMPTY;
        for slot in self.slots_of(vcpu) {
            let Some(irq) = self.irqs.get(slot) else {
                continue;
            };
            if let Some(in_lr) = irq.in_lr
                && in_lr.vcpu == vcpu
            {
                let active = irq.active;
                woken |= self.change(slot, |g| g.fold(slot, in_lr, in_lr.pending, active));
            }
        }
        woken
    }

    // Register state shared by the distributor and the redistributors.

    fn read_register(&self, access: Access, decoded: Option<Decoded>) -> Result<u64, VgicError> {
        let Some(Decoded { reg, width, base }) = decoded else {
            return Err(access.ignored());
        };
        if !width.allows(access.size) {
            return Err(access.unsupported());
        }
        let value = match reg {
            Reg::RazWi => 0,
            Reg::ReadOnly(value) => value,
            Reg::Bits(kind, bank, first) => u64::from(self.read_bits(kind, bank, first)),
            Reg::Priority(bank, first) => (0..4).fold(0, |value, i| {
                let priority = self
                    .bank_slot(bank, first + i)
                    .and_then(|slot| self.irqs.get(slot))
                    .map_or(0, |irq| irq.priority);
                value | u64::from(priority) << (8 * i)
            }),
            Reg::Config(bank, first) => u64::from(self.read_config(bank, first)),
            Reg::GicdCtlr => u64::from(self.gicd_ctlr()),
            Reg::Router(intid) => self.router(intid),
            Reg::Waker(vcpu) => u64::from(self.gicr_waker(vcpu)),
        };
        // The byte lane or 32-bit half the access reads.
        let shift = access.offset.saturating_sub(base).min(7) * 8;
        Ok((value >> shift) & access.mask())
    }

    fn write_register(
        &mut self,
        access: Access,
        decoded: Option<Decoded>,
        value: u64,
    ) -> Result<(), VgicError> {
        let Some(Decoded { reg, width, base }) = decoded else {
            return Err(access.ignored());
        };
        if !width.allows(access.size) {
            return Err(access.unsupported());
        }
        let value = value & access.mask();
        let lane = access.offset.saturating_sub(base).min(7) as u32;
        match reg {
            Reg::RazWi => {}
            Reg::ReadOnly(_) => return Err(access.ignored()),
            Reg::Bits(kind, bank, first) => self.write_bits(kind, bank, first, value as u32),
            Reg::Priority(bank, first) => {
                for i in 0..u32::from(access.size) {
                    if let Some(slot) = self.bank_slot(bank, first + lane + i)
                        && let Some(irq) = self.irqs.get_mut(slot)
                    {
                        irq.priority = (value >> (8 * i)) as u8;
                    }
                }
            }
            Reg::Config(bank, first) => self.write_config(bank, first, value as u32),
            Reg::GicdCtlr => self.write_gicd_ctlr(value as u32),
            Reg::Router(intid) => {
                // A 32-bit access replaces one half of the 64-bit register.
                let shift = lane * 8;
                let keep = !(access.mask() << shift);
                let old = self.router(intid);
                self.write_router(intid, (old & keep) | (value << shift));
            }
            Reg::Waker(vcpu) => self.write_gicr_waker(vcpu, value as u32),
        }
        Ok(())
    }

    fn read_bits(&self, kind: BitReg, bank: Bank, first: u32) -> u32 {
        (0..32).fold(0, |value, bit| {
            let Some(irq) = self
                .bank_slot(bank, first + bit)
                .and_then(|slot| self.irqs.get(slot))
            else {
                return value;
            };
            let set = match kind {
                BitReg::Group => irq.group1,
                BitReg::SetEnable | BitReg::ClearEnable => irq.enabled,
                BitReg::SetPending | BitReg::ClearPending => irq.pending_view(),
                BitReg::SetActive | BitReg::ClearActive => irq.active,
            };
            value | u32::from(set) << bit
        })
    }

    /// A write to a one-bit-per-interrupt register. Set/clear registers act
    /// on the interrupts whose bit is 1 and ignore zeros (Arm IHI 0069,
    /// e.g. "`GICD_ISENABLER<n>`, Interrupt Set-Enable Registers"); the group
    /// register stores every bit.
    fn write_bits(&mut self, kind: BitReg, bank: Bank, first: u32, value: u32) {
        for bit in 0..32 {
            let one = value & (1 << bit) != 0;
            if !one && kind != BitReg::Group {
                continue;
            }
            let Some(slot) = self.bank_slot(bank, first + bit) else {
                continue;
            };
            let spi = self.spi_index(slot);
            let woken = self.change(slot, |g| {
                let Some(irq) = g.irqs.get_mut(slot) else {
                    return;
                };
                match kind {
                    BitReg::Group => irq.group1 = one,
                    BitReg::SetEnable => irq.enabled = true,
                    BitReg::ClearEnable => irq.enabled = false,
                    // For a level-sensitive interrupt this is the software
                    // latch; its line keeps it pending while high either
                    // way ("GICD_ICPENDR<n>, Interrupt Clear-Pending
                    // Registers").
                    BitReg::SetPending => irq.latch = true,
                    BitReg::ClearPending => {
                        irq.latch = false;
                        if let Some(lr) = &mut irq.in_lr {
                            lr.latch = false;
                        }
                    }
                    BitReg::SetActive => irq.active = true,
                    BitReg::ClearActive => {
                        irq.active = false;
                        if let Some(route) = spi.and_then(|index| g.routes.get_mut(index)) {
                            route.active_on = None;
                        }
                    }
                }
            });
            self.wakeups |= woken;
        }
    }

    /// Two bits per interrupt, Int_config in the odd one: 1 edge, 0 level;
    /// SGIs always read edge ("`GICD_ICFGR<n>`, Interrupt Configuration
    /// Registers").
    fn read_config(&self, bank: Bank, first: u32) -> u32 {
        (0..16).fold(0, |value, i| {
            let edge = self
                .bank_slot(bank, first + i)
                .and_then(|slot| self.irqs.get(slot))
                .is_some_and(|irq| irq.edge);
            value | u32::from(edge) << (2 * i + 1)
        })
    }

    fn write_config(&mut self, bank: Bank, first: u32, value: u32) {
        for i in 0..16 {
            let intid = first + i;
            if intid < SGI_COUNT {
                // SGI Int_config fields are read-only.
                continue;
            }
            let Some(slot) = self.bank_slot(bank, intid) else {
                continue;
            };
            let edge = value & (1 << (2 * i + 1)) != 0;
            let woken = self.change(slot, |g| {
                if let Some(irq) = g.irqs.get_mut(slot) {
                    irq.edge = edge;
                }
            });
            self.wakeups |= woken;
        }
    }

    fn gicd_ctlr(&self) -> u32 {
        let mut value = GICD_CTLR::ARE::SET + GICD_CTLR::DS::SET;
        if self.enable_grp0 {
            value += GICD_CTLR::EnableGrp0::SET;
        }
        if self.enable_grp1 {
            value += GICD_CTLR::EnableGrp1::SET;
        }
        value.value
    }

    /// Only the group enables are writable: ARE and DS are RAO/WI, E1NWF
    /// RAZ/WI, RWP read-only ("GICD_CTLR, Distributor Control Register").
    fn write_gicd_ctlr(&mut self, value: u32) {
        let grp0 = GICD_CTLR::EnableGrp0.is_set(value);
        let grp1 = GICD_CTLR::EnableGrp1.is_set(value);
        if (grp0, grp1) != (self.enable_grp0, self.enable_grp1) {
            let woken = self.change_all(|g| {
                g.enable_grp0 = grp0;
                g.enable_grp1 = grp1;
            });
            self.wakeups |= woken;
        }
    }

    /// `GICD_IROUTER<n>` of SPI `intid` (0 for an unimplemented one).
    fn router(&self, intid: u32) -> u64 {
        self.spi_slot(intid)
            .and_then(|slot| self.routes.get(self.spi_index(slot)?))
            .map_or(0, |route| route.router)
    }

    fn write_router(&mut self, intid: u32, value: u64) {
        let Some(slot) = self.spi_slot(intid) else {
            return;
        };
        let Some(index) = self.spi_index(slot) else {
            return;
        };
        let router = value & ROUTER_WRITABLE;
        let target = if GICD_IROUTER::Interrupt_Routing_Mode.is_set(router) {
            None
        } else {
            self.vcpu_by_affinity(router)
        };
        let woken = self.change(slot, |g| {
            if let Some(route) = g.routes.get_mut(index) {
                route.router = router;
                route.target = target;
            }
        });
        self.wakeups |= woken;
    }

    /// GICR_WAKER: ProcessorSleep as written, ChildrenAsleep following it
    /// at once, since the model has nothing in flight to quiesce (Arm IHI
    /// 0069, "GICR_WAKER, Redistributor Wake Register", and "Power
    /// management").
    fn gicr_waker(&self, vcpu: u16) -> u32 {
        if self.awake.contains(vcpu) {
            0
        } else {
            (GICR_WAKER::ProcessorSleep::SET + GICR_WAKER::ChildrenAsleep::SET).value
        }
    }

    fn write_gicr_waker(&mut self, vcpu: u16, value: u32) {
        let awake = !GICR_WAKER::ProcessorSleep.is_set(value);
        if awake != self.awake.contains(vcpu) {
            // Participation in 1-of-N distribution changes.
            let woken = self.change_all(|g| {
                g.awake = if awake {
                    g.awake | VcpuMask::single(vcpu)
                } else {
                    g.awake.without(vcpu)
                };
            });
            self.wakeups |= woken;
        }
    }
}
