//! `raw-image`: a bare-metal payload without the arm64 Image header, as a
//! raw binary built with `objcopy -O binary` would be. It checks the
//! placement that QEMU's `-kernel` loader and the hypervisor give such an
//! image (Linux Documentation/arch/arm64/booting.rst for an image
//! without a valid header; docs/vm-binding.md, "What the VM sees"): loaded
//! at RAM base + 0x80000, entered at its first byte with the MMU off and
//! x0 = the device tree's address.
//!
//! It uses nothing of the guest runtime (which begins with an Image
//! header and relocates itself): its first instruction is its entry, it
//! is position independent without a single dynamic relocation (`cargo
//! xtask build` refuses it otherwise), keeps its stack inside the file's
//! bytes (a loader reserves nothing past the end of a headerless image),
//! writes to QEMU `virt`'s PL011 by polling and powers off through PSCI
//! SYSTEM_OFF over HVC (QEMU's conduit at EL1 without EL2, and the
//! hypervisor's). It prints one line:
//!
//! ```text
//! raw-image: entered at 0x0000000040080000, x0 0x0000000048000000: device tree magic ok
//! ```
//!
//! (`... device tree magic 0x........: not a device tree` when x0 points
//! elsewhere), then `raw-image: powering off`.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod payload {
    use core::arch::{asm, global_asm};
    use core::ptr;

    use pvlock_abi::psci::SYSTEM_OFF;
    use pvlock_abi::virt::UART_BASE;

    /// The flattened device tree's magic, big-endian (Devicetree
    /// Specification 5.2 "Header").
    const FDT_MAGIC: u32 = 0xd00d_feed;
    /// PL011 data register and flag register (ARM DDI 0183, "Summary of
    /// registers"); FR bit 5 is TXFF, transmit FIFO full.
    const UART_DR: usize = 0x000;
    const UART_FR: usize = 0x018;
    const UART_FR_TXFF: u32 = 1 << 5;
    /// Bytes of stack, inside the image.
    const STACK_SIZE: usize = 4096;

    /// The stack: in `.data`, so its bytes are part of the raw file and
    /// no loader can put anything there.
    #[unsafe(link_section = ".data.stack")]
    static mut STACK: [u8; STACK_SIZE] = [0; STACK_SIZE];

    // The entry, at offset 0 (`.text.head` comes first in the linker
    // script): x0 = the device tree, x1 = where this image runs. FP/SIMD
    // on for EL0/EL1 (CPACR_EL1.FPEN = 0b11, the target is hard-float),
    // the stack set, then Rust.
    global_asm!(
        ".section .text.head, \"ax\"",
        ".global _head",
        "_head:",
        "    adr x1, _head",
        "    mov x2, #(3 << 20)",
        "    msr cpacr_el1, x2",
        "    isb",
        "    adrp x2, {stack}",
        "    add x2, x2, :lo12:{stack}",
        "    add x2, x2, #{stack_size}",
        "    mov sp, x2",
        "    b {main}",
        stack = sym STACK,
        stack_size = const STACK_SIZE,
        main = sym raw_main,
    );

    fn uart_put(byte: u8) {
        let base = UART_BASE as usize;
        // SAFETY: QEMU `virt`'s PL011 (emulated by the hypervisor in a VM)
        // is at UART_BASE; with the MMU off these are Device accesses to
        // its flag and data registers, which have no other user here.
        unsafe {
            while ptr::read_volatile((base + UART_FR) as *const u32) & UART_FR_TXFF != 0 {}
            ptr::write_volatile((base + UART_DR) as *mut u32, u32::from(byte));
        }
    }

    fn put_str(text: &str) {
        text.bytes().for_each(uart_put);
    }

    /// `0x` and 16 hex digits.
    fn put_hex(value: u64) {
        put_str("0x");
        for shift in (0..16).rev().map(|nibble| nibble * 4) {
            let digit = ((value >> shift) & 0xf) as u8;
            uart_put(if digit < 10 {
                b'0' + digit
            } else {
                b'a' + digit - 10
            });
        }
    }

    /// PSCI SYSTEM_OFF (DEN0022, a fast SMC32 call) over HVC.
    fn system_off() -> ! {
        let function = u64::from(SYSTEM_OFF.raw());
        // SAFETY: a PSCI call; SYSTEM_OFF does not return when it works.
        unsafe { asm!("hvc #0", in("x0") function, options(nostack)) };
        loop {
            // SAFETY: waiting for an interrupt changes no state.
            unsafe { asm!("wfi", options(nomem, nostack)) };
        }
    }

    extern "C" fn raw_main(device_tree: u64, entry: u64) -> ! {
        put_str("raw-image: entered at ");
        put_hex(entry);
        put_str(", x0 ");
        put_hex(device_tree);
        let magic = if device_tree.is_multiple_of(4) && device_tree != 0 {
            // SAFETY: x0 is the device tree's address by the boot protocol
            // (checked non-null and aligned); reading its first word is
            // what every kernel does first. With the MMU off it is a
            // Device read of RAM.
            u32::from_be(unsafe { ptr::read_volatile(device_tree as *const u32) })
        } else {
            0
        };
        if magic == FDT_MAGIC {
            put_str(": device tree magic ok\n");
        } else {
            put_str(": device tree magic ");
            put_hex(u64::from(magic));
            put_str(": not a device tree\n");
        }
        put_str("raw-image: powering off\n");
        system_off()
    }

    #[panic_handler]
    fn panic(_: &core::panic::PanicInfo) -> ! {
        put_str("raw-image: panic\n");
        system_off()
    }
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "raw-image is a bare-metal payload without an Image header; build it with `cargo xtask \
         build` and boot it with `cargo xtask run --guest raw-image` (or `--bare`)"
    );
    std::process::exit(2);
}
