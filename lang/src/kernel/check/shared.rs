//! Workgroup memory: `shared::<T, N>()` declarations and their constant-index bounds checks.

use super::*;

impl Checker<'_> {
    /// `shared::<f32, 256>()` → (elem, size).
    pub(super) fn shared_decl(&mut self, e: &syn::Expr) -> Option<(Ty, u32)> {
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
        if elem.is_half() {
            self.error(
                &args.args[0],
                super::half::no_half("workgroup arrays", elem),
            );
            // Its element type, so its uses add no errors (nothing is emitted).
            return Some((elem, 1));
        }
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

    /// Rejects an index into workgroup memory that is known at compile time to be out of
    /// bounds (every invocation would fail; WGSL compilers reject it too).
    pub(super) fn shared_index_in_bounds(
        &mut self,
        s: usize,
        index: &Expr,
        node: &syn::Expr,
    ) -> Res<()> {
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
}
