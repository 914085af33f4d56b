use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn trace(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    println!("{}", i);
    y[i] = x[i];
}

fn main() {}
