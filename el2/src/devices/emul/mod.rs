//! Device models the hypervisor emulates for its VMs.
//!
//! Each model is plain data driven by register accesses that
//! [`crate::trap::mmio`] decodes and routes: `read(offset, size)` and
//! `write(offset, size, value, ..)` with `offset` inside the device's
//! frame. A model never panics on anything a guest does; an access it
//! cannot perform is an [`AccessError`], which the caller turns into an
//! abort injected into the guest.

use core::fmt;

pub mod pl011;
pub mod virtio_mmio;

/// An access a device model refuses. The caller injects a synchronous
/// external abort into the guest and does not advance its PC, as a real
/// bus would for an access the device does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessError {
    /// The device does not take accesses of `size` bytes (for example a
    /// 64-bit access to a device with 32-bit registers).
    UnsupportedSize { offset: u64, size: u8 },
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnsupportedSize { offset, size } => {
                write!(
                    f,
                    "{size}-byte access at offset {offset:#x} is not supported"
                )
            }
        }
    }
}

/// Where emulated consoles send their output, one whole line at a time.
///
/// A sink is shared by every VM; since a line arrives complete, lines from
/// different VMs never interleave mid-line whatever order the VMs write in.
pub trait ConsoleSink {
    /// One line of a VM's console output, without its line terminator.
    /// `vm_name` is the prefix to print before it, when the hypervisor
    /// runs several VMs (the console model was given it at construction).
    /// The bytes are what the guest wrote: not necessarily UTF-8, and they
    /// may contain control characters.
    fn emit_line(&mut self, vm_name: Option<&str>, line: &[u8]);
}
