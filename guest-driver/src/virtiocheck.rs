//! What pv-check verifies of QEMU `virt`'s virtio-mmio window
//! ([`pvlock_abi::virtio_mmio`]): that each of the 32 transports reads as
//! an empty transport and ignores writes ([`check_transports`]), and that
//! the device tree describes them as QEMU `virt` does (`check_nodes`,
//! with the `runtime` feature).
//! Both take their inputs as arguments (a register reader, the tree's
//! bytes), so the host tests run them on fakes and on QEMU's own tree.

use core::fmt;

use pvlock_abi::virtio_mmio::{
    self, DEVICE_ID_NONE, MAGIC, TRANSPORT_SIZE, TRANSPORTS, VENDOR_ID, reg,
};

/// Registers read from every transport, each with what an empty transport
/// answers when the window reports `version`: the four identification
/// words, then a sample of the rest (which read zero with no device) and
/// the first word of the configuration space.
fn expected_reads(version: u32) -> [(u64, &'static str, u32); 9] {
    [
        (reg::MAGIC_VALUE, "MagicValue", MAGIC),
        (reg::VERSION, "Version", version),
        (reg::DEVICE_ID, "DeviceID", DEVICE_ID_NONE),
        (reg::VENDOR_ID, "VendorID", VENDOR_ID),
        (reg::DEVICE_FEATURES, "DeviceFeatures", 0),
        (reg::QUEUE_NUM_MAX, "QueueNumMax", 0),
        (reg::INTERRUPT_STATUS, "InterruptStatus", 0),
        (reg::STATUS, "Status", 0),
        (reg::CONFIG, "config space", 0),
    ]
}

/// The value written to Status to check that writes are ignored:
/// ACKNOWLEDGE | DRIVER (virtio 1.2, 2.1 "Device Status Field"), what a
/// driver writes first.
pub const STATUS_PROBE: u32 = 0b11;

/// A transport that did not read as empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransportError {
    /// Transport index, 0 to 31.
    pub transport: u32,
    /// The register's name.
    pub register: &'static str,
    pub read: u32,
    pub expected: u32,
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "transport {} at {:#x}: {} reads {:#x}, expected {:#x}",
            self.transport,
            virtio_mmio::transport_base(self.transport),
            self.register,
            self.read,
            self.expected
        )
    }
}

/// Reads every transport's registers through `read(address)` (a 32-bit
/// load) and checks them against an empty transport of `version`; then
/// writes [`STATUS_PROBE`] to Status through `write(address, value)` and
/// checks that Status still reads 0 (writes are ignored). Stops at the
/// first difference.
pub fn check_transports(
    version: u32,
    mut read: impl FnMut(u64) -> u32,
    mut write: impl FnMut(u64, u32),
) -> Result<(), TransportError> {
    for transport in 0..TRANSPORTS {
        let base = virtio_mmio::transport_base(transport);
        let compare = |register, read, expected| {
            if read == expected {
                Ok(())
            } else {
                Err(TransportError {
                    transport,
                    register,
                    read,
                    expected,
                })
            }
        };
        for (offset, register, expected) in expected_reads(version) {
            compare(register, read(base + offset), expected)?;
        }
        write(base + reg::STATUS, STATUS_PROBE);
        compare("Status after a write", read(base + reg::STATUS), 0)?;
    }
    Ok(())
}

/// Bytes of the window pv-check maps to read it.
pub const WINDOW_BYTES: u64 = TRANSPORTS as u64 * TRANSPORT_SIZE;

/// A device-tree node of the window that is missing or not QEMU `virt`'s.
#[cfg(any(test, feature = "runtime"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeError {
    /// Not a device tree.
    NotADeviceTree,
    /// No `/virtio_mmio@<base>` node for this transport.
    Missing { transport: u32 },
    /// The node has a property missing or with another value.
    Property {
        transport: u32,
        property: &'static str,
    },
    /// The tree has this many `virtio,mmio` nodes, not 32.
    Count(usize),
}

#[cfg(any(test, feature = "runtime"))]
impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NodeError::NotADeviceTree => write!(f, "not a device tree"),
            NodeError::Missing { transport } => write!(
                f,
                "no node /{}@{:x}",
                virtio_mmio::NODE_NAME,
                virtio_mmio::transport_base(transport)
            ),
            NodeError::Property {
                transport,
                property,
            } => write!(
                f,
                "/{}@{:x}: {property} is not QEMU virt's",
                virtio_mmio::NODE_NAME,
                virtio_mmio::transport_base(transport)
            ),
            NodeError::Count(n) => write!(f, "{n} \"virtio,mmio\" nodes, expected 32"),
        }
    }
}

/// Checks that the tree `dtb` has exactly the 32 transports' nodes of
/// QEMU `virt`: `/virtio_mmio@<base>` under the root (two address and two
/// size cells) with `compatible = "virtio,mmio"`, `reg = <base 0x200>`,
/// `interrupts = <GIC_SPI 16+n IRQ_TYPE_EDGE_RISING>` and `dma-coherent`.
#[cfg(any(test, feature = "runtime"))]
pub fn check_nodes(dtb: &[u8]) -> Result<(), NodeError> {
    const GIC_SPI: u32 = pvlock_abi::virt::GIC_SPI_CELL;
    let fdt = fdt::Fdt::new(dtb).map_err(|_| NodeError::NotADeviceTree)?;
    let cells = |value: &[u8]| {
        let mut words = value
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        let mut out = [0u32; 4];
        let mut n = 0;
        for (slot, word) in out.iter_mut().zip(&mut words) {
            *slot = word;
            n += 1;
        }
        (out, n + words.count())
    };
    for transport in 0..TRANSPORTS {
        let base = virtio_mmio::transport_base(transport);
        let mut path = PathBuf::default();
        let _ = fmt::write(
            &mut path,
            format_args!("/{}@{base:x}", virtio_mmio::NODE_NAME),
        );
        let node = fdt
            .find_node(path.as_str())
            .ok_or(NodeError::Missing { transport })?;
        let bad = |property| NodeError::Property {
            transport,
            property,
        };
        let compatible = node.property("compatible").ok_or(bad("compatible"))?;
        if compatible.value.strip_suffix(&[0]) != Some(virtio_mmio::COMPATIBLE.as_bytes()) {
            return Err(bad("compatible"));
        }
        let reg = node.property("reg").ok_or(bad("reg"))?;
        let want_reg = [
            (base >> 32) as u32,
            base as u32,
            (TRANSPORT_SIZE >> 32) as u32,
            TRANSPORT_SIZE as u32,
        ];
        if cells(reg.value) != (want_reg, 4) {
            return Err(bad("reg"));
        }
        let interrupts = node.property("interrupts").ok_or(bad("interrupts"))?;
        let want_irq = [
            GIC_SPI,
            virtio_mmio::FIRST_SPI + transport,
            virtio_mmio::IRQ_FLAGS_EDGE_RISING,
            0,
        ];
        if cells(interrupts.value) != (want_irq, 3) {
            return Err(bad("interrupts"));
        }
        if node.property("dma-coherent").is_none() {
            return Err(bad("dma-coherent"));
        }
    }
    let count = fdt
        .all_nodes()
        .filter(|n| {
            n.compatible()
                .is_some_and(|c| c.all().any(|c| c == virtio_mmio::COMPATIBLE))
        })
        .count();
    if count != TRANSPORTS as usize {
        return Err(NodeError::Count(count));
    }
    Ok(())
}

/// A node path, built without an allocator.
#[cfg(any(test, feature = "runtime"))]
#[derive(Default)]
struct PathBuf {
    bytes: [u8; 32],
    len: usize,
}

#[cfg(any(test, feature = "runtime"))]
impl PathBuf {
    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }
}

#[cfg(any(test, feature = "runtime"))]
impl fmt::Write for PathBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let slot = self.bytes.get_mut(self.len..end).ok_or(fmt::Error)?;
        slot.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvlock_abi::virtio_mmio::{VERSION, VERSION_LEGACY, WINDOW_BASE, WINDOW_SIZE};
    use std::collections::BTreeMap;

    /// QEMU 7.2's own tree for `virt` (guest-driver/tests/fixtures).
    const QEMU_VIRT: &[u8] = include_bytes!("../tests/fixtures/qemu-virt-el1-4cpu.dtb");

    /// An empty window that reports `version`, with `stored` holding what a
    /// broken one would keep of writes.
    struct Window {
        version: u32,
        keeps_writes: bool,
        stored: BTreeMap<u64, u32>,
    }

    impl Window {
        fn read(&self, address: u64) -> u32 {
            assert!((WINDOW_BASE..WINDOW_BASE + WINDOW_SIZE).contains(&address));
            if let Some(&v) = self.stored.get(&address) {
                return v;
            }
            match (address - WINDOW_BASE) % TRANSPORT_SIZE {
                reg::VERSION => self.version,
                offset => virtio_mmio::empty_register(offset),
            }
        }
    }

    fn check(window: &mut Window, version: u32) -> Result<(), TransportError> {
        let window = core::cell::RefCell::new(window);
        check_transports(
            version,
            |a| window.borrow().read(a),
            |a, v| {
                let mut w = window.borrow_mut();
                if w.keeps_writes {
                    w.stored.insert(a, v);
                }
            },
        )
    }

    fn window(version: u32) -> Window {
        Window {
            version,
            keeps_writes: false,
            stored: BTreeMap::new(),
        }
    }

    #[test]
    fn an_empty_window_passes_and_each_difference_is_named() {
        check(&mut window(VERSION), VERSION).unwrap();
        check(&mut window(VERSION_LEGACY), VERSION_LEGACY).unwrap();
        let err = check(&mut window(VERSION_LEGACY), VERSION).unwrap_err();
        assert_eq!(
            err.to_string(),
            "transport 0 at 0xa000000: Version reads 0x1, expected 0x2"
        );
        let mut keeping = window(VERSION);
        keeping.keeps_writes = true;
        let err = check(&mut keeping, VERSION).unwrap_err();
        assert_eq!(err.register, "Status after a write");
        assert_eq!(err.read, STATUS_PROBE);
        let mut device = window(VERSION);
        device
            .stored
            .insert(WINDOW_BASE + 31 * 0x200 + reg::DEVICE_ID, 2);
        let err = check(&mut device, VERSION).unwrap_err();
        assert_eq!((err.transport, err.register), (31, "DeviceID"));
        let mut config = window(VERSION);
        config.stored.insert(WINDOW_BASE + 0x200 + reg::CONFIG, 7);
        assert_eq!(check(&mut config, VERSION).unwrap_err().transport, 1);
    }

    #[test]
    fn qemu_virts_own_tree_has_the_nodes() {
        check_nodes(QEMU_VIRT).unwrap();
        assert_eq!(check_nodes(&[0; 64]), Err(NodeError::NotADeviceTree));
    }

    #[test]
    fn a_tree_without_them_or_with_others_fails() {
        let vm = include_bytes!("../tests/fixtures/vm-8vcpu.dtb");
        assert_eq!(check_nodes(vm), Err(NodeError::Missing { transport: 0 }));
        // QEMU's tree with one node's interrupt flags changed to level.
        let mut edited = QEMU_VIRT.to_vec();
        let needle = [0, 0, 0, 0, 0, 0, 0, 16 + 5, 0, 0, 0, 1];
        let at = edited
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("transport 5's interrupts");
        edited[at + 11] = 4;
        assert_eq!(
            check_nodes(&edited),
            Err(NodeError::Property {
                transport: 5,
                property: "interrupts"
            })
        );
        assert_eq!(
            NodeError::Property {
                transport: 5,
                property: "interrupts"
            }
            .to_string(),
            "/virtio_mmio@a000a00: interrupts is not QEMU virt's"
        );
    }
}
