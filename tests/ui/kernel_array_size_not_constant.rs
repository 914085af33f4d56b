use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn taps(n: u32, x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    let mut w = [0.0f32; n];
    w[0] = x[i];
    y[i] = w[0];
}

fn main() {}
