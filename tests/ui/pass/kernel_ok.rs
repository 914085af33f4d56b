use graphed::prelude::*;

#[kernel(workgroup = (16, 16))]
pub fn transpose(w: u32, h: u32, x: &[f32], y: &mut [f32]) {
    let c = global_id().x;
    let r = global_id().y;
    if c < w && r < h {
        y[c * h + r] = x[r * w + c];
    }
}

#[kernel(workgroup = 64)]
pub fn histogram(x: &[u32], bins: &mut [u32]) {
    let i = global_id().x;
    if i < x.len() {
        let old = atomic_add(bins, x[i] % bins.len(), 1u32);
    }
}

fn run(dev: &Device, x: &Buffer<f32>, y: &mut Buffer<f32>) -> Result<()> {
    transpose::launch(dev, Grid::threads(4), 2u32, 2u32, x, y)
}

fn main() {}
