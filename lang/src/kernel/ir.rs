//! The typed intermediate representation every `#[kernel]` target is emitted from.
//!
//! Variants and fields are named for the language constructs they stand for (`BinOp::Add` is
//! `+`, `Stmt::For` a `for` loop); only the ones whose meaning is not their name are documented.
#![allow(missing_docs)]

use proc_macro2::Span;

pub use super::copy_async::{CopyAsync, CopyFence};
pub use super::ldmatrix::Ldmatrix;
pub use super::mma::Mma;
pub use super::subgroup::SubgroupOp;

/// A scalar type of the kernel language (`UVec3` only for the id builtins).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    F32,
    /// IEEE binary16; every operation on it is the `f32` operation rounded to it
    /// (`check/half.rs` makes that explicit before emission).
    F16,
    /// bfloat16 (an `f32`'s upper half), with the same rule as `F16`.
    BF16,
    I32,
    U32,
    Bool,
    UVec3,
}

impl Ty {
    pub fn rust(self) -> &'static str {
        match self {
            Ty::F32 => "f32",
            Ty::F16 => "f16",
            Ty::BF16 => "bf16",
            Ty::I32 => "i32",
            Ty::U32 => "u32",
            Ty::Bool => "bool",
            Ty::UVec3 => "UVec3",
        }
    }
    pub fn is_int(self) -> bool {
        matches!(self, Ty::I32 | Ty::U32)
    }
    pub fn is_num(self) -> bool {
        matches!(self, Ty::I32 | Ty::U32 | Ty::F32 | Ty::F16 | Ty::BF16)
    }
    /// `f32`, `f16` or `bf16`.
    pub fn is_float(self) -> bool {
        matches!(self, Ty::F32 | Ty::F16 | Ty::BF16)
    }
    /// `f16` or `bf16`: two to a 32-bit word in buffers.
    pub fn is_half(self) -> bool {
        matches!(self, Ty::F16 | Ty::BF16)
    }
}

#[derive(Clone, Debug)]
pub enum ParamKind {
    Scalar(Ty),
    /// A global-memory slice; `atomic` when any atomic builtin touches it.
    Slice {
        elem: Ty,
        mutable: bool,
        atomic: bool,
    },
}

#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub kind: ParamKind,
    /// Index of the first argument word: scalars take one, slices two (offset, length).
    pub word: usize,
    /// Binding index for slices (0 is the argument block).
    pub binding: u32,
}

#[derive(Clone, Debug)]
pub struct Shared {
    pub name: String,
    pub elem: Ty,
    pub size: u32,
    /// Used with atomic builtins: then every access to it is atomic, and it starts zeroed on
    /// every target (CUDA zeroes it explicitly before the body).
    pub atomic: bool,
}

/// A per-invocation array of constant length (`let mut acc = [0.0f32; 16];`).
#[derive(Clone, Debug)]
pub struct LocalArray {
    /// The target name (mangled).
    pub name: String,
    /// The name in the source, for the host's fault.
    pub source: String,
    pub elem: Ty,
    pub len: u32,
}

/// How a per-invocation array is initialised.
#[derive(Clone, Debug)]
pub enum ArrayInit {
    /// `[v; N]`: every element `v` (evaluated once).
    Splat(Expr),
    /// `[a, b, c]`.
    List(Vec<Expr>),
    /// `f(...)`: the array a `#[device]` helper returns (an `ExprKind::Call` of a helper
    /// whose `DeviceFn::ret_array` is the array's type).
    Call(Expr),
}

#[derive(Clone, Debug)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<Param>,
    pub shared: Vec<Shared>,
    /// Per-invocation arrays, indexed by `Place::Array` and `Stmt::Array`.
    pub arrays: Vec<LocalArray>,
    pub workgroup: [u32; 3],
    /// `#[kernel(min_workgroups = N)]`: workgroups per multiprocessor the CUDA form's
    /// `__launch_bounds__` asks for (0: not given).
    pub min_workgroups: u32,
    pub body: Vec<Stmt>,
    pub has_barrier: bool,
    /// Uses a subgroup operation (`subgroup_add`, a shuffle, `subgroup_size()`, …).
    pub has_subgroup: bool,
    pub arg_words: usize,
    /// Every `#[device]` helper the kernel reaches, directly or through other helpers.
    pub helpers: Vec<DeviceFn>,
}

/// A `#[device]` helper function, lowered once per kernel that reaches it.
#[derive(Clone, Debug)]
pub struct DeviceFn {
    /// Unique over every crate (`gd_fn_<name>_<hash>`): the function's name in WGSL and CUDA C.
    pub id: String,
    /// The name in the source.
    pub name: String,
    /// Scalars by value and slices (`word` and `binding` are unused).
    pub params: Vec<Param>,
    pub ret: Option<Ty>,
    pub body: Vec<Stmt>,
    /// The workgroup arrays it takes (`&[T; N]` / `&mut [T; N]` parameters), named as the
    /// parameters; `Place::Shared` and `AtomicTarget::Shared` in its body index these. In
    /// every emitted signature they come after `params`, as in `ExprKind::Call`'s arguments.
    pub shared: Vec<Shared>,
    /// Its per-invocation arrays, indexed by `Place::Array` and `Stmt::Array` in its body.
    pub arrays: Vec<LocalArray>,
    /// Its arrays taken by value (`v: [f32; 4]`), as indices into `arrays`: the body works
    /// on its own copy, declared before the body (no `Stmt::Array`). In every emitted
    /// signature they come after `params` and `shared`, as in `ExprKind::Call`'s arguments.
    pub array_params: Vec<usize>,
    /// `-> [T; N]`: the element type and length of the array it returns (then `ret` is
    /// `None`, and its body ends in `Stmt::ReturnArray`).
    pub ret_array: Option<(Ty, u32)>,
    /// Whether it reaches a `barrier()`, itself or through a callee.
    pub has_barrier: bool,
    /// Whether it reaches a subgroup builtin, itself or through a callee: WGSL passes it the
    /// entry point's subgroup size and lane, the host form its workgroup's exchange.
    pub has_subgroup: bool,
    /// The first subgroup operation it reaches that exchanges values between invocations,
    /// and the helper whose body holds it (see `check::Sig::exchange`).
    pub exchange: Option<(SubgroupOp, String)>,
}

/// An argument of a helper call.
#[derive(Clone, Debug)]
pub enum CallArg {
    Value(Expr),
    /// A slice parameter of the caller (a kernel's or a helper's), by index.
    Slice(usize),
    /// A workgroup array of the caller (the kernel's, or a helper's workgroup-array
    /// parameter), by index; these follow every `Value` and `Slice` argument.
    Shared(usize),
    /// A per-invocation array of the caller, by index, passed by value (copied); these
    /// follow every `Shared` argument.
    Array(usize),
}

/// Where a value is read from or written to.
#[derive(Clone, Debug)]
pub enum Place {
    Local(String),
    Param(usize, Box<Expr>),
    Shared(usize, Box<Expr>),
    /// An element of a per-invocation array. An index at or past the length is a fault on
    /// the host; on GPU targets a read gives zero and a write is dropped (emitted explicitly).
    /// The checker folds indices known at compile time to literals (and rejects those out of
    /// range), which the emitters access unguarded.
    Array(usize, Box<Expr>),
}

/// The memory an atomic acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicTarget {
    /// A `&mut [u32]`/`&mut [i32]` parameter.
    Param(usize),
    /// A `shared::<u32|i32, N>()` workgroup array.
    Shared(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    And,
    Or,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::And => "&&",
            BinOp::Or => "||",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
        }
    }
    pub fn is_compare(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

/// Math builtins. All take and return the same type, except `Select` (bool, T, T).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MathFn {
    Abs,
    Min,
    Max,
    Clamp,
    Floor,
    Ceil,
    Round,
    Sqrt,
    Rsqrt,
    Exp,
    Exp2,
    Log,
    Log2,
    Pow,
    Sin,
    Cos,
    Tanh,
    Fma,
    Select,
}

impl MathFn {
    pub fn from_name(name: &str) -> Option<MathFn> {
        Some(match name {
            "abs" => MathFn::Abs,
            "min" => MathFn::Min,
            "max" => MathFn::Max,
            "clamp" => MathFn::Clamp,
            "floor" => MathFn::Floor,
            "ceil" => MathFn::Ceil,
            "round" => MathFn::Round,
            "sqrt" => MathFn::Sqrt,
            "rsqrt" => MathFn::Rsqrt,
            "exp" => MathFn::Exp,
            "exp2" => MathFn::Exp2,
            "log" | "ln" => MathFn::Log,
            "log2" => MathFn::Log2,
            "pow" | "powf" => MathFn::Pow,
            "sin" => MathFn::Sin,
            "cos" => MathFn::Cos,
            "tanh" => MathFn::Tanh,
            "fma" | "mul_add" => MathFn::Fma,
            "select" => MathFn::Select,
            _ => return None,
        })
    }
    pub fn arity(self) -> usize {
        match self {
            MathFn::Min | MathFn::Max | MathFn::Pow => 2,
            MathFn::Clamp | MathFn::Fma | MathFn::Select => 3,
            _ => 1,
        }
    }
    /// Whether the function is defined only on floats.
    pub fn float_only(self) -> bool {
        !matches!(
            self,
            MathFn::Abs | MathFn::Min | MathFn::Max | MathFn::Clamp | MathFn::Select
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdBuiltin {
    GlobalId,
    LocalId,
    WorkgroupId,
    NumWorkgroups,
    WorkgroupSize,
    GlobalSize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    Add,
    Sub,
    Max,
    Min,
    And,
    Or,
    Xor,
    Exchange,
    CompareExchange,
    Load,
    Store,
}

impl AtomicOp {
    pub fn from_name(name: &str) -> Option<AtomicOp> {
        Some(match name {
            "atomic_add" => AtomicOp::Add,
            "atomic_sub" => AtomicOp::Sub,
            "atomic_max" => AtomicOp::Max,
            "atomic_min" => AtomicOp::Min,
            "atomic_and" => AtomicOp::And,
            "atomic_or" => AtomicOp::Or,
            "atomic_xor" => AtomicOp::Xor,
            "atomic_exchange" => AtomicOp::Exchange,
            "atomic_compare_exchange" => AtomicOp::CompareExchange,
            "atomic_load" => AtomicOp::Load,
            "atomic_store" => AtomicOp::Store,
            _ => return None,
        })
    }
    /// Value operands after the buffer and index.
    pub fn operands(self) -> usize {
        match self {
            AtomicOp::Load => 0,
            AtomicOp::CompareExchange => 2,
            _ => 1,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub ty: Ty,
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    LitF32(f32),
    LitI32(i32),
    LitU32(u32),
    LitBool(bool),
    Local(String),
    /// A scalar parameter.
    Scalar(usize),
    Load(Place),
    Len(usize),
    Id(IdBuiltin),
    /// A component (0, 1, 2) of a `UVec3`.
    Field(Box<Expr>, u8),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Cast(Box<Expr>, Ty),
    /// The bits of a value as another type, nothing converted: `x.to_bits()` of an `f16` or
    /// `bf16` (to `Ty::U32`: its 16 bits, zero-extended), `f16::from_bits(w)` /
    /// `bf16::from_bits(w)` of a `u32` (to the 16-bit type: the low 16 bits of `w`).
    Bits(Box<Expr>, Ty),
    Math(MathFn, Vec<Expr>),
    /// `if c { a } else { b }` over pure expressions: only the taken branch is evaluated
    /// on host and CUDA; WGSL's `select` evaluates both, which is harmless for pure code.
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    /// A call of helper `Kernel::helpers[i]`, spanned for the uniformity check of a helper
    /// that reaches a barrier.
    Call(usize, Vec<CallArg>, Span),
    /// A subgroup operation on its operands (see [`SubgroupOp`]); the span is the call's,
    /// for the uniformity check.
    Subgroup(SubgroupOp, Vec<Expr>, Span),
}

#[derive(Clone, Debug)]
pub enum Stmt {
    /// `let`: `mutable` selects `var` over `let` in WGSL.
    Let {
        name: String,
        ty: Ty,
        mutable: bool,
        init: Option<Expr>,
    },
    Assign {
        place: Place,
        op: Option<BinOp>,
        value: Expr,
        ty: Ty,
    },
    If {
        cond: Expr,
        then: Vec<Stmt>,
        els: Vec<Stmt>,
    },
    /// `for var in start..end` (`end` evaluated once, as in Rust), with an optional step.
    /// As in Rust, the loop ends where `var + step` would pass `end` or overflow the type. A
    /// step that is not a literal is checked at run time: below 1 it is a fault on the host
    /// and no iteration on GPU targets (a literal below 1 is a compile error).
    For {
        var: String,
        /// The loop variable's name in the source, for the host's fault.
        source: String,
        ty: Ty,
        start: Expr,
        end: Expr,
        step: Option<Expr>,
        body: Vec<Stmt>,
        /// The variable's values when the range is known at compile time and short (see
        /// the checker's `unroll`): the WGSL emitter writes one copy of the body per value
        /// when there are at most `emit::wgsl::COPIES_MAX_TRIPS` of them.
        constant: Option<Vec<i64>>,
    },
    While {
        cond: Expr,
        body: Vec<Stmt>,
    },
    Loop {
        body: Vec<Stmt>,
    },
    Break,
    Continue,
    Return,
    /// `return v` (or a helper's tail expression).
    ReturnValue(Expr),
    /// `return a` of a helper returning an array: its per-invocation array `a`, by value.
    ReturnArray(usize),
    /// A helper call whose value, if any, is dropped.
    Call(Expr),
    Barrier {
        span: Span,
    },
    /// `device_fence()`: orders this invocation's memory accesses before it against those
    /// after it for every invocation of the launch (CUDA `__threadfence()`).
    DeviceFence {
        span: Span,
    },
    /// Declares per-invocation array `array` (an index into `Kernel::arrays`).
    Array {
        array: usize,
        init: ArrayInit,
    },
    /// `mma_m16n8k16(&a, &b, &mut acc)` (see [`super::mma`]).
    Mma(Mma),
    /// `ldmatrix_x4(s, p, &mut w)` (see [`super::ldmatrix`]).
    Ldmatrix(Ldmatrix),
    /// `copy_async(dst, d, src, s, n)` (see [`super::copy_async`]).
    CopyAsync(CopyAsync),
    /// `copy_async_commit()` or `copy_async_wait(k)`.
    CopyFence(CopyFence),
    /// An atomic read-modify-write on `target[index]`; the old value goes to `result`.
    Atomic {
        result: Option<String>,
        op: AtomicOp,
        target: AtomicTarget,
        index: Expr,
        operands: Vec<Expr>,
        ty: Ty,
    },
}

/// How a `for` loop's step is known, for the emitters.
pub enum ForStep<'a> {
    /// No step, or a literal 1: `var + 1` cannot pass `end`, since `var < end`.
    Unit,
    /// A literal above 1 (the checker rejects literals below 1 and folds known steps).
    Literal(&'a Expr),
    /// Known only at run time: checked before the loop.
    RunTime(&'a Expr),
}

impl ForStep<'_> {
    pub fn of(step: &Option<Expr>) -> ForStep<'_> {
        match step {
            None => ForStep::Unit,
            Some(e) => match e.kind {
                ExprKind::LitU32(1) | ExprKind::LitI32(1) => ForStep::Unit,
                ExprKind::LitU32(_) | ExprKind::LitI32(_) => ForStep::Literal(e),
                _ => ForStep::RunTime(e),
            },
        }
    }
}

/// Whether every loop of `body` terminates by construction: every `for` does (its variable
/// is immutable and each step moves it at least 1 closer to `end`, never past it: the
/// emitters stop where `var + step` would pass `end`, and a run-time step below 1 runs no
/// iteration). `while`, `loop` and a compare-exchange (a retry loop in WGSL) may not. Lets
/// the wgpu backend drop naga's loop-bounding counters from such kernels.
pub fn loops_terminate(body: &[Stmt]) -> bool {
    body.iter().all(|s| match s {
        Stmt::For { body, .. } => loops_terminate(body),
        Stmt::While { .. } | Stmt::Loop { .. } => false,
        Stmt::If { then, els, .. } => loops_terminate(then) && loops_terminate(els),
        Stmt::Atomic { op, .. } => *op != AtomicOp::CompareExchange,
        _ => true,
    })
}
