//! The virtual GICv3 of one VM: its distributor and redistributor frames
//! at any offset, size and value, interrupts injected from every source,
//! and the list-register hand-off with whatever the guest leaves in them.
//!
//! Input layout:
//! 1. vCPUs: bit 7 clear, `1 + byte % 8`; set, `1 + byte % 64`;
//! 2. SPIs: 0xff for the most ([`MAX_SPIS`]), else `32 * (byte % 31)`;
//! 3. options: bit 0 reads one 8-byte MPIDR per vCPU (any duplicate must
//!    be refused, and the hypervisor's numbering is used instead); bit 1
//!    reads a raw vCPU count (2 bytes) and SPI count (4 bytes) that
//!    [`VGic::new`] must accept exactly when they are valid;
//! 4. operations until the input ends, each an opening byte whose value
//!    modulo 12 picks an [`Op`], then its operands:
//!    offsets ([`dist_offset`], [`redist_offset`]), sizes ([`size`]),
//!    values ([`value`]), vCPUs ([`vcpu`]), INTIDs ([`intid`]), SGI
//!    register values ([`sgi1r`]), list-register counts (a byte), and for
//!    a sync-back up to two list registers of garbage (a count byte, then
//!    8 bytes each) and the state the guest left in each filled list
//!    register (a byte each, [`LrState::from_bits`]).
//!
//! Invariants checked, as `vgic`'s documentation promises them:
//! - no access or call panics, whatever the offset, size, value, vCPU or
//!   INTID;
//! - an access of a size other than 1, 2, 4 or 8, or not aligned to its
//!   size, is an error asking for an abort; every error names the access;
//!   a failed write changes nothing (on models of at most
//!   [`SNAPSHOT_SLOTS`] interrupts); an accepted access is in an
//!   implemented frame and of a width its register takes; a read returns
//!   no more bits than its size;
//! - GICD_CTLR.ARE and DS read one, RWP zero; GICD_TYPER.ITLinesNumber
//!   is `ceil(spis / 32)`; GICR_ICFGR0 reads all SGIs edge-triggered;
//!   GICR_WAKER's ChildrenAsleep follows ProcessorSleep;
//! - every returned set of vCPUs to wake names only vCPUs of the VM, never
//!   the sender of an IRM SGI, never the vCPU a sync-back was for; a
//!   second [`VGic::take_wakeups`] is empty;
//! - injections are refused as documented: an SGI has no line, an INTID
//!   outside the vGIC or a private interrupt of a vCPU outside it names
//!   the culprit; a driven line reads back at its level, an edge leaves
//!   the interrupt pending;
//! - [`VGic::fill`] fills at most the list registers asked for (and
//!   [`MAX_LIST_REGISTERS`]), filled ones first, each interrupt once, with
//!   the model's priority and group, no hardware INTID, an EOI
//!   maintenance request exactly for pending level-sensitive entries, and
//!   records each as in flight on that vCPU; when it fills fewer than
//!   asked, nothing waits outside the list registers
//!   ([`VGic::underflow_needed`] is false); a vCPU outside the vGIC gets
//!   none; [`ListRegisters::values`] are the encoded entries, then zeros;
//! - after [`VGic::sync_back`], none of what `fill` gave that vCPU is
//!   still in flight;
//! - [`VGic::pending_for`] is sorted by priority then INTID and lists only
//!   enabled, pending, inactive interrupts outside the list registers, and
//!   a vCPU with one has [`VGic::has_pending`] (after every fourth
//!   operation: it walks every SPI);
//! - [`Lr::decode`] of a list register value is reproduced by encoding it
//!   and decoding again;
//! - [`VGic::reset`] gives exactly a new vGIC (on models of at most
//!   [`SNAPSHOT_SLOTS`] interrupts).

use alloc::vec;
use alloc::vec::Vec;

use super::input::Input;
use crate::devices::vgic::regs::*;
use crate::devices::vgic::{
    InjectError, ListRegisters, Lr, LrState, MAX_LIST_REGISTERS, MAX_SPIS, MAX_VCPUS,
    PRIVATE_COUNT, SGI_COUNT, VGic, VcpuMask, VgicConfigError, VgicError,
};
use crate::guest::layout::vcpu_mpidr;
use platform::Mpidr;

/// Most operations one input runs.
const MAX_OPERATIONS: usize = 256;

/// Largest model (vCPUs times 32, plus SPIs) compared whole with another:
/// that a refused write changed nothing, that a reset gives a new vGIC.
/// A comparison walks every interrupt, which on the largest models costs
/// more than the rest of an execution; the registers decode the same
/// whatever the model's size.
const SNAPSHOT_SLOTS: usize = 512;

/// The operations, by their opening byte modulo 12, with their operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Op {
    /// A distributor offset and a size.
    DistRead,
    /// A distributor offset, a size and a value.
    DistWrite,
    /// A redistributor offset and a size.
    RedistRead,
    /// A redistributor offset, a size and a value.
    RedistWrite,
    /// The sender's vCPU and an ICC_SGI1R_EL1 value.
    SendSgi,
    /// An INTID, a vCPU and a level byte (bit 0).
    SetLevel,
    /// An INTID and a vCPU.
    RaiseEdge,
    /// A vCPU and how many list registers (a byte, modulo 20).
    Fill,
    /// A vCPU, garbage list registers, and the state of each filled one.
    SyncBack,
    TakeWakeups,
    Reset,
    /// An INTID, a vCPU and a list-register value to decode.
    Inspect,
}

impl Op {
    const ALL: [Self; 12] = [
        Self::DistRead,
        Self::DistWrite,
        Self::RedistRead,
        Self::RedistWrite,
        Self::SendSgi,
        Self::SetLevel,
        Self::RaiseEdge,
        Self::Fill,
        Self::SyncBack,
        Self::TakeWakeups,
        Self::Reset,
        Self::Inspect,
    ];

    fn from_byte(byte: u8) -> Self {
        Self::ALL[usize::from(byte) % Self::ALL.len()]
    }
}

/// Options byte bits.
pub(super) const OPTION_MPIDRS: u8 = 1;
pub(super) const OPTION_RAW_CONFIG: u8 = 2;

/// Distributor register blocks: `(first offset, stride)`. An offset byte
/// picks one by bits 7:3 and a kind by bits 2:0 ([`OffsetKind`]).
pub(super) const DIST_BLOCKS: [(u64, u64); 22] = [
    (GICD_CTLR, 4),
    (GICD_TYPER, 4),
    (GICD_IIDR, 4),
    (GICD_TYPER2, 4),
    (GICD_STATUSR, 4),
    (GICD_IGROUPR, 4),
    (GICD_ISENABLER, 4),
    (GICD_ICENABLER, 4),
    (GICD_ISPENDR, 4),
    (GICD_ICPENDR, 4),
    (GICD_ISACTIVER, 4),
    (GICD_ICACTIVER, 4),
    (GICD_IPRIORITYR, 4),
    (GICD_ITARGETSR, 4),
    (GICD_ICFGR, 4),
    (GICD_IGRPMODR, 4),
    (GICD_NSACR, 4),
    (GICD_SGIR, 4),
    (GICD_CPENDSGIR, 4),
    (GICD_SPENDSGIR, 4),
    (GICD_IROUTER_BASE, 8),
    (ID_REGISTERS, 4),
];

/// Redistributor registers, from a vCPU's RD_base (the SGI_base ones
/// include [`SGI_FRAME_OFFSET`]).
pub(super) const REDIST_REGISTERS: [u64; 21] = [
    GICR_CTLR,
    GICR_IIDR,
    GICR_TYPER,
    GICR_TYPER + 4,
    GICR_STATUSR,
    GICR_WAKER,
    GICR_PIDR2,
    SGI_FRAME_OFFSET + GICR_IGROUPR0,
    SGI_FRAME_OFFSET + GICR_ISENABLER0,
    SGI_FRAME_OFFSET + GICR_ICENABLER0,
    SGI_FRAME_OFFSET + GICR_ISPENDR0,
    SGI_FRAME_OFFSET + GICR_ICPENDR0,
    SGI_FRAME_OFFSET + GICR_ISACTIVER0,
    SGI_FRAME_OFFSET + GICR_ICACTIVER0,
    SGI_FRAME_OFFSET + GICR_IPRIORITYR,
    SGI_FRAME_OFFSET + GICR_IPRIORITYR + 0x10,
    SGI_FRAME_OFFSET + GICR_ICFGR0,
    SGI_FRAME_OFFSET + GICR_ICFGR1,
    SGI_FRAME_OFFSET + GICR_IGRPMODR0,
    SGI_FRAME_OFFSET + GICR_NSACR,
    0x0070, // GICR_PROPBASER: absent without LPIs.
];

/// Offset kinds, by bits 2:0 of an offset byte; bits 7:3 pick a
/// register ([`DIST_BLOCKS`], [`REDIST_REGISTERS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum OffsetKind {
    /// The register (in the distributor, an index byte follows: the
    /// register of the block at that index).
    Register,
    /// A byte lane or the upper half of the register: 1 to 7 bytes in
    /// (by bits 7:5 modulo 7), with an index byte as for `Register` in the
    /// distributor.
    Lane,
    /// Anywhere in the frame (a 16-bit value in the distributor, 32-bit in
    /// the redistributor).
    InFrame,
    /// An 8-byte value: anywhere.
    Raw,
    /// Distributor only (kinds 4..=7): a router of INTID `u16 % 1030`,
    /// past INTID 1019 too.
    Router,
}

impl OffsetKind {
    /// By bits 2:0 of an offset byte.
    const fn from_byte(byte: u8) -> Self {
        match byte & 7 {
            0 => Self::Register,
            1 => Self::Lane,
            2 => Self::InFrame,
            3 => Self::Raw,
            _ => Self::Router,
        }
    }
}

/// An offset byte: `kind` at register `register` of the frame's list.
#[cfg(test)]
pub(super) const fn offset_byte(kind: OffsetKind, register: u8) -> u8 {
    register << 3 | kind as u8
}

/// Sizes by the size byte modulo 16; 10 and above take the byte itself.
pub(super) const SIZES: [u8; 10] = [4, 4, 4, 1, 8, 2, 0, 3, 16, 255];

/// The vGIC under test and what the hypervisor would remember about it.
struct Harness {
    gic: VGic,
    mpidrs: Vec<u64>,
    spis: u32,
    /// What the last `fill` of each vCPU put in its list registers, until
    /// its sync-back.
    filled: Vec<Option<ListRegisters>>,
}

/// Runs the vGIC harness on one input (see the module documentation).
pub fn vgic(data: &[u8]) {
    let mut input = Input::new(data);
    let mut harness = Harness::new(&mut input);
    for operation in 0..MAX_OPERATIONS {
        if input.is_empty() {
            break;
        }
        harness.step(&mut input);
        harness.check(operation);
    }
    // However it ended, syncing every vCPU leaves nothing in flight.
    for vcpu in 0..harness.vcpus() {
        harness.sync_back(vcpu, &[], None);
    }
    // The SPIs can be in any vCPU's list registers; check them all once.
    for intid in PRIVATE_COUNT..PRIVATE_COUNT + harness.spis {
        let in_lr = harness.gic.irq_status(intid, 0).and_then(|s| s.in_lr);
        assert_eq!(in_lr, None, "SPI {intid} left in flight");
    }
}

/// Whether `spis` is a count [`VGic::new`] takes: a multiple of 32 up to
/// 960, or [`MAX_SPIS`].
fn valid_spis(spis: u32) -> bool {
    spis == MAX_SPIS || (spis.is_multiple_of(32) && spis <= 960)
}

impl Harness {
    fn new(input: &mut Input<'_>) -> Self {
        let vcpu_byte = input.u8();
        let vcpus = if vcpu_byte & 0x80 == 0 {
            1 + u16::from(vcpu_byte % 8)
        } else {
            1 + u16::from(vcpu_byte) % MAX_VCPUS as u16
        };
        let spis = match input.u8() {
            0xff => MAX_SPIS,
            byte => 32 * u32::from(byte % 31),
        };
        let options = input.u8();
        let ours: Vec<u64> = (0..vcpus).map(|i| vcpu_mpidr(i).value()).collect();
        let mut mpidrs = ours.clone();
        if options & OPTION_MPIDRS != 0 {
            let chosen: Vec<u64> = (0..vcpus).map(|_| input.u64()).collect();
            let affinities: Vec<u64> = chosen.iter().map(|m| m & Mpidr::AFFINITY_MASK).collect();
            let duplicated = affinities
                .iter()
                .enumerate()
                .any(|(i, a)| affinities[..i].contains(a));
            match VGic::new(vcpus, spis, |i| chosen[usize::from(i)]) {
                Ok(_) => {
                    assert!(!duplicated, "duplicate MPIDRs accepted");
                    mpidrs = chosen;
                }
                Err(error) => {
                    assert!(duplicated, "{error:?} for distinct MPIDRs");
                    assert!(matches!(error, VgicConfigError::DuplicateMpidr { .. }));
                }
            }
        }
        if options & OPTION_RAW_CONFIG != 0 {
            let (raw_vcpus, raw_spis) = (input.u16(), input.u32());
            let valid = (1..=MAX_VCPUS as u16).contains(&raw_vcpus) && valid_spis(raw_spis);
            let built = VGic::new(raw_vcpus, raw_spis, |i| vcpu_mpidr(i).value());
            assert_eq!(
                built.is_ok(),
                valid,
                "{raw_vcpus} vCPUs, {raw_spis} SPIs: {built:?}"
            );
        }
        let gic = VGic::new(vcpus, spis, |i| mpidrs[usize::from(i)]).expect("a valid vGIC");
        Self {
            gic,
            mpidrs,
            spis,
            filled: vec![None; usize::from(vcpus)],
        }
    }

    fn vcpus(&self) -> u16 {
        self.gic.vcpus()
    }

    /// Whether the model is small enough to be compared whole with
    /// another ([`SNAPSHOT_SLOTS`]).
    fn small(&self) -> bool {
        usize::from(self.vcpus()) * PRIVATE_COUNT as usize + self.spis as usize <= SNAPSHOT_SLOTS
    }

    fn every_vcpu(&self) -> VcpuMask {
        VcpuMask::first_n(usize::from(self.vcpus()))
    }

    /// `mask` names only vCPUs of the VM.
    fn check_mask(&self, mask: VcpuMask, what: &str) {
        assert!(
            mask.difference(self.every_vcpu()).is_empty(),
            "{what} woke {mask:?} of {} vCPUs",
            self.vcpus()
        );
    }

    fn step(&mut self, input: &mut Input<'_>) {
        match Op::from_byte(input.u8()) {
            Op::DistRead => {
                let (offset, size) = (dist_offset(input), size(input));
                let result = self.gic.dist_read(offset, size);
                check_read(result, offset, size, Frame::Distributor);
            }
            Op::DistWrite => {
                let (offset, size, value) = (dist_offset(input), size(input), value(input));
                self.write(offset, size, Frame::Distributor, |gic| {
                    gic.dist_write(offset, size, value)
                });
            }
            Op::RedistRead => {
                let (offset, size) = (redist_offset(input, self.vcpus()), size(input));
                let frame = Frame::Redistributors(self.vcpus());
                check_read(self.gic.redist_read(offset, size), offset, size, frame);
            }
            Op::RedistWrite => {
                let offset = redist_offset(input, self.vcpus());
                let (size, value) = (size(input), value(input));
                let frame = Frame::Redistributors(self.vcpus());
                self.write(offset, size, frame, |gic| {
                    gic.redist_write(offset, size, value)
                });
            }
            Op::SendSgi => {
                let from = vcpu(input, self.vcpus());
                let sgi1r = sgi1r(input, self.vcpus());
                match self.gic.send_sgi(from, sgi1r) {
                    Ok(woken) => {
                        assert!(from < self.vcpus(), "an SGI from vCPU {from}");
                        self.check_mask(woken, "an SGI");
                        if sgi1r & ICC_SGI1R_EL1::IRM::SET.value != 0 {
                            assert!(!woken.contains(from), "an IRM SGI woke its sender");
                        }
                    }
                    Err(error) => {
                        assert_eq!(error, InjectError::NoSuchVcpu { vcpu: from });
                        assert!(from >= self.vcpus());
                    }
                }
            }
            Op::SetLevel => {
                let (intid, vcpu, level) = (
                    intid(input, self.spis),
                    vcpu(input, self.vcpus()),
                    input.bool(),
                );
                let result = self.gic.set_level(intid, vcpu, level);
                if intid < SGI_COUNT {
                    assert_eq!(result, Err(InjectError::NoLine { intid }));
                } else if self.check_injection(result, intid, vcpu) {
                    let line = self.gic.irq_status(intid, vcpu).map(|s| s.line);
                    assert_eq!(line, Some(level), "INTID {intid} line");
                }
            }
            Op::RaiseEdge => {
                let (intid, vcpu) = (intid(input, self.spis), vcpu(input, self.vcpus()));
                let result = self.gic.raise_edge(intid, vcpu);
                if self.check_injection(result, intid, vcpu) {
                    let pending = self.gic.irq_status(intid, vcpu).map(|s| s.pending);
                    assert_eq!(
                        pending,
                        Some(true),
                        "INTID {intid} not pending after an edge"
                    );
                }
            }
            Op::Fill => {
                let (vcpu, count) = (vcpu(input, self.vcpus()), usize::from(input.u8() % 20));
                self.fill(vcpu, count);
            }
            Op::SyncBack => {
                let vcpu = vcpu(input, self.vcpus());
                let garbage: Vec<Lr> = (0..input.u8() % 3)
                    .map(|_| Lr::decode(input.u64()))
                    .collect();
                self.sync_back(vcpu, &garbage, Some(input));
            }
            Op::TakeWakeups => {
                let woken = self.gic.take_wakeups();
                self.check_mask(woken, "register writes");
                assert!(self.gic.take_wakeups().is_empty(), "wake-ups taken twice");
            }
            Op::Reset => {
                self.gic.reset();
                if self.small() {
                    let mpidrs = &self.mpidrs;
                    let fresh = VGic::new(self.vcpus(), self.spis, |i| mpidrs[usize::from(i)]);
                    assert!(
                        fresh.is_ok_and(|fresh| fresh == self.gic),
                        "reset is not a new vGIC"
                    );
                }
                self.filled.iter_mut().for_each(|f| *f = None);
            }
            Op::Inspect => {
                let (intid, vcpu) = (intid(input, self.spis), vcpu(input, self.vcpus()));
                let _ = self.gic.irq_status(intid, vcpu);
                if let Some(targets) = self.gic.spi_targets(intid) {
                    self.check_mask(targets, "SPI targets");
                }
                let _ = self.gic.underflow_needed(vcpu);
                let _ = self.gic.has_pending(vcpu);
                let lr = Lr::decode(input.u64());
                assert_eq!(
                    Lr::decode(lr.encode()),
                    lr,
                    "{lr:?} does not survive encoding"
                );
            }
        }
    }

    /// A guest write: on error nothing may have changed.
    /// A guest write: on error nothing may have changed (checked on
    /// [`Self::small`] models only).
    fn write(
        &mut self,
        offset: u64,
        size: u8,
        frame: Frame,
        write: impl FnOnce(&mut VGic) -> Result<(), VgicError>,
    ) {
        let before = self.small().then(|| self.gic.clone());
        match write(&mut self.gic) {
            Ok(()) => check_accepted(offset, size, frame),
            Err(error) => {
                check_error(error, offset, size, true);
                if let Some(before) = before {
                    assert!(
                        before == self.gic,
                        "a refused write ({error}) changed the vGIC"
                    );
                }
            }
        }
    }

    /// Checks an injection's outcome against its documented refusals;
    /// returns whether it was accepted.
    fn check_injection(
        &self,
        result: Result<VcpuMask, InjectError>,
        intid: u32,
        vcpu: u16,
    ) -> bool {
        let exists = intid < PRIVATE_COUNT + self.spis;
        let private_of_nobody = intid < PRIVATE_COUNT && vcpu >= self.vcpus();
        match result {
            Ok(woken) => {
                assert!(
                    exists && !private_of_nobody,
                    "INTID {intid} of vCPU {vcpu} injected"
                );
                self.check_mask(woken, "an injection");
                true
            }
            Err(InjectError::NoSuchVcpu { vcpu: named }) => {
                assert!(private_of_nobody && named == vcpu, "{result:?}");
                false
            }
            Err(InjectError::NoSuchInterrupt { intid: named }) => {
                assert!(!exists && named == intid, "{result:?}");
                false
            }
            Err(error) => panic!("{error:?} for INTID {intid}"),
        }
    }

    fn fill(&mut self, vcpu: u16, count: usize) {
        let lrs = self.gic.fill(vcpu, count);
        let len = lrs.len();
        let asked = count.min(MAX_LIST_REGISTERS);
        assert!(len <= asked, "{len} list registers filled, {count} asked");
        if vcpu >= self.vcpus() {
            assert!(lrs.is_empty(), "list registers for vCPU {vcpu}");
            return;
        }
        assert!(
            lrs.entries()[len..].iter().all(Option::is_none),
            "a gap in {lrs:?}"
        );
        let values = lrs.values();
        for (at, lr) in lrs.iter().enumerate() {
            assert!(
                lrs.iter().skip(at + 1).all(|other| other.intid != lr.intid),
                "INTID {} twice",
                lr.intid
            );
            assert_eq!(values[at], lr.encode());
            assert_eq!(Lr::decode(lr.encode()), *lr);
            assert_eq!(lr.physical, None, "{lr:?}");
            assert_ne!(lr.state, LrState::Invalid, "{lr:?}");
            let status = self
                .gic
                .irq_status(lr.intid, vcpu)
                .unwrap_or_else(|| panic!("{lr:?} is no interrupt of vCPU {vcpu}"));
            assert_eq!(status.in_lr, Some(vcpu), "{lr:?} not recorded in flight");
            assert_eq!(
                (lr.priority, lr.group1),
                (status.priority, status.group1),
                "{lr:?}"
            );
            assert_eq!(
                lr.eoi_maintenance,
                lr.state.is_pending() && !status.edge,
                "{lr:?}"
            );
        }
        assert!(
            values[len..].iter().all(|&v| v == 0),
            "stale list register values"
        );
        if len < asked {
            assert!(
                !self.gic.underflow_needed(vcpu),
                "{len} of {asked} filled, yet more wait"
            );
        }
        self.filled[usize::from(vcpu)] = Some(lrs);
    }

    /// The guest ran: read back what `fill` gave `vcpu`, each entry in the
    /// state the input gives (unchanged without one), plus `garbage`.
    fn sync_back(&mut self, vcpu: u16, garbage: &[Lr], mut input: Option<&mut Input<'_>>) {
        let filled = self
            .filled
            .get_mut(usize::from(vcpu))
            .and_then(Option::take)
            .unwrap_or_default();
        let mut read_back: Vec<Lr> = filled
            .iter()
            .map(|lr| Lr {
                state: input
                    .as_deref_mut()
                    .map_or(lr.state, |input| LrState::from_bits(input.u8().into())),
                ..*lr
            })
            .collect();
        read_back.extend_from_slice(garbage);
        let woken = self.gic.sync_back(vcpu, &read_back);
        self.check_mask(woken, "a sync-back");
        assert!(!woken.contains(vcpu), "a sync-back woke its own vCPU");
        for lr in filled.iter() {
            let in_lr = self.gic.irq_status(lr.intid, vcpu).and_then(|s| s.in_lr);
            assert_ne!(
                in_lr,
                Some(vcpu),
                "{lr:?} still in flight after its sync-back"
            );
        }
    }

    fn check(&self, operation: usize) {
        let ctlr = self.gic.dist_read(GICD_CTLR, 4).expect("GICD_CTLR") as u32;
        assert_eq!(
            ctlr & (GICD_CTLR::ARE::SET.value | GICD_CTLR::DS::SET.value),
            GICD_CTLR::ARE::SET.value | GICD_CTLR::DS::SET.value
        );
        assert_eq!(ctlr & GICD_CTLR::RWP::SET.value, 0);
        let typer = self.gic.dist_read(GICD_TYPER, 4).expect("GICD_TYPER") as u32;
        assert_eq!(
            GICD_TYPER::ITLinesNumber.read(typer),
            self.spis.div_ceil(32)
        );

        let vcpu = (operation % usize::from(self.vcpus())) as u16;
        let rd_base = u64::from(vcpu) * REDISTRIBUTOR_SIZE;
        let icfgr0 = self
            .gic
            .redist_read(rd_base + SGI_FRAME_OFFSET + GICR_ICFGR0, 4);
        assert_eq!(icfgr0, Ok(0xaaaa_aaaa), "SGIs not edge-triggered");
        let waker = self
            .gic
            .redist_read(rd_base + GICR_WAKER, 4)
            .expect("GICR_WAKER") as u32;
        let sleeping = waker & GICR_WAKER::ProcessorSleep::SET.value != 0;
        assert_eq!(
            waker & GICR_WAKER::ChildrenAsleep::SET.value != 0,
            sleeping,
            "GICR_WAKER {waker:#x}"
        );

        // The delivery view walks every SPI: checked after every fourth
        // operation only, to keep executions short.
        if !operation.is_multiple_of(4) {
            return;
        }
        let pending = self.gic.pending_for(vcpu);
        assert!(
            pending
                .windows(2)
                .all(|w| (w[0].priority, w[0].intid) < (w[1].priority, w[1].intid)),
            "pending_for not sorted: {pending:?}"
        );
        for irq in &pending {
            let status = self
                .gic
                .irq_status(irq.intid, vcpu)
                .expect("a listed interrupt");
            assert!(
                status.enabled && status.pending && !status.active,
                "{irq:?}: {status:?}"
            );
            assert_eq!(status.in_lr, None, "{irq:?} listed while in flight");
            assert_eq!((status.priority, status.group1), (irq.priority, irq.group1));
        }
        if !pending.is_empty() {
            assert!(
                self.gic.has_pending(vcpu),
                "vCPU {vcpu} has {pending:?} yet nothing pending"
            );
        }
    }
}

/// Which register frame an access went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frame {
    Distributor,
    /// The redistributors of this many vCPUs, one after the other.
    Redistributors(u16),
}

/// An access the model performed is one the module documentation allows:
/// inside an implemented frame, aligned, and 32-bit, or 8-bit to a
/// byte-wide register (IPRIORITYR, and ITARGETSR, CPENDSGIR, SPENDSGIR),
/// or 64-bit to `GICD_IROUTER<n>` or GICR_TYPER.
fn check_accepted(offset: u64, size: u8, frame: Frame) {
    assert!(
        matches!(size, 1 | 2 | 4 | 8) && offset.is_multiple_of(u64::from(size)),
        "{size}-byte access at {offset:#x} accepted"
    );
    let (byte_wide, double) = match frame {
        Frame::Distributor => {
            assert!(offset < DISTRIBUTOR_SIZE, "an access past the distributor");
            let byte_wide = matches!(offset, 0x0400..=0x0bff | 0x0f10..=0x0f2f);
            let router = (GICD_IROUTER..GICD_IROUTER_BASE + 8 * 1020).contains(&offset);
            (byte_wide, router)
        }
        Frame::Redistributors(vcpus) => {
            let vcpu = offset / REDISTRIBUTOR_SIZE;
            assert!(
                vcpu < u64::from(vcpus),
                "an access past the last redistributor"
            );
            let in_frame = offset % REDISTRIBUTOR_SIZE;
            let priority = SGI_FRAME_OFFSET + GICR_IPRIORITYR;
            let byte_wide = (priority..priority + 0x20).contains(&in_frame);
            (byte_wide, in_frame == GICR_TYPER)
        }
    };
    match size {
        4 => {}
        1 => assert!(
            byte_wide,
            "a byte access at {offset:#x} ({frame:?}) accepted"
        ),
        8 => assert!(
            double,
            "a 64-bit access at {offset:#x} ({frame:?}) accepted"
        ),
        _ => panic!("a {size}-byte access at {offset:#x} ({frame:?}) accepted"),
    }
}

/// A read's outcome.
fn check_read(result: Result<u64, VgicError>, offset: u64, size: u8, frame: Frame) {
    match result {
        Ok(value) => {
            check_accepted(offset, size, frame);
            if size < 8 {
                assert_eq!(
                    value >> (u32::from(size) * 8),
                    0,
                    "{size}-byte read of {value:#x}"
                );
            }
        }
        Err(error) => check_error(error, offset, size, false),
    }
}

/// An error names the access, and a bad size or alignment asks for an
/// abort.
fn check_error(error: VgicError, offset: u64, size: u8, write: bool) {
    let (named_offset, named_size, named_write) = match error {
        VgicError::Ignored {
            offset,
            size,
            write,
        }
        | VgicError::UnsupportedSize {
            offset,
            size,
            write,
        }
        | VgicError::Misaligned {
            offset,
            size,
            write,
        } => (offset, size, write),
    };
    assert_eq!(
        (named_offset, named_size, named_write),
        (offset, size, write),
        "{error:?}"
    );
    assert_eq!(error.offset(), offset);
    if !matches!(size, 1 | 2 | 4 | 8) || !offset.is_multiple_of(u64::from(size)) {
        assert!(error.aborts(), "{error:?} does not abort");
    }
    let _ = alloc::format!("{error}");
}

/// A distributor offset (see [`OffsetKind`]).
fn dist_offset(input: &mut Input<'_>) -> u64 {
    let byte = input.u8();
    let (base, stride) = DIST_BLOCKS[usize::from(byte >> 3) % DIST_BLOCKS.len()];
    match OffsetKind::from_byte(byte) {
        OffsetKind::Register => base + stride * u64::from(input.u8()),
        OffsetKind::Lane => base + stride * u64::from(input.u8()) + 1 + u64::from(byte >> 5) % 7,
        OffsetKind::InFrame => u64::from(input.u16()),
        OffsetKind::Raw => input.u64(),
        // The routers reach INTID 1019 and beyond with a wider index.
        OffsetKind::Router => GICD_IROUTER_BASE + 8 * (u64::from(input.u16()) % 1030),
    }
}

/// An offset from the first redistributor: a frame byte (vCPU, up to two
/// past the last) and a kind byte as for [`dist_offset`].
fn redist_offset(input: &mut Input<'_>, vcpus: u16) -> u64 {
    let frame = u64::from(input.u8()) % (u64::from(vcpus) + 2) * REDISTRIBUTOR_SIZE;
    let byte = input.u8();
    let register = REDIST_REGISTERS[usize::from(byte >> 3) % REDIST_REGISTERS.len()];
    match OffsetKind::from_byte(byte) {
        OffsetKind::Lane => frame + register + 1 + u64::from(byte >> 5) % 7,
        OffsetKind::InFrame => frame + u64::from(input.u32()) % REDISTRIBUTOR_SIZE,
        OffsetKind::Raw => input.u64(),
        OffsetKind::Register | OffsetKind::Router => frame + register,
    }
}

fn size(input: &mut Input<'_>) -> u8 {
    let byte = input.u8();
    SIZES.get(usize::from(byte % 16)).copied().unwrap_or(byte)
}

/// A value: a kind byte, then 8 bytes (raw), nothing (all ones), 4 bytes,
/// or a bit number.
fn value(input: &mut Input<'_>) -> u64 {
    match input.u8() % 4 {
        0 => input.u64(),
        1 => u64::MAX,
        2 => u64::from(input.u32()),
        _ => 1 << (input.u8() % 64),
    }
}

/// A vCPU index: 0xff reads a raw 16-bit index; anything else is taken
/// modulo one more than the vCPU count (so one past the last is common).
fn vcpu(input: &mut Input<'_>, vcpus: u16) -> u16 {
    match input.u8() {
        0xff => input.u16(),
        byte => u16::from(byte) % (vcpus + 1),
    }
}

/// An INTID: 0xffff reads a raw 32-bit one; anything else is taken modulo
/// the vGIC's INTIDs plus four.
fn intid(input: &mut Input<'_>, spis: u32) -> u32 {
    match input.u16() {
        0xffff => input.u32(),
        raw => u32::from(raw) % (PRIVATE_COUNT + spis + 4),
    }
}

/// An ICC_SGI1R_EL1 value: a control byte (bit 0 IRM, bit 1 raw 8 bytes
/// instead, bits 7:4 the SGI), a target list (2 bytes), an Aff1 byte
/// (modulo the clusters plus one) and an RS byte (modulo 2).
fn sgi1r(input: &mut Input<'_>, vcpus: u16) -> u64 {
    let control = input.u8();
    if control & 2 != 0 {
        return input.u64();
    }
    use ICC_SGI1R_EL1 as S;
    let targets = u64::from(input.u16());
    let clusters = u64::from(vcpus.div_ceil(16)) + 1;
    let aff1 = u64::from(input.u8()) % clusters;
    let rs = u64::from(input.u8() % 2);
    let irm = if control & 1 != 0 {
        S::IRM::SET
    } else {
        S::IRM::CLEAR
    };
    (S::TargetList.val(targets)
        + S::Aff1.val(aff1)
        + S::INTID.val(u64::from(control >> 4))
        + S::RS.val(rs)
        + irm)
        .value
}
