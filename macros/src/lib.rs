//! Procedural macros of graphed: `#[kernel]` (a Rust-subset GPU kernel → WGSL, CUDA C and host
//! Rust), `#[device]` (a helper function of kernels), `#[graphed]` (a step function → a recorded, replayable plan holder) and
//! `#[derive(State)]`.
//!
//! This crate is only the compiler's entry point: the front end itself is the library crate
//! `graphed-lang`, where every phase is plain Rust on `proc_macro2` types and is tested there.

use proc_macro::TokenStream;

/// Defines a GPU kernel in graphed's kernel language. See the crate `graphed` for the language.
#[proc_macro_attribute]
pub fn kernel(args: TokenStream, item: TokenStream) -> TokenStream {
    graphed_lang::expand_kernel(args.into(), item.into()).into()
}

/// Defines a helper function in graphed's kernel language, callable from kernels and other
/// `#[device]` functions (in this crate or others), and from Rust on the CPU. See the crate
/// `graphed` for the language.
#[proc_macro_attribute]
pub fn device(args: TokenStream, item: TokenStream) -> TokenStream {
    graphed_lang::expand_device(args.into(), item.into()).into()
}

/// A step of the expansion of a `#[device]` function that calls others: receives a callee's
/// definition. Generated code only.
#[doc(hidden)]
#[proc_macro]
pub fn __device_resume(input: TokenStream) -> TokenStream {
    graphed_lang::device_resume(input.into()).into()
}

/// A step of the expansion of a `#[kernel]` that calls `#[device]` functions: receives a
/// callee's definition. Generated code only.
#[doc(hidden)]
#[proc_macro]
pub fn __kernel_resume(input: TokenStream) -> TokenStream {
    graphed_lang::kernel_resume(input.into()).into()
}

/// Turns a step function into a holder type that records it once per key and replays it.
/// See the crate `graphed` for the parameter roles and the generated API.
#[proc_macro_attribute]
pub fn graphed(args: TokenStream, item: TokenStream) -> TokenStream {
    graphed_lang::expand_graphed(args.into(), item.into()).into()
}

/// Makes a struct of buffers one `#[state]` parameter of a step: every field is a
/// `Buffer<T>` or another `State` struct, except fields marked `#[state(skip)]`.
#[proc_macro_derive(State, attributes(state))]
pub fn derive_state(item: TokenStream) -> TokenStream {
    graphed_lang::expand_state(item.into()).into()
}
