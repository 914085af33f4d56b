//! The reductions' subgroup variants: the same order as the workgroup tree of
//! [`crate::reduce`] (bitwise equal results), with its first `log2(size)` levels done by
//! shuffles instead of workgroup memory and barriers.
//!
//! The tree over a workgroup's `T = 256` accumulators combines, for `h = 128, 64, …, 1`, slot
//! `t` with `t + h`: the highest bit of `t` first. With subgroups of `S` lanes and `W = T / S`
//! subgroups, invocation (subgroup `w`, lane `l`) takes accumulator `t = l·W + w`, so its lane
//! bits are the top bits of `t`; an xor butterfly over the lanes with masks `S/2, …, 1`
//! then performs the tree's first `log2 S` levels exactly (each step `v ∘ shuffle_xor(v, m)`
//! is the tree's `s[t] ∘ s[t + h]`, up to the operands' order, which `+` and `max` ignore).
//! Lane 0 of subgroup `w` then holds the tree's slot `w`, and the last `log2 W` levels run
//! in workgroup memory as before: 3 barriers instead of 8 with 32 lanes.

use graphed_macros::{device, kernel};
use graphed_runtime::{Buffer, Grid, Launch, Result};

use crate::reduce::{combine, finish, fold_part, fold_span, tree_level};

/// Step 2 of [`crate::reduce`]'s order over a workgroup of 256, its first levels on
/// subgroups (module docs): invocation `t`'s partial result `v` combined with the others'
/// by accumulation `op`, the total given to every invocation. Called by the whole workgroup
/// together; `s` is only read after it, so a caller that writes `s` again puts a
/// `barrier()` first.
#[device]
pub(crate) fn tree_sg(op: u32, v: f32, s: &mut [f32; 256], t: u32) -> f32 {
    s[t] = v;
    barrier();
    let size = subgroup_size();
    let groups = 256u32 / size;
    let lane = subgroup_invocation_id();
    let w = t / size;
    let mut a = s[lane * groups + w];
    let mut m = size / 2u32;
    while m > 0 {
        let o = subgroup_shuffle_xor(a, m);
        a = combine(op, a, o);
        m = m >> 1u32;
    }
    barrier();
    if lane == 0 {
        s[w] = a;
    }
    barrier();
    let mut h = groups / 2u32;
    while h > 0 {
        tree_level(op, s, t, h);
        h = h >> 1u32;
    }
    s[0]
}

crate::reduce::reduce_kernels!(
    tree_sg,
    "Step 2 has its first levels on subgroups, in the workgroup tree's order: the same bits \
     as the kernel of [`crate::reduce`] without `_sg`.",
    reduce_all_sg,
    reduce_rows_sg
);

/// Whether `cx` runs the subgroup variants: its device has subgroups the library may use
/// ([`Launch::library_subgroups`]) that split the workgroup of 256.
pub(crate) fn on_subgroups<C: Launch + ?Sized>(cx: &C) -> bool {
    cx.library_subgroups()
        .is_some_and(|s| s <= 256 && 256 % s == 0)
}

/// Launches [`crate::reduce::reduce_all`] or its subgroup variant (same arguments, same bits).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_all<C: Launch + ?Sized>(
    cx: &C,
    grid: Grid,
    op: u32,
    post: u32,
    scale: f32,
    x: &Buffer<f32>,
    out: &mut Buffer<f32>,
) -> Result<()> {
    if on_subgroups(cx) {
        reduce_all_sg::launch(cx, grid, op, post, scale, x, out)
    } else {
        crate::reduce::reduce_all::launch(cx, grid, op, post, scale, x, out)
    }
}

/// Launches [`reduce_rows`](mod@crate::reduce::reduce_rows) (the kernel) or its subgroup variant.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_rows<C: Launch + ?Sized>(
    cx: &C,
    grid: Grid,
    op: u32,
    post: u32,
    scale: f32,
    shape: [u32; 3],
    x: &Buffer<f32>,
    out: &mut Buffer<f32>,
) -> Result<()> {
    let [cols, part, parts] = shape;
    if on_subgroups(cx) {
        reduce_rows_sg::launch(cx, grid, op, post, scale, cols, part, parts, x, out)
    } else {
        crate::reduce::reduce_rows::launch(cx, grid, op, post, scale, cols, part, parts, x, out)
    }
}
