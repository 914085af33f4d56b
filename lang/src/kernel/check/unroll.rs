//! Unrolling `for` loops over ranges known at compile time.
//!
//! A loop whose start, end and step are compile-time constants (literals, consts, immutable
//! locals of known value, the workgroup shape), that runs at most `MAX_UNROLL_TRIPS` times
//! and has no `break` or `continue` of its own, is *constant*. When its variable reaches the
//! index of a per-invocation array (or the range of a nested loop), it is lowered as copies
//! of its body, one per value of the loop variable, each with the variable bound to that
//! value: indices built from it are then known at compile time, so the array stays in
//! registers on every target. Any other constant loop stays one `Stmt::For` carrying its
//! values: WGSL emits it as copies up to 16 trips (`emit::wgsl::COPIES_MAX_TRIPS`), CUDA C,
//! the host and longer WGSL ones as a loop, which NVRTC, rustc and the driver unroll as far
//! as pays (copies from the front end made the 16×16 product tile's 64-step loop
//! straight-line code, slower on the H200 than NVRTC's own choice, and the sampler on NVIDIA
//! Vulkan slower than with the loop). The meaning is the loop's: the same values in the same
//! order.

use std::collections::{HashMap, HashSet};

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

impl Checker<'_> {
    /// Whether unrolling the loop over `var` pays in the front end: an index of a
    /// per-invocation array, or the range of a nested loop, mentions `var` or a local the
    /// body computes from it (a name, syntactically and conservatively: a shadowing
    /// declaration still counts).
    pub(super) fn unrolling_pays(&self, var: &str, body: &syn::Block) -> bool {
        let mut arrays = ArrayDecls(HashSet::new());
        arrays.visit_block(body);
        let mut derived = HashSet::from([var.to_string()]);
        loop {
            let before = derived.len();
            let mut t = Derive(&mut derived);
            t.visit_block(body);
            if derived.len() == before {
                break;
            }
        }
        let is_array = |name: &str| {
            arrays.0.contains(name) || self.lookup(name).is_some_and(|l| l.array.is_some())
        };
        let mut f = Pays {
            derived: &derived,
            is_array: &is_array,
            found: false,
        };
        f.visit_block(body);
        f.found
    }
}

/// The single-segment name of a path expression.
fn ident_of(e: &syn::Expr) -> Option<String> {
    match e {
        syn::Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
        syn::Expr::Paren(p) => ident_of(&p.expr),
        _ => None,
    }
}

/// Whether `e` mentions any of `names`.
fn mentions(e: &syn::Expr, names: &HashSet<String>) -> bool {
    struct Find<'a>(&'a HashSet<String>, bool);
    impl<'ast> Visit<'ast> for Find<'_> {
        fn visit_expr_path(&mut self, p: &'ast syn::ExprPath) {
            if p.path
                .get_ident()
                .is_some_and(|i| self.0.contains(&i.to_string()))
            {
                self.1 = true;
            }
        }
    }
    let mut f = Find(names, false);
    f.visit_expr(e);
    f.1
}

/// The per-invocation arrays a block declares (`[v; N]`, `[a, b]` or an array type).
struct ArrayDecls(HashSet<String>);

impl<'ast> Visit<'ast> for ArrayDecls {
    fn visit_local(&mut self, l: &'ast syn::Local) {
        let (name, typed) = match &l.pat {
            syn::Pat::Ident(p) => (Some(&p.ident), false),
            syn::Pat::Type(t) => match &*t.pat {
                syn::Pat::Ident(p) => (Some(&p.ident), matches!(&*t.ty, syn::Type::Array(_))),
                _ => (None, false),
            },
            _ => (None, false),
        };
        let init = l.init.as_ref().map(|i| &*i.expr);
        if let Some(n) = name {
            if typed || matches!(init, Some(syn::Expr::Array(_) | syn::Expr::Repeat(_))) {
                self.0.insert(n.to_string());
            }
        }
        syn::visit::visit_local(self, l);
    }
}

/// Adds to the set every local declared or assigned from a value that mentions one of it.
struct Derive<'a>(&'a mut HashSet<String>);

impl<'ast> Visit<'ast> for Derive<'_> {
    fn visit_local(&mut self, l: &'ast syn::Local) {
        let name = match &l.pat {
            syn::Pat::Ident(p) => Some(&p.ident),
            syn::Pat::Type(t) => match &*t.pat {
                syn::Pat::Ident(p) => Some(&p.ident),
                _ => None,
            },
            _ => None,
        };
        if let (Some(n), Some(init)) = (name, &l.init) {
            if mentions(&init.expr, self.0) {
                self.0.insert(n.to_string());
            }
        }
        syn::visit::visit_local(self, l);
    }
    fn visit_expr_assign(&mut self, a: &'ast syn::ExprAssign) {
        if let Some(n) = ident_of(&a.left) {
            if mentions(&a.right, self.0) {
                self.0.insert(n);
            }
        }
        syn::visit::visit_expr_assign(self, a);
    }
    fn visit_expr_binary(&mut self, b: &'ast syn::ExprBinary) {
        // Compound assignments (`x += i`) are binary expressions in syn.
        if let Some(n) = ident_of(&b.left) {
            if compound_op(&b.op).is_some() && mentions(&b.right, self.0) {
                self.0.insert(n);
            }
        }
        syn::visit::visit_expr_binary(self, b);
    }
}

/// Finds an array index or a nested loop's range that mentions a derived name.
struct Pays<'a> {
    derived: &'a HashSet<String>,
    is_array: &'a dyn Fn(&str) -> bool,
    found: bool,
}

impl<'ast> Visit<'ast> for Pays<'_> {
    fn visit_expr_index(&mut self, i: &'ast syn::ExprIndex) {
        let array = ident_of(&i.expr).is_some_and(|n| (self.is_array)(&n));
        if array && mentions(&i.index, self.derived) {
            self.found = true;
        }
        syn::visit::visit_expr_index(self, i);
    }
    fn visit_expr_for_loop(&mut self, f: &'ast syn::ExprForLoop) {
        if mentions(&f.expr, self.derived) {
            self.found = true;
        }
        syn::visit::visit_expr_for_loop(self, f);
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
