//! Interpretation of the indexed tree as a [`Platform`].
//!
//! Generic rules come from the Devicetree Specification v0.4 (cited as
//! "DT spec"); device rules from the Linux kernel's bindings under
//! Documentation/devicetree/bindings/ (cited by file name).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::ffi::CStr;

use crate::fdt::{Fdt, MAX_DEPTH, NodeId, be32, be64, string_list};
use crate::{
    ArchTimer, Conduit, Cpu, EnableMethod, ErrorKind, GicV3, Interrupt, MemRange, Mpidr, Platform,
    PlatformError, Psci, RedistributorRegion, ReservedRegion, Uart, UartKind,
};

/// Largest `#address-cells` / `#size-cells` / `#interrupt-cells` accepted
/// (Linux's OF_MAX_ADDR_CELLS is 4 too).
const MAX_CELLS: u32 = 4;
/// Bound on interrupt-parent / interrupt-map hops, so a phandle cycle in
/// the interrupt tree is an error instead of an endless walk.
const MAX_INTERRUPT_HOPS: usize = 64;

/// GICv2-family compatibles (interrupt-controller/arm,gic.yaml), recognised
/// only to reject them with a clear message.
const GICV2_COMPATIBLES: &[&str] = &[
    "arm,arm11mp-gic",
    "arm,arm1176jzf-devchip-gic",
    "arm,cortex-a15-gic",
    "arm,cortex-a5-gic",
    "arm,cortex-a7-gic",
    "arm,cortex-a9-gic",
    "arm,eb11mp-gic",
    "arm,gic-400",
    "arm,pl390",
    "arm,tc11mp-gic",
    "brcm,brahma-b15-gic",
    "nvidia,tegra210-agic",
    "qcom,msm-8660-qgic",
    "qcom,msm-qgic2",
];

/// Architected timer compatibles (timer/arm,arch_timer.yaml).
const TIMER_COMPATIBLES: &[&str] = &["arm,armv8-timer", "arm,armv7-timer"];

/// PSCI compatibles and the version each implies (arm/psci.yaml).
const PSCI_VERSIONS: &[(&str, (u16, u16))] = &[
    ("arm,psci", (0, 1)),
    ("arm,psci-0.2", (0, 2)),
    ("arm,psci-1.0", (1, 0)),
];

/// `interrupt-names` of the timer, in binding order (arm,arch_timer.yaml).
const TIMER_IRQ_NAMES: [&str; 5] = ["sec-phys", "phys", "virt", "hyp-phys", "hyp-virt"];

pub(crate) fn parse(fdt: &Fdt<'_>) -> Result<Platform, PlatformError> {
    let tree = Tree { fdt };
    // The GIC first: a GICv2 board is rejected before anything else is
    // looked at, with the reason that matters.
    let gic_node = tree.gic_node()?;
    let gic = tree.gic(gic_node)?;
    let mut platform = Platform {
        model: tree.model()?,
        memory: tree.memory()?,
        reserved: tree.reserved()?,
        cpus: tree.cpus()?,
        gic,
        uart: tree.console(gic_node)?,
        timer: tree.timer(gic_node)?,
        psci: tree.psci()?,
        bootargs: tree.bootargs()?,
        rtc: tree.rtc()?,
        vms: Vec::new(),
    };
    // Last, and never failing: a bad VM node only affects that VM.
    platform.vms = crate::vm::parse_vms(&tree, platform.cpus.len());
    Ok(platform)
}

/// An interrupt specifier and the node that interprets it.
struct Specifier {
    parent: NodeId,
    cells: Vec<u32>,
}

/// The indexed tree plus the typed accessors the parser needs; every
/// accessor reports errors with the node's path and the property name.
pub(crate) struct Tree<'f, 'a> {
    pub(crate) fdt: &'f Fdt<'a>,
}

impl Tree<'_, '_> {
    // ---- errors ----------------------------------------------------------

    fn error(&self, node: NodeId, property: Option<&str>, kind: ErrorKind) -> PlatformError {
        PlatformError {
            node: self.fdt.path(node),
            property: property.map(String::from),
            kind,
        }
    }

    pub(crate) fn bad(
        &self,
        node: NodeId,
        property: &str,
        why: impl Into<String>,
    ) -> PlatformError {
        self.error(node, Some(property), ErrorKind::BadValue(why.into()))
    }

    pub(crate) fn missing(&self, node: NodeId, property: &str) -> PlatformError {
        self.error(node, Some(property), ErrorKind::MissingProperty)
    }

    /// A required node that is not there, named by its conventional path.
    fn missing_node(path: &str) -> PlatformError {
        PlatformError {
            node: String::from(path),
            property: None,
            kind: ErrorKind::MissingNode,
        }
    }

    // ---- property accessors ---------------------------------------------

    fn has(&self, node: NodeId, property: &str) -> bool {
        self.fdt.prop(node, property).is_some()
    }

    /// A `<u32>` property; `None` when absent.
    pub(crate) fn u32_prop(
        &self,
        node: NodeId,
        property: &str,
    ) -> Result<Option<u32>, PlatformError> {
        let Some(value) = self.fdt.prop(node, property) else {
            return Ok(None);
        };
        match be32(value, 0) {
            Some(v) if value.len() == 4 => Ok(Some(v)),
            _ => Err(self.bad(
                node,
                property,
                format!("expected 4 bytes, found {}", value.len()),
            )),
        }
    }

    /// A `<u64>` property (two cells); `None` when absent.
    pub(crate) fn u64_prop(
        &self,
        node: NodeId,
        property: &str,
    ) -> Result<Option<u64>, PlatformError> {
        let Some(value) = self.fdt.prop(node, property) else {
            return Ok(None);
        };
        match be64(value, 0) {
            Some(v) if value.len() == 8 => Ok(Some(v)),
            _ => Err(self.bad(
                node,
                property,
                format!("expected 8 bytes, found {}", value.len()),
            )),
        }
    }

    /// A property as `u32` cells; its length must be a multiple of 4.
    pub(crate) fn cells(
        &self,
        node: NodeId,
        property: &str,
    ) -> Result<Option<Vec<u32>>, PlatformError> {
        let Some(value) = self.fdt.prop(node, property) else {
            return Ok(None);
        };
        if !value.len().is_multiple_of(4) {
            return Err(self.bad(
                node,
                property,
                format!("length {} is not a multiple of 4", value.len()),
            ));
        }
        Ok(Some(
            value.chunks_exact(4).filter_map(|c| be32(c, 0)).collect(),
        ))
    }

    /// A `<string-list>` property (DT spec 2.2.4); `None` when absent.
    pub(crate) fn strings(
        &self,
        node: NodeId,
        property: &str,
    ) -> Result<Option<Vec<&str>>, PlatformError> {
        let Some(value) = self.fdt.prop(node, property) else {
            return Ok(None);
        };
        let Some(body) = value.strip_suffix(&[0]) else {
            return Err(self.bad(node, property, "string not NUL-terminated"));
        };
        body.split(|&b| b == 0)
            .map(|s| {
                core::str::from_utf8(s).map_err(|_| self.bad(node, property, "string not UTF-8"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// A `<string>` property (the first string of a list); `None` when
    /// absent.
    pub(crate) fn string(
        &self,
        node: NodeId,
        property: &str,
    ) -> Result<Option<&str>, PlatformError> {
        let Some(value) = self.fdt.prop(node, property) else {
            return Ok(None);
        };
        let Ok(text) = CStr::from_bytes_until_nul(value) else {
            return Err(self.bad(node, property, "string not NUL-terminated"));
        };
        core::str::from_utf8(text.to_bytes())
            .map(Some)
            .map_err(|_| self.bad(node, property, "string not UTF-8"))
    }

    /// Whether `compatible` lists any of `names`. Only decides which nodes
    /// are looked at, so a malformed `compatible` simply matches less.
    fn is_compatible_any(&self, node: NodeId, names: &[&str]) -> bool {
        string_list(self.fdt.compatible(node))
            .any(|entry| names.iter().any(|name| name.as_bytes() == entry))
    }

    pub(crate) fn is_compatible(&self, node: NodeId, name: &str) -> bool {
        self.is_compatible_any(node, &[name])
    }

    /// Whether `device_type` (DT spec 2.3.11) is `kind`.
    fn has_device_type(&self, node: NodeId, kind: &str) -> bool {
        self.fdt
            .device_type(node)
            .is_some_and(|value| string_list(value).next() == Some(kind.as_bytes()))
    }

    /// DT spec 2.3.4: a node is usable when `status` is absent, "okay" or
    /// the legacy "ok".
    pub(crate) fn is_enabled(&self, node: NodeId) -> bool {
        match self.fdt.status(node) {
            None => true,
            Some(value) => matches!(string_list(value).next(), Some(b"okay" | b"ok")),
        }
    }

    /// The first enabled node, in document order, compatible with any of
    /// `names`.
    fn find_compatible(&self, names: &[&str]) -> Option<NodeId> {
        self.fdt
            .node_ids()
            .find(|&n| self.is_compatible_any(n, names) && self.is_enabled(n))
    }

    // ---- addresses --------------------------------------------------------

    /// `#address-cells` / `#size-cells` of `bus`, defaulting to 2 and 1
    /// (DT spec 2.3.5; they are not inherited).
    fn bus_cells(&self, bus: NodeId) -> Result<(u32, u32), PlatformError> {
        let address = self.u32_prop(bus, "#address-cells")?.unwrap_or(2);
        let size = self.u32_prop(bus, "#size-cells")?.unwrap_or(1);
        if address > MAX_CELLS {
            return Err(self.bad(
                bus,
                "#address-cells",
                format!("{address} exceeds {MAX_CELLS}"),
            ));
        }
        if size > MAX_CELLS {
            return Err(self.bad(bus, "#size-cells", format!("{size} exceeds {MAX_CELLS}")));
        }
        Ok((address, size))
    }

    /// `node`'s `reg` entries as written, in its parent bus's address space.
    fn raw_reg(&self, node: NodeId) -> Result<Vec<MemRange>, PlatformError> {
        let Some(bus) = self.fdt.parent(node) else {
            return Err(self.bad(node, "reg", "the root node has no reg"));
        };
        let (address_cells, size_cells) = self.bus_cells(bus)?;
        let cells = self
            .cells(node, "reg")?
            .ok_or_else(|| self.missing(node, "reg"))?;
        let entry = (address_cells + size_cells) as usize;
        if address_cells == 0 || cells.is_empty() || !cells.len().is_multiple_of(entry) {
            return Err(self.bad(
                node,
                "reg",
                format!(
                    "{} cells do not form <address {address_cells} cells, size {size_cells} cells> entries",
                    cells.len()
                ),
            ));
        }
        cells
            .chunks_exact(entry)
            .map(|chunk| {
                let parsed =
                    chunk
                        .split_at_checked(address_cells as usize)
                        .and_then(|(address, size)| {
                            Some((cells_to_u64(address)?, cells_to_u64(size)?))
                        });
                match parsed {
                    Some((base, size)) if base.checked_add(size).is_some() => {
                        Ok(MemRange::new(base, size))
                    }
                    _ => Err(self.bad(node, "reg", "address or size does not fit in 64 bits")),
                }
            })
            .collect()
    }

    /// `node`'s `reg` entries as CPU physical addresses.
    fn reg(&self, node: NodeId) -> Result<Vec<MemRange>, PlatformError> {
        self.raw_reg(node)?
            .into_iter()
            .map(|range| Ok(MemRange::new(self.translate(node, range.base)?, range.size)))
            .collect()
    }

    /// The first `reg` entry, translated.
    fn first_reg(&self, node: NodeId) -> Result<MemRange, PlatformError> {
        let range = self
            .raw_reg(node)?
            .first()
            .copied()
            .ok_or_else(|| self.missing(node, "reg"))?;
        Ok(MemRange::new(self.translate(node, range.base)?, range.size))
    }

    /// Translates `address`, read from `node`'s `reg`, up through each
    /// ancestor bus's `ranges` to a CPU physical address (DT spec 2.3.8).
    /// Like Linux, only the start address has to fall inside a window.
    fn translate(&self, node: NodeId, address: u64) -> Result<u64, PlatformError> {
        let mut address = address;
        let mut bus = self.fdt.parent(node);
        // Each step moves one level up, so the depth bounds the loop.
        for _ in 0..=MAX_DEPTH {
            let Some(current) = bus else {
                return Ok(address);
            };
            let Some(upper) = self.fdt.parent(current) else {
                // `current` is the root: its space is the CPU's.
                return Ok(address);
            };
            let Some(ranges) = self.cells(current, "ranges")? else {
                return Err(self.bad(
                    node,
                    "reg",
                    format!(
                        "not memory-mapped: bus {} has no \"ranges\"",
                        self.fdt.path(current)
                    ),
                ));
            };
            if !ranges.is_empty() {
                address = self.translate_through(node, current, upper, &ranges, address)?;
            }
            bus = Some(upper);
        }
        Err(self.bad(node, "reg", "bus nesting too deep"))
    }

    /// One `ranges` step: `<child-address parent-address size>` triples,
    /// sized by `bus`'s and `upper`'s `#address-cells` and `bus`'s
    /// `#size-cells`.
    fn translate_through(
        &self,
        node: NodeId,
        bus: NodeId,
        upper: NodeId,
        ranges: &[u32],
        address: u64,
    ) -> Result<u64, PlatformError> {
        let (child_cells, size_cells) = self.bus_cells(bus)?;
        let (parent_cells, _) = self.bus_cells(upper)?;
        let (child_cells, parent_cells) = (child_cells as usize, parent_cells as usize);
        let entry = child_cells + parent_cells + size_cells as usize;
        if entry == 0 || !ranges.len().is_multiple_of(entry) {
            return Err(self.bad(
                bus,
                "ranges",
                format!(
                    "{} cells do not form whole entries of {entry}",
                    ranges.len()
                ),
            ));
        }
        for window in ranges.chunks_exact(entry) {
            let Some((child, rest)) = window.split_at_checked(child_cells) else {
                continue;
            };
            let Some((parent, size)) = rest.split_at_checked(parent_cells) else {
                continue;
            };
            // Windows whose addresses do not fit in 64 bits (e.g. PCI
            // space-code cells) cannot contain a 64-bit address.
            let (Some(child), Some(parent), Some(size)) = (
                cells_to_u64(child),
                cells_to_u64(parent),
                cells_to_u64(size),
            ) else {
                continue;
            };
            if address >= child && address - child < size {
                return parent.checked_add(address - child).ok_or_else(|| {
                    self.bad(bus, "ranges", "translated address overflows 64 bits")
                });
            }
        }
        Err(self.bad(
            node,
            "reg",
            format!(
                "address {address:#x} is outside every \"ranges\" window of {}",
                self.fdt.path(bus)
            ),
        ))
    }

    // ---- interrupts -------------------------------------------------------

    /// `#interrupt-cells` of an interrupt parent, which must have it.
    fn interrupt_cells(&self, parent: NodeId) -> Result<usize, PlatformError> {
        let cells = self
            .u32_prop(parent, "#interrupt-cells")?
            .ok_or_else(|| self.missing(parent, "#interrupt-cells"))?;
        if cells > MAX_CELLS {
            return Err(self.bad(
                parent,
                "#interrupt-cells",
                format!("{cells} exceeds {MAX_CELLS}"),
            ));
        }
        Ok(cells as usize)
    }

    /// The node `interrupt-parent` names (a phandle).
    fn phandle_target(&self, node: NodeId, property: &str) -> Result<NodeId, PlatformError> {
        let phandle = self
            .u32_prop(node, property)?
            .ok_or_else(|| self.missing(node, property))?;
        self.fdt
            .by_phandle(phandle)
            .ok_or_else(|| self.bad(node, property, format!("no node has phandle {phandle:#x}")))
    }

    /// `node`'s interrupt parent (DT spec 2.4.1): the `interrupt-parent`
    /// phandle or else the tree parent, repeated until a node with
    /// `#interrupt-cells` is reached, as Linux's of_irq_find_parent does.
    fn interrupt_parent(&self, node: NodeId) -> Result<NodeId, PlatformError> {
        let mut current = node;
        for _ in 0..MAX_INTERRUPT_HOPS {
            let next = if self.has(current, "interrupt-parent") {
                self.phandle_target(current, "interrupt-parent")?
            } else {
                self.fdt.parent(current).ok_or_else(|| {
                    self.bad(node, "interrupts", "no interrupt parent up to the root")
                })?
            };
            if self.has(next, "#interrupt-cells") {
                return Ok(next);
            }
            current = next;
        }
        Err(self.bad(
            node,
            "interrupt-parent",
            "interrupt-parent chain too long or cyclic",
        ))
    }

    /// The raw specifiers of `node`'s interrupts, from `interrupts-extended`
    /// (`<phandle specifier>...`) or `interrupts` (DT spec 2.4.1.1).
    fn raw_interrupts(&self, node: NodeId) -> Result<Vec<Specifier>, PlatformError> {
        if let Some(cells) = self.cells(node, "interrupts-extended")? {
            let mut specifiers = Vec::new();
            let mut rest = cells.as_slice();
            while let Some((&phandle, tail)) = rest.split_first() {
                let parent = self.fdt.by_phandle(phandle).ok_or_else(|| {
                    self.bad(
                        node,
                        "interrupts-extended",
                        format!("no node has phandle {phandle:#x}"),
                    )
                })?;
                let count = self.interrupt_cells(parent)?;
                let Some((spec, tail)) = tail.split_at_checked(count) else {
                    return Err(self.bad(node, "interrupts-extended", "truncated specifier"));
                };
                specifiers.push(Specifier {
                    parent,
                    cells: spec.to_vec(),
                });
                rest = tail;
            }
            return Ok(specifiers);
        }
        let Some(cells) = self.cells(node, "interrupts")? else {
            return Ok(Vec::new());
        };
        let parent = self.interrupt_parent(node)?;
        let count = self.interrupt_cells(parent)?;
        if count == 0 || !cells.len().is_multiple_of(count) {
            return Err(self.bad(
                node,
                "interrupts",
                format!(
                    "{} cells are not whole specifiers of {count} cells (#interrupt-cells of {})",
                    cells.len(),
                    self.fdt.path(parent)
                ),
            ));
        }
        Ok(cells
            .chunks_exact(count)
            .map(|spec| Specifier {
                parent,
                cells: spec.to_vec(),
            })
            .collect())
    }

    /// Follows `spec` through interrupt nexus nodes (`interrupt-map`, DT
    /// spec 2.4.3) to the controller that finally interprets it. `None`
    /// when a map has no entry for it.
    fn resolve_interrupt(
        &self,
        device: NodeId,
        spec: Specifier,
    ) -> Result<Option<Specifier>, PlatformError> {
        let Specifier {
            mut parent,
            mut cells,
        } = spec;
        // The child unit address for interrupt-map matching starts as the
        // device's `reg` address cells.
        let mut unit_address: Vec<u32> =
            self.cells(device, "reg").ok().flatten().unwrap_or_default();
        for _ in 0..MAX_INTERRUPT_HOPS {
            if self.has(parent, "interrupt-controller") {
                return Ok(Some(Specifier { parent, cells }));
            }
            if self.has(parent, "interrupt-map") {
                match self.map_interrupt(parent, &unit_address, &cells)? {
                    Some((next, next_address, next_cells)) => {
                        parent = next;
                        unit_address = next_address;
                        cells = next_cells;
                    }
                    None => return Ok(None),
                }
            } else {
                // Neither a controller nor a nexus: pass the specifier on
                // to this node's own interrupt parent, unchanged.
                let next = self.interrupt_parent(parent)?;
                if self.interrupt_cells(next)? != cells.len() {
                    return Err(self.bad(
                        next,
                        "#interrupt-cells",
                        format!("does not match the {} cells passed on to it", cells.len()),
                    ));
                }
                parent = next;
            }
        }
        Err(self.bad(device, "interrupts", "interrupt tree too deep or cyclic"))
    }

    /// One `interrupt-map` lookup in `nexus`: returns the matching entry's
    /// parent, parent unit address and parent specifier.
    #[allow(clippy::type_complexity)]
    fn map_interrupt(
        &self,
        nexus: NodeId,
        unit_address: &[u32],
        spec: &[u32],
    ) -> Result<Option<(NodeId, Vec<u32>, Vec<u32>)>, PlatformError> {
        let address_cells = self.nexus_address_cells(nexus)?;
        let interrupt_cells = self.interrupt_cells(nexus)?;
        if spec.len() != interrupt_cells {
            return Err(self.bad(
                nexus,
                "#interrupt-cells",
                format!("does not match the {} cells passed to it", spec.len()),
            ));
        }
        // The lookup key: child unit address (zero-padded) then specifier.
        let mut key: Vec<u32> = (0..address_cells)
            .map(|i| unit_address.get(i).copied().unwrap_or(0))
            .collect();
        key.extend_from_slice(spec);
        let mask = match self.cells(nexus, "interrupt-map-mask")? {
            Some(mask) if mask.len() == key.len() => mask,
            Some(_) => {
                return Err(self.bad(nexus, "interrupt-map-mask", "length does not match the key"));
            }
            None => vec![u32::MAX; key.len()],
        };
        let masked =
            |cells: &[u32]| -> Vec<u32> { cells.iter().zip(&mask).map(|(c, m)| c & m).collect() };
        let wanted = masked(&key);
        let map = self.cells(nexus, "interrupt-map")?.unwrap_or_default();
        let mut rest = map.as_slice();
        // Each entry consumes at least its phandle cell, so this ends.
        while !rest.is_empty() {
            let truncated = || self.bad(nexus, "interrupt-map", "truncated entry");
            let (child, tail) = rest.split_at_checked(key.len()).ok_or_else(truncated)?;
            let (&phandle, tail) = tail.split_first().ok_or_else(truncated)?;
            let parent = self.fdt.by_phandle(phandle).ok_or_else(|| {
                self.bad(
                    nexus,
                    "interrupt-map",
                    format!("no node has phandle {phandle:#x}"),
                )
            })?;
            // Linux reads the parent's own #address-cells, defaulting to 0.
            let parent_address_cells = self.u32_prop(parent, "#address-cells")?.unwrap_or(0);
            if parent_address_cells > MAX_CELLS {
                return Err(self.bad(parent, "#address-cells", "too large"));
            }
            let parent_interrupt_cells = self.interrupt_cells(parent)?;
            let (parent_address, tail) = tail
                .split_at_checked(parent_address_cells as usize)
                .ok_or_else(truncated)?;
            let (parent_spec, tail) = tail
                .split_at_checked(parent_interrupt_cells)
                .ok_or_else(truncated)?;
            if masked(child) == wanted {
                return Ok(Some((
                    parent,
                    parent_address.to_vec(),
                    parent_spec.to_vec(),
                )));
            }
            rest = tail;
        }
        Ok(None)
    }

    /// `#address-cells` for an interrupt-map key: the nexus's own, else the
    /// nearest ancestor's, else 2 (Linux of_irq_parse_raw does this walk
    /// because real trees rely on it).
    fn nexus_address_cells(&self, nexus: NodeId) -> Result<usize, PlatformError> {
        let mut current = Some(nexus);
        for _ in 0..=MAX_DEPTH {
            let Some(node) = current else { break };
            if let Some(cells) = self.u32_prop(node, "#address-cells")? {
                if cells > MAX_CELLS {
                    return Err(self.bad(node, "#address-cells", "too large"));
                }
                return Ok(cells as usize);
            }
            current = self.fdt.parent(node);
        }
        Ok(2)
    }

    /// `node`'s interrupts as GIC interrupts; each must end up at `gic`.
    fn gic_interrupts(&self, node: NodeId, gic: NodeId) -> Result<Vec<Interrupt>, PlatformError> {
        let property = if self.has(node, "interrupts-extended") {
            "interrupts-extended"
        } else {
            "interrupts"
        };
        self.raw_interrupts(node)?
            .into_iter()
            .map(|spec| {
                let resolved = self
                    .resolve_interrupt(node, spec)?
                    .ok_or_else(|| self.bad(node, property, "not mapped by any interrupt-map"))?;
                if resolved.parent != gic {
                    return Err(self.bad(
                        node,
                        property,
                        format!(
                            "routed to {}, not the GICv3",
                            self.fdt.path(resolved.parent)
                        ),
                    ));
                }
                gic_interrupt(&resolved.cells).map_err(|why| self.bad(node, property, why))
            })
            .collect()
    }

    // ---- the pieces of Platform -------------------------------------------

    fn model(&self) -> Result<String, PlatformError> {
        const ROOT: NodeId = 0;
        if let Some(model) = self.string(ROOT, "model")? {
            return Ok(model.to_string());
        }
        Ok(self
            .string(ROOT, "compatible")?
            .unwrap_or_default()
            .to_string())
    }

    /// Every enabled `device_type = "memory"` node's `reg`, sorted.
    fn memory(&self) -> Result<Vec<MemRange>, PlatformError> {
        let mut banks = Vec::new();
        for node in self.fdt.node_ids() {
            if self.fdt.parent(node).is_none()
                || !self.has_device_type(node, "memory")
                || !self.is_enabled(node)
            {
                continue;
            }
            banks.extend(self.reg(node)?.into_iter().filter(|r| r.size != 0));
        }
        if banks.is_empty() {
            return Err(Self::missing_node("/memory"));
        }
        banks.sort();
        Ok(banks)
    }

    /// `/memreserve/` entries, then `/reserved-memory` children with `reg`
    /// (reserved-memory/reserved-memory.yaml; children with only `size`
    /// are dynamically placed by the OS and have no fixed address).
    fn reserved(&self) -> Result<Vec<ReservedRegion>, PlatformError> {
        let mut regions: Vec<ReservedRegion> = self
            .fdt
            .reservations()
            .iter()
            .filter(|r| r.size != 0)
            .map(|&range| ReservedRegion {
                range,
                name: String::from("/memreserve/"),
            })
            .collect();
        if let Some(parent) = self.fdt.find_path("/reserved-memory") {
            for child in self.fdt.children(parent) {
                if !self.is_enabled(child) || !self.has(child, "reg") {
                    continue;
                }
                for range in self.reg(child)? {
                    regions.push(ReservedRegion {
                        range,
                        name: self.fdt.name(child).to_string(),
                    });
                }
            }
        }
        Ok(regions)
    }

    /// The CPU nodes under `/cpus` (arm/cpus.yaml).
    ///
    /// Nodes whose `status` is not "okay" (`"disabled"`, `"fail"`) are
    /// skipped: the hypervisor only starts CPUs the firmware declares
    /// available, as Linux treats a disabled CPU as not present. Other
    /// children (`cpu-map`, `idle-states`, caches) are neither named `cpu`
    /// nor have `device_type = "cpu"`.
    fn cpus(&self) -> Result<Vec<Cpu>, PlatformError> {
        let cpus_node = self
            .fdt
            .find_path("/cpus")
            .ok_or_else(|| Self::missing_node("/cpus"))?;
        let (address_cells, size_cells) = self.bus_cells(cpus_node)?;
        if !(1..=2).contains(&address_cells) {
            return Err(self.bad(
                cpus_node,
                "#address-cells",
                "must be 1 or 2 (arm/cpus.yaml)",
            ));
        }
        if size_cells != 0 {
            return Err(self.bad(cpus_node, "#size-cells", "must be 0 (arm/cpus.yaml)"));
        }
        let mut cpus: Vec<Cpu> = Vec::new();
        for node in self.fdt.children(cpus_node) {
            // Like Linux's of_get_next_cpu_node: device_type "cpu", or a
            // node named cpu@... that lacks it.
            let named_cpu = self.fdt.name(node).split('@').next() == Some("cpu");
            if !self.has_device_type(node, "cpu") && !named_cpu {
                continue;
            }
            if !self.is_enabled(node) {
                log::debug!("skipping disabled CPU {}", self.fdt.path(node));
                continue;
            }
            cpus.push(Cpu {
                mpidr: self.cpu_mpidr(node, address_cells)?,
                enable_method: self.enable_method(node)?,
                node: self.fdt.path(node),
            });
        }
        if cpus.is_empty() {
            return Err(Self::missing_node("/cpus/cpu"));
        }
        // Linux rejects duplicate MPIDRs too (arch/arm64/kernel/smp.c).
        // The sort is stable, so of two equal MPIDRs the DT's later one is
        // `second` and gets the blame.
        let mut by_mpidr: Vec<&Cpu> = cpus.iter().collect();
        by_mpidr.sort_by_key(|cpu| cpu.mpidr);
        for pair in by_mpidr.windows(2) {
            if let [first, second] = pair
                && first.mpidr == second.mpidr
            {
                return Err(PlatformError {
                    node: second.node.clone(),
                    property: Some(String::from("reg")),
                    kind: ErrorKind::BadValue(format!(
                        "MPIDR {} also used by {}",
                        second.mpidr, first.node
                    )),
                });
            }
        }
        Ok(cpus)
    }

    /// A CPU's `reg`: one entry holding MPIDR_EL1's affinity bits, Aff3 in
    /// the first cell when `#address-cells = <2>`; all other bits must be
    /// zero (arm/cpus.yaml).
    fn cpu_mpidr(&self, node: NodeId, address_cells: u32) -> Result<Mpidr, PlatformError> {
        let cells = self
            .cells(node, "reg")?
            .ok_or_else(|| self.missing(node, "reg"))?;
        let raw = match (address_cells, cells.as_slice()) {
            (1, &[low]) => u64::from(low),
            (2, &[high, low]) => (u64::from(high) << 32) | u64::from(low),
            _ => {
                return Err(self.bad(
                    node,
                    "reg",
                    format!(
                        "expected one {address_cells}-cell MPIDR, found {} cells",
                        cells.len()
                    ),
                ));
            }
        };
        if raw & !Mpidr::AFFINITY_MASK != 0 {
            return Err(self.bad(
                node,
                "reg",
                format!("{raw:#x} has bits outside MPIDR affinity"),
            ));
        }
        Ok(Mpidr::from_raw(raw))
    }

    fn enable_method(&self, node: NodeId) -> Result<EnableMethod, PlatformError> {
        match self.string(node, "enable-method")? {
            None => Ok(EnableMethod::None),
            Some("psci") => Ok(EnableMethod::Psci),
            Some("spin-table") => {
                let release_addr = self
                    .u64_prop(node, "cpu-release-addr")?
                    .ok_or_else(|| self.missing(node, "cpu-release-addr"))?;
                Ok(EnableMethod::SpinTable { release_addr })
            }
            Some(other) => Err(self.error(
                node,
                Some("enable-method"),
                ErrorKind::Unsupported(format!(
                    "enable-method \"{other}\"; only \"psci\" and \"spin-table\" are supported"
                )),
            )),
        }
    }

    /// The GICv3 node, or an Unsupported error when the board only has a
    /// GICv2-family controller.
    fn gic_node(&self) -> Result<NodeId, PlatformError> {
        if let Some(node) = self.find_compatible(&["arm,gic-v3"]) {
            return Ok(node);
        }
        if let Some(node) = self.find_compatible(GICV2_COMPATIBLES) {
            // Name the node's own most specific GICv2 compatible.
            let listed = self.strings(node, "compatible")?.unwrap_or_default();
            let compatible = listed
                .iter()
                .find(|c| GICV2_COMPATIBLES.contains(c))
                .copied()
                .unwrap_or("?");
            return Err(self.error(
                node,
                Some("compatible"),
                ErrorKind::Unsupported(format!(
                    "interrupt controller is a GICv2 (\"{compatible}\"); \
                     this hypervisor requires a GICv3 (\"arm,gic-v3\")"
                )),
            ));
        }
        Err(Self::missing_node("/interrupt-controller"))
    }

    /// interrupt-controller/arm,gic-v3.yaml: `reg` is the distributor, then
    /// `#redistributor-regions` redistributor regions (then GICC, GICH,
    /// GICV, which are not needed here); ITS frames are children.
    fn gic(&self, node: NodeId) -> Result<GicV3, PlatformError> {
        let interrupt_cells = self
            .u32_prop(node, "#interrupt-cells")?
            .ok_or_else(|| self.missing(node, "#interrupt-cells"))?;
        if !(3..=4).contains(&interrupt_cells) {
            return Err(self.bad(
                node,
                "#interrupt-cells",
                format!("{interrupt_cells}, expected 3 or 4"),
            ));
        }
        let reg = self.reg(node)?;
        let region_count = self.u32_prop(node, "#redistributor-regions")?.unwrap_or(1);
        if region_count == 0 {
            return Err(self.bad(node, "#redistributor-regions", "must be at least 1"));
        }
        let Some(redistributors) = reg
            .get(1..)
            .and_then(|rest| rest.get(..region_count as usize))
        else {
            return Err(self.bad(
                node,
                "reg",
                format!(
                    "{} entries, but a distributor and {region_count} redistributor regions are needed",
                    reg.len()
                ),
            ));
        };
        let stride = self.u64_prop(node, "redistributor-stride")?;
        if let Some(stride) = stride
            && (stride == 0 || !stride.is_multiple_of(0x1_0000))
        {
            return Err(self.bad(
                node,
                "redistributor-stride",
                format!("{stride:#x} is not a non-zero multiple of 64 KiB"),
            ));
        }
        let mut its = Vec::new();
        for child in self.fdt.children(node) {
            if self.is_enabled(child) && self.is_compatible(child, "arm,gic-v3-its") {
                its.push(self.first_reg(child)?);
            }
        }
        let maintenance_irq =
            if self.has(node, "interrupts") || self.has(node, "interrupts-extended") {
                self.gic_interrupts(node, node)?.first().copied()
            } else {
                None
            };
        Ok(GicV3 {
            distributor: reg
                .first()
                .copied()
                .ok_or_else(|| self.missing(node, "reg"))?,
            redistributor_regions: redistributors
                .iter()
                .map(|&range| RedistributorRegion { range, stride })
                .collect(),
            its,
            maintenance_irq,
        })
    }

    /// `/chosen/stdout-path` if it names an enabled PL011, else the first
    /// enabled `arm,pl011` in document order.
    fn console(&self, gic: NodeId) -> Result<Option<Uart>, PlatformError> {
        let chosen = self
            .stdout_node()?
            .filter(|&node| self.is_enabled(node) && self.is_compatible(node, "arm,pl011"));
        let Some(node) = chosen.or_else(|| self.find_compatible(&["arm,pl011"])) else {
            return Ok(None);
        };
        let range = self.first_reg(node)?;
        // The console works without its interrupt (polled), so an
        // interrupt routed to some other controller is simply not offered.
        let mut irq = None;
        if let Some(spec) = self.raw_interrupts(node)?.into_iter().next() {
            match self.resolve_interrupt(node, spec)? {
                Some(resolved) if resolved.parent == gic => {
                    irq = Some(
                        gic_interrupt(&resolved.cells)
                            .map_err(|why| self.bad(node, "interrupts", why))?,
                    );
                }
                _ => log::warn!(
                    "console {}: interrupt not routed to the GICv3",
                    self.fdt.path(node)
                ),
            }
        }
        Ok(Some(Uart {
            kind: UartKind::Pl011,
            range,
            irq,
            node: self.fdt.path(node),
        }))
    }

    /// The node `/chosen/stdout-path` names (chosen.yaml): an absolute path
    /// or an alias, optionally followed by `:options`.
    fn stdout_node(&self) -> Result<Option<NodeId>, PlatformError> {
        let Some(chosen) = self.fdt.find_path("/chosen") else {
            return Ok(None);
        };
        let property = if self.has(chosen, "stdout-path") {
            "stdout-path"
        } else {
            "linux,stdout-path"
        };
        let Some(value) = self.string(chosen, property)? else {
            return Ok(None);
        };
        let path = value.split(':').next().unwrap_or_default();
        let node = if path.starts_with('/') {
            self.fdt.find_path(path)
        } else {
            self.resolve_alias(path)?
        };
        if node.is_none() {
            log::warn!("/chosen/{property} \"{value}\" names no node");
        }
        Ok(node)
    }

    /// `alias` or `alias/sub/path` through `/aliases` (DT spec 3.3). Alias
    /// values must be absolute paths, so there is no recursion.
    fn resolve_alias(&self, path: &str) -> Result<Option<NodeId>, PlatformError> {
        let Some(aliases) = self.fdt.find_path("/aliases") else {
            return Ok(None);
        };
        let (alias, rest) = path.split_once('/').unwrap_or((path, ""));
        let Some(target) = self.string(aliases, alias)? else {
            return Ok(None);
        };
        if !target.starts_with('/') {
            return Err(self.bad(aliases, alias, "alias is not an absolute path"));
        }
        let full = if rest.is_empty() {
            target.to_string()
        } else {
            format!("{target}/{rest}")
        };
        Ok(self.fdt.find_path(&full))
    }

    /// timer/arm,arch_timer.yaml: interrupts are the secure physical,
    /// non-secure physical, virtual, hypervisor physical and (optional)
    /// hypervisor virtual timer PPIs, in that order unless
    /// `interrupt-names` says otherwise.
    fn timer(&self, gic: NodeId) -> Result<ArchTimer, PlatformError> {
        let node = self
            .find_compatible(TIMER_COMPATIBLES)
            .ok_or_else(|| Self::missing_node("/timer"))?;
        let interrupts = self.gic_interrupts(node, gic)?;
        if interrupts.is_empty() {
            return Err(self.missing(node, "interrupts"));
        }
        for irq in &interrupts {
            if !matches!(irq, Interrupt::Ppi { .. }) {
                return Err(self.bad(
                    node,
                    "interrupts",
                    format!("timer interrupt {irq:?} is not a PPI"),
                ));
            }
        }
        let mut slots: [Option<Interrupt>; 5] = [None; 5];
        match self.strings(node, "interrupt-names")? {
            Some(names) => {
                if names.len() != interrupts.len() {
                    return Err(self.bad(node, "interrupt-names", "count differs from interrupts"));
                }
                for (name, irq) in names.iter().zip(&interrupts) {
                    let slot = TIMER_IRQ_NAMES
                        .iter()
                        .position(|n| n == name)
                        .ok_or_else(|| {
                            self.bad(node, "interrupt-names", format!("unknown name \"{name}\""))
                        })?;
                    if let Some(entry) = slots.get_mut(slot) {
                        *entry = Some(*irq);
                    }
                }
            }
            None => {
                if interrupts.len() > slots.len() {
                    return Err(self.bad(node, "interrupts", "more than 5 timer interrupts"));
                }
                for (slot, irq) in slots.iter_mut().zip(&interrupts) {
                    *slot = Some(*irq);
                }
            }
        }
        let [
            Some(secure_phys),
            Some(nonsecure_phys),
            Some(virt),
            Some(hyp_phys),
            hyp_virt,
        ] = slots
        else {
            return Err(self.bad(
                node,
                "interrupts",
                "the secure, non-secure, virtual and hypervisor physical timer interrupts are all required",
            ));
        };
        Ok(ArchTimer {
            secure_phys,
            nonsecure_phys,
            virt,
            hyp_phys,
            hyp_virt,
            clock_frequency: self.u32_prop(node, "clock-frequency")?,
        })
    }

    /// arm/psci.yaml: found by compatible; `method` picks the conduit.
    fn psci(&self) -> Result<Psci, PlatformError> {
        let names: Vec<&str> = PSCI_VERSIONS.iter().map(|&(name, _)| name).collect();
        let node = self
            .find_compatible(&names)
            .ok_or_else(|| Self::missing_node("/psci"))?;
        let compatible = self.strings(node, "compatible")?.unwrap_or_default();
        let version = PSCI_VERSIONS
            .iter()
            .filter(|(name, _)| compatible.contains(name))
            .map(|&(_, version)| version)
            .max()
            .unwrap_or((0, 1));
        let conduit = match self.string(node, "method")? {
            Some("smc") => Conduit::Smc,
            Some("hvc") => Conduit::Hvc,
            Some(other) => {
                return Err(self.bad(
                    node,
                    "method",
                    format!("\"{other}\", expected \"smc\" or \"hvc\""),
                ));
            }
            None => return Err(self.missing(node, "method")),
        };
        Ok(Psci { conduit, version })
    }

    /// The first enabled PL031 real-time clock (arm,pl031.yaml), optional.
    fn rtc(&self) -> Result<Option<MemRange>, PlatformError> {
        self.find_compatible(&["arm,pl031"])
            .map(|node| self.first_reg(node))
            .transpose()
    }

    fn bootargs(&self) -> Result<String, PlatformError> {
        let Some(chosen) = self.fdt.find_path("/chosen") else {
            return Ok(String::new());
        };
        Ok(self
            .string(chosen, "bootargs")?
            .unwrap_or_default()
            .to_string())
    }
}

/// Big-endian cells as one number; `None` if it needs more than 64 bits.
fn cells_to_u64(cells: &[u32]) -> Option<u64> {
    let mut value: u64 = 0;
    for &cell in cells {
        if value >> 32 != 0 {
            return None;
        }
        value = (value << 32) | u64::from(cell);
    }
    Some(value)
}

/// Decodes a GIC specifier (interrupt-controller/arm,gic-v3.yaml): cell 0
/// is the type (0 SPI, 1 PPI; 2 and 3 are the GICv3.1 extended ranges),
/// cell 1 the number within that type, cell 2 the trigger flags; a 4th cell
/// (PPI partition) is ignored.
fn gic_interrupt(cells: &[u32]) -> Result<Interrupt, String> {
    let &[kind, number, flags, ..] = cells else {
        return Err(format!(
            "GIC specifier has {} cells, expected 3",
            cells.len()
        ));
    };
    match kind {
        // SPIs are INTIDs 32..=1019, PPIs 16..=31.
        0 if number <= 987 => Ok(Interrupt::Spi { number, flags }),
        1 if number <= 15 => Ok(Interrupt::Ppi { number, flags }),
        0 | 1 => Err(format!(
            "interrupt number {number} out of range for its type"
        )),
        2 | 3 => Err(String::from("extended SPI/PPI ranges are not supported")),
        _ => Err(format!("unknown GIC interrupt type {kind}")),
    }
}

/// What [`crate::rescue`] can read from a tree that may not parse as a
/// whole: each part on its own, any failure just leaving it out.
pub(crate) fn rescue(fdt: &Fdt<'_>) -> crate::Rescue {
    let tree = Tree { fdt };
    crate::Rescue {
        console: tree.bare_console(),
        psci_conduit: tree.psci().ok().map(|psci| psci.conduit),
    }
}

impl Tree<'_, '_> {
    /// The console as [`Tree::console`] picks it, without its interrupt
    /// (which would need a working GIC node).
    fn bare_console(&self) -> Option<Uart> {
        let chosen = self
            .stdout_node()
            .ok()
            .flatten()
            .filter(|&node| self.is_enabled(node) && self.is_compatible(node, "arm,pl011"));
        let node = chosen.or_else(|| self.find_compatible(&["arm,pl011"]))?;
        Some(Uart {
            kind: UartKind::Pl011,
            range: self.first_reg(node).ok()?,
            irq: None,
            node: self.fdt.path(node),
        })
    }
}
