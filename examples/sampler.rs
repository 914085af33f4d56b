//! A fixed-shape iterative sampler: a diffusion-style Euler loop with classifier-free guidance
//! over a small network. The step is recorded once and replayed for every timestep; the
//! timestep's sigmas and the guidance scale are per-step device scalars, so nothing is
//! re-recorded as they change, and the replayed samples are bitwise equal to eager ones.
//!
//! ```sh
//! cargo run --release --example sampler -- [--backend host|wgpu|cuda] [--steps 50] [--samples 256]
//! ```
//!
//! The network is a fixed random MLP (no training: the point is the sampler's mechanics).
//! The first timestep (recording, and kernel compilation on first use) is timed on its own;
//! the replay and eager figures cover the other timesteps and one synchronisation at the end.

use std::time::Instant;

use graphed::kernels::layers::{Mlp, MlpActivations};
use graphed::prelude::*;
use graphed::BackendKind;

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

/// One sampler timestep: two network passes (conditional, unconditional) and the Euler update.
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

/// Karras et al. (2022) noise levels: `sigma_i = (max^(1/ρ) + i/(n−1)·(min^(1/ρ) − max^(1/ρ)))^ρ`, then 0.
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

/// Runs the sampler by replay and eagerly from the same noise; returns (samples, replay µs per
/// timestep, eager µs per timestep, recordings).
pub fn run(
    device: &Device,
    steps: usize,
    samples: usize,
) -> graphed::Result<(Vec<f32>, bool, f64, f64, f64, u64)> {
    let dim = 16;
    let sizes = [dim + 2, 64, 64, dim];
    let model = Mlp::new(device, &sizes, 3)?;
    let noise: Vec<f32> = (0..samples * dim)
        .map(|i| ((i as f32 * 0.618_034).fract() - 0.5) * 2.0 * 80.0)
        .collect();
    let labels: Vec<f32> = (0..samples).map(|i| (i % 10) as f32).collect();
    let sig = sigmas(steps);
    let mut step = EulerStep::new(device)?;

    // The first timestep records (and compiles the kernels): timed on its own.
    let mut x = device.upload(&noise)?;
    let t = Instant::now();
    let (s0, s1) = (sig[0], sig[1].max(1e-3));
    step.call(&mut x, model.params(), &labels[..], s0, s1, 3.0, &sizes[..])?;
    device.synchronize()?;
    let capture_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    for w in sig[1..].windows(2) {
        step.call(
            &mut x,
            model.params(),
            &labels[..],
            w[0],
            w[1].max(1e-3),
            3.0,
            &sizes[..],
        )?;
    }
    device.synchronize()?;
    let replay_us = t.elapsed().as_secs_f64() * 1e6 / (steps - 1).max(1) as f64;

    let mut x_eager = device.upload(&noise)?;
    let t = Instant::now();
    for w in sig.windows(2) {
        step.eager(
            &mut x_eager,
            model.params(),
            &labels[..],
            w[0],
            w[1].max(1e-3),
            3.0,
            &sizes[..],
        )?;
    }
    device.synchronize()?;
    let eager_us = t.elapsed().as_secs_f64() * 1e6 / steps as f64;

    let (a, b) = (x.to_host()?, x_eager.to_host()?);
    let same = a.len() == b.len() && a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits());
    Ok((
        a,
        same,
        capture_ms,
        replay_us,
        eager_us,
        step.stats().recordings,
    ))
}

#[allow(dead_code)]
fn main() -> graphed::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut steps, mut samples, mut backend) = (50usize, 256usize, None);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--steps" => steps = args.next().and_then(|v| v.parse().ok()).expect("--steps N"),
            "--samples" => {
                samples = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--samples N")
            }
            "--backend" => {
                backend = Some(match args.next().as_deref() {
                    Some("host") => BackendKind::Host,
                    Some("wgpu") => BackendKind::Wgpu,
                    Some("cuda") => BackendKind::Cuda,
                    other => panic!("--backend host|wgpu|cuda, got {other:?}"),
                })
            }
            other => panic!("unknown argument {other}; try --backend, --steps, --samples"),
        }
    }
    let device = match backend {
        Some(k) => Device::open(k)?,
        None => Device::best()?,
    };
    let (x, same, capture, replay, eager, recordings) = run(&device, steps, samples)?;
    let mean = x.iter().map(|v| *v as f64).sum::<f64>() / x.len() as f64;
    println!("device: {} ({})", device.kind(), device.adapter());
    println!("{steps} timesteps × {samples} samples; sample mean {mean:.4}");
    println!("first timestep (records; compiles kernels on first use): {capture:.2} ms");
    println!(
        "replay: {replay:9.1} us/timestep; eager: {eager:9.1} us/timestep ({:.1}x)",
        eager / replay
    );
    println!("recordings: {recordings}; replayed samples bitwise equal to eager: {same}");
    Ok(())
}
