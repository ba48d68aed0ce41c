//! Which CPUs to start, in which order, and what became of each.
//!
//! The boot CPU becomes logical CPU 0; the others follow in device-tree
//! order, as Linux numbers them. A CPU that the firmware refuses to start,
//! or that does not report in within the time allowed, is left out and
//! reported; the hypervisor carries on with the rest.

use alloc::vec::Vec;
use core::fmt;
use platform::{Cpu, EnableMethod, Mpidr};

/// Why a CPU is not online.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartFailure {
    /// PSCI CPU_ON returned this error code.
    Firmware(i32),
    /// CPU_ON succeeded but the CPU never reported in.
    Timeout { waited_ms: u32 },
    /// The DT gives an enable-method the hypervisor does not implement.
    UnsupportedEnableMethod,
    /// More CPUs than the hypervisor was built for.
    BeyondMaxCpus,
}

impl fmt::Display for StartFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Firmware(code) => write!(
                f,
                "PSCI CPU_ON failed with {code} ({})",
                psci_error_name(*code)
            ),
            Self::Timeout { waited_ms } => write!(f, "did not come up within {waited_ms} ms"),
            Self::UnsupportedEnableMethod => write!(f, "enable-method is not \"psci\""),
            Self::BeyondMaxCpus => write!(
                f,
                "beyond the {} CPUs this build supports",
                crate::bringup::smp::MAX_CPUS
            ),
        }
    }
}

fn psci_error_name(code: i32) -> &'static str {
    use pvlock_abi::psci::error as e;
    match code {
        e::NOT_SUPPORTED => "NOT_SUPPORTED",
        e::INVALID_PARAMETERS => "INVALID_PARAMETERS",
        e::DENIED => "DENIED",
        e::ALREADY_ON => "ALREADY_ON",
        e::ON_PENDING => "ON_PENDING",
        e::INTERNAL_FAILURE => "INTERNAL_FAILURE",
        e::NOT_PRESENT => "NOT_PRESENT",
        e::DISABLED => "DISABLED",
        e::INVALID_ADDRESS => "INVALID_ADDRESS",
        _ => "unknown error",
    }
}

/// The most CPUs one hypervisor build drives (stacks are reserved in the image).
pub const MAX_CPUS: usize = 256;

/// The CPUs in logical order: the boot CPU first, then the others in DT
/// order. `None` if the boot CPU is not in the device tree.
pub fn logical_order(cpus: &[Cpu], boot: Mpidr) -> Option<Vec<&Cpu>> {
    let boot_cpu = cpus.iter().find(|c| c.mpidr == boot)?;
    let mut order = Vec::with_capacity(cpus.len());
    order.push(boot_cpu);
    order.extend(cpus.iter().filter(|c| c.mpidr != boot));
    Some(order)
}

/// How the hypervisor starts a CPU and learns that it came up; the arch
/// layer implements it with PSCI and the counter, tests with fakes.
pub trait CpuStarter {
    /// Asks the firmware to start logical CPU `index` (PSCI CPU_ON).
    fn start(&mut self, index: usize, cpu: &Cpu) -> Result<(), i32>;
    /// Waits, for a bounded time, until CPU `index` reports in; returns
    /// whether it did.
    fn wait_online(&mut self, index: usize) -> bool;
    /// The bound `wait_online` uses, for reports.
    fn timeout_ms(&self) -> u32;
}

/// What happened to each secondary CPU.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BringUpReport {
    /// Logical indices that came online (the boot CPU, 0, is always first).
    pub online: Vec<usize>,
    pub failed: Vec<(usize, Mpidr, StartFailure)>,
}

/// Starts every CPU of `order` after the first (the boot CPU, already
/// running) one at a time, so that each failure is attributed to one CPU.
pub fn bring_up(order: &[&Cpu], starter: &mut impl CpuStarter) -> BringUpReport {
    let mut report = BringUpReport {
        online: alloc::vec![0],
        failed: Vec::new(),
    };
    for (index, cpu) in order.iter().enumerate().skip(1) {
        let result = if index >= MAX_CPUS {
            Err(StartFailure::BeyondMaxCpus)
        } else if cpu.enable_method != EnableMethod::Psci {
            Err(StartFailure::UnsupportedEnableMethod)
        } else {
            match starter.start(index, cpu) {
                Err(code) => Err(StartFailure::Firmware(code)),
                Ok(()) if starter.wait_online(index) => Ok(()),
                Ok(()) => Err(StartFailure::Timeout {
                    waited_ms: starter.timeout_ms(),
                }),
            }
        };
        match result {
            Ok(()) => report.online.push(index),
            Err(why) => report.failed.push((index, cpu.mpidr, why)),
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::String;
    use alloc::vec;

    fn cpu(mpidr: u64, method: EnableMethod) -> Cpu {
        Cpu {
            mpidr: Mpidr::from_raw(mpidr),
            enable_method: method,
            node: format!("/cpus/cpu@{mpidr:x}"),
        }
    }

    struct Fake {
        refuse: Vec<usize>,
        silent: Vec<usize>,
        started: Vec<usize>,
    }

    impl CpuStarter for Fake {
        fn start(&mut self, index: usize, _cpu: &Cpu) -> Result<(), i32> {
            self.started.push(index);
            if self.refuse.contains(&index) {
                Err(pvlock_abi::psci::error::DENIED)
            } else {
                Ok(())
            }
        }
        fn wait_online(&mut self, index: usize) -> bool {
            !self.silent.contains(&index)
        }
        fn timeout_ms(&self) -> u32 {
            500
        }
    }

    #[test]
    fn boot_cpu_is_logical_zero() {
        let cpus = vec![
            cpu(0x0, EnableMethod::Psci),
            cpu(0x1, EnableMethod::Psci),
            cpu(0x100, EnableMethod::Psci),
        ];
        let order = logical_order(&cpus, Mpidr::from_raw(0x8000_0100)).expect("boot cpu present");
        let mpidrs: Vec<u64> = order.iter().map(|c| c.mpidr.value()).collect();
        assert_eq!(mpidrs, vec![0x100, 0x0, 0x1]);
        assert!(logical_order(&cpus, Mpidr::from_raw(0x2)).is_none());
    }

    #[test]
    fn failures_are_attributed_and_the_rest_come_up() {
        let cpus = vec![
            cpu(0x0, EnableMethod::Psci),
            cpu(0x1, EnableMethod::Psci),
            cpu(0x2, EnableMethod::Psci),
            cpu(
                0x3,
                EnableMethod::SpinTable {
                    release_addr: 0x8000_fff8,
                },
            ),
            cpu(0x4, EnableMethod::Psci),
        ];
        let order = logical_order(&cpus, Mpidr::from_raw(0)).unwrap();
        let mut fake = Fake {
            refuse: vec![1],
            silent: vec![2],
            started: vec![],
        };
        let report = bring_up(&order, &mut fake);
        assert_eq!(report.online, vec![0, 4]);
        assert_eq!(
            report.failed,
            vec![
                (1, Mpidr::from_raw(1), StartFailure::Firmware(-3)),
                (
                    2,
                    Mpidr::from_raw(2),
                    StartFailure::Timeout { waited_ms: 500 }
                ),
                (3, Mpidr::from_raw(3), StartFailure::UnsupportedEnableMethod),
            ]
        );
        // The spin-table CPU is never handed to PSCI.
        assert_eq!(fake.started, vec![1, 2, 4]);
        let text: String = format!("{}", report.failed[0].2);
        assert_eq!(text, "PSCI CPU_ON failed with -3 (DENIED)");
    }

    #[test]
    fn cpus_beyond_the_build_limit_are_left_out() {
        let cpus: Vec<Cpu> = (0..MAX_CPUS as u64 + 2)
            .map(|i| cpu(((i / 256) << 8) | (i % 256), EnableMethod::Psci))
            .collect();
        let order = logical_order(&cpus, Mpidr::from_raw(0)).unwrap();
        let mut fake = Fake {
            refuse: vec![],
            silent: vec![],
            started: vec![],
        };
        let report = bring_up(&order, &mut fake);
        assert_eq!(report.online.len(), MAX_CPUS);
        assert_eq!(report.failed.len(), 2);
        assert!(
            report
                .failed
                .iter()
                .all(|f| f.2 == StartFailure::BeyondMaxCpus)
        );
    }
}
