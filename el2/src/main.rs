//! The hypervisor image. On `aarch64-unknown-none-softfloat` this is the
//! bare-metal program that `cargo xtask build` packs into an arm64 Image;
//! on the host it only explains how to build it, so that `cargo build` of
//! the workspace works everywhere.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
mod arch;

/// `println!` on the console (`boot::console`), for `arch`.
#[cfg(target_os = "none")]
use boot::println;

#[cfg(target_os = "none")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    // Still inside the firmware (UEFI stage): report there and return to it.
    arch::efi::report_panic(info);
    arch::exceptions::begin_fatal();
    let cpu = arch::cpu::current().map_or(0, |c| c.index);
    arch::console::print_fatal(format_args!(
        "*** {}: panic on cpu {cpu}: {info} ***\n",
        el2::FATAL_MARKER
    ));
    arch::psci::power_off()
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "el2 is the bare-metal hypervisor image; build and boot it with `cargo xtask build` / `cargo xtask run`"
    );
    std::process::exit(2);
}
