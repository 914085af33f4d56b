//! Devices: backend selection (`GRAPHED_BACKEND`, `GRAPHED_REQUIRE`), allocation, transfers,
//! and eager launches.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::backend::{Backend, BackendKind};
use crate::buffer::{Buffer, RawBuffer, RawView};
use crate::checked::DeviceOptions;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::kernel::{ErasedScalar, Grid, KernelArg, KernelDef, Launch, ParamType};

static NEXT_DEVICE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The device whose step this thread is recording (0: none).
    static RECORDING: Cell<u64> = const { Cell::new(0) };
    /// The holders whose body this thread is running eagerly, innermost last: their static
    /// slots may be used directly there and nowhere else.
    static BODIES: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether this thread is recording a step (on any device): nothing but the step context may
/// touch a device then, or its work would run once, during recording, and never on replay.
pub(crate) fn thread_records() -> bool {
    RECORDING.with(|r| r.get() != 0)
}

/// Restores the thread's recording state when dropped, also when a body panics.
pub(crate) struct RecordingGuard {
    prev: u64,
}

impl Drop for RecordingGuard {
    fn drop(&mut self) {
        RECORDING.with(|r| r.set(self.prev));
    }
}

/// Marks a holder's eager body as running on this thread until dropped (also on unwind).
pub(crate) struct BodyGuard;

impl BodyGuard {
    pub(crate) fn enter(holder: u64) -> BodyGuard {
        BODIES.with(|b| b.borrow_mut().push(holder));
        BodyGuard
    }
}

impl Drop for BodyGuard {
    fn drop(&mut self) {
        BODIES.with(|b| {
            b.borrow_mut().pop();
        });
    }
}

/// Refuses a step's static slot (an output, workspace or input slot) outside that step's
/// eager body: a clone of it kept past the body would read or write another step's values.
pub(crate) fn check_slot(view: &RawView, what: &'static str) -> Result<()> {
    let Some((holder, step)) = view.buf.slot else {
        return Ok(());
    };
    if BODIES.with(|b| b.borrow().contains(&holder)) {
        return Ok(());
    }
    Err(Error::StepSlot { step, what })
}

pub(crate) struct DeviceInner {
    pub(crate) id: u64,
    pub(crate) backend: Box<dyn Backend>,
    pub(crate) allocated: AtomicU64,
    pub(crate) peak: AtomicU64,
    /// Products may go to the backend's vendor BLAS (see [`Device::set_vendor_blas`]).
    pub(crate) vendor_blas: AtomicBool,
    /// Vendor products may fuse their epilogue (see [`Device::set_vendor_fused`]).
    pub(crate) vendor_fused: AtomicBool,
    /// Vendor products run their timed-fastest algorithm (see [`Device::set_vendor_tune`]).
    pub(crate) vendor_tune: AtomicBool,
    /// Vendor products run a one-pass algorithm where offered ([`Device::set_vendor_one_pass`]).
    pub(crate) vendor_one_pass: AtomicBool,
    /// The size from which the kernel library routes products to the vendor BLAS, when set
    /// (0: the library's rule; see [`Device::set_vendor_min_macs`]).
    pub(crate) vendor_min_macs: AtomicU64,
    /// The kernel library may pick its subgroup variants (see [`Device::set_library_subgroups`]).
    pub(crate) library_subgroups: AtomicBool,
    /// The kernel library's products may split `k` to fill the multiprocessors (see
    /// [`Device::set_split_fill`]).
    pub(crate) split_fill: AtomicBool,
    /// The kernel library's split products sum their parts in the split launch (see
    /// [`Device::set_split_serial`]).
    pub(crate) split_serial: AtomicBool,
}

/// A handle to one device on one backend. Cheap to clone; buffers keep their device alive.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({}: {})", self.kind(), self.adapter())
    }
}

/// Which backends `GRAPHED_REQUIRE` makes mandatory (a missing one is an error, not a skip).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Required {
    /// `wgpu`.
    pub wgpu: bool,
    /// `cuda`.
    pub cuda: bool,
    /// `nvrtc` (CUDA C compilation, no GPU needed).
    pub nvrtc: bool,
    /// `nccl`: NCCL must load and a CUDA communicator of one rank must work.
    pub nccl: bool,
    /// `nccl2`: at least two CUDA devices, for multi-rank tests.
    pub nccl2: bool,
}

impl Required {
    /// Reads `GRAPHED_REQUIRE` (comma-separated subset of `wgpu,cuda,nvrtc,nccl,nccl2`).
    pub fn from_env() -> Result<Required> {
        let mut r = Required::default();
        let Ok(v) = std::env::var("GRAPHED_REQUIRE") else {
            return Ok(r);
        };
        for part in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match part {
                "wgpu" => r.wgpu = true,
                "cuda" => r.cuda = true,
                "nvrtc" => r.nvrtc = true,
                "nccl" => r.nccl = true,
                "nccl2" => r.nccl2 = true,
                "host" => {}
                _ => {
                    return Err(Error::BadEnv {
                        var: "GRAPHED_REQUIRE",
                        value: v.clone(),
                        hint: "a comma-separated subset of wgpu,cuda,nvrtc,nccl,nccl2",
                    })
                }
            }
        }
        Ok(r)
    }
    /// Whether `kind` is required.
    pub fn requires(&self, kind: BackendKind) -> bool {
        match kind {
            BackendKind::Host => false,
            BackendKind::Wgpu => self.wgpu,
            BackendKind::Cuda => self.cuda,
        }
    }
}

/// The process's one device of a backend, opened on first use. A failure is kept and returned
/// as it was (the error already names the backend) to every later caller.
fn shared(
    slot: &'static OnceLock<Result<Device>>,
    open: impl FnOnce() -> Result<Box<dyn Backend>>,
) -> Result<Device> {
    slot.get_or_init(|| open().map(Device::from_backend))
        .clone()
}

impl Device {
    fn from_backend(backend: Box<dyn Backend>) -> Device {
        let kind = backend.kind();
        Device {
            inner: Arc::new(DeviceInner {
                id: NEXT_DEVICE.fetch_add(1, Ordering::Relaxed),
                allocated: AtomicU64::new(0),
                peak: AtomicU64::new(0),
                vendor_blas: AtomicBool::new(vendor_blas_from_env()),
                vendor_fused: AtomicBool::new(switch_from_env("GRAPHED_VENDOR_FUSED")),
                vendor_tune: AtomicBool::new(
                    kind == BackendKind::Cuda && switch_on_from_env("GRAPHED_VENDOR_TUNE"),
                ),
                vendor_one_pass: AtomicBool::new(
                    kind == BackendKind::Cuda && switch_from_env("GRAPHED_VENDOR_ONE_PASS"),
                ),
                library_subgroups: AtomicBool::new(switch_from_env("GRAPHED_SUBGROUPS")),
                split_fill: AtomicBool::new(switch_from_env("GRAPHED_SPLIT_FILL")),
                split_serial: AtomicBool::new(
                    kind == BackendKind::Cuda && switch_on_from_env("GRAPHED_SPLIT_SERIAL"),
                ),
                vendor_min_macs: AtomicU64::new(
                    std::env::var("GRAPHED_VENDOR_MIN_MACS")
                        .ok()
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0),
                ),
                backend,
            }),
        }
    }

    /// The host backend (always available). One shared device per process.
    pub fn host() -> Device {
        static HOST: OnceLock<Device> = OnceLock::new();
        HOST.get_or_init(|| {
            Device::from_backend(Box::new(crate::backend::host::HostBackend::default()))
        })
        .clone()
    }

    /// A new host device whose kernels emulate subgroups of `size` invocations (a power of
    /// two from 4 to 128; [`Device::host`] emulates 32, CUDA's warp), e.g. the size of a
    /// wgpu adapter whose results a test compares with the host's.
    pub fn host_with_subgroup_size(size: u32) -> Result<Device> {
        if !size.is_power_of_two() || !(4..=128).contains(&size) {
            return Err(Error::Shape(format!(
                "a subgroup size is a power of two from 4 to 128, not {size}"
            )));
        }
        Ok(Device::from_backend(Box::new(
            crate::backend::host::HostBackend {
                subgroup_size: size,
            },
        )))
    }

    /// The wgpu backend on the best adapter. One shared device per process.
    pub fn wgpu() -> Result<Device> {
        static WGPU: OnceLock<Result<Device>> = OnceLock::new();
        shared(&WGPU, || {
            Ok(Box::new(crate::backend::wgpu::WgpuBackend::open(
                DeviceOptions::from_env()?.checked,
                true,
            )?))
        })
    }

    /// A fresh wgpu device of its own (its own queue), e.g. one per thread.
    pub fn wgpu_new() -> Result<Device> {
        Device::open_new_with(BackendKind::Wgpu, DeviceOptions::from_env()?)
    }

    #[doc(hidden)]
    /// Test hook (`testing` feature): a fresh wgpu device created without `shader-f16`, as on
    /// an adapter that lacks it.
    #[cfg(feature = "testing")]
    pub fn __wgpu_without_shader_f16() -> Result<Device> {
        Ok(Device::from_backend(Box::new(
            crate::backend::wgpu::WgpuBackend::open(false, false)?,
        )))
    }

    #[doc(hidden)]
    /// Test hook (`testing` feature): a fresh wgpu device created without `SUBGROUP`, as on
    /// an adapter that lacks it.
    #[cfg(feature = "testing")]
    pub fn __wgpu_without_subgroups() -> Result<Device> {
        Ok(Device::from_backend(Box::new(
            crate::backend::wgpu::WgpuBackend::open_with(false, true, false)?,
        )))
    }

    /// The CUDA backend on GPU 0 (needs `--features cuda` and an NVIDIA driver).
    pub fn cuda() -> Result<Device> {
        #[cfg(feature = "cuda")]
        {
            static CUDA: OnceLock<Result<Device>> = OnceLock::new();
            shared(&CUDA, || {
                Ok(Box::new(crate::backend::cuda::CudaBackend::open(
                    0,
                    DeviceOptions::from_env()?.checked,
                )?))
            })
        }
        #[cfg(not(feature = "cuda"))]
        Err(Error::Unavailable {
            backend: "cuda",
            reason: "graphed was built without `--features cuda`".into(),
        })
    }

    /// A new, unshared CUDA device on GPU `ordinal` (its own stream), e.g. one per rank of a
    /// data-parallel step.
    pub fn cuda_on(ordinal: usize) -> Result<Device> {
        #[cfg(feature = "cuda")]
        {
            Ok(Device::from_backend(Box::new(
                crate::backend::cuda::CudaBackend::open(
                    ordinal,
                    DeviceOptions::from_env()?.checked,
                )?,
            )))
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = ordinal;
            Device::cuda()
        }
    }

    /// The number of CUDA GPUs the driver reports (0 without `--features cuda` or a driver).
    pub fn cuda_count() -> usize {
        #[cfg(feature = "cuda")]
        {
            crate::backend::cuda::device_count()
        }
        #[cfg(not(feature = "cuda"))]
        0
    }

    /// Opens a new, unshared device of `kind` (its own queue or stream, its own memory
    /// accounting), e.g. one per thread or per test.
    pub fn open_new(kind: BackendKind) -> Result<Device> {
        Device::open_new_with(kind, DeviceOptions::from_env()?)
    }

    /// Opens a new, unshared device of `kind` with `options` (whatever the environment says),
    /// e.g. a checked device beside an unchecked one.
    pub fn open_new_with(kind: BackendKind, options: DeviceOptions) -> Result<Device> {
        match kind {
            BackendKind::Host => Ok(Device::from_backend(Box::new(
                crate::backend::host::HostBackend::default(),
            ))),
            BackendKind::Wgpu => Ok(Device::from_backend(Box::new(
                crate::backend::wgpu::WgpuBackend::open(options.checked, true)?,
            ))),
            #[cfg(feature = "cuda")]
            BackendKind::Cuda => Ok(Device::from_backend(Box::new(
                crate::backend::cuda::CudaBackend::open(0, options.checked)?,
            ))),
            #[cfg(not(feature = "cuda"))]
            BackendKind::Cuda => {
                let _ = options;
                Device::cuda()
            }
        }
    }

    /// Opens `kind` (one shared device per backend and process).
    pub fn open(kind: BackendKind) -> Result<Device> {
        match kind {
            BackendKind::Host => Ok(Device::host()),
            BackendKind::Wgpu => Device::wgpu(),
            BackendKind::Cuda => Device::cuda(),
        }
    }

    /// The best available device: `GRAPHED_BACKEND` if set, else CUDA (with the feature and a
    /// driver), then wgpu, then host. A backend listed in `GRAPHED_REQUIRE` that fails to open
    /// is an error instead of a fallback.
    pub fn best() -> Result<Device> {
        let required = Required::from_env()?;
        // Not in the fallback order below, so not "tried": a required CUDA fails here.
        if required.cuda && !cfg!(feature = "cuda") {
            return Device::cuda();
        }
        if let Ok(v) = std::env::var("GRAPHED_BACKEND") {
            return Device::open(parse_backend(&v)?);
        }
        let order: &[BackendKind] = if cfg!(feature = "cuda") {
            &[BackendKind::Cuda, BackendKind::Wgpu]
        } else {
            &[BackendKind::Wgpu]
        };
        for &kind in order {
            match Device::open(kind) {
                Ok(d) => return Ok(d),
                Err(e) if required.requires(kind) => return Err(e),
                Err(e) => tracing::info!("graphed: {e}; trying the next backend"),
            }
        }
        Ok(Device::host())
    }

    /// Whether every slice and workgroup-array index of this device's kernels is checked:
    /// always on the host backend; on GPU backends in checked mode (`GRAPHED_CHECKED=1`,
    /// [`DeviceOptions::checked`]), where an out-of-range access is reported as
    /// [`Error::Fault`] at the next [`Device::synchronize`] or readback.
    pub fn checked(&self) -> bool {
        self.kind() == BackendKind::Host || self.inner.backend.checked()
    }

    /// The backend kind.
    pub fn kind(&self) -> BackendKind {
        self.inner.backend.kind()
    }

    /// A description of the adapter or GPU.
    pub fn adapter(&self) -> String {
        self.inner.backend.adapter()
    }

    /// The subgroup size kernels see in `subgroup_size()`: 32 on CUDA, the host's chosen
    /// size (32 unless [`Device::host_with_subgroup_size`]), the adapter's on wgpu. `None`
    /// where kernels with subgroup operations do not run (a wgpu adapter without subgroups)
    /// or the driver picks the size per pipeline from a range (the adapter reports
    /// `min < max`): there kernels run, but the size is known only inside them.
    pub fn subgroup_size(&self) -> Option<u32> {
        self.inner.backend.subgroup_size()
    }

    /// The device's multiprocessors (CUDA: `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`, 132 on
    /// an H200). `None` on wgpu, which reports no count of compute units, and on the host,
    /// which runs a launch's workgroups one after another.
    pub fn multiprocessors(&self) -> Option<u32> {
        self.inner.backend.multiprocessors()
    }

    /// The most workgroup memory, in bytes, one kernel may declare on this device (its
    /// `shared` arrays together): 48 KiB on CUDA (static shared memory), the adapter's
    /// `max_compute_workgroup_storage_size` on wgpu, unbounded on the host. A kernel that
    /// declares more fails to launch with [`Error::Limit`].
    pub fn workgroup_bytes_max(&self) -> u32 {
        self.inner.backend.workgroup_bytes_max()
    }

    /// Whether `kernel`'s workgroup memory on this device — its arrays on CUDA
    /// ([`KernelDef::workgroup_bytes`]), with the portable MMA form's exchange elsewhere
    /// ([`KernelDef::portable_bytes`]) — is within [`Device::workgroup_bytes_max`], so that
    /// its launches are not refused with [`Error::Limit`] for it.
    pub fn fits_workgroup_memory(&self, kernel: &KernelDef) -> bool {
        let bytes = match self.kind() {
            BackendKind::Cuda => kernel.workgroup_bytes,
            _ => kernel.portable_bytes(),
        };
        bytes <= self.workgroup_bytes_max()
    }

    /// The multiprocessors the kernel library's matrix products fill by splitting `k`
    /// (`graphed::kernels::matmul`'s rule): [`Device::multiprocessors`] unless switched off
    /// ([`Device::set_split_fill`], `GRAPHED_SPLIT_FILL=0`).
    pub fn split_fill(&self) -> Option<u32> {
        self.multiprocessors()
            .filter(|_| self.inner.split_fill.load(Ordering::Relaxed))
    }

    /// Lets the kernel library's matrix products split `k` so that small products fill the
    /// multiprocessors (on, the default) or not. A split adds the parts in another order
    /// than one pass, so set it before recording: a recording keeps the split it was made
    /// with, and eager runs follow the current setting.
    pub fn set_split_fill(&self, on: bool) {
        self.inner.split_fill.store(on, Ordering::Relaxed);
    }

    /// Whether the kernel library's products that split `k` sum their parts in the split
    /// launch itself — serial split-K: the last workgroup of each output tile to finish, told
    /// by a counter in device memory ([`Launch::counters`]), adds the parts in the order the
    /// second pass would, so the bits are the same — instead of a second launch. Off by
    /// default (`GRAPHED_SPLIT_SERIAL=1` switches it on on CUDA): on the H200 the MLP-S step
    /// replayed in 47.26 µs with it against 45.39 with the second launches (BENCHMARKS.md,
    /// session of 2026-12-02), although it was faster alone for the products of longest `k`.
    pub fn split_serial(&self) -> bool {
        self.inner.split_serial.load(Ordering::Relaxed)
    }

    /// Switches serial split-K ([`Device::split_serial`]) on or off. Like
    /// [`Device::set_split_fill`], set it before recording: a recording keeps the launches it
    /// was made with.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for `on` on wgpu: WGSL orders no non-atomic storage access of
    /// one workgroup against another's (its `storageBarrier()` is workgroup-scoped), so the
    /// last workgroup could read stale parts.
    pub fn set_split_serial(&self, on: bool) -> Result<()> {
        if on && self.kind() == BackendKind::Wgpu {
            return Err(Error::Unsupported {
                kernel: "matmul",
                backend: self.kind().name(),
                adapter: self.adapter(),
                feature: "a device-scope memory fence (serial split-K)",
                instead: "keep the two-launch split (`set_split_serial(false)`, the default)",
            });
        }
        self.inner.split_serial.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Whether kernels that compute with `dtype` run on this device. Buffers of every type
    /// work everywhere (upload, download, fill, copy); what differs is arithmetic: `f16`
    /// kernels with `f16` slices need WGSL's `shader-f16` on wgpu (asked for whenever the
    /// adapter has it: the slices are `array<f16>`), and `bf16` kernels run everywhere (WGSL
    /// has no `bf16`: the kernel language keeps it in 32-bit words, see the README).
    pub fn supports_kernels_of(&self, dtype: DType) -> bool {
        match dtype {
            DType::F16 => self.inner.backend.shader_f16(),
            DType::BF16 => true,
            DType::F32 | DType::I32 | DType::U32 | DType::Bool => true,
        }
    }

    /// Identity of this device handle's device.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Bytes currently allocated on this device by graphed.
    pub fn allocated_bytes(&self) -> u64 {
        self.inner.allocated.load(Ordering::Relaxed)
    }

    /// The most bytes allocated at once since the device opened or [`Device::reset_peak`].
    pub fn peak_allocated_bytes(&self) -> u64 {
        self.inner.peak.load(Ordering::Relaxed)
    }

    /// Restarts [`Device::peak_allocated_bytes`] from the current allocation.
    pub fn reset_peak(&self) {
        self.inner
            .peak
            .store(self.allocated_bytes(), Ordering::Relaxed);
    }

    /// (free, total) bytes of device memory as the driver reports them (CUDA only).
    pub fn memory_info(&self) -> Option<(u64, u64)> {
        self.inner.backend.memory_info()
    }

    /// Waits for all work queued on this device. A fault that made the device unusable (a
    /// CUDA kernel's illegal address, say) is reported here, the first time and every time.
    /// In checked mode, a kernel's out-of-range access since the last report is
    /// [`Error::Fault`] here (and at readbacks), once.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.backend.drain()?;
        self.inner.backend.health()
    }

    /// Waits until nothing queued on the device can still run, so memory may be released: a
    /// device that faulted runs nothing more, so this succeeds there (the fault itself is
    /// reported by [`Device::synchronize`] and every other operation).
    pub(crate) fn drain_for_release(&self) -> Result<()> {
        self.inner.backend.drain()
    }

    #[doc(hidden)]
    /// Test hook (`testing` feature): the device reports one validation error (wgpu; nothing
    /// elsewhere).
    #[cfg(feature = "testing")]
    pub fn __inject_validation_error(&self) {
        self.inner.backend.inject_validation_error();
    }

    /// Puts this thread in recording mode for this device until the guard drops (the
    /// previous mode comes back then, also when the body panics).
    pub(crate) fn enter_recording(&self) -> RecordingGuard {
        RecordingGuard {
            prev: RECORDING.with(|r| r.replace(self.inner.id)),
        }
    }

    pub(crate) fn alloc_raw(&self, dtype: DType, len: usize) -> Result<Arc<RawBuffer>> {
        self.alloc_owned(dtype, len, None)
    }

    /// An allocation of `len` elements of `dtype` that is a static slot of holder `owner`
    /// (id, step name).
    pub(crate) fn alloc_slot(
        &self,
        dtype: DType,
        len: usize,
        owner: (u64, &'static str),
    ) -> Result<Arc<RawBuffer>> {
        self.alloc_owned(dtype, len, Some(owner))
    }

    fn alloc_owned(
        &self,
        dtype: DType,
        len: usize,
        slot: Option<(u64, &'static str)>,
    ) -> Result<Arc<RawBuffer>> {
        self.alloc_words(dtype, len, slot, false)
    }

    /// A zeroed buffer for one eager library call from the backend's scratch allocator (on
    /// CUDA in stream order: no device-wide wait when it is freed).
    fn scratch_buffer<T: Element>(&self, len: usize) -> Result<Buffer<T>> {
        if thread_records() {
            return Err(Error::AllocationInRecording);
        }
        Ok(Buffer::from_raw(
            self.alloc_words(T::DTYPE, len, None, true)?,
            0,
            len,
        ))
    }

    /// `alloc_owned`'s allocation; `scratch`: from the backend's scratch allocator.
    fn alloc_words(
        &self,
        dtype: DType,
        len: usize,
        slot: Option<(u64, &'static str)>,
        scratch: bool,
    ) -> Result<Arc<RawBuffer>> {
        let words = crate::buffer::words_for(dtype, len);
        if crate::buffer::word_bytes(words).is_none() {
            return Err(Error::Limit {
                backend: self.kind().name(),
                what: format!("bytes of a buffer of {len} {}-byte elements", dtype.size()),
                asked: words as u128 * 4,
                limit: isize::MAX as u128,
            });
        }
        if crate::faults::take_alloc_failure(slot.is_some()) {
            return Err(Error::OutOfMemory {
                backend: self.kind().name(),
                bytes: Some(words as u64 * 4),
            });
        }
        let mem = if scratch {
            self.inner.backend.alloc_scratch(words)?
        } else {
            self.inner.backend.alloc(words)?
        };
        let data_bytes = len as u64 * dtype.size() as u64;
        Ok(Arc::new(RawBuffer::new(
            self.clone(),
            words,
            data_bytes,
            mem,
            slot,
        )))
    }

    /// A zeroed buffer of `len` elements (16-bit elements two to a 32-bit word: an odd count
    /// allocates a whole last word).
    pub fn alloc<T: Element>(&self, len: usize) -> Result<Buffer<T>> {
        if thread_records() {
            return Err(Error::AllocationInRecording);
        }
        Ok(Buffer::from_raw(self.alloc_raw(T::DTYPE, len)?, 0, len))
    }

    /// A buffer holding `data`.
    pub fn upload<T: Element>(&self, data: &[T]) -> Result<Buffer<T>> {
        let b = self.alloc::<T>(data.len())?;
        b.write(data)?;
        Ok(b)
    }

    /// The element bits of `view` (one element's in each `u32`).
    pub(crate) fn read_elements(&self, view: &RawView) -> Result<Vec<u32>> {
        if thread_records() {
            return Err(Error::ReadbackInRecording("Buffer::to_host"));
        }
        check_slot(view, "to_host")?;
        crate::packed::read(self.backend(), view)
    }

    /// Reads a step's output (an [`crate::Out`]): a slot, read through the borrow its call
    /// handed out.
    pub(crate) fn read_output(&self, view: &RawView) -> Result<Vec<u32>> {
        if thread_records() {
            return Err(Error::ReadbackInRecording("Out::to_host"));
        }
        crate::packed::read(self.backend(), view)
    }

    /// Writes element bits (one element's in each `u32`) into `view`.
    pub(crate) fn write_elements(&self, view: &RawView, bits: &[u32]) -> Result<()> {
        if thread_records() {
            return Err(Error::ReadbackInRecording(
                "Buffer::write (a host transfer)",
            ));
        }
        check_slot(view, "write")?;
        crate::packed::write(self, view, bits)
    }

    pub(crate) fn fill_elements(&self, view: &RawView, bits: u32) -> Result<()> {
        crate::packed::fill(view, bits, &mut |k, g, a| self.launch(k, g, a))
    }

    pub(crate) fn copy_elements(&self, src: &RawView, dst: &RawView) -> Result<()> {
        check_slot(src, "copy")?;
        self.copy_from_output(src, dst)
    }

    /// A copy whose source may be a step's output (an [`crate::Out`] being copied out).
    pub(crate) fn copy_from_output(&self, src: &RawView, dst: &RawView) -> Result<()> {
        if thread_records() {
            return Err(Error::LaunchOutsideRecording("copy"));
        }
        check_slot(dst, "copy")?;
        check_copy(src, dst)?;
        if src.buf.device.id() != self.id() {
            return Err(Error::Shape(
                "copy of buffers that live on another device".into(),
            ));
        }
        crate::packed::copy(
            src,
            dst,
            &mut |s, d| self.inner.backend.copy(s, d),
            &mut |k, g, a| crate::packed::launch_on(self, k, g, a),
        )
    }

    pub(crate) fn backend(&self) -> &dyn Backend {
        &*self.inner.backend
    }

    /// Whether `f32` matrix products ([`Launch::gemm`]) go to the backend's vendor BLAS:
    /// cuBLAS on CUDA when `libcublas` loads, never on host or wgpu. On by default;
    /// `GRAPHED_VENDOR_BLAS=0` turns it off for new devices.
    pub fn vendor_blas(&self) -> bool {
        self.routes_gemm(crate::blas::GemmTypes::F32)
    }

    /// Whether [`Launch::gemm`] runs products of `types` on this device (and returns `true`):
    /// through cuBLAS on CUDA while the vendor BLAS is on; on the host, half-precision
    /// products through [`crate::blas::reference`] whatever the switch (the oracle is no
    /// vendor library); never on wgpu. Loads the library on first use.
    pub fn routes_gemm(&self, types: crate::blas::GemmTypes) -> bool {
        let switch = self.inner.vendor_blas.load(Ordering::Relaxed)
            || self.inner.backend.kind() == BackendKind::Host;
        switch && self.inner.backend.blas(types)
    }

    /// Checks a vendor product (its operands, and a fused epilogue's vector and flag) and
    /// routes it: `None` where it does not go to the vendor library here (the vendor BLAS
    /// off, fusion off for a fused product ([`Device::set_vendor_fused`]), or no route for
    /// its types, epilogue or alignment), else its shape (marked tuned where
    /// [`Device::vendor_tune`] is on) and whether the call uses the library's shared
    /// workspace. The backend makes the library's plan here (timing the candidates of a tuned
    /// shape), so that lowering and later calls only look it up. Eager products and
    /// recordings ([`crate::Step`]) both route through it.
    pub(crate) fn route_product(
        &self,
        g: &crate::blas::Sgemm,
        [a, b, c]: [&RawView; 3],
        fused: Option<(crate::blas::Fused, &RawView)>,
    ) -> Result<Option<(crate::blas::GemmShape, bool)>> {
        g.check(self.id(), a, b, c)?;
        let mut shape = g.shape(a, c);
        if let Some((f, v)) = fused {
            g.check_fused(self.id(), f, v, [a, b, c])?;
            shape.fused = Some(f);
            shape.vector = v.dtype;
        }
        if !self.routes_gemm(shape.types) || (shape.fused.is_some() && !self.vendor_fused()) {
            return Ok(None);
        }
        shape.tuned = self.vendor_tune();
        shape.one_pass = self.vendor_one_pass();
        let views: Vec<&RawView> = [a, b, c].into_iter().chain(fused.map(|(_, v)| v)).collect();
        let align = crate::blas::alignment(&views);
        Ok(self
            .inner
            .backend
            .prepare_gemm(&shape, align)
            .map(|workspace| (shape, workspace)))
    }

    /// An eager product through the vendor BLAS, with `fused` and its vector when given
    /// ([`Launch::gemm`], [`Launch::gemm_fused`]).
    fn product(
        &self,
        g: &crate::blas::Sgemm,
        a: &RawView,
        b: &RawView,
        c: &RawView,
        fused: Option<(crate::blas::Fused, &RawView)>,
    ) -> Result<bool> {
        let Some((shape, _)) = self.route_product(g, [a, b, c], fused)? else {
            return Ok(false);
        };
        if thread_records() {
            return Err(Error::LaunchOutsideRecording("sgemm"));
        }
        for v in [a, b, c].into_iter().chain(fused.map(|(_, v)| v)) {
            check_slot(v, "a launch on the device")?;
        }
        let flag = g.accumulate.erase();
        if let ErasedScalar::Slot(..) = flag {
            return Err(Error::Launch {
                kernel: "sgemm",
                reason: "the accumulate flag is a per-step scalar of a step, used outside it"
                    .into(),
            });
        }
        let flag = flag.bits();
        self.inner
            .backend
            .sgemm(&shape, flag, a, b, c, fused.map(|(_, v)| v))
            .map(|()| true)
    }

    /// Whether products may fuse their bias, activation or bias gradient into the vendor
    /// BLAS call (cuBLASLt's epilogues on CUDA): on by default, `GRAPHED_VENDOR_FUSED=0` or
    /// [`Device::set_vendor_fused`] turns it off (the product and its epilogue then run as
    /// two ops, as on every other backend).
    pub fn vendor_fused(&self) -> bool {
        self.inner.vendor_fused.load(Ordering::Relaxed)
    }

    /// Whether vendor products run the fastest of the library's candidate algorithms for
    /// their shape, timed on the device on random operands when the shape is first used
    /// (cuBLASLt's heuristic's first 8, in three rounds each keeping its best; the
    /// heuristic's first kept unless another is over 2% faster), instead of the heuristic's
    /// first choice. Off by
    /// default: timed on zeroed operands it replayed MLP-M slower on the H200 (456.1 against
    /// 447.1 µs, session of 2026-12-02b); on random operands it matched the one-pass choice
    /// ([`Device::vendor_one_pass`]; 417.16 against 416.99 µs, session of 2026-12-02c).
    /// `GRAPHED_VENDOR_TUNE=1` or [`Device::set_vendor_tune`] turns it on (CUDA only). A choice
    /// is kept for the device's lifetime, so eager calls and recordings of a shape run the
    /// same kernel and replay equals eager bitwise; another process may time another
    /// candidate fastest, and its results then differ from this one's in the last bits (as
    /// with another library version).
    pub fn vendor_tune(&self) -> bool {
        self.inner.vendor_tune.load(Ordering::Relaxed)
    }

    /// Whether vendor products run the fastest of the first 8 algorithms among the library
    /// heuristic's first 32 that compute the product in one pass (timed on random operands
    /// as for [`Device::vendor_tune`], the first of them kept unless another is over 2%
    /// faster), where there are any, instead of the
    /// heuristic's first choice; unfused products then go through cuBLASLt too, instead of
    /// cuBLAS. On by default (CUDA only): for outputs of fewer tiles than multiprocessors the
    /// libraries' first choices split `k` and add the parts in a second launch using the
    /// shared workspace, so the graph orders them after every other library call, while a
    /// one-pass algorithm needs no workspace and runs beside the other products. On the
    /// H200 MLP-M replayed in 416.99 µs with it against 426.88 (fp32) and 171.34 against
    /// 181.55 (bf16); MLP-L's bf16 step in 2655.17 against 2643.30 (BENCHMARKS.md, session
    /// of 2026-12-02c). `GRAPHED_VENDOR_ONE_PASS=0` or [`Device::set_vendor_one_pass`] turns
    /// it off. A choice is kept for the device's lifetime, as for [`Device::vendor_tune`]
    /// (which, when on, decides instead): another process may time another candidate
    /// fastest, and its results then differ from this one's in the last bits.
    pub fn vendor_one_pass(&self) -> bool {
        self.inner.vendor_one_pass.load(Ordering::Relaxed)
    }

    /// One line per product plan the vendor library has made on this device (CUDA:
    /// cuBLASLt's, for fused, tuned or one-pass products): the shape, the operands'
    /// alignment, the chosen algorithm's id, tile, split-K parts and reduction scheme, and its
    /// workspace bytes. Empty elsewhere. A diagnostic, e.g. to see which products split `k`.
    pub fn vendor_plans(&self) -> Vec<String> {
        self.inner.backend.vendor_plans()
    }

    /// Switches the one-pass choice of vendor products on or off
    /// ([`Device::vendor_one_pass`]). Set it before recording, as [`Device::set_vendor_tune`].
    pub fn set_vendor_one_pass(&self, on: bool) {
        self.inner.vendor_one_pass.store(on, Ordering::Relaxed);
    }

    /// The number of multiply-adds from which the kernel library's automatic route sends a
    /// product to the vendor BLAS here, when set ([`Device::set_vendor_min_macs`],
    /// `GRAPHED_VENDOR_MIN_MACS=N`); `None`: the library's own rule
    /// (`graphed_kernels::matmul::Tile::Auto`).
    pub fn vendor_min_macs(&self) -> Option<u64> {
        Some(self.inner.vendor_min_macs.load(Ordering::Relaxed)).filter(|&n| n > 0)
    }

    /// Sets or clears ([`None`]) the size from which products go to the vendor BLAS
    /// ([`Device::vendor_min_macs`]). Set it before recording: a recording keeps the routes
    /// it was made with.
    pub fn set_vendor_min_macs(&self, macs: Option<u64>) {
        self.inner.vendor_min_macs.store(
            macs.unwrap_or(0).max(u64::from(macs.is_some())),
            Ordering::Relaxed,
        );
    }

    /// Switches tuning of vendor products on or off ([`Device::vendor_tune`]). Set it before
    /// recording: a recording keeps the algorithm it was made with, and eager runs follow the
    /// current setting.
    pub fn set_vendor_tune(&self, on: bool) {
        self.inner.vendor_tune.store(on, Ordering::Relaxed);
    }

    /// Switches the fused vendor route on or off ([`Device::vendor_fused`]). Set it before
    /// recording: a recording keeps the route it was made with, and eager runs follow the
    /// current setting (the fused and unfused routes may sum in another order).
    pub fn set_vendor_fused(&self, on: bool) {
        self.inner.vendor_fused.store(on, Ordering::Relaxed);
    }

    /// Switches routing of matrix products to the vendor BLAS on or off (off: the portable
    /// DSL kernels run on every backend). Set it before recording: a recording keeps the
    /// route it was made with, and eager runs follow the current setting, so switching
    /// between them breaks the bitwise equality of replay and eager.
    pub fn set_vendor_blas(&self, on: bool) {
        self.inner.vendor_blas.store(on, Ordering::Relaxed);
    }

    /// The subgroup size the kernel library's reductions use here: [`Device::subgroup_size`]
    /// unless switched off ([`Device::set_library_subgroups`], `GRAPHED_SUBGROUPS=0`); `None`
    /// makes them use their workgroup-memory variants, which give the same bits.
    pub fn library_subgroups(&self) -> Option<u32> {
        self.subgroup_size()
            .filter(|_| self.inner.library_subgroups.load(Ordering::Relaxed))
    }

    /// Lets the kernel library's reductions use subgroup operations (on, the default) or
    /// not. Both variants add in the same order, so the results are bitwise equal; a
    /// recording keeps the variant it was made with.
    pub fn set_library_subgroups(&self, on: bool) {
        self.inner.library_subgroups.store(on, Ordering::Relaxed);
    }
}

/// A switch that is off unless the variable `var` is `1`, `on`, `true` or `yes`.
fn switch_on_from_env(var: &str) -> bool {
    matches!(
        std::env::var(var).as_deref().map(str::trim),
        Ok("1" | "on" | "true" | "yes")
    )
}

/// A switch that is on unless the variable `var` is `0`, `off`, `false` or `no`.
fn switch_from_env(var: &str) -> bool {
    !matches!(
        std::env::var(var).as_deref().map(str::trim),
        Ok("0" | "off" | "false" | "no")
    )
}

/// `GRAPHED_VENDOR_BLAS`: `0`, `off`, `false` or `no` switch the vendor BLAS off.
fn vendor_blas_from_env() -> bool {
    switch_from_env("GRAPHED_VENDOR_BLAS")
}

pub(crate) fn fill_args(view: &RawView, bits: u32) -> [KernelArg; 2] {
    let mut v = view.clone();
    v.dtype = DType::U32;
    [
        KernelArg::Scalar(ErasedScalar::Const(DType::U32, bits)),
        KernelArg::Write(v),
    ]
}

pub(crate) fn check_copy(src: &RawView, dst: &RawView) -> Result<()> {
    if src.len != dst.len || src.dtype != dst.dtype {
        return Err(Error::Shape(format!(
            "copy of {} {} into {} {}",
            src.len,
            src.dtype.name(),
            dst.len,
            dst.dtype.name()
        )));
    }
    if src.buf.device.id() != dst.buf.device.id() {
        return Err(Error::Shape(
            "copy between buffers of different devices".into(),
        ));
    }
    if src.overlaps(dst) {
        return Err(Error::Shape("copy between overlapping views".into()));
    }
    Ok(())
}

pub(crate) fn parse_backend(v: &str) -> Result<BackendKind> {
    match v.trim() {
        "host" => Ok(BackendKind::Host),
        "wgpu" => Ok(BackendKind::Wgpu),
        "cuda" => Ok(BackendKind::Cuda),
        _ => Err(Error::BadEnv {
            var: "GRAPHED_BACKEND",
            value: v.into(),
            hint: "one of host, wgpu, cuda",
        }),
    }
}

/// A launch checked against its kernel: argument words and bound views.
pub(crate) struct BoundLaunch {
    pub grid: [u32; 3],
    pub args: Vec<u32>,
    pub views: Vec<RawView>,
    pub writes: Vec<bool>,
    /// (word, slot, dtype) of each per-step scalar.
    pub slots: Vec<(usize, usize)>,
}

/// Checks a launch (arity, types, device, grid, aliasing) and builds its argument block.
///
/// `run` is the step run launching (`None`: a launch on the device itself); a per-step scalar
/// of any other run is refused.
pub(crate) fn bind(
    device: &Device,
    kernel: &'static KernelDef,
    grid: Grid,
    args: &[KernelArg],
    run: Option<u64>,
) -> Result<BoundLaunch> {
    let fail = |reason: String| Error::Launch {
        kernel: kernel.name,
        reason,
    };
    if args.len() != kernel.params.len() {
        return Err(fail(format!(
            "{} arguments for {} parameters",
            args.len(),
            kernel.params.len()
        )));
    }
    let mut out = BoundLaunch {
        grid: grid.resolve(kernel.workgroup).map_err(fail)?,
        args: Vec::with_capacity(kernel.arg_words as usize),
        views: Vec::new(),
        writes: Vec::new(),
        slots: Vec::new(),
    };
    for (p, a) in kernel.params.iter().zip(args) {
        match (p.kind, a) {
            (ParamType::Scalar(d), KernelArg::Scalar(s)) => {
                if s.dtype() != d {
                    return Err(fail(format!(
                        "`{}` is {}, got {}",
                        p.name,
                        d.name(),
                        s.dtype().name()
                    )));
                }
                if let ErasedScalar::Slot(_, slot, _, owner) = s {
                    if Some(*owner) != run {
                        return Err(fail(format!(
                            "`{}` is a per-step scalar of another step (or of an earlier run of this one); pass the scalar of the step being run, or a plain value",
                            p.name
                        )));
                    }
                    out.slots.push((out.args.len(), *slot));
                }
                out.args.push(s.bits());
            }
            (ParamType::Slice { elem, write, .. }, KernelArg::Read(v) | KernelArg::Write(v)) => {
                let is_write = matches!(a, KernelArg::Write(_));
                if is_write != write {
                    return Err(fail(format!(
                        "`{}` is {}",
                        p.name,
                        if write { "written" } else { "read-only" }
                    )));
                }
                if v.dtype != elem {
                    return Err(fail(format!(
                        "`{}` is a slice of {}, got a buffer of {}",
                        p.name,
                        elem.name(),
                        v.dtype.name()
                    )));
                }
                if v.buf.device.id() != device.id() {
                    return Err(fail(format!(
                        "`{}` lives on another device ({})",
                        p.name,
                        v.buf.device.kind()
                    )));
                }
                if v.len > u32::MAX as usize || v.offset > u32::MAX as usize {
                    return Err(fail(format!("`{}` has more than 2^32 elements", p.name)));
                }
                out.args.push(v.offset as u32);
                out.args.push(v.len as u32);
                out.views.push(v.clone());
                out.writes.push(write);
            }
            _ => {
                return Err(fail(format!(
                    "argument for `{}` has the wrong kind",
                    p.name
                )))
            }
        }
    }
    // A written view may share its allocation with no other binding of the launch: CUDA's
    // `__restrict__` and wgpu's usage rules both depend on it.
    for (i, v) in out.views.iter().enumerate() {
        for (j, w) in out.views.iter().enumerate().skip(i + 1) {
            if (out.writes[i] || out.writes[j]) && v.overlaps(w) {
                return Err(fail(format!(
                    "`{}` and `{}` are overlapping views of one buffer and one of them is written; pass views that do not overlap",
                    slice_name(kernel, i),
                    slice_name(kernel, j)
                )));
            }
        }
    }
    Ok(out)
}

pub(crate) fn slice_name(kernel: &KernelDef, n: usize) -> &'static str {
    kernel
        .params
        .iter()
        .filter(|p| matches!(p.kind, ParamType::Slice { .. }))
        .nth(n)
        .map(|p| p.name)
        .unwrap_or("?")
}

impl Launch for Device {
    fn launch(&self, kernel: &'static KernelDef, grid: Grid, args: &[KernelArg]) -> Result<()> {
        if thread_records() {
            return Err(Error::LaunchOutsideRecording(kernel.name));
        }
        let b = bind(self, kernel, grid, args, None)?;
        for v in &b.views {
            check_slot(v, "a launch on the device")?;
        }
        self.inner.backend.launch(kernel, b.grid, &b.args, &b.views)
    }

    fn gemm(&self, g: &crate::blas::Sgemm, a: &RawView, b: &RawView, c: &RawView) -> Result<bool> {
        self.product(g, a, b, c, None)
    }

    fn gemm_fused(
        &self,
        g: &crate::blas::Sgemm,
        a: &RawView,
        b: &RawView,
        c: &RawView,
        fused: crate::blas::Fused,
        v: &RawView,
    ) -> Result<bool> {
        self.product(g, a, b, c, Some((fused, v)))
    }

    fn scratch(&self, len: usize) -> Result<Buffer<f32>> {
        self.scratch_buffer(len)
    }

    fn counters(&self, len: usize) -> Result<Option<Buffer<u32>>> {
        self.scratch_buffer(len).map(Some)
    }
    fn library_subgroups(&self) -> Option<u32> {
        Device::library_subgroups(self)
    }

    fn backend_kind(&self) -> Option<crate::BackendKind> {
        Some(self.kind())
    }

    fn fits_workgroup_memory(&self, kernel: &KernelDef) -> bool {
        Device::fits_workgroup_memory(self, kernel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_device_that_failed_keeps_its_error_as_it_was() {
        static SLOT: OnceLock<Result<Device>> = OnceLock::new();
        let open = || -> Result<Box<dyn Backend>> {
            Err(Error::Unavailable {
                backend: "wgpu",
                reason: "no GPU adapter found".into(),
            })
        };
        for _ in 0..2 {
            let err = shared(&SLOT, open).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Unavailable {
                        backend: "wgpu",
                        ..
                    }
                ),
                "{err:?}"
            );
            assert_eq!(
                err.to_string(),
                "backend `wgpu` is unavailable: no GPU adapter found"
            );
        }
        // Another kind of failure stays that kind (a bad setting is not a missing backend).
        static BAD: OnceLock<Result<Device>> = OnceLock::new();
        let err = shared(&BAD, || {
            Err(Error::BadEnv {
                var: "GRAPHED_WGPU_CHECKS",
                value: "bound".into(),
                hint: "a comma-separated list of bounds, loops, division, all or none",
            })
        })
        .unwrap_err();
        assert!(matches!(err, Error::BadEnv { .. }), "{err:?}");
    }
}
