//! Building the project's bare-metal test guests (the binaries of
//! `guest-driver`, on its `runtime` feature) and packing each into a raw
//! arm64 Image, exactly like el2's; `raw-image` is packed without a
//! header, as the payload it is (`image::make_raw_image`).
//!
//! Guests are always built for `aarch64-unknown-none` (hard-float is fine
//! at EL1) in the release profile, whatever profile el2 uses: a debug guest
//! is only slower, and the boot tests time their work.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, ensure};

use crate::{Workspace, image, setup};

/// The target guests are built for.
pub const GUEST_TARGET: &str = "aarch64-unknown-none";
/// The package that holds the guests.
const PACKAGE: &str = "guest-driver";
/// The feature that gives the guests their runtime.
const FEATURE: &str = "runtime";

/// The guests `cargo xtask build` makes (binaries of guest-driver).
pub const GUESTS: &[&str] = &[
    "smp-demo",
    "pv-check",
    "lockbench",
    "irq-check",
    "level-check",
    "debug-check",
    "pmu-check",
    "hostile",
    RAW_GUEST,
];

/// The guest that is a raw image without the arm64 Image header
/// (guest-driver/src/bin/raw-image.rs).
pub const RAW_GUEST: &str = "raw-image";

/// One built guest.
#[derive(Clone, Debug)]
pub struct GuestImage {
    pub name: &'static str,
    pub elf: PathBuf,
    /// The raw arm64 Image to load.
    pub image: PathBuf,
}

/// Every built guest.
#[derive(Clone, Debug, Default)]
pub struct Guests(pub Vec<GuestImage>);

impl Guests {
    /// The guest called `name`.
    pub fn get(&self, name: &str) -> Result<&GuestImage> {
        self.0.iter().find(|g| g.name == name).with_context(|| {
            format!(
                "no guest called {name:?}; the guests are {}",
                GUESTS.join(", ")
            )
        })
    }
}

impl fmt::Display for Guests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for g in &self.0 {
            writeln!(f, "guest {}: {}", g.name, g.image.display())?;
        }
        Ok(())
    }
}

/// Builds every guest in release mode, writes each raw image next to its
/// ELF and validates its header. Prints the image paths.
pub fn build(ws: &Workspace) -> Result<Guests> {
    // `cargo xtask run` builds the guests before el2: the targets first.
    setup::ensure_rust_target(ws)?;
    let mut cmd = Command::new(ws.cargo());
    cmd.current_dir(&ws.root).args([
        "build",
        "--release",
        "-p",
        PACKAGE,
        "--features",
        FEATURE,
        "--target",
        GUEST_TARGET,
    ]);
    for name in GUESTS {
        cmd.args(["--bin", name]);
    }
    // The workspace's own target dir, like el2, so images have stable paths.
    cmd.arg("--target-dir").arg(ws.target_dir());
    let status = cmd
        .status()
        .context("cannot run cargo to build the guests")?;
    ensure!(
        status.success(),
        "building the guests failed ({status}); see the compiler output above"
    );
    let dir = ws.target_dir().join(GUEST_TARGET).join("release");
    let mut guests = Vec::new();
    for &name in GUESTS {
        let elf = dir.join(name);
        ensure!(
            elf.is_file(),
            "cargo reported success but {} does not exist",
            elf.display()
        );
        let image = elf.with_extension("bin");
        if name == RAW_GUEST {
            image::make_raw_image(&elf, &image)?;
        } else {
            image::make_image(&elf, &image)?;
        }
        guests.push(GuestImage { name, elf, image });
    }
    let guests = Guests(guests);
    print!("{guests}");
    Ok(guests)
}

/// A guest given on the command line: a built guest's name, or the path of
/// a kernel image: an arm64 Image, or a raw image without the header,
/// which QEMU's `-kernel` and el2 place at RAM base + 0x80000 and enter at
/// its first byte (it must then need no memory past its end: nothing
/// reserves any).
pub fn resolve(guests: &Guests, name_or_path: &str) -> Result<PathBuf> {
    let built = GUESTS.contains(&name_or_path);
    let path = if built {
        guests.get(name_or_path)?.image.clone()
    } else {
        let path = Path::new(name_or_path);
        ensure!(
            path.is_file(),
            "--guest {name_or_path}: no such file, and not a guest name ({})",
            GUESTS.join(", ")
        );
        path.to_path_buf()
    };
    // Every kernel goes through the same check, the built ones included.
    let header = image::read_optional_header(&path)?;
    if header.is_none() && !built {
        eprintln!(
            "xtask: {name_or_path} has no arm64 Image header: a raw image, loaded at RAM base + \
             {:#x} and entered at its first byte",
            image::TEXT_OFFSET
        );
    }
    Ok(path)
}
