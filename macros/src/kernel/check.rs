//! Lowers a kernel body to the typed IR, checking types and supported constructs.
//!
//! Every error is recorded (spanned) and lowering goes on, so all of a kernel's mistakes are
//! reported together; an expression that failed yields `Err(())` and is not reported twice.

use std::collections::HashMap;

use syn::spanned::Spanned;

use super::ir::*;
use super::parse::scalar_type;
use crate::kernel::Errors;

type Res<T> = Result<T, ()>;

/// Workgroup memory a kernel may declare: CUDA's static `__shared__` limit.
const MAX_SHARED_BYTES: u64 = 48 * 1024;

#[derive(Clone)]
struct Local {
    mangled: String,
    ty: Ty,
    mutable: bool,
    /// Declared by code that was already reported (a rejected parameter, a failed `let`):
    /// its uses fail silently instead of adding "unknown variable" errors.
    poisoned: bool,
}

pub struct Checker<'a> {
    errors: &'a mut Errors,
    kernel_name: String,
    params: Vec<Param>,
    shared: Vec<Shared>,
    shared_names: HashMap<String, usize>,
    consts: HashMap<String, (Ty, ExprKind)>,
    scopes: Vec<HashMap<String, Local>>,
    counter: usize,
    loop_depth: usize,
    has_barrier: bool,
    /// Values known at compile time (immutable locals, the workgroup shape).
    known: Known,
}

fn err(errors: &mut Errors, node: impl quote::ToTokens, msg: impl std::fmt::Display) {
    errors.push(syn::Error::new_spanned(node, msg));
}

impl<'a> Checker<'a> {
    pub fn new(
        errors: &'a mut Errors,
        kernel_name: String,
        params: Vec<Param>,
        workgroup: [u32; 3],
    ) -> Self {
        Checker {
            errors,
            kernel_name,
            params,
            shared: Vec::new(),
            shared_names: HashMap::new(),
            consts: HashMap::new(),
            scopes: vec![HashMap::new()],
            counter: 0,
            loop_depth: 0,
            has_barrier: false,
            known: Known {
                locals: HashMap::new(),
                workgroup,
            },
        }
    }

    pub fn finish(self) -> (Vec<Param>, Vec<Shared>, bool) {
        (self.params, self.shared, self.has_barrier)
    }

    /// Marks `name` as already reported: later uses of it fail without a new error.
    pub fn poison(&mut self, name: &str) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(
                name.to_string(),
                Local {
                    mangled: String::new(),
                    ty: Ty::F32,
                    mutable: true,
                    poisoned: true,
                },
            );
        }
    }

    /// Poisons every name a (rejected) pattern binds.
    fn poison_pat(&mut self, pat: &syn::Pat) {
        struct Names(Vec<String>);
        impl<'ast> syn::visit::Visit<'ast> for Names {
            fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
                self.0.push(p.ident.to_string());
                syn::visit::visit_pat_ident(self, p);
            }
        }
        let mut names = Names(Vec::new());
        syn::visit::Visit::visit_pat(&mut names, pat);
        for n in names.0 {
            self.poison(&n);
        }
    }

    /// Whether `e` names a poisoned local (so its error was already reported).
    fn is_poisoned(&self, e: &syn::Expr) -> bool {
        match e {
            syn::Expr::Path(p) => p
                .path
                .get_ident()
                .and_then(|id| self.lookup(&id.to_string()))
                .is_some_and(|l| l.poisoned),
            syn::Expr::Paren(p) => self.is_poisoned(&p.expr),
            _ => false,
        }
    }

    fn error(&mut self, node: impl quote::ToTokens, msg: impl std::fmt::Display) {
        err(self.errors, node, msg);
    }

    /// A unique target name for a local: ASCII (CUDA C), not starting with `_` (WGSL reserves
    /// `__`), suffixed with a counter so shadowing and scopes never collide.
    fn mangle(&mut self, name: &str) -> String {
        self.counter += 1;
        let mut base = String::new();
        for c in name.trim_start_matches("r#").chars() {
            if c.is_ascii_alphanumeric() || c == '_' {
                base.push(c);
            } else {
                base.push_str(&format!("u{:x}", c as u32));
            }
        }
        let base = base.trim_start_matches('_');
        let base = if base.is_empty() { "v" } else { base };
        format!("{base}_{}", self.counter)
    }

    fn lookup(&self, name: &str) -> Option<&Local> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    fn param_index(&self, name: &str) -> Option<usize> {
        self.params.iter().position(|p| p.name == name)
    }

    // ---------------------------------------------------------------- statements

    pub fn block(&mut self, block: &syn::Block, top: bool) -> Vec<Stmt> {
        self.scopes.push(HashMap::new());
        let mut out = Vec::new();
        for stmt in &block.stmts {
            self.stmt(stmt, top, &mut out);
        }
        self.scopes.pop();
        out
    }

    fn stmt(&mut self, stmt: &syn::Stmt, top: bool, out: &mut Vec<Stmt>) {
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

    fn const_item(&mut self, c: &syn::ItemConst) {
        let Some(ty) = scalar_type(&c.ty) else {
            self.error(&c.ty, "a kernel `const` is `f32`, `i32`, `u32` or `bool`");
            return;
        };
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

    fn local(&mut self, local: &syn::Local, top: bool, out: &mut Vec<Stmt>) {
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
                if !top {
                    self.error(local, "workgroup memory is declared at the top level of the kernel body, not inside a block");
                }
                let mangled = self.mangle(&name);
                // The array replaces any local of that name in this scope.
                if let Some(scope) = self.scopes.last_mut() {
                    scope.remove(&name);
                }
                self.shared_names.insert(name, self.shared.len());
                self.shared.push(Shared {
                    name: mangled,
                    elem,
                    size,
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
        let ann = match ty_ann {
            Some(t) => match scalar_type(t) {
                Some(ty) => Some(ty),
                None => {
                    self.error(
                        t,
                        format!(
                            "a kernel local is `f32`, `i32`, `u32` or `bool`, not `{}`",
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
        // `let x = if c { ... } else { ... };` with statements in the branches.
        if let syn::Expr::If(ei) = &*init.expr {
            if !if_is_pure(ei) {
                let Ok(ty) = self.if_type(ei, ann) else {
                    self.poison(&name);
                    return;
                };
                let mangled = self.mangle(&name);
                out.push(Stmt::Let {
                    name: mangled.clone(),
                    ty,
                    mutable: true,
                    init: None,
                });
                self.if_assign(ei, &Place::Local(mangled.clone()), ty, out);
                self.declare(&name, mangled, ty, mutable);
                return;
            }
        }
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

    fn declare(&mut self, name: &str, mangled: String, ty: Ty, mutable: bool) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(
                name.to_string(),
                Local {
                    mangled,
                    ty,
                    mutable,
                    poisoned: false,
                },
            );
        }
    }

    /// `shared::<f32, 256>()` → (elem, size).
    fn shared_decl(&mut self, e: &syn::Expr) -> Option<(Ty, u32)> {
        let syn::Expr::Call(call) = e else {
            return None;
        };
        let syn::Expr::Path(p) = &*call.func else {
            return None;
        };
        let seg = p.path.segments.last()?;
        if p.path.segments.len() != 1 || seg.ident != "shared" {
            return None;
        }
        let usage = "workgroup memory is declared as `let tile = shared::<f32, 256>();` with a constant size";
        let syn::PathArguments::AngleBracketed(args) = &seg.arguments else {
            self.error(e, usage);
            return Some((Ty::F32, 1));
        };
        if args.args.len() != 2 || !call.args.is_empty() {
            self.error(e, usage);
            return Some((Ty::F32, 1));
        }
        let elem = match &args.args[0] {
            syn::GenericArgument::Type(t) => scalar_type(t).filter(|t| *t != Ty::Bool),
            _ => None,
        };
        let Some(elem) = elem else {
            self.error(
                &args.args[0],
                "workgroup memory holds `f32`, `i32` or `u32`",
            );
            return Some((Ty::F32, 1));
        };
        let size_expr: Option<syn::Expr> = match &args.args[1] {
            syn::GenericArgument::Const(c) => Some(c.clone()),
            syn::GenericArgument::Type(syn::Type::Path(tp)) => {
                Some(syn::Expr::Path(syn::ExprPath {
                    attrs: vec![],
                    qself: None,
                    path: tp.path.clone(),
                }))
            }
            _ => None,
        };
        // Evaluated silently: whatever is wrong with it, the one error is "not a constant".
        let saved = self.errors.len();
        let folded = size_expr.as_ref().and_then(|se| {
            let se = match se {
                syn::Expr::Block(b) if b.block.stmts.len() == 1 => match &b.block.stmts[0] {
                    syn::Stmt::Expr(inner, None) => inner,
                    _ => se,
                },
                _ => se,
            };
            self.expr(se, Some(Ty::U32)).ok().and_then(|e| fold(&e))
        });
        self.errors.truncate(saved);
        let size_arg = &args.args[1];
        let n = match folded {
            Some(ExprKind::LitU32(n)) if n > 0 => n,
            Some(ExprKind::LitU32(_)) => {
                self.error(size_arg, "workgroup memory needs at least one element");
                return Some((elem, 1));
            }
            _ => {
                let shown = crate::tokens::shown(size_arg);
                let why = if self.param_index(&shown).is_some() {
                    format!(" `{shown}` is a parameter, known only at launch: size the array for the largest case, e.g. `shared::<f32, 256>()`, and use part of it")
                } else {
                    String::new()
                };
                self.error(size_arg, format!("the size of workgroup memory must be a positive constant `u32` (a literal, a kernel `const`, or arithmetic on them).{why}"));
                return Some((elem, 1));
            }
        };
        let used: u64 = self.shared.iter().map(|s| s.size as u64 * 4).sum();
        let bytes = used + n as u64 * 4;
        if bytes > MAX_SHARED_BYTES {
            self.error(
                size_arg,
                format!("a kernel has at most {MAX_SHARED_BYTES} bytes (48 KiB) of workgroup memory (CUDA's static limit); with this array it declares {bytes}: use smaller tiles"),
            );
            return Some((elem, 1));
        }
        Some((elem, n))
    }

    fn expr_stmt(&mut self, e: &syn::Expr, out: &mut Vec<Stmt>) {
        match e {
            syn::Expr::Assign(a) => {
                if let syn::Expr::If(ei) = &*a.right {
                    if !if_is_pure(ei) {
                        let Ok((place, ty)) = self.place(&a.left) else {
                            return;
                        };
                        let Ok(_) = self.if_type(ei, Some(ty)) else {
                            return;
                        };
                        self.if_assign(ei, &place, ty, out);
                        return;
                    }
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
                    out.push(s);
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
                } else if b.expr.is_some() {
                    self.error(b, "`break` with a value is not supported in kernels; assign the value to a `let mut` local, then `break;`");
                } else if self.loop_depth == 0 {
                    self.error(b, "`break` outside of a loop");
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
            syn::Expr::Paren(p) => self.expr_stmt(&p.expr, out),
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

    fn if_stmt(&mut self, ei: &syn::ExprIf) -> Res<Stmt> {
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
    fn if_type(&mut self, ei: &syn::ExprIf, expect: Option<Ty>) -> Res<Ty> {
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
    fn tail_type(&mut self, block: &syn::Block, expect: Option<Ty>) -> Res<Ty> {
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
        let ty = self.expr(tail, expect).map(|e| e.ty);
        self.scopes.pop();
        self.errors.truncate(saved);
        ty.or_else(|_| expect.ok_or(()))
    }

    /// Lowers `place = if c { ...; a } else { ...; b }` into statements.
    fn if_assign(&mut self, ei: &syn::ExprIf, place: &Place, ty: Ty, out: &mut Vec<Stmt>) {
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

    fn value_block(&mut self, block: &syn::Block, place: &Place, ty: Ty) -> Vec<Stmt> {
        self.scopes.push(HashMap::new());
        let mut out = Vec::new();
        let n = block.stmts.len();
        for s in &block.stmts[..n.saturating_sub(1)] {
            self.stmt(s, false, &mut out);
        }
        if let Some(syn::Stmt::Expr(tail, None)) = block.stmts.last() {
            if let syn::Expr::If(inner) = tail {
                if !if_is_pure(inner) {
                    self.if_assign(inner, place, ty, &mut out);
                    self.scopes.pop();
                    return out;
                }
            }
            if let Ok(v) = self.expr(tail, Some(ty)) {
                if v.ty != ty {
                    self.error(tail, mismatch(ty, v.ty));
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
        self.scopes.pop();
        out
    }

    fn for_loop(&mut self, f: &syn::ExprForLoop) -> Res<Stmt> {
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
        let mangled = self.mangle(&name);
        self.scopes.push(HashMap::new());
        self.declare(&name, mangled.clone(), ty, false);
        self.loop_depth += 1;
        let body = self.block(&f.body, false);
        self.loop_depth -= 1;
        self.scopes.pop();
        Ok(Stmt::For {
            var: mangled,
            source: name.trim_start_matches("r#").to_string(),
            ty,
            start,
            end,
            step,
            body,
        })
    }

    /// Recognises `atomic_*(buf, index, ...)`; `None` when `e` is not an atomic call.
    fn try_atomic(&mut self, e: &syn::Expr, _result: Option<&str>) -> Option<Res<(Stmt, Ty)>> {
        let syn::Expr::Call(call) = e else {
            return None;
        };
        let syn::Expr::Path(p) = &*call.func else {
            return None;
        };
        let name = p.path.get_ident()?.to_string();
        let op = AtomicOp::from_name(&name)?;
        Some(self.atomic(call, op, &name))
    }

    fn atomic(&mut self, call: &syn::ExprCall, op: AtomicOp, name: &str) -> Res<(Stmt, Ty)> {
        let want = 2 + op.operands();
        if call.args.len() != want {
            self.error(
                call,
                format!(
                    "`{name}` takes {want} arguments: the slice, the index{}",
                    match op {
                        AtomicOp::Load => "",
                        AtomicOp::CompareExchange => ", the expected value and the new value",
                        _ => " and the value",
                    }
                ),
            );
            return Err(());
        }
        let buf = &call.args[0];
        if self.is_poisoned(buf) {
            return Err(());
        }
        let pidx = match buf {
            syn::Expr::Path(p) => p
                .path
                .get_ident()
                .and_then(|id| self.param_index(&id.to_string())),
            _ => None,
        };
        let Some(pidx) = pidx else {
            self.error(buf, "the first argument of an atomic is a `&mut [u32]` or `&mut [i32]` parameter of the kernel");
            return Err(());
        };
        let ParamKind::Slice { elem, .. } = self.params[pidx].kind else {
            self.error(buf, "the first argument of an atomic is a `&mut [u32]` or `&mut [i32]` parameter of the kernel");
            return Err(());
        };
        let index = self.index_expr(&call.args[1])?;
        let mut operands = Vec::new();
        for a in call.args.iter().skip(2) {
            let v = self.expr(a, Some(elem))?;
            if v.ty != elem {
                self.error(a, mismatch(elem, v.ty));
                return Err(());
            }
            operands.push(v);
        }
        Ok((
            Stmt::Atomic {
                result: None,
                op,
                param: pidx,
                index,
                operands,
                ty: elem,
            },
            elem,
        ))
    }

    fn index_expr(&mut self, e: &syn::Expr) -> Res<Expr> {
        let v = self.expr(e, Some(Ty::U32))?;
        if v.ty != Ty::U32 {
            self.error(
                e,
                format!(
                    "an index is `u32`, found `{}`; write `(...) as u32`",
                    v.ty.rust()
                ),
            );
            return Err(());
        }
        Ok(v)
    }

    /// An assignable place and its type.
    fn place(&mut self, e: &syn::Expr) -> Res<(Place, Ty)> {
        match e {
            syn::Expr::Path(p) => {
                let Some(id) = p.path.get_ident() else {
                    self.error(
                        e,
                        "cannot assign to this: assign to a `let mut` local or an element `y[i]`",
                    );
                    return Err(());
                };
                let name = id.to_string();
                if let Some(l) = self.lookup(&name).cloned() {
                    if l.poisoned {
                        return Err(());
                    }
                    if !l.mutable {
                        self.error(e, format!("cannot assign to `{name}`: it is not `mut` (declare it with `let mut`)"));
                        return Err(());
                    }
                    return Ok((Place::Local(l.mangled), l.ty));
                }
                if self.param_index(&name).is_some() {
                    self.error(
                        e,
                        format!(
                            "cannot assign to parameter `{name}`; copy it into a `let mut` local"
                        ),
                    );
                } else {
                    self.error(
                        e,
                        format!(
                            "unknown variable `{name}`; declare it first: `let mut {name} = ...;`"
                        ),
                    );
                }
                Err(())
            }
            syn::Expr::Index(ix) => {
                let (target, ty, writable) = self.index_target(&ix.expr)?;
                let index = self.index_expr(&ix.index)?;
                match target {
                    Target::Param(p) => {
                        if !writable {
                            let n = &self.params[p].name;
                            self.error(&ix.expr, format!("cannot write to `{n}`: it is a read-only `&[T]`; declare it `&mut [T]`"));
                            return Err(());
                        }
                        if let ParamKind::Slice { atomic: true, .. } = self.params[p].kind {
                            let n = &self.params[p].name;
                            self.error(ix, format!("`{n}` is used with atomics, so every access to it is atomic: write `atomic_store({n}, i, v);`"));
                            return Err(());
                        }
                        Ok((Place::Param(p, Box::new(index)), ty))
                    }
                    Target::Shared(s) => {
                        self.shared_index_in_bounds(s, &index, &ix.index)?;
                        Ok((Place::Shared(s, Box::new(index)), ty))
                    }
                }
            }
            syn::Expr::Paren(p) => self.place(&p.expr),
            syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)) => {
                self.error(e, DEREF_MSG);
                Err(())
            }
            _ => {
                self.error(
                    e,
                    "cannot assign to this: assign to a `let mut` local or an element `y[i]`",
                );
                Err(())
            }
        }
    }

    /// Rejects an index into workgroup memory that is known at compile time to be out of
    /// bounds (every invocation would fail; WGSL compilers reject it too).
    fn shared_index_in_bounds(&mut self, s: usize, index: &Expr, node: &syn::Expr) -> Res<()> {
        let size = self.shared[s].size;
        match const_value(index, &self.known) {
            Some(ExprKind::LitU32(n)) if n >= size => {
                self.error(
                    node,
                    format!("index {n} is out of bounds: this workgroup array has {size} elements (indices 0 to {})", size - 1),
                );
                Err(())
            }
            _ => Ok(()),
        }
    }

    fn index_target(&mut self, base: &syn::Expr) -> Res<(Target, Ty, bool)> {
        if self.is_poisoned(base) {
            return Err(());
        }
        if let syn::Expr::Path(p) = base {
            if let Some(id) = p.path.get_ident() {
                let name = id.to_string();
                if self.lookup(&name).is_none() {
                    if let Some(&s) = self.shared_names.get(&name) {
                        return Ok((Target::Shared(s), self.shared[s].elem, true));
                    }
                    if let Some(pi) = self.param_index(&name) {
                        if let ParamKind::Slice { elem, mutable, .. } = self.params[pi].kind {
                            return Ok((Target::Param(pi), elem, mutable));
                        }
                    }
                }
            }
        }
        self.error(
            base,
            "only slice parameters and workgroup arrays can be indexed",
        );
        Err(())
    }

    // ---------------------------------------------------------------- expressions

    pub fn expr(&mut self, e: &syn::Expr, expect: Option<Ty>) -> Res<Expr> {
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
                    self.error(&c.ty, "`as` converts to `f32`, `i32` or `u32`");
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
                if inner.ty == Ty::Bool && to == Ty::F32 {
                    self.error(
                        c,
                        "`bool as f32` is not allowed (as in Rust); write `select(b, 1.0, 0.0)`",
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
                        self.shared_index_in_bounds(s, &index, &ix.index)?;
                        Place::Shared(s, Box::new(index))
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
            syn::Expr::Call(c) => self.call(c, expect),
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
                    self.error(e, "a block used as a value must be a single expression");
                    Err(())
                }
            },
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
                self.error(e, "local arrays are not supported in kernels; use separate locals, or workgroup memory shared by the workgroup: `let tile = shared::<f32, 256>();`");
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
            syn::Expr::Loop(_) | syn::Expr::While(_) | syn::Expr::ForLoop(_) => {
                self.error(e, "loops are statements and have no value in kernels");
                Err(())
            }
            _ => {
                self.error(e, "this expression is not supported in kernels");
                Err(())
            }
        }
    }

    fn lit(&mut self, lit: &syn::Lit, expect: Option<Ty>, negate: bool) -> Res<Expr> {
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
                    if t != Ty::F32 && t != Ty::Bool && suffix.is_empty() {
                        self.error(f, format!("expected `{}`, found a float literal; no implicit conversions in kernels", t.rust()));
                        return Err(());
                    }
                }
                let v: f32 = f.base10_parse().map_err(|e| self.errors.push(e))?;
                Ok(Expr {
                    kind: ExprKind::LitF32(if negate { -v } else { v }),
                    ty: Ty::F32,
                })
            }
            syn::Lit::Int(i) => {
                let ty = match i.suffix() {
                    "" => match expect {
                        Some(Ty::U32) => Ty::U32,
                        Some(Ty::F32) => {
                            self.error(i, format!("expected `f32`, found an integer literal; write `{}.0` (no implicit conversions in kernels)", i.base10_digits()));
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

    fn path(&mut self, p: &syn::ExprPath) -> Res<Expr> {
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

    fn unary(&mut self, u: &syn::ExprUnary, expect: Option<Ty>) -> Res<Expr> {
        match u.op {
            syn::UnOp::Neg(_) => {
                if let syn::Expr::Lit(l) = &*u.expr {
                    return self.lit(&l.lit, expect, true);
                }
                let v = self.expr(&u.expr, expect)?;
                if !matches!(v.ty, Ty::F32 | Ty::I32) {
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

    fn binary(&mut self, b: &syn::ExprBinary, expect: Option<Ty>) -> Res<Expr> {
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
                if is_untyped_lit(&b.left) && !is_untyped_lit(&b.right) {
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
    fn check_binary(&mut self, op: BinOp, l: Ty, r: Ty, node: impl quote::ToTokens) -> Res<Ty> {
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

    fn call(&mut self, c: &syn::ExprCall, expect: Option<Ty>) -> Res<Expr> {
        let syn::Expr::Path(p) = &*c.func else {
            self.error(&c.func, "only builtin functions can be called in kernels, by name: `sqrt(x)`; closures and function values are not supported");
            return Err(());
        };
        let Some(id) = p.path.get_ident() else {
            let last = p.path.segments.last().map(|s| s.ident.to_string());
            let msg = match last {
                Some(n) if MathFn::from_name(&n).is_some() => format!("call builtins by their plain name: `{n}(...)` (or as a method, `x.{n}()`)"),
                _ => format!("unknown function `{}`; kernels can call only builtins (math functions, id builtins, atomics, `barrier()`)", crate::tokens::shown(p)),
            };
            self.error(&c.func, msg);
            return Err(());
        };
        let name = id.to_string();
        let ids = match name.as_str() {
            "global_id" => Some(IdBuiltin::GlobalId),
            "local_id" => Some(IdBuiltin::LocalId),
            "workgroup_id" => Some(IdBuiltin::WorkgroupId),
            "num_workgroups" => Some(IdBuiltin::NumWorkgroups),
            "workgroup_size" => Some(IdBuiltin::WorkgroupSize),
            "global_size" => Some(IdBuiltin::GlobalSize),
            _ => None,
        };
        if let Some(b) = ids {
            if !c.args.is_empty() {
                self.error(c, format!("`{name}()` takes no arguments"));
                return Err(());
            }
            return Ok(Expr {
                kind: ExprKind::Id(b),
                ty: Ty::UVec3,
            });
        }
        if let Some(f) = MathFn::from_name(&name) {
            let args: Vec<&syn::Expr> = c.args.iter().collect();
            return self.math(f, &name, &args, c, expect);
        }
        match name.as_str() {
            "barrier" => self.error(c, "`barrier()` is a statement: write `barrier();`"),
            "shared" => self.error(c, "workgroup memory is declared at the top of the kernel: `let tile = shared::<f32, 256>();`"),
            n if AtomicOp::from_name(n).is_some() => self.error(c, "an atomic is a statement or a `let` initializer: `let old = atomic_add(y, i, 1u32);`"),
            n if self.lookup(n).is_some() || self.param_index(n).is_some() => self.error(&c.func, format!("`{n}` is not a function")),
            n if n == self.kernel_name => self.error(&c.func, format!("a kernel cannot call itself: GPUs have no recursion; rewrite `{n}` with a loop, or launch it again from the host")),
            _ => {
                let hint = crate::suggest::hint(&name, crate::suggest::BUILTIN_FNS.iter().copied());
                self.error(&c.func, format!("unknown function `{name}`{hint}; kernels can call only builtins (math functions, id builtins, atomics, `barrier()`); helper functions are not supported yet: write the helper's body inline, or as its own kernel launched from the step"))
            }
        }
        Err(())
    }

    fn math(
        &mut self,
        f: MathFn,
        name: &str,
        args: &[&syn::Expr],
        node: impl quote::ToTokens,
        expect: Option<Ty>,
    ) -> Res<Expr> {
        if args.len() != f.arity() {
            self.error(node, format!("`{name}` takes {} argument(s)", f.arity()));
            return Err(());
        }
        let mut out = Vec::new();
        if f == MathFn::Select {
            let c = self.expr(args[0], Some(Ty::Bool))?;
            if c.ty != Ty::Bool {
                self.error(
                    args[0],
                    format!(
                        "`select(cond, if_true, if_false)`: the condition is `bool`, found `{}`",
                        c.ty.rust()
                    ),
                );
                return Err(());
            }
            out.push(c);
            let a = self.value_args(&args[1..], expect)?;
            let Some(ty) = a.first().map(|v| v.ty) else {
                return Err(());
            };
            if ty == Ty::UVec3 {
                self.error(
                    node,
                    "`select` chooses between scalars; select one component (`.x`) at a time",
                );
                return Err(());
            }
            out.extend(a);
            return Ok(Expr {
                kind: ExprKind::Math(f, out),
                ty,
            });
        }
        let a = self.value_args(args, expect)?;
        let Some(ty) = a.first().map(|v| v.ty) else {
            return Err(());
        };
        if f.float_only() && ty != Ty::F32 {
            self.error(
                node,
                format!("`{name}` is defined on `f32`, found `{}`", ty.rust()),
            );
            return Err(());
        }
        if !ty.is_num() {
            self.error(
                node,
                format!("`{name}` needs numbers, found `{}`", ty.rust()),
            );
            return Err(());
        }
        if f == MathFn::Abs && ty == Ty::U32 {
            self.error(node, "`abs` of a `u32` is the value itself; remove it");
            return Err(());
        }
        Ok(Expr {
            kind: ExprKind::Math(f, a),
            ty,
        })
    }

    /// Arguments that must all share one type (literals adapt to the first typed one).
    fn value_args(&mut self, args: &[&syn::Expr], expect: Option<Ty>) -> Res<Vec<Expr>> {
        let anchor = args.iter().position(|a| !is_untyped_lit(a));
        let mut ty = expect;
        let mut anchored = None;
        if let Some(i) = anchor {
            let v = self.expr(args[i], expect)?;
            ty = Some(v.ty);
            anchored = Some(v);
        }
        let mut out = Vec::with_capacity(args.len());
        for (i, a) in args.iter().enumerate() {
            match anchored.take() {
                Some(v) if anchor == Some(i) => out.push(v),
                other => {
                    anchored = other;
                    out.push(self.expr(a, ty)?);
                }
            }
        }
        let Some(t0) = out.first().map(|v| v.ty) else {
            return Err(());
        };
        for (a, v) in args.iter().zip(&out) {
            if v.ty != t0 {
                self.error(a, format!("arguments must have the same type: `{}` and `{}` (no implicit conversions: use `as`)", t0.rust(), v.ty.rust()));
                return Err(());
            }
        }
        Ok(out)
    }

    fn method(&mut self, m: &syn::ExprMethodCall, expect: Option<Ty>) -> Res<Expr> {
        if self.is_poisoned(&m.receiver) {
            return Err(());
        }
        let name = m.method.to_string();
        if m.turbofish.is_some() {
            self.error(m, "method calls in kernels take no turbofish");
            return Err(());
        }
        if name == "len" {
            if !m.args.is_empty() {
                self.error(m, "`len()` takes no arguments");
                return Err(());
            }
            if let syn::Expr::Path(p) = &*m.receiver {
                if let Some(pi) = p
                    .path
                    .get_ident()
                    .and_then(|id| self.param_index(&id.to_string()))
                {
                    if matches!(self.params[pi].kind, ParamKind::Slice { .. })
                        && self.lookup(&self.params[pi].name.clone()).is_none()
                    {
                        return Ok(Expr {
                            kind: ExprKind::Len(pi),
                            ty: Ty::U32,
                        });
                    }
                }
                if let Some(&s) = p
                    .path
                    .get_ident()
                    .and_then(|id| self.shared_names.get(&id.to_string()))
                {
                    return Ok(Expr {
                        kind: ExprKind::LitU32(self.shared[s].size),
                        ty: Ty::U32,
                    });
                }
            }
            self.error(
                &m.receiver,
                "`len()` applies to a slice parameter or workgroup array",
            );
            return Err(());
        }
        if let Some(f) = MathFn::from_name(&name).filter(|f| *f != MathFn::Select) {
            let mut args: Vec<&syn::Expr> = vec![&m.receiver];
            args.extend(m.args.iter());
            return self.math(f, &name, &args, m, expect);
        }
        let hint = crate::suggest::hint(&name, crate::suggest::METHODS.iter().copied());
        self.error(&m.method, format!("method `{name}` is not supported in kernels{hint}; the builtins are `len()` and the math functions (`sqrt`, `min`, `max`, …)"));
        Err(())
    }
}

const LABEL_MSG: &str = "loop labels are not supported in kernels; to leave an outer loop, set a `bool` flag, `break` the inner loop, and test the flag in the outer one";

const DEREF_MSG: &str = "`*` is not supported in kernels: there are no references to follow (locals and scalar parameters are values, slices are indexed as `x[i]`); use the value itself";

/// What to write instead of a macro in a kernel.
fn macro_message(mac: &syn::Macro) -> String {
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

enum Target {
    Param(usize),
    Shared(usize),
}

/// "write `k as f32`": converts the operand written as a plain name (else the right one).
fn conversion_hint(left: &syn::Expr, lt: Ty, right: &syn::Expr, rt: Ty) -> String {
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

fn mismatch(want: Ty, got: Ty) -> String {
    format!(
        "expected `{}`, found `{}` (no implicit conversions in kernels: use `as`)",
        want.rust(),
        got.rust()
    )
}

fn is_path_call(c: &syn::ExprCall, name: &str) -> bool {
    matches!(&*c.func, syn::Expr::Path(p) if p.path.is_ident(name))
}

fn is_untyped_lit(e: &syn::Expr) -> bool {
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

/// An `if` expression whose branches are single expressions (so it can stay an expression).
fn if_is_pure(ei: &syn::ExprIf) -> bool {
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

fn bin_op(op: &syn::BinOp) -> Option<BinOp> {
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

fn compound_op(op: &syn::BinOp) -> Option<BinOp> {
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

/// What is known at compile time besides literals.
#[derive(Default)]
struct Known {
    /// Values of immutable locals (by mangled name).
    locals: HashMap<String, ExprKind>,
    workgroup: [u32; 3],
}

/// The value of an integer or `bool` expression when it is known at compile time: from
/// literals, consts and immutable locals with known values (`known`), through the operators
/// and builtins a WGSL compiler also evaluates. Division and float conversions are left out
/// (the emitters route them through helpers), so `None` means "not known here".
fn const_value(e: &Expr, known: &Known) -> Option<ExprKind> {
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
