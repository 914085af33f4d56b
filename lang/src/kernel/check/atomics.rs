//! Atomic read-modify-write calls on `&mut [T]` parameters and `shared::<u32|i32, N>()`
//! workgroup arrays.

use super::*;

impl Checker<'_> {
    /// Recognises `atomic_*(buf, index, ...)`; `None` when `e` is not an atomic call.
    pub(super) fn try_atomic(
        &mut self,
        e: &syn::Expr,
        _result: Option<&str>,
    ) -> Option<Res<(Stmt, Ty)>> {
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

    pub(super) fn atomic(
        &mut self,
        call: &syn::ExprCall,
        op: AtomicOp,
        name: &str,
    ) -> Res<(Stmt, Ty)> {
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
        let usage = "the first argument of an atomic is a `&mut [u32]` or `&mut [i32]` parameter of the kernel, or a `shared::<u32, N>()` / `shared::<i32, N>()` workgroup array";
        let name_of = match buf {
            syn::Expr::Path(p) => p.path.get_ident().map(|id| id.to_string()),
            _ => None,
        };
        let shared = name_of
            .as_ref()
            .filter(|n| self.lookup(n).is_none())
            .and_then(|n| self.shared_names.get(n).copied());
        let (target, elem) = if let Some(s) = shared {
            let elem = self.shared[s].elem;
            if !elem.is_int() {
                self.error(
                    buf,
                    format!(
                        "atomics act on `u32` or `i32`; this workgroup array holds `{}`",
                        elem.rust()
                    ),
                );
                return Err(());
            }
            if self.shared_readonly.contains(&s) {
                let n = &self.shared[s].name;
                self.error(buf, format!("`{n}` is read-only here (`&[{0}; {1}]`): an atomic writes it, so declare it `&mut [{0}; {1}]`", elem.rust(), self.shared[s].size));
                return Err(());
            }
            (AtomicTarget::Shared(s), elem)
        } else {
            let pidx = name_of.and_then(|n| self.param_index(&n));
            let Some(pidx) = pidx else {
                self.error(buf, usage);
                return Err(());
            };
            let ParamKind::Slice { elem, .. } = self.params[pidx].kind else {
                self.error(buf, usage);
                return Err(());
            };
            (AtomicTarget::Param(pidx), elem)
        };
        let index = self.index_expr(&call.args[1])?;
        if let AtomicTarget::Shared(s) = target {
            self.shared_index_in_bounds(s, &index, &call.args[1])?;
        }
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
                target,
                index,
                operands,
                ty: elem,
            },
            elem,
        ))
    }
}

impl Checker<'_> {
    /// Rejects a plain access to a workgroup array used atomically (its every access is
    /// atomic, as for slices: WGSL types it `array<atomic<T>, N>`).
    pub(super) fn shared_atomic_plain(
        &mut self,
        s: usize,
        ix: &syn::ExprIndex,
        write: bool,
    ) -> Res<()> {
        if !self.shared[s].atomic {
            return Ok(());
        }
        let n = crate::tokens::shown(&ix.expr);
        let instead = if write {
            format!("atomic_store({n}, i, v);")
        } else {
            format!("let v = atomic_load({n}, i);")
        };
        self.error(
            ix,
            format!(
                "`{n}` is used with atomics, so every access to it is atomic: write `{instead}`"
            ),
        );
        Err(())
    }
}
