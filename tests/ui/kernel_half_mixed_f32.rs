use graphed::prelude::*;

// f16 and f32 do not mix implicitly: the error suggests the cast.
#[kernel(workgroup = 64)]
pub fn scale(s: f32, x: &[f16], y: &mut [f16]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = x[i] * s;
    }
}

fn main() {}
