use graphed::prelude::*;

#[graphed]
fn count(cx: &mut Step, #[state] count: &mut u32, x: &Input<f32>) -> Result<Output<f32>> {
    *count += 1;
    let y = cx.output::<f32>(x.len())?;
    Ok(y)
}

fn main() {}
