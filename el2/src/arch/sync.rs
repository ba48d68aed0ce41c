//! EL2's spin locks: `boot`'s, shared with the guests' runtime, whose
//! waiters execute YIELD between two looks at the lock (`boot::sync` says
//! why that matters under QEMU's TCG).

/// A spin lock whose waiters yield.
pub use boot::sync::SpinMutex as Mutex;
