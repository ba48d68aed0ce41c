//! docs/abi.md is the guest-visible reference that users and code cite;
//! this crate holds the numbers. These tests read the page and pin what it
//! states against the crate's constants, so that neither can change
//! without the other: every function id the page names exists (or is one
//! it says el2 does not answer), every id the crate names is on the page,
//! and the page's tables of PSCI numbers, PSCI errors, KVM_FEATURES bits,
//! the vendor UID, the record layouts and QEMU `virt`'s addresses and
//! interrupts say what the crate says.

use std::collections::BTreeSet;

use pvlock_abi::smccc::FunctionId;
use pvlock_abi::{catalog, control, directed_yield, kvm, psci, pvlock, pvtime, virt};

const DOC: &str = include_str!("../../docs/abi.md");

/// The backquoted 32-bit hex words of the page whose bit 31 is set (the
/// shape of an SMCCC fast-call id), each once.
fn ids_on_the_page() -> BTreeSet<u32> {
    DOC.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|quoted| quoted.strip_prefix("0x"))
        .filter(|hex| hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .filter_map(|hex| u32::from_str_radix(hex, 16).ok())
        .filter(|raw| raw & 0x8000_0000 != 0)
        .collect()
}

/// The ids the page names as ones el2 answers with NOT_SUPPORTED: the
/// general queries KVM leaves unanswered too (§1), and the project's two
/// calls' retired numbers (§2, §7).
const NAMED_BUT_NOT_ANSWERED: [u32; 5] = [
    0x8600_FF00,
    0x8600_FF03,
    0xC600_FF01,
    0xC600_0022,
    0xC600_0023,
];

#[test]
fn the_retired_numbers_are_the_crates_and_name_nothing() {
    for retired in [
        directed_yield::RETIRED_PV_SCHED_YIELD_TO,
        control::RETIRED_PVLOCK_SET_WFX_POLICY,
    ] {
        assert!(NAMED_BUT_NOT_ANSWERED.contains(&retired.raw()));
        assert_eq!(catalog::describe(retired), None);
        assert!(section(7).contains(&format!("`{:#010X}`", retired.raw()).replace("0X", "0x")));
    }
}

/// The text of section `number` ("## N. ..." up to the next "## ").
fn section(number: u8) -> &'static str {
    let heading = format!("\n## {number}. ");
    let start = DOC
        .find(&heading)
        .unwrap_or_else(|| panic!("docs/abi.md has no section {number}"));
    let body = &DOC[start + 1..];
    let end = body[3..].find("\n## ").map_or(body.len(), |i| i + 3);
    &body[..end]
}

#[test]
fn every_id_the_page_names_exists_and_every_id_the_crate_names_is_on_the_page() {
    let on_page = ids_on_the_page();
    assert!(on_page.len() > 40, "only {} ids found", on_page.len());
    // The words of §2's vendor UID, §1's "never 0xFFFFFFFF" and the base
    // of §5's SMC64 formula (n = 0 has no SMC64 form) have the same shape
    // but are not ids.
    let not_ids: Vec<u32> = kvm::UID
        .iter()
        .copied()
        .chain([u32::MAX, 0xC400_0000])
        .collect();
    for &raw in on_page.iter().filter(|raw| !not_ids.contains(raw)) {
        let id = FunctionId::from_raw(raw);
        assert!(
            catalog::describe(id).is_some() || NAMED_BUT_NOT_ANSWERED.contains(&raw),
            "docs/abi.md names {raw:#010X}, which pvlock-abi does not define"
        );
    }
    // PSCI ids are given on the page as base + n (§5, checked below); every
    // other id is written out.
    for entry in catalog::entries() {
        if psci::is_psci(entry.id) {
            continue;
        }
        assert!(
            on_page.contains(&entry.id.raw()),
            "{} ({:#010X}) is not on docs/abi.md",
            entry.name,
            entry.id.raw()
        );
    }
}

#[test]
fn psci_numbers_smc64_forms_and_errors_are_the_crates() {
    let text = section(5).replace('\n', " ");
    assert!(text.contains("SMC32 `0x84000000` + *n*, SMC64 `0xC4000000` + *n*"));
    // "*n*: 0 PSCI_VERSION, 1 CPU_SUSPEND, ..., 21 SYSTEM_OFF2."
    let list = text
        .split("*n*: ")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .expect("the list of PSCI function numbers");
    let mut numbers = Vec::new();
    for item in list.split(", ") {
        let (number, name) = item.trim().split_once(' ').expect(item);
        let number: u16 = number.parse().expect(item);
        let id = FunctionId::from_raw(0x8400_0000 | u32::from(number));
        let expected = if name.starts_with("PSCI_") {
            name.to_string()
        } else {
            format!("PSCI_{name}")
        };
        assert_eq!(catalog::describe(id), Some(expected.as_str()), "{item}");
        numbers.push(number);
    }
    assert_eq!(numbers, (0..=21).collect::<Vec<_>>());
    // "Only 1, 3, ... and 21 have an SMC64 id."
    let smc64: BTreeSet<u16> = text
        .split("Only ")
        .nth(1)
        .and_then(|rest| rest.split(" have an SMC64 id").next())
        .expect("the SMC64 list")
        .replace(" and ", ", ")
        .split(", ")
        .map(|n| n.trim().parse().expect(n))
        .collect();
    let crate_smc64: BTreeSet<u16> = (0..=21).filter(|&n| psci::has_smc64(n)).collect();
    assert_eq!(smc64, crate_smc64);
    // "Errors: -1 NOT_SUPPORTED, ..., -9 INVALID_ADDRESS."
    let errors = text
        .split("Errors: ")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .expect("the PSCI error list");
    let mut codes = Vec::new();
    for item in errors.split(", ") {
        let (code, name) = item.trim().split_once(' ').expect(item);
        let code: i32 = code.parse().expect(item);
        assert_eq!(psci::error::name(code), Some(name), "{item}");
        codes.push(code);
    }
    assert_eq!(codes, (-9..=-1).rev().collect::<Vec<_>>());
}

#[test]
fn the_vendor_uid_and_the_feature_bits_are_the_crates() {
    let text = section(2);
    let words: Vec<String> = kvm::UID.iter().map(|w| format!("`{w:#010x}`")).collect();
    assert!(
        text.contains(&words.join(", ")),
        "the UID words {words:?} are not in §2"
    );
    // The table "| bit | function | set when |": every project bit is its
    // call's vendor function number, as the crate defines it.
    let rows: Vec<(u16, &str)> = text
        .lines()
        .filter_map(|line| {
            let mut cells = line.split('|').map(str::trim).skip(1);
            let bit = cells.next()?.parse().ok()?;
            Some((bit, cells.next()?))
        })
        .collect();
    let bits: Vec<u16> = rows.iter().map(|&(bit, _)| bit).collect();
    assert_eq!(bits, [0, 1, 32, 33, 112, 113, 114]);
    for (bit, function) in rows {
        let expected = match bit {
            0 => kvm::func::FEATURES,
            1 => kvm::func::PTP,
            32 => kvm::func::PV_LOCK_FEATURES,
            33 => kvm::func::PV_LOCK_PREEMPTED,
            112 => directed_yield::KVM_FEATURES_BIT,
            113 => control::KVM_FEATURES_BIT,
            114 => directed_yield::KICK_LEND_FEATURES_BIT,
            _ => unreachable!(),
        };
        assert_eq!(bit, expected, "{function}");
        if bit >= 32 {
            let id = FunctionId::fast64(pvlock_abi::smccc::Owner::VendorHypervisor, bit);
            assert!(
                function.contains(&format!("`{:#010X}`", id.raw()).replace("0X", "0x")),
                "bit {bit}: {function}"
            );
        }
    }
}

#[test]
fn the_record_layouts_are_the_crates() {
    let text = section(3);
    assert_eq!(pvlock::STATE_SIZE, 64);
    assert!(text.contains("one 64-byte, 64-byte-aligned record per vCPU"));
    let lock_count_row = format!(
        "| {}..{} | `le32 lock_count` (project) | `le32 lock_count` (project) |",
        pvlock::LOCK_COUNT_OFFSET,
        pvlock::LOCK_COUNT_OFFSET + pvlock::LOCK_COUNT_WIDTH
    );
    assert!(text.contains(&lock_count_row), "{lock_count_row}");
    assert!(text.contains("| 0..4 | `le64 preempted`, low half | `le32 preempted` |"));
    assert_eq!(std::mem::size_of::<pvlock::VcpuState64>(), 64);
    assert_eq!(std::mem::size_of::<pvlock::VcpuState32>(), 64);

    let text = section(4);
    assert_eq!(pvtime::RECORD_SIZE, 64);
    assert_eq!(std::mem::size_of::<pvtime::StolenTime>(), 64);
    assert_eq!(std::mem::align_of::<pvtime::StolenTime>(), 64);
    for row in [
        "| 0..4 | `le32 revision` | 0 |",
        "| 4..8 | `le32 attributes` | 0 |",
        "| 8..16 | `le64 stolen_time` | ns |",
    ] {
        assert!(text.contains(row), "{row}");
    }
    assert_eq!(
        (pvtime::StolenTime::REVISION, pvtime::StolenTime::ATTRIBUTES),
        (0, 0)
    );
    // The record's bytes as a guest reads them: revision, attributes, then
    // the stolen time at byte 8, little-endian.
    let record = pvtime::StolenTime::new();
    record.store_stolen_time(0x0102_0304_0506_0708, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: a 64-byte repr(C) record of atomics, read as bytes while no
    // other thread touches it.
    let bytes: [u8; 64] = unsafe { std::mem::transmute_copy(&record) };
    assert_eq!(bytes[8..16], 0x0102_0304_0506_0708u64.to_le_bytes());
    assert_eq!(bytes[..8], [0; 8]);
}

/// `value` in hex as the page writes addresses: an even number of digits,
/// grouped in fours from the right (`0x0800_0000`, `0xf6_0000`).
fn grouped_hex(value: u64) -> String {
    let mut digits = format!("{value:x}");
    if digits.len() % 2 == 1 {
        digits.insert(0, '0');
    }
    let mut groups = Vec::new();
    while digits.len() > 4 {
        groups.insert(0, digits.split_off(digits.len() - 4));
    }
    groups.insert(0, digits);
    format!("0x{}", groups.join("_"))
}

#[test]
fn the_virt_table_is_the_crates() {
    let text = section(8);
    // The table's row that names `constant`.
    let row = |constant: &str| {
        text.lines()
            .find(|line| line.starts_with('|') && line.contains(&format!("`{constant}`")))
            .unwrap_or_else(|| panic!("no row names `{constant}`"))
    };
    for (constant, value) in [
        ("RAM_BASE", virt::RAM_BASE),
        ("GIC_DIST_BASE", virt::GIC_DIST_BASE),
        ("GIC_REDIST_BASE", virt::GIC_REDIST_BASE),
        ("GIC_REDIST_SIZE", virt::GIC_REDIST_SIZE),
        ("UART_BASE", virt::UART_BASE),
    ] {
        let written = format!("`{}`", grouped_hex(value));
        assert!(row(constant).contains(&written), "{constant}: {written}");
    }
    let uart = format!(
        "{} KiB, {} MHz clock",
        virt::UART_SIZE / 1024,
        virt::UART_CLOCK_HZ / 1_000_000
    );
    assert!(row("UART_CLOCK_HZ").contains(&uart), "{uart}");
    // "| <kind> <number> | <INTID> | `<NAME>_<kind>`, `<NAME>_INTID` |"
    for (name, kind, number, intid) in [
        ("UART", "SPI", virt::UART_SPI, virt::UART_INTID),
        (
            "TIMER_SECURE_PHYS",
            "PPI",
            virt::TIMER_SECURE_PHYS_PPI,
            virt::TIMER_SECURE_PHYS_INTID,
        ),
        (
            "TIMER_PHYS",
            "PPI",
            virt::TIMER_PHYS_PPI,
            virt::TIMER_PHYS_INTID,
        ),
        (
            "TIMER_VIRT",
            "PPI",
            virt::TIMER_VIRT_PPI,
            virt::TIMER_VIRT_INTID,
        ),
        (
            "TIMER_HYP_PHYS",
            "PPI",
            virt::TIMER_HYP_PHYS_PPI,
            virt::TIMER_HYP_PHYS_INTID,
        ),
        ("PMU", "PPI", virt::PMU_PPI, virt::PMU_INTID),
    ] {
        let written = format!("| {kind} {number} | {intid} | `{name}_{kind}`, `{name}_INTID` |");
        let line = row(&format!("{name}_{kind}"));
        assert!(line.ends_with(&written), "{line}: {written}");
    }
    let flags = format!(
        "cell {}, `IRQ_FLAGS_LEVEL_HIGH`",
        virt::IRQ_FLAGS_LEVEL_HIGH
    );
    assert!(text.replace('\n', " ").contains(&flags), "{flags}");
    assert_eq!(grouped_hex(0xf6_0000), "0xf6_0000");
}
