use graphed::prelude::*;

fn square(v: f32) -> f32 {
    v * v
}

#[kernel(workgroup = 64)]
pub fn squares(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    y[i] = square(x[i]);
}

fn main() {}
