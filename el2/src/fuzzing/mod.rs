//! Fuzzing harnesses for everything a guest (or the boot loader) hands
//! the hypervisor to parse or dispatch.
//!
//! Guests are untrusted: nothing they send may panic the hypervisor. Each
//! harness here takes one input of arbitrary bytes, turns it into a
//! sequence of operations on one part of the portable core, and checks,
//! besides "no panic", the cheap invariants that part's documentation
//! promises (each harness module lists its own). A broken invariant is a
//! panic, which the fuzzer reports as a crash.
//!
//! | harness | what it drives |
//! |---|---|
//! | [`device_tree()`] | `platform::Platform::parse` with VM nodes, `blob_size`, `rescue`, and each accepted VM's layout and generated device tree |
//! | [`smccc()`] | a VM's SMCCC/PSCI dispatcher in every service configuration, with any registers, caller and VM state |
//! | [`exits()`] | `Exit::decode`, `Esr`, `MmioAccess::decode` with the register helpers and `MmioMap::route`, `SysregAccess` with `emulate`, `sanitize_id`, `sgi_register` |
//! | [`pl011()`] | the emulated PL011: accesses at any offset and size, input, flush, reset |
//! | [`vgic()`] | the virtual GIC: distributor and redistributor accesses, SGIs, lines, edges, list-register fill and sync-back, wake-ups, reset |
//! | [`acpi()`] | `platform::Platform::from_acpi` with any tables, RAM, reserved regions and VM description, `acpi::numa`, `acpi::rescue` |
//!
//! The same functions serve two drivers: the cargo-fuzz targets in the
//! repository's `fuzz/` directory (coverage-guided, with nightly Rust; see
//! `fuzz/README.md`) and this module's tests, which replay the seed
//! corpus in `fuzz/corpus/` and a fixed number of deterministic mutations
//! of it under plain `cargo test`.
//!
//! Inputs are read with a small byte reader that pads with zeros past the
//! end, so every input is valid and a harness never rejects one. Every
//! harness bounds the operations one input runs, so an execution stays
//! short whatever its length.
//!
//! The module is `no_std` like the rest of the library and uses only its
//! public interfaces, so it exercises exactly what the runner (`el2::run`) calls.

mod acpi;
mod device_tree;
mod exits;
mod input;
mod pl011;
mod smccc;
mod vgic;

#[cfg(test)]
mod seeds;
#[cfg(test)]
mod tests;

pub use acpi::acpi;
pub use device_tree::device_tree;
pub use exits::exits;
pub use pl011::pl011;
pub use smccc::smccc;
pub use vgic::vgic;

/// One harness: its name (the cargo-fuzz target's and its corpus
/// directory's) and its one-input function.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The target's name.
    pub name: &'static str,
    /// Runs one input.
    pub run: fn(&[u8]),
}

/// Every harness.
pub const TARGETS: [Target; 6] = [
    Target {
        name: "device_tree",
        run: device_tree,
    },
    Target {
        name: "smccc",
        run: smccc,
    },
    Target {
        name: "exits",
        run: exits,
    },
    Target {
        name: "pl011",
        run: pl011,
    },
    Target {
        name: "vgic",
        run: vgic,
    },
    Target {
        name: "acpi",
        run: acpi,
    },
];
