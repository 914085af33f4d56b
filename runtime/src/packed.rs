//! Views of 16-bit elements (`f16`, `bf16`), two to each 32-bit word: transfers, fills and
//! copies. The backends move whole words only (wgpu copies and writes in multiples of 4 bytes
//! at 4-byte offsets); a view that starts or ends inside a word whose other half belongs to a
//! neighbour has that word merged by a runtime kernel instead, queued in order with every
//! other launch, so a neighbour's half is never read and written back by the host.

use crate::backend::Backend;
use crate::buffer::RawView;
use crate::device::{bind, fill_args, Device};
use crate::dtype::{pack, unpack, DType};
use crate::error::{Error, Result};
use crate::kernel::{ErasedScalar, Grid, KernelArg, KernelDef};

/// How a caller launches the runtime's kernels: eagerly on a device, or into a step.
pub(crate) type LaunchFn<'a> = dyn FnMut(&'static KernelDef, Grid, &[KernelArg]) -> Result<()> + 'a;

fn u32_arg(v: u32) -> KernelArg {
    KernelArg::Scalar(ErasedScalar::Const(DType::U32, v))
}

fn u32_count(what: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| {
        Error::Shape(format!(
            "{what} of {n} 16-bit elements: at most 2^32 - 1 elements per transfer"
        ))
    })
}

/// A launch of a runtime kernel on `device` itself, bypassing the step-slot rule: the
/// caller has checked the views (a holder's own upload into its slots goes through here).
pub(crate) fn launch_on(
    device: &Device,
    kernel: &'static KernelDef,
    grid: Grid,
    args: &[KernelArg],
) -> Result<()> {
    let b = bind(device, kernel, grid, args, None)?;
    device.backend().launch(kernel, b.grid, &b.args, &b.views)
}

/// The element bits of `view` (one element's in each `u32`, low half for 16-bit types).
pub(crate) fn read(backend: &dyn Backend, view: &RawView) -> Result<Vec<u32>> {
    if !view.dtype.is_half() {
        return backend.read(view);
    }
    let words = backend.read(&view.covering_words())?;
    Ok(unpack(view.dtype, &words, view.first_in_word(), view.len))
}

/// Writes element bits (`bits.len() == view.len`) into `view`.
pub(crate) fn write(device: &Device, view: &RawView, bits: &[u32]) -> Result<()> {
    if view.len == 0 {
        return Ok(());
    }
    if let Some(words) = view.as_words() {
        return device.backend().write(&words, &pack(view.dtype, bits));
    }
    let (mut inner, mut data) = (view.clone(), bits);
    if inner.offset % 2 == 1 {
        merge_half(device, &inner, inner.offset, data[0])?;
        inner.offset += 1;
        inner.len -= 1;
        data = &data[1..];
    }
    if inner.len > 0 && inner.as_words().is_none() {
        let last = inner.len - 1;
        merge_half(device, &inner, inner.offset + last, data[last])?;
        inner.len -= 1;
        data = &data[..last];
    }
    match inner.as_words() {
        Some(words) if inner.len > 0 => device.backend().write(&words, &pack(view.dtype, data)),
        _ => Ok(()),
    }
}

/// Sets element `elem` of `view`'s allocation (a 16-bit element) to `bits`, keeping the other
/// half of its word.
fn merge_half(device: &Device, view: &RawView, elem: usize, bits: u32) -> Result<()> {
    let word = RawView {
        buf: view.buf.clone(),
        offset: elem / 2,
        len: 1,
        dtype: DType::U32,
    };
    let mask = 0xffffu32 << (16 * (elem % 2));
    let pattern = (bits & 0xffff) * 0x1_0001;
    launch_on(
        device,
        &crate::builtin::fill_halves::DEF,
        Grid::threads(1),
        &[
            u32_arg(pattern),
            u32_arg(mask),
            u32_arg(mask),
            KernelArg::Write(word),
        ],
    )
}

/// Sets every element of `view` to the element bits `bits`.
pub(crate) fn fill(view: &RawView, bits: u32, launch: &mut LaunchFn<'_>) -> Result<()> {
    if !view.dtype.is_half() {
        return launch(
            &crate::builtin::fill_u32::DEF,
            Grid::threads(view.len),
            &fill_args(view, bits),
        );
    }
    let words = view.covering_words();
    let end = view.offset + view.len;
    let head = if view.offset % 2 == 1 {
        0xffff_0000
    } else {
        !0
    };
    let tail = if end % 2 == 1 && end as u64 * 2 != view.buf.data_bytes {
        0x0000_ffff
    } else {
        !0
    };
    launch(
        &crate::builtin::fill_halves::DEF,
        Grid::threads(words.len),
        &[
            u32_arg((bits & 0xffff) * 0x1_0001),
            u32_arg(head),
            u32_arg(tail),
            KernelArg::Write(words),
        ],
    )
}

/// Copies `src` into `dst` (checked: same length and dtype, one device, not overlapping):
/// whole words through `direct` (the backend's copy, or a recorded copy), otherwise through
/// the runtime's copy kernels.
pub(crate) fn copy(
    src: &RawView,
    dst: &RawView,
    direct: &mut dyn FnMut(&RawView, &RawView) -> Result<()>,
    launch: &mut LaunchFn<'_>,
) -> Result<()> {
    if let (Some(s), Some(d)) = (src.as_words(), dst.as_words()) {
        if s.len == d.len {
            return direct(&s, &d);
        }
    }
    let len = u32_count("a copy", src.len)?;
    let (s, d) = (src.covering_words(), dst.covering_words());
    if !s.overlaps(&d) {
        return launch(
            &crate::builtin::copy_halves::DEF,
            Grid::threads(d.len),
            &[
                u32_arg(src.first_in_word() as u32),
                u32_arg(dst.first_in_word() as u32),
                u32_arg(len),
                KernelArg::Read(s),
                KernelArg::Write(d),
            ],
        );
    }
    // Views of one allocation that share a word: one invocation, element by element.
    let first = s.offset.min(d.offset);
    let end = (s.offset + s.len).max(d.offset + d.len);
    let both = RawView {
        buf: dst.buf.clone(),
        offset: first,
        len: end - first,
        dtype: DType::U32,
    };
    launch(
        &crate::builtin::copy_halves_within::DEF,
        Grid::workgroups(1),
        &[
            u32_arg(u32_count("a copy", src.offset - 2 * first)?),
            u32_arg(u32_count("a copy", dst.offset - 2 * first)?),
            u32_arg(len),
            KernelArg::Write(both),
        ],
    )
}
