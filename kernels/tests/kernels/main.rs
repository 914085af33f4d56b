//! Every kernel of graphed-kernels against a plain-Rust f64 reference, on every backend.

extern crate graphed_runtime as graphed;

mod common;
mod elementwise;
mod head;
mod loss;
mod matmul;
mod nvrtc;
mod optim;
mod reduce;
mod rng;
