//! `#[device]` helper functions on every backend: scalar parameters, slices read and
//! written, helpers calling helpers across modules and crates (`graphed::kernels::helpers`),
//! and two kernels sharing a helper. Each kernel is checked against a plain-Rust reference
//! built from the helpers' own Rust forms (and, for the formulas, from f64), with fresh
//! random inputs and outputs poisoned before the run; every kernel's WGSL is validated by
//! naga and its CUDA C compiled by NVRTC.
//!
//! Tolerances: integer results bitwise; float results bitwise on the host (the same Rust
//! operations as the reference) and within `TOL` (relative, per element, or absolute below
//! 1) on GPU targets, whose `exp`, `log`, `tanh` and `/` may differ by a few ulp.

mod common;

use common::{floats, on_every_backend, rng};
use graphed::kernels::helpers::gelu;
use graphed::prelude::*;
use graphed::{BackendKind, KernelDef};
use rand::Rng;

const POISON_F32: f32 = f32::from_bits(0x7fde_ad00);
const POISON_U32: u32 = 0xDEAD_BEEF;
const TOL: f32 = 2e-5;
const SIZES: &[usize] = &[1, 63, 65, 1000];

// ------------------------------------------------------------------------------ helpers

/// Activations: scalar parameters, a return value, early returns.
pub mod act {
    use graphed::prelude::*;

    /// `ln(1 + e^x)`, computed without overflow.
    #[device]
    pub fn softplus(x: f32) -> f32 {
        if x > 15.0 {
            return x;
        }
        log(1.0 + exp(x))
    }

    /// `x` for positive `x`, else `slope * x`.
    #[device]
    pub fn leaky(x: f32, slope: f32) -> f32 {
        if x > 0.0 {
            x
        } else {
            slope * x
        }
    }

    /// `x` clamped to `[0, 1]` by early returns.
    #[device]
    pub fn unit(x: f32) -> f32 {
        if x < 0.0 {
            return 0.0;
        }
        if x > 1.0 {
            return 1.0;
        }
        x
    }
}

/// Helpers that call helpers of another module and of another crate.
pub mod mix {
    use graphed::kernels::helpers::sigmoid;
    use graphed::prelude::*;

    /// Half a softplus plus a sigmoid, clamped to the unit interval.
    #[device]
    pub fn smooth(x: f32) -> f32 {
        let s = super::act::softplus(x) * 0.5 + sigmoid(x);
        super::act::unit(s - 0.5)
    }

    /// A helper two calls away from `softplus`.
    #[device]
    pub fn smooth2(x: f32, kind: u32) -> f32 {
        smooth(x) + graphed::kernels::helpers::activate(kind, x)
    }
}

/// Integer and bool parameters.
pub mod bits {
    use graphed::prelude::*;

    /// A 32-bit mix (wrapping multiply, xor-shift).
    #[device]
    pub fn hash(u: u32) -> u32 {
        let mut h = u * 0x9e37_79b9;
        h ^= h >> 16u32;
        h * 0x85eb_ca6b
    }

    /// `a` when `c`, else `b - a`, with a loop that sums `0..n`.
    #[device]
    pub fn pick(c: bool, a: i32, b: i32, n: u32) -> i32 {
        let mut s = 0i32;
        for k in 0..n {
            s += k as i32;
        }
        select(c, a, b - a) + s
    }
}

/// Slices: read, written, and passed on to other helpers.
pub mod slices {
    use graphed::prelude::*;

    /// `x[i]`, or 0 past the end.
    #[device]
    pub fn at(x: &[f32], i: u32) -> f32 {
        if i < x.len() {
            x[i]
        } else {
            0.0
        }
    }

    /// `x[i-1] + 2 x[i] + x[i+1]` over 4, zero past the ends: the stencil both blur kernels
    /// use.
    #[device]
    pub fn stencil3(x: &[f32], i: u32) -> f32 {
        let left = if i > 0 { at(x, i - 1) } else { 0.0 };
        (left + 2.0 * at(x, i) + at(x, i + 1)) * 0.25
    }

    /// Writes `v` to `y[i]` when in bounds; returns nothing.
    #[device]
    pub fn put(y: &mut [f32], i: u32, v: f32) {
        if i >= y.len() {
            return;
        }
        y[i] = v;
    }

    /// `y[i] += a * x[i]` through `put`; returns the new value.
    #[device]
    pub fn axpy_at(y: &mut [f32], x: &[f32], a: f32, i: u32) -> f32 {
        let v = a * x[i] + y[i];
        put(y, i, v);
        v
    }
}

/// Arrays by value: parameters (one written through its own copy), results, and a helper
/// passing arrays on to others.
pub mod arr {
    use graphed::prelude::*;

    /// `v` reversed and scaled by `s`.
    #[device]
    pub fn rev_scaled(v: [f32; 4], s: f32) -> [f32; 4] {
        let mut r = [0.0f32; 4];
        for k in 0u32..4u32 {
            r[k] = s * v[3u32 - k];
        }
        r
    }

    /// `a · b`.
    #[device]
    pub fn dot4(a: [f32; 4], b: [f32; 4]) -> f32 {
        let mut s = 0.0;
        for k in 0u32..4u32 {
            s += a[k] * b[k];
        }
        s
    }

    /// `v · rev_scaled(v, s)`: arrays passed on, and one received from a helper.
    #[device]
    pub fn fold(v: [f32; 4], s: f32) -> f32 {
        let r = rev_scaled(v, s);
        dot4(v, r)
    }

    /// The running sums of `v`, computed in `v`'s own copy (the caller's array is unchanged).
    #[device]
    pub fn prefix(mut v: [u32; 3]) -> [u32; 3] {
        v[1] = v[1] + v[0];
        v[2] = v[2] + v[1];
        v
    }
}

// ------------------------------------------------------------------------------ kernels

#[kernel(workgroup = 64)]
pub fn scalar_helpers(x: &[f32], slope: f32, y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = act::leaky(x[i], slope) + act::softplus(x[i]) + act::unit(x[i]);
    }
}

#[kernel(workgroup = 64)]
pub fn nested_helpers(x: &[f32], kind: u32, y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = mix::smooth2(x[i], kind);
    }
}

/// A helper of `graphed-kernels`, imported, and one called by its full path.
#[kernel(workgroup = 64)]
pub fn cross_crate(x: &[f32], y: &mut [f32], dy: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = gelu(x[i]);
        dy[i] = graphed::kernels::helpers::gelu_grad(x[i]);
    }
}

#[kernel(workgroup = 64)]
pub fn int_helpers(u: &[u32], v: &mut [u32], w: &mut [i32]) {
    let i = global_id().x;
    if i < v.len() {
        v[i] = bits::hash(u[i]);
        w[i] = bits::pick(u[i] % 2 == 0, u[i] as i32, 7, u[i] % 5);
    }
}

/// Reads two slices through one helper (two WGSL specialisations), writes through two.
#[kernel(workgroup = 64)]
pub fn slice_helpers(a: &[f32], b: &[f32], y: &mut [f32], z: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        let s = slices::at(a, i) + slices::at(b, i + 1);
        slices::put(y, i, s);
        let v = slices::axpy_at(z, a, 2.0, i);
        y[i] += v;
    }
}

#[kernel(workgroup = 64)]
pub fn blur(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        y[i] = slices::stencil3(x, i);
    }
}

/// Shares `stencil3` with `blur`: `r = x - blur(x)`.
#[kernel(workgroup = 64)]
pub fn blur_residual(x: &[f32], r: &mut [f32]) {
    let i = global_id().x;
    if i < r.len() {
        r[i] = x[i] - slices::stencil3(x, i);
    }
}

/// Per row `i`: `y[5i..5i+4] = rev_scaled(x[4i..4i+4], s)`, `y[5i+4] = fold(..)`;
/// `z[4i..4i+3] = prefix(c[3i..3i+3])` and `z[4i+3]` the caller's `c[3i+1]`, read after the
/// call (arrays are passed as copies).
#[kernel(workgroup = 64)]
pub fn array_values(s: f32, x: &[f32], c: &[u32], y: &mut [f32], z: &mut [u32]) {
    let i = global_id().x;
    if 4 * i < z.len() {
        let a = [x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]];
        let r = arr::rev_scaled(a, s);
        for k in 0u32..4u32 {
            y[5 * i + k] = r[k];
        }
        y[5 * i + 4] = arr::fold(a, s);
        let q = [c[3 * i], c[3 * i + 1], c[3 * i + 2]];
        let p = arr::prefix(q);
        for k in 0u32..3u32 {
            z[4 * i + k] = p[k];
        }
        z[4 * i + 3] = q[1];
    }
}

/// A helper indexing past the end of the kernel's slice: a fault on the host.
#[kernel(workgroup = 64)]
pub fn helper_out_of_bounds(x: &[f32], y: &mut [f32]) {
    let i = global_id().x;
    if i < y.len() {
        let v = slices::axpy_at(y, x, 1.0, i + 1);
        y[i] = v;
    }
}

fn all_kernels() -> Vec<&'static KernelDef> {
    vec![
        &scalar_helpers::DEF,
        &nested_helpers::DEF,
        &cross_crate::DEF,
        &int_helpers::DEF,
        &slice_helpers::DEF,
        &blur::DEF,
        &blur_residual::DEF,
        &helper_out_of_bounds::DEF,
        &array_values::DEF,
    ]
}

// ------------------------------------------------------------------------------ checks

/// `got` against `want`: bitwise on the host, within `TOL` elsewhere; poison never matches.
fn assert_f32(dev: &Device, got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    let exact = dev.kind() == BackendKind::Host;
    let bad: Vec<String> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| {
            if g.to_bits() == POISON_F32.to_bits() {
                return true;
            }
            if exact {
                g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan())
            } else {
                (*g - *w).abs() > TOL * w.abs().max(1.0)
            }
        })
        .map(|(i, (g, w))| format!("[{i}] got {g:e}, want {w:e}"))
        .take(6)
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: elements differ:\n  {}",
        bad.join("\n  ")
    );
}

fn poisoned<T: graphed::Element>(dev: &Device, n: usize, v: T) -> Buffer<T> {
    dev.upload(&vec![v; n]).unwrap()
}

#[test]
fn helpers_with_scalar_parameters() {
    let mut r = rng("helpers_with_scalar_parameters");
    on_every_backend(|dev| {
        for &n in SIZES {
            let x = floats(&mut r, n, -20.0, 20.0);
            let slope: f32 = r.random_range(0.01..0.5);
            let xb = dev.upload(&x).unwrap();
            let mut yb = poisoned(dev, n, POISON_F32);
            scalar_helpers::launch(dev, Grid::threads(n), &xb, slope, &mut yb).unwrap();
            let want: Vec<f32> = x
                .iter()
                .map(|&v| act::leaky(v, slope) + act::softplus(v) + act::unit(v))
                .collect();
            assert_f32(dev, &yb.to_host().unwrap(), &want, &format!("n={n}"));
        }
    });
}

#[test]
fn rust_forms_compute_the_formulas() {
    // The reference of the other tests is the helpers' Rust forms: check them against f64.
    let mut r = rng("rust_forms_compute_the_formulas");
    for x in floats(&mut r, 200, -20.0, 20.0) {
        let xd = x as f64;
        let sp = if x > 15.0 { xd } else { (1.0 + xd.exp()).ln() };
        assert!(
            (act::softplus(x) as f64 - sp).abs() < 1e-5 * sp.max(1.0),
            "softplus({x})"
        );
        assert_eq!(act::leaky(x, 0.1), if x > 0.0 { x } else { 0.1 * x });
        assert_eq!(act::unit(x), x.clamp(0.0, 1.0));
        let sg = 1.0 / (1.0 + (-xd).exp());
        let sm = (sp * 0.5 + sg - 0.5).clamp(0.0, 1.0);
        assert!((mix::smooth(x) as f64 - sm).abs() < 1e-5, "smooth({x})");
    }
    let u = 0x1234_5678u32;
    let mut h = u.wrapping_mul(0x9e37_79b9);
    h ^= h >> 16;
    assert_eq!(bits::hash(u), h.wrapping_mul(0x85eb_ca6b));
    assert_eq!(bits::pick(true, 3, 7, 4), 3 + 6);
    assert_eq!(bits::pick(false, 3, 7, 0), 4);
    let x = [1.0f32, 2.0, 3.0];
    assert_eq!(slices::stencil3(&x, 0), (2.0 + 2.0) * 0.25);
    assert_eq!(slices::stencil3(&x, 2), (2.0 + 6.0) * 0.25);
    let mut y = [10.0f32, 20.0, 30.0];
    assert_eq!(slices::axpy_at(&mut y, &x, 2.0, 1), 24.0);
    assert_eq!(y, [10.0, 24.0, 30.0]);
    slices::put(&mut y, 7, 1.0);
    assert_eq!(y, [10.0, 24.0, 30.0]);
}

#[test]
fn rust_form_panics_with_the_fault_out_of_bounds() {
    let x = [1.0f32; 2];
    let mut y = [0.0f32; 2];
    let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        slices::axpy_at(&mut y, &x, 1.0, 2)
    }))
    .unwrap_err();
    let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("index 2 is out of bounds") && msg.contains("of length 2"),
        "{msg}"
    );
}

#[test]
fn helpers_calling_helpers_across_modules_and_crates() {
    let mut r = rng("helpers_calling_helpers_across_modules_and_crates");
    on_every_backend(|dev| {
        for &n in SIZES {
            let x = floats(&mut r, n, -6.0, 6.0);
            let kind: u32 = r.random_range(0..5);
            let xb = dev.upload(&x).unwrap();
            let mut yb = poisoned(dev, n, POISON_F32);
            nested_helpers::launch(dev, Grid::threads(n), &xb, kind, &mut yb).unwrap();
            let want: Vec<f32> = x.iter().map(|&v| mix::smooth2(v, kind)).collect();
            assert_f32(
                dev,
                &yb.to_host().unwrap(),
                &want,
                &format!("n={n} kind={kind}"),
            );
        }
    });
}

#[test]
fn kernel_calls_helpers_of_graphed_kernels() {
    let mut r = rng("kernel_calls_helpers_of_graphed_kernels");
    on_every_backend(|dev| {
        for &n in SIZES {
            let x = floats(&mut r, n, -5.0, 5.0);
            let xb = dev.upload(&x).unwrap();
            let mut yb = poisoned(dev, n, POISON_F32);
            let mut db = poisoned(dev, n, POISON_F32);
            cross_crate::launch(dev, Grid::threads(n), &xb, &mut yb, &mut db).unwrap();
            let y: Vec<f32> = x.iter().map(|&v| gelu(v)).collect();
            let d: Vec<f32> = x
                .iter()
                .map(|&v| graphed::kernels::helpers::gelu_grad(v))
                .collect();
            assert_f32(dev, &yb.to_host().unwrap(), &y, &format!("gelu n={n}"));
            assert_f32(dev, &db.to_host().unwrap(), &d, &format!("gelu_grad n={n}"));
        }
    });
}

#[test]
fn helpers_with_integer_and_bool_parameters() {
    let mut r = rng("helpers_with_integer_and_bool_parameters");
    on_every_backend(|dev| {
        for &n in SIZES {
            let u: Vec<u32> = (0..n).map(|_| r.random()).collect();
            let ub = dev.upload(&u).unwrap();
            let mut vb = poisoned(dev, n, POISON_U32);
            let mut wb = poisoned(dev, n, POISON_U32 as i32);
            int_helpers::launch(dev, Grid::threads(n), &ub, &mut vb, &mut wb).unwrap();
            let v: Vec<u32> = u.iter().map(|&x| bits::hash(x)).collect();
            let w: Vec<i32> = u
                .iter()
                .map(|&x| bits::pick(x % 2 == 0, x as i32, 7, x % 5))
                .collect();
            assert_eq!(vb.to_host().unwrap(), v, "hash n={n}");
            assert_eq!(wb.to_host().unwrap(), w, "pick n={n}");
        }
    });
}

#[test]
fn helpers_read_and_write_slices() {
    let mut r = rng("helpers_read_and_write_slices");
    on_every_backend(|dev| {
        for &n in SIZES {
            let a = floats(&mut r, n, -1.0, 1.0);
            let b = floats(&mut r, n, -1.0, 1.0);
            let z0 = floats(&mut r, n, -1.0, 1.0);
            let ab = dev.upload(&a).unwrap();
            let bb = dev.upload(&b).unwrap();
            let mut yb = poisoned(dev, n, POISON_F32);
            let mut zb = dev.upload(&z0).unwrap();
            slice_helpers::launch(dev, Grid::threads(n), &ab, &bb, &mut yb, &mut zb).unwrap();
            let mut y = vec![0.0f32; n];
            let mut z = z0.clone();
            for i in 0..n as u32 {
                let s = slices::at(&a, i) + slices::at(&b, i + 1);
                slices::put(&mut y, i, s);
                let v = slices::axpy_at(&mut z, &a, 2.0, i);
                y[i as usize] += v;
            }
            assert_f32(dev, &yb.to_host().unwrap(), &y, &format!("y n={n}"));
            assert_f32(dev, &zb.to_host().unwrap(), &z, &format!("z n={n}"));
        }
    });
}

#[test]
fn two_kernels_share_a_stencil_helper() {
    let mut r = rng("two_kernels_share_a_stencil_helper");
    on_every_backend(|dev| {
        for &n in SIZES {
            let x = floats(&mut r, n, -4.0, 4.0);
            let xb = dev.upload(&x).unwrap();
            let mut yb = poisoned(dev, n, POISON_F32);
            let mut rb = poisoned(dev, n, POISON_F32);
            blur::launch(dev, Grid::threads(n), &xb, &mut yb).unwrap();
            blur_residual::launch(dev, Grid::threads(n), &xb, &mut rb).unwrap();
            let at = |i: usize| x.get(i).copied().unwrap_or(0.0);
            let y: Vec<f32> = (0..n)
                .map(|i| {
                    let left = if i > 0 { at(i - 1) } else { 0.0 };
                    (left + 2.0 * at(i) + at(i + 1)) * 0.25
                })
                .collect();
            let res: Vec<f32> = (0..n).map(|i| x[i] - y[i]).collect();
            assert_f32(dev, &yb.to_host().unwrap(), &y, &format!("blur n={n}"));
            assert_f32(
                dev,
                &rb.to_host().unwrap(),
                &res,
                &format!("residual n={n}"),
            );
        }
    });
}

#[test]
fn helper_out_of_bounds_is_a_fault_naming_the_kernel_and_slice() {
    let dev = Device::open(BackendKind::Host).unwrap();
    let x = dev.upload(&[1.0f32; 8]).unwrap();
    let mut y = dev.upload(&[0.0f32; 8]).unwrap();
    let err = helper_out_of_bounds::launch(&dev, Grid::threads(8), &x, &mut y).unwrap_err();
    match &err {
        graphed::Error::Fault(f) => {
            assert_eq!(f.kernel, "helper_out_of_bounds");
            assert_eq!(f.kind, graphed::FaultKind::OutOfBounds { index: 8, len: 8 });
            assert!(f.target == "x" || f.target == "y", "{f:?}");
        }
        other => panic!("expected a fault, got {other:?}"),
    }
}

#[test]
fn wgsl_slice_helpers_are_specialised_per_binding() {
    // `at` is called on `a` and `b`: two functions, each indexing its own binding.
    let w = slice_helpers::WGSL;
    let ats = w.matches("// `#[device]` at\n").count();
    assert_eq!(ats, 2, "{w}");
    assert!(
        w.contains("a_p[x_off + ") && w.contains("b_p[x_off + "),
        "{w}"
    );
    // One definition per helper in CUDA C, however many bindings.
    assert_eq!(
        slice_helpers::CUDA.matches("// `#[device]` at\n").count(),
        1
    );
}

#[test]
fn helpers_take_and_return_arrays_by_value() {
    let mut r = rng("helpers_take_and_return_arrays_by_value");
    on_every_backend(|dev| {
        for &n in SIZES {
            let x = floats(&mut r, 4 * n, -4.0, 4.0);
            let c: Vec<u32> = (0..3 * n).map(|_| r.random_range(0..1u32 << 20)).collect();
            let s: f32 = r.random_range(0.25..2.0);
            let (xb, cb) = (dev.upload(&x).unwrap(), dev.upload(&c).unwrap());
            let mut yb = poisoned(dev, 5 * n, POISON_F32);
            let mut zb = poisoned(dev, 4 * n, POISON_U32);
            array_values::launch(dev, Grid::threads(n), s, &xb, &cb, &mut yb, &mut zb).unwrap();
            let (mut want_y, mut want_z) = (Vec::new(), Vec::new());
            for i in 0..n {
                let a: [f32; 4] = x[4 * i..4 * i + 4].try_into().unwrap();
                want_y.extend(arr::rev_scaled(a, s));
                want_y.push(arr::fold(a, s));
                let q: [u32; 3] = c[3 * i..3 * i + 3].try_into().unwrap();
                want_z.extend(arr::prefix(q));
                want_z.push(q[1]);
            }
            // The Rust forms themselves, against the formulas.
            let a = [1.0f32, 2.0, 3.0, 4.0];
            assert_eq!(arr::rev_scaled(a, 0.5), [2.0, 1.5, 1.0, 0.5]);
            assert_eq!(arr::fold(a, 1.0), 4.0 + 6.0 + 6.0 + 4.0);
            assert_eq!(arr::prefix([3, 4, 5]), [3, 7, 12]);
            assert_f32(dev, &yb.to_host().unwrap(), &want_y, &format!("y, n={n}"));
            assert_eq!(zb.to_host().unwrap(), want_z, "{}: z, n={n}", dev.kind());
        }
    });
}

/// Arrays passed and returned at constant indices stay in registers on CUDA: the PTX of
/// `array_values` has no local (stack) memory.
#[test]
fn array_values_stay_in_registers_on_cuda() {
    if !common::nvrtc_enabled() {
        return;
    }
    let ptx = graphed::nvrtc::compile(&array_values::DEF, "compute_80").unwrap();
    assert!(!ptx.contains(".local"), "PTX uses local memory:\n{ptx}");
    assert!(
        ptx.contains("ld.global") && ptx.contains("st.global"),
        "{ptx}"
    );
}

#[test]
fn every_kernel_wgsl_is_valid_per_naga() {
    common::assert_wgsl_valid(&all_kernels());
}

#[test]
fn every_kernel_cuda_compiles_with_nvrtc() {
    common::assert_cuda_compiles(&all_kernels());
}
