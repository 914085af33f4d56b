use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn scale(a: f32, y: &mut [f32]) {
    let i = global_id().x;
    let twice = |v: f32| v * 2.0;
    if i < y.len() {
        y[i] = a * y[i];
    }
}

fn main() {}
