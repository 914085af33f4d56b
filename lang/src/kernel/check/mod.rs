//! Lowers a kernel body to the typed IR, checking types and supported constructs.
//!
//! Every error is recorded (spanned) and lowering goes on, so all of a kernel's mistakes are
//! reported together; an expression that failed yields `Err(())` and is not reported twice.

mod arrays;
mod atomics;
mod builtins;
mod consts;
mod control;
mod copy_async;
mod device;
mod expr;
mod half;
mod ldmatrix;
mod mma;
mod place;
mod shared;
mod stmt;
mod subgroup;
mod unroll;
mod value;

use std::collections::HashMap;

use super::ir::*;
use super::parse::scalar_type;
use crate::kernel::Errors;

use arrays::array_shown;
pub use arrays::ArrayParam;
use builtins::is_path_call;
use consts::const_value;
pub use consts::fold;
use consts::Known;
use control::if_is_pure;
pub use device::{SharedParam, Sig, Slot, DEFERRED};
use expr::{compound_op, is_untyped_lit, mismatch};
pub use half::widen_block;
use place::Target;
use stmt::macro_message;
use value::is_stmt_value;

type Res<T> = Result<T, ()>;

/// Workgroup memory a kernel may declare: CUDA's static `__shared__` limit.
const MAX_SHARED_BYTES: u64 = 48 * 1024;

#[derive(Clone)]
struct Local {
    mangled: String,
    ty: Ty,
    mutable: bool,
    /// Declared by code that was already reported (a rejected parameter, a failed `let`):
    /// its uses fail silently instead of adding "unknown variable" errors.
    poisoned: bool,
    /// A per-invocation array (an index into `Checker::arrays`); `ty` is its element type.
    array: Option<usize>,
}

pub struct Checker<'a> {
    errors: &'a mut Errors,
    kernel_name: String,
    params: Vec<Param>,
    shared: Vec<Shared>,
    shared_names: HashMap<String, usize>,
    /// Workgroup arrays that are read-only here (a helper's `&[T; N]` parameters).
    shared_readonly: Vec<usize>,
    consts: HashMap<String, (Ty, ExprKind)>,
    scopes: Vec<HashMap<String, Local>>,
    counter: usize,
    loop_depth: usize,
    has_barrier: bool,
    /// A subgroup operation was lowered (see `subgroup.rs`).
    has_subgroup: bool,
    /// Values known at compile time (immutable locals, the workgroup shape).
    known: Known,
    /// Per-invocation arrays declared so far.
    arrays: Vec<LocalArray>,
    /// Bytes of per-invocation arrays, each declaration in the source counted once.
    array_bytes: u64,
    /// Names passed as the first argument of an atomic builtin (workgroup arrays among them
    /// are declared atomic).
    atomic_names: Vec<String>,
    /// Copies of the body being lowered, through enclosing unrolled loops.
    unroll_factor: u32,
    /// Enclosing `loop`s used as values: (loop depth inside it, where `break v` writes, the
    /// value's type once known).
    value_loops: Vec<value::ValueLoop>,
    /// `#[device]` helpers this body may call, and the names (paths as written, or ids)
    /// that call them.
    sigs: Vec<Sig>,
    fn_names: HashMap<String, usize>,
    /// Set while lowering a helper's body: its return type.
    device: Option<Option<Ty>>,
    /// Set while lowering the body of a helper returning an array: its element type and
    /// length.
    device_array: Option<(Ty, u32)>,
    /// Set by the `let` that declares an array from a helper's call; taken by the call.
    array_call_ok: bool,
    /// The arrays a helper takes by value (indices into `arrays`).
    array_params: Vec<usize>,
    /// Set by the statement that lowers an expression where a call may write memory (a
    /// statement, a `let` initializer, an assignment to a local); taken by `expr`.
    effect_ok: bool,
}

fn err(errors: &mut Errors, node: impl quote::ToTokens, msg: impl std::fmt::Display) {
    errors.push(syn::Error::new_spanned(node, msg));
}

impl<'a> Checker<'a> {
    pub fn new(
        errors: &'a mut Errors,
        kernel_name: String,
        params: Vec<Param>,
        workgroup: [u32; 3],
    ) -> Self {
        Checker {
            errors,
            kernel_name,
            params,
            shared: Vec::new(),
            shared_names: HashMap::new(),
            shared_readonly: Vec::new(),
            consts: HashMap::new(),
            scopes: vec![HashMap::new()],
            counter: 0,
            loop_depth: 0,
            has_barrier: false,
            has_subgroup: false,
            known: Known {
                locals: HashMap::new(),
                workgroup,
            },
            arrays: Vec::new(),
            array_bytes: 0,
            atomic_names: Vec::new(),
            unroll_factor: 1,
            value_loops: Vec::new(),
            sigs: Vec::new(),
            fn_names: HashMap::new(),
            device: None,
            device_array: None,
            array_call_ok: false,
            array_params: Vec::new(),
            effect_ok: false,
        }
    }

    /// Declares which names are used as the first argument of an atomic builtin (so a
    /// workgroup array of that name is atomic from its declaration on).
    pub fn atomic_names(&mut self, names: Vec<String>) {
        self.atomic_names = names;
    }

    /// The per-invocation arrays of the kernel (after lowering its body).
    pub fn arrays(&self) -> Vec<LocalArray> {
        self.arrays.clone()
    }

    pub fn finish(self) -> (Vec<Param>, Vec<Shared>, bool) {
        (self.params, self.shared, self.has_barrier)
    }

    /// Marks `name` as already reported: later uses of it fail without a new error.
    pub fn poison(&mut self, name: &str) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(
                name.to_string(),
                Local {
                    mangled: String::new(),
                    ty: Ty::F32,
                    mutable: true,
                    poisoned: true,
                    array: None,
                },
            );
        }
    }

    /// Poisons every name a (rejected) pattern binds.
    fn poison_pat(&mut self, pat: &syn::Pat) {
        struct Names(Vec<String>);
        impl<'ast> syn::visit::Visit<'ast> for Names {
            fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
                self.0.push(p.ident.to_string());
                syn::visit::visit_pat_ident(self, p);
            }
        }
        let mut names = Names(Vec::new());
        syn::visit::Visit::visit_pat(&mut names, pat);
        for n in names.0 {
            self.poison(&n);
        }
    }

    /// Whether `e` names a poisoned local (so its error was already reported).
    fn is_poisoned(&self, e: &syn::Expr) -> bool {
        match e {
            syn::Expr::Path(p) => p
                .path
                .get_ident()
                .and_then(|id| self.lookup(&id.to_string()))
                .is_some_and(|l| l.poisoned),
            syn::Expr::Paren(p) => self.is_poisoned(&p.expr),
            _ => false,
        }
    }

    fn error(&mut self, node: impl quote::ToTokens, msg: impl std::fmt::Display) {
        err(self.errors, node, msg);
    }

    /// A unique target name for a local: ASCII (CUDA C), not starting with `_` (WGSL reserves
    /// `__`), suffixed with a counter so shadowing and scopes never collide.
    fn mangle(&mut self, name: &str) -> String {
        self.counter += 1;
        let mut base = String::new();
        for c in name.trim_start_matches("r#").chars() {
            if c.is_ascii_alphanumeric() || c == '_' {
                base.push(c);
            } else {
                base.push_str(&format!("u{:x}", c as u32));
            }
        }
        let base = base.trim_start_matches('_');
        let base = if base.is_empty() { "v" } else { base };
        format!("{base}_{}", self.counter)
    }

    fn lookup(&self, name: &str) -> Option<&Local> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    fn param_index(&self, name: &str) -> Option<usize> {
        self.params.iter().position(|p| p.name == name)
    }
}

const LABEL_MSG: &str = "loop labels are not supported in kernels; to leave an outer loop, set a `bool` flag, `break` the inner loop, and test the flag in the outer one";

const DEREF_MSG: &str = "`*` is not supported in kernels: there are no references to follow (locals and scalar parameters are values, slices are indexed as `x[i]`); use the value itself";
