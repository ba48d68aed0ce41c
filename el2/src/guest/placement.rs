//! Where each VM's RAM comes from in host memory.
//!
//! The loader (QEMU `-device loader`, U-Boot) has put each VM's kernel and
//! initrd ("modules") somewhere in host RAM and the VM node says where.
//! [`place`] checks those modules against the whole machine and gives
//! each VM one contiguous, 2 MiB aligned block of host RAM for its guest
//! RAM.
//!
//! Rules, per VM (the first that fails is the VM's error):
//! 1. each module lies inside host RAM (one bank, or banks that touch);
//! 2. it overlaps none of the hypervisor's own ranges (image, device tree
//!    blob, ...), no reserved region (`/memreserve/`, `/reserved-memory`),
//!    and no other module, its own VM's included. Two overlapping modules
//!    make both VMs bad: the loader wrote one over the other and which
//!    one is intact cannot be told. The exception is several VMs naming
//!    exactly the same range: one image booted as several VMs, shared;
//! 3. its `memory` fits in the host RAM still free.
//!
//! Free host RAM is host RAM minus the hypervisor's ranges, the reserved
//! regions and every module of every VM given (rejected ones included, so
//! that one VM's placement never depends on why another was rejected):
//! modules are copied into guest RAM when the VMs are loaded, so they must
//! stay intact until every VM is. VMs are served in the order given (DT
//! order), each from the highest free addresses, so that low RAM, which
//! firmware and boot loaders favour, is the last to go.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use platform::vm::{MEMORY_GRANULE, VmConfig, property};
use platform::{MemRange, ReservedRegion};

use super::layout::RAM_BASE;
use super::{Hex, VmError};

/// A range of host memory the hypervisor keeps for itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnedRange {
    /// The bytes.
    pub range: MemRange,
    /// What it is, for messages ("hypervisor image", "host device tree").
    pub what: &'static str,
}

/// The host memory picture placement works from.
#[derive(Clone, Copy, Debug)]
pub struct HostMemory<'a> {
    /// Host RAM banks (`Platform::memory`).
    pub ram: &'a [MemRange],
    /// Memory nobody may use (`Platform::reserved`).
    pub reserved: &'a [ReservedRegion],
    /// What the hypervisor owns: its image footprint, the boot device
    /// tree, and anything else it allocated from RAM before placement.
    pub hypervisor: &'a [OwnedRange],
}

/// Where one VM's RAM is in host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmPlacement {
    /// The host block backing guest RAM: 2 MiB aligned, `memory` bytes,
    /// mapped at IPA [`RAM_BASE`].
    pub ram: MemRange,
}

impl VmPlacement {
    /// The host physical address behind guest RAM address `ipa`, or
    /// `None` when `ipa` is not in guest RAM.
    pub fn host_pa(&self, ipa: u64) -> Option<u64> {
        let offset = ipa.checked_sub(RAM_BASE)?;
        (offset < self.ram.size).then(|| self.ram.base + offset)
    }
}

/// One module of one VM.
#[derive(Clone, Copy)]
struct Module {
    /// Index of its VM in the input.
    vm: usize,
    /// `kernel` or `initrd`.
    property: &'static str,
    range: MemRange,
}

/// Decides each VM's host RAM block; one result per entry of `vms`, in
/// the same order. See the module documentation for the rules.
pub fn place(host: &HostMemory<'_>, vms: &[&VmConfig]) -> Vec<Result<VmPlacement, VmError>> {
    let ram = merged(host.ram);
    let modules: Vec<Module> = vms
        .iter()
        .enumerate()
        .flat_map(|(vm, config)| {
            let kernel = Some((property::KERNEL, config.kernel));
            let initrd = config.initrd.map(|range| (property::INITRD, range));
            [kernel, initrd]
                .into_iter()
                .flatten()
                .map(move |(property, range)| Module {
                    vm,
                    property,
                    range,
                })
        })
        .collect();

    let mut free = ram.clone();
    let taken = host
        .hypervisor
        .iter()
        .map(|owned| owned.range)
        .chain(host.reserved.iter().map(|region| region.range))
        .chain(modules.iter().map(|module| module.range));
    for range in taken {
        free = subtract(&free, range);
    }

    vms.iter()
        .enumerate()
        .map(|(vm, config)| {
            for module in modules.iter().filter(|m| m.vm == vm) {
                check_module(host, &ram, &modules, vms, *module)?;
            }
            allocate(&mut free, config)
        })
        .collect()
}

/// Rules 1 and 2 for one module.
fn check_module(
    host: &HostMemory<'_>,
    ram: &[MemRange],
    modules: &[Module],
    vms: &[&VmConfig],
    module: Module,
) -> Result<(), VmError> {
    let node = vms
        .get(module.vm)
        .map_or("?", |config| config.node.as_str());
    let range = module.range;
    let error = |reason: String| VmError::new(node, module.property, reason);
    if range.size == 0 || range.base.checked_add(range.size).is_none() {
        return Err(error(format!(
            "{:#x} bytes at {:#x} is not a usable range",
            range.size, range.base
        )));
    }
    if !ram
        .iter()
        .any(|bank| bank.base <= range.base && range.end() <= bank.end())
    {
        let banks: Vec<String> = ram.iter().map(|bank| format!("{}", Hex(*bank))).collect();
        return Err(error(format!(
            "{} is not inside host RAM ({})",
            Hex(range),
            banks.join(", ")
        )));
    }
    if let Some(owned) = host.hypervisor.iter().find(|o| o.range.overlaps(&range)) {
        return Err(error(format!(
            "{} overlaps the {} at {}",
            Hex(range),
            owned.what,
            Hex(owned.range)
        )));
    }
    if let Some(region) = host.reserved.iter().find(|r| r.range.overlaps(&range)) {
        return Err(error(format!(
            "{} overlaps reserved memory \"{}\" at {}",
            Hex(range),
            region.name,
            Hex(region.range)
        )));
    }
    // The very same bytes named by several VMs (one kernel image booted
    // as several VMs) are one module, shared; a partial overlap means the
    // loader wrote one module over another.
    let other = modules.iter().find(|other| {
        (other.vm, other.property) != (module.vm, module.property)
            && other.range.overlaps(&range)
            && !(other.vm != module.vm && other.range == range)
    });
    if let Some(other) = other {
        let whose = if other.vm == module.vm {
            String::from("this VM's")
        } else {
            let other_node = vms.get(other.vm).map_or("?", |config| config.node.as_str());
            format!("{other_node}'s")
        };
        return Err(error(format!(
            "{} overlaps {whose} {} at {}: the loader wrote one over the other",
            Hex(range),
            other.property,
            Hex(other.range)
        )));
    }
    Ok(())
}

/// Rule 3: takes `config.memory_size` bytes, 2 MiB aligned, from the top
/// of the highest free extent that has room.
fn allocate(free: &mut Vec<MemRange>, config: &VmConfig) -> Result<VmPlacement, VmError> {
    let size = config.memory_size;
    if size == 0 || !size.is_multiple_of(MEMORY_GRANULE) {
        return Err(VmError::new(
            &config.node,
            property::MEMORY,
            format!("{size:#x} bytes is not a non-zero multiple of 2 MiB"),
        ));
    }
    // `free` is sorted by address; search from the top.
    let found = free.iter().enumerate().rev().find_map(|(at, extent)| {
        let top = align_down(extent.end());
        let base = top.checked_sub(size)?;
        (base >= extent.base).then_some((at, MemRange::new(base, size)))
    });
    let Some((at, block)) = found else {
        let largest = free
            .iter()
            .map(|extent| align_down(extent.end()).saturating_sub(align_up(extent.base)))
            .max()
            .unwrap_or(0);
        return Err(VmError::new(
            &config.node,
            property::MEMORY,
            format!(
                "no free {size:#x}-byte block of host RAM is left (2 MiB aligned, contiguous); \
                 the largest is {largest:#x} bytes"
            ),
        ));
    };
    if let Some(extent) = free.get(at).copied() {
        let rest = subtract(&[extent], block);
        free.splice(at..=at, rest);
    }
    Ok(VmPlacement { ram: block })
}

/// The banks sorted, with overlapping or touching banks merged, empty
/// ones dropped.
fn merged(banks: &[MemRange]) -> Vec<MemRange> {
    let mut sorted: Vec<MemRange> = banks.iter().copied().filter(|b| b.size != 0).collect();
    sorted.sort();
    let mut out: Vec<MemRange> = Vec::with_capacity(sorted.len());
    for bank in sorted {
        match out.last_mut() {
            Some(last) if bank.base <= last.end() => {
                let end = last.end().max(bank.end());
                last.size = end - last.base;
            }
            _ => out.push(bank),
        }
    }
    out
}

/// `extents` (sorted, disjoint) without the bytes of `hole`; stays sorted.
fn subtract(extents: &[MemRange], hole: MemRange) -> Vec<MemRange> {
    let mut out = Vec::with_capacity(extents.len() + 1);
    for &extent in extents {
        if hole.size == 0 || !extent.overlaps(&hole) {
            out.push(extent);
            continue;
        }
        if extent.base < hole.base {
            out.push(MemRange::new(extent.base, hole.base - extent.base));
        }
        if hole.end() < extent.end() {
            out.push(MemRange::new(hole.end(), extent.end() - hole.end()));
        }
    }
    out
}

const fn align_down(value: u64) -> u64 {
    value & !(MEMORY_GRANULE - 1)
}

const fn align_up(value: u64) -> u64 {
    match value.checked_add(MEMORY_GRANULE - 1) {
        Some(v) => align_down(v),
        None => align_down(u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// QEMU virt with 1 GiB at 0x4000_0000: the hypervisor at 0x4008_0000
    /// (32 MiB footprint), the DTB at the bottom of RAM.
    const HYPERVISOR: [OwnedRange; 2] = [
        OwnedRange {
            range: MemRange::new(0x4000_0000, 0x10_0000),
            what: "host device tree",
        },
        OwnedRange {
            range: MemRange::new(0x4020_0000, 32 * MIB),
            what: "hypervisor image",
        },
    ];
    const RAM: [MemRange; 1] = [MemRange::new(0x4000_0000, GIB)];

    fn host<'a>(ram: &'a [MemRange], reserved: &'a [ReservedRegion]) -> HostMemory<'a> {
        HostMemory {
            ram,
            reserved,
            hypervisor: &HYPERVISOR,
        }
    }

    fn vm(unit: u32, memory: u64, kernel: MemRange) -> VmConfig {
        VmConfig::new(
            &format!("/chosen/vm@{unit}"),
            &format!("vm{unit}"),
            1,
            memory,
            kernel,
        )
    }

    fn place_all(host: &HostMemory<'_>, vms: &[VmConfig]) -> Vec<Result<VmPlacement, VmError>> {
        let refs: Vec<&VmConfig> = vms.iter().collect();
        place(host, &refs)
    }

    fn error_of(result: &Result<VmPlacement, VmError>) -> &VmError {
        result.as_ref().expect_err("expected an error")
    }

    #[test]
    fn vms_get_ram_from_the_top_down() {
        let mut a = vm(0, 128 * MIB, MemRange::new(0x4400_0000, 0x80_0000));
        a.initrd = Some(MemRange::new(0x4480_0000, 0x40_0000));
        let b = vm(1, 64 * MIB, MemRange::new(0x4500_0000, 0x1000));
        let placed = place_all(&host(&RAM, &[]), &[a, b]);
        let a = placed[0].as_ref().unwrap();
        let b = placed[1].as_ref().unwrap();
        assert_eq!(a.ram, MemRange::new(0x8000_0000 - 128 * MIB, 128 * MIB));
        assert_eq!(b.ram, MemRange::new(a.ram.base - 64 * MIB, 64 * MIB));
        assert_eq!(a.host_pa(RAM_BASE), Some(a.ram.base));
        assert_eq!(a.host_pa(RAM_BASE + 128 * MIB - 1), Some(a.ram.end() - 1));
        assert_eq!(a.host_pa(RAM_BASE + 128 * MIB), None);
        assert_eq!(a.host_pa(RAM_BASE - 1), None);
    }

    #[test]
    fn ram_avoids_modules_reserved_memory_and_the_hypervisor() {
        // A module near the top of RAM splits it: the top 2 MiB block
        // holds it, so the VM goes below.
        let top_module = MemRange::new(0x7ff0_0000, 0x1000);
        let reserved = [ReservedRegion {
            range: MemRange::new(0x7000_0000, 0x100_0000),
            name: String::from("fw@70000000"),
        }];
        let placed = place_all(
            &host(&RAM, &reserved),
            &[
                vm(0, 200 * MIB, top_module),
                vm(1, 32 * MIB, MemRange::new(0x4400_0000, 0x1000)),
            ],
        );
        let first = placed[0].as_ref().unwrap().ram;
        let second = placed[1].as_ref().unwrap().ram;
        // [0x7100_0000, 0x7fe0_0000) is 238 MiB, enough for the first.
        assert_eq!(first, MemRange::new(0x7fe0_0000 - 200 * MIB, 200 * MIB));
        // 38 MiB are left above the reserved region: enough for 32 MiB.
        assert_eq!(second, MemRange::new(first.base - 32 * MIB, 32 * MIB));
        for block in [first, second] {
            assert_eq!(block.base % MEMORY_GRANULE, 0);
            assert!(!block.overlaps(&top_module));
            assert!(!block.overlaps(&reserved[0].range));
            assert!(HYPERVISOR.iter().all(|o| !o.range.overlaps(&block)));
        }
    }

    #[test]
    fn ram_can_come_from_any_bank_and_banks_that_touch_merge() {
        let banks = [
            MemRange::new(0x4000_0000, GIB),
            MemRange::new(0x8000_0000, GIB),
            MemRange::new(0x8_0000_0000, 512 * MIB),
        ];
        // 1.5 GiB only fits across the two touching banks.
        let placed = place_all(
            &host(&banks, &[]),
            &[
                vm(0, 256 * MIB, MemRange::new(0x4400_0000, 0x1000)),
                vm(1, 1536 * MIB, MemRange::new(0x4500_0000, 0x1000)),
            ],
        );
        assert_eq!(
            placed[0].as_ref().unwrap().ram,
            MemRange::new(0x8_0000_0000 + 256 * MIB, 256 * MIB)
        );
        assert_eq!(
            placed[1].as_ref().unwrap().ram,
            MemRange::new(0xc000_0000 - 1536 * MIB, 1536 * MIB)
        );
        // A module that spans the two touching banks is in RAM.
        let spanning = vm(0, 2 * MIB, MemRange::new(0x7fff_f000, 0x2000));
        assert!(place_all(&host(&banks, &[]), &[spanning])[0].is_ok());
    }

    #[test]
    fn too_much_memory_is_the_vm_s_error_and_the_next_vm_still_fits() {
        let placed = place_all(
            &host(&RAM, &[]),
            &[
                vm(0, 2 * GIB, MemRange::new(0x4400_0000, 0x1000)),
                vm(1, 512 * MIB, MemRange::new(0x4500_0000, 0x1000)),
                vm(2, 512 * MIB, MemRange::new(0x4600_0000, 0x1000)),
            ],
        );
        let err = error_of(&placed[0]);
        assert_eq!(
            (err.node.as_str(), err.property),
            ("/chosen/vm@0", Some("memory"))
        );
        assert!(placed[1].is_ok());
        // What is left: [0x4220_0000, 0x6000_0000) minus the modules.
        let err = error_of(&placed[2]);
        assert_eq!(err.property, Some("memory"));
        assert!(
            err.to_string().starts_with(
                "device tree node /chosen/vm@2, property \"memory\": no free 0x20000000-byte block"
            ),
            "{err}"
        );
    }

    #[test]
    fn modules_outside_ram() {
        for kernel in [
            MemRange::new(0x1000, 0x1000),
            MemRange::new(0x7fff_f000, 0x2000),
            MemRange::new(0x1_0000_0000, 0x1000),
        ] {
            let placed = place_all(&host(&RAM, &[]), &[vm(0, 2 * MIB, kernel)]);
            let err = error_of(&placed[0]);
            assert_eq!(err.property, Some("kernel"));
            assert!(
                err.reason
                    .contains("is not inside host RAM ([0x40000000, 0x80000000))"),
                "{err}"
            );
        }
        let mut config = vm(0, 2 * MIB, MemRange::new(0x4400_0000, 0x1000));
        config.initrd = Some(MemRange::new(0x3fff_f000, 0x2000));
        let placed = place_all(&host(&RAM, &[]), &[config]);
        assert_eq!(error_of(&placed[0]).property, Some("initrd"));
    }

    #[test]
    fn modules_over_the_hypervisor_or_reserved_memory() {
        let placed = place_all(
            &host(&RAM, &[]),
            &[vm(0, 2 * MIB, MemRange::new(0x4100_0000, 0x1000))],
        );
        let err = error_of(&placed[0]);
        assert_eq!(err.property, Some("kernel"));
        assert_eq!(
            err.reason,
            "[0x41000000, 0x41001000) overlaps the hypervisor image at [0x40200000, 0x42200000)"
        );
        let placed = place_all(
            &host(&RAM, &[]),
            &[vm(0, 2 * MIB, MemRange::new(0x400f_f000, 0x2000))],
        );
        assert!(error_of(&placed[0]).reason.contains("host device tree"));

        let reserved = [ReservedRegion {
            range: MemRange::new(0x5000_0000, 0x1000),
            name: String::from("/memreserve/"),
        }];
        let mut config = vm(0, 2 * MIB, MemRange::new(0x4400_0000, 0x1000));
        config.initrd = Some(MemRange::new(0x4fff_0000, 0x20000));
        let placed = place_all(&host(&RAM, &reserved), &[config]);
        let err = error_of(&placed[0]);
        assert_eq!(err.property, Some("initrd"));
        assert!(
            err.reason.contains("reserved memory \"/memreserve/\""),
            "{err}"
        );
    }

    #[test]
    fn overlapping_modules_make_both_vms_bad() {
        let a = vm(0, 2 * MIB, MemRange::new(0x4400_0000, 0x10_0000));
        let mut b = vm(1, 2 * MIB, MemRange::new(0x4600_0000, 0x1000));
        b.initrd = Some(MemRange::new(0x440f_f000, 0x1000));
        let c = vm(2, 2 * MIB, MemRange::new(0x4700_0000, 0x1000));
        let placed = place_all(&host(&RAM, &[]), &[a, b, c]);
        let err = error_of(&placed[0]);
        assert_eq!(err.property, Some("kernel"));
        assert!(err.reason.contains("/chosen/vm@1's initrd"), "{err}");
        let err = error_of(&placed[1]);
        assert_eq!(err.property, Some("initrd"));
        assert!(err.reason.contains("/chosen/vm@0's kernel"), "{err}");
        assert!(placed[2].is_ok());
    }

    #[test]
    fn vms_may_share_one_identical_module() {
        let kernel = MemRange::new(0x4400_0000, 0x10_0000);
        let a = vm(0, 2 * MIB, kernel);
        let b = vm(1, 2 * MIB, kernel);
        // Same base, different size: not the same module.
        let c = vm(2, 2 * MIB, MemRange::new(0x4400_0000, 0x8_0000));
        let placed = place_all(&host(&RAM, &[]), &[a.clone(), b.clone()]);
        assert!(placed.iter().all(Result::is_ok), "{placed:?}");
        let placed = place_all(&host(&RAM, &[]), &[a, b, c]);
        assert_eq!(error_of(&placed[2]).property, Some("kernel"));
    }

    #[test]
    fn a_vm_s_own_modules_must_not_overlap() {
        let mut a = vm(0, 2 * MIB, MemRange::new(0x4400_0000, 0x10_0000));
        a.initrd = Some(MemRange::new(0x4400_0000, 0x1000));
        let placed = place_all(&host(&RAM, &[]), &[a]);
        let err = error_of(&placed[0]);
        assert_eq!(err.property, Some("kernel"));
        assert!(err.reason.contains("this VM's initrd"), "{err}");
    }

    #[test]
    fn modules_of_rejected_vms_stay_untouched() {
        // VM 0 is too big, but its kernel near the top of RAM still keeps
        // VM 1 out of that spot.
        let placed = place_all(
            &host(&RAM, &[]),
            &[
                vm(0, 4 * GIB, MemRange::new(0x7fe0_0000, 0x1000)),
                vm(1, 2 * MIB, MemRange::new(0x4400_0000, 0x1000)),
            ],
        );
        assert!(placed[0].is_err());
        assert_eq!(
            placed[1].as_ref().unwrap().ram,
            MemRange::new(0x7fc0_0000, 2 * MIB)
        );
    }

    #[test]
    fn unaligned_banks_and_bad_sizes() {
        let banks = [MemRange::new(0x4010_0000, 5 * MIB)];
        let host = HostMemory {
            ram: &banks,
            reserved: &[],
            hypervisor: &[],
        };
        let placed = place_all(
            &host,
            &[
                vm(0, 2 * MIB, MemRange::new(0x4010_0000, 0x1000)),
                vm(1, 2 * MIB, MemRange::new(0x4010_1000, 0x1000)),
                vm(2, 3 * MIB, MemRange::new(0x4010_2000, 0x1000)),
                vm(3, 0, MemRange::new(0x4010_3000, 0x1000)),
            ],
        );
        // Only [0x4020_0000, 0x4060_0000) is 2 MiB aligned: two blocks.
        assert_eq!(placed[0].as_ref().unwrap().ram.base, 0x4040_0000);
        assert_eq!(placed[1].as_ref().unwrap().ram.base, 0x4020_0000);
        assert_eq!(error_of(&placed[2]).property, Some("memory"));
        assert_eq!(error_of(&placed[3]).property, Some("memory"));

        let placed = place_all(&host, &[vm(0, 2 * MIB, MemRange::new(0x4010_0000, 0))]);
        assert_eq!(error_of(&placed[0]).property, Some("kernel"));
    }

    #[test]
    fn no_vms_no_results() {
        assert!(place(&host(&RAM, &[]), &[]).is_empty());
        let no_ram = HostMemory {
            ram: &[],
            reserved: &[],
            hypervisor: &[],
        };
        let placed = place_all(&no_ram, &[vm(0, 2 * MIB, MemRange::new(0, 1))]);
        assert_eq!(error_of(&placed[0]).property, Some("kernel"));
    }

    #[test]
    fn subtract_and_merge() {
        let r = |b, s| MemRange::new(b, s);
        assert_eq!(subtract(&[r(0, 100)], r(10, 10)), vec![r(0, 10), r(20, 80)]);
        assert_eq!(subtract(&[r(0, 100)], r(0, 100)), vec![]);
        assert_eq!(
            subtract(&[r(0, 10), r(20, 10)], r(5, 20)),
            vec![r(0, 5), r(25, 5)]
        );
        assert_eq!(subtract(&[r(0, 10)], r(10, 5)), vec![r(0, 10)]);
        assert_eq!(
            merged(&[r(20, 10), r(0, 10), r(10, 5), r(40, 0)]),
            vec![r(0, 15), r(20, 10)]
        );
        assert_eq!(merged(&[r(0, 30), r(10, 5)]), vec![r(0, 30)]);
    }
}
