//! Atomic read-modify-write calls on `&mut [T]` parameters.



use super::*;

impl Checker<'_> {
    /// Recognises `atomic_*(buf, index, ...)`; `None` when `e` is not an atomic call.
    pub(super) fn try_atomic(&mut self, e: &syn::Expr, _result: Option<&str>) -> Option<Res<(Stmt, Ty)>> {
        let syn::Expr::Call(call) = e else {
            return None;
        };
        let syn::Expr::Path(p) = &*call.func else {
            return None;
        };
        let name = p.path.get_ident()?.to_string();
        let op = AtomicOp::from_name(&name)?;
        if self.device.is_some() {
            self.error(call, format!("atomics are not supported in a `#[device]` function yet: do the `{name}` in the kernel (a helper can compute the index and the value)"));
            return Some(Err(()));
        }
        Some(self.atomic(call, op, &name))
    }

    pub(super) fn atomic(&mut self, call: &syn::ExprCall, op: AtomicOp, name: &str) -> Res<(Stmt, Ty)> {
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
}
