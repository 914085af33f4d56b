//! Times the MLP training step of `shared/bench/torch_mlp_step.py` — forward, mean softmax
//! cross-entropy, backward, AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01),
//! fp32 — recorded once and replayed, beside the same step run eagerly, and the matrix
//! products alone.
//!
//! `cargo run --release -p graphed-nn --example mlp_step [--features cuda] -- [S] [M]
//! [--backend host|wgpu|cuda] [--steps N]`
//!
//! `us/step`: wall time of N consecutive steps over N, one device synchronisation at the end
//! (after 20 warm-up steps); the median of 5 repeats.

use std::time::Instant;

use graphed_kernels::loss;
use graphed_kernels::matmul::{self, Epilogue, Gemm, Tile};
use graphed_kernels::optim::{AdamW, COUNTER_WORDS};
use graphed_macros::graphed;
use graphed_nn::layers::{Mlp, MlpActivations};
use graphed_runtime::{BackendKind, Buffer, Device, Input, Output, Result, Step};

extern crate graphed_runtime as graphed;

/// (batch, layer widths) of the reference workloads.
const WORKLOADS: [(&str, usize, &[usize]); 2] = [
    ("S", 64, &[784, 256, 256, 10]),
    ("M", 512, &[1024, 1024, 1024, 1024, 1024, 10]),
];

fn sizes(w: usize) -> (usize, &'static [usize]) {
    (WORKLOADS[w].1, WORKLOADS[w].2)
}

/// One training step of workload `w` (a key: it selects the shapes).
#[allow(clippy::needless_question_mark)]
#[graphed]
fn train_step(
    cx: &mut Step,
    #[state] params: &mut Buffer<f32>,
    #[state] grads: &mut Buffer<f32>,
    #[state] moments: &mut Buffer<f32>,
    #[state] count: &mut Buffer<u32>,
    x: &Input<f32>,
    labels: &Input<u32>,
    lr: f32,
    #[key] w: usize,
) -> Result<Output<f32>> {
    let (batch, sizes) = sizes(w);
    let mut mlp = Mlp::from_buffers(sizes, params.clone(), grads.clone())?;
    let mut acts = MlpActivations::new(&mlp, batch, |n| cx.workspace(n))?;
    mlp.forward(cx, x, &mut acts)?;
    let mut out = cx.output::<f32>(1)?;
    let mut ws =
        cx.workspace::<f32>(loss::xent_workspace_len(batch, sizes[sizes.len() - 1]).max(1))?;
    let mut d = acts.dlogits()?;
    loss::softmax_cross_entropy(cx, acts.logits(), labels, &mut out, &mut d, &mut ws)?;
    mlp.backward(cx, x, &mut acts, false)?;
    let mut opt = AdamW::from_state(AdamW::default_config(), moments.clone(), count.clone())?;
    opt.step(cx, params, grads, lr)?;
    Ok(out)
}

fn median_us(steps: usize, mut step: impl FnMut(), sync: impl Fn()) -> (f64, f64, f64) {
    for _ in 0..20 {
        step();
    }
    sync();
    let mut v = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..steps {
            step();
        }
        sync();
        v.push(t.elapsed().as_secs_f64() * 1e6 / steps as f64);
    }
    v.sort_by(f64::total_cmp);
    (v[2], v[0], v[4])
}

/// Simple deterministic data (no RNG crate in the example).
fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let h = (i as u32)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40503));
            (h >> 8) as f32 / 16_777_216.0 * 2.0 - 1.0
        })
        .collect()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut backend = None;
    let mut steps = 200;
    let mut which = Vec::new();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--backend" => {
                i += 1;
                backend = Some(match args[i].as_str() {
                    "host" => BackendKind::Host,
                    "wgpu" => BackendKind::Wgpu,
                    _ => BackendKind::Cuda,
                });
            }
            "--steps" => {
                i += 1;
                steps = args[i].parse().expect("--steps N");
            }
            w => which.push(w.to_string()),
        }
        i += 1;
    }
    if which.is_empty() {
        which = vec!["S".into(), "M".into()];
    }
    let dev = match backend {
        Some(k) => Device::open(k)?,
        None => Device::best()?,
    };
    println!("device: {} [{}]", dev.kind(), dev.adapter());
    for name in which {
        let w = WORKLOADS
            .iter()
            .position(|x| x.0 == name)
            .expect("workload S or M");
        let (batch, sizes) = sizes(w);
        let mlp = Mlp::new(&dev, sizes, 0)?;
        let n = mlp.params().len();
        let mut params = mlp.params().clone();
        let mut grads = mlp.grads().clone();
        let mut moments = dev.alloc::<f32>(2 * n)?;
        let mut count = dev.alloc::<u32>(COUNTER_WORDS)?;
        let x = data(batch * sizes[0], 1);
        let labels: Vec<u32> = (0..batch)
            .map(|i| (i * 7 % sizes[sizes.len() - 1]) as u32)
            .collect();
        let xb = dev.upload(&x)?;
        let lb = dev.upload(&labels)?;

        let mut step = TrainStep::new(&dev)?;
        let t = Instant::now();
        let first = step.call(
            &mut params,
            &mut grads,
            &mut moments,
            &mut count,
            &xb,
            &lb,
            1e-3,
            w,
        )?;
        let first_loss = first.to_host()?[0];
        let capture_ms = t.elapsed().as_secs_f64() * 1e3;
        let sync = || dev.synchronize().unwrap();
        let (rep, lo, hi) = median_us(
            steps,
            || {
                step.call(
                    &mut params,
                    &mut grads,
                    &mut moments,
                    &mut count,
                    &xb,
                    &lb,
                    1e-3,
                    w,
                )
                .unwrap();
            },
            sync,
        );
        let stats = step.stats();
        let last = step
            .call(
                &mut params,
                &mut grads,
                &mut moments,
                &mut count,
                &xb,
                &lb,
                1e-3,
                w,
            )?
            .to_host()?[0];
        let mut eager = TrainStep::new(&dev)?;
        let (eag, _, _) = median_us(
            steps.min(50),
            || {
                eager
                    .eager(
                        &mut params,
                        &mut grads,
                        &mut moments,
                        &mut count,
                        &xb,
                        &lb,
                        1e-3,
                        w,
                    )
                    .unwrap();
            },
            sync,
        );
        println!(
            "{name} replay {rep:9.1} us/step [{lo:.1}..{hi:.1}]  eager {eag:9.1} us/step  {} kernels/step  first call (record+lower+run) {capture_ms:.1} ms  loss {first_loss:.4} -> {last:.4}",
            stats.launches_per_replay
        );

        // The optimizer and the loss alone, eager launches.
        let mut opt = AdamW::new(&dev, n, AdamW::default_config())?;
        let (us, _, _) = median_us(
            20,
            || opt.step(&dev, &mut params, &grads, 1e-3).unwrap(),
            sync,
        );
        println!(
            "  AdamW over {n} parameters {us:8.1} us ({:.0} GB/s)",
            28.0 * n as f64 / us / 1e3
        );
        let classes = sizes[sizes.len() - 1];
        let logits = dev.upload(&data(batch * classes, 5))?;
        let (mut l, mut d, mut ws) = (
            dev.alloc::<f32>(1)?,
            dev.alloc::<f32>(batch * classes)?,
            dev.alloc::<f32>(1)?,
        );
        let (us, _, _) = median_us(
            20,
            || loss::softmax_cross_entropy(&dev, &logits, &lb, &mut l, &mut d, &mut ws).unwrap(),
            sync,
        );
        println!("  softmax cross-entropy {batch}×{classes} {us:8.1} us");

        // The matrix products of the step alone, per layout, eager launches.
        for (l, win) in sizes.windows(2).enumerate() {
            let (inp, out) = (win[0], win[1]);
            for (what, g) in [
                ("fwd  x·Wᵀ", Gemm::nt(batch, out, inp)),
                ("dW   dzᵀ·x", Gemm::tn(out, inp, batch)),
                ("dx   dz·W", Gemm::nn(batch, inp, out)),
            ] {
                if l == 0 && what.starts_with("dx") {
                    continue;
                }
                for tile in [Tile::T16, Tile::T32, Tile::T64] {
                    let g = g.with_tile(tile);
                    let a = dev.upload(&data(g.m * g.k, 3))?;
                    let b = dev.upload(&data(g.k * g.n, 4))?;
                    let mut c = dev.alloc::<f32>(g.m * g.n)?;
                    let (us, _, _) = median_us(
                        20,
                        || matmul::matmul(&dev, g, &a, &b, &mut c, &Epilogue::none()).unwrap(),
                        sync,
                    );
                    let tflops = 2.0 * (g.m * g.n * g.k) as f64 / us / 1e6;
                    let auto = if g.with_tile(Tile::Auto).resolved_tile() == tile {
                        "*"
                    } else {
                        " "
                    };
                    println!(
                        "  layer {l} {what} {:5}×{:5}×{:5} {tile:?}{auto} {us:8.1} us {tflops:6.2} TFLOP/s",
                        g.m, g.n, g.k
                    );
                }
            }
        }
    }
    Ok(())
}
