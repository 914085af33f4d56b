use graphed::prelude::*;

#[device]
fn warp_sum(v: f32) -> f32 {
    subgroup_add(v)
}

#[device]
fn twice(v: f32) -> f32 {
    warp_sum(v) * 2.0
}

// In a helper every parameter may depend on the invocation id.
#[device]
fn gated(v: f32, n: u32) -> f32 {
    if n > 3 {
        return subgroup_max(v);
    }
    v
}

#[kernel(workgroup = 64)]
pub fn calls_under_an_id(x: &[f32], out: &mut [f32]) {
    let i = global_id().x;
    if i < x.len() {
        out[i] = twice(x[i]);
    }
    let v = if i < 3 { warp_sum(1.0) } else { 0.0 };
    out[0] = v;
}

#[kernel(workgroup = 48)]
pub fn not_whole_warps(out: &mut [f32]) {
    out[0] = warp_sum(1.0);
}

fn main() {}
