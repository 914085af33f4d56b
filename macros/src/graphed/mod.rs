//! `#[graphed]`: a step function → a holder type that records it once per capture key and
//! replays it. Phases: `parse` (roles of parameters, return type) → `emit` (the holder type).

mod emit;
mod parse;

use proc_macro2::TokenStream;
use quote::quote;

pub fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut func: syn::ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => {
            return syn::Error::new(e.span(), "`#[graphed]` applies to a step function: `#[graphed] fn step(cx: &mut Step, ...) -> Result<Output<f32>> { ... }`")
                .to_compile_error()
        }
    };
    match parse::step(args, &func) {
        Ok(step) => emit::holder(&func, &step),
        Err(errors) => {
            let mut it = errors.into_iter();
            let mut first = it.next().expect("errors are non-empty");
            for e in it {
                first.combine(e);
            }
            let err = first.to_compile_error();
            parse::strip_role_attrs(&mut func);
            quote! { #err #func }
        }
    }
}
