//! Trapped accesses to the emulated devices: a data abort is routed
//! through the VM's device map (`guest::layout::device_map`) to its PL011,
//! its virtual GIC or its (empty) virtio-mmio transports; an access
//! nothing answers gets a synchronous external abort. Also the SGI generation registers, which reach the
//! virtual GIC as system-register traps. Each access returns the vCPUs
//! its virtual GIC change made an interrupt deliverable to; the decision
//! carries them to `Runner::apply`.

use super::machine::{Machine, VcpuContext};
use super::vm::{MachineConsole, VgicCounters, Vm};
use super::{Decision, Runner, exits};
use crate::devices::emul::AccessError;
use crate::devices::emul::pl011::Pl011;
use crate::devices::emul::virtio_mmio::EmptyTransports;
use crate::devices::vgic::VcpuMask;
use crate::devices::vtimer;
use crate::guest::layout::{self, EmulatedDevice};
use crate::trap::exit::DataAbort;
use crate::trap::fault::GuestFault;
use crate::trap::mmio::{self, MmioAccess};
use crate::trap::sysreg::SgiRegister;
use crate::vcpu::VcpuId;
use core::sync::atomic::Ordering;

/// A trapped access routed to an emulated device.
struct Routed {
    access: MmioAccess,
    device: EmulatedDevice,
    /// The access's offset in the device's frame.
    offset: u64,
    /// The guest virtual address, for an injected abort.
    far: u64,
}

impl<'h, M: Machine> Runner<'h, M> {
    pub(super) fn data_abort(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        abort: DataAbort,
    ) -> Decision {
        let far = abort.far;
        let access = match abort.access {
            Ok(access) => access,
            Err(why) => {
                self.abort_data_access(
                    vm,
                    vcpu,
                    ctx,
                    far,
                    abort.write,
                    format_args!("undecodable access at VA {far:#x}: {why}; abort"),
                );
                return Decision::RESUME;
            }
        };
        let targets = match vm.devices.route(access.ipa, access.size) {
            Some((&device, offset)) => {
                let routed = Routed {
                    access,
                    device,
                    offset,
                    far,
                };
                match routed.device {
                    EmulatedDevice::Uart => self.uart_access(vm, vcpu, ctx, &routed),
                    EmulatedDevice::Distributor | EmulatedDevice::Redistributors => {
                        self.gic_access(vm, vcpu, ctx, &routed)
                    }
                    EmulatedDevice::VirtioMmio => {
                        self.virtio_mmio_access(vm, vcpu, ctx, &routed);
                        VcpuMask::EMPTY
                    }
                }
            }
            None => {
                self.abort_data_access(
                    vm,
                    vcpu,
                    ctx,
                    far,
                    access.write,
                    format_args!(
                        "{} at IPA {:#x} outside its memory; synchronous external abort",
                        if access.write { "write" } else { "read" },
                        access.ipa
                    ),
                );
                VcpuMask::EMPTY
            }
        };
        Decision::delivering(targets)
    }

    /// Injects a synchronous external abort for a data access at guest VA
    /// `far` that cannot complete, logging `why` while the VM's faults are
    /// still worth logging (`el2::trap::fault::worth_logging`).
    fn abort_data_access(
        &mut self,
        vm: &Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        far: u64,
        write: bool,
        why: core::fmt::Arguments<'_>,
    ) {
        if let Some(nth) = vm.fault_to_log() {
            log::warn!(
                "{vcpu} ({}): {why} injected (fault {nth} of this VM)",
                vm.name
            );
        }
        self.inject(
            ctx,
            GuestFault::DataAbort {
                address: far,
                write,
            },
        );
    }

    /// A guest access to its PL011.
    fn uart_access(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        routed: &Routed,
    ) -> VcpuMask {
        let (access, offset) = (&routed.access, routed.offset);
        let mut uart = vm.console.lock();
        let result = if access.write {
            let value = mmio::write_value(&ctx.regs, access);
            uart.write(
                offset,
                access.size,
                value,
                &mut MachineConsole(&self.machine),
            )
        } else {
            uart.read(offset, access.size)
                .map(|value| mmio::complete_read(&mut ctx.regs, access, value))
        };
        let targets = uart_line_follow(vm, &uart);
        drop(uart);
        self.finish_access(vm, vcpu, ctx, routed, result, "UART");
        targets
    }

    /// Ends an emulated access the device model answered with `result`:
    /// the guest moves past the instruction, or gets an abort when the
    /// model refused the access (`device` names it in the log).
    fn finish_access(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        routed: &Routed,
        result: Result<(), AccessError>,
        device: &str,
    ) {
        match result {
            Ok(()) => mmio::skip_instruction(&mut ctx.regs, &routed.access),
            Err(e) => self.abort_data_access(
                vm,
                vcpu,
                ctx,
                routed.far,
                routed.access.write,
                format_args!("{device} {e}; abort"),
            ),
        }
    }

    /// A guest access to its virtio-mmio window: a read gets the empty
    /// transports' register image, a write is dropped; both complete (an
    /// access of a width the window refuses gets an abort).
    fn virtio_mmio_access(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        routed: &Routed,
    ) {
        let (access, offset) = (&routed.access, routed.offset);
        let window = EmptyTransports;
        let result = if access.write {
            window.write(offset, access.size)
        } else {
            window
                .read(offset, access.size)
                .map(|value| mmio::complete_read(&mut ctx.regs, access, value))
        };
        self.finish_access(vm, vcpu, ctx, routed, result, "virtio-mmio");
    }

    /// A guest access to its virtual GIC's distributor or redistributors.
    /// Reserved offsets and read-only registers are RAZ/WI as on a real
    /// GIC; an access of a size or alignment the register does not take
    /// gets a synchronous external abort.
    ///
    /// The access sees the vGIC as of now: first what the guest did with
    /// its list registers goes back into the model and its timer's line is
    /// sampled (`Runner::vgic_refresh`), and an access to the
    /// redistributor of another vCPU that is off its pCPU sees that
    /// vCPU's timer line as its saved registers give it now
    /// ([`Self::sample_saved_timer`]). (One running on another pCPU is
    /// seen as of its last exit: reads of another running PE's
    /// redistributor race with it anyway.)
    fn gic_access(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        routed: &Routed,
    ) -> VcpuMask {
        let (access, offset) = (&routed.access, routed.offset);
        let ipa = access.ipa;
        let value = mmio::write_value(&ctx.regs, access);
        let distributor = routed.device == EmulatedDevice::Distributor;
        let (mut targets, _) = self.vgic_refresh(vm, vcpu.index, ctx);
        let frame_vcpu = (!distributor)
            .then(|| vm.vgic.lock().redistributor_vcpu(offset))
            .flatten();
        if let Some(other) = frame_vcpu.filter(|&other| other != vcpu.index) {
            targets |= self.sample_saved_timer(vm, other);
        }
        let (result, woken) = {
            let mut gic = vm.vgic.lock();
            let result = match (distributor, access.write) {
                (true, false) => gic.dist_read(offset, access.size),
                (true, true) => gic.dist_write(offset, access.size, value).map(|()| 0),
                (false, false) => gic.redist_read(offset, access.size),
                (false, true) => gic.redist_write(offset, access.size, value).map(|()| 0),
            };
            (result, gic.take_wakeups())
        };
        // The writer's own list registers may hold an interrupt the write
        // changed (disabled it, cleared its pending state, moved it):
        // resync them before it re-enters. GIC writes are rare; this costs
        // one refill.
        targets |= woken;
        if access.write {
            targets.insert(vcpu.index);
        }
        match result {
            Ok(read) => {
                if !access.write {
                    mmio::complete_read(&mut ctx.regs, access, read);
                }
                mmio::skip_instruction(&mut ctx.regs, access);
            }
            Err(e) if !e.aborts() => {
                log::debug!("{vcpu} ({}): GIC access at IPA {ipa:#x}: {e}", vm.name);
                if !access.write {
                    mmio::complete_read(&mut ctx.regs, access, 0);
                }
                mmio::skip_instruction(&mut ctx.regs, access);
            }
            Err(e) => self.abort_data_access(
                vm,
                vcpu,
                ctx,
                routed.far,
                access.write,
                format_args!("GIC access at IPA {ipa:#x}: {e}; abort"),
            ),
        }
        targets
    }

    /// The virtual timer line of vCPU `index` as its saved registers give
    /// it now, into the vGIC, if the vCPU is off its pCPU (its context in
    /// its slot): while it is away its line can only rise, at the deadline
    /// its registers set (`el2::devices::vtimer`). Returns the vCPUs to
    /// tell.
    fn sample_saved_timer(&self, vm: &Vm<M>, index: u16) -> VcpuMask {
        let Some(slot) = vm.vcpus.get(usize::from(index)) else {
            return VcpuMask::EMPTY;
        };
        // The slot stays locked while the vGIC follows: the vCPU cannot be
        // loaded, and its runner change the line, in between.
        let mut slot = slot.lock();
        let Some(ctx) = slot.as_mut() else {
            return VcpuMask::EMPTY;
        };
        let timer = &mut ctx.vtimer;
        let line = vtimer::line_at(
            timer.ctl,
            timer.cval,
            vm.registers.cntvoff,
            self.machine.counter(),
        );
        if line == timer.line {
            return VcpuMask::EMPTY;
        }
        exits::follow_vtimer_line(&mut vm.vgic.lock(), index, timer, line)
    }

    /// A guest write to an SGI generation register (it traps:
    /// HCR_EL2.IMO). Returns the vCPUs the SGI is now pending for.
    pub(super) fn send_sgi(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        register: SgiRegister,
        value: u64,
    ) -> VcpuMask {
        match register {
            SgiRegister::Group1 => {
                VgicCounters::count(&vm.vgic_stats.sgis);
                vm.vgic
                    .lock()
                    .send_sgi(vcpu.index, value)
                    .unwrap_or_default()
            }
            // One Security state (GICD_CTLR.DS = 1): no other state's Group
            // 1 to send to; and every SGI is Group 1 unless the guest made
            // it Group 0, which only a Group 0 SGI register write would
            // reach — not offered: both are ignored, as
            // docs/linux-guests.md says.
            SgiRegister::OtherGroup1 | SgiRegister::Group0 => {
                log::debug!("{vcpu} ({}): {register:?} SGI write ignored", vm.name);
                VcpuMask::EMPTY
            }
        }
    }
}

/// Makes the virtual GIC's SPI follow the UART's interrupt line after an
/// access or new input; call it with the `console` lock held (`uart` is
/// the guarded model) and give the result to `Runner::deliver` after
/// releasing it. The vGIC is updated under the console lock (the vGIC
/// lock is a leaf, taken inside), so the order of line changes is the
/// order of the UART accesses that made them: two pCPUs — a guest access
/// on one, input forwarded on the other — cannot apply their levels in
/// the wrong order and leave the virtual line low under a UART that is
/// asserting. Returns the vCPUs to tell.
pub(super) fn uart_line_follow<M: Machine>(vm: &Vm<M>, uart: &Pl011) -> VcpuMask {
    let level = uart.irq_level();
    if vm.uart_line.swap(level, Ordering::AcqRel) == level {
        return VcpuMask::EMPTY;
    }
    if level {
        VgicCounters::count(&vm.vgic_stats.spi);
    }
    let intid = layout::UART_IRQ.intid();
    let mut gic = vm.vgic.lock();
    let mut targets = gic.set_level(intid, 0, level).unwrap_or_default();
    // A line that drops takes the pending state away (Arm IHI 0069,
    // "Interrupt handling state machine": a level-sensitive interrupt is
    // pending only while asserted). If the interrupt sits in a vCPU's list
    // register, that entry still says pending: the vCPU must resync its
    // list registers before the guest can acknowledge it a second time
    // (typically the vCPU whose UART access lowered the line, about to
    // re-enter).
    if !level && let Some(holder) = gic.irq_status(intid, 0).and_then(|status| status.in_lr) {
        targets.insert(holder);
    }
    targets
}
