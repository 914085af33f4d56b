//! Matrix products `C = op(A)·op(B)` of half-precision inputs (`bf16` or `f16`) into `f32`,
//! on the kernel language's warp-level multiply-accumulate `mma_m16n8k16` (the tensor cores
//! on CUDA, the portable form elsewhere: `graphed_lang::kernel::mma`).
//!
//! One workgroup of 128 invocations (four MMA groups) computes a 64×64 tile of `C`, each
//! group a 32×32 quarter of it as 2×4 calls of `mma_m16n8k16` per 16 values of `k`. `k` goes
//! in steps of 32: each step stages a 64×32 tile of `op(A)` and a 32×64 tile of `op(B)`
//! through workgroup memory (as `f32`, an exact widening), zero outside the matrices, so any
//! `m`, `n` and `k` work; only elements inside `C` are written. `op` is the identity or the
//! transpose (`ta`: `A` stored `k × m`; `tb`: `B` stored `n × k`), which covers a layer's
//! forward product (`X·Wᵀ`), its input gradient (`dY·W`) and its weight gradient (`dYᵀ·X`).
//!
//! Each element of `C` is the sum over `k` in steps of 16, in increasing order, of one call's
//! contribution; within a call the order is the target's (see `graphed_lang::kernel::mma`):
//! the host and wgpu agree bitwise, CUDA's tensor cores within the tolerance stated there.

use graphed_macros::{device, kernel};
use graphed_runtime::{bf16, f16, Buffer, DType, Element, Error, Grid, Launch, Result};

use crate::shape::expect_product;

/// Rows and columns of `C` per workgroup.
pub const TILE: usize = 64;

/// This invocation's share (of 128) of a load of a 64 × 32 tile (rows × `k`) of a matrix
/// stored row-major (`trans`: stored transposed): its element `q` (of 16) is at row
/// `s[0] + s[2]·q`, `k` offset `s[1] + s[3]·q`, consecutive invocations along the dimension
/// contiguous in memory.
#[device]
fn tile_share(trans: bool, tid: u32) -> [u32; 4] {
    let mut s = [0u32; 4];
    if trans {
        s[0] = tid % 64;
        s[1] = tid / 64;
        s[3] = 2u32;
    } else {
        s[0] = tid / 32;
        s[1] = tid % 32;
        s[2] = 4u32;
    }
    s
}

/// The product kernel over inputs of type `$t`.
macro_rules! matmul_mma_kernel {
    ($(#[$doc:meta])* $name:ident, $t:ident, $elem:ident) => {
        /// Element `(r, kk)` of a `rows × k` matrix `x` stored row-major (`trans`: `x` holds
        /// its transpose, `k × rows`), widened to `f32`; zero outside the matrix. (Its plain
        /// Rust form is unused: the kernels' host form reads 16-bit slices through its own.)
        #[allow(dead_code)]
        #[device]
        fn $elem(x: &[$t], trans: bool, r: u32, kk: u32, rows: u32, k: u32) -> f32 {
            let mut v = 0.0f32;
            if r < rows && kk < k {
                if trans {
                    v = x[kk * rows + r] as f32;
                } else {
                    v = x[r * k + kk] as f32;
                }
            }
            v
        }

        $(#[$doc])*
        #[kernel(workgroup = 128)]
        pub fn $name(
            m: u32,
            n: u32,
            k: u32,
            ta: bool,
            tb: bool,
            accumulate: bool,
            a: &[$t],
            b: &[$t],
            c: &mut [f32],
        ) {
            // `sa[r * 40 + kk]`: row `r` of the tile of `op(A)`; `sb[col * 40 + kk]`: column
            // `col` of the tile of `op(B)` (so each fragment pair is adjacent); 8 words of
            // padding per row.
            let sa = shared::<f32, 2560>();
            let sb = shared::<f32, 2560>();
            let tid = local_id().x;
            let lane = tid % 32;
            let g = lane / 4;
            let t = lane % 4;
            // This group's 32×32 quarter of the tile.
            let wr = (tid / 32) / 2 * 32;
            let wc = (tid / 32) % 2 * 32;
            let row0 = workgroup_id().y * 64;
            let col0 = workgroup_id().x * 64;
            // This invocation's shares of the two tile loads (`tile_share`): op(B)'s columns
            // are B's rows when `tb`, so its share is that of a matrix transposed when not.
            let sha = tile_share(ta, tid);
            let shb = tile_share(!tb, tid);
            let mut fa0 = [0.0f32 as $t; 8];
            let mut fa1 = [0.0f32 as $t; 8];
            let mut fb0 = [0.0f32 as $t; 4];
            let mut fb1 = [0.0f32 as $t; 4];
            let mut fb2 = [0.0f32 as $t; 4];
            let mut fb3 = [0.0f32 as $t; 4];
            // `acc_ij`: rows `wr + 16i ..`, columns `wc + 8j ..` of the tile.
            let mut acc00 = [0.0f32; 4];
            let mut acc01 = [0.0f32; 4];
            let mut acc02 = [0.0f32; 4];
            let mut acc03 = [0.0f32; 4];
            let mut acc10 = [0.0f32; 4];
            let mut acc11 = [0.0f32; 4];
            let mut acc12 = [0.0f32; 4];
            let mut acc13 = [0.0f32; 4];
            let tiles = (k + 31) / 32;
            for step in 0..tiles {
                let k0 = step * 32;
                for q in 0..16u32 {
                    // Row `r` of op(A) is row `r` of A, or its column when `ta`; column `col`
                    // of op(B) is row `col` of B when `tb`, else its column.
                    let r = sha[0] + sha[2] * q;
                    let kk = sha[1] + sha[3] * q;
                    sa[r * 40 + kk] = $elem(a, ta, row0 + r, k0 + kk, m, k);
                    let col = shb[0] + shb[2] * q;
                    let kk = shb[1] + shb[3] * q;
                    sb[col * 40 + kk] = $elem(b, !tb, col0 + col, k0 + kk, n, k);
                }
                barrier();
                for s in 0..2u32 {
                    let ko = s * 16 + 2 * t;
                    // A fragments (rows g, g + 8 of each 16-row block; columns 2t, 2t + 1,
                    // 2t + 8, 2t + 9) and B fragments (column g; rows 2t, 2t + 1, 2t + 8,
                    // 2t + 9): the layout of `mma_m16n8k16`.
                    for i in 0..8u32 {
                        let o = (g + 8 * ((i / 2) % 2)) * 40 + ko + i % 2 + 8 * (i / 4);
                        fa0[i] = sa[(wr) * 40 + o] as $t;
                        fa1[i] = sa[(wr + 16) * 40 + o] as $t;
                    }
                    for i in 0..4u32 {
                        let o = g * 40 + ko + i % 2 + 8 * (i / 2);
                        fb0[i] = sb[(wc) * 40 + o] as $t;
                        fb1[i] = sb[(wc + 8) * 40 + o] as $t;
                        fb2[i] = sb[(wc + 16) * 40 + o] as $t;
                        fb3[i] = sb[(wc + 24) * 40 + o] as $t;
                    }
                    mma_m16n8k16(&fa0, &fb0, &mut acc00);
                    mma_m16n8k16(&fa0, &fb1, &mut acc01);
                    mma_m16n8k16(&fa0, &fb2, &mut acc02);
                    mma_m16n8k16(&fa0, &fb3, &mut acc03);
                    mma_m16n8k16(&fa1, &fb0, &mut acc10);
                    mma_m16n8k16(&fa1, &fb1, &mut acc11);
                    mma_m16n8k16(&fa1, &fb2, &mut acc12);
                    mma_m16n8k16(&fa1, &fb3, &mut acc13);
                }
                barrier();
            }
            // Through the tile memory (free after the last step's barrier), so the stores are
            // one loop, not eight copies: element `e` of block `ij` of this invocation at
            // `(4j + e)·128 + tid` of `sa` (`i = 0`) or `sb` (`i = 1`), its own words.
            for e in 0..4u32 {
                sa[e * 128 + tid] = acc00[e];
                sa[(4 + e) * 128 + tid] = acc01[e];
                sa[(8 + e) * 128 + tid] = acc02[e];
                sa[(12 + e) * 128 + tid] = acc03[e];
                sb[e * 128 + tid] = acc10[e];
                sb[(4 + e) * 128 + tid] = acc11[e];
                sb[(8 + e) * 128 + tid] = acc12[e];
                sb[(12 + e) * 128 + tid] = acc13[e];
            }
            for blk in 0..8u32 {
                for e in 0..4u32 {
                    let row = row0 + wr + (blk / 4) * 16 + g + 8 * (e / 2);
                    let col = col0 + wc + (blk % 4) * 8 + 2 * t + e % 2;
                    if row < m && col < n {
                        let at = ((blk % 4) * 4 + e) * 128 + tid;
                        let mut v = sa[at];
                        if blk >= 4 {
                            v = sb[at];
                        }
                        if accumulate {
                            c[row * n + col] += v;
                        } else {
                            c[row * n + col] = v;
                        }
                    }
                }
            }
        }
    };
}

matmul_mma_kernel!(
    /// `C = op(A)·op(B)` (plus `C` when `accumulate`) of `bf16` inputs on 64×64 tiles of
    /// `mma_m16n8k16` (see the module docs); a grid of `⌈n/64⌉ × ⌈m/64⌉` workgroups.
    matmul_mma_bf16,
    bf16,
    element_bf16
);
matmul_mma_kernel!(
    /// [`matmul_mma_bf16`](mod@matmul_mma_bf16) of `f16` inputs.
    matmul_mma_f16,
    f16,
    element_f16
);

/// The shape of a product: `C` is `m × n`, the sum runs over `k`; `ta`: `A` is stored `k × m`
/// (else `m × k`), `tb`: `B` is stored `n × k` (else `k × n`). All row-major.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmaGemm {
    /// Rows of `C`.
    pub m: usize,
    /// Columns of `C`.
    pub n: usize,
    /// The summed dimension.
    pub k: usize,
    /// `A` stored transposed.
    pub ta: bool,
    /// `B` stored transposed.
    pub tb: bool,
}

/// `C = op(A)·op(B)` (plus `C` when `accumulate`) of `bf16` or `f16` inputs into `f32`: one
/// launch of [`matmul_mma_bf16`](mod@matmul_mma_bf16) or [`matmul_mma_f16`](mod@matmul_mma_f16).
///
/// # Errors
/// [`Error::Shape`] when the lengths do not make the product, a size does not fit in a `u32`,
/// or the grid would pass 65,535 workgroups in a dimension; [`Error::Launch`] for an element
/// type other than `bf16` and `f16`; the launch's errors.
pub fn matmul_mma<C: Launch + ?Sized, T: Element>(
    cx: &C,
    g: MmaGemm,
    a: &Buffer<T>,
    b: &Buffer<T>,
    c: &mut Buffer<f32>,
    accumulate: bool,
) -> Result<()> {
    let op = "matmul_mma";
    expect_product(op, (g.m, g.n, g.k), a.len(), b.len(), c.len())?;
    let (gx, gy) = (g.n.div_ceil(TILE), g.m.div_ceil(TILE));
    if gx > 65535 || gy > 65535 {
        return Err(Error::Shape(format!(
            "{op}: {}×{} needs {gx}×{gy} workgroups, more than 65535 in a dimension",
            g.m, g.n
        )));
    }
    let grid = Grid::workgroups_2d(gx.max(1) as u32, gy.max(1) as u32);
    let (m, n, k) = (g.m as u32, g.n as u32, g.k as u32);
    match T::DTYPE {
        DType::BF16 => {
            let a = Buffer::<bf16>::try_from_view(a.raw_view())?;
            let b = Buffer::<bf16>::try_from_view(b.raw_view())?;
            matmul_mma_bf16::launch(cx, grid, m, n, k, g.ta, g.tb, accumulate, &a, &b, c)
        }
        DType::F16 => {
            let a = Buffer::<f16>::try_from_view(a.raw_view())?;
            let b = Buffer::<f16>::try_from_view(b.raw_view())?;
            matmul_mma_f16::launch(cx, grid, m, n, k, g.ta, g.tb, accumulate, &a, &b, c)
        }
        other => Err(Error::Launch {
            kernel: op,
            reason: format!(
                "inputs of `{}`; the tensor-core product takes `bf16` or `f16`",
                other.name()
            ),
        }),
    }
}
