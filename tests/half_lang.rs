//! `f16` and `bf16` in the kernel language, on every backend: scalars, slices (read, written,
//! at odd element offsets), casts to and from `f32` and the integers, arithmetic and special
//! values, an `f16` axpy and a `bf16` dot product accumulated in `f32`.
//!
//! Every 16-bit operation is defined as the `f32` operation rounded to the type (to nearest,
//! ties to even; overflow to infinity; NaN stays NaN). The expected values are computed here
//! from that definition with the `half` crate and compared **bitwise** on every backend for
//! casts, moves, `+ - *`, negation, `min max abs`, comparisons and `select`; a NaN result
//! is compared as "is NaN" after arithmetic (hardware NaN payloads differ), bitwise after a
//! cast. `/` and `sqrt` are bitwise on the host and CUDA, within 1 ulp of the type on wgpu
//! (Vulkan's `f32` division and square root may be 2.5 ulp off before the rounding).
//! A separate test checks that the definition is correctly rounded (against `f64`).

mod common;

use common::{on_every_backend, rng};
use graphed::prelude::*;
use graphed::BackendKind;
use rand::Rng;

const POISON16: u16 = 0x7e5a;

// ------------------------------------------------------------------------------ kernels

/// `y ← a·x + y` in `f16` (each operation rounded to `f16`).
#[kernel(workgroup = 64)]
pub fn axpy_f16(a: f16, x: &[f16], y: &mut [f16]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = a * x[i] + y[i];
    }
}

/// `out[0] = Σ x·y` over `bf16` inputs, products and sums in `f32` (one workgroup of 64).
#[kernel(workgroup = 64)]
pub fn dot_bf16(x: &[bf16], y: &[bf16], out: &mut [f32]) {
    let s = shared::<f32, 64>();
    let t = local_id().x;
    let mut acc = 0.0f32;
    for i in (t..x.len()).step_by(64) {
        acc += x[i] as f32 * y[i] as f32;
    }
    s[t] = acc;
    barrier();
    let mut stride = 32u32;
    while stride > 0 {
        if t < stride {
            s[t] = s[t] + s[t + stride];
        }
        barrier();
        stride = stride / 2;
    }
    if t == 0 {
        out[0] = s[0];
    }
}

/// Every conversion of `f32` and the integers to and from both types.
#[kernel(workgroup = 64)]
pub fn casts(
    x: &[f32],
    i: &[i32],
    h: &[f16],
    b: &[bf16],
    to_h: &mut [f16],
    to_b: &mut [bf16],
    from_h: &mut [f32],
    from_b: &mut [f32],
    int_h: &mut [f16],
    int_b: &mut [bf16],
    h_int: &mut [i32],
    b_int: &mut [u32],
    h_b: &mut [bf16],
    b_h: &mut [f16],
) {
    let k = global_id().x;
    if k < x.len() {
        to_h[k] = x[k] as f16;
        to_b[k] = x[k] as bf16;
        from_h[k] = h[k] as f32;
        from_b[k] = b[k] as f32;
        int_h[k] = i[k] as f16;
        int_b[k] = i[k] as bf16;
        h_int[k] = h[k] as i32;
        b_int[k] = b[k] as u32;
        h_b[k] = h[k] as bf16;
        b_h[k] = b[k] as f16;
    }
}

/// The two `f16` conversions alone, for the exhaustive sweep.
#[kernel(workgroup = 64)]
pub fn f16_casts(x: &[f32], h: &[f16], to_h: &mut [f16], from_h: &mut [f32]) {
    let k = global_id().x;
    if k < x.len() {
        to_h[k] = x[k] as f16;
        from_h[k] = h[k] as f32;
    }
}

macro_rules! arith_kernel {
    ($name:ident, $t:ident) => {
        /// Arithmetic of one 16-bit type: `out[9k..9k+9]` = `a+b a-b a*b a/b -a min max abs
        /// sqrt(|a|)` with literals and compound assignment; `flags[k]` the comparisons' bits.
        #[kernel(workgroup = 64)]
        pub fn $name(a: &[$t], b: &[$t], out: &mut [$t], flags: &mut [u32]) {
            let k = global_id().x;
            if k < a.len() {
                let x = a[k];
                let y = b[k];
                let o = 9 * k;
                out[o] = x + y;
                out[o + 1] = x - y;
                let mut p: $t = x;
                p *= y;
                out[o + 2] = p;
                out[o + 3] = x / y;
                out[o + 4] = -x;
                out[o + 5] = min(x, y) * 1.0;
                out[o + 6] = max(x, y);
                out[o + 7] = abs(x);
                out[o + 8] = sqrt(abs(x)) * max(1.0, 0.5);
                let mut f = 0u32;
                if x < y {
                    f = f | 1u32;
                }
                if x <= y {
                    f = f | 2u32;
                }
                if x == y {
                    f = f | 4u32;
                }
                if x != y {
                    f = f | 8u32;
                }
                if select(x > y, x, y) >= 0.5 {
                    f = f | 16u32;
                }
                flags[k] = f;
            }
        }
    };
}
arith_kernel!(arith_f16, f16);
arith_kernel!(arith_bf16, bf16);

/// `y[i] = round(x[i] · s)` with a `bf16` per-launch scalar, through a `#[device]` helper.
#[device]
fn scale_bf16(v: bf16, s: bf16) -> bf16 {
    v * s
}

/// A `#[device]` helper over `bf16` values and an `f32` accumulator in a per-invocation array.
#[kernel(workgroup = 64)]
pub fn scale(s: bf16, x: &[bf16], y: &mut [bf16]) {
    let i = global_id().x;
    if i < y.len() {
        let mut w = [0.0f32; 2];
        w[0] = scale_bf16(x[i], s) as f32;
        y[i] = w[0] as bf16;
    }
}

const ALL: &[&graphed::KernelDef] = &[
    &axpy_f16::DEF,
    &dot_bf16::DEF,
    &casts::DEF,
    &f16_casts::DEF,
    &arith_f16::DEF,
    &arith_bf16::DEF,
    &scale::DEF,
];

// ------------------------------------------------------------------------------ data

/// Special and random `f32` inputs for the casts: both types' ties (to even, both ways),
/// overflow, the subnormal ranges, signed zeros, infinities and NaNs with payloads.
fn cast_inputs(rng: &mut impl Rng) -> Vec<f32> {
    let mut v: Vec<f32> = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(0x7fc0_0000),
        f32::from_bits(0xffc1_2345),
        f32::from_bits(0x7f80_0001), // a signalling NaN: quieted, payload kept
        1.0 + 2f32.powi(-11),        // f16 tie, to even: 1
        1.0 + 3.0 * 2f32.powi(-11),  // f16 tie, to even: 1 + 2^-9
        1.0 + 2f32.powi(-8),         // bf16 tie: 1
        1.0 + 3.0 * 2f32.powi(-8),   // bf16 tie: 1 + 2^-6
        65504.0,
        65519.99,
        65520.0, // f16 tie between 65504 and "65536": infinity
        -65520.0,
        1e6,
        f32::MAX,
        f32::from_bits(0x7f7f_7fff),
        f32::MIN,
        2f32.powi(-14),
        2f32.powi(-24),
        2f32.powi(-25),          // f16 tie with 0: 0
        2f32.powi(-25) * 1.0001, // rounds up to the least subnormal
        3.0 * 2f32.powi(-25),    // tie between subnormals 1 and 2: 2
        -3.0 * 2f32.powi(-25),
        f32::from_bits(0x0000_8000), // bf16: tie with 0
        f32::from_bits(0x0001_8000), // bf16: subnormal tie to even
        f32::from_bits(0x8000_0001),
        f32::MIN_POSITIVE,
        1e-30,
    ]
    .to_vec();
    v.extend((0..200).map(|_| f32::from_bits(rng.random::<u32>())));
    v.extend((0..200).map(|_| rng.random_range(-70000.0f32..70000.0)));
    v
}

fn f16s(bits: &[u16]) -> Vec<f16> {
    bits.iter().map(|&b| f16::from_bits(b)).collect()
}
fn bf16s(bits: &[u16]) -> Vec<bf16> {
    bits.iter().map(|&b| bf16::from_bits(b)).collect()
}
fn bits16<T: Copy + Into<Bits16>>(v: &[T]) -> Vec<u16> {
    v.iter().map(|&x| x.into().0).collect()
}
struct Bits16(u16);
impl From<f16> for Bits16 {
    fn from(v: f16) -> Self {
        Bits16(v.to_bits())
    }
}
impl From<bf16> for Bits16 {
    fn from(v: bf16) -> Self {
        Bits16(v.to_bits())
    }
}

/// Distance in ulps of a 16-bit type between two non-NaN bit patterns (sign-magnitude
/// mapped onto a line, so -0 and +0 are 0 apart).
fn ulps16(a: u16, b: u16) -> u32 {
    let line = |x: u16| -> i32 {
        if x & 0x8000 != 0 {
            -((x & 0x7fff) as i32)
        } else {
            x as i32
        }
    };
    (line(a) - line(b)).unsigned_abs()
}

fn is_nan16(bits: u16, bf: bool) -> bool {
    if bf {
        bf16::from_bits(bits).is_nan()
    } else {
        f16::from_bits(bits).is_nan()
    }
}

/// Asserts `got` equals `want` bitwise, or (`nan_class`) both NaN, or within `ulps`.
fn assert_16(case: &str, got: &[u16], want: &[u16], bf: bool, nan_class: bool, ulps: u32) {
    assert_eq!(got.len(), want.len(), "{case}: length");
    for (k, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = g == w
            || (nan_class && is_nan16(g, bf) && is_nan16(w, bf))
            || (ulps > 0 && !is_nan16(w, bf) && !is_nan16(g, bf) && ulps16(g, w) <= ulps);
        assert!(
            ok,
            "{case}[{k}]: got {g:#06x}, want {w:#06x} (within {ulps} ulp{})",
            if nan_class { ", NaN as a class" } else { "" }
        );
    }
}

fn on_wgpu(dev: &Device) -> bool {
    dev.kind() == BackendKind::Wgpu
}

/// Known driver behaviour, as data: NVIDIA's Vulkan driver (580, H200) flushes `f32`
/// subnormals in arithmetic, and bf16's subnormals are f32's: `bf16 +` of subnormal operands
/// gave `0x0138` where the definition gives `0x00f9`. lavapipe keeps them.
fn flushes_f32_subnormals(dev: &Device) -> bool {
    on_wgpu(dev) && dev.adapter().contains("NVIDIA")
}

/// Whether the 16-bit pattern is a subnormal of its type (exponent bits 0, mantissa not).
fn subnormal16(bits: u16, bf: bool) -> bool {
    let (exp, man) = if bf {
        (0x7f80, 0x007f)
    } else {
        (0x7c00, 0x03ff)
    };
    bits & exp == 0 && bits & man != 0
}

/// Known driver behaviour, as data: on wgpu an `f16` slice is WGSL's `array<f16>`, and a
/// value crosses between it and the kernel's bits by an (exact) `f32` conversion, which may
/// replace a NaN's payload by the driver's canonical NaN. Seen on lavapipe (LLVM 15: `0x7e00`
/// with the sign kept) and on NVIDIA's Vulkan driver on the H200 (driver 580: an f16 NaN read
/// from the slice and cast to bf16 gave `0x7fff`). A NaN stays a NaN.
fn f16_slice_nan_payload_kept(dev: &Device) -> bool {
    !on_wgpu(dev)
}

// ------------------------------------------------------------------------------ tests

#[test]
fn kernels_validate_and_compile() {
    common::assert_wgsl_valid(ALL);
    common::assert_cuda_compiles(ALL);
    // Only `f16` slices need `shader-f16` (`array<f16>`); `bf16` is words.
    assert!(axpy_f16::DEF.needs_shader_f16() && casts::DEF.needs_shader_f16());
    assert!(!dot_bf16::DEF.needs_shader_f16() && !scale::DEF.needs_shader_f16());
    assert!(!axpy_f16::CUDA.contains("cuda_fp16") && axpy_f16::CUDA.contains("cvt.rn.f16.f32"));
}

#[test]
fn f16_axpy_matches_the_definition_bitwise() {
    on_every_backend(|dev| {
        let mut rng = rng("f16_axpy");
        for n in [1usize, 2, 63, 64, 65, 1000] {
            let x: Vec<f16> = (0..n + 3)
                .map(|_| f16::from_f32(rng.random_range(-8.0..8.0)))
                .collect();
            let y0: Vec<f16> = (0..n + 3)
                .map(|_| f16::from_f32(rng.random_range(-8.0..8.0)))
                .collect();
            let a = f16::from_f32(rng.random_range(-2.0..2.0));
            let xb = dev.upload(&x).unwrap();
            let yb = dev.upload(&y0).unwrap();
            // Views starting at an odd element and ending inside a word.
            let xv = xb.slice(1..n + 1).unwrap();
            let mut yv = yb.slice(3..n + 3).unwrap();
            axpy_f16::launch(dev, n, a, &xv, &mut yv).unwrap();
            let got = yb.to_host().unwrap();
            let mut want = y0.clone();
            for i in 0..n {
                let p = f16::from_f32(a.to_f32() * x[i + 1].to_f32());
                want[i + 3] = f16::from_f32(p.to_f32() + y0[i + 3].to_f32());
            }
            assert_16(
                &format!("{}: axpy n={n}", dev.kind()),
                &bits16(&got),
                &bits16(&want),
                false,
                false,
                0,
            );
        }
    });
}

#[test]
fn bf16_dot_accumulated_in_f32() {
    on_every_backend(|dev| {
        let mut rng = rng("bf16_dot");
        for n in [1usize, 64, 1000, 4097] {
            let x: Vec<bf16> = (0..n)
                .map(|_| bf16::from_f32(rng.random_range(-1.0..1.0)))
                .collect();
            let y: Vec<bf16> = (0..n)
                .map(|_| bf16::from_f32(rng.random_range(-1.0..1.0)))
                .collect();
            let mut out = graphed::testing::poisoned(dev, 1);
            dot_bf16::launch(
                dev,
                Grid::workgroups(1),
                &dev.upload(&x).unwrap(),
                &dev.upload(&y).unwrap(),
                &mut out,
            )
            .unwrap();
            let exact: f64 = x.iter().zip(&y).map(|(a, b)| a.to_f64() * b.to_f64()).sum();
            // Products of bf16 are exact in f32; only the f32 sums round, each within an ulp
            // of its partial sum, so the error is a few ulps of Σ|x·y| (not of the sum, which
            // may cancel to near zero): that is the floor.
            let scale: f64 = x
                .iter()
                .zip(&y)
                .map(|(a, b)| (a.to_f64() * b.to_f64()).abs())
                .sum();
            graphed::testing::assert_close_floor(
                &format!("{}: dot n={n}", dev.kind()),
                &out.to_host().unwrap(),
                &[exact],
                1e-5,
                scale,
            );
        }
    });
}

#[test]
fn casts_round_to_nearest_even_overflow_to_infinity_and_keep_nan() {
    on_every_backend(|dev| {
        let mut rng = rng("half_casts");
        let x = cast_inputs(&mut rng);
        let n = x.len();
        let ints: Vec<i32> = (0..n)
            .map(|k| match k % 4 {
                0 => rng.random_range(-70000..70000),
                1 => rng.random(),
                2 => (1 << 24) + 1 + 2 * rng.random_range(0..1000),
                _ => rng.random_range(-2048..2048),
            })
            .collect();
        let hb: Vec<u16> = (0..n).map(|_| rng.random()).collect();
        let bb: Vec<u16> = (0..n).map(|_| rng.random()).collect();
        let p16 = |d: &Device| d.upload(&f16s(&vec![POISON16; n])).unwrap();
        let pb16 = |d: &Device| d.upload(&bf16s(&vec![POISON16; n])).unwrap();
        let (mut to_h, mut to_b) = (p16(dev), pb16(dev));
        let mut from_h = graphed::testing::poisoned(dev, n);
        let mut from_b = graphed::testing::poisoned(dev, n);
        let (mut int_h, mut int_b) = (p16(dev), pb16(dev));
        let mut h_int = dev.upload(&vec![0x5a5a_5a5ai32; n]).unwrap();
        let mut b_int = dev.upload(&vec![0x5a5a_5a5au32; n]).unwrap();
        let (mut h_b, mut b_h) = (pb16(dev), p16(dev));
        casts::launch(
            dev,
            n,
            &dev.upload(&x).unwrap(),
            &dev.upload(&ints).unwrap(),
            &dev.upload(&f16s(&hb)).unwrap(),
            &dev.upload(&bf16s(&bb)).unwrap(),
            &mut to_h,
            &mut to_b,
            &mut from_h,
            &mut from_b,
            &mut int_h,
            &mut int_b,
            &mut h_int,
            &mut b_int,
            &mut h_b,
            &mut b_h,
        )
        .unwrap();
        let k = dev.kind();
        let want_h: Vec<u16> = x.iter().map(|v| f16::from_f32(*v).to_bits()).collect();
        let want_b: Vec<u16> = x.iter().map(|v| bf16::from_f32(*v).to_bits()).collect();
        let payload = f16_slice_nan_payload_kept(dev);
        assert_16(
            &format!("{k}: f32 as f16"),
            &bits16(&to_h.to_host().unwrap()),
            &want_h,
            false,
            !payload,
            0,
        );
        assert_16(
            &format!("{k}: f32 as bf16"),
            &bits16(&to_b.to_host().unwrap()),
            &want_b,
            true,
            false,
            0,
        );
        // The spot checks the table of special values promises.
        let th = to_h.to_host().unwrap();
        assert_eq!(th[9].to_bits(), 0x3c00, "{k}: 1 + 2^-11 ties to 1");
        assert_eq!(th[10].to_bits(), 0x3c02, "{k}: 1 + 3·2^-11 ties to even");
        assert_eq!(th[15].to_bits(), 0x7c00, "{k}: 65520 overflows to infinity");
        assert_eq!(th[14].to_bits(), 0x7bff, "{k}: 65519.99 rounds to 65504");
        assert_eq!(th[1].to_bits(), 0x8000, "{k}: -0 stays -0");
        assert_eq!(th[23].to_bits(), 0x0000, "{k}: 2^-25 ties to 0");
        assert_eq!(th[25].to_bits(), 0x0002, "{k}: 3·2^-25 ties to even");
        assert!(th[6].is_nan() && th[8].is_nan(), "{k}: NaN stays NaN");
        let fh: Vec<f32> = from_h.to_host().unwrap();
        for (j, (g, b)) in fh.iter().zip(&hb).enumerate() {
            let w = f16::from_bits(*b).to_f32();
            let same = g.to_bits() == w.to_bits() || (!payload && g.is_nan() && w.is_nan());
            assert!(
                same,
                "{k}: f16 as f32 [{j}]: {:#x} from {b:#06x}, want {:#x}",
                g.to_bits(),
                w.to_bits()
            );
        }
        let fb: Vec<u32> = from_b
            .to_host()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        let want: Vec<u32> = bb
            .iter()
            .map(|b| bf16::from_bits(*b).to_f32().to_bits())
            .collect();
        assert_eq!(fb, want, "{k}: bf16 as f32");
        let want: Vec<u16> = ints
            .iter()
            .map(|i| f16::from_f32(*i as f32).to_bits())
            .collect();
        assert_16(
            &format!("{k}: i32 as f16"),
            &bits16(&int_h.to_host().unwrap()),
            &want,
            false,
            false,
            0,
        );
        let want: Vec<u16> = ints
            .iter()
            .map(|i| bf16::from_f32(*i as f32).to_bits())
            .collect();
        assert_16(
            &format!("{k}: i32 as bf16 (through f32)"),
            &bits16(&int_b.to_host().unwrap()),
            &want,
            true,
            false,
            0,
        );
        let want: Vec<i32> = hb
            .iter()
            .map(|b| f16::from_bits(*b).to_f32() as i32)
            .collect();
        assert_eq!(
            h_int.to_host().unwrap(),
            want,
            "{k}: f16 as i32 (toward zero, saturating, NaN 0)"
        );
        let want: Vec<u32> = bb
            .iter()
            .map(|b| bf16::from_bits(*b).to_f32() as u32)
            .collect();
        assert_eq!(b_int.to_host().unwrap(), want, "{k}: bf16 as u32");
        let want: Vec<u16> = hb
            .iter()
            .map(|b| bf16::from_f32(f16::from_bits(*b).to_f32()).to_bits())
            .collect();
        // The f16 operand is read from an `f16` slice: on wgpu its NaN payload may not
        // survive (see `f16_slice_nan_payload_kept`; NVIDIA's Vulkan driver gave 0x7fff).
        assert_16(
            &format!("{k}: f16 as bf16"),
            &bits16(&h_b.to_host().unwrap()),
            &want,
            true,
            !payload,
            0,
        );
        let want: Vec<u16> = bb
            .iter()
            .map(|b| f16::from_f32(bf16::from_bits(*b).to_f32()).to_bits())
            .collect();
        assert_16(
            &format!("{k}: bf16 as f16"),
            &bits16(&b_h.to_host().unwrap()),
            &want,
            false,
            !payload,
            0,
        );
    });
}

/// Every `f16` bit pattern widened to `f32`, and `f32`s on every rounding boundary of
/// `f16` narrowed: for each finite magnitude `p`, the exact midpoint between `p` and the
/// next pattern (a tie, to even), one `f32` ulp below it and one above, both signs — the
/// normal, subnormal and overflow ranges whole, since the WGSL helpers compute every case
/// without branches and pick one.
#[test]
fn every_f16_pattern_and_rounding_boundary_converts_as_the_definition() {
    on_every_backend(|dev| {
        let mut x = Vec::new();
        for p in 0u16..0x7c00 {
            // Past 65504 the next step would be 65536, which f16 lacks: ties go to infinity.
            let next = if p == 0x7bff {
                65536.0
            } else {
                f16::from_bits(p + 1).to_f64()
            };
            let mid = (f16::from_bits(p).to_f64() + next) / 2.0;
            let m = mid as f32;
            assert_eq!(m as f64, mid, "the midpoint after {p:#06x} is an f32");
            for v in [
                m,
                f32::from_bits(m.to_bits() - 1),
                f32::from_bits(m.to_bits() + 1),
            ] {
                x.push(v);
                x.push(-v);
            }
        }
        let n = x.len();
        let h: Vec<u16> = (0..n).map(|j| (j % 0x1_0000) as u16).collect();
        let mut to_h = dev.upload(&f16s(&vec![POISON16; n])).unwrap();
        let mut from_h = graphed::testing::poisoned(dev, n);
        f16_casts::launch(
            dev,
            n,
            &dev.upload(&x).unwrap(),
            &dev.upload(&f16s(&h)).unwrap(),
            &mut to_h,
            &mut from_h,
        )
        .unwrap();
        let k = dev.kind();
        let payload = f16_slice_nan_payload_kept(dev);
        let want: Vec<u16> = x.iter().map(|v| f16::from_f32(*v).to_bits()).collect();
        assert!(want.contains(&0x7c00) && want.contains(&0x0001) && want.contains(&0x8000));
        assert_16(
            &format!("{k}: f32 as f16 on the boundaries"),
            &bits16(&to_h.to_host().unwrap()),
            &want,
            false,
            false,
            0,
        );
        let got: Vec<f32> = from_h.to_host().unwrap();
        for (j, (g, b)) in got.iter().zip(&h).enumerate() {
            let w = f16::from_bits(*b).to_f32();
            let same = g.to_bits() == w.to_bits() || (!payload && g.is_nan() && w.is_nan());
            assert!(
                same,
                "{k}: f16 {b:#06x} as f32 [{j}]: {:#x}, want {:#x}",
                g.to_bits(),
                w.to_bits()
            );
        }
    });
}

/// Inputs for arithmetic: random bits (NaNs, infinities, subnormals among them), values of
/// moderate range, and pairs that are equal, negated or zero.
fn arith_inputs(rng: &mut impl Rng, n: usize) -> (Vec<u16>, Vec<u16>) {
    let mut a = Vec::new();
    let mut b = Vec::new();
    for k in 0..n {
        let (x, y): (u16, u16) = match k % 5 {
            0 | 1 => (rng.random(), rng.random()),
            2 => {
                let x = rng.random::<u16>();
                (x, x)
            }
            3 => {
                let x = rng.random::<u16>();
                (x, x ^ 0x8000)
            }
            _ => (rng.random::<u16>() & 0x83ff, rng.random::<u16>() & 0x87ff),
        };
        a.push(x);
        b.push(y);
    }
    (a, b)
}

fn expected_arith(a: &[u16], b: &[u16], bf: bool) -> (Vec<u16>, Vec<u32>) {
    let wide = |x: u16| {
        if bf {
            bf16::from_bits(x).to_f32()
        } else {
            f16::from_bits(x).to_f32()
        }
    };
    let round = |v: f32| {
        if bf {
            bf16::from_f32(v).to_bits()
        } else {
            f16::from_f32(v).to_bits()
        }
    };
    let mut out = Vec::new();
    let mut flags = Vec::new();
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (wide(x), wide(y));
        out.extend([
            round(x + y),
            round(x - y),
            round(x * y),
            round(x / y),
            round(-x),
            round(x.min(y)),
            round(x.max(y)),
            round(x.abs()),
            round(round_back(round(x.abs().sqrt()), bf) * 1.0),
        ]);
        let s = if x > y { x } else { y };
        flags.push(
            u32::from(x < y)
                | u32::from(x <= y) << 1
                | u32::from(x == y) << 2
                | u32::from(x != y) << 3
                | u32::from(s >= 0.5) << 4,
        );
    }
    (out, flags)
}

fn round_back(bits: u16, bf: bool) -> f32 {
    if bf {
        bf16::from_bits(bits).to_f32()
    } else {
        f16::from_bits(bits).to_f32()
    }
}

#[test]
fn arithmetic_is_the_f32_operation_rounded() {
    on_every_backend(|dev| {
        let mut rng = rng("half_arith");
        let n = 2000;
        for bf in [false, true] {
            let (a, b) = arith_inputs(&mut rng, n);
            let (want, want_flags) = expected_arith(&a, &b, bf);
            let mut flags = dev.upload(&vec![0xdead_beefu32; n]).unwrap();
            let got: Vec<u16> = if bf {
                let mut out = dev.upload(&bf16s(&vec![POISON16; 9 * n])).unwrap();
                let (ab, bb) = (
                    dev.upload(&bf16s(&a)).unwrap(),
                    dev.upload(&bf16s(&b)).unwrap(),
                );
                arith_bf16::launch(dev, n, &ab, &bb, &mut out, &mut flags).unwrap();
                bits16(&out.to_host().unwrap())
            } else {
                let mut out = dev.upload(&f16s(&vec![POISON16; 9 * n])).unwrap();
                let (ab, bb) = (
                    dev.upload(&f16s(&a)).unwrap(),
                    dev.upload(&f16s(&b)).unwrap(),
                );
                arith_f16::launch(dev, n, &ab, &bb, &mut out, &mut flags).unwrap();
                bits16(&out.to_host().unwrap())
            };
            let t = if bf { "bf16" } else { "f16" };
            let k = dev.kind();
            // Vulkan flushes f32 subnormals (bf16's subnormals are f32's) on some drivers and
            // may fold `v * 0`; neither is seen on lavapipe for these kernels (recorded below).
            // Where the driver flushes them: the elements without a subnormal operand.
            let keep: Option<Vec<bool>> = (bf && flushes_f32_subnormals(dev)).then(|| {
                (0..n)
                    .map(|j| !subnormal16(a[j], true) && !subnormal16(b[j], true))
                    .collect()
            });
            for (op, name) in ["+", "-", "*", "/", "neg", "min", "max", "abs", "sqrt"]
                .iter()
                .enumerate()
            {
                let mut g: Vec<u16> = got.iter().skip(op).step_by(9).copied().collect();
                let mut w: Vec<u16> = want.iter().skip(op).step_by(9).copied().collect();
                if *name == "min" || *name == "max" {
                    // Which zero min(+0, -0) gives is not defined (WGSL, CUDA, Rust's `min`).
                    for v in g.iter_mut().chain(w.iter_mut()) {
                        if *v == 0x8000 {
                            *v = 0;
                        }
                    }
                }
                if let Some(keep) = &keep {
                    // Leave out the elements where an operand or the result is subnormal, and
                    // divisions by |y| ≥ 2^126, for which WGSL states no accuracy (NVIDIA's
                    // x / y gave 0 for x = y there: 1/y is an f32 subnormal, flushed).
                    let keep: Vec<bool> = keep
                        .iter()
                        .zip(&w)
                        .zip(&b)
                        .map(|((&k, &v), &y)| {
                            k && !subnormal16(v, true) && !(*name == "/" && y & 0x7fff >= 0x7e80)
                        })
                        .collect();
                    let kept = keep.iter().filter(|&&k| k).count();
                    assert!(kept > n / 2, "{k}: {t} {name}: only {kept} of {n} kept");
                    let mut it = keep.iter();
                    g.retain(|_| *it.next().unwrap());
                    let mut it = keep.iter();
                    w.retain(|_| *it.next().unwrap());
                }
                let ulps = if on_wgpu(dev) && (*name == "/" || *name == "sqrt") {
                    1
                } else {
                    0
                };
                assert_16(&format!("{k}: {t} {name}"), &g, &w, bf, true, ulps);
            }
            let mut got_flags = flags.to_host().unwrap();
            let mut want_flags = want_flags;
            if let Some(keep) = &keep {
                let mut it = keep.iter();
                got_flags.retain(|_| *it.next().unwrap());
                let mut it = keep.iter();
                want_flags.retain(|_| *it.next().unwrap());
            }
            assert_eq!(got_flags, want_flags, "{k}: {t} comparisons");
        }
    });
}

#[test]
fn per_launch_bf16_scalar_through_a_device_helper() {
    on_every_backend(|dev| {
        let mut rng = rng("half_scale");
        let n = 130;
        let x: Vec<bf16> = (0..n)
            .map(|_| bf16::from_f32(rng.random_range(-4.0..4.0)))
            .collect();
        let s = bf16::from_f32(rng.random_range(0.1..3.0));
        let mut y = dev.upload(&bf16s(&vec![POISON16; n])).unwrap();
        scale::launch(dev, n, s, &dev.upload(&x).unwrap(), &mut y).unwrap();
        let want: Vec<u16> = x
            .iter()
            .map(|v| bf16::from_f32(v.to_f32() * s.to_f32()).to_bits())
            .collect();
        assert_16(
            &format!("{}: scale", dev.kind()),
            &bits16(&y.to_host().unwrap()),
            &want,
            true,
            false,
            0,
        );
    });
    // The helper's Rust form, on the CPU.
    assert_eq!(
        scale_bf16(bf16::from_f32(1.5), bf16::from_f32(3.0)),
        bf16::from_f32(4.5)
    );
}

/// The definition is correctly rounded for `+ - * /` and `sqrt`: against the exact result
/// rounded once (`f64` holds sums, products and quotients of 16-bit values exactly enough).
#[test]
fn the_definition_is_correctly_rounded() {
    let mut rng = rng("half_correct_rounding");
    // Both types alike: the f32 operation rounded, against the exact result rounded once.
    macro_rules! check {
        ($t:ident, $x:expr, $y:expr) => {{
            let (a, b) = ($t::from_bits($x), $t::from_bits($y));
            let (af, bf_, ad, bd) = (a.to_f32(), b.to_f32(), a.to_f64(), b.to_f64());
            for (via_f32, exact) in [
                (af + bf_, ad + bd),
                (af - bf_, ad - bd),
                (af * bf_, ad * bd),
                (af / bf_, ad / bd),
                (af.sqrt(), ad.sqrt()),
            ] {
                let (g, w) = ($t::from_f32(via_f32), $t::from_f64(exact));
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{} {:#06x} {:#06x}",
                    stringify!($t),
                    $x,
                    $y
                );
            }
        }};
    }
    for _ in 0..200_000 {
        let (x, y) = (rng.random::<u16>(), rng.random::<u16>());
        check!(f16, x, y);
        check!(bf16, x, y);
    }
}

/// `y[i] = x[at]` for `i` of the view, 16-bit both (checked mode's reads and writes).
#[kernel(workgroup = 64)]
pub fn gather16(x: &[bf16], at: u32, h: &[f16], y: &mut [bf16], z: &mut [f16]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = x[at];
        z[at] = h[i];
    }
}

#[test]
fn checked_mode_covers_16_bit_slices() {
    common::assert_wgsl_valid(&[&gather16::DEF]);
    common::assert_cuda_compiles(&[&gather16::DEF]);
    for d in graphed::testing::backends() {
        let dev =
            Device::open_new_with(d.kind(), graphed::DeviceOptions { checked: true }).unwrap();
        let k = dev.kind();
        let xb: Vec<u16> = (0..9).map(|i| 0x3f80 + i).collect();
        let hb: Vec<u16> = (0..9).map(|i| 0x3c00 + i).collect();
        let x = dev.upload(&bf16s(&xb)).unwrap();
        let h = dev.upload(&f16s(&hb)).unwrap();
        let big = dev.upload(&bf16s(&[POISON16; 8])).unwrap();
        let zbig = dev.upload(&f16s(&[POISON16; 8])).unwrap();
        // Views from odd elements: index 4 lies inside the buffer but outside the view.
        let (xv, hv) = (x.slice(1..5).unwrap(), h.slice(1..5).unwrap());
        let mut yv = big.slice(1..4).unwrap();
        let mut zv = zbig.slice(3..7).unwrap();
        // In range: bitwise the unchecked results.
        gather16::launch(&dev, 3, &xv, 2u32, &hv, &mut yv, &mut zv).unwrap();
        dev.synchronize().unwrap();
        let y = bits16(&big.to_host().unwrap());
        assert_eq!(
            y,
            [POISON16, xb[3], xb[3], xb[3], POISON16, POISON16, POISON16, POISON16],
            "{k}"
        );
        // The last of the invocations writes z[2]; all three write it (a race of equal
        // values would still be one of them).
        assert!(
            hb[1..4].contains(&bits16(&zbig.to_host().unwrap())[5]),
            "{k}"
        );
        let got = gather16::launch(&dev, 3, &xv, 4u32, &hv, &mut yv, &mut zv)
            .and_then(|()| dev.synchronize());
        match got {
            Err(graphed::Error::Fault(f)) => {
                assert_eq!(f.kernel, "gather16", "{k}: {f}");
                assert!(
                    matches!(f.kind, graphed::FaultKind::OutOfBounds { index: 4, len: 4 }),
                    "{k}: {f}"
                );
                assert_eq!(f.target, "x", "{k}: {f}");
            }
            other => panic!("{k}: expected a fault of x[4], got {other:?}"),
        }
        dev.synchronize().expect("a fault is reported once");
        // The writes past the views were dropped: the neighbours keep their bits.
        let y = bits16(&big.to_host().unwrap());
        assert_eq!(
            (y[0], y[4]),
            (POISON16, POISON16),
            "{k}: y outside the view"
        );
        let z = bits16(&zbig.to_host().unwrap());
        assert_eq!(
            (z[2], z[7]),
            (POISON16, POISON16),
            "{k}: z outside the view"
        );
    }
}
