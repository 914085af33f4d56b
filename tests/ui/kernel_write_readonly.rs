use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn clear(x: &[f32]) {
    let i = global_id().x;
    if i < x.len() {
        x[i] = 0.0;
    }
}

fn main() {}
