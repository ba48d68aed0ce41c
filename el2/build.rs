//! Links the bare-metal image with its own linker script; host builds of
//! the portable core are left alone.

fn main() {
    println!("cargo::rerun-if-changed=linker.ld");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
        println!("cargo::rustc-link-arg-bins=-T{dir}/linker.ld");
        // A self-relocating, position-independent executable with no
        // dynamic loader: the entry code applies the R_AARCH64_RELATIVE
        // entries (boot/src/entry.rs).
        println!("cargo::rustc-link-arg-bins=-pie");
        println!("cargo::rustc-link-arg-bins=--no-dynamic-linker");
        // The precompiled core/alloc of the target are built for the static
        // relocation model and keep absolute addresses in their read-only
        // data (release builds recompile them through LTO, debug builds do
        // not). Let the linker turn those into R_AARCH64_RELATIVE entries
        // too: the entry code applies every relocation with the MMU off, before
        // any of it is mapped read-only.
        println!("cargo::rustc-link-arg-bins=-znotext");
        println!("cargo::rustc-link-arg-bins=-zseparate-loadable-segments");
    }
}
