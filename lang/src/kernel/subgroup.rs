//! Subgroup (warp) operations: what each one means on every target.
//!
//! A kernel using subgroups has a one-dimensional workgroup of a multiple of 32 invocations.
//! A subgroup is a run of `subgroup_size()` consecutive invocations of it (by `local_id().x`);
//! an invocation's place in it is `subgroup_invocation_id()`, `local_id().x % size`. Every operation is emitted the same way on every target, so
//! its result does not depend on a vendor's reduction order:
//!
//! - a reduction is an xor butterfly: for `m = 1, 2, 4, …, size/2`, `v = op(v, shuffle_xor(v,
//!   m))`. Every invocation ends with the same value, for floats the pairwise sum over the
//!   subgroup in lane order, `((x0 + x1) + (x2 + x3)) + …` (NaN payloads aside);
//! - a shuffle whose source lane lies outside the subgroup returns the invocation's own value
//!   (CUDA's rule for up and down, emitted explicitly for WGSL and the index/xor forms).
//!
//! The host backend emulates the same operations over subgroups of the host device's size.

use super::ir::{BinOp, Expr, ExprKind, MathFn, Ty};

/// The subgroup builtins of the kernel language.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubgroupOp {
    /// `subgroup_size()`: invocations per subgroup (32 on CUDA).
    Size,
    /// `subgroup_invocation_id()`: the invocation's lane, `0..subgroup_size()`.
    InvocationId,
    /// `subgroup_add(v)`.
    Add,
    /// `subgroup_max(v)`.
    Max,
    /// `subgroup_min(v)`.
    Min,
    /// `subgroup_shuffle(v, lane)`: `v` of lane `lane`.
    Shuffle,
    /// `subgroup_shuffle_xor(v, mask)`: `v` of lane `id ^ mask`.
    ShuffleXor,
    /// `subgroup_shuffle_up(v, delta)`: `v` of lane `id - delta`.
    ShuffleUp,
    /// `subgroup_shuffle_down(v, delta)`: `v` of lane `id + delta`.
    ShuffleDown,
}

/// The names of the subgroup builtins (for "did you mean" hints).
pub const NAMES: &[&str] = &[
    "subgroup_size",
    "subgroup_invocation_id",
    "subgroup_add",
    "subgroup_max",
    "subgroup_min",
    "subgroup_shuffle",
    "subgroup_shuffle_xor",
    "subgroup_shuffle_up",
    "subgroup_shuffle_down",
];

/// A kernel using subgroups has a workgroup of a multiple of this many invocations: CUDA's
/// warp size, so every warp is full (a shuffle names every lane of a full mask), and a
/// multiple of every subgroup size up to 32. Devices with larger subgroups check at launch.
pub const WORKGROUP_MULTIPLE: u32 = 32;

/// The subgroup size on CUDA (the warp size).
pub const CUDA_SIZE: u32 = 32;

impl SubgroupOp {
    /// The builtin called `name`, if any.
    pub fn from_name(name: &str) -> Option<SubgroupOp> {
        Some(match name {
            "subgroup_size" => SubgroupOp::Size,
            "subgroup_invocation_id" => SubgroupOp::InvocationId,
            "subgroup_add" => SubgroupOp::Add,
            "subgroup_max" => SubgroupOp::Max,
            "subgroup_min" => SubgroupOp::Min,
            "subgroup_shuffle" => SubgroupOp::Shuffle,
            "subgroup_shuffle_xor" => SubgroupOp::ShuffleXor,
            "subgroup_shuffle_up" => SubgroupOp::ShuffleUp,
            "subgroup_shuffle_down" => SubgroupOp::ShuffleDown,
            _ => return None,
        })
    }

    /// The builtin's name in the source.
    pub fn name(self) -> &'static str {
        NAMES[self as usize]
    }

    /// Operands: none for the size and id, the value for a reduction, the value and the lane
    /// (mask, delta) for a shuffle.
    pub fn arity(self) -> usize {
        match self {
            SubgroupOp::Size | SubgroupOp::InvocationId => 0,
            SubgroupOp::Add | SubgroupOp::Max | SubgroupOp::Min => 1,
            _ => 2,
        }
    }

    /// A reduction over the subgroup.
    pub fn is_reduction(self) -> bool {
        matches!(self, SubgroupOp::Add | SubgroupOp::Max | SubgroupOp::Min)
    }

    /// Whether the second operand must be the same for every invocation: the mask of xor
    /// and the delta of up and down (SPIR-V and WGSL require it dynamically uniform).
    pub fn uniform_operand(self) -> bool {
        matches!(
            self,
            SubgroupOp::ShuffleXor | SubgroupOp::ShuffleUp | SubgroupOp::ShuffleDown
        )
    }

    /// A short name for emitted helpers (`add`, `shfl_xor`, …).
    pub fn tag(self) -> &'static str {
        match self {
            SubgroupOp::Size => "size",
            SubgroupOp::InvocationId => "id",
            SubgroupOp::Add => "add",
            SubgroupOp::Max => "max",
            SubgroupOp::Min => "min",
            SubgroupOp::Shuffle => "shfl",
            SubgroupOp::ShuffleXor => "shfl_xor",
            SubgroupOp::ShuffleUp => "shfl_up",
            SubgroupOp::ShuffleDown => "shfl_down",
        }
    }

    /// A reduction's step `op(a, b)` on locals `a` and `b` of type `ty`, as the language's
    /// own `+`, `max` or `min`, so each target emits it with its usual meaning.
    pub fn combine(self, ty: Ty, a: &str, b: &str) -> Expr {
        let local = |n: &str| Expr {
            kind: ExprKind::Local(n.to_string()),
            ty,
        };
        let kind = match self {
            SubgroupOp::Add => ExprKind::Binary(BinOp::Add, Box::new(local(a)), Box::new(local(b))),
            SubgroupOp::Max => ExprKind::Math(MathFn::Max, vec![local(a), local(b)]),
            SubgroupOp::Min => ExprKind::Math(MathFn::Min, vec![local(a), local(b)]),
            _ => unreachable!("`combine` of a subgroup operation that is not a reduction"),
        };
        Expr { kind, ty }
    }
}
