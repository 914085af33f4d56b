//! Matrix products routed to a backend's vendor BLAS (cuBLAS on CUDA).
//!
//! A product `C = op(A)·op(B)` recorded through [`Launch::sgemm`](crate::Launch::sgemm) becomes
//! one plan op, issued eagerly or inside the CUDA capture like a kernel launch. Backends
//! without a vendor BLAS (host, wgpu), or a device with it switched off
//! ([`Device::set_vendor_blas`](crate::Device::set_vendor_blas), `GRAPHED_VENDOR_BLAS=0`),
//! answer `false` and the caller launches its portable kernel instead, so every step runs on
//! every backend.
//!
//! The accumulate flag may be a per-step scalar: the CUDA backend keeps `β` in device memory
//! beside the flag and updates it before each replay, so switching between overwriting and
//! accumulating never recaptures.

use crate::buffer::RawView;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel::ScalarArg;

/// A single-precision product `C = op(A)·op(B)`, plus `C` when `accumulate`, of row-major
/// matrices: `C` is `m × n`; `A` is stored `m × k` (or `k × m` when `ta`), `B` `k × n` (or
/// `n × k` when `tb`).
#[derive(Debug, Clone, Copy)]
pub struct Sgemm {
    /// Rows of `C`.
    pub m: usize,
    /// Columns of `C`.
    pub n: usize,
    /// The inner dimension.
    pub k: usize,
    /// `A` is stored transposed.
    pub ta: bool,
    /// `B` is stored transposed.
    pub tb: bool,
    /// Adds into `C` instead of overwriting it (a constant or a per-step scalar).
    pub accumulate: ScalarArg<bool>,
}

/// The shape part of an [`Sgemm`], as a plan keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ta: bool,
    pub tb: bool,
}

impl Sgemm {
    pub(crate) fn shape(&self) -> GemmShape {
        GemmShape {
            m: self.m,
            n: self.n,
            k: self.k,
            ta: self.ta,
            tb: self.tb,
        }
    }

    /// Checks the operands: `f32`, lengths matching the shape, sizes a BLAS accepts (`i32`),
    /// one device, and `C` overlapping neither `A` nor `B`.
    pub(crate) fn check(&self, device: u64, a: &RawView, b: &RawView, c: &RawView) -> Result<()> {
        let fail = |reason: String| Error::Launch {
            kernel: "sgemm",
            reason,
        };
        let dims = [("m", self.m), ("n", self.n), ("k", self.k)];
        for (what, v) in dims {
            if v == 0 || v > i32::MAX as usize {
                return Err(fail(format!(
                    "{what} = {v}: a vendor BLAS takes 1 ..= {} rows or columns",
                    i32::MAX
                )));
            }
        }
        for (name, v, want) in [
            ("a", a, self.m.checked_mul(self.k)),
            ("b", b, self.k.checked_mul(self.n)),
            ("c", c, self.m.checked_mul(self.n)),
        ] {
            if v.dtype != DType::F32 {
                return Err(fail(format!("`{name}` holds {}, not f32", v.dtype.name())));
            }
            if Some(v.len) != want {
                return Err(fail(format!(
                    "`{name}` has {} elements, the {}×{}×{} product needs {}",
                    v.len,
                    self.m,
                    self.n,
                    self.k,
                    want.map_or_else(|| "more than usize".into(), |w| w.to_string())
                )));
            }
            if v.buf.device.id() != device {
                return Err(fail(format!("`{name}` lives on another device")));
            }
        }
        if c.overlaps(a) || c.overlaps(b) {
            return Err(fail(
                "`c` overlaps `a` or `b`; pass views that do not overlap".into(),
            ));
        }
        Ok(())
    }
}

/// `β` for an accumulate flag's bits as the plan stores them (0 or 1).
#[cfg(feature = "cuda")]
pub(crate) fn beta_bits(flag: u32) -> u32 {
    if flag != 0 {
        1.0f32.to_bits()
    } else {
        0.0f32.to_bits()
    }
}
