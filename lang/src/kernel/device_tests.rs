//! Unit tests of `#[device]` helpers: the expansion chain's bundles (without rustc), the
//! checker's errors at calls and in helper bodies, and the emitted WGSL (validated by naga)
//! and CUDA C.

use proc_macro2::TokenStream;
use quote::quote;

use super::device::lower_with_helpers;
use super::emit;
use super::ir::*;

pub(super) fn kernel(k: TokenStream, helpers: &[TokenStream]) -> Kernel {
    lower_with_helpers(quote!(workgroup = 64), Some(k), helpers)
        .unwrap_or_else(|e| panic!("{e:#?}"))
}

pub(super) fn kernel_errors(k: TokenStream, helpers: &[TokenStream]) -> Vec<String> {
    match lower_with_helpers(quote!(workgroup = 64), Some(k), helpers) {
        Ok(k) => panic!("kernel `{}` was accepted", k.name),
        Err(e) => e,
    }
}

/// The errors of the last of `helpers`.
pub(super) fn helper_errors(helpers: &[TokenStream]) -> Vec<String> {
    lower_with_helpers(TokenStream::new(), None, helpers).unwrap_err()
}

pub(super) fn assert_one(errs: &[String], needle: &str) {
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

pub(super) fn valid_wgsl(k: &Kernel) -> String {
    validated(emit::wgsl::emit(k))
}

/// The checked variant's WGSL (kernel id `id`), parsed and validated by naga.
pub(super) fn valid_checked_wgsl(k: &Kernel, id: u32) -> String {
    validated(emit::wgsl::emit_checked(k, id))
}

fn validated(src: String) -> String {
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
fn helpers_cannot_use_ids_or_declare_workgroup_memory() {
    let e = helper_errors(&[quote! { fn f() -> u32 { global_id().x } }]);
    assert_one(
        &e,
        "`global_id()` is not available in a `#[device]` function",
    );
    assert!(e[0].contains("pass the value as a parameter"), "{e:?}");
    let e = helper_errors(&[quote! { fn f() -> f32 { let t = shared::<f32, 4>(); 1.0 } }]);
    assert_one(&e, "cannot declare workgroup memory");
    assert!(e[0].contains("`&mut [T; N]` parameter"), "{e:?}");
}

fn tree_sum() -> TokenStream {
    quote! {
        fn tree_sum(s: &mut [f32; 64], t: u32) -> f32 {
            barrier();
            let mut h = 32u32;
            while h > 0 {
                if t < h { s[t] = s[t] + s[t + h]; }
                barrier();
                h = h / 2;
            }
            s[0]
        }
    }
}

fn count() -> TokenStream {
    quote! {
        fn count(bins: &mut [u32; 64], v: u32) {
            atomic_add(bins, v % 64, 1u32);
        }
    }
}

#[test]
fn a_helper_takes_workgroup_memory_and_reaches_barriers() {
    let k = kernel(
        quote! {
            pub fn total(x: &[f32], out: &mut [f32]) {
                let s = shared::<f32, 64>();
                let t = local_id().x;
                s[t] = if t < x.len() { x[t] } else { 0.0 };
                let v = tree_sum(s, t);
                if t == 0 { out[0] = v; }
            }
        },
        &[tree_sum()],
    );
    assert!(k.has_barrier, "a call of a helper that reaches a barrier");
    let h = &k.helpers[0];
    assert!(h.has_barrier);
    assert_eq!(h.shared.len(), 1);
    assert_eq!((h.shared[0].elem, h.shared[0].size), (Ty::F32, 64));
    let wgsl = valid_wgsl(&k);
    // The specialisation indexes the kernel's module-scope array and takes no parameter
    // for it; no storage barrier (the only writable slice is written after the tree).
    assert!(
        wgsl.contains(&format!("fn {}_s0(t_v: u32) -> f32", h.id)),
        "{wgsl}"
    );
    assert!(wgsl.contains("s_1[t_v]"), "{wgsl}");
    assert!(!wgsl.contains("storageBarrier"), "{wgsl}");
    let cuda = emit::cuda::emit(&k);
    assert!(
        cuda.contains(&format!(
            "static __device__ float {}(gd_u32 t_p, float* s)",
            h.id
        )),
        "{cuda}"
    );
    assert!(cuda.contains("__syncthreads();"), "{cuda}");
    let checked = emit::cuda::emit_checked(&k, 7);
    assert!(
        checked.contains("float* s, gd_u32 s_t, gd_u32* gd_fault"),
        "{checked}"
    );
    let host = emit::host::emit(&k);
    assert!(
        host.contains(&format!(
            "async fn {}(t_p: u32, s: &gd::HostShared<f32>)",
            h.id
        )),
        "{host}"
    );
    assert!(host.contains(").await?"), "{host}");
    syn::parse_str::<syn::File>(&host)
        .unwrap_or_else(|e| panic!("host form does not parse: {e}\n{host}"));
}

#[test]
fn a_workgroup_array_a_helper_uses_atomically_is_atomic_in_the_kernel() {
    let k = kernel(
        quote! {
            pub fn hist(x: &[u32], bins: &mut [u32]) {
                let local = shared::<u32, 64>();
                let mut i = global_id().x;
                while i < x.len() { count(local, x[i]); i += global_size().x; }
                barrier();
                let c = atomic_load(local, local_id().x);
                atomic_add(bins, local_id().x, c);
            }
        },
        &[count()],
    );
    assert!(k.shared[0].atomic);
    assert!(k.helpers[0].shared[0].atomic);
    let wgsl = valid_wgsl(&k);
    assert!(
        wgsl.contains("var<workgroup> local_1: array<atomic<u32>, 64>;"),
        "{wgsl}"
    );
    assert!(wgsl.contains("atomicAdd(&local_1["), "{wgsl}");
    // Read non-atomically in the kernel: an error naming the helper's use.
    let e = kernel_errors(
        quote! {
            pub fn hist(x: &[u32], bins: &mut [u32]) {
                let local = shared::<u32, 64>();
                count(local, x[0]);
                barrier();
                bins[0] = local[0];
            }
        },
        &[count()],
    );
    assert_one(
        &e,
        "`local` is used with atomics, so every access to it is atomic",
    );
}

#[test]
fn a_helper_holds_per_invocation_arrays() {
    let k = kernel(
        quote! {
            pub fn k(x: &[f32], y: &mut [f32]) {
                let i = global_id().x;
                if i < y.len() { y[i] = poly(x[i], i % 4); }
            }
        },
        &[quote! {
            fn poly(v: f32, j: u32) -> f32 {
                let c = [1.0f32, 2.0, 3.0, 4.0];
                let mut p = [0.0f32; 4];
                for q in 0..4u32 { p[q] = c[q] * v; }
                p[j]
            }
        }],
    );
    assert_eq!(k.helpers[0].arrays.len(), 2);
    assert!(k.arrays.is_empty());
    valid_wgsl(&k);
    valid_checked_wgsl(&k, 3);
    // Numbered after the kernel's targets, for the fault record.
    assert_eq!(emit::bounds::targets(&k), ["x", "y", "c", "p"]);
    let host = emit::host::emit(&k);
    assert!(host.contains("let mut c_"), "{host}");
    syn::parse_str::<syn::File>(&host).unwrap_or_else(|e| panic!("{e}\n{host}"));
}

#[test]
fn a_helper_that_reaches_a_barrier_is_called_where_the_whole_workgroup_is() {
    let e = kernel_errors(
        quote! {
            pub fn total(x: &[f32], out: &mut [f32]) {
                let s = shared::<f32, 64>();
                let t = local_id().x;
                s[t] = x[t];
                if t < 32 { let v = tree_sum(s, t); out[t] = v; }
            }
        },
        &[tree_sum()],
    );
    assert_one(&e, "this call reaches a `barrier()` (in `tree_sum`)");
    // Through a helper that calls it, and after an early return.
    let outer = quote! {
        fn outer(s: &mut [f32; 64], t: u32) -> f32 { let v = tree_sum(s, t); v * 2.0 }
    };
    let e = kernel_errors(
        quote! {
            pub fn total(x: &[f32], out: &mut [f32]) {
                let s = shared::<f32, 64>();
                let t = local_id().x;
                if t >= x.len() { return; }
                s[t] = x[t];
                let v = outer(s, t);
                out[t] = v;
            }
        },
        &[tree_sum(), outer],
    );
    assert_one(&e, "(in `outer`), which every invocation of the workgroup must reach together, but it is after a `return`");
    // In a helper, a barrier under a condition on a parameter.
    let e = helper_errors(&[quote! {
        fn f(s: &mut [f32; 64], t: u32) { if t < 4 { barrier(); } s[t] = 1.0; }
    }]);
    assert_one(
        &e,
        "`barrier()` must be reached by every invocation of the workgroup together",
    );
}

#[test]
fn workgroup_array_arguments_are_checked_at_the_call() {
    let call = |arg: TokenStream, helper: TokenStream| {
        kernel_errors(
            quote! {
                pub fn k(x: &mut [f32]) {
                    let s = shared::<f32, 64>();
                    let u = shared::<u32, 64>();
                    let w = shared::<f32, 32>();
                    s[0] = 0.0; u[0] = 0u32; w[0] = 0.0;
                    let v = f(#arg);
                    x[0] = v;
                }
            },
            &[helper],
        )
    };
    let f = quote! { fn f(a: &mut [f32; 64]) -> f32 { a[0] } };
    assert_one(
        &call(quote!(w), f.clone()),
        "argument `a` of `f` is `&mut [f32; 64]`, found `w`, a workgroup array of 32 `f32`",
    );
    assert_one(
        &call(quote!(u), f.clone()),
        "found `u`, a workgroup array of 64 `u32`",
    );
    assert_one(
        &call(quote!(x), f.clone()),
        "is a workgroup array `&mut [f32; 64]`: pass a `shared::<f32, 64>()` array",
    );
    let g = quote! { fn f(a: &[f32]) -> f32 { a[0] } };
    assert_one(
        &call(quote!(s), g),
        "`s` is a workgroup array, but argument `a` of `f` is a slice",
    );
    // A read-only one is read-only in the helper, and cannot be passed on as `&mut`.
    let e = helper_errors(&[quote! { fn f(a: &[f32; 8]) { a[0] = 1.0; } }]);
    assert_one(
        &e,
        "cannot write to `a`: it is a read-only `&[f32; 8]`; declare it `&mut [f32; 8]`",
    );
    let e = helper_errors(&[quote! { fn f(a: &[u32; 8]) { atomic_add(a, 0u32, 1u32); } }]);
    assert_one(&e, "`a` is read-only here (`&[u32; 8]`)");
    let e = helper_errors(&[quote! { fn f(a: &mut [f32; N]) { a[0] = 1.0; } }]);
    assert_one(
        &e,
        "a workgroup-array parameter is `&[T; N]` or `&mut [T; N]`",
    );
    // A helper taking workgroup memory may write it: not inside a larger expression.
    let e = kernel_errors(
        quote! {
            pub fn k(x: &mut [f32]) {
                let s = shared::<f32, 64>();
                s[0] = 1.0;
                x[0] = f(s) + 1.0;
            }
        },
        &[f],
    );
    assert_one(&e, "`f` writes memory (it takes the workgroup array `a`)");
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

fn warp_sum() -> TokenStream {
    quote! {
        fn warp_sum(v: f32) -> f32 {
            subgroup_add(v)
        }
    }
}

fn twice() -> TokenStream {
    quote! {
        fn twice(v: f32) -> f32 {
            warp_sum(v) * 2.0
        }
    }
}

#[test]
fn a_helper_using_subgroups_makes_its_kernel_use_them_on_every_target() {
    let k = kernel(
        quote! {
            pub fn sums(x: &[f32], out: &mut [f32]) {
                let i = global_id().x;
                let v = twice(x[i]);
                out[i] = v;
            }
        },
        &[warp_sum(), twice()],
    );
    assert!(
        k.has_subgroup,
        "the kernel uses subgroups through its helpers"
    );
    assert!(k.helpers.iter().all(|h| h.has_subgroup));
    let twice = k.helpers.iter().find(|h| h.name == "twice").unwrap();
    assert_eq!(
        twice.exchange,
        Some((SubgroupOp::Add, "warp_sum".to_string()))
    );
    let wgsl = valid_wgsl(&k);
    assert!(wgsl.contains("// requires: subgroups"), "{wgsl}");
    assert!(wgsl.contains("gd_sg_size: u32, gd_sg_id: u32)"), "{wgsl}");
    assert!(wgsl.contains("subgroupShuffleXor"), "{wgsl}");
    let cuda = emit::cuda::emit(&k);
    // The subgroup operation is defined before the helper that calls it.
    let op = cuda
        .find("gd_sg_add_f32(f")
        .expect("the reduction's definition");
    let helper = cuda.find("// `#[device]` warp_sum").expect("the helper");
    assert!(op < helper, "{cuda}");
}

#[test]
fn a_helper_using_subgroups_is_called_where_its_subgroup_is_together() {
    let e = kernel_errors(
        quote! {
            pub fn gated(x: &[f32], out: &mut [f32]) {
                let i = global_id().x;
                if i < x.len() {
                    out[i] = twice(x[i]);
                }
            }
        },
        &[warp_sum(), twice()],
    );
    assert_one(
        &e,
        "this call of `twice`, which reaches `subgroup_add` through `warp_sum`, must be reached by every invocation of its subgroup together",
    );
    let e = kernel_errors(
        quote! {
            pub fn arm(out: &mut [f32]) {
                let i = global_id().x;
                out[0] = if i < 3 { warp_sum(1.0) } else { 0.0 };
            }
        },
        &[warp_sum()],
    );
    assert_one(&e, "this call of `warp_sum`, which reaches `subgroup_add`,");
    // In a helper, a parameter may carry an id: the same rule, checked once for every call.
    let e = helper_errors(&[
        warp_sum(),
        quote! {
            fn gated(v: f32, n: u32) -> f32 {
                if n > 3 {
                    return warp_sum(v);
                }
                v
            }
        },
    ]);
    assert_one(
        &e,
        "every parameter counts as depending on the invocation id",
    );
    let e = lower_with_helpers(
        quote!(workgroup = 48),
        Some(quote! {
            pub fn odd(out: &mut [f32]) {
                out[0] = warp_sum(1.0);
            }
        }),
        &[warp_sum()],
    )
    .unwrap_err();
    assert_one(&e, "a multiple of 32 invocations");
}

/// Sizes that `macro_rules!` substitutes (`$n:literal`, `$n:expr`) arrive wrapped in
/// invisible groups: a workgroup-array parameter, an array by value and the workgroup shape
/// still read them as the literals they are (they were refused as "not an integer literal").
#[test]
fn sizes_substituted_by_macro_rules_are_literals() {
    use proc_macro2::{Delimiter, Group};
    let lit = |n: u32| Group::new(Delimiter::None, quote!(#n));
    let (n64, n4) = (lit(64), lit(4));
    let helper = quote! {
        fn fill(s: &mut [u32; #n64], v: [u32; #n4], t: u32) {
            s[t] = v[t % 4];
        }
    };
    let k = lower_with_helpers(
        quote!(workgroup = #n64),
        Some(quote! {
            pub fn k(out: &mut [u32]) {
                let s = shared::<u32, #n64>();
                let t = local_id().x;
                let v = [1u32, 2u32, 3u32, 4u32];
                fill(s, v, t);
                barrier();
                out[t] = s[63 - t];
            }
        }),
        &[helper],
    )
    .unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(k.workgroup, [64, 1, 1]);
    let h = &k.helpers[0];
    assert_eq!((h.shared[0].elem, h.shared[0].size), (Ty::U32, 64));
    valid_wgsl(&k);
}
