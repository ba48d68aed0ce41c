//! The redistributors: one per vCPU, each an RD_base frame (identification,
//! power) and an SGI_base frame (that vCPU's SGIs and PPIs), laid out one
//! after the other from the first (Arm IHI 0069, "The GIC Redistributor
//! register map").

use super::regs::*;
use super::{Access, Bank, BitReg, Decoded, Reg, VGic, VgicError, Width};
use gic_regs::typer_affinity;

impl VGic {
    /// A guest read of `size` bytes at `offset` from the first
    /// redistributor: vCPU `offset / REDISTRIBUTOR_SIZE`'s frame. On `Err`
    /// the value is zero (see [`VgicError`]).
    pub fn redist_read(&self, offset: u64, size: u8) -> Result<u64, VgicError> {
        let access = Access {
            offset,
            size,
            write: false,
        }
        .check(offset)?;
        self.read_register(access, self.decode_redist(offset))
    }

    /// A guest write of the low `size` bytes of `value` at `offset` from
    /// the first redistributor. On `Err` nothing changed (see
    /// [`VgicError`]); either way, then ask [`Self::take_wakeups`].
    pub fn redist_write(&mut self, offset: u64, size: u8, value: u64) -> Result<(), VgicError> {
        let access = Access {
            offset,
            size,
            write: true,
        }
        .check(offset)?;
        self.write_register(access, self.decode_redist(offset), value)
    }

    /// The vCPU whose redistributor holds `offset` (from the first
    /// redistributor), if any.
    pub fn redistributor_vcpu(&self, offset: u64) -> Option<u16> {
        let frame = offset / REDISTRIBUTOR_SIZE;
        (frame < self.mpidrs.len() as u64).then_some(frame as u16)
    }

    /// GICR_TYPER of `vcpu`'s redistributor: its MPIDR affinity as
    /// Aff3.Aff2.Aff1.Aff0 in bits 63:32, its index as Processor_Number,
    /// and Last on the last one, which ends a guest's scan of the region
    /// ("GICR_TYPER, Redistributor Type Register"). PLPIS, VLPIS,
    /// DirectLPI, DPGS, PPInum (so PPIs are INTIDs 16..=31) and the rest
    /// are 0.
    pub(super) fn gicr_typer(&self, vcpu: u16) -> u64 {
        let mpidr = self.mpidr(vcpu).unwrap_or(0);
        let mut typer = GICR_TYPER::Affinity_Value.val(typer_affinity(mpidr).into())
            + GICR_TYPER::Processor_Number.val(vcpu.into());
        if usize::from(vcpu) + 1 == self.mpidrs.len() {
            typer += GICR_TYPER::Last::SET;
        }
        typer.value
    }

    /// What is at `offset` from the first redistributor; `None` for
    /// reserved space, including frames past the last vCPU's. As in the
    /// distributor, registers are found by the 32-bit word holding
    /// `offset`.
    fn decode_redist(&self, offset: u64) -> Option<Decoded> {
        use Width::{ByteOrWord, DoubleOrWord, Word};
        let vcpu = self.redistributor_vcpu(offset)?;
        let frame_base = u64::from(vcpu) * REDISTRIBUTOR_SIZE;
        let in_frame = offset - frame_base;
        let word = in_frame & !3;
        // Decoded registers carry offsets from the first redistributor,
        // like the accesses they serve.
        let at = |reg, width, base: u64| Decoded::new(reg, width, frame_base + base);
        let fixed = |reg| at(reg, Word, word);
        let bank = Bank::Private(vcpu);
        if word < SGI_FRAME_OFFSET {
            // RD_base.
            return Some(match word {
                // No LPIs: EnableLPIs is RES0, and so is everything else
                // writable; RWP and UWP read 0.
                GICR_CTLR | GICR_STATUSR => fixed(Reg::RazWi),
                GICR_IIDR => fixed(Reg::ReadOnly(IIDR.into())),
                GICR_TYPER..GICR_STATUSR => at(
                    Reg::ReadOnly(self.gicr_typer(vcpu)),
                    DoubleOrWord,
                    GICR_TYPER,
                ),
                GICR_WAKER => fixed(Reg::Waker(vcpu)),
                ID_REGISTERS..SGI_FRAME_OFFSET => {
                    let value = ID_VALUES.get(((word - ID_REGISTERS) / 4) as usize)?;
                    fixed(Reg::ReadOnly((*value).into()))
                }
                // The LPI registers (SETLPIR, PROPBASER, PENDBASER, ...),
                // absent without LPIs, and IMPLEMENTATION DEFINED space.
                _ => return None,
            });
        }
        let sgi = word - SGI_FRAME_OFFSET;
        let bits = |kind| fixed(Reg::Bits(kind, bank, 0));
        Some(match sgi {
            GICR_IGROUPR0 => bits(BitReg::Group),
            GICR_ISENABLER0 => bits(BitReg::SetEnable),
            GICR_ICENABLER0 => bits(BitReg::ClearEnable),
            GICR_ISPENDR0 => bits(BitReg::SetPending),
            GICR_ICPENDR0 => bits(BitReg::ClearPending),
            GICR_ISACTIVER0 => bits(BitReg::SetActive),
            GICR_ICACTIVER0 => bits(BitReg::ClearActive),
            GICR_IPRIORITYR..GICR_IPRIORITYR_END => at(
                Reg::Priority(bank, (sgi - GICR_IPRIORITYR) as u32),
                ByteOrWord,
                word,
            ),
            // SGIs' Int_config fields read edge and ignore writes.
            GICR_ICFGR0 => fixed(Reg::Config(bank, 0)),
            GICR_ICFGR1 => fixed(Reg::Config(bank, 16)),
            // RAZ/WI with a single Security state.
            GICR_IGRPMODR0 | GICR_NSACR => fixed(Reg::RazWi),
            // Extended PPI registers (PPInum = 0), INMIR0 (no NMIs), the
            // rest of the frame.
            _ => return None,
        })
    }
}
