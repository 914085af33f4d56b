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
    Key,
}

pub struct Param {
    pub name: syn::Ident,
    pub ty: syn::Type,
    pub role: Role,
}

pub struct Step {
    pub cx_mut: bool,
    pub params: Vec<Param>,
    /// Element types of the outputs (empty for `()`); `tuple` when written as a tuple.
    pub outputs: Vec<syn::Type>,
    pub tuple: bool,
}

const SCALARS: &[&str] = &["f32", "i32", "u32", "bool"];
const KEYS: &[&str] = &[
    "bool", "u8", "u16", "u32", "u64", "usize", "i8", "i16", "i32", "i64", "isize",
];

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

pub fn strip_role_attrs(func: &mut syn::ItemFn) {
    for input in func.sig.inputs.iter_mut() {
        if let syn::FnArg::Typed(pt) = input {
            pt.attrs
                .retain(|a| !a.path().is_ident("state") && !a.path().is_ident("key"));
        }
    }
}

pub fn step(args: TokenStream, func: &syn::ItemFn) -> Result<Step, Vec<syn::Error>> {
    let mut errors = Vec::new();
    if !args.is_empty() {
        errors.push(syn::Error::new_spanned(&args, "`#[graphed]` takes no arguments; bounds and warm-up are set on the holder (`with_config`)"));
    }
    let sig = &func.sig;
    if let Some(a) = &sig.asyncness {
        errors.push(syn::Error::new_spanned(
            a,
            "a step cannot be `async`: it is recorded once and replayed, with no host waits inside",
        ));
    }
    if !sig.generics.params.is_empty() {
        errors.push(syn::Error::new_spanned(&sig.generics, "a step cannot be generic: a capture key cannot tell instantiations apart; write one step per type"));
    }
    if let Some(c) = &sig.constness {
        errors.push(syn::Error::new_spanned(c, "a step cannot be `const`"));
    }
    let mut inputs = sig.inputs.iter();
    let mut cx_mut = false;
    match inputs.next() {
        Some(syn::FnArg::Typed(pt)) if is_step_ref(&pt.ty).is_some() => {
            cx_mut = is_step_ref(&pt.ty) == Some(true)
        }
        Some(syn::FnArg::Receiver(r)) => errors.push(syn::Error::new_spanned(
            r,
            "a step is a free function, not a method",
        )),
        other => errors.push(syn::Error::new(
            other
                .map(|o| o.span())
                .unwrap_or(sig.paren_token.span.join()),
            "a step takes its recording context first: `fn step(cx: &mut Step, ...)`",
        )),
    }
    let mut params = Vec::new();
    for input in inputs {
        let pt = match input {
            syn::FnArg::Typed(pt) => pt,
            syn::FnArg::Receiver(r) => {
                errors.push(syn::Error::new_spanned(
                    r,
                    "a step is a free function, not a method",
                ));
                continue;
            }
        };
        let name = match &*pt.pat {
            syn::Pat::Ident(id) if id.by_ref.is_none() && id.subpat.is_none() => id.ident.clone(),
            other => {
                errors.push(syn::Error::new_spanned(
                    other,
                    "a step parameter is a plain name",
                ));
                continue;
            }
        };
        let is_state = pt.attrs.iter().any(|a| a.path().is_ident("state"));
        let is_key = pt.attrs.iter().any(|a| a.path().is_ident("key"));
        for a in &pt.attrs {
            if !a.path().is_ident("state") && !a.path().is_ident("key") {
                errors.push(syn::Error::new_spanned(
                    a,
                    "step parameters take only `#[state]` or `#[key]`",
                ));
            }
        }
        let ty = (*pt.ty).clone();
        let role = if is_state && is_key {
            errors.push(syn::Error::new_spanned(
                pt,
                "a parameter is `#[state]` or `#[key]`, not both",
            ));
            continue;
        } else if is_state {
            match &*pt.ty {
                syn::Type::Reference(r) if generic_of(&r.elem, "Buffer").is_some() => Role::State {
                    mutable: r.mutability.is_some(),
                },
                other => {
                    errors.push(syn::Error::new_spanned(other, "a `#[state]` parameter is `&mut Buffer<T>` (or `&Buffer<T>` when the step only reads it)"));
                    continue;
                }
            }
        } else if is_key {
            if !ident_is(&pt.ty, KEYS) {
                errors.push(syn::Error::new_spanned(&pt.ty, "a `#[key]` parameter is a `bool` or an integer: it selects code paths and is part of the capture key"));
                continue;
            }
            Role::Key
        } else {
            match &*pt.ty {
                syn::Type::Reference(r)
                    if r.mutability.is_none() && generic_of(&r.elem, "Input").is_some() =>
                {
                    Role::Input {
                        elem: generic_of(&r.elem, "Input").unwrap().clone(),
                    }
                }
                t if ident_is(t, SCALARS) => Role::Scalar { ty: ty.clone() },
                syn::Type::Reference(r) if generic_of(&r.elem, "Buffer").is_some() => {
                    errors.push(syn::Error::new_spanned(pt, "mark a buffer the step updates in place as `#[state]`: `#[state] w: &mut Buffer<f32>`; per-call data is `x: &Input<f32>`"));
                    continue;
                }
                other => {
                    errors.push(syn::Error::new_spanned(
                        other,
                        "unsupported step parameter: use `&Input<T>` (per-call data), `#[state] &mut Buffer<T>` (persistent buffers), `f32`/`i32`/`u32`/`bool` (per-step scalars) or `#[key] bool`/integer (structural)",
                    ));
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
    if errors.is_empty() {
        Ok(Step {
            cx_mut,
            params,
            outputs,
            tuple,
        })
    } else {
        Err(errors)
    }
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
    let usage = "a step returns `Result<Output<T>>`, `Result<(Output<A>, Output<B>, ...)>` or `Result<()>`: outputs are static slots made with `cx.output(len)`";
    let syn::ReturnType::Type(_, ty) = ret else {
        return Err(syn::Error::new_spanned(ret, usage));
    };
    let Some(inner) = generic_of(ty, "Result") else {
        return Err(syn::Error::new_spanned(ty, usage));
    };
    let one = |t: &syn::Type| {
        generic_of(t, "Output")
            .cloned()
            .ok_or_else(|| syn::Error::new_spanned(t, usage))
    };
    match inner {
        syn::Type::Tuple(t) if t.elems.is_empty() => Ok((Vec::new(), false)),
        syn::Type::Tuple(t) => Ok((t.elems.iter().map(one).collect::<syn::Result<_>>()?, true)),
        t => Ok((vec![one(t)?], false)),
    }
}
