//! Per-invocation arrays, unrolled constant loops, atomics on workgroup memory and values
//! computed by statements (`let v = { ... };`, `let v = loop { ... break x; };`), on every
//! backend against plain-Rust references, with fresh random inputs and poisoned outputs.
//! Every kernel's WGSL is validated by naga and its CUDA C compiled by NVRTC.
//!
//! Tolerances: integers exact; the FIR filter bitwise against an f32 re-enactment of the same
//! operation order on host and CUDA, and within 1e-6 relative on wgpu (a driver may contract
//! `acc + w * x` into an FMA).

mod common;

use common::{floats, on_every_backend, rel_err, rng};
use graphed::prelude::*;
use graphed::KernelDef;
use rand::Rng;

const POISON_U32: u32 = 0xDEAD_BEEF;
const POISON_F32: f32 = f32::from_bits(0x7fde_ad00);

// ------------------------------------------------------------------------------ kernels

/// An 8-tap FIR filter per output: the taps and the window in register arrays, both loops
/// unrolled (constant ranges), so every index is known at compile time.
#[kernel(workgroup = 64)]
pub fn fir8(x: &[f32], taps: &[f32], y: &mut [f32]) {
    const K: u32 = 8;
    let i = global_id().x;
    if i >= y.len() {
        return;
    }
    let mut w = [0.0f32; K];
    let mut win = [0.0f32; 8];
    for k in 0..K {
        w[k] = taps[k];
        let j = i + k;
        win[k] = if j < x.len() { x[j] } else { 0.0 };
    }
    let mut acc = 0.0f32;
    for k in 0..w.len() {
        acc += w[k] * win[k];
    }
    y[i] = acc;
}

/// Sorts each invocation's 8 values in a register array (bubble sort over unrolled constant
/// loops; the inner bound depends on the outer variable, which is known in every copy).
#[kernel(workgroup = 64)]
pub fn sort8(x: &[i32], y: &mut [i32]) {
    let g = global_id().x;
    if g * 8 >= x.len() {
        return;
    }
    let mut v = [0i32; 8];
    for k in 0..8u32 {
        v[k] = x[g * 8 + k];
    }
    for pass in 0..7u32 {
        for k in 0..(7 - pass) {
            let a = v[k];
            let b = v[k + 1];
            v[k] = min(a, b);
            v[k + 1] = max(a, b);
        }
    }
    for k in 0..8u32 {
        y[g * 8 + k] = v[k];
    }
}

/// A register array indexed at run time (a per-invocation table lookup), literal lists,
/// `len()`, compound assignment through a run-time index, and `bool`/`u32` arrays.
#[kernel(workgroup = 64)]
pub fn lookup(x: &[u32], y: &mut [u32]) {
    let i = global_id().x;
    if i >= x.len() {
        return;
    }
    let table = [7u32, 11, 13, 17, 19, 23, 29, 31];
    let mut counts = [0u32; 4];
    let mut seen = [false; 4];
    let v = x[i];
    let mut k = 0u32;
    while k < 4 {
        let idx = (v >> (k * 8)) % table.len();
        counts[idx % 4] += table[idx];
        seen[idx % 4] = true;
        k += 1;
    }
    let mut out = 0u32;
    for j in 0..4u32 {
        out = out * 31 + counts[j] + select(seen[j], 1000u32, 0u32);
    }
    y[i] = out;
}

/// Reads and writes at a run-time index that may be out of range: a fault on the host; on
/// GPU targets a read gives zero and a write is dropped.
#[kernel(workgroup = 64)]
pub fn array_oob(ix: &[u32], y: &mut [u32]) {
    let i = global_id().x;
    if i >= ix.len() {
        return;
    }
    let mut a = [5u32, 6, 7, 8];
    let j = ix[i];
    a[j] = 100u32;
    let r = a[j];
    y[i * 5] = r;
    for k in 0..4u32 {
        y[i * 5 + 1 + k] = a[k];
    }
}

/// A privatised histogram: counts per workgroup in workgroup memory (atomics), then one
/// global atomic add per bin. Workgroup memory used atomically starts zeroed on every target.
#[kernel(workgroup = 64)]
pub fn histogram_private(x: &[u32], bins: &mut [u32]) {
    const B: u32 = 64;
    let local = shared::<u32, B>();
    let lid = local_id().x;
    let mut i = global_id().x;
    while i < x.len() {
        atomic_add(local, x[i] % B, 1u32);
        i += global_size().x;
    }
    barrier();
    let c = atomic_load(local, lid);
    if c > 0 {
        atomic_add(bins, lid, c);
    }
}

/// Every atomic on workgroup memory of `i32`: the old values come back, and the final state
/// is written out by invocation 0.
#[kernel(workgroup = 32)]
pub fn shared_atomics(x: &[i32], out: &mut [i32], olds: &mut [i32]) {
    let s = shared::<i32, 8>();
    let lid = local_id().x;
    let g = global_id().x;
    let v = x[g];
    atomic_max(s, 0, v);
    atomic_min(s, 1, v);
    atomic_add(s, 2, v);
    atomic_sub(s, 3, v);
    atomic_or(s, 4, 1i32 << (lid % 31));
    atomic_xor(s, 5, v);
    atomic_store(s, 6, 9);
    // Each invocation bumps slot 7 by one through a compare-exchange retry loop.
    loop {
        let cur = atomic_load(s, 7);
        let prev = atomic_compare_exchange(s, 7, cur, cur + 1);
        if prev == cur {
            break;
        }
    }
    let old = atomic_exchange(s, 6, 9);
    olds[g] = old;
    barrier();
    if lid == 0 {
        for k in 0..8u32 {
            let v = atomic_load(s, k);
            out[workgroup_id().x * 8 + k] = v;
        }
    }
}

/// Values computed by statements: a block, a `loop` with `break value`, an `if` whose
/// branch is a block with a value, and a value block assigned to an element.
#[kernel(workgroup = 64)]
pub fn values(x: &[u32], y: &mut [u32]) {
    let i = global_id().x;
    if i >= x.len() {
        return;
    }
    let v = x[i];
    let a = {
        let t = v * 3;
        t ^ (t >> 5u32)
    };
    // The number of Collatz-like steps until the value is below 16, capped at 100.
    let steps = loop {
        let mut n = 0u32;
        let mut c = v;
        while c >= 16 && n < 100 {
            c = if c % 2 == 0 { c / 2 } else { c / 4 + 1 };
            n += 1;
        }
        break n;
    };
    let mut first = 0u32;
    let found = loop {
        if first >= 32 {
            break false;
        }
        if (v >> first) & 1 == 1 {
            break true;
        }
        first += 1;
    };
    let b = if found {
        let s = first + 1;
        s * s
    } else {
        {
            let z = 7u32;
            z + 1
        }
    };
    y[i * 4] = a;
    y[i * 4 + 1] = steps;
    y[i * 4 + 2] = b;
    y[i * 4 + 3] = {
        let q = a % 1000;
        q + 1
    };
}

fn all_kernels() -> Vec<&'static KernelDef> {
    vec![
        &fir8::DEF,
        &sort8::DEF,
        &lookup::DEF,
        &array_oob::DEF,
        &histogram_private::DEF,
        &shared_atomics::DEF,
        &values::DEF,
    ]
}

// ------------------------------------------------------------------------------ source checks

#[test]
fn every_kernel_wgsl_is_valid_per_naga() {
    use naga::valid::{Capabilities, ValidationFlags, Validator};
    let mut failures = Vec::new();
    for k in all_kernels() {
        match naga::front::wgsl::parse_str(k.wgsl) {
            Err(e) => failures.push(format!("{}: {}", k.name, e.emit_to_string(k.wgsl))),
            Ok(m) => {
                if let Err(e) =
                    Validator::new(ValidationFlags::all(), Capabilities::all()).validate(&m)
                {
                    failures.push(format!("{}: {}", k.name, e.emit_to_string(k.wgsl)));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_kernel_cuda_compiles_with_nvrtc() {
    if !common::nvrtc_enabled() {
        return;
    }
    let mut failures = Vec::new();
    for k in all_kernels() {
        if let Err(e) = graphed::nvrtc::compile(k, "compute_80") {
            failures.push(format!("{}: {e}\n{}", k.name, k.cuda));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn constant_loops_are_unrolled_and_constant_indices_unguarded() {
    // fir8's loops are gone from every target, and its arrays are indexed by literals.
    assert!(!fir8::WGSL.contains("for ("), "{}", fir8::WGSL);
    assert!(!fir8::CUDA.contains("for ("), "{}", fir8::CUDA);
    assert!(!fir8::WGSL.contains("select(0.0f"), "{}", fir8::WGSL);
    assert!(fir8::WGSL.contains("[7u]"), "{}", fir8::WGSL);
    assert!(fir8::DEF.loops_terminate);
    // A run-time index is guarded: zero on reads, no write past the end.
    assert!(
        array_oob::WGSL.contains("select(0u,"),
        "{}",
        array_oob::WGSL
    );
    assert!(array_oob::CUDA.contains(" < 4u ? "), "{}", array_oob::CUDA);
    // An atomic workgroup array is `atomic<u32>` in WGSL and zeroed first in CUDA.
    assert!(
        histogram_private::WGSL.contains("array<atomic<u32>, 64>"),
        "{}",
        histogram_private::WGSL
    );
    assert!(
        histogram_private::CUDA.contains("= 0; }\n    __syncthreads();"),
        "{}",
        histogram_private::CUDA
    );
}

// ------------------------------------------------------------------------------ helpers

fn poisoned<T: graphed::Element>(dev: &Device, n: usize, poison: T) -> Buffer<T> {
    dev.upload(&vec![poison; n]).unwrap()
}

fn assert_exact<T: PartialEq + std::fmt::Debug>(got: &[T], want: &[T], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    let bad: Vec<String> = (0..got.len())
        .filter(|&i| got[i] != want[i])
        .take(6)
        .map(|i| format!("[{i}]: got {:?}, want {:?}", got[i], want[i]))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: elements differ:\n  {}",
        bad.join("\n  ")
    );
}

// ------------------------------------------------------------------------------ tests

#[test]
fn fir_filter_in_register_arrays() {
    let mut r = rng("fir8");
    on_every_backend(|dev| {
        for n in [1usize, 63, 65, 1000] {
            let x = floats(&mut r, n, -1.0, 1.0);
            let taps = floats(&mut r, 8, -0.5, 0.5);
            let want: Vec<f32> = (0..n)
                .map(|i| {
                    let mut acc = 0.0f32;
                    for (k, t) in taps.iter().enumerate() {
                        acc += t * x.get(i + k).copied().unwrap_or(0.0);
                    }
                    acc
                })
                .collect();
            let (xb, tb) = (dev.upload(&x).unwrap(), dev.upload(&taps).unwrap());
            let mut yb = poisoned(dev, n, POISON_F32);
            fir8::launch(dev, Grid::threads(n), &xb, &tb, &mut yb).unwrap();
            let got = yb.to_host().unwrap();
            let what = format!("{:?} n={n}", dev.kind());
            assert!(
                got.iter().all(|v| v.to_bits() != POISON_F32.to_bits()),
                "{what}: unwritten"
            );
            if dev.kind() == graphed::BackendKind::Wgpu {
                let w64: Vec<f64> = want.iter().map(|v| *v as f64).collect();
                let e = rel_err(&got, &w64);
                assert!(e <= 1e-6, "{what}: relative error {e:e}");
            } else {
                let (g, w): (Vec<u32>, Vec<u32>) = (
                    got.iter().map(|v| v.to_bits()).collect(),
                    want.iter().map(|v| v.to_bits()).collect(),
                );
                assert_exact(&g, &w, &what);
            }
        }
    });
}

#[test]
fn per_invocation_sort_in_a_register_array() {
    let mut r = rng("sort8");
    on_every_backend(|dev| {
        for groups in [1usize, 9, 130] {
            let n = groups * 8;
            let x: Vec<i32> = (0..n).map(|_| r.random()).collect();
            let mut want = x.clone();
            want.chunks_mut(8).for_each(|c| c.sort());
            let xb = dev.upload(&x).unwrap();
            let mut yb = poisoned(dev, n, POISON_U32 as i32);
            sort8::launch(dev, Grid::threads(groups), &xb, &mut yb).unwrap();
            assert_exact(
                &yb.to_host().unwrap(),
                &want,
                &format!("{:?} n={n}", dev.kind()),
            );
        }
    });
}

fn lookup_ref(v: u32) -> u32 {
    let table = [7u32, 11, 13, 17, 19, 23, 29, 31];
    let (mut counts, mut seen) = ([0u32; 4], [false; 4]);
    for k in 0..4 {
        let idx = ((v >> (k * 8)) % 8) as usize;
        counts[idx % 4] += table[idx];
        seen[idx % 4] = true;
    }
    (0..4).fold(0u32, |out, j| {
        out.wrapping_mul(31)
            .wrapping_add(counts[j])
            .wrapping_add(if seen[j] { 1000 } else { 0 })
    })
}

#[test]
fn run_time_indices_lists_len_and_bool_arrays() {
    let mut r = rng("lookup");
    on_every_backend(|dev| {
        let n = 777;
        let x: Vec<u32> = (0..n).map(|_| r.random()).collect();
        let want: Vec<u32> = x.iter().map(|&v| lookup_ref(v)).collect();
        let xb = dev.upload(&x).unwrap();
        let mut yb = poisoned(dev, n, POISON_U32);
        lookup::launch(dev, Grid::threads(n), &xb, &mut yb).unwrap();
        assert_exact(&yb.to_host().unwrap(), &want, &format!("{:?}", dev.kind()));
    });
}

#[test]
fn out_of_range_array_index_faults_on_the_host_and_is_zero_or_dropped_on_gpus() {
    let mut r = rng("array_oob");
    on_every_backend(|dev| {
        let what = format!("{:?}", dev.kind());
        // In range: the write lands and reads back.
        let n = 100;
        let ix: Vec<u32> = (0..n).map(|_| r.random_range(0..4)).collect();
        let ib = dev.upload(&ix).unwrap();
        let mut yb = poisoned(dev, n * 5, POISON_U32);
        array_oob::launch(dev, Grid::threads(n), &ib, &mut yb).unwrap();
        let mut want = Vec::new();
        for &j in &ix {
            let mut a = [5u32, 6, 7, 8];
            a[j as usize] = 100;
            want.push(100);
            want.extend(a);
        }
        assert_exact(&yb.to_host().unwrap(), &want, &format!("{what}: in range"));
        // Out of range for some invocations.
        let ix: Vec<u32> = (0..n)
            .map(|i| {
                if i % 3 == 0 {
                    r.random_range(4..u32::MAX)
                } else {
                    r.random_range(0..4)
                }
            })
            .collect();
        let ib = dev.upload(&ix).unwrap();
        let mut yb = poisoned(dev, n * 5, POISON_U32);
        let res = array_oob::launch(dev, Grid::threads(n), &ib, &mut yb);
        if dev.kind() == graphed::BackendKind::Host {
            match res {
                Err(graphed::Error::Fault(f)) => {
                    assert_eq!(f.kernel, "array_oob");
                    assert_eq!(f.target, "a");
                    assert_eq!(
                        f.kind,
                        graphed::FaultKind::OutOfBounds {
                            index: ix[0],
                            len: 4
                        },
                        "{f}"
                    );
                    assert_eq!(
                        f.to_string(),
                        format!(
                            "kernel `array_oob`: index {} is out of bounds for `a` of length 4",
                            ix[0]
                        )
                    );
                }
                other => panic!("want an OutOfBounds fault, got {other:?}"),
            }
        } else {
            res.unwrap();
            let mut want = Vec::new();
            for &j in &ix {
                let mut a = [5u32, 6, 7, 8];
                if let Some(e) = a.get_mut(j as usize) {
                    *e = 100;
                    want.push(100);
                } else {
                    want.push(0);
                }
                want.extend(a);
            }
            assert_exact(
                &yb.to_host().unwrap(),
                &want,
                &format!("{what}: out of range"),
            );
        }
    });
}

#[test]
fn privatised_histogram_with_workgroup_atomics() {
    let mut r = rng("histogram_private");
    on_every_backend(|dev| {
        for (n, groups) in [(1usize, 1u32), (1000, 3), (50_000, 16)] {
            let x: Vec<u32> = (0..n).map(|_| r.random()).collect();
            let start: Vec<u32> = (0..64).map(|_| r.random_range(0..1000)).collect();
            let mut want = start.clone();
            for v in &x {
                want[(v % 64) as usize] += 1;
            }
            let xb = dev.upload(&x).unwrap();
            let mut bins = dev.upload(&start).unwrap();
            histogram_private::launch(dev, Grid::workgroups(groups), &xb, &mut bins).unwrap();
            assert_exact(
                &bins.to_host().unwrap(),
                &want,
                &format!("{:?} n={n} groups={groups}", dev.kind()),
            );
        }
    });
}

#[test]
fn every_atomic_on_workgroup_memory() {
    let mut r = rng("shared_atomics");
    on_every_backend(|dev| {
        let groups = 5usize;
        let n = groups * 32;
        let x: Vec<i32> = (0..n).map(|_| r.random_range(-1000..1000)).collect();
        let xb = dev.upload(&x).unwrap();
        let mut out = poisoned(dev, groups * 8, POISON_U32 as i32);
        let mut olds = poisoned(dev, n, POISON_U32 as i32);
        shared_atomics::launch(
            dev,
            Grid::workgroups(groups as u32),
            &xb,
            &mut out,
            &mut olds,
        )
        .unwrap();
        let mut want = Vec::new();
        for g in x.chunks(32) {
            // Memory starts zeroed, so max/min include the zero.
            let max = g.iter().copied().fold(0, i32::max);
            let min = g.iter().copied().fold(0, i32::min);
            let sum = g.iter().copied().fold(0i32, i32::wrapping_add);
            let or = (0..32).fold(0i32, |a, l| a | (1i32 << (l % 31)));
            let xor = g.iter().fold(0, |a, v| a ^ v);
            want.extend([max, min, sum, sum.wrapping_neg(), or, xor, 9, 32]);
        }
        let what = format!("{:?}", dev.kind());
        assert_exact(&out.to_host().unwrap(), &want, &what);
        assert!(
            olds.to_host().unwrap().iter().all(|&o| o == 9),
            "{what}: exchange returned the stored 9"
        );
    });
}

fn values_ref(v: u32) -> [u32; 4] {
    let t = v.wrapping_mul(3);
    let a = t ^ (t >> 5);
    let (mut n, mut c) = (0u32, v);
    while c >= 16 && n < 100 {
        c = if c % 2 == 0 { c / 2 } else { c / 4 + 1 };
        n += 1;
    }
    let b = if v == 0 {
        8
    } else {
        let s = v.trailing_zeros() + 1;
        s * s
    };
    [a, n, b, a % 1000 + 1]
}

#[test]
fn blocks_and_loops_that_yield_values() {
    let mut r = rng("values");
    on_every_backend(|dev| {
        let n = 500;
        let mut x: Vec<u32> = (0..n).map(|_| r.random()).collect();
        x[0] = 0;
        x[1] = 1 << 31;
        let want: Vec<u32> = x.iter().flat_map(|&v| values_ref(v)).collect();
        let xb = dev.upload(&x).unwrap();
        let mut yb = poisoned(dev, n * 4, POISON_U32);
        values::launch(dev, Grid::threads(n), &xb, &mut yb).unwrap();
        assert_exact(&yb.to_host().unwrap(), &want, &format!("{:?}", dev.kind()));
    });
}
