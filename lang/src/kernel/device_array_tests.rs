//! Unit tests of arrays passed to and returned from `#[device]` helpers by value: the
//! checker's errors at calls and returns, and the emitted WGSL (validated by naga), CUDA C
//! (a struct per array type, copied at constant indices) and host form.

use proc_macro2::TokenStream;
use quote::quote;

use super::device_tests::{assert_one, helper_errors, kernel, kernel_errors as errors, valid_wgsl};
use super::emit;
use super::ir::*;

fn rev() -> TokenStream {
    quote! {
        fn rev(mut v: [f32; 4], s: f32) -> [f32; 4] {
            let mut r = [0.0f32; 4];
            for k in 0u32..4u32 {
                r[k] = s * v[3u32 - k];
            }
            v[0] = 0.0;
            r
        }
    }
}

fn dot() -> TokenStream {
    quote! {
        fn dot(a: [f32; 4], b: [f32; 4]) -> f32 {
            let mut s = 0.0;
            for k in 0u32..4u32 {
                s += a[k] * b[k];
            }
            s
        }
    }
}

fn user() -> TokenStream {
    quote! {
        pub fn user(s: f32, x: &[f32], y: &mut [f32]) {
            let i = global_id().x;
            if i < y.len() {
                let a = [x[i], x[i] + 1.0, x[i] + 2.0, x[i] + 3.0];
                let r = rev(a, s);
                y[i] = dot(a, r) + r[1];
            }
        }
    }
}

#[test]
fn arrays_by_value_are_emitted_on_every_target() {
    let k = kernel(user(), &[rev(), dot()]);
    let f = &k.helpers.iter().find(|f| f.name == "rev").unwrap();
    assert_eq!(f.array_params.len(), 1);
    assert_eq!(f.ret_array, Some((Ty::F32, 4)));

    let wgsl = valid_wgsl(&k);
    assert!(wgsl.contains("-> array<f32, 4>"), "{wgsl}");

    let cuda = emit::cuda::emit(&k);
    // One struct for the one array type, declared once, before the helpers.
    assert_eq!(
        cuda.matches("struct gd_arr_f32_4 { float v[4]; };").count(),
        1,
        "{cuda}"
    );
    assert!(cuda.contains("static __device__ gd_arr_f32_4 "), "{cuda}");
    // Every copy in or out of the struct is at a constant index.
    for line in cuda.lines().filter(|l| l.contains(".v[")) {
        for part in line.split(".v[").skip(1) {
            let ix: String = part.chars().take_while(|c| *c != ']').collect();
            assert!(
                ix.parse::<u32>().is_ok(),
                "non-constant index `{ix}` in {line}"
            );
        }
    }

    let host = emit::host::emit(&k);
    assert!(
        host.contains("-> ::core::result::Result<[f32; 4], ::graphed::KernelFault>"),
        "{host}"
    );
}

#[test]
fn a_wrong_array_argument_names_expected_and_found() {
    let k = quote! {
        pub fn bad(x: &[f32], y: &mut [f32]) {
            let i = global_id().x;
            let short = [1.0f32, 2.0, 3.0];
            let ints = [1u32, 2, 3, 4];
            let a = [1.0f32; 4];
            y[i] = dot(short, a) + dot(a, ints) + dot(x[i], a);
        }
    };
    let errs = errors(k, &[dot()]);
    assert_eq!(errs.len(), 3, "{errs:#?}");
    assert!(
        errs[0].contains("argument `a` of `dot` is `[f32; 4]`, found `[f32; 3]`"),
        "{errs:#?}"
    );
    assert!(
        errs[1].contains("argument `b` of `dot` is `[f32; 4]`, found `[u32; 4]`"),
        "{errs:#?}"
    );
    assert!(
        errs[2].contains("argument `a` of `dot` is an array `[f32; 4]`, passed by value"),
        "{errs:#?}"
    );
}

#[test]
fn an_array_result_is_bound_by_let() {
    let k = quote! {
        pub fn bad(s: f32, y: &mut [f32]) {
            let a = [1.0f32; 4];
            y[0] = 2.0 * rev(a, s);
        }
    };
    assert_one(&errors(k, &[rev()]), "`rev` returns an array `[f32; 4]`, which is not a value of an expression: bind it to a new array, `let r = rev(...);`");
}

#[test]
fn a_helper_returns_an_array_of_its_type() {
    let wrong = quote! {
        fn wrong(v: [f32; 4]) -> [f32; 3] {
            v
        }
    };
    assert_one(
        &helper_errors(&[wrong]),
        "`wrong` returns `[f32; 3]`, found `[f32; 4]`",
    );
    let scalar = quote! {
        fn scalar(x: f32) -> [f32; 2] {
            x
        }
    };
    assert_one(
        &helper_errors(&[scalar]),
        "`scalar` returns `[f32; 2]`: return one of its per-invocation arrays by name",
    );
    let sized = quote! {
        fn sized(v: [f32; 0]) -> f32 {
            1.0
        }
    };
    assert_one(
        &helper_errors(&[sized]),
        "an array passed by value is `[T; N]`",
    );
}

#[test]
fn an_immutable_array_parameter_is_read_only() {
    let h = quote! {
        fn set(v: [f32; 2]) -> f32 {
            v[0] = 1.0;
            v[1]
        }
    };
    assert_one(
        &helper_errors(&[h]),
        "cannot write to `v`: the parameter is not `mut`; declare it `mut v: [f32; 2]`",
    );
}
