//! The decoders of a guest exit: the lower-EL vector and ESR_EL2 as a
//! typed [`Exit`], the syndrome itself ([`Esr`]), a trapped load or store
//! ([`MmioAccess`] and the register work around its emulation) and a
//! trapped system-register access ([`SysregAccess`]).
//!
//! Input layout: operations until the input ends, each an opening byte
//! whose value modulo 3 picks an [`Op`]:
//! - [`Op::Exit`]: a vector byte ([`vector`]) and a syndrome ([`syndrome`]);
//! - [`Op::Mmio`]: a syndrome (data abort from a lower EL unless the class
//!   byte's bit 7 is set), FAR (8 bytes), HPFAR (8 bytes), a register-file
//!   seed (8 bytes), PSTATE (8 bytes), a loaded value (8 bytes), and a
//!   raw access ([`raw_access`]) used when the syndrome does not decode;
//! - [`Op::Sysreg`]: an ISS (4 bytes; bit 31 set: the access came from
//!   EL0), Xt's value (8 bytes), then CRm, op2 (one byte each) and a
//!   hardware ID register value (8 bytes), also read as the CPU's
//!   ID_AA64DFR0_EL1 for the debug registers it has.
//!
//! Invariants checked, as the modules document them:
//! - [`Exit::decode`]: no panic; the lower-EL IRQ, FIQ and SError vectors
//!   decode as such whatever the syndrome; [`is_hvc_call`] implies
//!   "decodes as `hvc #0`", and is true for every such syndrome without
//!   RES0 bits set; every exit's class index names its class; a
//!   WFIT/WFET deadline register is a register number;
//! - [`Esr`]: abort fields only for aborts, a write only for a data abort,
//!   an access size of 1, 2, 4 or 8 bytes and a register number;
//! - [`MmioAccess::decode`]: only data aborts from a lower EL decode; a
//!   decoded access has a size of 1, 2, 4 or 8, a register 0..=31, an
//!   instruction length of 2 or 4 and the IPA HPFAR and FAR make;
//!   [`MmioMap::route`] only returns a frame holding the whole access;
//! - [`complete_read`] writes only the target register (nothing for XZR),
//!   truncated and sign- or zero-extended as the access says, and never
//!   the PC; [`write_value`] is the register's low bytes (0 for XZR);
//!   [`skip_instruction`] moves only the PC and PSTATE: by the
//!   instruction's length, wrapping at 32 bits for AArch32, clearing SS
//!   (and BTYPE for AArch64);
//! - [`SysregAccess::from_iss`]: every field within its width; an SGI
//!   register is a write; an ID read is a read; [`DebugState::emulate`]
//!   leaves the state alone for what it does not emulate and for reads,
//!   which return the stored MDSCR_EL1 and OS lock, answers a write only
//!   as a write, moves the registers into the CPU only unlocked and out
//!   only when locked, and traps only EL0's DCC accesses to EL1; the PMU
//!   ([`emulate`]) reads as zero; [`sanitize_id`] never raises a field
//!   (it hides some and caps versions), so it is idempotent and SVE/SME
//!   feature registers read 0.

use core::fmt::Write;

use aarch64_cpu::registers::HPFAR_EL2;
use tock_registers::LocalRegisterCopy;

use super::input::{Discard, Input};
use crate::guest::layout::{GICD, GICR_WINDOW, UART};
use crate::trap::debug::{DebugAnswer, DebugFeatures, DebugState, MDSCR_GUEST_BITS, Switch};
use crate::trap::esr::Esr;
use crate::trap::exit::{EXIT_CLASSES, Exit, Syndrome, is_hvc_call};
use crate::trap::mmio::{
    MmioAccess, MmioDecodeError, MmioMap, complete_read, skip_instruction, write_value,
};
use crate::trap::pmu::PmuFeatures;
use crate::trap::sysreg::{
    Emulated, SysregAccess, emulate, encoding, is_id_read, sanitize_id, sgi_register,
};
use crate::vcpu::GuestRegs;

/// Most operations one input runs.
const MAX_OPERATIONS: usize = 1024;

/// The operations, by their opening byte modulo 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Op {
    Exit,
    Mmio,
    Sysreg,
}

impl Op {
    const ALL: [Self; 3] = [Self::Exit, Self::Mmio, Self::Sysreg];

    fn from_byte(byte: u8) -> Self {
        Self::ALL[usize::from(byte) % Self::ALL.len()]
    }
}

/// ESR_EL2.EC of a data abort from a lower EL.
pub(super) const EC_DATA_ABORT_LOWER: u8 = 0x24;
/// The class byte of a syndrome: bits 5:0 the class, bit 6 IL; the value
/// [`RAW_SYNDROME`] instead takes all 64 bits from the input.
pub(super) const SYNDROME_IL: u8 = 1 << 6;
/// Bit 7 of an MMIO syndrome's class byte: use the class in bits 5:0
/// rather than a data abort from a lower EL.
pub(super) const SYNDROME_ANY_CLASS: u8 = 1 << 7;
pub(super) const RAW_SYNDROME: u8 = 0xff;
/// A vector byte with bit 7 clear is a lower-EL vector, `8 + bits 2:0`;
/// with bit 7 set an 8-byte vector number follows.
pub(super) const VECTOR_RAW: u8 = 1 << 7;

/// SPSR_EL2 bits [`skip_instruction`] deals with (Arm ARM, SPSR_EL2).
const SPSR_AARCH32: u64 = 1 << 4;
const SPSR_T32: u64 = 1 << 5;
const SPSR_SS: u64 = 1 << 21;
const SPSR_BTYPE: u64 = 0b11 << 10;
const SPSR_IT: u64 = (0b11 << 25) | (0x3f << 10);

/// The ESR_EL2 class field.
const fn class_of(esr: u64) -> u8 {
    ((esr >> 26) & 0x3f) as u8
}

/// The guest's emulated devices, as the hypervisor maps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Device {
    Uart,
    Distributor,
    Redistributors,
}

/// Runs the exit-decoder harness on one input (see the module
/// documentation).
pub fn exits(data: &[u8]) {
    let mut input = Input::new(data);
    let mut map = MmioMap::new();
    for (range, device) in [
        (UART, Device::Uart),
        (GICD, Device::Distributor),
        (GICR_WINDOW, Device::Redistributors),
    ] {
        map.insert(range, device)
            .expect("the guest's frames do not overlap");
    }
    let mut debug = DebugState::reset();
    for _ in 0..MAX_OPERATIONS {
        if input.is_empty() {
            break;
        }
        match Op::from_byte(input.u8()) {
            Op::Exit => decode_exit(&mut input),
            Op::Mmio => mmio(&mut input, &map),
            Op::Sysreg => sysreg(&mut input, &mut debug),
        }
    }
}

/// A vector number (see [`VECTOR_RAW`]).
fn vector(input: &mut Input<'_>) -> u64 {
    let byte = input.u8();
    if byte & VECTOR_RAW == 0 {
        8 + u64::from(byte & 7)
    } else {
        input.u64()
    }
}

/// A syndrome: a class byte (see [`SYNDROME_IL`]) and a 25-bit ISS (4
/// bytes), or 8 raw bytes. `default_class` replaces the class unless the
/// class byte's bit 7 asks for the one given.
fn syndrome(input: &mut Input<'_>, default_class: Option<u8>) -> u64 {
    let class_byte = input.u8();
    if class_byte == RAW_SYNDROME {
        return input.u64();
    }
    let class = match default_class {
        Some(class) if class_byte & SYNDROME_ANY_CLASS == 0 => class,
        _ => class_byte & 0x3f,
    };
    let il = u64::from(class_byte & SYNDROME_IL != 0) << 25;
    u64::from(class) << 26 | il | u64::from(input.u32() & 0x1ff_ffff)
}

fn decode_exit(input: &mut Input<'_>) {
    let vector = vector(input);
    let esr = syndrome(input, None);
    let (far, hpfar) = (input.u64(), input.u64());
    let exit = Exit::decode(Syndrome {
        vector,
        esr,
        far,
        hpfar,
    });
    let _ = write!(Discard, "{exit:?}");
    assert_eq!(
        EXIT_CLASSES[exit.class_index()],
        exit.class_name(),
        "{exit:?}"
    );
    if (8..=15).contains(&vector) {
        // Lower-EL vectors: synchronous, IRQ, FIQ, SError, twice.
        let expected = match (vector - 8) % 4 {
            1 => Some(Exit::Irq),
            2 => Some(Exit::Fiq),
            3 => Some(Exit::SError),
            _ => None,
        };
        match expected {
            Some(expected) => assert_eq!(exit, expected, "vector {vector}"),
            None => assert!(
                !matches!(exit, Exit::Irq | Exit::Fiq | Exit::SError),
                "a synchronous exit decoded as {exit:?}"
            ),
        }
    }
    // The fast path's check never takes another exit for `hvc #0`, and
    // misses none the CPU reports (IL set, RES0 bits clear).
    if is_hvc_call(vector, esr) {
        assert_eq!(exit, Exit::Hvc { imm: 0 }, "vector {vector}, ESR {esr:#x}");
    }
    if exit == (Exit::Hvc { imm: 0 }) && esr == crate::trap::exit::HVC0_SYNDROME {
        assert!(is_hvc_call(vector, esr), "vector {vector}, ESR {esr:#x}");
    }
    match exit {
        Exit::Wfx {
            deadline_register: Some(register),
            ..
        } => assert!(register <= 31, "{exit:?}"),
        Exit::Other { class, esr: raw } => {
            assert_eq!(class, u64::from(class_of(esr)), "{exit:?}");
            assert_eq!(raw, esr, "{exit:?}");
        }
        // The payloads are the standalone decoders' answers, from the same
        // registers: nothing is decoded differently on the exit path.
        Exit::DataAbort(abort) => {
            assert_eq!(abort.far, far);
            assert_eq!(abort.access, MmioAccess::decode(esr, far, hpfar));
            if let Ok(access) = abort.access {
                assert_eq!(access.write, abort.write, "{exit:?}");
            }
            assert!(Syndrome::has_fault_address(vector, esr));
        }
        Exit::InstructionAbort { far: reported } => {
            assert_eq!(reported, far);
            assert!(Syndrome::has_fault_address(vector, esr));
        }
        Exit::SystemRegister(access) => {
            assert_eq!(access, SysregAccess::from_iss(esr & 0x1ff_ffff));
        }
        _ => {}
    }
    check_esr(esr);
}

fn check_esr(raw: u64) {
    let esr = Esr::new(raw);
    assert_eq!(esr.raw(), raw);
    assert_eq!(esr.class_bits(), u64::from(class_of(raw)));
    let _ = write!(Discard, "{esr:?} {}", esr.class_name());
    let _ = esr.is_32bit_instruction();
    let Some(abort) = esr.abort() else {
        return;
    };
    assert!(
        matches!(class_of(raw), 0x20 | 0x21 | 0x24 | 0x25),
        "abort fields for class {:#x}",
        class_of(raw)
    );
    assert!(!abort.write || abort.data, "{abort:?}");
    if let Some(access) = abort.access {
        assert!(abort.data, "{abort:?}");
        assert!(matches!(access.size_bytes, 1 | 2 | 4 | 8), "{abort:?}");
        assert!(access.register <= 31, "{abort:?}");
    }
    let _ = write!(Discard, "{}", abort.status);
}

/// An access the syndrome did not describe, for the register helpers,
/// which take any: IPA (8 bytes), size, register, a flags byte (bit 0
/// write, 1 sign-extend, 2 sixty-four, 3 acquire/release) and the
/// instruction length.
fn raw_access(input: &mut Input<'_>) -> MmioAccess {
    let ipa = input.u64();
    let size = input.u8();
    let register = input.u8();
    let flags = input.u8();
    MmioAccess {
        ipa,
        size,
        write: flags & 1 != 0,
        register,
        sign_extend: flags & 2 != 0,
        sixty_four: flags & 4 != 0,
        acquire_release: flags & 8 != 0,
        instruction_len: input.u8(),
    }
}

fn mmio(input: &mut Input<'_>, map: &MmioMap<Device>) {
    let esr = syndrome(input, Some(EC_DATA_ABORT_LOWER));
    let far = input.u64();
    let hpfar = input.u64();
    let mut fill = prng::Rng::new(input.u64());
    let regs = GuestRegs {
        x: core::array::from_fn(|_| fill.next_u64()),
        pc: fill.next_u64(),
        pstate: input.u64(),
        sp_el0: fill.next_u64(),
    };
    let loaded = input.u64();
    let decoded = MmioAccess::decode(esr, far, hpfar);
    let access = match decoded {
        Ok(access) => {
            assert_eq!(
                class_of(esr),
                EC_DATA_ABORT_LOWER,
                "{access:?} from {esr:#x}"
            );
            assert!(matches!(access.size, 1 | 2 | 4 | 8), "{access:?}");
            assert!(access.register <= 31, "{access:?}");
            assert!(matches!(access.instruction_len, 2 | 4), "{access:?}");
            let page =
                LocalRegisterCopy::<u64, HPFAR_EL2::Register>::new(hpfar).read(HPFAR_EL2::FIPA);
            assert_eq!(access.ipa, page << 12 | (far & 0xfff), "{access:?}");
            check_route(map, access.ipa, access.size);
            access
        }
        Err(error) => {
            let _ = write!(Discard, "{error} {error:?}");
            let not_data_abort = matches!(error, MmioDecodeError::NotLowerElDataAbort { .. });
            assert_eq!(
                not_data_abort,
                class_of(esr) != EC_DATA_ABORT_LOWER,
                "{error:?} from {esr:#x}"
            );
            if let MmioDecodeError::NotLowerElDataAbort { class } = error {
                assert_eq!(class, class_of(esr));
            }
            raw_access(input)
        }
    };
    check_route(map, access.ipa, access.size);
    check_complete_read(&regs, &access, loaded, decoded.is_ok());
    check_write_value(&regs, &access, decoded.is_ok());
    check_skip(&regs, &access);
}

/// A routed access lies wholly inside the frame it is routed to.
fn check_route(map: &MmioMap<Device>, ipa: u64, size: u8) {
    let Some((device, offset)) = map.route(ipa, size) else {
        return;
    };
    let frame = map
        .iter()
        .find(|(_, d)| *d == device)
        .map(|(range, _)| range)
        .expect("routed to a mapped device");
    let last = ipa + u64::from(size.max(1)) - 1;
    assert!(
        frame.contains(ipa) && frame.contains(last),
        "{size} bytes at {ipa:#x} routed to {device:?} at {frame:?}"
    );
    assert_eq!(offset, ipa - frame.base);
}

/// The bits an access of `size` bytes carries (all for 8 or more).
fn size_mask(size: u8) -> u64 {
    match size {
        8.. => u64::MAX,
        size => (1u64 << (u32::from(size) * 8)) - 1,
    }
}

fn check_complete_read(regs: &GuestRegs, access: &MmioAccess, loaded: u64, decoded: bool) {
    let mut after = regs.clone();
    complete_read(&mut after, access, loaded);
    assert_eq!(
        (after.pc, after.pstate, after.sp_el0),
        (regs.pc, regs.pstate, regs.sp_el0),
        "a load moved the PC or PSTATE"
    );
    let target = usize::from(access.register);
    for (n, (now, was)) in after.x.iter().zip(&regs.x).enumerate() {
        if n != target {
            assert_eq!(now, was, "a load into x{target} changed x{n}");
        }
    }
    if !decoded || target >= after.x.len() {
        return;
    }
    let value = after.x[target];
    let mask = size_mask(access.size);
    let width = if access.sixty_four {
        u64::MAX
    } else {
        u64::from(u32::MAX)
    };
    assert_eq!(value & !width, 0, "{access:?} wrote above its register");
    assert_eq!(
        value & mask & width,
        loaded & mask & width,
        "{access:?} did not load the value"
    );
    if !access.sign_extend || access.size >= 8 {
        assert_eq!(value & !mask, 0, "{access:?} did not zero-extend");
    } else {
        let sign = loaded >> (u32::from(access.size) * 8 - 1) & 1;
        let extension = width & !mask;
        let expected = if sign == 1 { extension } else { 0 };
        assert_eq!(
            value & extension,
            expected,
            "{access:?} did not sign-extend"
        );
    }
}

fn check_write_value(regs: &GuestRegs, access: &MmioAccess, decoded: bool) {
    let value = write_value(regs, access);
    if access.register >= 31 {
        assert_eq!(value, 0, "a store from XZR");
    } else if decoded {
        assert_eq!(
            value,
            regs.x[usize::from(access.register)] & size_mask(access.size)
        );
    }
}

fn check_skip(regs: &GuestRegs, access: &MmioAccess) {
    let mut after = regs.clone();
    skip_instruction(&mut after, access);
    assert_eq!((after.x, after.sp_el0), (regs.x, regs.sp_el0));
    assert_eq!(after.pstate & SPSR_SS, 0, "SS left set");
    let len = u64::from(access.instruction_len);
    if regs.pstate & SPSR_AARCH32 == 0 {
        assert_eq!(after.pc, regs.pc.wrapping_add(len));
        assert_eq!(after.pstate, regs.pstate & !(SPSR_SS | SPSR_BTYPE));
    } else {
        assert_eq!(after.pc, regs.pc.wrapping_add(len) & u64::from(u32::MAX));
        let kept = !(SPSR_SS | SPSR_IT);
        assert_eq!(after.pstate & kept, regs.pstate & kept);
        if regs.pstate & SPSR_T32 == 0 {
            assert_eq!(
                after.pstate & SPSR_IT,
                regs.pstate & SPSR_IT,
                "A32 has no IT block"
            );
        }
    }
}

fn sysreg(input: &mut Input<'_>, debug: &mut DebugState) {
    let raw = input.u32();
    let from_el0 = raw & (1 << 31) != 0;
    let iss = u64::from(raw & !(1 << 31));
    let value = input.u64();
    let access = SysregAccess::from_iss(iss);
    let _ = write!(Discard, "{access} {access:?}");
    let (op0, op1, crn, crm, op2) = access.encoding();
    assert!(
        op0 <= 3 && op1 <= 7 && crn <= 15 && crm <= 15 && op2 <= 7,
        "{access:?}"
    );
    assert!(access.rt <= 31, "{access:?}");
    if sgi_register(&access).is_some() {
        assert!(access.write, "{access:?}");
        assert!(
            matches!(access.encoding(), (3, 0, 12, 11, 5..=7)),
            "{access:?}"
        );
    }
    if is_id_read(&access) {
        assert!(!access.write, "{access:?}");
    }
    let (crm, op2, hardware) = (input.u8(), input.u8(), input.u64());

    debug_register(
        debug,
        &access,
        value,
        DebugFeatures::from_dfr0(hardware),
        from_el0,
    );
    match emulate(&access) {
        None => {}
        Some(Emulated::Read(read)) => {
            assert!(!access.write, "{access} answered as a read");
            assert_eq!(read, 0, "{access}: the PMU reads as zero");
        }
        Some(Emulated::Written) => assert!(access.write, "{access} answered as a write"),
    }

    // The PMU as a CPU with this value as its ID_AA64DFR0_EL1 offers it.
    let pmu = PmuFeatures::from_cpu(hardware, usize::from(crm));
    let sanitized = sanitize_id(crm, op2, hardware, pmu);
    for shift in (0..64).step_by(4) {
        let field = |v: u64| (v >> shift) & 0xf;
        assert!(
            field(sanitized) <= field(hardware),
            "ID register ({crm}, {op2}) field {shift} raised: {hardware:#x} -> {sanitized:#x}"
        );
    }
    assert_eq!(sanitize_id(crm, op2, sanitized, pmu), sanitized);
    if matches!((crm, op2), (4, 4) | (4, 5)) {
        assert_eq!(sanitized, 0, "SVE/SME features shown");
    }
}

/// One access through [`DebugState::emulate`], checked against the
/// module's table.
fn debug_register(
    debug: &mut DebugState,
    access: &SysregAccess,
    value: u64,
    features: DebugFeatures,
    from_el0: bool,
) {
    let before = debug.clone();
    match debug.emulate(access, value, features, from_el0) {
        None => assert_eq!(*debug, before, "{access} not emulated but changed state"),
        Some(DebugAnswer::TrapToEl1) => {
            assert!(from_el0, "{access}: only EL0 is trapped to EL1");
            assert!(
                matches!(
                    access.encoding(),
                    encoding::MDCCSR_EL0 | encoding::DBGDTR_EL0 | encoding::DBGDTRRX_EL0
                ),
                "{access} is not a DCC register"
            );
            assert_eq!(*debug, before, "{access} trapped but changed state");
        }
        Some(DebugAnswer::Done {
            result: Emulated::Read(read),
            switch,
        }) => {
            assert!(!access.write, "{access} answered as a read");
            assert_eq!(*debug, before, "{access} changed state");
            assert_eq!(switch, None, "a read moved the registers");
            match access.encoding() {
                encoding::MDSCR_EL1 => assert_eq!(read, before.registers.mdscr),
                encoding::OSLSR_EL1 => {
                    assert_eq!(read, 0b1000 | u64::from(before.os_locked()) << 1);
                }
                _ => {}
            }
        }
        Some(DebugAnswer::Done {
            result: Emulated::Written,
            switch,
        }) => {
            assert!(access.write, "{access} answered as a write");
            assert_eq!(
                debug.registers.mdscr & !MDSCR_GUEST_BITS,
                0,
                "MDSCR_EL1 keeps only what EL1 writes"
            );
            match switch {
                Some(Switch::ToCpu) => assert!(!before.in_cpu() && debug.in_cpu()),
                Some(Switch::ToMemory) => assert!(before.in_cpu() && !debug.in_cpu()),
                None => assert_eq!(before.in_cpu(), debug.in_cpu()),
            }
        }
    }
    assert!(
        !(debug.in_cpu() && debug.locked()),
        "registers in the CPU while the OS lock disables debug"
    );
}
