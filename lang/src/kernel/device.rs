//! `#[device]` helper functions and how their definitions reach their callers.
//!
//! A proc macro sees only its own item, so a helper's definition travels by macro: `#[device]
//! fn gelu` expands to its Rust form, a `#[macro_export]` macro holding its *bundle* (its own
//! tokens and, flattened, the bundles of every helper it calls, each under an id unique over
//! all crates), and `use <that macro> as gelu;` next to the function. The macro shares the
//! function's name (macros and functions live in different namespaces), so whatever path
//! reaches the function — `gelu`, `helpers::gelu`, `graphed::kernels::helpers::gelu`, or an
//! import of it — reaches the macro too, and a misspelt one gets rustc's "a macro with a
//! similar name exists".
//!
//! A caller (a `#[kernel]`, or a `#[device]` function that calls others) expands to a call
//! of its first callee's macro, handing it the caller's state and a callback
//! (`::graphed::__private::kernel_resume` / `device_resume`); the macro appends its bundle
//! and calls back, which calls the next callee's macro, and so on. The last step has every
//! callee's bundle and lowers the caller. Recursion cannot build this chain: a function
//! calling itself is rejected by the checker, and functions calling each other leave rustc
//! unable to find the macro that is still being expanded.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use proc_macro2::{Delimiter, Literal, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, ToTokens};
use syn::visit::Visit;

use super::check::{ArrayParam, Checker, SharedParam, Sig, Slot, DEFERRED};
use super::emit::host_device;
use super::ir::{DeviceFn, IdBuiltin, Kernel, ParamKind, Shared, SubgroupOp, Ty};
use super::{combine, parse, Errors};

const BUNDLE: &str = "__graphed_bundle";
const POISONED: &str = "__graphed_bundle_poisoned";

/// Which expansion a chain resumes.
#[derive(Clone, Copy)]
pub enum Mode {
    /// A `#[kernel]`.
    Kernel,
    /// A `#[device]` function that calls others.
    Device,
}

/// The helpers a body may call: signatures, the names that call them, and their IR.
#[derive(Default)]
pub struct Helpers {
    /// Every helper reached, directly or not; indices are `ExprKind::Call`'s.
    pub sigs: Vec<Sig>,
    /// The body's callees, by path as written.
    pub names: HashMap<String, usize>,
    /// The helpers' IR, in the order of `sigs`.
    pub fns: Vec<DeviceFn>,
}

impl Helpers {
    /// The callees `calls`, before their definitions arrive: the body is checked for every
    /// other mistake, and the calls are checked once the definitions are here.
    pub fn deferred(calls: &[syn::Path]) -> Helpers {
        Helpers {
            sigs: Vec::new(),
            names: calls.iter().map(|c| (path_key(c), DEFERRED)).collect(),
            fns: Vec::new(),
        }
    }
}

fn is_builtin(name: &str) -> bool {
    super::ir::MathFn::from_name(name).is_some()
        || super::ir::AtomicOp::from_name(name).is_some()
        || id_builtin(name).is_some()
        || super::ir::SubgroupOp::from_name(name).is_some()
        || matches!(
            name,
            "barrier"
                | "device_fence"
                | "shared"
                | super::mma::NAME
                | super::ldmatrix::NAME
                | super::ldmatrix::NAME_TRANS
                | super::copy_async::NAME
                | super::copy_async::COMMIT
                | super::copy_async::WAIT
        )
}

fn id_builtin(name: &str) -> Option<IdBuiltin> {
    Some(match name {
        "global_id" => IdBuiltin::GlobalId,
        "local_id" => IdBuiltin::LocalId,
        "workgroup_id" => IdBuiltin::WorkgroupId,
        "num_workgroups" => IdBuiltin::NumWorkgroups,
        "workgroup_size" => IdBuiltin::WorkgroupSize,
        "global_size" => IdBuiltin::GlobalSize,
        _ => return None,
    })
}

/// The key a callee is known by: its path as written.
fn path_key(p: &syn::Path) -> String {
    crate::tokens::shown(p)
}

/// The distinct callees of `func`'s body that may be `#[device]` functions, in order of first
/// call. A plain name that is a builtin, a parameter, the function itself, or a likely typo of
/// a builtin (reported by the checker with a suggestion) is not one; a path always is.
pub fn helper_calls(func: &syn::ItemFn) -> Vec<syn::Path> {
    struct Calls<'a> {
        skip: Vec<String>,
        own: &'a str,
        found: Vec<syn::Path>,
    }
    impl<'ast> Visit<'ast> for Calls<'_> {
        fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
            if let syn::Expr::Path(p) = &*c.func {
                if p.qself.is_none() && self.candidate(&p.path) {
                    let key = path_key(&p.path);
                    if !self.found.iter().any(|f| path_key(f) == key) {
                        self.found.push(p.path.clone());
                    }
                }
            }
            syn::visit::visit_expr_call(self, c);
        }
        // Items inside a body are rejected by the checker; their calls are not callees.
        fn visit_item(&mut self, _: &'ast syn::Item) {}
    }
    impl Calls<'_> {
        fn candidate(&self, path: &syn::Path) -> bool {
            if path
                .segments
                .iter()
                .any(|s| !matches!(s.arguments, syn::PathArguments::None))
            {
                return false;
            }
            if let Some(id) = path.get_ident() {
                let n = id.to_string();
                return !is_builtin(&n)
                    && !self.skip.contains(&n)
                    && crate::suggest::closest(&n, crate::suggest::BUILTIN_FNS.iter().copied())
                        .is_none();
            }
            let first = path.segments[0].ident.to_string();
            let last = path.segments.last().map(|s| s.ident.to_string());
            // `f32::max(a, b)` is a misplaced builtin (the checker says so); `self::f` is the
            // function itself.
            let builtin_path = matches!(
                first.as_str(),
                "f32" | "i32" | "u32" | "bool" | "std" | "core"
            );
            // `bf16::from_bits(w)` / `f16::from_bits(w)` is a builtin (and `f16::max` a
            // misplaced one).
            let half_path = matches!(first.as_str(), "f16" | "bf16");
            let itself =
                first == "self" && path.segments.len() == 2 && last.as_deref() == Some(self.own);
            !builtin_path && !half_path && !itself
        }
    }
    let own = func.sig.ident.to_string();
    let mut skip = vec![own.clone()];
    for input in &func.sig.inputs {
        if let syn::FnArg::Typed(pt) = input {
            if let syn::Pat::Ident(id) = &*pt.pat {
                skip.push(id.ident.to_string());
            }
        }
    }
    let mut c = Calls {
        skip,
        own: &own,
        found: Vec::new(),
    };
    c.visit_block(&func.block);
    c.found
}

fn callback(mode: Mode) -> TokenStream {
    match mode {
        Mode::Kernel => quote!(::graphed::__private::kernel_resume),
        Mode::Device => quote!(::graphed::__private::device_resume),
    }
}

/// The first step of a caller's chain: a call of its first callee's macro.
pub fn chain(
    mode: Mode,
    args: TokenStream,
    func: &syn::ItemFn,
    calls: Vec<syn::Path>,
) -> TokenStream {
    step(mode, &args, &func.to_token_stream(), &calls, &[])
}

fn step(
    mode: Mode,
    args: &TokenStream,
    item: &TokenStream,
    calls: &[syn::Path],
    bundles: &[TokenStream],
) -> TokenStream {
    let next = &calls[bundles.len()];
    let cb = callback(mode);
    // Where the callee is missing, rustc reports its macro; for a path (`m::gleu`) it
    // suggests no similar name, so the function is named too, where it does.
    let probe = (bundles.is_empty() && next.segments.len() > 1).then(|| {
        let probes = calls.iter().filter(|c| c.segments.len() > 1);
        quote! { const _: () = { #( let _ = #probes; )* }; }
    });
    quote! {
        #probe
        #next! { #cb { (#args) { #item } [ #(#calls),* ] #(#bundles)* } }
    }
}

/// One helper in a bundle: its id, the ids its callees' names stand for, and its tokens.
struct Entry {
    id: String,
    callees: Vec<(String, String)>,
    item: syn::ItemFn,
    tokens: TokenStream,
}

enum Bundle {
    Ok(Vec<Entry>),
    /// The helper had errors (already reported where it is defined).
    Poisoned,
}

struct Resume {
    args: TokenStream,
    item: TokenStream,
    calls: Vec<syn::Path>,
    /// Each bundle as received (for the next step) and parsed.
    bundles: Vec<(TokenStream, Bundle)>,
}

fn internal(what: &str) -> syn::Error {
    syn::Error::new(
        Span::call_site(),
        format!("internal error in graphed's `#[device]` expansion ({what}); please report it"),
    )
}

fn group(tt: Option<TokenTree>, d: Delimiter, what: &str) -> syn::Result<TokenStream> {
    match tt {
        Some(TokenTree::Group(g)) if g.delimiter() == d => Ok(g.stream()),
        _ => Err(internal(what)),
    }
}

fn parse_resume(input: TokenStream) -> syn::Result<Resume> {
    let mut it = input.into_iter();
    let args = group(it.next(), Delimiter::Parenthesis, "arguments")?;
    let item = group(it.next(), Delimiter::Brace, "item")?;
    let calls = group(it.next(), Delimiter::Bracket, "callees")?;
    let calls = syn::parse::Parser::parse2(
        syn::punctuated::Punctuated::<syn::Path, syn::Token![,]>::parse_terminated,
        calls,
    )?
    .into_iter()
    .collect();
    let bundles = parse_bundles(it.collect())?;
    Ok(Resume {
        args,
        item,
        calls,
        bundles,
    })
}

/// Bundles as received, each with its parse.
fn parse_bundles(input: TokenStream) -> syn::Result<Vec<(TokenStream, Bundle)>> {
    let mut it = input.into_iter();
    let mut bundles = Vec::new();
    while let Some(tt) = it.next() {
        match &tt {
            TokenTree::Ident(i) if i == POISONED => {
                bundles.push((tt.to_token_stream(), Bundle::Poisoned));
            }
            TokenTree::Ident(i) if i == BUNDLE => {
                let body = group(it.next(), Delimiter::Brace, "bundle")?;
                let entries = parse_entries(body.clone())?;
                bundles.push((quote!(#tt { #body }), Bundle::Ok(entries)));
            }
            _ => return Err(internal("bundle")),
        }
    }
    Ok(bundles)
}

/// `id { "key" callee_id ... } ( fn ... )`, repeated.
fn parse_entries(body: TokenStream) -> syn::Result<Vec<Entry>> {
    let mut it = body.into_iter();
    let mut out = Vec::new();
    while let Some(tt) = it.next() {
        let TokenTree::Ident(id) = tt else {
            return Err(internal("entry id"));
        };
        let map = group(it.next(), Delimiter::Brace, "entry callees")?;
        let tokens = group(it.next(), Delimiter::Parenthesis, "entry item")?;
        let mut callees = Vec::new();
        let mut m = map.into_iter();
        while let Some(k) = m.next() {
            let (TokenTree::Literal(k), Some(TokenTree::Ident(v))) = (k, m.next()) else {
                return Err(internal("entry callee"));
            };
            let k: syn::LitStr = syn::parse2(k.into_token_stream())?;
            callees.push((k.value(), v.to_string()));
        }
        let item: syn::ItemFn = syn::parse2(tokens.clone())?;
        out.push(Entry {
            id: id.to_string(),
            callees,
            item,
            tokens,
        });
    }
    Ok(out)
}

/// What a helper's signature declares.
struct Declared {
    /// The scalar and slice parameters.
    params: Vec<super::ir::Param>,
    /// The workgroup-array parameters (`&[T; N]`, `&mut [T; N]`).
    shared: Vec<SharedParam>,
    /// The per-invocation arrays taken by value (`[T; N]`).
    arrays: Vec<ArrayParam>,
    /// A scalar return type.
    ret: Option<Ty>,
    /// An array return type (`-> [T; N]`): element type and length.
    ret_array: Option<(Ty, u32)>,
}

/// Most elements of an array a helper takes or returns by value (as of a per-invocation
/// array).
const MAX_VALUE_ARRAY: u32 = 1024;

/// `[T; N]` with `T` a scalar type and `N` an integer literal from 1 to `MAX_VALUE_ARRAY`.
fn value_array(a: &syn::TypeArray) -> Option<(Ty, u32)> {
    let elem = parse::scalar_type(&a.elem).filter(|t| *t != Ty::UVec3)?;
    let len = parse::int_lit(&a.len)?.base10_parse::<u32>().ok()?;
    (1..=MAX_VALUE_ARRAY).contains(&len).then_some((elem, len))
}

const VALUE_ARRAY_USAGE: &str = "an array passed by value is `[T; N]` with `T` one of `f32`, `f16`, `bf16`, `i32`, `u32`, `bool` and `N` an integer literal from 1 to 1024, e.g. `v: [f32; 4]` or `-> [f32; 4]`";

/// The per-invocation arrays `sig` takes by value (`v: [f32; 4]`, `mut v: [f32; 4]`).
fn array_params(sig: &syn::Signature, errors: &mut Errors) -> Vec<ArrayParam> {
    let mut out = Vec::new();
    for (pos, input) in sig.inputs.iter().enumerate() {
        let syn::FnArg::Typed(pt) = input else {
            continue;
        };
        let syn::Type::Array(a) = &*pt.ty else {
            continue;
        };
        let syn::Pat::Ident(id) = &*pt.pat else {
            errors.push(syn::Error::new_spanned(
                &pt.pat,
                "an array parameter is a plain name and a type: `v: [f32; 4]`",
            ));
            continue;
        };
        let Some((elem, len)) = value_array(a) else {
            errors.push(syn::Error::new_spanned(a, VALUE_ARRAY_USAGE));
            continue;
        };
        if id.by_ref.is_some() || id.subpat.is_some() {
            errors.push(syn::Error::new_spanned(
                input,
                format!(
                    "an array parameter is a plain name and a type: `{}: [{}; {len}]`",
                    id.ident,
                    elem.rust()
                ),
            ));
            continue;
        }
        if !parse::target_name(&id.ident, "a `#[device]` function's parameter", errors) {
            continue;
        }
        out.push(ArrayParam {
            pos,
            name: id.ident.to_string(),
            elem,
            len,
            mutable: id.mutability.is_some(),
        });
    }
    out
}

/// A helper's signature (`atomic`: the names its body, or a callee, uses atomically);
/// errors for what a helper cannot be.
fn signature(func: &syn::ItemFn, atomic: &[String], errors: &mut Errors) -> Declared {
    let (mut sig, shared) = shared_params(&func.sig, atomic, errors);
    let arrays = array_params(&func.sig, errors);
    // By-value arrays are no scalar or slice parameters (rejected ones are reported).
    sig.inputs = std::mem::take(&mut sig.inputs)
        .into_iter()
        .filter(|i| !matches!(i, syn::FnArg::Typed(pt) if matches!(&*pt.ty, syn::Type::Array(_))))
        .collect();
    let sig = &sig;
    let no = |errors: &mut Errors, node: &dyn ToTokens, what: &str| {
        errors.push(syn::Error::new_spanned(
            node,
            format!("a `#[device]` function cannot be {what}"),
        ));
    };
    if let Some(a) = &sig.asyncness {
        no(errors, a, "`async`");
    }
    if let Some(c) = &sig.constness {
        no(errors, c, "`const`");
    }
    if let Some(u) = &sig.unsafety {
        no(
            errors,
            u,
            "`unsafe` (slices are bounds-checked on the host)",
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        no(
            errors,
            &sig.generics,
            "generic (each target needs concrete types): write one per element type",
        );
    }
    if let Some(v) = &sig.variadic {
        no(errors, v, "variadic");
    }
    if let Some(abi) = &sig.abi {
        no(errors, abi, "`extern`");
    }
    let name = sig.ident.to_string();
    if parse::target_name(&sig.ident, "a `#[device]` function's name", errors) && is_builtin(&name)
    {
        errors.push(syn::Error::new_spanned(
            &sig.ident,
            format!("`{name}` is a builtin of the kernel language; name the `#[device]` function otherwise"),
        ));
    }
    let mut rejected = Vec::new();
    let params = parse::params(sig, atomic, errors, &mut rejected);
    let mut ret_array = None;
    let ret = match &sig.output {
        syn::ReturnType::Default => None,
        syn::ReturnType::Type(_, ty) => match (parse::scalar_type(ty), &**ty) {
            (Some(t), _) => Some(t),
            (None, syn::Type::Array(a)) => {
                match value_array(a) {
                    Some(r) => ret_array = Some(r),
                    None => errors.push(syn::Error::new_spanned(a, VALUE_ARRAY_USAGE)),
                }
                None
            }
            (None, _) => {
                errors.push(syn::Error::new_spanned(
                    ty,
                    format!("a `#[device]` function returns `f32`, `f16`, `bf16`, `i32`, `u32` or `bool`, an array of them (`[f32; 4]`), or nothing; not `{}` (write other results into a `&mut [T]` parameter)", crate::tokens::shown(ty)),
                ));
                None
            }
        },
    };
    Declared {
        params,
        shared,
        arrays,
        ret,
        ret_array,
    }
}

/// The workgroup-array parameters (`s: &[f32; 256]`, `s: &mut [u32; 64]`) of `sig`, and
/// `sig` without them.
fn shared_params(
    sig: &syn::Signature,
    atomic: &[String],
    errors: &mut Errors,
) -> (syn::Signature, Vec<SharedParam>) {
    let mut rest = sig.clone();
    rest.inputs.clear();
    let mut shared = Vec::new();
    for (pos, input) in sig.inputs.iter().enumerate() {
        let arr = match input {
            syn::FnArg::Typed(pt) => match (&*pt.pat, &*pt.ty) {
                (syn::Pat::Ident(id), syn::Type::Reference(r)) => match &*r.elem {
                    syn::Type::Array(a) => Some((id, r, a)),
                    _ => None,
                },
                _ => None,
            },
            syn::FnArg::Receiver(_) => None,
        };
        let Some((id, r, a)) = arr else {
            rest.inputs.push(input.clone());
            continue;
        };
        let name = id.ident.to_string();
        let elem = parse::scalar_type(&a.elem).filter(|t| *t != Ty::Bool);
        let size = parse::int_lit(&a.len)
            .and_then(|n| n.base10_parse::<u32>().ok())
            .filter(|n| *n > 0);
        if elem.is_none() || size.is_none() {
            errors.push(syn::Error::new_spanned(
                a,
                "a workgroup-array parameter is `&[T; N]` or `&mut [T; N]` with `T` one of `f32`, `i32`, `u32` and `N` an integer literal above 0, e.g. `s: &mut [f32; 256]`",
            ));
        }
        // A rejected one is still an array, of no known bound: its uses add no errors.
        let (elem, size) = (elem.unwrap_or(Ty::F32), size.unwrap_or(u32::MAX));
        if r.lifetime.is_some() || id.mutability.is_some() || id.by_ref.is_some() {
            errors.push(syn::Error::new_spanned(
                input,
                format!("a workgroup-array parameter is a plain name and a type: `{name}: &mut [{}; {size}]`", elem.rust()),
            ));
        }
        if !parse::target_name(&id.ident, "a `#[device]` function's parameter", errors) {
            continue;
        }
        if atomic.contains(&name) && !elem.is_int() {
            errors.push(syn::Error::new_spanned(
                a,
                format!(
                    "atomics act on `u32` or `i32`; `{name}` holds `{}`",
                    elem.rust()
                ),
            ));
        }
        shared.push(SharedParam {
            pos,
            shared: Shared {
                name,
                elem,
                size,
                atomic: atomic.contains(&id.ident.to_string()),
            },
            mutable: r.mutability.is_some(),
        });
    }
    (rest, shared)
}

/// The helper calls of `block`: each callee's path as written and its arguments' names
/// (where an argument is a plain name).
fn call_args(block: &syn::Block) -> Vec<(String, Vec<Option<String>>)> {
    struct Calls(Vec<(String, Vec<Option<String>>)>);
    impl<'ast> Visit<'ast> for Calls {
        fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
            if let syn::Expr::Path(p) = &*c.func {
                let args = c
                    .args
                    .iter()
                    .map(|a| match a {
                        syn::Expr::Path(ap) => ap.path.get_ident().map(|i| i.to_string()),
                        _ => None,
                    })
                    .collect();
                self.0.push((path_key(&p.path), args));
            }
            syn::visit::visit_expr_call(self, c);
        }
        fn visit_item(&mut self, _: &'ast syn::Item) {}
    }
    let mut c = Calls(Vec::new());
    c.visit_block(block);
    c.0
}

/// The names `block` passes where a callee (of `sigs`, by `names`) acts atomically: they
/// are atomic in the caller too (WGSL types the memory `atomic<T>` in every function).
pub fn atomic_args(
    block: &syn::Block,
    sigs: &[Sig],
    names: &HashMap<String, usize>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (key, args) in call_args(block) {
        let Some(sig) = names.get(&key).and_then(|&i| sigs.get(i)) else {
            continue;
        };
        for (slot, a) in sig.slots().into_iter().zip(args) {
            let atomic = match slot {
                Slot::Param(j) => {
                    matches!(sig.params[j].kind, ParamKind::Slice { atomic: true, .. })
                }
                Slot::Shared(j) => sig.shared[j].shared.atomic,
                Slot::Array(_) => false,
            };
            if let (true, Some(a)) = (atomic, a) {
                out.push(a);
            }
        }
    }
    out
}

/// Whether `block` calls `barrier()` itself.
fn calls_barrier(block: &syn::Block) -> bool {
    call_args(block).iter().any(|(k, _)| k == "barrier")
}

/// What subgroup builtins `block` (of helper `name`) calls itself: whether any, and the
/// first that exchanges values between invocations.
fn own_subgroup(block: &syn::Block, name: &str) -> (bool, Option<(SubgroupOp, String)>) {
    let ops: Vec<SubgroupOp> = call_args(block)
        .iter()
        .filter_map(|(k, _)| SubgroupOp::from_name(k))
        .collect();
    let exchange = ops.iter().find(|op| op.arity() > 0);
    (!ops.is_empty(), exchange.map(|&op| (op, name.to_string())))
}

/// What subgroup builtins a helper reaches: its own (`own`) and its callees' (`names` into
/// `sigs`).
fn reached_subgroup(
    own: (bool, Option<(SubgroupOp, String)>),
    names: &HashMap<String, usize>,
    sigs: &[Sig],
) -> (bool, Option<(SubgroupOp, String)>) {
    let (mut any, mut exchange) = own;
    let mut callees: Vec<usize> = names.values().copied().collect();
    callees.sort_unstable();
    for c in callees {
        any |= sigs[c].has_subgroup;
        if exchange.is_none() {
            exchange = sigs[c].exchange.clone();
        }
    }
    (any, exchange)
}

/// The signatures of `entries` (whose callees are `names`): which parameters are used
/// atomically and whether a barrier is reached are carried from callees to callers.
fn entry_sigs(
    entries: &[&Entry],
    names: &[HashMap<String, usize>],
    errors: &mut Errors,
) -> Vec<Sig> {
    let own_atomic: Vec<Vec<String>> = entries
        .iter()
        .map(|e| super::atomic_params(&e.item.block))
        .collect();
    type Subgroup = (bool, Option<(SubgroupOp, String)>);
    let sig_of =
        |e: &Entry, atomic: &[String], barrier: bool, subgroup: &Subgroup, errors: &mut Errors| {
            let d = signature(&e.item, atomic, errors);
            Sig {
                id: e.id.clone(),
                name: e.item.sig.ident.to_string(),
                params: d.params,
                shared: d.shared,
                arrays: d.arrays,
                ret: d.ret,
                ret_array: d.ret_array,
                has_barrier: barrier,
                has_subgroup: subgroup.0,
                exchange: subgroup.1.clone(),
            }
        };
    let own_sub: Vec<Subgroup> = entries
        .iter()
        .map(|e| own_subgroup(&e.item.block, &e.item.sig.ident.to_string()))
        .collect();
    let mut sub = own_sub.clone();
    let mut atomic = own_atomic.clone();
    let mut barrier: Vec<bool> = entries
        .iter()
        .map(|e| calls_barrier(&e.item.block))
        .collect();
    let mut sigs: Vec<Sig> = entries
        .iter()
        .enumerate()
        .map(|(k, e)| sig_of(e, &atomic[k], barrier[k], &sub[k], &mut Errors::new()))
        .collect();
    // Callees first or not, each round carries one more level; no chain is longer than
    // the number of helpers.
    for _ in 0..entries.len() {
        let mut changed = false;
        for (k, e) in entries.iter().enumerate() {
            let mut a = own_atomic[k].clone();
            a.extend(atomic_args(&e.item.block, &sigs, &names[k]));
            let b = barrier[k] || names[k].values().any(|&c| sigs[c].has_barrier);
            let g = reached_subgroup(own_sub[k].clone(), &names[k], &sigs);
            if b != barrier[k] || g != sub[k] || a.iter().any(|n| !atomic[k].contains(n)) {
                changed = true;
                barrier[k] = b;
                atomic[k] = a;
                sub[k] = g;
                sigs[k] = sig_of(e, &atomic[k], b, &sub[k], &mut Errors::new());
            }
        }
        if !changed {
            break;
        }
    }
    entries
        .iter()
        .enumerate()
        .map(|(k, e)| sig_of(e, &atomic[k], barrier[k], &sub[k], errors))
        .collect()
}

/// Checks and lowers helper `func` of signature `sig`, which calls `sigs` by `names`.
fn lower_helper(
    func: &syn::ItemFn,
    sig: &Sig,
    sigs: Vec<Sig>,
    names: HashMap<String, usize>,
    errors: &mut Errors,
) -> DeviceFn {
    let mut atomic = super::atomic_params(&func.block);
    atomic.extend(atomic_args(&func.block, &sigs, &names));
    let reach: Vec<super::uniformity::Reach> = sigs
        .iter()
        .map(|s| super::uniformity::Reach {
            name: s.name.clone(),
            barrier: s.has_barrier,
            exchange: s.exchange.clone(),
        })
        .collect();
    let mut checker = Checker::new(errors, sig.name.clone(), sig.params.clone(), [1, 1, 1]);
    checker.atomic_names(atomic);
    checker.set_helpers(sigs, names);
    checker.set_shared_params(&sig.shared);
    let array_params = checker.set_array_params(&sig.arrays);
    let body = checker.device_body(&func.block, sig.ret, sig.ret_array);
    let arrays = checker.arrays();
    let (params, shared, has_barrier) = checker.finish();
    let f = DeviceFn {
        id: sig.id.clone(),
        name: sig.name.clone(),
        params,
        ret: sig.ret,
        body,
        shared,
        arrays,
        array_params,
        ret_array: sig.ret_array,
        has_barrier,
        has_subgroup: sig.has_subgroup,
        exchange: sig.exchange.clone(),
    };
    super::uniformity::check_helper(&f, &reach, errors);
    f
}

/// The helpers that `calls` (with their `bundles`) bring: `None` if one had errors.
fn resolve(
    calls: &[syn::Path],
    bundles: &[(TokenStream, Bundle)],
    errors: &mut Errors,
) -> Option<(Helpers, Vec<TokenStream>)> {
    let mut entries: Vec<&Entry> = Vec::new();
    let mut names = HashMap::new();
    for (path, (_, b)) in calls.iter().zip(bundles) {
        let Bundle::Ok(es) = b else {
            return None;
        };
        for e in es {
            if !entries.iter().any(|x| x.id == e.id) {
                entries.push(e);
            }
        }
        let first = &es.first()?.id;
        let idx = entries.iter().position(|x| &x.id == first)?;
        names.insert(path_key(path), idx);
    }
    let index = |id: &str| entries.iter().position(|x| x.id == id);
    let own_names: Vec<HashMap<String, usize>> = entries
        .iter()
        .map(|e| {
            e.callees
                .iter()
                .filter_map(|(k, id)| Some((k.clone(), index(id)?)))
                .collect()
        })
        .collect();
    let sigs = entry_sigs(&entries, &own_names, errors);
    let mut fns = Vec::new();
    for ((e, sig), own) in entries.iter().zip(&sigs).zip(own_names) {
        fns.push(lower_helper(&e.item, sig, sigs.clone(), own, errors));
    }
    let tokens = entries
        .iter()
        .map(|e| {
            let id = format_ident!("{}", e.id);
            let map = e.callees.iter().map(|(k, v)| {
                let k = Literal::string(k);
                let v = format_ident!("{}", v);
                quote!(#k #v)
            });
            let t = &e.tokens;
            quote!(#id { #(#map)* } ( #t ))
        })
        .collect();
    Some((Helpers { sigs, names, fns }, tokens))
}

/// `#[kernel]`'s last step: every callee's bundle arrived.
pub fn kernel_resume(input: TokenStream) -> TokenStream {
    let r = match parse_resume(input) {
        Ok(r) => r,
        Err(e) => return e.to_compile_error(),
    };
    let raw: Vec<TokenStream> = r.bundles.iter().map(|(t, _)| t.clone()).collect();
    if raw.len() < r.calls.len() {
        return step(Mode::Kernel, &r.args, &r.item, &r.calls, &raw);
    }
    let func: syn::ItemFn = match syn::parse2(r.item) {
        Ok(f) => f,
        Err(e) => return e.to_compile_error(),
    };
    let mut errors = Errors::new();
    let Some((helpers, _)) = resolve(&r.calls, &r.bundles, &mut errors) else {
        // A callee had errors, reported where it is defined.
        let params = parse::params(&func.sig, &[], &mut Errors::new(), &mut Vec::new());
        return super::stub(&func, &params);
    };
    if !errors.is_empty() {
        return combine(errors).to_compile_error();
    }
    match super::lower_with(r.args, &func, helpers) {
        Ok(kernel) => super::generate(&func, &kernel),
        Err((errors, params)) => {
            let err = combine(errors).to_compile_error();
            let stub = super::stub(&func, &params);
            quote! { #err #stub }
        }
    }
}

/// `#[device] item`.
pub fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let func: syn::ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => {
            let msg = format!("`#[device]` applies to a function: `#[device] fn gelu(x: f32) -> f32 {{ ... }}` ({e})");
            return syn::Error::new(e.span(), msg).to_compile_error();
        }
    };
    if !args.is_empty() {
        let err =
            syn::Error::new_spanned(&args, "`#[device]` takes no arguments").to_compile_error();
        let out = finish_device(&func, &[], &[]);
        return quote!(#err #out);
    }
    let calls = helper_calls(&func);
    if calls.is_empty() {
        return finish_device(&func, &[], &[]);
    }
    // Every mistake but those of the calls is reported now, without the callees.
    let mut errors = Errors::new();
    let atomic = super::atomic_params(&func.block);
    let d = signature(&func, &atomic, &mut errors);
    let h = Helpers::deferred(&calls);
    let mut checker = Checker::new(&mut errors, func.sig.ident.to_string(), d.params, [1, 1, 1]);
    checker.atomic_names(atomic);
    checker.set_helpers(h.sigs, h.names);
    checker.set_shared_params(&d.shared);
    checker.set_array_params(&d.arrays);
    checker.device_body(&func.block, d.ret, d.ret_array);
    checker.finish();
    if !errors.is_empty() {
        return poisoned(&func, Some(errors));
    }
    chain(Mode::Device, TokenStream::new(), &func, calls)
}

/// `#[device]`'s step: a callee's bundle arrived.
pub fn device_resume(input: TokenStream) -> TokenStream {
    let r = match parse_resume(input) {
        Ok(r) => r,
        Err(e) => return e.to_compile_error(),
    };
    let raw: Vec<TokenStream> = r.bundles.iter().map(|(t, _)| t.clone()).collect();
    if raw.len() < r.calls.len() {
        return step(Mode::Device, &r.args, &r.item, &r.calls, &raw);
    }
    match syn::parse2::<syn::ItemFn>(r.item) {
        Ok(func) => finish_device(&func, &r.calls, &r.bundles),
        Err(e) => e.to_compile_error(),
    }
}

/// A helper's id and macro name, unique over every crate: a hash of its tokens, of where it
/// is expanded (`#[macro_export]` puts every macro at the crate root) and of its callees.
fn unique(func: &syn::ItemFn, deps: &[String]) -> (String, syn::Ident) {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    func.to_token_stream().to_string().hash(&mut h);
    format!("{:?}", Span::call_site()).hash(&mut h);
    deps.hash(&mut h);
    let hash = h.finish() & 0xffff_ffff_ffff;
    let name = func.sig.ident.to_string();
    (
        format!("gd_fn_{name}_{hash:012x}"),
        format_ident!("__graphed_device_{}_{:012x}", name, hash),
    )
}

/// The macro that hands `bundle` to callers, and its import under the function's name.
fn exporter(func: &syn::ItemFn, mac: &syn::Ident, bundle: TokenStream) -> TokenStream {
    let vis = &func.vis;
    let name = &func.sig.ident;
    quote! {
        #[doc(hidden)]
        #[macro_export]
        macro_rules! #mac {
            ($cb:path { $($t:tt)* }) => { $cb! { $($t)* #bundle } };
        }
        #[doc(hidden)]
        #[allow(unused_imports)]
        #vis use #mac as #name;
    }
}

fn poisoned(func: &syn::ItemFn, errors: Option<Errors>) -> TokenStream {
    let err = errors.map(|e| combine(e).to_compile_error());
    let (_, mac) = unique(func, &[]);
    let attrs = &func.attrs;
    let vis = &func.vis;
    let sig = &func.sig;
    let exporter = exporter(func, &mac, quote!(__graphed_bundle_poisoned));
    quote! {
        #err
        #(#attrs)*
        #[allow(unused, missing_docs)]
        #vis #sig { ::core::unimplemented!() }
        #exporter
    }
}

/// A lowered helper: its IR, its callees', and the bundle its macro hands to callers.
struct Built {
    own: DeviceFn,
    helpers: Helpers,
    bundle: TokenStream,
    mac: syn::Ident,
}

/// Lowers helper `func` whose `calls` brought `bundles`; `Err(None)` when a callee had errors
/// (reported where it is defined).
fn build(
    func: &syn::ItemFn,
    calls: &[syn::Path],
    bundles: &[(TokenStream, Bundle)],
) -> Result<Built, Option<Errors>> {
    let mut errors = Errors::new();
    let Some((helpers, dep_tokens)) = resolve(calls, bundles, &mut errors) else {
        return Err(if errors.is_empty() {
            None
        } else {
            Some(errors)
        });
    };
    let deps: Vec<String> = helpers.sigs.iter().map(|s| s.id.clone()).collect();
    let (id, mac) = unique(func, &deps);
    let mut atomic = super::atomic_params(&func.block);
    atomic.extend(atomic_args(&func.block, &helpers.sigs, &helpers.names));
    let d = signature(func, &atomic, &mut errors);
    let has_barrier =
        calls_barrier(&func.block) || helpers.names.values().any(|&c| helpers.sigs[c].has_barrier);
    let name = func.sig.ident.to_string();
    let (has_subgroup, exchange) = reached_subgroup(
        own_subgroup(&func.block, &name),
        &helpers.names,
        &helpers.sigs,
    );
    let sig = Sig {
        id: id.clone(),
        name,
        params: d.params,
        shared: d.shared,
        arrays: d.arrays,
        ret: d.ret,
        ret_array: d.ret_array,
        has_barrier,
        has_subgroup,
        exchange,
    };
    let own = lower_helper(
        func,
        &sig,
        helpers.sigs.clone(),
        helpers.names.clone(),
        &mut errors,
    );
    if !errors.is_empty() {
        return Err(Some(errors));
    }
    let mut map = Vec::new();
    for (path, (_, b)) in calls.iter().zip(bundles) {
        if let Bundle::Ok(es) = b {
            if let Some(first) = es.first() {
                let k = Literal::string(&path_key(path));
                let v = format_ident!("{}", first.id);
                map.push(quote!(#k #v));
            }
        }
    }
    let own_id = format_ident!("{}", id);
    let bundle = quote! {
        __graphed_bundle { #own_id { #(#map)* } ( #func ) #(#dep_tokens)* }
    };
    Ok(Built {
        own,
        helpers,
        bundle,
        mac,
    })
}

/// The last step of `#[device]`: lower the helper, emit its Rust form and its macro.
fn finish_device(
    func: &syn::ItemFn,
    calls: &[syn::Path],
    bundles: &[(TokenStream, Bundle)],
) -> TokenStream {
    let Built {
        own,
        helpers,
        bundle,
        mac,
    } = match build(func, calls, bundles) {
        Ok(b) => b,
        Err(errors) => return poisoned(func, errors),
    };
    let name = own.name.clone();
    let id = own.id.clone();
    // The Rust form: the host form of the helper and its callees, over cells copied from
    // the arguments; a fault (an index out of bounds) panics with its message.
    let mut fns = helpers.fns;
    fns.push(own.clone());
    let scope = Kernel {
        name: name.clone(),
        params: Vec::new(),
        shared: Vec::new(),
        workgroup: [1, 1, 1],
        min_workgroups: 0,
        body: Vec::new(),
        has_barrier: false,
        has_subgroup: false,
        arg_words: 0,
        helpers: fns,
        arrays: Vec::new(),
    };
    let host_src: String = scope
        .helpers
        .iter()
        .map(|f| host_device::helper_fn(&scope, f, &name))
        .collect();
    let host: TokenStream = match syn::parse_str(&host_src) {
        Ok(t) => t,
        Err(e) => return internal(&format!("host form: {e}")).to_compile_error(),
    };
    let mut prep = Vec::new();
    let mut args = Vec::new();
    let mut back = Vec::new();
    // The parameters as the signature spells them: the body is expanded in a macro's
    // context, where an identifier of another context would not name them.
    let idents: HashMap<String, syn::Ident> = func
        .sig
        .inputs
        .iter()
        .filter_map(|i| match i {
            syn::FnArg::Typed(pt) => match &*pt.pat {
                syn::Pat::Ident(id) => Some((id.ident.to_string(), id.ident.clone())),
                _ => None,
            },
            syn::FnArg::Receiver(_) => None,
        })
        .collect();
    for p in &own.params {
        let user = idents
            .get(&p.name)
            .cloned()
            .unwrap_or_else(|| format_ident!("{}", p.name));
        match p.kind {
            ParamKind::Scalar(_) => args.push(quote!(#user)),
            ParamKind::Slice { mutable, .. } => {
                let cells = format_ident!("gd_cells_{}", p.name);
                let pname = &p.name;
                prep.push(quote!(let #cells = gd::cells_of(&*#user);));
                args.push(quote!(gd::HostSlice::from_cells(&#cells, #user.len(), #name, #pname)));
                if mutable {
                    back.push(quote!(gd::copy_back(&#cells, #user);));
                }
            }
        }
    }
    for sh in &own.shared {
        let user = idents
            .get(&sh.name)
            .cloned()
            .unwrap_or_else(|| format_ident!("{}", sh.name));
        let arr = format_ident!("gd_shared_{}", sh.name);
        let (sname, t) = (&sh.name, format_ident!("{}", sh.elem.rust()));
        prep.push(quote!(let #arr = gd::HostShared::<#t>::from_values(&#user[..], #name, #sname);));
        args.push(quote!(&#arr));
        if own_mutable(&func.sig, sname) {
            back.push(quote!(#arr.copy_into(&mut #user[..]);));
        }
    }
    // Arrays by value: Rust arrays are `Copy`, passed as they are.
    for &a in &own.array_params {
        let src = &own.arrays[a].source;
        let user = idents
            .get(src)
            .cloned()
            .unwrap_or_else(|| format_ident!("{}", src));
        args.push(quote!(#user));
    }
    let own_fn = format_ident!("{}", id);
    // Called from Rust, the invocation is alone: a subgroup of one, whose reductions and
    // shuffles return its own value.
    if own.has_subgroup {
        prep.push(quote!(let gd_sg_alone = gd::HostSubgroups::new(1, 1);));
        args.push(quote!(&gd_sg_alone, 0u32));
    }
    // A helper that reaches a barrier or a subgroup operation is a future on the host;
    // alone, it never waits.
    let run = if own.has_barrier || own.has_subgroup {
        quote!(gd::run_alone(#own_fn(#(#args),*)))
    } else {
        quote!(#own_fn(#(#args),*))
    };
    let attrs = &func.attrs;
    let default_doc = if attrs.iter().any(|a| a.path().is_ident("doc")) {
        quote!()
    } else {
        let d = format!("`#[device]` function `{name}`: its Rust form, for the CPU (panics where the host backend would fault).");
        quote!(#[doc = #d])
    };
    let vis = &func.vis;
    let sig = &func.sig;
    let exporter = exporter(func, &mac, bundle);
    // A `mut v: [T; N]` is written in the host form's copy, not here.
    let allow = if own.array_params.is_empty() {
        quote!()
    } else {
        quote!(#[allow(unused_mut)])
    };
    quote! {
        #(#attrs)*
        #default_doc
        #allow
        #vis #sig {
            use ::graphed::__private as gd;
            use ::graphed::{bf16, f16};
            #host
            #(#prep)*
            let gd_r = #run;
            #(#back)*
            match gd_r {
                ::core::result::Result::Ok(v) => v,
                ::core::result::Result::Err(f) => ::core::panic!("{}", f),
            }
        }
        #exporter
    }
}

/// Whether parameter `name` of `sig` is a `&mut` reference.
fn own_mutable(sig: &syn::Signature, name: &str) -> bool {
    sig.inputs.iter().any(|i| match i {
        syn::FnArg::Typed(pt) => {
            matches!(&*pt.pat, syn::Pat::Ident(id) if id.ident == name)
                && matches!(&*pt.ty, syn::Type::Reference(r) if r.mutability.is_some())
        }
        syn::FnArg::Receiver(_) => false,
    })
}

/// The expansion without rustc, for tests and fuzzing: `helpers` (in an order where callees
/// come first) are built as `#[device]` builds them, each callee found by its last path
/// segment, then `kernel` (if any) is lowered with its callees' bundles. Errors as strings;
/// the first helper with errors stops; `Err` of nothing when there is no kernel.
pub fn lower_with_helpers(
    args: TokenStream,
    kernel: Option<TokenStream>,
    helpers: &[TokenStream],
) -> Result<Kernel, Vec<String>> {
    let strings = |e: Errors| e.iter().map(|e| e.to_string()).collect::<Vec<_>>();
    let mut built: Vec<(String, TokenStream)> = Vec::new();
    let bundles_for = |calls: &[syn::Path],
                       built: &[(String, TokenStream)]|
     -> Result<Vec<(TokenStream, Bundle)>, Vec<String>> {
        let mut out = Vec::new();
        for c in calls {
            let last = c
                .segments
                .last()
                .map(|s| s.ident.to_string())
                .unwrap_or_default();
            let Some((_, raw)) = built.iter().find(|(n, _)| *n == last) else {
                return Err(vec![format!("cannot find macro `{last}`")]);
            };
            out.extend(parse_bundles(raw.clone()).map_err(|e| vec![e.to_string()])?);
        }
        Ok(out)
    };
    for h in helpers {
        let func: syn::ItemFn = syn::parse2(h.clone()).map_err(|e| vec![e.to_string()])?;
        let calls = helper_calls(&func);
        let bundles = bundles_for(&calls, &built)?;
        match build(&func, &calls, &bundles) {
            Ok(b) => built.push((func.sig.ident.to_string(), b.bundle)),
            Err(Some(e)) => return Err(strings(e)),
            Err(None) => return Err(vec!["a callee had errors".into()]),
        }
    }
    let Some(kernel) = kernel else {
        return Err(Vec::new());
    };
    let func: syn::ItemFn = syn::parse2(kernel).map_err(|e| vec![e.to_string()])?;
    let calls = helper_calls(&func);
    let bundles = bundles_for(&calls, &built)?;
    let mut errors = Errors::new();
    let Some((h, _)) = resolve(&calls, &bundles, &mut errors) else {
        return Err(vec!["a callee had errors".into()]);
    };
    if !errors.is_empty() {
        return Err(strings(errors));
    }
    super::lower_with(args, &func, h).map_err(|(e, _)| strings(e))
}
