//! Test-only ACPI table builder: writes MADT, GTDT, SPCR, FADT and SRAT
//! tables from the ACPI 6.5 layouts (section numbers as in
//! `platform::acpi`), with correct lengths and checksums, and loads the
//! QEMU fixtures under `tests/fixtures/acpi/`.
#![allow(dead_code)] // each test binary uses a different subset

/// Reads every `.bin` table of the fixture directory `tests/fixtures/acpi/<dir>`,
/// sorted by file name.
pub fn fixture_tables(dir: &str) -> Vec<(String, Vec<u8>)> {
    let path = format!("{}/tests/fixtures/acpi/{dir}", env!("CARGO_MANIFEST_DIR"));
    let mut tables: Vec<(String, Vec<u8>)> = std::fs::read_dir(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    tables.sort();
    assert!(!tables.is_empty(), "{path}: no tables");
    tables
}

/// The QEMU device tree dumped for the same command line as the fixture
/// directory's tables, zero-padded back to its `totalsize` (see
/// PROVENANCE.md: the padding is trimmed from the stored file).
pub fn fixture_dtb(dir: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/acpi/{dir}/virt-trimmed.dtb",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut blob = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let total = platform::blob_size(&blob).unwrap();
    assert!(total >= blob.len(), "{path}");
    blob.resize(total, 0);
    blob
}

/// Borrows each table as the slice `Platform::from_acpi` takes.
pub fn slices(tables: &[Vec<u8>]) -> Vec<&[u8]> {
    tables.iter().map(Vec::as_slice).collect()
}

/// Sets byte 9 so that the table's bytes sum to zero (ACPI 6.5 §5.2.6).
pub fn fix_checksum(table: &mut [u8]) {
    table[9] = 0;
    let sum = table.iter().fold(0u8, |s, &b| s.wrapping_add(b));
    table[9] = sum.wrapping_neg();
}

/// A table with a 36-byte header (`Length`, `Checksum` filled in), the
/// given OEM IDs, and `body` after the header.
pub fn table_with_oem(
    signature: &[u8; 4],
    revision: u8,
    oem_id: &[u8; 6],
    oem_table_id: &[u8; 8],
    body: &[u8],
) -> Vec<u8> {
    let mut t = Vec::with_capacity(36 + body.len());
    t.extend_from_slice(signature);
    t.extend_from_slice(&((36 + body.len()) as u32).to_le_bytes());
    t.push(revision);
    t.push(0); // checksum, below
    t.extend_from_slice(oem_id);
    t.extend_from_slice(oem_table_id);
    t.extend_from_slice(&1u32.to_le_bytes()); // OEM Revision
    t.extend_from_slice(b"TEST"); // Creator ID
    t.extend_from_slice(&1u32.to_le_bytes()); // Creator Revision
    t.extend_from_slice(body);
    fix_checksum(&mut t);
    t
}

/// A table with test OEM IDs.
pub fn table(signature: &[u8; 4], revision: u8, body: &[u8]) -> Vec<u8> {
    table_with_oem(signature, revision, b"PVLOCK", b"TESTBRD ", body)
}

/// Little-endian field writer.
#[derive(Default)]
pub struct Bytes(pub Vec<u8>);

impl Bytes {
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    pub fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn zeros(mut self, n: usize) -> Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    pub fn done(self) -> Vec<u8> {
        self.0
    }
}

// ---- MADT (§5.2.12) ---------------------------------------------------------

/// GICC flags (Table 5.38).
pub const GICC_ENABLED: u32 = 1 << 0;
pub const GICC_MAINTENANCE_EDGE: u32 = 1 << 2;
pub const GICC_ONLINE_CAPABLE: u32 = 1 << 3;

/// One CPU's GICC structure.
#[derive(Clone, Copy, Debug)]
pub struct Gicc {
    pub uid: u32,
    pub flags: u32,
    pub mpidr: u64,
    pub maintenance_gsiv: u32,
    pub gicr_base: u64,
}

impl Gicc {
    /// An enabled CPU with the QEMU-style maintenance interrupt (PPI 9,
    /// INTID 25, level).
    pub fn new(uid: u32, mpidr: u64) -> Gicc {
        Gicc {
            uid,
            flags: GICC_ENABLED,
            mpidr,
            maintenance_gsiv: 25,
            gicr_base: 0,
        }
    }

    /// The ACPI 6.5 layout: 82 bytes (Table 5.37).
    pub fn bytes(&self) -> Vec<u8> {
        let s = Bytes::default()
            .u8(0x0b)
            .u8(82)
            .u16(0)
            .u32(self.uid) // CPU Interface Number
            .u32(self.uid) // ACPI Processor UID
            .u32(self.flags)
            .u32(0) // Parking Protocol Version
            .u32(23) // Performance Interrupt GSIV
            .u64(0) // Parked Address
            .u64(0) // Physical Base Address (GICv2 CPU interface)
            .u64(0) // GICV
            .u64(0) // GICH
            .u32(self.maintenance_gsiv)
            .u64(self.gicr_base)
            .u64(self.mpidr)
            .u8(0) // Processor Power Efficiency Class
            .u8(0)
            .u16(0) // SPE overflow interrupt
            .u16(0) // TRBE interrupt
            .done();
        assert_eq!(s.len(), 82);
        s
    }
}

/// GICD structure (Table 5.39).
pub fn gicd(base: u64, version: u8) -> Vec<u8> {
    Bytes::default()
        .u8(0x0c)
        .u8(24)
        .u16(0)
        .u32(0) // GIC ID
        .u64(base)
        .u32(0) // System Vector Base
        .u8(version)
        .zeros(3)
        .done()
}

/// GICR structure (Table 5.42).
pub fn gicr(base: u64, length: u32) -> Vec<u8> {
    Bytes::default()
        .u8(0x0e)
        .u8(16)
        .u8(0) // Flags
        .u8(0)
        .u64(base)
        .u32(length)
        .done()
}

/// GIC ITS structure (Table 5.43).
pub fn its(id: u32, base: u64) -> Vec<u8> {
    Bytes::default()
        .u8(0x0f)
        .u8(20)
        .u16(0)
        .u32(id)
        .u64(base)
        .u32(0)
        .done()
}

/// A MADT (revision 6, ACPI 6.5) holding `structures`.
pub fn madt(structures: &[Vec<u8>]) -> Vec<u8> {
    let mut body = Bytes::default().u32(0).u32(0).done(); // LIC address, Flags
    for s in structures {
        body.extend_from_slice(s);
    }
    table(b"APIC", 6, &body)
}

// ---- GTDT (§5.2.25) ---------------------------------------------------------

/// Timer flags (Table 5.122).
pub const TIMER_EDGE: u32 = 1 << 0;
pub const TIMER_ACTIVE_LOW: u32 = 1 << 1;
pub const TIMER_ALWAYS_ON: u32 = 1 << 2;

/// `(GSIV, flags)` of one timer.
pub type Timer = (u32, u32);

/// A GTDT: `timers` are secure EL1, non-secure EL1, virtual EL1 and EL2;
/// with `virtual_el2` it is revision 3 (104 bytes), else revision 2 (96).
pub fn gtdt(timers: [Timer; 4], virtual_el2: Option<Timer>) -> Vec<u8> {
    let mut b = Bytes::default().u64(u64::MAX).u32(0); // CntControlBase, Reserved
    for (gsiv, flags) in timers {
        b = b.u32(gsiv).u32(flags);
    }
    b = b.u64(u64::MAX).u32(0).u32(0); // CntReadBase, Platform Timer Count, Offset
    let revision = match virtual_el2 {
        Some((gsiv, flags)) => {
            b = b.u32(gsiv).u32(flags);
            3
        }
        None => 2,
    };
    table(b"GTDT", revision, &b.done())
}

/// QEMU virt's timers: PPIs 13, 14, 11, 10 (INTIDs 29, 30, 27, 26), level.
pub const QEMU_TIMERS: [Timer; 4] = [(29, 0), (30, TIMER_ALWAYS_ON), (27, 0), (26, 0)];

// ---- SPCR -----------------------------------------------------------------------

/// SPCR interface types.
pub const SPCR_16550: u8 = 0x00;
pub const SPCR_PL011: u8 = 0x03;
pub const SPCR_SBSA_32BIT: u8 = 0x0d;
pub const SPCR_SBSA: u8 = 0x0e;

/// An 80-byte revision 2 SPCR: `interface` at `base` in address space
/// `space`, interrupt type `irq_type` (bit 3: GIC) and `gsiv`.
pub fn spcr(interface: u8, space: u8, base: u64, irq_type: u8, gsiv: u32) -> Vec<u8> {
    let body = Bytes::default()
        .u8(interface)
        .zeros(3)
        .u8(space) // Generic Address Structure
        .u8(32)
        .u8(0)
        .u8(3)
        .u64(base)
        .u8(irq_type)
        .u8(0) // IRQ (PC-AT)
        .u32(gsiv)
        .u8(7) // 115200 baud
        .u8(0)
        .u8(1)
        .u8(0)
        .u8(0)
        .u8(0)
        .u16(0xffff)
        .u16(0xffff)
        .u8(0)
        .u8(0)
        .u8(0)
        .u32(0)
        .u8(0)
        .u32(0)
        .done();
    let t = table(b"SPCR", 2, &body);
    assert_eq!(t.len(), 80);
    t
}

/// A PL011 at QEMU virt's address and SPI 1.
pub fn qemu_spcr() -> Vec<u8> {
    spcr(SPCR_PL011, 0, 0x0900_0000, 1 << 3, 33)
}

// ---- FADT (§5.2.9) ----------------------------------------------------------

pub const PSCI_COMPLIANT: u16 = 1 << 0;
pub const PSCI_USE_HVC: u16 = 1 << 1;

/// A 276-byte FADT 6.5 (hardware-reduced) with `arm_boot_arch`.
pub fn fadt_with_oem(arm_boot_arch: u16, oem_id: &[u8; 6], oem_table_id: &[u8; 8]) -> Vec<u8> {
    let mut body = vec![0u8; 276 - 36];
    // Flags (offset 112): HW_REDUCED_ACPI (bit 20).
    body[112 - 36..116 - 36].copy_from_slice(&(1u32 << 20).to_le_bytes());
    body[129 - 36..131 - 36].copy_from_slice(&arm_boot_arch.to_le_bytes());
    body[131 - 36] = 5; // FADT Minor Version
    table_with_oem(b"FACP", 6, oem_id, oem_table_id, &body)
}

pub fn fadt(arm_boot_arch: u16) -> Vec<u8> {
    fadt_with_oem(arm_boot_arch, b"PVLOCK", b"TESTBRD ")
}

// ---- SRAT (§5.2.16) ---------------------------------------------------------

/// Memory Affinity structure (Table 5.74); `flags` bit 0 is Enabled.
pub fn memory_affinity(domain: u32, base: u64, length: u64, flags: u32) -> Vec<u8> {
    Bytes::default()
        .u8(1)
        .u8(40)
        .u32(domain)
        .u16(0)
        .u64(base)
        .u64(length)
        .u32(0)
        .u32(flags)
        .u64(0)
        .done()
}

/// GICC Affinity structure (Table 5.77); `flags` bit 0 is Enabled.
pub fn gicc_affinity(domain: u32, uid: u32, flags: u32) -> Vec<u8> {
    Bytes::default()
        .u8(3)
        .u8(18)
        .u32(domain)
        .u32(uid)
        .u32(flags)
        .u32(0)
        .done()
}

/// A revision 3 SRAT holding `structures`.
pub fn srat(structures: &[Vec<u8>]) -> Vec<u8> {
    let mut body = Bytes::default().u32(1).u64(0).done();
    for s in structures {
        body.extend_from_slice(s);
    }
    table(b"SRAT", 3, &body)
}

// ---- whole machines -------------------------------------------------------------

/// QEMU virt's GIC with `cpus` CPUs (MPIDR = index below 16).
pub fn qemu_madt(cpus: u32) -> Vec<u8> {
    let mut s = vec![gicd(0x0800_0000, 3)];
    for i in 0..cpus {
        s.push(Gicc::new(i, u64::from(i)).bytes());
    }
    s.push(gicr(0x080a_0000, 0xf6_0000));
    s.push(its(0, 0x0808_0000));
    madt(&s)
}

/// A QEMU-virt-like machine: MADT, GTDT, FADT, SPCR.
pub fn qemu_like(cpus: u32) -> Vec<Vec<u8>> {
    vec![
        qemu_madt(cpus),
        gtdt(QEMU_TIMERS, None),
        fadt(PSCI_COMPLIANT),
        qemu_spcr(),
    ]
}
