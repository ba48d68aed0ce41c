//! Text to and from the firmware: UEFI strings are UCS-2, NUL-terminated
//! (UEFI 2.10 section 2.3.1, "Data Types": `CHAR16`), and the console
//! wants CR LF line ends (section 12.4, `EFI_SIMPLE_TEXT_OUTPUT_PROTOCOL`).

use alloc::string::String;
use core::fmt;

/// UTF-16 code units per chunk handed to the console, NUL included.
pub const CHUNK: usize = 128;

/// A `fmt::Write` that turns text into NUL-terminated UCS-2 chunks for
/// `OutputString()`: `\n` becomes CR LF, characters outside the Basic
/// Multilingual Plane (which UCS-2 cannot say) become `?`.
pub struct Ucs2Writer<F: FnMut(&[u16])> {
    buf: [u16; CHUNK],
    len: usize,
    sink: F,
}

impl<F: FnMut(&[u16])> Ucs2Writer<F> {
    /// A writer that hands each NUL-terminated chunk to `sink`.
    pub fn new(sink: F) -> Self {
        Self {
            buf: [0; CHUNK],
            len: 0,
            sink,
        }
    }

    fn push(&mut self, unit: u16) {
        // Room for the unit and the terminating NUL.
        if self.len + 1 >= CHUNK {
            self.flush();
        }
        self.buf[self.len] = unit;
        self.len += 1;
    }

    /// Hands what is buffered to the sink.
    pub fn flush(&mut self) {
        if self.len > 0 {
            self.buf[self.len] = 0;
            (self.sink)(&self.buf[..=self.len]);
            self.len = 0;
        }
    }
}

impl<F: FnMut(&[u16])> fmt::Write for Ucs2Writer<F> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            if c == '\n' {
                self.push(u16::from(b'\r'));
            }
            let unit = u16::try_from(u32::from(c)).unwrap_or(u16::from(b'?'));
            self.push(unit);
        }
        Ok(())
    }
}

impl<F: FnMut(&[u16])> Drop for Ucs2Writer<F> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// `s` as a NUL-terminated UCS-2 string; `None` if it holds a NUL or a
/// character outside the Basic Multilingual Plane.
pub fn to_ucs2(s: &str) -> Option<alloc::vec::Vec<u16>> {
    let mut out = alloc::vec::Vec::with_capacity(s.len() + 1);
    for c in s.chars() {
        let unit = u16::try_from(u32::from(c)).ok().filter(|&u| u != 0)?;
        out.push(unit);
    }
    out.push(0);
    Some(out)
}

/// Why load options are not used as the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadOptionsIgnored {
    /// An odd number of bytes: not UCS-2.
    OddSize,
    /// Characters other than printable ASCII and blanks: binary data, such
    /// as the marker firmware stores in the boot options it creates itself.
    NotText,
}

impl fmt::Display for LoadOptionsIgnored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OddSize => write!(f, "an odd number of bytes, not UCS-2 text"),
            Self::NotText => write!(f, "not printable text"),
        }
    }
}

/// The command line in an image's load options
/// (`EFI_LOADED_IMAGE_PROTOCOL.LoadOptions`, UEFI 2.10 section 9.1): UCS-2
/// up to the first NUL, blanks trimmed. `Ok(None)` when there is none.
///
/// Load options are only a command line by convention: a boot option may
/// carry binary data there (firmware marks the boot options it creates
/// itself that way), which is not taken for text. The UEFI Shell passes
/// the whole command it ran, program first; a first word naming a `.efi`
/// file is that program, not an argument, and is dropped.
pub fn load_options_command_line(bytes: &[u8]) -> Result<Option<String>, LoadOptionsIgnored> {
    if bytes.is_empty() {
        return Ok(None);
    }
    if !bytes.len().is_multiple_of(2) {
        return Err(LoadOptionsIgnored::OddSize);
    }
    let mut text = String::new();
    for pair in bytes.chunks_exact(2) {
        let unit = u16::from_le_bytes([pair[0], pair[1]]);
        match unit {
            0 => break,
            0x20..=0x7e => text.push(char::from(unit as u8)),
            0x09 | 0x0a | 0x0d => text.push(' '),
            _ => return Err(LoadOptionsIgnored::NotText),
        }
    }
    let mut words = text.split_ascii_whitespace().peekable();
    if words
        .peek()
        .is_some_and(|w| w.len() > 4 && w[w.len() - 4..].eq_ignore_ascii_case(".efi"))
    {
        words.next();
    }
    let line = words.collect::<alloc::vec::Vec<_>>().join(" ");
    Ok((!line.is_empty()).then_some(line))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use core::fmt::Write;

    fn ucs2(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(u16::to_le_bytes).collect()
    }

    #[test]
    fn console_text_gets_cr_lf_and_nul_terminated_chunks() {
        let mut chunks: Vec<Vec<u16>> = Vec::new();
        {
            let mut w = Ucs2Writer::new(|c: &[u16]| chunks.push(c.to_vec()));
            write!(w, "a\nb\u{1F600}").unwrap();
        }
        assert_eq!(chunks.len(), 1);
        let expected: Vec<u16> = "a\r\nb?\0".encode_utf16().collect();
        assert_eq!(chunks[0], expected);
    }

    #[test]
    fn long_text_is_split_and_nothing_is_lost() {
        let text: String = (0..1000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let mut all: Vec<u16> = Vec::new();
        {
            let mut w = Ucs2Writer::new(|c: &[u16]| {
                assert!(c.len() <= CHUNK);
                assert_eq!(c.last(), Some(&0));
                all.extend_from_slice(&c[..c.len() - 1]);
            });
            w.write_str(&text).unwrap();
        }
        assert_eq!(String::from_utf16(&all).unwrap(), text);
    }

    #[test]
    fn strings_for_the_firmware() {
        assert_eq!(
            to_ucs2("\\EFI\\a").unwrap(),
            [92, 69, 70, 73, 92, 97, 0].to_vec()
        );
        assert!(to_ucs2("a\0b").is_none());
        assert!(to_ucs2("\u{1F600}").is_none());
    }

    #[test]
    fn load_options() {
        assert_eq!(load_options_command_line(&[]), Ok(None));
        assert_eq!(load_options_command_line(&ucs2("\0")), Ok(None));
        assert_eq!(
            load_options_command_line(&ucs2("  loglevel=debug  el2.tick_ms=4\0junk")),
            Ok(Some("loglevel=debug el2.tick_ms=4".into()))
        );
        // The shell passes the program first.
        assert_eq!(
            load_options_command_line(&ucs2("fs0:\\EFI\\BOOT\\BOOTAA64.EFI loglevel=debug")),
            Ok(Some("loglevel=debug".into()))
        );
        assert_eq!(
            load_options_command_line(&ucs2("el2.efi")),
            Ok(None),
            "the program alone is no command line"
        );
        assert_eq!(
            load_options_command_line(&[1, 2, 3]),
            Err(LoadOptionsIgnored::OddSize)
        );
        // A GUID, as firmware stores in boot options it makes itself.
        let guid = [
            0xe8, 0x2d, 0x54, 0x1b, 0x4f, 0x91, 0xd0, 0x4c, 0x97, 0x69, 0x9a, 0x12, 0x43, 0xce,
            0xd1, 0x21,
        ];
        assert_eq!(
            load_options_command_line(&guid),
            Err(LoadOptionsIgnored::NotText)
        );
    }
}
