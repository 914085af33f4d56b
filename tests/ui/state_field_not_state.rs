use graphed::prelude::*;

#[derive(State)]
pub struct Model {
    pub params: Buffer<f32>,
    pub sizes: Vec<usize>,
}

fn main() {}
