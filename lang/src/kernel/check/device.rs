//! `#[device]` helpers: their bodies (a return value, no ids, barriers, workgroup memory or
//! atomics) and calls of them (argument count and types, slices passed by name).

use std::collections::HashMap;

use super::*;

/// A helper's signature, as its callers check calls against it.
#[derive(Clone, Debug)]
pub struct Sig {
    /// Unique over every crate: the function's name in WGSL and CUDA C.
    pub id: String,
    /// The name in the source.
    pub name: String,
    pub params: Vec<Param>,
    pub ret: Option<Ty>,
}

impl Sig {
    /// `gelu(x: f32) -> f32`, for messages.
    pub fn shown(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|p| match p.kind {
                ParamKind::Scalar(t) => format!("{}: {}", p.name, t.rust()),
                ParamKind::Slice { elem, mutable, .. } => {
                    let m = if mutable { "mut " } else { "" };
                    format!("{}: &{m}[{}]", p.name, elem.rust())
                }
            })
            .collect();
        let ret = self
            .ret
            .map(|t| format!(" -> {}", t.rust()))
            .unwrap_or_default();
        format!("{}({}){ret}", self.name, params.join(", "))
    }
}

/// Whether every path through `stmts` ends in a `return` (WGSL's rule for a function with a
/// return type, for the shapes the kernel language has).
pub fn definitely_returns(stmts: &[Stmt]) -> bool {
    match stmts.last() {
        Some(Stmt::ReturnValue(_) | Stmt::Return) => true,
        Some(Stmt::If { then, els, .. }) => definitely_returns(then) && definitely_returns(els),
        _ => false,
    }
}

/// The index of a callee whose definition has not arrived yet: its calls fail silently.
pub const DEFERRED: usize = usize::MAX;

impl Checker<'_> {
    /// The helpers this body may call: `names` maps a callee, as written (`gelu`,
    /// `helpers::gelu`) or by id, to its index in `sigs`.
    pub fn set_helpers(&mut self, sigs: Vec<Sig>, names: HashMap<String, usize>) {
        self.sigs = sigs;
        self.fn_names = names;
    }

    /// Lowers the body of a helper returning `ret`; its tail expression is its value.
    pub fn device_body(&mut self, block: &syn::Block, ret: Option<Ty>) -> Vec<Stmt> {
        self.device = Some(ret);
        self.scopes.push(HashMap::new());
        let mut out = Vec::new();
        let n = block.stmts.len();
        for (i, stmt) in block.stmts.iter().enumerate() {
            match (stmt, ret) {
                (syn::Stmt::Expr(e, None), Some(t))
                    if i + 1 == n
                        && !matches!(
                            e,
                            syn::Expr::ForLoop(_)
                                | syn::Expr::While(_)
                                | syn::Expr::Loop(_)
                                | syn::Expr::Return(_)
                        )
                        // `if c { return v; }` ends the body as a statement.
                        && !matches!(e, syn::Expr::If(ei) if ei.else_branch.is_none()) =>
                {
                    self.tail_value(e, t, &mut out)
                }
                _ => self.stmt(stmt, true, &mut out),
            }
        }
        self.scopes.pop();
        super::half::widen_block(&mut out);
        if let Some(t) = ret {
            if !definitely_returns(&out) {
                let name = self.kernel_name.clone();
                self.errors.push(syn::Error::new(
                    block.brace_token.span.close(),
                    format!("`{name}` returns `{}`, but its body can reach its end without a value: end it with an expression (no `;`), or `return v;` on every path", t.rust()),
                ));
            }
        }
        out
    }

    /// A helper's tail expression: its return value.
    fn tail_value(&mut self, e: &syn::Expr, t: Ty, out: &mut Vec<Stmt>) {
        if let syn::Expr::If(ei) = e {
            if !if_is_pure(ei) {
                if self.if_type(ei, Some(t)).is_err() {
                    return;
                }
                let m = self.mangle("ret");
                out.push(Stmt::Let {
                    name: m.clone(),
                    ty: t,
                    mutable: true,
                    init: None,
                });
                self.if_assign(ei, &Place::Local(m.clone()), t, out);
                out.push(Stmt::ReturnValue(Expr {
                    kind: ExprKind::Local(m),
                    ty: t,
                }));
                return;
            }
        }
        self.effect_ok = true;
        let Ok(v) = self.expr(e, Some(t)) else {
            // Reported; a return keeps "can reach its end" from being added.
            out.push(Stmt::Return);
            return;
        };
        if v.ty != t {
            self.error(e, mismatch(t, v.ty));
        }
        out.push(Stmt::ReturnValue(v));
    }

    /// `return;` or `return v;` in a helper.
    pub(super) fn device_return(&mut self, r: &syn::ExprReturn, out: &mut Vec<Stmt>) {
        let name = self.kernel_name.clone();
        match (&r.expr, self.device.flatten()) {
            (Some(v), Some(t)) => {
                self.effect_ok = true;
                let Ok(e) = self.expr(v, Some(t)) else {
                    out.push(Stmt::Return);
                    return;
                };
                if e.ty != t {
                    self.error(v, mismatch(t, e.ty));
                }
                out.push(Stmt::ReturnValue(e));
            }
            (None, Some(t)) => {
                self.error(r, format!("`{name}` returns `{}`: write `return value;`", t.rust()));
                out.push(Stmt::Return);
            }
            (Some(v), None) => self.error(v, format!("`{name}` returns nothing (its signature has no `-> T`): write `return;`, or declare the return type")),
            (None, None) => out.push(Stmt::Return),
        }
    }

    /// The helper a call's function names, if any.
    pub(super) fn helper_index(&self, func: &syn::Expr) -> Option<usize> {
        let syn::Expr::Path(p) = func else {
            return None;
        };
        if p.qself.is_some() {
            return None;
        }
        // A local or parameter of that name shadows a helper, as in Rust.
        if let Some(id) = p.path.get_ident() {
            let n = id.to_string();
            if self.lookup(&n).is_some() || self.param_index(&n).is_some() {
                return None;
            }
        }
        self.fn_names.get(&crate::tokens::shown(&p.path)).copied()
    }

    /// A call of helper `i`. `effect_ok`: the call is where a write to memory is ordered the
    /// same on every target (a statement, a `let` initializer, an assignment to a local).
    pub(super) fn helper_call(
        &mut self,
        i: usize,
        c: &syn::ExprCall,
        effect_ok: bool,
    ) -> Res<Expr> {
        self.helper_call_in(i, c, effect_ok, false)
    }

    pub(super) fn helper_call_in(
        &mut self,
        i: usize,
        c: &syn::ExprCall,
        effect_ok: bool,
        as_stmt: bool,
    ) -> Res<Expr> {
        if i == DEFERRED {
            return Err(());
        }
        let sig = self.sigs[i].clone();
        let name = &sig.name;
        if c.args.len() != sig.params.len() {
            self.error(
                c,
                format!(
                    "`{name}` takes {} argument(s), found {}: `{}`",
                    sig.params.len(),
                    c.args.len(),
                    sig.shown()
                ),
            );
            return Err(());
        }
        if let Some(p) = sig
            .params
            .iter()
            .find(|p| matches!(p.kind, ParamKind::Slice { mutable: true, .. }))
        {
            if !effect_ok {
                self.error(c, format!("`{name}` writes memory (its parameter `{}` is a `&mut` slice), so it is called as a statement (`{name}(...);`), as a `let` initializer or as the value assigned to a local: inside a larger expression the order of its writes would differ between targets", p.name));
                return Err(());
            }
        }
        if sig.ret.is_none() && !as_stmt {
            self.error(c, format!("`{name}` returns nothing, so its call is not a value; call it as a statement: `{name}(...);`"));
            return Err(());
        }
        let mut args = Vec::new();
        let mut failed = false;
        for (a, p) in c.args.iter().zip(&sig.params) {
            match p.kind {
                ParamKind::Scalar(t) => match self.expr(a, Some(t)) {
                    Ok(v) if v.ty == t => args.push(CallArg::Value(v)),
                    Ok(v) => {
                        self.error(a, format!("argument `{}` of `{name}` is `{}`, found `{}` (no implicit conversions in kernels: use `as`)", p.name, t.rust(), v.ty.rust()));
                        failed = true;
                    }
                    Err(()) => failed = true,
                },
                ParamKind::Slice { elem, mutable, .. } => {
                    match self.slice_arg(a, p, elem, mutable, name) {
                        Ok(s) => args.push(CallArg::Slice(s)),
                        Err(()) => failed = true,
                    }
                }
            }
        }
        if failed {
            return Err(());
        }
        Ok(Expr {
            kind: ExprKind::Call(i, args),
            ty: sig.ret.unwrap_or(Ty::Bool),
        })
    }

    /// A slice argument: a slice parameter of the caller, by name.
    fn slice_arg(
        &mut self,
        a: &syn::Expr,
        p: &Param,
        elem: Ty,
        mutable: bool,
        callee: &str,
    ) -> Res<usize> {
        if self.is_poisoned(a) {
            return Err(());
        }
        let want = format!("&{}[{}]", if mutable { "mut " } else { "" }, elem.rust());
        let name = match a {
            syn::Expr::Path(ep) => ep.path.get_ident().map(|id| id.to_string()),
            _ => None,
        };
        let Some(name) = name else {
            self.error(a, format!("argument `{}` of `{callee}` is a slice `{want}`: pass a slice parameter by its name (sub-slices are not supported; pass an offset as well)", p.name));
            return Err(());
        };
        if self.lookup(&name).is_none() && self.shared_names.contains_key(&name) {
            self.error(a, format!("`{name}` is workgroup memory, which cannot be passed to a `#[device]` function (WGSL has no pointers to it in parameters here); use it in the kernel"));
            return Err(());
        }
        let slice = self
            .param_index(&name)
            .filter(|_| self.lookup(&name).is_none())
            .and_then(|i| match self.params[i].kind {
                ParamKind::Slice {
                    elem,
                    mutable,
                    atomic,
                } => Some((i, elem, mutable, atomic)),
                ParamKind::Scalar(_) => None,
            });
        let Some((i, got, got_mut, atomic)) = slice else {
            self.error(a, format!("argument `{}` of `{callee}` is a slice `{want}`: pass a slice parameter by its name", p.name));
            return Err(());
        };
        if atomic {
            self.error(a, format!("`{name}` is used with atomics, which a `#[device]` function cannot access; pass another slice or do the work in the kernel"));
            return Err(());
        }
        if got != elem {
            self.error(
                a,
                format!(
                    "argument `{}` of `{callee}` is `{want}`, found a slice of `{}`",
                    p.name,
                    got.rust()
                ),
            );
            return Err(());
        }
        if mutable && !got_mut {
            self.error(a, format!("argument `{}` of `{callee}` is `{want}`, but `{name}` is read-only: declare it `&mut [{}]`", p.name, elem.rust()));
            return Err(());
        }
        Ok(i)
    }
}
