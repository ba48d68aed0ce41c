//! A small runtime for bare-metal test guests: what a guest needs to boot
//! as an arm64 Image under QEMU (`-kernel`, at EL1) or as a VM of the
//! hypervisor, and to use every vCPU it is given.
//!
//! A guest is a `no_std`, `no_main` binary that names its two entry points:
//!
//! ```ignore
//! #![cfg_attr(target_os = "none", no_std, no_main)]
//! guest_driver::entry!(main, secondary_main);
//!
//! fn main() {                      // the boot CPU, once the runtime is up
//!     guest_driver::println!("hello from {} CPUs", rt::smp::count());
//!     rt::smp::start(1).unwrap();  // CPU 1 runs secondary_main(1)
//! }                                // returning powers the guest off
//!
//! fn secondary_main(cpu: usize) {} // returning calls PSCI CPU_OFF
//! ```
//!
//! The arm64 Image header, the self-relocation, `.bss`, the per-CPU stacks,
//! the exception frame and the console are the boot runtime the guests
//! share with el2 (the `boot` crate, at EL1 here); this module adds what
//! only a guest does.
//!
//! Before `main` the runtime has: applied its relocations and zeroed
//! `.bss` (`head`); read the device tree ([`machine`]); built and turned
//! on an identity map with caches and per-section permissions ([`mmu`]);
//! set up the console ([`console`], [`println!`](crate::println)) and the
//! PSCI conduit ([`psci`]). Every CPU runs on its own stacks with guard
//! pages ([`stacks`]); every exception and every panic prints a report
//! starting with [`crate::FATAL_MARKER`] and powers the
//! guest off ([`exceptions`]), unless the code that took a synchronous
//! exception asked for it with [`fault::expect`]. Time comes from the virtual counter
//! ([`time`]). The paravirtual services ([`crate::pv`]) are set up on
//! request ([`pv`]).
//!
//! Interrupts stay masked (PSTATE.I) and there is no IRQ vector: a guest
//! that wants interrupts uses the polling GICv3 driver ([`gic`]), which
//! waits with WFI and takes interrupts by reading ICC_IAR1_EL1.

pub mod console;
pub mod exceptions;
pub mod fault;
pub mod gic;
mod head;
pub mod image;
pub mod mmu;
pub mod pair;
mod percpu;
pub mod psci;
pub mod pv;
pub mod selftest;
pub mod smp;
pub mod stacks;
pub mod time;

/// The runtime's spin lock (`boot`'s, el2's too): its waiters pause with
/// YIELD between two looks, as the PV locks' do.
pub use boot::sync::SpinMutex;

use crate::FATAL_MARKER;
use crate::devicetree::{self, GuestMachine, MemRange};
use crate::mpidr::Mpidr;
use aarch64_cpu::registers::MPIDR_EL1;
use spin::Once;
use tock_registers::interfaces::Readable;

/// The largest device tree the runtime accepts.
const FDT_MAX_SIZE: u32 = 2 << 20;

static MACHINE: Once<GuestMachine<'static>> = Once::new();

/// The machine the guest runs on, as its device tree describes it.
pub fn machine() -> &'static GuestMachine<'static> {
    MACHINE
        .get()
        .expect("the runtime reads the device tree before main")
}

/// The machine, if the runtime got as far as reading it.
fn machine_if_ready() -> Option<&'static GuestMachine<'static>> {
    MACHINE.get()
}

/// The device tree the guest booted with, as bytes (for a check that
/// reads more of it than [`machine`] keeps).
pub fn device_tree_blob() -> &'static [u8] {
    let dtb = machine().dtb;
    // SAFETY: `primary_start` parsed exactly these bytes as the tree, whose
    // contract is that they stay readable and unchanged for the guest's
    // life (in RAM, or mapped read-only by `mmu::build`).
    unsafe { core::slice::from_raw_parts(dtb.start as *const u8, dtb.size as usize) }
}

/// The guest's command line (`/chosen/bootargs`).
pub fn bootargs() -> crate::bootargs::BootArgs<'static> {
    crate::bootargs::BootArgs::new(machine().bootargs)
}

/// Names the guest's entry points: `main()` runs on the boot CPU once the
/// runtime is up (the guest powers off when it returns);
/// `secondary_main(cpu)` runs on each CPU started with
/// [`smp::start`] (the CPU calls PSCI CPU_OFF when it returns).
#[macro_export]
macro_rules! entry {
    ($main:path, $secondary_main:path) => {
        /// The guest's `main`, called by the runtime on the boot CPU.
        #[unsafe(export_name = "__guest_main")]
        fn __guest_main_entry() {
            let main: fn() = $main;
            main()
        }

        /// The guest's `secondary_main`, called by the runtime on every
        /// secondary CPU.
        #[unsafe(export_name = "__guest_secondary_main")]
        fn __guest_secondary_main_entry(cpu: usize) {
            let secondary_main: fn(usize) = $secondary_main;
            secondary_main(cpu)
        }
    };
}

unsafe extern "Rust" {
    fn __guest_main();
    fn __guest_secondary_main(cpu: usize);
}

/// The device tree at `address`, if it has an FDT header of a sane size.
/// Reads the header with plain loads (the MMU may be off).
///
/// # Safety
/// `address` must be readable for the header and, if the header is valid,
/// for `totalsize` bytes, which must stay unchanged for the guest's life.
unsafe fn device_tree(address: u64) -> Option<&'static [u8]> {
    // SAFETY: the caller guarantees the header is readable.
    let size = unsafe { boot::handover::read_fdt_total_size(address, FDT_MAX_SIZE) }?;
    // SAFETY: per the caller, `size` bytes at `address` are readable and
    // stay as they are.
    Some(unsafe { core::slice::from_raw_parts(address as *const u8, size as usize) })
}

/// The boot CPU's first Rust code, called by the entry code with the MMU
/// off and x0 = the device tree's address. Nothing here may use atomic
/// read-modify-writes or locks until the MMU is on.
extern "C" fn primary_start(dtb_address: u64) -> ! {
    let boot_mpidr = Mpidr::from_raw(MPIDR_EL1.get());
    // SAFETY: the boot protocol passes the address of a device tree in RAM
    // that nobody modifies (the loader put it outside our image).
    let dtb = unsafe { device_tree(dtb_address) };
    let parsed = dtb.map(|bytes| GuestMachine::parse(bytes, dtb_address, boot_mpidr));
    let dtb_range = MemRange::new(dtb_address, dtb.map_or(0, |b| b.len() as u64));
    let (ram, uart, machine) = match &parsed {
        Some(Ok(m)) => (m.memory(), m.uart, Some(m)),
        _ => (&[][..], dtb.and_then(devicetree::find_console), None),
    };
    let no_map = machine.into_iter().flat_map(GuestMachine::no_map);
    // SAFETY: the boot CPU alone runs, with the MMU off.
    let map = unsafe { mmu::build(ram, no_map, dtb_range, uart) };
    let Ok(tables) = map else {
        // Nothing can be printed without a map; stop the machine.
        psci::system_off();
    };
    // SAFETY: the map was built; this is the boot CPU, once.
    unsafe { mmu::enable(tables) };
    // The MMU and caches are on: atomics and locks work from here.
    time::mark_boot();
    if let Some(uart) = uart {
        // SAFETY: the map covers the UART as device memory; nothing else
        // in the guest uses it.
        unsafe { console::init(uart.start) };
    }
    let machine = match parsed {
        Some(Ok(m)) => m,
        Some(Err(e)) => fatal(format_args!("cannot use the device tree: {e}")),
        None => fatal(format_args!(
            "no device tree at {dtb_address:#x} (x0 at entry)"
        )),
    };
    if let Some(conduit) = machine.psci {
        psci::set_conduit(conduit);
    }
    MACHINE.call_once(|| machine);
    smp::mark_entered();
    // SAFETY: `entry!` defines __guest_main with this signature.
    unsafe { __guest_main() };
    psci::system_off()
}

/// A secondary CPU's first Rust code, with its MMU on and x0 = its logical
/// number (the CPU_ON context).
extern "C" fn secondary_start(cpu: usize) -> ! {
    smp::mark_entered();
    // SAFETY: `entry!` defines __guest_secondary_main with this signature.
    unsafe { __guest_secondary_main(cpu) };
    smp::mark_leaving();
    let error = psci::cpu_off();
    fatal(format_args!("vcpu {cpu}: PSCI CPU_OFF failed with {error}"))
}

/// Prints a one-line fatal report and powers the guest off.
pub fn fatal(message: core::fmt::Arguments) -> ! {
    console::print_fatal(format_args!("{FATAL_MARKER}: {message}\n"));
    psci::system_off()
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    let cpu = smp::current();
    match info.location() {
        Some(l) => console::print_fatal(format_args!(
            "{FATAL_MARKER}: panic on vcpu {cpu} at {}:{}: {}\n",
            l.file(),
            l.line(),
            info.message()
        )),
        None => console::print_fatal(format_args!(
            "{FATAL_MARKER}: panic on vcpu {cpu}: {}\n",
            info.message()
        )),
    }
    psci::system_off()
}
