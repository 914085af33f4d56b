//! cuBLAS for the CUDA backend: one handle per device, bound to the backend's stream, with a
//! workspace the backend owns.
//!
//! Set up for stream capture: since CUDA 12.2 cuBLAS takes its workspace with
//! `cudaMallocAsync` when none is set, which inside a capture becomes a graph-owned
//! allocation, against the rule that nothing is allocated inside a capture (pytorch/pytorch
//! #83461 and #113994 describe both behaviours). So the handle gets an explicit workspace,
//! and the census rejects any allocation node that appears anyway. `α` and `β` are read from
//! device memory (pointer mode device), so an accumulate flag that changes per step changes
//! `β` without a recapture. Math mode is `CUBLAS_DEFAULT_MATH`: fp32 products stay fp32 (no
//! TF32), as the PyTorch reference sets `allow_tf32 = False`, unless a product opts in
//! ([`Math::Tf32`]: `cublasGemmEx` with `CUBLAS_COMPUTE_32F_FAST_TF32`). Half-precision
//! products are `cublasGemmEx` with `CUBLAS_COMPUTE_32F` (f32 accumulation, tensor cores) and
//! f32 `α`/`β` (the scale type of that compute type), so the same device-side `α`/`β` serve.

use cudarc::cublas::{result as blas, sys as bsys};
use cudarc::driver::sys;

use super::cuda::CudaMem;
use crate::blas::{GemmShape, Math};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// Workspace bytes: NVIDIA recommends 32 MiB for Hopper (cuBLAS documentation,
/// `cublasSetWorkspace`); smaller GPUs need less and ignore the rest.
pub(crate) const WORKSPACE_BYTES: usize = 32 << 20;

pub(crate) struct Cublas {
    handle: bsys::cublasHandle_t,
    _workspace: CudaMem,
}

// SAFETY: the handle is used only under the CUDA backend's lock, with its context bound.
unsafe impl Send for Cublas {}
// SAFETY: as above.
unsafe impl Sync for Cublas {}

fn fail(what: &str, e: blas::CublasError) -> Error {
    Error::Device {
        backend: "cuda",
        reason: format!("cuBLAS {what}: {e}"),
    }
}

impl Cublas {
    /// Whether `libcublas` can be loaded (cudarc panics on a missing library, so ask first).
    pub(crate) fn present() -> bool {
        // SAFETY: only probes whether the library can be opened.
        unsafe { bsys::is_culib_present() }
    }

    /// A handle on `stream` with `workspace` (at least [`WORKSPACE_BYTES`]). The caller has
    /// bound the context.
    pub(crate) fn open(stream: sys::CUstream, workspace: CudaMem) -> Result<Cublas> {
        let handle = blas::create_handle().map_err(|e| fail("create", e))?;
        let this = Cublas {
            handle,
            _workspace: workspace,
        };
        // SAFETY: the handle was just created; the stream outlives it (the backend destroys
        // the handle first); the workspace is owned by `this` and freed after the handle.
        unsafe {
            blas::set_stream(handle, stream as bsys::cudaStream_t)
                .map_err(|e| fail("set stream", e))?;
            // After the stream: cublasSetStream resets the workspace to the default pool.
            bsys::cublasSetWorkspace_v2(
                handle,
                this._workspace.ptr as *mut std::ffi::c_void,
                WORKSPACE_BYTES,
            )
            .result()
            .map_err(|e| fail("set workspace", e))?;
            bsys::cublasSetPointerMode_v2(
                handle,
                bsys::cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE,
            )
            .result()
            .map_err(|e| fail("set pointer mode", e))?;
            bsys::cublasSetMathMode(handle, bsys::cublasMath_t::CUBLAS_DEFAULT_MATH)
                .result()
                .map_err(|e| fail("set math mode", e))?;
        }
        Ok(this)
    }

    /// Issues the row-major product `C = op(A)·op(B)·α + C·β` on the handle's stream, `α` and
    /// `β` read from device memory at `alpha` and `alpha + 4`.
    ///
    /// cuBLAS is column-major, and a row-major `r × c` matrix is its transpose there, so the
    /// row-major `C = op(A)·op(B)` is the column-major `Cᵀ = op(B)ᵀ·op(A)ᵀ`: B goes first,
    /// transposed exactly when it is stored transposed, with `ldb = k` or `n`.
    ///
    /// # Safety
    /// `a`, `b`, `c` must point at `m·k`, `k·n`, `m·n` elements (of the shape's types) of
    /// live device memory in the handle's context, `c` overlapping neither, and `alpha` at
    /// two floats.
    pub(crate) unsafe fn gemm(
        &self,
        g: &GemmShape,
        alpha: sys::CUdeviceptr,
        a: sys::CUdeviceptr,
        b: sys::CUdeviceptr,
        c: sys::CUdeviceptr,
    ) -> Result<()> {
        let op = |t: bool| {
            if t {
                bsys::cublasOperation_t::CUBLAS_OP_T
            } else {
                bsys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        // Sizes were checked to fit in i32 when the product was recorded.
        let (m, n, k) = (g.m as i32, g.n as i32, g.k as i32);
        let ldb = if g.tb { k } else { n };
        let lda = if g.ta { m } else { k };
        let err = |e: blas::CublasError| Error::Launch {
            kernel: "sgemm",
            reason: format!("cuBLAS: {e}"),
        };
        let t = g.types;
        if t.input == DType::F32 && t.math == Math::F32 {
            // SAFETY: the caller's contract; pointer mode is device, so α and β are read on
            // the stream when the product runs (or replays).
            return unsafe {
                blas::sgemm(
                    self.handle,
                    op(g.tb),
                    op(g.ta),
                    n,
                    m,
                    k,
                    alpha as *const f32,
                    b as *const f32,
                    ldb,
                    a as *const f32,
                    lda,
                    (alpha + 4) as *const f32,
                    c as *mut f32,
                    n,
                )
            }
            .map_err(err);
        }
        let compute = match t.math {
            Math::F32 => bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            Math::Tf32 => bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        };
        // SAFETY: as above, with `a`, `b` of `t.input` and `c` of `t.output` elements; the
        // scale type of a 32F compute type is f32, so α and β are the same two floats.
        unsafe {
            blas::gemm_ex(
                self.handle,
                op(g.tb),
                op(g.ta),
                n,
                m,
                k,
                alpha as *const std::ffi::c_void,
                b as *const std::ffi::c_void,
                data_type(t.input),
                ldb,
                a as *const std::ffi::c_void,
                data_type(t.input),
                lda,
                (alpha + 4) as *const std::ffi::c_void,
                c as *mut std::ffi::c_void,
                data_type(t.output),
                n,
                compute,
                bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(err)
    }
}

/// cuBLAS's name for an element type of a product.
fn data_type(d: DType) -> bsys::cudaDataType {
    match d {
        DType::F16 => bsys::cudaDataType::CUDA_R_16F,
        DType::BF16 => bsys::cudaDataType::CUDA_R_16BF,
        // Checked when recorded: products take f32, f16 and bf16 only.
        _ => bsys::cudaDataType::CUDA_R_32F,
    }
}

impl Drop for Cublas {
    fn drop(&mut self) {
        // SAFETY: destroyed once, with the context bound by the backend's drop.
        unsafe {
            let _ = blas::destroy_handle(self.handle);
        }
    }
}
