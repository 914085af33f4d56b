//! Unit tests of `copy_async`: the checker's errors, and what each target is given (WGSL
//! validated by naga; CUDA's `cp.async` with its fallback).

use proc_macro2::TokenStream;
use quote::quote;

use super::device_tests::{assert_one, kernel, kernel_errors, valid_checked_wgsl, valid_wgsl};
use super::emit;

fn pipeline() -> TokenStream {
    quote! {
        pub fn pipe(n: u32, x: &[u32], y: &[f32], out: &mut [u32]) {
            let t = shared::<u32, 512>();
            let f = shared::<f32, 8>();
            let i = local_id().x;
            copy_async(t, 4 * i, x, 4 * global_id().x, n);
            copy_async(f, 4 * (i % 2), y, i, 4);
            copy_async_commit();
            copy_async_wait(0);
            barrier();
            out[global_id().x] = t[(i * 5) % 256];
        }
    }
}

#[test]
fn copy_async_lowers_to_the_portable_form_and_cp_async() {
    let k = kernel(pipeline(), &[]);
    let wgsl = valid_wgsl(&k);
    assert!(!wgsl.contains("cp.async"), "{wgsl}");
    valid_checked_wgsl(&k, 7);
    let cuda = emit::cuda::emit(&k);
    assert_eq!(
        cuda.matches("cp.async.cg.shared.global").count(),
        2,
        "{cuda}"
    );
    assert_eq!(cuda.matches("cp.async.commit_group;").count(), 1, "{cuda}");
    assert_eq!(cuda.matches("cp.async.wait_group 0;").count(), 1, "{cuda}");
    assert!(cuda.contains("__shared__ __align__(16) gd_u32"), "{cuda}");
    // Every `cp.async` has its element-copy fallback and the architecture guard.
    assert_eq!(cuda.matches("} else\n").count(), 2, "{cuda}");
    assert!(cuda.contains("__CUDA_ARCH__ >= 800"), "{cuda}");
    let host = emit::host::emit(&k);
    assert!(!host.contains("cp.async"), "{host}");
}

#[test]
fn copy_async_rejects_what_it_cannot_copy() {
    let cases: [(TokenStream, &str); 10] = [
        (quote!(copy_async(t, 0, x)), "copies `src[s .. s + n]`"),
        (
            quote!(copy_async(x, 0, x, 0, 4)),
            "the first argument of `copy_async` is the workgroup array",
        ),
        (
            quote!(copy_async(t, 0, t, 0, 4)),
            "the third argument of `copy_async` is the slice parameter",
        ),
        (
            quote!(copy_async(t, 0, y, 0, 4)),
            "holds `u32` and `y` holds `f32`",
        ),
        (quote!(copy_async(t, 0, h, 0, 4)), "copies 32-bit elements"),
        (quote!(copy_async(t, 254, x, 0, 4)), "past its 256 elements"),
        (
            quote!(copy_async(t, 0, x, 0, 1.0)),
            "expected `u32`, found a float literal",
        ),
        (quote!(copy_async_wait(n)), "takes one constant"),
        (quote!(copy_async_wait(8)), "at most 7"),
        (quote!(copy_async_commit(1)), "takes no arguments"),
    ];
    for (stmt, want) in cases {
        let errs = kernel_errors(
            quote! {
                pub fn bad(n: u32, x: &[u32], y: &[f32], h: &[f16], out: &mut [u32]) {
                    let t = shared::<u32, 256>();
                    #stmt;
                    out[0] = t[0] + n;
                }
            },
            &[],
        );
        assert_one(&errs, want);
    }
}

#[test]
fn copy_async_is_a_statement() {
    let errs = kernel_errors(
        quote! {
            pub fn bad(x: &[u32], out: &mut [u32]) {
                let t = shared::<u32, 8>();
                let v = copy_async(t, 0, x, 0, 4);
                out[0] = t[0];
            }
        },
        &[],
    );
    assert!(
        errs.iter().any(|e| e.contains("is a statement")),
        "{errs:#?}"
    );
    let errs = kernel_errors(
        quote! {
            pub fn bad(x: &[u32], out: &mut [u32]) {
                let t = shared::<u32, 8>();
                atomic_add(t, 0, 1u32);
                copy_async(t, 4, x, 0, 4);
                out[0] = 0;
            }
        },
        &[],
    );
    assert_one(&errs, "used with atomics");
}

#[test]
fn a_device_helper_may_issue_and_wait_for_copies() {
    let k = kernel(
        quote! {
            pub fn staged(x: &[u32], out: &mut [u32]) {
                let t = shared::<u32, 256>();
                let i = local_id().x;
                fill(t, x, 4 * i);
                barrier();
                out[global_id().x] = t[(i * 4 + 1) % 256];
            }
        },
        &[quote! {
            fn fill(t: &mut [u32; 256], x: &[u32], at: u32) {
                copy_async(t, at, x, at, 4);
                copy_async_commit();
                copy_async_wait(0);
            }
        }],
    );
    valid_wgsl(&k);
    valid_checked_wgsl(&k, 5);
    let cuda = emit::cuda::emit(&k);
    assert_eq!(
        cuda.matches("cp.async.cg.shared.global").count(),
        1,
        "{cuda}"
    );
    assert_eq!(cuda.matches("cp.async.wait_group 0;").count(), 1, "{cuda}");
    let errs = kernel_errors(
        quote! {
            pub fn bad(x: &[u32], out: &mut [u32]) {
                let t = shared::<u32, 8>();
                fill(t, x);
                out[0] = t[0];
            }
        },
        &[quote! {
            fn fill(t: &[u32; 8], x: &[u32]) {
                copy_async(t, 0, x, 0, 4);
            }
        }],
    );
    assert!(
        errs.iter().any(|e| e.contains("is read-only here")),
        "{errs:#?}"
    );
}
