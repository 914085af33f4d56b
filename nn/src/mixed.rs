//! Mixed-precision training of an MLP classifier: fp32 master weights, gradients and AdamW
//! state, 16-bit (`bf16` or `f16`) activations and operands of every matrix product with
//! `f32` accumulation (cuBLAS's tensor cores inside the CUDA capture; the rounding reference
//! on the host), `f32` logits, loss, bias and reductions — PyTorch's autocast recipe. For `f16`,
//! dynamic loss scaling runs inside the recorded step ([`graphed_kernels::scaler`]): an
//! overflow skips the AdamW update and halves the scale with no host synchronisation.
//!
//! [`Precision`] is a structural argument: switching it records another plan. `F32` is
//! `graphed::train::train_step`'s step; `Tf32` is the same step with the vendor
//! BLAS's products opted in to TF32 (products the DSL kernels run stay full `f32`).
//!
//! Activations are kept in 16 bits only, as autocast keeps them: each hidden layer's output
//! is the next product's operand and, backward, its ReLU gate (`y > 0`, read from the 16-bit
//! `y`). The hidden layers add their bias at its 16-bit value (autocast's rounding too); the
//! input gradients are products into 16 bits; the bias gradients are the column sums of the
//! 16-bit `dz`, added in `f32`.
//!
//! One step of `L` layers in 16 bits is `3L + 1` launches where the products fuse their
//! bias and ReLU (CUDA: cuBLASLt) and `5L` elsewhere (`f16`: 2 more each; past 1024 rows the
//! loss takes one launch more), and `3L − 1` library calls (MLP-M, `L = 5`: 16 launches on
//! CUDA and 14 calls; before the 16-bit activations it was `4L` on CUDA, before the fused
//! launches `5L + 2`), in order:
//! the casts of layer 0's weights and bias and of the input in one launch ([`cast_two`]),
//! and of each further layer's in a launch of its own issued a layer ahead, which the
//! graph runs beside the products before it ([`cast`]);
//! per layer a 16-bit product with its bias and activation, into the 16-bit activation (the
//! logits into `f32`, with the `f32` bias) — one library call where the bias and ReLU fuse
//! into it, else the product into `f32` and one launch for the bias, activation and
//! rounding, after one widening the 16-bit bias ([`matmul_half_bias_act`]); the loss and its
//! gradient `dz` with `dz`'s 16-bit copy, for `f16` times the loss scale
//! ([`softmax_cross_entropy_cast`]; past [`NARROW_CLASSES`] classes the loss, then the scale
//! and cast, [`LossScaler::scale_cast`], one launch more);
//! per layer backward the weight gradient as a 16-bit product into the `f32` gradients, the
//! bias gradient as a [`column_sums`] launch the graph runs beside the products, and (but
//! the first) the input gradient as a product into 16 bits, gated in place by the layer
//! below's ReLU ([`relu_gate`]);
//! then (`f16`) the unscale-and-check, AdamW, and (`f16`) the scale update. Each fused
//! call rounds as its separate launches do, up to the order the library adds in.

use graphed_kernels::elementwise::{cast_two, relu_gate, Act};
use graphed_kernels::loss::{
    softmax_cross_entropy_cast, softmax_cross_entropy_scaled, xent_workspace_len, NARROW_CLASSES,
};
use graphed_kernels::matmul::{column_sums, matmul_half, matmul_half_bias_act, Gemm};
use graphed_kernels::optim::AdamW;
use graphed_kernels::scaler::{LossScaler, ScalerConfig};
use graphed_macros::graphed;
use graphed_runtime::blas::Math;
use graphed_runtime::cast::cast;
use graphed_runtime::{bf16, f16, Buffer, Element, Error, Input, Output, Result, Scalar, Step};

use crate::layers::Mlp;
use crate::train::Classifier;

/// The precision of a training step's products and activations (structural: part of the
/// capture key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// Everything `f32` (the default; no TF32).
    #[default]
    F32,
    /// `f32` storage, vendor-BLAS products in TF32 (an explicit opt-in).
    Tf32,
    /// `bf16` activations and product operands, `f32` accumulation, no loss scaling.
    Bf16,
    /// `f16` activations and product operands, `f32` accumulation, dynamic loss scaling.
    F16,
}

impl Precision {
    /// Parses `f32`, `tf32`, `bf16` or `f16` (a command-line value).
    pub fn parse(s: &str) -> Option<Precision> {
        Some(match s {
            "f32" | "fp32" => Precision::F32,
            "tf32" => Precision::Tf32,
            "bf16" => Precision::Bf16,
            "f16" | "fp16" => Precision::F16,
            _ => return None,
        })
    }

    /// The name [`Precision::parse`] takes.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Tf32 => "tf32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        }
    }
}

/// The loss scaler's constants of the `f16` step (PyTorch's `GradScaler` defaults).
pub const SCALER: ScalerConfig = ScalerConfig {
    init_scale: 65536.0,
    growth: 2.0,
    backoff: 0.5,
    growth_interval: 2000,
};

/// One training update at `precision`: forward, mean softmax cross-entropy, backward and
/// AdamW (PyTorch's defaults, weight decay 0.01) on the fp32 master state of `model`,
/// recorded as one plan per precision (module docs for the launches: `bf16` MLP-M is 16
/// launches and 14 cuBLAS products per step on CUDA, 25 and 14 on the host; `f16` 2 more).
#[graphed]
pub fn mixed_train_step(
    cx: &mut Step,
    #[state] model: &mut Classifier,
    x: &Input<f32>,
    labels: &Input<u32>,
    lr: f32,
    #[key] precision: Precision,
) -> Result<Output<f32>> {
    match precision {
        Precision::F32 | Precision::Tf32 => {
            let math = if precision == Precision::Tf32 {
                Math::Tf32
            } else {
                Math::F32
            };
            crate::train::update(cx, model, x, labels, lr, math)
        }
        Precision::Bf16 => update_16::<bf16>(cx, model, x, labels, lr, false),
        Precision::F16 => update_16::<f16>(cx, model, x, labels, lr, true),
    }
}

/// The 16-bit update: `H` is `bf16` or `f16`; `scaled` adds dynamic loss scaling.
fn update_16<H: Element>(
    cx: &Step,
    m: &mut Classifier,
    x: &Buffer<f32>,
    labels: &Buffer<u32>,
    lr: Scalar<f32>,
    scaled: bool,
) -> Result<Output<f32>> {
    let rows = labels.len().max(1);
    let sizes = m.sizes.clone();
    let mlp = Mlp::from_buffers(&sizes, m.params.clone(), m.grads.clone())?;
    let layers = mlp.layers();
    let last = layers.len() - 1;
    let classes = *sizes.last().expect("an MLP has layers");
    // The backward gates from the 16-bit outputs, which only ReLU's derivative can be read
    // from: refuse other hidden activations before anything is launched.
    if let Some(other) = layers[..last]
        .iter()
        .map(|l| l.act)
        .find(|a| !matches!(a, Act::Relu | Act::Identity))
    {
        return Err(Error::Launch {
            kernel: "mixed_train_step",
            reason: format!("a 16-bit step gates ReLU or no activation, not {other:?}"),
        });
    }

    // 16-bit copies of the weights and of the input: layer 0's weights with the input in
    // one launch, every other layer's weights in a launch of their own, issued a layer ahead
    // (it depends on the master weights alone, so the graph runs it beside the products
    // before it). One launch for all the weights ran first, on the step's critical path:
    // 12–14.5 µs of bf16 MLP-M's step on the H200.
    let p16 = cx.workspace::<H>(m.params.len())?;
    let mut x16 = cx.workspace::<H>(x.len())?;
    // A layer's weights and its bias (stored right after them) are one range: the hidden
    // layers' products add the 16-bit bias, as autocast does.
    let weights = |l: usize| {
        let (w, _) = mlp.offsets(l);
        w..w + layers[l].outputs * layers[l].inputs
    };
    let layer_range = |l: usize| {
        let (w, b) = mlp.offsets(l);
        w..b + layers[l].outputs
    };
    let w16 = |l: usize| -> Result<Buffer<H>> { p16.slice(weights(l)) };
    let b16 = |l: usize| -> Result<Buffer<H>> {
        let (_, b) = mlp.offsets(l);
        p16.slice(b..b + layers[l].outputs)
    };
    let cast_layer = |l: usize| -> Result<(Buffer<f32>, Buffer<H>)> {
        Ok((m.params.slice(layer_range(l))?, p16.slice(layer_range(l))?))
    };
    let (l0, mut l0_16) = cast_layer(0)?;
    cast_two(cx, &l0, &mut l0_16, x, &mut x16)?;

    // Forward: each hidden layer's activation in 16 bits only (the next layer's operand, and
    // its ReLU gate backward), the logits in f32. Bias and activation fuse into the product's
    // library call where they can (cuBLASLt on CUDA: the product writes the 16-bit
    // activation directly), else the product into f32, then one launch with the bias,
    // activation and rounding.
    let mut acts16: Vec<Buffer<H>> = Vec::new();
    let mut logits = cx.workspace::<f32>(rows * classes)?;
    for (l, layer) in layers.iter().enumerate() {
        if l < last {
            let (w, mut w16) = cast_layer(l + 1)?;
            cast(cx, &w, &mut w16)?;
        }
        let input = if l == 0 { &x16 } else { &acts16[l - 1] };
        let g = Gemm::nt(rows, layer.outputs, layer.inputs);
        if l == last {
            let (_, b) = mlp.weight_and_bias(l)?;
            matmul_half_bias_act(cx, g, input, &w16(l)?, &mut logits, &b, layer.act)?;
        } else {
            let mut y16 = cx.workspace::<H>(rows * layer.outputs)?;
            matmul_half_bias_act(cx, g, input, &w16(l)?, &mut y16, &b16(l)?, layer.act)?;
            acts16.push(y16);
        }
    }

    let mut loss = cx.output::<f32>(1)?;
    let mut ws = cx.workspace::<f32>(xent_workspace_len(rows, classes).max(1))?;
    let mut dz = cx.workspace::<f32>(rows * classes)?;
    let mut scaler = LossScaler::from_state(SCALER, m.scale.clone(), m.good_steps.clone())?;
    // The products and the bias gradients read the 16-bit copy `dz16` of the f32 `dz`.
    let mut dz16 = cx.workspace::<H>(dz.len())?;
    let grad_scale = 1.0 / rows as f32;
    if classes <= NARROW_CLASSES {
        // The loss, its gradient, the loss scale and the copy in one launch.
        let scale = scaled.then(|| scaler.scale_buffer());
        let (l, g) = (&mut loss, &mut dz);
        softmax_cross_entropy_cast(
            cx, &logits, labels, l, g, &mut dz16, &mut ws, grad_scale, scale,
        )?;
    } else {
        softmax_cross_entropy_scaled(cx, &logits, labels, &mut loss, &mut dz, &mut ws, grad_scale)?;
        if scaled {
            scaler.scale_cast(cx, &mut dz, &mut dz16)?;
        } else {
            cast(cx, &dz, &mut dz16)?;
        }
    }

    // Backward, last layer first: the weight gradient as a product; the bias gradient
    // (`dz16`'s column sums, in f32) as a launch of its own, which the graph runs beside the
    // products (cuBLASLt's fused bias gradient added a serial kernel of 18.8 µs to each of
    // MLP-L's weight gradients, and for the logits' 10 rows ran a SIMT product of 216.6 µs
    // instead of 20: H200, ncu); and (but the first) the input gradient as a product into 16
    // bits, gated in place by the layer below's activation.
    for l in (0..layers.len()).rev() {
        let layer = layers[l];
        let input = if l == 0 { &x16 } else { &acts16[l - 1] };
        let (mut dw, mut db) = mlp.weight_and_bias_grads(l)?;
        let g = Gemm::tn(layer.outputs, layer.inputs, rows);
        matmul_half(cx, g, &dz16, input, &mut dw, false)?;
        column_sums(cx, &dz16, &mut db, false)?;
        if l > 0 {
            let mut dx16 = cx.workspace::<H>(rows * layer.inputs)?;
            let g = Gemm::nn(rows, layer.inputs, layer.outputs);
            matmul_half(cx, g, &dz16, &w16(l)?, &mut dx16, false)?;
            if layers[l - 1].act == Act::Relu {
                relu_gate(cx, &acts16[l - 1], &mut dx16)?;
            }
            dz16 = dx16;
        }
    }

    let mut adam = AdamW::from_state(AdamW::default_config(), m.moments.clone(), m.count.clone())?;
    if scaled {
        scaler.unscale(cx, &mut m.grads, &mut m.count)?;
    }
    adam.step(cx, &mut m.params, &m.grads, lr)?;
    if scaled {
        scaler.update(cx, &mut m.count)?;
    }
    Ok(loss)
}
