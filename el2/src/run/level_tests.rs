//! Level-sensitive interrupts through the runner, scripted step by step on
//! the fake machine: the virtual timer's PPI and the UART's SPI read
//! pending exactly while their line is high (or latched), wherever the
//! guest looks — GICR_ISPENDR0 / GICR_ICPENDR0 / GICR_ISACTIVER0 and the
//! distributor's registers, enabling the interrupt, the refill of its list
//! registers, after a vCPU switch, from another vCPU — and the timer's
//! physical PPI is ended by whoever owes it (`el2::devices::vtimer`).

use super::fake::{Fake, World};
use super::tests::{Spec, host};
use super::{Applied, Host, Runner};
use crate::devices::emul::pl011::{bits, offset as uart};
use crate::devices::vgic::{Lr, LrState};
use crate::devices::vtimer::PhysicalIrq;
use crate::guest::layout;
use crate::sched::PutReason;
use crate::trap::exit::Exit;
use crate::vcpu::{VcpuId, VmId};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use gic_regs::offset::*;
use gic_regs::{GICD_CTLR, REDISTRIBUTOR_SIZE, SGI_FRAME_OFFSET};
use pvlock_abi::pvlock::Variant;

const ENABLE: u64 = 1;
const IMASK: u64 = 1 << 1;

fn timer() -> u32 {
    layout::TIMER.virt.intid()
}

fn uart_spi() -> u32 {
    layout::UART_IRQ.intid()
}

/// One pCPU running a 2-vCPU VM, driven a step at a time.
struct Rig<'h> {
    world: Arc<World>,
    host: &'h Host<Fake>,
    runner: Runner<'h, Fake>,
}

fn world_and_host() -> (Arc<World>, Host<Fake>) {
    let world = World::new(1, 1, 7, u64::MAX);
    let host = host(
        &world,
        1,
        &[Spec {
            vcpus: 2,
            pv_lock: Some(Variant::SeedV2),
            affinity: None,
        }],
    );
    (world, host)
}

impl<'h> Rig<'h> {
    fn new(world: &Arc<World>, host: &'h Host<Fake>) -> Self {
        let runner = Runner::new(0, host, Fake::new(0, world.clone()));
        let mut rig = Self {
            world: world.clone(),
            host,
            runner,
        };
        rig.load(0);
        // The guest's GIC driver: Group 1 on.
        rig.mmio(
            layout::GICD.base + GICD_CTLR_OFFSET,
            Some(GICD_CTLR::EnableGrp1::SET.value.into()),
        );
        rig
    }

    fn now(&self) -> u64 {
        self.world.now()
    }

    fn advance(&self, ticks: u64) {
        self.world.clock.fetch_add(ticks, Ordering::Relaxed);
    }

    fn vcpu(index: u16) -> VcpuId {
        VcpuId { vm: VmId(0), index }
    }

    /// The scheduler picks vCPU `index` for the pCPU (it must be the one
    /// it picks) and the runner loads it.
    fn load(&mut self, index: u16) {
        let now = self.now();
        let picked = self.host.sched.lock().pick_next(0, now);
        assert_eq!(picked, Some(Self::vcpu(index)));
        let loaded = self.runner.load_picked(Self::vcpu(index), 0);
        assert!(loaded.is_some(), "its context is in its slot");
        self.runner.loaded = loaded;
    }

    /// The loaded vCPU is put (it yields).
    fn put(&mut self) {
        let loaded = self.runner.loaded.take().expect("a vCPU is loaded");
        let vm = &self.host.vms[0];
        self.runner.put(vm, loaded, PutReason::Yield);
        assert!(self.runner.loaded.is_none());
    }

    /// vCPU 1 powered on (runnable, queued).
    fn power_on_vcpu1(&self) {
        let now = self.now();
        self.host
            .sched
            .lock()
            .power_on(Self::vcpu(1), now)
            .expect("vCPU 1 was off");
    }

    /// The loaded vCPU exits with `exit`; its decision is applied and it
    /// resumes.
    fn exit(&mut self, exit: Exit) {
        let mut loaded = self.runner.loaded.take().expect("a vCPU is loaded");
        let vm = &self.host.vms[0];
        let decision = self
            .runner
            .handle_exit(vm, loaded.vcpu, &mut loaded.ctx, exit);
        let applied = self
            .runner
            .apply(vm, loaded.vcpu, &mut loaded.ctx, decision);
        assert_eq!(applied, Applied::Resume);
        self.runner.loaded = Some(loaded);
    }

    /// What the run loop does before each entry: a refill if anything is
    /// new for the vCPU.
    fn enter(&mut self) {
        let mut loaded = self.runner.loaded.take().expect("a vCPU is loaded");
        let vm = &self.host.vms[0];
        if vm.irq_attention.load(Ordering::Acquire) & (1 << loaded.vcpu.index) != 0 {
            self.runner
                .refresh_and_deliver(vm, loaded.vcpu, &mut loaded.ctx);
        }
        self.runner.loaded = Some(loaded);
    }

    /// A 32-bit load (`value` None) or store from the loaded vCPU at
    /// `ipa`; returns what a load read. Then the vCPU is entered again.
    fn mmio(&mut self, ipa: u64, value: Option<u64>) -> u32 {
        const RT: u64 = 10;
        if let Some(v) = value {
            self.ctx_mut().regs.x[RT as usize] = v;
        }
        let syndrome = Fake::data_abort(ipa, value.is_some(), RT);
        self.exit(Exit::decode(syndrome));
        self.enter();
        self.ctx_mut().regs.x[RT as usize] as u32
    }

    fn ctx_mut(&mut self) -> &mut super::VcpuContext<super::fake::FakeSaved> {
        &mut self.runner.loaded.as_mut().expect("a vCPU is loaded").ctx
    }

    /// A register of vCPU `of`'s SGI_base frame, read by the loaded vCPU.
    fn read_gicr(&mut self, of: u16, offset: u64) -> u32 {
        self.mmio(gicr(of, offset), None)
    }

    fn write_gicr(&mut self, of: u16, offset: u64, value: u32) {
        self.mmio(gicr(of, offset), Some(value.into()));
    }

    /// Whether the timer's PPI of vCPU 0 reads pending in GICR_ISPENDR0
    /// and in GICR_ICPENDR0 (they must agree), as the loaded vCPU reads.
    fn timer_pending(&mut self, of: u16) -> bool {
        let set = self.read_gicr(of, GICR_ISPENDR0) & 1 << timer() != 0;
        let clear = self.read_gicr(of, GICR_ICPENDR0) & 1 << timer() != 0;
        assert_eq!(set, clear, "GICR_ISPENDR0 and GICR_ICPENDR0 disagree");
        set
    }

    fn timer_active(&mut self, of: u16) -> bool {
        self.read_gicr(of, GICR_ISACTIVER0) & 1 << timer() != 0
    }

    /// The guest arms its timer `ticks` ahead.
    fn arm(&mut self, ticks: u64) {
        let due = self.now() + ticks;
        self.runner.machine_mut().set_timer(ENABLE, due);
    }

    /// The timer's PPI, signalled at the pCPU, makes the vCPU exit; then
    /// it is entered again.
    fn fire(&mut self) {
        assert!(
            self.runner.machine_mut().signal_timer(),
            "the PPI does not fire"
        );
        self.exit(Exit::Irq);
        self.enter();
    }

    /// vCPU 0's PPI enabled in the vGIC if `enabled`, its timer armed,
    /// past its deadline and fired.
    fn fire_after_deadline(&mut self, enabled: bool) {
        if enabled {
            self.write_gicr(0, GICR_ISENABLER0, 1 << timer());
        }
        self.arm(10);
        self.advance(20);
        self.fire();
    }

    fn lrs(&self) -> Vec<Lr> {
        self.runner.machine().list_registers_now()
    }

    fn timer_entry(&self) -> Option<Lr> {
        self.lrs().into_iter().find(|lr| lr.intid == timer())
    }

    fn ppi_active(&self) -> bool {
        self.runner.machine().timer_ppi_active
    }

    fn ended_by_runner(&self) -> u64 {
        self.world.timer_ppi_ended_by_runner.load(Ordering::Relaxed)
    }
}

const GICD_CTLR_OFFSET: u64 = gic_regs::offset::GICD_CTLR;

fn gicr(of: u16, offset: u64) -> u64 {
    layout::GICR_BASE + u64::from(of) * REDISTRIBUTOR_SIZE + SGI_FRAME_OFFSET + offset
}

/// How the guest takes its timer's line down.
#[derive(Clone, Copy, Debug)]
enum Lowering {
    Disable,
    Mask,
    MoveLater,
}

impl Lowering {
    fn apply(self, rig: &mut Rig<'_>) {
        let due = rig.now() + 1_000_000;
        let fake = rig.runner.machine_mut();
        match self {
            Lowering::Disable => fake.set_timer(0, 0),
            Lowering::Mask => fake.set_timer(ENABLE | IMASK, 0),
            Lowering::MoveLater => fake.set_timer(ENABLE, due),
        }
    }
}

const LOWERINGS: [Lowering; 3] = [Lowering::Disable, Lowering::Mask, Lowering::MoveLater];

/// Issue 18's sequence: the PPI masked at the redistributor, the timer
/// fires (the GIC shows it pending), the guest takes the line down and
/// unmasks the PPI: it is not pending, not active, and the refill puts
/// nothing in the list registers. The PPI no entry could carry was held
/// active while the line was high, and the runner ended it once low.
#[test]
fn a_masked_ppi_is_not_pending_once_the_line_went_down() {
    for lowering in LOWERINGS {
        let (world, host) = world_and_host();
        let mut rig = Rig::new(&world, &host);
        rig.fire_after_deadline(false);
        assert_eq!(rig.runner.vtimer_ppi, PhysicalIrq::HeldByHypervisor);
        assert!(rig.timer_pending(0), "{lowering:?}: pending once fired");
        assert!(!rig.timer_active(0));
        assert!(rig.ppi_active(), "held while the line is high");
        lowering.apply(&mut rig);
        assert!(!rig.timer_pending(0), "{lowering:?}: line down");
        assert!(!rig.timer_active(0));
        assert_eq!(rig.runner.vtimer_ppi, PhysicalIrq::Inactive);
        assert!(!rig.ppi_active());
        assert_eq!(rig.ended_by_runner(), 1);
        rig.write_gicr(0, GICR_ISENABLER0, 1 << timer());
        assert_eq!(rig.timer_entry(), None, "{lowering:?}: delivered");
        assert!(!rig.timer_pending(0));
    }
}

/// The same across vCPU switches: the line the vCPU leaves with stays
/// in the vGIC; while it is away another vCPU reads its redistributor and
/// sees the line its saved timer gives at that moment (it rose at the
/// deadline); once back, the guest takes the line down and unmasks the
/// PPI: not pending.
#[test]
fn the_line_follows_the_vcpu_out_and_back_and_another_vcpu_sees_it() {
    for lowering in LOWERINGS {
        let (world, host) = world_and_host();
        let mut rig = Rig::new(&world, &host);
        rig.power_on_vcpu1();
        rig.arm(100);
        assert!(!rig.timer_pending(0));
        rig.put();
        assert!(
            !host.vms[0].vgic.lock().irq_status(timer(), 0).unwrap().line,
            "left with the line low"
        );
        assert!(!rig.ppi_active());
        rig.load(1);
        assert!(!rig.timer_pending(0), "vCPU 0's deadline not reached");
        rig.advance(200);
        assert!(
            rig.timer_pending(0),
            "{lowering:?}: vCPU 0's timer passed its deadline while it was away"
        );
        rig.put();
        rig.load(0);
        // Its timer is back in hardware, its PPI fires at once.
        rig.fire();
        assert!(rig.timer_pending(0));
        lowering.apply(&mut rig);
        rig.put();
        rig.load(1);
        assert!(
            !rig.timer_pending(0),
            "{lowering:?}: left with the line down"
        );
        rig.put();
        rig.load(0);
        rig.write_gicr(0, GICR_ISENABLER0, 1 << timer());
        assert!(!rig.timer_pending(0));
        assert_eq!(rig.timer_entry(), None);
        assert!(!rig.ppi_active());
    }
}

/// A vCPU put with its timer's line high keeps it high in the vGIC, and
/// its PPI is ended for the next vCPU.
#[test]
fn a_put_with_the_line_high_ends_the_ppi_and_keeps_the_line() {
    let (world, host) = world_and_host();
    let mut rig = Rig::new(&world, &host);
    rig.power_on_vcpu1();
    rig.fire_after_deadline(false);
    assert!(rig.ppi_active());
    rig.put();
    assert!(!rig.ppi_active(), "the PPI left active for the next vCPU");
    assert_eq!(rig.runner.vtimer_ppi, PhysicalIrq::Inactive);
    assert!(host.vms[0].vgic.lock().irq_status(timer(), 0).unwrap().line);
    rig.load(1);
    assert!(rig.timer_pending(0));
}

/// The PPI enabled: the timer's interrupt goes into a hardware list
/// register entry that carries the physical PPI; the guest's EOI ends
/// both, and with the line still high it fires and is delivered again;
/// after IMASK, not.
#[test]
fn a_hardware_entry_carries_the_ppi_to_the_guests_eoi() {
    let (world, host) = world_and_host();
    let mut rig = Rig::new(&world, &host);
    rig.fire_after_deadline(true);
    let entry = rig.timer_entry().expect("delivered");
    assert_eq!(entry.state, LrState::Pending);
    assert_eq!(entry.physical, Some(timer() as u16));
    assert!(!entry.eoi_maintenance, "no maintenance interrupt for it");
    assert_eq!(rig.runner.vtimer_ppi, PhysicalIrq::HeldByGuest);
    // Acknowledged and completed with the line high: it comes again.
    rig.runner.machine_mut().acknowledge(timer());
    rig.runner.machine_mut().deactivate(timer());
    assert!(!rig.ppi_active(), "the guest's EOI ended the PPI");
    rig.fire();
    let again = rig.timer_entry().expect("delivered again");
    assert_eq!(
        (again.state, again.physical),
        (LrState::Pending, Some(timer() as u16))
    );
    // Completed after IMASK: nothing more.
    rig.runner.machine_mut().acknowledge(timer());
    Lowering::Mask.apply(&mut rig);
    rig.runner.machine_mut().deactivate(timer());
    assert!(!rig.runner.machine_mut().signal_timer());
    assert!(!rig.timer_pending(0));
    assert!(!rig.timer_active(0));
    assert_eq!(rig.timer_entry(), None);
    assert_eq!(rig.runner.vtimer_ppi, PhysicalIrq::Inactive);
    assert_eq!(rig.ended_by_runner(), 0, "the guest ended it each time");
}

/// The PPI enabled and in a list register, pending: the guest turns the
/// timer off before acknowledging and reads GICR_ISPENDR0. Not pending,
/// and the refill took it out of the list registers; the runner ended the
/// PPI.
#[test]
fn a_pending_entry_is_retracted_once_the_line_went_down() {
    let (world, host) = world_and_host();
    let mut rig = Rig::new(&world, &host);
    rig.fire_after_deadline(true);
    assert!(rig.timer_entry().is_some());
    Lowering::Disable.apply(&mut rig);
    assert!(!rig.timer_pending(0));
    assert_eq!(rig.timer_entry(), None, "still offered to the guest");
    assert!(!rig.ppi_active());
    assert_eq!(rig.ended_by_runner(), 1);
}

/// Acknowledged, with the line high: it reads active and pending, and
/// its entry stays an active hardware one (the pending part is the
/// physical PPI's, which fires again if the guest's EOI leaves the line
/// high); after IMASK, active and not pending; after the EOI, neither.
#[test]
fn an_acknowledged_ppi_reads_active_and_pending_while_its_line_is_high() {
    let (world, host) = world_and_host();
    let mut rig = Rig::new(&world, &host);
    rig.fire_after_deadline(true);
    rig.runner.machine_mut().acknowledge(timer());
    assert!(rig.timer_active(0));
    assert!(rig.timer_pending(0));
    let hardware_active = (LrState::Active, Some(timer() as u16));
    let entry = rig.timer_entry().unwrap();
    assert_eq!((entry.state, entry.physical), hardware_active);
    assert_eq!(rig.runner.vtimer_ppi, PhysicalIrq::HeldByGuest);
    Lowering::Mask.apply(&mut rig);
    assert!(!rig.timer_pending(0));
    assert!(rig.timer_active(0));
    let entry = rig.timer_entry().unwrap();
    assert_eq!((entry.state, entry.physical), hardware_active);
    rig.runner.machine_mut().deactivate(timer());
    assert!(!rig.timer_active(0));
    assert!(!rig.timer_pending(0));
    assert!(!rig.ppi_active());
    assert_eq!(rig.runner.vtimer_ppi, PhysicalIrq::Inactive);
}

/// Acknowledged, then switched out and back with its line still high: its
/// PPI was ended at the put, so it fires again at the next entry; the
/// entry the guest finds is active only (a hardware one once the PPI
/// fired), never pending and active. So once the guest sets IMASK and
/// completes it, nothing is left in its list registers to take before
/// the runner samples the line again (the boot test's `again` check
/// found that window with a pending and active entry).
#[test]
fn an_active_ppi_comes_back_from_a_switch_without_a_pending_part() {
    let (world, host) = world_and_host();
    let mut rig = Rig::new(&world, &host);
    rig.power_on_vcpu1();
    rig.fire_after_deadline(true);
    rig.runner.machine_mut().acknowledge(timer());
    rig.put();
    rig.load(1);
    rig.put();
    rig.load(0);
    rig.enter();
    assert_eq!(
        rig.timer_entry().map(|lr| (lr.state, lr.physical)),
        Some((LrState::Active, None))
    );
    rig.fire();
    assert_eq!(
        rig.timer_entry().map(|lr| (lr.state, lr.physical)),
        Some((LrState::Active, Some(timer() as u16)))
    );
    Lowering::Mask.apply(&mut rig);
    rig.runner.machine_mut().deactivate(timer());
    assert!(
        rig.lrs().iter().all(|lr| lr.intid != timer()),
        "left for the guest to take: {:?}",
        rig.lrs()
    );
    assert!(!rig.timer_pending(0));
    assert!(!rig.timer_active(0));
}

/// The UART's SPI: pending in GICD_ISPENDR while the UART asserts it,
/// not once it stops, not delivered when enabled; delivered with TXIM
/// unmasked, and GICD_ISACTIVER reads it active once acknowledged (what
/// the guest did with its list registers is folded back before the
/// read), not once completed.
#[test]
fn the_uarts_spi_reads_as_its_line_and_its_list_register_say() {
    let (world, host) = world_and_host();
    let mut rig = Rig::new(&world, &host);
    let spi = uart_spi();
    let word = u64::from(spi / 32) * 4;
    let bit = 1u32 << (spi % 32);
    let gicd = |offset: u64| layout::GICD.base + offset + word;
    let imsc = layout::UART.base + uart::IMSC;
    rig.mmio(
        layout::UART.base + uart::CR,
        Some((bits::CR_UARTEN | bits::CR_TXE).into()),
    );
    rig.mmio(imsc, Some(bits::INT_TX.into()));
    assert_ne!(rig.mmio(gicd(GICD_ISPENDR), None) & bit, 0);
    rig.mmio(imsc, Some(0));
    assert_eq!(rig.mmio(gicd(GICD_ISPENDR), None) & bit, 0);
    assert_eq!(rig.mmio(gicd(GICD_ICPENDR), None) & bit, 0);
    rig.mmio(gicd(GICD_ISENABLER), Some(bit.into()));
    assert!(rig.lrs().iter().all(|lr| lr.intid != spi));
    rig.mmio(imsc, Some(bits::INT_TX.into()));
    assert!(rig.lrs().iter().any(|lr| lr.intid == spi));
    rig.runner.machine_mut().acknowledge(spi);
    assert_ne!(rig.mmio(gicd(GICD_ISACTIVER), None) & bit, 0);
    rig.mmio(imsc, Some(0));
    assert_eq!(rig.mmio(gicd(GICD_ISPENDR), None) & bit, 0);
    rig.runner.machine_mut().deactivate(spi);
    assert_eq!(rig.mmio(gicd(GICD_ISACTIVER), None) & bit, 0);
    assert!(rig.lrs().iter().all(|lr| lr.intid != spi));
}
