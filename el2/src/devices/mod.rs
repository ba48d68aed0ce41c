//! The device models a VM's trapped accesses reach: the virtual GICv3
//! ([`vgic`]) and the emulated PL011 ([`emul`]), and the virtual timer as
//! the source of a level-sensitive interrupt ([`vtimer`]). Plain data
//! driven by register accesses; the runner (`crate::run::devices`) routes
//! the accesses to them through each VM's device map.

pub mod emul;
pub mod vgic;
pub mod vtimer;
