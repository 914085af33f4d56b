//! The kernel library of graphed, written in the `#[kernel]` language.

extern crate graphed_runtime as graphed;
