//! Plans: the backend-neutral record of a step (ops over static buffers), inspectable and
//! printable as Graphviz DOT.

use std::collections::HashMap;
use std::fmt::Write;

use crate::blas::{GemmShape, Math};
use crate::buffer::RawView;
use crate::dtype::DType;
use crate::kernel::KernelDef;

/// What a buffer is to a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferRole {
    /// A static input slot, written before each replay.
    Input,
    /// A static output slot, read after each replay.
    Output,
    /// A static temporary of the step.
    Workspace,
    /// A user-owned persistent buffer (weights, optimizer state, gradients).
    State,
    /// Any other buffer the step touched.
    External,
    /// Zeroed counters of a launch site ([`crate::Launch::counters`]) that its launches leave
    /// zero: never packed by liveness, since they carry their zeros from one replay to the next.
    Counters,
}

impl BufferRole {
    fn name(self) -> &'static str {
        match self {
            BufferRole::Input => "input",
            BufferRole::Output => "output",
            BufferRole::Workspace => "workspace",
            BufferRole::State => "state",
            BufferRole::External => "external",
            BufferRole::Counters => "counters",
        }
    }
}

/// A buffer a plan touches, with its role and access.
#[derive(Clone, Debug)]
pub struct PlanBuffer {
    /// Allocation identity.
    pub id: u64,
    /// Role in the step.
    pub role: BufferRole,
    /// Name (the parameter's, or `out0`, `ws0`, …).
    pub name: String,
    /// Bytes of the allocation.
    pub bytes: u64,
    /// Read by some op.
    pub read: bool,
    /// Written by some op.
    pub written: bool,
    /// Where liveness packing put this buffer: its byte offset in the recording's workspace
    /// arena, shared with buffers whose live ranges (in op order) are disjoint from its own.
    /// `None`: an allocation of its own.
    pub arena_offset: Option<u64>,
}

#[derive(Clone, Debug)]
pub(crate) struct Binding {
    pub view: RawView,
    pub write: bool,
    /// The argument-block word holding this slice's element offset (its length follows).
    pub word: usize,
}

/// The argument-block word of each slice parameter's offset, in binding order.
pub(crate) fn slice_offset_words(kernel: &KernelDef) -> Vec<usize> {
    let mut word = 0;
    let mut out = Vec::new();
    for p in kernel.params {
        match p.kind {
            crate::kernel::ParamType::Slice { .. } => {
                out.push(word);
                word += 2;
            }
            crate::kernel::ParamType::Scalar(_) => word += 1,
        }
    }
    out
}

#[derive(Clone, Debug)]
pub(crate) enum Op {
    Launch {
        kernel: &'static KernelDef,
        grid: [u32; 3],
        args: usize,
        bindings: Vec<Binding>,
    },
    Copy {
        src: RawView,
        dst: RawView,
    },
    /// A product through the backend's vendor BLAS. `launch_args[args]` holds the accumulate
    /// flag (one word, patched like a kernel's per-step scalars).
    Sgemm {
        shape: GemmShape,
        #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
        args: usize,
        a: RawView,
        b: RawView,
        c: RawView,
        /// The fused epilogue's vector ([`GemmShape::fused`]): a bias read, or a bias
        /// gradient written.
        v: Option<RawView>,
        /// The call uses the library's shared workspace (so it is ordered after every other
        /// library call); `false`: it touches nothing but its operands.
        workspace: bool,
    },
    /// An in-place all-reduce across the ranks of a communicator.
    #[cfg(feature = "nccl")]
    AllReduce(crate::dist::AllReduce),
}

/// The record of one step: ops in order, their argument blocks, and every buffer touched.
/// Holding a plan pins (reference-counts) every buffer it touches.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub(crate) ops: Vec<Op>,
    pub(crate) launch_args: Vec<Vec<u32>>,
    pub(crate) buffers: Vec<PlanBuffer>,
    /// The ops as recorded, for inspection: fixed once the plan is recorded, since packing
    /// and rebinding re-point views to other allocations.
    pub(crate) inspect: Option<Vec<PlanOp>>,
    /// Bytes of the workspace arena liveness packing placed this plan in (0: none); it may be
    /// shared with the holder's other recordings.
    pub(crate) arena_bytes: u64,
    /// That arena.
    pub(crate) arena: Option<std::sync::Arc<crate::buffer::RawBuffer>>,
    /// Bytes of the input slots the recording allocated (an input recorded over the caller's
    /// device buffer has none).
    pub(crate) input_slot_bytes: u64,
    /// Lower as one queue in op order instead of by the dependency graph
    /// ([`Config::concurrent_ops`](crate::Config::concurrent_ops) false).
    pub(crate) serial: bool,
    /// Kernel-to-kernel edges may be programmatic where the backend has them
    /// ([`Config::programmatic_launch`](crate::Config::programmatic_launch)).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) programmatic: crate::Programmatic,
}

/// One view of an op, with the argument word (launch block, word) holding its offset where
/// the kernel reads it from there (launch bindings; copies and products use the view's own).
pub(crate) type ViewSite<'a> = (&'a mut RawView, Option<(usize, usize)>);

impl Op {
    /// Every view the op binds, in a fixed order (the index is a view's place in the op).
    pub(crate) fn views(&self) -> Vec<&RawView> {
        match self {
            Op::Launch { bindings, .. } => bindings.iter().map(|b| &b.view).collect(),
            Op::Copy { src, dst } => vec![src, dst],
            Op::Sgemm { a, b, c, v, .. } => [a, b, c].into_iter().chain(v.as_ref()).collect(),
            #[cfg(feature = "nccl")]
            Op::AllReduce(a) => vec![&a.view],
        }
    }

    /// The `which`-th view of [`Op::views`], mutable, with its argument word.
    pub(crate) fn view_mut(&mut self, which: usize) -> ViewSite<'_> {
        match self {
            Op::Launch { bindings, args, .. } => {
                let b = &mut bindings[which];
                (&mut b.view, Some((*args, b.word)))
            }
            Op::Copy { src, dst } => (if which == 0 { src } else { dst }, None),
            Op::Sgemm { a, b, c, v, .. } => (
                [a, b, c]
                    .into_iter()
                    .chain(v.as_mut())
                    .nth(which)
                    .expect("3 or 4 views"),
                None,
            ),
            #[cfg(feature = "nccl")]
            Op::AllReduce(a) => (&mut a.view, None),
        }
    }
}

/// One op of a plan, for inspection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanOp {
    /// A kernel launch.
    Launch {
        /// Kernel name.
        kernel: &'static str,
        /// Workgroup counts.
        grid: [u32; 3],
        /// Indices into [`Plan::buffers`] read.
        reads: Vec<usize>,
        /// Indices into [`Plan::buffers`] written.
        writes: Vec<usize>,
    },
    /// A device-to-device copy.
    Copy {
        /// Source buffer index.
        src: usize,
        /// Destination buffer index.
        dst: usize,
    },
    /// A matrix product through the backend's vendor BLAS (cuBLAS on CUDA).
    Sgemm {
        /// `[m, n, k]` of `C[m × n] = op(A)·op(B)`.
        dims: [usize; 3],
        /// The element types and how `f32` inputs multiply.
        types: crate::blas::GemmTypes,
        /// Buffer indices of `A` and `B`.
        reads: [usize; 2],
        /// Buffer index of `C`.
        write: usize,
        /// The epilogue fused into the library call, and the buffer index of its vector (read
        /// for a bias, written for a bias gradient).
        fused: Option<(crate::blas::Fused, usize)>,
    },
    /// An in-place all-reduce of one buffer across the ranks of a communicator.
    #[cfg(feature = "nccl")]
    AllReduce {
        /// Index into [`Plan::buffers`] of the buffer reduced (read and written).
        buffer: usize,
        /// How the ranks' values combine.
        op: crate::dist::ReduceOp,
        /// This rank.
        rank: usize,
        /// The number of ranks.
        ranks: usize,
    },
}

impl Plan {
    /// Kernel launches per replay (the plan's own kernels; vendor-library calls are
    /// counted by [`Plan::library_calls`]).
    pub fn launch_count(&self) -> usize {
        self.ops
            .iter()
            .filter(|o| matches!(o, Op::Launch { .. }))
            .count()
    }

    /// Calls into a vendor library per replay: cuBLAS products and NCCL collectives.
    pub fn library_calls(&self) -> usize {
        self.sgemm_count()
            + self
                .ops
                .iter()
                .filter(|o| !matches!(o, Op::Launch { .. } | Op::Copy { .. } | Op::Sgemm { .. }))
                .count()
    }

    pub(crate) fn sgemm_count(&self) -> usize {
        self.ops
            .iter()
            .filter(|o| matches!(o, Op::Sgemm { .. }))
            .count()
    }

    /// Every buffer the plan touches.
    pub fn buffers(&self) -> &[PlanBuffer] {
        &self.buffers
    }

    /// Bytes of the static buffers the plan owns (input slots, outputs, workspace, counters): the
    /// workspace arena once, plus every static buffer outside it. A device input bound by
    /// address is the caller's buffer, and a workspace no op touches is freed after
    /// recording: neither is counted.
    pub fn static_bytes(&self) -> u64 {
        self.arena_bytes
            + self.input_slot_bytes
            + self
                .buffers
                .iter()
                .filter(|b| {
                    // A workspace no op touches is held by nothing once recorded.
                    let unused = b.role == BufferRole::Workspace && !b.read && !b.written;
                    b.arena_offset.is_none()
                        && !unused
                        && matches!(
                            b.role,
                            BufferRole::Output | BufferRole::Workspace | BufferRole::Counters
                        )
                })
                .map(|b| b.bytes)
                .sum::<u64>()
    }

    /// Bytes of the workspace arena the plan sits in (0 where nothing shares memory): with
    /// [`Config::share_arena`](crate::Config::share_arena), the arena of the holder's
    /// recordings, sized to the largest of them.
    pub fn arena_bytes(&self) -> u64 {
        self.arena_bytes
    }

    fn index(&self) -> HashMap<u64, usize> {
        self.buffers
            .iter()
            .enumerate()
            .map(|(i, b)| (b.id, i))
            .collect()
    }

    /// The dependency graph of the ops as they are bound now (after liveness packing and
    /// rebinding), or a chain where the plan is lowered serially.
    pub(crate) fn dag(&self) -> crate::dag::Dag {
        if self.serial {
            crate::dag::Dag::chain(self.ops.len())
        } else {
            crate::dag::Dag::of(&self.ops)
        }
    }

    /// The dependency edges `(before, after)` between ops (indices into [`Plan::ops`]): `after`
    /// reads or writes memory `before` writes, or writes memory `before` reads (views
    /// overlapping in one allocation, a shared workspace arena included), transitively
    /// reduced. Ops with no path between them may run concurrently (on CUDA they do); a plan
    /// lowered serially ([`Config::concurrent_ops`](crate::Config::concurrent_ops) false) is a
    /// chain.
    pub fn edges(&self) -> Vec<(usize, usize)> {
        self.dag().edges()
    }

    /// The ops, for inspection.
    pub fn ops(&self) -> Vec<PlanOp> {
        if let Some(ops) = &self.inspect {
            return ops.clone();
        }
        let ix = self.index();
        self.ops
            .iter()
            .map(|op| match op {
                Op::Launch {
                    kernel,
                    grid,
                    bindings,
                    ..
                } => PlanOp::Launch {
                    kernel: kernel.name,
                    grid: *grid,
                    reads: bindings
                        .iter()
                        .filter(|b| !b.write)
                        .map(|b| ix[&b.view.buf.id])
                        .collect(),
                    writes: bindings
                        .iter()
                        .filter(|b| b.write)
                        .map(|b| ix[&b.view.buf.id])
                        .collect(),
                },
                Op::Copy { src, dst } => PlanOp::Copy {
                    src: ix[&src.buf.id],
                    dst: ix[&dst.buf.id],
                },
                Op::Sgemm {
                    shape, a, b, c, v, ..
                } => PlanOp::Sgemm {
                    dims: [shape.m, shape.n, shape.k],
                    types: shape.types,
                    reads: [ix[&a.buf.id], ix[&b.buf.id]],
                    write: ix[&c.buf.id],
                    fused: shape.fused.zip(v.as_ref().map(|v| ix[&v.buf.id])),
                },
                #[cfg(feature = "nccl")]
                Op::AllReduce(a) => {
                    let (op, rank, ranks) = a.describe();
                    PlanOp::AllReduce {
                        buffer: ix[&a.view.buf.id],
                        op,
                        rank,
                        ranks,
                    }
                }
            })
            .collect()
    }

    /// Graphviz DOT: ops as ellipses in order, buffers as boxes, edges for reads and writes,
    /// and the dependency edges between ops ([`Plan::edges`]) dashed.
    pub fn to_dot(&self) -> String {
        let mut s =
            String::from("digraph plan {\n  rankdir=LR;\n  node [fontname=\"monospace\"];\n");
        for (i, b) in self.buffers.iter().enumerate() {
            let style = match b.role {
                BufferRole::Input => "shape=box, style=filled, fillcolor=\"#dbeafe\"",
                BufferRole::Output => "shape=box, style=filled, fillcolor=\"#dcfce7\"",
                BufferRole::State => "shape=box, style=filled, fillcolor=\"#fef9c3\"",
                _ => "shape=box",
            };
            writeln!(
                s,
                "  b{i} [{style}, label=\"{} ({}, {} B)\"];",
                b.name,
                b.role.name(),
                b.bytes
            )
            .unwrap();
        }
        for (n, op) in self.ops().iter().enumerate() {
            match op {
                PlanOp::Launch {
                    kernel,
                    grid,
                    reads,
                    writes,
                } => {
                    writeln!(
                        s,
                        "  op{n} [shape=ellipse, label=\"{n}: {kernel} {}x{}x{}\"];",
                        grid[0], grid[1], grid[2]
                    )
                    .unwrap();
                    for r in reads {
                        writeln!(s, "  b{r} -> op{n};").unwrap();
                    }
                    for w in writes {
                        writeln!(s, "  op{n} -> b{w};").unwrap();
                    }
                }
                PlanOp::Copy { src, dst } => {
                    writeln!(s, "  op{n} [shape=diamond, label=\"{n}: copy\"];\n  b{src} -> op{n};\n  op{n} -> b{dst};").unwrap();
                }
                PlanOp::Sgemm {
                    dims,
                    types,
                    reads,
                    write,
                    fused,
                } => {
                    let precision = match (types.input, types.output, types.math) {
                        (DType::F32, _, Math::F32) => String::new(),
                        (DType::F32, _, Math::Tf32) => " tf32".into(),
                        (i, o, _) => format!(" {}->{}", i.name(), o.name()),
                    };
                    let epilogue = fused.map_or(String::new(), |(f, _)| format!(" +{}", f.name()));
                    writeln!(
                        s,
                        "  op{n} [shape=hexagon, label=\"{n}: sgemm {}x{}x{}{precision}{epilogue}\"];",
                        dims[0], dims[1], dims[2]
                    )
                    .unwrap();
                    for r in reads {
                        writeln!(s, "  b{r} -> op{n};").unwrap();
                    }
                    writeln!(s, "  op{n} -> b{write};").unwrap();
                    match fused {
                        Some((f, v)) if f.writes_vector() => {
                            writeln!(s, "  op{n} -> b{v};").unwrap()
                        }
                        Some((_, v)) => writeln!(s, "  b{v} -> op{n};").unwrap(),
                        None => {}
                    }
                }
                #[cfg(feature = "nccl")]
                PlanOp::AllReduce {
                    buffer,
                    op,
                    rank,
                    ranks,
                } => {
                    writeln!(s, "  op{n} [shape=octagon, label=\"{n}: all-reduce {} (rank {rank} of {ranks})\"];\n  b{buffer} -> op{n};\n  op{n} -> b{buffer};", op.name()).unwrap();
                }
            }
        }
        for (i, j) in self.edges() {
            writeln!(s, "  op{i} -> op{j} [style=dashed, color=\"#dc2626\"];").unwrap();
        }
        s.push_str("}\n");
        s
    }
}
