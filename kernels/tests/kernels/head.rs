//! The fused classifier head (`head::linear_cross_entropy`): logits, mean softmax
//! cross-entropy and gradient, and the gated input gradient in one launch, against f64.

use graphed_kernels::elementwise::Act;
use graphed_kernels::head::{self, HeadOut, HEAD_CLASSES, HEAD_ROWS};
use graphed_runtime::{Buffer, Device, Error};
use rand::Rng;

use crate::common::{assert_close, assert_close_floor, floats, on_every_backend, poisoned, rng};
use crate::loss::xent_reference;

/// Sums of `k` products, then exponentials and logarithms of a few ulp.
const TOL: f64 = 1e-5;

/// `(logits, loss, dlogits, dh)` in f64 for `h` (`rows × k`), `w` (`classes × k`), `b`, the
/// gate `act′(aux)` when given and gradient scale `gscale`.
fn reference(
    h: &[f32],
    w: &[f32],
    b: &[f32],
    labels: &[u32],
    gate: Option<(Act, &[f32])>,
    gscale: f64,
) -> (Vec<f64>, f64, Vec<f64>, Vec<f64>) {
    let (rows, classes) = (labels.len(), b.len());
    let k = w.len() / classes;
    let mut z = vec![0.0; rows * classes];
    for r in 0..rows {
        for c in 0..classes {
            let dot: f64 = (0..k)
                .map(|j| h[r * k + j] as f64 * w[c * k + j] as f64)
                .sum();
            z[r * classes + c] = dot + b[c] as f64;
        }
    }
    // The loss reference takes f32 logits: round ours (the kernel's are f32 too).
    let z32: Vec<f32> = z.iter().map(|&v| v as f32).collect();
    let (loss, dz) = xent_reference(&z32, labels, classes, gscale);
    let mut dh = vec![0.0; rows * k];
    for r in 0..rows {
        for j in 0..k {
            let mut s: f64 = (0..classes)
                .map(|c| dz[r * classes + c] * w[c * k + j] as f64)
                .sum();
            if let Some((act, aux)) = gate {
                s *= act.derivative_f64(aux[r * k + j] as f64);
            }
            dh[r * k + j] = s;
        }
    }
    (z, loss, dz, dh)
}

/// Runs the head on `dev` with every output poisoned; returns `(logits, loss, dlogits, dh)`.
#[allow(clippy::type_complexity)]
fn run(
    dev: &Device,
    (h, w, b): (&Buffer<f32>, &Buffer<f32>, &Buffer<f32>),
    labels: &Buffer<u32>,
    gate: Option<(Act, &Buffer<f32>)>,
    gscale: f32,
) -> graphed_runtime::Result<(Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>)> {
    let (rows, classes) = (labels.len(), b.len());
    let k = w.len() / classes.max(1);
    let mut logits = poisoned(dev, rows * classes);
    let mut dlogits = poisoned(dev, rows * classes);
    let mut dh = poisoned(dev, rows * k);
    let mut loss = poisoned(dev, 1);
    let mut ws = poisoned(dev, head::head_workspace_len(rows).max(1));
    let out = HeadOut {
        logits: &mut logits,
        dlogits: &mut dlogits,
        dh: &mut dh,
        loss: &mut loss,
        ws: &mut ws,
    };
    head::linear_cross_entropy(dev, h, w, b, labels, gate, out, gscale)?;
    Ok((
        logits.to_host()?,
        loss.to_host()?,
        dlogits.to_host()?,
        dh.to_host()?,
    ))
}

#[test]
fn the_head_equals_its_three_steps_in_f64() {
    let mut r = rng("the_head_equals_its_three_steps_in_f64");
    // (rows, k, classes): one of each; a partial block; MLP-S's and MLP-M's heads; 12 classes
    // over two blocks, ragged; k below the 32 lanes and past the 256 columns; more blocks
    // than the launch's 1024 workgroups (each takes two or more).
    let shapes = [
        (1, 1, 1),
        (5, 7, 3),
        (64, 256, 10),
        (512, 1024, 10),
        (13, 300, 12),
        (9, 31, 12),
        (8200, 3, 2),
    ];
    let gates = [None, Some(Act::Relu), Some(Act::Tanh)];
    on_every_backend(|dev| {
        for (i, &(rows, k, classes)) in shapes.iter().enumerate() {
            let gate_act = gates[i % gates.len()];
            let hv = floats(&mut r, rows * k, -1.0, 1.0);
            let wv = floats(&mut r, classes * k, -1.0, 1.0);
            let bv = floats(&mut r, classes, -0.5, 0.5);
            let auxv = floats(&mut r, rows * k, -2.0, 2.0);
            let mut labels: Vec<u32> = (0..rows)
                .map(|_| r.random_range(0..classes as u32))
                .collect();
            if rows > 4 {
                labels[2] = classes as u32; // an ignored row
            }
            let gscale = 0.5 / rows as f32;
            let (h, w, b) = (
                dev.upload(&hv).unwrap(),
                dev.upload(&wv).unwrap(),
                dev.upload(&bv).unwrap(),
            );
            let (aux, lab) = (dev.upload(&auxv).unwrap(), dev.upload(&labels).unwrap());
            let gate = gate_act.map(|a| (a, &aux));
            let (z, loss, dz, dh) = run(dev, (&h, &w, &b), &lab, gate, gscale).unwrap();
            let (wz, wloss, wdz, wdh) = reference(
                &hv,
                &wv,
                &bv,
                &labels,
                gate_act.map(|a| (a, &auxv[..])),
                gscale as f64,
            );
            let case = format!(
                "head {rows}×{k}→{classes} gate {gate_act:?} on {:?}",
                dev.kind()
            );
            // Logits and the input gradient cross zero: judged against their RMS magnitude.
            assert_close_floor(&format!("{case} logits"), &z, &wz, TOL, 0.1);
            assert_close(&format!("{case} loss"), &loss, &[wloss], TOL);
            assert_close(&format!("{case} dlogits"), &dz, &wdz, TOL);
            let floor = 0.1 * gscale as f64;
            assert_close_floor(&format!("{case} dh"), &dh, &wdh, TOL, floor);
            if rows > 4 {
                let row = &dz[2 * classes..3 * classes];
                assert!(row.iter().all(|&v| v == 0.0), "{case}: ignored row {row:?}");
            }
        }
    });
}

#[test]
fn the_head_repeats_itself_bitwise() {
    // Two launches over the same inputs give the same bits (an order fixed by the shapes).
    let mut r = rng("the_head_repeats_itself_bitwise");
    on_every_backend(|dev| {
        let (rows, k, classes) = (37, 200, 10);
        let h = dev.upload(&floats(&mut r, rows * k, -1.0, 1.0)).unwrap();
        let w = dev.upload(&floats(&mut r, classes * k, -1.0, 1.0)).unwrap();
        let b = dev.upload(&floats(&mut r, classes, -1.0, 1.0)).unwrap();
        let labels: Vec<u32> = (0..rows).map(|_| r.random_range(0..10)).collect();
        let lab = dev.upload(&labels).unwrap();
        let gate = Some((Act::Relu, &h));
        let one = run(dev, (&h, &w, &b), &lab, gate, 1.0 / rows as f32).unwrap();
        let two = run(dev, (&h, &w, &b), &lab, gate, 1.0 / rows as f32).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&one.0), bits(&two.0), "logits");
        assert_eq!(bits(&one.1), bits(&two.1), "loss");
        assert_eq!(bits(&one.2), bits(&two.2), "dlogits");
        assert_eq!(bits(&one.3), bits(&two.3), "dh");
    });
}

#[test]
fn the_head_refuses_bad_shapes() {
    let dev = Device::host();
    let up = |n: usize| dev.upload(&vec![0.5f32; n]).unwrap();
    let lab = dev.upload(&[0u32; 4]).unwrap();
    let (h, w, b) = (up(4 * 8), up(3 * 8), up(3));
    fn expect<T: std::fmt::Debug>(res: graphed_runtime::Result<T>, needle: &str) {
        match res {
            Err(Error::Shape(m)) => assert!(m.contains(needle), "{m:?} lacks {needle:?}"),
            other => panic!("expected a shape error naming {needle:?}, got {other:?}"),
        }
    }
    let wide = HEAD_CLASSES + 1;
    let (w13, b13) = (up(wide * 8), up(wide));
    expect(run(&dev, (&h, &w13, &b13), &lab, None, 0.25), "13 classes");
    expect(
        run(&dev, (&h, &up(3 * 8 + 1), &b), &lab, None, 0.25),
        "not 3 rows",
    );
    expect(run(&dev, (&up(4 * 8 - 1), &w, &b), &lab, None, 0.25), "`h`");
    let aux = up(5);
    expect(
        run(&dev, (&h, &w, &b), &lab, Some((Act::Relu, &aux)), 0.25),
        "`gate`",
    );
    let none = dev.upload::<u32>(&[]).unwrap();
    expect(run(&dev, (&h, &w, &b), &none, None, 0.25), "0 rows");
    // A batch past one workgroup needs its workspace.
    let rows = HEAD_ROWS + 1;
    let lab = dev.upload(&vec![1u32; rows]).unwrap();
    let h = up(rows * 8);
    let (mut z, mut dz, mut dh, mut loss, mut ws) =
        (up(rows * 3), up(rows * 3), up(rows * 8), up(1), up(1));
    let out = HeadOut {
        logits: &mut z,
        dlogits: &mut dz,
        dh: &mut dh,
        loss: &mut loss,
        ws: &mut ws,
    };
    expect(
        head::linear_cross_entropy(&dev, &h, &w, &b, &lab, None, out, 0.1),
        "`ws`",
    );
}

#[test]
fn the_head_indexes_its_arrays_by_constants_only() {
    // The per-class sums, the staged loads and the weight column stay in registers: the class loops are
    // unrolled, so every index of the two arrays is a literal.
    let (cuda, wgsl) = (head::linear_xent::CUDA, head::linear_xent::WGSL);
    crate::common::assert_array_indices_literal("linear_xent", cuda, wgsl, 4);
}
