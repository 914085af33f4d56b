//! The drift sentinel (issue 19): every N replays the eager body runs beside the replay from
//! the same state; equal results count as a check, a difference is `Error::Drift` naming the
//! step, key, buffer and index, and that key runs eagerly from then on.

mod common;

use common::{bitwise_eq, floats, on_every_backend, rng};
use graphed::prelude::*;

/// w ← w·a + x, y = w
#[kernel(workgroup = 64)]
pub fn mix(a: f32, x: &[f32], w: &mut [f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < w.len() {
        w[i] = w[i] * a + x[i];
        y[i] = w[i];
    }
}

#[graphed]
fn mix_step(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    x: &Input<f32>,
    a: f32,
) -> Result<Output<f32>> {
    let mut y = cx.output::<f32>(w.len())?;
    mix::launch(cx, w.len(), a, x, w, &mut y)?;
    Ok(y)
}

#[test]
fn the_sentinel_checks_every_nth_replay_and_applies_the_step_once() {
    on_every_backend(|dev| {
        let mut r = rng("sentinel");
        let w0 = floats(&mut r, 100, -1.0, 1.0);
        let xs: Vec<Vec<f32>> = (0..9).map(|_| floats(&mut r, 100, -1.0, 1.0)).collect();
        let cfg = Config {
            sentinel_every: 3,
            ..Config::default()
        };
        let mut watched = MixStep::with_config(dev, cfg).unwrap();
        let mut plain = MixStep::new(dev).unwrap();
        let mut w1 = dev.upload(&w0).unwrap();
        let mut w2 = dev.upload(&w0).unwrap();
        for x in &xs {
            let a = watched
                .call(&mut w1, &x[..], 0.9)
                .unwrap()
                .to_host()
                .unwrap();
            let b = plain
                .eager(&mut w2, &x[..], 0.9)
                .unwrap()
                .to_host()
                .unwrap();
            assert!(bitwise_eq(&a, &b), "output differs from eager");
        }
        assert!(
            bitwise_eq(&w1.to_host().unwrap(), &w2.to_host().unwrap()),
            "state applied twice or differs"
        );
        let s = watched.stats();
        assert_eq!((s.recordings, s.replays, s.sentinel_checks), (1, 9, 3));
    });
}

#[test]
fn a_drifting_replay_is_an_error_naming_buffer_and_index_and_the_key_runs_eagerly() {
    on_every_backend(|dev| {
        let cfg = Config {
            sentinel_every: 1,
            ..Config::default()
        };
        let mut step = MixStep::with_config(dev, cfg).unwrap();
        let mut w = dev.upload(&[1.0f32, 2.0, 3.0]).unwrap();
        step.call(&mut w, &[1.0f32; 3][..], 2.0).unwrap();
        graphed::__private::inject_replay_drift();
        let err = step.call(&mut w, &[1.0f32; 3][..], 2.0).unwrap_err();
        match &err {
            graphed::Error::Drift {
                step,
                buffer,
                index,
                ..
            } => {
                assert_eq!(*step, "mix_step");
                assert_eq!((buffer.as_str(), *index), ("output 0", 0));
            }
            other => panic!("expected Drift, got {other:?}"),
        }
        // The state holds the eager result of exactly two steps: w = (w·2 + 1)·2 + 1.
        assert_eq!(w.to_host().unwrap(), vec![7.0, 11.0, 15.0]);
        let before = step.stats().eager_calls;
        let y = step
            .call(&mut w, &[1.0f32; 3][..], 2.0)
            .unwrap()
            .to_host()
            .unwrap();
        assert_eq!(y, vec![15.0, 23.0, 31.0]);
        let s = step.stats();
        assert_eq!(
            s.eager_calls,
            before + 1,
            "the drifting key must run eagerly"
        );
        assert!(
            s.eager_reasons.iter().any(|r| r.contains("drift")),
            "{:?}",
            s.eager_reasons
        );
    });
}
