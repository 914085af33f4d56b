//! Helpers of the layer tests (those of the kernel tests, `kernels/tests/kernels/common.rs`):
//! random inputs, poisoned outputs, f64 references, tolerances.

use std::sync::Mutex;

use graphed_runtime::{BackendKind, Buffer, Device};
use rand::{Rng, SeedableRng};

/// [`graphed_runtime::testing::on_every_backend`], with a wgpu device no other running test
/// uses: when test threads share the process's wgpu device, a readback can fail with
/// "readback did not complete" (`poll(Wait)` returns while another thread's poll delivers
/// the map callback; reported to the runtime's owner). Devices are pooled, so each keeps
/// its compiled pipelines for the next test.
pub fn on_every_backend(mut f: impl FnMut(&Device)) {
    static POOL: Mutex<Vec<Device>> = Mutex::new(Vec::new());
    graphed_runtime::testing::on_every_backend(|shared| {
        if shared.kind() != BackendKind::Wgpu {
            return f(shared);
        }
        let pooled = POOL.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let own = pooled
            .unwrap_or_else(|| Device::open_new(BackendKind::Wgpu).expect("a second wgpu device"));
        f(&own);
        POOL.lock().unwrap_or_else(|p| p.into_inner()).push(own);
    })
}

/// A fresh random source; the seed is printed so a failure can be reproduced.
pub fn rng(test: &str) -> rand::rngs::StdRng {
    let seed = std::env::var("GRAPHED_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("{test}: seed {seed} (set GRAPHED_SEED to reproduce)");
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// `n` uniform floats in `[lo, hi)`.
pub fn floats(rng: &mut impl Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// A buffer of `n` NaNs: an element a kernel fails to write stays NaN and fails the check.
pub fn poisoned(dev: &Device, n: usize) -> Buffer<f32> {
    dev.upload(&vec![f32::NAN; n]).unwrap()
}

/// ‖out − ref‖ / ‖ref‖ in f64 (the absolute norm when `ref` is zero); NaN anywhere is ∞.
pub fn rel_err(out: &[f32], reference: &[f64]) -> f64 {
    assert_eq!(out.len(), reference.len(), "lengths differ");
    let mut num = 0.0f64;
    let mut den = 0.0f64;
    for (o, r) in out.iter().zip(reference) {
        if o.is_nan() != r.is_nan() {
            return f64::INFINITY;
        }
        if r.is_nan() {
            continue;
        }
        if r.is_infinite() {
            if *o as f64 != *r {
                return f64::INFINITY;
            }
            continue;
        }
        num += (*o as f64 - r).powi(2);
        den += r * r;
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

/// Asserts `rel_err(out, reference) <= tol`, naming the case.
#[track_caller]
pub fn assert_close(case: &str, out: &[f32], reference: &[f64], tol: f64) {
    assert_close_floor(case, out, reference, tol, 0.0);
}

/// Asserts `‖out − ref‖ ≤ tol · max(‖ref‖, floor·√n)`: for functions whose values cross
/// zero (GELU′, `ln` near 1), where the relative error of a few near-zero values says nothing
/// about the kernel, `floor` is the root-mean-square magnitude below which errors are judged
/// absolutely.
#[track_caller]
pub fn assert_close_floor(case: &str, out: &[f32], reference: &[f64], tol: f64, floor: f64) {
    let norm = reference
        .iter()
        .filter(|r| r.is_finite())
        .map(|r| r * r)
        .sum::<f64>()
        .sqrt();
    let den = norm.max(floor * (reference.len() as f64).sqrt());
    // rel_err is ‖out − ref‖/‖ref‖ (or ‖out − ref‖ when ‖ref‖ = 0), ∞ on a NaN mismatch.
    let diff = rel_err(out, reference) * if norm > 0.0 { norm } else { 1.0 };
    let e = if den > 0.0 { diff / den } else { diff };
    if std::env::var_os("KERNELS_REPORT_ERRORS").is_some() {
        eprintln!("error-report\t{case}\t{e:.3e}\t{tol:.0e}");
    }
    assert!(
        e <= tol,
        "{case}: relative error {e:.3e} > {tol:.0e}\n  out[..4] = {:?}\n  ref[..4] = {:?}",
        &out[..out.len().min(4)],
        &reference[..reference.len().min(4)]
    );
}
