//! The MADT (ACPI 6.5 §5.2.12 "Multiple APIC Description Table"): the
//! CPUs from its GICC structures, and the GICv3 from its GICD, GICR and
//! GIC ITS structures (or the GICCs' redistributor addresses).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use gic_regs::{DISTRIBUTOR_SIZE, REDISTRIBUTOR_SIZE, REDISTRIBUTOR_SIZE_VLPIS};

use super::table::{Fields, Kind, Table, error};
use super::{EDGE_RISING, LEVEL_HIGH, checked_range};
use crate::{
    Cpu, EnableMethod, ErrorKind, GicV3, Interrupt, Mpidr, PlatformError, RedistributorRegion,
};

/// The structures start after the header, `Local Interrupt Controller
/// Address` and `Flags` (§5.2.12 Table 5.19).
const STRUCTURES_OFFSET: usize = 44;

/// Structure types (§5.2.12 Table 5.21).
const GICC: u8 = 0x0b;
const GICD: u8 = 0x0c;
const GICR: u8 = 0x0e;
const GIC_ITS: u8 = 0x0f;

/// GICC structure (§5.2.12.14 "GIC CPU Interface (GICC) Structure",
/// Table 5.37): offsets of the fields read.
mod gicc {
    pub const UID: usize = 8;
    pub const FLAGS: usize = 12;
    pub const VGIC_MAINTENANCE: usize = 56;
    pub const GICR_BASE: usize = 60;
    pub const MPIDR: usize = 68;
    /// Through `MPIDR`: the ACPI 5.1 structure. ACPI 6.0 made it 80 bytes
    /// (Processor Power Efficiency Class), 6.3 filled them with the SPE
    /// overflow interrupt and 6.5 made it 82 (TRBE interrupt); none of the
    /// later fields is read.
    pub const MIN_LEN: usize = 76;
    /// GICC CPU Interface Flags (Table 5.38).
    pub const ENABLED: u32 = 1 << 0;
    pub const VGIC_MAINTENANCE_EDGE: u32 = 1 << 2;
    pub const ONLINE_CAPABLE: u32 = 1 << 3;
}

/// GICD structure (§5.2.12.15, Table 5.39).
mod gicd {
    pub const BASE: usize = 8;
    pub const VERSION: usize = 20;
    pub const LEN: usize = 24;
}

/// GICR structure (§5.2.12.17, Table 5.42).
mod gicr {
    pub const BASE: usize = 4;
    pub const LENGTH: usize = 12;
    pub const LEN: usize = 16;
}

/// GIC ITS structure (§5.2.12.18, Table 5.43).
mod its {
    pub const BASE: usize = 8;
    pub const LEN: usize = 20;
}

/// An ITS: its control frame and its translation frame (GITS_TRANSLATER),
/// two 64 KiB frames; Linux maps the same 128 KiB for an ACPI ITS.
pub(crate) const ITS_SIZE: u64 = 0x2_0000;

/// What the MADT gives.
pub(crate) struct Madt {
    /// The interrupt controller.
    pub(crate) gic: GicV3,
    /// The usable CPUs in MADT order, each with its ACPI Processor UID
    /// (which SRAT uses to refer to it).
    pub(crate) cpus: Vec<(Cpu, u32)>,
}

/// One GICC structure, as far as it is read.
struct Gicc<'a> {
    fields: Fields<'a>,
    /// Position among the MADT's GICC structures (`GICC[index]`).
    index: usize,
    uid: u32,
    flags: u32,
    mpidr: Mpidr,
    maintenance_gsiv: u32,
    gicr_base: u64,
}

impl Gicc<'_> {
    fn usable(&self) -> bool {
        self.flags & gicc::ENABLED != 0
    }

    fn maintenance(&self) -> Result<Option<Interrupt>, PlatformError> {
        let field = "VGIC Maintenance interrupt";
        let flags = if self.flags & gicc::VGIC_MAINTENANCE_EDGE != 0 {
            EDGE_RISING
        } else {
            LEVEL_HIGH
        };
        match self.maintenance_gsiv {
            0 => Ok(None),
            gsiv @ 16..=31 => Ok(Some(Interrupt::Ppi {
                number: gsiv - 16,
                flags,
            })),
            gsiv => Err(self
                .fields
                .bad(field, format!("GSIV {gsiv} is not a PPI (INTIDs 16 to 31)"))),
        }
    }
}

/// Which GIC the GICD structure's `GIC version` says.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Version {
    /// 0: "no GIC version is specified" (ACPI 5.1 tables, where the field
    /// was reserved).
    Unspecified,
    V3,
    V4,
}

pub(crate) fn parse(table: &Table<'_>) -> Result<Madt, PlatformError> {
    let kind = table.kind;
    table.fields().require(STRUCTURES_OFFSET, "Flags")?;
    let mut giccs = Vec::new();
    let mut gicds = Vec::new();
    let mut gicrs = Vec::new();
    let mut itses = Vec::new();
    for structure in table.structures(STRUCTURES_OFFSET)? {
        let (list, name) = match structure.kind {
            GICC => (&mut giccs, "GICC"),
            GICD => (&mut gicds, "GICD"),
            GICR => (&mut gicrs, "GICR"),
            GIC_ITS => (&mut itses, "GIC ITS"),
            // Local APIC, GIC MSI Frame, wakeup and the other
            // architectures' structures: not needed.
            _ => continue,
        };
        let prefix = format!("{name}[{}]", list.len());
        list.push(Fields::new(kind, prefix, structure.bytes));
    }

    // The distributor first: a GICv2 is rejected before anything else.
    let (distributor, version) = distributor(kind, &gicds)?;
    let giccs = giccs
        .into_iter()
        .enumerate()
        .map(|(index, fields)| read_gicc(fields, index))
        .collect::<Result<Vec<_>, _>>()?;
    let usable: Vec<&Gicc<'_>> = giccs.iter().filter(|gicc| gicc.usable()).collect();
    if version == Version::Unspecified
        && gicrs.is_empty()
        && usable.iter().all(|gicc| gicc.gicr_base == 0)
    {
        return Err(gicds[0].unsupported(
            "GIC version",
            "0 (not given), and neither a GICR structure nor a GICC's GICR Base \
             Address describes a redistributor: a GICv2, and this hypervisor \
             needs a GICv3 or GICv4",
        ));
    }
    for gicc in giccs.iter().filter(|gicc| !gicc.usable()) {
        log::debug!(
            "skipping {} (MPIDR {}): {}",
            gicc.fields.prefix(),
            gicc.mpidr,
            if gicc.flags & gicc::ONLINE_CAPABLE != 0 {
                "online capable, not enabled"
            } else {
                "disabled"
            }
        );
    }
    if usable.is_empty() {
        return Err(if giccs.is_empty() {
            error(kind, Some(String::from("GICC")), ErrorKind::MissingProperty)
        } else {
            super::table::bad(
                kind,
                "GICC",
                format!(
                    "none of the {} GICC structures has its Enabled flag set: no CPU to run on",
                    giccs.len()
                ),
            )
        });
    }
    check_unique_mpidrs(&usable)?;
    let maintenance_irq = maintenance(&usable)?;
    let redistributor_regions = if gicrs.is_empty() {
        per_cpu_redistributors(&usable, version)?
    } else {
        gicrs.iter().map(redistributor).collect::<Result<_, _>>()?
    };
    check_disjoint(kind, &redistributor_regions)?;
    let its = itses
        .iter()
        .map(|fields| {
            fields.require(its::LEN, "Physical Base Address")?;
            let base = fields.u64(its::BASE, "Physical Base Address")?;
            checked_range(fields, "Physical Base Address", base, ITS_SIZE)
        })
        .collect::<Result<_, _>>()?;
    let cpus = usable
        .iter()
        .map(|gicc| {
            let cpu = Cpu {
                mpidr: gicc.mpidr,
                enable_method: EnableMethod::Psci,
                node: format!("MADT {}", gicc.fields.prefix()),
            };
            (cpu, gicc.uid)
        })
        .collect();
    Ok(Madt {
        gic: GicV3 {
            distributor,
            redistributor_regions: redistributor_regions.into_iter().map(|(_, r)| r).collect(),
            its,
            maintenance_irq,
        },
        cpus,
    })
}

/// The one GICD structure: its frame and the GIC version.
fn distributor(
    kind: Kind,
    gicds: &[Fields<'_>],
) -> Result<(crate::MemRange, Version), PlatformError> {
    let gicd = match gicds {
        [] => {
            return Err(error(
                kind,
                Some(String::from("GICD")),
                ErrorKind::MissingProperty,
            ));
        }
        [gicd] => gicd,
        [_, second, ..] => {
            return Err(second.bad(
                "Type",
                "a second GICD structure: a system has one distributor (ACPI 6.5 §5.2.12.15)",
            ));
        }
    };
    gicd.require(gicd::LEN, "GIC version")?;
    let version = match gicd.u8(gicd::VERSION, "GIC version")? {
        0 => Version::Unspecified,
        3 => Version::V3,
        4 => Version::V4,
        old @ (1 | 2) => {
            return Err(gicd.unsupported(
                "GIC version",
                format!("GICv{old}: this hypervisor needs a GICv3 or GICv4"),
            ));
        }
        other => {
            return Err(gicd.unsupported(
                "GIC version",
                format!("unknown GIC version {other} (ACPI 6.5 defines 1 to 4)"),
            ));
        }
    };
    let base = gicd.u64(gicd::BASE, "Physical Base Address")?;
    Ok((
        checked_range(gicd, "Physical Base Address", base, DISTRIBUTOR_SIZE)?,
        version,
    ))
}

fn read_gicc(fields: Fields<'_>, index: usize) -> Result<Gicc<'_>, PlatformError> {
    fields.require(gicc::MIN_LEN, "MPIDR")?;
    Ok(Gicc {
        index,
        uid: fields.u32(gicc::UID, "ACPI Processor UID")?,
        flags: fields.u32(gicc::FLAGS, "Flags")?,
        // Linux masks the same way (acpi_map_gic_cpu_interface): bits
        // other than Aff3..Aff0 must be zero (Table 5.37) and carry
        // nothing the hypervisor uses.
        mpidr: Mpidr::from_raw(fields.u64(gicc::MPIDR, "MPIDR")?),
        maintenance_gsiv: fields.u32(gicc::VGIC_MAINTENANCE, "VGIC Maintenance interrupt")?,
        gicr_base: fields.u64(gicc::GICR_BASE, "GICR Base Address")?,
        fields,
    })
}

/// Two usable CPUs with the same affinity cannot both be started or
/// routed to; the later one gets the blame (like the DT path).
fn check_unique_mpidrs(usable: &[&Gicc<'_>]) -> Result<(), PlatformError> {
    let mut by_mpidr: Vec<&&Gicc<'_>> = usable.iter().collect();
    // Stable: of two equal MPIDRs the later GICC comes second.
    by_mpidr.sort_by_key(|gicc| gicc.mpidr);
    for pair in by_mpidr.windows(2) {
        if let [first, second] = pair
            && first.mpidr == second.mpidr
        {
            return Err(second.fields.bad(
                "MPIDR",
                format!("MPIDR {} also used by GICC[{}]", second.mpidr, first.index),
            ));
        }
    }
    Ok(())
}

/// The maintenance interrupt: a PPI, so every CPU must name the same one.
fn maintenance(usable: &[&Gicc<'_>]) -> Result<Option<Interrupt>, PlatformError> {
    let first = usable[0];
    let irq = first.maintenance()?;
    for gicc in &usable[1..] {
        let other = gicc.maintenance()?;
        if other != irq {
            let show = |irq: Option<Interrupt>| match irq {
                None => String::from("none (GSIV 0)"),
                Some(irq) => format!(
                    "GSIV {} ({})",
                    irq.intid(),
                    if matches!(
                        irq,
                        Interrupt::Ppi {
                            flags: EDGE_RISING,
                            ..
                        }
                    ) {
                        "edge"
                    } else {
                        "level"
                    }
                ),
            };
            return Err(gicc.fields.bad(
                "VGIC Maintenance interrupt",
                format!(
                    "{} differs from {}'s {}: it is a PPI, the same on every CPU",
                    show(other),
                    first.fields.prefix(),
                    show(irq)
                ),
            ));
        }
    }
    Ok(irq)
}

/// A GICR structure's discovery range.
fn redistributor(fields: &Fields<'_>) -> Result<(String, RedistributorRegion), PlatformError> {
    fields.require(gicr::LEN, "Discovery Range Length")?;
    let base = fields.u64(gicr::BASE, "Discovery Range Base Address")?;
    let length = fields.u32(gicr::LENGTH, "Discovery Range Length")?;
    if length == 0 {
        return Err(fields.bad("Discovery Range Length", "0: an empty discovery range"));
    }
    let range = checked_range(
        fields,
        "Discovery Range Base Address",
        base,
        u64::from(length),
    )?;
    Ok((
        fields.name("Discovery Range Base Address"),
        RedistributorRegion {
            range,
            stride: None,
        },
    ))
}

/// Without GICR structures every usable GICC's `GICR Base Address` names
/// its redistributor: a region of exactly one frame. The frame size is
/// the version's (a GICv4 redistributor has four 64 KiB frames); with the
/// version unspecified it is the GICv3 size, which holds the RD_base and
/// SGI_base frames every GICv3 and GICv4 redistributor starts with, and
/// which is all the hypervisor touches. The stride never matters: the
/// region ends after one frame.
fn per_cpu_redistributors(
    usable: &[&Gicc<'_>],
    version: Version,
) -> Result<Vec<(String, RedistributorRegion)>, PlatformError> {
    let frame = match version {
        // A GICv4 redistributor adds VLPI_base and a reserved frame.
        Version::V4 => REDISTRIBUTOR_SIZE_VLPIS,
        Version::V3 | Version::Unspecified => REDISTRIBUTOR_SIZE,
    };
    usable
        .iter()
        .map(|gicc| {
            let field = "GICR Base Address";
            if gicc.gicr_base == 0 {
                return Err(gicc.fields.bad(
                    field,
                    "0, and the MADT has no GICR structure to describe the \
                     redistributors instead",
                ));
            }
            let range = checked_range(&gicc.fields, field, gicc.gicr_base, frame)?;
            Ok((
                gicc.fields.name(field),
                RedistributorRegion {
                    range,
                    stride: None,
                },
            ))
        })
        .collect()
}

/// Redistributor regions must not share bytes: the hypervisor walks each
/// frame by frame, and two CPUs cannot share a redistributor.
fn check_disjoint(
    kind: Kind,
    regions: &[(String, RedistributorRegion)],
) -> Result<(), PlatformError> {
    let mut sorted: Vec<&(String, RedistributorRegion)> = regions.iter().collect();
    sorted.sort_by_key(|(_, region)| region.range.base);
    for pair in sorted.windows(2) {
        if let [(first_name, first), (second_name, second)] = pair
            && first.range.overlaps(&second.range)
        {
            return Err(super::table::bad(
                kind,
                second_name.clone(),
                format!(
                    "redistributors at {:#x}..{:#x} overlap those of {first_name} at {:#x}..{:#x}",
                    second.range.base,
                    second.range.end(),
                    first.range.base,
                    first.range.end()
                ),
            ));
        }
    }
    Ok(())
}
