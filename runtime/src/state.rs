//! Step state as one value: a buffer, or a struct of buffers with `#[derive(State)]`, passed as
//! one `#[state]` parameter with the same per-allocation key, pinning and drain rules.

use crate::buffer::{Buffer, RawView};
use crate::dtype::Element;

/// The buffers of a step's persistent state, in a fixed order.
///
/// Implemented by [`Buffer`] and by structs with `#[derive(State)]` (every field a `Buffer<T>`
/// or another `State`, or marked `#[state(skip)]`). Each buffer's allocation is part of the
/// capture key, and a recording pins every one of them, exactly as for a single `#[state]`
/// buffer.
///
/// The README's "State as one value" shows a struct of an optimizer's buffers used as one
/// parameter.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not step state",
    label = "not a `Buffer<T>` or a `#[derive(State)]` struct",
    note = "a `#[state]` parameter is a `Buffer<T>` or a struct with `#[derive(State)]`; in such a struct, mark fields that are not buffers `#[state(skip)]`"
)]
pub trait State {
    /// Visits every buffer with its name (`name` for a lone buffer, the field's name in a
    /// struct).
    fn visit_state(&self, name: &'static str, f: &mut dyn FnMut(&'static str, RawView));

    /// Pushes the hashes of the fields marked `#[state(key)]` (structural values such as a
    /// model's layer sizes): part of the capture key like a `#[key]` parameter.
    fn state_key(&self, _out: &mut Vec<u64>) {}
}

impl<T: Element> State for Buffer<T> {
    fn visit_state(&self, name: &'static str, f: &mut dyn FnMut(&'static str, RawView)) {
        f(name, self.raw_view());
    }
}
