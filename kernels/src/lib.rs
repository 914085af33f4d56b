//! The kernel library of graphed, written in the `#[kernel]` language.

extern crate graphed_runtime as graphed;

mod shape;

pub mod elementwise;
pub mod layers;
pub mod loss;
pub mod matmul;
pub mod optim;
pub mod reduce;
pub mod rng;
