//! Every kernel of graphed-kernels against a plain-Rust f64 reference, on every backend.

mod common;
mod elementwise;
mod matmul;
mod reduce;
