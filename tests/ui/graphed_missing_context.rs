use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn scale2(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = 2.0 * x[i];
    }
}

// The step creates outputs and launches kernels through its context, so it takes one first.
#[graphed]
fn twice(x: &Input<f32>, #[state] y: &mut Buffer<f32>) -> Result<()> {
    scale2::launch(x.device(), x.len(), x, y)
}

fn main() {}
