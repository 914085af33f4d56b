//! `ldmatrix_x4(s, p, &mut w)`: its operands, the workgroup it needs, the row it reads
//! (its meaning: `kernel::ldmatrix`; where it may stand: `kernel::uniformity`).

use syn::spanned::Spanned;

use super::*;
use crate::kernel::ldmatrix::{Ldmatrix, MATRICES, NAME, NAME_TRANS, ROW};

/// How to call `name` (`ldmatrix_x4` or `ldmatrix_x4_trans`).
fn usage(name: &str) -> String {
    format!("`{name}(s, p, &mut w)` reads four 8×8 matrices of 16-bit values from the workgroup array `s` of `u32` words (`let s = shared::<u32, 2048>();`, a row of 8 values = 4 words), `p` (`u32`) the word where this invocation's row starts, into `w: [u32; 4]` (`let mut w = [0u32; 4];`)")
}

impl Checker<'_> {
    /// Lowers the statement `ldmatrix_x4(s, p, &mut w)` (`trans`: `ldmatrix_x4_trans`).
    pub(super) fn ldmatrix(&mut self, c: &syn::ExprCall, trans: bool, out: &mut Vec<Stmt>) {
        let name = if trans { NAME_TRANS } else { NAME };
        if !self.group_call(c, name) {
            return;
        }
        if c.args.len() != 3 {
            self.error(c, usage(name));
            return;
        }
        let s = self.ldmatrix_source(&c.args[0], name);
        let p = self.index_expr(&c.args[1]);
        let w = self.ldmatrix_target(&c.args[2], name);
        let (Some(s), Ok(p), Some(w)) = (s, p, w) else {
            return;
        };
        let size = self.shared[s].size;
        // `min(p - p % 4, N - 4)`: the row aligned down to 16 bytes, inside the array.
        let u = |kind: ExprKind| Expr { kind, ty: Ty::U32 };
        if let Some(ExprKind::LitU32(v)) = fold(&p) {
            out.push(Stmt::Ldmatrix(Ldmatrix {
                shared: s,
                row: u(ExprKind::LitU32((v & !(ROW - 1)).min(size - ROW))),
                w,
                trans,
                span: c.span(),
            }));
            return;
        }
        let aligned = u(ExprKind::Binary(
            BinOp::BitAnd,
            Box::new(p),
            Box::new(u(ExprKind::LitU32(!(ROW - 1)))),
        ));
        let row = u(ExprKind::Math(
            MathFn::Min,
            vec![aligned, u(ExprKind::LitU32(size - ROW))],
        ));
        out.push(Stmt::Ldmatrix(Ldmatrix {
            shared: s,
            row,
            w,
            trans,
            span: c.span(),
        }));
    }

    /// `s` of `ldmatrix_x4`: a workgroup array of `u32` of at least one row, not atomic.
    fn ldmatrix_source(&mut self, e: &syn::Expr, name: &str) -> Option<usize> {
        if self.is_poisoned(e) {
            return None;
        }
        let shown = crate::tokens::shown(e);
        let Some(s) = self
            .outer_name(e)
            .and_then(|n| self.shared_names.get(&n).copied())
        else {
            self.error(e, format!("the first argument of `{name}` is the workgroup array it reads, but `{shown}` is not one ({})", usage(name)));
            return None;
        };
        let (elem, size) = (self.shared[s].elem, self.shared[s].size);
        if elem != Ty::U32 {
            self.error(e, format!("`{name}` reads 16-bit values in pairs from a workgroup array of `u32` words, but `{shown}` holds `{}`", elem.rust()));
            return None;
        }
        if size < ROW {
            self.error(
                e,
                format!("`{name}` reads rows of {ROW} words, but `{shown}` holds {size}"),
            );
            return None;
        }
        if self.shared[s].atomic || self.atomic_names.contains(&self.shared[s].name) {
            self.error(e, format!("`{shown}` is used with atomics, so every access to it is atomic; `{name}` reads it with plain loads: read from another workgroup array"));
            return None;
        }
        Some(s)
    }

    /// `&mut w` of `ldmatrix_x4`: a mutable per-invocation `[u32; 4]`.
    fn ldmatrix_target(&mut self, e: &syn::Expr, name: &str) -> Option<usize> {
        if self.is_poisoned(e) {
            return None;
        }
        let syn::Expr::Reference(r) = e else {
            self.error(
                e,
                format!(
                    "`w` of `{name}` is written: pass it as `&mut {}` ({})",
                    crate::tokens::shown(e),
                    usage(name)
                ),
            );
            return None;
        };
        if self.is_poisoned(&r.expr) {
            return None;
        }
        let shown = crate::tokens::shown(&r.expr);
        if r.mutability.is_none() {
            self.error(
                e,
                format!("`w` of `{name}` is written: pass it as `&mut {shown}`"),
            );
            return None;
        }
        let Some(arr) = self.array_of(&r.expr) else {
            self.error(
                &r.expr,
                format!(
                    "`w` of `{name}` is a per-invocation array `[u32; {MATRICES}]` ({})",
                    usage(name)
                ),
            );
            return None;
        };
        let (elem, len) = (self.arrays[arr].elem, self.arrays[arr].len);
        if elem != Ty::U32 || len != MATRICES {
            self.error(
                &r.expr,
                format!(
                    "`w` of `{name}` is `[u32; {MATRICES}]`, but `{shown}` is `[{}; {len}]`",
                    elem.rust()
                ),
            );
            return None;
        }
        if !self.array_is_mutable(&r.expr) {
            self.error(
                &r.expr,
                format!("`{shown}` is written by `{name}`: declare it `let mut {shown} = ...`"),
            );
            return None;
        }
        Some(arr)
    }
}
