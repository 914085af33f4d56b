use graphed::prelude::*;

// Every mistake of a kernel is reported in one compilation.
#[kernel(workgroup = 64)]
pub fn messy(k: i32, x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    let a: f32 = 1;
    let b = x[i] + k;
    x[i] = 0.0;
    let c = x.iter();
    y[i] = helper(a);
}

fn main() {}
