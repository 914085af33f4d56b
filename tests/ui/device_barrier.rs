use graphed::prelude::*;

// A barrier under a condition on a parameter: callers may pass an invocation id.
#[device]
fn publish(s: &mut [f32; 64], i: u32, v: f32) {
    s[i] = v;
    if i < 32 {
        barrier();
    }
}

#[device]
fn lane() -> u32 {
    local_id().x
}

fn main() {}
