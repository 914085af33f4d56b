//! Reductions: sum, mean, max, sum of squares and L2 norm, over a whole buffer and per row.
//!
//! # Order
//!
//! The order of the additions is fixed by the shapes alone, so every run, replay and backend
//! adds the same numbers in the same order:
//!
//! 1. A launch of `G` workgroups of `T = 256` invocations: invocation `g = wg·T + t` folds
//!    elements `g, g + G·T, g + 2·G·T, …` into a private accumulator, in increasing order.
//! 2. The `T` accumulators of a workgroup are combined as a tree in workgroup memory: for
//!    `h = 128, 64, …, 1`, slot `t < h` takes `s[t] ∘ s[t + h]`.
//! 3. A whole-buffer reduction of `n ≤ 16384` elements is one workgroup (`G = 1`). Larger
//!    inputs use `G = min(⌈n / 4096⌉, 256)` workgroups whose partial results go to a workspace,
//!    and a second launch (`G = 1`) reduces those partials by steps 1–2 again.
//!
//! A per-row reduction gives each row to one workgroup (step 1 with `G = 1` over the row's
//! columns, then step 2); a row longer than 16384 is cut into parts of 16384 reduced so, and
//! the row of their results is reduced again (as a row, in part order). Mean multiplies the sum by `1/n`; the L2 norm is the square root of
//! the sum of squares. No atomics on floats are used anywhere.
//!
//! Where the device has subgroups ([`Launch::library_subgroups`]), the routines launch the
//! variants of [`crate::reduce_subgroup`], which keep this order exactly: the results are
//! bitwise equal with and without subgroups.

use graphed_macros::{device, kernel};
use graphed_runtime::{Buffer, Error, Grid, Launch, Result};

use crate::reduce_subgroup::{launch_all, launch_rows};
use crate::shape::{expect_at_least, expect_len, u32_of, MAX_GROUPS};

/// Largest input reduced by a single workgroup in one launch.
pub const SINGLE_PASS_MAX: usize = 16384;

/// Most workgroups (partial results) of the first pass of a large reduction.
pub const MAX_PARTIALS: usize = 256;

/// What a reduction computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduce {
    /// `Σ x`.
    Sum,
    /// `Σ x / n`.
    Mean,
    /// `max x` (`-∞` for no elements).
    Max,
    /// `Σ x²`.
    SumSq,
    /// `√(Σ x²)`.
    L2,
}

impl Reduce {
    /// (accumulation code, post-processing code) for the kernels: accumulate 0 sum, 1 sum of
    /// squares, 2 max; post 0 none, 1 times `scale`, 2 square root.
    fn codes(self) -> (u32, u32) {
        match self {
            Reduce::Sum => (0, 0),
            Reduce::Mean => (0, 1),
            Reduce::Max => (2, 0),
            Reduce::SumSq => (1, 0),
            Reduce::L2 => (1, 2),
        }
    }

    /// The reduction in `f64`: the tests' reference.
    pub fn eval_f64(self, x: &[f32]) -> f64 {
        let it = x.iter().map(|&v| v as f64);
        match self {
            Reduce::Sum => it.sum(),
            Reduce::Mean => it.sum::<f64>() / x.len() as f64,
            Reduce::Max => it.fold(f64::NEG_INFINITY, f64::max),
            Reduce::SumSq => it.map(|v| v * v).sum(),
            Reduce::L2 => it.map(|v| v * v).sum::<f64>().sqrt(),
        }
    }
}

/// The start of accumulation `op` (0 sum, 1 sum of squares, 2 max): its identity.
#[device]
pub(crate) fn start(op: u32) -> f32 {
    if op == 2 {
        f32::NEG_INFINITY
    } else {
        0.0
    }
}

/// `acc` with element `v` folded in by accumulation `op` (step 1 of the module's order).
#[device]
pub(crate) fn fold(op: u32, acc: f32, v: f32) -> f32 {
    if op == 0 {
        acc + v
    } else if op == 1 {
        acc + v * v
    } else {
        max(acc, v)
    }
}

/// Step 1 of the module's order for one invocation: `x[from]`, `x[from + step]`, … below
/// `end` folded by accumulation `op`, in increasing order, from its identity.
#[device]
pub(crate) fn fold_span(op: u32, x: &[f32], from: u32, end: u32, step: u32) -> f32 {
    let mut acc = start(op);
    let mut i = from;
    while i < end {
        acc = fold(op, acc, x[i]);
        i += step;
    }
    acc
}

/// Step 1 for invocation `t` of the 256 reducing part `r` of a row-major matrix of `cols`
/// columns whose rows are cut into `parts` parts of `part` columns (as the kernel
/// `reduce_rows` cuts them).
#[device]
pub(crate) fn fold_part(
    op: u32,
    x: &[f32],
    cols: u32,
    part: u32,
    parts: u32,
    r: u32,
    t: u32,
) -> f32 {
    let lo = (r % parts) * part;
    let base = (r / parts) * cols + lo;
    fold_span(op, x, base + t, base + min(part, cols - lo), 256u32)
}

/// Two partial results of accumulation `op` combined (a step of the tree, step 2): a sum
/// of squares' partials are sums.
#[device]
pub(crate) fn combine(op: u32, a: f32, b: f32) -> f32 {
    if op == 2 {
        max(a, b)
    } else {
        a + b
    }
}

/// Step 2 of the module's order over a workgroup of 256: once every invocation `t` wrote
/// its partial result to `s[t]`, combines them by accumulation `op` as a tree (`h = 128, 64,
/// …, 1`: slot `t < h` takes `s[t] ∘ s[t + h]`) and gives every invocation the total. Called
/// by the whole workgroup together; `s` is only read after it, so a caller that writes `s`
/// again puts a `barrier()` first.
#[device]
fn tree(op: u32, s: &mut [f32; 256], t: u32) -> f32 {
    barrier();
    // h = 128, 64, …, 1: a constant range, unrolled.
    for l in 0..8u32 {
        tree_level(op, s, t, 128u32 >> l);
    }
    s[0]
}

/// One level `h` of the tree: slot `t < h` takes `s[t] ∘ s[t + h]`, then the workgroup
/// waits. Called by the whole workgroup together.
#[device]
pub(crate) fn tree_level(op: u32, s: &mut [f32; 256], t: u32, h: u32) {
    if t < h {
        s[t] = combine(op, s[t], s[t + h]);
    }
    barrier();
}

/// [`tree`] of the partial results `v` of invocations `t`, written to `s` first: the
/// workgroup-memory form of `crate::reduce_subgroup::tree_sg`, with the same arguments and
/// the same bits.
#[device]
pub(crate) fn tree_wg(op: u32, v: f32, s: &mut [f32; 256], t: u32) -> f32 {
    s[t] = v;
    tree(op, s, t)
}

/// The workgroup's total of `s[0..256]`, summed as a tree in the module's order (step 2),
/// once every invocation `t` of the 256 wrote its partial sum to `s[t]`; every invocation
/// gets it. It reaches barriers: call it where the whole workgroup is, and put a
/// `barrier()` before writing `s` again.
#[device]
pub fn tree_sum(s: &mut [f32; 256], t: u32) -> f32 {
    tree(0u32, s, t)
}

/// The workgroup's maximum of `s[0..256]`, as [`tree_sum`] sums it.
#[device]
pub fn tree_max(s: &mut [f32; 256], t: u32) -> f32 {
    tree(2u32, s, t)
}

/// The result from the total `v`: post 0 as is, 1 times `scale`, 2 square root.
#[device]
pub(crate) fn finish(post: u32, scale: f32, v: f32) -> f32 {
    if post == 1 {
        v * scale
    } else if post == 2 {
        sqrt(v)
    } else {
        v
    }
}

/// The reduction kernels, once for each way of combining over a workgroup: `$tree(op, v, s,
/// t)` is [`tree_wg`] (step 2 in workgroup memory) or `tree_sg` (its first levels on
/// subgroups, [`crate::reduce_subgroup`]), which combine in the same order: the same bits.
macro_rules! reduce_kernels {
    ($tree:ident, $how:literal, $all:ident, $rows:ident) => {
        /// One pass of a whole-buffer reduction: workgroup `w` writes its reduction (steps
        /// 1–2 of [`crate::reduce`]'s order) to `out[w]`. `op`: 0 sum, 1 sum of squares, 2
        /// max; `post`: 0 none, 1 times `scale`, 2 square root.
        #[doc = $how]
        #[kernel(workgroup = 256)]
        pub fn $all(op: u32, post: u32, scale: f32, x: &[f32], out: &mut [f32]) {
            let s = shared::<f32, 256>();
            let t = local_id().x;
            let acc = fold_span(op, x, global_id().x, x.len(), global_size().x);
            let total = $tree(op, acc, s, t);
            if t == 0 {
                out[workgroup_id().x] = finish(post, scale, total);
            }
        }

        /// Per-row reduction of a row-major matrix with `cols` columns, each row cut into
        /// `parts` parts of `part` columns (the last may be shorter; `parts = 1`, `part =
        /// cols` for whole rows): `out` has an element per (row, part), and workgroup `w`
        /// reduces parts `w, w + G, …`, each by steps 1–2 of [`crate::reduce`]'s order.
        /// Codes as for the whole-buffer pass.
        #[doc = $how]
        #[kernel(workgroup = 256)]
        pub fn $rows(
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
            let mut r = workgroup_id().x;
            while r < out.len() {
                let acc = fold_part(op, x, cols, part, parts, r, t);
                let total = $tree(op, acc, s, t);
                if t == 0 {
                    out[r] = finish(post, scale, total);
                }
                barrier();
                r += num_workgroups().x;
            }
        }
    };
}
pub(crate) use reduce_kernels;

reduce_kernels!(
    tree_wg,
    "Step 2 is a tree in workgroup memory (the `_sg` variants of [`crate::reduce_subgroup`]: \
     on subgroups).",
    reduce_all,
    reduce_rows
);

/// Workgroups of the first pass for `n` elements (1 means a single pass).
pub(crate) fn first_pass_groups(n: usize) -> u32 {
    if n <= SINGLE_PASS_MAX {
        1
    } else {
        n.div_ceil(4096).min(MAX_PARTIALS) as u32
    }
}

/// Workspace elements a whole-buffer reduction of `n` elements needs (0 for a single pass).
pub fn workspace_len(n: usize) -> usize {
    match first_pass_groups(n) {
        1 => 0,
        g => g as usize,
    }
}

/// Reduces all of `x` into `out[0]` (`out` has one element). `ws` holds the partial results
/// of large inputs: at least [`workspace_len`]`(x.len())` elements (unused, and may be empty,
/// for inputs of at most [`SINGLE_PASS_MAX`] elements). One launch, or two for large inputs.
pub fn reduce<C: Launch + ?Sized>(
    cx: &C,
    op: Reduce,
    x: &Buffer<f32>,
    out: &mut Buffer<f32>,
    ws: &mut Buffer<f32>,
) -> Result<()> {
    expect_len("reduce", "out", out.len(), 1)?;
    let n = x.len();
    u32_of("length", n)?;
    let (acc, post) = op.codes();
    let scale = if n == 0 { 0.0 } else { 1.0 / n as f32 };
    let g = first_pass_groups(n);
    if g == 1 {
        return launch_all(cx, Grid::workgroups(1), acc, post, scale, x, out);
    }
    expect_at_least("reduce", "ws", ws.len(), g as usize)?;
    let mut partials = ws.slice(0..g as usize)?;
    launch_all(cx, Grid::workgroups(g), acc, 0, 0.0, x, &mut partials)?;
    // The partials of a sum of squares are sums: the second pass adds them (and may root).
    let acc2 = if acc == 1 { 0 } else { acc };
    launch_all(cx, Grid::workgroups(1), acc2, post, scale, &partials, out)
}

macro_rules! reduce_ops {
    ($($name:ident, $op:ident, $what:literal;)*) => {$(
        #[doc = concat!("`out[0] = ", $what, "` ([`reduce`] with [`Reduce::", stringify!($op), "`]).")]
        pub fn $name<C: Launch + ?Sized>(
            cx: &C,
            x: &Buffer<f32>,
            out: &mut Buffer<f32>,
            ws: &mut Buffer<f32>,
        ) -> Result<()> {
            reduce(cx, Reduce::$op, x, out, ws)
        }
    )*};
}

reduce_ops! {
    sum, Sum, "Σ x";
    mean, Mean, "Σ x / n";
    max, Max, "max x";
    sum_sq, SumSq, "Σ x²";
    l2_norm, L2, "√(Σ x²)";
}

/// Reduces each row of the row-major `out.len() × cols` matrix `x` into `out[row]`. One
/// launch for rows of up to [`SINGLE_PASS_MAX`] columns; longer rows are cut into parts of
/// that many, reduced into a scratch buffer by one launch, whose rows of partial results the
/// next launch reduces (and so on), so no invocation loops over more than `SINGLE_PASS_MAX /
/// 256` elements of a row: lavapipe (llvmpipe) gives an invocation about 65,535 loop
/// iterations in all and silently leaves its loops past them. The cut depends on the shape
/// alone, so every backend, replay and eager run add in the same order.
pub fn reduce_rows<C: Launch + ?Sized>(
    cx: &C,
    op: Reduce,
    x: &Buffer<f32>,
    cols: usize,
    out: &mut Buffer<f32>,
) -> Result<()> {
    let rows = out.len();
    let n = rows
        .checked_mul(cols)
        .ok_or_else(|| Error::Shape(format!("reduce_rows: {rows} × {cols} overflows")))?;
    expect_len("reduce_rows", "x", x.len(), n)?;
    u32_of("length", n)?;
    let (acc, post) = op.codes();
    let scale = if cols == 0 { 0.0 } else { 1.0 / cols as f32 };
    let groups = |tasks: usize| tasks.clamp(1, MAX_GROUPS as usize) as u32;
    // The widths of the passes: each cuts its rows into parts of `SINGLE_PASS_MAX`.
    let mut widths = vec![cols];
    while *widths.last().unwrap() > SINGLE_PASS_MAX {
        let w = widths.last().unwrap().div_ceil(SINGLE_PASS_MAX);
        widths.push(w);
    }
    if widths.len() == 1 {
        let c = cols as u32;
        let g = Grid::workgroups(groups(rows));
        return launch_rows(cx, g, acc, post, scale, [c, c, 1], x, out);
    }
    let scratch = cx.scratch(rows * widths[1..].iter().sum::<usize>())?;
    let mut from = x.slice(0..n)?;
    let mut at = 0;
    // The partials of a sum of squares are sums: later passes add them (the last may root).
    let mut code = acc;
    for pass in 0..widths.len() - 1 {
        let (w, parts) = (widths[pass], widths[pass + 1]);
        let mut to = scratch.slice(at..at + rows * parts)?;
        let (w32, p32, part) = (w as u32, parts as u32, SINGLE_PASS_MAX as u32);
        let g = Grid::workgroups(groups(rows * parts));
        launch_rows(cx, g, code, 0, 0.0, [w32, part, p32], &from, &mut to)?;
        code = if code == 1 { 0 } else { code };
        at += rows * parts;
        from = to;
    }
    let w = *widths.last().unwrap() as u32;
    let g = Grid::workgroups(groups(rows));
    launch_rows(cx, g, code, post, scale, [w, w, 1], &from, out)
}
