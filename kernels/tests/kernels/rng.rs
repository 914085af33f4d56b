//! Philox 4×32-10: known-answer vectors, device draws against the host reference, offsets
//! in device memory, dropout, and fresh draws on every replay of a recorded step.

// The holder `#[graphed]` generates wraps a `?` in `Ok(..)` (reported to the macro's owner).
#![allow(clippy::needless_question_mark)]

use graphed_kernels::rng::{self, Philox};
use graphed_runtime::{Buffer, Input, Output, Result, Step};
use rand::Rng;

use crate::common::{
    assert_array_indices_literal, assert_close, assert_close_floor, floats, on_every_backend,
    poisoned, rng, SIZES,
};

#[test]
fn philox_known_answers() {
    // Random123's known-answer vectors for philox4x32-10.
    assert_eq!(
        rng::philox4x32_10([0, 0, 0, 0], [0, 0]),
        [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
    );
    assert_eq!(
        rng::philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
        [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
    );
    assert_eq!(
        rng::philox4x32_10(
            [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
            [0xa4093822, 0x299f31d0]
        ),
        [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
    );
}

#[test]
fn device_draws_equal_the_host_reference_and_advance() {
    let mut r = rng("device_draws_equal_the_host_reference_and_advance");
    on_every_backend(|dev| {
        let seed: u64 = r.random();
        let mut g = Philox::new(dev, seed).unwrap();
        for (offset, &n) in SIZES.iter().enumerate() {
            let mut out = poisoned(dev, n);
            g.uniform(dev, &mut out).unwrap();
            // Uniforms are exact in f32: bitwise equal to the host reference.
            assert_eq!(
                out.to_host().unwrap(),
                rng::uniform_host(seed, offset as u64, n),
                "uniform n={n}"
            );
        }
        assert_eq!(g.position().unwrap(), (seed, SIZES.len() as u64));

        // Normals: Box–Muller on the same words, in f64 on the host.
        let n = 4097;
        let mut out = poisoned(dev, n);
        let offset = g.position().unwrap().1;
        g.normal(dev, &mut out).unwrap();
        let w = rng::words_host(seed, offset, n.div_ceil(4) * 4);
        let want: Vec<f64> = (0..n)
            .map(|i| {
                let b = i / 4 * 4 + if i % 4 < 2 { 0 } else { 2 };
                let u1 = ((w[b] >> 8) + 1) as f64 / 16_777_216.0;
                let u2 = (w[b + 1] >> 8) as f64 / 16_777_216.0;
                let rad = (-2.0 * u1.ln()).sqrt();
                let th = 2.0 * std::f64::consts::PI * u2;
                if i % 2 == 0 {
                    rad * th.cos()
                } else {
                    rad * th.sin()
                }
            })
            .collect();
        let got = out.to_host().unwrap();
        assert_close_floor("normal", &got, &want, 1e-5, 1.0);
        let mean = got.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let var = got.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(
            mean.abs() < 0.1 && (var - 1.0).abs() < 0.1,
            "normal mean {mean} variance {var}"
        );

        // An offset near 2³² carries into the high word.
        let mut g = Philox::from_state(dev.upload(&[1u32, 2, u32::MAX, 0]).unwrap()).unwrap();
        let mut out = poisoned(dev, 5);
        g.uniform(dev, &mut out).unwrap();
        assert_eq!(g.position().unwrap(), (1 | 2 << 32, 1 << 32));
        assert_eq!(
            out.to_host().unwrap(),
            rng::uniform_host(1 | 2 << 32, u32::MAX as u64, 5)
        );
    });
}

#[test]
fn dropout_forward_and_backward() {
    let mut r = rng("dropout_forward_and_backward");
    on_every_backend(|dev| {
        for &n in SIZES {
            for p in [0.0f32, 0.3, 0.9] {
                let seed: u64 = r.random();
                let xs = floats(&mut r, n, -1.0, 1.0);
                let dys = floats(&mut r, n, -1.0, 1.0);
                let x = dev.upload(&xs).unwrap();
                let mut g = Philox::new(dev, seed).unwrap();
                let (mut y, mut mask) = (poisoned(dev, n), poisoned(dev, n));
                g.dropout(dev, p, &x, &mut y, &mut mask).unwrap();
                let u = rng::uniform_host(seed, 0, n);
                let keep = 1.0 / (1.0 - p);
                let want_mask: Vec<f64> = u
                    .iter()
                    .map(|&v| if v >= p { keep as f64 } else { 0.0 })
                    .collect();
                let want_y: Vec<f64> = (0..n).map(|i| xs[i] as f64 * want_mask[i]).collect();
                let case = format!("dropout p={p} n={n}");
                assert_close(&case, &mask.to_host().unwrap(), &want_mask, 1e-7);
                assert_close(&case, &y.to_host().unwrap(), &want_y, 1e-6);

                let dy = dev.upload(&dys).unwrap();
                let mut dx = poisoned(dev, n);
                rng::dropout_backward(dev, &dy, &mask, &mut dx).unwrap();
                let want: Vec<f64> = (0..n).map(|i| dys[i] as f64 * want_mask[i]).collect();
                assert_close(
                    &format!("{case} backward"),
                    &dx.to_host().unwrap(),
                    &want,
                    1e-6,
                );
                if n == 4097 && p == 0.3 {
                    let kept = want_mask.iter().filter(|&&m| m > 0.0).count() as f64 / n as f64;
                    assert!((kept - 0.7).abs() < 0.05, "kept {kept}");
                }
            }
        }
    });
}

/// Dropout inside a recorded step: the generator's state is a `#[state]` buffer.
#[graphed_macros::graphed]
fn dropout_step(
    cx: &mut Step,
    #[state] rng_state: &mut Buffer<u32>,
    x: &Input<f32>,
    p: f32,
) -> Result<(Output<f32>, Output<f32>)> {
    let mut g = Philox::from_state(rng_state.clone())?;
    let mut y = cx.output::<f32>(x.len())?;
    let mut mask = cx.output::<f32>(x.len())?;
    g.dropout(cx, p, x, &mut y, &mut mask)?;
    Ok((y, mask))
}

#[test]
fn a_replayed_step_draws_fresh_numbers_like_eager() {
    let mut r = rng("a_replayed_step_draws_fresh_numbers_like_eager");
    on_every_backend(|dev| {
        let seed: u64 = r.random();
        let n = 1000;
        let xs = floats(&mut r, n, -1.0, 1.0);
        let mut g_replay = Philox::new(dev, seed).unwrap();
        let mut g_eager = Philox::new(dev, seed).unwrap();
        let mut state_replay = g_replay.state().clone();
        let mut state_eager = g_eager.state().clone();
        let mut replayed = DropoutStep::new(dev).unwrap();
        let mut eager = DropoutStep::new(dev).unwrap();
        let mut masks = Vec::new();
        for step in 0..4u64 {
            let p = 0.2 + 0.1 * step as f32; // a per-step scalar
            let (_, m1) = replayed.call(&mut state_replay, &xs[..], p).unwrap();
            let m1 = m1.to_host().unwrap();
            let (_, m2) = eager.eager(&mut state_eager, &xs[..], p).unwrap();
            assert_eq!(
                m1,
                m2.to_host().unwrap(),
                "step {step}: replay and eager masks differ"
            );
            let keep = 1.0 / (1.0 - p);
            let want: Vec<f32> = rng::uniform_host(seed, step, n)
                .iter()
                .map(|&u| if u >= p { keep } else { 0.0 })
                .collect();
            assert_eq!(m1, want, "step {step}: draw {step} of the generator");
            masks.push(m1);
        }
        assert_ne!(masks[0], masks[1], "a replay drew the same numbers again");
        assert_eq!(replayed.stats().recordings, 1);
        assert_eq!(replayed.stats().launches_per_replay, 2);
        g_replay = Philox::from_state(state_replay).unwrap();
        g_eager = Philox::from_state(state_eager).unwrap();
        assert_eq!(g_replay.position().unwrap(), (seed, 4));
        assert_eq!(g_eager.position().unwrap(), (seed, 4));
    });
}

#[test]
fn philox_keeps_its_counter_in_registers() {
    // The counter is an array indexed by the unrolled lanes.
    let (cuda, wgsl) = (rng::philox_fill::CUDA, rng::philox_fill::WGSL);
    assert_array_indices_literal("philox_fill", cuda, wgsl, 1);
}
