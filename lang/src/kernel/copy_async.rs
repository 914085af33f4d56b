//! `copy_async(dst, d, src, s, n)`: a copy from a slice into workgroup memory that the
//! invocation does not wait for, what it means on every target.
//!
//! ```text
//! copy_async(tile, d, x, s, n);   // tile[d .. d + 4] ← x[s .. s + n], then zeros
//! copy_async_commit();            // closes this invocation's group of copies
//! copy_async_wait(1);             // waits until at most 1 of its groups is still in flight
//! barrier();                      // then every invocation's copies are visible to all
//! ```
//!
//! # Meaning
//!
//! `copy_async(dst, d, src, s, n)` writes the [`CHUNK`] elements `dst[d .. d + 4]` of a
//! workgroup array: element `d + e` is `src[s + e]` for `e < n` where `s + e < src.len()`,
//! and zero otherwise. So `n` (any `u32`; more than 4 copies 4) is how many elements to take,
//! and a chunk that runs past the end of `src`, or starts past it, is filled with zeros
//! rather than read out of range: a tile's edge needs no separate path. `dst` and `src` hold
//! the same 32-bit type (`u32`, `i32` or `f32`); `d + 4` must not pass `dst`'s length (as an
//! index out of range: a fault on the host, the write dropped and the fault recorded in a
//! checked GPU variant).
//!
//! The copy may still be in flight when the statement is done: its elements are certain in
//! `dst` only after the copying invocation has waited for it, and for the other invocations
//! only after a `barrier()` that follows that wait. `copy_async_commit()` closes the
//! invocation's group of copies issued since the last commit (an empty group is allowed);
//! `copy_async_wait(k)` (`k` a literal, `0 ..= 7`) returns once at most `k` of its groups are
//! still in flight. The usual pipeline keeps `k` tiles in flight:
//!
//! ```text
//! issue tile 0; commit; issue tile 1; commit;
//! for step in 0..tiles {
//!     copy_async_wait(1); barrier();           // tile `step` is in, for everyone
//!     issue tile step + 2 into the stage tile step - 1 used; commit;
//!     compute on tile `step`'s stage;
//! }
//! ```
//!
//! Reading or overwriting a chunk before the wait is a data race, like reading another
//! invocation's workgroup memory without a barrier: the targets may disagree.
//!
//! # On each target
//!
//! - **CUDA, sm_80 and later:** a chunk of 4 elements in range is one
//!   `cp.async.cg.shared.global` of 16 bytes (PTX ISA 9.7.9.25.3, "Data Movement and
//!   Conversion Instructions: cp.async"), then `cp.async.commit_group` and
//!   `cp.async.wait_group k`. Workgroup arrays are declared 16-byte aligned. A chunk of 0 to 3
//!   elements in range (an edge's zeros included), or one whose workgroup address (`d` not a
//!   multiple of 4) or global address (the slice's start plus `s`) is not 16-byte aligned, is
//!   copied element by element instead, at once. (Zeros by `ignore-src`, and a source size in
//!   bytes for partial chunks, are PTX's other forms; each made the common whole chunk cost
//!   more instructions in the MMA kernel's loop: BENCHMARKS.md, third and seventh sessions of
//!   2026-12-07.)
//! - **CUDA before sm_80, WGSL and the host:** the elements are copied at once (the
//!   statement's portable form); commit and wait do nothing.
//!
//! All targets therefore write the same bits; only when they land differs.

use super::ir::{Stmt, Ty};

/// The builtin's name.
pub const NAME: &str = "copy_async";

/// `copy_async_commit()`.
pub const COMMIT: &str = "copy_async_commit";

/// `copy_async_wait(k)`.
pub const WAIT: &str = "copy_async_wait";

/// Elements one call writes (16 bytes of 32-bit values).
pub const CHUNK: u32 = 4;

/// The largest `k` of `copy_async_wait(k)` (PTX's `cp.async.wait_group` takes an immediate;
/// a pipeline rarely keeps more than a few stages in flight).
pub const WAIT_MAX: u32 = 7;

/// A `copy_async` call, lowered.
#[derive(Clone, Debug)]
pub struct CopyAsync {
    /// The workgroup array written (an index into the function's workgroup arrays).
    pub shared: usize,
    /// The slice read (an index into the function's parameters).
    pub src: usize,
    /// Their element type (32 bits).
    pub elem: Ty,
    /// `let`s of the locals [`CopyAsync::d`], [`CopyAsync::s`] and [`CopyAsync::n`]: the
    /// destination index, the source index and the elements to take, clamped to the chunk
    /// and to what `src` holds past `s` — each argument evaluated once, in order.
    pub setup: Vec<Stmt>,
    /// See [`CopyAsync::setup`].
    pub d: String,
    /// See [`CopyAsync::setup`].
    pub s: String,
    /// See [`CopyAsync::setup`].
    pub n: String,
    /// The portable form: the [`CHUNK`] element assignments `dst[d + e] = if e < n
    /// { src[s + e] } else { 0 }`, which the host, WGSL and CUDA's fallback run (and every
    /// analysis walks).
    pub copy: Vec<Stmt>,
}

/// `copy_async_commit()` or `copy_async_wait(k)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyFence {
    /// Closes the invocation's group of copies.
    Commit,
    /// Waits until at most this many of its groups are in flight.
    Wait(u32),
}
