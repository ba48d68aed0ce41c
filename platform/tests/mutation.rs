//! Robustness: truncated and corrupted blobs must give `Ok` or `Err`, never
//! a panic. A panic fails the test and names the mutation that caused it.
//!
//! Deterministic: a fixed-seed `prng::Rng` drives every random choice. One
//! test per fixture, so the harness spreads them over the available cores.
//!
//! Per fixture:
//! - truncation at every length up to 128 bytes, then every 29th length
//!   (totalsize then exceeds the slice); the structure block cut at every
//!   7th byte with the strings block kept behind it and the header
//!   patched, so it really ends mid-token; the strings block cut at every
//!   5th byte;
//! - every header byte set to 8 different values;
//! - every byte of the header, reservation map and structure block
//!   mutated on its own once (inverted, set to a token-ish "interesting"
//!   value, or random, cycling by position);
//! - `RANDOM_ROUNDS` rounds of 1-4 random word overwrites anywhere in the
//!   used part of the blob (21,000 rounds over the 7 fixtures), which
//!   mutate each structure byte about twice more on average.

mod common;

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};

use common::fixture;
use platform::{Platform, blob_size};
use prng::Rng;

/// Random rounds per fixture.
const RANDOM_ROUNDS: usize = 3_000;
/// FDT header size (version 17).
const HEADER_LEN: usize = 40;

/// Byte values that tend to hit edge cases: FDT tokens, NUL, all-ones,
/// sign bits.
const INTERESTING_BYTES: [u8; 10] = [0x00, 0x01, 0x02, 0x03, 0x04, 0x09, 0x7f, 0x80, 0xfe, 0xff];
/// Whole words for length, offset, cell-count and phandle fields.
const INTERESTING_WORDS: [u32; 12] = [
    0,
    1,
    2,
    3,
    4,
    5,
    9,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_fff0,
    0xffff_fffc,
    0xffff_ffff,
];

/// Runs both entry points on `blob`; panics naming `what` if either does.
fn check(blob: &[u8], what: &dyn Fn() -> String) {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let _ = blob_size(blob);
        let _ = Platform::parse(blob);
    }));
    if outcome.is_err() {
        panic!("parsing panicked on {}", what());
    }
}

fn header_word(blob: &[u8], index: usize) -> usize {
    let at = index * 4;
    u32::from_be_bytes(blob[at..at + 4].try_into().unwrap()) as usize
}

fn set_header_word(blob: &mut [u8], index: usize, value: usize) {
    let at = index * 4;
    blob[at..at + 4].copy_from_slice(&(value as u32).to_be_bytes());
}

/// End of the structure block.
fn struct_end(blob: &[u8]) -> usize {
    header_word(blob, 2) + header_word(blob, 9)
}

/// Bytes the parser reads: header, reservation map, structure and strings
/// blocks (QEMU pads its blobs with zeros to 1 MiB).
fn used_len(blob: &[u8]) -> usize {
    let strings_end = header_word(blob, 3) + header_word(blob, 8);
    struct_end(blob).max(strings_end).min(blob.len())
}

/// Which share of a fixture's mutations one test runs: the big fixtures
/// are split in two tests so the harness can balance them over cores.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    All,
    FirstHalf,
    SecondHalf,
}

fn mutate_fixture(name: &str, seed: u64, part: Part) {
    let original = fixture(name);
    let expected_ok = name != "juno-r2.dtb";
    assert_eq!(
        Platform::parse(&original).is_ok(),
        expected_ok,
        "{name} unmutated"
    );
    let mut rng = Rng::new(seed);
    let end = struct_end(&original);
    let (sweep, first, last) = match part {
        Part::All => (0..end, true, true),
        Part::FirstHalf => (0..end / 2, true, false),
        Part::SecondHalf => (end / 2..end, false, true),
    };
    if first {
        truncations(name, &original);
        header_values(name, &original, &mut rng);
    }
    every_structure_byte(name, &original, sweep, &mut rng);
    if last {
        random_words(name, &original, &mut rng);
    }
}

fn truncations(name: &str, original: &[u8]) {
    let used = used_len(original);
    let lengths = (0..=128).chain((129..used).step_by(29)).chain([used]);
    for len in lengths {
        check(&original[..len], &|| format!("{name} cut to {len} bytes"));
    }
    // The structure block cut short (so it ends mid-token) while the
    // strings block stays intact behind it, with the header patched.
    let struct_start = header_word(original, 2);
    let struct_size = header_word(original, 9);
    let strings = &original[header_word(original, 3)..][..header_word(original, 8)];
    for cut in (0..struct_size).step_by(7) {
        let mut blob = original[..struct_start + cut].to_vec();
        blob.extend_from_slice(strings);
        let total = blob.len();
        set_header_word(&mut blob, 1, total); // totalsize
        set_header_word(&mut blob, 3, struct_start + cut); // off_dt_strings
        set_header_word(&mut blob, 9, cut); // size_dt_struct
        check(&blob, &|| {
            format!("{name} structure block cut to {cut} bytes")
        });
    }
    // The strings block cut short: names past the cut are out of bounds.
    let mut blob = original[..used].to_vec();
    set_header_word(&mut blob, 1, used); // totalsize
    for size in (0..header_word(original, 8)).step_by(5) {
        set_header_word(&mut blob, 8, size); // size_dt_strings
        check(&blob, &|| {
            format!("{name} strings block cut to {size} bytes")
        });
    }
}

fn header_values(name: &str, original: &[u8], rng: &mut Rng) {
    let mut blob = original.to_vec();
    for at in 0..HEADER_LEN {
        let saved = blob[at];
        let mut values = vec![!saved, saved ^ 1, saved.wrapping_add(4), 0x00, 0xff, 0x80];
        values.extend([rng.next_u64() as u8, rng.next_u64() as u8]);
        for value in values {
            blob[at] = value;
            check(&blob, &|| format!("{name} header byte {at} = {value:#04x}"));
        }
        blob[at] = saved;
    }
}

fn every_structure_byte(name: &str, original: &[u8], range: Range<usize>, rng: &mut Rng) {
    let mut blob = original.to_vec();
    for at in range {
        let saved = blob[at];
        let value = match at % 3 {
            0 => !saved,
            1 => INTERESTING_BYTES[(at / 3) % INTERESTING_BYTES.len()],
            _ => rng.next_u64() as u8,
        };
        blob[at] = value;
        check(&blob, &|| format!("{name} byte {at:#x} = {value:#04x}"));
        blob[at] = saved;
    }
}

fn random_words(name: &str, original: &[u8], rng: &mut Rng) {
    let used = used_len(original);
    let mut blob = original.to_vec();
    for round in 0..RANDOM_ROUNDS {
        let mut edits: Vec<(usize, [u8; 4], u32)> = Vec::new();
        for _ in 0..1 + rng.index(4) {
            // Word-aligned, as every FDT field is.
            let at = rng.index(used) & !3;
            let Some(word) = blob.get_mut(at..at + 4) else {
                continue;
            };
            let saved: [u8; 4] = word.try_into().unwrap();
            let value = match rng.index(3) {
                0 => INTERESTING_WORDS[rng.index(INTERESTING_WORDS.len())],
                1 => rng.next_u64() as u32,
                // Nudge a length, offset or count by -4..=4.
                _ => u32::from_be_bytes(saved)
                    .wrapping_add(rng.index(9) as u32)
                    .wrapping_sub(4),
            };
            word.copy_from_slice(&value.to_be_bytes());
            edits.push((at, saved, value));
        }
        check(&blob, &|| {
            let words: Vec<String> = edits
                .iter()
                .map(|(at, _, value)| format!("[{at:#x}] = {value:#x}"))
                .collect();
            format!("{name} random round {round}: {}", words.join(", "))
        });
        for (at, saved, _) in edits.into_iter().rev() {
            blob[at..at + 4].copy_from_slice(&saved);
        }
    }
    assert_eq!(blob, original, "{name}: mutations not undone");
}

#[test]
fn fvp_base_revc() {
    mutate_fixture("fvp-base-revc.dtb", 0x5eed_0001, Part::All);
}

#[test]
fn hip06_d03() {
    mutate_fixture("hip06-d03.dtb", 0x5eed_0002, Part::All);
}

#[test]
fn hip07_d05_first_half() {
    mutate_fixture("hip07-d05.dtb", 0x5eed_0003, Part::FirstHalf);
}

#[test]
fn hip07_d05_second_half() {
    mutate_fixture("hip07-d05.dtb", 0x5eed_0013, Part::SecondHalf);
}

#[test]
fn juno_r2_first_half() {
    mutate_fixture("juno-r2.dtb", 0x5eed_0004, Part::FirstHalf);
}

#[test]
fn juno_r2_second_half() {
    mutate_fixture("juno-r2.dtb", 0x5eed_0014, Part::SecondHalf);
}

#[test]
fn thunder2_99xx() {
    mutate_fixture("thunder2-99xx.dtb", 0x5eed_0005, Part::All);
}

#[test]
fn qemu_virt_n1_4cpu() {
    mutate_fixture("qemu-virt-n1-4cpu.dtb", 0x5eed_0006, Part::All);
}

#[test]
fn qemu_virt_max_8cpu_2clusters() {
    mutate_fixture("qemu-virt-max-8cpu-2clusters.dtb", 0x5eed_0007, Part::All);
}

/// A hand-built tree nested deeper than the reader's bound is an error,
/// and one just inside the bound parses as far as the tree goes.
#[test]
fn deep_nesting_is_bounded() {
    for depth in [63, 64, 65, 1000] {
        let mut node = common::Node::new("leaf");
        for level in (1..depth).rev() {
            node = common::Node::new(&format!("n{level}")).child(node);
        }
        let mut root = common::virt();
        root.children.push(node);
        let blob = root.to_dtb(&[]);
        let result = Platform::parse(&blob);
        // The root is level 0; `depth` more levels hang below it.
        if depth < 64 {
            assert!(result.is_ok(), "depth {depth}: {result:?}");
        } else {
            let err = result.unwrap_err();
            assert_eq!(
                err.kind,
                platform::ErrorKind::BadBlob("nodes nested deeper than 64"),
                "depth {depth}"
            );
        }
    }
}
