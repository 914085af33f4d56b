use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn copy(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    let v = x[i];
    let r = &v;
    y[i] = *r;
}

fn main() {}
