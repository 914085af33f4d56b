//! The front end on per-invocation arrays, unrolled constant loops, atomics on workgroup
//! memory and values computed by statements: the IR they lower to, the errors (and only
//! those) that mistakes get, and WGSL that naga validates.

use graphed_lang::kernel::{emit, ir::*, lower};
use proc_macro2::TokenStream;
use quote::quote;

fn kernel(item: TokenStream) -> Kernel {
    let func: syn::ItemFn = syn::parse2(item).expect("test kernels are functions");
    lower(quote!(workgroup = 64), &func).unwrap_or_else(|(e, _)| {
        panic!("{:#?}", e.iter().map(|e| e.to_string()).collect::<Vec<_>>())
    })
}

fn errors(item: TokenStream) -> Vec<String> {
    let func: syn::ItemFn = syn::parse2(item).expect("test kernels are functions");
    match lower(quote!(workgroup = 64), &func) {
        Ok(k) => panic!("kernel `{}` was accepted", k.name),
        Err((e, _)) => e.iter().map(|e| e.to_string()).collect(),
    }
}

fn one_error(item: TokenStream, needle: &str) {
    let errs = errors(item);
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
        .unwrap_or_else(|e| panic!("{}\n{src}", e.emit_to_string(&src)));
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{}\n{src}", e.emit_to_string(&src)));
    src
}

/// Counts statements of `body` (recursively) that satisfy `f`.
fn count(body: &[Stmt], f: &dyn Fn(&Stmt) -> bool) -> usize {
    body.iter()
        .map(|s| {
            let inner = match s {
                Stmt::If { then, els, .. } => count(then, f) + count(els, f),
                Stmt::For { body, .. } | Stmt::While { body, .. } | Stmt::Loop { body } => {
                    count(body, f)
                }
                _ => 0,
            };
            inner + usize::from(f(s))
        })
        .sum()
}

fn is_for(s: &Stmt) -> bool {
    matches!(s, Stmt::For { .. })
}

#[test]
fn arrays_lower_with_their_length_and_constant_indices_fold() {
    let k = kernel(quote! {
        fn k(y: &mut [f32]) {
            const N: u32 = 4 * 4;
            let mut acc = [1.5f32; N];
            let w = [1u32, 2, 3];
            let flags: [bool; 2] = [false; 2];
            let j = 2u32;
            acc[j] += 1.0;
            acc[y.len() % 16] = w[0] as f32;
            if flags[1] { y[0] = acc[15]; }
            y[1] = w.len() as f32;
        }
    });
    let lens: Vec<(&str, Ty, u32)> = k
        .arrays
        .iter()
        .map(|a| (a.source.as_str(), a.elem, a.len))
        .collect();
    assert_eq!(
        lens,
        [
            ("acc", Ty::F32, 16),
            ("w", Ty::U32, 3),
            ("flags", Ty::Bool, 2)
        ]
    );
    // `acc[j]` with `j` known: a literal index.
    assert!(k.body.iter().any(|s| matches!(
        s,
        Stmt::Assign { place: Place::Array(0, ix), op: Some(BinOp::Add), .. }
            if matches!(ix.kind, ExprKind::LitU32(2))
    )));
    valid_wgsl(&k);
}

#[test]
fn constant_ranges_unroll_within_the_limits_and_others_stay_loops() {
    let k = kernel(quote! {
        fn k(n: u32, y: &mut [f32]) {
            let mut a = [0.0f32; 16];
            for i in 0..16u32 { a[i] = i as f32; }
            for i in (1..16u32).step_by(5) { a[i] += 1.0; }
            for i in 0..workgroup_size().x { if i < 16 { a[i % 16] += 1.0; } }
            for r in 0..4u32 { for c in 0..4u32 { a[r * 4 + c] += 2.0; } }
            y[0] = a[3];
        }
    });
    assert_eq!(count(&k.body, &is_for), 0, "every loop unrolled");
    // 16 + 3 + 64 + 16 copies of the loop variable.
    let lets = count(
        &k.body,
        &|s| matches!(s, Stmt::Let { mutable: false, init: Some(e), .. } if matches!(e.kind, ExprKind::LitU32(_))),
    );
    assert_eq!(lets, 16 + 3 + 64 + 4 + 16);
    assert!(loops_terminate(&k.body));
    valid_wgsl(&k);

    let k = kernel(quote! {
        fn k(n: u32, y: &mut [f32]) {
            for i in 0..n { y[i] = 0.0; }
            for i in 0..65u32 { y[i] = 1.0; }
            for i in 0..8u32 { if i == 3 { break; } y[i] = 2.0; }
            for i in 0..8u32 { if i == 3 { continue; } y[i] = 3.0; }
            // Nested: 32 × 64 copies would pass the 1024 bound; the inner loop stays a loop.
            let mut a = [0.0f32; 32];
            for i in 0..32u32 { for j in 0..64u32 { a[i] += y[i * 64 + j]; } }
            y[0] = a[5];
        }
    });
    assert_eq!(count(&k.body, &is_for), 4 + 32);
    valid_wgsl(&k);
}

#[test]
fn constant_loops_that_index_no_array_stay_loops_that_wgsl_emits_as_copies_up_to_16_trips() {
    let k = kernel(quote! {
        fn k(x: &[f32], y: &mut [f32]) {
            let s = shared::<f32, 64>();
            let t = local_id().x;
            let mut acc = 0.0f32;
            for kk in 0..16u32 {
                let o = kk * 4;
                acc += x[o + t] * s[o];
                barrier();
            }
            // Through a local computed from the variable, an array index still unrolls.
            let mut a = [0.0f32; 4];
            for q in 0..4u32 { let w = q + 0; a[w] = acc; }
            // An inner range built from the variable unrolls the outer loop too.
            for r in 0..3u32 { for c in 0..r { acc += a[c]; } }
            y[t] = acc + a[3];
        }
    });
    // One loop left (kk), carrying its values; the others are copies.
    assert_eq!(count(&k.body, &is_for), 1);
    let Some(Stmt::For { constant, .. }) = k.body.iter().find(|s| is_for(s)) else {
        panic!("no loop left");
    };
    assert_eq!(
        constant.as_deref(),
        Some(&(0..16).collect::<Vec<i64>>()[..])
    );
    // CUDA C keeps the loop for NVRTC to unroll as it sees fit; WGSL has the 16 copies,
    // each with its barrier.
    let cuda = emit::cuda::emit(&k);
    assert_eq!(cuda.matches("for (").count(), 1, "{cuda}");
    let wgsl = valid_wgsl(&k);
    assert!(!wgsl.contains("for ("), "{wgsl}");
    assert_eq!(wgsl.matches("workgroupBarrier()").count(), 16, "{wgsl}");
    assert!(wgsl.contains("= 15u;"), "{wgsl}");

    // Past 16 trips WGSL keeps the loop too (as `matmul_t16`'s 64-step `k` loop), for the
    // driver to unroll; the values still bound nested loops as if it were copies.
    let k = kernel(quote! {
        fn k(x: &[f32], y: &mut [f32]) {
            let t = local_id().x;
            let mut acc = 0.0f32;
            for kk in 0..17u32 {
                acc = fma(x[kk * 64 + t], x[kk], acc);
            }
            for kk in 0..64u32 {
                acc += x[kk * 64 + t];
            }
            y[t] = acc;
        }
    });
    assert_eq!(count(&k.body, &is_for), 2);
    let cuda = emit::cuda::emit(&k);
    assert_eq!(cuda.matches("for (").count(), 2, "{cuda}");
    let wgsl = valid_wgsl(&k);
    assert_eq!(wgsl.matches("for (").count(), 2, "{wgsl}");
    assert!(wgsl.contains("< kk_"), "{wgsl}");
    assert!(!wgsl.contains("= 16u;"), "{wgsl}");

    // A constant loop of no trips: no copy, and the barriers after it keep their places.
    let k = kernel(quote! {
        fn k(y: &mut [f32]) {
            let s = shared::<f32, 64>();
            for i in 0..0u32 { barrier(); y[i] = 1.0; }
            s[local_id().x] = 1.0;
            barrier();
            y[local_id().x] = s[0];
        }
    });
    let wgsl = valid_wgsl(&k);
    assert_eq!(wgsl.matches("workgroupBarrier()").count(), 1, "{wgsl}");
}

#[test]
fn a_break_of_an_inner_loop_does_not_stop_unrolling_the_outer() {
    let k = kernel(quote! {
        fn k(y: &mut [u32]) {
            let mut a = [0u32; 4];
            for i in 0..4u32 {
                let mut j = 0u32;
                loop { j += 1; if j > i { break; } }
                a[i] = j;
            }
            y[0] = a[0] + a[3];
        }
    });
    assert_eq!(count(&k.body, &is_for), 0);
    assert_eq!(count(&k.body, &|s| matches!(s, Stmt::Loop { .. })), 4);
    valid_wgsl(&k);
}

#[test]
fn array_sizes_must_be_constant_and_bounded() {
    one_error(
        quote! { fn k(n: u32, y: &mut [f32]) { let a = [0.0f32; n]; y[0] = a[0]; } },
        "the size of an array must be a positive constant `u32`",
    );
    one_error(
        quote! { fn k(y: &mut [f32]) { let a = [0.0f32; 0]; } },
        "at least one element",
    );
    one_error(
        quote! { fn k(y: &mut [u32]) { let a = [0u32; 1025]; } },
        "at most 1024 elements",
    );
    one_error(
        quote! { fn k(y: &mut [u32]) {
            let a = [0u32; 1024]; let b = [0u32; 1024]; let c = [0u32; 1024]; let d = [0u32; 1024];
            let e = [0u32; 1];
        } },
        "at most 16384 bytes (16 KiB) of per-invocation arrays",
    );
    // An array declared in an unrolled loop counts once.
    kernel(quote! { fn k(y: &mut [u32]) {
        for i in 0..8u32 { let mut a = [i; 1024]; a[i] = 1u32; y[i] = a[0]; }
        let b = [0u32; 1024]; let c = [0u32; 1024]; let d = [0u32; 1024];
    } });
    one_error(
        quote! { fn k(y: &mut [u32]) { let a: [u32; 3] = [1u32, 2]; } },
        "the type says 3 elements, the value has 2",
    );
    one_error(
        quote! { fn k(y: &mut [u32]) { let a = [1u32, 2.0]; } },
        "expected `u32`",
    );
    one_error(
        quote! { fn k(y: &mut [u32]) { let a = [global_id(); 2]; } },
        "not a `UVec3`",
    );
}

#[test]
fn constant_indices_out_of_range_are_errors_reported_once() {
    one_error(
        quote! { fn k(y: &mut [f32]) { let a = [0.0f32; 4]; y[0] = a[4]; } },
        "index 4 is out of bounds: `a` has 4 elements (indices 0 to 3)",
    );
    // Unrolled: only the copy with i == 4 is out of range, and it is reported once.
    one_error(
        quote! { fn k(y: &mut [f32]) { let mut a = [0.0f32; 4]; for i in 0..5u32 { a[i] = 1.0; } } },
        "index 4 is out of bounds",
    );
    // An error in every copy of an unrolled body is reported once.
    one_error(
        quote! { fn k(y: &mut [f32]) { for i in 0..8u32 { y[i] = 1; } } },
        "expected `f32`, found an integer literal",
    );
}

#[test]
fn arrays_are_not_values_as_a_whole() {
    one_error(
        quote! { fn k(y: &mut [f32]) { let a = [0.0f32; 4]; let b = a; } },
        "`a` is an array; use it as `a[i]` or `a.len()`",
    );
    one_error(
        quote! { fn k(y: &mut [f32]) { let mut a = [0.0f32; 4]; a = 1.0; } },
        "cannot assign to the array `a` as a whole",
    );
    one_error(
        quote! { fn k(y: &mut [f32]) { let a = [0.0f32; 4]; a[1] = 2.0; } },
        "cannot write to `a`: it is not `mut`",
    );
    one_error(
        quote! { fn k(y: &mut [f32]) { y[0] = [1.0f32, 2.0][0]; } },
        "an array value only initialises a `let`",
    );
    one_error(
        quote! { fn k(y: &mut [f32]) { let a = [0.0f32; 4]; let i: i32 = 1; y[0] = a[i]; } },
        "an index is `u32`",
    );
}

#[test]
fn workgroup_atomics_are_all_or_nothing() {
    let k = kernel(quote! {
        fn k(x: &[u32], y: &mut [u32]) {
            let counts = shared::<u32, 64>();
            let plain = shared::<u32, 64>();
            plain[local_id().x] = 1u32;
            let old = atomic_add(counts, x[global_id().x] % 64, 1u32);
            barrier();
            let c = atomic_load(counts, local_id().x);
            y[global_id().x] = c + old + plain[0];
        }
    });
    assert!(k.shared[0].atomic && !k.shared[1].atomic);
    assert!(k.body.iter().any(|s| matches!(
        s,
        Stmt::Atomic {
            target: AtomicTarget::Shared(0),
            op: AtomicOp::Add,
            result: Some(_),
            ..
        }
    )));
    let wgsl = valid_wgsl(&k);
    assert!(
        wgsl.contains("array<atomic<u32>, 64>") && wgsl.contains("atomicAdd(&"),
        "{wgsl}"
    );

    // Plain accesses before and after the first atomic use are both rejected.
    let errs = errors(quote! {
        fn k(y: &mut [u32]) {
            let s = shared::<u32, 4>();
            s[0] = 1u32;
            atomic_add(s, 0, 1u32);
            y[0] = s[1];
        }
    });
    assert_eq!(errs.len(), 2, "{errs:#?}");
    assert!(errs[0].contains("`s` is used with atomics, so every access to it is atomic: write `atomic_store(s, i, v);`"), "{}", errs[0]);
    assert!(
        errs[1].contains("write `let v = atomic_load(s, i);`"),
        "{}",
        errs[1]
    );
    one_error(
        quote! { fn k(y: &mut [u32]) { let s = shared::<f32, 4>(); atomic_add(s, 0, 1.0); } },
        "atomics act on `u32` or `i32`; this workgroup array holds `f32`",
    );
    one_error(
        quote! { fn k(y: &mut [u32]) { let s = shared::<u32, 4>(); atomic_add(s, 4, 1u32); } },
        "index 4 is out of bounds",
    );
    one_error(
        quote! { fn k(y: &mut [u32]) { let a = [0u32; 4]; atomic_add(a, 0, 1u32); } },
        "the first argument of an atomic is a `&mut [u32]` or `&mut [i32]` parameter of the kernel, or a `shared::<u32, N>()`",
    );
}

#[test]
fn blocks_and_loops_yield_values() {
    let k = kernel(quote! {
        fn k(x: &[f32], y: &mut [f32]) {
            let i = global_id().x;
            let a = { let t = x[i] * 2.0; t + 1.0 };
            let mut n = 0u32;
            let b = loop { n += 1; if n > 3 { break n as f32; } };
            let c: f32 = loop { if a > 0.0 { break a; } break 0.0; };
            let d = if a > b { let s = a - b; s * s } else { { let z = 1.0; z } };
            y[i] = { let q = a + b; q + c + d };
        }
    });
    assert_eq!(count(&k.body, &|s| matches!(s, Stmt::Loop { .. })), 2);
    valid_wgsl(&k);

    one_error(
        quote! { fn k(y: &mut [f32]) { let v = loop { y[0] = 1.0; }; } },
        "no `break` gives it one",
    );
    one_error(
        quote! { fn k(y: &mut [f32]) { loop { break 1.0; } } },
        "`break` with a value leaves only a `loop` used as a value",
    );
    one_error(
        quote! { fn k(y: &mut [f32]) { let v = loop { if y[0] > 0.0 { break; } break 1.0; }; } },
        "this `loop` is used as a value: `break` with one",
    );
    one_error(
        quote! { fn k(y: &mut [f32]) { let f = 1.0; let v = loop { if y[0] > 0.0 { break 1u32; } break f; }; } },
        "this `loop`'s value is `u32`",
    );
    // A `break v` inside a `while` in a value loop belongs to the `while`.
    one_error(
        quote! { fn k(y: &mut [f32]) { let v = loop { while y[0] > 0.0 { break 2.0; } break 1.0; }; } },
        "`break` with a value leaves only a `loop` used as a value",
    );
    one_error(
        quote! { fn k(y: &mut [f32]) { let v: u32 = { let t = 1.0; t }; } },
        "expected `u32`",
    );
    one_error(
        quote! { fn k(y: &mut [f32]) { y[0] = 1.0 + { let t = 1.0; t }; } },
        "a block with statements is a value only as the whole value of a `let` or an assignment",
    );
}

#[test]
fn atomic_workgroup_memory_is_zeroed_before_the_body_on_cuda() {
    let k = kernel(quote! {
        fn k(y: &mut [u32]) {
            let s = shared::<u32, 100>();
            atomic_add(s, local_id().x, 1u32);
        }
    });
    let cuda = emit::cuda::emit(&k);
    let zero = cuda.find("gd_z < 100u").expect("a zeroing loop");
    let sync = cuda.find("__syncthreads();").expect("a barrier after it");
    let add = cuda.find("atomicAdd(").expect("the atomic");
    assert!(zero < sync && sync < add, "{cuda}");
}

#[test]
fn large_splats_and_run_time_indices_emit_valid_wgsl() {
    let k = kernel(quote! {
        fn k(x: &[f32], y: &mut [f32]) {
            let i = global_id().x;
            let mut big = [x[0]; 1000];
            let mut small = [x[1]; 3];
            let mut b = [true; 70];
            big[i] += 1.0;
            small[i % 4] = big[i * 2];
            b[i] = !b[i + 1];
            if b[3] { y[i] = small[i] + big[999]; }
            barrier();
            y[i + 1] = big[i];
        }
    });
    let wgsl = valid_wgsl(&k);
    assert!(wgsl.contains("select(0.0f, "), "{wgsl}");
    let host = emit::host::emit(&k);
    assert!(host.contains("gd::array_get(&"), "{host}");
    syn::parse_str::<syn::File>(&host).unwrap_or_else(|e| panic!("{e}\n{host}"));
}

#[test]
fn a_divergent_barrier_in_an_unrolled_loop_is_reported_once() {
    let errs = errors(quote! {
        fn k(y: &mut [f32]) {
            for k in 0..4u32 {
                if local_id().x == k { barrier(); }
            }
        }
    });
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(
        errs[0].contains("`barrier()` must be reached by every invocation"),
        "{}",
        errs[0]
    );
}

#[test]
fn if_values_on_a_flag_are_statement_ifs_in_wgsl() {
    let k = kernel(quote! {
        fn k(t: bool, n: u32, x: &[f32], y: &mut [f32]) {
            let i = global_id().x;
            // On a flag, with an arm that computes: a statement `if` (only the taken arm runs).
            let at = if t { i * n + 1 } else { n * 2 + i };
            // On a comparison, or with operands for arms: `select`.
            let w = if i < n { x[i] * 2.0 } else { 0.0 };
            let s = if t { 1.0 } else { 0.5 };
            if at < y.len() {
                y[at] = w * s;
            }
        }
    });
    let wgsl = valid_wgsl(&k);
    assert!(wgsl.contains("if (t_p) {"), "{wgsl}");
    assert!(!wgsl.contains("select(((n_p * 2u)"), "{wgsl}");
    assert!(wgsl.contains("select(0e0f, "), "{wgsl}");
    assert!(wgsl.contains("select(5e-1f, 1e0f, t_p)"), "{wgsl}");
    // CUDA C keeps its conditional expressions.
    let cuda = emit::cuda::emit(&k);
    assert_eq!(cuda.matches("(t_p ? ").count(), 2, "{cuda}");
}
