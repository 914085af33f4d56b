//! Training under replay (issue 6): accumulation-safe gradients, no hidden updates, and the
//! gradient handed out is this step's, never overwritten by a later replay.

mod common;

use common::{bitwise_eq, floats, on_every_backend, rng};
use graphed::train::{AdaptStep, ApplyStep, Classifier, MicroStep, TrainStep};
use graphed::Device;
use rand::Rng;

const SIZES: [usize; 4] = [12, 16, 8, 5];

fn batch(r: &mut impl Rng, rows: usize) -> (Vec<f32>, Vec<u32>) {
    (
        floats(r, rows * SIZES[0], -1.0, 1.0),
        (0..rows)
            .map(|_| r.random_range(0..SIZES[3] as u32))
            .collect(),
    )
}

fn state(m: &Classifier) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<u32>) {
    (
        m.params.to_host().unwrap(),
        m.grads.to_host().unwrap(),
        m.moments.to_host().unwrap(),
        m.count.to_host().unwrap(),
    )
}

fn assert_same(a: &Classifier, b: &Classifier, what: &str) {
    let (sa, sb) = (state(a), state(b));
    assert!(bitwise_eq(&sa.0, &sb.0), "{what}: weights differ");
    assert!(bitwise_eq(&sa.1, &sb.1), "{what}: gradients differ");
    assert!(bitwise_eq(&sa.2, &sb.2), "{what}: optimizer moments differ");
    assert_eq!(sa.3, sb.3, "{what}: step counters differ");
}

/// k micro-batches per update, 50 updates, replay vs eager: bitwise equal everything, with one
/// recording per step kind however the mode switches.
#[test]
fn accumulation_under_replay_equals_eager_bitwise() {
    on_every_backend(|dev| {
        for k in 1..=4usize {
            let mut r = rng(&format!("accumulate k={k}"));
            let rows = 6;
            let mut rep = Classifier::new(dev, &SIZES, 7).unwrap();
            let mut eag = rep.duplicate().unwrap();
            let (mut micro, mut apply) =
                (MicroStep::new(dev).unwrap(), ApplyStep::new(dev).unwrap());
            let (mut micro_e, mut apply_e) =
                (MicroStep::new(dev).unwrap(), ApplyStep::new(dev).unwrap());
            let scale = 1.0 / (rows * k) as f32;
            for update in 0..50 {
                for m in 0..k {
                    let (x, y) = batch(&mut r, rows);
                    let acc = m > 0;
                    let l1 = micro
                        .call(&mut rep, &x[..], &y[..], acc, scale)
                        .unwrap()
                        .to_host()
                        .unwrap();
                    let l2 = micro_e
                        .eager(&mut eag, &x[..], &y[..], acc, scale)
                        .unwrap()
                        .to_host()
                        .unwrap();
                    assert!(
                        bitwise_eq(&l1, &l2),
                        "k={k} update {update} micro {m}: losses differ"
                    );
                }
                assert!(
                    bitwise_eq(&rep.grads.to_host().unwrap(), &eag.grads.to_host().unwrap()),
                    "k={k} update {update}: accumulated gradients differ"
                );
                let lr = 1e-2 / (1.0 + update as f32);
                apply.call(&mut rep, lr).unwrap();
                apply_e.eager(&mut eag, lr).unwrap();
                assert_same(&rep, &eag, &format!("k={k} update {update}"));
            }
            let (s, a) = (micro.stats(), apply.stats());
            assert_eq!(
                (s.recordings, s.replays),
                (1, 50 * k as u64),
                "k={k}: {s:?}"
            );
            assert_eq!((a.recordings, a.replays), (1, 50), "k={k}: {a:?}");
            assert_eq!(s.eager_calls + a.eager_calls, 0);
        }
    });
}

/// k micro-batches with `grad_scale = 1/(rows·k)` give the gradient of one batch of k·rows.
#[test]
fn accumulated_gradients_equal_one_large_batch() {
    on_every_backend(|dev| {
        let mut r = rng("accumulate_vs_big");
        let (rows, k) = (5, 3);
        let a = Classifier::new(dev, &SIZES, 3).unwrap();
        let mut b = a.duplicate().unwrap();
        let mut a = a;
        let (x, y) = batch(&mut r, rows * k);
        let mut micro = MicroStep::new(dev).unwrap();
        for m in 0..k {
            let xs = &x[m * rows * SIZES[0]..(m + 1) * rows * SIZES[0]];
            let ys = &y[m * rows..(m + 1) * rows];
            micro
                .call(&mut a, xs, ys, m > 0, 1.0 / (rows * k) as f32)
                .unwrap();
        }
        let mut big = MicroStep::new(dev).unwrap();
        big.call(&mut b, &x[..], &y[..], false, 1.0 / (rows * k) as f32)
            .unwrap();
        let (ga, gb) = (a.grads.to_host().unwrap(), b.grads.to_host().unwrap());
        let gb64: Vec<f64> = gb.iter().map(|&v| v as f64).collect();
        let err = common::rel_err(&ga, &gb64);
        assert!(
            err <= 1e-5,
            "accumulated vs one batch: relative error {err}"
        );
        assert!(!bitwise_eq(&ga, &vec![0.0; ga.len()]), "no gradient at all");
    });
}

/// Recording a step changes no state: after the first call (record + first replay) the state
/// equals one eager update from the same start, and the step counter says 1.
#[test]
fn recording_is_not_an_update_and_the_first_replay_is() {
    on_every_backend(|dev| {
        let mut r = rng("no_hidden_update");
        let mut rep = Classifier::new(dev, &SIZES, 11).unwrap();
        let mut eag = rep.duplicate().unwrap();
        let before = state(&rep);
        let (x, y) = batch(&mut r, 8);
        let mut step = TrainStep::new(dev).unwrap();
        let mut e = TrainStep::new(dev).unwrap();
        step.call(&mut rep, &x[..], &y[..], 1e-2).unwrap();
        e.eager(&mut eag, &x[..], &y[..], 1e-2).unwrap();
        assert_eq!(step.stats().recordings, 1);
        assert_eq!(step.stats().replays, 1);
        assert_same(&rep, &eag, "after the first call");
        assert_ne!(
            state(&rep).0,
            before.0,
            "the first replay did not update the weights"
        );
        // The counter advanced by exactly one update (count is stored per optimizer workgroup).
        let adam = graphed::kernels::optim::Adam::from_state(
            rep.config,
            true,
            rep.moments.clone(),
            rep.count.clone(),
        )
        .unwrap();
        assert_eq!(adam.steps().unwrap(), 1);
    });
}

/// The gradient handed out by a step is a runtime-owned copy taken inside the recording
/// (before clipping): it equals eager's, differs from the clipped state, and stays this
/// step's value.
#[test]
fn the_gradient_handed_out_is_this_steps_and_not_the_live_buffer() {
    on_every_backend(|dev| {
        let mut r = rng("grad_snapshot");
        let mut rep = Classifier::new(dev, &SIZES, 5).unwrap();
        let mut eag = rep.duplicate().unwrap();
        let n = rep.grads.len();
        let parts = graphed::kernels::optim::GradClip::partials_len(n);
        let mk = |d: &Device| (d.alloc::<f32>(parts).unwrap(), d.alloc::<f32>(1).unwrap());
        let ((mut p1, mut n1), (mut p2, mut n2)) = (mk(dev), mk(dev));
        let mut step = AdaptStep::new(dev).unwrap();
        let mut e = AdaptStep::new(dev).unwrap();
        for i in 0..5 {
            let (x, y) = batch(&mut r, 8);
            let max_norm = 1e-3; // far below the gradient norm: clipping always bites
            let (_, raw1) = step
                .call(&mut rep, &mut p1, &mut n1, &x[..], &y[..], 1e-2, max_norm)
                .unwrap();
            let raw1 = raw1.to_host().unwrap();
            let (_, raw2) = e
                .eager(&mut eag, &mut p2, &mut n2, &x[..], &y[..], 1e-2, max_norm)
                .unwrap();
            let raw2 = raw2.to_host().unwrap();
            assert!(
                bitwise_eq(&raw1, &raw2),
                "step {i}: handed-out gradients differ from eager"
            );
            let clipped = rep.grads.to_host().unwrap();
            assert!(
                !bitwise_eq(&raw1, &clipped),
                "step {i}: the handed-out gradient is the clipped live buffer"
            );
            let norm: f64 = raw1.iter().map(|&g| (g as f64).powi(2)).sum::<f64>().sqrt();
            let reported = n1.to_host().unwrap()[0] as f64;
            assert!(
                (norm - reported).abs() <= 1e-4 * norm,
                "step {i}: norm {reported} vs {norm}"
            );
            assert_same(&rep, &eag, &format!("step {i}"));
        }
        assert_eq!(step.stats().recordings, 1);
    });
}
