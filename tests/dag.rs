//! Plans as graphs (issue 17): the dependency edges of a plan follow its ops' reads and writes
//! (liveness-shared workspaces included), the DOT dump shows them, and they are enough: the
//! host replays a plan in random orders the edges allow and stays bitwise equal to eager,
//! while dropping one needed edge is caught. On every backend, replay ≡ eager with the graph
//! lowering on and off.

mod common;

use common::steps::*;
use common::{bitwise_eq, floats, on_every_backend, rng};
use graphed::prelude::*;
use graphed::train::{Classifier, TrainStep};
use graphed::{Config, PlanOp};

/// Shuffled host replays for the length of a test, back to plan order when it ends (also
/// when it fails).
struct Shuffled;

impl Shuffled {
    fn on(seed: u64) -> Shuffled {
        graphed::__private::shuffle_host_order(Some(seed));
        Shuffled
    }
}

impl Drop for Shuffled {
    fn drop(&mut self) {
        graphed::__private::shuffle_host_order(None);
    }
}

/// Two layers from `x` through workspace `t1`, then two more through `t2`: `t1` is dead when
/// `t2` is first written, so liveness packing may give both one block of memory.
#[graphed]
fn two_chains(
    cx: &mut Step,
    #[state] w: &mut Buffer<f32>,
    x: &Input<f32>,
    bias: f32,
) -> Result<(Output<f32>, Output<f32>)> {
    let n = x.len();
    let mut t1 = cx.workspace::<f32>(n)?;
    let mut y1 = cx.output::<f32>(n)?;
    layer::launch(cx, n, x, w, bias, &mut t1)?;
    layer::launch(cx, n, &t1, w, bias, &mut y1)?;
    let mut t2 = cx.workspace::<f32>(n)?;
    let mut y2 = cx.output::<f32>(n)?;
    layer::launch(cx, n, x, w, bias, &mut t2)?;
    layer::launch(cx, n, &t2, w, bias, &mut y2)?;
    Ok((y1, y2))
}

/// The index of op `kernel`'s `nth` launch in `ops`.
fn launch_index(ops: &[PlanOp], kernel: &str, nth: usize) -> usize {
    ops.iter()
        .enumerate()
        .filter(|(_, o)| matches!(o, PlanOp::Launch { kernel: k, .. } if *k == kernel))
        .nth(nth)
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("no launch {nth} of {kernel}"))
}

#[test]
fn deep_step_edges_let_each_update_follow_only_its_layer_and_dot_shows_them() {
    let dev = Device::host();
    let mut r = rng("deep_step_edges");
    let n = 64;
    let mut w = dev.upload(&floats(&mut r, n * LAYERS, -1.0, 1.0)).unwrap();
    let mut step = DeepStep::new(&dev).unwrap();
    step.call(&mut w, &floats(&mut r, n, -1.0, 1.0)[..], 0.1, 0.2)
        .unwrap();
    let plan = step.plan().unwrap();
    let ops = plan.ops();
    let edges = plan.edges();
    assert!(edges.iter().all(|&(i, j)| i < j), "{edges:?}");
    for l in 0..LAYERS {
        let (layer_l, update_l) = (
            launch_index(&ops, "layer", l),
            launch_index(&ops, "update", l),
        );
        // update l reads the activations layer l wrote and overwrites the weights it read.
        let preds: Vec<usize> = edges
            .iter()
            .filter(|e| e.1 == update_l)
            .map(|e| e.0)
            .collect();
        assert_eq!(preds, vec![layer_l], "update {l}: {edges:?}");
        if l + 1 < LAYERS {
            let next = launch_index(&ops, "layer", l + 1);
            assert!(edges.contains(&(layer_l, next)), "layer {l} → {}", l + 1);
        }
    }
    // 10 updates hang off the forward chain: far fewer orderings than a single queue.
    let chain: Vec<(usize, usize)> = (1..ops.len()).map(|j| (j - 1, j)).collect();
    assert_ne!(edges, chain);
    let dot = plan.to_dot();
    let (l0, u0) = (
        launch_index(&ops, "layer", 0),
        launch_index(&ops, "update", 0),
    );
    assert!(
        dot.contains(&format!("op{l0} -> op{u0} [style=dashed")),
        "the DOT dump lacks the edge layer 0 → update 0:\n{dot}"
    );
    assert_eq!(
        dot.matches("style=dashed").count(),
        edges.len(),
        "one dashed line per edge"
    );

    // Lowered serially, the plan is a chain.
    let cfg = Config {
        concurrent_ops: false,
        ..Config::default()
    };
    let mut serial = DeepStep::with_config(&dev, cfg).unwrap();
    serial
        .call(&mut w, &floats(&mut r, n, -1.0, 1.0)[..], 0.1, 0.2)
        .unwrap();
    assert_eq!(serial.plan().unwrap().edges(), chain);
}

#[test]
fn a_shared_workspace_block_orders_its_last_reader_before_its_next_writer() {
    let dev = Device::host();
    let mut r = rng("arena_edges");
    let n = 96;
    let mut w = dev.upload(&floats(&mut r, n, -1.0, 1.0)).unwrap();
    let x = floats(&mut r, n, -1.0, 1.0);
    let mut packed = TwoChains::new(&dev).unwrap();
    packed.call(&mut w, &x[..], 0.3).unwrap();
    let plan = packed.plan().unwrap();
    let offset = |name: &str| {
        let b = plan.buffers().iter().find(|b| b.name == name).unwrap();
        b.arena_offset
    };
    let (t1, t2) = (offset("ws0"), offset("ws1"));
    assert!(
        t1.is_some() && t1 == t2,
        "t1 at {t1:?}, t2 at {t2:?}: expected one block"
    );
    // 0: t1 = f(x); 1: y1 = f(t1); 2: t2 = f(x) into t1's block, after 1 read it (WAR; the WAW
    // on 0 is implied); 3: y2 = f(t2).
    assert_eq!(plan.edges(), vec![(0, 1), (1, 2), (2, 3)]);

    let cfg = Config {
        pack_workspaces: false,
        ..Config::default()
    };
    let mut apart = TwoChains::with_config(&dev, cfg).unwrap();
    apart.call(&mut w, &x[..], 0.3).unwrap();
    // Separate allocations: two independent chains.
    assert_eq!(apart.plan().unwrap().edges(), vec![(0, 1), (2, 3)]);
}

/// Replays `steps` deep steps under shuffled orders and compares each with eager; returns how
/// many steps differed (outputs or weights).
fn shuffled_deep_steps(dev: &Device, seed: u64, steps: usize, drop_into: Option<usize>) -> usize {
    let mut r = rng(&format!("shuffled deep {seed}"));
    let n = 128;
    let w0 = floats(&mut r, n * LAYERS, -1.0, 1.0);
    let (mut w_rep, mut w_eag) = (dev.upload(&w0).unwrap(), dev.upload(&w0).unwrap());
    let mut rep = DeepStep::new(dev).unwrap();
    let mut eag = DeepStep::new(dev).unwrap();
    let _order = Shuffled::on(seed);
    if let Some(op) = drop_into {
        graphed::__private::drop_host_edges_into(op);
    }
    let mut differ = 0;
    for s in 0..steps {
        let x = floats(&mut r, n, -2.0, 2.0);
        let lr = 0.01 + s as f32 * 1e-3;
        let (y1, s1) = rep.call(&mut w_rep, &x[..], lr, 0.1).unwrap();
        let (y1, s1) = (y1.to_host().unwrap(), s1.to_host().unwrap());
        let (y2, s2) = eag.eager(&mut w_eag, &x[..], lr, 0.1).unwrap();
        let (y2, s2) = (y2.to_host().unwrap(), s2.to_host().unwrap());
        let same = bitwise_eq(&y1, &y2)
            && bitwise_eq(&s1, &s2)
            && bitwise_eq(&w_rep.to_host().unwrap(), &w_eag.to_host().unwrap());
        differ += usize::from(!same);
    }
    assert_eq!(rep.stats().recordings, 1);
    assert_eq!(rep.stats().replays as usize, steps);
    differ
}

#[test]
fn host_replay_in_random_orders_of_the_edges_equals_eager_bitwise() {
    let dev = Device::host();
    for seed in [1u64, 0x9e37_79b9, 0xdead_beef] {
        assert_eq!(
            shuffled_deep_steps(&dev, seed, 40, None),
            0,
            "seed {seed:#x}"
        );
    }
    // A training step: products, their weight and input gradients, AdamW.
    let _order = Shuffled::on(0x5eed);
    let sizes = [12, 16, 8, 5];
    let mut r = rng("shuffled training");
    let mut rep = Classifier::new(&dev, &sizes, 3).unwrap();
    let mut eag = rep.duplicate().unwrap();
    let (mut t_rep, mut t_eag) = (TrainStep::new(&dev).unwrap(), TrainStep::new(&dev).unwrap());
    for s in 0..30 {
        let x = floats(&mut r, 6 * sizes[0], -1.0, 1.0);
        let y: Vec<u32> = (0..6).map(|i| ((i * 7 + s) % sizes[3]) as u32).collect();
        let l1 = t_rep
            .call(&mut rep, &x[..], &y[..], 1e-2)
            .unwrap()
            .to_host()
            .unwrap();
        let l2 = t_eag
            .eager(&mut eag, &x[..], &y[..], 1e-2)
            .unwrap()
            .to_host()
            .unwrap();
        assert!(bitwise_eq(&l1, &l2), "step {s}: losses differ");
        assert!(
            bitwise_eq(
                &rep.params.to_host().unwrap(),
                &eag.params.to_host().unwrap()
            ),
            "step {s}: weights differ"
        );
    }
    let plan = t_rep.plan().unwrap();
    assert!(
        plan.edges().len() + 1 < plan.ops().len() || {
            // Some op is not ordered after the one before it: a real choice of orders.
            let e = plan.edges();
            (1..plan.ops().len()).any(|j| !e.contains(&(j - 1, j)))
        },
        "the training step's plan is a chain: the shuffle tested nothing"
    );
}

#[test]
fn dropping_an_edge_is_caught_by_the_shuffled_replay() {
    let dev = Device::host();
    // The deep step's op 21 copies the last activations into the output `y`; without its
    // edge from the last layer it may run first and return the previous step's activations.
    let mut r = rng("drop edge");
    let mut w = dev
        .upload(&floats(&mut r, 128 * LAYERS, -1.0, 1.0))
        .unwrap();
    let mut probe = DeepStep::new(&dev).unwrap();
    probe
        .call(&mut w, &floats(&mut r, 128, -1.0, 1.0)[..], 0.1, 0.1)
        .unwrap();
    let ops = probe.plan().unwrap().ops();
    let copy_y = ops.len() - 2;
    assert!(matches!(ops[copy_y], PlanOp::Copy { .. }), "{ops:?}");
    let differ = shuffled_deep_steps(&dev, 7, 40, Some(copy_y));
    assert!(
        differ > 0,
        "dropping the edges into op {copy_y} went unnoticed"
    );
}

#[test]
fn replay_equals_eager_with_the_graph_lowering_on_and_off() {
    on_every_backend(|dev| {
        for concurrent_ops in [true, false] {
            let mut r = rng(&format!("dag on/off {concurrent_ops}"));
            let n = 200;
            let w0 = floats(&mut r, n * LAYERS, -1.0, 1.0);
            let (mut w_rep, mut w_eag) = (dev.upload(&w0).unwrap(), dev.upload(&w0).unwrap());
            let cfg = Config {
                concurrent_ops,
                ..Config::default()
            };
            let mut rep = DeepStep::with_config(dev, cfg).unwrap();
            let mut eag = DeepStep::new(dev).unwrap();
            for s in 0..20 {
                let x = floats(&mut r, n, -2.0, 2.0);
                let (y1, s1) = rep.call(&mut w_rep, &x[..], 0.02, 0.1).unwrap();
                let (y1, s1) = (y1.to_host().unwrap(), s1.to_host().unwrap());
                let (y2, s2) = eag.eager(&mut w_eag, &x[..], 0.02, 0.1).unwrap();
                let (y2, s2) = (y2.to_host().unwrap(), s2.to_host().unwrap());
                assert!(
                    bitwise_eq(&y1, &y2),
                    "concurrent_ops={concurrent_ops} step {s}: y"
                );
                assert!(
                    bitwise_eq(&s1, &s2),
                    "concurrent_ops={concurrent_ops} step {s}: sum"
                );
            }
            assert!(
                bitwise_eq(&w_rep.to_host().unwrap(), &w_eag.to_host().unwrap()),
                "concurrent_ops={concurrent_ops}: weights"
            );
            let s = rep.stats();
            assert_eq!(
                (s.recordings, s.replays, s.eager_calls),
                (1, 20, 0),
                "{s:?}"
            );
            assert_eq!(s.launches_per_replay, 2 * LAYERS + 1);
        }
    });
}

#[test]
fn cuda_kernels_wait_for_a_programmatic_predecessor_on_hopper_and_not_before() {
    if !common::nvrtc_enabled() {
        return;
    }
    for k in [&layer::DEF, &total::DEF] {
        // Only the programmatic form (what PDL captures load) waits, and only from sm_90.
        for (arch, pdl, has) in [
            ("sm_90", true, true),
            ("sm_90", false, false),
            ("compute_80", true, false),
        ] {
            let plain = graphed::nvrtc::compile_variant(k, arch, false, pdl).unwrap();
            let checked = graphed::nvrtc::compile_variant(k, arch, true, pdl).unwrap();
            if !pdl {
                assert_eq!(plain, graphed::nvrtc::compile(k, arch).unwrap());
                assert_eq!(checked, graphed::nvrtc::compile_checked(k, arch).unwrap());
            }
            for (variant, ptx) in [("plain", plain), ("checked", checked)] {
                for ins in ["griddepcontrol.wait", "griddepcontrol.launch_dependents"] {
                    assert_eq!(
                        ptx.contains(ins),
                        has,
                        "{} ({variant}, pdl {pdl}) for {arch}: `{ins}` expected {has}",
                        k.name
                    );
                }
                if has {
                    // The wait comes before the kernel's first global load.
                    let wait = ptx.find("griddepcontrol.wait").unwrap();
                    let load = ptx.find("ld.global").unwrap_or(usize::MAX);
                    assert!(
                        wait < load,
                        "{} ({variant}): a load before the wait",
                        k.name
                    );
                }
            }
        }
    }
}

/// AdamW in three segments (`Adam::step_segments`), last parameters first, as a recorded step.
#[graphed]
fn segmented_update(
    cx: &mut Step,
    #[state] p: &mut Buffer<f32>,
    #[state] mv: &mut Buffer<f32>,
    #[state] count: &mut Buffer<u32>,
    g: &Input<f32>,
    lr: f32,
) -> Result<()> {
    let n = p.len();
    let config = graphed::kernels::optim::AdamW::default_config();
    let mut adam =
        graphed::kernels::optim::Adam::from_state(config, true, mv.clone(), count.clone())?;
    adam.step_segments(cx, p, g, lr, &[2 * n / 3..n, 0..n / 3, n / 3..2 * n / 3])
}

/// A segmented update replays bitwise as it runs eagerly and as one launch over all
/// parameters does, step after step; in the plan its launches follow one another (they share
/// the step counter), each after the one before it.
#[test]
fn a_segmented_update_replays_as_one_launch_and_its_launches_are_ordered() {
    let mut r = rng("segmented update");
    on_every_backend(|dev| {
        let n = 3000;
        let p0 = floats(&mut r, n, -1.0, 1.0);
        let state = || {
            (
                dev.upload(&p0).unwrap(),
                dev.alloc::<f32>(2 * n).unwrap(),
                dev.alloc::<u32>(3).unwrap(),
            )
        };
        let (mut p1, mut mv1, mut c1) = state();
        let (mut p2, mut mv2, mut c2) = state();
        let (mut p3, mv3, c3) = state();
        let mut one = graphed::kernels::optim::AdamW::from_state(
            graphed::kernels::optim::AdamW::default_config(),
            mv3,
            c3,
        )
        .unwrap();
        let (mut rep, mut eag) = (
            SegmentedUpdate::new(dev).unwrap(),
            SegmentedUpdate::new(dev).unwrap(),
        );
        for s in 0..6 {
            let g = floats(&mut r, n, -1.0, 1.0);
            let lr = 1e-2 / (1.0 + s as f32);
            rep.call(&mut p1, &mut mv1, &mut c1, &g[..], lr).unwrap();
            eag.eager(&mut p2, &mut mv2, &mut c2, &g[..], lr).unwrap();
            let gb = dev.upload(&g).unwrap();
            one.step(dev, &mut p3, &gb, lr).unwrap();
            let (a, b, c) = (
                p1.to_host().unwrap(),
                p2.to_host().unwrap(),
                p3.to_host().unwrap(),
            );
            assert!(
                bitwise_eq(&a, &b),
                "{} step {s}: replay ≠ eager",
                dev.kind()
            );
            assert!(
                bitwise_eq(&a, &c),
                "{} step {s}: segments ≠ one launch",
                dev.kind()
            );
            assert!(
                bitwise_eq(&mv1.to_host().unwrap(), &one.moments().to_host().unwrap()),
                "{} step {s}: moments",
                dev.kind()
            );
        }
        assert_eq!(c1.to_host().unwrap(), one.count().to_host().unwrap());
        assert_eq!(c1.to_host().unwrap()[1], 6);
        assert_eq!(rep.stats().recordings, 1);
        let plan = rep.plan().unwrap();
        let (ops, edges) = (plan.ops(), plan.edges());
        let launches: Vec<usize> = (0..3).map(|i| launch_index(&ops, "adam_step", i)).collect();
        assert!(
            edges.contains(&(launches[0], launches[1]))
                && edges.contains(&(launches[1], launches[2])),
            "the segments are not ordered: {edges:?}"
        );
    });
}
