//! The PL031 real-time clock (ARM DDI 0224), read once at boot to give
//! guests a wall clock (KVM PTP).

use tock_registers::interfaces::Readable;
use tock_registers::register_structs;
use tock_registers::registers::ReadOnly;

register_structs! {
    Pl031 {
        /// RTCDR: the current time in seconds (the Linux rtc-pl031 driver
        /// and QEMU count them from the Unix epoch).
        (0x000 => data: ReadOnly<u32>),
        (0x004 => @END),
    }
}

/// Reads the seconds counter of the PL031 at `base`.
///
/// # Safety
/// `base` must be a PL031 register block mapped as device memory.
pub unsafe fn read_seconds(base: u64) -> u32 {
    // SAFETY: per the caller; RTCDR reads have no side effects.
    let rtc = unsafe { &*(base as *const Pl031) };
    rtc.data.get()
}
