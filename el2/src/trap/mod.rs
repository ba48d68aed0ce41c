//! The trap path's vocabulary: what a guest exit was and what happens
//! next. An exit's syndrome becomes one typed [`exit::Exit`] (ESR fields
//! in [`esr`], a data abort's access in [`mmio`], a system register's
//! encoding and the registers el2 emulates in [`sysreg`], a vCPU's
//! self-hosted debug state in [`debug`] and its PMU in [`pmu`]); an exception
//! el2 injects back is computed by [`fault`]; every handler's answer is a
//! [`decision::Next`]. Pure functions of register values and plain
//! values: nothing here holds state or touches hardware.

pub mod debug;
pub mod decision;
pub mod esr;
pub mod exit;
pub mod fault;
pub mod mmio;
pub mod pmu;
pub mod sysreg;
