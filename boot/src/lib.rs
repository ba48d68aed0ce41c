//! The one boot runtime of the workspace: what the hypervisor (`el2`, at
//! EL2) and the project's test guests (`guest-driver`'s runtime, at EL1)
//! both do between a loader jumping to their first instruction and their
//! first line of Rust, and the console they both print on.
//!
//! Both are position-independent arm64 Images (Linux
//! Documentation/arch/arm64/booting.rst) linked at 0 that relocate
//! themselves, so everything here exists once and is parameterised by
//! exception level where the architecture names registers per level
//! (SCTLR_EL2 or SCTLR_EL1, ELR_EL2 or ELR_EL1, ...). Each image's own
//! entry code (`el2/src/arch/head.rs`, `guest-driver/src/rt/head.rs`)
//! decides only what differs: which exception level it must run at, what
//! it resets there, what Rust function it calls, and (el2) the EFI stage.
//!
//! | module | decides | how an image uses it |
//! |---|---|---|
//! | [`image`] | the arm64 Image header (code0/code1, `text_offset`, `flags`, magic, `res5` for an EFI application) and where the linker script's section boundaries are | `arm64_image_header!` once; `image::sections()` |
//! | [`entry`] | the MMU-off start: D-cache invalidation over the image, the `R_AARCH64_RELATIVE` self-relocation, zeroing `.bss` | `bl boot_invalidate_image`, `bl boot_relocate`, `bl boot_zero_bss` from the entry code |
//! | [`stacks`] | per-CPU thread and exception stacks, each above an unmapped guard page, and which CPU's guard a fault address is in | `per_cpu_stacks!` once; `bl boot_set_stacks` |
//! | [`exception`] | the register frame a vector saves and how the 16 vectors are numbered | [`save_frame!`] and [`restore_frame!`] in the vector code |
//! | [`mmu`] | the translation settings a CPU turns its MMU on with, and the switch-on itself | `boot::mmu::enable_el2` / `enable_el1`, or `bl boot_enable_mmu_el2` / `_el1` |
//! | [`console`] | the PL011 console: one lock for whole lines, CR LF line ends, a fatal path that bypasses a stuck lock | `console::init`, `println!`, `console::print_fatal` |
//! | [`handover`] | a device tree at x0 known by its header, read with the MMU off; parking a CPU for good | `handover::read_fdt_total_size`, `handover::park` |
//! | [`debug`] | the breakpoint and watchpoint registers by number (`DBGBVR<n>` ... `DBGWCR<n>`) | `debug::read`, `debug::write`: el2 switches a vCPU's, debug-check arms its own |
//! | [`pmu`] | the PMUv3's EL0/EL1 registers: fields, accessors by name, event counters by number | `pmu::read`, `pmu::write`, `pmu::read_event`: el2 switches a vCPU's PMU, pmu-check programs its own |
//! | [`sync`] | the pause of a spin-wait loop (YIELD) and the spin lock both images use | `sync::SpinMutex`, `sync::cpu_relax` |
//!
//! The hardware parts (assembly, linker symbols, the UART) exist only for
//! `target_os = "none"`; the rest (header flags, stack arithmetic, frame
//! layout, vector numbering, line ends) is host-tested with `cargo test`.
//!
//! # Linker script contract
//!
//! Both images' linker scripts define the same symbols, which this crate
//! reads: `__image_start` (the Image header, at the image's first byte),
//! `__text_end`, `__rodata_end`, `__rela_start`/`__rela_end` (the
//! `.rela.dyn` entries, inside the file-backed part), `__bss_start` and
//! `__bss_end` (64-byte aligned), `__image_end` and `__image_size` (the
//! whole footprint, stacks included); and they place `.text.head` first,
//! `.stacks.*` inside the footprint.
#![cfg_attr(not(test), no_std)]

pub mod console;
pub mod debug;
pub mod entry;
pub mod exception;
pub mod handover;
pub mod image;
pub mod mmu;
pub mod pmu;
pub mod stacks;
pub mod sync;
