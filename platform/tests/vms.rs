//! The `pvlock,vm` binding (docs/vm-binding.md): VM nodes under `/chosen`
//! of a hand-built virt-like tree (see `common::virt`, 2 CPUs). Each bad
//! VM must yield its own error naming the node and property, and never
//! affect the other VMs or the platform.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};

use common::{Node, cells, string, strings, virt};
use platform::vm::{
    DEFAULT_BOOST, DEFAULT_CONTROL, DEFAULT_CPU_WEIGHT, DEFAULT_KVM_PTP, DEFAULT_PV_LOCK,
    DEFAULT_PV_TIME, DEFAULT_TIME_SLICE_US, DEFAULT_WFE_TRAP, DEFAULT_WFI_TRAP, MAX_VCPUS,
    VM_COMPATIBLE, pv_lock_name,
};
use platform::{ErrorKind, MemRange, Platform, PlatformError, TrapPolicy, VmConfig};
use pvlock_abi::pvlock::Variant;

const MIB: u64 = 1 << 20;

/// `<u64 u64>` as four cells.
fn pair(address: u64, size: u64) -> Vec<u8> {
    [address, size]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect()
}

/// A VM node with only the required properties.
fn vm(unit: u32) -> Node {
    Node::new(&format!("vm@{unit}"))
        .prop("compatible", string(VM_COMPATIBLE))
        .prop("vcpus", cells(&[2]))
        .prop("memory", (256 * MIB).to_be_bytes().to_vec())
        .prop(
            "kernel",
            pair(0x4800_0000 + u64::from(unit) * 0x100_0000, 0x80_0000),
        )
}

/// The virt-like tree with `vms` under `/chosen`.
fn tree_with(vms: Vec<Node>) -> Node {
    let mut root = virt();
    let chosen = root.at("/chosen");
    chosen.children.extend(vms);
    root
}

fn parse_vms(vms: Vec<Node>) -> Vec<Result<VmConfig, PlatformError>> {
    Platform::parse(&tree_with(vms).to_dtb(&[]))
        .expect("a bad VM must never make the platform fail")
        .vms
}

/// The single VM's error.
fn vm_error(node: Node) -> PlatformError {
    let mut vms = parse_vms(vec![node]);
    assert_eq!(vms.len(), 1);
    match vms.remove(0) {
        Ok(config) => panic!("expected an error, parsed {config:#?}"),
        Err(e) => e,
    }
}

/// The single VM's error, which must be a bad value of `property` on
/// `/chosen/vm@0`; returns the reason.
fn bad_value(node: Node, property: &str) -> String {
    let err = vm_error(node);
    assert_eq!(err.node, "/chosen/vm@0", "{err}");
    assert_eq!(err.property.as_deref(), Some(property), "{err}");
    match err.kind {
        ErrorKind::BadValue(why) => why,
        other => panic!("expected BadValue, got {other:?}"),
    }
}

fn missing(node: Node, property: &str) {
    let err = vm_error(node);
    assert_eq!(err.node, "/chosen/vm@0", "{err}");
    assert_eq!(err.property.as_deref(), Some(property), "{err}");
    assert_eq!(err.kind, ErrorKind::MissingProperty, "{err}");
}

// ---- good VMs -------------------------------------------------------------

#[test]
fn a_vm_with_every_property() {
    let node = vm(0)
        .prop("label", string("linux-a"))
        .prop("vcpus", cells(&[MAX_VCPUS]))
        .prop("memory", (0x1_0000_0000u64).to_be_bytes().to_vec())
        .prop("kernel", pair(0x1_2000_0000, 0x1_8000_0001))
        .prop("initrd", pair(0x4400_0000, 0x12_3456))
        .prop("bootargs", string("console=ttyAMA0 earlycon"))
        .prop("cpu-affinity", cells(&[1, 0]))
        .prop("pv-lock", string("openeuler"))
        .prop("pv-time", string("off"))
        .prop("kvm-ptp", string("on"))
        .prop("wfe-trap", string("trap"))
        .prop(
            "wfe-trap-vcpus",
            strings(&["3:notrap", "0:auto", "63:trap"]),
        )
        .prop("wfi-trap", string("notrap"))
        .prop("control", string("on"))
        .prop("boost", string("off"));
    let vms = parse_vms(vec![node]);
    let mut expected = VmConfig::new(
        "/chosen/vm@0",
        "linux-a",
        64,
        0x1_0000_0000,
        MemRange::new(0x1_2000_0000, 0x1_8000_0001),
    );
    expected.initrd = Some(MemRange::new(0x4400_0000, 0x12_3456));
    expected.bootargs = String::from("console=ttyAMA0 earlycon");
    expected.cpu_affinity = Some(vec![1, 0]);
    expected.pv_lock = Some(Variant::OpenEuler);
    expected.pv_time = false;
    expected.kvm_ptp = true;
    expected.wfe_trap = TrapPolicy::Trap;
    expected.wfe_trap_vcpus = vec![
        (3, TrapPolicy::NoTrap),
        (0, TrapPolicy::Auto),
        (63, TrapPolicy::Trap),
    ];
    expected.wfi_trap = false;
    expected.control = true;
    expected.boost = false;
    assert_eq!(vms, [Ok(expected.clone())]);
    assert_eq!(expected.wfe_trap_of(3), TrapPolicy::NoTrap);
    assert_eq!(expected.wfe_trap_of(0), TrapPolicy::Auto);
    assert_eq!(expected.wfe_trap_of(1), TrapPolicy::Trap, "the VM's policy");
    assert_eq!(expected.wfe_trap_of(63), TrapPolicy::Trap);
}

#[test]
fn optional_properties_default() {
    let vms = parse_vms(vec![vm(0)]);
    let config = vms[0].as_ref().unwrap();
    assert_eq!(config.node, "/chosen/vm@0");
    assert_eq!(config.name, "vm0", "the node name without its @");
    assert_eq!(config.vcpus, 2);
    assert_eq!(config.memory_size, 256 * MIB);
    assert_eq!(config.kernel, MemRange::new(0x4800_0000, 0x80_0000));
    assert_eq!(config.initrd, None);
    assert_eq!(config.bootargs, "");
    assert_eq!(config.cpu_affinity, None);
    assert_eq!(config.pv_lock, Some(Variant::SeedV2));
    assert!(config.pv_time);
    assert!(!config.kvm_ptp);
    assert_eq!(config.wfe_trap, TrapPolicy::Auto);
    assert!(config.wfe_trap_vcpus.is_empty());
    assert!(config.wfi_trap);
    assert!(!config.control);
    assert!(config.boost, "boost is on by default");
    assert_eq!(config.cpu_weight, DEFAULT_CPU_WEIGHT);
    assert_eq!(DEFAULT_CPU_WEIGHT, 100, "cgroup v2's cpu.weight default");
    assert_eq!(config.time_slice_us, DEFAULT_TIME_SLICE_US);
    assert_eq!(DEFAULT_TIME_SLICE_US, 4_000, "the hypervisor's 4 ms slice");
    assert_eq!(config.wfe_trap_of(1), TrapPolicy::Auto);
    // VmConfig::new gives the same defaults as the parser.
    let new = VmConfig::new("/chosen/vm@0", "vm0", 2, 256 * MIB, config.kernel);
    assert_eq!(config, &new);
    assert_eq!(
        (DEFAULT_PV_LOCK, DEFAULT_PV_TIME, DEFAULT_KVM_PTP),
        (Some(Variant::SeedV2), true, false)
    );
    assert_eq!(
        (
            DEFAULT_WFE_TRAP,
            DEFAULT_WFI_TRAP,
            DEFAULT_CONTROL,
            DEFAULT_BOOST
        ),
        (TrapPolicy::Auto, true, false, true)
    );
}

#[test]
fn trap_policies_by_name_and_code() {
    // The binding's spellings are KVM's wfe_trap_policy words (plus auto).
    let names: Vec<&str> = TrapPolicy::ALL.iter().map(|p| p.name()).collect();
    assert_eq!(names, ["auto", "trap", "notrap"]);
    assert_eq!(TrapPolicy::default(), TrapPolicy::Auto);
    for (code, policy) in TrapPolicy::ALL.into_iter().enumerate() {
        assert_eq!(TrapPolicy::parse(policy.name()), Some(policy));
        assert_eq!(policy.to_string(), policy.name());
        // PVLOCK_SET_WFX_POLICY's X3 codes: 0 auto, 1 trap, 2 notrap.
        assert_eq!(policy.abi_code(), code as u64);
        assert_eq!(TrapPolicy::from_abi(code as u64), Some(policy));
    }
    assert_eq!(TrapPolicy::from_abi(3), None);
    assert_eq!(TrapPolicy::from_abi(1 << 32 | 1), None, "all 64 bits count");
    assert_eq!(TrapPolicy::from_abi(u64::MAX), None);
    for bad in ["", "Trap", "no-trap", "notrap ", "on"] {
        assert_eq!(TrapPolicy::parse(bad), None, "{bad:?}");
    }
    use pvlock_abi::control::{WFE_AUTO, WFE_NOTRAP, WFE_TRAP};
    assert_eq!(
        [WFE_AUTO, WFE_TRAP, WFE_NOTRAP],
        TrapPolicy::ALL.map(TrapPolicy::abi_code)
    );
}

#[test]
fn every_wfe_trap_policy() {
    for policy in TrapPolicy::ALL {
        let vms = parse_vms(vec![vm(0).prop("wfe-trap", string(policy.name()))]);
        let config = vms[0].as_ref().unwrap();
        assert_eq!(config.wfe_trap, policy);
        assert_eq!(
            (config.wfe_trap_of(0), config.wfe_trap_of(1)),
            (policy, policy)
        );
    }
}

#[test]
fn wfe_trap_vcpus_override_the_vm_policy() {
    let node = vm(0)
        .prop("vcpus", cells(&[4]))
        .prop("wfe-trap", string("notrap"))
        .prop("wfe-trap-vcpus", strings(&["2:trap", "0:auto"]));
    let vms = parse_vms(vec![node]);
    let config = vms[0].as_ref().unwrap();
    assert_eq!(
        config.wfe_trap_vcpus,
        [(2, TrapPolicy::Trap), (0, TrapPolicy::Auto)],
        "DT order kept"
    );
    let each: Vec<TrapPolicy> = (0..4).map(|v| config.wfe_trap_of(v)).collect();
    assert_eq!(
        each,
        [
            TrapPolicy::Auto,
            TrapPolicy::NoTrap,
            TrapPolicy::Trap,
            TrapPolicy::NoTrap
        ]
    );
    // One entry is a one-string list; leading zeros are still decimal.
    let node = vm(0).prop("wfe-trap-vcpus", string("01:trap"));
    let vms = parse_vms(vec![node]);
    assert_eq!(
        vms[0].as_ref().unwrap().wfe_trap_vcpus,
        [(1, TrapPolicy::Trap)]
    );
}

#[test]
fn wfi_trap_and_control() {
    for (word, trap) in [("trap", true), ("notrap", false)] {
        let vms = parse_vms(vec![vm(0).prop("wfi-trap", string(word))]);
        assert_eq!(vms[0].as_ref().unwrap().wfi_trap, trap, "{word}");
    }
    for (word, on) in [("on", true), ("off", false)] {
        let vms = parse_vms(vec![vm(0).prop("control", string(word))]);
        assert_eq!(vms[0].as_ref().unwrap().control, on, "{word}");
        let vms = parse_vms(vec![vm(0).prop("boost", string(word))]);
        assert_eq!(vms[0].as_ref().unwrap().boost, on, "{word}");
    }
}

#[test]
fn every_pv_lock_variant_and_none() {
    for variant in Variant::ALL {
        let node = vm(0).prop("pv-lock", string(variant.name()));
        let vms = parse_vms(vec![node]);
        assert_eq!(vms[0].as_ref().unwrap().pv_lock, Some(variant));
        assert_eq!(pv_lock_name(Some(variant)), variant.name());
    }
    let vms = parse_vms(vec![vm(0).prop("pv-lock", string("none"))]);
    assert_eq!(vms[0].as_ref().unwrap().pv_lock, None);
    assert_eq!(pv_lock_name(None), "none");
    // The names are exactly these (the binding documents them).
    let names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
    assert_eq!(names, ["seed-v2", "seed-v3", "openeuler", "anolis"]);
}

#[test]
fn pv_time_and_kvm_ptp_switches() {
    for (word, on) in [("on", true), ("off", false)] {
        let node = vm(0)
            .prop("pv-time", string(word))
            .prop("kvm-ptp", string(word));
        let vms = parse_vms(vec![node]);
        let config = vms[0].as_ref().unwrap();
        assert_eq!((config.pv_time, config.kvm_ptp), (on, on), "{word}");
    }
}

#[test]
fn kvm_ptp_goes_with_every_pv_lock_but_seed_v3() {
    for variant in [Variant::SeedV2, Variant::OpenEuler, Variant::Anolis] {
        let node = vm(0)
            .prop("pv-lock", string(variant.name()))
            .prop("kvm-ptp", string("on"));
        let vms = parse_vms(vec![node]);
        let config = vms[0].as_ref().unwrap();
        assert_eq!((config.pv_lock, config.kvm_ptp), (Some(variant), true));
    }
    let node = vm(0)
        .prop("pv-lock", string("none"))
        .prop("kvm-ptp", string("on"));
    assert!(parse_vms(vec![node])[0].as_ref().unwrap().kvm_ptp);
    // seed-v3 without PTP is fine.
    let node = vm(0)
        .prop("pv-lock", string("seed-v3"))
        .prop("kvm-ptp", string("off"));
    let vms = parse_vms(vec![node]);
    assert_eq!(vms[0].as_ref().unwrap().pv_lock, Some(Variant::SeedV3));
}

#[test]
fn kvm_ptp_with_seed_v3_blames_kvm_ptp() {
    assert!(Variant::SeedV3.clashes_with_kvm_ptp());
    let node = vm(0)
        .prop("pv-lock", string("seed-v3"))
        .prop("kvm-ptp", string("on"));
    let err = vm_error(node);
    assert_eq!(
        err.to_string(),
        "device tree node /chosen/vm@0, property \"kvm-ptp\": bad value: \"on\" conflicts \
         with pv-lock = \"seed-v3\": both use function id 0x86000001; set kvm-ptp = \"off\" \
         or choose another pv-lock"
    );
    assert_eq!(
        pvlock_abi::kvm::PTP,
        pvlock_abi::pvlock::seed_v3::PV_LOCK,
        "the reason for the rule"
    );
}

#[test]
fn default_name_of_a_node_without_unit_address() {
    let mut node = vm(0);
    node.name = String::from("guest");
    let vms = parse_vms(vec![node]);
    assert_eq!(vms[0].as_ref().unwrap().name, "guest");
}

#[test]
fn smallest_and_largest_values() {
    let node = vm(0)
        .prop("vcpus", cells(&[1]))
        .prop("memory", (2 * MIB).to_be_bytes().to_vec())
        .prop("kernel", pair(0, 1))
        .prop("label", string("abcdefghijklmnop"));
    let vms = parse_vms(vec![node]);
    let config = vms[0].as_ref().unwrap();
    assert_eq!((config.vcpus, config.memory_size), (1, 2 * MIB));
    assert_eq!(config.kernel, MemRange::new(0, 1));
    assert_eq!(config.name.len(), 16);

    // A module may end at the last representable address.
    let node = vm(0).prop("kernel", pair(u64::MAX - 0x1000, 0x1000));
    assert!(parse_vms(vec![node])[0].is_ok());
}

#[test]
fn unknown_properties_and_other_chosen_children_are_ignored() {
    let node = vm(0)
        .prop("pvlock,abi", string("v2"))
        .prop("pvlock,future-option", vec![]);
    let other = Node::new("module@0")
        .prop("compatible", strings(&["multiboot,module"]))
        .prop("reg", cells(&[0, 0x4400_0000, 0, 0x1000]));
    let vms = parse_vms(vec![other, node]);
    assert_eq!(vms.len(), 1);
    assert!(vms[0].is_ok(), "{:?}", vms[0]);
}

#[test]
fn a_compatible_list_naming_the_binding_anywhere_is_a_vm() {
    let node = vm(0).prop("compatible", strings(&["acme,vm", VM_COMPATIBLE]));
    assert!(parse_vms(vec![node])[0].is_ok());
}

#[test]
fn disabled_vms_are_left_out() {
    let off = vm(1).prop("status", string("disabled"));
    let vms = parse_vms(vec![vm(0), off, vm(2)]);
    let names: Vec<&str> = vms
        .iter()
        .map(|v| v.as_ref().unwrap().name.as_str())
        .collect();
    assert_eq!(names, ["vm0", "vm2"]);
}

#[test]
fn no_vms_without_chosen_or_vm_nodes() {
    let mut root = virt();
    root.remove_node("/chosen");
    assert!(Platform::parse(&root.to_dtb(&[])).unwrap().vms.is_empty());
    assert!(parse_vms(vec![]).is_empty());
    for fixture in common::QEMU_FIXTURES.iter().chain(common::BOARD_FIXTURES) {
        if let Ok(p) = Platform::parse(&common::fixture(fixture)) {
            assert!(p.vms.is_empty(), "{fixture}");
        }
    }
}

// ---- one error per rule, naming node and property --------------------------

#[test]
fn vcpus_must_be_1_to_64() {
    assert!(bad_value(vm(0).prop("vcpus", cells(&[0])), "vcpus").contains("expected 1 to 64"));
    let why = bad_value(vm(0).prop("vcpus", cells(&[65])), "vcpus");
    assert!(why.starts_with("65"), "{why}");
    bad_value(vm(0).prop("vcpus", cells(&[u32::MAX])), "vcpus");
}

#[test]
fn cpu_weight_is_1_to_10000() {
    for weight in [1, 100, 250, 10_000] {
        let vms = parse_vms(vec![vm(0).prop("cpu-weight", cells(&[weight]))]);
        assert_eq!(vms[0].as_ref().unwrap().cpu_weight, weight);
    }
    for weight in [0, 10_001, u32::MAX] {
        let why = bad_value(vm(0).prop("cpu-weight", cells(&[weight])), "cpu-weight");
        assert_eq!(why, format!("{weight}, expected 1 to 10000"));
    }
    let why = bad_value(vm(0).prop("cpu-weight", cells(&[1, 2])), "cpu-weight");
    assert_eq!(why, "expected 4 bytes, found 8");
    bad_value(vm(0).prop("cpu-weight", string("100")), "cpu-weight");
    let error = vm_error(vm(3).prop("cpu-weight", cells(&[0])));
    assert_eq!(
        error.to_string(),
        "device tree node /chosen/vm@3, property \"cpu-weight\": bad value: 0, expected 1 to 10000"
    );
}

#[test]
fn time_slice_is_250_us_to_100_ms() {
    for us in [250, 1_000, 4_000, 100_000] {
        let vms = parse_vms(vec![vm(0).prop("time-slice-us", cells(&[us]))]);
        assert_eq!(vms[0].as_ref().unwrap().time_slice_us, us);
    }
    for us in [0, 249, 100_001, u32::MAX] {
        let why = bad_value(vm(0).prop("time-slice-us", cells(&[us])), "time-slice-us");
        assert_eq!(why, format!("{us}, expected 250 to 100000"));
    }
    let why = bad_value(vm(0).prop("time-slice-us", cells(&[1, 2])), "time-slice-us");
    assert_eq!(why, "expected 4 bytes, found 8");
    bad_value(vm(0).prop("time-slice-us", string("1000")), "time-slice-us");
    let error = vm_error(vm(2).prop("time-slice-us", cells(&[100])));
    assert_eq!(
        error.to_string(),
        "device tree node /chosen/vm@2, property \"time-slice-us\": bad value: 100, expected 250 to 100000"
    );
}

#[test]
fn vcpus_must_be_one_cell() {
    let why = bad_value(vm(0).prop("vcpus", cells(&[0, 2])), "vcpus");
    assert_eq!(why, "expected 4 bytes, found 8");
    bad_value(vm(0).prop("vcpus", vec![]), "vcpus");
}

#[test]
fn vcpus_is_required() {
    let mut node = vm(0);
    node.remove("vcpus");
    missing(node, "vcpus");
}

#[test]
fn memory_must_be_a_non_zero_multiple_of_2_mib() {
    for bad in [0, MIB, 2 * MIB + 4096, 3 * MIB] {
        let why = bad_value(vm(0).prop("memory", bad.to_be_bytes().to_vec()), "memory");
        assert!(why.contains("multiple of 2 MiB"), "{why}");
    }
}

#[test]
fn memory_must_be_two_cells() {
    let why = bad_value(vm(0).prop("memory", cells(&[0x1000_0000])), "memory");
    assert_eq!(why, "expected 8 bytes, found 4");
    bad_value(vm(0).prop("memory", cells(&[0, 0, 0x1000_0000])), "memory");
}

#[test]
fn memory_is_required() {
    let mut node = vm(0);
    node.remove("memory");
    missing(node, "memory");
}

#[test]
fn kernel_is_required() {
    let mut node = vm(0);
    node.remove("kernel");
    missing(node, "kernel");
}

#[test]
fn modules_must_be_four_cells() {
    for property in ["kernel", "initrd"] {
        let why = bad_value(
            vm(0).prop(property, cells(&[0x4800_0000, 0x1000])),
            property,
        );
        assert!(why.starts_with("2 cells, expected 4"), "{why}");
        bad_value(vm(0).prop(property, cells(&[0, 1, 0, 2, 0])), property);
        let why = bad_value(vm(0).prop(property, vec![0; 15]), property);
        assert!(why.contains("not a multiple of 4"), "{why}");
    }
}

#[test]
fn modules_must_be_non_empty_and_not_wrap() {
    for property in ["kernel", "initrd"] {
        assert_eq!(
            bad_value(vm(0).prop(property, pair(0x4800_0000, 0)), property),
            "size is 0"
        );
        let why = bad_value(
            vm(0).prop(property, pair(u64::MAX - 0xfff, 0x1001)),
            property,
        );
        assert!(why.contains("past the end of the address space"), "{why}");
    }
}

#[test]
fn names_must_be_short_printable_ascii() {
    for bad in [
        "",
        "abcdefghijklmnopq",
        "two words",
        "tab\there",
        "caf\u{e9}",
    ] {
        let why = bad_value(vm(0).prop("label", string(bad)), "label");
        assert!(why.starts_with(&format!("\"{bad}\"")), "{bad:?}: {why}");
    }
    // Not a string at all.
    let why = bad_value(vm(0).prop("label", b"vm".to_vec()), "label");
    assert_eq!(why, "string not NUL-terminated");
}

#[test]
fn a_default_name_must_follow_the_same_rules() {
    let mut node = vm(0);
    node.name = String::from("a-rather-long-vm-name@0");
    let err = vm_error(node);
    assert_eq!(err.node, "/chosen/a-rather-long-vm-name@0");
    assert_eq!(err.property.as_deref(), Some("label"));
    assert!(err.to_string().contains("absent, and the default"), "{err}");
}

#[test]
fn the_second_vm_with_a_name_is_the_error() {
    let first = vm(0).prop("label", string("web"));
    let second = vm(1).prop("label", string("web"));
    let third = vm(2);
    // An explicit name that equals another VM's default name collides too.
    let fourth = vm(3).prop("label", string("vm2"));
    let vms = parse_vms(vec![first, second, third, fourth]);
    assert_eq!(vms[0].as_ref().unwrap().name, "web");
    let err = vms[1].as_ref().unwrap_err();
    assert_eq!(err.node, "/chosen/vm@1");
    assert_eq!(err.property.as_deref(), Some("label"));
    assert_eq!(
        err.to_string(),
        "device tree node /chosen/vm@1, property \"label\": bad value: \
         \"web\" is also the name of /chosen/vm@0"
    );
    assert_eq!(vms[2].as_ref().unwrap().name, "vm2");
    assert_eq!(vms[3].as_ref().unwrap_err().node, "/chosen/vm@3");
}

#[test]
fn a_name_stays_claimed_by_a_vm_that_is_bad_otherwise() {
    let first = vm(0)
        .prop("label", string("web"))
        .prop("vcpus", cells(&[0]));
    let second = vm(1).prop("label", string("web"));
    let vms = parse_vms(vec![first, second]);
    assert_eq!(
        vms[0].as_ref().unwrap_err().property.as_deref(),
        Some("vcpus")
    );
    assert_eq!(
        vms[1].as_ref().unwrap_err().property.as_deref(),
        Some("label")
    );
}

#[test]
fn bootargs_must_be_a_string() {
    let why = bad_value(vm(0).prop("bootargs", b"quiet".to_vec()), "bootargs");
    assert_eq!(why, "string not NUL-terminated");
    bad_value(vm(0).prop("bootargs", b"\xff\0".to_vec()), "bootargs");
}

#[test]
fn cpu_affinity_must_be_u32_cells() {
    let why = bad_value(
        vm(0).prop("cpu-affinity", vec![0, 0, 0, 1, 0, 0]),
        "cpu-affinity",
    );
    assert!(why.contains("not a multiple of 4"), "{why}");
}

#[test]
fn cpu_affinity_must_name_existing_cpus_once() {
    // The virt-like tree has 2 CPUs: logical numbers 0 and 1.
    let why = bad_value(vm(0).prop("cpu-affinity", cells(&[0, 2])), "cpu-affinity");
    assert_eq!(
        why,
        "CPU 2 does not exist: the host has 2 CPUs, numbered from 0"
    );
    bad_value(
        vm(0).prop("cpu-affinity", cells(&[u32::MAX])),
        "cpu-affinity",
    );
    let why = bad_value(
        vm(0).prop("cpu-affinity", cells(&[1, 0, 1])),
        "cpu-affinity",
    );
    assert_eq!(why, "CPU 1 is listed twice");
    let why = bad_value(vm(0).prop("cpu-affinity", vec![]), "cpu-affinity");
    assert!(why.starts_with("empty"), "{why}");
}

#[test]
fn pv_lock_must_name_a_variant_or_none() {
    let expected = "expected \"seed-v2\", \"seed-v3\", \"openeuler\", \"anolis\" or \"none\"";
    for bad in ["", "seed", "Seed-v2", "seed-v2 ", "v2", "off"] {
        let why = bad_value(vm(0).prop("pv-lock", string(bad)), "pv-lock");
        assert_eq!(why, format!("\"{bad}\", {expected}"), "{bad:?}");
    }
    let why = bad_value(vm(0).prop("pv-lock", vec![]), "pv-lock");
    assert_eq!(why, format!("empty, {expected}"));
    let why = bad_value(
        vm(0).prop("pv-lock", strings(&["seed-v2", "anolis"])),
        "pv-lock",
    );
    assert_eq!(why, format!("not a single string, {expected}"));
    let why = bad_value(vm(0).prop("pv-lock", b"seed-v2".to_vec()), "pv-lock");
    assert_eq!(why, "string not NUL-terminated");
    // A number is not a string (its first byte is a NUL).
    let why = bad_value(vm(0).prop("pv-lock", cells(&[2])), "pv-lock");
    assert_eq!(why, format!("not a single string, {expected}"));
}

#[test]
fn switches_must_be_on_or_off() {
    for property in ["pv-time", "kvm-ptp", "control", "boost"] {
        for bad in ["yes", "ON", "1", "true", ""] {
            let why = bad_value(vm(0).prop(property, string(bad)), property);
            assert_eq!(why, format!("\"{bad}\", expected \"on\" or \"off\""));
        }
        let why = bad_value(vm(0).prop(property, vec![]), property);
        assert_eq!(why, "empty, expected \"on\" or \"off\"");
        let why = bad_value(vm(0).prop(property, strings(&["on", "off"])), property);
        assert_eq!(why, "not a single string, expected \"on\" or \"off\"");
        bad_value(vm(0).prop(property, cells(&[1])), property);
        bad_value(vm(0).prop(property, b"on\0\0".to_vec()), property);
    }
}

#[test]
fn wfe_trap_must_name_a_policy() {
    let expected = "expected \"auto\", \"trap\" or \"notrap\"";
    for bad in ["", "Trap", "no-trap", "on", "trap "] {
        let why = bad_value(vm(0).prop("wfe-trap", string(bad)), "wfe-trap");
        assert_eq!(why, format!("\"{bad}\", {expected}"), "{bad:?}");
    }
    let why = bad_value(vm(0).prop("wfe-trap", vec![]), "wfe-trap");
    assert_eq!(why, format!("empty, {expected}"));
    let why = bad_value(
        vm(0).prop("wfe-trap", strings(&["trap", "notrap"])),
        "wfe-trap",
    );
    assert_eq!(why, format!("not a single string, {expected}"));
    bad_value(vm(0).prop("wfe-trap", cells(&[1])), "wfe-trap");
}

#[test]
fn wfi_trap_must_be_trap_or_notrap() {
    let expected = "expected \"trap\" or \"notrap\"";
    for bad in ["auto", "on", "off", "TRAP", ""] {
        let why = bad_value(vm(0).prop("wfi-trap", string(bad)), "wfi-trap");
        assert_eq!(why, format!("\"{bad}\", {expected}"), "{bad:?}");
    }
    let why = bad_value(vm(0).prop("wfi-trap", vec![]), "wfi-trap");
    assert_eq!(why, format!("empty, {expected}"));
}

#[test]
fn wfe_trap_vcpus_entries_must_be_vcpu_colon_policy() {
    // vm(0) has 2 vCPUs.
    let bad = |entries: &[&str]| {
        bad_value(
            vm(0).prop("wfe-trap-vcpus", strings(entries)),
            "wfe-trap-vcpus",
        )
    };
    assert_eq!(
        bad(&["1"]),
        "\"1\" is not <vcpu>:<policy>, e.g. \"1:notrap\""
    );
    assert_eq!(
        bad(&["0:trap", "1=notrap"]),
        "\"1=notrap\" is not <vcpu>:<policy>, e.g. \"1:notrap\""
    );
    assert_eq!(bad(&[""]), "\"\" is not <vcpu>:<policy>, e.g. \"1:notrap\"");
    for index in ["", "-1", "+1", "x", "0x1", " 1", "1 "] {
        let entry = format!("{index}:trap");
        assert_eq!(
            bad(&[&entry]),
            format!("\"{entry}\": \"{index}\" is not a vCPU index (a decimal number)")
        );
    }
    assert_eq!(
        bad(&["1:never"]),
        "\"1:never\": policy \"never\", expected \"auto\", \"trap\" or \"notrap\""
    );
    assert_eq!(
        bad(&["1:trap:trap"]),
        "\"1:trap:trap\": policy \"trap:trap\", expected \"auto\", \"trap\" or \"notrap\""
    );
    assert_eq!(
        bad(&["1:"]),
        "\"1:\": policy \"\", expected \"auto\", \"trap\" or \"notrap\""
    );
}

#[test]
fn wfe_trap_vcpus_must_name_existing_vcpus_once() {
    let bad = |node: Node| bad_value(node, "wfe-trap-vcpus");
    assert_eq!(
        bad(vm(0).prop("wfe-trap-vcpus", strings(&["0:trap", "2:notrap"]))),
        "\"2:notrap\": vCPU 2 does not exist: the VM has 2 vCPUs, numbered from 0"
    );
    assert_eq!(
        bad(vm(0)
            .prop("vcpus", cells(&[MAX_VCPUS]))
            .prop("wfe-trap-vcpus", string("64:trap"))),
        "\"64:trap\": vCPU 64 does not exist: the VM has 64 vCPUs, numbered from 0"
    );
    // Too big for any integer: still "does not exist", not a panic.
    let huge = "99999999999999999999999:auto";
    assert_eq!(
        bad(vm(0).prop("wfe-trap-vcpus", string(huge))),
        format!(
            "\"{huge}\": vCPU 99999999999999999999999 does not exist: the VM has 2 vCPUs, \
             numbered from 0"
        )
    );
    assert_eq!(
        bad(vm(0).prop("wfe-trap-vcpus", strings(&["1:trap", "0:trap", "1:notrap"]))),
        "vCPU 1 is listed twice"
    );
    assert_eq!(
        bad(vm(0).prop("wfe-trap-vcpus", strings(&["1:trap", "01:trap"]))),
        "vCPU 1 is listed twice"
    );
    // Not a string list.
    let why = bad(vm(0).prop("wfe-trap-vcpus", vec![]));
    assert!(why.starts_with("empty"), "{why}");
    let why = bad(vm(0).prop("wfe-trap-vcpus", b"0:trap".to_vec()));
    assert_eq!(why, "string not NUL-terminated");
    bad(vm(0).prop("wfe-trap-vcpus", cells(&[0, 1])));
    bad(vm(0).prop("wfe-trap-vcpus", b"0:trap\0\xff:auto\0".to_vec()));
}

#[test]
fn errors_come_in_binding_order() {
    let node = vm(0)
        .prop("pv-lock", string("seed-v4"))
        .prop("kvm-ptp", string("on"));
    bad_value(node, "pv-lock");
    // Properties are checked in binding order: the older ones first.
    let node = vm(0)
        .prop("vcpus", cells(&[0]))
        .prop("pv-lock", string("seed-v4"));
    bad_value(node, "vcpus");
    // The trap properties come after the PV services, in table order.
    let node = vm(0)
        .prop("kvm-ptp", string("maybe"))
        .prop("wfe-trap", string("never"));
    bad_value(node, "kvm-ptp");
    let node = vm(0)
        .prop("wfe-trap", string("never"))
        .prop("wfe-trap-vcpus", string("9:trap"))
        .prop("wfi-trap", string("auto"))
        .prop("control", string("yes"));
    bad_value(node, "wfe-trap");
    let node = vm(0)
        .prop("wfe-trap-vcpus", string("9:trap"))
        .prop("wfi-trap", string("auto"))
        .prop("control", string("yes"));
    bad_value(node, "wfe-trap-vcpus");
    let node = vm(0)
        .prop("wfi-trap", string("auto"))
        .prop("control", string("yes"));
    bad_value(node, "wfi-trap");
}

// ---- isolation -------------------------------------------------------------

#[test]
fn vm_2_bad_vms_1_and_3_fine() {
    let bad = vm(1).prop("vcpus", cells(&[0]));
    let vms = parse_vms(vec![vm(0), bad, vm(2)]);
    assert_eq!(vms.len(), 3);
    assert_eq!(vms[0].as_ref().unwrap().name, "vm0");
    let err = vms[1].as_ref().unwrap_err();
    assert_eq!(err.node, "/chosen/vm@1");
    assert_eq!(err.property.as_deref(), Some("vcpus"));
    assert_eq!(
        err.to_string(),
        "device tree node /chosen/vm@1, property \"vcpus\": bad value: 0, expected 1 to 64"
    );
    assert_eq!(vms[2].as_ref().unwrap().name, "vm2");
}

#[test]
fn every_vm_bad_still_parses_the_platform() {
    let mut a = vm(0);
    a.remove("kernel");
    let b = vm(1).prop("memory", cells(&[1]));
    let vms = parse_vms(vec![a, b]);
    assert!(vms.iter().all(Result::is_err));
}

/// Corrupting any byte of the VM nodes' values or any structure byte must
/// give Ok or Err, never a panic.
#[test]
fn corrupted_vm_nodes_never_panic() {
    let full = vm(1)
        .prop("label", string("full"))
        .prop("initrd", pair(0x4400_0000, 0x1000))
        .prop("bootargs", string("quiet"))
        .prop("cpu-affinity", cells(&[1]))
        .prop("pv-lock", string("anolis"))
        .prop("pv-time", string("off"))
        .prop("kvm-ptp", string("on"))
        .prop("wfe-trap", string("notrap"))
        .prop("wfe-trap-vcpus", strings(&["0:trap", "1:auto"]))
        .prop("wfi-trap", string("notrap"))
        .prop("control", string("on"))
        .prop("boost", string("off"));
    let blob = tree_with(vec![vm(0), full, vm(2)]).to_dtb(&[]);
    let structure = {
        let word = |at: usize| u32::from_be_bytes(blob[at..at + 4].try_into().unwrap()) as usize;
        word(8)..word(8) + word(36)
    };
    for at in structure {
        for value in [0x00, 0x01, 0x03, 0x7f, 0x80, 0xff] {
            let mut mutated = blob.clone();
            mutated[at] = value;
            let outcome = catch_unwind(AssertUnwindSafe(|| Platform::parse(&mutated)));
            assert!(outcome.is_ok(), "panicked with byte {at:#x} = {value:#x}");
        }
    }
}
