//! Calls: builtins (math, ids, barriers) and methods.

use super::*;

impl Checker<'_> {
    pub(super) fn call(
        &mut self,
        c: &syn::ExprCall,
        expect: Option<Ty>,
        effect_ok: bool,
    ) -> Res<Expr> {
        if let Some(i) = self.helper_index(&c.func) {
            return self.helper_call(i, c, effect_ok);
        }
        let syn::Expr::Path(p) = &*c.func else {
            self.error(&c.func, "only builtin functions can be called in kernels, by name: `sqrt(x)`; closures and function values are not supported");
            return Err(());
        };
        if let Some(t) = from_bits_type(&p.path) {
            return self.value_of_bits(t, c);
        }
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
            if self.device.is_some() {
                self.error(c, format!("`{name}()` is not available in a `#[device]` function (WGSL has the id builtins only on a kernel's entry point): pass the value as a parameter, e.g. `fn f(i: u32, ...)` called as `f(global_id().x, ...)`"));
                return Err(());
            }
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
        if let Some(op) = SubgroupOp::from_name(&name) {
            return self.subgroup(op, c, expect);
        }
        match name.as_str() {
            "barrier" => self.error(c, "`barrier()` is a statement: write `barrier();`"),
            "device_fence" => self.error(c, "`device_fence()` is a statement: write `device_fence();`"),
            crate::kernel::mma::NAME => self.error(c, "`mma_m16n8k16(&a, &b, &mut acc)` is a statement: it returns nothing and accumulates into `acc`"),
            crate::kernel::ldmatrix::NAME | crate::kernel::ldmatrix::NAME_TRANS => self.error(c, format!("`{name}(s, p, &mut w)` is a statement: it returns nothing and writes its four words into `w`")),
            crate::kernel::copy_async::NAME | crate::kernel::copy_async::COMMIT | crate::kernel::copy_async::WAIT => self.error(c, format!("`{name}(...)` is a statement: it returns nothing; write `{name}(...);`")),
            "shared" => self.error(c, "workgroup memory is declared at the top of the kernel: `let tile = shared::<f32, 256>();`"),
            n if AtomicOp::from_name(n).is_some() => self.error(c, "an atomic is a statement or a `let` initializer: `let old = atomic_add(y, i, 1u32);`"),
            n if self.lookup(n).is_some() || self.param_index(n).is_some() => self.error(&c.func, format!("`{n}` is not a function")),
            n if n == self.kernel_name && self.device.is_some() => self.error(&c.func, format!("a `#[device]` function cannot call itself: GPUs have no recursion (WGSL forbids it); rewrite `{n}` with a loop")),
            n if n == self.kernel_name => self.error(&c.func, format!("a kernel cannot call itself: GPUs have no recursion; rewrite `{n}` with a loop, or launch it again from the host")),
            _ => {
                let hint = crate::suggest::hint(&name, crate::suggest::BUILTIN_FNS.iter().copied());
                self.error(&c.func, format!("unknown function `{name}`{hint}; kernels call builtins (math functions, id builtins, atomics, `barrier()`) and `#[device]` functions; a `#[device]` function whose name is this close to a builtin's is called by a path: `self::{name}(...)`"))
            }
        }
        Err(())
    }

    pub(super) fn math(
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
        if f.float_only() && !ty.is_float() {
            self.error(
                node,
                format!(
                    "`{name}` is defined on floats (`f32`, `f16`, `bf16`), found `{}`",
                    ty.rust()
                ),
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

    /// Arguments that must all share one type (unsuffixed literals adapt to the first typed one).
    pub(super) fn value_args(&mut self, args: &[&syn::Expr], expect: Option<Ty>) -> Res<Vec<Expr>> {
        let anchor = args
            .iter()
            .position(|a| !is_untyped_lit(a) && !super::expr::is_float_lit(a));
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

    pub(super) fn method(&mut self, m: &syn::ExprMethodCall, expect: Option<Ty>) -> Res<Expr> {
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
            if let Some(a) = self.array_of(&m.receiver) {
                return Ok(Expr {
                    kind: ExprKind::LitU32(self.arrays[a].len),
                    ty: Ty::U32,
                });
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
                "`len()` applies to a slice parameter, a workgroup array or a per-invocation array",
            );
            return Err(());
        }
        if name == "to_bits" {
            return self.bits_of(m);
        }
        if let Some(f) = MathFn::from_name(&name).filter(|f| *f != MathFn::Select) {
            let mut args: Vec<&syn::Expr> = vec![&m.receiver];
            args.extend(m.args.iter());
            return self.math(f, &name, &args, m, expect);
        }
        let hint = crate::suggest::hint(&name, crate::suggest::METHODS.iter().copied());
        self.error(&m.method, format!("method `{name}` is not supported in kernels{hint}; the builtins are `len()`, `to_bits()` (of `f16`, `bf16`) and the math functions (`sqrt`, `min`, `max`, …)"));
        Err(())
    }
}

/// `f16` or `bf16` for a path `f16::from_bits` / `bf16::from_bits`.
fn from_bits_type(p: &syn::Path) -> Option<Ty> {
    let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
    match (segs.len(), segs.first().map(String::as_str), segs.last()) {
        (2, Some("f16"), Some(l)) if l == "from_bits" => Some(Ty::F16),
        (2, Some("bf16"), Some(l)) if l == "from_bits" => Some(Ty::BF16),
        _ => None,
    }
}

impl Checker<'_> {
    /// `x.to_bits()` of an `f16` or `bf16`: its 16 bits as a `u32` (zero-extended; Rust's
    /// gives a `u16`, which the language lacks).
    fn bits_of(&mut self, m: &syn::ExprMethodCall) -> Res<Expr> {
        if !m.args.is_empty() {
            self.error(m, "`to_bits()` takes no arguments");
            return Err(());
        }
        let x = self.expr(&m.receiver, None)?;
        if !x.ty.is_half() {
            self.error(
                &m.receiver,
                format!(
                    "`to_bits()` applies to an `f16` or `bf16` value (its 16 bits as a `u32`), but this is `{}`",
                    x.ty.rust()
                ),
            );
            return Err(());
        }
        Ok(Expr {
            kind: ExprKind::Bits(Box::new(x), Ty::U32),
            ty: Ty::U32,
        })
    }

    /// `f16::from_bits(w)` / `bf16::from_bits(w)` of a `u32`: the value whose bits are the low
    /// 16 bits of `w` (the high 16 are ignored).
    fn value_of_bits(&mut self, t: Ty, c: &syn::ExprCall) -> Res<Expr> {
        let n = t.rust();
        if c.args.len() != 1 {
            self.error(c, format!("`{n}::from_bits(w)` takes one `u32`"));
            return Err(());
        }
        let w = self.expr(&c.args[0], Some(Ty::U32))?;
        if w.ty != Ty::U32 {
            self.error(
                &c.args[0],
                format!(
                    "`{n}::from_bits(w)` takes a `u32` (its low 16 bits are the value's), but this is `{}`",
                    w.ty.rust()
                ),
            );
            return Err(());
        }
        Ok(Expr {
            kind: ExprKind::Bits(Box::new(w), t),
            ty: t,
        })
    }
}

pub(super) fn is_path_call(c: &syn::ExprCall, name: &str) -> bool {
    matches!(&*c.func, syn::Expr::Path(p) if p.path.is_ident(name))
}
