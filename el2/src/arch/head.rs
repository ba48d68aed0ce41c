//! The image header and the first instructions each CPU executes.
//!
//! The boot CPU enters at `_head` per the arm64 Image protocol
//! (Documentation/arch/arm64/booting.rst): EL2, MMU and D-cache off,
//! x0 = physical address of the device tree. Secondary CPUs enter at
//! `secondary_entry` from PSCI CPU_ON with MMU off and x0 = the context id,
//! which is their logical CPU number.
//!
//! The header and the steps every image takes are `boot`'s, shared with
//! the test guests (`boot::image`, `boot::entry`, `boot::stacks`,
//! `boot::mmu`); what is el2's own here is the exception level (EL2, or
//! park), SCTLR_EL2's MMU-off value, which Rust functions run, and the
//! EFI stage. Before any Rust code runs, the boot CPU invalidates stale
//! cache lines over the image (`boot_invalidate_image`), applies its own
//! R_AARCH64_RELATIVE relocations (`boot_relocate`: the image is a
//! position-independent executable linked at 0) and zeroes .bss
//! (`boot_zero_bss`). Every CPU then switches to its own stacks
//! (`boot_set_stacks`): ordinary code runs on SP_EL0 (the thread stack),
//! and exceptions taken at EL2 switch to SP_EL2 (the exception stack), so
//! a thread-stack overflow is reported from a good stack.
//!
//! # The image as an EFI application
//!
//! Like Linux's arm64 Image with its EFI stub, the image is also a PE/COFF
//! executable that UEFI firmware starts (`\EFI\BOOT\BOOTAA64.EFI`), and
//! the header that says so is here, in assembly, next to the arm64 Image
//! header it shares the first page with: every field is a constant the
//! linker computes (`__pe_*` in linker.ld), so the ELF for gdb, the raw
//! image xtask packs and the EFI application are the same bytes, and
//! `xtask/src/image.rs` checks both headers against the ELF at pack time.
//!
//! - `code0` is an instruction whose encoding starts with the bytes "MZ",
//!   the DOS header's magic that PE/COFF requires at offset 0
//!   (Microsoft PE/COFF specification, "MS-DOS Stub"): `add x13, x18,
//!   #0x16` is 0x91005a4d, harmless for a loader that jumps to offset 0
//!   (booting.rst gives x13 no meaning); `code1` branches to the entry.
//!   The DOS header's `e_lfanew` at 0x3c is the Image header's `res5`
//!   (booting.rst reserves it for exactly this), pointing at the PE
//!   signature right after the 64-byte Image header: `boot`'s header
//!   macro writes the Image header in `.text.head` with `res5` =
//!   `__pe_header_offset`, and the PE header below is `.text.head.pe`,
//!   which linker.ld places right after it.
//! - PE32+ for AArch64 (machine 0xaa64), subsystem EFI application, image
//!   base 0, 4 KiB section and file alignment. Two sections cover the
//!   whole footprint: `.text` (code, read/execute) from the second page to
//!   `__text_end`, `.data` (read/write) from there to the end of the heap,
//!   whose raw data (rodata, data) ends on a page boundary; `.bss`, the
//!   stacks and the heap are its zero-filled tail, so SizeOfImage is the
//!   Image header's `image_size` and the firmware reserves the same
//!   footprint as any other loader.
//! - Relocations: the image relocates itself (`boot_relocate`), so it has
//!   no `.reloc` section and no base-relocation directory, and it does
//!   *not* set IMAGE_FILE_RELOCS_STRIPPED: that flag would tell the
//!   firmware to load it only at ImageBase (0), which fails; without it a
//!   loader may place the image anywhere and has nothing to apply (edk2's
//!   PE loader, in QEMU's AAVMF, does exactly that). The code is
//!   position-independent and no relocation touches `.text` (xtask
//!   checks), which the firmware may map read-only.
//! - The entry point is `efi_entry` (UEFI 2.10 section 2.3.6, "AArch64
//!   Platforms": x0 = ImageHandle, x1 = SystemTable, MMU on with an
//!   identity map, return address in x30). It relocates the image in
//!   place (the caches are on: nothing to invalidate), zeroes .bss and
//!   calls `arch::efi::efi_main` on the firmware's stack. `efi_main`
//!   either returns an EFI status to the firmware or, after
//!   ExitBootServices(), jumps through `efi_handover` to `primary_entry`
//!   with x0 = the handoff block: from there on it is the ordinary boot.

use super::mmu;
use aarch64_cpu::registers::{CurrentEL, SCTLR_EL2};
use boot::image::FLAGS;

use core::arch::global_asm;

/// Image header `flags`: little-endian, 4 KiB pages, the 2 MiB aligned
/// base as close as possible to the start of DRAM (booting.rst, bit 3 = 0).
const IMAGE_FLAGS: u64 = FLAGS::BE::Little.value
    | FLAGS::PAGE_SIZE::K4.value
    | FLAGS::PHYS_PLACEMENT::NearDramBase.value;
/// CurrentEL when running at EL2.
const CURRENT_EL_EL2: u64 = CurrentEL::EL::EL2.value;

/// `IMAGE_FILE_MACHINE_ARM64` (PE/COFF specification, "Machine Types").
const PE_MACHINE_ARM64: u16 = 0xaa64;
/// COFF characteristics (PE/COFF specification, "Characteristics"):
/// IMAGE_FILE_EXECUTABLE_IMAGE | IMAGE_FILE_LARGE_ADDRESS_AWARE |
/// IMAGE_FILE_DEBUG_STRIPPED; *not* IMAGE_FILE_RELOCS_STRIPPED.
const PE_COFF_CHARACTERISTICS: u16 = 0x0002 | 0x0020 | 0x0200;
/// Optional header magic of PE32+.
const PE32_PLUS_MAGIC: u16 = 0x20b;
/// `IMAGE_SUBSYSTEM_EFI_APPLICATION`.
const PE_SUBSYSTEM_EFI_APPLICATION: u16 = 10;
/// `IMAGE_DLLCHARACTERISTICS_NX_COMPAT`: no section is both writable and
/// executable, and the image never executes its data.
const PE_DLL_CHARACTERISTICS: u16 = 0x0100;
/// Section and file alignment: 4 KiB, UEFI's page.
const PE_ALIGNMENT: u32 = 4096;
/// Data directories in the optional header (all empty, the
/// base-relocation one included).
const PE_DATA_DIRECTORIES: u32 = 16;
/// `.text`: IMAGE_SCN_CNT_CODE | IMAGE_SCN_MEM_EXECUTE | IMAGE_SCN_MEM_READ.
const PE_TEXT_CHARACTERISTICS: u32 = 0x0000_0020 | 0x2000_0000 | 0x4000_0000;
/// `.data`: IMAGE_SCN_CNT_INITIALIZED_DATA | IMAGE_SCN_MEM_READ | IMAGE_SCN_MEM_WRITE.
const PE_DATA_CHARACTERISTICS: u32 = 0x0000_0040 | 0x4000_0000 | 0x8000_0000;
/// What `efi_entry` returns when the image cannot relocate itself.
const EFI_LOAD_ERROR: u64 = el2::bringup::efi::Status::LOAD_ERROR.0 as u64;
/// SCTLR_EL2 bits `efi_handover` clears: MMU, data and instruction caches.
const SCTLR_EL2_MMU_CACHES: u64 =
    SCTLR_EL2::M::Enable.value | SCTLR_EL2::C::Cacheable.value | SCTLR_EL2::I::Cacheable.value;

boot::arm64_image_header!(
    entry: primary_entry,
    flags: IMAGE_FLAGS,
    pe_header: __pe_header_offset,
);

global_asm!(
    r#"
    // PE/COFF signature and COFF file header, right after the Image
    // header (linker.ld: `.text.head`, then `.text.head.pe`).
    .section .text.head.pe, "a"
    .balign 8
    .global __pe_header
__pe_header:
    .ascii  "PE\0\0"
    .short  {pe_machine}            // Machine
    .short  2                       // NumberOfSections
    .long   0                       // TimeDateStamp
    .long   0                       // PointerToSymbolTable
    .long   0                       // NumberOfSymbols
    .short  .Lpe_sections - .Lpe_optional   // SizeOfOptionalHeader
    .short  {pe_coff_characteristics}

    // Optional header, PE32+ (standard and Windows-specific fields).
.Lpe_optional:
    .short  {pe32_plus}             // Magic
    .byte   0, 0                    // Major/MinorLinkerVersion
    .long   __pe_text_size          // SizeOfCode
    .long   __pe_data_file_size     // SizeOfInitializedData
    .long   __pe_bss_size           // SizeOfUninitializedData
    .long   __pe_entry              // AddressOfEntryPoint: efi_entry
    .long   __pe_headers_size       // BaseOfCode
    .quad   0                       // ImageBase
    .long   {pe_alignment}          // SectionAlignment
    .long   {pe_alignment}          // FileAlignment
    .short  0, 0                    // Major/MinorOperatingSystemVersion
    .short  0, 0                    // Major/MinorImageVersion
    .short  0, 0                    // Major/MinorSubsystemVersion
    .long   0                       // Win32VersionValue
    .long   __image_size            // SizeOfImage
    .long   __pe_headers_size       // SizeOfHeaders
    .long   0                       // CheckSum
    .short  {pe_subsystem}          // Subsystem
    .short  {pe_dll_characteristics}
    .quad   0                       // SizeOfStackReserve
    .quad   0                       // SizeOfStackCommit
    .quad   0                       // SizeOfHeapReserve
    .quad   0                       // SizeOfHeapCommit
    .long   0                       // LoaderFlags
    .long   {pe_data_directories}   // NumberOfRvaAndSizes
    .fill   {pe_data_directories}, 8, 0   // data directories, all empty

    // Section table.
.Lpe_sections:
    .ascii  ".text\0\0\0"
    .long   __pe_text_size          // VirtualSize
    .long   __pe_headers_size       // VirtualAddress
    .long   __pe_text_size          // SizeOfRawData
    .long   __pe_headers_size       // PointerToRawData
    .long   0                       // PointerToRelocations
    .long   0                       // PointerToLinenumbers
    .short  0                       // NumberOfRelocations
    .short  0                       // NumberOfLinenumbers
    .long   {pe_text_characteristics}

    .ascii  ".data\0\0\0"
    .long   __pe_data_size          // VirtualSize: to the end of the heap
    .long   __pe_data_rva           // VirtualAddress
    .long   __pe_data_file_size     // SizeOfRawData: rodata and data
    .long   __pe_data_rva           // PointerToRawData
    .long   0                       // PointerToRelocations
    .long   0                       // PointerToLinenumbers
    .short  0                       // NumberOfRelocations
    .short  0                       // NumberOfLinenumbers
    .long   {pe_data_characteristics}
"#,
    pe_machine = const PE_MACHINE_ARM64,
    pe_coff_characteristics = const PE_COFF_CHARACTERISTICS,
    pe32_plus = const PE32_PLUS_MAGIC,
    pe_alignment = const PE_ALIGNMENT,
    pe_subsystem = const PE_SUBSYSTEM_EFI_APPLICATION,
    pe_dll_characteristics = const PE_DLL_CHARACTERISTICS,
    pe_data_directories = const PE_DATA_DIRECTORIES,
    pe_text_characteristics = const PE_TEXT_CHARACTERISTICS,
    pe_data_characteristics = const PE_DATA_CHARACTERISTICS,
);

global_asm!(
    r#"
    .section .text.boot, "ax"
    .global {primary_entry}
{primary_entry}:
    mov     x19, x0
    msr     daifset, #0xf
    mrs     x1, CurrentEL
    cmp     x1, #{current_el_el2}
    b.ne    .Lpark
    ldr     x1, ={sctlr_mmu_off}
    msr     sctlr_el2, x1
    isb
    bl      boot_invalidate_image
    bl      boot_relocate
    cbnz    x0, .Lpark              // nothing but RELATIVE is expected in a static PIE
    bl      boot_zero_bss
    mov     x0, #0
    bl      boot_set_stacks
    mov     x0, x19
    bl      {primary_main}
.Lpark:
    wfe
    b       .Lpark

// The PE/COFF entry point (see the module docs). Runs on the firmware's
// stack, with its MMU and caches on (so nothing to invalidate), and
// returns to it unless efi_main hands over to primary_entry.
    .global {efi_entry}
{efi_entry}:
    stp     x29, x30, [sp, #-32]!
    mov     x29, sp
    stp     x19, x20, [sp, #16]
    mov     x19, x0
    mov     x20, x1
    bl      boot_relocate
    cbnz    x0, 0f
    bl      boot_zero_bss
    mov     x0, x19
    mov     x1, x20
    bl      {efi_main}
    b       1f
0:  ldr     x0, ={efi_load_error}
1:  ldp     x19, x20, [sp, #16]
    ldp     x29, x30, [sp], #32
    ret

// x0 = the handoff block, x1 = the copy of .data efi_main took before it
// changed anything there. After ExitBootServices(): puts .data back as the
// image had it, cleans the image's file-backed part to the point of
// coherency (the caller cleaned the handoff block and the payloads), turns
// the MMU and the caches off, invalidates the instruction cache and the
// EL2 TLBs and enters the ordinary boot at primary_entry, which drops
// whatever else of the image is still in the caches. Uses no stack: with
// the caches off, the firmware's stack would be read behind dirty lines.
    .global {efi_handover}
{efi_handover}:
    msr     daifset, #0xf
    adrp    x2, __data_start
    add     x2, x2, :lo12:__data_start
    adrp    x3, __data_end
    add     x3, x3, :lo12:__data_end
0:  cmp     x2, x3
    b.hs    1f
    ldp     x4, x5, [x1], #16
    stp     x4, x5, [x2], #16
    b       0b
1:  adrp    x2, __image_start
    add     x2, x2, :lo12:__image_start
    mrs     x4, ctr_el0
    ubfx    x4, x4, #16, #4
    mov     x5, #4
    lsl     x5, x5, x4              // bytes per D-cache line
2:  dc      cvac, x2
    add     x2, x2, x5
    cmp     x2, x3                  // x3 = __data_end: text, rodata, data
    b.lo    2b
    dsb     sy
    mrs     x2, sctlr_el2
    ldr     x3, ={sctlr_mmu_caches}
    bic     x2, x2, x3
    msr     sctlr_el2, x2
    isb
    ic      iallu
    tlbi    alle2
    dsb     sy
    isb
    b       {primary_entry}
    .ltorg

// x0 = logical CPU number. The boot CPU wrote the final translation
// settings and cleaned them to the point of coherency: turn the MMU on
// before touching any memory through the caches, then take this CPU's
// stacks.
    .global {secondary_entry}
{secondary_entry}:
    msr     daifset, #0xf
    mov     x20, x0
    ldr     x1, ={sctlr_mmu_off}
    msr     sctlr_el2, x1
    isb
    adrp    x0, {mmu_params}
    add     x0, x0, :lo12:{mmu_params}
    bl      boot_enable_mmu_el2
    mov     x0, x20
    bl      boot_set_stacks
    mov     x0, x20
    bl      {secondary_main}
    b       .Lpark
    .ltorg
"#,
    primary_entry = sym primary_entry,
    secondary_entry = sym secondary_entry,
    efi_entry = sym efi_entry,
    efi_handover = sym efi_handover,
    efi_main = sym super::efi::efi_main,
    primary_main = sym super::primary_main,
    secondary_main = sym super::bringup::secondary_main,
    mmu_params = sym mmu::SECONDARY_MMU_PARAMS,
    sctlr_mmu_off = const mmu::SCTLR_EL2_MMU_OFF,
    current_el_el2 = const CURRENT_EL_EL2,
    efi_load_error = const EFI_LOAD_ERROR,
    sctlr_mmu_caches = const SCTLR_EL2_MMU_CACHES,
);

unsafe extern "C" {
    fn primary_entry() -> !;
    /// The PE/COFF entry point (AddressOfEntryPoint).
    fn efi_entry() -> !;
    /// Leaves the firmware's environment for the ordinary boot with x0 =
    /// `handoff`; `data_copy` is what .data held when `efi_main` started.
    /// Interrupts masked, MMU and caches off from its first instructions
    /// on: the caller must have cleaned what primary_entry reads (the
    /// handoff block, the payloads) to the point of coherency.
    pub fn efi_handover(handoff: u64, data_copy: *const u8) -> !;
    /// Where PSCI CPU_ON starts a secondary CPU; x0 = logical CPU number.
    pub fn secondary_entry() -> !;
}
