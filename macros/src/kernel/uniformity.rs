//! Rejects a `barrier()` that not every invocation of a workgroup reaches together.
//!
//! A value is non-uniform when it depends on `local_id()`/`global_id()`, on memory that
//! invocations write (`&mut [T]` parameters, workgroup arrays, atomics), or on a local assigned
//! from such a value or under non-uniform control flow. A barrier under a non-uniform `if`,
//! loop, or after a non-uniform `return`/`break`/`continue` is an error (it deadlocks or is
//! undefined on GPUs, and WGSL rejects it).

use std::collections::HashSet;

use super::ir::*;

pub fn check(kernel: &Kernel, errors: &mut Vec<syn::Error>) {
    if !kernel.has_barrier {
        return;
    }
    let mut a = Analysis {
        kernel,
        tainted: HashSet::new(),
        changed: true,
        report: None,
    };
    while a.changed {
        a.changed = false;
        a.block(&kernel.body, false);
    }
    let mut found = Vec::new();
    a.report = Some(&mut found);
    a.block(&kernel.body, false);
    errors.extend(found);
}

struct Analysis<'k, 'e> {
    #[allow(dead_code)]
    kernel: &'k Kernel,
    tainted: HashSet<String>,
    changed: bool,
    report: Option<&'e mut Vec<syn::Error>>,
}

/// What a statement list may do non-uniformly to the code after it.
#[derive(Default, Clone, Copy)]
struct Exits {
    ret: bool,
    brk: bool,
}

impl Analysis<'_, '_> {
    fn taint(&mut self, name: &str) {
        if self.tainted.insert(name.to_string()) {
            self.changed = true;
        }
    }

    fn block(&mut self, stmts: &[Stmt], mut nu: bool) -> Exits {
        let mut exits = Exits::default();
        for s in stmts {
            let e = self.stmt(s, nu);
            exits.ret |= e.ret;
            exits.brk |= e.brk;
            if e.ret || e.brk {
                nu = true;
            }
        }
        exits
    }

    fn stmt(&mut self, s: &Stmt, nu: bool) -> Exits {
        match s {
            Stmt::Let { name, init, .. } => {
                if nu || init.as_ref().is_some_and(|e| !self.uniform(e)) {
                    self.taint(name);
                }
            }
            Stmt::Assign { place, value, .. } => {
                if let Place::Local(name) = place {
                    if nu || !self.uniform(value) {
                        self.taint(name);
                    }
                }
            }
            Stmt::Atomic {
                result: Some(name), ..
            } => self.taint(name),
            Stmt::Atomic { .. } => {}
            Stmt::If { cond, then, els } => {
                let inner = nu || !self.uniform(cond);
                let a = self.block(then, inner);
                let b = self.block(els, inner);
                return Exits {
                    ret: a.ret || b.ret,
                    brk: a.brk || b.brk,
                };
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
                ..
            } => {
                let bounds_nu = !self.uniform(start)
                    || !self.uniform(end)
                    || step.as_ref().is_some_and(|s| !self.uniform(s));
                if nu || bounds_nu {
                    self.taint(var);
                }
                return self.loop_body(body, nu || bounds_nu);
            }
            Stmt::While { cond, body } => {
                let c = !self.uniform(cond);
                return self.loop_body(body, nu || c);
            }
            Stmt::Loop { body } => return self.loop_body(body, nu),
            Stmt::Break | Stmt::Continue => {
                return Exits {
                    ret: false,
                    brk: nu,
                }
            }
            Stmt::Return => {
                return Exits {
                    ret: nu,
                    brk: false,
                }
            }
            Stmt::Barrier { span } => {
                if nu {
                    if let Some(r) = self.report.as_deref_mut() {
                        r.push(syn::Error::new(
                            *span,
                            "`barrier()` must be reached by every invocation of the workgroup together, but here it is under control flow that depends on the invocation id (or on memory invocations write); move it out of that `if`/loop, or compute the condition from uniform values",
                        ));
                    }
                }
            }
        }
        Exits::default()
    }

    fn loop_body(&mut self, body: &[Stmt], nu: bool) -> Exits {
        // A non-uniform exit anywhere in the body makes every iteration non-uniform. Probe
        // without reporting first, then walk for real.
        let report = self.report.take();
        let probe = self.block(body, nu);
        self.report = report;
        let e = self.block(body, nu || probe.brk || probe.ret);
        Exits {
            ret: e.ret,
            brk: false,
        }
    }

    fn uniform(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::LitF32(_)
            | ExprKind::LitI32(_)
            | ExprKind::LitU32(_)
            | ExprKind::LitBool(_) => true,
            ExprKind::Local(n) => !self.tainted.contains(n),
            ExprKind::Scalar(_) | ExprKind::Len(_) => true,
            ExprKind::Id(b) => !matches!(b, IdBuiltin::GlobalId | IdBuiltin::LocalId),
            // Slices are `read_write` storage in WGSL, so every load is non-uniform there.
            ExprKind::Load(_) => false,
            ExprKind::Field(b, _) => self.uniform(b),
            ExprKind::Unary(_, a) | ExprKind::Cast(a, _) => self.uniform(a),
            ExprKind::Binary(_, a, b) => self.uniform(a) && self.uniform(b),
            ExprKind::Math(_, args) => args.iter().all(|a| self.uniform(a)),
            ExprKind::Cond(c, a, b) => self.uniform(c) && self.uniform(a) && self.uniform(b),
        }
    }
}
