//! A small, bounds-checked reader for flattened device tree blobs.
//!
//! Format: Devicetree Specification v0.4, chapter 5 "Flattened Devicetree
//! (DTB) Format". The blob is indexed once into a flat node table (nodes in
//! depth-first pre-order, each with its parent and the end of its subtree)
//! so later lookups never re-walk the raw bytes. Every read goes through
//! [`be32`]/[`be64`]/`slice::get`, so a truncated or corrupted blob yields
//! an error, never a panic, and the walk is bounded by the block size and
//! [`MAX_DEPTH`].

use alloc::string::String;
use alloc::vec::Vec;
use core::ffi::CStr;
use core::ops::Range;

use crate::{ErrorKind, MemRange, PlatformError};

/// `magic` of every FDT header.
pub const FDT_MAGIC: u32 = 0xd00d_feed;
/// Size of the version 17 header, the only layout this reader accepts.
pub const HEADER_SIZE: usize = 40;
/// The version this reader implements; blobs must be compatible with it.
const SUPPORTED_VERSION: u32 = 17;
/// Deepest node nesting accepted (the root is depth 1). Real trees are
/// rarely deeper than 8; the bound keeps every walk over the tree short.
pub const MAX_DEPTH: usize = 64;

const FDT_BEGIN_NODE: u32 = 0x1;
const FDT_END_NODE: u32 = 0x2;
const FDT_PROP: u32 = 0x3;
const FDT_NOP: u32 = 0x4;
const FDT_END: u32 = 0x9;

/// Index of a node in [`Fdt::nodes`]; the root is 0.
pub type NodeId = usize;

/// Reads a big-endian `u32` at `offset`, or `None` past the end.
pub fn be32(bytes: &[u8], offset: usize) -> Option<u32> {
    match bytes.get(offset..)? {
        [a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// Reads a big-endian `u64` at `offset`, or `None` past the end.
pub fn be64(bytes: &[u8], offset: usize) -> Option<u64> {
    let high = be32(bytes, offset)?;
    let low = be32(bytes, offset.checked_add(4)?)?;
    Some((u64::from(high) << 32) | u64::from(low))
}

/// The NUL-terminated string starting at `offset` (without the NUL).
fn cstr_at(bytes: &[u8], offset: usize) -> Option<&[u8]> {
    let tail = bytes.get(offset..)?;
    CStr::from_bytes_until_nul(tail).ok().map(CStr::to_bytes)
}

/// The entries of a `<stringlist>` value (DT spec 2.2.4), without their
/// NULs; a final unterminated entry is returned as is.
pub fn string_list(value: &[u8]) -> StringList<'_> {
    StringList { rest: value }
}

/// Iterator returned by [`string_list`].
pub struct StringList<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for StringList<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        match CStr::from_bytes_until_nul(self.rest) {
            Ok(entry) => {
                let entry = entry.to_bytes();
                self.rest = self.rest.get(entry.len() + 1..).unwrap_or_default();
                Some(entry)
            }
            Err(_) => Some(core::mem::take(&mut self.rest)),
        }
    }
}

fn blob_error(why: &'static str) -> PlatformError {
    PlatformError {
        node: String::from("/"),
        property: None,
        kind: ErrorKind::BadBlob(why),
    }
}

/// The fields of the version 17 FDT header (spec section 5.2).
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub totalsize: u32,
    pub off_dt_struct: u32,
    pub off_dt_strings: u32,
    pub off_mem_rsvmap: u32,
    pub size_dt_strings: u32,
    pub size_dt_struct: u32,
}

impl Header {
    /// Decodes and checks the header at the start of `bytes`: the magic, a
    /// version this reader understands, and that every block lies after
    /// the header and inside `totalsize`.
    pub fn parse(bytes: &[u8]) -> Result<Header, PlatformError> {
        let field =
            |index: usize| be32(bytes, index * 4).ok_or_else(|| blob_error("header truncated"));
        if field(0)? != FDT_MAGIC {
            return Err(blob_error("bad magic (expected 0xd00dfeed)"));
        }
        let header = Header {
            totalsize: field(1)?,
            off_dt_struct: field(2)?,
            off_dt_strings: field(3)?,
            off_mem_rsvmap: field(4)?,
            size_dt_strings: field(8)?,
            size_dt_struct: field(9)?,
        };
        let version = field(5)?;
        let last_comp_version = field(6)?;
        // Versions before 17 lack size_dt_struct; a last_comp_version above
        // 17 means the layout changed in a way this reader cannot follow.
        if version < SUPPORTED_VERSION {
            return Err(blob_error("version older than 17"));
        }
        if last_comp_version > SUPPORTED_VERSION {
            return Err(blob_error("not backwards compatible with version 17"));
        }
        header.check_layout()?;
        Ok(header)
    }

    fn check_layout(&self) -> Result<(), PlatformError> {
        let total = self.totalsize as u64;
        if total < HEADER_SIZE as u64 {
            return Err(blob_error("totalsize smaller than the header"));
        }
        let block_ok = |offset: u32, size: u32| {
            offset as u64 >= HEADER_SIZE as u64 && offset as u64 + size as u64 <= total
        };
        // The reservation block holds at least its (0, 0) terminator.
        if !self.off_mem_rsvmap.is_multiple_of(8) || !block_ok(self.off_mem_rsvmap, 16) {
            return Err(blob_error("bad memory reservation block offset"));
        }
        if !self.off_dt_struct.is_multiple_of(4)
            || !block_ok(self.off_dt_struct, self.size_dt_struct)
        {
            return Err(blob_error("structure block outside the blob"));
        }
        if !block_ok(self.off_dt_strings, self.size_dt_strings) {
            return Err(blob_error("strings block outside the blob"));
        }
        Ok(())
    }

    fn struct_range(&self) -> Range<usize> {
        let start = self.off_dt_struct as usize;
        start..start.saturating_add(self.size_dt_struct as usize)
    }

    fn strings_range(&self) -> Range<usize> {
        let start = self.off_dt_strings as usize;
        start..start.saturating_add(self.size_dt_strings as usize)
    }
}

/// One property: its name (from the strings block) and raw value.
#[derive(Clone, Copy, Debug)]
pub struct Property<'a> {
    pub name: &'a str,
    pub value: &'a [u8],
}

/// One node of the indexed tree.
#[derive(Clone, Debug)]
pub struct Node<'a> {
    /// Full node name, `name@unit-address`; empty for the root.
    pub name: &'a str,
    pub parent: Option<NodeId>,
    /// Index in [`Fdt::props`] of this node's first property. A node's
    /// properties run up to the next node's first one, because properties
    /// precede subnodes (checked while indexing).
    first_prop: usize,
    /// One past the last node of this node's subtree.
    subtree_end: NodeId,
    /// Properties every search looks at, kept so searches need not scan
    /// each node's property list.
    common: CommonProps<'a>,
}

/// The values of a node's `compatible`, `device_type`, `status` and
/// `phandle` properties (the first, if repeated).
#[derive(Clone, Copy, Debug, Default)]
struct CommonProps<'a> {
    compatible: Option<&'a [u8]>,
    device_type: Option<&'a [u8]>,
    status: Option<&'a [u8]>,
    phandle: Option<&'a [u8]>,
    /// Pre-ePAPR spelling of `phandle`.
    linux_phandle: Option<&'a [u8]>,
}

impl<'a> CommonProps<'a> {
    fn record(&mut self, name: &str, value: &'a [u8]) {
        let slot = match name {
            "compatible" => &mut self.compatible,
            "device_type" => &mut self.device_type,
            "status" => &mut self.status,
            "phandle" => &mut self.phandle,
            "linux,phandle" => &mut self.linux_phandle,
            _ => return,
        };
        if slot.is_none() {
            *slot = Some(value);
        }
    }
}

/// An indexed device tree blob.
#[derive(Debug)]
pub struct Fdt<'a> {
    nodes: Vec<Node<'a>>,
    props: Vec<Property<'a>>,
    reservations: Vec<MemRange>,
    /// `(phandle, node)`, sorted by phandle, first definition wins.
    phandles: Vec<(u32, NodeId)>,
}

impl<'a> Fdt<'a> {
    /// Checks the header and indexes the whole tree. `blob` may extend past
    /// the header's `totalsize`; nothing beyond it is read.
    pub fn new(blob: &'a [u8]) -> Result<Fdt<'a>, PlatformError> {
        let header = Header::parse(blob)?;
        let blob = blob
            .get(..header.totalsize as usize)
            .ok_or_else(|| blob_error("blob shorter than its header's totalsize"))?;
        let structs = blob
            .get(header.struct_range())
            .ok_or_else(|| blob_error("structure block outside the blob"))?;
        let strings = blob
            .get(header.strings_range())
            .ok_or_else(|| blob_error("strings block outside the blob"))?;
        let reservations = read_reservations(blob, header.off_mem_rsvmap as usize)?;
        let (nodes, props) = index_structure(structs, strings)?;
        let mut fdt = Fdt {
            nodes,
            props,
            reservations,
            phandles: Vec::new(),
        };
        fdt.phandles = fdt.collect_phandles();
        Ok(fdt)
    }

    /// `/memreserve/` entries, without the terminator.
    pub fn reservations(&self) -> &[MemRange] {
        &self.reservations
    }

    /// All nodes in depth-first pre-order (document order).
    pub fn node_ids(&self) -> Range<NodeId> {
        0..self.nodes.len()
    }

    /// Full name of `node` (`intc@8000000`); empty for the root.
    pub fn name(&self, node: NodeId) -> &'a str {
        self.nodes.get(node).map_or("", |n| n.name)
    }

    pub fn parent(&self, node: NodeId) -> Option<NodeId> {
        self.nodes.get(node).and_then(|n| n.parent)
    }

    /// The direct children of `node`, in document order.
    pub fn children(&self, node: NodeId) -> Children<'_, 'a> {
        let end = self.nodes.get(node).map_or(0, |n| n.subtree_end);
        Children {
            nodes: &self.nodes,
            next: node.saturating_add(1),
            end,
        }
    }

    /// The properties of `node`.
    pub fn properties(&self, node: NodeId) -> &[Property<'a>] {
        let Some(start) = self.nodes.get(node).map(|n| n.first_prop) else {
            return &[];
        };
        let end = self
            .nodes
            .get(node + 1)
            .map_or(self.props.len(), |n| n.first_prop);
        self.props.get(start..end).unwrap_or(&[])
    }

    /// The value of `node`'s property `name` (the first, if repeated).
    pub fn prop(&self, node: NodeId, name: &str) -> Option<&'a [u8]> {
        self.properties(node)
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.value)
    }

    /// The raw `compatible` value; empty when absent.
    pub fn compatible(&self, node: NodeId) -> &'a [u8] {
        self.nodes
            .get(node)
            .and_then(|n| n.common.compatible)
            .unwrap_or_default()
    }

    /// The raw `device_type` value.
    pub fn device_type(&self, node: NodeId) -> Option<&'a [u8]> {
        self.nodes.get(node).and_then(|n| n.common.device_type)
    }

    /// The raw `status` value.
    pub fn status(&self, node: NodeId) -> Option<&'a [u8]> {
        self.nodes.get(node).and_then(|n| n.common.status)
    }

    /// The node's path, `/` for the root, for messages.
    pub fn path(&self, node: NodeId) -> String {
        let mut chain: Vec<&str> = Vec::new();
        let mut current = Some(node);
        // Parent links always point to an earlier node, so this ends; the
        // depth bound makes it short.
        while let Some(id) = current {
            if self.parent(id).is_none() || chain.len() > MAX_DEPTH {
                break;
            }
            chain.push(self.name(id));
            current = self.parent(id);
        }
        if chain.is_empty() {
            return String::from("/");
        }
        let mut path = String::new();
        for name in chain.iter().rev() {
            path.push('/');
            path.push_str(name);
        }
        path
    }

    /// The node at absolute `path`. A component without a unit address
    /// also matches `name@unit` (as libfdt does), first match wins.
    pub fn find_path(&self, path: &str) -> Option<NodeId> {
        let rest = path.strip_prefix('/')?;
        let mut node: NodeId = 0;
        self.nodes.first()?;
        for component in rest.split('/').filter(|c| !c.is_empty()) {
            let bare = !component.contains('@');
            node = self.children(node).find(|&child| {
                let name = self.name(child).as_bytes();
                match name.strip_prefix(component.as_bytes()) {
                    Some(rest) => rest.is_empty() || (bare && rest.first() == Some(&b'@')),
                    None => false,
                }
            })?;
        }
        Some(node)
    }

    /// The node whose `phandle` is `phandle`.
    pub fn by_phandle(&self, phandle: u32) -> Option<NodeId> {
        let index = self
            .phandles
            .binary_search_by_key(&phandle, |&(ph, _)| ph)
            .ok()?;
        // binary_search may land on any duplicate; the earliest node wins.
        let mut first = index;
        while first > 0
            && self
                .phandles
                .get(first - 1)
                .is_some_and(|&(ph, _)| ph == phandle)
        {
            first -= 1;
        }
        self.phandles.get(first).map(|&(_, node)| node)
    }

    fn collect_phandles(&self) -> Vec<(u32, NodeId)> {
        let mut phandles: Vec<(u32, NodeId)> = self
            .node_ids()
            .filter_map(|node| {
                // `linux,phandle` is the pre-ePAPR spelling.
                let common = &self.nodes.get(node)?.common;
                let value = common.phandle.or(common.linux_phandle)?;
                let phandle = be32(value, 0).filter(|_| value.len() == 4)?;
                // 0 and 0xffffffff are not valid phandles (spec 2.3.3).
                (phandle != 0 && phandle != u32::MAX).then_some((phandle, node))
            })
            .collect();
        phandles.sort_by_key(|&(ph, node)| (ph, node));
        phandles
    }
}

/// Iterator over a node's direct children.
pub struct Children<'f, 'a> {
    nodes: &'f [Node<'a>],
    next: NodeId,
    end: NodeId,
}

impl Iterator for Children<'_, '_> {
    type Item = NodeId;

    fn next(&mut self) -> Option<NodeId> {
        if self.next >= self.end {
            return None;
        }
        let child = self.next;
        // Skip the child's whole subtree; subtree_end > child always holds
        // for an indexed tree, the max() only guarantees progress.
        let after = self.nodes.get(child)?.subtree_end;
        self.next = after.max(child + 1);
        Some(child)
    }
}

/// Reads the `/memreserve/` entries up to the `(0, 0)` terminator.
fn read_reservations(blob: &[u8], offset: usize) -> Result<Vec<MemRange>, PlatformError> {
    let mut entries = Vec::new();
    let mut at = offset;
    loop {
        let (Some(address), Some(size)) = (be64(blob, at), be64(blob, at.saturating_add(8))) else {
            return Err(blob_error("memory reservation block not terminated"));
        };
        if address == 0 && size == 0 {
            return Ok(entries);
        }
        entries.push(MemRange::new(address, size));
        at = at.saturating_add(16);
    }
}

/// Walks the structure block (spec 5.4) into the node and property tables.
fn index_structure<'a>(
    structs: &'a [u8],
    strings: &'a [u8],
) -> Result<(Vec<Node<'a>>, Vec<Property<'a>>), PlatformError> {
    // Typical trees average about 24 bytes per property and 64 per node.
    let mut nodes: Vec<Node<'a>> = Vec::with_capacity(structs.len() / 64);
    let mut props: Vec<Property<'a>> = Vec::with_capacity(structs.len() / 24);
    // Nodes opened and not yet closed, innermost last.
    let mut open: Vec<NodeId> = Vec::with_capacity(8);
    let mut root_closed = false;
    let mut at = 0usize;
    // Every token consumes at least 4 bytes, so this loop ends within
    // structs.len() / 4 iterations.
    loop {
        let Some(token) = be32(structs, at) else {
            return Err(blob_error("structure block ends without FDT_END"));
        };
        at += 4;
        match token {
            FDT_BEGIN_NODE => {
                if root_closed {
                    return Err(blob_error("node after the root node"));
                }
                if open.len() >= MAX_DEPTH {
                    return Err(blob_error("nodes nested deeper than 64"));
                }
                let Some(name) = cstr_at(structs, at) else {
                    return Err(blob_error("unterminated node name"));
                };
                let Ok(name) = core::str::from_utf8(name) else {
                    return Err(blob_error("node name not UTF-8"));
                };
                // The name and its NUL lie inside `structs`: no overflow.
                at = (at + name.len() + 1 + 3) & !3;
                nodes.push(Node {
                    name,
                    parent: open.last().copied(),
                    first_prop: props.len(),
                    subtree_end: 0,
                    common: CommonProps::default(),
                });
                open.push(nodes.len() - 1);
            }
            FDT_END_NODE => {
                let Some(node) = open.pop() else {
                    return Err(blob_error("FDT_END_NODE without a node"));
                };
                let end = nodes.len();
                if let Some(n) = nodes.get_mut(node) {
                    n.subtree_end = end;
                }
                root_closed = open.is_empty();
            }
            FDT_PROP => {
                let Some(&node) = open.last() else {
                    return Err(blob_error("property outside any node"));
                };
                // The format puts a node's properties before its subnodes;
                // that keeps each node's properties contiguous.
                if nodes.len() != node + 1 {
                    return Err(blob_error("property after a subnode"));
                }
                let (Some(len), Some(name_offset)) = (be32(structs, at), be32(structs, at + 4))
                else {
                    return Err(blob_error("property header truncated"));
                };
                at += 8;
                let Some(value) = structs.get(at..).and_then(|rest| rest.get(..len as usize))
                else {
                    return Err(blob_error("property value past the structure block"));
                };
                // `value` lies inside `structs`: no overflow.
                at = (at + value.len() + 3) & !3;
                let Some(name) = cstr_at(strings, name_offset as usize) else {
                    return Err(blob_error("property name outside the strings block"));
                };
                let Ok(name) = core::str::from_utf8(name) else {
                    return Err(blob_error("property name not UTF-8"));
                };
                props.push(Property { name, value });
                if let Some(n) = nodes.last_mut() {
                    n.common.record(name, value);
                }
            }
            FDT_NOP => {}
            FDT_END => {
                if !root_closed {
                    return Err(blob_error("FDT_END before the root node is closed"));
                }
                return Ok((nodes, props));
            }
            _ => return Err(blob_error("unknown structure block token")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Emits raw structure-block tokens, for trees the well-formed test
    /// builder cannot express.
    #[derive(Default)]
    struct Tokens {
        structs: Vec<u8>,
        strings: Vec<u8>,
    }

    impl Tokens {
        fn word(&mut self, value: u32) -> &mut Self {
            self.structs.extend_from_slice(&value.to_be_bytes());
            self
        }

        fn begin(&mut self, name: &str) -> &mut Self {
            self.word(FDT_BEGIN_NODE);
            self.structs.extend_from_slice(name.as_bytes());
            self.structs.push(0);
            while !self.structs.len().is_multiple_of(4) {
                self.structs.push(0);
            }
            self
        }

        fn end(&mut self) -> &mut Self {
            self.word(FDT_END_NODE)
        }

        fn prop(&mut self, name: &str, value: &[u8]) -> &mut Self {
            let offset = self.strings.len() as u32;
            self.strings.extend_from_slice(name.as_bytes());
            self.strings.push(0);
            self.word(FDT_PROP).word(value.len() as u32).word(offset);
            self.structs.extend_from_slice(value);
            while !self.structs.len().is_multiple_of(4) {
                self.structs.push(0);
            }
            self
        }

        fn blob(&self) -> Vec<u8> {
            let rsv = HEADER_SIZE;
            let off_struct = rsv + 16;
            let off_strings = off_struct + self.structs.len();
            let total = off_strings + self.strings.len();
            let header = [
                FDT_MAGIC,
                total as u32,
                off_struct as u32,
                off_strings as u32,
                rsv as u32,
                17,
                16,
                0,
                self.strings.len() as u32,
                self.structs.len() as u32,
            ];
            let mut blob: Vec<u8> = header.iter().flat_map(|w| w.to_be_bytes()).collect();
            blob.extend_from_slice(&[0; 16]);
            blob.extend_from_slice(&self.structs);
            blob.extend_from_slice(&self.strings);
            blob
        }
    }

    fn blob_error_of(tokens: &Tokens) -> &'static str {
        match Fdt::new(&tokens.blob()) {
            Ok(_) => panic!("expected an error"),
            Err(PlatformError {
                kind: ErrorKind::BadBlob(why),
                ..
            }) => why,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn indexes_nodes_properties_and_phandles() {
        let mut t = Tokens::default();
        t.begin("").prop("model", b"m\0");
        t.begin("a@1").prop("phandle", &7u32.to_be_bytes());
        t.begin("b").prop("x", b"").end();
        t.end();
        t.word(FDT_NOP);
        t.begin("c")
            .prop("linux,phandle", &9u32.to_be_bytes())
            .end();
        t.end().word(FDT_END);
        let blob = t.blob();
        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(fdt.node_ids(), 0..4);
        assert_eq!(fdt.children(0).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(fdt.children(1).collect::<Vec<_>>(), [2]);
        assert_eq!(fdt.path(2), "/a@1/b");
        assert_eq!(fdt.path(0), "/");
        assert_eq!(fdt.find_path("/a/b"), Some(2));
        assert_eq!(fdt.find_path("/a@1/b"), Some(2));
        assert_eq!(fdt.find_path("/a@2"), None);
        assert_eq!(fdt.find_path("/"), Some(0));
        assert_eq!(fdt.find_path("a"), None);
        assert_eq!(fdt.by_phandle(7), Some(1));
        assert_eq!(fdt.by_phandle(9), Some(3));
        assert_eq!(fdt.by_phandle(8), None);
        assert_eq!(fdt.prop(0, "model"), Some(&b"m\0"[..]));
        assert_eq!(fdt.prop(2, "x"), Some(&b""[..]));
        assert_eq!(fdt.properties(1).len(), 1);
        assert_eq!(fdt.properties(3).len(), 1);
    }

    #[test]
    fn structural_faults_are_errors() {
        let mut t = Tokens::default();
        t.begin("")
            .begin("a")
            .end()
            .prop("late", b"")
            .end()
            .word(FDT_END);
        assert_eq!(blob_error_of(&t), "property after a subnode");

        let mut t = Tokens::default();
        t.begin("").end().end().word(FDT_END);
        assert_eq!(blob_error_of(&t), "FDT_END_NODE without a node");

        let mut t = Tokens::default();
        t.begin("").begin("a").end().word(FDT_END);
        assert_eq!(blob_error_of(&t), "FDT_END before the root node is closed");

        let mut t = Tokens::default();
        t.begin("").end();
        assert_eq!(blob_error_of(&t), "structure block ends without FDT_END");

        let mut t = Tokens::default();
        t.begin("").end().begin("second").end().word(FDT_END);
        assert_eq!(blob_error_of(&t), "node after the root node");

        let mut t = Tokens::default();
        t.prop("x", b"").begin("").end().word(FDT_END);
        assert_eq!(blob_error_of(&t), "property outside any node");

        let mut t = Tokens::default();
        t.begin("").word(0x17).end().word(FDT_END);
        assert_eq!(blob_error_of(&t), "unknown structure block token");

        let mut t = Tokens::default();
        t.word(FDT_END);
        assert_eq!(blob_error_of(&t), "FDT_END before the root node is closed");
    }

    #[test]
    fn property_faults_are_errors() {
        // Value longer than the block.
        let mut t = Tokens::default();
        t.begin("").word(FDT_PROP).word(0x1000).word(0);
        t.end().word(FDT_END);
        t.strings.extend_from_slice(b"x\0");
        assert_eq!(blob_error_of(&t), "property value past the structure block");

        // Name offset past the strings block.
        let mut t = Tokens::default();
        t.begin("")
            .word(FDT_PROP)
            .word(0)
            .word(0x100)
            .end()
            .word(FDT_END);
        assert_eq!(blob_error_of(&t), "property name outside the strings block");

        // Name not NUL-terminated inside the strings block.
        let mut t = Tokens::default();
        t.begin("")
            .word(FDT_PROP)
            .word(0)
            .word(0)
            .end()
            .word(FDT_END);
        t.strings.extend_from_slice(b"abc");
        assert_eq!(blob_error_of(&t), "property name outside the strings block");

        // Property name not UTF-8.
        let mut t = Tokens::default();
        t.begin("")
            .word(FDT_PROP)
            .word(0)
            .word(0)
            .end()
            .word(FDT_END);
        t.strings.extend_from_slice(b"\xff\0");
        assert_eq!(blob_error_of(&t), "property name not UTF-8");

        // Node name running off the block.
        let mut t = Tokens::default();
        t.word(FDT_BEGIN_NODE);
        t.structs.extend_from_slice(b"abc");
        assert_eq!(blob_error_of(&t), "unterminated node name");
    }

    #[test]
    fn reservation_block_must_be_terminated() {
        let mut t = Tokens::default();
        t.begin("").end().word(FDT_END);
        let mut blob = t.blob();
        // Overwrite the (0, 0) terminator and make the map run into the
        // structure and strings blocks, then off the end.
        blob[HEADER_SIZE..HEADER_SIZE + 16].fill(0xff);
        let len = blob.len();
        blob[len - 16..].fill(0xff);
        match Fdt::new(&blob) {
            Err(PlatformError {
                kind: ErrorKind::BadBlob(why),
                ..
            }) => assert_eq!(why, "memory reservation block not terminated"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn depth_is_bounded() {
        let mut t = Tokens::default();
        for _ in 0..MAX_DEPTH {
            t.begin("n");
        }
        for _ in 0..MAX_DEPTH {
            t.end();
        }
        t.word(FDT_END);
        assert!(Fdt::new(&t.blob()).is_ok());

        let mut t = Tokens::default();
        for _ in 0..=MAX_DEPTH {
            t.begin("n");
        }
        assert_eq!(blob_error_of(&t), "nodes nested deeper than 64");
    }

    #[test]
    fn string_lists() {
        let entries: Vec<&[u8]> = string_list(b"a\0bc\0\0d").collect();
        assert_eq!(entries, [&b"a"[..], b"bc", b"", b"d"]);
        assert_eq!(string_list(b"").count(), 0);
    }

    #[test]
    fn checked_reads() {
        assert_eq!(be32(&[1, 2, 3, 4, 5], 1), Some(0x0203_0405));
        assert_eq!(be32(&[1, 2, 3], 0), None);
        assert_eq!(be32(&[1, 2, 3, 4], usize::MAX), None);
        assert_eq!(be64(&[0, 0, 0, 1, 0, 0, 0, 2], 0), Some(0x1_0000_0002));
        assert_eq!(be64(&[0; 8], usize::MAX - 3), None);
    }
}
