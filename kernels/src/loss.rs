//! Losses: softmax cross-entropy (mean over the batch, with the gradient with respect to the
//! logits in the same pass) and mean squared error, forward and backward.
//!
//! A loss is a reduction, in the order of [`crate::reduce`]: per-row (or per-element) terms
//! are folded by invocation, then a tree per workgroup; when a launch needs more than one
//! workgroup their partial sums are added by a second launch of [`crate::reduce::reduce_all`].

use graphed_macros::{device, kernel};
use graphed_runtime::{Buffer, Error, Grid, IntoScalarArg, Launch, Result, ScalarArg};

use crate::reduce::{reduce_all, tree_max, tree_sum, SINGLE_PASS_MAX};
use crate::shape::{expect_at_least, expect_len, u32_of};

/// Rows of at most this many classes get one invocation per row; wider rows one workgroup.
pub const NARROW_CLASSES: usize = 64;

/// Softmax cross-entropy of rows of at most [`NARROW_CLASSES`] classes, one invocation per
/// row: `dlogits = (softmax(z) − onehot(label))·gscale`, and workgroup `w` writes
/// `out[w] = lscale · Σ_rows (ln Σ_j e^(z_j − max) − (z_label − max))`. A label `≥ classes`
/// marks a row to ignore: no loss, zero gradient.
#[kernel(workgroup = 256)]
pub fn softmax_xent_narrow(
    classes: u32,
    lscale: f32,
    gscale: f32,
    logits: &[f32],
    labels: &[u32],
    dlogits: &mut [f32],
    out: &mut [f32],
) {
    let s = shared::<f32, 256>();
    let t = local_id().x;
    let rows = labels.len();
    let stride = global_size().x;
    let mut acc = 0.0;
    let mut r = global_id().x;
    while r < rows {
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
    partial_sum(s, t, acc, lscale, out, workgroup_id().x);
}

/// Step 2 of [`crate::reduce`]'s order for a loss: the workgroup's accumulators `acc` (of
/// invocations `t`) summed in `s`, and `out[w] = scale · Σ acc` written by invocation 0.
#[device]
fn partial_sum(s: &mut [f32; 256], t: u32, acc: f32, scale: f32, out: &mut [f32], w: u32) {
    s[t] = acc;
    let total = tree_sum(s, t);
    if t == 0 {
        out[w] = total * scale;
    }
}

/// Softmax cross-entropy of wide rows, one workgroup per row (rows `w, w + G, …`): the row's
/// max and sum of exponentials are tree reductions in workgroup memory. Outputs as in
/// [`softmax_xent_narrow`].
#[kernel(workgroup = 256)]
pub fn softmax_xent_wide(
    classes: u32,
    lscale: f32,
    gscale: f32,
    logits: &[f32],
    labels: &[u32],
    dlogits: &mut [f32],
    out: &mut [f32],
) {
    let s = shared::<f32, 256>();
    let t = local_id().x;
    let rows = labels.len();
    let mut acc = 0.0;
    let mut r = workgroup_id().x;
    while r < rows {
        let base = r * classes;
        let mut mx = f32::NEG_INFINITY;
        let mut j = t;
        while j < classes {
            mx = max(mx, logits[base + j]);
            j += 256u32;
        }
        s[t] = mx;
        let m = tree_max(s, t);
        barrier();
        let mut sum = 0.0;
        j = t;
        while j < classes {
            sum += exp(logits[base + j] - m);
            j += 256u32;
        }
        s[t] = sum;
        let total = tree_sum(s, t);
        barrier();
        let lab = labels[r];
        let valid = lab < classes;
        j = t;
        while j < classes {
            let p = exp(logits[base + j] - m) / total;
            let y = if j == lab { 1.0 } else { 0.0 };
            dlogits[base + j] = if valid { (p - y) * gscale } else { 0.0 };
            j += 256u32;
        }
        if t == 0 && valid {
            acc += log(total) - (logits[base + lab] - m);
        }
        r += num_workgroups().x;
    }
    if t == 0 {
        out[workgroup_id().x] = acc * lscale;
    }
}

/// Mean squared error pass: workgroup `w` writes `out[w] = lscale · Σ (p − y)²` over its
/// grid-stride share (order of [`crate::reduce`]), and, when `write_grad`, `grad = gscale ·
/// (p − y)` (added to `grad` when `accumulate`).
#[kernel(workgroup = 256)]
pub fn mse_pass(
    lscale: f32,
    gscale: f32,
    write_grad: bool,
    accumulate: bool,
    pred: &[f32],
    target: &[f32],
    grad: &mut [f32],
    out: &mut [f32],
) {
    let s = shared::<f32, 256>();
    let t = local_id().x;
    let n = pred.len();
    let stride = global_size().x;
    let mut acc = 0.0;
    let mut i = global_id().x;
    while i < n {
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
    partial_sum(s, t, acc, lscale, out, workgroup_id().x);
}

/// `grad = gscale · (p − y)` (added to `grad` when `accumulate`): the MSE gradient alone.
#[kernel(workgroup = 256)]
pub fn mse_grad(gscale: f32, accumulate: bool, pred: &[f32], target: &[f32], grad: &mut [f32]) {
    let n = grad.len();
    let stride = global_size().x;
    let mut i = global_id().x;
    while i < n {
        let mut g = gscale * (pred[i] - target[i]);
        if accumulate {
            g += grad[i];
        }
        grad[i] = g;
        i += stride;
    }
}

/// Workgroups of a cross-entropy launch over `rows` rows of `classes` classes.
fn xent_groups(rows: usize, classes: usize) -> u32 {
    if classes <= NARROW_CLASSES {
        if rows <= 4096 {
            1
        } else {
            rows.div_ceil(1024).min(256) as u32
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
    let rows = labels.len();
    expect_len(op, "loss", loss.len(), 1)?;
    if rows == 0 || logits.len() % rows != 0 {
        return Err(Error::Shape(format!(
            "{op}: {} logits are not {rows} rows",
            logits.len()
        )));
    }
    let classes = logits.len() / rows;
    expect_len(op, "dlogits", dlogits.len(), logits.len())?;
    u32_of("logits", logits.len())?;
    let lscale = 1.0 / rows as f32;
    let g = xent_groups(rows, classes);
    let grid = Grid::workgroups(g);
    let narrow = classes <= NARROW_CLASSES;
    let classes = classes as u32;
    into_loss(cx, op, g, loss, ws, |out| {
        if narrow {
            softmax_xent_narrow::launch(
                cx, grid, classes, lscale, grad_scale, logits, labels, dlogits, out,
            )
        } else {
            softmax_xent_wide::launch(
                cx, grid, classes, lscale, grad_scale, logits, labels, dlogits, out,
            )
        }
    })
}

/// Runs `pass`, a launch of `g` workgroups each writing its part of a loss, into `loss` when
/// `g == 1`, else into the first `g` elements of `ws`, which a second launch sums into `loss`.
fn into_loss<C: Launch + ?Sized>(
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
    reduce_all::launch(cx, Grid::workgroups(1), 0u32, 0u32, 0.0f32, &partials, loss)
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
    into_loss(cx, op, g, loss, ws, |out| {
        mse_pass::launch(
            cx, grid, lscale, gscale, write, accumulate, pred, target, grad, out,
        )
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
