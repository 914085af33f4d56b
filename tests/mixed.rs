//! Mixed precision: half-precision products (`bf16`/`f16` inputs, `f32` accumulation, output
//! of the inputs' type or `f32`) through the vendor route (cuBLAS's `cublasGemmEx` on CUDA,
//! the rounding reference on the host, `Error::Unsupported` on wgpu), eagerly and inside
//! recorded steps, and the TF32 opt-in for `f32` products.
//!
//! Tolerances against the f64 product of the same (rounded) inputs, `‖out − ref‖ / ‖ref‖`:
//! an `f32` output sums `k ≤ 96` terms in `f32` (1e-5); a `bf16` output adds one rounding of
//! at most 2⁻⁹ relative (4e-3), an `f16` output 2⁻¹² (5e-4). The host's result is also
//! compared bitwise with `blas::reference`, which defines its rounding.

mod common;

use common::{on_every_backend, rng};
use graphed::blas::{reference, GemmTypes, Math, Sgemm};
use graphed::cast::cast;
use graphed::kernels::matmul::{matmul_half, Gemm};
use graphed::kernels::optim::{AdamW, COUNTER_WORDS};
use graphed::kernels::scaler::{LossScaler, ScalerConfig};
use graphed::prelude::*;
use graphed::{BackendKind, DType, Element, Error};
use rand::Rng;

/// A 16-bit element type as the tests see it.
trait Half: Element {
    fn of(v: f32) -> Self;
    fn value(self) -> f32;
    const TOL: f64;
}
macro_rules! half {
    ($t:ty, $of:expr, $value:expr, $tol:expr) => {
        impl Half for $t {
            fn of(v: f32) -> Self {
                ($of)(v)
            }
            fn value(self) -> f32 {
                ($value)(self)
            }
            const TOL: f64 = $tol;
        }
    };
}
half!(bf16, bf16::from_f32, bf16::to_f32, 4e-3);
half!(f16, f16::from_f32, f16::to_f32, 5e-4);
half!(f32, |v| v, |v| v, 1e-5);

fn bits<T: Element>(v: &[T]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn halves<T: Half>(r: &mut impl Rng, n: usize) -> Vec<T> {
    (0..n)
        .map(|_| T::of(r.random_range(-1.0f32..1.0)))
        .collect()
}

/// The f64 product of the stored values (`op(A)·op(B)`, plus `c0` when given).
fn exact<I: Half, O: Half>(
    s: (usize, usize, usize, bool, bool),
    a: &[I],
    b: &[I],
    c0: Option<&[O]>,
) -> Vec<f64> {
    let (m, n, k, ta, tb) = s;
    let mut out = vec![0.0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc: f64 = c0.map_or(0.0, |c| c[i * n + j].value() as f64);
            for p in 0..k {
                let x = a[if ta { p * m + i } else { i * k + p }].value() as f64;
                let y = b[if tb { j * k + p } else { p * n + j }].value() as f64;
                acc += x * y;
            }
            out[i * n + j] = acc;
        }
    }
    out
}

/// One type combination on `dev`: eager products in every layout, overwrite and accumulate.
fn eager_case<I: Half, O: Half>(dev: &Device, r: &mut impl Rng) {
    let case = format!("{} {}→{}", dev.kind(), I::DTYPE.name(), O::DTYPE.name());
    for (m, n, k) in [(7, 9, 13), (33, 20, 96)] {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let s = (m, n, k, ta, tb);
            let (a0, b0) = (halves::<I>(r, m * k), halves::<I>(r, k * n));
            let c0 = halves::<O>(r, m * n);
            let (a, b) = (dev.upload(&a0).unwrap(), dev.upload(&b0).unwrap());
            let g = Gemm {
                ta,
                tb,
                ..Gemm::nn(m, n, k)
            };
            for accumulate in [false, true] {
                let mut c = dev.upload(&c0).unwrap();
                let got = matmul_half(dev, g, &a, &b, &mut c, accumulate);
                let case = format!("{case} {m}×{n}×{k} ta={ta} tb={tb} accumulate={accumulate}");
                if dev.kind() == BackendKind::Wgpu {
                    match got {
                        Err(Error::Unsupported { kernel, .. }) => assert_eq!(kernel, "matmul_half"),
                        other => panic!("{case}: wgpu has no half product yet, got {other:?}"),
                    }
                    assert_eq!(
                        c.to_host().unwrap(),
                        c0,
                        "{case}: a refused product wrote C"
                    );
                    continue;
                }
                got.unwrap_or_else(|e| panic!("{case}: {e}"));
                let out = c.to_host().unwrap();
                let want = exact(s, &a0, &b0, accumulate.then_some(&c0[..]));
                let as_f32: Vec<f32> = out.iter().map(|v| v.value()).collect();
                graphed::testing::assert_close(&case, &as_f32, &want, O::TOL);
                if dev.kind() == BackendKind::Host {
                    let types = GemmTypes {
                        input: I::DTYPE,
                        output: O::DTYPE,
                        math: Math::F32,
                    };
                    let mut oracle = bits(&c0);
                    reference(s, types, accumulate, &bits(&a0), &bits(&b0), &mut oracle).unwrap();
                    assert_eq!(
                        bits(&out),
                        oracle,
                        "{case}: host differs from blas::reference"
                    );
                }
            }
        }
    }
}

#[test]
fn half_products_match_the_reference_on_every_backend() {
    on_every_backend(|dev| {
        let mut r = rng("half_products_match_the_reference");
        eager_case::<bf16, bf16>(dev, &mut r);
        eager_case::<bf16, f32>(dev, &mut r);
        eager_case::<f16, f16>(dev, &mut r);
        eager_case::<f16, f32>(dev, &mut r);
    });
}

#[test]
fn the_reference_rounds_once_to_nearest_even() {
    // 1 + 2⁻⁸ lies halfway between the bf16 neighbours 1 and 1 + 2⁻⁷: ties to even gives 1;
    // 1 + 3·2⁻⁸ is halfway between 1 + 2⁻⁷ and 1 + 2⁻⁶: to even gives 1 + 2⁻⁶.
    let types = GemmTypes {
        input: DType::BF16,
        output: DType::BF16,
        math: Math::F32,
    };
    let one = bf16::ONE.to_bits() as u32;
    let a = [one, one];
    for (tail, want) in [
        (2f32.powi(-8), 1.0f32),
        (3.0 * 2f32.powi(-8), 1.0 + 2f32.powi(-6)),
    ] {
        let b = [one, bf16::from_f32(tail).to_bits() as u32];
        let mut c = [0u32];
        reference((1, 1, 2, false, false), types, false, &a, &b, &mut c).unwrap();
        assert_eq!(bf16::from_bits(c[0] as u16).to_f32(), want, "1 + {tail}");
    }
    // An f16 sum past 65504 overflows to +∞; the f32 output keeps it.
    let big = f16::from_f32(300.0).to_bits() as u32;
    for (output, want) in [
        (DType::F16, u32::from(f16::INFINITY.to_bits())),
        (DType::F32, 90_000f32.to_bits()),
    ] {
        let types = GemmTypes {
            input: DType::F16,
            output,
            math: Math::F32,
        };
        let mut c = [0u32];
        reference(
            (1, 1, 1, false, false),
            types,
            false,
            &[big],
            &[big],
            &mut c,
        )
        .unwrap();
        assert_eq!(c[0], want, "300² into {}", output.name());
    }
}

#[test]
fn products_of_types_that_make_none_are_refused_by_name() {
    on_every_backend(|dev| {
        let a = dev.upload(&[bf16::ONE; 4]).unwrap();
        let mut c16 = dev.upload(&[f16::ONE; 4]).unwrap();
        let g = Gemm::nn(2, 2, 2);
        let e = matmul_half(dev, g, &a, &a, &mut c16, false).unwrap_err();
        assert!(
            e.to_string()
                .contains("bf16 inputs give bf16 or f32 products (f32 inputs: f32), not f16"),
            "{}: {e}",
            dev.kind()
        );
        let mut c = dev.upload(&[bf16::ONE; 4]).unwrap();
        let e = matmul_half(dev, g.with_math(Math::Tf32), &a, &a, &mut c, false).unwrap_err();
        assert!(
            e.to_string().contains("TF32 applies to f32 inputs"),
            "{}: {e}",
            dev.kind()
        );
        let call = Sgemm {
            math: Math::F32,
            ..Sgemm::new(2, 2, 2)
        };
        let e = graphed::blas::product(dev, &call, &a, &a, &mut dev.upload(&[0u32; 4]).unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("not u32"), "{}: {e}", dev.kind());
    });
}

/// A recorded half product whose accumulate flag is a per-step scalar.
#[graphed]
fn half_product(
    cx: &mut Step,
    #[state] c: &mut Buffer<f32>,
    a: &Input<bf16>,
    b: &Input<bf16>,
    accumulate: bool,
    #[key] mnk: &[usize],
) -> Result<()> {
    matmul_half(cx, Gemm::nt(mnk[0], mnk[1], mnk[2]), a, b, c, accumulate)
}

#[test]
fn a_recorded_half_product_replays_bitwise_like_eager() {
    on_every_backend(|dev| {
        if dev.kind() == BackendKind::Wgpu {
            return; // refused eagerly above; a step would fall back the same way
        }
        let mut r = rng("a_recorded_half_product_replays");
        let mnk = [24usize, 40, 64];
        let [m, n, k] = mnk;
        let c0: Vec<f32> = common::floats(&mut r, m * n, -1.0, 1.0);
        let mut rep_c = dev.upload(&c0).unwrap();
        let mut eag_c = dev.upload(&c0).unwrap();
        let mut rep = HalfProduct::new(dev).unwrap();
        let mut eag = HalfProduct::new(dev).unwrap();
        for (step, accumulate) in [false, true, true, false].into_iter().enumerate() {
            let a = halves::<bf16>(&mut r, m * k);
            let b = halves::<bf16>(&mut r, n * k);
            rep.call(&mut rep_c, &a[..], &b[..], accumulate, &mnk[..])
                .unwrap();
            eag.eager(&mut eag_c, &a[..], &b[..], accumulate, &mnk[..])
                .unwrap();
            let (x, y) = (rep_c.to_host().unwrap(), eag_c.to_host().unwrap());
            assert!(
                common::bitwise_eq(&x, &y),
                "{} step {step}: replay differs from eager",
                dev.kind()
            );
        }
        let s = rep.stats();
        assert_eq!(
            (s.recordings, s.replays, s.eager_calls),
            (1, 4, 0),
            "{}: {s:?}",
            dev.kind()
        );
        let plan = rep.plan().unwrap();
        assert_eq!(plan.library_calls(), 1, "{}", plan.to_dot());
        assert!(
            plan.to_dot().contains("sgemm 24x40x64 bf16->f32"),
            "{}",
            plan.to_dot()
        );
    });
}

/// Grows after 3 good steps in a row, from 2¹⁰.
const SCALER: ScalerConfig = ScalerConfig {
    init_scale: 1024.0,
    growth: 2.0,
    backoff: 0.5,
    growth_interval: 3,
};

/// The tail of a loss-scaled training step: the scaled gradients (as backward leaves them)
/// unscaled and checked, AdamW skipped on overflow, the scale updated — all on the device.
#[graphed]
fn scaled_update(
    cx: &mut Step,
    #[state] params: &mut Buffer<f32>,
    #[state] grads: &mut Buffer<f32>,
    #[state] moments: &mut Buffer<f32>,
    #[state] count: &mut Buffer<u32>,
    #[state] scale: &mut Buffer<f32>,
    #[state] good: &mut Buffer<u32>,
    scaled: &Input<f32>,
    lr: f32,
) -> Result<()> {
    cx.copy(scaled, grads)?;
    let mut scaler = LossScaler::from_state(SCALER, scale.clone(), good.clone())?;
    scaler.unscale(cx, grads, count)?;
    AdamW::from_state(AdamW::default_config(), moments.clone(), count.clone())?
        .step(cx, params, grads, lr)?;
    scaler.update(cx, count)
}

struct ScaledState {
    params: Buffer<f32>,
    grads: Buffer<f32>,
    moments: Buffer<f32>,
    count: Buffer<u32>,
    scale: Buffer<f32>,
    good: Buffer<u32>,
}

impl ScaledState {
    fn new(dev: &Device, p0: &[f32]) -> ScaledState {
        let n = p0.len();
        let s = LossScaler::new(dev, SCALER).unwrap();
        ScaledState {
            params: dev.upload(p0).unwrap(),
            grads: graphed::testing::poisoned(dev, n),
            moments: dev.upload(&vec![0.0f32; 2 * n]).unwrap(),
            count: dev.upload(&[0u32; COUNTER_WORDS]).unwrap(),
            scale: s.scale_buffer().clone(),
            good: s.good_steps_buffer().clone(),
        }
    }
    fn words(&self) -> (Vec<u32>, Vec<u32>, Vec<u32>, f32, u32) {
        (
            bits(&self.params.to_host().unwrap()),
            bits(&self.moments.to_host().unwrap()),
            self.count.to_host().unwrap(),
            self.scale.to_host().unwrap()[0],
            self.good.to_host().unwrap()[0],
        )
    }
}

#[test]
fn an_overflow_skips_exactly_its_update_and_the_scale_halves_then_grows() {
    on_every_backend(|dev| {
        let mut r = rng("an_overflow_skips_exactly_its_update");
        let n = 300; // two workgroups of the check
        let p0 = common::floats(&mut r, n, -1.0, 1.0);
        let mut rep = ScaledState::new(dev, &p0);
        let mut eag = ScaledState::new(dev, &p0);
        // The oracle: AdamW without a scaler, fed the unscaled gradients, not stepped where
        // the scaled step overflowed.
        let mut plain_p = dev.upload(&p0).unwrap();
        let mut plain = AdamW::new(dev, n, AdamW::default_config()).unwrap();
        let mut step = ScaledUpdate::new(dev).unwrap();
        let mut eager = ScaledUpdate::new(dev).unwrap();
        // Overflows at steps 2 (+∞) and 6 (NaN): the scale goes 1024 → 512, grows back to
        // 1024 after three good steps (3, 4, 5), then halves again.
        let overflow = [
            None,
            None,
            Some(f32::INFINITY),
            None,
            None,
            None,
            Some(f32::NAN),
            None,
        ];
        let scales = [1024.0, 1024.0, 512.0, 512.0, 512.0, 1024.0, 512.0, 512.0];
        let goods = [1, 2, 0, 1, 2, 0, 0, 1];
        let mut scale = SCALER.init_scale;
        let mut taken = 0;
        for (s, bad) in overflow.into_iter().enumerate() {
            let case = format!("{} step {s}", dev.kind());
            let g = common::floats(&mut r, n, -1.0, 1.0);
            let mut scaled: Vec<f32> = g.iter().map(|v| v * scale).collect();
            if let Some(v) = bad {
                scaled[r.random_range(0..n)] = v;
            }
            let before = rep.words();
            let lr = 1e-2;
            let st = &mut rep;
            step.call(
                &mut st.params,
                &mut st.grads,
                &mut st.moments,
                &mut st.count,
                &mut st.scale,
                &mut st.good,
                &scaled[..],
                lr,
            )
            .unwrap();
            let st = &mut eag;
            eager
                .eager(
                    &mut st.params,
                    &mut st.grads,
                    &mut st.moments,
                    &mut st.count,
                    &mut st.scale,
                    &mut st.good,
                    &scaled[..],
                    lr,
                )
                .unwrap();
            let (after, eager_after) = (rep.words(), eag.words());
            assert_eq!(after, eager_after, "{case}: replay differs from eager");
            if bad.is_some() {
                assert_eq!(
                    (&after.0, &after.1, &after.2),
                    (&before.0, &before.1, &before.2),
                    "{case}: an overflow must change no weight, moment or count"
                );
            } else {
                taken += 1;
                plain
                    .step(dev, &mut plain_p, &dev.upload(&g).unwrap(), lr)
                    .unwrap();
                assert_ne!(after.0, before.0, "{case}: a good step must update");
            }
            assert_eq!(
                after.0,
                bits(&plain_p.to_host().unwrap()),
                "{case}: weights differ from AdamW with the same skips"
            );
            assert_eq!(
                after.2,
                vec![after.2[0], taken, 0],
                "{case}: [arrivals, steps, skip]"
            );
            assert_eq!(
                (after.3, after.4),
                (scales[s], goods[s]),
                "{case}: (scale, good steps)"
            );
            scale = after.3;
        }
        let s = step.stats();
        assert_eq!(
            (s.recordings, s.replays, s.eager_calls),
            (1, 8, 0),
            "{}: {s:?}",
            dev.kind()
        );
    });
}

#[test]
fn scaling_the_loss_gradient_reads_the_scale_from_the_device() {
    on_every_backend(|dev| {
        let mut r = rng("scaling_the_loss_gradient");
        let x = common::floats(&mut r, 1000, -1.0, 1.0);
        let scaler = LossScaler::new(dev, SCALER).unwrap();
        scaler.scale_buffer().write(&[8.0]).unwrap();
        let mut y = dev.upload(&x).unwrap();
        scaler.scale(dev, &mut y).unwrap();
        let want: Vec<f32> = x.iter().map(|v| v * 8.0).collect();
        assert_eq!(bits(&y.to_host().unwrap()), bits(&want), "{}", dev.kind());
        assert_eq!(scaler.current_scale().unwrap(), 8.0);
        let bad = ScalerConfig {
            backoff: 1.5,
            ..SCALER
        };
        let e = LossScaler::new(dev, bad).unwrap_err();
        assert!(e.to_string().contains("backoff 1.5 in (0, 1)"), "{e}");
    });
}

/// f32 values that exercise every rounding case of both 16-bit types: random magnitudes over
/// the whole f32 range, ties and near-ties of both, f16's subnormals and overflow edge, ±0,
/// ±∞ and NaNs.
fn cast_inputs(r: &mut impl Rng, n: usize) -> Vec<f32> {
    let mut v: Vec<f32> = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        65504.0,
        65519.99,
        65520.0,
        -65520.0,
        1.0 + 2f32.powi(-8),
        1.0 + 3.0 * 2f32.powi(-8),
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        2f32.powi(-24),
        2f32.powi(-25),
        1.5 * 2f32.powi(-25),
        2f32.powi(-26),
        3.0 * 2f32.powi(-25),
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xff80_4000),
        f32::from_bits(0x3380_0000),
    ];
    while v.len() < n {
        v.push(match r.random_range(0..3) {
            0 => f32::from_bits(r.random()),
            1 => r.random_range(-70000.0f32..70000.0),
            _ => r.random_range(-1e-4f32..1e-4),
        });
    }
    v
}

#[test]
fn casts_round_to_nearest_even_bitwise_alike_on_every_backend() {
    on_every_backend(|dev| {
        let mut r = rng("casts_round_to_nearest_even");
        let x = cast_inputs(&mut r, 1001);
        let src = dev.upload(&x).unwrap();
        // Odd length: the last word's other half belongs to no element and is kept.
        let h = dev
            .upload(&vec![f16::from_bits(0x7e5a); x.len() + 1])
            .unwrap();
        let mut view = h.slice(0..x.len()).unwrap();
        cast(dev, &src, &mut view).unwrap();
        let got = h.to_host().unwrap();
        for (i, (&v, g)) in x.iter().zip(&got).enumerate() {
            assert_eq!(
                g.to_bits(),
                f16::from_f32(v).to_bits(),
                "{}: f16 of {v:e} (element {i})",
                dev.kind()
            );
        }
        assert_eq!(
            got[x.len()].to_bits(),
            0x7e5a,
            "{}: the neighbour's half changed",
            dev.kind()
        );
        let mut b = dev.upload(&vec![bf16::from_bits(0x7e5a); x.len()]).unwrap();
        cast(dev, &src, &mut b).unwrap();
        for (&v, g) in x.iter().zip(&b.to_host().unwrap()) {
            assert_eq!(
                g.to_bits(),
                bf16::from_f32(v).to_bits(),
                "{}: bf16 of {v:e}",
                dev.kind()
            );
        }
        // Widening is exact, for every 16-bit pattern (NaNs quietened as `half` does).
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let mut wide = graphed::testing::poisoned(dev, all.len());
        cast(
            dev,
            &dev.upload(&all.iter().map(|&b| f16::from_bits(b)).collect::<Vec<_>>())
                .unwrap(),
            &mut wide,
        )
        .unwrap();
        for (&b, w) in all.iter().zip(&wide.to_host().unwrap()) {
            assert_eq!(
                w.to_bits(),
                f16::from_bits(b).to_f32().to_bits(),
                "{}: f32 of f16 {b:#06x}",
                dev.kind()
            );
        }
        // Poisoned again, so a bf16 widening that writes nothing cannot pass on the f16 values.
        let mut wide = graphed::testing::poisoned(dev, all.len());
        cast(
            dev,
            &dev.upload(&all.iter().map(|&b| bf16::from_bits(b)).collect::<Vec<_>>())
                .unwrap(),
            &mut wide,
        )
        .unwrap();
        for (&b, w) in all.iter().zip(&wide.to_host().unwrap()) {
            assert_eq!(
                w.to_bits(),
                bf16::from_bits(b).to_f32().to_bits(),
                "{}: f32 of bf16 {b:#06x}",
                dev.kind()
            );
        }
        // Refused by name: an odd start, other types, other lengths.
        let e = cast(dev, &src.slice(0..3).unwrap(), &mut h.slice(1..4).unwrap()).unwrap_err();
        assert!(
            e.to_string()
                .contains("starts at element 1, inside a 32-bit word"),
            "{e}"
        );
        let e = cast(dev, &src, &mut dev.alloc::<u32>(x.len()).unwrap()).unwrap_err();
        assert!(
            e.to_string()
                .contains("casts go between f32 and f16 or bf16"),
            "{e}"
        );
        let e = cast(dev, &src, &mut b.slice(0..4).unwrap()).unwrap_err();
        assert!(e.to_string().contains("the lengths differ"), "{e}");
    });
}

/// `a` and `b` bitwise equal, but that a NaN may be any NaN (the fused and the separate
/// kernels are different programs; a NaN made by arithmetic has the hardware's payload).
fn assert_same<T: Element>(case: &str, got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len(), "{case}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let nan = |v: &T| match T::DTYPE {
            DType::F16 => f16::from_bits(v.to_bits() as u16).is_nan(),
            DType::BF16 => bf16::from_bits(v.to_bits() as u16).is_nan(),
            _ => f32::from_bits(v.to_bits()).is_nan(),
        };
        assert!(
            g.to_bits() == w.to_bits() || (nan(g) && nan(w)),
            "{case}: element {i} is {:#x}, separately {:#x}",
            g.to_bits(),
            w.to_bits()
        );
    }
}

/// The fused 16-bit epilogue (and its bias-gradient sums) against the separate launches it
/// replaces, for one 16-bit type on `dev`: bitwise.
fn fused_epilogue_case<H: Half>(dev: &Device, r: &mut impl Rng) {
    use graphed::kernels::elementwise::Act;
    use graphed::kernels::matmul::{
        gemm_epilogue, gemm_epilogue_cast, gemm_row_sums, ColumnSums, Epilogue,
    };
    let (rows, cols, outs) = (37, 65, 29);
    let len = rows * cols;
    // Every rounding case of the casts (NaNs left out: the epilogue's arithmetic on them is
    // the hardware's) and the f16 overflow edge, scaled into the activations' ranges too.
    let mut c0 = cast_inputs(r, len);
    c0.retain(|v| !v.is_nan());
    while c0.len() < len {
        c0.push(r.random_range(-3.0f32..3.0));
    }
    let bias = dev.upload(&common::floats(r, cols, -1.0, 1.0)).unwrap();
    let aux = dev.upload(&common::floats(r, len, -3.0, 3.0)).unwrap();
    let dy = dev
        .upload(&common::floats(r, rows * outs, -1.0, 1.0))
        .unwrap();
    let db0 = common::floats(r, outs, -1.0, 1.0);
    let poison = H::of(f32::NAN);
    let cases: [(bool, Act, Option<Act>); 4] = [
        (true, Act::Relu, None),
        (true, Act::Gelu, Some(Act::Tanh)),
        (false, Act::Identity, Some(Act::Relu)),
        (false, Act::Identity, Some(Act::Gelu)),
    ];
    for (has_bias, act, gate) in cases {
        for (sums, accumulate) in [(false, false), (true, false), (true, true)] {
            let case = format!(
                "{} {}: bias {has_bias} {act:?} gate {gate:?} sums {sums} accumulate {accumulate}",
                dev.kind(),
                H::DTYPE.name()
            );
            let epi = Epilogue {
                bias: has_bias.then_some(&bias),
                act,
                gate: gate.map(|g| (g, &aux)),
                accumulate: None,
            };
            // Separately: the in-place epilogue, the cast, the row sums.
            let mut c_sep = dev.upload(&c0).unwrap();
            let grid = Grid::workgroups(graphed::kernels::shape::groups(len));
            let (b, x) = (epi.bias.unwrap_or(&aux), &aux);
            let g = gate.map_or(0, |g| g.code());
            gemm_epilogue::launch(
                dev,
                grid,
                cols as u32,
                has_bias,
                act.code(),
                g,
                b,
                x,
                &mut c_sep,
            )
            .unwrap();
            let mut h_sep = dev.upload(&vec![poison; len]).unwrap();
            cast(dev, &c_sep, &mut h_sep).unwrap();
            let mut db_sep = dev.upload(&db0).unwrap();
            let grid = Grid::workgroups(graphed::kernels::shape::groups(outs));
            let (m, k) = (outs as u32, rows as u32);
            gemm_row_sums::launch(dev, grid, m, k, true, accumulate, &dy, &mut db_sep).unwrap();
            // Fused, into a 16-bit view at an odd element between poisoned neighbours.
            let mut c = dev.upload(&c0).unwrap();
            let h = dev.upload(&vec![poison; len + 2]).unwrap();
            let mut view = h.slice(1..len + 1).unwrap();
            let mut db = dev.upload(&db0).unwrap();
            let s = sums.then(|| ColumnSums {
                a: &dy,
                db: &mut db,
                accumulate: accumulate.into(),
            });
            gemm_epilogue_cast(dev, cols, &epi, &mut c, &mut view, s)
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_same(
                &format!("{case} f32"),
                &c.to_host().unwrap(),
                &c_sep.to_host().unwrap(),
            );
            let got = h.to_host().unwrap();
            assert_same(
                &format!("{case} 16-bit"),
                &got[1..len + 1],
                &h_sep.to_host().unwrap(),
            );
            let ends = [got[0].to_bits(), got[len + 1].to_bits()];
            assert_eq!(ends, [poison.to_bits(); 2], "{case}: a neighbour changed");
            let want_db = if sums {
                db_sep.to_host().unwrap()
            } else {
                db0.clone()
            };
            assert_eq!(
                bits(&db.to_host().unwrap()),
                bits(&want_db),
                "{case}: bias sums"
            );
        }
    }
    // Refusals, each before anything runs.
    let mut c = dev.upload(&c0).unwrap();
    let mut short = dev.upload(&vec![poison; len - 1]).unwrap();
    let epi = Epilogue::bias_act(&bias, Act::Relu);
    let e = gemm_epilogue_cast(dev, cols, &epi, &mut c, &mut short, None).unwrap_err();
    assert!(
        matches!(e, Error::Shape(_)) && e.to_string().contains("`c16` has"),
        "{e}"
    );
    let mut h = dev.upload(&vec![poison; len]).unwrap();
    let e = gemm_epilogue_cast(dev, 64, &epi, &mut c, &mut h, None).unwrap_err();
    assert!(e.to_string().contains("are not rows of 64"), "{e}");
    let act_only = Epilogue {
        act: Act::Relu,
        ..Epilogue::none()
    };
    let e = gemm_epilogue_cast(dev, cols, &act_only, &mut c, &mut h, None).unwrap_err();
    assert!(
        matches!(e, Error::Launch { .. }) && e.to_string().contains("neither a bias nor a gate"),
        "{e}"
    );
    let e = gemm_epilogue_cast(dev, cols, &epi.accumulate(true), &mut c, &mut h, None).unwrap_err();
    assert!(e.to_string().contains("cannot accumulate"), "{e}");
    let mut wide = dev.upload(&vec![0.0f32; len]).unwrap();
    let e = gemm_epilogue_cast(dev, cols, &epi, &mut c, &mut wide, None).unwrap_err();
    assert!(e.to_string().contains("takes `bf16` or `f16`"), "{e}");
    assert_eq!(
        bits(&c.to_host().unwrap()),
        bits(&c0),
        "a refused launch wrote C"
    );
}

#[test]
fn fused_epilogue_casts_match_the_separate_launches_bitwise_on_every_backend() {
    on_every_backend(|dev| {
        let mut r = rng("fused_epilogue_casts");
        fused_epilogue_case::<bf16>(dev, &mut r);
        fused_epilogue_case::<f16>(dev, &mut r);
    });
}

/// `scale_cast` against `scale` then `cast`, for one 16-bit type: bitwise, for a power of two
/// and for a scale that is not one.
fn scale_cast_case<H: Half>(dev: &Device, r: &mut impl Rng) {
    let x = cast_inputs(r, 1001);
    let scaler = LossScaler::new(dev, SCALER).unwrap();
    for s in [65536.0f32, 3.0, 2f32.powi(100)] {
        let case = format!("{} {} scale {s}", dev.kind(), H::DTYPE.name());
        scaler.scale_buffer().write(&[s]).unwrap();
        let mut y_sep = dev.upload(&x).unwrap();
        scaler.scale(dev, &mut y_sep).unwrap();
        let mut h_sep = dev.upload(&vec![H::of(f32::NAN); x.len()]).unwrap();
        cast(dev, &y_sep, &mut h_sep).unwrap();
        let mut y = dev.upload(&x).unwrap();
        let mut h = dev.upload(&vec![H::of(f32::NAN); x.len()]).unwrap();
        scaler.scale_cast(dev, &mut y, &mut h).unwrap();
        assert_same(
            &format!("{case} f32"),
            &y.to_host().unwrap(),
            &y_sep.to_host().unwrap(),
        );
        assert_same(
            &format!("{case} 16-bit"),
            &h.to_host().unwrap(),
            &h_sep.to_host().unwrap(),
        );
    }
    let mut y = dev.upload(&x).unwrap();
    let mut short = dev.upload(&vec![H::of(0.0); x.len() - 1]).unwrap();
    let e = scaler.scale_cast(dev, &mut y, &mut short).unwrap_err();
    assert!(e.to_string().contains("`dloss16` has 1000 elements"), "{e}");
}

#[test]
fn scaling_and_casting_the_loss_gradient_in_one_launch_matches_the_two_bitwise() {
    on_every_backend(|dev| {
        let mut r = rng("scale_cast");
        scale_cast_case::<bf16>(dev, &mut r);
        scale_cast_case::<f16>(dev, &mut r);
    });
}

#[test]
fn the_loss_with_its_gradients_16_bit_copy_matches_the_separate_launches_bitwise() {
    use graphed::kernels::loss::{
        softmax_cross_entropy_cast, softmax_cross_entropy_scaled, xent_workspace_len,
    };
    fn case<H: Half>(dev: &Device, r: &mut impl Rng) {
        // One workgroup (40 rows) and several with the workspace's second pass (5000).
        for (rows, classes) in [(40, 10), (5000, 7)] {
            let logits = dev
                .upload(&common::floats(r, rows * classes, -8.0, 8.0))
                .unwrap();
            // Label `classes` marks an ignored row (zero gradient).
            let y: Vec<u32> = (0..rows)
                .map(|_| r.random_range(0..=classes as u32))
                .collect();
            let labels = dev.upload(&y).unwrap();
            let ws_len = xent_workspace_len(rows, classes).max(1);
            let scaler = LossScaler::new(dev, SCALER).unwrap();
            for s in [None, Some(65536.0f32), Some(3.0), Some(2f32.powi(100))] {
                let case = format!(
                    "{} {} {rows}×{classes} scale {s:?}",
                    dev.kind(),
                    H::DTYPE.name()
                );
                let gs = 1.0 / rows as f32;
                let mut loss_sep = graphed::testing::poisoned(dev, 1);
                let mut dz_sep = graphed::testing::poisoned(dev, rows * classes);
                let mut ws = graphed::testing::poisoned(dev, ws_len);
                softmax_cross_entropy_scaled(
                    dev,
                    &logits,
                    &labels,
                    &mut loss_sep,
                    &mut dz_sep,
                    &mut ws,
                    gs,
                )
                .unwrap();
                if let Some(s) = s {
                    scaler.scale_buffer().write(&[s]).unwrap();
                    scaler.scale(dev, &mut dz_sep).unwrap();
                }
                let mut h_sep = dev.upload(&vec![H::of(f32::NAN); rows * classes]).unwrap();
                cast(dev, &dz_sep, &mut h_sep).unwrap();
                let mut loss = graphed::testing::poisoned(dev, 1);
                let mut dz = graphed::testing::poisoned(dev, rows * classes);
                let mut h = dev.upload(&vec![H::of(f32::NAN); rows * classes]).unwrap();
                let mut ws = graphed::testing::poisoned(dev, ws_len);
                let sc = s.map(|_| scaler.scale_buffer());
                softmax_cross_entropy_cast(
                    dev, &logits, &labels, &mut loss, &mut dz, &mut h, &mut ws, gs, sc,
                )
                .unwrap_or_else(|e| panic!("{case}: {e}"));
                assert_eq!(
                    bits(&loss.to_host().unwrap()),
                    bits(&loss_sep.to_host().unwrap()),
                    "{case}: loss"
                );
                assert_same(
                    &format!("{case} f32"),
                    &dz.to_host().unwrap(),
                    &dz_sep.to_host().unwrap(),
                );
                assert_same(
                    &format!("{case} 16-bit"),
                    &h.to_host().unwrap(),
                    &h_sep.to_host().unwrap(),
                );
            }
        }
        // Wide rows are refused (the step runs the loss, then the scale and the cast).
        let logits = dev.upload(&common::floats(r, 2 * 65, -1.0, 1.0)).unwrap();
        let labels = dev.upload(&[1u32, 2]).unwrap();
        let (mut loss, mut dz) = (dev.alloc::<f32>(1).unwrap(), dev.alloc::<f32>(130).unwrap());
        let mut h = dev.upload(&[H::of(0.0); 130]).unwrap();
        let mut ws = dev.alloc::<f32>(1).unwrap();
        let e = softmax_cross_entropy_cast(
            dev, &logits, &labels, &mut loss, &mut dz, &mut h, &mut ws, 0.5, None,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("rows of 65 classes; at most 64"),
            "{e}"
        );
    }
    on_every_backend(|dev| {
        let mut r = rng("the_loss_with_its_gradients_16_bit_copy");
        case::<bf16>(dev, &mut r);
        case::<f16>(dev, &mut r);
    });
}

#[test]
fn two_casts_in_one_launch_match_two_casts_bitwise_on_every_backend() {
    use graphed::kernels::elementwise::cast_two;
    fn case<H: Half>(dev: &Device, r: &mut impl Rng) {
        let (a0, b0) = (cast_inputs(r, 1001), cast_inputs(r, 77));
        let (a, b) = (dev.upload(&a0).unwrap(), dev.upload(&b0).unwrap());
        let poison = H::of(f32::NAN);
        let mut a_sep = dev.upload(&vec![poison; a0.len()]).unwrap();
        let mut b_sep = dev.upload(&vec![poison; b0.len()]).unwrap();
        cast(dev, &a, &mut a_sep).unwrap();
        cast(dev, &b, &mut b_sep).unwrap();
        // One buffer for both copies, the second at an odd element, poisoned elements between
        // and after.
        let (na, n) = (a0.len(), a0.len() + b0.len() + 3);
        let h = dev.upload(&vec![poison; n]).unwrap();
        let mut a16 = h.slice(0..na).unwrap();
        let mut b16 = h.slice(na + 2..n - 1).unwrap();
        cast_two(dev, &a, &mut a16, &b, &mut b16).unwrap();
        let got = h.to_host().unwrap();
        let kind = format!("{} {}", dev.kind(), H::DTYPE.name());
        let (want_a, want_b) = (a_sep.to_host().unwrap(), b_sep.to_host().unwrap());
        if dev.kind() == BackendKind::Wgpu && H::DTYPE == DType::F16 {
            // WGSL stores `f16` as `f16` (the driver's conversion): NaNs keep no payload.
            assert_same(&format!("{kind}: a"), &got[..na], &want_a);
            assert_same(&format!("{kind}: b"), &got[na + 2..n - 1], &want_b);
        } else {
            assert_eq!(bits(&got[..na]), bits(&want_a), "{kind}: a");
            assert_eq!(bits(&got[na + 2..n - 1]), bits(&want_b), "{kind}: b");
        }
        let got = bits(&got);
        let p = poison.to_bits();
        let ends = [got[na], got[na + 1], got[n - 1]];
        assert_eq!(ends, [p; 3], "{kind}: a neighbour changed");
        let e = cast_two(dev, &a, &mut b16, &b, &mut a16).unwrap_err();
        assert!(
            e.to_string().contains("`a16` has 77 elements"),
            "{kind}: {e}"
        );
    }
    on_every_backend(|dev| {
        let mut r = rng("two_casts_in_one_launch");
        case::<bf16>(dev, &mut r);
        case::<f16>(dev, &mut r);
    });
}

/// The 16-bit step's backward kernels: the ReLU gate read from a 16-bit output, and the
/// column sums (bias gradients) of a 16-bit `dY`, against their definitions bitwise on every
/// backend: the gate keeps `dy` where `y > 0` (zeros, negatives and a NaN among `y`), the
/// sums equal `column_sums` of the values widened to `f32` (same order of addition), past
/// one grid's worth of rows.
fn gate_and_sums_case<H: Half>(dev: &Device, r: &mut impl Rng) {
    use graphed::kernels::elementwise::relu_gate;
    use graphed::kernels::matmul::column_sums;
    let case = format!("{} {}", dev.kind(), H::DTYPE.name());
    for n in [1usize, 7, 4099] {
        let mut y: Vec<H> = halves(r, n);
        for (i, v) in y.iter_mut().enumerate() {
            if i % 5 == 0 {
                *v = H::of(0.0);
            } else if i % 11 == 3 {
                *v = H::of(-0.0);
            }
        }
        if n > 10 {
            y[10] = H::of(f32::NAN);
        }
        let dy: Vec<H> = halves(r, n);
        let ydev = dev.upload(&y).unwrap();
        let mut ddev = dev.upload(&dy).unwrap();
        relu_gate(dev, &ydev, &mut ddev).unwrap();
        let want: Vec<u32> = y
            .iter()
            .zip(&dy)
            .map(|(y, d)| if y.value() > 0.0 { d.to_bits() } else { 0 })
            .collect();
        assert_eq!(bits(&ddev.to_host().unwrap()), want, "{case} gate of {n}");
    }
    for (rows, cols) in [(1usize, 1usize), (300, 10), (37, 33), (2, 1030)] {
        let a: Vec<H> = halves(r, rows * cols);
        let wide: Vec<f32> = a.iter().map(|v| v.value()).collect();
        let (a16, a32) = (dev.upload(&a).unwrap(), dev.upload(&wide).unwrap());
        for accumulate in [false, true] {
            let start = common::floats(r, cols, -1.0, 1.0);
            let mut got = dev.upload(&start).unwrap();
            let mut want = dev.upload(&start).unwrap();
            column_sums(dev, &a16, &mut got, accumulate).unwrap();
            column_sums(dev, &a32, &mut want, accumulate).unwrap();
            assert_eq!(
                bits(&got.to_host().unwrap()),
                bits(&want.to_host().unwrap()),
                "{case} column sums {rows}×{cols} accumulate {accumulate}"
            );
        }
    }
    let a = dev.upload(&halves::<H>(r, 6)).unwrap();
    let mut short = dev.upload(&halves::<H>(r, 5)).unwrap();
    let e = relu_gate(dev, &a, &mut short).unwrap_err();
    assert!(matches!(e, Error::Shape(_)), "{case}: {e}");
    let u = dev.upload(&[1u32; 6]).unwrap();
    let mut db = dev.upload(&[0.0f32; 3]).unwrap();
    let e = column_sums(dev, &u, &mut db, false).unwrap_err();
    assert!(e.to_string().contains("sums of `u32`"), "{case}: {e}");
}

#[test]
fn sixteen_bit_gates_and_column_sums_match_their_definitions_bitwise_on_every_backend() {
    let mut r = rng("sixteen_bit_gates_and_column_sums");
    on_every_backend(|dev| {
        gate_and_sums_case::<bf16>(dev, &mut r);
        gate_and_sums_case::<f16>(dev, &mut r);
    });
}

#[test]
fn the_new_kernels_compile_for_cuda_and_validate_as_wgsl() {
    use graphed::__private::{cast_f32_to_half, cast_half_to_f32};
    use graphed::kernels::matmul::{
        gemm_epilogue_cast_bf16, gemm_epilogue_cast_f16, gemm_epilogue_cast_sums_bf16,
        gemm_epilogue_cast_sums_f16,
    };
    use graphed::kernels::optim::{adam_step, sgd_step};
    use graphed::kernels::scaler::{
        scale_by, scale_by_cast_bf16, scale_by_cast_f16, scale_update, unscale_check,
    };
    let all = [
        &cast_f32_to_half::DEF,
        &cast_half_to_f32::DEF,
        &graphed::kernels::elementwise::cast_two_bf16::DEF,
        &graphed::kernels::elementwise::cast_two_f16::DEF,
        &graphed::kernels::loss::softmax_xent_narrow_cast_bf16::DEF,
        &graphed::kernels::loss::softmax_xent_narrow_cast_f16::DEF,
        &graphed::kernels::loss::softmax_xent_narrow_cast_sg_bf16::DEF,
        &graphed::kernels::loss::softmax_xent_narrow_cast_sg_f16::DEF,
        &gemm_epilogue_cast_bf16::DEF,
        &gemm_epilogue_cast_f16::DEF,
        &gemm_epilogue_cast_sums_bf16::DEF,
        &gemm_epilogue_cast_sums_f16::DEF,
        &graphed::kernels::matmul::gemm_col_sums_bf16::DEF,
        &graphed::kernels::matmul::gemm_col_sums_f16::DEF,
        &graphed::kernels::elementwise::relu_gate_bf16::DEF,
        &graphed::kernels::elementwise::relu_gate_f16::DEF,
        &scale_by::DEF,
        &scale_by_cast_bf16::DEF,
        &scale_by_cast_f16::DEF,
        &unscale_check::DEF,
        &scale_update::DEF,
        &adam_step::DEF,
        &sgd_step::DEF,
    ];
    common::assert_wgsl_valid(&all);
    common::assert_cuda_compiles(&all);
}

use graphed::nn::mixed::{MixedTrainStep, Precision};
use graphed::train::Classifier;

const SIZES: [usize; 4] = [48, 64, 32, 10];
const ROWS: usize = 40;

fn batch(r: &mut impl Rng) -> (Vec<f32>, Vec<u32>) {
    let x = common::floats(r, ROWS * SIZES[0], -1.0, 1.0);
    let y = (0..ROWS).map(|_| r.random_range(0..10u32)).collect();
    (x, y)
}

/// Everything a step updates, as bits.
fn model_bits(m: &Classifier) -> Vec<Vec<u32>> {
    vec![
        bits(&m.params.to_host().unwrap()),
        bits(&m.grads.to_host().unwrap()),
        bits(&m.moments.to_host().unwrap()),
        m.count.to_host().unwrap(),
        bits(&m.scale.to_host().unwrap()),
        m.good_steps.to_host().unwrap(),
    ]
}

/// Loss and gradients of one 16-bit step against the fp32 step on the host, from one state:
/// `bf16` operands round to 8 significant bits, `f16` to 11. The gradients' norm-wise error
/// over 40 seeds (host): bf16 mean 2.8e-2, max 7.5e-2; f16 mean 6.8e-3, max 4.7e-2 — the
/// tail is a ReLU gate that flips where a pre-activation lies within rounding of zero, and
/// the cancellation in each weight gradient's sum over the batch. Tolerances: 2× the max.
const LOSS_TOL: [(Precision, f64); 2] = [(Precision::Bf16, 1e-2), (Precision::F16, 2e-3)];
const GRAD_TOL: [(Precision, f64); 2] = [(Precision::Bf16, 1.5e-1), (Precision::F16, 1e-1)];

#[test]
fn sixteen_bit_steps_follow_the_fp32_oracle_and_replay_bitwise_like_eager() {
    let mut r = rng("sixteen_bit_steps_follow_the_fp32_oracle");
    let host = Device::host();
    let oracle_model = Classifier::new(&host, &SIZES, 7).unwrap();
    let (x, y) = batch(&mut r);
    let mut oracle = oracle_model.duplicate().unwrap();
    let mut f32_step = MixedTrainStep::new(&host).unwrap();
    let want_loss = f32_step
        .eager(&mut oracle, &x[..], &y[..], 1e-3, Precision::F32)
        .unwrap()
        .to_host()
        .unwrap()[0];
    let want_grads: Vec<f64> = oracle
        .grads
        .to_host()
        .unwrap()
        .iter()
        .map(|&v| v as f64)
        .collect();
    on_every_backend(|dev| {
        for ((precision, ltol), (_, gtol)) in LOSS_TOL.into_iter().zip(GRAD_TOL) {
            let case = format!("{} {}", dev.kind(), precision.name());
            let upload = |m: &Classifier| {
                let c = Classifier::new(dev, &SIZES, 7).unwrap();
                c.params.write(&m.params.to_host().unwrap()).unwrap();
                c
            };
            let mut rep = upload(&oracle_model);
            let mut eag = upload(&oracle_model);
            let mut step = MixedTrainStep::new(dev).unwrap();
            let mut eager = MixedTrainStep::new(dev).unwrap();
            if dev.kind() == BackendKind::Wgpu {
                let e = eager
                    .eager(&mut eag, &x[..], &y[..], 1e-3, precision)
                    .unwrap_err();
                assert!(
                    matches!(
                        e,
                        Error::Unsupported {
                            kernel: "matmul_half",
                            ..
                        }
                    ),
                    "{case}: {e}"
                );
                continue;
            }
            for s in 0..3 {
                let (bx, by) = if s == 0 {
                    (x.clone(), y.clone())
                } else {
                    batch(&mut r)
                };
                let l1 = step
                    .call(&mut rep, &bx[..], &by[..], 1e-3, precision)
                    .unwrap()
                    .to_host()
                    .unwrap();
                let l2 = eager
                    .eager(&mut eag, &bx[..], &by[..], 1e-3, precision)
                    .unwrap()
                    .to_host()
                    .unwrap();
                assert_eq!(bits(&l1), bits(&l2), "{case} step {s}: loss replay ≠ eager");
                assert!(
                    model_bits(&rep) == model_bits(&eag),
                    "{case} step {s}: state replay ≠ eager"
                );
                if s == 0 {
                    let e = (l1[0] as f64 - want_loss as f64).abs() / want_loss as f64;
                    assert!(
                        e <= ltol,
                        "{case}: loss {} vs fp32 {want_loss}: {e:.2e} > {ltol:.0e}",
                        l1[0]
                    );
                    let g = rep.grads.to_host().unwrap();
                    graphed::testing::assert_close(
                        &format!("{case} gradients"),
                        &g,
                        &want_grads,
                        gtol,
                    );
                }
            }
            let st = step.stats();
            assert_eq!(
                (st.recordings, st.replays, st.eager_calls),
                (1, 3, 0),
                "{case}: {st:?}"
            );
            // 5L launches (3L + 1 where the products fuse their bias and ReLU) and 3L − 1
            // products for L = 3 layers, 2 more launches for f16 (`launches_per_step_…` below).
            let plan = step.plan().unwrap();
            assert_eq!(
                (plan.launch_count(), plan.library_calls()),
                (launches_16(dev, 3, precision), 8),
                "{case}"
            );
            // Another precision is another recording.
            let mut other = upload(&oracle_model);
            step.call(&mut other, &x[..], &y[..], 1e-3, Precision::F32)
                .unwrap();
            assert_eq!(
                step.stats().recordings,
                2,
                "{case}: switching precision must record"
            );
        }
    });
}

/// MLP-M's layer structure (five layers: four hidden, ten classes) on narrow layers: the
/// plan's launches depend on the layer count only, so these are MLP-M's.
const SIZES_M: [usize; 6] = [24, 32, 16, 32, 16, 10];

/// The launches of one 16-bit step of `L` layers on `dev`, each one kernel (module docs of
/// `graphed::nn::mixed`): the casts of layer 0's weights and bias and the input (one), of
/// every other layer's (`L − 1`, each beside the products before it), the loss with its
/// gradient's 16-bit copy (and the loss scale for `f16`), `L` bias gradients, `L − 1` ReLU
/// gates in 16 bits, AdamW; `f16` adds the unscale and the scale's update. That is `3L + 1`
/// where the products fuse their bias and ReLU (CUDA's cuBLASLt); elsewhere each hidden
/// layer adds its bias's widening and the epilogue launch, and the logits their bias launch:
/// `5L`. Before the 16-bit activations it was `4L + 1` (one fewer on CUDA), before the
/// fused launches `5L + 2`.
fn launches_16(dev: &Device, layers: usize, precision: Precision) -> usize {
    let scaling = if precision == Precision::F16 { 2 } else { 0 };
    let base = if fuses(dev) {
        3 * layers + 1
    } else {
        5 * layers
    };
    base + scaling
}

/// Whether the products fuse their bias and ReLU on `dev` (`matmul_half_bias_act`:
/// cuBLASLt's epilogues on CUDA).
fn fuses(dev: &Device) -> bool {
    dev.kind() == BackendKind::Cuda && dev.vendor_blas() && dev.vendor_fused()
}

#[test]
fn launches_per_step_of_the_sixteen_bit_steps_are_3l_plus_1_or_5l() {
    on_every_backend(|dev| {
        if dev.kind() == BackendKind::Wgpu {
            return; // no half products on wgpu yet: refused in the test above
        }
        let mut r = rng("launches_per_step_of_the_sixteen_bit_steps");
        for sizes in [&SIZES[..], &SIZES_M[..]] {
            let layers = sizes.len() - 1;
            let rows = 16;
            let x = common::floats(&mut r, rows * sizes[0], -1.0, 1.0);
            let y: Vec<u32> = (0..rows).map(|_| r.random_range(0..10u32)).collect();
            for precision in [Precision::Bf16, Precision::F16] {
                let case = format!("{} {} L = {layers}", dev.kind(), precision.name());
                let mut model = Classifier::new(dev, sizes, 5).unwrap();
                let mut step = MixedTrainStep::new(dev).unwrap();
                for _ in 0..2 {
                    step.call(&mut model, &x[..], &y[..], 1e-3, precision)
                        .unwrap();
                }
                let plan = step.plan().unwrap();
                let (launches, calls) = (plan.launch_count(), plan.library_calls());
                eprintln!(
                    "{case}: {launches} launches + {calls} library calls per step ({} nodes per replay)",
                    step.stats().launches_per_replay
                );
                assert_eq!(
                    (launches, calls),
                    (launches_16(dev, layers, precision), 3 * layers - 1),
                    "{case}"
                );
                let per_replay = step.stats().launches_per_replay;
                if dev.kind() == BackendKind::Host {
                    assert_eq!(per_replay, launches, "{case}");
                } else {
                    // CUDA: the graph's kernel nodes, cuBLAS's among them (one or more each).
                    assert!(per_replay >= launches + calls, "{case}: {per_replay}");
                }
            }
        }
    });
}

#[test]
fn an_f16_overflow_skips_the_update_inside_the_step_and_halves_the_scale() {
    on_every_backend(|dev| {
        if dev.kind() == BackendKind::Wgpu {
            return; // no half products on wgpu yet: refused in the test above
        }
        let mut r = rng("an_f16_overflow_skips_the_update");
        let mut rep = Classifier::new(dev, &SIZES, 3).unwrap();
        let mut eag = rep.duplicate().unwrap();
        let mut step = MixedTrainStep::new(dev).unwrap();
        let mut eager = MixedTrainStep::new(dev).unwrap();
        let case = dev.kind().to_string();
        for s in 0..4 {
            if s == 2 {
                // A scale whose product with any gradient overflows f16: the injected overflow.
                for m in [&rep, &eag] {
                    m.scale.write(&[2f32.powi(100)]).unwrap();
                }
            }
            let before = model_bits(&rep);
            let (x, y) = batch(&mut r);
            step.call(&mut rep, &x[..], &y[..], 1e-3, Precision::F16)
                .unwrap();
            eager
                .eager(&mut eag, &x[..], &y[..], 1e-3, Precision::F16)
                .unwrap();
            let after = model_bits(&rep);
            assert!(after == model_bits(&eag), "{case} step {s}: replay ≠ eager");
            let scale = rep.scale.to_host().unwrap()[0];
            let good = rep.good_steps.to_host().unwrap()[0];
            let count = rep.count.to_host().unwrap();
            if s == 2 {
                assert!(
                    after[0] == before[0],
                    "{case}: the overflowed step changed the weights"
                );
                assert!(
                    after[2] == before[2],
                    "{case}: the overflowed step changed the moments"
                );
                assert_eq!(after[3], before[3], "{case}: the overflowed step counted");
                assert_eq!(
                    (scale, good),
                    (2f32.powi(99), 0),
                    "{case}: the scale must halve"
                );
                // 2⁹⁹ still overflows: back to a scale that does not, on both runs.
                for m in [&rep, &eag] {
                    m.scale.write(&[1024.0]).unwrap();
                }
            } else {
                assert!(
                    after[0] != before[0],
                    "{case} step {s}: a good step must update"
                );
                let taken = if s < 2 { s as u32 + 1 } else { s as u32 };
                assert_eq!(count[1..], [taken, 0], "{case} step {s}: [steps, skip]");
                let (want_scale, want_good) = if s < 2 {
                    (65536.0, s as u32 + 1)
                } else {
                    (1024.0, 1)
                };
                assert_eq!((scale, good), (want_scale, want_good), "{case} step {s}");
            }
        }
        let st = step.stats();
        assert_eq!(
            (st.recordings, st.replays, st.eager_calls),
            (1, 4, 0),
            "{case}: {st:?}"
        );
    });
}

/// A cast longer than one 1-D grid can cover (65,535 workgroups of 256 invocations): the
/// kernels loop, so every element is converted (MLP-L's 25M-element weight cast was refused
/// before). On the host only: the limit is the same on every backend, and the host's run is
/// the cheapest long one.
#[test]
fn casts_longer_than_one_grid_convert_every_element() {
    let dev = Device::host();
    // Words of 16-bit output past the grid's 16,776,960 invocations, and f32 elements past
    // them for the widening direction.
    let n = 2 * 65_535 * 256 + 37;
    let x: Vec<f32> = (0..n).map(|i| (i % 4093) as f32 * 0.37 - 700.0).collect();
    let src = dev.upload(&x).unwrap();
    let mut half = dev.upload(&vec![bf16::from_bits(0x7f81); n]).unwrap();
    cast(&dev, &src, &mut half).unwrap();
    let mut back = dev.upload(&vec![f32::NAN; n]).unwrap();
    cast(&dev, &half, &mut back).unwrap();
    let (h, b) = (half.to_host().unwrap(), back.to_host().unwrap());
    for i in [0, 1, n / 2, n - 2 * 65_535 * 256, n - 38, n - 2, n - 1] {
        let want = bf16::from_f32(x[i]);
        assert_eq!(h[i].to_bits(), want.to_bits(), "bf16 element {i} of {n}");
        assert_eq!(
            b[i].to_bits(),
            want.to_f32().to_bits(),
            "f32 element {i} of {n}"
        );
    }
    let wrong = (0..n)
        .filter(|&i| h[i].to_bits() != bf16::from_f32(x[i]).to_bits())
        .count();
    assert_eq!(wrong, 0, "elements left unconverted or wrong");
}
