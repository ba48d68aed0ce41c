//! The `hostile` guest's attempts, the answers the project documents for
//! them, and its console lines, shared with `cargo xtask`, which judges
//! boots by those lines.
//!
//! The guest attacks the hypervisor from inside a VM the way
//! docs/security.md's threat model allows any guest to, and checks that
//! each attempt gets the answer the table "What a misbehaving guest gets"
//! (docs/security.md), docs/vms.md and docs/abi.md give: an access outside its
//! RAM or to the host's devices is answered with a synchronous external
//! abort, a refused system register with an undefined instruction, a bad
//! hypercall with its documented error code, a storm with nothing but the
//! guest's own time. Each attempt prints one line,
//!
//! ```text
//! hostile: read at 0x80000000: ok (synchronous external abort at 0x80000000 (data abort, read))
//! hostile: garbage to PSCI_CPU_ON64: FAILED: x1..x3 [0x1, 0x0, 0x0] -> x0 0x0, documented -9
//! ```
//!
//! and a run ends with `hostile: all N attempts answered as documented`
//! ([`AllAnswered`]) or a `GUEST FATAL` line counting the failures.
//! [`labels`] lists every attempt; [`judge_console`] is what xtask
//! requires of a console.
//!
//! The attempts are data here (their documented answers: [`Label::expected`],
//! [`Label::documented_call`], [`documented_answer`]) and the judging is
//! pure ([`judge_fault`], [`judge_race`], [`judge_records`], ...), so the
//! host tests check both; the bare-metal guest (`src/bin/hostile.rs`) only
//! provokes and reports.
//!
//! The guest runs as a VM with `pv-lock = "openeuler"` and el2's other
//! defaults (PV time on, no `control`, no KVM PTP): [`offered`] says what
//! such a VM offers.

use core::fmt::{self, Write as _};
use core::time::Duration;

use aarch64_cpu::registers::{ID_AA64DFR0_EL1, ID_AA64PFR0_EL1, ID_AA64PFR1_EL1};
use pvlock_abi::pvlock::openeuler;
use pvlock_abi::smccc::{self, FunctionId, Owner};
use pvlock_abi::{arch, catalog, control, directed_yield, kvm, psci, pvtime};
use tock_registers::LocalRegisterCopy;
use tock_registers::register_bitfields;

use crate::fault::{Caught, FSC_SYNCHRONOUS_EXTERNAL_ABORT};
use crate::mpidr::Mpidr;
use crate::pv::{Conduit, return_code};

/// Every line the guest prints starts with this.
pub const PREFIX: &str = "hostile:";

// ---- Addresses ---------------------------------------------------------------

/// What the guest enables in its PMU and reads back: PMCR_EL0.E (bit 0)
/// and PMCNTENSET_EL0.C (bit 31, the cycle counter).
pub const PMU_ENABLES_WRITTEN: u64 = 1 | 1 << 31;

/// The breakpoint the guest writes (DBGBVR0_EL1, an address in its RAM)
/// and its control (DBGBCR0_EL1: enabled at EL1, PMC 0b01, BAS 0b1111).
/// MDSCR_EL1.MDE stays clear, so it cannot fire.
pub const BREAKPOINT_ADDRESS: u64 = 0x4008_0000;
pub const BREAKPOINT_CONTROL: u64 = 1 | 0b01 << 1 | 0b1111 << 5;

/// QEMU `virt`'s host RAM ends here with the 1 GiB the tests give it: the
/// first IPA past what any VM could be placed in.
pub const PAST_HOST_RAM: u64 = 0x8000_0000;
/// 4 GiB: far from anything a VM has.
pub const FOUR_GIB: u64 = 0x1_0000_0000;
/// Inside QEMU `virt`'s GIC window (0x0800_0000..0x0900_0000) but outside
/// the distributor and redistributor frames the VM's device tree gives
/// (the guest checks that before it probes).
pub const GIC_WINDOW_GAP: u64 = 0x0806_0000;
/// The first IPA past el2's 39-bit stage-2 input range (docs/vms.md,
/// "Stage 2 and isolation").
pub const PAST_IPA_SPACE: u64 = 1 << 39;
/// Where the instruction fetch goes: past the host's RAM, one page above
/// [`PAST_HOST_RAM`] (whose page the data attempts map as a device, which
/// can never be executable).
pub const FETCH_TARGET: u64 = PAST_HOST_RAM + 0x1000;
/// The host's GIC ITS frame on QEMU `virt` (the VM has no ITS).
pub const HOST_GIC_ITS: u64 = 0x0808_0000;
/// The host's PL031 RTC on QEMU `virt`.
pub const HOST_RTC: u64 = 0x0901_0000;
/// The host's fw_cfg device on QEMU `virt`.
pub const HOST_FW_CFG: u64 = 0x0902_0000;

/// Offset of the PL011's flag register, UARTFR (ARM DDI 0183, "Summary of
/// registers"): a 32-bit register with no read side effect.
pub const PL011_FR: u64 = 0x018;
/// Offsets of GICD_CTLR and of the read-only GICD_TYPER (Arm IHI 0069,
/// "The GIC Distributor register map").
pub use gic_regs::offset::{GICD_CTLR, GICD_TYPER};
/// A reserved distributor offset (0x0020..0x003c: IMPLEMENTATION DEFINED
/// in the architecture, nothing in the VM's GIC).
pub const GICD_RESERVED: u64 = 0x0030;

/// A vCPU index no VM has (the KICK_CPU and directed-yield attempts).
pub const NO_SUCH_VCPU: u64 = 0xffff_ffff;

// ---- Storms ------------------------------------------------------------------

/// A flood of one kind of trap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storm {
    /// SMCCC_VERSION by HVC, each answer checked.
    Hvc,
    /// WFI, each with the virtual timer armed a short time ahead (a WFI
    /// with nothing pending and no timer would wait for ever).
    Wfi,
    /// WFE, each after SEVL so that it never waits.
    Wfe,
    /// ICC_SGI1R_EL1 writes sending the calling vCPU an SGI it disabled.
    Sgi,
}

impl Storm {
    pub const ALL: [Storm; 4] = [Storm::Hvc, Storm::Wfi, Storm::Wfe, Storm::Sgi];

    /// How many the storm sends.
    pub const fn count(self) -> u64 {
        match self {
            Storm::Hvc => 100_000,
            Storm::Wfi | Storm::Wfe | Storm::Sgi => 10_000,
        }
    }

    const fn what(self) -> &'static str {
        match self {
            Storm::Hvc => "SMCCC_VERSION calls",
            Storm::Wfi => "WFIs",
            Storm::Wfe => "WFEs",
            Storm::Sgi => "disabled self-SGIs",
        }
    }
}

/// How far ahead each WFI of the storm arms the virtual timer.
pub const WFI_STORM_DEADLINE: Duration = Duration::from_micros(20);

/// How long past its virtual-timer deadline a vCPU may still be blocked
/// in WFI (or PSCI CPU_SUSPEND) before the guest calls its wake-up lost:
/// many times el2's 4 ms time slice, the longest a hypervisor that looks
/// at its timers once a slice could take. A vCPU the hypervisor has woken
/// but not yet run reads its PV `preempted` flag as 1 (docs/vms.md: a
/// wake-up writes 1 while the vCPU is not running) and is not counted;
/// one seen blocked is looked at again [`LOST_WAKE_UP_CONFIRM`] later, so
/// that a vCPU caught between its load and the end of its wait is not
/// counted either.
pub const LOST_WAKE_UP: Duration = Duration::from_millis(50);

/// How long a vCPU that looks blocked past [`LOST_WAKE_UP`] must still be
/// seen so before its wake-up counts as lost.
pub const LOST_WAKE_UP_CONFIRM: Duration = Duration::from_millis(5);

/// The WFI storm stops after this many lost wake-ups, each of which costs
/// [`LOST_WAKE_UP`] and a rescue.
pub const STORM_LOST_WAKE_UPS_MAX: u64 = 5;

// ---- Labels ------------------------------------------------------------------

/// A load or a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

impl Access {
    const BOTH: [Access; 2] = [Access::Read, Access::Write];

    const fn verb(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// An IPA outside the VM's RAM and devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The first byte past the VM's RAM.
    PastRam,
    /// [`PAST_HOST_RAM`].
    PastHostRam,
    /// [`FOUR_GIB`].
    FourGib,
    /// [`GIC_WINDOW_GAP`].
    GicWindowGap,
    /// [`PAST_IPA_SPACE`].
    PastIpaSpace,
}

impl Place {
    pub const ALL: [Place; 5] = [
        Place::PastRam,
        Place::PastHostRam,
        Place::FourGib,
        Place::GicWindowGap,
        Place::PastIpaSpace,
    ];

    /// The IPA, for a VM whose RAM ends at `ram_end`.
    pub const fn ipa(self, ram_end: u64) -> u64 {
        match self {
            Place::PastRam => ram_end,
            Place::PastHostRam => PAST_HOST_RAM,
            Place::FourGib => FOUR_GIB,
            Place::GicWindowGap => GIC_WINDOW_GAP,
            Place::PastIpaSpace => PAST_IPA_SPACE,
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::PastRam => write!(f, "just past RAM"),
            Place::PastHostRam => write!(f, "at {PAST_HOST_RAM:#x}"),
            Place::FourGib => write!(f, "at {FOUR_GIB:#x}"),
            Place::GicWindowGap => write!(f, "in the GIC window at {GIC_WINDOW_GAP:#x}"),
            Place::PastIpaSpace => write!(f, "past the 39-bit IPA space at {PAST_IPA_SPACE:#x}"),
        }
    }
}

/// A device of the host machine, at the address the host has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostDevice {
    GicIts,
    Rtc,
    FwCfg,
}

impl HostDevice {
    pub const ALL: [HostDevice; 3] = [HostDevice::GicIts, HostDevice::Rtc, HostDevice::FwCfg];

    pub const fn ipa(self) -> u64 {
        match self {
            HostDevice::GicIts => HOST_GIC_ITS,
            HostDevice::Rtc => HOST_RTC,
            HostDevice::FwCfg => HOST_FW_CFG,
        }
    }

    const fn name(self) -> &'static str {
        match self {
            HostDevice::GicIts => "GIC ITS",
            HostDevice::Rtc => "RTC",
            HostDevice::FwCfg => "fw_cfg",
        }
    }
}

/// How a call reaches the hypervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Hvc,
    Smc,
}

impl Via {
    pub const BOTH: [Via; 2] = [Via::Hvc, Via::Smc];

    const fn name(self) -> &'static str {
        match self {
            Via::Hvc => "HVC",
            Via::Smc => "SMC",
        }
    }
}

/// A PSCI call made by SMC and by HVC, whose answers must agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmcCall {
    PsciVersion,
    UnknownPsci,
}

/// An SMCCC owner whose range the VM has no service in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unowned {
    Sip,
    Oem,
}

impl Unowned {
    /// Function 0 of the owner's SMC64 range (`0xC2000000`, `0xC3000000`).
    pub const fn function(self) -> FunctionId {
        match self {
            Unowned::Sip => FunctionId::fast64(Owner::Sip, 0),
            Unowned::Oem => FunctionId::fast64(Owner::Oem, 0),
        }
    }

    const fn name(self) -> &'static str {
        match self {
            Unowned::Sip => "SiP",
            Unowned::Oem => "OEM",
        }
    }
}

/// An IPA openEuler's PV_SCHED_IPA_INIT must refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadIpa {
    /// The guest's own record plus 8: in RAM, not 64-byte aligned.
    Unaligned,
    /// The first byte past RAM (64-byte aligned).
    PastRam,
    /// The UART's IPA: a device, not RAM.
    Device,
    /// The guest's stolen-time record: RAM the hypervisor's PV area owns.
    PvArea,
}

impl BadIpa {
    pub const ALL: [BadIpa; 4] = [
        BadIpa::Unaligned,
        BadIpa::PastRam,
        BadIpa::Device,
        BadIpa::PvArea,
    ];
}

/// Whom a KICK_CPU or directed yield names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// [`NO_SUCH_VCPU`].
    NoSuchVcpu,
    /// The caller's own index.
    Itself,
}

impl Target {
    pub const BOTH: [Target; 2] = [Target::NoSuchVcpu, Target::Itself];
}

/// A CPU_ON that must fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadCpuOn {
    /// An Off vCPU, entry point just past RAM: INVALID_ADDRESS.
    EntryPastRam,
    /// An Off vCPU, entry point at the UART: INVALID_ADDRESS.
    EntryInDevice,
    /// An MPIDR no vCPU has: INVALID_PARAMETERS.
    UnknownMpidr,
}

impl BadCpuOn {
    pub const ALL: [BadCpuOn; 3] = [
        BadCpuOn::EntryPastRam,
        BadCpuOn::EntryInDevice,
        BadCpuOn::UnknownMpidr,
    ];
}

/// One attempt: what its line says before `: ok` / `: FAILED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    // Memory outside the VM's RAM.
    Outside(Access, Place),
    Fetch,
    // The host's devices, emulated devices used wrongly.
    HostDevice(Access, HostDevice),
    Pl011WideRead,
    GicdWideRead,
    GicdWideWrite,
    GicdReserved,
    GicdReadOnlyWrite,
    GicdLoadPair,
    // System registers.
    PmuRegisters,
    BreakpointRegisters,
    Mdscr,
    OsLock,
    PhysicalTimer(Access),
    El2Register,
    IdRegisters,
    // SMC and the conduits.
    SmcAsHvc(SmcCall),
    Unowned(Unowned, Via),
    NonZeroImmediate(Via),
    // Hypercalls with bad arguments.
    Garbage(FunctionId),
    IpaInit(BadIpa),
    StolenTimeOfNoVcpu,
    Kick(Target),
    YieldTo(Target),
    CpuOn(BadCpuOn),
    CpuOnRace,
    WithoutControl,
    // Storms.
    Storm(Storm),
    // The shared records.
    Scribble,
    // Every wait of the run.
    WakeUps,
}

impl Label {
    /// The label's own text (without [`PREFIX`]).
    fn text(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Label::Outside(access, place) => write!(f, "{} {place}", access.verb()),
            Label::Fetch => write!(f, "instruction fetch at {FETCH_TARGET:#x}"),
            Label::HostDevice(access, device) => write!(
                f,
                "{} the host's {} at {:#x}",
                access.verb(),
                device.name(),
                device.ipa()
            ),
            Label::Pl011WideRead => write!(f, "8-byte read of the PL011's UARTFR"),
            Label::GicdWideRead => write!(f, "8-byte read of GICD_CTLR"),
            Label::GicdWideWrite => write!(f, "8-byte write of GICD_CTLR"),
            Label::GicdReserved => {
                write!(f, "reserved GICD offset {GICD_RESERVED:#x} reads as zero")
            }
            Label::GicdReadOnlyWrite => write!(f, "write to the read-only GICD_TYPER ignored"),
            Label::GicdLoadPair => write!(f, "load pair from GICD_CTLR (no syndrome)"),
            Label::PmuRegisters => write!(f, "PMU registers are the vCPU's own"),
            Label::BreakpointRegisters => {
                write!(f, "breakpoint registers read back what was written")
            }
            Label::Mdscr => write!(f, "MDSCR_EL1 reads back what was written"),
            Label::OsLock => write!(f, "OSLSR_EL1 follows OSLAR_EL1"),
            Label::PhysicalTimer(access) => write!(f, "{} of CNTP_CTL_EL0", access.verb()),
            Label::El2Register => write!(f, "read of HCR_EL2 from EL1"),
            Label::IdRegisters => write!(f, "ID registers hide the features a VM does not get"),
            Label::SmcAsHvc(SmcCall::PsciVersion) => {
                write!(f, "PSCI_VERSION by SMC answered as by HVC")
            }
            Label::SmcAsHvc(SmcCall::UnknownPsci) => {
                write!(f, "an unknown PSCI function by SMC answered as by HVC")
            }
            Label::Unowned(owner, via) => write!(f, "{} call by {}", owner.name(), via.name()),
            Label::NonZeroImmediate(via) => write!(f, "{} #1", via.name()),
            Label::Garbage(function) => write!(f, "garbage to {}", Name(function)),
            Label::IpaInit(bad) => write!(
                f,
                "PV_SCHED_IPA_INIT of {}",
                match bad {
                    BadIpa::Unaligned => "an unaligned IPA",
                    BadIpa::PastRam => "an IPA past RAM",
                    BadIpa::Device => "a device IPA",
                    BadIpa::PvArea => "the hypervisor's PV area",
                }
            ),
            Label::StolenTimeOfNoVcpu => write!(f, "PV_TIME_ST with x1 naming no vCPU"),
            Label::Kick(Target::NoSuchVcpu) => {
                write!(f, "PV_SCHED_KICK_CPU of vCPU {NO_SUCH_VCPU:#x}")
            }
            Label::Kick(Target::Itself) => write!(f, "PV_SCHED_KICK_CPU of itself"),
            Label::YieldTo(Target::NoSuchVcpu) => {
                write!(f, "PV_SCHED_YIELD_TO vCPU {NO_SUCH_VCPU:#x}")
            }
            Label::YieldTo(Target::Itself) => write!(f, "PV_SCHED_YIELD_TO itself"),
            Label::CpuOn(BadCpuOn::EntryPastRam) => {
                write!(f, "CPU_ON with an entry point past RAM")
            }
            Label::CpuOn(BadCpuOn::EntryInDevice) => {
                write!(f, "CPU_ON with an entry point in device memory")
            }
            Label::CpuOn(BadCpuOn::UnknownMpidr) => write!(f, "CPU_ON of an unknown MPIDR"),
            Label::CpuOnRace => write!(f, "CPU_ON race"),
            Label::WithoutControl => write!(f, "PVLOCK_SET_WFX_POLICY without control"),
            Label::Storm(storm) => write!(f, "{} {}", storm.count(), storm.what()),
            Label::Scribble => write!(f, "scribbling over the PV records"),
            Label::WakeUps => write!(f, "every WFI woken by its virtual-timer deadline"),
        }
    }
}

impl fmt::Display for Label {
    /// `hostile: read just past RAM`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX} ")?;
        self.text(f)
    }
}

/// A function id by its name in `pvlock_abi`'s catalog, else in hex.
struct Name(FunctionId);

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match pvlock_abi::describe(self.0) {
            Some(name) => write!(f, "{name}"),
            None => write!(f, "{:#010x}", self.0.raw()),
        }
    }
}

/// The labels that are neither per place, device, conduit nor function.
const FIXED_DEVICE_LABELS: [Label; 6] = [
    Label::Pl011WideRead,
    Label::GicdWideRead,
    Label::GicdWideWrite,
    Label::GicdReserved,
    Label::GicdReadOnlyWrite,
    Label::GicdLoadPair,
];

const SYSREG_LABELS: [Label; 8] = [
    Label::PmuRegisters,
    Label::BreakpointRegisters,
    Label::Mdscr,
    Label::OsLock,
    Label::PhysicalTimer(Access::Read),
    Label::PhysicalTimer(Access::Write),
    Label::El2Register,
    Label::IdRegisters,
];

/// Every attempt a run makes, each of which a passing run prints `ok` for
/// exactly once; in the order of docs/security.md's table.
pub fn labels() -> impl Iterator<Item = Label> {
    let outside = Place::ALL.into_iter().flat_map(|place| {
        Access::BOTH
            .into_iter()
            .map(move |a| Label::Outside(a, place))
    });
    let host = HostDevice::ALL.into_iter().flat_map(|device| {
        Access::BOTH
            .into_iter()
            .map(move |a| Label::HostDevice(a, device))
    });
    let unowned = [Unowned::Sip, Unowned::Oem].into_iter().flat_map(|owner| {
        Via::BOTH
            .into_iter()
            .map(move |via| Label::Unowned(owner, via))
    });
    outside
        .chain([Label::Fetch])
        .chain(host)
        .chain(FIXED_DEVICE_LABELS)
        .chain(SYSREG_LABELS)
        .chain([
            Label::SmcAsHvc(SmcCall::PsciVersion),
            Label::SmcAsHvc(SmcCall::UnknownPsci),
        ])
        .chain(unowned)
        .chain(Via::BOTH.into_iter().map(Label::NonZeroImmediate))
        .chain(garbage_targets().map(Label::Garbage))
        .chain(BadIpa::ALL.into_iter().map(Label::IpaInit))
        .chain([Label::StolenTimeOfNoVcpu])
        .chain(Target::BOTH.into_iter().map(Label::Kick))
        .chain(Target::BOTH.into_iter().map(Label::YieldTo))
        .chain(BadCpuOn::ALL.into_iter().map(Label::CpuOn))
        .chain([Label::CpuOnRace, Label::WithoutControl])
        .chain(Storm::ALL.into_iter().map(Label::Storm))
        .chain([Label::Scribble, Label::WakeUps])
}

// ---- Result lines ------------------------------------------------------------

/// Bytes a [`Note`] holds.
pub const NOTE_CAPACITY: usize = 240;

/// A short text without an allocator: what happened, or why an attempt
/// failed. Text beyond [`NOTE_CAPACITY`] bytes is cut at a character
/// boundary and marked with `...`.
#[derive(Clone, Copy)]
pub struct Note {
    bytes: [u8; NOTE_CAPACITY],
    len: usize,
    truncated: bool,
}

/// The marker of a cut [`Note`].
const ELLIPSIS: &str = "...";

impl Note {
    pub const fn new() -> Self {
        Self {
            bytes: [0; NOTE_CAPACITY],
            len: 0,
            truncated: false,
        }
    }

    /// The note `args` formats to.
    pub fn of(args: fmt::Arguments) -> Self {
        let mut note = Self::new();
        // Writing to a Note never fails: it truncates.
        let _ = note.write_fmt(args);
        note
    }

    pub fn as_str(&self) -> &str {
        // Only whole characters are ever copied in (write_str).
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl Default for Note {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Write for Note {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.truncated {
            return Ok(());
        }
        let room = NOTE_CAPACITY - ELLIPSIS.len() - self.len;
        let take = if s.len() <= room {
            s.len()
        } else {
            self.truncated = true;
            (0..=room)
                .rev()
                .find(|&i| s.is_char_boundary(i))
                .unwrap_or(0)
        };
        self.bytes[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        if self.truncated {
            self.bytes[self.len..self.len + ELLIPSIS.len()].copy_from_slice(ELLIPSIS.as_bytes());
            self.len += ELLIPSIS.len();
        }
        Ok(())
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq for Note {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

/// A [`Note`] from a format string: `note!("x0 {x0:#x}")`.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::hostile::Note::of(format_args!($($arg)*))
    };
}

/// How an attempt went: whether the answer was the documented one, and
/// what happened (or why it was not).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    pub answered: bool,
    pub note: Note,
}

impl Outcome {
    /// The documented answer came; `note` says what it was.
    pub const fn ok(note: Note) -> Self {
        Self {
            answered: true,
            note,
        }
    }

    /// Something else came; `note` says what and what was documented.
    pub const fn failed(note: Note) -> Self {
        Self {
            answered: false,
            note,
        }
    }
}

/// One attempt's line: `hostile: <label>: ok (<what happened>)` or
/// `hostile: <label>: FAILED: <why>`.
#[derive(Clone, Copy, Debug)]
pub struct ResultLine<'a> {
    pub label: Label,
    pub outcome: &'a Outcome,
}

impl fmt::Display for ResultLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Outcome { answered, note } = self.outcome;
        if *answered {
            write!(f, "{}: ok ({note})", self.label)
        } else {
            write!(f, "{}: FAILED: {note}", self.label)
        }
    }
}

/// The last line of a run in which every attempt got its documented
/// answer: `hostile: all N attempts answered as documented`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllAnswered {
    pub attempts: usize,
}

impl AllAnswered {
    const BEFORE: &'static str = " all ";
    const AFTER: &'static str = " attempts answered as documented";

    /// Finds the line anywhere in `line` (a hypervisor may prefix it).
    pub fn parse(line: &str) -> Option<Self> {
        let at = line.find(PREFIX)? + PREFIX.len();
        let rest = line[at..].strip_prefix(Self::BEFORE)?;
        let (count, rest) = rest.split_once(Self::AFTER)?;
        rest.trim_end().is_empty().then_some(())?;
        Some(Self {
            attempts: count.parse().ok()?,
        })
    }
}

impl fmt::Display for AllAnswered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}{}{}",
            Self::BEFORE,
            self.attempts,
            Self::AFTER
        )
    }
}

/// What is wrong with a console ([`judge_console`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsoleProblem<'a> {
    /// A line saying an attempt failed.
    Failed(&'a str),
    /// An attempt was not reported `ok` exactly once.
    NotOkOnce { label: Label, times: usize },
    /// `hostile: all N attempts answered as documented` appeared this many
    /// times (not once).
    FinalLines(usize),
    /// The final line counted a different number of attempts.
    FinalCount { said: usize, expected: usize },
}

impl fmt::Display for ConsoleProblem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsoleProblem::Failed(line) => write!(f, "an attempt failed: {line:?}"),
            ConsoleProblem::NotOkOnce { label, times } => {
                write!(f, "\"{label}: ok\" {times} times, expected once")
            }
            ConsoleProblem::FinalLines(n) => write!(
                f,
                "{n} \"{PREFIX} all N attempts answered as documented\" lines, expected 1"
            ),
            ConsoleProblem::FinalCount { said, expected } => write!(
                f,
                "the guest counted {said} attempts answered, but it makes {expected}"
            ),
        }
    }
}

/// Judges a console of the hostile guest: no failed attempt, every
/// [`labels`] entry `ok` exactly once, and one final line counting all of
/// them. Calls `report` for each problem; a console that passes gets none.
pub fn judge_console<'a>(lines: &[&'a str], mut report: impl FnMut(ConsoleProblem<'a>)) {
    for line in lines {
        if line.contains(PREFIX) && line.contains(": FAILED") {
            report(ConsoleProblem::Failed(line));
        }
    }
    let mut expected = 0;
    for label in labels() {
        expected += 1;
        // Every ok line goes on with what happened, in parentheses.
        let ok = Note::of(format_args!("{label}: ok ("));
        let times = lines.iter().filter(|l| l.contains(ok.as_str())).count();
        if times != 1 {
            report(ConsoleProblem::NotOkOnce { label, times });
        }
    }
    let finals: usize = lines
        .iter()
        .filter(|l| AllAnswered::parse(l).is_some())
        .count();
    match lines.iter().find_map(|l| AllAnswered::parse(l)) {
        Some(AllAnswered { attempts }) if finals == 1 && attempts != expected => {
            report(ConsoleProblem::FinalCount {
                said: attempts,
                expected,
            })
        }
        _ if finals != 1 => report(ConsoleProblem::FinalLines(finals)),
        _ => {}
    }
}

// ---- Faults ------------------------------------------------------------------

/// The documented answer to an attempt that provokes an exception or reads
/// an emulated register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// A synchronous external abort injected for the data access at
    /// `address` (EC 0x25, data abort from the current EL; DFSC 0b010000;
    /// FAR = `address`; WnR = `write`), ELR at the access.
    ExternalDataAbort { address: u64, write: bool },
    /// A synchronous external abort injected for the instruction fetch at
    /// `address` (EC 0x21; IFSC 0b010000; FAR = ELR = `address`).
    ExternalInstructionAbort { address: u64 },
    /// An undefined instruction injected (EC 0), ELR at the instruction.
    Undefined,
    /// No exception, and the read gives this value.
    Reads(u64),
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Expected::ExternalDataAbort { address, write } => write!(
                f,
                "a synchronous external abort at {address:#x} (data abort, {})",
                if write { "write" } else { "read" }
            ),
            Expected::ExternalInstructionAbort { address } => write!(
                f,
                "a synchronous external abort at {address:#x} (instruction abort)"
            ),
            Expected::Undefined => write!(f, "an undefined instruction"),
            Expected::Reads(value) => write!(f, "no exception and {value:#x}"),
        }
    }
}

/// What the guest is and has, for the documented answers that depend on
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Env {
    /// The VM's RAM: `[ram_base, ram_end)`.
    pub ram_base: u64,
    pub ram_end: u64,
    /// The emulated UART's IPA (device memory).
    pub uart: u64,
    /// The emulated GIC distributor's IPA.
    pub gicd: u64,
    /// vCPUs the VM has.
    pub vcpus: u16,
    /// The calling vCPU's index.
    pub caller: u16,
    /// Bit n set: vCPU n is on (PSCI).
    pub powered_on: u64,
    /// IPA of the caller's PV-lock record (the guest's, openEuler).
    pub lock_record: u64,
    /// IPA of the caller's stolen-time record (in the hypervisor's PV area).
    pub steal_record: u64,
}

impl Env {
    fn is_on(&self, vcpu: u16) -> bool {
        vcpu < 64 && self.powered_on & (1 << vcpu) != 0
    }

    fn in_ram(&self, ipa: u64, len: u64) -> bool {
        ipa >= self.ram_base && ipa.checked_add(len).is_some_and(|end| end <= self.ram_end)
    }

    /// The lowest-numbered vCPU that is off, if any.
    pub fn first_off(&self) -> Option<u16> {
        (0..self.vcpus).find(|&v| !self.is_on(v))
    }
}

/// The MPIDR of vCPU `index` (docs/vms.md: Aff0 = index % 16, Aff1 =
/// index / 16; `Mpidr::vcpu_index` is its inverse).
pub const fn vcpu_mpidr(index: u16) -> Mpidr {
    Mpidr::from_affinity(
        0,
        (index >> 12) as u8,
        (index >> 4) as u8,
        (index & 0xf) as u8,
    )
}

/// An MPIDR no vCPU of any VM has (Aff2 = 0xff).
pub const UNKNOWN_MPIDR: Mpidr = Mpidr::from_affinity(0, 0xff, 0, 0);

impl Label {
    /// The documented answer of the attempts that provoke an exception or
    /// read back an emulated register with one value; `None` for the
    /// others (calls, storms, sequences).
    pub fn expected(&self, env: &Env) -> Option<Expected> {
        Some(match *self {
            Label::Outside(access, place) => Expected::ExternalDataAbort {
                address: place.ipa(env.ram_end),
                write: access == Access::Write,
            },
            Label::HostDevice(access, device) => Expected::ExternalDataAbort {
                address: device.ipa(),
                write: access == Access::Write,
            },
            Label::Fetch => Expected::ExternalInstructionAbort {
                address: FETCH_TARGET,
            },
            Label::Pl011WideRead => Expected::ExternalDataAbort {
                address: env.uart + PL011_FR,
                write: false,
            },
            Label::GicdWideRead | Label::GicdLoadPair => Expected::ExternalDataAbort {
                address: env.gicd + GICD_CTLR,
                write: false,
            },
            Label::GicdWideWrite => Expected::ExternalDataAbort {
                address: env.gicd + GICD_CTLR,
                write: true,
            },
            Label::PhysicalTimer(_) | Label::El2Register => Expected::Undefined,
            Label::GicdReserved => Expected::Reads(0),
            // PMCR_EL0.E and PMCNTENSET_EL0.C as written (the guest reads
            // back only those bits).
            Label::PmuRegisters => Expected::Reads(PMU_ENABLES_WRITTEN),
            // The vCPU's own breakpoint 0 (DBGBVR0_EL1 | DBGBCR0_EL1).
            Label::BreakpointRegisters => Expected::Reads(BREAKPOINT_ADDRESS | BREAKPOINT_CONTROL),
            _ => return None,
        })
    }
}

/// Judges a probe that expected `expected`: `caught` is the exception the
/// probe raised (if any), `instruction` the address of the probing
/// instruction, `read` what a load returned (when it did not fault).
pub fn judge_fault(
    expected: Expected,
    caught: Option<Caught>,
    instruction: u64,
    read: u64,
) -> Outcome {
    use aarch64_cpu::registers::ESR_EL1::EC::Value as Ec;
    let Some(caught) = caught else {
        return match expected {
            Expected::Reads(value) if value == read => Outcome::ok(note!("reads {read:#x}")),
            Expected::Reads(_) => Outcome::failed(note!("read {read:#x}; documented: {expected}")),
            _ => Outcome::failed(note!("no exception; documented: {expected}")),
        };
    };
    let fault = caught.fault();
    let (class, elr) = (fault.class(), caught.elr);
    let mismatch = |what: fmt::Arguments| {
        Outcome::failed(note!(
            "{fault} (ESR {:#x} FAR {:#x} ELR {elr:#x}): {what}; documented: {expected}",
            caught.esr,
            caught.far
        ))
    };
    match expected {
        Expected::Reads(_) => mismatch(format_args!("an exception")),
        Expected::Undefined if class != Some(Ec::Unknown) => mismatch(format_args!("not EC 0")),
        Expected::Undefined if elr != instruction => {
            mismatch(format_args!("ELR is not the instruction {instruction:#x}"))
        }
        Expected::Undefined => Outcome::ok(note!("undefined instruction, ELR at it")),
        Expected::ExternalDataAbort { address, write } => {
            let abort = fault.abort().filter(|a| a.data);
            match abort {
                _ if class != Some(Ec::DataAbortCurrentEL) => mismatch(format_args!("not EC 0x25")),
                Some(a) if a.status != FSC_SYNCHRONOUS_EXTERNAL_ABORT => {
                    mismatch(format_args!("DFSC {:#x}", a.status))
                }
                Some(a) if !a.far_valid || caught.far != address => {
                    mismatch(format_args!("FAR is not {address:#x}"))
                }
                Some(a) if a.write != write => mismatch(format_args!("wrong WnR")),
                _ if elr != instruction => {
                    mismatch(format_args!("ELR is not the access {instruction:#x}"))
                }
                _ => Outcome::ok(note!("{fault}")),
            }
        }
        Expected::ExternalInstructionAbort { address } => {
            let abort = fault.abort().filter(|a| !a.data);
            match abort {
                _ if class != Some(Ec::InstrAbortCurrentEL) => {
                    mismatch(format_args!("not EC 0x21"))
                }
                Some(a) if a.status != FSC_SYNCHRONOUS_EXTERNAL_ABORT => {
                    mismatch(format_args!("IFSC {:#x}", a.status))
                }
                Some(a) if !a.far_valid || caught.far != address || elr != address => {
                    mismatch(format_args!("FAR and ELR are not {address:#x}"))
                }
                _ => Outcome::ok(note!("{fault}")),
            }
        }
    }
}

/// Judges an access that must complete without an exception and leave a
/// register as it was (a write to a read-only register): `before` and
/// `after` are reads around the write.
pub fn judge_ignored_write(caught: Option<Caught>, before: u64, after: u64) -> Outcome {
    match caught {
        Some(c) => Outcome::failed(note!(
            "{} (ESR {:#x}); documented: the write is ignored",
            c.fault(),
            c.esr
        )),
        None if before != after => {
            Outcome::failed(note!("the register changed from {before:#x} to {after:#x}"))
        }
        None => Outcome::ok(note!("ignored, still {after:#x}")),
    }
}

/// Judges a register that must read back what was written, with no
/// exception on the way.
pub fn judge_read_back(caught: Option<Caught>, written: u64, read: u64) -> Outcome {
    match caught {
        Some(c) => Outcome::failed(note!(
            "{} (ESR {:#x}); documented: emulated",
            c.fault(),
            c.esr
        )),
        None if read != written => {
            Outcome::failed(note!("wrote {written:#x}, read back {read:#x}"))
        }
        None => Outcome::ok(note!("wrote and read back {read:#x}")),
    }
}

register_bitfields! {u64,
    /// OSLSR_EL1 (Arm ARM D19.3 "OSLSR_EL1"), which aarch64-cpu does not
    /// define.
    pub OSLSR_EL1 [
        /// OSLM[1]: with OSLM[0], 0b10 = the OS lock is implemented.
        OSLM_HIGH OFFSET(3) NUMBITS(1) [],
        /// The OS lock is locked.
        OSLK OFFSET(1) NUMBITS(1) [],
        /// OSLM[0].
        OSLM_LOW OFFSET(0) NUMBITS(1) [],
    ],
    /// The ID_AA64PFR0_EL1 fields aarch64-cpu does not name (Arm ARM D19.2).
    ID_AA64PFR0_MORE [
        /// Memory Partitioning and Monitoring.
        MPAM OFFSET(40) NUMBITS(4) [],
    ],
    /// The ID_AA64PFR1_EL1 fields aarch64-cpu does not name.
    ID_AA64PFR1_MORE [
        /// Scalable Matrix Extension.
        SME OFFSET(24) NUMBITS(4) [],
    ],
}

/// OSLSR_EL1 with the OS lock implemented (OSLM = 0b10) and locked or not.
pub fn oslsr_value(locked: bool) -> u64 {
    let lock = if locked {
        OSLSR_EL1::OSLK::SET
    } else {
        OSLSR_EL1::OSLK::CLEAR
    };
    (OSLSR_EL1::OSLM_HIGH::SET + OSLSR_EL1::OSLM_LOW::CLEAR + lock).value
}

/// Judges the OS lock: OSLSR_EL1 read at reset (locked: docs/vms.md, "the
/// OS lock resets locked"), after OSLAR_EL1 = 0 (unlocked) and after
/// OSLAR_EL1 = 1 (locked again); `caught` is an exception any of the
/// accesses raised.
pub fn judge_os_lock(caught: Option<Caught>, at_reset: u64, unlocked: u64, locked: u64) -> Outcome {
    if let Some(c) = caught {
        return Outcome::failed(note!(
            "{} (ESR {:#x}); documented: emulated",
            c.fault(),
            c.esr
        ));
    }
    let want = [oslsr_value(true), oslsr_value(false), oslsr_value(true)];
    let got = [at_reset, unlocked, locked];
    if got == want {
        Outcome::ok(note!(
            "OSLSR_EL1 {at_reset:#x} at reset, {unlocked:#x} unlocked, {locked:#x} locked"
        ))
    } else {
        Outcome::failed(note!(
            "OSLSR_EL1 at reset, unlocked, locked: {got:#x?}, documented {want:#x?}"
        ))
    }
}

/// Judges the ID registers a VM reads: SPE, the trace units, SVE, the
/// activity monitors, MPAM, SME and MTE hidden (docs/vms.md: "read as the
/// hardware's with the features a VM does not get hidden"), and a PMUv3
/// shown exactly when the VM's device tree has a PMU node (`pmu_in_dt`).
pub fn judge_id_registers(dfr0: u64, pfr0: u64, pfr1: u64, pmu_in_dt: bool) -> Outcome {
    let dfr0: LocalRegisterCopy<u64, ID_AA64DFR0_EL1::Register> = LocalRegisterCopy::new(dfr0);
    let pfr0_named: LocalRegisterCopy<u64, ID_AA64PFR0_EL1::Register> =
        LocalRegisterCopy::new(pfr0);
    let pfr0_more: LocalRegisterCopy<u64, ID_AA64PFR0_MORE::Register> =
        LocalRegisterCopy::new(pfr0);
    let pfr1_named: LocalRegisterCopy<u64, ID_AA64PFR1_EL1::Register> =
        LocalRegisterCopy::new(pfr1);
    let pfr1_more: LocalRegisterCopy<u64, ID_AA64PFR1_MORE::Register> =
        LocalRegisterCopy::new(pfr1);
    let pmu_version = dfr0.read(ID_AA64DFR0_EL1::PMUVer);
    // PMUv3 (1), or v3p1 (4) to v3p9 (9); 0xf is an IMPLEMENTATION
    // DEFINED PMU.
    let pmuv3 = pmu_version == 1 || (4..=9).contains(&pmu_version);
    if pmuv3 != pmu_in_dt || (pmu_version != 0 && !pmuv3) {
        return Outcome::failed(note!(
            "ID_AA64DFR0_EL1.PMUVer is {pmu_version}, but the device tree has {} PMU node",
            if pmu_in_dt { "a" } else { "no" }
        ));
    }
    let fields = [
        ("ID_AA64DFR0_EL1.PMSVer", dfr0.read(ID_AA64DFR0_EL1::PMSVer)),
        (
            "ID_AA64DFR0_EL1.TraceFilt",
            dfr0.read(ID_AA64DFR0_EL1::TraceFilt),
        ),
        (
            "ID_AA64DFR0_EL1.TraceBuffer",
            dfr0.read(ID_AA64DFR0_EL1::TraceBuffer),
        ),
        ("ID_AA64PFR0_EL1.SVE", pfr0_named.read(ID_AA64PFR0_EL1::SVE)),
        ("ID_AA64PFR0_EL1.AMU", pfr0_named.read(ID_AA64PFR0_EL1::AMU)),
        (
            "ID_AA64PFR0_EL1.MPAM",
            pfr0_more.read(ID_AA64PFR0_MORE::MPAM),
        ),
        ("ID_AA64PFR1_EL1.SME", pfr1_more.read(ID_AA64PFR1_MORE::SME)),
        ("ID_AA64PFR1_EL1.MTE", pfr1_named.read(ID_AA64PFR1_EL1::MTE)),
    ];
    match fields.iter().find(|(_, value)| *value != 0) {
        Some((name, value)) => Outcome::failed(note!("{name} is {value}, not 0 (hidden)")),
        None => Outcome::ok(note!(
            "DFR0 {:#x} PFR0 {pfr0:#x} PFR1 {pfr1:#x}",
            dfr0.get()
        )),
    }
}

// ---- Calls -------------------------------------------------------------------

/// A documented answer to a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// X0 is this return code (an SMC32 call's W0, sign-extended).
    Code(i64),
    /// X0 (W0 for an SMC32 call) is this value.
    Value(u64),
    /// X0..X3 are these.
    Registers([u64; 4]),
    /// X0 is one of these return codes.
    OneOf(&'static [i64]),
    /// X0..X3 are what the same call with x1..x3 = 0 returns: the call
    /// takes no argument.
    IgnoresArguments,
}

impl Answer {
    /// A PSCI return code (`int32`).
    const fn psci(code: i32) -> Self {
        Answer::Code(code as i64)
    }

    /// Whether `got` (X0..X3 of a call to `function`) is this answer;
    /// `without_arguments` is what the call returned with x1..x3 = 0.
    pub fn matches(
        &self,
        function: FunctionId,
        got: [u64; 4],
        without_arguments: Option<[u64; 4]>,
    ) -> bool {
        let code = return_code(function, got[0]);
        let value = if function.is_smc64() {
            got[0]
        } else {
            got[0] & u64::from(u32::MAX)
        };
        match *self {
            Answer::Code(c) => code == c,
            Answer::Value(v) => value == v,
            Answer::Registers(r) => got == r,
            Answer::OneOf(codes) => codes.contains(&code),
            Answer::IgnoresArguments => without_arguments == Some(got),
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Code(c) => write!(f, "{c}"),
            Answer::Value(v) => write!(f, "{v:#x}"),
            Answer::Registers(r) => write!(f, "{r:#x?}"),
            Answer::OneOf(codes) => write!(f, "one of {codes:?}"),
            Answer::IgnoresArguments => write!(f, "the answer without arguments"),
        }
    }
}

/// Which conduits a [`DocumentedCall`] is made through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conduits {
    Hvc,
    Smc,
    /// Both, whose answers must be the same (HCR_EL2.TSC: an SMC is
    /// answered by the hypervisor like the HVC, never forwarded).
    Both,
}

impl Conduits {
    const fn uses(self, via: Via) -> bool {
        matches!(
            (self, via),
            (Conduits::Both, _) | (Conduits::Hvc, Via::Hvc) | (Conduits::Smc, Via::Smc)
        )
    }
}

/// A call and its documented answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DocumentedCall {
    pub function: FunctionId,
    pub args: [u64; 3],
    pub answer: Answer,
    pub conduits: Conduits,
}

impl DocumentedCall {
    const fn hvc(function: FunctionId, args: [u64; 3], answer: Answer) -> Self {
        Self {
            function,
            args,
            answer,
            conduits: Conduits::Hvc,
        }
    }

    /// Makes the call through `hvc` and/or `smc`, as [`Self::conduits`]
    /// says, and judges the answers.
    pub fn attempt(&self, hvc: &impl Conduit, smc: &impl Conduit) -> Outcome {
        let answers = Via::BOTH.map(|via| {
            self.conduits.uses(via).then(|| match via {
                Via::Hvc => hvc.call(self.function, self.args),
                Via::Smc => smc.call(self.function, self.args),
            })
        });
        let mut summary = Note::new();
        for (via, got) in Via::BOTH.into_iter().zip(answers) {
            let Some(got) = got else { continue };
            if !self.answer.matches(self.function, got, None) {
                return Outcome::failed(note!(
                    "{} by {} -> x0 {:#x}, documented {}",
                    Name(self.function),
                    via.name(),
                    got[0],
                    self.answer
                ));
            }
            let separator = if summary.as_str().is_empty() {
                ""
            } else {
                ", "
            };
            let _ = write!(summary, "{separator}{} -> {:#x}", via.name(), got[0]);
        }
        Outcome::ok(summary)
    }
}

impl Label {
    /// The call and documented answer of the attempts that are one call;
    /// `None` for the others. The CPU_ON attempts need an Off vCPU in
    /// `env` (they are made before the guest starts any).
    pub fn documented_call(&self, env: &Env) -> Option<DocumentedCall> {
        use openeuler::{PV_SCHED_IPA_INIT, PV_SCHED_KICK_CPU};
        let own = u64::from(env.caller);
        let not_supported = Answer::Code(smccc::NOT_SUPPORTED);
        Some(match *self {
            Label::SmcAsHvc(call) => {
                let (function, answer) = match call {
                    SmcCall::PsciVersion => (
                        psci::PSCI_VERSION,
                        Answer::Value(psci::VERSION_1_1.raw().into()),
                    ),
                    SmcCall::UnknownPsci => {
                        (UNKNOWN_PSCI, Answer::psci(psci::error::NOT_SUPPORTED))
                    }
                };
                DocumentedCall {
                    conduits: Conduits::Both,
                    ..DocumentedCall::hvc(function, [0; 3], answer)
                }
            }
            Label::Unowned(owner, via) => DocumentedCall {
                conduits: match via {
                    Via::Hvc => Conduits::Hvc,
                    Via::Smc => Conduits::Smc,
                },
                ..DocumentedCall::hvc(owner.function(), [0; 3], not_supported)
            },
            Label::IpaInit(bad) => {
                let ipa = match bad {
                    BadIpa::Unaligned => env.lock_record + 8,
                    BadIpa::PastRam => env.ram_end,
                    BadIpa::Device => env.uart,
                    BadIpa::PvArea => env.steal_record,
                };
                // docs/abi.md §3: "0, or -1 if refused"; el2 refuses with -1 (el2::smccc::pvlock).
                DocumentedCall::hvc(PV_SCHED_IPA_INIT, [ipa, 0, 0], not_supported)
            }
            // DEN0057A: PV_TIME_ST takes no argument; x1 changes nothing.
            Label::StolenTimeOfNoVcpu => DocumentedCall::hvc(
                pvtime::PV_TIME_ST,
                [NO_SUCH_VCPU, 0, 0],
                Answer::Value(env.steal_record),
            ),
            Label::Kick(target) => match target {
                Target::NoSuchVcpu => {
                    DocumentedCall::hvc(PV_SCHED_KICK_CPU, [NO_SUCH_VCPU, 0, 0], not_supported)
                }
                Target::Itself => DocumentedCall::hvc(
                    PV_SCHED_KICK_CPU,
                    [own, 0, 0],
                    Answer::Code(smccc::SUCCESS),
                ),
            },
            Label::YieldTo(target) => {
                let (vcpu, code) = match target {
                    Target::NoSuchVcpu => (NO_SUCH_VCPU, directed_yield::UNKNOWN_VCPU),
                    Target::Itself => (own, directed_yield::TO_SELF),
                };
                DocumentedCall::hvc(
                    directed_yield::PV_SCHED_YIELD_TO,
                    [vcpu, 0, 0],
                    Answer::Code(code),
                )
            }
            Label::CpuOn(bad) => {
                let off = vcpu_mpidr(env.first_off()?).raw();
                let (mpidr, entry, code) = match bad {
                    BadCpuOn::EntryPastRam => (off, env.ram_end, psci::error::INVALID_ADDRESS),
                    BadCpuOn::EntryInDevice => (off, env.uart, psci::error::INVALID_ADDRESS),
                    BadCpuOn::UnknownMpidr => (
                        UNKNOWN_MPIDR.raw(),
                        env.ram_base,
                        psci::error::INVALID_PARAMETERS,
                    ),
                };
                DocumentedCall::hvc(psci::CPU_ON64, [mpidr, entry, 0], Answer::psci(code))
            }
            Label::WithoutControl => DocumentedCall::hvc(
                control::PVLOCK_SET_WFX_POLICY,
                [1, control::ALL_VCPUS, control::WFE_TRAP],
                Answer::Code(control::NOT_CONTROL_VM),
            ),
            _ => return None,
        })
    }
}

/// A PSCI function number no PSCI version defines (the last of the
/// block, docs/abi.md §5): PSCI must answer NOT_SUPPORTED.
pub const UNKNOWN_PSCI: FunctionId = FunctionId::fast32(Owner::StandardSecure, psci::func::LAST);

/// The answer a call with a non-zero immediate gets, whatever X0 names:
/// NOT_SUPPORTED (docs/security.md; SMCCC calls use immediate 0). The
/// guest asks for SMCCC_VERSION, which with immediate 0 answers 1.1.
pub const NON_ZERO_IMMEDIATE_CALL: FunctionId = arch::SMCCC_VERSION;

/// Judges the answer (X0) to [`NON_ZERO_IMMEDIATE_CALL`] made with `HVC #1`
/// or `SMC #1`.
pub fn judge_non_zero_immediate(x0: u64) -> Outcome {
    if smccc::x0_to_ret(x0) == smccc::NOT_SUPPORTED {
        Outcome::ok(note!("x0 {x0:#x} (NOT_SUPPORTED)"))
    } else {
        Outcome::failed(note!("x0 {x0:#x}, documented -1 (NOT_SUPPORTED)"))
    }
}

// ---- Garbage arguments -------------------------------------------------------

/// Whether the VM the guest runs in (`pv-lock = "openeuler"`, PV time on,
/// no `control`, no KVM PTP) has a service for `function`
/// (docs/vms.md, "Hypercalls"). The PSCI service owns the whole PSCI
/// block and answers the functions it lacks itself.
pub fn offered(function: FunctionId) -> bool {
    function == kvm::CALL_UID
        || function == kvm::FEATURES
        || function == directed_yield::PV_SCHED_YIELD_TO
        || function == directed_yield::PV_SCHED_KICK_LEND
        || arch::CALLS.iter().any(|e| e.id == function)
        || openeuler::IDS.contains(&function)
        || pvtime::CALLS.iter().any(|e| e.id == function)
        || psci::is_psci(function)
}

/// Functions the garbage attempts never call: they stop the caller or the
/// VM whatever the arguments say.
pub const NEVER_CALLED: [FunctionId; 3] = [psci::CPU_OFF, psci::SYSTEM_OFF, psci::SYSTEM_RESET];

/// The functions that wait like WFI (PSCI CPU_SUSPEND): the guest arms its
/// virtual timer before it calls them, or they would wait for ever.
pub fn waits_like_wfi(function: FunctionId) -> bool {
    function == psci::CPU_SUSPEND || function == psci::CPU_SUSPEND64
}

/// Every function `pvlock_abi` names, but [`NEVER_CALLED`]: each gets a
/// garbage attempt.
pub fn garbage_targets() -> impl Iterator<Item = FunctionId> {
    catalog::entries()
        .map(|entry| entry.id)
        .filter(|id| !NEVER_CALLED.contains(id))
}

/// Huge, negative and odd argument values. Two have a small low half
/// (vCPU 1 and 2, affinity level 1 and 2, reset type 1 for SMC32 calls,
/// which see only W1..W3) and one a function id in its low half, so that a
/// hypervisor that reads a whole register where the ABI says 32 bits is
/// caught; two are small in all 64 bits (vCPU 3, an undefined reset type).
pub const GARBAGE: [u64; 11] = [
    u64::MAX,
    1 << 63,
    0xdead_beef_cafe_f00d,
    0x0000_0000_ffff_ffff,
    0xffff_ffff_0000_0001,
    0x7fff_ffff_ffff_ffc0,
    (-64i64) as u64,
    0x0000_0001_0000_0002,
    0xffff_ffff_0000_0000 | PV_TIME_ST_RAW,
    3,
    0x7fff_ffff,
];

const PV_TIME_ST_RAW: u64 = pvtime::PV_TIME_ST.raw() as u64;

/// Random argument sets after the [`GARBAGE`] rotations.
pub const RANDOM_SETS: usize = 8;

/// The seed of the random argument sets (fixed: a failing set can be
/// reproduced).
const RANDOM_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// The argument sets (x1, x2, x3) of every garbage attempt: each
/// [`GARBAGE`] value in x1 with the next two in x2 and x3, then
/// [`RANDOM_SETS`] random ones.
pub fn garbage_arguments() -> impl Iterator<Item = [u64; 3]> {
    let n = GARBAGE.len();
    let rotations = (0..n).map(move |i| [GARBAGE[i], GARBAGE[(i + 1) % n], GARBAGE[(i + 2) % n]]);
    let mut rng = prng::Rng::new(RANDOM_SEED);
    let random = (0..RANDOM_SETS).map(move |_| [rng.next_u64(), rng.next_u64(), rng.next_u64()]);
    rotations.chain(random)
}

/// The vCPU the raw MPIDR `raw` names in a VM of `vcpus` vCPUs: only
/// affinity bits set, and a vCPU has that affinity.
fn vcpu_of_mpidr(raw: u64, vcpus: u16) -> Option<u16> {
    let mpidr = Mpidr::from_raw(raw);
    if mpidr.raw() != raw {
        return None;
    }
    let index = u16::try_from(mpidr.vcpu_index()?).ok()?;
    (index < vcpus).then_some(index)
}

/// AFFINITY_INFO(target, level) as docs/abi.md §5 and DEN0022 document it: ON
/// if any vCPU whose affinity fields from `level` up match is on, else
/// OFF; INVALID_PARAMETERS for a level above 3, bits outside the affinity
/// fields, or no match. (ON_PENDING does not arise here: the guest makes
/// its garbage calls while no CPU_ON is in flight.)
fn affinity_info(raw: u64, level: u64, env: &Env) -> i32 {
    let target = Mpidr::from_raw(raw);
    if target.raw() != raw || level > psci::AFFINITY_LEVEL_MAX {
        return psci::error::INVALID_PARAMETERS;
    }
    let matches = |vcpu: u16| {
        let mpidr = vcpu_mpidr(vcpu);
        (level as u32..=3).all(|l| mpidr.affinity(l) == target.affinity(l))
    };
    let mut matched = (0..env.vcpus).filter(|&v| matches(v)).peekable();
    if matched.peek().is_none() {
        return psci::error::INVALID_PARAMETERS;
    }
    if matched.any(|v| env.is_on(v)) {
        psci::AFFINITY_ON
    } else {
        psci::AFFINITY_OFF
    }
}

/// Whether SMCCC_ARCH_FEATURES answers 0 for `queried` in the VM under
/// test: the arch calls themselves, and the FEATURES calls of its PV
/// services that guests probe that way (docs/abi.md §1, §3, §4), and the
/// directed yield. `None` for the workarounds, whose answer depends on the
/// host's CPUs.
fn arch_features(queried: FunctionId) -> Option<i64> {
    if [
        arch::SMCCC_ARCH_WORKAROUND_1,
        arch::SMCCC_ARCH_WORKAROUND_2,
        arch::SMCCC_ARCH_WORKAROUND_3,
    ]
    .contains(&queried)
    {
        return None;
    }
    let probed = [
        arch::SMCCC_VERSION,
        arch::SMCCC_ARCH_FEATURES,
        openeuler::PV_SCHED_FEATURES,
        pvtime::PV_TIME_FEATURES,
        directed_yield::PV_SCHED_YIELD_TO,
        directed_yield::PV_SCHED_KICK_LEND,
    ];
    Some(if probed.contains(&queried) {
        smccc::SUCCESS
    } else {
        smccc::NOT_SUPPORTED
    })
}

/// PSCI_FEATURES(`queried`): 0 for each PSCI function the VM's PSCI
/// implements and for SMCCC_VERSION, else NOT_SUPPORTED (docs/abi.md §5;
/// CPU_SUSPEND's feature flags are 0 too).
fn psci_features(queried: FunctionId) -> i32 {
    let implemented = [
        psci::PSCI_VERSION,
        psci::CPU_SUSPEND,
        psci::CPU_SUSPEND64,
        psci::CPU_OFF,
        psci::CPU_ON,
        psci::CPU_ON64,
        psci::AFFINITY_INFO,
        psci::AFFINITY_INFO64,
        psci::MIGRATE_INFO_TYPE,
        psci::SYSTEM_OFF,
        psci::SYSTEM_RESET,
        psci::PSCI_FEATURES,
        psci::SYSTEM_RESET2,
        psci::SYSTEM_RESET2_64,
        arch::SMCCC_VERSION,
    ];
    if implemented.contains(&queried) {
        psci::error::SUCCESS
    } else {
        psci::error::NOT_SUPPORTED
    }
}

/// The documented answer to `function` with `args` from the caller in
/// `env`, or `None` when the call must not be made: it would change what
/// the guest relies on (start a vCPU at a garbage entry point, reset the
/// VM, register a record somewhere in RAM), or its answer is not fixed by
/// the documents (the Spectre workarounds' features, SYSTEM_RESET2_64 with
/// a reset type above 32 bits, which KVM and el2 read as a vendor reset).
pub fn documented_answer(function: FunctionId, args: [u64; 3], env: &Env) -> Option<Answer> {
    use openeuler::{
        PV_SCHED_FEATURES, PV_SCHED_IPA_INIT, PV_SCHED_IPA_RELEASE, PV_SCHED_KICK_CPU,
    };
    use psci::error;
    if NEVER_CALLED.contains(&function) {
        return None;
    }
    if !offered(function) {
        return Some(Answer::Code(smccc::NOT_SUPPORTED));
    }
    // SMC32 calls see W1..W3 only (docs/abi.md §1, §5).
    let [x1, x2, _] = args.map(|a| {
        if function.is_smc64() {
            a
        } else {
            a & u64::from(u32::MAX)
        }
    });
    let w1 = FunctionId::from_raw(args[0] as u32);
    let not_supported = Answer::Code(smccc::NOT_SUPPORTED);
    let success = Answer::Code(smccc::SUCCESS);
    Some(match function {
        arch::SMCCC_VERSION => Answer::Value(smccc::VERSION_1_1.raw().into()),
        arch::SMCCC_ARCH_FEATURES => Answer::Code(arch_features(w1)?),
        arch::SMCCC_ARCH_SOC_ID => not_supported,
        arch::SMCCC_ARCH_WORKAROUND_1
        | arch::SMCCC_ARCH_WORKAROUND_2
        | arch::SMCCC_ARCH_WORKAROUND_3 => Answer::IgnoresArguments,
        kvm::CALL_UID => Answer::Registers(kvm::UID_REGS),
        kvm::FEATURES => Answer::IgnoresArguments,
        PV_SCHED_FEATURES if openeuler::IDS.contains(&w1) => success,
        PV_SCHED_FEATURES => not_supported,
        PV_SCHED_IPA_INIT if x1.is_multiple_of(64) && env.in_ram(x1, 64) => return None,
        PV_SCHED_IPA_INIT => not_supported,
        PV_SCHED_IPA_RELEASE => success,
        PV_SCHED_KICK_CPU if x1 < u64::from(env.vcpus) => success,
        PV_SCHED_KICK_CPU => not_supported,
        pvtime::PV_TIME_FEATURES
            if [pvtime::PV_TIME_FEATURES, pvtime::PV_TIME_ST].contains(&w1) =>
        {
            success
        }
        pvtime::PV_TIME_FEATURES => not_supported,
        pvtime::PV_TIME_ST => Answer::IgnoresArguments,
        directed_yield::PV_SCHED_YIELD_TO if x1 == u64::from(env.caller) => {
            Answer::Code(directed_yield::TO_SELF)
        }
        directed_yield::PV_SCHED_YIELD_TO if x1 >= u64::from(env.vcpus) => {
            Answer::Code(directed_yield::UNKNOWN_VCPU)
        }
        directed_yield::PV_SCHED_YIELD_TO => {
            Answer::OneOf(&[directed_yield::YIELDED, directed_yield::NOT_YIELDED])
        }
        directed_yield::PV_SCHED_KICK_LEND if x1 < u64::from(env.vcpus) => {
            Answer::Code(directed_yield::KICKED)
        }
        directed_yield::PV_SCHED_KICK_LEND => Answer::Code(directed_yield::UNKNOWN_VCPU),
        psci::PSCI_VERSION => Answer::Value(psci::VERSION_1_1.raw().into()),
        psci::CPU_SUSPEND | psci::CPU_SUSPEND64 => Answer::psci(error::SUCCESS),
        psci::CPU_ON | psci::CPU_ON64 => match vcpu_of_mpidr(x1, env.vcpus) {
            None => Answer::psci(error::INVALID_PARAMETERS),
            Some(vcpu) if env.is_on(vcpu) => Answer::psci(error::ALREADY_ON),
            Some(_) if env.in_ram(x2, 4) => return None,
            Some(_) => Answer::psci(error::INVALID_ADDRESS),
        },
        psci::AFFINITY_INFO | psci::AFFINITY_INFO64 => Answer::psci(affinity_info(x1, x2, env)),
        psci::MIGRATE_INFO_TYPE => Answer::psci(psci::TOS_NOT_PRESENT_OR_MP),
        psci::PSCI_FEATURES => Answer::psci(psci_features(w1)),
        psci::SYSTEM_RESET2 | psci::SYSTEM_RESET2_64 => {
            let reset_type = u32::try_from(x1).ok()?;
            if psci::reset2_type_supported(reset_type) {
                return None;
            }
            Answer::psci(error::INVALID_PARAMETERS)
        }
        // MIGRATE, MIGRATE_INFO_UP_CPU and every PSCI function the VM's
        // PSCI 1.1 does not implement.
        _ if psci::is_psci(function) => Answer::psci(error::NOT_SUPPORTED),
        _ => not_supported,
    })
}

/// Makes every garbage argument set that is safe to send (see
/// [`documented_answer`]) to `function` through `conduit` and judges the
/// answers. `env` describes the caller at the time of the calls.
pub fn attempt_garbage(conduit: &impl Conduit, function: FunctionId, env: &Env) -> Outcome {
    let mut without_arguments = None;
    let (mut checked, mut skipped) = (0u32, 0u32);
    let mut first_answer = None;
    let mut varied = false;
    for args in garbage_arguments() {
        let Some(answer) = documented_answer(function, args, env) else {
            skipped += 1;
            continue;
        };
        if answer == Answer::IgnoresArguments && without_arguments.is_none() {
            without_arguments = Some(conduit.call(function, [0; 3]));
        }
        let got = conduit.call(function, args);
        if !answer.matches(function, got, without_arguments) {
            let documented = match (answer, without_arguments) {
                (Answer::IgnoresArguments, Some(clean)) => {
                    note!("{:#x} (as without arguments)", clean[0])
                }
                _ => note!("{answer}"),
            };
            return Outcome::failed(note!(
                "x1..x3 [{:#x}, {:#x}, {:#x}] -> x0 {:#x}, documented {documented}",
                args[0],
                args[1],
                args[2],
                got[0]
            ));
        }
        checked += 1;
        match first_answer {
            None => first_answer = Some(got[0]),
            Some(first) if first != got[0] => varied = true,
            Some(_) => {}
        }
    }
    match first_answer {
        None => Outcome::failed(note!(
            "none of the {skipped} argument sets is safe to send (test error)"
        )),
        Some(x0) if !varied => Outcome::ok(note!(
            "{checked} argument sets, x0 {x0:#x} each{}",
            Skipped(skipped)
        )),
        Some(_) => Outcome::ok(note!(
            "{checked} argument sets, each as documented{}",
            Skipped(skipped)
        )),
    }
}

/// `, N not sent` when some argument sets were left out.
struct Skipped(u32);

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => Ok(()),
            n => write!(f, ", {n} not sent"),
        }
    }
}

// ---- Races, storms, records --------------------------------------------------

/// Judges the CPU_ON race: `answers` holds (vCPU, PSCI answer) of every
/// vCPU that asked to start the same Off vCPU at once. Exactly one gets
/// SUCCESS; every other ALREADY_ON or ON_PENDING (docs/abi.md §5, DEN0022).
pub fn judge_race(target: u16, answers: &[(u16, i32)]) -> Outcome {
    use psci::error;
    let winners = answers.iter().filter(|(_, a)| *a == error::SUCCESS).count();
    let stray = answers
        .iter()
        .find(|(_, a)| ![error::SUCCESS, error::ALREADY_ON, error::ON_PENDING].contains(a));
    let mut list = Note::new();
    for (i, (vcpu, answer)) in answers.iter().enumerate() {
        let _ = write!(
            list,
            "{}vcpu {vcpu} {answer}",
            if i == 0 { "" } else { ", " }
        );
    }
    match (winners, stray) {
        (_, Some((vcpu, answer))) => Outcome::failed(note!(
            "vcpu {vcpu} got {answer}, not SUCCESS, ALREADY_ON or ON_PENDING ({list})"
        )),
        (1, None) if answers.len() >= 2 => Outcome::ok(note!("vcpu {target}: {list}")),
        (1, None) => Outcome::failed(note!("only {} vCPU raced ({list})", answers.len())),
        (n, None) => Outcome::failed(note!("{n} vCPUs got SUCCESS, expected 1 ({list})")),
    }
}

/// Judges a storm: `completed` of [`Storm::count`] went through, and
/// `problem` says what went wrong along the way, if anything.
pub fn judge_storm(storm: Storm, completed: u64, problem: Option<Note>, took: Duration) -> Outcome {
    let ms = took.as_secs_f64() * 1000.0;
    match problem {
        Some(why) => Outcome::failed(note!("after {completed} of {}: {why}", storm.count())),
        None if completed != storm.count() => {
            Outcome::failed(note!("{completed} of {} completed", storm.count()))
        }
        None => Outcome::ok(note!("{completed} in {ms:.1} ms, the guest still runs")),
    }
}

/// What one vCPU saw of its own records around the scribbling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordCheck {
    pub vcpu: u16,
    /// Its stolen time before anyone scribbled (ns).
    pub stolen_before: u64,
    /// After the scribbling and its next reschedule.
    pub stolen_after: u64,
    /// After one more reschedule.
    pub stolen_later: u64,
    /// How long the VM had run when the vCPU read `stolen_later` (ns):
    /// stolen time can never exceed it.
    pub uptime: u64,
    /// Its PV-lock `preempted` flag, read by itself after the reschedule.
    pub preempted: u32,
    /// A reschedule happened before the reads (the hypervisor had a chance
    /// to write the records again).
    pub rescheduled: bool,
}

/// Judges the records after the scribbling ([`RecordCheck`] of every
/// vCPU): each vCPU was rescheduled, then read its own `preempted` as 0
/// (docs/vms.md: written 0 in vcpu_load) and stolen time that never went
/// backwards, before, after and later, and is below the uptime — so
/// written by the hypervisor from its own accounting, not what the
/// scribblers left.
pub fn judge_records(checks: &[RecordCheck], scribbles: u64) -> Outcome {
    for c in checks {
        let v = c.vcpu;
        if !c.rescheduled {
            return Outcome::failed(note!(
                "vcpu {v} was never rescheduled to see the records rewritten"
            ));
        }
        if c.preempted != 0 {
            return Outcome::failed(note!(
                "vcpu {v} reads its own preempted flag as {:#x} while it runs",
                c.preempted
            ));
        }
        if !(c.stolen_before <= c.stolen_after && c.stolen_after <= c.stolen_later) {
            return Outcome::failed(note!(
                "vcpu {v}'s stolen time went {} -> {} -> {} ns",
                c.stolen_before,
                c.stolen_after,
                c.stolen_later
            ));
        }
        if c.stolen_later > c.uptime {
            return Outcome::failed(note!(
                "vcpu {v}'s stolen time {} ns exceeds the uptime {} ns: garbage",
                c.stolen_later,
                c.uptime
            ));
        }
    }
    if checks.is_empty() {
        return Outcome::failed(note!("no vCPU checked its records"));
    }
    let stolen: u64 = checks.iter().map(|c| c.stolen_later).sum();
    Outcome::ok(note!(
        "{scribbles} scribbled words; {} vCPUs read preempted 0 and sane stolen time ({:.1} ms in all)",
        checks.len(),
        stolen as f64 / 1e6
    ))
}

/// Judges the waits of a run: `waits` WFIs and CPU_SUSPENDs with the
/// virtual timer armed, of which `lost` (per vCPU) were still blocked
/// [`LOST_WAKE_UP`] after their deadline and had to be ended by a
/// KICK_CPU from another vCPU (docs/vms.md: "if it blocked in WFI with the
/// timer armed, the scheduler holds the deadline ... and wakes it then").
pub fn judge_wake_ups(waits: u64, lost: &[(u16, u64)]) -> Outcome {
    let total: u64 = lost.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return Outcome::ok(note!(
            "{waits} waits, none still blocked {} ms past its deadline",
            LOST_WAKE_UP.as_millis()
        ));
    }
    let mut per_vcpu = Note::new();
    for (vcpu, n) in lost.iter().filter(|(_, n)| *n > 0) {
        let separator = if per_vcpu.as_str().is_empty() {
            ""
        } else {
            ", "
        };
        let _ = write!(per_vcpu, "{separator}vcpu {vcpu}: {n}");
    }
    Outcome::failed(note!(
        "{total} of {waits} waits were still blocked {} ms past their virtual-timer deadline \
         (lost wake-ups; a KICK_CPU from another vCPU ended them): {per_vcpu}",
        LOST_WAKE_UP.as_millis()
    ))
}

/// The words scribbled over the records, in turn: all ones, the top bit,
/// and patterns whose every byte is set. Each is larger than any uptime in
/// nanoseconds, so a stolen time equal to one is garbage.
pub const SCRIBBLE_PATTERNS: [u32; 4] = [0xffff_ffff, 0x8000_0000, 0xdead_beef, 0xa5a5_a5a5];

#[cfg(test)]
mod tests;
