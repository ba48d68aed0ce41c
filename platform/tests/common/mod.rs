//! Shared test helpers: fixture loading and a tiny FDT builder for
//! hand-made trees.
#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;

/// Reads `tests/fixtures/<name>`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The real board DTBs (from Debian's kernel package).
pub const BOARD_FIXTURES: &[&str] = &[
    "fvp-base-revc.dtb",
    "hip06-d03.dtb",
    "hip07-d05.dtb",
    "juno-r2.dtb",
    "thunder2-99xx.dtb",
];

/// The QEMU 7.2 `virt` dumps.
pub const QEMU_FIXTURES: &[&str] = &[
    "qemu-virt-a57-1cpu.dtb",
    "qemu-virt-a57-2cpu-bootargs.dtb",
    "qemu-virt-a57-64cpu.dtb",
    "qemu-virt-max-8cpu-2clusters.dtb",
    "qemu-virt-n1-128cpu.dtb",
    "qemu-virt-n1-4cpu.dtb",
];

/// A device tree node to serialise with [`Node::to_dtb`].
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub props: Vec<(String, Vec<u8>)>,
    pub children: Vec<Node>,
}

/// `<u32 ...>` cells.
pub fn cells(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_be_bytes()).collect()
}

/// A `<string>`.
pub fn string(value: &str) -> Vec<u8> {
    strings(&[value])
}

/// A `<stringlist>`.
pub fn strings(values: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

impl Node {
    pub fn new(name: &str) -> Node {
        Node {
            name: name.to_string(),
            props: Vec::new(),
            children: Vec::new(),
        }
    }

    /// Adds (or replaces) a property.
    pub fn prop(mut self, name: &str, value: Vec<u8>) -> Node {
        self.set(name, value);
        self
    }

    pub fn child(mut self, child: Node) -> Node {
        self.children.push(child);
        self
    }

    pub fn set(&mut self, name: &str, value: Vec<u8>) {
        match self.props.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.props.push((name.to_string(), value)),
        }
    }

    pub fn remove(&mut self, name: &str) {
        self.props.retain(|(n, _)| n != name);
    }

    /// The node at `path` ("/" is self).
    pub fn at(&mut self, path: &str) -> &mut Node {
        let mut node = self;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            node = node
                .children
                .iter_mut()
                .find(|c| c.name == part)
                .unwrap_or_else(|| panic!("no node {part}"));
        }
        node
    }

    /// Removes the child subtree at `path`.
    pub fn remove_node(&mut self, path: &str) {
        let (parent, name) = path.rsplit_once('/').expect("absolute path");
        self.at(parent).children.retain(|c| c.name != name);
    }

    /// Serialises as a version 17 blob with the given `/memreserve/`s.
    pub fn to_dtb(&self, reservations: &[(u64, u64)]) -> Vec<u8> {
        let mut strings: Vec<u8> = Vec::new();
        let mut offsets: BTreeMap<String, u32> = BTreeMap::new();
        let mut structs: Vec<u8> = Vec::new();
        self.emit(&mut structs, &mut strings, &mut offsets);
        structs.extend_from_slice(&9u32.to_be_bytes()); // FDT_END

        let mut rsv: Vec<u8> = Vec::new();
        for &(address, size) in reservations.iter().chain(&[(0, 0)]) {
            rsv.extend_from_slice(&address.to_be_bytes());
            rsv.extend_from_slice(&size.to_be_bytes());
        }
        let off_rsv = 40u32;
        let off_struct = off_rsv + rsv.len() as u32;
        let off_strings = off_struct + structs.len() as u32;
        let total = off_strings + strings.len() as u32;
        let header = [
            0xd00d_feed,
            total,
            off_struct,
            off_strings,
            off_rsv,
            17,
            16,
            0,
            strings.len() as u32,
            structs.len() as u32,
        ];
        let mut blob = cells(&header);
        blob.extend(rsv);
        blob.extend(structs);
        blob.extend(strings);
        blob
    }

    fn emit(&self, out: &mut Vec<u8>, strings: &mut Vec<u8>, offsets: &mut BTreeMap<String, u32>) {
        out.extend_from_slice(&1u32.to_be_bytes()); // FDT_BEGIN_NODE
        out.extend_from_slice(self.name.as_bytes());
        out.push(0);
        pad(out);
        for (name, value) in &self.props {
            let offset = *offsets.entry(name.clone()).or_insert_with(|| {
                let at = strings.len() as u32;
                strings.extend_from_slice(name.as_bytes());
                strings.push(0);
                at
            });
            out.extend_from_slice(&3u32.to_be_bytes()); // FDT_PROP
            out.extend_from_slice(&(value.len() as u32).to_be_bytes());
            out.extend_from_slice(&offset.to_be_bytes());
            out.extend_from_slice(value);
            pad(out);
        }
        for child in &self.children {
            child.emit(out, strings, offsets);
        }
        out.extend_from_slice(&2u32.to_be_bytes()); // FDT_END_NODE
    }
}

fn pad(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// GIC phandle in [`virt`].
pub const GIC_PHANDLE: u32 = 0x8002;

/// A small tree shaped like QEMU 7.2's `virt` machine (gic-version=3,
/// virtualization=on, 2 CPUs, 1 GiB), with the same node names.
pub fn virt() -> Node {
    let cpu = |n: u32| {
        Node::new(&format!("cpu@{n}"))
            .prop("device_type", string("cpu"))
            .prop("compatible", string("arm,cortex-a57"))
            .prop("reg", cells(&[n]))
            .prop("enable-method", string("psci"))
            .prop("phandle", cells(&[0x8000 + n]))
    };
    Node::new("")
        .prop("interrupt-parent", cells(&[GIC_PHANDLE]))
        .prop("model", string("linux,dummy-virt"))
        .prop("#size-cells", cells(&[2]))
        .prop("#address-cells", cells(&[2]))
        .prop("compatible", string("linux,dummy-virt"))
        .child(Node::new("psci").prop("method", string("smc")).prop(
            "compatible",
            strings(&["arm,psci-1.0", "arm,psci-0.2", "arm,psci"]),
        ))
        .child(
            Node::new("memory@40000000")
                .prop("reg", cells(&[0, 0x4000_0000, 0, 0x4000_0000]))
                .prop("device_type", string("memory")),
        )
        .child(
            Node::new("pl011@9000000")
                .prop("interrupts", cells(&[0, 1, 4]))
                .prop("reg", cells(&[0, 0x0900_0000, 0, 0x1000]))
                .prop("compatible", strings(&["arm,pl011", "arm,primecell"])),
        )
        .child(
            Node::new("intc@8000000")
                .prop("phandle", cells(&[GIC_PHANDLE]))
                .prop("interrupts", cells(&[1, 9, 4]))
                .prop(
                    "reg",
                    cells(&[0, 0x0800_0000, 0, 0x10000, 0, 0x080a_0000, 0, 0xf6_0000]),
                )
                .prop("#redistributor-regions", cells(&[1]))
                .prop("compatible", string("arm,gic-v3"))
                .prop("ranges", vec![])
                .prop("#size-cells", cells(&[2]))
                .prop("#address-cells", cells(&[2]))
                .prop("interrupt-controller", vec![])
                .prop("#interrupt-cells", cells(&[3]))
                .child(
                    Node::new("its@8080000")
                        .prop("reg", cells(&[0, 0x0808_0000, 0, 0x20000]))
                        .prop("msi-controller", vec![])
                        .prop("compatible", string("arm,gic-v3-its")),
                ),
        )
        .child(
            Node::new("cpus")
                .prop("#size-cells", cells(&[0]))
                .prop("#address-cells", cells(&[1]))
                .child(
                    Node::new("cpu-map").child(
                        Node::new("socket0").child(
                            Node::new("cluster0")
                                .child(Node::new("core0").prop("cpu", cells(&[0x8000])))
                                .child(Node::new("core1").prop("cpu", cells(&[0x8001]))),
                        ),
                    ),
                )
                .child(cpu(0))
                .child(cpu(1)),
        )
        .child(
            Node::new("timer")
                .prop(
                    "interrupts",
                    cells(&[1, 13, 4, 1, 14, 4, 1, 11, 4, 1, 10, 4]),
                )
                .prop("always-on", vec![])
                .prop(
                    "compatible",
                    strings(&["arm,armv8-timer", "arm,armv7-timer"]),
                ),
        )
        .child(Node::new("chosen").prop("stdout-path", string("/pl011@9000000")))
}
