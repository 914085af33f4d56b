//! A classifier's head in one launch: the logits of its last linear layer, their mean softmax
//! cross-entropy and its gradient, and the gradient with respect to the layer's input (gated
//! by the previous layer's activation derivative) — what a training step otherwise runs as
//! three launches one after another (the product, [`crate::loss::softmax_cross_entropy`], the
//! input-gradient product), each waiting for the one before.
//!
//! For rows of at most [`HEAD_CLASSES`] classes. A workgroup takes [`HEAD_ROWS`] rows at a
//! time, 32 invocations a row:
//! 1. invocation `lane` of a row adds `h[r, j]·W[c, j]` over `j = lane, lane + 32, …` (in
//!    that order) for every class `c`; the 32 partial sums of each logit are added as four
//!    chains (lanes `q, q + 4, …` for `q < 4`, in order), `(0 + 1) + (2 + 3)`, then the bias;
//! 2. one invocation a row takes the softmax and its gradient as
//!    [`crate::loss::softmax_cross_entropy`] does (`dlogits = (softmax − onehot)·gscale`; a
//!    label `≥ classes` is ignored: no loss, zero gradient);
//! 3. `dh[r, j] = Σ_c dlogits[r, c]·W[c, j]` (classes in order), times `gate′(aux[r, j])`.
//!
//! The loss is `lscale ·` the workgroup's row terms in row order; more than one workgroup
//! writes partial sums that a second launch adds ([`crate::reduce`]'s order), off the
//! backward pass's path. The weight and bias gradients of the head are left to the caller
//! (a product of `dlogits` and `h` that can run beside the rest of the backward pass).
//!
//! Every sum has an order fixed by the shapes, so replay equals eager bitwise; the values
//! differ from the three launches' in the order of the logits' sums (within the products'
//! tolerance).

use graphed_macros::kernel;
use graphed_runtime::{Buffer, Error, Grid, IntoScalarArg, Launch, Result};

use crate::elementwise::Act;
use crate::helpers::activate_backward;
use crate::loss::{into_loss, softmax_row};
use crate::shape::{expect_len, u32_of};

/// Most classes [`linear_cross_entropy`] takes (the partial sums of 8 rows × 12 classes × 32
/// lanes fill 12 KiB of workgroup memory, under WebGPU's 16 KiB default).
pub const HEAD_CLASSES: usize = 12;

/// The largest head input (`rows × k` elements of `h`) that a training step fuses into
/// [`linear_cross_entropy`]. Measured on an H100 (BENCHMARKS.md, seventh session of
/// 2026-12-07, the fused step against 1ddb0d4's three launches in one call): MLP-S's head (64
/// rows × 256) 43.59 → 42.25 µs a replayed step with PDL (44.04 → 44.31 without), MLP-M's
/// (512 × 1024) 428.2 → 467.4 µs, slower. Not profiled; the likely cause is that the one
/// launch's 64 workgroups each take 8 rows through every class, where the three launches
/// spread the larger product over the GPU.
pub const HEAD_FUSE_MAX_INPUT: usize = 65_536;

/// Rows a workgroup of [`linear_xent`](mod@linear_xent) takes at a time.
pub const HEAD_ROWS: usize = 8;

/// Most workgroups one launch takes (each loops over its blocks of rows past it).
const MAX_GROUPS: usize = 1024;

#[kernel(workgroup = 256)]
#[allow(clippy::too_many_arguments)]
/// The head of `rows = labels.len()` rows (module docs): `h` is `rows × k`, `w` is `classes ×
/// k` (`torch.nn.Linear`'s layout), `b` has `classes`; writes `logits` and `dlogits` (`rows ×
/// classes`), `dh` (`rows × k`, times `gate′(aux)` when `gate != 0`, an [`Act::code`]) and
/// `out[w] = lscale · Σ` the loss terms of workgroup `w`'s rows (blocks of 8 rows `w, w + G,
/// …`).
pub fn linear_xent(
    k: u32,
    classes: u32,
    gate: u32,
    lscale: f32,
    gscale: f32,
    h: &[f32],
    w: &[f32],
    b: &[f32],
    labels: &[u32],
    aux: &[f32],
    logits: &mut [f32],
    dlogits: &mut [f32],
    dh: &mut [f32],
    out: &mut [f32],
) {
    let part = shared::<f32, 3072>();
    let terms = shared::<f32, 8>();
    let t = local_id().x;
    let lane = t % 32u32;
    let slot = t / 32u32;
    let rows = labels.len();
    let mut total = 0.0;
    let mut r0 = workgroup_id().x * 8u32;
    while r0 < rows {
        // 1. Row `r0 + slot`'s partial dot products over this lane's `j`, four `j` at a time
        //    with their loads issued together (then added in order of `j`).
        let r = r0 + slot;
        let mut acc = [0.0f32; 12];
        if r < rows {
            let mut j = lane;
            while j < k {
                let mut xs = [0.0f32; 4];
                let mut ws = [0.0f32; 48];
                for u in 0..4u32 {
                    let ju = j + u * 32u32;
                    if ju < k {
                        xs[u] = h[r * k + ju];
                        for c in 0..12u32 {
                            if c < classes {
                                ws[u * 12u32 + c] = w[c * k + ju];
                            }
                        }
                    }
                }
                for u in 0..4u32 {
                    if j + u * 32u32 < k {
                        for c in 0..12u32 {
                            if c < classes {
                                acc[c] += xs[u] * ws[u * 12u32 + c];
                            }
                        }
                    }
                }
                j += 128u32;
            }
        }
        for c in 0..12u32 {
            part[(slot * 12u32 + c) * 32u32 + lane] = acc[c];
        }
        barrier();
        // 2. Logit (row t / 12, class t % 12): the 32 lanes' sums as four chains of eight
        //    (lanes q, q + 4, …), added as (0 + 1) + (2 + 3), then the bias; into `part[t]`
        //    once every sum has been read.
        let mut v = 0.0;
        let row = r0 + t / 12u32;
        let c = t % 12u32;
        let live = t < 96u32 && row < rows && c < classes;
        if live {
            let mut qs = [0.0f32; 4];
            for i in 0..8u32 {
                for q in 0..4u32 {
                    qs[q] += part[t * 32u32 + i * 4u32 + q];
                }
            }
            v = (qs[0] + qs[1]) + (qs[2] + qs[3]) + b[c];
            logits[row * classes + c] = v;
        }
        barrier();
        if live {
            part[t] = v;
        }
        barrier();
        // 3. Row r0 + t's softmax, loss term and gradient (left in `part` for step 4).
        if t < 8u32 {
            let row = r0 + t;
            let mut term = 0.0;
            if row < rows {
                let o = t * 12u32;
                term = softmax_row(part, o, classes, labels[row], gscale);
                for j in 0..classes {
                    dlogits[row * classes + j] = part[o + j];
                }
            }
            terms[t] = term;
        }
        barrier();
        if t == 0u32 {
            for i in 0..8u32 {
                total += terms[i];
            }
        }
        // 4. Columns t, t + 256, … of the block's input gradients.
        let mut j = t;
        while j < k {
            let mut wv = [0.0f32; 12];
            for c in 0..12u32 {
                if c < classes {
                    wv[c] = w[c * k + j];
                }
            }
            for rr in 0..8u32 {
                let row = r0 + rr;
                if row < rows {
                    let mut s = 0.0;
                    for c in 0..12u32 {
                        if c < classes {
                            s += part[rr * 12u32 + c] * wv[c];
                        }
                    }
                    let at = row * k + j;
                    if gate != 0u32 {
                        s = activate_backward(gate, aux[at], s);
                    }
                    dh[at] = s;
                }
            }
            j += 256u32;
        }
        // The next block overwrites `part` and `terms`.
        barrier();
        r0 += num_workgroups().x * 8u32;
    }
    if t == 0u32 {
        out[workgroup_id().x] = total * lscale;
    }
}

/// Workgroups of [`linear_cross_entropy`] over `rows` rows.
fn head_groups(rows: usize) -> u32 {
    rows.div_ceil(HEAD_ROWS).clamp(1, MAX_GROUPS) as u32
}

/// Workspace elements [`linear_cross_entropy`] needs for `rows` rows (0 when one launch
/// suffices: at most [`HEAD_ROWS`] rows).
pub fn head_workspace_len(rows: usize) -> usize {
    match head_groups(rows) {
        1 => 0,
        g => g as usize,
    }
}

/// The outputs of [`linear_cross_entropy`].
pub struct HeadOut<'a> {
    /// `rows × classes` logits, `h·Wᵀ + b`.
    pub logits: &'a mut Buffer<f32>,
    /// `rows × classes`: the loss's gradient with respect to the logits, times `grad_scale`.
    pub dlogits: &'a mut Buffer<f32>,
    /// `rows × k`: the gradient with respect to `h`, `dlogits·W`, gated.
    pub dh: &'a mut Buffer<f32>,
    /// One element: the mean loss.
    pub loss: &'a mut Buffer<f32>,
    /// Partial sums of the loss ([`head_workspace_len`]; may be empty for one workgroup).
    pub ws: &'a mut Buffer<f32>,
}

/// A linear layer's logits `h·Wᵀ + b` (`h`: `labels.len() × k`, `w`: `classes × k`, `b`:
/// `classes`), their mean softmax cross-entropy against `labels` into `out.loss`, its gradient
/// with respect to the logits times `grad_scale` (a constant or a per-step scalar; `1/rows`
/// for the mean) into `out.dlogits`, and `out.dh = dlogits·W` times `gate.0′(gate.1)` when
/// given (the previous layer's activation derivative, at its output for ReLU, as
/// [`crate::matmul::Epilogue::gate`]). One launch (two past [`HEAD_ROWS`] rows: the loss's
/// partial sums are added by a second, which nothing in the backward pass waits for). The
/// module docs give the order of every sum.
///
/// # Errors
/// [`Error::Shape`] for more than [`HEAD_CLASSES`] classes, no rows, and buffers whose lengths
/// do not match. Every backend runs it.
pub fn linear_cross_entropy<C: Launch + ?Sized>(
    cx: &C,
    h: &Buffer<f32>,
    w: &Buffer<f32>,
    b: &Buffer<f32>,
    labels: &Buffer<u32>,
    gate: Option<(Act, &Buffer<f32>)>,
    out: HeadOut<'_>,
    grad_scale: impl IntoScalarArg<f32>,
) -> Result<()> {
    let op = "linear_cross_entropy";
    let rows = labels.len();
    let classes = b.len();
    if rows == 0 || classes == 0 || classes > HEAD_CLASSES {
        return Err(Error::Shape(format!(
            "{op}: {rows} rows of {classes} classes; it takes at least one row and 1 to \
             {HEAD_CLASSES} classes (softmax_cross_entropy takes more)"
        )));
    }
    if w.len() % classes != 0 || w.is_empty() {
        return Err(Error::Shape(format!(
            "{op}: `w` has {} elements, not {classes} rows",
            w.len()
        )));
    }
    let k = w.len() / classes;
    expect_len(op, "h", h.len(), rows * k)?;
    expect_len(op, "logits", out.logits.len(), rows * classes)?;
    expect_len(op, "dlogits", out.dlogits.len(), rows * classes)?;
    expect_len(op, "dh", out.dh.len(), rows * k)?;
    expect_len(op, "loss", out.loss.len(), 1)?;
    let (code, aux) = match gate {
        Some((act, aux)) => {
            expect_len(op, "gate", aux.len(), rows * k)?;
            (act.code(), aux)
        }
        None => (0, h),
    };
    u32_of("h", h.len())?;
    let (k, c) = (u32_of("k", k)?, classes as u32);
    let lscale = 1.0 / rows as f32;
    let gs = grad_scale.into_scalar_arg();
    let g = head_groups(rows);
    let grid = Grid::workgroups(g);
    let HeadOut {
        logits,
        dlogits,
        dh,
        loss,
        ws,
    } = out;
    into_loss(cx, op, g, loss, ws, |part| {
        linear_xent::launch(
            cx, grid, k, c, code, lscale, gs, h, w, b, labels, aux, logits, dlogits, dh, part,
        )
    })
}
