//! Faults and bad input (issue 8): each case injects a fault and asserts the documented
//! outcome, on every backend it applies to. RELIABILITY.md lists the cases and results.

mod common;

use common::steps::*;
use common::{bitwise_eq, floats, on_every_backend, rng};
use graphed::prelude::*;
use graphed::{BackendKind, Config, Required};

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
        // Nothing was freed: memory the device may still use is parked, not reused.
        assert_eq!(dev.allocated_bytes(), held);
        let parked = step.holder().parked_bytes();
        assert!(parked > 0, "a failed clear parked nothing");
        // The holder still works, and the parked memory stays held while it records again.
        step.call(&mut w, &floats(&mut r, 8, -1.0, 1.0)[..], 0.1, 0.0)
            .unwrap();
        assert_eq!(step.stats().recordings, 2);
        assert_eq!(step.holder().parked_bytes(), parked);
        // The next drain that succeeds releases it: back to the state and nothing else.
        step.clear().unwrap();
        assert_eq!(step.holder().parked_bytes(), 0);
        assert_eq!(dev.allocated_bytes(), w.len() as u64 * 4);
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

/// Writes one element far past the end of `y` when `far` is set (test-only).
#[kernel(workgroup = 64)]
pub fn out_of_bounds(far: u32, y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = 1.0;
        if i == 0 {
            y[y.len() + far] = 2.0;
        }
    }
}

#[test]
fn out_of_bounds_write_on_the_host_names_kernel_slice_and_index() {
    let dev = Device::host();
    let mut y = dev.upload(&[0.0f32; 10]).unwrap();
    let err = out_of_bounds::launch(&dev, 10, 5u32, &mut y).unwrap_err();
    match &err {
        graphed::Error::Fault(f) => {
            assert_eq!(f.kernel, "out_of_bounds");
            assert_eq!(f.target, "y");
            assert_eq!(
                f.kind,
                graphed::FaultKind::OutOfBounds { index: 15, len: 10 }
            );
        }
        other => panic!("expected a fault, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "kernel `out_of_bounds`: index 15 is out of bounds for `y` of length 10"
    );
}

/// Child half of the CUDA sticky-error test (a faulted context is unusable for the process).
#[test]
fn cuda_sticky_fault_child() {
    if std::env::var("GRAPHED_STICKY_CHILD").is_err() {
        return;
    }
    let dev = Device::open(BackendKind::Cuda).unwrap();
    let mut w = dev.upload(&vec![0.5f32; 8 * LAYERS]).unwrap();
    let mut step = DeepStep::new(&dev).unwrap();
    step.call(&mut w, &[1.0f32; 8][..], 0.1, 0.0).unwrap();
    let mut y = dev.upload(&[0.0f32; 10]).unwrap();
    out_of_bounds::launch(&dev, 10, 1u32 << 30, &mut y).unwrap();
    let sync = y.to_host();
    println!(
        "sync after fault: {:?}",
        sync.as_ref().err().map(|e| e.to_string())
    );
    let replay = step.call(&mut w, &[1.0f32; 8][..], 0.1, 0.0).map(|_| ());
    println!(
        "replay after fault: {:?}",
        replay.as_ref().err().map(|e| e.to_string())
    );
    assert!(sync.is_err() && replay.is_err());
    drop(step);
    println!("holder dropped cleanly");
}

#[test]
fn cuda_out_of_bounds_is_reported_at_the_next_sync_and_replays_are_refused() {
    if !common::cuda_available() {
        return;
    }
    let (ok, stdout, stderr) = common::run_child(
        "cuda_sticky_fault_child",
        &[("GRAPHED_STICKY_CHILD", "1")],
        &[],
    );
    assert!(ok, "child failed: {stdout}\n{stderr}");
    assert!(
        stdout.contains("sync after fault: Some(") && stdout.contains("CUDA_ERROR_"),
        "{stdout}"
    );
    assert!(
        stdout.contains("replay after fault: Some(")
            && stdout.contains("unusable after an earlier fault"),
        "{stdout}"
    );
    assert!(stdout.contains("holder dropped cleanly"), "{stdout}");
}

#[test]
fn work_escaping_a_cuda_capture_fails_the_census_and_falls_back() {
    let Ok(dev) = Device::open_new(BackendKind::Cuda) else {
        assert!(
            !Required::from_env().unwrap().cuda,
            "cuda is required but unavailable"
        );
        return;
    };
    let mut r = rng("census_escape");
    let w0 = floats(&mut r, 64 * LAYERS, -1.0, 1.0);
    let mut w = dev.upload(&w0).unwrap();
    let mut w_ref = Device::host().upload(&w0).unwrap();
    let mut step = DeepStep::new(&dev).unwrap();
    let mut reference = DeepStep::new(&Device::host()).unwrap();
    graphed::__private::inject_capture_escape();
    for _ in 0..3 {
        let x = floats(&mut r, 64, -1.0, 1.0);
        let a = step
            .call(&mut w, &x[..], 0.05, 0.1)
            .unwrap()
            .1
            .to_host()
            .unwrap();
        let b = reference
            .call(&mut w_ref, &x[..], 0.05, 0.1)
            .unwrap()
            .1
            .to_host()
            .unwrap();
        assert!(
            (a[0] - b[0]).abs() <= 1e-3 * b[0].abs().max(1.0),
            "eager fallback wrong: {a:?} vs {b:?}"
        );
    }
    let s = step.stats();
    assert_eq!((s.recordings, s.eager_calls), (0, 3), "{s:?}");
    assert!(
        s.eager_reasons[0].contains("census mismatch"),
        "{:?}",
        s.eager_reasons
    );
}

#[test]
fn a_state_buffer_on_another_device_is_refused_before_any_launch() {
    let devs = common::backends();
    if devs.len() < 2 {
        return;
    }
    let (a, b) = (&devs[0], &devs[1]);
    let w0 = vec![0.25f32; 8 * LAYERS];
    let mut w = b.upload(&w0).unwrap();
    let mut step = DeepStep::new(a).unwrap();
    let err = step.call(&mut w, &[1.0f32; 8][..], 0.1, 0.0).unwrap_err();
    assert!(err.to_string().contains("lives on another device"), "{err}");
    assert_eq!(w.to_host().unwrap(), w0, "state changed by a refused call");
    assert_eq!(step.stats().recordings, 0);
}

#[test]
fn non_finite_inputs_propagate_exactly_as_in_eager() {
    on_every_backend(|dev| {
        let mut r = rng("non_finite");
        let w0 = floats(&mut r, 32 * LAYERS, -1.0, 1.0);
        let (mut w1, mut w2) = (dev.upload(&w0).unwrap(), dev.upload(&w0).unwrap());
        let mut x = floats(&mut r, 32, -1.0, 1.0);
        x[5] = f32::NAN;
        x[9] = f32::INFINITY;
        let mut rep = DeepStep::new(dev).unwrap();
        let mut eag = DeepStep::new(dev).unwrap();
        let (y1, _) = rep.call(&mut w1, &x[..], 0.1, 0.0).unwrap();
        let first = y1.first_non_finite().unwrap();
        let y1 = y1.to_host().unwrap();
        let y2 = eag
            .eager(&mut w2, &x[..], 0.1, 0.0)
            .unwrap()
            .0
            .to_host()
            .unwrap();
        assert!(
            bitwise_eq(&y1, &y2),
            "non-finite values were not propagated identically"
        );
        assert_eq!(
            first.map(|(i, _)| i),
            Some(5),
            "first non-finite output: {first:?}"
        );
        assert!(y1[5].is_nan());
        assert!(bitwise_eq(&w1.to_host().unwrap(), &w2.to_host().unwrap()));
    });
}

#[graphed]
fn huge_step(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {
    let _huge = cx.workspace::<f32>(1 << 40)?;
    let mut y = cx.output::<f32>(x.len())?;
    cx.copy(x, &mut y)?;
    Ok(y)
}

#[test]
fn out_of_memory_while_allocating_static_buffers_is_typed_and_leaves_nothing() {
    on_every_backend(|dev| {
        let dev = &Device::open_new(dev.kind()).unwrap();
        let before = dev.allocated_bytes();
        let mut step = HugeStep::new(dev).unwrap();
        let err = step.call(&[1.0f32; 4][..]).unwrap_err();
        // 4 TiB: out of memory, or over the adapter's buffer limits (wgpu).
        assert!(
            matches!(
                err,
                graphed::Error::OutOfMemory { .. } | graphed::Error::Limit { .. }
            ),
            "{err:?}"
        );
        assert_eq!(step.stats().cached, 0);
        assert_eq!(
            dev.allocated_bytes(),
            before,
            "a half-built recording was left behind"
        );
    });
}

#[test]
fn record_clear_cycles_and_many_keys_keep_memory_bounded() {
    on_every_backend(|dev| {
        let dev = &Device::open_new(dev.kind()).unwrap();
        let mut r = rng("bounded");
        let mut w = dev.upload(&floats(&mut r, 16 * LAYERS, -1.0, 1.0)).unwrap();
        let x = floats(&mut r, 16, -1.0, 1.0);
        let base = dev.allocated_bytes();
        let mut step = DeepStep::new(dev).unwrap();
        for _ in 0..100 {
            step.call(&mut w, &x[..], 0.1, 0.0).unwrap();
            step.clear().unwrap();
        }
        assert_eq!(
            dev.allocated_bytes(),
            base,
            "100 record/clear cycles leaked"
        );
        let cfg = Config {
            max_recordings: 8,
            ..Config::default()
        };
        let mut bounded = DeepStep::with_config(dev, cfg).unwrap();
        let mut peak = 0;
        for k in 0..1000u64 {
            bounded.holder().set_extra_key(k);
            bounded.call(&mut w, &x[..], 0.1, 0.0).unwrap();
            peak = peak.max(dev.allocated_bytes() - base);
        }
        let s = bounded.stats();
        assert_eq!(
            (s.recordings, s.evictions, s.cached),
            (1000, 992, 8),
            "{s:?}"
        );
        let per = s.static_bytes / 8;
        assert!(
            peak <= 9 * per + 4096,
            "memory grew past the bound: peak {peak}, per recording {per}"
        );
        bounded.clear().unwrap();
        assert_eq!(dev.allocated_bytes(), base);
    });
}

/// A two-launch step, so 10,000 steps per thread stay quick.
#[graphed]
fn tiny_step(cx: &mut Step, #[state] w: &mut Buffer<f32>, x: &Input<f32>, lr: f32) -> Result<()> {
    let mut h = cx.workspace::<f32>(x.len())?;
    layer::launch(cx, x.len(), x, w, 0.1, &mut h)?;
    update::launch(cx, x.len(), lr, &h, x, w)?;
    Ok(())
}

#[test]
fn two_holders_on_two_threads_replay_concurrently_and_match_eager() {
    on_every_backend(|dev| {
        let kind = dev.kind();
        // lavapipe runs the eager reference at ~2 ms a step: 3,000 steps there, 10,000 elsewhere.
        let steps = if kind == BackendKind::Wgpu && dev.adapter().contains("llvmpipe") {
            3_000
        } else {
            10_000
        };
        let handles: Vec<_> = (0..2)
            .map(|t| {
                std::thread::spawn(move || {
                    let dev = Device::open_new(kind).unwrap();
                    let mut r = rng(&format!("thread{t}"));
                    let w0 = floats(&mut r, 8, -0.5, 0.5);
                    let x = floats(&mut r, 8, -1.0, 1.0);
                    let mut w = dev.upload(&w0).unwrap();
                    let mut step = TinyStep::new(&dev).unwrap();
                    for i in 0..steps {
                        step.call(&mut w, &x[..], 1e-3 * (i % 7) as f32).unwrap();
                    }
                    (w.to_host().unwrap(), w0, x, step.stats())
                })
            })
            .collect();
        for h in handles {
            let (got, w0, x, stats) = h.join().unwrap();
            assert_eq!((stats.recordings, stats.replays), (1, steps as u64));
            let mut w = dev.upload(&w0).unwrap();
            let mut eager = TinyStep::new(dev).unwrap();
            for i in 0..steps {
                eager.eager(&mut w, &x[..], 1e-3 * (i % 7) as f32).unwrap();
            }
            assert!(
                bitwise_eq(&got, &w.to_host().unwrap()),
                "concurrent replay diverged from eager"
            );
        }
    });
}

#[test]
fn dropping_a_holder_right_after_queueing_a_replay_waits_for_it() {
    on_every_backend(|dev| {
        let mut r = rng("drop_after_queue");
        let w0 = floats(&mut r, 512 * LAYERS, -1.0, 1.0);
        let x = floats(&mut r, 512, -1.0, 1.0);
        let (mut w1, mut w2) = (dev.upload(&w0).unwrap(), dev.upload(&w0).unwrap());
        {
            let mut step = DeepStep::new(dev).unwrap();
            for _ in 0..20 {
                step.call(&mut w1, &x[..], 0.01, 0.0).unwrap();
            }
            // Dropped with replays possibly still queued: Drop drains before releasing.
        }
        let mut eager = DeepStep::new(dev).unwrap();
        for _ in 0..20 {
            eager.eager(&mut w2, &x[..], 0.01, 0.0).unwrap();
        }
        assert!(bitwise_eq(&w1.to_host().unwrap(), &w2.to_host().unwrap()));
    });
}

#[test]
fn wgpu_validation_error_during_replay_is_an_error_and_the_holder_can_be_cleared() {
    let Ok(dev) = Device::open_new(BackendKind::Wgpu) else {
        assert!(
            !Required::from_env().unwrap().wgpu,
            "wgpu is required but unavailable"
        );
        return;
    };
    let mut r = rng("wgpu_validation");
    let mut w = dev.upload(&floats(&mut r, 16 * LAYERS, -1.0, 1.0)).unwrap();
    let x = floats(&mut r, 16, -1.0, 1.0);
    let mut step = DeepStep::new(&dev).unwrap();
    step.call(&mut w, &x[..], 0.1, 0.0).unwrap();
    assert!(graphed::__private::destroy_device_memory(&w.raw_view()));
    let err = step.call(&mut w, &x[..], 0.1, 0.0).map(|_| ()).unwrap_err();
    assert!(
        matches!(
            err,
            graphed::Error::Device {
                backend: "wgpu",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().to_lowercase().contains("destroyed"),
        "{err}"
    );
    step.clear().unwrap();
    assert_eq!(step.stats().cached, 0);
}

#[test]
fn concurrent_readbacks_on_one_shared_device_all_complete() {
    on_every_backend(|dev| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let dev = dev.clone();
                std::thread::spawn(move || {
                    for i in 0..150 {
                        let v: Vec<f32> = (0..1000).map(|j| (t * 1000 + i + j) as f32).collect();
                        assert_eq!(dev.upload(&v).unwrap().to_host().unwrap(), v);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}
