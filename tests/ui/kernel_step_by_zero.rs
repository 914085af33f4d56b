use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn strided(x: &[f32], y: &mut [f32]) {
    const STRIDE: u32 = 0;
    for i in (global_id().x..y.len()).step_by(STRIDE) {
        y[i] = x[i];
    }
}

fn main() {}
