//! Hypercalls (HVC, and SMC trapped by HCR_EL2.TSC): the VM's SMCCC
//! dispatcher answers the call in the caller's registers and says what
//! happens next (a [`crate::trap::decision::Next`]: power a vCPU on or off, suspend, stop or
//! reset the VM, kick, directed yield, a WFx policy change), which
//! `Runner::apply` carries out.

use super::machine::{Machine, VcpuContext};
use super::vm::Vm;
use super::{Decision, Runner};
use crate::guest::layout;
use crate::sched::Scheduler;
use crate::services::smccc::{PowerState, VmView};
use crate::vcpu::{VcpuId, VmId};
use boot::sync::SpinMutex as Mutex;
use platform::Mpidr;

/// The dispatcher's view of a VM: its vCPUs' MPIDRs and power states, its
/// RAM, the clocks. The scheduler is locked only for a power state (PSCI
/// CPU_ON and AFFINITY_INFO), so no other call waits for it; the runner
/// checks CPU_ON's target again when it carries the call out.
struct View<'a, M: Machine> {
    vm: &'a Vm<M>,
    vms: &'a [Vm<M>],
    sched: &'a Mutex<Scheduler>,
    machine: &'a M,
    wall_clock: Option<&'a crate::services::wallclock::WallClock>,
}

impl<M: Machine> VmView for View<'_, M> {
    fn vcpu_count(&self) -> u16 {
        self.vm.vcpu_count()
    }

    fn mpidr_of(&self, index: u16) -> Mpidr {
        layout::vcpu_mpidr(index)
    }

    fn vcpu_of_mpidr(&self, mpidr: Mpidr) -> Option<u16> {
        layout::vcpu_index(mpidr).filter(|&i| i < self.vcpu_count())
    }

    fn power_state(&self, index: u16) -> PowerState {
        self.sched
            .lock()
            .power_state(VcpuId {
                vm: self.vm.id,
                index,
            })
            .unwrap_or(PowerState::Off)
    }

    fn counter(&self, physical: bool) -> u64 {
        let now = self.machine.counter();
        if physical {
            now
        } else {
            now.wrapping_sub(self.vm.registers.cntvoff)
        }
    }

    fn wall_clock_ns(&self) -> Option<u64> {
        self.wall_clock
            .map(|clock| clock.ns_at(self.machine.counter()))
    }

    fn vm_vcpu_count(&self, vm: VmId) -> Option<u16> {
        self.vms.get(usize::from(vm.0)).map(Vm::vcpu_count)
    }

    fn ram_contains(&self, ipa: u64, len: u64) -> bool {
        let ram = self.vm.layout.ram;
        ipa >= ram.base && ipa.checked_add(len).is_some_and(|end| end <= ram.end())
    }
}

impl<'h, M: Machine> Runner<'h, M> {
    /// The SMCCC call in the caller's registers. Inlined into the exit
    /// path (`Runner::handle_and_apply`), as the dispatcher is into it:
    /// every directed yield and kick comes this way (7 instructions per
    /// yield and vCPU switch, measured).
    #[inline(always)]
    pub(super) fn hypercall(
        &mut self,
        vm: &'h Vm<M>,
        vcpu: VcpuId,
        ctx: &mut VcpuContext<M::Saved>,
        imm: u16,
    ) -> Decision {
        if imm != 0 {
            // SMCCC: only immediate 0 is a call; answer as an unknown
            // function.
            ctx.regs.x[0] = pvlock_abi::smccc::ret_to_x0(pvlock_abi::smccc::NOT_SUPPORTED);
            return Decision::RESUME;
        }
        let host = self.host;
        Decision::new(vm.dispatcher.dispatch(
            vcpu,
            &mut ctx.regs,
            &View {
                vm,
                vms: &host.vms,
                sched: &host.sched,
                machine: &self.machine,
                wall_clock: host.wall_clock.as_ref(),
            },
        ))
    }
}
