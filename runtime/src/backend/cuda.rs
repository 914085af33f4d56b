//! The CUDA backend: kernels' CUDA C compiled once per device with NVRTC, launched on one
//! non-blocking stream per device, and plans lowered to CUDA graphs by stream capture.
//!
//! Every static buffer is allocated before a capture begins and nothing is allocated or
//! freed inside it: memory allocated during capture would become a graph-owned allocation
//! whose lifetime follows graph launches, not our reference counts, and a free inside capture
//! would be deferred to an unknown later launch. The census after capture (kernel nodes ==
//! plan launches, memcpy nodes == plan copies) turns work that escaped the capture, or work
//! that crept into it from elsewhere, into an error instead of a silently wrong replay.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::{result, sys, CudaContext, CudaFunction, DriverError};

use super::cublas::{Cublas, WORKSPACE_BYTES};
use super::{Backend, BackendKind, Memory, Recording};
use crate::blas::{beta_bits, GemmShape};
use crate::buffer::RawView;
use crate::checked::{Kernels, RECORD_WORDS};
use crate::dag::Dag;
use crate::error::{Error, Result};
use crate::kernel::KernelDef;
use crate::plan::{Op, Plan};

const NAME: &str = "cuda";
/// Argument blocks of eager launches live in a ring of device memory, reused in stream order.
const RING_WORDS: usize = 1 << 20;
/// Alignment of argument blocks (16 bytes).
const ARG_ALIGN: usize = 4;
/// Stream captures tried per lowering when another thread invalidates them.
const CAPTURE_ATTEMPTS: u32 = 3;
/// Bytes of static `__shared__` memory one block may declare.
const STATIC_SHARED_BYTES: u32 = 48 * 1024;

/// Errors after which the context can run nothing more ("sticky" errors).
fn is_sticky(e: &DriverError) -> bool {
    use sys::cudaError_enum::*;
    matches!(
        e.0,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_ASSERT
    )
}

/// The first sticky error of this process. Every backend instance shares the device's
/// primary context, so after one such error none of them can run anything any more.
static POISON: Mutex<Option<String>> = Mutex::new(None);
/// Whether `POISON` holds an error: every replay asks, and a load is far cheaper than a lock.
static POISONED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn poisoned() -> Option<String> {
    if !POISONED.load(std::sync::atomic::Ordering::Acquire) {
        return None;
    }
    POISON.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The device's health, behind the lock that serialises work on the stream.
#[derive(Default)]
struct Health;

impl Health {
    fn check(&self) -> Result<()> {
        match poisoned() {
            Some(e) => Err(Error::Device { backend: NAME, reason: format!("the CUDA context is unusable after an earlier fault ({e}); restart the process") }),
            None => Ok(()),
        }
    }
    /// Maps a driver error (a sticky one is remembered by `err`).
    fn note(&mut self, e: DriverError) -> Error {
        err(e)
    }
}

/// Binds a context to the calling thread for the guard's life and then puts back whatever
/// was current before (another library's context, or none): graphed's calls leave a caller's
/// own CUDA code as they found it.
struct Bound(Option<sys::CUcontext>);

impl Bound {
    fn to(ctx: &CudaContext) -> Result<Bound> {
        let prev = result::ctx::get_current().map_err(err)?;
        if prev == Some(ctx.cu_ctx()) {
            return Ok(Bound(None));
        }
        ctx.bind_to_thread().map_err(err)?;
        Ok(Bound(Some(prev.unwrap_or(std::ptr::null_mut()))))
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        if let Some(prev) = self.0 {
            // SAFETY: `prev` was current on this thread a moment ago (or null: none).
            unsafe {
                let _ = result::ctx::set_current(prev);
            }
        }
    }
}

/// The stream lock held and the context bound, for one operation.
struct Entered<'a> {
    health: MutexGuard<'a, Health>,
    _bound: Bound,
}

impl std::ops::Deref for Entered<'_> {
    type Target = Health;
    fn deref(&self) -> &Health {
        &self.health
    }
}

impl std::ops::DerefMut for Entered<'_> {
    fn deref_mut(&mut self) -> &mut Health {
        &mut self.health
    }
}

/// Maps a driver error to ours, remembering the first sticky one for the whole process.
fn err(e: DriverError) -> Error {
    if is_sticky(&e) {
        POISON
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(|| e.to_string());
        POISONED.store(true, std::sync::atomic::Ordering::Release);
    }
    if e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY {
        return Error::OutOfMemory {
            backend: NAME,
            bytes: None,
        };
    }
    Error::Device {
        backend: NAME,
        reason: e.to_string(),
    }
}

/// One device allocation, freed on drop: synchronously (after the holder drained), or, for
/// scratch memory, in the order of the stream's work (`StreamFree`).
pub(crate) struct CudaMem {
    pub(crate) ptr: sys::CUdeviceptr,
    ctx: Arc<CudaContext>,
    stream_free: Option<StreamFree>,
}

/// How scratch memory goes back: `cuMemFreeAsync` on the backend's stream, under the stream
/// lock (so a free never lands inside another thread's capture), after the work queued
/// before it.
struct StreamFree {
    stream: Stream,
    lock: Arc<Mutex<Health>>,
}

// SAFETY: a device pointer is an address in the context's memory; every use goes through the
// backend, which binds the context and orders work on its stream.
unsafe impl Send for CudaMem {}
// SAFETY: as above; the pointer is never mutated after allocation.
unsafe impl Sync for CudaMem {}

impl Drop for CudaMem {
    fn drop(&mut self) {
        if let Some(f) = &self.stream_free {
            let _health = f.lock.lock().unwrap_or_else(|p| p.into_inner());
            if let Ok(_bound) = Bound::to(&self.ctx) {
                // SAFETY: `ptr` came from cuMemAllocAsync on this stream and is freed once,
                // here, after the work queued before (which is all the work that used it).
                unsafe {
                    let _ = result::free_async(self.ptr, f.stream.0);
                }
            }
            return;
        }
        if let Ok(_bound) = Bound::to(&self.ctx) {
            // SAFETY: `ptr` came from cuMemAlloc in this context and is freed once, here; the
            // lifecycle drained every stream that could still use it before releasing it.
            unsafe {
                let _ = result::free_sync(self.ptr);
            }
        }
    }
}

/// The device address of a view's first element.
fn view_ptr(view: &RawView) -> sys::CUdeviceptr {
    ptr(view) + (view.offset * view.dtype.size()) as u64
}

/// Issues one vendor product: cuBLASLt where the shape fuses an epilogue (its vector `v`),
/// else cuBLAS. `alpha` points at `α` and `β`.
///
/// # Safety
/// The views were checked when the product was recorded or issued ([`crate::blas::Sgemm`]'s
/// checks); `alpha` points at two floats of live device memory.
unsafe fn issue_product(
    blas: &super::cublas::Cublas,
    shape: &GemmShape,
    alpha: sys::CUdeviceptr,
    a: &RawView,
    b: &RawView,
    c: &RawView,
    v: Option<&RawView>,
) -> Result<()> {
    let (pa, pb, pc) = (view_ptr(a), view_ptr(b), view_ptr(c));
    if shape.fused.is_some() != v.is_some() {
        return Err(Error::Launch {
            kernel: "sgemm",
            reason: "a fused product without its vector (or a vector without an epilogue)".into(),
        });
    }
    if shape.fused.is_some() || shape.tuned || shape.one_pass {
        let views = [a, b, c].into_iter().chain(v).collect::<Vec<_>>();
        let ops = super::cublas::Operands {
            alpha,
            a: pa,
            b: pb,
            c: pc,
            v: v.map_or(pc, view_ptr),
        };
        // SAFETY: the caller's contract; the alignment is the views' own.
        if unsafe { blas.gemm_lt(shape, crate::blas::alignment(&views), ops) }? {
            return Ok(());
        }
        if shape.fused.is_some() {
            return Err(Error::Launch {
                kernel: "sgemm",
                reason: format!(
                    "no cuBLASLt plan for the {}×{}×{} product with its fused epilogue",
                    shape.m, shape.n, shape.k
                ),
            });
        }
    }
    // SAFETY: the caller's contract.
    unsafe { blas.gemm(shape, alpha, pa, pb, pc) }
}

/// The number of CUDA GPUs (0 when the driver is missing or reports none).
pub(crate) fn device_count() -> usize {
    // SAFETY: only probes whether libcuda can be opened; cudarc panics on a missing library.
    if !unsafe { sys::is_culib_present() } {
        return 0;
    }
    CudaContext::device_count().map_or(0, |n| n.max(0) as usize)
}

/// The device address of a view's allocation (for library calls such as NCCL's).
#[cfg(feature = "nccl")]
pub(crate) fn device_ptr(view: &RawView) -> sys::CUdeviceptr {
    ptr(view)
}

fn ptr(view: &RawView) -> sys::CUdeviceptr {
    match &view.buf.mem {
        Memory::Cuda(m) => m.ptr,
        _ => {
            unreachable!("a CUDA launch bound a buffer of another backend (checked by the device)")
        }
    }
}

struct Stream(sys::CUstream);
// SAFETY: CUDA streams may be used from any thread; the backend serialises use with a lock.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

struct Ring {
    mem: CudaMem,
    next: usize,
}

pub(crate) struct CudaBackend {
    ctx: Arc<CudaContext>,
    #[cfg(feature = "nccl")]
    ordinal: usize,
    stream: Stream,
    arch: String,
    name: String,
    multiprocessors: u32,
    functions: Mutex<HashMap<(usize, bool), CudaFunction>>,
    /// Serialises work on the stream, so no other thread's launch lands inside a capture.
    lock: Arc<Mutex<Health>>,
    ring: Mutex<Option<Ring>>,
    /// cuBLAS, set up on first use (never inside a capture).
    blas: Mutex<BlasState>,
    /// Checked mode: the fault record (the last argument of every launch, captured into
    /// graphs with it) and the kernels compiled with it.
    checked: Option<(CudaMem, Kernels)>,
}

enum BlasState {
    NotLoaded,
    Ready(Cublas),
    Unavailable,
}

impl CudaBackend {
    /// Opens GPU `ordinal`; `checked`: checked mode (see [`crate::checked`]).
    pub(crate) fn open(ordinal: usize, checked: bool) -> Result<CudaBackend> {
        // SAFETY: only probes whether libcuda can be opened; cudarc panics on a missing library.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::Unavailable {
                backend: NAME,
                reason: "libcuda.so (the NVIDIA driver) was not found; install the NVIDIA driver"
                    .into(),
            });
        }
        // Opening binds the device's primary context; the caller's comes back afterwards.
        // (The current context can be asked for only once the driver is initialised.)
        result::init().map_err(|e| Error::Unavailable {
            backend: NAME,
            reason: format!("the CUDA driver failed to initialise: {e}"),
        })?;
        let _restore = Bound(Some(
            result::ctx::get_current()
                .map_err(err)?
                .unwrap_or(std::ptr::null_mut()),
        ));
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::Unavailable {
            backend: NAME,
            reason: format!("no CUDA device {ordinal}: {e}"),
        })?;
        // SAFETY: graphed never uses cudarc's CudaSlice; event tracking breaks stream capture.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx.compute_capability().map_err(err)?;
        let name = ctx.name().map_err(err)?;
        let multiprocessors = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(err)?
            .max(1) as u32;
        ctx.bind_to_thread().map_err(err)?;
        let stream =
            result::stream::create(result::stream::StreamKind::NonBlocking).map_err(err)?;
        if !crate::nvrtc::available() {
            return Err(Error::Unavailable {
                backend: NAME,
                reason: "NVRTC (libnvrtc) was not found; install the CUDA toolkit's NVRTC".into(),
            });
        }
        let mut b = CudaBackend {
            ctx,
            #[cfg(feature = "nccl")]
            ordinal,
            stream: Stream(stream),
            arch: format!("sm_{major}{minor}"),
            name: format!("{name} (sm_{major}{minor})"),
            multiprocessors,
            functions: Mutex::new(HashMap::new()),
            lock: Arc::new(Mutex::new(Health)),
            ring: Mutex::new(None),
            blas: Mutex::new(BlasState::NotLoaded),
            checked: None,
        };
        if checked {
            // Zeroed on the stream before any launch can use it.
            b.checked = Some((b.raw_alloc(RECORD_WORDS)?, Kernels::default()));
        }
        Ok(b)
    }

    fn enter(&self) -> Result<Entered<'_>> {
        let health = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        health.check()?;
        Ok(Entered {
            health,
            _bound: Bound::to(&self.ctx)?,
        })
    }

    fn raw_alloc(&self, words: usize) -> Result<CudaMem> {
        let bytes = words.max(1).checked_mul(4).ok_or_else(|| Error::Limit {
            backend: NAME,
            what: format!("bytes of a buffer of {words} 4-byte elements"),
            asked: words as u128 * 4,
            limit: usize::MAX as u128,
        })?;
        // SAFETY: the context is bound; the result is zeroed on the stream below.
        let p = unsafe { result::malloc_sync(bytes) }.map_err(|e| match err(e) {
            Error::OutOfMemory { .. } => Error::OutOfMemory {
                backend: NAME,
                bytes: Some(bytes as u64),
            },
            other => other,
        })?;
        let mem = CudaMem {
            ptr: p,
            ctx: self.ctx.clone(),
            stream_free: None,
        };
        self.zero(&mem, words)?;
        Ok(mem)
    }

    /// Zeroes a fresh allocation of `words` words on the stream (every allocation starts
    /// zeroed; split-K's counters rely on it).
    fn zero(&self, mem: &CudaMem, words: usize) -> Result<()> {
        // SAFETY: `mem` is a live allocation of at least `max(words, 1)` words, usable on
        // this stream.
        unsafe { sys::cuMemsetD32Async(mem.ptr, 0, words.max(1), self.stream.0) }
            .result()
            .map_err(err)
    }

    /// The loaded function of `kernel`; `programmatic`: its form for programmatic dependent
    /// launch ([`crate::nvrtc::compile_variant`]), which only PDL captures use.
    fn function(&self, kernel: &'static KernelDef, programmatic: bool) -> Result<sys::CUfunction> {
        let key = (kernel as *const KernelDef as usize, programmatic);
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(f.cu_function());
        }
        // The kernel language caps workgroup memory at CUDA's static `__shared__` limit; a
        // definition built otherwise is refused before compiling rather than by the module loader.
        if kernel.workgroup_bytes > self.workgroup_bytes_max() {
            return Err(Error::Limit {
                backend: NAME,
                what: format!(
                    "workgroup memory of kernel `{}` in bytes (CUDA's static `__shared__` limit)",
                    kernel.name
                ),
                asked: kernel.workgroup_bytes.into(),
                limit: self.workgroup_bytes_max().into(),
            });
        }
        if let Some((_, kernels)) = &self.checked {
            kernels.note(kernel);
        }
        let ptx = crate::nvrtc::compile_variant(
            kernel,
            &self.arch,
            self.checked.is_some(),
            programmatic,
        )?;
        let module = self
            .ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(|e| Error::Compile {
                kernel: kernel.name,
                backend: NAME,
                log: format!("loading the module failed: {e}"),
            })?;
        let f = module
            .load_function(kernel.name)
            .map_err(|e| Error::Compile {
                kernel: kernel.name,
                backend: NAME,
                log: format!("no entry point: {e}"),
            })?;
        let raw = f.cu_function();
        self.functions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, f);
        Ok(raw)
    }

    /// Issues one launch on the stream (the caller holds the lock).
    fn issue(
        &self,
        f: sys::CUfunction,
        kernel: &KernelDef,
        grid: [u32; 3],
        args_ptr: sys::CUdeviceptr,
        bindings: &[RawView],
    ) -> Result<()> {
        self.issue_on(self.stream.0, f, kernel, grid, args_ptr, bindings)
    }

    fn issue_on(
        &self,
        stream: sys::CUstream,
        f: sys::CUfunction,
        kernel: &KernelDef,
        grid: [u32; 3],
        args_ptr: sys::CUdeviceptr,
        bindings: &[RawView],
    ) -> Result<()> {
        if grid.contains(&0) {
            return Ok(());
        }
        let mut ptrs: Vec<sys::CUdeviceptr> = Vec::with_capacity(bindings.len() + 2);
        ptrs.push(args_ptr);
        ptrs.extend(bindings.iter().map(ptr));
        if let Some((record, _)) = &self.checked {
            ptrs.push(record.ptr);
        }
        let mut params: Vec<*mut c_void> = ptrs
            .iter_mut()
            .map(|p| p as *mut sys::CUdeviceptr as *mut c_void)
            .collect();
        let wg = kernel.workgroup;
        // SAFETY: `params` points at one device pointer per kernel parameter (argument block
        // first, then each slice, then in checked mode the fault record), matching the
        // signature the CUDA emitter generated for the source `function` compiled.
        unsafe {
            result::launch_kernel(
                f,
                (grid[0], grid[1], grid[2]),
                (wg[0], wg[1], wg[2]),
                0,
                stream,
                &mut params,
            )
        }
        .map_err(|e| Error::Launch {
            kernel: kernel.name,
            reason: e.to_string(),
        })
    }

    /// Copies an eager launch's argument block into the device ring (the caller holds the
    /// lock) and returns its address.
    fn ring_slot(&self, args: &[u32]) -> Result<sys::CUdeviceptr> {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if ring.is_none() {
            *ring = Some(Ring {
                mem: self.raw_alloc(RING_WORDS)?,
                next: 0,
            });
        }
        let r = ring.as_mut().expect("just set");
        let words = args.len().max(1).div_ceil(ARG_ALIGN) * ARG_ALIGN;
        if r.next + words > RING_WORDS {
            r.next = 0;
        }
        let at = r.mem.ptr + r.next as u64 * 4;
        r.next += words;
        if !args.is_empty() {
            // SAFETY: the ring slot is in bounds; the copy is ordered on the stream before the
            // launch that reads it and after every earlier launch that read this slot.
            unsafe { result::memcpy_htod_async(at, args, self.stream.0) }.map_err(err)?;
        }
        Ok(at)
    }

    /// Whether the device has programmatic dependent launch (Hopper, sm_90, and later).
    fn programmatic_launch(&self) -> bool {
        self.arch
            .strip_prefix("sm_")
            .and_then(|a| a.parse::<u32>().ok())
            .is_some_and(|a| a >= 90)
    }

    /// Loads cuBLAS and makes its handle (the caller holds the lock; not capturing).
    fn open_blas(&self) -> Result<Cublas> {
        if !Cublas::present() {
            return Err(Error::Unavailable {
                backend: NAME,
                reason: "libcublas was not found (install the CUDA toolkit's cuBLAS, or add its directory to LD_LIBRARY_PATH)".into(),
            });
        }
        let ws = self.raw_alloc(WORKSPACE_BYTES / 4)?;
        Cublas::open(self.stream.0, ws)
    }

    /// One stream capture of `plan` (everything compiled and allocated before); the flag of
    /// an error says whether the capture was invalidated from outside and may be retried.
    fn capture(
        &self,
        plan: &Plan,
        functions: &[sys::CUfunction],
        offsets: &[usize],
        arena_mem: &CudaMem,
        blas: Option<&Cublas>,
        dag: Option<&Dag>,
        links: &[bool],
    ) -> std::result::Result<sys::CUgraph, (Error, bool)> {
        // Test hook: the first launch goes to a side stream and escapes the capture.
        let side = if crate::faults::take_capture_escape() {
            Some(
                result::stream::create(result::stream::StreamKind::NonBlocking)
                    .map_err(|e| (err(e), false))?,
            )
        } else {
            None
        };
        // SAFETY: the stream is valid and not capturing (the lock excludes other captures).
        unsafe {
            result::stream::begin_capture(
                self.stream.0,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        }
        .map_err(|e| {
            (
                Error::Lower {
                    backend: NAME,
                    reason: format!("begin capture: {e}"),
                },
                false,
            )
        })?;
        if crate::faults::take_capture_invalidation() {
            // Test hook: another thread waits for the whole context while this one captures.
            let ctx = self.ctx.clone();
            let _ = std::thread::spawn(move || {
                if ctx.bind_to_thread().is_ok() {
                    // SAFETY: a context-wide wait; the capture it invalidates is ours.
                    let _ = unsafe { sys::cuCtxSynchronize() };
                }
            })
            .join();
        }
        let issued = (|| -> Result<()> {
            let mut f = functions.iter();
            let mut escaped = false;
            // The nodes each op ended with (the stream's capture dependencies after it).
            let mut tails: Vec<Vec<sys::CUgraphNode>> = Vec::with_capacity(plan.ops.len());
            for (j, op) in plan.ops.iter().enumerate() {
                if let Some(dag) = dag {
                    // The op's first node(s) depend on exactly its predecessors' last nodes: one
                    // stream, and the graph's edges are the plan's.
                    let mut deps: Vec<sys::CUgraphNode> = dag
                        .preds(j)
                        .iter()
                        .flat_map(|&i| tails[i].iter().copied())
                        .collect();
                    deps.sort_unstable();
                    deps.dedup();
                    // A kernel after exactly one other kernel of ours may start before it ends
                    // where `programmatic_links` chose so (our kernels in their PDL form wait
                    // for their predecessor grid before touching memory).
                    let programmatic = links[j] && deps.len() == 1;
                    set_capture_dependencies(self.stream.0, &mut deps, programmatic)?;
                }
                match op {
                    Op::Launch {
                        kernel,
                        grid,
                        args,
                        bindings,
                    } => {
                        let views: Vec<RawView> = bindings.iter().map(|b| b.view.clone()).collect();
                        if let (Some(side), false) = (side, escaped) {
                            escaped = true;
                            self.issue_on(
                                side,
                                *f.next().expect("one function per launch"),
                                kernel,
                                *grid,
                                arena_mem.ptr + offsets[*args] as u64 * 4,
                                &views,
                            )?;
                        } else {
                            self.issue(
                                *f.next().expect("one function per launch"),
                                kernel,
                                *grid,
                                arena_mem.ptr + offsets[*args] as u64 * 4,
                                &views,
                            )?;
                        }
                    }
                    Op::Copy { src, dst } => {
                        if src.len > 0 {
                            // SAFETY: views checked when recorded; captured, not executed.
                            unsafe {
                                result::memcpy_dtod_async(
                                    ptr(dst) + dst.offset as u64 * 4,
                                    ptr(src) + src.offset as u64 * 4,
                                    src.len * 4,
                                    self.stream.0,
                                )
                            }
                            .map_err(err)?;
                        }
                    }
                    Op::Sgemm {
                        shape,
                        args,
                        a,
                        b,
                        c,
                        v,
                        ..
                    } => {
                        let blas = blas.expect("checked before the capture");
                        let alpha = arena_mem.ptr + (offsets[*args] as u64 + 1) * 4;
                        // SAFETY: views checked when recorded; α, β in the arena block.
                        unsafe { issue_product(blas, shape, alpha, a, b, c, v.as_ref()) }?;
                    }
                    #[cfg(feature = "nccl")]
                    Op::AllReduce(op) => {
                        op.issue(self.stream.0 as *mut c_void)?;
                    }
                }
                if dag.is_some() {
                    // An op that added no node (an empty grid or copy) passes its
                    // predecessors' nodes on.
                    tails.push(capture_dependencies(self.stream.0)?);
                }
            }
            if let Some(hook) = crate::faults::take_capture_fault() {
                return Err(Error::Lower {
                    backend: NAME,
                    reason: hook,
                });
            }
            Ok(())
        })();
        // End the capture whatever happened, so the stream is usable again.
        // SAFETY: the stream is capturing (begun above).
        let graph = unsafe { result::stream::end_capture(self.stream.0) };
        if let Some(side) = side {
            // SAFETY: the side stream was created above and is destroyed once, after its work.
            unsafe {
                let _ = result::stream::synchronize(side);
                let _ = result::stream::destroy(side);
            }
        }
        let graph = match (issued, graph) {
            (Ok(()), Ok(g)) => g,
            (Err(e), g) => {
                if let Ok(g) = g {
                    // SAFETY: the graph was returned by end_capture and is destroyed once.
                    unsafe {
                        let _ = result::graph::destroy(g);
                    }
                }
                let retry = e.to_string().contains("STREAM_CAPTURE_INVALIDATED");
                return Err((
                    match e {
                        e @ Error::Lower { .. } => e,
                        e => Error::Lower {
                            backend: NAME,
                            reason: format!("capture aborted: {e}"),
                        },
                    },
                    retry,
                ));
            }
            (Ok(()), Err(e)) => {
                return Err((
                    Error::Lower {
                        backend: NAME,
                        reason: format!("end capture: {e}"),
                    },
                    e.0 == sys::cudaError_enum::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                ))
            }
        };
        Ok(graph)
    }

    fn sync(&self, health: &mut Health) -> Result<()> {
        // SAFETY: the stream is valid for the backend's lifetime.
        unsafe { result::stream::synchronize(self.stream.0) }.map_err(|e| health.note(e))
    }

    /// In checked mode, reads the fault record (after the work queued so far; the caller
    /// holds the lock) and, when it holds a fault, clears it and returns the fault.
    fn take_fault(&self, health: &mut Health) -> Result<()> {
        let Some((record, kernels)) = &self.checked else {
            return Ok(());
        };
        let mut words = [0u32; RECORD_WORDS];
        // SAFETY: the record has RECORD_WORDS words; the stream is synchronised before
        // `words` is read.
        unsafe { result::memcpy_dtoh_async(&mut words, record.ptr, self.stream.0) }.map_err(err)?;
        self.sync(health)?;
        let fault = kernels.check(&words);
        if fault.is_err() {
            // SAFETY: the record is RECORD_WORDS words; ordered before any later launch.
            unsafe { sys::cuMemsetD32Async(record.ptr, 0, RECORD_WORDS, self.stream.0) }
                .result()
                .map_err(err)?;
        }
        fault
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        if let Ok(_bound) = Bound::to(&self.ctx) {
            // SAFETY: the stream is valid until destroyed below.
            unsafe {
                let _ = result::stream::synchronize(self.stream.0);
            }
            // The cuBLAS handle (and its workspace) go after the stream's work, before the
            // stream it is bound to.
            let blas = std::mem::replace(
                self.blas.get_mut().unwrap_or_else(|p| p.into_inner()),
                BlasState::Unavailable,
            );
            drop(blas);
            // SAFETY: the stream is destroyed once, after its work completed.
            unsafe {
                let _ = result::stream::destroy(self.stream.0);
            }
        }
    }
}

impl Backend for CudaBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }
    fn adapter(&self) -> String {
        self.name.clone()
    }
    fn workgroup_bytes_max(&self) -> u32 {
        STATIC_SHARED_BYTES
    }

    fn subgroup_size(&self) -> Option<u32> {
        Some(32)
    }
    fn multiprocessors(&self) -> Option<u32> {
        Some(self.multiprocessors)
    }
    fn arg_align_words(&self) -> usize {
        ARG_ALIGN
    }
    fn alloc(&self, words: usize) -> Result<Memory> {
        let _g = self.enter()?;
        Ok(Memory::Cuda(self.raw_alloc(words)?))
    }
    /// In stream order from the device's memory pool (`cuMemAllocAsync`), freed the same way:
    /// an eager product's split-K partials then cost no allocation and no device-wide
    /// synchronisation per call, which `cuMemFree` would. Where the pool is unavailable, a
    /// plain allocation.
    fn alloc_scratch(&self, words: usize) -> Result<Memory> {
        let _g = self.enter()?;
        let bytes = words.max(1).saturating_mul(4);
        // SAFETY: the context is bound and the stream lock held (no capture is under way on
        // it from another thread; the caller records nothing, see `Device::scratch`).
        match unsafe { result::malloc_async(self.stream.0, bytes) } {
            Ok(p) => {
                let mem = CudaMem {
                    ptr: p,
                    ctx: self.ctx.clone(),
                    stream_free: Some(StreamFree {
                        stream: Stream(self.stream.0),
                        lock: self.lock.clone(),
                    }),
                };
                self.zero(&mem, words)?;
                Ok(Memory::Cuda(mem))
            }
            Err(_) => Ok(Memory::Cuda(self.raw_alloc(words)?)),
        }
    }
    fn write(&self, view: &RawView, data: &[u32]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let _g = self.enter()?;
        // SAFETY: the view lies inside its allocation (checked when it was made); pageable
        // host memory is staged before the call returns, so `data` may be dropped after.
        unsafe {
            result::memcpy_htod_async(ptr(view) + view.offset as u64 * 4, data, self.stream.0)
        }
        .map_err(err)
    }
    fn read(&self, view: &RawView) -> Result<Vec<u32>> {
        let mut g = self.enter()?;
        let mut out = vec![0u32; view.len];
        if view.len > 0 {
            // SAFETY: as in `write`; the stream is synchronised before `out` is read.
            unsafe {
                result::memcpy_dtoh_async(
                    &mut out,
                    ptr(view) + view.offset as u64 * 4,
                    self.stream.0,
                )
            }
            .map_err(err)?;
        }
        self.sync(&mut g)?;
        // The same wait covers the record: a fault of the work before this readback is
        // reported instead of its (possibly wrong) values, once.
        self.take_fault(&mut g)?;
        Ok(out)
    }
    fn copy(&self, src: &RawView, dst: &RawView) -> Result<()> {
        if src.len == 0 {
            return Ok(());
        }
        let _g = self.enter()?;
        // SAFETY: both views lie inside their allocations and do not overlap (checked).
        unsafe {
            result::memcpy_dtod_async(
                ptr(dst) + dst.offset as u64 * 4,
                ptr(src) + src.offset as u64 * 4,
                src.len * 4,
                self.stream.0,
            )
        }
        .map_err(err)
    }
    fn prepare(&self, kernel: &'static KernelDef) -> Result<()> {
        let _g = self.enter()?;
        self.function(kernel, false).map(|_| ())
    }
    fn launch(
        &self,
        kernel: &'static KernelDef,
        grid: [u32; 3],
        args: &[u32],
        bindings: &[RawView],
    ) -> Result<()> {
        let _g = self.enter()?;
        let f = self.function(kernel, false)?;
        let at = self.ring_slot(args)?;
        self.issue(f, kernel, grid, at, bindings)
    }
    /// cuBLAS runs every combination [`crate::blas`] accepts (`cublasGemmEx` past plain f32).
    fn blas(&self, _types: crate::blas::GemmTypes) -> bool {
        let Ok(_g) = self.enter() else { return false };
        let mut blas = self.blas.lock().unwrap_or_else(|p| p.into_inner());
        if let BlasState::NotLoaded = *blas {
            *blas = match self.open_blas() {
                Ok(b) => BlasState::Ready(b),
                Err(e) => {
                    tracing::info!("graphed: {e}; matrix products use the DSL kernels");
                    BlasState::Unavailable
                }
            };
        }
        matches!(*blas, BlasState::Ready(_))
    }
    fn sgemm(
        &self,
        shape: &GemmShape,
        flag: u32,
        a: &RawView,
        b: &RawView,
        c: &RawView,
        v: Option<&RawView>,
    ) -> Result<()> {
        let _g = self.enter()?;
        let blas = self.blas.lock().unwrap_or_else(|p| p.into_inner());
        let BlasState::Ready(blas) = &*blas else {
            return Err(Error::Launch {
                kernel: "sgemm",
                reason: "cuBLAS is not loaded on this device".into(),
            });
        };
        let at = self.ring_slot(&[flag, 1.0f32.to_bits(), beta_bits(flag)])?;
        // SAFETY: views checked by `Sgemm::check` (and `check_fused`); α, β at words 1 and 2
        // of the ring slot.
        unsafe { issue_product(blas, shape, at + 4, a, b, c, v) }
    }
    fn vendor_plans(&self) -> Vec<String> {
        let blas = self.blas.lock().unwrap_or_else(|p| p.into_inner());
        match &*blas {
            BlasState::Ready(b) => b.plans(),
            _ => Vec::new(),
        }
    }
    /// cuBLASLt's plan for the shape (tuned: the fastest candidate, timed on this stream).
    fn prepare_gemm(&self, shape: &GemmShape, align: usize) -> Option<bool> {
        let unfused = shape.fused.is_none();
        if unfused && !shape.tuned && !shape.one_pass {
            return Some(true); // plain cuBLAS (the caller found it loaded)
        }
        let _g = self.enter().ok()?;
        let blas = self.blas.lock().unwrap_or_else(|p| p.into_inner());
        match &*blas {
            BlasState::Ready(b) => {
                // SAFETY: the context is bound and the lock held outside any lowering, so the
                // stream is not capturing.
                match unsafe { b.prepare(shape, align) } {
                    Some(workspace) => Some(workspace > 0),
                    None => unfused.then_some(true),
                }
            }
            _ => None,
        }
    }
    fn lower(&self, plan: &Plan) -> Result<Box<dyn Recording>> {
        let mut g = self.enter()?;
        // A plan with nothing to run (no ops, empty grids, empty copies) replays as nothing:
        // the driver refuses to capture or instantiate an empty graph.
        let runs_something = plan.ops.iter().any(|o| match o {
            Op::Launch { grid, .. } => grid.iter().all(|&n| n > 0),
            Op::Copy { src, .. } => src.len > 0,
            _ => true,
        });
        if !runs_something {
            return Ok(Box::new(EmptyReplay {
                lock: self.lock.clone(),
            }));
        }
        // Compile and allocate everything before the capture begins.
        // A product's block is [accumulate flag, α, β]: cuBLAS reads α and β on the device.
        let gemm_args: Vec<usize> = plan
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::Sgemm { args, .. } => Some(*args),
                _ => None,
            })
            .collect();
        let mut offsets = Vec::with_capacity(plan.launch_args.len());
        let mut arena: Vec<u32> = Vec::new();
        for (i, a) in plan.launch_args.iter().enumerate() {
            let start = arena.len().div_ceil(ARG_ALIGN) * ARG_ALIGN;
            arena.resize(start, 0);
            offsets.push(start);
            if gemm_args.contains(&i) {
                let flag = a.first().copied().unwrap_or(0);
                arena.extend_from_slice(&[flag, 1.0f32.to_bits(), beta_bits(flag)]);
            } else {
                arena.extend_from_slice(if a.is_empty() { &[0] } else { a });
            }
        }
        let gemm_blocks: Vec<usize> = gemm_args.iter().map(|&i| offsets[i]).collect();
        let blas = self.blas.lock().unwrap_or_else(|p| p.into_inner());
        let blas = match (&*blas, gemm_blocks.is_empty()) {
            (BlasState::Ready(b), _) => Some(b),
            (_, true) => None,
            (_, false) => {
                return Err(Error::Lower {
                    backend: NAME,
                    reason: "the plan holds cuBLAS products but cuBLAS is not loaded".into(),
                })
            }
        };
        // The graph's edges are the plan's dependency edges (a plan lowered serially is one
        // chain: the stream's own order).
        let dag = (!plan.serial).then(|| plan.dag());
        let mode = if self.programmatic_launch() {
            plan.programmatic
        } else {
            crate::Programmatic::Off
        };
        let links =
            crate::dag::programmatic_links(&plan.ops, dag.as_ref(), mode, self.multiprocessors);
        // A kernel on either end of a programmatic edge loads its form with the PDL prologue
        // (the one after waits for its predecessor; the one before lets it launch early).
        let mut ends = links.clone();
        if let Some(g) = &dag {
            for j in (0..links.len()).filter(|&j| links[j]) {
                ends[g.preds(j)[0]] = true;
            }
        }
        let mut functions = Vec::new();
        for (op, &pdl) in plan.ops.iter().zip(&ends) {
            if let Op::Launch { kernel, .. } = op {
                functions.push(self.function(kernel, pdl)?);
            }
        }
        let arena_mem = self.raw_alloc(arena.len())?;
        // SAFETY: the arena was just allocated with `arena.len()` words.
        unsafe { result::memcpy_htod_async(arena_mem.ptr, &arena, self.stream.0) }.map_err(err)?;
        self.sync(&mut g)?;

        // A capture that another thread's device-wide synchronisation invalidated (legal
        // for that thread, fatal for the capture) is retried a few times before the key
        // falls back to eager.
        let mut attempt = 0;
        let graph = loop {
            attempt += 1;
            match self.capture(
                plan,
                &functions,
                &offsets,
                &arena_mem,
                blas,
                dag.as_ref(),
                &links,
            ) {
                Ok(g) => break g,
                Err((e, true)) if attempt < CAPTURE_ATTEMPTS => {
                    crate::faults::note_capture_retry();
                    tracing::debug!("graphed: CUDA capture invalidated ({e}); retrying");
                }
                Err((e, _)) => return Err(e),
            }
        };
        let graph = GraphHandle(graph);
        let got = census(graph.0, &functions)?;
        let sgemms = gemm_blocks.len();
        #[cfg(feature = "nccl")]
        let collectives = plan
            .ops
            .iter()
            .filter(|o| matches!(o, Op::AllReduce(_)))
            .count();
        #[cfg(not(feature = "nccl"))]
        let collectives = 0;
        let library_calls = sgemms + collectives;
        let want_copies = plan
            .ops
            .iter()
            .filter(|o| matches!(o, Op::Copy { src, .. } if src.len > 0))
            .count();
        let want_kernels = plan
            .ops
            .iter()
            .filter(|o| matches!(o, Op::Launch { grid, .. } if grid.iter().all(|&g| g > 0)))
            .count();
        if got.allocs > 0 {
            return Err(Error::Lower {
                backend: NAME,
                reason: format!("the captured graph allocates or frees memory ({} nodes): a library call allocated inside the capture", got.allocs),
            });
        }
        // Our kernels are told apart from the library's by their function handles: ours must
        // match the plan exactly. Every cuBLAS product adds at least one kernel; a collective
        // may add kernels and copies or nothing (NCCL on one rank, in place); without library
        // calls nothing else may be in the graph. (Counting the library's nodes by querying
        // the capturing graph around each call failed on the H200 with
        // CUDA_ERROR_INVALID_VALUE, so the library's share is bounded, not counted.)
        let library_ok = if library_calls == 0 {
            got.library_kernels == 0 && got.other == 0
        } else {
            got.library_kernels >= sgemms
        };
        let copies_ok = if collectives == 0 {
            got.copies == want_copies
        } else {
            got.copies >= want_copies
        };
        if got.kernels != want_kernels || !copies_ok || !library_ok {
            return Err(Error::Lower {
                backend: NAME,
                reason: format!(
                    "census mismatch: the captured graph has {} of our kernel nodes, {} other kernel nodes, {} copy and {} other nodes; the plan has {want_kernels} launches, {want_copies} copies and {library_calls} library calls (work escaped the capture or crept into it)",
                    got.kernels, got.library_kernels, got.copies, got.other
                ),
            });
        }
        let want_kernels = got.kernels + got.library_kernels;
        let nodes = launch_nodes(graph.0, arena_mem.ptr, &offsets, &functions)?;
        let mut exec = std::ptr::null_mut();
        // SAFETY: `graph` is a valid captured graph.
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph.0, 0) }
            .result()
            .map_err(|e| Error::Lower {
                backend: NAME,
                reason: format!("instantiate: {e}"),
            })?;
        let exec = ExecHandle(exec);
        // SAFETY: `exec` was just instantiated; upload is stream-ordered.
        unsafe { result::graph::upload(exec.0, self.stream.0) }.map_err(|e| Error::Lower {
            backend: NAME,
            reason: format!("upload: {e}"),
        })?;
        Ok(Box::new(CudaReplay {
            ctx: self.ctx.clone(),
            stream: self.stream.0 as usize,
            lock: self.lock.clone(),
            arena,
            offsets,
            arena_mem,
            exec,
            graph,
            launches: want_kernels,
            gemm_blocks,
            nodes,
            #[cfg(feature = "nccl")]
            _collectives: plan
                .ops
                .iter()
                .filter_map(|o| match o {
                    Op::AllReduce(a) => Some(a.clone()),
                    _ => None,
                })
                .collect(),
        }))
    }
    #[cfg(feature = "nccl")]
    fn with_stream(&self, f: &mut dyn FnMut(i32, *mut c_void) -> Result<()>) -> Result<()> {
        let _g = self.enter()?;
        f(self.ordinal as i32, self.stream.0 as *mut c_void)
    }
    fn memory_info(&self) -> Option<(u64, u64)> {
        let _g = self.enter().ok()?;
        result::mem_get_info()
            .ok()
            .map(|(free, total)| (free as u64, total as u64))
    }
    fn health(&self) -> Result<()> {
        if self.checked.is_none() {
            return self.lock.lock().unwrap_or_else(|p| p.into_inner()).check();
        }
        let mut g = self.enter()?;
        self.take_fault(&mut g)
    }
    fn checked(&self) -> bool {
        self.checked.is_some()
    }
    fn drain(&self) -> Result<()> {
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        // A context with a sticky error runs nothing any more: nothing is in flight, so its
        // memory can be released; `Device::synchronize` and every other operation report the
        // fault.
        if poisoned().is_some() {
            return Ok(());
        }
        let _bound = Bound::to(&self.ctx)?;
        match self.sync(&mut g) {
            Ok(()) => Ok(()),
            Err(_) if poisoned().is_some() => Ok(()),
            Err(e) => Err(Error::Drain {
                backend: NAME,
                reason: e.to_string(),
            }),
        }
    }
}

/// Set once a driver refused an empty capture dependency set (the documentation does not say
/// it may be empty): an op with no predecessors then follows the op captured before it, an
/// edge more than needed, never one less.
static NO_EMPTY_DEPENDENCIES: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Sets the nodes the next work captured on `stream` depends on (none: it starts the graph);
/// `programmatic`: the one dependency is a programmatic edge from a kernel node (the next
/// kernel may launch once every block of that one triggered or exited).
fn set_capture_dependencies(
    stream: sys::CUstream,
    deps: &mut [sys::CUgraphNode],
    programmatic: bool,
) -> Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    if deps.is_empty() && NO_EMPTY_DEPENDENCIES.load(Relaxed) {
        return Ok(());
    }
    let edge = sys::CUgraphEdgeData {
        from_port: sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8,
        to_port: 0,
        type_: sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8,
        reserved: [0; 5],
    };
    let data = if programmatic && deps.len() == 1 {
        &edge as *const sys::CUgraphEdgeData
    } else {
        std::ptr::null()
    };
    // SAFETY: the stream is capturing; `deps` are nodes of its graph (the tails of ops
    // captured before); `data` is null (full dependencies) or one edge for one dependency.
    unsafe {
        sys::cuStreamUpdateCaptureDependencies_v2(
            stream,
            deps.as_mut_ptr(),
            data,
            deps.len(),
            sys::CUstreamUpdateCaptureDependencies_flags_enum::CU_STREAM_SET_CAPTURE_DEPENDENCIES
                as u32,
        )
    }
    .result()
    .or_else(|e| {
        if deps.is_empty() && e.0 == sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE {
            NO_EMPTY_DEPENDENCIES.store(true, Relaxed);
            tracing::debug!("graphed: the driver refuses an empty capture dependency set; roots follow the op before");
            return Ok(());
        }
        Err(Error::Lower {
            backend: NAME,
            reason: format!("setting capture dependencies: {e}"),
        })
    })
}

/// The nodes the next work captured on `stream` would depend on: the last nodes of the work
/// captured so far (as set by [`set_capture_dependencies`] and extended by each node since).
fn capture_dependencies(stream: sys::CUstream) -> Result<Vec<sys::CUgraphNode>> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id: sys::cuuint64_t = 0;
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    let mut deps: *const sys::CUgraphNode = std::ptr::null();
    let mut edges: *const sys::CUgraphEdgeData = std::ptr::null();
    let mut n = 0usize;
    // SAFETY: out-pointers to locals; the driver's `deps` array stays valid until the next
    // call on the stream, and is copied before that.
    unsafe {
        sys::cuStreamGetCaptureInfo_v3(
            stream,
            &mut status,
            &mut id,
            &mut graph,
            &mut deps,
            &mut edges,
            &mut n,
        )
    }
    .result()
    .map_err(|e| Error::Lower {
        backend: NAME,
        reason: format!("reading capture dependencies: {e}"),
    })?;
    if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE {
        return Err(Error::Lower {
            backend: NAME,
            reason: format!("the capture stopped while issuing the plan ({status:?})"),
        });
    }
    if n == 0 || deps.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: the driver returned `n` valid node handles at `deps`.
    Ok(unsafe { std::slice::from_raw_parts(deps, n) }.to_vec())
}

/// Nodes of a graph by type.
#[derive(Debug, Default, Clone, Copy)]
struct Census {
    /// Kernel nodes running one of the plan's functions.
    kernels: usize,
    /// Kernel nodes running any other function (a library's).
    library_kernels: usize,
    copies: usize,
    /// Memory allocation and free nodes (never allowed).
    allocs: usize,
    /// Every other type (memsets, events, …).
    other: usize,
}

/// Nodes of a graph by type; kernel nodes split by whether they run one of `ours`.
fn census(graph: sys::CUgraph, ours: &[sys::CUfunction]) -> Result<Census> {
    let mut n = 0usize;
    // SAFETY: querying the node count of a valid graph.
    unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut n) }
        .result()
        .map_err(err)?;
    if n == 0 {
        return Ok(Census::default());
    }
    let mut nodes = vec![std::ptr::null_mut(); n];
    // SAFETY: `nodes` has room for `n` handles.
    unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut n) }
        .result()
        .map_err(err)?;
    let mut c = Census::default();
    for node in nodes.into_iter().take(n) {
        let mut ty = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: `node` belongs to `graph`.
        unsafe { sys::cuGraphNodeGetType(node, &mut ty) }
            .result()
            .map_err(err)?;
        match ty {
            sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL => {
                // SAFETY: a zeroed parameter block is valid to be filled in by the driver.
                let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
                // SAFETY: `node` is a kernel node of `graph`.
                unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) }
                    .result()
                    .map_err(err)?;
                if ours.contains(&p.func) {
                    c.kernels += 1;
                } else {
                    c.library_kernels += 1;
                }
            }
            sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMCPY => c.copies += 1,
            sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC
            | sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE => c.allocs += 1,
            _ => c.other += 1,
        }
    }
    Ok(c)
}

/// A kernel node of a recording's graph.
#[derive(Clone, Copy)]
struct NodeHandle(sys::CUgraphNode);
// SAFETY: node handles may be used from any thread; use is serialised by the backend lock.
unsafe impl Send for NodeHandle {}

/// Each launch's kernel node, told by its first parameter: the address of its argument block
/// in the arena, which is unique to the launch.
fn launch_nodes(
    graph: sys::CUgraph,
    arena: sys::CUdeviceptr,
    offsets: &[usize],
    ours: &[sys::CUfunction],
) -> Result<Vec<Option<NodeHandle>>> {
    let mut out = vec![None; offsets.len()];
    let mut n = 0usize;
    // SAFETY: querying the node count of a valid graph.
    unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut n) }
        .result()
        .map_err(err)?;
    let mut nodes = vec![std::ptr::null_mut(); n];
    if n > 0 {
        // SAFETY: `nodes` has room for `n` handles.
        unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut n) }
            .result()
            .map_err(err)?;
    }
    for node in nodes.into_iter().take(n) {
        let mut ty = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: `node` belongs to `graph`.
        unsafe { sys::cuGraphNodeGetType(node, &mut ty) }
            .result()
            .map_err(err)?;
        if ty != sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
            continue;
        }
        // SAFETY: a zeroed parameter block is valid to be filled in by the driver.
        let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
        // SAFETY: `node` is a kernel node of `graph`.
        unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) }
            .result()
            .map_err(err)?;
        if !ours.contains(&p.func) || p.kernelParams.is_null() {
            continue;
        }
        // SAFETY: our kernels' first parameter is the argument block's device address (see
        // `issue_on`); the driver keeps the parameter values the capture recorded.
        let first = unsafe { *(*p.kernelParams as *const sys::CUdeviceptr) };
        let word = (first.wrapping_sub(arena) / 4) as usize;
        if let Ok(i) = offsets.binary_search(&word) {
            out[i] = Some(NodeHandle(node));
        }
    }
    Ok(out)
}

/// The recording of a plan that runs nothing.
struct EmptyReplay {
    lock: Arc<Mutex<Health>>,
}

impl Recording for EmptyReplay {
    fn rebind(
        &mut self,
        _plan: &Plan,
        _ops: &[usize],
        _words: &[(usize, usize, u32)],
    ) -> Result<()> {
        Ok(()) // nothing runs, nothing to re-point
    }
    fn replay(&mut self, _scalars: &[(usize, usize, u32)]) -> Result<()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner()).check()
    }
    fn launches(&self) -> usize {
        0
    }
}

struct GraphHandle(sys::CUgraph);
struct ExecHandle(sys::CUgraphExec);
// SAFETY: graph handles may be used from any thread; use is serialised by the backend lock.
unsafe impl Send for GraphHandle {}
// SAFETY: as above.
unsafe impl Send for ExecHandle {}

/// A plan lowered to an instantiated CUDA graph. Per replay: the changed argument words are
/// copied into the arena on the stream, then the graph is launched.
struct CudaReplay {
    ctx: Arc<CudaContext>,
    stream: usize,
    lock: Arc<Mutex<Health>>,
    arena: Vec<u32>,
    offsets: Vec<usize>,
    arena_mem: CudaMem,
    exec: ExecHandle,
    graph: GraphHandle,
    launches: usize,
    /// Arena offsets of the products' [flag, α, β] blocks.
    gemm_blocks: Vec<usize>,
    /// The kernel node of each argument block's launch (none for products, empty grids).
    nodes: Vec<Option<NodeHandle>>,
    /// The captured collectives' communicators and buffers, kept until the graph is destroyed
    /// (fields drop after `Drop::drop`): NCCL's resources for captured work, and the buffers
    /// it may have registered, must outlive the graph.
    #[cfg(feature = "nccl")]
    _collectives: Vec<crate::dist::AllReduce>,
}

impl CudaReplay {
    /// Points the kernel node of launch `args` at `bindings` (its argument block stays).
    fn set_node(&self, args: usize, bindings: &[RawView]) -> Result<()> {
        let Some(node) = self.nodes[args] else {
            return Err(Error::Lower {
                backend: NAME,
                reason: format!("launch {args} has no kernel node to re-point"),
            });
        };
        // SAFETY: a zeroed parameter block is valid to be filled in by the driver.
        let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
        // SAFETY: `node` is a kernel node of the graph `exec` was instantiated from.
        unsafe { sys::cuGraphKernelNodeGetParams_v2(node.0, &mut p) }
            .result()
            .map_err(err)?;
        let mut ptrs: Vec<sys::CUdeviceptr> = Vec::with_capacity(bindings.len() + 1);
        ptrs.push(self.arena_mem.ptr + self.offsets[args] as u64 * 4);
        ptrs.extend(bindings.iter().map(ptr));
        let mut params: Vec<*mut c_void> = ptrs
            .iter_mut()
            .map(|p| p as *mut sys::CUdeviceptr as *mut c_void)
            .collect();
        p.kernelParams = params.as_mut_ptr();
        p.extra = std::ptr::null_mut();
        // SAFETY: `params` holds one device pointer per kernel parameter, as at capture (the
        // driver copies the values); the change applies to launches after this call only.
        unsafe { sys::cuGraphExecKernelNodeSetParams_v2(self.exec.0, node.0, &p) }
            .result()
            .map_err(|e| Error::Lower {
                backend: NAME,
                reason: format!("re-pointing a kernel node: {e}"),
            })?;
        // The template too, so its DOT and later reads agree with what runs.
        // SAFETY: as above, on the graph's own node.
        let _ = unsafe { sys::cuGraphKernelNodeSetParams_v2(node.0, &p) };
        Ok(())
    }
}

impl Recording for CudaReplay {
    fn rebind(&mut self, plan: &Plan, ops: &[usize], words: &[(usize, usize, u32)]) -> Result<()> {
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        g.check()?;
        let _bound = Bound::to(&self.ctx)?;
        for &i in ops {
            match &plan.ops[i] {
                Op::Launch {
                    grid,
                    args,
                    bindings,
                    ..
                } => {
                    if grid.contains(&0) {
                        continue; // not in the graph
                    }
                    let views: Vec<RawView> = bindings.iter().map(|b| b.view.clone()).collect();
                    self.set_node(*args, &views)?;
                }
                _ => {
                    return Err(Error::Lower {
                        backend: NAME,
                        reason: "only kernel launches are re-pointed (a copy, product or collective binds the buffer)".into(),
                    })
                }
            }
        }
        let (lo, hi) = super::patch_args(&mut self.arena, &self.offsets, words);
        if lo < hi {
            // SAFETY: the range lies inside the arena; stream-ordered after earlier replays.
            unsafe {
                result::memcpy_htod_async(
                    self.arena_mem.ptr + lo as u64 * 4,
                    &self.arena[lo..hi],
                    self.stream as sys::CUstream,
                )
            }
            .map_err(|e| g.note(e))?;
        }
        Ok(())
    }
    fn replay(&mut self, scalars: &[(usize, usize, u32)]) -> Result<()> {
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        g.check()?;
        let _bound = Bound::to(&self.ctx)?;
        let stream = self.stream as sys::CUstream;
        let (mut lo, mut hi) = super::patch_args(&mut self.arena, &self.offsets, scalars);
        // A product's β follows its accumulate flag.
        for &o in &self.gemm_blocks {
            let beta = beta_bits(self.arena[o]);
            if self.arena[o + 2] != beta {
                self.arena[o + 2] = beta;
                lo = lo.min(o + 2);
                hi = hi.max(o + 3);
            }
        }
        if lo < hi {
            // SAFETY: the range lies inside the arena; pageable memory is staged before return.
            unsafe {
                result::memcpy_htod_async(
                    self.arena_mem.ptr + lo as u64 * 4,
                    &self.arena[lo..hi],
                    stream,
                )
            }
            .map_err(err)?;
        }
        // SAFETY: `exec` is a valid instantiated graph; every buffer it touches is pinned by
        // the plan that owns this recording.
        unsafe { result::graph::launch(self.exec.0, stream) }.map_err(|e| g.note(e))
    }
    fn launches(&self) -> usize {
        self.launches
    }
    fn debug_dot(&self, path: &std::path::Path) -> Result<bool> {
        let c = std::ffi::CString::new(path.to_string_lossy().as_bytes()).map_err(|_| {
            Error::Device {
                backend: NAME,
                reason: "a path with a NUL byte".into(),
            }
        })?;
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let _bound = Bound::to(&self.ctx)?;
        // SAFETY: the graph is valid while this recording lives; the path is NUL-terminated.
        unsafe { sys::cuGraphDebugDotPrint(self.graph.0, c.as_ptr(), 0) }
            .result()
            .map_err(err)?;
        Ok(true)
    }
}

impl Drop for CudaReplay {
    fn drop(&mut self) {
        if let Ok(_bound) = Bound::to(&self.ctx) {
            // SAFETY: destroyed once; the holder drained the stream before dropping us.
            unsafe {
                let _ = result::graph::exec_destroy(self.exec.0);
                let _ = result::graph::destroy(self.graph.0);
            }
        }
    }
}
