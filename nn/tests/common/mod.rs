//! Helpers of the layer tests: random inputs, poisoned outputs, f64 references, tolerances
//! (the kernel tests' own, from `graphed_runtime::testing`).

pub use graphed_runtime::testing::{
    assert_close, assert_close_floor, floats, on_every_backend_own_wgpu as on_every_backend,
    poisoned, rng,
};
