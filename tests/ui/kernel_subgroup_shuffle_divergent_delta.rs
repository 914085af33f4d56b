use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn rotate(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    // The delta must be the same for every invocation; a per-lane source is `subgroup_shuffle`.
    y[i] = subgroup_shuffle_down(x[i], local_id().x % 4u32);
}

fn main() {}
