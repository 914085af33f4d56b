use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn histogram(x: &[u32], bins: &mut [u32]) {
    let i = global_id().x;
    atomic_add(bins, x[i], 1u32);
    bins[0u32] = 0u32;
}

fn main() {}
