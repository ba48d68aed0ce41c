//! The virtio-mmio transports every VM has where QEMU `virt` puts them,
//! and the register map a guest reads there (OASIS virtio 1.2, 4.2.2
//! "MMIO Device Register Layout"; QEMU hw/arm/virt.c `VIRT_MMIO`,
//! hw/virtio/virtio-mmio.c).
//!
//! Software written for `virt` hard-codes the window: 32 transports of
//! 0x200 bytes from `0x0a00_0000`, transport *n* on SPI 16 + *n* (INTID
//! 48 + *n*), edge-triggered. QEMU describes each as a device-tree node
//! `virtio_mmio@<base>` with `compatible = "virtio,mmio"`, `reg`,
//! `interrupts = <GIC_SPI 16+n IRQ_TYPE_EDGE_RISING>` and `dma-coherent`,
//! and so does the hypervisor's VM tree (docs/vm-binding.md, "What the
//! VM sees").
//!
//! No device sits behind any transport yet: each reads as an empty
//! transport, as QEMU's do when nothing is plugged in — [`MAGIC`] at
//! [`reg::MAGIC_VALUE`], [`VERSION`] at [`reg::VERSION`], [`DEVICE_ID_NONE`]
//! at [`reg::DEVICE_ID`] (the virtio spec's "no device": a driver stops
//! there), [`VENDOR_ID`] at [`reg::VENDOR_ID`], zero everywhere else, and
//! writes are ignored (docs/abi.md §8).

/// Guest physical address of transport 0 (QEMU `virt`'s `VIRT_MMIO`).
pub const WINDOW_BASE: u64 = 0x0a00_0000;

/// Bytes of one transport: registers up to 0x100, device configuration
/// space from [`reg::CONFIG`] to the end.
pub const TRANSPORT_SIZE: u64 = 0x200;

/// Transports in the window (QEMU `virt`'s `NUM_VIRTIO_TRANSPORTS`).
pub const TRANSPORTS: u32 = 32;

/// Bytes of the whole window: [`TRANSPORTS`] x [`TRANSPORT_SIZE`].
pub const WINDOW_SIZE: u64 = TRANSPORTS as u64 * TRANSPORT_SIZE;

/// The SPI of transport 0 in device-tree (GIC binding) numbering: SPI 16,
/// INTID 48 (QEMU `virt`'s `a15irqmap[VIRT_MMIO]`). Transport *n* has SPI
/// `FIRST_SPI + n`.
pub const FIRST_SPI: u32 = 16;

/// The INTID of the last transport's interrupt: 32 + 16 + 31 = 79. A
/// virtual GIC must offer SPIs at least up to it.
pub const LAST_INTID: u32 = crate::virt::FIRST_SPI_INTID + FIRST_SPI + TRANSPORTS - 1;

/// The interrupt flags cell of each transport's `interrupts`: rising
/// edge (include/dt-bindings/interrupt-controller/irq.h
/// `IRQ_TYPE_EDGE_RISING`), as QEMU writes it.
pub const IRQ_FLAGS_EDGE_RISING: u32 = 1;

/// `compatible` of each transport's node (virtio/mmio.yaml).
pub const COMPATIBLE: &str = "virtio,mmio";

/// Node name of transport *n*, without the `@<base>` unit address.
pub const NODE_NAME: &str = "virtio_mmio";

/// MagicValue: `"virt"` read as a little-endian word.
pub const MAGIC: u32 = 0x7472_6976;

/// Version this hypervisor reports: 2, the virtio 1.x ("modern") register
/// layout, as QEMU does with `virtio-mmio.force-legacy=false` and as
/// KVM-based VMMs without a legacy mode do. QEMU 7.2's default is 1 (legacy,
/// [`VERSION_LEGACY`]); Linux (since 4.0), U-Boot and FreeBSD accept
/// both. 2 because the devices that attach here later will be virtio 1.x
/// devices, and a transport's version must not change when a device
/// appears behind it (docs/abi.md §8).
pub const VERSION: u32 = 2;

/// Version 1: the legacy register layout (guest page size, QueuePFN),
/// QEMU 7.2's default. Not offered by the hypervisor.
pub const VERSION_LEGACY: u32 = 1;

/// DeviceID 0: no device behind the transport (virtio 1.2, 5 "Device
/// Types": "reserved (invalid)"; a driver ignores the transport).
pub const DEVICE_ID_NONE: u32 = 0;

/// VendorID: `"QEMU"` as a little-endian word, what QEMU's transports
/// report.
pub const VENDOR_ID: u32 = 0x554d_4551;

/// Register offsets inside one transport (virtio 1.2, 4.2.2, table
/// "MMIO Device Register Layout"). Every register is 32 bits wide; the
/// device-specific configuration space starts at [`CONFIG`](reg::CONFIG).
pub mod reg {
    /// MagicValue (read-only).
    pub const MAGIC_VALUE: u64 = 0x000;
    /// Version (read-only).
    pub const VERSION: u64 = 0x004;
    /// DeviceID (read-only).
    pub const DEVICE_ID: u64 = 0x008;
    /// VendorID (read-only).
    pub const VENDOR_ID: u64 = 0x00c;
    /// DeviceFeatures (read-only), the word DeviceFeaturesSel selects.
    pub const DEVICE_FEATURES: u64 = 0x010;
    /// DeviceFeaturesSel (write-only).
    pub const DEVICE_FEATURES_SEL: u64 = 0x014;
    /// DriverFeatures (write-only).
    pub const DRIVER_FEATURES: u64 = 0x020;
    /// DriverFeaturesSel (write-only).
    pub const DRIVER_FEATURES_SEL: u64 = 0x024;
    /// QueueSel (write-only).
    pub const QUEUE_SEL: u64 = 0x030;
    /// QueueNumMax (read-only).
    pub const QUEUE_NUM_MAX: u64 = 0x034;
    /// QueueNum (write-only).
    pub const QUEUE_NUM: u64 = 0x038;
    /// QueueReady (read-write).
    pub const QUEUE_READY: u64 = 0x044;
    /// QueueNotify (write-only).
    pub const QUEUE_NOTIFY: u64 = 0x050;
    /// InterruptStatus (read-only).
    pub const INTERRUPT_STATUS: u64 = 0x060;
    /// InterruptACK (write-only).
    pub const INTERRUPT_ACK: u64 = 0x064;
    /// Status (read-write).
    pub const STATUS: u64 = 0x070;
    /// QueueDescLow / QueueDescHigh (write-only).
    pub const QUEUE_DESC_LOW: u64 = 0x080;
    /// QueueDriverLow / QueueDriverHigh (write-only).
    pub const QUEUE_DRIVER_LOW: u64 = 0x090;
    /// QueueDeviceLow / QueueDeviceHigh (write-only).
    pub const QUEUE_DEVICE_LOW: u64 = 0x0a0;
    /// SHMSel (write-only).
    pub const SHM_SEL: u64 = 0x0ac;
    /// SHMLenLow / SHMLenHigh (read-only).
    pub const SHM_LEN_LOW: u64 = 0x0b0;
    /// SHMBaseLow / SHMBaseHigh (read-only).
    pub const SHM_BASE_LOW: u64 = 0x0b8;
    /// QueueReset (read-write).
    pub const QUEUE_RESET: u64 = 0x0c0;
    /// ConfigGeneration (read-only).
    pub const CONFIG_GENERATION: u64 = 0x0fc;
    /// Start of the device-specific configuration space.
    pub const CONFIG: u64 = 0x100;
}

/// The guest physical address of transport `index` (0 up to
/// [`TRANSPORTS`] - 1).
pub const fn transport_base(index: u32) -> u64 {
    WINDOW_BASE + index as u64 * TRANSPORT_SIZE
}

/// What an empty transport's 32-bit register at `offset` (inside one
/// transport, word aligned) reads as.
pub const fn empty_register(offset: u64) -> u32 {
    match offset {
        reg::MAGIC_VALUE => MAGIC,
        reg::VERSION => VERSION,
        reg::DEVICE_ID => DEVICE_ID_NONE,
        reg::VENDOR_ID => VENDOR_ID,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_is_qemu_virts() {
        assert_eq!(WINDOW_BASE, 0x0a00_0000);
        assert_eq!(WINDOW_SIZE, 0x4000);
        assert_eq!(transport_base(0), 0x0a00_0000);
        assert_eq!(transport_base(31), 0x0a00_3e00);
        assert_eq!(32 + FIRST_SPI, 48);
        assert_eq!(LAST_INTID, 79);
        assert_eq!(reg::CONFIG, TRANSPORT_SIZE / 2);
    }

    #[test]
    fn identification_words_spell_their_names() {
        assert_eq!(&MAGIC.to_le_bytes(), b"virt");
        assert_eq!(&VENDOR_ID.to_le_bytes(), b"QEMU");
        assert_eq!((VERSION, VERSION_LEGACY, DEVICE_ID_NONE), (2, 1, 0));
        assert_eq!(empty_register(reg::MAGIC_VALUE), MAGIC);
        assert_eq!(empty_register(reg::VERSION), VERSION);
        assert_eq!(empty_register(reg::DEVICE_ID), 0);
        assert_eq!(empty_register(reg::VENDOR_ID), VENDOR_ID);
        for offset in [
            reg::DEVICE_FEATURES,
            reg::QUEUE_NUM_MAX,
            reg::STATUS,
            reg::CONFIG,
        ] {
            assert_eq!(empty_register(offset), 0, "{offset:#x}");
        }
    }
}
