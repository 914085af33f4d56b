use graphed::prelude::*;

// `mma_m16n8k16` under a condition on the invocation id, and after an early return.
#[kernel(workgroup = 64)]
pub fn divergent(a: &[bf16], out: &mut [f32]) {
    let i = global_id().x;
    let fa = [a[0]; 8];
    let fb = [a[1]; 4];
    let mut acc = [0.0f32; 4];
    if i < out.len() {
        mma_m16n8k16(&fa, &fb, &mut acc);
    }
    out[i] = acc[0];
}

#[kernel(workgroup = 64)]
pub fn after_return(a: &[bf16], out: &mut [f32]) {
    let i = global_id().x;
    if i >= out.len() {
        return;
    }
    let fa = [a[0]; 8];
    let fb = [a[1]; 4];
    let mut acc = [0.0f32; 4];
    mma_m16n8k16(&fa, &fb, &mut acc);
    out[i] = acc[0];
}

fn main() {}
