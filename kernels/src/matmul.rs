//! Matrix products `C = op(A)·op(B)` of row-major `f32` matrices, `op` being the identity or
//! the transpose, with a fused epilogue: bias, activation, a gate by an activation's
//! derivative (for backward passes), accumulation into `C`, and the row sums of `op(A)` (a
//! layer's bias gradient) in the same launch.
//!
//! Three tilings, all staging `A` and `B` through workgroup memory, each step's global loads
//! issued into registers before the previous step's arithmetic:
//!
//! - [`matmul_t64`]: 64×64 tiles of `C`, `k` in steps of 16, 256 invocations each computing a
//!   4×4 block of adjacent rows and columns; for large products.
//! - [`matmul_t16`]: 16×16 tiles, one element per invocation, `k` in steps of 64; more
//!   workgroups for small products, where 64×64 tiles would leave most of a big GPU idle.
//! - [`matmul_t32`]: 32×32 tiles, a 2×2 block per invocation, `k` in steps of 64; for small
//!   products too (chosen explicitly, [`Tile::T32`]).
//!
//! A product of few tiles splits `k` into parts computed side by side ([`Gemm::split_parts`]),
//! summed by [`matmul_split_sum`] in a second launch or, as an opt-in on CUDA
//! ([`Device::split_serial`](graphed_runtime::Device::split_serial)), serially: each tiling's
//! `*_serial` sibling ([`matmul_t16_serial`], [`matmul_t32_serial`], [`matmul_t64_serial`])
//! counts each tile's finished parts on a counter in device memory ([`Launch::counters`]) and
//! its last workgroup adds them in the second launch's order — the same bits, one launch.
//!
//! Every element of `C` is `Σ_k op(A)[r, k]·op(B)[k, c]` accumulated in increasing `k` in one
//! invocation with `fma`, so every tiling and every backend add in the same order. `fma` is
//! one instruction on GPUs (the CUDA backend compiles with `--fmad=false`, so a plain
//! `acc += a * b` would be a multiply and an add); the host computes it fused (`mul_add`),
//! while WGSL lets an implementation round twice, so backends agree within tolerances.

use graphed_macros::{device, kernel};
use graphed_runtime::blas::{Fused, Math, Sgemm};
use graphed_runtime::{
    bf16, f16, BackendKind, Buffer, DType, Element, Error, Grid, IntoScalarArg, Launch, Result,
    ScalarArg,
};

use crate::elementwise::Act;
use crate::helpers::{activate, activate_backward};
use crate::shape::{expect_len, expect_product, groups, u32_of, MAX_GROUPS};

/// Element `(r, kk)` of `op(X)`, `X` stored `rows × k` (`k × rows` when `t`), or 0 outside
/// `rows` rows and the `k` range ending at `k1`: one element of a tile load.
#[device]
fn tile_load(x: &[f32], t: bool, r: u32, kk: u32, rows: u32, k: u32, k1: u32) -> f32 {
    // One load under one statement `if` (an `if` value is a `select` in WGSL, which loads
    // both sides), so GPU compilers predicate it instead of branching around each of a
    // tile's loads.
    let at = if t { kk * rows + r } else { r * k + kk };
    let mut v = 0.0;
    if r < rows && kk < k1 {
        v = x[at];
    }
    v
}

/// The epilogue of every product kernel for element `idx` (column `col`) with sum `v`:
/// `+ bias[col]` (when `has_bias`), activation `act`, times `gate′(aux[idx])` (when
/// `gate != 0`), activation codes as [`Act::code`].
#[device]
#[allow(clippy::too_many_arguments)]
fn epilogue(
    v: f32,
    idx: u32,
    col: u32,
    has_bias: bool,
    act: u32,
    gate: u32,
    bias: &[f32],
    aux: &[f32],
) -> f32 {
    // The gate's input is loaded after the activation, not through `epilogue_of`: loaded
    // first, it moved the tile kernels' loads and changed their PTX.
    let mut x = v;
    if has_bias {
        x += bias[col];
    }
    x = activate(act, x);
    if gate != 0 {
        x = activate_backward(gate, aux[idx], x);
    }
    x
}

/// [`epilogue`] with the gate's input `x` (`aux[idx]`) already loaded (unused when
/// `gate == 0`): the form of the in-place kernels, which load all their inputs first.
#[device]
#[allow(clippy::too_many_arguments)]
fn epilogue_of(v: f32, x: f32, col: u32, has_bias: bool, act: u32, gate: u32, bias: &[f32]) -> f32 {
    let mut y = v;
    if has_bias {
        y += bias[col];
    }
    y = activate(act, y);
    if gate != 0 {
        y = activate_backward(gate, x, y);
    }
    y
}

/// Elements an invocation of the in-place epilogue kernels takes per pass of its loop: all
/// their loads issued before any result is stored, `total` (the grid's size) apart.
pub const EPILOGUE_ELEMENTS: usize = 4;

/// Workgroups of a launch of [`gemm_epilogue`](mod@gemm_epilogue) (or its 16-bit-copy forms)
/// over `len` elements ([`EPILOGUE_ELEMENTS`] an invocation a pass).
pub fn epilogue_groups(len: usize) -> u32 {
    groups(len.div_ceil(EPILOGUE_ELEMENTS))
}

/// `c[at] = v`, or `c[at] += v` when `accumulate`: the store of a product or a row sum.
#[device]
fn store(v: f32, at: u32, accumulate: bool, c: &mut [f32]) {
    let mut x = v;
    if accumulate {
        x += c[at];
    }
    c[at] = x;
}

/// The tiled product kernels, one skeleton for every tiling. Invoked as
///
/// ```text
/// tiled_product! {
///     /// docs
///     $name, serial $serial;
///     side S, k step K, stride P;
///     registers acc = [0.0f32; ..], d = [0.0f32; ..];
///     locals { the tiling's own locals }
///     steps whole |kk| { one k value } sums |kk| { its row sums' share }   (or `steps partial`)
///     finish { row sums and epilogue }
/// }
/// ```
///
/// it writes `$name` (the parameters of [`matmul_t64`]) on `S×S` tiles of `C`, `k` in steps
/// of `K` staged in workgroup memory `sa`/`sb` (`K` rows of `P` words, one per value of `k`),
/// each of the 256 invocations storing `S·K/256` elements of each tile per step that it
/// loaded into registers (`pa`/`pb`) while the previous step computed. `steps whole` runs
/// every step over `K` values of `k` (the tile loads zero what lies past `k`); `steps
/// partial` gives whole steps a constant trip count (unrolled by GPU compilers) and loops the
/// last, partial step of `k` over what it holds (the test is `k0 + K <= k1`: written as
/// `steps == K`, LLVM merged the two loops into the partial one, never unrolled whole). The
/// tiling's fragments see the skeleton's locals (`tid`, `tx`, `ty`, `row0`, `col0`, `sums`,
/// `zc`, `zd`, `k0`, `k1`, …) and its constants `SIDE`, `K_STEP`, `STRIDE`.
///
/// From the same body it writes the serial split-K sibling `$serial`: the body run with the
/// epilogue off (the launcher passes no bias, activation, gate or accumulation) writes layer
/// `z`'s raw partial product into `c` and its row sums into `db` (the scratch of a split
/// product, as [`matmul`]'s two-launch split), then the workgroups of each output tile count
/// their arrivals on `counters[tile]`, and the last to arrive sums the tile's `parts`
/// partials in increasing `z` and applies the epilogue (`e_*`) into `out_c` and `out_db`
/// exactly as [`matmul_split_sum`] would, so the bits are the two-launch path's. It leaves its
/// counter 0 again for the next launch.
macro_rules! tiled_product {
    (
        $(#[$doc:meta])*
        $name:ident, serial $serial:ident;
        side $side:literal, k step $kstep:literal, stride $stride:literal;
        registers acc = $acc:tt, d = $d:tt;
        locals { $($locals:tt)* }
        steps whole |$kk:ident| { $($step:tt)* }
        sums |$sk:ident| { $($sums:tt)* }
        finish { $($finish:tt)* }
    ) => {
        tiled_product! {
            @body $(#[$doc])* $name, $serial; $side, $kstep, $stride; $acc, $d;
            { $($locals)* }
            {
                for $kk in 0..K_STEP {
                    $($step)*
                }
                if sums {
                    for $sk in 0..K_STEP {
                        $($sums)*
                    }
                }
            }
            { $($finish)* }
        }
    };
    (
        $(#[$doc:meta])*
        $name:ident, serial $serial:ident;
        side $side:literal, k step $kstep:literal, stride $stride:literal;
        registers acc = $acc:tt, d = $d:tt;
        locals { $($locals:tt)* }
        steps partial { $($slocals:tt)* } |$kk:ident| { $($step:tt)* }
        sums |$sk:ident| in 0..$send:tt { $($sums:tt)* }
        finish { $($finish:tt)* }
    ) => {
        tiled_product! {
            @body $(#[$doc])* $name, $serial; $side, $kstep, $stride; $acc, $d;
            { $($locals)* }
            {
                let k0 = kz + (t - 1) * K_STEP;
                $($slocals)*
                if k0 + K_STEP <= k1 {
                    for $kk in 0..K_STEP {
                        $($step)*
                    }
                } else {
                    for $kk in 0..(k1 - k0) {
                        $($step)*
                    }
                }
                if sums {
                    for $sk in 0..$send {
                        $($sums)*
                    }
                }
            }
            { $($finish)* }
        }
    };
    (
        @body $(#[$doc:meta])* $name:ident, $serial:ident; $side:literal, $kstep:literal,
        $stride:literal; $acc:tt, $d:tt;
        { $($locals:tt)* } { $($step:tt)* } { $($finish:tt)* }
    ) => {
        tiled_product! {
            @kernels $(#[$doc])* $name, $serial;
            (
                m: u32, n: u32, k: u32, kc: u32, ta: bool, tb: bool,
                has_bias: bool, act: u32, gate: u32, accumulate: bool, has_db: bool,
                a: &[f32], b: &[f32], bias: &[f32], aux: &[f32], c: &mut [f32], db: &mut [f32],
            )
            {
                const SIDE: u32 = $side;
                const K_STEP: u32 = $kstep;
                const STRIDE: u32 = $stride;
                // Elements of each tile one invocation stores per step.
                const SHARE: u32 = SIDE * K_STEP / 256;
                const WORDS: u32 = K_STEP * STRIDE;
                // Rows (columns) and values of `k` between an invocation's elements of a tile.
                const ROWS_APART: u32 = 256 / K_STEP;
                const KS_APART: u32 = 256 / SIDE;
                const K_ROUND: u32 = K_STEP - 1;
                let sa = shared::<f32, WORDS>();
                let sb = shared::<f32, WORDS>();
                let tid = local_id().x;
                let tx = tid % 16;
                let ty = tid / 16;
                let row0 = workgroup_id().y * SIDE;
                let col0 = workgroup_id().x * SIDE;
                $($locals)*
                // Element q of this invocation's share of a tile: (row or column, k) =
                // (r + dr·q, kk + dk·q), consecutive invocations along the dimension that is
                // contiguous in memory.
                let ra = if ta { tid % SIDE } else { tid / K_STEP };
                let ka = if ta { tid / SIDE } else { tid % K_STEP };
                let dra = if ta { 0u32 } else { ROWS_APART };
                let dka = if ta { KS_APART } else { 0u32 };
                let cb = if tb { tid / K_STEP } else { tid % SIDE };
                let kb = if tb { tid % K_STEP } else { tid / SIDE };
                let dcb = if tb { ROWS_APART } else { 0u32 };
                let dkb = if tb { 0u32 } else { KS_APART };
                // This invocation's share of the next tile (loaded ahead), its block of `C` and
                // its rows' sums: registers, as every index of them is a constant of an
                // unrolled loop.
                let mut pa = [0.0f32; SHARE];
                let mut pb = [0.0f32; SHARE];
                let mut acc = $acc;
                let mut d = $d;
                let sums = has_db && workgroup_id().x == 0 && tx == 0;
                // This launch's part of `k`: `[kz, k1)`, part `z` of a split `k` (else all of it).
                let z = workgroup_id().z;
                let kz = z * kc;
                let k1 = min(k, kz + kc);
                let zc = z * m * n;
                let zd = z * m;
                let tiles = (k1 - kz + K_ROUND) / K_STEP;
                for t in 0..(tiles + 1) {
                    if t > 0 {
                        for q in 0..SHARE {
                            sa[(ka + q * dka) * STRIDE + ra + q * dra] = pa[q];
                            sb[(kb + q * dkb) * STRIDE + cb + q * dcb] = pb[q];
                        }
                        barrier();
                    }
                    if t < tiles {
                        let k0 = kz + t * K_STEP;
                        for q in 0..SHARE {
                            pa[q] = tile_load(a, ta, row0 + ra + dra * q, k0 + ka + dka * q,
                                m, k, k1);
                            pb[q] = tile_load(b, !tb, col0 + cb + dcb * q, k0 + kb + dkb * q,
                                n, k, k1);
                        }
                    }
                    if t > 0 {
                        $($step)*
                        barrier();
                    }
                }
                $($finish)*
            }
        }
    };
    (
        @kernels $(#[$doc:meta])* $name:ident, $serial:ident;
        ($($params:tt)*) { $($body:tt)* }
    ) => {
        $(#[$doc])*
        #[kernel(workgroup = 256)]
        pub fn $name($($params)*) { $($body)* }

        #[doc = concat!("[`", stringify!($name), "`] as serial split-K: the last of the `parts` ")]
        /// workgroups of each output tile to store its partial (counted on `counters[tile]`,
        /// `tile = workgroup_id().y · num_workgroups().x + workgroup_id().x`, zero before the
        /// launch and left zero after it) sums the tile's partials of `c` (and, in the first
        /// column of tiles, of `db`) in increasing `z`, applies the epilogue `e_has_bias`,
        /// `e_act`, `e_gate`, `e_accumulate` and stores into `out_c` (`out_db`), as
        /// [`matmul_split_sum`] does. The epilogue parameters of the body must be off.
        #[kernel(workgroup = 256)]
        #[allow(clippy::too_many_arguments)]
        pub fn $serial(
            $($params)*
            parts: u32, e_has_bias: bool, e_act: u32, e_gate: u32, e_accumulate: bool,
            out_c: &mut [f32], out_db: &mut [f32], counters: &mut [u32],
        ) {
            $($body)*
            // This invocation's partial is stored: fence it device-wide before the arrival is
            // counted, and fence again after it, so the last workgroup reads every part.
            device_fence();
            barrier();
            let s_tile = workgroup_id().y * num_workgroups().x + workgroup_id().x;
            if tid == 0 {
                let s_old = atomic_add(counters, s_tile, 1u32);
                let mut s_last = 0.0;
                if s_old == parts - 1 {
                    s_last = 1.0;
                }
                sa[0] = s_last;
            }
            device_fence();
            barrier();
            if sa[0] != 0.0 {
                // `matmul_split_sum`'s sums, over this tile's elements.
                let s_mn = m * n;
                let mut s_e = tid;
                while s_e < SIDE * SIDE {
                    let s_row = workgroup_id().y * SIDE + s_e / SIDE;
                    let s_col = workgroup_id().x * SIDE + s_e % SIDE;
                    if s_row < m && s_col < n {
                        let s_idx = s_row * n + s_col;
                        let mut s_v = c[s_idx];
                        for s_z in 1..parts {
                            s_v += c[s_z * s_mn + s_idx];
                        }
                        let s_v = epilogue(s_v, s_idx, s_col, e_has_bias, e_act, e_gate, bias, aux);
                        store(s_v, s_idx, e_accumulate, out_c);
                    }
                    s_e += 256;
                }
                if has_db && workgroup_id().x == 0 && tid < SIDE {
                    let s_row = workgroup_id().y * SIDE + tid;
                    if s_row < m {
                        let mut s_d = db[s_row];
                        for s_z in 1..parts {
                            s_d += db[s_z * m + s_row];
                        }
                        store(s_d, s_row, e_accumulate, out_db);
                    }
                }
                if tid == 0 {
                    atomic_store(counters, s_tile, 0u32);
                }
            }
        }
    };
}

tiled_product! {
    /// `C = op(A)·op(B)` on 64×64 tiles (4×4 per invocation), `k` in steps of 16. `ta`/`tb`: `A`
    /// is stored `k × m` / `B` is stored `n × k`. Epilogue per element: `+ bias[col]` (when
    /// `has_bias`), activation `act`, times `gate′(aux[row, col])` (when `gate != 0`),
    /// `+ c[row, col]` (when `accumulate`). With `has_db`, the first column of workgroups also
    /// writes `db[row] = Σ_k op(A)[row, k]` (added to `db` when `accumulate`).
    ///
    /// Workgroup layer `z` of the grid covers `k` in `[z·kc, (z + 1)·kc)` and writes its `C` and
    /// `db` at offsets `z·m·n` and `z·m` (`kc = k` and one layer unless [`matmul`] splits `k`).
    ///
    /// Step `t` stores the tile that step `t − 1` loaded into registers, then loads the next
    /// tile while it computes on this one, so global loads overlap the arithmetic.
    matmul_t64, serial matmul_t64_serial;
    side 64, k step 16, stride 68;
    // The 4×4 block: row `i`, column `j` at `acc[i * 4 + j]`.
    registers acc = [0.0f32; 16], d = [0.0f32; 4];
    locals {
        // Rows ty·4 + i and columns tx·4 + j: each invocation's four values of a k-slice are
        // adjacent and 16-byte aligned in workgroup memory (row stride 68), ready for vector
        // loads (NVRTC does not form them from this CUDA C yet; still 11% faster on the H200
        // than rows ty + 16i).
        let ty4 = ty * 4;
        let tx4 = tx * 4;
    }
    steps whole |kk| {
        let o = kk * STRIDE;
        let mut av = [0.0f32; 4];
        let mut bv = [0.0f32; 4];
        for i in 0..4u32 {
            av[i] = sa[o + ty4 + i];
        }
        for j in 0..4u32 {
            bv[j] = sb[o + tx4 + j];
        }
        for i in 0..4u32 {
            for j in 0..4u32 {
                acc[i * 4 + j] = fma(av[i], bv[j], acc[i * 4 + j]);
            }
        }
    }
    sums |kk| {
        for i in 0..4u32 {
            d[i] += sa[kk * STRIDE + ty4 + i];
        }
    }
    finish {
        if sums {
            for i in 0..4u32 {
                let row = row0 + ty4 + i;
                if row < m {
                    store(d[i], zd + row, accumulate, db);
                }
            }
        }
        // The epilogue is code for one element, looped over, not 16 copies of it (the copies
        // made this kernel 3× the size and 50% more registers on sm_90): two rows at a time of
        // the 4×4 block go through the tile memory, free after the last step's barrier, each
        // invocation reading back only its own 8 values, so a loop that is not unrolled can
        // reach them.
        for h in 0..2u32 {
            for e in 0..4u32 {
                sa[e * 256 + tid] = acc[h * 8 + e];
                sb[e * 256 + tid] = acc[h * 8 + 4 + e];
            }
            for e in 0..8u32 {
                let row = row0 + ty4 + h * 2 + e / 4;
                let col = col0 + tx4 + e % 4;
                if row < m && col < n {
                    let mut v = 0.0;
                    if e < 4 {
                        v = sa[e * 256 + tid];
                    } else {
                        v = sb[(e - 4) * 256 + tid];
                    }
                    let idx = row * n + col;
                    let v = epilogue(v, idx, col, has_bias, act, gate, bias, aux);
                    store(v, zc + idx, accumulate, c);
                }
            }
        }
    }
}

tiled_product! {
    /// `C = op(A)·op(B)` on 16×16 tiles, one element per invocation, `k` in steps of 64 (few
    /// steps for the long `k` of small products, where each step's latency dominates), with the
    /// same register prefetch. Parameters and epilogue as in [`matmul_t64`].
    matmul_t16, serial matmul_t16_serial;
    side 16, k step 64, stride 17;
    registers acc = 0.0, d = 0.0;
    locals {
        let row = row0 + ty;
        let col = col0 + tx;
    }
    steps partial {} |kk| {
        acc = fma(sa[kk * STRIDE + ty], sb[kk * STRIDE + tx], acc);
    }
    sums |kk| in 0..(min(K_STEP, k1 - k0)) {
        d += sa[kk * STRIDE + ty];
    }
    finish {
        if row < m {
            if sums {
                store(d, zd + row, accumulate, db);
            }
            if col < n {
                let idx = row * n + col;
                let v = epilogue(acc, idx, col, has_bias, act, gate, bias, aux);
                store(v, zc + idx, accumulate, c);
            }
        }
    }
}

tiled_product! {
    /// `C = op(A)·op(B)` on 32×32 tiles, 256 invocations each computing a 2×2 block (rows
    /// `ty + 16i`, columns `tx + 16j`), `k` in steps of 64 through workgroup memory with the
    /// register prefetch of [`matmul_t64`]: as many steps as [`matmul_t16`] (the step count, each
    /// step waiting on a global load, is what small products pay for) but four outputs per
    /// invocation, four independent `fma` chains, each workgroup-memory value read for two of
    /// them, a quarter of the workgroups (the fill rule splits `k` further instead). Parameters,
    /// epilogue, split-K layers and row sums as in [`matmul_t64`]; each element is the same sum
    /// in the same order (increasing `k` from 0 within its part, one `fma` per term).
    ///
    /// Its two tiles take 16,896 bytes of workgroup memory (64 values of k × 32 rows or
    /// columns, row stride 33: both the stores of a tile load, consecutive invocations along k
    /// or along rows, and the reads fall in distinct banks): past WebGPU's default minimum of
    /// 16 KiB (desktop adapters offer 32 KiB or more; on one that does not, the wgpu backend
    /// refuses the launch with [`Error::Limit`]).
    matmul_t32, serial matmul_t32_serial;
    side 32, k step 64, stride 33;
    // The 2×2 block: row `i`, column `j` at `acc[i * 2 + j]`.
    registers acc = [0.0f32; 4], d = [0.0f32; 2];
    locals {}
    // The sums' bound before the step's loops (NVRTC's code for either place differs in
    // each tiling; each keeps the place it was measured with).
    steps partial { let steps = min(K_STEP, k1 - k0); } |kk| {
        let o = kk * STRIDE;
        let mut av = [0.0f32; 2];
        let mut bv = [0.0f32; 2];
        for i in 0..2u32 {
            av[i] = sa[o + ty + 16 * i];
            bv[i] = sb[o + tx + 16 * i];
        }
        for i in 0..2u32 {
            for j in 0..2u32 {
                acc[i * 2 + j] = fma(av[i], bv[j], acc[i * 2 + j]);
            }
        }
    }
    sums |kk| in 0..steps {
        for i in 0..2u32 {
            d[i] += sa[kk * STRIDE + ty + 16 * i];
        }
    }
    finish {
        if sums {
            for i in 0..2u32 {
                let row = row0 + ty + 16 * i;
                if row < m {
                    store(d[i], zd + row, accumulate, db);
                }
            }
        }
        // The epilogue once, looped over the four elements (as in `matmul_t64`): the block goes
        // through the tile memory, free after the last step's barrier, each invocation reading
        // back only its own values, so a loop that is not unrolled can reach them.
        for e in 0..4u32 {
            sa[e * 256 + tid] = acc[e];
        }
        for e in 0..4u32 {
            let row = row0 + ty + 16 * (e / 2);
            let col = col0 + tx + 16 * (e % 2);
            if row < m && col < n {
                let idx = row * n + col;
                let v = epilogue(sa[e * 256 + tid], idx, col, has_bias, act, gate, bias, aux);
                store(v, zc + idx, accumulate, c);
            }
        }
    }
}

/// `C[r, c] = gate(act(C[r, c] + bias[c]))` in place over a row-major matrix with `n`
/// columns: the epilogue of [`matmul_t64`] for a product computed elsewhere (a vendor BLAS).
/// `gate` multiplies by the derivative of activation `gate` at `aux[r, c]`.
#[kernel(workgroup = 256)]
pub fn gemm_epilogue(
    n: u32,
    has_bias: bool,
    act: u32,
    gate: u32,
    bias: &[f32],
    aux: &[f32],
    c: &mut [f32],
) {
    // Four elements a pass, `total` apart (each load coalesced), every load before any
    // store: one element an invocation ran MLP-M's 512×1024 gates in two waves at 4.2–4.6
    // µs on the H200, latency-bound (ncu: 0.2% of DRAM bandwidth, 88% L2 hits).
    // `j · total < len − base` cannot wrap, where `base + j · total` could.
    let len = c.len();
    let total = global_size().x;
    let mut base = global_id().x;
    while base < len {
        let mut vs = [0.0f32; 4];
        let mut xs = [0.0f32; 4];
        for j in 0..4u32 {
            if j * total < len - base {
                let i = base + j * total;
                vs[j] = c[i];
                if gate != 0 {
                    xs[j] = aux[i];
                }
            }
        }
        for j in 0..4u32 {
            if j * total < len - base {
                let i = base + j * total;
                c[i] = epilogue_of(vs[j], xs[j], i % n, has_bias, act, gate, bias);
            }
        }
        base += 4u32 * total;
    }
}

/// The second pass of a product whose `k` [`matmul`] split into `parts` ranges: `C[r, c]` is
/// the epilogue of [`matmul_t64`] applied to `Σ_z p[z·m·n + r·n + c]` (in increasing `z`),
/// and with `has_db`, `db[r] = Σ_z dp[z·m + r]` (plus `db[r]` when `accumulate`).
#[kernel(workgroup = 256)]
pub fn matmul_split_sum(
    m: u32,
    n: u32,
    parts: u32,
    has_bias: bool,
    act: u32,
    gate: u32,
    accumulate: bool,
    has_db: bool,
    p: &[f32],
    dp: &[f32],
    bias: &[f32],
    aux: &[f32],
    c: &mut [f32],
    db: &mut [f32],
) {
    let len = m * n;
    let stride = global_size().x;
    let mut idx = global_id().x;
    while idx < len {
        let mut v = p[idx];
        for z in 1..parts {
            v += p[z * len + idx];
        }
        let v = epilogue(v, idx, idx % n, has_bias, act, gate, bias, aux);
        store(v, idx, accumulate, c);
        idx += stride;
    }
    if has_db {
        let mut r = global_id().x;
        while r < m {
            let mut d = dp[r];
            for z in 1..parts {
                d += dp[z * m + r];
            }
            store(d, r, accumulate, db);
            r += stride;
        }
    }
}

/// `db[r] = Σ_k op(A)[r, k]` (plus `db[r]` when `accumulate`), `k` in increasing order, one
/// invocation per row of `op(A)` (`A` stored `k × m` when `ta`, else `m × k`): the row sums
/// [`matmul_row_sums`] adds beside a product computed elsewhere.
#[kernel(workgroup = 256)]
pub fn gemm_row_sums(m: u32, k: u32, ta: bool, accumulate: bool, a: &[f32], db: &mut [f32]) {
    let stride = global_size().x;
    let mut r = global_id().x;
    while r < m {
        store(row_sum(m, k, ta, a, r), r, accumulate, db);
        r += stride;
    }
}

/// Columns a workgroup of [`gemm_col_sums`](mod@gemm_col_sums) sums at a time.
const COL_SUM_COLUMNS: u32 = 16;

/// The column-sum kernels, once per element type `$t` of the summed matrix (sums in `f32`).
macro_rules! col_sums_kernels {
    ($($t:ident: $(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[kernel(workgroup = 256)]
        pub fn $name(m: u32, k: u32, accumulate: bool, a: &[$t], db: &mut [f32]) {
            let s = shared::<f32, 256>();
            let t = local_id().x;
            let slice = t / 16u32;
            let mut block = workgroup_id().x;
            while block * 16u32 < m {
                let col = block * 16u32 + t % 16u32;
                let mut d = 0.0;
                if col < m {
                    let mut r0 = slice;
                    while r0 < k {
                        let mut vs = [0.0f32; 8];
                        for j in 0..8u32 {
                            if j * 16u32 < k - r0 {
                                vs[j] = a[(r0 + j * 16u32) * m + col] as f32;
                            }
                        }
                        for j in 0..8u32 {
                            if j * 16u32 < k - r0 {
                                d += vs[j];
                            }
                        }
                        r0 += 128u32;
                    }
                }
                s[t] = d;
                barrier();
                if t < 16u32 && col < m {
                    let mut total = s[t];
                    for j in 1..16u32 {
                        total += s[j * 16u32 + t];
                    }
                    store(total, col, accumulate, db);
                }
                barrier();
                block += num_workgroups().x;
            }
        }
    )*};
}

col_sums_kernels! {
    f32:
    /// `db[c] = Σ_r A[r, c]` (plus `db[c]` when `accumulate`) for `A` stored `k × m`
    /// row-major: the column sums [`gemm_row_sums`](mod@gemm_row_sums) takes with `ta` (a
    /// layer's bias gradient from its `dY`), spread over the GPU. A workgroup takes 16
    /// columns at a time and splits the rows 16 ways: slice `s` sums rows `s, s + 16, …` in
    /// increasing order (eight loads issued at a time), then the 16 slice sums are added in
    /// increasing `s`. (One invocation a column over all `k` rows ran MLP-M's 1024 columns on
    /// 4 workgroups, 20 µs on the H200.)
    gemm_col_sums;
    bf16:
    /// [`gemm_col_sums`](mod@gemm_col_sums) of a `bf16` matrix, summed in `f32` in the same
    /// order (bitwise the sums of its values widened to `f32`).
    gemm_col_sums_bf16;
    f16:
    /// [`gemm_col_sums`](mod@gemm_col_sums) of an `f16` matrix, summed in `f32` in the same
    /// order.
    gemm_col_sums_f16;
}

/// `db[c] = Σ_r a[r·m + c]` over the `k = a.len() / m` rows of `a` (`m = db.len()`
/// columns), plus `db[c]` when `accumulate`, in [`gemm_col_sums`](mod@gemm_col_sums)'s
/// order: a layer's bias gradient from its `dY` (`rows × outputs`). `a` is `f32`, `bf16`
/// or `f16` (summed in `f32`: a 16-bit `a` sums bitwise as its values widened to `f32`).
///
/// # Errors
/// [`Error::Shape`] when `a` is not whole rows of `db.len()`, a size passes a `u32` or there
/// are 2^31 columns or more; [`Error::Launch`] for another element type.
pub fn column_sums<C: Launch + ?Sized, T: Element>(
    cx: &C,
    a: &Buffer<T>,
    db: &mut Buffer<f32>,
    accumulate: impl IntoScalarArg<bool>,
) -> Result<()> {
    let m = db.len();
    if m == 0 && a.is_empty() {
        return Ok(());
    }
    if m == 0 || a.len() % m != 0 {
        return Err(Error::Shape(format!(
            "column_sums: {} elements are not rows of {m}",
            a.len()
        )));
    }
    if m > (u32::MAX / 2) as usize {
        // The kernel's column blocks `block · 16` stay below 2^32 only under this.
        return Err(Error::Shape(format!(
            "column_sums: {m} columns; it takes at most 2^31 − 1"
        )));
    }
    let (m32, k) = (
        u32_of("column_sums columns", m)?,
        u32_of("column_sums elements", a.len())?,
    );
    let blocks = m
        .div_ceil(COL_SUM_COLUMNS as usize)
        .min(MAX_GROUPS as usize) as u32;
    let (grid, rows) = (Grid::workgroups(blocks), k / m32);
    match T::DTYPE {
        DType::F32 => {
            let a = Buffer::<f32>::try_from_view(a.raw_view())?;
            gemm_col_sums::launch(cx, grid, m32, rows, accumulate, &a, db)
        }
        DType::BF16 => {
            let a = Buffer::<bf16>::try_from_view(a.raw_view())?;
            gemm_col_sums_bf16::launch(cx, grid, m32, rows, accumulate, &a, db)
        }
        DType::F16 => {
            let a = Buffer::<f16>::try_from_view(a.raw_view())?;
            gemm_col_sums_f16::launch(cx, grid, m32, rows, accumulate, &a, db)
        }
        other => Err(Error::Launch {
            kernel: "column_sums",
            reason: format!(
                "sums of `{}`; it takes `f32`, `bf16` or `f16`",
                other.name()
            ),
        }),
    }
}

/// `Σ_k op(A)[r, k]` in increasing `k` from 0 (`A` stored `k × m` when `ta`, else `m × k`):
/// one row sum of [`gemm_row_sums`](mod@gemm_row_sums), shared with the 16-bit epilogues'
/// bias gradients so both add alike.
#[device]
fn row_sum(m: u32, k: u32, ta: bool, a: &[f32], r: u32) -> f32 {
    let mut d = 0.0;
    for kk in 0..k {
        if ta {
            d += a[kk * m + r];
        } else {
            d += a[r * k + kk];
        }
    }
    d
}

/// The epilogue kernels of a mixed-precision step, once per 16-bit type `$t`: the in-place
/// epilogue of [`gemm_epilogue`](mod@gemm_epilogue) that also writes each result rounded to
/// `$t` (the next product's operand), and the same with a bias gradient's row sums beside it.
macro_rules! epilogue_cast_kernels {
    ($t:ident, $span:ident, $(#[$doc:meta])* $cast:ident, $(#[$sdoc:meta])* $sums:ident) => {
        /// Elements `first, first + stride, …` of `c`: `c ← epilogue(c)` as
        /// [`gemm_epilogue`](mod@gemm_epilogue), and `c16` the result rounded to the 16-bit type.
        /// (Its plain Rust form is unused: the kernels' host form writes 16-bit slices
        /// through its own.)
        #[allow(dead_code)]
        #[device]
        #[allow(clippy::too_many_arguments)]
        fn $span(
            first: u32, stride: u32,
            n: u32, has_bias: bool, act: u32, gate: u32, bias: &[f32], aux: &[f32],
            c: &mut [f32], c16: &mut [$t],
        ) {
            // Four elements a pass, loads first, as `gemm_epilogue`.
            let len = c.len();
            let mut base = first;
            while base < len {
                let mut vs = [0.0f32; 4];
                let mut xs = [0.0f32; 4];
                for j in 0..4u32 {
                    if j * stride < len - base {
                        let i = base + j * stride;
                        vs[j] = c[i];
                        if gate != 0 {
                            xs[j] = aux[i];
                        }
                    }
                }
                for j in 0..4u32 {
                    if j * stride < len - base {
                        let i = base + j * stride;
                        let v = epilogue_of(vs[j], xs[j], i % n, has_bias, act, gate, bias);
                        c[i] = v;
                        c16[i] = v as $t;
                    }
                }
                base += 4u32 * stride;
            }
        }

        $(#[$doc])*
        #[kernel(workgroup = 256)]
        #[allow(clippy::too_many_arguments)]
        pub fn $cast(
            n: u32, has_bias: bool, act: u32, gate: u32, bias: &[f32], aux: &[f32],
            c: &mut [f32], c16: &mut [$t],
        ) {
            $span(global_id().x, global_size().x, n, has_bias, act, gate, bias, aux, c, c16);
        }

        $(#[$sdoc])*
        #[kernel(workgroup = 256)]
        #[allow(clippy::too_many_arguments)]
        pub fn $sums(
            n: u32, has_bias: bool, act: u32, gate: u32,
            sum_groups: u32, m: u32, k: u32, accumulate: bool,
            bias: &[f32], aux: &[f32], a: &[f32], c: &mut [f32], c16: &mut [$t], db: &mut [f32],
        ) {
            // Two jobs side by side, split by workgroup (a uniform branch): the first
            // `sum_groups` workgroups sum, the others run the epilogue.
            if workgroup_id().x < sum_groups {
                let stride = sum_groups * 256u32;
                let mut r = global_id().x;
                while r < m {
                    store(row_sum(m, k, true, a, r), r, accumulate, db);
                    r += stride;
                }
            } else {
                let first = global_id().x - sum_groups * 256u32;
                let stride = global_size().x - sum_groups * 256u32;
                $span(first, stride, n, has_bias, act, gate, bias, aux, c, c16);
            }
        }
    };
}

epilogue_cast_kernels!(
    bf16,
    epilogue_span_bf16,
    /// `c ← gate(act(c + bias))` in place as [`gemm_epilogue`](mod@gemm_epilogue) (same
    /// arguments), and `c16[i] = c[i]` rounded to `bf16` (to nearest even, as
    /// `graphed_runtime::cast::cast`): the epilogue and the cast of a layer's output in one
    /// launch. A grid-stride loop.
    gemm_epilogue_cast_bf16,
    /// Two launches' work in one: the workgroups from `sum_groups` on run
    /// [`gemm_epilogue_cast_bf16`](mod@gemm_epilogue_cast_bf16) over `c` (grid-stride over
    /// themselves), and the first `sum_groups` write `db[r] = Σ_kk a[kk·m + r]` for `r < m`,
    /// `kk < k` (plus `db[r]` when `accumulate`) as [`gemm_row_sums`](mod@gemm_row_sums)
    /// with `ta`: a layer's bias gradient from its `dY` beside the gate of the layer below.
    gemm_epilogue_cast_sums_bf16
);
epilogue_cast_kernels!(
    f16,
    epilogue_span_f16,
    /// [`gemm_epilogue_cast_bf16`](mod@gemm_epilogue_cast_bf16) rounding to `f16`.
    gemm_epilogue_cast_f16,
    /// [`gemm_epilogue_cast_sums_bf16`](mod@gemm_epilogue_cast_sums_bf16) rounding to `f16`.
    gemm_epilogue_cast_sums_f16
);

/// The bias gradient a [`gemm_epilogue_cast`] launch also writes: `db[r] = Σ_kk a[kk·m + r]`
/// over `a` stored `k × m` (`m = db.len()`; a layer's `dY`, `batch × out`), in increasing
/// `kk`, plus `db` when `accumulate` — bitwise [`gemm_row_sums`](mod@gemm_row_sums) with `ta`.
pub struct ColumnSums<'a> {
    /// The matrix whose columns are summed.
    pub a: &'a Buffer<f32>,
    /// The sums, one per column of `a`.
    pub db: &'a mut Buffer<f32>,
    /// Adds into `db` instead of overwriting it (a constant or a per-step scalar).
    pub accumulate: ScalarArg<bool>,
}

/// `C ← epi(C)` in place over a row-major `C` of `cols` columns, as the
/// [`gemm_epilogue`](mod@gemm_epilogue) launch after a vendor product, and `c16` (`bf16` or
/// `f16`, `C`'s length) `C`'s result rounded to nearest even: bitwise the same as that launch
/// followed by `graphed_runtime::cast::cast(C → c16)`, in one launch (but that on wgpu an
/// `f16` NaN is the driver's: WGSL stores `f16` slices as `f16`). With `sums`, the same
/// launch also writes those column sums (of a matrix other than `C`), bitwise as a
/// [`gemm_row_sums`](mod@gemm_row_sums) launch. The epilogue cannot accumulate.
///
/// # Errors
/// [`Error::Shape`] for lengths that do not fit `cols` (`C` not whole rows, `c16` of another
/// length, a bias of other than `cols` elements, a gate of other than `C`'s, sums over a
/// matrix that is not whole rows of `db.len()`) or sizes past a `u32`; [`Error::Launch`] for
/// a 16-bit type other than `bf16` and `f16`, an accumulating epilogue, or one with neither
/// a bias nor a gate and no sums (nothing to bind its unused inputs to: an activation alone
/// is [`crate::elementwise::unary`] then the cast).
pub fn gemm_epilogue_cast<C: Launch + ?Sized, H: Element>(
    cx: &C,
    cols: usize,
    epi: &Epilogue<'_>,
    c: &mut Buffer<f32>,
    c16: &mut Buffer<H>,
    sums: Option<ColumnSums<'_>>,
) -> Result<()> {
    let op = "gemm_epilogue_cast";
    let len = c.len();
    if cols == 0 || len % cols != 0 {
        return Err(Error::Shape(format!(
            "{op}: {len} elements are not rows of {cols}"
        )));
    }
    u32_of("gemm_epilogue_cast elements", len)?;
    expect_len(op, "c16", c16.len(), len)?;
    if let Some(bias) = epi.bias {
        expect_len(op, "bias", bias.len(), cols)?;
    }
    if let Some((_, aux)) = epi.gate {
        expect_len(op, "gate", aux.len(), len)?;
    }
    let refuse = |reason: String| Err(Error::Launch { kernel: op, reason });
    if let Some(acc) = epi.accumulate {
        if !matches!(acc.erase(), graphed_runtime::ErasedScalar::Const(_, 0)) {
            return refuse("the epilogue cannot accumulate into C".into());
        }
    }
    // Unused inputs are bound to one that is given (never read).
    let Some(any) = epi
        .bias
        .or(epi.gate.map(|(_, x)| x))
        .or(sums.as_ref().map(|s| s.a))
    else {
        return refuse("an epilogue with neither a bias nor a gate".into());
    };
    let (bias, aux) = (epi.bias.unwrap_or(any), epi.gate.map_or(any, |(_, x)| x));
    let (n, has_bias, act) = (cols as u32, epi.bias.is_some(), epi.act.code());
    let gate = epi.gate.map_or(0, |(g, _)| g.code());
    let cells = epilogue_groups(len);
    macro_rules! run {
        ($t:ident, $cast:ident, $sums:ident) => {{
            let mut h = Buffer::<$t>::try_from_view(c16.raw_view())?;
            match sums {
                None => $cast::launch(
                    cx,
                    Grid::workgroups(cells),
                    n,
                    has_bias,
                    act,
                    gate,
                    bias,
                    aux,
                    c,
                    &mut h,
                ),
                Some(s) => {
                    let m = s.db.len();
                    if m == 0 || s.a.len() % m != 0 {
                        return Err(Error::Shape(format!(
                            "{op}: sums of {} elements are not rows of {m}",
                            s.a.len()
                        )));
                    }
                    u32_of("gemm_epilogue_cast sums", s.a.len())?;
                    let rows = groups(m);
                    $sums::launch(
                        cx,
                        Grid::workgroups(rows + cells),
                        n,
                        has_bias,
                        act,
                        gate,
                        rows,
                        m as u32,
                        (s.a.len() / m) as u32,
                        s.accumulate,
                        bias,
                        aux,
                        s.a,
                        c,
                        &mut h,
                        s.db,
                    )
                }
            }
        }};
    }
    match H::DTYPE {
        DType::BF16 => run!(bf16, gemm_epilogue_cast_bf16, gemm_epilogue_cast_sums_bf16),
        DType::F16 => run!(f16, gemm_epilogue_cast_f16, gemm_epilogue_cast_sums_f16),
        other => refuse(format!(
            "a 16-bit copy of `{}`; it takes `bf16` or `f16`",
            other.name()
        )),
    }
}

/// Products with `k` above this split `k` into ranges of this length (a workgroup layer each,
/// partial products summed by [`matmul_split_sum`](mod@matmul_split_sum)), so no invocation
/// loops over more than it: lavapipe (llvmpipe) gives an invocation about 65,535 loop
/// iterations in all and silently leaves its loops past them (`KNOWN_ISSUES` in
/// `tests/dsl.rs`). The rule depends on the shape alone, so every backend, replay and eager
/// run split alike; products of up to this `k` (MLP-sized ones) are one launch as before.
pub const SPLIT_K: usize = 16384;

/// The shortest `k` range one part of a product split to fill the device gets (see
/// [`Gemm::split_parts`]): below it the second pass and the partial products cost more than
/// the idle multiprocessors.
pub const FILL_MIN_CHUNK: usize = 128;

/// How a product splits `k` into parts computed side by side and summed by
/// [`matmul_split_sum`](mod@matmul_split_sum) — or, where the device sums serially
/// ([`Device::split_serial`](graphed_runtime::Device::split_serial)), by the last workgroup of
/// each tile in the same launch (see [`Gemm::split_parts`]). Products that go to
/// the vendor BLAS never split here (cuBLAS picks its own split).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Split {
    /// The rule: split `k` past [`SPLIT_K`], and fill the device's multiprocessors
    /// ([`Device::split_fill`](graphed_runtime::Device::split_fill)) where the output tiles
    /// are fewer than them.
    #[default]
    Auto,
    /// Only the [`SPLIT_K`] bound: the fill rule off for this product.
    Bounded,
    /// `k` in this many parts (ranges a multiple of 64 long, so fewer where `k` is short; more
    /// where a part would be longer than [`SPLIT_K`]). `Parts(1)` is [`Split::Bounded`].
    Parts(usize),
}

/// Products with at least this many multiply-adds (`m·n·k`) take the vendor BLAS under
/// [`Tile::Auto`]. Measured on the H200 (BENCHMARKS.md): MLP-S, whose largest product is
/// 64×256×784 (12.8 M), steps faster on the DSL kernels (57.0 vs 71.1 µs, the library adding
/// a launch for each epilogue); MLP-M's 512×1024×1024 products (537 M) step faster on cuBLAS
/// (531 vs 802 µs).
pub const VENDOR_MIN_MACS: usize = 1 << 26;

/// Under [`Tile::Auto`], products with at least this many multiply-adds take the vendor BLAS
/// where it runs them in one library call with nothing after them: no epilogue, or one that
/// fuses into the call ([`Launch::gemm_fused`]: cuBLASLt on CUDA, a bias with ReLU or none,
/// or the bias gradient). Measured on the H200 (BENCHMARKS.md, session of 2026-12-02b):
/// MLP-S with its two 12.8 M products fused on cuBLASLt replayed in 44.21 µs against 45.91 on
/// the DSL kernels; from 2^22 (its 4.2 M products too) in 50.86; MLP-M with its 5.2 M
/// ten-class products on cuBLASLt in 441.45 against 438.52.
pub const VENDOR_MIN_MACS_FUSED: usize = 1 << 23;

/// Under [`Tile::Auto`], a product that would take [`Tile::T16`] takes [`Tile::T32`] on CUDA
/// where `C` has at least this many elements. The two sum every element in the same order
/// (the same bits), so the choice is speed alone. Measured on the H200 (BENCHMARKS.md,
/// `tiles` workload, µs per product in a replayed chain): MLP-S's weight gradient
/// 256×784×64 (200,704 elements) 4.99 on T32 against 6.68 on T16; its 256×256×64 (65,536)
/// 3.87 against 3.37, and every product of 16,384 elements or fewer slower on T32. Not on
/// wgpu: T32's 16,896 bytes of workgroup memory pass WebGPU's default limit of 16 KiB.
pub const T32_MIN_OUTPUTS: usize = 1 << 17;

/// Which implementation and tiling a product uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Tile {
    /// The device's vendor BLAS for products of at least [`VENDOR_MIN_MACS`] multiply-adds
    /// (or the device's [`vendor_min_macs`](graphed_runtime::Device::vendor_min_macs)),
    /// where the device has one and the epilogue allows (cuBLAS on CUDA: see [`matmul`]);
    /// otherwise [`Tile::T64`] when the product has at least 64 tiles of 64×64, else
    /// [`Tile::T16`] — or, on CUDA, [`Tile::T32`] for at least [`T32_MIN_OUTPUTS`] elements
    /// of `C` (the two give the same bits).
    #[default]
    Auto,
    /// The device's vendor BLAS at any size where it has one and the epilogue allows;
    /// otherwise as [`Tile::Auto`].
    Vendor,
    /// 16×16 tiles ([`matmul_t16`]).
    T16,
    /// 64×64 tiles ([`matmul_t64`]).
    T64,
    /// 32×32 tiles, 2×2 per invocation ([`matmul_t32`]); chosen by [`Tile::Auto`] on CUDA
    /// only (see [`T32_MIN_OUTPUTS`]).
    T32,
}

impl Tile {
    /// The side of a resolved tiling's square tile of `C` (64 for the unresolved kinds, which
    /// [`Gemm::resolved_tile`] never returns).
    fn side(self) -> usize {
        match self {
            Tile::T16 => 16,
            Tile::T32 => 32,
            Tile::T64 | Tile::Auto | Tile::Vendor => 64,
        }
    }
}

/// The shape of a product `C[m × n] = op(A)·op(B)` with inner dimension `k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gemm {
    /// Rows of `C`.
    pub m: usize,
    /// Columns of `C`.
    pub n: usize,
    /// The inner dimension.
    pub k: usize,
    /// `A` is stored transposed (`k × m`).
    pub ta: bool,
    /// `B` is stored transposed (`n × k`).
    pub tb: bool,
    /// The tiling.
    pub tile: Tile,
    /// How the vendor BLAS multiplies `f32` inputs: [`Math::Tf32`] is an explicit opt-in to
    /// the tensor cores' TF32 (cuBLAS only; the DSL kernels always compute full `f32`).
    pub math: Math,
    /// How `k` is split ([`Split::Auto`]: by the rule of [`Gemm::split_parts`]).
    pub split: Split,
}

impl Gemm {
    /// `C = A·B`: `A` is `m × k`, `B` is `k × n`.
    pub fn nn(m: usize, n: usize, k: usize) -> Gemm {
        Gemm {
            m,
            n,
            k,
            ta: false,
            tb: false,
            tile: Tile::Auto,
            math: Math::F32,
            split: Split::Auto,
        }
    }
    /// `C = A·Bᵀ`: `A` is `m × k`, `B` is `n × k`.
    pub fn nt(m: usize, n: usize, k: usize) -> Gemm {
        Gemm {
            m,
            n,
            k,
            ta: false,
            tb: true,
            tile: Tile::Auto,
            math: Math::F32,
            split: Split::Auto,
        }
    }
    /// `C = Aᵀ·B`: `A` is `k × m`, `B` is `k × n`.
    pub fn tn(m: usize, n: usize, k: usize) -> Gemm {
        Gemm {
            m,
            n,
            k,
            ta: true,
            tb: false,
            tile: Tile::Auto,
            math: Math::F32,
            split: Split::Auto,
        }
    }
    /// The same product with tiling `tile`.
    pub fn with_tile(self, tile: Tile) -> Gemm {
        Gemm { tile, ..self }
    }

    /// The same product with `f32` inputs multiplied as `math` ([`Math::Tf32`]: an opt-in).
    pub fn with_math(self, math: Math) -> Gemm {
        Gemm { math, ..self }
    }

    /// The same product with `k` split as `split` (e.g. [`Split::Bounded`] to compare with the
    /// fill rule off, [`Split::Parts`] to force one).
    pub fn with_split(self, split: Split) -> Gemm {
        Gemm { split, ..self }
    }

    /// Output tiles of the tiling this product resolves to (workgroups of one layer).
    pub fn tiles(&self) -> usize {
        let t = self.resolved_tile().side();
        self.n.div_ceil(t).max(1) * self.m.div_ceil(t).max(1)
    }

    /// The parts the DSL kernels split `k` into on a device that fills `multiprocessors`
    /// ([`Device::split_fill`](graphed_runtime::Device::split_fill); `None`: no fill rule), 1
    /// for one pass. The rule, under [`Split::Auto`]:
    ///
    /// - `k` past [`SPLIT_K`] takes at least `⌈k / SPLIT_K⌉` parts (a bound on one
    ///   invocation's loop, on every backend);
    /// - a product of fewer [`tiles`](Gemm::tiles) than multiprocessors, with
    ///   `k ≥ 2·`[`FILL_MIN_CHUNK`], takes `⌊multiprocessors / tiles⌋` parts, at most
    ///   `⌊k / FILL_MIN_CHUNK⌋`, so tiles × parts ≤ the multiprocessors, each part busy on at
    ///   least [`FILL_MIN_CHUNK`] of `k`;
    /// - a part's range is a multiple of 64 long (the last one shorter), which may leave fewer
    ///   parts than asked for.
    ///
    /// On an H200 (132 multiprocessors) MLP-S's 64×256×784 product (64 tiles of 16×16) takes
    /// 2 parts; a 64×10×1024 one (4 tiles) 8; 512×1024×1024 (128 tiles of 64×64) stays whole.
    pub fn split_parts(&self, multiprocessors: Option<u32>) -> usize {
        self.k.div_ceil(self.k_range(multiprocessors)).max(1)
    }

    /// The length of each part's `k` range (`k` itself: one pass).
    fn k_range(&self, multiprocessors: Option<u32>) -> usize {
        let k = self.k;
        if k == 0 {
            return 1;
        }
        let bounded = k.div_ceil(SPLIT_K);
        let want = match self.split {
            Split::Bounded => 1,
            Split::Parts(p) => p,
            Split::Auto => match multiprocessors.map(|s| s as usize) {
                Some(sms) if self.tiles() < sms && k >= 2 * FILL_MIN_CHUNK => {
                    (sms / self.tiles()).min(k / FILL_MIN_CHUNK)
                }
                _ => 1,
            },
        };
        if want <= bounded {
            if bounded == 1 {
                return k;
            }
            // As long as SPLIT_K (more only past SPLIT_K², keeping the parts at most SPLIT_K).
            return k.div_ceil(SPLIT_K).next_multiple_of(64).max(SPLIT_K);
        }
        k.div_ceil(want).next_multiple_of(64)
    }

    /// The vendor-BLAS call of this product.
    fn blas(&self, accumulate: ScalarArg<bool>) -> Sgemm {
        Sgemm {
            m: self.m,
            n: self.n,
            k: self.k,
            ta: self.ta,
            tb: self.tb,
            accumulate,
            math: self.math,
        }
    }

    /// The tiling a launch of this product uses on `backend` ([`Tile::Auto`] resolved; the
    /// vendor route decided before): [`Gemm::resolved_tile`], but [`Tile::T32`] on CUDA for
    /// a product of [`Tile::Auto`] that would take [`Tile::T16`] with at least
    /// [`T32_MIN_OUTPUTS`] elements of `C`.
    pub fn resolved_tile_for(&self, backend: Option<BackendKind>) -> Tile {
        let tile = self.resolved_tile();
        if self.tile == Tile::Auto
            && tile == Tile::T16
            && self.m.saturating_mul(self.n) >= T32_MIN_OUTPUTS
            && backend == Some(BackendKind::Cuda)
        {
            Tile::T32
        } else {
            tile
        }
    }

    /// The tiling a launch of this product uses on a backend other than CUDA ([`Tile::Auto`]
    /// resolved; see [`Gemm::resolved_tile_for`]).
    pub fn resolved_tile(&self) -> Tile {
        match self.tile {
            Tile::Auto | Tile::Vendor => {
                if self.m.div_ceil(64) * self.n.div_ceil(64) >= 64 {
                    Tile::T64
                } else {
                    Tile::T16
                }
            }
            t => t,
        }
    }
}

/// What happens to each element `v = Σ_k op(A)[r, k]·op(B)[k, c]` before it is stored:
/// `v + bias[c]`, then `act`, then times `gate.0′(gate.1[r, c])`, then `+ C[r, c]` when
/// `accumulate`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Epilogue<'a> {
    /// A bias per column of `C`.
    pub bias: Option<&'a Buffer<f32>>,
    /// The activation applied after the bias.
    pub act: Act,
    /// Multiplies by the derivative of an activation at a matrix of `C`'s shape (its input;
    /// for `Relu` its output works as well): the backward of a layer's activation.
    pub gate: Option<(Act, &'a Buffer<f32>)>,
    /// Adds into `C` instead of overwriting it (a constant or a per-step scalar).
    pub accumulate: Option<ScalarArg<bool>>,
}

impl<'a> Epilogue<'a> {
    /// Plain product.
    pub fn none() -> Self {
        Epilogue::default()
    }
    /// `act(v + bias)`.
    pub fn bias_act(bias: &'a Buffer<f32>, act: Act) -> Self {
        Epilogue {
            bias: Some(bias),
            act,
            ..Default::default()
        }
    }
    /// With the accumulate flag set to `accumulate`.
    pub fn accumulate(self, accumulate: impl IntoScalarArg<bool>) -> Self {
        Epilogue {
            accumulate: Some(accumulate.into_scalar_arg()),
            ..self
        }
    }
    /// With a gate by `act′(at)`.
    pub fn gate(self, act: Act, at: &'a Buffer<f32>) -> Self {
        Epilogue {
            gate: Some((act, at)),
            ..self
        }
    }
}

/// `C = op(A)·op(B)` (plus `C` when `accumulate`, a constant or a per-step scalar) of
/// half-precision inputs (`f16` or `bf16`) with `f32` accumulation, into `C` of the inputs'
/// type or `f32`: one product op through the vendor BLAS (cuBLAS's `cublasGemmEx` on the
/// tensor cores inside the capture, like [`matmul`]'s vendor route), or on the host the
/// rounding reference [`graphed_runtime::blas::reference`] (f32 sums in order of `k`, one
/// round to nearest even into `C`). `g.tile` is ignored; `g.math` must be [`Math::F32`].
///
/// # Errors
/// [`Error::Unsupported`] on wgpu (no half-precision product kernel in the kernel language
/// yet) and on CUDA with the vendor BLAS off or `libcublas` missing; [`Error::Launch`] for
/// types or lengths that make no product.
pub fn matmul_half<C: Launch + ?Sized, I: Element, O: Element>(
    cx: &C,
    g: Gemm,
    a: &Buffer<I>,
    b: &Buffer<I>,
    c: &mut Buffer<O>,
    accumulate: impl IntoScalarArg<bool>,
) -> Result<()> {
    if graphed_runtime::blas::product(cx, &g.blas(accumulate.into_scalar_arg()), a, b, c)? {
        return Ok(());
    }
    let device = a.device();
    Err(Error::Unsupported {
        kernel: "matmul_half",
        backend: device.kind().name(),
        adapter: device.adapter(),
        feature: "a half-precision matrix product (cuBLAS on CUDA, the reference on the host)",
        instead: "run it on the CUDA backend with the vendor BLAS on (or on the host), or convert the inputs to f32 and use `matmul`",
    })
}

/// `C = act(op(A)·op(B) + bias)` (the bias broadcast over `C`'s rows) of half-precision
/// inputs into `C` of `f32` or the inputs' type, summed in `f32` and rounded once into `C`.
/// The bias is `f32`, or for a 16-bit `C` of `C`'s type (as autocast rounds a layer's bias;
/// added in `f32` at its 16-bit value). In one library call where the vendor BLAS fuses the
/// bias and activation into the product (cuBLASLt's epilogues on CUDA: [`Fused::Bias`] for
/// [`Act::Identity`], [`Fused::BiasRelu`] for [`Act::Relu`]; on the H200 it fuses them into
/// a `bf16` `C` only with a `bf16` bias), else [`matmul_half`] into `f32` (`C` itself, or for
/// a 16-bit `C` a [`Launch::scratch`] temporary) then one [`gemm_epilogue`](mod@gemm_epilogue)
/// launch (for a 16-bit `C`, [`gemm_epilogue_cast`]'s, which rounds as it stores; a 16-bit
/// bias is first widened into a temporary, one launch more). Eager and a recording take the
/// same route, so replay equals eager bitwise; the fused and the separate sums round alike
/// up to the order the library adds in.
///
/// # Errors
/// As [`matmul_half`]; [`Error::Shape`] when `bias` is not one element per column of `C`;
/// [`Error::Launch`] for a `C` or a bias of another type.
pub fn matmul_half_bias_act<C: Launch + ?Sized, I: Element, O: Element, B: Element>(
    cx: &C,
    g: Gemm,
    a: &Buffer<I>,
    b: &Buffer<I>,
    c: &mut Buffer<O>,
    bias: &Buffer<B>,
    act: Act,
) -> Result<()> {
    let op = "matmul_half_bias_act";
    expect_len(op, "bias", bias.len(), g.n)?;
    let refuse = |reason: String| Err(Error::Launch { kernel: op, reason });
    if O::DTYPE != DType::F32 && O::DTYPE != I::DTYPE {
        return refuse(format!(
            "a product of `{}` into `{}`; it writes `f32` or the inputs' type",
            I::DTYPE.name(),
            O::DTYPE.name()
        ));
    }
    if B::DTYPE != DType::F32 && B::DTYPE != O::DTYPE {
        return refuse(format!(
            "a `{}` bias for a `{}` result; it takes an `f32` bias or one of the result's type",
            B::DTYPE.name(),
            O::DTYPE.name()
        ));
    }
    let no = ScalarArg::from(false);
    let fused = match act {
        Act::Identity => Some(Fused::Bias),
        Act::Relu => Some(Fused::BiasRelu),
        _ => None,
    };
    if let (Some(f), true) = (fused, g.m > 0 && g.n > 0 && g.k > 0) {
        let blas = g.blas(no);
        if graphed_runtime::blas::product_fused(cx, &blas, a, b, c, f, bias)? {
            return Ok(());
        }
    }
    let columns = u32_of("matmul_half_bias_act columns", g.n)?;
    let bias = if B::DTYPE == DType::F32 {
        Buffer::<f32>::try_from_view(bias.raw_view())?
    } else {
        let mut wide = cx.scratch(bias.len())?;
        graphed_runtime::cast::cast(cx, bias, &mut wide)?;
        wide
    };
    if O::DTYPE == DType::F32 {
        let mut c = Buffer::<f32>::try_from_view(c.raw_view())?;
        matmul_half(cx, g, a, b, &mut c, no)?;
        let grid = Grid::workgroups(epilogue_groups(c.len()));
        return gemm_epilogue::launch(cx, grid, columns, true, act.code(), 0, &bias, &bias, &mut c);
    }
    let mut z = cx.scratch(c.len())?;
    matmul_half(cx, g, a, b, &mut z, no)?;
    gemm_epilogue_cast(cx, g.n, &Epilogue::bias_act(&bias, act), &mut z, c, None)
}

/// `C = op(A)·op(B)` with `epi`. Shapes: `A` has `m·k` elements, `B` `k·n`, `C` `m·n`.
///
/// With [`Tile::Vendor`], or [`Tile::Auto`] and at least [`VENDOR_MIN_MACS`] multiply-adds, on
/// a device whose vendor BLAS is on ([`Launch::gemm`]: cuBLAS on CUDA), the product goes there.
/// A bias (with ReLU or no activation) and [`matmul_row_sums`]'s bias gradient, with a
/// constant `false` accumulate flag, fuse into that one library call where the device fuses
/// epilogues ([`Launch::gemm_fused`]: cuBLASLt on CUDA, [`Device::vendor_fused`](graphed_runtime::Device::vendor_fused)); otherwise
/// one [`gemm_epilogue`](mod@gemm_epilogue) launch follows when there is a bias, activation
/// or gate (and one [`gemm_row_sums`](mod@gemm_row_sums) launch for [`matmul_row_sums`]).
/// An epilogue that both transforms and accumulates stays with the DSL kernel. Everywhere else it is one launch of [`matmul_t64`], [`matmul_t16`] or
/// [`matmul_t32`].
pub fn matmul<C: Launch + ?Sized>(
    cx: &C,
    g: Gemm,
    a: &Buffer<f32>,
    b: &Buffer<f32>,
    c: &mut Buffer<f32>,
    epi: &Epilogue<'_>,
) -> Result<()> {
    launch(cx, g, a, b, c, None, epi)
}

/// Like [`matmul`], and also writes the row sums of `op(A)` into `db` (`m` elements; added to
/// it when the epilogue accumulates): with `A = dY` stored `batch × out` and `op(A) = dYᵀ`,
/// that is a layer's bias gradient beside its weight gradient `dYᵀ·X`, in the same launch.
pub fn matmul_row_sums<C: Launch + ?Sized>(
    cx: &C,
    g: Gemm,
    a: &Buffer<f32>,
    b: &Buffer<f32>,
    c: &mut Buffer<f32>,
    db: &mut Buffer<f32>,
    epi: &Epilogue<'_>,
) -> Result<()> {
    expect_len("matmul_row_sums", "db", db.len(), g.m)?;
    launch(cx, g, a, b, c, Some(db), epi)
}

/// `$kernel::launch($args)` for the kernel of `tile` among the tilings' `(t64, t32, t16)`,
/// which take the same arguments.
macro_rules! by_tile {
    ($tile:expr, ($t64:ident, $t32:ident, $t16:ident), ($($args:tt)*)) => {
        match $tile {
            Tile::T64 => $t64::launch($($args)*),
            Tile::T32 => $t32::launch($($args)*),
            _ => $t16::launch($($args)*),
        }
    };
}

fn launch<C: Launch + ?Sized>(
    cx: &C,
    g: Gemm,
    a: &Buffer<f32>,
    b: &Buffer<f32>,
    c: &mut Buffer<f32>,
    db: Option<&mut Buffer<f32>>,
    epi: &Epilogue<'_>,
) -> Result<()> {
    let op = "matmul";
    let mn = expect_product(op, (g.m, g.n, g.k), a.len(), b.len(), c.len())?;
    if let Some(bias) = epi.bias {
        expect_len(op, "bias", bias.len(), g.n)?;
    }
    if let Some((_, aux)) = epi.gate {
        expect_len(op, "gate", aux.len(), mn)?;
    }
    let dev = a.device();
    let one_call = dev.vendor_fused() && fusion(epi, db.is_some()).is_ok();
    let vendor_from = dev.vendor_min_macs().unwrap_or(if one_call {
        VENDOR_MIN_MACS_FUSED as u64
    } else {
        VENDOR_MIN_MACS as u64
    });
    let db = if g.tile == Tile::Vendor
        || (g.tile == Tile::Auto && mn.saturating_mul(g.k) as u64 >= vendor_from)
    {
        match vendor(cx, g, a, b, c, db, epi)? {
            Routed::Done => return Ok(()),
            Routed::Declined(db) => db,
        }
    } else {
        db
    };
    // Same bits either way: T32 where it was measured faster (`T32_MIN_OUTPUTS`).
    let g = Gemm {
        tile: g.resolved_tile_for(cx.backend_kind()),
        ..g
    };
    let tile = g.resolved_tile();
    let t = tile.side();
    let (gx, gy) = (g.n.div_ceil(t), g.m.div_ceil(t));
    if gx > 65535 || gy > 65535 {
        return Err(Error::Shape(format!(
            "{op}: {}×{} needs {gx}×{gy} workgroups, more than 65535 in a dimension",
            g.m, g.n
        )));
    }
    let (gx, gy) = (gx.max(1) as u32, gy.max(1) as u32);
    let kc = g.k_range(a.device().split_fill());
    if kc < g.k {
        return split_k(cx, g, kc, tile, (gx, gy), a, b, c, db, epi);
    }
    let grid = Grid::workgroups_2d(gx, gy);
    let e = epi.args(a);
    let has_db = db.is_some();
    let mut empty = None;
    let db = db_or_empty(db, c, &mut empty)?;
    let (m, n, k) = (g.m as u32, g.n as u32, g.k as u32);
    by_tile!(
        tile,
        (matmul_t64, matmul_t32, matmul_t16),
        (
            cx,
            grid,
            m,
            n,
            k,
            k,
            g.ta,
            g.tb,
            e.has_bias,
            e.act,
            e.gate,
            e.accumulate,
            has_db,
            a,
            b,
            e.bias,
            e.aux,
            c,
            db,
        )
    )
}

/// An [`Epilogue`] as a product kernel's arguments.
struct EpilogueArgs<'a> {
    has_bias: bool,
    act: u32,
    /// The gate's activation code, 0 for none.
    gate: u32,
    bias: &'a Buffer<f32>,
    aux: &'a Buffer<f32>,
    accumulate: ScalarArg<bool>,
}

impl Epilogue<'_> {
    /// The kernel arguments of this epilogue, an unused `bias` or `aux` bound to `unused`
    /// (never read).
    fn args<'s>(&'s self, unused: &'s Buffer<f32>) -> EpilogueArgs<'s> {
        EpilogueArgs {
            has_bias: self.bias.is_some(),
            act: self.act.code(),
            gate: self.gate.map(|(act, _)| act.code()).unwrap_or(0),
            bias: self.bias.unwrap_or(unused),
            aux: self.gate.map(|(_, x)| x).unwrap_or(unused),
            accumulate: self.accumulate.unwrap_or(ScalarArg::from(false)),
        }
    }
}

/// `db`, or (a kernel's unused row sums) an empty view past the end of `c`, kept in `empty`.
fn db_or_empty<'d>(
    db: Option<&'d mut Buffer<f32>>,
    c: &Buffer<f32>,
    empty: &'d mut Option<Buffer<f32>>,
) -> Result<&'d mut Buffer<f32>> {
    Ok(match db {
        Some(d) => d,
        None => empty.insert(c.slice(c.len()..c.len())?),
    })
}

/// A product split by [`Gemm::split_parts`]: layer `z` of one launch computes the raw partial
/// product of the `k` range `[z·kc, (z + 1)·kc)` into a scratch buffer, and
/// [`matmul_split_sum`](mod@matmul_split_sum) adds the ranges in order and applies the
/// epilogue — in a second launch, or, where the device sums serially
/// ([`Device::split_serial`](graphed_runtime::Device::split_serial), opt-in on CUDA) and the
/// context has counters ([`Launch::counters`]), in the same launch by the last workgroup of
/// each tile (the `*_serial` kernels), the same sums in the same order.
#[allow(clippy::too_many_arguments)]
fn split_k<C: Launch + ?Sized>(
    cx: &C,
    g: Gemm,
    kc: usize,
    tile: Tile,
    (gx, gy): (u32, u32),
    a: &Buffer<f32>,
    b: &Buffer<f32>,
    c: &mut Buffer<f32>,
    db: Option<&mut Buffer<f32>>,
    epi: &Epilogue<'_>,
) -> Result<()> {
    let parts = g.k.div_ceil(kc);
    if parts > 65535 {
        return Err(Error::Shape(format!(
            "matmul: {}×{}×{} split into {parts} parts, more than 65535 workgroup layers",
            g.m, g.n, g.k
        )));
    }
    let (mn, m) = (g.m * g.n, g.m);
    let has_db = db.is_some();
    let dlen = if has_db { parts * m } else { 0 };
    let plen = parts
        .checked_mul(mn)
        .and_then(|v| v.checked_add(dlen))
        .filter(|&v| u32::try_from(v).is_ok())
        .ok_or_else(|| {
            Error::Shape(format!(
                "matmul: {}×{}×{} needs {parts} partial products of {mn} elements, more than 2^32",
                g.m, g.n, g.k
            ))
        })?;
    let scratch = cx.scratch(plen.max(1))?;
    let mut pc = scratch.slice(0..parts * mn)?;
    let mut pd = scratch.slice(parts * mn..parts * mn + dlen)?;
    let grid = Grid::workgroups_3d(gx, gy, parts as u32);
    let (mu, nu, ku, kcu) = (g.m as u32, g.n as u32, g.k as u32, kc as u32);
    let no = false;
    let e = epi.args(a);
    let mut empty = None;
    let db = db_or_empty(db, c, &mut empty)?;
    let counters = if a.device().split_serial() {
        cx.counters(gx as usize * gy as usize)?
    } else {
        None
    };
    if let Some(mut cnt) = counters {
        let parts = parts as u32;
        return by_tile!(
            tile,
            (matmul_t64_serial, matmul_t32_serial, matmul_t16_serial),
            (
                cx,
                grid,
                mu,
                nu,
                ku,
                kcu,
                g.ta,
                g.tb,
                no,
                0u32,
                0u32,
                no,
                has_db,
                a,
                b,
                e.bias,
                e.aux,
                &mut pc,
                &mut pd,
                parts,
                e.has_bias,
                e.act,
                e.gate,
                e.accumulate,
                c,
                db,
                &mut cnt,
            )
        );
    }
    by_tile!(
        tile,
        (matmul_t64, matmul_t32, matmul_t16),
        (
            cx, grid, mu, nu, ku, kcu, g.ta, g.tb, no, 0u32, 0u32, no, has_db, a, b, a, a, &mut pc,
            &mut pd,
        )
    )?;
    matmul_split_sum::launch(
        cx,
        Grid::workgroups(groups(mn.max(m))),
        mu,
        nu,
        parts as u32,
        e.has_bias,
        e.act,
        e.gate,
        e.accumulate,
        has_db,
        &pc,
        &pd,
        e.bias,
        e.aux,
        c,
        db,
    )
}

enum Routed<'d> {
    Done,
    Declined(Option<&'d mut Buffer<f32>>),
}

/// How `epi` (and row sums into a bias gradient, `has_db`) runs with a vendor product in one
/// library call: `Ok(None)` nothing to fuse, `Ok(Some(f))` fused as `f`, `Err(())` not in one
/// call (the epilogue or row sums follow as launches, or the DSL kernel runs it all).
fn fusion(epi: &Epilogue<'_>, has_db: bool) -> std::result::Result<Option<Fused>, ()> {
    let never_accumulates = epi
        .accumulate
        .is_none_or(|a| matches!(a.erase(), graphed_runtime::ErasedScalar::Const(_, 0)));
    match (epi.bias.is_some(), epi.act, epi.gate.is_some(), has_db) {
        (false, Act::Identity, false, false) => Ok(None),
        _ if !never_accumulates => Err(()),
        (true, Act::Identity, false, false) => Ok(Some(Fused::Bias)),
        (true, Act::Relu, false, false) => Ok(Some(Fused::BiasRelu)),
        (false, Act::Identity, false, true) => Ok(Some(Fused::BiasGrad)),
        _ => Err(()),
    }
}

/// The product through the vendor BLAS, then the epilogue and row sums as launches of their
/// own. Declines (running nothing) where the device has no vendor BLAS, or the epilogue both
/// transforms and accumulates (that would need a temporary).
fn vendor<'d, C: Launch + ?Sized>(
    cx: &C,
    g: Gemm,
    a: &Buffer<f32>,
    b: &Buffer<f32>,
    c: &mut Buffer<f32>,
    db: Option<&'d mut Buffer<f32>>,
    epi: &Epilogue<'_>,
) -> Result<Routed<'d>> {
    let accumulate = epi.accumulate.unwrap_or(ScalarArg::from(false));
    let transforms = epi.bias.is_some() || epi.act != Act::Identity || epi.gate.is_some();
    let never_accumulates = matches!(
        accumulate.erase(),
        graphed_runtime::ErasedScalar::Const(_, 0)
    );
    if g.m == 0 || g.n == 0 || g.k == 0 || (transforms && !never_accumulates) {
        return Ok(Routed::Declined(db));
    }
    // One library call where it fuses the epilogue (cuBLASLt on CUDA): a bias, with ReLU
    // or none, or the bias gradient beside the product. Else the product, then the launches.
    if let Ok(Some(f)) = fusion(epi, db.is_some()) {
        let v = match (&db, epi.bias) {
            (Some(db), _) => &**db,
            (None, Some(bias)) => bias,
            (None, None) => unreachable!("a fusion has its vector"),
        };
        if graphed_runtime::blas::product_fused(cx, &g.blas(accumulate), a, b, c, f, v)? {
            return Ok(Routed::Done);
        }
    }
    if !graphed_runtime::blas::product(cx, &g.blas(accumulate), a, b, c)? {
        return Ok(Routed::Declined(db));
    }
    if let Some(db) = db {
        let (m, k) = (g.m as u32, g.k as u32);
        // Grid-stride kernels: at most `MAX_GROUPS` workgroups whatever the shape.
        let rows = Grid::workgroups(crate::shape::groups(g.m));
        gemm_row_sums::launch(cx, rows, m, k, g.ta, accumulate, a, db)?;
    }
    if transforms {
        let gate = epi.gate.map(|(act, _)| act.code()).unwrap_or(0);
        // Unused inputs are bound to `a` (never read).
        let bias = epi.bias.unwrap_or(a);
        let aux = epi.gate.map(|(_, x)| x).unwrap_or(a);
        let cells = Grid::workgroups(epilogue_groups(g.m * g.n));
        gemm_epilogue::launch(
            cx,
            cells,
            g.n as u32,
            epi.bias.is_some(),
            epi.act.code(),
            gate,
            bias,
            aux,
            c,
        )?;
    }
    Ok(Routed::Done)
}
