//! Subgroup operations on each target (their meaning: [`crate::kernel::subgroup`]): the
//! helper functions WGSL and CUDA C call, and the host form's calls of the runtime's
//! emulation. Reductions are the same xor butterfly of shuffles everywhere, never a vendor
//! reduction of unspecified order.

use crate::kernel::ir::*;
use crate::kernel::subgroup::CUDA_SIZE;

/// The line a WGSL kernel using subgroups starts with (after its name): where WGSL's
/// `enable subgroups;` would stand.
pub(super) const WGSL_MARKER: &str = "// requires: subgroups";

/// The reductions and shuffles (with their types) that `k`'s body and helpers use, each
/// once, in order.
pub(super) fn used(k: &Kernel) -> Vec<(SubgroupOp, Ty)> {
    let mut out = Vec::new();
    let bodies = std::iter::once(&k.body).chain(k.helpers.iter().map(|f| &f.body));
    for body in bodies {
        stmts(body, &mut |e| {
            if let ExprKind::Subgroup(op, _, _) = &e.kind {
                if op.arity() > 0 && !out.contains(&(*op, e.ty)) {
                    out.push((*op, e.ty));
                }
            }
        });
    }
    out
}

fn stmts(body: &[Stmt], f: &mut impl FnMut(&Expr)) {
    for s in body {
        match s {
            Stmt::Let { init, .. } => init.iter().for_each(|e| expr(e, f)),
            Stmt::Assign { place, value, .. } => {
                self::place(place, f);
                expr(value, f);
            }
            Stmt::If { cond, then, els } => {
                expr(cond, f);
                stmts(then, f);
                stmts(els, f);
            }
            Stmt::For {
                start,
                end,
                step,
                body,
                ..
            } => {
                expr(start, f);
                expr(end, f);
                step.iter().for_each(|e| expr(e, f));
                stmts(body, f);
            }
            Stmt::While { cond, body } => {
                expr(cond, f);
                stmts(body, f);
            }
            Stmt::Loop { body } => stmts(body, f),
            Stmt::Call(e) | Stmt::ReturnValue(e) => expr(e, f),
            Stmt::Array { init, .. } => match init {
                ArrayInit::Splat(v) => expr(v, f),
                ArrayInit::List(vs) => vs.iter().for_each(|v| expr(v, f)),
                ArrayInit::Call(v) => expr(v, f),
            },
            Stmt::Atomic {
                index, operands, ..
            } => {
                expr(index, f);
                operands.iter().for_each(|e| expr(e, f));
            }
            Stmt::Break
            | Stmt::Continue
            | Stmt::Return
            | Stmt::ReturnArray(_)
            | Stmt::Barrier { .. }
            | Stmt::DeviceFence { .. }
            | Stmt::Mma(_)
            | Stmt::CopyFence(_) => {}
            Stmt::Ldmatrix(l) => expr(&l.row, f),
            Stmt::CopyAsync(c) => {
                stmts(&c.setup, f);
                stmts(&c.copy, f);
            }
        }
    }
}

fn place(p: &Place, f: &mut impl FnMut(&Expr)) {
    if let Place::Param(_, ix) | Place::Shared(_, ix) | Place::Array(_, ix) = p {
        expr(ix, f);
    }
}

fn expr(e: &Expr, f: &mut impl FnMut(&Expr)) {
    f(e);
    match &e.kind {
        ExprKind::Load(p) => place(p, f),
        ExprKind::Field(a, _)
        | ExprKind::Unary(_, a)
        | ExprKind::Cast(a, _)
        | ExprKind::Bits(a, _) => expr(a, f),
        ExprKind::Binary(_, a, b) => {
            expr(a, f);
            expr(b, f);
        }
        ExprKind::Math(_, args) | ExprKind::Subgroup(_, args, _) => {
            args.iter().for_each(|a| expr(a, f))
        }
        ExprKind::Cond(c, a, b) => {
            expr(c, f);
            expr(a, f);
            expr(b, f);
        }
        ExprKind::Call(_, args, _) => args.iter().for_each(|a| {
            if let CallArg::Value(v) = a {
                expr(v, f);
            }
        }),
        _ => {}
    }
}

/// The emitted helper's name, e.g. `gd_sg_add_f32`.
pub(super) fn helper_name(op: SubgroupOp, ty: Ty) -> String {
    format!("gd_sg_{}_{}", op.tag(), ty.rust())
}

/// A WGSL helper of `op` on `t` (a WGSL type); `combine`: a reduction's step on `gd_a`,
/// `gd_b`. Every helper takes the subgroup size `gd_n`; shuffles also the lane `gd_i`. The
/// shuffled lane is kept inside the subgroup (WGSL leaves others indeterminate) and the
/// invocation's own value chosen where the source lies outside it.
pub(super) fn wgsl_helper(op: SubgroupOp, ty: Ty, t: &str, combine: &str) -> String {
    let name = helper_name(op, ty);
    match op {
        SubgroupOp::Add | SubgroupOp::Max | SubgroupOp::Min => format!(
            "fn {name}(gd_v: {t}, gd_n: u32) -> {t} {{\n    var gd_a = gd_v;\n    for (var gd_m = 1u; gd_m < gd_n; gd_m = gd_m << 1u) {{\n        let gd_b = subgroupShuffleXor(gd_a, gd_m);\n        gd_a = {combine};\n    }}\n    return gd_a;\n}}\n"
        ),
        SubgroupOp::Shuffle => format!(
            "fn {name}(gd_v: {t}, gd_l: u32, gd_n: u32, gd_i: u32) -> {t} {{\n    let gd_t = subgroupShuffle(gd_v, gd_l & (gd_n - 1u));\n    return select(gd_v, gd_t, gd_l < gd_n);\n}}\n"
        ),
        SubgroupOp::ShuffleXor => format!(
            "fn {name}(gd_v: {t}, gd_m: u32, gd_n: u32, gd_i: u32) -> {t} {{\n    let gd_t = subgroupShuffleXor(gd_v, gd_m & (gd_n - 1u));\n    return select(gd_v, gd_t, gd_m < gd_n);\n}}\n"
        ),
        SubgroupOp::ShuffleUp => format!(
            "fn {name}(gd_v: {t}, gd_d: u32, gd_n: u32, gd_i: u32) -> {t} {{\n    let gd_t = subgroupShuffleUp(gd_v, gd_d);\n    return select(gd_v, gd_t, gd_d <= gd_i);\n}}\n"
        ),
        SubgroupOp::ShuffleDown => format!(
            "fn {name}(gd_v: {t}, gd_d: u32, gd_n: u32, gd_i: u32) -> {t} {{\n    let gd_t = subgroupShuffleDown(gd_v, gd_d);\n    return select(gd_v, gd_t, gd_d < gd_n - gd_i);\n}}\n"
        ),
        SubgroupOp::Size | SubgroupOp::InvocationId => String::new(),
    }
}

/// The WGSL expression of `op` on operands `a` (`gd_sg_size`, `gd_sg_id`: the entry point's
/// builtins, which a helper using subgroups takes as parameters of the same names).
pub(super) fn wgsl_expr(op: SubgroupOp, ty: Ty, a: &[String]) -> String {
    match op {
        SubgroupOp::Size => "gd_sg_size".into(),
        SubgroupOp::InvocationId => "gd_sg_id".into(),
        _ if op.is_reduction() => format!("{}({}, gd_sg_size)", helper_name(op, ty), a[0]),
        _ => format!(
            "{}({}, {}, gd_sg_size, gd_sg_id)",
            helper_name(op, ty),
            a[0],
            a[1]
        ),
    }
}

/// A CUDA C helper of `op` on `t` (a C type), over the full warp; `combine` as for WGSL.
pub(super) fn cuda_helper(op: SubgroupOp, ty: Ty, t: &str, combine: &str) -> String {
    let name = helper_name(op, ty);
    let head = format!("static __device__ __forceinline__ {t} {name}");
    let n = CUDA_SIZE;
    let last = n - 1;
    match op {
        SubgroupOp::Add | SubgroupOp::Max | SubgroupOp::Min => format!(
            "{head}({t} gd_v) {{ {t} gd_a = gd_v; for (gd_u32 gd_m = 1u; gd_m < {n}u; gd_m <<= 1) {{ const {t} gd_b = __shfl_xor_sync(0xffffffffu, gd_a, (int)gd_m); gd_a = {combine}; }} return gd_a; }}\n"
        ),
        SubgroupOp::Shuffle => format!(
            "{head}({t} gd_v, gd_u32 gd_l) {{ const {t} gd_t = __shfl_sync(0xffffffffu, gd_v, (int)(gd_l & {last}u)); return gd_l < {n}u ? gd_t : gd_v; }}\n"
        ),
        SubgroupOp::ShuffleXor => format!(
            "{head}({t} gd_v, gd_u32 gd_m) {{ const {t} gd_t = __shfl_xor_sync(0xffffffffu, gd_v, (int)(gd_m & {last}u)); return gd_m < {n}u ? gd_t : gd_v; }}\n"
        ),
        SubgroupOp::ShuffleUp => format!(
            "{head}({t} gd_v, gd_u32 gd_d, gd_u32 gd_i) {{ const {t} gd_t = __shfl_up_sync(0xffffffffu, gd_v, gd_d & {last}u); return gd_d <= gd_i ? gd_t : gd_v; }}\n"
        ),
        SubgroupOp::ShuffleDown => format!(
            "{head}({t} gd_v, gd_u32 gd_d, gd_u32 gd_i) {{ const {t} gd_t = __shfl_down_sync(0xffffffffu, gd_v, gd_d & {last}u); return gd_d < {n}u - gd_i ? gd_t : gd_v; }}\n"
        ),
        SubgroupOp::Size | SubgroupOp::InvocationId => String::new(),
    }
}

/// The CUDA C expression of `op` on operands `a`; warps are runs of 32 threads of the
/// (one-dimensional) block.
pub(super) fn cuda_expr(op: SubgroupOp, ty: Ty, a: &[String]) -> String {
    let lane = format!("(threadIdx.x & {}u)", CUDA_SIZE - 1);
    match op {
        SubgroupOp::Size => format!("{CUDA_SIZE}u"),
        SubgroupOp::InvocationId => lane,
        _ if op.is_reduction() => format!("{}({})", helper_name(op, ty), a[0]),
        SubgroupOp::ShuffleUp | SubgroupOp::ShuffleDown => {
            format!("{}({}, {}, {lane})", helper_name(op, ty), a[0], a[1])
        }
        _ => format!("{}({}, {})", helper_name(op, ty), a[0], a[1]),
    }
}

/// The host form's expression of `op` on operands `a`: an exchange through the workgroup's
/// `gd_sg` (the runtime's `HostSubgroups`) at the invocation's linear index `gd_li`;
/// `combine`: a reduction's step on `gd_a`, `gd_b`.
pub(super) fn host_expr(op: SubgroupOp, ty: Ty, a: &[String], combine: &str) -> String {
    let t = ty.rust();
    let shuffle = |kind: &str| {
        format!(
            "gd_sg.shuffle::<{t}>(gd_li, {}, gd::Shuffle::{kind}, {}).await",
            a[0], a[1]
        )
    };
    match op {
        SubgroupOp::Size => "gd_sg.size()".into(),
        SubgroupOp::InvocationId => "gd_sg.lane(gd_li)".into(),
        SubgroupOp::Add | SubgroupOp::Max | SubgroupOp::Min => format!(
            "gd_sg.reduce::<{t}>(gd_li, {}, |gd_a: {t}, gd_b: {t}| {combine}).await",
            a[0]
        ),
        SubgroupOp::Shuffle => shuffle("Index"),
        SubgroupOp::ShuffleXor => shuffle("Xor"),
        SubgroupOp::ShuffleUp => shuffle("Up"),
        SubgroupOp::ShuffleDown => shuffle("Down"),
    }
}
