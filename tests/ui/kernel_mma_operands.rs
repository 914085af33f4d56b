use graphed::prelude::*;

// Wrong fragment types, lengths, references and mutability.
#[kernel(workgroup = 64)]
pub fn operands(a: &[bf16], h: &[f16], out: &mut [f32]) {
    let fa = [a[0]; 8];
    let fb = [a[1]; 4];
    let short = [a[0]; 4];
    let hb = [h[0]; 4];
    let fl = [0.0f32; 8];
    let mut acc = [0.0f32; 4];
    let fixed = [0.0f32; 4];
    let mut wide = [0.0f32; 8];
    mma_m16n8k16(&short, &fb, &mut acc);
    mma_m16n8k16(&fl, &fb, &mut acc);
    mma_m16n8k16(&fa, &hb, &mut acc);
    mma_m16n8k16(&fa, &fb, &mut wide);
    mma_m16n8k16(&fa, &fb, &fixed);
    mma_m16n8k16(&fa, &fb, &mut fixed);
    mma_m16n8k16(fa, &fb, &mut acc);
    mma_m16n8k16(&fa, &fb);
    let x = mma_m16n8k16(&fa, &fb, &mut acc);
    out[0] = acc[0] + wide[0];
}

fn main() {}
