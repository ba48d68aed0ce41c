//! Fixed addresses, interrupts and the UART clock of QEMU `virt`'s machine
//! that every VM reproduces and that guests written for `virt` hard-code
//! rather than read from the device tree (QEMU hw/arm/virt.c `base_memmap`,
//! `a15irqmap` and `create_fdt`; the PPIs of include/hw/arm/virt.h). The
//! VM's whole map is
//! docs/vm-binding.md, "What the VM sees"; the virtio-mmio window is
//! [`crate::virtio_mmio`].
//!
//! Interrupts are given twice: as the device-tree GIC binding numbers them
//! (interrupt-controller/arm,gic-v3.yaml: a PPI's number is its INTID - 16,
//! an SPI's its INTID - 32), which is how QEMU lists them, and as the INTID
//! a guest sees at its GIC (Arm IHI 0069, "INTIDs": PPIs 16..=31, SPIs
//! 32..=1019). Every interrupt here is level-sensitive, active high
//! ([`IRQ_FLAGS_LEVEL_HIGH`]).

/// The INTID of PPI 0 (Arm IHI 0069, "INTIDs").
const FIRST_PPI_INTID: u32 = 16;

/// The INTID of SPI 0 (Arm IHI 0069, "INTIDs").
pub(crate) const FIRST_SPI_INTID: u32 = 32;

/// Where RAM starts (`VIRT_MEM`). An arm64 Image without a header is
/// placed at `RAM_BASE + 0x80000` and entered at its first byte, by QEMU's
/// `-kernel` loader and by the hypervisor alike.
pub const RAM_BASE: u64 = 0x4000_0000;

/// The GICv3 distributor's frame (`VIRT_GIC_DIST`). Its 64 KiB are the
/// architected size of the distributor's register map (Arm IHI 0069, "The
/// GIC Distributor register map"), which the `gic-regs` crate holds.
pub const GIC_DIST_BASE: u64 = 0x0800_0000;

/// The first redistributor (`VIRT_GIC_REDIST`): CPU *n*'s frames (RD_base
/// and SGI_base, 64 KiB each, no VLPI frames: Arm IHI 0069, "The GIC
/// Redistributor register map") start at `GIC_REDIST_BASE + n * 0x2_0000`.
pub const GIC_REDIST_BASE: u64 = 0x080a_0000;

/// Bytes QEMU `virt` sets aside for redistributors from
/// [`GIC_REDIST_BASE`] (`VIRT_GIC_REDIST`'s size), up to the UART: 123
/// CPUs' frames.
pub const GIC_REDIST_SIZE: u64 = 0xf6_0000;

/// The PL011 UART's registers (`VIRT_UART`); its interrupt is
/// [`UART_SPI`].
pub const UART_BASE: u64 = 0x0900_0000;

/// Bytes of the PL011's frame (`VIRT_UART`'s size): 4 KiB.
pub const UART_SIZE: u64 = 0x1000;

/// The frequency of the PL011's clocks, in Hz: QEMU `virt` describes one
/// fixed 24 MHz clock, `/apb-pclk` (hw/arm/virt.c `create_fdt`), as both
/// the UART's reference and bus clock; a guest derives the PL011's baud
/// rate divisors from it.
pub const UART_CLOCK_HZ: u32 = 24_000_000;

/// The PL011's interrupt: SPI 1 (`a15irqmap[VIRT_UART]`), INTID
/// [`UART_INTID`].
pub const UART_SPI: u32 = 1;

/// The PL011's interrupt as an INTID: 32 + [`UART_SPI`] = 33.
pub const UART_INTID: u32 = FIRST_SPI_INTID + UART_SPI;

/// The first cell of a GIC binding `interrupts` entry: the interrupt is an
/// SPI (include/dt-bindings/interrupt-controller/arm-gic.h `GIC_SPI`;
/// interrupt-controller/arm,gic-v3.yaml).
pub const GIC_SPI_CELL: u32 = 0;

/// The first cell of a GIC binding `interrupts` entry: the interrupt is a
/// PPI (arm-gic.h `GIC_PPI`).
pub const GIC_PPI_CELL: u32 = 1;

/// CPUs per Aff1 cluster: QEMU `virt` gives CPU *i* Aff0 = *i* % 16 and
/// Aff1 (and up) = *i* / 16 with a GICv3 (hw/arm/virt.c
/// `virt_cpu_mp_affinity`, target/arm `arm_build_mp_affinity`), because an
/// SGI names its targets as a 16-bit list of Aff0 values within one
/// cluster (Arm IHI 0069, ICC_SGI1R_EL1.TargetList). Every VM's vCPUs are
/// numbered so, and a guest that maps an MPIDR to a vCPU index (the number
/// KICK_CPU and PV_SCHED_YIELD_TO take) relies on it.
pub const CPUS_PER_CLUSTER: u16 = 16;

/// The interrupt flags cell QEMU `virt` writes for the UART, the timer and
/// the PMU: level-sensitive, active high
/// (include/dt-bindings/interrupt-controller/irq.h `IRQ_TYPE_LEVEL_HIGH`;
/// QEMU's `GIC_FDT_IRQ_FLAGS_LEVEL_HI`).
pub const IRQ_FLAGS_LEVEL_HIGH: u32 = 4;

/// The secure EL1 physical timer's PPI, 13 (`ARCH_TIMER_S_EL1_IRQ`),
/// INTID 29. The timer node's `interrupts` list the four timers in the
/// order of timer/arm,arch_timer.yaml: secure physical, non-secure
/// physical, virtual, hypervisor physical. They are also the Arm Base
/// System Architecture's assignments (Arm DEN0094, "PPI assignments").
pub const TIMER_SECURE_PHYS_PPI: u32 = 13;

/// INTID of [`TIMER_SECURE_PHYS_PPI`]: 29.
pub const TIMER_SECURE_PHYS_INTID: u32 = FIRST_PPI_INTID + TIMER_SECURE_PHYS_PPI;

/// The non-secure EL1 physical timer's PPI (CNTP_*_EL0), 14
/// (`ARCH_TIMER_NS_EL1_IRQ`), INTID 30.
pub const TIMER_PHYS_PPI: u32 = 14;

/// INTID of [`TIMER_PHYS_PPI`]: 30.
pub const TIMER_PHYS_INTID: u32 = FIRST_PPI_INTID + TIMER_PHYS_PPI;

/// The EL1 virtual timer's PPI (CNTV_*_EL0), 11 (`ARCH_TIMER_VIRT_IRQ`),
/// INTID 27.
pub const TIMER_VIRT_PPI: u32 = 11;

/// INTID of [`TIMER_VIRT_PPI`]: 27.
pub const TIMER_VIRT_INTID: u32 = FIRST_PPI_INTID + TIMER_VIRT_PPI;

/// The non-secure EL2 physical timer's PPI (CNTHP_*_EL2), 10
/// (`ARCH_TIMER_NS_EL2_IRQ`), INTID 26, listed in the timer node as QEMU
/// lists it.
pub const TIMER_HYP_PHYS_PPI: u32 = 10;

/// INTID of [`TIMER_HYP_PHYS_PPI`]: 26.
pub const TIMER_HYP_PHYS_INTID: u32 = FIRST_PPI_INTID + TIMER_HYP_PHYS_PPI;

/// The PMU's overflow interrupt: PPI 7 (`VIRTUAL_PMU_IRQ`, the `pmu`
/// node's `interrupts`), INTID 23, also the Arm Base System
/// Architecture's (Arm DEN0094, "PPI assignments").
pub const PMU_PPI: u32 = 7;

/// INTID of [`PMU_PPI`]: 23.
pub const PMU_INTID: u32 = FIRST_PPI_INTID + PMU_PPI;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_virt_addresses() {
        assert_eq!(RAM_BASE, 0x4000_0000);
        assert_eq!(GIC_DIST_BASE, 0x0800_0000);
        assert_eq!(GIC_REDIST_BASE, 0x080a_0000);
        assert_eq!(GIC_REDIST_SIZE, 0xf6_0000);
        assert_eq!(GIC_REDIST_BASE + GIC_REDIST_SIZE, UART_BASE);
        assert_eq!(GIC_REDIST_SIZE / 0x2_0000, 123);
        assert_eq!(UART_BASE, 0x0900_0000);
        assert_eq!(UART_SIZE, 0x1000);
        assert_eq!(UART_CLOCK_HZ, 24_000_000);
    }

    #[test]
    fn qemu_virt_interrupts() {
        assert_eq!((UART_SPI, UART_INTID), (1, 33));
        assert_eq!(
            [
                TIMER_SECURE_PHYS_PPI,
                TIMER_PHYS_PPI,
                TIMER_VIRT_PPI,
                TIMER_HYP_PHYS_PPI
            ],
            [13, 14, 11, 10]
        );
        assert_eq!(
            [
                TIMER_SECURE_PHYS_INTID,
                TIMER_PHYS_INTID,
                TIMER_VIRT_INTID,
                TIMER_HYP_PHYS_INTID
            ],
            [29, 30, 27, 26]
        );
        assert_eq!((PMU_PPI, PMU_INTID), (7, 23));
        assert_eq!(IRQ_FLAGS_LEVEL_HIGH, 4);
    }
}
