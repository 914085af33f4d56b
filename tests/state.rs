//! `#[derive(State)]`: a struct of buffers as one `#[state]` parameter, with the same key,
//! pinning and replay ≡ eager rules as single buffers, on every backend.

mod common;

use common::{bitwise_eq, floats, on_every_backend, rng};
use graphed::prelude::*;

/// p ← p − lr·m; m ← m·0.5 + g; n ← n + 1
#[kernel(workgroup = 64)]
pub fn momentum(lr: f32, g: &[f32], p: &mut [f32], m: &mut [f32]) {
    let i = global_id().x;
    if i < p.len() {
        m[i] = m[i] * 0.5 + g[i];
        p[i] = p[i] - lr * m[i];
    }
}

#[kernel(workgroup = 64)]
pub fn bump(n: &mut [u32]) {
    if global_id().x == 0u32 {
        n[0] += 1u32;
    }
}

#[derive(State)]
struct Inner {
    count: Buffer<u32>,
}

#[derive(State)]
struct Opt {
    params: Buffer<f32>,
    moments: Buffer<f32>,
    inner: Inner,
    #[state(skip)]
    label: String,
}

#[graphed]
fn opt_step(cx: &mut Step, #[state] s: &mut Opt, g: &Input<f32>, lr: f32) -> Result<Output<f32>> {
    momentum::launch(cx, s.params.len(), lr, g, &mut s.params, &mut s.moments)?;
    bump::launch(cx, 1, &mut s.inner.count)?;
    cx.snapshot(&s.params)
}

fn opt(dev: &Device, p: &[f32]) -> Opt {
    Opt {
        params: dev.upload(p).unwrap(),
        moments: dev.alloc(p.len()).unwrap(),
        inner: Inner {
            count: dev.alloc(1).unwrap(),
        },
        label: "test".into(),
    }
}

#[test]
fn a_derived_state_replays_bitwise_like_eager_and_keys_by_every_allocation() {
    on_every_backend(|dev| {
        let mut r = rng("derive_state");
        let p0 = floats(&mut r, 70, -1.0, 1.0);
        let gs: Vec<Vec<f32>> = (0..5).map(|_| floats(&mut r, 70, -1.0, 1.0)).collect();
        let mut a = opt(dev, &p0);
        let mut b = opt(dev, &p0);
        let mut replayed = OptStep::new(dev).unwrap();
        let mut eager = OptStep::new(dev).unwrap();
        for g in &gs {
            let ya = replayed
                .call(&mut a, &g[..], 0.1)
                .unwrap()
                .to_host()
                .unwrap();
            let yb = eager.eager(&mut b, &g[..], 0.1).unwrap().to_host().unwrap();
            assert!(bitwise_eq(&ya, &yb));
        }
        assert!(bitwise_eq(
            &a.params.to_host().unwrap(),
            &b.params.to_host().unwrap()
        ));
        assert!(bitwise_eq(
            &a.moments.to_host().unwrap(),
            &b.moments.to_host().unwrap()
        ));
        assert_eq!(a.inner.count.to_host().unwrap(), vec![5]);
        assert_eq!(a.label, "test");
        let s = replayed.stats();
        assert_eq!((s.recordings, s.replays), (1, 5));
        // Another allocation of one field, even a nested one, of the same shape updates the
        // recording instead of recording again.
        a.inner.count = dev.upload(&[40u32]).unwrap();
        replayed.call(&mut a, &gs[0][..], 0.1).unwrap();
        let s = replayed.stats();
        assert_eq!((s.recordings, s.updates), (1, 1), "{s:?}");
        assert_eq!(a.inner.count.to_host().unwrap(), vec![41]);
        let keys = replayed.holder().keys();
        assert_eq!(
            keys[0].states.len(),
            3,
            "three buffers in the key: {keys:?}"
        );
        // The recordings pin every buffer: dropping the struct frees none of them.
        let before = dev.allocated_bytes();
        drop(a);
        assert_eq!(dev.allocated_bytes(), before);
        replayed.clear().unwrap();
        assert!(dev.allocated_bytes() < before);
    });
}

#[test]
fn an_input_aliasing_a_field_of_a_derived_state_is_refused_naming_the_field() {
    on_every_backend(|dev| {
        let mut a = opt(dev, &[1.0, 2.0]);
        let g = a.moments.clone();
        let mut step = OptStep::new(dev).unwrap();
        match step.call(&mut a, &g, 0.1).unwrap_err() {
            graphed::Error::InputMismatch { input, reason } => {
                assert_eq!(input, "g");
                assert!(reason.contains("state `moments`"), "{reason}");
            }
            other => panic!("expected InputMismatch, got {other:?}"),
        }
    });
}

#[derive(State)]
struct Shaped {
    w: Buffer<f32>,
    #[state(key)]
    parts: Vec<usize>,
}

/// w[i] *= a for the first `n` elements
#[kernel(workgroup = 64)]
pub fn scale_head(n: u32, a: f32, w: &mut [f32]) {
    let i = global_id().x;
    if i < n {
        w[i] *= a;
    }
}

#[graphed]
fn shaped_step(cx: &mut Step, #[state] s: &mut Shaped) -> Result<()> {
    let n = s.parts[0];
    scale_head::launch(cx, s.w.len(), n as u32, 2.0, &mut s.w)?;
    Ok(())
}

#[test]
fn a_state_key_field_is_part_of_the_capture_key() {
    on_every_backend(|dev| {
        let mut s = Shaped {
            w: dev.upload(&[1.0f32; 4]).unwrap(),
            parts: vec![1, 3],
        };
        let mut step = ShapedStep::new(dev).unwrap();
        step.call(&mut s).unwrap();
        step.call(&mut s).unwrap();
        s.parts = vec![3, 1];
        step.call(&mut s).unwrap();
        assert_eq!(s.w.to_host().unwrap(), vec![8.0, 2.0, 2.0, 1.0]);
        assert_eq!(step.stats().recordings, 2);
    });
}
