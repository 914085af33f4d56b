use graphed::prelude::*;

#[device]
fn first(s: &mut [f32; 64]) -> f32 {
    s[0]
}

#[device]
fn bump(bins: &mut [u32; 64], i: u32) {
    bins[i] = bins[i] + 1;
}

// A read-only workgroup array is not written.
#[device]
fn reset(s: &[f32; 64]) {
    s[0] = 0.0;
}

// The length of a workgroup-array parameter is a literal.
#[device]
fn sized(s: &mut [f32; LEN]) -> f32 {
    s[0]
}

#[kernel(workgroup = 64)]
pub fn wrong(x: &mut [f32], bins: &mut [u32]) {
    let small = shared::<f32, 32>();
    let counts = shared::<u32, 64>();
    small[0] = 1.0;
    let a = first(small);
    let b = first(x);
    atomic_add(counts, 0u32, 1u32);
    bump(counts, 1u32);
    x[0] = a + b;
    let c = atomic_load(counts, 0u32);
    bins[0] = c;
}

fn main() {}
