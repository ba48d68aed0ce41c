//! The guest command line (`/chosen/bootargs`): whitespace-separated words,
//! `key=value` or bare `key`.

/// A parsed view of a command line.
#[derive(Clone, Copy, Debug, Default)]
pub struct BootArgs<'a> {
    line: &'a str,
}

/// Why a `key=value` could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgError<'a> {
    /// The value is not a number (or does not fit).
    NotANumber { key: &'a str, value: &'a str },
    /// The value is not one of the allowed words.
    NotOneOf {
        key: &'a str,
        value: &'a str,
        allowed: &'static [&'static str],
    },
    /// The number is outside the allowed range.
    OutOfRange {
        key: &'a str,
        value: u64,
        min: u64,
        max: u64,
    },
}

impl core::fmt::Display for ArgError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ArgError::NotANumber { key, value } => {
                write!(f, "{key}={value}: not a number")
            }
            ArgError::NotOneOf {
                key,
                value,
                allowed,
            } => {
                write!(f, "{key}={value}: must be one of")?;
                for (i, word) in allowed.iter().enumerate() {
                    write!(f, "{}{word}", if i == 0 { " " } else { ", " })?;
                }
                Ok(())
            }
            ArgError::OutOfRange {
                key,
                value,
                min,
                max,
            } => write!(f, "{key}={value}: must be between {min} and {max}"),
        }
    }
}

impl<'a> BootArgs<'a> {
    pub const fn new(line: &'a str) -> Self {
        Self { line }
    }

    /// The whole line.
    pub const fn as_str(&self) -> &'a str {
        self.line
    }

    /// The value of the last `key=value` word (the last one wins, as in
    /// Linux), `Some("")` for a bare `key`, `None` if absent.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.line
            .split_ascii_whitespace()
            .rev()
            .find_map(|word| match word.split_once('=') {
                Some((k, v)) if k == key => Some(v),
                None if word == key => Some(""),
                _ => None,
            })
    }

    /// Whether `key` is present (bare or with any value but `0`, `off`, `no`
    /// or `false`).
    pub fn flag(&self, key: &str) -> bool {
        self.get(key)
            .is_some_and(|v| !matches!(v, "0" | "off" | "no" | "false"))
    }

    /// One of the words in `allowed` (`None` if the key is absent).
    pub fn choice(
        &self,
        key: &'a str,
        allowed: &'static [&'static str],
    ) -> Result<Option<&'a str>, ArgError<'a>> {
        match self.get(key) {
            None => Ok(None),
            Some(value) if allowed.contains(&value) => Ok(Some(value)),
            Some(value) => Err(ArgError::NotOneOf {
                key,
                value,
                allowed,
            }),
        }
    }

    /// A decimal (or `0x` hexadecimal) number in `min..=max`, `default` if
    /// the key is absent.
    pub fn number(
        &self,
        key: &'a str,
        default: u64,
        min: u64,
        max: u64,
    ) -> Result<u64, ArgError<'a>> {
        let Some(value) = self.get(key) else {
            return Ok(default);
        };
        let parsed = match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => value.parse(),
        };
        let n = parsed.map_err(|_| ArgError::NotANumber { key, value })?;
        if (min..=max).contains(&n) {
            Ok(n)
        } else {
            Err(ArgError::OutOfRange {
                key,
                value: n,
                min,
                max,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_values() {
        let a = BootArgs::new("  work=100 rounds=0x10 verbose work=200 quiet=off ");
        assert_eq!(a.get("work"), Some("200"));
        assert_eq!(a.get("verbose"), Some(""));
        assert_eq!(a.get("verb"), None);
        assert!(a.flag("verbose"));
        assert!(!a.flag("quiet"));
        assert!(!a.flag("absent"));
        assert_eq!(a.number("rounds", 5, 1, 100), Ok(16));
        assert_eq!(a.number("absent", 5, 1, 100), Ok(5));
        assert_eq!(
            a.number("work", 5, 1, 100),
            Err(ArgError::OutOfRange {
                key: "work",
                value: 200,
                min: 1,
                max: 100
            })
        );
        let bad = BootArgs::new("work=lots");
        assert_eq!(
            bad.number("work", 1, 0, 9),
            Err(ArgError::NotANumber {
                key: "work",
                value: "lots"
            })
        );
        assert_eq!(
            bad.number("work", 1, 0, 9).unwrap_err().to_string(),
            "work=lots: not a number"
        );
        let c = BootArgs::new("mode=fast test=odd");
        assert_eq!(c.choice("mode", &["slow", "fast"]), Ok(Some("fast")));
        assert_eq!(c.choice("absent", &["slow"]), Ok(None));
        assert_eq!(
            c.choice("test", &["a", "b"]).unwrap_err().to_string(),
            "test=odd: must be one of a, b"
        );
    }
}
