//! `ldmatrix_x4` (the kernel language's read of four 8×8 matrices of 16-bit values from
//! workgroup memory into `mma_m16n8k16`'s fragment registers: PTX's `ldmatrix` on CUDA sm_75+,
//! an exchange through workgroup memory elsewhere) on every backend: against the language's
//! definition in plain Rust over random rows (unaligned ones, and past the array's end, which
//! are aligned down and clamped), twice in a uniform loop; and as the fragments of
//! `mma_m16n8k16`, the same words and the same sums as fragments read element by element;
//! `ldmatrix_x4_trans` likewise, against its definition and as the `b` fragments of a `B`
//! stored with `k` outer.
//! Inputs are fresh random values; outputs are poisoned before each run.
//!
//! Tolerances: none. The call moves bits; the two products take the same fragments in the
//! same order on one backend, so they agree bitwise.

mod common;

use common::{on_every_backend, rng};
use graphed::prelude::*;
use graphed::KernelDef;
use rand::Rng;

const POISON: u32 = 0xDEAD_BEEF;

/// Words of `gather_rows`'s workgroup array.
const WORDS: usize = 256;

/// Each workgroup of 64 loads `x[256w ..]` into a workgroup array of 256 words; in step `s`
/// (two steps) invocation `i` names row `rows[2(64w + i) + s]` and writes the four words it
/// receives to `out[8(64w + i) + 4s ..]` — from `ldmatrix_x4_trans` where `trans` is 1.
#[kernel(workgroup = 64)]
pub fn gather_rows(trans: u32, x: &[u32], rows: &[u32], out: &mut [u32]) {
    let t = shared::<u32, 256>();
    let i = local_id().x;
    let g = workgroup_id().x * 64 + i;
    for q in 0..4u32 {
        t[i + 64 * q] = x[workgroup_id().x * 256 + i + 64 * q];
    }
    barrier();
    let mut w = [0u32; 4];
    for s in 0..2u32 {
        if trans == 1 {
            ldmatrix_x4_trans(t, rows[2 * g + s], &mut w);
        } else {
            ldmatrix_x4(t, rows[2 * g + s], &mut w);
        }
        for j in 0..4u32 {
            out[8 * g + 4 * s + j] = w[j];
        }
    }
}

/// The `bf16` fragment `[T; 8]` held by the words `w` (`a[2i]` the low half of `w[i]`).
#[device]
fn frag8(w0: u32, w1: u32, w2: u32, w3: u32) -> [bf16; 8] {
    let mut f = [0.0f32 as bf16; 8];
    f[0] = bf16::from_bits(w0);
    f[1] = bf16::from_bits(w0 >> 16u32);
    f[2] = bf16::from_bits(w1);
    f[3] = bf16::from_bits(w1 >> 16u32);
    f[4] = bf16::from_bits(w2);
    f[5] = bf16::from_bits(w2 >> 16u32);
    f[6] = bf16::from_bits(w3);
    f[7] = bf16::from_bits(w3 >> 16u32);
    f
}

/// The `bf16` fragment `[T; 4]` held by the words `w0`, `w1`.
#[device]
fn frag4(w0: u32, w1: u32) -> [bf16; 4] {
    let mut f = [0.0f32 as bf16; 4];
    f[0] = bf16::from_bits(w0);
    f[1] = bf16::from_bits(w0 >> 16u32);
    f[2] = bf16::from_bits(w1);
    f[3] = bf16::from_bits(w1 >> 16u32);
    f
}

/// Group `q` (32 invocations; two per workgroup) stages a 16×16 tile of `A` (`a`, 128 words
/// from `128q`: row `r`'s values `2c, 2c + 1` in word `8r + c`) and 16 columns of `B` with `k`
/// inner (`b`, the same layout) in workgroup memory, then reads `mma_m16n8k16`'s fragments
/// two ways: element by element by the layout of `graphed_lang::kernel::mma`, and with
/// `ldmatrix_x4` (one call for `a`, one for both 8-column blocks of `b`); and the `b`
/// fragments a third way, by `ldmatrix_x4_trans` from `bk`, the same `B` stored with `k`
/// outer (row `k`'s values `2c, 2c + 1` in word `8k + c`). Invocation `g` writes the 8 words
/// read directly, the 8 from `ldmatrix_x4` and the 4 from `ldmatrix_x4_trans` to
/// `words[20g ..]`, and `D = A·B` of both 8-column blocks each way to `d[24g ..]` (direct
/// block 0, block 1, then from `ldmatrix_x4`, then with the transposed read's `b`).
#[kernel(workgroup = 64)]
pub fn frags_both_ways(a: &[u32], b: &[u32], bk: &[u32], words: &mut [u32], d: &mut [f32]) {
    let sa = shared::<u32, 256>();
    let sb = shared::<u32, 256>();
    let sk = shared::<u32, 256>();
    let i = local_id().x;
    let gi = global_id().x;
    let wg = workgroup_id().x;
    for q in 0..4u32 {
        sa[i + 64 * q] = a[wg * 256 + i + 64 * q];
        sb[i + 64 * q] = b[wg * 256 + i + 64 * q];
        sk[i + 64 * q] = bk[wg * 256 + i + 64 * q];
    }
    barrier();
    let lane = i % 32;
    let base = (i / 32) * 128;
    let g = lane / 4;
    let t = lane % 4;
    let j = lane / 8;
    let r = lane % 8;
    // Element by element.
    let fa = frag8(
        sa[base + g * 8 + t],
        sa[base + (g + 8) * 8 + t],
        sa[base + g * 8 + t + 4],
        sa[base + (g + 8) * 8 + t + 4],
    );
    let fb0 = frag4(sb[base + g * 8 + t], sb[base + g * 8 + t + 4]);
    let fb1 = frag4(sb[base + (8 + g) * 8 + t], sb[base + (8 + g) * 8 + t + 4]);
    // By `ldmatrix_x4`: lane `8j + r` names row `r + 8(j % 2)`, chunk `j / 2` of `A`, and
    // column `8(j / 2) + r`, chunk `j % 2` of `B`.
    let mut wa = [0u32; 4];
    let mut wb = [0u32; 4];
    ldmatrix_x4(sa, base + (r + 8 * (j % 2)) * 8 + 4 * (j / 2), &mut wa);
    ldmatrix_x4(sb, base + (8 * (j / 2) + r) * 8 + 4 * (j % 2), &mut wb);
    // By `ldmatrix_x4_trans`: lane `8j + r` names row `k = r + 8(j % 2)` of `B` stored with
    // `k` outer, at its chunk of columns `8(j / 2) ..`.
    let mut wk = [0u32; 4];
    ldmatrix_x4_trans(sk, base + (r + 8 * (j % 2)) * 8 + 4 * (j / 2), &mut wk);
    let la = frag8(wa[0], wa[1], wa[2], wa[3]);
    let lb0 = frag4(wb[0], wb[1]);
    let lb1 = frag4(wb[2], wb[3]);
    let kb0 = frag4(wk[0], wk[1]);
    let kb1 = frag4(wk[2], wk[3]);
    for e in 0..4u32 {
        words[20 * gi + 8 + e] = wa[e];
        words[20 * gi + 12 + e] = wb[e];
        words[20 * gi + 16 + e] = wk[e];
    }
    words[20 * gi] = sa[base + g * 8 + t];
    words[20 * gi + 1] = sa[base + (g + 8) * 8 + t];
    words[20 * gi + 2] = sa[base + g * 8 + t + 4];
    words[20 * gi + 3] = sa[base + (g + 8) * 8 + t + 4];
    words[20 * gi + 4] = sb[base + g * 8 + t];
    words[20 * gi + 5] = sb[base + g * 8 + t + 4];
    words[20 * gi + 6] = sb[base + (8 + g) * 8 + t];
    words[20 * gi + 7] = sb[base + (8 + g) * 8 + t + 4];
    let mut d0 = [0.0f32; 4];
    let mut d1 = [0.0f32; 4];
    let mut e0 = [0.0f32; 4];
    let mut e1 = [0.0f32; 4];
    let mut k0 = [0.0f32; 4];
    let mut k1 = [0.0f32; 4];
    mma_m16n8k16(&fa, &fb0, &mut d0);
    mma_m16n8k16(&fa, &fb1, &mut d1);
    mma_m16n8k16(&la, &lb0, &mut e0);
    mma_m16n8k16(&la, &lb1, &mut e1);
    mma_m16n8k16(&la, &kb0, &mut k0);
    mma_m16n8k16(&la, &kb1, &mut k1);
    for e in 0..4u32 {
        d[24 * gi + e] = d0[e];
        d[24 * gi + 4 + e] = d1[e];
        d[24 * gi + 8 + e] = e0[e];
        d[24 * gi + 12 + e] = e1[e];
        d[24 * gi + 16 + e] = k0[e];
        d[24 * gi + 20 + e] = k1[e];
    }
}

fn all_kernels() -> Vec<&'static KernelDef> {
    vec![&gather_rows::DEF, &frags_both_ways::DEF]
}

/// What `gather_rows` writes: the definition of `graphed_lang::kernel::ldmatrix`.
fn gather_reference(trans: bool, x: &[u32], rows: &[u32], groups: usize) -> Vec<u32> {
    let mut out = vec![POISON; groups * 64 * 8];
    for w in 0..groups {
        let t = &x[w * WORDS..(w + 1) * WORDS];
        for s in 0..2 {
            // Each invocation's row, aligned down to 4 words and kept inside the array.
            let row = |i: usize| ((rows[2 * (64 * w + i) + s] & !3) as usize).min(WORDS - 4);
            for i in 0..64 {
                let (base, lane) = (i - i % 32, i % 32);
                let (g, q) = (lane / 4, lane % 4);
                for j in 0..4 {
                    out[8 * (64 * w + i) + 4 * s + j] = if trans {
                        // Value `g` (half `g % 2` of word `g / 2`) of rows `2q`, `2q + 1`.
                        let half = |r: usize| {
                            (t[row(base + 8 * j + r) + g / 2] >> (16 * (g % 2))) & 0xffff
                        };
                        half(2 * q) | (half(2 * q + 1) << 16)
                    } else {
                        t[row(base + 8 * j + g) + q]
                    };
                }
            }
        }
    }
    out
}

#[test]
fn every_lane_receives_its_word_of_the_rows_its_group_named() {
    let mut r = rng("every_lane_receives_its_word_of_the_rows_its_group_named");
    on_every_backend(|dev| {
        for (groups, trans) in [(1usize, false), (3, false), (1, true), (3, true)] {
            let x: Vec<u32> = (0..groups * WORDS).map(|_| r.random::<u32>() | 1).collect();
            // Aligned rows, unaligned ones (aligned down), the last row, and rows past the
            // end (clamped to it), in a random mix.
            let rows: Vec<u32> = (0..groups * 64 * 2)
                .map(|_| match r.random_range(0..5) {
                    0 => 4 * r.random_range(0..64u32),
                    1 => r.random_range(0..256u32),
                    2 => 252,
                    3 => r.random_range(253..100_000u32),
                    _ => u32::MAX - r.random_range(0..4u32),
                })
                .collect();
            let xb = dev.upload(&x).unwrap();
            let rb = dev.upload(&rows).unwrap();
            let mut out = dev.upload(&vec![POISON; groups * 64 * 8]).unwrap();
            let grid = Grid::workgroups(groups as u32);
            gather_rows::launch(dev, grid, u32::from(trans), &xb, &rb, &mut out).unwrap();
            let want = gather_reference(trans, &x, &rows, groups);
            let got = out.to_host().unwrap();
            let bad: Vec<String> = got
                .iter()
                .zip(&want)
                .enumerate()
                .filter(|(_, (g, w))| g != w)
                .map(|(j, (g, w))| format!("[{j}] got {g:#x}, want {w:#x}"))
                .take(6)
                .collect();
            assert!(
                bad.is_empty(),
                "{}: {groups} workgroups, trans {trans}:\n  {}",
                dev.kind(),
                bad.join("\n  ")
            );
        }
    });
}

/// A random `bf16` of moderate size as its 16 bits.
fn bf16_bits(r: &mut impl Rng) -> u32 {
    u32::from(bf16::from_f32(r.random_range(-4.0f32..4.0)).to_bits())
}

#[test]
fn its_words_are_the_fragments_of_mma_and_give_the_same_sums() {
    let mut r = rng("its_words_are_the_fragments_of_mma_and_give_the_same_sums");
    on_every_backend(|dev| {
        let groups = 4usize; // two workgroups
        let words = |r: &mut rand::rngs::StdRng| -> Vec<u32> {
            (0..groups * 128)
                .map(|_| bf16_bits(r) | (bf16_bits(r) << 16))
                .collect()
        };
        let (a, b) = (words(&mut r), words(&mut r));
        // `B` of each group with `k` outer: value `k` of column `c` of `b` (row `c`'s word
        // `k / 2`, half `k % 2`) at row `k`, value `c` of `bk`.
        let half = |w: &[u32], i: usize| (w[i / 2] >> (16 * (i % 2))) & 0xffff;
        let bk: Vec<u32> = (0..groups * 128)
            .map(|i| {
                let (q, k, c2) = (i / 128, (i % 128) / 8, 2 * (i % 8));
                let col = |c: usize| half(&b[128 * q + 8 * c..], k);
                col(c2) | (col(c2 + 1) << 16)
            })
            .collect();
        let up = |v: &[u32]| dev.upload(v).unwrap();
        let (ab, bb, kb) = (up(&a), up(&b), up(&bk));
        let mut wo = dev.upload(&vec![POISON; groups * 32 * 20]).unwrap();
        let mut d = dev.upload(&vec![f32::NAN; groups * 32 * 24]).unwrap();
        let grid = Grid::workgroups(groups as u32 / 2);
        frags_both_ways::launch(dev, grid, &ab, &bb, &kb, &mut wo, &mut d).unwrap();
        let (wo, d) = (wo.to_host().unwrap(), d.to_host().unwrap());
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for inv in 0..groups * 32 {
            let (w, s) = (&wo[20 * inv..20 * inv + 20], &d[24 * inv..24 * inv + 24]);
            let at = format!("{}: invocation {inv}: words {w:x?}, sums {s:?}", dev.kind());
            assert!(w.iter().all(|&v| v != POISON), "{at}");
            assert_eq!(w[..8], w[8..16], "{at}: element reads, then ldmatrix_x4");
            assert_eq!(
                w[4..8],
                w[16..],
                "{at}: `b` directly, then by ldmatrix_x4_trans"
            );
            assert!(s.iter().all(|v| v.is_finite()), "{at}");
            assert_eq!(bits(&s[..8]), bits(&s[8..16]), "{at}: ldmatrix_x4's sums");
            assert_eq!(
                bits(&s[..8]),
                bits(&s[16..]),
                "{at}: ldmatrix_x4_trans's sums"
            );
        }
        // The sums are `A·B`: one element checked against f64 per group (row g = 0 of lane
        // 0, column 0: acc[0] of block 0).
        let val = |w: u32, hi: bool| {
            f64::from(bf16::from_bits((if hi { w >> 16 } else { w }) as u16).to_f32())
        };
        for q in 0..groups {
            let want: f64 = (0..16)
                .map(|k| val(a[128 * q + k / 2], k % 2 == 1) * val(b[128 * q + k / 2], k % 2 == 1))
                .sum();
            let got = f64::from(d[24 * 32 * q]);
            let scale: f64 = (0..16)
                .map(|k| {
                    (val(a[128 * q + k / 2], k % 2 == 1) * val(b[128 * q + k / 2], k % 2 == 1))
                        .abs()
                })
                .sum();
            assert!(
                (got - want).abs() <= scale * 2f64.powi(-18),
                "{}: group {q}: {got} against {want}",
                dev.kind()
            );
        }
    });
}

#[test]
fn every_kernel_wgsl_is_valid_per_naga() {
    common::assert_wgsl_valid(&all_kernels());
}

#[test]
fn every_kernel_cuda_compiles_with_nvrtc() {
    common::assert_cuda_compiles(&all_kernels());
}

/// On sm_75 and later (here `compute_80`) each call is one `ldmatrix` of four matrices (with
/// `.trans` for `ldmatrix_x4_trans`), its
/// words kept in registers (no local memory), and the exchange of the portable form is gone;
/// before sm_75 (`compute_70`, where the NVRTC still takes it) the rows go through warp
/// shuffles instead.
#[test]
fn on_cuda_each_call_is_one_ldmatrix() {
    if !common::nvrtc_enabled() {
        return;
    }
    let ptx = graphed::nvrtc::compile(&frags_both_ways::DEF, "compute_80").unwrap();
    assert_eq!(
        ptx.matches("ldmatrix.sync.aligned.m8n8.x4.shared.b16")
            .count(),
        2,
        "{ptx}"
    );
    assert_eq!(
        ptx.matches("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16")
            .count(),
        1,
        "{ptx}"
    );
    assert!(!ptx.contains(".local"), "PTX uses local memory:\n{ptx}");
    // The kernel library's streaming MMA product: 8 calls a half-step, in registers.
    for k in [
        &graphed::kernels::matmul_mma::matmul_mma_async_bf16::DEF,
        &graphed::kernels::matmul_mma::matmul_mma_async_f16::DEF,
    ] {
        let ptx = graphed::nvrtc::compile(k, "compute_80").unwrap();
        let calls = ptx
            .matches("ldmatrix.sync.aligned.m8n8.x4.shared.b16")
            .count();
        assert!(calls >= 8 && calls % 8 == 0, "{}: {calls} ldmatrix", k.name);
        assert!(!ptx.contains(".local"), "{} uses local memory", k.name);
        // The shared addresses of `ldmatrix` and `cp.async` come from the workgroup
        // arrays' symbols, with no conversion from a generic address in the loop; every
        // `cp.async` copies a whole chunk (no zero-fill operand to compute).
        assert_eq!(ptx.matches("cvta.to.shared").count(), 0, "{}", k.name);
        let copies: Vec<&str> = ptx
            .lines()
            .filter(|l| l.contains("cp.async.cg.shared.global"))
            .collect();
        assert!(!copies.is_empty(), "{}", k.name);
        for l in copies {
            assert!(l.trim_end().ends_with("], 16;"), "{}: {l}", k.name);
        }
    }
    // CUDA 13's NVRTC targets sm_75 and later only (the H100 machine's refused `compute_70`,
    // seventh session of 2026-12-07); where it still takes sm_70 (CUDA 12), the shuffles
    // stand in for `ldmatrix`.
    match graphed::nvrtc::compile(&gather_rows::DEF, "compute_70") {
        Ok(old) => {
            assert!(!old.contains("ldmatrix"), "{old}");
            assert!(old.contains("shfl.sync"), "{old}");
        }
        Err(e @ graphed::Error::Compile { .. }) => {
            // The option refused, not the source: a compile error of the shuffle form is
            // `NVRTC_ERROR_COMPILATION` and fails here.
            let msg = e.to_string();
            assert!(
                msg.contains("NVRTC_ERROR_INVALID_OPTION") && msg.contains("gpu-architecture"),
                "{msg}"
            );
        }
        Err(e) => panic!("{e}"),
    }
}
