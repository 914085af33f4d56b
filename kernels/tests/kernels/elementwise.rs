//! Elementwise kernels: binary ops, scaling, activations forward and backward, bias + act.

use graphed_kernels::elementwise::{self as ew, Act};
use graphed_runtime::Buffer;
use rand::Rng;

use crate::common::{
    assert_close, assert_close_floor, floats, on_every_backend, poisoned, rng, SIZES,
};

/// Elementwise results are one or two roundings from the f64 reference; where terms of order 1
/// cancel (`a·x + b·y` near zero) the error is judged against a floor of 1 (RMS).
const TOL_ARITH: f64 = 1e-6;
/// Transcendental functions differ by a few ulp between backends' math libraries (WGSL allows
/// an absolute error of 2⁻²¹ for `log` near 1), so their outputs are judged against
/// `max(‖ref‖, FLOOR·√n)`.
const TOL_TRANSCENDENTAL: f64 = 1e-5;
const FLOOR: f64 = 0.1;

/// Inputs in the domain of `act` (positive for `log`), spread over its interesting range.
fn inputs(rng: &mut impl rand::Rng, act: Act, n: usize) -> Vec<f32> {
    match act {
        Act::Log => floats(rng, n, 0.01, 10.0),
        Act::Exp => floats(rng, n, -10.0, 10.0),
        _ => floats(rng, n, -6.0, 6.0),
    }
}

#[test]
fn binary_and_scaling_ops() {
    let mut r = rng("binary_and_scaling_ops");
    on_every_backend(|dev| {
        for &n in SIZES {
            let xs = floats(&mut r, n, -2.0, 2.0);
            let ys = floats(&mut r, n, -2.0, 2.0);
            let dzs = floats(&mut r, n, -1.0, 1.0);
            let (a, b) = (r.random_range(-3.0f32..3.0), r.random_range(-3.0f32..3.0));
            let x = dev.upload(&xs).unwrap();
            let y = dev.upload(&ys).unwrap();
            let dz = dev.upload(&dzs).unwrap();
            let (a64, b64) = (a as f64, b as f64);
            // The reference of element `i` from `(x, y, dz)` there.
            let want = |f: &dyn Fn(f64, f64, f64) -> f64| -> Vec<f64> {
                (0..n)
                    .map(|i| f(xs[i] as f64, ys[i] as f64, dzs[i] as f64))
                    .collect()
            };
            let check = |case: &str, got: &Buffer<f32>, want: &[f64], tol: f64| {
                let got = got.to_host().unwrap();
                assert_close_floor(&format!("{case} n={n}"), &got, want, tol, 1.0);
            };

            let mut z = poisoned(dev, n);
            ew::add(dev, &x, &y, &mut z).unwrap();
            check("add", &z, &want(&|x, y, _| x + y), TOL_ARITH);

            let mut z = poisoned(dev, n);
            ew::axpby(dev, a, &x, b, &y, &mut z).unwrap();
            check("axpby", &z, &want(&|x, y, _| a64 * x + b64 * y), TOL_ARITH);

            let mut z = poisoned(dev, n);
            ew::mul(dev, &x, &y, &mut z).unwrap();
            check("mul", &z, &want(&|x, y, _| x * y), TOL_ARITH);

            let mut z = poisoned(dev, n);
            ew::scale(dev, a, &x, &mut z).unwrap();
            check("scale", &z, &want(&|x, _, _| a64 * x), TOL_ARITH);

            let mut z = dev.upload(&xs).unwrap();
            ew::scale_in_place(dev, a, &mut z).unwrap();
            check("scale_in_place", &z, &want(&|x, _, _| a64 * x), TOL_ARITH);

            let mut z = dev.upload(&ys).unwrap();
            ew::axpy(dev, a, &x, &mut z).unwrap();
            check("axpy", &z, &want(&|x, y, _| a64 * x + y), TOL_ARITH);

            let (mut dx, mut dy) = (poisoned(dev, n), poisoned(dev, n));
            ew::add_backward(dev, &x, &mut dx, &mut dy).unwrap();
            check("add_backward dx", &dx, &want(&|x, _, _| x), 0.0);
            check("add_backward dy", &dy, &want(&|x, _, _| x), 0.0);

            let (mut dx, mut dy) = (poisoned(dev, n), poisoned(dev, n));
            ew::mul_backward(dev, &x, &y, &dz, &mut dx, &mut dy).unwrap();
            check("mul_backward dx", &dx, &want(&|_, y, dz| dz * y), TOL_ARITH);
            check("mul_backward dy", &dy, &want(&|x, _, dz| dz * x), TOL_ARITH);

            let mut z = poisoned(dev, n);
            ew::fill(dev, &mut z, a).unwrap();
            assert!(z.to_host().unwrap().iter().all(|v| *v == a), "fill n={n}");
        }
    });
}

#[test]
fn activations_forward_and_backward() {
    let mut r = rng("activations_forward_and_backward");
    on_every_backend(|dev| {
        for act in Act::ALL {
            for &n in SIZES {
                let xs = inputs(&mut r, act, n);
                let dys = floats(&mut r, n, -1.0, 1.0);
                let x = dev.upload(&xs).unwrap();
                let dy = dev.upload(&dys).unwrap();
                let mut y = poisoned(dev, n);
                ew::unary(dev, act, &x, &mut y).unwrap();
                let want: Vec<f64> = xs.iter().map(|&v| act.eval_f64(v as f64)).collect();
                assert_close_floor(
                    &format!("{act:?} n={n}"),
                    &y.to_host().unwrap(),
                    &want,
                    TOL_TRANSCENDENTAL,
                    FLOOR,
                );

                let mut dx = poisoned(dev, n);
                ew::unary_backward(dev, act, &x, &dy, &mut dx).unwrap();
                let want: Vec<f64> = (0..n)
                    .map(|i| dys[i] as f64 * act.derivative_f64(xs[i] as f64))
                    .collect();
                assert_close_floor(
                    &format!("{act:?}′ n={n}"),
                    &dx.to_host().unwrap(),
                    &want,
                    TOL_TRANSCENDENTAL,
                    FLOOR,
                );
            }
        }
        // The named wrappers launch the same kernels.
        let xs = vec![-1.0f32, 0.5, 2.0];
        let x = dev.upload(&xs).unwrap();
        let mut y = poisoned(dev, 3);
        ew::relu(dev, &x, &mut y).unwrap();
        assert_eq!(y.to_host().unwrap(), vec![0.0, 0.5, 2.0]);
        // Large arguments stay finite where the function is.
        let big = dev.upload(&[-1e4f32, -100.0, 100.0, 1e4]).unwrap();
        for act in [Act::Tanh, Act::Gelu, Act::Sigmoid] {
            let mut y = poisoned(dev, 4);
            ew::unary(dev, act, &big, &mut y).unwrap();
            let want: Vec<f64> = [-1e4f64, -100.0, 100.0, 1e4]
                .iter()
                .map(|&v| act.eval_f64(v))
                .collect();
            assert_close(
                &format!("{act:?} at large arguments"),
                &y.to_host().unwrap(),
                &want,
                1e-6,
            );
        }
    });
}

#[test]
fn bias_act_forward_and_backward() {
    let mut r = rng("bias_act_forward_and_backward");
    on_every_backend(|dev| {
        for act in Act::ALL {
            for &(rows, cols) in &[(1, 1), (7, 63), (65, 7), (3, 1000), (1023, 5)] {
                let n = rows * cols;
                let xs = inputs(&mut r, act, n);
                let bs = floats(&mut r, cols, 0.0, 0.5);
                let dys = floats(&mut r, n, -1.0, 1.0);
                let db0 = floats(&mut r, cols, -1.0, 1.0);
                let x = dev.upload(&xs).unwrap();
                let b = dev.upload(&bs).unwrap();
                let dy = dev.upload(&dys).unwrap();
                let z = |i: usize| xs[i] as f64 + bs[i % cols] as f64;

                let mut y = poisoned(dev, n);
                ew::bias_act(dev, act, &x, &b, &mut y).unwrap();
                let want: Vec<f64> = (0..n).map(|i| act.eval_f64(z(i))).collect();
                let case = format!("bias_act {act:?} {rows}×{cols}");
                assert_close_floor(
                    &case,
                    &y.to_host().unwrap(),
                    &want,
                    TOL_TRANSCENDENTAL,
                    FLOOR,
                );

                for accumulate in [false, true] {
                    let mut dx = poisoned(dev, n);
                    let mut db = dev.upload(&db0).unwrap();
                    ew::bias_act_backward(dev, act, &x, &b, &dy, &mut dx, &mut db, accumulate)
                        .unwrap();
                    let wdx: Vec<f64> = (0..n)
                        .map(|i| dys[i] as f64 * act.derivative_f64(z(i)))
                        .collect();
                    let wdb: Vec<f64> = (0..cols)
                        .map(|c| {
                            let s: f64 = (0..rows).map(|r| wdx[r * cols + c]).sum();
                            s + if accumulate { db0[c] as f64 } else { 0.0 }
                        })
                        .collect();
                    let case =
                        format!("bias_act_backward {act:?} {rows}×{cols} accumulate={accumulate}");
                    assert_close_floor(
                        &format!("{case} dx"),
                        &dx.to_host().unwrap(),
                        &wdx,
                        TOL_TRANSCENDENTAL,
                        FLOOR,
                    );
                    // Sums over rows of terms of order 1 may cancel: floor 1.
                    assert_close_floor(
                        &format!("{case} db"),
                        &db.to_host().unwrap(),
                        &wdb,
                        TOL_TRANSCENDENTAL,
                        1.0,
                    );
                }
            }
        }
    });
}

#[test]
fn shape_mismatches_are_errors() {
    on_every_backend(|dev| {
        let x = dev.upload(&[1.0f32; 4]).unwrap();
        let mut y = poisoned(dev, 3);
        let e = ew::relu(dev, &x, &mut y).unwrap_err();
        assert!(
            e.to_string().contains("`x` has 4 elements, expected 3"),
            "{e}"
        );
        let b = dev.upload(&[1.0f32; 3]).unwrap();
        let mut y = poisoned(dev, 4);
        let e = ew::bias_act(dev, Act::Relu, &x, &b, &mut y).unwrap_err();
        assert!(e.to_string().contains("whole rows"), "{e}");
    });
}
