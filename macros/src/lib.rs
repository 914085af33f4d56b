//! Procedural macros of graphed: `#[kernel]` (a Rust-subset GPU kernel → WGSL, CUDA C and host
//! Rust) and `#[graphed]` (a step function → a recorded, replayable plan holder).
//!
//! This file only parses and dispatches; each macro lives in its own module, as phases
//! (parse → check → emit) working on `proc_macro2` types so they can be unit-tested.

use proc_macro::TokenStream;

#[cfg(test)]
mod fuzz;
mod graphed;
mod kernel;
mod state;
mod suggest;
mod tokens;

/// Defines a GPU kernel in graphed's kernel language. See the crate `graphed` for the language.
#[proc_macro_attribute]
pub fn kernel(args: TokenStream, item: TokenStream) -> TokenStream {
    kernel::expand(args.into(), item.into()).into()
}

/// Turns a step function into a holder type that records it once per key and replays it.
/// See the crate `graphed` for the parameter roles and the generated API.
#[proc_macro_attribute]
pub fn graphed(args: TokenStream, item: TokenStream) -> TokenStream {
    graphed::expand(args.into(), item.into()).into()
}

/// Makes a struct of buffers one `#[state]` parameter of a step: every field is a
/// `Buffer<T>` or another `State` struct, except fields marked `#[state(skip)]`.
#[proc_macro_derive(State, attributes(state))]
pub fn derive_state(item: TokenStream) -> TokenStream {
    state::expand(item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
