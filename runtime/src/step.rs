//! The step context a `#[graphed]` body runs with: in record mode it appends ops to a plan and
//! executes nothing; in eager mode it launches directly. It offers launches, copies and fills
//! only: no readback.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::buffer::{Buffer, RawView};
use crate::device::{bind, check_copy, Device};
use crate::dtype::{Element, Scalar as ScalarValue};
use crate::error::{Error, Result};
use crate::kernel::{ErasedScalar, Grid, KernelArg, KernelDef, Launch, ScalarArg};
use crate::plan::{Binding, BufferRole, Op, Plan, PlanBuffer};

/// A static input slot of a step (read-only inside the body).
#[derive(Debug)]
pub struct Input<T: Element>(Buffer<T>);

impl<T: Element> Input<T> {
    #[doc(hidden)]
    pub fn __from_view(view: RawView) -> Result<Self> {
        Buffer::try_from_view(view).map(Input)
    }
}

impl<T: Element> Deref for Input<T> {
    type Target = Buffer<T>;
    fn deref(&self) -> &Buffer<T> {
        &self.0
    }
}

/// A static output slot of a step, created with [`Step::output`].
#[derive(Debug)]
pub struct Output<T: Element>(Buffer<T>);

impl<T: Element> Output<T> {
    #[doc(hidden)]
    pub fn __into_view(self) -> RawView {
        self.0.raw_view()
    }
}

impl<T: Element> Deref for Output<T> {
    type Target = Buffer<T>;
    fn deref(&self) -> &Buffer<T> {
        &self.0
    }
}

impl<T: Element> DerefMut for Output<T> {
    fn deref_mut(&mut self) -> &mut Buffer<T> {
        &mut self.0
    }
}

/// A per-step scalar inside a step body: its value lives in device memory and is written
/// before every replay. It has no host value on purpose: computing with it on the host
/// would bake one step's value into the recording.
#[derive(Debug, Clone, Copy)]
pub struct Scalar<T: ScalarValue> {
    arg: ScalarArg<T>,
}

impl<T: ScalarValue> From<Scalar<T>> for ScalarArg<T> {
    fn from(s: Scalar<T>) -> ScalarArg<T> {
        s.arg
    }
}

impl<T: ScalarValue> crate::kernel::IntoScalarArg<T> for Scalar<T> {
    fn into_scalar_arg(self) -> ScalarArg<T> {
        self.arg
    }
}

pub(crate) struct Recorder {
    pub plan: Plan,
    /// (launch, word, slot) of every per-step scalar use.
    pub scalar_uses: Vec<(usize, usize, usize)>,
    roles: HashMap<u64, usize>,
    counts: HashMap<BufferRole, usize>,
}

static NEXT_RUN: AtomicU64 = AtomicU64::new(1);

/// The context of a step body. Kernels launch through it (`kernel::launch(cx, ...)`).
pub struct Step {
    device: Device,
    scalars: Vec<ErasedScalar>,
    rec: Option<RefCell<Recorder>>,
    /// This run's identity: its per-step scalars are refused in any other run.
    run: u64,
    /// The holder (id, step name) whose slots this run allocates.
    owner: (u64, &'static str),
    /// The inputs (view, parameter name): read-only inside the body.
    inputs: Vec<(RawView, &'static str)>,
}

impl Step {
    pub(crate) fn record(
        device: &Device,
        owner: (u64, &'static str),
        scalars: Vec<ErasedScalar>,
    ) -> Step {
        let rec = Recorder {
            plan: Plan::default(),
            scalar_uses: Vec::new(),
            roles: HashMap::new(),
            counts: HashMap::new(),
        };
        Step {
            rec: Some(RefCell::new(rec)),
            ..Step::eager(device, owner, scalars)
        }
    }

    pub(crate) fn eager(
        device: &Device,
        owner: (u64, &'static str),
        scalars: Vec<ErasedScalar>,
    ) -> Step {
        Step {
            device: device.clone(),
            scalars,
            rec: None,
            run: NEXT_RUN.fetch_add(1, Ordering::Relaxed),
            owner,
            inputs: Vec::new(),
        }
    }

    /// Declares the body's inputs: registered with the plan when recording, and read-only
    /// in both modes (eager binds a device input's own buffer, replay its slot: a write
    /// would differ).
    pub(crate) fn set_inputs(&mut self, views: &[RawView], names: &[&'static str]) {
        for (i, v) in views.iter().enumerate() {
            let name = names.get(i).copied().unwrap_or("?");
            self.register(v, BufferRole::Input, Some(name));
            self.inputs.push((v.clone(), name));
        }
    }

    /// Refuses a write into one of the step's inputs.
    fn check_not_input(&self, view: &RawView) -> std::result::Result<(), String> {
        match self.inputs.iter().find(|(v, _)| v.overlaps(view)) {
            Some((_, name)) => Err(format!(
                "input `{name}`, which is read-only inside a step (write a workspace or an output instead)"
            )),
            None => Ok(()),
        }
    }

    /// Refuses a view of a device other than the step's.
    fn check_device(&self, view: &RawView, what: &str) -> Result<()> {
        if view.buf.device.id() != self.device.id() {
            return Err(Error::Shape(format!(
                "{what}: the buffer lives on another device ({}) than the step ({})",
                view.buf.device.kind(),
                self.device.kind()
            )));
        }
        Ok(())
    }

    pub(crate) fn into_recorder(self) -> Option<Recorder> {
        self.rec.map(RefCell::into_inner)
    }

    /// The device the step runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether this run records (true) or executes eagerly (false).
    pub fn is_recording(&self) -> bool {
        self.rec.is_some()
    }

    fn register(&self, view: &RawView, role: BufferRole, name: Option<&str>) {
        let Some(rec) = &self.rec else { return };
        let mut rec = rec.borrow_mut();
        if rec.roles.contains_key(&view.buf.id) {
            return;
        }
        let n = rec.counts.entry(role).or_insert(0);
        let name = name.map(str::to_string).unwrap_or_else(|| {
            let prefix = match role {
                BufferRole::Output => "out",
                BufferRole::Workspace => "ws",
                BufferRole::Input => "in",
                BufferRole::State => "state",
                BufferRole::External => "ext",
                BufferRole::Counters => "cnt",
            };
            format!("{prefix}{n}")
        });
        *n += 1;
        let idx = rec.plan.buffers.len();
        rec.plan.buffers.push(PlanBuffer {
            id: view.buf.id,
            role,
            name,
            bytes: view.buf.bytes(),
            read: false,
            written: false,
            arena_offset: None,
        });
        rec.roles.insert(view.buf.id, idx);
    }

    /// A product through the vendor BLAS, with `fused` and its vector when given: checked,
    /// then issued eagerly or recorded as one op ([`Launch::gemm`], [`Launch::gemm_fused`]).
    fn product(
        &self,
        g: &crate::blas::Sgemm,
        a: &RawView,
        b: &RawView,
        c: &RawView,
        fused: Option<(crate::blas::Fused, &RawView)>,
    ) -> Result<bool> {
        // Routing also loads and sets up the library and makes its plan for the shape
        // (timing the candidates of a tuned one), so lowering never does.
        let Some((shape, workspace)) = self.device.route_product(g, [a, b, c], fused)? else {
            return Ok(false);
        };
        let (a, b, c) = (a.clone(), b.clone(), c.clone());
        let v = fused.map(|(_, v)| v.clone());
        for v in [&a, &b, &c].into_iter().chain(v.as_ref()) {
            self.check_device(v, "sgemm")?;
        }
        if let (Some(f), Some(v)) = (shape.fused, &v) {
            if f.writes_vector() {
                if let Err(why) = self.check_not_input(v) {
                    return Err(Error::Launch {
                        kernel: "sgemm",
                        reason: format!("the product's fused {} vector is {why}", f.name()),
                    });
                }
            }
        }
        if let Err(why) = self.check_not_input(&c) {
            return Err(Error::Launch {
                kernel: "sgemm",
                reason: format!("the product's output is {why}"),
            });
        }
        let flag = g.accumulate.erase();
        if let ErasedScalar::Slot(_, _, _, run) = flag {
            if run != self.run {
                return Err(Error::Launch {
                    kernel: "sgemm",
                    reason: "the accumulate flag is a per-step scalar of another step (or of an earlier run of this one)".into(),
                });
            }
        }
        let Some(rec) = &self.rec else {
            return self
                .device
                .backend()
                .sgemm(&shape, flag.bits(), &a, &b, &c, v.as_ref())
                .map(|()| true);
        };
        let mut rec = rec.borrow_mut();
        let args = rec.plan.launch_args.len();
        if let ErasedScalar::Slot(_, slot, _, _) = flag {
            if slot >= self.scalars.len() {
                return Err(Error::Launch {
                    kernel: "sgemm",
                    reason: format!("per-step scalar slot {slot} does not exist"),
                });
            }
            rec.scalar_uses.push((args, 0, slot));
        }
        Self::touch(&mut rec, &a, false);
        Self::touch(&mut rec, &b, false);
        Self::touch(&mut rec, &c, true);
        if let (Some(f), Some(v)) = (shape.fused, &v) {
            Self::touch(&mut rec, v, f.writes_vector());
        }
        rec.plan.launch_args.push(vec![flag.bits()]);
        rec.plan.ops.push(Op::Sgemm {
            shape,
            args,
            a,
            b,
            c,
            v,
            workspace,
        });
        Ok(true)
    }

    fn touch(rec: &mut Recorder, view: &RawView, write: bool) {
        let idx = match rec.roles.get(&view.buf.id) {
            Some(&i) => i,
            None => {
                let i = rec.plan.buffers.len();
                let n = rec.counts.entry(BufferRole::External).or_insert(0);
                let name = format!("ext{n}");
                *n += 1;
                rec.plan.buffers.push(PlanBuffer {
                    id: view.buf.id,
                    role: BufferRole::External,
                    name,
                    bytes: view.buf.bytes(),
                    read: false,
                    written: false,
                    arena_offset: None,
                });
                rec.roles.insert(view.buf.id, i);
                i
            }
        };
        let b = &mut rec.plan.buffers[idx];
        if write {
            b.written = true;
        } else {
            b.read = true;
        }
    }

    fn alloc<T: Element>(&self, len: usize, role: BufferRole) -> Result<Buffer<T>> {
        let raw = self.device.alloc_slot(T::DTYPE, len, self.owner)?;
        let b = Buffer::from_raw(raw, 0, len);
        self.register(&b.raw_view(), role, None);
        Ok(b)
    }

    /// A static output slot of `len` elements. In eager runs it starts zeroed; under replay
    /// it holds the previous step's values, so a step writes every element of its outputs.
    pub fn output<T: Element>(&self, len: usize) -> Result<Output<T>> {
        self.alloc(len, BufferRole::Output).map(Output)
    }

    /// A static temporary of `len` elements (same contents rule as outputs).
    pub fn workspace<T: Element>(&self, len: usize) -> Result<Buffer<T>> {
        self.alloc(len, BufferRole::Workspace)
    }

    /// Copies `src` into `dst` (same length) as part of the step.
    pub fn copy<T: Element>(&self, src: &Buffer<T>, dst: &mut Buffer<T>) -> Result<()> {
        let (s, d) = (src.raw_view(), dst.raw_view());
        self.check_device(&s, "copy")?;
        self.check_device(&d, "copy")?;
        check_copy(&s, &d)?;
        if let Err(why) = self.check_not_input(&d) {
            return Err(Error::Shape(format!("copy into {why}")));
        }
        let mut direct = |s: &RawView, d: &RawView| match &self.rec {
            None => self.device.backend().copy(s, d),
            Some(rec) => {
                let mut rec = rec.borrow_mut();
                Self::touch(&mut rec, s, false);
                Self::touch(&mut rec, d, true);
                rec.plan.ops.push(Op::Copy {
                    src: s.clone(),
                    dst: d.clone(),
                });
                Ok(())
            }
        };
        crate::packed::copy(&s, &d, &mut direct, &mut |k, g, a| self.launch(k, g, a))
    }

    /// An output holding a copy of `src` as it is at this point of the step (e.g. a
    /// gradient before it is clipped or reset). The copy is part of the recording, so what
    /// the caller receives is this step's value, borrowed until the next call.
    pub fn snapshot<T: Element>(&self, src: &Buffer<T>) -> Result<Output<T>> {
        if crate::faults::mutation("snapshot_alias") {
            // Mutation testing only: hand out the live buffer instead of a copy.
            return Ok(Output(src.clone()));
        }
        let mut out = self.output::<T>(src.len())?;
        self.copy(src, &mut out)?;
        Ok(out)
    }

    /// Sets every element of `dst` to `value` as part of the step.
    pub fn fill<T: Element>(&self, dst: &mut Buffer<T>, value: T) -> Result<()> {
        crate::packed::fill(&dst.raw_view(), value.to_bits(), &mut |k, g, a| {
            self.launch(k, g, a)
        })
    }

    /// All-reduces `buf` in place across the ranks of `comm` (e.g. gradients between backward
    /// and the optimizer of a data-parallel step). Recorded like a launch: on CUDA the NCCL
    /// call is captured into the rank's graph, so a replay runs it with no host involvement.
    /// Every rank's step must all-reduce the same buffers in the same order. A communicator of
    /// one local rank (host, wgpu) makes it the identity.
    #[cfg(feature = "nccl")]
    pub fn all_reduce<T: Element>(
        &self,
        comm: &crate::dist::Communicator,
        buf: &mut Buffer<T>,
        op: crate::dist::ReduceOp,
    ) -> Result<()> {
        if let Err(why) = self.check_not_input(&buf.raw_view()) {
            return Err(Error::Shape(format!("all-reduce into {why}")));
        }
        let op = crate::dist::AllReduce::new(comm, buf.raw_view(), op)?;
        if op.view.buf.device.id() != self.device.id() {
            return Err(Error::Shape(format!(
                "all-reduce over rank {} of {}: the rank's device is not the step's",
                comm.rank(),
                comm.size()
            )));
        }
        let Some(rec) = &self.rec else {
            return op.run();
        };
        let mut rec = rec.borrow_mut();
        Self::touch(&mut rec, &op.view, false);
        Self::touch(&mut rec, &op.view, true);
        rec.plan.ops.push(Op::AllReduce(op));
        Ok(())
    }

    /// The communicators this step's collectives used so far (record mode).
    #[cfg(feature = "nccl")]
    pub(crate) fn communicators(&self) -> Vec<crate::dist::Communicator> {
        self.rec
            .as_ref()
            .map(|r| crate::dist::communicators(&r.borrow().plan))
            .unwrap_or_default()
    }

    #[doc(hidden)]
    pub fn __scalar<T: ScalarValue>(&self, slot: usize) -> Scalar<T> {
        let bits = self.scalars[slot].bits();
        // Tagged with this run in both modes, so a scalar kept past its body is refused
        // elsewhere instead of binding another step's slot (or baking a value).
        Scalar {
            arg: ScalarArg::slot(slot, T::from_bits(bits), self.run),
        }
    }

    #[doc(hidden)]
    pub fn __state<S: crate::State + ?Sized>(&self, state: &S, name: &'static str) {
        state.visit_state(name, &mut |n, v| {
            self.register(&v, BufferRole::State, Some(n));
        });
    }
}

impl Launch for Step {
    fn launch(&self, kernel: &'static KernelDef, grid: Grid, args: &[KernelArg]) -> Result<()> {
        let b = bind(&self.device, kernel, grid, args, Some(self.run))?;
        for (i, (v, w)) in b.views.iter().zip(&b.writes).enumerate() {
            if *w {
                if let Err(why) = self.check_not_input(v) {
                    return Err(Error::Launch {
                        kernel: kernel.name,
                        reason: format!(
                            "`{}` is bound to {why}",
                            crate::device::slice_name(kernel, i)
                        ),
                    });
                }
            }
        }
        let Some(rec) = &self.rec else {
            return self
                .device
                .backend()
                .launch(kernel, b.grid, &b.args, &b.views);
        };
        // Compile now, so lowering (a CUDA capture) never compiles.
        self.device.backend().prepare(kernel)?;
        let mut rec = rec.borrow_mut();
        let launch = rec.plan.launch_args.len();
        for &(word, slot) in &b.slots {
            if slot >= self.scalars.len() {
                return Err(Error::Launch {
                    kernel: kernel.name,
                    reason: format!("per-step scalar slot {slot} does not exist"),
                });
            }
            rec.scalar_uses.push((launch, word, slot));
        }
        let mut bindings = Vec::with_capacity(b.views.len());
        let words = crate::plan::slice_offset_words(kernel);
        for ((v, w), word) in b.views.into_iter().zip(b.writes).zip(words) {
            Self::touch(&mut rec, &v, w);
            bindings.push(Binding {
                view: v,
                write: w,
                word,
            });
        }
        rec.plan.launch_args.push(b.args);
        rec.plan.ops.push(Op::Launch {
            kernel,
            grid: b.grid,
            args: launch,
            bindings,
        });
        Ok(())
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
        self.workspace(len)
    }

    fn counters(&self, len: usize) -> Result<Option<Buffer<u32>>> {
        self.alloc(len, BufferRole::Counters).map(Some)
    }
    fn library_subgroups(&self) -> Option<u32> {
        self.device.library_subgroups()
    }

    fn backend_kind(&self) -> Option<crate::BackendKind> {
        Some(self.device.kind())
    }

    fn fits_workgroup_memory(&self, kernel: &KernelDef) -> bool {
        self.device.fits_workgroup_memory(kernel)
    }
}
