use graphed::prelude::*;

// `to_bits()` gives the bits of a 16-bit value; an `f32`'s are not offered.
#[kernel(workgroup = 64)]
pub fn bits(x: &[f32], y: &mut [u32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = x[i].to_bits();
    }
}

fn main() {}
