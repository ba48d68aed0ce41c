//! What each VM is given: where its RAM comes from in host memory
//! ([`placement`]), the guest-physical map it sees and where its kernel,
//! initrd and device tree go in it ([`layout`]), and the device tree that
//! describes its virtual hardware to it ([`dt`]).
//!
//! The VMs themselves are described in the boot device tree
//! (docs/vm-binding.md) and parsed by `platform` into
//! [`platform::VmConfig`]s. Everything here is decided per VM: a VM that
//! cannot be given what it asks for gets a [`VmError`] naming its node and
//! the property to fix, and the other VMs are not affected.

pub mod dt;
pub mod layout;
pub mod placement;

use alloc::string::String;
use core::fmt;

/// Why a VM cannot be set up, naming the VM node and the property at
/// fault; displayed like [`platform::PlatformError`], so that every
/// complaint about a VM description reads the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmError {
    /// The VM's node path (`/chosen/vm@1`).
    pub node: String,
    /// The binding property to fix (`kernel`, `memory`, ...), when one is
    /// to blame.
    pub property: Option<&'static str>,
    /// What is wrong.
    pub reason: String,
}

impl VmError {
    /// An error about `property` of the VM at `node`.
    pub fn new(node: &str, property: &'static str, reason: impl Into<String>) -> Self {
        VmError {
            node: String::from(node),
            property: Some(property),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for VmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device tree node {}", self.node)?;
        if let Some(property) = self.property {
            write!(f, ", property \"{property}\"")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// `[base, end)` in hex, as ranges appear in messages.
pub(crate) struct Hex(pub platform::MemRange);

impl fmt::Display for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:#x}, {:#x})", self.0.base, self.0.end())
    }
}
