use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn total(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = x[i].to_degrees();
    }
}

fn main() {}
