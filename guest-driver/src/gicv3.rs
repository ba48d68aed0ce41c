//! A polling GICv3 driver for guests (Arm IHI 0069, "GIC architecture
//! specification, GIC architecture version 3 and version 4"): the
//! distributor and redistributor operations a guest needs to configure
//! SGIs, PPIs and SPIs with affinity routing and a single Security state,
//! and the values it writes to the CPU interface.
//!
//! The register layouts and fields are `gic_regs`', the one GICv3 register
//! map of the workspace, which the hypervisor's GIC driver and its virtual
//! GIC use too. Everything here is portable and host-tested: the register
//! blocks are `tock-registers` structures, which the tests place in
//! ordinary memory. The runtime (`rt::gic`) maps the real frames as device
//! memory, finds each CPU's redistributor with
//! [`gic_regs::find_redistributor`] and accesses the CPU interface's system
//! registers.
//!
//! The guests that use it run with PSTATE.I masked and no IRQ vector: they
//! acknowledge interrupts by reading ICC_IAR1_EL1, which returns the most
//! urgent pending interrupt whatever PSTATE.I says, and complete them with
//! ICC_EOIR1_EL1 (EOImode 0: priority drop and deactivation in one).

use core::fmt;

use gic_regs::{
    DistributorFrame, FIRST_SPECIAL, GICD_CTLR, GICD_IROUTER, GICR_CTLR, GICR_WAKER, PRIVATE_COUNT,
    RdFrame, SGI_COUNT, SPI_COUNT, SPURIOUS, SgiFrame,
};
use tock_registers::interfaces::{ReadWriteable, Readable, Writeable};

use crate::mpidr::Mpidr;

// ---- INTIDs ------------------------------------------------------------

/// Interrupt type cell of the GIC device-tree binding
/// (interrupt-controller/arm,gic-v3.yaml): 0 is an SPI, numbered from 0 =
/// INTID 32.
const DT_TYPE_SPI: u32 = 0;
/// ... and 1 a PPI, numbered from 0 = INTID 16.
const DT_TYPE_PPI: u32 = 1;
/// How many PPIs the binding's PPI numbers cover (INTIDs 16..=31).
const PPI_COUNT: u32 = PRIVATE_COUNT - SGI_COUNT;

/// An interrupt identifier (Arm IHI 0069, "INTIDs"): SGIs 0..=15, PPIs
/// 16..=31, SPIs 32..=1019, special INTIDs 1020..=1023.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IntId(u32);

impl IntId {
    /// What ICC_IAR1_EL1 reads when nothing is pending.
    pub const SPURIOUS: IntId = IntId(SPURIOUS);

    /// SGI `n`.
    ///
    /// # Panics
    /// If `n` is not below 16 (at compile time in a constant).
    pub const fn sgi(n: u32) -> Self {
        assert!(n < SGI_COUNT, "SGIs are INTIDs 0..=15");
        Self(n)
    }

    /// The INTID with this raw value (24 bits, as ICC_IAR1_EL1 returns it).
    pub const fn from_raw(raw: u32) -> Self {
        Self(raw)
    }

    /// The interrupt a device-tree specifier of the GIC binding names
    /// (`<type number flags>`): type 0 is SPI `number` (INTID 32 +
    /// number), type 1 PPI `number` (INTID 16 + number). `None` for other
    /// types (extended ranges) and numbers out of range.
    pub const fn from_dt(kind: u32, number: u32) -> Option<Self> {
        match kind {
            DT_TYPE_SPI if number < SPI_COUNT => Some(Self(PRIVATE_COUNT + number)),
            DT_TYPE_PPI if number < PPI_COUNT => Some(Self(SGI_COUNT + number)),
            _ => None,
        }
    }

    pub const fn raw(self) -> u32 {
        self.0
    }

    pub const fn is_sgi(self) -> bool {
        self.0 < SGI_COUNT
    }

    /// An SGI or a PPI: configured in the PE's own redistributor.
    pub const fn is_private(self) -> bool {
        self.0 < PRIVATE_COUNT
    }

    pub const fn is_spi(self) -> bool {
        self.0 >= PRIVATE_COUNT && self.0 < FIRST_SPECIAL
    }

    /// Bit of this interrupt in its 32-bit one-bit-per-INTID register
    /// (`GICD_ISENABLER<n>`, GICR_ISENABLER0, ...).
    const fn bit(self) -> u32 {
        1 << (self.0 % 32)
    }

    /// Which of the one-bit-per-INTID registers of its family holds it
    /// (n of `GICD_ISENABLER<n>`).
    const fn word(self) -> usize {
        (self.0 / 32) as usize
    }
}

impl fmt::Display for IntId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

// ---- Priorities ----------------------------------------------------------

/// ICC_PMR_EL1 value that lets through every priority the CPU interface
/// can signal: an interrupt is signalled only if its priority is higher
/// (numerically lower) than the mask, so the lowest priority itself stays
/// masked (Arm IHI 0069, "ICC_PMR_EL1, Interrupt Controller Interrupt
/// Priority Mask Register"; "Priority masking").
pub const PRIORITY_MASK_OPEN: u8 = 0xff;

/// Bits of an 8-bit priority field.
const PRIORITY_FIELD_BITS: u32 = 8;

/// The distance between two priorities a CPU interface with
/// `priority_bits` implemented priority bits tells apart: it keeps the
/// top `priority_bits` bits of every priority and treats the rest as 0
/// (Arm IHI 0069, "Interrupt prioritization"; the virtual interface
/// implements ICH_VTR_EL2.PRIbits + 1 bits, ICC_CTLR_EL1.PRIbits + 1 as
/// the guest reads it). `priority_bits` is clamped to 1..=8.
pub const fn priority_step(priority_bits: u32) -> u8 {
    let bits = if priority_bits < 1 {
        1
    } else if priority_bits > PRIORITY_FIELD_BITS {
        PRIORITY_FIELD_BITS
    } else {
        priority_bits
    };
    1 << (PRIORITY_FIELD_BITS - bits)
}

/// `priority` as a CPU interface with `priority_bits` bits compares it.
pub const fn effective_priority(priority: u8, priority_bits: u32) -> u8 {
    priority & !(priority_step(priority_bits) - 1)
}

// ---- Register blocks -------------------------------------------------------

/// The distributor frame with this driver's operations on it.
#[repr(transparent)]
pub struct Distributor(DistributorFrame);

// ---- Errors --------------------------------------------------------------

/// Polls of a "write pending" or "asleep" bit before giving up: far more
/// than any GIC takes (a trapped access under a hypervisor takes
/// microseconds, so this is seconds).
const POLL_LIMIT: u32 = 1_000_000;

/// Why the GIC cannot be used as asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GicError {
    /// The device tree has no GICv3 node (`compatible = "arm,gic-v3"`).
    NotInDeviceTree,
    /// The distributor has two Security states (GICD_CTLR.DS = 0); this
    /// driver only knows the single-state layout of GICD_CTLR.
    TwoSecurityStates,
    /// A register did not settle within the poll limit.
    Stuck(&'static str),
    /// The operation takes an SPI and got this.
    NotAnSpi(IntId),
    /// The operation takes an SGI or PPI and got this.
    NotPrivate(IntId),
    /// The operation takes an SGI and got this.
    NotAnSgi(IntId),
    /// No redistributor in the device tree's regions serves this PE.
    NoRedistributor(Mpidr),
    /// ICC_SRE_EL1.SRE does not stay set: the system-register interface is
    /// not available at EL1.
    SystemRegistersDisabled,
    /// Mapping a GIC frame failed.
    Map,
}

impl fmt::Display for GicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GicError::NotInDeviceTree => write!(f, "no GICv3 in the device tree"),
            GicError::TwoSecurityStates => {
                write!(
                    f,
                    "the distributor has two Security states (GICD_CTLR.DS 0)"
                )
            }
            GicError::Stuck(what) => write!(f, "{what} did not settle"),
            GicError::NotAnSpi(id) => write!(f, "INTID {id} is not an SPI"),
            GicError::NotPrivate(id) => write!(f, "INTID {id} is not an SGI or PPI"),
            GicError::NotAnSgi(id) => write!(f, "INTID {id} is not an SGI"),
            GicError::NoRedistributor(m) => write!(f, "no redistributor serves mpidr {m}"),
            GicError::SystemRegistersDisabled => {
                write!(
                    f,
                    "ICC_SRE_EL1.SRE stays 0: no system-register access to the GIC"
                )
            }
            GicError::Map => write!(f, "cannot map the GIC's frames"),
        }
    }
}

/// Polls `settled` up to [`POLL_LIMIT`] times.
fn poll(what: &'static str, mut settled: impl FnMut() -> bool) -> Result<(), GicError> {
    for _ in 0..POLL_LIMIT {
        if settled() {
            return Ok(());
        }
        core::hint::spin_loop();
    }
    Err(GicError::Stuck(what))
}

// ---- Values the CPU interface and the distributor take --------------------

/// The ICC_SGI1R_EL1 value that sends `sgi` to the one PE `target`
/// ([`gic_regs::sgi1r_value`]: IRM 0; RS and TargetList from its Aff0).
pub fn sgi1r_value(target: Mpidr, sgi: IntId) -> Result<u64, GicError> {
    gic_regs::sgi1r_value(target.raw(), sgi.raw()).ok_or(GicError::NotAnSgi(sgi))
}

/// The `GICD_IROUTER<n>` value that routes an SPI to the one PE `target`.
pub fn irouter_value(target: Mpidr) -> u64 {
    (GICD_IROUTER::Aff3.val(target.affinity(3).into())
        + GICD_IROUTER::Interrupt_Routing_Mode::Targeted
        + GICD_IROUTER::Aff2.val(target.affinity(2).into())
        + GICD_IROUTER::Aff1.val(target.affinity(1).into())
        + GICD_IROUTER::Aff0.val(target.affinity(0).into()))
    .value
}

// ---- The distributor ------------------------------------------------------

impl Distributor {
    /// Turns on affinity routing and the forwarding of Group 1 interrupts
    /// (GICD_CTLR.ARE and EnableGrp1), and waits for the write to take
    /// effect. Only for a distributor with a single Security state.
    pub fn enable_group1(&self) -> Result<(), GicError> {
        if !self.0.ctlr.is_set(GICD_CTLR::DS) {
            return Err(GicError::TwoSecurityStates);
        }
        self.0
            .ctlr
            .modify(GICD_CTLR::ARE::SET + GICD_CTLR::EnableGrp1::SET);
        self.wait_for_writes()
    }

    /// Makes `spi` a Group 1 interrupt of `priority`, routed to the one PE
    /// `target`. Configure an SPI while it is disabled.
    pub fn configure_spi(&self, spi: IntId, priority: u8, target: Mpidr) -> Result<(), GicError> {
        let index = Self::spi_index(spi)?;
        let word = spi.word();
        self.0.igroupr[word].set(self.0.igroupr[word].get() | spi.bit());
        self.0.ipriorityr[spi.raw() as usize].set(priority);
        self.0.irouter[index].set(irouter_value(target));
        Ok(())
    }

    /// The PE `spi` is routed to, and whether the route is 1-of-N instead.
    pub fn route_of(&self, spi: IntId) -> Result<(Mpidr, bool), GicError> {
        let route = self.0.irouter[Self::spi_index(spi)?].extract();
        let any = route.matches_all(GICD_IROUTER::Interrupt_Routing_Mode::AnyParticipatingPe);
        let target = Mpidr::from_affinity(
            route.read(GICD_IROUTER::Aff3) as u8,
            route.read(GICD_IROUTER::Aff2) as u8,
            route.read(GICD_IROUTER::Aff1) as u8,
            route.read(GICD_IROUTER::Aff0) as u8,
        );
        Ok((target, any))
    }

    /// Enables or disables `spi`; a disable is waited for (GICD_CTLR.RWP).
    pub fn set_spi_enabled(&self, spi: IntId, enabled: bool) -> Result<(), GicError> {
        Self::spi_index(spi)?;
        if enabled {
            self.0.isenabler[spi.word()].set(spi.bit());
            Ok(())
        } else {
            self.0.icenabler[spi.word()].set(spi.bit());
            self.wait_for_writes()
        }
    }

    /// Whether `spi` is enabled (`GICD_ISENABLER<n>` reads the enables).
    pub fn spi_enabled(&self, spi: IntId) -> Result<bool, GicError> {
        Self::spi_index(spi)?;
        Ok(self.0.isenabler[spi.word()].get() & spi.bit() != 0)
    }

    /// Whether `spi` is pending (`GICD_ISPENDR<n>`: for a level-sensitive
    /// SPI, its latch or its line held high).
    pub fn spi_pending(&self, spi: IntId) -> Result<bool, GicError> {
        Self::spi_index(spi)?;
        Ok(self.0.ispendr[spi.word()].get() & spi.bit() != 0)
    }

    /// Whether `spi` is active (`GICD_ISACTIVER<n>`).
    pub fn spi_active(&self, spi: IntId) -> Result<bool, GicError> {
        Self::spi_index(spi)?;
        Ok(self.0.isactiver[spi.word()].get() & spi.bit() != 0)
    }

    /// Clears the pending latch of `spi` (`GICD_ICPENDR<n>`); a
    /// level-sensitive SPI stays pending while its line is high.
    pub fn clear_spi_pending(&self, spi: IntId) -> Result<(), GicError> {
        Self::spi_index(spi)?;
        self.0.icpendr[spi.word()].set(spi.bit());
        Ok(())
    }

    /// Index of `spi`'s `GICD_IROUTER<n>` in [`Distributor::irouter`].
    fn spi_index(spi: IntId) -> Result<usize, GicError> {
        if spi.is_spi() {
            Ok((spi.raw() - PRIVATE_COUNT) as usize)
        } else {
            Err(GicError::NotAnSpi(spi))
        }
    }

    fn wait_for_writes(&self) -> Result<(), GicError> {
        poll("GICD_CTLR.RWP", || !self.0.ctlr.is_set(GICD_CTLR::RWP))
    }
}

// ---- A redistributor ---------------------------------------------------------

/// One PE's redistributor: its RD_base and SGI_base frames.
#[derive(Clone, Copy)]
pub struct Redistributor<'a> {
    rd: &'a RdFrame,
    sgi: &'a SgiFrame,
}

impl<'a> Redistributor<'a> {
    pub const fn new(rd: &'a RdFrame, sgi: &'a SgiFrame) -> Self {
        Self { rd, sgi }
    }

    /// GICR_TYPER: which PE the redistributor serves, whether it is the
    /// last of its region, how big it is.
    pub fn typer(&self) -> u64 {
        self.rd.typer.get()
    }

    /// Marks the PE awake (clears GICR_WAKER.ProcessorSleep) and waits
    /// until the redistributor's interface to it is up (ChildrenAsleep
    /// clear), so that it forwards the PE's interrupts.
    pub fn wake(&self) -> Result<(), GicError> {
        self.rd.waker.modify(GICR_WAKER::ProcessorSleep::CLEAR);
        poll("GICR_WAKER.ChildrenAsleep", || {
            !self.rd.waker.is_set(GICR_WAKER::ChildrenAsleep)
        })
    }

    /// Makes the SGI or PPI `intid` a Group 1 interrupt of `priority`.
    pub fn configure(&self, intid: IntId, priority: u8) -> Result<(), GicError> {
        Self::check(intid)?;
        self.sgi.igroupr0.set(self.sgi.igroupr0.get() | intid.bit());
        self.sgi.ipriorityr[intid.raw() as usize].set(priority);
        Ok(())
    }

    /// The priority of the SGI or PPI `intid`.
    pub fn priority(&self, intid: IntId) -> Result<u8, GicError> {
        Self::check(intid)?;
        Ok(self.sgi.ipriorityr[intid.raw() as usize].get())
    }

    /// Enables or disables the SGI or PPI `intid`; a disable is waited for
    /// (GICR_CTLR.RWP).
    pub fn set_enabled(&self, intid: IntId, enabled: bool) -> Result<(), GicError> {
        Self::check(intid)?;
        if enabled {
            self.sgi.isenabler0.set(intid.bit());
            Ok(())
        } else {
            self.sgi.icenabler0.set(intid.bit());
            poll("GICR_CTLR.RWP", || !self.rd.ctlr.is_set(GICR_CTLR::RWP))
        }
    }

    /// Whether the SGI or PPI `intid` is enabled.
    pub fn enabled(&self, intid: IntId) -> Result<bool, GicError> {
        Self::check(intid)?;
        Ok(self.sgi.isenabler0.get() & intid.bit() != 0)
    }

    /// Whether the SGI or PPI `intid` is pending (GICR_ISPENDR0), as one
    /// sent while it is disabled stays.
    pub fn pending(&self, intid: IntId) -> Result<bool, GicError> {
        Self::check(intid)?;
        Ok(self.sgi.ispendr0.get() & intid.bit() != 0)
    }

    /// Whether the SGI or PPI `intid` is pending as GICR_ICPENDR0 reads
    /// it: the same state as GICR_ISPENDR0.
    pub fn pending_in_icpendr(&self, intid: IntId) -> Result<bool, GicError> {
        Self::check(intid)?;
        Ok(self.sgi.icpendr0.get() & intid.bit() != 0)
    }

    /// Whether the SGI or PPI `intid` is active (GICR_ISACTIVER0):
    /// acknowledged and not yet deactivated.
    pub fn active(&self, intid: IntId) -> Result<bool, GicError> {
        Self::check(intid)?;
        Ok(self.sgi.isactiver0.get() & intid.bit() != 0)
    }

    /// Clears the pending state of the SGI or PPI `intid` (an edge raised
    /// while it was disabled, say).
    pub fn clear_pending(&self, intid: IntId) -> Result<(), GicError> {
        Self::check(intid)?;
        self.sgi.icpendr0.set(intid.bit());
        Ok(())
    }

    fn check(intid: IntId) -> Result<(), GicError> {
        if intid.is_private() {
            Ok(())
        } else {
            Err(GicError::NotPrivate(intid))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::boxed::Box;
    use std::vec::Vec;

    /// A register block in ordinary memory, all registers 0.
    fn zeroed<T>() -> Box<T> {
        // SAFETY: the blocks are made of tock-registers cells (UnsafeCell
        // around integers) and byte-array padding, for which all zeroes is
        // a valid value.
        unsafe { Box::<T>::new_zeroed().assume_init() }
    }

    /// The bytes of a register block.
    fn bytes<T>(block: &T) -> Vec<u8> {
        let start = (block as *const T).cast::<u8>();
        // SAFETY: `block` is a live, initialised value of size_of::<T>()
        // bytes, and nothing writes it while we copy it.
        unsafe { core::slice::from_raw_parts(start, size_of::<T>()) }.to_vec()
    }

    /// (offset, old byte, new byte) of every byte that differs.
    fn changes(before: &[u8], after: &[u8]) -> Vec<(usize, u8, u8)> {
        before
            .iter()
            .zip(after)
            .enumerate()
            .filter(|(_, (b, a))| b != a)
            .map(|(i, (b, a))| (i, *b, *a))
            .collect()
    }

    #[test]
    fn intids() {
        assert_eq!(IntId::sgi(15).raw(), 15);
        assert!(IntId::sgi(0).is_sgi() && IntId::sgi(0).is_private());
        assert!(!IntId::from_raw(16).is_sgi() && IntId::from_raw(31).is_private());
        assert!(IntId::from_raw(32).is_spi() && !IntId::from_raw(32).is_private());
        assert!(IntId::from_raw(1019).is_spi() && !IntId::from_raw(1020).is_spi());
        assert_eq!(IntId::SPURIOUS.raw(), 1023);
        // The device-tree specifiers the VM's tree uses: the virtual timer
        // <1 11 4> and the UART <0 1 4>.
        assert_eq!(IntId::from_dt(1, 11), Some(IntId::from_raw(27)));
        assert_eq!(IntId::from_dt(0, 1), Some(IntId::from_raw(33)));
        assert_eq!(IntId::from_dt(1, 16), None);
        assert_eq!(IntId::from_dt(0, 988), None);
        assert_eq!(IntId::from_dt(2, 0), None, "extended SPI range");
        assert_eq!(IntId::from_raw(33).to_string(), "33");
    }

    #[test]
    #[should_panic(expected = "SGIs are INTIDs 0..=15")]
    fn sgi_16_is_no_sgi() {
        let _ = IntId::sgi(core::hint::black_box(16));
    }

    #[test]
    fn priority_steps_follow_the_implemented_bits() {
        assert_eq!(priority_step(5), 8, "QEMU's virtual CPU interface");
        assert_eq!(priority_step(4), 16);
        assert_eq!(priority_step(8), 1);
        assert_eq!(priority_step(0), 128, "clamped to 1 bit");
        assert_eq!(priority_step(9), 1, "clamped to 8 bits");
        assert_eq!(effective_priority(0x0f, 5), 0x08);
        assert_eq!(effective_priority(PRIORITY_MASK_OPEN, 5), 0xf8);
        assert_eq!(effective_priority(0xa3, 8), 0xa3);
    }

    /// The layout itself is checked in `gic_regs`; here, that the PE's
    /// affinity and the SGI get to it, and that only SGIs are sent.
    #[test]
    fn sgi1r_values_carry_target_and_sgi() {
        // SGI 15 to 1.2.3.4: Aff3 1 << 48, Aff2 2 << 32, INTID 15 << 24,
        // Aff1 3 << 16, TargetList bit 4.
        assert_eq!(
            sgi1r_value(Mpidr::from_affinity(1, 2, 3, 4), IntId::sgi(15)),
            Ok(0x0001_0002_0f03_0010)
        );
        assert_eq!(
            sgi1r_value(Mpidr::from_raw(0), IntId::from_raw(16)),
            Err(GicError::NotAnSgi(IntId::from_raw(16)))
        );
    }

    /// `GICD_IROUTER<n>`: Aff3 39:32, IRM 31, Aff2 23:16, Aff1 15:8, Aff0 7:0.
    #[test]
    fn irouter_values_match_the_field_layout() {
        assert_eq!(irouter_value(Mpidr::from_raw(7)), 0x7);
        assert_eq!(
            irouter_value(Mpidr::from_affinity(1, 2, 3, 4)),
            0x01_0002_0304
        );
        // MPIDR_EL1's U and MT bits are not affinity and never get in.
        assert_eq!(irouter_value(Mpidr::from_raw(0x8100_0002)), 0x2);
    }

    #[test]
    fn distributor_registers_are_where_the_spec_puts_them() {
        let gicd = zeroed::<Distributor>();
        let spi = IntId::from_raw(33);
        let before = bytes(&*gicd);
        gicd.configure_spi(spi, 0x80, Mpidr::from_affinity(1, 0, 2, 7))
            .unwrap();
        // GICD_IGROUPR1 bit 1 (0x84), GICD_IPRIORITYR byte 33 (0x421),
        // GICD_IROUTER<33> at 0x6000 + 8 * 33 = 0x6108: Aff0 7, Aff1 2,
        // Aff3 1 (byte 4).
        assert_eq!(
            changes(&before, &bytes(&*gicd)),
            [
                (0x84, 0, 0x02),
                (0x421, 0, 0x80),
                (0x6108, 0, 7),
                (0x6109, 0, 2),
                (0x610c, 0, 1)
            ]
        );
        assert_eq!(
            gicd.route_of(spi),
            Ok((Mpidr::from_affinity(1, 0, 2, 7), false))
        );
        let before = bytes(&*gicd);
        gicd.set_spi_enabled(spi, true).unwrap();
        // GICD_ISENABLER1 (0x104) bit 1.
        assert_eq!(changes(&before, &bytes(&*gicd)), [(0x104, 0, 0x02)]);
        assert_eq!(gicd.spi_enabled(spi), Ok(true));
        let before = bytes(&*gicd);
        gicd.set_spi_enabled(IntId::from_raw(1019), false).unwrap();
        // GICD_ICENABLER31 (0x180 + 4 * 31 = 0x1fc) bit 27 (byte 0x1ff, bit 3).
        assert_eq!(changes(&before, &bytes(&*gicd)), [(0x1ff, 0, 0x08)]);
        assert_eq!(
            gicd.configure_spi(IntId::from_raw(27), 0, Mpidr::default()),
            Err(GicError::NotAnSpi(IntId::from_raw(27)))
        );
        assert_eq!(
            gicd.set_spi_enabled(IntId::SPURIOUS, true),
            Err(GicError::NotAnSpi(IntId::SPURIOUS))
        );
    }

    #[test]
    fn distributor_enable_needs_a_single_security_state() {
        let gicd = zeroed::<Distributor>();
        assert_eq!(gicd.enable_group1(), Err(GicError::TwoSecurityStates));
        // DS (bit 6) set, as the hypervisor's vGIC reads: ARE (bit 4) and
        // EnableGrp1 (bit 1) are added.
        gicd.0.ctlr.set(1 << 6);
        assert_eq!(gicd.enable_group1(), Ok(()));
        assert_eq!(gicd.0.ctlr.get(), 1 << 6 | 1 << 4 | 1 << 1);
        // A write that never completes.
        gicd.0.ctlr.set(1 << 31 | 1 << 6);
        assert_eq!(gicd.enable_group1(), Err(GicError::Stuck("GICD_CTLR.RWP")));
    }

    #[test]
    fn redistributor_registers_are_where_the_spec_puts_them() {
        let rd = zeroed::<RdFrame>();
        let sgi = zeroed::<SgiFrame>();
        let redist = Redistributor::new(&rd, &sgi);
        let timer = IntId::from_raw(27);
        let before = bytes(&*sgi);
        redist.configure(timer, 0x48).unwrap();
        redist.set_enabled(timer, true).unwrap();
        // GICR_IGROUPR0 (0x80) and GICR_ISENABLER0 (0x100) bit 27 (byte 3,
        // bit 3); GICR_IPRIORITYR byte 27 (0x41b).
        assert_eq!(
            changes(&before, &bytes(&*sgi)),
            [(0x83, 0, 0x08), (0x103, 0, 0x08), (0x41b, 0, 0x48)]
        );
        assert_eq!(redist.priority(timer), Ok(0x48));
        assert_eq!(redist.enabled(timer), Ok(true));
        let before = bytes(&*sgi);
        redist.set_enabled(IntId::sgi(1), false).unwrap();
        redist.clear_pending(IntId::sgi(1)).unwrap();
        // GICR_ICENABLER0 (0x180) and GICR_ICPENDR0 (0x280) bit 1.
        assert_eq!(
            changes(&before, &bytes(&*sgi)),
            [(0x180, 0, 0x02), (0x280, 0, 0x02)]
        );
        assert_eq!(
            redist.configure(IntId::from_raw(32), 0),
            Err(GicError::NotPrivate(IntId::from_raw(32)))
        );
        // GICR_ISPENDR0 (0x200) reads the pending state.
        assert_eq!(redist.pending(IntId::sgi(15)), Ok(false));
        sgi.ispendr0.set(1 << 15);
        assert_eq!(redist.pending(IntId::sgi(15)), Ok(true));
        assert_eq!(redist.pending(IntId::sgi(14)), Ok(false));
        assert_eq!(core::mem::offset_of!(SgiFrame, ispendr0), 0x200);
        // GICR_ICPENDR0 (0x280) reads the pending state too.
        assert_eq!(redist.pending_in_icpendr(timer), Ok(false));
        sgi.icpendr0.set(1 << 27);
        assert_eq!(redist.pending_in_icpendr(timer), Ok(true));
        // GICR_ISACTIVER0 (0x300) reads the active state.
        assert_eq!(redist.active(timer), Ok(false));
        sgi.isactiver0.set(1 << 27);
        assert_eq!(redist.active(timer), Ok(true));
        assert_eq!(core::mem::offset_of!(SgiFrame, isactiver0), 0x300);
    }

    #[test]
    fn distributor_reads_and_clears_an_spis_state() {
        let gicd = zeroed::<Distributor>();
        let spi = IntId::from_raw(33);
        assert_eq!(gicd.spi_pending(spi), Ok(false));
        assert_eq!(gicd.spi_active(spi), Ok(false));
        // GICD_ISPENDR1 (0x204) and GICD_ISACTIVER1 (0x304), bit 1.
        gicd.0.ispendr[1].set(1 << 1);
        gicd.0.isactiver[1].set(1 << 1);
        assert_eq!(gicd.spi_pending(spi), Ok(true));
        assert_eq!(gicd.spi_active(spi), Ok(true));
        assert_eq!(gicd.spi_pending(IntId::from_raw(34)), Ok(false));
        let before = bytes(&*gicd);
        gicd.clear_spi_pending(spi).unwrap();
        // GICD_ICPENDR1 (0x284) bit 1.
        assert_eq!(changes(&before, &bytes(&*gicd)), [(0x284, 0, 0x02)]);
        assert_eq!(
            gicd.spi_pending(IntId::from_raw(27)),
            Err(GicError::NotAnSpi(IntId::from_raw(27)))
        );
    }

    #[test]
    fn redistributor_wakes_and_reads_its_typer() {
        let rd = zeroed::<RdFrame>();
        let sgi = zeroed::<SgiFrame>();
        let redist = Redistributor::new(&rd, &sgi);
        // ProcessorSleep (bit 1) set, ChildrenAsleep (bit 2) clear: the
        // wake clears ProcessorSleep.
        rd.waker.set(1 << 1);
        assert_eq!(redist.wake(), Ok(()));
        assert_eq!(rd.waker.get(), 0);
        // ChildrenAsleep never clears.
        rd.waker.set(1 << 2);
        assert_eq!(
            redist.wake(),
            Err(GicError::Stuck("GICR_WAKER.ChildrenAsleep"))
        );
        assert_eq!(redist.typer(), 0);
    }
}
