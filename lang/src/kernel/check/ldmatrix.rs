//! `ldmatrix_x4(s, p, &mut w)`: its operands, the workgroup it needs, the row it reads
//! (its meaning: `kernel::ldmatrix`; where it may stand: `kernel::uniformity`).

use syn::spanned::Spanned;

use super::*;
use crate::kernel::ldmatrix::{Ldmatrix, MATRICES, NAME, ROW};

const USAGE: &str = "`ldmatrix_x4(s, p, &mut w)` reads four 8×8 matrices of 16-bit values from the workgroup array `s` of `u32` words (`let s = shared::<u32, 2048>();`, a row of 8 values = 4 words), `p` (`u32`) the word where this invocation's row starts, into `w: [u32; 4]` (`let mut w = [0u32; 4];`)";

impl Checker<'_> {
    /// Lowers the statement `ldmatrix_x4(s, p, &mut w)`.
    pub(super) fn ldmatrix(&mut self, c: &syn::ExprCall, out: &mut Vec<Stmt>) {
        if !self.group_call(c, NAME) {
            return;
        }
        if c.args.len() != 3 {
            self.error(c, USAGE);
            return;
        }
        let s = self.ldmatrix_source(&c.args[0]);
        let p = self.index_expr(&c.args[1]);
        let w = self.ldmatrix_target(&c.args[2]);
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
            span: c.span(),
        }));
    }

    /// `s` of `ldmatrix_x4`: a workgroup array of `u32` of at least one row, not atomic.
    fn ldmatrix_source(&mut self, e: &syn::Expr) -> Option<usize> {
        if self.is_poisoned(e) {
            return None;
        }
        let shown = crate::tokens::shown(e);
        let Some(s) = self
            .outer_name(e)
            .and_then(|n| self.shared_names.get(&n).copied())
        else {
            self.error(e, format!("the first argument of `{NAME}` is the workgroup array it reads, but `{shown}` is not one ({USAGE})"));
            return None;
        };
        let (elem, size) = (self.shared[s].elem, self.shared[s].size);
        if elem != Ty::U32 {
            self.error(e, format!("`{NAME}` reads 16-bit values in pairs from a workgroup array of `u32` words, but `{shown}` holds `{}`", elem.rust()));
            return None;
        }
        if size < ROW {
            self.error(
                e,
                format!("`{NAME}` reads rows of {ROW} words, but `{shown}` holds {size}"),
            );
            return None;
        }
        if self.shared[s].atomic || self.atomic_names.contains(&self.shared[s].name) {
            self.error(e, format!("`{shown}` is used with atomics, so every access to it is atomic; `{NAME}` reads it with plain loads: read from another workgroup array"));
            return None;
        }
        Some(s)
    }

    /// `&mut w` of `ldmatrix_x4`: a mutable per-invocation `[u32; 4]`.
    fn ldmatrix_target(&mut self, e: &syn::Expr) -> Option<usize> {
        if self.is_poisoned(e) {
            return None;
        }
        let syn::Expr::Reference(r) = e else {
            self.error(
                e,
                format!(
                    "`w` of `{NAME}` is written: pass it as `&mut {}` ({USAGE})",
                    crate::tokens::shown(e)
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
                format!("`w` of `{NAME}` is written: pass it as `&mut {shown}`"),
            );
            return None;
        }
        let Some(arr) = self.array_of(&r.expr) else {
            self.error(
                &r.expr,
                format!("`w` of `{NAME}` is a per-invocation array `[u32; {MATRICES}]` ({USAGE})"),
            );
            return None;
        };
        let (elem, len) = (self.arrays[arr].elem, self.arrays[arr].len);
        if elem != Ty::U32 || len != MATRICES {
            self.error(
                &r.expr,
                format!(
                    "`w` of `{NAME}` is `[u32; {MATRICES}]`, but `{shown}` is `[{}; {len}]`",
                    elem.rust()
                ),
            );
            return None;
        }
        if !self.array_is_mutable(&r.expr) {
            self.error(
                &r.expr,
                format!("`{shown}` is written by `{NAME}`: declare it `let mut {shown} = ...`"),
            );
            return None;
        }
        Some(arr)
    }
}
