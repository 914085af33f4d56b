use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn wrong_args(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    let a = subgroup_add(x[i] > 0.0);
    let b = subgroup_shuffle(x[i], 3i32);
    let c = subgroup_max(x[i], 1u32);
    let d = subgroup_size(1u32);
    y[i] = a + b + c;
}

fn main() {}
