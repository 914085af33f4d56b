//! Rejects a `barrier()` or a subgroup operation that not every invocation of a workgroup
//! reaches together.
//!
//! A value is non-uniform when it depends on `local_id()`/`global_id()`, on memory that
//! invocations write (`&mut [T]` parameters, workgroup arrays, atomics), or on a local assigned
//! from such a value or under non-uniform control flow. A barrier under a non-uniform `if`,
//! loop, or after a non-uniform `return`/`break`/`continue` is an error (it deadlocks or is
//! undefined on GPUs, and WGSL rejects it). A call of a `#[device]` helper that reaches a
//! barrier counts as one. In a helper's own body every parameter counts as non-uniform
//! (callers may pass an invocation id), so its barriers are checked for every call at once.
//! A subgroup operation is an error in the same places, or in an arm of a conditional value
//! or a `&&`/`||` operand evaluated only for some invocations, and so is a call of a helper
//! that reaches one (itself or through another helper); and the mask or delta of
//! `subgroup_shuffle_xor/up/down` must be uniform (SPIR-V requires it). Uniform here means
//! uniform over the workgroup, which is stricter than the subgroup and the same on every
//! target.

use std::collections::HashSet;

use super::ir::*;

/// What a call of a helper must be reached together by: a barrier (the workgroup) or a
/// subgroup operation (its subgroup).
pub struct Reach {
    /// The helper's name.
    pub name: String,
    /// It reaches a `barrier()`.
    pub barrier: bool,
    /// It reaches this subgroup operation, in the body of the helper named.
    pub exchange: Option<(SubgroupOp, String)>,
}

pub fn check(kernel: &Kernel, errors: &mut Vec<syn::Error>) {
    if !kernel.has_barrier && !kernel.has_subgroup {
        return;
    }
    let reach: Vec<Reach> = kernel
        .helpers
        .iter()
        .map(|f| Reach {
            name: f.name.clone(),
            barrier: f.has_barrier,
            exchange: f.exchange.clone(),
        })
        .collect();
    walk(&kernel.body, &reach, true, kernel.has_subgroup, errors);
}

/// Checks the barriers and subgroup operations of helper `f`, itself and in calls; `reach`
/// says what each callee reaches.
pub fn check_helper(f: &DeviceFn, reach: &[Reach], errors: &mut Vec<syn::Error>) {
    if f.has_barrier || f.has_subgroup {
        walk(&f.body, reach, false, f.has_subgroup, errors);
    }
}

fn walk(
    body: &[Stmt],
    barriers: &[Reach],
    params_uniform: bool,
    subgroups: bool,
    errors: &mut Vec<syn::Error>,
) {
    let mut a = Analysis {
        barriers,
        params_uniform,
        subgroups,
        tainted: HashSet::new(),
        changed: true,
        report: None,
    };
    while a.changed {
        a.changed = false;
        a.block(body, None);
    }
    let mut found = Vec::new();
    a.report = Some(&mut found);
    a.block(body, None);
    // The copies of an unrolled loop's body share their barriers' spans: one error each.
    let mut seen = HashSet::new();
    found.retain(|e| seen.insert((e.to_string(), format!("{:?}", e.span()))));
    errors.extend(found);
}

/// Why control flow at some point is non-uniform (`None`: it is uniform).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Why {
    /// Inside an `if` or loop whose condition is non-uniform.
    Condition,
    /// After a `return`/`break`/`continue` that only some invocations take.
    EarlyExit,
}

type Nu = Option<Why>;

/// `nu`, or a non-uniform condition when `cond_nu`.
fn under(nu: Nu, cond_nu: bool) -> Nu {
    nu.or(if cond_nu { Some(Why::Condition) } else { None })
}

fn subgroup_message(op: SubgroupOp, why: Why) -> String {
    let name = op.name();
    subgroup_reach_message(&format!("`{name}`"), name, why)
}

/// Why `what` (a subgroup operation, or a call of a helper reaching `name`) is misplaced.
fn subgroup_reach_message(what: &str, name: &str, why: Why) -> String {
    match why {
        Why::Condition => format!("{what} must be reached by every invocation of its subgroup together, but this one is inside an `if`, a loop or a conditional value (`if`/`&&`/`||`) whose condition depends on the invocation id (or on memory that invocations write), so some invocations skip it; compute it for every invocation before the `if`/loop and use the result inside, or compute the condition from uniform values (scalar parameters, `len()`, `workgroup_id()`, constants)"),
        Why::EarlyExit => format!("{what} must be reached by every invocation of its subgroup together, but some invocations may already have left through an earlier `return`, `break` or `continue` taken under a condition that depends on the invocation id; instead of leaving early, put the work in `if cond {{ ... }}` and keep `{name}` outside it"),
    }
}

fn barrier_message(why: Why) -> &'static str {
    match why {
        Why::Condition => "`barrier()` must be reached by every invocation of the workgroup together, but this one is inside an `if` or loop whose condition depends on the invocation id (or on memory that invocations write), so some invocations skip it; move `barrier()` out of that `if`/loop, or compute the condition from uniform values (scalar parameters, `len()`, `workgroup_id()`, constants)",
        Why::EarlyExit => "`barrier()` must be reached by every invocation of the workgroup together, but some invocations may already have left through an earlier `return`, `break` or `continue` taken under a condition that depends on the invocation id; instead of leaving early, put the work in `if cond { ... }` and keep `barrier()` outside it",
    }
}

/// `device_fence()` is `storageBarrier()` in WGSL, a barrier the whole workgroup reaches.
fn fence_message(why: Why) -> &'static str {
    match why {
        Why::Condition => "`device_fence()` must be reached by every invocation of the workgroup together (WGSL has it only as `storageBarrier()`, a workgroup barrier), but this one is inside an `if` or loop whose condition depends on the invocation id (or on memory that invocations write); move it out of that `if`/loop",
        Why::EarlyExit => "`device_fence()` must be reached by every invocation of the workgroup together (WGSL has it only as `storageBarrier()`, a workgroup barrier), but some invocations may already have left through an earlier `return`, `break` or `continue` taken under a condition that depends on the invocation id; keep it outside such exits",
    }
}

fn call_message(why: Why, callee: &str) -> String {
    let place = match why {
        Why::Condition => "inside an `if` or loop whose condition depends on the invocation id (or on memory that invocations write, or in a helper on a parameter)",
        Why::EarlyExit => "after a `return`, `break` or `continue` that only some invocations may take",
    };
    format!("this call reaches a `barrier()` (in `{callee}`), which every invocation of the workgroup must reach together, but it is {place}; call it where the whole workgroup is, outside that `if`/loop")
}

struct Analysis<'k, 'e> {
    /// For each helper a call may name: what it reaches.
    barriers: &'k [Reach],
    /// Whether scalar parameters are uniform (a kernel's are; a helper's may not be).
    params_uniform: bool,
    /// Whether the body uses subgroup operations, itself or through helpers.
    subgroups: bool,
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

    fn block(&mut self, stmts: &[Stmt], mut nu: Nu) -> Exits {
        let mut exits = Exits::default();
        for s in stmts {
            let e = self.stmt(s, nu);
            exits.ret |= e.ret;
            exits.brk |= e.brk;
            if e.ret || e.brk {
                nu = nu.or(Some(Why::EarlyExit));
            }
        }
        exits
    }

    /// Reports calls in `e` of helpers that reach a barrier, under non-uniform control.
    fn calls(&mut self, e: &Expr, nu: Nu) {
        let Some(why) = nu else { return };
        let mut found = Vec::new();
        barrier_calls(e, self.barriers, &mut found);
        if let Some(r) = self.report.as_deref_mut() {
            for (name, span) in found {
                r.push(syn::Error::new(span, call_message(why, &name)));
            }
        }
    }

    fn stmt(&mut self, s: &Stmt, nu: Nu) -> Exits {
        self.subgroup_stmt(s, nu);
        for e in stmt_exprs(s) {
            self.calls(e, nu);
        }
        match s {
            Stmt::Let { name, init, .. } => {
                if nu.is_some() || init.as_ref().is_some_and(|e| !self.uniform(e)) {
                    self.taint(name);
                }
            }
            Stmt::Assign { place, value, .. } => {
                if let Place::Local(name) = place {
                    if nu.is_some() || !self.uniform(value) {
                        self.taint(name);
                    }
                }
            }
            Stmt::Atomic {
                result: Some(name), ..
            } => self.taint(name),
            Stmt::Atomic { .. } => {}
            // Reads of arrays are never taken as uniform (like every `Load`).
            Stmt::Array { .. } => {}
            Stmt::If { cond, then, els } => {
                let inner = under(nu, !self.uniform(cond));
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
                if nu.is_some() || bounds_nu {
                    self.taint(var);
                }
                return self.loop_body(body, under(nu, bounds_nu), None);
            }
            Stmt::While { cond, body } => {
                let c = !self.uniform(cond);
                return self.loop_body(body, under(nu, c), Some(cond));
            }
            Stmt::Loop { body } => return self.loop_body(body, nu, None),
            Stmt::Break | Stmt::Continue => {
                return Exits {
                    ret: false,
                    brk: nu.is_some(),
                }
            }
            Stmt::Call(_) => {}
            Stmt::Return | Stmt::ReturnValue(_) | Stmt::ReturnArray(_) => {
                return Exits {
                    ret: nu.is_some(),
                    brk: false,
                }
            }
            Stmt::Mma(m) => {
                if let (Some(why), Some(r)) = (nu, self.report.as_deref_mut()) {
                    r.push(syn::Error::new(
                        m.span,
                        crate::kernel::mma::uniformity_message(why == Why::Condition),
                    ));
                }
            }
            Stmt::Ldmatrix(l) => {
                if let (Some(why), Some(r)) = (nu, self.report.as_deref_mut()) {
                    r.push(syn::Error::new(
                        l.span,
                        crate::kernel::ldmatrix::uniformity_message(
                            l.name(),
                            why == Why::Condition,
                        ),
                    ));
                }
            }
            Stmt::DeviceFence { span } => {
                if let (Some(why), Some(r)) = (nu, self.report.as_deref_mut()) {
                    r.push(syn::Error::new(*span, fence_message(why)));
                }
            }
            // Its `let`s and element copies, walked as the straight-line code they are.
            Stmt::CopyAsync(c) => {
                self.block(&c.setup, nu);
                self.block(&c.copy, nu);
            }
            Stmt::CopyFence(_) => {}
            Stmt::Barrier { span } => {
                if let Some(why) = nu {
                    let mut msg = barrier_message(why).to_string();
                    msg.push_str(self.helper_note());
                    if let Some(r) = self.report.as_deref_mut() {
                        r.push(syn::Error::new(*span, msg));
                    }
                }
            }
        }
        Exits::default()
    }

    /// `cond`: a `while` condition, evaluated again after every iteration.
    fn loop_body(&mut self, body: &[Stmt], nu: Nu, cond: Option<&Expr>) -> Exits {
        // A non-uniform exit anywhere in the body makes every iteration non-uniform. Probe
        // without reporting first, then walk for real.
        let report = self.report.take();
        let probe = self.block(body, nu);
        self.report = report;
        let exit = if probe.brk || probe.ret {
            Some(Why::EarlyExit)
        } else {
            None
        };
        let e = self.block(body, nu.or(exit));
        if let Some(c) = cond {
            self.ops(c, nu.or(exit));
        }
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
            ExprKind::Scalar(_) => self.params_uniform,
            ExprKind::Len(_) => true,
            ExprKind::Id(b) => !matches!(b, IdBuiltin::GlobalId | IdBuiltin::LocalId),
            // Slices are `read_write` storage in WGSL, so every load is non-uniform there.
            ExprKind::Load(_) => false,
            ExprKind::Field(b, _) => self.uniform(b),
            ExprKind::Unary(_, a) | ExprKind::Cast(a, _) | ExprKind::Bits(a, _) => self.uniform(a),
            ExprKind::Binary(_, a, b) => self.uniform(a) && self.uniform(b),
            ExprKind::Math(_, args) => args.iter().all(|a| self.uniform(a)),
            ExprKind::Cond(c, a, b) => self.uniform(c) && self.uniform(a) && self.uniform(b),
            // A helper cannot read an id; what it reads from memory is not uniform.
            ExprKind::Call(_, args, _) => args.iter().all(|a| match a {
                CallArg::Value(e) => self.uniform(e),
                CallArg::Slice(_) | CallArg::Shared(_) | CallArg::Array(_) => false,
            }),
            // The size is the same everywhere; the rest differ between subgroups or lanes.
            ExprKind::Subgroup(op, ..) => *op == SubgroupOp::Size,
        }
    }
}

impl Analysis<'_, '_> {
    /// What a message about a helper's body adds: why its parameters are not uniform.
    fn helper_note(&self) -> &'static str {
        if self.params_uniform {
            ""
        } else {
            " (in a `#[device]` function every parameter counts as depending on the invocation id, since a caller may pass one)"
        }
    }

    /// Checks the subgroup operations in the expressions statement `s` evaluates itself
    /// (not those of nested blocks, which `stmt` walks).
    fn subgroup_stmt(&mut self, s: &Stmt, nu: Nu) {
        if !self.subgroups || self.report.is_none() {
            return;
        }
        fn place(p: &Place) -> Option<&Expr> {
            match p {
                Place::Local(_) => None,
                Place::Param(_, ix) | Place::Shared(_, ix) | Place::Array(_, ix) => Some(&**ix),
            }
        }
        let mut es: Vec<&Expr> = Vec::new();
        match s {
            Stmt::Let { init, .. } => es.extend(init.as_ref()),
            Stmt::Assign {
                place: p, value, ..
            } => {
                es.extend(place(p));
                es.push(value);
            }
            Stmt::If { cond, .. } => es.push(cond),
            Stmt::For {
                start, end, step, ..
            } => {
                es.push(start);
                es.push(end);
                es.extend(step.as_ref());
            }
            // Checked with the body's uniformity, in `loop_body`.
            Stmt::While { .. } => {}
            Stmt::Call(e) | Stmt::ReturnValue(e) => es.push(e),
            Stmt::Array { init, .. } => match init {
                ArrayInit::Splat(v) => es.push(v),
                ArrayInit::List(vs) => es.extend(vs),
                ArrayInit::Call(v) => es.push(v),
            },
            Stmt::Atomic {
                index, operands, ..
            } => {
                es.push(index);
                es.extend(operands);
            }
            Stmt::Loop { .. }
            | Stmt::Break
            | Stmt::Continue
            | Stmt::Return
            | Stmt::ReturnArray(_)
            | Stmt::Barrier { .. }
            | Stmt::DeviceFence { .. }
            | Stmt::Mma(_)
            // Its row's uniformity does not matter (each invocation names its own).
            | Stmt::Ldmatrix(_)
            // Walked statement by statement in `stmt`.
            | Stmt::CopyAsync(_)
            | Stmt::CopyFence(_) => {}
        }
        for e in es {
            self.ops(e, nu);
        }
    }

    /// Reports each subgroup operation inside `e` evaluated under non-uniform control flow
    /// (`nu`, or an arm of a non-uniform conditional value or `&&`/`||`), and each shuffle
    /// whose mask or delta is not uniform.
    fn ops(&mut self, e: &Expr, nu: Nu) {
        if self.report.is_none() {
            return;
        }
        match &e.kind {
            ExprKind::Subgroup(op, args, span) => {
                args.iter().for_each(|a| self.ops(a, nu));
                let mut found = Vec::new();
                // The size and the lane are plain values; the rest exchange between lanes.
                if let Some(why) = nu.filter(|_| op.arity() > 0) {
                    let mut msg = subgroup_message(*op, why);
                    msg.push_str(self.helper_note());
                    found.push(syn::Error::new(*span, msg));
                }
                if op.uniform_operand() && !self.uniform(&args[1]) {
                    let what = if *op == SubgroupOp::ShuffleXor {
                        "mask"
                    } else {
                        "delta"
                    };
                    found.push(syn::Error::new(*span, format!("the {what} of `{}` must be the same for every invocation (SPIR-V and WGSL require it), but this one depends on the invocation id (or on memory that invocations write); use a constant, a scalar parameter, `subgroup_size()` or a variable computed from them, or `subgroup_shuffle(v, lane)`, whose lane may differ between invocations", op.name())));
                }
                if let Some(r) = self.report.as_deref_mut() {
                    r.extend(found);
                }
            }
            ExprKind::Cond(c, a, b) => {
                self.ops(c, nu);
                let inner = under(nu, !self.uniform(c));
                self.ops(a, inner);
                self.ops(b, inner);
            }
            ExprKind::Binary(BinOp::And | BinOp::Or, a, b) => {
                self.ops(a, nu);
                let inner = under(nu, !self.uniform(a));
                self.ops(b, inner);
            }
            ExprKind::Binary(_, a, b) => {
                self.ops(a, nu);
                self.ops(b, nu);
            }
            ExprKind::Field(a, _)
            | ExprKind::Unary(_, a)
            | ExprKind::Cast(a, _)
            | ExprKind::Bits(a, _) => self.ops(a, nu),
            // `select` evaluates one arm on the host and CUDA, both in WGSL.
            ExprKind::Math(MathFn::Select, args) => {
                self.ops(&args[0], nu);
                let inner = under(nu, !self.uniform(&args[0]));
                self.ops(&args[1], inner);
                self.ops(&args[2], inner);
            }
            ExprKind::Math(_, args) => args.iter().for_each(|a| self.ops(a, nu)),
            ExprKind::Call(h, args, span) => {
                args.iter().for_each(|a| {
                    if let CallArg::Value(v) = a {
                        self.ops(v, nu)
                    }
                });
                let reached = self.barriers.get(*h).and_then(|r| {
                    let (op, inner) = r.exchange.as_ref()?;
                    Some((r.name.clone(), *op, inner.clone()))
                });
                if let (Some(why), Some((callee, op, inner))) = (nu, reached) {
                    let place = if inner == callee {
                        String::new()
                    } else {
                        format!(" through `{inner}`")
                    };
                    let what = format!(
                        "this call of `{callee}`, which reaches `{}`{place},",
                        op.name()
                    );
                    let mut msg = subgroup_reach_message(&what, op.name(), why);
                    msg.push_str(self.helper_note());
                    if let Some(r) = self.report.as_deref_mut() {
                        r.push(syn::Error::new(*span, msg));
                    }
                }
            }
            ExprKind::Load(Place::Param(_, ix) | Place::Shared(_, ix) | Place::Array(_, ix)) => {
                self.ops(ix, nu)
            }
            ExprKind::Load(Place::Local(_))
            | ExprKind::LitF32(_)
            | ExprKind::LitI32(_)
            | ExprKind::LitU32(_)
            | ExprKind::LitBool(_)
            | ExprKind::Local(_)
            | ExprKind::Scalar(_)
            | ExprKind::Len(_)
            | ExprKind::Id(_) => {}
        }
    }
}

/// The expressions a statement evaluates itself (not those of nested blocks).
fn stmt_exprs(s: &Stmt) -> Vec<&Expr> {
    match s {
        Stmt::Let { init, .. } => init.iter().collect(),
        Stmt::Assign { value, place, .. } => {
            let mut v = vec![value];
            if let Place::Param(_, ix) | Place::Shared(_, ix) | Place::Array(_, ix) = place {
                v.push(ix);
            }
            v
        }
        Stmt::If { cond, .. } | Stmt::While { cond, .. } => vec![cond],
        Stmt::For {
            start, end, step, ..
        } => {
            let mut v = vec![start, end];
            v.extend(step.as_ref());
            v
        }
        Stmt::ReturnValue(e) | Stmt::Call(e) => vec![e],
        Stmt::Array { init, .. } => match init {
            ArrayInit::Splat(v) => vec![v],
            ArrayInit::List(vs) => vs.iter().collect(),
            ArrayInit::Call(v) => vec![v],
        },
        Stmt::Atomic {
            index, operands, ..
        } => std::iter::once(index).chain(operands).collect(),
        _ => Vec::new(),
    }
}

/// The calls in `e` of helpers that reach a barrier: (the helper's name, span).
fn barrier_calls(e: &Expr, barriers: &[Reach], out: &mut Vec<(String, proc_macro2::Span)>) {
    match &e.kind {
        ExprKind::Call(h, args, span) => {
            if let Some(r) = barriers.get(*h).filter(|r| r.barrier) {
                out.push((r.name.clone(), *span));
            }
            for a in args {
                if let CallArg::Value(v) = a {
                    barrier_calls(v, barriers, out);
                }
            }
        }
        ExprKind::Load(Place::Param(_, ix) | Place::Shared(_, ix) | Place::Array(_, ix)) => {
            barrier_calls(ix, barriers, out)
        }
        ExprKind::Field(a, _)
        | ExprKind::Unary(_, a)
        | ExprKind::Cast(a, _)
        | ExprKind::Bits(a, _) => barrier_calls(a, barriers, out),
        ExprKind::Binary(_, a, b) => {
            barrier_calls(a, barriers, out);
            barrier_calls(b, barriers, out);
        }
        ExprKind::Math(_, args) => args.iter().for_each(|a| barrier_calls(a, barriers, out)),
        ExprKind::Cond(c, a, b) => {
            barrier_calls(c, barriers, out);
            barrier_calls(a, barriers, out);
            barrier_calls(b, barriers, out);
        }
        _ => {}
    }
}
