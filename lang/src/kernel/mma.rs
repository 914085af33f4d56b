//! `mma_m16n8k16(&a, &b, &mut acc)`: a warp-level matrix multiply-accumulate, what it means on
//! every target.
//!
//! An **MMA group** is 32 consecutive invocations of the (one-dimensional) workgroup by
//! `local_id().x`: invocations `32q .. 32q + 31` form group `q`, and an invocation's *lane* is
//! `local_id().x % 32`. The group is fixed by the workgroup alone, not by the device's
//! subgroup size, so the same kernel computes the same thing where subgroups are 8, 32 or 64
//! wide. Together the 32 invocations of a group compute `D = A·B + C` for a 16×16 `A`, a 16×8
//! `B` and 16×8 `C`/`D`, `A` and `B` of one 16-bit type (`bf16` or `f16`), `C` and `D` in
//! `f32`; `acc` holds `C` before the call and `D` after it.
//!
//! # Fragments
//!
//! Each invocation holds its part of the matrices in per-invocation arrays: `a: [T; 8]`,
//! `b: [T; 4]`, `acc: [f32; 4]` (`T` is `bf16` or `f16`, the same for `a` and `b`). With
//! `g = lane / 4` and `t = lane % 4`, element `i` of each array is (the layout of PTX's
//! `mma.m16n8k16` for 16-bit inputs, PTX ISA "Matrix Fragments for mma.m16n8k16 with
//! floating point type", section 9.7.14.5.8 of ISA 8.x):
//!
//! | array | row | column |
//! |---|---|---|
//! | `a[i]` of `A` (16×16) | `g + 8·((i / 2) % 2)` | `2t + i % 2 + 8·(i / 4)` |
//! | `b[i]` of `B` (16×8) | `2t + i % 2 + 8·(i / 2)` | `g` |
//! | `acc[i]` of `C`, `D` (16×8) | `g + 8·(i / 2)` | `2t + i % 2` |
//!
//! So lane `l` holds rows `l / 4` and `l / 4 + 8` of `A`, `C` and `D`, and column `l / 4` of
//! `B`; the pairs `(a[0], a[1])`, `(a[2], a[3])`, … are adjacent columns (one 32-bit register
//! each on CUDA).
//!
//! # Where it may stand
//!
//! Like `barrier()`, every invocation of the workgroup reaches it together (uniform control
//! flow; `kernel::uniformity` rejects it elsewhere), and a kernel using it has a
//! one-dimensional workgroup of a multiple of 32 invocations. It is a statement of a kernel's
//! body, not of a `#[device]` function.
//!
//! # Rounding
//!
//! A product of two `bf16` or two `f16` values is exact in `f32` (at most 22 significant
//! bits), so the only rounding is in the sums. The portable form, which the host, WGSL and
//! CUDA before sm_80 run, computes each `D[r][c]` as `C[r][c]` plus the 16 products
//! `A[r][k]·B[k][c]` added one at a time in increasing `k`, each sum rounded to `f32` (to
//! nearest even); whether a target fuses a product into its add makes no difference, the
//! product being exact. These targets therefore agree bitwise. CUDA on sm_80 and later runs
//! `mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}...` on the tensor cores (PTX ISA 9.7.14.5.14,
//! "Multiply-and-Accumulate Instruction: mma"), whose order and intermediate precision of the
//! sum are unspecified. `tests/mma.rs` holds every target to
//! `2^-18 · (|C| + Σ_k |A[r][k]·B[k][c]|)` of the exact `D` per call (the portable form's 16
//! roundings stay within `16 · 2^-24` of it), and the portable targets to bitwise equality
//! with the definition above.

use super::ir::{Stmt, Ty};

/// The builtin's name.
pub const NAME: &str = "mma_m16n8k16";

/// Invocations of one MMA group (and the multiple of it a kernel's workgroup must be).
pub const GROUP: u32 = 32;

/// Elements of the `a`, `b` and `acc` fragments of one invocation.
pub const A_LEN: u32 = 8;
/// See [`A_LEN`].
pub const B_LEN: u32 = 4;
/// See [`A_LEN`].
pub const ACC_LEN: u32 = 4;

/// Words of workgroup memory the portable form exchanges fragments through, per invocation:
/// `a` and `b` as pairs of 16-bit values.
pub const SCRATCH_WORDS: u32 = (A_LEN + B_LEN) / 2;

/// Where the portable form finds a product's operands, for accumulator element `i` (`0..4`)
/// and `k` (`0..16`): `(a element, b element)` in the source lanes' fragments, each the same
/// for every lane; and the source lanes as functions of the invocation's `g` and `t`,
/// `A` from lane `4g + a_t`, `B` from lane `4·(2t + i % 2) + b_t`, where `a_t = b_t = (k % 8) / 2`.
///
/// Derived from the table in the module docs: `A[r][k]` with `r = g + 8·(i / 2)` is element
/// `k % 2 + 2·(r / 8) + 4·(k / 8)` of lane `4·(r % 8) + (k % 8) / 2`; `B[k][c]` with
/// `c = 2t + i % 2` is element `k % 2 + 2·(k / 8)` of lane `4c + (k % 8) / 2`.
pub fn operands(i: u32, k: u32) -> (u32, u32) {
    let a = k % 2 + 2 * (i / 2) + 4 * (k / 8);
    let b = k % 2 + 2 * (k / 8);
    (a, b)
}

/// The lane within its group's `t`-row (`(k % 8) / 2`) that holds `k`'s operands.
pub fn operand_t(k: u32) -> u32 {
    (k % 8) / 2
}

/// An `mma_m16n8k16` call (see the module docs): the arrays it reads and accumulates into,
/// by index into the kernel's per-invocation arrays.
#[derive(Clone, Debug)]
pub struct Mma {
    /// `a: [T; 8]`.
    pub a: usize,
    /// `b: [T; 4]`.
    pub b: usize,
    /// `acc: [f32; 4]`, read and written.
    pub acc: usize,
    /// `T`: `Ty::BF16` or `Ty::F16`.
    pub elem: Ty,
    /// The call's span, for the uniformity check.
    pub span: proc_macro2::Span,
}

/// The error for a call that not every invocation of the workgroup reaches together: inside
/// a non-uniform `if` or loop (`condition`), or after a non-uniform early exit.
pub fn uniformity_message(condition: bool) -> String {
    group_uniformity_message(
        NAME,
        "their fragments",
        "mask the data instead (load zeros outside the matrix)",
        condition,
    )
}

/// [`uniformity_message`] for any builtin of an MMA group (`name`): what its invocations
/// `exchange`, and what to do instead of skipping it (`instead`).
pub fn group_uniformity_message(
    name: &str,
    exchange: &str,
    instead: &str,
    condition: bool,
) -> String {
    if condition {
        format!("`{name}` must be reached by every invocation of the workgroup together (its 32 invocations exchange {exchange}, and the portable form synchronises the workgroup like `barrier()`), but this one is inside an `if` or loop whose condition depends on the invocation id (or on memory that invocations write), so some invocations skip it; call it for every invocation and {instead}, or compute the condition from uniform values (scalar parameters, `len()`, `workgroup_id()`, constants)")
    } else {
        format!("`{name}` must be reached by every invocation of the workgroup together, but some invocations may already have left through an earlier `return`, `break` or `continue` taken under a condition that depends on the invocation id; instead of leaving early, put the work in `if cond {{ ... }}` and keep `{name}` outside it")
    }
}

/// Whether the portable forms of `body` exchange through the MMA scratch words: it calls
/// `mma_m16n8k16` or `ldmatrix_x4` (which exchanges its rows' indices through the first of
/// each invocation's words).
pub fn exchanges(body: &[Stmt]) -> bool {
    used(body) || super::ldmatrix::used(body)
}

/// Bytes of workgroup memory the portable form of `k`'s calls exchanges fragments through
/// (`mma_m16n8k16`'s fragments, `ldmatrix_x4`'s rows).
pub fn scratch_bytes(k: &super::ir::Kernel) -> u32 {
    if exchanges(&k.body) {
        k.workgroup[0] * SCRATCH_WORDS * 4
    } else {
        0
    }
}

/// Whether `body` (at any depth) calls `mma_m16n8k16`.
pub fn used(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Mma(_) => true,
        Stmt::If { then, els, .. } => used(then) || used(els),
        Stmt::For { body, .. } | Stmt::While { body, .. } | Stmt::Loop { body } => used(body),
        _ => false,
    })
}

/// The element types of the calls in `body`, each once, in order.
pub fn elems(body: &[Stmt]) -> Vec<Ty> {
    fn walk(body: &[Stmt], out: &mut Vec<Ty>) {
        for s in body {
            match s {
                Stmt::Mma(m) if !out.contains(&m.elem) => out.push(m.elem),
                Stmt::If { then, els, .. } => {
                    walk(then, out);
                    walk(els, out);
                }
                Stmt::For { body, .. } | Stmt::While { body, .. } | Stmt::Loop { body } => {
                    walk(body, out)
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(body, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn lower(
        args: proc_macro2::TokenStream,
        item: proc_macro2::TokenStream,
    ) -> Result<super::super::ir::Kernel, Vec<String>> {
        let func: syn::ItemFn = syn::parse2(item).expect("test kernels are functions");
        super::super::lower(args, &func)
            .map_err(|(errors, _)| errors.iter().map(|e| e.to_string()).collect())
    }

    /// A call lowers to `Stmt::Mma` over the three arrays, makes the kernel synchronise, and
    /// each target emits its form: `mma.sync` (and the shuffle fallback) in CUDA C, the
    /// exchange array of 6 words per invocation in WGSL, `HostMma` on the host.
    #[test]
    fn a_call_lowers_and_emits_on_every_target() {
        let k = lower(
            quote!(workgroup = 64),
            quote! {
                pub fn once(a: &[f16], out: &mut [f32]) {
                    let i = global_id().x;
                    let fa = [a[i]; 8];
                    let fb = [a[i + 1]; 4];
                    let mut acc = [0.0f32; 4];
                    mma_m16n8k16(&fa, &fb, &mut acc);
                    out[i] = acc[0];
                }
            },
        )
        .unwrap_or_else(|e| panic!("{e:#?}"));
        assert!(k.has_barrier);
        assert_eq!(elems(&k.body), vec![Ty::F16]);
        let m = k
            .body
            .iter()
            .find_map(|s| match s {
                Stmt::Mma(m) => Some(m.clone()),
                _ => None,
            })
            .expect("an `Stmt::Mma`");
        assert_eq!(
            (k.arrays[m.a].len, k.arrays[m.b].len, k.arrays[m.acc].len),
            (8, 4, 4)
        );
        assert_eq!(scratch_bytes(&k), 64 * 6 * 4);
        let cuda = super::super::emit::cuda::emit(&k);
        assert!(cuda.contains("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
        assert!(cuda.contains("__shfl_sync"), "the pre-sm_80 form");
        assert!(cuda.contains("gd_mma_m16n8k16_f16("));
        let wgsl = super::super::emit::wgsl::emit(&k);
        assert!(
            wgsl.contains("var<workgroup> gd_mma: array<u32, 384>;"),
            "{wgsl}"
        );
        assert_eq!(wgsl.matches("workgroupBarrier();").count(), 2, "{wgsl}");
        assert!(wgsl.contains("fn gd_f16_to_f32"));
        let host = super::super::emit::host::emit(&k);
        assert!(host.contains("gd::HostMma::new(GD_WG.x)"));
        assert!(host.contains("gd_mma.m16n8k16(gd_li, &"));
    }

    /// Every misuse is one spanned error naming what is wrong.
    #[test]
    fn misuses_are_reported() {
        let cases: &[(proc_macro2::TokenStream, &str)] = &[
            (
                quote!(mma_m16n8k16(&s, &fb, &mut acc);),
                "`a` of `mma_m16n8k16` is `[bf16; 8]` or `[f16; 8]`, but `s` is `[bf16; 4]`",
            ),
            (
                quote!(mma_m16n8k16(&fa, &h, &mut acc);),
                "`a` holds `bf16` and `b` `f16`",
            ),
            (
                quote!(mma_m16n8k16(&fa, &fb, &fixed);),
                "`acc` of `mma_m16n8k16` is written: pass it as `&mut fixed`",
            ),
            (
                quote!(mma_m16n8k16(&fa, &fb, &mut fixed);),
                "`fixed` is written by `mma_m16n8k16`: declare it `let mut fixed",
            ),
            (
                quote!(mma_m16n8k16(fa, &fb, &mut acc);),
                "is passed by reference",
            ),
            (
                quote!(mma_m16n8k16(&fa, &fb);),
                "takes three per-invocation arrays",
            ),
            (
                quote!(mma_m16n8k16(&fa, &fb, &mut wide);),
                "`acc` of `mma_m16n8k16` is `[f32; 4]`, but `wide` is `[f32; 8]`",
            ),
            (
                quote!(let x = mma_m16n8k16(&fa, &fb, &mut acc);),
                "is a statement",
            ),
            (
                quote!(if i < 3 {
                    mma_m16n8k16(&fa, &fb, &mut acc);
                }),
                "must be reached by every invocation of the workgroup together",
            ),
        ];
        for (stmt, needle) in cases {
            let errs = lower(
                quote!(workgroup = 64),
                quote! {
                    pub fn k(a: &[bf16], hs: &[f16], out: &mut [f32]) {
                        let i = global_id().x;
                        let fa = [a[i]; 8];
                        let fb = [a[i]; 4];
                        let s = [a[i]; 4];
                        let h = [hs[i]; 4];
                        let fixed = [0.0f32; 4];
                        let mut wide = [0.0f32; 8];
                        let mut acc = [0.0f32; 4];
                        #stmt
                        out[i] = acc[0] + wide[0] + fixed[0];
                    }
                },
            )
            .expect_err("rejected");
            assert_eq!(errs.len(), 1, "{stmt}: {errs:#?}");
            assert!(
                errs[0].contains(needle),
                "{stmt}: {:?} lacks {needle:?}",
                errs[0]
            );
        }
        for (args, needle) in [
            (quote!(workgroup = 48), "a multiple of 32 invocations"),
            (quote!(workgroup = (32, 2)), "one-dimensional workgroup"),
        ] {
            let errs = lower(
                args,
                quote! {
                    pub fn k(a: &[bf16], out: &mut [f32]) {
                        let fa = [a[0]; 8];
                        let fb = [a[0]; 4];
                        let mut acc = [0.0f32; 4];
                        mma_m16n8k16(&fa, &fb, &mut acc);
                        out[0] = acc[0];
                    }
                },
            )
            .expect_err("rejected");
            assert_eq!(errs.len(), 1, "{errs:#?}");
            assert!(errs[0].contains(needle), "{:?} lacks {needle:?}", errs[0]);
        }
    }

    /// The operand table inverts the fragment layout: for every lane, accumulator element and
    /// `k`, the named lane and element hold `A[r][k]` and `B[k][c]`.
    #[test]
    fn operands_invert_the_layout() {
        let a_at = |lane: u32, e: u32| {
            let (g, t) = (lane / 4, lane % 4);
            (g + 8 * ((e / 2) % 2), 2 * t + e % 2 + 8 * (e / 4))
        };
        let b_at = |lane: u32, e: u32| {
            let (g, t) = (lane / 4, lane % 4);
            (2 * t + e % 2 + 8 * (e / 2), g)
        };
        let mut seen_a = std::collections::HashSet::new();
        for lane in 0..32 {
            for e in 0..A_LEN {
                assert!(seen_a.insert(a_at(lane, e)), "A covered twice");
            }
        }
        assert_eq!(seen_a.len(), 256);
        for lane in 0..32u32 {
            let (g, t) = (lane / 4, lane % 4);
            for i in 0..ACC_LEN {
                let (r, c) = (g + 8 * (i / 2), 2 * t + i % 2);
                for k in 0..16 {
                    let (ea, eb) = operands(i, k);
                    let la = 4 * g + operand_t(k);
                    let lb = 4 * (2 * t + i % 2) + operand_t(k);
                    assert_eq!(a_at(la, ea), (r, k), "lane {lane} i {i} k {k}");
                    assert_eq!(b_at(lb, eb), (k, c), "lane {lane} i {i} k {k}");
                }
            }
        }
    }
}
