//! Command-line options: `--name VALUE` or `--name=VALUE`, every option
//! taking a value, no positional arguments.

use std::str::FromStr;

use super::Failure;

/// The options after the subcommand's name.
pub struct Options {
    args: std::vec::IntoIter<String>,
    /// The value of a `--name=VALUE` just returned by `next_option`.
    inline_value: Option<String>,
}

fn usage(message: String) -> Failure {
    Failure::Usage(message)
}

impl Options {
    /// Options from `args`.
    pub fn new(args: Vec<String>) -> Self {
        Self {
            args: args.into_iter(),
            inline_value: None,
        }
    }

    /// The next option's name (`--seconds`), or `None` at the end.
    pub fn next_option(&mut self) -> Result<Option<String>, Failure> {
        if let Some(value) = self.inline_value.take() {
            return Err(usage(format!("unexpected value {value:?}")));
        }
        let Some(arg) = self.args.next() else {
            return Ok(None);
        };
        if !arg.starts_with("--") || arg.len() == 2 {
            return Err(usage(format!("unexpected argument {arg:?}")));
        }
        match arg.split_once('=') {
            Some((name, value)) => {
                self.inline_value = Some(value.to_owned());
                Ok(Some(name.to_owned()))
            }
            None => Ok(Some(arg)),
        }
    }

    /// The value of `option`, just returned by `next_option`.
    pub fn value(&mut self, option: &str) -> Result<String, Failure> {
        self.inline_value
            .take()
            .or_else(|| self.args.next())
            .ok_or_else(|| usage(format!("{option} needs a value")))
    }

    /// The value of `option` as a `T`; `what` describes a valid value for
    /// the error message.
    pub fn parse<T: FromStr>(&mut self, option: &str, what: &str) -> Result<T, Failure> {
        let text = self.value(option)?;
        text.parse()
            .map_err(|_| usage(format!("{option}: {text:?} is not {what}")))
    }

    /// The value of `option` as an integer of at least 1.
    pub fn positive(&mut self, option: &str) -> Result<u64, Failure> {
        match self.parse(option, "a positive integer")? {
            0 => Err(usage(format!("{option}: must be at least 1"))),
            value => Ok(value),
        }
    }
}

/// The error for an option the subcommand does not take.
pub fn unknown_option(command: &str, option: &str) -> Failure {
    usage(format!("{command} takes no option {option}"))
}

/// The error for a required option that was not given.
pub fn missing_option(command: &str, option: &str) -> Failure {
    usage(format!("{command} needs {option}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(args: &[&str]) -> Options {
        Options::new(args.iter().map(|arg| (*arg).to_owned()).collect())
    }

    fn message(failure: Failure) -> String {
        match failure {
            Failure::Usage(message) => message,
            Failure::Environment(message) => panic!("not a usage error: {message}"),
        }
    }

    #[test]
    fn both_spellings_of_a_value() {
        let mut args = options(&["--seconds", "5", "--debugfs=/x=y"]);
        assert_eq!(args.next_option().unwrap().as_deref(), Some("--seconds"));
        assert_eq!(args.positive("--seconds").unwrap(), 5);
        assert_eq!(args.next_option().unwrap().as_deref(), Some("--debugfs"));
        assert_eq!(args.value("--debugfs").unwrap(), "/x=y");
        assert!(args.next_option().unwrap().is_none());
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        let mut args = options(&["seconds"]);
        assert!(message(args.next_option().unwrap_err()).contains("unexpected argument"));

        let mut args = options(&["--seconds"]);
        args.next_option().unwrap();
        assert_eq!(
            message(args.positive("--seconds").unwrap_err()),
            "--seconds needs a value"
        );

        let mut args = options(&["--seconds", "0"]);
        args.next_option().unwrap();
        assert!(message(args.positive("--seconds").unwrap_err()).contains("at least 1"));

        let mut args = options(&["--seconds", "-3"]);
        args.next_option().unwrap();
        assert_eq!(
            message(args.positive("--seconds").unwrap_err()),
            "--seconds: \"-3\" is not a positive integer"
        );

        let mut args = options(&["--", "x"]);
        assert!(args.next_option().is_err());
    }
}
