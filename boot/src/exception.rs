//! The exception-vector scaffolding both images share: how the 16 vectors
//! are numbered ([`Vector`]), the register frame a vector saves
//! ([`Frame`]), and the assembly that saves it before calling Rust and
//! restores it to return ([`save_frame!`](crate::save_frame),
//! [`restore_frame!`](crate::restore_frame)).
//!
//! A vector table (Arm ARM D1.3.1, "Exception vectors") is 16 entries of
//! 0x80 bytes, `origin * 4 + kind`, at a 2 KiB aligned VBAR_ELx. What each
//! entry does before the frame is saved is the image's own (el2 hands
//! lower-EL vectors to its guest-exit path; the guests reset SP to their
//! exception stack's top first); the common path is the same at EL1 and
//! EL2 except for the names of the exception registers, which the macros
//! take as a parameter:
//!
//! ```ignore
//! global_asm!(
//!     r#"
//! .macro VECTOR kind
//!     .balign 0x80
//!     sub     sp, sp, #{frame_size}
//!     stp     x0, x1, [sp, #0]
//!     mov     x0, #\kind
//!     b       .Lexception_common
//! .endm
//!     // ... the table ...
//! .Lexception_common:"#,
//!     boot::save_frame!(el2),
//!     "    mov     x1, sp",
//!     "    bl      {handler}",       // extern "C" fn(vector: u64, frame: &mut Frame)
//!     boot::restore_frame!(el2),
//!     frame_size = const boot::exception::FRAME_SIZE,
//!     handler = sym handle_exception,
//! );
//! ```

use core::fmt;

/// Register state at an exception, as [`save_frame!`](crate::save_frame)
/// stores it (offsets are fixed: the assembly uses them).
#[repr(C)]
#[derive(Clone, Debug, Default)]
pub struct Frame {
    /// x0-x30.
    pub x: [u64; 31],
    /// SP_EL0: the interrupted thread's stack pointer.
    pub sp_el0: u64,
    /// ELR_ELx: where the exception returns to.
    pub elr: u64,
    /// SPSR_ELx: the interrupted PSTATE.
    pub spsr: u64,
    /// ESR_ELx: the syndrome.
    pub esr: u64,
    /// FAR_ELx: the fault address, for aborts.
    pub far: u64,
}

/// Bytes of a [`Frame`]: what a vector reserves below SP.
pub const FRAME_SIZE: usize = core::mem::size_of::<Frame>();

const _: () = {
    assert!(
        FRAME_SIZE == 288 && FRAME_SIZE.is_multiple_of(16),
        "the assembly's offsets; SP stays 16-byte aligned"
    );
    assert!(core::mem::offset_of!(Frame, x) == 0);
    assert!(core::mem::offset_of!(Frame, sp_el0) == 248);
    assert!(core::mem::offset_of!(Frame, elr) == 256);
    assert!(core::mem::offset_of!(Frame, spsr) == 264);
    assert!(core::mem::offset_of!(Frame, esr) == 272);
    assert!(core::mem::offset_of!(Frame, far) == 280);
};

/// Which of the 16 vectors an exception came through: `origin * 4 + kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vector(pub u64);

/// Where a vector's exceptions come from (its group of four).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The current exception level on SP_EL0: the image's ordinary code.
    CurrentSp0,
    /// The current exception level on SP_ELx: an exception handler.
    CurrentSpx,
    /// A lower exception level in AArch64.
    LowerAarch64,
    /// A lower exception level in AArch32.
    LowerAarch32,
}

/// What kind of exception a vector takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Synchronous,
    Irq,
    Fiq,
    SError,
}

impl Vector {
    /// A synchronous exception from the image's own code (current EL on
    /// SP_EL0), e.g. an abort or an undefined instruction.
    pub const SYNCHRONOUS_CURRENT_SP0: Vector = Vector::new(Origin::CurrentSp0, Kind::Synchronous);

    pub const fn new(origin: Origin, kind: Kind) -> Self {
        Self(origin as u64 * 4 + kind as u64)
    }

    pub const fn origin(self) -> Origin {
        match self.0 / 4 {
            0 => Origin::CurrentSp0,
            1 => Origin::CurrentSpx,
            2 => Origin::LowerAarch64,
            _ => Origin::LowerAarch32,
        }
    }

    pub const fn kind(self) -> Kind {
        match self.0 % 4 {
            0 => Kind::Synchronous,
            1 => Kind::Irq,
            2 => Kind::Fiq,
            _ => Kind::SError,
        }
    }

    /// Whether it was taken from the current exception level.
    pub const fn is_current_el(self) -> bool {
        matches!(self.origin(), Origin::CurrentSp0 | Origin::CurrentSpx)
    }

    /// Whether ESR_ELx describes the exception (synchronous exceptions and
    /// SErrors; IRQs and FIQs have no syndrome).
    pub const fn has_syndrome(self) -> bool {
        matches!(self.kind(), Kind::Synchronous | Kind::SError)
    }
}

impl Kind {
    /// "synchronous", "IRQ", "FIQ", "SError".
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Synchronous => "synchronous",
            Kind::Irq => "IRQ",
            Kind::Fiq => "FIQ",
            Kind::SError => "SError",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Assembly text (a template string for `global_asm!`) that completes a
/// [`Frame`] at SP: the vector entry has reserved [`FRAME_SIZE`] bytes
/// and stored x0 and x1 at offset 0; this stores x2-x30, SP_EL0 and
/// ELR/SPSR/ESR/FAR of the named exception level (`el1` or `el2`).
/// Clobbers x2 and x3; x0 and x1 keep their values.
#[macro_export]
macro_rules! save_frame {
    (el1) => {
        $crate::__save_frame!("el1")
    };
    (el2) => {
        $crate::__save_frame!("el2")
    };
}

/// Assembly text (a template string for `global_asm!`) that returns from
/// an exception through the [`Frame`] at SP, as the handler may have
/// changed it: ELR/SPSR of the named exception level (`el1` or `el2`),
/// SP_EL0, x0-x30, then SP back above the frame and ERET.
#[macro_export]
macro_rules! restore_frame {
    (el1) => {
        $crate::__restore_frame!("el1")
    };
    (el2) => {
        $crate::__restore_frame!("el2")
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __save_frame {
    ($el:literal) => {
        concat!(
            "    stp     x2, x3, [sp, #16]\n",
            "    stp     x4, x5, [sp, #32]\n",
            "    stp     x6, x7, [sp, #48]\n",
            "    stp     x8, x9, [sp, #64]\n",
            "    stp     x10, x11, [sp, #80]\n",
            "    stp     x12, x13, [sp, #96]\n",
            "    stp     x14, x15, [sp, #112]\n",
            "    stp     x16, x17, [sp, #128]\n",
            "    stp     x18, x19, [sp, #144]\n",
            "    stp     x20, x21, [sp, #160]\n",
            "    stp     x22, x23, [sp, #176]\n",
            "    stp     x24, x25, [sp, #192]\n",
            "    stp     x26, x27, [sp, #208]\n",
            "    stp     x28, x29, [sp, #224]\n",
            "    mrs     x2, sp_el0\n",
            "    stp     x30, x2, [sp, #240]\n",
            "    mrs     x2, elr_",
            $el,
            "\n",
            "    mrs     x3, spsr_",
            $el,
            "\n",
            "    stp     x2, x3, [sp, #256]\n",
            "    mrs     x2, esr_",
            $el,
            "\n",
            "    mrs     x3, far_",
            $el,
            "\n",
            "    stp     x2, x3, [sp, #272]",
        )
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __restore_frame {
    ($el:literal) => {
        concat!(
            "    ldp     x2, x3, [sp, #256]\n",
            "    msr     elr_",
            $el,
            ", x2\n",
            "    msr     spsr_",
            $el,
            ", x3\n",
            "    ldp     x30, x2, [sp, #240]\n",
            "    msr     sp_el0, x2\n",
            "    ldp     x28, x29, [sp, #224]\n",
            "    ldp     x26, x27, [sp, #208]\n",
            "    ldp     x24, x25, [sp, #192]\n",
            "    ldp     x22, x23, [sp, #176]\n",
            "    ldp     x20, x21, [sp, #160]\n",
            "    ldp     x18, x19, [sp, #144]\n",
            "    ldp     x16, x17, [sp, #128]\n",
            "    ldp     x14, x15, [sp, #112]\n",
            "    ldp     x12, x13, [sp, #96]\n",
            "    ldp     x10, x11, [sp, #80]\n",
            "    ldp     x8, x9, [sp, #64]\n",
            "    ldp     x6, x7, [sp, #48]\n",
            "    ldp     x4, x5, [sp, #32]\n",
            "    ldp     x2, x3, [sp, #16]\n",
            "    ldp     x0, x1, [sp, #0]\n",
            "    add     sp, sp, #288\n",
            "    eret",
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_are_origin_times_four_plus_kind() {
        let origins = [
            Origin::CurrentSp0,
            Origin::CurrentSpx,
            Origin::LowerAarch64,
            Origin::LowerAarch32,
        ];
        let kinds = [Kind::Synchronous, Kind::Irq, Kind::Fiq, Kind::SError];
        for (o, &origin) in origins.iter().enumerate() {
            for (k, &kind) in kinds.iter().enumerate() {
                let vector = Vector::new(origin, kind);
                assert_eq!(vector, Vector((o * 4 + k) as u64));
                assert_eq!((vector.origin(), vector.kind()), (origin, kind));
                assert_eq!(vector.is_current_el(), o < 2);
                assert_eq!(vector.has_syndrome(), k == 0 || k == 3);
            }
        }
        assert_eq!(Vector::SYNCHRONOUS_CURRENT_SP0, Vector(0));
        assert_eq!(Vector(5).kind().to_string(), "IRQ");
    }

    #[test]
    fn the_frame_text_names_the_level_and_returns() {
        let save = save_frame!(el2);
        assert!(save.contains("mrs     x2, elr_el2") && save.contains("far_el2"));
        assert!(!save.contains("el1"));
        let restore = restore_frame!(el1);
        assert!(restore.contains("msr     spsr_el1, x3"));
        assert!(restore.ends_with("eret"));
        assert!(restore.contains(&format!("add     sp, sp, #{FRAME_SIZE}")));
    }
}
