//! Building el2 and turning its ELF into the raw, bootable arm64 Image.
//!
//! The image is the bytes of the ELF's `PT_LOAD` segments laid out by
//! virtual address, starting at the lowest one: file-backed parts copied,
//! gaps zero-filled, trailing NOBITS (.bss, stacks) left out. Its first 64
//! bytes must be the arm64 Linux Image header, which both QEMU's `-kernel`
//! and U-Boot's `booti` interpret; [`validate_header`] checks it against the
//! ELF so that a wrong `image_size` (which would let a loader place data
//! over .bss) is caught at build time rather than as a mysterious crash.
//!
//! el2's image is also an EFI application: "MZ" in `code0` and a PE/COFF
//! header at the offset in `res5` (el2/src/arch/head.rs writes it with
//! the linker's help). [`validate_pe`] checks that header against the same
//! image, so that UEFI firmware loads it as QEMU and U-Boot do: the same
//! footprint, sections whose file layout is their memory layout, nothing
//! for the firmware to relocate.
//!
//! A test payload may also be a *raw* image, without the header: QEMU's
//! `-kernel` loader and el2 both place such an image at RAM base + 0x80000
//! and enter it at its first byte (booting.rst's rule for an image without
//! a valid header). [`make_raw_image`] checks that what it writes needs
//! nothing a loader would have to read from a header: no dynamic
//! relocation, nothing past the end of the file. [`read_optional_header`]
//! tells the two kinds apart for any kernel xtask is given.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use crate::{Workspace, setup};

/// The hypervisor is built soft-float: EL2 never touches FP/SIMD registers.
pub const TARGET: &str = "aarch64-unknown-none-softfloat";

/// The arm64 Image header fields (Documentation/arch/arm64/booting.rst).
pub const TEXT_OFFSET: u64 = 0x8_0000;

/// Where the kernel (el2, or the guest with `--bare`) runs on QEMU's virt
/// machine, both with `-kernel` and after U-Boot's `booti`: RAM base plus
/// the header's text_offset. (Guests in VMs run wherever el2 puts them.)
pub const LOAD_ADDR: u64 = crate::vm::RAM_BASE + TEXT_OFFSET;
pub const MAGIC: u32 = 0x644d_5241; // "ARM\x64"
const HEADER_LEN: usize = 64;
/// flags bit 0: the kernel is big-endian.
const FLAG_BIG_ENDIAN: u64 = 1 << 0;
/// flags bits 2:1: the kernel's page size; 0b01 = 4 KiB.
const FLAGS_PAGE_SIZE: u64 = 0b11 << 1;
const FLAGS_PAGE_SIZE_4K: u64 = 0b01 << 1;
/// flags bits booting.rst defines (bit 3: physical placement); the rest
/// are reserved, zero.
const FLAGS_DEFINED: u64 = 0b1111;

/// Refuse to write absurdly large images (e.g. segments linked gigabytes
/// apart), which would otherwise fill the disk with zeros.
const MAX_IMAGE_LEN: u64 = 256 << 20;

/// The el2 ELF and the raw image made from it.
#[derive(Clone, Debug)]
pub struct Artifacts {
    pub elf: PathBuf,
    pub image: PathBuf,
    /// The ELF address of the image's first byte (0 for a position-
    /// independent el2 linked at 0).
    pub link_base: u64,
}

/// Build profile of the el2 binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    Release,
    Debug,
}

impl Profile {
    fn dir(self) -> &'static str {
        match self {
            Profile::Release => "release",
            Profile::Debug => "debug",
        }
    }
}

/// Where the image comes from: built from the workspace, or a prebuilt ELF
/// (`--elf`, e.g. an older build being bisected).
#[derive(Clone, Debug)]
pub enum Source {
    Build(Profile),
    Elf(PathBuf),
}

/// Builds el2 (unless a prebuilt ELF is given), writes the raw image next to
/// the ELF and validates its header. Prints both paths.
pub fn build(ws: &Workspace, source: &Source) -> Result<Artifacts> {
    let elf = match source {
        Source::Build(profile) => {
            setup::ensure_rust_target(ws)?;
            cargo_build_el2(ws, *profile)?
        }
        Source::Elf(path) => {
            ensure!(
                path.is_file(),
                "--elf {}: no such file (give the path of an el2 ELF built for {TARGET})",
                path.display()
            );
            path.clone()
        }
    };
    let image = match source {
        Source::Build(_) => elf.with_extension("bin"),
        // Never write next to someone else's file: keep prebuilt images in
        // the workspace's target dir.
        Source::Elf(path) => {
            let name = path
                .file_name()
                .map_or_else(|| "el2".into(), |n| n.to_string_lossy().into_owned());
            let dir = ws.target_dir().join("xtask");
            fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create directory {}", dir.display()))?;
            dir.join(format!("{name}.bin"))
        }
    };
    let link_base = make_image(&elf, &image)?;
    println!("image: {}", image.display());
    println!("elf:   {}", elf.display());
    Ok(Artifacts {
        elf,
        image,
        link_base,
    })
}

fn cargo_build_el2(ws: &Workspace, profile: Profile) -> Result<PathBuf> {
    let mut cmd = Command::new(ws.cargo());
    cmd.current_dir(&ws.root)
        .args(["build", "-p", "el2", "--target", TARGET]);
    if profile == Profile::Release {
        cmd.arg("--release");
    }
    // Always the workspace's own target dir, whatever CARGO_TARGET_DIR says,
    // so the image lands at a stable path.
    cmd.arg("--target-dir").arg(ws.target_dir());
    let status = cmd.status().context("cannot run cargo to build el2")?;
    ensure!(
        status.success(),
        "building el2 failed ({status}); see the compiler output above"
    );
    let elf = ws.target_dir().join(TARGET).join(profile.dir()).join("el2");
    ensure!(
        elf.is_file(),
        "cargo reported success but {} does not exist",
        elf.display()
    );
    Ok(elf)
}

/// Converts `elf_path` to a raw image at `image_path` and validates it
/// (the arm64 Image header, and the PE/COFF header if it has one).
/// Returns the ELF address of the image's first byte.
pub fn make_image(elf_path: &Path, image_path: &Path) -> Result<u64> {
    let data = fs::read(elf_path).with_context(|| format!("cannot read {}", elf_path.display()))?;
    let image = elf_to_image(&data).with_context(|| {
        format!(
            "cannot make a raw image from {} (is it an {TARGET} ELF?)",
            elf_path.display()
        )
    })?;
    validate_header(&image).with_context(|| {
        format!(
            "{} does not start with a valid arm64 Image header; el2's entry code \
             must begin with the 64-byte header that QEMU and U-Boot require",
            elf_path.display()
        )
    })?;
    validate_pe(&image).with_context(|| {
        format!(
            "{} has \"MZ\" in code0 but not a PE/COFF header UEFI firmware can load \
             (el2/src/arch/head.rs writes it, el2/linker.ld computes its fields)",
            elf_path.display()
        )
    })?;
    write_atomically(image_path, &image.bytes)?;
    Ok(image.base)
}

/// Converts `elf_path`, a payload that has no arm64 Image header, to a
/// raw image at `image_path`, after [`validate_raw`].
pub fn make_raw_image(elf_path: &Path, image_path: &Path) -> Result<()> {
    let data = fs::read(elf_path).with_context(|| format!("cannot read {}", elf_path.display()))?;
    let image = elf_to_image(&data)
        .with_context(|| format!("cannot make a raw image from {}", elf_path.display()))?;
    validate_raw(&image).with_context(|| {
        format!(
            "{} cannot be loaded as a raw image (at RAM base + {TEXT_OFFSET:#x}, entered at \
             its first byte, nothing reserved past its end)",
            elf_path.display()
        )
    })?;
    write_atomically(image_path, &image.bytes)
}

/// Writes `bytes` to `path` through a temporary file: a half-written
/// image must never be booted.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("bin.tmp");
    fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}

/// Checks that a raw image runs as loaders run one without a header:
/// it has no header (else it is an Image, and loaders would read it),
/// applies no dynamic relocation (nothing would; its code must be
/// position independent by construction), and occupies no memory past
/// the file's last byte (loaders keep only the file's bytes free).
pub fn validate_raw(image: &Image) -> Result<()> {
    ensure!(!image.bytes.is_empty(), "the image is empty");
    ensure!(
        image.bytes.get(0x38..0x3c) != Some(MAGIC.to_le_bytes().as_slice()),
        "it has the arm64 Image magic at offset 0x38: it is an Image, not a raw payload"
    );
    ensure!(
        image.dynamic_relocations == 0,
        "it has {} dynamic relocation(s), which nothing applies to a raw image; its code \
         must reach everything PC-relative",
        image.dynamic_relocations
    );
    ensure!(
        image.footprint == image.bytes.len() as u64,
        "it occupies {:#x} bytes in memory but its file only {:#x}: a loader reserves \
         nothing past the end of a raw image, so .bss and stacks must be in the file",
        image.footprint,
        image.bytes.len()
    );
    Ok(())
}

/// A raw image and what the ELF says about its memory layout.
#[derive(Debug)]
pub struct Image {
    pub bytes: Vec<u8>,
    /// Virtual address of the image's first byte (lowest `PT_LOAD` vaddr).
    pub base: u64,
    /// Bytes from `base` to the end of the highest segment in memory,
    /// including NOBITS parts: what `image_size` must cover.
    pub footprint: u64,
    /// Image offsets that a dynamic relocation patches inside an
    /// executable segment (an EFI application must have none: it
    /// relocates itself with its text mapped read-only).
    pub text_relocations: Vec<u64>,
    /// Dynamic relocation entries in all, wherever they patch.
    pub dynamic_relocations: u64,
}

const PT_LOAD: u32 = 1;
const SHT_RELA: u32 = 4;
const SHT_REL: u32 = 9;
const SHF_ALLOC: u64 = 0x2;
const EM_AARCH64: u16 = 183;

#[derive(Clone, Copy, Debug)]
struct Segment {
    offset: u64,
    vaddr: u64,
    filesz: u64,
    memsz: u64,
    flags: u32,
}

/// `p_flags` bit of an executable segment.
const PF_X: u32 = 1;
/// Bytes of one `Elf64_Rela`.
const RELA_ENTRY: u64 = 24;
/// Bytes of one `Elf64_Rel`.
const REL_ENTRY: u64 = 16;

/// Little-endian field reader that reports truncation instead of panicking.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes(&self, off: u64, len: u64, what: &str) -> Result<&[u8]> {
        let start = usize::try_from(off).ok();
        let end = off.checked_add(len).and_then(|e| usize::try_from(e).ok());
        match (start, end) {
            (Some(s), Some(e)) if e <= self.0.len() => Ok(&self.0[s..e]),
            _ => bail!(
                "ELF truncated: {what} at offset {off:#x}+{len:#x} lies beyond the \
                 end of the file ({:#x} bytes)",
                self.0.len()
            ),
        }
    }
    fn u16(&self, off: u64, what: &str) -> Result<u16> {
        let b = self.bytes(off, 2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&self, off: u64, what: &str) -> Result<u32> {
        let b = self.bytes(off, 4, what)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    fn u64(&self, off: u64, what: &str) -> Result<u64> {
        let b = self.bytes(off, 8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
}

/// Lays out the `PT_LOAD` segments of an ELF64 little-endian AArch64 file as
/// a raw image. Also checks that dynamic relocation sections (which the image
/// applies to itself at boot) are inside the copied bytes.
pub fn elf_to_image(data: &[u8]) -> Result<Image> {
    let r = Reader(data);
    ensure!(
        r.bytes(0, 4, "ELF magic")? == b"\x7fELF",
        "not an ELF file (bad magic)"
    );
    ensure!(r.bytes(4, 1, "ELF class")?[0] == 2, "not a 64-bit ELF");
    ensure!(
        r.bytes(5, 1, "ELF data")?[0] == 1,
        "not a little-endian ELF"
    );
    let machine = r.u16(18, "e_machine")?;
    ensure!(
        machine == EM_AARCH64,
        "ELF machine is {machine}, not AArch64 ({EM_AARCH64})"
    );
    let phoff = r.u64(32, "e_phoff")?;
    let shoff = r.u64(40, "e_shoff")?;
    let phentsize = u64::from(r.u16(54, "e_phentsize")?);
    let phnum = u64::from(r.u16(56, "e_phnum")?);
    let shentsize = u64::from(r.u16(58, "e_shentsize")?);
    let shnum = u64::from(r.u16(60, "e_shnum")?);
    let shstrndx = u64::from(r.u16(62, "e_shstrndx")?);
    ensure!(
        phnum == 0 || phentsize >= 56,
        "bad program header size {phentsize}"
    );
    // Bounding the table offsets keeps all the offset arithmetic below far
    // from overflow; reads past the end are reported as truncation.
    let file_len = data.len() as u64;
    ensure!(
        phoff <= file_len && shoff <= file_len,
        "ELF truncated: header tables start beyond the end of the file"
    );

    let mut segments = Vec::new();
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if r.u32(ph, "p_type")? != PT_LOAD {
            continue;
        }
        let seg = Segment {
            flags: r.u32(ph + 4, "p_flags")?,
            offset: r.u64(ph + 8, "p_offset")?,
            vaddr: r.u64(ph + 16, "p_vaddr")?,
            filesz: r.u64(ph + 32, "p_filesz")?,
            memsz: r.u64(ph + 40, "p_memsz")?,
        };
        ensure!(
            seg.filesz <= seg.memsz,
            "PT_LOAD segment {i} has p_filesz {:#x} > p_memsz {:#x}",
            seg.filesz,
            seg.memsz
        );
        ensure!(
            seg.vaddr.checked_add(seg.memsz).is_some(),
            "PT_LOAD segment {i} wraps around the address space"
        );
        r.bytes(seg.offset, seg.filesz, "PT_LOAD segment contents")?;
        if seg.memsz > 0 {
            segments.push(seg);
        }
    }
    ensure!(!segments.is_empty(), "the ELF has no loadable segments");

    let base = segments.iter().map(|s| s.vaddr).min().expect("non-empty");
    let mem_end = segments
        .iter()
        .map(|s| s.vaddr + s.memsz)
        .max()
        .expect("non-empty");
    let file_end = segments
        .iter()
        .filter(|s| s.filesz > 0)
        .map(|s| s.vaddr + s.filesz)
        .max()
        .unwrap_or(base);
    let len = file_end - base;
    ensure!(
        len <= MAX_IMAGE_LEN,
        "the loadable segments span {len:#x} bytes from {base:#x} (more than {MAX_IMAGE_LEN:#x}); \
         check the linker script for segments placed far apart"
    );
    // Every length here is at most MAX_IMAGE_LEN, so the casts are exact.
    let mut bytes = vec![0u8; len as usize];
    for s in segments.iter().filter(|s| s.filesz > 0) {
        let at = (s.vaddr - base) as usize;
        bytes[at..at + s.filesz as usize].copy_from_slice(r.bytes(s.offset, s.filesz, "segment")?);
    }

    // Dynamic relocations are applied by the image to itself: they must be
    // among the bytes the loader copies, not in a NOBITS tail or outside
    // every segment.
    let mut text_relocations = Vec::new();
    let mut dynamic_relocations = 0;
    if shnum > 0 && shoff != 0 {
        ensure!(shentsize >= 64, "bad section header size {shentsize}");
        let strtab_off = if shstrndx < shnum {
            Some(r.u64(shoff + shstrndx * shentsize + 24, "shstrtab offset")?)
        } else {
            None
        };
        for i in 0..shnum {
            let sh = shoff + i * shentsize;
            let kind = r.u32(sh + 4, "sh_type")?;
            let flags = r.u64(sh + 8, "sh_flags")?;
            if !(kind == SHT_RELA || kind == SHT_REL) || flags & SHF_ALLOC == 0 {
                continue;
            }
            let addr = r.u64(sh + 16, "sh_addr")?;
            let size = r.u64(sh + 32, "sh_size")?;
            let name = strtab_off
                .and_then(|t| section_name(&r, t, r.u32(sh, "sh_name").ok()?))
                .unwrap_or_else(|| format!("section {i}"));
            let inside = segments
                .iter()
                .any(|s| addr >= s.vaddr && addr.saturating_add(size) <= s.vaddr + s.filesz);
            ensure!(
                inside || size == 0,
                "dynamic relocation section {name} ({addr:#x}+{size:#x}) is not inside \
                 the file-backed part of a PT_LOAD segment, so the image would not \
                 contain it; place it in a loaded output section before .bss"
            );
            let entry_size = if kind == SHT_RELA {
                RELA_ENTRY
            } else {
                REL_ENTRY
            };
            dynamic_relocations += size / entry_size;
            if kind == SHT_RELA {
                let file_offset = r.u64(sh + 24, "sh_offset")?;
                for k in 0..size / RELA_ENTRY {
                    let target = r.u64(file_offset + k * RELA_ENTRY, "r_offset")?;
                    let in_text = segments.iter().any(|s| {
                        s.flags & PF_X != 0 && target >= s.vaddr && target < s.vaddr + s.memsz
                    });
                    if in_text {
                        text_relocations.push(target - base);
                    }
                }
            }
        }
    }

    Ok(Image {
        bytes,
        base,
        footprint: mem_end - base,
        text_relocations,
        dynamic_relocations,
    })
}

fn section_name(r: &Reader<'_>, strtab: u64, name: u32) -> Option<String> {
    let start = usize::try_from(strtab.checked_add(u64::from(name))?).ok()?;
    let rest = r.0.get(start..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// Checks the arm64 Image header at the start of the image.
pub fn validate_header(image: &Image) -> Result<()> {
    let b = &image.bytes;
    ensure!(
        b.len() >= HEADER_LEN,
        "the image is only {} bytes long, shorter than the {HEADER_LEN}-byte header",
        b.len()
    );
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));

    let magic = u32_at(0x38);
    ensure!(
        magic == MAGIC,
        "magic at offset 0x38 is {magic:#010x}, expected {MAGIC:#010x} (\"ARM\\x64\")"
    );
    // code0 must branch to the entry code. An EFI-stub kernel instead has
    // "MZ" in code0 and the branch in code1; accept that layout too.
    let (branch_at, insn) = if &b[0..2] == b"MZ" {
        (4i64, u32_at(4))
    } else {
        (0i64, u32_at(0))
    };
    ensure!(
        insn & 0xfc00_0000 == 0x1400_0000,
        "code0 (offset {branch_at}) is {insn:#010x}, not a branch instruction (B): \
         the image must start by branching over the header to the entry code"
    );
    let imm26 = i64::from(insn & 0x03ff_ffff);
    let delta = ((imm26 << 38) >> 36) + branch_at; // sign-extend, times 4
    let len = i64::try_from(b.len()).unwrap_or(i64::MAX);
    ensure!(
        (64..len).contains(&delta),
        "code0 branches to image offset {delta:#x}, outside the image's code \
         (it must jump past the {HEADER_LEN}-byte header into the image)"
    );
    let text_offset = u64_at(8);
    ensure!(
        text_offset == TEXT_OFFSET,
        "text_offset (offset 8) is {text_offset:#x}, expected {TEXT_OFFSET:#x}"
    );
    let image_size = u64_at(16);
    ensure!(
        image_size >= image.footprint,
        "image_size (offset 16) is {image_size:#x} but the ELF occupies {:#x} bytes in memory \
         from {:#x} (including .bss and stacks); a loader could place data over them. \
         Compute image_size in the linker script as the end of the last section minus the start",
        image.footprint,
        image.base
    );
    let flags = u64_at(24);
    ensure!(
        flags & !FLAGS_DEFINED == 0
            && flags & FLAG_BIG_ENDIAN == 0
            && flags & FLAGS_PAGE_SIZE == FLAGS_PAGE_SIZE_4K,
        "flags (offset 24) are {flags:#x}: expected a little-endian image with 4 KiB pages \
         (bit 0 = 0, bits 2:1 = 01, reserved bits 63:4 = 0)"
    );
    Ok(())
}

/// PE/COFF numbers (Microsoft PE/COFF specification).
mod pe {
    /// Offset of `e_lfanew` in the MS-DOS header (the Image header's `res5`).
    pub const E_LFANEW: usize = 0x3c;
    pub const SIGNATURE: &[u8; 4] = b"PE\0\0";
    /// COFF file header bytes.
    pub const COFF_HEADER_LEN: usize = 20;
    /// `IMAGE_FILE_MACHINE_ARM64`.
    pub const MACHINE_ARM64: u16 = 0xaa64;
    /// Characteristics bits.
    pub const RELOCS_STRIPPED: u16 = 0x0001;
    pub const EXECUTABLE_IMAGE: u16 = 0x0002;
    /// Optional header magic of PE32+.
    pub const PE32_PLUS: u16 = 0x20b;
    /// The optional header's fixed part (PE32+), before the data directories.
    pub const OPTIONAL_FIXED_LEN: usize = 112;
    /// `IMAGE_SUBSYSTEM_EFI_APPLICATION`.
    pub const SUBSYSTEM_EFI_APPLICATION: u16 = 10;
    /// Data directory of base relocations (`.reloc`).
    pub const BASE_RELOCATION_DIRECTORY: usize = 5;
    pub const SECTION_HEADER_LEN: usize = 40;
    /// Section characteristics.
    pub const MEM_EXECUTE: u32 = 0x2000_0000;
    pub const MEM_WRITE: u32 = 0x8000_0000;
    /// UEFI's page: the section alignment firmware expects.
    pub const PAGE: u32 = 4096;
}

/// One section of a PE/COFF image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeSection {
    pub name: String,
    pub virtual_address: u32,
    pub virtual_size: u32,
    pub raw_pointer: u32,
    pub raw_size: u32,
    pub characteristics: u32,
}

/// What [`validate_pe`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeInfo {
    /// AddressOfEntryPoint.
    pub entry: u32,
    pub size_of_image: u32,
    pub size_of_headers: u32,
    pub sections: Vec<PeSection>,
}

/// Checks the PE/COFF header of an image whose `code0` starts with "MZ"
/// (an arm64 Image that is also an EFI application, like el2's); `None`
/// for an image without one. Besides PE/COFF's own rules, the header must
/// describe the image as the arm64 Image header does, because the same
/// bytes are loaded both ways: PE32+ for AArch64, an EFI application,
/// SizeOfImage = `image_size`, 4 KiB section alignment, sections in
/// ascending, contiguous order from the end of the headers to the end of
/// the image (so .bss is inside), each at the same offset in the file as
/// in memory, none both writable and executable, the entry point in an
/// executable one; no base relocations and IMAGE_FILE_RELOCS_STRIPPED
/// clear (the image relocates itself wherever the firmware puts it), and
/// no dynamic relocation inside the text.
pub fn validate_pe(image: &Image) -> Result<Option<PeInfo>> {
    let b = &image.bytes;
    if b.len() < 2 || &b[0..2] != b"MZ" {
        return Ok(None);
    }
    let field = |at: usize, len: usize, what: &str| -> Result<&[u8]> {
        b.get(at..at.saturating_add(len))
            .with_context(|| format!("{what} (offset {at:#x}) lies past the end of the image"))
    };
    let u16_at = |at: usize, what: &str| -> Result<u16> {
        Ok(u16::from_le_bytes(
            field(at, 2, what)?.try_into().expect("2 bytes"),
        ))
    };
    let u32_at = |at: usize, what: &str| -> Result<u32> {
        Ok(u32::from_le_bytes(
            field(at, 4, what)?.try_into().expect("4 bytes"),
        ))
    };
    let pe_at = u32_at(pe::E_LFANEW, "e_lfanew")? as usize;
    ensure!(
        field(pe_at, 4, "the PE signature")? == pe::SIGNATURE,
        "e_lfanew (offset 0x3c, the Image header's res5) is {pe_at:#x}, where there is no \
         \"PE\\0\\0\" signature"
    );
    let coff = pe_at + 4;
    let machine = u16_at(coff, "Machine")?;
    ensure!(
        machine == pe::MACHINE_ARM64,
        "Machine is {machine:#06x}, not IMAGE_FILE_MACHINE_ARM64 ({:#06x})",
        pe::MACHINE_ARM64
    );
    let sections = u16_at(coff + 2, "NumberOfSections")? as usize;
    let optional_len = u16_at(coff + 16, "SizeOfOptionalHeader")? as usize;
    let characteristics = u16_at(coff + 18, "Characteristics")?;
    ensure!(
        characteristics & pe::EXECUTABLE_IMAGE != 0,
        "Characteristics {characteristics:#06x} lacks IMAGE_FILE_EXECUTABLE_IMAGE"
    );
    ensure!(
        characteristics & pe::RELOCS_STRIPPED == 0,
        "Characteristics {characteristics:#06x} has IMAGE_FILE_RELOCS_STRIPPED: firmware would \
         then load the image only at ImageBase; el2 relocates itself and must say it can go \
         anywhere"
    );
    let opt = coff + pe::COFF_HEADER_LEN;
    ensure!(
        optional_len >= pe::OPTIONAL_FIXED_LEN,
        "SizeOfOptionalHeader is {optional_len}, less than PE32+'s {}",
        pe::OPTIONAL_FIXED_LEN
    );
    let magic = u16_at(opt, "Magic")?;
    ensure!(
        magic == pe::PE32_PLUS,
        "optional header Magic is {magic:#x}, not PE32+ ({:#x})",
        pe::PE32_PLUS
    );
    let entry = u32_at(opt + 16, "AddressOfEntryPoint")?;
    let section_alignment = u32_at(opt + 32, "SectionAlignment")?;
    let file_alignment = u32_at(opt + 36, "FileAlignment")?;
    let size_of_image = u32_at(opt + 56, "SizeOfImage")?;
    let size_of_headers = u32_at(opt + 60, "SizeOfHeaders")?;
    let subsystem = u16_at(opt + 68, "Subsystem")?;
    let directories = u32_at(opt + 108, "NumberOfRvaAndSizes")? as usize;
    ensure!(
        subsystem == pe::SUBSYSTEM_EFI_APPLICATION,
        "Subsystem is {subsystem}, not IMAGE_SUBSYSTEM_EFI_APPLICATION ({})",
        pe::SUBSYSTEM_EFI_APPLICATION
    );
    ensure!(
        section_alignment == pe::PAGE,
        "SectionAlignment is {section_alignment:#x}, not UEFI's page ({:#x})",
        pe::PAGE
    );
    ensure!(
        file_alignment.is_power_of_two() && (512..=section_alignment).contains(&file_alignment),
        "FileAlignment {file_alignment:#x} is not a power of two from 512 to SectionAlignment"
    );
    ensure!(
        pe::OPTIONAL_FIXED_LEN + 8 * directories <= optional_len,
        "NumberOfRvaAndSizes {directories} does not fit SizeOfOptionalHeader {optional_len}"
    );
    if directories > pe::BASE_RELOCATION_DIRECTORY {
        let at = opt + pe::OPTIONAL_FIXED_LEN + 8 * pe::BASE_RELOCATION_DIRECTORY;
        let size = u32_at(at + 4, "the base relocation directory")?;
        ensure!(
            size == 0,
            "the base relocation directory is not empty ({size} bytes): the image relocates \
             itself, the firmware must not"
        );
    }
    let image_size = u64::from_le_bytes(b[16..24].try_into().expect("8 bytes"));
    ensure!(
        u64::from(size_of_image) == image_size,
        "SizeOfImage is {size_of_image:#x} but the Image header's image_size is {image_size:#x}: \
         UEFI and the Image loaders would reserve different footprints"
    );
    ensure!(
        size_of_image.is_multiple_of(section_alignment),
        "SizeOfImage {size_of_image:#x} is not a multiple of SectionAlignment"
    );
    let table = opt + optional_len;
    let table_end = table + sections * pe::SECTION_HEADER_LEN;
    ensure!(
        size_of_headers.is_multiple_of(file_alignment) && table_end <= size_of_headers as usize,
        "SizeOfHeaders {size_of_headers:#x} is not a multiple of FileAlignment or does not \
         cover the section table (ends at {table_end:#x})"
    );
    ensure!(sections > 0, "NumberOfSections is 0");
    let mut parsed = Vec::new();
    let mut next = size_of_headers.next_multiple_of(section_alignment);
    for i in 0..sections {
        let at = table + i * pe::SECTION_HEADER_LEN;
        let raw_name = field(at, 8, "a section name")?;
        let name: String = raw_name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| char::from(c))
            .collect();
        let s = PeSection {
            virtual_size: u32_at(at + 8, "VirtualSize")?,
            virtual_address: u32_at(at + 12, "VirtualAddress")?,
            raw_size: u32_at(at + 16, "SizeOfRawData")?,
            raw_pointer: u32_at(at + 20, "PointerToRawData")?,
            characteristics: u32_at(at + 36, "Characteristics")?,
            name,
        };
        let what = format!("section {i} ({})", s.name);
        ensure!(
            s.virtual_address == next,
            "{what}: VirtualAddress is {:#x}, expected {next:#x}: sections must follow the \
             headers and each other without gaps",
            s.virtual_address
        );
        ensure!(
            s.raw_pointer == s.virtual_address || s.raw_size == 0,
            "{what}: PointerToRawData {:#x} differs from VirtualAddress {:#x}, but the Image \
             loaders copy the file as it is",
            s.raw_pointer,
            s.virtual_address
        );
        ensure!(
            s.raw_size.is_multiple_of(file_alignment) && s.raw_size <= s.virtual_size,
            "{what}: SizeOfRawData {:#x} is not a multiple of FileAlignment or exceeds \
             VirtualSize {:#x}",
            s.raw_size,
            s.virtual_size
        );
        let raw_end = u64::from(s.raw_pointer) + u64::from(s.raw_size);
        ensure!(
            raw_end <= b.len() as u64,
            "{what}: its raw data ends at {raw_end:#x}, past the end of the image file \
             ({:#x} bytes)",
            b.len()
        );
        ensure!(
            s.characteristics & (pe::MEM_EXECUTE | pe::MEM_WRITE)
                != pe::MEM_EXECUTE | pe::MEM_WRITE,
            "{what} is both writable and executable"
        );
        next = s
            .virtual_address
            .checked_add(s.virtual_size)
            .map(|end| end.next_multiple_of(section_alignment))
            .with_context(|| format!("{what} runs past 4 GiB"))?;
        parsed.push(s);
    }
    ensure!(
        next == size_of_image,
        "the sections end at {next:#x} but SizeOfImage is {size_of_image:#x}: they must cover \
         the whole image, .bss, stacks and heap included"
    );
    ensure!(
        parsed
            .iter()
            .any(|s| s.characteristics & pe::MEM_EXECUTE != 0
                && entry >= s.virtual_address
                && entry < s.virtual_address + s.virtual_size)
            && entry.is_multiple_of(4),
        "AddressOfEntryPoint {entry:#x} is not an instruction in an executable section"
    );
    if let Some(at) = image.text_relocations.first() {
        bail!(
            "{} dynamic relocation(s) patch the text (the first at image offset {at:#x}): the \
             EFI entry relocates the image with its text read-only",
            image.text_relocations.len()
        );
    }
    Ok(Some(PeInfo {
        entry,
        size_of_image,
        size_of_headers,
        sections: parsed,
    }))
}

/// The fields of an arm64 Image header that placing an image needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub text_offset: u64,
    /// Bytes the image occupies once loaded, including .bss and stacks.
    pub image_size: u64,
}

/// Reads the header of the kernel image at `path`: `Some` for an arm64
/// Image (its magic in place), `None` for a raw image without one, which
/// QEMU's `-kernel` and el2 place at RAM base + [`TEXT_OFFSET`] and enter
/// at its first byte. An empty file is an error.
pub fn read_optional_header(path: &Path) -> Result<Option<Header>> {
    let mut bytes = Vec::with_capacity(HEADER_LEN);
    let file = fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, HEADER_LEN as u64),
        &mut bytes,
    )
    .with_context(|| format!("cannot read {}", path.display()))?;
    ensure!(!bytes.is_empty(), "{} is empty", path.display());
    if bytes.len() < HEADER_LEN || bytes[0x38..0x3c] != MAGIC.to_le_bytes() {
        return Ok(None);
    }
    read_header(path).map(Some)
}

/// Reads the header of the arm64 Image at `path` (after checking its magic).
pub fn read_header(path: &Path) -> Result<Header> {
    let mut bytes = [0u8; HEADER_LEN];
    let mut file =
        fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    std::io::Read::read_exact(&mut file, &mut bytes).with_context(|| {
        format!(
            "{} is shorter than an arm64 Image header ({HEADER_LEN} bytes)",
            path.display()
        )
    })?;
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
    let magic = u32::from_le_bytes(bytes[0x38..0x3c].try_into().expect("4 bytes"));
    ensure!(
        magic == MAGIC,
        "{} is not an arm64 Image: magic at offset 0x38 is {magic:#010x}, expected {MAGIC:#010x}",
        path.display()
    );
    Ok(Header {
        text_offset: u64_at(8),
        image_size: u64_at(16),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 AArch64 file: header, program headers, section
    /// headers (with a .shstrtab) and the segment contents.
    struct ElfBuilder {
        segments: Vec<(u64, Vec<u8>, u64)>, // vaddr, file bytes, memsz
        rela: Option<(u64, u64)>,           // .rela.dyn addr, size
    }

    impl ElfBuilder {
        fn build(&self) -> Vec<u8> {
            let phoff = 64u64;
            let phnum = self.segments.len() as u64;
            let mut data_off = phoff + 56 * phnum;
            let mut out = vec![0u8; data_off as usize];
            out[0..4].copy_from_slice(b"\x7fELF");
            out[4] = 2;
            out[5] = 1;
            out[6] = 1;
            out[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
            out[18..20].copy_from_slice(&EM_AARCH64.to_le_bytes());
            out[32..40].copy_from_slice(&phoff.to_le_bytes());
            out[52..54].copy_from_slice(&64u16.to_le_bytes());
            out[54..56].copy_from_slice(&56u16.to_le_bytes());
            out[56..58].copy_from_slice(&(phnum as u16).to_le_bytes());
            for (i, (vaddr, bytes, memsz)) in self.segments.iter().enumerate() {
                let ph = (phoff + 56 * i as u64) as usize;
                out[ph..ph + 4].copy_from_slice(&PT_LOAD.to_le_bytes());
                out[ph + 8..ph + 16].copy_from_slice(&data_off.to_le_bytes());
                out[ph + 16..ph + 24].copy_from_slice(&vaddr.to_le_bytes());
                out[ph + 24..ph + 32].copy_from_slice(&vaddr.to_le_bytes());
                out[ph + 32..ph + 40].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
                out[ph + 40..ph + 48].copy_from_slice(&memsz.to_le_bytes());
                out.extend_from_slice(bytes);
                data_off += bytes.len() as u64;
            }
            if let Some((addr, size)) = self.rela {
                let strtab = b"\0.shstrtab\0.rela.dyn\0";
                let strtab_off = out.len() as u64;
                out.extend_from_slice(strtab);
                let shoff = out.len() as u64;
                let mut sh = vec![0u8; 64 * 3]; // null, .shstrtab, .rela.dyn
                sh[64..68].copy_from_slice(&1u32.to_le_bytes());
                sh[68..72].copy_from_slice(&3u32.to_le_bytes());
                sh[64 + 24..64 + 32].copy_from_slice(&strtab_off.to_le_bytes());
                sh[64 + 32..64 + 40].copy_from_slice(&(strtab.len() as u64).to_le_bytes());
                sh[128..132].copy_from_slice(&11u32.to_le_bytes());
                sh[132..136].copy_from_slice(&SHT_RELA.to_le_bytes());
                sh[136..144].copy_from_slice(&SHF_ALLOC.to_le_bytes());
                sh[144..152].copy_from_slice(&addr.to_le_bytes());
                sh[160..168].copy_from_slice(&size.to_le_bytes());
                out.extend_from_slice(&sh);
                out[40..48].copy_from_slice(&shoff.to_le_bytes());
                out[58..60].copy_from_slice(&64u16.to_le_bytes());
                out[60..62].copy_from_slice(&3u16.to_le_bytes());
                out[62..64].copy_from_slice(&1u16.to_le_bytes());
            }
            out
        }
    }

    /// el2's flags: little-endian, 4 KiB pages, 2 MiB-aligned base as close
    /// to the start of RAM as possible. (The guests' 0xa adds "anywhere".)
    const FLAGS: u64 = 0x2;

    fn header(image_size: u64) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[0..4].copy_from_slice(&(0x1400_0000u32 | 16).to_le_bytes()); // b +64
        h[8..16].copy_from_slice(&TEXT_OFFSET.to_le_bytes());
        h[16..24].copy_from_slice(&image_size.to_le_bytes());
        h[24..32].copy_from_slice(&FLAGS.to_le_bytes());
        h[0x38..0x3c].copy_from_slice(&MAGIC.to_le_bytes());
        h
    }

    fn text(image_size: u64) -> Vec<u8> {
        let mut t = header(image_size);
        t.extend_from_slice(&[0xaa; 64]);
        t
    }

    #[test]
    fn position_independent_at_zero_with_gap_and_bss() {
        let elf = ElfBuilder {
            segments: vec![
                (0, text(0x3000), 128),
                (0x1000, vec![0xbb; 16], 0x2000), // data + bss
            ],
            rela: Some((0x40, 0x18)),
        }
        .build();
        let img = elf_to_image(&elf).unwrap();
        assert_eq!(img.base, 0);
        assert_eq!(img.footprint, 0x3000);
        assert_eq!(img.bytes.len(), 0x1010, "trailing NOBITS not included");
        assert_eq!(&img.bytes[64..128], &[0xaa; 64]);
        assert!(img.bytes[128..0x1000].iter().all(|&b| b == 0), "gap zeroed");
        assert_eq!(&img.bytes[0x1000..], &[0xbb; 16]);
        validate_header(&img).unwrap();
    }

    #[test]
    fn fixed_link_address() {
        let base = 0x4008_0000;
        let elf = ElfBuilder {
            segments: vec![
                (base + 0x1000, vec![1; 8], 0x100),
                (base, text(0x1100), 128),
            ],
            rela: None,
        }
        .build();
        let img = elf_to_image(&elf).unwrap();
        assert_eq!(img.base, base);
        assert_eq!(img.footprint, 0x1100);
        assert_eq!(img.bytes.len(), 0x1008);
        validate_header(&img).unwrap();
    }

    #[test]
    fn image_size_must_cover_bss() {
        let elf = ElfBuilder {
            segments: vec![(0, text(0x1000), 0x2000)],
            rela: None,
        }
        .build();
        let err = validate_header(&elf_to_image(&elf).unwrap()).unwrap_err();
        assert!(err.to_string().contains("image_size"), "{err}");
    }

    #[test]
    fn bad_header_fields_are_named() {
        let cases: [(usize, &[u8], &str); 4] = [
            (0, &[0, 0, 0, 0], "code0"),
            (8, &[0, 0, 0, 0], "text_offset"),
            (24, &[0x3, 0, 0, 0], "flags"),
            (0x38, b"ARM\x63", "magic"),
        ];
        for (off, patch, field) in cases {
            let mut t = text(0x1000);
            t[off..off + patch.len()].copy_from_slice(patch);
            let elf = ElfBuilder {
                segments: vec![(0, t, 0x1000)],
                rela: None,
            }
            .build();
            let err = validate_header(&elf_to_image(&elf).unwrap()).unwrap_err();
            assert!(err.to_string().contains(field), "{field}: {err}");
        }
    }

    #[test]
    fn rela_dyn_in_bss_is_rejected() {
        let elf = ElfBuilder {
            segments: vec![(0, text(0x2000), 0x2000)],
            rela: Some((0x1000, 0x30)),
        }
        .build();
        let err = elf_to_image(&elf).unwrap_err();
        assert!(err.to_string().contains(".rela.dyn"), "{err}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(elf_to_image(b"").is_err());
        assert!(elf_to_image(b"\x7fELF\x02\x01").is_err());
        let mut elf = ElfBuilder {
            segments: vec![(0, text(0x1000), 0x1000)],
            rela: None,
        }
        .build();
        elf.truncate(200);
        let err = elf_to_image(&elf).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
    }

    fn put16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_le_bytes());
    }
    fn put32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Where the test image's PE header and its parts are.
    const PE: usize = 0x40;
    const OPT: usize = PE + 4 + 20;
    const SECTIONS: usize = OPT + 240;

    /// An image laid out like el2's: the arm64 Image header with "MZ" in
    /// code0, a PE32+ header in the first page, `.text` (one page) and
    /// `.data` (one file page, five more zero-filled) after it.
    fn efi_image() -> Image {
        let image_size = 0x8000u32;
        let mut b = vec![0u8; 0x3000];
        put32(&mut b, 0, 0x9100_5a4d); // add x13, x18, #0x16: "MZ"
        put32(&mut b, 4, 0x1400_0000 | ((0x1000 - 4) / 4)); // b 0x1000
        b[8..16].copy_from_slice(&TEXT_OFFSET.to_le_bytes());
        b[16..24].copy_from_slice(&u64::from(image_size).to_le_bytes());
        b[24..32].copy_from_slice(&2u64.to_le_bytes());
        b[0x38..0x3c].copy_from_slice(&MAGIC.to_le_bytes());
        put32(&mut b, 0x3c, PE as u32);
        b[PE..PE + 4].copy_from_slice(b"PE\0\0");
        put16(&mut b, PE + 4, 0xaa64);
        put16(&mut b, PE + 6, 2);
        put16(&mut b, PE + 20, 240);
        put16(&mut b, PE + 22, 0x0222);
        put16(&mut b, OPT, 0x20b);
        put32(&mut b, OPT + 16, 0x1000); // entry
        put32(&mut b, OPT + 32, 0x1000);
        put32(&mut b, OPT + 36, 0x1000);
        put32(&mut b, OPT + 56, image_size);
        put32(&mut b, OPT + 60, 0x1000);
        put16(&mut b, OPT + 68, 10);
        put32(&mut b, OPT + 108, 16);
        let section =
            |b: &mut Vec<u8>, at: usize, name: &[u8], va: u32, vsize: u32, raw: u32, ch: u32| {
                b[at..at + name.len()].copy_from_slice(name);
                put32(b, at + 8, vsize);
                put32(b, at + 12, va);
                put32(b, at + 16, raw);
                put32(b, at + 20, va);
                put32(b, at + 36, ch);
            };
        section(
            &mut b,
            SECTIONS,
            b".text",
            0x1000,
            0x1000,
            0x1000,
            0x6000_0020,
        );
        section(
            &mut b,
            SECTIONS + 40,
            b".data",
            0x2000,
            0x6000,
            0x1000,
            0xc000_0040,
        );
        Image {
            bytes: b,
            base: 0,
            footprint: u64::from(image_size),
            text_relocations: Vec::new(),
            dynamic_relocations: 0,
        }
    }

    #[test]
    fn an_efi_image_passes_both_checks() {
        let img = efi_image();
        validate_header(&img).unwrap();
        let info = validate_pe(&img).unwrap().expect("a PE header");
        assert_eq!(info.entry, 0x1000);
        assert_eq!(info.size_of_image, 0x8000);
        assert_eq!(info.size_of_headers, 0x1000);
        let names: Vec<&str> = info.sections.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [".text", ".data"]);
        assert_eq!(info.sections[1].virtual_size, 0x6000);
        // An image without "MZ" has no PE header to check.
        let plain = Image {
            bytes: text(0x1000),
            base: 0,
            footprint: 0x1000,
            text_relocations: Vec::new(),
            dynamic_relocations: 0,
        };
        assert_eq!(validate_pe(&plain).unwrap(), None);
    }

    #[test]
    fn bad_pe_fields_are_named() {
        let cases: [(usize, u32, usize, &str); 16] = [
            (0x3c, 0x80, 4, "e_lfanew"),
            (PE + 4, 0x8664, 2, "Machine"),
            (PE + 22, 0x0223, 2, "RELOCS_STRIPPED"),
            (PE + 22, 0x0220, 2, "EXECUTABLE_IMAGE"),
            (OPT, 0x10b, 2, "PE32+"),
            (OPT + 68, 11, 2, "Subsystem"),
            (OPT + 32, 0x1_0000, 4, "SectionAlignment"),
            (OPT + 36, 0x100, 4, "FileAlignment"),
            (OPT + 56, 0x9000, 4, "SizeOfImage"),
            (OPT + 112 + 5 * 8 + 4, 12, 4, "base relocation"),
            (OPT + 16, 0x2000, 4, "AddressOfEntryPoint"),
            (SECTIONS + 12, 0x2000, 4, "VirtualAddress"),
            (SECTIONS + 20, 0x1200, 4, "PointerToRawData"),
            (
                SECTIONS + 40 + 16,
                0x2000,
                4,
                "past the end of the image file",
            ),
            (SECTIONS + 40 + 8, 0x5000, 4, "must cover"),
            (
                SECTIONS + 36,
                0xe000_0020,
                4,
                "both writable and executable",
            ),
        ];
        for (at, value, len, expected) in cases {
            let mut img = efi_image();
            match len {
                2 => put16(&mut img.bytes, at, value as u16),
                _ => put32(&mut img.bytes, at, value),
            }
            let err = validate_pe(&img).unwrap_err().to_string();
            assert!(err.contains(expected), "{expected}: {err}");
        }
        let mut img = efi_image();
        img.text_relocations = vec![0x1238];
        let err = validate_pe(&img).unwrap_err().to_string();
        assert!(err.contains("0x1238"), "{err}");
        let mut short = efi_image();
        short.bytes.truncate(0x50);
        assert!(validate_pe(&short).is_err());
    }

    #[test]
    fn a_raw_payload_passes_and_what_a_loader_would_miss_is_refused() {
        let code = [0x1f, 0x20, 0x03, 0xd5].repeat(32); // nops, no header
        let raw = |segments, rela| elf_to_image(&ElfBuilder { segments, rela }.build()).unwrap();
        validate_raw(&raw(vec![(0, code.clone(), 128)], None)).unwrap();
        let err = validate_raw(&raw(vec![(0, code.clone(), 0x1000)], None)).unwrap_err();
        assert!(err.to_string().contains("past the end"), "{err}");
        let err = validate_raw(&raw(vec![(0, code.clone(), 128)], Some((0x40, 0x30)))).unwrap_err();
        assert!(err.to_string().contains("2 dynamic relocation(s)"), "{err}");
        let err = validate_raw(&raw(vec![(0, text(0x1000), 0x80)], None)).unwrap_err();
        assert!(err.to_string().contains("not a raw payload"), "{err}");
    }

    #[test]
    fn the_optional_header_tells_images_from_raw_payloads() {
        let dir = std::env::temp_dir().join(format!("xtask-optional-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.join(name);
            fs::write(&path, bytes).unwrap();
            path
        };
        let image = write("image.bin", &text(0x2000));
        let raw = write("raw.bin", &[0x1f, 0x20, 0x03, 0xd5].repeat(100));
        let tiny = write("tiny.bin", &[0x1f, 0x20, 0x03, 0xd5]);
        let empty = write("empty.bin", &[]);
        let image_header = read_optional_header(&image).unwrap();
        let raw_header = read_optional_header(&raw).unwrap();
        let tiny_header = read_optional_header(&tiny).unwrap();
        let empty_header = read_optional_header(&empty);
        let raw_as_image = read_header(&raw);
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            image_header,
            Some(Header {
                text_offset: TEXT_OFFSET,
                image_size: 0x2000
            })
        );
        assert_eq!(raw_header, None);
        assert_eq!(tiny_header, None, "shorter than a header: raw");
        assert!(empty_header.unwrap_err().to_string().contains("is empty"));
        assert!(
            raw_as_image
                .unwrap_err()
                .to_string()
                .contains("not an arm64 Image")
        );
    }

    #[test]
    fn guest_flags_are_accepted_and_the_header_reads_back() {
        let mut t = text(0x1000);
        t[24] = 0xa; // 4 KiB, little-endian, placement anywhere
        let elf = ElfBuilder {
            segments: vec![(0, t, 0x1000)],
            rela: None,
        }
        .build();
        let img = elf_to_image(&elf).unwrap();
        validate_header(&img).unwrap();
        let path = std::env::temp_dir().join(format!("xtask-header-{}.bin", std::process::id()));
        fs::write(&path, &img.bytes).unwrap();
        let header = read_header(&path);
        fs::remove_file(&path).unwrap();
        assert_eq!(
            header.unwrap(),
            Header {
                text_offset: TEXT_OFFSET,
                image_size: 0x1000
            }
        );
        assert!(read_header(Path::new("/nonexistent/image.bin")).is_err());
    }
}
