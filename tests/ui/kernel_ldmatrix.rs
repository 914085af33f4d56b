use graphed::prelude::*;

// `ldmatrix_x4` where some invocations skip it, into the wrong array, from `f32` workgroup
// memory, and in a `#[device]` helper.
#[kernel(workgroup = 64)]
pub fn skipped(out: &mut [u32]) {
    let t = shared::<u32, 256>();
    let i = local_id().x;
    let mut w = [0u32; 4];
    if i < 32 {
        ldmatrix_x4(t, 4 * i, &mut w);
    }
    out[i] = w[0];
}

#[kernel(workgroup = 64)]
pub fn wrong_operands(out: &mut [u32]) {
    let t = shared::<u32, 256>();
    let f = shared::<f32, 256>();
    let i = local_id().x;
    let mut w = [0u32; 8];
    let mut v = [0u32; 4];
    ldmatrix_x4(t, 4 * i, &mut w);
    ldmatrix_x4(f, 4 * i, &mut v);
    out[i] = w[0] + v[0];
}

#[device]
fn helper(t: &[u32; 256], p: u32) -> u32 {
    let mut w = [0u32; 4];
    ldmatrix_x4(t, p, &mut w);
    w[0]
}

fn main() {}
