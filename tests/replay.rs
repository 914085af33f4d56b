//! The record/replay lifecycle on every backend: replay ≡ eager, capture counts, keys,
//! eviction, fallbacks, pinning, clear, drain failures, and the plan's DOT dump.

mod common;

use common::{bitwise_eq, floats, on_every_backend, rng};
use graphed::prelude::*;
use graphed::{BufferRole, Config};

/// y = tanh(w ⊙ x + b)
#[kernel(workgroup = 64)]
pub fn layer(x: &[f32], w: &[f32], b: f32, y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = tanh(w[i] * x[i] + b);
    }
}

/// w -= lr * (g ⊙ x)
#[kernel(workgroup = 64)]
pub fn update(lr: f32, g: &[f32], x: &[f32], w: &mut [f32]) {
    let i = global_id().x;
    if i < w.len() {
        w[i] -= lr * g[i] * x[i];
    }
}

/// out[0] = Σ y (one workgroup, tree reduction).
#[kernel(workgroup = 64)]
pub fn total(y: &[f32], out: &mut [f32]) {
    let s = shared::<f32, 64>();
    let t = local_id().x;
    let mut acc = 0.0;
    for i in (t..y.len()).step_by(64) {
        acc += y[i];
    }
    s[t] = acc;
    barrier();
    let mut stride = 32u32;
    while stride > 0 {
        if t < stride {
            s[t] = s[t] + s[t + stride];
        }
        barrier();
        stride = stride / 2;
    }
    if t == 0 {
        out[0] = s[0];
    }
}

const LAYERS: usize = 10;

/// 10 layers forward (10 launches), 10 in-place updates (10 launches), a reduction: 21 launches.
#[graphed]
fn deep_step(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    x: &Input<f32>,
    lr: f32,
    bias: f32,
) -> Result<(Output<f32>, Output<f32>)> {
    let n = x.len();
    let mut acts = cx.workspace::<f32>(n * (LAYERS + 1))?;
    let mut first = acts.slice(0..n)?;
    cx.copy(x, &mut first)?;
    for l in 0..LAYERS {
        let a = acts.slice(l * n..(l + 1) * n)?;
        let mut b = acts.slice((l + 1) * n..(l + 2) * n)?;
        let wl = w.slice(l * n..(l + 1) * n)?;
        layer::launch(cx, n, &a, &wl, bias, &mut b)?;
    }
    for l in 0..LAYERS {
        let g = acts.slice((l + 1) * n..(l + 2) * n)?;
        let a = acts.slice(l * n..(l + 1) * n)?;
        let mut wl = w.slice(l * n..(l + 1) * n)?;
        update::launch(cx, n, lr, &g, &a, &mut wl)?;
    }
    let mut y = cx.output::<f32>(n)?;
    let last = acts.slice(LAYERS * n..(LAYERS + 1) * n)?;
    cx.copy(&last, &mut y)?;
    let mut sum = cx.output::<f32>(1)?;
    total::launch(cx, Grid::workgroups(1), &last, &mut sum)?;
    let _ = &mut acts;
    Ok((y, sum))
}

#[test]
fn replay_equals_eager_bitwise_over_100_steps() {
    on_every_backend(|dev| {
        let mut r = rng("replay_equals_eager");
        let n = 300;
        let w0 = floats(&mut r, n * LAYERS, -1.0, 1.0);
        let mut w_rep = dev.upload(&w0).unwrap();
        let mut w_eag = dev.upload(&w0).unwrap();
        let mut rep = DeepStep::new(dev).unwrap();
        let mut eag = DeepStep::new(dev).unwrap();
        for step in 0..100 {
            let x = floats(&mut r, n, -2.0, 2.0);
            let lr = 0.01 + step as f32 * 1e-4;
            let (y1, s1) = rep.call(&mut w_rep, &x[..], lr, 0.1).unwrap();
            let (y1, s1) = (y1.to_host().unwrap(), s1.to_host().unwrap());
            let (y2, s2) = eag.eager(&mut w_eag, &x[..], lr, 0.1).unwrap();
            let (y2, s2) = (y2.to_host().unwrap(), s2.to_host().unwrap());
            assert!(bitwise_eq(&y1, &y2), "outputs differ at step {step}");
            assert!(
                bitwise_eq(&s1, &s2),
                "sums differ at step {step}: {s1:?} vs {s2:?}"
            );
        }
        assert!(
            bitwise_eq(&w_rep.to_host().unwrap(), &w_eag.to_host().unwrap()),
            "weights differ"
        );
        assert_ne!(
            w_rep.to_host().unwrap(),
            w0,
            "the steps did not update the weights"
        );
        let s = rep.stats();
        assert_eq!(
            (s.recordings, s.replays, s.eager_calls),
            (1, 100, 0),
            "{s:?}"
        );
        assert_eq!(s.launches_per_replay, 2 * LAYERS + 1);
        assert_eq!(eag.stats().eager_calls, 100);
        assert_eq!(rep.plan().unwrap().launch_count(), 2 * LAYERS + 1);
    });
}

#[test]
fn keys_scalars_shapes_and_state_identity() {
    on_every_backend(|dev| {
        let mut r = rng("keys");
        let mut w = dev.upload(&floats(&mut r, 64 * LAYERS, -1.0, 1.0)).unwrap();
        let mut step = DeepStep::new(dev).unwrap();
        let x = floats(&mut r, 64, -1.0, 1.0);
        step.call(&mut w, &x[..], 0.1, 0.0).unwrap();
        // Per-step scalars change every call: no recapture.
        for i in 0..5 {
            step.call(&mut w, &x[..], 0.1 * i as f32, i as f32).unwrap();
        }
        assert_eq!(step.stats().recordings, 1);
        assert_eq!(step.stats().replays, 6);
        // A new input length is a new key.
        let x2 = floats(&mut r, 32, -1.0, 1.0);
        let mut w_small = dev.upload(&floats(&mut r, 32 * LAYERS, -1.0, 1.0)).unwrap();
        step.call(&mut w_small, &x2[..], 0.1, 0.0).unwrap();
        assert_eq!(step.stats().recordings, 2);
        // Another allocation for the state is another key, even with the same contents.
        let mut w_copy = dev.upload(&w.to_host().unwrap()).unwrap();
        step.call(&mut w_copy, &x[..], 0.1, 0.0).unwrap();
        assert_eq!(step.stats().recordings, 3);
        // The original key is still cached: replay, no recording.
        step.call(&mut w, &x[..], 0.1, 0.0).unwrap();
        let s = step.stats();
        assert_eq!((s.recordings, s.replays, s.cached), (3, 9, 3), "{s:?}");
    });
}

#[test]
fn device_inputs_and_host_inputs_agree() {
    on_every_backend(|dev| {
        let mut r = rng("device_inputs");
        let w0 = floats(&mut r, 48 * LAYERS, -1.0, 1.0);
        let x = floats(&mut r, 48, -1.0, 1.0);
        let (mut w1, mut w2) = (dev.upload(&w0).unwrap(), dev.upload(&w0).unwrap());
        let xd = dev.upload(&x).unwrap();
        let mut a = DeepStep::new(dev).unwrap();
        let mut b = DeepStep::new(dev).unwrap();
        let ya = a
            .call(&mut w1, &x[..], 0.05, 0.2)
            .unwrap()
            .0
            .to_host()
            .unwrap();
        let yb = b
            .call(&mut w2, &xd, 0.05, 0.2)
            .unwrap()
            .0
            .to_host()
            .unwrap();
        assert!(bitwise_eq(&ya, &yb));
    });
}

#[test]
fn eviction_under_a_tight_bound() {
    on_every_backend(|dev| {
        let mut r = rng("eviction");
        let cfg = Config {
            max_recordings: 2,
            ..Config::default()
        };
        let mut step = DeepStep::with_config(dev, cfg).unwrap();
        let mut ws: Vec<Buffer<f32>> = (0..4)
            .map(|_| dev.upload(&floats(&mut r, 16 * LAYERS, -1.0, 1.0)).unwrap())
            .collect();
        let x = floats(&mut r, 16, -1.0, 1.0);
        for w in ws.iter_mut() {
            step.call(w, &x[..], 0.1, 0.0).unwrap();
        }
        let s = step.stats();
        assert_eq!((s.recordings, s.evictions, s.cached), (4, 2, 2), "{s:?}");
        // The most recent keys survived: replaying the last one records nothing new.
        step.call(&mut ws[3], &x[..], 0.1, 0.0).unwrap();
        assert_eq!(step.stats().recordings, 4);
        // The evicted first key records again.
        step.call(&mut ws[0], &x[..], 0.1, 0.0).unwrap();
        assert_eq!(step.stats().recordings, 5);
        // A byte bound evicts too.
        let bytes = step.stats().static_bytes;
        let cfg = Config {
            max_bytes: bytes / 2 + 1,
            ..Config::default()
        };
        step.holder().set_config(cfg);
        step.call(&mut ws[1], &x[..], 0.1, 0.0).unwrap();
        assert!(step.stats().evictions >= 3);
        assert_eq!(step.stats().cached, 1);
    });
}

#[test]
fn shape_mismatch_is_an_error_when_recapture_is_off() {
    on_every_backend(|dev| {
        let mut r = rng("shape_mismatch");
        let cfg = Config {
            recapture_on_shape_change: false,
            ..Config::default()
        };
        let mut step = DeepStep::with_config(dev, cfg).unwrap();
        let w0 = floats(&mut r, 16 * LAYERS, -1.0, 1.0);
        let mut w = dev.upload(&w0).unwrap();
        step.call(&mut w, &floats(&mut r, 16, -1.0, 1.0)[..], 0.1, 0.0)
            .unwrap();
        let before = w.to_host().unwrap();
        let err = step
            .call(&mut w, &floats(&mut r, 17, -1.0, 1.0)[..], 0.1, 0.0)
            .unwrap_err();
        match &err {
            graphed::Error::InputMismatch { input, reason } => {
                assert_eq!(input, "x");
                assert!(reason.contains("16") && reason.contains("17"), "{reason}");
            }
            other => panic!("expected InputMismatch, got {other:?}"),
        }
        assert!(
            bitwise_eq(&before, &w.to_host().unwrap()),
            "state changed by a refused call"
        );
        assert_eq!(step.stats().recordings, 1);
    });
}

#[test]
fn inputs_on_another_device_are_refused() {
    let devs = common::backends();
    if devs.len() < 2 {
        return;
    }
    let (a, b) = (&devs[0], &devs[1]);
    let mut w = a.upload(&vec![0.5f32; 8 * LAYERS]).unwrap();
    let x = b.upload(&[1.0f32; 8]).unwrap();
    let mut step = DeepStep::new(a).unwrap();
    let err = step.call(&mut w, &x, 0.1, 0.0).unwrap_err();
    assert!(
        matches!(err, graphed::Error::InputMismatch { .. }),
        "{err:?}"
    );
    assert_eq!(step.stats().recordings, 0);
}

/// A step that reads a value back to decide what to do: not capturable.
#[graphed]
fn peeking_step(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    x: &Input<f32>,
) -> Result<Output<f32>> {
    let mut y = cx.output::<f32>(x.len())?;
    let bias = w.to_host()?[0];
    layer::launch(cx, x.len(), x, w, bias, &mut y)?;
    Ok(y)
}

#[test]
fn readback_in_a_body_falls_back_to_eager_with_a_reason() {
    on_every_backend(|dev| {
        let mut r = rng("readback");
        let w = floats(&mut r, 40, -1.0, 1.0);
        let mut w = dev.upload(&w).unwrap();
        let mut step = PeekingStep::new(dev).unwrap();
        let mut reference = PeekingStep::new(dev).unwrap();
        for _ in 0..3 {
            let x = floats(&mut r, 40, -1.0, 1.0);
            let a = step.call(&mut w, &x[..]).unwrap().to_host().unwrap();
            let b = reference.eager(&mut w, &x[..]).unwrap().to_host().unwrap();
            assert!(bitwise_eq(&a, &b));
        }
        let s = step.stats();
        assert_eq!((s.recordings, s.replays, s.eager_calls), (0, 0, 3), "{s:?}");
        assert_eq!(
            s.eager_reasons.len(),
            1,
            "one reason per key: {:?}",
            s.eager_reasons
        );
        assert!(
            s.eager_reasons[0].contains("readback inside a recording")
                && s.eager_reasons[0].contains("Buffer::to_host"),
            "{:?}",
            s.eager_reasons
        );
        // The device is usable afterwards, eagerly.
        assert_eq!(dev.upload(&[3.0f32]).unwrap().to_host().unwrap(), vec![3.0]);
    });
}

#[graphed]
fn allocating_step(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {
    let tmp = cx.device().alloc::<f32>(x.len())?;
    let mut y = cx.output::<f32>(x.len())?;
    cx.copy(&tmp, &mut y)?;
    Ok(y)
}

#[test]
fn allocation_in_a_body_is_refused_and_runs_eagerly() {
    on_every_backend(|dev| {
        // A device of its own, so other tests' buffers do not count.
        let dev = &graphed::Device::open_new(dev.kind()).unwrap();
        let mut step = AllocatingStep::new(dev).unwrap();
        let before = dev.allocated_bytes();
        let y = step.call(&[1.0f32, 2.0][..]).unwrap().to_host().unwrap();
        assert_eq!(y, vec![0.0, 0.0]);
        let s = step.stats();
        assert_eq!((s.recordings, s.eager_calls), (0, 1));
        assert!(
            s.eager_reasons[0].contains("allocation inside a recording"),
            "{:?}",
            s.eager_reasons
        );
        step.clear().unwrap();
        assert_eq!(
            dev.allocated_bytes(),
            before,
            "the refused recording leaked memory"
        );
    });
}

#[test]
fn recordings_pin_buffers_until_cleared() {
    on_every_backend(|dev| {
        // A device of its own, so other tests' buffers do not count.
        let dev = &graphed::Device::open_new(dev.kind()).unwrap();
        let mut r = rng("pinning");
        let base = dev.allocated_bytes();
        let mut step = DeepStep::new(dev).unwrap();
        {
            let mut w = dev
                .upload(&floats(&mut r, 100 * LAYERS, -1.0, 1.0))
                .unwrap();
            step.call(&mut w, &floats(&mut r, 100, -1.0, 1.0)[..], 0.1, 0.0)
                .unwrap();
            // The user's handle drops here.
        }
        let pinned = dev.allocated_bytes() - base;
        assert!(
            pinned >= 100 * LAYERS as u64 * 4,
            "the dropped state buffer was freed while the recording holds it"
        );
        assert_eq!(
            step.stats().static_bytes,
            step.plan().unwrap().static_bytes()
        );
        step.clear().unwrap();
        assert_eq!(
            dev.allocated_bytes(),
            base,
            "clear() did not release everything"
        );
        // clear() then call() records again.
        let mut w = dev
            .upload(&floats(&mut r, 100 * LAYERS, -1.0, 1.0))
            .unwrap();
        step.call(&mut w, &floats(&mut r, 100, -1.0, 1.0)[..], 0.1, 0.0)
            .unwrap();
        assert_eq!(step.stats().recordings, 2);
    });
}

#[test]
fn warmup_runs_eagerly_first() {
    on_every_backend(|dev| {
        let mut r = rng("warmup");
        let mut w = dev.upload(&floats(&mut r, 8 * LAYERS, -1.0, 1.0)).unwrap();
        let mut step = DeepStep::with_config(
            dev,
            Config {
                warmup: 2,
                ..Config::default()
            },
        )
        .unwrap();
        let x = floats(&mut r, 8, -1.0, 1.0);
        for _ in 0..5 {
            step.call(&mut w, &x[..], 0.1, 0.0).unwrap();
        }
        let s = step.stats();
        assert_eq!((s.eager_calls, s.recordings, s.replays), (2, 1, 3), "{s:?}");
    });
}

#[test]
fn invalidate_and_evict_where() {
    on_every_backend(|dev| {
        let mut r = rng("invalidate");
        let mut w = dev.upload(&floats(&mut r, 8 * LAYERS, -1.0, 1.0)).unwrap();
        let mut step = DeepStep::new(dev).unwrap();
        let x = floats(&mut r, 8, -1.0, 1.0);
        step.call(&mut w, &x[..], 0.1, 0.0).unwrap();
        step.holder().set_extra_key(7);
        step.call(&mut w, &x[..], 0.1, 0.0).unwrap();
        assert_eq!(step.stats().recordings, 2);
        let removed = step.holder().evict_where(|k| k.extra == 7).unwrap();
        assert_eq!(removed, 1);
        assert_eq!(step.stats().cached, 1);
        step.holder().invalidate().unwrap();
        assert_eq!(step.stats().cached, 0);
    });
}

#[test]
fn failed_drain_in_clear_returns_the_error_and_empties_the_holder() {
    on_every_backend(|dev| {
        // A device of its own, so other tests' buffers do not count.
        let dev = &graphed::Device::open_new(dev.kind()).unwrap();
        let mut r = rng("failed_drain");
        let mut w = dev.upload(&floats(&mut r, 8 * LAYERS, -1.0, 1.0)).unwrap();
        let mut step = DeepStep::new(dev).unwrap();
        step.call(&mut w, &floats(&mut r, 8, -1.0, 1.0)[..], 0.1, 0.0)
            .unwrap();
        let held = dev.allocated_bytes();
        step.holder().__fail_next_drain();
        let err = step.clear().unwrap_err();
        assert!(matches!(err, graphed::Error::Drain { .. }), "{err:?}");
        assert!(err.to_string().contains("injected"), "{err}");
        assert_eq!(step.stats().cached, 0);
        // Nothing was freed: memory the device may still use is leaked, not reused.
        assert_eq!(dev.allocated_bytes(), held);
        // The holder still works.
        step.call(&mut w, &floats(&mut r, 8, -1.0, 1.0)[..], 0.1, 0.0)
            .unwrap();
        assert_eq!(step.stats().recordings, 2);
    });
}

/// Child half of `failed_drain_in_drop_aborts`: runs only when the parent asks.
#[test]
fn drop_with_failed_drain_child() {
    let Ok(backend) = std::env::var("GRAPHED_ABORT_CHILD") else {
        return;
    };
    let dev = graphed::Device::open(match backend.as_str() {
        "wgpu" => graphed::BackendKind::Wgpu,
        "cuda" => graphed::BackendKind::Cuda,
        _ => graphed::BackendKind::Host,
    })
    .unwrap();
    let mut w = dev.upload(&vec![0.5f32; 8 * LAYERS]).unwrap();
    let mut step = DeepStep::new(&dev).unwrap();
    step.call(&mut w, &[1.0f32; 8][..], 0.1, 0.0).unwrap();
    step.holder().__fail_next_drain();
    drop(step);
    println!("child survived the drop");
}

#[test]
fn failed_drain_in_drop_aborts() {
    on_every_backend(|dev| {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "drop_with_failed_drain_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("GRAPHED_ABORT_CHILD", dev.kind().name())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "the child exited normally: {stdout}");
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                out.status.signal(),
                Some(6),
                "expected SIGABRT; stderr: {stderr}"
            );
        }
        assert!(
            stderr.contains("could not drain") && stderr.contains("aborting"),
            "stderr: {stderr}"
        );
        assert!(!stdout.contains("child survived"), "{stdout}");
    });
}

#[graphed]
fn small_step(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    x: &Input<f32>,
    lr: f32,
) -> Result<Output<f32>> {
    let mut y = cx.output::<f32>(x.len())?;
    layer::launch(cx, x.len(), x, w, 0.5, &mut y)?;
    update::launch(cx, x.len(), lr, &y, x, w)?;
    Ok(y)
}

#[test]
fn dot_dump_of_a_small_plan_matches_the_expected_file() {
    let dev = graphed::Device::host();
    let mut w = dev.upload(&[0.5f32; 100]).unwrap();
    let mut step = SmallStep::new(&dev).unwrap();
    step.call(&mut w, &[1.0f32; 100][..], 0.1).unwrap();
    let plan = step.plan().unwrap();
    let dot = plan.to_dot();
    let expected = include_str!("expected/small_plan.dot");
    assert_eq!(
        dot, expected,
        "DOT changed; if intended, update tests/expected/small_plan.dot"
    );
    let roles: Vec<BufferRole> = plan.buffers().iter().map(|b| b.role).collect();
    assert_eq!(
        roles,
        vec![BufferRole::Input, BufferRole::State, BufferRole::Output]
    );
}
