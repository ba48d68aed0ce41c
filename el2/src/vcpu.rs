//! Identities and register state of virtual CPUs, shared by the portable
//! core (scheduler, hypercall dispatch, MMIO emulation) and the arch layer
//! that saves and restores them.

use core::fmt;

/// A VM, by its index in the hypervisor's VM table (in boot-DT order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VmId(pub u16);

/// One vCPU: its VM and its index within the VM (vCPU 0 is the boot vCPU;
/// its guest MPIDR is derived from the index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VcpuId {
    pub vm: VmId,
    pub index: u16,
}

impl fmt::Display for VcpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vm{}/vcpu{}", self.vm.0, self.index)
    }
}

/// A vCPU's power state as PSCI reports it (DEN0022 "AFFINITY_INFO",
/// "CPU_ON").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerState {
    /// Running, runnable or blocked: powered on.
    On,
    /// Powered off.
    Off,
    /// CPU_ON has been accepted but the vCPU has not started yet.
    OnPending,
}

impl PowerState {
    /// The error CPU_ON answers for a target in this state, `None` if the
    /// target can be started (it is Off). Use it to rewrite X0 if the
    /// target's state changed between [`crate::services::smccc::Dispatcher::dispatch`] and the runner
    /// carrying out [`crate::trap::decision::Next::PowerOn`] (see there).
    ///
    /// DEN0022 "CPU_ON": ALREADY_ON, ON_PENDING.
    pub const fn cpu_on_error(self) -> Option<i32> {
        match self {
            Self::Off => None,
            Self::On => Some(pvlock_abi::psci::error::ALREADY_ON),
            Self::OnPending => Some(pvlock_abi::psci::error::ON_PENDING),
        }
    }
}

/// The general registers of a trapped guest, as the exception vector saves
/// them, plus where and in which state it resumes.
#[repr(C)]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuestRegs {
    /// x0..x30.
    pub x: [u64; 31],
    /// ELR_EL2: the address the guest resumes at.
    pub pc: u64,
    /// SPSR_EL2: the guest's PSTATE when it trapped.
    pub pstate: u64,
    /// SP_EL0, switched together with the general registers because the
    /// hypervisor's own code runs on SP_EL0.
    pub sp_el0: u64,
}

impl GuestRegs {
    /// Register `n` as an instruction names it: 31 is XZR (reads zero).
    pub fn reg(&self, n: u8) -> u64 {
        self.x.get(usize::from(n)).copied().unwrap_or(0)
    }

    /// X0..X3: where an SMCCC call's results go (DEN0028 "Register use in
    /// AArch64 SMC and HVC calls").
    pub fn results_mut(&mut self) -> &mut [u64; pvlock_abi::smccc::RESULT_REGS] {
        self.x
            .first_chunk_mut()
            .unwrap_or_else(|| unreachable!("31 registers"))
    }

    /// Writes register `n`; writes to 31 (XZR) are discarded.
    pub fn set_reg(&mut self, n: u8, value: u64) {
        if let Some(slot) = self.x.get_mut(usize::from(n)) {
            *slot = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_31_is_the_zero_register() {
        let mut regs = GuestRegs::default();
        regs.set_reg(31, 7);
        regs.set_reg(30, 9);
        assert_eq!(regs.reg(31), 0);
        assert_eq!(regs.reg(30), 9);
        assert_eq!(regs.x, {
            let mut x = [0; 31];
            x[30] = 9;
            x
        });
    }
}
