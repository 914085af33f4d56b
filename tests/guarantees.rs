//! The core promise under hostile-but-honest use (issue 14): replay ≡ eager, no stale output
//! can be held, and bad input is an error value — never a silent wrong result, a panic, a
//! hang or a poisoned device. One test per hole the probes found; RELIABILITY.md lists them.

mod common;

use std::cell::RefCell;
use std::sync::mpsc;
use std::time::Duration;

use common::{floats, on_every_backend, rng};
use graphed::prelude::*;
use graphed::{Config, Error};

/// c[i] += 1
#[kernel(workgroup = 64)]
pub fn inc(c: &mut [u32]) {
    let i = global_id().x;
    if i < c.len() {
        c[i] += 1u32;
    }
}

/// w[i] *= 2
#[kernel(workgroup = 64)]
pub fn scale2(w: &mut [f32]) {
    let i = global_id().x;
    if i < w.len() {
        w[i] *= 2.0;
    }
}

/// y[i] = x[i] + 1
#[kernel(workgroup = 64)]
pub fn add1(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = x[i] + 1.0;
    }
}

/// y[i] = x[i] * a
#[kernel(workgroup = 64)]
pub fn mul_by(a: f32, x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = x[i] * a;
    }
}

#[graphed]
fn count_step(cx: &mut Step, #[state] c: &mut Buffer<u32>) -> Result<()> {
    inc::launch(cx, c.len(), c)?;
    Ok(())
}

thread_local! {
    static INNER: RefCell<Option<(CountStep, Buffer<u32>)>> = const { RefCell::new(None) };
}

/// An outer step whose body calls another holder's `call()`.
#[graphed]
fn nesting_step(cx: &mut Step, #[state] w: &mut Buffer<f32>) -> Result<()> {
    INNER.with(|inner| -> Result<()> {
        let mut inner = inner.borrow_mut();
        let (step, c) = inner.as_mut().expect("set by the test");
        step.call(c)?;
        Ok(())
    })?;
    scale2::launch(cx, w.len(), w)?;
    Ok(())
}

/// Item 1: the inner step must run once per outer call, as in eager; the outer key records
/// no plan that would skip it.
#[test]
fn a_nested_step_call_runs_every_time_and_keeps_the_recording_flag() {
    on_every_backend(|dev| {
        let c = dev.upload(&[7u32; 4]).unwrap();
        INNER.with(|i| *i.borrow_mut() = Some((CountStep::new(dev).unwrap(), c.clone())));
        let mut outer = NestingStep::new(dev).unwrap();
        let mut w = dev.upload(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
        for _ in 0..5 {
            outer.call(&mut w).unwrap();
        }
        assert_eq!(
            c.to_host().unwrap(),
            vec![12u32; 4],
            "inner step ran {:?}",
            c.to_host()
        );
        assert_eq!(w.to_host().unwrap(), vec![32.0, 64.0, 96.0, 128.0]);
        let s = outer.stats();
        assert_eq!(
            s.recordings, 0,
            "the outer step must not be recorded around a nested call"
        );
        assert_eq!(s.eager_calls, 5);
        assert!(
            s.eager_reasons
                .iter()
                .any(|r| r.contains("count_step") && r.contains("inside")),
            "{:?}",
            s.eager_reasons
        );
        // The thread is not left in recording mode: host transfers work again.
        assert_eq!(c.to_host().unwrap(), vec![12u32; 4]);
        dev.alloc::<f32>(4).unwrap();
        INNER.with(|i| *i.borrow_mut() = None);
    });
}

#[graphed]
fn alias_step(cx: &mut Step, #[state] w: &mut Buffer<f32>, x: &Input<f32>) -> Result<()> {
    scale2::launch(cx, w.len(), w)?;
    let mut y = cx.workspace::<f32>(x.len())?;
    add1::launch(cx, x.len(), x, &mut y)?;
    cx.copy(&y, w)?;
    Ok(())
}

/// Item 2: an input that shares memory with a state is refused by `call` and `eager` alike.
#[test]
fn an_input_aliasing_a_state_is_refused_by_call_and_eager() {
    on_every_backend(|dev| {
        let mut w = dev.upload(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
        let x = w.clone();
        let mut step = AliasStep::new(dev).unwrap();
        for eager in [false, true] {
            let err = if eager {
                step.eager(&mut w, &x).unwrap_err()
            } else {
                step.call(&mut w, &x).unwrap_err()
            };
            match &err {
                Error::InputMismatch { input, reason } => {
                    assert_eq!(input, "x");
                    assert!(reason.contains("state `w`"), "{reason}");
                }
                other => panic!("expected InputMismatch, got {other:?}"),
            }
        }
        // A slice of the state overlapping it is refused too; a disjoint buffer is fine.
        let mut big = dev.upload(&[1.0f32; 8]).unwrap();
        let part = big.slice(2..6).unwrap();
        let mut w2 = big.slice(0..4).unwrap();
        assert!(step.call(&mut w2, &part).is_err());
        let _ = &mut big;
        let other = dev.upload(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
        step.call(&mut w, &other).unwrap();
        assert_eq!(w.to_host().unwrap(), vec![2.0, 3.0, 4.0, 5.0]);
        assert_eq!(step.stats().recordings, 1);
    });
}

thread_local! {
    static KEPT: RefCell<Option<Buffer<f32>>> = const { RefCell::new(None) };
    static KEPT_SCALAR: RefCell<Option<Scalar<f32>>> = const { RefCell::new(None) };
}

#[graphed]
fn leaky_step(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {
    let mut y = cx.output::<f32>(x.len())?;
    add1::launch(cx, x.len(), x, &mut y)?;
    KEPT.with(|k| *k.borrow_mut() = Some((*y).clone()));
    Ok(y)
}

/// Item 3a: a clone of an output kept past the body cannot be read, written or launched on:
/// the stale-output bug stays impossible.
#[test]
fn a_cloned_output_cannot_be_used_outside_its_step() {
    on_every_backend(|dev| {
        let mut step = LeakyStep::new(dev).unwrap();
        let y = step.call(&[1.0f32][..]).unwrap();
        assert_eq!(y.to_host().unwrap(), vec![2.0]);
        let kept = KEPT.with(|k| k.borrow_mut().take()).expect("kept");
        step.call(&[10.0f32][..]).unwrap();
        let err = kept.to_host().unwrap_err();
        assert!(matches!(err, Error::StepSlot { .. }), "{err:?}");
        assert!(err.to_string().contains("to_host"), "{err}");
        assert!(matches!(kept.write(&[0.0]), Err(Error::StepSlot { .. })));
        assert!(matches!(kept.fill(0.0), Err(Error::StepSlot { .. })));
        let mine = dev.upload(&[5.0f32]).unwrap();
        assert!(matches!(kept.copy_from(&mine), Err(Error::StepSlot { .. })));
        assert!(matches!(mine.copy_from(&kept), Err(Error::StepSlot { .. })));
        let mut sink = dev.alloc::<f32>(1).unwrap();
        assert!(matches!(
            add1::launch(dev, 1, &kept, &mut sink),
            Err(Error::StepSlot { .. })
        ));
        // Passing it to a step as an input is refused too.
        assert!(matches!(step.call(&kept), Err(Error::StepSlot { .. })));
        // The output the call handed out is still readable.
        let y = step.call(&[3.0f32][..]).unwrap();
        assert_eq!(y.to_host().unwrap(), vec![4.0]);
        assert_eq!(y.to_buffer().unwrap().to_host().unwrap(), vec![4.0]);
    });
}

#[graphed]
fn input_writer(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {
    let mut xs: Buffer<f32> = (**x).clone();
    scale2::launch(cx, xs.len(), &mut xs)?;
    let mut y = cx.output::<f32>(x.len())?;
    add1::launch(cx, x.len(), x, &mut y)?;
    Ok(y)
}

/// Item 3b: a body cannot write its input through a clone (eager would write the caller's
/// buffer, replay only the slot).
#[test]
fn a_body_cannot_write_its_input() {
    on_every_backend(|dev| {
        let x = dev.upload(&[1.0f32, 2.0]).unwrap();
        let mut step = InputWriter::new(dev).unwrap();
        for eager in [false, true] {
            let err = if eager {
                step.eager(&x).unwrap_err()
            } else {
                step.call(&x).unwrap_err()
            };
            match &err {
                Error::Launch { kernel, reason } => {
                    assert_eq!(*kernel, "scale2");
                    assert!(
                        reason.contains("input `x`") && reason.contains("read-only"),
                        "{reason}"
                    );
                }
                other => panic!("expected a Launch error, got {other:?}"),
            }
        }
        assert_eq!(
            x.to_host().unwrap(),
            vec![1.0, 2.0],
            "the caller's input was written"
        );
        let err = step.call(&[1.0f32, 2.0][..]).unwrap_err();
        assert!(matches!(err, Error::Launch { .. }), "{err:?}");
    });
}

#[graphed]
fn scalar_keeper(cx: &mut Step, x: &Input<f32>, a: f32) -> Result<Output<f32>> {
    KEPT_SCALAR.with(|k| *k.borrow_mut() = Some(a));
    let mut y = cx.output::<f32>(x.len())?;
    mul_by::launch(cx, x.len(), a, x, &mut y)?;
    Ok(y)
}

#[graphed]
fn scalar_user(cx: &mut Step, x: &Input<f32>, _b: u32) -> Result<Output<f32>> {
    let a = KEPT_SCALAR.with(|k| *k.borrow()).expect("kept");
    let mut y = cx.output::<f32>(x.len())?;
    mul_by::launch(cx, x.len(), a, x, &mut y)?;
    Ok(y)
}

/// Item 3c: a per-step scalar kept from step A and used in step B is an error (it bound B's
/// slot 0, a `u32`, before).
#[test]
fn a_scalar_of_one_step_is_refused_in_another() {
    on_every_backend(|dev| {
        let mut a = ScalarKeeper::new(dev).unwrap();
        let y = a.call(&[2.0f32][..], 3.0).unwrap();
        assert_eq!(y.to_host().unwrap(), vec![6.0]);
        let mut b = ScalarUser::new(dev).unwrap();
        for eager in [false, true] {
            let err = if eager {
                b.eager(&[2.0f32][..], 7).unwrap_err()
            } else {
                b.call(&[2.0f32][..], 7).unwrap_err()
            };
            match &err {
                Error::Launch { kernel, reason } => {
                    assert_eq!(*kernel, "mul_by");
                    assert!(reason.contains("another step"), "{reason}");
                }
                other => panic!("expected a Launch error, got {other:?}"),
            }
        }
        // Outside any step, too.
        let kept = KEPT_SCALAR.with(|k| *k.borrow()).unwrap();
        let x = dev.upload(&[1.0f32]).unwrap();
        let mut y = dev.alloc::<f32>(1).unwrap();
        assert!(matches!(
            mul_by::launch(dev, 1, kept, &x, &mut y),
            Err(Error::Launch { .. })
        ));
        // And the keeper itself still replays with fresh values.
        let y = a.call(&[2.0f32][..], 5.0).unwrap();
        assert_eq!(y.to_host().unwrap(), vec![10.0]);
    });
}

thread_local! {
    static OTHER: RefCell<Option<Buffer<u32>>> = const { RefCell::new(None) };
}

#[graphed]
fn cross_device_reader(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {
    let cfg = OTHER.with(|o| o.borrow().as_ref().expect("set").to_host())?[0];
    let mut y = cx.output::<f32>(x.len())?;
    mul_by::launch(cx, x.len(), cfg as f32, x, &mut y)?;
    Ok(y)
}

#[graphed]
fn cross_device_launcher(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {
    OTHER.with(|o| -> Result<()> {
        let mut o = o.borrow_mut();
        let b = o.as_mut().expect("set");
        let (dev, n) = (b.device().clone(), b.len());
        inc::launch(&dev, n, b)
    })?;
    let mut y = cx.output::<f32>(x.len())?;
    add1::launch(cx, x.len(), x, &mut y)?;
    Ok(y)
}

/// Item 4: a readback or launch on another device inside a body is not baked into the plan.
#[test]
fn readback_and_launch_on_another_device_inside_a_body_run_every_step() {
    let devs = common::backends();
    let other = graphed::Device::open_new(graphed::BackendKind::Host).unwrap();
    for dev in &devs {
        let cfgbuf = other.upload(&[1u32]).unwrap();
        OTHER.with(|o| *o.borrow_mut() = Some(cfgbuf.clone()));
        let mut step = CrossDeviceReader::new(dev).unwrap();
        assert_eq!(
            step.call(&[3.0f32][..]).unwrap().to_host().unwrap(),
            vec![3.0]
        );
        cfgbuf.write(&[2]).unwrap();
        assert_eq!(
            step.call(&[3.0f32][..]).unwrap().to_host().unwrap(),
            vec![6.0],
            "on {}: a value read from another device was baked into the plan",
            dev.kind()
        );
        let mut l = CrossDeviceLauncher::new(dev).unwrap();
        for _ in 0..3 {
            l.call(&[1.0f32][..]).unwrap();
        }
        assert_eq!(cfgbuf.to_host().unwrap(), vec![5], "on {}", dev.kind());
        assert_eq!(l.stats().recordings, 0);
        OTHER.with(|o| *o.borrow_mut() = None);
    }
}

#[graphed]
fn panicking_step(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {
    let mut y = cx.output::<f32>(x.len())?;
    add1::launch(cx, x.len(), x, &mut y)?;
    if x.len() == 3 {
        panic!("a bug in the user's body");
    }
    Ok(y)
}

/// Item 5: a panic inside a body while recording leaves the thread as it was.
#[test]
fn a_panic_while_recording_restores_the_thread() {
    on_every_backend(|dev| {
        let mut step = PanickingStep::new(dev).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = step.call(&[1.0f32, 2.0, 3.0][..]);
        }));
        assert!(r.is_err());
        let b = dev.upload(&[1.0f32, 2.0]).unwrap();
        assert_eq!(b.to_host().unwrap(), vec![1.0, 2.0]);
        let mut y = dev.alloc::<f32>(2).unwrap();
        add1::launch(dev, 2, &b, &mut y).unwrap();
        assert_eq!(y.to_host().unwrap(), vec![2.0, 3.0]);
        let out = step.call(&[1.0f32, 2.0][..]).unwrap();
        assert_eq!(out.to_host().unwrap(), vec![2.0, 3.0]);
    });
}

#[graphed]
fn copy_step(
    cx: &mut Step,
    #[state] a: &mut Buffer<f32>,
    #[state] b: &mut Buffer<f32>,
) -> Result<()> {
    cx.copy(a, b)?;
    Ok(())
}

/// Item 10: a copy between buffers of another device is an error, not a panic.
#[test]
fn a_copy_of_buffers_on_another_device_is_an_error() {
    let other = graphed::Device::open_new(graphed::BackendKind::Host).unwrap();
    on_every_backend(|dev| {
        let mut a = other.upload(&[1.0f32, 2.0]).unwrap();
        let mut b = other.alloc::<f32>(2).unwrap();
        let mut step = CopyStep::new(dev).unwrap();
        let err = step.call(&mut a, &mut b).unwrap_err();
        assert!(err.to_string().contains("another device"), "{err}");
        let err = step.eager(&mut a, &mut b).unwrap_err();
        assert!(err.to_string().contains("another device"), "{err}");
    });
}

#[graphed]
fn halves_step(cx: &mut Step, #[state] buf: &mut Buffer<f32>) -> Result<()> {
    let n = buf.len() / 2;
    let lo = buf.slice(0..n)?;
    let mut hi = buf.slice(n..2 * n)?;
    cx.copy(&lo, &mut hi)?;
    Ok(())
}

/// Item 11: a copy between disjoint views of one buffer works on every backend, eagerly and
/// replayed, and leaves the device usable.
#[test]
fn a_copy_between_disjoint_views_of_one_buffer_works_everywhere() {
    on_every_backend(|dev| {
        let mut r = rng("halves");
        let data = floats(&mut r, 8, -1.0, 1.0);
        let buf = dev.upload(&data).unwrap();
        buf.slice(4..8)
            .unwrap()
            .copy_from(&buf.slice(0..4).unwrap())
            .unwrap();
        let got = buf.to_host().unwrap();
        assert_eq!(&got[4..], &data[..4]);
        for replay in [false, true] {
            let data = floats(&mut r, 8, -1.0, 1.0);
            let mut buf = dev.upload(&data).unwrap();
            let mut step = HalvesStep::new(dev).unwrap();
            if replay {
                step.call(&mut buf).unwrap();
                buf.write(&data).unwrap();
                step.call(&mut buf).unwrap();
                assert_eq!(step.stats().replays, 2);
            } else {
                step.eager(&mut buf).unwrap();
            }
            let got = buf.to_host().unwrap();
            assert_eq!(&got[..4], &data[..4]);
            assert_eq!(&got[4..], &data[..4], "replay={replay}");
        }
        // The device still works.
        let b = dev.upload(&[1.0f32]).unwrap();
        assert_eq!(b.to_host().unwrap(), vec![1.0]);
    });
}

/// Item 11: a wgpu validation error is reported once and does not disable the device.
#[test]
fn one_wgpu_validation_error_does_not_poison_the_device() {
    on_every_backend(|dev| {
        if dev.kind() != graphed::BackendKind::Wgpu {
            return;
        }
        let fresh = graphed::Device::wgpu_new().unwrap();
        fresh.__inject_validation_error();
        let b = fresh.upload(&[1.0f32, 2.0]);
        let first = b.and_then(|b| b.to_host());
        assert!(first.is_err(), "the validation error must be reported");
        let b = fresh.upload(&[3.0f32]).unwrap();
        assert_eq!(
            b.to_host().unwrap(),
            vec![3.0],
            "the device stayed poisoned"
        );
    });
}

#[graphed]
fn pair_step(
    cx: &mut Step,
    #[state] a: &mut Buffer<f32>,
    #[state] b: &mut Buffer<f32>,
) -> Result<()> {
    add1::launch(cx, a.len(), a, b)?;
    Ok(())
}

/// Item 12: two threads whose launches bind the same buffers in opposite orders finish.
#[test]
fn host_launches_in_opposite_binding_orders_do_not_deadlock() {
    let dev = graphed::Device::host();
    let a = dev.upload(&vec![1.0f32; 64]).unwrap();
    let b = dev.upload(&vec![2.0f32; 64]).unwrap();
    let (tx, rx) = mpsc::channel();
    let mut handles = Vec::new();
    // Four threads, two in each order: the old code deadlocked within the 60 s here.
    for t in 0..4 {
        let (mut x, mut y) = if t % 2 == 0 {
            (a.clone(), b.clone())
        } else {
            (b.clone(), a.clone())
        };
        let dev = dev.clone();
        let tx = tx.clone();
        handles.push(std::thread::spawn(move || {
            let mut step = PairStep::new(&dev).unwrap();
            for _ in 0..20_000 {
                step.call(&mut x, &mut y).unwrap();
            }
            tx.send(()).unwrap();
        }));
    }
    for _ in 0..4 {
        rx.recv_timeout(Duration::from_secs(60))
            .expect("host launches deadlocked (locks taken in opposite orders)");
    }
    for h in handles {
        h.join().unwrap();
    }
}

#[graphed]
fn peeking(cx: &mut Step, x: &Input<f32>, #[key] k: u32) -> Result<Output<f32>> {
    let v = x.to_host()?[0];
    let mut y = cx.output::<f32>(x.len())?;
    mul_by::launch(cx, x.len(), v + k as f32, x, &mut y)?;
    Ok(y)
}

/// Item 13: eager keys are bounded like recorded ones.
#[test]
fn eager_and_warming_keys_are_bounded() {
    let dev = graphed::Device::host();
    let cfg = Config {
        max_recordings: 4,
        ..Config::default()
    };
    let mut step = Peeking::with_config(&dev, cfg.clone()).unwrap();
    for k in 0..1000u32 {
        let y = step.call(&[2.0f32][..], k).unwrap();
        assert_eq!(y.to_host().unwrap(), vec![2.0 * (2.0 + k as f32)]);
    }
    let s = step.stats();
    assert_eq!(s.eager_calls, 1000);
    assert!(
        step.holder().keys().len() <= cfg.max_unrecorded_keys + cfg.max_recordings,
        "{} keys kept",
        step.holder().keys().len()
    );
    assert!(
        s.eager_reasons.len() <= cfg.max_unrecorded_keys,
        "{} reasons kept",
        s.eager_reasons.len()
    );
    let mut w = Peeking::with_config(
        &dev,
        Config {
            warmup: 1000,
            ..cfg.clone()
        },
    )
    .unwrap();
    for k in 0..1000u32 {
        w.call(&[2.0f32][..], k).unwrap();
    }
    assert!(w.holder().keys().len() <= cfg.max_unrecorded_keys + cfg.max_recordings);
}

#[graphed]
fn zero_input_step(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {
    let mut y = cx.output::<f32>(x.len())?;
    add1::launch(cx, x.len(), x, &mut y)?;
    Ok(y)
}

#[graphed]
fn empty_grid_step(cx: &mut Step, #[state] w: &mut Buffer<f32>) -> Result<()> {
    scale2::launch(cx, Grid::workgroups_2d(1, 0), w)?;
    Ok(())
}

#[graphed]
fn no_op_step(_cx: &mut Step, #[state] _w: &mut Buffer<f32>) -> Result<()> {
    Ok(())
}

/// Item 17: zero-sized work is skipped on every backend (CUDA refused it before).
#[test]
fn zero_sized_work_runs_on_every_backend() {
    on_every_backend(|dev| {
        let mut z = ZeroInputStep::new(dev).unwrap();
        for _ in 0..2 {
            assert!(z
                .call(&[0.0f32; 0][..])
                .unwrap()
                .to_host()
                .unwrap()
                .is_empty());
        }
        let empty = dev.alloc::<f32>(0).unwrap();
        assert!(z.call(&empty).unwrap().to_host().unwrap().is_empty());
        assert_eq!(z.stats().replays, 3);
        let mut w = dev.upload(&[1.0f32, 2.0]).unwrap();
        let mut e = EmptyGridStep::new(dev).unwrap();
        e.call(&mut w).unwrap();
        e.call(&mut w).unwrap();
        assert_eq!(w.to_host().unwrap(), vec![1.0, 2.0]);
        let mut n = NoOpStep::new(dev).unwrap();
        n.call(&mut w).unwrap();
        n.call(&mut w).unwrap();
        assert_eq!((n.stats().recordings, n.stats().replays), (1, 2));
        dev.synchronize().unwrap();
    });
}

/// y[i + far] = 1: writes far out of bounds when `far` is large.
#[kernel(workgroup = 64)]
pub fn write_far(far: u32, y: &mut [f32]) {
    let i = global_id().x;
    if i < 1u32 {
        y[i + far] = 1.0;
    }
}

#[graphed]
fn faulting_step(cx: &mut Step, #[state] y: &mut Buffer<f32>, far: u32) -> Result<()> {
    write_far::launch(cx, 1, far, y)?;
    Ok(())
}

/// Child half of item 18 (a faulted CUDA context is unusable for the process).
#[test]
fn cuda_fault_in_replay_child() {
    if std::env::var("GRAPHED_REPLAY_FAULT_CHILD").is_err() {
        return;
    }
    let dev = graphed::Device::open(graphed::BackendKind::Cuda).unwrap();
    let mut y = dev.upload(&[0.0f32; 4]).unwrap();
    let mut step = FaultingStep::new(&dev).unwrap();
    step.call(&mut y, 0).unwrap();
    dev.synchronize().unwrap();
    // Queued without waiting: the fault happens on the GPU after `call` returned.
    let queued = step.call(&mut y, 1 << 30);
    println!("replay: {:?}", queued.as_ref().err().map(|e| e.to_string()));
    let sync = dev.synchronize();
    println!(
        "first sync: {:?}",
        sync.as_ref().err().map(|e| e.to_string())
    );
    let again = dev.synchronize();
    println!(
        "second sync: {:?}",
        again.as_ref().err().map(|e| e.to_string())
    );
    assert!(
        queued.is_err() || sync.is_err(),
        "the fault was reported at no wait"
    );
    assert!(again.is_err());
    drop(step);
    println!("holder dropped cleanly");
}

/// Item 18: the first wait after a fault inside a replay reports it.
#[test]
fn a_cuda_fault_inside_a_replay_is_reported_at_the_first_wait() {
    if !common::cuda_available() {
        return;
    }
    let (ok, stdout, stderr) = common::run_child(
        "cuda_fault_in_replay_child",
        &[("GRAPHED_REPLAY_FAULT_CHILD", "1")],
        &[],
    );
    assert!(ok, "child failed: {stdout}\n{stderr}");
    assert!(
        stdout.contains("first sync: Some(") && stdout.contains("CUDA_ERROR_"),
        "{stdout}"
    );
    assert!(stdout.contains("holder dropped cleanly"), "{stdout}");
}

/// Item 20: graphed leaves the caller's CUDA context current (none, or the caller's own).
#[cfg(feature = "cuda")]
#[test]
fn graphed_restores_the_callers_cuda_context() {
    use cudarc::driver::result;
    let Ok(dev) = graphed::Device::open(graphed::BackendKind::Cuda) else {
        assert!(
            !graphed::Required::from_env().unwrap().cuda,
            "cuda is required but unavailable"
        );
        return;
    };
    // SAFETY: device 0 exists (the backend opened it); the context is destroyed below.
    let mine =
        unsafe { result::ctx::create_v4(std::ptr::null_mut(), 0, result::device::get(0).unwrap()) }
            .unwrap();
    for caller in [None, Some(mine)] {
        // SAFETY: `mine` is a live context; null unbinds.
        unsafe { result::ctx::set_current(caller.unwrap_or(std::ptr::null_mut())) }.unwrap();
        let b = dev.upload(&[1.0f32, 2.0]).unwrap();
        let mut step = ZeroInputStep::new(&dev).unwrap();
        let y = step.call(&b).unwrap().to_host().unwrap();
        assert_eq!(y, vec![2.0, 3.0]);
        dev.synchronize().unwrap();
        drop(step);
        drop(b);
        assert_eq!(
            result::ctx::get_current().unwrap(),
            caller,
            "graphed left its own context current"
        );
    }
    // SAFETY: created above, no longer current.
    unsafe {
        result::ctx::set_current(std::ptr::null_mut()).unwrap();
        cudarc::driver::sys::cuCtxDestroy_v2(mine).result().unwrap();
    }
}

/// Item 20: a capture invalidated by another thread's device-wide wait is retried.
#[test]
fn an_invalidated_cuda_capture_is_retried() {
    let Ok(dev) = graphed::Device::open_new(graphed::BackendKind::Cuda) else {
        assert!(
            !graphed::Required::from_env().unwrap().cuda,
            "cuda is required but unavailable"
        );
        return;
    };
    let before = graphed::__private::capture_retries();
    graphed::__private::inject_capture_invalidation();
    let mut step = ZeroInputStep::new(&dev).unwrap();
    let y = step.call(&[1.0f32, 5.0][..]).unwrap().to_host().unwrap();
    assert_eq!(y, vec![2.0, 6.0]);
    let s = step.stats();
    assert_eq!(
        (s.recordings, s.eager_calls),
        (1, 0),
        "{:?}",
        s.eager_reasons
    );
    assert!(
        graphed::__private::capture_retries() > before,
        "the injected invalidation did not invalidate the capture"
    );
}
