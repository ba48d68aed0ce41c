//! Turning a fuzzer's bytes into the values a harness needs.

/// A fuzzer's input read front to back as a stream of little-endian
/// values. Past the end every read yields zeros, so any input, even an
/// empty one, is a complete program: the harness never has to reject one,
/// and a mutation that shortens an input only changes the values at its
/// end.
#[derive(Clone, Debug)]
pub(super) struct Input<'a> {
    rest: &'a [u8],
}

impl<'a> Input<'a> {
    pub(super) const fn new(data: &'a [u8]) -> Self {
        Self { rest: data }
    }

    /// Whether every byte has been read.
    pub(super) const fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next `N` bytes, zero-padded past the end.
    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut bytes = [0; N];
        let taken = N.min(self.rest.len());
        let (head, tail) = self.rest.split_at(taken);
        bytes[..taken].copy_from_slice(head);
        self.rest = tail;
        bytes
    }

    pub(super) fn u8(&mut self) -> u8 {
        u8::from_le_bytes(self.array())
    }

    pub(super) fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    pub(super) fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    pub(super) fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    pub(super) fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    /// One byte as an index below `bound` (which must be at most 256 to
    /// reach every value; 0 reads as 0).
    pub(super) fn below(&mut self, bound: usize) -> usize {
        usize::from(self.u8()).checked_rem(bound).unwrap_or(0)
    }
}

/// A `fmt::Write` that throws its text away: formatting a value through
/// it exercises its `Display` / `Debug` code without allocating.
pub(super) struct Discard;

impl core::fmt::Write for Discard {
    fn write_str(&mut self, _: &str) -> core::fmt::Result {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_little_endian_and_zero_padded() {
        let mut input = Input::new(&[0x01, 0x02, 0x03]);
        assert_eq!(input.u16(), 0x0201);
        assert_eq!(input.u32(), 0x03);
        assert!(input.is_empty());
        assert_eq!(input.u64(), 0);
        assert_eq!(input.below(0), 0);
    }
}
