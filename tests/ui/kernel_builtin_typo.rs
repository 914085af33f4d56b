use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn copy(x: &[f32], y: &mut [f32]) {
    let i = global_idx().x;
    let total = y.lne();
    if i < totl {
        y[i] = x[i];
    }
}

fn main() {}
