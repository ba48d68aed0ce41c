//! The pvlinux program: `pvlinux truth|stress|hotplug|kexec|bench|ptp|perf ...` (see the
//! library's documentation and each subcommand's module in `cmd/`).
//!
//! Exit status: 0 the check passed, 1 it failed, 2 bad arguments or an
//! environment it cannot run in. Every line printed starts with
//! `pvlinux: `.

mod cmd;

use std::process::ExitCode;

use cmd::args::Options;
use cmd::{Failure, Verdict, bench, bench_copy, hotplug, kexec, perf, ptp, stress, truth};
use pvlinux::{EXIT_FAIL, EXIT_PASS, EXIT_USAGE};

/// Every subcommand's usage line.
const USAGES: [&str; 7] = [
    truth::USAGE,
    stress::USAGE,
    hotplug::USAGE,
    kexec::USAGE,
    bench::USAGE,
    ptp::USAGE,
    perf::USAGE,
];

fn print_usage(usages: &[&str]) {
    for usage in usages {
        eprintln!("pvlinux: usage: {usage}");
    }
}

/// Ends a subcommand's run: its verdict, or why it could not run.
fn finish(outcome: cmd::Outcome, usage: &str) -> ExitCode {
    match outcome {
        Ok(Verdict::Pass) => ExitCode::from(EXIT_PASS),
        Ok(Verdict::Fail) => ExitCode::from(EXIT_FAIL),
        Err(Failure::Usage(message)) => {
            eprintln!("pvlinux: error: {message}");
            print_usage(&[usage]);
            ExitCode::from(EXIT_USAGE)
        }
        Err(Failure::Environment(message)) => {
            eprintln!("pvlinux: error: {message}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn main() -> ExitCode {
    let mut args = Vec::new();
    for arg in std::env::args_os().skip(1) {
        match arg.into_string() {
            Ok(arg) => args.push(arg),
            Err(arg) => {
                eprintln!("pvlinux: error: argument {arg:?} is not UTF-8");
                return ExitCode::from(EXIT_USAGE);
            }
        }
    }
    let Some((command, rest)) = args.split_first() else {
        eprintln!("pvlinux: error: no subcommand");
        print_usage(&USAGES);
        return ExitCode::from(EXIT_USAGE);
    };
    let options = || Options::new(rest.to_vec());
    match command.as_str() {
        "truth" => finish(truth::run(options()), truth::USAGE),
        "stress" => finish(stress::run(options()), stress::USAGE),
        "hotplug" => finish(hotplug::run(options()), hotplug::USAGE),
        "kexec" => finish(kexec::run(options()), kexec::USAGE),
        "bench" => finish(bench::run(options()), bench::USAGE),
        "ptp" => finish(ptp::run(options()), ptp::USAGE),
        "perf" => finish(perf::run(options()), perf::USAGE),
        bench_copy::COPY_COMMAND => bench_copy::copy_main(rest),
        bench_copy::EXECL_COMMAND => bench_copy::execl_main(rest),
        "help" | "--help" | "-h" => {
            for usage in USAGES {
                println!("pvlinux: usage: {usage}");
            }
            ExitCode::from(EXIT_PASS)
        }
        other => {
            eprintln!("pvlinux: error: unknown subcommand {other:?}");
            print_usage(&USAGES);
            ExitCode::from(EXIT_USAGE)
        }
    }
}
