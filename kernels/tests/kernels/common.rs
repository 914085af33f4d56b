//! Helpers of the kernel tests: random inputs, poisoned outputs, f64 references, tolerances.

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

/// Odd sizes: not multiples of a workgroup or tile.
pub const SIZES: &[usize] = &[1, 7, 63, 65, 1000, 1023, 4097];

/// The per-invocation arrays of `source` (`float acc[16] = {};` in CUDA C, `var acc: array<f32, 16>`
/// in WGSL) and every index each is read or written at.
fn array_indices(source: &str, cuda: bool) -> Vec<(String, String)> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut names = Vec::new();
    for line in source.lines().map(str::trim) {
        let name = if cuda {
            ["float ", "int ", "gd_u32 ", "bool "]
                .iter()
                .find_map(|t| line.strip_prefix(t))
                .filter(|rest| rest.contains("] = {") || rest.ends_with("];"))
                .and_then(|rest| rest.split_once('['))
                .map(|(name, _)| name)
        } else {
            line.strip_prefix("var ")
                .filter(|rest| rest.contains(": array<"))
                .and_then(|rest| rest.split_once(':'))
                .map(|(name, _)| name)
        };
        if let Some(name) = name.filter(|n| n.chars().all(ident)) {
            names.push(name.to_string());
        }
    }
    let mut uses = Vec::new();
    for name in &names {
        let pat = format!("{name}[");
        for (at, _) in source.match_indices(&pat) {
            if source[..at].chars().next_back().is_some_and(ident) {
                continue; // a longer name ending in this one
            }
            let rest = &source[at + pat.len()..];
            let index = &rest[..rest.find(']').expect("an index ends with `]`")];
            uses.push((name.clone(), index.to_string()));
        }
    }
    uses
}

/// Asserts that `kernel`'s emitted CUDA C and WGSL declare at least `arrays` per-invocation
/// arrays and index every one only by literals (registers, not local memory).
pub fn assert_array_indices_literal(kernel: &str, cuda: &str, wgsl: &str, arrays: usize) {
    for (target, source, is_cuda) in [("CUDA", cuda, true), ("WGSL", wgsl, false)] {
        let uses = array_indices(source, is_cuda);
        let mut names: Vec<&str> = uses.iter().map(|(n, _)| n.as_str()).collect();
        names.sort();
        names.dedup();
        assert!(
            names.len() >= arrays,
            "{kernel} {target}: expected at least {arrays} per-invocation arrays, found {names:?}"
        );
        for (name, index) in &uses {
            let digits = index.strip_suffix('u').unwrap_or(index);
            assert!(
                !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()),
                "{kernel} {target}: {name}[{index}] is not a literal index"
            );
        }
    }
}
