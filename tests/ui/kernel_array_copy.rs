use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn copy(y: &mut [f32]) {
    let a = [1.0f32, 2.0, 3.0];
    let b = a;
    y[0] = b[0];
}

fn main() {}
