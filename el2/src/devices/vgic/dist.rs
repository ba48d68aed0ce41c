//! The distributor frame: SPI state and routing, and the VM-wide controls
//! (Arm IHI 0069, "The GIC Distributor register map").

use super::regs::*;
use super::{Access, Bank, BitReg, Decoded, PRIVATE_COUNT, Reg, VGic, VgicError, Width};
use gic_regs::SPI_COUNT;

/// Highest INTID with a `GICD_IROUTER<n>`: the last SPI.
const LAST_ROUTED_INTID: u64 = (PRIVATE_COUNT + SPI_COUNT - 1) as u64;
/// INTID bits the model implements (GICD_TYPER.IDbits + 1).
const INTID_BITS: u32 = 16;

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
        let itlines = self.spis.div_ceil(32);
        // 16 INTID bits, A3V; SecurityExtn (DS = 1), MBIS, LPIS, No1N
        // (1-of-N is supported), RSS, ESPI and CPUNumber (ARE) are 0.
        (GICD_TYPER::ITLinesNumber.val(itlines)
            + GICD_TYPER::IDbits.val(INTID_BITS - 1)
            + GICD_TYPER::A3V::SET)
            .value
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
            GICD_IGROUPR..GICD_ISENABLER => bits(BitReg::Group, GICD_IGROUPR),
            GICD_ISENABLER..GICD_ICENABLER => bits(BitReg::SetEnable, GICD_ISENABLER),
            GICD_ICENABLER..GICD_ISPENDR => bits(BitReg::ClearEnable, GICD_ICENABLER),
            GICD_ISPENDR..GICD_ICPENDR => bits(BitReg::SetPending, GICD_ISPENDR),
            GICD_ICPENDR..GICD_ISACTIVER => bits(BitReg::ClearPending, GICD_ICPENDR),
            GICD_ISACTIVER..GICD_ICACTIVER => bits(BitReg::SetActive, GICD_ISACTIVER),
            GICD_ICACTIVER..GICD_IPRIORITYR => bits(BitReg::ClearActive, GICD_ICACTIVER),
            GICD_IPRIORITYR..GICD_ITARGETSR => Decoded::new(
                Reg::Priority(Bank::Spi, (word - GICD_IPRIORITYR) as u32),
                ByteOrWord,
                word,
            ),
            // ITARGETSR, CPENDSGIR and SPENDSGIR: RAZ/WI with affinity
            // routing, byte-accessible.
            GICD_ITARGETSR..GICD_ICFGR | GICD_CPENDSGIR..GICD_SPENDSGIR_END => {
                Decoded::new(Reg::RazWi, ByteOrWord, word)
            }
            GICD_ICFGR..GICD_IGRPMODR => fixed(Reg::Config(
                Bank::Spi,
                ((word - GICD_ICFGR) / 4 * 16) as u32,
            )),
            // IGRPMODR and NSACR: RAZ/WI with a single Security state.
            GICD_IGRPMODR..GICD_IGRPMODR_END | GICD_NSACR..GICD_SGIR => fixed(Reg::RazWi),
            GICD_IROUTER_BASE..ID_REGISTERS => {
                let intid = (word - GICD_IROUTER_BASE) / 8;
                if !(u64::from(PRIVATE_COUNT)..=LAST_ROUTED_INTID).contains(&intid) {
                    return None;
                }
                let base = GICD_IROUTER_BASE + intid * 8;
                Decoded::new(Reg::Router(intid as u32), DoubleOrWord, base)
            }
            ID_REGISTERS..DISTRIBUTOR_SIZE => {
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
