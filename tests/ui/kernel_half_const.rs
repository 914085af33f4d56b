use graphed::prelude::*;

// A kernel const is not 16-bit: declare it f32 and convert where it is used.
#[kernel(workgroup = 64)]
pub fn half(x: &[f16], y: &mut [f16]) {
    const H: f16 = 0.5;
    let i = global_id().x;
    if i < y.len() {
        y[i] = x[i] * H;
    }
}

fn main() {}
