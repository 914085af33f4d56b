//! The host backend: runs each kernel's host Rust form. Always available; the numerical oracle.

use std::cell::Cell;
use std::sync::MutexGuard;

use super::{Backend, BackendKind, Memory, Recording};
use crate::blas::{GemmShape, GemmTypes};
use crate::buffer::RawView;
use crate::error::{Error, Result};
use crate::host_exec::HostLaunch;
use crate::kernel::KernelDef;
use crate::packed;
use crate::plan::{Op, Plan};

pub(crate) struct HostBackend {
    /// The size of the subgroups kernels' subgroup operations emulate.
    pub(crate) subgroup_size: u32,
}

impl Default for HostBackend {
    fn default() -> Self {
        HostBackend {
            subgroup_size: crate::host_subgroup::DEFAULT_HOST_SUBGROUP,
        }
    }
}

/// Refuses a kernel using subgroups whose workgroup does not split into whole subgroups of
/// `size` (the kernel language guarantees a multiple of 32; larger subgroups may not divide).
pub(crate) fn check_subgroups(
    kernel: &'static KernelDef,
    size: u32,
    backend: &'static str,
    adapter: &str,
) -> Result<()> {
    if kernel.uses_subgroups() && kernel.workgroup.iter().product::<u32>() % size != 0 {
        return Err(Error::Unsupported {
            kernel: kernel.name,
            backend,
            adapter: format!("{adapter} (subgroups of {size})"),
            feature: "a workgroup of a multiple of the subgroup size (every subgroup full)",
            instead: "declare a workgroup of a multiple of the device's subgroup size (`Device::subgroup_size`)",
        });
    }
    Ok(())
}

fn mem(view: &RawView) -> &std::sync::Mutex<Vec<u32>> {
    match &view.buf.mem {
        Memory::Host(m) => m,
        #[allow(unreachable_patterns)]
        _ => {
            unreachable!("a host launch bound a buffer of another backend (checked by the device)")
        }
    }
}

fn lock(view: &RawView) -> Result<MutexGuard<'_, Vec<u32>>> {
    mem(view).lock().map_err(|_| Error::Device {
        backend: "host",
        reason: "a buffer's lock was poisoned by a panic".into(),
    })
}

/// Runs one launch over `bindings`, locking each distinct allocation once (views may alias),
/// in ascending allocation order: two threads binding the same buffers in other orders
/// cannot deadlock.
pub(crate) fn run(
    kernel: &'static KernelDef,
    grid: [u32; 3],
    args: &[u32],
    bindings: &[RawView],
    subgroup_size: u32,
) -> Result<()> {
    check_subgroups(kernel, subgroup_size, "host", "host")?;
    let mut order: Vec<&RawView> = bindings.iter().collect();
    order.sort_by_key(|v| v.buf.id);
    order.dedup_by_key(|v| v.buf.id);
    let ids: Vec<u64> = order.iter().map(|v| v.buf.id).collect();
    let mut guards: Vec<MutexGuard<'_, Vec<u32>>> = Vec::with_capacity(order.len());
    for v in order {
        guards.push(lock(v)?);
    }
    let cells: Vec<&[Cell<u32>]> = guards
        .iter_mut()
        .map(|g| Cell::from_mut(&mut g[..]).as_slice_of_cells())
        .collect();
    let bufs: Vec<&[Cell<u32>]> = bindings
        .iter()
        .map(|v| cells[ids.iter().position(|id| *id == v.buf.id).unwrap()])
        .collect();
    let launch = HostLaunch {
        args,
        bufs: &bufs,
        workgroups: grid,
        subgroup_size,
    };
    (kernel.host)(&launch)?;
    Ok(())
}

impl Backend for HostBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Host
    }
    fn adapter(&self) -> String {
        "host (kernels' Rust form)".into()
    }
    fn subgroup_size(&self) -> Option<u32> {
        Some(self.subgroup_size)
    }
    fn arg_align_words(&self) -> usize {
        1
    }
    fn alloc(&self, words: usize) -> Result<Memory> {
        // Refuse what the machine cannot hold: with memory overcommit, a huge reservation
        // "succeeds" and zeroing it gets the process killed instead of returning an error.
        let bytes = words as u64 * 4;
        if bytes > physical_memory() {
            return Err(Error::OutOfMemory {
                backend: "host",
                bytes: Some(bytes),
            });
        }
        let mut v = Vec::new();
        v.try_reserve_exact(words).map_err(|_| Error::OutOfMemory {
            backend: "host",
            bytes: Some(bytes),
        })?;
        v.resize(words, 0);
        Ok(Memory::Host(std::sync::Mutex::new(v)))
    }
    fn write(&self, view: &RawView, data: &[u32]) -> Result<()> {
        lock(view)?[view.offset..view.offset + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn read(&self, view: &RawView) -> Result<Vec<u32>> {
        Ok(lock(view)?[view.offset..view.offset + view.len].to_vec())
    }
    fn copy(&self, src: &RawView, dst: &RawView) -> Result<()> {
        if src.buf.id == dst.buf.id {
            let mut g = lock(src)?;
            g.copy_within(src.offset..src.offset + src.len, dst.offset);
        } else {
            // One lock at a time: never two held at once, so no order to keep.
            let data = self.read(src)?;
            self.write(dst, &data)?;
        }
        Ok(())
    }
    fn prepare(&self, _kernel: &'static KernelDef) -> Result<()> {
        Ok(())
    }
    fn launch(
        &self,
        kernel: &'static KernelDef,
        grid: [u32; 3],
        args: &[u32],
        bindings: &[RawView],
    ) -> Result<()> {
        run(kernel, grid, args, bindings, self.subgroup_size)
    }
    /// Half-precision products only, through the reference ([`crate::blas::reference`]):
    /// `f32` products run on the DSL kernels, the host's `f32` oracle.
    fn blas(&self, types: GemmTypes) -> bool {
        types.input.is_half()
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
        if v.is_some() || shape.fused.is_some() {
            return Err(crate::error::Error::Launch {
                kernel: "sgemm",
                reason: "the host backend fuses no epilogue into a product".into(),
            });
        }
        // `c` overlaps neither input (checked when recorded), so one lock at a time suffices.
        let (a, b) = (packed::read(self, a)?, packed::read(self, b)?);
        let mut bits = packed::read(self, c)?;
        let g = shape;
        crate::blas::reference(
            (g.m, g.n, g.k, g.ta, g.tb),
            g.types,
            flag != 0,
            &a,
            &b,
            &mut bits,
        )?;
        let mut words = lock(c)?;
        store_elements(&mut words, c, &bits);
        Ok(())
    }
    fn lower(&self, plan: &Plan) -> Result<Box<dyn Recording>> {
        Ok(Box::new(HostReplay {
            plan: plan.clone(),
            subgroup_size: self.subgroup_size,
            #[cfg(feature = "testing")]
            dag: match crate::faults::take_dropped_edges() {
                Some(op) => plan.dag().without_edges_into(op),
                None => plan.dag(),
            },
        }))
    }
    fn drain(&self) -> Result<()> {
        Ok(())
    }
}

/// Writes element bits (one element's in each `u32`) into `view` of the locked allocation
/// `words`, the other half of a shared word kept for 16-bit types.
fn store_elements(words: &mut [u32], view: &RawView, bits: &[u32]) {
    if !view.dtype.is_half() {
        words[view.offset..view.offset + bits.len()].copy_from_slice(bits);
        return;
    }
    for (i, &b) in bits.iter().enumerate() {
        let e = view.offset + i;
        let at = 16 * (e % 2);
        let w = &mut words[e / 2];
        *w = (*w & !(0xffff << at)) | ((b & 0xffff) << at);
    }
}

/// The host lowering: the plan's op list, executed directly, in plan order (with the
/// `testing` feature, in a random order its dependency edges allow where a test asks).
struct HostReplay {
    plan: Plan,
    subgroup_size: u32,
    #[cfg(feature = "testing")]
    dag: crate::dag::Dag,
}

impl HostReplay {
    fn run_op(&self, op: &Op) -> Result<()> {
        match op {
            Op::Launch {
                kernel,
                grid,
                args,
                bindings,
            } => {
                let views: Vec<RawView> = bindings.iter().map(|b| b.view.clone()).collect();
                run(
                    kernel,
                    *grid,
                    &self.plan.launch_args[*args],
                    &views,
                    self.subgroup_size,
                )
            }
            Op::Copy { src, dst } => HostBackend::default().copy(src, dst),
            // Half-precision products (the only ones a host plan holds): the reference.
            Op::Sgemm {
                shape,
                args,
                a,
                b,
                c,
                v,
                ..
            } => HostBackend::default().sgemm(
                shape,
                self.plan.launch_args[*args][0],
                a,
                b,
                c,
                v.as_ref(),
            ),
            // Only a local communicator of one rank exists on the host: the identity.
            #[cfg(feature = "nccl")]
            Op::AllReduce(op) => op.run(),
        }
    }
}

impl Recording for HostReplay {
    fn replay(&mut self, scalars: &[(usize, usize, u32)]) -> Result<()> {
        for &(launch, word, bits) in scalars {
            self.plan.launch_args[launch][word] = bits;
        }
        #[cfg(feature = "testing")]
        if let Some(order) = crate::faults::host_order(|seed| self.dag.random_order(seed)) {
            return order
                .into_iter()
                .try_for_each(|i| self.run_op(&self.plan.ops[i]));
        }
        self.plan.ops.iter().try_for_each(|op| self.run_op(op))
    }
    fn rebind(&mut self, plan: &Plan, ops: &[usize], words: &[(usize, usize, u32)]) -> Result<()> {
        for &i in ops {
            self.plan.ops[i] = plan.ops[i].clone();
        }
        for &(launch, word, bits) in words {
            self.plan.launch_args[launch][word] = bits;
        }
        #[cfg(feature = "testing")]
        {
            self.dag = self.plan.dag();
        }
        Ok(())
    }
    fn launches(&self) -> usize {
        self.plan.launch_count()
    }
}

/// Total physical memory in bytes (Linux: `/proc/meminfo`), or unbounded where unknown.
fn physical_memory() -> u64 {
    static TOTAL: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TOTAL.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
                let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
                Some(kib * 1024)
            })
            .unwrap_or(u64::MAX)
    })
}
