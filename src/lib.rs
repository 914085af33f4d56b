//! # graphed
//!
//! Record a GPU step function once, replay it cheaply and safely: as a CUDA graph on NVIDIA
//! (`--features cuda`), as a wgpu replay (one command buffer, one submit) everywhere else, and
//! on a host backend with no GPU at all. See the README for the kernel language and the rules
//! that keep replay correct.

extern crate self as graphed;

pub use graphed_kernels as kernels;
pub use graphed_macros::{device, graphed, kernel, State};
pub use graphed_nn as nn;
pub use graphed_nn::{sample, train};
pub use graphed_runtime::*;

/// The README's Rust blocks, run as doc-tests by `cargo test` (not part of the API).
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The names most programs need.
pub mod prelude {
    pub use graphed_macros::{device, graphed, kernel, State};
    pub use graphed_runtime::{
        bf16, f16, Buffer, Config, Device, Error, Fallback, Grid, Input, Launch, Out, Output,
        Result, Scalar, State, Stats, Step,
    };
}
