//! A VM's life after creation: stopping every vCPU (SYSTEM_OFF,
//! SYSTEM_RESET, the last CPU_OFF), then powering the VM off or reloading
//! and restarting it; and the summary printed when every VM is off.

use super::machine::Machine;
use super::vm::{MachineConsole, Vm, VmState};
use super::{Host, Runner};
use crate::sched::{CpuSet, InitialState, SchedError, Scheduler, millis};
use crate::vcpu::VcpuId;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;
use core::sync::atomic::Ordering;

/// Gives `vm`'s vCPUs to the scheduler (vCPU 0 runnable, the others off
/// until CPU_ON), with the VM's CPU affinity and time slice; vCPU 0's PV record says
/// "preempted" until it first runs, as for every runnable vCPU not
/// running. The scheduler must number the VM as `vm.id` (VMs are added
/// in id order).
pub fn register_vcpus<M: Machine>(
    machine: &M,
    sched: &mut Scheduler,
    vm: &Vm<M>,
    now: u64,
) -> Result<(), String> {
    let id = sched
        .add_vm(vm.config.cpu_weight)
        .map_err(|e| alloc::format!("{e}"))?;
    if id != vm.id {
        return Err(alloc::format!(
            "scheduler numbered the VM {} instead of {}",
            id.0,
            vm.id.0
        ));
    }
    sched
        .set_vm_slice(
            id,
            super::us_to_ticks(
                machine.counter_frequency(),
                u64::from(vm.config.time_slice_us),
            ),
        )
        .map_err(|e| alloc::format!("{e}"))?;
    let affinity = vm.config.cpu_affinity.as_ref().map(|cpus| {
        let mut set = CpuSet::default();
        for &c in cpus {
            set.insert(c as usize);
        }
        set
    });
    for index in 0..vm.vcpu_count() {
        let initial = if index == 0 {
            InitialState::Runnable
        } else {
            InitialState::Off
        };
        sched
            .add_vcpu(vm.id, affinity, initial, now)
            .map_err(|e| alloc::format!("{e}"))?;
        if initial == InitialState::Runnable {
            vm.write_preempted(machine, index, pvlock_abi::pvlock::VcpuState64::PREEMPTED);
        }
    }
    Ok(())
}

impl<'h, M: Machine> Runner<'h, M> {
    /// Starts stopping every vCPU of `vm` (SYSTEM_OFF / SYSTEM_RESET): the
    /// ones not running are turned off here, the running ones see the VM's
    /// state at their next exit (an IPI makes that soon).
    #[cold]
    #[inline(never)]
    pub(super) fn stop_vm(&self, vm: &Vm<M>, s: &mut Scheduler, reset: bool) {
        let to = if reset {
            VmState::Resetting
        } else {
            VmState::Stopping
        };
        if !vm.leave_running(to) {
            return;
        }
        let now = self.machine.counter();
        for index in 0..vm.vcpu_count() {
            let v = VcpuId { vm: vm.id, index };
            if let Err(SchedError::Running { pcpu: other }) = s.power_off(v, now)
                && other != self.pcpu
            {
                self.machine.send_reschedule(other);
            }
        }
    }

    /// Every vCPU of `vm` is off: power the VM off, or reload and restart
    /// it.
    pub(super) fn vm_stopped(&mut self, vm: &'h Vm<M>) {
        match vm.state() {
            VmState::Resetting => self.restart(vm),
            VmState::Stopping | VmState::Running => {
                // Running: every vCPU did CPU_OFF; treat it as SYSTEM_OFF.
                vm.set_state(VmState::Off);
                vm.console.lock().flush(&mut MachineConsole(&self.machine));
                self.machine
                    .console_line(format_args!("el2: vm {} powered off", vm.name));
                self.print_run_times(vm);
                let host = self.host;
                if host.vms.iter().all(|v| v.state() == VmState::Off) {
                    host.all_off.store(true, Ordering::Release);
                    for pcpu in 0..host.pcpus {
                        self.machine.send_reschedule(pcpu);
                    }
                }
            }
            VmState::Off => {}
        }
    }

    /// Prints the pCPU time each VM has run so far, at `vm`'s power-off:
    /// up to the first power-off every VM competed for the pCPUs, so the
    /// first such line shows the shares the fair-share scheduler gave
    /// (el2 `sched`, "Fair share"), which the end-of-run summary blurs
    /// with the time the last VMs ran alone.
    #[cold]
    fn print_run_times(&self, vm: &Vm<M>) {
        let hz = self.machine.counter_frequency().max(1);
        let now = self.machine.counter();
        // The figures under the scheduler lock, the formatting after it:
        // every pCPU's next switch waits for that lock.
        let run_ticks: Vec<Option<u64>> = {
            let s = self.host.sched.lock();
            self.host
                .vms
                .iter()
                .map(|other| s.vm_stats(other.id, now).map(|st| st.total.run_ticks))
                .collect()
        };
        let mut line = String::new();
        for (other, ticks) in self.host.vms.iter().zip(run_ticks) {
            if let Some(ticks) = ticks {
                let _ = write!(line, " {} {}", other.name, millis(ticks, hz));
            }
        }
        self.machine.console_line(format_args!(
            "el2: run time at vm {}'s power-off:{line}",
            vm.name
        ));
    }

    /// SYSTEM_RESET, every vCPU off and saved: forget the VM's run-time
    /// state, reload its memory and start vCPU 0 at the kernel again. A
    /// VM that cannot be reloaded powers off.
    fn restart(&mut self, vm: &'h Vm<M>) {
        vm.console.lock().flush(&mut MachineConsole(&self.machine));
        vm.resets.fetch_add(1, Ordering::Relaxed);
        log::info!("vm {}: restarting (SYSTEM_RESET)", vm.name);
        vm.pv.reset_all();
        vm.spin.lock().reset();
        // Every vCPU is off and saved: no list register holds anything.
        vm.vgic.lock().reset();
        vm.irq_attention.store(0, Ordering::Release);
        {
            let mut uart = vm.console.lock();
            uart.reset();
            vm.uart_line.store(false, Ordering::Release);
        }
        {
            let s = self.host.sched.lock();
            let now = self.machine.counter();
            for v in s.vcpus(vm.id) {
                let steal = s.stats(v, now).map_or(0, |st| st.steal_ticks);
                vm.pv.rebase_steal(v.index, steal);
            }
        }
        if let Err(e) = vm.load(&self.machine) {
            log::error!("vm {}: cannot restart: {e}", vm.name);
            vm.set_state(VmState::Stopping);
            self.vm_stopped(vm);
            return;
        }
        vm.set_state(VmState::Running);
        let boot = VcpuId {
            vm: vm.id,
            index: 0,
        };
        let now = self.machine.counter();
        let mut s = self.host.sched.lock();
        match s.power_on(boot, now) {
            Ok(wakeup) => self.woken(boot, wakeup),
            Err(e) => log::error!("vm {}: cannot restart: {e}", vm.name),
        }
    }
}

impl<M: Machine> Host<M> {
    /// Prints the per-VM summary (`summary:` lines, which `cargo xtask`
    /// reads) on `machine`'s console.
    pub fn print_summary(&self, machine: &M) {
        let hz = machine.counter_frequency().max(1);
        let now = machine.counter();
        let s = self.sched.lock();
        machine.console_line(format_args!("el2: all VMs powered off"));
        for vm in &self.vms {
            let mut exits = String::new();
            for (name, n) in vm.exit_counts() {
                if n > 0 {
                    let _ = write!(exits, " {name}={n}");
                }
            }
            machine.console_line(format_args!(
                "summary: vm {}: {} vCPUs, resets {}, exits:{}",
                vm.name,
                vm.vcpu_count(),
                vm.resets.load(Ordering::Relaxed),
                exits
            ));
            machine.console_line(format_args!(
                "summary:   wait/yield: {}",
                vm.spin.lock().stats()
            ));
            if let Some(variant) = vm.pv.config().lock {
                machine.console_line(format_args!(
                    "summary:   pv-lock {}: {}",
                    variant.name(),
                    vm.pv.record_stats()
                ));
            }
            machine.console_line(format_args!(
                "summary:   vgic: {}",
                vm.vgic_stats.snapshot()
            ));
            for v in s.vcpus(vm.id) {
                if let Some(stats) = s.stats(v, now) {
                    machine.console_line(format_args!("summary:   {v}: {}", stats.display(hz)));
                }
            }
        }
    }
}
