//! Deliberate faults, to show that the fault reports work and that the
//! hypervisor delivers the exceptions it must.

use super::{machine, mmu};

/// Reads the first page past the end of RAM, mapped as a device so the
/// access really goes out. Nothing backs it: QEMU answers with a
/// synchronous external abort, and the hypervisor must inject one (an
/// access to an address outside the VM's RAM and emulated devices). Either
/// way the runtime reports it; returns the value read if nothing happened.
pub fn read_outside_ram() -> (u64, u32) {
    let address = machine().memory_end();
    if let Err(e) = mmu::map_device(address, 4) {
        panic!("cannot map {address:#x} to read it: {e}");
    }
    // SAFETY: the page is mapped as device memory just above; reading an
    // address nothing backs either aborts (the point) or returns a value.
    let value = unsafe { core::ptr::read_volatile(address as *const u32) };
    (address, value)
}

/// Executes a permanently undefined instruction (`udf #0`).
pub fn undefined_instruction() {
    // SAFETY: UDF only raises an Undefined Instruction exception, which the
    // runtime reports; it touches no memory.
    unsafe { core::arch::asm!("udf #0", options(nomem, nostack)) };
}
