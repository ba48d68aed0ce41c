//! The hypervisor's command line (`/chosen/bootargs` of the host DT).
//!
//! Options are space-separated `key=value` words. Words the hypervisor
//! does not know are ignored (a boot loader may add its own); a known key
//! with a bad value is kept at its default and reported as a warning, so a
//! typo never stops a machine from booting.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use log::LevelFilter;

/// A deliberate fault, to prove the fatal-exception path end to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelfTest {
    /// Execute an undefined instruction at EL2.
    Undef,
    /// Recurse until the thread stack runs into its guard page.
    StackOverflow,
    /// Panic on every CPU at once, after the tick check: one report, and
    /// the machine stops.
    PanicAll,
    /// Panic in the UEFI stage, before ExitBootServices: the report goes
    /// to the firmware's console and the image returns to the firmware.
    /// Ignored when el2 was not started as an EFI application.
    UefiPanic,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootArgs {
    /// `loglevel=`: a `log` level name (`off`, `error`, `warn`, `info`,
    /// `debug`, `trace`) or a Linux console level number 0..=8.
    pub log_level: LevelFilter,
    /// `el2.selftest=undef|stack-overflow|panic-all|uefi-panic`.
    pub selftest: Option<SelfTest>,
    /// `el2.tick_ms=`: period of the EL2 physical timer tick (1..=1000).
    pub tick_ms: u32,
    /// `el2.tick_check_ms=`: how long each CPU counts ticks at boot (0 skips the check).
    pub tick_check_ms: u32,
    /// `el2.fail-alloc=NAME`: fault injection. The VM named NAME is
    /// created once per heap allocation its creation makes, the n-th time
    /// with its n-th allocation refused; each attempt must fail cleanly
    /// (an error, everything it took given back) until one makes no
    /// allocation fail and the VM starts (`el2::memory::heap`).
    pub fail_alloc: Option<String>,
}

impl Default for BootArgs {
    fn default() -> Self {
        Self {
            log_level: LevelFilter::Info,
            selftest: None,
            tick_ms: 10,
            tick_check_ms: 100,
            fail_alloc: None,
        }
    }
}

/// Parses `cmdline`; returns the options and one warning per rejected word.
pub fn parse(cmdline: &str) -> (BootArgs, Vec<String>) {
    let mut args = BootArgs::default();
    let mut warnings = Vec::new();
    for word in cmdline.split_ascii_whitespace() {
        let Some((key, value)) = word.split_once('=') else {
            continue;
        };
        let ok = match key {
            "loglevel" => parse_level(value).map(|l| args.log_level = l).is_some(),
            "el2.selftest" => match value {
                "undef" => {
                    args.selftest = Some(SelfTest::Undef);
                    true
                }
                "stack-overflow" => {
                    args.selftest = Some(SelfTest::StackOverflow);
                    true
                }
                "panic-all" => {
                    args.selftest = Some(SelfTest::PanicAll);
                    true
                }
                "uefi-panic" => {
                    args.selftest = Some(SelfTest::UefiPanic);
                    true
                }
                _ => false,
            },
            "el2.fail-alloc" => {
                let ok = !value.is_empty();
                if ok {
                    args.fail_alloc = Some(String::from(value));
                }
                ok
            }
            "el2.tick_ms" => parse_in(value, 1, 1000).map(|v| args.tick_ms = v).is_some(),
            "el2.tick_check_ms" => parse_in(value, 0, 10_000)
                .map(|v| args.tick_check_ms = v)
                .is_some(),
            _ => true,
        };
        if !ok {
            warnings.push(format!("bootargs: ignoring bad value in '{word}'"));
        }
    }
    (args, warnings)
}

fn parse_in(value: &str, min: u32, max: u32) -> Option<u32> {
    value.parse().ok().filter(|v| (min..=max).contains(v))
}

fn parse_level(value: &str) -> Option<LevelFilter> {
    // Linux console levels: 0 emerg .. 3 err, 4 warning, 5 notice, 6 info, 7 debug.
    if let Ok(n) = value.parse::<u8>() {
        return match n {
            0 => Some(LevelFilter::Off),
            1..=3 => Some(LevelFilter::Error),
            4 => Some(LevelFilter::Warn),
            5 | 6 => Some(LevelFilter::Info),
            7 => Some(LevelFilter::Debug),
            8 => Some(LevelFilter::Trace),
            _ => None,
        };
    }
    value.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_when_empty() {
        let (args, warnings) = parse("");
        assert_eq!(args, BootArgs::default());
        assert!(warnings.is_empty());
    }

    #[test]
    fn reads_every_option() {
        let (args, warnings) = parse(
            "console=ttyAMA0 loglevel=debug el2.selftest=stack-overflow el2.tick_ms=4 el2.tick_check_ms=0 el2.fail-alloc=victim",
        );
        assert!(warnings.is_empty());
        assert_eq!(args.fail_alloc.as_deref(), Some("victim"));
        assert_eq!(args.log_level, LevelFilter::Debug);
        assert_eq!(args.selftest, Some(SelfTest::StackOverflow));
        assert_eq!(args.tick_ms, 4);
        assert_eq!(args.tick_check_ms, 0);
    }

    #[test]
    fn every_selftest_has_a_name() {
        for (name, test) in [
            ("undef", SelfTest::Undef),
            ("stack-overflow", SelfTest::StackOverflow),
            ("panic-all", SelfTest::PanicAll),
            ("uefi-panic", SelfTest::UefiPanic),
        ] {
            let (args, warnings) = parse(&alloc::format!("el2.selftest={name}"));
            assert_eq!((args.selftest, warnings.len()), (Some(test), 0), "{name}");
        }
        assert_eq!(parse("el2.selftest=panic").1.len(), 1);
    }

    #[test]
    fn linux_numeric_levels() {
        assert_eq!(parse("loglevel=7").0.log_level, LevelFilter::Debug);
        assert_eq!(parse("loglevel=4").0.log_level, LevelFilter::Warn);
        assert_eq!(parse("loglevel=0").0.log_level, LevelFilter::Off);
        assert_eq!(parse("loglevel=TRACE").0.log_level, LevelFilter::Trace);
    }

    #[test]
    fn bad_values_keep_defaults_and_warn() {
        let (args, warnings) =
            parse("loglevel=loud el2.tick_ms=0 el2.selftest=reboot el2.tick_ms=x el2.fail-alloc=");
        assert_eq!(args, BootArgs::default());
        assert_eq!(warnings.len(), 5);
        assert!(warnings[0].contains("loglevel=loud"));
    }
}
