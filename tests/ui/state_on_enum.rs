use graphed::prelude::*;

#[derive(State)]
pub enum Model {
    A(Buffer<f32>),
}

fn main() {}
