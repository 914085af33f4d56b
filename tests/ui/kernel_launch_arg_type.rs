use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = a * x[i] + y[i];
    }
}

fn run(dev: &Device, x: &Buffer<u32>, y: &mut Buffer<f32>) -> Result<()> {
    axpy::launch(dev, Grid::threads(3), 2.0f32, x, y)
}

fn main() {}
