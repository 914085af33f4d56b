use graphed::prelude::*;

/// `a · b`.
#[device]
fn dot4(a: [f32; 4], b: [f32; 4]) -> f32 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3]
}

/// `v` times `s`.
#[device]
fn times(v: [f32; 4], s: f32) -> [f32; 4] {
    let mut r = [0.0f32; 4];
    for k in 0u32..4u32 {
        r[k] = s * v[k];
    }
    r
}

/// Returns an array of the wrong length.
#[device]
fn short(v: [f32; 4]) -> [f32; 3] {
    v
}

/// Writes a parameter that is not `mut`.
#[device]
fn set(v: [f32; 2]) -> f32 {
    v[0] = 1.0;
    v[1]
}

/// An array of no elements.
#[device]
fn sized(v: [f32; 0]) -> f32 {
    1.0
}

/// Calls with a wrong length, a wrong element type, a scalar for an array, and an array
/// result inside an expression.
#[kernel(workgroup = 64)]
pub fn calls(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        let three = [x[i], 1.0, 2.0];
        let ints = [1u32, 2, 3, 4];
        let four = [x[i]; 4];
        let a = dot4(three, four);
        let b = dot4(four, ints);
        let c = dot4(x[i], four);
        let d = 2.0 * times(four, 0.5);
        y[i] = a + b + c + d;
    }
}

fn main() {}
