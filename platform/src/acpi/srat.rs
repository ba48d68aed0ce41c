//! The SRAT (ACPI 6.5 §5.2.16 "System Resource Affinity Table"): which
//! proximity domain each CPU and memory range belongs to.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::NumaNode;
use super::table::{Fields, Table};
use crate::{Cpu, MemRange, Mpidr, PlatformError};

/// The structures start after the header and 12 reserved bytes (Table
/// 5.71).
const STRUCTURES_OFFSET: usize = 48;

/// Memory Affinity Structure (§5.2.16.2, Table 5.74).
mod memory {
    pub const TYPE: u8 = 1;
    pub const PROXIMITY_DOMAIN: usize = 2;
    pub const BASE: usize = 8;
    pub const LENGTH: usize = 16;
    pub const FLAGS: usize = 28;
    pub const LEN: usize = 40;
    /// Flags (Table 5.75): when clear, the structure is to be ignored.
    pub const ENABLED: u32 = 1 << 0;
}

/// GICC Affinity Structure (§5.2.16.4, Table 5.77).
mod gicc {
    pub const TYPE: u8 = 3;
    pub const PROXIMITY_DOMAIN: usize = 2;
    pub const UID: usize = 6;
    pub const FLAGS: usize = 10;
    pub const LEN: usize = 18;
    /// Flags (Table 5.78).
    pub const ENABLED: u32 = 1 << 0;
}

/// The proximity domains, by number, of the MADT's usable `cpus` (with
/// their ACPI Processor UIDs) and of the memory ranges. Only enabled
/// structures count; a GICC Affinity structure for a UID that is not a
/// usable CPU is skipped (firmware lists every possible CPU, the MADT may
/// disable some). A CPU in two structures, or two domains sharing memory,
/// is an error.
pub(crate) fn parse(
    table: &Table<'_>,
    cpus: &[(Cpu, u32)],
) -> Result<Vec<NumaNode>, PlatformError> {
    table.fields().require(STRUCTURES_OFFSET, "Reserved")?;
    // Maps keep the work O(n log n) however many structures there are;
    // of two CPUs with one UID (which ACPI forbids) the first counts.
    let mpidr_of: BTreeMap<u32, Mpidr> = cpus
        .iter()
        .rev()
        .map(|(cpu, uid)| (*uid, cpu.mpidr))
        .collect();
    let mut nodes: BTreeMap<u32, NumaNode> = BTreeMap::new();
    // (field naming the structure, its memory range, its domain)
    let mut ranges: Vec<(String, MemRange, u32)> = Vec::new();
    // UID -> the structure that placed it
    let mut placed: BTreeMap<u32, String> = BTreeMap::new();
    let (mut memory_count, mut gicc_count) = (0, 0);
    for structure in table.structures(STRUCTURES_OFFSET)? {
        match structure.kind {
            memory::TYPE => {
                let fields = Fields::new(
                    table.kind,
                    format!("Memory Affinity[{memory_count}]"),
                    structure.bytes,
                );
                memory_count += 1;
                fields.require(memory::LEN, "Flags")?;
                if fields.u32(memory::FLAGS, "Flags")? & memory::ENABLED == 0 {
                    continue;
                }
                let domain = fields.u32(memory::PROXIMITY_DOMAIN, "Proximity Domain")?;
                let base = fields.u64(memory::BASE, "Base Address")?;
                let length = fields.u64(memory::LENGTH, "Length")?;
                if length == 0 {
                    continue;
                }
                let range = super::checked_range(&fields, "Base Address", base, length)?;
                ranges.push((fields.name("Base Address"), range, domain));
                node(&mut nodes, domain).memory.push(range);
            }
            gicc::TYPE => {
                let fields = Fields::new(
                    table.kind,
                    format!("GICC Affinity[{gicc_count}]"),
                    structure.bytes,
                );
                gicc_count += 1;
                fields.require(gicc::LEN, "Flags")?;
                if fields.u32(gicc::FLAGS, "Flags")? & gicc::ENABLED == 0 {
                    continue;
                }
                let domain = fields.u32(gicc::PROXIMITY_DOMAIN, "Proximity Domain")?;
                let uid = fields.u32(gicc::UID, "ACPI Processor UID")?;
                if let Some(first) = placed.get(&uid) {
                    return Err(fields.bad(
                        "ACPI Processor UID",
                        format!("UID {uid} is also placed by {first}"),
                    ));
                }
                placed.insert(uid, String::from(fields.prefix()));
                let Some(&mpidr) = mpidr_of.get(&uid) else {
                    log::debug!("SRAT: no usable CPU has ACPI Processor UID {uid}");
                    continue;
                };
                node(&mut nodes, domain).cpus.push(mpidr);
            }
            // Local APIC, x2APIC, GIC ITS, Generic Initiator and Port
            // affinity: not needed.
            _ => {}
        }
    }
    // Memory of different domains must not overlap (within one domain an
    // overlap is harmless). Swept in order of base, against the range that
    // reaches furthest so far: if a range overlaps an earlier one of
    // another domain, it also starts inside the furthest-reaching one, and
    // that one is of another domain too, or the two earlier ranges would
    // have been caught overlapping already.
    ranges.sort_by_key(|(_, range, _)| range.base);
    let mut furthest: Option<&(String, MemRange, u32)> = None;
    for entry in &ranges {
        let (name, range, domain) = entry;
        if let Some((other, other_range, other_domain)) = furthest
            && other_range.overlaps(range)
            && other_domain != domain
        {
            return Err(super::table::bad(
                table.kind,
                name.clone(),
                format!(
                    "{:#x}..{:#x} in proximity domain {domain} overlaps {other} \
                     ({:#x}..{:#x}) in domain {other_domain}",
                    range.base,
                    range.end(),
                    other_range.base,
                    other_range.end()
                ),
            ));
        }
        if furthest.is_none_or(|(_, other_range, _)| range.end() > other_range.end()) {
            furthest = Some(entry);
        }
    }
    Ok(nodes
        .into_values()
        .map(|mut node| {
            node.memory.sort();
            node
        })
        .collect())
}

/// The node for `domain`, added if new.
fn node(nodes: &mut BTreeMap<u32, NumaNode>, domain: u32) -> &mut NumaNode {
    nodes.entry(domain).or_insert_with(|| NumaNode {
        proximity_domain: domain,
        cpus: Vec::new(),
        memory: Vec::new(),
    })
}
