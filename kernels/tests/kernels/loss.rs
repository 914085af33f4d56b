//! Losses: softmax cross-entropy with its fused gradient, and mean squared error.

use graphed_kernels::loss;
use rand::Rng;

use crate::common::{assert_close, floats, on_every_backend, poisoned, rng, SIZES};

/// Exponentials and logarithms of a few ulp, summed in the documented order.
const TOL: f64 = 1e-5;

/// Loss and gradient in f64; a label `>= classes` is ignored.
pub(crate) fn xent_reference(
    z: &[f32],
    labels: &[u32],
    classes: usize,
    gscale: f64,
) -> (f64, Vec<f64>) {
    let rows = labels.len();
    let mut loss = 0.0;
    let mut grad = vec![0.0; z.len()];
    for r in 0..rows {
        let row = &z[r * classes..(r + 1) * classes];
        let mx = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let sum: f64 = row.iter().map(|&v| (v as f64 - mx).exp()).sum();
        let lab = labels[r] as usize;
        if lab >= classes {
            continue;
        }
        loss += sum.ln() - (row[lab] as f64 - mx);
        for j in 0..classes {
            let p = (row[j] as f64 - mx).exp() / sum;
            grad[r * classes + j] = (p - if j == lab { 1.0 } else { 0.0 }) * gscale;
        }
    }
    (loss / rows as f64, grad)
}

/// Which cross-entropy kernel [`xent_kernel`] launches.
#[derive(Clone, Copy)]
enum Kind {
    Narrow,
    Wide,
}

/// Launches the `kind` cross-entropy kernel on `groups` workgroups with `(lscale, gscale)`,
/// its outputs poisoned first; returns the sum of the workgroups' losses and the gradient.
fn xent_kernel(
    dev: &graphed_runtime::Device,
    kind: Kind,
    groups: u32,
    classes: usize,
    (lscale, gscale): (f32, f32),
    logits: &graphed_runtime::Buffer<f32>,
    labels: &graphed_runtime::Buffer<u32>,
) -> (f32, Vec<f32>) {
    let (mut out, mut dz) = (poisoned(dev, groups as usize), poisoned(dev, logits.len()));
    let (grid, c) = (graphed_runtime::Grid::workgroups(groups), classes as u32);
    match kind {
        Kind::Narrow => loss::softmax_xent_narrow::launch(
            dev, grid, c, lscale, gscale, logits, labels, &mut dz, &mut out,
        ),
        Kind::Wide => loss::softmax_xent_wide::launch(
            dev, grid, c, lscale, gscale, logits, labels, &mut dz, &mut out,
        ),
    }
    .unwrap();
    let total: f32 = out.to_host().unwrap().iter().sum();
    (total, dz.to_host().unwrap())
}

#[test]
fn softmax_cross_entropy_and_its_gradient() {
    let mut r = rng("softmax_cross_entropy_and_its_gradient");
    // Narrow rows (one invocation per row; past 4096 rows through the workspace) and wide
    // rows (one workgroup per row).
    // Up to 4096 rows of at most 12 classes go through the workgroup tile in chunks of 256
    // rows (512×10 is MLP-M's loss; 257×12 and 300×12 end a chunk short; 256×13 is past it).
    let shapes = [
        (1, 1),
        (7, 10),
        (512, 10),
        (257, 12),
        (300, 12),
        (256, 13),
        (65, 63),
        (63, 65),
        (1000, 7),
        (3, 1023),
        (4097, 3),
        (40, 70),
        (1, 4097),
    ];
    on_every_backend(|dev| {
        for &(rows, classes) in &shapes {
            let z = floats(&mut r, rows * classes, -5.0, 5.0);
            let mut labels: Vec<u32> = (0..rows)
                .map(|_| r.random_range(0..classes as u32))
                .collect();
            if rows > 5 {
                labels[3] = classes as u32; // an ignored row
            }
            let logits = dev.upload(&z).unwrap();
            let lab = dev.upload(&labels).unwrap();
            let mut out = poisoned(dev, 1);
            let mut dz = poisoned(dev, rows * classes);
            let mut ws = poisoned(dev, loss::xent_workspace_len(rows, classes).max(1));
            loss::softmax_cross_entropy(dev, &logits, &lab, &mut out, &mut dz, &mut ws).unwrap();
            let (want, want_grad) = xent_reference(&z, &labels, classes, 1.0 / rows as f64);
            let case = format!("xent {rows}×{classes}");
            // A result of this case, downloaded, against its reference.
            let check = |what: &str, got: &graphed::Buffer<f32>, want: &[f64]| {
                assert_close(&format!("{case}{what}"), &got.to_host().unwrap(), want, TOL)
            };
            check("", &out, &[want]);
            check(" gradient", &dz, &want_grad);

            // A custom gradient scale (micro-batches) leaves the loss alone.
            let (mut out, mut dz) = (poisoned(dev, 1), poisoned(dev, rows * classes));
            let s = 0.25 / rows as f32;
            loss::softmax_cross_entropy_scaled(dev, &logits, &lab, &mut out, &mut dz, &mut ws, s)
                .unwrap();
            let (_, want_grad) = xent_reference(&z, &labels, classes, s as f64);
            check(" scaled", &dz, &want_grad);
            check(" scaled loss", &out, &[want]);
        }
        // Fewer workgroups than wide rows: each takes rows w, w + G, … and writes a partial
        // sum (the op launches one per row up to 256 rows, then adds the partials).
        let (rows, classes) = (7, 100);
        let z = floats(&mut r, rows * classes, -5.0, 5.0);
        let labels: Vec<u32> = (0..rows)
            .map(|_| r.random_range(0..classes as u32))
            .collect();
        let (logits, lab) = (dev.upload(&z).unwrap(), dev.upload(&labels).unwrap());
        let scales = (1.0 / rows as f32, 1.0 / rows as f32);
        let (total, dz) = xent_kernel(dev, Kind::Wide, 3, classes, scales, &logits, &lab);
        let (want, want_grad) = xent_reference(&z, &labels, classes, 1.0 / rows as f64);
        assert_close("wide rows over 3 workgroups", &[total], &[want], TOL);
        assert_close(
            "wide rows over 3 workgroups, gradient",
            &dz,
            &want_grad,
            TOL,
        );

        // Large logits do not overflow.
        let logits = dev.upload(&[1000.0f32, 0.0, -1000.0]).unwrap();
        let lab = dev.upload(&[1u32]).unwrap();
        let (mut out, mut dz, mut ws) = (poisoned(dev, 1), poisoned(dev, 3), poisoned(dev, 1));
        loss::softmax_cross_entropy(dev, &logits, &lab, &mut out, &mut dz, &mut ws).unwrap();
        assert_eq!(out.to_host().unwrap(), vec![1000.0]);
        assert_eq!(dz.to_host().unwrap(), vec![1.0, -1.0, 0.0]);
    });
}

/// The staged narrow path (at most 12 classes: chunks of 256 rows through the workgroup
/// tile, workgroup `w` of `G` taking chunks `w, w + G, …`) gives bitwise the same gradients
/// on one workgroup and on three or seven (each row's gradient does not depend on who
/// computes it; a wrong chunk stride would leave poison or compute a row twice), a loss
/// within rounding of the f64 reference on each, and gradients within rounding of it.
#[test]
fn the_staged_cross_entropy_gives_the_same_gradients_on_any_grid() {
    let mut r = rng("the_staged_cross_entropy_gives_the_same_gradients_on_any_grid");
    on_every_backend(|dev| {
        for (rows, classes) in [
            (512usize, 10usize),
            (300, 12),
            (5, 1),
            (1000, 3),
            (4096, 10),
        ] {
            let z = floats(&mut r, rows * classes, -8.0, 8.0);
            let mut labels: Vec<u32> = (0..rows)
                .map(|_| r.random_range(0..classes as u32))
                .collect();
            labels[rows / 2] = classes as u32; // an ignored row
            let (logits, lab) = (dev.upload(&z).unwrap(), dev.upload(&labels).unwrap());
            let (lscale, gscale) = (1.0 / rows as f32, 0.37 / rows as f32);
            let run = |groups: u32| {
                xent_kernel(
                    dev,
                    Kind::Narrow,
                    groups,
                    classes,
                    (lscale, gscale),
                    &logits,
                    &lab,
                )
            };
            let case = format!("{} {rows}×{classes}", dev.kind());
            let bits = |g: &[f32]| g.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            let (want, want_grad) = xent_reference(&z, &labels, classes, gscale as f64);
            let (one, g1) = run(1);
            assert_close(&format!("{case} one workgroup"), &[one], &[want], TOL);
            assert_close(&format!("{case} gradient"), &g1, &want_grad, TOL);
            for groups in [3, 7] {
                let (loss, g) = run(groups);
                assert_eq!(
                    bits(&g1),
                    bits(&g),
                    "{case}: gradients on {groups} workgroups"
                );
                assert_close(
                    &format!("{case} {groups} workgroups"),
                    &[loss],
                    &[want],
                    TOL,
                );
            }
        }
    });
}

#[test]
fn mean_squared_error_forward_and_backward() {
    let mut r = rng("mean_squared_error_forward_and_backward");
    let sizes: Vec<usize> = SIZES.iter().copied().chain([20_000]).collect();
    on_every_backend(|dev| {
        for &n in &sizes {
            let p = floats(&mut r, n, -1.0, 1.0);
            let y = floats(&mut r, n, -1.0, 1.0);
            let g0 = floats(&mut r, n, -1.0, 1.0);
            let pred = dev.upload(&p).unwrap();
            let target = dev.upload(&y).unwrap();
            let want = (0..n)
                .map(|i| (p[i] as f64 - y[i] as f64).powi(2))
                .sum::<f64>()
                / n as f64;
            let want_grad: Vec<f64> = (0..n)
                .map(|i| 2.0 * (p[i] as f64 - y[i] as f64) / n as f64)
                .collect();
            let mut ws = poisoned(dev, loss::mse_workspace_len(n).max(1));

            let mut out = poisoned(dev, 1);
            loss::mse(dev, &pred, &target, &mut out, &mut ws).unwrap();
            assert_close(&format!("mse n={n}"), &out.to_host().unwrap(), &[want], TOL);

            let mut out = poisoned(dev, 1);
            let mut grad = poisoned(dev, n);
            loss::mse_with_grad(dev, &pred, &target, &mut out, &mut grad, &mut ws, false).unwrap();
            assert_close(
                &format!("mse_with_grad n={n}"),
                &out.to_host().unwrap(),
                &[want],
                TOL,
            );
            assert_close(
                &format!("mse_with_grad grad n={n}"),
                &grad.to_host().unwrap(),
                &want_grad,
                TOL,
            );

            let mut grad = dev.upload(&g0).unwrap();
            loss::mse_with_grad(dev, &pred, &target, &mut out, &mut grad, &mut ws, true).unwrap();
            let acc: Vec<f64> = (0..n).map(|i| want_grad[i] + g0[i] as f64).collect();
            assert_close(
                &format!("mse_with_grad accumulate n={n}"),
                &grad.to_host().unwrap(),
                &acc,
                TOL,
            );

            let mut grad = poisoned(dev, n);
            loss::mse_backward(dev, &pred, &target, &mut grad, false).unwrap();
            assert_close(
                &format!("mse_backward n={n}"),
                &grad.to_host().unwrap(),
                &want_grad,
                TOL,
            );
        }
    });
}

/// Shapes that take every loss kernel: narrow rows in one workgroup and through the
/// workspace, wide rows one workgroup each (fewer and more rows than workgroups), and MSE
/// in one pass and in two.
const VARIANT_SHAPES: &[(usize, usize)] = &[(7, 10), (4097, 3), (3, 1023), (300, 70), (1, 4097)];

/// `(loss, dlogits)` bits of every variant shape's cross-entropy, then `(loss, grad)` bits of
/// MSEs of 1000 and 20,000 elements, on `dev` with the library's subgroups `sub`.
fn loss_bits(
    dev: &graphed_runtime::Device,
    sub: bool,
    inputs: &[(Vec<f32>, Vec<u32>)],
) -> Vec<Vec<u32>> {
    dev.set_library_subgroups(sub);
    let bits = |v: Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
    let mut out = Vec::new();
    for (&(rows, classes), (z, labels)) in VARIANT_SHAPES.iter().zip(inputs) {
        let logits = dev.upload(z).unwrap();
        let lab = dev.upload(labels).unwrap();
        let mut loss_out = poisoned(dev, 1);
        let mut dz = poisoned(dev, rows * classes);
        let mut ws = poisoned(dev, loss::xent_workspace_len(rows, classes).max(1));
        loss::softmax_cross_entropy(dev, &logits, &lab, &mut loss_out, &mut dz, &mut ws).unwrap();
        out.push(bits(loss_out.to_host().unwrap()));
        out.push(bits(dz.to_host().unwrap()));
    }
    for (p, _) in &inputs[VARIANT_SHAPES.len()..] {
        let pred = dev.upload(p).unwrap();
        let rev: Vec<f32> = p.iter().rev().map(|v| v * 0.5).collect();
        let target = dev.upload(&rev).unwrap();
        let mut loss_out = poisoned(dev, 1);
        let mut grad = poisoned(dev, p.len());
        let mut ws = poisoned(dev, loss::mse_workspace_len(p.len()).max(1));
        loss::mse_with_grad(
            dev,
            &pred,
            &target,
            &mut loss_out,
            &mut grad,
            &mut ws,
            false,
        )
        .unwrap();
        out.push(bits(loss_out.to_host().unwrap()));
        out.push(bits(grad.to_host().unwrap()));
    }
    dev.set_library_subgroups(true);
    out
}

fn loss_inputs(r: &mut impl Rng) -> Vec<(Vec<f32>, Vec<u32>)> {
    let mut v: Vec<(Vec<f32>, Vec<u32>)> = VARIANT_SHAPES
        .iter()
        .map(|&(rows, classes)| {
            let z = floats(r, rows * classes, -5.0, 5.0);
            let mut labels: Vec<u32> = (0..rows)
                .map(|_| r.random_range(0..classes as u32))
                .collect();
            if rows > 5 {
                labels[3] = classes as u32; // an ignored row
            }
            (z, labels)
        })
        .collect();
    for n in [1000, 20_000] {
        v.push((floats(r, n, -1.0, 1.0), Vec::new()));
    }
    v
}

/// With subgroups and without, every loss gives the same bits (the `_sg` kernels keep the
/// workgroup tree's order; their results against the f64 oracle are the tests above, which
/// run them wherever the device has subgroups). On the host every subgroup size from 4 to
/// 64 gives the bits of the tree too.
#[test]
fn loss_subgroup_variants_equal_the_workgroup_tree_bitwise() {
    let mut r = rng("loss_subgroup_variants_equal_the_workgroup_tree_bitwise");
    on_every_backend(|dev| {
        let inputs = loss_inputs(&mut r);
        let tree = loss_bits(dev, false, &inputs);
        let sg = loss_bits(dev, true, &inputs);
        for (i, (a, b)) in tree.iter().zip(&sg).enumerate() {
            assert_eq!(
                a,
                b,
                "{}: output {i}: subgroup and workgroup variants differ",
                dev.adapter()
            );
        }
    });
    let inputs = loss_inputs(&mut r);
    let tree = loss_bits(&graphed_runtime::Device::host(), false, &inputs);
    for size in [4u32, 8, 16, 32, 64] {
        let host = graphed_runtime::Device::host_with_subgroup_size(size).unwrap();
        assert_eq!(host.library_subgroups(), Some(size));
        let sg = loss_bits(&host, true, &inputs);
        for (i, (a, b)) in tree.iter().zip(&sg).enumerate() {
            assert_eq!(
                a, b,
                "host, subgroups of {size}: output {i} differs from the tree"
            );
        }
    }
}

/// The wide-row kernels launched directly, tree beside subgroups, on every backend with
/// subgroups: the library routes wide rows to the tree on wgpu (measured faster there), so
/// the dispatch test above no longer reaches the subgroup variant on wgpu.
#[test]
fn wide_row_kernels_agree_bitwise_when_launched_directly() {
    use graphed_runtime::Grid;
    let mut r = rng("wide_row_kernels_agree_bitwise_when_launched_directly");
    on_every_backend(|dev| {
        if dev.subgroup_size().is_none_or(|s| 256 % s != 0) {
            return;
        }
        for (rows, classes) in [(3usize, 1023usize), (300, 70), (1, 4097)] {
            let z: Vec<f32> = (0..rows * classes)
                .map(|_| r.random_range(-4.0..4.0))
                .collect();
            let labels: Vec<u32> = (0..rows)
                .map(|_| r.random_range(0..classes as u32))
                .collect();
            let (logits, lab) = (dev.upload(&z).unwrap(), dev.upload(&labels).unwrap());
            let groups = rows.clamp(1, 256) as u32;
            let run = |sg: bool| {
                let mut dz = poisoned(dev, rows * classes);
                let mut part = poisoned(dev, groups as usize);
                let (c, ls, gs) = (classes as u32, 1.0 / rows as f32, 0.5f32);
                let grid = Grid::workgroups(groups);
                if sg {
                    loss::softmax_xent_wide_sg::launch(
                        dev, grid, c, ls, gs, &logits, &lab, &mut dz, &mut part,
                    )
                } else {
                    loss::softmax_xent_wide::launch(
                        dev, grid, c, ls, gs, &logits, &lab, &mut dz, &mut part,
                    )
                }
                .unwrap();
                let bits = |v: Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
                (bits(dz.to_host().unwrap()), bits(part.to_host().unwrap()))
            };
            let (tree, sg) = (run(false), run(true));
            assert!(
                tree.0.iter().all(|&b| f32::from_bits(b).is_finite()),
                "{rows}x{classes}: a gradient was not written"
            );
            assert_eq!(
                tree,
                sg,
                "{}: {rows}x{classes}: wide-row variants differ",
                dev.adapter()
            );
        }
    });
}
