//! The record/replay lifecycle on every backend: replay ≡ eager, capture counts, keys,
//! eviction, fallbacks, pinning, clear, drain failures, and the plan's DOT dump.

mod common;

use common::steps::*;
use common::{bitwise_eq, floats, on_every_backend, rng};
use graphed::prelude::*;
use graphed::{BufferRole, Config};

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
        // Another allocation of the same shape for the state is the same key: the recording
        // is updated (re-pointed), not recorded again, and computes what a fresh one does.
        let w_host = w.to_host().unwrap();
        let mut w_copy = dev.upload(&w_host).unwrap();
        let mut w_fresh = dev.upload(&w_host).unwrap();
        let (y, _) = step.call(&mut w_copy, &x[..], 0.1, 0.0).unwrap();
        let y = y.to_host().unwrap();
        let s = step.stats();
        assert_eq!((s.recordings, s.updates), (2, 1), "{s:?}");
        let mut fresh = DeepStep::new(dev).unwrap();
        let (y_fresh, _) = fresh.call(&mut w_fresh, &x[..], 0.1, 0.0).unwrap();
        assert!(bitwise_eq(&y, &y_fresh.to_host().unwrap()));
        assert!(bitwise_eq(
            &w_copy.to_host().unwrap(),
            &w_fresh.to_host().unwrap()
        ));
        // The original state, unchanged by that call: another update back.
        assert_eq!(w.to_host().unwrap(), w_host);
        step.call(&mut w, &x[..], 0.1, 0.0).unwrap();
        let s = step.stats();
        assert_eq!(
            (s.recordings, s.replays, s.cached, s.updates),
            (2, 9, 2, 2),
            "{s:?}"
        );
    });
}

/// A replay patches only the scalars that changed since that recording's last replay: every
/// pattern of repeats, one of two changing, and a return to older values replays what eager
/// computes.
#[test]
fn scalars_that_repeat_change_alone_or_return_replay_as_eager() {
    on_every_backend(|dev| {
        let mut r = rng("scalar_patterns");
        let n = 96;
        let w0 = floats(&mut r, n * LAYERS, -1.0, 1.0);
        let (mut w_rep, mut w_eag) = (dev.upload(&w0).unwrap(), dev.upload(&w0).unwrap());
        let mut rep = DeepStep::new(dev).unwrap();
        let mut eag = DeepStep::new(dev).unwrap();
        let x = floats(&mut r, n, -2.0, 2.0);
        let (a, b, c, d) = (0.03f32, 0.2f32, -0.4f32, 0.011f32);
        let pattern = [
            (a, b),
            (a, b),
            (a, b),
            (a, c),
            (d, c),
            (d, c),
            (a, b),
            (d, b),
            (a, b),
        ];
        for (i, &(lr, s)) in pattern.iter().enumerate() {
            let (y1, s1) = rep.call(&mut w_rep, &x[..], lr, s).unwrap();
            let (y1, s1) = (y1.to_host().unwrap(), s1.to_host().unwrap());
            let (y2, s2) = eag.eager(&mut w_eag, &x[..], lr, s).unwrap();
            let (y2, s2) = (y2.to_host().unwrap(), s2.to_host().unwrap());
            assert!(
                bitwise_eq(&y1, &y2),
                "outputs differ at call {i} ({lr}, {s})"
            );
            assert!(bitwise_eq(&s1, &s2), "sums differ at call {i} ({lr}, {s})");
            assert!(bitwise_eq(
                &w_rep.to_host().unwrap(),
                &w_eag.to_host().unwrap()
            ));
        }
        let s = rep.stats();
        assert_eq!(
            (s.recordings, s.replays),
            (1, pattern.len() as u64),
            "{s:?}"
        );
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
        // Four keys: four lengths (another allocation of one length would be an update).
        let lens = [16, 20, 24, 28];
        let mut ws: Vec<Buffer<f32>> = lens
            .iter()
            .map(|&n| dev.upload(&floats(&mut r, n * LAYERS, -1.0, 1.0)).unwrap())
            .collect();
        let xs: Vec<Vec<f32>> = lens.iter().map(|&n| floats(&mut r, n, -1.0, 1.0)).collect();
        for (w, x) in ws.iter_mut().zip(&xs) {
            step.call(w, &x[..], 0.1, 0.0).unwrap();
        }
        let s = step.stats();
        assert_eq!((s.recordings, s.evictions, s.cached), (4, 2, 2), "{s:?}");
        // The most recent keys survived: replaying the last one records nothing new.
        step.call(&mut ws[3], &xs[3][..], 0.1, 0.0).unwrap();
        assert_eq!(step.stats().recordings, 4);
        // The evicted first key records again.
        step.call(&mut ws[0], &xs[0][..], 0.1, 0.0).unwrap();
        assert_eq!(step.stats().recordings, 5);
        // A byte bound evicts too.
        let bytes = step.stats().static_bytes;
        let cfg = Config {
            max_bytes: bytes / 2 + 1,
            ..Config::default()
        };
        step.holder().set_config(cfg);
        step.call(&mut ws[1], &xs[1][..], 0.1, 0.0).unwrap();
        assert!(step.stats().evictions >= 3);
        assert_eq!(step.stats().cached, 1);
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

/// A structural flag selects code: each value is its own recording, reused when it recurs.
#[graphed]
fn flagged_step(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    x: &Input<f32>,
    #[key] twice: bool,
    #[key] sizes: &[usize],
) -> Result<Output<f32>> {
    let mut y = cx.output::<f32>(x.len())?;
    let rounds = if twice { 2 } else { 1 } + sizes.len();
    for _ in 0..rounds {
        update::launch(cx, x.len(), 0.5, x, x, w)?;
    }
    cx.copy(w, &mut y)?;
    Ok(y)
}

#[test]
fn structural_keys_select_recordings() {
    on_every_backend(|dev| {
        let mut w = dev.upload(&[1.0f32; 4]).unwrap();
        let mut step = FlaggedStep::new(dev).unwrap();
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let mut expect = vec![1.0f32; 4];
        for (twice, sizes) in [
            (false, &[1usize][..]),
            (true, &[1][..]),
            (false, &[1][..]),
            (true, &[1][..]),
            (false, &[1, 2][..]),
        ] {
            let y = step
                .call(&mut w, &x[..], twice, sizes)
                .unwrap()
                .to_host()
                .unwrap();
            let rounds = if twice { 2 } else { 1 } + sizes.len();
            for (e, xi) in expect.iter_mut().zip(x) {
                for _ in 0..rounds {
                    *e -= 0.5 * xi * xi;
                }
            }
            assert_eq!(y, expect, "twice={twice} sizes={sizes:?}");
        }
        let s = step.stats();
        assert_eq!((s.recordings, s.replays), (3, 5), "{s:?}");
        assert_eq!(step.plan().unwrap().launch_count(), 3);
    });
}
