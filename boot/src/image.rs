//! The arm64 Image header (Linux Documentation/arch/arm64/booting.rst,
//! "Call the kernel image", the 64-byte header) and where the running
//! image's sections are.
//!
//! Both images use one header layout, `arm64_image_header!`: a loader
//! (QEMU `-kernel`, U-Boot `booti`, the hypervisor for a VM) reads
//! `text_offset`, `image_size` and `flags` from it and jumps to its first
//! byte. What differs between them is a parameter:
//!
//! - a plain Image (the guests): code0 branches to the entry code, code1
//!   and `res5` are zero;
//! - an Image that is also a PE/COFF EFI application (el2, like Linux with
//!   its EFI stub): code0 is an instruction whose encoding starts with
//!   "MZ" (`add x13, x18, #0x16`, 0x91005a4d; booting.rst gives x13 no
//!   meaning), code1 branches to the entry code, and `res5` holds the
//!   offset of the PE header (the MS-DOS header's `e_lfanew`), which the
//!   image itself writes elsewhere.
//!
//! `text_offset` is [`TEXT_OFFSET`] for both; `image_size` is the linker
//! script's `__image_size`, so it covers `.bss` and the stacks (xtask
//! checks it against the ELF when it packs an image).

use tock_registers::register_bitfields;

/// `text_offset`: the image is placed this far above a 2 MiB aligned base
/// (0x4008_0000 on QEMU `virt`, whose RAM starts at 0x4000_0000).
pub const TEXT_OFFSET: u64 = 0x8_0000;

/// `magic`: "ARM\x64", little-endian.
pub const MAGIC: u32 = u32::from_le_bytes(*b"ARM\x64");

register_bitfields! {u64,
    /// The header's `flags` (booting.rst, header notes).
    pub FLAGS [
        /// Bit 0: the kernel's endianness.
        BE OFFSET(0) NUMBITS(1) [
            Little = 0,
            Big = 1,
        ],
        /// Bits 1-2: the kernel's page size.
        PAGE_SIZE OFFSET(1) NUMBITS(2) [
            Unspecified = 0,
            K4 = 1,
            K16 = 2,
            K64 = 3,
        ],
        /// Bit 3: where the 2 MiB aligned base may be: as close as
        /// possible to the base of DRAM, or anywhere (within the 48-bit
        /// physical range).
        PHYS_PLACEMENT OFFSET(3) NUMBITS(1) [
            NearDramBase = 0,
            Anywhere = 1,
        ],
    ]
}

/// The run-time addresses of the section boundaries both linker scripts
/// define (the image is linked at 0 and relocated at boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sections {
    /// `__image_start`: the Image header, the image's first byte.
    pub start: u64,
    /// `__text_end`: `.text` is `[start, text_end)`.
    pub text_end: u64,
    /// `__rodata_end`: `.rodata`, `.rela.dyn`, `.got` are `[text_end, rodata_end)`.
    pub rodata_end: u64,
    /// `__bss_end`: `.data` and `.bss` end here.
    pub bss_end: u64,
    /// `__image_end`: the end of the footprint `image_size` covers.
    pub end: u64,
}

/// Defines `_head`, the arm64 Image header, in section `.text.head` (which
/// the linker script places at the image's first byte).
///
/// `entry` is the entry code the header branches to; `flags` the header's
/// [`FLAGS`]. With `pe_header`, the image is also an EFI application: code0
/// is "MZ" and `res5` is the named (absolute, linker-computed) symbol, the
/// PE header's offset from `_head`.
///
/// ```ignore
/// boot::arm64_image_header!(entry: primary_entry, flags: IMAGE_FLAGS);
/// boot::arm64_image_header!(entry: primary_entry, flags: IMAGE_FLAGS, pe_header: __pe_header_offset);
/// ```
#[cfg(target_os = "none")]
#[macro_export]
macro_rules! arm64_image_header {
    (entry: $entry:path, flags: $flags:expr $(,)?) => {
        $crate::__arm64_image_header!(
            "    b       {entry}                 // code0",
            "    .long   0                       // code1",
            "    .long   0                       // res5",
            $entry,
            $flags
        );
    };
    (entry: $entry:path, flags: $flags:expr, pe_header: $pe_header:ident $(,)?) => {
        $crate::__arm64_image_header!(
            "    add     x13, x18, #0x16         // code0: 0x91005a4d, \"MZ\"",
            "    b       {entry}                 // code1",
            concat!(
                "    .long   ",
                stringify!($pe_header),
                "   // res5: PE/COFF e_lfanew"
            ),
            $entry,
            $flags
        );
    };
}

#[cfg(target_os = "none")]
#[doc(hidden)]
#[macro_export]
macro_rules! __arm64_image_header {
    ($code0:expr, $code1:expr, $res5:expr, $entry:path, $flags:expr) => {
        core::arch::global_asm!(
            "    .section .text.head, \"ax\"",
            "    .global _head",
            "_head:",
            $code0,
            $code1,
            "    .quad   {text_offset}           // text_offset",
            "    .quad   __image_size            // image_size",
            "    .quad   {flags}                 // flags",
            "    .quad   0                       // res2",
            "    .quad   0                       // res3",
            "    .quad   0                       // res4",
            "    .long   {magic}                 // magic: \"ARM\\x64\"",
            $res5,
            entry = sym $entry,
            text_offset = const $crate::image::TEXT_OFFSET,
            flags = const $flags,
            magic = const $crate::image::MAGIC,
        );
    };
}

#[cfg(target_os = "none")]
unsafe extern "C" {
    static __image_start: u8;
    static __text_end: u8;
    static __rodata_end: u8;
    static __bss_end: u8;
    static __image_end: u8;
}

/// Where the running image's sections are.
#[cfg(target_os = "none")]
pub fn sections() -> Sections {
    Sections {
        start: base(),
        text_end: (&raw const __text_end) as u64,
        rodata_end: (&raw const __rodata_end) as u64,
        bss_end: (&raw const __bss_end) as u64,
        end: (&raw const __image_end) as u64,
    }
}

/// Where the image runs: its ELF addresses plus this are run-time
/// addresses (for `addr2line` in fault reports).
#[cfg(target_os = "none")]
pub fn base() -> u64 {
    (&raw const __image_start) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_of_both_images() {
        // el2: little-endian, 4 KiB pages, base near the start of DRAM.
        let el2 = FLAGS::BE::Little.value
            | FLAGS::PAGE_SIZE::K4.value
            | FLAGS::PHYS_PLACEMENT::NearDramBase.value;
        assert_eq!(el2, 0b0010);
        // The guests (and Linux): the same, placed anywhere.
        let guests = el2 | FLAGS::PHYS_PLACEMENT::Anywhere.value;
        assert_eq!(guests, 0b1010);
    }

    #[test]
    fn magic_is_arm_d() {
        // The constant is built from the bytes "ARM\x64"; booting.rst gives
        // the number: `magic = 0x644d5241`.
        assert_eq!(MAGIC, 0x644d_5241);
    }
}
