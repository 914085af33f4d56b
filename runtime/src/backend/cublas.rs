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

/// How many algorithms of cuBLASLt's heuristic a tuned product times.
const CANDIDATES: usize = 8;

/// How many algorithms the heuristic is asked for (a one-pass choice looks through them).
const HEURISTIC: usize = 32;

/// Timed runs of each candidate in a round (after two untimed ones in the first).
const TIMED_RUNS: usize = 5;

/// Rounds of timing over the candidates; each keeps its best.
const ROUNDS: usize = 3;

/// The first candidate (the heuristic's, in its order) is kept unless another's best round
/// is faster by more than this factor.
const FIRST_MARGIN: f32 = 1.02;

/// cuBLASLt: one handle, and per product shape and alignment the descriptors and the
/// algorithm it runs, made on first use (outside any capture) and kept, so an eager call and
/// the recording of the same product run the same kernel.
pub(crate) struct Lt {
    handle: lt::cublasLtHandle_t,
    plans: Mutex<HashMap<(GemmShape, usize), Option<LtPlan>>>,
}

/// A product as cuBLASLt runs it.
struct LtPlan {
    desc: lt::cublasLtMatmulDesc_t,
    /// Layouts of cuBLASLt's `A` (our `B`), `B` (our `A`) and `C`/`D` (our `C`).
    layouts: [lt::cublasLtMatrixLayout_t; 3],
    algo: lt::cublasLtMatmulAlgo_t,
    /// Workspace bytes `algo` uses (0: it touches nothing but its operands).
    workspace: usize,
    /// Whether the product fuses an epilogue with a vector (its address is set per call).
    fused: bool,
}

impl Drop for LtPlan {
    fn drop(&mut self) {
        // SAFETY: made once by `LtPlan::describe`, destroyed once here.
        unsafe {
            let _ = ltr::destroy_matmul_desc(self.desc);
            for l in self.layouts {
                let _ = ltr::destroy_matrix_layout(l);
            }
        }
    }
}

/// A 32-bit configuration attribute of cuBLASLt's algorithm `algo` (`-1` where it does not
/// say).
fn algo_config(
    algo: &lt::cublasLtMatmulAlgo_t,
    attr: lt::cublasLtMatmulAlgoConfigAttributes_t,
) -> i32 {
    let mut value = 0i32;
    let mut written = 0usize;
    // SAFETY: reads one documented 32-bit attribute of a live algorithm into `value`.
    let status = unsafe {
        lt::cublasLtMatmulAlgoConfigGetAttribute(
            algo,
            attr,
            (&mut value as *mut i32).cast(),
            4,
            &mut written,
        )
    };
    if status.result().is_ok() && written == 4 {
        value
    } else {
        -1
    }
}

/// The number of parts cuBLASLt's algorithm `algo` splits `k` into (1: one pass; -1 where it
/// does not say).
fn split_parts(algo: &lt::cublasLtMatmulAlgo_t) -> i32 {
    algo_config(
        algo,
        lt::cublasLtMatmulAlgoConfigAttributes_t::CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
    )
}

/// `bytes` bytes of elements of `dtype` with random values in `[-1, 1)` (a fixed sequence
/// per `seed`), as bytes: operands for timing candidates.
fn random_bits(dtype: DType, bytes: usize, seed: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ seed as u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    let mut out = Vec::with_capacity(bytes);
    while out.len() < bytes {
        let v = next();
        match dtype {
            DType::F16 => out.extend_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&half::bf16::from_f32(v).to_bits().to_le_bytes()),
            _ => out.extend_from_slice(&v.to_bits().to_le_bytes()),
        }
    }
    out.truncate(bytes);
    out
}

fn lt_type(d: DType) -> lt::cudaDataType {
    match d {
        DType::F16 => lt::cudaDataType::CUDA_R_16F,
        DType::BF16 => lt::cudaDataType::CUDA_R_16BF,
        _ => lt::cudaDataType::CUDA_R_32F,
    }
}

/// The row-major shape `(rows, cols)` of a product's `A`, `B` and `C` as stored.
fn stored(g: &GemmShape) -> [(usize, usize); 3] {
    [
        if g.ta { (g.k, g.m) } else { (g.m, g.k) },
        if g.tb { (g.n, g.k) } else { (g.k, g.n) },
        (g.m, g.n),
    ]
}

impl LtPlan {
    /// The descriptors of `g` and up to [`HEURISTIC`] algorithms cuBLASLt's heuristic offers
    /// for operands at `align` bytes, best first; `None` where it offers none.
    fn describe(
        handle: lt::cublasLtHandle_t,
        g: &GemmShape,
        align: usize,
    ) -> Option<(LtPlan, Vec<(lt::cublasLtMatmulAlgo_t, usize)>)> {
        let t = g.types;
        let compute = match t.math {
            Math::F32 => lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            Math::Tf32 => lt::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        };
        let desc = ltr::create_matmul_desc(compute, lt::cudaDataType::CUDA_R_32F).ok()?;
        // Row-major `C = op(A)·op(B)` is column-major `Cᵀ = op(B)ᵀ·op(A)ᵀ` (as for cuBLAS
        // above): cuBLASLt's `A` is our `B`, its `B` our `A`; a stored row-major `r × c`
        // matrix is a column-major `c × r` one with leading dimension `c`.
        let [sa, sb, sc] = stored(g);
        let layout = |d: DType, (r, c): (usize, usize)| {
            ltr::create_matrix_layout(lt_type(d), c as u64, r as u64, c as i64).ok()
        };
        let made = [
            layout(t.input, sb),
            layout(t.input, sa),
            layout(t.output, sc),
        ];
        let [Some(x), Some(y), Some(z)] = made else {
            // SAFETY: whatever was made is destroyed once, here.
            unsafe {
                let _ = ltr::destroy_matmul_desc(desc);
                for l in made.into_iter().flatten() {
                    let _ = ltr::destroy_matrix_layout(l);
                }
            }
            return None;
        };
        let plan = LtPlan {
            desc,
            layouts: [x, y, z],
            algo: lt::cublasLtMatmulAlgo_t { data: [0; 8] },
            workspace: 0,
            fused: g.fused.is_some(),
        };
        let epilogue = match g.fused {
            None => lt::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
            Some(Fused::Bias) => lt::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
            Some(Fused::BiasRelu) => lt::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS,
            Some(Fused::BiasGrad) => lt::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BGRADB,
        };
        use lt::cublasLtMatmulDescAttributes_t as A;
        // SAFETY: each attribute gets a value of its documented type and size.
        let set = unsafe {
            let attr = |a: A, p: *const std::ffi::c_void, size: usize| {
                ltr::set_matmul_desc_attribute(desc, a, p, size)
            };
            let int = |a: A, v: i32| attr(a, (&v as *const i32).cast(), 4);
            // CUBLAS_OP_N = 0, CUBLAS_OP_T = 1; cuBLASLt's `A` is our `B`.
            int(
                A::CUBLASLT_MATMUL_DESC_POINTER_MODE,
                lt::cublasLtPointerMode_t::CUBLASLT_POINTER_MODE_DEVICE as i32,
            )
            .and_then(|()| int(A::CUBLASLT_MATMUL_DESC_TRANSA, i32::from(g.tb)))
            .and_then(|()| int(A::CUBLASLT_MATMUL_DESC_TRANSB, i32::from(g.ta)))
            .and_then(|()| {
                attr(
                    A::CUBLASLT_MATMUL_DESC_EPILOGUE,
                    (&epilogue as *const lt::cublasLtEpilogue_t).cast(),
                    std::mem::size_of::<lt::cublasLtEpilogue_t>(),
                )
            })
            .and_then(|()| match g.fused {
                // An f32 vector is named; a 16-bit bias is `D`'s type, the library's default
                // (on the H200 cuBLASLt offered no ReLU-and-bias plan for a `bf16` `D` with
                // an `f32` bias).
                Some(_) if g.vector == DType::F32 => int(
                    A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                    lt::cudaDataType::CUDA_R_32F as i32,
                ),
                _ => Ok(()),
            })
        };
        if set.is_err() {
            return None;
        }
        let pref = ltr::create_matmul_pref().ok()?;
        let empty = lt::cublasLtMatmulHeuristicResult_t {
            algo: lt::cublasLtMatmulAlgo_t { data: [0; 8] },
            workspaceSize: 0,
            state: lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS,
            wavesCount: 0.0,
            reserved: [0; 4],
        };
        let mut results = [empty; HEURISTIC];
        let mut found = 0;
        use lt::cublasLtMatmulPreferenceAttributes_t as P;
        // SAFETY: attributes of their documented types; the layouts and descriptor are live;
        // `results` has room for the algorithms asked for.
        let ok = unsafe {
            let bytes = WORKSPACE_BYTES as u64;
            let align = align as u32;
            let u32_attr =
                |a: P| ltr::set_matmul_pref_attribute(pref, a, (&align as *const u32).cast(), 4);
            let ok = ltr::set_matmul_pref_attribute(
                pref,
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&bytes as *const u64).cast(),
                8,
            )
            .and_then(|()| u32_attr(P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES))
            .and_then(|()| u32_attr(P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES))
            .and_then(|()| u32_attr(P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES))
            .and_then(|()| u32_attr(P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES))
            .is_ok()
                && lt::cublasLtMatmulAlgoGetHeuristic(
                    handle,
                    desc,
                    plan.layouts[0],
                    plan.layouts[1],
                    plan.layouts[2],
                    plan.layouts[2],
                    pref,
                    HEURISTIC as i32,
                    results.as_mut_ptr(),
                    &mut found,
                )
                .result()
                .is_ok();
            let _ = ltr::destroy_matmul_pref(pref);
            ok
        };
        let algos: Vec<_> = results[..(found.max(0) as usize).min(HEURISTIC)]
            .iter()
            .filter(|r| r.state.result().is_ok())
            .map(|r| (r.algo, r.workspaceSize))
            .collect();
        if !ok || algos.is_empty() {
            return None;
        }
        Some((plan, algos))
    }
}

/// Device pointers of one product's operands: `α` (and `β` after it), `A`, `B`, `C` and the
/// fused epilogue's vector (any valid pointer without one).
#[derive(Clone, Copy)]
pub(crate) struct Operands {
    pub alpha: sys::CUdeviceptr,
    pub a: sys::CUdeviceptr,
    pub b: sys::CUdeviceptr,
    pub c: sys::CUdeviceptr,
    pub v: sys::CUdeviceptr,
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

impl Cublas {
    /// One line per cuBLASLt plan made: the shape, the operands' alignment and the chosen
    /// algorithm's id, tile id, split-K parts, reduction scheme and workspace bytes (or that
    /// the shape has no plan). Sorted.
    pub(crate) fn plans(&self) -> Vec<String> {
        use lt::cublasLtMatmulAlgoConfigAttributes_t as C;
        let Some(lt) = &self.lt else {
            return Vec::new();
        };
        let plans = lt.plans.lock().unwrap_or_else(|p| p.into_inner());
        let mut lines: Vec<String> = plans
            .iter()
            .map(|((g, align), plan)| {
                let what = format!(
                    "{}x{}x{} {}{}{}{} {}→{} align {align}",
                    g.m,
                    g.n,
                    g.k,
                    if g.ta { "t" } else { "n" },
                    if g.tb { "t" } else { "n" },
                    g.fused.map_or(String::new(), |f| match g.vector {
                        DType::F32 => format!(" +{}", f.name()),
                        v => format!(" +{}({})", f.name(), v.name()),
                    }),
                    match (g.tuned, g.one_pass) {
                        (true, _) => " tuned",
                        (false, true) => " one-pass",
                        _ => "",
                    },
                    g.types.input.name(),
                    g.types.output.name(),
                );
                match plan {
                    None => format!("{what}: no plan"),
                    Some(p) => format!(
                        "{what}: algo {} tile {} split {} reduction {} workspace {}",
                        algo_config(&p.algo, C::CUBLASLT_ALGO_CONFIG_ID),
                        algo_config(&p.algo, C::CUBLASLT_ALGO_CONFIG_TILE_ID),
                        split_parts(&p.algo),
                        algo_config(&p.algo, C::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                        p.workspace
                    ),
                }
            })
            .collect();
        lines.sort();
        lines
    }

    /// Makes, once per shape and alignment, the cuBLASLt plan of `g` (`g.fused`, `g.tuned` or
    /// `g.one_pass` set) for operands at `align` bytes, and returns the workspace bytes its
    /// algorithm uses, or `None` where there is no plan. A tuned shape takes the fastest of
    /// the heuristic's first candidates, each timed on temporaries of the product's sizes on
    /// the handle's stream; a one-pass shape the fastest of its one-pass candidates (timed
    /// alike); any other the heuristic's first. Without a plan a fused product
    /// has no route and an unfused one runs on cuBLAS.
    ///
    /// # Safety
    /// The handle's context is bound and the stream is not capturing (the caller holds the
    /// backend's lock outside a lowering).
    pub(crate) unsafe fn prepare(&self, g: &GemmShape, align: usize) -> Option<usize> {
        let lt = self.lt.as_ref()?;
        let mut plans = lt.plans.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = plans.get(&(*g, align)) {
            return p.as_ref().map(|p| p.workspace);
        }
        let plan = LtPlan::describe(lt.handle, g, align).and_then(|(mut plan, algos)| {
            let n = algos.len().min(CANDIDATES);
            (plan.algo, plan.workspace) = if g.tuned && n > 1 {
                // SAFETY: the caller's contract.
                unsafe { self.fastest(lt, &plan, g, &algos[..n]) }?
            } else if g.one_pass {
                // The fastest of the first one-pass candidates that run (timing also checks
                // that each runs), else the heuristic's first.
                let one: Vec<_> = algos
                    .iter()
                    .copied()
                    .filter(|(a, _)| split_parts(a) == 1)
                    .take(CANDIDATES)
                    .collect();
                // SAFETY: the caller's contract.
                (!one.is_empty())
                    .then(|| unsafe { self.fastest(lt, &plan, g, &one) })
                    .flatten()
                    .unwrap_or(algos[0])
            } else {
                algos[0]
            };
            Some(plan)
        });
        let made = plan.as_ref().map(|p| p.workspace);
        plans.insert((*g, align), plan);
        made
    }

    /// The fastest of `algos` for `plan`, timed on temporaries of random values in
    /// `[-1, 1)` (`None` where none ran). (Zeroed operands, as before, draw less power and
    /// ranked the candidates otherwise than inside a step.)
    ///
    /// # Safety
    /// As [`Cublas::prepare`].
    unsafe fn fastest(
        &self,
        lt: &Lt,
        plan: &LtPlan,
        g: &GemmShape,
        algos: &[(lt::cublasLtMatmulAlgo_t, usize)],
    ) -> Option<(lt::cublasLtMatmulAlgo_t, usize)> {
        use cudarc::driver::result as dr;
        let [sa, sb, sc] = stored(g);
        let (i, o) = (g.types.input.size(), g.types.output.size());
        let sizes = [
            8,
            sa.0 * sa.1 * i,
            sb.0 * sb.1 * i,
            sc.0 * sc.1 * o,
            g.m.max(g.n) * 4,
        ];
        let mut mem = Vec::new();
        for bytes in sizes {
            // SAFETY: the context is bound (the caller's contract); freed below.
            match unsafe { dr::malloc_sync(bytes.max(4)) } {
                Ok(p) => mem.push(p),
                Err(_) => break,
            }
        }
        let events = (
            dr::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT),
            dr::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT),
        );
        let mut best: Option<(f32, (lt::cublasLtMatmulAlgo_t, usize))> = None;
        if let (5, (Ok(start), Ok(end))) = (mem.len(), events) {
            let ops = Operands {
                alpha: mem[0],
                a: mem[1],
                b: mem[2],
                c: mem[3],
                v: mem[4],
            };
            // SAFETY: every temporary was just allocated with its size; α = 1, β = 0, the
            // operands random (copied synchronously), written before the runs.
            unsafe {
                for (&p, &bytes) in mem.iter().zip(&sizes) {
                    let _ = sys::cuMemsetD8Async(p, 0, bytes, self.stream);
                }
                let _ = dr::stream::synchronize(self.stream);
                for (at, dtype) in [(1, g.types.input), (2, g.types.input), (3, g.types.output)] {
                    let _ = dr::memcpy_htod_sync(mem[at], &random_bits(dtype, sizes[at], at));
                }
                let _ = sys::cuMemsetD32Async(ops.alpha, 1.0f32.to_bits(), 1, self.stream);
                // Rounds over all the candidates, each candidate's best round kept: the
                // first round also brings the clocks up from idle, which otherwise favoured
                // whichever candidate ran last (on the H200 the one-pass choice among MLP-L's
                // 4096³ bf16 candidates, timed once each, replayed the step in 2749.7 µs
                // against 2563.3 with the heuristic's first).
                let mut times = vec![f32::INFINITY; algos.len()];
                let mut runs = vec![true; algos.len()];
                for round in 0..ROUNDS {
                    for (i, candidate) in algos.iter().enumerate() {
                        let run = || self.run(lt, plan, &candidate.0, ops);
                        if !runs[i] || (round == 0 && run().and_then(|()| run()).is_err()) {
                            runs[i] = false;
                            continue;
                        }
                        let _ = dr::event::record(start, self.stream);
                        let ran = (0..TIMED_RUNS).try_for_each(|_| run());
                        let _ = dr::event::record(end, self.stream);
                        if ran.is_err() || dr::stream::synchronize(self.stream).is_err() {
                            runs[i] = false;
                            continue;
                        }
                        if let Ok(ms) = dr::event::elapsed(start, end) {
                            times[i] = times[i].min(ms);
                        }
                    }
                }
                let fastest = (0..algos.len())
                    .filter(|&i| runs[i] && times[i].is_finite())
                    .min_by(|&i, &j| times[i].total_cmp(&times[j]));
                // The library's own first choice unless another is clearly faster.
                best = fastest.map(|i| {
                    let first = runs[0] && times[0] <= times[i] * FIRST_MARGIN;
                    let pick = if first { 0 } else { i };
                    (times[pick], algos[pick])
                });
                let _ = dr::stream::synchronize(self.stream);
            }
        }
        // SAFETY: made above, destroyed and freed once (after the stream drained).
        unsafe {
            if let Ok(e) = events.0 {
                let _ = dr::event::destroy(e);
            }
            if let Ok(e) = events.1 {
                let _ = dr::event::destroy(e);
            }
            for p in mem {
                let _ = dr::free_sync(p);
            }
        }
        best.map(|(_, algo)| algo)
    }

    /// Issues one cuBLASLt product of `plan` with `algo` on the handle's stream.
    ///
    /// # Safety
    /// As [`Cublas::gemm_lt`].
    unsafe fn run(
        &self,
        lt: &Lt,
        plan: &LtPlan,
        algo: &lt::cublasLtMatmulAlgo_t,
        p: Operands,
    ) -> std::result::Result<(), ltr::CublasError> {
        // SAFETY: the caller's contract; the descriptor is the plan's (under the plans'
        // lock), and the library reads the vector's address when the call is issued. An
        // unfused plan keeps no vector address: (on the H200, one-pass algorithms of unfused
        // products failed with CUBLAS_STATUS_INVALID_VALUE where it was `C`'s.)
        unsafe {
            if plan.fused {
                ltr::set_matmul_desc_attribute(
                    plan.desc,
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    (&p.v as *const sys::CUdeviceptr).cast(),
                    std::mem::size_of::<sys::CUdeviceptr>(),
                )?;
            }
            ltr::matmul(
                lt.handle,
                plan.desc,
                p.alpha as *const std::ffi::c_void,
                (p.alpha + 4) as *const std::ffi::c_void,
                p.b as *const std::ffi::c_void,
                plan.layouts[0],
                p.a as *const std::ffi::c_void,
                plan.layouts[1],
                p.c as *const std::ffi::c_void,
                plan.layouts[2],
                p.c as *mut std::ffi::c_void,
                plan.layouts[2],
                algo,
                self._workspace.ptr as *mut std::ffi::c_void,
                WORKSPACE_BYTES,
                self.stream as lt::cudaStream_t,
            )
        }
    }

    /// Issues the product `g` through the cuBLASLt plan [`Cublas::prepare`] made for it and
    /// returns `true`, or returns `false` (issuing nothing) where there is none. cuBLASLt
    /// shares cuBLAS's workspace: the plan orders every library call after the last, so
    /// they never run at once.
    ///
    /// # Safety
    /// As [`Cublas::gemm`], with `p.alpha` at `α`, `β`; `p.v` at the epilogue's `f32` vector
    /// ([`Fused`]), overlapping no operand, where `g` fuses one; every pointer aligned to
    /// `align` bytes.
    pub(crate) unsafe fn gemm_lt(&self, g: &GemmShape, align: usize, p: Operands) -> Result<bool> {
        let Some(lt) = &self.lt else { return Ok(false) };
        let plans = lt.plans.lock().unwrap_or_else(|p| p.into_inner());
        let Some(Some(plan)) = plans.get(&(*g, align)) else {
            return Ok(false);
        };
        // SAFETY: the caller's contract.
        unsafe { self.run(lt, plan, &plan.algo, p) }
            .map(|()| true)
            .map_err(|e| Error::Launch {
                kernel: "sgemm",
                reason: format!("cuBLASLt: {e}"),
            })
    }
}
