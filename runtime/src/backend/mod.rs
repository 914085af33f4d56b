//! The backend trait and its implementations. A backend supplies the work each lifecycle
//! transition brackets (allocate, upload, download, copy, launch, lower, replay, drain); the
//! lifecycle itself lives once, in [`crate::holder`].

#[cfg(feature = "cuda")]
pub(crate) mod cublas;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod host;
pub(crate) mod wgpu;

use crate::blas::{GemmShape, GemmTypes};
use crate::buffer::RawView;
use crate::error::{Error, Result};
use crate::kernel::KernelDef;
use crate::plan::Plan;

/// The kinds of backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// Kernels' host Rust form on the CPU: the numerical oracle, always available.
    Host,
    /// WGSL through wgpu (Vulkan, Metal, DX12, GL; lavapipe on a CPU).
    Wgpu,
    /// CUDA C through NVRTC and the CUDA driver, replayed as CUDA graphs.
    Cuda,
}

impl BackendKind {
    /// Lower-case name, as in `GRAPHED_BACKEND`.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Host => "host",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Cuda => "cuda",
        }
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Backend storage of one allocation.
pub(crate) enum Memory {
    Host(std::sync::Mutex<Vec<u32>>),
    Wgpu(::wgpu::Buffer),
    #[cfg(feature = "cuda")]
    Cuda(cuda::CudaMem),
}

/// One backend instance (one device).
pub(crate) trait Backend: Send + Sync {
    fn kind(&self) -> BackendKind;
    fn adapter(&self) -> String;
    /// Whether kernels that compute with `f16` run here (wgpu: the device has `shader-f16`).
    fn shader_f16(&self) -> bool {
        true
    }
    /// The subgroup size kernels see (`None`: no subgroup operations here, or a size the
    /// driver picks per pipeline).
    fn subgroup_size(&self) -> Option<u32> {
        None
    }
    /// The device's multiprocessors, where the backend can tell.
    fn multiprocessors(&self) -> Option<u32> {
        None
    }
    /// The most workgroup memory (bytes) one kernel may declare here.
    fn workgroup_bytes_max(&self) -> u32 {
        u32::MAX
    }
    /// Alignment (in 32-bit words) of each launch's argument block inside a recording's arena.
    fn arg_align_words(&self) -> usize;
    /// A zeroed allocation of `words` 32-bit words.
    ///
    /// `write`, `read` and `copy` take views of whole 32-bit words (a 32-bit type's, or a
    /// `u32` view of the words 16-bit elements occupy: `crate::packed` makes them).
    fn alloc(&self, words: usize) -> Result<Memory>;
    /// Zeroed scratch memory for one eager library call (it is dropped when the call returns,
    /// with its work possibly still queued): by default [`Backend::alloc`].
    fn alloc_scratch(&self, words: usize) -> Result<Memory> {
        self.alloc(words)
    }
    fn write(&self, view: &RawView, data: &[u32]) -> Result<()>;
    /// Waits for pending work, then reads.
    fn read(&self, view: &RawView) -> Result<Vec<u32>>;
    fn copy(&self, src: &RawView, dst: &RawView) -> Result<()>;
    /// Compiles and caches a kernel (never inside a recording's lowering).
    fn prepare(&self, kernel: &'static KernelDef) -> Result<()>;
    fn launch(
        &self,
        kernel: &'static KernelDef,
        grid: [u32; 3],
        args: &[u32],
        bindings: &[RawView],
    ) -> Result<()>;
    /// Whether this backend runs products of `types` in [`Backend::sgemm`] (a vendor BLAS:
    /// loads and sets it up on first use; never called inside a lowering).
    fn blas(&self, _types: GemmTypes) -> bool {
        false
    }
    /// Makes the vendor library's plan for `shape` with operands at `align` bytes, once per
    /// shape and alignment (choosing its algorithm: the fastest of its candidates, timed,
    /// where [`GemmShape::tuned`]). Returns `None` where the library cannot run the shape with
    /// its [`GemmShape::fused`] epilogue in one call (an unfused shape always runs: on its
    /// plan, or on the plain BLAS call without one), else whether the call uses the library's
    /// shared workspace (`false`: it touches nothing but its operands, so a plan may run it
    /// beside other library calls). Called before a product is issued or recorded, after
    /// [`Backend::blas`] accepted its types, never inside a lowering.
    fn prepare_gemm(&self, shape: &GemmShape, _align: usize) -> Option<bool> {
        shape.fused.is_none().then_some(true)
    }
    /// One line per product plan the vendor library made ([`crate::Device::vendor_plans`]).
    fn vendor_plans(&self) -> Vec<String> {
        Vec::new()
    }
    /// `C = op(A)·op(B)` (+ `C` when `flag != 0`) through the vendor BLAS (the shape's types
    /// are ones [`Backend::blas`] accepted), with `v` the fused epilogue's vector when the
    /// shape has one ([`Backend::prepare_gemm`] accepted it).
    fn sgemm(
        &self,
        _shape: &GemmShape,
        _flag: u32,
        _a: &RawView,
        _b: &RawView,
        _c: &RawView,
        _v: Option<&RawView>,
    ) -> Result<()> {
        Err(Error::Launch {
            kernel: "sgemm",
            reason: format!("the {} backend has no vendor BLAS", self.kind()),
        })
    }
    /// Builds the backend recording of a plan. Executes nothing.
    fn lower(&self, plan: &Plan) -> Result<Box<dyn Recording>>;
    /// Waits for all work this backend queued.
    fn drain(&self) -> Result<()>;
    /// Whether the device can still run work (an error names the fault that ended it); in
    /// checked mode also a kernel's out-of-range access since the last check (reported once).
    /// Called after a drain.
    fn health(&self) -> Result<()> {
        Ok(())
    }
    /// Whether kernels run their checked sources (checked mode, [`crate::checked`]).
    fn checked(&self) -> bool {
        false
    }
    /// Test hook (`testing` feature): makes the device report one validation error (wgpu only).
    #[cfg(feature = "testing")]
    fn inject_validation_error(&self) {}
    /// (free, total) device memory in bytes, where the driver reports it.
    fn memory_info(&self) -> Option<(u64, u64)> {
        None
    }
    /// Runs `f` with the backend's CUDA ordinal and raw stream, under the lock that orders
    /// work on the stream (CUDA only): how a library call (an NCCL collective) is issued in
    /// stream order with the backend's own work.
    #[cfg(feature = "nccl")]
    fn with_stream(
        &self,
        _f: &mut dyn FnMut(i32, *mut std::ffi::c_void) -> Result<()>,
    ) -> Result<()> {
        Err(crate::error::Error::Unavailable {
            backend: "nccl",
            reason: format!(
                "the {} backend has no CUDA stream: collectives across ranks need CUDA devices",
                self.kind()
            ),
        })
    }
}

/// A plan lowered for one backend, replayable any number of times.
pub(crate) trait Recording: Send {
    /// Replays once. `scalars` are (launch, word, bits) of every per-step scalar use.
    fn replay(&mut self, scalars: &[(usize, usize, u32)]) -> Result<()>;
    /// Copies device inputs into their static slots (`copies`: source, slot), then replays
    /// once. By default each copy goes through the backend first; a backend that can put the
    /// copies into the replay's own submission does so (wgpu: a submit costs far more than a
    /// copy command).
    fn replay_with_inputs(
        &mut self,
        backend: &dyn Backend,
        copies: &[(&RawView, &RawView)],
        scalars: &[(usize, usize, u32)],
    ) -> Result<()> {
        for (src, slot) in copies {
            backend.copy(src, slot)?;
        }
        self.replay(scalars)
    }
    /// Re-points the ops `ops` of `plan`, whose views now name other allocations (the plan is
    /// already changed), and writes the argument words `words` (launch, word, bits). Executes
    /// nothing; takes effect from the next replay (work already queued is unaffected). An
    /// [`Error::Lower`] says this recording cannot be re-pointed so: the holder records anew.
    fn rebind(
        &mut self,
        _plan: &Plan,
        _ops: &[usize],
        _words: &[(usize, usize, u32)],
    ) -> Result<()> {
        Err(Error::Lower {
            backend: "?",
            reason: "this recording cannot be rebound".into(),
        })
    }
    /// Nodes (dispatches) per replay.
    fn launches(&self) -> usize;
    /// Writes the backend's own view of the recording as Graphviz DOT, where it has one
    /// (CUDA: `cuGraphDebugDotPrint`). Returns whether anything was written.
    fn debug_dot(&self, _path: &std::path::Path) -> Result<bool> {
        Ok(false)
    }
}

/// Writes the changed argument words `(launch, word, bits)` into a recording's host copy of
/// its argument arena (`offsets[launch]`: where launch `launch`'s block starts) and returns
/// the word range `lo..hi` that changed (empty, `lo >= hi`, when none did), which the backend
/// then uploads in one transfer.
pub(crate) fn patch_args(
    arena: &mut [u32],
    offsets: &[usize],
    words: &[(usize, usize, u32)],
) -> (usize, usize) {
    let (mut lo, mut hi) = (usize::MAX, 0usize);
    for &(launch, word, bits) in words {
        let at = offsets[launch] + word;
        if arena[at] != bits {
            arena[at] = bits;
            lo = lo.min(at);
            hi = hi.max(at + 1);
        }
    }
    (lo, hi)
}
