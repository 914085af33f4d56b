use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn search(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    'outer: for j in 0u32..x.len() {
        for k in 0u32..x.len() {
            if x[j] == x[k] {
                break 'outer;
            }
        }
    }
    y[i] = 1.0;
}

fn main() {}
