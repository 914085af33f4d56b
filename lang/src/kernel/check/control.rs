//! Control flow: `if` as statement and as value, value blocks, `for` loops.

use std::collections::HashMap;

use super::*;

impl Checker<'_> {
    pub(super) fn if_stmt(&mut self, ei: &syn::ExprIf) -> Res<Stmt> {
        let cond = self.expr(&ei.cond, Some(Ty::Bool));
        if let Ok(c) = &cond {
            if c.ty != Ty::Bool {
                self.error(&ei.cond, mismatch(Ty::Bool, c.ty));
            }
        }
        let then = self.block(&ei.then_branch, false);
        let els = match &ei.else_branch {
            None => Vec::new(),
            Some((_, e)) => match &**e {
                syn::Expr::If(inner) => self.if_stmt(inner).map(|s| vec![s]).unwrap_or_default(),
                syn::Expr::Block(b) => self.block(&b.block, false),
                other => {
                    self.error(other, "expected a block after `else`");
                    Vec::new()
                }
            },
        };
        Ok(Stmt::If {
            cond: cond?,
            then,
            els,
        })
    }

    /// The type of an `if` used as a value (both branches must agree).
    pub(super) fn if_type(&mut self, ei: &syn::ExprIf, expect: Option<Ty>) -> Res<Ty> {
        let Some((_, els)) = &ei.else_branch else {
            self.error(ei, "an `if` used as a value needs an `else` branch with a value of the same type: `if c { a } else { b }`");
            return Err(());
        };
        let then_ty = self.tail_type(&ei.then_branch, expect)?;
        let els_ty = match &**els {
            syn::Expr::If(inner) => self.if_type(inner, Some(then_ty))?,
            syn::Expr::Block(b) => self.tail_type(&b.block, Some(then_ty))?,
            other => {
                self.error(other, "expected a block after `else`");
                return Err(());
            }
        };
        if then_ty != els_ty {
            self.error(
                ei,
                format!(
                    "`if` branches have different types: `{}` and `{}`",
                    then_ty.rust(),
                    els_ty.rust()
                ),
            );
            return Err(());
        }
        Ok(then_ty)
    }

    /// Type of a block's tail expression, found by lowering the block in a scratch scope.
    pub(super) fn tail_type(&mut self, block: &syn::Block, expect: Option<Ty>) -> Res<Ty> {
        let Some(syn::Stmt::Expr(tail, None)) = block.stmts.last() else {
            self.error(
                block,
                "this block is used as a value: end it with an expression (no `;`)",
            );
            return Err(());
        };
        // Lower the block once silently to learn the tail type in its scope; the real
        // lowering (and its errors) happens in `value_block`.
        let saved = self.errors.len();
        self.scopes.push(HashMap::new());
        let mut sink = Vec::new();
        for s in &block.stmts[..block.stmts.len() - 1] {
            self.stmt(s, false, &mut sink);
        }
        let bytes = self.array_bytes;
        let ty = self.value_type(tail, expect);
        self.scopes.pop();
        self.array_bytes = bytes;
        // Without a type from the context, a tail whose type cannot be found keeps its errors:
        // the block is not lowered again.
        if ty.is_ok() || expect.is_some() {
            self.errors.truncate(saved);
        }
        ty.or_else(|_| expect.ok_or(()))
    }

    /// Lowers `place = if c { ...; a } else { ...; b }` into statements.
    pub(super) fn if_assign(
        &mut self,
        ei: &syn::ExprIf,
        place: &Place,
        ty: Ty,
        out: &mut Vec<Stmt>,
    ) {
        let cond = self.expr(&ei.cond, Some(Ty::Bool));
        let then = self.value_block(&ei.then_branch, place, ty);
        let els = match ei.else_branch.as_ref().map(|(_, e)| &**e) {
            Some(syn::Expr::If(inner)) => {
                let mut v = Vec::new();
                self.if_assign(inner, place, ty, &mut v);
                v
            }
            Some(syn::Expr::Block(b)) => self.value_block(&b.block, place, ty),
            _ => Vec::new(),
        };
        if let Ok(cond) = cond {
            out.push(Stmt::If { cond, then, els });
        }
    }

    pub(super) fn value_block(&mut self, block: &syn::Block, place: &Place, ty: Ty) -> Vec<Stmt> {
        self.scopes.push(HashMap::new());
        let mut out = Vec::new();
        let n = block.stmts.len();
        for s in &block.stmts[..n.saturating_sub(1)] {
            self.stmt(s, false, &mut out);
        }
        if let Some(syn::Stmt::Expr(tail, None)) = block.stmts.last() {
            self.value_into(tail, place, ty, &mut out);
        }
        self.scopes.pop();
        out
    }

    /// A `for` loop: unrolled into copies of its body when its range is known at compile time
    /// and its variable indexes a per-invocation array (see `unroll`), else one `Stmt::For`.
    pub(super) fn for_loop(&mut self, f: &syn::ExprForLoop) -> Res<Vec<Stmt>> {
        if let Some(l) = &f.label {
            self.error(l, LABEL_MSG);
        }
        let name = match &*f.pat {
            syn::Pat::Ident(p) if p.mutability.is_none() && p.by_ref.is_none() => {
                p.ident.to_string()
            }
            other => {
                self.error(
                    other,
                    "a `for` loop binds one immutable name: `for i in 0..n`",
                );
                return Err(());
            }
        };
        let usage = "kernels loop over ranges: `for i in a..b` or `for i in (a..b).step_by(s)`";
        let (range, step) = match &*f.expr {
            syn::Expr::Range(r) => (r, None),
            syn::Expr::MethodCall(m) if m.method == "step_by" && m.args.len() == 1 => {
                let inner = match &*m.receiver {
                    syn::Expr::Paren(p) => &*p.expr,
                    other => other,
                };
                match inner {
                    syn::Expr::Range(r) => (r, Some(&m.args[0])),
                    _ => {
                        self.error(&f.expr, usage);
                        return Err(());
                    }
                }
            }
            other => {
                self.error(other, usage);
                return Err(());
            }
        };
        if !matches!(range.limits, syn::RangeLimits::HalfOpen(_)) {
            self.error(
                range,
                "only half-open ranges `a..b` are supported in kernels; write `a..(b + 1)`",
            );
        }
        let (Some(start), Some(end)) = (&range.start, &range.end) else {
            self.error(range, "a kernel range needs both ends: `a..b`");
            return Err(());
        };
        // Type the range from whichever end is not an untyped literal.
        let (start, end) = if is_untyped_lit(start) {
            let e = self.expr(end, None);
            let s = self.expr(start, e.as_ref().ok().map(|e| e.ty));
            (s, e)
        } else {
            let s = self.expr(start, None);
            let e = self.expr(end, s.as_ref().ok().map(|e| e.ty));
            (s, e)
        };
        let (start, end) = (start?, end?);
        if start.ty != end.ty || !start.ty.is_int() {
            self.error(range, format!("a range runs over `u32` or `i32` with both ends the same type; found `{}` and `{}`", start.ty.rust(), end.ty.rust()));
            return Err(());
        }
        let ty = start.ty;
        let step = match step {
            Some(s) => {
                let mut v = self.expr(s, Some(ty))?;
                if v.ty != ty {
                    self.error(s, mismatch(ty, v.ty));
                    return Err(());
                }
                // A step known here is checked now and folded, so the emitters see a literal.
                match const_value(&v, &self.known) {
                    Some(ExprKind::LitU32(0) | ExprKind::LitI32(0)) => self.error(
                        s,
                        "`step_by(0)` never advances (Rust's `step_by` panics on 0); the step must be at least 1: `(a..b).step_by(2)`",
                    ),
                    Some(ExprKind::LitI32(k)) if k < 0 => self.error(
                        s,
                        format!("`step_by({k})`: the step must be at least 1 (Rust's `step_by` takes a `usize`); to count down, count up and mirror the index: `for k in 0..n {{ let i = n - 1 - k; … }}`"),
                    ),
                    Some(k @ (ExprKind::LitU32(_) | ExprKind::LitI32(_))) => v.kind = k,
                    _ => {}
                }
                Some(v)
            }
            None => None,
        };
        let constant = self.unroll_values(&start, &end, step.as_ref(), &f.body);
        if let Some(values) = &constant {
            if self.unrolling_pays(&name, &f.body) {
                return Ok(self.unrolled(&name, ty, values, &f.body));
            }
        }
        let mangled = self.mangle(&name);
        self.scopes.push(HashMap::new());
        self.declare(&name, mangled.clone(), ty, false);
        self.loop_depth += 1;
        // A constant loop may still be emitted as copies (WGSL): nested loops are bounded
        // as if this one were unrolled here.
        let factor = self.unroll_factor;
        if let Some(values) = &constant {
            self.unroll_factor = factor * values.len().max(1) as u32;
        }
        let body = self.block(&f.body, false);
        self.unroll_factor = factor;
        self.loop_depth -= 1;
        self.scopes.pop();
        Ok(vec![Stmt::For {
            var: mangled,
            source: name.trim_start_matches("r#").to_string(),
            ty,
            start,
            end,
            step,
            body,
            constant,
        }])
    }
}

/// An `if` expression whose branches are single expressions (so it can stay an expression).
pub(super) fn if_is_pure(ei: &syn::ExprIf) -> bool {
    let single = |b: &syn::Block| {
        b.stmts.len() == 1
            && matches!(&b.stmts[0], syn::Stmt::Expr(e, None) if !matches!(e, syn::Expr::If(i) if !if_is_pure(i)))
    };
    single(&ei.then_branch)
        && match ei.else_branch.as_ref().map(|(_, e)| &**e) {
            Some(syn::Expr::Block(b)) => single(&b.block),
            Some(syn::Expr::If(i)) => if_is_pure(i),
            _ => false,
        }
}
