//! Checked GPU kernels (issue #19, item 2): with checked mode on (`GRAPHED_CHECKED=1` or
//! `DeviceOptions { checked: true }`), an out-of-range slice or workgroup-array access is the
//! host backend's `Error::Fault` on every backend — eagerly and inside a replayed step —
//! reported once at the next synchronisation or readback, with the dropped write leaving
//! memory untouched; in-range kernels give bitwise the results of unchecked mode.
//! RELIABILITY.md lists the cases.

mod common;

use common::steps::*;
use common::{backends, bitwise_eq, floats, rng};
use graphed::prelude::*;
use graphed::{BackendKind, DeviceOptions, FaultKind, KernelFault};

/// y[i] = 2·x[j] + 1, where j is `at` for invocation 3 and i elsewhere.
#[kernel(workgroup = 64)]
fn gather_at(x: &[f32], at: u32, y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        let j = if i == 3 { at } else { i };
        y[i] = x[j] * 2.0 + 1.0;
    }
}

/// y[j] = 2·x[i] + 1, where j is `at` for invocation 3 and i elsewhere.
#[kernel(workgroup = 64)]
fn scatter_at(x: &[f32], at: u32, y: &mut [f32]) {
    let i = global_id().x;
    if i < x.len() {
        let j = if i == 3 { at } else { i };
        y[j] = x[i] * 2.0 + 1.0;
    }
}

/// y[0] = s[at] of a workgroup array of 64 (one workgroup).
#[kernel(workgroup = 64)]
fn shared_at(at: u32, y: &mut [f32]) {
    let s = shared::<f32, 64>();
    let t = local_id().x;
    s[t] = t as f32;
    barrier();
    if t == 0 {
        y[0] = s[at];
    }
}

/// h[at] += 1 atomically by invocation 0; h[i] += 1 by every other invocation below h.len().
#[kernel(workgroup = 64)]
fn count_at(at: u32, h: &mut [u32]) {
    let i = global_id().x;
    if i == 0 {
        atomic_add(h, at, 1u32);
    } else if i < h.len() {
        atomic_add(h, i, 1u32);
    }
}

/// y[i] = taps[at] + taps[i % 4] for invocation 3 (taps[i % 4] twice elsewhere); taps[w] = 9 for
/// invocation 5 (a run-time index into a per-invocation array of 4), read back into y.
#[kernel(workgroup = 64)]
fn array_at(at: u32, w: u32, y: &mut [f32]) {
    let i = global_id().x;
    let mut taps = [1.0f32, 2.0, 3.0, 4.0];
    if i == 5 {
        taps[w] = 9.0;
    }
    if i < y.len() {
        let j = if i == 3 { at } else { i % 4 };
        y[i] = taps[j] + taps[i % 4];
    }
}

/// A privatised count: every invocation adds 1 to bin `i % 8` of a workgroup array, except
/// invocation 0, which adds to bin `at`; then bin `t` goes to h[t].
#[kernel(workgroup = 64)]
fn shared_count_at(at: u32, h: &mut [u32]) {
    let bins = shared::<u32, 8>();
    let t = local_id().x;
    let b = if t == 0 { at } else { t % 8 };
    atomic_add(bins, b, 1u32);
    barrier();
    if t < 8 {
        let v = atomic_load(bins, t);
        h[t] = v;
    }
}

/// Reads `x[at]` for a helper's caller: the index check happens inside the helper.
#[device]
fn read_in_helper(x: &[f32], at: u32) -> f32 {
    x[at] * 2.0
}

/// y[i] = 2·x[j] through a helper, where j is `at` for invocation 3 and i elsewhere.
#[kernel(workgroup = 64)]
fn gather_via_helper(x: &[f32], at: u32, y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        let j = if i == 3 { at } else { i };
        let v = read_in_helper(x, j);
        y[i] = v;
    }
}

/// y = gather_at(x, read_at); the first x.len() elements of the state w = scatter_at(y,
/// write_at).
#[graphed]
fn gather_scatter(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    x: &Input<f32>,
    read_at: u32,
    write_at: u32,
) -> Result<Output<f32>> {
    let n = x.len();
    let mut y = cx.output::<f32>(n)?;
    gather_at::launch(cx, n, x, read_at, &mut y)?;
    let mut head = w.slice(0..n)?;
    scatter_at::launch(cx, n, &y, write_at, &mut head)?;
    Ok(y)
}

const POISON: u32 = 0x7fc0_dead;

fn poison(n: usize) -> Vec<f32> {
    vec![f32::from_bits(POISON); n]
}

fn checked(kind: BackendKind, on: bool) -> Device {
    let d = Device::open_new_with(kind, DeviceOptions { checked: on }).unwrap();
    assert_eq!(d.checked(), on || kind == BackendKind::Host);
    d
}

/// Every backend available to this run, as a checked device of its own.
fn checked_devices() -> Vec<Device> {
    backends().iter().map(|d| checked(d.kind(), true)).collect()
}

/// Asserts that `r` is the fault `kernel` / `target` / `index` / `len`, with the host's
/// message.
fn assert_fault(r: graphed::Result<()>, kernel: &str, target: &str, index: u32, len: u32) {
    match r {
        Err(graphed::Error::Fault(f)) => {
            assert_eq!(
                f,
                KernelFault {
                    kernel: f.kernel,
                    target: f.target,
                    kind: FaultKind::OutOfBounds { index, len },
                },
                "{f}"
            );
            assert_eq!((f.kernel, f.target), (kernel, target), "{f}");
            assert_eq!(
                f.to_string(),
                format!("kernel `{kernel}`: index {index} is out of bounds for `{target}` of length {len}")
            );
        }
        other => panic!("expected the fault of `{kernel}` at {target}[{index}], got {other:?}"),
    }
}

/// The fault was reported once: the device and its buffers work again.
fn assert_cleared(dev: &Device) {
    dev.synchronize().expect("a fault is reported once");
    dev.upload(&[1.0f32]).unwrap().to_host().unwrap();
}

/// A launch and the synchronisation after it: the host faults at the launch, GPUs at the sync.
fn launched(dev: &Device, r: graphed::Result<()>) -> graphed::Result<()> {
    r.and_then(|()| dev.synchronize())
}

#[test]
fn an_out_of_range_read_is_a_fault_naming_kernel_slice_index_and_length() {
    for dev in checked_devices() {
        let name = dev.kind();
        let mut r = rng("checked_read");
        let x = dev.upload(&floats(&mut r, 8, -1.0, 1.0)).unwrap();
        let mut y = dev.upload(&poison(8)).unwrap();
        let got = launched(&dev, gather_at::launch(&dev, 8, &x, 100u32, &mut y));
        eprintln!("{name}: {got:?}");
        assert_fault(got, "gather_at", "x", 100, 8);
        assert_cleared(&dev);
        // The same fault through a readback instead of a synchronize.
        let got =
            gather_at::launch(&dev, 8, &x, 8u32, &mut y).and_then(|()| y.to_host().map(|_| ()));
        assert_fault(got, "gather_at", "x", 8, 8);
        assert_cleared(&dev);
    }
}

#[test]
fn an_out_of_range_write_is_dropped_and_a_fault() {
    for dev in checked_devices() {
        let mut r = rng("checked_write");
        let x = dev.upload(&floats(&mut r, 8, -1.0, 1.0)).unwrap();
        // The view is the first half of the allocation: index 9 lies inside the buffer (where
        // an unchecked wgpu kernel would write) but outside the view.
        let big = dev.upload(&poison(16)).unwrap();
        let mut head = big.slice(0..8).unwrap();
        let got = launched(&dev, scatter_at::launch(&dev, 8, &x, 9u32, &mut head));
        assert_fault(got, "scatter_at", "y", 9, 8);
        assert_cleared(&dev);
        let after = big.to_host().unwrap();
        for (i, v) in after.iter().enumerate() {
            if i == 3 || i >= 8 {
                assert_eq!(
                    v.to_bits(),
                    POISON,
                    "{}: element {i} was written",
                    dev.kind()
                );
            }
        }
    }
}

#[test]
fn workgroup_arrays_and_atomics_are_checked() {
    for dev in checked_devices() {
        let mut y = dev.upload(&poison(4)).unwrap();
        assert_fault(
            launched(
                &dev,
                shared_at::launch(&dev, Grid::workgroups(1), 70u32, &mut y),
            ),
            "shared_at",
            "s",
            70,
            64,
        );
        assert_cleared(&dev);
        shared_at::launch(&dev, Grid::workgroups(1), 63u32, &mut y).unwrap();
        assert_eq!(y.to_host().unwrap()[0], 63.0, "{}", dev.kind());

        let h = dev.upload(&[7u32; 16]).unwrap();
        let mut h8 = h.slice(0..8).unwrap();
        assert_fault(
            launched(&dev, count_at::launch(&dev, 64, 12u32, &mut h8)),
            "count_at",
            "h",
            12,
            8,
        );
        assert_cleared(&dev);
        let after = h.to_host().unwrap();
        assert_eq!(
            after[8..],
            [7u32; 8],
            "{}: the dropped atomic wrote",
            dev.kind()
        );
        assert_eq!(after[0], 7, "{}", dev.kind());
    }
}

#[test]
fn per_invocation_arrays_and_workgroup_atomics_are_checked() {
    for dev in checked_devices() {
        let name = dev.kind();
        let mut y = dev.upload(&poison(8)).unwrap();
        // A read past the register array: the fault names the array as the source does.
        assert_fault(
            launched(&dev, array_at::launch(&dev, 8, 6u32, 0u32, &mut y)),
            "array_at",
            "taps",
            6,
            4,
        );
        assert_cleared(&dev);
        // A write past it.
        assert_fault(
            launched(&dev, array_at::launch(&dev, 8, 0u32, 4u32, &mut y)),
            "array_at",
            "taps",
            4,
            4,
        );
        assert_cleared(&dev);
        // In range: exact values.
        array_at::launch(&dev, 8, 2u32, 1u32, &mut y).unwrap();
        let want: Vec<f32> = (0..8)
            .map(|i| {
                let mut taps = [1.0f32, 2.0, 3.0, 4.0];
                if i == 5 {
                    taps[1] = 9.0;
                }
                let j = if i == 3 { 2 } else { i % 4 };
                taps[j] + taps[i % 4]
            })
            .collect();
        assert_eq!(y.to_host().unwrap(), want, "{name}");

        let mut h = dev.upload(&[7u32; 8]).unwrap();
        assert_fault(
            launched(
                &dev,
                shared_count_at::launch(&dev, Grid::workgroups(1), 8u32, &mut h),
            ),
            "shared_count_at",
            "bins",
            8,
            8,
        );
        assert_cleared(&dev);
        shared_count_at::launch(&dev, Grid::workgroups(1), 3u32, &mut h).unwrap();
        // 63 invocations add to t % 8 (bin 0 gets 7: t = 8, 16, …, 56), invocation 0 to bin 3.
        let mut want = [8u32; 8];
        want[0] = 7;
        want[3] = 9;
        assert_eq!(h.to_host().unwrap(), want, "{name}");
    }
}

#[test]
fn an_out_of_range_read_inside_a_helper_names_the_kernel_and_its_slice() {
    for dev in checked_devices() {
        let mut r = rng("checked_helper");
        let xs = floats(&mut r, 8, -1.0, 1.0);
        let x = dev.upload(&xs).unwrap();
        let mut y = dev.upload(&poison(8)).unwrap();
        assert_fault(
            launched(&dev, gather_via_helper::launch(&dev, 8, &x, 11u32, &mut y)),
            "gather_via_helper",
            "x",
            11,
            8,
        );
        assert_cleared(&dev);
        gather_via_helper::launch(&dev, 8, &x, 5u32, &mut y).unwrap();
        let want: Vec<f32> = (0..8)
            .map(|i| xs[if i == 3 { 5 } else { i }] * 2.0)
            .collect();
        assert!(bitwise_eq(&y.to_host().unwrap(), &want), "{}", dev.kind());
    }
}

#[test]
fn the_first_fault_since_the_last_report_is_the_one_reported() {
    for dev in checked_devices() {
        if dev.kind() == BackendKind::Host {
            continue; // the host stops at the first fault's launch
        }
        let x = dev.upload(&[1.0f32; 8]).unwrap();
        let mut y = dev.upload(&poison(8)).unwrap();
        gather_at::launch(&dev, 8, &x, 100u32, &mut y).unwrap();
        scatter_at::launch(&dev, 8, &x, 9u32, &mut y).unwrap();
        gather_at::launch(&dev, 8, &x, 3u32, &mut y).unwrap();
        assert_fault(dev.synchronize(), "gather_at", "x", 100, 8);
        assert_cleared(&dev);
        // In range, the results are right again.
        assert_eq!(y.to_host().unwrap(), vec![3.0f32; 8], "{}", dev.kind());
    }
}

#[test]
fn faults_inside_a_replayed_step_are_reported() {
    for dev in checked_devices() {
        let kind = dev.kind();
        let mut r = rng("checked_replay");
        let xs = floats(&mut r, 8, -1.0, 1.0);
        let mut w = dev.upload(&poison(16)).unwrap();
        let mut step = GatherScatter::new(&dev).unwrap();
        // In range: recorded and replayed, right values.
        let y = step.call(&mut w, &xs[..], 3, 3).unwrap().to_host().unwrap();
        let want: Vec<f32> = xs.iter().map(|v| v * 2.0 + 1.0).collect();
        assert!(bitwise_eq(&y, &want), "{kind}: {y:?} vs {want:?}");
        assert_eq!(step.stats().recordings, 1, "{kind}");
        assert_eq!(step.stats().replays, 1, "{kind}");

        // The same recording, an out-of-range read.
        let got = step
            .call(&mut w, &xs[..], 100, 3)
            .and_then(|y| y.to_host().map(|_| ()));
        assert_fault(got, "gather_at", "x", 100, 8);
        assert_cleared(&dev);

        // An out-of-range write into the state: dropped.
        let got = step
            .call(&mut w, &xs[..], 3, 9)
            .and_then(|y| y.to_host().map(|_| ()));
        assert_fault(got, "scatter_at", "y", 9, 8);
        assert_cleared(&dev);
        let after = w.to_host().unwrap();
        assert!(
            after[8..].iter().all(|v| v.to_bits() == POISON),
            "{kind}: the dropped write reached the state: {after:?}"
        );
        let st = step.stats();
        assert_eq!((st.recordings, st.eager_calls), (1, 0), "{kind}: {st:?}");

        // In range again: the replay is right.
        let y = step.call(&mut w, &xs[..], 3, 3).unwrap().to_host().unwrap();
        assert!(bitwise_eq(&y, &want), "{kind}");
        let w_head: Vec<f32> = want.iter().map(|v| v * 2.0 + 1.0).collect();
        assert!(bitwise_eq(&w.to_host().unwrap()[..8], &w_head), "{kind}");
    }
}

/// Elements equal within `ulps` units in the last place (same sign, or both zero).
fn within_ulps(a: &[f32], b: &[f32], ulps: u32) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.to_bits() == y.to_bits()
                || (x.is_sign_negative() == y.is_sign_negative()
                    && x.to_bits().abs_diff(y.to_bits()) <= ulps)
        })
}

/// Host and CUDA: bitwise. wgpu: the checked variant is another shader, and WGSL lets a
/// driver contract `a * b + c` into an FMA in one and not the other (NVIDIA's Vulkan driver
/// does: 1 ulp in one step seen on the H200, and more than 2 ulp in the weights after four
/// steps, where the differences compound), so within 16 ulp there.
#[test]
fn in_range_kernels_give_bitwise_the_results_of_unchecked_mode() {
    for d in backends() {
        let kind = d.kind();
        let mut r = rng("checked_bitwise");
        let w0 = floats(&mut r, 32 * LAYERS, -1.0, 1.0);
        let xs: Vec<Vec<f32>> = (0..4).map(|_| floats(&mut r, 32, -1.0, 1.0)).collect();
        let run = |dev: &Device| {
            let mut w = dev.upload(&w0).unwrap();
            let mut step = DeepStep::new(dev).unwrap();
            let mut outs = Vec::new();
            for x in &xs {
                let (y, s) = step.call(&mut w, &x[..], 0.1, 0.05).unwrap();
                outs.push(y.to_host().unwrap());
                outs.push(s.to_host().unwrap());
            }
            outs.push(w.to_host().unwrap());
            let x = dev.upload(&xs[0]).unwrap();
            let mut y = dev.upload(&poison(32)).unwrap();
            gather_at::launch(dev, 32, &x, 31u32, &mut y).unwrap();
            outs.push(y.to_host().unwrap());
            let mut s = dev.upload(&poison(1)).unwrap();
            shared_at::launch(dev, Grid::workgroups(1), 17u32, &mut s).unwrap();
            outs.push(s.to_host().unwrap());
            let mut h = dev.upload(&[0u32; 40]).unwrap();
            count_at::launch(dev, 64, 39u32, &mut h).unwrap();
            outs.push(h.to_host().unwrap().iter().map(|&v| v as f32).collect());
            assert_eq!(step.stats().replays, 4, "{kind}");
            outs
        };
        let plain = run(&checked(kind, false));
        let with_checks = run(&checked(kind, true));
        assert_eq!(plain.len(), with_checks.len());
        let ulps = if kind == BackendKind::Wgpu { 16 } else { 0 };
        for (i, (a, b)) in plain.iter().zip(&with_checks).enumerate() {
            assert!(
                within_ulps(a, b, ulps),
                "{kind}: result {i} differs by more than {ulps} ulp: {a:?} vs {b:?}"
            );
        }
    }
}

/// Child half: devices opened without options follow `GRAPHED_CHECKED`.
#[test]
fn checked_env_child() {
    let Ok(mode) = std::env::var("GRAPHED_CHECKED_CHILD") else {
        return;
    };
    match mode.as_str() {
        "on" => {
            assert_eq!(
                DeviceOptions::from_env().unwrap(),
                DeviceOptions { checked: true }
            );
            for dev in backends() {
                assert!(dev.checked(), "{}", dev.kind());
                let x = dev.upload(&[1.0f32; 8]).unwrap();
                let mut y = dev.upload(&poison(8)).unwrap();
                assert_fault(
                    launched(&dev, gather_at::launch(&dev, 8, &x, 11u32, &mut y)),
                    "gather_at",
                    "x",
                    11,
                    8,
                );
                println!("checked fault on {}", dev.kind());
            }
        }
        "off" => {
            assert_eq!(DeviceOptions::from_env().unwrap(), DeviceOptions::default());
            for dev in backends() {
                assert_eq!(dev.checked(), dev.kind() == BackendKind::Host);
                println!("unchecked {}", dev.kind());
            }
        }
        _ => {
            let e = DeviceOptions::from_env().unwrap_err();
            assert_eq!(
                e.to_string(),
                "environment variable GRAPHED_CHECKED=\"maybe\" is not understood: 1 (checked GPU kernels) or 0"
            );
            // Fails closed: no device opens with checking in doubt.
            for kind in [BackendKind::Host, BackendKind::Wgpu] {
                match Device::open_new(kind) {
                    Err(graphed::Error::BadEnv { var, .. }) => assert_eq!(var, "GRAPHED_CHECKED"),
                    other => panic!("{kind}: expected BadEnv, got {:?}", other.map(|d| d.kind())),
                }
            }
            println!("refused");
        }
    }
}

#[test]
fn graphed_checked_selects_the_mode_of_devices_opened_without_options() {
    let gpus = backends().len() - 1;
    for (value, mode, expect) in [
        ("1", "on", "checked fault on"),
        ("0", "off", "unchecked"),
        ("maybe", "bad", "refused"),
    ] {
        let (ok, out, err) = common::run_child(
            "checked_env_child",
            &[("GRAPHED_CHECKED", value), ("GRAPHED_CHECKED_CHILD", mode)],
            &[],
        );
        assert!(ok, "GRAPHED_CHECKED={value}: {out}\n{err}");
        let want = if mode == "bad" { 1 } else { gpus + 1 };
        assert_eq!(
            out.matches(expect).count(),
            want,
            "GRAPHED_CHECKED={value}: {out}\n{err}"
        );
    }
}
