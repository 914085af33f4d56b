use graphed::prelude::*;

// A device fence under a condition on the invocation id: WGSL's `storageBarrier()` is a
// workgroup barrier, so some invocations would skip it.
#[kernel(workgroup = 64)]
fn publish(x: &mut [f32]) {
    let i = global_id().x;
    if i < 32 {
        x[i] = 1.0;
        device_fence();
    }
}

// In a helper it is refused outright.
#[device]
fn store(x: &mut [f32], i: u32) {
    x[i] = 2.0;
    device_fence();
}

// It takes no arguments.
#[kernel(workgroup = 64)]
fn args(x: &mut [f32]) {
    store(x, global_id().x);
    device_fence(1u32);
}

fn main() {}
