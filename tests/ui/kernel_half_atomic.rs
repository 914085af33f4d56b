use graphed::prelude::*;

// There are no 16-bit atomics.
#[kernel(workgroup = 64)]
pub fn count(x: &[f16], c: &mut [f16]) {
    let i = global_id().x;
    if i < x.len() {
        atomic_add(c, 0u32, x[i]);
    }
}

fn main() {}
