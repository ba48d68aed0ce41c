//! The subcommands, and what they share: how a run ends, option parsing,
//! reading the debugfs file, the system calls.

pub mod args;
pub mod bench;
pub mod bench_copy;
pub mod hotplug;
pub mod kexec;
pub mod perf;
pub mod ptp;
pub mod stress;
pub mod sys;
pub mod truth;

use std::fmt;
use std::io;
use std::path::Path;

use pvlinux::vcpus::VcpusFile;

/// How a check that ran came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Exit status 0.
    Pass,
    /// Exit status 1.
    Fail,
}

/// Why a check could not run (exit status 2).
#[derive(Debug)]
pub enum Failure {
    /// Bad arguments: the message, then the usage.
    Usage(String),
    /// The environment does not allow the check: the message.
    Environment(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Usage(message) | Self::Environment(message) => f.write_str(message),
        }
    }
}

/// What a subcommand returns.
pub type Outcome = Result<Verdict, Failure>;

/// Shorthand for an environment failure.
pub fn environment(message: impl Into<String>) -> Failure {
    Failure::Environment(message.into())
}

/// Reads and parses the debugfs file; `Ok(None)` if it does not exist.
pub fn read_vcpus(path: &Path) -> Result<Option<VcpusFile>, Failure> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(environment(format!(
                "cannot read {}: {error}",
                path.display()
            )));
        }
    };
    VcpusFile::parse(&text)
        .map(Some)
        .map_err(|error| environment(format!("{}: {error}", path.display())))
}

/// Like [`read_vcpus`], but the file must exist.
pub fn require_vcpus(path: &Path) -> Result<VcpusFile, Failure> {
    read_vcpus(path)?.ok_or_else(|| {
        environment(format!(
            "{} does not exist (is debugfs mounted and the guest kernel's PV-lock driver built in?)",
            path.display()
        ))
    })
}
