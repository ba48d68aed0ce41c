//! The hypervisor's own memory: where each part of the image lies and how
//! EL2's stage-1 translation maps it.
//!
//! EL2 runs identity-mapped (VA = PA). The map is built from the image's
//! section boundaries and the platform's device regions, and follows three
//! rules:
//! - W^X: text is read-only and executable, everything else is execute-never,
//!   and nothing is both writable and executable;
//! - each CPU's stacks sit above an unmapped guard page, so an overflow
//!   faults instead of corrupting the neighbour;
//! - anything not listed (guest memory, firmware, unknown devices) is not
//!   mapped at all.

use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;
use platform::{MemRange, Platform};

pub const PAGE_SIZE: u64 = 4096;

/// Rounds `value` down to a page boundary.
pub const fn page_floor(value: u64) -> u64 {
    value & !(PAGE_SIZE - 1)
}

/// Rounds `value` up to a page boundary, saturating near the top of the address space.
pub const fn page_ceil(value: u64) -> u64 {
    match value.checked_add(PAGE_SIZE - 1) {
        Some(v) => page_floor(v),
        None => page_floor(u64::MAX),
    }
}

/// The page-aligned range covering `range`.
pub const fn page_cover(range: MemRange) -> MemRange {
    let base = page_floor(range.base);
    MemRange::new(base, page_ceil(range.end()) - base)
}

/// Per-CPU stacks of one kind (thread or exception), each above its own
/// guard page: `boot`'s, which also defines them in the image.
pub use boot::stacks::StackArray;

/// `range` as a [`MemRange`].
fn span(range: Range<u64>) -> MemRange {
    MemRange::new(range.start, range.end - range.start)
}

/// Where the parts of the loaded image are, as the linker script arranges them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageLayout {
    /// The whole footprint the boot loader reserved (Image header image_size).
    pub image: MemRange,
    pub text: MemRange,
    /// Read-only data, including the GOT once relocated.
    pub rodata: MemRange,
    /// .data and .bss.
    pub data: MemRange,
    /// Stacks that ordinary hypervisor code runs on (SP_EL0).
    pub thread_stacks: StackArray,
    /// Stacks that exception entry switches to (SP_EL2).
    pub exception_stacks: StackArray,
    pub heap: MemRange,
}

/// Why a stage-1 mapping is there, which decides its attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapKind {
    /// Normal write-back memory, read-only, executable.
    Text,
    /// Normal write-back memory, read-only, execute-never.
    ReadOnly,
    /// Normal write-back memory, read-write, execute-never.
    ReadWrite,
    /// Device-nGnRE, read-write, execute-never.
    Device,
}

/// One region of the EL2 stage-1 map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapEntry {
    pub range: MemRange,
    pub kind: MapKind,
    pub what: &'static str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// Two regions of the plan overlap.
    Overlap(MapEntry, MapEntry),
    /// A region is empty or wraps around the address space.
    Empty(&'static str),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Overlap(a, b) => write!(
                f,
                "{} [{:#x}, {:#x}) overlaps {} [{:#x}, {:#x})",
                a.what,
                a.range.base,
                a.range.end(),
                b.what,
                b.range.base,
                b.range.end()
            ),
            Self::Empty(what) => write!(f, "{what} is empty or out of range"),
        }
    }
}

/// The EL2 stage-1 map: the image by section, the stacks of the first
/// `cpus` CPUs (guards left out), the boot description (device tree or
/// UEFI handoff block) read-only, and the devices the hypervisor drives
/// itself (console UART, GIC distributor and redistributors). Sorted by address; overlapping regions are an error.
pub fn el2_map_plan(
    image: &ImageLayout,
    platform: &Platform,
    dtb: MemRange,
    cpus: usize,
) -> Result<Vec<MapEntry>, LayoutError> {
    let mut plan = Vec::new();
    let mut add = |range: MemRange, kind: MapKind, what: &'static str| {
        if range.size == 0 || range.base.checked_add(range.size).is_none() {
            return Err(LayoutError::Empty(what));
        }
        plan.push(MapEntry {
            range: page_cover(range),
            kind,
            what,
        });
        Ok(())
    };
    add(image.text, MapKind::Text, "hypervisor text")?;
    add(image.rodata, MapKind::ReadOnly, "hypervisor rodata")?;
    add(image.data, MapKind::ReadWrite, "hypervisor data")?;
    for cpu in 0..cpus.min(image.thread_stacks.slots) {
        add(
            span(image.thread_stacks.stack(cpu)),
            MapKind::ReadWrite,
            "thread stack",
        )?;
    }
    for cpu in 0..cpus.min(image.exception_stacks.slots) {
        add(
            span(image.exception_stacks.stack(cpu)),
            MapKind::ReadWrite,
            "exception stack",
        )?;
    }
    add(image.heap, MapKind::ReadWrite, "hypervisor heap")?;
    add(
        dtb,
        MapKind::ReadOnly,
        "boot description (DT or UEFI handoff)",
    )?;
    if let Some(uart) = &platform.uart {
        add(uart.range, MapKind::Device, "console UART")?;
    }
    if let Some(rtc) = platform.rtc {
        add(rtc, MapKind::Device, "real-time clock")?;
    }
    add(platform.gic.distributor, MapKind::Device, "GIC distributor")?;
    for region in &platform.gic.redistributor_regions {
        add(region.range, MapKind::Device, "GIC redistributors")?;
    }
    plan.sort_by_key(|e| e.range.base);
    for pair in plan.windows(2) {
        if pair[0].range.overlaps(&pair[1].range) {
            return Err(LayoutError::Overlap(pair[0], pair[1]));
        }
    }
    Ok(plan)
}

/// The map used only to report a fatal error before the final map exists:
/// the image by section (both stack arrays whole, guards included), the
/// DTB read-only and the console UART. Not checked for overlaps: it is
/// built from what may be a broken description, and only has to print.
pub fn emergency_map_plan(image: &ImageLayout, dtb: MemRange, uart: MemRange) -> Vec<MapEntry> {
    let arrays = [image.thread_stacks, image.exception_stacks];
    let stacks_start = arrays.iter().map(|a| a.all().start).min().unwrap_or(0);
    let stacks_end = arrays.iter().map(|a| a.all().end).max().unwrap_or(0);
    let entry = |range: MemRange, kind, what| MapEntry {
        range: page_cover(range),
        kind,
        what,
    };
    alloc::vec![
        entry(image.text, MapKind::Text, "hypervisor text"),
        entry(image.rodata, MapKind::ReadOnly, "hypervisor rodata"),
        entry(image.data, MapKind::ReadWrite, "hypervisor data"),
        entry(
            MemRange::new(stacks_start, stacks_end - stacks_start),
            MapKind::ReadWrite,
            "stacks"
        ),
        entry(image.heap, MapKind::ReadWrite, "hypervisor heap"),
        entry(
            dtb,
            MapKind::ReadOnly,
            "boot description (DT or UEFI handoff)"
        ),
        entry(uart, MapKind::Device, "console UART"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;
    use alloc::vec;
    use platform::*;

    const MIB: u64 = 1 << 20;

    fn image_at(base: u64) -> ImageLayout {
        let stacks = |at: u64| StackArray {
            base: at,
            slots: 8,
            stack_size: 8 * PAGE_SIZE,
        };
        ImageLayout {
            image: MemRange::new(base, 16 * MIB),
            text: MemRange::new(base, 0x3_0000),
            rodata: MemRange::new(base + 0x3_0000, 0x1_0000),
            data: MemRange::new(base + 0x4_0000, 0x2_0000),
            thread_stacks: stacks(base + 0x10_0000),
            exception_stacks: stacks(base + 0x20_0000),
            heap: MemRange::new(base + 0x40_0000, 8 * MIB),
        }
    }

    fn virt_platform() -> Platform {
        Platform {
            model: String::from("linux,dummy-virt"),
            memory: vec![MemRange::new(0x4000_0000, 1 << 30)],
            reserved: vec![],
            cpus: vec![],
            gic: GicV3 {
                distributor: MemRange::new(0x0800_0000, 0x1_0000),
                redistributor_regions: vec![RedistributorRegion {
                    range: MemRange::new(0x080a_0000, 0xf6_0000),
                    stride: None,
                }],
                its: vec![],
                maintenance_irq: None,
            },
            uart: Some(Uart {
                kind: UartKind::Pl011,
                range: MemRange::new(0x0900_0000, 0x1000),
                irq: None,
                node: String::from("/pl011@9000000"),
            }),
            timer: ArchTimer {
                secure_phys: Interrupt::Ppi {
                    number: 13,
                    flags: 4,
                },
                nonsecure_phys: Interrupt::Ppi {
                    number: 14,
                    flags: 4,
                },
                virt: Interrupt::Ppi {
                    number: 11,
                    flags: 4,
                },
                hyp_phys: Interrupt::Ppi {
                    number: 10,
                    flags: 4,
                },
                hyp_virt: None,
                clock_frequency: None,
            },
            psci: Psci {
                conduit: Conduit::Smc,
                version: (1, 0),
            },
            bootargs: String::new(),
            rtc: None,
            vms: vec![],
        }
    }

    #[test]
    fn guard_pages_are_never_mapped() {
        let image = image_at(0x4008_0000);
        let plan = el2_map_plan(
            &image,
            &virt_platform(),
            MemRange::new(0x4800_0000, 0x10_0000),
            4,
        )
        .expect("plan");
        for stacks in [image.thread_stacks, image.exception_stacks] {
            for cpu in 0..stacks.slots {
                let guard = stacks.guard(cpu);
                assert!(
                    plan.iter().all(|e| !e.range.overlaps(&span(guard.clone()))),
                    "guard of cpu {cpu} is mapped"
                );
                assert_eq!(stacks.guard_owner(guard.start), Some(cpu));
                assert_eq!(stacks.guard_owner(guard.end - 1), Some(cpu));
                assert_eq!(stacks.guard_owner(stacks.stack(cpu).start), None);
            }
        }
        // Only the stacks of CPUs that exist are mapped.
        let stacks_mapped = plan.iter().filter(|e| e.what == "thread stack").count();
        assert_eq!(stacks_mapped, 4);
    }

    #[test]
    fn nothing_is_writable_and_executable() {
        let image = image_at(0x4008_0000);
        let plan = el2_map_plan(
            &image,
            &virt_platform(),
            MemRange::new(0x4800_0000, 0x1000),
            8,
        )
        .expect("plan");
        let text: Vec<_> = plan.iter().filter(|e| e.kind == MapKind::Text).collect();
        assert_eq!(text.len(), 1);
        assert_eq!(text[0].range, image.text);
        let devices: Vec<_> = plan.iter().filter(|e| e.kind == MapKind::Device).collect();
        assert_eq!(
            devices.len(),
            3,
            "uart, distributor, one redistributor region"
        );
        assert!(plan.windows(2).all(|p| p[0].range.end() <= p[1].range.base));
    }

    #[test]
    fn unaligned_regions_are_rounded_out_to_pages() {
        let mut platform = virt_platform();
        platform.uart.as_mut().unwrap().range = MemRange::new(0x0900_0010, 0x20);
        let plan = el2_map_plan(
            &image_at(0x4008_0000),
            &platform,
            MemRange::new(0x4800_0100, 0x2000),
            1,
        )
        .expect("plan");
        let uart = plan.iter().find(|e| e.what == "console UART").unwrap();
        assert_eq!(uart.range, MemRange::new(0x0900_0000, PAGE_SIZE));
        let dtb = plan
            .iter()
            .find(|e| e.what == "boot description (DT or UEFI handoff)")
            .unwrap();
        assert_eq!(dtb.range, MemRange::new(0x4800_0000, 3 * PAGE_SIZE));
    }

    #[test]
    fn a_dtb_inside_the_image_is_an_overlap() {
        let image = image_at(0x4008_0000);
        let err = el2_map_plan(
            &image,
            &virt_platform(),
            MemRange::new(image.heap.base, 0x1000),
            1,
        )
        .unwrap_err();
        assert!(matches!(err, LayoutError::Overlap(..)), "{err}");
    }

    #[test]
    fn emergency_map_covers_what_the_report_path_touches() {
        let image = image_at(0x4008_0000);
        let plan = emergency_map_plan(
            &image,
            MemRange::new(0x4800_0100, 0x2000),
            MemRange::new(0x0900_0000, 0x1000),
        );
        let covered = |addr: u64| plan.iter().any(|e| e.range.contains(addr));
        for stacks in [image.thread_stacks, image.exception_stacks] {
            assert!(covered(stacks.stack(0).start));
            assert!(covered(stacks.stack(stacks.slots - 1).end - 1));
        }
        assert!(covered(image.heap.end() - 1));
        assert!(covered(0x4800_0100) && covered(0x4800_20ff));
        let uart = plan.iter().find(|e| e.what == "console UART").unwrap();
        assert_eq!(uart.kind, MapKind::Device);
        assert_eq!(plan.iter().filter(|e| e.kind == MapKind::Text).count(), 1);
    }

    #[test]
    fn page_rounding_saturates() {
        assert_eq!(page_ceil(u64::MAX), page_floor(u64::MAX));
        assert_eq!(
            page_cover(MemRange::new(0x1fff, 2)),
            MemRange::new(0x1000, 0x2000)
        );
    }
}
