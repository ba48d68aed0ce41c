//! The VM description file on the EFI system partition
//! (`\EFI\pvlock\vms.dtb`), and the device tree the hypervisor gets from it.
//!
//! The file is a device tree whose `/chosen` holds the hypervisor's
//! `bootargs` and the `pvlock,vm` nodes of docs/vm-binding.md, with one
//! difference: a boot loader that reads files has not put the payloads in
//! memory yet, so a VM node names them by file instead of by address:
//!
//! ```dts
//! vm@0 {
//!     compatible = "pvlock,vm";
//!     vcpus = <4>;
//!     memory = <0x0 0x4000000>;
//!     kernel-file = "\\EFI\\pvlock\\smp-demo.img";   /* instead of kernel = <addr size> */
//!     initrd-file = "\\EFI\\pvlock\\initrd.img";     /* optional, instead of initrd */
//! };
//! ```
//!
//! Paths are from the root of the partition the hypervisor was loaded
//! from; `/` may stand for `\`. [`VmDescription::files`] lists what to
//! load; once the EFI entry has loaded each file, [`VmDescription::build`]
//! writes the same tree with `kernel = <addr size>` (`initrd = <addr
//! size>`) in place of each `-file` property, every other node and
//! property copied unchanged, and optionally a new `/chosen/bootargs`.
//! Disabled VM nodes (`status` not `"okay"`) are copied as they are and
//! their files are not loaded.
//!
//! The reader here is a small, bounds-checked walk over the structure
//! block (Devicetree Specification 0.4, chapter 5, "Flattened Devicetree
//! (DTB) Format"); it never panics.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use platform::vm::{VM_COMPATIBLE, property};

/// The file the EFI entry reads, from the root of its partition.
pub const PATH: &str = "\\EFI\\pvlock\\vms.dtb";
/// The largest VM description read.
pub const MAX_LEN: usize = 1 << 20;
/// The property that names a VM's kernel by file.
pub const KERNEL_FILE: &str = "kernel-file";
/// The property that names a VM's initrd by file.
pub const INITRD_FILE: &str = "initrd-file";
/// The longest file path accepted.
pub const MAX_PATH_LEN: usize = 512;

/// FDT header fields and tokens (Devicetree Specification 0.4, 5.2 and 5.4).
mod fdt {
    pub const MAGIC: u32 = boot::handover::FDT_MAGIC;
    pub const HEADER_LEN: usize = boot::handover::FDT_HEADER_SIZE as usize;
    pub const TOTALSIZE: usize = 4;
    pub const OFF_DT_STRUCT: usize = 8;
    pub const OFF_DT_STRINGS: usize = 12;
    pub const OFF_MEM_RSVMAP: usize = 16;
    pub const VERSION: usize = 20;
    pub const LAST_COMP_VERSION: usize = 24;
    pub const SIZE_DT_STRINGS: usize = 32;
    pub const SIZE_DT_STRUCT: usize = 36;
    pub const BEGIN_NODE: u32 = 1;
    pub const END_NODE: u32 = 2;
    pub const PROP: u32 = 3;
    pub const NOP: u32 = 4;
    pub const END: u32 = 9;
    /// Deeper trees than this are refused (the binding needs three levels).
    pub const MAX_DEPTH: usize = 32;
}

/// A problem with the VM description, naming the node and property when
/// one is at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescError {
    pub node: Option<String>,
    pub property: Option<String>,
    pub why: String,
}

impl DescError {
    fn blob(why: impl Into<String>) -> Self {
        Self {
            node: None,
            property: None,
            why: why.into(),
        }
    }

    fn at(node: &str, property: &str, why: impl Into<String>) -> Self {
        Self {
            node: Some(node.into()),
            property: Some(property.into()),
            why: why.into(),
        }
    }
}

impl fmt::Display for DescError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.node, &self.property) {
            (Some(node), Some(property)) => {
                write!(f, "node {node}, property \"{property}\": {}", self.why)
            }
            (Some(node), None) => write!(f, "node {node}: {}", self.why),
            _ => write!(f, "malformed device tree: {}", self.why),
        }
    }
}

#[derive(Clone, Debug)]
struct Prop<'a> {
    name: &'a str,
    value: &'a [u8],
}

#[derive(Clone, Debug)]
struct Node<'a> {
    name: &'a str,
    props: Vec<Prop<'a>>,
    children: Vec<Node<'a>>,
}

impl<'a> Node<'a> {
    fn prop(&self, name: &str) -> Option<&'a [u8]> {
        self.props.iter().find(|p| p.name == name).map(|p| p.value)
    }
}

fn be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        bytes.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn be_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(
        bytes.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The NUL-terminated string at `at` in `bytes`, as UTF-8.
fn c_str(bytes: &[u8], at: usize) -> Option<&str> {
    let rest = bytes.get(at..)?;
    let len = rest.iter().position(|&b| b == 0)?;
    core::str::from_utf8(&rest[..len]).ok()
}

/// Parses the blob into its memory reservations and node tree.
fn parse(dtb: &[u8]) -> Result<(Vec<(u64, u64)>, Node<'_>), DescError> {
    let blob = Blob::new(dtb)?;
    let reservations = blob.reservations()?;
    let root = node_tree(blob.structure, blob.strings)?;
    Ok((reservations, root))
}

/// A blob whose header checks out (Devicetree Specification 0.4, 5.2
/// "Header"): its `totalsize` bytes and the blocks the header points to.
struct Blob<'a> {
    /// The first `totalsize` bytes.
    bytes: &'a [u8],
    /// Where the memory reservation block starts in `bytes`.
    reservations_at: usize,
    structure: &'a [u8],
    strings: &'a [u8],
}

impl<'a> Blob<'a> {
    /// Checks the magic, `totalsize` and the versions, and that the
    /// structure and strings blocks lie inside the blob.
    fn new(dtb: &'a [u8]) -> Result<Self, DescError> {
        let word = |at| be_u32(dtb, at).ok_or_else(|| DescError::blob("truncated header"));
        if dtb.len() < fdt::HEADER_LEN || word(0)? != fdt::MAGIC {
            return Err(DescError::blob("no FDT magic (0xd00dfeed)"));
        }
        let total = word(fdt::TOTALSIZE)? as usize;
        if total > dtb.len() || total < fdt::HEADER_LEN {
            return Err(DescError::blob(format!(
                "totalsize {total} does not fit the {} bytes read",
                dtb.len()
            )));
        }
        let bytes = &dtb[..total];
        if word(fdt::LAST_COMP_VERSION)? > 17 || word(fdt::VERSION)? < 16 {
            return Err(DescError::blob("not a version 16/17 compatible FDT"));
        }
        let block = |off: usize, size: usize, what: &str| {
            bytes
                .get(off..off.saturating_add(size))
                .ok_or_else(|| DescError::blob(format!("{what} block lies outside the blob")))
        };
        let structure = block(
            word(fdt::OFF_DT_STRUCT)? as usize,
            word(fdt::SIZE_DT_STRUCT)? as usize,
            "structure",
        )?;
        let strings = block(
            word(fdt::OFF_DT_STRINGS)? as usize,
            word(fdt::SIZE_DT_STRINGS)? as usize,
            "strings",
        )?;
        Ok(Self {
            bytes,
            reservations_at: word(fdt::OFF_MEM_RSVMAP)? as usize,
            structure,
            strings,
        })
    }

    /// The memory reservation block's (address, size) entries, up to the
    /// (0, 0) that ends it (5.3 "Memory Reservation Block").
    fn reservations(&self) -> Result<Vec<(u64, u64)>, DescError> {
        let mut reservations = Vec::new();
        let mut at = self.reservations_at;
        loop {
            let (Some(address), Some(size)) = (
                be_u64(self.bytes, at),
                be_u64(self.bytes, at.saturating_add(8)),
            ) else {
                return Err(DescError::blob(
                    "memory reservation block is not terminated",
                ));
            };
            if address == 0 && size == 0 {
                return Ok(reservations);
            }
            reservations.push((address, size));
            at += 16;
        }
    }
}

/// The node tree the structure block describes (5.4 "Structure Block"),
/// with property names from the strings block.
fn node_tree<'a>(structure: &'a [u8], strings: &'a [u8]) -> Result<Node<'a>, DescError> {
    let mut tokens = Tokens {
        structure,
        strings,
        at: 0,
    };
    let mut tree = TreeBuilder::default();
    loop {
        match tokens.next_token()? {
            fdt::BEGIN_NODE => {
                if tree.root.is_some() {
                    return Err(DescError::blob("a second root node"));
                }
                tree.open(tokens.node_name()?)?;
            }
            fdt::END_NODE => tree.close()?,
            fdt::PROP => tree.add_property(tokens.property()?)?,
            fdt::NOP => {}
            fdt::END => return tree.finish(),
            other => return Err(DescError::blob(format!("unknown token {other:#x}"))),
        }
    }
}

/// A cursor over the structure block's tokens.
struct Tokens<'a> {
    structure: &'a [u8],
    strings: &'a [u8],
    /// The offset of the next token in `structure`.
    at: usize,
}

impl<'a> Tokens<'a> {
    fn next_token(&mut self) -> Result<u32, DescError> {
        let token = be_u32(self.structure, self.at)
            .ok_or_else(|| DescError::blob("structure block ends without FDT_END"))?;
        self.at += 4;
        Ok(token)
    }

    /// The name after an FDT_BEGIN_NODE token, NUL-terminated and padded
    /// to 4 bytes.
    fn node_name(&mut self) -> Result<&'a str, DescError> {
        let name = c_str(self.structure, self.at)
            .ok_or_else(|| DescError::blob("a node name is not terminated UTF-8"))?;
        self.at = (self.at + name.len() + 1).next_multiple_of(4);
        Ok(name)
    }

    /// The property after an FDT_PROP token: its length and name offset,
    /// then its value, padded to 4 bytes.
    fn property(&mut self) -> Result<Prop<'a>, DescError> {
        let at = self.at;
        let (Some(len), Some(name_off)) =
            (be_u32(self.structure, at), be_u32(self.structure, at + 4))
        else {
            return Err(DescError::blob("truncated property"));
        };
        let at = at + 8;
        let value = self
            .structure
            .get(at..at.saturating_add(len as usize))
            .ok_or_else(|| DescError::blob("a property value runs past the block"))?;
        self.at = (at + len as usize).next_multiple_of(4);
        let name = c_str(self.strings, name_off as usize)
            .ok_or_else(|| DescError::blob("a property name lies outside the strings block"))?;
        Ok(Prop { name, value })
    }
}

/// The tree as the tokens build it: the nodes still open, innermost
/// last, and the root once it is closed.
#[derive(Default)]
struct TreeBuilder<'a> {
    open: Vec<Node<'a>>,
    root: Option<Node<'a>>,
}

impl<'a> TreeBuilder<'a> {
    fn open(&mut self, name: &'a str) -> Result<(), DescError> {
        if self.open.len() >= fdt::MAX_DEPTH {
            return Err(DescError::blob("nodes nested too deeply"));
        }
        self.open.push(Node {
            name,
            props: Vec::new(),
            children: Vec::new(),
        });
        Ok(())
    }

    fn close(&mut self) -> Result<(), DescError> {
        let node = self
            .open
            .pop()
            .ok_or_else(|| DescError::blob("FDT_END_NODE without a node"))?;
        match self.open.last_mut() {
            Some(parent) => parent.children.push(node),
            None => self.root = Some(node),
        }
        Ok(())
    }

    /// Adds `prop` to the innermost open node, which must have no child
    /// yet (5.4.1: a node's properties come before its children).
    fn add_property(&mut self, prop: Prop<'a>) -> Result<(), DescError> {
        let node = self
            .open
            .last_mut()
            .ok_or_else(|| DescError::blob("a property outside any node"))?;
        if !node.children.is_empty() {
            return Err(DescError::blob(format!(
                "property {} after a child node of {}",
                prop.name, node.name
            )));
        }
        node.props.push(prop);
        Ok(())
    }

    fn finish(self) -> Result<Node<'a>, DescError> {
        if !self.open.is_empty() {
            return Err(DescError::blob("a node is not closed"));
        }
        self.root.ok_or_else(|| DescError::blob("no root node"))
    }
}

/// A payload file a VM node names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRef {
    /// The VM node's path (`/chosen/vm@0`).
    pub node: String,
    /// [`KERNEL_FILE`] or [`INITRD_FILE`].
    pub property: &'static str,
    /// The file's path on the partition, with `\` separators and a
    /// leading `\`.
    pub path: String,
}

/// Where the EFI entry put a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loaded {
    pub address: u64,
    pub size: u64,
}

/// A parsed VM description.
#[derive(Clone, Debug)]
pub struct VmDescription<'a> {
    reservations: Vec<(u64, u64)>,
    root: Node<'a>,
}

fn is_vm(node: &Node<'_>) -> bool {
    let compatible = node
        .prop("compatible")
        .is_some_and(|v| v.split(|&b| b == 0).any(|s| s == VM_COMPATIBLE.as_bytes()));
    let enabled = match node.prop("status") {
        None => true,
        Some(v) => matches!(v.split(|&b| b == 0).next(), Some(b"okay" | b"ok")),
    };
    compatible && enabled
}

/// Which `-file` property replaces which binding property.
const FILE_PROPERTIES: [(&str, &str); 2] = [
    (KERNEL_FILE, property::KERNEL),
    (INITRD_FILE, property::INITRD),
];

/// A `-file` property's value as a partition path.
fn file_path(node: &str, name: &str, value: &[u8]) -> Result<String, DescError> {
    let err = |why: &str| Err(DescError::at(node, name, why));
    let Some((&0, text)) = value.split_last() else {
        return err("not a string (no terminating NUL)");
    };
    if text.is_empty() {
        return err("empty file name");
    }
    if text.len() > MAX_PATH_LEN {
        return err("file name too long");
    }
    if !text.iter().all(|&b| (0x20..0x7f).contains(&b)) {
        return err("not a single string of printable ASCII characters");
    }
    let mut path: String = text
        .iter()
        .map(|&b| if b == b'/' { '\\' } else { char::from(b) })
        .collect();
    if !path.starts_with('\\') {
        path.insert(0, '\\');
    }
    Ok(path)
}

impl<'a> VmDescription<'a> {
    /// Reads the blob; `dtb` may be longer than the tree.
    pub fn parse(dtb: &'a [u8]) -> Result<Self, DescError> {
        let (reservations, root) = parse(dtb)?;
        Ok(Self { reservations, root })
    }

    fn chosen(&self) -> Option<&Node<'a>> {
        self.root.children.iter().find(|n| n.name == "chosen")
    }

    /// The enabled VM nodes' paths, in tree order.
    pub fn vm_nodes(&self) -> Vec<String> {
        self.chosen()
            .map(|c| {
                c.children
                    .iter()
                    .filter(|n| is_vm(n))
                    .map(|n| format!("/chosen/{}", n.name))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The files the enabled VM nodes name, in tree order (per node: kernel,
    /// then initrd). A node that names a payload both by file and by
    /// address is an error.
    pub fn files(&self) -> Result<Vec<FileRef>, DescError> {
        let mut files = Vec::new();
        let Some(chosen) = self.chosen() else {
            return Ok(files);
        };
        for vm in chosen.children.iter().filter(|n| is_vm(n)) {
            let node = format!("/chosen/{}", vm.name);
            for (file_property, address_property) in FILE_PROPERTIES {
                let Some(value) = vm.prop(file_property) else {
                    continue;
                };
                if vm.prop(address_property).is_some() {
                    return Err(DescError::at(
                        &node,
                        file_property,
                        format!("the node also has \"{address_property}\"; give one of them"),
                    ));
                }
                files.push(FileRef {
                    path: file_path(&node, file_property, value)?,
                    node: node.clone(),
                    property: file_property,
                });
            }
        }
        Ok(files)
    }

    /// The tree with every file of [`Self::files`] replaced by where it
    /// was loaded (`loaded[i]` for `files()[i]`), and `/chosen/bootargs`
    /// set to `bootargs` when given.
    pub fn build(&self, loaded: &[Loaded], bootargs: Option<&str>) -> Result<Vec<u8>, DescError> {
        let files = self.files()?;
        if files.len() != loaded.len() {
            return Err(DescError::blob(format!(
                "{} files named but {} loaded",
                files.len(),
                loaded.len()
            )));
        }
        let reservations: Vec<vm_fdt::FdtReserveEntry> = self
            .reservations
            .iter()
            .map(|&(a, s)| vm_fdt::FdtReserveEntry::new(a, s))
            .collect::<Result<_, _>>()
            .map_err(|e| DescError::blob(format!("memory reservation: {e}")))?;
        let mut w = vm_fdt::FdtWriter::new_with_mem_reserv(&reservations)
            .map_err(|e| DescError::blob(format!("memory reservations: {e}")))?;
        let mut next_file = 0;
        let ctx = Build { loaded, bootargs };
        ctx.node(&mut w, &self.root, "", &mut next_file)?;
        w.finish()
            .map_err(|e| DescError::blob(format!("cannot write the tree: {e}")))
    }
}

struct Build<'b> {
    loaded: &'b [Loaded],
    bootargs: Option<&'b str>,
}

impl Build<'_> {
    /// Writes `node` (whose path is `parent/name`) and its subtree.
    fn node(
        &self,
        w: &mut vm_fdt::FdtWriter,
        node: &Node<'_>,
        parent: &str,
        next_file: &mut usize,
    ) -> Result<(), DescError> {
        let path = match (parent, node.name) {
            ("", "") => String::from("/"),
            ("/", name) => format!("/{name}"),
            (parent, name) => format!("{parent}/{name}"),
        };
        let write_err = |property: Option<&str>, e: vm_fdt::Error| DescError {
            node: Some(path.clone()),
            property: property.map(ToString::to_string),
            why: format!("cannot write it: {e}"),
        };
        let handle = w.begin_node(node.name).map_err(|e| write_err(None, e))?;
        let vm = parent == "/chosen" && is_vm(node);
        let chosen = path == "/chosen";
        for prop in &node.props {
            let replacement = FILE_PROPERTIES
                .iter()
                .find(|(file, _)| vm && prop.name == *file)
                .map(|(_, address)| *address);
            if let Some(address_property) = replacement {
                let loaded = self.loaded.get(*next_file).ok_or_else(|| {
                    DescError::at(&path, prop.name, "more files named than loaded")
                })?;
                *next_file += 1;
                let cells = [loaded.address, loaded.size];
                w.property_array_u64(address_property, &cells)
                    .map_err(|e| write_err(Some(address_property), e))?;
            } else if chosen && prop.name == property::BOOTARGS && self.bootargs.is_some() {
                let args = self.bootargs.unwrap_or_default();
                w.property_string(property::BOOTARGS, args)
                    .map_err(|e| write_err(Some(property::BOOTARGS), e))?;
            } else {
                w.property(prop.name, prop.value)
                    .map_err(|e| write_err(Some(prop.name), e))?;
            }
        }
        if chosen
            && node.prop(property::BOOTARGS).is_none()
            && let Some(args) = self.bootargs
        {
            w.property_string(property::BOOTARGS, args)
                .map_err(|e| write_err(Some(property::BOOTARGS), e))?;
        }
        for child in &node.children {
            self.node(w, child, &path, next_file)?;
        }
        // A command line but no /chosen: make one.
        if path == "/"
            && !node.children.iter().any(|c| c.name == "chosen")
            && let Some(args) = self.bootargs
        {
            let c = w.begin_node("chosen").map_err(|e| write_err(None, e))?;
            w.property_string(property::BOOTARGS, args)
                .map_err(|e| write_err(Some(property::BOOTARGS), e))?;
            w.end_node(c).map_err(|e| write_err(None, e))?;
        }
        w.end_node(handle).map_err(|e| write_err(None, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// A VM description as xtask writes it.
    fn description(bootargs: Option<&str>) -> Vec<u8> {
        let mut w = vm_fdt::FdtWriter::new().unwrap();
        let root = w.begin_node("").unwrap();
        w.property_u32("#address-cells", 2).unwrap();
        let chosen = w.begin_node("chosen").unwrap();
        if let Some(args) = bootargs {
            w.property_string("bootargs", args).unwrap();
        }
        let vm0 = w.begin_node("vm@0").unwrap();
        w.property_string("compatible", "pvlock,vm").unwrap();
        w.property_u32("vcpus", 4).unwrap();
        w.property_array_u64("memory", &[64 << 20]).unwrap();
        w.property_string("kernel-file", "\\EFI\\pvlock\\smp-demo.img")
            .unwrap();
        w.property_string("initrd-file", "EFI/pvlock/initrd.img")
            .unwrap();
        w.property_string("bootargs", "rounds=3").unwrap();
        w.end_node(vm0).unwrap();
        let vm1 = w.begin_node("vm@1").unwrap();
        w.property_string_list("compatible", vec!["acme,thing".into(), "pvlock,vm".into()])
            .unwrap();
        w.property_string("kernel-file", "\\k1").unwrap();
        w.end_node(vm1).unwrap();
        let off = w.begin_node("vm@2").unwrap();
        w.property_string("compatible", "pvlock,vm").unwrap();
        w.property_string("status", "disabled").unwrap();
        w.property_string("kernel-file", "\\not-loaded").unwrap();
        w.end_node(off).unwrap();
        w.end_node(chosen).unwrap();
        let other = w.begin_node("other").unwrap();
        w.property_string("kernel-file", "\\not-a-vm").unwrap();
        w.end_node(other).unwrap();
        w.end_node(root).unwrap();
        w.finish().unwrap()
    }

    fn reparse(dtb: &[u8]) -> ::fdt::Fdt<'_> {
        ::fdt::Fdt::new(dtb).expect("a valid FDT")
    }

    #[test]
    fn lists_the_files_of_enabled_vm_nodes() {
        let dtb = description(Some("loglevel=info"));
        let d = VmDescription::parse(&dtb).unwrap();
        assert_eq!(d.vm_nodes(), ["/chosen/vm@0", "/chosen/vm@1"]);
        let files = d.files().unwrap();
        assert_eq!(
            files,
            [
                FileRef {
                    node: "/chosen/vm@0".into(),
                    property: KERNEL_FILE,
                    path: "\\EFI\\pvlock\\smp-demo.img".into()
                },
                FileRef {
                    node: "/chosen/vm@0".into(),
                    property: INITRD_FILE,
                    path: "\\EFI\\pvlock\\initrd.img".into()
                },
                FileRef {
                    node: "/chosen/vm@1".into(),
                    property: KERNEL_FILE,
                    path: "\\k1".into()
                },
            ]
        );
    }

    #[test]
    fn build_puts_addresses_in_place_of_files() {
        let dtb = description(Some("loglevel=info"));
        let d = VmDescription::parse(&dtb).unwrap();
        let loaded = [
            Loaded {
                address: 0x7000_0000,
                size: 0x1_2345,
            },
            Loaded {
                address: 0x1_7100_0000,
                size: 0x1000,
            },
            Loaded {
                address: 0x7200_0000,
                size: 0x10,
            },
        ];
        let out = d.build(&loaded, None).unwrap();
        let t = reparse(&out);
        let vm0 = t.find_node("/chosen/vm@0").unwrap();
        let cells = |node: &::fdt::node::FdtNode<'_, '_>, name: &str| {
            node.property(name).map(|p| p.value.to_vec())
        };
        let be =
            |words: &[u64]| -> Vec<u8> { words.iter().flat_map(|w| w.to_be_bytes()).collect() };
        assert_eq!(cells(&vm0, "kernel"), Some(be(&[0x7000_0000, 0x1_2345])));
        assert_eq!(cells(&vm0, "initrd"), Some(be(&[0x1_7100_0000, 0x1000])));
        assert!(vm0.property("kernel-file").is_none());
        assert!(vm0.property("initrd-file").is_none());
        // Everything else unchanged, in order.
        let names: Vec<&str> = vm0.properties().map(|p| p.name).collect();
        assert_eq!(
            names,
            [
                "compatible",
                "vcpus",
                "memory",
                "kernel",
                "initrd",
                "bootargs"
            ]
        );
        assert_eq!(vm0.property("bootargs").unwrap().as_str(), Some("rounds=3"));
        let vm1 = t.find_node("/chosen/vm@1").unwrap();
        assert_eq!(cells(&vm1, "kernel"), Some(be(&[0x7200_0000, 0x10])));
        // The disabled VM and the non-VM node keep their file names.
        let off = t.find_node("/chosen/vm@2").unwrap();
        assert!(off.property("kernel-file").is_some() && off.property("kernel").is_none());
        assert!(
            t.find_node("/other")
                .unwrap()
                .property("kernel-file")
                .is_some()
        );
        assert_eq!(
            t.find_node("/chosen")
                .unwrap()
                .property("bootargs")
                .unwrap()
                .as_str(),
            Some("loglevel=info")
        );
        assert_eq!(
            t.root().property("#address-cells").unwrap().as_usize(),
            Some(2)
        );
        // And the platform's own parser reads the VMs.
        let parsed = platform::vms_from_dt(&out).expect("the VM description parses");
        assert_eq!(parsed.0, "loglevel=info");
        assert_eq!(parsed.1.len(), 2);
    }

    #[test]
    fn the_load_options_replace_or_add_bootargs() {
        let loaded = [Loaded {
            address: 0x1000,
            size: 1,
        }; 3];
        for original in [Some("loglevel=info"), None] {
            let dtb = description(original);
            let out = VmDescription::parse(&dtb)
                .unwrap()
                .build(&loaded, Some("loglevel=debug"))
                .unwrap();
            let t = reparse(&out);
            let chosen = t.find_node("/chosen").unwrap();
            assert_eq!(
                chosen.property("bootargs").unwrap().as_str(),
                Some("loglevel=debug")
            );
        }
        // No /chosen at all: one is made.
        let mut w = vm_fdt::FdtWriter::new().unwrap();
        let root = w.begin_node("").unwrap();
        w.end_node(root).unwrap();
        let empty = w.finish().unwrap();
        let d = VmDescription::parse(&empty).unwrap();
        assert!(d.files().unwrap().is_empty());
        let out = d.build(&[], Some("x=1")).unwrap();
        assert_eq!(
            reparse(&out)
                .find_node("/chosen")
                .unwrap()
                .property("bootargs")
                .unwrap()
                .as_str(),
            Some("x=1")
        );
        assert!(
            reparse(&d.build(&[], None).unwrap())
                .find_node("/chosen")
                .is_none()
        );
    }

    fn one_vm(props: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = vm_fdt::FdtWriter::new().unwrap();
        let root = w.begin_node("").unwrap();
        let chosen = w.begin_node("chosen").unwrap();
        let vm = w.begin_node("vm@7").unwrap();
        w.property_string("compatible", "pvlock,vm").unwrap();
        for (name, value) in props {
            w.property(name, value).unwrap();
        }
        w.end_node(vm).unwrap();
        w.end_node(chosen).unwrap();
        w.end_node(root).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn bad_file_properties_are_named() {
        type Props<'a> = &'a [(&'a str, &'a [u8])];
        let cases: [(Props<'_>, &str, &str); 6] = [
            (&[("kernel-file", b"")], "kernel-file", "no terminating NUL"),
            (&[("kernel-file", b"\0")], "kernel-file", "empty"),
            (
                &[("initrd-file", b"a\0b\0")],
                "initrd-file",
                "single string",
            ),
            (
                &[("kernel-file", b"caf\xc3\xa9\0")],
                "kernel-file",
                "printable",
            ),
            (
                &[("kernel", &[0; 16]), ("kernel-file", b"k\0")],
                "kernel-file",
                "also has \"kernel\"",
            ),
            (
                &[("initrd-file", b"i\0"), ("initrd", &[0; 16])],
                "initrd-file",
                "also has \"initrd\"",
            ),
        ];
        for (props, property, why) in cases {
            let dtb = one_vm(props);
            let err = VmDescription::parse(&dtb).unwrap().files().unwrap_err();
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("node /chosen/vm@7, property \"{property}\": ")),
                "{text}"
            );
            assert!(text.contains(why), "{text}");
        }
        let long = vec![b'a'; MAX_PATH_LEN + 1];
        let value = [long.as_slice(), b"\0"].concat();
        assert!(
            VmDescription::parse(&one_vm(&[("kernel-file", &value)]))
                .unwrap()
                .files()
                .is_err()
        );
    }

    #[test]
    fn not_a_device_tree() {
        for bad in [
            &b""[..],
            b"hello world, this is not a tree at all.....",
            &[0; 64],
        ] {
            let err = VmDescription::parse(bad).unwrap_err();
            assert!(
                err.to_string().starts_with("malformed device tree: "),
                "{err}"
            );
        }
        let mut dtb = description(None);
        dtb.truncate(dtb.len() / 2);
        assert!(VmDescription::parse(&dtb).is_err());
    }

    #[test]
    fn hostile_blobs_never_panic() {
        let good = description(Some("loglevel=info"));
        let mut rng = prng::Rng::new(0x8f1b_bcdc_bfa5_3e0b);
        let mut next = || rng.next_u64();
        let loaded = [Loaded {
            address: 0x1000,
            size: 1,
        }; 3];
        for _ in 0..3000 {
            let mut b = good.clone();
            for _ in 0..1 + next() % 3 {
                let at = (next() % b.len() as u64) as usize;
                b[at] = next() as u8;
            }
            if let Ok(d) = VmDescription::parse(&b) {
                let _ = d.vm_nodes();
                if let Ok(files) = d.files() {
                    let _ = d.build(&loaded[..files.len().min(3)], Some("a=b"));
                }
            }
        }
    }
}
