//! Inference-time adaptation: a model trained on clean digits meets a shifted stream
//! (inverted, noisy images) and adapts with one recorded update per incoming batch —
//! forward, loss, backward, gradient-norm clipping and Adam, replayed from one recording.
//!
//! ```sh
//! cargo run --release --example adapt -- [--backend host|wgpu|cuda] [--batches 200]
//! ```
//!
//! Reported separately: the capture latency (the first update: recording the body, lowering
//! it, and the first replay) and the steady-state update latency. Each timed update includes
//! the upload of the batch (inputs and labels), loss, backward, clipping, the optimizer and a
//! device synchronisation, as an adapter that waits for its updated model would do.

use std::time::Instant;

use graphed::kernels::optim::GradClip;
use graphed::train::{AdaptStep, Classifier, TrainStep};
use graphed::BackendKind;
use graphed::Device;

#[path = "train_mlp.rs"]
#[allow(dead_code)]
pub mod train_mlp;

/// The shift: inverted intensities plus deterministic noise.
fn shift(x: &[f32], salt: usize) -> Vec<f32> {
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            (1.0 - v + 0.15 * (((i + salt) as f32 * 0.754_877_7).fract() - 0.5)).clamp(0.0, 1.0)
        })
        .collect()
}

/// Pre-trains for `pretrain` steps, adapts for `batches`; returns (accuracy before, accuracy
/// after, capture ms, steady µs per update, recordings).
pub fn run(
    device: &Device,
    batches: usize,
    pretrain: usize,
) -> graphed::Result<(f64, f64, f64, f64, u64)> {
    let data = train_mlp::digits(5);
    let sizes = [64, 128, 64, 10];
    let mut model = Classifier::new(device, &sizes, 5)?;
    // Pre-train on clean data.
    let mut pre = TrainStep::new(device)?;
    let rows = 64;
    let n = data.train_y.len();
    for s in 0..pretrain {
        let i = (s * rows) % (n - rows);
        pre.call(
            &mut model,
            &data.train_x[i * 64..(i + rows) * 64],
            &data.train_y[i..i + rows],
            2e-3,
        )?;
    }
    let clean = model.accuracy(&device.upload(&data.test_x)?, &data.test_y)?;
    eprintln!(
        "accuracy on clean test data after pre-training: {:.1}%",
        100.0 * clean
    );
    let test_x = device.upload(&shift(&data.test_x, 0))?;
    let before = model.accuracy(&test_x, &data.test_y)?;

    let count = graphed::kernels::optim::Adam::new(device, model.params.len(), Default::default())?;
    // Adaptation starts the optimizer afresh: new moments and step counter.
    (model.moments, model.count) = (count.moments().clone(), count.count().clone());
    let mut partials = device.alloc::<f32>(GradClip::partials_len(model.grads.len()))?;
    let mut norm = device.alloc::<f32>(1)?;
    let mut step = AdaptStep::new(device)?;
    let (mut capture_ms, mut steady) = (0.0, Vec::new());
    for b in 0..batches {
        let i = (b * 32) % (n - 32);
        let x = shift(&data.train_x[i * 64..(i + 32) * 64], b + 1);
        let y = &data.train_y[i..i + 32];
        let t = Instant::now();
        step.call(&mut model, &mut partials, &mut norm, &x[..], y, 1e-3, 1.0)?;
        device.synchronize()?;
        let dt = t.elapsed().as_secs_f64();
        if b == 0 {
            capture_ms = dt * 1e3;
        } else {
            steady.push(dt * 1e6);
        }
    }
    steady.sort_by(f64::total_cmp);
    let median = steady.get(steady.len() / 2).copied().unwrap_or(f64::NAN);
    let after = model.accuracy(&test_x, &data.test_y)?;
    Ok((before, after, capture_ms, median, step.stats().recordings))
}

#[allow(dead_code)]
fn main() -> graphed::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut batches, mut backend) = (200usize, None);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--batches" => {
                batches = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--batches N")
            }
            "--backend" => {
                backend = Some(match args.next().as_deref() {
                    Some("host") => BackendKind::Host,
                    Some("wgpu") => BackendKind::Wgpu,
                    Some("cuda") => BackendKind::Cuda,
                    other => panic!("--backend host|wgpu|cuda, got {other:?}"),
                })
            }
            other => panic!("unknown argument {other}; try --backend, --batches"),
        }
    }
    let device = match backend {
        Some(k) => Device::open(k)?,
        None => Device::best()?,
    };
    let (before, after, capture, steady, recordings) = run(&device, batches, 400)?;
    println!("device: {} ({})", device.kind(), device.adapter());
    println!(
        "accuracy on the shifted test set: {:.1}% before, {:.1}% after {batches} updates",
        100.0 * before,
        100.0 * after
    );
    println!("capture latency (record + lower + first replay, with sync): {capture:.3} ms");
    println!("steady update latency (median; upload, loss, backward, clipping, Adam, sync): {steady:.1} us");
    println!("recordings: {recordings}");
    Ok(())
}
