use graphed::prelude::*;

#[graphed]
async fn scale(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {
    let y = cx.output::<f32>(x.len())?;
    Ok(y)
}

fn main() {}
