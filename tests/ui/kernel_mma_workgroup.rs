use graphed::prelude::*;

// A workgroup that is not a multiple of 32, a two-dimensional one, and a `#[device]` use.
#[kernel(workgroup = 48)]
pub fn odd(a: &[bf16], out: &mut [f32]) {
    let fa = [a[0]; 8];
    let fb = [a[1]; 4];
    let mut acc = [0.0f32; 4];
    mma_m16n8k16(&fa, &fb, &mut acc);
    out[0] = acc[0];
}

#[kernel(workgroup = (32, 2, 1))]
pub fn two_d(a: &[bf16], out: &mut [f32]) {
    let fa = [a[0]; 8];
    let fb = [a[1]; 4];
    let mut acc = [0.0f32; 4];
    mma_m16n8k16(&fa, &fb, &mut acc);
    out[0] = acc[0];
}

#[device]
fn helper(x: bf16) -> f32 {
    let fa = [x; 8];
    let fb = [x; 4];
    let mut acc = [0.0f32; 4];
    mma_m16n8k16(&fa, &fb, &mut acc);
    acc[0]
}

fn main() {}
