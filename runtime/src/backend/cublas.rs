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

use std::collections::HashMap;
use std::sync::Mutex;

use cudarc::cublas::{result as blas, sys as bsys};
use cudarc::cublaslt::{result as ltr, sys as lt};
use cudarc::driver::sys;

use super::cuda::CudaMem;
use crate::blas::{Fused, GemmShape, Math};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// Workspace bytes: NVIDIA recommends 32 MiB for Hopper (cuBLAS documentation,
/// `cublasSetWorkspace`); smaller GPUs need less and ignore the rest.
pub(crate) const WORKSPACE_BYTES: usize = 32 << 20;

pub(crate) struct Cublas {
    handle: bsys::cublasHandle_t,
    stream: sys::CUstream,
    /// cuBLASLt, for products with a fused epilogue (`None` where it cannot be loaded).
    /// Dropped before the workspace.
    pub(crate) lt: Option<Lt>,
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
            stream,
            lt: Lt::open(),
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

impl Cublas {
    /// Issues the product `g` with its fused epilogue through cuBLASLt on the handle's
    /// stream, sharing cuBLAS's workspace (the plan orders every library call after the
    /// last, so they never run at once), `α`, `β` at `alpha`, `alpha + 4` and the vector at
    /// `v`.
    ///
    /// # Safety
    /// As [`Cublas::gemm`], and `v` points at the epilogue's `f32` vector ([`Fused`]),
    /// overlapping no operand; every pointer is aligned to `align` bytes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn gemm_fused(
        &self,
        g: &GemmShape,
        align: usize,
        alpha: sys::CUdeviceptr,
        a: sys::CUdeviceptr,
        b: sys::CUdeviceptr,
        c: sys::CUdeviceptr,
        v: sys::CUdeviceptr,
    ) -> Result<()> {
        let err = |what: String| Error::Launch {
            kernel: "sgemm",
            reason: format!("cuBLASLt: {what}"),
        };
        let Some(lt) = &self.lt else {
            return Err(err("not loaded".into()));
        };
        let mut plans = lt.plans.lock().unwrap_or_else(|p| p.into_inner());
        let plan = plans
            .entry((*g, align))
            .or_insert_with(|| LtPlan::new(lt.handle, g, align));
        let Some(plan) = plan else {
            return Err(err(format!(
                "no algorithm for the {}×{}×{} product with a fused {}",
                g.m,
                g.n,
                g.k,
                g.fused.map_or("epilogue", Fused::name)
            )));
        };
        // SAFETY: the caller's contract; the descriptor is this plan's (under the lock), and
        // the driver reads the vector's address when the call is issued (or captured).
        unsafe {
            ltr::set_matmul_desc_attribute(
                plan.desc,
                lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                (&v as *const sys::CUdeviceptr).cast(),
                std::mem::size_of::<sys::CUdeviceptr>(),
            )
            .map_err(|e| err(format!("set the vector: {e}")))?;
            ltr::matmul(
                lt.handle,
                plan.desc,
                alpha as *const std::ffi::c_void,
                (alpha + 4) as *const std::ffi::c_void,
                b as *const std::ffi::c_void,
                plan.layouts[0],
                a as *const std::ffi::c_void,
                plan.layouts[1],
                c as *const std::ffi::c_void,
                plan.layouts[2],
                c as *mut std::ffi::c_void,
                plan.layouts[2],
                &plan.algo,
                self._workspace.ptr as *mut std::ffi::c_void,
                WORKSPACE_BYTES,
                self.stream as lt::cudaStream_t,
            )
        }
        .map_err(|e| err(e.to_string()))
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

/// cuBLASLt for products with a fused epilogue ([`Fused`]): one handle, and per shape and
/// alignment the descriptors and the algorithm its heuristic picked, made on first use and
/// kept, so an eager call and the recording of the same product run the same kernel.
pub(crate) struct Lt {
    handle: lt::cublasLtHandle_t,
    plans: Mutex<HashMap<(GemmShape, usize), Option<LtPlan>>>,
}

/// A fused product as cuBLASLt runs it.
struct LtPlan {
    desc: lt::cublasLtMatmulDesc_t,
    /// Layouts of cuBLASLt's `A` (our `B`), `B` (our `A`) and `C`/`D` (our `C`).
    layouts: [lt::cublasLtMatrixLayout_t; 3],
    algo: lt::cublasLtMatmulAlgo_t,
}

impl Drop for LtPlan {
    fn drop(&mut self) {
        // SAFETY: made once by `LtPlan::new`, destroyed once here.
        unsafe {
            let _ = ltr::destroy_matmul_desc(self.desc);
            for l in self.layouts {
                let _ = ltr::destroy_matrix_layout(l);
            }
        }
    }
}

fn lt_type(d: DType) -> lt::cudaDataType {
    match d {
        DType::F16 => lt::cudaDataType::CUDA_R_16F,
        DType::BF16 => lt::cudaDataType::CUDA_R_16BF,
        _ => lt::cudaDataType::CUDA_R_32F,
    }
}

impl LtPlan {
    /// The descriptors of `g` (its `fused` set) and the heuristic's first algorithm for
    /// operands at `align` bytes, or `None` where cuBLASLt has none.
    fn new(handle: lt::cublasLtHandle_t, g: &GemmShape, align: usize) -> Option<LtPlan> {
        let fused = g.fused?;
        let t = g.types;
        let compute = match t.math {
            Math::F32 => lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            Math::Tf32 => lt::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        };
        let desc = ltr::create_matmul_desc(compute, lt::cudaDataType::CUDA_R_32F).ok()?;
        // Row-major `C = op(A)·op(B)` is column-major `Cᵀ = op(B)ᵀ·op(A)ᵀ` (as for cuBLAS
        // above): cuBLASLt's `A` is our `B`, its `B` our `A`; stored matrices are their
        // column-major transposes.
        let (m, n, k) = (g.m as u64, g.n as u64, g.k as u64);
        let layout = |d: DType, rows: u64, cols: u64| {
            ltr::create_matrix_layout(lt_type(d), rows, cols, rows as i64).ok()
        };
        let b_lt = if g.tb { (k, n) } else { (n, k) };
        let a_lt = if g.ta { (m, k) } else { (k, m) };
        let layouts = match (
            layout(t.input, b_lt.0, b_lt.1),
            layout(t.input, a_lt.0, a_lt.1),
            layout(t.output, n, m),
        ) {
            (Some(x), Some(y), Some(z)) => [x, y, z],
            (x, y, z) => {
                // SAFETY: whatever was made is destroyed once, here.
                unsafe {
                    let _ = ltr::destroy_matmul_desc(desc);
                    for l in [x, y, z].into_iter().flatten() {
                        let _ = ltr::destroy_matrix_layout(l);
                    }
                }
                return None;
            }
        };
        let mut plan = LtPlan {
            desc,
            layouts,
            algo: lt::cublasLtMatmulAlgo_t { data: [0; 8] },
        };
        let epilogue = match fused {
            Fused::Bias => lt::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
            Fused::BiasRelu => lt::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS,
            Fused::BiasGrad => lt::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BGRADB,
        };
        let op = |t: bool| -> i32 { i32::from(t) }; // CUBLAS_OP_N = 0, CUBLAS_OP_T = 1
        use lt::cublasLtMatmulDescAttributes_t as A;
        // SAFETY: each attribute gets a value of its documented type and size.
        let set = unsafe {
            let attr = |a: A, p: *const std::ffi::c_void, size: usize| {
                ltr::set_matmul_desc_attribute(desc, a, p, size)
            };
            let mode = lt::cublasLtPointerMode_t::CUBLASLT_POINTER_MODE_DEVICE as i32;
            let (ta, tb) = (op(g.tb), op(g.ta));
            let bias_type = lt::cudaDataType::CUDA_R_32F as i32;
            attr(
                A::CUBLASLT_MATMUL_DESC_POINTER_MODE,
                (&mode as *const i32).cast(),
                4,
            )
            .and_then(|()| {
                attr(
                    A::CUBLASLT_MATMUL_DESC_TRANSA,
                    (&ta as *const i32).cast(),
                    4,
                )
            })
            .and_then(|()| {
                attr(
                    A::CUBLASLT_MATMUL_DESC_TRANSB,
                    (&tb as *const i32).cast(),
                    4,
                )
            })
            .and_then(|()| {
                attr(
                    A::CUBLASLT_MATMUL_DESC_EPILOGUE,
                    (&epilogue as *const lt::cublasLtEpilogue_t).cast(),
                    std::mem::size_of::<lt::cublasLtEpilogue_t>(),
                )
            })
            .and_then(|()| {
                attr(
                    A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                    (&bias_type as *const i32).cast(),
                    4,
                )
            })
        };
        if set.is_err() {
            return None;
        }
        let pref = ltr::create_matmul_pref().ok()?;
        let mut results = [lt::cublasLtMatmulHeuristicResult_t {
            algo: lt::cublasLtMatmulAlgo_t { data: [0; 8] },
            workspaceSize: 0,
            state: lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS,
            wavesCount: 0.0,
            reserved: [0; 4],
        }];
        let mut found = 0;
        use lt::cublasLtMatmulPreferenceAttributes_t as P;
        // SAFETY: attributes of their documented types; the layouts and descriptor are live;
        // `results` has room for the one algorithm asked for.
        let ok = unsafe {
            let pattr = |a: P, v: u64| {
                ltr::set_matmul_pref_attribute(pref, a, (&v as *const u64).cast(), 8)
            };
            let align32 = |a: P| {
                let v = align as u32;
                ltr::set_matmul_pref_attribute(pref, a, (&v as *const u32).cast(), 4)
            };
            let ok = pattr(
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                WORKSPACE_BYTES as u64,
            )
            .and_then(|()| align32(P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES))
            .and_then(|()| align32(P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES))
            .and_then(|()| align32(P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES))
            .and_then(|()| align32(P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES))
            .is_ok()
                && lt::cublasLtMatmulAlgoGetHeuristic(
                    handle,
                    desc,
                    plan.layouts[0],
                    plan.layouts[1],
                    plan.layouts[2],
                    plan.layouts[2],
                    pref,
                    1,
                    results.as_mut_ptr(),
                    &mut found,
                )
                .result()
                .is_ok();
            let _ = ltr::destroy_matmul_pref(pref);
            ok
        };
        if !ok || found < 1 || results[0].state.result().is_err() {
            return None;
        }
        plan.algo = results[0].algo;
        Some(plan)
    }
}

impl Lt {
    fn open() -> Option<Lt> {
        // SAFETY: only probes whether the library can be opened (cudarc panics otherwise).
        if !unsafe { lt::is_culib_present() } {
            return None;
        }
        let handle = ltr::create_handle().ok()?;
        Some(Lt {
            handle,
            plans: Mutex::new(HashMap::new()),
        })
    }

    /// Whether cuBLASLt runs `g` (its `fused` set) with operands at `align` bytes; asks its
    /// heuristic once per shape and alignment.
    pub(crate) fn supports(&self, g: &GemmShape, align: usize) -> bool {
        let mut plans = self.plans.lock().unwrap_or_else(|p| p.into_inner());
        plans
            .entry((*g, align))
            .or_insert_with(|| LtPlan::new(self.handle, g, align))
            .is_some()
    }
}

impl Drop for Lt {
    fn drop(&mut self) {
        self.plans
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        // SAFETY: destroyed once, after every plan made with it.
        unsafe {
            let _ = ltr::destroy_handle(self.handle);
        }
    }
}
