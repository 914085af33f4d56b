use graphed::prelude::*;

// The holder type is the step's name in CamelCase: `step` would give `Step`, shadowing
// the recording context's type.
#[graphed]
fn step(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {
    let y = cx.output::<f32>(x.len())?;
    Ok(y)
}

fn main() {}
