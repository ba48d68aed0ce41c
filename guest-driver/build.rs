//! Links the bare-metal guests (the binaries of this package, built with the
//! `runtime` feature for `target_os = "none"`) with the runtime's linker
//! script. Host builds and the library alone are left alone.

fn main() {
    println!("cargo::rerun-if-changed=linker.ld");
    let bare_metal = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none");
    let runtime = std::env::var_os("CARGO_FEATURE_RUNTIME").is_some();
    if bare_metal && runtime {
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
        println!("cargo::rustc-link-arg-bins=-T{dir}/linker.ld");
        // A self-relocating, position-independent executable without a
        // dynamic loader: the runtime's entry code (boot/src/entry.rs) applies
        // its R_AARCH64_RELATIVE relocations before any Rust code runs.
        println!("cargo::rustc-link-arg-bins=-pie");
        println!("cargo::rustc-link-arg-bins=--no-dynamic-linker");
        // The target's precompiled core is built for the static relocation
        // model; let the linker turn its absolute addresses into relative
        // relocations too (they are applied before anything is read-only).
        println!("cargo::rustc-link-arg-bins=-znotext");
        println!("cargo::rustc-link-arg-bins=-zseparate-loadable-segments");
    }
}
