use graphed::prelude::*;

#[graphed]
fn scale(cx: &mut Step, x: &Input<f32>, data: Vec<f32>, lr: f64) -> Result<Output<f32>> {
    let y = cx.output::<f32>(x.len() + data.len() + lr as usize)?;
    Ok(y)
}

fn main() {}
