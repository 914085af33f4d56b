use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn scale2(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = 2.0 * x[i];
    }
}

#[graphed]
fn twice(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {
    let mut y = cx.output::<f32>(x.len())?;
    scale2::launch(cx, x.len(), x, &mut y)?;
    Ok(y)
}

fn run(dev: &Device) -> Result<()> {
    let mut step = Twice::new(dev)?;
    let a = step.call(&[1.0f32, 2.0][..])?;
    // `a` is a view of the holder's static output slot: the next call overwrites it.
    let b = step.call(&[3.0f32, 4.0][..])?;
    println!("{:?} {:?}", a.to_host()?, b.to_host()?);
    Ok(())
}

fn main() {}
