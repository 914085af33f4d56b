//! Linear layers and the MLP: forward and backward against f64, the MLP's gradients against
//! f64 finite differences, gradient accumulation, and a recorded training step.

// The holder `#[graphed]` generates wraps a `?` in `Ok(..)` (reported to the macro's owner).
#![allow(clippy::needless_question_mark)]

// The steps below are `#[graphed]`: its code names the runtime as `graphed`.
extern crate graphed_runtime as graphed;

mod common;

use graphed_kernels::elementwise::Act;
use graphed_kernels::loss;
use graphed_kernels::optim::{AdamW, COUNTER_WORDS};
use graphed_nn::layers::{Linear, Mlp, MlpActivations};
use graphed_runtime::{Buffer, Device, Input, Output, Result, Step};
use rand::Rng;

use common::{assert_close, assert_close_floor, floats, on_every_backend, poisoned, rng};

/// Products and sums of order-1 terms (floored like the elementwise tests where they cancel).
const TOL: f64 = 1e-5;

#[test]
fn linear_forward_and_backward() {
    let mut r = rng("linear_forward_and_backward");
    on_every_backend(|dev| {
        for &(batch, inputs, outputs, act) in &[
            (1, 1, 1, Act::Identity),
            (7, 65, 63, Act::Relu),
            (65, 7, 33, Act::Gelu),
            (3, 100, 1, Act::Tanh),
        ] {
            let layer = Linear::new(inputs, outputs, act);
            let xs = floats(&mut r, batch * inputs, -1.0, 1.0);
            let ws = floats(&mut r, outputs * inputs, -1.0, 1.0);
            let bs = floats(&mut r, outputs, -1.0, 1.0);
            let dzs = floats(&mut r, batch * outputs, -1.0, 1.0);
            let gate_at = floats(&mut r, batch * inputs, -2.0, 2.0);
            let (x, w, b) = (
                dev.upload(&xs).unwrap(),
                dev.upload(&ws).unwrap(),
                dev.upload(&bs).unwrap(),
            );
            let dz = dev.upload(&dzs).unwrap();
            let case = format!("Linear {batch}×{inputs}→{outputs} {act:?}");

            let mut y = poisoned(dev, batch * outputs);
            layer.forward(dev, &x, &w, &b, &mut y).unwrap();
            let z = |n: usize, o: usize| {
                (0..inputs)
                    .map(|i| xs[n * inputs + i] as f64 * ws[o * inputs + i] as f64)
                    .sum::<f64>()
                    + bs[o] as f64
            };
            let want: Vec<f64> = (0..batch * outputs)
                .map(|i| act.eval_f64(z(i / outputs, i % outputs)))
                .collect();
            assert_close_floor(
                &format!("{case} forward"),
                &y.to_host().unwrap(),
                &want,
                TOL,
                0.1,
            );

            // dx = dz·W ⊙ tanh′(gate_at).
            let g = dev.upload(&gate_at).unwrap();
            let mut dx = poisoned(dev, batch * inputs);
            layer
                .backward_input(dev, &dz, &w, &mut dx, Some((Act::Tanh, &g)))
                .unwrap();
            let want: Vec<f64> = (0..batch * inputs)
                .map(|j| {
                    let (n, i) = (j / inputs, j % inputs);
                    let s: f64 = (0..outputs)
                        .map(|o| dzs[n * outputs + o] as f64 * ws[o * inputs + i] as f64)
                        .sum();
                    s * Act::Tanh.derivative_f64(gate_at[j] as f64)
                })
                .collect();
            assert_close_floor(
                &format!("{case} dx"),
                &dx.to_host().unwrap(),
                &want,
                TOL,
                0.1,
            );

            // dW = dzᵀ·x, db = Σ dz, overwritten then accumulated.
            let mut dw = poisoned(dev, outputs * inputs);
            let mut db = poisoned(dev, outputs);
            let want_w: Vec<f64> = (0..outputs * inputs)
                .map(|j| {
                    let (o, i) = (j / inputs, j % inputs);
                    (0..batch)
                        .map(|n| dzs[n * outputs + o] as f64 * xs[n * inputs + i] as f64)
                        .sum()
                })
                .collect();
            let want_b: Vec<f64> = (0..outputs)
                .map(|o| (0..batch).map(|n| dzs[n * outputs + o] as f64).sum())
                .collect();
            layer
                .backward_params(dev, &dz, &x, &mut dw, &mut db, false)
                .unwrap();
            assert_close_floor(
                &format!("{case} dW"),
                &dw.to_host().unwrap(),
                &want_w,
                TOL,
                0.1,
            );
            assert_close_floor(
                &format!("{case} db"),
                &db.to_host().unwrap(),
                &want_b,
                TOL,
                0.1,
            );
            layer
                .backward_params(dev, &dz, &x, &mut dw, &mut db, true)
                .unwrap();
            let twice = |v: &[f64]| v.iter().map(|a| 2.0 * a).collect::<Vec<_>>();
            assert_close_floor(
                &format!("{case} dW accumulated"),
                &dw.to_host().unwrap(),
                &twice(&want_w),
                TOL,
                0.1,
            );
            assert_close_floor(
                &format!("{case} db accumulated"),
                &db.to_host().unwrap(),
                &twice(&want_b),
                TOL,
                0.1,
            );
        }
    });
}

/// The MLP's mean cross-entropy in f64, over the flat parameter layout.
fn mlp_loss_f64(sizes: &[usize], p: &[f64], x: &[f32], labels: &[u32]) -> f64 {
    let batch = labels.len();
    let mut h: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let mut off = 0;
    let layers = sizes.len() - 1;
    for (l, w) in sizes.windows(2).enumerate() {
        let (inp, out) = (w[0], w[1]);
        let (wt, b) = (
            &p[off..off + out * inp],
            &p[off + out * inp..off + out * inp + out],
        );
        off += out * inp + out;
        let mut next = vec![0.0; batch * out];
        for n in 0..batch {
            for o in 0..out {
                let s: f64 = (0..inp)
                    .map(|i| h[n * inp + i] * wt[o * inp + i])
                    .sum::<f64>()
                    + b[o];
                next[n * out + o] = if l + 1 < layers { s.max(0.0) } else { s };
            }
        }
        h = next;
    }
    let classes = sizes[layers];
    let mut total = 0.0;
    for n in 0..batch {
        let row = &h[n * classes..(n + 1) * classes];
        let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = row.iter().map(|v| (v - mx).exp()).sum::<f64>().ln() + mx;
        total += lse - row[labels[n] as usize];
    }
    total / batch as f64
}

/// Runs forward, loss and backward on the device; returns (loss, gradients).
fn device_gradients(
    dev: &Device,
    mlp: &mut Mlp,
    x: &Buffer<f32>,
    labels: &Buffer<u32>,
) -> (f32, Vec<f32>) {
    let batch = labels.len();
    let mut acts = MlpActivations::new(mlp, batch, |n| dev.alloc(n)).unwrap();
    mlp.forward(dev, x, &mut acts).unwrap();
    let (mut out, mut ws) = (poisoned(dev, 1), poisoned(dev, 1));
    let mut d = acts.dlogits().unwrap();
    loss::softmax_cross_entropy(dev, acts.logits(), labels, &mut out, &mut d, &mut ws).unwrap();
    mlp.grads_mut().fill(f32::NAN).unwrap();
    mlp.backward(dev, x, &mut acts, false).unwrap();
    (out.to_host().unwrap()[0], mlp.grads().to_host().unwrap())
}

/// [`Mlp::train_pass`] (the head fused where [`Mlp::fuses_head`]): (loss, gradients), the
/// gradients poisoned first.
fn train_pass_gradients(
    dev: &Device,
    mlp: &mut Mlp,
    x: &Buffer<f32>,
    labels: &Buffer<u32>,
    grad_scale: f32,
    accumulate: bool,
) -> (f32, Vec<f32>) {
    let batch = labels.len();
    let mut acts = MlpActivations::new(mlp, batch, |n| dev.alloc(n)).unwrap();
    let mut out = poisoned(dev, 1);
    let mut ws = poisoned(dev, mlp.loss_workspace_len(batch).max(1));
    if !accumulate {
        mlp.grads_mut().fill(f32::NAN).unwrap();
    }
    mlp.train_pass(
        dev, x, labels, &mut acts, &mut out, &mut ws, grad_scale, accumulate,
    )
    .unwrap();
    (out.to_host().unwrap()[0], mlp.grads().to_host().unwrap())
}

#[test]
fn mlp_gradients_match_finite_differences() {
    let mut r = rng("mlp_gradients_match_finite_differences");
    on_every_backend(|dev| {
        // The first four fuse the head (two or more layers, at most 12 classes; 19 and 9 rows
        // take three and two workgroups); one layer and 13 classes do not.
        for (sizes, batch) in [
            (vec![5, 7, 6, 3], 4),
            (vec![3, 65, 2], 7),
            (vec![4, 33, 12], 19),
            (vec![6, 300, 5], 9),
            (vec![9, 4], 1),
            (vec![5, 6, 13], 3),
        ] {
            let mut mlp = Mlp::new(dev, &sizes, r.random()).unwrap();
            let xs = floats(&mut r, batch * sizes[0], -2.0, 2.0);
            let labels: Vec<u32> = (0..batch)
                .map(|_| r.random_range(0..*sizes.last().unwrap() as u32))
                .collect();
            let x = dev.upload(&xs).unwrap();
            let lab = dev.upload(&labels).unwrap();
            let (got_loss, got) = device_gradients(dev, &mut mlp, &x, &lab);
            let fused = sizes.len() > 2 && *sizes.last().unwrap() <= 12;
            assert_eq!(mlp.fuses_head(batch), fused, "{sizes:?}");
            let one = 1.0 / batch as f32;
            let (pass_loss, pass) = train_pass_gradients(dev, &mut mlp, &x, &lab, one, false);
            if !fused {
                // The three launches themselves: the same bits.
                assert_eq!(pass_loss.to_bits(), got_loss.to_bits(), "{sizes:?} loss");
                let bits = |v: &[f32]| v.iter().map(|g| g.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&pass), bits(&got), "{sizes:?} gradients");
            }

            let p: Vec<f64> = mlp
                .params()
                .to_host()
                .unwrap()
                .iter()
                .map(|&v| v as f64)
                .collect();
            let want_loss = mlp_loss_f64(&sizes, &p, &xs, &labels);
            assert_close(
                &format!("MLP {sizes:?} loss"),
                &[got_loss],
                &[want_loss],
                TOL,
            );
            // Central differences in f64 (error ~h² ≈ 1e-12, far below f32 gradients).
            let h = 1e-6;
            let fd: Vec<f64> = (0..p.len())
                .map(|i| {
                    let mut q = p.clone();
                    q[i] = p[i] + h;
                    let up = mlp_loss_f64(&sizes, &q, &xs, &labels);
                    q[i] = p[i] - h;
                    let down = mlp_loss_f64(&sizes, &q, &xs, &labels);
                    (up - down) / (2.0 * h)
                })
                .collect();
            assert_close(
                &format!("MLP {sizes:?} batch {batch}: gradients vs finite differences"),
                &got,
                &fd,
                1e-5,
            );
            let case = format!("MLP {sizes:?} batch {batch}, train_pass");
            assert_close(&format!("{case} loss"), &[pass_loss], &[want_loss], TOL);
            assert_close(
                &format!("{case}: gradients vs finite differences"),
                &pass,
                &fd,
                1e-5,
            );
        }
    });
}

/// A head input past `HEAD_FUSE_MAX_INPUT` elements is not fused (measured slower): the
/// pass is the three launches themselves, bit for bit; one row fewer fuses.
#[test]
fn a_large_head_input_runs_the_three_launches() {
    let mut r = rng("a_large_head_input_runs_the_three_launches");
    let sizes = [3, 2048, 4];
    let limit = graphed_kernels::head::HEAD_FUSE_MAX_INPUT;
    assert_eq!(limit % 2048, 0);
    let rows = limit / 2048;
    on_every_backend(|dev| {
        let mut mlp = Mlp::new(dev, &sizes, r.random()).unwrap();
        assert!(mlp.fuses_head(rows));
        assert!(!mlp.fuses_head(rows + 1));
        let batch = rows + 1;
        let xs = floats(&mut r, batch * sizes[0], -2.0, 2.0);
        let labels: Vec<u32> = (0..batch).map(|_| r.random_range(0..4)).collect();
        let x = dev.upload(&xs).unwrap();
        let lab = dev.upload(&labels).unwrap();
        let (want_loss, want) = device_gradients(dev, &mut mlp, &x, &lab);
        let one = 1.0 / batch as f32;
        let (loss, got) = train_pass_gradients(dev, &mut mlp, &x, &lab, one, false);
        assert_eq!(loss.to_bits(), want_loss.to_bits(), "[{}] loss", dev.kind());
        let bits = |v: &[f32]| v.iter().map(|g| g.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "[{}] gradients", dev.kind());
        assert!(want.iter().all(|g| g.is_finite()) && want.iter().any(|&g| g != 0.0));
    });
}

#[test]
fn mlp_gradient_accumulation_and_zeroing() {
    let mut r = rng("mlp_gradient_accumulation_and_zeroing");
    on_every_backend(|dev| {
        let sizes = [6, 9, 4];
        let batch = 10;
        let mut mlp = Mlp::new(dev, &sizes, r.random()).unwrap();
        let xs = floats(&mut r, batch * sizes[0], -1.0, 1.0);
        let labels: Vec<u32> = (0..batch).map(|_| r.random_range(0..4)).collect();
        let (_, full) = device_gradients(
            dev,
            &mut mlp,
            &dev.upload(&xs).unwrap(),
            &dev.upload(&labels).unwrap(),
        );

        // Two micro-batches of 5, each loss gradient scaled by 1/10: the second accumulates.
        let half = batch / 2;
        mlp.grads_mut().fill(f32::NAN).unwrap();
        for k in 0..2 {
            let x = dev
                .upload(&xs[k * half * sizes[0]..(k + 1) * half * sizes[0]])
                .unwrap();
            let lab = dev.upload(&labels[k * half..(k + 1) * half]).unwrap();
            let mut acts = MlpActivations::new(&mlp, half, |n| dev.alloc(n)).unwrap();
            mlp.forward(dev, &x, &mut acts).unwrap();
            let (mut out, mut ws, mut d) =
                (poisoned(dev, 1), poisoned(dev, 1), acts.dlogits().unwrap());
            let scale = 1.0 / batch as f32;
            loss::softmax_cross_entropy_scaled(
                dev,
                acts.logits(),
                &lab,
                &mut out,
                &mut d,
                &mut ws,
                scale,
            )
            .unwrap();
            mlp.backward(dev, &x, &mut acts, k > 0).unwrap();
        }
        let full: Vec<f64> = full.iter().map(|&v| v as f64).collect();
        assert_close(
            "two accumulated micro-batches vs one batch",
            &mlp.grads().to_host().unwrap(),
            &full,
            TOL,
        );
        // The same through `train_pass`, its head fused: the second micro-batch adds.
        assert!(mlp.fuses_head(half));
        for k in 0..2 {
            let x = dev
                .upload(&xs[k * half * sizes[0]..(k + 1) * half * sizes[0]])
                .unwrap();
            let lab = dev.upload(&labels[k * half..(k + 1) * half]).unwrap();
            train_pass_gradients(dev, &mut mlp, &x, &lab, 1.0 / batch as f32, k > 0);
        }
        assert_close(
            "two accumulated micro-batches through train_pass vs one batch",
            &mlp.grads().to_host().unwrap(),
            &full,
            TOL,
        );

        mlp.zero_grad(dev).unwrap();
        assert!(mlp.grads().to_host().unwrap().iter().all(|&g| g == 0.0));
    });
}

const SIZES: [usize; 4] = [20, 16, 16, 10];
const BATCH: usize = 8;

/// One training step: forward, mean cross-entropy with its gradient, backward, AdamW.
#[graphed_macros::graphed]
fn train_step(
    cx: &mut Step,
    #[state] params: &mut Buffer<f32>,
    #[state] grads: &mut Buffer<f32>,
    #[state] moments: &mut Buffer<f32>,
    #[state] count: &mut Buffer<u32>,
    x: &Input<f32>,
    labels: &Input<u32>,
    lr: f32,
) -> Result<Output<f32>> {
    let mut mlp = Mlp::from_buffers(&SIZES, params.clone(), grads.clone())?;
    let mut acts = MlpActivations::new(&mlp, BATCH, |n| cx.workspace(n))?;
    mlp.forward(cx, x, &mut acts)?;
    let mut out = cx.output::<f32>(1)?;
    let mut ws = cx.workspace::<f32>(1)?;
    let mut d = acts.dlogits()?;
    loss::softmax_cross_entropy(cx, acts.logits(), labels, &mut out, &mut d, &mut ws)?;
    mlp.backward(cx, x, &mut acts, false)?;
    let mut opt = AdamW::from_state(AdamW::default_config(), moments.clone(), count.clone())?;
    opt.step(cx, params, grads, lr)?;
    Ok(out)
}

#[test]
fn a_recorded_training_step_replays_as_eager() {
    let mut r = rng("a_recorded_training_step_replays_as_eager");
    on_every_backend(|dev| {
        let n = Mlp::param_count(&SIZES);
        let p0 = Mlp::new(dev, &SIZES, r.random())
            .unwrap()
            .params()
            .to_host()
            .unwrap();
        let state = |dev: &Device| {
            (
                dev.upload(&p0).unwrap(),
                dev.alloc::<f32>(n).unwrap(),
                dev.alloc::<f32>(2 * n).unwrap(),
                dev.alloc::<u32>(COUNTER_WORDS).unwrap(),
            )
        };
        let (mut p1, mut g1, mut m1, mut c1) = state(dev);
        let (mut p2, mut g2, mut m2, mut c2) = state(dev);
        let mut replayed = TrainStep::new(dev).unwrap();
        let mut eager = TrainStep::new(dev).unwrap();
        let mut losses = Vec::new();
        let xs = floats(&mut r, BATCH * SIZES[0], -1.0, 1.0);
        let labels: Vec<u32> = (0..BATCH).map(|_| r.random_range(0..10)).collect();
        for s in 0..8 {
            let lr = 0.01 / (1.0 + s as f32);
            let a = replayed
                .call(&mut p1, &mut g1, &mut m1, &mut c1, &xs[..], &labels[..], lr)
                .unwrap();
            let a = a.to_host().unwrap();
            let b = eager
                .eager(&mut p2, &mut g2, &mut m2, &mut c2, &xs[..], &labels[..], lr)
                .unwrap();
            let b = b.to_host().unwrap();
            assert_eq!(
                a[0].to_bits(),
                b[0].to_bits(),
                "loss of step {s}: replay {a:?}, eager {b:?}"
            );
            losses.push(a[0]);
        }
        assert_eq!(
            p1.to_host().unwrap(),
            p2.to_host().unwrap(),
            "parameters after 8 steps"
        );
        assert_eq!(
            m1.to_host().unwrap(),
            m2.to_host().unwrap(),
            "moments after 8 steps"
        );
        assert!(
            losses[7] < losses[0],
            "training on one batch lowers its loss: {losses:?}"
        );
        let s = replayed.stats();
        assert_eq!((s.recordings, s.replays), (1, 8), "{s:?}");
        // 3 forward products, 1 loss, 3 weight gradients (with the bias gradients fused),
        // 2 input gradients (with ReLU′ fused), 1 optimizer launch.
        assert_eq!(s.launches_per_replay, 10, "{s:?}");
        let opt = AdamW::from_state(AdamW::default_config(), m1.clone(), c1.clone()).unwrap();
        assert_eq!(opt.steps().unwrap(), 8);
    });
}

/// Forward, loss and backward into `grads`, overwriting or accumulating by a per-step flag.
#[graphed_macros::graphed]
fn grad_step(
    cx: &mut Step,
    #[state] params: &mut Buffer<f32>,
    #[state] grads: &mut Buffer<f32>,
    x: &Input<f32>,
    labels: &Input<u32>,
    accumulate: bool,
) -> Result<Output<f32>> {
    let mut mlp = Mlp::from_buffers(&SIZES, params.clone(), grads.clone())?;
    let mut acts = MlpActivations::new(&mlp, BATCH, |n| cx.workspace(n))?;
    mlp.forward(cx, x, &mut acts)?;
    let mut out = cx.output::<f32>(1)?;
    let mut ws = cx.workspace::<f32>(1)?;
    let mut d = acts.dlogits()?;
    loss::softmax_cross_entropy(cx, acts.logits(), labels, &mut out, &mut d, &mut ws)?;
    mlp.backward(cx, x, &mut acts, accumulate)?;
    Ok(out)
}

#[test]
fn accumulation_is_a_per_step_flag_without_recapture() {
    let mut r = rng("accumulation_is_a_per_step_flag_without_recapture");
    on_every_backend(|dev| {
        let mlp = Mlp::new(dev, &SIZES, r.random()).unwrap();
        let mut params = mlp.params().clone();
        let mut grads = mlp.grads().clone();
        grads.fill(f32::NAN).unwrap();
        let batches: Vec<(Vec<f32>, Vec<u32>)> = (0..3)
            .map(|_| {
                let x = floats(&mut r, BATCH * SIZES[0], -1.0, 1.0);
                let y = (0..BATCH).map(|_| r.random_range(0..10)).collect();
                (x, y)
            })
            .collect();
        // The gradient of each batch alone, then their sum through the recorded step.
        let mut step = GradStep::new(dev).unwrap();
        let mut each = Vec::new();
        for (x, y) in &batches {
            step.call(&mut params, &mut grads, &x[..], &y[..], false)
                .unwrap();
            each.push(grads.to_host().unwrap());
        }
        for (k, (x, y)) in batches.iter().enumerate() {
            step.call(&mut params, &mut grads, &x[..], &y[..], k > 0)
                .unwrap();
        }
        let want: Vec<f64> = (0..each[0].len())
            .map(|i| each.iter().map(|g| g[i] as f64).sum())
            .collect();
        assert_close(
            "three accumulated micro-batches",
            &grads.to_host().unwrap(),
            &want,
            TOL,
        );
        let s = step.stats();
        assert_eq!((s.recordings, s.replays), (1, 6), "{s:?}");
    });
}
