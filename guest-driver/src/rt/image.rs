//! Where the running image's sections are (`boot::image`: the image is
//! linked at 0 and relocated at boot, so these are run-time addresses).

use crate::devicetree::MemRange;

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
    let s = boot::image::sections();
    ImageLayout {
        image: range(s.start, s.end),
        text: range(s.start, s.text_end),
        rodata: range(s.text_end, s.rodata_end),
        data: range(s.rodata_end, s.end),
    }
}

/// Where the image runs: its ELF addresses plus this are run-time addresses.
pub fn base() -> u64 {
    boot::image::base()
}
