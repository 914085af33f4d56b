//! Reductions over a whole buffer (one and two passes) and per row.

use graphed_kernels::reduce::{self, Reduce};
use graphed_runtime::Buffer;

use crate::common::{assert_close, floats, on_every_backend, poisoned, rng, SIZES};

/// Sums in the documented tree order stay within a few roundings of the f64 sum.
const TOL: f64 = 1e-5;

const OPS: [Reduce; 5] = [
    Reduce::Sum,
    Reduce::Mean,
    Reduce::Max,
    Reduce::SumSq,
    Reduce::L2,
];

/// `out` against `want`: maxima exactly, everything else within [`TOL`].
fn check(op: Reduce, case: &str, out: &Buffer<f32>, want: &[f64]) {
    let tol = if op == Reduce::Max { 0.0 } else { TOL };
    assert_close(case, &out.to_host().unwrap(), want, tol);
}

#[test]
fn whole_buffer_one_and_two_passes() {
    let mut r = rng("whole_buffer_one_and_two_passes");
    // Past 16384 elements a reduction takes two passes through the workspace.
    let sizes: Vec<usize> = SIZES
        .iter()
        .copied()
        .chain([16384, 16385, 100_003])
        .collect();
    on_every_backend(|dev| {
        for &n in &sizes {
            // Offset from zero so sums do not cancel (the relative error stays meaningful).
            let xs = floats(&mut r, n, -0.5, 1.5);
            let x = dev.upload(&xs).unwrap();
            let mut ws = poisoned(dev, reduce::workspace_len(n).max(1));
            for op in OPS {
                let mut out = poisoned(dev, 1);
                reduce::reduce(dev, op, &x, &mut out, &mut ws).unwrap();
                check(op, &format!("{op:?} n={n}"), &out, &[op.eval_f64(&xs)]);
            }
        }
        // The named functions run the same reduction.
        let x = dev.upload(&[3.0f32, -4.0]).unwrap();
        let mut out = poisoned(dev, 1);
        let mut ws = poisoned(dev, 1);
        reduce::l2_norm(dev, &x, &mut out, &mut ws).unwrap();
        assert_eq!(out.to_host().unwrap(), vec![5.0]);
        reduce::sum(dev, &x, &mut out, &mut ws).unwrap();
        assert_eq!(out.to_host().unwrap(), vec![-1.0]);
        reduce::mean(dev, &x, &mut out, &mut ws).unwrap();
        assert_eq!(out.to_host().unwrap(), vec![-0.5]);
        reduce::max(dev, &x, &mut out, &mut ws).unwrap();
        assert_eq!(out.to_host().unwrap(), vec![3.0]);
        reduce::sum_sq(dev, &x, &mut out, &mut ws).unwrap();
        assert_eq!(out.to_host().unwrap(), vec![25.0]);
    });
}

#[test]
fn a_large_reduction_needs_its_workspace() {
    on_every_backend(|dev| {
        let n = 20_000;
        let x = dev.upload(&vec![1.0f32; n]).unwrap();
        let mut out = poisoned(dev, 1);
        let mut ws = poisoned(dev, 1);
        let e = reduce::sum(dev, &x, &mut out, &mut ws).unwrap_err();
        assert!(
            e.to_string()
                .contains("`ws` has 1 elements, needs at least 5"),
            "{e}"
        );
    });
}

#[test]
fn per_row() {
    let mut r = rng("per_row");
    on_every_backend(|dev| {
        // Every op on a few shapes; sum and max (the two accumulations) on the rest.
        let all = &OPS[..];
        let two = &[Reduce::Sum, Reduce::Max][..];
        let cases = [
            (1, 1, all),
            (63, 65, all),
            (1, 4097, all),
            (3, 1023, all),
            (5, 0, all),
            (7, 1, two),
            (65, 7, two),
            (70, 3, two),
        ];
        for &(rows, cols, ops) in &cases {
            let xs = floats(&mut r, rows * cols, -0.5, 1.5);
            let x = dev.upload(&xs).unwrap();
            for &op in ops {
                let mut out = poisoned(dev, rows);
                reduce::reduce_rows(dev, op, &x, cols, &mut out).unwrap();
                let want: Vec<f64> = (0..rows)
                    .map(|i| {
                        let row = &xs[i * cols..(i + 1) * cols];
                        if op == Reduce::Mean && cols == 0 {
                            0.0
                        } else {
                            op.eval_f64(row)
                        }
                    })
                    .collect();
                check(op, &format!("rows {op:?} {rows}×{cols}"), &out, &want);
            }
        }
    });
}

/// With subgroups and without, every reduction gives the same bits (the subgroup variants
/// keep the workgroup tree's order); where a device has none, both runs take the tree.
#[test]
fn subgroup_variants_equal_the_workgroup_tree_bitwise() {
    let mut r = rng("subgroup_variants_equal_the_workgroup_tree_bitwise");
    on_every_backend(|dev| {
        eprintln!(
            "note: {}: library subgroups {:?}",
            dev.adapter(),
            dev.library_subgroups()
        );
        let run = |sub: bool, xs: &[f32], rows: usize, cols: usize, op: Reduce| {
            dev.set_library_subgroups(sub);
            let x = dev.upload(xs).unwrap();
            let mut all = poisoned(dev, 1);
            let mut ws = poisoned(dev, reduce::workspace_len(xs.len()).max(1));
            reduce::reduce(dev, op, &x, &mut all, &mut ws).unwrap();
            let mut per_row = poisoned(dev, rows);
            reduce::reduce_rows(dev, op, &x, cols, &mut per_row).unwrap();
            dev.set_library_subgroups(true);
            let mut v = all.to_host().unwrap();
            v.extend(per_row.to_host().unwrap());
            v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>()
        };
        for &(rows, cols) in &[(1, 1), (3, 1023), (65, 7), (2, 20000), (1, 40000)] {
            let xs = floats(&mut r, rows * cols, -0.5, 1.5);
            for op in OPS {
                assert_eq!(
                    run(true, &xs, rows, cols, op),
                    run(false, &xs, rows, cols, op),
                    "{op:?} {rows}×{cols}: subgroup and workgroup variants differ"
                );
            }
        }
    });
}
