//! Matrix products routed to the vendor BLAS (cuBLAS on CUDA) inside recorded steps: which
//! route a product takes, replay ≡ eager bitwise while a per-step accumulate flag switches
//! between overwriting and accumulating (with no recapture), agreement with an f64 reference,
//! and the portable DSL route when the vendor BLAS is switched off.
//!
//! One test per binary: it switches the shared device's route, which would disturb other
//! tests running beside it.

mod common;

use common::{bitwise_eq, floats, on_every_backend, rel_err, rng};
use graphed::kernels::elementwise::Act;
use graphed::kernels::matmul::{matmul, matmul_row_sums, Epilogue, Gemm, Tile};
use graphed::prelude::*;
use graphed::{BackendKind, Required};

/// A layer's three products: `h = relu(x·Wᵀ + b)`; `dW (+)= dYᵀ·x` with `db (+)=` the column
/// sums of `dY`; `dx = (dY·W) ⊙ relu′(x)`.
#[graphed]
fn layer_products(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    #[state] b: &mut Buffer<f32>,
    #[state] dw: &mut Buffer<f32>,
    #[state] db: &mut Buffer<f32>,
    x: &Input<f32>,
    dy: &Input<f32>,
    accumulate: bool,
    #[key] dims: &[usize],
) -> Result<(Output<f32>, Output<f32>)> {
    let (batch, inp, out) = (dims[0], dims[1], dims[2]);
    let mut h = cx.output::<f32>(batch * out)?;
    let fwd = Epilogue::bias_act(b, Act::Relu);
    matmul(
        cx,
        Gemm::nt(batch, out, inp).with_tile(Tile::Vendor),
        x,
        w,
        &mut h,
        &fwd,
    )?;
    let grad = Epilogue::none().accumulate(accumulate);
    matmul_row_sums(
        cx,
        Gemm::tn(out, inp, batch).with_tile(Tile::Vendor),
        dy,
        x,
        dw,
        db,
        &grad,
    )?;
    let mut dx = cx.output::<f32>(batch * inp)?;
    let back = Epilogue::none().gate(Act::Relu, x);
    matmul(
        cx,
        Gemm::nn(batch, inp, out).with_tile(Tile::Vendor),
        dy,
        w,
        &mut dx,
        &back,
    )?;
    Ok((h, dx))
}

/// One product with the automatic route, `C = A·B`.
#[graphed]
fn auto_product(
    cx: &mut Step,
    #[state] a: &mut Buffer<f32>,
    #[state] b: &mut Buffer<f32>,
    #[key] mnk: &[usize],
) -> Result<Output<f32>> {
    let mut c = cx.output::<f32>(mnk[0] * mnk[1])?;
    matmul(
        cx,
        Gemm::nn(mnk[0], mnk[1], mnk[2]),
        a,
        b,
        &mut c,
        &Epilogue::none(),
    )?;
    Ok(c)
}

/// Row-major `r × c` element `(i, j)` of `m`, transposed when `t`.
fn at(m: &[f32], cols: usize, i: usize, j: usize) -> f64 {
    m[i * cols + j] as f64
}

struct Reference {
    h: Vec<f64>,
    dx: Vec<f64>,
    dw: Vec<f64>,
    db: Vec<f64>,
}

/// The three products in f64; `dw`, `db` start from `dw0`, `db0` and accumulate when asked.
#[allow(clippy::too_many_arguments)]
fn reference(
    [batch, inp, out]: [usize; 3],
    w: &[f32],
    b: &[f32],
    x: &[f32],
    dy: &[f32],
    dw0: &[f64],
    db0: &[f64],
    accumulate: bool,
) -> Reference {
    let keep = if accumulate { 1.0 } else { 0.0 };
    let mut h = vec![0.0; batch * out];
    for r in 0..batch {
        for o in 0..out {
            let s: f64 = (0..inp).map(|i| at(x, inp, r, i) * at(w, inp, o, i)).sum();
            h[r * out + o] = (s + b[o] as f64).max(0.0);
        }
    }
    let mut dw = vec![0.0; out * inp];
    for o in 0..out {
        for i in 0..inp {
            let s: f64 = (0..batch)
                .map(|r| at(dy, out, r, o) * at(x, inp, r, i))
                .sum();
            dw[o * inp + i] = s + keep * dw0[o * inp + i];
        }
    }
    let db = (0..out)
        .map(|o| (0..batch).map(|r| at(dy, out, r, o)).sum::<f64>() + keep * db0[o])
        .collect();
    let mut dx = vec![0.0; batch * inp];
    for r in 0..batch {
        for i in 0..inp {
            let s: f64 = (0..out).map(|o| at(dy, out, r, o) * at(w, inp, o, i)).sum();
            dx[r * inp + i] = if x[r * inp + i] > 0.0 { s } else { 0.0 };
        }
    }
    Reference { h, dx, dw, db }
}

/// Products accumulate `k` terms in `f32`: relative error of the whole output.
const TOL: f64 = 1e-5;

#[test]
fn products_route_to_the_vendor_blas_and_replay_equals_eager() {
    let required = Required::from_env().unwrap();
    let switched_off = std::env::var("GRAPHED_VENDOR_BLAS").is_ok_and(|v| v.trim() == "0");
    on_every_backend(|dev| {
        let mut r = rng("products_route_to_the_vendor_blas");
        let dims = [33usize, 70, 45];
        let [batch, inp, out] = dims;
        if dev.kind() == BackendKind::Cuda && required.cuda && !switched_off {
            assert!(
                dev.vendor_blas(),
                "cuBLAS did not load on the CUDA device (GRAPHED_REQUIRE lists cuda)"
            );
        }
        let w0 = floats(&mut r, out * inp, -1.0, 1.0);
        let b0 = floats(&mut r, out, -1.0, 1.0);
        let dw0 = floats(&mut r, out * inp, -1.0, 1.0);
        let db0 = floats(&mut r, out, -1.0, 1.0);
        let state = || {
            [&w0, &b0, &dw0, &db0]
                .map(|v| dev.upload(v).unwrap())
                .into_iter()
        };
        let mut rep_state: Vec<_> = state().collect();
        let mut eag_state: Vec<_> = state().collect();
        let mut rep = LayerProducts::new(dev).unwrap();
        let mut eag = LayerProducts::new(dev).unwrap();
        let mut ref_dw: Vec<f64> = dw0.iter().map(|&v| v as f64).collect();
        let mut ref_db: Vec<f64> = db0.iter().map(|&v| v as f64).collect();
        let flags = [false, true, true, false, true, true];
        for (step, &accumulate) in flags.iter().enumerate() {
            let x = floats(&mut r, batch * inp, -1.0, 1.0);
            let dy = floats(&mut r, batch * out, -1.0, 1.0);
            let [w, b, dw, db] = &mut rep_state[..] else {
                unreachable!()
            };
            let (h1, dx1) = rep
                .call(w, b, dw, db, &x[..], &dy[..], accumulate, &dims[..])
                .unwrap();
            let (h1, dx1) = (h1.to_host().unwrap(), dx1.to_host().unwrap());
            let [w, b, dw, db] = &mut eag_state[..] else {
                unreachable!()
            };
            let (h2, dx2) = eag
                .eager(w, b, dw, db, &x[..], &dy[..], accumulate, &dims[..])
                .unwrap();
            let (h2, dx2) = (h2.to_host().unwrap(), dx2.to_host().unwrap());
            let case = format!("{} step {step} accumulate={accumulate}", dev.kind());
            assert!(bitwise_eq(&h1, &h2), "{case}: h differs");
            assert!(bitwise_eq(&dx1, &dx2), "{case}: dx differs");
            for (i, what) in [(2, "dw"), (3, "db")] {
                assert!(
                    bitwise_eq(
                        &rep_state[i].to_host().unwrap(),
                        &eag_state[i].to_host().unwrap()
                    ),
                    "{case}: {what} differs between replay and eager"
                );
            }
            let want = reference(dims, &w0, &b0, &x, &dy, &ref_dw, &ref_db, accumulate);
            let dw_now = rep_state[2].to_host().unwrap();
            let db_now = rep_state[3].to_host().unwrap();
            for (what, got, want) in [
                ("h", &h1, &want.h),
                ("dx", &dx1, &want.dx),
                ("dw", &dw_now, &want.dw),
                ("db", &db_now, &want.db),
            ] {
                let e = rel_err(got, want);
                assert!(
                    e <= TOL,
                    "{case}: {what} relative error {e:.2e} > {TOL:.0e}"
                );
            }
            (ref_dw, ref_db) = (want.dw, want.db);
        }
        let s = rep.stats();
        assert_eq!(
            (s.recordings, s.replays, s.eager_calls),
            (1, 6, 0),
            "the accumulate flag must not recapture: {s:?}"
        );
        // Forward, weight gradient and input gradient: three library calls where the device
        // has a vendor BLAS, none elsewhere.
        let vendor = dev.vendor_blas();
        let plan = rep.plan().unwrap();
        assert_eq!(plan.library_calls(), if vendor { 3 } else { 0 });
        // Either three fused DSL launches, or three cuBLAS calls plus the forward epilogue,
        // the row sums and the gate as launches of their own; on CUDA the forward's bias and
        // ReLU fuse into its cuBLASLt call (the weight gradient's flag is per step, so its
        // row sums stay a launch; tests/fused.rs covers the fused routes).
        let fwd_fused = plan.to_dot().contains("+bias+relu");
        assert_eq!(
            fwd_fused,
            vendor && dev.kind() == BackendKind::Cuda && dev.vendor_fused(),
            "{}",
            plan.to_dot()
        );
        assert_eq!(
            plan.launch_count(),
            if fwd_fused { 2 } else { 3 },
            "{}",
            plan.to_dot()
        );
        assert_eq!(
            plan.to_dot().contains("sgemm 33x45x70"),
            vendor,
            "{}",
            plan.to_dot()
        );

        // `Tile::Auto` takes the vendor BLAS from VENDOR_MIN_MACS multiply-adds up (MLP-M's
        // products), from VENDOR_MIN_MACS_FUSED where the product is one library call (this
        // one has no epilogue; MLP-S's largest, 12.8 M, where the device fuses epilogues),
        // and keeps smaller ones (MLP-S's 4.2 M) on the DSL kernels.
        if vendor {
            let one_call = usize::from(dev.vendor_fused());
            for (mnk, library) in [
                ([512usize, 1024, 128], 1),
                ([64, 256, 784], one_call),
                ([64, 256, 256], 0),
            ] {
                let [m, n, k] = mnk;
                let mut a = dev.upload(&floats(&mut r, m * k, -1.0, 1.0)).unwrap();
                let mut b = dev.upload(&floats(&mut r, k * n, -1.0, 1.0)).unwrap();
                let mut step = AutoProduct::new(dev).unwrap();
                step.call(&mut a, &mut b, &mnk[..]).unwrap();
                assert_eq!(
                    step.plan().unwrap().library_calls(),
                    library,
                    "{m}×{n}×{k} ({} multiply-adds)",
                    m * n * k
                );
            }
        }

        // Switched off, the same step records the portable products only, and the two routes
        // agree within the products' tolerance.
        dev.set_vendor_blas(false);
        let mut dsl = LayerProducts::new(dev).unwrap();
        let mut dsl_state: Vec<_> = state().collect();
        let x = floats(&mut r, batch * inp, -1.0, 1.0);
        let dy = floats(&mut r, batch * out, -1.0, 1.0);
        let [w, b, dw, db] = &mut dsl_state[..] else {
            unreachable!()
        };
        let (h_dsl, _) = dsl
            .call(w, b, dw, db, &x[..], &dy[..], false, &dims[..])
            .unwrap();
        let h_dsl = h_dsl.to_host().unwrap();
        assert_eq!(dsl.plan().unwrap().library_calls(), 0);
        dev.set_vendor_blas(true);
        let [w, b, dw, db] = &mut rep_state[..] else {
            unreachable!()
        };
        w.write(&w0).unwrap();
        b.write(&b0).unwrap();
        let (h_rep, _) = rep
            .call(w, b, dw, db, &x[..], &dy[..], false, &dims[..])
            .unwrap();
        let h_rep: Vec<f64> = h_rep.to_host().unwrap().iter().map(|&v| v as f64).collect();
        let e = rel_err(&h_dsl, &h_rep);
        assert!(e <= TOL, "{}: routes differ by {e:.2e}", dev.kind());
    });
}
