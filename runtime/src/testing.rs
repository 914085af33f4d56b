//! Helpers for tests that run one body on every backend available, as graphed's own tests do
//! (the test-only `testing` feature).

use std::sync::Mutex;

use rand::{Rng, SeedableRng};

use crate::backend::BackendKind;
use crate::buffer::Buffer;
use crate::device::{Device, Required};

/// Every backend this process can use: host always; wgpu where an adapter exists; CUDA with
/// the feature and a driver. A backend listed in `GRAPHED_REQUIRE` that cannot be opened
/// panics, so a required GPU test fails instead of skipping.
///
/// `GRAPHED_TEST_BACKENDS` (e.g. `cuda`, or `host,wgpu`) narrows the list, e.g. to run only
/// the CUDA half of a suite under `compute-sanitizer`.
pub fn backends() -> Vec<Device> {
    let required = Required::from_env().expect("GRAPHED_REQUIRE is malformed");
    let only = std::env::var("GRAPHED_TEST_BACKENDS").ok();
    let wanted = |kind: BackendKind| {
        only.as_deref()
            .is_none_or(|l| l.split(',').any(|b| b.trim() == kind.name()))
    };
    let mut out = Vec::new();
    if wanted(BackendKind::Host) {
        out.push(Device::host());
    }
    for kind in [BackendKind::Wgpu, BackendKind::Cuda]
        .into_iter()
        .filter(|k| wanted(*k))
    {
        match Device::open(kind) {
            Ok(d) => out.push(d),
            Err(e) if required.requires(kind) => {
                panic!("{kind} is required by GRAPHED_REQUIRE but unavailable: {e}")
            }
            Err(e) => eprintln!("note: skipping {kind}: {e}"),
        }
    }
    out
}

/// Runs `f` on every backend; a failure names the backend (and adapter) it happened on.
pub fn on_every_backend(mut f: impl FnMut(&Device)) {
    for dev in backends() {
        let name = format!("{} [{}]", dev.kind(), dev.adapter());
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&dev))) {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("on backend {name}: {msg}");
        }
    }
}

/// Whether NVRTC checks must run (`GRAPHED_REQUIRE` lists `nvrtc`); panics when required and
/// missing, returns false (skip) when neither available nor required.
pub fn nvrtc_enabled() -> bool {
    let required = Required::from_env()
        .expect("GRAPHED_REQUIRE is malformed")
        .nvrtc;
    match (crate::nvrtc::available(), required) {
        (true, _) => true,
        (false, true) => panic!("nvrtc is required by GRAPHED_REQUIRE but libnvrtc cannot be loaded (pip install nvidia-cuda-nvrtc-cu12 and add nvidia/cuda_nvrtc/lib to LD_LIBRARY_PATH)"),
        (false, false) => {
            eprintln!("note: skipping NVRTC checks: libnvrtc not found");
            false
        }
    }
}

// ------------------------------------------------------- inputs, references, tolerances

/// [`on_every_backend`], with a wgpu device no other running test
/// uses: when test threads share the process's wgpu device, a readback can fail with
/// "readback did not complete" (`poll(Wait)` returns while another thread's poll delivers
/// the map callback; reported to the runtime's owner). Devices are pooled, so each keeps
/// its compiled pipelines for the next test.
pub fn on_every_backend_own_wgpu(mut f: impl FnMut(&Device)) {
    static POOL: Mutex<Vec<Device>> = Mutex::new(Vec::new());
    on_every_backend(|shared| {
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
