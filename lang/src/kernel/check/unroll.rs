//! Unrolling `for` loops over ranges known at compile time.
//!
//! A loop whose start, end and step are compile-time constants (literals, consts, immutable
//! locals of known value, the workgroup shape), that runs at most `MAX_UNROLL_TRIPS` times
//! and has no `break` or `continue` of its own, is lowered as copies of its body, one per
//! value of the loop variable, each with the variable bound to that value. Indices built from
//! it are then known at compile time, so per-invocation arrays indexed by it stay in
//! registers on every target. The meaning is the loop's: the same values in the same order.

use std::collections::HashMap;

use syn::visit::Visit;

use super::*;

/// Iterations of one loop that are unrolled; longer loops stay loops.
pub(super) const MAX_UNROLL_TRIPS: u64 = 64;

/// Copies of a body through nested unrolled loops (an inner loop is unrolled only while the
/// product of the trip counts stays within it), bounding the emitted code.
pub(super) const MAX_UNROLL_COPIES: u64 = 1024;

impl Checker<'_> {
    /// The loop variable's values when the loop is to be unrolled.
    pub(super) fn unroll_values(
        &self,
        start: &Expr,
        end: &Expr,
        step: Option<&Expr>,
        body: &syn::Block,
    ) -> Option<Vec<i64>> {
        let int = |k: ExprKind| match k {
            ExprKind::LitU32(v) => Some(v as i64),
            ExprKind::LitI32(v) => Some(v as i64),
            _ => None,
        };
        let s = int(const_value(start, &self.known)?)?;
        let e = int(const_value(end, &self.known)?)?;
        let st = match step {
            Some(x) => int(const_value(x, &self.known)?)?,
            None => 1,
        };
        if st < 1 || has_own_exit(body) {
            return None;
        }
        let trips = if e > s {
            ((e - s) as u64).div_ceil(st as u64)
        } else {
            0
        };
        if trips > MAX_UNROLL_TRIPS || trips * self.unroll_factor as u64 > MAX_UNROLL_COPIES {
            return None;
        }
        // In i64 no value overflows: each is below `end`, which fits the loop's type.
        Some((0..trips as i64).map(|k| s + k * st).collect())
    }

    /// The body once per value, each copy in its own scope with the variable bound to it.
    pub(super) fn unrolled(
        &mut self,
        name: &str,
        ty: Ty,
        values: &[i64],
        body: &syn::Block,
    ) -> Vec<Stmt> {
        let mut out = Vec::new();
        let first_error = self.errors.len();
        let factor = self.unroll_factor;
        self.unroll_factor = factor * values.len().max(1) as u32;
        let mut bytes_after_first = None;
        for (k, &v) in values.iter().enumerate() {
            let before = self.errors.len();
            let mangled = self.mangle(name);
            let lit = match ty {
                Ty::U32 => ExprKind::LitU32(v as u32),
                _ => ExprKind::LitI32(v as i32),
            };
            out.push(Stmt::Let {
                name: mangled.clone(),
                ty,
                mutable: false,
                init: Some(Expr {
                    kind: lit.clone(),
                    ty,
                }),
            });
            self.known.locals.insert(mangled.clone(), lit);
            self.scopes.push(HashMap::new());
            self.declare(name, mangled, ty, false);
            out.extend(self.block(body, false));
            self.scopes.pop();
            // Each copy reports only what the copies before it did not (an index out of
            // bounds in one iteration only is reported once, for that index).
            if k > 0 {
                let seen: Vec<String> = self.errors[first_error..before]
                    .iter()
                    .map(|e| e.to_string())
                    .collect();
                let fresh: Vec<syn::Error> = self
                    .errors
                    .drain(before..)
                    .filter(|e| !seen.contains(&e.to_string()))
                    .collect();
                self.errors.extend(fresh);
            }
            // Arrays declared in the body count once, not once per copy.
            match bytes_after_first {
                None => bytes_after_first = Some(self.array_bytes),
                Some(b) => self.array_bytes = b,
            }
        }
        self.unroll_factor = factor;
        out
    }
}

/// Whether `body` has a `break` or `continue` of its own loop (not of a loop nested in it).
fn has_own_exit(body: &syn::Block) -> bool {
    struct Find(bool);
    impl<'ast> Visit<'ast> for Find {
        fn visit_expr_break(&mut self, _: &'ast syn::ExprBreak) {
            self.0 = true;
        }
        fn visit_expr_continue(&mut self, _: &'ast syn::ExprContinue) {
            self.0 = true;
        }
        fn visit_expr_for_loop(&mut self, f: &'ast syn::ExprForLoop) {
            self.visit_expr(&f.expr);
        }
        fn visit_expr_while(&mut self, w: &'ast syn::ExprWhile) {
            self.visit_expr(&w.cond);
        }
        fn visit_expr_loop(&mut self, _: &'ast syn::ExprLoop) {}
        fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {}
    }
    let mut f = Find(false);
    f.visit_block(body);
    f.0
}
