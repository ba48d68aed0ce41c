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

use crate::memory::heap::OutOfMemory;

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

impl VmError {
    /// The VM at `node` could not be created because the hypervisor's heap
    /// refused an allocation while building `what` (`el2::memory::heap`).
    pub fn out_of_memory(node: &str, what: &str) -> Self {
        VmError {
            node: String::from(node),
            property: None,
            reason: alloc::format!("{} (building {what})", OutOfMemory::MESSAGE),
        }
    }

    /// Whether this is an [`Self::out_of_memory`] error.
    pub fn is_out_of_memory(&self) -> bool {
        self.property.is_none()
            && self
                .reason
                .strip_prefix(OutOfMemory::MESSAGE)
                .is_some_and(|rest| rest.starts_with(" (building "))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_out_of_memory_error_names_the_vm_and_what_was_being_built() {
        let error = VmError::out_of_memory("/chosen/vm@1", "its virtual GIC");
        assert!(error.is_out_of_memory());
        assert_eq!(
            error.to_string(),
            "device tree node /chosen/vm@1: out of hypervisor memory (building its virtual GIC)"
        );
        let other = VmError::new(
            "/chosen/vm@1",
            "memory",
            "out of hypervisor memory (building x)",
        );
        assert!(!other.is_out_of_memory(), "a property error is not one");
        let other = VmError {
            node: "/chosen/vm@1".into(),
            property: None,
            reason: "out of hypervisor memory".into(),
        };
        assert!(
            !other.is_out_of_memory(),
            "only the constructor's shape counts"
        );
    }
}
