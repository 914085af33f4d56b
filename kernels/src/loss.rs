//! Losses: softmax cross-entropy (mean over the batch, with the gradient with respect to the
//! logits in the same pass) and mean squared error, forward and backward.
//!
//! A loss is a reduction, in the order of [`crate::reduce`]: per-row (or per-element) terms
//! are folded by invocation, then a tree per workgroup; when a launch needs more than one
//! workgroup their partial sums are added by a second launch of [`crate::reduce::reduce_all`].
//! Where the device has subgroups ([`Launch::library_subgroups`]), each kernel's `_sg`
//! variant runs instead: the same trees with their first levels on subgroups, in the same
//! order ([`crate::reduce_subgroup`]), so the losses and gradients are bitwise the same.

use graphed_macros::{device, kernel};
use graphed_runtime::{
    bf16, f16, BackendKind, Buffer, DType, Element, Error, Grid, IntoScalarArg, Launch, Result,
    ScalarArg,
};

use crate::reduce::{tree_wg, SINGLE_PASS_MAX};
use crate::reduce_subgroup::{launch_all, on_subgroups, tree_sg};
use crate::shape::{expect_at_least, expect_len, u32_of};

/// Rows of at most this many classes get one invocation per row; wider rows one workgroup.
pub const NARROW_CLASSES: usize = 64;

/// A loss kernel `$name` over a grid-stride share, in the order of [`crate::reduce`]: `$body`
/// binds `acc`, the sum of this invocation's terms over its elements `first, first + stride,
/// …`; workgroup `w` writes `out[w] = lscale · Σ acc`, the sum by `$tree` (`tree_wg` or
/// `tree_sg`). `$params`, each followed by a comma, are the kernel's parameters before `out`
/// and include `lscale`.
macro_rules! partial_sum_kernel {
    ($tree:ident, $(#[$doc:meta])* $name:ident($($params:tt)*) { $($body:tt)* }) => {
        $(#[$doc])*
        #[kernel(workgroup = 256)]
        #[allow(clippy::too_many_arguments)]
        pub fn $name($($params)* out: &mut [f32]) {
            let s = shared::<f32, 256>();
            let t = local_id().x;
            let first = global_id().x;
            let stride = global_size().x;
            $($body)*
            let total = $tree(0u32, acc, s, t);
            partial(t, total, lscale, out, workgroup_id().x);
        }
    };
}

/// A narrow cross-entropy kernel `$name` (rows of at most [`NARROW_CLASSES`] classes), the
/// staged path ([`use_tile`]) or one invocation a row ([`narrow_rows`]): `$params` as for
/// [`partial_sum_kernel!`]; `$stage` stores the gradient of element `$e` of the staged chunk
/// (in `tile[$e]`), at `$at` of `dlogits`; `$unstaged` runs after [`narrow_rows`] wrote this
/// invocation's rows.
macro_rules! narrow_xent_kernel {
    (
        $tree:ident, $(#[$doc:meta])* $name:ident($($params:tt)*)
        staged($e:ident, $at:ident) { $($stage:tt)* }
        unstaged { $($unstaged:tt)* }
    ) => {
        partial_sum_kernel! {
            $tree,
            $(#[$doc])*
            $name($($params)*) {
                let tile = shared::<f32, 3072>();
                let mut acc = 0.0;
                if use_tile(classes) {
                    let rows = labels.len();
                    let mut r0 = workgroup_id().x * 256u32;
                    while r0 < rows {
                        acc += staged_chunk(classes, gscale, logits, labels, tile, t, r0);
                        // The chunk's gradients, coalesced from the tile.
                        let n = min(256u32, rows - r0) * classes;
                        for j in 0..12u32 {
                            let $e = t + j * 256u32;
                            if $e < n {
                                let $at = r0 * classes + $e;
                                $($stage)*
                            }
                        }
                        barrier();
                        r0 += num_workgroups().x * 256u32;
                    }
                } else {
                    acc = narrow_rows(classes, gscale, logits, labels, dlogits, first, stride);
                    $($unstaged)*
                }
            }
        }
    };
}

/// The loss kernels, once for each way of summing over a workgroup: `$tree(op, v, s, t)` is
/// `tree_wg` (a tree in workgroup memory) or `tree_sg` (its first levels on subgroups), which
/// combine in the same order and so give the same bits (see [`crate::reduce_subgroup`]).
macro_rules! loss_kernels {
    ($tree:ident, $how:literal, $narrow:ident, $wide:ident, $mse:ident) => {
        // The two cross-entropies take the same arguments: the launcher picks one by width.
        loss_kernels!(
            @xent $tree, $how, $narrow, $wide,
            (
                classes: u32, lscale: f32, gscale: f32,
                logits: &[f32], labels: &[u32], dlogits: &mut [f32],
            )
        );

        partial_sum_kernel! {
            $tree,
            /// Mean squared error pass: workgroup `w` writes `out[w] = lscale · Σ (p − y)²` over
            /// its grid-stride share (order of [`crate::reduce`]), and, when `write_grad`, `grad =
            /// gscale · (p − y)` (added to `grad` when `accumulate`).
            #[doc = $how]
            $mse(
                lscale: f32, gscale: f32, write_grad: bool, accumulate: bool,
                pred: &[f32], target: &[f32], grad: &mut [f32],
            ) {
                let acc =
                    mse_span(gscale, write_grad, accumulate, pred, target, grad, first, stride);
            }
        }
    };
    (@xent $tree:ident, $how:literal, $narrow:ident, $wide:ident, ($($params:tt)*)) => {
        narrow_xent_kernel! {
            $tree,
            /// Softmax cross-entropy of rows of at most [`NARROW_CLASSES`] classes, one
            /// invocation per row: `dlogits = (softmax(z) − onehot(label))·gscale`, and workgroup
            /// `w` writes `out[w] = lscale · Σ_rows (ln Σ_j e^(z_j − max) − (z_label − max))`. A
            /// label `≥ classes` marks a row to ignore: no loss, zero gradient.
            #[doc = $how]
            $narrow($($params)*)
            staged(e, at) {
                dlogits[at] = tile[e];
            }
            unstaged {}
        }

        /// Softmax cross-entropy of wide rows, one workgroup per row (rows `w, w + G, …`):
        /// the row's max and sum of exponentials are reductions over the workgroup. Outputs
        /// as for the narrow rows.
        #[doc = $how]
        #[kernel(workgroup = 256)]
        pub fn $wide($($params)* out: &mut [f32]) {
            let s = shared::<f32, 256>();
            let t = local_id().x;
            let mut acc = 0.0;
            let mut r = workgroup_id().x;
            while r < labels.len() {
                let base = r * classes;
                let m = $tree(2u32, wide_max(logits, base, classes, t), s, t);
                barrier();
                let total = $tree(0u32, wide_exp_sum(logits, base, classes, t, m), s, t);
                barrier();
                acc = wide_finish(
                    acc, classes, gscale, logits, labels, dlogits, r, t, m, total,
                );
                r += num_workgroups().x;
            }
            partial(t, acc, lscale, out, workgroup_id().x);
        }
    };
}

loss_kernels!(
    tree_wg,
    "The workgroup's sums are trees in workgroup memory (the `_sg` variants: on subgroups).",
    softmax_xent_narrow,
    softmax_xent_wide,
    mse_pass
);
loss_kernels!(
    tree_sg,
    "The workgroup's sums have their first levels on subgroups, in the workgroup tree's \
     order: the same bits as the kernel without `_sg`.",
    softmax_xent_narrow_sg,
    softmax_xent_wide_sg,
    mse_pass_sg
);

/// The narrow cross-entropy that also writes its gradient's 16-bit copy, once per way of
/// summing over a workgroup (`$tree`) and 16-bit type (`$t`).
macro_rules! xent_cast_kernel {
    ($tree:ident, $t:ident, $(#[$doc:meta])* $name:ident) => {
        narrow_xent_kernel! {
            $tree,
            $(#[$doc])*
            $name(
                classes: u32, lscale: f32, gscale: f32, scaled: bool,
                logits: &[f32], labels: &[u32], scale: &[f32],
                dlogits: &mut [f32], dlogits16: &mut [$t],
            )
            // Times the loss scale, as `scaler::scale_by`, and rounded.
            staged(e, at) {
                let mut v = tile[e];
                if scaled {
                    v = v * scale[0];
                }
                dlogits[at] = v;
                dlogits16[at] = v as $t;
            }
            // This invocation's own rows again (it wrote them: no barrier needed): times the
            // loss scale, as `scaler::scale_by`, and rounded.
            unstaged {
                let mut r = first;
                while r < labels.len() {
                    for j in 0..classes {
                        let at = r * classes + j;
                        let mut v = dlogits[at];
                        if scaled {
                            v = v * scale[0];
                            dlogits[at] = v;
                        }
                        dlogits16[at] = v as $t;
                    }
                    r += stride;
                }
            }
        }
    };
}

xent_cast_kernel!(
    tree_wg,
    bf16,
    /// [`softmax_xent_narrow`](mod@softmax_xent_narrow), then its gradient times `scale[0]`
    /// (when `scaled`) and `dlogits16` its copy rounded to `bf16`: bitwise the loss, then
    /// `scaler::scale_by`, then `graphed_runtime::cast::cast`, in one launch.
    softmax_xent_narrow_cast_bf16
);
xent_cast_kernel!(
    tree_wg,
    f16,
    /// [`softmax_xent_narrow_cast_bf16`](mod@softmax_xent_narrow_cast_bf16) rounding to `f16`.
    softmax_xent_narrow_cast_f16
);
xent_cast_kernel!(
    tree_sg,
    bf16,
    /// [`softmax_xent_narrow_cast_bf16`](mod@softmax_xent_narrow_cast_bf16) with the sums'
    /// first levels on subgroups (the same bits).
    softmax_xent_narrow_cast_sg_bf16
);
xent_cast_kernel!(
    tree_sg,
    f16,
    /// [`softmax_xent_narrow_cast_f16`](mod@softmax_xent_narrow_cast_f16) with the sums'
    /// first levels on subgroups (the same bits).
    softmax_xent_narrow_cast_sg_f16
);

/// Most classes a row of the staged narrow cross-entropy has (chunks of 256 rows through a
/// tile of 3072 elements in workgroup memory).
pub const STAGED_CLASSES: usize = 12;

/// Whether a narrow cross-entropy takes the staged path ([`staged_chunk`]): rows of at most
/// [`STAGED_CLASSES`] classes. Workgroup `w` of `G` takes the chunks at rows `256·w`,
/// `256·(w + G)`, …, so each invocation has the rows [`narrow_rows`] gives it and its loss
/// adds them in the same order. Uniform.
#[device]
fn use_tile(classes: u32) -> bool {
    classes <= 12u32
}

/// Rows `r0 … r0 + 255` of a narrow cross-entropy (at most [`STAGED_CLASSES`] classes) by
/// one workgroup: the chunk's logits loaded into `tile` with coalesced loads issued
/// together, row `r0 + t` computed from the tile by invocation `t` (each `e^(z − max)`
/// once), and its gradients left in the tile for the caller's coalesced stores; returns the
/// row's loss (0 for no row or an ignored one). Bitwise [`narrow_rows`]'s values. (One
/// invocation a row reading its classes from global memory, one round trip after another,
/// ran MLP-M's 512 rows of 10 classes in 9–10 µs on the H200.) Called by the whole
/// workgroup; ends with a barrier, and the caller's stores need another before the next
/// chunk.
#[device]
#[allow(clippy::too_many_arguments)]
fn staged_chunk(
    classes: u32,
    gscale: f32,
    logits: &[f32],
    labels: &[u32],
    tile: &mut [f32; 3072],
    t: u32,
    r0: u32,
) -> f32 {
    let rows = labels.len();
    let n = min(256u32, rows - r0) * classes;
    let base = r0 * classes;
    let mut vs = [0.0f32; 12];
    for j in 0..12u32 {
        let e = t + j * 256u32;
        if e < n {
            vs[j] = logits[base + e];
        }
    }
    let r = r0 + t;
    let mut lab = 0u32;
    if r < rows {
        lab = labels[r];
    }
    for j in 0..12u32 {
        let e = t + j * 256u32;
        if e < n {
            tile[e] = vs[j];
        }
    }
    barrier();
    let mut loss = 0.0;
    if r < rows {
        loss = softmax_row(tile, t * classes, classes, lab, gscale);
    }
    barrier();
    loss
}

/// The softmax of the `classes` logits at `tile[o..]` against label `lab`: replaces them with
/// the loss's gradient `(softmax − onehot(lab))·gscale` and returns the row's loss term, or,
/// for a label `≥ classes` (ignored), zeros and 0. Each `e^(z − max)` once. (The staged
/// cross-entropy's and the fused head's row, [`crate::head`].)
#[device]
pub fn softmax_row(tile: &mut [f32; 3072], o: u32, classes: u32, lab: u32, gscale: f32) -> f32 {
    let mut mx = f32::NEG_INFINITY;
    for j in 0..classes {
        mx = max(mx, tile[o + j]);
    }
    let valid = lab < classes;
    let mut zl = 0.0;
    if valid {
        zl = tile[o + lab];
    }
    let mut sum = 0.0;
    for j in 0..classes {
        let ex = exp(tile[o + j] - mx);
        tile[o + j] = ex;
        sum += ex;
    }
    let mut loss = 0.0;
    if valid {
        loss = log(sum) - (zl - mx);
    }
    for j in 0..classes {
        let p = tile[o + j] / sum;
        let y = if j == lab { 1.0 } else { 0.0 };
        tile[o + j] = if valid { (p - y) * gscale } else { 0.0 };
    }
    loss
}

/// One invocation's rows `first, first + stride, …` of a narrow cross-entropy: their
/// gradients written, the sum of their losses returned (in row order, step 1 of
/// [`crate::reduce`]'s order).
#[device]
fn narrow_rows(
    classes: u32,
    gscale: f32,
    logits: &[f32],
    labels: &[u32],
    dlogits: &mut [f32],
    first: u32,
    stride: u32,
) -> f32 {
    let mut acc = 0.0;
    let mut r = first;
    while r < labels.len() {
        let base = r * classes;
        let mut mx = f32::NEG_INFINITY;
        for j in 0..classes {
            mx = max(mx, logits[base + j]);
        }
        let mut sum = 0.0;
        for j in 0..classes {
            sum += exp(logits[base + j] - mx);
        }
        let lab = labels[r];
        let valid = lab < classes;
        if valid {
            acc += log(sum) - (logits[base + lab] - mx);
        }
        for j in 0..classes {
            let p = exp(logits[base + j] - mx) / sum;
            let y = if j == lab { 1.0 } else { 0.0 };
            dlogits[base + j] = if valid { (p - y) * gscale } else { 0.0 };
        }
        r += stride;
    }
    acc
}

/// A loss's workgroup result: `out[w] = scale · total`, written by invocation 0.
#[device]
fn partial(t: u32, total: f32, scale: f32, out: &mut [f32], w: u32) {
    if t == 0 {
        out[w] = total * scale;
    }
}

/// Invocation `t`'s share of the max of the row at `base` of a wide cross-entropy.
#[device]
fn wide_max(logits: &[f32], base: u32, classes: u32, t: u32) -> f32 {
    let mut mx = f32::NEG_INFINITY;
    let mut j = t;
    while j < classes {
        mx = max(mx, logits[base + j]);
        j += 256u32;
    }
    mx
}

/// Invocation `t`'s share of the row's `Σ e^(z_j − m)`.
#[device]
fn wide_exp_sum(logits: &[f32], base: u32, classes: u32, t: u32, m: f32) -> f32 {
    let mut sum = 0.0;
    let mut j = t;
    while j < classes {
        sum += exp(logits[base + j] - m);
        j += 256u32;
    }
    sum
}

/// Row `r`'s gradients (invocation `t`'s share), from its max `m` and sum of exponentials
/// `total`; returns `acc` with the row's loss added by invocation 0.
#[device]
#[allow(clippy::too_many_arguments)]
fn wide_finish(
    acc: f32,
    classes: u32,
    gscale: f32,
    logits: &[f32],
    labels: &[u32],
    dlogits: &mut [f32],
    r: u32,
    t: u32,
    m: f32,
    total: f32,
) -> f32 {
    let base = r * classes;
    let lab = labels[r];
    let valid = lab < classes;
    let mut j = t;
    while j < classes {
        let p = exp(logits[base + j] - m) / total;
        let y = if j == lab { 1.0 } else { 0.0 };
        dlogits[base + j] = if valid { (p - y) * gscale } else { 0.0 };
        j += 256u32;
    }
    if t == 0 && valid {
        return acc + (log(total) - (logits[base + lab] - m));
    }
    acc
}

/// One invocation's elements `first, first + stride, …` of an MSE pass: `Σ (p − y)²` in
/// order, and the gradient written when `write_grad`.
#[device]
#[allow(clippy::too_many_arguments)]
fn mse_span(
    gscale: f32,
    write_grad: bool,
    accumulate: bool,
    pred: &[f32],
    target: &[f32],
    grad: &mut [f32],
    first: u32,
    stride: u32,
) -> f32 {
    let mut acc = 0.0;
    let mut i = first;
    while i < pred.len() {
        let d = pred[i] - target[i];
        acc += d * d;
        if write_grad {
            let mut g = gscale * d;
            if accumulate {
                g += grad[i];
            }
            grad[i] = g;
        }
        i += stride;
    }
    acc
}

/// `grad = gscale · (p − y)` (added to `grad` when `accumulate`): the MSE gradient alone.
#[kernel(workgroup = 256)]
pub fn mse_grad(gscale: f32, accumulate: bool, pred: &[f32], target: &[f32], grad: &mut [f32]) {
    // The pass's gradient, its sum of squares unused (`pred`, `target` and `grad` have one
    // length: `mse_backward` checks it).
    mse_span(
        gscale,
        true,
        accumulate,
        pred,
        target,
        grad,
        global_id().x,
        global_size().x,
    );
}

/// Workgroups of a cross-entropy launch over `rows` rows of `classes` classes.
fn xent_groups(rows: usize, classes: usize) -> u32 {
    if classes <= NARROW_CLASSES {
        // Up to 1024 rows (four staged chunks) in one launch; more over workgroups of two
        // chunks each, and a second launch to add their losses: one workgroup took 42.5 µs
        // over MLP-L's 4096 rows of 10 classes on the H200 (16 chunks one after another).
        if rows <= 1024 {
            1
        } else {
            rows.div_ceil(512).min(256) as u32
        }
    } else {
        rows.clamp(1, 256) as u32
    }
}

/// Workspace elements [`softmax_cross_entropy`] needs for `rows × classes` logits (0 when
/// one launch suffices).
pub fn xent_workspace_len(rows: usize, classes: usize) -> usize {
    match xent_groups(rows, classes) {
        1 => 0,
        g => g as usize,
    }
}

/// Workspace elements [`mse`] needs for `n` elements (0 when one launch suffices).
pub fn mse_workspace_len(n: usize) -> usize {
    crate::reduce::workspace_len(n)
}

/// The rows and classes of a cross-entropy over `logits` (`rows × classes`, one label per
/// row) into a one-element `loss`, or [`Error::Shape`] naming `op`.
fn xent_shape(
    op: &str,
    logits: &Buffer<f32>,
    labels: &Buffer<u32>,
    loss: &Buffer<f32>,
) -> Result<(usize, usize)> {
    let rows = labels.len();
    expect_len(op, "loss", loss.len(), 1)?;
    if rows == 0 || logits.len() % rows != 0 {
        return Err(Error::Shape(format!(
            "{op}: {} logits are not {rows} rows",
            logits.len()
        )));
    }
    Ok((rows, logits.len() / rows))
}

/// Mean softmax cross-entropy of `logits` (row-major `labels.len() × classes`) against class
/// indices `labels`, into `loss[0]`, and its gradient with respect to the logits into
/// `dlogits` (`(softmax − onehot) / rows`), in one pass. `ws` holds partial sums of large
/// batches ([`xent_workspace_len`]; may be empty otherwise). One launch (two for batches that
/// need the workspace). A label `≥ classes` is ignored (no loss, zero gradient; the mean
/// still divides by all rows).
pub fn softmax_cross_entropy<C: Launch + ?Sized>(
    cx: &C,
    logits: &Buffer<f32>,
    labels: &Buffer<u32>,
    loss: &mut Buffer<f32>,
    dlogits: &mut Buffer<f32>,
    ws: &mut Buffer<f32>,
) -> Result<()> {
    let rows = labels.len().max(1);
    softmax_cross_entropy_scaled(cx, logits, labels, loss, dlogits, ws, 1.0 / rows as f32)
}

/// [`softmax_cross_entropy`] with the gradient scaled by `grad_scale` instead of `1/rows`
/// (e.g. `1/(rows·k)` for `k` micro-batches; a constant or a per-step scalar). The loss is
/// still the mean over the rows.
pub fn softmax_cross_entropy_scaled<C: Launch + ?Sized>(
    cx: &C,
    logits: &Buffer<f32>,
    labels: &Buffer<u32>,
    loss: &mut Buffer<f32>,
    dlogits: &mut Buffer<f32>,
    ws: &mut Buffer<f32>,
    grad_scale: impl IntoScalarArg<f32>,
) -> Result<()> {
    let op = "softmax_cross_entropy";
    let (rows, classes) = xent_shape(op, logits, labels, loss)?;
    expect_len(op, "dlogits", dlogits.len(), logits.len())?;
    u32_of("logits", logits.len())?;
    let lscale = 1.0 / rows as f32;
    let g = xent_groups(rows, classes);
    let grid = Grid::workgroups(g);
    let narrow = classes <= NARROW_CLASSES;
    let classes = classes as u32;
    // Wide rows stay on the workgroup tree on wgpu: on the H200's Vulkan driver the subgroup
    // variant took 195.7 µs against the tree's 147.7 (4096 rows of 1024, BENCHMARKS.md,
    // 2026-12-01 fourth session), while it is faster on CUDA and for narrow rows everywhere.
    // Both give the same bits.
    let sg = on_subgroups(cx) && (narrow || cx.backend_kind() != Some(BackendKind::Wgpu));
    into_loss(cx, op, g, loss, ws, |out| {
        let (c, ls, gs, y) = (classes, lscale, grad_scale, labels);
        match (narrow, sg) {
            (true, false) => {
                softmax_xent_narrow::launch(cx, grid, c, ls, gs, logits, y, dlogits, out)
            }
            (true, true) => {
                softmax_xent_narrow_sg::launch(cx, grid, c, ls, gs, logits, y, dlogits, out)
            }
            (false, false) => {
                softmax_xent_wide::launch(cx, grid, c, ls, gs, logits, y, dlogits, out)
            }
            (false, true) => {
                softmax_xent_wide_sg::launch(cx, grid, c, ls, gs, logits, y, dlogits, out)
            }
        }
    })
}

/// [`softmax_cross_entropy_scaled`] over rows of at most [`NARROW_CLASSES`] classes that also
/// multiplies the gradient by `scale[0]` (when `scale` is given; a loss scale) and writes its
/// copy rounded to `H` (`bf16` or `f16`) into `dlogits16`: bitwise the loss, then
/// `scaler::LossScaler::scale`, then `graphed_runtime::cast::cast` (but that on wgpu an `f16`
/// NaN is the driver's), in one launch (two where the loss needs `ws`).
///
/// # Errors
/// As [`softmax_cross_entropy_scaled`]; [`Error::Shape`] also for rows of more than
/// [`NARROW_CLASSES`] classes (run the loss, then the scale and the cast) and a `dlogits16`
/// or `scale` of the wrong length; [`Error::Launch`] for a type other than `bf16` and `f16`.
#[allow(clippy::too_many_arguments)]
pub fn softmax_cross_entropy_cast<C: Launch + ?Sized, H: Element>(
    cx: &C,
    logits: &Buffer<f32>,
    labels: &Buffer<u32>,
    loss: &mut Buffer<f32>,
    dlogits: &mut Buffer<f32>,
    dlogits16: &mut Buffer<H>,
    ws: &mut Buffer<f32>,
    grad_scale: impl IntoScalarArg<f32>,
    scale: Option<&Buffer<f32>>,
) -> Result<()> {
    let op = "softmax_cross_entropy_cast";
    let (rows, classes) = xent_shape(op, logits, labels, loss)?;
    if classes > NARROW_CLASSES {
        return Err(Error::Shape(format!(
            "{op}: rows of {classes} classes; at most {NARROW_CLASSES}"
        )));
    }
    expect_len(op, "dlogits", dlogits.len(), logits.len())?;
    expect_len(op, "dlogits16", dlogits16.len(), logits.len())?;
    if let Some(s) = scale {
        expect_len(op, "scale", s.len(), 1)?;
    }
    u32_of("logits", logits.len())?;
    let (ls, gs) = (1.0 / rows as f32, grad_scale.into_scalar_arg());
    let g = xent_groups(rows, classes);
    let grid = Grid::workgroups(g);
    let (c, y, sg) = (classes as u32, labels, on_subgroups(cx));
    // Without a scale, `scale` is bound to the logits (never read).
    let (scaled, sc) = (scale.is_some(), scale.unwrap_or(logits));
    into_loss(cx, op, g, loss, ws, |out| {
        macro_rules! run {
            ($t:ident, $wg:ident, $sg:ident) => {{
                let mut h = Buffer::<$t>::try_from_view(dlogits16.raw_view())?;
                if sg {
                    $sg::launch(
                        cx, grid, c, ls, gs, scaled, logits, y, sc, dlogits, &mut h, out,
                    )
                } else {
                    $wg::launch(
                        cx, grid, c, ls, gs, scaled, logits, y, sc, dlogits, &mut h, out,
                    )
                }
            }};
        }
        match H::DTYPE {
            DType::BF16 => run!(
                bf16,
                softmax_xent_narrow_cast_bf16,
                softmax_xent_narrow_cast_sg_bf16
            ),
            DType::F16 => run!(
                f16,
                softmax_xent_narrow_cast_f16,
                softmax_xent_narrow_cast_sg_f16
            ),
            other => Err(Error::Launch {
                kernel: "softmax_cross_entropy_cast",
                reason: format!(
                    "a 16-bit copy of `{}`; it takes `bf16` or `f16`",
                    other.name()
                ),
            }),
        }
    })
}

/// Runs `pass`, a launch of `g` workgroups each writing its part of a loss, into `loss` when
/// `g == 1`, else into the first `g` elements of `ws`, which a second launch sums into `loss`.
pub(crate) fn into_loss<C: Launch + ?Sized>(
    cx: &C,
    op: &str,
    g: u32,
    loss: &mut Buffer<f32>,
    ws: &mut Buffer<f32>,
    pass: impl FnOnce(&mut Buffer<f32>) -> Result<()>,
) -> Result<()> {
    if g == 1 {
        return pass(loss);
    }
    expect_at_least(op, "ws", ws.len(), g as usize)?;
    let mut partials = ws.slice(0..g as usize)?;
    pass(&mut partials)?;
    launch_all(cx, Grid::workgroups(1), 0u32, 0u32, 0.0f32, &partials, loss)
}

/// Workgroups of an MSE pass over `n` elements.
fn mse_groups(n: usize) -> u32 {
    if n <= SINGLE_PASS_MAX {
        1
    } else {
        crate::reduce::first_pass_groups(n)
    }
}

fn mse_launch<C: Launch + ?Sized>(
    cx: &C,
    pred: &Buffer<f32>,
    target: &Buffer<f32>,
    loss: &mut Buffer<f32>,
    grad: Option<(&mut Buffer<f32>, ScalarArg<f32>, ScalarArg<bool>)>,
    ws: &mut Buffer<f32>,
) -> Result<()> {
    let op = "mse";
    let n = pred.len();
    expect_len(op, "target", target.len(), n)?;
    expect_len(op, "loss", loss.len(), 1)?;
    u32_of("length", n)?;
    let lscale = if n == 0 { 0.0 } else { 1.0 / n as f32 };
    let g = mse_groups(n);
    let mut empty;
    let (write, grad, gscale, accumulate) = match grad {
        Some((gr, s, a)) => {
            expect_len(op, "grad", gr.len(), n)?;
            (true, gr, s, a)
        }
        None => {
            empty = pred.slice(0..0)?;
            (
                false,
                &mut empty,
                ScalarArg::from(0.0),
                ScalarArg::from(false),
            )
        }
    };
    let grid = Grid::workgroups(g);
    let sg = on_subgroups(cx);
    into_loss(cx, op, g, loss, ws, |out| {
        if sg {
            mse_pass_sg::launch(
                cx, grid, lscale, gscale, write, accumulate, pred, target, grad, out,
            )
        } else {
            mse_pass::launch(
                cx, grid, lscale, gscale, write, accumulate, pred, target, grad, out,
            )
        }
    })
}

/// `loss[0] = mean((pred − target)²)`. `ws` as for [`crate::reduce::reduce`]
/// ([`mse_workspace_len`]).
pub fn mse<C: Launch + ?Sized>(
    cx: &C,
    pred: &Buffer<f32>,
    target: &Buffer<f32>,
    loss: &mut Buffer<f32>,
    ws: &mut Buffer<f32>,
) -> Result<()> {
    mse_launch(cx, pred, target, loss, None, ws)
}

/// [`mse`] and its gradient `grad = 2·(pred − target)/n` in the same pass (added to `grad`
/// when `accumulate`).
pub fn mse_with_grad<C: Launch + ?Sized>(
    cx: &C,
    pred: &Buffer<f32>,
    target: &Buffer<f32>,
    loss: &mut Buffer<f32>,
    grad: &mut Buffer<f32>,
    ws: &mut Buffer<f32>,
    accumulate: impl IntoScalarArg<bool>,
) -> Result<()> {
    let n = pred.len().max(1);
    let gscale = ScalarArg::from(2.0 / n as f32);
    mse_launch(
        cx,
        pred,
        target,
        loss,
        Some((grad, gscale, accumulate.into_scalar_arg())),
        ws,
    )
}

/// The MSE gradient alone: `grad = 2·(pred − target)/n` (added when `accumulate`).
pub fn mse_backward<C: Launch + ?Sized>(
    cx: &C,
    pred: &Buffer<f32>,
    target: &Buffer<f32>,
    grad: &mut Buffer<f32>,
    accumulate: impl IntoScalarArg<bool>,
) -> Result<()> {
    let n = pred.len();
    expect_len("mse_backward", "target", target.len(), n)?;
    expect_len("mse_backward", "grad", grad.len(), n)?;
    u32_of("length", n)?;
    let gscale = 2.0 / n.max(1) as f32;
    mse_grad::launch(
        cx,
        Grid::workgroups(crate::shape::groups(n)),
        gscale,
        accumulate,
        pred,
        target,
        grad,
    )
}
