//! Matrix products: every transposition, both tilings, odd shapes, and the epilogue.

use graphed_kernels::elementwise::Act;
use graphed_kernels::matmul::{self, matmul_t16, matmul_t64, Epilogue, Gemm, Tile};

use crate::common::{
    assert_array_indices_literal, assert_close, assert_close_floor, floats, on_every_backend,
    poisoned, rng,
};

/// Products accumulate `k` terms in increasing order in `f32`.
const TOL: f64 = 1e-5;

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
                let g = Gemm {
                    m,
                    n,
                    k,
                    ta,
                    tb,
                    tile,
                    math: Default::default(),
                };
                let mut c = poisoned(dev, m * n);
                matmul::matmul(dev, g, &a, &b, &mut c, &Epilogue::none()).unwrap();
                let want = reference(g, &a_host, &b_host);
                assert_close(&shapes(g), &c.to_host().unwrap(), &want, TOL);
            }
        }
    });
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
                let g = Gemm {
                    m,
                    n,
                    k,
                    ta,
                    tb,
                    tile,
                    math: Default::default(),
                };
                let a_host = floats(&mut r, m * k, -1.0, 1.0);
                let b_host = floats(&mut r, k * n, -1.0, 1.0);
                let bias_host = floats(&mut r, n, -1.0, 1.0);
                let aux_host = floats(&mut r, m * n, -3.0, 3.0);
                let c0 = floats(&mut r, m * n, -1.0, 1.0);
                let db0 = floats(&mut r, m, -1.0, 1.0);
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
                        .map(|i| {
                            prod[i] * act.derivative_f64(aux_host[i] as f64) + keep * c0[i] as f64
                        })
                        .collect();
                    let want_db: Vec<f64> =
                        (0..m).map(|i| row_sums[i] + keep * db0[i] as f64).collect();
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
        }
    });
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
        for (act, gate) in [(Act::Relu, Act::Identity), (Act::Gelu, Act::Tanh)] {
            let mut c = dev.upload(&c0).unwrap();
            let grid = Grid::threads(m * n);
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
            let case = format!("epilogue {act:?} gate {gate:?}");
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

#[test]
fn tile_kernels_index_their_arrays_by_constants_only() {
    // A run-time index would put the array in local memory (spilled per invocation); the
    // unrolled loops make every index of the tiles' register arrays a literal.
    assert_array_indices_literal("matmul_t64", matmul_t64::CUDA, matmul_t64::WGSL, 4);
    assert_array_indices_literal("matmul_t16", matmul_t16::CUDA, matmul_t16::WGSL, 2);
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
    // The whole-step loop `for kk in 0..16` (t64) / `0..64` (t16): its end is a literal.
    let k_loop = |src: &str, end: &str| {
        src.lines()
            .any(|l| l.contains("const gd_u32 kk_") && l.ends_with(&format!("_end = {end};")))
    };
    assert!(k_loop(matmul_t64::CUDA, "16u"), "{}", matmul_t64::CUDA);
    assert!(k_loop(matmul_t16::CUDA, "64u"), "{}", matmul_t16::CUDA);
}
