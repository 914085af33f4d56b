use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn copy<T>(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    y[i] = x[i];
}

fn main() {}
