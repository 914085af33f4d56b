//! Issue 17: memory by liveness, state updates instead of recordings, and device inputs bound
//! by address, on every backend. Every result is compared bitwise with a fresh recording or
//! an eager run of the same values; memory is asserted as byte counts.

mod common;

use common::steps::{axpb, chain};
use common::{bitwise_eq, floats, on_every_backend, rng};
use graphed::prelude::*;
use graphed::{BufferRole, Device};

/// u ← u·a + x; v ← v − u/2
#[kernel(workgroup = 64)]
pub fn mix(a: f32, x: &[f32], u: &mut [f32], v: &mut [f32]) {
    let i = global_id().x;
    if i < u.len() {
        u[i] = u[i] * a + x[i];
        v[i] = v[i] - u[i] * 0.5;
    }
}

/// y = u − 2·v
#[kernel(workgroup = 64)]
pub fn combine(u: &[f32], v: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = u[i] - 2.0 * v[i];
    }
}

/// `common::steps::chain`: a and c are never live at once.
#[graphed]
fn chain_step(cx: &mut Step, x: &Input<f32>, s: f32) -> Result<Output<f32>> {
    chain(cx, x, s, |_| {})
}

#[graphed]
fn two_states_step(
    cx: &mut Step,
    #[state] u: &mut Buffer<f32>,
    #[state] v: &mut Buffer<f32>,
    x: &Input<f32>,
    a: f32,
) -> Result<Output<f32>> {
    let n = x.len();
    mix::launch(cx, n, a, x, u, v)?;
    let mut y = cx.output::<f32>(n)?;
    combine::launch(cx, n, u, v, &mut y)?;
    Ok(y)
}

#[graphed]
fn scale_step(cx: &mut Step, x: &Input<f32>, a: f32) -> Result<Output<f32>> {
    let mut y = cx.output::<f32>(x.len())?;
    axpb::launch(cx, x.len(), a, x, &mut y)?;
    Ok(y)
}

fn fresh_device(dev: &Device) -> Device {
    Device::open_new(dev.kind()).unwrap()
}

#[test]
fn workspaces_live_at_disjoint_times_share_memory() {
    on_every_backend(|dev| {
        let dev = &fresh_device(dev);
        let mut r = rng("liveness");
        let n = 256;
        let mut rep = ChainStep::new(dev).unwrap();
        let mut eag = ChainStep::new(dev).unwrap();
        for i in 0..4 {
            let x = floats(&mut r, n, -1.0, 1.0);
            let s = 1.0 + i as f32 * 0.125;
            let y1 = rep.call(&x[..], s).unwrap().to_host().unwrap();
            let y2 = eag.eager(&x[..], s).unwrap().to_host().unwrap();
            assert!(
                bitwise_eq(&y1, &y2),
                "replay differs from eager at call {i}"
            );
        }
        // Input slot n words apart; a (n) and c (2n) share [0, 2n), b and y share [2n, 3n).
        let plan = rep.plan().unwrap();
        let w = 4 * n as u64;
        assert_eq!(plan.arena_bytes(), 3 * w);
        assert_eq!(plan.static_bytes(), 4 * w);
        assert_eq!(rep.stats().static_bytes, 4 * w);
        let at = |name: &str| {
            plan.buffers()
                .iter()
                .find(|b| b.name == name)
                .unwrap_or_else(|| panic!("no buffer {name}: {:?}", plan.buffers()))
                .arena_offset
        };
        assert_eq!((at("ws0"), at("ws2")), (Some(0), Some(0)));
        assert_eq!((at("ws1"), at("out0")), (Some(2 * w), Some(2 * w)));
        assert_eq!(at("x"), None, "inputs are not packed");
        // Packed is less than the buffers apart (5n words, input included: 6n) and than the
        // eager peak (input slot, a, b, c, y alive at once: 6n).
        let base = dev.allocated_bytes();
        dev.reset_peak();
        eag.eager(&floats(&mut r, n, -1.0, 1.0)[..], 1.0).unwrap();
        let eager_peak = dev.peak_allocated_bytes() - base;
        assert_eq!(eager_peak, 6 * w, "eager peak: input slot, a, b, c (2n), y");
        assert!(rep.stats().static_bytes < eager_peak);
        // What the device holds for the recording is what it reports.
        drop(eag);
        let held = dev.allocated_bytes();
        rep.clear().unwrap();
        assert_eq!(held - dev.allocated_bytes(), 4 * w, "the recording's bytes");
    });
}

#[test]
fn a_step_where_nothing_can_share_is_not_packed() {
    on_every_backend(|dev| {
        let mut r = rng("no_packing");
        let mut step = ScaleStep::new(dev).unwrap();
        step.call(&floats(&mut r, 100, -1.0, 1.0)[..], 2.0).unwrap();
        let plan = step.plan().unwrap();
        assert_eq!(plan.arena_bytes(), 0);
        assert_eq!(plan.static_bytes(), 800);
        assert!(plan.buffers().iter().all(|b| b.arena_offset.is_none()));
    });
}

/// Calls `two_states_step` on (u, v) in `step` and on copies through a fresh holder; both results
/// and both states must agree bitwise.
fn check_against_fresh(
    dev: &Device,
    step: &mut TwoStatesStep,
    u: &mut Buffer<f32>,
    v: &mut Buffer<f32>,
    x: &[f32],
    a: f32,
) {
    let mut fu = dev.upload(&u.to_host().unwrap()).unwrap();
    let mut fv = dev.upload(&v.to_host().unwrap()).unwrap();
    let y = step.call(u, v, x, a).unwrap().to_host().unwrap();
    let mut fresh = TwoStatesStep::new(dev).unwrap();
    let fy = fresh
        .call(&mut fu, &mut fv, x, a)
        .unwrap()
        .to_host()
        .unwrap();
    assert!(
        bitwise_eq(&y, &fy),
        "output differs from a fresh recording's"
    );
    assert!(bitwise_eq(&u.to_host().unwrap(), &fu.to_host().unwrap()));
    assert!(bitwise_eq(&v.to_host().unwrap(), &fv.to_host().unwrap()));
}

#[test]
fn swapped_states_update_the_recording_and_match_a_fresh_one() {
    on_every_backend(|dev| {
        let mut r = rng("swap");
        let n = 77;
        let mut a = dev.upload(&floats(&mut r, n, -1.0, 1.0)).unwrap();
        let mut b = dev.upload(&floats(&mut r, n, -1.0, 1.0)).unwrap();
        let mut step = TwoStatesStep::new(dev).unwrap();
        for i in 0..6 {
            let x = floats(&mut r, n, -1.0, 1.0);
            let s = [0.5, 1.0, 2.0][i % 3];
            if i % 2 == 0 {
                check_against_fresh(dev, &mut step, &mut a, &mut b, &x, s);
            } else {
                check_against_fresh(dev, &mut step, &mut b, &mut a, &x, s);
            }
        }
        let s = step.stats();
        assert_eq!(
            (s.recordings, s.updates, s.replays, s.cached),
            (1, 5, 6, 1),
            "{s:?}"
        );
        // The plan names what it is bound to now.
        let ids: Vec<u64> = step
            .plan()
            .unwrap()
            .buffers()
            .iter()
            .filter(|p| p.role == BufferRole::State)
            .map(|p| p.id)
            .collect();
        assert_eq!(ids, vec![b.buffer_id(), a.buffer_id()]);
    });
}

#[test]
fn one_buffer_as_two_states_stays_an_error_and_sharing_patterns_are_keys() {
    on_every_backend(|dev| {
        let mut r = rng("alias_states");
        let n = 40;
        let mut step = TwoStatesStep::new(dev).unwrap();
        let mut a = dev.upload(&floats(&mut r, n, -1.0, 1.0)).unwrap();
        let mut b = dev.upload(&floats(&mut r, n, -1.0, 1.0)).unwrap();
        let x = floats(&mut r, n, -1.0, 1.0);
        step.call(&mut a, &mut b, &x[..], 0.5).unwrap();
        // The same allocation as both states is not the distinct-states recording re-pointed:
        // it is another key, whose recording refuses the overlapping writes (as eager does).
        let mut c = dev.upload(&floats(&mut r, n, -1.0, 1.0)).unwrap();
        let c_host = c.to_host().unwrap();
        let mut c2 = c.clone();
        for err in [
            step.call(&mut c, &mut c2, &x[..], 0.5).unwrap_err(),
            step.eager(&mut c, &mut c2, &x[..], 0.5).unwrap_err(),
        ] {
            assert!(
                matches!(&err, graphed::Error::Launch { kernel: "mix", reason } if reason.contains("overlapping")),
                "{err:?}"
            );
        }
        assert_eq!(
            c.to_host().unwrap(),
            c_host,
            "state written by a refused call"
        );
        let s = step.stats();
        assert_eq!((s.recordings, s.updates), (1, 0), "{s:?}");
        // Disjoint slices of one allocation: a key of their own (v 2n after u) ...
        let big = dev.upload(&floats(&mut r, 3 * n, -1.0, 1.0)).unwrap();
        let (mut s0, mut s1) = (big.slice(0..n).unwrap(), big.slice(2 * n..3 * n).unwrap());
        step.call(&mut s0, &mut s1, &x[..], 0.5).unwrap();
        assert_eq!(step.stats().recordings, 2);
        // ... which another allocation with the same pattern updates, computing what eager does.
        let other = dev.upload(&big.to_host().unwrap()).unwrap();
        let mirror = dev.upload(&big.to_host().unwrap()).unwrap();
        let (mut t0, mut t1) = (
            other.slice(0..n).unwrap(),
            other.slice(2 * n..3 * n).unwrap(),
        );
        let (mut m0, mut m1) = (
            mirror.slice(0..n).unwrap(),
            mirror.slice(2 * n..3 * n).unwrap(),
        );
        let y = step
            .call(&mut t0, &mut t1, &x[..], 0.5)
            .unwrap()
            .to_host()
            .unwrap();
        let mut eager = TwoStatesStep::new(dev).unwrap();
        let ye = eager
            .eager(&mut m0, &mut m1, &x[..], 0.5)
            .unwrap()
            .to_host()
            .unwrap();
        assert!(bitwise_eq(&y, &ye));
        assert!(bitwise_eq(
            &other.to_host().unwrap(),
            &mirror.to_host().unwrap()
        ));
        let s = step.stats();
        assert_eq!((s.recordings, s.updates), (2, 1), "{s:?}");
        // The same allocation at another distance (v n after u) is a third key.
        let (mut s0, mut s1) = (big.slice(0..n).unwrap(), big.slice(n..2 * n).unwrap());
        step.call(&mut s0, &mut s1, &x[..], 0.5).unwrap();
        let s = step.stats();
        assert_eq!((s.recordings, s.updates, s.cached), (3, 1, 3), "{s:?}");
    });
}

#[test]
fn a_state_at_another_offset_is_an_update_with_its_offsets_patched() {
    on_every_backend(|dev| {
        let mut r = rng("state_offsets");
        let n = 33;
        let big = dev.upload(&floats(&mut r, 4 * n, -1.0, 1.0)).unwrap();
        let mut step = TwoStatesStep::new(dev).unwrap();
        for (i, (p, q)) in [(0, 1), (2, 3), (3, 0), (1, 2)].into_iter().enumerate() {
            let mut u = big.slice(p * n..(p + 1) * n).unwrap();
            let mut v = big.slice(q * n..(q + 1) * n).unwrap();
            let x = floats(&mut r, n, -1.0, 1.0);
            let before = big.to_host().unwrap();
            let y = step
                .call(&mut u, &mut v, &x[..], 1.0)
                .unwrap()
                .to_host()
                .unwrap();
            // The reference: eager on a copy of the whole allocation, same slices.
            let copy = dev.upload(&before).unwrap();
            let mut cu = copy.slice(p * n..(p + 1) * n).unwrap();
            let mut cv = copy.slice(q * n..(q + 1) * n).unwrap();
            let mut eager = TwoStatesStep::new(dev).unwrap();
            let ye = eager
                .eager(&mut cu, &mut cv, &x[..], 1.0)
                .unwrap()
                .to_host()
                .unwrap();
            assert!(bitwise_eq(&y, &ye), "call {i}");
            assert!(
                bitwise_eq(&big.to_host().unwrap(), &copy.to_host().unwrap()),
                "call {i}: the allocation differs (a write landed at the old offset?)"
            );
        }
        // v sits n after u in three calls (one recording, two updates), 3n before it in one
        // (another key: which states share memory, and how, is part of the key).
        let s = step.stats();
        assert_eq!((s.recordings, s.updates), (2, 2), "{s:?}");
    });
}

#[test]
fn device_inputs_are_bound_by_address_and_rebinds_are_counted() {
    on_every_backend(|dev| {
        let dev = &fresh_device(dev);
        let mut r = rng("zero_copy");
        let n = 500;
        let mut step = ScaleStep::new(dev).unwrap();
        let mut host_step = ScaleStep::new(dev).unwrap();
        let xs: Vec<Vec<f32>> = (0..3).map(|_| floats(&mut r, n, -1.0, 1.0)).collect();
        let bufs: Vec<Buffer<f32>> = xs.iter().map(|x| dev.upload(x).unwrap()).collect();
        let expect = |host_step: &mut ScaleStep, x: &[f32], a: f32| {
            host_step.call(x, a).unwrap().to_host().unwrap()
        };
        // The first call records over bufs[0] itself: no slot, no rebind.
        let order = [0usize, 0, 1, 2, 1, 1];
        let mut rebinds = 0;
        let mut last = 0;
        for (i, &k) in order.iter().enumerate() {
            let a = 0.5 + i as f32;
            let y = step.call(&bufs[k], a).unwrap().to_host().unwrap();
            assert!(
                bitwise_eq(&y, &expect(&mut host_step, &xs[k], a)),
                "call {i}"
            );
            if k != last {
                rebinds += 1;
                last = k;
            }
            assert_eq!(step.stats().rebinds, rebinds, "call {i}");
            // The plan reads the caller's buffer itself.
            let input = &step.plan().unwrap().buffers()[0];
            assert_eq!(
                (input.role, input.id),
                (BufferRole::Input, bufs[k].buffer_id())
            );
        }
        // Nothing but the output is the recording's: the input is the caller's buffer.
        assert_eq!(step.stats().static_bytes, 4 * n as u64);
        // Host data needs a slot (made now), bound instead: one more rebind, then none.
        for i in 0..2 {
            let y = step.call(&xs[2][..], 3.0).unwrap().to_host().unwrap();
            assert!(bitwise_eq(&y, &expect(&mut host_step, &xs[2], 3.0)));
            assert_eq!(step.stats().rebinds, rebinds + 1, "host call {i}");
        }
        let s = step.stats();
        assert_eq!((s.recordings, s.replays), (1, 8), "{s:?}");
        assert_eq!(s.static_bytes, 8 * n as u64, "output and the input slot");
        assert_eq!(s.static_bytes, step.plan().unwrap().static_bytes());
    });
}

#[test]
fn a_dropped_handle_to_a_bound_buffer_stays_alive_until_released() {
    on_every_backend(|dev| {
        let dev = &fresh_device(dev);
        let mut r = rng("dropped_handle");
        let n = 64;
        let bytes = 4 * n as u64;
        let mut step = ScaleStep::new(dev).unwrap();
        let x = floats(&mut r, n, -1.0, 1.0);
        let xd = dev.upload(&x).unwrap();
        step.call(&xd, 2.0).unwrap();
        let held = dev.allocated_bytes();
        drop(xd);
        assert_eq!(
            dev.allocated_bytes(),
            held,
            "the recording must pin the bound input"
        );
        // Rebound to host data (a slot made for it): the old buffer waits for a drain, it is
        // not freed now.
        let y = step.call(&x[..], 2.0).unwrap().to_host().unwrap();
        assert_eq!(dev.allocated_bytes(), held + bytes);
        let mut host = ScaleStep::new(dev).unwrap();
        assert!(bitwise_eq(
            &y,
            &host.call(&x[..], 2.0).unwrap().to_host().unwrap()
        ));
        drop(host);
        // The same for state: a dropped handle to an updated state is kept, then released.
        let mut u = dev.upload(&floats(&mut r, n, -1.0, 1.0)).unwrap();
        let mut v = dev.upload(&floats(&mut r, n, -1.0, 1.0)).unwrap();
        let mut two = TwoStatesStep::new(dev).unwrap();
        two.call(&mut u, &mut v, &x[..], 1.0).unwrap();
        let mut u2 = dev.upload(&u.to_host().unwrap()).unwrap();
        let before = dev.allocated_bytes();
        two.call(&mut u2, &mut v, &x[..], 1.0).unwrap();
        drop(u);
        drop(u2);
        assert_eq!(
            dev.allocated_bytes(),
            before,
            "old and new bindings both held"
        );
        assert_eq!(two.stats().updates, 1);
        // clear() drains and releases the recordings, the old bindings and the dropped buffers.
        two.clear().unwrap();
        step.clear().unwrap();
        let now = dev.allocated_bytes();
        assert_eq!(now, bytes, "only v is left: {now} bytes");
    });
}

#[test]
fn many_fresh_device_inputs_do_not_grow_without_bound() {
    on_every_backend(|dev| {
        let dev = &fresh_device(dev);
        let mut r = rng("fresh_inputs");
        let n = 16;
        let mut step = ScaleStep::new(dev).unwrap();
        let x = floats(&mut r, n, -1.0, 1.0);
        for _ in 0..200 {
            let xd = dev.upload(&x).unwrap();
            step.call(&xd, 1.0).unwrap();
        }
        // Old bindings are released by a drain at least every 33 rebinds.
        let held = dev.allocated_bytes();
        assert!(held <= (4 * n as u64) * (2 + 34), "{held} bytes held");
        assert_eq!(step.stats().rebinds, 199);
    });
}

#[test]
fn a_holder_rebinds_on_another_thread() {
    on_every_backend(|dev| {
        let mut r = rng("thread");
        let n = 50;
        let xs: Vec<Vec<f32>> = (0..4).map(|_| floats(&mut r, n, -1.0, 1.0)).collect();
        let bufs: Vec<Buffer<f32>> = xs.iter().map(|x| dev.upload(x).unwrap()).collect();
        let mut step = ScaleStep::new(dev).unwrap();
        step.call(&bufs[0], 1.0).unwrap();
        let (step, bufs) = std::thread::spawn(move || {
            let mut step = step;
            let mut out = Vec::new();
            for b in &bufs {
                out.push(step_call(&mut step, b));
            }
            drop(out);
            (step, bufs)
        })
        .join()
        .unwrap();
        let mut step = step;
        let mut host = ScaleStep::new(dev).unwrap();
        for (b, x) in bufs.iter().zip(&xs) {
            let y = step.call(b, 1.5).unwrap().to_host().unwrap();
            assert!(bitwise_eq(
                &y,
                &host.call(&x[..], 1.5).unwrap().to_host().unwrap()
            ));
        }
        assert_eq!(step.stats().recordings, 1);
    });
}

fn step_call(step: &mut ScaleStep, b: &Buffer<f32>) -> Vec<f32> {
    step.call(b, 1.5).unwrap().to_host().unwrap()
}

/// Allocates a workspace it never uses beside one it does.
#[graphed]
fn unused_workspace_step(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {
    let _never = cx.workspace::<f32>(1000)?;
    let mut y = cx.output::<f32>(x.len())?;
    axpb::launch(cx, x.len(), 2.0, x, &mut y)?;
    Ok(y)
}

#[test]
fn a_workspace_no_op_touches_holds_no_memory() {
    on_every_backend(|dev| {
        let dev = &fresh_device(dev);
        let mut r = rng("unused_workspace");
        let x = dev.upload(&floats(&mut r, 10, -1.0, 1.0)).unwrap();
        let mut step = UnusedWorkspaceStep::new(dev).unwrap();
        let before = dev.allocated_bytes();
        step.call(&x).unwrap();
        // The output alone (the input is the caller's buffer, the workspace was freed).
        assert_eq!(step.stats().static_bytes, 40);
        assert_eq!(dev.allocated_bytes() - before, 40);
    });
}
