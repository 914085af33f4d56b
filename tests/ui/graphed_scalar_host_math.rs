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
    // `lr` changes every step: computing with it on the host would bake one value into
    // the recording.
    sgd::launch(cx, w.len(), lr * 2.0, g, w)?;
    Ok(())
}

// The holder is still generated, so code that uses it reports nothing more.
fn run(dev: &Device, w: &mut Buffer<f32>) -> Result<()> {
    let mut step = Train::new(dev)?;
    step.call(w, &[1.0f32, 2.0][..], 0.1)?;
    Ok(())
}

fn main() {}
