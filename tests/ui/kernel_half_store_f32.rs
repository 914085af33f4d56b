use graphed::prelude::*;

// Storing an f32 into a bf16 slice needs an explicit `as bf16`.
#[kernel(workgroup = 64)]
pub fn narrow(x: &[f32], y: &mut [bf16]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = x[i];
    }
}

fn main() {}
