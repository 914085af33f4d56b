//! A fixed-shape iterative sampler — a diffusion-style Euler loop with classifier-free
//! guidance over a small network: the step the `sampler` example and the benchmarks share.
//!
//! One timestep ([`EulerStep`]) is two network passes (conditional and unconditional) and the
//! guided Euler update. The timestep's noise levels and the guidance scale are per-step device
//! scalars, so a whole run of timesteps is one recording, replayed once per timestep, and the
//! replayed samples are bitwise equal to eager ones. [`Sampler`] holds the network, the labels
//! and the noise schedule of a run.

use crate::layers::{Mlp, MlpActivations};
use graphed_macros::{graphed, kernel};
use graphed_runtime::{Buffer, Device, Input, Result, Step};

/// Network input rows: `[x (dim), sigma, label or -1 for the unconditional pass]`.
#[kernel(workgroup = 256)]
pub fn pack_inputs(dim: u32, sigma: f32, uncond: bool, x: &[f32], labels: &[f32], out: &mut [f32]) {
    let i = global_id().x;
    let width = dim + 2;
    if i < out.len() {
        let row = i / width;
        let col = i % width;
        let v = if col < dim {
            x[row * dim + col]
        } else if col == dim {
            sigma
        } else {
            select(uncond, -1.0, labels[row])
        };
        out[i] = v;
    }
}

/// Guided denoised estimate, then one Euler step from `sigma` to `sigma_next`:
/// `d = u + g·(c − u)`, `x ← x + (x − d)/sigma · (sigma_next − sigma)`.
#[kernel(workgroup = 256)]
pub fn guided_euler(
    sigma: f32,
    sigma_next: f32,
    guidance: f32,
    cond: &[f32],
    uncond: &[f32],
    x: &mut [f32],
) {
    let i = global_id().x;
    if i < x.len() {
        let d = uncond[i] + guidance * (cond[i] - uncond[i]);
        let v = x[i];
        x[i] = v + (v - d) / sigma * (sigma_next - sigma);
    }
}

/// One sampler timestep: two network passes (conditional, unconditional) and the Euler update
/// of `x` (`samples × dim`). `sizes` (the network's widths, `[dim + 2, …, dim]`) is
/// structural; `sigma`, `sigma_next` and `guidance` are per-step scalars.
#[graphed]
pub fn euler_step(
    cx: &mut Step,
    #[state] x: &mut Buffer<f32>,
    #[state] params: &Buffer<f32>,
    labels: &Input<f32>,
    sigma: f32,
    sigma_next: f32,
    guidance: f32,
    #[key] sizes: &[usize],
) -> Result<()> {
    let rows = labels.len();
    let dim = sizes[sizes.len() - 1];
    // Forward only: the gradient buffer is never written, but an `Mlp` carries one.
    let grads = cx.workspace::<f32>(params.len())?;
    let mlp = Mlp::from_buffers(sizes, params.clone(), grads)?;
    let mut outs = Vec::new();
    for uncond in [false, true] {
        let mut input = cx.workspace::<f32>(rows * (dim + 2))?;
        pack_inputs::launch(
            cx,
            input.len(),
            dim as u32,
            sigma,
            uncond,
            x,
            labels,
            &mut input,
        )?;
        let mut acts = MlpActivations::new(&mlp, rows, |n| cx.workspace(n))?;
        mlp.forward(cx, &input, &mut acts)?;
        outs.push(acts.logits().clone());
    }
    guided_euler::launch(
        cx,
        x.len(),
        sigma,
        sigma_next,
        guidance,
        &outs[0],
        &outs[1],
        x,
    )?;
    Ok(())
}

/// Karras et al. (2022) noise levels for `n` timesteps:
/// `sigma_i = (max^(1/ρ) + i/(n−1)·(min^(1/ρ) − max^(1/ρ)))^ρ` with min 0.02, max 80, ρ = 7,
/// then a final 0 (`n + 1` values).
pub fn sigmas(n: usize) -> Vec<f32> {
    let (lo, hi, rho) = (0.02f64, 80.0f64, 7.0f64);
    let mut s: Vec<f32> = (0..n)
        .map(|i| {
            let t = i as f64 / (n.max(2) - 1) as f64;
            (hi.powf(1.0 / rho) + t * (lo.powf(1.0 / rho) - hi.powf(1.0 / rho))).powf(rho) as f32
        })
        .collect();
    s.push(0.0);
    s
}

/// A sampler run's fixed parts: a random network (no training: the point is the sampler's
/// mechanics), the samples' class labels, the noise schedule and the guidance scale.
pub struct Sampler {
    /// The network's widths: `[DIM + 2, 64, 64, DIM]`.
    pub sizes: Vec<usize>,
    /// The network (weights from a fixed seed).
    pub network: Mlp,
    /// One class label per sample (0..10, as `f32`).
    pub labels: Vec<f32>,
    /// The noise levels, one more than the timesteps (see [`sigmas`]).
    pub sigmas: Vec<f32>,
    /// The classifier-free guidance scale.
    pub guidance: f32,
}

impl Sampler {
    /// Values per sample.
    pub const DIM: usize = 16;

    /// A run of `steps` timesteps over `samples` samples on `device`.
    pub fn new(device: &Device, steps: usize, samples: usize) -> Result<Sampler> {
        let sizes = vec![Self::DIM + 2, 64, 64, Self::DIM];
        Ok(Sampler {
            network: Mlp::new(device, &sizes, 3)?,
            sizes,
            labels: (0..samples).map(|i| (i % 10) as f32).collect(),
            sigmas: sigmas(steps),
            guidance: 3.0,
        })
    }

    /// Number of timesteps of a run.
    pub fn timesteps(&self) -> usize {
        self.sigmas.len() - 1
    }

    /// The starting noise, `samples × DIM` values scaled to the largest noise level (a fixed
    /// low-discrepancy sequence, the same on every call).
    pub fn noise(&self) -> Vec<f32> {
        (0..self.labels.len() * Self::DIM)
            .map(|i| ((i as f32 * 0.618_034).fract() - 0.5) * 2.0 * 80.0)
            .collect()
    }

    /// `(sigma, sigma_next)` of timestep `i`; the last step goes to 10⁻³ rather than 0, which
    /// the Euler update divides by.
    pub fn sigma_pair(&self, i: usize) -> (f32, f32) {
        (self.sigmas[i], self.sigmas[i + 1].max(1e-3))
    }

    /// Runs timestep `i` on `x` through `step`: replayed (recorded on the first call).
    pub fn step(&self, step: &mut EulerStep, x: &mut Buffer<f32>, i: usize) -> Result<()> {
        let (s, s_next) = self.sigma_pair(i);
        let p = self.network.params();
        step.call(
            x,
            p,
            &self.labels[..],
            s,
            s_next,
            self.guidance,
            &self.sizes,
        )?;
        Ok(())
    }

    /// Runs timestep `i` on `x` eagerly (no recording), e.g. to compare with replay.
    pub fn step_eager(&self, step: &mut EulerStep, x: &mut Buffer<f32>, i: usize) -> Result<()> {
        let (s, s_next) = self.sigma_pair(i);
        let p = self.network.params();
        step.eager(
            x,
            p,
            &self.labels[..],
            s,
            s_next,
            self.guidance,
            &self.sizes,
        )?;
        Ok(())
    }
}
