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
    let raw: [u8; 4] = bytes.get(offset..offset.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_be_bytes(raw))
}

/// Reads a big-endian `u64` at `offset`, or `None` past the end.
pub fn be64(bytes: &[u8], offset: usize) -> Option<u64> {
    let raw: [u8; 8] = bytes.get(offset..offset.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_be_bytes(raw))
}

/// Rounds `offset` up to the 4-byte token alignment, `None` on overflow.
fn align4(offset: usize) -> Option<usize> {
    offset.checked_add(3).map(|v| v & !3)
}

/// The NUL-terminated string starting at `offset` (without the NUL).
fn cstr_at(bytes: &[u8], offset: usize) -> Option<&[u8]> {
    let tail = bytes.get(offset..)?;
    let len = tail.iter().position(|&b| b == 0)?;
    tail.get(..len)
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
        let field = |index: usize| be32(bytes, index * 4).ok_or(blob_error("header truncated"));
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
        if self.off_mem_rsvmap % 8 != 0 || !block_ok(self.off_mem_rsvmap, 16) {
            return Err(blob_error("bad memory reservation block offset"));
        }
        if self.off_dt_struct % 4 != 0 || !block_ok(self.off_dt_struct, self.size_dt_struct) {
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
    /// This node's properties, as a range of [`Fdt::props`].
    props: Range<usize>,
    /// One past the last node of this node's subtree.
    subtree_end: NodeId,
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
            .ok_or(blob_error("blob shorter than its header's totalsize"))?;
        let structs = blob
            .get(header.struct_range())
            .ok_or(blob_error("structure block outside the blob"))?;
        let strings = blob
            .get(header.strings_range())
            .ok_or(blob_error("strings block outside the blob"))?;
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
        self.nodes
            .get(node)
            .and_then(|n| self.props.get(n.props.clone()))
            .unwrap_or(&[])
    }

    /// The value of `node`'s property `name` (the first, if repeated).
    pub fn prop(&self, node: NodeId, name: &str) -> Option<&'a [u8]> {
        self.properties(node)
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.value)
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
            node = self.children(node).find(|&child| {
                let name = self.name(child);
                name == component
                    || (!component.contains('@')
                        && name.split_once('@').is_some_and(|(base, _)| base == component))
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
        while first > 0 && self.phandles.get(first - 1).is_some_and(|&(ph, _)| ph == phandle) {
            first -= 1;
        }
        self.phandles.get(first).map(|&(_, node)| node)
    }

    fn collect_phandles(&self) -> Vec<(u32, NodeId)> {
        let mut phandles: Vec<(u32, NodeId)> = self
            .node_ids()
            .filter_map(|node| {
                // `linux,phandle` is the pre-ePAPR spelling.
                let value = self
                    .prop(node, "phandle")
                    .or_else(|| self.prop(node, "linux,phandle"))?;
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
        let (Some(address), Some(size)) = (be64(blob, at), be64(blob, at.saturating_add(8)))
        else {
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
    let mut nodes: Vec<Node<'a>> = Vec::new();
    let mut props: Vec<Property<'a>> = Vec::new();
    // Nodes opened and not yet closed, innermost last.
    let mut open: Vec<NodeId> = Vec::new();
    let mut root_closed = false;
    let mut at = 0usize;
    // Every token consumes at least 4 bytes, so this loop ends within
    // structs.len() / 4 iterations.
    loop {
        let token = be32(structs, at).ok_or(blob_error("structure block ends without FDT_END"))?;
        at += 4;
        match token {
            FDT_BEGIN_NODE => {
                if root_closed {
                    return Err(blob_error("node after the root node"));
                }
                if open.len() >= MAX_DEPTH {
                    return Err(blob_error("nodes nested deeper than 64"));
                }
                let name = cstr_at(structs, at).ok_or(blob_error("unterminated node name"))?;
                let name =
                    core::str::from_utf8(name).map_err(|_| blob_error("node name not UTF-8"))?;
                at = align4(at + name.len() + 1).ok_or(blob_error("node name overflows"))?;
                nodes.push(Node {
                    name,
                    parent: open.last().copied(),
                    props: props.len()..props.len(),
                    subtree_end: 0,
                });
                open.push(nodes.len() - 1);
            }
            FDT_END_NODE => {
                let node = open.pop().ok_or(blob_error("FDT_END_NODE without a node"))?;
                let end = nodes.len();
                if let Some(n) = nodes.get_mut(node) {
                    n.subtree_end = end;
                }
                root_closed = open.is_empty();
            }
            FDT_PROP => {
                let &node = open.last().ok_or(blob_error("property outside any node"))?;
                // The format puts a node's properties before its subnodes;
                // that keeps each node's properties contiguous.
                if nodes.len() != node + 1 {
                    return Err(blob_error("property after a subnode"));
                }
                let len = be32(structs, at).ok_or(blob_error("property header truncated"))?;
                let name_offset =
                    be32(structs, at + 4).ok_or(blob_error("property header truncated"))?;
                at += 8;
                let end = at
                    .checked_add(len as usize)
                    .ok_or(blob_error("property value overflows"))?;
                let value = structs
                    .get(at..end)
                    .ok_or(blob_error("property value past the structure block"))?;
                at = align4(end).ok_or(blob_error("property value overflows"))?;
                let name = cstr_at(strings, name_offset as usize)
                    .ok_or(blob_error("property name outside the strings block"))?;
                let name = core::str::from_utf8(name)
                    .map_err(|_| blob_error("property name not UTF-8"))?;
                props.push(Property { name, value });
                if let Some(n) = nodes.get_mut(node) {
                    n.props.end = props.len();
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
