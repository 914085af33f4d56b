//! Issue 17, products that fill the GPU: a matrix product split in `k` (forced, or by the fill
//! rule where the device reports its multiprocessors) replays bitwise as it runs eagerly, on
//! every backend, and agrees with the unsplit product within the stated tolerance.

mod common;

use common::{bitwise_eq, floats, on_every_backend, rel_err, rng};
use graphed::kernels::matmul::{matmul, matmul_row_sums, Epilogue, Gemm, Split};
use graphed::prelude::*;

/// A layer forward and its weight gradient: `h = relu(x·w + b)`, `dw = xᵀ·h`, `db = Σ rows`,
/// each product split as `split` (`parts == 0`: the rule).
#[graphed]
fn layer_step(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    #[state] b: &mut Buffer<f32>,
    x: &Input<f32>,
    #[key] dims: (usize, usize, usize),
    #[key] parts: usize,
) -> Result<Output<f32>> {
    let (m, n, k) = dims;
    let split = if parts == 0 {
        Split::Auto
    } else {
        Split::Parts(parts)
    };
    let mut h = cx.workspace::<f32>(m * n)?;
    let g = Gemm::nn(m, n, k).with_split(split);
    matmul(
        cx,
        g,
        x,
        w,
        &mut h,
        &Epilogue::bias_act(b, graphed::kernels::elementwise::Act::Relu),
    )?;
    // dw[k × n] = xᵀ[k × m]·h[m × n]: k = m, so split m.
    let mut dw = cx.output::<f32>(k * n)?;
    let mut db = cx.workspace::<f32>(k)?;
    let gt = Gemm::tn(k, n, m).with_split(split);
    matmul_row_sums(cx, gt, x, &h, &mut dw, &mut db, &Epilogue::none())?;
    Ok(dw)
}

#[test]
fn split_products_replay_bitwise_as_eager() {
    let mut r = rng("split_products_replay_bitwise_as_eager");
    on_every_backend(|dev| {
        // (m, n, k): the batch m is the weight gradient's k; short enough for the host.
        let dims = (300, 9, 20);
        let (m, n, k) = dims;
        for parts in [0usize, 1, 3] {
            let w0 = floats(&mut r, k * n, -1.0, 1.0);
            let b0 = floats(&mut r, n, -0.5, 0.5);
            let (mut w, mut b) = (dev.upload(&w0).unwrap(), dev.upload(&b0).unwrap());
            let mut step = LayerStep::new(dev).unwrap();
            let mut eager = LayerStep::new(dev).unwrap();
            let mut one = LayerStep::new(dev).unwrap();
            for call in 0..3 {
                let x = floats(&mut r, m * k, -1.0, 1.0);
                let got = step.call(&mut w, &mut b, &x[..], dims, parts).unwrap();
                let got = got.to_host().unwrap();
                let want = eager.eager(&mut w, &mut b, &x[..], dims, parts).unwrap();
                let want = want.to_host().unwrap();
                let case = format!("{} parts {parts} call {call}", dev.kind());
                assert!(bitwise_eq(&got, &want), "{case}: replay differs from eager");
                assert!(got.iter().all(|v| v.is_finite()), "{case}");
                // Against one pass: the same sums in another order (f32, k = 300 terms).
                let once = one.eager(&mut w, &mut b, &x[..], dims, 1).unwrap();
                let once: Vec<f64> = once
                    .to_host()
                    .unwrap()
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect();
                let err = rel_err(&got, &once);
                assert!(err <= 1e-5, "{case}: {err} from the one-pass product");
                if parts == 1 {
                    let once: Vec<f32> = once.iter().map(|&v| v as f32).collect();
                    assert!(bitwise_eq(&got, &once), "{case}: Parts(1) is one pass");
                }
            }
            let s = step.stats();
            assert_eq!((s.recordings, s.replays), (1, 3), "{s:?}");
            // The split adds its second pass: 2 launches per split product (1 where the
            // last workgroup of each tile sums, serial split-K, an opt-in on CUDA).
            let per_split = if dev.split_serial() { 1 } else { 2 };
            let split = if parts == 0 {
                Split::Auto
            } else {
                Split::Parts(parts)
            };
            let launches = |g: Gemm| {
                if g.with_split(split).split_parts(dev.split_fill()) > 1 {
                    per_split
                } else {
                    1
                }
            };
            let want = launches(Gemm::nn(m, n, k)) + launches(Gemm::tn(k, n, m));
            assert_eq!(s.launches_per_replay, want, "{s:?}");
            if parts == 3 {
                assert_eq!(
                    want,
                    1 + per_split,
                    "k = 20 stays whole, k = 300 takes 3 parts"
                );
            }
        }
    });
}
