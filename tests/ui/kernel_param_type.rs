use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn widen(a: f64, flags: &[bool], y: &mut Vec<f32>) {
    let i = global_id().x;
}

fn main() {}
