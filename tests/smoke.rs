//! Smoke tests of a kernel launch and a recorded step.

mod common;
use graphed::prelude::*;

#[kernel(workgroup = 64)]
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = a * x[i] + y[i];
    }
}

#[test]
fn smoke() {
    for dev in common::backends() {
        let x = dev.upload(&[1.0f32, 2.0, 3.0]).unwrap();
        let mut y = dev.upload(&[1.0f32, 1.0, 1.0]).unwrap();
        axpy::launch(&dev, Grid::threads(3), 2.0, &x, &mut y).unwrap();
        assert_eq!(y.to_host().unwrap(), vec![3.0, 5.0, 7.0], "{dev:?}");
    }
    println!("{}", axpy::WGSL);
}

#[kernel(workgroup = 64)]
pub fn sgd(lr: f32, g: &[f32], w: &mut [f32]) {
    let i = global_id().x;
    if i < w.len() {
        w[i] = w[i] - lr * g[i];
    }
}

#[kernel(workgroup = 64)]
pub fn sq(x: &[f32], w: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = x[i] * w[i];
    }
}

#[graphed]
fn train(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    x: &Input<f32>,
    lr: f32,
) -> Result<Output<f32>> {
    let mut y = cx.output::<f32>(x.len())?;
    sq::launch(cx, x.len(), x, w, &mut y)?;
    sgd::launch(cx, w.len(), lr, &y, w)?;
    Ok(y)
}

#[test]
fn graphed_smoke() {
    for dev in common::backends() {
        let mut w = dev.upload(&[1.0f32, 2.0, 3.0]).unwrap();
        let mut step = Train::new(&dev).unwrap();
        for i in 0..5 {
            let y = step
                .call(&mut w, &[1.0f32, 1.0, 1.0][..], 0.5 + i as f32)
                .unwrap();
            println!("{:?}", y.to_host().unwrap());
        }
        println!("{:?} {:?}", w.to_host().unwrap(), step.stats());
        println!("{}", step.plan().unwrap().to_dot());
    }
}

#[test]
fn nvrtc_smoke() {
    if !common::nvrtc_enabled() {
        return;
    }
    let ptx = graphed::nvrtc::compile(&axpy::DEF, "compute_80").unwrap();
    assert!(ptx.contains(".entry axpy"));
}
