//! `mma_m16n8k16(&a, &b, &mut acc)`: its operands, the workgroup it needs (its meaning:
//! `kernel::mma`; where it may stand: `kernel::uniformity`).

use syn::spanned::Spanned;

use super::*;
use crate::kernel::mma::{Mma, ACC_LEN, A_LEN, B_LEN, GROUP, NAME};

const USAGE: &str = "`mma_m16n8k16(&a, &b, &mut acc)` takes three per-invocation arrays: `a: [bf16; 8]` and `b: [bf16; 4]` (or both `f16`), and `acc: [f32; 4]`, declared e.g. `let mut acc = [0.0f32; 4];`";

/// Which operand of the call an argument is.
#[derive(Clone, Copy)]
enum Operand {
    A,
    B,
    Acc,
}

impl Operand {
    fn name(self) -> &'static str {
        match self {
            Operand::A => "a",
            Operand::B => "b",
            Operand::Acc => "acc",
        }
    }
    fn len(self) -> u32 {
        match self {
            Operand::A => A_LEN,
            Operand::B => B_LEN,
            Operand::Acc => ACC_LEN,
        }
    }
}

impl Checker<'_> {
    /// Lowers the statement `mma_m16n8k16(&a, &b, &mut acc)`.
    pub(super) fn mma(&mut self, c: &syn::ExprCall, out: &mut Vec<Stmt>) {
        if !self.group_call(c, NAME) {
            return;
        }
        if c.args.len() != 3 {
            self.error(c, USAGE);
            return;
        }
        let a = self.mma_operand(&c.args[0], Operand::A);
        let b = self.mma_operand(&c.args[1], Operand::B);
        let acc = self.mma_operand(&c.args[2], Operand::Acc);
        let (Some((a, ta)), Some((b, tb)), Some((acc, _))) = (a, b, acc) else {
            return;
        };
        if ta != tb {
            self.error(
                &c.args[1],
                format!(
                    "`a` holds `{}` and `b` `{}`: both fragments of `{NAME}` are `bf16` or both `f16`",
                    ta.rust(),
                    tb.rust()
                ),
            );
            return;
        }
        out.push(Stmt::Mma(Mma {
            a,
            b,
            acc,
            elem: ta,
            span: c.span(),
        }));
    }

    /// Checks where a builtin of an MMA group (`name`: `mma_m16n8k16`, `ldmatrix_x4`) stands:
    /// in a kernel's body (false, with the error, in a `#[device]` function), whose
    /// workgroup is one-dimensional, a multiple of 32. Its portable form synchronises the
    /// workgroup, which `kernel::uniformity` then checks.
    pub(super) fn group_call(&mut self, c: &syn::ExprCall, name: &str) -> bool {
        if self.device.is_some() {
            self.error(c, format!("`{name}` is not available in a `#[device]` function: its 32 invocations must reach it together, which only the kernel's body can show; call it in the kernel"));
            return false;
        }
        let [x, y, z] = self.known.workgroup;
        let n = x * y * z;
        if y != 1 || z != 1 {
            self.error(c, format!("a kernel using `{name}` has a one-dimensional workgroup (its MMA groups are runs of {GROUP} invocations by `local_id().x`), but this one is ({x}, {y}, {z}): declare `#[kernel(workgroup = {n})]` and compute the coordinates from `local_id().x`"));
        } else if n % GROUP != 0 {
            self.error(c, format!("a kernel using `{name}` needs a workgroup of a multiple of {GROUP} invocations (each MMA group is {GROUP} invocations), but this one has {n}: declare e.g. `#[kernel(workgroup = {})]`", n.div_ceil(GROUP).max(1) * GROUP));
        }
        self.has_barrier = true;
        true
    }

    /// An operand `&x` (`&mut x` for `acc`): the array and its element type.
    fn mma_operand(&mut self, e: &syn::Expr, which: Operand) -> Option<(usize, Ty)> {
        if self.is_poisoned(e) {
            return None;
        }
        let (name, len) = (which.name(), which.len());
        let want_mut = matches!(which, Operand::Acc);
        let want = if want_mut {
            format!("`[f32; {len}]`")
        } else {
            format!("`[bf16; {len}]` or `[f16; {len}]`")
        };
        let syn::Expr::Reference(r) = e else {
            let amp = if want_mut { "&mut " } else { "&" };
            self.error(e, format!("`{name}` of `{NAME}` is passed by reference to a per-invocation array: `{amp}{}` ({USAGE})", crate::tokens::shown(e)));
            return None;
        };
        if self.is_poisoned(&r.expr) {
            return None;
        }
        if want_mut != r.mutability.is_some() {
            let msg = if want_mut {
                format!(
                    "`acc` of `{NAME}` is written: pass it as `&mut {}`",
                    crate::tokens::shown(&r.expr)
                )
            } else {
                format!(
                    "`{name}` of `{NAME}` is only read: pass it as `&{}`",
                    crate::tokens::shown(&r.expr)
                )
            };
            self.error(e, msg);
            return None;
        }
        let Some(arr) = self.array_of(&r.expr) else {
            self.error(
                &r.expr,
                format!("`{name}` of `{NAME}` is a per-invocation array, {want} ({USAGE})"),
            );
            return None;
        };
        let (elem, got, source) = {
            let a = &self.arrays[arr];
            (a.elem, a.len, a.source.clone())
        };
        let elem_ok = if want_mut {
            elem == Ty::F32
        } else {
            elem.is_half()
        };
        if !elem_ok || got != len {
            self.error(
                &r.expr,
                format!(
                    "`{name}` of `{NAME}` is {want}, but `{source}` is `[{}; {got}]`",
                    elem.rust()
                ),
            );
            return None;
        }
        if want_mut && !self.array_is_mutable(&r.expr) {
            self.error(
                &r.expr,
                format!("`{source}` is written by `{NAME}`: declare it `let mut {source} = ...`"),
            );
            return None;
        }
        Some((arr, elem))
    }

    /// Whether the local array `e` names was declared `let mut`.
    pub(super) fn array_is_mutable(&self, e: &syn::Expr) -> bool {
        let syn::Expr::Path(p) = e else {
            return false;
        };
        p.path
            .get_ident()
            .and_then(|id| self.lookup(&id.to_string()))
            .is_some_and(|l| l.mutable)
    }
}
