//! Unit tests of the `#[kernel]` front end on `proc_macro2` tokens: the IR of small kernels,
//! and the errors (and only those) that bad kernels get.

use proc_macro2::TokenStream;
use quote::quote;

use super::ir::*;

fn lower(args: TokenStream, item: TokenStream) -> Result<Kernel, Vec<String>> {
    let func: syn::ItemFn = syn::parse2(item).expect("test kernels are functions");
    super::lower(args, &func).map_err(|(errors, _)| errors.iter().map(|e| e.to_string()).collect())
}

/// The errors of a kernel that must be rejected.
fn errors(args: TokenStream, item: TokenStream) -> Vec<String> {
    match lower(args, item) {
        Ok(k) => panic!("kernel `{}` was accepted", k.name),
        Err(e) => e,
    }
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
fn axpy_lowers_to_the_expected_ir() {
    let k = lower(
        quote!(workgroup = 256),
        quote! {
            pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
                let i = global_id().x;
                if i < y.len() {
                    y[i] = a * x[i] + y[i];
                }
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(k.name, "axpy");
    assert_eq!(k.workgroup, [256, 1, 1]);
    assert_eq!(k.arg_words, 5);
    assert!(!k.has_barrier && k.shared.is_empty());
    let p: Vec<(&str, usize, u32)> = k
        .params
        .iter()
        .map(|p| (p.name.as_str(), p.word, p.binding))
        .collect();
    assert_eq!(p, [("a", 0, 0), ("x", 1, 1), ("y", 3, 2)]);
    assert!(matches!(k.params[0].kind, ParamKind::Scalar(Ty::F32)));
    assert!(matches!(
        k.params[1].kind,
        ParamKind::Slice {
            elem: Ty::F32,
            mutable: false,
            atomic: false
        }
    ));
    assert!(matches!(
        k.params[2].kind,
        ParamKind::Slice {
            elem: Ty::F32,
            mutable: true,
            atomic: false
        }
    ));

    let [Stmt::Let {
        name: i,
        ty: Ty::U32,
        mutable: false,
        init: Some(init),
    }, Stmt::If { cond, then, els }] = k.body.as_slice()
    else {
        panic!("unexpected body {:#?}", k.body)
    };
    assert!(els.is_empty());
    let ExprKind::Field(id, 0) = &init.kind else {
        panic!("{init:?}")
    };
    assert!(matches!(id.kind, ExprKind::Id(IdBuiltin::GlobalId)));
    let ExprKind::Binary(BinOp::Lt, l, r) = &cond.kind else {
        panic!("{cond:?}")
    };
    assert!(matches!(&l.kind, ExprKind::Local(n) if n == i));
    assert!(matches!(r.kind, ExprKind::Len(2)));
    let [Stmt::Assign {
        place: Place::Param(2, ix),
        op: None,
        value,
        ty: Ty::F32,
    }] = then.as_slice()
    else {
        panic!("{then:#?}")
    };
    assert!(matches!(&ix.kind, ExprKind::Local(n) if n == i));
    let ExprKind::Binary(BinOp::Add, ax, yi) = &value.kind else {
        panic!("{value:?}")
    };
    assert!(matches!(yi.kind, ExprKind::Load(Place::Param(2, _))));
    let ExprKind::Binary(BinOp::Mul, a, xi) = &ax.kind else {
        panic!("{ax:?}")
    };
    assert!(matches!(a.kind, ExprKind::Scalar(0)));
    assert!(matches!(xi.kind, ExprKind::Load(Place::Param(1, _))));
}

#[test]
fn shared_memory_atomics_and_consts() {
    let k = lower(
        quote!(workgroup = (16, 16)),
        quote! {
            fn hist(x: &[u32], bins: &mut [u32]) {
                const N: u32 = 16 * 16;
                let tile = shared::<u32, N>();
                tile[local_id().x] = 0u32;
                barrier();
                let old = atomic_add(bins, x[global_id().x] % bins.len(), 1u32);
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(k.workgroup, [16, 16, 1]);
    assert_eq!(k.shared.len(), 1);
    assert_eq!((k.shared[0].elem, k.shared[0].size), (Ty::U32, 256));
    assert!(k.has_barrier);
    assert!(matches!(
        k.params[1].kind,
        ParamKind::Slice { atomic: true, .. }
    ));
    assert!(k.body.iter().any(|s| matches!(
        s,
        Stmt::Atomic {
            result: Some(_),
            op: AtomicOp::Add,
            target: AtomicTarget::Param(1),
            ..
        }
    )));
}

#[test]
fn local_names_become_target_names() {
    // Raw and non-ASCII names are valid Rust; WGSL and CUDA C get ASCII names that cannot
    // start with `__`.
    let k = lower(
        quote!(workgroup = 64),
        quote! {
            fn names(y: &mut [f32]) {
                let r#type = 1.0;
                let é = 2.0;
                let __x = r#type + é;
                y[0u32] = __x;
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e:#?}"));
    for s in &k.body {
        if let Stmt::Let { name, .. } = s {
            assert!(
                name.is_ascii() && !name.starts_with('_') && !name.contains('#'),
                "{name}"
            );
        }
    }
}

#[test]
fn workgroup_arguments() {
    let body = quote!(
        fn k(y: &mut [f32]) {
            y[0u32] = 1.0;
        }
    );
    for (args, shape) in [
        (quote!(workgroup = 64), [64, 1, 1]),
        (quote!(workgroup = (8, 8)), [8, 8, 1]),
        (quote!(workgroup = (4, 4, 4)), [4, 4, 4]),
        (quote!(workgroup = (1024)), [1024, 1, 1]),
    ] {
        assert_eq!(lower(args, body.clone()).unwrap().workgroup, shape);
    }
    for (args, msg) in [
        (quote!(), "needs a workgroup shape"),
        (quote!(workgroup = 0), "at least 1"),
        (quote!(workgroup = (32, 0)), "at least 1"),
        (quote!(workgroup = 2048), "at most 1024 invocations"),
        (quote!(workgroup = (64, 32)), "this shape has 2048"),
        (quote!(workgroup = 99999999999), "at most 1024 invocations"),
        (quote!(workgroup = (2, 2, 2, 2)), "at most 3 dimensions"),
        (quote!(workgroup = ()), "1 to 3 dimensions"),
        (quote!(workgroup = (1, 1, 128)), "z dimension"),
        (quote!(workgroup = N), "integer literal"),
        (quote!(workgroup = -4), "integer literal"),
        (quote!(workgroup), "needs a shape"),
        (quote!(workgroup = 64, workgroup = 64), "given twice"),
        (quote!(threads = 64), "unknown `#[kernel]` argument"),
        (quote!(workgroup = 64, min_workgroups = 0), "from 1 to 32"),
        (
            quote!(workgroup = 64, min_workgroups = x),
            "expected integer literal",
        ),
    ] {
        assert_one_error(&errors(args, body.clone()), msg);
    }
}

/// `min_workgroups = N` becomes `__launch_bounds__(threads, N)` in the CUDA form; without it
/// the bound is the threads alone.
#[test]
fn min_workgroups_reaches_the_launch_bounds() {
    let body = quote! {
        fn k(y: &mut [f32]) {
            y[0u32] = 1.0;
        }
    };
    let k = lower(quote!(workgroup = 256, min_workgroups = 2), body.clone()).unwrap();
    assert_eq!(k.min_workgroups, 2);
    let cuda = super::emit::cuda::emit(&k);
    assert!(cuda.contains("__launch_bounds__(256, 2)"), "{cuda}");
    let k = lower(quote!(workgroup = 64), body).unwrap();
    assert_eq!(k.min_workgroups, 0);
    let cuda = super::emit::cuda::emit(&k);
    assert!(cuda.contains("__launch_bounds__(64)"), "{cuda}");
}

#[test]
fn every_error_of_a_kernel_is_reported_together() {
    let errs = errors(
        quote!(workgroup = 64),
        quote! {
            fn messy<T>(k: i32, v: f64, x: &[f32], y: &mut [f32]) {
                let i = global_id().x;
                let a: f32 = 1;
                let b = x[i] + k;
                x[i] = 0.0;
                let c = x.iter();
                let d = |q: f32| q;
                y[i] = helper(a);
                y[i] = v;
            }
        },
    );
    let expected = [
        "cannot be generic",
        "`f64` is not supported",
        "found an integer literal",
        "write `k as f32`",
        "read-only",
        "method `iter`",
        "closures",
        "unknown function `helper`",
    ];
    assert_eq!(errs.len(), expected.len(), "{errs:#?}");
    for (e, want) in errs.iter().zip(expected) {
        assert!(e.contains(want), "{e:?} does not contain {want:?}");
    }
}

#[test]
fn a_failed_let_is_not_reported_again_at_its_uses() {
    let errs = errors(
        quote!(workgroup = 64),
        quote! {
            fn k(x: &[f32], y: &mut [f32]) {
                let i = global_id().x;
                let v = if x[i] > 0.0 { x[i] };
                let (a, b) = (1.0, 2.0);
                let w = x.iter();
                y[i] = v + a + b + w;
                y[i] = v;
            }
        },
    );
    assert_eq!(errs.len(), 3, "{errs:#?}");
}

#[test]
fn a_rejected_parameter_is_not_reported_again_at_its_uses() {
    let errs = errors(
        quote!(workgroup = 64),
        quote! {
            fn k(n: usize, y: &mut Vec<f32>) {
                let i = global_id().x;
                if i < y.len() {
                    y[i] = n as f32;
                }
            }
        },
    );
    assert_eq!(errs.len(), 2, "{errs:#?}");
    assert!(errs[0].contains("use `u32`"), "{}", errs[0]);
    assert!(errs[1].contains("write `&mut [f32]`"), "{}", errs[1]);
}

#[test]
fn literals_out_of_range_are_errors() {
    for lit in [
        quote!(-9223372036854775808),
        quote!(-18446744073709551615),
        quote!(2147483648),
        quote!(99999999999999999999999),
    ] {
        let errs = errors(
            quote!(workgroup = 64),
            quote! { fn k(y: &mut [i32]) { let a: i32 = #lit; y[0u32] = a; } },
        );
        assert_eq!(errs.len(), 1, "{lit}: {errs:#?}");
    }
    lower(
        quote!(workgroup = 64),
        quote! { fn k(y: &mut [i32]) { let a: i32 = -2147483648; y[0u32] = a; } },
    )
    .unwrap_or_else(|e| panic!("{e:#?}"));
}

#[test]
fn barrier_errors_say_why_the_barrier_is_not_uniform() {
    let under_if = errors(
        quote!(workgroup = 64),
        quote! {
            fn k(y: &mut [f32]) {
                if local_id().x < 32u32 { barrier(); }
            }
        },
    );
    assert_one_error(&under_if, "inside an `if` or loop");
    let after_return = errors(
        quote!(workgroup = 64),
        quote! {
            fn k(y: &mut [f32]) {
                if global_id().x >= y.len() { return; }
                barrier();
            }
        },
    );
    assert_one_error(&after_return, "earlier `return`, `break` or `continue`");
    let after_break = errors(
        quote!(workgroup = 64),
        quote! {
            fn k(y: &mut [f32]) {
                for j in 0u32..4u32 {
                    if local_id().x == j { break; }
                    barrier();
                }
            }
        },
    );
    assert_one_error(&after_break, "earlier `return`, `break` or `continue`");
    // Uniform control flow is fine.
    lower(
        quote!(workgroup = 64),
        quote! {
            fn k(n: u32, y: &mut [f32]) {
                for j in 0u32..n {
                    if workgroup_id().x > 0u32 { barrier(); }
                }
                if n > 3u32 { return; }
                barrier();
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e:#?}"));
}

#[test]
fn names_that_cuda_or_wgsl_cannot_take() {
    let body = |name: TokenStream| quote!(fn #name(y: &mut [f32]) { y[0u32] = 1.0; });
    assert_one_error(
        &errors(quote!(workgroup = 64), body(quote!(float))),
        "cannot be named `float`",
    );
    assert_one_error(
        &errors(quote!(workgroup = 64), body(quote!(main))),
        "cannot be named `main`",
    );
    assert_one_error(
        &errors(quote!(workgroup = 64), body(quote!(__k))),
        "cannot start with `__`",
    );
    assert_one_error(
        &errors(quote!(workgroup = 64), body(quote!(gd_k))),
        "cannot start with `gd_`",
    );
    assert_one_error(
        &errors(quote!(workgroup = 64), body(quote!(r#k))),
        "raw identifier",
    );
    let param = errors(
        quote!(workgroup = 64),
        quote!(
            fn k(__y: &mut [f32]) {
                __y[0u32] = 1.0;
            }
        ),
    );
    assert_one_error(
        &param,
        "a kernel parameter's name `__y` cannot start with `__`",
    );
}

#[test]
fn workgroup_memory_has_a_constant_bounded_size() {
    let errs = errors(
        quote!(workgroup = 64),
        quote! { fn k(n: u32, y: &mut [f32]) { let t = shared::<f32, n>(); } },
    );
    assert_one_error(&errs, "`n` is a parameter");
    let errs = errors(
        quote!(workgroup = 64),
        quote! { fn k(y: &mut [f32]) { let t = shared::<f32, 8192>(); let u = shared::<u32, 8192>(); } },
    );
    assert_one_error(&errs, "at most 49152 bytes");
    let errs = errors(
        quote!(workgroup = 64),
        quote! { fn k(y: &mut [f32]) { let t = shared::<f32, { 0u32 - 1u32 }>(); } },
    );
    assert_one_error(&errs, "at most 49152 bytes");
}

#[test]
fn recursion_is_named_as_such() {
    let errs = errors(
        quote!(workgroup = 64),
        quote! { fn walk(n: u32, y: &mut [u32]) { if n > 0u32 { walk(n - 1u32, y); } } },
    );
    assert_one_error(&errs, "a kernel cannot call itself");
}

#[test]
fn macros_get_a_message_naming_what_to_do() {
    let errs = errors(
        quote!(workgroup = 64),
        quote! { fn k(y: &mut [f32]) { assert!(y.len() > 0u32); println!("x"); let v = vec![1.0]; } },
    );
    assert_eq!(errs.len(), 3, "{errs:#?}");
    assert!(errs[0].contains("cannot panic"));
    assert!(errs[1].contains("cannot print"));
    assert!(errs[2].contains("cannot allocate"));
}

#[test]
fn expand_emits_a_launcher_stub_with_the_errors() {
    let out = super::expand(
        quote!(workgroup = 64),
        quote! { pub fn k(a: f32, y: &mut [f32]) { y[0u32] = a + 1; } },
    )
    .to_string();
    assert!(out.contains("compile_error"), "{out}");
    assert!(out.contains("pub fn launch"), "{out}");
    syn::parse_str::<syn::File>(&out).expect("the stub is valid Rust");
}

#[test]
fn expand_of_a_valid_kernel_is_valid_rust() {
    let out = super::expand(
        quote!(workgroup = 64),
        quote! {
            /// Adds one.
            pub fn inc(y: &mut [f32]) {
                let i = global_id().x;
                if i < y.len() { y[i] += 1.0; }
            }
        },
    );
    let file: syn::File = syn::parse2(out).expect("valid Rust");
    let syn::Item::Mod(m) = &file.items[0] else {
        panic!("a module")
    };
    assert_eq!(m.ident, "inc");
}

#[test]
fn non_functions_are_rejected() {
    let out = super::expand(
        quote!(workgroup = 64),
        quote!(
            struct S;
        ),
    )
    .to_string();
    assert!(
        out.contains("compile_error") && out.contains("applies to a function"),
        "{out}"
    );
}

/// Every operator folds in a `const`, with the run-time meaning (wrapping, `x / 0 == x`,
/// masked shifts, saturating casts); the folded values reach the IR as literals.
#[test]
fn consts_fold_every_operator_with_the_run_time_meaning() {
    let k = lower(
        quote!(workgroup = 64),
        quote! {
            pub fn consts(y: &mut [u32], z: &mut [i32]) {
                const A: i32 = 1 << 4u32;
                const B: u32 = 7 % 3;
                const C: u32 = 0xFF & 0x0F;
                const D: f32 = 2 as f32;
                const E: u32 = 256 >> 4;
                const F: u32 = !0u32;
                const G: u32 = 7 / 0;
                const H: i32 = i32::MIN / -1;
                const I: u32 = 1 << 33;
                const J: i32 = -1.5f32 as i32;
                const K: bool = A > 15 && !(C == 16);
                let t = shared::<u32, { E * 2 }>();
                y[0] = B + C + F + G + I + K as u32 + t.len();
                z[0] = A + H + J + D as i32;
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(k.shared[0].size, 32);
    let values: Vec<ExprKind> = k
        .body
        .iter()
        .filter_map(|s| match s {
            Stmt::Assign { value, .. } => super::check::fold(value),
            _ => None,
        })
        .collect();
    // y: 1 + 15 + u32::MAX + 7 + 2 + 1 + 32, wrapping; z: 16 + i32::MIN + (-1) + 2.
    assert!(
        matches!(values[..], [ExprKind::LitU32(57), ExprKind::LitI32(v)] if v == i32::MIN + 17),
        "{values:?}"
    );
}

/// The WGSL barrier lines of a kernel, in order: `S` for `storageBarrier(); workgroupBarrier();`,
/// `W` for `workgroupBarrier();` alone.
fn wgsl_barriers(item: TokenStream) -> String {
    let k = lower(quote!(workgroup = 64), item).unwrap_or_else(|e| panic!("{e:#?}"));
    let wgsl = super::emit::wgsl::emit(&k);
    let lines: Vec<&str> = wgsl.lines().map(str::trim).collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| **l == "workgroupBarrier();")
        .map(|(i, _)| {
            if i > 0 && lines[i - 1] == "storageBarrier();" {
                'S'
            } else {
                'W'
            }
        })
        .collect()
}

#[test]
fn barriers_order_storage_only_where_a_written_slice_is_accessed_on_both_sides() {
    // A tiled loop sharing only workgroup memory; the written slice only after the loop.
    let tiled = wgsl_barriers(quote! {
        pub fn tiled(n: u32, a: &[f32], c: &mut [f32]) {
            let t = shared::<f32, 64>();
            let i = local_id().x;
            let mut acc = 0.0;
            for k in 0..n {
                t[i] = a[k * 64 + i];
                barrier();
                acc += t[63 - i];
                barrier();
            }
            c[global_id().x] = acc;
        }
    });
    assert_eq!(tiled, "WW");
    // Written before the barrier and read by a neighbour after it.
    let neighbour = wgsl_barriers(quote! {
        pub fn neighbour(c: &mut [f32]) {
            let i = global_id().x;
            c[i] = 1.0;
            barrier();
            let v = c[i ^ 1u32];
            c[i] = v;
        }
    });
    assert_eq!(neighbour, "S");
    // In a loop, the write after the barrier precedes the barrier of the next iteration.
    let looped = wgsl_barriers(quote! {
        pub fn looped(n: u32, c: &mut [f32]) {
            let i = global_id().x;
            for k in 0..n {
                barrier();
                c[i] = c[i ^ 1u32] + 1.0;
            }
        }
    });
    assert_eq!(looped, "S");
    // Unrolled (a constant range), the same loop is straight-line code: the first barrier
    // has no write before it.
    let unrolled = wgsl_barriers(quote! {
        pub fn unrolled(c: &mut [f32]) {
            let i = global_id().x;
            for k in 0..4u32 {
                barrier();
                c[i] = c[i ^ 1u32] + 1.0;
            }
        }
    });
    assert_eq!(unrolled, "WSSS");
    // Read-only slices on both sides need no storage ordering.
    let read_only = wgsl_barriers(quote! {
        pub fn read_only(a: &[f32], c: &mut [f32]) {
            let t = shared::<f32, 64>();
            let i = local_id().x;
            t[i] = a[i];
            barrier();
            let v = t[63 - i] + a[i + 1];
            barrier();
            c[i] = v;
        }
    });
    assert_eq!(read_only, "WW");
    // An atomic counter before the barrier, read after it.
    let atomic = wgsl_barriers(quote! {
        pub fn counter(n: &mut [u32], out: &mut [u32]) {
            atomic_add(n, 0, 1u32);
            barrier();
            let v = atomic_load(n, 0);
            out[global_id().x] = v;
        }
    });
    assert_eq!(atomic, "S");
}

#[test]
fn loops_terminate_for_ranges_of_any_step_but_not_while_loop_or_retry() {
    let body = |item: TokenStream| {
        let k = lower(quote!(workgroup = 64), item).unwrap_or_else(|e| panic!("{e:#?}"));
        loops_terminate(&k.body)
    };
    assert!(body(quote! {
        pub fn ranges(n: u32, y: &mut [f32]) {
            for i in 0..n {
                for j in (i..n).step_by(1) {
                    if j < y.len() { y[j] += 1.0; }
                }
            }
        }
    }));
    // A step that passes `end` or the type's range ends the loop; a run-time step below 1
    // runs no iteration (a fault on the host).
    assert!(body(quote! {
        pub fn strided(n: u32, s: i32, y: &mut [f32]) {
            for i in (global_id().x..n).step_by(64) {
                y[i] = 0.0;
            }
            for j in (0..i32::MAX).step_by(s) {
                y[0] = j as f32;
            }
        }
    }));
    assert!(!body(quote! {
        pub fn halving(y: &mut [f32]) {
            let mut s = 32u32;
            while s > 0 {
                s = s >> 1;
            }
            y[0] = 0.0;
        }
    }));
    assert!(!body(quote! {
        pub fn spin(y: &mut [u32], z: &mut [u32]) {
            let old = atomic_compare_exchange(y, 0, 0u32, 1u32);
            z[0] = old;
        }
    }));
}

#[test]
fn step_by_a_constant_below_one_is_rejected_with_what_to_write() {
    let err = |item: TokenStream| errors(quote!(workgroup = 64), item).join("\n");
    let zero = err(quote! {
        pub fn z(y: &mut [f32]) {
            const S: u32 = 4;
            for i in (0..y.len()).step_by(S - 4) {
                y[i] = 0.0;
            }
        }
    });
    assert!(zero.contains("`step_by(0)` never advances"), "{zero}");
    assert!(zero.contains("at least 1"), "{zero}");
    let negative = err(quote! {
        pub fn n(y: &mut [f32]) {
            for i in (10..0).step_by(-1) {
                y[i as u32] = 0.0;
            }
        }
    });
    assert!(negative.contains("`step_by(-1)`"), "{negative}");
    assert!(
        negative.contains("count up and mirror the index"),
        "{negative}"
    );
}

/// `to_bits()` / `from_bits(w)` lower to `ExprKind::Bits` and each target's reinterpretation;
/// every misuse is one spanned error naming what to write.
#[test]
fn half_bits_lower_and_misuses_are_reported() {
    let k = lower(
        quote!(workgroup = 64),
        quote! {
            pub fn k(x: &[bf16], w: &[u32], y: &mut [u32], z: &mut [f16]) {
                let i = global_id().x;
                y[i] = x[i].to_bits() | (bf16::from_bits(w[i] >> 16u32).to_bits() << 16u32);
                z[i] = f16::from_bits(w[i]);
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e:#?}"));
    let cuda = super::emit::cuda::emit(&k);
    assert!(cuda.contains("((gd_bf16)"), "{cuda}");
    let wgsl = super::emit::wgsl::emit(&k);
    assert!(wgsl.contains("& 0xffffu)"), "{wgsl}");
    let host = super::emit::host::emit(&k);
    assert!(host.contains(".to_bits() as u32)") && host.contains("bf16::from_bits(("));
    for (stmt, needle) in [
        (
            quote!(y[i] = v.to_bits();),
            "`to_bits()` applies to an `f16` or `bf16` value (its 16 bits as a `u32`), but this is `f32`",
        ),
        (quote!(y[i] = x[i].to_bits(1u32);), "`to_bits()` takes no arguments"),
        (
            quote!(let h = bf16::from_bits(v);),
            "`bf16::from_bits(w)` takes a `u32` (its low 16 bits are the value's), but this is `f32`",
        ),
        (quote!(let h = f16::from_bits();), "`f16::from_bits(w)` takes one `u32`"),
    ] {
        let errs = errors(
            quote!(workgroup = 64),
            quote! {
                pub fn k(x: &[bf16], y: &mut [u32]) {
                    let i = global_id().x;
                    let v = 1.5f32;
                    #stmt
                }
            },
        );
        assert_one_error(&errs, needle);
    }
}

#[test]
fn device_fence_is_each_targets_fence_and_a_barrier_to_the_checker() {
    let k = lower(
        quote!(workgroup = 64),
        quote! {
            pub fn publish(x: &mut [f32], n: &mut [u32]) {
                x[global_id().x] = 1.0;
                device_fence();
                atomic_add(n, 0, 1u32);
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e:#?}"));
    assert!(k.body.iter().any(|s| matches!(s, Stmt::DeviceFence { .. })));
    // `storageBarrier()` in WGSL is a barrier: the uniformity analysis and the host's tasks
    // treat the kernel as having one.
    assert!(k.has_barrier);
    let cuda = super::emit::cuda::emit(&k);
    assert_eq!(cuda.matches("__threadfence();").count(), 1, "{cuda}");
    let wgsl = super::emit::wgsl::emit(&k);
    let lines: Vec<&str> = wgsl.lines().map(str::trim).collect();
    assert_eq!(
        lines.iter().filter(|l| **l == "storageBarrier();").count(),
        1,
        "{wgsl}"
    );
    assert!(!lines.contains(&"workgroupBarrier();"), "{wgsl}");
    let host = super::emit::host::emit(&k);
    assert!(
        host.contains("::std::sync::atomic::fence(::std::sync::atomic::Ordering::SeqCst);"),
        "{host}"
    );
    // Under a condition on the invocation id it is refused, as a barrier would be.
    let errs = errors(
        quote!(workgroup = 64),
        quote! {
            pub fn half(x: &mut [f32]) {
                if local_id().x < 32 {
                    device_fence();
                }
                x[0] = 1.0;
            }
        },
    );
    assert_one_error(
        &errs,
        "`device_fence()` must be reached by every invocation",
    );
}
