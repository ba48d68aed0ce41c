//! SMC Calling Convention basics (Arm DEN0028): the function-ID layout,
//! owners, return codes, versions, the general per-owner queries and the
//! register rules.
//!
//! Project reference: `docs/abi.md` §1.
//!
//! Spec sections are cited by title (DEN0028 renumbers between issues):
//! "Function Identifiers" (Table 2-1, bit usage in the function ID),
//! "Register use in AArch64 SMC and HVC calls", "Return codes",
//! "General Service Queries" and "SMCCC_VERSION".

use core::fmt;

/// Bit 31 of W0: 1 = Fast Call, 0 = Yielding Call.
///
/// DEN0028 "Function Identifiers", Table 2-1. Every call in this crate is a
/// fast call.
pub const FAST_CALL: u32 = 1 << 31;

/// Bit 30 of W0: 1 = SMC64/HVC64 calling convention, 0 = SMC32/HVC32.
///
/// DEN0028 "Function Identifiers", Table 2-1.
pub const SMC64: u32 = 1 << 30;

/// Shift of the 6-bit owning-entity number (bits 29:24).
///
/// DEN0028 "Function Identifiers", Table 2-1.
pub const OWNER_SHIFT: u32 = 24;

/// Mask of the owning-entity number after shifting by [`OWNER_SHIFT`].
///
/// DEN0028 "Function Identifiers", Table 2-1.
pub const OWNER_MASK: u32 = 0x3F;

/// Bit 16 of W0: the SVE live-state hint introduced by SMCCC v1.3. A callee
/// ignores it for dispatch (it only says the caller holds no live SVE state
/// beyond the 128-bit V registers), so [`FunctionId::from_x0`] masks it.
///
/// DEN0028 (v1.3+) "Function Identifiers", Table 2-1; docs/abi.md §1.
pub const SVE_HINT: u32 = 1 << 16;

/// Bits 23:17 of W0: must be zero for fast calls (bit 16 is [`SVE_HINT`]).
///
/// DEN0028 "Function Identifiers", Table 2-1 ("MBZ").
pub const FAST_CALL_MBZ_MASK: u32 = 0x00FE_0000;

/// Bits 15:0 of W0: the function number within the owner's range.
///
/// DEN0028 "Function Identifiers", Table 2-1.
pub const FUNCTION_NUMBER_MASK: u32 = 0xFFFF;

/// Owning entity of a function ID (bits 29:24).
///
/// DEN0028 "Function Identifiers", owning-entity numbers (Table 2-1 / the
/// service-call range table): 0 Arm Architecture, 1 CPU Service, 2 SiP
/// Service, 3 OEM Service, 4 Standard Secure Service (PSCI, ...), 5 Standard
/// Hypervisor Service (PV time, ...), 6 Vendor Specific Hypervisor Service
/// (KVM), 7-47 reserved, 48-49 Trusted Application, 50-63 Trusted OS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// 0: Arm Architecture Calls (SMCCC_VERSION, workarounds, ...).
    Arch,
    /// 1: CPU Service Calls.
    Cpu,
    /// 2: SiP (Silicon Partner) Service Calls.
    Sip,
    /// 3: OEM Service Calls.
    Oem,
    /// 4: Standard Secure Service Calls (PSCI is function numbers 0x00-0x1F).
    StandardSecure,
    /// 5: Standard Hypervisor Service Calls (PV time, DEN0057A).
    StandardHypervisor,
    /// 6: Vendor Specific Hypervisor Service Calls (KVM's range).
    VendorHypervisor,
    /// 7-47: reserved for future use; holds the raw owner number.
    Reserved(u8),
    /// 48-49: Trusted Application Calls; holds the raw owner number.
    TrustedApp(u8),
    /// 50-63: Trusted OS Calls; holds the raw owner number.
    TrustedOs(u8),
}

impl Owner {
    /// Decodes a 6-bit owner number (higher bits are ignored).
    ///
    /// DEN0028 "Function Identifiers", Table 2-1.
    pub const fn from_bits(bits: u8) -> Self {
        let bits = bits & (OWNER_MASK as u8);
        match bits {
            0 => Self::Arch,
            1 => Self::Cpu,
            2 => Self::Sip,
            3 => Self::Oem,
            4 => Self::StandardSecure,
            5 => Self::StandardHypervisor,
            6 => Self::VendorHypervisor,
            7..=47 => Self::Reserved(bits),
            48..=49 => Self::TrustedApp(bits),
            _ => Self::TrustedOs(bits),
        }
    }

    /// The 6-bit owner number that goes into bits 29:24.
    ///
    /// DEN0028 "Function Identifiers", Table 2-1.
    pub const fn bits(self) -> u8 {
        match self {
            Self::Arch => 0,
            Self::Cpu => 1,
            Self::Sip => 2,
            Self::Oem => 3,
            Self::StandardSecure => 4,
            Self::StandardHypervisor => 5,
            Self::VendorHypervisor => 6,
            Self::Reserved(n) | Self::TrustedApp(n) | Self::TrustedOs(n) => n & (OWNER_MASK as u8),
        }
    }
}

/// An SMCCC function identifier: the value of W0 at an SMC/HVC.
///
/// Only W0 counts: bits 63:32 of X0 are ignored (use [`FunctionId::from_x0`]).
/// Layout (DEN0028 "Function Identifiers", Table 2-1; docs/abi.md §1):
///
/// | bits  | meaning |
/// |-------|---------|
/// | 31    | 1 = fast call ([`FAST_CALL`]) |
/// | 30    | 1 = SMC64/HVC64 ([`SMC64`]) |
/// | 29:24 | owner ([`Owner`]) |
/// | 23:17 | MBZ for fast calls ([`FAST_CALL_MBZ_MASK`]) |
/// | 16    | SVE hint, SMCCC ≥ 1.3 ([`SVE_HINT`]) |
/// | 15:0  | function number |
///
/// Constants of this type can be used as `match` patterns.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct FunctionId(u32);

impl FunctionId {
    /// Wraps a raw W0 value unchanged (no masking).
    pub const fn from_raw(raw: u32) -> Self {
        Self(raw)
    }

    /// Decodes the function ID a caller put in X0: keeps only W0 and clears
    /// the SMCCC v1.3 SVE hint (bit 16).
    ///
    /// DEN0028 "Function Identifiers" (W0 only; SVE hint); docs/abi.md §1.
    pub const fn from_x0(x0: u64) -> Self {
        Self((x0 as u32) & !SVE_HINT)
    }

    /// A fast SMC32/HVC32 call id: `0x80000000 | owner << 24 | number`.
    ///
    /// DEN0028 "Function Identifiers", Table 2-1.
    pub const fn fast32(owner: Owner, number: u16) -> Self {
        Self(FAST_CALL | ((owner.bits() as u32) << OWNER_SHIFT) | number as u32)
    }

    /// A fast SMC64/HVC64 call id: `0xC0000000 | owner << 24 | number`.
    ///
    /// DEN0028 "Function Identifiers", Table 2-1.
    pub const fn fast64(owner: Owner, number: u16) -> Self {
        Self(FAST_CALL | SMC64 | ((owner.bits() as u32) << OWNER_SHIFT) | number as u32)
    }

    /// The raw 32-bit value.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// Bit 31: fast call. DEN0028 Table 2-1.
    pub const fn is_fast(self) -> bool {
        self.0 & FAST_CALL != 0
    }

    /// Bit 30: SMC64/HVC64 calling convention. DEN0028 Table 2-1.
    pub const fn is_smc64(self) -> bool {
        self.0 & SMC64 != 0
    }

    /// Bits 29:24: the owning entity. DEN0028 Table 2-1.
    pub const fn owner(self) -> Owner {
        Owner::from_bits(((self.0 >> OWNER_SHIFT) & OWNER_MASK) as u8)
    }

    /// Bits 15:0: the function number. DEN0028 Table 2-1.
    pub const fn number(self) -> u16 {
        (self.0 & FUNCTION_NUMBER_MASK) as u16
    }

    /// Bit 16: the SMCCC v1.3 SVE hint (always false after
    /// [`FunctionId::from_x0`]). DEN0028 Table 2-1.
    pub const fn has_sve_hint(self) -> bool {
        self.0 & SVE_HINT != 0
    }

    /// Bits 23:17, which must be zero in a fast call; a non-zero result is a
    /// malformed id and answers NOT_SUPPORTED. DEN0028 Table 2-1.
    pub const fn mbz_bits(self) -> u32 {
        self.0 & FAST_CALL_MBZ_MASK
    }

    /// The same id with bit 30 cleared (the SMC32 form). Useful to fold the
    /// 32- and 64-bit forms of one function (e.g. PSCI CPU_ON) together.
    pub const fn to_smc32(self) -> Self {
        Self(self.0 & !SMC64)
    }
}

impl fmt::Debug for FunctionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FunctionId({:#010x})", self.0)
    }
}

impl fmt::LowerHex for FunctionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

impl From<FunctionId> for u32 {
    fn from(id: FunctionId) -> u32 {
        id.0
    }
}

/// General service query: call count (deprecated in later SMCCC issues, but
/// the number stays reserved). Function number within every owner's range.
///
/// DEN0028 "General Service Queries" (function 0xFF00).
pub const CALL_COUNT: u16 = 0xFF00;

/// General service query: Call UID, answered as four 32-bit words in
/// W0..W3 (packing: [`uuid_to_words`]).
///
/// DEN0028 "General Service Queries" (function 0xFF01); docs/abi.md §1.
pub const CALL_UID: u16 = 0xFF01;

/// General service query: revision of the service.
///
/// DEN0028 "General Service Queries" (function 0xFF03).
pub const REVISION: u16 = 0xFF03;

/// Packs a UUID (16 bytes in RFC 4122 string order, i.e. the bytes of
/// `28b46fb6-2ec5-...` are `0x28, 0xb4, ...`) into the four Call UID result
/// words: word `i` holds bytes `4i..4i+4` in little-endian order.
///
/// This is Linux's `smccc_uuid_to_reg()` (the inverse of
/// `smccc_res_to_uuid()`, `include/linux/arm-smccc.h`).
/// DEN0028 "General Service Queries" (Call UID); docs/abi.md §1–2.
pub const fn uuid_to_words(bytes: [u8; 16]) -> [u32; 4] {
    let mut words = [0u32; 4];
    let mut i = 0;
    while i < 4 {
        words[i] = u32::from_le_bytes([
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ]);
        i += 1;
    }
    words
}

/// Inverse of [`uuid_to_words`]: Linux's `smccc_res_to_uuid()`.
///
/// DEN0028 "General Service Queries" (Call UID).
pub const fn words_to_uuid(words: [u32; 4]) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    let mut i = 0;
    while i < 4 {
        let b = words[i].to_le_bytes();
        bytes[4 * i] = b[0];
        bytes[4 * i + 1] = b[1];
        bytes[4 * i + 2] = b[2];
        bytes[4 * i + 3] = b[3];
        i += 1;
    }
    bytes
}

/// SMCCC return code SUCCESS.
///
/// DEN0028 "Return codes"; docs/abi.md §1.
pub const SUCCESS: i64 = 0;
/// SMCCC return code NOT_SUPPORTED; also the answer to any unknown function
/// ID. DEN0028 "Return codes"; docs/abi.md §1.
pub const NOT_SUPPORTED: i64 = -1;
/// SMCCC return code NOT_REQUIRED. DEN0028 "Return codes"; docs/abi.md §1.
pub const NOT_REQUIRED: i64 = -2;
/// SMCCC return code INVALID_PARAMETER. DEN0028 "Return codes"; docs/abi.md §1.
pub const INVALID_PARAMETER: i64 = -3;

/// The SMCCC return codes as an enum (values are [`SUCCESS`],
/// [`NOT_SUPPORTED`], [`NOT_REQUIRED`], [`INVALID_PARAMETER`]).
///
/// DEN0028 "Return codes".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i64)]
pub enum ReturnCode {
    /// 0.
    Success = SUCCESS,
    /// -1.
    NotSupported = NOT_SUPPORTED,
    /// -2.
    NotRequired = NOT_REQUIRED,
    /// -3.
    InvalidParameter = INVALID_PARAMETER,
}

impl ReturnCode {
    /// The signed value.
    pub const fn value(self) -> i64 {
        self as i64
    }

    /// The value as X0 holds it (sign-extended to 64 bits).
    pub const fn to_x0(self) -> u64 {
        ret_to_x0(self as i64)
    }
}

/// Turns a signed return value into the 64-bit register value, sign-extended.
///
/// Always write the full 64 bits, also for SMC32/HVC32 calls: Linux compares
/// the whole `unsigned long a0` against `SMCCC_RET_NOT_SUPPORTED` (an `int`
/// -1, converted to `0xFFFF_FFFF_FFFF_FFFF`), and KVM stores the `long`
/// value. So -1 must become `0xFFFF_FFFF_FFFF_FFFF`, not `0x0000_0000_FFFF_FFFF`.
///
/// DEN0028 "Return codes"; docs/abi.md §1 ("sign-extended to 64 bits").
pub const fn ret_to_x0(code: i64) -> u64 {
    code as u64
}

/// Reads a register value back as a signed return code (the caller's view).
///
/// DEN0028 "Return codes".
pub const fn x0_to_ret(x0: u64) -> i64 {
    x0 as i64
}

/// An SMCCC (and PSCI) version number: bit 31 zero, major in bits 30:16,
/// minor in bits 15:0, so `1.1 == 0x10001`. Ordering compares versions.
///
/// DEN0028 "SMCCC_VERSION"; DEN0022 "PSCI_VERSION" uses the same encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct Version(u32);

impl Version {
    /// Encodes `major.minor`. Panics (at compile time in a const) if `major`
    /// does not fit in 15 bits.
    pub const fn new(major: u16, minor: u16) -> Self {
        assert!(major <= 0x7FFF, "version major is bits 30:16");
        Self(((major as u32) << 16) | minor as u32)
    }

    /// Wraps a raw 32-bit version value.
    pub const fn from_raw(raw: u32) -> Self {
        Self(raw)
    }

    /// The raw 32-bit encoding.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// Bits 30:16.
    pub const fn major(self) -> u16 {
        ((self.0 >> 16) & 0x7FFF) as u16
    }

    /// Bits 15:0.
    pub const fn minor(self) -> u16 {
        (self.0 & 0xFFFF) as u16
    }
}

/// SMCCC v1.0 (`0x10000`). DEN0028 "SMCCC_VERSION".
pub const VERSION_1_0: Version = Version::new(1, 0);
/// SMCCC v1.1 (`0x10001`): X4..X17 preserved; the minimum at which Linux
/// uses the conduit for vendor services. DEN0028 "SMCCC_VERSION"; docs/abi.md §1.
pub const VERSION_1_1: Version = Version::new(1, 1);
/// SMCCC v1.2 (`0x10002`): guests only ask SMCCC_ARCH_SOC_ID from here on.
/// DEN0028 "SMCCC_VERSION".
pub const VERSION_1_2: Version = Version::new(1, 2);
/// SMCCC v1.3 (`0x10003`): adds the SVE hint bit. DEN0028 "SMCCC_VERSION".
pub const VERSION_1_3: Version = Version::new(1, 3);

/// First register (X4) of the range a callee must preserve (SMCCC ≥ 1.1).
///
/// Rule (DEN0028 "Register use in AArch64 SMC and HVC calls"; docs/abi.md §1):
/// with SMCCC ≥ 1.1 the callee preserves X4..X17 unless the function
/// defines them as results (SMCCC 1.2 allows SMC64 results up to X17; no call
/// in this crate does); results go in X0..X3 ([`RESULT_REGS`]); result
/// registers a function does not use are left as the caller had them or
/// zeroed — KVM zeroes X1..X3 when it returns fewer values. Under SMCCC 1.0
/// X4..X17 were not guaranteed, which is why guests check for 1.1 first.
pub const PRESERVED_FIRST: usize = 4;
/// Last register (X17) of the preserved range; see [`PRESERVED_FIRST`].
pub const PRESERVED_LAST: usize = 17;
/// Number of result registers (X0..X3) used by every call in this crate.
/// DEN0028 "Register use in AArch64 SMC and HVC calls".
pub const RESULT_REGS: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_bits() {
        assert_eq!(FAST_CALL, 0x8000_0000);
        assert_eq!(SMC64, 0x4000_0000);
        assert_eq!(OWNER_SHIFT, 24);
        assert_eq!(OWNER_MASK, 0x3F);
        assert_eq!(SVE_HINT, 0x0001_0000);
        assert_eq!(FAST_CALL_MBZ_MASK, 0x00FE_0000);
        assert_eq!(FUNCTION_NUMBER_MASK, 0x0000_FFFF);
        // The fields tile the word exactly.
        assert_eq!(
            FAST_CALL
                | SMC64
                | (OWNER_MASK << OWNER_SHIFT)
                | FAST_CALL_MBZ_MASK
                | SVE_HINT
                | FUNCTION_NUMBER_MASK,
            u32::MAX
        );
    }

    #[test]
    fn owner_numbers_match_den0028() {
        let named = [
            (Owner::Arch, 0),
            (Owner::Cpu, 1),
            (Owner::Sip, 2),
            (Owner::Oem, 3),
            (Owner::StandardSecure, 4),
            (Owner::StandardHypervisor, 5),
            (Owner::VendorHypervisor, 6),
        ];
        for (owner, bits) in named {
            assert_eq!(owner.bits(), bits);
            assert_eq!(Owner::from_bits(bits), owner);
        }
        for n in 7..=47 {
            assert_eq!(Owner::from_bits(n), Owner::Reserved(n));
        }
        for n in 48..=49 {
            assert_eq!(Owner::from_bits(n), Owner::TrustedApp(n));
        }
        for n in 50..=63 {
            assert_eq!(Owner::from_bits(n), Owner::TrustedOs(n));
        }
        for n in 0..=63u8 {
            assert_eq!(Owner::from_bits(n).bits(), n);
        }
    }

    #[test]
    fn accessors_on_pv_time_st() {
        let id = FunctionId::from_raw(0xC5000021);
        assert!(id.is_fast());
        assert!(id.is_smc64());
        assert_eq!(id.owner(), Owner::StandardHypervisor);
        assert_eq!(id.number(), 0x21);
        assert!(!id.has_sve_hint());
        assert_eq!(id.mbz_bits(), 0);
        assert_eq!(id, FunctionId::fast64(Owner::StandardHypervisor, 0x21));
        assert_eq!(id.to_smc32(), FunctionId::from_raw(0x85000021));
    }

    #[test]
    fn accessors_on_smc32_ids() {
        let id = FunctionId::from_raw(0x8600FF01);
        assert!(id.is_fast());
        assert!(!id.is_smc64());
        assert_eq!(id.owner(), Owner::VendorHypervisor);
        assert_eq!(id.number(), 0xFF01);
        assert_eq!(id, FunctionId::fast32(Owner::VendorHypervisor, CALL_UID));

        let id = FunctionId::from_raw(0x84000003);
        assert_eq!(id.owner(), Owner::StandardSecure);
        assert_eq!(id.number(), 3);
        assert!(!id.is_smc64());
    }

    #[test]
    fn from_x0_keeps_w0_and_masks_sve_hint() {
        assert_eq!(
            FunctionId::from_x0(0xDEAD_BEEF_C500_0021),
            FunctionId::from_raw(0xC5000021)
        );
        assert_eq!(
            FunctionId::from_x0(0x0000_0000_C501_0021),
            FunctionId::from_raw(0xC5000021)
        );
        assert_eq!(
            FunctionId::from_x0(0xFFFF_FFFF_8401_0000),
            FunctionId::from_raw(0x84000000)
        );
        assert!(FunctionId::from_raw(0xC5010021).has_sve_hint());
        assert!(!FunctionId::from_x0(0xC5010021).has_sve_hint());
        // Other MBZ bits are kept so the dispatcher can reject them.
        assert_eq!(FunctionId::from_x0(0xC5020021).mbz_bits(), 0x0002_0000);
    }

    #[test]
    fn general_queries() {
        assert_eq!(CALL_COUNT, 0xFF00);
        assert_eq!(CALL_UID, 0xFF01);
        assert_eq!(REVISION, 0xFF03);
    }

    #[test]
    fn return_codes() {
        assert_eq!(SUCCESS, 0);
        assert_eq!(NOT_SUPPORTED, -1);
        assert_eq!(NOT_REQUIRED, -2);
        assert_eq!(INVALID_PARAMETER, -3);
        assert_eq!(ReturnCode::Success.value(), 0);
        assert_eq!(ReturnCode::NotSupported.to_x0(), 0xFFFF_FFFF_FFFF_FFFF);
        assert_eq!(ReturnCode::NotRequired.to_x0(), 0xFFFF_FFFF_FFFF_FFFE);
        assert_eq!(ReturnCode::InvalidParameter.to_x0(), 0xFFFF_FFFF_FFFF_FFFD);
        assert_eq!(ret_to_x0(NOT_SUPPORTED), u64::MAX);
        assert_eq!(ret_to_x0(SUCCESS), 0);
        assert_eq!(x0_to_ret(u64::MAX), -1);
        // Linux: `res.a0 == SMCCC_RET_NOT_SUPPORTED` with a0: unsigned long.
        assert_eq!(ret_to_x0(NOT_SUPPORTED), (-1i32) as i64 as u64);
    }

    #[test]
    fn versions() {
        assert_eq!(VERSION_1_0.raw(), 0x10000);
        assert_eq!(VERSION_1_1.raw(), 0x10001);
        assert_eq!(VERSION_1_2.raw(), 0x10002);
        assert_eq!(VERSION_1_3.raw(), 0x10003);
        assert_eq!(VERSION_1_1.major(), 1);
        assert_eq!(VERSION_1_1.minor(), 1);
        assert!(VERSION_1_2 > VERSION_1_1);
        assert!(Version::from_raw(0x20000) > VERSION_1_3);
    }

    #[test]
    fn preserved_registers() {
        assert_eq!((PRESERVED_FIRST, PRESERVED_LAST), (4, 17));
        assert_eq!(RESULT_REGS, 4);
    }

    #[test]
    fn uuid_packing_round_trips() {
        let bytes: [u8; 16] = core::array::from_fn(|i| i as u8);
        let words = uuid_to_words(bytes);
        assert_eq!(words[0], 0x0302_0100);
        assert_eq!(words[3], 0x0F0E_0D0C);
        assert_eq!(words_to_uuid(words), bytes);
    }

    #[test]
    fn debug_is_hex() {
        extern crate std;
        use std::format;
        assert_eq!(
            format!("{:?}", FunctionId::from_raw(0x84000000)),
            "FunctionId(0x84000000)"
        );
        assert_eq!(
            format!("{:x}", FunctionId::from_raw(0xC5000021)),
            "c5000021"
        );
    }
}
