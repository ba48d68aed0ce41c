//! One copy of a `bench` test: the work it does, and how it is started
//! together with the other copies.
//!
//! A copy first prepares (files, buffers), then says it is ready (one
//! byte on its own ready pipe, whose EOF tells the parent it died), waits
//! for its start byte on the start pipe all copies share, waits its seeded
//! start delay, and does its fixed work. A copy of a process test is
//! `pvlinux __copy ...` (stdin the start pipe, stdout its ready pipe,
//! stderr a pipe the parent reads its errors from); it starts no thread,
//! so it may fork. A copy of a thread test is a thread of the `bench`
//! process with its own ready pipe and its own duplicate of the start
//! pipe's read end.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::Duration;

use pvlinux::suite::{
    BenchTest, CopyKind, CopyPlan, FCOPY_FILE_BYTES, FILEWRITE_BYTES, HACKBENCH_MESSAGE_BYTES,
    HACKBENCH_RECEIVERS, HACKBENCH_SENDERS, MMAP_BYTES, PIPE_MESSAGE_BYTES, SHELL_SCRIPT,
    SHELL8_SHELLS,
};
use pvlinux::{EXIT_FAIL, EXIT_USAGE};

use super::sys::{self, Fork};

/// The program itself, for the copies and the `execl` chain.
pub const SELF_EXE: &str = "/proc/self/exe";
/// The hidden subcommand a process copy runs.
pub const COPY_COMMAND: &str = "__copy";
/// The hidden subcommand of each `execl` link.
pub const EXECL_COMMAND: &str = "__execl";

/// What every copy of a run shares.
#[derive(Clone, Debug)]
pub struct CopyEnv {
    /// Where the file tests put their files.
    pub dir: PathBuf,
    /// The shell of `shell1` and `shell8`.
    pub shell: PathBuf,
    /// Starts every scratch file's name, unique to the `bench` process.
    pub scratch: String,
}

impl CopyEnv {
    /// The source and destination files of `fcopy` copy `copy`.
    pub fn fcopy_paths(&self, copy: u32) -> (PathBuf, PathBuf) {
        let base = format!("{}-fcopy-{copy}", self.scratch);
        (
            self.dir.join(format!("{base}.src")),
            self.dir.join(format!("{base}.dst")),
        )
    }

    /// The file all `filewrite` copies write.
    pub fn filewrite_path(&self) -> PathBuf {
        self.dir.join(format!("{}-filewrite", self.scratch))
    }
}

/// Where a copy runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyContext {
    /// In a `__copy` process, which starts no thread: it may fork.
    OwnProcess,
    /// In a thread of the `bench` process.
    Thread,
}

/// A copy's ends of the ready and start pipes.
pub struct Gate {
    /// One byte here says the copy is ready.
    pub ready: File,
    /// One byte from here releases it.
    pub start: File,
}

/// The timed part of a copy, prepared.
type Work = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// `what: error`.
fn context<T>(result: io::Result<T>, what: impl FnOnce() -> String) -> Result<T, String> {
    result.map_err(|error| format!("{}: {error}", what()))
}

/// Runs one copy: prepare, ready, wait for the start, delay, work.
pub fn run_copy(
    test: BenchTest,
    copy: u32,
    plan: CopyPlan,
    env: &CopyEnv,
    runs_in: CopyContext,
    gate: Gate,
) -> Result<(), String> {
    let work = prepare(test, copy, plan.iterations, env, runs_in);
    let Gate {
        mut ready,
        mut start,
    } = gate;
    // Ready even if preparing failed: the parent waits for every copy.
    context(ready.write_all(&[1]), || "cannot signal ready".into())?;
    drop(ready);
    match start.read(&mut [0]) {
        Ok(1) => {}
        Ok(_) => return Err("the bench process gave up before the start".into()),
        Err(error) => return Err(format!("cannot wait for the start: {error}")),
    }
    drop(start);
    let work = work?;
    if plan.start_delay_ns > 0 {
        std::thread::sleep(Duration::from_nanos(plan.start_delay_ns));
    }
    work()
}

/// The work of `iterations` of `test`, its set-up done.
fn prepare(
    test: BenchTest,
    copy: u32,
    iterations: u64,
    env: &CopyEnv,
    runs_in: CopyContext,
) -> Result<Work, String> {
    let expected = match test.copy_kind() {
        CopyKind::Process => CopyContext::OwnProcess,
        CopyKind::Thread => CopyContext::Thread,
    };
    if runs_in != expected {
        return Err(format!("{} copies cannot run as {runs_in:?}", test.name()));
    }
    let env = env.clone();
    Ok(match test {
        BenchTest::Execl => Box::new(move || Err(exec_next_link(iterations.saturating_sub(1)))),
        BenchTest::Spawn => Box::new(move || fork_exit_wait(iterations)),
        BenchTest::Fcopy256 | BenchTest::Fcopy1024 | BenchTest::Fcopy4096 => {
            let buffer = vec![0u8; test.fcopy_buffer_bytes().unwrap_or(4096)];
            let files = prepare_fcopy(&env, copy)?;
            Box::new(move || fcopy(files, buffer, iterations))
        }
        BenchTest::Pipe => {
            let pipe = context(io::pipe(), || "pipe".into())?;
            Box::new(move || pipe_round_trips(pipe, iterations))
        }
        BenchTest::Context1 => Box::new(move || context_switches(iterations)),
        BenchTest::Shell1 => Box::new(move || shells(&env.shell, 1, iterations)),
        BenchTest::Shell8 => Box::new(move || shells(&env.shell, SHELL8_SHELLS, iterations)),
        BenchTest::Syscall => Box::new(move || syscalls(iterations)),
        BenchTest::Hackbench => Box::new(move || hackbench(iterations)),
        BenchTest::Mmap => Box::new(move || mmaps(iterations)),
        BenchTest::Filewrite => {
            let path = env.filewrite_path();
            let file = context(OpenOptions::new().write(true).open(&path), || {
                format!("cannot open {}", path.display())
            })?;
            let offset = u64::from(copy) * FILEWRITE_BYTES as u64;
            Box::new(move || file_writes(file, offset, iterations))
        }
    })
}

/// `exited with status 1`, `was killed by signal 9`.
pub fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => format!("ended with {status}"),
    }
}

/// Waits for a forked or spawned child and requires a clean exit.
fn wait_child(pid: libc::pid_t, what: &str) -> Result<(), String> {
    let status = context(sys::wait_child(pid), || format!("waitpid of {what}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} {}", describe(status)))
    }
}

/// The exit code of a forked child whose work returned `result`.
fn child_exit_code(result: Result<(), String>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("{error}");
            1
        }
    }
}

/// Replaces this process with the next link of the chain; returns only
/// if that fails, with why.
fn exec_next_link(remaining: u64) -> String {
    let error = Command::new(SELF_EXE)
        .arg(EXECL_COMMAND)
        .arg(remaining.to_string())
        .exec();
    format!("cannot execute {SELF_EXE}: {error}")
}

/// `pvlinux __execl R`: one link of the `execl` chain; the last (R = 0)
/// exits.
pub fn execl_main(args: &[String]) -> ExitCode {
    let remaining = match args {
        [remaining] => remaining.parse::<u64>().ok(),
        _ => None,
    };
    match remaining {
        Some(0) => ExitCode::SUCCESS,
        Some(remaining) => {
            eprintln!("{}", exec_next_link(remaining - 1));
            ExitCode::from(EXIT_FAIL)
        }
        None => {
            eprintln!("pvlinux: error: {EXECL_COMMAND} takes the number of execs left");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn fork_exit_wait(iterations: u64) -> Result<(), String> {
    for _ in 0..iterations {
        // SAFETY: the spawn test runs only in a `__copy` process (prepare checks),
        // which is single-threaded; the child only exits.
        match context(unsafe { sys::fork() }, || "fork".into())? {
            Fork::Child => sys::exit_child(0),
            Fork::Parent(pid) => wait_child(pid, "the forked child")?,
        }
    }
    Ok(())
}

/// An `fcopy` copy's open files.
struct FcopyFiles {
    source: File,
    source_path: PathBuf,
    destination: File,
    destination_path: PathBuf,
}

fn prepare_fcopy(env: &CopyEnv, copy: u32) -> Result<FcopyFiles, String> {
    let (source_path, destination_path) = env.fcopy_paths(copy);
    let contents: Vec<u8> = (0..FCOPY_FILE_BYTES).map(|i| (i % 251) as u8).collect();
    context(std::fs::write(&source_path, contents), || {
        format!("cannot write {}", source_path.display())
    })?;
    let source = context(File::open(&source_path), || {
        format!("cannot open {}", source_path.display())
    })?;
    let destination = context(File::create(&destination_path), || {
        format!("cannot create {}", destination_path.display())
    })?;
    Ok(FcopyFiles {
        source,
        source_path,
        destination,
        destination_path,
    })
}

/// Copies the source over the destination `iterations` times, from the
/// start each time, through `buffer`.
fn fcopy(mut files: FcopyFiles, mut buffer: Vec<u8>, iterations: u64) -> Result<(), String> {
    let source = files.source_path.display();
    let destination = files.destination_path.display();
    for _ in 0..iterations {
        context(files.source.rewind(), || format!("seek {source}"))?;
        context(files.destination.rewind(), || format!("seek {destination}"))?;
        let mut copied = 0;
        loop {
            let read = context(files.source.read(&mut buffer), || format!("read {source}"))?;
            if read == 0 {
                break;
            }
            context(files.destination.write_all(&buffer[..read]), || {
                format!("write {destination}")
            })?;
            copied += read;
        }
        if copied != FCOPY_FILE_BYTES {
            return Err(format!(
                "{source} held {copied} bytes, not {FCOPY_FILE_BYTES}"
            ));
        }
    }
    Ok(())
}

fn pipe_round_trips(
    (mut reader, mut writer): (io::PipeReader, io::PipeWriter),
    iterations: u64,
) -> Result<(), String> {
    let mut message = [0x5a; PIPE_MESSAGE_BYTES];
    for _ in 0..iterations {
        context(writer.write_all(&message), || "pipe write".into())?;
        context(reader.read_exact(&mut message), || "pipe read".into())?;
    }
    Ok(())
}

/// The child of `context1`: returns each number it receives plus one.
fn echo_incremented(
    mut from_parent: io::PipeReader,
    mut to_parent: io::PipeWriter,
    iterations: u64,
) -> Result<(), String> {
    let mut expected = 0u32;
    for _ in 0..iterations {
        let mut number = [0; 4];
        context(from_parent.read_exact(&mut number), || {
            "context1 child read".into()
        })?;
        let number = u32::from_ne_bytes(number);
        if number != expected {
            return Err(format!("context1 child got {number}, expected {expected}"));
        }
        let reply = number.wrapping_add(1);
        context(to_parent.write_all(&reply.to_ne_bytes()), || {
            "context1 child write".into()
        })?;
        expected = reply.wrapping_add(1);
    }
    Ok(())
}

fn context_switches(iterations: u64) -> Result<(), String> {
    let (from_parent, mut to_child) = context(io::pipe(), || "pipe".into())?;
    let (mut from_child, to_parent) = context(io::pipe(), || "pipe".into())?;
    // SAFETY: context1 runs only in a `__copy` process (prepare checks),
    // which is single-threaded; the child leaves through exit_child.
    let pid = match context(unsafe { sys::fork() }, || "fork".into())? {
        Fork::Child => {
            drop(to_child);
            drop(from_child);
            sys::exit_child(child_exit_code(echo_incremented(
                from_parent,
                to_parent,
                iterations,
            )))
        }
        Fork::Parent(pid) => pid,
    };
    // Only the child keeps these ends, so it sees EOF if this side fails.
    drop(from_parent);
    drop(to_parent);
    let mut ping = || -> Result<(), String> {
        let mut number = 0u32;
        for _ in 0..iterations {
            context(to_child.write_all(&number.to_ne_bytes()), || {
                "context1 write".into()
            })?;
            let mut reply = [0; 4];
            context(from_child.read_exact(&mut reply), || "context1 read".into())?;
            let reply = u32::from_ne_bytes(reply);
            if reply != number.wrapping_add(1) {
                return Err(format!("context1 got {reply} back for {number}"));
            }
            number = reply.wrapping_add(1);
        }
        Ok(())
    };
    let pinged = ping();
    drop(to_child);
    drop(from_child);
    let waited = wait_child(pid, "the context1 child");
    pinged.and(waited)
}

fn shell_command(shell: &Path) -> Command {
    let mut command = Command::new(shell);
    command
        .arg("-c")
        .arg(SHELL_SCRIPT)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    command
}

/// `iterations` times, starts `concurrent` shells at once and waits for
/// them all.
fn shells(shell: &Path, concurrent: u64, iterations: u64) -> Result<(), String> {
    let name = shell.display();
    let mut running: Vec<Child> = Vec::with_capacity(concurrent as usize);
    for _ in 0..iterations {
        let mut spawn_error = None;
        for _ in 0..concurrent {
            match shell_command(shell).spawn() {
                Ok(child) => running.push(child),
                Err(error) => {
                    spawn_error = Some(format!("cannot run {name}: {error}"));
                    break;
                }
            }
        }
        let mut first_error = spawn_error;
        for mut child in running.drain(..) {
            let outcome = match child.wait() {
                Ok(status) if status.success() => None,
                Ok(status) => Some(format!("{name} -c SCRIPT {}", describe(status))),
                Err(error) => Some(format!("cannot wait for {name}: {error}")),
            };
            first_error = first_error.or(outcome);
        }
        if let Some(error) = first_error {
            return Err(error);
        }
    }
    Ok(())
}

fn syscalls(iterations: u64) -> Result<(), String> {
    for _ in 0..iterations {
        context(sys::syscall_round(), || "dup(0)/close".into())?;
    }
    Ok(())
}

/// A `hackbench` receiver: reads every sender's messages.
fn receive(mut pipe: io::PipeReader, messages: u64) -> Result<(), String> {
    let mut message = [0; HACKBENCH_MESSAGE_BYTES];
    for received in 0..messages {
        context(pipe.read_exact(&mut message), || {
            format!("hackbench receiver read after {received} of {messages} messages")
        })?;
    }
    Ok(())
}

/// A `hackbench` sender: `per_receiver` messages to each receiver, in
/// turn.
fn send(mut pipes: Vec<io::PipeWriter>, per_receiver: u64) -> Result<(), String> {
    let message = [0xa5; HACKBENCH_MESSAGE_BYTES];
    for _ in 0..per_receiver {
        for pipe in &mut pipes {
            context(pipe.write_all(&message), || "hackbench sender write".into())?;
        }
    }
    Ok(())
}

/// One group: each of the senders writes `per_receiver` messages to each
/// receiver's pipe.
fn hackbench(per_receiver: u64) -> Result<(), String> {
    let mut readers = Vec::with_capacity(HACKBENCH_RECEIVERS);
    let mut writers = Vec::with_capacity(HACKBENCH_RECEIVERS);
    for _ in 0..HACKBENCH_RECEIVERS {
        let (reader, writer) = context(io::pipe(), || "pipe".into())?;
        readers.push(reader);
        writers.push(writer);
    }
    let mut children = Vec::with_capacity(HACKBENCH_RECEIVERS + HACKBENCH_SENDERS);
    let mut fork_error = None;
    let messages_per_receiver = per_receiver * HACKBENCH_SENDERS as u64;
    for child in 0..HACKBENCH_RECEIVERS + HACKBENCH_SENDERS {
        // SAFETY: hackbench runs only in a `__copy` process (prepare
        // checks), which is single-threaded; the child leaves through
        // exit_child.
        match unsafe { sys::fork() } {
            Ok(Fork::Child) if child < HACKBENCH_RECEIVERS => {
                // Keep only this receiver's read end, so that it sees EOF
                // if the senders die.
                let mine = readers.swap_remove(child);
                drop(readers);
                drop(writers);
                sys::exit_child(child_exit_code(receive(mine, messages_per_receiver)))
            }
            Ok(Fork::Child) => {
                drop(readers);
                sys::exit_child(child_exit_code(send(writers, per_receiver)))
            }
            Ok(Fork::Parent(pid)) => children.push(pid),
            Err(error) => {
                fork_error = Some(format!("fork: {error}"));
                break;
            }
        }
    }
    // The children hold every end they need; with these closed, a
    // receiver whose senders are gone sees EOF instead of waiting forever.
    drop(readers);
    drop(writers);
    let mut first_error = fork_error;
    for pid in children {
        let outcome = wait_child(pid, "a hackbench process").err();
        first_error = first_error.or(outcome);
    }
    first_error.map_or(Ok(()), Err)
}

fn mmaps(iterations: u64) -> Result<(), String> {
    for _ in 0..iterations {
        let mut mapping = context(sys::AnonymousMapping::new(MMAP_BYTES), || "mmap".into())?;
        mapping.touch_first_page(1);
        context(mapping.unmap(), || "munmap".into())?;
    }
    Ok(())
}

fn file_writes(file: File, offset: u64, iterations: u64) -> Result<(), String> {
    let block = [0x3c; FILEWRITE_BYTES];
    for _ in 0..iterations {
        context(file.write_all_at(&block, offset), || "pwrite".into())?;
    }
    Ok(())
}

/// A process copy's arguments: what `bench` passes after `__copy`.
struct CopyArgs {
    test: BenchTest,
    copy: u32,
    plan: CopyPlan,
    env: CopyEnv,
}

impl CopyArgs {
    /// `TEST COPY ITERATIONS DELAY_NS DIR SHELL SCRATCH`.
    fn parse(args: &[String]) -> Option<Self> {
        let [test, copy, iterations, delay, dir, shell, scratch] = args else {
            return None;
        };
        Some(Self {
            test: BenchTest::from_name(test)?,
            copy: copy.parse().ok()?,
            plan: CopyPlan {
                iterations: iterations.parse().ok().filter(|&n| n > 0)?,
                start_delay_ns: delay.parse().ok()?,
            },
            env: CopyEnv {
                dir: dir.into(),
                shell: shell.into(),
                scratch: scratch.clone(),
            },
        })
    }
}

/// The gate of a process copy: duplicates of stdout (its ready pipe)
/// and stdin (the start pipe), raw files, so that reading the start byte
/// takes one byte and no buffer takes the other copies' bytes.
fn process_gate() -> io::Result<Gate> {
    Ok(Gate {
        ready: File::from(io::stdout().as_fd().try_clone_to_owned()?),
        start: File::from(io::stdin().as_fd().try_clone_to_owned()?),
    })
}

/// `pvlinux __copy TEST COPY ITERATIONS DELAY_NS DIR SHELL SCRATCH`: one
/// copy of a process test, started by `bench` with the start pipe as
/// stdin, its ready pipe as stdout and its error pipe as stderr.
pub fn copy_main(args: &[String]) -> ExitCode {
    let Some(CopyArgs {
        test,
        copy,
        plan,
        env,
    }) = CopyArgs::parse(args)
    else {
        eprintln!(
            "pvlinux: error: {COPY_COMMAND} is bench's own: \
             TEST COPY ITERATIONS DELAY_NS DIR SHELL SCRATCH"
        );
        return ExitCode::from(EXIT_USAGE);
    };
    let result = match process_gate() {
        Ok(gate) => run_copy(test, copy, plan, &env, CopyContext::OwnProcess, gate),
        Err(error) => Err(format!("cannot use the start and ready pipes: {error}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{error}");
            ExitCode::from(EXIT_FAIL)
        }
    }
}
