//! The boot device tree: [`Platform::parse`] with the VM descriptions
//! under `/chosen`, [`blob_size`] and [`rescue`], then what el2 does with
//! each VM it accepts: its services, its guest-physical layout and the
//! device tree it writes for the guest.
//!
//! Input: a flattened device tree blob. Bytes past the tree's `totalsize`
//! are ignored by the parser; the last [`ImageHeader::SIZE`] bytes of the
//! input, wherever they are, serve as the VMs' kernel Image header.
//!
//! Invariants checked, as `platform` and `el2::guest` document them:
//! - nothing panics, whatever the blob;
//! - an error names a node path (it starts with `/`);
//! - a blob that parses has a readable header, and parses the same when
//!   cut at its `totalsize`;
//! - memory banks are sorted by base; there is at least one CPU;
//! - each VM is either an error naming its `/chosen` node (`/chosen` may
//!   carry a unit address, which a lookup of `/chosen` ignores) and a
//!   property, or a configuration within the binding's rules: 1 to 64
//!   vCPUs, memory a non-zero multiple of 2 MiB, kernel and initrd
//!   non-empty and not wrapping, a name of 1 to 16 printable characters
//!   without spaces and unique among the VMs, a CPU affinity that is
//!   non-empty, names only existing CPUs and none twice, no KVM_PTP with a
//!   PV-lock variant that shares its id, per-vCPU WFE policies for
//!   existing vCPUs, each once;
//! - such a VM's services validate; if it can be laid out, its device
//!   tree sits in the top 2 MiB of its RAM with the PV area right below,
//!   and the tree el2 writes for it fits that slot.

use core::fmt::Write;

use platform::vm::{MAX_NAME_LEN, MAX_VCPUS, MEMORY_GRANULE};
use platform::{MemRange, Platform, PlatformError, VmConfig, blob_size, rescue};

use super::input::Discard;
use crate::guest::dt;
use crate::guest::layout::{DTB_MAX_SIZE, ImageHeader, plan};
use crate::services::smccc::VmServices;

/// Most VMs per input whose layout and device tree are built: each costs
/// far more than parsing it.
const MAX_VMS_BUILT: usize = 4;

/// Runs the device-tree harness on one input (see the module
/// documentation).
pub fn device_tree(data: &[u8]) {
    let size = blob_size(data);
    let _ = rescue(data);
    let parsed = Platform::parse(data);
    let platform = match parsed {
        Ok(ref platform) => platform,
        Err(ref error) => {
            check_error(error);
            return;
        }
    };
    // Parsing read a good header, and nothing past `totalsize`.
    let total = size.expect("a tree that parses has a readable header");
    let cut = data.get(..total).expect("totalsize within the blob");
    assert_eq!(
        Platform::parse(cut),
        parsed,
        "bytes past totalsize changed the tree"
    );

    assert!(
        platform.memory.windows(2).all(|w| w[0].base <= w[1].base),
        "memory banks not sorted: {:?}",
        platform.memory
    );
    assert!(!platform.cpus.is_empty(), "a platform without CPUs");
    let kernel_header = &data[data.len().saturating_sub(ImageHeader::SIZE)..];
    if let Some(header) = ImageHeader::parse(kernel_header) {
        let _ = write!(Discard, "{header:?}");
    }
    let mut built = 0;
    for (at, vm) in platform.vms.iter().enumerate() {
        match vm {
            Err(error) => {
                check_error(error);
                assert!(under_chosen(&error.node), "{error}");
                assert!(error.property.is_some(), "{error} names no property");
            }
            Ok(config) => {
                check_config(config, platform);
                assert!(
                    platform.vms[at + 1..]
                        .iter()
                        .flatten()
                        .all(|other| other.name != config.name),
                    "two VMs named {}",
                    config.name
                );
                if built < MAX_VMS_BUILT {
                    built += 1;
                    build(config, kernel_header);
                }
            }
        }
    }
}

pub(super) fn check_error(error: &PlatformError) {
    assert!(
        error.node.starts_with('/'),
        "an error naming no node: {error:?}"
    );
    let _ = write!(Discard, "{error}");
}

/// Whether `node` is a child of the node a lookup of `/chosen` finds:
/// `/chosen/...`, or `/chosen@<unit>/...`, since a path component without
/// a unit address matches a node name with one (`platform`'s lookups do;
/// the Devicetree Specification allows it when unambiguous).
pub(super) fn under_chosen(node: &str) -> bool {
    let Some(rest) = node.strip_prefix("/chosen") else {
        return false;
    };
    let rest = match rest.strip_prefix('@') {
        Some(unit) => unit.find('/').map_or("", |at| &unit[at..]),
        None => rest,
    };
    rest.len() > 1 && rest.starts_with('/')
}

/// A non-empty range that does not wrap.
fn module_ok(module: MemRange) -> bool {
    module.size > 0 && module.base.checked_add(module.size).is_some()
}

pub(super) fn check_config(config: &VmConfig, platform: &Platform) {
    let what = &config.node;
    assert!(under_chosen(&config.node), "{what}");
    assert!(
        (1..=MAX_VCPUS).contains(&config.vcpus),
        "{what}: {} vCPUs",
        config.vcpus
    );
    assert!(
        config.memory_size > 0 && config.memory_size.is_multiple_of(MEMORY_GRANULE),
        "{what}: memory {:#x}",
        config.memory_size
    );
    assert!(
        module_ok(config.kernel),
        "{what}: kernel {:?}",
        config.kernel
    );
    assert!(
        config.initrd.is_none_or(module_ok),
        "{what}: initrd {:?}",
        config.initrd
    );
    let name = config.name.as_bytes();
    assert!(
        (1..=MAX_NAME_LEN).contains(&name.len()) && name.iter().all(u8::is_ascii_graphic),
        "{what}: name {:?}",
        config.name
    );
    if let Some(cpus) = &config.cpu_affinity {
        assert!(!cpus.is_empty(), "{what}: empty affinity");
        for (at, cpu) in cpus.iter().enumerate() {
            assert!((*cpu as usize) < platform.cpus.len(), "{what}: CPU {cpu}");
            assert!(!cpus[..at].contains(cpu), "{what}: CPU {cpu} twice");
        }
    }
    if config.kvm_ptp {
        assert!(
            !config.pv_lock.is_some_and(|v| v.clashes_with_kvm_ptp()),
            "{what}: KVM_PTP with {:?}",
            config.pv_lock
        );
    }
    for (at, (vcpu, _)) in config.wfe_trap_vcpus.iter().enumerate() {
        assert!(*vcpu < config.vcpus, "{what}: WFE policy of vCPU {vcpu}");
        assert!(
            config.wfe_trap_vcpus[..at]
                .iter()
                .all(|(other, _)| other != vcpu),
            "{what}: vCPU {vcpu} listed twice"
        );
    }
    assert!(
        VmServices::from_config(config).pv.validate().is_ok(),
        "{what}: services that cannot coexist"
    );
}

/// What el2 does with an accepted VM before it runs it: lay it out and
/// write its device tree.
fn build(config: &VmConfig, kernel_header: &[u8]) {
    let layout = match plan(config, kernel_header) {
        Ok(layout) => layout,
        Err(error) => {
            let _ = write!(Discard, "{error}");
            return;
        }
    };
    assert_eq!(layout.dtb_slot().end(), layout.ram.end(), "{layout:?}");
    if let Some(area) = layout.pv_area {
        assert_eq!(area.end(), layout.dtb_ipa, "{layout:?}");
    }
    match dt::build(config, &layout, 0, true) {
        Ok(blob) => {
            assert!(
                blob.len() as u64 <= DTB_MAX_SIZE,
                "a {}-byte VM tree",
                blob.len()
            );
            let _ = Platform::parse(&blob);
        }
        Err(error) => {
            let _ = write!(Discard, "{error}");
        }
    }
}
