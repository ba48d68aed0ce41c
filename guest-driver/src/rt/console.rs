//! The guest's console: `boot::console`, shared with el2 — the PL011 the
//! device tree names, written by polling behind one lock (so each
//! [`println!`](crate::println) is one whole line even when several vCPUs
//! print at once), silent until [`init`] ran with the MMU on, and a fatal
//! path that writes past a stuck lock.

pub use boot::console::{Interrupts, init, print, print_fatal, update_interrupt_masks};
