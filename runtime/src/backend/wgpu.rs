//! The wgpu backend: WGSL pipelines, eager dispatches, and replay of a plan as one command
//! buffer per step with pipelines and bind groups built once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use wgpu::util::DeviceExt;

use super::{Backend, BackendKind, Memory, Recording};
use crate::buffer::RawView;
use crate::checked::{Kernels, RECORD_WORDS};
use crate::error::{Error, Result};
use crate::kernel::{KernelDef, ParamType};
use crate::plan::{Op, Plan};

const NAME: &str = "wgpu";

/// Which of wgpu's shader run-time checks kernels are compiled with, from
/// `GRAPHED_WGPU_CHECKS`: a comma-separated list of `bounds` (naga's index clamping), `loops`
/// (loop-bounding counters, in every kernel) and `division` (naga's integer-division guards),
/// or `all`, or `none`. Unset: `bounds` only — the other two are redundant for the kernel
/// language (README, "The kernel language").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ShaderChecks {
    bounds: bool,
    loops: bool,
    division: bool,
}

impl ShaderChecks {
    const DEFAULT: ShaderChecks = ShaderChecks {
        bounds: true,
        loops: false,
        division: false,
    };

    /// The words `GRAPHED_WGPU_CHECKS` accepts.
    const WORDS: &'static str = "a comma-separated list of bounds, loops, division, all or none";

    fn from_env() -> Result<ShaderChecks> {
        match std::env::var("GRAPHED_WGPU_CHECKS") {
            Ok(v) if !v.trim().is_empty() => ShaderChecks::parse(&v),
            _ => Ok(ShaderChecks::DEFAULT),
        }
    }

    /// Fails closed: an unknown word (`bound`, `Bounds`) would otherwise switch index
    /// clamping off without a word, so it refuses to open the device instead.
    fn parse(v: &str) -> Result<ShaderChecks> {
        let mut c = ShaderChecks {
            bounds: false,
            loops: false,
            division: false,
        };
        for part in v.split(',').map(str::trim) {
            match part {
                "all" => {
                    c = ShaderChecks {
                        bounds: true,
                        loops: true,
                        division: true,
                    }
                }
                "none" | "" => {}
                "bounds" => c.bounds = true,
                "loops" => c.loops = true,
                "division" => c.division = true,
                _ => {
                    return Err(Error::BadEnv {
                        var: "GRAPHED_WGPU_CHECKS",
                        value: v.into(),
                        hint: ShaderChecks::WORDS,
                    })
                }
            }
        }
        Ok(c)
    }
}

struct Pipeline {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

pub(crate) struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    pipelines: Mutex<HashMap<usize, Arc<Pipeline>>>,
    /// Which of wgpu's shader run-time checks kernels keep (`GRAPHED_WGPU_CHECKS`).
    checks: ShaderChecks,
    /// The device was created with `SHADER_F16` (asked for whenever the adapter has it):
    /// kernels computing with `f16` compile.
    shader_f16: bool,
    /// The device was created with `SUBGROUP` (asked for whenever the adapter has it): the
    /// adapter's smallest and largest subgroup size.
    subgroups: Option<(u32, u32)>,
    /// Errors the device reported outside an error scope.
    error: Arc<Mutex<DeviceErrors>>,
    /// Checked mode: the fault record and the kernels that may write it.
    checked: Option<Checked>,
}

/// A checked device's fault record (bound after the last slice of every launch) and the
/// kernels compiled with it.
struct Checked {
    record: wgpu::Buffer,
    kernels: Kernels,
}

/// What the device reported outside error scopes: a validation error is returned once, by
/// the next operation that checks, and does not disable the device; a lost device stays lost.
#[derive(Default)]
struct DeviceErrors {
    validation: Option<String>,
    lost: Option<String>,
}

/// Returns the device's pending validation error (once) or its loss (always).
fn take_error(errors: &Mutex<DeviceErrors>) -> Result<()> {
    let mut e = errors.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(lost) = &e.lost {
        return Err(device_err(lost));
    }
    match e.validation.take() {
        Some(v) => Err(device_err(v)),
        None => Ok(()),
    }
}

fn device_err(reason: impl std::fmt::Display) -> Error {
    Error::Device {
        backend: NAME,
        reason: reason.to_string(),
    }
}

/// The window-system surface extensions wgpu's Vulkan instance enables whenever a driver offers
/// them. Compute never makes a surface; with them enabled, Mesa's device-select layer connects
/// to a Wayland (and X) display while listing devices, which prints `error: XDG_RUNTIME_DIR is
/// invalid or not set in the environment.` on every machine without a desktop session.
#[cfg(all(unix, not(target_vendor = "apple"), not(target_os = "android")))]
const WINDOW_SYSTEM_EXTENSIONS: [&std::ffi::CStr; 3] = [
    c"VK_KHR_wayland_surface",
    c"VK_KHR_xcb_surface",
    c"VK_KHR_xlib_surface",
];

/// An instance that asks for what compute needs: on Linux and the BSDs a Vulkan instance
/// without the window-system surface extensions; elsewhere (or if that instance cannot be
/// made) wgpu's own.
fn compute_instance(backends: wgpu::Backends) -> wgpu::Instance {
    let desc = wgpu::InstanceDescriptor {
        backends,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    };
    #[cfg(all(unix, not(target_vendor = "apple"), not(target_os = "android")))]
    if backends.contains(wgpu::Backends::VULKAN) {
        let hal_desc = wgpu::hal::InstanceDescriptor {
            name: "graphed",
            flags: desc.flags,
            memory_budget_thresholds: desc.memory_budget_thresholds,
            backend_options: desc.backend_options.clone(),
            telemetry: None,
            display: None,
        };
        let compute_only: Box<wgpu::hal::vulkan::CreateInstanceCallback> = Box::new(|args| {
            args.extensions
                .retain(|e| !WINDOW_SYSTEM_EXTENSIONS.contains(e));
        });
        // SAFETY: wgpu-hal asks callbacks not to remove extensions, because it assumes an
        // available extension is enabled. For these three it only assumes so when creating a
        // surface from a Wayland, XCB or Xlib window, and it checks the enabled list first
        // (wgpu-hal 30, `vulkan/instance.rs`): a surface is never made here, and
        // `VK_KHR_surface`, which the device's `VK_KHR_swapchain` needs, stays enabled.
        match unsafe {
            wgpu::hal::vulkan::Instance::init_with_callback(&hal_desc, Some(compute_only))
        } {
            // SAFETY: a Vulkan instance that wgpu-hal just made; wgpu takes ownership of it.
            Ok(hal) => return unsafe { wgpu::Instance::from_hal::<wgpu::hal::api::Vulkan>(hal) },
            Err(e) => tracing::debug!(
                "graphed: a compute-only Vulkan instance failed ({e}); using wgpu's own"
            ),
        }
    }
    wgpu::Instance::new(desc)
}

fn buffer(view: &RawView) -> &wgpu::Buffer {
    match &view.buf.mem {
        Memory::Wgpu(b) => b,
        #[allow(unreachable_patterns)]
        _ => {
            unreachable!("a wgpu launch bound a buffer of another backend (checked by the device)")
        }
    }
}

/// Refuses a kernel that computes with `f16` on a device without `shader-f16`, naming the
/// adapter and what to do instead.
fn check_features(kernel: &'static KernelDef, shader_f16: bool, adapter: &str) -> Result<()> {
    if kernel.needs_shader_f16() && !shader_f16 {
        return Err(Error::Unsupported {
            kernel: kernel.name,
            backend: NAME,
            adapter: adapter.to_string(),
            feature: "`f16` arithmetic (WGSL's `shader-f16` feature)",
            instead: "run it on the CUDA or host backend, or keep f16 in buffers and compute in f32 (`x as f32`, then `as f16` to store) in a kernel without f16 arithmetic",
        });
    }
    Ok(())
}

impl WgpuBackend {
    /// Opens the best adapter; `checked`: checked mode (see [`crate::checked`]). It asks for
    /// `SHADER_F16` and `SUBGROUP` where the adapter has them (unless `want_f16` is false: a
    /// device without `SHADER_F16`, for tests of the refusal).
    pub(crate) fn open(checked: bool, want_f16: bool) -> Result<WgpuBackend> {
        WgpuBackend::open_with(checked, want_f16, true)
    }

    /// [`WgpuBackend::open`]; `want_subgroups` false: a device without `SUBGROUP` even where
    /// the adapter has it (for tests of the refusal).
    pub(crate) fn open_with(
        checked: bool,
        want_f16: bool,
        want_subgroups: bool,
    ) -> Result<WgpuBackend> {
        let checks = ShaderChecks::from_env()?;
        let instance =
            compute_instance(wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY));
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            apply_limit_buckets: false,
        }))
        .map_err(|e| Error::Unavailable {
            backend: NAME,
            reason: format!(
                "no GPU adapter found ({e}); install a Vulkan driver (on Debian/Ubuntu without a GPU: `apt-get install mesa-vulkan-drivers libvulkan1` for lavapipe)"
            ),
        })?;
        let info = adapter.get_info();
        let limits = adapter.limits();
        let shader_f16 = want_f16 && adapter.features().contains(wgpu::Features::SHADER_F16);
        let subgroups = (want_subgroups && adapter.features().contains(wgpu::Features::SUBGROUP))
            .then_some((info.subgroup_min_size, info.subgroup_max_size));
        let mut features = wgpu::Features::empty();
        if shader_f16 {
            features |= wgpu::Features::SHADER_F16;
        }
        if subgroups.is_some() {
            features |= wgpu::Features::SUBGROUP;
        }
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("graphed"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| Error::Unavailable {
            backend: NAME,
            reason: format!("the adapter {} refused a device: {e}", info.name),
        })?;
        let error = Arc::new(Mutex::new(DeviceErrors::default()));
        let slot = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut s = slot.lock().unwrap_or_else(|p| p.into_inner());
            s.validation.get_or_insert_with(|| e.to_string());
        }));
        let lost = error.clone();
        device.set_device_lost_callback(move |reason, msg| {
            let mut s = lost.lock().unwrap_or_else(|p| p.into_inner());
            s.lost
                .get_or_insert_with(|| format!("device lost ({reason:?}): {msg}"));
        });
        let checked = checked.then(|| Checked {
            record: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("graphed fault record"),
                size: RECORD_WORDS as u64 * 4,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            kernels: Kernels::default(),
        });
        Ok(WgpuBackend {
            device,
            queue,
            info,
            limits,
            pipelines: Mutex::new(HashMap::new()),
            checks,
            shader_f16,
            subgroups,
            error,
            checked,
        })
    }

    /// Returns the device's pending uncaptured error, if any (see [`DeviceErrors`]).
    fn check(&self) -> Result<()> {
        take_error(&self.error)
    }

    /// A bounce buffer for a copy between two views of one buffer (a copy command may not
    /// have the same buffer as source and destination).
    fn bounce(&self, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("graphed copy bounce"),
            size: bytes,
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    fn pipeline(&self, kernel: &'static KernelDef) -> Result<Arc<Pipeline>> {
        let key = kernel as *const KernelDef as usize;
        if let Some(p) = self
            .pipelines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(p.clone());
        }
        check_features(kernel, self.shader_f16, &self.adapter())?;
        if kernel.uses_subgroups() {
            let Some((_, max)) = self.subgroups else {
                return Err(Error::Unsupported {
                    kernel: kernel.name,
                    backend: NAME,
                    adapter: self.adapter(),
                    feature: "subgroup operations (wgpu's `SUBGROUP` feature)",
                    instead: "run it on the CUDA or host backend, or use the kernel library's routines, which pick a workgroup-memory variant where `Device::subgroup_size` is `None`",
                });
            };
            super::host::check_subgroups(kernel, max, NAME, &self.adapter())?;
        }
        let wg = kernel.workgroup;
        let l = &self.limits;
        if wg[0] > l.max_compute_workgroup_size_x
            || wg[1] > l.max_compute_workgroup_size_y
            || wg[2] > l.max_compute_workgroup_size_z
            || wg.iter().product::<u32>() > l.max_compute_invocations_per_workgroup
        {
            return Err(Error::Compile {
                kernel: kernel.name,
                backend: NAME,
                log: format!(
                    "workgroup {wg:?} exceeds this adapter's limits ({} invocations, {}×{}×{})",
                    l.max_compute_invocations_per_workgroup,
                    l.max_compute_workgroup_size_x,
                    l.max_compute_workgroup_size_y,
                    l.max_compute_workgroup_size_z
                ),
            });
        }
        if kernel.portable_bytes() > self.workgroup_bytes_max() {
            return Err(Error::Limit {
                backend: NAME,
                what: format!(
                    "workgroup memory of kernel `{}` in bytes (the adapter's `max_compute_workgroup_storage_size`)",
                    kernel.name
                ),
                asked: kernel.portable_bytes().into(),
                limit: self.workgroup_bytes_max().into(),
            });
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let source = match &self.checked {
            Some(c) => {
                c.kernels.note(kernel);
                kernel.checked.wgsl
            }
            None => kernel.wgsl,
        };
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(kernel.name),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        };
        let c = self.checks;
        let module = if c.bounds && c.loops && c.division {
            self.device.create_shader_module(desc)
        } else {
            let checks = wgpu::ShaderRuntimeChecks {
                // A checked read of an empty view at its buffer's end loads one element
                // past it (and discards it): naga's clamping keeps that load in bounds.
                bounds_checks: c.bounds || self.checked.is_some(),
                force_loop_bounding: c.loops || !kernel.loops_terminate,
                int_div_checks: c.division,
                ..wgpu::ShaderRuntimeChecks::checked()
            };
            // SAFETY: the kernel language defines its integer division and remainder for
            // every operand, and the WGSL emitter guards each one (a helper, or a literal
            // divisor other than 0 and -1), so naga's division checks are redundant. Loop
            // bounding is dropped only from kernels whose loops all terminate by
            // construction (`loops_terminate`). Index clamping stays unless
            // `GRAPHED_WGPU_CHECKS` leaves it out, which the user asks for knowing that GPU
            // targets do not check indices (as in CUDA C; README, "The kernel language").
            unsafe { self.device.create_shader_module_trusted(desc, checks) }
        };
        let storage = |read_only: bool, binding: u32| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let mut entries = vec![storage(true, 0)];
        for p in kernel.params {
            if let ParamType::Slice { write, .. } = p.kind {
                let _ = write; // every slice is read_write storage (see the WGSL emitter)
                entries.push(storage(false, entries.len() as u32));
            }
        }
        if self.checked.is_some() {
            entries.push(storage(false, entries.len() as u32));
        }
        let layout = self
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(kernel.name),
                entries: &entries,
            });
        let pl = self
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(kernel.name),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(kernel.name),
                layout: Some(&pl),
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Compile {
                kernel: kernel.name,
                backend: NAME,
                log: e.to_string(),
            });
        }
        let p = Arc::new(Pipeline { pipeline, layout });
        self.pipelines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, p.clone());
        Ok(p)
    }

    /// Copies `src` (buffer, byte offset, bytes) and then `record` into one staging buffer,
    /// waits, and returns the words (those of `src` first).
    fn read_back(
        &self,
        src: Option<(&wgpu::Buffer, u64, u64)>,
        record: Option<&wgpu::Buffer>,
    ) -> Result<Vec<u32>> {
        let bytes = src.map_or(0, |s| s.2);
        let size = bytes + record.map_or(0, |_| RECORD_WORDS as u64 * 4);
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("graphed readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self.device.create_command_encoder(&Default::default());
        if let Some((buf, off, bytes)) = src {
            enc.copy_buffer_to_buffer(buf, off, &staging, 0, bytes);
        }
        if let Some(r) = record {
            enc.copy_buffer_to_buffer(r, 0, &staging, bytes, RECORD_WORDS as u64 * 4);
        }
        self.queue.submit([enc.finish()]);
        let done = Arc::new((Mutex::new(None), std::sync::Condvar::new()));
        let flag = done.clone();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            *flag.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            flag.1.notify_all();
        });
        // Another thread's poll may be the one that delivers our callback: wait for the
        // callback itself, polling until it has run, not merely for the queue to drain.
        let result = loop {
            self.device
                .poll(wgpu::PollType::Wait {
                    submission_index: None,
                    timeout: None,
                })
                .map_err(device_err)?;
            let slot = done.0.lock().unwrap_or_else(|p| p.into_inner());
            let (mut slot, _) = done
                .1
                .wait_timeout_while(slot, std::time::Duration::from_millis(5), |s| s.is_none())
                .unwrap_or_else(|p| p.into_inner());
            if let Some(r) = slot.take() {
                break r;
            }
            self.check()?;
        };
        self.check()?;
        if let Err(e) = result {
            return Err(device_err(format!("readback failed: {e}")));
        }
        let out = {
            let mapped = staging
                .slice(..)
                .get_mapped_range()
                .map_err(|e| device_err(format!("readback failed: {e}")))?;
            bytemuck::cast_slice::<u8, u32>(&mapped).to_vec()
        };
        staging.unmap();
        Ok(out)
    }

    /// Clears the fault record (queued before any later work).
    fn clear_record(&self) {
        if let Some(c) = &self.checked {
            self.queue
                .write_buffer(&c.record, 0, bytemuck::cast_slice(&[0u32; RECORD_WORDS]));
        }
    }

    fn check_grid(&self, kernel: &'static KernelDef, grid: [u32; 3]) -> Result<()> {
        let max = self.limits.max_compute_workgroups_per_dimension;
        if grid.iter().any(|&g| g > max) {
            return Err(Error::Launch {
                kernel: kernel.name,
                reason: format!(
                    "grid {grid:?} exceeds this adapter's {max} workgroups per dimension"
                ),
            });
        }
        Ok(())
    }

    fn bind_group(
        &self,
        p: &Pipeline,
        args: (&wgpu::Buffer, u64, u64),
        bindings: &[RawView],
    ) -> wgpu::BindGroup {
        bind_group_for(
            &self.device,
            p,
            args,
            bindings,
            self.checked.as_ref().map(|c| &c.record),
        )
    }
}

/// The bind group of one dispatch: its argument block, then every slice's buffer, whole.
fn bind_group_for(
    device: &wgpu::Device,
    p: &Pipeline,
    args: (&wgpu::Buffer, u64, u64),
    bindings: &[RawView],
    record: Option<&wgpu::Buffer>,
) -> wgpu::BindGroup {
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: args.0,
            offset: args.1,
            size: wgpu::BufferSize::new(args.2),
        }),
    }];
    for (i, v) in bindings.iter().enumerate() {
        entries.push(wgpu::BindGroupEntry {
            binding: i as u32 + 1,
            resource: buffer(v).as_entire_binding(),
        });
    }
    // A checked device's fault record, bound after the last slice.
    if let Some(r) = record {
        entries.push(wgpu::BindGroupEntry {
            binding: bindings.len() as u32 + 1,
            resource: r.as_entire_binding(),
        });
    }
    device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &p.layout,
        entries: &entries,
    })
}

impl Backend for WgpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Wgpu
    }
    fn adapter(&self) -> String {
        format!(
            "{} ({:?}, {})",
            self.info.name, self.info.backend, self.info.driver
        )
    }
    fn shader_f16(&self) -> bool {
        self.shader_f16
    }
    fn workgroup_bytes_max(&self) -> u32 {
        self.limits.max_compute_workgroup_storage_size
    }

    fn subgroup_size(&self) -> Option<u32> {
        self.subgroups
            .filter(|(min, max)| min == max)
            .map(|(_, max)| max)
    }
    fn arg_align_words(&self) -> usize {
        (self.limits.min_storage_buffer_offset_alignment as usize / 4).max(1)
    }
    fn alloc(&self, words: usize) -> Result<Memory> {
        // `Device::alloc_raw` refused counts whose bytes overflow.
        let bytes = words.max(1) as u64 * 4;
        // Fixed limits of the adapter, not a lack of free memory: each buffer is bound whole.
        for (name, limit) in [
            (
                "max_storage_buffer_binding_size",
                self.limits.max_storage_buffer_binding_size,
            ),
            ("max_buffer_size", self.limits.max_buffer_size),
        ] {
            if bytes > limit {
                return Err(Error::Limit {
                    backend: NAME,
                    what: format!("bytes of one buffer (the adapter's `{name}`)"),
                    asked: bytes.into(),
                    limit: limit.into(),
                });
            }
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        if pollster::block_on(scope.pop()).is_some() {
            return Err(Error::OutOfMemory {
                backend: NAME,
                bytes: Some(bytes),
            });
        }
        Ok(Memory::Wgpu(buf))
    }
    fn write(&self, view: &RawView, data: &[u32]) -> Result<()> {
        if !data.is_empty() {
            self.queue.write_buffer(
                buffer(view),
                view.offset as u64 * 4,
                bytemuck::cast_slice(data),
            );
        }
        self.check()
    }
    fn read(&self, view: &RawView) -> Result<Vec<u32>> {
        if view.len == 0 && self.checked.is_none() {
            return Ok(Vec::new());
        }
        let bytes = view.len as u64 * 4;
        let record = self.checked.as_ref().map(|c| &c.record);
        let mut out = self.read_back(
            (view.len > 0).then(|| (buffer(view), view.offset as u64 * 4, bytes)),
            record,
        )?;
        if let Some(c) = &self.checked {
            // The same wait covers the record: a fault of the work before this readback is
            // reported instead of its (possibly wrong) values, once.
            let rec = out.split_off(view.len);
            if let Err(e) = c.kernels.check(&rec) {
                self.clear_record();
                return Err(e);
            }
        }
        Ok(out)
    }
    fn copy(&self, src: &RawView, dst: &RawView) -> Result<()> {
        if src.len > 0 {
            let op = ReplayOp::copy(self, src, dst);
            let mut enc = self.device.create_command_encoder(&Default::default());
            op.encode_copy(&mut enc);
            self.queue.submit([enc.finish()]);
        }
        self.check()
    }
    fn prepare(&self, kernel: &'static KernelDef) -> Result<()> {
        self.pipeline(kernel).map(|_| ())
    }
    fn health(&self) -> Result<()> {
        let Some(c) = &self.checked else {
            return Ok(());
        };
        let rec = self.read_back(None, Some(&c.record))?;
        let checked = c.kernels.check(&rec);
        if checked.is_err() {
            self.clear_record();
        }
        checked
    }
    fn checked(&self) -> bool {
        self.checked.is_some()
    }
    fn launch(
        &self,
        kernel: &'static KernelDef,
        grid: [u32; 3],
        args: &[u32],
        bindings: &[RawView],
    ) -> Result<()> {
        self.check_grid(kernel, grid)?;
        let p = self.pipeline(kernel)?;
        let words: &[u32] = if args.is_empty() { &[0] } else { args };
        let arg_buf = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("graphed args"),
                contents: bytemuck::cast_slice(words),
                usage: wgpu::BufferUsages::STORAGE,
            });
        let bg = self.bind_group(&p, (&arg_buf, 0, words.len() as u64 * 4), bindings);
        let mut enc = self.device.create_command_encoder(&Default::default());
        if grid.iter().all(|&g| g > 0) {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&p.pipeline);
            pass.set_bind_group(0, &bg, &[]);
            pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
        }
        self.queue.submit([enc.finish()]);
        self.check()
    }
    fn lower(&self, plan: &Plan) -> Result<Box<dyn Recording>> {
        let align = self.arg_align_words();
        // One argument arena: each launch's block at an aligned offset.
        let mut offsets = Vec::with_capacity(plan.launch_args.len());
        let mut arena: Vec<u32> = Vec::new();
        for a in &plan.launch_args {
            let start = arena.len().div_ceil(align) * align;
            arena.resize(start, 0);
            offsets.push(start);
            if a.is_empty() {
                arena.push(0);
            } else {
                arena.extend_from_slice(a);
            }
        }
        let arena_buf = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("graphed arg arena"),
                contents: bytemuck::cast_slice(&arena),
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            });
        let mut ops = Vec::with_capacity(plan.ops.len());
        for op in &plan.ops {
            match op {
                Op::Launch {
                    kernel,
                    grid,
                    args,
                    bindings,
                } => {
                    self.check_grid(kernel, *grid)?;
                    let p = self.pipeline(kernel)?;
                    let views: Vec<RawView> = bindings.iter().map(|b| b.view.clone()).collect();
                    let words = plan.launch_args[*args].len().max(1) as u64;
                    let bg = self.bind_group(
                        &p,
                        (&arena_buf, offsets[*args] as u64 * 4, words * 4),
                        &views,
                    );
                    ops.push(ReplayOp::Dispatch {
                        pipeline: p,
                        bind_group: bg,
                        grid: *grid,
                        args: *args,
                    });
                }
                Op::Copy { src, dst } => ops.push(ReplayOp::copy(self, src, dst)),
                Op::Sgemm { .. } => {
                    return Err(Error::Lower {
                        backend: "wgpu",
                        reason: "the plan holds a vendor-BLAS product; wgpu has none".into(),
                    })
                }
                // Only a local communicator of one rank exists on wgpu: the identity, nothing
                // to encode.
                #[cfg(feature = "nccl")]
                Op::AllReduce(op) => {
                    if !op.is_identity() {
                        return Err(Error::Lower {
                            backend: "wgpu",
                            reason: "an all-reduce across ranks needs the CUDA backend".into(),
                        });
                    }
                }
            }
        }
        self.check()?;
        Ok(Box::new(WgpuReplay {
            device: self.device.clone(),
            queue: self.queue.clone(),
            error: self.error.clone(),
            arena,
            offsets,
            arena_buf,
            ops,
            launches: plan.launch_count(),
            record: self.checked.as_ref().map(|c| c.record.clone()),
        }))
    }
    #[cfg(feature = "testing")]
    fn inject_validation_error(&self) {
        // A copy whose source and destination are one buffer: refused by wgpu's validation.
        let b = self.bounce(8);
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&b, 0, &b, 4, 4);
        self.queue.submit([enc.finish()]);
    }
    fn drain(&self) -> Result<()> {
        // Only the wait matters here: errors the device reported earlier surface from the
        // operation that caused them, and a completed wait means nothing is in flight.
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: None,
            })
            .map(|_| ())
            .map_err(|e| Error::Drain {
                backend: NAME,
                reason: e.to_string(),
            })
    }
}

enum ReplayOp {
    Dispatch {
        pipeline: Arc<Pipeline>,
        bind_group: wgpu::BindGroup,
        grid: [u32; 3],
        /// Index of its argument block.
        args: usize,
    },
    Copy {
        src: wgpu::Buffer,
        src_off: u64,
        dst: wgpu::Buffer,
        dst_off: u64,
        bytes: u64,
        /// Between two views of one buffer: through this buffer, in two copies.
        bounce: Option<wgpu::Buffer>,
    },
}

impl ReplayOp {
    fn copy(backend: &WgpuBackend, src: &RawView, dst: &RawView) -> ReplayOp {
        Self::copy_with(src, dst, |bytes| backend.bounce(bytes))
    }

    /// A copy op made after lowering (a rebind), with the device alone.
    fn copy_on(device: &wgpu::Device, src: &RawView, dst: &RawView) -> ReplayOp {
        Self::copy_with(src, dst, |bytes| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("graphed copy bounce"),
                size: bytes,
                usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })
    }

    fn copy_with(
        src: &RawView,
        dst: &RawView,
        bounce: impl FnOnce(u64) -> wgpu::Buffer,
    ) -> ReplayOp {
        let bytes = src.len as u64 * 4;
        ReplayOp::Copy {
            src: buffer(src).clone(),
            src_off: src.offset as u64 * 4,
            dst: buffer(dst).clone(),
            dst_off: dst.offset as u64 * 4,
            bytes,
            bounce: (src.buf.id == dst.buf.id && bytes > 0).then(|| bounce(bytes)),
        }
    }

    /// Encodes a copy op (nothing for a dispatch).
    fn encode_copy(&self, enc: &mut wgpu::CommandEncoder) {
        let ReplayOp::Copy {
            src,
            src_off,
            dst,
            dst_off,
            bytes,
            bounce,
        } = self
        else {
            return;
        };
        if *bytes == 0 {
            return;
        }
        match bounce {
            None => enc.copy_buffer_to_buffer(src, *src_off, dst, *dst_off, *bytes),
            Some(b) => {
                enc.copy_buffer_to_buffer(src, *src_off, b, 0, *bytes);
                enc.copy_buffer_to_buffer(b, 0, dst, *dst_off, *bytes);
            }
        }
    }
}

/// A plan lowered for wgpu: per replay, the changed argument words are written, then the
/// device inputs' copies and every op are encoded into one command buffer (compute passes
/// split only at copies) and submitted once. Nothing is created per replay but the encoder.
struct WgpuReplay {
    device: wgpu::Device,
    queue: wgpu::Queue,
    error: Arc<Mutex<DeviceErrors>>,
    arena: Vec<u32>,
    offsets: Vec<usize>,
    arena_buf: wgpu::Buffer,
    ops: Vec<ReplayOp>,
    launches: usize,
    /// A checked device's fault record, bound again by a rebind.
    record: Option<wgpu::Buffer>,
}

impl WgpuReplay {
    /// Writes the changed argument words, then encodes the input copies and every op into one
    /// command buffer and submits it.
    fn submit(
        &mut self,
        copies: &[(&RawView, &RawView)],
        scalars: &[(usize, usize, u32)],
    ) -> Result<()> {
        let (lo, hi) = super::patch_args(&mut self.arena, &self.offsets, scalars);
        if lo < hi {
            self.queue.write_buffer(
                &self.arena_buf,
                lo as u64 * 4,
                bytemuck::cast_slice(&self.arena[lo..hi]),
            );
        }
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("graphed replay"),
            });
        for (src, slot) in copies {
            if src.len > 0 {
                enc.copy_buffer_to_buffer(
                    buffer(src),
                    src.offset as u64 * 4,
                    buffer(slot),
                    slot.offset as u64 * 4,
                    src.len as u64 * 4,
                );
            }
        }
        let mut i = 0;
        while i < self.ops.len() {
            if let ReplayOp::Copy { .. } = &self.ops[i] {
                self.ops[i].encode_copy(&mut enc);
                i += 1;
                continue;
            }
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: None,
            });
            while let Some(ReplayOp::Dispatch {
                pipeline,
                bind_group,
                grid,
                ..
            }) = self.ops.get(i)
            {
                if grid.iter().all(|&g| g > 0) {
                    pass.set_pipeline(&pipeline.pipeline);
                    pass.set_bind_group(0, bind_group, &[]);
                    pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
                }
                i += 1;
            }
        }
        self.queue.submit([enc.finish()]);
        take_error(&self.error)
    }
}

impl Recording for WgpuReplay {
    fn replay(&mut self, scalars: &[(usize, usize, u32)]) -> Result<()> {
        self.submit(&[], scalars)
    }
    fn replay_with_inputs(
        &mut self,
        _backend: &dyn Backend,
        copies: &[(&RawView, &RawView)],
        scalars: &[(usize, usize, u32)],
    ) -> Result<()> {
        // In the replay's own command buffer: a submit per copy would cost more than the copy.
        self.submit(copies, scalars)
    }
    fn rebind(&mut self, plan: &Plan, ops: &[usize], words: &[(usize, usize, u32)]) -> Result<()> {
        // Plan ops map one to one onto replay ops, except all-reduces (identity, not encoded).
        #[cfg(feature = "nccl")]
        if plan.ops.iter().any(|o| matches!(o, Op::AllReduce(_))) {
            return Err(Error::Lower {
                backend: NAME,
                reason: "a plan with an all-reduce is not rebound".into(),
            });
        }
        for &i in ops {
            match (&plan.ops[i], &mut self.ops[i]) {
                (
                    Op::Launch { bindings, .. },
                    ReplayOp::Dispatch {
                        pipeline,
                        bind_group,
                        args,
                        ..
                    },
                ) => {
                    let views: Vec<RawView> = bindings.iter().map(|b| b.view.clone()).collect();
                    let words = plan.launch_args[*args].len().max(1) as u64;
                    *bind_group = bind_group_for(
                        &self.device,
                        pipeline,
                        (&self.arena_buf, self.offsets[*args] as u64 * 4, words * 4),
                        &views,
                        self.record.as_ref(),
                    );
                }
                (Op::Copy { src, dst }, op @ ReplayOp::Copy { .. }) => {
                    *op = ReplayOp::copy_on(&self.device, src, dst);
                }
                _ => {
                    return Err(Error::Lower {
                        backend: NAME,
                        reason: "the replay's ops do not match the plan's".into(),
                    })
                }
            }
        }
        let (lo, hi) = super::patch_args(&mut self.arena, &self.offsets, words);
        if lo < hi {
            // Queued before the next replay's submit, after every earlier one.
            self.queue.write_buffer(
                &self.arena_buf,
                lo as u64 * 4,
                bytemuck::cast_slice(&self.arena[lo..hi]),
            );
        }
        take_error(&self.error)
    }
    fn launches(&self) -> usize {
        self.launches
    }
}

#[cfg(test)]
mod tests {
    use super::ShaderChecks;

    fn checks(bounds: bool, loops: bool, division: bool) -> ShaderChecks {
        ShaderChecks {
            bounds,
            loops,
            division,
        }
    }

    #[test]
    fn shader_checks_parse_lists_all_and_none() {
        assert_eq!(ShaderChecks::DEFAULT, checks(true, false, false));
        assert_eq!(
            ShaderChecks::parse("all").unwrap(),
            checks(true, true, true)
        );
        assert_eq!(
            ShaderChecks::parse("none").unwrap(),
            checks(false, false, false)
        );
        assert_eq!(
            ShaderChecks::parse("loops, division").unwrap(),
            checks(false, true, true)
        );
        assert_eq!(
            ShaderChecks::parse(" bounds ,").unwrap(),
            checks(true, false, false)
        );
    }

    #[test]
    fn shader_checks_refuse_unknown_words() {
        for v in ["bound", "Bounds", "garbage", "bounds,typo", "all,BOUNDS"] {
            match ShaderChecks::parse(v) {
                Err(e @ crate::Error::BadEnv { var, .. }) => {
                    assert_eq!(var, "GRAPHED_WGPU_CHECKS");
                    assert_eq!(
                        e.to_string(),
                        format!("environment variable GRAPHED_WGPU_CHECKS={v:?} is not understood: a comma-separated list of bounds, loops, division, all or none")
                    );
                }
                other => panic!("{v}: expected BadEnv, got {other:?}"),
            }
        }
    }
}
