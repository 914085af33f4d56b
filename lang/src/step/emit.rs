//! Emits the holder type of a step: `new`, `with_config`, `call`, `eager`, `stats`, `clear`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::parse::{Role, Step};

pub fn holder(func: &syn::ItemFn, step: &Step) -> TokenStream {
    let vis = &func.vis;
    let name_str = step.base_name.clone();
    let ty = &step.holder;
    let body_fn = format_ident!("__graphed_{}_body", name_str);
    let docs: Vec<&syn::Attribute> = func
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .collect();

    // The body as an inner function with per-step scalars typed `Scalar<T>`.
    let mut inner = func.clone();
    inner.sig.ident = body_fn.clone();
    inner.vis = syn::Visibility::Inherited;
    inner.attrs.retain(|a| !a.path().is_ident("doc"));
    super::parse::strip_role_attrs(&mut inner);
    for (input, p) in inner.sig.inputs.iter_mut().skip(1).zip(&step.params) {
        if let (syn::FnArg::Typed(pt), Role::Scalar { ty }) = (input, &p.role) {
            *pt.ty = syn::parse_quote!(::graphed::Scalar<#ty>);
        }
    }

    let mut call_params = Vec::new();
    let mut input_names = Vec::new();
    let mut inputs = Vec::new();
    let mut states = Vec::new();
    let mut scalars = Vec::new();
    let mut keys = Vec::new();
    let mut binds = Vec::new();
    let mut pass = Vec::new();
    let (mut n_in, mut n_scalar) = (0usize, 0usize);
    for p in &step.params {
        let id = &p.name;
        let pty = &p.ty;
        let pname = id.to_string();
        match &p.role {
            Role::Input { elem } => {
                call_params.push(quote!(#id: &(impl ::graphed::AsInput<#elem> + ?Sized)));
                input_names.push(pname.clone());
                inputs.push(quote!(::graphed::AsInput::<#elem>::as_input(#id)));
                binds.push(quote!(let #id = ::graphed::Input::<#elem>::__from_view(__ins[#n_in].clone())?;));
                pass.push(quote!(&#id));
                n_in += 1;
            }
            Role::State { mutable } => {
                call_params.push(quote!(#id: #pty));
                states.push(
                    quote!(::graphed::State::visit_state(&*#id, #pname, &mut |__n, __v| {
                    __states.push(__v);
                    __state_names.push(__n);
                });
                ::graphed::State::state_key(&*#id, &mut __state_keys);),
                );
                binds.push(quote!(__cx.__state(&*#id, #pname);));
                pass.push(if *mutable {
                    quote!(&mut *#id)
                } else {
                    quote!(&*#id)
                });
            }
            Role::Scalar { ty } => {
                call_params.push(quote!(#id: #ty));
                scalars.push(quote!(::graphed::ScalarArg::<#ty>::from(#id).erase()));
                binds.push(quote!(let #id = __cx.__scalar::<#ty>(#n_scalar);));
                pass.push(quote!(#id));
                n_scalar += 1;
            }
            Role::Key { hashed } => {
                call_params.push(quote!(#id: #pty));
                keys.push(if *hashed {
                    quote!(::graphed::__private::key_hash(&#id))
                } else {
                    quote!(#id as u64)
                });
                pass.push(quote!(#id));
            }
        }
    }
    let cx_arg = if step.cx_mut {
        quote!(__cx)
    } else {
        quote!(&*__cx)
    };
    let outs = &step.outputs;
    let n_out = outs.len();
    let idx: Vec<usize> = (0..n_out).collect();
    let (ret_ty, collect, build) = if n_out == 0 {
        (
            quote!(()),
            quote!(let () = __r; ::std::vec::Vec::new()),
            quote!(()),
        )
    } else if !step.tuple {
        let t = &outs[0];
        (
            quote!(::graphed::Out<'__s, #t>),
            quote!(::std::vec![__r.__into_view()]),
            quote!(::graphed::Out::<#t>::__new(&__outs[0])?),
        )
    } else {
        let fields: Vec<TokenStream> = idx
            .iter()
            .map(|i| {
                let i = syn::Index::from(*i);
                quote!(__r.#i.__into_view())
            })
            .collect();
        (
            quote!((#(::graphed::Out<'__s, #outs>,)*)),
            quote!(::std::vec![#(#fields),*]),
            quote!((#(::graphed::Out::<#outs>::__new(&__outs[#idx])?,)*)),
        )
    };
    let args = quote! {
        ::graphed::CallArgs {
            input_names: &[#(#input_names),*],
            state_names: __state_names,
            inputs: ::std::vec![#(#inputs),*],
            states: __states,
            scalars: ::std::vec![#(#scalars),*],
            structural: {
                let mut __k = ::std::vec![#(#keys),*];
                __k.extend(__state_keys);
                __k
            },
        }
    };
    let collect_states = quote! {
        let mut __states: ::std::vec::Vec<::graphed::RawView> = ::std::vec::Vec::new();
        let mut __state_names: ::std::vec::Vec<&'static str> = ::std::vec::Vec::new();
        let mut __state_keys: ::std::vec::Vec<u64> = ::std::vec::Vec::new();
        #(#states)*
    };
    let closure = quote! {
        |__cx: &mut ::graphed::Step, __ins: &[::graphed::RawView]| -> ::graphed::Result<::std::vec::Vec<::graphed::RawView>> {
            #(#binds)*
            let __r = #body_fn(#cx_arg, #(#pass),*)?;
            ::core::result::Result::Ok({ #collect })
        }
    };
    let doc = format!(
        "Holder of the recorded step `{name_str}`: records it once per capture key and replays it."
    );
    let call_doc = format!("Runs `{name_str}`: replays its recording for this call's key (recording it first when the key is new). The outputs are borrowed from the holder until the next call.");
    quote! {
        #(#docs)*
        #[doc = #doc]
        #vis struct #ty {
            holder: ::graphed::Graphed,
        }

        #[allow(clippy::too_many_arguments, clippy::needless_lifetimes, clippy::needless_question_mark)]
        impl #ty {
            /// A holder on `device` with the default cache bounds.
            #vis fn new(device: &::graphed::Device) -> ::graphed::Result<Self> {
                ::core::result::Result::Ok(Self { holder: ::graphed::Graphed::new(device, #name_str) })
            }

            /// A holder with explicit cache bounds and options.
            #vis fn with_config(device: &::graphed::Device, config: ::graphed::Config) -> ::graphed::Result<Self> {
                ::core::result::Result::Ok(Self { holder: ::graphed::Graphed::with_config(device, #name_str, config) })
            }

            #[doc = #call_doc]
            #vis fn call<'__s>(&'__s mut self, #(#call_params),*) -> ::graphed::Result<#ret_ty> {
                #collect_states
                let __args = #args;
                let mut __body = #closure;
                let __outs = self.holder.call(__args, &mut __body)?;
                ::core::result::Result::Ok(#build)
            }

            /// Runs the step eagerly, without recording (same results as `call`, bitwise, on one backend).
            #vis fn eager<'__s>(&'__s mut self, #(#call_params),*) -> ::graphed::Result<#ret_ty> {
                #collect_states
                let __args = #args;
                let mut __body = #closure;
                let __outs = self.holder.eager(__args, &mut __body)?;
                ::core::result::Result::Ok(#build)
            }

            /// Counters: recordings, replays, eager calls and why, evictions, latencies, bytes.
            #vis fn stats(&self) -> ::graphed::Stats {
                self.holder.stats()
            }

            /// Drains the device, then releases every recording; returns the drain's error.
            #vis fn clear(&mut self) -> ::graphed::Result<()> {
                self.holder.clear()
            }

            /// The plan of the most recently used recording.
            #vis fn plan(&self) -> ::core::option::Option<&::graphed::Plan> {
                self.holder.last_plan()
            }

            /// The lifecycle holder (cache bounds, keys, eviction).
            #vis fn holder(&mut self) -> &mut ::graphed::Graphed {
                &mut self.holder
            }
        }

        #[allow(clippy::too_many_arguments)]
        #inner
    }
}
