use graphed::prelude::*;

#[device]
fn warp_sum(v: f32) -> f32 {
    subgroup_add(v)
}

#[device]
fn lane() -> u32 {
    subgroup_invocation_id()
}

fn main() {}
