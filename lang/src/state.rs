//! `#[derive(State)]`: a struct of buffers as one `#[state]` parameter of a step.

use proc_macro2::TokenStream;
use quote::quote;

/// Expands the derive: `State::visit_state` visits every field not marked `#[state(skip)]`,
/// in declaration order, each under its own name.
pub fn expand(item: TokenStream) -> syn::Result<TokenStream> {
    let input: syn::DeriveInput = syn::parse2(item)?;
    let syn::Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "`#[derive(State)]` applies to a struct whose fields are buffers (`Buffer<T>`) or other `State` structs",
        ));
    };
    let syn::Fields::Named(fields) = &data.fields else {
        return Err(syn::Error::new_spanned(
            &data.fields,
            "`#[derive(State)]` needs named fields (each buffer is named in errors and plans)",
        ));
    };
    let mut visits = Vec::new();
    let mut keys = Vec::new();
    let mut errors: Option<syn::Error> = None;
    for f in &fields.named {
        let (mut skip, mut key) = (false, false);
        for a in f.attrs.iter().filter(|a| a.path().is_ident("state")) {
            let r = a.parse_nested_meta(|m| {
                if m.path.is_ident("skip") {
                    skip = true;
                    Ok(())
                } else if m.path.is_ident("key") {
                    key = true;
                    Ok(())
                } else {
                    Err(m.error("unknown option: write `#[state(skip)]` for a field that is not a buffer, or `#[state(key)]` for a structural value that is part of the capture key"))
                }
            });
            if let Err(e) = r {
                match &mut errors {
                    Some(all) => all.combine(e),
                    None => errors = Some(e),
                }
            }
        }
        let id = f.ident.as_ref().expect("named fields");
        if key {
            keys.push(quote!(__out.push(::graphed::__private::key_hash(&self.#id));));
            continue;
        }
        if skip {
            continue;
        }
        let name = id.to_string();
        let ty = &f.ty;
        visits.push(quote_spanned_field(ty, id, &name));
        keys.push(quote!(<#ty as ::graphed::State>::state_key(&self.#id, __out);));
    }
    if let Some(e) = errors {
        return Err(e);
    }
    let ident = &input.ident;
    let (impl_g, ty_g, where_g) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_g ::graphed::State for #ident #ty_g #where_g {
            fn visit_state(
                &self,
                _name: &'static str,
                __f: &mut dyn ::core::ops::FnMut(&'static str, ::graphed::RawView),
            ) {
                #(#visits)*
            }
            fn state_key(&self, __out: &mut ::std::vec::Vec<u64>) {
                #(#keys)*
            }
        }
    })
}

/// One field's visit, spanned at the field's type so a field that is not state is reported
/// there.
fn quote_spanned_field(ty: &syn::Type, id: &syn::Ident, name: &str) -> TokenStream {
    let span = syn::spanned::Spanned::span(ty);
    quote::quote_spanned! {span=>
        <#ty as ::graphed::State>::visit_state(&self.#id, #name, __f);
    }
}
