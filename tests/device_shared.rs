//! `#[device]` helpers with workgroup memory, barriers, atomics and per-invocation arrays,
//! on every backend against host references: a tree reduction taking a workgroup array and
//! reaching barriers (called once, in a uniform loop, and through another helper), a
//! privatised histogram whose counting helper uses workgroup atomics, and helpers holding
//! register arrays. Inputs are fresh random values; outputs are poisoned before each run.
//!
//! Tolerances: none. The sums are of small integers held in `f32` (exact in any order) and
//! the rest is integer arithmetic, `max` and selects, so every backend agrees bitwise.

mod common;

use common::{on_every_backend, rng};
use graphed::prelude::*;
use graphed::{BackendKind, KernelDef};
use rand::Rng;

const POISON_F32: f32 = f32::from_bits(0x7fde_ad00);
const POISON_U32: u32 = 0xDEAD_BEEF;

/// Helpers over one workgroup's memory.
pub mod wg {
    use graphed::prelude::*;

    /// The sum of `s[0..64]` after every invocation `t` of a 64-wide workgroup wrote
    /// `s[t]`: a tree in workgroup memory, every invocation gets the total.
    #[device]
    pub fn tree_sum(s: &mut [f32; 64], t: u32) -> f32 {
        barrier();
        let mut h = 32u32;
        while h > 0 {
            if t < h {
                s[t] = s[t] + s[t + h];
            }
            barrier();
            h = h / 2;
        }
        s[0]
    }

    /// `tree_sum` of `v`, the values of the workgroup's invocations, doubled.
    #[device]
    pub fn doubled_sum(s: &mut [f32; 64], t: u32, v: f32) -> f32 {
        s[t] = v;
        let total = tree_sum(s, t);
        barrier();
        2.0 * total
    }

    /// Counts `v` in bin `v % 64` of a workgroup's private histogram.
    #[device]
    pub fn count(bins: &mut [u32; 64], v: u32) {
        atomic_add(bins, v % 64, 1u32);
    }

    /// The largest of `x[i..i + 4]` (missing elements are −∞), through a register array.
    #[device]
    pub fn window_max(x: &[f32], i: u32) -> f32 {
        let mut w = [0.0f32; 4];
        for k in 0..4u32 {
            w[k] = if i + k < x.len() { x[i + k] } else { -1.0e30 };
        }
        let mut m = w[0];
        for k in 1..4u32 {
            m = max(m, w[k]);
        }
        m
    }

    /// Element `j % 8` of a table built from `a`, indexed at run time.
    #[device]
    pub fn table(a: u32, j: u32) -> u32 {
        let mut t = [0u32; 8];
        for k in 0..8u32 {
            t[k] = a * (k + 1) ^ (k << 3);
        }
        t[j % 8]
    }

    /// Element `j` of a 4-element array: out of range when `j > 3`.
    #[device]
    pub fn pick(v: f32, j: u32) -> f32 {
        let a = [v, v + 1.0, v + 2.0, v + 3.0];
        a[j]
    }
}

use wg::{count, doubled_sum, pick, table, tree_sum, window_max};

/// `out[w]` = the sum of workgroup `w`'s strided share of `x`.
#[kernel(workgroup = 64)]
pub fn block_sums(x: &[f32], out: &mut [f32]) {
    let s = shared::<f32, 64>();
    let t = local_id().x;
    let mut acc = 0.0f32;
    let mut i = global_id().x;
    while i < x.len() {
        acc += x[i];
        i += global_size().x;
    }
    s[t] = acc;
    let total = tree_sum(s, t);
    if t == 0 {
        out[workgroup_id().x] = total;
    }
}

/// `out[r]` = twice the sum of row `r` (`cols` ≤ 64 columns), rows `w, w + G, …` per
/// workgroup: the helper is called in a loop every invocation runs alike.
#[kernel(workgroup = 64)]
pub fn row_sums(cols: u32, x: &[f32], out: &mut [f32]) {
    let s = shared::<f32, 64>();
    let t = local_id().x;
    let mut r = workgroup_id().x;
    while r < out.len() {
        let v = if t < cols { x[r * cols + t] } else { 0.0 };
        let total = doubled_sum(s, t, v);
        if t == 0 {
            out[r] = total;
        }
        r += num_workgroups().x;
    }
}

/// A privatised histogram of `x % 64`: counts per workgroup in workgroup memory, then one
/// global atomic per bin and workgroup.
#[kernel(workgroup = 64)]
pub fn histogram(x: &[u32], bins: &mut [u32]) {
    let local = shared::<u32, 64>();
    let mut i = global_id().x;
    while i < x.len() {
        count(local, x[i]);
        i += global_size().x;
    }
    barrier();
    let c = atomic_load(local, local_id().x);
    if c > 0 {
        atomic_add(bins, local_id().x, c);
    }
}

/// Helpers holding register arrays.
#[kernel(workgroup = 64)]
pub fn arrays_in_helpers(x: &[f32], a: &[u32], y: &mut [f32], z: &mut [u32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = window_max(x, i);
        z[i] = table(a[i], a[i] >> 8);
    }
}

/// `pick` out of range for `j = 4`.
#[kernel(workgroup = 64)]
pub fn helper_array_out_of_bounds(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = pick(x[i], i % 5);
    }
}

fn all_kernels() -> Vec<&'static KernelDef> {
    vec![
        &block_sums::DEF,
        &row_sums::DEF,
        &histogram::DEF,
        &arrays_in_helpers::DEF,
        &helper_array_out_of_bounds::DEF,
    ]
}

/// Small integers as `f32`: their sums are exact in any order.
fn ints(r: &mut impl Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| r.random_range(-100i32..=100) as f32)
        .collect()
}

fn assert_bits(got: &[f32], want: &[f32], what: &str) {
    let bad: Vec<String> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| g.to_bits() != w.to_bits())
        .map(|(i, (g, w))| format!("[{i}] got {g:e}, want {w:e}"))
        .take(6)
        .collect();
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    assert!(bad.is_empty(), "{what}:\n  {}", bad.join("\n  "));
}

#[test]
fn a_helper_reduces_a_workgroup_array_across_barriers() {
    let mut r = rng("a_helper_reduces_a_workgroup_array_across_barriers");
    on_every_backend(|dev| {
        for (n, groups) in [(1usize, 1usize), (64, 1), (1000, 3), (5000, 8)] {
            let x = ints(&mut r, n);
            let xb = dev.upload(&x).unwrap();
            let mut out = dev.upload(&vec![POISON_F32; groups]).unwrap();
            block_sums::launch(dev, Grid::workgroups(groups as u32), &xb, &mut out).unwrap();
            let stride = groups * 64;
            let want: Vec<f32> = (0..groups)
                .map(|w| {
                    (0..n)
                        .filter(|i| (i % stride) / 64 == w)
                        .map(|i| x[i])
                        .sum()
                })
                .collect();
            assert_bits(
                &out.to_host().unwrap(),
                &want,
                &format!("n={n} groups={groups}"),
            );
        }
    });
}

#[test]
fn a_barrier_helper_is_called_in_a_uniform_loop_and_from_a_helper() {
    let mut r = rng("a_barrier_helper_is_called_in_a_uniform_loop_and_from_a_helper");
    on_every_backend(|dev| {
        for (rows, cols, groups) in [(1usize, 1u32, 1u32), (7, 64, 2), (50, 33, 4)] {
            let x = ints(&mut r, rows * cols as usize);
            let xb = dev.upload(&x).unwrap();
            let mut out = dev.upload(&vec![POISON_F32; rows]).unwrap();
            row_sums::launch(dev, Grid::workgroups(groups), cols, &xb, &mut out).unwrap();
            let want: Vec<f32> = x
                .chunks(cols as usize)
                .map(|c| 2.0 * c.iter().sum::<f32>())
                .collect();
            assert_bits(
                &out.to_host().unwrap(),
                &want,
                &format!("rows={rows} cols={cols}"),
            );
        }
    });
}

#[test]
fn a_privatised_histogram_counts_through_a_helper_with_workgroup_atomics() {
    let mut r = rng("a_privatised_histogram_counts_through_a_helper_with_workgroup_atomics");
    on_every_backend(|dev| {
        for (n, groups) in [(1usize, 1u32), (999, 2), (20000, 16)] {
            let x: Vec<u32> = (0..n).map(|_| r.random()).collect();
            let xb = dev.upload(&x).unwrap();
            // Bins start from random counts: the kernel adds to them.
            let start: Vec<u32> = (0..64).map(|_| r.random_range(0..1000)).collect();
            let mut bins = dev.upload(&start).unwrap();
            histogram::launch(dev, Grid::workgroups(groups), &xb, &mut bins).unwrap();
            let mut want = start.clone();
            for v in &x {
                want[(v % 64) as usize] += 1;
            }
            assert_eq!(bins.to_host().unwrap(), want, "{:?} n={n}", dev.kind());
        }
    });
}

#[test]
fn helpers_hold_register_arrays() {
    let mut r = rng("helpers_hold_register_arrays");
    on_every_backend(|dev| {
        for n in [1usize, 3, 64, 1000] {
            let x = common::floats(&mut r, n, -50.0, 50.0);
            let a: Vec<u32> = (0..n).map(|_| r.random()).collect();
            let (xb, ab) = (dev.upload(&x).unwrap(), dev.upload(&a).unwrap());
            let mut y = dev.upload(&vec![POISON_F32; n]).unwrap();
            let mut z = dev.upload(&vec![POISON_U32; n]).unwrap();
            arrays_in_helpers::launch(dev, Grid::threads(n), &xb, &ab, &mut y, &mut z).unwrap();
            let want_y: Vec<f32> = (0..n)
                .map(|i| {
                    x[i..(i + 4).min(n)]
                        .iter()
                        .copied()
                        .fold(f32::MIN, f32::max)
                })
                .collect();
            let want_z: Vec<u32> = a
                .iter()
                .map(|&v| {
                    let k = (v >> 8) % 8;
                    v.wrapping_mul(k + 1) ^ (k << 3)
                })
                .collect();
            assert_bits(
                &y.to_host().unwrap(),
                &want_y,
                &format!("{:?} y n={n}", dev.kind()),
            );
            assert_eq!(z.to_host().unwrap(), want_z, "{:?} z n={n}", dev.kind());
            // The helpers' Rust forms agree.
            for i in 0..n {
                assert_eq!(window_max(&x, i as u32).to_bits(), want_y[i].to_bits());
                assert_eq!(table(a[i], a[i] >> 8), want_z[i]);
            }
        }
    });
}

#[test]
fn a_helper_array_index_out_of_range_is_a_fault_naming_the_array() {
    let dev = Device::open(BackendKind::Host).unwrap();
    let x = dev.upload(&[1.0f32; 8]).unwrap();
    let mut y = dev.upload(&[0.0f32; 8]).unwrap();
    let err = helper_array_out_of_bounds::launch(&dev, Grid::threads(8), &x, &mut y).unwrap_err();
    match &err {
        graphed::Error::Fault(f) => {
            assert_eq!(f.kernel, "helper_array_out_of_bounds");
            assert_eq!(f.target, "a");
            assert_eq!(f.kind, graphed::FaultKind::OutOfBounds { index: 4, len: 4 });
        }
        other => panic!("expected a fault, got {other:?}"),
    }
    assert_eq!(pick(1.5, 3), 4.5);
}

#[test]
fn rust_forms_of_workgroup_helpers_run_one_invocation() {
    // Alone, invocation 0 adds s[32], s[16], …, s[1] into s[0]; every barrier passes.
    let mut s = [0.0f32; 64];
    for (i, v) in s.iter_mut().enumerate() {
        *v = i as f32;
    }
    assert_eq!(tree_sum(&mut s, 0), (32 + 16 + 8 + 4 + 2 + 1) as f32);
    assert_eq!(s[0], 63.0, "the array is written back");
    let mut bins = [7u32; 64];
    count(&mut bins, 130);
    assert_eq!((bins[2], bins[3]), (8, 7));
}

#[test]
fn wgsl_specialises_a_workgroup_helper_per_array_and_cuda_passes_a_pointer() {
    let w = block_sums::WGSL;
    assert!(w.contains("// `#[device]` tree_sum\n"), "{w}");
    assert!(w.contains("(t_v: u32) -> f32"), "{w}");
    assert!(!w.contains("storageBarrier"), "{w}");
    let c = block_sums::CUDA;
    assert!(c.contains("float* s)"), "{c}");
    assert!(histogram::WGSL.contains("array<atomic<u32>, 64>"));
}

#[test]
fn every_kernel_wgsl_is_valid_per_naga() {
    common::assert_wgsl_valid(&all_kernels());
}

#[test]
fn every_kernel_cuda_compiles_with_nvrtc() {
    common::assert_cuda_compiles(&all_kernels());
}
