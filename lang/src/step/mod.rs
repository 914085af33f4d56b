//! `#[graphed]`: a step function → a holder type that records it once per capture key and
//! replays it. Phases: `parse` (roles of parameters, return type) → `check` (the body's use
//! of per-step scalars) → `emit` (the holder type).

mod check;
mod emit;
mod parse;

use proc_macro2::TokenStream;
use quote::quote;

/// `#[graphed(args)] item` → the step's holder type; on errors, the errors and (where the
/// signature was understood) a stub holder so uses elsewhere add no errors.
pub fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut func: syn::ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => {
            let msg = format!("`#[graphed]` applies to a step function: `#[graphed] fn train(cx: &mut Step, x: &Input<f32>) -> Result<Output<f32>> {{ ... }}` ({e})");
            return syn::Error::new(e.span(), msg).to_compile_error();
        }
    };
    let mut errors = Vec::new();
    let step = parse::step(args, &func, &mut errors);
    let signature_ok = errors.is_empty();
    if let Some(step) = &step {
        check::body(&func, step, &mut errors);
    }
    let step = match (step, errors.is_empty()) {
        (Some(step), true) => return emit::holder(&func, &step),
        (step, _) => step,
    };
    let err = combine(errors).to_compile_error();
    parse::strip_role_attrs(&mut func);
    match step {
        // Only the body is wrong: the holder's API is known, so code that uses it adds no
        // errors, and the body (with plain scalar types) still gets the compiler's checks.
        Some(step) if signature_ok => {
            let mut stub = func.clone();
            stub.block = syn::parse_quote!({ ::core::unimplemented!() });
            stub.attrs
                .push(syn::parse_quote!(#[allow(unused_variables)]));
            let holder = emit::holder(&stub, &step);
            quote! { #err #holder #[allow(dead_code)] #func }
        }
        _ => quote! { #err #func },
    }
}

/// All errors as one, so every one of them is reported.
fn combine(errors: Vec<syn::Error>) -> syn::Error {
    let mut it = errors.into_iter();
    let Some(mut first) = it.next() else {
        return syn::Error::new(
            proc_macro2::Span::call_site(),
            "internal error in `#[graphed]`: a step was rejected without a reason; please report it",
        );
    };
    for e in it {
        first.combine(e);
    }
    first
}

#[cfg(test)]
mod tests;
