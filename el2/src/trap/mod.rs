//! The trap path's decoding: what a guest exit was and what it asks.
//! An exit's syndrome becomes one typed [`exit::Exit`] (ESR fields in
//! [`esr`], a data abort's access in [`mmio`], a system register's
//! encoding and the registers el2 emulates in [`sysreg`]), and an
//! exception el2 injects back is computed by [`fault`]. Pure functions of
//! register values: nothing here holds state or touches hardware.

pub mod esr;
pub mod exit;
pub mod fault;
pub mod mmio;
pub mod sysreg;
