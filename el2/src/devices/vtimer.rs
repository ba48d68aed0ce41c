//! The guest's virtual timer as an interrupt source: the level of its
//! output line, which the virtual GIC's PPI follows, and who owes the
//! deactivation of the physical PPI the timer raises at the pCPU while its
//! vCPU runs. Plain decisions; `el2::run` reads the registers and applies
//! them.
//!
//! # The line
//!
//! The timer asserts its interrupt while its condition is met, it is
//! enabled and its output is not masked: CNTV_CTL_EL0.ISTATUS, ENABLE and
//! not IMASK (Arm ARM D11.2.4, "Timers": the condition is met once the
//! virtual count, the physical count minus CNTVOFF_EL2, has reached
//! CNTV_CVAL_EL0). Nothing tells the hypervisor when the guest takes the
//! line down (it writes CNTV_CTL_EL0 or CNTV_CVAL_EL0 without a trap), so
//! the runner samples it wherever the guest could see the difference —
//! before every refill of the list registers (which a GIC register
//! access, a WFI, an injection or a maintenance interrupt asks for) and
//! when the vCPU is put — from the live CNTV_CTL_EL0 ([`line_of`]: the
//! hardware computes ISTATUS), and, for a vCPU that is off its pCPU, from
//! its saved registers and the count ([`rises_at`], [`line_at`]): the line
//! of a descheduled vCPU can only rise, at the deadline its registers
//! give. So the PPI's pending state is its latch (a GICR_ISPENDR0 write)
//! or the line as last sampled, and the guest never sees a stale one.
//!
//! # The physical PPI
//!
//! While a vCPU runs, its timer drives the pCPU's own virtual-timer PPI,
//! which the hypervisor takes at EL2. It completes the interrupt with a
//! priority drop only (ICC_CTLR_EL1.EOImode = 1), leaving it active, so
//! that its level line, still high, does not fire again and again before
//! the guest has handled the virtual one; it never writes the guest's
//! timer registers. Who deactivates it then ([`PhysicalIrq`]):
//! - the guest, when the virtual interrupt goes into a list register with
//!   HW = 1 and the PPI as pINTID: deactivating the virtual interrupt
//!   deactivates the physical one (Arm IHI 0069, "Physical and virtual
//!   interrupts": `ICH_LR<n>_EL2`.HW), and, with the line still high, the
//!   PPI fires again at once and the vGIC sees it pending again — KVM's
//!   scheme, with no maintenance interrupt per timer interrupt;
//! - the hypervisor (ICC_DIR_EL1) when no list register can carry it (the
//!   PPI is disabled in the vGIC, or pending and active at once, which a
//!   hardware entry cannot say, the physical pending state standing in
//!   for it) and the line has gone low; while the line stays high it keeps
//!   the PPI active, or it would fire without end;
//! - the hypervisor, always, when the vCPU leaves the pCPU: the next
//!   vCPU's timer must be able to fire there.

use crate::devices::vgic::LrState;
use aarch64_cpu::registers::CNTV_CTL_EL0;
use tock_registers::LocalRegisterCopy;

type Control = LocalRegisterCopy<u64, CNTV_CTL_EL0::Register>;

/// The line from CNTV_CTL_EL0 as the hardware last computed it (read live,
/// or saved when the vCPU was put): ISTATUS, ENABLE and not IMASK.
pub fn line_of(ctl: u64) -> bool {
    let ctl = Control::new(ctl);
    ctl.is_set(CNTV_CTL_EL0::ISTATUS)
        && ctl.is_set(CNTV_CTL_EL0::ENABLE)
        && !ctl.is_set(CNTV_CTL_EL0::IMASK)
}

/// The physical count at which the line of a timer with these registers
/// is (or was) raised: CNTV_CVAL_EL0 + CNTVOFF_EL2 while it is enabled and
/// not masked; `None` if it never is.
pub fn rises_at(ctl: u64, cval: u64, cntvoff: u64) -> Option<u64> {
    let ctl = Control::new(ctl);
    (ctl.is_set(CNTV_CTL_EL0::ENABLE) && !ctl.is_set(CNTV_CTL_EL0::IMASK))
        .then(|| cval.wrapping_add(cntvoff))
}

/// The line of a saved timer at physical count `now`.
pub fn line_at(ctl: u64, cval: u64, cntvoff: u64, now: u64) -> bool {
    rises_at(ctl, cval, cntvoff).is_some_and(|at| at <= now)
}

/// Who must deactivate the physical virtual-timer PPI of the pCPU a vCPU
/// runs on (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PhysicalIrq {
    /// Inactive: it fires when the loaded vCPU's line is high.
    #[default]
    Inactive,
    /// Active, and only the hypervisor's ICC_DIR_EL1 write will end it.
    HeldByHypervisor,
    /// Active, and the hardware entry of the virtual interrupt in a list
    /// register ends it when the guest deactivates that.
    HeldByGuest,
}

/// What [`PhysicalIrq::refill`] asks of the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refill {
    /// Make the timer's new list register entry a hardware one
    /// (`ListRegisters::map_hardware`).
    pub map: bool,
    /// Deactivate the physical PPI now (ICC_DIR_EL1).
    pub deactivate: bool,
}

impl PhysicalIrq {
    /// The hypervisor took the PPI and left it active (priority drop only).
    /// It could fire only if it was inactive: any hardware entry that held
    /// it was deactivated by the guest first.
    pub fn fired(&mut self) {
        *self = Self::HeldByHypervisor;
    }

    /// The list registers were read back; `hardware_entry` is the state of
    /// the timer's hardware entry among them, if it had one. Invalid means
    /// the guest deactivated it, and the physical PPI with it; any other
    /// state leaves the PPI active with nobody to end it but the
    /// hypervisor until an entry carries it again.
    fn read_back(&mut self, hardware_entry: Option<LrState>) {
        if *self == Self::HeldByGuest {
            *self = match hardware_entry {
                Some(LrState::Invalid) => Self::Inactive,
                _ => Self::HeldByHypervisor,
            };
        }
    }

    /// The list registers were read back (`hardware_entry` as for
    /// `read_back`) and filled again, the timer's virtual interrupt
    /// now `placed` in one (its state) or not, its line sampled as `line`:
    /// hand the PPI to a hardware entry when one can carry it, else
    /// deactivate it once the line is low.
    pub fn refill(
        &mut self,
        hardware_entry: Option<LrState>,
        placed: Option<LrState>,
        line: bool,
    ) -> Refill {
        self.read_back(hardware_entry);
        let mut refill = Refill::default();
        if *self == Self::HeldByHypervisor {
            if placed.is_some_and(LrState::may_be_hardware) {
                *self = Self::HeldByGuest;
                refill.map = true;
            } else if !line {
                *self = Self::Inactive;
                refill.deactivate = true;
            }
        }
        refill
    }

    /// The vCPU leaves the pCPU (its list registers read back, as for
    /// `read_back`): true if the PPI is still active and must be
    /// deactivated now.
    pub fn put(&mut self, hardware_entry: Option<LrState>) -> bool {
        self.read_back(hardware_entry);
        core::mem::take(self) == Self::HeldByHypervisor
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LrState::{Active, Invalid, Pending, PendingActive};

    const ENABLE: u64 = 1;
    const IMASK: u64 = 1 << 1;
    const ISTATUS: u64 = 1 << 2;

    #[test]
    fn the_line_is_the_condition_while_enabled_and_unmasked() {
        assert!(line_of(ENABLE | ISTATUS));
        assert!(!line_of(ENABLE | ISTATUS | IMASK), "masked");
        assert!(!line_of(ISTATUS), "disabled");
        assert!(!line_of(ENABLE), "condition not met");
        assert!(!line_of(0));
        // The register's other bits are RES0.
        assert!(line_of(ENABLE | ISTATUS | 0xffff_0000));
    }

    #[test]
    fn a_saved_timer_rises_at_its_compare_value_plus_the_offset() {
        assert_eq!(rises_at(ENABLE, 1000, 0), Some(1000));
        assert_eq!(rises_at(ENABLE, 1000, 250), Some(1250));
        assert_eq!(rises_at(ENABLE | IMASK, 1000, 0), None, "masked");
        assert_eq!(rises_at(IMASK, 1000, 0), None, "disabled");
        assert_eq!(rises_at(0, 1000, 0), None);
        // ISTATUS as saved does not matter: the count moved on since.
        assert_eq!(rises_at(ENABLE | ISTATUS, 1000, 0), Some(1000));
        assert!(!line_at(ENABLE, 1000, 250, 1249));
        assert!(line_at(ENABLE, 1000, 250, 1250));
        assert!(line_at(ENABLE, 1000, 250, u64::MAX));
        assert!(!line_at(ENABLE | IMASK, 1000, 0, 5000));
        assert!(!line_at(0, 0, 0, 5000));
    }

    #[test]
    fn a_fired_ppi_goes_to_a_list_register_that_can_carry_it() {
        for state in [Pending, Active] {
            let mut p = PhysicalIrq::Inactive;
            p.fired();
            let r = p.refill(None, Some(state), true);
            assert_eq!(
                r,
                Refill {
                    map: true,
                    deactivate: false
                },
                "{state:?}"
            );
            assert_eq!(p, PhysicalIrq::HeldByGuest);
        }
    }

    #[test]
    fn a_ppi_no_entry_carries_is_held_while_the_line_is_high() {
        // Not placed (the PPI disabled in the vGIC), or pending and active
        // (a hardware entry cannot be both): held while high...
        for placed in [None, Some(PendingActive)] {
            let mut p = PhysicalIrq::Inactive;
            p.fired();
            assert_eq!(p.refill(None, placed, true), Refill::default());
            assert_eq!(p, PhysicalIrq::HeldByHypervisor);
            // ... and deactivated by the hypervisor once it is low.
            assert_eq!(
                p.refill(None, placed, false),
                Refill {
                    map: false,
                    deactivate: true
                }
            );
            assert_eq!(p, PhysicalIrq::Inactive);
            // Then there is nothing to do.
            assert_eq!(p.refill(None, placed, false), Refill::default());
            assert_eq!(p.refill(None, Some(Pending), true), Refill::default());
        }
    }

    #[test]
    fn the_guests_deactivation_through_the_hardware_entry_ends_it() {
        let mut p = PhysicalIrq::HeldByGuest;
        // Read back invalid: the guest deactivated it, the PPI with it.
        assert_eq!(p.refill(Some(Invalid), None, false), Refill::default());
        assert_eq!(p, PhysicalIrq::Inactive);
        // Still pending or active in the entry: the PPI is still active;
        // placed again, the new entry carries it; not placed, the
        // hypervisor ends it once the line is low.
        for state in [Pending, Active] {
            let mut p = PhysicalIrq::HeldByGuest;
            assert!(p.refill(Some(state), Some(state), true).map);
            assert_eq!(p, PhysicalIrq::HeldByGuest);
            let mut p = PhysicalIrq::HeldByGuest;
            assert_eq!(
                p.refill(Some(state), None, false),
                Refill {
                    map: false,
                    deactivate: true
                }
            );
            let mut p = PhysicalIrq::HeldByGuest;
            assert_eq!(p.refill(Some(state), None, true), Refill::default());
            assert_eq!(p, PhysicalIrq::HeldByHypervisor);
        }
    }

    #[test]
    fn firing_again_after_the_guests_deactivation_is_not_undone_by_the_read_back() {
        // The guest deactivated the hardware entry with the line high: the
        // PPI fired again before the list registers were read back, which
        // shows the old entry invalid. The PPI is active again.
        let mut p = PhysicalIrq::HeldByGuest;
        p.fired();
        let r = p.refill(Some(Invalid), Some(Pending), true);
        assert_eq!(
            r,
            Refill {
                map: true,
                deactivate: false
            }
        );
        assert_eq!(p, PhysicalIrq::HeldByGuest);
    }

    #[test]
    fn a_put_deactivates_whatever_is_still_active() {
        let mut p = PhysicalIrq::HeldByHypervisor;
        assert!(p.put(None));
        assert_eq!(p, PhysicalIrq::Inactive);
        for (entry, active) in [
            (Some(Invalid), false),
            (Some(Active), true),
            (Some(Pending), true),
        ] {
            let mut p = PhysicalIrq::HeldByGuest;
            assert_eq!(p.put(entry), active, "{entry:?}");
            assert_eq!(p, PhysicalIrq::Inactive);
        }
        let mut p = PhysicalIrq::Inactive;
        assert!(!p.put(Some(Invalid)), "never deactivate an inactive PPI");
    }
}
