use graphed::prelude::*;

struct Pair {
    a: f32,
    b: f32,
}

#[kernel(workgroup = 64)]
pub fn sum(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    let p = Pair { a: x[i], b: 1.0 };
    y[i] = x[i];
}

fn main() {}
