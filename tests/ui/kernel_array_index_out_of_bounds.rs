use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn window(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    let mut w = [0.0f32; 8];
    // Unrolled: the copy with k == 8 indexes past the end.
    for k in 0..9u32 {
        w[k] = x[i + k];
    }
    y[i] = w[3] + w[8];
}

fn main() {}
