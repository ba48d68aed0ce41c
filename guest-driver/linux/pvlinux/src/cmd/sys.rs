//! The system calls std does not wrap, each behind a safe function: the
//! only calls into libc in pvlinux. [`fork`] alone stays `unsafe`: only
//! its caller can know that the process is single-threaded.

use std::fs::File;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicU32;

/// A return value of -1 as the error `errno` names.
fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// The CPUs currently online.
pub fn online_cpus() -> io::Result<usize> {
    // SAFETY: sysconf only reads system configuration.
    let count = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(count).map_err(|_| io::Error::last_os_error())
}

/// The CPUs this thread may run on, in increasing order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t and the size passed is its size.
    check(unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) })?;
    let capacity = 8 * size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads bit `cpu` of `set`, in range by `capacity`.
    Ok((0..capacity)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Restricts the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= 8 * size_of::<libc::cpu_set_t>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is beyond the affinity mask"),
        ));
    }
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below the set's capacity, checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a live cpu_set_t and the size passed is its size;
    // pid 0 is the calling thread.
    check(unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) })?;
    Ok(())
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a live timespec for clock_gettime to fill.
    // CLOCK_MONOTONIC always exists on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    // Both fields are non-negative for CLOCK_MONOTONIC.
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// A non-blocking eventfd, as a file for read(2) and write(2) of its
/// 8-byte counter.
pub fn eventfd_nonblocking() -> io::Result<File> {
    // SAFETY: eventfd takes no pointers.
    let fd = check(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by eventfd and nothing else owns it.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// FUTEX_WAIT on `word` expecting `expected`, for at most `timeout_ns`.
/// The kernel takes the futex's hash-bucket lock before comparing, so with
/// a stale `expected` this returns `EAGAIN` at once, having taken it.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: u32) -> io::Result<()> {
    let timeout = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::c_long::from(timeout_ns % 1_000_000_000),
    };
    // SAFETY: `word` is a live, aligned u32 for the duration of the call
    // and `timeout` a live timespec; FUTEX_WAIT reads both and writes
    // neither.
    let result = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &timeout as *const libc::timespec,
        )
    };
    if result == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// FUTEX_WAKE of up to `count` waiters on `word`; returns how many woke.
pub fn futex_wake(word: &AtomicU32, count: u32) -> io::Result<u64> {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE only uses its
    // address as a key.
    let result = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            count,
        )
    };
    u64::try_from(result).map_err(|_| io::Error::last_os_error())
}

/// A private anonymous read-write mapping, unmapped when dropped.
pub struct AnonymousMapping {
    start: NonNull<u8>,
    len: usize,
}

impl AnonymousMapping {
    /// Maps `len` bytes (no page is populated yet).
    pub fn new(len: usize) -> io::Result<Self> {
        // SAFETY: a new anonymous mapping at an address of the kernel's
        // choosing does not touch any existing memory.
        let start = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let start = NonNull::new(start.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned address 0"))?;
        Ok(Self { start, len })
    }

    /// Writes its first byte, faulting its first page in.
    pub fn touch_first_page(&mut self, value: u8) {
        // SAFETY: the mapping is live, writable and at least one byte long
        // (mmap refuses a length of 0), and only `self` refers to it.
        unsafe { self.start.as_ptr().write_volatile(value) };
    }

    /// Unmaps it, reporting failure (dropping it ignores failure).
    pub fn unmap(self) -> io::Result<()> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `start`/`len` are the live mapping `new` made; `this` is
        // not dropped, so it is unmapped once.
        check(unsafe { libc::munmap(this.start.as_ptr().cast(), this.len) })?;
        Ok(())
    }
}

impl Drop for AnonymousMapping {
    fn drop(&mut self) {
        // SAFETY: `start`/`len` are the live mapping `new` made, unmapped
        // only here or in `unmap` (which skips this).
        unsafe { libc::munmap(self.start.as_ptr().cast(), self.len) };
    }
}

/// What `fork` returned in this process.
pub enum Fork {
    /// This is the new child.
    Child,
    /// This is the parent; the child has this pid.
    Parent(libc::pid_t),
}

/// Forks.
///
/// # Safety
///
/// The calling process must be single-threaded: the child then holds no
/// lock another thread held, and may run any code. The child must leave
/// through [`exit_child`], never by returning into the parent's code.
pub unsafe fn fork() -> io::Result<Fork> {
    // SAFETY: the caller guarantees the process is single-threaded.
    match check(unsafe { libc::fork() })? {
        0 => Ok(Fork::Child),
        pid => Ok(Fork::Parent(pid)),
    }
}

/// Ends a forked child at once: no destructors, no atexit handlers, no
/// flush of buffers it shares with the parent.
pub fn exit_child(code: i32) -> ! {
    // SAFETY: _exit only ends the calling process.
    unsafe { libc::_exit(code) }
}

/// Waits for child `pid` to end.
pub fn wait_child(pid: libc::pid_t) -> io::Result<ExitStatus> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a live int for waitpid to fill.
        match check(unsafe { libc::waitpid(pid, &mut status, 0) }) {
            Ok(_) => return Ok(ExitStatus::from_raw(status)),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        }
    }
}

/// One round of `bench syscall`: getpid (the raw system call: the C
/// library may cache it), dup(0) + close, umask, getuid.
pub fn syscall_round() -> io::Result<()> {
    // SAFETY: SYS_getpid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) };
    // SAFETY: dup takes no pointers; it fails cleanly if fd 0 is closed.
    let duplicate = check(unsafe { libc::dup(0) })?;
    // SAFETY: `duplicate` was just returned by dup and nothing else owns it.
    check(unsafe { libc::close(duplicate) })?;
    // SAFETY: umask and getuid take no pointers and cannot fail.
    unsafe {
        libc::umask(0o022);
        libc::getuid();
    }
    Ok(())
}

/// `kexec_file_load`'s number (include/uapi/asm-generic/unistd.h on arm64;
/// libc has it only for some targets).
#[cfg(target_arch = "aarch64")]
const SYS_KEXEC_FILE_LOAD: libc::c_long = 294;
#[cfg(not(target_arch = "aarch64"))]
const SYS_KEXEC_FILE_LOAD: libc::c_long = libc::SYS_kexec_file_load;

/// Loads `kernel` with `initrd` and `cmdline` as the kernel a kexec
/// reboot starts (kexec_file_load(2)).
pub fn kexec_file_load(kernel: &File, initrd: &File, cmdline: &std::ffi::CStr) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let length = cmdline.to_bytes_with_nul().len();
    // SAFETY: both descriptors are open files the caller keeps for the
    // call's duration; `cmdline` is NUL-terminated and `length` counts the
    // NUL, as the call requires; the kernel only reads through them.
    let result = unsafe {
        libc::syscall(
            SYS_KEXEC_FILE_LOAD,
            kernel.as_raw_fd(),
            initrd.as_raw_fd(),
            length,
            cmdline.as_ptr(),
            0 as libc::c_ulong,
        )
    };
    if result == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Reboots into the kernel [`kexec_file_load`] loaded; returns only with
/// the reason it could not.
pub fn reboot_into_loaded_kernel() -> io::Error {
    // SAFETY: sync(2) and reboot(2) take no pointers.
    unsafe {
        libc::sync();
        libc::reboot(libc::LINUX_REBOOT_CMD_KEXEC);
    }
    io::Error::last_os_error()
}

/// The dynamic clock id of the POSIX clock behind the open character
/// device `device` (a PTP clock's `/dev/ptpN`): Linux's `FD_TO_CLOCKID`,
/// `(~fd << 3) | CLOCKFD` with `CLOCKFD` = 3 (include/linux/posix-timers.h).
fn clock_id_of(device: &File) -> libc::clockid_t {
    use std::os::fd::AsRawFd;
    const CLOCKFD: libc::clockid_t = 3;
    ((!device.as_raw_fd()) << 3) | CLOCKFD
}

/// The time of the POSIX clock behind `device` in nanoseconds since the
/// epoch (clock_gettime(2) on its dynamic clock id).
pub fn device_clock_ns(device: &File) -> io::Result<u64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a live timespec for clock_gettime to fill; the
    // clock id names `device`, which the caller keeps open for the call.
    check(unsafe { libc::clock_gettime(clock_id_of(device), &mut now) })?;
    let secs = u64::try_from(now.tv_sec)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a time before the epoch"))?;
    Ok(secs * 1_000_000_000 + now.tv_nsec as u64)
}

/// The virtual counter, CNTVCT_EL0 (Linux lets user space read it:
/// CNTKCTL_EL1.EL0VCTEN), after an ISB so that the read is not taken early
/// (Arm ARM D12.1.2, "reads of CNTVCT_EL0 can occur speculatively").
#[cfg(target_arch = "aarch64")]
pub fn virtual_counter() -> Option<u64> {
    let counter: u64;
    // SAFETY: an ISB and an MRS of a register EL0 may read: no memory
    // access, no other register written.
    unsafe {
        core::arch::asm!(
            "isb",
            "mrs {counter}, cntvct_el0",
            counter = out(reg) counter,
            options(nomem, nostack, preserves_flags)
        );
    }
    Some(counter)
}

/// No architected counter to read off arm64.
#[cfg(not(target_arch = "aarch64"))]
pub fn virtual_counter() -> Option<u64> {
    None
}

/// `struct perf_event_attr` up to `config1` (PERF_ATTR_SIZE_VER0, 64
/// bytes; include/uapi/linux/perf_event.h): the kernel takes this first
/// version of the layout from every caller.
#[repr(C)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    /// The bit fields: `disabled` (bit 0), `inherit`, `pinned`,
    /// `exclusive`, `exclude_user`, `exclude_kernel` (bit 5), ...
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const _: () = assert!(size_of::<PerfEventAttr>() == 64);

/// PERF_TYPE_HARDWARE.
const PERF_TYPE_HARDWARE: u32 = 0;

/// A generic hardware event (`enum perf_hw_id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HardwareEvent {
    /// PERF_COUNT_HW_CPU_CYCLES.
    CpuCycles = 0,
}

/// Opens a counter of `event` for the calling thread on any CPU, counting
/// from now (perf_event_open(2) with pid 0, cpu -1, no group, no flags).
pub fn perf_event_open(event: HardwareEvent) -> io::Result<File> {
    let attr = PerfEventAttr {
        kind: PERF_TYPE_HARDWARE,
        size: size_of::<PerfEventAttr>() as u32,
        config: event as u64,
        sample_period: 0,
        sample_type: 0,
        read_format: 0,
        flags: 0,
        wakeup_events: 0,
        bp_type: 0,
        config1: 0,
    };
    // SAFETY: `attr` is a live, fully initialised perf_event_attr of the
    // size it declares; the other arguments are plain integers.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            0 as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            0 as libc::c_ulong,
        )
    };
    let fd = libc::c_int::try_from(fd).map_err(|_| io::Error::other("bad descriptor"))?;
    check(fd)?;
    // SAFETY: `fd` was just returned by perf_event_open and nothing else
    // owns it.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}
