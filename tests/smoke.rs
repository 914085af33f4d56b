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
    for dev in [Device::host(), Device::wgpu().unwrap()] {
        let x = dev.upload(&[1.0f32, 2.0, 3.0]).unwrap();
        let mut y = dev.upload(&[1.0f32, 1.0, 1.0]).unwrap();
        axpy::launch(&dev, Grid::threads(3), 2.0, &x, &mut y).unwrap();
        assert_eq!(y.to_host().unwrap(), vec![3.0, 5.0, 7.0], "{dev:?}");
    }
    println!("{}", axpy::WGSL);
}
