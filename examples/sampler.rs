//! A fixed-shape iterative sampler: a diffusion-style Euler loop with classifier-free guidance
//! over a small network. The step is recorded once and replayed for every timestep; the
//! timestep's sigmas and the guidance scale are per-step device scalars, so nothing is
//! re-recorded as they change, and the replayed samples are bitwise equal to eager ones.
//!
//! ```sh
//! cargo run --release --example sampler -- [--backend host|wgpu|cuda] [--steps 50] [--samples 256]
//! ```
//!
//! The step, the network (a fixed random MLP: the point is the sampler's mechanics) and the
//! noise schedule live in `graphed::sample`, shared with the benchmark harness.
//! The first timestep (recording, and kernel compilation on first use) is timed on its own;
//! the replay and eager figures cover the other timesteps and one synchronisation at the end.

use std::time::Instant;

use graphed::prelude::*;
use graphed::sample::{EulerStep, Sampler};
use graphed::BackendKind;

/// Runs the sampler by replay and eagerly from the same noise; returns (samples, replayed
/// samples bitwise equal to eager ones, first timestep ms, replay µs per timestep, eager µs
/// per timestep, recordings).
pub fn run(
    device: &Device,
    steps: usize,
    samples: usize,
) -> graphed::Result<(Vec<f32>, bool, f64, f64, f64, u64)> {
    let sampler = Sampler::new(device, steps, samples)?;
    let noise = sampler.noise();
    let mut step = EulerStep::new(device)?;

    // The first timestep records (and compiles the kernels): timed on its own.
    let mut x = device.upload(&noise)?;
    let t = Instant::now();
    sampler.step(&mut step, &mut x, 0)?;
    device.synchronize()?;
    let capture_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    for i in 1..steps {
        sampler.step(&mut step, &mut x, i)?;
    }
    device.synchronize()?;
    let replay_us = t.elapsed().as_secs_f64() * 1e6 / (steps - 1).max(1) as f64;

    let mut x_eager = device.upload(&noise)?;
    let t = Instant::now();
    for i in 0..steps {
        sampler.step_eager(&mut step, &mut x_eager, i)?;
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
