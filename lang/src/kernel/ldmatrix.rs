//! `ldmatrix_x4(s, p, &mut w)`: four 8×8 matrices of 16-bit values read from workgroup memory
//! straight into the fragment registers of [`mma_m16n8k16`](super::mma), what it means on
//! every target.
//!
//! ```ignore
//! let tile = shared::<u32, 2048>();   // 16-bit values in pairs, a row of 8 values = 4 words
//! let mut w = [0u32; 4];
//! ldmatrix_x4(tile, p, &mut w);       // p: the word where this invocation's row starts
//! ```
//!
//! # Meaning
//!
//! The call belongs to an MMA group (32 invocations by `local_id().x`, as for
//! `mma_m16n8k16`). It reads four 8×8 matrices of 16-bit values stored as pairs in the `u32`
//! workgroup array `s`, a row of each being [`ROW`] consecutive words. Lane `8j + r` of the
//! group names, with `p`, the row `r` of matrix `j`: the words `s[p' .. p' + 4]`, where
//! `p' = min(p - p % 4, N - 4)` for an array of `N` words (the row aligned down to 16 bytes
//! and kept inside the array, so no call reads outside it). Each lane `l` then receives word
//! `l % 4` of row `l / 4` of every matrix: `w[j] = s[p'(8j + l / 4) + l % 4]`, where `p'(i)`
//! is lane `i`'s row. So the values a lane receives are those `mma_m16n8k16`'s fragments
//! take: with matrices `j` = (rows 0–7, values 0–7), (rows 8–15, values 0–7), (rows 0–7,
//! values 8–15), (rows 8–15, values 8–15) of a 16×16 tile of `A` stored with `k` inner, `w`
//! is the `a` fragment's four registers in order (`a[2i]`, `a[2i + 1]` the low and high
//! halves of `w[i]`); two 8-row tiles of `B` stored with `k` inner give two `b` fragments.
//!
//! `ldmatrix_x4_trans(s, p, &mut w)` reads each matrix transposed: lane `l` receives in
//! `w[j]` the values at column `l / 4` of rows `2·(l % 4)` and `2·(l % 4) + 1` of matrix `j`
//! (the low and high halves), value `c` of a row being the half `c % 2` of its word `c / 2`.
//! So a 16×8 block of `B` stored with `k` outer (8 values of a row of `B` per matrix row),
//! rows `k .. k + 8` and `k + 8 .. k + 16` as two matrices, gives a `b` fragment, in order.
//!
//! # Targets
//!
//! CUDA on sm_75 and later runs PTX's `ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16` (PTX ISA
//! 9.7.14.5.15, "Warp-level matrix load instruction: ldmatrix"), each lane's address that of
//! its row `p'`; earlier CUDA exchanges the rows' addresses with warp shuffles. WGSL and the
//! host exchange them through workgroup memory (one word per invocation), between two
//! barriers. Every target moves the same bits: the call has no rounding.
//!
//! The call reads workgroup memory that other invocations wrote, so, as for any such read, a
//! `barrier()` separates their writes from it: the portable form's own barriers are not a
//! promise of the language (CUDA's `ldmatrix` has none).
//!
//! # Where it may stand
//!
//! As `mma_m16n8k16`: every invocation of the workgroup reaches it together (uniform control
//! flow; `kernel::uniformity` rejects it elsewhere), in the body of a kernel whose workgroup
//! is one-dimensional, a multiple of 32 invocations.

use super::ir::{Expr, Stmt};

/// The builtin's name.
pub const NAME: &str = "ldmatrix_x4";

/// The transposing form's name.
pub const NAME_TRANS: &str = "ldmatrix_x4_trans";

/// Words of one row of a matrix (8 values of 16 bits: 16 bytes).
pub const ROW: u32 = 4;

/// Matrices one call reads, and so words each invocation receives.
pub const MATRICES: u32 = 4;

/// An `ldmatrix_x4` call, lowered.
#[derive(Clone, Debug)]
pub struct Ldmatrix {
    /// The workgroup array read (an index into the kernel's workgroup arrays).
    pub shared: usize,
    /// This invocation's row, `p'` of the module docs (aligned and clamped already).
    pub row: Expr,
    /// The per-invocation array `[u32; 4]` written.
    pub w: usize,
    /// `ldmatrix_x4_trans`: each matrix read transposed.
    pub trans: bool,
    /// The call's span, for the uniformity check.
    pub span: proc_macro2::Span,
}

impl Ldmatrix {
    /// The builtin's name as the source calls it.
    pub fn name(&self) -> &'static str {
        if self.trans {
            NAME_TRANS
        } else {
            NAME
        }
    }
}

/// The error for a call of `name` that not every invocation of the workgroup reaches
/// together.
pub fn uniformity_message(name: &str, condition: bool) -> String {
    super::mma::group_uniformity_message(
        name,
        "their rows' addresses",
        "choose the row instead",
        condition,
    )
}

/// Whether `body` calls `ldmatrix_x4`.
pub fn used(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Ldmatrix(_) => true,
        Stmt::If { then, els, .. } => used(then) || used(els),
        Stmt::For { body, .. } | Stmt::While { body, .. } | Stmt::Loop { body } => used(body),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::super::ir::*;
    use super::*;

    fn lower(
        args: proc_macro2::TokenStream,
        item: proc_macro2::TokenStream,
    ) -> Result<Kernel, Vec<String>> {
        let func: syn::ItemFn = syn::parse2(item).expect("test kernels are functions");
        super::super::lower(args, &func)
            .map_err(|(errors, _)| errors.iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn a_call_lowers_and_emits_on_every_target() {
        let k = lower(
            quote!(workgroup = 64),
            quote! {
                pub fn once(p: u32, out: &mut [u32]) {
                    let t = shared::<u32, 128>();
                    let mut w = [0u32; 4];
                    ldmatrix_x4(t, p + local_id().x, &mut w);
                    out[global_id().x] = w[0] + w[3];
                }
            },
        )
        .unwrap_or_else(|e| panic!("{e:#?}"));
        assert!(k.has_barrier);
        assert!(used(&k.body));
        assert!(!super::super::mma::used(&k.body));
        // The exchange borrows one word of each invocation's MMA scratch words.
        assert_eq!(super::super::mma::scratch_bytes(&k), 64 * 6 * 4);
        let cuda = super::super::emit::cuda::emit(&k);
        assert!(
            cuda.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
            "{cuda}"
        );
        assert!(cuda.contains("__CUDA_ARCH__ >= 750"));
        assert!(cuda.contains("__shfl_sync"), "the pre-sm_75 form");
        // The row aligned down and clamped to the array's last row.
        assert!(
            cuda.contains("4294967292u") && cuda.contains("124u"),
            "{cuda}"
        );
        let wgsl = super::super::emit::wgsl::emit(&k);
        assert!(
            wgsl.contains("var<workgroup> gd_mma: array<u32, 384>;"),
            "{wgsl}"
        );
        assert_eq!(wgsl.matches("workgroupBarrier();").count(), 2, "{wgsl}");
        let host = super::super::emit::host::emit(&k);
        assert!(host.contains("gd::HostMma::new(GD_WG.x)"));
        assert!(host.contains("gd_mma.ldmatrix_x4(gd_li, "));
    }

    #[test]
    fn the_transposing_form_lowers_and_names_itself_in_errors() {
        let k = lower(
            quote!(workgroup = 32),
            quote! {
                pub fn once(p: u32, out: &mut [u32]) {
                    let t = shared::<u32, 64>();
                    let mut w = [0u32; 4];
                    ldmatrix_x4_trans(t, p, &mut w);
                    out[0] = w[0];
                }
            },
        )
        .unwrap_or_else(|e| panic!("{e:#?}"));
        let cuda = super::super::emit::cuda::emit(&k);
        assert!(cuda.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
        let host = super::super::emit::host::emit(&k);
        assert!(host.contains(", true, |gd_q|"), "{host}");
        let errs = lower(
            quote!(workgroup = 32),
            quote! {
                pub fn k(out: &mut [u32]) {
                    let t = shared::<u32, 64>();
                    let mut w = [0u32; 2];
                    ldmatrix_x4_trans(t, 0, &mut w);
                    out[0] = w[0];
                }
            },
        )
        .expect_err("rejected");
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].contains("`w` of `ldmatrix_x4_trans` is `[u32; 4]`"),
            "{errs:?}"
        );
    }

    #[test]
    fn a_known_row_folds_to_its_clamped_value() {
        let k = lower(
            quote!(workgroup = 32),
            quote! {
                pub fn once(out: &mut [u32]) {
                    let t = shared::<u32, 64>();
                    let mut w = [0u32; 4];
                    ldmatrix_x4(t, 1000, &mut w);
                    out[0] = w[0];
                }
            },
        )
        .unwrap_or_else(|e| panic!("{e:#?}"));
        let row = k
            .body
            .iter()
            .find_map(|s| match s {
                Stmt::Ldmatrix(l) => Some(l.row.clone()),
                _ => None,
            })
            .expect("an `Stmt::Ldmatrix`");
        assert!(matches!(row.kind, ExprKind::LitU32(60)), "{row:?}");
    }

    #[test]
    fn misuses_are_reported() {
        let cases: &[(proc_macro2::TokenStream, &str)] = &[
            (
                quote!(ldmatrix_x4(f, 0, &mut w);),
                "from a workgroup array of `u32` words, but `f` holds `f32`",
            ),
            (
                quote!(ldmatrix_x4(x, 0, &mut w);),
                "the first argument of `ldmatrix_x4` is the workgroup array it reads, but `x` is not one",
            ),
            (
                quote!(ldmatrix_x4(tiny, 0, &mut w);),
                "reads rows of 4 words, but `tiny` holds 2",
            ),
            (
                quote!(ldmatrix_x4(t, 0, &w);),
                "`w` of `ldmatrix_x4` is written: pass it as `&mut w`",
            ),
            (
                quote!(ldmatrix_x4(t, 0, &mut fixed);),
                "`fixed` is written by `ldmatrix_x4`: declare it `let mut fixed",
            ),
            (
                quote!(ldmatrix_x4(t, 0, &mut wide);),
                "`w` of `ldmatrix_x4` is `[u32; 4]`, but `wide` is `[u32; 8]`",
            ),
            (
                quote!(ldmatrix_x4(t, 0, &mut fl);),
                "`w` of `ldmatrix_x4` is `[u32; 4]`, but `fl` is `[f32; 4]`",
            ),
            (
                quote!(ldmatrix_x4(t, 0.5, &mut w);),
                "u32",
            ),
            (quote!(ldmatrix_x4(t, 0);), "reads four 8×8 matrices"),
            (
                quote!(let y = ldmatrix_x4(t, 0, &mut w);),
                "is a statement",
            ),
            (
                quote!(if i < 3 {
                    ldmatrix_x4(t, 0, &mut w);
                }),
                "`ldmatrix_x4` must be reached by every invocation of the workgroup together",
            ),
            (
                quote!(ldmatrix_x4(at, 0, &mut w);),
                "is used with atomics",
            ),
        ];
        for (stmt, needle) in cases {
            let errs = lower(
                quote!(workgroup = 64),
                quote! {
                    pub fn k(x: &[u32], out: &mut [u32]) {
                        let t = shared::<u32, 64>();
                        let f = shared::<f32, 64>();
                        let tiny = shared::<u32, 2>();
                        let at = shared::<u32, 64>();
                        let i = global_id().x;
                        atomic_add(at, 0, 1u32);
                        let fixed = [0u32; 4];
                        let mut wide = [0u32; 8];
                        let mut fl = [0.0f32; 4];
                        let mut w = [0u32; 4];
                        #stmt
                        out[i] = w[0] + wide[0] + fixed[0] + (fl[0] as u32) + f[0] as u32 + tiny[0];
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
                    pub fn k(out: &mut [u32]) {
                        let t = shared::<u32, 64>();
                        let mut w = [0u32; 4];
                        ldmatrix_x4(t, 0, &mut w);
                        out[0] = w[0];
                    }
                },
            )
            .expect_err("rejected");
            assert_eq!(errs.len(), 1, "{errs:#?}");
            assert!(errs[0].contains(needle), "{:?} lacks {needle:?}", errs[0]);
        }
    }
}
