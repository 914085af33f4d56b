//! Parses the `#[kernel(...)]` arguments and the kernel's signature.

use proc_macro2::{Span, TokenStream};
use syn::parse::Parser;
use syn::spanned::Spanned;

use super::ir::{Param, ParamKind, Ty};
use crate::kernel::Errors;

/// Arguments of `#[kernel(workgroup = 256)]`, `(16, 16)` or `(4, 4, 4)`, optionally
/// `min_workgroups = 2`.
pub struct KernelArgs {
    /// Invocations per workgroup in x, y and z (unset ones are 1).
    pub workgroup: [u32; 3],
    /// Workgroups the CUDA form asks to fit on one multiprocessor at once (the second
    /// argument of `__launch_bounds__`, which caps registers per invocation); 0 when not given.
    pub min_workgroups: u32,
}

/// Parses `#[kernel(...)]`'s arguments; a mistake is recorded and the default (64) kept.
pub fn args(tokens: TokenStream, errors: &mut Errors) -> KernelArgs {
    let usage = "write `#[kernel(workgroup = 256)]` (or `(16, 16)`, `(4, 4, 4)`)";
    let mut workgroup = None;
    // Whether a `workgroup` argument was written at all, valid or not: a bad one is reported
    // once, not again as "missing".
    let mut seen = false;
    let mut min_workgroups = 0u32;
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("workgroup") {
            if seen {
                return Err(meta.error("`workgroup` is given twice; keep one"));
            }
            seen = true;
            let stream = meta.value().map_err(|e| {
                syn::Error::new(e.span(), format!("`workgroup` needs a shape: {usage}"))
            })?;
            let value: syn::Expr = stream.parse()?;
            workgroup = Some(workgroup_shape(&value)?);
            Ok(())
        } else if meta.path.is_ident("min_workgroups") {
            let lit: syn::LitInt = meta.value()?.parse()?;
            min_workgroups = lit
                .base10_parse::<u32>()
                .ok()
                .filter(|&v| (1..=32).contains(&v))
                .ok_or_else(|| {
                    syn::Error::new(lit.span(), "`min_workgroups` is an integer from 1 to 32")
                })?;
            Ok(())
        } else {
            Err(meta.error(format!(
                "unknown `#[kernel]` argument; they are `workgroup` and `min_workgroups`: {usage}"
            )))
        }
    });
    // The parser stops at its first error, so a shape after it may exist unseen.
    let parsed = parser.parse2(tokens).map_err(|e| errors.push(e)).is_ok();
    let workgroup = workgroup.unwrap_or_else(|| {
        if !seen && parsed {
            errors.push(syn::Error::new(
                Span::call_site(),
                format!("`#[kernel]` needs a workgroup shape: {usage}"),
            ));
        }
        [1, 1, 1]
    });
    KernelArgs {
        workgroup,
        min_workgroups,
    }
}

/// Most invocations in one workgroup: CUDA's block limit (also Vulkan's common minimum).
const MAX_INVOCATIONS: u64 = 1024;

fn workgroup_shape(value: &syn::Expr) -> syn::Result<[u32; 3]> {
    let dims: Vec<&syn::Expr> = match value {
        syn::Expr::Tuple(t) => t.elems.iter().collect(),
        syn::Expr::Paren(p) => vec![&*p.expr],
        other => vec![other],
    };
    if dims.is_empty() {
        return Err(syn::Error::new_spanned(
            value,
            "the workgroup shape has 1 to 3 dimensions: `256`, `(16, 16)` or `(4, 4, 4)`",
        ));
    }
    if dims.len() > 3 {
        return Err(syn::Error::new_spanned(
            value,
            format!(
                "a workgroup has at most 3 dimensions (x, y, z), this one has {}; fold the extra ones into x, e.g. `(16, 4, 4)`",
                dims.len()
            ),
        ));
    }
    let mut shape = [1u32; 3];
    for (slot, dim) in shape.iter_mut().zip(&dims) {
        let Some(lit) = int_lit(dim) else {
            return Err(syn::Error::new_spanned(
                dim,
                "a workgroup dimension is an integer literal, like `256` or `(16, 16)` (constants and expressions are not accepted)",
            ));
        };
        let n: u32 = lit.base10_parse().map_err(|_| {
            syn::Error::new_spanned(
                lit,
                format!("a workgroup has at most {MAX_INVOCATIONS} invocations; this dimension is far larger"),
            )
        })?;
        if n == 0 {
            return Err(syn::Error::new_spanned(
                lit,
                "a workgroup dimension is at least 1; write `1` for a dimension you do not use",
            ));
        }
        *slot = n;
    }
    let total: u64 = shape.iter().map(|&d| d as u64).product();
    if total > MAX_INVOCATIONS {
        return Err(syn::Error::new_spanned(
            value,
            format!("a workgroup has at most {MAX_INVOCATIONS} invocations (CUDA's block limit); this shape has {total}: use a smaller shape, e.g. `256` or `(16, 16)`, and launch more workgroups"),
        ));
    }
    if shape[2] > 64 {
        return Err(syn::Error::new_spanned(
            value,
            format!(
                "the z dimension of a workgroup is at most 64 (CUDA's limit); this one is {}: swap it with x",
                shape[2]
            ),
        ));
    }
    Ok(shape)
}

/// C, C++ and CUDA words that are valid Rust names but cannot name a CUDA kernel, and names
/// a kernel's generated code already uses.
const RESERVED_KERNEL_NAMES: &[&str] = &[
    "main",
    "auto",
    "bool",
    "case",
    "catch",
    "char",
    "class",
    "const_cast",
    "default",
    "delete",
    "double",
    "explicit",
    "export",
    "float",
    "friend",
    "goto",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "operator",
    "private",
    "protected",
    "public",
    "register",
    "short",
    "signed",
    "sizeof",
    "switch",
    "template",
    "this",
    "throw",
    "typedef",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "min",
    "max",
    "abs",
    "sqrt",
    "exp",
    "log",
    "pow",
    "sin",
    "cos",
    "tanh",
    "floor",
    "ceil",
    "round",
    "fma",
    "rsqrt",
    "exp2",
    "log2",
];

/// Checks a name that the kernel's WGSL and CUDA C use as is (the kernel's, a parameter's):
/// those languages take ASCII names and reserve a leading `__`.
pub fn target_name(ident: &syn::Ident, what: &str, errors: &mut Errors) -> bool {
    let name = ident.to_string();
    let bad = if name.starts_with("r#") {
        Some(format!("{what} cannot be a raw identifier (`{name}`): it becomes a WGSL and CUDA C name; pick another name"))
    } else if !name.is_ascii() {
        Some(format!(
            "{what} `{name}` must be ASCII: it becomes a WGSL and CUDA C name"
        ))
    } else if name.starts_with("__") {
        Some(format!(
            "{what} `{name}` cannot start with `__` (reserved in WGSL and CUDA C); rename it"
        ))
    } else if name.starts_with("gd_") {
        Some(format!(
            "{what} `{name}` cannot start with `gd_` (used by graphed's generated code); rename it"
        ))
    } else {
        None
    };
    match bad {
        Some(msg) => {
            errors.push(syn::Error::new(ident.span(), msg));
            false
        }
        None => true,
    }
}

/// The kernel's name is its CUDA entry point and the name of the generated module.
pub fn kernel_name(ident: &syn::Ident, errors: &mut Errors) {
    if !target_name(ident, "a kernel's name", errors) {
        return;
    }
    let name = ident.to_string();
    if RESERVED_KERNEL_NAMES.contains(&name.as_str()) {
        errors.push(syn::Error::new(
            ident.span(),
            format!("a kernel cannot be named `{name}`: the name is reserved or taken in CUDA C, where it names the entry point; rename it, e.g. `{name}_kernel`"),
        ));
    }
}

/// The integer literal `e` is, seen through the invisible groups that `macro_rules!` puts
/// around a `$n:literal` or `$n:expr` it substitutes (so `[u32; $n]` in a macro is `[u32; 4096]`).
pub fn int_lit(e: &syn::Expr) -> Option<&syn::LitInt> {
    match e {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(n),
            ..
        }) => Some(n),
        syn::Expr::Group(g) => int_lit(&g.expr),
        _ => None,
    }
}

/// The kernel-language scalar type `ty` names (`f32`, `i32`, `u32`, `bool`), if any.
pub fn scalar_type(ty: &syn::Type) -> Option<Ty> {
    let syn::Type::Path(p) = ty else { return None };
    if p.qself.is_some() {
        return None;
    }
    let id = p.path.get_ident()?;
    Some(match id.to_string().as_str() {
        "f32" => Ty::F32,
        "f16" => Ty::F16,
        "bf16" => Ty::BF16,
        "i32" => Ty::I32,
        "u32" => Ty::U32,
        "bool" => Ty::Bool,
        _ => return None,
    })
}

/// Why a parameter type is not accepted, with what to write instead.
fn param_type_error(ty: &syn::Type) -> String {
    const USAGE: &str = "a kernel takes `f32`, `f16`, `bf16`, `i32`, `u32`, `bool` by value, or slices `&[T]` / `&mut [T]` of `f32`, `f16`, `bf16`, `i32`, `u32`";
    let shown = crate::tokens::shown(ty);
    // `Vec<T>` / `Buffer<T>` → `T`, for the suggested slice.
    let container_elem = |t: &syn::Type| match t {
        syn::Type::Path(p) => p.path.segments.last().and_then(|s| {
            if s.ident != "Vec" && s.ident != "Buffer" {
                return None;
            }
            match &s.arguments {
                syn::PathArguments::AngleBracketed(a) => match a.args.first() {
                    Some(syn::GenericArgument::Type(t)) => Some(crate::tokens::shown(t)),
                    _ => None,
                },
                _ => None,
            }
        }),
        _ => None,
    };
    let hint = match ty {
        syn::Type::Reference(r) => {
            let m = if r.mutability.is_some() { "mut " } else { "" };
            match &*r.elem {
                syn::Type::Slice(s) if matches!(scalar_type(&s.elem), Some(Ty::Bool)) => {
                    "slices of `bool` have no GPU layout: use `&[u32]` holding 0 or 1".to_string()
                }
                syn::Type::Slice(s) => format!(
                    "`{}` is not a kernel element type: kernels compute in `f32`, `f16`, `bf16`, `i32` and `u32`",
                    crate::tokens::shown(&s.elem)
                ),
                elem if scalar_type(elem).is_some() => {
                    "a scalar is passed by value: drop the `&`; to write a result, use a `&mut [T]` and its element 0".to_string()
                }
                elem => match container_elem(elem) {
                    Some(t) => format!("a kernel sees a buffer as a slice: write `&{m}[{t}]` instead of `{shown}`"),
                    None => format!("`{shown}` is not a slice: pass the data as `&[T]` or `&mut [T]`"),
                },
            }
        }
        syn::Type::Path(p) => match p.path.segments.last().map(|s| s.ident.to_string()) {
            Some(n) if n == "f64" => {
                format!("`{n}` is not supported: kernels compute in `f32` (or `f16`, `bf16`)")
            }
            Some(n) if ["i8", "i16", "i64", "i128", "isize"].contains(&n.as_str()) => {
                format!("`{n}` is not supported: use `i32`")
            }
            Some(n) if ["u8", "u16", "u64", "u128", "usize"].contains(&n.as_str()) => {
                format!("`{n}` is not supported: use `u32`")
            }
            _ => match container_elem(ty) {
                Some(t) => format!("a kernel sees a buffer as a slice: write `&[{t}]` (read) or `&mut [{t}]` (write) instead of `{shown}`"),
                None => format!("`{shown}` is not a kernel type"),
            },
        },
        syn::Type::Slice(_) | syn::Type::Array(_) => {
            format!("pass a slice by reference: `&[T]` or `&mut [T]` instead of `{shown}`")
        }
        _ => format!("`{shown}` is not a kernel type"),
    };
    format!("unsupported parameter type: {hint}; {USAGE}")
}

/// Parameters: scalars by value, `&[T]` and `&mut [T]`. Names of parameters that were
/// rejected go to `rejected`, so the body's uses of them are not reported again.
pub fn params(
    sig: &syn::Signature,
    atomic: &[String],
    errors: &mut Errors,
    rejected: &mut Vec<String>,
) -> Vec<Param> {
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
        for a in &pt.attrs {
            errors.push(syn::Error::new_spanned(
                a,
                "kernel parameters take no attributes; remove it",
            ));
        }
        let name = match &*pt.pat {
            syn::Pat::Ident(id) if id.by_ref.is_none() && id.subpat.is_none() => {
                if id.mutability.is_some() {
                    errors.push(syn::Error::new_spanned(
                        id,
                        "kernel parameters cannot be `mut`; copy the value into a `let mut` local",
                    ));
                }
                if !target_name(&id.ident, "a kernel parameter's name", errors) {
                    rejected.push(id.ident.to_string());
                    continue;
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
                if let Some(l) = &r.lifetime {
                    errors.push(syn::Error::new_spanned(
                        l,
                        "kernel parameters take no lifetimes: write `&[T]` or `&mut [T]`",
                    ));
                }
                match elem {
                    Some(elem) => {
                        let mutable = r.mutability.is_some();
                        let is_atomic = atomic.contains(&name);
                        if is_atomic && elem.is_half() {
                            errors.push(syn::Error::new_spanned(
                                &pt.ty,
                                format!(
                                    "there are no 16-bit atomics; `{name}` is `{}`: keep what is updated atomically in a `&mut [u32]` or `&mut [i32]` (e.g. fixed-point sums), or accumulate in `f32` and store the `{}` once",
                                    crate::tokens::shown(r),
                                    elem.rust()
                                ),
                            ));
                        } else if is_atomic && (!mutable || elem == Ty::F32) {
                            let want = if elem == Ty::F32 { "u32" } else { elem.rust() };
                            errors.push(syn::Error::new_spanned(
                                &pt.ty,
                                format!(
                                    "atomics work on `&mut [u32]` or `&mut [i32]`; `{name}` is `{}`: declare it `&mut [{want}]`",
                                    crate::tokens::shown(r)
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
                        errors.push(syn::Error::new_spanned(&pt.ty, param_type_error(&pt.ty)));
                        rejected.push(name);
                        continue;
                    }
                }
            }
            ty => match scalar_type(ty) {
                Some(t) => ParamKind::Scalar(t),
                None => {
                    errors.push(syn::Error::new_spanned(ty, param_type_error(ty)));
                    rejected.push(name);
                    continue;
                }
            },
        };
        if out.iter().any(|p: &Param| p.name == name) {
            errors.push(syn::Error::new(
                pt.pat.span(),
                format!("parameter `{name}` is declared twice; rename one"),
            ));
            continue;
        }
        let (w, b) = (word, binding);
        let is_slice = matches!(kind, ParamKind::Slice { .. });
        if is_slice {
            word += 2;
            binding += 1;
        } else {
            word += 1;
        }
        out.push(Param {
            name,
            kind,
            word: w,
            binding: if is_slice { b } else { 0 },
        });
    }
    out
}

/// Rejects signature features a kernel cannot have.
pub fn signature(sig: &syn::Signature, errors: &mut Errors) {
    if let Some(a) = &sig.asyncness {
        errors.push(syn::Error::new_spanned(
            a,
            "a kernel cannot be `async`: it runs to completion on the GPU; remove `async`",
        ));
    }
    if let Some(c) = &sig.constness {
        errors.push(syn::Error::new_spanned(
            c,
            "a kernel cannot be `const`; remove `const`",
        ));
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
            "a kernel cannot be generic (each target needs concrete types): write one kernel per element type, e.g. `scale_f32` and `scale_u32`",
        ));
    }
    if let syn::ReturnType::Type(_, ty) = &sig.output {
        errors.push(syn::Error::new_spanned(
            ty,
            "a kernel returns nothing; write results into a `&mut [T]` parameter",
        ));
    }
    if let Some(v) = &sig.variadic {
        errors.push(syn::Error::new_spanned(
            v,
            "a kernel cannot be variadic; list its parameters",
        ));
    }
    if let Some(w) = &sig.generics.where_clause {
        errors.push(syn::Error::new_spanned(
            w,
            "a kernel has no `where` clause; remove it",
        ));
    }
    if let Some(abi) = &sig.abi {
        errors.push(syn::Error::new_spanned(
            abi,
            "a kernel takes no ABI; `#[kernel]` emits the CUDA entry point itself: remove it",
        ));
    }
}
