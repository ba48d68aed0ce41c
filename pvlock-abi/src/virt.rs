//! Fixed addresses of QEMU `virt`'s machine that every VM reproduces and
//! that guests written for `virt` hard-code rather than read from the
//! device tree (QEMU hw/arm/virt.c `base_memmap`). The VM's whole map is
//! docs/vm-binding.md, "What the VM sees"; the virtio-mmio window is
//! [`crate::virtio_mmio`].

/// Where RAM starts (`VIRT_MEM`). An arm64 Image without a header is
/// placed at `RAM_BASE + 0x80000` and entered at its first byte, by QEMU's
/// `-kernel` loader and by the hypervisor alike.
pub const RAM_BASE: u64 = 0x4000_0000;

/// The PL011 UART's registers (`VIRT_UART`), 4 KiB; its interrupt is
/// SPI 1 (INTID 33).
pub const UART_BASE: u64 = 0x0900_0000;

#[cfg(test)]
mod tests {
    #[test]
    fn qemu_virt_addresses() {
        assert_eq!(super::RAM_BASE, 0x4000_0000);
        assert_eq!(super::UART_BASE, 0x0900_0000);
    }
}
