use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn private_histogram(x: &[u32], bins: &mut [u32]) {
    let counts = shared::<u32, 64>();
    let lid = local_id().x;
    counts[lid] = 0u32;
    barrier();
    atomic_add(counts, x[global_id().x] % 64, 1u32);
    barrier();
    atomic_add(bins, lid, counts[lid]);
}

fn main() {}
