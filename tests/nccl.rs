//! Data-parallel steps (issue 9): the gradient all-reduce recorded inside each rank's graph,
//! drain before release across ranks, and one outcome for every rank's recording.
//!
//! Tests of one rank run on every backend (on CUDA through NCCL; on the host and wgpu the
//! all-reduce of one rank is the identity). Tests of two ranks need two CUDA GPUs: they skip
//! on fewer unless `GRAPHED_REQUIRE` lists `nccl2`, and fail then. `GRAPHED_REQUIRE=nccl` makes
//! a CUDA communicator of one rank mandatory (libnccl must load). RELIABILITY.md lists the
//! cases; README's "Data-parallel steps" gives the commands.
#![cfg(feature = "nccl")]

mod common;

use common::{bitwise_eq, floats, on_every_backend, rel_err, rng};
use graphed::dist::{Communicator, DataParallel, ReduceOp};
use graphed::prelude::*;
use graphed::train::{Classifier, DpTrainStep, TrainStep};
use graphed::{BackendKind, PlanOp, Required};
use rand::Rng;

const SIZES: [usize; 4] = [12, 16, 8, 5];
/// MLP-S of the benchmarks (784-256-256-10, batch 64).
const MLP_S: [usize; 4] = [784, 256, 256, 10];

/// A communicator of one rank on `dev`, or `None` (skip) on CUDA when NCCL cannot be loaded
/// and `GRAPHED_REQUIRE` does not list `nccl`.
fn single(dev: &Device) -> Option<Communicator> {
    match Communicator::single(dev) {
        Ok(c) => Some(c),
        Err(e) if dev.kind() == BackendKind::Cuda && !Required::from_env().unwrap().nccl => {
            eprintln!("note: skipping NCCL on cuda: {e}");
            None
        }
        Err(e) => panic!("a communicator of one rank on {}: {e}", dev.kind()),
    }
}

/// Whether `n` CUDA GPUs and NCCL are there for a multi-rank test (without opening any GPU, so
/// that child processes can); `false` (skip) unless `GRAPHED_REQUIRE` lists `nccl2`.
fn have_gpus(n: usize) -> bool {
    let required = Required::from_env().unwrap().nccl2;
    let found = Device::cuda_count();
    if found < n {
        assert!(
            !required,
            "nccl2 is required by GRAPHED_REQUIRE but only {found} CUDA device(s) were found"
        );
        eprintln!("note: skipping a {n}-rank test: {found} CUDA device(s)");
        return false;
    }
    if let Err(e) = graphed::dist::nccl_version() {
        assert!(!required, "nccl2 is required by GRAPHED_REQUIRE: {e}");
        eprintln!("note: skipping a {n}-rank test: {e}");
        return false;
    }
    true
}

/// `n` CUDA devices on distinct GPUs with NCCL, or `None` (skip); see [`have_gpus`].
fn gpus(n: usize) -> Option<Vec<Device>> {
    have_gpus(n).then(|| (0..n).map(|o| Device::cuda_on(o).unwrap()).collect())
}

/// Aborts the test process with a message if it is still armed after `secs`: a multi-rank
/// test that deadlocks (ranks waiting for each other) fails with a message instead of hanging.
struct Watchdog(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Watchdog {
    fn arm(test: &'static str, secs: u64) -> Watchdog {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
            while std::time::Instant::now() < deadline {
                if flag.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            eprintln!("{test}: still running after {secs} s: the ranks are deadlocked; aborting");
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

fn batch(r: &mut impl Rng, rows: usize, sizes: &[usize]) -> (Vec<f32>, Vec<u32>) {
    (
        floats(r, rows * sizes[0], -1.0, 1.0),
        (0..rows)
            .map(|_| r.random_range(0..*sizes.last().unwrap() as u32))
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

/// `out = x`, then `out` all-reduced over the ranks of `comm` (mean or sum).
#[graphed]
fn reduce_copy(
    cx: &mut Step,
    x: &Input<f32>,
    #[key] comm: &Communicator,
    #[key] mean: bool,
) -> Result<Output<f32>> {
    let mut out = cx.output::<f32>(x.len())?;
    cx.copy(x, &mut out)?;
    let op = if mean { ReduceOp::Mean } else { ReduceOp::Sum };
    cx.all_reduce(comm, &mut out, op)?;
    Ok(out)
}

/// A DP training step on `comm` over one batch, replayed.
#[allow(clippy::too_many_arguments)]
fn dp_call(
    step: &mut DpTrainStep,
    m: &mut Classifier,
    x: &[f32],
    y: &[u32],
    lr: f32,
    comm: &Communicator,
) -> Vec<f32> {
    step.call(m, x, y, lr, comm).unwrap().to_host().unwrap()
}

/// One plain (no all-reduce) training step of `m`; returns the loss.
fn plain_call(step: &mut TrainStep, m: &mut Classifier, x: &[f32], y: &[u32], lr: f32) -> Vec<f32> {
    step.call(m, x, y, lr).unwrap().to_host().unwrap()
}

// ---------------------------------------------------------------------------------------------
// One rank, every backend.

#[test]
fn an_all_reduce_of_one_rank_leaves_values_bitwise_unchanged() {
    on_every_backend(|dev| {
        let Some(comm) = single(dev) else { return };
        let mut r = rng("one_rank_identity");
        for mean in [false, true] {
            let mut step = ReduceCopy::new(dev).unwrap();
            for call in 0..3 {
                let mut x = floats(&mut r, 1000 + call, -1e3, 1e3);
                x[1] = -f32::MAX; // extremes are unchanged too
                x[2] = f32::MIN_POSITIVE;
                let out = step.call(&x[..], &comm, mean).unwrap().to_host().unwrap();
                assert!(
                    bitwise_eq(&out, &x),
                    "mean={mean} call {call}: the all-reduce of one rank changed values"
                );
            }
            let st = step.stats();
            assert_eq!(st.recordings, 3, "{st:?}");
            assert_eq!(st.eager_calls, 0, "{st:?}");
            let plan = step.plan().unwrap();
            let reduces: Vec<_> = plan
                .ops()
                .into_iter()
                .filter(|o| matches!(o, PlanOp::AllReduce { .. }))
                .collect();
            assert_eq!(reduces.len(), 1, "{reduces:?}");
            assert!(
                matches!(
                    reduces[0],
                    PlanOp::AllReduce {
                        rank: 0,
                        ranks: 1,
                        ..
                    }
                ),
                "{reduces:?}"
            );
        }
        // Eager, outside a step, on every element type.
        let v = floats(&mut r, 257, -5.0, 5.0);
        let mut b = dev.upload(&v).unwrap();
        comm.all_reduce(&mut b, ReduceOp::Mean).unwrap();
        assert!(bitwise_eq(&b.to_host().unwrap(), &v));
        let ints: Vec<i32> = (0..100).map(|_| r.random_range(-1000..1000)).collect();
        let mut bi = dev.upload(&ints).unwrap();
        comm.all_reduce(&mut bi, ReduceOp::Sum).unwrap();
        assert_eq!(bi.to_host().unwrap(), ints);
        assert_eq!(comm.uses_nccl(), dev.kind() == BackendKind::Cuda);
    });
}

#[test]
fn a_step_with_an_all_reduce_replays_bitwise_equal_to_eager() {
    on_every_backend(|dev| {
        let Some(comm) = single(dev) else { return };
        let mut r = rng("dp_replay_vs_eager");
        let mut rep = Classifier::new(dev, &SIZES, 3).unwrap();
        let mut eag = rep.duplicate().unwrap();
        let (mut step, mut eager) = (
            DpTrainStep::new(dev).unwrap(),
            DpTrainStep::new(dev).unwrap(),
        );
        for s in 0..20 {
            let (x, y) = batch(&mut r, 8, &SIZES);
            let lr = 1e-2 / (1.0 + s as f32);
            let l1 = dp_call(&mut step, &mut rep, &x, &y, lr, &comm);
            let l2 = eager
                .eager(&mut eag, &x[..], &y[..], lr, &comm)
                .unwrap()
                .to_host()
                .unwrap();
            assert!(bitwise_eq(&l1, &l2), "step {s}: losses differ");
            assert_same(&rep, &eag, &format!("step {s}"));
        }
        let st = step.stats();
        assert_eq!(
            (st.recordings, st.replays, st.eager_calls),
            (1, 20, 0),
            "{st:?}"
        );
    });
}

#[test]
fn training_with_an_all_reduce_of_one_rank_equals_training_without() {
    on_every_backend(|dev| {
        let Some(comm) = single(dev) else { return };
        let mut r = rng("dp_one_rank_vs_plain");
        let mut dp = Classifier::new(dev, &SIZES, 9).unwrap();
        let mut plain = dp.duplicate().unwrap();
        let (mut a, mut b) = (DpTrainStep::new(dev).unwrap(), TrainStep::new(dev).unwrap());
        for s in 0..30 {
            let (x, y) = batch(&mut r, 7, &SIZES);
            let l1 = dp_call(&mut a, &mut dp, &x, &y, 1e-2, &comm);
            let l2 = plain_call(&mut b, &mut plain, &x, &y, 1e-2);
            assert!(bitwise_eq(&l1, &l2), "step {s}: losses differ");
            assert_same(&dp, &plain, &format!("step {s}"));
        }
        assert_eq!(a.stats().replays, 30);
    });
}

#[test]
fn the_all_reduce_sits_between_backward_and_the_optimizer() {
    on_every_backend(|dev| {
        let Some(comm) = single(dev) else { return };
        let mut r = rng("dp_plan");
        let mut m = Classifier::new(dev, &SIZES, 1).unwrap();
        let mut step = DpTrainStep::new(dev).unwrap();
        let (x, y) = batch(&mut r, 4, &SIZES);
        dp_call(&mut step, &mut m, &x, &y, 1e-2, &comm);
        let plan = step.plan().unwrap();
        let grads = plan
            .buffers()
            .iter()
            .position(|b| b.name == "grads")
            .expect("the gradients are a state buffer of the plan");
        let ops = plan.ops();
        let at = ops
            .iter()
            .position(|o| matches!(o, PlanOp::AllReduce { .. }))
            .expect("one all-reduce");
        assert!(
            matches!(ops[at], PlanOp::AllReduce { buffer, op: ReduceOp::Mean, .. } if buffer == grads),
            "{:?}",
            ops[at]
        );
        let writes_grads =
            |o: &PlanOp| matches!(o, PlanOp::Launch { writes, .. } if writes.contains(&grads));
        let reads_grads =
            |o: &PlanOp| matches!(o, PlanOp::Launch { reads, .. } if reads.contains(&grads));
        assert!(
            ops[..at].iter().any(writes_grads),
            "no backward before the all-reduce"
        );
        assert!(
            ops[at + 1..].iter().any(reads_grads),
            "no optimizer after the all-reduce"
        );
        assert!(
            !ops[at + 1..].iter().any(writes_grads),
            "gradients written after the all-reduce"
        );
        assert!(plan.to_dot().contains("all-reduce mean (rank 0 of 1)"));
    });
}

#[test]
fn one_rank_through_the_driver_equals_a_plain_training_run() {
    on_every_backend(|dev| {
        let Some(comm) = single(dev) else { return };
        let mut r = rng("dp_driver_one_rank");
        let data: Vec<(Vec<f32>, Vec<u32>)> = (0..10).map(|_| batch(&mut r, 6, &SIZES)).collect();
        let dev2 = dev.clone();
        let mut driver = DataParallel::new(vec![comm], move |_| {
            Ok((Classifier::new(&dev2, &SIZES, 5)?, DpTrainStep::new(&dev2)?))
        })
        .unwrap();
        let mut plain = Classifier::new(dev, &SIZES, 5).unwrap();
        let mut b = TrainStep::new(dev).unwrap();
        for (x, y) in &data {
            let (x2, y2) = (x.clone(), y.clone());
            let losses = driver
                .run(move |comm, (m, step)| Ok(dp_call(step, m, &x2, &y2, 1e-2, comm)))
                .unwrap();
            let l = plain_call(&mut b, &mut plain, x, y, 1e-2);
            assert!(bitwise_eq(&losses[0], &l));
        }
        let weights = driver
            .run(|_, (m, _)| m.params.to_host())
            .unwrap()
            .remove(0);
        assert!(bitwise_eq(&weights, &plain.params.to_host().unwrap()));
        // A failing step is the rank's error, and the ranks are out of step after it.
        let err = driver
            .run(|_, _| -> Result<()> { Err(graphed::Error::Shape("injected".into())) })
            .unwrap_err();
        assert!(err.to_string().contains("injected"), "{err}");
        let err = driver.run(|_, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("out of step"), "{err}");
    });
}

#[test]
fn a_communicator_of_another_device_is_refused() {
    let (a, b) = (
        Device::open_new(BackendKind::Host).unwrap(),
        Device::open_new(BackendKind::Host).unwrap(),
    );
    let comm = Communicator::single(&a).unwrap();
    let mut step = ReduceCopy::new(&b).unwrap();
    let err = step.call(&[1.0f32, 2.0][..], &comm, false).unwrap_err();
    assert!(
        err.to_string().contains("another device"),
        "expected a device mismatch, got {err}"
    );
    let mut buf = b.upload(&[1.0f32; 4]).unwrap();
    assert!(comm.all_reduce(&mut buf, ReduceOp::Sum).is_err());
}

#[test]
fn more_than_one_rank_needs_cuda_devices_on_distinct_gpus() {
    let hosts = [
        Device::open_new(BackendKind::Host).unwrap(),
        Device::open_new(BackendKind::Host).unwrap(),
    ];
    match Communicator::group(&hosts).unwrap_err() {
        graphed::Error::Unavailable { backend, reason } => {
            assert_eq!(backend, "nccl");
            assert!(reason.contains("CUDA devices"), "{reason}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(matches!(
        Communicator::group(&[]).unwrap_err(),
        graphed::Error::Shape(_)
    ));
    if let Ok(d) = Device::cuda_on(0) {
        if graphed::dist::nccl_version().is_ok() {
            let twice = [d.clone(), Device::cuda_on(0).unwrap()];
            let err = Communicator::group(&twice).unwrap_err();
            assert!(err.to_string().contains("one GPU per rank"), "{err}");
        }
    }
}

#[test]
fn a_missing_libnccl_is_an_error_naming_what_to_install() {
    match graphed::dist::nccl_version() {
        Ok(v) => assert!(v.starts_with("2."), "NCCL {v}"),
        Err(graphed::Error::Unavailable { backend, reason }) => {
            assert_eq!(backend, "nccl");
            assert!(
                reason.contains("libnccl.so") && reason.contains("install"),
                "{reason}"
            );
            let req = Required::from_env().unwrap();
            assert!(!req.nccl && !req.nccl2, "NCCL is required: {reason}");
            // Every entry point says the same, none panics.
            assert!(Communicator::unique_id().is_err());
        }
        Err(other) => panic!("expected Unavailable, got {other:?}"),
    }
}

#[test]
fn a_failed_drain_of_a_rank_in_clear_returns_the_error_naming_the_rank() {
    on_every_backend(|dev| {
        let dev = &Device::open_new(dev.kind()).unwrap();
        let Some(comm) = single(dev) else { return };
        let mut step = ReduceCopy::new(dev).unwrap();
        step.call(&[1.0f32, 2.0, 3.0][..], &comm, true).unwrap();
        let held = dev.allocated_bytes();
        comm.__fail_next_drain();
        let err = step.clear().unwrap_err();
        assert!(matches!(err, graphed::Error::Drain { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("rank 0 of 1") && msg.contains("injected"),
            "{msg}"
        );
        assert_eq!(step.stats().cached, 0);
        assert_eq!(
            dev.allocated_bytes(),
            held,
            "memory was freed after a failed drain"
        );
        // The next drain works again.
        step.call(&[1.0f32, 2.0, 3.0][..], &comm, true).unwrap();
        step.clear().unwrap();
    });
}

/// Child half of the fail-stop tests: `GRAPHED_DIST_CHILD=backend:ranks:who` builds `ranks`
/// ranks, steps them, injects a failed drain on the last rank, then releases through `who`
/// (`holder`: rank 0 drops its holder; `driver`: the driver is dropped).
#[test]
fn dist_fail_stop_child() {
    let Ok(spec) = std::env::var("GRAPHED_DIST_CHILD") else {
        return;
    };
    let parts: Vec<&str> = spec.split(':').collect();
    let ranks: usize = parts[1].parse().unwrap();
    let comms = if ranks == 1 {
        let kind = match parts[0] {
            "wgpu" => BackendKind::Wgpu,
            "cuda" => BackendKind::Cuda,
            _ => BackendKind::Host,
        };
        vec![Communicator::single(&Device::open_new(kind).unwrap()).unwrap()]
    } else {
        let devs: Vec<Device> = (0..ranks).map(|o| Device::cuda_on(o).unwrap()).collect();
        Communicator::group(&devs).unwrap()
    };
    let last = comms.last().unwrap().clone();
    let mut driver = DataParallel::new(comms, |comm| {
        Ok(Some((
            Classifier::new(comm.device(), &SIZES, 2)?,
            DpTrainStep::new(comm.device())?,
        )))
    })
    .unwrap();
    for _ in 0..3 {
        driver
            .run(|comm, s| {
                let (m, step) = s.as_mut().unwrap();
                let x = vec![0.25f32; 4 * SIZES[0]];
                Ok(dp_call(step, m, &x, &[1, 2, 3, 4], 1e-2, comm))
            })
            .unwrap();
    }
    last.__fail_next_drain();
    if parts[2] == "holder" {
        driver
            .run(|comm, s| {
                if comm.rank() == 0 {
                    drop(s.take());
                }
                Ok(())
            })
            .unwrap();
    } else {
        drop(driver);
    }
    println!("child survived the release");
}

fn expect_abort(spec: &str, want: &[&str]) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "dist_fail_stop_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GRAPHED_DIST_CHILD", spec)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "{spec}: the child exited normally: {stdout}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(6),
            "{spec}: expected SIGABRT; stderr: {stderr}"
        );
    }
    for w in want {
        assert!(stderr.contains(w), "{spec}: `{w}` not in stderr: {stderr}");
    }
    assert!(!stdout.contains("child survived"), "{stdout}");
}

#[test]
fn a_failed_drain_of_a_rank_on_release_aborts_naming_the_rank() {
    on_every_backend(|dev| {
        if single(dev).is_none() {
            return;
        }
        let k = dev.kind().name();
        expect_abort(
            &format!("{k}:1:holder"),
            &["could not drain", "rank 0 of 1", "injected", "aborting"],
        );
        expect_abort(
            &format!("{k}:1:driver"),
            &[
                "ranks could not drain",
                "rank 0 of 1",
                "injected",
                "aborting",
            ],
        );
    });
}

#[test]
fn a_capture_failure_of_the_only_rank_runs_it_eagerly_with_the_same_results() {
    on_every_backend(|dev| {
        if dev.kind() != BackendKind::Cuda {
            return; // only CUDA captures
        }
        let dev = &Device::open_new(BackendKind::Cuda).unwrap();
        let Some(comm) = single(dev) else { return };
        let mut r = rng("dp_capture_fault");
        let mut a = Classifier::new(dev, &SIZES, 4).unwrap();
        let mut b = a.duplicate().unwrap();
        let (mut step, mut reference) = (
            DpTrainStep::new(dev).unwrap(),
            DpTrainStep::new(dev).unwrap(),
        );
        graphed::__private::inject_capture_fault("injected capture failure");
        for s in 0..5 {
            let (x, y) = batch(&mut r, 5, &SIZES);
            dp_call(&mut step, &mut a, &x, &y, 1e-2, &comm);
            dp_call(&mut reference, &mut b, &x, &y, 1e-2, &comm);
            assert_same(&a, &b, &format!("step {s}"));
        }
        let st = step.stats();
        assert_eq!((st.recordings, st.eager_calls), (0, 5), "{st:?}");
        assert!(
            st.eager_reasons[0].contains("injected capture failure"),
            "{st:?}"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Two ranks (two GPUs).

#[test]
fn two_ranks_all_reduce_exactly_eagerly_and_under_replay() {
    let Some(devs) = gpus(2) else { return };
    let _w = Watchdog::arm("two_ranks_all_reduce", 300);
    let comms = Communicator::group(&devs).unwrap();
    assert_eq!(
        comms
            .iter()
            .map(|c| (c.rank(), c.size()))
            .collect::<Vec<_>>(),
        [(0, 2), (1, 2)]
    );
    // Integers as floats: sums and halves are exact, so every rank must see them bitwise.
    let value =
        |rank: usize, call: usize, i: usize| ((i * 7 + call) % 101) as f32 + 1000.0 * rank as f32;
    let mut driver = DataParallel::new(comms, |comm| {
        Ok((
            ReduceCopy::new(comm.device())?,
            ReduceCopy::new(comm.device())?,
        ))
    })
    .unwrap();
    for call in 0..4 {
        let out = driver
            .run(move |comm, (sum, mean)| {
                let x: Vec<f32> = (0..4099).map(|i| value(comm.rank(), call, i)).collect();
                let s = sum.call(&x[..], comm, false)?.to_host()?;
                let m = mean.call(&x[..], comm, true)?.to_host()?;
                let mut eager = comm.device().upload(&x)?;
                comm.all_reduce(&mut eager, ReduceOp::Sum)?;
                Ok((s, m, eager.to_host()?))
            })
            .unwrap();
        for (rank, (s, m, e)) in out.iter().enumerate() {
            for i in 0..4099 {
                let want = value(0, call, i) + value(1, call, i);
                assert_eq!(
                    s[i].to_bits(),
                    want.to_bits(),
                    "rank {rank} call {call} sum [{i}]"
                );
                assert_eq!(
                    e[i].to_bits(),
                    want.to_bits(),
                    "rank {rank} call {call} eager [{i}]"
                );
                assert_eq!(
                    m[i].to_bits(),
                    (want / 2.0).to_bits(),
                    "rank {rank} call {call} mean [{i}]"
                );
            }
        }
    }
    let stats = driver
        .run(|_, (sum, mean)| Ok((sum.stats(), mean.stats())))
        .unwrap();
    for (s, m) in stats {
        assert_eq!((s.recordings, s.replays, s.eager_calls), (1, 4, 0), "{s:?}");
        assert_eq!((m.recordings, m.replays, m.eager_calls), (1, 4, 0), "{m:?}");
    }
}

/// Relative L2 distance allowed between the 2-rank and the 1-GPU weights of MLP-S after 100
/// AdamW steps (lr 1e-3): the two gradients differ only in floating-point summation order (two
/// half sums instead of one). On the host oracle, the same split (two half-batch gradients
/// averaged, then AdamW) drifts from the full batch by 3.0e-7 after 10 steps and 3.5e-7 after
/// 100; the bound leaves a margin of about 30x for the GPU's own rounding.
const DP_TOLERANCE: f64 = 1e-5;

#[test]
fn two_rank_mlp_s_matches_one_gpu_on_the_full_batch_and_ranks_stay_bitwise_equal() {
    let Some(devs) = gpus(2) else { return };
    let _w = Watchdog::arm("two_rank_mlp_s", 300);
    let (batch_rows, steps) = (64usize, 100usize);
    let mut r = rng("dp_two_ranks_mlp_s");
    let data: std::sync::Arc<Vec<(Vec<f32>, Vec<u32>)>> = std::sync::Arc::new(
        (0..steps)
            .map(|_| batch(&mut r, batch_rows, &MLP_S))
            .collect(),
    );
    // The 1-GPU reference on the full batch, on its own device of GPU 0.
    let one = Device::cuda_on(0).unwrap();
    let mut reference = Classifier::new(&one, &MLP_S, 42).unwrap();
    let mut full = TrainStep::new(&one).unwrap();
    let comms = Communicator::group(&devs).unwrap();
    let mut driver = DataParallel::new(comms, |comm| {
        Ok((
            Classifier::new(comm.device(), &MLP_S, 42)?,
            DpTrainStep::new(comm.device())?,
        ))
    })
    .unwrap();
    let weights = |d: &mut DataParallel<(Classifier, DpTrainStep)>| {
        d.run(|_, (m, _)| m.params.to_host()).unwrap()
    };
    let w = weights(&mut driver);
    assert!(
        bitwise_eq(&w[0], &w[1]),
        "ranks start from different weights"
    );
    assert!(bitwise_eq(&w[0], &reference.params.to_host().unwrap()));
    let half = batch_rows / 2;
    for s in 0..steps {
        let lr = 1e-3;
        let d = data.clone();
        // Each rank reads its loss back inside its step: were the ranks driven one after the
        // other, rank 0 would wait forever for rank 1's all-reduce.
        let losses = driver
            .run(move |comm, (m, step)| {
                let (x, y) = &d[s];
                let rk = comm.rank();
                Ok(dp_call(
                    step,
                    m,
                    &x[rk * half * MLP_S[0]..(rk + 1) * half * MLP_S[0]],
                    &y[rk * half..(rk + 1) * half],
                    lr,
                    comm,
                ))
            })
            .unwrap();
        assert!(
            losses.iter().all(|l| l[0].is_finite()),
            "step {s}: {losses:?}"
        );
        let (x, y) = &data[s];
        full.call(&mut reference, &x[..], &y[..], lr).unwrap();
        if (s + 1) % 10 == 0 {
            let w = weights(&mut driver);
            assert!(
                bitwise_eq(&w[0], &w[1]),
                "step {}: the ranks' weights differ",
                s + 1
            );
        }
    }
    let w = weights(&mut driver);
    let want: Vec<f64> = reference
        .params
        .to_host()
        .unwrap()
        .iter()
        .map(|&v| v as f64)
        .collect();
    let err = rel_err(&w[0], &want);
    eprintln!("2-rank vs 1-GPU MLP-S after {steps} steps: relative L2 error {err:.3e}");
    assert!(
        err <= DP_TOLERANCE,
        "relative error {err:.3e} > {DP_TOLERANCE:e}"
    );
    let stats = driver.run(|_, (_, step)| Ok(step.stats())).unwrap();
    for st in stats {
        assert_eq!(
            (st.recordings, st.replays, st.eager_calls),
            (1, steps as u64, 0),
            "{st:?}"
        );
    }
}

#[test]
fn a_capture_failure_on_one_rank_makes_every_rank_run_that_step_eagerly() {
    let Some(devs) = gpus(2) else { return };
    let _w = Watchdog::arm("capture_failure_two_ranks", 300);
    let comms = Communicator::group(&devs).unwrap();
    let mut driver = DataParallel::new(comms, |comm| {
        Ok((
            Classifier::new(comm.device(), &SIZES, 8)?,
            DpTrainStep::new(comm.device())?,
        ))
    })
    .unwrap();
    let mut r = rng("dp_capture_fault_two_ranks");
    let data: std::sync::Arc<Vec<(Vec<f32>, Vec<u32>)>> =
        std::sync::Arc::new((0..6).map(|_| batch(&mut r, 8, &SIZES)).collect());
    for s in 0..6 {
        let d = data.clone();
        driver
            .run(move |comm, (m, step)| {
                if s == 0 && comm.rank() == 1 {
                    graphed::__private::inject_capture_fault("injected on rank 1");
                }
                let (x, y) = &d[s];
                let h = 4;
                let rk = comm.rank();
                Ok(dp_call(
                    step,
                    m,
                    &x[rk * h * SIZES[0]..(rk + 1) * h * SIZES[0]],
                    &y[rk * h..(rk + 1) * h],
                    1e-2,
                    comm,
                ))
            })
            .unwrap();
    }
    let out = driver
        .run(|_, (m, step)| Ok((step.stats(), m.params.to_host()?)))
        .unwrap();
    for (rank, (st, _)) in out.iter().enumerate() {
        assert_eq!(
            (st.recordings, st.replays, st.eager_calls),
            (0, 0, 6),
            "rank {rank}: {st:?}"
        );
        assert!(
            st.eager_reasons[0].contains("injected on rank 1"),
            "rank {rank}: {st:?}"
        );
    }
    assert!(
        out[0].0.eager_reasons[0].contains("rank 1"),
        "{:?}",
        out[0].0
    );
    assert!(
        bitwise_eq(&out[0].1, &out[1].1),
        "the ranks' weights differ"
    );
}

/// `out = x` all-reduced, then an error when `fail` is set (after the all-reduce was recorded).
#[graphed]
fn reduce_then_fail(
    cx: &mut Step,
    x: &Input<f32>,
    #[key] comm: &Communicator,
    #[key] fail: bool,
) -> Result<Output<f32>> {
    let mut out = cx.output::<f32>(x.len())?;
    cx.copy(x, &mut out)?;
    cx.all_reduce(comm, &mut out, ReduceOp::Sum)?;
    if fail {
        return Err(graphed::Error::Shape(
            "injected failure on this rank".into(),
        ));
    }
    Ok(out)
}

#[test]
fn an_error_on_one_rank_while_recording_fails_every_rank_instead_of_hanging() {
    let Some(devs) = gpus(2) else { return };
    let _w = Watchdog::arm("error_on_one_rank", 300);
    let comms = Communicator::group(&devs).unwrap();
    let mut driver = DataParallel::new(comms, |comm| ReduceThenFail::new(comm.device())).unwrap();
    let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = out.clone();
    let err = driver
        .run(move |comm, step| {
            let r = step
                .call(&[1.0f32; 64][..], comm, comm.rank() == 1)
                .map(|_| ());
            seen.lock().unwrap().push((comm.rank(), format!("{r:?}")));
            r
        })
        .unwrap_err();
    assert!(err.to_string().contains("rank 1"), "{err}");
    let seen = out.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (rank, r) in &seen {
        assert!(
            r.contains("injected failure on this rank"),
            "rank {rank}: {r}"
        );
    }
    // Nothing was issued that no rank matches: releasing drains without hanging.
    drop(driver);
}

#[test]
fn a_failed_drain_of_another_rank_on_release_aborts_naming_it() {
    if !have_gpus(2) {
        return;
    }
    let _w = Watchdog::arm("failed_drain_two_ranks", 300);
    expect_abort(
        "cuda:2:holder",
        &["could not drain", "rank 1 of 2", "injected", "aborting"],
    );
    expect_abort(
        "cuda:2:driver",
        &[
            "ranks could not drain",
            "rank 1 of 2",
            "injected",
            "aborting",
        ],
    );
}

#[test]
fn a_rank_can_join_through_a_unique_id() {
    let dev = Device::host();
    let id = graphed::dist::UniqueId::from_bytes([7; 128]);
    let err = Communicator::from_unique_id(&dev, &id, 2, 2).unwrap_err();
    assert!(err.to_string().contains("rank 2 of 2"), "{err}");
    // One rank of one, through the multi-process path (ncclCommInitRank), on one GPU.
    let Ok(gpu) = Device::cuda_on(0) else { return };
    if single(&gpu).is_none() {
        return;
    }
    let id = Communicator::unique_id().unwrap();
    assert_eq!(graphed::dist::UniqueId::from_bytes(id.to_bytes()), id);
    let comm = Communicator::from_unique_id(&gpu, &id, 0, 1).unwrap();
    assert_eq!((comm.rank(), comm.size(), comm.uses_nccl()), (0, 1, true));
    let mut step = ReduceCopy::new(&gpu).unwrap();
    let x: Vec<f32> = (0..300).map(|i| i as f32 * 0.5 - 7.0).collect();
    let out = step.call(&x[..], &comm, false).unwrap().to_host().unwrap();
    assert!(bitwise_eq(&out, &x));
    assert_eq!(step.stats().eager_calls, 0, "{:?}", step.stats());
}

/// Child half of `two_processes_all_reduce_through_a_unique_id`:
/// `GRAPHED_DIST_PROCESS=hex-id:rank:size` joins rank `rank` on GPU `rank` and all-reduces.
#[test]
fn dist_process_child() {
    let Ok(spec) = std::env::var("GRAPHED_DIST_PROCESS") else {
        return;
    };
    let parts: Vec<&str> = spec.split(':').collect();
    let mut bytes = [0u8; 128];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = u8::from_str_radix(&parts[0][2 * i..2 * i + 2], 16).unwrap();
    }
    let (rank, size): (usize, usize) = (parts[1].parse().unwrap(), parts[2].parse().unwrap());
    let dev = Device::cuda_on(rank).unwrap();
    let id = graphed::dist::UniqueId::from_bytes(bytes);
    let comm = Communicator::from_unique_id(&dev, &id, rank, size).unwrap();
    let mut step = ReduceCopy::new(&dev).unwrap();
    for call in 0..3 {
        let x: Vec<f32> = (0..1000)
            .map(|i| (i % 13 + call + 100 * rank) as f32)
            .collect();
        let out = step.call(&x[..], &comm, false).unwrap().to_host().unwrap();
        for (i, v) in out.iter().enumerate() {
            let want: usize = (0..size).map(|r| i % 13 + call + 100 * r).sum();
            assert_eq!(*v, want as f32, "rank {rank} call {call} [{i}]");
        }
    }
    let st = step.stats();
    assert_eq!(
        (st.recordings, st.replays, st.eager_calls),
        (1, 3, 0),
        "{st:?}"
    );
    println!("rank {rank} of {size}: all-reduces correct");
}

#[test]
fn two_processes_all_reduce_through_a_unique_id() {
    if !have_gpus(2) {
        return;
    }
    let _w = Watchdog::arm("two_processes", 300);
    let id = Communicator::unique_id().unwrap();
    let hex: String = id.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let children: Vec<_> = (0..2)
        .map(|rank| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "dist_process_child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("GRAPHED_DIST_PROCESS", format!("{hex}:{rank}:2"))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && stdout.contains(&format!("rank {rank} of 2: all-reduces correct")),
            "rank {rank}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
