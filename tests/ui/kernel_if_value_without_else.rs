use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn relu(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    let v = if x[i] > 0.0 { x[i] };
    y[i] = v;
}

fn main() {}
