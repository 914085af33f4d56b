//! Long runs (issue 8, case 14): the MLP-S training step replayed many times equals eager
//! bitwise at every checkpoint, with no memory growth. `GRAPHED_LONG_STEPS` sets the number
//! of updates (default 10, so CI stays quick; the GPU run uses 100,000 on CUDA and 10,000 on
//! wgpu). Each backend runs only when listed in `GRAPHED_LONG_BACKENDS` (default: all).

mod common;

use common::bitwise_eq;
use graphed::testing::on_every_backend;
use graphed::train::{Classifier, TrainStep};

const SIZES: [usize; 4] = [784, 256, 256, 10];

fn steps_for(kind: graphed::BackendKind) -> Option<usize> {
    if let Ok(list) = std::env::var("GRAPHED_LONG_BACKENDS") {
        if !list.split(',').any(|b| b.trim() == kind.name()) {
            return None;
        }
    }
    let v = std::env::var("GRAPHED_LONG_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    // The host backend interprets kernels: cap it so a long GPU run does not take hours there.
    Some(if kind == graphed::BackendKind::Host {
        v.min(40)
    } else {
        v
    })
}

#[test]
fn mlp_s_replay_matches_eager_at_checkpoints_without_memory_growth() {
    on_every_backend(|dev| {
        let Some(steps) = steps_for(dev.kind()) else {
            return;
        };
        let dev = &graphed::Device::open_new(dev.kind()).unwrap();
        let batch = 64;
        let mut rep = Classifier::new(dev, &SIZES, 42).unwrap();
        let mut eag = rep.duplicate().unwrap();
        let mut step = TrainStep::new(dev).unwrap();
        let mut eager = TrainStep::new(dev).unwrap();
        // A fixed pool of batches (inputs change every step, drawn from the pool).
        let pool: Vec<(Vec<f32>, Vec<u32>)> = (0..8)
            .map(|p| {
                let x = (0..batch * SIZES[0])
                    .map(|i| (((i * 131 + p * 7919) % 997) as f32 / 498.5) - 1.0)
                    .collect();
                let y = (0..batch).map(|i| ((i * 3 + p) % 10) as u32).collect();
                (x, y)
            })
            .collect();
        let checkpoints = 10.min(steps).max(1);
        let mut baseline = None;
        let mut free_baseline = None;
        for s in 0..steps {
            let (x, y) = &pool[s % pool.len()];
            let lr = 1e-3 * (1.0 - s as f32 / steps as f32).max(0.1);
            step.call(&mut rep, &x[..], &y[..], lr).unwrap();
            eager.eager(&mut eag, &x[..], &y[..], lr).unwrap();
            if s == 0 {
                dev.synchronize().unwrap();
                baseline = Some(dev.allocated_bytes());
                free_baseline = dev.memory_info().map(|m| m.0);
            }
            if (s + 1) % (steps / checkpoints).max(1) == 0 || s + 1 == steps {
                let (a, b) = (rep.params.to_host().unwrap(), eag.params.to_host().unwrap());
                assert!(
                    bitwise_eq(&a, &b),
                    "weights diverge from eager at step {}",
                    s + 1
                );
                assert_eq!(
                    dev.allocated_bytes(),
                    baseline.unwrap(),
                    "graphed's allocations grew by step {}",
                    s + 1
                );
            }
        }
        dev.synchronize().unwrap();
        if let (Some(before), Some((after, _))) = (free_baseline, dev.memory_info()) {
            let grown = before.saturating_sub(after);
            eprintln!(
                "{}: {steps} steps, driver free memory changed by {grown} bytes",
                dev.kind()
            );
            assert!(
                grown < 1 << 20,
                "device memory grew by {grown} bytes over {steps} steps"
            );
        }
        let s = step.stats();
        assert_eq!((s.recordings, s.replays), (1, steps as u64));
        eprintln!(
            "{}: {steps} replays equal eager at {checkpoints} checkpoints",
            dev.kind()
        );
    });
}
