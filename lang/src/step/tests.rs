//! Unit tests of the `#[graphed]` front end on `proc_macro2` tokens: parameter roles, the
//! holder's name, and the errors bad steps get.

use proc_macro2::TokenStream;
use quote::quote;

use super::parse::Role;

fn step(item: TokenStream) -> (Option<super::parse::Step>, Vec<String>) {
    let func: syn::ItemFn = syn::parse2(item).expect("test steps are functions");
    let mut errors = Vec::new();
    let step = super::parse::step(TokenStream::new(), &func, &mut errors);
    if let Some(s) = &step {
        super::check::body(&func, s, &mut errors);
    }
    (step, errors.iter().map(|e| e.to_string()).collect())
}

fn errors(item: TokenStream) -> Vec<String> {
    let (_, errors) = step(item);
    assert!(!errors.is_empty(), "the step was accepted");
    errors
}

fn assert_one_error(errs: &[String], needle: &str) {
    assert_eq!(
        errs.len(),
        1,
        "expected one error containing {needle:?}, got {errs:#?}"
    );
    assert!(
        errs[0].contains(needle),
        "{:?} does not contain {needle:?}",
        errs[0]
    );
}

#[test]
fn parameter_roles() {
    let (s, errs) = step(quote! {
        fn train_step(
            cx: &mut Step,
            #[state] w: &mut Buffer<f32>,
            #[state] m: &Buffer<f32>,
            x: &Input<f32>,
            lr: f32,
            #[key] relu: bool,
        ) -> Result<(Output<f32>, Output<u32>)> {
            todo!()
        }
    });
    assert!(errs.is_empty(), "{errs:#?}");
    let s = s.expect("a step");
    assert_eq!(s.holder, "TrainStep");
    assert!(s.cx_mut && s.tuple && s.outputs.len() == 2);
    let roles: Vec<(String, &str)> = s
        .params
        .iter()
        .map(|p| {
            let r = match p.role {
                Role::Input { .. } => "input",
                Role::State { mutable: true } => "state mut",
                Role::State { mutable: false } => "state",
                Role::Scalar { .. } => "scalar",
                Role::Key { .. } => "key",
            };
            (p.name.to_string(), r)
        })
        .collect();
    let want = [
        ("w", "state mut"),
        ("m", "state"),
        ("x", "input"),
        ("lr", "scalar"),
        ("relu", "key"),
    ];
    assert_eq!(roles, want.map(|(n, r)| (n.to_string(), r)));
}

#[test]
fn holder_names() {
    for (name, holder) in [
        (quote!(sgd), "Sgd"),
        (quote!(r#loop), "Loop"),
        (quote!(mlp_s_step_), "MlpSStep"),
    ] {
        let (s, errs) = step(quote!(fn #name(cx: &mut Step) -> Result<()> { Ok(()) }));
        assert!(errs.is_empty(), "{errs:#?}");
        assert_eq!(s.expect("a step").holder, holder);
    }
    for (name, msg) in [
        (quote!(step), "shadows graphed's `Step`"),
        (quote!(input), "shadows graphed's `Input`"),
        (quote!(_2d), "gives `2d`, which is not a type name"),
        (quote!(__), "gives ``"),
        (quote!(self_), "gives `Self`"),
    ] {
        let errs = errors(quote!(fn #name(cx: &mut Step) -> Result<()> { Ok(()) }));
        assert_one_error(&errs, msg);
    }
}

#[test]
fn signature_errors_are_reported_together() {
    let errs = errors(quote! {
        async unsafe fn train<T>(x: &Input<f32>, data: Vec<f32>, #[state] n: &mut u32, #[key] lr: f32) -> Vec<f32> {
            todo!()
        }
    });
    let expected = [
        "cannot be `async`",
        "cannot be generic",
        "cannot be `unsafe`",
        "recording context first",
        "per-call data is `&Input<T>`",
        "a `#[state]` parameter is `&mut Buffer<T>`",
        "a `#[key]` parameter is a `bool`, an integer",
        "a step returns `Result<Output<T>>`",
    ];
    assert_eq!(errs.len(), expected.len(), "{errs:#?}");
    for (e, want) in errs.iter().zip(expected) {
        assert!(e.contains(want), "{e:?} does not contain {want:?}");
    }
}

#[test]
fn host_computation_on_a_per_step_scalar() {
    for (body, what) in [
        (quote!(let a = lr * 2.0;), "arithmetic"),
        (quote!(let a = 2.0 * lr;), "arithmetic"),
        (quote!(let a = -lr;), "arithmetic"),
        (quote!(if lr > 0.5 {}), "a comparison"),
        (quote!(let a = lr as f64;), "a conversion"),
        (quote!(if on {}), "a branch"),
        (quote!(let a = [1, 2][n as usize];), "a conversion"),
        (quote!(for i in 0..n {}), "a range"),
    ] {
        let errs = errors(quote! {
            fn train(cx: &mut Step, lr: f32, on: bool, n: u32) -> Result<()> { #body Ok(()) }
        });
        assert_one_error(&errs, what);
    }
    // Passing it on, shadowing it, and computing with `#[key]` values are fine.
    let (_, errs) = step(quote! {
        fn train(cx: &mut Step, #[state] w: &mut Buffer<f32>, lr: f32, t: u32, #[key] k: u32) -> Result<()> {
            sgd::launch(cx, w.len() * 2, lr, w)?;
            let t = 3u32 * 2;
            let f = |lr: f32| lr * 2.0;
            let m = k * 2 + t;
            Ok(())
        }
    });
    assert!(errs.is_empty(), "{errs:#?}");
}

#[test]
fn expand_of_a_valid_step_is_valid_rust() {
    let out = super::expand(
        TokenStream::new(),
        quote! {
            fn train(cx: &mut Step, #[state] w: &mut Buffer<f32>, x: &Input<f32>, lr: f32) -> Result<(Output<f32>,)> {
                let y = cx.output::<f32>(x.len())?;
                Ok((y,))
            }
        },
    );
    let file: syn::File = syn::parse2(out.clone()).expect("valid Rust");
    assert!(file
        .items
        .iter()
        .any(|i| matches!(i, syn::Item::Struct(s) if s.ident == "Train")));
    // A one-element tuple of outputs stays a tuple.
    assert!(
        out.to_string()
            .contains("(:: graphed :: Out < '__s , f32 > ,)"),
        "{out}"
    );
}

#[test]
fn a_body_error_keeps_the_holder_so_callers_add_no_errors() {
    let out = super::expand(
        TokenStream::new(),
        quote! {
            fn train(cx: &mut Step, lr: f32) -> Result<()> { let a = lr * 2.0; Ok(()) }
        },
    );
    let file: syn::File = syn::parse2(out.clone()).expect("valid Rust");
    assert!(out.to_string().contains("compile_error"));
    assert!(file
        .items
        .iter()
        .any(|i| matches!(i, syn::Item::Struct(s) if s.ident == "Train")));
    assert!(file
        .items
        .iter()
        .any(|i| matches!(i, syn::Item::Fn(f) if f.sig.ident == "train")));
}

#[test]
fn a_signature_error_emits_the_function_without_role_attributes() {
    let out = super::expand(
        quote!(bounds = 3),
        quote! { fn train(cx: &mut Step, #[state] w: &mut Buffer<f32>) -> Result<()> { Ok(()) } },
    );
    let s = out.to_string();
    assert!(s.contains("takes no arguments"), "{s}");
    assert!(!s.contains("# [state]"), "{s}");
    syn::parse2::<syn::File>(out).expect("valid Rust");
}
