//! `copy_async(dst, d, src, s, n)`, `copy_async_commit()` and `copy_async_wait(k)`: their
//! operands, lowered to the portable form every target can run (meaning and targets:
//! `kernel::copy_async`).

use super::*;
use crate::kernel::copy_async::{CopyAsync, CopyFence, CHUNK, COMMIT, NAME, WAIT, WAIT_MAX};

const USAGE: &str = "`copy_async(dst, d, src, s, n)` copies `src[s .. s + n]` (at most 4 elements; zeros past `n` or past the end of `src`) into `dst[d .. d + 4]`: `dst` a workgroup array (`let dst = shared::<u32, 1024>();`) and `src` a slice parameter, both of `u32`, `i32` or `f32`, and `d`, `s`, `n` of type `u32`";

impl Checker<'_> {
    /// Lowers the statement `copy_async(dst, d, src, s, n)`.
    pub(super) fn copy_async(&mut self, c: &syn::ExprCall, out: &mut Vec<Stmt>) {
        if c.args.len() != 5 {
            self.error(c, USAGE);
            return;
        }
        let dst = self.copy_target(&c.args[0], true);
        let src = self.copy_target(&c.args[2], false);
        let d = self.index_expr(&c.args[1]);
        let s = self.index_expr(&c.args[3]);
        let n = self.index_expr(&c.args[4]);
        let (Some((sh, de)), Some((src, se)), Ok(d), Ok(s), Ok(n)) = (dst, src, d, s, n) else {
            return;
        };
        if de != se {
            self.error(
                &c.args[2],
                format!(
                    "`{NAME}` copies between arrays of one type, but `{}` holds `{}` and `{}` holds `{}`",
                    crate::tokens::shown(&c.args[0]),
                    de.rust(),
                    crate::tokens::shown(&c.args[2]),
                    se.rust()
                ),
            );
            return;
        }
        let size = self.shared[sh].size;
        if size < CHUNK {
            self.error(
                &c.args[0],
                format!(
                    "`{NAME}` writes {CHUNK} elements, but `{}` holds {size}",
                    crate::tokens::shown(&c.args[0])
                ),
            );
            return;
        }
        if let Some(ExprKind::LitU32(v)) = fold(&d) {
            if u64::from(v) + u64::from(CHUNK) > u64::from(size) {
                self.error(
                    &c.args[1],
                    format!(
                        "`{NAME}` writes `{}[{v} .. {}]`, past its {size} elements",
                        crate::tokens::shown(&c.args[0]),
                        u64::from(v) + u64::from(CHUNK)
                    ),
                );
                return;
            }
        }
        let u = |kind: ExprKind| Expr { kind, ty: Ty::U32 };
        let local = |name: &str| u(ExprKind::Local(name.to_string()));
        let bin = |op: BinOp, a: Expr, b: Expr, ty: Ty| Expr {
            kind: ExprKind::Binary(op, Box::new(a), Box::new(b)),
            ty,
        };
        let min = |a: Expr, b: Expr| u(ExprKind::Math(MathFn::Min, vec![a, b]));
        let (dn, sn, nn) = (
            self.mangle("gd_cpd"),
            self.mangle("gd_cps"),
            self.mangle("gd_cpn"),
        );
        // `n` clamped to the chunk and to what `src` holds from `s` on.
        let len = u(ExprKind::Len(src));
        let take = u(ExprKind::Cond(
            Box::new(bin(BinOp::Lt, local(&sn), len.clone(), Ty::Bool)),
            Box::new(min(
                min(n, u(ExprKind::LitU32(CHUNK))),
                bin(BinOp::Sub, len, local(&sn), Ty::U32),
            )),
            Box::new(u(ExprKind::LitU32(0))),
        ));
        let let_ = |name: &str, init: Expr| Stmt::Let {
            name: name.to_string(),
            ty: Ty::U32,
            mutable: false,
            init: Some(init),
        };
        let setup = vec![let_(&dn, d), let_(&sn, s), let_(&nn, take)];
        let at = |base: &str, e: u32| match e {
            0 => local(base),
            _ => bin(BinOp::Add, local(base), u(ExprKind::LitU32(e)), Ty::U32),
        };
        let zero = match de {
            Ty::F32 => ExprKind::LitF32(0.0),
            Ty::I32 => ExprKind::LitI32(0),
            _ => ExprKind::LitU32(0),
        };
        let copy = (0..CHUNK)
            .map(|e| Stmt::Assign {
                place: Place::Shared(sh, Box::new(at(&dn, e))),
                op: None,
                value: Expr {
                    kind: ExprKind::Cond(
                        Box::new(bin(BinOp::Lt, u(ExprKind::LitU32(e)), local(&nn), Ty::Bool)),
                        Box::new(Expr {
                            kind: ExprKind::Load(Place::Param(src, Box::new(at(&sn, e)))),
                            ty: de,
                        }),
                        Box::new(Expr {
                            kind: zero.clone(),
                            ty: de,
                        }),
                    ),
                    ty: de,
                },
                ty: de,
            })
            .collect();
        out.push(Stmt::CopyAsync(CopyAsync {
            shared: sh,
            src,
            elem: de,
            setup,
            d: dn,
            s: sn,
            n: nn,
            copy,
        }));
    }

    /// `dst` (`write`: a workgroup array this body may write, not used with atomics; in a
    /// `#[device]` helper, a `&mut [T; N]` parameter) or `src` (a slice parameter) of
    /// `copy_async`, and its element type (32 bits).
    fn copy_target(&mut self, e: &syn::Expr, write: bool) -> Option<(usize, Ty)> {
        if self.is_poisoned(e) {
            return None;
        }
        let shown = crate::tokens::shown(e);
        let name = self.outer_name(e);
        let shared = name
            .as_ref()
            .and_then(|n| self.shared_names.get(n).copied());
        let param = name
            .as_ref()
            .and_then(|n| self.param_index(n))
            .filter(|&i| matches!(self.params[i].kind, ParamKind::Slice { .. }));
        let (i, elem) = match (write, shared, param) {
            (true, Some(s), _) => {
                if self.shared_readonly.contains(&s) {
                    self.error(
                        e,
                        format!("`{shown}` is read-only here: `{NAME}` writes it"),
                    );
                    return None;
                }
                if self.shared[s].atomic || self.atomic_names.contains(&self.shared[s].name) {
                    self.error(e, format!("`{shown}` is used with atomics, so every access to it is atomic; `{NAME}` writes it with plain stores: copy into another workgroup array"));
                    return None;
                }
                (s, self.shared[s].elem)
            }
            (false, _, Some(p)) => {
                let ParamKind::Slice { elem, .. } = self.params[p].kind else {
                    unreachable!("filtered to slices")
                };
                (p, elem)
            }
            (true, _, _) => {
                self.error(e, format!("the first argument of `{NAME}` is the workgroup array it writes, but `{shown}` is not one ({USAGE})"));
                return None;
            }
            (false, _, _) => {
                self.error(e, format!("the third argument of `{NAME}` is the slice parameter it reads, but `{shown}` is not one ({USAGE})"));
                return None;
            }
        };
        if !matches!(elem, Ty::U32 | Ty::I32 | Ty::F32) {
            self.error(e, format!("`{NAME}` copies 32-bit elements (`u32`, `i32` or `f32`), but `{shown}` holds `{}`; bind 16-bit data as its words (`&[u32]`)", elem.rust()));
            return None;
        }
        Some((i, elem))
    }

    /// The name `e` is, where it names no local (a parameter or a workgroup array).
    pub(super) fn outer_name(&self, e: &syn::Expr) -> Option<String> {
        let syn::Expr::Path(p) = e else {
            return None;
        };
        let name = p.path.get_ident()?.to_string();
        self.lookup(&name).is_none().then_some(name)
    }

    /// Lowers `copy_async_commit()` (`wait`: false) or `copy_async_wait(k)`.
    pub(super) fn copy_fence(&mut self, c: &syn::ExprCall, wait: bool, out: &mut Vec<Stmt>) {
        if !wait {
            if !c.args.is_empty() {
                self.error(c, format!("`{COMMIT}()` takes no arguments"));
                return;
            }
            out.push(Stmt::CopyFence(CopyFence::Commit));
            return;
        }
        let usage = format!("`{WAIT}(k)` takes one constant, the groups of copies that may still be in flight (`0` waits for all; at most {WAIT_MAX})");
        if c.args.len() != 1 {
            self.error(c, usage);
            return;
        }
        let saved = self.errors.len();
        let k = self
            .expr(&c.args[0], Some(Ty::U32))
            .ok()
            .and_then(|e| fold(&e));
        self.errors.truncate(saved);
        match k {
            Some(ExprKind::LitU32(k)) if k <= WAIT_MAX => {
                out.push(Stmt::CopyFence(CopyFence::Wait(k)))
            }
            _ => self.error(&c.args[0], usage),
        }
    }
}
