//! `mma_m16n8k16` on every backend, and the tiled product built on it
//! (`graphed::kernels::matmul_mma`).
//!
//! Every result is compared with an `f64` oracle (`C + Σ_k A·B`, exact products) within
//! `TOL_MMA · (|C| + Σ_k |A·B|)` per element (`TOL_MMA = 2^-18`: the tensor cores' order and
//! intermediate precision are unspecified; the portable form's 16 sequential `f32` sums are
//! within 16·2^-24 of it). The portable form — the host, WGSL, CUDA before sm_80 — is also
//! compared **bitwise** with its definition in plain Rust (`C` plus the products added one at
//! a time in increasing `k`, each sum rounded to `f32`), so the host and wgpu agree bitwise.
//! On the CUDA backend on sm_80 and later the tensor cores run, held to the tolerance only.

mod common;

use common::{on_every_backend, rng};
use graphed::kernels::matmul_mma::{
    matmul_mma, matmul_mma_async_bf16, MmaGemm, MmaTile, WORDS_TRANSPOSE_MIN_K,
};
use graphed::prelude::*;
use graphed::testing::{floats, poisoned};
use graphed::BackendKind;
use rand::Rng;

/// Relative tolerance of one `mma_m16n8k16` against the `f64` oracle (see the module docs).
const TOL_MMA: f64 = 1.0 / (1u64 << 18) as f64;

/// Fragments of `A` (row-major 16×16 at `q·256`), `B` (row-major 16×8 at `q·128`) and `C`
/// (16×8 at `q·128`) by the layout of `graphed_lang::kernel::mma`; `reps` calls in a row
/// (each adds `A·B` again); `D` stored like `C`. Group `q` is invocations `32q .. 32q + 31`.
macro_rules! mma_once {
    ($name:ident, $t:ident) => {
        #[kernel(workgroup = 64)]
        pub fn $name(reps: u32, a: &[$t], b: &[$t], c: &[f32], d: &mut [f32]) {
            let gi = global_id().x;
            let q = gi / 32;
            let lane = gi % 32;
            let g = lane / 4;
            let t = lane % 4;
            let mut fa = [0.0f32 as $t; 8];
            let mut fb = [0.0f32 as $t; 4];
            let mut acc = [0.0f32; 4];
            for i in 0..8u32 {
                fa[i] = a[q * 256 + (g + 8 * ((i / 2) % 2)) * 16 + 2 * t + i % 2 + 8 * (i / 4)];
            }
            for i in 0..4u32 {
                fb[i] = b[q * 128 + (2 * t + i % 2 + 8 * (i / 2)) * 8 + g];
                acc[i] = c[q * 128 + (g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
            }
            for r in 0..reps {
                mma_m16n8k16(&fa, &fb, &mut acc);
            }
            for i in 0..4u32 {
                d[q * 128 + (g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = acc[i];
            }
        }
    };
}

mma_once!(mma_once_bf16, bf16);
mma_once!(mma_once_f16, f16);

/// Groups per launch (two per workgroup of 64).
const GROUPS: usize = 6;

/// Random 16-bit values of `A`, `B` as `f32` (exact) and `C`.
struct Case {
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

fn case(rng: &mut impl Rng, round: impl Fn(f32) -> f32) -> Case {
    let a = floats(rng, GROUPS * 256, -2.0, 2.0);
    let b = floats(rng, GROUPS * 128, -2.0, 2.0);
    Case {
        a: a.into_iter().map(&round).collect(),
        b: b.into_iter().map(&round).collect(),
        c: floats(rng, GROUPS * 128, -4.0, 4.0),
    }
}

/// The portable form's definition (`reps` calls) and the `f64` oracle with its error scale,
/// per element of `D`.
fn expected(cs: &Case, reps: u32) -> (Vec<f32>, Vec<f64>, Vec<f64>) {
    let mut portable = cs.c.clone();
    let mut exact: Vec<f64> = cs.c.iter().map(|&v| v as f64).collect();
    let mut scale: Vec<f64> = cs.c.iter().map(|&v| (v as f64).abs()).collect();
    for _ in 0..reps {
        for q in 0..GROUPS {
            for r in 0..16 {
                for col in 0..8 {
                    let o = q * 128 + r * 8 + col;
                    let mut s = portable[o];
                    let mut e = 0.0f64;
                    let mut m = 0.0f64;
                    for k in 0..16 {
                        let p = cs.a[q * 256 + r * 16 + k] * cs.b[q * 128 + k * 8 + col];
                        s += p;
                        e += p as f64;
                        m += (p as f64).abs();
                    }
                    portable[o] = s;
                    exact[o] += e;
                    scale[o] += m;
                }
            }
        }
    }
    (portable, exact, scale)
}

/// Runs `mma_once_*` on `dev` (`D` poisoned first).
fn run<T: graphed::Element>(
    dev: &Device,
    cs: &Case,
    reps: u32,
    to: impl Fn(f32) -> T,
    launch: impl Fn(&Device, u32, &Buffer<T>, &Buffer<T>, &Buffer<f32>, &mut Buffer<f32>),
) -> Vec<f32> {
    let a: Vec<T> = cs.a.iter().map(|&v| to(v)).collect();
    let b: Vec<T> = cs.b.iter().map(|&v| to(v)).collect();
    let a = dev.upload(&a).unwrap();
    let b = dev.upload(&b).unwrap();
    let c = dev.upload(&cs.c).unwrap();
    let mut d = poisoned(dev, GROUPS * 128);
    launch(dev, reps, &a, &b, &c, &mut d);
    d.to_host().unwrap()
}

/// Whether `dev` runs the tensor cores (CUDA; every GPU it supports for these kernels is
/// sm_80 or later on the machines this is run on) rather than the portable form.
fn tensor_cores(dev: &Device) -> bool {
    dev.kind() == BackendKind::Cuda
}

fn check(dev: &Device, what: &str, got: &[f32], cs: &Case, reps: u32) {
    let (portable, exact, scale) = expected(cs, reps);
    for i in 0..got.len() {
        let err = (got[i] as f64 - exact[i]).abs();
        assert!(
            err <= TOL_MMA * scale[i] * reps as f64,
            "{what} [{}]: element {i} (group {}, row {}, col {}): got {}, f64 {}, error {err:e} over the tolerance {:e}",
            dev.kind(),
            i / 128,
            i % 128 / 8,
            i % 8,
            got[i],
            exact[i],
            TOL_MMA * scale[i]
        );
    }
    if !tensor_cores(dev) {
        if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != portable[i].to_bits()) {
            panic!(
                "{what} [{}]: element {i}: got {:e}, the portable form gives {:e} (bitwise)",
                dev.kind(),
                got[i],
                portable[i]
            );
        }
    }
}

/// `mma_once_*` for `reps` calls on every backend against the oracle and the portable form.
fn once_on_every_backend<T: graphed::Element>(
    what: &str,
    from: impl Fn(f32) -> T + Copy,
    back: impl Fn(T) -> f32,
    reps: &[u32],
    launch: impl Fn(&Device, u32, &Buffer<T>, &Buffer<T>, &Buffer<f32>, &mut Buffer<f32>) + Copy,
) {
    let mut rng = rng(what);
    let cs = case(&mut rng, |v| back(from(v)));
    on_every_backend(|dev| {
        for &r in reps {
            let got = run(dev, &cs, r, from, launch);
            check(dev, &format!("{what}, {r} calls"), &got, &cs, r);
        }
    });
}

#[test]
fn mma_bf16_matches_the_oracle_on_every_backend() {
    once_on_every_backend(
        "bf16",
        bf16::from_f32,
        bf16::to_f32,
        &[1, 3],
        |dev, r, a, b, c, d| {
            mma_once_bf16::launch(dev, Grid::workgroups((GROUPS / 2) as u32), r, a, b, c, d)
                .unwrap()
        },
    );
}

#[test]
fn mma_f16_matches_the_oracle_on_every_backend() {
    once_on_every_backend(
        "f16",
        f16::from_f32,
        f16::to_f32,
        &[1, 2],
        |dev, r, a, b, c, d| {
            mma_once_f16::launch(dev, Grid::workgroups((GROUPS / 2) as u32), r, a, b, c, d).unwrap()
        },
    );
}

/// No call at all (`reps = 0`) leaves `C`: the loop around the call is uniform.
#[test]
fn zero_calls_copy_the_accumulator() {
    let mut rng = rng("mma_zero");
    let cs = case(&mut rng, |v| bf16::from_f32(v).to_f32());
    on_every_backend(|dev| {
        let got = run(dev, &cs, 0, bf16::from_f32, |dev, reps, a, b, c, d| {
            mma_once_bf16::launch(dev, Grid::workgroups((GROUPS / 2) as u32), reps, a, b, c, d)
                .unwrap()
        });
        assert!(common::bitwise_eq(&got, &cs.c), "[{}]", dev.kind());
    });
}

#[test]
fn kernels_validate_and_compile() {
    let all = [
        &mma_once_bf16::DEF,
        &mma_once_f16::DEF,
        &graphed::kernels::matmul_mma::matmul_mma_bf16::DEF,
        &graphed::kernels::matmul_mma::matmul_mma_f16::DEF,
        &graphed::kernels::matmul_mma::matmul_mma_occ2_bf16::DEF,
        &graphed::kernels::matmul_mma::matmul_mma_occ2_f16::DEF,
        &graphed::kernels::matmul_mma::matmul_mma_lean_bf16::DEF,
        &graphed::kernels::matmul_mma::matmul_mma_lean_f16::DEF,
        &graphed::kernels::matmul_mma::matmul_mma_split_bf16::DEF,
        &graphed::kernels::matmul_mma::matmul_mma_split_f16::DEF,
        &graphed::kernels::matmul_mma::matmul_mma_words_bf16::DEF,
        &graphed::kernels::matmul_mma::matmul_mma_words_f16::DEF,
        &matmul_mma_async_bf16::DEF,
        &graphed::kernels::matmul_mma::matmul_mma_async_f16::DEF,
    ];
    common::assert_wgsl_valid(&all);
    common::assert_cuda_compiles(&all);
    // The tensor-core instruction is in the CUDA C; the portable form in the WGSL.
    for k in all {
        assert!(
            k.cuda.contains("mma.sync.aligned.m16n8k16.row.col.f32."),
            "{}",
            k.name
        );
        assert!(k.wgsl.contains("var<workgroup> gd_mma"), "{}", k.name);
    }
    // The two-workgroups-per-multiprocessor variants (occ2, lean) ask for it; the default
    // does not.
    for k in all[4..8].iter().chain(&all[10..12]) {
        assert!(k.cuda.contains("__launch_bounds__(256, 2)"), "{}", k.name);
    }
    // The async kernels (four MMA groups of 64×64) stream their tiles with `cp.async` (8
    // sites: the eight chunks of a step, in the helper that issues them), into 48 KiB that
    // fit CUDA's static limit, where wgpu adds the portable form's 3 KiB.
    for k in &all[12..] {
        assert!(k.cuda.contains("__launch_bounds__(128, 2)"), "{}", k.name);
        assert_eq!(
            k.cuda.matches("cp.async.cg.shared.global").count(),
            8,
            "{}",
            k.name
        );
        // Its fragments come out of the stages by `ldmatrix_x4`: 8 a half-step.
        assert_eq!(
            k.cuda
                .matches("ldmatrix.sync.aligned.m8n8.x4.shared.b16")
                .count(),
            8,
            "{}",
            k.name
        );
        assert_eq!(
            (k.workgroup_bytes, k.exchange_bytes),
            (49152, 3072),
            "{}",
            k.name
        );
    }
    assert!(all[2].cuda.contains("__launch_bounds__(256)"));
    let sum = [&graphed::kernels::matmul_mma::matmul_mma_split_sum::DEF];
    common::assert_wgsl_valid(&sum);
    common::assert_cuda_compiles(&sum);
}

// ------------------------------------------------------------------ the tiled product

/// `(m, n, k)` of the tiled product's cases: single elements, odd edges in every dimension,
/// several tiles.
const SHAPES: &[(usize, usize, usize)] = &[(1, 1, 1), (17, 33, 40), (128, 64, 96), (65, 7, 300)];

/// `op(A)·op(B)` in `f64` and `Σ |products|` per element (`A` stored `k × m` when `ta`,
/// `B` stored `n × k` when `tb`).
fn product(
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
    ta: bool,
    tb: bool,
) -> (Vec<f64>, Vec<f64>) {
    let mut out = vec![0.0; m * n];
    let mut scale = vec![0.0; m * n];
    for r in 0..m {
        for c in 0..n {
            for kk in 0..k {
                let x = if ta { a[kk * m + r] } else { a[r * k + kk] } as f64;
                let y = if tb { b[c * k + kk] } else { b[kk * n + c] } as f64;
                out[r * n + c] += x * y;
                scale[r * n + c] += (x * y).abs();
            }
        }
    }
    (out, scale)
}

/// `(ta, tb)` of the tiled product's cases: a layer's three products.
const LAYER: &[(bool, bool)] = &[(false, false), (false, true), (true, false)];

fn tiled<T: graphed::Element>(from: impl Fn(f32) -> T + Copy, back: impl Fn(T) -> f32 + Copy) {
    tiled_cases("matmul_mma", SHAPES, LAYER, from, back);
}

/// `matmul_mma` of every [`MmaTile`] on every backend for each shape and `(ta, tb)`,
/// with and without `accumulate`, against the `f64` oracle.
fn tiled_cases<T: graphed::Element>(
    seed: &str,
    shapes: &[(usize, usize, usize)],
    transposes: &[(bool, bool)],
    from: impl Fn(f32) -> T + Copy,
    back: impl Fn(T) -> f32 + Copy,
) {
    let mut rng = rng(seed);
    let round = |v: f32| back(from(v));
    on_every_backend(|dev| {
        for &(m, n, k) in shapes {
            for &(ta, tb) in transposes {
                let a: Vec<f32> = floats(&mut rng, m * k, -1.0, 1.0)
                    .into_iter()
                    .map(round)
                    .collect();
                let b: Vec<f32> = floats(&mut rng, k * n, -1.0, 1.0)
                    .into_iter()
                    .map(round)
                    .collect();
                let c0 = floats(&mut rng, m * n, -1.0, 1.0);
                let (want, scale) = product(&a, &b, (m, n, k), ta, tb);
                let da = dev
                    .upload(&a.iter().map(|&v| from(v)).collect::<Vec<T>>())
                    .unwrap();
                let db = dev
                    .upload(&b.iter().map(|&v| from(v)).collect::<Vec<T>>())
                    .unwrap();
                for (tile, accumulate) in MmaTile::ALL
                    .into_iter()
                    .flat_map(|t| [(t, false), (t, true)])
                {
                    let mut dc = if accumulate {
                        dev.upload(&c0).unwrap()
                    } else {
                        poisoned(dev, m * n)
                    };
                    let g = MmaGemm { m, n, k, ta, tb };
                    matmul_mma(dev, tile, g, &da, &db, &mut dc, accumulate).unwrap();
                    let got = dc.to_host().unwrap();
                    let tol = (k as f64 + 16.0) * TOL_MMA / 16.0;
                    for i in 0..m * n {
                        let base = if accumulate { c0[i] as f64 } else { 0.0 };
                        let err = (got[i] as f64 - want[i] - base).abs();
                        let bound = tol * (scale[i] + base.abs()) + 1e-30;
                        assert!(
                            err <= bound,
                            "[{}] {tile:?} {m}×{n}×{k} ta {ta} tb {tb} accumulate {accumulate}: element {i} got {} want {}, error {err:e} > {bound:e}",
                            dev.kind(),
                            got[i],
                            want[i] + base
                        );
                    }
                }
            }
        }
    });
}

#[test]
fn tiled_bf16_product_matches_the_oracle() {
    tiled(bf16::from_f32, bf16::to_f32);
}

#[test]
fn tiled_f16_product_matches_the_oracle() {
    tiled(f16::from_f32, f16::to_f32);
}

/// The 128×128 tiles' unchecked path (a tile inside `C` and a step of 32 inside `k`) beside
/// the checked one: whole tiles with `k` a multiple of 32 (every step unchecked), whole tiles
/// with a ragged last step, and tiles cut at the edges of `m` and `n` next to whole ones;
/// every pair of transposes, with and without `accumulate`.
#[test]
fn tiled_whole_tiles_and_ragged_edges_match_the_oracle() {
    tiled_cases(
        "matmul_mma_tiles",
        &[(128, 128, 64), (128, 256, 48), (257, 130, 33)],
        &[(false, false), (false, true), (true, false), (true, true)],
        bf16::from_f32,
        bf16::to_f32,
    );
}

/// Products that `MmaTile::SplitK` splits over `k` (1 tile and 2 parts, 2 tiles and 3
/// parts with a ragged last one, 1 whole tile and 2 unchecked parts), every variant, with
/// and without `accumulate`.
#[test]
fn split_k_products_match_the_oracle() {
    tiled_cases(
        "matmul_mma_split",
        &[(40, 10, 600), (130, 7, 777), (128, 128, 512)],
        LAYER,
        bf16::from_f32,
        bf16::to_f32,
    );
}

/// The host and wgpu run the same portable form in the same order: bitwise equal products,
/// on edge tiles (checked loads) and on whole ones (unchecked).
#[test]
fn tiled_product_host_and_wgpu_agree_bitwise() {
    let devs: Vec<Device> = common::backends()
        .into_iter()
        .filter(|d| d.kind() != BackendKind::Cuda)
        .collect();
    if devs.len() < 2 {
        return;
    }
    let mut rng = rng("matmul_mma_bitwise");
    // The third and fourth split over `k` under `MmaTile::SplitK` (2 and 3 parts).
    for (m, n, k, ta, tb) in [
        (70, 45, 129, false, true),
        (128, 128, 64, true, false),
        (40, 10, 600, false, true),
        (130, 7, 777, true, false),
        // Four workgroups of the async kernel, three steps, ragged edges.
        (200, 150, 96, false, true),
    ] {
        let a: Vec<bf16> = floats(&mut rng, m * k, -1.0, 1.0)
            .into_iter()
            .map(bf16::from_f32)
            .collect();
        let b: Vec<bf16> = floats(&mut rng, k * n, -1.0, 1.0)
            .into_iter()
            .map(bf16::from_f32)
            .collect();
        // Every variant bitwise equal on every device; the 128×128 ones, the async one
        // among them, also to each other (a split product sums in another order).
        let g = MmaGemm { m, n, k, ta, tb };
        let mut first: [Option<Vec<f32>>; 2] = [None, None];
        for tile in MmaTile::ALL {
            for dev in &devs {
                let class = match tile {
                    MmaTile::SplitK => 1,
                    _ => 0,
                };
                let first = &mut first[class];
                let da = dev.upload(&a).unwrap();
                let db = dev.upload(&b).unwrap();
                let mut dc = poisoned(dev, m * n);
                matmul_mma(dev, tile, g, &da, &db, &mut dc, false).unwrap();
                let out = dc.to_host().unwrap();
                match &first {
                    None => *first = Some(out),
                    Some(f) => assert!(
                        common::bitwise_eq(f, &out),
                        "{m}×{n}×{k} ta {ta} tb {tb}: {tile:?} on {} differs from the default on {}",
                        dev.kind(),
                        devs[0].kind()
                    ),
                }
            }
        }
    }
}

/// A device that records the name of each kernel launched through it.
struct Recording<'a> {
    dev: &'a Device,
    names: std::cell::RefCell<Vec<&'static str>>,
    /// Whether launches reach `dev` (else only their names are recorded).
    run: bool,
}

impl Launch for Recording<'_> {
    fn launch(
        &self,
        kernel: &'static graphed::KernelDef,
        grid: graphed::Grid,
        args: &[graphed::KernelArg],
    ) -> graphed::Result<()> {
        self.names.borrow_mut().push(kernel.name);
        if self.run {
            self.dev.launch(kernel, grid, args)
        } else {
            Ok(())
        }
    }

    fn scratch(&self, len: usize) -> graphed::Result<Buffer<f32>> {
        self.dev.scratch(len)
    }

    fn backend_kind(&self) -> Option<BackendKind> {
        Some(self.dev.kind())
    }

    fn fits_workgroup_memory(&self, kernel: &graphed::KernelDef) -> bool {
        self.dev.fits_workgroup_memory(kernel)
    }
}

/// `MmaTile::T128Words` reads the inputs as words where it can — views starting at an even
/// element, `k` even — transposing first an operand stored with `k` outer (one
/// `matmul_mma_pack_pairs` launch each), and otherwise launches the lean kernel; both give
/// bitwise the lean kernel's product, on views at even and odd offsets into larger
/// allocations, whole tiles and edges.
#[test]
fn the_words_variant_reads_views_at_any_offset_and_falls_back_where_it_cannot() {
    let mut rng = rng("matmul_mma_words");
    on_every_backend(|dev| {
        for (m, n, k, ta, tb, a_at, b_at, words) in [
            (128, 128, 64, false, true, 0, 0, true),
            (130, 70, 96, false, true, 2, 4, true),
            // Inside tiles over many steps, even and odd in number, a ragged last step.
            (256, 128, 320, false, true, 0, 0, true),
            (128, 256, 224, false, true, 2, 0, true),
            (128, 128, 250, false, true, 0, 0, true),
            (128, 128, 224, true, false, 0, 0, true),
            (130, 70, 96, false, true, 1, 0, false),
            (130, 70, 96, false, true, 0, 3, false),
            (65, 40, 33, false, true, 0, 0, false),
            // Gradient products: an operand stored with `k` outer is transposed first, at
            // edges of the transpose's 64 × 32 tiles too (rows 130, 70, 10; k/2 33).
            (64, 48, 64, true, false, 2, 2, true),
            (130, 70, 66, true, false, 0, 2, true),
            (130, 10, 66, false, false, 2, 0, true),
            (70, 130, 256, true, true, 0, 0, true),
            (64, 48, 64, true, false, 1, 2, false),
            (64, 48, 63, true, false, 0, 0, false),
        ] {
            let a: Vec<bf16> = floats(&mut rng, a_at + m * k + 1, -1.0, 1.0)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            let b: Vec<bf16> = floats(&mut rng, b_at + k * n + 1, -1.0, 1.0)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            let (da, db) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
            let va = da.slice(a_at..a_at + m * k).unwrap();
            let vb = db.slice(b_at..b_at + k * n).unwrap();
            let g = MmaGemm { m, n, k, ta, tb };
            let case = format!(
                "[{}] {m}×{n}×{k} ta {ta} tb {tb} at {a_at}, {b_at}",
                dev.kind()
            );
            let mut lean = poisoned(dev, m * n);
            matmul_mma(dev, MmaTile::T128Lean, g, &va, &vb, &mut lean, false).unwrap();
            let lean = lean.to_host().unwrap();
            assert!(lean.iter().all(|v| v.is_finite()), "{case}: poison left");
            let rec = Recording {
                dev,
                names: Default::default(),
                run: true,
            };
            let mut out = poisoned(dev, m * n);
            matmul_mma(&rec, MmaTile::T128Words, g, &va, &vb, &mut out, false).unwrap();
            // One transpose launch before the product for each operand stored with `k`
            // outer.
            let mut want = Vec::new();
            if words {
                want.extend(std::iter::repeat_n(
                    "matmul_mma_pack_pairs",
                    usize::from(ta) + usize::from(!tb),
                ));
                want.push("matmul_mma_words_bf16");
            } else {
                want.push("matmul_mma_lean_bf16");
            }
            assert_eq!(rec.names.into_inner(), want, "{case}");
            assert!(
                common::bitwise_eq(&lean, &out.to_host().unwrap()),
                "{case}: differs from T128Lean"
            );
        }
    });
}

/// A gradient product whose transpose would need more than 65,535 workgroups in a dimension
/// (`A` stored `k × m` with `m` = 65,536 · 64: one row block of 64 too many) runs the lean
/// kernel, with no transpose, instead of failing; at 65,535 · 64 rows the transpose runs. Only
/// the launches' names are checked (the kernels are not run: the routing is decided before
/// any launch).
#[test]
fn a_transpose_past_the_grid_limit_falls_back_to_the_lean_kernel() {
    let mut rng = rng("matmul_mma_pack_limit");
    on_every_backend(|dev| {
        for (m, want) in [
            (65_536 * 64, vec!["matmul_mma_lean_bf16"]),
            (
                65_535 * 64,
                vec!["matmul_mma_pack_pairs", "matmul_mma_words_bf16"],
            ),
        ] {
            let (n, k) = (2, 2);
            let a: Vec<bf16> = floats(&mut rng, m * k, -1.0, 1.0)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            let b: Vec<bf16> = floats(&mut rng, n * k, -1.0, 1.0)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            let (da, db) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
            let mut c = dev.alloc::<f32>(m * n).unwrap();
            let g = MmaGemm {
                m,
                n,
                k,
                ta: true,
                tb: true,
            };
            let rec = Recording {
                dev,
                names: Default::default(),
                run: false,
            };
            matmul_mma(&rec, MmaTile::T128Words, g, &da, &db, &mut c, false).unwrap();
            assert_eq!(rec.names.into_inner(), want, "[{}] m {m}", dev.kind());
        }
    });
}

/// `matmul_mma_pack_pairs` moves the bits of a `k × rows` matrix of 16-bit values into its
/// transpose as pairs (word `j` of row `r`: elements `(2j, r)`, `(2j + 1, r)`), any bits —
/// NaN and subnormal patterns included — unchanged, at the edges of its 64 × 32 tiles, and
/// writes nothing past the output's end (the words after it keep their poison).
#[test]
fn the_pair_transpose_moves_every_bit_and_writes_only_its_output() {
    let mut rng = rng("matmul_mma_pack_pairs");
    on_every_backend(|dev| {
        for (rows, k) in [(64, 64), (130, 66), (10, 256), (1, 2), (257, 130)] {
            let k2 = k / 2;
            let x: Vec<u32> = (0..rows * k2).map(|_| rng.random()).collect();
            let dx = dev.upload(&x).unwrap();
            let poison = 0x7fa5_5a5au32;
            let out = dev.upload(&vec![poison; rows * k2 + 33]).unwrap();
            let mut view = out.slice(0..rows * k2).unwrap();
            let grid =
                graphed::Grid::workgroups_2d(k2.div_ceil(32) as u32, rows.div_ceil(64) as u32);
            graphed::kernels::matmul_mma::matmul_mma_pack_pairs::launch(
                dev,
                grid,
                rows as u32,
                k2 as u32,
                &dx,
                &mut view,
            )
            .unwrap();
            let got = out.to_host().unwrap();
            let half = |e: usize| (x[e / 2] >> ((e % 2) * 16)) & 0xffff;
            for r in 0..rows {
                for j in 0..k2 {
                    let want = half(2 * j * rows + r) | (half((2 * j + 1) * rows + r) << 16);
                    assert_eq!(
                        got[r * k2 + j],
                        want,
                        "[{}] {rows}×{k}: row {r}, pair {j}",
                        dev.kind()
                    );
                }
            }
            assert!(
                got[rows * k2..].iter().all(|&w| w == poison),
                "[{}] {rows}×{k}: written past the output",
                dev.kind()
            );
        }
    });
}

/// A layer's gradient products for `(batch, outs, ins)`: `dW = dYᵀ·X` and `dX = dY·W`.
fn gradient_shapes((batch, outs, ins): (usize, usize, usize)) -> (MmaGemm, MmaGemm) {
    let gw = MmaGemm {
        m: outs,
        n: ins,
        k: batch,
        ta: true,
        tb: false,
    };
    let gx = MmaGemm {
        m: batch,
        n: ins,
        k: outs,
        ta: false,
        tb: false,
    };
    (gw, gx)
}

/// A layer's two gradient products on the words variant, recorded: `dW = dYᵀ·X` (both
/// operands transposed first) and `dX = dY·W` (`W` transposed first), each transpose in a
/// scratch buffer of the step.
#[graphed]
fn gradient_products(
    cx: &mut Step,
    dy: &Input<bf16>,
    x: &Input<bf16>,
    w: &Input<bf16>,
    #[key] dims: (usize, usize, usize),
) -> Result<(Output<f32>, Output<f32>)> {
    let (batch, outs, ins) = dims;
    let mut dw = cx.output::<f32>(outs * ins)?;
    let mut dx = cx.output::<f32>(batch * ins)?;
    let (gw, gx) = gradient_shapes(dims);
    matmul_mma(cx, MmaTile::T128Words, gw, dy, x, &mut dw, false)?;
    matmul_mma(cx, MmaTile::T128Words, gx, dy, w, &mut dx, false)?;
    Ok((dw, dx))
}

/// The transposed operands of the words variant live in the recording's scratch: replays
/// with fresh inputs give bitwise the eager results and the lean kernel's (no stale
/// transpose survives from a previous step), with the three transposes and two products
/// as the replay's five launches.
#[test]
fn recorded_gradient_products_on_the_words_variant_replay_bitwise_as_eager() {
    let mut r = rng("recorded_gradient_products_words");
    on_every_backend(|dev| {
        let dims = (96usize, 70usize, 130usize);
        let (batch, outs, ins) = dims;
        let mut step = GradientProducts::new(dev).unwrap();
        let mut eager = GradientProducts::new(dev).unwrap();
        let half = |r: &mut _, len| -> Vec<bf16> {
            floats(r, len, -1.0, 1.0)
                .into_iter()
                .map(bf16::from_f32)
                .collect()
        };
        for call in 0..3 {
            let case = format!("[{}] call {call}", dev.kind());
            let (dy, x, w) = (
                half(&mut r, batch * outs),
                half(&mut r, batch * ins),
                half(&mut r, outs * ins),
            );
            let (dw, dx) = step.call(&dy[..], &x[..], &w[..], dims).unwrap();
            let (dw, dx) = (dw.to_host().unwrap(), dx.to_host().unwrap());
            let (ew, ex) = eager.eager(&dy[..], &x[..], &w[..], dims).unwrap();
            let (ew, ex) = (ew.to_host().unwrap(), ex.to_host().unwrap());
            assert!(
                common::bitwise_eq(&dw, &ew),
                "{case}: dW replay differs from eager"
            );
            assert!(
                common::bitwise_eq(&dx, &ex),
                "{case}: dX replay differs from eager"
            );
            // The lean kernel on the same operands, eagerly.
            let (ddy, dx_in, dw_in) = (
                dev.upload(&dy).unwrap(),
                dev.upload(&x).unwrap(),
                dev.upload(&w).unwrap(),
            );
            let (gw, gx) = gradient_shapes(dims);
            let mut lw = poisoned(dev, outs * ins);
            let mut lx = poisoned(dev, batch * ins);
            matmul_mma(dev, MmaTile::T128Lean, gw, &ddy, &dx_in, &mut lw, false).unwrap();
            matmul_mma(dev, MmaTile::T128Lean, gx, &ddy, &dw_in, &mut lx, false).unwrap();
            let (lw, lx) = (lw.to_host().unwrap(), lx.to_host().unwrap());
            assert!(
                lw.iter().chain(&lx).all(|v| v.is_finite()),
                "{case}: poison left"
            );
            assert!(
                common::bitwise_eq(&dw, &lw),
                "{case}: dW differs from T128Lean"
            );
            assert!(
                common::bitwise_eq(&dx, &lx),
                "{case}: dX differs from T128Lean"
            );
        }
        let s = step.stats();
        assert_eq!((s.recordings, s.replays, s.eager_calls), (1, 3, 0), "{s:?}");
        assert_eq!(s.launches_per_replay, 5, "{s:?}");
    });
}

/// `MmaTile::Auto` (what `matmul_mma` takes) resolves by shape and backend, and gives
/// bitwise what the variant it resolves to gives: split over `k` for a product of one tile
/// with a long `k`, the lean 128×128 kernel on CUDA (the words one for a forward product,
/// and for a gradient product from `WORDS_TRANSPOSE_MIN_K` on) and the portable one
/// elsewhere for a product of many tiles.
#[test]
fn auto_resolves_by_shape_and_backend_and_gives_that_variants_bits() {
    let mut rng = rng("matmul_mma_auto");
    let narrow = MmaGemm {
        m: 40,
        n: 10,
        k: 600,
        ta: false,
        tb: true,
    };
    let wide = MmaGemm {
        m: 200,
        n: 150,
        k: 64,
        ta: true,
        tb: false,
    };
    on_every_backend(|dev| {
        let kind = Some(dev.kind());
        let square = if dev.kind() == BackendKind::Cuda {
            MmaTile::T128Lean
        } else {
            MmaTile::T128
        };
        // A forward product (`A` m × k, `B` n × k, `k` even) of many tiles: the words
        // route on CUDA, streamed (the async variant).
        let forward = MmaGemm {
            m: 200,
            n: 150,
            k: 64,
            ta: false,
            tb: true,
        };
        let words = if dev.kind() == BackendKind::Cuda {
            MmaTile::T128Async
        } else {
            MmaTile::T128
        };
        // A gradient product (`A` stored `k × m`) of many tiles: the lean variant on CUDA
        // for a short or odd `k` (the transpose would cost more than it saves, or cannot
        // be), the words route (transposing `A` first) from `WORDS_TRANSPOSE_MIN_K` on; and
        // `dX` (`B` stored `k × n`) likewise.
        let odd = MmaGemm { k: 63, ..wide };
        let deep = MmaGemm {
            k: WORDS_TRANSPOSE_MIN_K,
            ..wide
        };
        let shallow = MmaGemm {
            k: WORDS_TRANSPOSE_MIN_K - 2,
            ..wide
        };
        let deep_dx = MmaGemm {
            ta: false,
            tb: false,
            ..deep
        };
        for (g, want) in [
            (narrow, MmaTile::SplitK),
            (wide, square),
            (odd, square),
            (shallow, square),
            (forward, words),
            (deep, words),
            (deep_dx, words),
        ] {
            assert_eq!(
                MmaTile::Auto.resolved_for(g, kind),
                want,
                "{g:?} on {kind:?}"
            );
            assert_eq!(want.resolved_for(g, kind), want);
            let a: Vec<bf16> = floats(&mut rng, g.m * g.k, -1.0, 1.0)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            let b: Vec<bf16> = floats(&mut rng, g.k * g.n, -1.0, 1.0)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            let (da, db) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
            let mut auto = poisoned(dev, g.m * g.n);
            matmul_mma(dev, MmaTile::Auto, g, &da, &db, &mut auto, false).unwrap();
            let mut chosen = poisoned(dev, g.m * g.n);
            matmul_mma(dev, want, g, &da, &db, &mut chosen, false).unwrap();
            let (auto, chosen) = (auto.to_host().unwrap(), chosen.to_host().unwrap());
            assert!(
                auto.iter().all(|v| v.is_finite()),
                "{g:?} on {kind:?}: poison left"
            );
            assert!(
                common::bitwise_eq(&auto, &chosen),
                "{g:?} on {kind:?}: Auto differs from {want:?}"
            );
        }
    });
}

/// Shapes that make no product are errors, not panics.
#[test]
fn mismatched_lengths_are_errors() {
    let dev = Device::host();
    let a = dev.upload(&[bf16::ONE; 12]).unwrap();
    let b = dev.upload(&[bf16::ONE; 12]).unwrap();
    let mut c = poisoned(&dev, 9);
    let g = MmaGemm {
        m: 3,
        n: 3,
        k: 5,
        ta: false,
        tb: false,
    };
    let e = matmul_mma(&dev, MmaTile::Auto, g, &a, &b, &mut c, false).unwrap_err();
    assert!(e.to_string().contains("matmul_mma"), "{e}");
}
