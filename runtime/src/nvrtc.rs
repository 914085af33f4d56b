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
    compile_variant(kernel, arch, false, false)
}

/// Compiles a kernel's checked CUDA C ([`crate::CheckedForm::cuda`]) as [`compile`] does.
pub fn compile_checked(kernel: &KernelDef, arch: &str) -> Result<String> {
    compile_variant(kernel, arch, true, false)
}

/// Compiles a kernel's plain or `checked` CUDA C as [`compile`] does; `programmatic`: the
/// form for programmatic dependent launch (defines `GRAPHED_PDL`, so on sm_90 and later the
/// kernel waits for its predecessor grid before touching memory, `griddepcontrol`). Kernels
/// launched otherwise are compiled without it: the two instructions are not free (on the
/// H200 a small elementwise kernel ran 2 more instructions per warp and 1–3% longer).
pub fn compile_variant(
    kernel: &KernelDef,
    arch: &str,
    checked: bool,
    programmatic: bool,
) -> Result<String> {
    let source = if checked {
        kernel.checked.cuda
    } else {
        kernel.cuda
    };
    let defines: &[&str] = if programmatic { &["GRAPHED_PDL"] } else { &[] };
    compile_with(kernel.name, source, arch, defines)
}

/// Compiles CUDA C `source` (named `kernel` in errors) as [`compile`] does.
pub fn compile_source(kernel: &'static str, source: &str, arch: &str) -> Result<String> {
    compile_with(kernel, source, arch, &[])
}

/// [`compile_source`] with preprocessor `defines` (`-D NAME` each).
fn compile_with(
    kernel: &'static str,
    source: &str,
    arch: &str,
    defines: &[&str],
) -> Result<String> {
    if !available() {
        return Err(Error::Unavailable {
            backend: "nvrtc",
            reason: "libnvrtc not found: install the CUDA toolkit, or `pip install nvidia-cuda-nvrtc-cu12` and add its nvidia/cuda_nvrtc/lib folder to LD_LIBRARY_PATH".into(),
        });
    }
    let opts = cudarc::nvrtc::CompileOptions {
        fmad: Some(false),
        arch: None,
        options: std::iter::once(format!("--gpu-architecture={arch}"))
            .chain(defines.iter().map(|d| format!("-D{d}")))
            .collect(),
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
