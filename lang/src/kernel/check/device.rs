//! `#[device]` helpers: their bodies (a return value, no ids, no workgroup memory of their
//! own) and calls of them (argument count and types, slices and workgroup arrays passed by
//! name, per-invocation arrays by value, a helper that reaches a barrier or a subgroup
//! operation called where the whole workgroup is).

use std::collections::HashMap;

use super::*;

/// A helper's signature, as its callers check calls against it.
#[derive(Clone, Debug)]
pub struct Sig {
    /// Unique over every crate: the function's name in WGSL and CUDA C.
    pub id: String,
    /// The name in the source.
    pub name: String,
    /// The scalar and slice parameters, in order.
    pub params: Vec<Param>,
    /// The workgroup-array parameters (`&[T; N]`, `&mut [T; N]`).
    pub shared: Vec<SharedParam>,
    /// The per-invocation arrays it takes by value (`v: [f32; 4]`).
    pub arrays: Vec<ArrayParam>,
    pub ret: Option<Ty>,
    /// `-> [T; N]`: the element type and length of the array it returns.
    pub ret_array: Option<(Ty, u32)>,
    /// Whether the helper reaches a `barrier()`, itself or through a callee.
    pub has_barrier: bool,
    /// Whether it reaches a subgroup builtin, itself or through a callee: its callers use
    /// subgroups (and pass the subgroup size and lane where a target needs them).
    pub has_subgroup: bool,
    /// The first subgroup operation it reaches that exchanges values between invocations
    /// (not the size or the lane), and the helper whose body holds it: every invocation of a
    /// subgroup must reach a call of this helper together.
    pub exchange: Option<(SubgroupOp, String)>,
}

/// A workgroup-array parameter of a helper.
#[derive(Clone, Debug)]
pub struct SharedParam {
    /// Its position among all the arguments.
    pub pos: usize,
    /// The array as the helper's body sees it (named as the parameter).
    pub shared: Shared,
    pub mutable: bool,
}

/// What an argument of a helper call stands for.
#[derive(Clone, Copy)]
pub enum Slot {
    /// `Sig::params[i]`.
    Param(usize),
    /// `Sig::shared[i]`.
    Shared(usize),
    /// `Sig::arrays[i]`.
    Array(usize),
}

impl Sig {
    /// What each argument, in order, stands for.
    pub fn slots(&self) -> Vec<Slot> {
        let n = self.params.len() + self.shared.len() + self.arrays.len();
        let mut next = 0;
        (0..n)
            .map(|pos| {
                if let Some(j) = self.shared.iter().position(|s| s.pos == pos) {
                    Slot::Shared(j)
                } else if let Some(j) = self.arrays.iter().position(|a| a.pos == pos) {
                    Slot::Array(j)
                } else {
                    next += 1;
                    Slot::Param(next - 1)
                }
            })
            .collect()
    }

    /// Whether a call may write memory: a `&mut` slice, a workgroup array or a barrier.
    fn writes(&self) -> Option<String> {
        if let Some(p) = self
            .params
            .iter()
            .find(|p| matches!(p.kind, ParamKind::Slice { mutable: true, .. }))
        {
            return Some(format!("its parameter `{}` is a `&mut` slice", p.name));
        }
        if let Some(s) = self.shared.first() {
            return Some(format!("it takes the workgroup array `{}`", s.shared.name));
        }
        None
    }
    /// `gelu(x: f32) -> f32`, for messages.
    pub fn shown(&self) -> String {
        let params: Vec<String> = self
            .slots()
            .into_iter()
            .map(|s| match s {
                Slot::Param(i) => {
                    let p = &self.params[i];
                    match p.kind {
                        ParamKind::Scalar(t) => format!("{}: {}", p.name, t.rust()),
                        ParamKind::Slice { elem, mutable, .. } => {
                            let m = if mutable { "mut " } else { "" };
                            format!("{}: &{m}[{}]", p.name, elem.rust())
                        }
                    }
                }
                Slot::Shared(j) => {
                    let s = &self.shared[j];
                    let m = if s.mutable { "mut " } else { "" };
                    let sh = &s.shared;
                    format!("{}: &{m}[{}; {}]", sh.name, sh.elem.rust(), sh.size)
                }
                Slot::Array(j) => {
                    let a = &self.arrays[j];
                    format!("{}: {}", a.name, array_shown(a.elem, a.len))
                }
            })
            .collect();
        let ret = match (self.ret, self.ret_array) {
            (Some(t), _) => format!(" -> {}", t.rust()),
            (None, Some((t, n))) => format!(" -> {}", array_shown(t, n)),
            (None, None) => String::new(),
        };
        format!("{}({}){ret}", self.name, params.join(", "))
    }
}

/// Whether every path through `stmts` ends in a `return` (WGSL's rule for a function with a
/// return type, for the shapes the kernel language has).
pub fn definitely_returns(stmts: &[Stmt]) -> bool {
    match stmts.last() {
        Some(Stmt::ReturnValue(_) | Stmt::ReturnArray(_) | Stmt::Return) => true,
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

    /// The workgroup arrays a helper takes: its body indexes them by name (a `&[T; N]` one
    /// is read-only there).
    pub fn set_shared_params(&mut self, shared: &[SharedParam]) {
        for p in shared {
            let mut sh = p.shared.clone();
            sh.atomic = self.atomic_names.contains(&sh.name);
            self.shared_names.insert(sh.name.clone(), self.shared.len());
            if !p.mutable {
                self.shared_readonly.push(self.shared.len());
            }
            self.shared.push(sh);
        }
    }

    /// Lowers the body of a helper returning `ret` (or the array `ret_array`); its tail
    /// expression is its value.
    pub fn device_body(
        &mut self,
        block: &syn::Block,
        ret: Option<Ty>,
        ret_array: Option<(Ty, u32)>,
    ) -> Vec<Stmt> {
        self.device = Some(ret);
        self.device_array = ret_array;
        self.scopes.push(HashMap::new());
        let mut out = Vec::new();
        let n = block.stmts.len();
        for (i, stmt) in block.stmts.iter().enumerate() {
            if let (syn::Stmt::Expr(e, None), Some(want)) = (stmt, ret_array) {
                if i + 1 == n && matches!(e, syn::Expr::Path(_) | syn::Expr::Paren(_)) {
                    out.push(self.array_value(e, want));
                    continue;
                }
            }
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
        let shown = ret
            .map(|t| t.rust().to_string())
            .or(ret_array.map(|(t, n)| array_shown(t, n)));
        if let Some(t) = shown {
            if !definitely_returns(&out) {
                let name = self.kernel_name.clone();
                let value = if ret.is_some() { "v" } else { "a" };
                self.errors.push(syn::Error::new(
                    block.brace_token.span.close(),
                    format!("`{name}` returns `{t}`, but its body can reach its end without a value: end it with an expression (no `;`), or `return {value};` on every path"),
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
        if let Some(want) = self.device_array {
            match &r.expr {
                Some(v) => {
                    let s = self.array_value(v, want);
                    out.push(s);
                }
                None => {
                    self.error(
                        r,
                        format!(
                            "`{name}` returns `{}`: write `return a;` with one of its arrays `a`",
                            array_shown(want.0, want.1)
                        ),
                    );
                    out.push(Stmt::Return);
                }
            }
            return;
        }
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
        let slots = sig.slots();
        if c.args.len() != slots.len() {
            self.error(
                c,
                format!(
                    "`{name}` takes {} argument(s), found {}: `{}`",
                    slots.len(),
                    c.args.len(),
                    sig.shown()
                ),
            );
            return Err(());
        }
        if let Some(why) = sig.writes() {
            if !effect_ok {
                self.error(c, format!("`{name}` writes memory ({why}), so it is called as a statement (`{name}(...);`), as a `let` initializer or as the value assigned to a local: inside a larger expression the order of its writes would differ between targets"));
                return Err(());
            }
        }
        let array_init = std::mem::take(&mut self.array_call_ok);
        if let Some((t, n)) = sig.ret_array {
            if !array_init {
                self.error(c, format!("`{name}` returns an array `{}`, which is not a value of an expression: bind it to a new array, `let r = {name}(...);`", array_shown(t, n)));
                return Err(());
            }
        } else if sig.ret.is_none() && !as_stmt {
            self.error(c, format!("`{name}` returns nothing, so its call is not a value; call it as a statement: `{name}(...);`"));
            return Err(());
        }
        let mut args = Vec::new();
        let mut shared = Vec::new();
        let mut arrays = Vec::new();
        let mut failed = false;
        for (a, slot) in c.args.iter().zip(slots) {
            let p = match slot {
                Slot::Param(j) => &sig.params[j],
                Slot::Shared(j) => {
                    match self.shared_arg(a, &sig.shared[j], name) {
                        Ok(s) => shared.push(CallArg::Shared(s)),
                        Err(()) => failed = true,
                    }
                    continue;
                }
                Slot::Array(j) => {
                    match self.array_arg(a, &sig.arrays[j], name) {
                        Ok(s) => arrays.push(CallArg::Array(s)),
                        Err(()) => failed = true,
                    }
                    continue;
                }
            };
            match p.kind {
                ParamKind::Scalar(t) => match self.expr(a, Some(t)) {
                    Ok(v) if v.ty == t => args.push(CallArg::Value(v)),
                    Ok(v) => {
                        self.error(a, format!("argument `{}` of `{name}` is `{}`, found `{}` (no implicit conversions in kernels: use `as`)", p.name, t.rust(), v.ty.rust()));
                        failed = true;
                    }
                    Err(()) => failed = true,
                },
                ParamKind::Slice {
                    elem,
                    mutable,
                    atomic,
                } => match self.slice_arg(a, p, (elem, mutable, atomic), name) {
                    Ok(s) => args.push(CallArg::Slice(s)),
                    Err(()) => failed = true,
                },
            }
        }
        if failed {
            return Err(());
        }
        if sig.has_barrier {
            self.has_barrier = true;
        }
        if sig.has_subgroup {
            self.uses_subgroups(c);
        }
        args.extend(shared);
        args.extend(arrays);
        Ok(Expr {
            kind: ExprKind::Call(i, args, syn::spanned::Spanned::span(c)),
            ty: sig
                .ret
                .or(sig.ret_array.map(|(t, _)| t))
                .unwrap_or(Ty::Bool),
        })
    }

    /// A workgroup-array argument: a workgroup array of the caller, by name, of the
    /// parameter's element type and length.
    fn shared_arg(&mut self, a: &syn::Expr, p: &SharedParam, callee: &str) -> Res<usize> {
        if self.is_poisoned(a) {
            return Err(());
        }
        let sh = &p.shared;
        let want = format!(
            "&{}[{}; {}]",
            if p.mutable { "mut " } else { "" },
            sh.elem.rust(),
            sh.size
        );
        let name = match a {
            syn::Expr::Path(ep) => ep.path.get_ident().map(|id| id.to_string()),
            _ => None,
        };
        let found = name
            .as_ref()
            .filter(|n| self.lookup(n).is_none())
            .and_then(|n| self.shared_names.get(n).copied());
        let (Some(s), Some(n)) = (found, name) else {
            self.error(a, format!("argument `{}` of `{callee}` is a workgroup array `{want}`: pass a `shared::<{}, {}>()` array (or a workgroup-array parameter) by its name", sh.name, sh.elem.rust(), sh.size));
            return Err(());
        };
        let got = self.shared[s].clone();
        if got.elem != sh.elem || got.size != sh.size {
            self.error(a, format!("argument `{}` of `{callee}` is `{want}`, found `{n}`, a workgroup array of {} `{}`", sh.name, got.size, got.elem.rust()));
            return Err(());
        }
        if p.mutable && self.shared_readonly.contains(&s) {
            self.error(a, format!("argument `{}` of `{callee}` is `{want}`, but `{n}` is read-only here: declare it `&mut [{}; {}]`", sh.name, sh.elem.rust(), sh.size));
            return Err(());
        }
        // A callee's atomic parameter makes its argument atomic (the atomic pre-pass reads
        // the callees' signatures), so only the other way round can mismatch.
        if got.atomic && !sh.atomic {
            self.error(a, format!("`{n}` is used with atomics, so every access to it is atomic, but `{callee}` accesses its `{}` without atomics: use atomics there too, or pass another array", sh.name));
            return Err(());
        }
        Ok(s)
    }

    /// A slice argument: a slice parameter of the caller, by name.
    fn slice_arg(
        &mut self,
        a: &syn::Expr,
        p: &Param,
        (elem, mutable, want_atomic): (Ty, bool, bool),
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
            self.error(a, format!("`{name}` is a workgroup array, but argument `{}` of `{callee}` is a slice `{want}`: declare the parameter `&mut [{}; N]` to take a workgroup array", p.name, elem.rust()));
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
        if atomic && !want_atomic {
            self.error(a, format!("`{name}` is used with atomics, so every access to it is atomic, but `{callee}` accesses its `{}` without atomics: use atomics there too, or pass another slice", p.name));
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
