use graphed::prelude::*;

#[graphed]
fn copy<T: Element>(cx: &mut Step, x: &Input<T>) -> Result<Output<T>> {
    let y = cx.output::<T>(x.len())?;
    Ok(y)
}

fn main() {}
