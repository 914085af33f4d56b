//! Matrix products routed to a backend's vendor BLAS (cuBLAS on CUDA).
//!
//! A product `C = op(A)·op(B)` recorded through [`Launch::gemm`] (typed:
//! [`product`]) becomes one plan op, issued eagerly or inside the CUDA capture like a kernel
//! launch. Backends without a vendor BLAS (host, wgpu), or a device with it switched off
//! ([`Device::set_vendor_blas`](crate::Device::set_vendor_blas), `GRAPHED_VENDOR_BLAS=0`),
//! answer `false` and the caller launches its portable kernel instead, so every step runs on
//! every backend.
//!
//! # Precisions
//!
//! | `A`, `B` | `C` | [`Math`] | CUDA | host |
//! |---|---|---|---|---|
//! | `f32` | `f32` | [`Math::F32`] (default) | `cublasSgemm`, `CUBLAS_DEFAULT_MATH` | the DSL kernels |
//! | `f32` | `f32` | [`Math::Tf32`] (opt-in) | `cublasGemmEx`, `CUBLAS_COMPUTE_32F_FAST_TF32` | the DSL kernels (full `f32`) |
//! | `bf16` | `bf16` or `f32` | [`Math::F32`] | `cublasGemmEx`, `CUBLAS_COMPUTE_32F` (tensor cores) | [`reference()`] |
//! | `f16` | `f16` or `f32` | [`Math::F32`] | `cublasGemmEx`, `CUBLAS_COMPUTE_32F` (tensor cores) | [`reference()`] |
//!
//! Half-precision products always accumulate in `f32`, and `α`/`β` are `f32`. The host runs
//! them with [`reference()`] (it is the oracle, not a vendor library, so it ignores the vendor
//! switch); wgpu has no route for them yet, and a caller that finds none reports
//! [`Error::Unsupported`].
//!
//! The accumulate flag may be a per-step scalar: the CUDA backend keeps `β` in device memory
//! beside the flag and updates it before each replay, so switching between overwriting and
//! accumulating never recaptures.
//!
//! # Fused epilogues
//!
//! [`Launch::gemm_fused`] ([`product_fused`]) runs a product with a bias, a bias and ReLU, or
//! the bias gradient beside a weight gradient ([`Fused`]) in one library call: cuBLASLt's
//! epilogues on CUDA, where its heuristic has an algorithm for the shape, types and the
//! operands' alignment (asked once per device and kept, so eager calls and recordings run the
//! same kernel); every other backend answers `false` and the caller runs the epilogue as a
//! launch. A fused product never accumulates. A plan orders vendor calls that use the
//! library's shared workspace after one another, and a call whose algorithm needs none only by
//! its operands.

use crate::buffer::{Buffer, RawView};
use crate::dtype::{bf16, f16, DType, Element};
use crate::error::{Error, Result};
use crate::kernel::{Launch, ScalarArg};

/// How a product of `f32` inputs multiplies. The precision is part of what a plan records, so
/// switching it records another plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Math {
    /// Full `f32` products and sums (the default; half-precision inputs always use it).
    #[default]
    F32,
    /// `f32` inputs rounded to TF32 (10-bit mantissa) for the tensor cores, `f32`
    /// accumulation: an explicit opt-in (PyTorch's `allow_tf32 = True`), never the default.
    /// Backends without TF32 hardware compute full `f32`, which the opt-in permits.
    Tf32,
}

/// A product `C = op(A)·op(B)`, plus `C` when `accumulate`, of row-major matrices: `C` is
/// `m × n`; `A` is stored `m × k` (or `k × m` when `ta`), `B` `k × n` (or `n × k` when `tb`).
/// The element types come from the operands (module docs for the combinations).
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
    /// How `f32` inputs multiply ([`Math::F32`] unless opted in to TF32).
    pub math: Math,
}

/// The element types of a product: its inputs', its output's, and how `f32` inputs multiply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemmTypes {
    /// `A` and `B`.
    pub input: DType,
    /// `C`.
    pub output: DType,
    /// How `f32` inputs multiply.
    pub math: Math,
}

impl GemmTypes {
    /// Plain `f32` products (`f32` in, `f32` out, no TF32).
    pub const F32: GemmTypes = GemmTypes {
        input: DType::F32,
        output: DType::F32,
        math: Math::F32,
    };

    /// Why these types make no product, or `None`.
    fn invalid(&self) -> Option<String> {
        let (i, o) = (self.input.name(), self.output.name());
        match (self.input, self.output) {
            (DType::F32, DType::F32) => None,
            (DType::F16 | DType::BF16, _) if self.math == Math::Tf32 => Some(format!(
                "TF32 applies to f32 inputs; {i} inputs already run on the tensor cores (use Math::F32)"
            )),
            (DType::F16, DType::F16 | DType::F32) | (DType::BF16, DType::BF16 | DType::F32) => {
                None
            }
            (DType::F32 | DType::F16 | DType::BF16, _) => Some(format!(
                "{i} inputs give {i} or f32 products (f32 inputs: f32), not {o}"
            )),
            _ => Some(format!(
                "inputs hold {i}; a product takes f32, f16 or bf16"
            )),
        }
    }
}

/// What a vendor product does to its result inside the same library call ([`Launch::gemm_fused`]):
/// cuBLASLt's epilogues on CUDA. The vector is `f32` (a bias into a 16-bit `C` may be of `C`'s
/// type, added at its value). A fused product never accumulates
/// into `C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fused {
    /// `C[i][j] = Σ + bias[j]` (`bias`: `n` elements).
    Bias,
    /// `C[i][j] = max(Σ + bias[j], 0)` (`bias`: `n` elements).
    BiasRelu,
    /// `C = op(A)·op(B)`, and the row sums of `op(A)` written to the vector (`m` elements):
    /// with `A = dY` stored `batch × out` and `op(A) = dYᵀ`, a layer's bias gradient beside
    /// its weight gradient.
    BiasGrad,
}

impl Fused {
    /// How many elements the vector holds for a product `g`.
    pub fn vector_len(self, g: &Sgemm) -> usize {
        match self {
            Fused::Bias | Fused::BiasRelu => g.n,
            Fused::BiasGrad => g.m,
        }
    }

    /// Whether the product writes the vector (else reads it).
    pub fn writes_vector(self) -> bool {
        self == Fused::BiasGrad
    }

    /// A short name (plan dumps).
    pub fn name(self) -> &'static str {
        match self {
            Fused::Bias => "bias",
            Fused::BiasRelu => "bias+relu",
            Fused::BiasGrad => "bias-grad",
        }
    }
}

/// The shape and types of an [`Sgemm`], as a plan keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub ta: bool,
    pub tb: bool,
    pub types: GemmTypes,
    /// The epilogue fused into the library call, if any.
    pub fused: Option<Fused>,
    /// The element type of the fused epilogue's vector (`f32`, or a 16-bit `C`'s type for a
    /// bias); `f32` without one.
    pub vector: DType,
    /// The library runs the fastest of its candidate algorithms, timed on first use
    /// ([`crate::Device::vendor_tune`]), not its heuristic's first.
    pub tuned: bool,
    /// The library runs the first of its heuristic's candidates that computes in one pass
    /// (no split-K reduce launch) where it offers one ([`crate::Device::vendor_one_pass`]).
    pub one_pass: bool,
}

impl Sgemm {
    /// A product of `m × k` by `k × n` (neither stored transposed), overwriting `C`, full `f32`.
    pub fn new(m: usize, n: usize, k: usize) -> Sgemm {
        Sgemm {
            m,
            n,
            k,
            ta: false,
            tb: false,
            accumulate: false.into(),
            math: Math::F32,
        }
    }

    pub(crate) fn shape(&self, a: &RawView, c: &RawView) -> GemmShape {
        GemmShape {
            m: self.m,
            n: self.n,
            k: self.k,
            ta: self.ta,
            tb: self.tb,
            types: GemmTypes {
                input: a.dtype,
                output: c.dtype,
                math: self.math,
            },
            fused: None,
            vector: DType::F32,
            tuned: false,
            one_pass: false,
        }
    }

    /// Checks a fused product's vector and flag ([`Launch::gemm_fused`]): `f32`, the length
    /// [`Fused::vector_len`] gives, on `device`, overlapping no operand, and a constant
    /// `false` accumulate flag.
    pub(crate) fn check_fused(
        &self,
        device: u64,
        fused: Fused,
        v: &RawView,
        operands: [&RawView; 3],
    ) -> Result<()> {
        let fail = |reason: String| Error::Launch {
            kernel: "sgemm",
            reason,
        };
        if !matches!(self.accumulate.erase(), crate::ErasedScalar::Const(_, 0)) {
            return Err(fail(format!(
                "a product with a fused {} never accumulates: pass `accumulate: false.into()`",
                fused.name()
            )));
        }
        let want = fused.vector_len(self);
        // A bias may also be of a 16-bit `C`'s own type (cuBLASLt's default bias type).
        let c = operands[2].dtype;
        let typed =
            v.dtype == DType::F32 || (v.dtype == c && c.is_half() && !fused.writes_vector());
        if !typed || v.len != want {
            let of = if c.is_half() && !fused.writes_vector() {
                format!("f32 (or {}) elements", c.name())
            } else {
                "f32 elements".into()
            };
            return Err(fail(format!(
                "the fused {} vector holds {} {} elements; it takes {want} {of}",
                fused.name(),
                v.len,
                v.dtype.name()
            )));
        }
        if v.buf.device.id() != device {
            return Err(fail(format!(
                "the fused {} vector lives on another device",
                fused.name()
            )));
        }
        if operands.iter().any(|o| o.overlaps(v)) {
            return Err(fail(format!(
                "the fused {} vector overlaps an operand; pass views that do not overlap",
                fused.name()
            )));
        }
        Ok(())
    }

    /// Checks the operands: element types that make a product (module docs), `A` and `B` of
    /// one type, lengths matching the shape, sizes a BLAS accepts (`i32`), one device, and `C`
    /// overlapping neither `A` nor `B`.
    pub(crate) fn check(&self, device: u64, a: &RawView, b: &RawView, c: &RawView) -> Result<()> {
        let fail = |reason: String| Error::Launch {
            kernel: "sgemm",
            reason,
        };
        if a.dtype != b.dtype {
            return Err(fail(format!(
                "`a` holds {} and `b` {}: both inputs take one type",
                a.dtype.name(),
                b.dtype.name()
            )));
        }
        if let Some(why) = self.shape(a, c).types.invalid() {
            return Err(fail(why));
        }
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

/// The alignment in bytes (a power of two up to 16) every view of `views` starts at, given
/// allocations and arena placements at 16 bytes or more.
pub(crate) fn alignment(views: &[&RawView]) -> usize {
    views
        .iter()
        .map(|v| {
            let bytes = v.offset * v.dtype.size();
            if bytes == 0 {
                16
            } else {
                (1usize << bytes.trailing_zeros()).min(16)
            }
        })
        .min()
        .unwrap_or(16)
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

/// Runs the product `g` through `cx`'s vendor BLAS (or, on the host, [`reference()`] for
/// half-precision inputs) and returns `true`; returns `false` and runs nothing where there is
/// no route for these types ([`Launch::gemm`]).
pub fn product<C: Launch + ?Sized, I: Element, O: Element>(
    cx: &C,
    g: &Sgemm,
    a: &Buffer<I>,
    b: &Buffer<I>,
    c: &mut Buffer<O>,
) -> Result<bool> {
    cx.gemm(g, &a.raw_view(), &b.raw_view(), &c.raw_view())
}

/// Runs the product `g` with `fused` (its vector `v`: `f32`, or for a bias into a 16-bit `C`
/// also `C`'s type) through `cx`'s vendor BLAS in one library call and returns `true`; returns `false` and runs nothing where there is no such
/// route ([`Launch::gemm_fused`]).
pub fn product_fused<C: Launch + ?Sized, I: Element, O: Element, V: Element>(
    cx: &C,
    g: &Sgemm,
    a: &Buffer<I>,
    b: &Buffer<I>,
    c: &mut Buffer<O>,
    fused: Fused,
    v: &Buffer<V>,
) -> Result<bool> {
    cx.gemm_fused(
        g,
        &a.raw_view(),
        &b.raw_view(),
        &c.raw_view(),
        fused,
        &v.raw_view(),
    )
}

/// The value of element bits of `dtype` (`f32`, `f16` or `bf16`; one element in each `u32`).
fn value(dtype: DType, bits: u32) -> f32 {
    match dtype {
        DType::F16 => f16::from_bits(bits as u16).to_f32(),
        DType::BF16 => bf16::from_bits(bits as u16).to_f32(),
        _ => f32::from_bits(bits),
    }
}

/// `v` rounded to `dtype` (to nearest, ties to even; overflow to ±∞, NaN stays NaN), as bits.
fn round_to(dtype: DType, v: f32) -> u32 {
    match dtype {
        DType::F16 => u32::from(f16::from_f32(v).to_bits()),
        DType::BF16 => u32::from(bf16::from_f32(v).to_bits()),
        _ => v.to_bits(),
    }
}

/// The reference product every backend is checked against, on element bits (one element in
/// each `u32`, as [`Buffer::to_host`] of the types gives them): for each element of `C`, the
/// `k` products `a·b` are summed in `f32` in order of `k` (no fused multiply-add; a product
/// of two `f16` or two `bf16` values is exact in `f32`), `C`'s old value (as `f32`) is added
/// when `accumulate`, and the sum is rounded once to `C`'s type, to nearest with ties to even.
/// `f32` inputs with [`Math::Tf32`] compute full `f32`. The host backend runs half-precision
/// products with it.
///
/// # Errors
/// [`Error::Launch`] when the types make no product or a length does not match the shape.
pub fn reference(
    shape: (usize, usize, usize, bool, bool),
    types: GemmTypes,
    accumulate: bool,
    a: &[u32],
    b: &[u32],
    c: &mut [u32],
) -> Result<()> {
    let (m, n, k, ta, tb) = shape;
    let fail = |reason: String| Error::Launch {
        kernel: "sgemm",
        reason,
    };
    if let Some(why) = types.invalid() {
        return Err(fail(why));
    }
    if a.len() != m * k || b.len() != k * n || c.len() != m * n {
        return Err(fail(format!(
            "operands of {}, {} and {} elements for a {m}×{n}×{k} product",
            a.len(),
            b.len(),
            c.len()
        )));
    }
    let av: Vec<f32> = a.iter().map(|&x| value(types.input, x)).collect();
    let bv: Vec<f32> = b.iter().map(|&x| value(types.input, x)).collect();
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f32;
            for p in 0..k {
                let x = av[if ta { p * m + i } else { i * k + p }];
                let y = bv[if tb { j * k + p } else { p * n + j }];
                acc += x * y;
            }
            let cell = &mut c[i * n + j];
            if accumulate {
                acc += value(types.output, *cell);
            }
            *cell = round_to(types.output, acc);
        }
    }
    Ok(())
}
