//! `#[kernel]`: parse the signature, check the body into the typed IR, emit the three targets
//! and a typed launcher.

mod check;
pub mod copy_async;
pub mod device;
pub mod emit;
pub mod ir;
pub mod ldmatrix;
pub mod mma;
pub mod parse;
pub mod subgroup;
mod uniformity;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::visit::Visit;

use ir::{Kernel, Param, ParamKind, Ty};

/// Every error found so far, each spanned at its cause; all are reported together.
pub type Errors = Vec<syn::Error>;

/// `#[kernel(args)] item` → the kernel's `KernelDef` (three targets), its typed launcher
/// and host form; on errors, the errors and a stub launcher so calls add no errors.
pub fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let func: syn::ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => {
            let msg = format!("`#[kernel]` applies to a function: `#[kernel(workgroup = 256)] pub fn name(x: &[f32], y: &mut [f32]) {{ ... }}` ({e})");
            return syn::Error::new(e.span(), msg).to_compile_error();
        }
    };
    let calls = device::helper_calls(&func);
    if !calls.is_empty() {
        // Every mistake but those of the calls is reported now, before the callees'
        // definitions come back through their macros, one at a time.
        if let Err((errors, params)) =
            lower_with(args.clone(), &func, device::Helpers::deferred(&calls))
        {
            let err = combine(errors).to_compile_error();
            let stub = stub(&func, &params);
            return quote! { #err #stub };
        }
        return device::chain(device::Mode::Kernel, args, &func, calls);
    }
    match lower(args, &func) {
        Ok(kernel) => generate(&func, &kernel),
        Err((errors, params)) => {
            let err = combine(errors).to_compile_error();
            // Emit the launcher's signature anyway, so calls elsewhere do not add errors.
            let stub = stub(&func, &params);
            quote! { #err #stub }
        }
    }
}

/// All errors as one, so every one of them is reported.
pub(crate) fn combine(errors: Errors) -> syn::Error {
    let mut it = errors.into_iter();
    let Some(mut first) = it.next() else {
        return syn::Error::new(
            proc_macro2::Span::call_site(),
            "internal error in `#[kernel]`: a kernel was rejected without a reason; please report it",
        );
    };
    for e in it {
        first.combine(e);
    }
    first
}

/// Parses and checks a kernel; on failure returns every error and the parameters understood.
pub fn lower(args: TokenStream, func: &syn::ItemFn) -> Result<Kernel, (Errors, Vec<Param>)> {
    lower_with(args, func, device::Helpers::default())
}

/// [`lower`] for a kernel that calls the `#[device]` functions `helpers`.
pub fn lower_with(
    args: TokenStream,
    func: &syn::ItemFn,
    helpers: device::Helpers,
) -> Result<Kernel, (Errors, Vec<Param>)> {
    let mut errors = Errors::new();
    let kargs = parse::args(args, &mut errors);
    parse::signature(&func.sig, &mut errors);
    parse::kernel_name(&func.sig.ident, &mut errors);
    let mut atomic = atomic_params(&func.block);
    atomic.extend(device::atomic_args(
        &func.block,
        &helpers.sigs,
        &helpers.names,
    ));
    let mut rejected = Vec::new();
    let params = parse::params(&func.sig, &atomic, &mut errors, &mut rejected);
    let arg_words = params
        .iter()
        .map(|p| {
            if matches!(p.kind, ParamKind::Scalar(_)) {
                1
            } else {
                2
            }
        })
        .sum();
    let mut checker = check::Checker::new(
        &mut errors,
        func.sig.ident.to_string(),
        params,
        kargs.workgroup,
    );
    for name in &rejected {
        checker.poison(name);
    }
    checker.atomic_names(atomic);
    checker.set_helpers(helpers.sigs, helpers.names);
    let mut body = checker.block(&func.block, true);
    check::widen_block(&mut body);
    let arrays = checker.arrays();
    let has_subgroup = checker.has_subgroup();
    let (params, shared, has_barrier) = checker.finish();
    let kernel = Kernel {
        name: func.sig.ident.to_string(),
        params,
        shared,
        arrays,
        workgroup: kargs.workgroup,
        min_workgroups: kargs.min_workgroups,
        body,
        has_barrier,
        has_subgroup,
        arg_words,
        helpers: helpers.fns,
    };
    uniformity::check(&kernel, &mut errors);
    if errors.is_empty() {
        Ok(kernel)
    } else {
        Err((errors, kernel.params))
    }
}

/// Names of parameters passed as the first argument of an `atomic_*` call.
pub(crate) fn atomic_params(block: &syn::Block) -> Vec<String> {
    struct Finder(Vec<String>);
    impl<'ast> Visit<'ast> for Finder {
        fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
            if let syn::Expr::Path(p) = &*c.func {
                if p.path
                    .get_ident()
                    .is_some_and(|id| ir::AtomicOp::from_name(&id.to_string()).is_some())
                {
                    if let Some(syn::Expr::Path(a)) = c.args.first() {
                        if let Some(id) = a.path.get_ident() {
                            self.0.push(id.to_string());
                        }
                    }
                }
            }
            syn::visit::visit_expr_call(self, c);
        }
    }
    let mut f = Finder(Vec::new());
    f.visit_block(block);
    f.0
}

fn dtype(t: Ty) -> TokenStream {
    match t {
        Ty::F32 => quote!(::graphed::DType::F32),
        Ty::F16 => quote!(::graphed::DType::F16),
        Ty::BF16 => quote!(::graphed::DType::BF16),
        Ty::I32 => quote!(::graphed::DType::I32),
        Ty::U32 => quote!(::graphed::DType::U32),
        _ => quote!(::graphed::DType::Bool),
    }
}

fn rust_ty(t: Ty) -> TokenStream {
    match t {
        Ty::F32 => quote!(f32),
        Ty::F16 => quote!(::graphed::f16),
        Ty::BF16 => quote!(::graphed::bf16),
        Ty::I32 => quote!(i32),
        Ty::U32 => quote!(u32),
        _ => quote!(bool),
    }
}

/// The launcher's parameters and the `KernelArg`s it builds.
fn launcher_parts(params: &[Param]) -> (Vec<TokenStream>, Vec<TokenStream>) {
    let mut sig = Vec::new();
    let mut args = Vec::new();
    for p in params {
        let id = format_ident!("{}", p.name);
        match p.kind {
            ParamKind::Scalar(t) => {
                let rt = rust_ty(t);
                sig.push(quote!(#id: impl ::graphed::IntoScalarArg<#rt>));
                args.push(quote!(::graphed::KernelArg::Scalar(::graphed::IntoScalarArg::<#rt>::into_scalar_arg(#id).erase())));
            }
            ParamKind::Slice { elem, mutable, .. } => {
                let rt = rust_ty(elem);
                if mutable {
                    sig.push(quote!(#id: &mut ::graphed::Buffer<#rt>));
                    args.push(quote!(::graphed::KernelArg::Write(#id.raw_view())));
                } else {
                    sig.push(quote!(#id: &::graphed::Buffer<#rt>));
                    args.push(quote!(::graphed::KernelArg::Read(#id.raw_view())));
                }
            }
        }
    }
    (sig, args)
}

fn launch_doc(func: &syn::ItemFn) -> String {
    format!(
        "Launches `{}` on `grid` through a device (eager) or a step context (recorded).",
        func.sig.ident
    )
}

pub(crate) fn generate(func: &syn::ItemFn, k: &Kernel) -> TokenStream {
    let vis = &func.vis;
    let name = &func.sig.ident;
    let name_str = name.to_string();
    let docs: Vec<&syn::Attribute> = func
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .collect();
    let default_doc = format!(
        "Kernel `{name_str}` (generated by `#[kernel]`): `launch`, its sources and its definition."
    );
    let default_doc = if docs.is_empty() {
        quote!(#[doc = #default_doc])
    } else {
        quote!()
    };
    let wgsl = emit::wgsl::emit(k);
    let cuda = emit::cuda::emit(k);
    let checked_id = emit::bounds::kernel_id(&wgsl);
    let wgsl_checked = emit::wgsl::emit_checked(k, checked_id);
    let cuda_checked = emit::cuda::emit_checked(k, checked_id);
    let targets = emit::bounds::targets(k);
    let host_src = emit::host::emit(k);
    let host: TokenStream = match syn::parse_str(&host_src) {
        Ok(t) => t,
        Err(e) => {
            let msg = format!(
                "internal error in graphed's host emitter ({e}); please report it with this kernel"
            );
            return quote!(compile_error!(#msg););
        }
    };
    let [wx, wy, wz] = k.workgroup;
    let params_info: Vec<TokenStream> = k
        .params
        .iter()
        .map(|p| {
            let pname = &p.name;
            let kind = match p.kind {
                ParamKind::Scalar(t) => {
                    let d = dtype(t);
                    quote!(::graphed::ParamType::Scalar(#d))
                }
                ParamKind::Slice { elem, mutable, atomic } => {
                    let d = dtype(elem);
                    quote!(::graphed::ParamType::Slice { elem: #d, write: #mutable, atomic: #atomic })
                }
            };
            quote!(::graphed::ParamInfo { name: #pname, kind: #kind })
        })
        .collect();
    let (sig, args) = launcher_parts(&k.params);
    let arg_words = k.arg_words as u32;
    let loops_terminate =
        ir::loops_terminate(&k.body) && k.helpers.iter().all(|h| ir::loops_terminate(&h.body));
    // Every element type is 4 bytes; the checker caps the sum at 48 KiB. `mma_m16n8k16`'s
    // portable form adds its exchange words (WGSL's and the host's; CUDA's form exchanges
    // fragments in registers).
    let workgroup_bytes: u32 = k.shared.iter().map(|s| s.size * 4).sum::<u32>();
    let exchange_bytes: u32 = mma::scratch_bytes(k);
    let ldoc = launch_doc(func);
    quote! {
        #(#docs)*
        #default_doc
        #[allow(non_snake_case, unused, clippy::all, clippy::pedantic)]
        #vis mod #name {
            /// The kernel's name (its CUDA entry point).
            pub const NAME: &str = #name_str;
            /// The WGSL source this kernel was compiled to.
            pub const WGSL: &str = #wgsl;
            /// The CUDA C source this kernel was compiled to.
            pub const CUDA: &str = #cuda;
            /// The checked variant's WGSL (every index checked; `GRAPHED_CHECKED=1`).
            pub const WGSL_CHECKED: &str = #wgsl_checked;
            /// The checked variant's CUDA C (every index checked; `GRAPHED_CHECKED=1`).
            pub const CUDA_CHECKED: &str = #cuda_checked;
            /// The workgroup shape.
            pub const WORKGROUP: [u32; 3] = [#wx, #wy, #wz];
            /// Everything a backend needs to run this kernel.
            pub static DEF: ::graphed::KernelDef = ::graphed::KernelDef {
                name: NAME,
                wgsl: WGSL,
                cuda: CUDA,
                workgroup: WORKGROUP,
                workgroup_bytes: #workgroup_bytes,
                exchange_bytes: #exchange_bytes,
                params: &[#(#params_info),*],
                arg_words: #arg_words,
                host,
                loops_terminate: #loops_terminate,
                checked: ::graphed::CheckedForm {
                    wgsl: WGSL_CHECKED,
                    cuda: CUDA_CHECKED,
                    id: #checked_id,
                    targets: &[#(#targets),*],
                },
            };
            #host
            #[doc = #ldoc]
            pub fn launch<C: ::graphed::Launch + ?Sized>(cx: &C, grid: impl ::core::convert::Into<::graphed::Grid>, #(#sig),*) -> ::graphed::Result<()> {
                cx.launch(&DEF, ::core::convert::Into::into(grid), &[#(#args),*])
            }
        }
    }
}

pub(crate) fn stub(func: &syn::ItemFn, params: &[Param]) -> TokenStream {
    let vis = &func.vis;
    let name = &func.sig.ident;
    let name_str = name.to_string();
    let (sig, _) = launcher_parts(params);
    quote! {
        #[allow(non_snake_case, unused, clippy::all, missing_docs)]
        #vis mod #name {
            pub const NAME: &str = #name_str;
            pub const WGSL: &str = "";
            pub const CUDA: &str = "";
            pub fn launch<C: ::graphed::Launch + ?Sized>(cx: &C, grid: impl ::core::convert::Into<::graphed::Grid>, #(#sig),*) -> ::graphed::Result<()> {
                ::core::unimplemented!()
            }
        }
    }
}

#[cfg(test)]
mod copy_async_tests;
#[cfg(test)]
mod device_array_tests;
#[cfg(test)]
mod device_tests;
#[cfg(test)]
mod tests;
