//! Unit tests of `#[device]` helpers: the expansion chain's bundles (without rustc), the
//! checker's errors at calls and in helper bodies, and the emitted WGSL (validated by naga)
//! and CUDA C.

use proc_macro2::TokenStream;
use quote::quote;

use super::device::lower_with_helpers;
use super::emit;
use super::ir::*;

fn kernel(k: TokenStream, helpers: &[TokenStream]) -> Kernel {
    lower_with_helpers(quote!(workgroup = 64), Some(k), helpers)
        .unwrap_or_else(|e| panic!("{e:#?}"))
}

fn kernel_errors(k: TokenStream, helpers: &[TokenStream]) -> Vec<String> {
    match lower_with_helpers(quote!(workgroup = 64), Some(k), helpers) {
        Ok(k) => panic!("kernel `{}` was accepted", k.name),
        Err(e) => e,
    }
}

/// The errors of the last of `helpers`.
fn helper_errors(helpers: &[TokenStream]) -> Vec<String> {
    lower_with_helpers(TokenStream::new(), None, helpers).unwrap_err()
}

fn assert_one(errs: &[String], needle: &str) {
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

fn valid_wgsl(k: &Kernel) -> String {
    let src = emit::wgsl::emit(k);
    let module = naga::front::wgsl::parse_str(&src)
        .unwrap_or_else(|e| panic!("WGSL does not parse: {}\n{src}", e.emit_to_string(&src)));
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("WGSL does not validate: {}\n{src}", e.emit_to_string(&src)));
    src
}

fn gelu() -> TokenStream {
    quote! {
        pub fn gelu(x: f32) -> f32 {
            let u = 0.7978846 * (x + 0.044715 * x * x * x);
            0.5 * x * (1.0 + tanh(u))
        }
    }
}

fn at() -> TokenStream {
    quote! {
        fn at(x: &[f32], i: u32) -> f32 {
            if i < x.len() { x[i] } else { 0.0 }
        }
    }
}

#[test]
fn a_scalar_helper_is_lowered_and_emitted_as_a_function() {
    let k = kernel(
        quote! {
            pub fn act(x: &[f32], y: &mut [f32]) {
                let i = global_id().x;
                if i < y.len() { y[i] = gelu(x[i]); }
            }
        },
        &[gelu()],
    );
    assert_eq!(k.helpers.len(), 1);
    let h = &k.helpers[0];
    assert_eq!(h.name, "gelu");
    assert!(h.id.starts_with("gd_fn_gelu_"), "{}", h.id);
    assert_eq!(h.ret, Some(Ty::F32));
    assert!(matches!(h.body.last(), Some(Stmt::ReturnValue(_))));
    let wgsl = valid_wgsl(&k);
    assert!(
        wgsl.contains(&format!("fn {}(x_v: f32) -> f32 {{", h.id)),
        "{wgsl}"
    );
    let cuda = emit::cuda::emit(&k);
    assert!(
        cuda.contains(&format!("static __device__ float {}(float x_p)", h.id)),
        "{cuda}"
    );
    let host = emit::host::emit(&k);
    assert!(
        host.contains(&format!(
            "fn {}(x_p: f32) -> ::core::result::Result<f32",
            h.id
        )),
        "{host}"
    );
    syn::parse_str::<syn::File>(&host)
        .unwrap_or_else(|e| panic!("host form does not parse: {e}\n{host}"));
}

#[test]
fn helpers_calling_helpers_are_flattened_once_each() {
    let k = kernel(
        quote! {
            pub fn two(x: &[f32], y: &mut [f32]) {
                let i = global_id().x;
                if i < y.len() { y[i] = outer(x[i]) + gelu(x[i]); }
            }
        },
        &[
            gelu(),
            quote! { fn inner(x: f32) -> f32 { gelu(x) * 2.0 } },
            quote! { fn outer(x: f32) -> f32 { inner(x) + helpers::gelu(x) } },
        ],
    );
    let mut names: Vec<&str> = k.helpers.iter().map(|h| h.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["gelu", "inner", "outer"]);
    let wgsl = valid_wgsl(&k);
    assert_eq!(wgsl.matches("// `#[device]` gelu\n").count(), 1, "{wgsl}");
}

#[test]
fn slice_helpers_are_specialised_per_binding_in_wgsl() {
    let k = kernel(
        quote! {
            pub fn sum2(a: &[f32], b: &[f32], y: &mut [f32]) {
                let i = global_id().x;
                if i < y.len() {
                    let s = at(a, i) + at(b, i) + at(a, i + 1);
                    put(y, i, s);
                }
            }
        },
        &[
            at(),
            quote! { fn put(y: &mut [f32], i: u32, v: f32) { if i >= y.len() { return; } y[i] = v; } },
        ],
    );
    let wgsl = valid_wgsl(&k);
    assert_eq!(wgsl.matches("// `#[device]` at\n").count(), 2, "{wgsl}");
    assert!(
        wgsl.contains("a_p[x_off + i_v]") && wgsl.contains("b_p[x_off + i_v]"),
        "{wgsl}"
    );
    assert!(wgsl.contains("y_p[y_off + i_v] = v_v;"), "{wgsl}");
    let cuda = emit::cuda::emit(&k);
    assert!(
        cuda.contains("const float* x_p, gd_u32 x_off, gd_u32 x_len"),
        "{cuda}"
    );
    assert!(
        cuda.contains("float* y_p, gd_u32 y_off, gd_u32 y_len"),
        "{cuda}"
    );
}

#[test]
fn a_wrong_argument_count_is_an_error_at_the_call() {
    let e = kernel_errors(
        quote! { pub fn k(y: &mut [f32]) { y[0] = gelu(1.0, 2.0); } },
        &[gelu()],
    );
    assert_one(
        &e,
        "`gelu` takes 1 argument(s), found 2: `gelu(x: f32) -> f32`",
    );
}

#[test]
fn a_wrong_argument_type_is_an_error_at_the_argument() {
    let e = kernel_errors(
        quote! { pub fn k(n: u32, y: &mut [f32]) { y[0] = gelu(n); } },
        &[gelu()],
    );
    assert_one(&e, "argument `x` of `gelu` is `f32`, found `u32`");
    let e = kernel_errors(
        quote! { pub fn k(y: &mut [u32]) { y[0] = 1u32; let v = at(y, 0u32); } },
        &[at()],
    );
    assert_one(
        &e,
        "argument `x` of `at` is `&[f32]`, found a slice of `u32`",
    );
    let e = kernel_errors(
        quote! { pub fn k(y: &mut [f32]) { let v = 1.0; y[0] = at(v, 0u32); } },
        &[at()],
    );
    assert_one(&e, "pass a slice parameter by its name");
}

#[test]
fn writing_helpers_need_writable_slices_and_a_statement_position() {
    let put = quote! { fn put(y: &mut [f32], i: u32, v: f32) -> f32 { y[i] = v; v } };
    let e = kernel_errors(
        quote! { pub fn k(x: &[f32], y: &mut [f32]) { let v = put(x, 0u32, 1.0); y[0] = v; } },
        std::slice::from_ref(&put),
    );
    assert_one(&e, "but `x` is read-only: declare it `&mut [f32]`");
    let e = kernel_errors(
        quote! { pub fn k(y: &mut [f32]) { y[1] = put(y, 0u32, 1.0) + 1.0; } },
        std::slice::from_ref(&put),
    );
    assert_one(&e, "`put` writes memory");
    // As a `let` initializer it is accepted.
    kernel(
        quote! { pub fn k(y: &mut [f32]) { let v = put(y, 0u32, 1.0); y[1] = v; } },
        &[put],
    );
}

#[test]
fn a_helper_without_a_value_is_a_statement() {
    let put = quote! { fn put(y: &mut [f32], v: f32) { y[0] = v; } };
    let e = kernel_errors(
        quote! { pub fn k(y: &mut [f32]) { let v = put(y, 1.0); } },
        std::slice::from_ref(&put),
    );
    assert_one(&e, "`put` returns nothing, so its call is not a value");
    let k = kernel(quote! { pub fn k(y: &mut [f32]) { put(y, 1.0); } }, &[put]);
    assert!(matches!(k.body[0], Stmt::Call(_)));
    valid_wgsl(&k);
}

#[test]
fn recursion_is_an_error() {
    let e = helper_errors(&[
        quote! { fn fact(n: u32) -> u32 { if n == 0 { 1 } else { n * fact(n - 1) } } },
    ]);
    assert_one(&e, "a `#[device]` function cannot call itself");
}

#[test]
fn helpers_cannot_use_ids_barriers_workgroup_memory_or_atomics() {
    let e = helper_errors(&[quote! { fn f() -> u32 { global_id().x } }]);
    assert_one(
        &e,
        "`global_id()` is not available in a `#[device]` function",
    );
    assert!(e[0].contains("pass the value as a parameter"), "{e:?}");
    let e = helper_errors(&[quote! { fn f(y: &mut [f32]) { barrier(); y[0] = 1.0; } }]);
    assert_one(&e, "`barrier()` is not available in a `#[device]` function");
    let e = helper_errors(&[quote! { fn f() -> f32 { let t = shared::<f32, 4>(); 1.0 } }]);
    assert_one(&e, "cannot declare workgroup memory");
    let e = helper_errors(&[quote! { fn f(y: &mut [u32]) { atomic_add(y, 0u32, 1u32); } }]);
    assert_one(&e, "atomics are not supported in a `#[device]` function");
}

#[test]
fn a_helper_must_return_its_value_on_every_path() {
    let e = helper_errors(&[quote! { fn f(x: f32) -> f32 { if x > 0.0 { return x; } } }]);
    assert_one(&e, "can reach its end without a value");
    let e = helper_errors(&[quote! { fn f(x: f32) -> f32 { return; } }]);
    assert_one(&e, "`f` returns `f32`: write `return value;`");
    let e = helper_errors(&[quote! { fn f(x: f32) -> f64 { x } }]);
    assert!(
        e.iter()
            .any(|m| m.contains("returns `f32`, `f16`, `bf16`, `i32`, `u32` or `bool`")),
        "{e:?}"
    );
    // Every path returning, through an `if` with statements in its branches.
    let k = kernel(
        quote! { pub fn k(y: &mut [f32]) { y[0] = f(y.len()); } },
        &[quote! {
            fn f(n: u32) -> f32 {
                if n > 3 { let a = n * 2; a as f32 } else { let b = n + 1; b as f32 }
            }
        }],
    );
    valid_wgsl(&k);
}

#[test]
fn a_likely_typo_of_a_builtin_is_not_taken_for_a_helper() {
    let e = kernel_errors(
        quote! { pub fn k(x: &[f32], y: &mut [f32]) { y[0] = sqrtt(x[0]); } },
        &[],
    );
    assert_one(&e, "unknown function `sqrtt` (did you mean `sqrt`?)");
    assert!(e[0].contains("`self::sqrtt(...)`"), "{e:?}");
}

#[test]
fn a_kernel_reports_its_other_errors_before_its_helpers_are_looked_up() {
    let out = super::expand(
        quote!(workgroup = 64),
        quote! { pub fn k(y: &mut [f32]) { let a: f32 = 1; y[0] = gelu(a); } },
    )
    .to_string();
    assert!(
        out.contains("compile_error") && out.contains("found an integer literal"),
        "{out}"
    );
    assert!(!out.contains("kernel_resume"), "{out}");
    // Without errors: a call of the first callee's macro, and a probe of its function.
    let ok = super::expand(
        quote!(workgroup = 64),
        quote! { pub fn k(y: &mut [f32]) { y[0] = helpers::gelu(1.0); } },
    )
    .to_string();
    assert!(
        ok.contains("helpers :: gelu !") && ok.contains("kernel_resume"),
        "{ok}"
    );
    assert!(ok.contains("let _ = helpers :: gelu ;"), "{ok}");
}
