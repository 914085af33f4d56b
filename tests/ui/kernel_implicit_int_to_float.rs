use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn fill(y: &mut [f32]) {
    let i = global_id().x;
    let a: f32 = 1;
    y[i] = a;
}

fn main() {}
