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

use graphed_macros::kernel;
use graphed_runtime::{Buffer, Grid, Launch, Result};

use crate::reduce::{combine, finish, fold, start};

/// [`crate::reduce::reduce_all`] with the tree's first levels on subgroups.
#[kernel(workgroup = 256)]
pub fn reduce_all_sg(op: u32, post: u32, scale: f32, x: &[f32], out: &mut [f32]) {
    let s = shared::<f32, 256>();
    let t = local_id().x;
    let n = x.len();
    let stride = global_size().x;
    let mut acc = start(op);
    let mut i = global_id().x;
    while i < n {
        acc = fold(op, acc, x[i]);
        i += stride;
    }
    s[t] = acc;
    barrier();
    let size = subgroup_size();
    let groups = 256u32 / size;
    let lane = subgroup_invocation_id();
    let w = t / size;
    let mut v = s[lane * groups + w];
    let mut m = size / 2u32;
    while m > 0 {
        let o = subgroup_shuffle_xor(v, m);
        v = combine(op, v, o);
        m = m >> 1u32;
    }
    barrier();
    if lane == 0 {
        s[w] = v;
    }
    barrier();
    let mut h = groups / 2u32;
    while h > 0 {
        if t < h {
            s[t] = combine(op, s[t], s[t + h]);
        }
        barrier();
        h = h >> 1u32;
    }
    if t == 0 {
        out[workgroup_id().x] = finish(post, scale, s[0]);
    }
}

/// [`reduce_rows`](mod@crate::reduce::reduce_rows) (the kernel) with the tree's first levels on subgroups.
#[kernel(workgroup = 256)]
pub fn reduce_rows_sg(
    op: u32,
    post: u32,
    scale: f32,
    cols: u32,
    part: u32,
    parts: u32,
    x: &[f32],
    out: &mut [f32],
) {
    let s = shared::<f32, 256>();
    let t = local_id().x;
    let size = subgroup_size();
    let groups = 256u32 / size;
    let lane = subgroup_invocation_id();
    let w = t / size;
    let tasks = out.len();
    let mut r = workgroup_id().x;
    while r < tasks {
        let lo = (r % parts) * part;
        let len = min(part, cols - lo);
        let base = (r / parts) * cols + lo;
        let mut acc = start(op);
        let mut c = t;
        while c < len {
            acc = fold(op, acc, x[base + c]);
            c += 256u32;
        }
        s[t] = acc;
        barrier();
        let mut v = s[lane * groups + w];
        let mut m = size / 2u32;
        while m > 0 {
            let o = subgroup_shuffle_xor(v, m);
            v = combine(op, v, o);
            m = m >> 1u32;
        }
        barrier();
        if lane == 0 {
            s[w] = v;
        }
        barrier();
        let mut h = groups / 2u32;
        while h > 0 {
            if t < h {
                s[t] = combine(op, s[t], s[t + h]);
            }
            barrier();
            h = h >> 1u32;
        }
        if t == 0 {
            out[r] = finish(post, scale, s[0]);
        }
        barrier();
        r += num_workgroups().x;
    }
}

/// Whether `cx` runs the subgroup variants: its device has subgroups the library may use
/// ([`Launch::library_subgroups`]) that split the workgroup of 256.
fn on_subgroups<C: Launch + ?Sized>(cx: &C) -> bool {
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
