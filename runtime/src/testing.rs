//! Helpers for tests that run one body on every backend available, as graphed's own tests do
//! (the test-only `testing` feature).

use crate::backend::BackendKind;
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
