//! Test helpers: run one test body on every available backend, naming the backend in failures.
#![allow(dead_code)]

pub mod steps;

#[allow(unused_imports)]
pub use graphed::testing::{backends, nvrtc_enabled, on_every_backend};

/// A fresh random source; the seed is printed so a failure can be reproduced.
pub fn rng(test: &str) -> rand::rngs::StdRng {
    use rand::SeedableRng;
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

/// The host emulating `dev`'s subgroups: `(size, host)`, or `None` (noted) where `dev` has no
/// fixed subgroup size.
pub fn subgroup_host(dev: &graphed::Device) -> Option<(u32, graphed::Device)> {
    let Some(size) = dev.subgroup_size() else {
        eprintln!(
            "note: {} has no fixed subgroup size; skipped",
            dev.adapter()
        );
        return None;
    };
    Some((
        size,
        graphed::Device::host_with_subgroup_size(size).unwrap(),
    ))
}

/// `n` uniform floats in `[lo, hi)`.
pub fn floats(rng: &mut impl rand::Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// ‖a − b‖ / ‖b‖ in f64 (the absolute norm when `b` is zero).
pub fn rel_err(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let num: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - y).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

/// Whether every element is bitwise equal.
pub fn bitwise_eq(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Runs test `name` of this test binary alone in a child process with `set` in its
/// environment and `unset` removed; returns (exited successfully, stdout, stderr). For cases
/// that abort, poison a device for the process, or read what the library prints.
pub fn run_child(name: &str, set: &[(&str, &str)], unset: &[&str]) -> (bool, String, String) {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    for (k, v) in set {
        cmd.env(k, v);
    }
    for k in unset {
        cmd.env_remove(k);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether a CUDA device opens; `false` (skip) only when `GRAPHED_REQUIRE` does not list cuda.
pub fn cuda_available() -> bool {
    if graphed::Device::open(graphed::BackendKind::Cuda).is_ok() {
        return true;
    }
    assert!(
        !graphed::Required::from_env().unwrap().cuda,
        "cuda is required but unavailable"
    );
    false
}

/// Asserts that both WGSL variants (plain and checked) of every kernel parse and validate
/// with naga.
pub fn assert_wgsl_valid(kernels: &[&graphed::KernelDef]) {
    use naga::valid::{Capabilities, ValidationFlags, Validator};
    let mut failures = Vec::new();
    for k in kernels {
        for (src, variant) in [(k.wgsl, ""), (k.checked.wgsl, " (checked)")] {
            let result = naga::front::wgsl::parse_str(src)
                .map_err(|e| e.emit_to_string(src))
                .and_then(|m| {
                    Validator::new(ValidationFlags::all(), Capabilities::all())
                        .validate(&m)
                        .map(|_| ())
                        .map_err(|e| e.emit_to_string(src))
                });
            if let Err(e) = result {
                failures.push(format!("{}{variant}: {e}", k.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Asserts that both CUDA C variants of every kernel compile with NVRTC (skipped where NVRTC
/// is absent and not required).
pub fn assert_cuda_compiles(kernels: &[&graphed::KernelDef]) {
    if !nvrtc_enabled() {
        return;
    }
    let mut failures = Vec::new();
    for k in kernels {
        for (r, src, variant) in [
            (graphed::nvrtc::compile(k, "compute_80"), k.cuda, ""),
            (
                graphed::nvrtc::compile_checked(k, "compute_80"),
                k.checked.cuda,
                " (checked)",
            ),
        ] {
            if let Err(e) = r {
                failures.push(format!("{}{variant}: {e}\n{src}", k.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
