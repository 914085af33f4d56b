//! Matrix products `C = op(A)·op(B)` of half-precision inputs (`bf16` or `f16`) into `f32`,
//! on the kernel language's warp-level multiply-accumulate `mma_m16n8k16` (the tensor cores
//! on CUDA, the portable form elsewhere: `graphed_lang::kernel::mma`).
//!
//! One workgroup of 256 invocations (eight MMA groups) computes a 128×128 tile of `C`, each
//! group a 64×32 part of it as 4×4 calls of `mma_m16n8k16` per 16 values of `k`. `k` goes in
//! steps of 32: each step stages a 128×32 tile of `op(A)` and a 32×128 tile of `op(B)` in
//! workgroup memory as pairs of 16-bit values packed in `u32` words (the two adjacent-`k`
//! elements a fragment register holds, so a fragment register is one word), loaded from
//! memory into registers one step ahead (their loads overlap the step's products). A step
//! whose tile lies inside the matrices loads without bounds checks; one at an edge loads
//! zeros outside them, so any `m`, `n` and `k` work; only elements inside `C` are written.
//! `op` is the identity or the transpose (`ta`: `A` stored `k × m`; `tb`: `B` stored
//! `n × k`), which covers a layer's forward product (`X·Wᵀ`), its input gradient (`dY·W`)
//! and its weight gradient (`dYᵀ·X`).
//!
//! In workgroup memory, row `r` of a tile (a row of `op(A)`, a column of `op(B)`) is 16
//! words: two blocks of 8 (values `k0 .. k0 + 16`, `k0 + 16 .. k0 + 32`), and in a block the
//! words of `k` pairs `j` and `j + 4` side by side (`2j`, `2j + 1`: a fragment's two words of
//! one row), the two blocks swapped in rows `r` with `(r / 2) % 2 = 1` and the pairs `j`
//! permuted to `j ^ ((r / 4) % 4)`. So the rows an MMA group reads at once fall in distinct
//! banks: its 64-bit reads (a fragment's two words of a row, which NVRTC merges) are
//! conflict-free, as are the stores of a tile stored with `k` inner; those of a transposed
//! one (16 rows of one pair per half-group) meet two to a bank.
//!
//! The words variant ([`MmaTile::T128Words`], `A` and `B` both stored with `k` inner: a
//! layer's forward product) loads its inputs as 32-bit words, two elements a load, and
//! stages them in the *quad layout*: in each 16-row block of a tile and each 16-value half of
//! the step, the four words of an `a` fragment — rows `g`, `g + 8` at pairs `t`, `t + 4` —
//! lie side by side at quad `(4g + t) ^ (4·half)`, as do the two `b` fragments of columns `g`
//! and `g + 8` (`quad_word`); a fragment is then one 16-byte read, in the registers' order.
//! Each group's stores and reads meet every bank once. An operand stored with `k` outer (a
//! layer's gradient products: `A` of `dYᵀ·X`, `B` of `dY·W` and `dYᵀ·X`) is transposed
//! first into a scratch buffer of the step by `matmul_mma_pack_pairs`, whose words are the
//! pairs the words kernel loads; the bits of `C` are those of the other variants.
//!
//! The async variant ([`MmaTile::T128Async`], the words variant's operands) streams its
//! tiles with the kernel language's `copy_async` (`cp.async` on CUDA) through three stages of
//! workgroup memory, two steps in flight and one barrier a step, in workgroups of 128
//! invocations whose four MMA groups compute 64×64 each. A copy moves a *chunk*, 16 bytes of
//! a row: chunk `c` of a step holds the row's values `8c .. 8c + 8`. Row `r` of a tile takes
//! 16 words of the stage from `16r`, its chunk `c` at place `c ^ ((r / 2) % 4)`
//! (`chunk_word`), so the same chunk of any 8 consecutive rows meets each bank once. The
//! fragments come out of the stage with the kernel language's `ldmatrix_x4` (PTX's `ldmatrix`
//! on CUDA), which hands every lane its words of 8 rows' chunks in the registers' order: per
//! 16-value half of a step, one call for each 16-row block of `A` (an `a` fragment) and one
//! for each 16-column block of `B` (two `b` fragments). Each call's 8-row matrices are read
//! without bank conflicts. A step's values go into the products in the same order as in the
//! other 128×128 variants, so its bits are theirs.
//!
//! A product split over `k` ([`MmaTile::SplitK`], the `matmul_mma_split_*` kernels) has
//! layer `z` of its grid sum the range `[z·kc, (z + 1)·kc)` into copy `z` of `C` in a
//! scratch buffer, then adds the copies in order. The variants of [`MmaTile`] are selected by [`matmul_mma`].
//!
//! Each element of `C` is the sum over `k` in steps of 16, in increasing order, of one call's
//! contribution; within a call the order is the target's (see `graphed_lang::kernel::mma`):
//! the host and wgpu agree bitwise, CUDA's tensor cores within the tolerance stated there.

use graphed_macros::{device, kernel};
use graphed_runtime::{
    bf16, f16, BackendKind, Buffer, DType, Element, Error, Grid, Launch, Result,
};

use crate::shape::expect_product;

/// Rows and columns of `C` per workgroup.
pub const TILE: usize = 128;

/// The word of workgroup memory holding `k` pair `w` (`0..16`) of row `r` of a staged tile
/// (see the module docs).
#[device]
fn tile_word(r: u32, w: u32) -> u32 {
    r * 16 + ((w / 8) ^ ((r / 2) % 2)) * 8 + 2 * ((w % 4) ^ ((r / 4) % 4)) + (w % 8) / 4
}

/// This invocation's share (of 256) of a tile's words: its word `q` (of 8) is row
/// `s[0] + s[2]·q`, `k` pair `s[1] + s[3]·q`. Consecutive invocations go along the dimension
/// contiguous in memory: `k` for a matrix stored with `k` inner, rows (16 at a time, two
/// pairs per group) for one stored transposed (`trans`).
#[device]
fn tile_share(trans: bool, tid: u32) -> [u32; 4] {
    let mut s = [0u32; 4];
    if trans {
        s[0] = tid % 16 + 16 * (tid / 32);
        s[1] = (tid / 16) % 2;
        s[3] = 2u32;
    } else {
        s[0] = tid / 16;
        s[1] = tid % 16;
        s[2] = 16u32;
    }
    s
}

/// The word of workgroup memory holding `k` pair `w` (`0..16`) of row `r` of a staged tile
/// in the quad layout of a product of two tiles stored with `k` inner (see the module docs):
/// of `op(A)` (`b` false) or of `op(B)` (`b`: its columns as rows).
#[device]
fn quad_word(b: bool, r: u32, w: u32) -> u32 {
    let g = r % 8;
    let hi = (r % 16) / 8;
    let kh = w / 8;
    let t = w % 4;
    let up = (w % 8) / 4;
    let mut at = up * 2 + hi;
    if b {
        at = hi * 2 + up;
    }
    ((r / 16) * 2 + kh) * 128 + ((g * 4 + t) ^ (4 * kh)) * 4 + at
}

/// `tile_word` (`quad`: `quad_word`, `b` naming the operand).
#[device]
fn layout_word(quad: bool, b: bool, r: u32, w: u32) -> u32 {
    let mut at = tile_word(r, w);
    if quad {
        at = quad_word(b, r, w);
    }
    at
}

/// `tile_share` (`quad`: of a tile stored with `k` inner for the quad layout, whose
/// half-groups take rows `2j` and `2j + 1` of a 16-row block as its rows `j` and `j + 8`,
/// so a group's stores meet no bank twice).
#[device]
fn layout_share(quad: bool, trans: bool, tid: u32) -> [u32; 4] {
    let mut s = tile_share(trans, tid);
    if quad {
        let h = tid / 16;
        s[0] = (h / 2) % 8 + (h % 2) * 8;
    }
    s
}

/// Where invocation `g`, `t` of the MMA group at rows `wr`, columns `wc` of the tile finds
/// its fragments: `[fa, fa8, fb, fb1, blk0, blk1, d]`, the `a` fragment of the step's half
/// `h` for rows `wr + 16i ..` at `fa + blk_h + 256·i` (row `g + 8` at `fa8 + …`, pairs
/// `t + 4` `d` words on), the `b` fragment for columns `wc + 8j ..` at `fb + blk_h` (`j` 0),
/// `fb1 + blk_h` (1), and 256 on for `j` 2 and 3. In `tile_word`'s layout row `g` of a block
/// has pair `t` at `t ^ ((r / 4) % 4)` (`q4` for row `g` and even 8-column blocks, `q4 + 2`
/// for row `g + 8` and odd ones) and the step's halves are blocks `sw`, `1 ^ sw`; in the quad
/// layout an `a` fragment is 4 words in a row, two `b` fragments too.
#[device]
fn frag_starts(quad: bool, wr: u32, wc: u32, g: u32, t: u32) -> [u32; 7] {
    let mut f = [0u32; 7];
    if quad {
        f[0] = wr * 16;
        f[1] = wr * 16 + 1;
        f[2] = wc * 16;
        f[3] = wc * 16 + 2;
        f[4] = (g * 4 + t) * 4;
        f[5] = 128 + ((g * 4 + t) ^ 4) * 4;
        f[6] = 2u32;
    } else {
        let sw = (g / 2) % 2;
        let q4 = g / 4;
        f[0] = (wr + g) * 16 + 2 * (t ^ q4);
        f[1] = (wr + g + 8) * 16 + 2 * (t ^ (q4 + 2));
        f[2] = (wc + g) * 16 + 2 * (t ^ q4);
        f[3] = (wc + 8 + g) * 16 + 2 * (t ^ (q4 + 2));
        f[4] = sw * 8;
        f[5] = (1 ^ sw) * 8;
        f[6] = 1u32;
    }
    f
}

/// The word of workgroup memory for word `q` of invocation `tid`'s share of a tile
/// (`tile_word` of `tile_share`'s row `sh[0] + sh[2]·q`, pair `sh[1] + sh[3]·q`), `w0` being
/// that of word 0: rows 16 apart have the same swizzle, so along `k` (not `trans`) it is
/// `w0 + 256·q`. Word 0 lies in the first 16 rows, so `w0 < 256`; saying so (`w0 & 255`, the
/// same value) lets the CUDA compiler prove that `w0 + 256·q` does not wrap, and address the
/// eight stores from one register with constant offsets: without it NVRTC held eight
/// addresses a tile in registers and spilled the words kernel (48 bytes a thread at 128
/// registers; none with it).
#[device]
fn store_word(trans: bool, tid: u32, w0: u32, q: u32) -> u32 {
    let mut w = (w0 & 255u32) + 256 * q;
    if trans {
        let sh = tile_share(true, tid);
        w = tile_word(sh[0], sh[1] + sh[3] * q);
    }
    w
}

/// Where the words of `tile_share`'s share `sh` lie in a `rows × k` matrix stored row-major
/// (`trans`: `k × rows`) for a tile at row `r0`: `[s, q, kx]`, word `j` of the tile at `k0`
/// starting at element `s + k0·kx + j·q`, its high half `kx` after it. Computed once, so a
/// step's loads cost one multiply-add each.
#[device]
fn load_at(trans: bool, sh: [u32; 4], r0: u32, rows: u32, k: u32) -> [u32; 3] {
    let mut at = [0u32; 3];
    if trans {
        at[0] = 2 * sh[1] * rows + r0 + sh[0];
        at[1] = 2 * sh[3] * rows;
        at[2] = rows;
    } else {
        at[0] = (r0 + sh[0]) * k + 2 * sh[1];
        at[1] = sh[2] * k;
        at[2] = 1u32;
    }
    at
}

/// Stores `acc` (an `mma_m16n8k16` accumulator of the 16×8 block at `row`, `col` of `C`, the
/// invocation's `g`, `t`) into the `m × n` matrix at `base` of `c`, elements outside `C`
/// dropped.
#[allow(clippy::too_many_arguments)]
#[device]
fn store_block(
    c: &mut [f32],
    base: u32,
    acc: [f32; 4],
    row: u32,
    col: u32,
    m: u32,
    n: u32,
    accumulate: bool,
) {
    for e in 0..4u32 {
        let r = row + 8 * (e / 2);
        let cc = col + e % 2;
        if r < m && cc < n {
            if accumulate {
                c[base + r * n + cc] += acc[e];
            } else {
                c[base + r * n + cc] = acc[e];
            }
        }
    }
}

/// A tile's load helper `$name` over inputs bound as `&[$in]` (see `load_bf16`): the checked
/// path, shared by every binding, takes its share from `$share` and reads the bits of element
/// `$e` as `$read`; the unchecked one is `$fast`, which fills `v` from `at0` (the step's start)
/// and `at`.
macro_rules! tile_load {
    (
        $(#[$doc:meta])* $name:ident, $in:ident, { $($share:tt)* },
        |$e:ident| { $($read:tt)* }, { $($fast:tt)* }
    ) => {
        $(#[$doc])*
        #[allow(dead_code, clippy::too_many_arguments)]
        #[device]
        fn $name(
            x: &[$in],
            trans: bool,
            tid: u32,
            r0: u32,
            k0: u32,
            rows: u32,
            k: u32,
            kend: u32,
            checked: bool,
            at: [u32; 3],
        ) -> [u32; 8] {
            let mut v = [0u32; 8];
            if checked {
                let sh = $($share)*;
                for q in 0..8u32 {
                    let r = r0 + sh[0] + sh[2] * q;
                    let kk = k0 + 2 * (sh[1] + sh[3] * q);
                    let mut lo = 0u32;
                    let mut hi = 0u32;
                    if r < rows && kk < kend {
                        if trans {
                            let $e = kk * rows + r;
                            lo = $($read)*;
                        } else {
                            let $e = r * k + kk;
                            lo = $($read)*;
                        }
                    }
                    if r < rows && kk + 1 < kend {
                        if trans {
                            let $e = (kk + 1) * rows + r;
                            hi = $($read)*;
                        } else {
                            let $e = r * k + kk + 1;
                            hi = $($read)*;
                        }
                    }
                    v[q] = lo | (hi << 16u32);
                }
            } else {
                let at0 = at[0] + k0 * at[2];
                $($fast)*
            }
            v
        }
    };
}

/// The fragments of `mma_m16n8k16` over inputs of type `$t` read from staged tiles in a
/// workgroup array of `$words` words (`$frag_a`, `$frag_b`).
macro_rules! frag_helpers {
    ($t:ident, $frag_a:ident, $frag_b:ident, $words:literal) => {
        /// The `a` fragment of `mma_m16n8k16` whose row `g`, `k` pair `t` is word `p` of `s`
        /// and row `g + 8`, pair `t` word `p8` (`k` pairs `t + 4` the words `d` after them).
        #[allow(dead_code)]
        #[device]
        fn $frag_a(s: &[u32; $words], p: u32, p8: u32, d: u32) -> [$t; 8] {
            let mut f = [0.0f32 as $t; 8];
            let w0 = s[p];
            let w1 = s[p8];
            let w2 = s[p + d];
            let w3 = s[p8 + d];
            f[0] = $t::from_bits(w0);
            f[1] = $t::from_bits(w0 >> 16u32);
            f[2] = $t::from_bits(w1);
            f[3] = $t::from_bits(w1 >> 16u32);
            f[4] = $t::from_bits(w2);
            f[5] = $t::from_bits(w2 >> 16u32);
            f[6] = $t::from_bits(w3);
            f[7] = $t::from_bits(w3 >> 16u32);
            f
        }

        /// The `b` fragment of `mma_m16n8k16` whose column `g`, `k` pair `t` is word `p` of
        /// `s` (`k` pair `t + 4` the next word).
        #[allow(dead_code)]
        #[device]
        fn $frag_b(s: &[u32; $words], p: u32) -> [$t; 4] {
            let mut f = [0.0f32 as $t; 4];
            let w0 = s[p];
            let w1 = s[p + 1];
            f[0] = $t::from_bits(w0);
            f[1] = $t::from_bits(w0 >> 16u32);
            f[2] = $t::from_bits(w1);
            f[3] = $t::from_bits(w1 >> 16u32);
            f
        }
    };
}

/// The product's helpers over inputs of type `$t`: a tile's loads (`$load`) and the
/// fragments of `mma_m16n8k16` read from staged tiles (`$frag_a`, `$frag_b`).
macro_rules! matmul_mma_helpers {
    ($t:ident, $load:ident, $frag_a:ident, $frag_b:ident) => {
        tile_load!(
            /// This invocation's 8 words (pairs of adjacent-`k` elements, the lower `k` in the
            /// low half) of the 128 × 32 tile at row `r0`, `k` `k0` of a `rows × k` matrix `x`
            /// stored row-major (`trans`: `x` holds its transpose, `k × rows`), by the share of
            /// invocation `tid` (`tile_share`). `checked`: elements outside the matrix, or at
            /// `k ≥ kend`, are zero (else the tile is known to lie inside both, and its
            /// elements are read at `at`: `load_at`'s start, step between words and step
            /// between `k`).
            $load,
            $t,
            { tile_share(trans, tid) },
            |e| { x[e].to_bits() },
            {
                for q in 0..8u32 {
                    let i = at0 + at[1] * q;
                    v[q] = x[i].to_bits() | (x[i + at[2]].to_bits() << 16u32);
                }
            }
        );

        frag_helpers!($t, $frag_a, $frag_b, 2048);
    };
}

/// The product kernel over inputs of type `$t` (fragments from `matmul_mma_helpers!`) bound
/// as slices of `$in` (`$t` itself, or `u32`: the inputs' words) and read by `$load`, with
/// `#[kernel]` arguments `$($kargs)*`; `$lean`: the tile stores' words are recomputed each
/// step rather than kept in registers; `$split`: layer `z` of the grid sums the `k` range
/// `[z·kc, (z + 1)·kc)` into copy `z` of `C` (else every workgroup sums all of `k`, `kc`
/// unread); `$layout`: the parameters `ta: bool, tb: bool,`, or none and `$fixed` binding
/// them as constants; `$quad`: the tiles in the quad layout (`quad_word`; only for `ta`
/// false and `tb` true, both tiles stored with `k` inner), else in `tile_word`'s.
macro_rules! matmul_mma_kernel {
    (
        $(#[$doc:meta])* $name:ident, $t:ident, $in:ident, $load:ident, $frag_a:ident,
        $frag_b:ident, [$($kargs:tt)*], $lean:literal, $split:literal,
        [$($layout:tt)*] { $($fixed:tt)* }, $quad:literal
    ) => {
        $(#[$doc])*
        #[kernel($($kargs)*)]
        pub fn $name(
            m: u32,
            n: u32,
            k: u32,
            kc: u32,
            $($layout)*
            accumulate: bool,
            a: &[$in],
            b: &[$in],
            c: &mut [f32],
        ) {
            // `sa`: rows of the tile of `op(A)`; `sb`: columns of the tile of `op(B)`; each
            // 128 rows of 16 words (`tile_word`).
            let sa = shared::<u32, 2048>();
            let sb = shared::<u32, 2048>();
            $($fixed)*
            let tid = local_id().x;
            let lane = tid % 32;
            let g = lane / 4;
            let t = lane % 4;
            // This group's 64×32 part of the tile.
            let wr = (tid / 32) / 4 * 64;
            let wc = (tid / 32) % 4 * 32;
            let row0 = workgroup_id().y * 128;
            let col0 = workgroup_id().x * 128;
            // Whether the tile's rows and columns lie inside `C` (uniform).
            let inside = row0 + 128 <= m && col0 + 128 <= n;
            // This invocation's shares of the two tile loads: op(B)'s columns are B's rows
            // when `tb`, so its share is that of a matrix transposed when not.
            let sha = layout_share($quad, ta, tid);
            let shb = layout_share($quad, !tb, tid);
            // The words it stores: pair `sh[1] + sh[3]·q` of row `sh[0] + sh[2]·q`.
            let mut pa = [0u32; 8];
            let mut pb = [0u32; 8];
            for q in 0..8u32 {
                pa[q] = layout_word($quad, false, sha[0] + sha[2] * q, sha[1] + sha[3] * q);
                pb[q] = layout_word($quad, true, shb[0] + shb[2] * q, shb[1] + shb[3] * q);
            }
            // Where its fragments start (`frag_starts`).
            let fr = frag_starts($quad, wr, wc, g, t);
            let fa_at = fr[0];
            let fa8_at = fr[1];
            let fb_at = fr[2];
            let fb1_at = fr[3];
            let d = fr[6];
            // `acc_ij`: rows `wr + 16i ..`, columns `wc + 8j ..` of the tile.
            let mut acc00 = [0.0f32; 4];
            let mut acc01 = [0.0f32; 4];
            let mut acc02 = [0.0f32; 4];
            let mut acc03 = [0.0f32; 4];
            let mut acc10 = [0.0f32; 4];
            let mut acc11 = [0.0f32; 4];
            let mut acc12 = [0.0f32; 4];
            let mut acc13 = [0.0f32; 4];
            let mut acc20 = [0.0f32; 4];
            let mut acc21 = [0.0f32; 4];
            let mut acc22 = [0.0f32; 4];
            let mut acc23 = [0.0f32; 4];
            let mut acc30 = [0.0f32; 4];
            let mut acc31 = [0.0f32; 4];
            let mut acc32 = [0.0f32; 4];
            let mut acc33 = [0.0f32; 4];
            // This workgroup's range of `k`: `[kb, ke)`, part `z` of `⌈k / kc⌉` (one part,
            // `kc = k`, but for a split product), written to `C`'s copy `z` in `c`.
            // Only the split kernels read `kc` and `z`: in the others the range is a constant
            // `[0, k)`, which keeps their registers as they were.
            let mut kb = 0u32;
            let mut ke = k;
            let mut base = 0u32;
            if $split {
                let z = workgroup_id().z;
                kb = z * kc;
                ke = kb + kc;
                if ke > k {
                    ke = k;
                }
                base = z * m * n;
            }
            let tiles = (ke - kb + 31) / 32;
            // The first step's words; each step then loads the next one's before its products.
            let first = !(inside && kb + 32 <= ke);
            let ata = load_at(ta, sha, row0, m, k);
            let atb = load_at(!tb, shb, col0, n, k);
            let ra0 = $load(a, ta, tid, row0, kb, m, k, ke, first, ata);
            let rb0 = $load(b, !tb, tid, col0, kb, n, k, ke, first, atb);
            let mut ra = [0u32; 8];
            let mut rb = [0u32; 8];
            for q in 0..8u32 {
                ra[q] = ra0[q];
                rb[q] = rb0[q];
            }
            // The first step's words.
            store_tiles(sa, sb, ra, rb, pa, pb, $lean, ta, tb, tid);
            barrier();
            // The steps in two runs, written out as two copies of the loop (indexing
            // `edges` makes the front end unroll `run`; its bounds come from `run` itself,
            // which is uniform, where an array's element is not): the steps before `e0`
            // load their successor from inside both matrices, unchecked; the rest check what
            // they load where it is not. The interior's copy thus holds no checked loads,
            // whose registers made the compiler spill inside the loop.
            let mut e0 = 0u32;
            if inside && (ke - kb) / 32 > 1 {
                e0 = (ke - kb) / 32 - 1;
            }
            let edges = [false, true];
            let mut s0 = 0u32;
            for run in 0..2u32 {
                let mut s1 = e0;
                if run == 1 {
                    s1 = tiles;
                }
                for step in s0..s1 {
                    if step + 1 < tiles {
                        let k1 = kb + (step + 1) * 32;
                        let checked = edges[run] && !(inside && k1 + 32 <= ke);
                        let na = $load(a, ta, tid, row0, k1, m, k, ke, checked, ata);
                        let nb = $load(b, !tb, tid, col0, k1, n, k, ke, checked, atb);
                        for q in 0..8u32 {
                            ra[q] = na[q];
                            rb[q] = nb[q];
                        }
                    }
                    // The two 16-value halves of the step (`frag_starts`). Indexing the array
                    // `blks` makes the front end write the
                    // loop out as two copies (a loop left to NVRTC stays a loop: 16 products a
                    // trip), so the compiler may read the second half's fragments during the
                    // first's products.
                    let blks = [fr[4], fr[5]];
                    for half in 0..2u32 {
                        let blk = blks[half];
                        let fa0 = $frag_a(sa, fa_at + blk, fa8_at + blk, d);
                        let fa1 = $frag_a(sa, fa_at + blk + 256, fa8_at + blk + 256, d);
                        let fa2 = $frag_a(sa, fa_at + blk + 512, fa8_at + blk + 512, d);
                        let fa3 = $frag_a(sa, fa_at + blk + 768, fa8_at + blk + 768, d);
                        let fb0 = $frag_b(sb, fb_at + blk);
                        let fb1 = $frag_b(sb, fb1_at + blk);
                        let fb2 = $frag_b(sb, fb_at + blk + 256);
                        let fb3 = $frag_b(sb, fb1_at + blk + 256);
                        mma_m16n8k16(&fa0, &fb0, &mut acc00);
                        mma_m16n8k16(&fa0, &fb1, &mut acc01);
                        mma_m16n8k16(&fa0, &fb2, &mut acc02);
                        mma_m16n8k16(&fa0, &fb3, &mut acc03);
                        mma_m16n8k16(&fa1, &fb0, &mut acc10);
                        mma_m16n8k16(&fa1, &fb1, &mut acc11);
                        mma_m16n8k16(&fa1, &fb2, &mut acc12);
                        mma_m16n8k16(&fa1, &fb3, &mut acc13);
                        mma_m16n8k16(&fa2, &fb0, &mut acc20);
                        mma_m16n8k16(&fa2, &fb1, &mut acc21);
                        mma_m16n8k16(&fa2, &fb2, &mut acc22);
                        mma_m16n8k16(&fa2, &fb3, &mut acc23);
                        mma_m16n8k16(&fa3, &fb0, &mut acc30);
                        mma_m16n8k16(&fa3, &fb1, &mut acc31);
                        mma_m16n8k16(&fa3, &fb2, &mut acc32);
                        mma_m16n8k16(&fa3, &fb3, &mut acc33);
                    }
                    if step + 1 < tiles {
                        // Every group has read this step's tiles before they are overwritten.
                        barrier();
                        store_tiles(sa, sb, ra, rb, pa, pb, $lean, ta, tb, tid);
                        barrier();
                    }
                }
                s0 = s1;
            }
            let r = row0 + wr + g;
            let cl = col0 + wc + 2 * t;
            store_block(c, base, acc00, r, cl, m, n, accumulate);
            store_block(c, base, acc01, r, cl + 8, m, n, accumulate);
            store_block(c, base, acc02, r, cl + 16, m, n, accumulate);
            store_block(c, base, acc03, r, cl + 24, m, n, accumulate);
            store_block(c, base, acc10, r + 16, cl, m, n, accumulate);
            store_block(c, base, acc11, r + 16, cl + 8, m, n, accumulate);
            store_block(c, base, acc12, r + 16, cl + 16, m, n, accumulate);
            store_block(c, base, acc13, r + 16, cl + 24, m, n, accumulate);
            store_block(c, base, acc20, r + 32, cl, m, n, accumulate);
            store_block(c, base, acc21, r + 32, cl + 8, m, n, accumulate);
            store_block(c, base, acc22, r + 32, cl + 16, m, n, accumulate);
            store_block(c, base, acc23, r + 32, cl + 24, m, n, accumulate);
            store_block(c, base, acc30, r + 48, cl, m, n, accumulate);
            store_block(c, base, acc31, r + 48, cl + 8, m, n, accumulate);
            store_block(c, base, acc32, r + 48, cl + 16, m, n, accumulate);
            store_block(c, base, acc33, r + 48, cl + 24, m, n, accumulate);
        }
    };
}

/// One variant of the product (`matmul_mma_kernel!`'s `[$kargs]`, `$lean` and `$split`) of
/// `bf16` inputs (`$bf16`) and of `f16` inputs (`$f16`), bound as elements, or (`words_nt`)
/// as their words with `A` stored `m × k` and `B` stored `n × k`.
macro_rules! matmul_mma_kernels {
    (
        elements, $(#[$bdoc:meta])* $bf16:ident, $(#[$fdoc:meta])* $f16:ident,
        [$($kargs:tt)*], $lean:literal, $split:literal
    ) => {
        matmul_mma_kernel!(
            $(#[$bdoc])* $bf16, bf16, bf16, load_bf16, frag_a_bf16, frag_b_bf16,
            [$($kargs)*], $lean, $split, [ta: bool, tb: bool,] {}, false
        );
        matmul_mma_kernel!(
            $(#[$fdoc])* $f16, f16, f16, load_f16, frag_a_f16, frag_b_f16,
            [$($kargs)*], $lean, $split, [ta: bool, tb: bool,] {}, false
        );
    };
    (
        words_nt, $(#[$bdoc:meta])* $bf16:ident, $(#[$fdoc:meta])* $f16:ident,
        [$($kargs:tt)*], $lean:literal, $split:literal
    ) => {
        matmul_mma_kernel!(
            $(#[$bdoc])* $bf16, bf16, u32, load_words, frag_a_bf16, frag_b_bf16,
            [$($kargs)*], $lean, $split, [] { let ta = false; let tb = true; }, true
        );
        matmul_mma_kernel!(
            $(#[$fdoc])* $f16, f16, u32, load_words, frag_a_f16, frag_b_f16,
            [$($kargs)*], $lean, $split, [] { let ta = false; let tb = true; }, true
        );
    };
}

/// The bits of element `e` of 16-bit values stored as words `x` (element `2i` the low half
/// of word `i`, `2i + 1` its high half).
#[device]
fn half_bits(x: &[u32], e: u32) -> u32 {
    (x[e / 2] >> ((e % 2) * 16)) & 0xffffu32
}

tile_load!(
    /// `load_bf16` / `load_f16` of inputs bound as their words (`x` holds element `2i` in
    /// the low half of word `i`), by `layout_share`'s share for the quad layout. A tile stored
    /// with `k` inner (not `trans`) and inside the matrix (not `checked`) loads each of its
    /// words as one word of `x`, which needs its pairs to start at even elements: `k` even (the
    /// caller's rule). Otherwise each element is read from its word.
    load_words,
    u32,
    { layout_share(true, trans, tid) },
    |e| { half_bits(x, e) },
    {
        if trans {
            for q in 0..8u32 {
                let i = at0 + at[1] * q;
                v[q] = half_bits(x, i) | (half_bits(x, i + at[2]) << 16u32);
            }
        } else {
            // In words: the start halved once, the step between words `at[1] / 2`.
            let w0 = at0 / 2;
            let dw = at[1] / 2;
            for q in 0..8u32 {
                v[q] = x[w0 + dw * q];
            }
        }
    }
);

/// Stages a step's words `ra`, `rb` (of `op(A)`'s and `op(B)`'s tiles) in the workgroup
/// arrays `sa`, `sb`: at `pa[q]`, `pb[q]`, or with `lean` at `store_word`'s places (the
/// same), recomputed.
#[allow(clippy::too_many_arguments)]
#[device]
fn store_tiles(
    sa: &mut [u32; 2048],
    sb: &mut [u32; 2048],
    ra: [u32; 8],
    rb: [u32; 8],
    pa: [u32; 8],
    pb: [u32; 8],
    lean: bool,
    ta: bool,
    tb: bool,
    tid: u32,
) {
    for q in 0..8u32 {
        if lean {
            sa[store_word(ta, tid, pa[0], q)] = ra[q];
            sb[store_word(!tb, tid, pb[0], q)] = rb[q];
        } else {
            sa[pa[q]] = ra[q];
            sb[pb[q]] = rb[q];
        }
    }
}

matmul_mma_helpers!(bf16, load_bf16, frag_a_bf16, frag_b_bf16);
matmul_mma_helpers!(f16, load_f16, frag_a_f16, frag_b_f16);

matmul_mma_kernels!(
    elements,
    /// `C = op(A)·op(B)` (plus `C` when `accumulate`) of `bf16` inputs on 128×128 tiles of
    /// `mma_m16n8k16` (see the module docs); a grid of `⌈n/128⌉ × ⌈m/128⌉ × ⌈k/kc⌉`
    /// workgroups.
    matmul_mma_bf16,
    /// [`matmul_mma_bf16`](mod@matmul_mma_bf16) of `f16` inputs.
    matmul_mma_f16,
    [workgroup = 256],
    false,
    false
);
matmul_mma_kernels!(
    elements,
    /// [`matmul_mma_bf16`](mod@matmul_mma_bf16) with its CUDA form bounded to two workgroups
    /// per multiprocessor (`__launch_bounds__(256, 2)`: at most 128 registers per invocation,
    /// what does not fit spilled); the same results on every backend. [`MmaTile::T128Occ2`].
    matmul_mma_occ2_bf16,
    /// [`matmul_mma_occ2_bf16`](mod@matmul_mma_occ2_bf16) of `f16` inputs.
    matmul_mma_occ2_f16,
    [workgroup = 256, min_workgroups = 2],
    false,
    false
);

matmul_mma_kernels!(
    elements,
    /// [`matmul_mma_occ2_bf16`](mod@matmul_mma_occ2_bf16) with the tile stores' words
    /// recomputed each step instead of held in 16 registers; the same results on every
    /// backend. [`MmaTile::T128Lean`].
    matmul_mma_lean_bf16,
    /// [`matmul_mma_lean_bf16`](mod@matmul_mma_lean_bf16) of `f16` inputs.
    matmul_mma_lean_f16,
    [workgroup = 256, min_workgroups = 2],
    true,
    false
);

matmul_mma_kernels!(
    words_nt,
    /// [`matmul_mma_lean_bf16`](mod@matmul_mma_lean_bf16) of `A` stored `m × k` and `B`
    /// stored `n × k` (`ta = false`, `tb = true`, a layer's forward product `X·Wᵀ`), read as
    /// words: `a`, `b` are the inputs' `Buffer::words`, and `k` is even, so a tile's loads
    /// take two elements each; the same results on every backend. [`MmaTile::T128Words`].
    matmul_mma_words_bf16,
    /// [`matmul_mma_words_bf16`](mod@matmul_mma_words_bf16) of `f16` inputs.
    matmul_mma_words_f16,
    [workgroup = 256, min_workgroups = 2],
    true,
    false
);

/// The word of a stage of [`MmaTile::T128Async`]'s workgroup memory where chunk `c` (`0..4`:
/// words `4c .. 4c + 4`, values `8c .. 8c + 8` of the step) of row `r` of a tile lands: row
/// `r`'s 16 words from `16r` (rows `2j` and `2j + 1` share the 32 banks of line `j`), its
/// chunks permuted to `c ^ ((r / 2) % 4)`, so any 8 consecutive rows' chunk `c` — what one
/// matrix of `ldmatrix_x4` reads — fall in distinct banks (see the module docs).
#[device]
fn chunk_word(r: u32, c: u32) -> u32 {
    r * 16 + 4 * (c ^ ((r / 2) % 4))
}

/// The `mma_m16n8k16` fragments over inputs of type `$t` held by words that `ldmatrix_x4`
/// gave (`$frag_a`: the `a` fragment of four words; `$frag_b`: a `b` fragment of two; the
/// element `2i` the low half of word `i`).
macro_rules! word_frags {
    ($t:ident, $frag_a:ident, $frag_b:ident) => {
        /// The `a` fragment held by `ldmatrix_x4`'s four words `w`.
        #[allow(dead_code)]
        #[device]
        fn $frag_a(w: [u32; 4]) -> [$t; 8] {
            let mut f = [0.0f32 as $t; 8];
            f[0] = $t::from_bits(w[0]);
            f[1] = $t::from_bits(w[0] >> 16u32);
            f[2] = $t::from_bits(w[1]);
            f[3] = $t::from_bits(w[1] >> 16u32);
            f[4] = $t::from_bits(w[2]);
            f[5] = $t::from_bits(w[2] >> 16u32);
            f[6] = $t::from_bits(w[3]);
            f[7] = $t::from_bits(w[3] >> 16u32);
            f
        }

        /// The `b` fragment held by the words `w0`, `w1`.
        #[allow(dead_code)]
        #[device]
        fn $frag_b(w0: u32, w1: u32) -> [$t; 4] {
            let mut f = [0.0f32 as $t; 4];
            f[0] = $t::from_bits(w0);
            f[1] = $t::from_bits(w0 >> 16u32);
            f[2] = $t::from_bits(w1);
            f[3] = $t::from_bits(w1 >> 16u32);
            f
        }
    };
}

/// Issues invocation `tid`'s chunks of step `s` of [`MmaTile::T128Async`] into stage `s % 3`:
/// chunk `cc` of rows `r + 32q` (`q` in `0..4`; `ar = row0 + r`, `br = col0 + r` in `A`, `B`)
/// of each tile, at words `dst + 512q` of the stage, from words `sa0`, `sb0` of the rows
/// (`32q` rows on) plus 16 a step; a chunk past `k`, or of a row outside the matrix, copies
/// what lies inside (zeros for the rest).
#[allow(clippy::too_many_arguments)]
#[device]
fn issue_step(
    sa: &mut [u32; 6144],
    sb: &mut [u32; 6144],
    a: &[u32],
    b: &[u32],
    s: u32,
    dst: u32,
    sa0: u32,
    sb0: u32,
    kw: u32,
    cc: u32,
    ar: u32,
    br: u32,
    m: u32,
    n: u32,
) {
    let kq = s * 16 + 4 * cc;
    let mut left = 0u32;
    if kq < kw {
        left = kw - kq;
    }
    let st = (s % 3) * 2048 + dst;
    let ka = sa0 + s * 16;
    let kb = sb0 + s * 16;
    copy_async(sa, st, a, ka, if ar < m { left } else { 0 });
    copy_async(
        sa,
        st + 512,
        a,
        ka + 32 * kw,
        if ar + 32 < m { left } else { 0 },
    );
    copy_async(
        sa,
        st + 1024,
        a,
        ka + 64 * kw,
        if ar + 64 < m { left } else { 0 },
    );
    copy_async(
        sa,
        st + 1536,
        a,
        ka + 96 * kw,
        if ar + 96 < m { left } else { 0 },
    );
    copy_async(sb, st, b, kb, if br < n { left } else { 0 });
    copy_async(
        sb,
        st + 512,
        b,
        kb + 32 * kw,
        if br + 32 < n { left } else { 0 },
    );
    copy_async(
        sb,
        st + 1024,
        b,
        kb + 64 * kw,
        if br + 64 < n { left } else { 0 },
    );
    copy_async(
        sb,
        st + 1536,
        b,
        kb + 96 * kw,
        if br + 96 < n { left } else { 0 },
    );
}

/// The async product kernel over inputs of type `$t` bound as their words (fragments
/// `$frag_a`, `$frag_b` over three stages of 2048 words), `A` stored `m × k` and `B` `n × k`:
/// 4 MMA groups of 64×64.
macro_rules! matmul_mma_async_kernel {
    ($(#[$doc:meta])* $name:ident, $t:ident, $frag_a:ident, $frag_b:ident) => {
        $(#[$doc])*
        #[kernel(workgroup = 128, min_workgroups = 2)]
        pub fn $name(
            m: u32,
            n: u32,
            k: u32,
            accumulate: bool,
            a: &[u32],
            b: &[u32],
            c: &mut [f32],
        ) {
            // Three stages of each tile (stage `s` at word `2048·s`), each 128 rows of 16
            // words in `chunk_word`'s layout.
            let sa = shared::<u32, 6144>();
            let sb = shared::<u32, 6144>();
            let tid = local_id().x;
            let lane = tid % 32;
            let g = lane / 4;
            let t = lane % 4;
            // This group's 64×64 part of the tile.
            let wr = (tid / 32) / 2 * 64;
            let wc = (tid / 32) % 2 * 64;
            let row0 = workgroup_id().y * 128;
            let col0 = workgroup_id().x * 128;
            // Words per row of `A` and `B`, and steps of 32 values.
            let kw = k / 2;
            let tiles = (k + 31) / 32;
            // This invocation's chunks of a step: chunk `cc` of rows `cr + 32q` (`q` in
            // `0..4`) of each tile, at words `dst + 512q` of a stage, read from the rows'
            // words `sa0`, `sb0` (`32q` rows on) plus 16 a step; a row outside the
            // matrix copies nothing (zeros).
            let cr = tid / 4;
            let cc = tid % 4;
            let dst = chunk_word(cr, cc);
            let sa0 = (row0 + cr) * kw + 4 * cc;
            let sb0 = (col0 + cr) * kw + 4 * cc;
            // The rows this invocation names to `ldmatrix_x4`: lane `8j + r` names row
            // `r + 8·(j % 2)` of a 16-row block of `A`'s tile, at chunk `2h + j / 2` for
            // half `h` of the step, and row (column of `B`) `r + 8·(j / 2)` of a 16-column
            // block of `B`'s, at chunk `2h + j % 2`; `chunk_word` permutes the chunk by
            // `(r / 2) % 4` (a block starts at a multiple of 16 rows, which keeps it).
            let lj = lane / 8;
            let lr = lane % 8;
            let perm = (lr / 2) % 4;
            let ra = (wr + lr + 8 * (lj % 2)) * 16;
            let rb = (wc + lr + 8 * (lj / 2)) * 16;
            // `acc_ij`: rows `wr + 16i ..`, columns `wc + 8j ..` of the tile.
            let mut acc00 = [0.0f32; 4];
            let mut acc01 = [0.0f32; 4];
            let mut acc02 = [0.0f32; 4];
            let mut acc03 = [0.0f32; 4];
            let mut acc04 = [0.0f32; 4];
            let mut acc05 = [0.0f32; 4];
            let mut acc06 = [0.0f32; 4];
            let mut acc07 = [0.0f32; 4];
            let mut acc10 = [0.0f32; 4];
            let mut acc11 = [0.0f32; 4];
            let mut acc12 = [0.0f32; 4];
            let mut acc13 = [0.0f32; 4];
            let mut acc14 = [0.0f32; 4];
            let mut acc15 = [0.0f32; 4];
            let mut acc16 = [0.0f32; 4];
            let mut acc17 = [0.0f32; 4];
            let mut acc20 = [0.0f32; 4];
            let mut acc21 = [0.0f32; 4];
            let mut acc22 = [0.0f32; 4];
            let mut acc23 = [0.0f32; 4];
            let mut acc24 = [0.0f32; 4];
            let mut acc25 = [0.0f32; 4];
            let mut acc26 = [0.0f32; 4];
            let mut acc27 = [0.0f32; 4];
            let mut acc30 = [0.0f32; 4];
            let mut acc31 = [0.0f32; 4];
            let mut acc32 = [0.0f32; 4];
            let mut acc33 = [0.0f32; 4];
            let mut acc34 = [0.0f32; 4];
            let mut acc35 = [0.0f32; 4];
            let mut acc36 = [0.0f32; 4];
            let mut acc37 = [0.0f32; 4];
            // The first two steps in flight (an empty group where there is one step).
            for pre in 0..2u32 {
                if pre < tiles {
                    issue_step(sa, sb, a, b, pre, dst, sa0, sb0, kw, cc, row0 + cr, col0 + cr, m, n);
                }
                copy_async_commit();
            }
            for step in 0..tiles {
                // Step `step`'s tiles have landed, for every invocation after the barrier,
                // and every group is done with step − 1's stage, which step + 2 takes.
                copy_async_wait(1);
                barrier();
                let next = step + 2;
                if next < tiles {
                    issue_step(sa, sb, a, b, next, dst, sa0, sb0, kw, cc, row0 + cr, col0 + cr, m, n);
                }
                copy_async_commit();
                let s0 = (step % 3) * 2048;
                // The two 16-value halves of the step: four `ldmatrix_x4` for the `a`
                // fragments of the group's 64 rows, four for the `b` fragments of its 64
                // columns (two each), in the registers' order.
                for half in 0..2u32 {
                    let pa = s0 + ra + 4 * ((2 * half + lj / 2) ^ perm);
                    let pb = s0 + rb + 4 * ((2 * half + lj % 2) ^ perm);
                    let mut wa0 = [0u32; 4];
                    let mut wa1 = [0u32; 4];
                    let mut wa2 = [0u32; 4];
                    let mut wa3 = [0u32; 4];
                    let mut wb0 = [0u32; 4];
                    let mut wb1 = [0u32; 4];
                    let mut wb2 = [0u32; 4];
                    let mut wb3 = [0u32; 4];
                    ldmatrix_x4(sa, pa, &mut wa0);
                    ldmatrix_x4(sa, pa + 256, &mut wa1);
                    ldmatrix_x4(sa, pa + 512, &mut wa2);
                    ldmatrix_x4(sa, pa + 768, &mut wa3);
                    ldmatrix_x4(sb, pb, &mut wb0);
                    ldmatrix_x4(sb, pb + 256, &mut wb1);
                    ldmatrix_x4(sb, pb + 512, &mut wb2);
                    ldmatrix_x4(sb, pb + 768, &mut wb3);
                    let fa0 = $frag_a(wa0);
                    let fa1 = $frag_a(wa1);
                    let fa2 = $frag_a(wa2);
                    let fa3 = $frag_a(wa3);
                    let fb0 = $frag_b(wb0[0], wb0[1]);
                    let fb1 = $frag_b(wb0[2], wb0[3]);
                    let fb2 = $frag_b(wb1[0], wb1[1]);
                    let fb3 = $frag_b(wb1[2], wb1[3]);
                    let fb4 = $frag_b(wb2[0], wb2[1]);
                    let fb5 = $frag_b(wb2[2], wb2[3]);
                    let fb6 = $frag_b(wb3[0], wb3[1]);
                    let fb7 = $frag_b(wb3[2], wb3[3]);
                    mma_m16n8k16(&fa0, &fb0, &mut acc00);
                    mma_m16n8k16(&fa0, &fb1, &mut acc01);
                    mma_m16n8k16(&fa0, &fb2, &mut acc02);
                    mma_m16n8k16(&fa0, &fb3, &mut acc03);
                    mma_m16n8k16(&fa0, &fb4, &mut acc04);
                    mma_m16n8k16(&fa0, &fb5, &mut acc05);
                    mma_m16n8k16(&fa0, &fb6, &mut acc06);
                    mma_m16n8k16(&fa0, &fb7, &mut acc07);
                    mma_m16n8k16(&fa1, &fb0, &mut acc10);
                    mma_m16n8k16(&fa1, &fb1, &mut acc11);
                    mma_m16n8k16(&fa1, &fb2, &mut acc12);
                    mma_m16n8k16(&fa1, &fb3, &mut acc13);
                    mma_m16n8k16(&fa1, &fb4, &mut acc14);
                    mma_m16n8k16(&fa1, &fb5, &mut acc15);
                    mma_m16n8k16(&fa1, &fb6, &mut acc16);
                    mma_m16n8k16(&fa1, &fb7, &mut acc17);
                    mma_m16n8k16(&fa2, &fb0, &mut acc20);
                    mma_m16n8k16(&fa2, &fb1, &mut acc21);
                    mma_m16n8k16(&fa2, &fb2, &mut acc22);
                    mma_m16n8k16(&fa2, &fb3, &mut acc23);
                    mma_m16n8k16(&fa2, &fb4, &mut acc24);
                    mma_m16n8k16(&fa2, &fb5, &mut acc25);
                    mma_m16n8k16(&fa2, &fb6, &mut acc26);
                    mma_m16n8k16(&fa2, &fb7, &mut acc27);
                    mma_m16n8k16(&fa3, &fb0, &mut acc30);
                    mma_m16n8k16(&fa3, &fb1, &mut acc31);
                    mma_m16n8k16(&fa3, &fb2, &mut acc32);
                    mma_m16n8k16(&fa3, &fb3, &mut acc33);
                    mma_m16n8k16(&fa3, &fb4, &mut acc34);
                    mma_m16n8k16(&fa3, &fb5, &mut acc35);
                    mma_m16n8k16(&fa3, &fb6, &mut acc36);
                    mma_m16n8k16(&fa3, &fb7, &mut acc37);
                }
            }
            let r = row0 + wr + g;
            let cl = col0 + wc + 2 * t;
            store_block(c, 0, acc00, r, cl, m, n, accumulate);
            store_block(c, 0, acc01, r, cl + 8, m, n, accumulate);
            store_block(c, 0, acc02, r, cl + 16, m, n, accumulate);
            store_block(c, 0, acc03, r, cl + 24, m, n, accumulate);
            store_block(c, 0, acc04, r, cl + 32, m, n, accumulate);
            store_block(c, 0, acc05, r, cl + 40, m, n, accumulate);
            store_block(c, 0, acc06, r, cl + 48, m, n, accumulate);
            store_block(c, 0, acc07, r, cl + 56, m, n, accumulate);
            store_block(c, 0, acc10, r + 16, cl, m, n, accumulate);
            store_block(c, 0, acc11, r + 16, cl + 8, m, n, accumulate);
            store_block(c, 0, acc12, r + 16, cl + 16, m, n, accumulate);
            store_block(c, 0, acc13, r + 16, cl + 24, m, n, accumulate);
            store_block(c, 0, acc14, r + 16, cl + 32, m, n, accumulate);
            store_block(c, 0, acc15, r + 16, cl + 40, m, n, accumulate);
            store_block(c, 0, acc16, r + 16, cl + 48, m, n, accumulate);
            store_block(c, 0, acc17, r + 16, cl + 56, m, n, accumulate);
            store_block(c, 0, acc20, r + 32, cl, m, n, accumulate);
            store_block(c, 0, acc21, r + 32, cl + 8, m, n, accumulate);
            store_block(c, 0, acc22, r + 32, cl + 16, m, n, accumulate);
            store_block(c, 0, acc23, r + 32, cl + 24, m, n, accumulate);
            store_block(c, 0, acc24, r + 32, cl + 32, m, n, accumulate);
            store_block(c, 0, acc25, r + 32, cl + 40, m, n, accumulate);
            store_block(c, 0, acc26, r + 32, cl + 48, m, n, accumulate);
            store_block(c, 0, acc27, r + 32, cl + 56, m, n, accumulate);
            store_block(c, 0, acc30, r + 48, cl, m, n, accumulate);
            store_block(c, 0, acc31, r + 48, cl + 8, m, n, accumulate);
            store_block(c, 0, acc32, r + 48, cl + 16, m, n, accumulate);
            store_block(c, 0, acc33, r + 48, cl + 24, m, n, accumulate);
            store_block(c, 0, acc34, r + 48, cl + 32, m, n, accumulate);
            store_block(c, 0, acc35, r + 48, cl + 40, m, n, accumulate);
            store_block(c, 0, acc36, r + 48, cl + 48, m, n, accumulate);
            store_block(c, 0, acc37, r + 48, cl + 56, m, n, accumulate);
        }
    };
}

word_frags!(bf16, frag3_a_bf16, frag3_b_bf16);
word_frags!(f16, frag3_a_f16, frag3_b_f16);

matmul_mma_async_kernel!(
    /// `C = A·Bᵀ` (plus `C` when `accumulate`) of `bf16` inputs bound as their words (`A`
    /// stored `m × k`, `B` stored `n × k`, `k` even) on 128×128 tiles of `mma_m16n8k16`,
    /// its tiles streamed by `copy_async` through three stages of workgroup memory, two
    /// steps in flight, by four MMA groups of 64×64 (see the module docs); a grid of
    /// `⌈n/128⌉ × ⌈m/128⌉` workgroups of 128 invocations. [`MmaTile::T128Async`].
    matmul_mma_async_bf16,
    bf16,
    frag3_a_bf16,
    frag3_b_bf16
);
matmul_mma_async_kernel!(
    /// [`matmul_mma_async_bf16`](mod@matmul_mma_async_bf16) of `f16` inputs.
    matmul_mma_async_f16,
    f16,
    frag3_a_f16,
    frag3_b_f16
);

matmul_mma_kernels!(
    elements,
    /// [`matmul_mma_bf16`](mod@matmul_mma_bf16) over part `z` of `k`, `[z·kc, (z + 1)·kc)`,
    /// into copy `z` of `C` (`c` holds `⌈k/kc⌉` of them) for layer `z` of the grid: the first
    /// pass of [`MmaTile::SplitK`].
    matmul_mma_split_bf16,
    /// [`matmul_mma_split_bf16`](mod@matmul_mma_split_bf16) of `f16` inputs.
    matmul_mma_split_f16,
    [workgroup = 256],
    false,
    true
);

/// The second pass of a product split over `k` ([`MmaTile::SplitK`]): `c[i]` is
/// `Σ_z p[z·len + i]` in increasing `z` (plus `c[i]`, first, when `accumulate`).
#[kernel(workgroup = 256)]
pub fn matmul_mma_split_sum(len: u32, parts: u32, accumulate: bool, p: &[f32], c: &mut [f32]) {
    let i = global_id().x;
    if i < len {
        let mut v = 0.0f32;
        if accumulate {
            v = c[i];
        }
        for z in 0..parts {
            v += p[z * len + i];
        }
        c[i] = v;
    }
}

/// Rows (of `x`'s transpose) per workgroup of [`matmul_mma_pack_pairs`](mod@matmul_mma_pack_pairs).
const PACK_ROWS: usize = 64;

/// `k` pairs (words of the output) per workgroup of
/// [`matmul_mma_pack_pairs`](mod@matmul_mma_pack_pairs).
const PACK_PAIRS: usize = 32;

/// The transpose of a matrix of 16-bit values stored `k × rows` (`x`: its words, element `e`
/// the half `e % 2` of word `e / 2`) into one stored `rows × k` (`out`: `rows · k2` words,
/// `k = 2·k2`): word `j` of row `r` is element `(2j, r)` in its low half and `(2j + 1, r)`
/// in its high half, the words [`matmul_mma_words_bf16`](mod@matmul_mma_words_bf16) loads.
/// A workgroup transposes 64 rows × 32 words through workgroup memory, so that both its
/// reads (along `r`) and its writes (along `j`) are contiguous; a grid of
/// `⌈k2/32⌉ × ⌈rows/64⌉` workgroups. The bits are moved, never rounded: one kernel for
/// `bf16` and `f16`.
#[kernel(workgroup = 256)]
pub fn matmul_mma_pack_pairs(rows: u32, k2: u32, x: &[u32], out: &mut [u32]) {
    // Word `j0 + jl` of row `r0 + rl` at `s[jl·65 + rl]` (65: the reads along `jl` meet
    // every bank once).
    let s = shared::<u32, 2080>();
    let tid = local_id().x;
    let r0 = workgroup_id().y * 64;
    let j0 = workgroup_id().x * 32;
    let rl = tid % 64;
    let r = r0 + rl;
    for q in 0..8u32 {
        let jl = tid / 64 + 4 * q;
        let j = j0 + jl;
        let mut v = 0u32;
        if r < rows && j < k2 {
            v = half_bits(x, 2 * j * rows + r) | (half_bits(x, (2 * j + 1) * rows + r) << 16u32);
        }
        s[jl * 65 + rl] = v;
    }
    barrier();
    let jw = tid % 32;
    let j = j0 + jw;
    for q in 0..8u32 {
        let rw = tid / 32 + 8 * q;
        let r = r0 + rw;
        if r < rows && j < k2 {
            out[r * k2 + j] = s[jw * 65 + rw];
        }
    }
}

/// The grid of [`matmul_mma_pack_pairs`](mod@matmul_mma_pack_pairs) for a matrix stored
/// `k × rows`, or `None` where it would be empty or pass 65,535 workgroups in a dimension.
fn pack_grid(rows: usize, k: usize) -> Option<Grid> {
    let (gx, gy) = ((k / 2).div_ceil(PACK_PAIRS), rows.div_ceil(PACK_ROWS));
    (gx > 0 && gy > 0 && gx <= 65535 && gy <= 65535)
        .then(|| Grid::workgroups_2d(gx as u32, gy as u32))
}

/// `x` (the words of a matrix of 16-bit values stored `k × rows`, `k` even) transposed by
/// [`matmul_mma_pack_pairs`](mod@matmul_mma_pack_pairs) on `grid` (`pack_grid`) into a
/// scratch buffer of the step: `rows × k` values, `rows · k/2` words.
fn packed_transpose<C: Launch + ?Sized>(
    cx: &C,
    grid: Grid,
    x: &Buffer<u32>,
    rows: usize,
    k: usize,
) -> Result<Buffer<u32>> {
    let k2 = k / 2;
    // An `f32` scratch buffer is whole words.
    let mut out = cx
        .scratch(rows * k2)?
        .words()
        .ok_or_else(|| Error::Launch {
            kernel: "matmul_mma_pack_pairs",
            reason: "a scratch buffer not readable as words".into(),
        })?;
    matmul_mma_pack_pairs::launch(cx, grid, rows as u32, k2 as u32, x, &mut out)?;
    Ok(out)
}

/// Workgroups a split product aims for: two per multiprocessor of an H200 (132).
const SPLIT_TARGET: usize = 264;

/// The least `k` per part of a split product (eight steps of 32).
const SPLIT_MIN_K: usize = 256;

/// `k` per part of [`MmaTile::SplitK`] for `g`, a multiple of 32 (or `g.k` itself: one part,
/// no split), so that the tiles times the parts come near [`SPLIT_TARGET`] without a part
/// of less than [`SPLIT_MIN_K`] and the parts' copies of `C` fit `u32` indices.
fn split_kc(g: MmaGemm) -> usize {
    let tiles = g.m.div_ceil(TILE).max(1) * g.n.div_ceil(TILE).max(1);
    let want = SPLIT_TARGET.div_ceil(tiles).min(g.k / SPLIT_MIN_K);
    if want < 2 {
        return g.k;
    }
    let kc = g.k.div_ceil(want).div_ceil(32) * 32;
    let parts = g.k.div_ceil(kc);
    if parts < 2 || parts * g.m * g.n > u32::MAX as usize {
        return g.k;
    }
    kc
}

/// The shortest `k` for which [`MmaTile::Auto`] sends a product that needs a transposed
/// operand (a layer's gradient products) to the words route on CUDA ([`MmaTile::T128Words`],
/// which [`MmaTile::T128Async`] streams; the threshold was timed on the former). Measured on an
/// H100 (`bench-replay mma-k`, session of 2026-12-05, call 4; 4096×4096 outputs): at `k` =
/// 128 the transpose still costs more than the words kernel saves for `dW` (96.5 against
/// 93.7 µs lean; `dX` 90.9 against 93.2), at 256 the words route wins both (`dW` 108.3
/// against 118.3, `dX` 102.5 against 115.3) and at 1024 it is 1.36–1.39× faster.
pub const WORDS_TRANSPOSE_MIN_K: usize = 256;

/// Which kernel [`matmul_mma`] launches. The 128×128 variants compute the same product
/// with the same tiles and summation order (so the same bits on the host and wgpu) and differ
/// only in how the CUDA form is compiled; [`MmaTile::SplitK`] sums its parts in a second pass,
/// so its bits differ from theirs when it splits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MmaTile {
    /// The variant measured fastest for the product on its backend (see
    /// [`MmaTile::resolved_for`]).
    #[default]
    Auto,
    /// 128×128 tiles, eight MMA groups of 64×32 ([`matmul_mma_bf16`](mod@matmul_mma_bf16)).
    T128,
    /// [`MmaTile::T128`] bounded to two workgroups per multiprocessor on CUDA
    /// ([`matmul_mma_occ2_bf16`](mod@matmul_mma_occ2_bf16)).
    T128Occ2,
    /// [`MmaTile::T128Occ2`] with fewer registers held across the `k` loop
    /// ([`matmul_mma_lean_bf16`](mod@matmul_mma_lean_bf16)).
    T128Lean,
    /// [`MmaTile::T128Lean`] reading its inputs as 32-bit words, two elements a load
    /// ([`matmul_mma_words_bf16`](mod@matmul_mma_words_bf16), of `A` stored `m × k` and `B`
    /// stored `n × k`). An operand stored with `k` outer (`A` when `ta`, `B` when not `tb`: a
    /// layer's gradient products) is first transposed into a scratch buffer of the step
    /// ([`matmul_mma_pack_pairs`](mod@matmul_mma_pack_pairs), one more launch each). It
    /// needs `k` even and both inputs' words ([`Buffer::words`]: views starting at an even
    /// element); other products run [`MmaTile::T128Lean`], with the same results.
    T128Words,
    /// [`MmaTile::T128Words`]' operands (as words, an operand stored with `k` outer
    /// transposed first) streamed into workgroup memory by `copy_async` (`cp.async` on CUDA
    /// sm_80+) through three stages, two steps in flight, with one barrier a step
    /// ([`matmul_mma_async_bf16`](mod@matmul_mma_async_bf16)). Its 48 KiB of workgroup memory
    /// fit CUDA; where they do not ([`Launch::fits_workgroup_memory`]: wgpu adapters, which
    /// add the portable MMA form's 3 KiB), and where [`MmaTile::T128Words`] does not apply,
    /// it runs that variant's route instead. Its fragments come out of the stages by
    /// `ldmatrix_x4` (PTX's `ldmatrix` on CUDA) and take a step's values in the order of the
    /// other 128×128 variants, so its bits are theirs. Measured on an H100 (BENCHMARKS.md,
    /// seventh session of 2026-12-07, one call): 4096³ forward 534.0 µs against the words
    /// kernel's 576.7 (`dW` 591.7 against 631.9, `dX` 561.6 against 602.3), so
    /// [`MmaTile::Auto`] takes it where the words route applies on CUDA; 4096×10×4096 139.8
    /// against 254.8 (but [`MmaTile::SplitK`] 91.2).
    T128Async,
    /// [`MmaTile::T128`] on products of few tiles split over `k`: layer `z` of one launch
    /// computes the part `[z·kc, (z + 1)·kc)` into a scratch copy of `C`, and
    /// [`matmul_mma_split_sum`](mod@matmul_mma_split_sum) adds the parts in order (so a
    /// narrow product such as 4096×10×4096, 32 tiles, fills the multiprocessors); products of
    /// many tiles, or a short `k`, are not split (one launch of [`MmaTile::T128`]).
    SplitK,
}

impl MmaTile {
    /// The variant [`MmaTile::Auto`] takes for `g` on `backend` (any other variant is itself).
    /// Measured on the H200 (BENCHMARKS.md, session of 2026-12-02): a product of few tiles
    /// that [`MmaTile::SplitK`] splits over `k` runs 2.8–2.9× faster split (4096×10×4096:
    /// 88.6 against 248.9 µs); otherwise [`MmaTile::T128Lean`] runs 1.5–1.6× faster than
    /// [`MmaTile::T128`] on CUDA (4096³: 1268.5 against 1907.7 µs), and
    /// [`MmaTile::T128Words`] 1.6× faster than [`MmaTile::T128Lean`] where it applies (`A`
    /// stored `m × k`, `B` stored `n × k`, `k` even: 4096³ 639.2 against 1038.0 µs, session of
    /// 2026-12-03c), and there [`MmaTile::T128Async`], the same route streamed, 1.07× faster
    /// again (4096³ 534.0 against 576.7 µs on an H100, seventh session of 2026-12-07). A
    /// gradient product (an operand stored with `k` outer, transposed first)
    /// takes the words route too where `k` is at least [`WORDS_TRANSPOSE_MIN_K`]: 4096³
    /// `dW = dYᵀ·X` 685.7 against 1101.3 µs, `dX = dY·W` 661.5 against 1054.4 µs on the H200,
    /// but 4096×4096×10 `dX` 77.6 against 72.5 (session of 2026-12-05; the threshold is the
    /// crossover timed at `k` from 16 to 1024). Elsewhere the
    /// 128×128 variants are one portable form, and [`MmaTile::T128`] stands for them.
    pub fn resolved_for(self, g: MmaGemm, backend: Option<BackendKind>) -> MmaTile {
        let cuda = backend == Some(BackendKind::Cuda);
        let transposes = g.ta || !g.tb;
        let words = g.k % 2 == 0 && (!transposes || g.k >= WORDS_TRANSPOSE_MIN_K);
        match self {
            MmaTile::Auto if split_kc(g) < g.k => MmaTile::SplitK,
            MmaTile::Auto if cuda && words => MmaTile::T128Async,
            MmaTile::Auto if cuda => MmaTile::T128Lean,
            MmaTile::Auto => MmaTile::T128,
            other => other,
        }
    }

    /// Every variant but [`MmaTile::Auto`], [`MmaTile::T128`] first.
    pub const ALL: [MmaTile; 6] = [
        MmaTile::T128,
        MmaTile::T128Occ2,
        MmaTile::T128Lean,
        MmaTile::T128Words,
        MmaTile::T128Async,
        MmaTile::SplitK,
    ];

    /// The variant's short name (`auto`, `t128`, `t128-occ2`, `t128-lean`, `t128-words`,
    /// `t128-async`, `splitk`), as the
    /// bench prints it.
    pub fn name(self) -> &'static str {
        match self {
            MmaTile::Auto => "auto",
            MmaTile::T128 => "t128",
            MmaTile::T128Occ2 => "t128-occ2",
            MmaTile::T128Lean => "t128-lean",
            MmaTile::T128Words => "t128-words",
            MmaTile::T128Async => "t128-async",
            MmaTile::SplitK => "splitk",
        }
    }
}

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

/// The operands of the words kernel for `g`: `A` (`m × k`) and `B` (`n × k`) as words, an
/// operand stored with `k` outer (`ta`, not `tb`) transposed first into a scratch buffer
/// (`packed_transpose`). `None` where that cannot be: `k` odd, an input view that starts
/// inside a word, a transpose's grid too large.
fn words_operands<C: Launch + ?Sized, T: Element>(
    cx: &C,
    g: MmaGemm,
    a: &Buffer<T>,
    b: &Buffer<T>,
) -> Result<Option<(Buffer<u32>, Buffer<u32>)>> {
    let (Some(aw), Some(bw)) = (a.words(), b.words()) else {
        return Ok(None);
    };
    if g.k % 2 != 0 {
        return Ok(None);
    }
    // Both transposes' grids checked before either runs.
    let (grid_a, grid_b) = (pack_grid(g.m, g.k), pack_grid(g.n, g.k));
    if (g.ta && grid_a.is_none()) || (!g.tb && grid_b.is_none()) {
        return Ok(None);
    }
    let aw = match grid_a.filter(|_| g.ta) {
        Some(grid) => packed_transpose(cx, grid, &aw, g.m, g.k)?,
        None => aw,
    };
    let bw = match grid_b.filter(|_| !g.tb) {
        Some(grid) => packed_transpose(cx, grid, &bw, g.n, g.k)?,
        None => bw,
    };
    Ok(Some((aw, bw)))
}

/// `C = op(A)·op(B)` (plus `C` when `accumulate`) of `bf16` or `f16` inputs into `f32` by the
/// kernel variant `tile` ([`MmaTile::Auto`]: the one measured fastest for the shape on the
/// backend, see [`MmaTile::resolved_for`]): one launch of a 128×128 kernel
/// ([`matmul_mma_bf16`](mod@matmul_mma_bf16), [`matmul_mma_f16`](mod@matmul_mma_f16) and
/// their variants), or for [`MmaTile::SplitK`] where it splits, the split launch and its sum.
///
/// # Errors
/// [`Error::Shape`] when the lengths do not make the product, a size does not fit in a `u32`,
/// or the grid would pass 65,535 workgroups in a dimension; [`Error::Launch`] for an element
/// type other than `bf16` and `f16`; the launch's errors.
pub fn matmul_mma<C: Launch + ?Sized, T: Element>(
    cx: &C,
    tile: MmaTile,
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
    let tile = tile.resolved_for(g, cx.backend_kind());
    let kc = match tile {
        MmaTile::SplitK => split_kc(g),
        _ => g.k,
    };
    let parts = if kc < g.k { g.k.div_ceil(kc) } else { 1 };
    let grid = Grid::workgroups_3d(gx.max(1) as u32, gy.max(1) as u32, parts as u32);
    let (m, n, k, kcu) = (g.m as u32, g.n as u32, g.k as u32, kc as u32);
    let (ta, tb) = (g.ta, g.tb);
    let occ2 = tile == MmaTile::T128Occ2;
    // The words variant where the inputs can be read as words (else the lean one: the same
    // results).
    let words = match tile {
        MmaTile::T128Words | MmaTile::T128Async => words_operands(cx, g, a, b)?,
        _ => None,
    };
    // The async kernel where its workgroup memory fits (else the words one).
    let stream = tile == MmaTile::T128Async
        && cx.fits_workgroup_memory(match T::DTYPE {
            DType::F16 => &matmul_mma_async_f16::DEF,
            _ => &matmul_mma_async_bf16::DEF,
        });
    let lean = matches!(
        tile,
        MmaTile::T128Lean | MmaTile::T128Words | MmaTile::T128Async
    );
    // A split product's parts go to a scratch copy of `C` each (never accumulated there).
    let mut scratch = if parts > 1 {
        Some(cx.scratch(parts * g.m * g.n)?)
    } else {
        None
    };
    let (out, acc) = match scratch.as_mut() {
        Some(p) => (p, false),
        None => (&mut *c, accumulate),
    };
    // One input type's kernels: by `tile`, and the split kernel for a product in parts.
    macro_rules! run {
        (
            $t:ident, $occ2:ident, $lean:ident, $words:ident, $async:ident, $split:ident,
            $plain:ident
        ) => {{
            if let (Some((aw, bw)), true) = (&words, stream) {
                let grid = Grid::workgroups_2d(gx.max(1) as u32, gy.max(1) as u32);
                $async::launch(cx, grid, m, n, k, acc, aw, bw, out)?;
            } else if let Some((aw, bw)) = &words {
                $words::launch(cx, grid, m, n, k, kcu, acc, aw, bw, out)?;
            } else {
                let a = Buffer::<$t>::try_from_view(a.raw_view())?;
                let b = Buffer::<$t>::try_from_view(b.raw_view())?;
                let (a, b) = (&a, &b);
                if occ2 {
                    $occ2::launch(cx, grid, m, n, k, kcu, ta, tb, acc, a, b, out)?;
                } else if lean {
                    $lean::launch(cx, grid, m, n, k, kcu, ta, tb, acc, a, b, out)?;
                } else if parts > 1 {
                    $split::launch(cx, grid, m, n, k, kcu, ta, tb, acc, a, b, out)?;
                } else {
                    $plain::launch(cx, grid, m, n, k, kcu, ta, tb, acc, a, b, out)?;
                }
            }
        }};
    }
    match T::DTYPE {
        DType::BF16 => run!(
            bf16,
            matmul_mma_occ2_bf16,
            matmul_mma_lean_bf16,
            matmul_mma_words_bf16,
            matmul_mma_async_bf16,
            matmul_mma_split_bf16,
            matmul_mma_bf16
        ),
        DType::F16 => run!(
            f16,
            matmul_mma_occ2_f16,
            matmul_mma_lean_f16,
            matmul_mma_words_f16,
            matmul_mma_async_f16,
            matmul_mma_split_f16,
            matmul_mma_f16
        ),
        other => {
            return Err(Error::Launch {
                kernel: op,
                reason: format!(
                    "inputs of `{}`; the tensor-core product takes `bf16` or `f16`",
                    other.name()
                ),
            })
        }
    }
    if let Some(p) = scratch {
        let len = g.m * g.n;
        matmul_mma_split_sum::launch(
            cx,
            Grid::workgroups(len.div_ceil(256) as u32),
            len as u32,
            parts as u32,
            accumulate,
            &p,
            c,
        )?;
    }
    Ok(())
}
