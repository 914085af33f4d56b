//! Subgroup operations inside `#[device]` helpers, on every backend: a helper using a
//! reduction, one using shuffles in a loop (the butterfly), one reading only the size and
//! lane, and a helper reaching them through another helper with a slice parameter. Each
//! kernel calling the helpers is compared bitwise with a kernel writing the same operations
//! inline (same operations in the same order, so the same bits on every target) and with
//! the host's emulation at the device's subgroup size; the host runs every size from 4 to
//! 64 besides. Outputs are poisoned before each run. The helpers' Rust forms run alone: a
//! subgroup of one invocation.

mod common;

use common::{on_every_backend, rng};
use graphed::prelude::*;
use graphed::testing::{floats, poisoned};
use rand::Rng;

/// The subgroup's sum.
#[device]
fn warp_sum(v: f32) -> f32 {
    subgroup_add(v)
}

/// The subgroup's sum as a butterfly of shuffles written out: the order `subgroup_add`
/// defines.
#[device]
fn butterfly_sum(v: f32) -> f32 {
    let mut a = v;
    let mut m = 1u32;
    while m < subgroup_size() {
        a = a + subgroup_shuffle_xor(a, m);
        m = m * 2;
    }
    a
}

/// The size and lane, packed: no exchange between invocations.
#[device]
fn where_am_i() -> u32 {
    subgroup_size() * 1000 + subgroup_invocation_id()
}

/// Through another helper and with a slice: the subgroup's maximum of `w[i]`, the sum of
/// `v`, and the neighbour's `v` one lane down.
#[device]
fn mixed(v: f32, w: &[f32], i: u32) -> f32 {
    let s = warp_sum(v);
    let m = subgroup_max(w[i]);
    s * 0.5 + m + subgroup_shuffle_down(v, 1u32)
}

/// Every helper, four results and the packed lane per invocation.
#[kernel(workgroup = 64)]
pub fn sg_helpers(x: &[f32], w: &[f32], out: &mut [f32], lanes: &mut [u32]) {
    let i = global_id().x;
    let v = if i < x.len() { x[i] } else { 0.0 };
    let j = if i < w.len() { i } else { 0u32 };
    let a = warp_sum(v);
    let b = butterfly_sum(v);
    let c = mixed(v, w, j);
    let d = where_am_i();
    if i < x.len() {
        out[i * 3] = a;
        out[i * 3 + 1] = b;
        out[i * 3 + 2] = c;
        lanes[i] = d;
    }
}

/// The same as `sg_helpers`, inline.
#[kernel(workgroup = 64)]
pub fn sg_inline(x: &[f32], w: &[f32], out: &mut [f32], lanes: &mut [u32]) {
    let i = global_id().x;
    let v = if i < x.len() { x[i] } else { 0.0 };
    let j = if i < w.len() { i } else { 0u32 };
    let a = subgroup_add(v);
    let mut bb = v;
    let mut m = 1u32;
    while m < subgroup_size() {
        bb = bb + subgroup_shuffle_xor(bb, m);
        m = m * 2;
    }
    let s = subgroup_add(v);
    let mx = subgroup_max(w[j]);
    let c = s * 0.5 + mx + subgroup_shuffle_down(v, 1u32);
    let d = subgroup_size() * 1000 + subgroup_invocation_id();
    if i < x.len() {
        out[i * 3] = a;
        out[i * 3 + 1] = bb;
        out[i * 3 + 2] = c;
        lanes[i] = d;
    }
}

/// A kernel whose only subgroup use is a helper: it still counts as using subgroups.
#[kernel(workgroup = 32)]
pub fn sg_only_through_helper(x: &[f32], out: &mut [f32]) {
    let i = global_id().x;
    let v = if i < x.len() { x[i] } else { 0.0 };
    let s = butterfly_sum(v);
    if i < x.len() {
        out[i] = s;
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `(out, lanes)` of `k` (`sg_helpers` or `sg_inline`) on `dev`, outputs poisoned.
fn run(dev: &Device, helpers: bool, x: &[f32], w: &[f32]) -> (Vec<f32>, Vec<u32>) {
    let xb = dev.upload(x).unwrap();
    let wb = dev.upload(w).unwrap();
    let mut out = poisoned(dev, x.len() * 3);
    let mut lanes = dev.upload(&vec![0xdead_beefu32; x.len()]).unwrap();
    let grid = Grid::threads(x.len());
    if helpers {
        sg_helpers::launch(dev, grid, &xb, &wb, &mut out, &mut lanes).unwrap();
    } else {
        sg_inline::launch(dev, grid, &xb, &wb, &mut out, &mut lanes).unwrap();
    }
    (out.to_host().unwrap(), lanes.to_host().unwrap())
}

#[test]
fn helpers_using_subgroups_match_the_inline_kernel_and_the_host() {
    let mut rng = rng("helpers_using_subgroups_match_the_inline_kernel_and_the_host");
    on_every_backend(|dev| {
        let Some((size, host)) = common::subgroup_host(dev) else {
            return;
        };
        for n in [64usize, 200, 1000] {
            let x = floats(&mut rng, n, -10.0, 10.0);
            let extra = rng.random_range(0..5);
            let w = floats(&mut rng, n + extra, -10.0, 10.0);
            let (out, lanes) = run(dev, true, &x, &w);
            let (inl, inl_lanes) = run(dev, false, &x, &w);
            let (hout, hlanes) = run(&host, true, &x, &w);
            let b = dev.kind();
            assert_eq!(bits(&out), bits(&inl), "{b:?} n={n}: helpers vs inline");
            assert_eq!(bits(&out), bits(&hout), "{b:?} n={n}: vs the host");
            assert_eq!(lanes, inl_lanes, "{b:?} n={n}: lanes vs inline");
            let want: Vec<u32> = (0..n as u32).map(|i| size * 1000 + i % size).collect();
            assert_eq!(lanes, want, "{b:?} n={n}: size and lane");
            assert_eq!(hlanes, want, "host n={n}: size and lane");
            // The butterfly written out is `subgroup_add`'s order.
            for i in 0..n {
                assert_eq!(
                    out[i * 3].to_bits(),
                    out[i * 3 + 1].to_bits(),
                    "{b:?} n={n}: invocation {i}: subgroup_add vs the butterfly"
                );
            }
        }
    });
}

#[test]
fn host_helpers_follow_every_subgroup_size() {
    let mut rng = rng("host_helpers_follow_every_subgroup_size");
    for size in [4u32, 8, 16, 32, 64] {
        let host = Device::host_with_subgroup_size(size).unwrap();
        let n = 256;
        let x = floats(&mut rng, n, -10.0, 10.0);
        let w = floats(&mut rng, n, -10.0, 10.0);
        let (out, lanes) = run(&host, true, &x, &w);
        let (inl, _) = run(&host, false, &x, &w);
        assert_eq!(bits(&out), bits(&inl), "size {size}: helpers vs inline");
        let s = size as usize;
        for i in 0..n {
            let base = i - i % s;
            let sub = &x[base..base + s];
            // Pairwise in lane order, as the butterfly leaves it.
            fn tree(s: &[f32]) -> f32 {
                if s.len() == 1 {
                    s[0]
                } else {
                    tree(&s[..s.len() / 2]) + tree(&s[s.len() / 2..])
                }
            }
            let sum = tree(sub);
            let mx = w[base..base + s].iter().copied().fold(f32::MIN, f32::max);
            let down = if i % s + 1 < s { x[i + 1] } else { x[i] };
            assert_eq!(
                out[i * 3].to_bits(),
                sum.to_bits(),
                "size {size}: sum at {i}"
            );
            assert_eq!(
                out[i * 3 + 2],
                sum * 0.5 + mx + down,
                "size {size}: mixed at {i}"
            );
            assert_eq!(lanes[i], size * 1000 + (i % s) as u32, "size {size}: lane");
        }
    }
}

#[test]
fn a_kernel_using_subgroups_only_through_a_helper_runs_and_is_marked() {
    let mut rng = rng("a_kernel_using_subgroups_only_through_a_helper_runs_and_is_marked");
    assert!(
        sg_only_through_helper::DEF
            .wgsl
            .lines()
            .any(|l| l == "// requires: subgroups"),
        "the WGSL asks for subgroups"
    );
    on_every_backend(|dev| {
        let Some(size) = dev.subgroup_size() else {
            return;
        };
        let x = floats(&mut rng, 100, -1.0, 1.0);
        let go = |d: &Device| {
            let xb = d.upload(&x).unwrap();
            let mut out = poisoned(d, x.len());
            sg_only_through_helper::launch(d, Grid::threads(x.len()), &xb, &mut out).unwrap();
            out.to_host().unwrap()
        };
        let got = go(dev);
        let want = go(&Device::host_with_subgroup_size(size).unwrap());
        assert_eq!(bits(&got), bits(&want), "{:?}: vs the host", dev.kind());
    });
    // A 128-invocation subgroup does not divide the 32-invocation workgroup: refused, as
    // for a kernel using subgroups itself.
    let dev = Device::host_with_subgroup_size(64).unwrap();
    let x = dev.upload(&[1.0f32; 32]).unwrap();
    let mut out = dev.alloc::<f32>(32).unwrap();
    let e = sg_only_through_helper::launch(&dev, Grid::threads(32), &x, &mut out).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Unsupported {
                kernel: "sg_only_through_helper",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn rust_forms_run_as_a_subgroup_of_one() {
    let mut rng = rng("rust_forms_run_as_a_subgroup_of_one");
    for _ in 0..8 {
        let v: f32 = rng.random_range(-100.0..100.0);
        assert_eq!(warp_sum(v).to_bits(), v.to_bits());
        assert_eq!(butterfly_sum(v).to_bits(), v.to_bits());
        let w = [v, v + 1.0];
        assert_eq!(mixed(v, &w, 1), v * 0.5 + (v + 1.0) + v);
    }
    assert_eq!(where_am_i(), 1000);
}

#[test]
fn checked_devices_run_subgroup_helpers_with_the_same_bits() {
    let mut rng = rng("checked_devices_run_subgroup_helpers_with_the_same_bits");
    on_every_backend(|dev| {
        if dev.subgroup_size().is_none() {
            return;
        }
        let checked =
            Device::open_new_with(dev.kind(), graphed::DeviceOptions { checked: true }).unwrap();
        let x = floats(&mut rng, 300, -10.0, 10.0);
        let w = floats(&mut rng, 300, -10.0, 10.0);
        let (out, lanes) = run(dev, true, &x, &w);
        let (cout, clanes) = run(&checked, true, &x, &w);
        assert_eq!(
            bits(&out),
            bits(&cout),
            "{:?}: checked vs plain",
            dev.kind()
        );
        assert_eq!(lanes, clanes, "{:?}: checked lanes", dev.kind());
    });
}

#[test]
fn sources_validate_and_compile() {
    let defs = [
        &sg_helpers::DEF,
        &sg_inline::DEF,
        &sg_only_through_helper::DEF,
    ];
    common::assert_wgsl_valid(&defs);
    common::assert_cuda_compiles(&defs);
}
