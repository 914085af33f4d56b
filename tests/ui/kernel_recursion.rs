use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn walk(n: u32, y: &mut [u32]) {
    let i = global_id().x;
    if n > 0u32 {
        walk(n - 1u32, y);
    }
    y[i] = n;
}

fn main() {}
