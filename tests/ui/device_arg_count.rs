use graphed::prelude::*;

#[device]
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + tanh(0.7978846 * x))
}

#[kernel(workgroup = 64)]
pub fn act(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = gelu(x[i], 0.5);
    }
}

fn main() {}
