//! Products that fuse their epilogue into the vendor BLAS call (cuBLASLt's epilogues on CUDA:
//! a bias, a bias and ReLU, a bias gradient beside a weight gradient): the route each
//! product takes, replay ≡ eager bitwise, agreement with an f64 reference, the unfused route
//! when fusion is switched off, and the checks a fused call makes on every backend.
//!
//! The routing test is the binary's only test that switches the shared device's route.

mod common;

use common::{bitwise_eq, floats, on_every_backend, rel_err, rng};
use graphed::blas::{product_fused, Fused, Sgemm};
use graphed::kernels::elementwise::Act;
use graphed::kernels::matmul::{matmul, matmul_row_sums, Epilogue, Gemm, Tile};
use graphed::prelude::*;
use graphed::{BackendKind, Required};

/// A layer's three products: `h = act(x·Wᵀ + b)` (fusable), `dW = dYᵀ·x` with `db` the
/// column sums of `dY` (fusable: the flag is the constant `false`), and
/// `dx = (dY·W) ⊙ relu′(x)` (a gate: never fused).
#[graphed]
fn fused_layer(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    #[state] b: &mut Buffer<f32>,
    #[state] dw: &mut Buffer<f32>,
    #[state] db: &mut Buffer<f32>,
    x: &Input<f32>,
    dy: &Input<f32>,
    #[key] dims: &[usize],
    #[key] relu: bool,
) -> Result<(Output<f32>, Output<f32>)> {
    let (batch, inp, out) = (dims[0], dims[1], dims[2]);
    let act = if relu { Act::Relu } else { Act::Identity };
    let mut h = cx.output::<f32>(batch * out)?;
    let vendor = |g: Gemm| g.with_tile(Tile::Vendor);
    matmul(
        cx,
        vendor(Gemm::nt(batch, out, inp)),
        x,
        w,
        &mut h,
        &Epilogue::bias_act(b, act),
    )?;
    matmul_row_sums(
        cx,
        vendor(Gemm::tn(out, inp, batch)),
        dy,
        x,
        dw,
        db,
        &Epilogue::none(),
    )?;
    let mut dx = cx.output::<f32>(batch * inp)?;
    let gate = Epilogue::none().gate(Act::Relu, x);
    matmul(cx, vendor(Gemm::nn(batch, inp, out)), dy, w, &mut dx, &gate)?;
    Ok((h, dx))
}

struct Want {
    h: Vec<f64>,
    dw: Vec<f64>,
    db: Vec<f64>,
    dx: Vec<f64>,
}

/// The layer in f64.
fn reference(
    [batch, inp, out]: [usize; 3],
    relu: bool,
    w: &[f32],
    b: &[f32],
    x: &[f32],
    dy: &[f32],
) -> Want {
    let f = |v: f32| v as f64;
    let mut h = vec![0.0; batch * out];
    for r in 0..batch {
        for o in 0..out {
            let s: f64 = (0..inp)
                .map(|i| f(x[r * inp + i]) * f(w[o * inp + i]))
                .sum();
            let z = s + f(b[o]);
            h[r * out + o] = if relu { z.max(0.0) } else { z };
        }
    }
    let mut dw = vec![0.0; out * inp];
    for o in 0..out {
        for i in 0..inp {
            dw[o * inp + i] = (0..batch)
                .map(|r| f(dy[r * out + o]) * f(x[r * inp + i]))
                .sum();
        }
    }
    let db = (0..out)
        .map(|o| (0..batch).map(|r| f(dy[r * out + o])).sum())
        .collect();
    let mut dx = vec![0.0; batch * inp];
    for r in 0..batch {
        for i in 0..inp {
            let s: f64 = (0..out)
                .map(|o| f(dy[r * out + o]) * f(w[o * inp + i]))
                .sum();
            dx[r * inp + i] = if x[r * inp + i] > 0.0 { s } else { 0.0 };
        }
    }
    Want { h, dw, db, dx }
}

/// Whether `dev` is wgpu, where a half product is refused by name (asserted); elsewhere
/// asserts that `ran` succeeded.
fn refused_on_wgpu(dev: &Device, case: &str, ran: graphed::Result<()>) -> bool {
    if dev.kind() == BackendKind::Wgpu {
        let e = ran.unwrap_err();
        assert!(
            e.to_string().contains("half-precision matrix product"),
            "{case}: {e}"
        );
        return true;
    }
    ran.unwrap();
    false
}

/// `act(A·Bᵀ + bias)` in f64 of the `bf16` operands (`A` is `m × k`, `B` `n × k`).
fn biased_reference(
    [m, n, k]: [usize; 3],
    a: &[graphed::bf16],
    b: &[graphed::bf16],
    bias: &[f32],
    act: Act,
) -> Vec<f64> {
    (0..m * n)
        .map(|i| {
            let (row, col) = (i / n, i % n);
            let s: f64 = (0..k)
                .map(|kk| a[row * k + kk].to_f64() * b[col * k + kk].to_f64())
                .sum();
            act.eval_f64(s + bias[col] as f64)
        })
        .collect()
}

/// Products sum `k` terms in `f32`: relative error of a whole output.
const TOL: f64 = 1e-5;

/// Poison for outputs and gradients before a run.
const POISON: f32 = f32::NAN;

#[test]
fn epilogues_fuse_into_the_vendor_call_and_replay_equals_eager() {
    let required = Required::from_env().unwrap();
    on_every_backend(|dev| {
        let mut r = rng("epilogues_fuse_into_the_vendor_call");
        let cuda = dev.kind() == BackendKind::Cuda;
        let fusing = cuda && dev.vendor_blas() && dev.vendor_fused();
        if cuda && required.cuda {
            assert!(
                dev.vendor_blas(),
                "cuBLAS did not load (GRAPHED_REQUIRE lists cuda)"
            );
        }
        // Odd and aligned shapes; the last binds the bias at an odd offset of a larger
        // buffer (4-byte aligned only), which cuBLASLt may run or decline: either way the
        // results hold.
        let cases: [([usize; 3], bool, usize); 5] = [
            ([33, 70, 45], true, 0),
            ([64, 256, 128], false, 0),
            ([1, 16, 8], true, 0),
            ([512, 128, 96], true, 0),
            ([40, 24, 36], true, 1),
        ];
        for (dims, relu, bias_at) in cases {
            let [batch, inp, out] = dims;
            let case = format!("{} {dims:?} relu={relu} bias at {bias_at}", dev.kind());
            let w0 = floats(&mut r, out * inp, -1.0, 1.0);
            let b0 = floats(&mut r, out, -1.0, 1.0);
            let mut b_room = vec![POISON; bias_at];
            b_room.extend_from_slice(&b0);
            let states = || {
                let b_all = dev.upload(&b_room).unwrap();
                [
                    dev.upload(&w0).unwrap(),
                    b_all.slice(bias_at..bias_at + out).unwrap(),
                    dev.upload(&vec![POISON; out * inp]).unwrap(),
                    dev.upload(&vec![POISON; out]).unwrap(),
                ]
            };
            let (mut rep_s, mut eag_s) = (states(), states());
            let (mut rep, mut eag) = (FusedLayer::new(dev).unwrap(), FusedLayer::new(dev).unwrap());
            for step in 0..3 {
                let x = floats(&mut r, batch * inp, -1.0, 1.0);
                let dy = floats(&mut r, batch * out, -1.0, 1.0);
                for s in [&mut rep_s, &mut eag_s] {
                    s[2].write(&vec![POISON; out * inp]).unwrap();
                    s[3].write(&vec![POISON; out]).unwrap();
                }
                let [w, b, dw, db] = &mut rep_s;
                let (h1, dx1) = rep
                    .call(w, b, dw, db, &x[..], &dy[..], &dims[..], relu)
                    .unwrap();
                let [w, b, dw, db] = &mut eag_s;
                let (h2, dx2) = eag
                    .eager(w, b, dw, db, &x[..], &dy[..], &dims[..], relu)
                    .unwrap();
                let one = [
                    h1.to_host().unwrap(),
                    rep_s[2].to_host().unwrap(),
                    rep_s[3].to_host().unwrap(),
                    dx1.to_host().unwrap(),
                ];
                let two = [
                    h2.to_host().unwrap(),
                    eag_s[2].to_host().unwrap(),
                    eag_s[3].to_host().unwrap(),
                    dx2.to_host().unwrap(),
                ];
                let want = reference(dims, relu, &w0, &b0, &x, &dy);
                let names = ["h", "dw", "db", "dx"];
                for (i, want) in [&want.h, &want.dw, &want.db, &want.dx]
                    .into_iter()
                    .enumerate()
                {
                    assert!(
                        bitwise_eq(&one[i], &two[i]),
                        "{case} step {step}: {} differs between replay and eager",
                        names[i]
                    );
                    let e = rel_err(&one[i], want);
                    assert!(
                        e <= TOL,
                        "{case} step {step}: {} relative error {e:.2e} > {TOL:.0e}",
                        names[i]
                    );
                }
            }
            let s = rep.stats();
            assert_eq!((s.recordings, s.replays), (1, 3), "{case}: {s:?}");
            let plan = rep.plan().unwrap();
            let dot = plan.to_dot();
            if dev.vendor_blas() {
                assert_eq!(plan.library_calls(), 3, "{case}: {dot}");
            } else {
                assert_eq!(plan.library_calls(), 0, "{case}: {dot}");
            }
            // Fused: only the gate is a launch. Unfused vendor route: the forward epilogue,
            // the row sums and the gate. The DSL kernels: one launch a product.
            let fwd = if relu { "+bias+relu" } else { "+bias\"" };
            let (fwd_fused, dw_fused) = (dot.contains(fwd), dot.contains("+bias-grad"));
            assert!(
                fusing || !(fwd_fused || dw_fused),
                "{case}: fused off CUDA: {dot}"
            );
            if fusing && bias_at == 0 {
                assert!(
                    fwd_fused && dw_fused,
                    "{case}: the products were not fused: {dot}"
                );
            }
            let launches = if dev.vendor_blas() {
                1 + usize::from(!fwd_fused) + usize::from(!dw_fused)
            } else {
                3
            };
            assert_eq!(plan.launch_count(), launches, "{case}: {dot}");
        }

        // Switched off, the same products run unfused (three launches beside them on CUDA);
        // with tuning switched the other way, or each product's first one-pass algorithm, on
        // another algorithm; all agree with the default route within the products' tolerance.
        if fusing {
            let dims = [64usize, 96, 80];
            let [batch, inp, out] = dims;
            let w0 = floats(&mut r, out * inp, -1.0, 1.0);
            let b0 = floats(&mut r, out, -1.0, 1.0);
            let x = floats(&mut r, batch * inp, -1.0, 1.0);
            let dy = floats(&mut r, batch * out, -1.0, 1.0);
            let mut outs = Vec::new();
            let tune = dev.vendor_tune();
            let configs = [
                (true, tune, false),
                (false, tune, false),
                (true, !tune, false),
                (true, false, true),
            ];
            for (on, tuned, one_pass) in configs {
                dev.set_vendor_fused(on);
                dev.set_vendor_tune(tuned);
                dev.set_vendor_one_pass(one_pass);
                let mut s = [&w0, &b0, &vec![POISON; out * inp], &vec![POISON; out]]
                    .map(|v| dev.upload(v).unwrap());
                let mut step = FusedLayer::new(dev).unwrap();
                let [w, b, dw, db] = &mut s;
                let (h, dx) = step
                    .call(w, b, dw, db, &x[..], &dy[..], &dims[..], true)
                    .unwrap();
                outs.push([
                    h.to_host().unwrap(),
                    s[2].to_host().unwrap(),
                    s[3].to_host().unwrap(),
                    dx.to_host().unwrap(),
                ]);
                let plan = step.plan().unwrap();
                assert_eq!(
                    plan.launch_count(),
                    if on { 1 } else { 3 },
                    "fused={on}: {}",
                    plan.to_dot()
                );
            }
            dev.set_vendor_fused(true);
            dev.set_vendor_tune(tune);
            dev.set_vendor_one_pass(false);
            let other_tuning = if tune { "untuned" } else { "tuned" };
            let others = [
                ("unfused", &outs[1]),
                (other_tuning, &outs[2]),
                ("one-pass", &outs[3]),
            ];
            for (route, other) in others {
                for (i, (one, two)) in outs[0].iter().zip(other).enumerate() {
                    let other: Vec<f64> = two.iter().map(|&v| v as f64).collect();
                    let e = rel_err(one, &other);
                    assert!(e <= TOL, "output {i}: fused and {route} differ by {e:.2e}");
                }
            }
        }
    });
}

/// What a fused call checks before any route: the vector's length and type, overlap with an
/// operand, and a flag other than the constant `false`; on every backend, eagerly and inside
/// a recording alike (the eager device path here).
#[test]
fn a_fused_call_checks_its_vector_and_flag_on_every_backend() {
    on_every_backend(|dev| {
        let mut r = rng("a_fused_call_checks");
        let (m, n, k) = (8, 12, 16);
        let a = dev.upload(&floats(&mut r, m * k, -1.0, 1.0)).unwrap();
        let b = dev.upload(&floats(&mut r, k * n, -1.0, 1.0)).unwrap();
        let mut c = dev.upload(&vec![POISON; m * n]).unwrap();
        let g = Sgemm::new(m, n, k);
        let short = dev.upload(&floats(&mut r, n - 1, -1.0, 1.0)).unwrap();
        let wrong = dev.upload(&floats(&mut r, n, -1.0, 1.0)).unwrap();
        let bias = dev.upload(&floats(&mut r, n, -1.0, 1.0)).unwrap();
        let inside = c.slice(0..m).unwrap();
        let other = Device::open_new(BackendKind::Host).unwrap();
        let elsewhere = other.upload(&floats(&mut r, n, -1.0, 1.0)).unwrap();
        let acc = Sgemm {
            accumulate: true.into(),
            ..g
        };
        // The reason of the launch error a fused call must give.
        let mut refused = |g: &Sgemm, f: Fused, v: &Buffer<f32>| match product_fused(
            dev, g, &a, &b, &mut c, f, v,
        ) {
            Err(Error::Launch { reason, .. }) => reason,
            other => panic!("{}: expected a launch error, got {other:?}", dev.kind()),
        };
        // A bias takes n elements, a bias gradient m.
        let why = refused(&g, Fused::Bias, &short);
        assert!(why.contains(&format!("takes {n} f32 elements")), "{why}");
        let why = refused(&g, Fused::BiasGrad, &wrong);
        assert!(why.contains(&format!("takes {m} f32 elements")), "{why}");
        // A fused product never accumulates.
        let why = refused(&acc, Fused::BiasRelu, &bias);
        assert!(why.contains("never accumulates"), "{why}");
        // The vector overlapping the output.
        let why = refused(&g, Fused::BiasGrad, &inside);
        assert!(why.contains("overlaps an operand"), "{why}");
        // A vector of another device.
        let why = refused(&g, Fused::Bias, &elsewhere);
        assert!(why.contains("lives on another device"), "{why}");
        // None of them ran: the output still holds its poison.
        assert!(
            c.to_host().unwrap().iter().all(|v| v.is_nan()),
            "{}",
            dev.kind()
        );
    });
}

/// `matmul_half_bias_act` (a mixed-precision step's logits): on CUDA one cuBLASLt call with
/// the bias (or bias + ReLU) epilogue, on the host the product then the bias launch; on both within rounding of
/// an f64 reference from the `bf16` operands, and on CUDA within rounding of the separate
/// route (the same kernels' order aside). Refused on wgpu (no half products there), and a
/// bias of the wrong length is a shape error everywhere.
#[test]
fn a_half_product_with_its_bias_matches_the_separate_route() {
    use graphed::bf16;
    use graphed::kernels::matmul::{
        epilogue_groups, gemm_epilogue, matmul_half, matmul_half_bias_act,
    };
    let mut r = rng("a_half_product_with_its_bias");
    on_every_backend(|dev| {
        let cases = [
            ([512usize, 10usize, 1024usize], Act::Identity),
            ([33, 7, 45], Act::Identity),
            ([64, 128, 16], Act::Relu),
            ([40, 24, 36], Act::Gelu),
        ];
        for ([m, n, k], act) in cases {
            let case = format!("{} {m}×{n}×{k} {act:?}", dev.kind());
            let a32 = floats(&mut r, m * k, -1.0, 1.0);
            let b32 = floats(&mut r, n * k, -1.0, 1.0);
            let bias_h = floats(&mut r, n, -1.0, 1.0);
            let a16: Vec<bf16> = a32.iter().map(|&v| bf16::from_f32(v)).collect();
            let b16: Vec<bf16> = b32.iter().map(|&v| bf16::from_f32(v)).collect();
            let (a, b) = (dev.upload(&a16).unwrap(), dev.upload(&b16).unwrap());
            let bias = dev.upload(&bias_h).unwrap();
            let g = Gemm::nt(m, n, k);
            let mut c = dev.upload(&vec![POISON; m * n]).unwrap();
            let ran = matmul_half_bias_act(dev, g, &a, &b, &mut c, &bias, act);
            if refused_on_wgpu(dev, &case, ran) {
                continue;
            }
            let got = c.to_host().unwrap();
            let want = biased_reference([m, n, k], &a16, &b16, &bias_h, act);
            let err = rel_err(&got, &want);
            assert!(err < TOL, "{case}: relative error {err:e}");
            // The separate route: the product, then the bias and activation in place.
            let mut sep = dev.upload(&vec![POISON; m * n]).unwrap();
            matmul_half(dev, g, &a, &b, &mut sep, false).unwrap();
            let grid = graphed::Grid::workgroups(epilogue_groups(m * n));
            let code = act.code();
            gemm_epilogue::launch(dev, grid, n as u32, true, code, 0, &bias, &bias, &mut sep)
                .unwrap();
            let sep = sep.to_host().unwrap();
            if dev.kind() == BackendKind::Host {
                assert!(
                    bitwise_eq(&got, &sep),
                    "{case}: the host takes the separate route"
                );
            } else {
                let sep64: Vec<f64> = sep.iter().map(|&v| v as f64).collect();
                let d = rel_err(&got, &sep64);
                assert!(d < TOL, "{case}: fused against separate {d:e}");
            }
        }
        let a = dev.upload(&[bf16::from_f32(1.0); 4]).unwrap();
        let mut c = dev.upload(&[0.0f32; 4]).unwrap();
        let short = dev.upload(&[0.0f32; 1]).unwrap();
        let e = matmul_half_bias_act(
            dev,
            Gemm::nt(2, 2, 2),
            &a,
            &a,
            &mut c,
            &short,
            Act::Identity,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("`bias` has 1 elements, expected 2"),
            "{e}"
        );
    });
}

/// The 16-bit step's hidden-layer product on its own: `matmul_half_bias_act` into a `bf16`
/// `C` (bias, or bias and ReLU, then one rounding; a GELU takes the separate route
/// everywhere), with an `f32` bias or a `bf16` one (added at its 16-bit value). On the host it
/// is bitwise its separate route (the product into `f32`, then the epilogue with the
/// rounding, after widening a `bf16` bias); on CUDA the fused call is within one `bf16`
/// rounding (relative `2⁻⁸`, norm-wise) of it. Within rounding of an f64 reference
/// everywhere; wgpu refuses it (no half products there); a bias or result of another type is
/// refused by name.
#[test]
fn half_products_into_16_bits_match_the_separate_route() {
    use graphed::bf16;
    use graphed::kernels::matmul::{gemm_epilogue_cast, matmul_half, matmul_half_bias_act};
    const TOL16: f64 = 8e-3;
    let mut r = rng("half_products_into_16_bits");
    let to16 = |v: &[f32]| -> Vec<bf16> { v.iter().map(|&x| bf16::from_f32(x)).collect() };
    let wide = |v: &[bf16]| -> Vec<f32> { v.iter().map(|x| x.to_f32()).collect() };
    on_every_backend(|dev| {
        let cases = [
            ([512usize, 64usize, 128usize], Act::Relu, true),
            ([512, 64, 128], Act::Relu, false),
            ([33, 24, 45], Act::Identity, true),
            ([40, 16, 36], Act::Gelu, false),
        ];
        for ([m, n, k], act, bias16) in cases {
            let case = format!("{} {m}×{n}×{k} {act:?} bf16 bias {bias16}", dev.kind());
            let a16 = to16(&floats(&mut r, m * k, -1.0, 1.0));
            let b16 = to16(&floats(&mut r, n * k, -1.0, 1.0));
            let mut bias_h = floats(&mut r, n, -1.0, 1.0);
            let (a, b) = (dev.upload(&a16).unwrap(), dev.upload(&b16).unwrap());
            let mut y = dev.upload(&vec![bf16::NAN; m * n]).unwrap();
            let g = Gemm::nt(m, n, k);
            let ran = if bias16 {
                let h = to16(&bias_h);
                bias_h = wide(&h);
                matmul_half_bias_act(dev, g, &a, &b, &mut y, &dev.upload(&h).unwrap(), act)
            } else {
                matmul_half_bias_act(dev, g, &a, &b, &mut y, &dev.upload(&bias_h).unwrap(), act)
            };
            if refused_on_wgpu(dev, &case, ran) {
                continue;
            }
            let got = wide(&y.to_host().unwrap());
            let want = biased_reference([m, n, k], &a16, &b16, &bias_h, act);
            let err = rel_err(&got, &want);
            assert!(err < TOL16, "{case}: relative error {err:e}");
            // The separate route: the product into f32, then the epilogue with the rounding
            // and the bias at the value the product added.
            let bias = dev.upload(&bias_h).unwrap();
            let mut z = dev.upload(&vec![POISON; m * n]).unwrap();
            let mut sep = dev.upload(&vec![bf16::NAN; m * n]).unwrap();
            matmul_half(dev, g, &a, &b, &mut z, false).unwrap();
            gemm_epilogue_cast(
                dev,
                n,
                &Epilogue::bias_act(&bias, act),
                &mut z,
                &mut sep,
                None,
            )
            .unwrap();
            let sep = wide(&sep.to_host().unwrap());
            if dev.kind() == BackendKind::Host || act == Act::Gelu {
                assert!(
                    bitwise_eq(&got, &sep),
                    "{case}: not the separate route's bits"
                );
            } else {
                let sep64: Vec<f64> = sep.iter().map(|&v| v as f64).collect();
                let d = rel_err(&got, &sep64);
                assert!(d < TOL16, "{case}: fused against separate {d:e}");
            }
        }
        if dev.kind() == BackendKind::Wgpu {
            return;
        }
        let a = dev.upload(&[bf16::from_f32(1.0); 4]).unwrap();
        let g = Gemm::nt(2, 2, 2);
        let mut c16 = dev.upload(&[f16::from_f32(0.0); 4]).unwrap();
        let bias = dev.upload(&[0.0f32; 2]).unwrap();
        let e = matmul_half_bias_act(dev, g, &a, &a, &mut c16, &bias, Act::Relu).unwrap_err();
        assert!(e.to_string().contains("of `bf16` into `f16`"), "{e}");
        let mut c32 = dev.upload(&[0.0f32; 4]).unwrap();
        let b16 = dev.upload(&[bf16::from_f32(0.5); 2]).unwrap();
        let e = matmul_half_bias_act(dev, g, &a, &a, &mut c32, &b16, Act::Relu).unwrap_err();
        assert!(
            e.to_string().contains("a `bf16` bias for a `f32` result"),
            "{e}"
        );
    });
}
