//! `#[device]` helpers for kernels of any crate: activations and their derivatives, in the
//! kernel language — the one copy of each that the library's own kernels (elementwise,
//! `bias_act`, the matrix-product epilogues) call, in the forms of
//! [`Act`](crate::elementwise::Act)'s table. Call them from a `#[kernel]` by path (`graphed::kernels::helpers::gelu(x)`)
//! or import them (`use graphed::kernels::helpers::gelu;`); each is also a plain Rust
//! function, so it can be checked on the CPU.
//!
//! ```ignore
//! use graphed::prelude::*;
//! use graphed::kernels::helpers::gelu;
//!
//! #[kernel(workgroup = 256)]
//! pub fn gelu_all(x: &[f32], y: &mut [f32]) {
//!     let i = global_id().x;
//!     if i < y.len() {
//!         y[i] = gelu(x[i]);
//!     }
//! }
//! ```

use graphed_macros::device;

/// √(2/π), the scale of GELU's tanh form (written once, for [`gelu`] and [`gelu_grad`]).
#[device]
pub fn gelu_scale() -> f32 {
    0.797_884_6
}

/// GELU, tanh form: `½x(1 + tanh u) = x·σ(2u)`, `u = √(2/π)(x + 0.044715x³)` (as
/// `ops::gelu`), computed as `x / (1 + e^(−2u))`, which needs no `tanh` and no clamp.
#[device]
pub fn gelu(x: f32) -> f32 {
    let u = gelu_scale() * (x + 0.044715 * x * x * x);
    x / (1.0 + exp(-2.0 * u))
}

/// The derivative of [`gelu`] at `x`: `σ(2u) + 2x·σ′(2u)·√(2/π)(1 + 3·0.044715x²)`, with
/// `σ′` written from `e^(−2|u|)` (no overflow) and `x` clamped to ±100 (where the derivative
/// is 0 or 1 in `f32`).
#[device]
pub fn gelu_grad(x: f32) -> f32 {
    let z = clamp(x, -100.0, 100.0);
    let u = gelu_scale() * (z + 0.044715 * z * z * z);
    let s = 1.0 / (1.0 + exp(-2.0 * u));
    let e = exp(-2.0 * abs(u));
    let sd = e / ((1.0 + e) * (1.0 + e));
    s + 2.0 * z * sd * gelu_scale() * (1.0 + 0.134145 * z * z)
}

/// The logistic function `1 / (1 + e^-x)`.
#[device]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// Activation `kind` at `x`, numbered as `elementwise::Act::code`: 0 identity, 1 ReLU, 2 GELU
/// (tanh form), 3 tanh, 4 sigmoid, 5 `exp`, 6 `log`; any other `kind` is the identity. The
/// forms of every kernel of the library (`Act` has the table); `tanh`'s argument is clamped
/// to ±15, where it is ±1 in `f32`, since some GPU `tanh`s return NaN for large arguments.
#[device]
pub fn activate(kind: u32, x: f32) -> f32 {
    // Statement `if`s, not an `if` value: WGSL writes an `if` value as nested `select`s, which
    // evaluate every arm (GELU, tanh, sigmoid, `exp` and `log` for every element, whatever
    // `kind` is); branches on the uniform `kind` run one.
    let mut y = x;
    if kind == 1 {
        y = max(x, 0.0);
    } else if kind == 2 {
        y = gelu(x);
    } else if kind == 3 {
        y = tanh(clamp(x, -15.0, 15.0));
    } else if kind == 4 {
        y = sigmoid(x);
    } else if kind == 5 {
        y = exp(x);
    } else if kind == 6 {
        y = log(x);
    }
    y
}

/// `g·f′(x)` for activation `kind` (codes as in [`activate`]): the backward of `activate`
/// for an incoming gradient `g`, in the forms the library's backward kernels and matrix-product
/// gates use (ReLU selects `g` or 0; `log` divides `g` by `x`).
#[device]
pub fn activate_backward(kind: u32, x: f32, g: f32) -> f32 {
    // Statement `if`s, as in `activate`.
    let mut y = g;
    if kind == 1 {
        y = select(x > 0.0, g, 0.0);
    } else if kind == 2 {
        y = g * gelu_grad(x);
    } else if kind == 3 {
        // 1 − tanh²x = 4 / (eˣ + e⁻ˣ)², no cancellation; 1 in f32 past ±30 anyway.
        let e = exp(clamp(x, -30.0, 30.0));
        let ch = e + 1.0 / e;
        y = g * (4.0 / (ch * ch));
    } else if kind == 4 {
        // σ(x)(1 − σ(x)) = e^-|x| / (1 + e^-|x|)², no cancellation.
        let e = exp(-abs(x));
        y = g * (e / ((1.0 + e) * (1.0 + e)));
    } else if kind == 5 {
        y = g * exp(x);
    } else if kind == 6 {
        y = g / x;
    }
    y
}

/// The derivative of [`activate`] with respect to `x`.
#[device]
pub fn activate_grad(kind: u32, x: f32) -> f32 {
    activate_backward(kind, x, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elementwise::Act;

    #[test]
    fn rust_forms_match_the_formulas() {
        for &x in &[-3.0f32, -0.5, 0.0, 0.25, 2.0] {
            let u = gelu_scale() * (x + 0.044715 * x * x * x);
            assert!(
                (gelu(x) - 0.5 * x * (1.0 + u.tanh())).abs() < 1e-6,
                "gelu({x})"
            );
            let h = 1e-3f32;
            let fd = (gelu(x + h) - gelu(x - h)) / (2.0 * h);
            assert!(
                (gelu_grad(x) - fd).abs() < 1e-2,
                "gelu_grad({x}) = {} vs {fd}",
                gelu_grad(x)
            );
            assert_eq!(activate(0, x), x);
            assert_eq!(activate(1, x), x.max(0.0));
            assert_eq!(activate(2, x), gelu(x));
            assert_eq!(activate(4, x), sigmoid(x));
            assert_eq!(activate_grad(2, x), gelu_grad(x));
        }
    }

    #[test]
    fn every_code_matches_the_f64_reference() {
        for act in Act::ALL {
            for &x in &[-20.0f32, -3.0, -0.5, 0.01, 0.25, 2.0, 20.0] {
                let x = if act == Act::Log { x.abs() } else { x };
                let (xf, code) = (x as f64, act.code());
                let close =
                    |got: f32, want: f64| (got as f64 - want).abs() <= 1e-5 * want.abs().max(1.0);
                let y = activate(code, x);
                assert!(close(y, act.eval_f64(xf)), "{act:?}({x}) = {y}");
                let d = activate_grad(code, x);
                assert!(close(d, act.derivative_f64(xf)), "{act:?}′({x}) = {d}");
                let b = activate_backward(code, x, -0.75);
                let want = -0.75 * act.derivative_f64(xf);
                assert!(close(b, want), "{act:?} backward at {x} = {b}");
            }
        }
    }
}
