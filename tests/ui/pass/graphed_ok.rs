use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn sgd(lr: f32, g: &[f32], w: &mut [f32]) {
    let i = global_id().x;
    if i < w.len() {
        w[i] = w[i] - lr * g[i];
    }
}

#[graphed]
fn train(cx: &mut Step, #[state] w: &mut Buffer<f32>, g: &Input<f32>, lr: f32) -> Result<()> {
    // A per-step scalar goes to kernels as is; shadowing its name with a host value is fine.
    sgd::launch(cx, w.len(), lr, g, w)?;
    let lr = 0.5f32 * 2.0;
    sgd::launch(cx, w.len(), lr, g, w)?;
    Ok(())
}

// Outputs are copied out before the next call.
fn run(dev: &Device, w: &mut Buffer<f32>) -> Result<Vec<f32>> {
    let mut step = Train::new(dev)?;
    step.call(w, &[1.0f32, 2.0][..], 0.1)?;
    step.call(w, &[1.0f32, 2.0][..], 0.2)?;
    w.to_host()
}

fn main() {}
