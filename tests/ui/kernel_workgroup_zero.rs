use graphed::prelude::*;

#[kernel(workgroup = 0)]
pub fn fill(y: &mut [f32]) {
    y[global_id().x] = 1.0;
}

fn main() {}
