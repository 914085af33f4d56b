//! Matrix products: every transposition, both tilings, odd shapes, and the epilogue.

use graphed_kernels::elementwise::Act;
use graphed_kernels::matmul::{self, matmul_t16, matmul_t32, matmul_t64, Epilogue, Gemm, Tile};

use crate::common::{
    assert_array_indices_literal, assert_close, assert_close_floor, floats, on_every_backend,
    poisoned, rng,
};

/// Products accumulate `k` terms in increasing order in `f32`.
const TOL: f64 = 1e-5;

/// A product's error is bounded by its terms' magnitudes, not its result's: where a few
/// outputs cancel to near zero (a 1 × 1 output of 200 terms summed to 0.198 once erred
/// by 1.2e-5 relative, split against one pass), errors are judged against 1 per element
/// (terms in [-1, 1]², hundreds of them: typical outputs are 5–9).
const SUM_FLOOR: f64 = 1.0;

/// `op(A)·op(B)` in f64.
fn reference(g: Gemm, a: &[f32], b: &[f32]) -> Vec<f64> {
    let mut c = vec![0.0f64; g.m * g.n];
    for r in 0..g.m {
        for col in 0..g.n {
            let mut s = 0.0f64;
            for k in 0..g.k {
                let av = if g.ta { a[k * g.m + r] } else { a[r * g.k + k] };
                let bv = if g.tb {
                    b[col * g.k + k]
                } else {
                    b[k * g.n + col]
                };
                s += av as f64 * bv as f64;
            }
            c[r * g.n + col] = s;
        }
    }
    c
}

/// A product of the given shape and tile, default math and split.
fn gemm(m: usize, n: usize, k: usize, ta: bool, tb: bool, tile: Tile) -> Gemm {
    Gemm {
        m,
        n,
        k,
        ta,
        tb,
        tile,
        math: Default::default(),
        split: Default::default(),
    }
}

fn shapes(g: Gemm) -> String {
    format!(
        "{}×{}×{} ta={} tb={} {:?}",
        g.m, g.n, g.k, g.ta, g.tb, g.tile
    )
}

#[test]
fn every_transposition_and_tiling_on_odd_shapes() {
    let mut r = rng("every_transposition_and_tiling_on_odd_shapes");
    // Every dimension takes sizes that are not multiples of a tile. The host backend runs
    // every invocation of a padded 64×64 tile, so the long `k` goes to 16×16 tiles only.
    let dims = [
        (1, 1, 1, Tile::T16),
        (7, 63, 65, Tile::T16),
        (65, 7, 63, Tile::T16),
        (63, 65, 7, Tile::T16),
        (1, 17, 1000, Tile::T16),
        (17, 1, 1023, Tile::T16),
        (5, 4097, 3, Tile::T16),
        // 32×32 tiles: one ragged tile, several in each direction, a whole and a partial step
        // of k (64), a long k.
        (1, 1, 1, Tile::T32),
        (7, 63, 65, Tile::T32),
        (65, 7, 63, Tile::T32),
        (63, 65, 7, Tile::T32),
        (70, 67, 129, Tile::T32),
        (1, 17, 1000, Tile::T32),
        (33, 1, 64, Tile::T32),
        (1, 1, 1, Tile::T64),
        (7, 63, 65, Tile::T64),
        (65, 7, 63, Tile::T64),
        (63, 65, 7, Tile::T64),
        (130, 67, 17, Tile::T64),
        // The vendor BLAS where the device has one (cuBLAS on CUDA), the DSL elsewhere.
        (7, 63, 65, Tile::Vendor),
        (1, 17, 1000, Tile::Vendor),
        (130, 67, 17, Tile::Auto),
    ];
    on_every_backend(|dev| {
        for &(m, n, k, tile) in &dims {
            let a_host = floats(&mut r, m * k, -1.0, 1.0);
            let b_host = floats(&mut r, k * n, -1.0, 1.0);
            let a = dev.upload(&a_host).unwrap();
            let b = dev.upload(&b_host).unwrap();
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                let g = gemm(m, n, k, ta, tb, tile);
                let mut c = poisoned(dev, m * n);
                matmul::matmul(dev, g, &a, &b, &mut c, &Epilogue::none()).unwrap();
                let want = reference(g, &a_host, &b_host);
                assert_close(&shapes(g), &c.to_host().unwrap(), &want, TOL);
            }
        }
    });
}

/// One epilogue case of product `g` with activation `act` on `dev`: bias + act forward, then
/// the gate overwriting and accumulating with the row sums of `op(A)`, against the f64 oracle.
fn epilogue_case(dev: &graphed_runtime::Device, r: &mut impl rand::Rng, g: Gemm, act: Act) {
    let (m, n, k, ta) = (g.m, g.n, g.k, g.ta);
    let a_host = floats(r, m * k, -1.0, 1.0);
    let b_host = floats(r, k * n, -1.0, 1.0);
    let bias_host = floats(r, n, -1.0, 1.0);
    let aux_host = floats(r, m * n, -3.0, 3.0);
    let c0 = floats(r, m * n, -1.0, 1.0);
    let db0 = floats(r, m, -1.0, 1.0);
    let a = dev.upload(&a_host).unwrap();
    let b = dev.upload(&b_host).unwrap();
    let bias = dev.upload(&bias_host).unwrap();
    let aux = dev.upload(&aux_host).unwrap();
    let prod = reference(g, &a_host, &b_host);
    let a_at = |row: usize, kk: usize| {
        if ta {
            a_host[kk * m + row]
        } else {
            a_host[row * k + kk]
        }
    };
    let row_sums: Vec<f64> = (0..m)
        .map(|row| (0..k).map(|kk| a_at(row, kk) as f64).sum())
        .collect();

    // Forward: act(op(A)·op(B) + bias).
    let mut c = poisoned(dev, m * n);
    matmul::matmul(dev, g, &a, &b, &mut c, &Epilogue::bias_act(&bias, act)).unwrap();
    let want: Vec<f64> = (0..m * n)
        .map(|i| act.eval_f64(prod[i] + bias_host[i % n] as f64))
        .collect();
    let case = format!("{} bias+{act:?}", shapes(g));
    assert_close_floor(&case, &c.to_host().unwrap(), &want, TOL, 0.1);

    // Backward: (op(A)·op(B)) ⊙ act′(aux), overwriting or accumulating, with the
    // row sums of op(A) beside it.
    for accumulate in [false, true] {
        let mut c = dev.upload(&c0).unwrap();
        let mut db = dev.upload(&db0).unwrap();
        if !accumulate {
            c.fill(f32::NAN).unwrap();
            db.fill(f32::NAN).unwrap();
        }
        let epi = Epilogue::none().gate(act, &aux).accumulate(accumulate);
        matmul::matmul_row_sums(dev, g, &a, &b, &mut c, &mut db, &epi).unwrap();
        let keep = if accumulate { 1.0 } else { 0.0 };
        let want: Vec<f64> = (0..m * n)
            .map(|i| prod[i] * act.derivative_f64(aux_host[i] as f64) + keep * c0[i] as f64)
            .collect();
        let want_db: Vec<f64> = (0..m).map(|i| row_sums[i] + keep * db0[i] as f64).collect();
        let case = format!("{} gate {act:?} accumulate={accumulate}", shapes(g));
        assert_close_floor(&case, &c.to_host().unwrap(), &want, TOL, 0.1);
        assert_close(
            &format!("{case} row sums"),
            &db.to_host().unwrap(),
            &want_db,
            TOL,
        );
    }
}

#[test]
fn epilogue_bias_activation_gate_accumulate_and_row_sums() {
    let mut r = rng("epilogue_bias_activation_gate_accumulate_and_row_sums");
    let acts = [Act::Identity, Act::Relu, Act::Gelu, Act::Tanh, Act::Sigmoid];
    // Across the two shapes each activation meets two layouts; three cases take the automatic
    // route (the vendor BLAS where the device has one).
    let layouts = [
        (Tile::T16, false, true),
        (Tile::T64, true, false),
        (Tile::T16, true, false),
        (Tile::T64, false, false),
        (Tile::Vendor, false, true),
        (Tile::Vendor, true, false),
    ];
    on_every_backend(|dev| {
        for (s, &(m, n, k)) in [(7, 65, 33), (70, 130, 20)].iter().enumerate() {
            for (i, act) in acts.into_iter().enumerate() {
                let (tile, ta, tb) = layouts[(i + 2 * s) % layouts.len()];
                let g = gemm(m, n, k, ta, tb, tile);
                epilogue_case(dev, &mut r, g, act);
            }
        }
    });
}

#[test]
fn t32_epilogues_on_every_transposition() {
    // Every activation as a forward epilogue (bias + act) and as a gate, overwriting and
    // accumulating with the row sums, on every transposition: one ragged tile with a partial
    // step of k, and 3×5 tiles (several rows of workgroups, only the first column summing)
    // with a whole and a partial step.
    let mut r = rng("t32_epilogues_on_every_transposition");
    let acts = [Act::Identity, Act::Relu, Act::Gelu, Act::Tanh, Act::Sigmoid];
    on_every_backend(|dev| {
        for (s, &(m, n, k)) in [(7, 31, 33), (70, 130, 100)].iter().enumerate() {
            for (l, (ta, tb)) in [(false, false), (false, true), (true, false), (true, true)]
                .into_iter()
                .enumerate()
            {
                let act = acts[(l + 3 * s) % acts.len()];
                let g = gemm(m, n, k, ta, tb, Tile::T32);
                epilogue_case(dev, &mut r, g, act);
            }
        }
    });
}

#[test]
fn t32_sums_like_t16() {
    // The same sum in the same order (increasing k from 0, one fma per term) on both tilings:
    // on the host, bitwise the same products.
    let mut r = rng("t32_sums_like_t16");
    let dev = graphed_runtime::Device::open(graphed_runtime::BackendKind::Host).unwrap();
    let (m, n, k) = (37, 45, 150);
    let a = dev.upload(&floats(&mut r, m * k, -1.0, 1.0)).unwrap();
    let b = dev.upload(&floats(&mut r, k * n, -1.0, 1.0)).unwrap();
    for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
        let run = |tile| {
            let mut c = poisoned(&dev, m * n);
            let g = gemm(m, n, k, ta, tb, tile);
            matmul::matmul(&dev, g, &a, &b, &mut c, &Epilogue::none()).unwrap();
            c.to_host().unwrap()
        };
        let (t16, t32) = (run(Tile::T16), run(Tile::T32));
        assert!(
            t16.iter()
                .zip(&t32)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "ta={ta} tb={tb}: t32 differs from t16"
        );
    }
}

#[test]
fn automatic_tiling() {
    // 64×64 tiles from 64 of them up; 16×16 below, where 64×64 tiles would idle a big GPU.
    assert_eq!(Gemm::nn(512, 512, 3).resolved_tile(), Tile::T64);
    assert_eq!(Gemm::nt(64, 4096, 3).resolved_tile(), Tile::T64);
    assert_eq!(Gemm::tn(64, 256, 784).resolved_tile(), Tile::T16);
    assert_eq!(Gemm::nn(511, 448, 3).resolved_tile(), Tile::T16);
    assert_eq!(
        Gemm::nn(512, 512, 3).with_tile(Tile::T16).resolved_tile(),
        Tile::T16
    );
    // 32×32 tiles when asked for, and under `Auto` on CUDA from T32_MIN_OUTPUTS elements of
    // C where 16×16 tiles would be chosen (MLP-S's 256×784 weight gradient, not its 256×256).
    use graphed_runtime::BackendKind;
    let dw1 = Gemm::tn(256, 784, 64);
    assert_eq!(dw1.resolved_tile_for(Some(BackendKind::Cuda)), Tile::T32);
    assert_eq!(dw1.resolved_tile_for(Some(BackendKind::Wgpu)), Tile::T16);
    assert_eq!(dw1.resolved_tile_for(None), Tile::T16);
    assert_eq!(
        dw1.with_tile(Tile::T16)
            .resolved_tile_for(Some(BackendKind::Cuda)),
        Tile::T16
    );
    assert_eq!(
        Gemm::tn(256, 256, 64).resolved_tile_for(Some(BackendKind::Cuda)),
        Tile::T16
    );
    assert_eq!(
        Gemm::nn(512, 512, 3).resolved_tile_for(Some(BackendKind::Cuda)),
        Tile::T64
    );
    // Their tiles count for the fill rule.
    let g = Gemm::nt(64, 256, 784).with_tile(Tile::T32);
    assert_eq!(g.resolved_tile(), Tile::T32);
    assert_eq!(g.tiles(), 16);
    assert_eq!(g.split_parts(Some(132)), 5);
}

/// `Auto` may take 32×32 tiles where it would take 16×16 (on CUDA): the two give the same
/// bits, so the choice never changes a result. Checked on every backend for the shape the
/// rule moves, with an epilogue and accumulation.
#[test]
fn t32_and_t16_give_the_same_bits_where_auto_may_choose_either() {
    on_every_backend(|dev| {
        let mut r = rng("t32_t16_bits");
        let g = Gemm::tn(256, 784, 64);
        let a = dev.upload(&floats(&mut r, g.m * g.k, -1.0, 1.0)).unwrap();
        let b = dev.upload(&floats(&mut r, g.k * g.n, -1.0, 1.0)).unwrap();
        let bias = dev.upload(&floats(&mut r, g.n, -0.5, 0.5)).unwrap();
        let c0 = floats(&mut r, g.m * g.n, -1.0, 1.0);
        let mut out = Vec::new();
        for tile in [Tile::Auto, Tile::T16, Tile::T32] {
            let mut c = dev.upload(&c0).unwrap();
            let epi = Epilogue::bias_act(&bias, Act::Tanh).accumulate(true);
            matmul::matmul(dev, g.with_tile(tile), &a, &b, &mut c, &epi).unwrap();
            out.push(c.to_host().unwrap());
        }
        for (i, name) in [(1, "T16"), (2, "T32")] {
            assert!(
                out[0]
                    .iter()
                    .zip(&out[i])
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{}: Auto and {name} differ",
                dev.kind()
            );
        }
        assert_ne!(out[0], c0, "the product changed nothing");
    });
}

#[test]
fn shape_errors() {
    on_every_backend(|dev| {
        let a = dev.upload(&[1.0f32; 6]).unwrap();
        let b5 = dev.upload(&[1.0f32; 5]).unwrap();
        let mut c = poisoned(dev, 4);
        let e =
            matmul::matmul(dev, Gemm::nn(2, 2, 3), &a, &b5, &mut c, &Epilogue::none()).unwrap_err();
        assert!(
            e.to_string().contains("`b` has 5 elements, expected 6"),
            "{e}"
        );
        let b = dev.upload(&[1.0f32; 6]).unwrap();
        matmul::matmul(dev, Gemm::nt(2, 2, 3), &a, &b, &mut c, &Epilogue::none()).unwrap();
        assert_eq!(c.to_host().unwrap(), vec![3.0; 4]);
        let bias = dev.upload(&[1.0f32; 3]).unwrap();
        let epi = Epilogue::bias_act(&bias, Act::Relu);
        let e = matmul::matmul(dev, Gemm::nt(2, 2, 3), &a, &b, &mut c, &epi).unwrap_err();
        assert!(
            e.to_string().contains("`bias` has 3 elements, expected 2"),
            "{e}"
        );
    });
}

/// The launches that follow a vendor-BLAS product (on CUDA), run directly on every backend:
/// the in-place epilogue and the row sums of `op(A)`.
#[test]
fn vendor_epilogue_and_row_sums_kernels() {
    use graphed_runtime::Grid;
    let mut r = rng("vendor_epilogue_and_row_sums_kernels");
    on_every_backend(|dev| {
        let (m, n) = (37, 65);
        let c0 = floats(&mut r, m * n, -2.0, 2.0);
        let bias_host = floats(&mut r, n, -1.0, 1.0);
        let aux_host = floats(&mut r, m * n, -3.0, 3.0);
        let bias = dev.upload(&bias_host).unwrap();
        let aux = dev.upload(&aux_host).unwrap();
        // One invocation an element, the library's grid (four an invocation), and one
        // workgroup (each invocation loops: three passes of four, the last partial).
        let grids = [
            Grid::threads(m * n),
            Grid::workgroups(matmul::epilogue_groups(m * n)),
            Grid::workgroups(1),
        ];
        let cases = [
            (Act::Relu, Act::Identity),
            (Act::Gelu, Act::Tanh),
            (Act::Identity, Act::Relu),
        ];
        for ((act, gate), grid) in cases.into_iter().flat_map(|c| grids.map(|g| (c, g))) {
            let mut c = dev.upload(&c0).unwrap();
            let (a, g) = (act.code(), gate.code());
            matmul::gemm_epilogue::launch(dev, grid, n as u32, true, a, g, &bias, &aux, &mut c)
                .unwrap();
            let want: Vec<f64> = (0..m * n)
                .map(|i| {
                    let v = act.eval_f64(c0[i] as f64 + bias_host[i % n] as f64);
                    if gate == Act::Identity {
                        v
                    } else {
                        v * gate.derivative_f64(aux_host[i] as f64)
                    }
                })
                .collect();
            let case = format!("epilogue {act:?} gate {gate:?} grid {grid:?}");
            assert_close_floor(&case, &c.to_host().unwrap(), &want, TOL, 0.1);
        }
        // Row sums of op(A) for A stored m × k and k × m, overwriting and accumulating.
        let k = 50;
        let a_host = floats(&mut r, m * k, -1.0, 1.0);
        let db0 = floats(&mut r, m, -1.0, 1.0);
        let a = dev.upload(&a_host).unwrap();
        for (ta, accumulate) in [(false, false), (true, true)] {
            let mut db = dev.upload(&db0).unwrap();
            let grid = Grid::threads(m);
            let (mu, ku) = (m as u32, k as u32);
            matmul::gemm_row_sums::launch(dev, grid, mu, ku, ta, accumulate, &a, &mut db).unwrap();
            let keep = if accumulate { 1.0 } else { 0.0 };
            let want: Vec<f64> = (0..m)
                .map(|row| {
                    let s: f64 = (0..k)
                        .map(|kk| if ta { a_host[kk * m + row] } else { a_host[row * k + kk] } as f64)
                        .sum();
                    s + keep * db0[row] as f64
                })
                .collect();
            let case = format!("row sums ta={ta} accumulate={accumulate}");
            assert_close(&case, &db.to_host().unwrap(), &want, TOL);
        }
    });
}

/// `column_sums` (a bias gradient from `dY`, spread over the GPU) against an f64 reference:
/// column and row counts on and off its 16-column blocks and 16-way row slices (and past
/// eight loads a slice), overwriting and accumulating, more column blocks than workgroups,
/// and the shape errors.
#[test]
fn column_sums_of_a_row_major_matrix() {
    let mut r = rng("column_sums_of_a_row_major_matrix");
    on_every_backend(|dev| {
        let shapes = [
            (1, 1),
            (1, 300),
            (16, 16),
            (17, 129),
            (1024, 512),
            (10, 7),
            (70_000, 2),
        ];
        for (i, &(m, k)) in shapes.iter().enumerate() {
            let a_host = floats(&mut r, m * k, -1.0, 1.0);
            let db0 = floats(&mut r, m, -1.0, 1.0);
            let a = dev.upload(&a_host).unwrap();
            let accumulate = i % 2 == 1;
            let mut db = if accumulate {
                dev.upload(&db0).unwrap()
            } else {
                poisoned(dev, m)
            };
            matmul::column_sums(dev, &a, &mut db, accumulate).unwrap();
            let keep = if accumulate { 1.0 } else { 0.0 };
            let want: Vec<f64> = (0..m)
                .map(|c| {
                    (0..k).map(|kk| a_host[kk * m + c] as f64).sum::<f64>() + keep * db0[c] as f64
                })
                .collect();
            let case = format!("column sums {k}×{m} accumulate={accumulate}");
            assert_close(&case, &db.to_host().unwrap(), &want, TOL);
        }
        let a = dev.upload(&floats(&mut r, 10, -1.0, 1.0)).unwrap();
        let mut db = poisoned(dev, 3);
        let e = matmul::column_sums(dev, &a, &mut db, false).unwrap_err();
        assert!(
            e.to_string().contains("10 elements are not rows of 3"),
            "{e}"
        );
        let mut none = poisoned(dev, 0);
        let e = matmul::column_sums(dev, &a, &mut none, false).unwrap_err();
        assert!(
            e.to_string().contains("10 elements are not rows of 0"),
            "{e}"
        );
        let empty = poisoned(dev, 0);
        matmul::column_sums(dev, &empty, &mut none, false).unwrap();
    });
}

#[test]
fn tile_kernels_index_their_arrays_by_constants_only() {
    // A run-time index would put the array in local memory (spilled per invocation); the
    // unrolled loops make every index of the tiles' register arrays a literal.
    assert_array_indices_literal("matmul_t64", matmul_t64::CUDA, matmul_t64::WGSL, 4);
    assert_array_indices_literal("matmul_t16", matmul_t16::CUDA, matmul_t16::WGSL, 2);
    assert_array_indices_literal("matmul_t32", matmul_t32::CUDA, matmul_t32::WGSL, 6);
}

#[test]
fn tile_kernels_emit_their_epilogue_once_per_row_pair_and_keep_their_k_loops() {
    // Issue 15's H200 regression: the front end had unrolled the 64×64 tile's k-step loop
    // and its 16-element epilogue into straight-line CUDA C (3× the code, 124 registers on
    // sm_90). The epilogue helper is called once per loop (t64: two rows at a time; t16:
    // once), and the k-step loop over workgroup memory stays a loop for NVRTC to unroll.
    let calls = |src: &str| {
        src.lines()
            .filter(|l| l.contains("gd_fn_epilogue_") && !l.contains("static __device__"))
            .count()
    };
    assert_eq!(calls(matmul_t64::CUDA), 2, "{}", matmul_t64::CUDA);
    assert_eq!(calls(matmul_t16::CUDA), 1, "{}", matmul_t16::CUDA);
    assert_eq!(calls(matmul_t32::CUDA), 1, "{}", matmul_t32::CUDA);
    // The whole-step loop `for kk in 0..16` (t64) / `0..64` (t16): its end is a literal.
    let k_loop = |src: &str, end: &str| {
        src.lines()
            .any(|l| l.contains("const gd_u32 kk_") && l.ends_with(&format!("_end = {end};")))
    };
    assert!(k_loop(matmul_t64::CUDA, "16u"), "{}", matmul_t64::CUDA);
    assert!(k_loop(matmul_t16::CUDA, "64u"), "{}", matmul_t16::CUDA);
    assert!(k_loop(matmul_t32::CUDA, "64u"), "{}", matmul_t32::CUDA);
}

#[test]
fn split_k_rule_choices() {
    use graphed_kernels::matmul::{Split, FILL_MIN_CHUNK, SPLIT_K};
    let h200 = Some(132);
    // MLP-S's first layer: 64 tiles of 16×16 on 132 multiprocessors → 2 parts.
    let g = Gemm::nn(64, 256, 784);
    assert_eq!((g.tiles(), g.split_parts(h200)), (64, 2));
    // Four tiles, k = 1024: ⌊132 / 4⌋ = 33, capped at 1024 / 128 = 8.
    let g = Gemm::nn(64, 10, 1024);
    assert_eq!((g.tiles(), g.split_parts(h200)), (4, 8));
    assert_eq!(Gemm::tn(10, 64, 1024).split_parts(h200), 8);
    // 128 tiles of 64×64 (MLP-M's hidden layers): ⌊132 / 128⌋ = 1, one pass.
    let g = Gemm::nn(512, 1024, 1024);
    assert_eq!((g.tiles(), g.split_parts(h200)), (128, 1));
    // Enough tiles, or too short a k, or no count of multiprocessors: one pass.
    assert_eq!(Gemm::nn(1024, 1024, 4096).split_parts(h200), 1);
    assert_eq!(
        Gemm::nn(64, 10, 2 * FILL_MIN_CHUNK - 1).split_parts(h200),
        1
    );
    assert_eq!(Gemm::nn(64, 10, 2 * FILL_MIN_CHUNK).split_parts(h200), 2);
    assert_eq!(Gemm::nn(64, 10, 1024).split_parts(None), 1);
    // Ranges are multiples of 64: 784 in 3 parts is 320 + 320 + 144.
    assert_eq!(Gemm::nn(16, 16, 784).split_parts(Some(3)), 3);
    // The fill rule off, or forced.
    let g = Gemm::nn(64, 10, 1024);
    assert_eq!(g.with_split(Split::Bounded).split_parts(h200), 1);
    assert_eq!(g.with_split(Split::Parts(3)).split_parts(None), 3);
    assert_eq!(g.with_split(Split::Parts(1)).split_parts(h200), 1);
    assert_eq!(g.with_split(Split::Parts(0)).split_parts(h200), 1);
    // At most k / 64 parts: 1000 / 100 rounds up to ranges of 64, 16 of them.
    assert_eq!(
        Gemm::nn(4, 4, 1000)
            .with_split(Split::Parts(100))
            .split_parts(None),
        16
    );
    // Past SPLIT_K at least ⌈k / SPLIT_K⌉ parts, whatever the rule says.
    let long = Gemm::nn(64, 10, 2 * SPLIT_K + 5);
    assert_eq!(long.with_split(Split::Bounded).split_parts(h200), 3);
    assert_eq!(long.split_parts(None), 3);
    assert_eq!(long.with_split(Split::Parts(2)).split_parts(None), 3);
    assert_eq!(long.split_parts(h200), 33, "the fill rule asks for more");
    assert_eq!(Gemm::nn(3, 3, 0).split_parts(h200), 1);
}

#[test]
fn split_products_match_one_pass_and_the_oracle() {
    use graphed_kernels::matmul::Split;
    let mut r = rng("split_products_match_one_pass_and_the_oracle");
    on_every_backend(|dev| {
        // Where the device reports no multiprocessors (host, wgpu) the rule never splits.
        let sms = dev.multiprocessors();
        assert_eq!(
            sms.is_some(),
            dev.kind() == graphed_runtime::BackendKind::Cuda
        );
        assert_eq!(dev.split_fill(), sms);
        for &(m, n, k, tile, parts) in &[
            (7, 9, 700, Tile::T16, 4),
            (33, 20, 300, Tile::T16, 2),
            (5, 70, 513, Tile::T64, 3),
            (1, 1, 200, Tile::T16, 4),
            (7, 9, 700, Tile::T32, 4),
            (70, 33, 300, Tile::T32, 2),
        ] {
            let a_host = floats(&mut r, m * k, -1.0, 1.0);
            let b_host = floats(&mut r, k * n, -1.0, 1.0);
            let bias_host = floats(&mut r, n, -1.0, 1.0);
            let c0 = floats(&mut r, m * n, -1.0, 1.0);
            let db0 = floats(&mut r, m, -1.0, 1.0);
            let (a, b) = (dev.upload(&a_host).unwrap(), dev.upload(&b_host).unwrap());
            let bias = dev.upload(&bias_host).unwrap();
            for (ta, tb) in [(false, false), (true, true), (false, true)] {
                let g = Gemm {
                    ta,
                    tb,
                    ..Gemm::nn(m, n, k).with_tile(tile)
                };
                let split = g.with_split(Split::Parts(parts));
                assert_eq!(split.split_parts(sms), parts, "{}", shapes(g));
                let prod = reference(g, &a_host, &b_host);
                let row_sums: Vec<f64> = (0..m)
                    .map(|row| {
                        (0..k)
                            .map(|kk| {
                                if ta {
                                    a_host[kk * m + row]
                                } else {
                                    a_host[row * k + kk]
                                }
                            })
                            .map(f64::from)
                            .sum()
                    })
                    .collect();
                // Plain, one pass against split.
                let mut one = poisoned(dev, m * n);
                let one_g = g.with_split(Split::Bounded);
                matmul::matmul(dev, one_g, &a, &b, &mut one, &Epilogue::none()).unwrap();
                let mut c = poisoned(dev, m * n);
                matmul::matmul(dev, split, &a, &b, &mut c, &Epilogue::none()).unwrap();
                let case = format!("{} in {parts} parts", shapes(g));
                let (c, one) = (c.to_host().unwrap(), one.to_host().unwrap());
                assert_close_floor(&case, &c, &prod, TOL, SUM_FLOOR);
                assert_close_floor(&case, &one, &prod, TOL, SUM_FLOOR);
                let one64: Vec<f64> = one.iter().map(|&v| f64::from(v)).collect();
                assert_close_floor(
                    &format!("{case} against one pass"),
                    &c,
                    &one64,
                    TOL,
                    SUM_FLOOR,
                );
                // Bias and activation, then accumulate with row sums, split.
                let mut c = poisoned(dev, m * n);
                let epi = Epilogue::bias_act(&bias, Act::Tanh);
                matmul::matmul(dev, split, &a, &b, &mut c, &epi).unwrap();
                let want: Vec<f64> = (0..m * n)
                    .map(|i| Act::Tanh.eval_f64(prod[i] + f64::from(bias_host[i % n])))
                    .collect();
                assert_close_floor(
                    &format!("{case} bias+tanh"),
                    &c.to_host().unwrap(),
                    &want,
                    TOL,
                    0.1,
                );
                let mut c = dev.upload(&c0).unwrap();
                let mut db = dev.upload(&db0).unwrap();
                let epi = Epilogue::none().accumulate(true);
                matmul::matmul_row_sums(dev, split, &a, &b, &mut c, &mut db, &epi).unwrap();
                let want: Vec<f64> = (0..m * n).map(|i| prod[i] + f64::from(c0[i])).collect();
                let want_db: Vec<f64> = (0..m).map(|i| row_sums[i] + f64::from(db0[i])).collect();
                assert_close_floor(
                    &format!("{case} accumulate"),
                    &c.to_host().unwrap(),
                    &want,
                    TOL,
                    SUM_FLOOR,
                );
                assert_close_floor(
                    &format!("{case} row sums"),
                    &db.to_host().unwrap(),
                    &want_db,
                    TOL,
                    SUM_FLOOR,
                );
            }
        }
        // The switch (on a device of its own: other tests share `dev`).
        let own = graphed_runtime::Device::open_new(dev.kind()).unwrap();
        own.set_split_fill(false);
        assert_eq!(own.split_fill(), None);
        own.set_split_fill(true);
        assert_eq!(own.split_fill(), sms);
    });
}
