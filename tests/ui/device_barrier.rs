use graphed::prelude::*;

#[device]
fn publish(y: &mut [f32], i: u32, v: f32) {
    y[i] = v;
    barrier();
}

#[device]
fn lane() -> u32 {
    local_id().x
}

fn main() {}
