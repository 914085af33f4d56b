use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn reduce(x: &[f32], y: &mut [f32]) {
    let tile = shared::<f32, 64>();
    let l = local_id().x;
    tile[l] = x[global_id().x];
    if l < 32u32 {
        barrier();
        tile[l] = tile[l] + tile[l + 32u32];
    }
    y[workgroup_id().x] = tile[0u32];
}

fn main() {}
