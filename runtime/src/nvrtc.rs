//! CUDA C → PTX with NVRTC (dynamically loaded; needs no GPU). Used by the CUDA backend and by
//! the tests that check every kernel's CUDA C on machines without a GPU.

use crate::error::{Error, Result};
use crate::kernel::KernelDef;

/// Whether an NVRTC library can be loaded (the CUDA toolkit, or the PyPI package
/// `nvidia-cuda-nvrtc-cu12` with its `lib` folder on `LD_LIBRARY_PATH`).
pub fn available() -> bool {
    // SAFETY: only probes whether the shared library can be opened.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compiles a kernel's CUDA C for `arch` (e.g. `"sm_90"` or `"compute_80"`) with
/// `--fmad=false`, so `a * b + c` is never silently contracted into an FMA.
pub fn compile(kernel: &KernelDef, arch: &str) -> Result<String> {
    compile_source(kernel.name, kernel.cuda, arch)
}

/// Compiles a kernel's checked CUDA C ([`crate::CheckedForm::cuda`]) as [`compile`] does.
pub fn compile_checked(kernel: &KernelDef, arch: &str) -> Result<String> {
    compile_source(kernel.name, kernel.checked.cuda, arch)
}

/// Compiles CUDA C `source` (named `kernel` in errors) as [`compile`] does.
pub fn compile_source(kernel: &'static str, source: &str, arch: &str) -> Result<String> {
    if !available() {
        return Err(Error::Unavailable {
            backend: "nvrtc",
            reason: "libnvrtc not found: install the CUDA toolkit, or `pip install nvidia-cuda-nvrtc-cu12` and add its nvidia/cuda_nvrtc/lib folder to LD_LIBRARY_PATH".into(),
        });
    }
    let opts = cudarc::nvrtc::CompileOptions {
        fmad: Some(false),
        arch: None,
        options: vec![format!("--gpu-architecture={arch}")],
        name: Some(format!("{kernel}.cu")),
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(source, opts).map_err(|e| Error::Compile {
        kernel,
        backend: "nvrtc",
        log: e.to_string(),
    })?;
    Ok(ptx.to_src())
}
