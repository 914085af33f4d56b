//! Models and ready-made recorded steps of graphed, built from the kernel library
//! (`graphed-kernels`): layers, MLP training steps and a sampler step. The `graphed` facade
//! re-exports this crate as `graphed::nn`, and [`train`] and [`sample`] also as
//! `graphed::train` and `graphed::sample`.
//!
//! | module | what it holds | launches |
//! |---|---|---|
//! | [`layers`] | [`Linear`](layers::Linear), [`Mlp`](layers::Mlp) (parameters and gradients each in one flat buffer), [`MlpActivations`](layers::MlpActivations) | `Linear::{forward, backward_input, backward_params}` (1 each), `Mlp::{forward (L), backward (2L − 1), zero_grad (1)}` |
//! | [`train`] | [`Classifier`](train::Classifier) (an MLP's state under AdamW) and its recorded steps: [`TrainStep`](train::TrainStep), [`MicroStep`](train::MicroStep) + [`ApplyStep`](train::ApplyStep) (gradient accumulation), [`AdaptStep`](train::AdaptStep) (clipped update handing out the raw gradient), `DpTrainStep` (`--features nccl`) | `3L + 1` a training update |
//! | [`mixed`] | [`Precision`](mixed::Precision) (`f32`, `tf32`, `bf16`, `f16`) and [`MixedTrainStep`](mixed::MixedTrainStep): fp32 master state, 16-bit products with f32 accumulation, dynamic loss scaling on the device for `f16` | `F32`/`Tf32`: `3L + 1`; 16-bit: `5L + 2` launches and `3L − 1` cuBLAS products (`f16`: 3 more launches for the scaler) |
//! | [`sample`] | [`EulerStep`](sample::EulerStep) (one guided Euler timestep of a diffusion-style sampler) and [`Sampler`](sample::Sampler) (a run's network, labels and noise schedule) | `2L + 3` a timestep |
//!
//! ```ignore
//! use graphed_kernels::{loss, optim::AdamW};
//! use graphed_nn::layers::{Mlp, MlpActivations};
//! let mut mlp = Mlp::new(&dev, &[784, 256, 256, 10], 0)?;
//! let mut acts = MlpActivations::new(&mlp, 64, |n| dev.alloc(n))?;
//! let mut opt = AdamW::new(&dev, mlp.params().len(), AdamW::default_config())?;
//! mlp.forward(&dev, &x, &mut acts)?;                                        // 3 launches
//! loss::softmax_cross_entropy(&dev, acts.logits(), &labels, &mut l, &mut acts.dlogits()?, &mut ws)?; // 1
//! mlp.backward(&dev, &x, &mut acts, false)?;                                // 5
//! let (params, grads) = mlp.params_and_grads();
//! opt.step(&dev, params, grads, 1e-3)?;                                     // 1
//! ```
//!
//! A training step of an MLP with `L` layers — forward, mean cross-entropy with its
//! gradient, backward, AdamW — is `L + 1 + (2L − 1) + 1 = 3L + 1` launches: **10** for
//! MLP-S (784-256-256-10, batch 64) and **16** for MLP-M (five layers, batch 512). Gradient
//! zeroing is not needed: the first micro-batch's backward overwrites the gradients and
//! later ones add (`accumulate`, a constant or a per-step scalar).
//!
//! # Tolerances
//!
//! Measured as in `graphed-kernels` (`‖out − ref‖ ≤ tol · max(‖ref‖, floor·√n)` against a
//! plain-Rust `f64` reference, fresh random inputs, every backend):
//!
//! | what | tol | floor | largest seen (host, lavapipe) |
//! |---|---|---|---|
//! | `Linear` forward and backward, MLP loss | 1e-5 | 0.1 | 5.5e-7 |
//! | MLP gradients against f64 central differences | 1e-5 | — | 1.5e-7 |

// Code that `#[kernel]`, `#[graphed]` and `#[derive(State)]` generate names the runtime's
// API as `::graphed::…` (the facade re-exports all of it). This crate cannot depend on the
// facade (the facade depends on it), so, as in graphed-kernels, the name `graphed` is the
// runtime here.
extern crate graphed_runtime as graphed;

pub mod layers;
pub mod mixed;
pub mod sample;
pub mod train;
