use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn reduce(x: &[f32], y: &mut [f32]) {
    let tile = shared::<f32, 64>();
    let g = global_id().x;
    if g >= x.len() {
        return;
    }
    tile[local_id().x] = x[g];
    barrier();
    y[g] = tile[0u32];
}

fn main() {}
