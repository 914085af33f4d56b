//! Captures a multi-kernel step, then prints eager vs replay time per step and, with `--dot`,
//! the recorded plan as Graphviz DOT.
//!
//! ```sh
//! cargo run --release --example replay_chain -- [--backend host|wgpu|cuda] [--steps N] [--dot]
//! cargo run --release --example replay_chain -- --dot | dot -Tsvg > plan.svg
//! ```
//!
//! Timings include the host-to-device copy of the input and one device synchronisation at
//! the end of the timed loop.

use std::time::Instant;

use graphed::prelude::*;
use graphed::BackendKind;

/// h = tanh(x ⊙ w + b)
#[kernel(workgroup = 256)]
pub fn mix(x: &[f32], w: &[f32], b: f32, h: &mut [f32]) {
    let i = global_id().x;
    if i < h.len() {
        h[i] = tanh(x[i] * w[i] + b);
    }
}

/// w -= lr * h ⊙ x
#[kernel(workgroup = 256)]
pub fn nudge(lr: f32, h: &[f32], x: &[f32], w: &mut [f32]) {
    let i = global_id().x;
    if i < w.len() {
        w[i] -= lr * h[i] * x[i];
    }
}

/// A step of 4 × (mix, nudge) launches plus a copy of the last activation into the output.
#[graphed]
fn chain(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    x: &Input<f32>,
    lr: f32,
) -> Result<Output<f32>> {
    let n = x.len();
    let mut h = cx.workspace::<f32>(n)?;
    let mut out = cx.output::<f32>(n)?;
    for _ in 0..4 {
        mix::launch(cx, n, x, w, 0.1, &mut h)?;
        nudge::launch(cx, n, lr, &h, x, w)?;
    }
    cx.copy(&h, &mut out)?;
    Ok(out)
}

fn main() -> graphed::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut steps, mut dot, mut backend) = (200usize, false, None);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--steps" => steps = args.next().and_then(|s| s.parse().ok()).expect("--steps N"),
            "--dot" => dot = true,
            "--backend" => {
                backend = Some(match args.next().as_deref() {
                    Some("host") => BackendKind::Host,
                    Some("wgpu") => BackendKind::Wgpu,
                    Some("cuda") => BackendKind::Cuda,
                    other => panic!("--backend host|wgpu|cuda, got {other:?}"),
                })
            }
            other => panic!("unknown argument {other}; try --backend, --steps, --dot"),
        }
    }
    let device = match backend {
        Some(k) => Device::open(k)?,
        None => Device::best()?,
    };
    let n = 4096;
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let mut w = device.upload(&vec![0.5f32; n])?;
    let mut w_eager = device.upload(&vec![0.5f32; n])?;
    let mut step = Chain::new(&device)?;

    let t = Instant::now();
    for _ in 0..steps {
        step.eager(&mut w_eager, &x[..], 0.01)?;
    }
    device.synchronize()?;
    let eager = t.elapsed().as_secs_f64() * 1e6 / steps as f64;

    step.call(&mut w, &x[..], 0.01)?; // records and replays once
    let t = Instant::now();
    for _ in 1..steps {
        step.call(&mut w, &x[..], 0.01)?;
    }
    device.synchronize()?;
    let replay = t.elapsed().as_secs_f64() * 1e6 / (steps - 1).max(1) as f64;

    let same = w.to_host()? == w_eager.to_host()?;
    let stats = step.stats();
    if dot {
        print!("{}", step.plan().expect("recorded").to_dot());
        return Ok(());
    }
    println!("device: {} ({})", device.kind(), device.adapter());
    println!("launches per step: {}", stats.launches_per_replay);
    println!("eager : {eager:9.1} us/step");
    println!("replay: {replay:9.1} us/step  ({:.1}x)", eager / replay);
    println!(
        "record {:.3} ms + lower {:.3} ms, {} recording(s), {} replays",
        stats.last_record.unwrap().as_secs_f64() * 1e3,
        stats.last_lower.unwrap().as_secs_f64() * 1e3,
        stats.recordings,
        stats.replays
    );
    println!("replayed weights bitwise equal to eager: {same}");
    Ok(())
}
