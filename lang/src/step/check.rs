//! Checks a step body for host computation on per-step scalars.
//!
//! Inside the body a per-step scalar is a device value (`Scalar<T>`) with no host value, so
//! the type system already rejects `lr * 2.0`; this pass says why, and what to write instead,
//! at the expression itself. A name the body binds again (`let lr = ...`, a closure or
//! pattern) is left to the type checker, so nothing correct is ever rejected here.

use std::collections::HashSet;

use syn::visit::Visit;

use super::parse::{Role, Step};

pub fn body(func: &syn::ItemFn, step: &Step, errors: &mut Vec<syn::Error>) {
    let mut bound = Bindings(HashSet::new());
    bound.visit_block(&func.block);
    let scalars: Vec<(String, String)> = step
        .params
        .iter()
        .filter_map(|p| match &p.role {
            Role::Scalar { ty } => {
                let name = p.name.to_string();
                (!bound.0.contains(&name)).then(|| (name, crate::tokens::shown(ty)))
            }
            _ => None,
        })
        .collect();
    if scalars.is_empty() {
        return;
    }
    let mut uses = HostUses {
        scalars: &scalars,
        errors,
    };
    uses.visit_block(&func.block);
}

/// Every name a pattern in the body binds (nested items are their own scope: skipped).
struct Bindings(HashSet<String>);

impl<'ast> Visit<'ast> for Bindings {
    fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
        self.0.insert(p.ident.to_string());
        syn::visit::visit_pat_ident(self, p);
    }
    fn visit_item(&mut self, _: &'ast syn::Item) {}
}

struct HostUses<'a> {
    /// (name, type) of the per-step scalars the body does not rebind.
    scalars: &'a [(String, String)],
    errors: &'a mut Vec<syn::Error>,
}

impl HostUses<'_> {
    /// The scalar `e` names directly, if any.
    fn scalar(&self, e: &syn::Expr) -> Option<&(String, String)> {
        match e {
            syn::Expr::Path(p) if p.qself.is_none() => {
                let id = p.path.get_ident()?.to_string();
                self.scalars.iter().find(|(n, _)| *n == id)
            }
            syn::Expr::Paren(p) => self.scalar(&p.expr),
            syn::Expr::Group(g) => self.scalar(&g.expr),
            _ => None,
        }
    }

    fn report(&mut self, node: &dyn quote::ToTokens, operand: &syn::Expr, what: &str) {
        let Some((name, ty)) = self.scalar(operand).cloned() else {
            return;
        };
        let instead = if ty == "f32" {
            format!("pass `{name}` to a kernel as is (`k::launch(cx, n, {name}, ...)`) and compute with it there")
        } else {
            format!("pass `{name}` to a kernel as is and compute there, or, if it selects what the step does, make it `#[key] {name}: {ty}`")
        };
        self.errors.push(syn::Error::new_spanned(
            node,
            format!("`{name}` is a per-step scalar: inside the step it is a device value (`Scalar<{ty}>`) that changes every call, so {what} on the host would bake one call's value into the recording; {instead}"),
        ));
    }
}

impl<'ast> Visit<'ast> for HostUses<'_> {
    fn visit_expr(&mut self, e: &'ast syn::Expr) {
        match e {
            syn::Expr::Binary(b) => {
                let what = match b.op {
                    syn::BinOp::Eq(_)
                    | syn::BinOp::Ne(_)
                    | syn::BinOp::Lt(_)
                    | syn::BinOp::Le(_)
                    | syn::BinOp::Gt(_)
                    | syn::BinOp::Ge(_) => "a comparison",
                    _ => "arithmetic",
                };
                if self.scalar(&b.left).is_some() {
                    self.report(e, &b.left, what);
                } else {
                    self.report(e, &b.right, what);
                }
            }
            syn::Expr::Unary(u) if !matches!(u.op, syn::UnOp::Deref(_)) => {
                self.report(e, &u.expr, "arithmetic")
            }
            syn::Expr::Cast(c) => self.report(e, &c.expr, "a conversion"),
            syn::Expr::If(i) => self.report(&i.cond, &i.cond, "a branch"),
            syn::Expr::While(w) => self.report(&w.cond, &w.cond, "a loop condition"),
            syn::Expr::Index(ix) => self.report(e, &ix.index, "indexing"),
            syn::Expr::Range(r) => {
                for end in [&r.start, &r.end].into_iter().flatten() {
                    self.report(e, end, "a range");
                }
            }
            syn::Expr::Assign(a) => self.report(e, &a.left, "an assignment"),
            _ => {}
        }
        syn::visit::visit_expr(self, e);
    }
    fn visit_item(&mut self, _: &'ast syn::Item) {}
}
