use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn search(x: &[u32], y: &mut [u32]) {
    let i = global_id().x;
    let mut k = 0u32;
    let found = loop {
        if x[k] == i {
            break;
        }
        k += 1;
    };
    while k < 4 {
        break k;
    }
    y[i] = found;
}

fn main() {}
