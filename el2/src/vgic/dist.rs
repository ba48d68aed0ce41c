//! The distributor frame: SPI state and routing, and the VM-wide controls
//! (Arm IHI 0069, "The GIC Distributor register map").

use super::regs::*;
use super::{Access, Bank, BitReg, Decoded, PRIVATE_COUNT, Reg, VGic, VgicError, Width};

/// Highest INTID with a `GICD_IROUTER<n>`.
const LAST_ROUTED_INTID: u64 = 1019;

impl VGic {
    /// A guest read of `size` bytes at `offset` in the distributor frame.
    /// On `Err` the value is zero (see [`VgicError`]).
    pub fn dist_read(&self, offset: u64, size: u8) -> Result<u64, VgicError> {
        let access = Access {
            offset,
            size,
            write: false,
        }
        .check(offset)?;
        self.read_register(access, self.decode_dist(offset))
    }

    /// A guest write of the low `size` bytes of `value` at `offset` in the
    /// distributor frame. On `Err` nothing changed (see [`VgicError`]);
    /// either way, then ask [`Self::take_wakeups`].
    pub fn dist_write(&mut self, offset: u64, size: u8, value: u64) -> Result<(), VgicError> {
        let access = Access {
            offset,
            size,
            write: true,
        }
        .check(offset)?;
        self.write_register(access, self.decode_dist(offset), value)
    }

    pub(super) fn gicd_typer(&self) -> u32 {
        // INTIDs up to 32 * (ITLinesNumber + 1) - 1 (988 SPIs: 31, whose
        // last four INTIDs 1020..=1023 are the special ones).
        let itlines = self.spis.div_ceil(32) & GICD_TYPER_ITLINES_MASK;
        // 16 INTID bits, A3V; SecurityExtn (DS = 1), MBIS, LPIS, No1N
        // (1-of-N is supported), RSS, ESPI and CPUNumber (ARE) are 0.
        itlines | 15 << GICD_TYPER_IDBITS_SHIFT | GICD_TYPER_A3V
    }

    /// What is at `offset`; `None` for reserved space. Registers are found
    /// by the 32-bit word holding `offset`, so that a narrower access to a
    /// 32-bit register is refused as a size, not mistaken for a reserved
    /// offset.
    fn decode_dist(&self, offset: u64) -> Option<Decoded> {
        use Width::{ByteOrWord, DoubleOrWord, Word};
        let word = offset & !3;
        // A one-bit-per-interrupt register in the block starting at `block`.
        let bits = |kind, block: u64| {
            let first = ((word - block) / 4 * 32) as u32;
            Decoded::new(Reg::Bits(kind, Bank::Spi, first), Word, word)
        };
        let fixed = |reg| Decoded::new(reg, Word, word);
        Some(match word {
            GICD_CTLR => fixed(Reg::GicdCtlr),
            GICD_TYPER => fixed(Reg::ReadOnly(self.gicd_typer().into())),
            GICD_IIDR => fixed(Reg::ReadOnly(IIDR.into())),
            GICD_TYPER2 => fixed(Reg::ReadOnly(0)),
            GICD_STATUSR => fixed(Reg::RazWi),
            // The registers of INTIDs 0..=31 (register 0 of each family)
            // are RAZ/WI with affinity routing: Bank::Spi has no slots there.
            0x0080..=0x00ff => bits(BitReg::Group, GICD_IGROUPR),
            0x0100..=0x017f => bits(BitReg::SetEnable, GICD_ISENABLER),
            0x0180..=0x01ff => bits(BitReg::ClearEnable, GICD_ICENABLER),
            0x0200..=0x027f => bits(BitReg::SetPending, GICD_ISPENDR),
            0x0280..=0x02ff => bits(BitReg::ClearPending, GICD_ICPENDR),
            0x0300..=0x037f => bits(BitReg::SetActive, GICD_ISACTIVER),
            0x0380..=0x03ff => bits(BitReg::ClearActive, GICD_ICACTIVER),
            0x0400..=0x07ff => Decoded::new(
                Reg::Priority(Bank::Spi, (word - GICD_IPRIORITYR) as u32),
                ByteOrWord,
                word,
            ),
            // ITARGETSR, CPENDSGIR and SPENDSGIR: RAZ/WI with affinity
            // routing, byte-accessible.
            0x0800..=0x0bff | 0x0f10..=0x0f2f => Decoded::new(Reg::RazWi, ByteOrWord, word),
            0x0c00..=0x0cff => fixed(Reg::Config(
                Bank::Spi,
                ((word - GICD_ICFGR) / 4 * 16) as u32,
            )),
            // IGRPMODR and NSACR: RAZ/WI with a single Security state.
            0x0d00..=0x0d7f | 0x0e00..=0x0eff => fixed(Reg::RazWi),
            GICD_IROUTER_BASE..=0x7fff => {
                let intid = (word - GICD_IROUTER_BASE) / 8;
                if !(u64::from(PRIVATE_COUNT)..=LAST_ROUTED_INTID).contains(&intid) {
                    return None;
                }
                let base = GICD_IROUTER_BASE + intid * 8;
                Decoded::new(Reg::Router(intid as u32), DoubleOrWord, base)
            }
            ID_REGISTERS..=0xffff => {
                let value = ID_VALUES.get(((word - ID_REGISTERS) / 4) as usize)?;
                fixed(Reg::ReadOnly((*value).into()))
            }
            // GICD_SGIR (no GICv2 SGIs with affinity routing), the
            // message-based SPI registers (MBIS = 0), extended SPI and NMI
            // ranges, IMPLEMENTATION DEFINED space: reserved.
            _ => return None,
        })
    }
}
