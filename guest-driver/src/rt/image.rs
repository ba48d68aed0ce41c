//! Where the running image's sections are (the image is linked at 0 and
//! relocated at boot, so these are run-time addresses).

use crate::devicetree::MemRange;

unsafe extern "C" {
    static __image_start: u8;
    static __text_end: u8;
    static __rodata_end: u8;
    static __image_end: u8;
}

/// The image's parts, each page aligned by the linker script.
pub struct ImageLayout {
    /// The whole footprint: what the Image header's image_size covers.
    pub image: MemRange,
    /// `.text` (starts with the header).
    pub text: MemRange,
    /// `.rodata`, relocations, GOT.
    pub rodata: MemRange,
    /// `.data`, `.bss`, the stacks.
    pub data: MemRange,
}

fn range(start: u64, end: u64) -> MemRange {
    MemRange::new(start, end - start)
}

/// The running image's layout.
pub fn layout() -> ImageLayout {
    let start = (&raw const __image_start) as u64;
    let text_end = (&raw const __text_end) as u64;
    let rodata_end = (&raw const __rodata_end) as u64;
    let end = (&raw const __image_end) as u64;
    ImageLayout {
        image: range(start, end),
        text: range(start, text_end),
        rodata: range(text_end, rodata_end),
        data: range(rodata_end, end),
    }
}

/// Where the image runs: its ELF addresses plus this are run-time addresses.
pub fn base() -> u64 {
    (&raw const __image_start) as u64
}
