use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn partial_sums(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < x.len() {
        // Invocations past the end skip the exchange their subgroup's others wait in.
        let s = subgroup_add(x[i]);
        y[i] = s;
    }
}

#[kernel(workgroup = 64)]
pub fn after_return(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if x[i] < 0.0 {
        return;
    }
    y[i] = subgroup_max(x[i]);
}

#[kernel(workgroup = 64)]
pub fn in_a_value(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    y[i] = if x[i] > 0.0 { subgroup_min(x[i]) } else { 0.0 };
}

fn main() {}
