//! The dependency graph of a plan: which ops must finish before which, from their read and
//! write sets, so a lowering may run independent ops concurrently and never reorders
//! conflicting ones.
//!
//! Two ops conflict when one writes memory the other reads or writes: views of one allocation
//! whose 32-bit words overlap (a 16-bit view covers the words its halves sit in, since a
//! half is stored by rewriting its word). Memory a liveness arena shares between workspaces is
//! one allocation, so its reuse orders the last use of one buffer before the first write of
//! the next (write-after-read, write-after-write). Every vendor-library call (a cuBLAS product,
//! an NCCL collective) also conflicts with every other: the products share one workspace, and
//! collectives must run in the same order on every rank.
//!
//! The edges kept are the transitive reduction of the conflicts: an edge `i → j` is dropped
//! where a path of other edges already orders `i` before `j`.

use crate::plan::Op;

/// One memory access of an op: words `lo..hi` of allocation `buf`.
#[derive(Clone, Copy, Debug)]
struct Access {
    buf: u64,
    lo: usize,
    hi: usize,
    write: bool,
}

/// The allocation id the library calls all "write": no allocation has id 0.
const LIBRARY: u64 = 0;

fn access(view: &crate::buffer::RawView, write: bool) -> Option<Access> {
    if view.len == 0 {
        return None;
    }
    let (lo, len) = view.word_span();
    Some(Access {
        buf: view.buf.id,
        lo,
        hi: lo + len,
        write,
    })
}

/// What `op` reads and writes.
fn accesses(op: &Op) -> Vec<Access> {
    let library = Access {
        buf: LIBRARY,
        lo: 0,
        hi: 1,
        write: true,
    };
    match op {
        Op::Launch { bindings, .. } => bindings
            .iter()
            .filter_map(|b| access(&b.view, b.write))
            .collect(),
        Op::Copy { src, dst } => [access(src, false), access(dst, true)]
            .into_iter()
            .flatten()
            .collect(),
        // `C` is read too when the product accumulates; a write conflicts with either. A
        // call that uses the library's shared workspace is ordered after every other such
        // call; one whose algorithm needs none (a cuBLASLt plan without workspace) only by
        // its operands, so independent products may run side by side.
        Op::Sgemm {
            a,
            b,
            c,
            v,
            shape,
            workspace,
            ..
        } => {
            let vector = v.as_ref().and_then(|v| {
                access(
                    v,
                    shape.fused.is_some_and(crate::blas::Fused::writes_vector),
                )
            });
            [access(a, false), access(b, false), access(c, true), vector]
                .into_iter()
                .flatten()
                .chain(workspace.then_some(library))
                .collect()
        }
        #[cfg(feature = "nccl")]
        Op::AllReduce(a) => access(&a.view, true).into_iter().chain([library]).collect(),
    }
}

/// Dependency edges of a plan's ops, transitively reduced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Dag {
    /// The direct predecessors of each op, ascending.
    preds: Vec<Vec<usize>>,
}

/// A set of op indices as bits.
#[derive(Clone)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn has(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 == 1
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn union(&mut self, other: &Bits) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }
}

impl Dag {
    /// The dependency graph of `ops` (in plan order: an edge always points forwards).
    pub(crate) fn of(ops: &[Op]) -> Dag {
        let n = ops.len();
        // Earlier accesses by allocation: (op, access).
        let mut by_buf: std::collections::HashMap<u64, Vec<(usize, Access)>> =
            std::collections::HashMap::new();
        // Everything each op is ordered after (itself excluded).
        let mut reach: Vec<Bits> = Vec::with_capacity(n);
        let mut preds = Vec::with_capacity(n);
        for (j, op) in ops.iter().enumerate() {
            let mine = accesses(op);
            let mut conflicts: Vec<usize> = Vec::new();
            for a in &mine {
                for (i, b) in by_buf.get(&a.buf).into_iter().flatten() {
                    if (a.write || b.write) && a.lo < b.hi && b.lo < a.hi {
                        conflicts.push(*i);
                    }
                }
            }
            conflicts.sort_unstable();
            conflicts.dedup();
            // Latest first: an earlier conflict already reached through a later one is implied.
            let mut mine_reach = Bits::new(n);
            let mut kept = Vec::new();
            for &i in conflicts.iter().rev() {
                if mine_reach.has(i) {
                    continue;
                }
                kept.push(i);
                mine_reach.set(i);
                mine_reach.union(&reach[i]);
            }
            kept.reverse();
            preds.push(kept);
            reach.push(mine_reach);
            for a in mine {
                by_buf.entry(a.buf).or_default().push((j, a));
            }
        }
        Dag { preds }
    }

    /// A graph of `n` ops in a chain (each after the one before): the order of a single queue.
    pub(crate) fn chain(n: usize) -> Dag {
        Dag {
            preds: (0..n)
                .map(|j| if j == 0 { vec![] } else { vec![j - 1] })
                .collect(),
        }
    }

    /// The direct predecessors of op `j`, ascending.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn preds(&self, j: usize) -> &[usize] {
        &self.preds[j]
    }

    /// Every edge (from, to), by target then source.
    pub(crate) fn edges(&self) -> Vec<(usize, usize)> {
        self.preds
            .iter()
            .enumerate()
            .flat_map(|(j, p)| p.iter().map(move |&i| (i, j)))
            .collect()
    }

    /// Whether every edge of `other` (over the same ops) is a path in this graph: a lowering
    /// built from this graph keeps every order `other` needs.
    pub(crate) fn orders_all_of(&self, other: &Dag) -> bool {
        let n = self.preds.len();
        if other.preds.len() != n {
            return false;
        }
        let mut reach: Vec<Bits> = Vec::with_capacity(n);
        for j in 0..n {
            let mut r = Bits::new(n);
            for &i in &self.preds[j] {
                r.set(i);
                r.union(&reach[i]);
            }
            if other.preds[j].iter().any(|&i| !r.has(i)) {
                return false;
            }
            reach.push(r);
        }
        true
    }

    /// Drops every edge into op `j` (a mutation, for showing that tests catch a missing edge).
    #[cfg(feature = "testing")]
    pub(crate) fn without_edges_into(mut self, j: usize) -> Dag {
        if let Some(p) = self.preds.get_mut(j) {
            p.clear();
        }
        self
    }

    /// A topological order drawn at random from `seed` (xorshift; the state advances): at
    /// each step, one of the ops whose predecessors all ran.
    #[cfg(feature = "testing")]
    pub(crate) fn random_order(&self, seed: &mut u64) -> Vec<usize> {
        let n = self.preds.len();
        let mut waiting: Vec<usize> = self.preds.iter().map(Vec::len).collect();
        let mut succs = vec![Vec::new(); n];
        for (i, j) in self.edges() {
            succs[i].push(j);
        }
        let mut ready: Vec<usize> = (0..n).filter(|&j| waiting[j] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while !ready.is_empty() {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            let op = ready.swap_remove((*seed % ready.len() as u64) as usize);
            order.push(op);
            for &s in &succs[op] {
                waiting[s] -= 1;
                if waiting[s] == 0 {
                    ready.push(s);
                }
            }
        }
        order
    }
}

/// For each op, whether its one incoming edge is programmatic under `mode` (see
/// [`Programmatic`](crate::Programmatic)): the op and its one predecessor both run a kernel
/// (one graph node each), and for [`Programmatic::Chains`](crate::Programmatic::Chains) the
/// predecessor has no other successor, and both leave at least half of the `multiprocessors`
/// free (at most `multiprocessors / 2` workgroups each). A plan lowered as one queue (`dag`
/// none) has no programmatic edges.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn programmatic_links(
    ops: &[Op],
    dag: Option<&Dag>,
    mode: crate::Programmatic,
    multiprocessors: u32,
) -> Vec<bool> {
    use crate::Programmatic;
    let mut links = vec![false; ops.len()];
    let (Some(dag), false) = (dag, mode == Programmatic::Off) else {
        return links;
    };
    let mut successors = vec![0usize; ops.len()];
    for j in 0..ops.len() {
        for &i in dag.preds(j) {
            successors[i] += 1;
        }
    }
    let half_free = |op: &Op| match op {
        Op::Launch { grid, .. } => {
            2 * grid.iter().map(|&g| u64::from(g)).product::<u64>() <= u64::from(multiprocessors)
        }
        _ => false,
    };
    for (j, op) in ops.iter().enumerate() {
        let [i] = *dag.preds(j) else { continue };
        links[j] = runs_kernel(op)
            && runs_kernel(&ops[i])
            && (mode == Programmatic::On
                || (successors[i] == 1 && half_free(&ops[i]) && half_free(op)));
    }
    links
}

/// Whether `op` is one kernel node: a launch with workgroups (a zero grid is no node).
fn runs_kernel(op: &Op) -> bool {
    matches!(op, Op::Launch { grid, .. } if !grid.contains(&0))
}

#[cfg(test)]
mod tests {
    use super::Dag;
    use crate::buffer::RawView;
    use crate::plan::{Binding, Op};
    use crate::{DType, Device};

    fn view(of: &RawView, offset: usize, len: usize) -> RawView {
        RawView {
            offset,
            len,
            ..of.clone()
        }
    }

    fn whole(dev: &Device, n: usize) -> RawView {
        dev.upload(&vec![1u32; n]).expect("host upload").raw_view()
    }

    fn copy(src: &RawView, dst: &RawView) -> Op {
        Op::Copy {
            src: src.clone(),
            dst: dst.clone(),
        }
    }

    /// A 2×2×1 vendor product of `a`'s and `b`'s first two elements into all of `c`, using the
    /// shared workspace, with a fused epilogue and its vector when given.
    fn product(
        a: &RawView,
        b: &RawView,
        c: &RawView,
        fused: Option<(crate::blas::Fused, RawView)>,
    ) -> Op {
        Op::Sgemm {
            shape: crate::blas::GemmShape {
                m: 2,
                n: 2,
                k: 1,
                ta: false,
                tb: false,
                types: crate::blas::GemmTypes::F32,
                fused: fused.as_ref().map(|(f, _)| *f),
                vector: crate::dtype::DType::F32,
                tuned: false,
                one_pass: false,
            },
            args: 0,
            a: view(a, 0, 2),
            b: view(b, 0, 2),
            c: c.clone(),
            v: fused.map(|(_, v)| v),
            workspace: true,
        }
    }

    /// A fill launch writing `y` (reads nothing).
    fn fill(y: &RawView) -> Op {
        fill_on(y, [1, 1, 1])
    }

    /// A fill launch writing `y` over `grid` workgroups.
    fn fill_on(y: &RawView, grid: [u32; 3]) -> Op {
        Op::Launch {
            kernel: &crate::builtin::fill_u32::DEF,
            grid,
            args: 0,
            bindings: vec![Binding {
                view: y.clone(),
                write: true,
                word: 1,
            }],
        }
    }

    #[test]
    fn read_after_write_write_after_read_and_write_after_write_are_ordered() {
        let dev = Device::host();
        let (a, b, c) = (whole(&dev, 8), whole(&dev, 8), whole(&dev, 8));
        // 0: a → b; 1: b → c (reads what 0 wrote); 2: fills a (0 read it); 3: fills c (1 wrote it).
        let ops = [copy(&a, &b), copy(&b, &c), fill(&a), fill(&c)];
        let dag = Dag::of(&ops);
        assert_eq!(dag.edges(), vec![(0, 1), (0, 2), (1, 3)]);
        // Two reads of one buffer are not ordered.
        let ops = [copy(&a, &b), copy(&a, &c)];
        assert_eq!(Dag::of(&ops).edges(), vec![]);
    }

    #[test]
    fn disjoint_views_of_one_allocation_are_independent_and_overlapping_ones_are_not() {
        let dev = Device::host();
        let a = whole(&dev, 16);
        let src = whole(&dev, 16);
        let ops = [
            copy(&view(&src, 0, 4), &view(&a, 0, 8)),
            copy(&view(&src, 0, 4), &view(&a, 8, 8)),
            // Overlaps the first (words 4..12), not independent of either.
            copy(&view(&a, 4, 8), &view(&src, 8, 8)),
        ];
        assert_eq!(Dag::of(&ops).edges(), vec![(0, 2), (1, 2)]);
        // 16-bit views: halves 0..3 and 3..6 share word 1, so the two writes are ordered;
        // halves 0..2 and 2..4 sit in words 0 and 1 apart.
        let h = RawView {
            dtype: DType::F16,
            ..view(&a, 0, 0)
        };
        let ops = [fill(&view(&h, 0, 3)), fill(&view(&h, 3, 3))];
        assert_eq!(Dag::of(&ops).edges(), vec![(0, 1)]);
        let ops = [fill(&view(&h, 0, 2)), fill(&view(&h, 2, 2))];
        assert_eq!(Dag::of(&ops).edges(), vec![]);
        // An empty view touches nothing.
        let ops = [
            fill(&view(&a, 0, 8)),
            copy(&view(&a, 0, 0), &view(&src, 0, 0)),
        ];
        assert_eq!(Dag::of(&ops).edges(), vec![]);
    }

    #[test]
    fn arena_reuse_orders_the_last_use_of_one_workspace_before_the_next_write() {
        let dev = Device::host();
        let (x, y) = (whole(&dev, 8), whole(&dev, 8));
        // One arena: words 0..8 are workspace t1 (ops 0-1), then t2 (ops 2-3); words 8..16
        // are t3, live beside both.
        let arena = whole(&dev, 16);
        let (t1, t2, t3) = (view(&arena, 0, 8), view(&arena, 0, 8), view(&arena, 8, 8));
        let ops = [
            copy(&x, &t1), // 0: t1 = x
            copy(&t1, &y), // 1: y = t1
            copy(&x, &t3), // 2: t3 = x (independent of 0 and 1)
            fill(&t2),     // 3: t2 (t1's memory): after 1 read t1 (WAR) and 0 wrote it (WAW)
        ];
        let dag = Dag::of(&ops);
        // 0 → 3 is implied by 0 → 1 → 3: the reduction keeps only 1 → 3.
        assert_eq!(dag.edges(), vec![(0, 1), (1, 3)]);
        assert_eq!(dag.preds(2), &[] as &[usize]);
        // Without the arena (t2 its own allocation), 3 would depend on nothing.
        let own = whole(&dev, 8);
        let ops = [copy(&x, &t1), copy(&t1, &y), copy(&x, &t3), fill(&own)];
        assert_eq!(Dag::of(&ops).edges(), vec![(0, 1)]);
    }

    #[test]
    fn library_calls_are_ordered_among_themselves_and_reduction_keeps_reachability() {
        let dev = Device::host();
        let bufs: Vec<RawView> = (0..6).map(|_| whole(&dev, 4)).collect();
        let gemm = |a: &RawView, b: &RawView, c: &RawView| product(a, b, c, None);
        // Disjoint products still share cuBLAS's workspace: ordered.
        let ops = [
            gemm(&bufs[0], &bufs[1], &bufs[2]),
            gemm(&bufs[0], &bufs[1], &bufs[3]),
        ];
        assert_eq!(Dag::of(&ops).edges(), vec![(0, 1)]);
        // Calls whose algorithms need no workspace are ordered by their operands only: the
        // disjoint pair runs side by side, beside a workspace user too, while one reading
        // what another writes still follows it.
        let own = |op: Op| match op {
            Op::Sgemm {
                shape,
                args,
                a,
                b,
                c,
                v,
                ..
            } => Op::Sgemm {
                shape,
                args,
                a,
                b,
                c,
                v,
                workspace: false,
            },
            other => other,
        };
        let ops = [
            own(gemm(&bufs[0], &bufs[1], &bufs[2])),
            own(gemm(&bufs[0], &bufs[1], &bufs[3])),
            gemm(&bufs[0], &bufs[1], &bufs[4]),
            own(gemm(&bufs[2], &bufs[1], &bufs[5])),
        ];
        assert_eq!(Dag::of(&ops).edges(), vec![(0, 3)]);
        // A chain orders everything a DAG does, not the other way round.
        let ops = [
            copy(&bufs[0], &bufs[1]),
            copy(&bufs[0], &bufs[2]),
            copy(&bufs[1], &bufs[3]),
            copy(&bufs[2], &bufs[3]),
        ];
        let dag = Dag::of(&ops);
        assert_eq!(dag.edges(), vec![(0, 2), (1, 3), (2, 3)]);
        assert!(Dag::chain(4).orders_all_of(&dag));
        assert!(!dag.orders_all_of(&Dag::chain(4)));
        assert!(dag.orders_all_of(&dag));
    }

    /// A fused product's vector is an access like any operand: a bias gradient it writes
    /// orders a later reader after it, and a bias it reads orders it after the bias's writer
    /// and before the next one.
    #[test]
    fn a_fused_products_vector_orders_it() {
        use crate::blas::Fused;
        let dev = Device::host();
        let bufs: Vec<RawView> = (0..5).map(|_| whole(&dev, 4)).collect();
        let gemm = |fused: Fused, v: &RawView| {
            product(&bufs[0], &bufs[1], &bufs[2], Some((fused, view(v, 0, 2))))
        };
        // The gradient written (op 0) is then copied (op 1): an edge.
        let ops = [gemm(Fused::BiasGrad, &bufs[3]), copy(&bufs[3], &bufs[4])];
        assert_eq!(Dag::of(&ops).edges(), vec![(0, 1)]);
        // Reading a bias: after its fill, before its overwrite; two readers stay unordered.
        let ops = [
            fill(&bufs[3]),
            gemm(Fused::Bias, &bufs[3]),
            copy(&bufs[3], &bufs[4]),
            fill(&bufs[3]),
        ];
        assert_eq!(Dag::of(&ops).edges(), vec![(0, 1), (0, 2), (1, 3), (2, 3)]);
        // Without the vector the product would not follow the fill at all.
        let mut unfused = gemm(Fused::Bias, &bufs[3]);
        if let Op::Sgemm { v, shape, .. } = &mut unfused {
            *v = None;
            shape.fused = None;
        }
        assert_eq!(Dag::of(&[fill(&bufs[3]), unfused]).edges(), vec![]);
    }

    /// `Chains` makes an edge programmatic only on a link of a chain whose predecessor fits
    /// in one wave; `On` wherever a kernel follows exactly one kernel; `Off` and a serial
    /// lowering never. Copies and empty launches never take part.
    #[test]
    fn programmatic_edges_follow_the_mode() {
        use super::programmatic_links;
        use crate::Programmatic::{Chains, Off, On};
        let dev = Device::host();
        let (a, b, c, d) = (
            whole(&dev, 8),
            whole(&dev, 8),
            whole(&dev, 8),
            whole(&dev, 8),
        );
        let (a0, a1) = (view(&a, 0, 4), view(&a, 4, 4));
        let read = |op: Op, v: &RawView| match op {
            Op::Launch {
                kernel,
                grid,
                args,
                mut bindings,
            } => {
                bindings.push(Binding {
                    view: v.clone(),
                    write: false,
                    word: 2,
                });
                Op::Launch {
                    kernel,
                    grid,
                    args,
                    bindings,
                }
            }
            other => other,
        };
        let ops = vec![
            fill_on(&a0, [4, 1, 1]),            // 0
            read(fill_on(&b, [2, 2, 1]), &a0),  // 1: after 0, 0's only successor (4 workgroups)
            read(fill_on(&c, [200, 1, 1]), &b), // 2: after 1, but 2 itself has 200 workgroups
            read(fill_on(&d, [1, 1, 1]), &c),   // 3: after 2, which has 200 workgroups
            read(fill_on(&a1, [1, 1, 1]), &d),  // 4: after 3, which forks to 4 and 5
            read(fill_on(&b, [1, 1, 1]), &d),   // 5: after 3 (1 and 2 are reached through 3)
            copy(&a1, &c),                      // 6: a copy
            read(fill_on(&d, [0, 1, 1]), &c),   // 7: an empty launch after the copy
        ];
        let dag = Dag::of(&ops);
        assert_eq!(dag.preds(1), [0]);
        assert_eq!(dag.preds(2), [1]);
        assert_eq!(dag.preds(3), [2]);
        assert_eq!(dag.preds(4), [3]);
        let links = |mode, sms| programmatic_links(&ops, Some(&dag), mode, sms);
        let chains = links(Chains, 8);
        assert_eq!(
            &chains[..5],
            [false, true, false, false, false],
            "{chains:?}"
        );
        assert!(!chains[6] && !chains[7], "{chains:?}");
        // With 7 multiprocessors, 4 workgroups leave fewer than half free.
        assert_eq!(&links(Chains, 7)[..5], [false; 5]);
        let on = links(On, 4);
        assert_eq!(&on[..5], [false, true, true, true, true], "{on:?}");
        assert!(!on[6] && !on[7], "{on:?}");
        assert!(links(Off, 4).iter().all(|&l| !l));
        assert!(programmatic_links(&ops, None, On, 4).iter().all(|&l| !l));
    }
}
