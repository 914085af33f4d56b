//! Conversions between `f32` and the 16-bit float types (`f16`, `bf16`) on the device: the
//! storage side of mixed precision, so kernels that compute in `f32` can keep their
//! activations and products' operands in 16 bits. The runtime's own kernels do the rounding
//! on the values' bits (integer operations only), so every backend rounds alike — to nearest,
//! ties to even, overflow to ±∞, NaN kept NaN (quietened), as [`half`]'s `from_f32` — and a
//! cast is bitwise the same on host, wgpu and CUDA. Widening is exact.

use crate::buffer::{Buffer, RawView};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::kernel::{ErasedScalar, Grid, KernelArg, Launch};

/// Converts `src` into `dst` (same length): `f32` into `f16` or `bf16` (rounded as the module
/// docs say), or `f16`/`bf16` into `f32` (exact). One launch through `cx` (a device or a step).
/// A 16-bit view must start at an even element (on a 32-bit word); where its length is odd,
/// the other half of its last word is kept.
///
/// # Errors
/// [`Error::Shape`] for other type pairs, different lengths, overlapping views or a 16-bit
/// view that starts inside a word.
pub fn cast<C: Launch + ?Sized, S: Element, D: Element>(
    cx: &C,
    src: &Buffer<S>,
    dst: &mut Buffer<D>,
) -> Result<()> {
    let (s, d) = (src.raw_view(), dst.raw_view());
    let fail = |why: String| {
        Err(Error::Shape(format!(
            "cast of {} {} elements into {} {}: {why}",
            s.len,
            s.dtype.name(),
            d.len,
            d.dtype.name()
        )))
    };
    if s.len != d.len {
        return fail("the lengths differ".into());
    }
    if s.overlaps(&d) {
        return fail("the views overlap".into());
    }
    let half = match (s.dtype, d.dtype) {
        (DType::F32, h @ (DType::F16 | DType::BF16))
        | (h @ (DType::F16 | DType::BF16), DType::F32) => h,
        _ => return fail("casts go between f32 and f16 or bf16".into()),
    };
    let (wide, narrow) = if s.dtype == DType::F32 {
        (&s, &d)
    } else {
        (&d, &s)
    };
    if narrow.offset % 2 != 0 {
        return fail(format!(
            "the {} view starts at element {}, inside a 32-bit word (take an even offset)",
            half.name(),
            narrow.offset
        ));
    }
    if s.len == 0 {
        return Ok(());
    }
    let bits = RawView {
        dtype: DType::U32,
        ..wide.clone()
    };
    let words = narrow.covering_words();
    let flag = KernelArg::Scalar(ErasedScalar::Const(
        DType::Bool,
        (half == DType::BF16) as u32,
    ));
    if s.dtype == DType::F32 {
        let len = u32::try_from(s.len)
            .map_err(|_| Error::Shape(format!("cast of {} elements: at most 2^32 - 1", s.len)))?;
        cx.launch(
            &crate::builtin::cast_f32_to_half::DEF,
            cast_grid(words.len),
            &[
                flag,
                KernelArg::Scalar(ErasedScalar::Const(DType::U32, len)),
                KernelArg::Read(bits),
                KernelArg::Write(words),
            ],
        )
    } else {
        cx.launch(
            &crate::builtin::cast_half_to_f32::DEF,
            cast_grid(bits.len),
            &[flag, KernelArg::Read(words), KernelArg::Write(bits)],
        )
    }
}

/// A cast's grid: one invocation per element up to the most workgroups a 1-D grid may have
/// on every backend (65,535 of 256), past which each invocation loops.
fn cast_grid(n: usize) -> Grid {
    Grid::workgroups(n.div_ceil(256).clamp(1, 65_535) as u32)
}
