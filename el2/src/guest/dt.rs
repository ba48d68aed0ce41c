//! The device tree a VM boots with: its RAM, vCPUs, PSCI through HVC, the
//! GICv3, the architected timer, the PMU, the PL011 console and `/chosen`, shaped
//! like QEMU `virt`'s own tree (hw/arm/virt.c) so that a Linux guest
//! configured for `virt` finds everything, plus the hypervisor's PV area
//! as reserved memory. Written with the `vm-fdt` crate; every address and
//! interrupt comes from [`super::layout`], the names that are not from a
//! standard binding from [`pvlock_abi::dt`].
//!
//! ```text
//! / {
//!     compatible = "linux,dummy-virt"; model = "pvlock VM <name>";
//!     #address-cells = <2>; #size-cells = <2>; interrupt-parent = <&gic>;
//!     chosen { bootargs; stdout-path = "/pl011@9000000";
//!              linux,initrd-start; linux,initrd-end;
//!              pvlock,reset-count = <N>; };
//!     memory@40000000 { device_type = "memory"; reg; };
//!     reserved-memory { #address-cells = <2>; #size-cells = <2>; ranges;
//!         pvlock@<IPA> { compatible = "pvlock,pv-area"; reg; no-map; };
//!     };                                   /* only with a PV area */
//!     cpus { cpu@0 { device_type = "cpu"; compatible = "arm,arm-v8";
//!                    reg = <MPIDR>; enable-method = "psci"; }; ... };
//!     psci { compatible = "arm,psci-1.0", "arm,psci-0.2"; method = "hvc"; };
//!     gic: intc@8000000 { compatible = "arm,gic-v3"; reg = <GICD>, <GICR>; ... };
//!     timer { compatible = "arm,armv8-timer"; interrupts = <4 PPIs>; always-on; };
//!     pmu { compatible = "arm,armv8-pmuv3"; interrupts = <PPI 7 level-high>; };
//!                                          /* only when the CPU's PMU is offered */
//!     clk: apb-pclk { compatible = "fixed-clock"; clock-frequency = <24000000>; };
//!     pl011@9000000 { compatible = "arm,pl011", "arm,primecell";
//!                     interrupts = <SPI 1 level-high>; clocks = <&clk>, <&clk>; };
//!     virtio_mmio@a000000 { compatible = "virtio,mmio"; reg = <0xa000000 0x200>;
//!                           interrupts = <SPI 16 edge-rising>; dma-coherent; };
//!     ...                                  /* 32 of them, to virtio_mmio@a003e00, SPI 47 */
//! };
//! ```

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use platform::vm::VmConfig;
use platform::{Interrupt, MemRange};
use pvlock_abi::dt::{PV_AREA_COMPATIBLE, PV_AREA_NODE};
use pvlock_abi::virtio_mmio;
use vm_fdt::FdtWriter;

use super::VmError;
use super::layout::{
    DTB_MAX_SIZE, GICD, GuestLayout, PMU_IRQ, TIMER, UART, UART_CLOCK_HZ, UART_IRQ, vcpu_mpidr,
};

/// The GIC's phandle (the root's `interrupt-parent`).
const GIC_PHANDLE: u32 = 1;
/// The UART clock's phandle.
const CLOCK_PHANDLE: u32 = 2;

/// Interrupt type cells of the GIC binding (`pvlock_abi::virt`).
const GIC_SPI: u32 = pvlock_abi::virt::GIC_SPI_CELL;
const GIC_PPI: u32 = pvlock_abi::virt::GIC_PPI_CELL;

/// The node path of the console, for `stdout-path`.
pub fn uart_path() -> String {
    format!("/pl011@{:x}", UART.base)
}

/// The name of the PV area's `/reserved-memory` child, `pvlock@<IPA>`
/// ([`pvlock_abi::dt::PV_AREA_NODE`]).
pub fn pv_area_node_name(area: MemRange) -> String {
    format!("{PV_AREA_NODE}@{:x}", area.base)
}

/// Writes the device tree for the VM `config` laid out as `layout` (from
/// [`super::layout::plan`] for the same config), after `resets` restarts
/// (`/chosen/pvlock,reset-count`, [`pvlock_abi::dt::RESET_COUNT`]). The result is at most
/// [`DTB_MAX_SIZE`] bytes, to be copied to `layout.dtb_ipa`. With `pmu`
/// the VM has the CPU's PMU (`el2::trap::pmu`), and the tree a PMU node:
/// Linux finds a PMU only through it.
pub fn build(
    config: &VmConfig,
    layout: &GuestLayout,
    resets: u32,
    pmu: bool,
) -> Result<Vec<u8>, VmError> {
    let blob = write(config, layout, resets, pmu).map_err(|why| VmError {
        node: config.node.clone(),
        property: None,
        reason: format!("cannot write the VM's device tree: {why}"),
    })?;
    if blob.len() as u64 > DTB_MAX_SIZE {
        return Err(VmError {
            node: config.node.clone(),
            property: None,
            reason: format!(
                "the VM's device tree is {:#x} bytes, more than its 2 MiB slot",
                blob.len()
            ),
        });
    }
    Ok(blob)
}

/// The tree: the root's properties, then its nodes in `virt`'s order.
fn write(
    config: &VmConfig,
    layout: &GuestLayout,
    resets: u32,
    pmu: bool,
) -> Result<Vec<u8>, vm_fdt::Error> {
    let mut fdt = FdtWriter::new()?;
    let root = fdt.begin_node("")?;
    fdt.property_u32("#address-cells", 2)?;
    fdt.property_u32("#size-cells", 2)?;
    fdt.property_string("compatible", "linux,dummy-virt")?;
    fdt.property_string("model", &format!("pvlock VM {}", config.name))?;
    fdt.property_u32("interrupt-parent", GIC_PHANDLE)?;
    write_chosen(&mut fdt, config, layout, resets)?;
    write_memory(&mut fdt, layout.ram)?;
    if let Some(area) = layout.pv_area {
        write_reserved_memory(&mut fdt, area)?;
    }
    write_cpus(&mut fdt, layout.vcpus)?;
    write_psci(&mut fdt)?;
    write_gic(&mut fdt, layout.redistributors)?;
    write_timer(&mut fdt)?;
    if pmu {
        write_pmu(&mut fdt)?;
    }
    write_uart_clock(&mut fdt)?;
    write_uart(&mut fdt)?;
    write_virtio_mmio(&mut fdt)?;
    fdt.end_node(root)?;
    fdt.finish()
}

/// chosen.yaml: the command line, the console, the initrd.
fn write_chosen(
    fdt: &mut FdtWriter,
    config: &VmConfig,
    layout: &GuestLayout,
    resets: u32,
) -> Result<(), vm_fdt::Error> {
    let chosen = fdt.begin_node("chosen")?;
    fdt.property_string("bootargs", &config.bootargs)?;
    fdt.property_u32(pvlock_abi::dt::RESET_COUNT, resets)?;
    fdt.property_string("stdout-path", &uart_path())?;
    if let Some(initrd) = layout.initrd {
        fdt.property_u64("linux,initrd-start", initrd.base)?;
        fdt.property_u64("linux,initrd-end", initrd.end())?;
    }
    fdt.end_node(chosen)
}

/// DT spec 3.4: /memory.
fn write_memory(fdt: &mut FdtWriter, ram: MemRange) -> Result<(), vm_fdt::Error> {
    let memory = fdt.begin_node(&format!("memory@{:x}", ram.base))?;
    fdt.property_string("device_type", "memory")?;
    reg(fdt, &[ram])?;
    fdt.end_node(memory)
}

/// reserved-memory/reserved-memory.yaml: the PV area is RAM the guest
/// must not allocate; `no-map` keeps it out of the linear map too, and
/// the guest maps each record when a hypercall hands out its IPA.
/// Linux wants the parent's cells equal to the root's, and `ranges`.
fn write_reserved_memory(fdt: &mut FdtWriter, pv_area: MemRange) -> Result<(), vm_fdt::Error> {
    let reserved = fdt.begin_node("reserved-memory")?;
    fdt.property_u32("#address-cells", 2)?;
    fdt.property_u32("#size-cells", 2)?;
    fdt.property_null("ranges")?;
    let pv = fdt.begin_node(&pv_area_node_name(pv_area))?;
    fdt.property_string("compatible", PV_AREA_COMPATIBLE)?;
    reg(fdt, &[pv_area])?;
    fdt.property_null("no-map")?;
    fdt.end_node(pv)?;
    fdt.end_node(reserved)
}

/// arm/cpus.yaml: reg is the MPIDR affinity (Aff3 is 0, so one cell);
/// the unit address is the reg in hex (DT spec 2.2.1.1).
fn write_cpus(fdt: &mut FdtWriter, vcpus: u32) -> Result<(), vm_fdt::Error> {
    let cpus = fdt.begin_node("cpus")?;
    fdt.property_u32("#address-cells", 1)?;
    fdt.property_u32("#size-cells", 0)?;
    for index in 0..vcpus {
        let mpidr = u16::try_from(index).map_or(0, |index| vcpu_mpidr(index).value());
        let cpu = fdt.begin_node(&format!("cpu@{mpidr:x}"))?;
        fdt.property_string("device_type", "cpu")?;
        fdt.property_string("compatible", "arm,arm-v8")?;
        fdt.property_u32("reg", mpidr as u32)?;
        fdt.property_string("enable-method", "psci")?;
        fdt.end_node(cpu)?;
    }
    fdt.end_node(cpus)
}

/// arm/psci.yaml: PSCI 1.0 (so 0.2 function ids), called with HVC,
/// which the hypervisor answers.
fn write_psci(fdt: &mut FdtWriter) -> Result<(), vm_fdt::Error> {
    let psci = fdt.begin_node("psci")?;
    fdt.property_string_list(
        "compatible",
        vec![String::from("arm,psci-1.0"), String::from("arm,psci-0.2")],
    )?;
    fdt.property_string("method", "hvc")?;
    fdt.end_node(psci)
}

/// interrupt-controller/arm,gic-v3.yaml: the distributor, then one
/// redistributor region holding one frame per vCPU.
fn write_gic(fdt: &mut FdtWriter, redistributors: MemRange) -> Result<(), vm_fdt::Error> {
    let gic = fdt.begin_node(&format!("intc@{:x}", GICD.base))?;
    fdt.property_string("compatible", "arm,gic-v3")?;
    fdt.property_u32("#interrupt-cells", 3)?;
    fdt.property_null("interrupt-controller")?;
    // No children (no ITS), and no interrupt-map may point into it with a
    // unit address: dtc's interrupt_provider check asks for this.
    fdt.property_u32("#address-cells", 0)?;
    fdt.property_u32("#redistributor-regions", 1)?;
    reg(fdt, &[GICD, redistributors])?;
    fdt.property_phandle(GIC_PHANDLE)?;
    fdt.end_node(gic)
}

/// timer/arm,arch_timer.yaml: secure physical, non-secure physical,
/// virtual, hypervisor physical, in that order.
fn write_timer(fdt: &mut FdtWriter) -> Result<(), vm_fdt::Error> {
    let timer = fdt.begin_node("timer")?;
    fdt.property_string("compatible", "arm,armv8-timer")?;
    let irqs: Vec<u32> = [
        TIMER.secure_phys,
        TIMER.nonsecure_phys,
        TIMER.virt,
        TIMER.hyp_phys,
    ]
    .into_iter()
    .flat_map(gic_specifier)
    .collect();
    fdt.property_array_u32("interrupts", &irqs)?;
    fdt.property_null("always-on")?;
    fdt.end_node(timer)
}

/// perf/arm,pmu.yaml: the PMUv3, its overflow interrupt a PPI (no
/// `interrupt-affinity`: every CPU has it).
fn write_pmu(fdt: &mut FdtWriter) -> Result<(), vm_fdt::Error> {
    let pmu = fdt.begin_node("pmu")?;
    fdt.property_string("compatible", "arm,armv8-pmuv3")?;
    fdt.property_array_u32("interrupts", &gic_specifier(PMU_IRQ))?;
    fdt.end_node(pmu)
}

/// clock/fixed-clock.yaml: the PL011's reference and bus clock.
fn write_uart_clock(fdt: &mut FdtWriter) -> Result<(), vm_fdt::Error> {
    let clock = fdt.begin_node("apb-pclk")?;
    fdt.property_string("compatible", "fixed-clock")?;
    fdt.property_u32("#clock-cells", 0)?;
    fdt.property_u32("clock-frequency", UART_CLOCK_HZ)?;
    fdt.property_string("clock-output-names", "clk24mhz")?;
    fdt.property_phandle(CLOCK_PHANDLE)?;
    fdt.end_node(clock)
}

/// serial/arm,pl011.yaml: both clocks are the fixed one, as on virt.
fn write_uart(fdt: &mut FdtWriter) -> Result<(), vm_fdt::Error> {
    let uart = fdt.begin_node(&format!("pl011@{:x}", UART.base))?;
    fdt.property_string_list(
        "compatible",
        vec![String::from("arm,pl011"), String::from("arm,primecell")],
    )?;
    reg(fdt, &[UART])?;
    fdt.property_array_u32("interrupts", &gic_specifier(UART_IRQ))?;
    fdt.property_array_u32("clocks", &[CLOCK_PHANDLE, CLOCK_PHANDLE])?;
    fdt.property_string_list(
        "clock-names",
        vec![String::from("uartclk"), String::from("apb_pclk")],
    )?;
    fdt.end_node(uart)
}

/// virtio/mmio.yaml: QEMU `virt`'s 32 transports, in address order, each
/// on its own edge-triggered SPI, DMA-coherent (`pvlock_abi::virtio_mmio`).
fn write_virtio_mmio(fdt: &mut FdtWriter) -> Result<(), vm_fdt::Error> {
    for transport in 0..virtio_mmio::TRANSPORTS {
        let base = virtio_mmio::transport_base(transport);
        let node = fdt.begin_node(&format!("{}@{base:x}", virtio_mmio::NODE_NAME))?;
        fdt.property_string("compatible", virtio_mmio::COMPATIBLE)?;
        reg(fdt, &[MemRange::new(base, virtio_mmio::TRANSPORT_SIZE)])?;
        let irq = Interrupt::Spi {
            number: virtio_mmio::FIRST_SPI + transport,
            flags: virtio_mmio::IRQ_FLAGS_EDGE_RISING,
        };
        fdt.property_array_u32("interrupts", &gic_specifier(irq))?;
        fdt.property_null("dma-coherent")?;
        fdt.end_node(node)?;
    }
    Ok(())
}

/// `reg` with two address and two size cells, as the root declares.
fn reg(fdt: &mut FdtWriter, ranges: &[MemRange]) -> Result<(), vm_fdt::Error> {
    let cells: Vec<u64> = ranges.iter().flat_map(|r| [r.base, r.size]).collect();
    fdt.property_array_u64("reg", &cells)
}

/// A GIC binding interrupt specifier: type, number, flags.
fn gic_specifier(irq: Interrupt) -> [u32; 3] {
    match irq {
        Interrupt::Spi { number, flags } => [GIC_SPI, number, flags],
        Interrupt::Ppi { number, flags } => [GIC_PPI, number, flags],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::layout::{GICR_BASE, GICR_FRAME_SIZE, RAM_BASE, plan};
    use platform::{Conduit, EnableMethod, Mpidr, Platform, ReservedRegion, UartKind};

    const MIB: u64 = 1 << 20;

    fn vm(vcpus: u32, initrd: Option<MemRange>, bootargs: &str) -> (VmConfig, GuestLayout) {
        let mut config = VmConfig::new(
            "/chosen/vm@0",
            "guest-0",
            vcpus,
            512 * MIB,
            MemRange::new(0x4800_0000, 0x10_0000),
        );
        config.initrd = initrd;
        config.bootargs = String::from(bootargs);
        let layout = plan(&config, &[]).expect("layout");
        (config, layout)
    }

    fn node<'b, 'a>(tree: &'b fdt::Fdt<'a>, path: &str) -> fdt::node::FdtNode<'b, 'a> {
        tree.find_node(path).unwrap_or_else(|| panic!("no {path}"))
    }

    fn u32s(tree: &fdt::Fdt<'_>, path: &str, property: &str) -> Vec<u32> {
        let value = node(tree, path)
            .property(property)
            .unwrap_or_else(|| panic!("no {path} {property}"))
            .value;
        value
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn string(tree: &fdt::Fdt<'_>, path: &str, property: &str) -> String {
        let value = node(tree, path).property(property).unwrap().value;
        String::from_utf8(value.to_vec()).unwrap()
    }

    #[test]
    fn the_vm_tree_parses_as_a_platform() {
        let (config, layout) = vm(4, None, "console=ttyAMA0 earlycon");
        let blob = build(&config, &layout, 0, true).unwrap();
        assert_eq!(platform::blob_size(&blob).unwrap(), blob.len());
        let p = Platform::parse(&blob).unwrap_or_else(|e| panic!("{e}"));

        assert_eq!(p.model, "pvlock VM guest-0");
        assert_eq!(p.memory, [MemRange::new(RAM_BASE, 512 * MIB)]);
        let area = layout.pv_area.expect("PV-lock and PV time by default");
        assert_eq!(
            p.reserved,
            [ReservedRegion {
                range: area,
                name: format!("pvlock@{:x}", area.base),
            }]
        );
        let mpidrs: Vec<u64> = p.cpus.iter().map(|c| c.mpidr.value()).collect();
        assert_eq!(mpidrs, [0, 1, 2, 3]);
        assert!(p.cpus.iter().all(|c| c.enable_method == EnableMethod::Psci));
        assert_eq!(p.cpus[3].node, "/cpus/cpu@3");

        assert_eq!(p.gic.distributor, GICD);
        assert_eq!(p.gic.redistributor_regions.len(), 1);
        let region = p.gic.redistributor_regions[0];
        assert_eq!(region.range, MemRange::new(GICR_BASE, 4 * GICR_FRAME_SIZE));
        assert_eq!(region.stride, None);
        assert!(p.gic.its.is_empty());
        assert_eq!(p.gic.maintenance_irq, None);

        let uart = p.uart.expect("console");
        assert_eq!(uart.kind, UartKind::Pl011);
        assert_eq!(uart.range, UART);
        assert_eq!(uart.irq, Some(UART_IRQ));
        assert_eq!(uart.node, "/pl011@9000000");

        assert_eq!(p.timer, TIMER);
        assert_eq!(p.psci.conduit, Conduit::Hvc);
        assert_eq!(p.psci.version, (1, 0));
        assert_eq!(p.bootargs, "console=ttyAMA0 earlycon");
        assert!(p.vms.is_empty());
    }

    #[test]
    fn what_the_platform_parser_does_not_read() {
        let initrd = Some(MemRange::new(0x4c00_0000, 0x12_3456));
        let (config, layout) = vm(1, initrd, "");
        let blob = build(&config, &layout, 0, true).unwrap();
        let tree = fdt::Fdt::new(&blob).unwrap();

        let placed = layout.initrd.unwrap();
        assert_eq!(
            u32s(&tree, "/chosen", "linux,initrd-start"),
            [(placed.base >> 32) as u32, placed.base as u32]
        );
        assert_eq!(
            u32s(&tree, "/chosen", "linux,initrd-end"),
            [(placed.end() >> 32) as u32, placed.end() as u32]
        );
        assert_eq!(string(&tree, "/chosen", "stdout-path"), "/pl011@9000000\0");
        assert_eq!(string(&tree, "/chosen", "bootargs"), "\0");
        assert_eq!(u32s(&tree, "/chosen", pvlock_abi::dt::RESET_COUNT), [0]);

        assert_eq!(u32s(&tree, "/", "#address-cells"), [2]);
        assert_eq!(u32s(&tree, "/", "#size-cells"), [2]);
        assert_eq!(string(&tree, "/", "compatible"), "linux,dummy-virt\0");
        assert_eq!(string(&tree, "/memory@40000000", "device_type"), "memory\0");

        assert_eq!(string(&tree, "/cpus/cpu@0", "compatible"), "arm,arm-v8\0");
        assert_eq!(string(&tree, "/cpus/cpu@0", "device_type"), "cpu\0");

        let gic = u32s(&tree, "/intc@8000000", "phandle");
        assert_eq!(u32s(&tree, "/", "interrupt-parent"), gic);
        assert!(
            node(&tree, "/intc@8000000")
                .property("interrupt-controller")
                .is_some()
        );
        assert_eq!(u32s(&tree, "/intc@8000000", "#interrupt-cells"), [3]);

        assert_eq!(
            u32s(&tree, "/timer", "interrupts"),
            [1, 13, 4, 1, 14, 4, 1, 11, 4, 1, 10, 4]
        );
        assert!(node(&tree, "/timer").property("always-on").is_some());

        // The PMU: PPI 7 (INTID 23), level-high, as on QEMU virt.
        assert_eq!(string(&tree, "/pmu", "compatible"), "arm,armv8-pmuv3\0");
        assert_eq!(u32s(&tree, "/pmu", "interrupts"), [1, 7, 4]);

        let clock = u32s(&tree, "/apb-pclk", "phandle");
        assert_eq!(u32s(&tree, "/apb-pclk", "clock-frequency"), [24_000_000]);
        assert_eq!(u32s(&tree, "/apb-pclk", "#clock-cells"), [0]);
        assert_eq!(string(&tree, "/apb-pclk", "compatible"), "fixed-clock\0");
        assert_eq!(
            u32s(&tree, "/pl011@9000000", "clocks"),
            [clock[0], clock[0]]
        );
        assert_eq!(
            string(&tree, "/pl011@9000000", "clock-names"),
            "uartclk\0apb_pclk\0"
        );
        assert_eq!(
            string(&tree, "/pl011@9000000", "compatible"),
            "arm,pl011\0arm,primecell\0"
        );
        assert_eq!(u32s(&tree, "/pl011@9000000", "interrupts"), [0, 1, 4]);
    }

    #[test]
    fn the_virtio_mmio_transports_are_qemu_virts() {
        let (config, layout) = vm(2, None, "");
        let blob = build(&config, &layout, 0, true).unwrap();
        let tree = fdt::Fdt::new(&blob).unwrap();
        let transports: Vec<_> = tree
            .all_nodes()
            .filter(|n| n.name.starts_with("virtio_mmio@"))
            .collect();
        assert_eq!(transports.len(), 32);
        for (n, node) in transports.iter().enumerate() {
            let base = 0x0a00_0000 + 0x200 * n as u32;
            assert_eq!(node.name, format!("virtio_mmio@{base:x}"));
            let path = format!("/{}", node.name);
            assert_eq!(string(&tree, &path, "compatible"), "virtio,mmio\0");
            assert_eq!(u32s(&tree, &path, "reg"), [0, base, 0, 0x200]);
            // SPI 16 + n (INTID 48 + n), IRQ_TYPE_EDGE_RISING, as QEMU.
            assert_eq!(u32s(&tree, &path, "interrupts"), [0, 16 + n as u32, 1]);
            assert_eq!(node.property("dma-coherent").unwrap().value, []);
        }
        // Every transport's INTID is one the VM's virtual GIC has.
        let last = 32 + 16 + 31;
        assert_eq!(last, virtio_mmio::LAST_INTID);
        // And the platform parser still reads the tree.
        assert_eq!(Platform::parse(&blob).unwrap().uart.unwrap().range, UART);
    }

    #[test]
    fn no_pmu_node_without_a_pmu() {
        let (config, layout) = vm(2, None, "");
        let blob = build(&config, &layout, 0, false).unwrap();
        let tree = fdt::Fdt::new(&blob).unwrap();
        assert!(tree.find_node("/pmu").is_none());
        assert!(tree.find_node("/timer").is_some());
    }

    #[test]
    fn no_initrd_properties_without_an_initrd() {
        let (config, layout) = vm(1, None, "quiet");
        let blob = build(&config, &layout, 0, true).unwrap();
        let tree = fdt::Fdt::new(&blob).unwrap();
        let chosen = node(&tree, "/chosen");
        assert!(chosen.property("linux,initrd-start").is_none());
        assert!(chosen.property("linux,initrd-end").is_none());
    }

    #[test]
    fn sixty_four_vcpus() {
        let (config, layout) = vm(64, None, "");
        let blob = build(&config, &layout, 0, true).unwrap();
        assert!(blob.len() < 16 * 1024, "{} bytes", blob.len());
        assert!((blob.len() as u64) <= DTB_MAX_SIZE);
        let p = Platform::parse(&blob).unwrap();
        assert_eq!(p.cpus.len(), 64);
        for (index, cpu) in p.cpus.iter().enumerate() {
            let expected = Mpidr::from_affinity(0, 0, (index / 16) as u8, (index % 16) as u8);
            assert_eq!(cpu.mpidr, expected, "vCPU {index}");
            assert_eq!(cpu.node, format!("/cpus/cpu@{:x}", expected.value()));
        }
        assert_eq!(
            p.gic.redistributor_regions[0].range,
            MemRange::new(GICR_BASE, 64 * GICR_FRAME_SIZE)
        );
    }

    #[test]
    fn the_tree_fits_its_slot_at_the_top_of_ram() {
        let (config, layout) = vm(8, None, "");
        let blob = build(&config, &layout, 0, true).unwrap();
        assert_eq!(layout.dtb_ipa % (2 * MIB), 0);
        assert_eq!(layout.dtb_ipa + DTB_MAX_SIZE, layout.ram.end());
        assert_eq!(&blob[..4], &[0xd0, 0x0d, 0xfe, 0xed], "FDT magic");
    }

    #[test]
    fn a_tree_larger_than_its_slot_is_an_error() {
        let (mut config, layout) = vm(1, None, "");
        config.bootargs = "x".repeat(DTB_MAX_SIZE as usize);
        let err = build(&config, &layout, 0, true).unwrap_err();
        assert_eq!(err.node, "/chosen/vm@0");
        assert!(err.reason.contains("more than its 2 MiB slot"), "{err}");
    }

    #[test]
    fn the_pv_area_is_reserved_no_map_memory() {
        let (config, layout) = vm(4, Some(MemRange::new(0x4c00_0000, 0x1000)), "");
        let area = layout.pv_area.unwrap();
        assert_eq!(area, MemRange::new(RAM_BASE + 510 * MIB - 0x1000, 0x1000));
        let blob = build(&config, &layout, 0, true).unwrap();
        let tree = fdt::Fdt::new(&blob).unwrap();

        let parent = "/reserved-memory";
        assert_eq!(u32s(&tree, parent, "#address-cells"), [2]);
        assert_eq!(u32s(&tree, parent, "#size-cells"), [2]);
        assert_eq!(node(&tree, parent).property("ranges").unwrap().value, []);
        let children: Vec<&str> = node(&tree, parent).children().map(|c| c.name).collect();
        assert_eq!(children, ["pvlock@5fdff000"]);

        let path = "/reserved-memory/pvlock@5fdff000";
        assert_eq!(pv_area_node_name(area), "pvlock@5fdff000");
        assert_eq!(string(&tree, path, "compatible"), "pvlock,pv-area\0");
        assert!(
            node(&tree, path)
                .compatible()
                .unwrap()
                .all()
                .eq([PV_AREA_COMPATIBLE])
        );
        assert_eq!(u32s(&tree, path, "reg"), [0, 0x5fdf_f000, 0, 0x1000]);
        let regions: Vec<_> = node(&tree, path).reg().unwrap().collect();
        assert_eq!(regions.len(), 1);
        assert_eq!(regions[0].starting_address as u64, area.base);
        assert_eq!(regions[0].size, Some(0x1000));
        assert_eq!(node(&tree, path).property("no-map").unwrap().value, []);

        // The area lies in the memory node's RAM, clear of the initrd.
        let initrd = layout.initrd.unwrap();
        assert!(area.base >= layout.ram.base && area.end() <= layout.ram.end());
        assert!(!area.overlaps(&initrd));
        assert_eq!(area.end(), layout.dtb_ipa);

        let p = Platform::parse(&blob).unwrap();
        assert_eq!(p.reserved.len(), 1);
        assert_eq!(p.reserved[0].range, area);
        assert_eq!(p.reserved[0].name, "pvlock@5fdff000");
    }

    #[test]
    fn no_reserved_memory_without_a_pv_area() {
        let (mut config, _) = vm(2, None, "");
        config.pv_lock = Some(pvlock_abi::pvlock::Variant::OpenEuler);
        config.pv_time = false;
        let layout = plan(&config, &[]).unwrap();
        assert_eq!(layout.pv_area, None);
        let blob = build(&config, &layout, 0, true).unwrap();
        let tree = fdt::Fdt::new(&blob).unwrap();
        assert!(tree.find_node("/reserved-memory").is_none());
        assert!(Platform::parse(&blob).unwrap().reserved.is_empty());
    }

    #[test]
    fn the_biggest_pv_area_is_reserved_whole() {
        let (mut config, _) = vm(64, None, "");
        config.pv_lock = Some(pvlock_abi::pvlock::Variant::SeedV3);
        let layout = plan(&config, &[]).unwrap();
        let area = layout.pv_area.unwrap();
        assert_eq!(area.size, 0x2000, "64 vCPUs, two 64-byte records each");
        let p = Platform::parse(&build(&config, &layout, 0, true).unwrap()).unwrap();
        assert_eq!(p.reserved.len(), 1);
        assert_eq!(p.reserved[0].range, area);
    }
}
