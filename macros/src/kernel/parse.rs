//! Parses the `#[kernel(...)]` arguments and the kernel's signature.

use proc_macro2::{Span, TokenStream};
use syn::parse::Parser;
use syn::spanned::Spanned;

use super::ir::{Param, ParamKind, Ty};
use crate::kernel::Errors;

/// Arguments of `#[kernel(workgroup = 256)]`, `(16, 16)` or `(4, 4, 4)`.
pub struct KernelArgs {
    pub workgroup: [u32; 3],
}

pub fn args(tokens: TokenStream, errors: &mut Errors) -> KernelArgs {
    let mut workgroup = None;
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("workgroup") {
            let value: syn::Expr = meta.value()?.parse()?;
            workgroup = Some(workgroup_shape(&value)?);
            Ok(())
        } else {
            Err(meta.error("unknown `#[kernel]` argument; the only one is `workgroup = 256` (or `(16, 16)`, `(4, 4, 4)`)"))
        }
    });
    if let Err(e) = parser.parse2(tokens) {
        errors.push(e);
    }
    let workgroup = workgroup.unwrap_or_else(|| {
        errors.push(syn::Error::new(
            Span::call_site(),
            "`#[kernel]` needs a workgroup shape: write `#[kernel(workgroup = 256)]` (or `(16, 16)`, `(4, 4, 4)`)",
        ));
        [1, 1, 1]
    });
    KernelArgs { workgroup }
}

fn workgroup_shape(value: &syn::Expr) -> syn::Result<[u32; 3]> {
    let dims: Vec<&syn::Expr> = match value {
        syn::Expr::Tuple(t) => t.elems.iter().collect(),
        syn::Expr::Paren(p) => vec![&*p.expr],
        other => vec![other],
    };
    let bad = || {
        syn::Error::new_spanned(
            value,
            "the workgroup shape is 1 to 3 positive integer literals: `256`, `(16, 16)` or `(4, 4, 4)`",
        )
    };
    if dims.is_empty() || dims.len() > 3 {
        return Err(bad());
    }
    let mut shape = [1u32; 3];
    for (slot, dim) in shape.iter_mut().zip(&dims) {
        let syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(lit),
            ..
        }) = dim
        else {
            return Err(bad());
        };
        let n: u32 = lit.base10_parse().map_err(|_| bad())?;
        if n == 0 {
            return Err(bad());
        }
        *slot = n;
    }
    let total: u64 = shape.iter().map(|&d| d as u64).product();
    if total > 1024 {
        return Err(syn::Error::new_spanned(
            value,
            format!("a workgroup has at most 1024 invocations (CUDA's block limit); this shape has {total}"),
        ));
    }
    if shape[2] > 64 {
        return Err(syn::Error::new_spanned(
            value,
            "the z dimension of a workgroup is at most 64",
        ));
    }
    Ok(shape)
}

pub fn scalar_type(ty: &syn::Type) -> Option<Ty> {
    let syn::Type::Path(p) = ty else { return None };
    if p.qself.is_some() {
        return None;
    }
    let id = p.path.get_ident()?;
    Some(match id.to_string().as_str() {
        "f32" => Ty::F32,
        "i32" => Ty::I32,
        "u32" => Ty::U32,
        "bool" => Ty::Bool,
        _ => return None,
    })
}

/// Parameters: scalars by value, `&[T]` and `&mut [T]`.
pub fn params(sig: &syn::Signature, atomic: &[String], errors: &mut Errors) -> Vec<Param> {
    let mut out = Vec::new();
    let mut word = 0usize;
    let mut binding = 1u32;
    for input in &sig.inputs {
        let pt = match input {
            syn::FnArg::Receiver(r) => {
                errors.push(syn::Error::new_spanned(
                    r,
                    "a kernel takes no `self`; write a free function",
                ));
                continue;
            }
            syn::FnArg::Typed(pt) => pt,
        };
        let name = match &*pt.pat {
            syn::Pat::Ident(id) if id.by_ref.is_none() && id.subpat.is_none() => {
                if id.mutability.is_some() {
                    errors.push(syn::Error::new_spanned(
                        id,
                        "kernel parameters cannot be `mut`; copy the value into a `let mut` local",
                    ));
                }
                id.ident.to_string()
            }
            other => {
                errors.push(syn::Error::new_spanned(
                    other,
                    "a kernel parameter is a plain name, like `x: &[f32]`",
                ));
                continue;
            }
        };
        let kind = match &*pt.ty {
            syn::Type::Reference(r) => {
                let elem = match &*r.elem {
                    syn::Type::Slice(s) => scalar_type(&s.elem).filter(|t| *t != Ty::Bool),
                    _ => None,
                };
                match elem {
                    Some(elem) => {
                        let mutable = r.mutability.is_some();
                        let is_atomic = atomic.contains(&name);
                        if is_atomic && (!mutable || elem == Ty::F32) {
                            errors.push(syn::Error::new_spanned(
                                &pt.ty,
                                format!(
                                    "atomics work on `&mut [u32]` or `&mut [i32]`; `{name}` is `{}`",
                                    quote::quote!(#r)
                                ),
                            ));
                        }
                        ParamKind::Slice {
                            elem,
                            mutable,
                            atomic: is_atomic,
                        }
                    }
                    None => {
                        errors.push(syn::Error::new_spanned(
                            &pt.ty,
                            "unsupported parameter type: a kernel takes `f32`, `i32`, `u32`, `bool` by value, or slices `&[T]` / `&mut [T]` of `f32`, `i32`, `u32`",
                        ));
                        continue;
                    }
                }
            }
            ty => match scalar_type(ty) {
                Some(t) => ParamKind::Scalar(t),
                None => {
                    errors.push(syn::Error::new_spanned(
                        ty,
                        "unsupported parameter type: a kernel takes `f32`, `i32`, `u32`, `bool` by value, or slices `&[T]` / `&mut [T]` of `f32`, `i32`, `u32`",
                    ));
                    continue;
                }
            },
        };
        if out.iter().any(|p: &Param| p.name == name) {
            errors.push(syn::Error::new(
                pt.pat.span(),
                format!("parameter `{name}` is declared twice"),
            ));
            continue;
        }
        let (w, b) = (word, binding);
        match kind {
            ParamKind::Scalar(_) => word += 1,
            ParamKind::Slice { .. } => {
                word += 2;
                binding += 1;
            }
        }
        out.push(Param {
            name,
            kind: kind.clone(),
            word: w,
            binding: if matches!(kind, ParamKind::Slice { .. }) {
                b
            } else {
                0
            },
        });
    }
    out
}

/// Rejects signature features a kernel cannot have.
pub fn signature(sig: &syn::Signature, errors: &mut Errors) {
    if let Some(a) = &sig.asyncness {
        errors.push(syn::Error::new_spanned(a, "a kernel cannot be `async`"));
    }
    if let Some(c) = &sig.constness {
        errors.push(syn::Error::new_spanned(c, "a kernel cannot be `const`"));
    }
    if let Some(u) = &sig.unsafety {
        errors.push(syn::Error::new_spanned(
            u,
            "a kernel cannot be `unsafe`; bounds are checked on the host",
        ));
    }
    if !sig.generics.params.is_empty() {
        errors.push(syn::Error::new_spanned(
            &sig.generics,
            "a kernel cannot be generic: write one kernel per element type",
        ));
    }
    if let syn::ReturnType::Type(_, ty) = &sig.output {
        errors.push(syn::Error::new_spanned(
            ty,
            "a kernel returns nothing; write results into a `&mut [T]` parameter",
        ));
    }
    if let Some(v) = &sig.variadic {
        errors.push(syn::Error::new_spanned(v, "a kernel cannot be variadic"));
    }
}
