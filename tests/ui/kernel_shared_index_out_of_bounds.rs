use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn last(x: &[f32], y: &mut [f32]) {
    let tile = shared::<f32, 64>();
    tile[local_id().x] = x[global_id().x];
    barrier();
    let end = workgroup_size().x;
    y[workgroup_id().x] = tile[end];
}

fn main() {}
