//! Recorded training steps for an MLP classifier (softmax cross-entropy, AdamW), built from
//! the kernel library: the step the README's main job, the examples, the benchmarks and the
//! accumulation tests share.
//!
//! Three recorded steps over the same flat state (parameters, gradients, AdamW moments and
//! step counter, each one allocation):
//! - [`TrainStep`]: forward, loss, backward and AdamW in one recording (one replay per update);
//! - [`MicroStep`]: forward, loss and backward of one micro-batch, adding into the gradients or
//!   overwriting them — the mode is a per-step device scalar, so switching it never recaptures;
//! - [`ApplyStep`]: the AdamW update alone, its own recording, run after the last micro-batch.
//!
//! With `--features nccl`, `DpTrainStep` is [`TrainStep`] for one rank of a data-parallel
//! run: the gradients' mean over ranks is an all-reduce recorded between backward and AdamW.
//!
//! Gradient accumulation over `k` micro-batches is `MicroStep` with `accumulate = false` for the
//! first micro-batch and `true` after, each with `grad_scale = 1 / (rows · k)`, then
//! `ApplyStep`: the gradients equal those of one batch of all `k · rows` rows (up to
//! floating-point summation order), and replay equals eager bitwise.

use crate::layers::{Mlp, MlpActivations};
use graphed_kernels::optim::{Adam, AdamConfig, AdamW, GradClip};
use graphed_kernels::scaler::LossScaler;
use graphed_macros::{graphed, State};
use graphed_runtime::blas::Math;
use graphed_runtime::{Buffer, Device, Input, Output, Result, Scalar, Step};

/// The persistent state of an MLP classifier trained with AdamW: every buffer a step updates,
/// passed to the steps as one `#[state]` value. Each buffer's allocation and the layer widths
/// are part of the capture key.
#[derive(State)]
pub struct Classifier {
    /// Layer widths, input first, classes last (structural: part of the key).
    #[state(key)]
    pub sizes: Vec<usize>,
    /// All parameters (flat; see [`Mlp`] for the layout).
    pub params: Buffer<f32>,
    /// All gradients (same layout).
    pub grads: Buffer<f32>,
    /// AdamW's first and second moments (`m` then `v`).
    pub moments: Buffer<f32>,
    /// AdamW's device step counter (its skip word set by the loss scaler's overflow check).
    pub count: Buffer<u32>,
    /// The loss scale of the `f16` step ([`crate::mixed`]; unused at other precisions).
    pub scale: Buffer<f32>,
    /// Good `f16` steps since the loss scale last changed.
    pub good_steps: Buffer<u32>,
    /// AdamW's constants (β₁, β₂, ε, weight decay).
    #[state(skip)]
    pub config: AdamConfig,
}

impl Classifier {
    /// A classifier with widths `sizes`, initialised as `torch.nn.Linear` from `seed`, with
    /// PyTorch's AdamW defaults (β = 0.9, 0.999; ε = 1e-8; weight decay 0.01).
    pub fn new(device: &Device, sizes: &[usize], seed: u64) -> Result<Classifier> {
        let mlp = Mlp::new(device, sizes, seed)?;
        let n = Mlp::param_count(sizes);
        let config = AdamW::default_config();
        let opt = AdamW::new(device, n, config)?;
        let scaler = LossScaler::new(device, crate::mixed::SCALER)?;
        Ok(Classifier {
            sizes: sizes.to_vec(),
            params: mlp.params().clone(),
            grads: mlp.grads().clone(),
            moments: opt.moments().clone(),
            count: opt.count().clone(),
            scale: scaler.scale_buffer().clone(),
            good_steps: scaler.good_steps_buffer().clone(),
            config,
        })
    }

    /// A deep copy (new allocations with the same contents), e.g. to run eager beside replay.
    pub fn duplicate(&self) -> Result<Classifier> {
        let copy = |b: &Buffer<f32>| -> Result<Buffer<f32>> {
            let c = b.device().alloc::<f32>(b.len())?;
            c.copy_from(b)?;
            Ok(c)
        };
        let copy_u32 = |b: &Buffer<u32>| -> Result<Buffer<u32>> {
            let c = b.device().alloc::<u32>(b.len())?;
            c.copy_from(b)?;
            Ok(c)
        };
        Ok(Classifier {
            sizes: self.sizes.clone(),
            params: copy(&self.params)?,
            grads: copy(&self.grads)?,
            moments: copy(&self.moments)?,
            count: copy_u32(&self.count)?,
            scale: copy(&self.scale)?,
            good_steps: copy_u32(&self.good_steps)?,
            config: self.config,
        })
    }

    /// Class scores for `x` (`rows × sizes[0]`), computed eagerly: `rows × classes` values.
    pub fn logits(&self, x: &Buffer<f32>) -> Result<Vec<f32>> {
        let device = x.device();
        let rows = x.len() / self.sizes[0];
        let mlp = Mlp::from_buffers(&self.sizes, self.params.clone(), self.grads.clone())?;
        let mut acts = MlpActivations::new(&mlp, rows, |n| device.alloc(n))?;
        mlp.forward(device, x, &mut acts)?;
        acts.logits().to_host()
    }

    /// The fraction of rows whose highest score is the label.
    pub fn accuracy(&self, x: &Buffer<f32>, labels: &[u32]) -> Result<f64> {
        let classes = *self.sizes.last().expect("an MLP has layers");
        let logits = self.logits(x)?;
        let right = logits
            .chunks(classes)
            .zip(labels)
            .filter(|(row, &label)| {
                let best = row
                    .iter()
                    .enumerate()
                    .fold(0, |b, (i, v)| if *v > row[b] { i } else { b });
                best as u32 == label
            })
            .count();
        Ok(right as f64 / labels.len().max(1) as f64)
    }
}

/// Forward, loss and backward of one batch into the flat gradients; returns the loss buffer.
fn forward_backward(
    cx: &Step,
    sizes: &[usize],
    params: &Buffer<f32>,
    grads: &Buffer<f32>,
    x: &Buffer<f32>,
    labels: &Buffer<u32>,
    accumulate: impl graphed_runtime::IntoScalarArg<bool>,
    grad_scale: impl graphed_runtime::IntoScalarArg<f32>,
    math: Math,
) -> Result<Output<f32>> {
    let rows = labels.len();
    let mut accumulate = graphed_runtime::IntoScalarArg::into_scalar_arg(accumulate);
    if graphed_runtime::__private::mutation("force_overwrite") {
        // Mutation testing only: every micro-batch overwrites the gradients.
        accumulate = false.into();
    }
    let mut mlp = Mlp::from_buffers(sizes, params.clone(), grads.clone())?.with_math(math);
    let mut acts = MlpActivations::new(&mlp, rows, |n| cx.workspace(n))?;
    let mut loss = cx.output::<f32>(1)?;
    let mut ws = cx.workspace::<f32>(mlp.loss_workspace_len(rows).max(1))?;
    mlp.train_pass(
        cx, x, labels, &mut acts, &mut loss, &mut ws, grad_scale, accumulate,
    )?;
    Ok(loss)
}

fn adamw(config: AdamConfig, moments: &Buffer<f32>, count: &Buffer<u32>) -> Result<Adam> {
    Adam::from_state(config, true, moments.clone(), count.clone())
}

/// One full training update of an MLP classifier: forward, mean softmax cross-entropy,
/// backward and AdamW (PyTorch's defaults, weight decay 0.01), recorded as one plan.
/// The model's layer widths are part of its key.
#[graphed]
pub fn train_step(
    cx: &mut Step,
    #[state] model: &mut Classifier,
    x: &Input<f32>,
    labels: &Input<u32>,
    lr: f32,
) -> Result<Output<f32>> {
    update(cx, model, x, labels, lr, Math::F32)
}

/// [`train_step`]'s body, its vendor-BLAS products multiplied as `math`.
pub(crate) fn update(
    cx: &Step,
    m: &mut Classifier,
    x: &Buffer<f32>,
    labels: &Buffer<u32>,
    lr: Scalar<f32>,
    math: Math,
) -> Result<Output<f32>> {
    let rows = labels.len().max(1);
    let loss = forward_backward(
        cx,
        &m.sizes,
        &m.params,
        &m.grads,
        x,
        labels,
        false,
        1.0 / rows as f32,
        math,
    )?;
    adamw(AdamW::default_config(), &m.moments, &m.count)?.step(cx, &mut m.params, &m.grads, lr)?;
    Ok(loss)
}

/// Forward, loss and backward of one micro-batch. `accumulate` (add into the gradients, or
/// overwrite them for the first micro-batch) and `grad_scale` are per-step device scalars.
#[graphed]
pub fn micro_step(
    cx: &mut Step,
    #[state] model: &mut Classifier,
    x: &Input<f32>,
    labels: &Input<u32>,
    accumulate: bool,
    grad_scale: f32,
) -> Result<Output<f32>> {
    let m = model;
    forward_backward(
        cx,
        &m.sizes,
        &m.params,
        &m.grads,
        x,
        labels,
        accumulate,
        grad_scale,
        Math::F32,
    )
}

/// The AdamW update alone (after the last micro-batch): its own recording.
#[graphed]
pub fn apply_step(cx: &mut Step, #[state] model: &mut Classifier, lr: f32) -> Result<()> {
    let m = model;
    adamw(AdamW::default_config(), &m.moments, &m.count)?.step(cx, &mut m.params, &m.grads, lr)
}

/// Forward, loss, backward, gradient-norm clipping and AdamW for one incoming batch (an
/// inference-time adaptation update). Returns the loss and a snapshot of the gradient taken
/// *before* clipping — a runtime-owned copy inside the recording, so the clipped state and
/// the gradient handed out can never be confused. `partials` and `norm` are the clipper's
/// device workspace (see [`GradClip::from_buffers`]).
#[graphed]
pub fn adapt_step(
    cx: &mut Step,
    #[state] model: &mut Classifier,
    #[state] partials: &mut Buffer<f32>,
    #[state] norm: &mut Buffer<f32>,
    x: &Input<f32>,
    labels: &Input<u32>,
    lr: f32,
    max_norm: f32,
) -> Result<(Output<f32>, Output<f32>)> {
    let rows = labels.len().max(1);
    let m = model;
    let loss = forward_backward(
        cx,
        &m.sizes,
        &m.params,
        &m.grads,
        x,
        labels,
        false,
        1.0 / rows as f32,
        Math::F32,
    )?;
    let raw = cx.snapshot(&m.grads)?;
    let mut clip = GradClip::from_buffers(m.grads.len(), partials.clone(), norm.clone())?;
    clip.clip(cx, &mut m.grads, max_norm)?;
    adamw(AdamConfig::default(), &m.moments, &m.count)?.step(cx, &mut m.params, &m.grads, lr)?;
    Ok((loss, raw))
}

/// One data-parallel training update on one rank: forward, mean softmax cross-entropy and
/// backward of this rank's share of the batch, then the gradients' mean over the ranks of
/// `comm` (an NCCL all-reduce recorded into the rank's graph between backward and the
/// optimizer), then AdamW as in [`train_step`]. Every rank ends the step with the same
/// gradients, hence the same weights; with equal shares, the update equals [`train_step`]'s on
/// the whole batch up to floating-point summation order. The loss returned is this rank's
/// share's. The layer widths and the communicator are structural.
#[cfg(feature = "nccl")]
#[graphed]
pub fn dp_train_step(
    cx: &mut Step,
    #[state] model: &mut Classifier,
    x: &Input<f32>,
    labels: &Input<u32>,
    lr: f32,
    #[key] comm: &graphed_runtime::Communicator,
) -> Result<Output<f32>> {
    let rows = labels.len().max(1);
    let m = model;
    let loss = forward_backward(
        cx,
        &m.sizes,
        &m.params,
        &m.grads,
        x,
        labels,
        false,
        1.0 / rows as f32,
        Math::F32,
    )?;
    cx.all_reduce(comm, &mut m.grads, graphed_runtime::ReduceOp::Mean)?;
    adamw(AdamW::default_config(), &m.moments, &m.count)?.step(cx, &mut m.params, &m.grads, lr)?;
    Ok(loss)
}
