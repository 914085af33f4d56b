//! The kernel library of graphed: every kernel written in the `#[kernel]` language, and a
//! host-side op per kernel that launches it through any [`graphed_runtime::Launch`] — a
//! [`graphed_runtime::Device`] (eager) or a `&Step` inside a `#[graphed]` step (recorded).
//! Ops take buffers (views at any offset) and scalars that are constants or per-step
//! [`graphed_runtime::Scalar`]s; they check shapes and return errors, never panic. They
//! allocate nothing, so they can be recorded: buffers they need beyond their inputs and
//! outputs (workspaces, optimizer state) are made by the caller or at construction.
//!
//! ```ignore
//! use graphed_kernels::{elementwise::Act, loss, matmul::{matmul, Epilogue, Gemm}, optim::AdamW, ops};
//! matmul(&dev, Gemm::nt(rows, outs, ins), &x, &w, &mut y, &Epilogue::bias_act(&b, Act::Relu))?; // 1
//! loss::softmax_cross_entropy(&dev, &logits, &labels, &mut l, &mut dlogits, &mut ws)?;          // 1
//! let mut opt = AdamW::new(&dev, params.len(), AdamW::default_config())?;
//! opt.step(&dev, &mut params, &grads, 1e-3)?;                                                    // 1
//! ops::relu(&dev, &a, &mut b)?;
//! ```
//!
//! Layers and models built from these ops (`Linear`, `Mlp`) and ready-made recorded steps
//! live in `graphed-nn`.
//!
//! # Kernels
//!
//! | module | kernels | ops (launches) |
//! |---|---|---|
//! | [`elementwise`] | `fill_f32`, `ew_unary`, `ew_unary_backward`, `ew_binary`, `ew_scale`, `ew_scale_in_place`, `ew_axpy`, `ew_copy2`, `ew_mul_backward`, `bias_act`, `bias_act_backward`, `cast_two_{bf16,f16}` | `fill`, `add`, `axpby`, `mul`, `scale`, `scale_in_place`, `axpy` and their backwards; `relu`, `gelu` (tanh form), `tanh`, `sigmoid`, `exp`, `log` and their backwards; `cast_two` (two 16-bit casts in one launch); `bias_act` (fused bias + activation) and its backward (input and bias gradients together) — 1 each |
//! | [`reduce`] | `reduce_all`, `reduce_rows` (and their subgroup variants `reduce_all_sg`, `reduce_rows_sg` in [`reduce_subgroup`]) | `sum`, `mean`, `max`, `sum_sq`, `l2_norm` over a buffer (1, or 2 past 16384 elements); `reduce_rows` per row (1) |
//! | [`matmul`] | `matmul_t64` (64×64 tiles, 4×4 per invocation on register arrays), `matmul_t16` (16×16 tiles), `matmul_split_sum`, `gemm_epilogue`, `gemm_row_sums`, `gemm_epilogue_cast_{bf16,f16}`, `gemm_epilogue_cast_sums_{bf16,f16}` | `C = A·B`, `A·Bᵀ`, `Aᵀ·B` with bias, activation, activation-derivative gate, accumulation, and row sums of `op(A)` (a bias gradient) in the epilogue — 1 (2 for `k` past `SPLIT_K`); `gemm_epilogue_cast`: a vendor product's epilogue that also writes its 16-bit copy (and a bias gradient beside it) — 1 |
//! | [`loss`] | `softmax_xent_narrow`, `softmax_xent_wide`, `mse_pass` (each with a subgroup variant `_sg`, the same bits), `mse_grad`, `softmax_xent_narrow_cast{,_sg}_{bf16,f16}` | `softmax_cross_entropy` (mean loss and its gradient in one pass; 1, or 2 for more than 4096 rows of ≤ 64 classes or any batch of wider rows), `softmax_cross_entropy_cast` (the same for ≤ 64 classes, also the gradient times a loss scale and its 16-bit copy), `mse`, `mse_with_grad`, `mse_backward` |
//! | [`head`] | `linear_xent` | `linear_cross_entropy`: a classifier's last linear layer, its mean softmax cross-entropy and gradient, and the gradient with respect to its input (gated) for ≤ 12 classes — 1 (2 past 8 rows: the loss's partial sums) |
//! | [`optim`] | `adam_step`, `sgd_step`, `clip_scale` | `Adam`, `AdamW`, `Sgd` (`step`: 1 launch for all parameters, step counter advanced on the device), `GradClip::clip` (2) |
//! | [`scaler`] | `scale_by`, `scale_by_cast_{bf16,f16}`, `unscale_check`, `scale_update` | `LossScaler::{scale, scale_cast, unscale, update}` (1 each): dynamic loss scaling inside a recorded step, an overflow skipping the optimizer update through its counter's skip word |
//! | [`helpers`] | — (`#[device]` functions for kernels of any crate) | `gelu`, `gelu_grad`, `gelu_scale`, `sigmoid`, `activate`, `activate_backward`, `activate_grad` (an activation chosen by its [`Act::code`](elementwise::Act::code)): the one copy of each activation and derivative, which the elementwise kernels and the matrix-product epilogues call |
//! | [`rng`] | `philox_fill`, `philox_advance` | `Philox::{uniform, normal, dropout}` (2: draw, advance the offset), `dropout_backward` (1) |
//!
//! # Reduction order
//!
//! No kernel uses atomics on floats; every sum has an order fixed by the shapes alone, so
//! replay and eager runs agree bitwise on one backend:
//!
//! - whole-buffer reductions, losses and the gradient norm ([`reduce`] has the details):
//!   invocation `g` of `G` workgroups × 256 folds elements `g, g + 256G, …` in increasing
//!   order, then each workgroup combines its 256 values as a tree (`s[t] += s[t + h]` for
//!   `h = 128, 64, …, 1`); past one workgroup, the `G ≤ 256` partials are reduced the same
//!   way by a second launch;
//! - per-row reductions and wide softmax rows: one workgroup per row, the same two steps;
//!   narrow softmax rows (≤ 64 classes): one invocation per row, classes in order;
//! - matrix products: each element accumulates `k` in increasing order in one invocation
//!   (both tilings); bias gradients (row sums) likewise, in one invocation per row;
//! - `bias_act_backward`'s bias gradient: one invocation per column, rows in order;
//! - the fused classifier head ([`head`]): each logit's `k` terms over 32 invocations (each
//!   in increasing order), their 32 sums in four fixed chains; each input gradient's classes
//!   in order; the loss over each workgroup's rows in order, then as the losses above.
//!
//! Backends agree within the tolerances below, not bitwise: transcendental functions differ
//! by a few ulp between math libraries, and matrix products accumulate with `fma`, which the
//! host and CUDA round once while WGSL lets an implementation round twice.
//!
//! # Tolerances
//!
//! The tests compare every kernel with a plain-Rust `f64` reference on fresh random inputs,
//! on every backend, as `‖out − ref‖ ≤ tol · max(‖ref‖, floor·√n)` (the floor only where values
//! cross zero, so that a relative error of near-zero values does not stand for the kernel):
//!
//! | kernels | tol | floor | largest seen (host, lavapipe) |
//! |---|---|---|---|
//! | `add`, `mul`, `scale`, `axpy`, `axpby` and backwards | 1e-6 | 1 | 8e-8 |
//! | activations and their derivatives, `bias_act` and backward | 1e-5 | 0.1 (1 for bias gradients) | 1.4e-6 |
//! | sums, means, sums of squares, L2 norms (one and two passes, per row) | 1e-5 | — | 1e-7 |
//! | max | exact | — | 0 |
//! | matrix products, every layout and epilogue, row sums | 1e-5 | 0.1 with an activation | 8e-7 (k = 1000) |
//! | softmax cross-entropy loss and gradient, MSE and gradient | 1e-5 | — | 1.6e-7 |
//! | the fused head: logits, loss, gradients (against its three steps in `f64`) | 1e-5 | 0.1 for logits, 0.1·gscale for the input gradient | — |
//! | Adam, AdamW, SGD after 20 steps: parameters / moments / change of the parameters | 1e-5 / 1e-5 / 1e-4 | 0.1 / 0.01 / 0.01 | 2e-7 / 2e-7 / 1.2e-5 |
//! | gradient clipping: norm and clipped gradients | 1e-5 | — | 8e-8 |
//! | Philox uniforms and dropout masks | bitwise | — | 0 |
//! | normals (Box–Muller) | 1e-5 | 1 | 1.5e-7 |
//!
//! # Per-step values and state in device memory
//!
//! Learning rates, betas, `eps`, weight decay, momentum, dropout probability, gradient
//! scales, clipping norms and `accumulate` flags are kernel scalars, so a recorded step can
//! take each as a per-step scalar. Optimizer step counters ([`optim`]) and random offsets
//! ([`rng`]) live in device buffers and advance on the device, so a replayed step uses the
//! next step's bias corrections and draws fresh random numbers.

extern crate graphed_runtime as graphed;

pub mod shape;

pub mod elementwise;
pub mod head;
pub mod helpers;
pub mod loss;
pub mod matmul;
pub mod matmul_mma;
pub mod optim;
pub mod reduce;
pub mod reduce_subgroup;
pub mod rng;
pub mod scaler;

/// Every op of the library in one namespace: `ops::relu(cx, &x, &mut y)?`.
pub mod ops {
    pub use crate::elementwise::{
        add, add_backward, axpby, axpy, axpy_backward, bias_act, bias_act_backward, exp,
        exp_backward, fill, gelu, gelu_backward, log, log_backward, mul, mul_backward, relu,
        relu_backward, scale, scale_backward, scale_in_place, sigmoid, sigmoid_backward, tanh,
        tanh_backward, unary, unary_backward, Act,
    };
    pub use crate::loss::{
        mse, mse_backward, mse_with_grad, softmax_cross_entropy, softmax_cross_entropy_scaled,
    };
    pub use crate::matmul::{matmul, matmul_row_sums, Epilogue, Gemm, Split, Tile};
    pub use crate::optim::{Adam, AdamConfig, AdamScalars, AdamW, GradClip, Sgd, SgdConfig};
    pub use crate::reduce::{l2_norm, max, mean, reduce, reduce_rows, sum, sum_sq, Reduce};
    pub use crate::rng::{dropout_backward, Philox};
}
