//! The front end of graphed: the kernel language (`#[kernel]`) and the step macro
//! (`#[graphed]`), as an ordinary library on `proc_macro2` types.
//!
//! `graphed-macros` is a thin proc-macro entry over this crate (the way `serde_derive` calls
//! `serde_derive_internals`), so every phase can be tested, fuzzed and reused as plain Rust:
//!
//! | phase | module |
//! |---|---|
//! | parse a kernel's signature and arguments | [`kernel::parse`] |
//! | check the body into the typed IR (types, statements, expressions, builtins, constants, atomics, workgroup memory) | `kernel::check` |
//! | uniformity of barriers | `kernel::uniformity` |
//! | the typed IR | [`kernel::ir`] |
//! | emit WGSL, CUDA C and the host form (Rust) | [`kernel::emit`] |
//! | `#[device]` helpers: the expansion chain that brings callees' definitions | [`kernel::device`] |
//! | `#[graphed]`: roles of parameters → body checks → the holder type | [`step`] |
//! | `#[derive(State)]` | [`state`] |
//!
//! The language itself is documented in the crate `graphed`. This crate's API serves graphed's
//! own macros and tests; it follows graphed's version but promises no stability of its own.

pub mod kernel;
pub mod state;
pub mod step;
mod suggest;
mod tokens;

pub use suggest::closest;

use proc_macro2::TokenStream;

/// `#[kernel(args)] item`: the kernel's definition, launcher and host form, or its errors.
pub fn expand_kernel(args: TokenStream, item: TokenStream) -> TokenStream {
    kernel::expand(args, item)
}

/// `#[device(args)] item`: a helper function's Rust form and the macro that hands its
/// definition to callers, or its errors.
pub fn expand_device(args: TokenStream, item: TokenStream) -> TokenStream {
    kernel::device::expand(args, item)
}

/// A step of a `#[device]` function's expansion: a callee's definition arrived.
pub fn device_resume(input: TokenStream) -> TokenStream {
    kernel::device::device_resume(input)
}

/// A step of a `#[kernel]`'s expansion: a callee's definition arrived.
pub fn kernel_resume(input: TokenStream) -> TokenStream {
    kernel::device::kernel_resume(input)
}

/// `#[graphed(args)] item`: the step's holder type, or its errors.
pub fn expand_graphed(args: TokenStream, item: TokenStream) -> TokenStream {
    step::expand(args, item)
}

/// `#[derive(State)]` on `item`.
pub fn expand_state(item: TokenStream) -> TokenStream {
    state::expand(item).unwrap_or_else(syn::Error::into_compile_error)
}
