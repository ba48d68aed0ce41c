//! Error reporting and binding rules, on hand-built trees shaped like
//! QEMU's virt machine (see `common::virt`): each test edits one thing and
//! checks the node path, property and kind the error names.

mod common;

use common::{GIC_PHANDLE, Node, cells, string, strings, virt};
use platform::{
    Conduit, EnableMethod, ErrorKind, Interrupt, MemRange, Mpidr, Platform, PlatformError,
    blob_size,
};

fn parse(root: &Node) -> Result<Platform, PlatformError> {
    Platform::parse(&root.to_dtb(&[]))
}

fn parse_err(root: &Node) -> PlatformError {
    match parse(root) {
        Ok(p) => panic!("expected an error, parsed {p:#?}"),
        Err(e) => e,
    }
}

fn assert_error(err: &PlatformError, node: &str, property: Option<&str>) {
    assert_eq!(err.node, node, "{err}");
    assert_eq!(err.property.as_deref(), property, "{err}");
}

fn bad_value(err: &PlatformError) -> &str {
    match &err.kind {
        ErrorKind::BadValue(why) => why,
        other => panic!("expected BadValue, got {other:?} ({err})"),
    }
}

#[test]
fn the_virt_like_tree_parses() {
    let p = parse(&virt()).unwrap();
    assert_eq!(p.cpus.len(), 2);
    assert_eq!(p.gic.distributor, MemRange::new(0x0800_0000, 0x1_0000));
    assert_eq!(p.uart.unwrap().range.base, 0x0900_0000);
    assert_eq!(p.timer.hyp_phys.intid(), 26);
    assert_eq!(p.psci.version, (1, 0));
}

// ---- error messages -------------------------------------------------------

#[test]
fn gic_without_reg_names_the_node_and_property() {
    let mut root = virt();
    root.at("/intc@8000000").remove("reg");
    let err = parse_err(&root);
    assert_error(&err, "/intc@8000000", Some("reg"));
    assert_eq!(err.kind, ErrorKind::MissingProperty);
    assert_eq!(
        err.to_string(),
        "device tree node /intc@8000000, property \"reg\": property missing"
    );
}

#[test]
fn gic_reg_too_short_for_its_redistributor_regions() {
    let mut root = virt();
    root.at("/intc@8000000")
        .set("#redistributor-regions", cells(&[2]));
    let err = parse_err(&root);
    assert_error(&err, "/intc@8000000", Some("reg"));
    assert!(bad_value(&err).contains("2 redistributor regions"), "{err}");
}

#[test]
fn reg_with_a_partial_entry() {
    let mut root = virt();
    root.at("/intc@8000000")
        .set("reg", cells(&[0, 0x0800_0000, 0, 0x10000, 0, 0x080a_0000]));
    let err = parse_err(&root);
    assert_error(&err, "/intc@8000000", Some("reg"));
    bad_value(&err);
}

#[test]
fn gic_interrupt_cells_must_be_3_or_4() {
    let mut root = virt();
    root.at("/intc@8000000")
        .set("#interrupt-cells", cells(&[2]));
    let err = parse_err(&root);
    assert_error(&err, "/intc@8000000", Some("#interrupt-cells"));
}

#[test]
fn redistributor_stride_must_be_a_64k_multiple() {
    let mut root = virt();
    root.at("/intc@8000000")
        .set("redistributor-stride", cells(&[0, 0x1000]));
    let err = parse_err(&root);
    assert_error(&err, "/intc@8000000", Some("redistributor-stride"));

    let mut root = virt();
    root.at("/intc@8000000")
        .set("redistributor-stride", cells(&[0, 0x4_0000]));
    let p = parse(&root).unwrap();
    assert_eq!(p.gic.redistributor_regions[0].stride, Some(0x4_0000));
}

#[test]
fn missing_mandatory_nodes() {
    for (remove, named) in [
        ("/cpus", "/cpus"),
        ("/psci", "/psci"),
        ("/timer", "/timer"),
        ("/memory@40000000", "/memory"),
        ("/intc@8000000", "/interrupt-controller"),
    ] {
        let mut root = virt();
        root.remove_node(remove);
        let err = parse_err(&root);
        assert_eq!(err.kind, ErrorKind::MissingNode, "{remove}: {err}");
        assert_eq!(err.node, named, "{remove}");
    }
}

#[test]
fn cpus_with_only_a_cpu_map_has_no_cpus() {
    let mut root = virt();
    root.remove_node("/cpus/cpu@0");
    root.remove_node("/cpus/cpu@1");
    let err = parse_err(&root);
    assert_eq!(err.kind, ErrorKind::MissingNode);
    assert_eq!(err.node, "/cpus/cpu");
}

#[test]
fn gicv2_only_board_is_unsupported() {
    let mut root = virt();
    let gic = root.at("/intc@8000000");
    gic.name = "interrupt-controller@2c001000".into();
    gic.set(
        "compatible",
        strings(&["arm,gic-400", "arm,cortex-a15-gic"]),
    );
    gic.children.clear();
    let err = parse_err(&root);
    assert_error(&err, "/interrupt-controller@2c001000", Some("compatible"));
    let ErrorKind::Unsupported(why) = &err.kind else {
        panic!("{err}");
    };
    assert!(why.contains("GICv2 (\"arm,gic-400\")"), "{why}");
    assert!(why.contains("requires a GICv3"), "{why}");
}

#[test]
fn disabled_gicv3_counts_as_absent() {
    let mut root = virt();
    root.at("/intc@8000000").set("status", string("disabled"));
    assert_eq!(parse_err(&root).kind, ErrorKind::MissingNode);
}

#[test]
fn psci_method() {
    let mut root = virt();
    root.at("/psci").set("method", string("hvc"));
    assert_eq!(parse(&root).unwrap().psci.conduit, Conduit::Hvc);

    root.at("/psci").set("method", string("svc"));
    let err = parse_err(&root);
    assert_error(&err, "/psci", Some("method"));
    assert!(bad_value(&err).contains("\"svc\""));

    root.at("/psci").remove("method");
    let err = parse_err(&root);
    assert_error(&err, "/psci", Some("method"));
    assert_eq!(err.kind, ErrorKind::MissingProperty);
}

#[test]
fn psci_version_is_the_highest_compatible() {
    for (compatible, version) in [
        (&["arm,psci"][..], (0, 1)),
        (&["arm,psci-0.2", "arm,psci"][..], (0, 2)),
        (&["arm,psci", "arm,psci-1.0"][..], (1, 0)),
    ] {
        let mut root = virt();
        root.at("/psci").set("compatible", strings(compatible));
        assert_eq!(
            parse(&root).unwrap().psci.version,
            version,
            "{compatible:?}"
        );
    }
}

#[test]
fn psci_node_is_found_by_compatible_not_name() {
    let mut root = virt();
    root.at("/psci").name = "firmware-psci".into();
    assert_eq!(parse(&root).unwrap().psci.conduit, Conduit::Smc);
}

// ---- CPUs ---------------------------------------------------------------

#[test]
fn cpu_reg_must_be_one_mpidr() {
    let mut root = virt();
    root.at("/cpus/cpu@1").set("reg", cells(&[1, 2]));
    let err = parse_err(&root);
    assert_error(&err, "/cpus/cpu@1", Some("reg"));

    let mut root = virt();
    root.at("/cpus/cpu@1").remove("reg");
    let err = parse_err(&root);
    assert_error(&err, "/cpus/cpu@1", Some("reg"));
    assert_eq!(err.kind, ErrorKind::MissingProperty);
}

#[test]
fn mpidr_bits_outside_affinity_are_rejected() {
    let mut root = virt();
    // Bit 24 is MPIDR_EL1.MT, not affinity.
    root.at("/cpus/cpu@1").set("reg", cells(&[0x0100_0001]));
    let err = parse_err(&root);
    assert_error(&err, "/cpus/cpu@1", Some("reg"));
}

#[test]
fn duplicate_mpidrs_are_rejected() {
    let mut root = virt();
    root.at("/cpus/cpu@1").set("reg", cells(&[0]));
    let err = parse_err(&root);
    assert_error(&err, "/cpus/cpu@1", Some("reg"));
    assert!(bad_value(&err).contains("/cpus/cpu@0"), "{err}");
}

#[test]
fn two_cell_cpu_reg_carries_aff3() {
    let mut root = virt();
    let cpus = root.at("/cpus");
    cpus.set("#address-cells", cells(&[2]));
    cpus.at("cpu@0").set("reg", cells(&[0, 0]));
    cpus.at("cpu@1").set("reg", cells(&[0x12, 0x34_5678]));
    let p = parse(&root).unwrap();
    let mpidr = p.cpus[1].mpidr;
    assert_eq!(mpidr, Mpidr::from_affinity(0x12, 0x34, 0x56, 0x78));
    assert_eq!(mpidr.value(), 0x12_0034_5678);
    assert_eq!(mpidr.to_string(), "18.52.86.120");
}

#[test]
fn cpus_address_cells_must_be_1_or_2() {
    let mut root = virt();
    root.at("/cpus").set("#address-cells", cells(&[3]));
    let err = parse_err(&root);
    assert_error(&err, "/cpus", Some("#address-cells"));
}

#[test]
fn enable_methods() {
    let mut root = virt();
    let cpu = root.at("/cpus/cpu@1");
    cpu.set("enable-method", string("spin-table"));
    cpu.set("cpu-release-addr", cells(&[0, 0x8000_fff8]));
    root.at("/cpus/cpu@0").remove("enable-method");
    let p = parse(&root).unwrap();
    assert_eq!(p.cpus[0].enable_method, EnableMethod::None);
    assert_eq!(
        p.cpus[1].enable_method,
        EnableMethod::SpinTable {
            release_addr: 0x8000_fff8
        }
    );

    root.at("/cpus/cpu@1").remove("cpu-release-addr");
    let err = parse_err(&root);
    assert_error(&err, "/cpus/cpu@1", Some("cpu-release-addr"));
    assert_eq!(err.kind, ErrorKind::MissingProperty);

    root.at("/cpus/cpu@1")
        .set("enable-method", string("brcm,bcm2836-smp"));
    let err = parse_err(&root);
    assert_error(&err, "/cpus/cpu@1", Some("enable-method"));
    assert!(matches!(err.kind, ErrorKind::Unsupported(_)), "{err}");
}

#[test]
fn cpu_nodes_are_found_by_device_type_or_name() {
    let mut root = virt();
    root.at("/cpus/cpu@1").remove("device_type");
    assert_eq!(parse(&root).unwrap().cpus.len(), 2);
    // Neither named cpu nor typed cpu: not a CPU (like cpu-map).
    root.at("/cpus/cpu@1").name = "core@1".into();
    assert_eq!(parse(&root).unwrap().cpus.len(), 1);
}

#[test]
fn disabled_and_failed_cpus_are_left_out() {
    let mut root = virt();
    root.at("/cpus/cpu@1").set("status", string("disabled"));
    let p = parse(&root).unwrap();
    assert_eq!(p.cpus.len(), 1);
    assert_eq!(p.cpus[0].node, "/cpus/cpu@0");

    root.at("/cpus/cpu@1").set("status", string("fail"));
    assert_eq!(parse(&root).unwrap().cpus.len(), 1);

    root.at("/cpus/cpu@1").set("status", string("okay"));
    assert_eq!(parse(&root).unwrap().cpus.len(), 2);
}

// ---- timer ----------------------------------------------------------------

#[test]
fn timer_needs_four_interrupts() {
    let mut root = virt();
    root.at("/timer")
        .set("interrupts", cells(&[1, 13, 4, 1, 14, 4, 1, 11, 4]));
    let err = parse_err(&root);
    assert_error(&err, "/timer", Some("interrupts"));

    root.at("/timer").remove("interrupts");
    let err = parse_err(&root);
    assert_error(&err, "/timer", Some("interrupts"));
    assert_eq!(err.kind, ErrorKind::MissingProperty);
}

#[test]
fn timer_with_hyp_virt_and_clock_frequency() {
    let mut root = virt();
    let timer = root.at("/timer");
    timer.set(
        "interrupts",
        cells(&[1, 13, 4, 1, 14, 4, 1, 11, 4, 1, 10, 4, 1, 12, 4]),
    );
    timer.set("clock-frequency", cells(&[62_500_000]));
    let p = parse(&root).unwrap();
    assert_eq!(
        p.timer.hyp_virt,
        Some(Interrupt::Ppi {
            number: 12,
            flags: 4
        })
    );
    assert_eq!(p.timer.clock_frequency, Some(62_500_000));
}

#[test]
fn timer_interrupt_names_reorder() {
    let mut root = virt();
    let timer = root.at("/timer");
    timer.set(
        "interrupts",
        cells(&[1, 10, 4, 1, 11, 4, 1, 13, 4, 1, 14, 4]),
    );
    timer.set(
        "interrupt-names",
        strings(&["hyp-phys", "virt", "sec-phys", "phys"]),
    );
    let p = parse(&root).unwrap();
    assert_eq!(p.timer.hyp_phys.intid(), 26);
    assert_eq!(p.timer.virt.intid(), 27);
    assert_eq!(p.timer.secure_phys.intid(), 29);
    assert_eq!(p.timer.nonsecure_phys.intid(), 30);
}

#[test]
fn timer_interrupts_must_be_ppis() {
    let mut root = virt();
    root.at("/timer").set(
        "interrupts",
        cells(&[1, 13, 4, 1, 14, 4, 0, 11, 4, 1, 10, 4]),
    );
    let err = parse_err(&root);
    assert_error(&err, "/timer", Some("interrupts"));
    assert!(bad_value(&err).contains("not a PPI"), "{err}");
}

#[test]
fn ppi_numbers_are_range_checked() {
    let mut root = virt();
    root.at("/timer").set(
        "interrupts",
        cells(&[1, 16, 4, 1, 14, 4, 1, 11, 4, 1, 10, 4]),
    );
    let err = parse_err(&root);
    assert_error(&err, "/timer", Some("interrupts"));
    assert!(bad_value(&err).contains("out of range"), "{err}");
}

#[test]
fn timer_via_interrupts_extended() {
    let mut root = virt();
    let timer = root.at("/timer");
    timer.remove("interrupts");
    let g = GIC_PHANDLE;
    timer.set(
        "interrupts-extended",
        cells(&[g, 1, 13, 4, g, 1, 14, 4, g, 1, 11, 4, g, 1, 10, 4]),
    );
    assert_eq!(parse(&root).unwrap().timer.hyp_phys.intid(), 26);
}

// ---- interrupt parents --------------------------------------------------

#[test]
fn dangling_interrupt_parent() {
    let mut root = virt();
    root.at("/timer").set("interrupt-parent", cells(&[0x1234]));
    let err = parse_err(&root);
    assert_error(&err, "/timer", Some("interrupt-parent"));
    assert!(bad_value(&err).contains("0x1234"), "{err}");
}

#[test]
fn interrupt_parent_without_interrupt_cells_is_skipped_upwards() {
    // Like Linux's of_irq_find_parent: a parent without #interrupt-cells
    // passes the search on to its own interrupt parent.
    let mut root = virt();
    root.children.push(
        Node::new("glue")
            .prop("phandle", cells(&[0x77]))
            .prop("interrupt-parent", cells(&[GIC_PHANDLE])),
    );
    root.at("/timer").set("interrupt-parent", cells(&[0x77]));
    assert_eq!(parse(&root).unwrap().timer.hyp_phys.intid(), 26);
}

#[test]
fn interrupt_parent_cycle_is_bounded() {
    let mut root = virt();
    root.children.push(
        Node::new("a")
            .prop("phandle", cells(&[0x71]))
            .prop("interrupt-parent", cells(&[0x72])),
    );
    root.children.push(
        Node::new("b")
            .prop("phandle", cells(&[0x72]))
            .prop("interrupt-parent", cells(&[0x71])),
    );
    root.at("/timer").set("interrupt-parent", cells(&[0x71]));
    let err = parse_err(&root);
    assert_eq!(err.node, "/timer");
    assert!(bad_value(&err).contains("cyclic"), "{err}");
}

#[test]
fn interrupt_map_cycle_is_bounded() {
    // Two nexus nodes mapping into each other forever.
    let nexus = |name: &str, phandle: u32, other: u32| {
        Node::new(name)
            .prop("phandle", cells(&[phandle]))
            .prop("#interrupt-cells", cells(&[1]))
            .prop("#address-cells", cells(&[0]))
            .prop("interrupt-map", cells(&[5, other, 5]))
    };
    let mut root = virt();
    root.children.push(nexus("n1", 0x61, 0x62));
    root.children.push(nexus("n2", 0x62, 0x61));
    let uart = root.at("/pl011@9000000");
    uart.set("interrupt-parent", cells(&[0x61]));
    uart.set("interrupts", cells(&[5]));
    let err = parse_err(&root);
    assert_error(&err, "/pl011@9000000", Some("interrupts"));
    assert!(bad_value(&err).contains("cyclic"), "{err}");
}

#[test]
fn interrupt_map_routes_a_uart_to_the_gic() {
    // Like the FVP's bus@8000000: one-cell child specifiers mapped onto
    // GIC SPIs, the child unit address masked out.
    let mut root = virt();
    root.remove_node("/pl011@9000000");
    let g = GIC_PHANDLE;
    root.children.push(
        Node::new("bus@9000000")
            .prop("compatible", string("simple-bus"))
            .prop("#address-cells", cells(&[1]))
            .prop("#size-cells", cells(&[1]))
            .prop("ranges", cells(&[0, 0, 0x0900_0000, 0x10_0000]))
            .prop("#interrupt-cells", cells(&[1]))
            .prop("interrupt-map-mask", cells(&[0, 0xff]))
            .prop(
                "interrupt-map",
                cells(&[0, 7, g, 0, 0, 0, 40, 4, 0, 8, g, 0, 0, 0, 41, 1]),
            )
            .child(
                Node::new("serial@2000")
                    .prop("compatible", string("arm,pl011"))
                    .prop("reg", cells(&[0x2000, 0x1000]))
                    .prop("interrupts", cells(&[8])),
            ),
    );
    root.at("/chosen")
        .set("stdout-path", string("/bus@9000000/serial@2000:115200n8"));
    let p = parse(&root).unwrap();
    let uart = p.uart.unwrap();
    assert_eq!(uart.node, "/bus@9000000/serial@2000");
    assert_eq!(uart.range, MemRange::new(0x0900_2000, 0x1000));
    assert_eq!(
        uart.irq,
        Some(Interrupt::Spi {
            number: 41,
            flags: 1
        })
    );
}

// ---- addresses -------------------------------------------------------------

#[test]
fn reg_is_translated_through_ranges() {
    let mut root = virt();
    root.remove_node("/pl011@9000000");
    root.children.push(
        Node::new("soc")
            .prop("#address-cells", cells(&[1]))
            .prop("#size-cells", cells(&[1]))
            // child 0x0 -> parent 0x1:0000_0000, 16 MiB
            .prop("ranges", cells(&[0, 1, 0, 0x100_0000]))
            .child(
                Node::new("serial@10000")
                    .prop("compatible", string("arm,pl011"))
                    .prop("reg", cells(&[0x1_0000, 0x1000]))
                    .prop("interrupts", cells(&[0, 1, 4])),
            ),
    );
    root.at("/chosen").remove("stdout-path");
    let p = parse(&root).unwrap();
    let uart = p.uart.unwrap();
    assert_eq!(uart.range, MemRange::new(0x1_0001_0000, 0x1000));
    assert_eq!(uart.irq.unwrap().intid(), 33);
}

#[test]
fn bus_without_ranges_is_not_memory_mapped() {
    let mut root = virt();
    root.remove_node("/pl011@9000000");
    root.children.push(
        Node::new("i2c@1000")
            .prop("#address-cells", cells(&[1]))
            .prop("#size-cells", cells(&[1]))
            .child(
                Node::new("serial@10")
                    .prop("compatible", string("arm,pl011"))
                    .prop("reg", cells(&[0x10, 0x10])),
            ),
    );
    let err = parse_err(&root);
    assert_error(&err, "/i2c@1000/serial@10", Some("reg"));
    let why = bad_value(&err);
    assert!(why.contains("not memory-mapped"), "{why}");
    assert!(why.contains("/i2c@1000"), "{why}");
}

#[test]
fn address_outside_every_ranges_window() {
    let mut root = virt();
    root.remove_node("/pl011@9000000");
    root.children.push(
        Node::new("soc")
            .prop("#address-cells", cells(&[1]))
            .prop("#size-cells", cells(&[1]))
            .prop("ranges", cells(&[0, 0, 0x1000_0000, 0x1000]))
            .child(
                Node::new("serial@2000")
                    .prop("compatible", string("arm,pl011"))
                    .prop("reg", cells(&[0x2000, 0x1000])),
            ),
    );
    let err = parse_err(&root);
    assert_error(&err, "/soc/serial@2000", Some("reg"));
    assert!(bad_value(&err).contains("outside every"), "{err}");
}

#[test]
fn its_reg_goes_through_the_gic_ranges() {
    let mut root = virt();
    root.at("/intc@8000000").remove("ranges");
    let err = parse_err(&root);
    assert_error(&err, "/intc@8000000/its@8080000", Some("reg"));
}

// ---- memory ----------------------------------------------------------------

#[test]
fn memory_banks_are_collected_and_sorted() {
    let mut root = virt();
    root.at("/memory@40000000").set(
        "reg",
        cells(&[0x8, 0, 0, 0x4000_0000, 0, 0x4000_0000, 0, 0x4000_0000]),
    );
    root.children.push(
        Node::new("memory@1000")
            .prop("device_type", string("memory"))
            .prop("reg", cells(&[0, 0x1000, 0, 0x1000, 0, 0x2000, 0, 0])),
    );
    root.children.push(
        Node::new("memory@2000000")
            .prop("device_type", string("memory"))
            .prop("status", string("disabled"))
            .prop("reg", cells(&[0, 0x200_0000, 0, 0x1000])),
    );
    let p = parse(&root).unwrap();
    assert_eq!(
        p.memory,
        [
            MemRange::new(0x1000, 0x1000),
            MemRange::new(0x4000_0000, 0x4000_0000),
            MemRange::new(0x8_0000_0000, 0x4000_0000),
        ]
    );
}

#[test]
fn memory_honours_root_cells() {
    let mut root = virt();
    root.set("#address-cells", cells(&[1]));
    root.set("#size-cells", cells(&[1]));
    // Everything under the root now uses one-cell addresses and sizes.
    root.at("/memory@40000000")
        .set("reg", cells(&[0x4000_0000, 0x2000_0000]));
    root.at("/pl011@9000000")
        .set("reg", cells(&[0x0900_0000, 0x1000]));
    let gic = root.at("/intc@8000000");
    gic.set(
        "reg",
        cells(&[0x0800_0000, 0x1_0000, 0x080a_0000, 0xf6_0000]),
    );
    let p = parse(&root).unwrap();
    assert_eq!(p.memory, [MemRange::new(0x4000_0000, 0x2000_0000)]);
    assert_eq!(p.gic.distributor, MemRange::new(0x0800_0000, 0x1_0000));
}

#[test]
fn reserved_regions() {
    let mut root = virt();
    root.children.push(
        Node::new("reserved-memory")
            .prop("#address-cells", cells(&[2]))
            .prop("#size-cells", cells(&[2]))
            .prop("ranges", vec![])
            .child(
                Node::new("tf-a@40000000")
                    .prop("reg", cells(&[0, 0x4000_0000, 0, 0x8_0000]))
                    .prop("no-map", vec![]),
            )
            .child(
                // Dynamically placed: no fixed address, not reported.
                Node::new("cma")
                    .prop("size", cells(&[0, 0x100_0000]))
                    .prop("reusable", vec![]),
            ),
    );
    let blob = root.to_dtb(&[(0x4800_0000, 0x1000)]);
    let p = Platform::parse(&blob).unwrap();
    let reserved: Vec<(MemRange, &str)> = p
        .reserved
        .iter()
        .map(|r| (r.range, r.name.as_str()))
        .collect();
    assert_eq!(
        reserved,
        [
            (MemRange::new(0x4800_0000, 0x1000), "/memreserve/"),
            (MemRange::new(0x4000_0000, 0x8_0000), "tf-a@40000000"),
        ]
    );
}

// ---- console -----------------------------------------------------------------

fn with_second_uart() -> Node {
    let mut root = virt();
    let mut second = root.at("/pl011@9000000").clone();
    second.name = "pl011@9040000".into();
    second.set("reg", cells(&[0, 0x0904_0000, 0, 0x1000]));
    second.set("interrupts", cells(&[0, 8, 4]));
    root.children.push(second);
    root.children
        .push(Node::new("aliases").prop("serial1", string("/pl011@9040000")));
    root
}

#[test]
fn stdout_path_alias_with_options() {
    let mut root = with_second_uart();
    root.at("/chosen")
        .set("stdout-path", string("serial1:115200n8"));
    let uart = parse(&root).unwrap().uart.unwrap();
    assert_eq!(uart.node, "/pl011@9040000");
    assert_eq!(uart.irq.unwrap().intid(), 40);
}

#[test]
fn stdout_path_absolute() {
    let mut root = with_second_uart();
    root.at("/chosen")
        .set("stdout-path", string("/pl011@9040000"));
    assert_eq!(parse(&root).unwrap().uart.unwrap().node, "/pl011@9040000");
}

#[test]
fn stdout_path_to_something_else_falls_back_to_the_first_pl011() {
    let mut root = with_second_uart();
    root.children.push(
        Node::new("serial@1000")
            .prop("compatible", string("ns16550a"))
            .prop("reg", cells(&[0, 0x1000, 0, 0x100])),
    );
    root.at("/chosen")
        .set("stdout-path", string("/serial@1000"));
    assert_eq!(parse(&root).unwrap().uart.unwrap().node, "/pl011@9000000");

    // A dangling alias falls back too.
    root.at("/chosen").set("stdout-path", string("serial7"));
    assert_eq!(parse(&root).unwrap().uart.unwrap().node, "/pl011@9000000");
}

#[test]
fn disabled_uarts_are_skipped() {
    let mut root = with_second_uart();
    root.at("/chosen").remove("stdout-path");
    root.at("/pl011@9000000").set("status", string("disabled"));
    assert_eq!(parse(&root).unwrap().uart.unwrap().node, "/pl011@9040000");

    root.at("/pl011@9040000").set("status", string("disabled"));
    assert_eq!(parse(&root).unwrap().uart, None);
}

#[test]
fn uart_without_interrupts_has_no_irq() {
    let mut root = virt();
    root.at("/pl011@9000000").remove("interrupts");
    let uart = parse(&root).unwrap().uart.unwrap();
    assert_eq!(uart.irq, None);
}

#[test]
fn uart_interrupt_on_another_controller_has_no_irq() {
    let mut root = virt();
    root.children.push(
        Node::new("mbigen")
            .prop("phandle", cells(&[0x90]))
            .prop("interrupt-controller", vec![])
            .prop("#interrupt-cells", cells(&[2])),
    );
    let uart = root.at("/pl011@9000000");
    uart.set("interrupt-parent", cells(&[0x90]));
    uart.set("interrupts", cells(&[0x327, 4]));
    assert_eq!(parse(&root).unwrap().uart.unwrap().irq, None);
}

#[test]
fn bootargs_and_model() {
    let mut root = virt();
    root.at("/chosen")
        .set("bootargs", string("console=ttyAMA0 loglevel=8"));
    root.remove("model");
    let p = parse(&root).unwrap();
    assert_eq!(p.bootargs, "console=ttyAMA0 loglevel=8");
    assert_eq!(p.model, "linux,dummy-virt"); // first root compatible

    root.at("/chosen").set("bootargs", vec![b'a', b'b']);
    let err = parse_err(&root);
    assert_error(&err, "/chosen", Some("bootargs"));
}

// ---- blob level ----------------------------------------------------------------

#[test]
fn blob_size_checks_the_header() {
    let blob = virt().to_dtb(&[]);
    assert_eq!(blob_size(&blob).unwrap(), blob.len());
    assert_eq!(blob_size(&blob[..40]).unwrap(), blob.len());

    let bad = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut b = blob.clone();
        edit(&mut b);
        let err = blob_size(&b).unwrap_err();
        assert_eq!(err.node, "/");
        match err.kind {
            ErrorKind::BadBlob(why) => why,
            other => panic!("{other:?}"),
        }
    };
    let word = |b: &mut Vec<u8>, index: usize, value: u32| {
        b[index * 4..index * 4 + 4].copy_from_slice(&value.to_be_bytes())
    };
    assert_eq!(bad(&|b| b.truncate(39)), "header truncated");
    assert!(bad(&|b| b[0] = 0).contains("magic"));
    assert!(bad(&|b| word(b, 5, 16)).contains("version"));
    assert!(bad(&|b| word(b, 6, 18)).contains("compatible"));
    assert!(bad(&|b| word(b, 1, 39)).contains("totalsize"));
    assert!(bad(&|b| word(b, 2, 0x7fff_fff0)).contains("structure"));
    assert!(bad(&|b| word(b, 9, 0xffff_ffff)).contains("structure"));
    assert!(bad(&|b| word(b, 3, 8)).contains("strings"));
    assert!(bad(&|b| word(b, 4, 44)).contains("reservation"));
}

#[test]
fn errors_display_node_property_and_reason() {
    let err = PlatformError {
        node: "/".into(),
        property: None,
        kind: ErrorKind::BadBlob("bad magic"),
    };
    assert_eq!(
        err.to_string(),
        "device tree node /: malformed blob: bad magic"
    );
}

// ---- rescue ----------------------------------------------------------------

#[test]
fn rescue_finds_console_and_conduit_in_a_tree_that_does_not_parse() {
    let mut root = virt();
    root.at("/intc@8000000").remove("reg");
    let dtb = root.to_dtb(&[]);
    assert!(Platform::parse(&dtb).is_err());
    let rescue = platform::rescue(&dtb);
    let console = rescue.console.expect("console");
    assert_eq!(console.range.base, 0x0900_0000);
    assert_eq!(console.irq, None);
    assert_eq!(rescue.psci_conduit, Some(Conduit::Smc));
}

#[test]
fn rescue_of_garbage_is_empty() {
    assert_eq!(platform::rescue(&[0u8; 64]), platform::Rescue::default());
    assert_eq!(platform::rescue(&[]), platform::Rescue::default());
}
