//! The guest-physical (IPA) map every VM sees, and where its kernel,
//! initrd and device tree go in its RAM.
//!
//! The map mirrors QEMU's `virt` machine (hw/arm/virt.c, `base_memmap`
//! and `a15irqmap`), so that Linux and our test guests find things where
//! they expect them:
//!
//! | IPA | size | what |
//! |---|---|---|
//! | 0x0800_0000 | 64 KiB | GICv3 distributor ([`GICD`]) |
//! | 0x080a_0000 | 128 KiB per vCPU | GICv3 redistributors ([`redistributors`]) |
//! | 0x0900_0000 | 4 KiB | PL011 UART ([`UART`]), SPI 1 = INTID 33 |
//! | 0x0a00_0000 | 32 x 0x200 | virtio-mmio transports ([`VIRTIO_MMIO`]), SPIs 16..47 = INTIDs 48..79, edge |
//! | 0x4000_0000 | `memory` | RAM ([`RAM_BASE`]) |
//!
//! Everything outside RAM is emulated: an access to one of the device
//! frames traps to EL2, and an access anywhere else is an abort injected
//! into the guest. The generated device tree ([`super::dt`]) and the
//! emulation both read the frames and interrupts from here; the numbers
//! guests hard-code (RAM, the GIC frames, the PL011, the virtio-mmio
//! window, the PL011's SPI and the timer and PMU PPIs) come from
//! `pvlock_abi::virt` and `pvlock_abi::virtio_mmio`.
//!
//! Inside RAM, following Linux's Documentation/arch/arm64/booting.rst,
//! from the top down:
//!
//! | where | what |
//! |---|---|
//! | the top 2 MiB | the device tree ([`GuestLayout::dtb_slot`]) |
//! | right below it, page aligned | the PV area ([`GuestLayout::pv_area`]), when the VM has one |
//! | right below that, page aligned | the initrd (inside the 32 GiB window that booting.rst requires) |
//! | RAM base + the Image header's `text_offset` | the kernel |
//!
//! The PV area holds the per-vCPU records the hypervisor hands out by IPA
//! ([`pv_records`]): one 64-byte PV-lock record per vCPU when the VM's
//! PV-lock variant is one whose records the hypervisor places (seed v2,
//! seed v3), and one 64-byte stolen-time record per vCPU when it has PV
//! time; the whole rounded up to a page. `crate::services::pv` lays the records out
//! in it. The device tree marks it `no-map` under `/reserved-memory`
//! ([`super::dt`]), so the guest leaves it alone.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use platform::vm::{MAX_VCPUS, MEMORY_GRANULE, VmConfig, property};
use platform::{ArchTimer, Interrupt, MemRange};
use pvlock_abi::pvlock::STATE_SIZE;
use pvlock_abi::pvtime;

use super::{Hex, VmError};
use crate::memory::layout::{PAGE_SIZE, page_ceil};
use crate::trap::mmio::MmioMap;
use crate::vcpu::GuestRegs;

/// Width of every VM's IPA space: 512 GiB, which stage 2 covers with one
/// level-1 root table (Arm ARM D8.2.7). Guest RAM must end below
/// `1 << IPA_BITS`.
pub const IPA_BITS: u32 = 39;

/// Where guest RAM starts (QEMU `virt`'s `VIRT_MEM`).
pub const RAM_BASE: u64 = pvlock_abi::virt::RAM_BASE;

/// The GICv3 distributor frame (`VIRT_GIC_DIST`): 64 KiB.
pub const GICD: MemRange =
    MemRange::new(pvlock_abi::virt::GIC_DIST_BASE, gic_regs::DISTRIBUTOR_SIZE);

/// The first redistributor (`VIRT_GIC_REDIST`).
pub const GICR_BASE: u64 = pvlock_abi::virt::GIC_REDIST_BASE;

/// One vCPU's redistributor: RD_base and SGI_base, 64 KiB each, without
/// the VLPI frames (Arm IHI 0069, 12.10 "The GIC Redistributor register
/// map"), so a guest reads the frames in order without a
/// `redistributor-stride`.
pub const GICR_FRAME_SIZE: u64 = gic_regs::REDISTRIBUTOR_SIZE;

/// The whole window QEMU `virt` sets aside for redistributors (up to the
/// UART): 123 frames, enough for [`MAX_VCPUS`].
pub const GICR_WINDOW: MemRange = MemRange::new(GICR_BASE, pvlock_abi::virt::GIC_REDIST_SIZE);

/// The PL011 UART (`VIRT_UART`): 4 KiB.
pub const UART: MemRange = MemRange::new(pvlock_abi::virt::UART_BASE, pvlock_abi::virt::UART_SIZE);

/// QEMU `virt`'s virtio-mmio window (`VIRT_MMIO`): 32 transports of
/// 0x200 bytes, each read as an empty transport
/// (`crate::devices::emul::virtio_mmio`).
pub const VIRTIO_MMIO: MemRange = MemRange::new(
    pvlock_abi::virtio_mmio::WINDOW_BASE,
    pvlock_abi::virtio_mmio::WINDOW_SIZE,
);

/// GIC binding flag: level-sensitive, active high
/// (include/dt-bindings/interrupt-controller/irq.h `IRQ_TYPE_LEVEL_HIGH`).
pub const IRQ_TYPE_LEVEL_HIGH: u32 = pvlock_abi::virt::IRQ_FLAGS_LEVEL_HIGH;

/// The UART's interrupt: SPI 1 (INTID 33), level-high, as `virt` wires it.
pub const UART_IRQ: Interrupt = Interrupt::Spi {
    number: pvlock_abi::virt::UART_SPI,
    flags: IRQ_TYPE_LEVEL_HIGH,
};

/// The architected timer's PPIs as QEMU `virt` gives them (binding
/// numbers, INTID - 16; `virt` marks them level-high): secure physical 13
/// (INTID 29), non-secure physical 14 (INTID 30), virtual 11 (INTID 27),
/// hypervisor physical 10 (INTID 26). CNTFRQ_EL0 is the host's, so no
/// `clock-frequency`.
pub const TIMER: ArchTimer = ArchTimer {
    secure_phys: ppi(pvlock_abi::virt::TIMER_SECURE_PHYS_PPI),
    nonsecure_phys: ppi(pvlock_abi::virt::TIMER_PHYS_PPI),
    virt: ppi(pvlock_abi::virt::TIMER_VIRT_PPI),
    hyp_phys: ppi(pvlock_abi::virt::TIMER_HYP_PHYS_PPI),
    hyp_virt: None,
    clock_frequency: None,
};

/// The fixed clock QEMU `virt` feeds the PL011 (`apb-pclk`), in Hz.
pub const UART_CLOCK_HZ: u32 = pvlock_abi::virt::UART_CLOCK_HZ;

/// The PMU's overflow interrupt: PPI 7 (INTID 23), level-high, as `virt`
/// and the Server Base System Architecture give it.
pub const PMU_IRQ: Interrupt = ppi(pvlock_abi::virt::PMU_PPI);

/// The device tree's slot: the top 2 MiB of RAM, 2 MiB aligned; the tree
/// may not be larger (booting.rst: "must not exceed 2 megabytes").
pub const DTB_MAX_SIZE: u64 = 2 << 20;

/// Where an image without a valid header goes, relative to RAM base: the
/// text_offset booting.rst says to assume for old kernels (0x80000).
pub const DEFAULT_TEXT_OFFSET: u64 = 0x8_0000;

/// booting.rst: the initrd must lie within a 1 GiB aligned window of at
/// most 32 GiB that also covers the kernel. With the kernel at the bottom
/// of RAM, that window is `[RAM_BASE, RAM_BASE + 32 GiB)`.
pub const INITRD_WINDOW: MemRange = MemRange::new(RAM_BASE, 32 << 30);

/// Size and alignment of one PV-lock record in the PV area
/// ([`pvlock_abi::pvlock::VcpuState64`]).
pub const PV_LOCK_RECORD_SIZE: u64 = STATE_SIZE as u64;

/// Size and alignment of one stolen-time record in the PV area
/// ([`pvlock_abi::pvtime::StolenTime`]).
pub const STOLEN_TIME_RECORD_SIZE: u64 = pvtime::RECORD_SIZE as u64;

// Packed from the start of a page-aligned area, every record stays
// aligned to its size, the stolen-time records after the PV-lock ones too.
const _: () = assert!(PAGE_SIZE.is_multiple_of(PV_LOCK_RECORD_SIZE));
const _: () = assert!(PV_LOCK_RECORD_SIZE.is_multiple_of(STOLEN_TIME_RECORD_SIZE));
const _: () = assert!(DTB_MAX_SIZE.is_multiple_of(PAGE_SIZE));
const _: () = assert!(MAX_VCPUS as u64 * GICR_FRAME_SIZE <= GICR_WINDOW.size);
const _: () = assert!(GICR_WINDOW.end() <= UART.base && GICD.end() <= GICR_BASE);
const _: () = assert!(UART.end() <= VIRTIO_MMIO.base && VIRTIO_MMIO.end() <= RAM_BASE);
const _: () = assert!(RAM_BASE.is_multiple_of(MEMORY_GRANULE));
// `platform::Interrupt` counts INTIDs as the ABI does.
const _: () = assert!(
    UART_IRQ.intid() == pvlock_abi::virt::UART_INTID
        && TIMER.secure_phys.intid() == pvlock_abi::virt::TIMER_SECURE_PHYS_INTID
        && TIMER.nonsecure_phys.intid() == pvlock_abi::virt::TIMER_PHYS_INTID
        && TIMER.virt.intid() == pvlock_abi::virt::TIMER_VIRT_INTID
        && TIMER.hyp_phys.intid() == pvlock_abi::virt::TIMER_HYP_PHYS_INTID
        && PMU_IRQ.intid() == pvlock_abi::virt::PMU_INTID
);

const fn ppi(number: u32) -> Interrupt {
    Interrupt::Ppi {
        number,
        flags: IRQ_TYPE_LEVEL_HIGH,
    }
}

/// The redistributor frames of a VM with `vcpus` vCPUs: one
/// [`GICR_FRAME_SIZE`] frame per vCPU from [`GICR_BASE`], vCPU `i`'s at
/// `GICR_BASE + i * GICR_FRAME_SIZE`. `vcpus` is capped at [`MAX_VCPUS`].
pub const fn redistributors(vcpus: u32) -> MemRange {
    let vcpus = if vcpus > MAX_VCPUS { MAX_VCPUS } else { vcpus };
    MemRange::new(GICR_BASE, vcpus as u64 * GICR_FRAME_SIZE)
}

/// The devices el2 emulates for every VM, as the data-abort path routes a
/// trapped access to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmulatedDevice {
    /// The PL011 at [`UART`].
    Uart,
    /// The GICv3 distributor at [`GICD`].
    Distributor,
    /// The redistributor frames ([`redistributors`]); the offset selects
    /// the vCPU's frame.
    Redistributors,
    /// The virtio-mmio window at [`VIRTIO_MMIO`]; the offset selects the
    /// transport and its register.
    VirtioMmio,
}

/// The MMIO map of a VM with `vcpus` vCPUs: the one table the data-abort
/// path routes every emulated access through. The frames are fixed and
/// disjoint (checked at compile time above), so building it cannot fail
/// for any vCPU count.
pub fn device_map(vcpus: u32) -> MmioMap<EmulatedDevice> {
    let mut map = MmioMap::new();
    for (range, device) in [
        (UART, EmulatedDevice::Uart),
        (GICD, EmulatedDevice::Distributor),
        (redistributors(vcpus.max(1)), EmulatedDevice::Redistributors),
        (VIRTIO_MMIO, EmulatedDevice::VirtioMmio),
    ] {
        // Disjoint by the layout's constants: `insert` cannot refuse.
        let inserted = map.insert(range, device);
        debug_assert!(inserted.is_ok(), "{inserted:?}");
    }
    map
}

/// The vCPU count of every Aff1 cluster, as QEMU `virt` numbers its CPUs
/// (`pvlock_abi::virt::CPUS_PER_CLUSTER`).
pub const VCPUS_PER_CLUSTER: u16 = pvlock_abi::virt::CPUS_PER_CLUSTER;

/// The MPIDR affinity of vCPU `index`: Aff0 = index % 16 and, from bit 8
/// up, index / 16 (so Aff1 = index / 16 for the first 4096 vCPUs, Aff2
/// beyond), exactly as QEMU's `arm_build_mp_affinity`. VMPIDR_EL2 also
/// needs bit 31 (RES1); that is the register's business, not the
/// affinity's.
pub const fn vcpu_mpidr(index: u16) -> platform::Mpidr {
    let cluster = (index / VCPUS_PER_CLUSTER) as u64;
    let aff0 = (index % VCPUS_PER_CLUSTER) as u64;
    platform::Mpidr::from_raw((cluster << 8) | aff0)
}

/// The vCPU index whose MPIDR is `mpidr` (the inverse of [`vcpu_mpidr`]),
/// or `None` when no index maps to it. The caller checks the index
/// against the VM's vCPU count.
pub const fn vcpu_index(mpidr: platform::Mpidr) -> Option<u16> {
    let aff0 = mpidr.aff(0) as u64;
    if mpidr.aff(3) != 0 || aff0 >= VCPUS_PER_CLUSTER as u64 {
        return None;
    }
    // Aff2:Aff1, at most 16 bits.
    let cluster = (mpidr.value() >> 8) & 0xffff;
    let index = cluster * VCPUS_PER_CLUSTER as u64 + aff0;
    if index > u16::MAX as u64 {
        return None;
    }
    Some(index as u16)
}

/// The fields of an arm64 Image header that decide placement
/// (Linux Documentation/arch/arm64/booting.rst, "Call the kernel image").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageHeader {
    /// Image load offset from a 2 MiB aligned base (little-endian u64 at 8).
    pub text_offset: u64,
    /// Effective Image size, including what the kernel needs beyond the
    /// file (its BSS) (little-endian u64 at 16); 0 for kernels before 3.17.
    pub image_size: u64,
}

impl ImageHeader {
    /// The header is 64 bytes.
    pub const SIZE: usize = 64;
    /// `magic` at offset 0x38: "ARM\x64", little-endian.
    pub const MAGIC: u32 = 0x644d_5241;
    const MAGIC_OFFSET: usize = 0x38;

    /// Reads the header at the start of `image`; `None` unless there are
    /// 64 bytes with the magic in place.
    pub fn parse(image: &[u8]) -> Option<ImageHeader> {
        let header = image.get(..Self::SIZE)?;
        let bytes = |at: usize| -> Option<[u8; 8]> { header.get(at..at + 8)?.try_into().ok() };
        let magic = bytes(Self::MAGIC_OFFSET)?;
        if u32::from_le_bytes([magic[0], magic[1], magic[2], magic[3]]) != Self::MAGIC {
            return None;
        }
        Some(ImageHeader {
            text_offset: u64::from_le_bytes(bytes(8)?),
            image_size: u64::from_le_bytes(bytes(16)?),
        })
    }
}

/// Where a VM's pieces are in its IPA space. Built by [`plan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestLayout {
    /// Guest RAM: [`RAM_BASE`], `memory` bytes.
    pub ram: MemRange,
    /// Where the kernel image is copied: RAM base + `text_offset`.
    pub kernel_ipa: u64,
    /// Bytes kept free for the kernel from `kernel_ipa`: the header's
    /// `image_size` (which covers the kernel's BSS) or the file size,
    /// whichever is larger.
    pub kernel_size: u64,
    /// Where the boot vCPU starts: the first byte of the image (`code0`).
    pub kernel_entry: u64,
    /// Where the initrd is copied, page aligned, right below the PV area,
    /// or the device tree when there is no PV area (or below the end of
    /// [`INITRD_WINDOW`] in VMs larger than it).
    pub initrd: Option<MemRange>,
    /// The hypervisor's PV area: whole pages of RAM right below the device
    /// tree, ending at `dtb_ipa`, at least [`pv_records`] bytes, for the
    /// per-vCPU records it hands out by IPA (`crate::services::pv` lays them out:
    /// PV-lock records first, then stolen-time records). `None` when the
    /// VM needs none.
    pub pv_area: Option<MemRange>,
    /// Where the device tree is written: the top 2 MiB of RAM.
    pub dtb_ipa: u64,
    /// The redistributor frames of this VM's vCPUs.
    pub redistributors: MemRange,
    /// The VM's vCPU count.
    pub vcpus: u32,
}

impl GuestLayout {
    /// The kernel's footprint, `kernel_size` bytes from `kernel_ipa`.
    pub const fn kernel(&self) -> MemRange {
        MemRange::new(self.kernel_ipa, self.kernel_size)
    }

    /// The device tree's slot: [`DTB_MAX_SIZE`] bytes from `dtb_ipa`.
    pub const fn dtb_slot(&self) -> MemRange {
        MemRange::new(self.dtb_ipa, DTB_MAX_SIZE)
    }

    /// The boot vCPU's registers at its first entry (booting.rst, "Call
    /// the kernel image"): x0 = the device tree's IPA, x1..x3 = 0, PC at
    /// the kernel entry, EL1h with D, A, I and F masked. The rest of the
    /// required state (MMU and D-cache off) is the EL1 system registers'
    /// reset state.
    pub fn boot_regs(&self) -> GuestRegs {
        use aarch64_cpu::registers::SPSR_EL2;
        let pstate = SPSR_EL2::M::EL1h
            + SPSR_EL2::D::Masked
            + SPSR_EL2::A::Masked
            + SPSR_EL2::I::Masked
            + SPSR_EL2::F::Masked;
        let mut regs = GuestRegs {
            pc: self.kernel_entry,
            pstate: pstate.value,
            ..GuestRegs::default()
        };
        regs.set_reg(0, self.dtb_ipa);
        regs
    }
}

/// Bytes of PV-lock records and of stolen-time records a VM needs in its
/// PV area: one record per vCPU each, PV-lock records only for a variant
/// whose records the hypervisor places, stolen-time records only with PV
/// time.
pub fn pv_records(config: &VmConfig) -> (u64, u64) {
    let vcpus = u64::from(config.vcpus);
    let lock = match config.pv_lock {
        Some(variant) if !variant.guest_allocates() => vcpus * PV_LOCK_RECORD_SIZE,
        _ => 0,
    };
    let time = if config.pv_time {
        vcpus * STOLEN_TIME_RECORD_SIZE
    } else {
        0
    };
    (lock, time)
}

/// Lays out a VM: RAM at [`RAM_BASE`], the kernel at RAM base + the
/// `text_offset` of its Image header (`kernel_header`: the first bytes of
/// the kernel image, at least [`ImageHeader::SIZE`] of them for the
/// header to count), else at RAM base + [`DEFAULT_TEXT_OFFSET`]; the
/// device tree in the top 2 MiB; the PV area (see [`pv_records`]) right
/// below it, page aligned; the initrd right below that.
///
/// An image whose header has `image_size` 0 (kernels before 3.17) is
/// placed at RAM base + 0x80000 as booting.rst says; one without a header
/// gets only its file size kept free, so a raw image must not need memory
/// past its end.
///
/// Errors name the VM's node and the property to change: `memory` when
/// the pieces do not fit in the VM's RAM (or RAM does not fit in the IPA
/// space), `kernel` when its header is unusable, `vcpus` beyond
/// [`MAX_VCPUS`].
pub fn plan(config: &VmConfig, kernel_header: &[u8]) -> Result<GuestLayout, VmError> {
    check_vcpu_count(config)?;
    let ram = guest_ram(config)?;
    let kernel = kernel_footprint(config, kernel_header)?;
    // RAM is at least 2 MiB, so the slot is inside it.
    let dtb_slot = MemRange::new(ram.end() - DTB_MAX_SIZE, DTB_MAX_SIZE);
    let pv_area = pv_area_below(config, dtb_slot)?;
    let initrd = initrd_below(config, dtb_slot, pv_area)?;
    let top = TopOfRam {
        dtb_slot,
        pv_area,
        initrd,
    };
    check_kernel_fits(config, kernel, &top)?;
    Ok(GuestLayout {
        ram,
        kernel_ipa: kernel.base,
        kernel_size: kernel.size,
        kernel_entry: kernel.base,
        initrd,
        pv_area,
        dtb_ipa: dtb_slot.base,
        redistributors: redistributors(config.vcpus),
        vcpus: config.vcpus,
    })
}

/// Refuses a vCPU count outside 1 to [`MAX_VCPUS`].
fn check_vcpu_count(config: &VmConfig) -> Result<(), VmError> {
    if (1..=MAX_VCPUS).contains(&config.vcpus) {
        return Ok(());
    }
    Err(VmError::new(
        &config.node,
        property::VCPUS,
        format!("{}, expected 1 to {MAX_VCPUS}", config.vcpus),
    ))
}

/// The VM's RAM: `memory` bytes from [`RAM_BASE`], a non-zero multiple of
/// [`MEMORY_GRANULE`] that ends inside the IPA space.
fn guest_ram(config: &VmConfig) -> Result<MemRange, VmError> {
    let size = config.memory_size;
    if size == 0 || !size.is_multiple_of(MEMORY_GRANULE) {
        return Err(VmError::new(
            &config.node,
            property::MEMORY,
            format!("{size:#x} bytes is not a non-zero multiple of 2 MiB"),
        ));
    }
    let ipa_limit = 1u64 << IPA_BITS;
    if size > ipa_limit - RAM_BASE {
        return Err(VmError::new(
            &config.node,
            property::MEMORY,
            format!(
                "{size:#x} bytes does not fit the {IPA_BITS}-bit guest address space above {RAM_BASE:#x} (at most {:#x})",
                ipa_limit - RAM_BASE
            ),
        ));
    }
    Ok(MemRange::new(RAM_BASE, size))
}

/// What the kernel occupies: from RAM base + its Image header's
/// `text_offset` (or [`DEFAULT_TEXT_OFFSET`]), the larger of the header's
/// `image_size` and the file size.
fn kernel_footprint(config: &VmConfig, kernel_header: &[u8]) -> Result<MemRange, VmError> {
    let (text_offset, image_size) = match ImageHeader::parse(kernel_header) {
        Some(ImageHeader { image_size: 0, .. }) | None => (DEFAULT_TEXT_OFFSET, 0),
        Some(header) => (header.text_offset, header.image_size),
    };
    // The vCPU starts at the image's first byte: it must hold an
    // instruction, so 4-byte aligned.
    if !text_offset.is_multiple_of(4) {
        return Err(VmError::new(
            &config.node,
            property::KERNEL,
            format!("Image header text_offset {text_offset:#x} is not 4-byte aligned"),
        ));
    }
    let kernel_size = image_size.max(config.kernel.size);
    RAM_BASE
        .checked_add(text_offset)
        .filter(|base| base.checked_add(kernel_size).is_some())
        .map(|base| MemRange::new(base, kernel_size))
        .ok_or_else(|| {
            VmError::new(
                &config.node,
                property::KERNEL,
                format!(
                    "Image header text_offset {text_offset:#x} and size {kernel_size:#x} run past the end of the address space"
                ),
            )
        })
}

/// The PV area (see [`pv_records`]): whole pages right below the device
/// tree's slot, or `None` when the VM needs no records.
fn pv_area_below(config: &VmConfig, dtb_slot: MemRange) -> Result<Option<MemRange>, VmError> {
    // At most 2 * 64 records of 64 bytes: no overflow.
    let (lock_bytes, time_bytes) = pv_records(config);
    let area_size = page_ceil(lock_bytes + time_bytes);
    if area_size == 0 {
        return Ok(None);
    }
    match dtb_slot
        .base
        .checked_sub(area_size)
        .filter(|&base| base >= RAM_BASE)
    {
        Some(base) => Ok(Some(MemRange::new(base, area_size))),
        None => Err(VmError::new(
            &config.node,
            property::MEMORY,
            format!(
                "{:#x} bytes of RAM cannot hold the {area_size:#x}-byte PV area below the device tree at {}",
                config.memory_size,
                Hex(dtb_slot)
            ),
        )),
    }
}

/// Where the initrd goes: page aligned, right below the PV area (or the
/// device tree's slot when there is none) and inside [`INITRD_WINDOW`].
/// `None` when the VM has no initrd.
fn initrd_below(
    config: &VmConfig,
    dtb_slot: MemRange,
    pv_area: Option<MemRange>,
) -> Result<Option<MemRange>, VmError> {
    let Some(module) = config.initrd else {
        return Ok(None);
    };
    let top = pv_area
        .map_or(dtb_slot.base, |area| area.base)
        .min(INITRD_WINDOW.end());
    let above = if pv_area.is_some() {
        "the PV area and the device tree"
    } else {
        "the device tree"
    };
    let base = top
        .checked_sub(module.size)
        .map(|base| base & !(PAGE_SIZE - 1))
        .filter(|&base| base >= RAM_BASE);
    match base {
        Some(base) => Ok(Some(MemRange::new(base, module.size))),
        None => Err(VmError::new(
            &config.node,
            property::MEMORY,
            format!(
                "{:#x} bytes of RAM cannot hold the {:#x}-byte initrd below {top:#x}, {above}",
                config.memory_size, module.size,
            ),
        )),
    }
}

/// What [`plan`] puts at the top of RAM, from the top down.
struct TopOfRam {
    dtb_slot: MemRange,
    pv_area: Option<MemRange>,
    initrd: Option<MemRange>,
}

impl TopOfRam {
    /// The lowest of them: where the room left for the kernel ends.
    fn base(&self) -> u64 {
        self.initrd
            .or(self.pv_area)
            .map_or(self.dtb_slot.base, |lowest| lowest.base)
    }
}

/// Refuses a kernel that runs into the pieces at the top of RAM, naming
/// every piece below the device tree.
fn check_kernel_fits(config: &VmConfig, kernel: MemRange, top: &TopOfRam) -> Result<(), VmError> {
    if kernel.end() <= top.base() {
        return Ok(());
    }
    let mut pieces: Vec<String> = Vec::new();
    pieces.push(format!("the kernel at {}", Hex(kernel)));
    if let Some(initrd) = top.initrd {
        pieces.push(format!("the initrd at {}", Hex(initrd)));
    }
    if let Some(area) = top.pv_area {
        pieces.push(format!("the PV area at {}", Hex(area)));
    }
    let last = pieces.pop().unwrap_or_default();
    let pieces = if pieces.is_empty() {
        last
    } else {
        format!("{} and {last}", pieces.join(", "))
    };
    Err(VmError::new(
        &config.node,
        property::MEMORY,
        format!(
            "{:#x} bytes of RAM cannot hold {pieces} below the device tree at {}",
            config.memory_size,
            Hex(top.dtb_slot)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use pvlock_abi::pvlock::Variant;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_device_map_routes_every_emulated_frame_and_nothing_else() {
        use EmulatedDevice::*;
        for vcpus in [1, 2, 8, MAX_VCPUS] {
            let map = device_map(vcpus);
            assert_eq!(map.iter().count(), 4);
            assert_eq!(map.route(UART.base + 0x18, 4), Some((&Uart, 0x18)));
            assert_eq!(map.route(0x0a00_0000, 4), Some((&VirtioMmio, 0)));
            assert_eq!(
                map.route(0x0a00_3e00 + 0x1fc, 4),
                Some((&VirtioMmio, 31 * 0x200 + 0x1fc))
            );
            assert_eq!(map.route(0x0a00_4000, 4), None);
            assert_eq!(map.route(0x09ff_fffc, 4), None);
            assert_eq!(map.route(GICD.base, 4), Some((&Distributor, 0)));
            assert_eq!(
                map.route(GICD.end() - 8, 8),
                Some((&Distributor, GICD.size - 8))
            );
            let last_frame = GICR_BASE + u64::from(vcpus - 1) * GICR_FRAME_SIZE;
            assert_eq!(
                map.route(last_frame + 0x1_0080, 4),
                Some((&Redistributors, last_frame + 0x1_0080 - GICR_BASE))
            );
            // Past the last vCPU's frame, between frames, RAM: no device.
            assert_eq!(map.route(last_frame + GICR_FRAME_SIZE, 4), None);
            assert_eq!(map.route(GICD.end(), 4), None);
            assert_eq!(map.route(UART.end(), 1), None);
            assert_eq!(map.route(RAM_BASE, 4), None);
            // An access that straddles a frame's end is nobody's.
            assert_eq!(map.route(UART.end() - 2, 4), None);
        }
        // A VM description never has 0 vCPUs; the map still has one frame.
        assert_eq!(
            device_map(0).route(GICR_BASE, 4),
            Some((&Redistributors, 0))
        );
    }

    fn config(memory: u64, kernel_size: u64) -> VmConfig {
        VmConfig::new(
            "/chosen/vm@0",
            "vm0",
            4,
            memory,
            MemRange::new(0x4800_0000, kernel_size),
        )
    }

    /// A 64-byte arm64 Image header.
    fn header(text_offset: u64, image_size: u64) -> Vec<u8> {
        let mut h = alloc::vec![0u8; ImageHeader::SIZE];
        h[8..16].copy_from_slice(&text_offset.to_le_bytes());
        h[16..24].copy_from_slice(&image_size.to_le_bytes());
        h[0x38..0x3c].copy_from_slice(b"ARM\x64");
        h
    }

    #[test]
    fn image_headers() {
        assert_eq!(
            ImageHeader::parse(&header(0x8_0000, 0x12_0000)),
            Some(ImageHeader {
                text_offset: 0x8_0000,
                image_size: 0x12_0000
            })
        );
        assert_eq!(ImageHeader::parse(&header(0, 1)[..63]), None);
        let mut bad_magic = header(0, 1);
        bad_magic[0x3b] = 0x65;
        assert_eq!(ImageHeader::parse(&bad_magic), None);
        assert_eq!(ImageHeader::parse(&[]), None);
        // Longer input (the whole image) is fine.
        let mut image = header(0x20_0000, 0x30_0000);
        image.resize(4096, 0xaa);
        assert_eq!(ImageHeader::parse(&image).unwrap().text_offset, 0x20_0000);
    }

    #[test]
    fn a_kernel_with_a_header_goes_at_its_text_offset() {
        let layout = plan(&config(256 * MIB, 0x100_0000), &header(0, 0x180_0000)).unwrap();
        assert_eq!(layout.ram, MemRange::new(0x4000_0000, 256 * MIB));
        assert_eq!(layout.kernel_ipa, 0x4000_0000);
        assert_eq!(layout.kernel_entry, 0x4000_0000);
        assert_eq!(
            layout.kernel_size, 0x180_0000,
            "image_size, not the file size"
        );
        assert_eq!(layout.dtb_ipa, 0x4000_0000 + 254 * MIB);
        assert_eq!(layout.dtb_slot().end(), layout.ram.end());
        assert_eq!(layout.initrd, None);
        assert_eq!(
            layout.redistributors,
            MemRange::new(0x080a_0000, 4 * 0x2_0000)
        );

        let layout = plan(&config(256 * MIB, 0x1000), &header(0x8_0000, 0x2000)).unwrap();
        assert_eq!(layout.kernel_ipa, 0x4008_0000);
    }

    #[test]
    fn a_kernel_without_a_usable_header_goes_at_0x80000() {
        for kernel_header in [&[][..], &[0u8; 64][..], &header(0x20_0000, 0)[..]] {
            let layout = plan(&config(16 * MIB, 0x3000), kernel_header).unwrap();
            assert_eq!(layout.kernel_ipa, RAM_BASE + DEFAULT_TEXT_OFFSET);
            assert_eq!(layout.kernel_size, 0x3000, "the file size");
        }
    }

    #[test]
    fn the_file_size_counts_when_image_size_is_smaller() {
        let layout = plan(&config(16 * MIB, 0x5000), &header(0, 0x1000)).unwrap();
        assert_eq!(layout.kernel_size, 0x5000);
    }

    /// `config` with neither PV-lock records nor PV time: no PV area.
    fn without_pv(mut vm: VmConfig) -> VmConfig {
        vm.pv_lock = None;
        vm.pv_time = false;
        vm
    }

    #[test]
    fn the_initrd_sits_page_aligned_right_below_the_pv_area() {
        let mut vm = config(64 * MIB, 0x10_0000);
        vm.initrd = Some(MemRange::new(0x4400_0000, 0x12_3456));
        let layout = plan(&vm, &header(0, 0x20_0000)).unwrap();
        let initrd = layout.initrd.unwrap();
        let area = layout.pv_area.unwrap();
        assert_eq!(initrd.size, 0x12_3456);
        assert_eq!(initrd.base % PAGE_SIZE, 0);
        assert!(initrd.end() <= area.base);
        assert!(area.base - initrd.end() < PAGE_SIZE);
        assert_eq!(area.end(), layout.dtb_ipa);
        assert_eq!(layout.dtb_ipa, 0x4000_0000 + 62 * MIB);
    }

    #[test]
    fn without_a_pv_area_the_initrd_sits_right_below_the_device_tree() {
        let mut vm = without_pv(config(64 * MIB, 0x10_0000));
        vm.initrd = Some(MemRange::new(0x4400_0000, 0x12_3456));
        let layout = plan(&vm, &header(0, 0x20_0000)).unwrap();
        assert_eq!(layout.pv_area, None);
        let initrd = layout.initrd.unwrap();
        assert_eq!(initrd.base % PAGE_SIZE, 0);
        assert!(initrd.end() <= layout.dtb_ipa);
        assert!(layout.dtb_ipa - initrd.end() < PAGE_SIZE);
    }

    #[test]
    fn the_pv_area_size_follows_the_pv_options() {
        let page = PAGE_SIZE;
        // (vcpus, pv-lock, pv-time) -> (lock bytes, time bytes, area bytes)
        let cases = [
            (1, Some(Variant::SeedV2), true, (64, 64, page)),
            (4, Some(Variant::SeedV3), false, (256, 0, page)),
            (4, None, true, (0, 256, page)),
            // Guest-allocated variants need no room of the hypervisor's.
            (4, Some(Variant::OpenEuler), true, (0, 256, page)),
            (4, Some(Variant::Anolis), false, (0, 0, 0)),
            (4, None, false, (0, 0, 0)),
            (32, Some(Variant::SeedV2), true, (2048, 2048, page)),
            (33, Some(Variant::SeedV2), true, (2112, 2112, 2 * page)),
            (64, Some(Variant::SeedV3), true, (4096, 4096, 2 * page)),
            (64, Some(Variant::SeedV2), false, (4096, 0, page)),
        ];
        for (vcpus, pv_lock, pv_time, (lock, time, area)) in cases {
            let mut vm = config(64 * MIB, 0x1000);
            vm.vcpus = vcpus;
            vm.pv_lock = pv_lock;
            vm.pv_time = pv_time;
            let what = format!("{vcpus} vCPUs, {pv_lock:?}, pv-time {pv_time}");
            assert_eq!(pv_records(&vm), (lock, time), "{what}");
            let layout = plan(&vm, &[]).unwrap();
            assert_eq!(layout.pv_area.map_or(0, |a| a.size), area, "{what}");
            if let Some(area) = layout.pv_area {
                assert_eq!(area.end(), layout.dtb_ipa, "{what}");
                assert_eq!(area.base % PAGE_SIZE, 0, "{what}");
                assert!(area.size >= lock + time, "{what}");
            }
        }
    }

    #[test]
    fn in_a_large_vm_the_initrd_stays_in_the_first_32_gib() {
        let mut vm = config(64 << 30, 0x10_0000);
        vm.initrd = Some(MemRange::new(0x4400_0000, 0x1000));
        let layout = plan(&vm, &[]).unwrap();
        assert_eq!(layout.dtb_ipa, RAM_BASE + (64 << 30) - 2 * MIB);
        assert_eq!(layout.pv_area.unwrap().end(), layout.dtb_ipa);
        assert_eq!(layout.initrd.unwrap().end(), RAM_BASE + (32 << 30));
    }

    #[test]
    fn everything_fits_exactly() {
        // 4 MiB: kernel in the first 2 MiB, DT in the second.
        let vm = without_pv(config(4 * MIB, 0x1000));
        let layout = plan(&vm, &header(0, 2 * MIB)).unwrap();
        assert_eq!(layout.kernel().end(), layout.dtb_ipa);
        let mut vm = without_pv(config(4 * MIB, 0x1000));
        vm.initrd = Some(MemRange::new(0x4400_0000, MIB));
        let layout = plan(&vm, &header(0, MIB)).unwrap();
        assert_eq!(layout.kernel().end(), layout.initrd.unwrap().base);

        // With a PV area, one page less for the kernel.
        let vm = config(4 * MIB, 0x1000);
        let layout = plan(&vm, &header(0, 2 * MIB - PAGE_SIZE)).unwrap();
        assert_eq!(layout.kernel().end(), layout.pv_area.unwrap().base);
        let err = plan(&vm, &header(0, 2 * MIB - PAGE_SIZE + 1)).unwrap_err();
        assert_eq!(err.property, Some("memory"));
        assert!(
            err.reason
                .contains("the PV area at [0x401ff000, 0x40200000)"),
            "{err}"
        );
        let mut vm = config(4 * MIB, 0x1000);
        vm.initrd = Some(MemRange::new(0x4400_0000, MIB));
        let layout = plan(&vm, &header(0, MIB - PAGE_SIZE)).unwrap();
        let initrd = layout.initrd.unwrap();
        assert_eq!(layout.kernel().end(), initrd.base);
        assert_eq!(initrd.end(), layout.pv_area.unwrap().base);
    }

    #[test]
    fn too_little_memory_blames_memory() {
        // 2 MiB is the device tree slot alone.
        let err = plan(&without_pv(config(2 * MIB, 0x1000)), &[]).unwrap_err();
        assert_eq!(err.node, "/chosen/vm@0");
        assert_eq!(err.property, Some("memory"));
        assert_eq!(
            err.to_string(),
            "device tree node /chosen/vm@0, property \"memory\": 0x200000 bytes of RAM \
             cannot hold the kernel at [0x40080000, 0x40081000) below the device tree \
             at [0x40000000, 0x40200000)"
        );
        // With a PV area, that is what does not fit first.
        let err = plan(&config(2 * MIB, 0x1000), &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "device tree node /chosen/vm@0, property \"memory\": 0x200000 bytes of RAM \
             cannot hold the 0x1000-byte PV area below the device tree at [0x40000000, 0x40200000)"
        );
        // image_size larger than RAM.
        let err = plan(&config(16 * MIB, 0x1000), &header(0, 15 * MIB)).unwrap_err();
        assert_eq!(err.property, Some("memory"));
        // Kernel + initrd + DT one byte too many.
        let mut vm = without_pv(config(8 * MIB, 0x1000));
        vm.initrd = Some(MemRange::new(0x4400_0000, 4 * MIB + 1));
        let err = plan(&vm, &header(0, 2 * MIB)).unwrap_err();
        assert_eq!(err.property, Some("memory"));
        assert!(err.reason.contains("initrd"), "{err}");
        // Kernel + initrd + PV area + DT one byte too many.
        let mut vm = config(8 * MIB, 0x1000);
        vm.initrd = Some(MemRange::new(0x4400_0000, 4 * MIB - PAGE_SIZE + 1));
        let err = plan(&vm, &header(0, 2 * MIB)).unwrap_err();
        assert_eq!(
            err.reason,
            "0x800000 bytes of RAM cannot hold the kernel at [0x40000000, 0x40200000), \
             the initrd at [0x401ff000, 0x405fe001) and the PV area at [0x405ff000, 0x40600000) \
             below the device tree at [0x40600000, 0x40800000)"
        );
        vm.initrd = Some(MemRange::new(0x4400_0000, 4 * MIB - PAGE_SIZE));
        assert!(plan(&vm, &header(0, 2 * MIB)).is_ok());
        // An initrd larger than RAM.
        vm.initrd = Some(MemRange::new(0x4400_0000, 64 * MIB));
        let err = plan(&vm, &[]).unwrap_err();
        assert_eq!(err.property, Some("memory"));
        assert!(
            err.reason.contains("the PV area and the device tree"),
            "{err}"
        );
    }

    /// Whatever the options, a layout that succeeds keeps the kernel, the
    /// initrd, the PV area and the device tree inside RAM and apart.
    #[test]
    fn the_pieces_never_overlap() {
        let options = [
            (Some(Variant::SeedV2), true),
            (Some(Variant::SeedV3), false),
            (Some(Variant::OpenEuler), true),
            (Some(Variant::Anolis), false),
            (None, true),
            (None, false),
        ];
        let memories = [2 * MIB, 4 * MIB, 6 * MIB, 8 * MIB, 64 * MIB];
        let vcpu_counts = [1, 4, 32, 33, 64];
        let initrds = [None, Some(1), Some(PAGE_SIZE), Some(MIB + 3), Some(3 * MIB)];
        let image_sizes = [0, 0x1000, MIB, 2 * MIB - PAGE_SIZE, 2 * MIB, 5 * MIB];
        let mut planned = 0;
        let cases = memories.into_iter().flat_map(|memory| {
            vcpu_counts.into_iter().flat_map(move |vcpus| {
                options.into_iter().flat_map(move |option| {
                    initrds.into_iter().flat_map(move |initrd| {
                        image_sizes
                            .into_iter()
                            .map(move |image_size| (memory, vcpus, option, initrd, image_size))
                    })
                })
            })
        });
        for (memory, vcpus, (pv_lock, pv_time), initrd, image_size) in cases {
            let mut vm = config(memory, 0x1000);
            vm.vcpus = vcpus;
            vm.pv_lock = pv_lock;
            vm.pv_time = pv_time;
            vm.initrd = initrd.map(|size| MemRange::new(0x4400_0000, size));
            let Ok(layout) = plan(&vm, &header(0, image_size)) else {
                continue;
            };
            planned += 1;
            assert_eq!(layout.pv_area.is_some(), pv_records(&vm) != (0, 0));
            let pieces: Vec<MemRange> = [
                Some(layout.kernel()),
                layout.initrd,
                layout.pv_area,
                Some(layout.dtb_slot()),
            ]
            .into_iter()
            .flatten()
            .collect();
            for (at, piece) in pieces.iter().enumerate() {
                assert!(
                    piece.base >= layout.ram.base && piece.end() <= layout.ram.end(),
                    "{piece:x?} outside RAM in {layout:x?}"
                );
                for other in &pieces[at + 1..] {
                    assert!(
                        !piece.overlaps(other),
                        "{piece:x?} and {other:x?} overlap in {layout:x?}"
                    );
                }
            }
        }
        assert!(planned > 1000, "only {planned} layouts fitted");
    }

    #[test]
    fn bad_headers_and_configs_are_errors() {
        let err = plan(&config(16 * MIB, 0x1000), &header(0x8_0002, 0x1000)).unwrap_err();
        assert_eq!(err.property, Some("kernel"));
        let err = plan(&config(16 * MIB, 0x1000), &header(u64::MAX - 3, 0x1000)).unwrap_err();
        assert_eq!(err.property, Some("kernel"));
        let err = plan(&config(16 * MIB, 0x1000), &header(0, u64::MAX)).unwrap_err();
        assert_eq!(err.property, Some("kernel"));

        let mut vm = config(16 * MIB, 0x1000);
        vm.vcpus = 65;
        assert_eq!(plan(&vm, &[]).unwrap_err().property, Some("vcpus"));
        vm.vcpus = 0;
        assert_eq!(plan(&vm, &[]).unwrap_err().property, Some("vcpus"));
        for memory in [0, MIB, 1 << 39] {
            let err = plan(&config(memory, 0x1000), &[]).unwrap_err();
            assert_eq!(err.property, Some("memory"), "{memory:#x}");
        }
        // The largest RAM the IPA space holds.
        let layout = plan(&config((1 << 39) - RAM_BASE, 0x1000), &[]).unwrap();
        assert_eq!(layout.ram.end(), 1 << 39);
    }

    #[test]
    fn the_boot_vcpu_starts_at_the_kernel_with_the_dtb_in_x0() {
        let layout = plan(&config(64 * MIB, 0x1000), &header(0x8_0000, 0x1000)).unwrap();
        let regs = layout.boot_regs();
        assert_eq!(regs.pc, 0x4008_0000);
        assert_eq!(regs.reg(0), layout.dtb_ipa);
        assert!((1..31).all(|n| regs.reg(n) == 0));
        // EL1h (0b0101) with D, A, I, F masked (bits 9..6).
        assert_eq!(regs.pstate, 0x3c5);
    }

    #[test]
    fn mpidrs_follow_qemu_virt() {
        assert_eq!(vcpu_mpidr(0).value(), 0);
        assert_eq!(vcpu_mpidr(15).value(), 0xf);
        assert_eq!(vcpu_mpidr(16).value(), 0x100);
        assert_eq!(vcpu_mpidr(63).value(), 0x30f);
        for index in 0..MAX_VCPUS as u16 {
            assert_eq!(vcpu_index(vcpu_mpidr(index)), Some(index));
        }
        // Past 4096 vCPUs the cluster number carries into Aff2.
        assert_eq!(vcpu_mpidr(4096).value(), 0x1_0000);
        assert_eq!(vcpu_mpidr(u16::MAX).value(), 0xf_ff0f);
        for index in [255 * 16, 4095, 4096, 40_000, u16::MAX] {
            assert_eq!(vcpu_index(vcpu_mpidr(index)), Some(index));
        }
        assert_eq!(vcpu_index(platform::Mpidr::from_raw(0x10)), None);
        assert_eq!(vcpu_index(platform::Mpidr::from_raw(0x10_0000)), None);
        assert_eq!(vcpu_index(platform::Mpidr::from_raw(0x1_0000_0000)), None);
        assert_eq!(
            vcpu_index(platform::Mpidr::from_raw(0xff0f)),
            Some(255 * 16 + 15)
        );
    }

    #[test]
    fn device_windows() {
        assert_eq!(redistributors(1), MemRange::new(0x080a_0000, 0x2_0000));
        assert_eq!(redistributors(64).end(), 0x088a_0000);
        assert_eq!(redistributors(1000), redistributors(64));
        assert_eq!(UART_IRQ.intid(), 33);
        assert_eq!(
            [
                TIMER.secure_phys,
                TIMER.nonsecure_phys,
                TIMER.virt,
                TIMER.hyp_phys
            ]
            .map(Interrupt::intid),
            [29, 30, 27, 26]
        );
    }
}
