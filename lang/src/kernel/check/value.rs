//! Values computed by statements: `let v = { ...; x };`, `let v = loop { ... break x; };`,
//! and `if` with statements in its branches, as the whole value of a `let` or an assignment.
//!
//! Each is lowered into statements that assign the value to its place (a fresh local for a
//! `let`), so every target runs them as the statements they are.

use super::*;

/// A `loop` used as a value, while its body is lowered.
pub(super) struct ValueLoop {
    /// `loop_depth` inside the loop: a `break v` at this depth leaves it.
    depth: usize,
    /// Where `break v` writes.
    place: Place,
    /// The value's type, from the context or the first `break v`.
    ty: Option<Ty>,
    /// A `break` in it was already reported (so a missing value is not reported again).
    reported: bool,
}

/// Whether `e` is a value computed by statements (lowered by `value_into`, not `expr`).
pub(super) fn is_stmt_value(e: &syn::Expr) -> bool {
    match e {
        syn::Expr::If(ei) => !if_is_pure(ei),
        syn::Expr::Block(b) => {
            b.label.is_some()
                || !(b.block.stmts.len() == 1
                    && matches!(b.block.stmts[0], syn::Stmt::Expr(_, None)))
        }
        syn::Expr::Loop(_) => true,
        syn::Expr::Paren(p) => is_stmt_value(&p.expr),
        _ => false,
    }
}

impl Checker<'_> {
    /// `let name = <statement value>;`: declares the local and lowers the value into it.
    pub(super) fn value_let(
        &mut self,
        e: &syn::Expr,
        name: &str,
        mutable: bool,
        ann: Option<Ty>,
        out: &mut Vec<Stmt>,
    ) {
        let Ok(found) = self.value_type(e, ann) else {
            self.poison(name);
            return;
        };
        // With a type written, lowering into it reports the values that do not have it.
        let ty = ann.unwrap_or(found);
        let mangled = self.mangle(name);
        out.push(Stmt::Let {
            name: mangled.clone(),
            ty,
            mutable: true,
            init: None,
        });
        self.value_into(e, &Place::Local(mangled.clone()), ty, out);
        self.declare(name, mangled, ty, mutable);
    }

    /// The type of a value expression, found by lowering it silently where it has statements.
    /// When it cannot be found, the errors of that lowering are kept (it is not lowered again).
    pub(super) fn value_type(&mut self, e: &syn::Expr, expect: Option<Ty>) -> Res<Ty> {
        match e {
            syn::Expr::Paren(p) => self.value_type(&p.expr, expect),
            syn::Expr::If(ei) if !if_is_pure(ei) => self.if_type(ei, expect),
            syn::Expr::Block(b) if is_stmt_value(e) => self.tail_type(&b.block, expect),
            syn::Expr::Loop(l) => {
                if let Some(t) = expect {
                    return Ok(t);
                }
                let (saved, bytes) = (self.errors.len(), self.array_bytes);
                let mut sink = Vec::new();
                let ty = self.value_loop(l, &Place::Local(String::new()), None, &mut sink);
                self.array_bytes = bytes;
                if ty.is_ok() {
                    self.errors.truncate(saved);
                }
                ty
            }
            _ => {
                let saved = self.errors.len();
                let ty = self.expr(e, expect).map(|v| v.ty);
                if ty.is_ok() {
                    self.errors.truncate(saved);
                }
                ty
            }
        }
    }

    /// Lowers `place = e` for any value expression `e` of type `ty`.
    pub(super) fn value_into(&mut self, e: &syn::Expr, place: &Place, ty: Ty, out: &mut Vec<Stmt>) {
        match e {
            syn::Expr::Paren(p) => self.value_into(&p.expr, place, ty, out),
            syn::Expr::If(ei) if !if_is_pure(ei) => self.if_assign(ei, place, ty, out),
            syn::Expr::Block(b) if is_stmt_value(e) => {
                if b.label.is_some() {
                    self.error(
                        b,
                        "block labels are not supported in kernels; remove the label",
                    );
                }
                let stmts = self.value_block(&b.block, place, ty);
                out.extend(stmts);
            }
            syn::Expr::Loop(l) => {
                let _ = self.value_loop(l, place, Some(ty), out);
            }
            _ => {
                if let Ok(v) = self.expr(e, Some(ty)) {
                    if v.ty != ty {
                        self.error(e, mismatch(ty, v.ty));
                    } else {
                        out.push(Stmt::Assign {
                            place: place.clone(),
                            op: None,
                            value: v,
                            ty,
                        });
                    }
                }
            }
        }
    }

    /// `loop { ... break v; ... }` writing `v` to `place`; returns the value's type.
    fn value_loop(
        &mut self,
        l: &syn::ExprLoop,
        place: &Place,
        expect: Option<Ty>,
        out: &mut Vec<Stmt>,
    ) -> Res<Ty> {
        if let Some(l) = &l.label {
            self.error(l, LABEL_MSG);
        }
        self.value_loops.push(ValueLoop {
            depth: self.loop_depth + 1,
            place: place.clone(),
            ty: expect,
            reported: false,
        });
        self.loop_depth += 1;
        let body = self.block(&l.body, false);
        self.loop_depth -= 1;
        let Some(ValueLoop { ty, reported, .. }) = self.value_loops.pop() else {
            return Err(());
        };
        let Some(ty) = ty else {
            if !reported {
                self.error(
                    l,
                    "this `loop` is used as a value, but no `break` gives it one: `break v;`",
                );
            }
            return Err(());
        };
        out.push(Stmt::Loop { body });
        Ok(ty)
    }

    /// Whether the innermost loop is a `loop` used as a value.
    pub(super) fn in_value_loop(&self) -> bool {
        self.value_loops
            .last()
            .is_some_and(|v| v.depth == self.loop_depth)
    }

    /// `break;` in a `loop` used as a value: an error.
    pub(super) fn break_without_value(&mut self, b: &syn::ExprBreak) {
        if let Some(l) = self.value_loops.last_mut() {
            l.reported = true;
        }
        self.error(
            b,
            "this `loop` is used as a value: `break` with one, `break v;`",
        );
    }

    /// `break v;`: assigns `v` to the value loop's place, then breaks.
    pub(super) fn break_value(&mut self, b: &syn::ExprBreak, v: &syn::Expr, out: &mut Vec<Stmt>) {
        if !self.in_value_loop() {
            self.error(b, "`break` with a value leaves only a `loop` used as a value (`let v = loop { ... break x; };`); here assign the value to a `let mut` local, then `break;`");
            return;
        }
        let expect = self.value_loops.last().and_then(|l| l.ty);
        let Ok(value) = self.expr(v, expect) else {
            if let Some(l) = self.value_loops.last_mut() {
                l.reported = true;
            }
            return;
        };
        let Some(l) = self.value_loops.last_mut() else {
            return;
        };
        match l.ty {
            Some(t) if t != value.ty => {
                let msg = format!(
                    "this `loop`'s value is `{}` (from its context or its first `break`), found `{}`",
                    t.rust(),
                    value.ty.rust()
                );
                l.reported = true;
                self.error(v, msg);
                return;
            }
            _ => l.ty = Some(value.ty),
        }
        let ty = value.ty;
        out.push(Stmt::Assign {
            place: l.place.clone(),
            op: None,
            value,
            ty,
        });
        out.push(Stmt::Break);
    }
}
