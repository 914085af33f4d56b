use graphed::prelude::*;

#[kernel(workgroup = 48)]
pub fn not_whole_warps(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    y[i] = subgroup_add(x[i]);
}

#[kernel(workgroup = (8, 8))]
pub fn two_dimensional(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    y[i] = subgroup_add(x[i]);
}

fn main() {}
