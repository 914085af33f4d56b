//! Constants: kernel `const` items and compile-time evaluation of integer expressions.

use std::collections::HashMap;

use super::*;

impl Checker<'_> {
    pub(super) fn const_item(&mut self, c: &syn::ItemConst) {
        let Some(ty) = scalar_type(&c.ty) else {
            self.error(&c.ty, "a kernel `const` is `f32`, `i32`, `u32` or `bool`");
            return;
        };
        if ty.is_half() {
            let n = ty.rust();
            self.error(&c.ty, format!("a kernel `const` is `f32`, `i32`, `u32` or `bool`, not `{n}`: declare it `f32` and convert where it is used (`C as {n}`)"));
            self.poison(&c.ident.to_string());
            return;
        }
        if let Ok(e) = self.expr(&c.expr, Some(ty)) {
            match fold(&e) {
                Some(k) if e.ty == ty => {
                    self.consts.insert(c.ident.to_string(), (ty, k));
                }
                Some(_) => self.error(
                    &c.expr,
                    format!("expected `{}`, found `{}`", ty.rust(), e.ty.rust()),
                ),
                None => self.error(
                    &c.expr,
                    "a kernel `const` must be computed from literals and other consts",
                ),
            }
        }
    }
}

/// What is known at compile time besides literals.
#[derive(Default)]
pub(super) struct Known {
    /// Values of immutable locals (by mangled name).
    pub(super) locals: HashMap<String, ExprKind>,
    pub(super) workgroup: [u32; 3],
}

/// The value of an integer or `bool` expression when it is known at compile time: from
/// literals, consts and immutable locals with known values (`known`), through the operators
/// and builtins a WGSL compiler also evaluates. Division and float conversions are left out
/// (the emitters route them through helpers), so `None` means "not known here".
pub(super) fn const_value(e: &Expr, known: &Known) -> Option<ExprKind> {
    use ExprKind::*;
    let v = |x: &Expr| const_value(x, known);
    Some(match &e.kind {
        LitI32(_) | LitU32(_) | LitBool(_) => e.kind.clone(),
        Local(n) => known.locals.get(n)?.clone(),
        Field(b, c) if matches!(b.kind, Id(IdBuiltin::WorkgroupSize)) => {
            LitU32(*known.workgroup.get(*c as usize)?)
        }
        Unary(op, a) => match (op, v(a)?) {
            (UnOp::Neg, LitI32(x)) => LitI32(x.wrapping_neg()),
            (UnOp::Not, LitI32(x)) => LitI32(!x),
            (UnOp::Not, LitU32(x)) => LitU32(!x),
            (UnOp::Not, LitBool(x)) => LitBool(!x),
            _ => return None,
        },
        Binary(op, a, b) => match (v(a)?, v(b)?) {
            (LitU32(a), LitU32(b)) => match op {
                BinOp::Add => LitU32(a.wrapping_add(b)),
                BinOp::Sub => LitU32(a.wrapping_sub(b)),
                BinOp::Mul => LitU32(a.wrapping_mul(b)),
                BinOp::BitAnd => LitU32(a & b),
                BinOp::BitOr => LitU32(a | b),
                BinOp::BitXor => LitU32(a ^ b),
                BinOp::Shl => LitU32(a.wrapping_shl(b)),
                BinOp::Shr => LitU32(a.wrapping_shr(b)),
                BinOp::Eq => LitBool(a == b),
                BinOp::Ne => LitBool(a != b),
                BinOp::Lt => LitBool(a < b),
                BinOp::Le => LitBool(a <= b),
                BinOp::Gt => LitBool(a > b),
                BinOp::Ge => LitBool(a >= b),
                _ => return None,
            },
            (LitI32(a), LitI32(b)) => match op {
                BinOp::Add => LitI32(a.wrapping_add(b)),
                BinOp::Sub => LitI32(a.wrapping_sub(b)),
                BinOp::Mul => LitI32(a.wrapping_mul(b)),
                BinOp::BitAnd => LitI32(a & b),
                BinOp::BitOr => LitI32(a | b),
                BinOp::BitXor => LitI32(a ^ b),
                BinOp::Eq => LitBool(a == b),
                BinOp::Ne => LitBool(a != b),
                BinOp::Lt => LitBool(a < b),
                BinOp::Le => LitBool(a <= b),
                BinOp::Gt => LitBool(a > b),
                BinOp::Ge => LitBool(a >= b),
                _ => return None,
            },
            (LitI32(a), LitU32(b)) => match op {
                BinOp::Shl => LitI32(a.wrapping_shl(b)),
                BinOp::Shr => LitI32(a.wrapping_shr(b)),
                _ => return None,
            },
            (LitBool(a), LitBool(b)) => match op {
                BinOp::And => LitBool(a && b),
                BinOp::Or => LitBool(a || b),
                BinOp::BitAnd => LitBool(a & b),
                BinOp::BitOr => LitBool(a | b),
                BinOp::BitXor | BinOp::Ne => LitBool(a != b),
                BinOp::Eq => LitBool(a == b),
                _ => return None,
            },
            _ => return None,
        },
        Cast(a, to) => match (v(a)?, to) {
            (LitU32(x), Ty::U32) => LitU32(x),
            (LitU32(x), Ty::I32) => LitI32(x as i32),
            (LitI32(x), Ty::U32) => LitU32(x as u32),
            (LitI32(x), Ty::I32) => LitI32(x),
            (LitBool(x), Ty::U32) => LitU32(x as u32),
            (LitBool(x), Ty::I32) => LitI32(x as i32),
            _ => return None,
        },
        Math(f, args) => {
            let vals: Vec<ExprKind> = args.iter().map(v).collect::<Option<_>>()?;
            let ints: Option<Vec<i64>> = vals
                .iter()
                .map(|k| match k {
                    LitU32(x) => Some(*x as i64),
                    LitI32(x) => Some(*x as i64),
                    _ => None,
                })
                .collect();
            let back = |x: i64| match e.ty {
                Ty::U32 => Some(LitU32(x as u32)),
                Ty::I32 => Some(LitI32(x as i32)),
                _ => None,
            };
            match (f, vals.as_slice(), ints.as_deref()) {
                (MathFn::Select, [LitBool(c), a, b], _) => {
                    if *c {
                        a.clone()
                    } else {
                        b.clone()
                    }
                }
                (MathFn::Min, _, Some([a, b])) => back(*a.min(b))?,
                (MathFn::Max, _, Some([a, b])) => back(*a.max(b))?,
                (MathFn::Clamp, _, Some([x, lo, hi])) => back(*x.max(lo).min(hi))?,
                (MathFn::Abs, [LitI32(x)], _) => LitI32(x.wrapping_abs()),
                _ => return None,
            }
        }
        Cond(c, a, b) => match v(c)? {
            LitBool(true) => v(a)?,
            LitBool(false) => v(b)?,
            _ => return None,
        },
        _ => return None,
    })
}

/// Folds an expression of literals to a literal (for consts and workgroup-memory sizes).
pub fn fold(e: &Expr) -> Option<ExprKind> {
    use ExprKind::*;
    // The same meaning as at run time: integers wrap, `x / 0 == x`, `x % 0 == 0`, shift
    // amounts are taken modulo 32, casts saturate (Rust's `as`).
    match &e.kind {
        LitF32(_) | LitI32(_) | LitU32(_) | LitBool(_) => Some(e.kind.clone()),
        Unary(op, a) => match (op, fold(a)?) {
            (UnOp::Neg, LitF32(v)) => Some(LitF32(-v)),
            (UnOp::Neg, LitI32(v)) => Some(LitI32(v.wrapping_neg())),
            (UnOp::Not, LitBool(v)) => Some(LitBool(!v)),
            (UnOp::Not, LitI32(v)) => Some(LitI32(!v)),
            (UnOp::Not, LitU32(v)) => Some(LitU32(!v)),
            _ => None,
        },
        Cast(a, to) => {
            let v = fold(a)?;
            Some(match (v, to) {
                (LitF32(v), Ty::F32) => LitF32(v),
                (LitF32(v), Ty::I32) => LitI32(v as i32),
                (LitF32(v), Ty::U32) => LitU32(v as u32),
                (LitI32(v), Ty::F32) => LitF32(v as f32),
                (LitI32(v), Ty::I32) => LitI32(v),
                (LitI32(v), Ty::U32) => LitU32(v as u32),
                (LitU32(v), Ty::F32) => LitF32(v as f32),
                (LitU32(v), Ty::I32) => LitI32(v as i32),
                (LitU32(v), Ty::U32) => LitU32(v),
                (LitBool(v), Ty::I32) => LitI32(v as i32),
                (LitBool(v), Ty::U32) => LitU32(v as u32),
                _ => return None,
            })
        }
        Binary(op, a, b) => {
            let (a, b) = (fold(a)?, fold(b)?);
            if op.is_compare() {
                let ord = match (&a, &b) {
                    (LitU32(x), LitU32(y)) => x.partial_cmp(y),
                    (LitI32(x), LitI32(y)) => x.partial_cmp(y),
                    (LitF32(x), LitF32(y)) => x.partial_cmp(y),
                    (LitBool(x), LitBool(y)) => x.partial_cmp(y),
                    _ => return None,
                };
                use std::cmp::Ordering::*;
                return Some(LitBool(match (op, ord) {
                    (BinOp::Eq, o) => o == Some(Equal),
                    (BinOp::Ne, o) => o != Some(Equal),
                    (BinOp::Lt, o) => o == Some(Less),
                    (BinOp::Le, o) => matches!(o, Some(Less | Equal)),
                    (BinOp::Gt, o) => o == Some(Greater),
                    (BinOp::Ge, o) => matches!(o, Some(Greater | Equal)),
                    _ => return None,
                }));
            }
            match (a, b) {
                (LitU32(a), LitU32(b)) => Some(LitU32(match op {
                    BinOp::Add => a.wrapping_add(b),
                    BinOp::Sub => a.wrapping_sub(b),
                    BinOp::Mul => a.wrapping_mul(b),
                    BinOp::Div => a.checked_div(b).unwrap_or(a),
                    BinOp::Rem => a.checked_rem(b).unwrap_or(0),
                    BinOp::BitAnd => a & b,
                    BinOp::BitOr => a | b,
                    BinOp::BitXor => a ^ b,
                    BinOp::Shl => a.wrapping_shl(b),
                    BinOp::Shr => a.wrapping_shr(b),
                    _ => return None,
                })),
                (LitI32(a), LitU32(b)) => Some(LitI32(match op {
                    BinOp::Shl => a.wrapping_shl(b),
                    BinOp::Shr => a.wrapping_shr(b),
                    _ => return None,
                })),
                (LitI32(a), LitI32(b)) => Some(LitI32(match op {
                    BinOp::Add => a.wrapping_add(b),
                    BinOp::Sub => a.wrapping_sub(b),
                    BinOp::Mul => a.wrapping_mul(b),
                    BinOp::Div if b == 0 => a,
                    BinOp::Div => a.wrapping_div(b),
                    BinOp::Rem if b == 0 => 0,
                    BinOp::Rem => a.wrapping_rem(b),
                    BinOp::BitAnd => a & b,
                    BinOp::BitOr => a | b,
                    BinOp::BitXor => a ^ b,
                    _ => return None,
                })),
                (LitF32(a), LitF32(b)) => Some(LitF32(match op {
                    BinOp::Add => a + b,
                    BinOp::Sub => a - b,
                    BinOp::Mul => a * b,
                    BinOp::Div => a / b,
                    BinOp::Rem => a % b,
                    _ => return None,
                })),
                (LitBool(a), LitBool(b)) => Some(LitBool(match op {
                    BinOp::And | BinOp::BitAnd => a & b,
                    BinOp::Or | BinOp::BitOr => a | b,
                    BinOp::BitXor => a ^ b,
                    _ => return None,
                })),
                _ => None,
            }
        }
        _ => None,
    }
}
