//! QEMU `virt`'s virtio-mmio window with nothing attached: 32 transports
//! that each read as an empty transport and ignore writes
//! ([`pvlock_abi::virtio_mmio`]; OASIS virtio 1.2, 4.2.2 "MMIO Device
//! Register Layout"). A guest that probes the window — Linux's
//! `virtio_mmio` driver for each `virtio,mmio` node, or software that
//! hard-codes `virt`'s map — finds MagicValue "virt", the Version the
//! hypervisor reports (2), DeviceID 0 ("no device": the driver stops
//! there) and QEMU's VendorID, and zero everywhere else, exactly as on
//! QEMU `virt` with no device plugged in. This is where real virtio
//! devices attach later.
//!
//! The model has no state. The spec has drivers use 32-bit aligned
//! accesses to the registers; other widths (1, 2, 4 or 8 bytes, at any
//! offset inside the window) read the same little-endian register image
//! byte for byte, so a 64-bit read at MagicValue returns MagicValue and
//! Version together, as QEMU's split of it into two 32-bit reads does.

use pvlock_abi::virtio_mmio::{TRANSPORT_SIZE, WINDOW_SIZE, empty_register};

use super::AccessError;

/// The window of 32 empty transports; offsets are from its base.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmptyTransports;

impl EmptyTransports {
    /// The `size`-byte read at `offset` in the window: the transports'
    /// register image, little-endian. Sizes other than 1, 2, 4 and 8, and
    /// reads that leave the window, are refused (the data-abort path only
    /// routes accesses inside the window).
    pub fn read(&self, offset: u64, size: u8) -> Result<u64, AccessError> {
        check(offset, size)?;
        let value = (0..u64::from(size)).fold(0u64, |value, i| {
            value | u64::from(byte_at(offset + i)) << (8 * i)
        });
        Ok(value)
    }

    /// A write: checked like a read, then ignored (no device takes it).
    pub fn write(&self, offset: u64, size: u8) -> Result<(), AccessError> {
        check(offset, size)
    }
}

/// Accepts a 1, 2, 4 or 8-byte access that lies inside the window.
fn check(offset: u64, size: u8) -> Result<(), AccessError> {
    let fits = offset
        .checked_add(u64::from(size))
        .is_some_and(|end| end <= WINDOW_SIZE);
    if matches!(size, 1 | 2 | 4 | 8) && fits {
        Ok(())
    } else {
        Err(AccessError::UnsupportedSize { offset, size })
    }
}

/// The byte at `offset` in the window's register image.
fn byte_at(offset: u64) -> u8 {
    let in_transport = offset % TRANSPORT_SIZE;
    let word = empty_register(in_transport & !3);
    word.to_le_bytes()[(in_transport & 3) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvlock_abi::virtio_mmio::{MAGIC, TRANSPORTS, VENDOR_ID, VERSION, reg};

    const WINDOW: EmptyTransports = EmptyTransports;

    #[test]
    fn every_transport_reads_empty() {
        for transport in 0..u64::from(TRANSPORTS) {
            let base = transport * TRANSPORT_SIZE;
            let read = |offset| WINDOW.read(base + offset, 4).unwrap();
            assert_eq!(read(reg::MAGIC_VALUE), u64::from(MAGIC));
            assert_eq!(read(reg::VERSION), u64::from(VERSION));
            assert_eq!(read(reg::DEVICE_ID), 0);
            assert_eq!(read(reg::VENDOR_ID), u64::from(VENDOR_ID));
            for offset in (0x10..TRANSPORT_SIZE).step_by(4) {
                assert_eq!(read(offset), 0, "transport {transport} offset {offset:#x}");
            }
        }
    }

    #[test]
    fn other_widths_read_the_same_image() {
        assert_eq!(WINDOW.read(0, 1).unwrap(), u64::from(b'v'));
        assert_eq!(WINDOW.read(3, 1).unwrap(), u64::from(b't'));
        assert_eq!(
            WINDOW.read(2, 2).unwrap(),
            u64::from(u16::from_le_bytes(*b"rt"))
        );
        assert_eq!(
            WINDOW.read(0, 8).unwrap(),
            u64::from(MAGIC) | u64::from(VERSION) << 32
        );
        assert_eq!(
            WINDOW.read(TRANSPORT_SIZE + reg::DEVICE_ID, 8).unwrap(),
            u64::from(VENDOR_ID) << 32
        );
    }

    #[test]
    fn writes_are_ignored_and_bad_accesses_refused() {
        WINDOW.write(reg::STATUS, 4).unwrap();
        WINDOW.write(reg::MAGIC_VALUE, 4).unwrap();
        assert_eq!(WINDOW.read(reg::STATUS, 4).unwrap(), 0);
        assert_eq!(WINDOW.read(0, 4).unwrap(), u64::from(MAGIC));
        let last = WINDOW_SIZE - 4;
        assert!(WINDOW.read(last, 4).is_ok());
        for (offset, size) in [(last, 8), (0, 3), (0, 16), (WINDOW_SIZE, 1), (u64::MAX, 1)] {
            assert_eq!(
                WINDOW.read(offset, size),
                Err(AccessError::UnsupportedSize { offset, size })
            );
            assert!(WINDOW.write(offset, size).is_err());
        }
    }
}
