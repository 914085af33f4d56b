//! Statements: blocks, `let`, assignments and expression statements.

use std::collections::HashMap;

use syn::spanned::Spanned;

use super::*;

impl Checker<'_> {
    pub fn block(&mut self, block: &syn::Block, top: bool) -> Vec<Stmt> {
        self.scopes.push(HashMap::new());
        let mut out = Vec::new();
        for stmt in &block.stmts {
            self.stmt(stmt, top, &mut out);
        }
        self.scopes.pop();
        out
    }

    pub(super) fn stmt(&mut self, stmt: &syn::Stmt, top: bool, out: &mut Vec<Stmt>) {
        match stmt {
            syn::Stmt::Local(local) => self.local(local, top, out),
            syn::Stmt::Item(syn::Item::Const(c)) => self.const_item(c),
            syn::Stmt::Item(item) => {
                let msg = match item {
                    syn::Item::Fn(_) => "helper functions are not supported in kernels: write the code inline, or split the work into kernels launched one after another",
                    syn::Item::Struct(_) | syn::Item::Enum(_) | syn::Item::Union(_) => "structs and enums are not supported in kernels; use one local per field, and integer constants for variants",
                    syn::Item::Static(_) => "statics are not supported in kernels; write `const NAME: u32 = ...;` for a constant, or pass the value as a parameter",
                    _ => "items cannot be declared inside a kernel; only `const NAME: u32 = ...;` is allowed",
                };
                self.error(item, msg);
            }
            syn::Stmt::Macro(m) => self.error(&m.mac, macro_message(&m.mac)),
            syn::Stmt::Expr(e, semi) => {
                if semi.is_none()
                    && !matches!(
                        e,
                        syn::Expr::If(_)
                            | syn::Expr::ForLoop(_)
                            | syn::Expr::While(_)
                            | syn::Expr::Loop(_)
                            | syn::Expr::Block(_)
                    )
                {
                    // A tail expression: kernels return nothing.
                    if !matches!(
                        e,
                        syn::Expr::Return(_) | syn::Expr::Break(_) | syn::Expr::Continue(_)
                    ) {
                        self.error(e, "a kernel returns nothing; end this expression with `;` or write the value into a `&mut [T]` parameter");
                        return;
                    }
                }
                self.expr_stmt(e, out);
            }
        }
    }

    pub(super) fn local(&mut self, local: &syn::Local, top: bool, out: &mut Vec<Stmt>) {
        let (ident, mutable, ty_ann) = match &local.pat {
            syn::Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                (&p.ident, p.mutability.is_some(), None)
            }
            syn::Pat::Type(pt) => match &*pt.pat {
                syn::Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                    (&p.ident, p.mutability.is_some(), Some(&*pt.ty))
                }
                other => {
                    self.error(other, "a `let` binds one name, like `let x: f32 = ...;` (no patterns or tuples): write one `let` per value");
                    self.poison_pat(other);
                    return;
                }
            },
            syn::Pat::Wild(_) => {
                self.error(
                    &local.pat,
                    "`let _ = ...;` has no effect in a kernel; remove it (kernels change memory only through assignments and atomics)",
                );
                return;
            }
            other => {
                self.error(
                    other,
                    "a `let` binds one name, like `let x: f32 = ...;` (no patterns or tuples): write one `let` per value",
                );
                self.poison_pat(other);
                return;
            }
        };
        let name = ident.to_string();
        if let Some(init) = &local.init {
            if init.diverge.is_some() {
                self.error(
                    &local.pat,
                    "`let ... else` is not supported in kernels; write `let` and an `if`",
                );
                self.poison(&name);
                return;
            }
            // Workgroup memory.
            if let Some((elem, size)) = self.shared_decl(&init.expr) {
                if self.device.is_some() {
                    self.error(local, "a `#[device]` function cannot declare workgroup memory (WGSL declares it at module scope, for a kernel): declare it in the kernel and pass it to the helper as a `&mut [T; N]` parameter");
                    self.poison(&name);
                    return;
                }
                if !top {
                    self.error(local, "workgroup memory is declared at the top level of the kernel body, not inside a block");
                }
                let mangled = self.mangle(&name);
                // The array replaces any local of that name in this scope.
                if let Some(scope) = self.scopes.last_mut() {
                    scope.remove(&name);
                }
                let atomic = self.atomic_names.contains(&name);
                self.shared_names.insert(name, self.shared.len());
                self.shared.push(Shared {
                    name: mangled,
                    elem,
                    size,
                    atomic,
                });
                return;
            }
            // Atomics produce a value only as a `let` initializer or a statement.
            if let Some(stmt) = self.try_atomic(&init.expr, Some(&name)) {
                match stmt {
                    Ok((mut stmt, ty)) => {
                        let mangled = self.mangle(&name);
                        out.push(Stmt::Let {
                            name: mangled.clone(),
                            ty,
                            mutable: true,
                            init: None,
                        });
                        if let Stmt::Atomic { result, .. } = &mut stmt {
                            *result = Some(mangled.clone());
                        }
                        out.push(stmt);
                        self.declare(&name, mangled, ty, mutable);
                    }
                    Err(()) => self.poison(&name),
                }
                return;
            }
        }
        if self.array_local(local, &name, mutable, ty_ann, out) {
            return;
        }
        let ann = match ty_ann {
            Some(t) => match scalar_type(t) {
                Some(ty) => Some(ty),
                None => {
                    self.error(
                        t,
                        format!(
                            "a kernel local is `f32`, `f16`, `bf16`, `i32`, `u32` or `bool`, not `{}`",
                            crate::tokens::shown(t)
                        ),
                    );
                    self.poison(&name);
                    return;
                }
            },
            None => None,
        };
        let Some(init) = &local.init else {
            let Some(ty) = ann else {
                self.error(
                    &local.pat,
                    format!("a `let` without a value needs a type: `let mut {name}: f32;`"),
                );
                self.poison(&name);
                return;
            };
            if !mutable {
                self.error(
                    &local.pat,
                    "a `let` without a value must be `let mut`, since it is assigned later",
                );
            }
            let mangled = self.mangle(&name);
            out.push(Stmt::Let {
                name: mangled.clone(),
                ty,
                mutable: true,
                init: None,
            });
            self.declare(&name, mangled, ty, true);
            return;
        };
        // `let x = if c { ...; a } else { ...; b };`, `let x = { ...; a };`,
        // `let x = loop { ... break a; };`: statements that compute the value.
        if is_stmt_value(&init.expr) {
            self.value_let(&init.expr, &name, mutable, ann, out);
            return;
        }
        self.effect_ok = true;
        let Ok(value) = self.expr(&init.expr, ann) else {
            // Declare anyway so later uses do not report "unknown variable".
            match ann {
                Some(ty) => {
                    let mangled = self.mangle(&name);
                    self.declare(&name, mangled, ty, mutable);
                }
                None => self.poison(&name),
            }
            return;
        };
        if let Some(ty) = ann {
            if value.ty != ty {
                self.error(&init.expr, mismatch(ty, value.ty));
                let mangled = self.mangle(&name);
                self.declare(&name, mangled, ty, mutable);
                return;
            }
        }
        if value.ty == Ty::UVec3 && mutable {
            self.error(&local.pat, "a `UVec3` from an id builtin cannot be `mut`; copy its components into `u32` locals");
        }
        let mangled = self.mangle(&name);
        let ty = value.ty;
        if !mutable {
            if let Some(k) = const_value(&value, &self.known) {
                self.known.locals.insert(mangled.clone(), k);
            }
        }
        out.push(Stmt::Let {
            name: mangled.clone(),
            ty,
            mutable,
            init: Some(value),
        });
        self.declare(&name, mangled, ty, mutable);
    }

    pub(super) fn declare(&mut self, name: &str, mangled: String, ty: Ty, mutable: bool) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(
                name.to_string(),
                Local {
                    mangled,
                    ty,
                    mutable,
                    poisoned: false,
                    array: None,
                },
            );
        }
    }

    pub(super) fn expr_stmt(&mut self, e: &syn::Expr, out: &mut Vec<Stmt>) {
        match e {
            syn::Expr::Assign(a) => {
                if is_stmt_value(&a.right) {
                    let Ok((place, ty)) = self.place(&a.left) else {
                        return;
                    };
                    let Ok(_) = self.value_type(&a.right, Some(ty)) else {
                        return;
                    };
                    self.value_into(&a.right, &place, ty, out);
                    return;
                }
                if let Some(stmt) = self.try_atomic(&a.right, None) {
                    if stmt.is_ok() {
                        self.error(&a.right, "an atomic's result can only initialise a `let`: `let old = atomic_add(...);`");
                    }
                    return;
                }
                let Ok((place, ty)) = self.place(&a.left) else {
                    return;
                };
                self.effect_ok = matches!(place, Place::Local(_));
                let Ok(value) = self.expr(&a.right, Some(ty)) else {
                    return;
                };
                if value.ty != ty {
                    self.error(&a.right, mismatch(ty, value.ty));
                    return;
                }
                out.push(Stmt::Assign {
                    place,
                    op: None,
                    value,
                    ty,
                });
            }
            syn::Expr::Binary(b) if compound_op(&b.op).is_some() => {
                let Some(op) = compound_op(&b.op) else {
                    return;
                };
                let Ok((place, ty)) = self.place(&b.left) else {
                    return;
                };
                let expect = if matches!(op, BinOp::Shl | BinOp::Shr) {
                    Ty::U32
                } else {
                    ty
                };
                self.effect_ok = matches!(place, Place::Local(_));
                let Ok(value) = self.expr(&b.right, Some(expect)) else {
                    return;
                };
                if self.check_binary(op, ty, value.ty, b).is_err() {
                    return;
                }
                out.push(Stmt::Assign {
                    place,
                    op: Some(op),
                    value,
                    ty,
                });
            }
            syn::Expr::If(ei) => {
                let s = self.if_stmt(ei);
                if let Ok(s) = s {
                    out.push(s);
                }
            }
            syn::Expr::ForLoop(f) => {
                if let Ok(s) = self.for_loop(f) {
                    out.extend(s);
                }
            }
            syn::Expr::While(w) => {
                if let Some(l) = &w.label {
                    self.error(l, LABEL_MSG);
                }
                let cond = self.expr(&w.cond, Some(Ty::Bool));
                if let Ok(c) = &cond {
                    if c.ty != Ty::Bool {
                        self.error(&w.cond, mismatch(Ty::Bool, c.ty));
                    }
                }
                self.loop_depth += 1;
                let body = self.block(&w.body, false);
                self.loop_depth -= 1;
                if let Ok(cond) = cond {
                    out.push(Stmt::While { cond, body });
                }
            }
            syn::Expr::Loop(l) => {
                if let Some(l) = &l.label {
                    self.error(l, LABEL_MSG);
                }
                self.loop_depth += 1;
                let body = self.block(&l.body, false);
                self.loop_depth -= 1;
                out.push(Stmt::Loop { body });
            }
            syn::Expr::Break(b) => {
                if b.label.is_some() {
                    self.error(b, "labelled `break` is not supported in kernels; set a `bool` flag, `break` the inner loop, and test the flag in the outer one");
                } else if let Some(v) = &b.expr {
                    self.break_value(b, v, out);
                } else if self.loop_depth == 0 {
                    self.error(b, "`break` outside of a loop");
                } else if self.in_value_loop() {
                    self.break_without_value(b);
                } else {
                    out.push(Stmt::Break);
                }
            }
            syn::Expr::Continue(c) => {
                if c.label.is_some() {
                    self.error(c, "labelled `continue` is not supported in kernels; set a `bool` flag, `break` the inner loop, and test the flag in the outer one");
                } else if self.loop_depth == 0 {
                    self.error(c, "`continue` outside of a loop");
                } else {
                    out.push(Stmt::Continue);
                }
            }
            syn::Expr::Return(r) if self.device.is_some() => self.device_return(r, out),
            syn::Expr::Return(r) => {
                if let Some(v) = &r.expr {
                    self.error(v, "a kernel returns nothing; write results into a `&mut [T]` parameter and `return;`");
                } else {
                    out.push(Stmt::Return);
                }
            }
            syn::Expr::Block(b) => {
                if b.label.is_some() {
                    self.error(
                        b,
                        "block labels are not supported in kernels; remove the label",
                    );
                }
                let stmts = self.block(&b.block, false);
                out.extend(stmts);
            }
            syn::Expr::Call(c) if is_path_call(c, "barrier") => {
                if !c.args.is_empty() {
                    self.error(c, "`barrier()` takes no arguments");
                }
                self.has_barrier = true;
                out.push(Stmt::Barrier { span: c.span() });
            }
            syn::Expr::Call(c) if is_path_call(c, "device_fence") => {
                if !c.args.is_empty() {
                    self.error(c, "`device_fence()` takes no arguments");
                }
                if self.device.is_some() {
                    // A helper's call sites would need the barrier analysis of `barrier()`.
                    self.error(c, "`device_fence()` is a statement of a kernel's body, not of a `#[device]` function (WGSL has it only as `storageBarrier()`, which the whole workgroup reaches): call it in the kernel");
                }
                // A barrier in WGSL: the uniformity analysis runs on it as on `barrier()`.
                self.has_barrier = true;
                out.push(Stmt::DeviceFence { span: c.span() });
            }
            syn::Expr::Call(c) if is_path_call(c, crate::kernel::mma::NAME) => self.mma(c, out),
            syn::Expr::Call(c) if is_path_call(c, crate::kernel::ldmatrix::NAME) => {
                self.ldmatrix(c, false, out)
            }
            syn::Expr::Call(c) if is_path_call(c, crate::kernel::ldmatrix::NAME_TRANS) => {
                self.ldmatrix(c, true, out)
            }
            syn::Expr::Call(c) if is_path_call(c, crate::kernel::copy_async::NAME) => {
                self.copy_async(c, out)
            }
            syn::Expr::Call(c) if is_path_call(c, crate::kernel::copy_async::COMMIT) => {
                self.copy_fence(c, false, out)
            }
            syn::Expr::Call(c) if is_path_call(c, crate::kernel::copy_async::WAIT) => {
                self.copy_fence(c, true, out)
            }
            syn::Expr::Paren(p) => self.expr_stmt(&p.expr, out),
            syn::Expr::Call(c) if self.helper_index(&c.func).is_some() => {
                if let Some(i) = self.helper_index(&c.func) {
                    if let Ok(v) = self.helper_call_in(i, c, true, true) {
                        out.push(Stmt::Call(v));
                    }
                }
            }
            _ => {
                if let Some(stmt) = self.try_atomic(e, None) {
                    if let Ok((stmt, _)) = stmt {
                        out.push(stmt);
                    }
                    return;
                }
                // A pure expression statement has no effect; check it and drop it.
                if self.expr(e, None).is_ok() {
                    self.error(e, "this expression has no effect; kernels change memory only through assignments and atomics");
                }
            }
        }
    }
}

/// What to write instead of a macro in a kernel.
pub(super) fn macro_message(mac: &syn::Macro) -> String {
    let name = mac
        .path
        .segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default();
    let instead = match name.as_str() {
        "println" | "print" | "eprintln" | "eprint" | "dbg" | "format" | "write" | "writeln" => {
            "kernels cannot print: write the value into a `&mut [T]` parameter and read it on the host"
        }
        "assert" | "assert_eq" | "assert_ne" | "debug_assert" | "debug_assert_eq"
        | "debug_assert_ne" | "panic" | "unreachable" | "todo" | "unimplemented" => {
            "kernels cannot panic: test the condition with `if` and `return;` (slice accesses are already bounds-checked on the host)"
        }
        "vec" => "kernels cannot allocate: use workgroup memory, `let tile = shared::<f32, 256>();`, or a `&mut [T]` parameter",
        _ => "write the code inline",
    };
    format!("macros are not supported in kernels (`{name}!`); {instead}")
}
