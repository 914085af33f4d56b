//! Reads a step function's signature into parameter roles.

use proc_macro2::TokenStream;
use syn::spanned::Spanned;

pub enum Role {
    /// `x: &Input<T>`: copied into a static input slot on every call.
    Input { elem: syn::Type },
    /// `#[state] w: &mut Buffer<T>` / `&Buffer<T>`: a user-owned buffer, keyed by allocation.
    State { mutable: bool },
    /// `lr: f32`: a per-step scalar in device memory.
    Scalar { ty: syn::Type },
    /// `#[key] flag: bool`: part of the capture key.
    Key { hashed: bool },
}

pub struct Param {
    pub name: syn::Ident,
    pub ty: syn::Type,
    pub role: Role,
}

pub struct Step {
    /// The generated holder type (`train_step` → `TrainStep`).
    pub holder: syn::Ident,
    /// The step's name without a raw-identifier prefix, for generated names.
    pub base_name: String,
    pub cx_mut: bool,
    pub params: Vec<Param>,
    /// Element types of the outputs (empty for `()`); `tuple` when written as a tuple.
    pub outputs: Vec<syn::Type>,
    pub tuple: bool,
}

const SCALARS: &[&str] = &["f32", "i32", "u32", "bool", "f16", "bf16"];
const KEYS: &[&str] = &[
    "bool", "u8", "u16", "u32", "u64", "usize", "i8", "i16", "i32", "i64", "isize",
];
/// Names of `graphed::prelude`: a holder type named like one would shadow it in user code.
const PRELUDE: &[&str] = &[
    "Buffer", "Device", "Error", "Grid", "Input", "Launch", "Out", "Output", "Result", "Scalar",
    "Step",
];
const EXAMPLE: &str = "`#[graphed] fn train(cx: &mut Step, #[state] w: &mut Buffer<f32>, x: &Input<f32>, lr: f32) -> Result<Output<f32>>`";

fn last_segment(ty: &syn::Type) -> Option<&syn::PathSegment> {
    match ty {
        syn::Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        _ => None,
    }
}

/// The single generic argument of `Name<T>`.
fn generic_of<'a>(ty: &'a syn::Type, name: &str) -> Option<&'a syn::Type> {
    let seg = last_segment(ty)?;
    if seg.ident != name {
        return None;
    }
    match &seg.arguments {
        syn::PathArguments::AngleBracketed(a) if a.args.len() == 1 => match &a.args[0] {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        },
        _ => None,
    }
}

fn ident_is(ty: &syn::Type, names: &[&str]) -> bool {
    matches!(ty, syn::Type::Path(p) if p.qself.is_none() && p.path.get_ident().is_some_and(|i| names.iter().any(|n| i == n)))
}

pub fn is_role_attr(a: &syn::Attribute) -> bool {
    a.path().is_ident("state") || a.path().is_ident("key")
}

pub fn strip_role_attrs(func: &mut syn::ItemFn) {
    for input in func.sig.inputs.iter_mut() {
        if let syn::FnArg::Typed(pt) = input {
            pt.attrs.retain(|a| !is_role_attr(a));
        }
    }
}

fn camel(name: &str) -> String {
    name.split('_')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let mut c = s.chars();
            c.next()
                .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// The holder type's name, or why the step's name cannot give one.
fn holder_name(ident: &syn::Ident) -> syn::Result<(syn::Ident, String)> {
    let raw = ident.to_string();
    let base = raw.trim_start_matches("r#").to_string();
    let name = camel(&base);
    let rename = |why: String| {
        syn::Error::new(
            ident.span(),
            format!("{why}; rename the step, e.g. `train_step` (its holder is `TrainStep`)"),
        )
    };
    if PRELUDE.contains(&name.as_str()) {
        return Err(rename(format!(
            "the holder type of `{raw}` would be `{name}`, which shadows graphed's `{name}` in this module"
        )));
    }
    // `syn::Ident`'s parser also rejects keywords (`self_` → `Self`).
    if name.is_empty() || syn::parse_str::<syn::Ident>(&name).is_err() {
        return Err(rename(format!(
            "the holder type is named from the step in CamelCase, and `{raw}` gives `{name}`, which is not a type name"
        )));
    }
    Ok((syn::Ident::new(&name, ident.span()), base))
}

/// Why a step parameter type is not accepted, with what to write instead.
fn param_type_error(ty: &syn::Type) -> String {
    let usage = "a step takes `x: &Input<T>` (per-call data), `#[state] w: &mut Buffer<T>` (persistent buffers), `lr: f32`/`i32`/`u32`/`bool` (per-step scalars) or `#[key] flag: bool`/integer (structural)";
    let shown = crate::tokens::shown(ty);
    let hint = match ty {
        syn::Type::Reference(r) if generic_of(&r.elem, "Input").is_some() => {
            "inputs are read-only: write `&Input<T>`; a buffer the step writes is `#[state] w: &mut Buffer<T>`".to_string()
        }
        syn::Type::Reference(r) if generic_of(&r.elem, "Output").is_some() => {
            "outputs are not parameters: make them in the body with `cx.output::<T>(len)?` and return them".to_string()
        }
        syn::Type::Reference(r)
            if matches!(&*r.elem, syn::Type::Slice(_))
                || generic_of(&r.elem, "Vec").is_some() =>
        {
            format!("per-call data is `&Input<T>` (the caller passes a slice or a buffer), not `{shown}`")
        }
        _ if generic_of(ty, "Vec").is_some() => format!(
            "per-call data is `&Input<T>` (the caller passes a slice or a buffer), not `{shown}`"
        ),
        _ if generic_of(ty, "Buffer").is_some() || generic_of(ty, "Input").is_some() => {
            format!("take buffers by reference, not `{shown}` by value")
        }
        _ if ident_is(ty, &["f64"]) => {
            format!("per-step scalars are 32-bit (they live in device memory): use `f32` instead of `{shown}`")
        }
        _ if ident_is(ty, KEYS) => format!(
            "a per-step scalar is `i32` or `u32`; an integer that selects structure is `#[key] n: {shown}`"
        ),
        _ => format!("`{shown}` is not a step parameter type"),
    };
    format!("unsupported step parameter: {hint}; {usage}")
}

/// Reads the step's signature. The `Step` holds what was understood even when there are
/// errors, so the body can still be checked.
pub fn step(args: TokenStream, func: &syn::ItemFn, errors: &mut Vec<syn::Error>) -> Option<Step> {
    if !args.is_empty() {
        errors.push(syn::Error::new_spanned(&args, "`#[graphed]` takes no arguments; cache bounds and warm-up are set on the holder: `Train::with_config(&device, config)`"));
    }
    let sig = &func.sig;
    if let Some(a) = &sig.asyncness {
        errors.push(syn::Error::new_spanned(
            a,
            "a step cannot be `async`: it is recorded once and replayed, with no host waits inside; remove `async`",
        ));
    }
    if !sig.generics.params.is_empty() {
        let only_lifetimes = sig
            .generics
            .params
            .iter()
            .all(|p| matches!(p, syn::GenericParam::Lifetime(_)));
        let msg = if only_lifetimes {
            "a step takes no lifetime parameters: remove them and write plain references (`&Input<T>`, `&mut Buffer<T>`)"
        } else {
            "a step cannot be generic: a capture key cannot tell instantiations apart; write one step per type, or pass a choice as a `#[key]` parameter"
        };
        errors.push(syn::Error::new_spanned(&sig.generics, msg));
    } else if let Some(w) = &sig.generics.where_clause {
        errors.push(syn::Error::new_spanned(
            w,
            "a step has no `where` clause; remove it",
        ));
    }
    if let Some(c) = &sig.constness {
        errors.push(syn::Error::new_spanned(
            c,
            "a step cannot be `const`; remove `const`",
        ));
    }
    if let Some(u) = &sig.unsafety {
        errors.push(syn::Error::new_spanned(
            u,
            "a step cannot be `unsafe`: the holder calls it from safe code; remove `unsafe`",
        ));
    }
    if let Some(abi) = &sig.abi {
        errors.push(syn::Error::new_spanned(
            abi,
            "a step takes no ABI; remove it",
        ));
    }
    let holder = match holder_name(&sig.ident) {
        Ok(h) => Some(h),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let mut inputs = sig.inputs.iter();
    let mut cx_mut = false;
    let context = "a step takes its recording context first: `cx: &mut Step`, as in";
    match inputs.next() {
        Some(syn::FnArg::Typed(pt)) if is_step_ref(&pt.ty).is_some() => {
            cx_mut = is_step_ref(&pt.ty) == Some(true);
            if let Some(a) = pt.attrs.iter().find(|a| is_role_attr(a)) {
                errors.push(syn::Error::new_spanned(
                    a,
                    "the recording context takes no `#[state]` or `#[key]`; remove it",
                ));
            }
        }
        Some(syn::FnArg::Receiver(r)) => errors.push(syn::Error::new_spanned(
            r,
            format!("a step is a free function, not a method: {EXAMPLE}"),
        )),
        Some(syn::FnArg::Typed(pt)) => {
            let ty = &pt.ty;
            let found = if last_segment(ty).is_some_and(|s| s.ident == "Step") {
                format!(
                    " (found `{}`: take it by reference)",
                    crate::tokens::shown(ty)
                )
            } else {
                String::new()
            };
            errors.push(syn::Error::new(
                pt.span(),
                format!("{context} {EXAMPLE}{found}"),
            ))
        }
        None => errors.push(syn::Error::new(
            sig.paren_token.span.join(),
            format!("{context} {EXAMPLE}"),
        )),
    }
    let mut params = Vec::new();
    for input in inputs {
        let pt = match input {
            syn::FnArg::Typed(pt) => pt,
            syn::FnArg::Receiver(r) => {
                errors.push(syn::Error::new_spanned(
                    r,
                    format!("a step is a free function, not a method: {EXAMPLE}"),
                ));
                continue;
            }
        };
        let name = match &*pt.pat {
            syn::Pat::Ident(id) if id.by_ref.is_none() && id.subpat.is_none() => id.ident.clone(),
            other => {
                errors.push(syn::Error::new_spanned(
                    other,
                    "a step parameter is a plain name, like `x: &Input<f32>`",
                ));
                continue;
            }
        };
        let is_state = pt.attrs.iter().any(|a| a.path().is_ident("state"));
        let is_key = pt.attrs.iter().any(|a| a.path().is_ident("key"));
        for a in &pt.attrs {
            if !is_role_attr(a) {
                errors.push(syn::Error::new_spanned(
                    a,
                    "step parameters take only `#[state]` or `#[key]`",
                ));
            } else if !matches!(a.meta, syn::Meta::Path(_)) {
                errors.push(syn::Error::new_spanned(
                    a,
                    "`#[state]` and `#[key]` take no arguments",
                ));
            }
        }
        let ty = (*pt.ty).clone();
        let role = if is_state && is_key {
            errors.push(syn::Error::new_spanned(
                pt,
                "a parameter is `#[state]` (a persistent buffer) or `#[key]` (a structural value), not both",
            ));
            continue;
        } else if is_state {
            match &*pt.ty {
                // A `Buffer<T>`, or a struct of them (`#[derive(State)]`; the trait bound
                // says so when it is not).
                syn::Type::Reference(r)
                    if matches!(&*r.elem, syn::Type::Path(_))
                        && !ident_is(&r.elem, SCALARS)
                        && !ident_is(&r.elem, KEYS) =>
                {
                    Role::State {
                        mutable: r.mutability.is_some(),
                    }
                }
                other => {
                    let inner = match other {
                        syn::Type::Reference(r) => &*r.elem,
                        t => t,
                    };
                    let scalar = if ident_is(inner, SCALARS) || ident_is(inner, KEYS) {
                        "; a per-step value is a plain parameter without `#[state]`, and state that the step updates lives in a `Buffer`"
                    } else {
                        ""
                    };
                    errors.push(syn::Error::new_spanned(other, format!("a `#[state]` parameter is `&mut Buffer<T>` (or a `#[derive(State)]` struct of buffers), or `&Buffer<T>` when the step only reads it{scalar}")));
                    continue;
                }
            }
        } else if is_key {
            if ident_is(&pt.ty, &["f32", "f64"]) {
                errors.push(syn::Error::new_spanned(&pt.ty, "a `#[key]` parameter is a `bool`, an integer or another `Hash` value (e.g. `&[usize]`): it selects code paths and is part of the capture key; a float that changes per step is a plain `f32` parameter"));
                continue;
            }
            if matches!(&*pt.ty, syn::Type::Reference(r) if r.mutability.is_some()) {
                errors.push(syn::Error::new_spanned(&pt.ty, "a `#[key]` parameter is read, never written: take it by value or `&` (a `bool`, an integer, or any `Hash` value such as `&[usize]`)"));
                continue;
            }
            Role::Key {
                hashed: !ident_is(&pt.ty, KEYS),
            }
        } else {
            match &*pt.ty {
                syn::Type::Reference(r) if r.mutability.is_none() => {
                    match generic_of(&r.elem, "Input") {
                        Some(elem) => Role::Input { elem: elem.clone() },
                        None if generic_of(&r.elem, "Buffer").is_some() => {
                            errors.push(syn::Error::new_spanned(pt, "mark a buffer the step reads across calls as `#[state]`: `#[state] w: &Buffer<f32>`; per-call data is `x: &Input<f32>`"));
                            continue;
                        }
                        None => {
                            errors.push(syn::Error::new_spanned(&pt.ty, param_type_error(&pt.ty)));
                            continue;
                        }
                    }
                }
                t if ident_is(t, SCALARS) => Role::Scalar { ty: ty.clone() },
                syn::Type::Reference(r) if generic_of(&r.elem, "Buffer").is_some() => {
                    errors.push(syn::Error::new_spanned(pt, "mark a buffer the step updates in place as `#[state]`: `#[state] w: &mut Buffer<f32>`; per-call data is `x: &Input<f32>`"));
                    continue;
                }
                other => {
                    errors.push(syn::Error::new_spanned(other, param_type_error(other)));
                    continue;
                }
            }
        };
        params.push(Param { name, ty, role });
    }
    let (outputs, tuple) = match outputs(&sig.output) {
        Ok(o) => o,
        Err(e) => {
            errors.push(e);
            (Vec::new(), false)
        }
    };
    let (holder, base_name) = holder?;
    Some(Step {
        holder,
        base_name,
        cx_mut,
        params,
        outputs,
        tuple,
    })
}

/// `Some(mutable)` when `ty` is `&Step` or `&mut Step`.
fn is_step_ref(ty: &syn::Type) -> Option<bool> {
    match ty {
        syn::Type::Reference(r) if last_segment(&r.elem).is_some_and(|s| s.ident == "Step") => {
            Some(r.mutability.is_some())
        }
        _ => None,
    }
}

fn outputs(ret: &syn::ReturnType) -> syn::Result<(Vec<syn::Type>, bool)> {
    let usage = "a step returns `Result<Output<T>>`, `Result<(Output<A>, Output<B>, ...)>` or `Result<()>`: outputs are static slots made with `cx.output::<T>(len)?`, and the caller reads them after `call`";
    let syn::ReturnType::Type(_, ty) = ret else {
        return Err(syn::Error::new_spanned(
            ret,
            format!("{usage}; add `-> Result<()>` if the step only updates state"),
        ));
    };
    let Some(inner) = generic_of(ty, "Result") else {
        return Err(syn::Error::new_spanned(ty, usage));
    };
    let one = |t: &syn::Type| {
        generic_of(t, "Output").cloned().ok_or_else(|| {
            let host = if generic_of(t, "Vec").is_some() || ident_is(t, SCALARS) {
                " (a host value would need a readback inside the step, which a recording cannot do)"
            } else {
                ""
            };
            syn::Error::new_spanned(t, format!("{usage}{host}"))
        })
    };
    match inner {
        syn::Type::Tuple(t) if t.elems.is_empty() => Ok((Vec::new(), false)),
        syn::Type::Tuple(t) => Ok((t.elems.iter().map(one).collect::<syn::Result<_>>()?, true)),
        syn::Type::Paren(p) => Ok((vec![one(&p.elem)?], false)),
        t => Ok((vec![one(t)?], false)),
    }
}
