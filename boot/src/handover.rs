//! What a loader hands over, looked at before anything else works: the
//! flattened device tree at x0 (Linux Documentation/arch/arm64/booting.rst)
//! recognised by its header alone, with the MMU off and no heap, and the
//! way a CPU stops for good.

/// FDT header magic (Devicetree Specification v0.4, 5.2 "Header").
pub const FDT_MAGIC: u32 = 0xd00d_feed;
/// The FDT header of version 17: ten big-endian 32-bit fields.
pub const FDT_HEADER_SIZE: u32 = 40;

/// The `totalsize` of the device tree whose header starts with `first`
/// (its `magic` and `totalsize` fields, as stored: big-endian), if the
/// magic is right and the size lies between the header's and `max`.
pub fn fdt_total_size(first: [u8; 8], max: u32) -> Option<u32> {
    let magic = u32::from_be_bytes([first[0], first[1], first[2], first[3]]);
    let size = u32::from_be_bytes([first[4], first[5], first[6], first[7]]);
    (magic == FDT_MAGIC && (FDT_HEADER_SIZE..=max).contains(&size)).then_some(size)
}

/// [`fdt_total_size`] of the header at `address`, read with two aligned
/// volatile 32-bit loads (right for memory with the MMU off); `None` for a
/// null or misaligned address.
///
/// # Safety
/// If `address` is non-zero and 4-byte aligned, its first 8 bytes must be
/// readable.
pub unsafe fn read_fdt_total_size(address: u64, max: u32) -> Option<u32> {
    if address == 0 || !address.is_multiple_of(4) {
        return None;
    }
    let words = address as *const u32;
    // SAFETY: per the caller; aligned (checked above).
    let (magic, size) = unsafe { (words.read_volatile(), words.add(1).read_volatile()) };
    let mut first = [0u8; 8];
    first[..4].copy_from_slice(&magic.to_ne_bytes());
    first[4..].copy_from_slice(&size.to_ne_bytes());
    fdt_total_size(first, max)
}

/// Stops this CPU for good: with interrupts masked, WFE waits for events
/// that change nothing.
#[cfg(target_os = "none")]
pub fn park() -> ! {
    loop {
        // SAFETY: WFE only waits; no memory, register or flag effect.
        unsafe { core::arch::asm!("wfe", options(nomem, nostack, preserves_flags)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_tree_is_known_by_its_magic_and_a_sane_size() {
        let header = |magic: u32, size: u32| {
            let mut first = [0u8; 8];
            first[..4].copy_from_slice(&magic.to_be_bytes());
            first[4..].copy_from_slice(&size.to_be_bytes());
            first
        };
        assert_eq!(
            fdt_total_size(header(FDT_MAGIC, 0x8b3a), 1 << 20),
            Some(0x8b3a)
        );
        assert_eq!(fdt_total_size(header(FDT_MAGIC, 40), 40), Some(40));
        assert_eq!(fdt_total_size(header(FDT_MAGIC, 39), 1 << 20), None);
        assert_eq!(
            fdt_total_size(header(FDT_MAGIC, (1 << 20) + 1), 1 << 20),
            None
        );
        assert_eq!(fdt_total_size(header(0xfeed_d00d, 0x1000), 1 << 20), None);
        // Stored big-endian: read the other way round it is not a tree.
        let mut swapped = header(FDT_MAGIC, 0x1000);
        swapped[..4].reverse();
        assert_eq!(fdt_total_size(swapped, 1 << 20), None);
    }

    #[test]
    fn the_header_is_read_from_memory_as_stored() {
        // Words as memory holds them: the big-endian fields' bytes in order.
        let mut tree = [0u32; 12];
        tree[0] = u32::from_ne_bytes(FDT_MAGIC.to_be_bytes());
        tree[1] = u32::from_ne_bytes(48u32.to_be_bytes());
        let address = tree.as_ptr() as u64;
        // SAFETY: `tree` is 48 readable, 4-byte aligned bytes.
        assert_eq!(unsafe { read_fdt_total_size(address, 64) }, Some(48));
        assert_eq!(unsafe { read_fdt_total_size(address, 47) }, None);
        // SAFETY: a null or misaligned address is refused before a load.
        assert_eq!(unsafe { read_fdt_total_size(0, 64) }, None);
        assert_eq!(unsafe { read_fdt_total_size(address + 1, 64) }, None);
    }
}
