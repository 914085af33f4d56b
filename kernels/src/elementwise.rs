//! Elementwise kernels and their ops: fills, `a·x + b·y`, products, scaling, activations
//! forward and backward, and the fused bias + activation of a layer.
//!
//! Every kernel here is a grid-stride loop over workgroups of 256, so one launch covers any
//! length. Activations are selected by a `u32` code ([`Act::code`]), a uniform branch.

use graphed_macros::kernel;
use graphed_runtime::{bf16, f16, Buffer, DType, Element, Grid, IntoScalarArg, Launch, Result};

use crate::helpers::{activate, activate_backward};
use crate::shape::{expect_len, groups, u32_of};

/// An elementwise function: an activation, or `exp`/`log`.
///
/// Forward and derivative, in terms of the function's input `z`, as the kernels compute them
/// (forms chosen to avoid cancellation where the value is small; one copy of each, in
/// [`crate::helpers::activate`] and [`crate::helpers::activate_backward`]):
///
/// | variant | f(z) | f′(z) |
/// |---|---|---|
/// | `Identity` | z | 1 |
/// | `Relu` | max(z, 0) | 1 if z > 0 else 0 |
/// | `Gelu` (tanh form) | ½z(1 + tanh u) = z·σ(2u), u = √(2/π)(z + 0.044715z³) | σ(2u) + 2z·σ′(2u)·√(2/π)(1 + 3·0.044715z²) |
/// | `Tanh` | tanh z | 1 − tanh²z = 4 / (eᶻ + e⁻ᶻ)² |
/// | `Sigmoid` | σ(z) = 1 / (1 + e⁻ᶻ) | σ(z)(1 − σ(z)) = e⁻ᶻ / (1 + e⁻ᶻ)² (with \|z\|) |
/// | `Exp` | eᶻ | eᶻ |
/// | `Log` | ln z | 1 / z |
///
/// `tanh` arguments are clamped to ±15 (where `tanh` is ±1 in `f32`), since some GPU `tanh`
/// implementations return NaN for large arguments; derivatives clamp where the result no
/// longer changes in `f32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Act {
    /// No activation.
    #[default]
    Identity,
    /// `max(z, 0)`.
    Relu,
    /// GELU, tanh approximation (PyTorch's `approximate="tanh"`).
    Gelu,
    /// Hyperbolic tangent.
    Tanh,
    /// Logistic sigmoid.
    Sigmoid,
    /// Natural exponential.
    Exp,
    /// Natural logarithm.
    Log,
}

impl Act {
    /// Every variant, in code order.
    pub const ALL: [Act; 7] = [
        Act::Identity,
        Act::Relu,
        Act::Gelu,
        Act::Tanh,
        Act::Sigmoid,
        Act::Exp,
        Act::Log,
    ];

    /// The code kernels branch on.
    pub fn code(self) -> u32 {
        match self {
            Act::Identity => 0,
            Act::Relu => 1,
            Act::Gelu => 2,
            Act::Tanh => 3,
            Act::Sigmoid => 4,
            Act::Exp => 5,
            Act::Log => 6,
        }
    }

    /// `f(z)` in `f64`: the reference the tests compare against.
    pub fn eval_f64(self, z: f64) -> f64 {
        match self {
            Act::Identity => z,
            Act::Relu => z.max(0.0),
            Act::Gelu => z * sigmoid_f64(2.0 * gelu_inner(z)),
            Act::Tanh => z.tanh(),
            Act::Sigmoid => 1.0 / (1.0 + (-z).exp()),
            Act::Exp => z.exp(),
            Act::Log => z.ln(),
        }
    }

    /// `f′(z)` in `f64`.
    pub fn derivative_f64(self, z: f64) -> f64 {
        match self {
            Act::Identity => 1.0,
            Act::Relu => {
                if z > 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            Act::Gelu => {
                let u = gelu_inner(z);
                let s = sigmoid_f64(2.0 * u);
                let k = (2.0 / std::f64::consts::PI).sqrt();
                s + 2.0 * z * s * (1.0 - s) * k * (1.0 + 3.0 * 0.044715 * z * z)
            }
            Act::Tanh => 1.0 - z.tanh().powi(2),
            Act::Sigmoid => {
                let s = 1.0 / (1.0 + (-z).exp());
                s * (1.0 - s)
            }
            Act::Exp => z.exp(),
            Act::Log => 1.0 / z,
        }
    }
}

fn sigmoid_f64(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

fn gelu_inner(z: f64) -> f64 {
    (2.0 / std::f64::consts::PI).sqrt() * (z + 0.044715 * z * z * z)
}

/// Elementwise kernels as grid-stride loops: `$name` runs `$body` for every `$i` below
/// `$len.len()`, `$len` one of its slices.
macro_rules! grid_stride_kernels {
    ($(
        $(#[$doc:meta])*
        pub fn $name:ident($($params:tt)*) over $len:ident |$i:ident| { $($body:tt)* }
    )*) => {$(
        $(#[$doc])*
        #[kernel(workgroup = 256)]
        pub fn $name($($params)*) {
            let n = $len.len();
            let stride = global_size().x;
            let mut $i = global_id().x;
            while $i < n {
                $($body)*
                $i += stride;
            }
        }
    )*};
}

grid_stride_kernels! {
    /// Sets every element of `y` to `value`.
    pub fn fill_f32(value: f32, y: &mut [f32]) over y |i| {
        y[i] = value;
    }

    /// `y = f(x)` for the activation `act` ([`Act::code`]).
    pub fn ew_unary(act: u32, x: &[f32], y: &mut [f32]) over y |i| {
        y[i] = activate(act, x[i]);
    }

    /// `dx = dy · f′(x)` for the activation `act`, from the forward input `x`.
    pub fn ew_unary_backward(act: u32, x: &[f32], dy: &[f32], dx: &mut [f32]) over dx |i| {
        dx[i] = activate_backward(act, x[i], dy[i]);
    }

    /// `z = a·x + b·y` (`op == 0`) or `z = a·x·y` (`op == 1`).
    pub fn ew_binary(op: u32, a: f32, b: f32, x: &[f32], y: &[f32], z: &mut [f32]) over z |i| {
        if op == 0 {
            z[i] = a * x[i] + b * y[i];
        } else {
            z[i] = a * x[i] * y[i];
        }
    }

    /// `y = a·x`.
    pub fn ew_scale(a: f32, x: &[f32], y: &mut [f32]) over y |i| {
        y[i] = a * x[i];
    }

    /// `y = a·y`, in place.
    pub fn ew_scale_in_place(a: f32, y: &mut [f32]) over y |i| {
        y[i] = a * y[i];
    }

    /// `y = a·x + y`.
    pub fn ew_axpy(a: f32, x: &[f32], y: &mut [f32]) over y |i| {
        y[i] = a * x[i] + y[i];
    }

    /// `dx = dz`, `dy = dz` (the backward of `z = x + y`).
    pub fn ew_copy2(dz: &[f32], dx: &mut [f32], dy: &mut [f32]) over dz |i| {
        let g = dz[i];
        dx[i] = g;
        dy[i] = g;
    }

    /// `dx = dz·y`, `dy = dz·x` (the backward of `z = x·y`).
    pub fn ew_mul_backward(x: &[f32], y: &[f32], dz: &[f32], dx: &mut [f32], dy: &mut [f32])
    over dz |i| {
        let g = dz[i];
        dx[i] = g * y[i];
        dy[i] = g * x[i];
    }

    /// `y[r, c] = f(x[r, c] + b[c])` over a row-major `rows × cols` matrix.
    pub fn bias_act(act: u32, cols: u32, x: &[f32], b: &[f32], y: &mut [f32]) over y |i| {
        y[i] = activate(act, x[i] + b[i % cols]);
    }
}

/// Backward of [`bias_act`](mod@bias_act): `dx = dy · f′(x + b)` and `db[c] = Σ_r dx[r, c]` (added to `db`
/// when `accumulate`). One invocation per column sums its rows in increasing order.
#[kernel(workgroup = 256)]
pub fn bias_act_backward(
    act: u32,
    rows: u32,
    accumulate: bool,
    x: &[f32],
    b: &[f32],
    dy: &[f32],
    dx: &mut [f32],
    db: &mut [f32],
) {
    let cols = db.len();
    let stride = global_size().x;
    let mut c = global_id().x;
    while c < cols {
        let bias = b[c];
        let mut sum = 0.0;
        for r in 0..rows {
            let i = r * cols + c;
            let d = activate_backward(act, x[i] + bias, dy[i]);
            dx[i] = d;
            sum += d;
        }
        if accumulate {
            db[c] = db[c] + sum;
        } else {
            db[c] = sum;
        }
        c += stride;
    }
}

fn same_len(op: &str, names: &[(&str, usize)]) -> Result<usize> {
    let n = names[0].1;
    for &(name, len) in &names[1..] {
        expect_len(op, name, len, n)?;
    }
    u32_of("length", n)?;
    Ok(n)
}

/// Sets every element of `y` to `value` (one launch).
pub fn fill<C: Launch + ?Sized>(
    cx: &C,
    y: &mut Buffer<f32>,
    value: impl IntoScalarArg<f32>,
) -> Result<()> {
    fill_f32::launch(cx, Grid::workgroups(groups(y.len())), value, y)
}

/// `z = x + y`.
pub fn add<C: Launch + ?Sized>(
    cx: &C,
    x: &Buffer<f32>,
    y: &Buffer<f32>,
    z: &mut Buffer<f32>,
) -> Result<()> {
    axpby(cx, 1.0, x, 1.0, y, z)
}

/// `z = a·x + b·y`.
pub fn axpby<C: Launch + ?Sized>(
    cx: &C,
    a: impl IntoScalarArg<f32>,
    x: &Buffer<f32>,
    b: impl IntoScalarArg<f32>,
    y: &Buffer<f32>,
    z: &mut Buffer<f32>,
) -> Result<()> {
    let n = same_len("axpby", &[("z", z.len()), ("x", x.len()), ("y", y.len())])?;
    ew_binary::launch(cx, Grid::workgroups(groups(n)), 0u32, a, b, x, y, z)
}

/// `z = x·y` (elementwise).
pub fn mul<C: Launch + ?Sized>(
    cx: &C,
    x: &Buffer<f32>,
    y: &Buffer<f32>,
    z: &mut Buffer<f32>,
) -> Result<()> {
    let n = same_len("mul", &[("z", z.len()), ("x", x.len()), ("y", y.len())])?;
    ew_binary::launch(
        cx,
        Grid::workgroups(groups(n)),
        1u32,
        1.0f32,
        0.0f32,
        x,
        y,
        z,
    )
}

/// Launchers `$name($cx, $a, $x, $y)` of the ops of a scalar `$a`, a slice `$x` and a
/// slice `$y` written, running `$body`.
macro_rules! scalar_ops {
    ($($(#[$doc:meta])* $name:ident($cx:ident, $a:ident, $x:ident, $y:ident) $body:block)*) => {$(
        $(#[$doc])*
        pub fn $name<C: Launch + ?Sized>(
            $cx: &C,
            $a: impl IntoScalarArg<f32>,
            $x: &Buffer<f32>,
            $y: &mut Buffer<f32>,
        ) -> Result<()> $body
    )*};
}

scalar_ops! {
    /// `y = a·x`.
    scale(cx, a, x, y) {
        let n = same_len("scale", &[("y", y.len()), ("x", x.len())])?;
        ew_scale::launch(cx, Grid::workgroups(groups(n)), a, x, y)
    }

    /// `y = a·x + y`.
    axpy(cx, a, x, y) {
        let n = same_len("axpy", &[("y", y.len()), ("x", x.len())])?;
        ew_axpy::launch(cx, Grid::workgroups(groups(n)), a, x, y)
    }

    /// Backward of `y = a·x`: `dx = a·dy`.
    scale_backward(cx, a, dy, dx) {
        scale(cx, a, dy, dx)
    }

    /// Backward of `y ← a·x + y` with respect to `x`: `dx = a·dy` (the gradient of `y` passes
    /// through unchanged).
    axpy_backward(cx, a, dy, dx) {
        scale(cx, a, dy, dx)
    }
}

/// `y = a·y`, in place.
pub fn scale_in_place<C: Launch + ?Sized>(
    cx: &C,
    a: impl IntoScalarArg<f32>,
    y: &mut Buffer<f32>,
) -> Result<()> {
    u32_of("length", y.len())?;
    ew_scale_in_place::launch(cx, Grid::workgroups(groups(y.len())), a, y)
}

/// Backward of `z = x + y`: `dx = dz`, `dy = dz` (one launch).
pub fn add_backward<C: Launch + ?Sized>(
    cx: &C,
    dz: &Buffer<f32>,
    dx: &mut Buffer<f32>,
    dy: &mut Buffer<f32>,
) -> Result<()> {
    let n = same_len(
        "add_backward",
        &[("dz", dz.len()), ("dx", dx.len()), ("dy", dy.len())],
    )?;
    ew_copy2::launch(cx, Grid::workgroups(groups(n)), dz, dx, dy)
}

/// Backward of `z = x·y`: `dx = dz·y`, `dy = dz·x` (one launch).
pub fn mul_backward<C: Launch + ?Sized>(
    cx: &C,
    x: &Buffer<f32>,
    y: &Buffer<f32>,
    dz: &Buffer<f32>,
    dx: &mut Buffer<f32>,
    dy: &mut Buffer<f32>,
) -> Result<()> {
    let n = same_len(
        "mul_backward",
        &[
            ("dz", dz.len()),
            ("x", x.len()),
            ("y", y.len()),
            ("dx", dx.len()),
            ("dy", dy.len()),
        ],
    )?;
    ew_mul_backward::launch(cx, Grid::workgroups(groups(n)), x, y, dz, dx, dy)
}

/// `y = f(x)` for the activation `act`.
pub fn unary<C: Launch + ?Sized>(
    cx: &C,
    act: Act,
    x: &Buffer<f32>,
    y: &mut Buffer<f32>,
) -> Result<()> {
    let n = same_len("unary", &[("y", y.len()), ("x", x.len())])?;
    ew_unary::launch(cx, Grid::workgroups(groups(n)), act.code(), x, y)
}

/// `dx = dy · f′(x)`, where `x` is the forward input.
pub fn unary_backward<C: Launch + ?Sized>(
    cx: &C,
    act: Act,
    x: &Buffer<f32>,
    dy: &Buffer<f32>,
    dx: &mut Buffer<f32>,
) -> Result<()> {
    let n = same_len(
        "unary_backward",
        &[("dx", dx.len()), ("x", x.len()), ("dy", dy.len())],
    )?;
    ew_unary_backward::launch(cx, Grid::workgroups(groups(n)), act.code(), x, dy, dx)
}

macro_rules! act_ops {
    ($($fwd:ident, $bwd:ident, $act:expr, $name:literal;)*) => {$(
        #[doc = concat!("`y = ", $name, "(x)`.")]
        pub fn $fwd<C: Launch + ?Sized>(cx: &C, x: &Buffer<f32>, y: &mut Buffer<f32>) -> Result<()> {
            unary(cx, $act, x, y)
        }
        #[doc = concat!("`dx = dy · ", $name, "′(x)`, where `x` is the forward input.")]
        pub fn $bwd<C: Launch + ?Sized>(cx: &C, x: &Buffer<f32>, dy: &Buffer<f32>, dx: &mut Buffer<f32>) -> Result<()> {
            unary_backward(cx, $act, x, dy, dx)
        }
    )*};
}

act_ops! {
    relu, relu_backward, Act::Relu, "relu";
    gelu, gelu_backward, Act::Gelu, "gelu";
    tanh, tanh_backward, Act::Tanh, "tanh";
    sigmoid, sigmoid_backward, Act::Sigmoid, "sigmoid";
    exp, exp_backward, Act::Exp, "exp";
    log, log_backward, Act::Log, "log";
}

/// `y[r, c] = f(x[r, c] + bias[c])` over row-major `rows × bias.len()` matrices.
pub fn bias_act<C: Launch + ?Sized>(
    cx: &C,
    act: Act,
    x: &Buffer<f32>,
    bias: &Buffer<f32>,
    y: &mut Buffer<f32>,
) -> Result<()> {
    let n = same_len("bias_act", &[("y", y.len()), ("x", x.len())])?;
    let cols = bias.len();
    if cols == 0 || n % cols != 0 {
        return Err(graphed_runtime::Error::Shape(format!(
            "bias_act: {n} elements are not whole rows of {cols}"
        )));
    }
    bias_act::launch(
        cx,
        Grid::workgroups(groups(n)),
        act.code(),
        u32_of("cols", cols)?,
        x,
        bias,
        y,
    )
}

/// Backward of [`bias_act()`]: `dx = dy · f′(x + bias)` and `db = Σ_rows dx` (added into `db`
/// when `accumulate`, for gradient accumulation). One launch.
pub fn bias_act_backward<C: Launch + ?Sized>(
    cx: &C,
    act: Act,
    x: &Buffer<f32>,
    bias: &Buffer<f32>,
    dy: &Buffer<f32>,
    dx: &mut Buffer<f32>,
    db: &mut Buffer<f32>,
    accumulate: impl IntoScalarArg<bool>,
) -> Result<()> {
    let n = same_len(
        "bias_act_backward",
        &[("dx", dx.len()), ("x", x.len()), ("dy", dy.len())],
    )?;
    let cols = bias.len();
    expect_len("bias_act_backward", "db", db.len(), cols)?;
    if cols == 0 || n % cols != 0 {
        return Err(graphed_runtime::Error::Shape(format!(
            "bias_act_backward: {n} elements are not whole rows of {cols}"
        )));
    }
    let rows = n / cols;
    bias_act_backward::launch(
        cx,
        Grid::workgroups(groups(cols)),
        act.code(),
        u32_of("rows", rows)?,
        accumulate,
        x,
        bias,
        dy,
        dx,
        db,
    )
}

/// The ReLU gate of a 16-bit gradient in place, once per 16-bit type.
macro_rules! relu_gate_kernel {
    ($($t:ident: $(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[kernel(workgroup = 256)]
        pub fn $name(y: &[$t], dy: &mut [$t]) {
            // Four elements a pass, `total` apart, every load before any store. (Eight ran
            // MLP-L's 16.8M-element gates slower on the H200: 50 µs against 40.)
            let n = dy.len();
            let total = global_size().x;
            let mut base = global_id().x;
            while base < n {
                let mut ys = [0.0f32; 4];
                let mut gs = [0.0f32; 4];
                for j in 0..4u32 {
                    if j * total < n - base {
                        ys[j] = y[base + j * total] as f32;
                        gs[j] = dy[base + j * total] as f32;
                    }
                }
                for j in 0..4u32 {
                    if j * total < n - base {
                        dy[base + j * total] = select(ys[j] > 0.0, gs[j], 0.0) as $t;
                    }
                }
                base += 4u32 * total;
            }
        }
    )*};
}

relu_gate_kernel! {
    bf16:
    /// `dy[i] = dy[i]` where `y[i] > 0`, else 0, over `bf16` slices: ReLU's backward read
    /// from its output `y`. A grid-stride loop.
    relu_gate_bf16;
    f16:
    /// [`relu_gate_bf16`](mod@relu_gate_bf16) over `f16` slices.
    relu_gate_f16;
}

/// `dy ← dy · ReLU′` in place, read from ReLU's 16-bit output `y` (`y > 0` where the
/// pre-activation was, but for positive ones that round to zero): the backward of a 16-bit
/// layer's ReLU whose pre-activation was never stored (the gate PyTorch's autocast runs).
/// `H` is `bf16` or `f16`; a NaN of `dy` passes where `y > 0` (quietened) and is zeroed
/// where not, as [`crate::helpers::activate_backward`].
///
/// # Errors
/// [`Error::Shape`](graphed_runtime::Error::Shape) when `y` and `dy` differ in length or
/// pass a `u32`; [`Error::Launch`](graphed_runtime::Error::Launch) for another type.
pub fn relu_gate<C: Launch + ?Sized, H: Element>(
    cx: &C,
    y: &Buffer<H>,
    dy: &mut Buffer<H>,
) -> Result<()> {
    let op = "relu_gate";
    expect_len(op, "dy", dy.len(), y.len())?;
    let n = u32_of("relu_gate elements", y.len())?;
    let g = Grid::workgroups(groups((n as usize).div_ceil(4)));
    match H::DTYPE {
        DType::BF16 => {
            let y = Buffer::<bf16>::try_from_view(y.raw_view())?;
            let mut d = Buffer::<bf16>::try_from_view(dy.raw_view())?;
            relu_gate_bf16::launch(cx, g, &y, &mut d)
        }
        DType::F16 => {
            let y = Buffer::<f16>::try_from_view(y.raw_view())?;
            let mut d = Buffer::<f16>::try_from_view(dy.raw_view())?;
            relu_gate_f16::launch(cx, g, &y, &mut d)
        }
        other => Err(graphed_runtime::Error::Launch {
            kernel: op,
            reason: format!("a gate of `{}`; it takes `bf16` or `f16`", other.name()),
        }),
    }
}

/// Two casts in one launch, once per 16-bit type: `a16 = a` and `b16 = b` rounded.
macro_rules! cast_two_kernel {
    ($t:ident, $(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[kernel(workgroup = 256)]
        pub fn $name(a: &[f32], b: &[f32], a16: &mut [$t], b16: &mut [$t]) {
            // Four elements a pass, `total` apart, every load before any store (the
            // in-place epilogues' pattern, `crate::matmul::EPILOGUE_ELEMENTS`).
            let na = a.len();
            let n = na + b.len();
            let total = global_size().x;
            let mut base = global_id().x;
            while base < n {
                let mut vs = [0.0f32; 4];
                for j in 0..4u32 {
                    if j * total < n - base {
                        let i = base + j * total;
                        if i < na {
                            vs[j] = a[i];
                        } else {
                            vs[j] = b[i - na];
                        }
                    }
                }
                for j in 0..4u32 {
                    if j * total < n - base {
                        let i = base + j * total;
                        if i < na {
                            a16[i] = vs[j] as $t;
                        } else {
                            b16[i - na] = vs[j] as $t;
                        }
                    }
                }
                base += 4u32 * total;
            }
        }
    };
}

cast_two_kernel!(
    bf16,
    /// `a16[i] = a[i]` and `b16[j] = b[j]` rounded to `bf16` (to nearest even, NaN quietened,
    /// as `graphed_runtime::cast::cast`): a grid-stride loop over both, `a` first.
    cast_two_bf16
);
cast_two_kernel!(
    f16,
    /// [`cast_two_bf16`](mod@cast_two_bf16) rounding to `f16` (overflow to ±∞).
    cast_two_f16
);

/// `a16 ← a` and `b16 ← b` rounded to `H` (`bf16` or `f16`) in one launch: bitwise the same
/// as two calls of `graphed_runtime::cast::cast` (e.g. a mixed-precision step's weights and
/// its input), but that on wgpu an `f16` NaN is the driver's (WGSL stores `f16` slices as
/// `f16`, which keeps no NaN payload). Any element offsets; `a16` and `b16` must not overlap.
///
/// # Errors
/// [`Error::Shape`](graphed_runtime::Error::Shape) when a copy's length differs from its
/// source's or the two lengths together pass a `u32`;
/// [`Error::Launch`](graphed_runtime::Error::Launch) for a type other than `bf16` and `f16`.
pub fn cast_two<C: Launch + ?Sized, H: Element>(
    cx: &C,
    a: &Buffer<f32>,
    a16: &mut Buffer<H>,
    b: &Buffer<f32>,
    b16: &mut Buffer<H>,
) -> Result<()> {
    let op = "cast_two";
    expect_len(op, "a16", a16.len(), a.len())?;
    expect_len(op, "b16", b16.len(), b.len())?;
    let n = a.len().saturating_add(b.len());
    u32_of("cast_two elements", n)?;
    let g = Grid::workgroups(groups(n.div_ceil(4)));
    match H::DTYPE {
        DType::BF16 => {
            let mut x = Buffer::<bf16>::try_from_view(a16.raw_view())?;
            let mut y = Buffer::<bf16>::try_from_view(b16.raw_view())?;
            cast_two_bf16::launch(cx, g, a, b, &mut x, &mut y)
        }
        DType::F16 => {
            let mut x = Buffer::<f16>::try_from_view(a16.raw_view())?;
            let mut y = Buffer::<f16>::try_from_view(b16.raw_view())?;
            cast_two_f16::launch(cx, g, a, b, &mut x, &mut y)
        }
        other => Err(graphed_runtime::Error::Launch {
            kernel: op,
            reason: format!(
                "16-bit copies of `{}`; it takes `bf16` or `f16`",
                other.name()
            ),
        }),
    }
}
