use graphed::prelude::*;

#[device]
fn tree_sum(s: &mut [f32; 64], t: u32) -> f32 {
    barrier();
    let mut h = 32u32;
    while h > 0 {
        if t < h {
            s[t] = s[t] + s[t + h];
        }
        barrier();
        h = h / 2;
    }
    s[0]
}

// The helper reaches a barrier, so it is called where the whole workgroup is.
#[kernel(workgroup = 64)]
pub fn partial(x: &[f32], out: &mut [f32]) {
    let s = shared::<f32, 64>();
    let t = local_id().x;
    s[t] = x[global_id().x];
    if global_id().x < x.len() {
        let v = tree_sum(s, t);
        out[t] = v;
    }
}

fn main() {}
