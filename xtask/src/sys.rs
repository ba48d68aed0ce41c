//! The few POSIX calls that std does not expose. xtask only runs on Linux
//! hosts (it installs its tools with apt-get), where these are in the C
//! library std already links against.

use std::io;

const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;
/// `SIG_IGN` as a `sighandler_t`.
const SIG_IGN: usize = 1;

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
    fn signal(signum: i32, handler: usize) -> usize;
    fn geteuid() -> u32;
}

/// Asks process `pid` to terminate (SIGTERM), which lets QEMU restore the
/// terminal settings it changed.
pub fn terminate(pid: u32) -> io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { kill(pid, SIGTERM) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether xtask runs as root (and may therefore run apt-get itself).
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    unsafe { geteuid() == 0 }
}

/// Ignores SIGINT while alive and restores the previous disposition when
/// dropped: gdb uses Ctrl-C to interrupt the target, and that must not kill
/// xtask (which would leave QEMU running).
pub struct IgnoreSigint {
    previous: usize,
}

impl IgnoreSigint {
    pub fn new() -> Self {
        // SAFETY: installing SIG_IGN runs no code in signal context.
        let previous = unsafe { signal(SIGINT, SIG_IGN) };
        Self { previous }
    }
}

impl Drop for IgnoreSigint {
    fn drop(&mut self) {
        // SAFETY: restores the disposition that was installed before (the
        // default one, in practice); SIG_ERR (usize::MAX) is not restorable.
        if self.previous != usize::MAX {
            unsafe { signal(SIGINT, self.previous) };
        }
    }
}
