//! The kernel library of graphed, written in the `#[kernel]` language.

extern crate graphed_runtime as graphed;

mod shape;

pub mod elementwise;
pub mod matmul;
pub mod reduce;
