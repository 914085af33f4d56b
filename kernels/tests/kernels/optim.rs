//! Optimizers against plain-Rust f64 references of PyTorch's update rules, 20 steps each,
//! and device-side gradient clipping.

use graphed_kernels::optim::{Adam, AdamConfig, AdamW, GradClip, Sgd, SgdConfig, COUNTER_WORDS};
use graphed_runtime::Device;

use crate::common::{assert_close, assert_close_floor, floats, on_every_backend, poisoned, rng};

const STEPS: usize = 20;

// Errors are judged against max(‖ref‖, floor·√n) (`assert_close_floor`): with one parameter
// drawn near zero, a relative error says nothing about the update.

/// Parameters after 20 steps: a few roundings per step of updates of order 1e-2 (floor 0.1,
/// the scale of the parameters).
const TOL_PARAMS: f64 = 1e-5;
/// The moments (rounded every step; the f32 `pow` of the bias corrections weighs in).
const TOL_STATE: f64 = 1e-5;
/// The total change of the parameters over 20 steps, against the reference's change: it is
/// a difference of f32 parameters, so their rounding (≈ 6e-8 on values of order 1, per step)
/// bounds its precision at about 1e-5 of changes of order 1e-2.
const TOL_CHANGE: f64 = 1e-4;

/// `torch.optim.Adam`/`AdamW` (single-tensor path) in f64, on f32-rounded hyper-parameters.
struct AdamRef {
    p: Vec<f64>,
    m: Vec<f64>,
    v: Vec<f64>,
    t: i32,
}

impl AdamRef {
    #[allow(clippy::needless_range_loop)] // indices read like the update rules they check
    fn step(&mut self, g: &[f32], lr: f32, c: AdamConfig, decoupled: bool) {
        let (lr, b1, b2, eps, wd) = (
            lr as f64,
            c.beta1 as f64,
            c.beta2 as f64,
            c.eps as f64,
            c.weight_decay as f64,
        );
        self.t += 1;
        let bc1 = 1.0 - b1.powi(self.t);
        let bc2 = 1.0 - b2.powi(self.t);
        for i in 0..self.p.len() {
            let mut gi = g[i] as f64;
            if decoupled {
                self.p[i] *= 1.0 - lr * wd;
            } else {
                gi += wd * self.p[i];
            }
            self.m[i] += (1.0 - b1) * (gi - self.m[i]);
            self.v[i] = self.v[i] * b2 + (1.0 - b2) * gi * gi;
            let denom = self.v[i].sqrt() / bc2.sqrt() + eps;
            self.p[i] -= lr / bc1 * self.m[i] / denom;
        }
    }
}

fn check_adam(dev: &Device, r: &mut impl rand::Rng, n: usize, decoupled: bool, c: AdamConfig) {
    let p0 = floats(r, n, -1.0, 1.0);
    let params = dev.upload(&p0).unwrap();
    let adam = if decoupled {
        // AdamW is Adam with decoupled weight decay; it derefs to it.
        (*AdamW::new(dev, n, c).unwrap()).clone()
    } else {
        Adam::new(dev, n, c).unwrap()
    };
    run_adam(dev, r, n, decoupled, c, p0, params, adam);
}

#[allow(clippy::too_many_arguments)]
fn run_adam(
    dev: &Device,
    r: &mut impl rand::Rng,
    n: usize,
    decoupled: bool,
    c: AdamConfig,
    p0: Vec<f32>,
    mut params: graphed_runtime::Buffer<f32>,
    mut adam: Adam,
) {
    let mut reference = AdamRef {
        p: p0.iter().map(|&v| v as f64).collect(),
        m: vec![0.0; n],
        v: vec![0.0; n],
        t: 0,
    };
    for s in 0..STEPS {
        let g = floats(r, n, -1.0, 1.0);
        let grads = dev.upload(&g).unwrap();
        let lr = 1e-2 * (1.0 + s as f32 / 10.0); // a changing learning rate
        adam.step(dev, &mut params, &grads, lr).unwrap();
        reference.step(&g, lr, c, decoupled);
    }
    let name = if decoupled { "AdamW" } else { "Adam" };
    let case = format!("{name} n={n} {c:?}");
    assert_eq!(adam.steps().unwrap(), STEPS as u32, "{case}: step count");
    let p = params.to_host().unwrap();
    assert_close_floor(&format!("{case} params"), &p, &reference.p, TOL_PARAMS, 0.1);
    let delta: Vec<f32> = p.iter().zip(&p0).map(|(a, b)| a - b).collect();
    let want: Vec<f64> = reference
        .p
        .iter()
        .zip(&p0)
        .map(|(a, &b)| a - b as f64)
        .collect();
    assert_close_floor(&format!("{case} change"), &delta, &want, TOL_CHANGE, 0.01);
    let mv = adam.moments().to_host().unwrap();
    assert_close_floor(
        &format!("{case} m"),
        &mv[..n],
        &reference.m,
        TOL_STATE,
        0.01,
    );
    assert_close_floor(
        &format!("{case} v"),
        &mv[n..],
        &reference.v,
        TOL_STATE,
        0.01,
    );
}

#[test]
fn adam_and_adamw_follow_pytorch_for_20_steps() {
    let mut r = rng("adam_and_adamw_follow_pytorch_for_20_steps");
    on_every_backend(|dev| {
        // 4097 parameters take 32 workgroups: the step counter's atomic arrivals are shared.
        for n in [1, 7, 1000, 4097] {
            check_adam(dev, &mut r, n, true, AdamW::default_config());
            let c = AdamConfig {
                beta1: 0.8,
                beta2: 0.99,
                eps: 1e-6,
                weight_decay: 0.1,
            };
            check_adam(dev, &mut r, n, false, c);
            check_adam(dev, &mut r, n, true, c);
        }
    });
}

#[test]
fn sgd_follows_pytorch_for_20_steps() {
    let mut r = rng("sgd_follows_pytorch_for_20_steps");
    let configs = [
        SgdConfig::default(),
        SgdConfig {
            momentum: 0.9,
            ..Default::default()
        },
        SgdConfig {
            momentum: 0.9,
            dampening: 0.1,
            weight_decay: 0.01,
            nesterov: false,
        },
        SgdConfig {
            momentum: 0.8,
            dampening: 0.0,
            weight_decay: 0.05,
            nesterov: true,
        },
    ];
    on_every_backend(|dev| {
        for n in [1, 63, 4097] {
            for c in configs {
                let p0 = floats(&mut r, n, -1.0, 1.0);
                let mut params = dev.upload(&p0).unwrap();
                let mut sgd = Sgd::new(dev, n, c).unwrap();
                let mut p: Vec<f64> = p0.iter().map(|&v| v as f64).collect();
                let mut buf = vec![0.0f64; n];
                let (mu, damp, wd) = (c.momentum as f64, c.dampening as f64, c.weight_decay as f64);
                for s in 0..STEPS {
                    let g = floats(&mut r, n, -1.0, 1.0);
                    let lr = 0.05f32;
                    sgd.step(dev, &mut params, &dev.upload(&g).unwrap(), lr)
                        .unwrap();
                    for i in 0..n {
                        let mut d = g[i] as f64 + wd * p[i];
                        if mu != 0.0 {
                            buf[i] = if s == 0 {
                                d
                            } else {
                                mu * buf[i] + (1.0 - damp) * d
                            };
                            d = if c.nesterov { d + mu * buf[i] } else { buf[i] };
                        }
                        p[i] -= lr as f64 * d;
                    }
                }
                let case = format!("SGD n={n} {c:?}");
                assert_eq!(sgd.steps().unwrap(), STEPS as u32, "{case}");
                let got = params.to_host().unwrap();
                assert_close_floor(&format!("{case} params"), &got, &p, TOL_PARAMS, 0.1);
                let delta: Vec<f32> = got.iter().zip(&p0).map(|(a, b)| a - b).collect();
                let want: Vec<f64> = p.iter().zip(&p0).map(|(a, &b)| a - b as f64).collect();
                assert_close_floor(&format!("{case} change"), &delta, &want, TOL_CHANGE, 0.01);
                if mu != 0.0 {
                    // The buffer sums gradients of magnitude ~0.5 and may cancel to near zero
                    // (one run on lavapipe: -0.0083 off by 1.1e-7, an ulp of its terms): judge
                    // it against the terms' scale, 0.1, as the parameters.
                    assert_close_floor(
                        &format!("{case} momentum"),
                        &sgd.momentum_buffer().to_host().unwrap(),
                        &buf,
                        TOL_STATE,
                        0.1,
                    );
                }
            }
        }
    });
}

#[test]
fn gradient_clipping_on_the_device() {
    let mut r = rng("gradient_clipping_on_the_device");
    on_every_backend(|dev| {
        // Past 16384 gradients the norm takes two partial passes.
        for n in [1, 7, 1000, 4097, 30_000] {
            for max_norm in [0.5f32, 1e6] {
                let g = floats(&mut r, n, -1.0, 1.0);
                let mut grads = dev.upload(&g).unwrap();
                let mut clip = GradClip::new(dev, n).unwrap();
                clip.clip(dev, &mut grads, max_norm).unwrap();
                let norm = g.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
                let coef = (max_norm as f64 / (norm + 1e-6)).min(1.0);
                let want: Vec<f64> = g.iter().map(|&v| v as f64 * coef).collect();
                let case = format!("clip n={n} max_norm={max_norm}");
                assert_close(
                    &format!("{case} norm"),
                    &clip.norm().to_host().unwrap(),
                    &[norm],
                    1e-5,
                );
                assert_close(&case, &grads.to_host().unwrap(), &want, 1e-5);
            }
        }
        let mut clip = GradClip::new(dev, 3).unwrap();
        let mut wrong = poisoned(dev, 4);
        assert!(clip.clip(dev, &mut wrong, 1.0).is_err());
    });
}

#[test]
fn the_step_counter_saturates_instead_of_wrapping() {
    let mut r = rng("the_step_counter_saturates_instead_of_wrapping");
    on_every_backend(|dev| {
        // 1 and 20 workgroups (one per 2048 parameters: eight an invocation); the count
        // starts one step before t = 2²⁰.
        for n in [7usize, 40000] {
            let groups = n.div_ceil(2048) as u32;
            let cap = 1u32 << 20;
            let c = AdamW::default_config();
            let count = dev.upload(&[(cap - 1) * groups, 5, 0]).unwrap();
            let mut opt = AdamW::from_state(c, dev.alloc(2 * n).unwrap(), count.clone()).unwrap();
            let p0 = floats(&mut r, n, -1.0, 1.0);
            let mut params = dev.upload(&p0).unwrap();
            let mut reference = AdamRef {
                p: p0.iter().map(|&v| v as f64).collect(),
                m: vec![0.0; n],
                v: vec![0.0; n],
                t: cap as i32 - 1,
            };
            for _ in 0..3 {
                let g = floats(&mut r, n, -1.0, 1.0);
                opt.step(dev, &mut params, &dev.upload(&g).unwrap(), 1e-2)
                    .unwrap();
                reference.step(&g, 1e-2, c, true);
                // Past the cap the reference's bias corrections are 1, as the device's.
                reference.t = reference.t.min(cap as i32 - 1);
            }
            assert_eq!(
                count.to_host().unwrap(),
                vec![cap * groups, 8, 0],
                "n={n}: [arrivals, steps, skip]"
            );
            assert_eq!(opt.steps().unwrap(), 8);
            let case = format!("AdamW n={n} at the counter's cap");
            assert_close_floor(
                &case,
                &params.to_host().unwrap(),
                &reference.p,
                TOL_PARAMS,
                0.1,
            );
        }
        assert_eq!(COUNTER_WORDS, 3);
    });
}

/// One workgroup over 5000 parameters: each invocation takes three passes of eight (the
/// last partial), its next pass's loads issued after its stores. Bitwise the update of the
/// library's grid (one pass each), three steps running, with a skipped step between.
#[test]
fn adam_step_over_several_passes_equals_one_pass_bitwise() {
    use graphed_kernels::optim::adam_step;
    use graphed_runtime::Grid;
    let mut r = rng("adam_step_over_several_passes_equals_one_pass_bitwise");
    on_every_backend(|dev| {
        let n = 5000;
        let p0 = floats(&mut r, n, -1.0, 1.0);
        let mv0 = floats(&mut r, 2 * n, 0.0, 0.01);
        let grads: Vec<Vec<f32>> = (0..3).map(|_| floats(&mut r, n, -1.0, 1.0)).collect();
        let run = |groups: u32| {
            let mut p = dev.upload(&p0).unwrap();
            let mv = dev.upload(&mv0).unwrap();
            let mut count = dev.upload(&[0u32; COUNTER_WORDS]).unwrap();
            for (s, g) in grads.iter().enumerate() {
                let g = dev.upload(g).unwrap();
                if s == 1 {
                    count.write(&[groups * s as u32, s as u32, 1]).unwrap();
                }
                let grid = Grid::workgroups(groups);
                let lr = 1e-2 + s as f32 * 1e-3;
                let (mut m, mut v) = (mv.slice(0..n).unwrap(), mv.slice(n..2 * n).unwrap());
                adam_step::launch(
                    dev, grid, lr, 0.9, 0.999, 1e-8, 0.01, true, true, &mut p, &g, &mut m, &mut v,
                    &mut count,
                )
                .unwrap();
                if s == 1 {
                    count.write(&[groups * s as u32, s as u32, 0]).unwrap();
                }
            }
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            (
                bits(p.to_host().unwrap()),
                bits(mv.to_host().unwrap()),
                count.to_host().unwrap(),
            )
        };
        let (one, many) = (run(20), run(1));
        let case = format!("{}", dev.kind());
        assert_eq!(one.0, many.0, "{case}: parameters");
        assert_eq!(one.1, many.1, "{case}: moments");
        // Two counted steps (the skipped one counted nothing), each workgroup arriving once.
        assert_eq!(
            one.2,
            vec![20 * 2, 2, 0],
            "{case}: counter of 20 workgroups"
        );
        assert_eq!(many.2, vec![2, 2, 0], "{case}: counter of one workgroup");
        assert_ne!(
            one.0,
            p0.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{case}: no update"
        );
    });
}

/// AdamW in segments (one launch per range, in an order that is not the parameters'):
/// bitwise the one-launch update over three steps with a skipped step between, and the same
/// counter (each step counted once, the lead's workgroups arriving once each).
#[test]
fn adam_in_segments_equals_one_launch_bitwise() {
    let mut r = rng("adam_in_segments_equals_one_launch_bitwise");
    on_every_backend(|dev| {
        let n = 5000; // 3 workgroups (one per 2048 parameters)
        let p0 = floats(&mut r, n, -1.0, 1.0);
        let grads: Vec<Vec<f32>> = (0..3).map(|_| floats(&mut r, n, -1.0, 1.0)).collect();
        let run = |segments: Option<&[std::ops::Range<usize>]>| {
            let mut p = dev.upload(&p0).unwrap();
            let mut opt = AdamW::new(dev, n, AdamW::default_config()).unwrap();
            for (s, g) in grads.iter().enumerate() {
                let g = dev.upload(g).unwrap();
                let skip = s == 1;
                if skip {
                    let mut c = opt.count().to_host().unwrap();
                    c[2] = 1;
                    opt.count().write(&c).unwrap();
                }
                let lr = 1e-2 + s as f32 * 1e-3;
                match segments {
                    Some(segs) => opt.step_segments(dev, &mut p, &g, lr, segs).unwrap(),
                    None => opt.step(dev, &mut p, &g, lr).unwrap(),
                }
                if skip {
                    let mut c = opt.count().to_host().unwrap();
                    c[2] = 0;
                    opt.count().write(&c).unwrap();
                }
            }
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            (
                bits(p.to_host().unwrap()),
                bits(opt.moments().to_host().unwrap()),
                opt.count().to_host().unwrap(),
            )
        };
        let one = run(None);
        let segs = [3001..5000, 0..1234, 1234..3001];
        let split = run(Some(&segs));
        // Twenty segments, the last parameters first.
        let many: Vec<std::ops::Range<usize>> =
            (0..20).rev().map(|i| i * 250..(i + 1) * 250).collect();
        let finest = run(Some(&many));
        let case = format!("{}", dev.kind());
        for (name, got) in [("three segments", &split), ("twenty segments", &finest)] {
            assert_eq!(got.0, one.0, "{case} {name}: parameters");
            assert_eq!(got.1, one.1, "{case} {name}: moments");
            assert_eq!(got.2, one.2, "{case} {name}: counter");
        }
        assert_eq!(one.2, vec![3 * 2, 2, 0], "{case}: counter");
        assert_ne!(
            one.0,
            p0.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "{case}: no update"
        );
    });
}

/// Segments must cover the parameters once each, none empty; anything else is refused before a launch, with what is wrong, and changes nothing.
#[test]
fn adam_segments_that_do_not_cover_the_parameters_once_are_refused() {
    let dev = Device::host();
    let n = 4500; // 3 workgroups
    let mut p = dev.upload(&vec![0.5f32; n]).unwrap();
    let g = dev.upload(&vec![0.25f32; n]).unwrap();
    let (a, b) = (n / 3, 2 * n / 3);
    let first = 0..a;
    let mut opt = AdamW::new(&dev, n, AdamW::default_config()).unwrap();
    let cases: [(&[std::ops::Range<usize>], &str); 6] = [
        (&[], "are none"),
        (&[0..a, a - 50..n], "overlap"),
        (&[0..a, a + 1..n], "leave parameters out"),
        (std::slice::from_ref(&first), "leave parameters out"),
        (&[0..a, a..a, a..n], "empty or reversed"),
        (&[0..a, a..n + 1], "reach past the end"),
    ];
    for (segs, why) in cases {
        let e = opt.step_segments(&dev, &mut p, &g, 1e-3, segs).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, graphed_runtime::Error::Shape(_)) && msg.contains(why),
            "{segs:?}: {msg}"
        );
    }
    assert_eq!(opt.steps().unwrap(), 0, "a refused update counted a step");
    assert_eq!(
        p.to_host().unwrap(),
        vec![0.5f32; n],
        "a refused update changed parameters"
    );
    // Three segments are taken: the lead's 3 workgroups arrive, the others only follow.
    opt.step_segments(&dev, &mut p, &g, 1e-3, &[b..n, 0..a, a..b])
        .unwrap();
    assert_eq!(opt.count().to_host().unwrap(), vec![3, 1, 0]);
}

/// Past the step cap (2²⁰) the launches that follow the lead use the capped step as the
/// lead does: an update in segments stays bitwise one launch's there too.
#[test]
fn adam_in_segments_past_the_step_cap_equals_one_launch_bitwise() {
    let mut r = rng("adam_in_segments_past_the_step_cap");
    on_every_backend(|dev| {
        let n = 7000; // 4 workgroups
        let p0 = floats(&mut r, n, -1.0, 1.0);
        let g0 = floats(&mut r, n, -1.0, 1.0);
        let mv0 = floats(&mut r, 2 * n, 0.0, 0.01);
        let steps = (1u32 << 20) + 5;
        let run = |segments: &[std::ops::Range<usize>]| {
            let mut p = dev.upload(&p0).unwrap();
            let g = dev.upload(&g0).unwrap();
            let mv = dev.upload(&mv0).unwrap();
            let count = dev.upload(&[4 * (1u32 << 20), steps, 0]).unwrap();
            let mut opt = AdamW::from_state(AdamW::default_config(), mv, count).unwrap();
            opt.step_segments(dev, &mut p, &g, 3e-3, segments).unwrap();
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            (
                bits(p.to_host().unwrap()),
                bits(opt.moments().to_host().unwrap()),
                opt.count().to_host().unwrap(),
            )
        };
        let one = run(std::slice::from_ref(&(0..n)));
        let split = run(&[5000..7000, 0..2000, 2000..5000]);
        let case = format!("{}", dev.kind());
        assert_eq!(split, one, "{case}");
        assert_eq!(
            one.2,
            vec![4 * (1u32 << 20), steps + 1, 0],
            "{case}: counter"
        );
    });
}
