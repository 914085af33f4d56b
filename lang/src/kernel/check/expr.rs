//! Expressions: literals, paths, unary and binary operators.

use super::*;

impl Checker<'_> {
    pub fn expr(&mut self, e: &syn::Expr, expect: Option<Ty>) -> Res<Expr> {
        let effect_ok = std::mem::take(&mut self.effect_ok);
        match e {
            syn::Expr::Lit(l) => self.lit(&l.lit, expect, false),
            syn::Expr::Paren(p) => self.expr(&p.expr, expect),
            syn::Expr::Group(g) => self.expr(&g.expr, expect),
            syn::Expr::Path(p) => self.path(p),
            syn::Expr::Unary(u) => self.unary(u, expect),
            syn::Expr::Binary(b) => {
                if compound_op(&b.op).is_some() {
                    self.error(e, "compound assignment is a statement, not a value");
                    return Err(());
                }
                self.binary(b, expect)
            }
            syn::Expr::Cast(c) => {
                let Some(to) = scalar_type(&c.ty).filter(|t| *t != Ty::Bool) else {
                    self.error(
                        &c.ty,
                        "`as` converts to `f32`, `f16`, `bf16`, `i32` or `u32`",
                    );
                    return Err(());
                };
                // An untyped literal cast keeps Rust's meaning: `1 as f32`.
                let inner = self.expr(&c.expr, None)?;
                if inner.ty == Ty::UVec3 {
                    self.error(
                        &c.expr,
                        "a `UVec3` cannot be cast; cast one of its components (`.x`)",
                    );
                    return Err(());
                }
                if inner.ty == Ty::Bool && to.is_float() {
                    self.error(
                        c,
                        format!(
                            "`bool as {}` is not allowed (as in Rust); write `select(b, 1.0, 0.0)`",
                            to.rust()
                        ),
                    );
                    return Err(());
                }
                Ok(Expr {
                    kind: ExprKind::Cast(Box::new(inner), to),
                    ty: to,
                })
            }
            syn::Expr::Index(ix) => {
                let (target, ty, _) = self.index_target(&ix.expr)?;
                let index = self.index_expr(&ix.index)?;
                let place = match target {
                    Target::Param(p) => {
                        if let ParamKind::Slice { atomic: true, .. } = self.params[p].kind {
                            let n = &self.params[p].name;
                            self.error(ix, format!("`{n}` is used with atomics, so every access to it is atomic: write `let v = atomic_load({n}, i);`"));
                            return Err(());
                        }
                        Place::Param(p, Box::new(index))
                    }
                    Target::Shared(s) => {
                        self.shared_atomic_plain(s, ix, false)?;
                        self.shared_index_in_bounds(s, &index, &ix.index)?;
                        Place::Shared(s, Box::new(index))
                    }
                    Target::Array(a) => {
                        Place::Array(a, Box::new(self.array_index(a, index, &ix.index)?))
                    }
                };
                Ok(Expr {
                    kind: ExprKind::Load(place),
                    ty,
                })
            }
            syn::Expr::Field(f) => {
                let base = self.expr(&f.base, None)?;
                if base.ty != Ty::UVec3 {
                    self.error(f, "only the id builtins (`global_id()`, …) have fields (`.x`, `.y`, `.z`); structs are not supported in kernels: pass each field as its own parameter");
                    return Err(());
                }
                let comp = match &f.member {
                    syn::Member::Named(n) if n == "x" => 0,
                    syn::Member::Named(n) if n == "y" => 1,
                    syn::Member::Named(n) if n == "z" => 2,
                    _ => {
                        self.error(&f.member, "a `UVec3` has fields `x`, `y` and `z`");
                        return Err(());
                    }
                };
                Ok(Expr {
                    kind: ExprKind::Field(Box::new(base), comp),
                    ty: Ty::U32,
                })
            }
            syn::Expr::Call(c) => self.call(c, expect, effect_ok),
            syn::Expr::MethodCall(m) => self.method(m, expect),
            syn::Expr::If(ei) => {
                if !if_is_pure(ei) {
                    self.error(ei, "an `if` whose branches contain statements can only be the whole value of a `let` or an assignment; move the statements out or write `let v = if ... ;`");
                    return Err(());
                }
                let Some((_, els)) = &ei.else_branch else {
                    self.error(ei, "an `if` used as a value needs an `else` branch with a value of the same type: `if c { a } else { b }`");
                    return Err(());
                };
                let cond = self.expr(&ei.cond, Some(Ty::Bool))?;
                if cond.ty != Ty::Bool {
                    self.error(&ei.cond, mismatch(Ty::Bool, cond.ty));
                    return Err(());
                }
                // `if_is_pure` made sure each branch is one expression.
                let one = "an `if` used as a value has one expression per branch: `if c { a } else { b }`";
                let Some(syn::Stmt::Expr(t, None)) = ei.then_branch.stmts.first() else {
                    self.error(ei, one);
                    return Err(());
                };
                let a = self.expr(t, expect)?;
                let b = match &**els {
                    syn::Expr::Block(b) => match b.block.stmts.first() {
                        Some(syn::Stmt::Expr(t, None)) => self.expr(t, Some(a.ty))?,
                        _ => {
                            self.error(ei, one);
                            return Err(());
                        }
                    },
                    other => self.expr(other, Some(a.ty))?,
                };
                if a.ty != b.ty {
                    self.error(
                        ei,
                        format!(
                            "`if` branches have different types: `{}` and `{}`",
                            a.ty.rust(),
                            b.ty.rust()
                        ),
                    );
                    return Err(());
                }
                let ty = a.ty;
                Ok(Expr {
                    kind: ExprKind::Cond(Box::new(cond), Box::new(a), Box::new(b)),
                    ty,
                })
            }
            syn::Expr::Block(b) if b.block.stmts.len() == 1 => match &b.block.stmts[0] {
                syn::Stmt::Expr(inner, None) => self.expr(inner, expect),
                _ => {
                    self.error(e, "a block with statements is a value only as the whole value of a `let` or an assignment: `let v = { ...; x };`");
                    Err(())
                }
            },
            syn::Expr::Block(_) => {
                self.error(e, "a block with statements is a value only as the whole value of a `let` or an assignment: `let v = { ...; x };`");
                Err(())
            }
            syn::Expr::Closure(_) => {
                self.error(
                    e,
                    "closures are not supported in kernels; write the code inline where it is used",
                );
                Err(())
            }
            syn::Expr::Reference(r) => {
                let inner = &r.expr;
                self.error(
                    e,
                    format!("references other than slice parameters are not supported in kernels; use the value itself: `{}`", crate::tokens::shown(inner)),
                );
                Err(())
            }
            syn::Expr::Struct(_) => {
                self.error(
                    e,
                    "structs are not supported in kernels; pass each field as its own parameter",
                );
                Err(())
            }
            syn::Expr::Tuple(_) => {
                self.error(
                    e,
                    "tuples are not supported in kernels; use one local per value",
                );
                Err(())
            }
            syn::Expr::Array(_) | syn::Expr::Repeat(_) => {
                self.error(e, "an array value only initialises a `let`: `let mut acc = [0.0f32; 16];` (arrays are not passed, returned or assigned as a whole)");
                Err(())
            }
            syn::Expr::Macro(m) => {
                self.error(&m.mac, macro_message(&m.mac));
                Err(())
            }
            syn::Expr::Async(_) | syn::Expr::Await(_) => {
                self.error(
                    e,
                    "`async`/`.await` are not supported in kernels: a kernel runs to completion; remove them",
                );
                Err(())
            }
            syn::Expr::Match(_) => {
                self.error(
                    e,
                    "`match` is not supported in kernels; write `if ... else if ... else` (or `select(c, a, b)` for a value)",
                );
                Err(())
            }
            syn::Expr::Let(_) => {
                self.error(
                    e,
                    "`if let`/`while let` are not supported in kernels (there are no enums); compare values with `==`",
                );
                Err(())
            }
            syn::Expr::Try(_) => {
                self.error(
                    e,
                    "`?` is not supported in kernels: a kernel has no errors to return; test the condition with `if` and `return;`",
                );
                Err(())
            }
            syn::Expr::Unsafe(_) => {
                self.error(
                    e,
                    "`unsafe` blocks are not supported in kernels (and not needed: slices are bounds-checked on the host); remove `unsafe`",
                );
                Err(())
            }
            syn::Expr::Range(_) => {
                self.error(e, "ranges are only allowed as the iterator of a `for` loop");
                Err(())
            }
            syn::Expr::Assign(_) => {
                self.error(e, "an assignment is a statement, not a value");
                Err(())
            }
            syn::Expr::Loop(_) => {
                self.error(e, "a `loop` is a value only as the whole value of a `let` or an assignment: `let v = loop { ... break x; };`");
                Err(())
            }
            syn::Expr::While(_) | syn::Expr::ForLoop(_) => {
                self.error(
                    e,
                    "`while` and `for` loops have no value; use `loop { ... break x; }` for one",
                );
                Err(())
            }
            _ => {
                self.error(e, "this expression is not supported in kernels");
                Err(())
            }
        }
    }

    pub(super) fn lit(&mut self, lit: &syn::Lit, expect: Option<Ty>, negate: bool) -> Res<Expr> {
        match lit {
            syn::Lit::Bool(b) => Ok(Expr {
                kind: ExprKind::LitBool(b.value),
                ty: Ty::Bool,
            }),
            syn::Lit::Float(f) => {
                let suffix = f.suffix();
                if !suffix.is_empty() && suffix != "f32" {
                    self.error(f, "kernels compute in `f32`; write `1.0` or `1.0f32`");
                    return Err(());
                }
                if let Some(t) = expect {
                    if !t.is_float() && t != Ty::Bool && suffix.is_empty() {
                        self.error(f, format!("expected `{}`, found a float literal; no implicit conversions in kernels", t.rust()));
                        return Err(());
                    }
                }
                let v: f32 = f.base10_parse().map_err(|e| self.errors.push(e))?;
                let lit = Expr {
                    kind: ExprKind::LitF32(if negate { -v } else { v }),
                    ty: Ty::F32,
                };
                // In a 16-bit context an unsuffixed literal is the `f32` literal rounded.
                match expect {
                    Some(t) if t.is_half() && suffix.is_empty() => Ok(Expr {
                        kind: ExprKind::Cast(Box::new(lit), t),
                        ty: t,
                    }),
                    _ => Ok(lit),
                }
            }
            syn::Lit::Int(i) => {
                let ty = match i.suffix() {
                    "" => match expect {
                        Some(Ty::U32) => Ty::U32,
                        Some(t) if t.is_float() => {
                            self.error(i, format!("expected `{}`, found an integer literal; write `{}.0` (no implicit conversions in kernels)", t.rust(), i.base10_digits()));
                            return Err(());
                        }
                        _ => Ty::I32,
                    },
                    "i32" => Ty::I32,
                    "u32" => Ty::U32,
                    "f32" => Ty::F32,
                    other => {
                        self.error(i, format!("`{other}` literals are not supported; kernels use `i32`, `u32` and `f32`"));
                        return Err(());
                    }
                };
                let v: u64 = i.base10_parse().map_err(|e| self.errors.push(e))?;
                let kind = match ty {
                    Ty::U32 => {
                        if negate || v > u32::MAX as u64 {
                            self.error(i, "literal out of range for `u32`");
                            return Err(());
                        }
                        ExprKind::LitU32(v as u32)
                    }
                    Ty::I32 => {
                        // `v` is a u64: compare before negating, so no value can overflow.
                        let s = i64::try_from(v).unwrap_or(i64::MAX);
                        let s = if negate { -s } else { s };
                        if s < i32::MIN as i64 || s > i32::MAX as i64 {
                            self.error(i, "literal out of range for `i32`");
                            return Err(());
                        }
                        ExprKind::LitI32(s as i32)
                    }
                    _ => ExprKind::LitF32(if negate { -(v as f32) } else { v as f32 }),
                };
                Ok(Expr { kind, ty })
            }
            other => {
                self.error(
                    other,
                    "only numeric and boolean literals are supported in kernels",
                );
                Err(())
            }
        }
    }

    pub(super) fn path(&mut self, p: &syn::ExprPath) -> Res<Expr> {
        if p.path.segments.len() == 2 && p.qself.is_none() {
            let ty = p.path.segments[0].ident.to_string();
            let c = p.path.segments[1].ident.to_string();
            let kind = match (ty.as_str(), c.as_str()) {
                ("f32", "INFINITY") => ExprKind::LitF32(f32::INFINITY),
                ("f32", "NEG_INFINITY") => ExprKind::LitF32(f32::NEG_INFINITY),
                ("f32", "MAX") => ExprKind::LitF32(f32::MAX),
                ("f32", "MIN") => ExprKind::LitF32(f32::MIN),
                ("f32", "MIN_POSITIVE") => ExprKind::LitF32(f32::MIN_POSITIVE),
                ("f32", "EPSILON") => ExprKind::LitF32(f32::EPSILON),
                ("i32", "MAX") => ExprKind::LitI32(i32::MAX),
                ("i32", "MIN") => ExprKind::LitI32(i32::MIN),
                ("u32", "MAX") => ExprKind::LitU32(u32::MAX),
                ("u32", "MIN") => ExprKind::LitU32(0),
                _ => {
                    self.error(p, "unknown path; kernels know `f32::{INFINITY, NEG_INFINITY, MAX, MIN, MIN_POSITIVE, EPSILON}`, `i32::{MAX, MIN}`, `u32::{MAX, MIN}`");
                    return Err(());
                }
            };
            let ty = match kind {
                ExprKind::LitF32(_) => Ty::F32,
                ExprKind::LitI32(_) => Ty::I32,
                _ => Ty::U32,
            };
            return Ok(Expr { kind, ty });
        }
        let Some(id) = p.path.get_ident() else {
            self.error(p, format!("unknown path `{}` in a kernel; kernels know `f32::{{INFINITY, NEG_INFINITY, MAX, MIN, MIN_POSITIVE, EPSILON}}`, `i32::{{MAX, MIN}}`, `u32::{{MAX, MIN}}`; write other constants as literals or a kernel `const`", crate::tokens::shown(p)));
            return Err(());
        };
        let name = id.to_string();
        if let Some(l) = self.lookup(&name) {
            if l.poisoned {
                return Err(());
            }
            if l.array.is_some() {
                self.error(p, format!("`{name}` is an array; use it as `{name}[i]` or `{name}.len()` (arrays are not copied or passed as a whole: copy elements in a `for` loop)"));
                return Err(());
            }
            return Ok(Expr {
                kind: ExprKind::Local(l.mangled.clone()),
                ty: l.ty,
            });
        }
        if let Some((ty, k)) = self.consts.get(&name) {
            return Ok(Expr {
                kind: k.clone(),
                ty: *ty,
            });
        }
        if let Some(pi) = self.param_index(&name) {
            return match self.params[pi].kind {
                ParamKind::Scalar(ty) => Ok(Expr {
                    kind: ExprKind::Scalar(pi),
                    ty,
                }),
                ParamKind::Slice { .. } => {
                    self.error(
                        p,
                        format!("`{name}` is a slice; use it as `{name}[i]` or `{name}.len()`"),
                    );
                    Err(())
                }
            };
        }
        if self.shared_names.contains_key(&name) {
            self.error(
                p,
                format!("`{name}` is workgroup memory; use it as `{name}[i]`"),
            );
            return Err(());
        }
        let known: Vec<&str> = self
            .scopes
            .iter()
            .flat_map(|s| s.keys().map(String::as_str))
            .chain(self.params.iter().map(|p| p.name.as_str()))
            .collect();
        let hint = crate::suggest::hint(&name, known);
        self.error(
            p,
            format!("unknown variable `{name}`{hint}; declare it with `let` before its use"),
        );
        Err(())
    }

    pub(super) fn unary(&mut self, u: &syn::ExprUnary, expect: Option<Ty>) -> Res<Expr> {
        match u.op {
            syn::UnOp::Neg(_) => {
                if let syn::Expr::Lit(l) = &*u.expr {
                    return self.lit(&l.lit, expect, true);
                }
                let v = self.expr(&u.expr, expect)?;
                if !(v.ty.is_float() || v.ty == Ty::I32) {
                    self.error(u, format!("cannot negate `{}`", v.ty.rust()));
                    return Err(());
                }
                let ty = v.ty;
                Ok(Expr {
                    kind: ExprKind::Unary(UnOp::Neg, Box::new(v)),
                    ty,
                })
            }
            syn::UnOp::Not(_) => {
                let v = self.expr(&u.expr, expect)?;
                if !matches!(v.ty, Ty::Bool | Ty::I32 | Ty::U32) {
                    self.error(
                        u,
                        format!(
                            "`!` applies to `bool` (logical) or integers (bitwise), not `{}`",
                            v.ty.rust()
                        ),
                    );
                    return Err(());
                }
                let ty = v.ty;
                Ok(Expr {
                    kind: ExprKind::Unary(UnOp::Not, Box::new(v)),
                    ty,
                })
            }
            syn::UnOp::Deref(_) => {
                self.error(u, DEREF_MSG);
                Err(())
            }
            _ => {
                self.error(u, "this operator is not supported in kernels");
                Err(())
            }
        }
    }

    pub(super) fn binary(&mut self, b: &syn::ExprBinary, expect: Option<Ty>) -> Res<Expr> {
        let Some(op) = bin_op(&b.op) else {
            self.error(b, "this operator is not supported in kernels");
            return Err(());
        };
        let (l, r) = match op {
            BinOp::Shl | BinOp::Shr => {
                let l = self.expr(&b.left, expect.filter(|t| t.is_int()));
                let r = self.expr(&b.right, Some(Ty::U32));
                (l?, r?)
            }
            BinOp::And | BinOp::Or => (
                self.expr(&b.left, Some(Ty::Bool))?,
                self.expr(&b.right, Some(Ty::Bool))?,
            ),
            _ => {
                let operand_expect = if op.is_compare() { None } else { expect };
                // An untyped literal takes the other operand's type (`0.5 * h` of an `f16`).
                let untyped = |e: &syn::Expr| is_untyped_lit(e) || is_float_lit(e);
                if untyped(&b.left) && !untyped(&b.right) {
                    let r = self.expr(&b.right, operand_expect);
                    let l = self.expr(&b.left, r.as_ref().ok().map(|r| r.ty).or(operand_expect));
                    (l?, r?)
                } else {
                    let l = self.expr(&b.left, operand_expect);
                    let r = self.expr(&b.right, l.as_ref().ok().map(|l| l.ty).or(operand_expect));
                    (l?, r?)
                }
            }
        };
        let arith_or_compare = !matches!(op, BinOp::Shl | BinOp::Shr | BinOp::And | BinOp::Or);
        if arith_or_compare && l.ty != r.ty && l.ty.is_num() && r.ty.is_num() {
            let s = op.symbol();
            let hint = conversion_hint(&b.left, l.ty, &b.right, r.ty);
            self.error(b, format!("`{s}` needs two operands of the same type; found `{}` and `{}` (kernels have no implicit conversions): {hint}", l.ty.rust(), r.ty.rust()));
            return Err(());
        }
        let ty = self.check_binary(op, l.ty, r.ty, b)?;
        Ok(Expr {
            kind: ExprKind::Binary(op, Box::new(l), Box::new(r)),
            ty,
        })
    }

    /// Checks operand types; returns the result type.
    pub(super) fn check_binary(
        &mut self,
        op: BinOp,
        l: Ty,
        r: Ty,
        node: impl quote::ToTokens,
    ) -> Res<Ty> {
        let s = op.symbol();
        match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => {
                if !l.is_num() || l != r {
                    self.error(node, format!("`{s}` needs two operands of the same numeric type; found `{}` and `{}` (no implicit conversions: use `as`)", l.rust(), r.rust()));
                    return Err(());
                }
                Ok(l)
            }
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor => {
                if !(l.is_int() || l == Ty::Bool) || l != r {
                    self.error(node, format!("`{s}` needs two integers (or two bools) of the same type; found `{}` and `{}`", l.rust(), r.rust()));
                    return Err(());
                }
                Ok(l)
            }
            BinOp::Shl | BinOp::Shr => {
                if !l.is_int() || r != Ty::U32 {
                    self.error(
                        node,
                        format!(
                            "`{s}` shifts an integer by a `u32` amount; found `{}` {s} `{}`",
                            l.rust(),
                            r.rust()
                        ),
                    );
                    return Err(());
                }
                Ok(l)
            }
            BinOp::And | BinOp::Or => {
                if l != Ty::Bool || r != Ty::Bool {
                    self.error(
                        node,
                        format!(
                            "`{s}` needs two `bool` operands; found `{}` and `{}`",
                            l.rust(),
                            r.rust()
                        ),
                    );
                    return Err(());
                }
                Ok(Ty::Bool)
            }
            _ => {
                if l != r
                    || l == Ty::UVec3
                    || (l == Ty::Bool && !matches!(op, BinOp::Eq | BinOp::Ne))
                {
                    self.error(
                        node,
                        format!(
                            "cannot compare `{}` with `{}` (no implicit conversions: use `as`)",
                            l.rust(),
                            r.rust()
                        ),
                    );
                    return Err(());
                }
                Ok(Ty::Bool)
            }
        }
    }
}

/// "write `k as f32`": converts the operand written as a plain name (else the right one).
pub(super) fn conversion_hint(left: &syn::Expr, lt: Ty, right: &syn::Expr, rt: Ty) -> String {
    let simple = |e: &syn::Expr| match e {
        syn::Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
        syn::Expr::Lit(l) => Some(crate::tokens::shown(l)),
        _ => None,
    };
    if let Some(r) = simple(right) {
        format!("write `{r} as {}`", lt.rust())
    } else if let Some(l) = simple(left) {
        format!("write `{l} as {}`", rt.rust())
    } else {
        format!("convert one side with `as`, e.g. `(...) as {}`", lt.rust())
    }
}

pub(super) fn mismatch(want: Ty, got: Ty) -> String {
    format!(
        "expected `{}`, found `{}` (no implicit conversions in kernels: use `as`)",
        want.rust(),
        got.rust()
    )
}

pub(super) fn is_untyped_lit(e: &syn::Expr) -> bool {
    match e {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(i),
            ..
        }) => i.suffix().is_empty(),
        syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => is_untyped_lit(&u.expr),
        syn::Expr::Paren(p) => is_untyped_lit(&p.expr),
        _ => false,
    }
}

/// An unsuffixed float literal (`0.5`, `-1.0`): `f32` unless the context is `f16`/`bf16`.
pub(super) fn is_float_lit(e: &syn::Expr) -> bool {
    match e {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Float(f),
            ..
        }) => f.suffix().is_empty(),
        syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => is_float_lit(&u.expr),
        syn::Expr::Paren(p) => is_float_lit(&p.expr),
        _ => false,
    }
}

pub(super) fn bin_op(op: &syn::BinOp) -> Option<BinOp> {
    Some(match op {
        syn::BinOp::Add(_) => BinOp::Add,
        syn::BinOp::Sub(_) => BinOp::Sub,
        syn::BinOp::Mul(_) => BinOp::Mul,
        syn::BinOp::Div(_) => BinOp::Div,
        syn::BinOp::Rem(_) => BinOp::Rem,
        syn::BinOp::And(_) => BinOp::And,
        syn::BinOp::Or(_) => BinOp::Or,
        syn::BinOp::BitAnd(_) => BinOp::BitAnd,
        syn::BinOp::BitOr(_) => BinOp::BitOr,
        syn::BinOp::BitXor(_) => BinOp::BitXor,
        syn::BinOp::Shl(_) => BinOp::Shl,
        syn::BinOp::Shr(_) => BinOp::Shr,
        syn::BinOp::Eq(_) => BinOp::Eq,
        syn::BinOp::Ne(_) => BinOp::Ne,
        syn::BinOp::Lt(_) => BinOp::Lt,
        syn::BinOp::Le(_) => BinOp::Le,
        syn::BinOp::Gt(_) => BinOp::Gt,
        syn::BinOp::Ge(_) => BinOp::Ge,
        _ => return None,
    })
}

pub(super) fn compound_op(op: &syn::BinOp) -> Option<BinOp> {
    Some(match op {
        syn::BinOp::AddAssign(_) => BinOp::Add,
        syn::BinOp::SubAssign(_) => BinOp::Sub,
        syn::BinOp::MulAssign(_) => BinOp::Mul,
        syn::BinOp::DivAssign(_) => BinOp::Div,
        syn::BinOp::RemAssign(_) => BinOp::Rem,
        syn::BinOp::BitAndAssign(_) => BinOp::BitAnd,
        syn::BinOp::BitOrAssign(_) => BinOp::BitOr,
        syn::BinOp::BitXorAssign(_) => BinOp::BitXor,
        syn::BinOp::ShlAssign(_) => BinOp::Shl,
        syn::BinOp::ShrAssign(_) => BinOp::Shr,
        _ => return None,
    })
}
