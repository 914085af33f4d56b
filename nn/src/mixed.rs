//! Mixed-precision training of an MLP classifier: fp32 master weights, gradients and AdamW
//! state, 16-bit (`bf16` or `f16`) operands of every matrix product with `f32` accumulation
//! (cuBLAS's tensor cores inside the CUDA capture; the rounding reference on the host), `f32`
//! loss, bias, activations' derivatives and reductions — PyTorch's autocast recipe. For `f16`,
//! dynamic loss scaling runs inside the recorded step ([`graphed_kernels::scaler`]): an
//! overflow skips the AdamW update and halves the scale with no host synchronisation.
//!
//! [`Precision`] is a structural argument: switching it records another plan. `F32` is
//! `graphed::train::train_step`'s step; `Tf32` is the same step with the vendor
//! BLAS's products opted in to TF32 (products the DSL kernels run stay full `f32`).
//!
//! One step of `L` layers in 16 bits is `4L + 1` launches (`f16`: `4L + 3`; one fewer each
//! where the logits' bias fuses into their product, CUDA) and `3L − 1` library calls
//! (MLP-M, `L = 5`: 21 and 14; it was `5L + 2`, 27, before the launches below wrote the
//! 16-bit copies, and `3L + 2` while one launch cast all the weights), in order:
//! the casts of layer 0's weights and of the input in one launch ([`cast_two`]), and of
//! each further layer's weights in a launch of its own issued a layer ahead, which the
//! graph runs beside the products before it ([`cast`]);
//! per layer a 16-bit product into `f32`, then its bias and activation in place, which (but
//! for the logits) also writes the activation's 16-bit copy ([`gemm_epilogue_cast`]; the
//! logits' bias inside their product's library call where it fuses, [`matmul_half_bias_act`]); the
//! loss and its gradient `dz` with `dz`'s 16-bit copy, for `f16` times the loss scale
//! ([`softmax_cross_entropy_cast`]; past [`NARROW_CLASSES`] classes the loss, then the
//! scale and cast, [`LossScaler::scale_cast`], one launch more); per layer backward the
//! weight gradient as a 16-bit product into the `f32` gradients, the bias gradient (column
//! sums of the `f32` `dz`, [`column_sums`]: its own launch, which the graph runs beside
//! the products; folded into the gate launch below it waited for the input-gradient
//! product: bf16 MLP-M 249.2 µs on the H200 against 224.0 as its own launch) and (but the
//! first) the input gradient as a product, then one launch with its activation gate and
//! the gated `dz`'s 16-bit copy;
//! then (`f16`) the unscale-and-check, AdamW, and (`f16`) the scale update. Every fused
//! launch gives bitwise what its separate launches gave.

use graphed_kernels::elementwise::cast_two;
use graphed_kernels::loss::{
    softmax_cross_entropy_cast, softmax_cross_entropy_scaled, xent_workspace_len, NARROW_CLASSES,
};
use graphed_kernels::matmul::{
    column_sums, gemm_epilogue_cast, matmul_half, matmul_half_bias_act, Epilogue, Gemm,
};
use graphed_kernels::optim::AdamW;
use graphed_kernels::scaler::{LossScaler, ScalerConfig};
use graphed_macros::graphed;
use graphed_runtime::blas::Math;
use graphed_runtime::cast::cast;
use graphed_runtime::{bf16, f16, Buffer, Element, Input, Output, Result, Scalar, Step};

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
/// recorded as one plan per precision (module docs for the launches: `bf16` MLP-M is 21
/// launches and 14 cuBLAS products per step, `f16` 23 and 14; on CUDA one launch fewer).
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

    // 16-bit copies of the weights and of the input: layer 0's weights with the input in
    // one launch, every other layer's weights in a launch of their own, issued a layer ahead
    // (it depends on the master weights alone, so the graph runs it beside the products
    // before it). One launch for all the weights ran first, on the step's critical path:
    // 12–14.5 µs of bf16 MLP-M's step on the H200.
    let p16 = cx.workspace::<H>(m.params.len())?;
    let mut x16 = cx.workspace::<H>(x.len())?;
    let weights = |l: usize| {
        let (w, _) = mlp.offsets(l);
        w..w + layers[l].outputs * layers[l].inputs
    };
    let w16 = |l: usize| -> Result<Buffer<H>> { p16.slice(weights(l)) };
    let w32 = |l: usize| -> Result<Buffer<f32>> { m.params.slice(weights(l)) };
    cast_two(cx, &w32(0)?, &mut w16(0)?, x, &mut x16)?;

    // Forward: f32 outputs (the logits last) and 16-bit copies of the hidden ones.
    let mut acts: Vec<Buffer<f32>> = Vec::new();
    let mut acts16: Vec<Buffer<H>> = Vec::new();
    for (l, layer) in layers.iter().enumerate() {
        if l < last {
            cast(cx, &w32(l + 1)?, &mut w16(l + 1)?)?;
        }
        let mut z = cx.workspace::<f32>(rows * layer.outputs)?;
        let input = if l == 0 { &x16 } else { &acts16[l - 1] };
        let g = Gemm::nt(rows, layer.outputs, layer.inputs);
        let (_, b) = mlp.weight_and_bias(l)?;
        if l == last {
            // The logits: the bias (and activation) in the product's own library call where
            // it fuses (one launch fewer on the step's critical path), else the product, then
            // the bias.
            matmul_half_bias_act(cx, g, input, &w16(l)?, &mut z, &b, layer.act)?;
        } else {
            matmul_half(cx, g, input, &w16(l)?, &mut z, false)?;
            // Bias, activation and the 16-bit copy (the next layer's operand) in one launch.
            let mut z16 = cx.workspace::<H>(z.len())?;
            let epi = Epilogue::bias_act(&b, layer.act);
            gemm_epilogue_cast(cx, layer.outputs, &epi, &mut z, &mut z16, None)?;
            acts16.push(z16);
        }
        acts.push(z);
    }

    let mut loss = cx.output::<f32>(1)?;
    let mut ws = cx.workspace::<f32>(xent_workspace_len(rows, classes).max(1))?;
    let mut dz = cx.workspace::<f32>(rows * classes)?;
    let mut scaler = LossScaler::from_state(SCALER, m.scale.clone(), m.good_steps.clone())?;
    // `dz` is f32 (the bias gradients sum it); its 16-bit copy `dz16` feeds the products.
    let mut dz16 = cx.workspace::<H>(dz.len())?;
    let grad_scale = 1.0 / rows as f32;
    if classes <= NARROW_CLASSES {
        // The loss, its gradient, the loss scale and the copy in one launch.
        let scale = scaled.then(|| scaler.scale_buffer());
        let logits = &acts[last];
        let (l, g) = (&mut loss, &mut dz);
        softmax_cross_entropy_cast(
            cx, logits, labels, l, g, &mut dz16, &mut ws, grad_scale, scale,
        )?;
    } else {
        let logits = &acts[last];
        softmax_cross_entropy_scaled(cx, logits, labels, &mut loss, &mut dz, &mut ws, grad_scale)?;
        if scaled {
            scaler.scale_cast(cx, &mut dz, &mut dz16)?;
        } else {
            cast(cx, &dz, &mut dz16)?;
        }
    }

    // Backward, last layer first.
    for l in (0..layers.len()).rev() {
        let layer = layers[l];
        let input = if l == 0 { &x16 } else { &acts16[l - 1] };
        let (mut dw, mut db) = mlp.weight_and_bias_grads(l)?;
        let g = Gemm::tn(layer.outputs, layer.inputs, rows);
        matmul_half(cx, g, &dz16, input, &mut dw, false)?;
        // The bias gradient (column sums of the f32 `dz`) as its own launch: it depends on
        // `dz` alone, so the graph runs it beside the two products.
        column_sums(cx, &dz, &mut db, false)?;
        if l > 0 {
            let mut dx = cx.workspace::<f32>(rows * layer.inputs)?;
            let g = Gemm::nn(rows, layer.inputs, layer.outputs);
            matmul_half(cx, g, &dz16, &w16(l)?, &mut dx, false)?;
            // The gate of the layer below and its 16-bit copy in one launch.
            let mut dx16 = cx.workspace::<H>(dx.len())?;
            let epi = Epilogue::none().gate(layers[l - 1].act, &acts[l - 1]);
            gemm_epilogue_cast(cx, layer.inputs, &epi, &mut dx, &mut dx16, None)?;
            (dz, dz16) = (dx, dx16);
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
