use graphed::prelude::*;

// Workgroup arrays of 16-bit types are not supported: use f32 and convert.
#[kernel(workgroup = 64)]
pub fn stage(x: &[bf16], y: &mut [bf16]) {
    let s = shared::<bf16, 64>();
    let t = local_id().x;
    s[t] = x[t];
    barrier();
    y[t] = s[63 - t];
}

fn main() {}
