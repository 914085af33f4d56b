use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn stage(n: u32, x: &[f32], y: &mut [f32]) {
    let tile = shared::<f32, n>();
    let i = global_id().x;
    tile[local_id().x] = x[i];
    barrier();
    y[i] = tile[0u32];
}

fn main() {}
