//! `#[device]` helpers for kernels of any crate: activations and their derivatives, in the
//! kernel language. Call them from a `#[kernel]` by path (`graphed::kernels::helpers::gelu(x)`)
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

/// GELU, tanh form: `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))` (as `ops::gelu`).
#[device]
pub fn gelu(x: f32) -> f32 {
    let u = 0.797_884_6 * (x + 0.044715 * x * x * x);
    0.5 * x * (1.0 + tanh(u))
}

/// The derivative of [`gelu`] at `x`.
#[device]
pub fn gelu_grad(x: f32) -> f32 {
    let u = 0.797_884_6 * (x + 0.044715 * x * x * x);
    let t = tanh(u);
    let du = 0.797_884_6 * (1.0 + 3.0 * 0.044715 * x * x);
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du
}

/// The logistic function `1 / (1 + e^-x)`.
#[device]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// Activation `kind` at `x`: 0 identity, 1 ReLU, 2 GELU (tanh form), 3 tanh, 4 sigmoid;
/// any other `kind` is the identity. For kernels that take the activation as a parameter.
#[device]
pub fn activate(kind: u32, x: f32) -> f32 {
    if kind == 1 {
        max(x, 0.0)
    } else if kind == 2 {
        gelu(x)
    } else if kind == 3 {
        tanh(x)
    } else if kind == 4 {
        sigmoid(x)
    } else {
        x
    }
}

/// The derivative of [`activate`] with respect to `x`.
#[device]
pub fn activate_grad(kind: u32, x: f32) -> f32 {
    if kind == 1 {
        select(x > 0.0, 1.0, 0.0)
    } else if kind == 2 {
        gelu_grad(x)
    } else if kind == 3 {
        let t = tanh(x);
        1.0 - t * t
    } else if kind == 4 {
        let s = sigmoid(x);
        s * (1.0 - s)
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// √(2/π), the tanh form's scale.
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;

    #[test]
    fn rust_forms_match_the_formulas() {
        for &x in &[-3.0f32, -0.5, 0.0, 0.25, 2.0] {
            let u = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
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
}
