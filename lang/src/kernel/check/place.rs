//! Places: what can be indexed, written and assigned.

use super::*;

impl Checker<'_> {
    pub(super) fn index_expr(&mut self, e: &syn::Expr) -> Res<Expr> {
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
    pub(super) fn place(&mut self, e: &syn::Expr) -> Res<(Place, Ty)> {
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
                    if l.array.is_some() {
                        self.error(e, format!("cannot assign to the array `{name}` as a whole; assign its elements: `{name}[i] = ...;`"));
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
                        if !writable {
                            let (n, sh) = (crate::tokens::shown(&ix.expr), &self.shared[s]);
                            let (t, len) = (sh.elem.rust(), sh.size);
                            self.error(&ix.expr, format!("cannot write to `{n}`: it is a read-only `&[{t}; {len}]`; declare it `&mut [{t}; {len}]`"));
                            return Err(());
                        }
                        self.shared_atomic_plain(s, ix, true)?;
                        self.shared_index_in_bounds(s, &index, &ix.index)?;
                        Ok((Place::Shared(s, Box::new(index)), ty))
                    }
                    Target::Array(a) => {
                        if !writable {
                            let n = crate::tokens::shown(&ix.expr);
                            let arr = &self.arrays[a];
                            let msg = if self.array_params.contains(&a) {
                                format!("cannot write to `{n}`: the parameter is not `mut`; declare it `mut {n}: [{}; {}]` to write the helper's copy", arr.elem.rust(), arr.len)
                            } else {
                                format!("cannot write to `{n}`: it is not `mut` (declare it with `let mut {n} = [...];`)")
                            };
                            self.error(&ix.expr, msg);
                            return Err(());
                        }
                        let index = self.array_index(a, index, &ix.index)?;
                        Ok((Place::Array(a, Box::new(index)), ty))
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

    pub(super) fn index_target(&mut self, base: &syn::Expr) -> Res<(Target, Ty, bool)> {
        if self.is_poisoned(base) {
            return Err(());
        }
        if let Some(a) = self.array_of(base) {
            let mutable = match base {
                syn::Expr::Path(p) => p
                    .path
                    .get_ident()
                    .and_then(|id| self.lookup(&id.to_string()))
                    .is_some_and(|l| l.mutable),
                _ => false,
            };
            return Ok((Target::Array(a), self.arrays[a].elem, mutable));
        }
        if let syn::Expr::Path(p) = base {
            if let Some(id) = p.path.get_ident() {
                let name = id.to_string();
                if self.lookup(&name).is_none() {
                    if let Some(&s) = self.shared_names.get(&name) {
                        let mutable = !self.shared_readonly.contains(&s);
                        return Ok((Target::Shared(s), self.shared[s].elem, mutable));
                    }
                    if let Some(pi) = self.param_index(&name) {
                        if let ParamKind::Slice { elem, mutable, .. } = self.params[pi].kind {
                            return Ok((Target::Param(pi), elem, mutable));
                        }
                    }
                }
            }
        }
        if matches!(base, syn::Expr::Array(_) | syn::Expr::Repeat(_)) {
            // Reported there: "an array value only initialises a `let`".
            let _ = self.expr(base, None);
            return Err(());
        }
        self.error(
            base,
            "only slice parameters, workgroup arrays and per-invocation arrays can be indexed",
        );
        Err(())
    }
}

pub(super) enum Target {
    Param(usize),
    Shared(usize),
    Array(usize),
}
