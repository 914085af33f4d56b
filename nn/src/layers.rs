//! Layers: [`Linear`] (forward; backward for input, weight and bias) and [`Mlp`], a stack of
//! them whose parameters live in one flat buffer and whose gradients live in another, so an
//! optimizer update or a gradient reset is one launch over the whole model.
//!
//! Layout of the flat buffers, layer by layer in PyTorch's `named_parameters()` order:
//! `W₀ (out₀ × in₀, row-major), b₀ (out₀), W₁, b₁, …`. Weights are stored `out × in`, as
//! `torch.nn.Linear` stores them, and a layer computes `y = act(x·Wᵀ + b)` for row-major
//! `x` (`batch × in`).

use graphed_kernels::elementwise::{self, Act};
use graphed_kernels::head::{
    head_workspace_len, linear_cross_entropy, HeadOut, HEAD_CLASSES, HEAD_FUSE_MAX_INPUT,
};
use graphed_kernels::loss::{softmax_cross_entropy_scaled, xent_workspace_len};
use graphed_kernels::matmul::{matmul, matmul_row_sums, Epilogue, Gemm};
use graphed_kernels::rng::uniform_range_host;
use graphed_runtime::blas::Math;
use graphed_runtime::{Buffer, Device, Error, IntoScalarArg, Launch, Result};

use graphed_kernels::shape::{expect_len, u32_of};

/// A fully connected layer `y = act(x·Wᵀ + b)`: `x` is `batch × in`, `W` is `out × in`, `b`
/// has `out` elements. It owns no memory: its methods take the parameter and gradient
/// buffers (typically views of flat buffers).
///
/// Backward works on `dz`, the gradient with respect to the layer's pre-activation output:
/// for `act = Identity` that is `dy`; otherwise the caller gates `dy` by the activation's
/// derivative, usually fused into the next layer's [`Linear::backward_input`] (its `gate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    /// Input features.
    pub inputs: usize,
    /// Output features.
    pub outputs: usize,
    /// The activation after the affine map.
    pub act: Act,
    /// How vendor-BLAS products multiply (TF32 is an opt-in; the DSL kernels are full f32).
    pub math: Math,
}

impl Linear {
    /// A layer `inputs → outputs` followed by `act`.
    pub fn new(inputs: usize, outputs: usize, act: Act) -> Linear {
        Linear {
            inputs,
            outputs,
            act,
            math: Math::F32,
        }
    }

    /// Parameters of the layer: `outputs·inputs + outputs`.
    pub fn param_count(&self) -> usize {
        self.outputs * self.inputs + self.outputs
    }

    fn batch(&self, op: &str, name: &str, len: usize, width: usize) -> Result<usize> {
        if width == 0 || len % width != 0 {
            return Err(Error::Shape(format!(
                "Linear::{op}: `{name}` has {len} elements, not whole rows of {width}"
            )));
        }
        Ok(len / width)
    }

    /// `y = act(x·Wᵀ + b)`. One launch.
    pub fn forward<C: Launch + ?Sized>(
        &self,
        cx: &C,
        x: &Buffer<f32>,
        w: &Buffer<f32>,
        b: &Buffer<f32>,
        y: &mut Buffer<f32>,
    ) -> Result<()> {
        let batch = self.batch("forward", "x", x.len(), self.inputs)?;
        let g = Gemm::nt(batch, self.outputs, self.inputs).with_math(self.math);
        matmul(cx, g, x, w, y, &Epilogue::bias_act(b, self.act))
    }

    /// `dx = dz·W`, times `gate.0′(gate.1)` elementwise when given (the previous layer's
    /// activation derivative, at its pre-activation output; for `Relu` its output works too).
    /// One launch.
    pub fn backward_input<C: Launch + ?Sized>(
        &self,
        cx: &C,
        dz: &Buffer<f32>,
        w: &Buffer<f32>,
        dx: &mut Buffer<f32>,
        gate: Option<(Act, &Buffer<f32>)>,
    ) -> Result<()> {
        let batch = self.batch("backward_input", "dz", dz.len(), self.outputs)?;
        let g = Gemm::nn(batch, self.inputs, self.outputs).with_math(self.math);
        let epi = Epilogue {
            gate,
            ..Epilogue::none()
        };
        matmul(cx, g, dz, w, dx, &epi)
    }

    /// `dW = dzᵀ·x` and `db = Σ_batch dz`, in one launch; added into `dw`/`db` when
    /// `accumulate` (a constant or a per-step scalar), for gradient accumulation.
    pub fn backward_params<C: Launch + ?Sized>(
        &self,
        cx: &C,
        dz: &Buffer<f32>,
        x: &Buffer<f32>,
        dw: &mut Buffer<f32>,
        db: &mut Buffer<f32>,
        accumulate: impl IntoScalarArg<bool>,
    ) -> Result<()> {
        let batch = self.batch("backward_params", "dz", dz.len(), self.outputs)?;
        expect_len("Linear::backward_params", "x", x.len(), batch * self.inputs)?;
        let g = Gemm::tn(self.outputs, self.inputs, batch).with_math(self.math);
        let epi = Epilogue::none().accumulate(accumulate);
        matmul_row_sums(cx, g, dz, x, dw, db, &epi)
    }
}

/// Offsets of one layer in the flat buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    layer: Linear,
    w: usize,
    b: usize,
}

/// A multilayer perceptron: `Linear + ReLU` layers, the last without ReLU. All parameters
/// are one flat buffer and all gradients another (module docs for the layout).
#[derive(Clone, Debug)]
pub struct Mlp {
    sizes: Vec<usize>,
    slots: Vec<Slot>,
    params: Buffer<f32>,
    grads: Buffer<f32>,
}

impl Mlp {
    /// Parameters of an MLP with layer widths `sizes` (input first, classes last).
    pub fn param_count(sizes: &[usize]) -> usize {
        sizes.windows(2).map(|w| w[1] * w[0] + w[1]).sum()
    }

    fn slots(sizes: &[usize]) -> Result<Vec<Slot>> {
        if sizes.len() < 2 || sizes.contains(&0) {
            return Err(Error::Shape(format!(
                "Mlp: layer sizes {sizes:?} need an input and at least one layer, none zero"
            )));
        }
        let last = sizes.len() - 2;
        let mut off = 0;
        let mut slots = Vec::new();
        for (i, w) in sizes.windows(2).enumerate() {
            let act = if i == last { Act::Identity } else { Act::Relu };
            let layer = Linear::new(w[0], w[1], act);
            slots.push(Slot {
                layer,
                w: off,
                b: off + w[1] * w[0],
            });
            off += layer.param_count();
        }
        u32_of("parameters", off)?;
        Ok(slots)
    }

    /// An MLP with widths `sizes` (e.g. `[784, 256, 256, 10]`), initialised as
    /// `torch.nn.Linear` does (weights and biases uniform in `±1/√in`), from Philox with
    /// `seed` on the host; gradients zeroed.
    pub fn new(dev: &Device, sizes: &[usize], seed: u64) -> Result<Mlp> {
        let slots = Self::slots(sizes)?;
        let mut host = Vec::with_capacity(Self::param_count(sizes));
        for (i, s) in slots.iter().enumerate() {
            let bound = 1.0 / (s.layer.inputs as f32).sqrt();
            let n = s.layer.param_count();
            host.extend(uniform_range_host(seed, i as u64, n, -bound, bound));
        }
        let params = dev.upload(&host)?;
        let grads = dev.alloc(host.len())?;
        Ok(Mlp {
            sizes: sizes.to_vec(),
            slots,
            params,
            grads,
        })
    }

    /// An MLP over existing flat buffers (e.g. a step's `#[state]` buffers).
    pub fn from_buffers(sizes: &[usize], params: Buffer<f32>, grads: Buffer<f32>) -> Result<Mlp> {
        let slots = Self::slots(sizes)?;
        let n = Self::param_count(sizes);
        expect_len("Mlp", "params", params.len(), n)?;
        expect_len("Mlp", "grads", grads.len(), n)?;
        Ok(Mlp {
            sizes: sizes.to_vec(),
            slots,
            params,
            grads,
        })
    }

    /// The same MLP with its products multiplied as `math` ([`Math::Tf32`]: the opt-in).
    pub fn with_math(mut self, math: Math) -> Mlp {
        for s in &mut self.slots {
            s.layer.math = math;
        }
        self
    }

    /// Layer widths, input first.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// The layers.
    pub fn layers(&self) -> Vec<Linear> {
        self.slots.iter().map(|s| s.layer).collect()
    }

    /// All parameters (flat).
    pub fn params(&self) -> &Buffer<f32> {
        &self.params
    }

    /// All gradients (flat, same layout).
    pub fn grads(&self) -> &Buffer<f32> {
        &self.grads
    }

    /// Parameters to update and gradients to read, for an optimizer step.
    pub fn params_and_grads(&mut self) -> (&mut Buffer<f32>, &Buffer<f32>) {
        (&mut self.params, &self.grads)
    }

    /// All gradients, writable (to clip them, or to zero them with one launch).
    pub fn grads_mut(&mut self) -> &mut Buffer<f32> {
        &mut self.grads
    }

    /// Offsets of layer `l`'s weight and bias in the flat buffers.
    pub fn offsets(&self, l: usize) -> (usize, usize) {
        (self.slots[l].w, self.slots[l].b)
    }

    fn views(&self, buf: &Buffer<f32>, l: usize) -> Result<(Buffer<f32>, Buffer<f32>)> {
        let s = &self.slots[l];
        let end = s.b + s.layer.outputs;
        Ok((buf.slice(s.w..s.b)?, buf.slice(s.b..end)?))
    }

    /// Views of layer `l`'s weight and bias.
    pub fn weight_and_bias(&self, l: usize) -> Result<(Buffer<f32>, Buffer<f32>)> {
        self.views(&self.params, l)
    }

    /// Views of layer `l`'s weight and bias gradients.
    pub fn weight_and_bias_grads(&self, l: usize) -> Result<(Buffer<f32>, Buffer<f32>)> {
        self.views(&self.grads, l)
    }

    /// Sets every gradient to zero (one launch).
    pub fn zero_grad<C: Launch + ?Sized>(&mut self, cx: &C) -> Result<()> {
        elementwise::fill(cx, &mut self.grads, 0.0)
    }

    /// The forward pass over `x` (`batch × sizes[0]`), storing every layer's output in
    /// `acts` (the logits last). One launch per layer.
    pub fn forward<C: Launch + ?Sized>(
        &self,
        cx: &C,
        x: &Buffer<f32>,
        acts: &mut MlpActivations,
    ) -> Result<()> {
        self.check(x, acts)?;
        self.forward_below(cx, x, acts, self.slots.len())
    }

    /// The forward pass of layers `0 … top − 1` (shapes checked by the caller).
    fn forward_below<C: Launch + ?Sized>(
        &self,
        cx: &C,
        x: &Buffer<f32>,
        acts: &mut MlpActivations,
        top: usize,
    ) -> Result<()> {
        for (l, s) in self.slots[..top].iter().enumerate() {
            let (w, b) = self.weight_and_bias(l)?;
            let (before, rest) = acts.outputs.split_at_mut(l);
            let input = if l == 0 { x } else { &before[l - 1] };
            s.layer.forward(cx, input, &w, &b, &mut rest[0])?;
        }
        Ok(())
    }

    /// The backward pass: from the gradient of the loss with respect to the logits, already
    /// in [`MlpActivations::dlogits`], into the flat gradient buffer (overwriting it, or
    /// adding to it when `accumulate`: a constant or a per-step scalar). `x` and `acts` are
    /// those of the forward pass. `2·layers − 1` launches.
    pub fn backward<C: Launch + ?Sized>(
        &mut self,
        cx: &C,
        x: &Buffer<f32>,
        acts: &mut MlpActivations,
        accumulate: impl IntoScalarArg<bool>,
    ) -> Result<()> {
        self.check(x, acts)?;
        self.backward_below(
            cx,
            x,
            acts,
            accumulate.into_scalar_arg(),
            self.slots.len(),
            0,
        )
    }

    /// The backward pass of layers `top − 1, …, 0`, the gradient with respect to layer
    /// `top − 1`'s output (its pre-activation gradient) in `acts.grad[cur]`.
    fn backward_below<C: Launch + ?Sized>(
        &mut self,
        cx: &C,
        x: &Buffer<f32>,
        acts: &mut MlpActivations,
        accumulate: graphed_runtime::ScalarArg<bool>,
        top: usize,
        mut cur: usize,
    ) -> Result<()> {
        let batch = acts.batch;
        for l in (0..top).rev() {
            let layer = self.slots[l].layer;
            let dz = acts.grad[cur].slice(0..batch * layer.outputs)?;
            let input = if l == 0 { x } else { &acts.outputs[l - 1] };
            let (mut dw, mut db) = self.weight_and_bias_grads(l)?;
            layer.backward_params(cx, &dz, input, &mut dw, &mut db, accumulate)?;
            if l > 0 {
                let (w, _) = self.weight_and_bias(l)?;
                let mut dx = acts.grad[1 - cur].slice(0..batch * layer.inputs)?;
                let prev = &acts.outputs[l - 1];
                let gate = self.slots[l - 1].layer.act;
                layer.backward_input(cx, &dz, &w, &mut dx, Some((gate, prev)))?;
                cur = 1 - cur;
            }
        }
        Ok(())
    }

    /// Whether [`Mlp::train_pass`] over `batch` rows runs the last layer, the loss and the
    /// last layer's input gradient as one launch ([`linear_cross_entropy`]): at least two
    /// layers, at most [`HEAD_CLASSES`] classes, and a head input of at most
    /// [`HEAD_FUSE_MAX_INPUT`] elements (`batch ×` the last layer's inputs; larger ones were
    /// measured slower fused).
    pub fn fuses_head(&self, batch: usize) -> bool {
        let last = self.slots.last().expect("an MLP has layers").layer;
        self.slots.len() >= 2
            && last.outputs <= HEAD_CLASSES
            && last.act == Act::Identity
            && batch.saturating_mul(last.inputs) <= HEAD_FUSE_MAX_INPUT
    }

    /// Workspace elements [`Mlp::train_pass`] needs for the loss over `batch` rows.
    pub fn loss_workspace_len(&self, batch: usize) -> usize {
        let classes = *self.sizes.last().expect("an MLP has layers");
        if self.fuses_head(batch) {
            head_workspace_len(batch)
        } else {
            xent_workspace_len(batch, classes)
        }
    }

    /// Forward, mean softmax cross-entropy against `labels` into `loss` (its gradient times
    /// `grad_scale`, a constant or a per-step scalar) and backward into the flat gradients
    /// (overwritten, or added to when `accumulate`). `ws` holds the loss's partial sums
    /// ([`Mlp::loss_workspace_len`]). Where [`Mlp::fuses_head`] for the batch, the last
    /// layer's product, the loss and that layer's input gradient are one launch
    /// ([`linear_cross_entropy`]) instead of three one after another, and its weight gradient
    /// runs beside the backward pass below it; else [`Mlp::forward`], [`softmax_cross_entropy_scaled`] and
    /// [`Mlp::backward`]. Either way `acts` holds the logits and their gradient after it.
    #[allow(clippy::too_many_arguments)]
    pub fn train_pass<C: Launch + ?Sized>(
        &mut self,
        cx: &C,
        x: &Buffer<f32>,
        labels: &Buffer<u32>,
        acts: &mut MlpActivations,
        loss: &mut Buffer<f32>,
        ws: &mut Buffer<f32>,
        grad_scale: impl IntoScalarArg<f32>,
        accumulate: impl IntoScalarArg<bool>,
    ) -> Result<()> {
        let accumulate = accumulate.into_scalar_arg();
        if !self.fuses_head(acts.batch) {
            self.forward(cx, x, acts)?;
            let mut dlogits = acts.dlogits()?;
            softmax_cross_entropy_scaled(
                cx,
                acts.logits(),
                labels,
                loss,
                &mut dlogits,
                ws,
                grad_scale,
            )?;
            return self.backward(cx, x, acts, accumulate);
        }
        self.check(x, acts)?;
        let top = self.slots.len() - 1;
        self.forward_below(cx, x, acts, top)?;
        let head = self.slots[top].layer;
        let batch = acts.batch;
        let (w, b) = self.weight_and_bias(top)?;
        let mut dlogits = acts.dlogits()?;
        let mut dh = acts.grad[1].slice(0..batch * head.inputs)?;
        let (hidden, logits) = acts.outputs.split_at_mut(top);
        let h = &hidden[top - 1];
        let gate = Some((self.slots[top - 1].layer.act, h));
        let out = HeadOut {
            logits: &mut logits[0],
            dlogits: &mut dlogits,
            dh: &mut dh,
            loss,
            ws,
        };
        linear_cross_entropy(cx, h, &w, &b, labels, gate, out, grad_scale)?;
        let (mut dw, mut db) = self.weight_and_bias_grads(top)?;
        head.backward_params(cx, &dlogits, h, &mut dw, &mut db, accumulate)?;
        self.backward_below(cx, x, acts, accumulate, top, 1)
    }

    fn check(&self, x: &Buffer<f32>, acts: &MlpActivations) -> Result<()> {
        if acts.sizes != self.sizes {
            return Err(Error::Shape(format!(
                "Mlp: activations were made for sizes {:?}, this MLP has {:?}",
                acts.sizes, self.sizes
            )));
        }
        expect_len("Mlp", "x", x.len(), acts.batch * self.sizes[0])
    }
}

/// The per-batch buffers of an [`Mlp`]: each layer's output (the logits last) and two
/// gradient buffers the backward pass alternates between (the first receives the loss
/// gradient with respect to the logits). Each is its own allocation.
#[derive(Clone, Debug)]
pub struct MlpActivations {
    sizes: Vec<usize>,
    batch: usize,
    outputs: Vec<Buffer<f32>>,
    grad: [Buffer<f32>; 2],
}

impl MlpActivations {
    /// Buffers for `batch` rows, allocated by `alloc` (e.g. `|n| dev.alloc(n)` outside a step,
    /// `|n| cx.workspace(n)` inside one).
    pub fn new(
        mlp: &Mlp,
        batch: usize,
        mut alloc: impl FnMut(usize) -> Result<Buffer<f32>>,
    ) -> Result<MlpActivations> {
        let sizes = mlp.sizes.clone();
        let mut outputs = Vec::new();
        for &w in &sizes[1..] {
            outputs.push(alloc(batch * w)?);
        }
        let widest = sizes[1..].iter().copied().max().unwrap_or(1);
        let grad = [alloc(batch * widest)?, alloc(batch * widest)?];
        Ok(MlpActivations {
            sizes,
            batch,
            outputs,
            grad,
        })
    }

    /// Rows per batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The output of layer `l` (`batch × sizes[l + 1]`).
    pub fn output(&self, l: usize) -> &Buffer<f32> {
        &self.outputs[l]
    }

    /// The logits (`batch × classes`).
    pub fn logits(&self) -> &Buffer<f32> {
        self.outputs.last().expect("an MLP has a layer")
    }

    /// Where the backward pass reads the loss gradient with respect to the logits (a view:
    /// pass it as a loss's `dlogits`).
    pub fn dlogits(&self) -> Result<Buffer<f32>> {
        let classes = *self.sizes.last().expect("an MLP has a layer");
        self.grad[0].slice(0..self.batch * classes)
    }
}
