//! Half precision (`f16`, `bf16`): every operation on a 16-bit value is the `f32` operation on
//! the widened operands, rounded to the type (to nearest, ties to even; overflow to infinity;
//! NaN stays NaN).
//!
//! For `+ - * /` and `sqrt` that is the correctly rounded 16-bit result: `f32` carries more
//! than twice the significand bits of either type plus two, so rounding twice never differs
//! from rounding once. This pass makes the rule explicit in the IR after checking, so every
//! emitter sees 16-bit values only in locals, parameters, slices, `select`/`if` values and
//! casts to and from `f32` — the one conversion each target implements, identically.

use super::*;

/// Rewrites every 16-bit operation of `body` as its `f32` operation and a rounding cast.
pub fn widen_block(body: &mut [Stmt]) {
    for s in body {
        widen_stmt(s);
    }
}

fn widen_stmt(s: &mut Stmt) {
    match s {
        Stmt::Let { init, .. } => {
            if let Some(e) = init {
                widen(e);
            }
        }
        Stmt::Assign {
            place,
            op,
            value,
            ty,
        } => {
            widen_place(place);
            widen(value);
            if let (Some(o), true) = (*op, ty.is_half()) {
                // `p op= v` → `p = round(f32(p) op f32(v))`. The index is evaluated twice;
                // indices have no effects (calls that write memory are statements).
                let current = match place {
                    Place::Local(n) => Expr {
                        kind: ExprKind::Local(n.clone()),
                        ty: *ty,
                    },
                    p => Expr {
                        kind: ExprKind::Load(p.clone()),
                        ty: *ty,
                    },
                };
                let v = std::mem::replace(value, current.clone());
                *value = arith(o, current, v, *ty);
                *op = None;
            }
        }
        Stmt::If { cond, then, els } => {
            widen(cond);
            widen_block(then);
            widen_block(els);
        }
        Stmt::For {
            start,
            end,
            step,
            body,
            ..
        } => {
            widen(start);
            widen(end);
            if let Some(st) = step {
                widen(st);
            }
            widen_block(body);
        }
        Stmt::While { cond, body } => {
            widen(cond);
            widen_block(body);
        }
        Stmt::Loop { body } => widen_block(body),
        Stmt::ReturnValue(e) | Stmt::Call(e) => widen(e),
        Stmt::Array { init, .. } => match init {
            ArrayInit::Splat(e) => widen(e),
            ArrayInit::List(es) => es.iter_mut().for_each(widen),
            ArrayInit::Call(e) => widen(e),
        },
        Stmt::Atomic {
            index, operands, ..
        } => {
            widen(index);
            operands.iter_mut().for_each(widen);
        }
        Stmt::Break
        | Stmt::Continue
        | Stmt::Return
        | Stmt::ReturnArray(_)
        | Stmt::Barrier { .. }
        | Stmt::DeviceFence { .. }
        | Stmt::Mma(_)
        | Stmt::CopyFence(_) => {}
        Stmt::Ldmatrix(l) => widen(&mut l.row),
        Stmt::CopyAsync(c) => c.setup.iter_mut().chain(&mut c.copy).for_each(widen_stmt),
    }
}

fn widen_place(p: &mut Place) {
    match p {
        Place::Local(_) => {}
        Place::Param(_, ix) | Place::Shared(_, ix) | Place::Array(_, ix) => widen(ix),
    }
}

/// `e as f32`.
fn to_f32(e: Expr) -> Expr {
    Expr {
        kind: ExprKind::Cast(Box::new(e), Ty::F32),
        ty: Ty::F32,
    }
}

/// `e` (an `f32`) rounded to `t`.
fn round_to(e: Expr, t: Ty) -> Expr {
    Expr {
        kind: ExprKind::Cast(Box::new(e), t),
        ty: t,
    }
}

/// `round(f32(a) op f32(b))` for arithmetic, `f32(a) op f32(b)` for comparisons.
fn arith(op: BinOp, a: Expr, b: Expr, t: Ty) -> Expr {
    let wide = Expr {
        kind: ExprKind::Binary(op, Box::new(to_f32(a)), Box::new(to_f32(b))),
        ty: if op.is_compare() { Ty::Bool } else { Ty::F32 },
    };
    if op.is_compare() {
        wide
    } else {
        round_to(wide, t)
    }
}

fn widen(e: &mut Expr) {
    // Children first, so each rewrite sees operands already in primitive form.
    match &mut e.kind {
        ExprKind::Load(p) => widen_place(p),
        ExprKind::Field(a, _)
        | ExprKind::Unary(_, a)
        | ExprKind::Cast(a, _)
        | ExprKind::Bits(a, _) => widen(a),
        ExprKind::Binary(_, a, b) => {
            widen(a);
            widen(b);
        }
        ExprKind::Math(_, args) | ExprKind::Subgroup(_, args, _) => args.iter_mut().for_each(widen),
        ExprKind::Cond(c, a, b) => {
            widen(c);
            widen(a);
            widen(b);
        }
        ExprKind::Call(_, args, _) => {
            for a in args {
                if let CallArg::Value(v) = a {
                    widen(v);
                }
            }
        }
        ExprKind::LitF32(_)
        | ExprKind::LitI32(_)
        | ExprKind::LitU32(_)
        | ExprKind::LitBool(_)
        | ExprKind::Local(_)
        | ExprKind::Scalar(_)
        | ExprKind::Len(_)
        | ExprKind::Id(_) => {}
    }
    let placeholder = Expr {
        kind: ExprKind::LitBool(false),
        ty: Ty::Bool,
    };
    let old = std::mem::replace(e, placeholder);
    *e = match old.kind {
        ExprKind::Binary(op, a, b) if a.ty.is_half() => {
            let t = a.ty;
            arith(op, *a, *b, t)
        }
        ExprKind::Unary(UnOp::Neg, a) if a.ty.is_half() => {
            let t = a.ty;
            round_to(
                Expr {
                    kind: ExprKind::Unary(UnOp::Neg, Box::new(to_f32(*a))),
                    ty: Ty::F32,
                },
                t,
            )
        }
        ExprKind::Math(f, args) if f != MathFn::Select && old.ty.is_half() => round_to(
            Expr {
                kind: ExprKind::Math(f, args.into_iter().map(to_f32).collect()),
                ty: Ty::F32,
            },
            old.ty,
        ),
        // The primitive conversions stay; every other one goes through `f32` (a 16-bit value
        // widens exactly; an integer above 2^24 is rounded to `f32` first, then to `bf16`).
        ExprKind::Cast(a, to) if a.ty != to && (a.ty.is_half() || to.is_half()) => {
            if a.ty == Ty::F32 || to == Ty::F32 {
                round_to(*a, to)
            } else if a.ty.is_half() {
                let wide = to_f32(*a);
                Expr {
                    kind: ExprKind::Cast(Box::new(wide), to),
                    ty: to,
                }
            } else {
                round_to(to_f32(*a), to)
            }
        }
        kind => Expr { kind, ty: old.ty },
    };
}

/// The error for a construct that has no 16-bit form, with what to write instead.
pub(super) fn no_half(what: &str, t: Ty) -> String {
    let n = t.rust();
    format!("{what} of `{n}` are not supported: keep them in `f32` and convert (`x as f32`, then `v as {n}` to store)")
}
